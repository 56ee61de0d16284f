/* SPDX-License-Identifier: Apache-2.0 */
/* Warm interpreters (docs/interpreters.md): a pool made from a policy that
 * names an interpreter (interpreter.language) parks sandboxes whose payload
 * has exec'd a Python bootstrap (interp_boot.py) and imported the policy's
 * preload, inside the sandbox, every layer applied, its seccomp listener
 * already ours. A run whose argv is the interpreter's form
 *
 *     python3 -c CODE [ARGS...]        python3 SCRIPT [ARGS...]
 *
 * sends the bootstrap its argv, environment, working directory and the
 * three stdio fds (SCM_RIGHTS, over a stream socketpair the payload made:
 * child_interp_channel); the bootstrap closes the channel, takes all of it
 * and runs the code as __main__ with `python3 -c` / script semantics. The
 * sandbox is then torn down like any pooled one: single use.
 *
 * What a parked interpreter holds before a request: the policy's
 * environment without env_pass (whose values are read when a run starts),
 * /dev/null as 0-2, no fd of the caller's. A request whose environment
 * changes what the interpreter read at startup (PATH, HOME, LANG, LC_*,
 * PYTHON*) runs cold instead, as does one that sets what a parked sandbox
 * has fixed (working directory, memory, CPU time). A cold interpreter run
 * (agentjail run --interpreter, aj_sandbox_start, an empty pool) is the
 * same sandbox prepared and launched at once, with the request's whole
 * environment from the start: the same bootstrap, so the same semantics.
 *
 * While it imports, a parked interpreter is under its limits (cgroup,
 * rlimits) and its monitor: a system call that reaches the seccomp
 * listener is refused (EPERM) and the sandbox is discarded with an error
 * naming the call; nothing the preload does is ever allowed by it. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "aj_util.h"
#include "protocol.h"
#include "sandbox.h"
#include "tmpl.h"

extern const char aj_interp_boot_py[];

/* A request to an interpreter is at most this large (code, arguments and
 * environment), as `python3 -c` is bounded by the kernel's argument size. */
#define INTERP_MAX_REQUEST (16u << 20)
/* How long a parked interpreter may take to import its preload. */
#define INTERP_PARK_MAX_MS 120000

static bool is_python(const char *a)
{
    return strcmp(a, "python3") == 0 || strcmp(a, "/usr/bin/python3") == 0;
}

/* python3 -c CODE [ARGS], python3 SCRIPT [ARGS]: nothing else (an option
 * before them, -m, or stdin as the program runs plain). */
static bool interp_argv_form(char *const *argv)
{
    if (!argv || !argv[0] || !is_python(argv[0]) || !argv[1])
        return false;
    if (strcmp(argv[1], "-c") == 0)
        return argv[2] != NULL;
    return argv[1][0] != '-' && argv[1][0] != '\0';
}

bool aj_interp_wants(const struct aj_policy *pol, const struct aj_request *req)
{
    if (!pol || pol->interp_lang == AJ_INTERP_NONE || !req)
        return false;
    if (req->size < offsetof(struct aj_request, argv) + sizeof(req->argv))
        return false; /* refused by aj_req_take, with its message */
    return interp_argv_form(req->argv);
}

/* The bootstrap's command line: python3 -c BOOTSTRAP [-t] MODULE...
 * [-wWARMUP] (a module name never starts with '-'); -t: a template
 * (tmpl.c). */
char **aj_interp_boot_argv(const struct aj_policy *pol, bool template)
{
    size_t t = template ? 1 : 0, n = 3 + t + pol->n_preload + (pol->interp_warmup != NULL);
    char **v = calloc(n + 1, sizeof(char *));
    bool ok = v != NULL;

    if (!v)
        return NULL;
    v[0] = strdup("python3");
    v[1] = strdup("-c");
    v[2] = strdup(aj_interp_boot_py);
    if (template)
        v[3] = strdup("-t");
    for (size_t i = 0; i < pol->n_preload; i++)
        v[3 + t + i] = strdup(pol->preload[i]);
    if (pol->interp_warmup && asprintf(&v[3 + t + pol->n_preload], "-w%s", pol->interp_warmup) < 0)
        v[3 + t + pol->n_preload] = NULL;
    for (size_t i = 0; i < n; i++)
        ok &= v[i] != NULL;
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return NULL;
    }
    return v;
}

/* Common to parked and cold: the bootstrap as the command, fds 0-2
 * /dev/null until the request, the start event deferred to the run. */
static int interp_setup(struct aj_sandbox *sb, struct aj_error *err)
{
    sb->c.interp = true;
    sb->st.defer_start = true;
    sb_free_envp(sb->c.argv);
    sb->c.argv = aj_interp_boot_argv(sb->c.pol, false);
    if (!sb->c.argv)
        return aj_err(err, ENOMEM, "interpreter command line");
    return 0;
}

int aj_interp_setup_parked(struct aj_sandbox *sb, struct aj_error *err)
{
    /* Nothing of a request before it comes: env_pass values are the
     * caller's at the moment a run starts (and a request's own variables
     * come with it), so the interpreter starts without them. */
    sb->req.eff.n_env_pass = 0;
    return interp_setup(sb, err);
}

/* The names whose value the interpreter read as it started: a run that
 * wants other values than the parked one had runs cold. */
static bool startup_name(const char *kv)
{
    static const char *const names[] = {"PATH=", "HOME=", "LANG=", "LANGUAGE=", "LC_", "PYTHON"};
    for (size_t i = 0; i < AJ_ARRAY_SIZE(names); i++)
        if (strncmp(kv, names[i], strlen(names[i])) == 0)
            return true;
    return false;
}

/* Every startup variable of a in b with the same value. */
static bool startup_subset(char **a, char **b)
{
    for (size_t i = 0; a[i]; i++) {
        bool found = false;
        if (!startup_name(a[i]))
            continue;
        for (size_t j = 0; b[j] && !found; j++)
            found = strcmp(a[i], b[j]) == 0;
        if (!found)
            return false;
    }
    return true;
}

/* Whether a run under eff starts its interpreter as a parked one did
 * (parked: the policy pol without env_pass). */
static int startup_env_matches(const struct aj_policy *pol, const struct aj_policy *eff, bool *ret,
                               struct aj_error *err)
{
    struct aj_policy parked = *pol;
    char *const none[2] = {NULL, NULL};
    const char *path;
    char **a, **b;

    parked.n_env_pass = 0;
    a = sb_build_envp(&parked, none, &path, err);
    b = a ? sb_build_envp(eff, none, &path, err) : NULL;
    if (!a || !b) {
        sb_free_envp(a);
        return -ENOMEM;
    }
    *ret = startup_subset(a, b) && startup_subset(b, a);
    sb_free_envp(a);
    sb_free_envp(b);
    return 0;
}

/* A monitored call while the preload imports: refused, and the sandbox
 * is not parked (no run to report it to; the pool's creator hears it). */
static int refuse_preload_call(struct aj_sandbox *sb, struct aj_error *err)
{
    int nr = -1, r;
    uint32_t arch = 0;
    char *name;

    r = aj_notify_receive_bare(&sb->st.notify, &nr, &arch);
    if (r < 0)
        return aj_err(err, -r, "the parked interpreter's monitor");
    if (r == 0)
        return 0; /* the caller died meanwhile */
    aj_notify_answer(&sb->st.notify);
    name = aj_notify_syscall_name(nr, arch);
    r = aj_err(err, EPERM,
               "interpreter.preload: importing the preload (or running the warm-up) made a monitored system "
               "call (%s), refused; neither may need one",
               name ? name : "unknown");
    free(name);
    return r;
}

/* The bootstrap's word on its channel: 'P' parked, 'E' + why. */
static int read_park_status(int fd, struct aj_error *err)
{
    char buf[4097];
    ssize_t n;

    do
        n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return 0;
    if (n == 1 && buf[0] == 'P')
        return 1;
    if (n > 1 && buf[0] == 'E') {
        buf[n] = '\0'; /* "interpreter.preload: ..." or "interpreter.warmup: ..." */
        return aj_err(err, ENOENT, "%s", buf + 1);
    }
    return aj_err(err, EPIPE, "the interpreter exited before it was ready");
}

int aj_interp_wait_parked(struct aj_sandbox *sb, const bool *cancel, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    uint64_t bound = INTERP_PARK_MAX_MS, deadline;

    if (st->pol->timeout_ms && st->pol->timeout_ms < bound)
        bound = st->pol->timeout_ms;
    deadline = aj_now_ms() + bound;
    for (;;) {
        struct pollfd p[4] = {{.fd = st->sock, .events = POLLIN},
                              {.fd = st->notify.fd, .events = POLLIN},
                              {.fd = st->interp_fd, .events = POLLIN},
                              {.fd = st->pidfd, .events = POLLIN}};
        uint64_t now = aj_now_ms();
        int r;

        if (st->have_child_err) {
            *err = st->child_err;
            return -(err->errnum ? err->errnum : EPIPE);
        }
        if (now >= deadline)
            return aj_err(err, ETIMEDOUT, "the interpreter did not import its preload within %llu ms",
                          (unsigned long long)bound);
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return aj_err(err, ECANCELED, "the pool is being freed");
        /* A look at *cancel every 50 ms: aj_pool_free does not wait for a whole import. */
        r = poll(p, 4, (int)(deadline - now < 50 || !cancel ? deadline - now : 50));
        if (r < 0 && errno != EINTR)
            return aj_err(err, errno, "poll a parked interpreter");
        if (r <= 0)
            continue;
        if (p[0].revents) {
            aj_loop_drain_msgs(st);
            continue; /* its error first, if it sent one */
        }
        if (p[1].revents & POLLIN) {
            r = refuse_preload_call(sb, err);
            if (r < 0)
                return r;
        }
        if (p[2].revents) {
            r = read_park_status(st->interp_fd, err);
            if (r != 0)
                return r < 0 ? r : 0;
        }
        if (p[3].revents) {
            aj_loop_drain_msgs(st);
            if (!st->have_child_err)
                return aj_err(err, EPIPE, "the interpreter's sandbox ended before it was ready");
        }
    }
}

/* init hands its namespaces over once the sandbox is complete (after the
 * decoys are leased): bounded, as aj_pool_arm_decoys is. */
static bool adopted(const struct supervise_state *st)
{
    return st->n_adopt_fds > 0;
}

static int wait_adopt(struct aj_sandbox *sb, struct aj_error *err)
{
    return aj_sb_drain_until(sb, adopted, "a template's sandbox did not hand over its namespaces",
                             "a template's sandbox ended before it was complete", err);
}

int aj_interp_prepare_adopted(const struct aj_policy *pol, struct aj_zygote *zyg, struct aj_sandbox **ret,
                              struct aj_error *err)
{
    struct aj_sandbox *sb = malloc(sizeof(*sb));
    int r;

    *ret = NULL;
    if (!sb)
        return aj_err(err, ENOMEM, "sandbox");
    sb_init(sb, pol);
    sb->zyg = zyg;
    result_reset(&sb->prepared);
    r = sb_begin(sb, pol, NULL, &sb->prepared, err);
    if (r == 0)
        r = aj_interp_setup_parked(sb, err);
    sb->c.adopt = sb->st.adopt = true;
    if (r == 0)
        r = sb_prepare(sb, false, &sb->prepared, err);
    /* The run's CPU time and memory come from its cgroup, which the
     * template's child joins: a sandbox without one of its own cannot
     * have a template's child. */
    if (r == 0 && !sb->cg.created)
        r = aj_err(err, EOPNOTSUPP, "the sandbox has no cgroup of its own (a template's child must join one)");
    if (r == 0 && sb->c.decoys.n > 0)
        r = aj_pool_arm_decoys(sb, err);
    if (r == 0)
        r = wait_adopt(sb, err);
    if (r < 0) {
        sb_discard(sb, 0, NULL, NULL, NULL);
        return r;
    }
    *ret = sb;
    return 0;
}

int aj_interp_send(struct aj_sandbox *sb, const int fds[3], struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    char *const *argv = sb->req.argv;
    char *const *envp = sb->c.envp;
    const char *cwd = sb->req.eff.workdir ? sb->req.eff.workdir : AJ_DEFAULT_WORKDIR;
    size_t argc = 0, envc = 0, len = 0, off;
    char *buf;
    int r;

    if (st->interp_fd < 0)
        return aj_err(err, EPIPE, "the parked interpreter has no request channel");
    for (; argv[argc]; argc++)
        len += strlen(argv[argc]) + 1;
    for (; envp[envc]; envc++)
        len += strlen(envp[envc]) + 1;
    len += strlen(cwd) + 1 + 2 * 24;
    if (len > INTERP_MAX_REQUEST)
        return aj_err(err, E2BIG, "request: %zu bytes of code, arguments and environment (an interpreter takes "
                      "%u)", len, INTERP_MAX_REQUEST);
    buf = malloc(8 + len);
    if (!buf)
        return aj_err(err, ENOMEM, "interpreter request");
    off = 8;
    off += (size_t)snprintf(buf + off, len, "%s", cwd) + 1;
    off += (size_t)snprintf(buf + off, 24, "%zu", argc) + 1;
    for (size_t i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]) + 1;
        memcpy(buf + off, argv[i], n);
        off += n;
    }
    off += (size_t)snprintf(buf + off, 24, "%zu", envc) + 1;
    for (size_t i = 0; i < envc; i++) {
        size_t n = strlen(envp[i]) + 1;
        memcpy(buf + off, envp[i], n);
        off += n;
    }
    memcpy(buf, "AJR1", 4);
    for (int i = 0; i < 4; i++)
        buf[4 + i] = (char)(((off - 8) >> (8 * i)) & 0xff);
    /* The header carries the fds; the rest follows on the stream (the
     * bootstrap reads it at once: a large request never waits long). */
    r = aj_proto_send_with_fds(st->interp_fd, buf, 8, fds, 3);
    for (size_t done = 8; r == 0 && done < off;) {
        ssize_t n = send(st->interp_fd, buf + done, off - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            r = -errno;
        else
            done += (size_t)n;
    }
    free(buf);
    if (r < 0) {
        (void)close(st->interp_fd);
        st->interp_fd = -1;
        return aj_err(err, -r, "hand the request to the parked interpreter");
    }
    /* Nothing more to say, ever: the sending side is shut (the code reads
     * EOF there). Our end stays for the bootstrap's end word (loop.c,
     * on_interp_word), which the loop watches from now on. */
    if (shutdown(st->interp_fd, SHUT_WR) < 0) {
        (void)close(st->interp_fd);
        st->interp_fd = -1;
    }
    return 0;
}

/* The run's argv in place of the bootstrap's (the start event names the
 * request's command), then the request down the channel. */
static int interp_launch(struct aj_sandbox *sb, struct aj_error *err)
{
    int r;

    sb_free_envp(sb->c.argv);
    sb->c.argv = NULL;
    sb->st.argv = NULL;
    r = sb_keep_argv(sb, err);
    if (r < 0)
        return r;
    return sb_launch(sb, &sb->res, err);
}

/* The run is the caller's from here: the loop armed, the start event. */
static void interp_go(struct aj_sandbox *sb)
{
    sb_go(sb);
    aj_loop_mark_started(&sb->st);
}

int aj_interp_start_cold(const struct aj_policy *pol, const struct aj_request *req, bool pipes_ok,
                         struct aj_sandbox **ret, struct aj_error *err)
{
    struct aj_sandbox *sb;
    int r;

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
        r = sb_open_audit(sb, &sb->res, err);
    if (r == 0)
        r = interp_setup(sb, err);
    if (r == 0)
        r = sb_prepare(sb, false, &sb->res, err);
    if (r == 0 && sb->c.decoys.n > 0)
        r = aj_pool_arm_decoys(sb, err);
    if (r == 0)
        r = aj_interp_wait_parked(sb, NULL, err);
    if (r == 0)
        r = interp_launch(sb, err);
    if (r < 0) {
        sb_fail_at_start(sb, r, err);
    } else {
        interp_go(sb);
    }
    *ret = sb;
    return 0;
}

int aj_interp_pool_start(struct aj_pool *pool, struct aj_req *rq, const struct aj_request *req, bool pipes_ok,
                         struct aj_sandbox **ret, struct aj_error *err)
{
    const struct aj_policy *pol = aj_pool_policy(pool);
    struct aj_sandbox *sb;
    struct aj_cgroup spent;
    bool same = false, retry;
    int r;

    *ret = NULL;
    if (interp_argv_form(rq->argv) && !rq->fixed_in_parked) {
        r = startup_env_matches(pol, &rq->eff, &same, err);
        if (r < 0) {
            aj_req_clear(rq);
            return r;
        }
    }
    for (int i = 0; same && !pipes_ok && i < 3; i++)
        same = rq->stdio[i].kind != AJ_STDIO_PIPE; /* the cold start says why */
    sb = same ? aj_pool_take_wait(pool) : NULL;
    if (!sb) {
        /* Not the interpreter's form (a plain cold run), or it needs what a
         * parked one cannot give, or none is ready: cold, same semantics. */
        aj_req_clear(rq);
        if (!same)
            aj_pool_count_cold(pool);
        return sb_start_cold(pol, req, pipes_ok, ret, err);
    }
    sb->res = sb->prepared;
    sb->start = aj_now_ms();
    aj_req_clear(&sb->req);
    sb->req = *rq;
    memset(rq, 0, sizeof(*rq));
    sb_use_policy(sb, &sb->req.eff);
    r = aj_loop_open(&sb->st, err);
    if (r == 0)
        r = sb_open_audit(sb, &sb->res, err);
    if (r == 0)
        r = interp_launch(sb, err);
    /* The interpreter died while parked (killed from outside, the OOM
     * killer): its channel is closed, nothing of the request ran. The
     * caller gets a cold run instead, as from an empty pool. */
    retry = r == -EPIPE || r == -ECONNRESET;
    if (!retry) {
        sb->pool = pool;
        if (r < 0)
            sb_fail_at_start(sb, r, err);
        else
            interp_go(sb);
        *ret = sb;
        return 0;
    }
    aj_cgroup_init(&spent);
    sb_discard(sb, r, NULL, NULL, &spent);
    aj_pool_warm_failed(pool, &spent);
    *err = (struct aj_error){0};
    return sb_start_cold(pol, req, pipes_ok, ret, err);
}
