/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox side, from clone to execve (see child.h): no malloc, no
 * locks, no stdio, _exit only. The order inside is fixed by the kernel's
 * rules and the layers' needs:
 *
 *   init (pid 1): join v1 cgroups, wait for id maps (GO), cgroup
 *     namespace, become the inside user, hostname, time namespace, root
 *     filesystem + pivot_root, network namespace, the payload's pty,
 *     nesting limits, decoys (and wait until leased), fresh keyring,
 *     scrub its command line, close inherited fds, fork the payload, drop
 *     its own privileges, reap, report the exit status
 *   payload: default signals, setsid, workdir, rlimits, caps,
 *     no_new_privs, Landlock, close fds, seccomp (listener to the
 *     supervisor), [parked: wait for the command], READY, execve
 */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_caps.h"
#include "aj_landlock.h"
#include "aj_limits.h"
#include "aj_missing.h"
#include "aj_netns.h"
#include "aj_userns.h"
#include "aj_util.h"
#include "egress_child.h"
#include "protocol.h"

static int arm_death_signal(int sock);
/* Adopt mode's init: SIGCHLD only wakes it (see init_adopt). */
static void on_sigchld(int sig)
{
    (void)sig;
}

/* The fd a warm interpreter's bootstrap finds its request channel on. */
#define INTERP_CHANNEL_FD 3

static __attribute__((noreturn)) void child_fail(struct aj_child_ctx *c, struct aj_error *err, int code)
{
    aj_proto_send_msg(c->sock, AJ_MSG_ERROR, 0, c->layers, c->landlock_abi, err);
    _exit(code);
}

/* execvpe without malloc: try each PATH entry, prefer EACCES over ENOENT
 * as execvp does. */
static int exec_command(struct aj_child_ctx *c)
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
static int redirect_output(struct aj_child_ctx *c, struct aj_error *err)
{
    if (c->in_fd >= 0 && dup2(c->in_fd, STDIN_FILENO) < 0)
        return aj_err(err, errno, "redirect stdin");
    if (c->out_fd >= 0 && dup2(c->out_fd, STDOUT_FILENO) < 0)
        return aj_err(err, errno, "redirect stdout");
    if (c->err_fd >= 0 && dup2(c->err_fd, STDERR_FILENO) < 0)
        return aj_err(err, errno, "redirect stderr");
    return 0;
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

static void receive_run(struct aj_child_ctx *c)
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
    nfds = aj_proto_collect_fds(&mh, fds, 3);
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

/* A warm interpreter's request channel (interp.c): a stream socketpair,
 * one end to the supervisor, the other as fd 3 without close-on-exec, the
 * only fd the bootstrap inherits past 0-2 (it closes it before the code
 * runs). After close_range, so it survives; before seccomp, so the filter
 * need not allow what this takes. The sync socket moves off 3 first. */
static int child_interp_channel(struct aj_child_ctx *c, struct aj_error *err)
{
    struct aj_sync_msg m = {.type = AJ_MSG_INTERP};
    int sv[2], r;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return aj_err(err, errno, "interpreter request channel");
    if (c->sock == INTERP_CHANNEL_FD || sv[0] == INTERP_CHANNEL_FD) {
        int *fd = c->sock == INTERP_CHANNEL_FD ? &c->sock : &sv[0];
        int moved = fcntl(*fd, F_DUPFD_CLOEXEC, INTERP_CHANNEL_FD + 1);
        if (moved < 0)
            return aj_err(err, errno, "interpreter request channel: move fd 3");
        (void)close(*fd);
        *fd = moved;
    }
    if (sv[1] == INTERP_CHANNEL_FD) {
        if (fcntl(sv[1], F_SETFD, 0) < 0)
            return aj_err(err, errno, "interpreter request channel: fd 3");
    } else {
        if (dup3(sv[1], INTERP_CHANNEL_FD, 0) < 0)
            return aj_err(err, errno, "interpreter request channel: fd 3");
        (void)close(sv[1]);
    }
    r = aj_proto_send_fds(c->sock, &m, &sv[0], 1);
    (void)close(sv[0]);
    if (r < 0)
        return aj_err(err, -r, "hand the interpreter's request channel to the supervisor");
    return 0;
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

/* init: vm.memfd_noexec=2 in its own pid namespace (6.3+, root mode):
 * every memfd_create there without MFD_NOEXEC_SEAL gets it from the
 * kernel, and MFD_EXEC is refused. The kernel takes the writer's pid
 * namespace and wants CAP_SYS_ADMIN in its user namespace (init has it,
 * and keeps it until aj_userns_child_become) and /proc/sys lets only the
 * host's root write: init still has the supervisor's credentials, host
 * uid 0, until it becomes the inside user. So init writes it itself
 * before that, with no helper process; the supervisor forked two for it
 * before (a fork of a server costs page-table copies and copy-on-write
 * faults). Best effort: the payload reads the value back and keeps the
 * strict filter if it is not 2. */
static void seal_memfds(void)
{
    int fd = open("/proc/sys/vm/memfd_noexec", O_WRONLY | O_CLOEXEC);

    if (fd >= 0) {
        (void)!write(fd, "2\n", 2);
        (void)close(fd);
    }
}

/* Every layer of the payload, in order, through the seccomp filter (its
 * listener handed over). adopted: a template's child (see
 * aj_child_adopted_payload), which keeps its interpreter's signal
 * handlers (they are the ones `python3` installs as it starts), becomes
 * the inside user and joins a fresh keyring itself (init did both for its
 * own children), and closes every other fd outright. */
static void payload_layers(struct aj_child_ctx *c, bool adopted)
{
    const struct aj_policy *pol = c->pol;
    struct aj_error err = {0};
    uint64_t ll_layers = 0;
    int r;

    /* The payload starts with every signal at its default and none
     * blocked: SIG_IGN survives execve, so a caller that ignores SIGINT or
     * SIGTERM (nohup, a server) would hand that on, and a pooled payload
     * would inherit the mask of whoever created the pool. Handlers are
     * reset by execve anyway; setting SIG_DFL is async-signal-safe. */
    for (int sig = 1; !adopted && sig < NSIG; sig++) {
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
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_NEW_SESSION);
    if (adopted) {
        /* The template's process entered the namespaces as the host user
         * it runs as (unmapped inside): the inside user now, as init
         * became it; then the death signal again (the uid change cleared
         * it), and its own keyring (the template's is not the sandbox's). */
        if (aj_userns_child_become(pol->uid, pol->gid, c->rootless, &err) < 0)
            child_fail(c, &err, 125);
        if (arm_death_signal(c->sock) < 0)
            _exit(125);
        if (syscall(__NR_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0) {
            aj_err(&err, errno, "join a fresh session keyring");
            child_fail(c, &err, 125);
        }
        c->layers |= AJ_LAYER_BIT(AJ_LAYER_KEYRING);
        /* As dumpable as an exec'd interpreter is (the uid change made it
         * not): its own /proc entries are its own. */
        (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    }
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
            c->layers |= AJ_LAYER_BIT(AJ_LAYER_KEYRING);
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
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_RLIMITS);
    r = aj_caps_child_drop_all(&err);
    if (r < 0)
        child_fail(c, &err, 125);
    /* r == 1: a degraded run as an ordinary user could not empty the
     * bounding set (no CAP_SETPCAP). It holds no capability and no_new_privs
     * stops exec from granting any, but the result must not say "dropped". */
    if (r == 0)
        c->layers |= AJ_LAYER_BIT(AJ_LAYER_CAPS);
    if (aj_caps_child_no_new_privs(&err) < 0)
        child_fail(c, &err, 125);
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_NNP);
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
    if (!adopted && aj_sys_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
        aj_err(&err, errno, "close_range");
        child_fail(c, &err, 125);
    }
    /* No exec follows: closed now, all but the sync socket (the
     * template's own fds: its channel to the supervisor, whatever else). */
    if (adopted && ((c->sock > 3 && aj_sys_close_range(3, (unsigned)c->sock - 1, 0) < 0) ||
                    aj_sys_close_range((unsigned)c->sock + 1, ~0U, 0) < 0)) {
        aj_err(&err, errno, "close_range");
        child_fail(c, &err, 125);
    }
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_FDS_CLOSED) | AJ_LAYER_BIT(AJ_LAYER_ENV_CLEARED);
    if (c->interp && child_interp_channel(c, &err) < 0)
        child_fail(c, &err, 125);
    r = (c->skip & AJ_SKIP_SECCOMP) ? -1 : aj_seccomp_child_load(&c->bpf, &err);
    if (r == -1 && (c->skip & AJ_SKIP_SECCOMP))
        r = 0;
    else if (r < 0)
        child_fail(c, &err, 125);
    else
        c->layers |= AJ_LAYER_BIT(AJ_LAYER_SECCOMP);
    if (r > 0) {
        /* The listener goes to the supervisor; this process keeps no copy
         * (a payload holding its own listener could answer itself). */
        struct aj_sync_msg m = {.type = AJ_MSG_LISTENER};
        int lfd = r;
        if (aj_proto_send_fds(c->sock, &m, &lfd, 1) < 0) {
            aj_err(&err, errno, "hand the seccomp listener to the supervisor");
            child_fail(c, &err, 125);
        }
        (void)close(lfd);
        c->layers |= AJ_LAYER_BIT(AJ_LAYER_MONITOR);
    }
}

void aj_child_adopted_payload(struct aj_child_ctx *c)
{
    payload_layers(c, true);
    aj_proto_send_msg(c->sock, AJ_MSG_READY, 0, c->layers, c->landlock_abi, NULL);
    (void)close(c->sock);
    c->sock = -1;
}

static __attribute__((noreturn)) void payload_main(struct aj_child_ctx *c)
{
    struct aj_error err = {0};
    int e;

    payload_layers(c, false);
    if (c->parked)
        receive_run(c); /* a pooled sandbox: blocks until it has its command */
    aj_proto_send_msg(c->sock, AJ_MSG_READY, 0, c->layers, c->landlock_abi, NULL);
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
void aj_child_scrub_cmdline(const char *name)
{
    size_t name_size = strlen(name) + 1;
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
    (void)prctl(PR_SET_NAME, name, 0, 0, 0);
    if (env_start && env_end > env_start && env_end - env_start <= (8UL << 20))
        memset((void *)env_start, 0, env_end - env_start);
    if (start == 0 || end <= start || end - start > (1UL << 20))
        return;
    memset((void *)start, 0, end - start);
    if (end - start > name_size)
        memcpy((void *)start, name, name_size);
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
static int child_make_pty(struct aj_child_ctx *c, struct aj_error *err)
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
    else if (aj_proto_send_fds(c->sock, &m, &master, 1) < 0)
        r = aj_err(err, errno, "hand the terminal to the supervisor");
    if (master >= 0)
        (void)close(master);
    if (mfd >= 0)
        (void)close(mfd);
    (void)close(fsfd);
    return r;
}

/* Adopt mode (child.h): everything of the sandbox is made; instead of
 * forking the payload, hand the supervisor what a template's child needs
 * to enter it (a copy of our end of the sync socket, our namespaces:
 * opened from /proc/self, so no ptrace check applies), then keep only
 * init's other job, reaping what is reparented to us. Our own end of the
 * sync socket goes: the supervisor sees EOF once the template's child and
 * its reaper are gone, and kills us then (or at the run's end). */
static __attribute__((noreturn)) void init_adopt(struct aj_child_ctx *c)
{
    static const char *const ns[AJ_ADOPT_NS_KINDS] = {"user", "mnt", "uts", "ipc", "net", "cgroup", "pid",
                                                      "time_for_children"};
    struct aj_sync_msg m = {.type = AJ_MSG_ADOPT, .layers = c->layers, .landlock_abi = c->landlock_abi};
    struct aj_error err = {0};
    int fds[1 + AJ_ADOPT_NS_KINDS], nfds = 0;
    sigset_t chld, none;

    fds[nfds] = fcntl(c->sock, F_DUPFD_CLOEXEC, 3);
    if (fds[nfds++] < 0) {
        aj_err(&err, errno, "adopt: duplicate the sync socket");
        child_fail(c, &err, 125);
    }
    for (int i = 0; i < AJ_ADOPT_NS_KINDS; i++) {
        char path[48];
        (void)snprintf(path, sizeof(path), "/proc/self/ns/%s", ns[i]);
        fds[nfds] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[nfds] >= 0) {
            m.wstatus |= 1 << i;
            nfds++;
        } else if (!(i == AJ_ADOPT_NS_TIME && errno == ENOENT)) {
            aj_err(&err, errno, "adopt: open %s", path);
            child_fail(c, &err, 125);
        }
    }
    if (aj_proto_send_fds(c->sock, &m, fds, nfds) < 0) {
        aj_err(&err, errno, "adopt: hand the namespaces to the supervisor");
        child_fail(c, &err, 125);
    }
    for (int i = 0; i < nfds; i++)
        (void)close(fds[i]);
    (void)close(c->sock);
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (aj_caps_child_drop_all(&err) < 0 || aj_caps_child_no_new_privs(&err) < 0)
        _exit(125);
    /* SIGCHLD blocked except while suspended: a child that ends between
     * the last wait and the suspend still wakes us. */
    {
        struct sigaction sa = {.sa_handler = on_sigchld};
        (void)sigaction(SIGCHLD, &sa, NULL);
    }
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigemptyset(&none);
    (void)sigprocmask(SIG_BLOCK, &chld, NULL);
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            if (WIFSTOPPED(st)) /* as in aj_child_init_main */
                (void)ptrace(PTRACE_DETACH, p, NULL, (void *)(uintptr_t)WSTOPSIG(st));
            continue;
        }
        if (p < 0 && errno == EINTR)
            continue;
        (void)sigsuspend(&none);
    }
}

void aj_child_init_main(struct aj_child_ctx *c)
{
    const struct aj_policy *pol = c->pol;
    struct aj_error err = {0};
    struct aj_sync_msg go;
    const char *hostname = pol->hostname ? pol->hostname : AJ_DEFAULT_HOSTNAME;
    int nest_fds[AJ_USERNS_NS_KINDS];
    int timens_fd;
    pid_t payload;
    ssize_t n;

    /* The sandbox's view is made with modes that do not depend on the
     * embedder's umask (a server's is 077): its directories and files are
     * 0755 and 0644, as on the host, so that a template (root without
     * capabilities: tmpl.c) can read the view its children will run in.
     * The payload gets the caller's umask back. */
    mode_t caller_umask = umask(022);

    if (arm_death_signal(-1) < 0)
        _exit(125);
    /* Into the run's v1 cgroups before anything else happens here. */
    if (aj_cgroup_child_join(c->cg_join, c->n_cg_join, &err) < 0)
        child_fail(c, &err, 125);
    if (c->bpf_memfd.len) /* while the supervisor writes the id maps */
        seal_memfds();
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
        c->layers |= AJ_LAYER_BIT(AJ_LAYER_TIMENS);
        if (set_own_uptime(timens_fd, &err) < 0)
            child_fail(c, &err, 125);
    }
    if (timens_fd >= 0)
        (void)close(timens_fd);
    if (aj_userns_child_nesting_open(nest_fds, &err) < 0)
        child_fail(c, &err, 125);
    if (aj_mount_child_setup(&c->plan, pol, &err) < 0)
        child_fail(c, &err, 125);
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_ROOTFS);
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
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_NO_NESTED_NS);
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
        if (aj_proto_send_fds(c->sock, &m, fds, nfds) < 0) {
            aj_err(&err, errno, "hand the decoys to the supervisor");
            child_fail(c, &err, 125);
        }
        for (int i = 0; i < nfds; i++)
            (void)close(fds[i]);
        /* No payload before the supervisor holds its leases: a payload
         * that opened a decoy in between would leave no canary. */
        if (wait_armed(c->sock) < 0)
            _exit(125);
        c->layers |= AJ_LAYER_BIT(AJ_LAYER_DECOYS);
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
    c->layers |= AJ_LAYER_BIT(AJ_LAYER_KEYRING);
    /* Before the payload exists (c->argv is a copy, not this memory). */
    aj_child_scrub_cmdline("agentjail-init");
    if (close_all_but(c->sock, c->pty_slave) < 0) {
        aj_err(&err, errno, "close inherited fds");
        child_fail(c, &err, 125);
    }

    (void)umask(caller_umask);
    if (c->adopt)
        init_adopt(c);

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
            aj_proto_send_msg(c->sock, AJ_MSG_EXIT, st, 0, 0, NULL);
            _exit(0);
        }
    }
}


void aj_child_degraded_main(struct aj_child_ctx *c)
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

/* ---- helpers the supervisor clones ---------------------------------------------- */

int aj_child_netns_listen_main(void *arg)
{
    const struct aj_child_netns_listen *a = arg;
    struct aj_sync_msg m = {.type = AJ_MSG_NETNS};

    if ((a->userns_fd >= 0 && setns(a->userns_fd, CLONE_NEWUSER) < 0) || setns(a->netns_fd, CLONE_NEWNET) < 0) {
        m.err.errnum = errno;
        (void)aj_write_all(a->relay_sock, &m, sizeof(m));
        _exit(1);
    }
    _exit(aj_egress_child_listen(a->relay_sock, a->port) < 0 ? 1 : 0);
}
