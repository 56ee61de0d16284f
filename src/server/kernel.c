/* SPDX-License-Identifier: Apache-2.0 */
/* Live kernels: a session that asked for `kernel: "python"` has one
 * python3 (kernel_boot.py) in one long-lived sandbox of the session's own
 * policy (its workspace at /workspace, its limits, monitor and decoys).
 * A thread of the kernel's own starts the sandbox through the library's
 * handle API, owns the handle for its whole life (the library's rule: the
 * thread that starts a run outlives it) and speaks the bootstrap's JSON
 * Lines protocol on the sandbox's stdin and stdout. Request threads hand
 * it one cell at a time and wait for the reply.
 *
 * A cell past its timeout gets an interrupt (the bootstrap raises SIGINT
 * in its main thread: KeyboardInterrupt, the kernel goes on); one that
 * does not come back within the grace period has its sandbox killed and a
 * fresh kernel started (state lost, said in the reply). An escape attempt
 * or a decoy touch kills the kernel for good, whatever the policy's
 * on_escape says: the session then reports the kernel dead and why. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "agentjail.h"
#include "srv.h"
#include "srv_kernel.h"
#include "srv_session.h"

extern const char srv_kernel_boot_py[];

#define GRACE_MS 2000
#define MAX_LINE (64u << 20)   /* a reply line (outputs, figures) */
#define MAX_OOB (1u << 20)     /* what reaches fd 1 and 2 during a cell */
#define MAX_CODE (4u << 20)
#define DEFAULT_TIMEOUT_MS 30000
#define MAX_TIMEOUT_MS 3600000

enum kstate { K_STARTING, K_IDLE, K_BUSY, K_DEAD };
static const char *const kstate_names[] = {"starting", "idle", "busy", "dead"};

struct kcell {
    const char *code;
    uint64_t timeout_ms;
    bool taken, done;
    json_t *reply; /* the thread's answer */
};

struct srv_kernel {
    struct srv_ctx *ctx;
    const struct aj_policy *pol;
    char session_id[33];
    struct srv_tenant *tenant; /* tenants live as long as the server */
    char *events_dir;
    pthread_t thread;
    bool thread_started;
    int wake; /* eventfd: something for the thread */

    pthread_mutex_t cell_lock; /* one cell at a time, in order */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu. */
    enum kstate state;
    char reason[300];
    bool for_good, tainted, stop, restart, stopped;
    unsigned restarts_done, restarts_asked;
    uint64_t cells;
    struct kcell *cell;

    /* The thread's own. */
    struct aj_sandbox *h;
    int epfd, fd_in, fd_out, fd_err, ev_fd;
    char events_path[4200];
    unsigned gen, next_id, cur_id;
    struct kcell *cur;
    char *inbuf; /* pending to the kernel's stdin */
    size_t in_len, in_off;
    char *line; /* a partial line from its stdout */
    size_t line_len;
    char *oob; /* fd 1 and 2 during the cell */
    size_t oob_len;
    json_t *events;
    char *ev_part; /* a partial line of the events file */
    size_t ev_len;
    int64_t deadline, grace;
    bool timed_out, escaped;
    char kill_why[200];
};

static void set_state(struct srv_kernel *k, enum kstate st, const char *reason)
{
    (void)pthread_mutex_lock(&k->mu);
    k->state = st;
    if (reason)
        (void)snprintf(k->reason, sizeof(k->reason), "%s", reason);
    (void)pthread_cond_broadcast(&k->cv);
    (void)pthread_mutex_unlock(&k->mu);
}

static int nonblock(int fd)
{
    int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        (void)close(*fd);
    *fd = -1;
}

/* ---- the cell in flight -------------------------------------------------------------------- */

static void finish_cell(struct srv_kernel *k, json_t *reply)
{
    struct kcell *c = k->cur;

    if (!c) {
        json_decref(reply);
        return;
    }
    json_t *ev = k->events ? k->events : json_array();
    k->events = NULL;
    if (reply) {
        (void)json_object_set_new(reply, "events", ev ? ev : json_array());
        if (k->oob_len) {
            json_t *e = json_object_get(reply, "stderr");
            size_t n = json_is_string(e) ? json_string_length(e) : 0;
            char *all = malloc(n + k->oob_len);
            if (all) {
                if (n)
                    memcpy(all, json_string_value(e), n);
                memcpy(all + n, k->oob, k->oob_len);
                (void)json_object_set_new(reply, "stderr", srv_text_json(all, n + k->oob_len));
                free(all);
            }
        }
    } else {
        json_decref(ev);
    }
    k->oob_len = 0;
    k->cur = NULL;
    k->deadline = k->grace = 0;
    (void)pthread_mutex_lock(&k->mu);
    c->reply = reply;
    c->done = true;
    k->cell = NULL;
    k->cells++;
    if (k->state == K_BUSY)
        k->state = K_IDLE;
    (void)pthread_cond_broadcast(&k->cv);
    (void)pthread_mutex_unlock(&k->mu);
}

static json_t *dead_reply(const char *why, bool restarted)
{
    return json_pack("{s:s,s:s,s:s,s:n,s:[],s:{s:s,s:s,s:s},s:{s:b,s:b}}", "status", "dead", "stdout", "",
                     "stderr", "", "result", "display", "error", "ename", "KernelDied", "evalue", why,
                     "traceback", "", "kernel", "restarted", restarted, "state_lost", true);
}

/* ---- events --------------------------------------------------------------------------------- */

static void read_events(struct srv_kernel *k)
{
    char buf[16384];

    if (k->ev_fd < 0)
        return;
    for (;;) {
        ssize_t n = read(k->ev_fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        char *p = realloc(k->ev_part, k->ev_len + (size_t)n + 1);
        if (!p)
            break;
        k->ev_part = p;
        memcpy(p + k->ev_len, buf, (size_t)n);
        k->ev_len += (size_t)n;
    }
    char *part = k->ev_part;
    size_t part_len = k->ev_len;
    size_t off = 0;
    for (char *nl; part && (nl = memchr(part + off, '\n', part_len - off));) {
        json_t *e = json_loadb(part + off, (size_t)(nl - part - off), 0, NULL);
        off = (size_t)(nl - part) + 1;
        if (!e)
            continue;
        const char *type = json_string_value(json_object_get(e, "type"));
        /* Tied to the session and the cell in flight (null between cells),
         * and into the server's events log as a run's are (run_id: the
         * kernel sandbox's id). */
        (void)json_object_set_new(e, "session", json_string(k->session_id));
        (void)json_object_set_new(e, "cell", k->cur ? json_integer(k->cur_id) : json_null());
        srv_eventlog_write(k->tenant->name, k->h ? aj_sandbox_id(k->h) : "", e);
        if (type && k->ctx->rn && (strcmp(type, "escape_attempt") == 0 || strcmp(type, "canary") == 0))
            srv_runner_count_events(k->ctx->rn, k->tenant, type[0] == 'e', type[0] == 'c');
        if (type && (strcmp(type, "escape_attempt") == 0 || strcmp(type, "canary") == 0)) {
            if (!k->escaped && k->h) {
                const char *sc = json_string_value(json_object_get(e, "syscall"));
                (void)snprintf(k->kill_why, sizeof(k->kill_why), "%s%s%s", type, sc ? ": " : "", sc ? sc : "");
                (void)aj_sandbox_kill(k->h, SIGKILL);
            }
            k->escaped = true;
        }
        if (k->cur && type && strcmp(type, "start") != 0 && strcmp(type, "exit") != 0) {
            if (!k->events)
                k->events = json_array();
            if (k->events && json_array_size(k->events) < 256)
                (void)json_array_append(k->events, e);
        }
        json_decref(e);
    }
    if (off) {
        memmove(part, part + off, part_len - off);
        k->ev_len = part_len - off;
    }
}

/* ---- the sandbox ---------------------------------------------------------------------------- */

static int watch(struct srv_kernel *k, int fd, uint32_t what)
{
    struct epoll_event ev = {.events = what, .data.fd = fd};
    return fd < 0 ? 0 : epoll_ctl(k->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void kill_now(struct srv_kernel *k, const char *why);

static void start_sandbox(struct srv_kernel *k)
{
    char *argv[] = {"python3", "-c", (char *)srv_kernel_boot_py, NULL};
    struct aj_request req = AJ_REQUEST_INIT;
    struct aj_error err = {0};

    set_state(k, K_STARTING, NULL);
    k->gen++;
    k->escaped = k->timed_out = false;
    k->kill_why[0] = '\0';
    k->line_len = 0;
    k->ev_len = 0;
    req.argv = argv;
    req.stdio[0] = AJ_STDIO_PIPE_NEW;
    req.stdio[1] = AJ_STDIO_PIPE_NEW;
    req.stdio[2] = AJ_STDIO_PIPE_NEW;
    req.workdir = "/workspace";
    k->events_path[0] = '\0';
    if (k->events_dir)
        (void)snprintf(k->events_path, sizeof(k->events_path), "%s/k-%s-%u.jsonl", k->events_dir, k->session_id,
                       k->gen);
    req.events_path = k->events_path[0] ? k->events_path : NULL;
    if (aj_sandbox_start(k->pol, &req, &k->h, &err) < 0) {
        k->h = NULL;
        (void)pthread_mutex_lock(&k->mu);
        k->for_good = true;
        (void)pthread_mutex_unlock(&k->mu);
        set_state(k, K_DEAD, err.msg);
        return;
    }
    k->ev_fd = req.events_path ? open(k->events_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
    k->fd_in = aj_sandbox_take_pipe(k->h, 0);
    k->fd_out = aj_sandbox_take_pipe(k->h, 1);
    k->fd_err = aj_sandbox_take_pipe(k->h, 2);
    if (nonblock(k->fd_in) < 0 || nonblock(k->fd_out) < 0 || nonblock(k->fd_err) < 0 ||
        watch(k, aj_sandbox_fd(k->h), EPOLLIN) < 0 || watch(k, k->fd_out, EPOLLIN) < 0 ||
        watch(k, k->fd_err, EPOLLIN) < 0) {
        /* Not watched, so no event would ever end it: kill, wait and let
         * go of everything now. */
        kill_now(k, "server: could not watch the kernel's pipes");
    }
}

/* The sandbox has ended: answer the cell in flight, let go of everything,
 * and say whether a fresh kernel follows. */
static void sandbox_ended(struct srv_kernel *k)
{
    const struct aj_result *res = aj_sandbox_result(k->h);
    char why[400];
    bool stop;

    read_events(k);
    if (res && res->status == AJ_STATUS_ESCAPE_ATTEMPT)
        k->escaped = true;
    if (k->kill_why[0])
        (void)snprintf(why, sizeof(why), "%s", k->kill_why);
    else if (!res)
        (void)snprintf(why, sizeof(why), "the kernel ended");
    else if (res->status == AJ_STATUS_SIGNALED)
        (void)snprintf(why, sizeof(why), "the kernel was killed by signal %d", res->signal);
    else if (res->status == AJ_STATUS_OK || res->status == AJ_STATUS_NONZERO_EXIT)
        (void)snprintf(why, sizeof(why), "the kernel exited with status %d", res->exit_code);
    else
        (void)snprintf(why, sizeof(why), "the kernel ended: %s", aj_status_name(res->status));
    (void)pthread_mutex_lock(&k->mu);
    if (k->escaped)
        k->for_good = k->tainted = true;
    stop = k->stop || k->for_good;
    (void)pthread_mutex_unlock(&k->mu);
    set_state(k, K_DEAD, why); /* before the cell's answer: a request that follows it sees it */
    finish_cell(k, dead_reply(why, !stop));
    if (k->fd_out >= 0)
        (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd_out, NULL);
    if (k->fd_err >= 0)
        (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd_err, NULL);
    if (k->fd_in >= 0)
        (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd_in, NULL);
    (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, aj_sandbox_fd(k->h), NULL);
    close_fd(&k->fd_in);
    close_fd(&k->fd_out);
    close_fd(&k->fd_err);
    close_fd(&k->ev_fd);
    aj_sandbox_free(k->h);
    k->h = NULL;
    if (k->events_path[0])
        (void)unlink(k->events_path);
    k->in_len = k->in_off = 0;
    (void)fprintf(stderr, "agentjail serve: session %s: kernel: %s%s\n", k->session_id, why,
                  stop ? "" : " (restarting)");
}

static void kill_now(struct srv_kernel *k, const char *why)
{
    if (!k->h)
        return;
    if (!k->kill_why[0])
        (void)snprintf(k->kill_why, sizeof(k->kill_why), "%s", why);
    (void)aj_sandbox_kill(k->h, SIGKILL);
    struct aj_error err = {0};
    (void)aj_sandbox_wait(k->h, &err);
    sandbox_ended(k);
}

/* ---- the protocol ----------------------------------------------------------------------------- */

static void send_line(struct srv_kernel *k, json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    size_t n = text ? strlen(text) : 0;
    char *p = text ? realloc(k->inbuf, k->in_len + n + 1) : NULL;

    if (!p) {
        free(text);
        kill_now(k, "server: out of memory");
        return;
    }
    k->inbuf = p;
    memcpy(p + k->in_len, text, n + 1);
    p[k->in_len + n] = '\n'; /* over the NUL */
    k->in_len += n + 1;
    free(text);
    if (watch(k, k->fd_in, EPOLLOUT) < 0 && errno != EEXIST)
        kill_now(k, "server: could not watch the kernel's stdin");
}

static void flush_in(struct srv_kernel *k)
{
    while (k->fd_in >= 0 && k->in_off < k->in_len) {
        ssize_t n = write(k->fd_in, k->inbuf + k->in_off, k->in_len - k->in_off);
        if (n < 0) {
            if (errno == EAGAIN)
                return;
            kill_now(k, "the kernel's stdin closed");
            return;
        }
        k->in_off += (size_t)n;
    }
    k->in_off = k->in_len = 0;
    if (k->fd_in >= 0)
        (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd_in, NULL);
}

static void on_message(struct srv_kernel *k, json_t *m)
{
    const char *op = json_string_value(json_object_get(m, "op"));

    if (op && strcmp(op, "ready") == 0) {
        (void)pthread_mutex_lock(&k->mu);
        if (k->state == K_STARTING)
            k->state = k->cur ? K_BUSY : K_IDLE;
        k->reason[0] = '\0';
        (void)pthread_cond_broadcast(&k->cv);
        (void)pthread_mutex_unlock(&k->mu);
        return;
    }
    if (!op || strcmp(op, "done") != 0 || !k->cur || json_integer_value(json_object_get(m, "id")) != k->cur_id)
        return; /* a forged or late line: the cell's own session's business */
    json_t *r = json_object();
    const char *st = json_string_value(json_object_get(m, "status"));
    if (!r)
        return;
    if (st && strcmp(st, "interrupted") == 0 && k->timed_out)
        st = "timeout";
    (void)json_object_set_new(r, "status", json_string(st ? st : "error"));
    const char *keys[] = {"stdout", "stderr", "result", "display", "error"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(m, keys[i]);
        (void)json_object_set(r, keys[i], v ? v : json_null());
    }
    (void)json_object_set_new(r, "kernel", json_pack("{s:b,s:b}", "restarted", false, "state_lost", false));
    read_events(k);
    finish_cell(k, r);
}

static void read_out(struct srv_kernel *k)
{
    char buf[65536];

    for (;;) {
        ssize_t n = k->fd_out >= 0 ? read(k->fd_out, buf, sizeof(buf)) : -1;
        if (n <= 0) {
            if (n == 0 && k->fd_out >= 0) { /* EOF: the end comes through the handle */
                (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd_out, NULL);
                close_fd(&k->fd_out);
            }
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (k->line_len >= MAX_LINE) {
                    kill_now(k, "the kernel sent a reply over 64 MiB");
                    return;
                }
                if ((k->line_len & 0xffff) == 0) {
                    char *p = realloc(k->line, k->line_len + 65536);
                    if (!p) {
                        kill_now(k, "server: out of memory");
                        return;
                    }
                    k->line = p;
                }
                k->line[k->line_len++] = buf[i];
                continue;
            }
            json_t *m = json_loadb(k->line ? k->line : "", k->line_len, 0, NULL);
            k->line_len = 0;
            if (m)
                on_message(k, m);
            json_decref(m);
            if (!k->h)
                return;
        }
    }
}

static void read_err(struct srv_kernel *k)
{
    char buf[65536];

    for (;;) {
        ssize_t n = k->fd_err >= 0 ? read(k->fd_err, buf, sizeof(buf)) : -1;
        if (n <= 0) {
            if (n == 0 && k->fd_err >= 0) {
                (void)epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd_err, NULL);
                close_fd(&k->fd_err);
            }
            return;
        }
        if (!k->cur || k->oob_len >= MAX_OOB)
            continue; /* between cells (or past the cap): dropped */
        size_t take = (size_t)n < MAX_OOB - k->oob_len ? (size_t)n : MAX_OOB - k->oob_len;
        if (!k->oob && !(k->oob = malloc(MAX_OOB)))
            continue;
        memcpy(k->oob + k->oob_len, buf, take);
        k->oob_len += take;
    }
}

/* ---- the thread ----------------------------------------------------------------------------- */

static void *kernel_main(void *arg)
{
    struct srv_kernel *k = arg;

    for (;;) {
        (void)pthread_mutex_lock(&k->mu);
        bool stop = k->stop, restart = k->restarts_asked != k->restarts_done, for_good = k->for_good;
        struct kcell *c = k->cell && !k->cell->taken ? k->cell : NULL;
        if (c)
            c->taken = true;
        (void)pthread_mutex_unlock(&k->mu);

        if (stop) {
            kill_now(k, "the session ended");
            if (c) {
                k->cur = c;
                finish_cell(k, dead_reply("the session ended", false));
            }
            break;
        }
        if (restart) {
            kill_now(k, "restarted");
            (void)pthread_mutex_lock(&k->mu);
            k->for_good = for_good = false;
            k->restarts_done = k->restarts_asked;
            (void)pthread_mutex_unlock(&k->mu);
        }
        if (!k->h && !for_good) {
            start_sandbox(k);
            (void)pthread_mutex_lock(&k->mu);
            (void)pthread_cond_broadcast(&k->cv);
            (void)pthread_mutex_unlock(&k->mu);
        }
        if (c) {
            k->cur = c;
            k->events = NULL;
            k->oob_len = 0;
            if (!k->h) {
                char why[400];
                (void)pthread_mutex_lock(&k->mu);
                (void)snprintf(why, sizeof(why), "the kernel is dead: %s", k->reason);
                (void)pthread_mutex_unlock(&k->mu);
                finish_cell(k, dead_reply(why, false));
            } else {
                json_t *m = json_pack("{s:s,s:i,s:s}", "op", "cell", "id", (json_int_t)++k->next_id, "code", c->code);
                k->cur_id = k->next_id;
                k->timed_out = false;
                k->deadline = srv_now_ms() + (int64_t)c->timeout_ms;
                (void)pthread_mutex_lock(&k->mu);
                if (k->state == K_IDLE)
                    k->state = K_BUSY;
                (void)pthread_mutex_unlock(&k->mu);
                if (m)
                    send_line(k, m);
                else
                    finish_cell(k, dead_reply("server: out of memory", false));
                json_decref(m);
                flush_in(k);
            }
        }

        int64_t now = srv_now_ms(), until = -1;
        if (k->h && k->cur) {
            if (k->grace && now >= k->grace) {
                kill_now(k, "the cell did not stop within 2 s of its interrupt: kernel killed");
                continue;
            }
            if (!k->timed_out && now >= k->deadline) {
                json_t *m = json_pack("{s:s,s:i}", "op", "interrupt", "id", (json_int_t)k->cur_id);
                k->timed_out = true;
                k->grace = now + GRACE_MS;
                if (m)
                    send_line(k, m);
                json_decref(m);
                flush_in(k);
                continue;
            }
            until = k->timed_out ? k->grace : k->deadline;
        }
        struct epoll_event evs[8];
        int n = epoll_wait(k->epfd, evs, 8, until < 0 ? -1 : (int)(until - now));
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == k->wake) { /* read even with no sandbox: level-triggered, it would spin */
                uint64_t v;
                (void)!read(k->wake, &v, sizeof(v));
            } else if (!k->h) {
                continue;
            } else if (fd == k->fd_out) {
                read_out(k);
            } else if (fd == k->fd_err) {
                read_err(k);
            } else if (fd == k->fd_in) {
                flush_in(k);
            } else if (fd == aj_sandbox_fd(k->h)) {
                if (aj_sandbox_process(k->h) == 1) {
                    read_out(k); /* a reply written just before the end */
                    if (k->h)
                        sandbox_ended(k);
                    break;
                }
            }
        }
        if (k->h)
            read_events(k);
        if (k->h && k->escaped) {
            struct aj_error err = {0};
            (void)aj_sandbox_wait(k->h, &err);
            sandbox_ended(k);
        }
    }
    (void)pthread_mutex_lock(&k->mu);
    k->stopped = true;
    k->state = K_DEAD;
    (void)pthread_cond_broadcast(&k->cv);
    (void)pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void poke(struct srv_kernel *k)
{
    uint64_t one = 1;
    (void)!write(k->wake, &one, sizeof(one));
}

/* ---- the interface ---------------------------------------------------------------------------- */

int srv_kernel_new(struct srv_ctx *ctx, const struct aj_policy *pol, const char *session_id, struct srv_tenant *tenant,
                   struct srv_kernel **ret, char *msg, size_t msg_size)
{
    struct srv_kernel *k = calloc(1, sizeof(*k));
    const char *store = ctx->cfg.store, *slash = store ? strrchr(store, '/') : NULL;

    *ret = NULL;
    if (!k) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    k->ctx = ctx;
    k->pol = pol;
    k->tenant = tenant;
    (void)snprintf(k->session_id, sizeof(k->session_id), "%s", session_id);
    k->fd_in = k->fd_out = k->fd_err = k->ev_fd = -1;
    if (slash && asprintf(&k->events_dir, "%.*s/events", (int)(slash - store), store) < 0)
        k->events_dir = NULL;
    (void)pthread_mutex_init(&k->mu, NULL);
    (void)pthread_mutex_init(&k->cell_lock, NULL);
    (void)pthread_cond_init(&k->cv, NULL);
    k->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    k->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (k->wake < 0 || k->epfd < 0 || watch(k, k->wake, EPOLLIN) < 0) {
        (void)snprintf(msg, msg_size, "kernel: %s", strerror(errno));
        srv_kernel_free(k);
        return -1;
    }
    /* Every signal blocked in the kernel's thread: a write to a dead
     * kernel's stdin is EPIPE there, never a SIGPIPE that ends the
     * process (`agentjail mcp` does not ignore it), and no signal meant
     * for the server's own handling lands here. */
    sigset_t all, old;
    (void)sigfillset(&all);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&k->thread, NULL, kernel_main, k);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        (void)snprintf(msg, msg_size, "kernel: pthread_create: %s", strerror(rc));
        srv_kernel_free(k);
        return -1;
    }
    k->thread_started = true;
    (void)pthread_setname_np(k->thread, "aj-kernel"); /* for ps and the tests */
    *ret = k;
    return 0;
}

void srv_kernel_stop(struct srv_kernel *k, const char *why)
{
    if (!k)
        return;
    (void)pthread_mutex_lock(&k->mu);
    bool join = k->thread_started && !k->stop;
    k->stop = true;
    if (why && !k->stopped)
        (void)snprintf(k->reason, sizeof(k->reason), "%s", why);
    (void)pthread_mutex_unlock(&k->mu);
    if (join) {
        poke(k);
        (void)pthread_join(k->thread, NULL);
        (void)pthread_mutex_lock(&k->mu);
        if (why)
            (void)snprintf(k->reason, sizeof(k->reason), "%s", why);
        (void)pthread_mutex_unlock(&k->mu);
    }
}

void srv_kernel_free(struct srv_kernel *k)
{
    if (!k)
        return;
    srv_kernel_stop(k, NULL);
    if (k->wake >= 0)
        (void)close(k->wake);
    if (k->epfd >= 0)
        (void)close(k->epfd);
    json_decref(k->events);
    free(k->inbuf);
    free(k->line);
    free(k->oob);
    free(k->ev_part);
    free(k->events_dir);
    (void)pthread_cond_destroy(&k->cv);
    (void)pthread_mutex_destroy(&k->mu);
    (void)pthread_mutex_destroy(&k->cell_lock);
    free(k);
}

json_t *srv_kernel_json(struct srv_kernel *k)
{
    (void)pthread_mutex_lock(&k->mu);
    json_t *o = json_pack("{s:s,s:s,s:i,s:i}", "language", "python", "status", kstate_names[k->state],
                          "restarts", (json_int_t)k->restarts_done, "cells", (json_int_t)k->cells);
    if (o && k->reason[0])
        (void)json_object_set_new(o, "reason", json_string(k->reason));
    (void)pthread_mutex_unlock(&k->mu);
    return o;
}

static void cell(struct srv_kernel *k, const char *code, uint64_t timeout_ms, struct srv_reply *reply)
{
    struct kcell c = {.code = code, .timeout_ms = timeout_ms};

    (void)pthread_mutex_lock(&k->cell_lock);
    (void)pthread_mutex_lock(&k->mu);
    bool gone = k->stop;
    if (!gone) {
        k->cell = &c;
        poke(k);
        while (!c.done)
            (void)pthread_cond_wait(&k->cv, &k->mu);
    }
    (void)pthread_mutex_unlock(&k->mu);
    (void)pthread_mutex_unlock(&k->cell_lock);
    if (gone) {
        srv_reply_error(reply, 410, "the session has ended");
        return;
    }
    char *text = c.reply ? json_dumps(c.reply, JSON_COMPACT) : NULL;
    json_decref(c.reply);
    srv_reply_json(reply, 200, text);
}

static void restart(struct srv_kernel *k, struct srv_reply *reply)
{
    (void)pthread_mutex_lock(&k->cell_lock); /* after the cell in flight */
    (void)pthread_mutex_lock(&k->mu);
    if (k->tainted || k->stop) {
        srv_reply_error(reply, 409, "the kernel is dead for good (%s): an escape attempt ends it until the "
                        "session ends", k->reason);
        (void)pthread_mutex_unlock(&k->mu);
        (void)pthread_mutex_unlock(&k->cell_lock);
        return;
    }
    unsigned want = ++k->restarts_asked;
    poke(k);
    while (!k->stop && (k->restarts_done - want) > (1u << 31))
        (void)pthread_cond_wait(&k->cv, &k->mu);
    (void)pthread_mutex_unlock(&k->mu);
    (void)pthread_mutex_unlock(&k->cell_lock);
    json_t *o = srv_kernel_json(k);
    srv_reply_json(reply, 200, o ? json_dumps(o, JSON_COMPACT) : NULL);
    json_decref(o);
}

static int with_kernel(struct srv_ctx *ctx, struct srv_tenant *t, const char *id, struct srv_session **ret,
                       struct srv_reply *reply)
{
    int rc = srv_session_find(ctx->sessions, t, id, ret);

    if (rc < 0) {
        srv_find_fail(rc, id, reply);
        return -1;
    }
    if (!(*ret)->kernel) {
        srv_reply_error(reply, 409, "session %s has no kernel (create it with \"kernel\": \"python\")", id);
        srv_session_unref(ctx->sessions, *ret);
        return -1;
    }
    return 0;
}

void srv_kernel_run_cell(struct srv_ctx *ctx, struct srv_tenant *t, const char *id, const char *code,
                         uint64_t timeout_ms, struct srv_reply *reply)
{
    struct srv_session *s;

    if (with_kernel(ctx, t, id, &s, reply) < 0)
        return;
    srv_session_begin(ctx->sessions, s);
    cell(s->kernel, code, timeout_ms, reply);
    srv_session_end(ctx->sessions, s);
    srv_session_unref(ctx->sessions, s);
}

void srv_kernel_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *id,
                     const char *rest, const char *body, size_t body_len, struct srv_reply *reply)
{
    if (strcmp(rest, "/kernel/restart") == 0) {
        struct srv_session *s;
        if (strcmp(method, "POST") != 0) {
            srv_reply_error(reply, 405, "%s /v1/sessions/%s/kernel/restart: only POST", method, id);
            return;
        }
        if (with_kernel(ctx, t, id, &s, reply) < 0)
            return;
        restart(s->kernel, reply);
        srv_session_unref(ctx->sessions, s);
        return;
    }
    if (strcmp(rest, "/kernel") == 0) {
        struct srv_session *s;
        if (strcmp(method, "GET") != 0) {
            srv_reply_error(reply, 405, "%s /v1/sessions/%s/kernel: only GET", method, id);
            return;
        }
        if (with_kernel(ctx, t, id, &s, reply) < 0)
            return;
        json_t *o = srv_kernel_json(s->kernel);
        srv_reply_json(reply, 200, o ? json_dumps(o, JSON_COMPACT) : NULL);
        json_decref(o);
        srv_session_unref(ctx->sessions, s);
        return;
    }
    if (strcmp(rest, "/cells") != 0) {
        srv_reply_error(reply, 404, "no endpoint /v1/sessions/%s%s", id, rest);
        return;
    }
    if (strcmp(method, "POST") != 0) {
        srv_reply_error(reply, 405, "%s /v1/sessions/%s/cells: only POST", method, id);
        return;
    }
    json_error_t jerr;
    json_t *req = json_loadb(body ? body : "", body ? body_len : 0, JSON_REJECT_DUPLICATES, &jerr), *v;
    const char *key, *code = NULL;
    uint64_t timeout_ms = DEFAULT_TIMEOUT_MS;
    if (!req) {
        srv_reply_error(reply, 400, "body:%d:%d: %s", jerr.line, jerr.column, jerr.text);
        return;
    }
    if (!json_is_object(req)) {
        srv_reply_error(reply, 400, "the body is a JSON object {\"code\": \"...\", \"timeout\": seconds}");
        goto out;
    }
    json_object_foreach(req, key, v) {
        if (strcmp(key, "code") == 0) {
            if (!json_is_string(v) || json_string_length(v) > MAX_CODE ||
                strlen(json_string_value(v)) != json_string_length(v)) {
                srv_reply_error(reply, 400, "code: a string of at most 4 MiB, without NUL");
                goto out;
            }
            code = json_string_value(v);
        } else if (strcmp(key, "timeout") == 0) {
            double sec = json_is_number(v) ? json_number_value(v) : -1;
            if (sec <= 0 || sec * 1000 > MAX_TIMEOUT_MS) {
                srv_reply_error(reply, 400, "timeout: seconds, a number above 0 and at most 3600");
                goto out;
            }
            timeout_ms = (uint64_t)(sec * 1000);
            if (!timeout_ms)
                timeout_ms = 1;
        } else {
            srv_reply_error(reply, 400, "unknown field '%s' (known: code, timeout)", key);
            goto out;
        }
    }
    if (!code) {
        srv_reply_error(reply, 400, "code: required");
        goto out;
    }
    srv_kernel_run_cell(ctx, t, id, code, timeout_ms, reply);
out:
    json_decref(req);
}
