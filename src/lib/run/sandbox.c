/* SPDX-License-Identifier: Apache-2.0 */
/* One sandbox, from preparation to teardown: the only place that knows
 * the order of steps (as nsjail's contain.cc). A run, in order:
 *
 *   sb_begin          the policy validated and hashed, the request taken
 *   sb_open_audit     the events file (or counting only)
 *   sb_prepare        everything up to GO:
 *     prep_identity     host uid (root mode: leased), Landlock ABI
 *     prep_filters      the seccomp programs
 *     prep_root         mount plan: binds resolved once, workspaces
 *                       id-mapped, decoys planted
 *     prep_cgroup       the run's cgroups, /tmp by the memory limit
 *     prep_egress       network "proxy": the egress proxy, started in
 *                       the run's cgroups, the secrets' placeholders
 *     prep_command      argv and environment (parked: at launch)
 *     prep_stdio        0, 1, 2 as the request names them, the relay
 *     launch_init       sync socket, clone3 into the cgroup (or degraded)
 *     release_init      v2 attach, relay socket (netns helper), id maps, GO
 *   sb_launch         pooled only: the parked payload gets its command
 *   sb_go             the event loop armed; the handle is the caller's
 *   (aj_sandbox_process: loop.c until init is gone; sb_after_init for a
 *    degraded run's leftovers; the output relayed to its end)
 *   sb_conclude       the result
 *   sb_end            kill what is left, the end events (the alert hook
 *                     may still run: loop.c waits for it, bounded)
 *   sb_release        every fd, cgroup, lease and buffer of the run
 *
 * The sandbox side of the clone is child.c; nothing here runs there. */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "aj_bindreg.h"
#include "aj_landlock.h"
#include "aj_missing.h"
#include "aj_mount.h"
#include "aj_seccomp.h"
#include "aj_util.h"
#include "children.h"
#include "protocol.h"
#include "zygote.h"

#define NS_FLAGS                                                                                   \
    (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |     \
     CLONE_NEWCGROUP)

static char **build_envp(const struct aj_policy *pol, char *const extra[2], char *const *egress,
                         const char **ret_path, struct aj_error *err)
{
    size_t n_egress = 0, cap, n = 0;
    char **envp;
    const char *path = AJ_DEFAULT_PATH;

    while (egress && egress[n_egress])
        n_egress++;
    cap = 2 + pol->n_env_pass + pol->n_env + 2 + n_egress + 1;

    envp = calloc(cap, sizeof(char *));
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
    /* network "proxy": the proxy variables, the trust bundle, the secrets'
     * placeholders (validation keeps the policy from naming those). */
    for (size_t i = 0; i < n_egress; i++)
        ENV_PUT(strdup(egress[i]));
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
 * area, which init blanks (aj_child_scrub_cmdline): the payload gets a copy. */
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

char **sb_build_envp(const struct aj_policy *pol, char *const extra[2], const char **ret_path, struct aj_error *err)
{
    return build_envp(pol, extra, NULL, ret_path, err);
}

void sb_free_envp(char **envp)
{
    for (size_t i = 0; envp && envp[i]; i++)
        free(envp[i]);
    free(envp);
}

static void kill_and_reap(pid_t pid, int pidfd)
{
    if (pid <= 0)
        return;
    if (pidfd < 0 || aj_sys_pidfd_send_signal(pidfd, SIGKILL) < 0)
        (void)kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    aj_children_del(pid);
}

/* Degraded runs have no pid namespace: the supervisor is a subreaper and,
 * when the payload ends, kills what was reparented to it from the run. A
 * library caller may have children of its own: those that existed before
 * the run (and the alert hook) are left alone; everything else among our
 * children came from the run. Each is reaped by its pid, never with
 * waitpid(-1). */

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

static pthread_mutex_t degraded_mu = PTHREAD_MUTEX_INITIALIZER;
static bool degraded_busy;

static void kill_orphans(const struct prior_children *prior, pid_t keep)
{
    for (int round = 0; round < 100; round++) {
        pid_t kids[256];
        size_t n = list_children(kids, AJ_ARRAY_SIZE(kids));
        bool found = false;

        for (size_t i = 0; i < n; i++) {
            /* The library's own (another handle's sandbox, a pool's
             * parked ones, a helper) and the embedder's earlier children
             * stay. */
            bool mine = kids[i] == keep || aj_children_has(kids[i]);
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

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        (void)close(*fd);
        *fd = -1;
    }
}

static void fill_layers_from_ns(struct aj_result *res, bool degraded)
{
    if (!degraded)
        res->layer_set[0] |= AJ_LAYER_BIT(AJ_LAYER_USERNS) | AJ_LAYER_BIT(AJ_LAYER_PIDNS) | AJ_LAYER_BIT(AJ_LAYER_MOUNTNS) | AJ_LAYER_BIT(AJ_LAYER_NETNS) |
                       AJ_LAYER_BIT(AJ_LAYER_IPCNS) | AJ_LAYER_BIT(AJ_LAYER_UTSNS) | AJ_LAYER_BIT(AJ_LAYER_CGROUPNS);
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
        res->layer_set[0] |= AJ_LAYER_BIT(AJ_LAYER_CGROUP) | cg->limits;
    if (pol->cpu_time_ms && cg->created)
        res->layer_set[0] |= AJ_LAYER_BIT(AJ_LAYER_CPU_TIME_LIMIT);
    return 0;
}

/* A destination for the payload's stdout or stderr (i: 0 or 1), from the
 * request: the caller's fd, a pipe of ours (the caller's end kept for
 * aj_sandbox_take_pipe), or /dev/null. */
static int stdio_dest(struct aj_sandbox *sb, int i, struct aj_error *err)
{
    const struct aj_stdio *s = &sb->req.stdio[1 + i];
    struct out_stream *o = &sb->st.out[i];
    int p[2];

    switch (s->kind) {
    case AJ_STDIO_FD:
        if (fcntl(s->fd, F_GETFD) < 0)
            return aj_err(err, errno, "request: %s: fd %d", i ? "stderr" : "stdout", s->fd);
        o->dest = s->fd;
        return 0;
    case AJ_STDIO_PIPE:
        if (pipe2(p, O_CLOEXEC) < 0)
            return aj_err(err, errno, "request: %s pipe", i ? "stderr" : "stdout");
        sb->caller_pipe[1 + i] = p[0];
        o->dest = p[1];
        o->owns_dest = true;
        return 0;
    case AJ_STDIO_NULL:
        break;
    }
    o->dest = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (o->dest < 0)
        return aj_err(err, errno, "open /dev/null");
    o->owns_dest = true;
    return 0;
}

/* The payload's stdin from the request; -1: /dev/null. */
static int stdio_in(struct aj_sandbox *sb, struct aj_error *err)
{
    const struct aj_stdio *s = &sb->req.stdio[0];
    int p[2];

    switch (s->kind) {
    case AJ_STDIO_FD:
        if (fcntl(s->fd, F_GETFD) < 0)
            return aj_err(err, errno, "request: stdin: fd %d", s->fd);
        return s->fd;
    case AJ_STDIO_PIPE:
        if (pipe2(p, O_CLOEXEC) < 0)
            return aj_err(err, errno, "request: stdin pipe");
        sb->caller_pipe[0] = p[1];
        sb->stdin_own = p[0];
        return p[0];
    case AJ_STDIO_NULL:
        break;
    }
    return -1;
}

/* stdout and stderr: straight to their destination, or through a capture
 * pipe the supervisor relays (with the output budget, and always for a
 * terminal). */
static int setup_output(const struct aj_policy *pol, struct supervise_state *st, struct aj_error *err)
{
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        int p[2], r;
        if (st->pty && (i == 0 || st->pty_err)) {
            /* The payload's pty carries it (see pty_attach): stdout's
             * stream reads the master when it comes; stderr has none. */
            if (i == 1)
                continue;
            r = aj_loop_relay_open(o, err);
            if (r < 0)
                return r;
            continue;
        }
        /* A terminal is never handed to the sandbox (it would be the
         * host's: TIOCSTI, job control, the scrollback): its output is
         * relayed like a captured stream, without a budget. */
        if (!pol->output_limit && !isatty(o->dest)) {
            /* No budget: the sandbox writes to the destination directly
             * (init makes it its fd 1/2). */
            o->wfd_child = o->dest;
            continue;
        }
        r = aj_loop_relay_open(o, err);
        if (r < 0)
            return r;
        if (pipe2(p, O_CLOEXEC) < 0)
            return aj_err(err, errno, "pipe for output capture");
        o->rfd = p[0];
        o->wfd_child = p[1];
        o->owns_w = true;
        if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
            return aj_err(err, errno, "nonblocking output pipe");
    }
    return 0;
}

/* The payload's 0, 1 and 2 as the request names them (init's copies are
 * c->in_fd, c->out_fd, c->err_fd, all three always set: never whatever
 * the caller's own 0-2 are). Interactive (stdin and stdout both
 * terminals, and pty_ok): the payload gets a pty of its own. */
static int setup_stdio(struct aj_sandbox *sb, bool pty_ok, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    struct supervise_state *st = &sb->st;
    const struct aj_policy *pol = c->pol;
    int in, r;

    in = stdio_in(sb, err);
    if (in < -1)
        return in;
    for (int i = 0; i < 2; i++) {
        r = stdio_dest(sb, i, err);
        if (r < 0)
            return r;
    }
    st->in_dest = in;
    /* Not degraded: devpts needs the user namespace. */
    c->want_pty = st->pty = pty_ok && !pol->allow_degraded && in >= 0 && isatty(in) && isatty(st->out[0].dest);
    c->pty_err = st->pty_err = c->want_pty && isatty(st->out[1].dest);
    r = setup_output(pol, st, err);
    if (r < 0)
        return r;
    c->out_fd = st->out[0].wfd_child;
    c->err_fd = st->out[1].wfd_child;
    c->in_fd = in;
    if (in < 0 || isatty(in)) {
        /* Never the caller's terminal (see setup_output): stdin is
         * /dev/null instead, for init, and for the payload unless it has
         * its own pty. */
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
        res->layer_set[0] |= AJ_LAYER_BIT(AJ_LAYER_OUTPUT_LIMIT);
    return 0;
}

/* After the sandbox has its copies: what we made for it alone goes (the
 * capture pipes' write ends, a stdin pipe's read end, a destination that
 * is not relayed), so that the caller's end sees EOF when the sandbox is
 * done with it. */
static void stdio_handed_over(struct aj_sandbox *sb)
{
    struct supervise_state *st = &sb->st;

    close_fd(&sb->null_fd);
    close_fd(&sb->stdin_own);
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        if (o->owns_w)
            close_fd(&o->wfd_child); /* the sandbox has its copy now */
        o->wfd_child = -1;           /* a caller's fd is not ours to close */
        o->owns_w = false;
        if (!o->buf && o->owns_dest) /* not relayed: the sandbox writes to it */
            close_fd(&o->dest);
    }
}

void sb_init(struct aj_sandbox *sb, const struct aj_policy *pol)
{
    memset(sb, 0, sizeof(*sb));
    sb->c = (struct aj_child_ctx){.pol = pol, .sock = -1, .out_fd = -1, .err_fd = -1, .in_fd = -1, .pty_slave = -1};
    sb->lease = (struct aj_uid_lease){.lock_fd = -1};
    sb->audit = (struct aj_audit){.fd = -1};
    sb->st = (struct supervise_state){.pol = pol, .cg = &sb->cg, .audit = &sb->audit, .pid = -1, .pidfd = -1,
                                      .sock = -1, .decoy_sock = -1, .epfd = -1, .timerfd = -1,
                                      .dconn = {{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}},
                                      .limit = AJ_STATUS_OK};
    sb->st.out[0] = sb->st.out[1] = sb->st.in =
        (struct out_stream){.rfd = -1, .wfd_child = -1, .dest = -1, .wfd = -1};
    sb->st.in_dest = -1;
    sb->st.alert.pidfd = -1;
    for (int i = 0; i < AJ_SLOTS; i++)
        sb->st.reg_fd[i] = -1;
    sb->st.notify.fd = -1;
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        sb->st.decoy_files[i] = -1; /* every slot, whatever the table's size */
    sb->st.lease_wake[0] = sb->st.lease_wake[1] = -1;
    sb->socks[0] = sb->socks[1] = -1;
    sb->null_fd = -1;
    sb->stdin_own = -1;
    sb->caller_pipe[0] = sb->caller_pipe[1] = sb->caller_pipe[2] = -1;
    aj_egress_init(&sb->eg);
    sb->st.interp_fd = -1;
    aj_cgroup_init(&sb->cg);
}

void sb_use_policy(struct aj_sandbox *sb, const struct aj_policy *pol)
{
    sb->c.pol = pol;
    sb->st.pol = pol;
}

/* Degraded: no namespaces at all. Landlock confines the filesystem to the
 * named host paths, seccomp and no_new_privs stay, the supervisor becomes a
 * subreaper to kill leftovers. */
static int sb_clone_degraded(struct aj_sandbox *sb, int clone_errno, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
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
    /* The subreaper is the process, not the run: one degraded run at a
     * time per process, so that one's leftovers are not taken for
     * another's. */
    pthread_mutex_lock(&degraded_mu);
    if (degraded_busy) {
        pthread_mutex_unlock(&degraded_mu);
        return aj_err(err, EBUSY, "another degraded run is in flight in this process (one at a time: without "
                      "a pid namespace the process itself reaps and kills what a run leaves behind)");
    }
    degraded_busy = sb->degraded_held = true;
    pthread_mutex_unlock(&degraded_mu);
    if (prctl(PR_GET_CHILD_SUBREAPER, &was, 0, 0, 0) < 0 || prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return aj_err(err, errno, "PR_SET_CHILD_SUBREAPER");
    sb->subreaper_set = !was;
    sb->prior.n = list_children(sb->prior.pids, AJ_MAX_PRIOR_CHILDREN);
    sb->st.pid = aj_clone_sandbox(0, sb->cg.v2_fd, &sb->st.pidfd, &sb->in_cgroup);
    if (sb->st.pid < 0)
        return aj_err(err, errno, "fork");
    return 0;
}

/* Network "proxy": the relay's listening socket on 127.0.0.1:port inside
 * the sandbox's network namespace, made before GO, so it listens before
 * any payload exists. Init was cloned into its network namespace
 * (launch_init); a helper joins it and makes the socket
 * (aj_child_netns_listen_main). Root mode: the helper shares our memory
 * (CLONE_VM | CLONE_VFORK, on a stack in this frame, every signal blocked)
 * and joins the namespace directly: no copy of the supervisor's page
 * tables, and no copy-on-write faults and TLB shootdowns in the
 * supervisor's threads afterwards. Rootless: joining the namespace also
 * needs CAP_SYS_ADMIN in our own user namespace, which only joining init's
 * user namespace gives, and the kernel refuses that to a process sharing
 * its memory: a fork then (CLONE_VFORK still: it is waited for). The fds
 * are opened while init still has our ids: once it switched to the run's
 * host uid (root mode), opening its namespaces (or setns on its pidfd)
 * needs CAP_SYS_PTRACE, which a container lacks by default. */
__attribute__((no_sanitize_address)) static int spawn_netns_helper(struct aj_sandbox *sb, struct aj_error *err)
{
    struct aj_child_netns_listen a = {
        .userns_fd = -1,
        .netns_fd = -1,
        .relay_sock = aj_egress_helper_sock(&sb->eg),
        .port = (uint16_t)sb->c.pol->proxy_port,
    };
    static const char *const kinds[2] = {"net", "user"};
    static const int types[2] = {CLONE_NEWNET, CLONE_NEWUSER};
    int *fds[2] = {&a.netns_fd, &a.userns_fd};
    _Alignas(16) char stack[16384];
    sigset_t all, old;
    int r = 0, e, wst;
    pid_t pid;

    for (int i = 0; i < (sb->c.rootless ? 2 : 1); i++) {
        char path[64];
        (void)snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)sb->st.pid, kinds[i]);
        *fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (*fds[i] < 0) {
            r = aj_err(err, errno, "open %s", path);
            goto out;
        }
        /* Our unreaped child keeps its pid; still, trust only what nsfs
         * says the fd is. */
        if (ioctl(*fds[i], NS_GET_NSTYPE) != types[i]) {
            r = aj_err(err, EINVAL, "%s is not a %s namespace", path, kinds[i]);
            goto out;
        }
    }
    {
        /* Never ours: the relay's socket must not listen on the host. */
        struct stat theirs, ours;
        if (fstat(a.netns_fd, &theirs) < 0 || stat("/proc/thread-self/ns/net", &ours) < 0 ||
            (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino)) {
            r = aj_err(err, EINVAL, "the sandbox has no network namespace of its own");
            goto out;
        }
    }
    (void)sigfillset(&all);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = clone(aj_child_netns_listen_main, stack + sizeof(stack),
                (sb->c.rootless ? 0 : CLONE_VM) | CLONE_VFORK | SIGCHLD, &a);
    e = errno;
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        r = aj_err(err, e, "clone the network namespace helper");
        goto out;
    }
    /* Back here once it has exited: a failure is in its message to the
     * relay's socket, which aj_egress_start_relay reports. */
    aj_children_add(pid);
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
        ;
    aj_children_del(pid);
out:
    close_fd(&a.netns_fd);
    close_fd(&a.userns_fd);
    return r;
}

/* Bind sources are resolved here, once, without following a symlink, and
 * checked against the registry of writable bind sources (this run's are
 * added to it first); see aj_mount_plan_resolve. */
static int sb_resolve_binds(struct aj_sandbox *sb, struct aj_error *err)
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
static int sb_idmap_workspaces(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
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

/* The decoys' files and their /var/run go into the mount plan: the decoy
 * module says what, the mount layer plants it. */
static int sb_plant_decoys(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
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

/* Who the run is on the host (root mode: a leased uid of its own), the
 * Landlock ABI, and a layer left out on purpose (tests only). */
static int prep_identity(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    const struct aj_policy *pol = c->pol;
    int r;

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
        res->layer_set[0] |= AJ_LAYER_BIT(AJ_LAYER_UID_ISOLATION);
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
    return 0;
}

/* The seccomp programs, built before the clone (the child does not
 * allocate). */
static int prep_filters(struct aj_sandbox *sb, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    const struct aj_policy *pol = c->pol;
    int r;

    /* Monitored filter: escape-indicative calls come to the supervisor. */
    r = aj_seccomp_build(pol, true, &c->bpf, err);
    if (r < 0)
        return r;
    /* vm.memfd_noexec is per pid namespace (6.3+), writable only by the
     * host's root from inside it: root mode only (init writes it, see
     * seal_memfds in child.c). */
    if (!c->rootless && geteuid() == 0 && access("/proc/sys/vm/memfd_noexec", F_OK) == 0) {
        r = aj_seccomp_build_memfd_sealed(pol, true, &c->bpf_memfd, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The root filesystem's plan: binds resolved once, workspaces id-mapped,
 * decoys planted. */
static int prep_root(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    struct supervise_state *st = &sb->st;
    const struct aj_policy *pol = c->pol;
    int r;

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
    return 0;
}

/* network "proxy": the run's egress proxy, started before init is cloned
 * (see egress.c: the secrets it takes are wiped from our memory before
 * the clone copies it), and what the sandbox sees of it in the mount plan
 * and, through build_envp, the environment. */
static int prep_egress(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    int r;

    if (c->pol->network != AJ_NET_PROXY)
        return 0;
    /* Parked (a warm pool's): the proxy is started now, with the pool's
     * policy (its allow-list, caps and secrets: nothing of a request), and
     * waits with the sandbox; its run CA covers the wait (see
     * aj_egress_parked_usable, checked when the pool hands it out). */
    if (c->parked || c->interp) /* a warm interpreter waits in its pool too */
        sb->eg.park_s = AJ_EGRESS_PARK_MAX_S;
    sb->st.egress = &sb->eg;
    r = aj_egress_prepare(&sb->eg, c->pol, res->sandbox_id, c->rootless, sb->cg.created ? &sb->cg : NULL, &c->plan,
                          err);
    return r < 0 ? aj_err_prefix(err, r, "network proxy") : 0;
}

/* The command and its environment (a parked sandbox's come at launch). */
static int prep_command(struct aj_sandbox *sb, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    const struct aj_policy *pol = c->pol;
    int r;

    if (!c->parked) {
        r = sb_keep_argv(sb, err);
        if (r < 0)
            return r;
    }
    /* A parked sandbox's environment is built when its run starts
     * (sb_launch): env_pass values are the caller's at that moment. */
    if (!c->parked) {
        c->envp = build_envp(pol, sb->decoy_env, sb->eg.env, &c->path_env, err);
        if (!c->envp)
            return -ENOMEM;
    }
    return 0;
}

/* The run's cgroups (and, by them, the size of /tmp), and the fds through
 * which the child joins v1 groups. */
static int prep_cgroup(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    const struct aj_policy *pol = c->pol;
    int r;

    r = setup_cgroup(pol, res, &sb->cg, err);
    if (r < 0)
        return r;
    /* tmp_size "auto": /tmp and /dev/shm by the memory limit, now that
     * whether a cgroup enforces it is known. */
    aj_mount_plan_set_scratch_size(&c->plan, aj_policy_tmp_size(pol, (sb->cg.limits & AJ_LAYER_BIT(AJ_LAYER_MEMORY_LIMIT)) != 0));
    if (sb->cg.created) {
        r = aj_cgroup_open_join_fds(&sb->cg, c->cg_join, &c->n_cg_join, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* What the sandbox gets as 0, 1 and 2. */
static int prep_stdio(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    int r;

    if (c->parked || c->interp) {
        /* Until its command comes, a parked sandbox holds none of the
         * caller's fds: 0, 1 and 2 are /dev/null (a warm interpreter's too:
         * the request's streams reach its bootstrap at launch). */
        sb->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (sb->null_fd < 0)
            return aj_err(err, errno, "open /dev/null");
        c->in_fd = c->out_fd = c->err_fd = sb->null_fd;
    } else {
        r = setup_stdio(sb, true, res, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The sync socket, then clone3: init (or, degraded, the payload) is
 * born here, in its cgroup; our copies of what it was handed go. */
static int launch_init(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    struct supervise_state *st = &sb->st;
    int r;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sb->socks) < 0)
        return aj_err(err, errno, "socketpair");
    c->sock = sb->socks[1];

    /* The network namespace too: a helper that made it on another CPU
     * (~0.3 ms here) was a fork of the supervisor, which cost more. */
    {
        bool by_zygote = false;
        if (sb->zyg) /* a pool's: cloned by its zygote (zygote.h) */
            st->pid = aj_zygote_clone(sb->zyg, c, NS_FLAGS, sb->cg.v2_fd, &st->pidfd, &sb->in_cgroup, &by_zygote);
        if (!by_zygote)
            st->pid = aj_clone_sandbox(NS_FLAGS, sb->cg.v2_fd, &st->pidfd, &sb->in_cgroup);
    }
    if (st->pid < 0) {
        r = sb_clone_degraded(sb, errno, res, err);
        if (r < 0)
            return r;
    }
    if (st->pid > 0)
        aj_children_add(st->pid);
    if (st->pid == 0) {
        (void)close(sb->socks[0]);
        for (int i = 0; i < 2; i++)
            if (st->out[i].rfd >= 0)
                (void)close(st->out[i].rfd);
        if (c->degraded)
            aj_child_degraded_main(c);
        aj_child_init_main(c);
    }
    close_fd(&sb->socks[1]);
    c->sock = -1;
    st->sock = sb->socks[0];
    sb->socks[0] = -1;
    stdio_handed_over(sb);
    aj_mount_plan_close_idmaps(&c->plan); /* init has its copies */
    if (c->degraded && res->has_rw_binds) {
        res->workspace_idmap = false; /* no mount namespace to attach them in */
        snprintf(res->workspace_idmap_note, sizeof(res->workspace_idmap_note),
                 "degraded mode: no mount namespace, the writable binds are the host paths themselves");
    }
    fill_layers_from_ns(res, c->degraded);

    return 0;
}

/* Confined before it runs anything of its own: cgroups (v1, and v2 when
 * CLONE_INTO_CGROUP was not possible), then id maps, then GO; the network
 * namespace helper last. */
static int release_init(struct aj_sandbox *sb, struct aj_error *err)
{
    struct aj_child_ctx *c = &sb->c;
    struct supervise_state *st = &sb->st;
    const struct aj_policy *pol = c->pol;
    int r;

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
    if (!c->degraded && aj_egress_helper_sock(&sb->eg) >= 0) {
        r = spawn_netns_helper(sb, err);
        if (r < 0)
            return r;
    }
    {
        struct aj_sync_msg go = {.type = AJ_MSG_GO};
        if (!c->degraded) {
            r = aj_userns_parent_write_maps(st->pid, pol->uid, pol->gid, c->host_uid, c->host_gid, c->rootless,
                                            err);
            if (r < 0)
                return r;
        }
        r = aj_proto_send_plain(st->sock, &go, sizeof(go));
        if (r < 0)
            return aj_err(err, -r, "release the sandbox");
    }
    r = aj_egress_start_relay(&sb->eg, pol, err);
    if (r < 0)
        return aj_err_prefix(err, r, "network proxy");
    return 0;
}

/* Everything up to the GO message, in this order (see the steps above).
 * parked: for the pool (its command comes at launch). */
int sb_prepare(struct aj_sandbox *sb, bool parked, struct aj_result *res, struct aj_error *err)
{
    int r;

    sb->c.parked = parked;
    r = aj_notify_init(&sb->st.notify, -1, err);
    if (r == 0)
        r = prep_identity(sb, res, err);
    if (r == 0)
        r = prep_filters(sb, err);
    if (r == 0)
        r = prep_root(sb, res, err);
    /* The cgroup before the egress proxy: it starts in it. */
    if (r == 0)
        r = prep_cgroup(sb, res, err);
    if (r == 0)
        r = prep_egress(sb, res, err);
    if (r == 0)
        r = prep_command(sb, err);
    if (r == 0)
        r = prep_stdio(sb, res, err);
    if (r == 0)
        r = launch_init(sb, res, err);
    if (r == 0)
        r = release_init(sb, err);
    return r;
}

/* Hand a parked sandbox its command: argv and environment, then its
 * stdin, stdout and stderr (our capture pipes when there is an output
 * budget). */
int sb_launch(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    const struct aj_policy *pol = sb->c.pol;
    char *const *argv = sb->req.argv;
    char *buf;
    size_t len = sizeof(struct aj_run_msg), argc = 0, envc = 0;
    int fds[3], r;

    /* The request's environment, now: env_pass reads the caller's values
     * as this run starts, never as the sandbox was parked. (A warm
     * interpreter's payload has exec'd with the policy's: replaced.) */
    sb_free_envp(sb->c.envp);
    sb->c.envp = build_envp(pol, sb->decoy_env, sb->eg.env, &sb->c.path_env, err);
    if (!sb->c.envp)
        return -ENOMEM;
    if (sb->c.interp) {
        /* Its bootstrap takes the request on its own channel (interp.c). */
        r = setup_stdio(sb, false, res, err);
        if (r < 0)
            return r;
        aj_loop_drain_msgs(st);
        fds[0] = sb->c.in_fd;
        fds[1] = sb->c.out_fd;
        fds[2] = sb->c.err_fd;
        r = aj_interp_send(sb, fds, err);
        stdio_handed_over(sb);
        return r;
    }
    for (; argv[argc]; argc++)
        len += strlen(argv[argc]) + 1;
    for (; sb->c.envp[envc]; envc++)
        len += strlen(sb->c.envp[envc]) + 1;
    if (argc > AJ_RUN_MAX_ARGS || envc > AJ_RUN_MAX_ARGS || len > AJ_RUN_MAX_BYTES)
        return aj_err(err, E2BIG,
                      "command line and environment too long for a pooled sandbox (%zu arguments, %zu variables, "
                      "%zu bytes)",
                      argc, envc, len);
    r = setup_stdio(sb, false, res, err);
    if (r < 0)
        return r;
    /* What the parked sandbox sent while it waited (the seccomp listener,
     * the decoys): taken now, so every decoy is leased before the payload
     * can run a single instruction of its command. */
    aj_loop_drain_msgs(st);
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
    fds[0] = sb->c.in_fd;
    fds[1] = sb->c.out_fd;
    fds[2] = sb->c.err_fd;
    r = aj_proto_send_with_fds(st->sock, buf, len, fds, 3);
    free(buf);
    stdio_handed_over(sb);
    if (r < 0)
        return aj_err(err, -r, "hand the command to the pooled sandbox");
    return 0;
}

/* ---- the end of a run ------------------------------------------------------------- */

/* After init is reaped: what a degraded run left behind, and its status. */
static void sb_after_init(struct aj_sandbox *sb)
{
    struct supervise_state *st = &sb->st;

    if (!st->degraded)
        return;
    kill_orphans(&sb->prior, st->alert.pid);
    /* The payload is the direct child: its status is init_status. */
    if (!st->have_exit && !st->have_child_err) {
        st->exit_wstatus = st->init_status;
        st->have_exit = true;
    }
}

/* The run's outcome, once everything inside is dead and the output is
 * relayed: 0, or the sandbox side's setup error. */
static int sb_conclude(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;

    res->wall_ms = aj_now_ms() - sb->start;
    if (st->have_child_err && st->limit == AJ_STATUS_OK && !st->interrupted) {
        res->layer_set[0] |= st->layers;
        if (st->decoy_unarmed) /* as aj_loop_fill_result: present, not watched */
            res->layer_set[0] &= ~AJ_LAYER_BIT(AJ_LAYER_DECOYS);
        res->status = AJ_STATUS_SETUP_ERROR;
        res->exit_code = st->child_err.exit_hint ? st->child_err.exit_hint : 125;
        *err = st->child_err;
        snprintf(res->error, sizeof(res->error), "%s", st->child_err.msg);
        return st->child_err.errnum ? -st->child_err.errnum : -EINVAL;
    }
    aj_loop_fill_result(st, res);
    return 0;
}

/* Kill what is left of the sandbox and its helpers, let go of the decoys,
 * and write the end of the events (res NULL: a parked sandbox that never
 * ran a command reports nothing). The alert hook may still run. */
void sb_end(struct aj_sandbox *sb, int r, struct aj_result *res, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;

    if (st->early_end) {
        /* Killed already (on_interp_word); reaped by sb_teardown, off the
         * caller's path: the exit of a large interpreter is not the run's. */
    } else {
        if (st->pid > 0)
            kill_and_reap(st->pid, st->pidfd);
        st->pid = -1;
    }
    if (st->tio_saved) /* the caller's terminal as it was */
        (void)tcsetattr(st->in_dest, TCSADRAIN, &st->saved_tio);
    st->tio_saved = false;
    aj_loop_unwatch(st, st->decoy_sock);
    close_fd(&st->decoy_sock);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
        close_fd(&st->dconn[i].fd);
    aj_loop_close_decoy_files(st);
    if (sb->subreaper_set)
        (void)prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); /* a library caller's process is as it was */
    sb->subreaper_set = false;
    if (sb->degraded_held) {
        pthread_mutex_lock(&degraded_mu);
        degraded_busy = false;
        pthread_mutex_unlock(&degraded_mu);
        sb->degraded_held = false;
    }
    /* The proxy's last events come before the exit event. */
    aj_loop_egress_stop(st);
    if (res) {
        if (r < 0 && res->status == AJ_STATUS_SETUP_ERROR && err)
            result_refused(res, err);
        if (!res->wall_ms)
            res->wall_ms = aj_now_ms() - sb->start;
        if (sb->audit_open) {
            aj_loop_emit_summary(st, true);
            aj_loop_emit_end(st, res);
        }
        aj_egress_fill_result(&sb->eg, res);
    }
}

/* Release everything else; with keep_cg the cgroup directories are handed
 * back (emptied and killed) for the caller to remove later, off the run's
 * path. The caller's untaken pipe ends and the event loop's own fds stay:
 * they belong to the handle (aj_sandbox_free). */
void sb_release(struct aj_sandbox *sb, struct aj_cgroup *keep_cg)
{
    struct supervise_state *st = &sb->st;
    struct aj_child_ctx *c = &sb->c;

    if (sb->audit_open)
        aj_audit_close(&sb->audit);
    sb->audit_open = false;
    if (st->egress)
        aj_loop_unwatch(st, st->egress->ev_fd);
    aj_egress_release(&sb->eg);
    st->egress = NULL;
    aj_loop_unwatch(st, st->notify.fd);
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
    aj_loop_unwatch(st, st->pidfd);
    close_fd(&st->pidfd);
    aj_loop_unwatch(st, st->sock);
    close_fd(&st->sock);
    close_fd(&st->interp_fd);
    aj_loop_close_adopt_fds(st);
    close_fd(&sb->socks[0]);
    close_fd(&sb->socks[1]);
    close_fd(&sb->null_fd);
    close_fd(&sb->stdin_own);
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        aj_loop_unwatch(st, o->rfd);
        close_fd(&o->rfd);
        aj_loop_unwatch(st, o->wfd);
        if (o->owns_dest) {
            aj_loop_unwatch(st, o->dest);
            close_fd(&o->dest);
        }
        o->owns_dest = false;
        if (o->owns_w)
            close_fd(&o->wfd_child);
        if (o->own_wfd)
            close_fd(&o->wfd);
        o->own_wfd = false;
        free(o->buf);
        o->buf = NULL;
    }
    aj_loop_unwatch(st, st->in.rfd);
    close_fd(&st->in.rfd);
    aj_loop_unwatch(st, st->in.wfd);
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
    sb_free_envp(c->envp);
    sb_free_envp(c->argv);
    c->envp = c->argv = NULL;
    aj_req_clear(&sb->req);
}

/* A sandbox that never became a running handle: everything, at once. */
void sb_discard(struct aj_sandbox *sb, int r, struct aj_result *res, struct aj_error *err, struct aj_cgroup *keep_cg)
{
    sb_end(sb, r, res, err);
    aj_loop_check_alert(&sb->st, true); /* none can run yet; bounded anyway */
    sb_release(sb, keep_cg);
    for (int i = 0; i < 3; i++)
        close_fd(&sb->caller_pipe[i]);
    aj_loop_close(&sb->st);
    free(sb);
}

/* ---- what every run starts with ----------------------------------------------------- */

/* The caller's policy validated and hashed (the result names the policy,
 * not the request), then the request taken against it (see request.c):
 * from here on the sandbox enforces sb->req.eff. */
int sb_begin(struct aj_sandbox *sb, const struct aj_policy *pol, const struct aj_request *req, struct aj_result *res,
             struct aj_error *err)
{
    int r;

    r = aj_policy_validate(pol, err);
    if (r < 0)
        return r;
    r = aj_policy_sha256(pol, res->policy_sha256, err);
    if (r < 0)
        return r;
    if (req)
        r = aj_req_take(pol, req, &sb->req, err);
    else
        aj_req_plain(pol, NULL, &sb->req);
    if (r < 0)
        return r;
    sb_use_policy(sb, &sb->req.eff);
    return 0;
}

int sb_open_audit(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err)
{
    int r = aj_audit_open(&sb->audit, sb->c.pol, sb->req.events_path, res->sandbox_id, res->policy_sha256, err);
    if (r == 0) {
        sb->audit_open = true;
        aj_audit_set_budget(&sb->audit, sb->c.pol->event_budget);
    }
    return r;
}

/* The command line the start event names: a copy (the caller's argv need
 * only last through the call that starts the run). */
int sb_keep_argv(struct aj_sandbox *sb, struct aj_error *err)
{
    if (!sb->c.argv) {
        sb->c.argv = copy_argv(sb->req.argv);
        if (!sb->c.argv)
            return aj_err(err, ENOMEM, "copy argv");
    }
    sb->st.argv = sb->c.argv;
    return 0;
}

/* Supervision starts: what the supervisor applied (for the start event),
 * the deadline, the event loop armed. */
void sb_go(struct aj_sandbox *sb)
{
    sb->st.base_layers = sb->res.layer_set[0];
    sb->st.unsafe_skipped = sb->res.unsafe_skipped;
    aj_loop_begin(&sb->st, sb->start);
    aj_loop_arm(&sb->st);
}

void result_reset(struct aj_result *res)
{
    memset(res, 0, sizeof(*res));
    res->status = AJ_STATUS_SETUP_ERROR;
    (void)aj_random_hex(res->sandbox_id, 32);
}

void result_refused(struct aj_result *res, const struct aj_error *err)
{
    res->status = AJ_STATUS_SETUP_ERROR;
    snprintf(res->error, sizeof(res->error), "%s", err->msg);
    if (res->exit_code == 0) /* 2: refused input (a bind, an output path), nothing started */
        res->exit_code = err->exit_hint ? err->exit_hint : 125;
}

/* ---- signals: none taken from the embedder ------------------------------------------- */

/* While the library works in the caller's thread (starting a run, a
 * round of its loop, freeing it), SIGPIPE, SIGTTOU and SIGTTIN are blocked
 * in that thread alone, and restored before returning: a write to a pipe
 * whose reader is gone gives EPIPE, not a SIGPIPE that would end the
 * embedder's process (a write's SIGPIPE goes to the writing thread, which
 * blocks it; the one we caused is taken back); a write to, or the pty's
 * read of, the caller's terminal from a background job is not stopped.
 * Dispositions, other threads' masks and every other signal are the
 * embedder's. */
void sb_guard_enter(struct sig_guard *g)
{
    sigset_t set, pend;

    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigaddset(&set, SIGTTOU);
    sigaddset(&set, SIGTTIN);
    g->pipe_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1;
    (void)pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

void sb_guard_leave(struct sig_guard *g)
{
    if (!g->pipe_pending) {
        sigset_t one, pend;
        struct timespec zero = {0, 0};
        sigemptyset(&one);
        sigaddset(&one, SIGPIPE);
        /* Thread- and process-directed: at most one of each. */
        for (int i = 0; i < 2 && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1 &&
                        sigtimedwait(&one, NULL, &zero) == SIGPIPE;
             i++)
            ;
    }
    (void)pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- the handle ---------------------------------------------------------------------- */

void sb_release_run(struct aj_sandbox *sb)
{
    if (sb->pool) {
        struct aj_cgroup spent;
        aj_cgroup_init(&spent);
        sb_release(sb, &spent);
        aj_pool_run_ended(sb->pool, &spent, sb->run_finished);
        sb->pool = NULL;
    } else {
        sb_release(sb, NULL);
    }
}

void sb_teardown(struct aj_sandbox *sb)
{
    struct supervise_state *st = &sb->st;

    if (!sb->teardown)
        return;
    /* SIGKILLed with its cgroup when the end word came: this waits for
     * the kernel to finish the exits (the pid namespace's end included),
     * never for anything the sandbox could still do. */
    kill_and_reap(st->pid, st->pidfd);
    st->pid = -1;
    sb_release_run(sb);
    sb->teardown = false;
}

/* A run that could not be set up is a handle that has ended already:
 * its result (setup_error) and error are there, nothing else of it is. */
void sb_fail_at_start(struct aj_sandbox *sb, int r, const struct aj_error *err)
{
    sb->rc = r;
    sb->run_err = *err;
    sb_end(sb, r, &sb->res, &sb->run_err);
    aj_loop_check_alert(&sb->st, true); /* none can have started; bounded anyway */
    sb->st.phase = AJ_LOOP_DONE;
    aj_loop_arm(&sb->st);
    sb_release_run(sb);
    sb->ended = true;
}

/* A cold run up to GO, in the caller's thread: a running handle, or one
 * that has ended (sb_fail_at_start). A negative errno only when there is
 * no handle to return. */
int sb_start_cold(const struct aj_policy *pol, const struct aj_request *req, bool pipes_ok, struct aj_sandbox **ret,
                  struct aj_error *err)
{
    struct aj_sandbox *sb;
    int r;

    *ret = NULL;
    /* A policy that names an interpreter, and its command line: the same
     * bootstrap as a warm run, started cold (interp.c). */
    if (aj_interp_wants(pol, req)) {
        r = aj_interp_start_cold(pol, req, pipes_ok, ret, err);
        if (r <= 0)
            return r;
    }
    sb = malloc(sizeof(*sb));
    if (!sb)
        return aj_err(err, ENOMEM, "sandbox");
    sb_init(sb, pol);
    sb->start = aj_now_ms();
    result_reset(&sb->res);
    r = aj_loop_open(&sb->st, err);
    if (r < 0) {
        aj_loop_close(&sb->st);
        free(sb);
        return r;
    }
    r = sb_begin(sb, pol, req, &sb->res, err);
    for (int i = 0; r == 0 && !pipes_ok && i < 3; i++)
        if (sb->req.stdio[i].kind == AJ_STDIO_PIPE) {
            r = aj_err(err, EINVAL, "request: a pipe needs aj_sandbox_start or aj_pool_start (nobody could read "
                       "it while this call blocks)");
            err->exit_hint = 2;
        }
    if (r == 0)
        r = sb_keep_argv(sb, err);
    if (r == 0)
        r = sb_open_audit(sb, &sb->res, err);
    if (r == 0)
        r = sb_prepare(sb, false, &sb->res, err);
    if (r < 0)
        sb_fail_at_start(sb, r, err);
    else
        sb_go(sb);
    *ret = sb;
    return 0;
}

int aj_sandbox_start(const struct aj_policy *pol, const struct aj_request *req, struct aj_sandbox **ret,
                     struct aj_error *err)
{
    struct sig_guard g;
    int r;

    if (!ret)
        return aj_err(err, EINVAL, "aj_sandbox_start: no handle to return");
    sb_guard_enter(&g);
    r = sb_start_cold(pol, req, true, ret, err);
    sb_guard_leave(&g);
    return r;
}

int aj_sandbox_fd(const struct aj_sandbox *sb)
{
    return sb ? sb->st.epfd : -EINVAL;
}

const char *aj_sandbox_id(const struct aj_sandbox *sb)
{
    return sb ? sb->res.sandbox_id : NULL;
}

int aj_sandbox_process(struct aj_sandbox *sb)
{
    struct supervise_state *st;
    struct sig_guard g;
    enum aj_loop_phase ph;

    if (!sb)
        return -EINVAL;
    if (sb->ended)
        return 1;
    st = &sb->st;
    sb_guard_enter(&g);
    ph = aj_loop_round(st);
    if (ph == AJ_LOOP_INIT_GONE) {
        sb_after_init(sb);
        aj_loop_drain_begin(st);
        ph = st->phase;
    }
    if (ph == AJ_LOOP_DRAINED) {
        sb->rc = sb_conclude(sb, &sb->res, &sb->run_err);
        sb_end(sb, sb->rc, &sb->res, &sb->run_err);
        aj_loop_alert_begin(st);
    }
    /* Done: the epoll set is emptied (and its fd reads ready for good)
     * before the fds it watched are closed. */
    aj_loop_arm(st);
    if (st->phase == AJ_LOOP_DONE) {
        if (st->early_end && st->pid > 0) {
            /* The result is final and the events written; the rest goes
             * when the handle lets go (sb_teardown). */
            if (sb->audit_open)
                aj_audit_close(&sb->audit);
            sb->audit_open = false;
            sb->teardown = true;
            if (sb->pool) {
                aj_pool_run_finished(sb->pool);
                sb->run_finished = true;
            }
        } else {
            sb_release_run(sb);
        }
        sb->ended = true;
    }
    sb_guard_leave(&g);
    return sb->ended ? 1 : 0;
}

int aj_sandbox_wait(struct aj_sandbox *sb, struct aj_error *err)
{
    if (!sb)
        return aj_err(err, EINVAL, "aj_sandbox_wait: no handle");
    while (!sb->ended) {
        struct pollfd p = {.fd = sb->st.epfd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return aj_err(err, errno, "poll");
        (void)aj_sandbox_process(sb);
    }
    if (sb->rc < 0 && err)
        *err = sb->run_err;
    return sb->rc;
}

int aj_sandbox_kill(struct aj_sandbox *sb, int sig)
{
    if (!sb || sig <= 0 || sig >= NSIG)
        return -EINVAL;
    if (sb->ended)
        return -ESRCH;
    aj_loop_interrupt(&sb->st, sig);
    return 0;
}

const struct aj_result *aj_sandbox_result(const struct aj_sandbox *sb)
{
    return sb && sb->ended ? &sb->res : NULL;
}

int aj_sandbox_take_pipe(struct aj_sandbox *sb, int stream)
{
    int fd;

    if (!sb || stream < 0 || stream > 2)
        return -EINVAL;
    fd = sb->caller_pipe[stream];
    sb->caller_pipe[stream] = -1;
    return fd >= 0 ? fd : -ENOENT;
}

void aj_sandbox_free(struct aj_sandbox *sb)
{
    struct sig_guard g;

    if (!sb)
        return;
    sb_guard_enter(&g);
    if (!sb->ended) {
        /* Killed, its output dropped rather than waited for; then the same
         * end as any run (events, alert hook, everything released). */
        aj_loop_interrupt(&sb->st, SIGKILL);
        aj_loop_discard_output(&sb->st);
        while (!sb->ended) {
            struct pollfd p = {.fd = sb->st.epfd, .events = POLLIN};
            (void)poll(&p, 1, 100);
            (void)aj_sandbox_process(sb);
        }
    }
    sb_teardown(sb);
    for (int i = 0; i < 3; i++)
        close_fd(&sb->caller_pipe[i]);
    aj_loop_close(&sb->st);
    free(sb);
    sb_guard_leave(&g);
}

/* A cold run, start to end, in the caller's thread. */
int aj_run_ex(const struct aj_policy *pol, const struct aj_request *req, struct aj_result *res, struct aj_error *err)
{
    struct aj_sandbox *sb;
    int r;

    r = sb_start_cold(pol, req, false, &sb, err);
    if (r < 0 || !sb) {
        result_reset(res);
        result_refused(res, err);
        return r < 0 ? r : -EINVAL;
    }
    r = aj_sandbox_wait(sb, err);
    *res = sb->res;
    aj_sandbox_free(sb);
    return r;
}

int aj_run(const struct aj_policy *pol, char *const argv[], struct aj_result *res, struct aj_error *err)
{
    struct aj_request req = AJ_REQUEST_INIT;

    req.argv = argv;
    return aj_run_ex(pol, &req, res, err);
}
