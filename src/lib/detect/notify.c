/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_notify.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

int aj_notify_init(struct aj_notify *n, int listener_fd, struct aj_error *err)
{
    int r;

    n->fd = listener_fd;
    n->pending = false;
    n->foreign = false;
    n->req = NULL;
    n->resp = NULL;
    r = seccomp_notify_alloc(&n->req, &n->resp);
    if (r < 0)
        return aj_err(err, -r, "seccomp_notify_alloc");
    return 0;
}

void aj_notify_clear(struct aj_notify *n)
{
    if (n->req || n->resp)
        seccomp_notify_free(n->req, n->resp);
    n->req = NULL;
    n->resp = NULL;
    if (n->fd >= 0)
        (void)close(n->fd);
    n->fd = -1;
}

/* How each argument is shown: s string (read from the sandbox), f clone
 * flags, o ioctl command, d socket domain, t socket type, x hex, i int,
 * - not shown. */
static const struct {
    const char *name;
    const char *args;
    const char *technique;
} syscall_info[] = {
    {"mount", "sssxx", "T1611"},       {"umount2", "sx", "T1611"},
    {"pivot_root", "ss", "T1611"},     {"chroot", "s", "T1611"},
    {"open_tree", "isx", "T1611"},     {"move_mount", "isisx", "T1611"},
    {"fsopen", "sx", "T1611"},         {"fsconfig", "ixssi", "T1611"},
    {"fsmount", "ixx", "T1611"},       {"fspick", "isx", "T1611"},
    {"mount_setattr", "isx", "T1611"}, {"unshare", "f", "T1611"},
    {"setns", "if", "T1611"},          {"clone", "f", "T1611"},
    {"io_uring_setup", "ix", "T1068"}, {"io_uring_enter", "iiix", "T1068"},
    {"io_uring_register", "iix", "T1068"}, {"userfaultfd", "x", "T1068"},
    {"bpf", "ixi", "T1068"},           {"perf_event_open", "xiiix", "T1068"},
    {"keyctl", "ixxxx", "T1552"},      {"add_key", "ssxii", "T1552"},
    {"request_key", "ssx", "T1552"},   {"ptrace", "iixx", "T1055"},
    {"process_vm_readv", "ixixix", "T1055"}, {"process_vm_writev", "ixixix", "T1055"},
    {"pidfd_getfd", "iix", "T1055"},   {"kcmp", "iiixx", "T1055"},
    {"open_by_handle_at", "ixx", "T1611"}, {"name_to_handle_at", "isxxx", "T1611"},
    {"kexec_load", "xxxx", "T1611"},   {"kexec_file_load", "iixsx", "T1611"},
    {"init_module", "xxs", "T1611"},   {"finit_module", "isx", "T1611"},
    {"delete_module", "sx", "T1611"},  {"reboot", "xxxx", "T1611"},
    {"swapon", "sx", "T1611"},         {"swapoff", "s", "T1611"},
    {"acct", "s", "T1611"},            {"quotactl", "xsix", "T1611"},
    {"iopl", "i", "T1611"},            {"ioperm", "xxi", "T1611"},
    {"modify_ldt", "ixx", "T1611"},    {"syslog", "ixi", "T1082"},
    {"ioctl", "io", "T1611"},          {"socket", "dti", "T1040"},
    {"mknod", "sox", "T1611"},         {"mknodat", "isox", "T1611"},
    {"personality", "x", "T1611"},     {"settimeofday", "xx", "T1611"},
    {"clock_settime", "ix", "T1611"},  {"clock_adjtime", "ix", "T1611"},
    {"adjtimex", "x", "T1611"},        {"sethostname", "si", "T1611"},
    {"statmount", "xxxx", "T1613"},    {"listmount", "xxxx", "T1613"},
    /* Degraded mode: another process of the same uid (T1499 endpoint denial of service:
     * prlimit RLIMIT_CPU kills it; affinity and priority starve it). */
    {"prlimit64", "iixx", "T1499"},    {"setpriority", "iii", "T1499"},
    {"sched_setaffinity", "iix", "T1499"}, {"sched_setparam", "ix", "T1499"},
    {"sched_setscheduler", "iix", "T1499"}, {"sched_setattr", "ixx", "T1499"},
    {"get_robust_list", "ixx", "T1055"},
};

static const struct {
    unsigned long flag;
    const char *name;
} clone_flags[] = {
    {0x00020000, "CLONE_NEWNS"},  {0x02000000, "CLONE_NEWCGROUP"}, {0x04000000, "CLONE_NEWUTS"},
    {0x08000000, "CLONE_NEWIPC"}, {0x10000000, "CLONE_NEWUSER"},   {0x20000000, "CLONE_NEWPID"},
    {0x40000000, "CLONE_NEWNET"}, {0x00000080, "CLONE_NEWTIME"},
};

static const char *const af_names[] = {
    [1] = "AF_UNIX",        [2] = "AF_INET",       [3] = "AF_AX25",      [4] = "AF_IPX",
    [5] = "AF_APPLETALK",   [6] = "AF_NETROM",     [7] = "AF_BRIDGE",    [8] = "AF_ATMPVC",
    [9] = "AF_X25",         [10] = "AF_INET6",     [11] = "AF_ROSE",     [12] = "AF_DECnet",
    [13] = "AF_NETBEUI",    [14] = "AF_SECURITY",  [15] = "AF_KEY",      [16] = "AF_NETLINK",
    [17] = "AF_PACKET",     [18] = "AF_ASH",       [19] = "AF_ECONET",   [20] = "AF_ATMSVC",
    [21] = "AF_RDS",        [22] = "AF_SNA",       [23] = "AF_IRDA",     [24] = "AF_PPPOX",
    [25] = "AF_WANPIPE",    [26] = "AF_LLC",       [27] = "AF_IB",       [28] = "AF_MPLS",
    [29] = "AF_CAN",        [30] = "AF_TIPC",      [31] = "AF_BLUETOOTH", [32] = "AF_IUCV",
    [33] = "AF_RXRPC",      [34] = "AF_ISDN",      [35] = "AF_PHONET",   [36] = "AF_IEEE802154",
    [37] = "AF_CAIF",       [38] = "AF_ALG",       [39] = "AF_NFC",      [40] = "AF_VSOCK",
    [41] = "AF_KCM",        [42] = "AF_QIPCRTR",   [43] = "AF_SMC",      [44] = "AF_XDP",
    [45] = "AF_MCTP",
};

static const char *const netlink_names[] = {
    [0] = "NETLINK_ROUTE",      [2] = "NETLINK_USERSOCK",   [3] = "NETLINK_FIREWALL",
    [4] = "NETLINK_SOCK_DIAG",  [5] = "NETLINK_NFLOG",      [6] = "NETLINK_XFRM",
    [7] = "NETLINK_SELINUX",    [8] = "NETLINK_ISCSI",      [9] = "NETLINK_AUDIT",
    [10] = "NETLINK_FIB_LOOKUP", [11] = "NETLINK_CONNECTOR", [12] = "NETLINK_NETFILTER",
    [13] = "NETLINK_IP6_FW",    [14] = "NETLINK_DNRTMSG",   [15] = "NETLINK_KOBJECT_UEVENT",
    [16] = "NETLINK_GENERIC",   [18] = "NETLINK_SCSITRANSPORT", [19] = "NETLINK_ECRYPTFS",
    [20] = "NETLINK_RDMA",      [21] = "NETLINK_CRYPTO",    [22] = "NETLINK_SMC",
};

/* Newer than libseccomp's table (see seccomp.c's denied_by_number). */
static const struct {
    int nr;
    const char *name;
} newer_syscalls[] = {{457, "statmount"}, {458, "listmount"}};

/* Best effort, for the record: the string as it was when we looked. */
static json_t *read_string(pid_t pid, uint64_t addr)
{
    char buf[257];
    struct iovec local = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = sizeof(buf) - 1};
    ssize_t n;

    if (!addr)
        return json_null();
    n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
        /* Across a page boundary, a shorter read may still work. */
        remote.iov_len = local.iov_len = 4096 - (addr & 4095);
        if (remote.iov_len > sizeof(buf) - 1)
            remote.iov_len = local.iov_len = sizeof(buf) - 1;
        n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    }
    if (n <= 0)
        return json_string("(unreadable)");
    buf[n] = '\0';
    for (ssize_t i = 0; i < n && buf[i]; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f)
            buf[i] = '?';
    return json_string(buf);
}

static json_t *hex(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
    return json_string(buf);
}

static json_t *decode_flags(uint64_t v)
{
    char buf[256] = "";
    for (size_t i = 0; i < AJ_ARRAY_SIZE(clone_flags); i++)
        if (v & clone_flags[i].flag) {
            if (buf[0])
                strcat(buf, "|");
            strcat(buf, clone_flags[i].name);
        }
    if (!buf[0])
        snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
    return json_string(buf);
}

static json_t *decode_arg(char kind, pid_t pid, uint64_t v)
{
    switch (kind) {
    case 's':
        return read_string(pid, v);
    case 'f':
        return decode_flags(v);
    case 'i':
        return json_integer((json_int_t)(int64_t)(int32_t)v);
    case 'o':
        if ((uint32_t)v == 0x5412)
            return json_string("TIOCSTI");
        if ((uint32_t)v == 0x541C)
            return json_string("TIOCLINUX");
        if ((uint32_t)v == 0x541D)
            return json_string("TIOCCONS");
        if ((uint32_t)v == 0x5423)
            return json_string("TIOCSETD");
        return hex(v);
    case 'd':
        v = (uint32_t)v; /* an int to the kernel: the high bits are ignored */
        if (v < AJ_ARRAY_SIZE(af_names) && af_names[v])
            return json_string(af_names[v]);
        return json_integer((json_int_t)v);
    case 't':
        return (v & 0xf) == 3 ? json_string("SOCK_RAW") : hex(v);
    default:
        return hex(v);
    }
}

/* Degraded mode's calls that name a process (see seccomp.c's
 * self_only_syscalls): pid 0 never comes here; a nonzero pid that is the
 * caller's own thread or thread group (pthread_setaffinity_np passes the
 * tid, os.sched_setaffinity(os.getpid()) the tgid) is let through. The
 * decision rests on a register argument, not on sandbox memory, and the
 * caller is held in the kernel, so its tid cannot be reused meanwhile. */
static const char *const self_only[] = {
    "prlimit64", "sched_setaffinity", "sched_setparam", "sched_setscheduler", "sched_setattr",
    "get_robust_list", "setpriority",
};

static pid_t tgid_of(pid_t tid)
{
    char path[64], buf[1024], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    p = strstr(buf, "\nTgid:");
    if (!p)
        return -1;
    return (pid_t)strtol(p + 6, NULL, 10);
}

static bool targets_itself(const char *name, pid_t caller, const __u64 *args)
{
    uint64_t target = args[0];
    bool known = false;
    pid_t tgid;

    for (size_t i = 0; i < AJ_ARRAY_SIZE(self_only); i++)
        known |= strcmp(self_only[i], name) == 0;
    if (!known || caller <= 0)
        return false;
    if (strcmp(name, "setpriority") == 0) {
        if (args[0] != 0) /* PRIO_PROCESS only; PRIO_PGRP and PRIO_USER by id: no */
            return false;
        target = args[1];
    }
    if (target == 0 || target > 0x7fffffff)
        return false;
    if (target == (uint64_t)caller)
        return true;
    tgid = tgid_of(caller);
    return tgid > 0 && target == (uint64_t)tgid;
}

int aj_notify_receive(struct aj_notify *n, const struct aj_audit *a, json_t **ret_ev, enum aj_severity *ret_sev)
{
    struct seccomp_notif *req = n->req;
    bool foreign;
    char *name = NULL;
    const char *argspec = "xxxxxx", *technique = "T1611";
    json_t *ev, *args;

    *ret_ev = NULL;
    memset(req, 0, sizeof(*req));
    /* The ioctl itself, not seccomp_notify_receive(): libseccomp 2.5 turns
     * every failure into ECANCELED, and ENOENT (the caller was killed
     * between our poll and this receive) must not look like a dead
     * listener. A payload could otherwise kill its own notifying children
     * in a loop until we dropped the listener, and then make escape
     * attempts that nobody records. */
    if (ioctl(n->fd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0)
        return errno == ENOENT || errno == EINTR ? 0 : -errno;

    foreign = req->data.arch != AUDIT_ARCH_X86_64 || (req->data.nr & __X32_SYSCALL_BIT);
    if (!foreign) {
        name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, req->data.nr);
        for (size_t i = 0; !name && i < AJ_ARRAY_SIZE(newer_syscalls); i++)
            if ((int)req->data.nr == newer_syscalls[i].nr)
                name = strdup(newer_syscalls[i].name);
        for (size_t i = 0; name && i < AJ_ARRAY_SIZE(syscall_info); i++)
            if (strcmp(syscall_info[i].name, name) == 0) {
                argspec = syscall_info[i].args;
                technique = syscall_info[i].technique;
            }
    } else if (req->data.arch == AUDIT_ARCH_I386) {
        name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86, req->data.nr);
    } else {
        name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X32, req->data.nr);
    }

    if (!foreign && name && targets_itself(name, (pid_t)req->pid, req->data.args) &&
        seccomp_notify_id_valid(n->fd, req->id) == 0) {
        /* Its own thread or process: carry on, no event. Valid after the
         * /proc read, so the tgid read was the caller's. */
        struct seccomp_notif_resp *resp = n->resp;
        memset(resp, 0, sizeof(*resp));
        resp->id = req->id;
        resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        (void)seccomp_notify_respond(n->fd, resp);
        free(name);
        return 0;
    }

    *ret_sev = foreign ? AJ_SEV_CRITICAL : AJ_SEV_HIGH;
    ev = aj_audit_event(a, AJ_EV_ESCAPE_ATTEMPT, *ret_sev);
    args = json_array();
    for (size_t i = 0; args && !foreign && argspec[i] && i < 6; i++)
        (void)json_array_append_new(args, decode_arg(argspec[i], (pid_t)req->pid, req->data.args[i]));
    /* Strings were read from req->pid's memory. If the caller died since
     * the receive, that pid may already be another process's: what was
     * read is then not the caller's and must not reach the record. */
    if (args && strchr(argspec, 's') && !foreign && seccomp_notify_id_valid(n->fd, req->id) != 0) {
        json_decref(args);
        args = json_array();
        for (size_t i = 0; args && argspec[i] && i < 6; i++)
            (void)json_array_append_new(args, argspec[i] == 's' ? json_string("(caller gone)")
                                                                : decode_arg(argspec[i], 0, req->data.args[i]));
    }
    if (args && !foreign && name && strcmp(name, "socket") == 0) {
        uint32_t fam = (uint32_t)req->data.args[0], proto = (uint32_t)req->data.args[2];
        /* The rare families and netlink protocols are kernel exploit
         * surface, not sniffing; say which one in the arguments. */
        if (fam == 16 /* AF_NETLINK */) {
            if (proto < AJ_ARRAY_SIZE(netlink_names) && netlink_names[proto])
                (void)json_array_set_new(args, 2, json_string(netlink_names[proto]));
            technique = "T1068";
        } else if (fam != 2 && fam != 10 && fam != 17 && fam != 40) {
            technique = "T1068";
        }
    }
    if (ev) {
        (void)json_object_set_new(ev, "syscall", json_string(name ? name : "unknown"));
        (void)json_object_set_new(ev, "syscall_nr", json_integer((json_int_t)req->data.nr));
        (void)json_object_set_new(ev, "arch", json_string(req->data.arch == AUDIT_ARCH_X86_64
                                                              ? ((req->data.nr & __X32_SYSCALL_BIT) ? "x32" : "x86_64")
                                                              : req->data.arch == AUDIT_ARCH_I386 ? "i386" : "other"));
        (void)json_object_set_new(ev, "pid", json_integer(req->pid));
        (void)json_object_set_new(ev, "args", args ? args : json_array());
        (void)json_object_set_new(ev, "action", json_string(foreign ? "killed" : "denied"));
        aj_audit_technique(ev, foreign ? "T1611" : technique);
        if (foreign)
            (void)json_object_set_new(ev, "reason",
                                      json_string("system call through a foreign ABI (a filter-bypass technique)"));
    } else {
        json_decref(args);
    }
    free(name);

    n->pending = true;
    n->foreign = foreign;
    *ret_ev = ev;
    return 1;
}

int aj_notify_receive_bare(struct aj_notify *n, int *ret_nr, uint32_t *ret_arch)
{
    struct seccomp_notif *req = n->req;

    memset(req, 0, sizeof(*req));
    /* ENOENT: the caller died between poll and receive (see above). */
    if (ioctl(n->fd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0)
        return errno == ENOENT || errno == EINTR ? 0 : -errno;
    n->pending = true;
    n->foreign = req->data.arch != AUDIT_ARCH_X86_64 || (req->data.nr & __X32_SYSCALL_BIT);
    *ret_nr = req->data.nr;
    *ret_arch = req->data.arch;
    return 1;
}

char *aj_notify_syscall_name(int nr, uint32_t arch)
{
    if (arch == AUDIT_ARCH_X86_64 && !(nr & __X32_SYSCALL_BIT))
        return seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
    if (arch == AUDIT_ARCH_I386)
        return seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86, nr);
    if (arch == AUDIT_ARCH_X86_64)
        return seccomp_syscall_resolve_num_arch(SCMP_ARCH_X32, nr);
    return NULL;
}

void aj_notify_answer(struct aj_notify *n)
{
    struct seccomp_notif *req = n->req;
    struct seccomp_notif_resp *resp = n->resp;

    if (!n->pending)
        return;
    n->pending = false;
    if (n->foreign) {
        /* The kernel's own filter kills such a caller with SIGSYS; do the
         * same, through a pidfd, and only while the notification is still
         * live (so the pid cannot have been reused). */
        int pidfd = (int)syscall(__NR_pidfd_open, req->pid, 0);
        if (pidfd >= 0) {
            if (seccomp_notify_id_valid(n->fd, req->id) == 0)
                (void)aj_sys_pidfd_send_signal(pidfd, SIGSYS);
            (void)close(pidfd);
        }
    }
    /* Refused, whatever the arguments said. Never CONTINUE. */
    memset(resp, 0, sizeof(*resp));
    resp->id = req->id;
    resp->error = -EPERM;
    (void)seccomp_notify_respond(n->fd, resp); /* ENOENT: the caller is gone already */
}
