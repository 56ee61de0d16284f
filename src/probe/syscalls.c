/* SPDX-License-Identifier: Apache-2.0 */
/* Is each dangerous syscall family permitted?
 *
 * Each attempt runs in its own child (util.c: pr_in_child), so a seccomp
 * kill, a changed namespace or an I/O privilege level dies with it. The
 * arguments are chosen so that the kernel refuses them only AFTER its
 * permission check: EPERM/EACCES (no privilege, an LSM, or a filter) and
 * ENOSYS (filtered, or not built in) mean blocked; EINVAL, ENOENT, EBADF,
 * ... mean the call got through and would have worked with real
 * arguments. Nothing is mounted, loaded, rebooted or swapped: a missing
 * source path, a zero-length module, 1000 kexec segments, a bad reboot
 * magic. Families marked GATE_FILTER are open to any user by design;
 * there "permitted" means no filter stands in front of that kernel code. */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"
#include "probe.h"

/* A path that exists nowhere: lookups of it fail with ENOENT. */
#define NOPATH "/nonexistent-agentjail-probe/x"
#define PR_X32_SYSCALL_BIT 0x40000000L
#define PR_X32_NR_GETPID 39
#define PR_I386_NR_GETPID 20L
#define PR_FILEID_INO32_GEN 1
#define PR_KEYCTL_BAD_OP 0x7fff
#define PR_BPF_BAD_CMD 0x7fff
#define PR_FSOPEN_BAD_FLAGS 0x2U   /* only FSOPEN_CLOEXEC (1) is valid */
#define PR_UFFD_BAD_FLAGS 0x100000 /* not O_CLOEXEC, O_NONBLOCK or UFFD_USER_MODE_ONLY */

enum gate {
    GATE_PRIV,   /* the kernel checks privilege first: the errno tells */
    GATE_FILTER, /* callable by anyone: only a filter (or a sysctl) refuses */
};
enum expect {
    EXPECT_ERRNO, /* judge by return value and errno */
    EXPECT_PID,   /* a getpid through another ABI: permitted if it returns our pid */
};

struct attempt {
    const char *what;
    long (*fn)(void *arg, long *aux);
    enum expect expect;
};

struct family {
    const char *id;
    const char *title;
    enum pr_sev sev;
    enum gate gate;
    const char *sysctl; /* read-only context for the detail, or NULL */
    struct attempt tries[3];
};

/* ---- the attempts ---------------------------------------------------- */

static long a_mount_move(void *arg, long *aux)
{
    (void)arg, (void)aux;
    /* MS_MOVE of a missing source: ENOENT once may_mount() passed. */
    return syscall(SYS_mount, NOPATH, "/", NULL, (unsigned long)MS_MOVE, NULL);
}

static long a_fsopen(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(__NR_fsopen, "tmpfs", PR_FSOPEN_BAD_FLAGS);
}

static long a_open_tree(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(__NR_open_tree, AT_FDCWD, NOPATH, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
}

static long a_setns(void *arg, long *aux)
{
    /* Re-entering our own UTS namespace changes nothing but needs
     * CAP_SYS_ADMIN; without /proc, setns(-1) still shows a filter. */
    int fd = open("/proc/self/ns/uts", O_RDONLY | O_CLOEXEC);

    (void)arg;
    *aux = fd < 0;
    return syscall(SYS_setns, fd, CLONE_NEWUTS);
}

static long a_bpf(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_bpf, PR_BPF_BAD_CMD, NULL, 0U);
}

static long a_perf(void *arg, long *aux)
{
    struct perf_event_attr attr;

    (void)arg, (void)aux;
    memset(&attr, 0, sizeof(attr));
    attr.size = 1; /* smaller than any version of the struct: E2BIG */
    return syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0UL);
}

static long a_io_uring(void *arg, long *aux)
{
    struct io_uring_params params;

    (void)arg, (void)aux;
    memset(&params, 0, sizeof(params));
    /* 0 entries: EINVAL after the io_uring_disabled check (6.6+). */
    return syscall(SYS_io_uring_setup, 0U, &params);
}

static long a_userfaultfd(void *arg, long *aux)
{
    (void)arg, (void)aux;
    /* Without UFFD_USER_MODE_ONLY the privilege check (CAP_SYS_PTRACE or
     * vm.unprivileged_userfaultfd) comes before the flags check. */
    return syscall(SYS_userfaultfd, PR_UFFD_BAD_FLAGS);
}

static long a_keyctl(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_keyctl, PR_KEYCTL_BAD_OP, 0L, 0L, 0L, 0L);
}

static long a_ptrace(void *arg, long *aux)
{
    /* Only ever our own, fresh child: PTRACE_SEIZE does not stop it, and
     * it is killed at once. */
    pid_t kid = fork();
    long r;
    int e;

    (void)arg, (void)aux;
    if (kid == 0) {
        alarm(5);
        pause();
        _exit(0);
    }
    if (kid < 0)
        return -1;
    r = ptrace(PTRACE_SEIZE, kid, NULL, NULL);
    e = errno;
    (void)kill(kid, SIGKILL); /* ours; reaped just below */
    (void)waitpid(kid, NULL, 0);
    errno = e;
    return r;
}

static long a_process_vm_readv(void *arg, long *aux)
{
    static volatile char mark = 'x';
    char got;
    struct iovec local = {&got, 1}, remote = {(void *)&mark, 1};

    (void)arg, (void)aux;
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
}

static long a_open_by_handle(void *arg, long *aux)
{
    struct {
        unsigned int handle_bytes;
        int handle_type;
        uint32_t f_handle[2];
    } fh = {sizeof(fh.f_handle), PR_FILEID_INO32_GEN, {0, 0}};

    (void)arg, (void)aux;
    /* A well-formed handle for inode 0 (which no filesystem has): EPERM
     * without CAP_DAC_READ_SEARCH, ESTALE with it. Since 6.x the handle's
     * shape is checked before the capability, so an empty handle would say
     * EINVAL to anyone. */
    return syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY | O_CLOEXEC);
}

static long a_kexec(void *arg, long *aux)
{
    (void)arg, (void)aux;
    /* 1000 segments (the limit is 16) and a foreign arch: EINVAL. Never 0
     * segments: that would unload a loaded crash kernel. */
    return syscall(SYS_kexec_load, 0UL, 1000UL, NULL, 0x7fff0000UL);
}

static long a_init_module(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_init_module, NULL, 0UL, ""); /* empty image: ENOEXEC */
}

static long a_finit_module(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_finit_module, -1, "", 0); /* EBADF */
}

static long a_reboot(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_reboot, 0, 0, 0U, NULL); /* wrong magic: EINVAL */
}

static long a_swapon(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_swapon, NOPATH, 0); /* ENOENT */
}

#if defined(__x86_64__)
static long a_iopl(void *arg, long *aux)
{
    (void)arg, (void)aux;
    /* Level 1 passes the CAP_SYS_RAWIO check but grants no port (only 3
     * does), and the child exits straight after. */
    return syscall(SYS_iopl, 1);
}

static long a_ioperm(void *arg, long *aux)
{
    (void)arg, (void)aux;
    return syscall(SYS_ioperm, 0xffffUL, 1UL, 1); /* an unused port; never touched */
}

static long a_x32(void *arg, long *aux)
{
    (void)arg;
    *aux = getpid();
    return syscall(PR_X32_SYSCALL_BIT | PR_X32_NR_GETPID);
}

static long a_int80(void *arg, long *aux)
{
    long r = PR_I386_NR_GETPID;

    (void)arg;
    *aux = getpid();
    __asm__ volatile("int $0x80" : "+a"(r) : : "memory", "cc", "r8", "r9", "r10", "r11");
    r = (int)r; /* the i386 entry returns a 32-bit value */
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
#endif

/* ---- the table -------------------------------------------------------- */

static const struct family families[] = {
    {"syscalls.mount",
     "mount and the new mount API",
     PR_SEV_CRITICAL,
     GATE_PRIV,
     NULL,
     {{"mount(MS_MOVE)", a_mount_move, EXPECT_ERRNO},
      {"fsopen", a_fsopen, EXPECT_ERRNO},
      {"open_tree(OPEN_TREE_CLONE)", a_open_tree, EXPECT_ERRNO}}},
    {"syscalls.setns",
     "setns into a namespace",
     PR_SEV_HIGH,
     GATE_PRIV,
     NULL,
     {{"setns(own uts)", a_setns, EXPECT_ERRNO}}},
    {"syscalls.bpf",
     "bpf",
     PR_SEV_HIGH,
     GATE_FILTER,
     "/proc/sys/kernel/unprivileged_bpf_disabled",
     {{"bpf(bad cmd)", a_bpf, EXPECT_ERRNO}}},
    {"syscalls.perf_event_open",
     "perf_event_open",
     PR_SEV_MEDIUM,
     GATE_FILTER,
     "/proc/sys/kernel/perf_event_paranoid",
     {{"perf_event_open(attr.size=1)", a_perf, EXPECT_ERRNO}}},
    {"syscalls.io_uring",
     "io_uring",
     PR_SEV_HIGH,
     GATE_PRIV,
     "/proc/sys/kernel/io_uring_disabled",
     {{"io_uring_setup(0)", a_io_uring, EXPECT_ERRNO}}},
    {"syscalls.userfaultfd",
     "userfaultfd (kernel-mode faults)",
     PR_SEV_MEDIUM,
     GATE_PRIV,
     "/proc/sys/vm/unprivileged_userfaultfd",
     {{"userfaultfd(bad flags)", a_userfaultfd, EXPECT_ERRNO}}},
    {"syscalls.keyctl",
     "kernel keyrings",
     PR_SEV_MEDIUM,
     GATE_FILTER,
     NULL,
     {{"keyctl(bad op)", a_keyctl, EXPECT_ERRNO}}},
    {"syscalls.ptrace",
     "ptrace",
     PR_SEV_MEDIUM,
     GATE_FILTER,
     "/proc/sys/kernel/yama/ptrace_scope",
     {{"ptrace(PTRACE_SEIZE, own child)", a_ptrace, EXPECT_ERRNO}}},
    {"syscalls.process_vm_readv",
     "process_vm_readv",
     PR_SEV_MEDIUM,
     GATE_FILTER,
     NULL,
     {{"process_vm_readv(self)", a_process_vm_readv, EXPECT_ERRNO}}},
    {"syscalls.open_by_handle_at",
     "open_by_handle_at (\"shocker\")",
     PR_SEV_CRITICAL,
     GATE_PRIV,
     NULL,
     {{"open_by_handle_at(inode 0)", a_open_by_handle, EXPECT_ERRNO}}},
    {"syscalls.kexec_load",
     "kexec_load",
     PR_SEV_CRITICAL,
     GATE_PRIV,
     "/proc/sys/kernel/kexec_load_disabled",
     {{"kexec_load(1000 segments)", a_kexec, EXPECT_ERRNO}}},
    {"syscalls.init_module",
     "kernel module loading",
     PR_SEV_CRITICAL,
     GATE_PRIV,
     "/proc/sys/kernel/modules_disabled",
     {{"init_module(empty image)", a_init_module, EXPECT_ERRNO},
      {"finit_module(-1)", a_finit_module, EXPECT_ERRNO}}},
    {"syscalls.reboot",
     "reboot",
     PR_SEV_HIGH,
     GATE_PRIV,
     NULL,
     {{"reboot(bad magic)", a_reboot, EXPECT_ERRNO}}},
    {"syscalls.swapon",
     "swapon",
     PR_SEV_MEDIUM,
     GATE_PRIV,
     NULL,
     {{"swapon(missing file)", a_swapon, EXPECT_ERRNO}}},
#if defined(__x86_64__)
    {"syscalls.ioport",
     "raw I/O ports (iopl, ioperm)",
     PR_SEV_CRITICAL,
     GATE_PRIV,
     NULL,
     {{"iopl(1)", a_iopl, EXPECT_ERRNO}, {"ioperm(0xffff)", a_ioperm, EXPECT_ERRNO}}},
    {"syscalls.compat_abi",
     "x32 and i386 syscall entry points",
     PR_SEV_LOW,
     GATE_FILTER,
     NULL,
     {{"x32 getpid", a_x32, EXPECT_PID}, {"int 0x80 getpid", a_int80, EXPECT_PID}}},
#endif
};

enum verdict { V_PERMITTED, V_BLOCKED, V_UNKNOWN };

static enum verdict judge(const struct attempt *t, char *note, size_t cap)
{
    struct pr_child_out o;
    int r = pr_in_child(t->fn, NULL, &o);

    if (r < 0) {
        snprintf(note, cap, "%s: probe child failed (%s)", t->what, pr_errname(-r));
        return V_UNKNOWN;
    }
    if (o.signo == SIGSYS) {
        snprintf(note, cap, "%s: killed by SIGSYS (seccomp)", t->what);
        return V_BLOCKED;
    }
    if (o.signo) {
        snprintf(note, cap, "%s: probe child died of %s", t->what, strsignal(o.signo));
        return V_UNKNOWN;
    }
    if (t->expect == EXPECT_PID) {
        if (o.r == o.aux) {
            snprintf(note, cap, "%s: answered", t->what);
            return V_PERMITTED;
        }
        snprintf(note, cap, "%s: %s", t->what, o.r < 0 ? pr_errname(o.err) : "wrong answer");
        return V_BLOCKED;
    }
    if (o.r >= 0) {
        snprintf(note, cap, "%s: succeeded", t->what);
        return V_PERMITTED;
    }
    if (o.err == EPERM || o.err == EACCES || o.err == ENOSYS) {
        snprintf(note, cap, "%s: %s", t->what, pr_errname(o.err));
        return V_BLOCKED;
    }
    snprintf(note, cap, "%s: %s, past the permission check%s", t->what, pr_errname(o.err),
             o.aux ? " (no namespace fd: filter check only)" : "");
    return V_PERMITTED;
}

static void run_family(struct pr_ctx *c, const struct family *fam)
{
    struct pr_list l = {0};
    unsigned permitted = 0, blocked = 0;
    enum pr_status st;
    long knob;

    for (size_t i = 0; i < AJ_ARRAY_SIZE(fam->tries) && fam->tries[i].fn; i++) {
        char note[256];
        enum verdict v = judge(&fam->tries[i], note, sizeof(note));
        permitted += v == V_PERMITTED;
        blocked += v == V_BLOCKED;
        pr_list_add(&l, "%s", note);
    }
    if (fam->sysctl && pr_read_long(fam->sysctl, &knob) == 0)
        pr_list_add(&l, "%s=%ld", fam->sysctl + strlen("/proc/sys/"), knob);
    st = permitted ? PR_EXPOSED : blocked ? PR_BLOCKED : PR_UNKNOWN;
    /* bpf(2) itself stays callable on 6.5+ even with unprivileged BPF
     * disabled: the sysctl is checked per command, so it decides. */
    if (st == PR_EXPOSED && strcmp(fam->id, "syscalls.bpf") == 0 && fam->sysctl &&
        pr_read_long(fam->sysctl, &knob) == 0 && knob != 0 && !pr_bpf_capable(c)) {
        st = PR_BLOCKED;
        pr_list_add(&l, "no CAP_BPF/CAP_SYS_ADMIN: program and map creation refused");
    }
    pr_add(c, fam->id, PR_CAT_SYSCALLS, st, fam->sev, fam->title, "%s%s", pr_list_str(&l),
           st == PR_EXPOSED && fam->gate == GATE_FILTER
               ? " (any user may call it: only a seccomp filter keeps it out of reach)"
               : "");
}

void pr_check_syscalls(struct pr_ctx *c)
{
    for (size_t i = 0; i < AJ_ARRAY_SIZE(families); i++)
        if (pr_wanted(c, families[i].id))
            run_family(c, &families[i]);
}
