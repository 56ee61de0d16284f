/* SPDX-License-Identifier: Apache-2.0 */
/* The runner: runner_threads threads ("lanes", config.c), each starting
 * the runs handed to it and owning their handles, with its own epoll loop
 * over the handles' fds, their output pipes and an eventfd through which
 * HTTP threads hand it runs and kill requests. A run stays on its lane
 * because the library wants a handle used by one thread at a time and the
 * thread that starts a run to outlive it (the sandbox's parent-death
 * signal follows the thread that cloned it); a lane lives until each of
 * its runs has ended. More than one lane so that concurrent clients' runs
 * start, and end, in parallel: a cold start (an empty pool) takes
 * milliseconds of one thread, during which a single lane handled nothing
 * else. Lane 0 also makes and frees the warm pools (aj_pool_start may be
 * called from any thread). Shared state (the live list, the metrics, the
 * tenants' counts) is under rn->lock. The server never forks on its own. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "srv.h"

struct srv_runner {
    const struct srv_config *cfg;
    const struct aj_policy *pol;
    struct srv_store *store;
    char *events_dir;
    char policy_sha256[65];

    pthread_mutex_t lock;
    pthread_cond_t done;
    struct srv_run *live;               /* queued and running, every lane's */
    unsigned active;
    bool stopping;
    bool pools_made; /* the runner made (and so filled) every warm pool it could */
    struct srv_metrics m;

    /* Per tenant (cfg->tenants' order), NULL: cold; the runner thread's:
     * made and freed there. */
    struct tenant_pool {
        struct aj_pool *pool;
        struct aj_pool *interp; /* its warm interpreters (tenant pol_interp), NULL: none */
    } *pools;
    int64_t pruned_ms;         /* when old records were last removed (retention_days); under lock */
    unsigned keepalive_s;      /* srv_runner_next_output's wait with nothing to say */
    struct lane {
        struct srv_runner *rn;
        unsigned idx;
        struct srv_run *qhead, *qtail; /* to start (under lock) */
        unsigned n_live;               /* its runs, queued and running (under lock) */
        struct srv_run *graveyard;     /* finished in this batch, the lane's reference still held */
        int efd, ep;
        pthread_t thread;
        bool thread_started;
    } *lanes;
    unsigned n_lanes;
};

const char *const srv_status_names[16] = {
    "ok", "nonzero_exit", "signaled", "timeout", "setup_error", "cpu_limit", "memory_limit",
    "pids_limit", "output_limit", "escape_attempt", "cancelled", "lost", "workspace_full",
};

const unsigned srv_latency_bounds_ms[SRV_LATENCY_BUCKETS] = {10,   25,   50,    100,   250,   500,
                                                             1000, 2500, 5000, 10000, 30000, 60000};

int srv_status_index(const char *name)
{
    for (int i = 0; i < 16; i++)
        if (srv_status_names[i] && strcmp(srv_status_names[i], name) == 0)
            return i;
    return -1;
}

int64_t srv_now_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- records --------------------------------------------------------------------- */

/* Output as JSON text: JSON strings must be UTF-8, the payload's bytes
 * need not be. Each byte that does not start a valid sequence becomes
 * U+FFFD (the byte counts in the record are the payload's own). */
json_t *srv_text_json(const char *p, size_t n)
{
    char *o = malloc(n * 3 + 1);
    size_t k = 0;
    json_t *j;

    if (!o)
        return NULL;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1fu : len == 3 ? c & 0x0fu : c & 0x07u;
        for (size_t j2 = 1; ok && j2 < len; j2++) {
            unsigned char cc = (unsigned char)p[i + j2];
            ok = (cc & 0xc0) == 0x80;
            cp = cp << 6 | (cc & 0x3fu);
        }
        /* No overlong forms, no surrogates, nothing past U+10FFFF. */
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff))
            ok = false;
        if (ok) {
            memcpy(o + k, p + i, len);
            k += len;
            i += len;
        } else {
            o[k++] = (char)0xef; /* U+FFFD in UTF-8 */
            o[k++] = (char)0xbf;
            o[k++] = (char)0xbd;
            i++;
        }
    }
    j = json_stringn(o, k);
    free(o);
    return j;
}

static int set_new(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

char *srv_record_json(const struct srv_run *r, const char *state_name)
{
    json_t *o = json_object(), *argv = json_array();
    int bad = 0;
    char *s = NULL;

    if (!o || !argv) {
        json_decref(o);
        json_decref(argv);
        return NULL;
    }
    for (size_t i = 0; r->argv && r->argv[i]; i++)
        bad |= json_array_append_new(argv, json_string(r->argv[i]));
    bad |= set_new(o, "id", json_string(r->id));
    bad |= set_new(o, "status", json_string(state_name ? state_name : r->status));
    bad |= set_new(o, "created_ms", json_integer(r->created_ms));
    bad |= json_object_set_new(o, "argv", argv);
    if (r->session_id[0])
        bad |= set_new(o, "session", json_string(r->session_id));
    if (!state_name) {
        bad |= set_new(o, "ended_ms", json_integer(r->ended_ms));
        bad |= set_new(o, "exit_code", json_integer(r->exit_code));
        if (r->policy_sha256[0])
            bad |= set_new(o, "policy_sha256", json_string(r->policy_sha256));
        if (r->error[0])
            bad |= set_new(o, "error", json_string(r->error));
        if (r->outputs_json)
            bad |= json_object_set_new(o, "outputs", json_incref(r->outputs_json));
        if (r->result_json) {
            json_t *res = json_loads(r->result_json, 0, NULL);
            bad |= set_new(o, "result", res);
        } else {
            bad |= json_object_set_new(o, "result", json_null());
        }
        bad |= set_new(o, "stdout", srv_text_json(r->out.data ? r->out.data : "", r->out.len));
        bad |= set_new(o, "stderr", srv_text_json(r->err.data ? r->err.data : "", r->err.len));
        bad |= set_new(o, "stdout_bytes", json_integer((json_int_t)r->out.total));
        bad |= set_new(o, "stderr_bytes", json_integer((json_int_t)r->err.total));
        bad |= json_object_set_new(o, "events", r->events ? json_incref(r->events) : json_array());
        bad |= json_object_set_new(o, "events_truncated", json_boolean(r->events_truncated));
        bad |= json_object_set_new(o, "stdout_truncated", json_boolean(r->out.truncated));
        bad |= json_object_set_new(o, "stderr_truncated", json_boolean(r->err.truncated));
    }
    if (!bad)
        s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ---- the runner thread -------------------------------------------------------------- */

static void wake(struct lane *ln)
{
    uint64_t one = 1;
    /* EAGAIN only when the counter is full, and then the lane is woken
     * already. */
    while (write(ln->efd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

static void free_run(struct srv_run *r)
{
    for (size_t i = 0; r->argv && r->argv[i]; i++)
        free(r->argv[i]);
    free(r->argv);
    for (size_t i = 0; r->envp && r->envp[i]; i++)
        free(r->envp[i]);
    free(r->envp);
    free(r->stdin_data);
    free(r->out.data);
    free(r->err.data);
    free(r->result_json);
    free(r->events_path);
    json_decref(r->events);
    srv_session_run_free(r);
    free(r);
}

void srv_run_unref(struct srv_runner *rn, struct srv_run *r)
{
    bool last;

    if (!r)
        return;
    (void)pthread_mutex_lock(&rn->lock);
    last = --r->refs == 0;
    (void)pthread_mutex_unlock(&rn->lock);
    if (last)
        free_run(r);
}

static void close_watch(struct lane *ln, int *fd)
{
    if (*fd < 0)
        return;
    (void)epoll_ctl(ln->ep, EPOLL_CTL_DEL, *fd, NULL);
    (void)close(*fd);
    *fd = -1;
}

/* What the run's events file has now, line by line: every event but
 * start and exit (the record has those) joins r->events. Regular files
 * cannot be polled: this is called after each aj_sandbox_process, which
 * is where the library writes them. */
static void read_events(struct srv_runner *rn, struct srv_run *r)
{
    if (r->ev_fd < 0)
        return;
    for (;;) {
        ssize_t n = read(r->ev_fd, r->ev_line + r->ev_len, sizeof(r->ev_line) - r->ev_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        r->ev_len += (size_t)n;
        char *nl;
        while ((nl = memchr(r->ev_line, '\n', r->ev_len))) {
            size_t len = (size_t)(nl - r->ev_line);
            json_t *ev = json_loadb(r->ev_line, len, 0, NULL);
            const char *type = json_string_value(json_object_get(ev, "type"));
            if (ev)
                srv_eventlog_write(r->tenant->name, r->id, ev);
            if (ev && type && strcmp(type, "net_denied") == 0) {
                (void)pthread_mutex_lock(&rn->lock);
                rn->m.net_denied++;
                r->tenant->net_denied++;
                (void)pthread_mutex_unlock(&rn->lock);
            }
            if (ev && type && strcmp(type, "start") != 0 && strcmp(type, "exit") != 0) {
                (void)pthread_mutex_lock(&rn->lock);
                if (!r->events)
                    r->events = json_array();
                if (r->events && json_array_size(r->events) < SRV_MAX_EVENTS)
                    (void)json_array_append(r->events, ev);
                else
                    r->events_truncated = true;
                (void)pthread_cond_broadcast(&rn->done);
                (void)pthread_mutex_unlock(&rn->lock);
            }
            json_decref(ev);
            memmove(r->ev_line, nl + 1, r->ev_len - len - 1);
            r->ev_len -= len + 1;
        }
        if (r->ev_len == sizeof(r->ev_line)) /* a line longer than the buffer: dropped */
            r->ev_len = 0;
    }
}

/* Remove records older than retention_days: at start, then at most once
 * an hour as runs end (a server that runs nothing keeps what it has). */
void srv_runner_prune(struct srv_runner *rn, bool now)
{
    int64_t t = srv_now_ms();
    bool due;
    int n;

    if (!rn->cfg->retention_days)
        return;
    (void)pthread_mutex_lock(&rn->lock);
    due = now || t - rn->pruned_ms >= 3600 * 1000;
    if (due)
        rn->pruned_ms = t;
    (void)pthread_mutex_unlock(&rn->lock);
    if (!due)
        return;
    n = srv_store_prune(rn->store, t - (int64_t)rn->cfg->retention_days * 86400 * 1000);
    if (n < 0)
        (void)fprintf(stderr, "agentjail serve: store: could not remove old records\n");
    else if (n > 0)
        (void)fprintf(stderr, "agentjail serve: store: removed %d records older than %u days\n", n,
                      rn->cfg->retention_days);
}

/* The run has ended and its output is read: record it, wake its waiters. */
static void finish(struct lane *ln, struct srv_run *r)
{
    struct srv_runner *rn = ln->rn;
    const struct aj_result *res = r->h ? aj_sandbox_result(r->h) : NULL;
    uint64_t escapes = 0, canaries = 0;
    int idx;

    close_watch(ln, &r->fd_in);
    close_watch(ln, &r->fd_out);
    close_watch(ln, &r->fd_err);
    if (res) {
        (void)snprintf(r->status, sizeof(r->status), "%s", aj_status_name(res->status));
        r->exit_code = res->exit_code;
        (void)snprintf(r->policy_sha256, sizeof(r->policy_sha256), "%s", res->policy_sha256);
        r->result_json = aj_result_to_json(res);
        escapes = aj_result_event_count(res, AJ_EV_ESCAPE_ATTEMPT);
        canaries = aj_result_event_count(res, AJ_EV_CANARY);
        if (res->status == AJ_STATUS_SETUP_ERROR && !r->error[0])
            (void)snprintf(r->error, sizeof(r->error), "%s", res->error);
    } else if (!r->status[0]) {
        (void)snprintf(r->status, sizeof(r->status), "setup_error");
        r->exit_code = -1;
    }
    if (!r->policy_sha256[0])
        (void)snprintf(r->policy_sha256, sizeof(r->policy_sha256), "%s",
                       r->tenant->policy_sha256[0] ? r->tenant->policy_sha256 : rn->policy_sha256);
    /* The run has ended: its events are all written (the file itself is
     * not kept, the record has them). */
    read_events(rn, r);
    if (r->ev_fd >= 0)
        (void)close(r->ev_fd);
    r->ev_fd = -1;
    if (r->events_path)
        (void)unlink(r->events_path);
    /* Its sandbox may still be dying (a warm interpreter ends at its end
     * word: killed, not yet reaped; docs/interpreters.md). A run with a
     * workspace lets it die first: its outputs are read, and the
     * workspace let go, only once nothing of the run can write there. A
     * run without one answers first and is freed right after (below):
     * the handle, its uid and its cgroup stay this thread's until then. */
    struct aj_sandbox *dying = r->h;
    if (r->h) {
        (void)epoll_ctl(ln->ep, EPOLL_CTL_DEL, aj_sandbox_fd(r->h), NULL);
        r->h = NULL;
        if (r->ws) {
            aj_sandbox_free(dying);
            dying = NULL;
        }
    }
    srv_session_run_ended(r);
    r->ended_ms = srv_now_ms();
    if (srv_store_finish(rn->store, r) < 0)
        (void)fprintf(stderr, "agentjail serve: store: could not record the end of run %s\n", r->id);
    srv_runner_prune(rn, false);

    (void)pthread_mutex_lock(&rn->lock);
    for (struct srv_run **p = &rn->live; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    if (r->state == SRV_RUNNING)
        rn->m.running--;
    r->state = SRV_DONE;
    r->tenant->running--;
    r->tenant->finished++;
    r->tenant->escapes += escapes;
    rn->m.escape_attempts += escapes;
    rn->m.canaries += canaries;
    {
        uint64_t ms = r->ended_ms > r->created_ms ? (uint64_t)(r->ended_ms - r->created_ms) : 0;
        for (int b = 0; b < SRV_LATENCY_BUCKETS; b++)
            if (ms <= srv_latency_bounds_ms[b]) {
                rn->m.latency_le[b]++;
                break;
            }
        rn->m.latency_count++;
        rn->m.latency_sum_ms += ms;
    }
    rn->active--;
    ln->n_live--;
    /* Stopping: lane 0 frees the pools once no run of any lane is left. */
    bool last = rn->stopping && !rn->live && ln->idx != 0;
    idx = srv_status_index(r->status);
    if (idx >= 0) {
        rn->m.finished_by_status[idx]++;
        r->tenant->finished_by_status[idx]++;
    }
    (void)pthread_cond_broadcast(&rn->done);
    (void)pthread_mutex_unlock(&rn->lock);
    if (last)
        wake(&rn->lanes[0]);
    aj_sandbox_free(dying);
    /* The lane's reference goes after the current epoll batch: events
     * of this run later in the batch still point at it. */
    r->qnext = ln->graveyard;
    ln->graveyard = r;
}

static void bury(struct lane *ln)
{
    while (ln->graveyard) {
        struct srv_run *r = ln->graveyard;
        ln->graveyard = r->qnext;
        srv_run_unref(ln->rn, r);
    }
}

static void maybe_finish(struct lane *ln, struct srv_run *r)
{
    if (r->ended && r->fd_out < 0 && r->fd_err < 0)
        finish(ln, r);
}

static int watch(struct lane *ln, struct srv_run *r, enum srv_watch_kind kind, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = &r->watch[kind]};

    r->watch[kind] = (struct srv_watch){.run = r, .kind = kind};
    return epoll_ctl(ln->ep, EPOLL_CTL_ADD, fd, &ev);
}

static int take_nonblocking(struct aj_sandbox *h, int stream)
{
    int fd = aj_sandbox_take_pipe(h, stream), fl;

    if (fd < 0)
        return -1;
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        (void)close(fd);
        return -1;
    }
    return fd;
}

static void start(struct lane *ln, struct srv_run *r)
{
    struct srv_runner *rn = ln->rn;
    struct aj_request req = AJ_REQUEST_INIT;
    struct aj_error err = {0};
    bool kill_now;

    req.argv = r->argv;
    req.envp = r->envp;
    req.stdio[0] = r->stdin_len ? AJ_STDIO_PIPE_NEW : (struct aj_stdio){.kind = AJ_STDIO_NULL};
    req.stdio[1] = AJ_STDIO_PIPE_NEW;
    req.stdio[2] = AJ_STDIO_PIPE_NEW;
    req.timeout_ms = r->timeout_ms;
    req.memory_max = r->memory_max;
    req.cpu_time_ms = r->cpu_time_ms;
    req.output_limit = r->output_limit;
    r->ev_fd = -1;
    if (rn->events_dir && asprintf(&r->events_path, "%s/%s.jsonl", rn->events_dir, r->id) < 0)
        r->events_path = NULL; /* out of memory: this run's events are not streamed */
    req.events_path = r->events_path;
    /* The tenant's own pool (or its policy, cold), never another's; a
     * run with a policy of its own (a request's network variant, a
     * workspace's bind) runs cold. */
    req.workdir = r->workdir;
    /* Read under the lock: lane 0 made them (and frees them only once no
     * run of any lane is left). */
    (void)pthread_mutex_lock(&rn->lock);
    struct tenant_pool tp = rn->pools[r->tenant->index];
    (void)pthread_mutex_unlock(&rn->lock);
    struct aj_pool *pool = r->pol ? NULL : tp.pool;
    const struct aj_policy *pol = r->pol ? r->pol : r->tenant->pol ? r->tenant->pol : rn->pol;
    /* python3 to a tenant with warm interpreters: one of them (the library
     * runs it cold, same semantics, when none is parked or the request
     * needs what a parked one cannot give; docs/interpreters.md). */
    struct aj_pool *ipool = r->pol ? NULL : tp.interp;
    if (ipool && r->argv && r->argv[0] &&
        (strcmp(r->argv[0], "python3") == 0 || strcmp(r->argv[0], "/usr/bin/python3") == 0))
        pool = ipool;
    else
        ipool = NULL;
    if ((pool ? aj_pool_start(pool, &req, &r->h, &err) : aj_sandbox_start(pol, &req, &r->h, &err)) < 0) {
        r->h = NULL;
        (void)snprintf(r->error, sizeof(r->error), "%s", err.msg);
        finish(ln, r);
        return;
    }
    (void)pthread_mutex_lock(&rn->lock);
    r->state = SRV_RUNNING;
    rn->m.started++;
    rn->m.running++;
    kill_now = r->kill_requested || rn->stopping;
    (void)pthread_mutex_unlock(&rn->lock);

    if (r->events_path)
        r->ev_fd = open(r->events_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    /* A run that could not be set up has ended already: its pipes may
     * not exist (-1, nothing to read). */
    r->fd_out = take_nonblocking(r->h, 1);
    r->fd_err = take_nonblocking(r->h, 2);
    r->fd_in = r->stdin_len ? take_nonblocking(r->h, 0) : -1;
    if (watch(ln, r, SRV_W_HANDLE, aj_sandbox_fd(r->h), EPOLLIN) < 0 ||
        (r->fd_out >= 0 && watch(ln, r, SRV_W_STDOUT, r->fd_out, EPOLLIN) < 0) ||
        (r->fd_err >= 0 && watch(ln, r, SRV_W_STDERR, r->fd_err, EPOLLIN) < 0) ||
        (r->fd_in >= 0 && watch(ln, r, SRV_W_STDIN, r->fd_in, EPOLLOUT) < 0)) {
        /* Without a watch the run could not advance: end it now. */
        (void)snprintf(r->error, sizeof(r->error), "server: epoll_ctl: %s", strerror(errno));
        (void)aj_sandbox_kill(r->h, SIGKILL);
        (void)aj_sandbox_wait(r->h, &err);
        r->ended = true;
        close_watch(ln, &r->fd_out);
        close_watch(ln, &r->fd_err);
        finish(ln, r);
        return;
    }
    if (kill_now)
        (void)aj_sandbox_kill(r->h, SIGKILL);
}

/* Keep the first max_output_bytes, count the rest. The buffer grows and
 * fills under the lock: stream readers (srv_runner_next_output) copy from
 * it while the run is live. */
static bool drain(struct srv_runner *rn, int fd, struct srv_buf *b)
{
    char tmp[16384];

    for (;;) {
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno != EAGAIN; /* an error ends the stream like EOF */
        if (n == 0)
            return true;
        (void)pthread_mutex_lock(&rn->lock);
        b->total += (uint64_t)n;
        size_t room = rn->cfg->max_output_bytes - b->len, k = (size_t)n < room ? (size_t)n : room;
        if (k < (size_t)n)
            b->truncated = true;
        if (k && b->len + k > b->cap) {
            size_t cap = b->cap ? b->cap * 2 : 4096;
            while (cap < b->len + k)
                cap *= 2;
            if (cap > rn->cfg->max_output_bytes)
                cap = rn->cfg->max_output_bytes;
            char *p = realloc(b->data, cap);
            if (p) {
                b->data = p;
                b->cap = cap;
            } else {
                b->truncated = true;
                k = 0;
            }
        }
        if (k) {
            memcpy(b->data + b->len, tmp, k);
            b->len += k;
            (void)pthread_cond_broadcast(&rn->done);
        }
        (void)pthread_mutex_unlock(&rn->lock);
    }
}

/* Write what stdin can take now; true when it is done (all written, or
 * the payload closed its end). */
static bool feed(struct srv_run *r)
{
    while (r->stdin_off < r->stdin_len) {
        ssize_t n = write(r->fd_in, r->stdin_data + r->stdin_off, r->stdin_len - r->stdin_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno != EAGAIN; /* EPIPE: the payload does not read it */
        r->stdin_off += (size_t)n;
    }
    return true;
}

static void on_event(struct lane *ln, struct srv_watch *w)
{
    struct srv_runner *rn = ln->rn;
    struct srv_run *r = w->run;

    if (r->state == SRV_DONE)
        return; /* finished earlier in this batch (written by this thread only) */

    switch (w->kind) {
    case SRV_W_HANDLE:
        if (!r->ended && aj_sandbox_process(r->h) == 1) {
            read_events(rn, r);
            r->ended = true;
            (void)epoll_ctl(ln->ep, EPOLL_CTL_DEL, aj_sandbox_fd(r->h), NULL);
            close_watch(ln, &r->fd_in);
            maybe_finish(ln, r);
        } else if (!r->ended) {
            read_events(rn, r);
        }
        break;
    case SRV_W_STDIN:
        if (feed(r))
            close_watch(ln, &r->fd_in); /* closing gives the payload EOF */
        break;
    case SRV_W_STDOUT:
        if (drain(rn, r->fd_out, &r->out)) {
            close_watch(ln, &r->fd_out);
            maybe_finish(ln, r);
        }
        break;
    case SRV_W_STDERR:
        if (drain(rn, r->fd_err, &r->err)) {
            close_watch(ln, &r->fd_err);
            maybe_finish(ln, r);
        }
        break;
    }
}

/* The eventfd: start what was queued, kill what was asked to die. */
static void on_wake(struct lane *ln)
{
    struct srv_runner *rn = ln->rn;
    uint64_t v;
    struct srv_run *q, *kill_list[SRV_MAX_RUNS];
    size_t n_kill = 0;
    bool stopping;

    while (read(ln->efd, &v, sizeof(v)) < 0 && errno == EINTR)
        ;
    (void)pthread_mutex_lock(&rn->lock);
    q = ln->qhead;
    ln->qhead = ln->qtail = NULL;
    stopping = rn->stopping;
    for (struct srv_run *r = rn->live; r && n_kill < SRV_MAX_RUNS; r = r->next)
        if (r->lane == ln->idx && r->state == SRV_RUNNING && r->h && (r->kill_requested || stopping)) {
            r->kill_requested = false;
            kill_list[n_kill++] = r;
        }
    (void)pthread_mutex_unlock(&rn->lock);

    /* Handles are this lane's alone, so the list is stable between the
     * unlock and these calls: only this lane finishes its runs. */
    for (size_t i = 0; i < n_kill; i++)
        if (!kill_list[i]->ended)
            (void)aj_sandbox_kill(kill_list[i]->h, stopping ? SIGTERM : SIGKILL);
    while (q) {
        struct srv_run *next = q->qnext;
        bool cancel;
        (void)pthread_mutex_lock(&rn->lock);
        cancel = q->kill_requested || rn->stopping;
        rn->m.queued--;
        q->tenant->queued--;
        (void)pthread_mutex_unlock(&rn->lock);
        if (cancel) {
            (void)snprintf(q->status, sizeof(q->status), "cancelled");
            q->exit_code = -1;
            (void)snprintf(q->error, sizeof(q->error), "cancelled before it started");
            finish(ln, q);
        } else {
            start(ln, q);
        }
        q = next;
    }
}

/* Lane 0: the warm pools, made before it takes a run (the other lanes
 * wait for them too). */
static void make_pools(struct srv_runner *rn)
{
    struct aj_error err = {0};

    for (size_t i = 0; i < rn->cfg->n_tenants; i++) {
        struct srv_tenant *t = &rn->cfg->tenants[i];
        /* Its warm interpreters: each imports its preload here (seconds
         * for pandas), before the first request is taken. */
        struct aj_pool *ip = NULL, *wp = NULL;
        if (t->pol_interp && t->interp_pool && aj_pool_new(t->pol_interp, t->interp_pool, &ip, &err) < 0) {
            ip = NULL;
            (void)fprintf(stderr, "agentjail serve: warm interpreters of tenant %s: %s; its python runs start "
                          "from its warm pool or cold\n", t->name, err.msg);
        }
        (void)pthread_mutex_lock(&rn->lock);
        rn->pools[i].interp = ip;
        (void)pthread_mutex_unlock(&rn->lock);
        if (!t->pool_size || !t->pol)
            continue;
        if (aj_pool_new(t->pol, t->pool_size, &wp, &err) < 0) {
            (void)fprintf(stderr, "agentjail serve: warm pool of tenant %s: %s; its runs start cold\n", t->name,
                          err.msg);
            continue;
        }
        (void)pthread_mutex_lock(&rn->lock);
        rn->pools[i].pool = wp;
        (void)pthread_mutex_unlock(&rn->lock);
    }

    (void)pthread_mutex_lock(&rn->lock);
    rn->pools_made = true;
    (void)pthread_cond_broadcast(&rn->done);
    (void)pthread_mutex_unlock(&rn->lock);
}

static void *runner_main(void *arg)
{
    struct lane *ln = arg;
    struct srv_runner *rn = ln->rn;
    struct epoll_event evs[64];

    /* Made here, not by the main thread: the parked sandboxes' death
     * signal follows the thread that made the pool, which must outlive
     * it, and this thread frees it after the last run. A pool that cannot
     * be made (a policy that cannot be pooled) leaves runs cold. */
    if (ln->idx == 0) {
        make_pools(rn);
    } else {
        (void)pthread_mutex_lock(&rn->lock);
        while (!rn->pools_made && !rn->stopping)
            (void)pthread_cond_wait(&rn->done, &rn->lock);
        (void)pthread_mutex_unlock(&rn->lock);
    }

    for (;;) {
        int n = epoll_wait(ln->ep, evs, 64, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            (void)fprintf(stderr, "agentjail serve: runner: epoll_wait: %s\n", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL)
                on_wake(ln);
            else
                on_event(ln, evs[i].data.ptr);
        }
        bury(ln);
        (void)pthread_mutex_lock(&rn->lock);
        /* Lane 0 last: the pools go once no lane has a run left. */
        bool done = rn->stopping && !ln->n_live && !ln->qhead && (ln->idx != 0 || !rn->live);
        (void)pthread_mutex_unlock(&rn->lock);
        if (done)
            break;
    }
    if (ln->idx != 0)
        return NULL;
    for (size_t i = 0; i < rn->cfg->n_tenants; i++) {
        /* Out of the metrics' sight first (they read the pools under the
         * lock), then freed. */
        (void)pthread_mutex_lock(&rn->lock);
        struct tenant_pool tp = rn->pools[i];
        rn->pools[i].pool = rn->pools[i].interp = NULL;
        (void)pthread_mutex_unlock(&rn->lock);
        aj_pool_free(tp.pool);
        aj_pool_free(tp.interp);
    }
    return NULL;
}

static void lanes_close(struct srv_runner *rn)
{
    for (unsigned i = 0; rn->lanes && i < rn->n_lanes; i++) {
        if (rn->lanes[i].efd >= 0)
            (void)close(rn->lanes[i].efd);
        if (rn->lanes[i].ep >= 0)
            (void)close(rn->lanes[i].ep);
    }
    free(rn->lanes);
    rn->lanes = NULL;
}

int srv_runner_new(const struct srv_config *cfg, const struct aj_policy *pol, struct srv_store *store,
                   const char *events_dir, struct srv_runner **ret, char *msg, size_t msg_size)
{
    struct srv_runner *rn = calloc(1, sizeof(*rn));
    struct aj_error err = {0};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    int e;

    if (!rn) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    rn->cfg = cfg;
    rn->pol = pol;
    rn->store = store;
    rn->n_lanes = srv_config_runner_threads(cfg);
    /* 15 s, or less with a shorter connection_timeout: libmicrohttpd
     * closes a connection whose content reader blocked longer than that
     * since the last byte went out, cutting a quiet stream before its exit. */
    rn->keepalive_s = cfg->connection_timeout && cfg->connection_timeout / 2 < 15 ? cfg->connection_timeout / 2 : 15;
    if (!rn->keepalive_s)
        rn->keepalive_s = 1;
    rn->pools = calloc(cfg->n_tenants ? cfg->n_tenants : 1, sizeof(*rn->pools));
    rn->lanes = calloc(rn->n_lanes, sizeof(*rn->lanes));
    if (!rn->pools || !rn->lanes || (events_dir && !(rn->events_dir = strdup(events_dir)))) {
        (void)snprintf(msg, msg_size, "out of memory");
        free(rn->lanes);
        free(rn->pools);
        free(rn);
        return -1;
    }
    for (unsigned i = 0; i < rn->n_lanes; i++)
        rn->lanes[i] = (struct lane){.rn = rn, .idx = i, .efd = -1, .ep = -1};
    if (aj_policy_sha256(pol, rn->policy_sha256, &err) < 0) {
        (void)snprintf(msg, msg_size, "policy: %s", err.msg);
        free(rn->events_dir);
        free(rn->lanes);
        free(rn->pools);
        free(rn);
        return -1;
    }
    (void)pthread_mutex_init(&rn->lock, NULL);
    (void)pthread_cond_init(&rn->done, NULL);
    for (unsigned i = 0; i < rn->n_lanes; i++) {
        struct lane *ln = &rn->lanes[i];
        ln->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ln->ep = epoll_create1(EPOLL_CLOEXEC);
        if (ln->efd < 0 || ln->ep < 0 || epoll_ctl(ln->ep, EPOLL_CTL_ADD, ln->efd, &ev) < 0) {
            (void)snprintf(msg, msg_size, "runner: %s", strerror(errno));
            goto fail;
        }
    }
    srv_runner_prune(rn, true);
    for (unsigned i = 0; i < rn->n_lanes; i++) {
        e = pthread_create(&rn->lanes[i].thread, NULL, runner_main, &rn->lanes[i]);
        if (e != 0) {
            (void)snprintf(msg, msg_size, "runner: pthread_create: %s", strerror(e));
            srv_runner_stop(rn); /* the lanes already started: none has a run */
            goto fail;
        }
        rn->lanes[i].thread_started = true;
        /* Named here, not by the thread itself: the name is in /proc
         * before the server says it is ready. */
        char name[32]; /* "aj-runner-7": lanes are at most 64 */
        (void)snprintf(name, sizeof(name), "aj-runner-%u", i);
        (void)pthread_setname_np(rn->lanes[i].thread, name);
    }
    *ret = rn;
    return 0;
fail:
    lanes_close(rn);
    (void)pthread_mutex_destroy(&rn->lock);
    (void)pthread_cond_destroy(&rn->done);
    free(rn->events_dir);
    free(rn->pools);
    free(rn);
    return -1;
}

int srv_runner_take_rate(struct srv_runner *rn, struct srv_tenant *t, unsigned *retry_after)
{
    double per_ms = t->max_runs_per_minute / 60000.0, cap = t->max_runs_per_minute;
    int64_t now = srv_now_ms();
    int rc = 0;

    if (!t->max_runs_per_minute)
        return 0;
    (void)pthread_mutex_lock(&rn->lock);
    if (!t->tokens_ms) {
        t->tokens = cap; /* a full bucket at the first run: bursts up to the minute's count */
    } else if (now > t->tokens_ms) {
        t->tokens += (double)(now - t->tokens_ms) * per_ms;
        if (t->tokens > cap)
            t->tokens = cap;
    }
    t->tokens_ms = now;
    if (t->tokens >= 1.0) {
        t->tokens -= 1.0;
    } else {
        *retry_after = (unsigned)((1.0 - t->tokens) / per_ms / 1000.0) + 1;
        rn->m.rejected_429++;
        rc = -EAGAIN;
    }
    (void)pthread_mutex_unlock(&rn->lock);
    return rc;
}

int srv_runner_submit(struct srv_runner *rn, struct srv_run *r)
{
    (void)pthread_mutex_lock(&rn->lock);
    if (rn->stopping) {
        (void)pthread_mutex_unlock(&rn->lock);
        return -ESHUTDOWN;
    }
    if (rn->active >= rn->cfg->max_runs || r->tenant->running >= r->tenant->max_runs) {
        rn->m.rejected_429++;
        (void)pthread_mutex_unlock(&rn->lock);
        return -EAGAIN;
    }
    rn->active++;
    rn->m.queued++;
    r->tenant->queued++;
    r->tenant->running++;
    r->state = SRV_QUEUED;
    r->fd_in = r->fd_out = r->fd_err = r->ev_fd = -1;
    r->refs++; /* the runner's */
    r->next = rn->live;
    rn->live = r;
    /* The lane with the fewest runs (the first of them): runs in flight at
     * once start and end on different threads. */
    struct lane *ln = &rn->lanes[0];
    for (unsigned i = 1; i < rn->n_lanes; i++)
        if (rn->lanes[i].n_live < ln->n_live)
            ln = &rn->lanes[i];
    ln->n_live++;
    r->lane = ln->idx;
    r->qnext = NULL;
    if (ln->qtail)
        ln->qtail->qnext = r;
    else
        ln->qhead = r;
    ln->qtail = r;
    (void)pthread_mutex_unlock(&rn->lock);
    wake(ln);
    return 0;
}

struct srv_run *srv_runner_find(struct srv_runner *rn, const struct srv_tenant *tenant, const char *id)
{
    struct srv_run *found = NULL;

    (void)pthread_mutex_lock(&rn->lock);
    for (struct srv_run *r = rn->live; r; r = r->next)
        if (r->tenant == tenant && strcmp(r->id, id) == 0) {
            r->refs++;
            found = r;
            break;
        }
    (void)pthread_mutex_unlock(&rn->lock);
    return found;
}

void srv_runner_kill(struct srv_runner *rn, struct srv_run *r)
{
    unsigned lane;

    (void)pthread_mutex_lock(&rn->lock);
    if (r->state != SRV_DONE)
        r->kill_requested = true;
    lane = r->lane;
    (void)pthread_mutex_unlock(&rn->lock);
    wake(&rn->lanes[lane]);
}

void srv_runner_wait(struct srv_runner *rn, struct srv_run *r)
{
    (void)pthread_mutex_lock(&rn->lock);
    while (r->state != SRV_DONE)
        (void)pthread_cond_wait(&rn->done, &rn->lock);
    (void)pthread_mutex_unlock(&rn->lock);
}

bool srv_runner_wait_for(struct srv_runner *rn, struct srv_run *r, int64_t timeout_ms)
{
    struct timespec until;
    bool done;

    (void)clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    (void)pthread_mutex_lock(&rn->lock);
    while (r->state != SRV_DONE)
        if (pthread_cond_timedwait(&rn->done, &rn->lock, &until) == ETIMEDOUT)
            break;
    done = r->state == SRV_DONE;
    (void)pthread_mutex_unlock(&rn->lock);
    return done;
}

char *srv_runner_record(struct srv_runner *rn, struct srv_run *r)
{
    char *s;

    (void)pthread_mutex_lock(&rn->lock);
    s = srv_record_json(r, r->state == SRV_DONE ? NULL : r->state == SRV_QUEUED ? "queued" : "running");
    (void)pthread_mutex_unlock(&rn->lock);
    return s;
}

/* Back n off to the start of a UTF-8 sequence the chunk would split, so
 * that a character is not sent as two replacement characters; unless
 * that leaves nothing (a lone lead byte at the start goes as it is). */
static size_t utf8_boundary(const char *p, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)p[n - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        return len > back && n - back > 0 ? n - back : n;
    }
    return n;
}

ssize_t srv_runner_next_output(struct srv_runner *rn, struct srv_run *r, size_t off[3], char *buf, size_t max,
                               int *stream)
{
    size_t n = 0;
    bool timed_out = false;

    *stream = 0;
    (void)pthread_mutex_lock(&rn->lock);
    for (;;) {
        bool done = r->state == SRV_DONE;
        /* An event first: it is why a reader watches a run. */
        if (r->events && json_array_size(r->events) > off[0]) {
            char *ev = json_dumps(json_array_get(r->events, off[0]), JSON_COMPACT);
            off[0]++;
            if (ev && strlen(ev) < max) {
                n = strlen(ev);
                memcpy(buf, ev, n);
                *stream = 3;
            }
            free(ev);
            if (n)
                break;
            continue;
        }
        for (int s = 1; s <= 2 && !n; s++) {
            const struct srv_buf *b = s == 1 ? &r->out : &r->err;
            if (b->len <= off[s])
                continue;
            n = b->len - off[s] < max ? b->len - off[s] : max;
            if (!done || off[s] + n < b->len)
                n = utf8_boundary(b->data + off[s], n);
            memcpy(buf, b->data + off[s], n);
            off[s] += n;
            *stream = s;
        }
        if (n || done)
            break;
        /* Back every keepalive_s with nothing (stream 0), so the caller
         * can keep a quiet connection from looking idle. */
        struct timespec until;
        (void)clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += rn->keepalive_s;
        if (pthread_cond_timedwait(&rn->done, &rn->lock, &until) == ETIMEDOUT) {
            timed_out = true;
            break;
        }
    }
    (void)pthread_mutex_unlock(&rn->lock);
    return n ? (ssize_t)n : timed_out ? -EAGAIN : 0;
}

/* The pools' counts as of now, into the tenants and the server's sums;
 * under rn->lock. The pools are the runner thread's, but their counts are
 * read under their own lock (aj_pool_get_stats), and a pool leaves
 * rn->pools under rn->lock before it is freed. */
static void read_pools_locked(struct srv_runner *rn)
{
    struct srv_metrics *m = &rn->m;

    m->warm_runs = m->cold_runs = m->interp_warm_runs = m->interp_cold_runs = 0;
    m->pool_ready = m->interp_ready = 0;
    for (size_t i = 0; i < rn->cfg->n_tenants; i++) {
        struct srv_tenant *t = &rn->cfg->tenants[i];
        struct aj_pool_stats ps = {0};
        if (rn->pools[i].pool) {
            aj_pool_get_stats(rn->pools[i].pool, &ps);
            t->pool = m->pool = true;
            t->warm_runs = ps.warm_runs;
            t->cold_runs = ps.cold_runs;
            t->pool_ready = ps.ready;
        } else {
            t->pool_ready = 0; /* gone (shutdown) or never made; the counts stay */
        }
        if (rn->pools[i].interp) {
            struct aj_pool_stats is = {0};
            aj_pool_get_stats(rn->pools[i].interp, &is);
            t->interp_pool_on = m->interp = true;
            t->interp_warm_runs = is.warm_runs;
            t->interp_cold_runs = is.cold_runs;
            t->interp_ready = is.ready;
        } else {
            t->interp_ready = 0;
        }
        m->warm_runs += t->warm_runs;
        m->cold_runs += t->cold_runs;
        m->pool_ready += t->pool_ready;
        m->interp_warm_runs += t->interp_warm_runs;
        m->interp_cold_runs += t->interp_cold_runs;
        m->interp_ready += t->interp_ready;
    }
}

void srv_runner_metrics(struct srv_runner *rn, struct srv_metrics *m)
{
    (void)pthread_mutex_lock(&rn->lock);
    read_pools_locked(rn);
    *m = rn->m;
    (void)pthread_mutex_unlock(&rn->lock);
}

void srv_runner_count_events(struct srv_runner *rn, struct srv_tenant *t, uint64_t escapes, uint64_t canaries)
{
    (void)pthread_mutex_lock(&rn->lock);
    t->escapes += escapes;
    rn->m.escape_attempts += escapes;
    rn->m.canaries += canaries;
    (void)pthread_mutex_unlock(&rn->lock);
}

void srv_runner_tenant_counts(struct srv_runner *rn, const struct srv_tenant *t, unsigned *running,
                              uint64_t *finished, uint64_t *escapes)
{
    (void)pthread_mutex_lock(&rn->lock);
    *running = t->running;
    *finished = t->finished;
    *escapes = t->escapes;
    (void)pthread_mutex_unlock(&rn->lock);
}

void srv_runner_tenant_snapshot(struct srv_runner *rn, const struct srv_tenant *t, struct srv_tenant *ret)
{
    (void)pthread_mutex_lock(&rn->lock);
    read_pools_locked(rn);
    *ret = *t;
    (void)pthread_mutex_unlock(&rn->lock);
}

bool srv_runner_warm(struct srv_runner *rn)
{
    bool ok;

    (void)pthread_mutex_lock(&rn->lock);
    ok = rn->pools_made;
    (void)pthread_mutex_unlock(&rn->lock);
    return ok;
}

bool srv_runner_accepting(struct srv_runner *rn)
{
    bool ok;

    (void)pthread_mutex_lock(&rn->lock);
    ok = !rn->stopping;
    (void)pthread_mutex_unlock(&rn->lock);
    return ok;
}

void srv_runner_stop(struct srv_runner *rn)
{
    if (!rn)
        return;
    (void)pthread_mutex_lock(&rn->lock);
    rn->stopping = true;
    (void)pthread_cond_broadcast(&rn->done); /* lanes still waiting for the pools */
    (void)pthread_mutex_unlock(&rn->lock);
    for (unsigned i = 0; i < rn->n_lanes; i++)
        if (rn->lanes[i].thread_started)
            wake(&rn->lanes[i]);
    for (unsigned i = 0; i < rn->n_lanes; i++)
        if (rn->lanes[i].thread_started) {
            (void)pthread_join(rn->lanes[i].thread, NULL);
            rn->lanes[i].thread_started = false;
        }
}

void srv_runner_free(struct srv_runner *rn)
{
    if (!rn)
        return;
    srv_runner_stop(rn);
    lanes_close(rn);
    (void)pthread_mutex_destroy(&rn->lock);
    (void)pthread_cond_destroy(&rn->done);
    free(rn->events_dir);
    free(rn->pools);
    free(rn);
}
