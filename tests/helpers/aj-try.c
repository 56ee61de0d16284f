/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aj-try: a static multi-call escape probe for agentjail's tests, in the
 * spirit of bubblewrap's tests/try-syscall.c.
 *
 *   aj-try PROBE [ARGS...]
 *
 * performs ONE harmless operation and prints exactly one JSON line
 *
 *   {"probe":"NAME","permitted":true|false,"errno":"EPERM"|null,"detail":"..."}
 *
 * Exit status: 0 if the dangerous operation was PERMITTED (an escape vector
 * exists), 1 if it was BLOCKED, 2 for usage errors.  A probe killed by the
 * seccomp filter dies of SIGSYS and prints nothing.
 *
 * Every probe is chosen so that it cannot change the host even when it runs
 * as root with no sandbox (the "control" runs of the test suite):
 *  - privileged syscalls get arguments the kernel rejects only AFTER its
 *    permission check (nonexistent paths, invalid flags, bad fds, invalid
 *    magic numbers), so EPERM means "refused" and EINVAL/ENOENT/EBADF means
 *    "the permission check passed";
 *  - sensitive files are opened O_WRONLY and closed without a write;
 *  - namespace syscalls run in a throw-away child;
 *  - ptrace and signal probes only ever touch a process the test started
 *    (checked by its comm) and only with signal 0 / PTRACE_SEIZE;
 *  - network probes refuse any address outside loopback.
 *
 * "Reachability" probes (marked so in the detail) test syscalls the kernel
 * lets anyone call (fsconfig, quotactl on a nonexistent path, modify_ldt
 * read, ...): there, "permitted" means the call was not filtered.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <linux/tiocl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* ---- constants Debian 12's headers may lack ------------------------------ */

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#ifndef __NR_fsopen
#define __NR_fsopen 430
#endif
#ifndef __NR_fsconfig
#define __NR_fsconfig 431
#endif
#ifndef __NR_fsmount
#define __NR_fsmount 432
#endif
#ifndef __NR_fspick
#define __NR_fspick 433
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_kexec_file_load
#define __NR_kexec_file_load 320
#endif
#ifndef __NR_userfaultfd
#define __NR_userfaultfd 323
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef FSCONFIG_CMD_CREATE
#define FSCONFIG_CMD_CREATE 6
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef PTRACE_SEIZE
#define PTRACE_SEIZE 0x4206
#endif
#ifndef KEYCTL_GET_KEYRING_ID
#define KEYCTL_GET_KEYRING_ID 0
#endif
#ifndef KEY_SPEC_SESSION_KEYRING
#define KEY_SPEC_SESSION_KEYRING -3
#endif
#define AJ_SYSLOG_ACTION_SIZE_BUFFER 10 /* read-only: size of the kernel log buffer */
#define AJ_MOUNT_ATTR_SIZE_VER0 32
#define AJ_PROC_SUPER_MAGIC 0x9fa0

struct aj_mount_attr {
    uint64_t attr_set;
    uint64_t attr_clr;
    uint64_t propagation;
    uint64_t userns_fd;
};

struct aj_clone_args {
    uint64_t flags;
    uint64_t pidfd;
    uint64_t child_tid;
    uint64_t parent_tid;
    uint64_t exit_signal;
    uint64_t stack;
    uint64_t stack_size;
    uint64_t tls;
};

struct aj_file_handle {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
};

/* A path that must not exist anywhere: lookups of it fail with ENOENT. */
#define NOPATH "/aj-try-nonexistent-7f3c2a/x"

extern char **environ;

static const char *g_probe = "?";
static const char *g_argv0 = "aj-try";

/* ---- output --------------------------------------------------------------- */

static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", stdout);
            break;
        case '\\':
            fputs("\\\\", stdout);
            break;
        case '\n':
            fputs("\\n", stdout);
            break;
        case '\t':
            fputs("\\t", stdout);
            break;
        default:
            if (*p < 0x20 || *p >= 0x7f)
                printf("\\u%04x", *p);
            else
                putchar(*p);
        }
    }
    putchar('"');
}

static const char *errname(int e)
{
    static char buf[24];
    const char *n = strerrorname_np(e);

    if (n)
        return n;
    snprintf(buf, sizeof buf, "E%d", e);
    return buf;
}

/* Print the one JSON line and exit 0 (permitted) or 1 (blocked). */
__attribute__((noreturn, format(printf, 3, 4))) static void report(bool permitted, int err,
                                                                    const char *fmt, ...)
{
    char detail[3072];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fputs("{\"probe\":", stdout);
    json_string(g_probe);
    printf(",\"permitted\":%s,\"errno\":", permitted ? "true" : "false");
    if (err) {
        putchar('"');
        fputs(errname(err), stdout);
        putchar('"');
    } else {
        fputs("null", stdout);
    }
    fputs(",\"detail\":", stdout);
    json_string(detail);
    fputs("}\n", stdout);
    fflush(stdout);
    exit(permitted ? 0 : 1);
}

__attribute__((noreturn)) static void usage(const char *msg)
{
    fprintf(stderr, "aj-try %s: %s\n", g_probe, msg);
    exit(2);
}

/*
 * Verdict for a privileged syscall made with arguments the kernel rejects
 * after its permission check: EPERM/EACCES (filter or missing capability)
 * and ENOSYS (filtered, or not built into this kernel) mean blocked; any
 * other outcome means the call got through the filter and the check.
 */
__attribute__((noreturn)) static void verdict(long r, int e, const char *what)
{
    if (r >= 0)
        report(true, 0, "%s succeeded (returned %ld)", what, r);
    if (e == EPERM || e == EACCES || e == ENOSYS)
        report(false, e, "%s refused", what);
    report(true, e, "%s got past the filter and the permission check (failed later with %s)",
           what, errname(e));
}

/* Same, for a call the kernel lets anyone make: only a filter blocks it. */
__attribute__((noreturn)) static void verdict_reach(long r, int e, const char *what)
{
    if (r >= 0)
        report(true, 0, "%s succeeded (returned %ld): not filtered", what, r);
    if (e == EPERM || e == EACCES || e == ENOSYS)
        report(false, e, "%s refused", what);
    report(true, e, "%s reached the kernel (%s): not filtered (reachability probe)", what,
           errname(e));
}

/* errno must be read after the call: argument evaluation order is unspecified. */
#define VERDICT(call, what)                                                                    \
    do {                                                                                       \
        long r_ = (long)(call);                                                                \
        int e_ = errno;                                                                        \
        verdict(r_, e_, (what));                                                               \
    } while (0)
#define VERDICT_REACH(call, what)                                                              \
    do {                                                                                       \
        long r_ = (long)(call);                                                                \
        int e_ = errno;                                                                        \
        verdict_reach(r_, e_, (what));                                                         \
    } while (0)

/* ---- small utilities ------------------------------------------------------ */

static long parse_long(const char *s, const char *what)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        usage(what);
    return v;
}

/* Read up to cap-1 bytes of a file; returns bytes read or -errno. */
static ssize_t read_file(const char *path, char *buf, size_t cap)
{
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    if (fd < 0)
        return -errno;
    while (len + 1 < cap) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    close(fd);
    return (ssize_t)len;
}

/* Copy up to n bytes of src into dst as printable ASCII. */
static void printable(char *dst, size_t cap, const char *src, size_t n)
{
    size_t i;

    for (i = 0; i < n && i + 1 < cap; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '.';
    dst[i] = '\0';
}

static bool is_dev_null(const struct stat *st)
{
    return S_ISCHR(st->st_mode) && st->st_rdev == makedev(1, 3);
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

/* If the child died of a signal, die of it too, so a SIGSYS shows as one. */
static void propagate_signal(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit rl = {0, 0};

        (void)setrlimit(RLIMIT_CORE, &rl); /* never dump core on the way out */
        signal(sig, SIG_DFL);
        raise(sig);
        report(false, 0, "child killed by signal %d", sig);
    }
}

struct child_result {
    int err;       /* 0 on success, else errno */
    uint64_t info; /* probe-specific extra */
};

static uint64_t cap_effective(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];

    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &hdr, data) < 0)
        return 0;
    return (uint64_t)data[0].effective | ((uint64_t)data[1].effective << 32);
}

/* Run fn in a forked child; the child's errno comes back through a pipe. */
static struct child_result in_child(struct child_result (*fn)(void *), void *arg)
{
    struct child_result res = {0, 0};
    int p[2], status;
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) < 0)
        report(false, errno, "pipe2 for the probe child");
    pid = fork();
    if (pid < 0)
        report(false, errno, "fork for the probe child");
    if (pid == 0) {
        struct child_result r = fn(arg);
        ssize_t w = write(p[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 3);
    }
    close(p[1]);
    ssize_t n = read(p[0], &res, sizeof res);
    close(p[0]);
    if (waitpid(pid, &status, 0) < 0)
        report(false, errno, "waitpid for the probe child");
    propagate_signal(status);
    if (n != (ssize_t)sizeof res)
        report(false, 0, "probe child exited without a result (status %d)", status);
    return res;
}

/* ---- files, secrets, environment -------------------------------------------- */

/* Append s to the string in buf (size bytes), cut to fit: never past the
 * end, whatever is already there (strncat's count wraps when it is full). */
static void append(char *buf, size_t size, const char *s)
{
    size_t used = strnlen(buf, size);
    if (used + 1 < size)
        snprintf(buf + used, size - used, "%s", s);
}

static void p_noop(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    report(true, 0, "noop ran (pid %d)", (int)getpid());
}

static void p_read(int argc, char **argv)
{
    char buf[65], shown[65];
    struct stat st;
    ssize_t n;
    int fd;

    if (argc != 1)
        usage("read PATH");
    fd = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        report(false, errno, "open(%s, O_RDONLY)", argv[0]);
    if (fstat(fd, &st) == 0 && is_dev_null(&st))
        report(false, 0, "%s is masked (opens /dev/null)", argv[0]);
    n = read(fd, buf, 64);
    if (n < 0)
        report(false, errno, "read(%s)", argv[0]);
    if (n == 0)
        report(false, 0, "%s opened but reads empty (masked?)", argv[0]);
    printable(shown, sizeof shown, buf, (size_t)n);
    report(true, 0, "read %zd bytes from %s: %s", n, argv[0], shown);
}

static void p_grep(int argc, char **argv)
{
    static char buf[1 << 20];
    ssize_t n;

    if (argc != 2 || !*argv[1])
        usage("grep PATH NEEDLE");
    n = read_file(argv[0], buf, sizeof buf);
    if (n < 0)
        report(false, (int)-n, "read %s", argv[0]);
    if (memmem(buf, (size_t)n, argv[1], strlen(argv[1])))
        report(true, 0, "%s contains the needle", argv[0]);
    report(false, 0, "%s readable (%zd bytes) but has no needle", argv[0], n);
}

static void p_environ_scan(int argc, char **argv)
{
    static char buf[1 << 18];
    int scanned = 0, readable = 0;
    struct dirent *de;
    DIR *d;

    if (argc != 1 || !*argv[0])
        usage("environ-scan NEEDLE");
    d = opendir("/proc");
    if (!d)
        report(false, errno, "opendir /proc");
    while ((de = readdir(d))) {
        char path[300];
        ssize_t n;

        if (!all_digits(de->d_name))
            continue;
        scanned++;
        snprintf(path, sizeof path, "/proc/%s/environ", de->d_name);
        n = read_file(path, buf, sizeof buf);
        if (n < 0)
            continue;
        readable++;
        if (memmem(buf, (size_t)n, argv[0], strlen(argv[0])))
            report(true, 0, "needle found in %s", path);
    }
    closedir(d);
    report(false, 0, "needle in none of %d /proc/*/environ (%d readable)", scanned, readable);
}

static void p_env(int argc, char **argv)
{
    char present[1024] = "", names[2048] = "";
    size_t total = 0;

    if (argc < 1)
        usage("env NAME...");
    for (int i = 0; i < argc; i++) {
        if (getenv(argv[i])) {
            append(present, sizeof present, argv[i]);
            append(present, sizeof present, " ");
        }
    }
    for (char **e = environ; *e; e++) {
        size_t len = strcspn(*e, "=");
        size_t used = strlen(names);
        total++;
        if (used + len + 2 < sizeof names)
            snprintf(names + used, sizeof names - used, "%.*s ", (int)len, *e);
    }
    if (*present)
        report(true, 0, "set: %s(environment has %zu vars: %s)", present, total, names);
    report(false, 0, "none set (environment has %zu vars: %s)", total, names);
}

/* O_WRONLY open without O_CREAT/O_TRUNC, closed without writing anything. */
__attribute__((noreturn)) static void write_open_verdict(const char *path)
{
    struct stat st;
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    if (fd < 0) {
        int e = errno;
        /* ETXTBSY comes after the permission check: only the binary still
         * running stops the write (CVE-2019-5736 waits for it to exit). */
        if (e == ETXTBSY)
            report(true, e, "open(%s, O_WRONLY) passed the permission check (busy text)", path);
        report(false, e, "open(%s, O_WRONLY)", path);
    }
    if (fstat(fd, &st) == 0 && is_dev_null(&st)) {
        close(fd);
        report(false, 0, "%s is masked (opens /dev/null)", path);
    }
    close(fd);
    report(true, 0, "opened %s for writing (closed without writing)", path);
}

static void p_write_open(int argc, char **argv)
{
    if (argc != 1)
        usage("write-open PATH");
    write_open_verdict(argv[0]);
}

static void p_exe_write(int argc, char **argv)
{
    char path[64];

    if (argc != 1 || (strcmp(argv[0], "self") && !all_digits(argv[0])))
        usage("exe-write PID|self");
    snprintf(path, sizeof path, "/proc/%s/exe", argv[0]);
    write_open_verdict(path);
}

static void p_create(int argc, char **argv)
{
    int fd;

    if (argc != 1)
        usage("create PATH");
    fd = open(argv[0], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        report(false, errno, "create %s", argv[0]);
    close(fd);
    (void)unlink(argv[0]); /* best effort: the directory is the test's */
    report(true, 0, "created (and removed) %s", argv[0]);
}

static void p_symlink_read(int argc, char **argv)
{
    char buf[65], shown[65];
    ssize_t n;
    int fd, e;

    if (argc != 2)
        usage("symlink-read LINK TARGET");
    if (symlink(argv[1], argv[0]) < 0)
        report(false, errno, "symlink %s -> %s", argv[0], argv[1]);
    fd = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    e = errno;
    (void)unlink(argv[0]);
    if (fd < 0)
        report(false, e, "open through %s -> %s", argv[0], argv[1]);
    n = read(fd, buf, 64);
    e = errno;
    close(fd);
    if (n <= 0)
        report(false, n < 0 ? e : 0, "read through %s -> %s gave nothing", argv[0], argv[1]);
    printable(shown, sizeof shown, buf, (size_t)n);
    report(true, 0, "read %zd bytes through %s -> %s: %s", n, argv[0], argv[1], shown);
}

/* Copy this binary into DIR and execute the copy (a payload dropped into a
 * writable directory). */
static void p_exec_copy(int argc, char **argv)
{
    char path[4096], buf[65536];
    int in, out, p[2], status, e = 0;
    pid_t pid;

    if (argc != 1)
        usage("exec-copy DIR");
    snprintf(path, sizeof path, "%s/aj-try-exec-%d", argv[0], (int)getpid());
    in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (in < 0)
        in = open(g_argv0, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        report(false, errno, "cannot read own binary");
    out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0755);
    if (out < 0)
        report(false, errno, "create %s", path);
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (write(out, buf, (size_t)n) != n) {
            e = errno ? errno : EIO;
            break;
        }
    }
    close(in);
    if (close(out) < 0 && !e)
        e = errno;
    if (e) {
        (void)unlink(path);
        report(false, e, "write %s", path);
    }
    if (pipe2(p, O_CLOEXEC) < 0) {
        e = errno;
        (void)unlink(path);
        report(false, e, "pipe2");
    }
    pid = fork();
    if (pid < 0) {
        e = errno;
        (void)unlink(path);
        report(false, e, "fork");
    }
    if (pid == 0) {
        char *args[] = {path, (char *)"noop", NULL};
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull >= 0)
            (void)dup2(devnull, 1);
        execve(path, args, environ);
        e = errno;
        (void)!write(p[1], &e, sizeof e);
        _exit(127);
    }
    close(p[1]);
    ssize_t n = read(p[0], &e, sizeof e);
    close(p[0]);
    (void)waitpid(pid, &status, 0);
    (void)unlink(path);
    if (n == (ssize_t)sizeof e)
        report(false, e, "execve of a copy in %s", argv[0]);
    report(true, 0, "executed a copy of the probe from %s", argv[0]);
}

/* Leaked descriptors (CVE-2024-21626: runc leaked a host cgroup dir fd). */
static void p_fds(int argc, char **argv)
{
    int found[256], nfound = 0;
    char detail[2048] = "", buf[65], shown[65], line[512];
    struct rlimit rl;
    int max = 1024;
    bool read_through = false;

    if (argc > 1)
        usage("fds [RELPATH]");
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        max = rl.rlim_cur > 65536 ? 65536 : (int)rl.rlim_cur;
    for (int fd = 3; fd < max && nfound < 256; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            found[nfound++] = fd;
    /* Also walk /proc/self/fd, for descriptors above the current rlimit. */
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) && nfound < 256) {
            int fd, dup = 0;
            if (!all_digits(de->d_name))
                continue;
            fd = (int)strtol(de->d_name, NULL, 10);
            if (fd < 3 || fd == dirfd(d))
                continue;
            for (int i = 0; i < nfound; i++)
                dup |= found[i] == fd;
            if (!dup)
                found[nfound++] = fd;
        }
        closedir(d);
    }
    if (nfound == 0)
        report(false, 0, "no descriptor above 2 is open");
    for (int i = 0; i < nfound; i++) {
        char link[64], target[256] = "?";
        ssize_t n;

        snprintf(link, sizeof link, "/proc/self/fd/%d", found[i]);
        n = readlink(link, target, sizeof target - 1);
        if (n >= 0)
            target[n] = '\0';
        snprintf(line, sizeof line, "fd %d -> %s", found[i], target);
        if (argc == 1) {
            /* openat through the leaked fd, as the runc exploit does. */
            int f = openat(found[i], argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
            /* ... or fchdir into it and open relative to the new cwd. */
            if (f < 0 && fchdir(found[i]) == 0)
                f = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
            if (f >= 0) {
                n = read(f, buf, 64);
                close(f);
                if (n > 0) {
                    printable(shown, sizeof shown, buf, (size_t)n);
                    read_through = true;
                    snprintf(line + strlen(line), sizeof line - strlen(line),
                             " (openat %s: %s)", argv[0], shown);
                }
            }
        }
        append(detail, sizeof detail, line);
        append(detail, sizeof detail, "; ");
    }
    report(true, 0, "%d leaked descriptor(s)%s: %s", nfound,
           read_through ? ", host file read through one" : "", detail);
}

/* A working directory outside the root (the other half of CVE-2024-21626). */
static void p_cwd(int argc, char **argv)
{
    char buf[4096];

    (void)argv;
    if (argc)
        usage("cwd");
    if (!getcwd(buf, sizeof buf)) {
        if (errno == ENOENT)
            report(true, ENOENT, "working directory is unreachable from the root");
        report(false, errno, "getcwd");
    }
    report(false, 0, "working directory %s is inside the root", buf);
}

static void p_release_agent(int argc, char **argv)
{
    const char *base = "/sys/fs/cgroup";
    char path[512], tried[1024] = "";
    struct dirent *de;
    int last = ENOENT, fd;
    DIR *d;

    (void)argv;
    if (argc)
        usage("release-agent");
    snprintf(path, sizeof path, "%s/release_agent", base);
    fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        report(true, 0, "opened %s for writing (closed without writing)", path);
    }
    if (errno != ENOENT) {
        last = errno;
        snprintf(tried, sizeof tried, "%s ", path);
    }
    d = opendir(base);
    if (!d) {
        if (*tried)
            report(false, last, "release_agent refused: %s", tried);
        report(false, errno, "no cgroup hierarchy visible at %s", base);
    }
    while ((de = readdir(d))) {
        /* Only hierarchies (dirs): on pure cgroup v2 the files beside them
         * (cgroup.procs, ...) would only add ENOTDIR noise. */
        if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
            continue;
        snprintf(path, sizeof path, "%s/%s/release_agent", base, de->d_name);
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd >= 0) {
            close(fd);
            closedir(d);
            report(true, 0, "opened %s for writing (closed without writing)", path);
        }
        if (errno != ENOENT) {
            size_t used = strlen(tried);
            last = errno;
            /* Bounded: the remaining room, never a size_t that wrapped. */
            if (used + strlen(path) + 2 <= sizeof tried)
                snprintf(tried + used, sizeof tried - used, "%s ", path);
        }
    }
    closedir(d);
    if (*tried)
        report(false, last, "release_agent refused: %s", tried);
    report(false, ENOENT, "no release_agent visible under %s", base);
}

static void p_kallsyms(int argc, char **argv)
{
    char line[512];
    int lines = 0;
    FILE *f;

    (void)argv;
    if (argc)
        usage("kallsyms");
    f = fopen("/proc/kallsyms", "re");
    if (!f)
        report(false, errno, "open /proc/kallsyms");
    while (fgets(line, sizeof line, f) && lines < 100000) {
        unsigned long long addr;
        char *end;
        lines++;
        addr = strtoull(line, &end, 16);
        if (end != line && addr != 0) {
            fclose(f);
            report(true, 0, "kernel symbol addresses visible: %.60s", line);
        }
    }
    fclose(f);
    report(false, 0, "/proc/kallsyms: %d lines, all addresses hidden", lines);
}

static void p_devices(int argc, char **argv)
{
    static const char *const named[] = {
        "/dev/mem",         "/dev/kmem",       "/dev/port",       "/dev/kmsg",
        "/dev/kvm",         "/dev/vsock",      "/dev/fuse",       "/dev/userfaultfd",
        "/dev/loop-control", "/dev/btrfs-control", "/dev/mapper/control", "/dev/console",
        "/dev/tty0",        "/dev/tty1",       "/dev/vga_arbiter", "/dev/hwrng",
        "/dev/cpu/0/msr",   "/dev/watchdog",   "/dev/dri/card0",        "/dev/vhost-net",
        "/dev/net/tun",     "/dev/uinput",     "/dev/snapshot",   "/dev/ttyS0",
    };
    char found[2048] = "";
    struct stat st;
    struct dirent *de;
    DIR *d;

    (void)argv;
    if (argc)
        usage("devices");
    /* Device nodes only: agentjail's decoys at some of these names are
     * empty regular files (an open is a canary, and reaches no device). */
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        if (lstat(named[i], &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
            append(found, sizeof found, named[i]);
            append(found, sizeof found, " ");
        }
    }
    d = opendir("/dev");
    if (d) {
        while ((de = readdir(d))) {
            char path[300];
            snprintf(path, sizeof path, "/dev/%s", de->d_name);
            if (lstat(path, &st) == 0 && S_ISBLK(st.st_mode)) {
                append(found, sizeof found, path);
                append(found, sizeof found, " ");
            }
        }
        closedir(d);
    }
    if (*found)
        report(true, 0, "dangerous device nodes present: %s", found);
    report(false, 0, "no dangerous device node present");
}

static void p_runtime_sockets(int argc, char **argv)
{
    static const char *const named[] = {
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/var/run/crio/crio.sock",
        "/run/podman/podman.sock",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "/run/secrets/kubernetes.io/serviceaccount/token",
    };
    char found[2048] = "";
    struct stat st;

    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        if (lstat(named[i], &st) == 0) {
            append(found, sizeof found, named[i]);
            append(found, sizeof found, " ");
        }
    }
    for (int i = 0; i < argc; i++) {
        if (lstat(argv[i], &st) == 0) {
            append(found, sizeof found, argv[i]);
            append(found, sizeof found, " ");
        }
    }
    if (*found)
        report(true, 0, "container runtime sockets / tokens present: %s", found);
    report(false, 0, "no runtime socket or service-account token present");
}

static bool in_csv(const char *csv, const char *item)
{
    size_t len = strlen(item);

    for (const char *p = csv; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == len && !strncmp(p, item, n))
            return true;
        if (!comma)
            break;
        p = comma + 1;
    }
    return false;
}

/*
 * mountinfo HOSTDEVS [ALLOWED_ROOT...]: HOSTDEVS is a comma-separated list
 * of the host's filesystem devices (maj:min).  A mount of one of them whose
 * root (field 4: the path inside that filesystem) is not an allowed root, or
 * below one, shows a host path the policy did not name.
 */
static void p_mountinfo(int argc, char **argv)
{
    char line[4096], leaks[2048] = "";
    int mounts = 0;
    FILE *f;

    if (argc < 1)
        usage("mountinfo HOSTDEV[,HOSTDEV...] [ALLOWED_ROOT...]");
    f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        report(false, errno, "open /proc/self/mountinfo");
    while (fgets(line, sizeof line, f)) {
        char *save = NULL, *fields[6] = {0};
        int n = 0;
        bool allowed = false;

        mounts++;
        for (char *t = strtok_r(line, " \n", &save); t && n < 6; t = strtok_r(NULL, " \n", &save))
            fields[n++] = t;
        if (n < 5 || !in_csv(argv[0], fields[2]))
            continue;
        for (int i = 1; i < argc && !allowed; i++) {
            size_t l = strlen(argv[i]);
            allowed = !strcmp(fields[3], argv[i]) ||
                      (!strncmp(fields[3], argv[i], l) && fields[3][l] == '/');
        }
        if (!allowed) {
            char item[600];
            snprintf(item, sizeof item, "%s:%s at %s; ", fields[2], fields[3], fields[4]);
            append(leaks, sizeof leaks, item);
        }
    }
    fclose(f);
    if (*leaks)
        report(true, 0, "host paths in the mount table: %s", leaks);
    report(false, 0, "%d mounts, none shows an unnamed host path", mounts);
}

/* ---- processes -------------------------------------------------------------- */

static void p_pids(int argc, char **argv)
{
    long max, count = 0;
    struct dirent *de;
    DIR *d;

    if (argc != 1)
        usage("pids MAX");
    max = parse_long(argv[0], "pids MAX");
    d = opendir("/proc");
    if (!d)
        report(false, errno, "opendir /proc");
    while ((de = readdir(d)))
        count += all_digits(de->d_name);
    closedir(d);
    if (count > max)
        report(true, 0, "%ld processes visible in /proc (more than %ld)", count, max);
    report(false, 0, "%ld processes visible in /proc", count);
}

/* 1 if /proc/PID/comm is readable and differs from want, 0 if it matches
 * or cannot be read. */
static int comm_mismatch(long pid, const char *want, char *got, size_t cap)
{
    char path[64];
    ssize_t n;

    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    n = read_file(path, got, cap);
    if (n <= 0) {
        snprintf(got, cap, "?");
        return 0;
    }
    got[strcspn(got, "\n")] = '\0';
    return strcmp(got, want) != 0;
}

static void p_pid_visible(int argc, char **argv)
{
    char comm[64];
    long pid;

    if (argc < 1 || argc > 2)
        usage("pid-visible PID [COMM]");
    pid = parse_long(argv[0], "pid-visible PID [COMM]");
    if (pid <= 0)
        usage("PID must be positive");
    if (kill((pid_t)pid, 0) < 0 && errno != EPERM)
        report(false, errno, "kill(%ld, 0)", pid);
    if (argc == 2 && comm_mismatch(pid, argv[1], comm, sizeof comm))
        report(false, 0, "pid %ld exists but is '%s', not the target '%s'", pid, comm, argv[1]);
    report(true, 0, "host pid %ld is visible (kill(pid, 0) found it)", pid);
}

static void p_ptrace_attach(int argc, char **argv)
{
    char comm[64];
    long pid;

    if (argc != 2)
        usage("ptrace-attach PID COMM");
    pid = parse_long(argv[0], "ptrace-attach PID COMM");
    if (pid <= 0)
        usage("PID must be positive");
    /* Safety: never attach to anything but the test's own target. */
    if (comm_mismatch(pid, argv[1], comm, sizeof comm))
        report(false, 0, "pid %ld is '%s', not the target '%s': not attaching", pid, comm,
               argv[1]);
    /* PTRACE_SEIZE does not stop the tracee; our exit detaches it. */
    if (ptrace(PTRACE_SEIZE, (pid_t)pid, NULL, NULL) < 0)
        report(false, errno, "ptrace(PTRACE_SEIZE, %ld)", pid);
    report(true, 0, "attached to pid %ld with PTRACE_SEIZE", pid);
}

static struct child_result traceme_child(void *arg)
{
    struct child_result r = {0, 0};
    (void)arg;
    if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
        r.err = errno;
    return r;
}

static void p_ptrace_traceme(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("ptrace-traceme");
    struct child_result r = in_child(traceme_child, NULL);
    if (r.err)
        report(false, r.err, "ptrace(PTRACE_TRACEME)");
    report(true, 0, "ptrace(PTRACE_TRACEME) succeeded in a child");
}

static void p_process_vm_readv(int argc, char **argv)
{
    static volatile char secret[8] = "ajtry!!";
    char buf[8];
    struct iovec local = {buf, sizeof buf}, remote = {(void *)secret, sizeof buf};
    ssize_t n;

    (void)argv;
    if (argc)
        usage("process_vm_readv");
    n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n < 0)
        report(false, errno, "process_vm_readv(self)");
    report(true, 0, "process_vm_readv read %zd bytes of our own memory", n);
}

/* ---- credentials ---------------------------------------------------------- */

static void p_caps(int argc, char **argv)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    uint64_t eff, prm, inh;
    int bnd = 0;

    (void)argv;
    if (argc)
        usage("caps");
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &hdr, data) < 0)
        report(false, errno, "capget");
    eff = (uint64_t)data[0].effective | ((uint64_t)data[1].effective << 32);
    prm = (uint64_t)data[0].permitted | ((uint64_t)data[1].permitted << 32);
    inh = (uint64_t)data[0].inheritable | ((uint64_t)data[1].inheritable << 32);
    for (int c = 0; c < 64; c++)
        bnd += prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1;
    int amb = 0;
    for (int c = 0; c < 64; c++)
        amb += prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) == 1;
    if (eff || prm || amb)
        report(true, 0, "CapEff=%016" PRIx64 " CapPrm=%016" PRIx64 " CapInh=%016" PRIx64
                        " ambient=%d bounding=%d", eff, prm, inh, amb, bnd);
    report(false, 0, "no capabilities (CapInh=%016" PRIx64 " bounding=%d)", inh, bnd);
}

static void p_nnp(int argc, char **argv)
{
    int r;

    (void)argv;
    if (argc)
        usage("nnp");
    r = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
    if (r < 0)
        report(false, errno, "prctl(PR_GET_NO_NEW_PRIVS)");
    if (r == 1)
        report(false, 0, "no_new_privs is set");
    report(true, 0, "no_new_privs is NOT set: setuid binaries can raise privileges");
}

static void p_seccomp(int argc, char **argv)
{
    int r;

    (void)argv;
    if (argc)
        usage("seccomp");
    r = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
    if (r < 0)
        report(false, errno, "prctl(PR_GET_SECCOMP) refused (a filter is in place)");
    if (r == 2)
        report(false, 0, "seccomp filter mode");
    report(true, 0, "seccomp mode %d: no syscall filter", r);
}

static void p_euid(int argc, char **argv)
{
    uid_t r, e, s;
    gid_t rg, eg, sg;

    (void)argv;
    if (argc)
        usage("euid");
    if (getresuid(&r, &e, &s) < 0 || getresgid(&rg, &eg, &sg) < 0)
        report(false, errno, "getresuid");
    if (e == 0 || e != r || eg != rg || s != r)
        report(true, 0, "uid=%u euid=%u suid=%u gid=%u egid=%u (privileged or setuid)",
               (unsigned)r, (unsigned)e, (unsigned)s, (unsigned)rg, (unsigned)eg);
    report(false, 0, "uid=%u euid=%u gid=%u egid=%u", (unsigned)r, (unsigned)e, (unsigned)rg,
           (unsigned)eg);
}

static void p_setuid0(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("setuid0");
    if (syscall(SYS_setuid, 0) < 0)
        report(false, errno, "setuid(0)");
    report(true, 0, "setuid(0) succeeded");
}

static void p_suid_mount(int argc, char **argv)
{
    struct statvfs sv;

    if (argc != 1)
        usage("suid-mount PATH");
    if (statvfs(argv[0], &sv) < 0)
        report(false, errno, "statvfs %s", argv[0]);
    if (sv.f_flag & ST_NOSUID)
        report(false, 0, "%s is on a nosuid mount", argv[0]);
    report(true, 0, "%s is on a mount that honours setuid bits", argv[0]);
}

static void p_rlimit_core(int argc, char **argv)
{
    struct rlimit rl;

    (void)argv;
    if (argc)
        usage("rlimit-core");
    if (getrlimit(RLIMIT_CORE, &rl) < 0)
        report(false, errno, "getrlimit(RLIMIT_CORE)");
    if (rl.rlim_max == 0)
        report(false, 0, "RLIMIT_CORE hard limit is 0: no core dump can reach core_pattern");
    struct rlimit up = {rl.rlim_max < 4096 ? rl.rlim_max : 4096, rl.rlim_max};
    if (setrlimit(RLIMIT_CORE, &up) < 0)
        report(false, errno, "setrlimit(RLIMIT_CORE)");
    report(true, 0, "RLIMIT_CORE raised to %llu (hard %llu): core dumps reach core_pattern",
           (unsigned long long)up.rlim_cur, (unsigned long long)rl.rlim_max);
}

/* ---- namespaces ------------------------------------------------------------- */

static unsigned long parse_ns_flags(const char *csv)
{
    static const struct {
        const char *name;
        unsigned long flag;
    } map[] = {
        {"user", CLONE_NEWUSER}, {"mnt", CLONE_NEWNS},        {"net", CLONE_NEWNET},
        {"pid", CLONE_NEWPID},   {"ipc", CLONE_NEWIPC},       {"uts", CLONE_NEWUTS},
        {"cgroup", CLONE_NEWCGROUP}, {"time", CLONE_NEWTIME},
    };
    unsigned long flags = 0;
    char buf[256], *save = NULL;

    snprintf(buf, sizeof buf, "%s", csv);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(t, map[i].name))
                break;
        if (i == sizeof map / sizeof map[0])
            usage("namespace flags: user,mnt,net,pid,ipc,uts,cgroup,time");
        flags |= map[i].flag;
    }
    if (!flags)
        usage("no namespace flag given");
    return flags;
}

static struct child_result unshare_child(void *arg)
{
    struct child_result r = {0, 0};
    unsigned long flags = *(unsigned long *)arg;

    if (unshare((int)flags) < 0)
        r.err = errno;
    else
        r.info = cap_effective();
    return r;
}

static void p_unshare(int argc, char **argv)
{
    unsigned long flags;

    if (argc != 1)
        usage("unshare FLAGS");
    flags = parse_ns_flags(argv[0]);
    struct child_result r = in_child(unshare_child, &flags);
    if (r.err)
        report(false, r.err, "unshare(%s)", argv[0]);
    report(true, 0, "unshare(%s) succeeded in a child; CapEff there=%016" PRIx64, argv[0], r.info);
}

static void p_clone(int argc, char **argv)
{
    unsigned long flags;
    int status;
    long pid;

    if (argc != 1)
        usage("clone FLAGS");
    flags = parse_ns_flags(argv[0]);
    /* No CLONE_VM: the child runs on a copy of our stack, like fork(). */
    pid = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0UL);
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        report(false, errno, "clone(%s)", argv[0]);
    (void)waitpid((pid_t)pid, &status, 0);
    report(true, 0, "clone(%s) created a child", argv[0]);
}

static void p_clone3(int argc, char **argv)
{
    struct aj_clone_args args;
    int status;
    long pid;

    if (argc != 1)
        usage("clone3 FLAGS");
    memset(&args, 0, sizeof args);
    args.flags = parse_ns_flags(argv[0]);
    args.exit_signal = SIGCHLD;
    pid = syscall(__NR_clone3, &args, sizeof args);
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        report(false, errno, "clone3(%s)", argv[0]);
    (void)waitpid((pid_t)pid, &status, 0);
    report(true, 0, "clone3(%s) created a child", argv[0]);
}

static struct child_result setns_child(void *arg)
{
    struct child_result r = {0, 0};
    int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);

    (void)arg;
    r.info = fd >= 0;
    /* Re-entering our own network namespace is a no-op, but needs
     * CAP_SYS_ADMIN; with no ns fd, setns(-1) still tells filter from kernel. */
    if (syscall(SYS_setns, fd, CLONE_NEWNET) < 0)
        r.err = errno;
    return r;
}

static void p_setns(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("setns");
    struct child_result r = in_child(setns_child, NULL);
    if (r.err == EBADF)
        report(true, r.err, "setns(-1) reached the kernel (no ns fd): not filtered");
    if (r.err)
        report(false, r.err, "setns(own netns fd%s)", r.info ? "" : " unavailable");
    report(true, 0, "setns into a network namespace succeeded");
}

static void p_sethostname(int argc, char **argv)
{
    char name[1000];

    (void)argv;
    if (argc)
        usage("sethostname");
    memset(name, 'a', sizeof name);
    /* The capability check comes before the length check: EINVAL = allowed. */
    VERDICT(syscall(SYS_sethostname, name, sizeof name), "sethostname(len 1000)");
}

/* ---- mount family ------------------------------------------------------- */

static void p_mount(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("mount");
    /* Remount-bind of a path that is never a mount root: EINVAL after
     * may_mount(), nothing changes even when permitted. */
    VERDICT(syscall(SYS_mount, "none", "/proc/self", NULL,
                    (unsigned long)(MS_REMOUNT | MS_BIND | MS_RDONLY), NULL), "mount(MS_REMOUNT|MS_BIND, /proc/self)");
}

static void p_umount2(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("umount2");
    /* MNT_EXPIRE with MNT_DETACH is always EINVAL once permitted. */
    VERDICT(syscall(SYS_umount2, "/proc/self", MNT_EXPIRE | MNT_DETACH), "umount2(/proc/self, MNT_EXPIRE|MNT_DETACH)");
}

static void p_pivot_root(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("pivot_root");
    VERDICT(syscall(SYS_pivot_root, "/proc/self", "/proc/self"), "pivot_root(/proc/self, /proc/self)");
}

static void p_chroot(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("chroot");
    VERDICT(syscall(SYS_chroot, "/"), "chroot(/)");
}

static void p_open_tree(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("open_tree");
    r = syscall(__NR_open_tree, AT_FDCWD, NOPATH, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (r >= 0)
        close((int)r);
    VERDICT(r, "open_tree(OPEN_TREE_CLONE)");
}

static void p_move_mount(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("move_mount");
    VERDICT(syscall(__NR_move_mount, -1, "", -1, "", 0x80000000U), "move_mount(invalid flags)");
}

static void p_fsopen(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("fsopen");
    r = syscall(__NR_fsopen, "tmpfs", 0x80U);
    if (r >= 0)
        close((int)r);
    VERDICT(r, "fsopen(tmpfs, invalid flags)");
}

static void p_fsconfig(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("fsconfig");
    VERDICT_REACH(syscall(__NR_fsconfig, -1, FSCONFIG_CMD_CREATE, NULL, NULL, 0), "fsconfig(-1)");
}

static void p_fsmount(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("fsmount");
    VERDICT(syscall(__NR_fsmount, -1, 0x80U, 0U), "fsmount(-1, invalid flags)");
}

static void p_fspick(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("fspick");
    VERDICT(syscall(__NR_fspick, AT_FDCWD, NOPATH, 0x80U), "fspick(invalid flags)");
}

static void p_mount_setattr(int argc, char **argv)
{
    struct aj_mount_attr attr;

    (void)argv;
    if (argc)
        usage("mount_setattr");
    memset(&attr, 0, sizeof attr);
    /* Two propagation types at once: EINVAL before any lookup. */
    attr.propagation = MS_SHARED | MS_PRIVATE;
    VERDICT(syscall(__NR_mount_setattr, AT_FDCWD, NOPATH, 0U, &attr,
                    (size_t)AJ_MOUNT_ATTR_SIZE_VER0), "mount_setattr(invalid propagation)");
}

/* ---- kernel attack surface -------------------------------------------- */

static void p_bpf(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("bpf");
    VERDICT_REACH(syscall(SYS_bpf, 0x7fff, NULL, 0U), "bpf(invalid cmd)");
}

static void p_perf_event_open(int argc, char **argv)
{
    struct perf_event_attr attr;
    long r;

    (void)argv;
    if (argc)
        usage("perf_event_open");
    memset(&attr, 0, sizeof attr);
    attr.size = 1; /* below PERF_ATTR_SIZE_VER0: E2BIG */
    r = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0UL);
    if (r >= 0)
        close((int)r);
    VERDICT_REACH(r, "perf_event_open(attr.size=1)");
}

static void p_io_uring_setup(int argc, char **argv)
{
    struct io_uring_params params;
    long r;

    (void)argv;
    if (argc)
        usage("io_uring_setup");
    memset(&params, 0, sizeof params);
    r = syscall(__NR_io_uring_setup, 0U, &params); /* entries=0: EINVAL */
    if (r >= 0)
        close((int)r);
    VERDICT(r, "io_uring_setup(0)");
}

static void p_userfaultfd(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("userfaultfd");
    /* Without UFFD_USER_MODE_ONLY (the variant kernel exploits need):
     * privileged unless vm.unprivileged_userfaultfd; the invalid O_RDWR bit
     * then makes it EINVAL. */
    r = syscall(__NR_userfaultfd, O_RDWR);
    if (r >= 0)
        close((int)r);
    VERDICT(r, "userfaultfd(invalid flags)");
}

static void p_keyctl(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("keyctl");
    r = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
    if (r >= 0)
        report(true, 0, "session keyring id %ld", r);
    VERDICT_REACH(r, "keyctl(KEYCTL_GET_KEYRING_ID)");
}

static void p_add_key(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("add_key");
    /* Keyring id 0 is invalid: EINVAL, nothing is created. */
    VERDICT_REACH(syscall(SYS_add_key, "user", "aj-try-probe", NULL, 0, 0), "add_key(keyring 0)");
}

static void p_request_key(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("request_key");
    /* No callout info: no upcall, ENOKEY. */
    VERDICT_REACH(syscall(SYS_request_key, "user", "aj-try-nonexistent-key", NULL, 0), "request_key(no callout)");
}

static void p_proc_keys(int argc, char **argv)
{
    static char buf[1 << 16];
    long serial;
    ssize_t n;

    if (argc != 1)
        usage("proc-keys SERIAL");
    serial = parse_long(argv[0], "proc-keys SERIAL");
    n = read_file("/proc/keys", buf, sizeof buf);
    if (n < 0)
        report(false, (int)-n, "read /proc/keys");
    for (char *line = buf; *line;) {
        char *nl = strchr(line, '\n');
        unsigned long v = strtoul(line, NULL, 16);
        if ((long)v == serial)
            report(true, 0, "host key %ld is visible in /proc/keys", serial);
        if (!nl)
            break;
        line = nl + 1;
    }
    report(false, 0, "host key %ld not in /proc/keys (%zd bytes)", serial, n);
}

static void p_kexec_load(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("kexec_load");
    /* 17 segments (> KEXEC_SEGMENT_MAX) and an unknown flag: EINVAL. */
    VERDICT(syscall(SYS_kexec_load, 0UL, 17UL, NULL, 0x8000UL), "kexec_load(invalid flags)");
}

static void p_kexec_file_load(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("kexec_file_load");
    VERDICT(syscall(__NR_kexec_file_load, -1, -1, 0UL, NULL, 1UL << 62), "kexec_file_load(invalid flags)");
}

static void p_init_module(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("init_module");
    /* A zero-length image is rejected (ENOEXEC) after may_init_module(). */
    VERDICT(syscall(SYS_init_module, NULL, 0UL, ""), "init_module(empty image)");
}

static void p_finit_module(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("finit_module");
    VERDICT(syscall(SYS_finit_module, -1, "", 0), "finit_module(-1)");
}

static void p_delete_module(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("delete_module");
    VERDICT(syscall(SYS_delete_module, "aj_try_nonexistent_module", O_NONBLOCK), "delete_module(nonexistent)");
}

static void p_reboot(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("reboot");
    /* Invalid magic numbers and an unknown command: EINVAL once permitted. */
    VERDICT(syscall(SYS_reboot, 0, 0, 0x12345678U, NULL), "reboot(invalid magic)");
}

static void p_swapon(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("swapon");
    VERDICT(syscall(SYS_swapon, NOPATH, 0), "swapon(nonexistent)");
}

static void p_swapoff(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("swapoff");
    VERDICT(syscall(SYS_swapoff, NOPATH), "swapoff(nonexistent)");
}

static void p_acct(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("acct");
    VERDICT(syscall(SYS_acct, NOPATH), "acct(nonexistent)");
}

static void p_quotactl(int argc, char **argv)
{
    char buf[64];

    (void)argv;
    if (argc)
        usage("quotactl");
    /* Q_GETFMT (0x800004) on user quota, read-only, nonexistent device. */
    VERDICT_REACH(syscall(SYS_quotactl, (0x800004 << 8) | 0, NOPATH, 0, buf), "quotactl(Q_GETFMT, nonexistent)");
}

static void p_iopl(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("iopl");
    /* Level 1 passes the privilege check but grants no port access
     * (only level 3 sets the I/O bitmap); restored at once anyway. */
    r = syscall(SYS_iopl, 1);
    if (r == 0)
        (void)syscall(SYS_iopl, 0);
    VERDICT(r, "iopl(1)");
}

static void p_ioperm(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("ioperm");
    /* Port 0xffff (unused); no I/O instruction is ever executed. */
    r = syscall(SYS_ioperm, 0xffffUL, 1UL, 1);
    if (r == 0)
        (void)syscall(SYS_ioperm, 0xffffUL, 1UL, 0);
    VERDICT(r, "ioperm(0xffff, 1, on)");
}

static void p_modify_ldt(int argc, char **argv)
{
    char buf[16];

    (void)argv;
    if (argc)
        usage("modify_ldt");
    VERDICT_REACH(syscall(SYS_modify_ldt, 0, buf, sizeof buf), "modify_ldt(read)");
}

static void p_personality(int argc, char **argv)
{
    unsigned long flag, mask;
    long cur, r, now;

    if (argc != 1)
        usage("personality addr_no_randomize|linux32");
    if (!strcmp(argv[0], "addr_no_randomize")) {
        flag = ADDR_NO_RANDOMIZE;
        mask = ADDR_NO_RANDOMIZE;
    } else if (!strcmp(argv[0], "linux32")) {
        flag = PER_LINUX32;
        mask = PER_MASK;
    } else {
        usage("personality addr_no_randomize|linux32");
    }
    /* A filter may refuse the query yet allow the change: try the change
     * anyway, from PER_LINUX if the current persona is unknown. */
    cur = syscall(SYS_personality, 0xffffffffUL);
    if (cur < 0)
        cur = PER_LINUX;
    r = syscall(SYS_personality, ((unsigned long)cur & ~mask) | flag);
    if (r < 0)
        report(false, errno, "personality(%s)", argv[0]);
    now = syscall(SYS_personality, 0xffffffffUL);
    (void)syscall(SYS_personality, (unsigned long)cur); /* restore */
    if (now >= 0 && ((unsigned long)now & mask) == flag)
        report(true, 0, "personality changed to %#lx (%s)", now, argv[0]);
    report(false, 0, "personality call returned but persona is %#lx", now);
}

static void p_clock_settime(int argc, char **argv)
{
    struct timespec ts = {0, 2000000000L}; /* tv_nsec out of range: EINVAL */

    (void)argv;
    if (argc)
        usage("clock_settime");
    VERDICT_REACH(syscall(SYS_clock_settime, CLOCK_REALTIME, &ts), "clock_settime(invalid time)");
}

static void p_settimeofday(int argc, char **argv)
{
    struct timezone tz = {100000, 0}; /* beyond +-15h: EINVAL after CAP_SYS_TIME */

    (void)argv;
    if (argc)
        usage("settimeofday");
    VERDICT(syscall(SYS_settimeofday, NULL, &tz), "settimeofday(NULL, invalid tz)");
}

static void p_syslog(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("syslog");
    VERDICT(syscall(SYS_syslog, AJ_SYSLOG_ACTION_SIZE_BUFFER, NULL, 0), "syslog(SYSLOG_ACTION_SIZE_BUFFER)");
}

static void p_mknod(int argc, char **argv)
{
    char path[4096];

    if (argc != 1)
        usage("mknod DIR");
    snprintf(path, sizeof path, "%s/aj-try-mknod-%d", argv[0], (int)getpid());
    /* A copy of /dev/null's node: harmless even if it is created. */
    if (mknod(path, S_IFCHR | 0600, makedev(1, 3)) < 0)
        report(false, errno, "mknod(%s, char 1:3)", path);
    (void)unlink(path);
    report(true, 0, "created (and removed) a char device node in %s", argv[0]);
}

static void p_open_by_handle_at(int argc, char **argv)
{
    struct aj_file_handle fh;
    long r;

    (void)argv;
    if (argc)
        usage("open_by_handle_at");
    /* A well-formed FILEID_INO32_GEN handle for inode 0, which no
     * filesystem has: EPERM without CAP_DAC_READ_SEARCH, ESTALE with it.
     * (Since 6.x an empty handle fails its shape check, EINVAL, before
     * the capability check, which would read as "permitted" for anyone.) */
    memset(&fh, 0, sizeof fh);
    fh.handle_bytes = 8;
    fh.handle_type = 1; /* FILEID_INO32_GEN */
    r = syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY | O_CLOEXEC);
    if (r >= 0)
        close((int)r);
    VERDICT(r, "open_by_handle_at(inode 0)");
}

static void p_name_to_handle_at(int argc, char **argv)
{
    struct aj_file_handle fh;
    int mnt_id;

    (void)argv;
    if (argc)
        usage("name_to_handle_at");
    memset(&fh, 0, sizeof fh); /* handle_bytes 0: EOVERFLOW with the size needed */
    VERDICT_REACH(syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &fh, &mnt_id, 0), "name_to_handle_at(/)");
}

static void p_x32(int argc, char **argv)
{
    long r;

    (void)argv;
    if (argc)
        usage("x32");
    r = syscall(__X32_SYSCALL_BIT | 39); /* x32 getpid */
    if (r == getpid())
        report(true, 0, "x32 getpid returned our pid: the x32 ABI is reachable");
    if (r < 0)
        report(false, errno, "x32 getpid");
    report(false, 0, "x32 getpid returned %ld", r);
}

static void p_int80(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("int80");
#if defined(__x86_64__)
    long r;
    /* i386 getpid (20) through the 32-bit entry point. */
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory", "cc", "r8", "r9", "r10", "r11");
    r = (int)r;
    if (r == getpid())
        report(true, 0, "int 0x80 getpid returned our pid: the i386 ABI is reachable");
    if (r < 0 && r > -4096)
        report(false, (int)-r, "int 0x80 getpid");
    report(false, 0, "int 0x80 getpid returned %ld", r);
#else
    report(false, ENOSYS, "not an x86_64 build");
#endif
}

/* ---- sockets, network ----------------------------------------------------- */

static void socket_verdict(int domain, int type, int proto, const char *what)
{
    int fd = socket(domain, type | SOCK_CLOEXEC, proto);

    if (fd < 0)
        report(false, errno, "socket(%s)", what);
    close(fd);
    report(true, 0, "socket(%s) created (and closed)", what);
}

static void p_socket_raw(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("socket-raw");
    socket_verdict(AF_INET, SOCK_RAW, IPPROTO_ICMP, "AF_INET, SOCK_RAW");
}

static void p_socket_packet(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("socket-packet");
    /* Protocol 0: the socket receives nothing until bound. */
    socket_verdict(AF_PACKET, SOCK_RAW, 0, "AF_PACKET, SOCK_RAW");
}

static void p_socket_vsock(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("socket-vsock");
    /* vsock is not network-namespaced: it reaches the hypervisor host. */
    socket_verdict(AF_VSOCK, SOCK_STREAM, 0, "AF_VSOCK, SOCK_STREAM");
}

static void set_timeouts(int fd)
{
    struct timeval tv = {2, 0};

    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

static void p_tcp_connect(int argc, char **argv)
{
    struct sockaddr_storage ss;
    socklen_t len;
    long port;
    int fd;

    if (argc != 2)
        usage("tcp-connect ADDR PORT");
    port = parse_long(argv[1], "tcp-connect ADDR PORT");
    if (port <= 0 || port > 65535)
        usage("bad port");
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, argv[0], &in4->sin_addr) == 1) {
        /* Safety: loopback only. */
        if ((ntohl(in4->sin_addr.s_addr) >> 24) != 127)
            usage("refusing a non-loopback address");
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        len = sizeof *in4;
    } else if (inet_pton(AF_INET6, argv[0], &in6->sin6_addr) == 1) {
        if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
            usage("refusing a non-loopback address");
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        len = sizeof *in6;
    } else {
        usage("bad address");
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        report(false, errno, "socket(TCP)");
    set_timeouts(fd);
    if (connect(fd, (struct sockaddr *)&ss, len) < 0)
        report(false, errno, "connect(%s:%ld)", argv[0], port);
    close(fd);
    report(true, 0, "connected to %s:%ld", argv[0], port);
}

/* bind + listen + connect + accept on 127.0.0.1 inside our own namespace. */
static void p_tcp_self(int argc, char **argv)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int l, c, a;

    (void)argv;
    if (argc)
        usage("tcp-self");
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        report(false, errno, "socket(TCP)");
    if (bind(l, (struct sockaddr *)&sa, sizeof sa) < 0)
        report(false, errno, "bind(127.0.0.1:0)");
    if (listen(l, 1) < 0)
        report(false, errno, "listen");
    if (getsockname(l, (struct sockaddr *)&sa, &len) < 0)
        report(false, errno, "getsockname");
    c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        report(false, errno, "socket(TCP client)");
    set_timeouts(c);
    if (connect(c, (struct sockaddr *)&sa, sizeof sa) < 0)
        report(false, errno, "connect(127.0.0.1:%d)", ntohs(sa.sin_port));
    a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (a < 0)
        report(false, errno, "accept");
    close(a);
    close(c);
    close(l);
    report(true, 0, "TCP over loopback works (port %d)", ntohs(sa.sin_port));
}

static socklen_t abstract_addr(struct sockaddr_un *su, const char *name)
{
    size_t n = strlen(name);

    if (n + 1 > sizeof su->sun_path)
        usage("abstract name too long");
    memset(su, 0, sizeof *su);
    su->sun_family = AF_UNIX;
    memcpy(su->sun_path + 1, name, n); /* sun_path[0] = '\0': abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void p_abstract_connect(int argc, char **argv)
{
    struct sockaddr_un su;
    socklen_t len;
    int fd;

    if (argc != 1 || !*argv[0])
        usage("abstract-connect NAME");
    len = abstract_addr(&su, argv[0]);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        report(false, errno, "socket(AF_UNIX)");
    set_timeouts(fd);
    if (connect(fd, (struct sockaddr *)&su, len) < 0)
        report(false, errno, "connect(@%s)", argv[0]);
    close(fd);
    report(true, 0, "connected to abstract socket @%s", argv[0]);
}

static void p_abstract_self(int argc, char **argv)
{
    struct sockaddr_un su;
    char name[64];
    socklen_t len;
    int l, c;

    (void)argv;
    if (argc)
        usage("abstract-self");
    snprintf(name, sizeof name, "aj-try-self-%d", (int)getpid());
    len = abstract_addr(&su, name);
    l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        report(false, errno, "socket(AF_UNIX)");
    if (bind(l, (struct sockaddr *)&su, len) < 0)
        report(false, errno, "bind(@%s)", name);
    if (listen(l, 1) < 0)
        report(false, errno, "listen");
    c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        report(false, errno, "socket(AF_UNIX client)");
    if (connect(c, (struct sockaddr *)&su, len) < 0)
        report(false, errno, "connect(@%s)", name);
    close(c);
    close(l);
    report(true, 0, "abstract unix socket in our own namespace works (@%s)", name);
}

static void p_netdevs(int argc, char **argv)
{
    char buf[8192], names[1024] = "";
    bool other = false;
    ssize_t n;

    (void)argv;
    if (argc)
        usage("netdevs");
    n = read_file("/proc/net/dev", buf, sizeof buf);
    if (n >= 0) {
        char *save = NULL;
        int lineno = 0;
        for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            if (++lineno <= 2)
                continue;
            while (*line == ' ')
                line++;
            line[strcspn(line, ":")] = '\0';
            append(names, sizeof names, line);
            append(names, sizeof names, " ");
            other |= strcmp(line, "lo") != 0;
        }
    } else {
        struct if_nameindex *ifs = if_nameindex();
        if (!ifs)
            report(false, errno, "no /proc/net/dev and if_nameindex failed");
        for (struct if_nameindex *i = ifs; i->if_index; i++) {
            append(names, sizeof names, i->if_name);
            append(names, sizeof names, " ");
            other |= strcmp(i->if_name, "lo") != 0;
        }
        if_freenameindex(ifs);
    }
    if (other)
        report(true, 0, "network interfaces beyond loopback: %s", names);
    report(false, 0, "interfaces: %s", *names ? names : "(none)");
}

/* ---- terminal, IPC ------------------------------------------------------ */

static void p_tiocsti(int argc, char **argv)
{
    char c = ' '; /* one harmless character, into the test's own pty */
    int tty = isatty(0);

    (void)argv;
    if (argc)
        usage("tiocsti");
    if (ioctl(0, TIOCSTI, &c) < 0)
        report(false, errno, "ioctl(0, TIOCSTI) (fd 0 %s a tty)", tty ? "is" : "is not");
    report(true, 0, "TIOCSTI pushed a character into the terminal's input");
}

/* The filter layer alone: on fd -1 the kernel can only say EBADF, so EPERM
 * here comes from seccomp (the kernel's own TIOCSTI checks also say EPERM on
 * a real tty, which would hide a missing filter rule). */
static void p_tiocsti_filter(int argc, char **argv)
{
    char c = ' ';

    (void)argv;
    if (argc)
        usage("tiocsti-filter");
    VERDICT_REACH(ioctl(-1, TIOCSTI, &c), "ioctl(-1, TIOCSTI)");
}

static void p_tioclinux(int argc, char **argv)
{
    char sub[2] = {TIOCL_GETFGCONSOLE, 0}; /* read-only subcode */

    (void)argv;
    if (argc)
        usage("tioclinux");
    VERDICT_REACH(ioctl(0, TIOCLINUX, sub), "ioctl(0, TIOCLINUX, GETFGCONSOLE)");
}

/* On fd -1 the kernel says EBADF: EPERM can only be the filter. */
static void p_tioccons(int argc, char **argv)
{
    (void)argv;
    if (argc)
        usage("tioccons");
    VERDICT_REACH(ioctl(-1, TIOCCONS), "ioctl(-1, TIOCCONS)");
}

static void p_tiocsetd(int argc, char **argv)
{
    int ldisc = N_TTY; /* the default discipline: harmless even if it got through */

    (void)argv;
    if (argc)
        usage("tiocsetd");
    VERDICT_REACH(ioctl(-1, TIOCSETD, &ldisc), "ioctl(-1, TIOCSETD, N_TTY)");
}

static void p_shm(int argc, char **argv)
{
    long key;
    int id;

    if (argc != 1)
        usage("shm KEY");
    key = parse_long(argv[0], "shm KEY");
    id = shmget((key_t)key, 0, 0);
    if (id < 0)
        report(false, errno, "shmget(key %ld)", key);
    report(true, 0, "SysV shm segment with key %ld is visible (id %d)", key, id);
}

/* ---- securebits, memfd, socket protocols ----------------------------------- */

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
#define SECBIT_NO_SETUID_FIXUP (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

/* Blocked when root's special treatment is off and locked for good: a uid
 * 0 process (or a setuid-root exec) gains nothing, and no later prctl can
 * turn it back on. Only reads. */
static void p_securebits(int argc, char **argv)
{
    const int want = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                     SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    int r;

    (void)argv;
    if (argc)
        usage("securebits");
    r = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (r < 0)
        report(false, errno, "prctl(PR_GET_SECUREBITS)");
    if ((r & want) == want)
        report(false, 0, "securebits=0x%x: noroot, no_setuid_fixup, no_cap_ambient_raise locked", r);
    report(true, 0, "securebits=0x%x: not locked (missing 0x%x)", r, want & ~r);
}

/* memfd-exec none|exec|noexec-seal: create a memfd with those flags, copy
 * this static binary into it and execute it (as "aj-try noop", output
 * discarded) in a child. Permitted: the memfd ran, fileless execution. */
static void p_memfd_exec(int argc, char **argv)
{
    static char buf[1 << 16];
    unsigned flags = MFD_CLOEXEC;
    int mfd, self, pipefd[2], status, e = 0;
    ssize_t n;
    pid_t pid;

    if (argc != 1)
        usage("memfd-exec none|exec|noexec-seal");
    if (!strcmp(argv[0], "exec"))
        flags |= MFD_EXEC;
    else if (!strcmp(argv[0], "noexec-seal"))
        flags |= MFD_NOEXEC_SEAL;
    else if (strcmp(argv[0], "none"))
        usage("memfd-exec none|exec|noexec-seal");
    mfd = (int)syscall(SYS_memfd_create, "aj-try", flags);
    if (mfd < 0)
        report(false, errno, "memfd_create(flags 0x%x)", flags);
    self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        usage("cannot open /proc/self/exe");
    while ((n = read(self, buf, sizeof buf)) > 0)
        if (write(mfd, buf, (size_t)n) != n)
            usage("cannot fill the memfd");
    close(self);
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        usage("pipe");
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        usage("fork");
    if (pid == 0) {
        char *args[] = {"aj-try", "noop", NULL};
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 1);
        syscall(SYS_execveat, mfd, "", args, environ, AT_EMPTY_PATH);
        e = errno;
        if (write(pipefd[1], &e, sizeof e) != (ssize_t)sizeof e)
            _exit(126);
        _exit(127);
    }
    close(pipefd[1]);
    n = read(pipefd[0], &e, sizeof e);
    if (waitpid(pid, &status, 0) < 0)
        usage("waitpid");
    if (n == (ssize_t)sizeof e)
        report(false, e, "memfd created (flags 0x%x) but execveat refused", flags);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        report(true, 0, "executed a binary from a memfd (flags 0x%x)", flags);
    report(false, 0, "memfd child ended with status 0x%x", status);
}

static int parse_family(const char *s)
{
    if (!strcmp(s, "unix"))
        return AF_UNIX;
    if (!strcmp(s, "inet"))
        return AF_INET;
    if (!strcmp(s, "inet6"))
        return AF_INET6;
    if (!strcmp(s, "netlink"))
        return AF_NETLINK;
    usage("FAMILY: unix, inet, inet6 or netlink");
}

static int parse_socktype(const char *s)
{
    if (!strcmp(s, "stream"))
        return SOCK_STREAM;
    if (!strcmp(s, "dgram"))
        return SOCK_DGRAM;
    if (!strcmp(s, "seqpacket"))
        return SOCK_SEQPACKET;
    if (!strcmp(s, "raw"))
        return SOCK_RAW;
    usage("TYPE: stream, dgram, seqpacket or raw");
}

/* socket-proto FAMILY TYPE PROTO: create (and close) one socket. */
static void p_socket_proto(int argc, char **argv)
{
    char what[96];

    if (argc != 3)
        usage("socket-proto FAMILY TYPE PROTO");
    snprintf(what, sizeof what, "%s, %s, %ld", argv[0], argv[1], parse_long(argv[2], "PROTO"));
    socket_verdict(parse_family(argv[0]), parse_socktype(argv[1]), (int)parse_long(argv[2], "PROTO"), what);
}

/* socketpair: a connected AF_UNIX pair, one byte across. */
static void p_socketpair(int argc, char **argv)
{
    int sv[2];
    char c = 'x';

    (void)argv;
    if (argc)
        usage("socketpair");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        report(false, errno, "socketpair(AF_UNIX, SOCK_STREAM)");
    if (write(sv[0], &c, 1) != 1 || read(sv[1], &c, 1) != 1)
        report(false, errno, "byte across the socketpair");
    report(true, 0, "socketpair(AF_UNIX) works, one byte across");
}

/* ---- issue 12: kernel attack surface that must be refused AND reported ------ */

static const struct {
    const char *name;
    int family, type, proto;
} rare_families[] = {
    {"ax25", 3, SOCK_SEQPACKET, 0},     {"atmpvc", 8, SOCK_DGRAM, 0},   {"x25", 9, SOCK_SEQPACKET, 0},
    {"key", 15, SOCK_RAW, 2},           {"rds", 21, SOCK_SEQPACKET, 0}, {"pppox", 24, SOCK_STREAM, 0},
    {"llc", 26, SOCK_DGRAM, 0},         {"can", 29, SOCK_RAW, 1},       {"tipc", 30, SOCK_RDM, 0},
    {"bluetooth", 31, SOCK_RAW, 0},     {"alg", 38, SOCK_SEQPACKET, 0}, {"nfc", 39, SOCK_DGRAM, 0},
    {"vsock", 40, SOCK_STREAM, 0},      {"kcm", 41, SOCK_DGRAM, 0},     {"qipcrtr", 42, SOCK_DGRAM, 0},
    {"smc", 43, SOCK_STREAM, 0},        {"xdp", 44, SOCK_RAW, 0},       {"mctp", 45, SOCK_DGRAM, 0},
};

/* socket-family NAME: create (and close) a socket of a rarely used family. */
static void p_socket_family(int argc, char **argv)
{
    char what[96];

    if (argc != 1)
        usage("socket-family NAME");
    for (size_t i = 0; i < sizeof rare_families / sizeof rare_families[0]; i++)
        if (!strcmp(argv[0], rare_families[i].name)) {
            snprintf(what, sizeof what, "family %d (%s)", rare_families[i].family, argv[0]);
            socket_verdict(rare_families[i].family, rare_families[i].type, rare_families[i].proto, what);
        }
    usage("socket-family: unknown family name");
}

/* socket-netlink PROTO: a raw netlink socket of that protocol number. */
static void p_socket_netlink(int argc, char **argv)
{
    char what[64];

    if (argc != 1)
        usage("socket-netlink PROTO");
    snprintf(what, sizeof what, "AF_NETLINK, SOCK_RAW, %ld", parse_long(argv[0], "PROTO"));
    socket_verdict(AF_NETLINK, SOCK_RAW, (int)parse_long(argv[0], "PROTO"), what);
}

/* listmount / statmount (6.8): with a request of size 0, the kernel answers
 * EINVAL after the call got through; EPERM is the filter. Reachability. */
static void p_mount_list(int argc, char **argv)
{
    long nr = !strcmp(g_probe, "listmount") ? 458 : 457;
    uint64_t buf[8] = {0};
    long r;

    (void)argv;
    if (argc)
        usage("listmount|statmount");
    r = syscall(nr, buf, buf, 8, 0);
    if (r < 0 && errno == EPERM)
        report(false, errno, "%s refused (reachability)", g_probe);
    if (r < 0 && errno == ENOSYS)
        report(false, errno, "%s: no such system call (reachability)", g_probe);
    report(true, r < 0 ? errno : 0, "%s reached the kernel (reachability)", g_probe);
}

/* ---- issue 12, relay: event floods and the terminal ------------------------------ */

struct flood {
    uint64_t until_ms;
    uint64_t attempts, permitted;
};

static uint64_t flood_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *flood_thread(void *arg)
{
    struct flood *f = arg;
    uint64_t n = 0, ok = 0;

    /* The raw call: a refused unshare changes nothing, and one that the
     * kernel allowed would only affect this throw-away process. */
    while (flood_now_ms() < f->until_ms) {
        if (syscall(SYS_unshare, CLONE_NEWUSER) == 0)
            ok++;
        n++;
    }
    __atomic_fetch_add(&f->attempts, n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&f->permitted, ok, __ATOMIC_RELAXED);
    return NULL;
}

/* unshare-flood THREADS MS: unshare(CLONE_NEWUSER) in a loop from THREADS
 * threads for MS milliseconds (the event-budget attack). */
static void p_unshare_flood(int argc, char **argv)
{
    struct flood f = {0};
    pthread_t t[64];
    long threads, ms;

    if (argc != 2 || (threads = strtol(argv[0], NULL, 10)) < 1 || threads > 64 || (ms = strtol(argv[1], NULL, 10)) < 1)
        usage("unshare-flood THREADS MS");
    f.until_ms = flood_now_ms() + (uint64_t)ms;
    for (long i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, flood_thread, &f) != 0)
            usage("pthread_create");
    for (long i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    report(f.permitted > 0, f.permitted ? 0 : EPERM, "attempts=%" PRIu64 " permitted=%" PRIu64, f.attempts,
           f.permitted);
}

/* decoy-flood N: connect to /var/run/docker.sock N times. */
static void p_decoy_flood(int argc, char **argv)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "/var/run/docker.sock"};
    long n, ok = 0;

    if (argc != 1 || (n = strtol(argv[0], NULL, 10)) < 1)
        usage("decoy-flood N");
    for (long i = 0; i < n; i++) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            continue;
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            ok++;
        close(s);
    }
    report(ok > 0, ok ? 0 : errno, "connects=%ld", ok);
}

/* tty-info: for fds 0-2, whether each is a terminal and its device
 * numbers; then TIOCSTI of one character on each terminal among them.
 * detail: "fd0=tty:1,rdev:136:3,ino:N fd1=... sti0=EPERM ..." */
static void p_tty_info(int argc, char **argv)
{
    char out[1024] = "";
    size_t off = 0;
    bool injected = false;

    (void)argv;
    if (argc != 0)
        usage("tty-info");
    for (int fd = 0; fd < 3; fd++) {
        struct stat s;
        if (fstat(fd, &s) < 0) {
            off += (size_t)snprintf(out + off, sizeof(out) - off, "fd%d=closed ", fd);
            continue;
        }
        off += (size_t)snprintf(out + off, sizeof(out) - off, "fd%d=tty:%d,rdev:%u:%u,dev:%u:%u,ino:%llu ", fd,
                                isatty(fd), major(s.st_rdev), minor(s.st_rdev), major(s.st_dev), minor(s.st_dev),
                                (unsigned long long)s.st_ino);
    }
    for (int fd = 0; fd < 3; fd++) {
        char c = '#';
        if (!isatty(fd))
            continue;
        if (ioctl(fd, TIOCSTI, &c) == 0) {
            injected = true;
            off += (size_t)snprintf(out + off, sizeof(out) - off, "sti%d=ok ", fd);
        } else {
            off += (size_t)snprintf(out + off, sizeof(out) - off, "sti%d=%s ", fd, errname(errno));
        }
    }
    report(injected, 0, "%s", out);
}

/* ---- dispatch ---------------------------------------------------------------- */

struct probe {
    const char *name;
    void (*fn)(int argc, char **argv);
};

static const struct probe probes[] = {
    {"noop", p_noop},
    {"read", p_read},
    {"grep", p_grep},
    {"environ-scan", p_environ_scan},
    {"env", p_env},
    {"write-open", p_write_open},
    {"exe-write", p_exe_write},
    {"create", p_create},
    {"symlink-read", p_symlink_read},
    {"exec-copy", p_exec_copy},
    {"fds", p_fds},
    {"cwd", p_cwd},
    {"release-agent", p_release_agent},
    {"kallsyms", p_kallsyms},
    {"devices", p_devices},
    {"runtime-sockets", p_runtime_sockets},
    {"mountinfo", p_mountinfo},
    {"pids", p_pids},
    {"pid-visible", p_pid_visible},
    {"ptrace-attach", p_ptrace_attach},
    {"ptrace-traceme", p_ptrace_traceme},
    {"process_vm_readv", p_process_vm_readv},
    {"caps", p_caps},
    {"nnp", p_nnp},
    {"seccomp", p_seccomp},
    {"euid", p_euid},
    {"setuid0", p_setuid0},
    {"suid-mount", p_suid_mount},
    {"rlimit-core", p_rlimit_core},
    {"unshare", p_unshare},
    {"unshare-flood", p_unshare_flood},
    {"decoy-flood", p_decoy_flood},
    {"tty-info", p_tty_info},
    {"clone", p_clone},
    {"clone3", p_clone3},
    {"setns", p_setns},
    {"sethostname", p_sethostname},
    {"mount", p_mount},
    {"umount2", p_umount2},
    {"pivot_root", p_pivot_root},
    {"chroot", p_chroot},
    {"open_tree", p_open_tree},
    {"move_mount", p_move_mount},
    {"fsopen", p_fsopen},
    {"fsconfig", p_fsconfig},
    {"fsmount", p_fsmount},
    {"fspick", p_fspick},
    {"mount_setattr", p_mount_setattr},
    {"bpf", p_bpf},
    {"perf_event_open", p_perf_event_open},
    {"io_uring_setup", p_io_uring_setup},
    {"userfaultfd", p_userfaultfd},
    {"keyctl", p_keyctl},
    {"add_key", p_add_key},
    {"request_key", p_request_key},
    {"proc-keys", p_proc_keys},
    {"kexec_load", p_kexec_load},
    {"kexec_file_load", p_kexec_file_load},
    {"init_module", p_init_module},
    {"finit_module", p_finit_module},
    {"delete_module", p_delete_module},
    {"reboot", p_reboot},
    {"swapon", p_swapon},
    {"swapoff", p_swapoff},
    {"acct", p_acct},
    {"quotactl", p_quotactl},
    {"iopl", p_iopl},
    {"ioperm", p_ioperm},
    {"modify_ldt", p_modify_ldt},
    {"personality", p_personality},
    {"clock_settime", p_clock_settime},
    {"settimeofday", p_settimeofday},
    {"syslog", p_syslog},
    {"mknod", p_mknod},
    {"open_by_handle_at", p_open_by_handle_at},
    {"name_to_handle_at", p_name_to_handle_at},
    {"x32", p_x32},
    {"tioccons", p_tioccons},
    {"tiocsetd", p_tiocsetd},
    {"int80", p_int80},
    {"socket-raw", p_socket_raw},
    {"socket-packet", p_socket_packet},
    {"socket-vsock", p_socket_vsock},
    {"tcp-connect", p_tcp_connect},
    {"tcp-self", p_tcp_self},
    {"abstract-connect", p_abstract_connect},
    {"abstract-self", p_abstract_self},
    {"netdevs", p_netdevs},
    {"tiocsti", p_tiocsti},
    {"tiocsti-filter", p_tiocsti_filter},
    {"tioclinux", p_tioclinux},
    {"shm", p_shm},
    {"securebits", p_securebits},
    {"memfd-exec", p_memfd_exec},
    {"socket-proto", p_socket_proto},
    {"socketpair", p_socketpair},
    /* issue 12 */
    {"socket-family", p_socket_family},
    {"socket-netlink", p_socket_netlink},
    {"listmount", p_mount_list},
    {"statmount", p_mount_list},
};

int main(int argc, char **argv)
{
    if (argc > 0)
        g_argv0 = argv[0];
    if (argc < 2) {
        fputs("usage: aj-try PROBE [ARGS...]\nprobes:", stderr);
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
            fprintf(stderr, " %s", probes[i].name);
        fputc('\n', stderr);
        return 2;
    }
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        if (!strcmp(argv[1], probes[i].name)) {
            g_probe = probes[i].name;
            probes[i].fn(argc - 2, argv + 2);
            report(false, 0, "probe returned without a verdict"); /* not reached */
        }
    }
    g_probe = argv[1];
    usage("unknown probe");
}
