/* SPDX-License-Identifier: Apache-2.0 */
/* The supervisor: the only module that knows the order of steps.
 *
 *   supervisor ── clone3(NEWUSER|NEWPID|NEWNS|NEWNET|NEWIPC|NEWUTS|NEWCGROUP)
 *        │            └─ init (pid 1): wait for id maps, become the inside
 *        │               user, hostname, lo, root filesystem + pivot_root,
 *        │               time namespace, fresh keyring, fork payload, drop
 *        │               its own privileges, reap, report the exit status
 *        │                   └─ payload: setsid, workdir, rlimits, caps,
 *        │                      no_new_privs, Landlock, close fds, seccomp,
 *        │                      execve
 *        └─ poll: sync socket (errors, layers, exit status), pidfd of init,
 *           signals, wall-clock deadline → result
 *
 * Between clone and execve the sandbox side does not malloc: everything it
 * needs (mount plan, BPF program, envp) is built before the clone. */
#include "agentjail.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/nsfs.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "aj_audit.h"
#include "aj_caps.h"
#include "aj_decoy.h"
#include "aj_notify.h"
#include "aj_cgroup.h"
#include "aj_landlock.h"
#include "aj_limits.h"
#include "aj_missing.h"
#include "aj_mount.h"
#include "aj_netns.h"
#include "aj_seccomp.h"
#include "aj_userns.h"
#include "aj_util.h"

enum aj_msg_type {
    AJ_MSG_GO = 1,   /* supervisor → init: id maps are written */
    AJ_MSG_ERROR,    /* sandbox → supervisor: setup failed, err says why */
    AJ_MSG_READY,    /* payload → supervisor: every layer applied, about to exec */
    AJ_MSG_EXIT,     /* init → supervisor: the payload's wait status */
    AJ_MSG_DECOYS,   /* init → supervisor: decoy files (+ socket); wstatus = number of files */
    AJ_MSG_LISTENER, /* payload → supervisor: the seccomp notification fd */
    AJ_MSG_RUN,      /* pool → parked payload: its command (struct aj_run_msg) */
    AJ_MSG_NETNS,    /* netns helper → init: the new network namespace (fd), or err */
    AJ_MSG_ARMED,    /* supervisor → init: the decoys are leased (wstatus: how many failed) */
    AJ_MSG_PTY,      /* init → supervisor: the master of the payload's own pty */
};

/* A pooled run's command: this header, argc then envc NUL-terminated
 * strings, and three fds (stdin, stdout, stderr). Everything of the
 * request travels here, taken when the run starts: a parked sandbox holds
 * no request's data (not even an env_pass value read while it was parked).
 * Bounded so the waiting payload can take it into static memory with one
 * recvmsg. */
struct aj_run_msg {
    uint32_t type;
    uint32_t argc;
    uint32_t envc;
};
#define AJ_RUN_MAX_BYTES (64 * 1024)
#define AJ_RUN_MAX_ARGS 4096

/* fds one message can carry: the decoy socket and its files at most. */
#define AJ_MAX_MSG_FDS (1 + AJ_DECOY_MAX_FILES + 1)

struct aj_sync_msg {
    uint32_t type;
    int32_t wstatus;
    uint32_t layers;
    int32_t landlock_abi;
    struct aj_error err;
};

/* Lease breaks on the decoy files (see aj_decoy_parent_lease). Real-time,
 * so each break is queued with its fd; clear of glibc's own (SIGRTMIN+0..2). */
#define SIG_DECOY (SIGRTMIN + 6)

#define NS_FLAGS                                                                                   \
    (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |     \
     CLONE_NEWCGROUP)

/* Everything the sandbox side reads. Built before clone, never freed by
 * the child (it execs or _exits). */
struct run_ctx {
    const struct aj_policy *pol;
    char **argv;          /* a copy: see copy_argv */
    char **envp;
    const char *path_env; /* PATH value used for the command search */
    struct aj_mount_plan plan;
    struct aj_bpf bpf;
    /* The filter for a pid namespace with vm.memfd_noexec=2 (root mode,
     * Linux 6.3+; see set_memfd_noexec): len 0 where it cannot be set. */
    struct aj_bpf bpf_memfd;
    sigset_t orig_mask;
    int sock;             /* sandbox end of the sync socket */
    int out_fd, err_fd;   /* captured stdout/stderr write ends, or -1 */
    int in_fd;            /* parked: /dev/null for init's stdin, else -1 */
    bool parked;          /* pooled: the payload waits for AJ_MSG_RUN before exec */
    bool netns_late;      /* the network namespace comes from the helper (AJ_MSG_NETNS) */
    int cg_join[AJ_CG_MAX_JOIN]; /* v1 "tasks" files to write "0" to, first thing */
    size_t n_cg_join;
    int landlock_abi;
    bool rootless;
    bool degraded;
    uid_t host_uid;
    gid_t host_gid;
    uint32_t layers;      /* accumulated on the sandbox side */
    struct aj_decoy_files decoys;
    unsigned skip;        /* AJ_SKIP_*: layers left out on purpose (tests of verify) */
    /* The caller's stdin and stdout are a terminal: the payload gets a pty
     * of its own instead (see child_make_pty), as its 0 and 1 (and 2 with
     * pty_err); init's own 0-2 are /dev/null meanwhile. */
    bool want_pty, pty_err;
    int pty_slave;
};

/* AGENTJAIL_UNSAFE_SKIP_LAYER=seccomp|landlock: leave one layer out, so
 * that the tests can show `agentjail verify` notices. Never for production:
 * it is loud on stderr, in the result's layers and in a warning event. */
enum {
    AJ_SKIP_SECCOMP = 1u << 0,
    AJ_SKIP_LANDLOCK = 1u << 1,
};

/* ---- both sides ----------------------------------------------------------------- */

/* The fds a received message carried (SCM_RIGHTS), at most max of them;
 * any beyond that are closed, not leaked. No allocation: the sandbox side
 * uses it between clone and exec. */
static int collect_fds(struct msghdr *mh, int *fds, int max)
{
    int n = 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (n < max)
                fds[n++] = fd;
            else
                (void)close(fd);
        }
    }
    return n;
}

/* ---- sandbox side ------------------------------------------------------------ */

static int arm_death_signal(int sock);

static void send_msg(int sock, uint32_t type, int wstatus, uint32_t layers, int abi,
                     const struct aj_error *err)
{
    struct aj_sync_msg m = {.type = type, .wstatus = wstatus, .layers = layers, .landlock_abi = abi};
    if (err)
        m.err = *err;
    /* Nothing to do on failure: the supervisor sees EOF and reports it. */
    (void)aj_write_all(sock, &m, sizeof(m));
}

/* A message carrying fds (SCM_RIGHTS): the decoys' and the seccomp
 * listener travel from the sandbox to the supervisor this way. */
/* One message with fds (SCM_RIGHTS): the decoys, the seccomp listener and
 * the netns go to the supervisor or init this way, a pooled command's
 * stdin/stdout/stderr to its payload. MSG_NOSIGNAL: a gone peer is an
 * error to report, not a SIGPIPE. */
static int send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * AJ_MAX_MSG_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *cm;

    if (nfds < 1 || nfds > AJ_MAX_MSG_FDS)
        return -EINVAL;
    memset(&u, 0, sizeof(u));
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != (ssize_t)len)
        return -errno;
    return 0;
}

static int send_fds(int sock, const struct aj_sync_msg *m, const int *fds, int nfds)
{
    return send_with_fds(sock, m, sizeof(*m), fds, nfds);
}

static __attribute__((noreturn)) void child_fail(struct run_ctx *c, struct aj_error *err, int code)
{
    send_msg(c->sock, AJ_MSG_ERROR, 0, c->layers, c->landlock_abi, err);
    _exit(code);
}

/* execvpe without malloc: try each PATH entry, prefer EACCES over ENOENT
 * as execvp does. */
static int exec_command(struct run_ctx *c)
{
    const char *cmd = c->argv[0];
    const char *p = c->path_env;
    int saved = ENOENT;
    char buf[4096];

    if (strchr(cmd, '/')) {
        execve(cmd, c->argv, c->envp);
        return errno;
    }
    while (p && *p) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0 && n + 1 + strlen(cmd) < sizeof(buf)) {
            memcpy(buf, p, n);
            buf[n] = '/';
            strcpy(buf + n + 1, cmd);
            execve(buf, c->argv, c->envp);
            if (errno == EACCES)
                saved = EACCES;
            else if (errno != ENOENT && errno != ENOTDIR)
                return errno;
        }
        p = colon ? colon + 1 : NULL;
    }
    return saved;
}

/* Captured output: the pipes become fds 1 and 2 (init's, so the payload
 * and everything it starts inherit them). */
static int redirect_output(struct run_ctx *c, struct aj_error *err)
{
    if (c->in_fd >= 0 && dup2(c->in_fd, STDIN_FILENO) < 0)
        return aj_err(err, errno, "redirect stdin");
    if (c->out_fd >= 0 && dup2(c->out_fd, STDOUT_FILENO) < 0)
        return aj_err(err, errno, "redirect stdout");
    if (c->err_fd >= 0 && dup2(c->err_fd, STDERR_FILENO) < 0)
        return aj_err(err, errno, "redirect stderr");
    return 0;
}

/* One message to the sandbox, with no fds. MSG_NOSIGNAL: a sandbox that
 * already exited must give us EPIPE, not a SIGPIPE that kills the
 * supervisor (and, through the death signal, the report of why). */
static int send_plain(int sock, const void *buf, size_t len)
{
    ssize_t n;

    do
        n = send(sock, buf, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return n == (ssize_t)len ? 0 : -EIO;
}

/* A pooled sandbox's payload waits here, every layer applied, for its one
 * command. Static memory: this process is a fork that will exec, and the
 * request is bounded (AJ_RUN_MAX_*). The fds arrive close-on-exec; the
 * copies made onto 0, 1 and 2 are what the command inherits. */
static char run_buf[AJ_RUN_MAX_BYTES];
static char *run_argv[AJ_RUN_MAX_ARGS + 1];
static char *run_envp[AJ_RUN_MAX_ARGS + 1];

/* n NUL-terminated strings from buf[*off..len) into out (NULL-terminated);
 * false if the message holds fewer. */
static bool take_strings(char *buf, size_t len, size_t *off, size_t n, char **out)
{
    size_t i = 0;

    while (i < n && *off < len) {
        char *end = memchr(buf + *off, '\0', len - *off);
        if (!end)
            break;
        out[i++] = buf + *off;
        *off = (size_t)(end - buf) + 1;
    }
    out[i] = NULL;
    return i == n;
}

static void receive_run(struct run_ctx *c)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * 3)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = run_buf, .iov_len = sizeof(run_buf)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct aj_error err = {0};
    struct aj_run_msg hdr;
    int fds[3] = {-1, -1, -1}, nfds = 0;
    size_t off;
    ssize_t n;

    do
        n = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        _exit(125); /* the pool went away before using this sandbox */
    nfds = collect_fds(&mh, fds, 3);
    memcpy(&hdr, run_buf, (size_t)n < sizeof(hdr) ? (size_t)n : sizeof(hdr));
    if ((size_t)n < sizeof(hdr) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds != 3 ||
        hdr.type != AJ_MSG_RUN || hdr.argc < 1 || hdr.argc > AJ_RUN_MAX_ARGS || hdr.envc > AJ_RUN_MAX_ARGS) {
        aj_err(&err, EPROTO, "malformed run request from the pool");
        child_fail(c, &err, 125);
    }
    off = sizeof(hdr);
    if (!take_strings(run_buf, (size_t)n, &off, hdr.argc, run_argv) ||
        !take_strings(run_buf, (size_t)n, &off, hdr.envc, run_envp)) {
        aj_err(&err, EPROTO, "malformed run request from the pool");
        child_fail(c, &err, 125);
    }
    c->envp = run_envp;
    c->path_env = AJ_DEFAULT_PATH;
    for (size_t i = 0; i < hdr.envc; i++)
        if (strncmp(run_envp[i], "PATH=", 5) == 0)
            c->path_env = run_envp[i] + 5;
    for (int i = 0; i < 3; i++)
        if (dup2(fds[i], i) < 0) {
            aj_err(&err, errno, "take the caller's fd %d", i);
            child_fail(c, &err, 125);
        }
    for (int i = 0; i < 3; i++)
        (void)close(fds[i]);
    c->argv = run_argv;
}

/* Init, right after unshare(CLONE_NEWTIME), before any process is in the
 * new time namespace (the kernel refuses offsets after that): move
 * CLOCK_MONOTONIC and CLOCK_BOOTTIME back to about zero, so /proc/uptime
 * and both clocks count from the sandbox's start, not the host's boot
 * (how long the host has been up dates its kernel patches). Whole seconds
 * down: the resulting clocks stay >= 0, as the kernel demands. */
static int set_own_uptime(int fd, struct aj_error *err)
{
    struct timespec mono, boot;
    char buf[96];
    int n;

    if (clock_gettime(CLOCK_MONOTONIC, &mono) < 0 || clock_gettime(CLOCK_BOOTTIME, &boot) < 0)
        return aj_err(err, errno, "clock_gettime");
    n = snprintf(buf, sizeof(buf), "%d %lld 0\n%d %lld 0\n", CLOCK_MONOTONIC, -(long long)mono.tv_sec,
                 CLOCK_BOOTTIME, -(long long)boot.tv_sec);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return aj_err(err, EIO, "time namespace offsets");
    if (write(fd, buf, (size_t)n) != n)
        return aj_err(err, errno, "write /proc/self/timens_offsets");
    return 0;
}

static bool memfd_noexec_sealed(void)
{
    char buf[8] = "";
    int fd = open("/proc/sys/vm/memfd_noexec", O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    return n > 0 && buf[0] == '2';
}

static __attribute__((noreturn)) void payload_main(struct run_ctx *c)
{
    const struct aj_policy *pol = c->pol;
    struct aj_error err = {0};
    uint32_t ll_layers = 0;
    int e, r;

    /* The payload starts with every signal at its default and none
     * blocked: SIG_IGN survives execve, so a caller that ignores SIGINT or
     * SIGTERM (nohup, a server) would hand that on, and a pooled payload
     * would inherit the mask of whoever created the pool. Handlers are
     * reset by execve anyway; setting SIG_DFL is async-signal-safe. */
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &dfl, NULL); /* EINVAL for glibc's own (32, 33): handled at exec */
    }
    {
        sigset_t none;
        sigemptyset(&none);
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
            child_fail(c, &err, 125);
    }
    /* A new session: no controlling terminal of the host, so TIOCSTI on an
     * inherited tty fails in the kernel too (CVE-2017-5226), and the
     * payload cannot signal the caller's process group. */
    if (setsid() < 0) {
        aj_err(&err, errno, "setsid");
        child_fail(c, &err, 125);
    }
    c->layers |= AJ_LAYER_NEW_SESSION;
    if (c->pty_slave >= 0) {
        /* Its own pty as its controlling terminal: ^C, job control and
         * window size work, on a terminal that is the sandbox's. */
        if (ioctl(c->pty_slave, TIOCSCTTY, 0) < 0 || dup2(c->pty_slave, STDIN_FILENO) < 0 ||
            dup2(c->pty_slave, STDOUT_FILENO) < 0 || (c->pty_err && dup2(c->pty_slave, STDERR_FILENO) < 0)) {
            aj_err(&err, errno, "take the payload's terminal");
            child_fail(c, &err, 125);
        }
        (void)close(c->pty_slave);
    }
    if (c->degraded && !c->rootless) {
        /* No user namespace: become this run's own unprivileged host user. */
        if (aj_sys_setgroups_none() < 0 || prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 ||
            aj_sys_setresgid(c->host_gid) < 0 || aj_sys_setresuid(c->host_uid) < 0) {
            aj_err(&err, errno, "switch to host uid %u", (unsigned)c->host_uid);
            child_fail(c, &err, 125);
        }
        /* The euid change cleared the death signal: arm it again. */
        if (arm_death_signal(c->sock) < 0)
            _exit(125);
    }
    if (c->degraded) {
        /* init does these in a full sandbox; here the payload is the first
         * process of the run. */
        if (redirect_output(c, &err) < 0)
            child_fail(c, &err, 125);
        if (syscall(__NR_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) >= 0) { /* the new keyring's serial */
            c->layers |= AJ_LAYER_KEYRING;
        } else if (errno != EPERM && errno != ENOSYS) {
            aj_err(&err, errno, "join a fresh session keyring");
            child_fail(c, &err, 125);
        }
        /* EPERM/ENOSYS: a seccomp filter on agentjail refuses keyctl (Docker's
         * default profile, Kubernetes' RuntimeDefault). The payload inherits
         * that filter and ours refuses keyctl, add_key and request_key too,
         * so it cannot reach the keyring it keeps; the result names
         * fresh_keyring missing, as for every layer a degraded run lacks. */
    }
    if (chdir(pol->workdir ? pol->workdir : (c->degraded ? "/" : AJ_DEFAULT_WORKDIR)) < 0) {
        aj_err(&err, errno, "workdir %s", pol->workdir ? pol->workdir : AJ_DEFAULT_WORKDIR);
        child_fail(c, &err, 125);
    }
    /* The kernel's own word on this pid namespace's vm.memfd_noexec (read
     * here, before Landlock): 2 means a memfd_create without flags gets a
     * sealed non-executable memfd, so the filter may let such calls by. */
    if (!c->degraded && c->bpf_memfd.len && memfd_noexec_sealed())
        c->bpf = c->bpf_memfd;
    if (aj_limits_child_apply_rlimits(pol, &err) < 0)
        child_fail(c, &err, 125);
    c->layers |= AJ_LAYER_RLIMITS;
    r = aj_caps_child_drop_all(&err);
    if (r < 0)
        child_fail(c, &err, 125);
    /* r == 1: a degraded run as an ordinary user could not empty the
     * bounding set (no CAP_SETPCAP). It holds no capability and no_new_privs
     * stops exec from granting any, but the result must not say "dropped". */
    if (r == 0)
        c->layers |= AJ_LAYER_CAPS;
    if (aj_caps_child_no_new_privs(&err) < 0)
        child_fail(c, &err, 125);
    c->layers |= AJ_LAYER_NNP;
    if (!(c->skip & AJ_SKIP_LANDLOCK)) {
        /* The device decoys init made in /dev: writable, so that an
         * O_RDWR open (as /dev/kvm's users do) gets as far as the lease. */
        const char *rw[AJ_DECOY_MAX_FILES];
        size_t n_rw = 0;
        for (size_t i = 0; !c->degraded && i < c->decoys.n; i++)
            if (c->decoys.made_at_arm[i])
                rw[n_rw++] = c->decoys.paths[i];
        if (aj_landlock_child_apply_ex(pol, c->landlock_abi, c->degraded, rw, n_rw, &ll_layers, &err) < 0)
            child_fail(c, &err, 125);
        c->layers |= ll_layers;
    }
    /* Every inherited fd but 0-2 goes at exec, including ones leaked to
     * agentjail by whoever started it (CVE-2024-21626: a leaked host
     * directory fd let runc's payload walk out of its root). Before seccomp,
     * so the filter need not allow close_range. */
    if (aj_sys_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
        aj_err(&err, errno, "close_range");
        child_fail(c, &err, 125);
    }
    c->layers |= AJ_LAYER_FDS_CLOSED | AJ_LAYER_ENV_CLEARED;
    r = (c->skip & AJ_SKIP_SECCOMP) ? -1 : aj_seccomp_child_load(&c->bpf, &err);
    if (r == -1 && (c->skip & AJ_SKIP_SECCOMP))
        r = 0;
    else if (r < 0)
        child_fail(c, &err, 125);
    else
        c->layers |= AJ_LAYER_SECCOMP;
    if (r > 0) {
        /* The listener goes to the supervisor; this process keeps no copy
         * (a payload holding its own listener could answer itself). */
        struct aj_sync_msg m = {.type = AJ_MSG_LISTENER};
        int lfd = r;
        if (send_fds(c->sock, &m, &lfd, 1) < 0) {
            aj_err(&err, errno, "hand the seccomp listener to the supervisor");
            child_fail(c, &err, 125);
        }
        (void)close(lfd);
        c->layers |= AJ_LAYER_MONITOR;
    }
    if (c->parked)
        receive_run(c); /* a pooled sandbox: blocks until it has its command */
    send_msg(c->sock, AJ_MSG_READY, 0, c->layers, c->landlock_abi, NULL);
    e = exec_command(c);
    aj_err(&err, e, "cannot execute '%s'", c->argv[0]);
    err.exit_hint = (e == ENOENT || e == ENOTDIR) ? 127 : 126;
    child_fail(c, &err, err.exit_hint);
}

/* SIGKILL this process when the supervisor dies. A backstop only: it
 * fires when the parent *thread* exits, is lost if the parent died before
 * the prctl, and is cleared by a change of euid. So after arming it, check
 * the supervisor is still there: its end of the sync socket is open (a
 * closed end reads as POLLHUP). The pid-namespace init dying, which kills
 * everything inside, is the real guarantee. */
static int arm_death_signal(int sock)
{
    struct pollfd p = {.fd = sock, .events = POLLIN};

    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        return -errno;
    if (sock >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)))
        return -EPIPE;
    return 0;
}

/* Blank this process's command line and environment: init is a fork of
 * the supervisor, and /proc/1/cmdline inside would otherwise show
 * agentjail's host command line (host paths, result file) to the payload,
 * /proc/1/environ the caller's environment (tokens; and, pooled, whatever
 * the server process had). Its own memory, so no privilege is needed;
 * arg_start/arg_end/env_start/env_end are fields 48 to 51 of stat. The
 * payload gets copies (c->argv, c->envp), never this memory. */
static void scrub_cmdline(void)
{
    static const char name[] = "agentjail-init";
    char buf[1024];
    const char *p;
    unsigned long start = 0, end = 0, env_start = 0, env_end = 0;
    int field = 2;

    if (aj_read_small_file("/proc/self/stat", buf, sizeof(buf)) <= 0)
        return;
    p = strrchr(buf, ')'); /* comm may contain spaces */
    if (!p)
        return;
    for (p++; *p && field < 51; p++) {
        if (*p != ' ')
            continue;
        field++;
        if (field == 48)
            start = strtoul(p + 1, NULL, 10);
        else if (field == 49)
            end = strtoul(p + 1, NULL, 10);
        else if (field == 50)
            env_start = strtoul(p + 1, NULL, 10);
        else if (field == 51)
            env_end = strtoul(p + 1, NULL, 10);
    }
    /* comm too (/proc/1/comm, ps): a name, not the host binary's. */
    (void)prctl(PR_SET_NAME, "agentjail-init", 0, 0, 0);
    if (env_start && env_end > env_start && env_end - env_start <= (8UL << 20))
        memset((void *)env_start, 0, env_end - env_start);
    if (start == 0 || end <= start || end - start > (1UL << 20))
        return;
    memset((void *)start, 0, end - start);
    if (end - start > sizeof(name))
        memcpy((void *)start, name, sizeof(name));
}

/* Close every fd but 0-2, keep and keep2 (-1: none): init must not hold
 * what agentjail's caller leaked to it either. */
static int close_all_but(int keep, int keep2)
{
    int lo = keep2 >= 0 && keep2 < keep ? keep2 : keep, hi = keep2 > keep ? keep2 : keep;
    unsigned from = 3;

    for (int k = 0; k < 2; k++) {
        int fd = k == 0 ? lo : hi;
        if (fd < 3)
            continue;
        if ((unsigned)fd > from && aj_sys_close_range(from, (unsigned)fd - 1, 0) < 0)
            return -errno;
        from = (unsigned)fd + 1;
    }
    if (aj_sys_close_range(from, ~0U, 0) < 0)
        return -errno;
    return 0;
}

/* Into the network namespace the supervisor's helper made (see
 * spawn_netns_helper). The kernel checks it is owned by our user
 * namespace: joining any other (the host's) needs privilege we lack. */
static int join_helper_netns(struct run_ctx *c, struct aj_error *err)
{
    struct aj_sync_msg m;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof(m)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int fd = -1, r;
    ssize_t n;

    do
        n = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n > 0) /* the control buffer is ours to read only after a message */
        (void)collect_fds(&mh, &fd, 1);
    if (n != (ssize_t)sizeof(m) || m.type != AJ_MSG_NETNS || fd < 0) {
        if (fd >= 0)
            (void)close(fd);
        int e = n == (ssize_t)sizeof(m) && m.type == AJ_MSG_NETNS && m.err.errnum ? m.err.errnum : EPROTO;
        if (e == EPERM)
            return aj_err(err, e, "create the network namespace: this host refuses them (a seccomp filter or a "
                          "sysctl); --allow-degraded runs without any namespace");
        return aj_err(err, e, "create the network namespace");
    }
    r = setns(fd, CLONE_NEWNET);
    (void)close(fd);
    if (r < 0)
        return aj_err(err, errno, "join the network namespace");
    return 0;
}

/* init: block until the supervisor confirms the decoys are armed. -1 if
 * the supervisor is gone (or sent anything else: the protocol is ours). */
static int wait_armed(int sock)
{
    struct aj_sync_msg m;
    ssize_t n;

    do
        n = read(sock, &m, sizeof(m));
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(m) && m.type == AJ_MSG_ARMED ? 0 : -1;
}

/* The payload's own terminal, when the caller's is one (never the
 * caller's: that is the host's, with its input queue, job control and
 * scrollback). A devpts instance of the sandbox's own, made with
 * fsopen/fsmount and never attached anywhere (devpts may be mounted in a
 * user namespace; every mount is a new instance since 4.7): its ptmx gives
 * the master, which goes to the supervisor to relay, and TIOCGPTPEER the
 * slave (4.13), kept for the payload. No path to either exists in the
 * sandbox. System calls only: this is init, between clone and exec. */
static int child_make_pty(struct run_ctx *c, struct aj_error *err)
{
    struct aj_sync_msg m = {.type = AJ_MSG_PTY};
    int fsfd, mfd = -1, master = -1, unlock = 0, r = 0;

    fsfd = aj_sys_fsopen("devpts", AJ_FSOPEN_CLOEXEC);
    if (fsfd < 0)
        return aj_err(err, errno, "a terminal for the payload: fsopen devpts");
    if (aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "ptmxmode", "0600", 0) < 0 ||
        aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "mode", "0600", 0) < 0 ||
        aj_sys_fsconfig(fsfd, AJ_FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
        (mfd = aj_sys_fsmount(fsfd, AJ_FSMOUNT_CLOEXEC, AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NOEXEC)) < 0 ||
        (master = openat(mfd, "ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || ioctl(master, TIOCSPTLCK, &unlock) < 0 ||
        (c->pty_slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
        r = aj_err(err, errno, "a terminal for the payload (devpts)");
    else if (send_fds(c->sock, &m, &master, 1) < 0)
        r = aj_err(err, errno, "hand the terminal to the supervisor");
    if (master >= 0)
        (void)close(master);
    if (mfd >= 0)
        (void)close(mfd);
    (void)close(fsfd);
    return r;
}

static __attribute__((noreturn)) void init_main(struct run_ctx *c)
{
    const struct aj_policy *pol = c->pol;
    struct aj_error err = {0};
    struct aj_sync_msg go;
    const char *hostname = pol->hostname ? pol->hostname : AJ_DEFAULT_HOSTNAME;
    int nest_fds[AJ_USERNS_NS_KINDS];
    int timens_fd;
    pid_t payload;
    ssize_t n;

    if (arm_death_signal(-1) < 0)
        _exit(125);
    /* Into the run's v1 cgroups before anything else happens here. */
    if (aj_cgroup_child_join(c->cg_join, c->n_cg_join, &err) < 0)
        child_fail(c, &err, 125);
    do
        n = read(c->sock, &go, sizeof(go));
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(go) || go.type != AJ_MSG_GO)
        _exit(125);

    if (redirect_output(c, &err) < 0)
        child_fail(c, &err, 125);
    /* The supervisor moved us into the run's v1 cgroups after clone: a new
     * cgroup namespace rooted there hides the host's cgroup paths. */
    if (unshare(CLONE_NEWCGROUP) < 0) {
        aj_err(&err, errno, "cgroup namespace");
        child_fail(c, &err, 125);
    }
    /* Opened while init still owns its /proc entries: the uid change below
     * makes it non-dumpable, and /proc/self then belongs to the user
     * namespace's root, not to init (root mode: another host uid). The
     * kernel checks CAP_SYS_TIME against the opener's credentials. ENOENT:
     * a kernel without time namespaces (before 5.6). */
    timens_fd = open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
    if (timens_fd < 0 && errno != ENOENT) {
        aj_err(&err, errno, "open /proc/self/timens_offsets");
        child_fail(c, &err, 125);
    }
    if (aj_userns_child_become(pol->uid, pol->gid, c->rootless, &err) < 0)
        child_fail(c, &err, 125);
    /* The kernel clears the death signal when the euid changes (root mode
     * maps init to another host uid): arm it again, then make sure the
     * supervisor did not die in between. */
    if (arm_death_signal(c->sock) < 0)
        _exit(125);
    if (sethostname(hostname, strlen(hostname)) < 0) {
        aj_err(&err, errno, "sethostname");
        child_fail(c, &err, 125);
    }
    /* Time namespace (5.6+): only children created after unshare enter it,
     * which is exactly the payload. Optional: older kernels lack it. */
    if (timens_fd >= 0 && unshare(CLONE_NEWTIME) == 0) {
        c->layers |= AJ_LAYER_TIMENS;
        if (set_own_uptime(timens_fd, &err) < 0)
            child_fail(c, &err, 125);
    }
    if (timens_fd >= 0)
        (void)close(timens_fd);
    if (aj_userns_child_nesting_open(nest_fds, &err) < 0)
        child_fail(c, &err, 125);
    if (aj_mount_child_setup(&c->plan, pol, &err) < 0)
        child_fail(c, &err, 125);
    c->layers |= AJ_LAYER_ROOTFS;
    if (c->netns_late && join_helper_netns(c, &err) < 0)
        child_fail(c, &err, 125);
    if (aj_netns_child_setup(pol, &err) < 0)
        child_fail(c, &err, 125);
    /* Before the nesting limits: fsmount makes an anonymous mount
     * namespace, which counts against them. */
    if (c->want_pty && child_make_pty(c, &err) < 0)
        child_fail(c, &err, 125);
    /* The last namespace init itself creates is behind us: from here on,
     * none can be created inside. */
    if (aj_userns_child_nesting_forbid(nest_fds, &err) < 0)
        child_fail(c, &err, 125);
    c->layers |= AJ_LAYER_NO_NESTED_NS;
    if (c->decoys.n > 0) {
        struct aj_sync_msg m = {.type = AJ_MSG_DECOYS, .wstatus = (int32_t)c->decoys.n};
        int fds[1 + AJ_DECOY_MAX_FILES], sock, nfds = 0;
        if (aj_decoy_child_arm(&c->decoys, &sock, fds + 1, &err) < 0)
            child_fail(c, &err, 125);
        /* [socket,] file, file, ... */
        if (sock >= 0)
            fds[nfds++] = sock;
        for (size_t i = 0; i < c->decoys.n; i++)
            fds[nfds++] = fds[1 + i];
        if (send_fds(c->sock, &m, fds, nfds) < 0) {
            aj_err(&err, errno, "hand the decoys to the supervisor");
            child_fail(c, &err, 125);
        }
        for (int i = 0; i < nfds; i++)
            (void)close(fds[i]);
        /* No payload before the supervisor holds its leases: a payload
         * that opened a decoy in between would leave no canary. */
        if (wait_armed(c->sock) < 0)
            _exit(125);
        c->layers |= AJ_LAYER_DECOYS;
    }
    /* A fresh anonymous session keyring: the host session keyring (and any
     * tokens cached in it) is not inherited. */
    if (syscall(__NR_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0) {
        if (errno == EPERM || errno == ENOSYS)
            aj_err(&err, errno,
                   "join a fresh session keyring: a seccomp filter on agentjail refuses keyctl (Docker's "
                   "default profile does); fix: docker run --security-opt seccomp=deploy/docker/seccomp.json "
                   "(it allows keyctl), see docs/deploy.md");
        else
            aj_err(&err, errno, "join a fresh session keyring");
        child_fail(c, &err, 125);
    }
    c->layers |= AJ_LAYER_KEYRING;
    /* Before the payload exists (c->argv is a copy, not this memory). */
    scrub_cmdline();
    if (close_all_but(c->sock, c->pty_slave) < 0) {
        aj_err(&err, errno, "close inherited fds");
        child_fail(c, &err, 125);
    }

    /* The raw system call, not glibc's fork(): init is itself a raw clone
     * of the supervisor, which may be multithreaded (a server, the pool's
     * filler thread). glibc's fork takes its malloc and atfork locks,
     * which another thread of the supervisor may have held at the moment
     * of the clone, and would then wait for them forever. */
    payload = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (payload < 0) {
        aj_err(&err, errno, "fork payload");
        child_fail(c, &err, 125);
    }
    if (payload == 0)
        payload_main(c);
    if (c->pty_slave >= 0) /* the payload's alone: its exit is the master's hangup */
        (void)close(c->pty_slave);

    /* init keeps no privilege while the payload runs, and is not dumpable:
     * the payload (same uid) cannot open /proc/1/mem, /proc/1/fd or
     * /proc/1/exe (CVE-2019-5736's way to the runtime binary). */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (aj_caps_child_drop_all(&err) < 0 || aj_caps_child_no_new_privs(&err) < 0) {
        (void)kill(payload, SIGKILL);
        child_fail(c, &err, 125);
    }
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) {
            if (errno == EINTR)
                continue;
            _exit(125);
        }
        if (WIFSTOPPED(st)) {
            /* A child that called PTRACE_TRACEME (seccomp.allow_ptrace; an
             * anti-debugging check does) made init its tracer: let it go,
             * with the signal it stopped for, rather than take the stop
             * for its end. */
            (void)ptrace(PTRACE_DETACH, p, NULL, (void *)(uintptr_t)WSTOPSIG(st));
            continue;
        }
        if (p == payload) {
            /* Returning kills every other process of the namespace. */
            send_msg(c->sock, AJ_MSG_EXIT, st, 0, 0, NULL);
            _exit(0);
        }
    }
}

/* ---- supervisor side ------------------------------------------------------------ */

static char **build_envp(const struct aj_policy *pol, char *const extra[2], const char **ret_path,
                         struct aj_error *err)
{
    size_t cap = 2 + pol->n_env_pass + pol->n_env + 2 + 1, n = 0;
    char **envp = calloc(cap, sizeof(char *));
    const char *path = AJ_DEFAULT_PATH;

    if (!envp) {
        aj_err(err, ENOMEM, "environment");
        return NULL;
    }
    /* Later entries override earlier ones with the same name. */
#define ENV_PUT(str)                                                                               \
    do {                                                                                           \
        char *_s = (str);                                                                          \
        size_t _k = strcspn(_s, "=");                                                              \
        size_t _i;                                                                                 \
        if (!_s)                                                                                   \
            goto oom;                                                                              \
        for (_i = 0; _i < n; _i++)                                                                 \
            if (strncmp(envp[_i], _s, _k + 1) == 0)                                                \
                break;                                                                             \
        if (_i < n) {                                                                              \
            free(envp[_i]);                                                                        \
            envp[_i] = _s;                                                                         \
        } else {                                                                                   \
            envp[n++] = _s;                                                                        \
        }                                                                                          \
    } while (0)
    ENV_PUT(strdup("PATH=" AJ_DEFAULT_PATH));
    ENV_PUT(strdup("HOME=/tmp"));
    for (size_t i = 0; i < pol->n_env_pass; i++) {
        const char *v = getenv(pol->env_pass[i]);
        char *s;
        if (!v)
            continue;
        if (asprintf(&s, "%s=%s", pol->env_pass[i], v) < 0)
            goto oom;
        ENV_PUT(s);
    }
    /* Decoys before the policy's own values: a variable the policy sets
     * itself wins over a decoy of the same name. */
    for (int i = 0; i < 2; i++)
        if (extra[i])
            ENV_PUT(strdup(extra[i]));
    for (size_t i = 0; i < pol->n_env; i++)
        ENV_PUT(strdup(pol->env[i]));
#undef ENV_PUT
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0)
            path = envp[i] + 5;
    *ret_path = path;
    return envp;
oom:
    for (size_t i = 0; i < n; i++)
        free(envp[i]);
    free(envp);
    aj_err(err, ENOMEM, "environment");
    return NULL;
}

/* argv as the caller gave it usually lives in the process's argument
 * area, which init blanks (scrub_cmdline): the payload gets a copy. */
static char **copy_argv(char *const argv[])
{
    size_t n = 0;
    char **v;

    while (argv[n])
        n++;
    v = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; v && i < n; i++) {
        v[i] = strdup(argv[i]);
        if (!v[i]) {
            for (size_t j = 0; j < i; j++)
                free(v[j]);
            free(v);
            return NULL;
        }
    }
    return v;
}

static void free_envp(char **envp)
{
    for (size_t i = 0; envp && envp[i]; i++)
        free(envp[i]);
    free(envp);
}

/* clone3 with CLONE_PIDFD, and CLONE_INTO_CGROUP when a v2 group is given:
 * the sandbox is confined from its first instruction. */
static pid_t clone_sandbox(uint64_t flags, int cgroup_fd, int *ret_pidfd, bool *ret_in_cgroup)
{
    struct aj_clone_args args = {
        .flags = flags | CLONE_PIDFD,
        .pidfd = (uint64_t)(uintptr_t)ret_pidfd,
        .exit_signal = SIGCHLD,
    };
    long pid;

    *ret_in_cgroup = false;
    if (cgroup_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cgroup_fd;
    }
    pid = syscall(__NR_clone3, &args, sizeof(args));
    if (pid >= 0) {
        *ret_in_cgroup = cgroup_fd >= 0;
        return (pid_t)pid;
    }
    /* CLONE_INTO_CGROUP: EINVAL/EOPNOTSUPP before 5.7 or for a v1 host;
     * the supervisor moves the child itself before releasing it. */
    if (cgroup_fd >= 0 && errno != ENOSYS && errno != EPERM && errno != ENOSPC) {
        args.flags &= ~(uint64_t)CLONE_INTO_CGROUP;
        args.cgroup = 0;
        pid = syscall(__NR_clone3, &args, sizeof(args));
        if (pid >= 0)
            return (pid_t)pid;
    }
    /* clone3: ENOSYS before 5.3, and under filters (Docker's) that answer
     * ENOSYS so libc falls back: use clone(), where CLONE_PIDFD (5.2)
     * returns the pidfd through the parent_tid argument. */
    if (errno == ENOSYS)
        pid = syscall(__NR_clone, (unsigned long)(flags | CLONE_PIDFD | SIGCHLD), NULL, ret_pidfd, NULL, 0);
    return (pid_t)pid;
}

static void kill_and_reap(pid_t pid, int pidfd)
{
    if (pid <= 0)
        return;
    if (pidfd < 0 || aj_sys_pidfd_send_signal(pidfd, SIGKILL) < 0)
        (void)kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Degraded runs have no pid namespace: the supervisor is a subreaper and,
 * when the payload ends, kills what was reparented to it from the run. A
 * library caller may have children of its own: those that existed before
 * the run (and the alert hook) are left alone; everything else among our
 * children came from the run. Each is reaped by its pid, never with
 * waitpid(-1). */
#define AJ_MAX_PRIOR_CHILDREN 64

struct prior_children {
    pid_t pids[AJ_MAX_PRIOR_CHILDREN];
    size_t n;
};

static size_t list_children(pid_t *out, size_t max)
{
    char path[64], buf[4096];
    size_t n = 0;

    (void)snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    if (aj_read_small_file(path, buf, sizeof(buf)) > 0) {
        char *s = buf, *end;
        while (*s && n < max) {
            long c = strtol(s, &end, 10);
            if (end == s)
                break;
            if (c > 0)
                out[n++] = (pid_t)c;
            s = end;
        }
    }
    return n;
}

static void kill_orphans(const struct prior_children *prior, pid_t keep)
{
    for (int round = 0; round < 100; round++) {
        pid_t kids[256];
        size_t n = list_children(kids, AJ_ARRAY_SIZE(kids));
        bool found = false;

        for (size_t i = 0; i < n; i++) {
            bool mine = kids[i] == keep;
            for (size_t j = 0; !mine && j < prior->n; j++)
                mine = prior->pids[j] == kids[i];
            if (mine)
                continue;
            (void)kill(kids[i], SIGKILL);
            while (waitpid(kids[i], NULL, 0) < 0 && errno == EINTR)
                ;
            found = true;
        }
        if (!found)
            return;
    }
}

/* ---- the supervisor's event loop ------------------------------------------------ */

/* How the relay writes to the caller's fd without ever blocking on it: a
 * stalled reader must not suspend the supervisor (deadlines, cgroup
 * checks, seccomp notifications), and O_NONBLOCK is a property of the open
 * file description, which the caller shares: it is never set on theirs. */
enum relay_how {
    RELAY_PLAIN,    /* a regular file (or similar): write() does not wait on a reader */
    RELAY_NONBLOCK, /* wfd is a non-blocking description of its own (a reopened pipe or tty) */
    RELAY_SOCKET,   /* send(MSG_DONTWAIT) */
    RELAY_CHUNKED,  /* no way around blocking mode: PIPE_BUF bytes at a time, only after POLLOUT */
};

#define RELAY_BUF_SIZE (64 * 1024)

/* One captured output stream (stdout or stderr) with its byte budget. */
struct out_stream {
    int rfd;          /* read end, -1 once EOF */
    int wfd_child;    /* what the sandbox gets as this fd, or -1 for ours as it is */
    bool owns_w;      /* wfd_child is our pipe's write end (closed after clone) */
    int dest;         /* our own fd 1 or 2 */
    int wfd;          /* what the relay writes to: dest, or its reopening (own_wfd) */
    bool own_wfd;
    enum relay_how how;
    bool dest_gone;   /* the reader went away (EPIPE): output is counted, then dropped */
    char *buf;        /* RELAY_BUF_SIZE bytes read from the payload, not yet written */
    size_t head, len;
    uint64_t bytes;   /* written by the payload */
    bool truncated;
    bool no_limit;    /* the caller's terminal input: not the payload's output */
};

/* The alert hook: run once, on the host, outside the sandbox, at the first
 * high-severity event, with that event on stdin and a deadline. */
struct alert {
    pid_t pid;
    uint64_t deadline;
    bool fired;
};

struct supervise_state {
    const struct aj_policy *pol;
    struct aj_cgroup *cg;
    struct aj_audit *audit;
    char *const *argv;
    json_t *decoy_info;
    const struct aj_decoy_files *decoys;
    pid_t pid;
    int pidfd, sock, sigfd;
    struct out_stream out[2];
    /* pty mode (run_ctx.want_pty): out[0] reads the payload's pty master
     * (stdout, and stderr with pty_err), in relays the caller's terminal
     * to it, which is in raw mode meanwhile (saved_tio). */
    bool pty, pty_err;
    struct out_stream in;
    bool tio_saved;
    struct termios saved_tio;
    struct aj_notify notify;     /* fd -1 until the payload hands it over */
    int decoy_sock;
    struct {
        int fd;
        uint64_t deadline;
    } dconn[4];                          /* decoy socket connections awaiting their request */
    int decoy_files[AJ_DECOY_MAX_FILES]; /* leased (see aj_decoy_parent_lease) */
    bool decoy_unarmed;                  /* a lease failed: the decoys are not all watched */
    bool decoys_armed;                   /* leases taken, AJ_MSG_ARMED sent to init */
    struct alert alert;
    bool degraded, started;
    struct prior_children prior; /* degraded: our children before the run */
    bool subreaper_set;    /* we made this process a subreaper: undo at the end */
    /* outcome */
    bool have_exit, have_child_err;
    int exit_wstatus, init_status, interrupted;
    enum aj_status limit;  /* the limit that ended the run, or AJ_STATUS_OK */
    struct aj_error child_err;
    uint32_t layers;       /* reported by the sandbox side */
    uint32_t base_layers;  /* applied by the supervisor (namespaces, cgroup, uid) */
    const char *unsafe_skipped;
    struct rusage ru;
    sigset_t got_signals;  /* every run-ending signal received, for the caller */
    /* The event budget's summaries (see emit_summary). */
    uint64_t last_summary_ms;
    struct {
        int nr;
        uint32_t arch;
        uint64_t n;
    } supp_calls[16];            /* suppressed escape attempts by system call, since the last summary */
    size_t n_supp_calls;
    uint64_t supp_calls_other;   /* ... beyond the 16 distinct calls the table holds */
    uint64_t flood_window;       /* past the budget: the current FLOOD_WINDOW_MS slot */
    unsigned flood_taken;        /* notifications taken in it */
};

/* Past the event budget, notifications are taken at FLOOD_PER_WINDOW per
 * FLOOD_WINDOW_MS at most (2,000 a second): the rest wait in the kernel,
 * their callers blocked (killably) until their turn. A flood then costs
 * the supervisor a bounded share of a CPU, whatever the payload's thread
 * count, and each attempt is still answered (EPERM). */
#define FLOOD_WINDOW_MS 10
#define FLOOD_PER_WINDOW 20

static void end_run(struct supervise_state *st, enum aj_status why);

static void start_alert(struct supervise_state *st, json_t *ev)
{
    char *json;
    int p[2];
    pid_t pid;

    if (!st->pol->alert_cmd || st->alert.fired)
        return;
    st->alert.fired = true;
    json = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
    if (!json || pipe2(p, O_CLOEXEC) < 0) {
        free(json);
        return;
    }
    pid = fork();
    if (pid == 0) {
        /* Host side, the operator's own command: not sandboxed, on purpose
         * (it may need to revoke credentials through the network). In a
         * process group of its own, so that the deadline kills all of it. */
        char *const args[] = {"/bin/sh", "-c", st->pol->alert_cmd, NULL};
        sigset_t none;
        (void)setpgid(0, 0);
        /* Not the caller's cwd: it may lie in a writable bind, where the
         * payload could have replaced a relative "./notify.sh". */
        if (chdir("/") < 0)
            _exit(127);
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(p[0], STDIN_FILENO) < 0)
            _exit(127);
        (void)setenv("AGENTJAIL_SANDBOX_ID", st->audit->sandbox_id, 1);
        execv("/bin/sh", args);
        _exit(127);
    }
    (void)close(p[0]);
    if (pid > 0) {
        /* A small write into an empty pipe does not block; a hook that
         * never reads cannot stall the supervisor. */
        int fl = fcntl(p[1], F_GETFL);
        if (fl >= 0)
            (void)fcntl(p[1], F_SETFL, fl | O_NONBLOCK);
        (void)aj_write_all(p[1], json, strlen(json));
        (void)aj_write_all(p[1], "\n", 1);
        st->alert.pid = pid;
        st->alert.deadline = aj_now_ms() + st->pol->alert_timeout_ms;
    }
    (void)close(p[1]);
    free(json);
}

/* Reap the hook if it is done; at its deadline kill its whole process
 * group. final: wait for it, but never past its deadline. */
static void check_alert(struct supervise_state *st, bool final)
{
    int status;

    while (st->alert.pid > 0) {
        siginfo_t si = {0};
        /* WNOWAIT: while the leader is an unreaped zombie its process group
         * id cannot be reused, so killing the group hits only its own. */
        int w = waitid(P_PID, (id_t)st->alert.pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if ((w == 0 && si.si_pid == st->alert.pid) || (w < 0 && errno != EINTR)) {
            (void)kill(-st->alert.pid, SIGKILL); /* anything it left behind */
            while (waitpid(st->alert.pid, &status, 0) < 0 && errno == EINTR)
                ;
            st->alert.pid = 0;
            return;
        }
        if (aj_now_ms() >= st->alert.deadline) {
            (void)kill(-st->alert.pid, SIGKILL);
            (void)kill(st->alert.pid, SIGKILL);
            while (waitpid(st->alert.pid, &status, 0) < 0 && errno == EINTR)
                ;
            st->alert.pid = 0;
            return;
        }
        if (!final)
            return;
        {
            struct timespec ts = {0, 5 * 1000 * 1000};
            (void)nanosleep(&ts, NULL);
        }
    }
}

/* Every event goes through here: written, counted, and acted on. */
static void emit(struct supervise_state *st, json_t *ev, enum aj_event_type type, enum aj_severity sev)
{
    if (!ev)
        return;
    /* Kill first: the offending call is still held (notification not
     * answered, lease not released), so the payload never goes on. */
    if ((type == AJ_EV_ESCAPE_ATTEMPT || type == AJ_EV_CANARY) && st->pol->on_escape == AJ_ON_ESCAPE_KILL)
        end_run(st, AJ_STATUS_ESCAPE_ATTEMPT);
    if (aj_audit_emit(st->audit, ev, type, sev)) /* takes ev */
        start_alert(st, st->audit->first_high);
}

/* A suppressed escape attempt, for the summary's per-call counts. */
static void count_suppressed_call(struct supervise_state *st, int nr, uint32_t arch)
{
    for (size_t i = 0; i < st->n_supp_calls; i++)
        if (st->supp_calls[i].nr == nr && st->supp_calls[i].arch == arch) {
            st->supp_calls[i].n++;
            return;
        }
    if (st->n_supp_calls < AJ_ARRAY_SIZE(st->supp_calls))
        st->supp_calls[st->n_supp_calls++] = (typeof(st->supp_calls[0])){.nr = nr, .arch = arch, .n = 1};
    else
        st->supp_calls_other++;
}

/* Past the event budget: one events_suppressed event a second at most,
 * with what was counted but not written since the last one; final: the
 * run's last, with the totals, if anything was ever suppressed. */
static void emit_summary(struct supervise_state *st, bool final)
{
    struct aj_audit *a = st->audit;
    uint64_t now = aj_now_ms();
    json_t *ev, *kinds, *calls;

    if (final ? a->suppressed_total == 0 : aj_audit_suppressed_pending(a) == 0)
        return;
    if (!final && st->last_summary_ms && now - st->last_summary_ms < 1000)
        return;
    st->last_summary_ms = now;
    ev = aj_audit_event(a, AJ_EV_EVENTS_SUPPRESSED, AJ_SEV_MEDIUM);
    kinds = json_object();
    calls = json_object();
    for (int i = 0; kinds && i < AJ_EV_COUNT; i++)
        if (a->suppressed[i])
            (void)json_object_set_new(kinds, aj_event_type_name((enum aj_event_type)i),
                                      json_integer((json_int_t)a->suppressed[i]));
    for (size_t i = 0; calls && i < st->n_supp_calls; i++) {
        char *name = aj_notify_syscall_name(st->supp_calls[i].nr, st->supp_calls[i].arch);
        char key[64];
        if (name)
            snprintf(key, sizeof(key), "%s", name);
        else
            snprintf(key, sizeof(key), "nr %d", st->supp_calls[i].nr);
        free(name);
        (void)json_object_set_new(calls, key, json_integer((json_int_t)st->supp_calls[i].n));
    }
    if (calls && st->supp_calls_other)
        (void)json_object_set_new(calls, "other", json_integer((json_int_t)st->supp_calls_other));
    if (ev) {
        (void)json_object_set_new(ev, "suppressed", kinds ? kinds : json_object());
        (void)json_object_set_new(ev, "syscalls", calls ? calls : json_object());
        (void)json_object_set_new(ev, "suppressed_total", json_integer((json_int_t)a->suppressed_total));
        (void)json_object_set_new(ev, "event_budget", json_integer((json_int_t)a->budget));
        (void)json_object_set_new(ev, "final", json_boolean(final));
        kinds = calls = NULL;
    }
    json_decref(kinds);
    json_decref(calls);
    memset(a->suppressed, 0, sizeof(a->suppressed));
    st->n_supp_calls = 0;
    st->supp_calls_other = 0;
    (void)aj_audit_emit(a, ev, AJ_EV_EVENTS_SUPPRESSED, AJ_SEV_MEDIUM);
}

/* The budget is spent and the run's first high-severity event (the alert
 * hook's) is recorded: a further event of this type would only be
 * counted, so the supervisor need not build it. With --on-escape kill the
 * first attempt ends the run anyway. */
static bool fast_path(const struct supervise_state *st, enum aj_event_type type)
{
    return aj_audit_over_budget(st->audit, type) && st->audit->first_high && st->pol->on_escape != AJ_ON_ESCAPE_KILL;
}

static void emit_start(struct supervise_state *st)
{
    json_t *ev = aj_audit_event(st->audit, AJ_EV_START, AJ_SEV_INFO), *argv = json_array(), *layers = json_array();

    st->started = true;
    for (size_t i = 0; st->argv[i] && argv; i++)
        (void)json_array_append_new(argv, json_string(st->argv[i]));
    for (unsigned i = 0; i < AJ_LAYER_COUNT && layers; i++)
        if ((st->layers | st->base_layers) & (1u << i))
            (void)json_array_append_new(layers, json_string(aj_layer_name((enum aj_layer)(1u << i))));
    if (ev) {
        (void)json_object_set_new(ev, "command", argv ? argv : json_array());
        (void)json_object_set_new(ev, "layers", layers ? layers : json_array());
        (void)json_object_set_new(ev, "decoys", st->decoy_info ? json_incref(st->decoy_info) : json_array());
    } else {
        json_decref(argv);
        json_decref(layers);
    }
    emit(st, ev, AJ_EV_START, AJ_SEV_INFO);
    if (st->unsafe_skipped && st->unsafe_skipped[0]) {
        ev = aj_audit_event(st->audit, AJ_EV_ERROR, AJ_SEV_HIGH);
        if (ev)
            (void)json_object_set_new(ev, "error", json_pack("s++", "layer skipped on purpose (AGENTJAIL_UNSAFE_SKIP_LAYER): ",
                                                             st->unsafe_skipped, ""));
        emit(st, ev, AJ_EV_ERROR, AJ_SEV_HIGH);
    }
}

static void on_decoy_socket(struct supervise_state *st);
static void check_dconns(struct supervise_state *st, bool all);

/* Record what is pending on the decoy socket, then let go of the decoys.
 * Now, while the sandbox's mounts are alive: the socket is bound on the
 * sandbox's /var/run, and if our close() dropped the last reference to
 * that mount, tearing it down (an RCU grace period) would land on our path. */
static void finish_decoys(struct supervise_state *st)
{
    struct pollfd d = {.fd = st->decoy_sock, .events = POLLIN};

    if (st->decoy_sock >= 0 && poll(&d, 1, 0) > 0 && (d.revents & POLLIN))
        on_decoy_socket(st);
    check_dconns(st, true);
    if (st->decoy_sock >= 0)
        (void)close(st->decoy_sock);
    st->decoy_sock = -1;
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        if (st->decoy_files[i] >= 0) {
            (void)close(st->decoy_files[i]);
            st->decoy_files[i] = -1;
        }
}

static void close_fds_of(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            (void)close(fds[i]);
}

/* A decoy the policy asks for that cannot be watched is a layer missing:
 * fail closed, as for every other layer, unless the policy allows it
 * (degraded.without_decoys). Inside a container the cause is nearly always
 * a root without CAP_LEASE (Docker drops it): leasing a file the run's own
 * host uid owns needs it. */
static void fail_unarmed_decoys(struct supervise_state *st, const struct aj_error *lerr)
{
    if (st->have_child_err)
        return;
    if (geteuid() == 0 && lerr->errnum == EACCES)
        aj_err(&st->child_err, EACCES,
               "decoys cannot be watched: root here lacks CAP_LEASE (Docker drops it), so the supervisor cannot "
               "lease the decoy files; fix: docker run --cap-add LEASE, or run without decoys: "
               "degraded.without_decoys in the policy (--allow-no-decoys; the result then shows decoys false)");
    else
        aj_err(&st->child_err, lerr->errnum ? lerr->errnum : EPERM,
               "decoys cannot be watched (%s); fix: docker run --cap-add LEASE, or run without decoys: "
               "degraded.without_decoys in the policy (--allow-no-decoys; the result then shows decoys false)",
               lerr->msg);
    st->child_err.exit_hint = 125;
    st->have_child_err = true;
    (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
    if (st->cg)
        aj_cgroup_kill(st->cg);
}

/* The payload's pty master arrived (see child_make_pty): its output is
 * stdout's stream, the caller's terminal input goes to it, the window size
 * is copied, and the caller's terminal is put in raw mode (only when we
 * are its foreground: a background job must not change the terminal of
 * the shell in front), so that ^C, ^Z and line editing are the payload's
 * pty's business. Restored in sb_cleanup, on every path. */
static void pty_attach(struct supervise_state *st, int master)
{
    struct winsize ws;
    int fl = fcntl(master, F_GETFL);

    if (fl >= 0)
        (void)fcntl(master, F_SETFL, fl | O_NONBLOCK); /* our own description */
    st->out[0].rfd = master;
    if (ioctl(st->out[0].dest, TIOCGWINSZ, &ws) == 0 || ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0)
        (void)ioctl(master, TIOCSWINSZ, &ws);
    st->in.buf = malloc(RELAY_BUF_SIZE);
    st->in.wfd = fcntl(master, F_DUPFD_CLOEXEC, 3);
    if (!st->in.buf || st->in.wfd < 0)
        return; /* no input, output still relayed */
    st->in.own_wfd = true;
    st->in.how = RELAY_NONBLOCK;
    st->in.no_limit = true;
    /* The caller's stdin, read through a non-blocking description of our own. */
    st->in.rfd = open("/proc/self/fd/0", O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (st->in.rfd >= 0 && tcgetpgrp(STDIN_FILENO) == getpgrp() && tcgetattr(STDIN_FILENO, &st->saved_tio) == 0) {
        struct termios raw = st->saved_tio;
        cfmakeraw(&raw);
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
            st->tio_saved = true;
    }
}

static void handle_msg(struct supervise_state *st, const struct aj_sync_msg *msg, int *fds, int nfds)
{
    if (msg->type == AJ_MSG_ERROR && !st->have_child_err) {
        st->child_err = msg->err;
        st->child_err.msg[sizeof(st->child_err.msg) - 1] = '\0';
        st->have_child_err = true;
        st->layers |= msg->layers;
    } else if (msg->type == AJ_MSG_READY) {
        st->layers |= msg->layers;
        emit_start(st);
    } else if (msg->type == AJ_MSG_EXIT) {
        st->exit_wstatus = msg->wstatus;
        st->have_exit = true;
        /* init is about to exit: let go of the decoys now, while the
         * sandbox's mounts are still alive. Holding the socket (bound on
         * the sandbox's /var/run) past init's exit would make our close()
         * the one that tears that mount down, an RCU grace period (~10 ms)
         * on the supervisor's path. */
        finish_decoys(st);
    } else if (msg->type == AJ_MSG_PTY && nfds == 1 && st->pty && st->out[0].rfd < 0) {
        pty_attach(st, fds[0]);
        fds[0] = -1;
    } else if (msg->type == AJ_MSG_LISTENER && nfds == 1 && st->notify.fd < 0) {
        st->notify.fd = fds[0];
        fds[0] = -1;
    } else if (msg->type == AJ_MSG_DECOYS && msg->wstatus >= 0 && msg->wstatus <= AJ_DECOY_MAX_FILES &&
               (nfds == msg->wstatus || nfds == msg->wstatus + 1) && st->decoy_sock < 0) {
        int k = 0;
        if (nfds == msg->wstatus + 1) {
            st->decoy_sock = fds[0];
            fds[k++] = -1;
        }
        int failed = 0;
        for (int i = 0; i < msg->wstatus; i++, k++) {
            struct aj_error lerr;
            st->decoy_files[i] = fds[k];
            fds[k] = -1;
            if (aj_decoy_parent_lease(st->decoy_files[i], SIG_DECOY, &lerr) < 0) {
                bool first = !st->decoy_unarmed;
                st->decoy_unarmed = true;
                failed++;
                json_t *ev = aj_audit_event(st->audit, AJ_EV_ERROR, AJ_SEV_MEDIUM);
                if (ev)
                    (void)json_object_set_new(ev, "error", json_string(lerr.msg));
                emit(st, ev, AJ_EV_ERROR, AJ_SEV_MEDIUM);
                if (first && !st->pol->allow_no_decoys)
                    fail_unarmed_decoys(st, &lerr);
            }
        }
        /* init holds the payload back until this arrives. */
        {
            struct aj_sync_msg armed = {.type = AJ_MSG_ARMED, .wstatus = failed};
            (void)send_plain(st->sock, &armed, sizeof(armed));
        }
        st->decoys_armed = true;
    }
    close_fds_of(fds, nfds); /* anything not taken above */
}

/* One message from the sync socket, with any fds it carries (CLOEXEC from
 * birth). Returns 1 for a message, 0 for none now, -1 at EOF. */
static int recv_msg(struct supervise_state *st)
{
    struct aj_sync_msg msg;
    union {
        char buf[CMSG_SPACE(sizeof(int) * AJ_MAX_MSG_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int fds[AJ_MAX_MSG_FDS] = {-1, -1, -1, -1, -1, -1}, nfds = 0;
    ssize_t n = recvmsg(st->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

    if (n < 0) {
        /* The sandbox end was closed with a message still unread in its
         * queue (the netns helper's, the pool's RUN, when init failed
         * first): the kernel reports ECONNRESET once, and what init sent
         * before exiting (its ERROR) is still queued behind it. */
        if (errno == ECONNRESET)
            return 1;
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    }
    if (n == 0)
        return -1;
    nfds = collect_fds(&mh, fds, AJ_MAX_MSG_FDS);
    if (n != (ssize_t)sizeof(msg) || (mh.msg_flags & MSG_CTRUNC)) {
        close_fds_of(fds, nfds);
        return 1; /* malformed: ignored (the sandbox side is ours, but never trusted) */
    }
    handle_msg(st, &msg, fds, nfds);
    return 1;
}

static void end_run(struct supervise_state *st, enum aj_status why)
{
    static const struct {
        enum aj_status status;
        const char *limit;
    } limits[] = {
        {AJ_STATUS_TIMEOUT, "timeout"},       {AJ_STATUS_MEMORY_LIMIT, "memory"},
        {AJ_STATUS_PIDS_LIMIT, "pids"},       {AJ_STATUS_CPU_LIMIT, "cpu_time"},
        {AJ_STATUS_OUTPUT_LIMIT, "output"},
    };

    if (st->limit != AJ_STATUS_OK)
        return;
    st->limit = why;
    (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
    if (st->cg)
        aj_cgroup_kill(st->cg);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(limits); i++)
        if (limits[i].status == why) {
            /* A limit hit by a fork bomb or a memory bomb is a resource
             * attack on the host's other tenants. */
            json_t *ev = aj_audit_event(st->audit, AJ_EV_LIMIT, AJ_SEV_MEDIUM);
            if (ev) {
                (void)json_object_set_new(ev, "limit", json_string(limits[i].limit));
                (void)json_object_set_new(ev, "action", json_string("killed"));
                aj_audit_technique(ev, "T1499");
            }
            emit(st, ev, AJ_EV_LIMIT, AJ_SEV_MEDIUM);
        }
}

/* The run's deadline: start + timeout in 64 bits, saturating (a timeout
 * near UINT64_MAX must not wrap into the past). 0: none. */
static uint64_t run_deadline(uint64_t start, uint64_t timeout_ms)
{
    if (!timeout_ms)
        return 0;
    return timeout_ms > UINT64_MAX - start ? UINT64_MAX : start + timeout_ms;
}

/* The poll timeout that also wakes us at deadline: the time left is
 * 64-bit arithmetic, clamped to what poll's int can hold. A timeout above
 * INT_MAX ms once turned negative here, and poll then waited forever: no
 * cgroup checks, no cpu-time limit, no timed anything. */
static int clamp_poll_timeout(int timeout, uint64_t deadline)
{
    uint64_t now = aj_now_ms(), left = now >= deadline ? 0 : deadline - now;

    if (left > (uint64_t)INT_MAX)
        left = INT_MAX;
    if (timeout < 0 || (uint64_t)timeout > left)
        return (int)left;
    return timeout;
}

/* The caller's reader is gone: from now on output is counted and dropped. */
static void drop_output(struct out_stream *o)
{
    o->dest_gone = true;
    o->head = 0;
    o->len = 0;
}

/* Write what the buffer holds, as far as the destination takes it now.
 * writable: poll said POLLOUT (the only time RELAY_CHUNKED may write). A
 * reader that went away (EPIPE; SIGPIPE is blocked during the run, see
 * sb_block_signals) is that reader's business: the payload's accounting
 * goes on, its output is dropped. */
static void flush_output(struct out_stream *o, bool writable)
{
    while (o->len > 0 && !o->dest_gone) {
        size_t want = o->len;
        ssize_t n;

        if (o->how == RELAY_CHUNKED) {
            if (!writable)
                return;
            if (want > PIPE_BUF)
                want = PIPE_BUF;
            writable = false; /* one chunk per POLLOUT */
        }
        if (o->how == RELAY_SOCKET)
            n = send(o->wfd, o->buf + o->head, want, MSG_DONTWAIT | MSG_NOSIGNAL);
        else
            n = write(o->wfd, o->buf + o->head, want);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return;
            drop_output(o); /* EPIPE, or an fd that stopped working */
            return;
        }
        o->head += (size_t)n;
        o->len -= (size_t)n;
    }
    if (o->len == 0 || o->dest_gone) {
        o->head = 0;
        o->len = 0;
    }
}

/* Take what the payload wrote, as far as the buffer has room (a full
 * buffer leaves it in the pipe: the payload then waits, the supervisor
 * does not); past the budget, discard, flag and end the run: a flood must
 * cost the supervisor bounded memory and time. */
static void pump_output(struct supervise_state *st, struct out_stream *o)
{
    size_t room;
    ssize_t n;

    if (o->len > 0 && o->head + o->len == RELAY_BUF_SIZE) {
        memmove(o->buf, o->buf + o->head, o->len);
        o->head = 0;
    }
    room = RELAY_BUF_SIZE - o->head - o->len;
    if (room == 0)
        return;
    n = read(o->rfd, o->buf + o->head + o->len, room);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        (void)close(o->rfd);
        o->rfd = -1;
        return;
    }
    uint64_t limit = o->no_limit ? 0 : st->pol->output_limit;

    if (!limit || o->bytes < limit) {
        uint64_t keep = limit ? limit - o->bytes : (uint64_t)n;
        o->len += (size_t)n < keep ? (size_t)n : (size_t)keep;
    }
    o->bytes += (uint64_t)n;
    if (limit && o->bytes > limit && !o->truncated) {
        o->truncated = true;
        end_run(st, AJ_STATUS_OUTPUT_LIMIT);
    }
    if (o->dest_gone)
        drop_output(o);
    else if (o->how != RELAY_CHUNKED)
        flush_output(o, false);
}

/* How to write to the caller's fd dest without blocking (see relay_how).
 * A pipe or a terminal is opened again through /proc/self/fd, which gives
 * a description of our own that can be non-blocking; a pipe whose reader
 * is gone cannot be opened so (ENXIO): nothing will read the output. */
static int relay_open_dest(struct out_stream *o, struct aj_error *err)
{
    struct stat s;
    int fl;

    o->wfd = o->dest;
    o->how = RELAY_PLAIN;
    if (fstat(o->dest, &s) < 0)
        return aj_err(err, errno, "output fd %d", o->dest);
    if (S_ISSOCK(s.st_mode)) {
        o->how = RELAY_SOCKET;
        return 0;
    }
    if (!S_ISFIFO(s.st_mode) && !S_ISCHR(s.st_mode))
        return 0;
    fl = fcntl(o->dest, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
        o->how = RELAY_NONBLOCK; /* the caller made it so */
        return 0;
    }
    o->how = RELAY_CHUNKED;
    /* Only pipes and terminals: opening some other character device can
     * have effects of its own (a tape rewinds, a watchdog arms). */
    if (S_ISFIFO(s.st_mode) || isatty(o->dest)) {
        char path[64];
        int fd;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", o->dest);
        fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd >= 0) {
            o->wfd = fd;
            o->own_wfd = true;
            o->how = RELAY_NONBLOCK;
        } else if (errno == ENXIO && S_ISFIFO(s.st_mode)) {
            drop_output(o);
        }
    }
    return 0;
}

/* Signals from the signalfd: decoy lease breaks, and the ones that end
 * the run (each kept in got_signals for the caller, see sb_cleanup). */
static void on_lease_break(struct supervise_state *st, int fd);

static void read_signals(struct supervise_state *st)
{
    struct signalfd_siginfo si;

    while (read(st->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if ((int)si.ssi_signo == SIG_DECOY) {
            on_lease_break(st, (int)si.ssi_fd);
            continue;
        }
        (void)sigaddset(&st->got_signals, (int)si.ssi_signo);
        if (!st->interrupted) {
            st->interrupted = (int)si.ssi_signo;
            (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
            if (st->cg)
                aj_cgroup_kill(st->cg);
        }
    }
}

/* Relay what is left after the run, until every pipe is at EOF and every
 * buffer is written, but never wait on a stalled reader past the run's
 * deadline (the run then ends as a timeout), nor past a short grace when
 * the run was already ended by a limit or a signal, nor past a signal. */
#define RELAY_GRACE_MS 1000

static void finish_output(struct supervise_state *st, uint64_t deadline)
{
    uint64_t grace = 0;

    for (;;) {
        struct pollfd p[5];
        int np = 0, timeout = -1, idx[2][2] = {{-1, -1}, {-1, -1}};
        bool busy = false;
        uint64_t until;

        for (int i = 0; i < 2; i++) {
            struct out_stream *o = &st->out[i];
            if (o->dest_gone)
                drop_output(o);
            if (o->rfd >= 0 && o->len < RELAY_BUF_SIZE) {
                idx[i][0] = np;
                p[np++] = (struct pollfd){.fd = o->rfd, .events = POLLIN};
            }
            if (o->len > 0 && o->how != RELAY_PLAIN) {
                idx[i][1] = np;
                p[np++] = (struct pollfd){.fd = o->wfd, .events = POLLOUT};
            }
            busy |= o->rfd >= 0 || o->len > 0;
        }
        if (!busy)
            return;
        if ((st->limit != AJ_STATUS_OK || st->interrupted) && !grace)
            grace = aj_now_ms() + RELAY_GRACE_MS;
        until = grace ? grace : deadline;
        if (until) {
            if (aj_now_ms() >= until) {
                /* A reader that stalls past the deadline: the run did not
                 * finish in time. What is left is dropped. */
                if (!grace)
                    end_run(st, AJ_STATUS_TIMEOUT);
                for (int i = 0; i < 2; i++) {
                    if (st->out[i].rfd >= 0)
                        (void)close(st->out[i].rfd);
                    st->out[i].rfd = -1;
                    st->out[i].len = st->out[i].head = 0;
                }
                return;
            }
            timeout = clamp_poll_timeout(-1, until);
        }
        p[np++] = (struct pollfd){.fd = st->sigfd, .events = POLLIN};
        if (poll(p, (nfds_t)np, timeout) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (p[np - 1].revents & POLLIN)
            read_signals(st);
        for (int i = 0; i < 2; i++) {
            struct out_stream *o = &st->out[i];
            if (idx[i][0] >= 0 && p[idx[i][0]].revents)
                pump_output(st, o);
            if (idx[i][1] >= 0 && (p[idx[i][1]].revents & (POLLERR | POLLHUP)) && o->how != RELAY_SOCKET) {
                drop_output(o); /* the pipe's reader is gone */
            } else if (idx[i][1] >= 0 && p[idx[i][1]].revents) {
                flush_output(o, true);
            }
            if (o->how == RELAY_PLAIN)
                flush_output(o, true);
        }
    }
}

static void check_cgroup_limits(struct supervise_state *st)
{
    struct aj_cgroup_stats cs;

    if (!st->cg || !st->cg->created || aj_cgroup_read_stats(st->cg, &cs) < 0)
        return;
    if (cs.oom_kills > 0)
        end_run(st, AJ_STATUS_MEMORY_LIMIT);
    else if (cs.pids_max_hits > 0)
        /* A fork refused at the limit: a fork bomb, or a payload that
         * outgrew its budget. Either way the run ends here, named. */
        end_run(st, AJ_STATUS_PIDS_LIMIT);
    else if (st->pol->cpu_time_ms && cs.have_cpu && cs.cpu_usec / 1000 >= st->pol->cpu_time_ms)
        end_run(st, AJ_STATUS_CPU_LIMIT);
}

#define CGROUP_POLL_MS 20

enum { PF_SOCK, PF_PIDFD, PF_SIG, PF_OUT, PF_ERR, PF_IN, PF_NOTIFY, PF_DSOCK, PF_OUT_W, PF_ERR_W, PF_IN_W, PF_COUNT };

/* Every message the sandbox side queued before this moment: the payload
 * sends READY (and with it the start event) before it execs, so draining
 * first keeps "start" ahead of anything the payload does. */
static void drain_msgs(struct supervise_state *st)
{
    int r;
    while (st->sock >= 0 && (r = recv_msg(st)) != 0)
        if (r < 0) {
            (void)close(st->sock);
            st->sock = -1;
        }
}

static void on_notify(struct supervise_state *st)
{
    json_t *ev = NULL;
    enum aj_severity sev = AJ_SEV_HIGH;
    int r;

    if (fast_path(st, AJ_EV_ESCAPE_ATTEMPT)) {
        /* A flood (unshare in a loop from many threads): one ioctl to take
         * it, a count, one to refuse it. Nothing is read from the caller.
         * While more are queued, take them here (up to the window's quota,
         * see FLOOD_PER_WINDOW) rather than through the whole poll set
         * each time. */
        for (int batch = 0; batch < FLOOD_PER_WINDOW; batch++) {
            struct pollfd p = {.fd = st->notify.fd, .events = POLLIN};
            uint64_t window = aj_now_ms() / FLOOD_WINDOW_MS;
            int nr = -1;
            uint32_t arch = 0;
            if (window != st->flood_window) {
                st->flood_window = window;
                st->flood_taken = 0;
            }
            if (st->flood_taken >= FLOOD_PER_WINDOW)
                return; /* the rest wait for the next window (see supervise) */
            if (batch > 0 && (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)))
                return;
            st->flood_taken++;
            r = aj_notify_receive_bare(&st->notify, &nr, &arch);
            if (r <= 0)
                break;
            aj_audit_suppress(st->audit, AJ_EV_ESCAPE_ATTEMPT);
            count_suppressed_call(st, nr, arch);
            aj_notify_answer(&st->notify);
        }
        if (r > 0)
            return;
    } else {
        r = aj_notify_receive(&st->notify, st->audit, &ev, &sev);
    }
    if (r < 0) {
        /* The listener is gone (every process of the filter exited). */
        aj_notify_clear(&st->notify);
        (void)aj_notify_init(&st->notify, -1, NULL);
        return;
    }
    if (r == 0)
        return;
    drain_msgs(st);
    /* Recorded (and with --on-escape kill, the run ended) while the caller
     * is still held in the kernel. */
    emit(st, ev, AJ_EV_ESCAPE_ATTEMPT, sev);
    /* A run being killed leaves the call unanswered: the caller stays
     * blocked until the SIGKILL reaches it (the wait is killable), so it
     * never runs another instruction. Answering would race the kill. */
    if (st->limit == AJ_STATUS_ESCAPE_ATTEMPT)
        st->notify.pending = false;
    else
        aj_notify_answer(&st->notify);
}

/* A connection's canary: now (request line if any, 403, close). */
static void finish_dconn(struct supervise_state *st, size_t i)
{
    int fd = st->dconn[i].fd;
    bool killing = st->pol->on_escape == AJ_ON_ESCAPE_KILL;
    st->dconn[i].fd = -1;
    /* Being killed: no answer for the client to read before it dies. */
    if (fd >= 0)
        emit(st, aj_decoy_conn_event(fd, st->audit, !killing), AJ_EV_CANARY, AJ_SEV_HIGH);
}

static void on_decoy_socket(struct supervise_state *st)
{
    int c = aj_decoy_accept(st->decoy_sock);
    size_t slot = 0;

    if (c < 0)
        return;
    if (fast_path(st, AJ_EV_CANARY)) {
        /* Connects in a loop count against the budget too: past it, each
         * is counted and closed, unread. */
        (void)close(c);
        aj_audit_suppress(st->audit, AJ_EV_CANARY);
        return;
    }
    drain_msgs(st);
    /* The client writes its request right after connecting: give it a
     * moment, so the event can say what it wanted. With --on-escape kill
     * there is no moment to give. */
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
        if (st->dconn[i].fd < 0 || st->dconn[i].deadline < st->dconn[slot].deadline) {
            slot = i;
            if (st->dconn[i].fd < 0)
                break;
        }
    if (st->dconn[slot].fd >= 0)
        finish_dconn(st, slot);
    st->dconn[slot].fd = c;
    st->dconn[slot].deadline = aj_now_ms() + AJ_DECOY_REQUEST_WAIT_MS;
    if (st->pol->on_escape == AJ_ON_ESCAPE_KILL)
        finish_dconn(st, slot);
}

/* Connections whose request came (or whose time is up). */
static void check_dconns(struct supervise_state *st, bool all)
{
    uint64_t now = aj_now_ms();
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++) {
        struct pollfd p = {.fd = st->dconn[i].fd, .events = POLLIN};
        if (st->dconn[i].fd < 0)
            continue;
        if (all || now >= st->dconn[i].deadline || (poll(&p, 1, 0) > 0 && p.revents))
            finish_dconn(st, i);
    }
}

static void on_lease_break(struct supervise_state *st, int fd)
{
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        if (st->decoy_files[i] == fd && fd >= 0) {
            drain_msgs(st);
            /* The opener waits until the lease goes: record (and maybe end
             * the run) first, then let it through. */
            emit(st, aj_decoy_lease_event(st->decoys, i, st->audit), AJ_EV_CANARY, AJ_SEV_HIGH);
            /* Being killed: the opener stays blocked in open() until then. */
            if (st->limit != AJ_STATUS_ESCAPE_ATTEMPT)
                aj_decoy_release_lease(fd);
            return;
        }
}

static int supervise(struct supervise_state *st, uint64_t start, struct aj_error *err)
{
    uint64_t deadline = run_deadline(start, st->pol->timeout_ms);
    uint64_t last_cg_check = 0;
    bool watch_cgroup = st->cg && st->cg->created &&
                        (st->cg->limits & (AJ_LAYER_MEMORY_LIMIT | AJ_LAYER_PIDS_LIMIT) ||
                         st->pol->cpu_time_ms);

    for (;;) {
        struct pollfd pfd[PF_COUNT] = {
            [PF_SOCK] = {.fd = st->sock, .events = POLLIN},
            [PF_PIDFD] = {.fd = st->pidfd, .events = POLLIN},
            [PF_SIG] = {.fd = st->sigfd, .events = POLLIN},
            [PF_NOTIFY] = {.fd = st->notify.fd, .events = POLLIN},
            [PF_DSOCK] = {.fd = st->decoy_sock, .events = POLLIN},
        };
        int timeout = watch_cgroup && st->limit == AJ_STATUS_OK ? CGROUP_POLL_MS : -1;
        int r;

        /* Output: read while the buffer has room, write while it holds
         * something and the reader takes it. A full buffer leaves the
         * payload waiting on its pipe, never the supervisor. */
        for (int i = 0; i < 3; i++) {
            struct out_stream *o = i < 2 ? &st->out[i] : &st->in;
            pfd[PF_OUT + i] = (struct pollfd){.fd = o->rfd >= 0 && o->len < RELAY_BUF_SIZE ? o->rfd : -1,
                                              .events = POLLIN};
            pfd[PF_OUT_W + i] = (struct pollfd){
                .fd = o->len > 0 && !o->dest_gone && o->how != RELAY_PLAIN ? o->wfd : -1, .events = POLLOUT};
        }

        if (deadline && st->limit == AJ_STATUS_OK)
            timeout = clamp_poll_timeout(timeout, deadline);
        if (st->alert.pid > 0 && (timeout < 0 || timeout > 50))
            timeout = 50; /* watch the hook's deadline */
        if (st->notify.fd >= 0 && fast_path(st, AJ_EV_ESCAPE_ATTEMPT) && st->flood_taken >= FLOOD_PER_WINDOW) {
            /* This window's quota is spent: not polled until the next. */
            uint64_t now = aj_now_ms();
            if (now / FLOOD_WINDOW_MS == st->flood_window) {
                int wait = (int)(FLOOD_WINDOW_MS - now % FLOOD_WINDOW_MS);
                pfd[PF_NOTIFY].fd = -1;
                if (timeout < 0 || wait < timeout)
                    timeout = wait;
            }
        }
        if (aj_audit_suppressed_pending(st->audit)) {
            /* The next events_suppressed summary is due a second after the last. */
            uint64_t now = aj_now_ms(), due = st->last_summary_ms + 1000;
            int wait = now >= due ? 0 : (int)(due - now);
            if (timeout < 0 || wait < timeout)
                timeout = wait;
        }
        for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
            if (st->dconn[i].fd >= 0 && (timeout < 0 || timeout > 20))
                timeout = 20; /* a decoy connection's request */
        r = poll(pfd, PF_COUNT, timeout);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return aj_err(err, errno, "poll");
        }
        if (st->limit == AJ_STATUS_OK) {
            uint64_t now = aj_now_ms();
            if (deadline && now >= deadline)
                end_run(st, AJ_STATUS_TIMEOUT);
            else if (watch_cgroup && now - last_cg_check >= CGROUP_POLL_MS) {
                /* On the timer, not on every wake-up: an escape notification
                 * should not pay for reading cgroup files. */
                last_cg_check = now;
                check_cgroup_limits(st);
            }
        }
        check_alert(st, false);
        emit_summary(st, false);
        if (pfd[PF_SOCK].revents & (POLLIN | POLLHUP | POLLERR))
            drain_msgs(st);
        if (pfd[PF_NOTIFY].revents & POLLIN)
            on_notify(st);
        else if (pfd[PF_NOTIFY].revents & (POLLHUP | POLLERR)) {
            aj_notify_clear(&st->notify);
            (void)aj_notify_init(&st->notify, -1, NULL);
        }
        if (pfd[PF_DSOCK].revents & POLLIN)
            on_decoy_socket(st);
        check_dconns(st, false);
        for (int i = 0; i < 3; i++) {
            struct out_stream *o = i < 2 ? &st->out[i] : &st->in;
            short w = pfd[PF_OUT_W + i].revents;
            if (w & (POLLERR | POLLHUP) && o->how != RELAY_SOCKET)
                drop_output(o); /* the reader of the caller's pipe (or the pty) is gone */
            else if (w)
                flush_output(o, true);
            if (pfd[PF_OUT + i].revents & (POLLIN | POLLHUP | POLLERR))
                pump_output(st, o);
        }
        if (pfd[PF_SIG].revents & POLLIN)
            read_signals(st);
        if (pfd[PF_PIDFD].revents & POLLIN) {
            pid_t w;
            do
                w = wait4(st->pid, &st->init_status, 0, &st->ru);
            while (w < 0 && errno == EINTR);
            if (w == st->pid)
                break;
            if (w < 0 && errno == ECHILD) {
                /* Reaped by someone else (a caller's waitpid(-1), SIGCHLD
                 * ignored): init is gone, its status unknown. Not a loop on
                 * a pidfd that stays readable. */
                st->init_status = SIGKILL;
                break;
            }
        }
    }
    st->pid = -1;
    /* Messages sent just before init exited are still queued, and so may
     * be the last decoy touches. */
    while (st->sock >= 0 && recv_msg(st) > 0)
        ;
    finish_decoys(st);
    if (st->degraded) {
        kill_orphans(&st->prior, st->alert.pid);
        /* The payload is the direct child: its status is init_status. */
        if (!st->have_exit && !st->have_child_err) {
            st->exit_wstatus = st->init_status;
            st->have_exit = true;
        }
    }
    /* Everything inside is dead now (pid namespace, or orphans killed):
     * relay what is left in the pipes until EOF. */
    finish_output(st, deadline);
    return 0;
}

static void fill_result(struct supervise_state *st, struct aj_result *res)
{
    struct aj_cgroup_stats cs = {0};
    bool cg_stats = st->cg && st->cg->created && aj_cgroup_read_stats(st->cg, &cs) == 0;

    res->layers |= st->layers;
    if (st->decoy_unarmed)
        res->layers &= ~(uint32_t)AJ_LAYER_DECOYS; /* present, but not all watched */
    res->stdout_truncated = st->out[0].truncated;
    res->stderr_truncated = st->out[1].truncated;
    res->stdout_bytes = st->out[0].bytes;
    res->stderr_bytes = st->out[1].bytes;
    /* The cgroup counts the whole tree, including processes killed with the
     * namespace that init never reaped; rusage is the fallback. */
    if (cg_stats && cs.have_cpu)
        res->cpu_ms = cs.cpu_usec / 1000;
    else
        res->cpu_ms = (uint64_t)st->ru.ru_utime.tv_sec * 1000 + (uint64_t)st->ru.ru_utime.tv_usec / 1000 +
                      (uint64_t)st->ru.ru_stime.tv_sec * 1000 + (uint64_t)st->ru.ru_stime.tv_usec / 1000;
    if (cg_stats && cs.have_memory_peak)
        res->max_rss_kb = cs.memory_peak / 1024;
    else
        res->max_rss_kb = (uint64_t)st->ru.ru_maxrss;
    /* A limit the kernel enforced by itself (the OOM killer, a refused
     * fork) while the supervisor was not looking still names the outcome,
     * unless the payload succeeded anyway. */
    if (st->limit == AJ_STATUS_OK && cg_stats && !st->interrupted) {
        bool ok = st->have_exit && WIFEXITED(st->exit_wstatus) && WEXITSTATUS(st->exit_wstatus) == 0;
        if (cs.oom_kills > 0 && !ok)
            st->limit = AJ_STATUS_MEMORY_LIMIT;
        else if (cs.pids_max_hits > 0 && !ok)
            st->limit = AJ_STATUS_PIDS_LIMIT;
        else if (st->pol->cpu_time_ms && cs.have_cpu && cs.cpu_usec / 1000 >= st->pol->cpu_time_ms)
            st->limit = AJ_STATUS_CPU_LIMIT;
    }
    if (st->limit != AJ_STATUS_OK) {
        res->status = st->limit;
        res->signal = SIGKILL;
        res->exit_code = 128 + SIGKILL;
    } else if (st->interrupted) {
        res->status = AJ_STATUS_SIGNALED;
        res->signal = st->interrupted;
        res->exit_code = 128 + st->interrupted;
    } else if (st->have_exit && WIFEXITED(st->exit_wstatus)) {
        res->exit_code = WEXITSTATUS(st->exit_wstatus);
        res->status = res->exit_code == 0 ? AJ_STATUS_OK : AJ_STATUS_NONZERO_EXIT;
    } else if (st->have_exit && WIFSIGNALED(st->exit_wstatus)) {
        res->status = AJ_STATUS_SIGNALED;
        res->signal = WTERMSIG(st->exit_wstatus);
        res->exit_code = 128 + res->signal;
    } else {
        /* init died without reporting (killed from outside, or crashed). */
        res->status = AJ_STATUS_SIGNALED;
        res->signal = WIFSIGNALED(st->init_status) ? WTERMSIG(st->init_status) : SIGKILL;
        res->exit_code = 128 + res->signal;
    }
}

static void fill_layers_from_ns(struct aj_result *res, bool degraded)
{
    if (!degraded)
        res->layers |= AJ_LAYER_USERNS | AJ_LAYER_PIDNS | AJ_LAYER_MOUNTNS | AJ_LAYER_NETNS |
                       AJ_LAYER_IPCNS | AJ_LAYER_UTSNS | AJ_LAYER_CGROUPNS;
}

static int setup_cgroup(const struct aj_policy *pol, struct aj_result *res, struct aj_cgroup *cg,
                        struct aj_error *err)
{
    struct aj_cgroup_host host;
    char run[96];
    int r;

    r = aj_cgroup_detect(&host, err);
    if (r < 0)
        return r;
    /* Runs whose supervisor was SIGKILLed leave their groups behind: the
     * next start removes them (after killing anything still inside). */
    (void)aj_cgroup_cleanup_stale(&host);
    r = aj_cgroup_run_name(res->sandbox_id, run, sizeof(run));
    if (r < 0)
        return aj_err(err, -r, "name the run's cgroup");
    r = aj_cgroup_create(&host, pol, run, cg, err);
    if (r < 0)
        return r;
    for (int c = 0; c < AJ_CG_NCTRL; c++)
        snprintf(res->cgroup_versions[c], sizeof(res->cgroup_versions[c]), "%s",
                 cg->version[c] == 2 ? "v2" : cg->version[c] == 1 ? "v1" : "none");
    if (cg->created)
        res->layers |= AJ_LAYER_CGROUP | cg->limits;
    if (pol->cpu_time_ms && cg->created)
        res->layers |= AJ_LAYER_CPU_TIME_LIMIT;
    return 0;
}

/* A relayed stream: its bounded buffer and our own non-blocking
 * description of the destination (relay_open_dest). */
static int relay_buffer_open(struct out_stream *o, struct aj_error *err)
{
    o->buf = malloc(RELAY_BUF_SIZE);
    if (!o->buf)
        return aj_err(err, ENOMEM, "output buffer");
    return relay_open_dest(o, err);
}

static int setup_output(const struct aj_policy *pol, const struct aj_run_options *opts, struct supervise_state *st,
                        struct aj_error *err)
{
    for (int i = 0; i < 2; i++) {
        int p[2], r;
        int dest = i == 0 ? (opts && opts->stdout_fd > 0 ? opts->stdout_fd : 1)
                          : (opts && opts->stderr_fd > 0 ? opts->stderr_fd : 2);
        st->out[i] = (struct out_stream){.rfd = -1, .wfd_child = -1, .dest = dest, .wfd = -1};
        if (st->pty && (i == 0 || st->pty_err)) {
            /* The payload's pty carries it (see pty_attach): stdout's
             * stream reads the master when it comes; stderr has none. */
            if (i == 1)
                continue;
            r = relay_buffer_open(&st->out[i], err);
            if (r < 0)
                return r;
            continue;
        }
        /* A terminal is never handed to the sandbox (it would be the
         * host's: TIOCSTI, job control, the scrollback): its output is
         * relayed like a captured stream, without a budget. */
        if (!pol->output_limit && !isatty(dest)) {
            /* No budget: the sandbox writes to the destination directly
             * (init makes it its fd 1/2). */
            if (dest != i + 1)
                st->out[i].wfd_child = dest;
            continue;
        }
        r = relay_buffer_open(&st->out[i], err);
        if (r < 0)
            return r;
        if (pipe2(p, O_CLOEXEC) < 0)
            return aj_err(err, errno, "pipe for output capture");
        st->out[i].rfd = p[0];
        st->out[i].wfd_child = p[1];
        st->out[i].owns_w = true;
        if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
            return aj_err(err, errno, "nonblocking output pipe");
    }
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        (void)close(*fd);
        *fd = -1;
    }
}

int aj_run(const struct aj_policy *pol, char *const argv[], struct aj_result *res, struct aj_error *err)
{
    return aj_run_ex(pol, argv, NULL, res, err);
}

static void emit_end(struct supervise_state *st, struct aj_result *res)
{
    json_t *ev;

    if (res->status == AJ_STATUS_SETUP_ERROR) {
        ev = aj_audit_event(st->audit, AJ_EV_ERROR, AJ_SEV_LOW);
        if (ev)
            (void)json_object_set_new(ev, "error", json_string(res->error));
        emit(st, ev, AJ_EV_ERROR, AJ_SEV_LOW);
    }
    ev = aj_audit_event(st->audit, AJ_EV_EXIT, AJ_SEV_INFO);
    if (ev) {
        (void)json_object_set_new(ev, "status", json_string(aj_status_name(res->status)));
        (void)json_object_set_new(ev, "exit_code", json_integer(res->exit_code));
        (void)json_object_set_new(ev, "signal", json_integer(res->signal));
        (void)json_object_set_new(ev, "wall_ms", json_integer((json_int_t)res->wall_ms));
    }
    emit(st, ev, AJ_EV_EXIT, AJ_SEV_INFO);
    for (int i = 0; i < AJ_EV_COUNT && i < 8; i++)
        res->event_counts[i] = st->audit->counts[i];
    res->escape_attempted = st->audit->counts[AJ_EV_ESCAPE_ATTEMPT] + st->audit->counts[AJ_EV_CANARY] > 0;
}

/* ---- one sandbox, from preparation to teardown -------------------------------- */

/* Everything the supervisor holds for one sandbox. aj_run_ex keeps one on
 * its stack and goes straight through; the pool prepares several ahead of
 * time (parked: every layer applied, the payload process waiting for its
 * command) and launches one per run. st points into this struct: it never
 * moves once prepared. */
struct sandbox {
    struct run_ctx c;
    struct supervise_state st;
    struct aj_uid_lease lease;
    struct aj_cgroup cg;
    struct aj_audit audit;
    char *decoy_env[2];
    int socks[2];
    int null_fd;          /* parked: init's and the waiting payload's 0, 1, 2 */
    pid_t netns_helper;   /* see spawn_netns_helper; reaped at cleanup */
    int netns_userns_fd;  /* init's user namespace, opened before it changes ids */
    struct aj_result prepared; /* parked: what preparing found out (ids, layers, versions) */
    bool audit_open, mask_set, in_cgroup;
    bool sigpipe_was_pending; /* the caller's own SIGPIPE, pending before the run: not ours to consume */
    uint64_t start;
};

static void sb_init(struct sandbox *sb, const struct aj_policy *pol)
{
    memset(sb, 0, sizeof(*sb));
    sb->c = (struct run_ctx){.pol = pol, .sock = -1, .out_fd = -1, .err_fd = -1, .in_fd = -1, .pty_slave = -1};
    sb->lease = (struct aj_uid_lease){.lock_fd = -1};
    sb->audit = (struct aj_audit){.fd = -1};
    sb->st = (struct supervise_state){.pol = pol, .cg = &sb->cg, .audit = &sb->audit, .pid = -1, .pidfd = -1,
                                      .sock = -1, .sigfd = -1, .decoy_sock = -1,
                                      .dconn = {{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}},
                                      .limit = AJ_STATUS_OK};
    sb->st.out[0] = sb->st.out[1] = sb->st.in = (struct out_stream){.rfd = -1, .wfd_child = -1, .wfd = -1};
    sigemptyset(&sb->st.got_signals);
    sb->st.notify.fd = -1;
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        sb->st.decoy_files[i] = -1; /* every slot, whatever the table's size */
    sb->socks[0] = sb->socks[1] = -1;
    sb->null_fd = -1;
    sb->netns_userns_fd = -1;
    aj_cgroup_init(&sb->cg);
}

/* Signals that end a run arrive through a signalfd: the supervisor kills
 * the sandbox, reports, and exits 128+N. Blocked from before the clone in
 * a direct run (a ^C in between must not orphan the sandbox), from the
 * launch in a pooled one. */
static int sb_block_signals(struct sandbox *sb, sigset_t *ret_old, struct aj_error *err)
{
    sigset_t mask;

    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigaddset(&mask, SIG_DECOY);
    {
        /* Blocked in this thread for the run, but not read from the
         * signalfd: a write to a caller's pipe whose reader is gone gives
         * EPIPE, not a SIGPIPE that would kill the caller's whole process
         * (sb_cleanup consumes the one we caused); a write to the caller's
         * terminal from a background job is not stopped by SIGTTOU. The
         * process-wide dispositions are the caller's and stay untouched. */
        sigset_t run_mask = mask, pend;
        sigaddset(&run_mask, SIGPIPE);
        sigaddset(&run_mask, SIGTTOU);
        sigaddset(&run_mask, SIGTTIN); /* a background read of the terminal: EIO, not a stop */
        sb->sigpipe_was_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1;
        if (pthread_sigmask(SIG_BLOCK, &run_mask, ret_old) != 0)
            return aj_err(err, EINVAL, "sigprocmask");
    }
    sb->mask_set = true;
    sb->st.sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sb->st.sigfd < 0)
        return aj_err(err, errno, "signalfd");
    return 0;
}

/* Degraded: no namespaces at all. Landlock confines the filesystem to the
 * named host paths, seccomp and no_new_privs stay, the supervisor becomes a
 * subreaper to kill leftovers. */
static int sb_clone_degraded(struct sandbox *sb, int clone_errno, struct aj_result *res, struct aj_error *err)
{
    struct run_ctx *c = &sb->c;
    const struct aj_policy *pol = c->pol;
    struct aj_error why;
    int r, was = 0;

    aj_userns_explain_failure(clone_errno, &why);
    if (!pol->allow_degraded || c->parked) {
        *err = why;
        return -clone_errno;
    }
    if (c->skip & AJ_SKIP_LANDLOCK)
        /* Without namespaces Landlock is the filesystem boundary: never both gone. */
        return aj_err(err, 0, "degraded mode needs Landlock, and this kernel has none (%s)", why.msg);
    /* No network namespace: whatever the mode, the filter refuses network
     * sockets (below), so a private loopback cannot be had; say so. */
    if (c->rootless && c->landlock_abi < 6 && !pol->allow_unscoped_signals)
        /* No pid namespace and the caller's own uid: only Landlock's signal
         * scope (ABI 6, Linux 6.12) keeps kill() off the caller's other
         * processes (its shell, its editor, the agent itself). */
        return aj_err(err, 0,
                      "degraded mode as an ordinary user needs Landlock ABI 6 (Linux 6.12) to keep the payload's "
                      "signals off your other processes, and this kernel has ABI %d; to run anyway, set "
                      "degraded.without_signal_scope in the policy (--allow-unscoped-signals)",
                      c->landlock_abi);
    c->degraded = sb->st.degraded = true;
    c->netns_late = false;
    res->degraded = true;
    /* Without a network namespace the filter must refuse sockets. */
    aj_seccomp_clear(&c->bpf);
    r = aj_seccomp_compile(pol, true, true, &c->bpf, err);
    if (r < 0)
        return r;
    {
        /* The loopback note first: the explanation after it may be cut. */
        static const char no_lo[] = "no private loopback either (network sockets are refused); ";
        size_t off = pol->network == AJ_NET_LOOPBACK ? sizeof(no_lo) - 1 : 0;
        size_t n = strnlen(why.msg, sizeof(res->degraded_reason) - 1 - off);
        memcpy(res->degraded_reason, no_lo, off);
        memcpy(res->degraded_reason + off, why.msg, n);
        res->degraded_reason[off + n] = '\0';
    }
    for (size_t i = 0; i < pol->n_binds; i++) {
        if (strcmp(pol->binds[i].host, pol->binds[i].sandbox) != 0)
            return aj_err(err, 0,
                          "degraded mode cannot remap %s to %s (no mount namespace); bind it at the same path",
                          pol->binds[i].host, pol->binds[i].sandbox);
        if (pol->binds[i].owner_set)
            return aj_err(err, 0, "degraded mode cannot id-map %s to its owner %u:%u (no mount namespace); "
                          "drop the bind's \"owner\" to run degraded", pol->binds[i].host, pol->binds[i].owner_uid,
                          pol->binds[i].owner_gid);
    }
    if (prctl(PR_GET_CHILD_SUBREAPER, &was, 0, 0, 0) < 0 || prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return aj_err(err, errno, "PR_SET_CHILD_SUBREAPER");
    sb->st.subreaper_set = !was;
    sb->st.prior.n = list_children(sb->st.prior.pids, AJ_MAX_PRIOR_CHILDREN);
    sb->st.pid = clone_sandbox(0, sb->cg.v2_fd, &sb->st.pidfd, &sb->in_cgroup);
    if (sb->st.pid < 0)
        return aj_err(err, errno, "fork");
    return 0;
}

static __attribute__((noreturn)) void degraded_child_main(struct run_ctx *c)
{
    /* The supervisor releases us once we are in our cgroups. */
    struct aj_sync_msg go;
    struct aj_error jerr;
    ssize_t n;

    if (arm_death_signal(-1) < 0)
        _exit(125);
    if (aj_cgroup_child_join(c->cg_join, c->n_cg_join, &jerr) < 0)
        child_fail(c, &jerr, 125);
    do
        n = read(c->sock, &go, sizeof(go));
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(go) || go.type != AJ_MSG_GO)
        _exit(125);
    payload_main(c);
}

/* The sandbox's network namespace, made on another CPU while init builds
 * the root filesystem: creating one costs ~0.3 ms here (loopback device,
 * sysctl tables, proc entries), which clone3 used to pay on the run's
 * path. A raw fork of the supervisor joins init's user namespace (so the
 * new namespace is owned by it, as one made by clone3 would be), unshares,
 * and sends the namespace's fd to init over the sync socket. Init joins it
 * right after its mounts, before anything of the payload exists; until
 * then it runs only our code, in the host's network namespace, where its
 * user namespace gives it no privilege. The helper uses system calls only:
 * the supervisor may be multithreaded. */
/* vm.memfd_noexec=2 in the sandbox's pid namespace (Linux 6.3+): every
 * memfd_create there without MFD_NOEXEC_SEAL gets it from the kernel, and
 * MFD_EXEC is refused. The kernel reads the writer's pid namespace and
 * lets only the host's root write /proc/sys (init, a mapped uid, gets
 * EACCES); so a child of ours joins init's pid namespace (setns affects
 * its children only) and its own child, still the host's root and outside
 * the user namespace, writes the value. Before GO: no payload exists yet.
 * Best effort: the payload reads the value back and keeps the strict
 * filter if it is not 2. Raw clones and async-signal-safe calls only: the
 * supervisor may be multithreaded (see init's payload clone).
 * The writer takes the namespace's last pid (clone3 set_tid, which the
 * host's root may choose), not the next one: the payload stays pid 2
 * (set_tid does not move the namespace's pid cursor). */
static void set_memfd_noexec(pid_t init_pid)
{
    char path[64], buf[32] = "";
    long pid_max = 0;
    pid_t helper;
    int fd, st;

    fd = open("/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, buf, sizeof(buf) - 1) > 0)
            pid_max = strtol(buf, NULL, 10);
        (void)close(fd);
    }
    if (pid_max < 300)
        return;
    (void)snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)init_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    helper = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (helper == 0) {
        pid_t writer, tid = (pid_t)(pid_max - 1);
        struct aj_clone_args args = {
            .exit_signal = SIGCHLD,
            .set_tid = (uint64_t)(uintptr_t)&tid,
            .set_tid_size = 1,
        };
        if (setns(fd, CLONE_NEWPID) < 0)
            _exit(1);
        writer = (pid_t)syscall(__NR_clone3, &args, sizeof(args));
        if (writer == 0) {
            int w = open("/proc/sys/vm/memfd_noexec", O_WRONLY | O_CLOEXEC);
            _exit(w >= 0 && write(w, "2\n", 2) == 2 ? 0 : 1);
        }
        if (writer < 0)
            _exit(1);
        while (waitpid(writer, &st, 0) < 0)
            if (errno != EINTR)
                _exit(1);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
    }
    (void)close(fd);
    if (helper < 0)
        return;
    while (waitpid(helper, &st, 0) < 0 && errno == EINTR)
        ;
}

static int spawn_netns_helper(struct sandbox *sb, struct aj_error *err)
{
    pid_t pid = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);

    if (pid < 0)
        return aj_err(err, errno, "fork the network namespace helper");
    if (pid == 0) {
        struct aj_sync_msg m = {.type = AJ_MSG_NETNS};
        int fd = -1;
        if (setns(sb->netns_userns_fd, CLONE_NEWUSER) < 0 || unshare(CLONE_NEWNET) < 0 ||
            (fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
            m.err.errnum = errno;
            (void)aj_write_all(sb->st.sock, &m, sizeof(m));
            _exit(1);
        }
        _exit(send_fds(sb->st.sock, &m, &fd, 1) < 0 ? 1 : 0);
    }
    sb->netns_helper = pid;
    close_fd(&sb->netns_userns_fd); /* the helper has its copy */
    return 0;
}

/* Bind sources are resolved here, once, without following a symlink, and
 * checked against the registry of writable bind sources (this run's are
 * added to it first); see aj_mount_plan_resolve. */
static int sb_resolve_binds(struct sandbox *sb, struct aj_error *err)
{
    const struct aj_policy *pol = sb->c.pol;
    struct aj_bindreg reg = {0};
    int r;

    if (pol->n_binds) {
        r = aj_bindreg_update(pol, &reg, err);
        if (r < 0)
            return aj_err_prefix(err, r, "registry of writable bind sources");
    }
    r = aj_mount_plan_resolve(&sb->c.plan, pol, pol->n_binds ? &reg : NULL, sb->c.rootless ? 0 : pol->uid_base,
                              sb->c.rootless ? 0 : pol->uid_count, err);
    aj_bindreg_clear(&reg);
    return r;
}

/* Writable binds are id-mapped (docs/security-model.md, "Workspaces keep
 * their owner"): inside, the workspace owner's files are the sandbox
 * user's; on the host, what the run writes is the owner's, whatever host
 * uid the run got. Made here, as root in the host's namespaces, from the
 * sources aj_mount_plan_resolve opened; init attaches the trees. Where it
 * cannot be done (rootless, an owner that is root or a run uid, a kernel
 * or filesystem without id-mapped mounts) the bind works as before, and
 * the result says so, unless the policy set the owner: then the run
 * stops. */
static int sb_idmap_workspaces(struct sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct run_ctx *c = &sb->c;
    const struct aj_policy *pol = c->pol;
    bool any = false, all = true;
    int r = 0;

    for (size_t i = 0; r == 0 && i < c->plan.n; i++) {
        struct aj_mnt_entry *e = &c->plan.entries[i];
        char why[256] = "";
        struct stat st;
        uid_t wu;
        gid_t wg;

        if (e->kind != AJ_MNT_BIND || !e->rw || e->hostfd < 0)
            continue;
        any = true;
        if (fstat(e->hostfd, &st) < 0) {
            r = aj_err(err, errno, "bind source %s", e->src);
            break;
        }
        wu = e->owner_set ? e->owner_uid : st.st_uid;
        wg = e->owner_set ? e->owner_gid : st.st_gid;
        if (c->rootless)
            snprintf(why, sizeof(why), "%s",
                     wu == c->host_uid && wg == c->host_gid
                         ? "rootless: the sandbox user is your own uid, which owns it (no id-mapping needed)"
                         : "rootless: id-mapped mounts need root, so files here that are not yours stay "
                           "read-only inside unless their mode lets anyone write");
        else if (wu == 0 || wg == 0)
            snprintf(why, sizeof(why), "%s root (uid %u, gid %u): not id-mapped, as what the sandbox writes "
                     "would be root's on the host; chown it to a normal user and group, or set the bind's owner",
                     wu == 0 ? "owned by" : "its group is", (unsigned)wu, (unsigned)wg);
        else if (wu - pol->uid_base < pol->uid_count)
            snprintf(why, sizeof(why), "owned by host uid %u, one of the per-run uids (a sandbox made it): not "
                     "id-mapped", (unsigned)wu);
        else {
            struct aj_error ierr = {0};
            int ufd = aj_userns_parent_idmap_ns(wu, wg, c->host_uid, c->host_gid, &ierr);
            int q = ufd < 0 ? ufd : aj_mount_parent_idmap(e, ufd, &ierr);
            if (ufd >= 0)
                (void)close(ufd);
            /* Any failure (no id-mapped mounts here, or, inside a
             * container, no CAP_SYS_ADMIN over the host's mounts for
             * open_tree) leaves the bind as it was before id-mapping:
             * the run's own uid, never more than that. */
            if (q < 0)
                snprintf(why, sizeof(why), "%.250s", ierr.msg);
        }
        if (!why[0])
            continue;
        all = false;
        if (e->owner_set && !(c->rootless && wu == c->host_uid && wg == c->host_gid)) {
            r = aj_err(err, EOPNOTSUPP, "--bind-rw %s: its owner is set to %u:%u, which needs an id-mapped mount, "
                       "and: %s", e->src, (unsigned)wu, (unsigned)wg, why);
            break;
        }
        if (!res->workspace_idmap_note[0])
            snprintf(res->workspace_idmap_note, sizeof(res->workspace_idmap_note), "%.200s: %s", e->src, why);
    }
    /* The sandbox gets none of the resolved sources, only the trees. */
    aj_mount_plan_drop_hostfds(&c->plan);
    res->has_rw_binds = any;
    res->workspace_idmap = any && all;
    return r;
}

/* Everything up to the GO message: cgroups, clone, id maps. argv NULL
 * prepares a parked sandbox for the pool (its command comes at launch);
 * base_mask is then the signal mask its payload will run with. */
/* The decoys' files and their /var/run go into the mount plan: the decoy
 * module says what, the mount layer plants it. */
static int sb_plant_decoys(struct sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct run_ctx *c = &sb->c;
    struct aj_decoy_plants plants;
    int r;

    r = aj_decoy_plan(c->pol, res->sandbox_id, &plants, &c->decoys, sb->decoy_env, &sb->st.decoy_info, err);
    for (size_t i = 0; r >= 0 && i < plants.n; i++) {
        const struct aj_decoy_plant *p = &plants.v[i];
        r = p->content ? aj_mount_plan_add_file(&c->plan, p->path, p->content, err)
                       : aj_mount_plan_add_tmpfs(&c->plan, p->path, p->size, p->mode, err);
    }
    aj_decoy_plants_clear(&plants);
    return r;
}

static int sb_prepare(struct sandbox *sb, char *const argv[], const struct aj_run_options *opts,
                      const sigset_t *base_mask, struct aj_result *res, struct aj_error *err)
{
    struct run_ctx *c = &sb->c;
    struct supervise_state *st = &sb->st;
    const struct aj_policy *pol = c->pol;
    int r;

    c->parked = argv == NULL;
    r = aj_notify_init(&st->notify, -1, err);
    if (r < 0)
        return r;
    c->rootless = geteuid() != 0;
    res->rootless = c->rootless;
    if (c->rootless) {
        c->host_uid = geteuid();
        c->host_gid = getegid();
    } else {
        r = aj_userns_lease_host_id(pol, &sb->lease, err);
        if (r < 0)
            return r;
        c->host_uid = sb->lease.host_uid;
        c->host_gid = sb->lease.host_gid;
        res->layers |= AJ_LAYER_UID_ISOLATION;
    }
    res->host_uid = c->host_uid;
    res->host_gid = c->host_gid;
    c->landlock_abi = aj_landlock_abi();
    res->landlock_abi = c->landlock_abi;
    {
        const char *skip = getenv("AGENTJAIL_UNSAFE_SKIP_LAYER");
        if (skip && *skip) {
            if (strcmp(skip, "seccomp") == 0)
                c->skip = AJ_SKIP_SECCOMP;
            else if (strcmp(skip, "landlock") == 0)
                c->skip = AJ_SKIP_LANDLOCK;
            else
                return aj_err(err, 0, "AGENTJAIL_UNSAFE_SKIP_LAYER: '%s' is not seccomp or landlock", skip);
            snprintf(res->unsafe_skipped, sizeof(res->unsafe_skipped), "%s", skip);
        }
    }
    if (c->landlock_abi < 1) {
        /* Fail closed: Landlock is the layer that holds if a mount is wrong.
         * Only a policy that says so runs without it (kernels before 5.13);
         * the result then shows landlock_fs missing. */
        if (!pol->allow_no_landlock)
            return aj_err(err, EOPNOTSUPP,
                          "Landlock is not enabled on this kernel (Linux 5.13 or later, CONFIG_SECURITY_LANDLOCK, "
                          "'landlock' in the lsm= boot parameter); to run without it anyway, set "
                          "degraded.without_landlock in the policy (--allow-no-landlock)");
        c->skip |= AJ_SKIP_LANDLOCK;
    }
    /* Monitored filter: escape-indicative calls come to the supervisor. */
    r = aj_seccomp_build(pol, true, &c->bpf, err);
    if (r < 0)
        return r;
    /* vm.memfd_noexec is per pid namespace (6.3+), writable only by the
     * host's root from inside it: root mode only (set_memfd_noexec). */
    if (!c->rootless && geteuid() == 0 && access("/proc/sys/vm/memfd_noexec", F_OK) == 0) {
        r = aj_seccomp_build_memfd_sealed(pol, true, &c->bpf_memfd, err);
        if (r < 0)
            return r;
    }
    r = aj_mount_check_bind_submounts(pol, err);
    if (r < 0)
        return r;
    r = aj_mount_plan_build(pol, &c->plan, err);
    if (r < 0)
        return r;
    r = sb_resolve_binds(sb, err);
    if (r < 0)
        return r;
    r = sb_idmap_workspaces(sb, res, err);
    if (r < 0)
        return r;
    r = sb_plant_decoys(sb, res, err);
    if (r < 0)
        return r;
    st->decoys = &c->decoys;
    if (argv) {
        c->argv = copy_argv(argv);
        if (!c->argv)
            return aj_err(err, ENOMEM, "copy argv");
    }
    /* A parked sandbox's environment is built when its run starts
     * (sb_launch): env_pass values are the caller's at that moment. */
    if (!c->parked) {
        c->envp = build_envp(pol, sb->decoy_env, &c->path_env, err);
        if (!c->envp)
            return -ENOMEM;
    }
    r = setup_cgroup(pol, res, &sb->cg, err);
    if (r < 0)
        return r;
    /* tmp_size "auto": /tmp and /dev/shm by the memory limit, now that
     * whether a cgroup enforces it is known. */
    aj_mount_plan_set_scratch_size(&c->plan, aj_policy_tmp_size(pol, (sb->cg.limits & AJ_LAYER_MEMORY_LIMIT) != 0));
    if (sb->cg.created) {
        r = aj_cgroup_open_join_fds(&sb->cg, c->cg_join, &c->n_cg_join, err);
        if (r < 0)
            return r;
    }
    if (c->parked) {
        /* Until its command comes, a parked sandbox holds none of the
         * caller's fds: 0, 1 and 2 are /dev/null. */
        sb->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (sb->null_fd < 0)
            return aj_err(err, errno, "open /dev/null");
        c->in_fd = c->out_fd = c->err_fd = sb->null_fd;
        c->orig_mask = *base_mask;
    } else {
        int od = opts && opts->stdout_fd > 0 ? opts->stdout_fd : STDOUT_FILENO;
        int ed = opts && opts->stderr_fd > 0 ? opts->stderr_fd : STDERR_FILENO;
        /* Interactive (stdin and stdout a terminal): the payload gets a pty
         * of its own. Not degraded: devpts needs the user namespace. */
        c->want_pty = st->pty = !pol->allow_degraded && isatty(STDIN_FILENO) && isatty(od);
        c->pty_err = st->pty_err = c->want_pty && isatty(ed);
        r = setup_output(pol, opts, st, err);
        if (r < 0)
            return r;
        c->out_fd = st->out[0].wfd_child;
        c->err_fd = st->out[1].wfd_child;
        if (isatty(STDIN_FILENO)) {
            /* Never the caller's terminal (see setup_output): stdin is
             * /dev/null instead, for init, and for the payload unless it
             * has its own pty. */
            sb->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (sb->null_fd < 0)
                return aj_err(err, errno, "open /dev/null");
            c->in_fd = sb->null_fd;
            if (c->want_pty)
                c->out_fd = sb->null_fd;
            if (c->pty_err)
                c->err_fd = sb->null_fd;
        }
        if (pol->output_limit)
            res->layers |= AJ_LAYER_OUTPUT_LIMIT;
        r = sb_block_signals(sb, &c->orig_mask, err);
        if (r < 0)
            return r;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sb->socks) < 0)
        return aj_err(err, errno, "socketpair");
    c->sock = sb->socks[1];

    /* See spawn_netns_helper. Not with --allow-degraded: there a host that
     * refuses network namespaces must make the clone fail, so the run
     * degrades as a whole instead of failing later in the helper. */
    c->netns_late = !pol->allow_degraded;
    st->pid = clone_sandbox(c->netns_late ? NS_FLAGS & ~(uint64_t)CLONE_NEWNET : NS_FLAGS, sb->cg.v2_fd,
                            &st->pidfd, &sb->in_cgroup);
    if (st->pid < 0) {
        r = sb_clone_degraded(sb, errno, res, err);
        if (r < 0)
            return r;
    }
    if (st->pid == 0) {
        (void)close(sb->socks[0]);
        for (int i = 0; i < 2; i++)
            if (st->out[i].rfd >= 0)
                (void)close(st->out[i].rfd);
        if (c->degraded)
            degraded_child_main(c);
        init_main(c);
    }
    close_fd(&sb->socks[1]);
    c->sock = -1;
    st->sock = sb->socks[0];
    sb->socks[0] = -1;
    close_fd(&sb->null_fd);
    aj_mount_plan_close_idmaps(&c->plan); /* init has its copies */
    if (c->degraded && res->has_rw_binds) {
        res->workspace_idmap = false; /* no mount namespace to attach them in */
        snprintf(res->workspace_idmap_note, sizeof(res->workspace_idmap_note),
                 "degraded mode: no mount namespace, the writable binds are the host paths themselves");
    }
    for (int i = 0; i < 2; i++) {
        if (st->out[i].owns_w)
            close_fd(&st->out[i].wfd_child); /* the sandbox has its copy now */
        st->out[i].wfd_child = -1;           /* a caller's fd is not ours to close */
        st->out[i].owns_w = false;
    }
    fill_layers_from_ns(res, c->degraded);

    /* Confined before it runs anything of its own: cgroups (v1, and v2 when
     * CLONE_INTO_CGROUP was not possible), then id maps, then GO. */
    /* v1: the child joins by itself (see aj_cgroup_open_join_fds); v2 was
     * entered at clone time, or is joined here if that was not possible. */
    for (size_t i = 0; i < c->n_cg_join; i++)
        close_fd(&c->cg_join[i]);
    c->n_cg_join = 0;
    if (sb->cg.created && !sb->in_cgroup && sb->cg.v2_dir[0]) {
        struct aj_cgroup v2only = sb->cg;
        for (int i = 0; i < AJ_CG_NCTRL; i++)
            v2only.v1_dir[i][0] = '\0';
        r = aj_cgroup_parent_attach(&v2only, st->pid, true, err);
        if (r < 0)
            return r;
    }
    if (c->netns_late) {
        /* The helper joins init's user namespace through this fd, opened
         * now: init still has our ids. Once it switched to the run's host
         * uid (root mode), opening its namespaces (or setns on its pidfd)
         * needs CAP_SYS_PTRACE, which a container lacks by default: the
         * helper then failed at random, reported as a host refusing
         * network namespaces. */
        char path[64];
        (void)snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)st->pid);
        sb->netns_userns_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (sb->netns_userns_fd < 0)
            return aj_err(err, errno, "open %s", path);
        /* Our unreaped child keeps its pid; still, trust only what nsfs
         * says the fd is. */
        if (ioctl(sb->netns_userns_fd, NS_GET_NSTYPE) != CLONE_NEWUSER)
            return aj_err(err, EINVAL, "%s is not a user namespace", path);
    }
    if (!c->degraded && c->bpf_memfd.len)
        set_memfd_noexec(st->pid);
    {
        struct aj_sync_msg go = {.type = AJ_MSG_GO};
        if (!c->degraded) {
            r = aj_userns_parent_write_maps(st->pid, pol->uid, pol->gid, c->host_uid, c->host_gid, c->rootless,
                                            err);
            if (r < 0)
                return r;
        }
        r = send_plain(st->sock, &go, sizeof(go));
        if (r < 0)
            return aj_err(err, -r, "release the sandbox");
    }
    if (c->netns_late) {
        r = spawn_netns_helper(sb, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Hand a parked sandbox its command: argv, then the caller's stdin and
 * the stdout/stderr it is to write to (our capture pipes when there is an
 * output budget). */
static int sb_launch(struct sandbox *sb, char *const argv[], const struct aj_run_options *opts,
                     struct aj_result *res, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    const struct aj_policy *pol = sb->c.pol;
    char *buf;
    size_t len = sizeof(struct aj_run_msg), argc = 0, envc = 0;
    int fds[3], r;

    /* The request's environment, now: env_pass reads the caller's values
     * as this run starts, never as the sandbox was parked. */
    sb->c.envp = build_envp(pol, sb->decoy_env, &sb->c.path_env, err);
    if (!sb->c.envp)
        return -ENOMEM;
    for (; argv[argc]; argc++)
        len += strlen(argv[argc]) + 1;
    for (; sb->c.envp[envc]; envc++)
        len += strlen(sb->c.envp[envc]) + 1;
    if (argc > AJ_RUN_MAX_ARGS || envc > AJ_RUN_MAX_ARGS || len > AJ_RUN_MAX_BYTES)
        return aj_err(err, E2BIG,
                      "command line and environment too long for a pooled sandbox (%zu arguments, %zu variables, "
                      "%zu bytes)",
                      argc, envc, len);
    r = setup_output(pol, opts, st, err);
    if (r < 0)
        return r;
    if (pol->output_limit)
        res->layers |= AJ_LAYER_OUTPUT_LIMIT;
    r = sb_block_signals(sb, &sb->c.orig_mask, err);
    if (r < 0)
        return r;
    /* What the parked sandbox sent while it waited (the seccomp listener,
     * the decoys): taken now, so every decoy is leased before the payload
     * can run a single instruction of its command. */
    drain_msgs(st);
    if (st->sock < 0)
        return aj_err(err, EPIPE, "the pooled sandbox is gone");
    buf = malloc(len);
    if (!buf)
        return aj_err(err, ENOMEM, "run request");
    {
        struct aj_run_msg hdr = {.type = AJ_MSG_RUN, .argc = (uint32_t)argc, .envc = (uint32_t)envc};
        size_t off = sizeof(hdr);
        memcpy(buf, &hdr, sizeof(hdr));
        for (size_t i = 0; i < argc; i++) {
            size_t n = strlen(argv[i]) + 1;
            memcpy(buf + off, argv[i], n);
            off += n;
        }
        for (size_t i = 0; i < envc; i++) {
            size_t n = strlen(sb->c.envp[i]) + 1;
            memcpy(buf + off, sb->c.envp[i], n);
            off += n;
        }
    }
    fds[0] = STDIN_FILENO;
    if (isatty(STDIN_FILENO)) {
        /* Never the caller's terminal (see setup_output). */
        sb->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (sb->null_fd < 0) {
            free(buf);
            return aj_err(err, errno, "open /dev/null");
        }
        fds[0] = sb->null_fd;
    }
    for (int i = 0; i < 2; i++)
        fds[1 + i] = st->out[i].wfd_child >= 0 ? st->out[i].wfd_child : st->out[i].dest;
    r = send_with_fds(st->sock, buf, len, fds, 3);
    free(buf);
    close_fd(&sb->null_fd);
    for (int i = 0; i < 2; i++) {
        if (st->out[i].owns_w)
            close_fd(&st->out[i].wfd_child); /* the sandbox has its copy now */
        st->out[i].wfd_child = -1;
        st->out[i].owns_w = false;
    }
    if (r < 0)
        return aj_err(err, -r, "hand the command to the pooled sandbox");
    return 0;
}

/* From GO (or the launch) to the result. */
static int sb_supervise(struct sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    int r;

    st->base_layers = res->layers;
    st->unsafe_skipped = res->unsafe_skipped;
    r = supervise(st, sb->start, err);
    if (r < 0)
        return r;
    res->wall_ms = aj_now_ms() - sb->start;
    if (st->have_child_err && st->limit == AJ_STATUS_OK && !st->interrupted) {
        res->layers |= st->layers;
        if (st->decoy_unarmed)
            res->layers &= ~(uint32_t)AJ_LAYER_DECOYS; /* as fill_result: present, not watched */
        res->status = AJ_STATUS_SETUP_ERROR;
        res->exit_code = st->child_err.exit_hint ? st->child_err.exit_hint : 125;
        *err = st->child_err;
        snprintf(res->error, sizeof(res->error), "%s", st->child_err.msg);
        return st->child_err.errnum ? -st->child_err.errnum : -EINVAL;
    }
    fill_result(st, res);
    return 0;
}

/* The caller's mask back, and with it what the run kept from the caller:
 * the signals that ended it were read from our signalfd and would be lost,
 * so they are sent again to the process while still blocked here. With
 * the caller's mask they are then delivered (a CLI that does not block them
 * dies of them, as it would have without us) or stay pending for the
 * caller to see. A SIGPIPE that our writes to a gone reader caused is
 * consumed; one the caller had pending before is left alone. */
static void restore_signals(struct sandbox *sb)
{
    static const int ending[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    sigset_t pend;

    if (!sb->sigpipe_was_pending && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1) {
        sigset_t one;
        struct timespec zero = {0, 0};
        sigemptyset(&one);
        sigaddset(&one, SIGPIPE);
        /* Thread- and process-directed: at most one of each. */
        for (int i = 0; i < 2 && sigtimedwait(&one, NULL, &zero) == SIGPIPE; i++)
            ;
    }
    /* To the process, as they came: in a server whose signal thread
     * (sigwait) is the only one that takes them, that thread gets them. */
    for (size_t i = 0; i < AJ_ARRAY_SIZE(ending); i++)
        if (sigismember(&sb->st.got_signals, ending[i]) == 1)
            (void)kill(getpid(), ending[i]);
    (void)pthread_sigmask(SIG_SETMASK, &sb->c.orig_mask, NULL);
}

/* Kill what is left, report the end, release everything. With keep_cg the
 * cgroup directories are handed back (emptied and killed) for the caller to
 * remove later, off the run's path. */
static void sb_cleanup(struct sandbox *sb, int r, struct aj_result *res, struct aj_error *err,
                       struct aj_cgroup *keep_cg)
{
    struct supervise_state *st = &sb->st;
    struct run_ctx *c = &sb->c;

    if (st->pid > 0)
        kill_and_reap(st->pid, st->pidfd);
    if (st->tio_saved) /* the caller's terminal as it was */
        (void)tcsetattr(STDIN_FILENO, TCSADRAIN, &st->saved_tio);
    st->tio_saved = false;
    if (sb->netns_helper > 0)
        kill_and_reap(sb->netns_helper, -1);
    sb->netns_helper = 0;
    close_fd(&sb->netns_userns_fd);
    /* No lease may outlive the blocked signal it reports with: drop the
     * decoys, then discard any break still queued, then unblock. */
    close_fd(&st->decoy_sock);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
        close_fd(&st->dconn[i].fd);
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        close_fd(&st->decoy_files[i]);
    if (st->sigfd >= 0) {
        /* Lease breaks are dropped; a SIGTERM or ^C that came at the end is
         * the caller's (re-raised below). */
        struct signalfd_siginfo si;
        while (read(st->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
            if ((int)si.ssi_signo != SIG_DECOY)
                (void)sigaddset(&st->got_signals, (int)si.ssi_signo);
    }
    if (st->subreaper_set)
        (void)prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); /* a library caller's process is as it was */
    if (res) {
        if (r < 0 && res->status == AJ_STATUS_SETUP_ERROR && err) {
            snprintf(res->error, sizeof(res->error), "%s", err->msg);
            if (res->exit_code == 0) /* 2: refused input (a bind, an output path), nothing started */
                res->exit_code = err->exit_hint ? err->exit_hint : 125;
        }
        if (!res->wall_ms)
            res->wall_ms = aj_now_ms() - sb->start;
        if (sb->audit_open) {
            emit_summary(st, true);
            emit_end(st, res);
            check_alert(st, true); /* the hook finishes (or is killed) before we return */
        }
    }
    if (sb->audit_open)
        aj_audit_close(&sb->audit);
    sb->audit_open = false;
    aj_notify_clear(&st->notify);
    json_decref(st->decoy_info);
    st->decoy_info = NULL;
    free(sb->decoy_env[0]);
    free(sb->decoy_env[1]);
    sb->decoy_env[0] = sb->decoy_env[1] = NULL;
    if (keep_cg && sb->cg.created) {
        aj_cgroup_kill(&sb->cg);
        *keep_cg = sb->cg;
        aj_cgroup_init(&sb->cg);
    } else {
        aj_cgroup_destroy(&sb->cg);
    }
    close_fd(&st->sigfd);
    close_fd(&st->pidfd);
    close_fd(&st->sock);
    close_fd(&sb->socks[0]);
    close_fd(&sb->socks[1]);
    close_fd(&sb->null_fd);
    for (int i = 0; i < 2; i++) {
        close_fd(&st->out[i].rfd);
        if (st->out[i].owns_w)
            close_fd(&st->out[i].wfd_child);
        if (st->out[i].own_wfd)
            close_fd(&st->out[i].wfd);
        st->out[i].own_wfd = false;
        free(st->out[i].buf);
        st->out[i].buf = NULL;
    }
    close_fd(&st->in.rfd);
    if (st->in.own_wfd)
        close_fd(&st->in.wfd);
    st->in.own_wfd = false;
    free(st->in.buf);
    st->in.buf = NULL;
    for (size_t i = 0; i < c->n_cg_join; i++)
        close_fd(&c->cg_join[i]);
    c->n_cg_join = 0;
    aj_userns_lease_release(&sb->lease);
    aj_mount_plan_clear(&c->plan);
    aj_seccomp_clear(&c->bpf);
    aj_seccomp_clear(&c->bpf_memfd);
    free_envp(c->envp);
    free_envp(c->argv);
    c->envp = c->argv = NULL;
    /* Last, with everything released: the caller's signal mask back. */
    if (sb->mask_set)
        restore_signals(sb);
    sb->mask_set = false;
}

/* What every run starts with: an id, the policy's hash, the events file. */
static int sb_begin(struct sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    int r;

    r = aj_policy_validate(sb->c.pol, err);
    if (r < 0)
        return r;
    return aj_policy_sha256(sb->c.pol, res->policy_sha256, err);
}

static int sb_open_audit(struct sandbox *sb, const struct aj_run_options *opts, struct aj_result *res,
                         struct aj_error *err)
{
    int r = aj_audit_open(&sb->audit, sb->c.pol, opts ? opts->events_path : NULL, res->sandbox_id,
                          res->policy_sha256, err);
    if (r == 0) {
        sb->audit_open = true;
        aj_audit_set_budget(&sb->audit, sb->c.pol->event_budget);
    }
    return r;
}

static void result_reset(struct aj_result *res)
{
    memset(res, 0, sizeof(*res));
    res->status = AJ_STATUS_SETUP_ERROR;
    (void)aj_random_hex(res->sandbox_id, 32);
}

int aj_run_ex(const struct aj_policy *pol, char *const argv[], const struct aj_run_options *opts,
              struct aj_result *res, struct aj_error *err)
{
    struct sandbox sb;
    int r;

    sb_init(&sb, pol);
    sb.start = aj_now_ms();
    result_reset(res);
    if (!argv || !argv[0])
        return aj_err(err, 0, "no command given");
    sb.st.argv = argv;
    r = sb_begin(&sb, res, err);
    if (r == 0)
        r = sb_open_audit(&sb, opts, res, err);
    if (r == 0)
        r = sb_prepare(&sb, argv, opts, NULL, res, err);
    if (r == 0)
        r = sb_supervise(&sb, res, err);
    sb_cleanup(&sb, r, res, err, NULL);
    return r;
}

/* ---- the warm pool ---------------------------------------------------------------- */

/* Sandboxes prepared ahead of time, each used for exactly one run: the
 * payload process of a parked sandbox has every layer applied and waits on
 * its sync socket for one command. After a run the sandbox is torn down
 * (its pid namespace dies with init); nothing of it is reused.
 *
 * A filler thread prepares replacements and removes finished runs'
 * cgroups between runs (during one, it would take the CPU the payload
 * needs, unless the pool is empty). It blocks every signal (a ^C or a decoy's lease break is the running
 * sandbox's business, read from its signalfd by the caller's thread), and
 * its sandbox side never mallocs between clone and exec, as always. */
#define AJ_POOL_MAX 64

struct aj_pool {
    const struct aj_policy *pol;
    unsigned size;
    pthread_mutex_t mu;
    pthread_cond_t wake;                    /* the filler: something to do, or stop */
    struct sandbox *ready[AJ_POOL_MAX];
    unsigned n_ready;
    struct aj_cgroup spent[AJ_POOL_MAX];    /* emptied, awaiting removal */
    unsigned n_spent;
    sigset_t base_mask;
    struct aj_pool_stats stats;
    pthread_t filler;
    bool filler_started, stopping;
    bool running;                           /* the caller's thread is in a pooled run */
};

static void pool_discard(struct sandbox *sb)
{
    sb_cleanup(sb, 0, NULL, NULL, NULL);
    free(sb);
}

/* Handle the parked sandbox's messages until its decoys are leased (init
 * then goes on to fork the waiting payload). Bounded: init that neither
 * sends them nor fails within 10 s is broken. */
static int pool_arm_decoys(struct sandbox *sb, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    uint64_t deadline = aj_now_ms() + 10000;

    while (!st->decoys_armed && st->sock >= 0 && !st->have_child_err) {
        struct pollfd p = {.fd = st->sock, .events = POLLIN};
        uint64_t now = aj_now_ms();
        int r;
        if (now >= deadline)
            return aj_err(err, ETIMEDOUT, "a parked sandbox did not hand over its decoys");
        r = poll(&p, 1, (int)(deadline - now));
        if (r < 0 && errno != EINTR)
            return aj_err(err, errno, "poll a parked sandbox");
        if (r > 0)
            drain_msgs(st);
    }
    if (st->have_child_err) {
        *err = st->child_err;
        return -(err->errnum ? err->errnum : EPIPE);
    }
    if (!st->decoys_armed)
        return aj_err(err, EPIPE, "a parked sandbox failed before its decoys were armed");
    return 0;
}

/* One parked sandbox, or NULL with err filled. */
static struct sandbox *pool_prepare(struct aj_pool *pool, struct aj_error *err)
{
    struct sandbox *sb = malloc(sizeof(*sb));
    int r;

    if (!sb) {
        aj_err(err, ENOMEM, "pooled sandbox");
        return NULL;
    }
    sb_init(sb, pool->pol);
    result_reset(&sb->prepared);
    r = sb_begin(sb, &sb->prepared, err);
    if (r == 0)
        r = sb_prepare(sb, NULL, NULL, &pool->base_mask, &sb->prepared, err);
    if (r < 0) {
        pool_discard(sb);
        return NULL;
    }
    /* A parked sandbox's init waits for the supervisor to lease its decoys
     * before it forks the payload: take them now, not at launch. */
    if (sb->c.decoys.n > 0 && pool_arm_decoys(sb, err) < 0) {
        pool_discard(sb);
        return NULL;
    }
    /* Off any run's path here: a parked sandbox keeps no zombie helper,
     * and its AJ_MSG_NETNS is queued before any RUN can be. */
    if (sb->netns_helper > 0) {
        while (waitpid(sb->netns_helper, NULL, 0) < 0 && errno == EINTR)
            ;
        sb->netns_helper = 0;
    }
    return sb;
}

static void *pool_filler(void *arg)
{
    struct aj_pool *pool = arg;

    pthread_mutex_lock(&pool->mu);
    while (!pool->stopping) {
        if (pool->running && pool->n_ready > 0) {
            /* A payload is starting: preparing now would take the CPU it
             * needs. The run ends, or the pool is empty, and we go on. */
            pthread_cond_wait(&pool->wake, &pool->mu);
        } else if (pool->n_spent > 0) {
            /* v1 memory groups can take a while to go: never on a run's path. */
            struct aj_cgroup cg = pool->spent[--pool->n_spent];
            aj_cgroup_init(&pool->spent[pool->n_spent]);
            pthread_mutex_unlock(&pool->mu);
            aj_cgroup_destroy(&cg);
            pthread_mutex_lock(&pool->mu);
        } else if (pool->n_ready < pool->size) {
            struct aj_error err = {0};
            struct sandbox *sb;
            pthread_mutex_unlock(&pool->mu);
            sb = pool_prepare(pool, &err);
            pthread_mutex_lock(&pool->mu);
            pool->stats.prepared += sb != NULL;
            if (sb && pool->n_ready < pool->size && !pool->stopping) {
                pool->ready[pool->n_ready++] = sb;
            } else if (sb) {
                pthread_mutex_unlock(&pool->mu);
                pool_discard(sb);
                pthread_mutex_lock(&pool->mu);
            } else {
                /* Runs go cold meanwhile; try again shortly, not in a spin. */
                struct timespec ts;
                pool->stats.refill_failures++;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 100 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                (void)pthread_cond_timedwait(&pool->wake, &pool->mu, &ts);
            }
        } else {
            pthread_cond_wait(&pool->wake, &pool->mu);
        }
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

int aj_pool_new(const struct aj_policy *pol, unsigned size, struct aj_pool **ret, struct aj_error *err)
{
    struct aj_pool *pool;
    sigset_t all, old;
    int r;

    *ret = NULL;
    if (size < 1 || size > AJ_POOL_MAX)
        return aj_err(err, EINVAL, "pool size %u: must be 1 to %d", size, AJ_POOL_MAX);
    if (pol->allow_degraded)
        return aj_err(err, EINVAL, "a pool cannot run degraded sandboxes: drop allow_degraded");
    r = aj_policy_validate(pol, err);
    if (r < 0)
        return r;
    pool = calloc(1, sizeof(*pool));
    if (!pool)
        return aj_err(err, ENOMEM, "pool");
    pool->pol = pol;
    pool->size = size;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    for (unsigned i = 0; i < AJ_POOL_MAX; i++)
        aj_cgroup_init(&pool->spent[i]);
    if (pthread_sigmask(SIG_BLOCK, NULL, &pool->base_mask) != 0) {
        free(pool);
        return aj_err(err, EINVAL, "sigprocmask");
    }
    /* The first sandboxes in the caller's thread: if one cannot be
     * prepared here, the caller hears why now. */
    for (unsigned i = 0; i < size; i++) {
        struct sandbox *sb = pool_prepare(pool, err);
        if (!sb) {
            aj_pool_free(pool);
            return -(err->errnum ? err->errnum : EINVAL);
        }
        pool->ready[pool->n_ready++] = sb;
        pool->stats.prepared++;
    }
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r = pthread_create(&pool->filler, NULL, pool_filler, pool);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        aj_pool_free(pool);
        return aj_err(err, r, "start the pool's filler thread");
    }
    pool->filler_started = true;
    *ret = pool;
    return 0;
}

void aj_pool_free(struct aj_pool *pool)
{
    if (!pool)
        return;
    if (pool->filler_started) {
        pthread_mutex_lock(&pool->mu);
        pool->stopping = true;
        pthread_cond_signal(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
        pthread_join(pool->filler, NULL);
    }
    while (pool->n_ready > 0)
        pool_discard(pool->ready[--pool->n_ready]);
    while (pool->n_spent > 0)
        aj_cgroup_destroy(&pool->spent[--pool->n_spent]);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

void aj_pool_get_stats(struct aj_pool *pool, struct aj_pool_stats *out)
{
    pthread_mutex_lock(&pool->mu);
    *out = pool->stats;
    out->ready = pool->n_ready;
    pthread_mutex_unlock(&pool->mu);
}

/* A parked sandbox whose init has exited (setup failed, or it was killed)
 * cannot take a command. */
static bool parked_alive(const struct sandbox *sb)
{
    struct pollfd p = {.fd = sb->st.pidfd, .events = POLLIN};
    return sb->st.pidfd >= 0 && poll(&p, 1, 0) == 0;
}

/* Whether the request fits what a parked payload takes (AJ_RUN_MAX_*):
 * argv, and the environment it will get (built again at launch; the decoy
 * variables are short, a page covers them). */
static bool run_request_fits(const struct aj_policy *pol, char *const argv[])
{
    size_t len = sizeof(struct aj_run_msg) + 4096, argc = 0;

    for (; argv[argc]; argc++) {
        len += strlen(argv[argc]) + 1;
        if (argc >= AJ_RUN_MAX_ARGS || len > AJ_RUN_MAX_BYTES)
            return false;
    }
    for (size_t i = 0; i < pol->n_env_pass; i++) {
        const char *v = getenv(pol->env_pass[i]);
        if (v)
            len += strlen(pol->env_pass[i]) + strlen(v) + 2;
    }
    for (size_t i = 0; i < pol->n_env; i++)
        len += strlen(pol->env[i]) + 1;
    return pol->n_env_pass + pol->n_env + 8 <= AJ_RUN_MAX_ARGS && len <= AJ_RUN_MAX_BYTES;
}

static struct sandbox *pool_take(struct aj_pool *pool)
{
    struct sandbox *sb = NULL;

    pthread_mutex_lock(&pool->mu);
    while (pool->n_ready > 0 && !sb) {
        sb = pool->ready[--pool->n_ready];
        if (!parked_alive(sb)) {
            pool->stats.discarded++;
            pthread_mutex_unlock(&pool->mu);
            pool_discard(sb);
            pthread_mutex_lock(&pool->mu);
            sb = NULL;
        }
    }
    if (sb)
        pool->stats.warm_runs++;
    else
        pool->stats.cold_runs++;
    /* A warm run: the filler waits, the payload has both CPUs. A cold one
     * (nothing parked) leaves the filler refilling. */
    pool->running = sb != NULL;
    pthread_mutex_unlock(&pool->mu);
    return sb;
}

int aj_pool_run(struct aj_pool *pool, char *const argv[], const struct aj_run_options *opts,
                struct aj_result *res, struct aj_error *err)
{
    struct sandbox *sb;
    struct aj_cgroup spent;
    bool retry;
    int r;

    if (!argv || !argv[0]) {
        result_reset(res);
        return aj_err(err, 0, "no command given");
    }
    if (!run_request_fits(pool->pol, argv)) {
        /* Beyond what a parked payload takes (AJ_RUN_MAX_*): a cold run,
         * which has no such bound. The parked sandboxes stay parked. */
        pthread_mutex_lock(&pool->mu);
        pool->stats.cold_runs++;
        pthread_mutex_unlock(&pool->mu);
        return aj_run_ex(pool->pol, argv, opts, res, err);
    }
    sb = pool_take(pool);
    if (!sb) /* empty (or every parked one had died): a cold run, same result */
        return aj_run_ex(pool->pol, argv, opts, res, err);
    *res = sb->prepared;
    sb->start = aj_now_ms();
    sb->st.argv = argv;
    r = sb_open_audit(sb, opts, res, err);
    if (r == 0)
        r = sb_launch(sb, argv, opts, res, err);
    if (r == 0)
        r = sb_supervise(sb, res, err);
    /* A parked sandbox can die between the liveness check and the launch
     * (killed from outside, the OOM killer). If its payload never said
     * READY, the command was never executed: run it cold, and say nothing
     * of the dead one in the events. Anything after READY is the run's, and
     * an events file we could not open is the caller's error, not the
     * sandbox's. */
    retry = sb->audit_open && !sb->st.started && !sb->st.have_child_err && !sb->st.interrupted &&
            sb->st.limit == AJ_STATUS_OK;
    aj_cgroup_init(&spent);
    sb_cleanup(sb, r, retry ? NULL : res, err, &spent);
    free(sb);
    pthread_mutex_lock(&pool->mu);
    if (spent.created && pool->n_spent < AJ_POOL_MAX) {
        pool->spent[pool->n_spent++] = spent;
        aj_cgroup_init(&spent);
    }
    if (retry) {
        pool->stats.warm_runs--;
        pool->stats.cold_runs++;
        pool->stats.discarded++;
    }
    pool->running = false;
    pthread_cond_signal(&pool->wake); /* refill, and remove what the run left */
    pthread_mutex_unlock(&pool->mu);
    aj_cgroup_destroy(&spent); /* only if the list was full */
    if (retry) {
        *err = (struct aj_error){0};
        return aj_run_ex(pool->pol, argv, opts, res, err);
    }
    return r;
}
