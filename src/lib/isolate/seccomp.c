/* SPDX-License-Identifier: Apache-2.0 */
/* The seccomp allow-list. A syscall not listed answers ENOSYS (as the
 * kernel does for one it does not know, so libc falls back where it can);
 * the escape-indicative ones are listed explicitly and answer EPERM.
 *
 * Layout choices:
 *  - Only the native x86_64 ABI is in the filter. libseccomp makes the
 *    filter check the arch first and, for x86_64, refuse syscall numbers
 *    with the x32 bit; both go to the bad-arch action, which kills the
 *    process (SIGSYS). That closes the "int 0x80 / x32 numbers bypass a
 *    native-only deny-list" class.
 *  - Unconditional allows dominate; argument checks exist only where the
 *    syscall is dangerous with some arguments (clone flags, ioctl
 *    TIOCSTI/TIOCLINUX, socket families, mknod types, personality). */
#include "aj_seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"

/* What a Python interpreter, a POSIX shell and coreutils use. */
static const char *const allowed_syscalls[] = {
    "read", "write", "close", "stat", "fstat", "lstat", "poll", "lseek", "mmap",
    "mprotect", "munmap", "brk", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "pread64",
    "pwrite64", "readv", "writev", "access", "pipe", "select", "sched_yield", "mremap", "msync",
    "mincore", "madvise", "shmget", "shmat", "shmctl", "dup", "dup2", "pause", "nanosleep",
    "getitimer", "alarm", "setitimer", "getpid", "sendfile", "connect", "accept", "sendto",
    "recvfrom", "sendmsg", "recvmsg", "shutdown", "bind", "listen", "getsockname", "getpeername",
    "setsockopt", "getsockopt", "fork", "vfork", "execve", "exit", "wait4", "kill", "uname",
    "semget", "semop", "semctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "fcntl", "flock",
    "fsync", "fdatasync", "truncate", "ftruncate", "getdents", "getcwd", "chdir", "fchdir", "rename",
    "mkdir", "rmdir", "link", "unlink", "symlink", "readlink", "chown",
    "fchown", "lchown", "umask", "gettimeofday", "getrlimit", "getrusage", "sysinfo", "times",
    "getuid", "getgid", "setuid", "setgid", "geteuid", "getegid", "setpgid", "getppid", "getpgrp",
    "setsid", "setreuid", "setregid", "getgroups", "setgroups", "setresuid", "getresuid",
    "setresgid", "getresgid", "getpgid", "setfsuid", "setfsgid", "getsid", "capget", "capset",
    "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_sigsuspend", "sigaltstack", "utime",
    "statfs", "fstatfs", "getpriority", "setpriority", "sched_setparam", "sched_getparam",
    "sched_setscheduler", "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "mlock", "munlock", "mlockall", "munlockall", "prctl", "arch_prctl",
    "setrlimit", "sync", "gettid", "readahead", "setxattr", "lsetxattr", "fsetxattr", "getxattr",
    "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
    "lremovexattr", "fremovexattr", "tkill", "time", "futex", "sched_setaffinity",
    "sched_getaffinity", "epoll_create", "getdents64", "set_tid_address", "restart_syscall",
    "semtimedop", "fadvise64", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
    "timer_delete", "clock_gettime", "clock_getres", "clock_nanosleep", "exit_group", "epoll_wait",
    "epoll_ctl", "tgkill", "utimes", "get_mempolicy",
    /* NUMA policy of the caller's own memory: procps and libnuma set it. */
    "set_mempolicy", "mbind", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr", "waitid", "inotify_init", "inotify_add_watch",
    "inotify_rm_watch", "mkdirat", "fchownat", "futimesat", "newfstatat", "unlinkat",
    "renameat", "linkat", "symlinkat", "readlinkat", "faccessat", "pselect6", "ppoll",
    "set_robust_list", "get_robust_list", "splice", "tee", "sync_file_range", "vmsplice",
    "utimensat", "epoll_pwait", "signalfd", "timerfd_create", "eventfd", "fallocate",
    "timerfd_settime", "timerfd_gettime", "accept4", "signalfd4", "eventfd2", "epoll_create1",
    "dup3", "pipe2", "inotify_init1", "preadv", "pwritev", "rt_tgsigqueueinfo", "recvmmsg",
    "prlimit64", "syncfs", "sendmmsg", "getcpu", "sched_setattr", "sched_getattr", "renameat2",
    "getrandom", "execveat", "membarrier", "copy_file_range", "preadv2", "pwritev2",
    "pkey_mprotect", "pkey_alloc", "pkey_free", "statx", "rseq", "pidfd_send_signal", "pidfd_open",
    "close_range", "faccessat2", "epoll_pwait2", "futex_waitv",
    /* Landlock can only ever add restrictions. */
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
};

/* Newer than libseccomp 2.5.4's table: allowed by number. */
static const struct {
    const char *name;
    int nr;
} allowed_by_number[] = {
    {"map_shadow_stack", 453},
    {"futex_wake", 454},
    {"futex_wait", 455},
    {"futex_requeue", 456},
};

/* Newer than libseccomp 2.5.4's table: refused (and reported) by number.
 * statmount/listmount (6.8) enumerate mounts by id (other mount
 * namespaces' too, from 6.11, where privileged; the host's whole tree in
 * degraded mode): reconnaissance the payload has no use for. */
static const struct {
    const char *name;
    int nr;
} denied_by_number[] = {
    {"statmount", 457},
    {"listmount", 458},
};

/* Refused with EPERM on purpose: each is a known escape or recon step in a
 * container (namespace re-entry, mount games, kernel attack surface,
 * cross-process access, host state). EPERM, not ENOSYS, so that libc does
 * not fall back to something else and the refusal is unambiguous. */
const char *const aj_seccomp_denied_syscalls[] = {
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "userfaultfd", "bpf", "perf_event_open", "keyctl",
    "add_key", "request_key", "ptrace", "process_vm_readv", "process_vm_writev",
    "open_by_handle_at", "name_to_handle_at", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "quotactl_fd", "iopl", "ioperm", "modify_ldt", "clock_settime", "clock_adjtime", "settimeofday",
    "adjtimex", "syslog", "lookup_dcookie", "vhangup", "kcmp", "pidfd_getfd", "process_madvise",
    "fanotify_init", "uselib", "ustat", "sysfs", "_sysctl", "move_pages", "migrate_pages",
    "sethostname", "setdomainname", "nfsservctl", "vserver",
    "create_module", "get_kernel_syms", "query_module", "afs_syscall", "tuxcall", "security",
    "memfd_secret", NULL,
};

/* Calls that act on another process named by a pid argument. In a pid
 * namespace that pid can only be one of the sandbox's own; in degraded mode
 * (no pid namespace) it can be any process of the same uid, which the
 * payload could then starve (sched_setaffinity, setpriority) or kill
 * (prlimit64 RLIMIT_CPU=1). There they are allowed with pid 0 (the caller:
 * what glibc's setrlimit, nice, sched_setaffinity(0) and Python's
 * os.sched_setaffinity(0) pass) and every other pid goes to the
 * supervisor, which lets the caller's own tid or tgid through and refuses
 * the rest (aj_notify). The pid is argument 0, except for setpriority
 * (which, who). */
static const char *const self_only_syscalls[] = {
    "prlimit64", "sched_setaffinity", "sched_setparam", "sched_setscheduler", "sched_setattr",
    "get_robust_list", "setpriority",
};

/* With policy.allow_ptrace (and a pid namespace): the debugging calls,
 * for any process but init. In the sandbox's pid namespace a pid can only
 * name one of its own processes; pid 1 is init, which holds the
 * supervisor's socket. Landlock confines ptrace to the same domain as
 * well, and the kernel (4.8+) runs the seccomp filter again after a
 * tracer changes a tracee's system call. */
static const char *const debug_syscalls[] = {"ptrace", "process_vm_readv", "process_vm_writev", "kcmp"};

static bool is_debug(const char *name)
{
    for (size_t i = 0; i < AJ_ARRAY_SIZE(debug_syscalls); i++)
        if (strcmp(debug_syscalls[i], name) == 0)
            return true;
    return false;
}

static bool is_self_only(const char *name)
{
    for (size_t i = 0; i < AJ_ARRAY_SIZE(self_only_syscalls); i++)
        if (strcmp(self_only_syscalls[i], name) == 0)
            return true;
    return false;
}

/* Netlink protocols refused with an event (kernel attack surface). */
const int aj_seccomp_denied_netlink[] = {
    2 /* USERSOCK */,  3 /* FIREWALL */,  NETLINK_SOCK_DIAG, 5 /* NFLOG */,     NETLINK_XFRM,
    7 /* SELINUX */,   8 /* ISCSI */,     NETLINK_AUDIT,     10 /* FIB_LOOKUP */, 11 /* CONNECTOR */,
    NETLINK_NETFILTER, 13 /* IP6_FW */,   14 /* DNRTMSG */,  NETLINK_GENERIC,   18 /* SCSITRANSPORT */,
    19 /* ECRYPTFS */, 20 /* RDMA */,     21 /* CRYPTO */,   22 /* SMC */,
};
const size_t aj_seccomp_denied_netlink_count = AJ_ARRAY_SIZE(aj_seccomp_denied_netlink);

#define NS_CLONE_FLAGS                                                                             \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |  \
     CLONE_NEWNET | CLONE_NEWTIME)

#define DEFAULT_ACTION SCMP_ACT_ERRNO(ENOSYS)

static int rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
                const struct scmp_arg_cmp *args, struct aj_error *err)
{
    int nr = seccomp_syscall_resolve_name(name);
    int r;

    if (nr == __NR_SCMP_ERROR)
        return 0; /* unknown to this libseccomp: the default (ENOSYS) covers it */
    if (action == DEFAULT_ACTION && n == 0)
        return 0; /* libseccomp refuses a rule that repeats the default */
    r = seccomp_rule_add_array(ctx, action, nr, n, args);
    if (r < 0)
        return aj_err(err, -r, "seccomp rule for %s", name);
    return 0;
}

/* No setuid or setgid file: writable binds are id-mapped to the workspace
 * owner, so a setuid file the payload made there would, on the host, run
 * as that owner for any local user who executes it (the sandbox's own
 * mounts are nosuid; the host's view of the workspace may not be). Every
 * call that sets a mode: allowed when the mode has neither bit, EPERM
 * when it has one (what the kernel says to an unprivileged chmod u+s of
 * a file it does not own). openat2 carries its mode in memory the filter
 * cannot read: ENOSYS, as on a kernel before 5.6 (callers fall back to
 * openat). */
static int add_setid_mode_rules(scmp_filter_ctx ctx, uint32_t allow, struct aj_error *err)
{
    static const struct {
        const char *name;
        int nr;       /* for names newer than libseccomp's table, else 0 */
        unsigned arg; /* which argument is the mode */
    } calls[] = {
        {"open", 0, 2},   {"openat", 0, 3},   {"creat", 0, 1},       {"chmod", 0, 1},
        {"fchmod", 0, 1}, {"fchmodat", 0, 2}, {"fchmodat2", 452, 2},
    };
    int r = 0;

    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(calls); i++) {
        int nr = seccomp_syscall_resolve_name(calls[i].name);
        if (nr == __NR_SCMP_ERROR)
            nr = calls[i].nr;
        if (nr <= 0)
            continue;
        struct scmp_arg_cmp ok = {calls[i].arg, SCMP_CMP_MASKED_EQ, S_ISUID | S_ISGID, 0};
        struct scmp_arg_cmp suid = {calls[i].arg, SCMP_CMP_MASKED_EQ, S_ISUID, S_ISUID};
        struct scmp_arg_cmp sgid = {calls[i].arg, SCMP_CMP_MASKED_EQ, S_ISGID, S_ISGID};
        r = seccomp_rule_add_array(ctx, allow, nr, 1, &ok);
        if (r == 0)
            r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &suid);
        if (r == 0)
            r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &sgid);
        if (r < 0)
            return aj_err(err, -r, "seccomp rule for %s", calls[i].name);
    }
    return rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "openat2", 0, NULL, err);
}

#define MFD_NOEXEC_SEAL_FLAG 0x0008U
#define MFD_EXEC_FLAG 0x0010U

/* socket() calls that the filter does not allow and that are no escape
 * attempt: answered with what a kernel that lacks the family, type or
 * protocol answers (net/socket.c __sock_create, net/ipv4/af_inet.c
 * inet_create, net/netlink/af_netlink.c netlink_create), never with the
 * ENOSYS default: programs probe for optional protocols and treat ENOSYS
 * as "no socket() at all" (CPython's socket tests failed to import).
 *  - inet/inet6 types with no protocol registered for them (SEQPACKET,
 *    which is SCTP's; RDM; DCCP; 0 and 7..9): ESOCKTNOSUPPORT; types 11..15:
 *    EINVAL; SOCK_PACKET (10) is an AF_PACKET socket in disguise
 *    (__sock_create turns it into one): refused and reported like AF_PACKET.
 *  - netlink protocols neither allowed (route) nor reported: EPROTONOSUPPORT.
 *  - family 0 (AF_UNSPEC) and numbers past the last family: EAFNOSUPPORT.
 * STREAM/DGRAM with another protocol: see the allow rules. */
static int add_socket_errno_rules(scmp_filter_ctx ctx, uint32_t deny, bool degraded, struct aj_error *err)
{
    static const int inet_families[] = {AF_INET, AF_INET6};
    int r = 0;

    for (size_t f = 0; r == 0 && f < AJ_ARRAY_SIZE(inet_families); f++)
        for (uint32_t type = 0; r == 0 && type <= 0xf; type++) {
            struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint32_t)inet_families[f]),
                                       SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, type)};
            uint32_t action;
            if (type == SOCK_STREAM || type == SOCK_DGRAM || type == SOCK_RAW)
                continue; /* allowed by protocol, or reported (raw) */
            if (type == SOCK_PACKET)
                action = deny;
            else if (type >= 11)
                action = SCMP_ACT_ERRNO(EINVAL);
            else
                action = SCMP_ACT_ERRNO(ESOCKTNOSUPPORT);
            r = rule(ctx, action, "socket", 2, a, err);
        }
    for (uint32_t proto = 1; r == 0 && proto < 32; proto++) {
        bool taken = degraded && proto == NETLINK_KOBJECT_UEVENT; /* the degraded EPERM rules */
        for (size_t i = 0; i < aj_seccomp_denied_netlink_count; i++)
            taken |= (uint32_t)aj_seccomp_denied_netlink[i] == proto;
        if (!taken) {
            struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_NETLINK),
                                       SCMP_A2_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, proto)};
            r = rule(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket", 2, a, err);
        }
    }
    if (r == 0) {
        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_NETLINK),
                                   SCMP_A2_32(SCMP_CMP_GT, 31)};
        r = rule(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket", 2, a, err);
    }
    if (r == 0) {
        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_UNSPEC)};
        r = rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, a, err);
    }
    if (r == 0) {
        struct scmp_arg_cmp a[] = {SCMP_A0_32(SCMP_CMP_GT, AJ_AF_LAST)};
        r = rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, a, err);
    }
    return r;
}

/* SOCK_DGRAM protocols above IPPROTO_UDP: UDP-Lite (136) is allowed,
 * everything else gets EPROTONOSUPPORT. UDP-Lite is UDP with a partial
 * checksum: net/ipv4/udplite.c and net/ipv6/udplite.c are thin wrappers
 * around the UDP code every sandbox already reaches, so allowing it adds
 * almost no kernel surface, while refusing it broke programs that take the
 * constant's presence as the protocol's (CPython's test_socket: its
 * UDP-Lite set-up errors crashed the whole module under regrtest). SCTP,
 * DCCP and MPTCP, separate protocol stacks with their own history of
 * memory-safety bugs (DCCP: CVE-2017-6074), stay refused.
 * libseccomp takes one comparison per argument in a rule, so the range
 * 18..135 is written as aligned power-of-two blocks (masked compares), and
 * the rules stay disjoint (libseccomp does not order overlapping ones). */
static int add_udplite_rules(scmp_filter_ctx ctx, uint32_t family, struct aj_error *err)
{
    static const struct {
        uint32_t start, size;
    } blocks[] = {{18, 2}, {20, 4}, {24, 8}, {32, 32}, {64, 64}, {128, 8}};
    int r = 0;

    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(blocks); i++) {
        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, family),
                                   SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM),
                                   SCMP_A2_32(SCMP_CMP_MASKED_EQ, ~(blocks[i].size - 1), blocks[i].start)};
        r = rule(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket", 3, a, err);
    }
    if (r == 0) {
        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, family),
                                   SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM),
                                   SCMP_A2_32(SCMP_CMP_EQ, IPPROTO_UDPLITE)};
        r = rule(ctx, SCMP_ACT_ALLOW, "socket", 3, a, err);
    }
    if (r == 0) {
        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, family),
                                   SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM),
                                   SCMP_A2_32(SCMP_CMP_GT, IPPROTO_UDPLITE)};
        r = rule(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket", 3, a, err);
    }
    return r;
}

static int add_conditional_rules(scmp_filter_ctx ctx, uint32_t deny, bool degraded, bool debug,
                                 bool memfd_sealed, struct aj_error *err)
{
    const uint32_t allow = SCMP_ACT_ALLOW;
    int r = 0;

    /* clone: plain fork/thread creation only. CLONE_NEWUSER is how an
     * attacker regains a full capability set; the other namespace flags
     * open kernel surface (mount, net) the sandbox closed. */
    {
        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, NS_CLONE_FLAGS, 0)};
        r = rule(ctx, allow, "clone", 1, a, err);
        /* ...and an explicit EPERM (not the ENOSYS default) for any flag. */
        for (unsigned bit = 0; r == 0 && bit < 64; bit++) {
            uint64_t f = 1ULL << bit;
            if (f & NS_CLONE_FLAGS) {
                struct scmp_arg_cmp d[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, f, f)};
                r = rule(ctx, deny, "clone", 1, d, err);
            }
        }
        if (r < 0)
            return r;
    }
    /* clone3 passes flags in memory the filter cannot read: ENOSYS makes
     * glibc fall back to clone(), whose flags we can check. */
    r = rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err);
    if (r < 0)
        return r;

    /* ioctl: all but the terminal commands that reach past the sandbox.
     * TIOCSTI pushes input into the terminal the sandbox shares with the
     * host (CVE-2017-5226, bwrap); TIOCLINUX can do the same on a VT;
     * TIOCCONS redirects the host's console output; TIOCSETD switches the
     * line discipline, whose less used ones (n_gsm, n_hdlc, ...) are a
     * repeated kernel exploit entry point (CVE-2023-6546, CVE-2017-2636).
     * The kernel reads only the low 32 bits of the command, so every
     * comparison is on those: a command with junk in the high bits is still
     * TIOCSTI to the kernel. libseccomp lets an unconditional allow override
     * conditional denials, so the allowed commands are spelled as ranges
     * around the denied ones (all in 0x5412..0x5423). */
    {
        static const uint32_t denied[] = {TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSETD};
        struct scmp_arg_cmp below[] = {SCMP_A1_64(SCMP_CMP_LT, TIOCSTI)};
        struct scmp_arg_cmp above[] = {SCMP_A1_64(SCMP_CMP_GT, TIOCSETD)};

        r = rule(ctx, allow, "ioctl", 1, below, err);
        if (r == 0)
            r = rule(ctx, allow, "ioctl", 1, above, err);
        for (uint32_t cmd = TIOCSTI + 1; r == 0 && cmd < TIOCSETD; cmd++) {
            struct scmp_arg_cmp eq[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, cmd)};
            bool deny_it = false;
            for (size_t i = 0; i < AJ_ARRAY_SIZE(denied); i++)
                deny_it |= cmd == denied[i];
            if (!deny_it)
                r = rule(ctx, allow, "ioctl", 1, eq, err);
        }
        for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(denied); i++) {
            struct scmp_arg_cmp eq[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, denied[i])};
            r = rule(ctx, deny, "ioctl", 1, eq, err);
        }
        if (r < 0)
            return r;
    }

    /* socket: unix, inet and inet6 stream/dgram, netlink route (getaddrinfo
     * and `ip addr` read interfaces with it). No AF_PACKET, no raw sockets
     * (traffic injection), no AF_VSOCK (reaches the hypervisor host, the
     * channel namespaces do not close). */
    {
        static const int inet_families[] = {AF_INET, AF_INET6};
        static const int inet_types[] = {SOCK_STREAM, SOCK_DGRAM};
        struct scmp_arg_cmp u[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_UNIX)};
        struct scmp_arg_cmp nl[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_NETLINK),
                                    SCMP_A2_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, NETLINK_ROUTE)};

        /* Refused loudly (EPERM and an event) rather than by the ENOSYS
         * default: AF_PACKET and AF_VSOCK, and every other family the
         * kernel knows but unix, inet, inet6 and netlink. Those are protocol
         * modules a payload has no use for and kernel exploits start from
         * (AF_ALG, AF_TIPC, AF_RDS, AF_XDP, AF_BLUETOOTH, AF_KEY, AF_PPPOX,
         * AF_LLC, AF_CAN, AF_SMC, ...; see docs/events.md). */
        for (uint32_t fam = 3; r == 0 && fam <= AJ_AF_LAST; fam++) {
            struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, fam)};
            if (fam != AF_INET6 && fam != AF_NETLINK)
                r = rule(ctx, deny, "socket", 1, a, err);
        }
        /* Netlink: route only (allowed below). The families that reach
         * kernel subsystems with a history of exploits (netfilter, xfrm,
         * audit, sock_diag, crypto, generic netlink, ...): refused and
         * reported. The rest (uevents, unknown numbers): the default. */
        for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(aj_seccomp_denied_netlink); i++) {
            struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_NETLINK),
                                       SCMP_A2_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL,
                                                  (uint32_t)aj_seccomp_denied_netlink[i])};
            r = rule(ctx, deny, "socket", 2, a, err);
        }
        for (size_t f = 0; r == 0 && f < AJ_ARRAY_SIZE(inet_families); f++) {
            struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint32_t)inet_families[f]),
                                       SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW)};
            r = rule(ctx, deny, "socket", 2, a, err);
        }
        if (r == 0)
            r = add_socket_errno_rules(ctx, deny, degraded, err);
        if (degraded) {
            /* No network namespace: an inet socket would reach the host's
             * network, a unix one the host's services (/run/...). Only
             * socketpair stays. Refused without an event (ordinary
             * programs try these); the escape-indicative families and raw
             * sockets above still reach the supervisor. Conditional rules
             * only: an unconditional one would override those. */
            static const int quiet_netlink[] = {NETLINK_ROUTE, NETLINK_KOBJECT_UEVENT};
            struct scmp_arg_cmp qu[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_UNIX)};
            r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 1, qu, err);
            /* Netlink by protocol: a rule on the family alone would take
             * precedence over the reported protocols above. */
            for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(quiet_netlink); i++) {
                struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_NETLINK),
                                           SCMP_A2_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint32_t)quiet_netlink[i])};
                r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 2, a, err);
            }
            for (size_t f = 0; r == 0 && f < AJ_ARRAY_SIZE(inet_families); f++)
                for (size_t t = 0; r == 0 && t < AJ_ARRAY_SIZE(inet_types); t++) {
                    struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint32_t)inet_families[f]),
                                               SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, (uint32_t)inet_types[t])};
                    r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 2, a, err);
                }
            if (r == 0)
                r = rule(ctx, allow, "socketpair", 1, u, err);
        } else {
            if (r == 0)
                r = rule(ctx, allow, "socket", 1, u, err);
            if (r == 0)
                r = rule(ctx, allow, "socketpair", 1, u, err);
            if (r == 0)
                r = rule(ctx, allow, "socket", 2, nl, err);
            /* Plain TCP and UDP (protocol 0 or the one named) and UDP-Lite
             * (add_udplite_rules says why): not MPTCP, SCTP, ICMP and other
             * protocol modules, attack surface the payload has no use for. */
            for (size_t f = 0; r == 0 && f < AJ_ARRAY_SIZE(inet_families); f++)
                for (size_t t = 0; r == 0 && t < AJ_ARRAY_SIZE(inet_types); t++) {
                    /* The type argument carries SOCK_CLOEXEC|SOCK_NONBLOCK in
                     * its high bits; compare the low nibble (the type). The
                     * protocol is an int to the kernel: its low 32 bits. */
                    uint32_t named = inet_types[t] == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP;
                    for (uint32_t proto = 0; r == 0 && proto <= named; proto++) {
                        struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint32_t)inet_families[f]),
                                                   SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, (uint32_t)inet_types[t]),
                                                   SCMP_A2_32(SCMP_CMP_EQ, proto)};
                        /* Another protocol (SCTP, UDP-Lite, MPTCP, ICMP):
                         * what a kernel without that protocol module says,
                         * EPROTONOSUPPORT, not ENOSYS (which reads as "no
                         * socket() at all" and made CPython's socket tests
                         * fail to import). Disjoint rules: libseccomp does
                         * not order overlapping ones. */
                        r = rule(ctx, proto == 0 || proto == named ? allow : SCMP_ACT_ERRNO(EPROTONOSUPPORT),
                                 "socket", 3, a, err);
                    }
                    if (r == 0 && inet_types[t] == SOCK_DGRAM)
                        r = add_udplite_rules(ctx, (uint32_t)inet_families[f], err);
                    else if (r == 0) {
                        struct scmp_arg_cmp above[] = {
                            SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint32_t)inet_families[f]),
                            SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, (uint32_t)inet_types[t]),
                            SCMP_A2_32(SCMP_CMP_GT, named)};
                        r = rule(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket", 3, above, err);
                    }
                }
        }
        if (r < 0)
            return r;
    }

    /* Degraded: the calls that name another process, for the caller only
     * (see self_only_syscalls). The kernel reads a pid_t (int) but the
     * comparisons are on all 64 bits: a pid 0 with junk in the high bits
     * goes to the supervisor, which refuses it, rather than through. */
    if (degraded) {
        for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(self_only_syscalls); i++) {
            const char *name = self_only_syscalls[i];
            if (strcmp(name, "setpriority") == 0) {
                /* PRIO_PROCESS or PRIO_PGRP with who 0: the caller, or its
                 * own process group (the payload is a session leader;
                 * setpgid cannot leave the session). PRIO_USER 0 would be
                 * every process of the uid. */
                for (uint64_t which = 0; r == 0 && which <= 1; which++) {
                    struct scmp_arg_cmp a[] = {SCMP_A0_64(SCMP_CMP_EQ, which), SCMP_A1_64(SCMP_CMP_EQ, 0)};
                    r = rule(ctx, allow, name, 2, a, err);
                }
                struct scmp_arg_cmp other_who[] = {SCMP_A1_64(SCMP_CMP_GT, 0)};
                struct scmp_arg_cmp other_which[] = {SCMP_A0_64(SCMP_CMP_GT, 1)};
                if (r == 0)
                    r = rule(ctx, deny, name, 1, other_who, err);
                if (r == 0)
                    r = rule(ctx, deny, name, 1, other_which, err);
            } else {
                struct scmp_arg_cmp self[] = {SCMP_A0_64(SCMP_CMP_EQ, 0)};
                struct scmp_arg_cmp other[] = {SCMP_A0_64(SCMP_CMP_GT, 0)};
                r = rule(ctx, allow, name, 1, self, err);
                if (r == 0)
                    r = rule(ctx, deny, name, 1, other, err);
            }
        }
        if (r < 0)
            return r;
    }

    /* The debugging calls (policy.allow_ptrace): every target but init,
     * whose pid (an int to the kernel: the low 32 bits) is refused and
     * reported. ptrace's pid is argument 1, process_vm_*'s argument 0,
     * kcmp compares two (arguments 0 and 1). Disjoint rules only. */
    if (debug) {
        struct scmp_arg_cmp pt_init[] = {SCMP_A1_32(SCMP_CMP_EQ, 1)};
        struct scmp_arg_cmp pt_other[] = {SCMP_A1_32(SCMP_CMP_NE, 1)};
        struct scmp_arg_cmp vm_init[] = {SCMP_A0_32(SCMP_CMP_EQ, 1)};
        struct scmp_arg_cmp vm_other[] = {SCMP_A0_32(SCMP_CMP_NE, 1)};
        struct scmp_arg_cmp k_first[] = {SCMP_A0_32(SCMP_CMP_EQ, 1)};
        struct scmp_arg_cmp k_second[] = {SCMP_A0_32(SCMP_CMP_NE, 1), SCMP_A1_32(SCMP_CMP_EQ, 1)};
        struct scmp_arg_cmp k_other[] = {SCMP_A0_32(SCMP_CMP_NE, 1), SCMP_A1_32(SCMP_CMP_NE, 1)};

        r = rule(ctx, deny, "ptrace", 1, pt_init, err);
        if (r == 0)
            r = rule(ctx, allow, "ptrace", 1, pt_other, err);
        for (int w = 0; r == 0 && w < 2; w++) {
            const char *name = w ? "process_vm_writev" : "process_vm_readv";
            r = rule(ctx, deny, name, 1, vm_init, err);
            if (r == 0)
                r = rule(ctx, allow, name, 1, vm_other, err);
        }
        if (r == 0)
            r = rule(ctx, deny, "kcmp", 1, k_first, err);
        if (r == 0)
            r = rule(ctx, deny, "kcmp", 2, k_second, err);
        if (r == 0)
            r = rule(ctx, allow, "kcmp", 2, k_other, err);
        if (r < 0)
            return r;
    }

    /* memfd_create: only sealed non-executable (MFD_NOEXEC_SEAL, 6.3). Landlock
     * does not cover memfds, so an executable one would let the payload run
     * a binary it wrote (fileless execution past the noexec mounts). Where
     * the sandbox's pid namespace has vm.memfd_noexec=2 (memfd_sealed), the
     * kernel gives a call without flags MFD_NOEXEC_SEAL itself: those are
     * allowed too (CPython's os.memfd_create(name) passes none); MFD_EXEC
     * stays EPERM (the kernel would say EACCES). */
    if (memfd_sealed) {
        struct scmp_arg_cmp plain[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, MFD_NOEXEC_SEAL_FLAG | MFD_EXEC_FLAG, 0)};
        struct scmp_arg_cmp sealed[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, MFD_NOEXEC_SEAL_FLAG | MFD_EXEC_FLAG,
                                                   MFD_NOEXEC_SEAL_FLAG)};
        struct scmp_arg_cmp exec[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, MFD_EXEC_FLAG, MFD_EXEC_FLAG)};
        r = rule(ctx, allow, "memfd_create", 1, plain, err);
        if (r == 0)
            r = rule(ctx, allow, "memfd_create", 1, sealed, err);
        if (r == 0)
            r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "memfd_create", 1, exec, err);
        if (r < 0)
            return r;
    } else {
        struct scmp_arg_cmp m[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, MFD_NOEXEC_SEAL_FLAG | MFD_EXEC_FLAG,
                                              MFD_NOEXEC_SEAL_FLAG)};
        r = rule(ctx, allow, "memfd_create", 1, m, err);
        /* The other flag combinations: EPERM, said plainly. */
        for (uint32_t v = 0; r == 0 && v <= (MFD_NOEXEC_SEAL_FLAG | MFD_EXEC_FLAG); v += MFD_NOEXEC_SEAL_FLAG) {
            struct scmp_arg_cmp d[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, MFD_NOEXEC_SEAL_FLAG | MFD_EXEC_FLAG, v)};
            if (v != MFD_NOEXEC_SEAL_FLAG)
                r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "memfd_create", 1, d, err);
        }
        if (r < 0)
            return r;
    }

    r = add_setid_mode_rules(ctx, allow, err);
    if (r < 0)
        return r;

    /* mknod: fifos, sockets and plain files only; device nodes would give
     * direct access to hardware or kernel memory (/dev/mem, disks). Never
     * with the setuid or setgid bit (see add_setid_mode_rules). */
    {
        static const uint32_t types[] = {S_IFIFO, S_IFREG, S_IFSOCK, 0};
        for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(types); i++) {
            struct scmp_arg_cmp m[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, S_IFMT | S_ISUID | S_ISGID, types[i])};
            struct scmp_arg_cmp mat[] = {SCMP_A2_64(SCMP_CMP_MASKED_EQ, S_IFMT | S_ISUID | S_ISGID, types[i])};
            r = rule(ctx, allow, "mknod", 1, m, err);
            if (r == 0)
                r = rule(ctx, allow, "mknodat", 1, mat, err);
            for (int b = 0; r == 0 && b < 2; b++) {
                uint32_t bit = b ? S_ISGID : S_ISUID;
                struct scmp_arg_cmp sm[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, S_IFMT | bit, types[i] | bit)};
                struct scmp_arg_cmp smat[] = {SCMP_A2_64(SCMP_CMP_MASKED_EQ, S_IFMT | bit, types[i] | bit)};
                r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "mknod", 1, sm, err);
                if (r == 0)
                    r = rule(ctx, SCMP_ACT_ERRNO(EPERM), "mknodat", 1, smat, err);
            }
        }
        static const uint32_t devtypes[] = {S_IFCHR, S_IFBLK};
        for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(devtypes); i++) {
            struct scmp_arg_cmp m[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, S_IFMT, devtypes[i])};
            struct scmp_arg_cmp mat[] = {SCMP_A2_64(SCMP_CMP_MASKED_EQ, S_IFMT, devtypes[i])};
            r = rule(ctx, deny, "mknod", 1, m, err);
            if (r == 0)
                r = rule(ctx, deny, "mknodat", 1, mat, err);
        }
        /* The other file types: what the kernel says (fs/namei.c
         * may_mknod), not ENOSYS: EPERM for a directory, EINVAL for a
         * symlink or a type that does not exist. */
        for (uint32_t t = 0x1000; r == 0 && t <= S_IFMT; t += 0x1000) {
            struct scmp_arg_cmp m[] = {SCMP_A1_64(SCMP_CMP_MASKED_EQ, S_IFMT, t)};
            struct scmp_arg_cmp mat[] = {SCMP_A2_64(SCMP_CMP_MASKED_EQ, S_IFMT, t)};
            uint32_t action = SCMP_ACT_ERRNO(t == S_IFDIR ? EPERM : EINVAL);
            if (t == S_IFIFO || t == S_IFREG || t == S_IFSOCK || t == S_IFCHR || t == S_IFBLK)
                continue;
            r = rule(ctx, action, "mknod", 1, m, err);
            if (r == 0)
                r = rule(ctx, action, "mknodat", 1, mat, err);
        }
        if (r < 0)
            return r;
    }

    /* personality: reading it (0xffffffff), or setting plain Linux (0).
     * READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE and friends weaken exploit
     * mitigations: EPERM for 1..0xfffffffe. */
    {
        struct scmp_arg_cmp q[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, 0xffffffffU)};
        struct scmp_arg_cmp l[] = {SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, 0)};
        struct scmp_arg_cmp other[] = {SCMP_A0_64(SCMP_CMP_GT, 0)};
        r = rule(ctx, allow, "personality", 1, q, err);
        if (r == 0)
            r = rule(ctx, allow, "personality", 1, l, err);
        if (r == 0)
            r = rule(ctx, deny, "personality", 1, other, err);
        if (r < 0)
            return r;
    }
    return 0;
}

int aj_seccomp_compile(const struct aj_policy *pol, bool notify, bool degraded, struct aj_bpf *ret,
                       struct aj_error *err)
{
    return aj_seccomp_compile_ex(pol, notify, degraded, false, ret, err);
}

/* ctx's program into ret (owned, malloc'd): libseccomp writes it to a
 * memfd, read back whole. */
int aj_seccomp_export(scmp_filter_ctx ctx, struct aj_bpf *ret, struct aj_error *err)
{
    _cleanup_close_ int memfd = memfd_create("agentjail-bpf", MFD_CLOEXEC);
    struct stat st;
    void *buf;
    int r;

    if (memfd < 0)
        return aj_err(err, errno, "memfd_create");
    r = seccomp_export_bpf(ctx, memfd);
    if (r < 0)
        return aj_err(err, -r, "seccomp_export_bpf");
    if (fstat(memfd, &st) < 0 || st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter))
        return aj_err(err, EIO, "exported seccomp filter has a bad size");
    buf = malloc((size_t)st.st_size);
    if (!buf)
        return aj_err(err, ENOMEM, "seccomp filter buffer");
    if (pread(memfd, buf, (size_t)st.st_size, 0) != st.st_size) {
        free(buf);
        return aj_err(err, EIO, "read back seccomp filter");
    }
    ret->insns = buf;
    ret->len = (size_t)st.st_size / sizeof(struct sock_filter);
    ret->owned = true;
    return 0;
}

int aj_seccomp_compile_ex(const struct aj_policy *pol, bool notify, bool degraded, bool memfd_sealed,
                          struct aj_bpf *ret, struct aj_error *err)
{
    /* With monitoring, every escape-indicative call goes to the supervisor,
     * which records it and answers EPERM (or kills); without, the kernel
     * answers EPERM itself. Benign syscalls take the same path either way. */
    const uint32_t deny = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EPERM);
    scmp_filter_ctx ctx;
    bool debug;
    int r;

    /* Without a pid namespace (degraded) a pid names any process of the
     * uid: the debugging calls stay refused whatever the policy says. */
    debug = pol && pol->allow_ptrace && !degraded;
    ctx = seccomp_init(DEFAULT_ACTION);
    if (!ctx)
        return aj_err(err, ENOMEM, "seccomp_init");
    /* Kill the whole process on a foreign ABI (i386 int 0x80, x32): there is
     * no legitimate reason for it here, and it is a classic filter bypass. */
    /* Monitored: the supervisor records the attempt, then kills the process
     * with SIGSYS, as the kernel would (see aj_notify). */
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, notify ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS);
    if (r == 0)
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* we set it ourselves, and check */
    /* Binary-tree layout: fewer comparisons per syscall than a linear list. */
    if (r == 0)
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (r < 0) {
        seccomp_release(ctx);
        return aj_err(err, -r, "seccomp attributes");
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(allowed_syscalls); i++) {
        if (degraded && is_self_only(allowed_syscalls[i]))
            continue; /* conditional rules below */
        r = rule(ctx, SCMP_ACT_ALLOW, allowed_syscalls[i], 0, NULL, err);
        if (r < 0)
            goto out;
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(allowed_by_number); i++) {
        if (seccomp_syscall_resolve_name(allowed_by_number[i].name) != __NR_SCMP_ERROR)
            r = rule(ctx, SCMP_ACT_ALLOW, allowed_by_number[i].name, 0, NULL, err);
        else
            r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed_by_number[i].nr, 0);
        if (r < 0) {
            r = aj_err(err, -r, "seccomp rule for %s", allowed_by_number[i].name);
            goto out;
        }
    }
    for (size_t i = 0; aj_seccomp_denied_syscalls[i]; i++) {
        if (debug && is_debug(aj_seccomp_denied_syscalls[i]))
            continue; /* conditional rules below */
        r = rule(ctx, deny, aj_seccomp_denied_syscalls[i], 0, NULL, err);
        if (r < 0)
            goto out;
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(denied_by_number); i++) {
        if (seccomp_syscall_resolve_name(denied_by_number[i].name) != __NR_SCMP_ERROR)
            r = rule(ctx, deny, denied_by_number[i].name, 0, NULL, err);
        else
            r = seccomp_rule_add(ctx, deny, denied_by_number[i].nr, 0);
        if (r < 0) {
            r = aj_err(err, -r, "seccomp rule for %s", denied_by_number[i].name);
            goto out;
        }
    }
    r = add_conditional_rules(ctx, deny, degraded, debug, memfd_sealed, err);
    if (r < 0)
        goto out;

    r = aj_seccomp_export(ctx, ret, err);
    if (r < 0)
        goto out;
    ret->notify = notify;
    r = 0;
out:
    seccomp_release(ctx);
    return r;
}

#ifndef AJ_SECCOMP_NO_PRECOMPILED
/* Generated at build time by tools/gen-seccomp.c from aj_seccomp_compile()
 * with the default policy: libseccomp's compilation takes ~1.8 ms, longer
 * than the rest of a sandbox start, and gives the same program each time. */
extern const struct sock_filter aj_seccomp_notify_insns[];
extern const size_t aj_seccomp_notify_len;
extern const struct sock_filter aj_seccomp_errno_insns[];
extern const size_t aj_seccomp_errno_len;
extern const struct sock_filter aj_seccomp_notify_memfd_insns[];
extern const size_t aj_seccomp_notify_memfd_len;

int aj_seccomp_build_memfd_sealed(const struct aj_policy *pol, bool notify, struct aj_bpf *ret,
                                  struct aj_error *err)
{
    if (!notify || (pol && pol->allow_ptrace))
        return aj_seccomp_compile_ex(pol, notify, false, true, ret, err);
    ret->insns = (struct sock_filter *)aj_seccomp_notify_memfd_insns;
    ret->len = aj_seccomp_notify_memfd_len;
    ret->owned = false;
    ret->notify = notify;
    return 0;
}

int aj_seccomp_build(const struct aj_policy *pol, bool notify, struct aj_bpf *ret, struct aj_error *err)
{
    /* The precompiled program is the default policy's; seccomp.allow_ptrace
     * changes it, and is compiled here (~2 ms). */
    if (pol && pol->allow_ptrace)
        return aj_seccomp_compile(pol, notify, false, ret, err);
    ret->insns = (struct sock_filter *)(notify ? aj_seccomp_notify_insns : aj_seccomp_errno_insns);
    ret->len = notify ? aj_seccomp_notify_len : aj_seccomp_errno_len;
    ret->owned = false;
    ret->notify = notify;
    return 0;
}
#endif

void aj_seccomp_clear(struct aj_bpf *bpf)
{
    if (!bpf)
        return;
    if (bpf->owned)
        free(bpf->insns);
    bpf->insns = NULL;
    bpf->len = 0;
}

int aj_seccomp_child_load(const struct aj_bpf *bpf, struct aj_error *err)
{
    struct sock_fprog prog = {.len = (unsigned short)bpf->len, .filter = bpf->insns};
    long r;

    if (bpf->len == 0 || bpf->len > 4096)
        return aj_err(err, EINVAL, "seccomp filter length %zu", bpf->len);
    /* TSYNC is not needed: the payload is single-threaded here. SPEC_ALLOW is
     * deliberately not set: keep the kernel's speculation mitigations.
     * NEW_LISTENER (5.0) returns the fd the supervisor answers on. */
    r = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, bpf->notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
    if (r < 0)
        return aj_err(err, errno, "load seccomp filter");
    return bpf->notify ? (int)r : 0;
}
