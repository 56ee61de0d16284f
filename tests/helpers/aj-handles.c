/* SPDX-License-Identifier: Apache-2.0 */
/* aj-handles: the asynchronous interface as embedders use it
 * (tests/integration/test_library_handles.py).
 *
 *   aj-handles [--pool N] loop N -- CMD...      N runs at once from one thread (one epoll loop);
 *                                                with AJ_HANDLES_FREE_POOL=1 the pool is freed
 *                                                as soon as they are started
 *   aj-handles [--pool N] threads T N -- CMD... T threads, N runs each, one at a time per thread
 *   aj-handles kill -- CMD...                    kill the run once it printed a line
 *   aj-handles free -- CMD...                    free the handle while the run goes on
 *   aj-handles stdin TEXT -- CMD...              TEXT down a stdin pipe, then EOF
 *   aj-handles lease-signal OFF -- CMD...        aj_set_lease_signal(SIGRTMIN+OFF) first, one run,
 *                                                then what setting it again answers
 *
 * Every run's stdout is a pipe the library makes; "@" in CMD's arguments
 * becomes the run's number. One JSON line per run ({"run", "rc", "status",
 * "exit_code", "signal", "stdout", "sandbox_id", "ms"}), then one summary
 * line ({"fds_before", "fds_after", "children_left", "wall_ms"}). With
 * AJ_HANDLES_EVENTS=DIR, run i's events go to DIR/i.jsonl. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_policy_model.h" /* internal: the struct, to set limits directly */
#include "count_fds.h"

#define MAX_RUNS 256
#define OUT_MAX 4096

struct run {
    int idx;
    struct aj_sandbox *h;
    int out;          /* our end of its stdout pipe, -1 at EOF */
    char buf[OUT_MAX];
    size_t len;
    bool ended;
    int rc;
    struct aj_error err;
    char *argv[64];
    char num[16];
    char events[4096];
    uint64_t t0, ms;
    unsigned rounds; /* aj_sandbox_process calls: a busy loop shows here */
};

static struct aj_policy pol;
static struct aj_pool *pool;
static char **cmd;
static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int start(struct run *r, int idx, const struct aj_stdio *in)
{
    struct aj_request req = AJ_REQUEST_INIT;
    size_t n = 0;
    int rc;

    memset(r, 0, sizeof(*r));
    r->idx = idx;
    r->out = -1;
    snprintf(r->num, sizeof(r->num), "%d", idx);
    for (; cmd[n] && n < 63; n++)
        r->argv[n] = strcmp(cmd[n], "@") == 0 ? r->num : cmd[n];
    r->argv[n] = NULL;
    req.argv = r->argv;
    req.stdio[1] = AJ_STDIO_PIPE_NEW;
    req.stdio[2] = AJ_STDIO_OF_FD(2);
    if (getenv("AJ_HANDLES_EVENTS")) {
        snprintf(r->events, sizeof(r->events), "%s/%d.jsonl", getenv("AJ_HANDLES_EVENTS"), idx);
        req.events_path = r->events;
    }
    if (in)
        req.stdio[0] = *in;
    r->t0 = now_ms();
    rc = pool ? aj_pool_start(pool, &req, &r->h, &r->err) : aj_sandbox_start(&pol, &req, &r->h, &r->err);
    if (rc < 0) {
        fprintf(stderr, "aj-handles: start: %s\n", r->err.msg);
        return rc;
    }
    r->out = aj_sandbox_take_pipe(r->h, 1);
    if (r->out < 0) {
        /* A run that ended at start has its pipe too; none is a bug here. */
        fprintf(stderr, "aj-handles: no stdout pipe (%d)\n", r->out);
        return -1;
    }
    (void)fcntl(r->out, F_SETFL, O_NONBLOCK);
    return 0;
}

/* Read what is there; true at EOF. */
static bool drain(struct run *r)
{
    for (;;) {
        char tmp[4096];
        ssize_t n = read(r->out, tmp, sizeof(tmp));
        if (n > 0) {
            size_t k = (size_t)n < sizeof(r->buf) - 1 - r->len ? (size_t)n : sizeof(r->buf) - 1 - r->len;
            memcpy(r->buf + r->len, tmp, k);
            r->len += k;
            continue;
        }
        if (n == 0) {
            close(r->out);
            r->out = -1;
            return true;
        }
        return false; /* EAGAIN */
    }
}

static void report(struct run *r)
{
    const struct aj_result *res;

    r->rc = aj_sandbox_wait(r->h, &r->err);
    res = aj_sandbox_result(r->h);
    r->buf[r->len] = '\0';
    for (char *p = r->buf; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    pthread_mutex_lock(&print_mu);
    printf("{\"run\": %d, \"rc\": %d, \"status\": \"%s\", \"exit_code\": %d, \"signal\": %d, \"stdout\": \"%s\", "
           "\"sandbox_id\": \"%s\", \"ms\": %llu, \"rounds\": %u}\n",
           r->idx, r->rc, res ? aj_status_name(res->status) : "none", res ? res->exit_code : -1,
           res ? res->signal : -1, r->buf, aj_sandbox_id(r->h), (unsigned long long)r->ms, r->rounds);
    fflush(stdout);
    pthread_mutex_unlock(&print_mu);
    aj_sandbox_free(r->h);
    r->h = NULL;
}

/* N runs in flight at once, one thread, one epoll set: each run's
 * pollable fd and its stdout pipe. */
static int mode_loop(int n)
{
    static struct run runs[MAX_RUNS];
    int ep = epoll_create1(EPOLL_CLOEXEC), open_items = 0;

    for (int i = 0; i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN};
        if (start(&runs[i], i, NULL) < 0)
            return 1;
        ev.data.u64 = (uint64_t)i << 1;
        epoll_ctl(ep, EPOLL_CTL_ADD, aj_sandbox_fd(runs[i].h), &ev);
        ev.data.u64 = ((uint64_t)i << 1) | 1;
        epoll_ctl(ep, EPOLL_CTL_ADD, runs[i].out, &ev);
        open_items += 2;
    }
    if (pool && getenv("AJ_HANDLES_FREE_POOL")) {
        /* The runs keep what they need of it. */
        aj_pool_free(pool);
        pool = NULL;
    }
    while (open_items > 0) {
        struct epoll_event evs[64];
        int k = epoll_wait(ep, evs, 64, -1);
        for (int j = 0; j < k; j++) {
            struct run *r = &runs[evs[j].data.u64 >> 1];
            if (evs[j].data.u64 & 1) {
                int fd = r->out;
                if (fd >= 0 && drain(r)) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); /* closed: gone from the set already */
                    open_items--;
                }
            } else if (!r->ended && (r->rounds++, aj_sandbox_process(r->h) == 1)) {
                /* Ended: its fd reads ready for good; out of the set. */
                epoll_ctl(ep, EPOLL_CTL_DEL, aj_sandbox_fd(r->h), NULL);
                r->ended = true;
                r->ms = now_ms() - r->t0;
                open_items--;
            }
        }
    }
    close(ep);
    for (int i = 0; i < n; i++)
        report(&runs[i]);
    return 0;
}

/* One run to its end in the calling thread: its fd and its pipe polled. */
static void run_one(struct run *r)
{
    while (!r->ended || r->out >= 0) {
        struct pollfd p[2] = {{.fd = r->ended ? -1 : aj_sandbox_fd(r->h), .events = POLLIN},
                              {.fd = r->out, .events = POLLIN}};
        (void)poll(p, 2, -1);
        if (p[1].revents)
            (void)drain(r);
        if (p[0].revents && (r->rounds++, aj_sandbox_process(r->h) == 1)) {
            r->ended = true;
            r->ms = now_ms() - r->t0;
        }
    }
}

struct thread_arg {
    int t, n;
    int failures;
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    struct run *r = malloc(sizeof(*r));

    for (int i = 0; r && i < a->n; i++) {
        if (start(r, a->t * 1000 + i, NULL) < 0) {
            a->failures++;
            continue;
        }
        run_one(r);
        report(r);
    }
    free(r);
    return NULL;
}

static int mode_threads(int t, int n)
{
    pthread_t th[32];
    struct thread_arg args[32];
    int failures = 0;

    for (int i = 0; i < t; i++) {
        args[i] = (struct thread_arg){.t = i, .n = n};
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (int i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        failures += args[i].failures;
    }
    return failures ? 1 : 0;
}

/* Kill (or free) once the payload printed its first line. */
static int mode_kill(bool free_it)
{
    static struct run r;

    if (start(&r, 0, NULL) < 0)
        return 1;
    while (!memchr(r.buf, '\n', r.len) && !r.ended) {
        struct pollfd p[2] = {{.fd = aj_sandbox_fd(r.h), .events = POLLIN}, {.fd = r.out, .events = POLLIN}};
        (void)poll(p, 2, -1);
        if (p[1].revents && drain(&r))
            break;
        if (p[0].revents && aj_sandbox_process(r.h) == 1)
            r.ended = true;
    }
    if (free_it) {
        uint64_t t0 = now_ms();
        char id[33];
        snprintf(id, sizeof(id), "%s", aj_sandbox_id(r.h));
        aj_sandbox_free(r.h);
        if (r.out >= 0)
            close(r.out);
        printf("{\"run\": 0, \"freed\": true, \"sandbox_id\": \"%s\", \"free_ms\": %llu}\n", id,
               (unsigned long long)(now_ms() - t0));
        return 0;
    }
    fprintf(stderr, "aj-handles: kill: %d\n", aj_sandbox_kill(r.h, SIGTERM));
    run_one(&r);
    report(&r);
    return 0;
}

static int mode_stdin(const char *text)
{
    static struct run r;
    struct aj_stdio in = AJ_STDIO_PIPE_NEW;
    int w;

    if (start(&r, 0, &in) < 0)
        return 1;
    w = aj_sandbox_take_pipe(r.h, 0);
    if (w < 0 || write(w, text, strlen(text)) != (ssize_t)strlen(text))
        return 1;
    close(w); /* EOF for the payload */
    run_one(&r);
    report(&r);
    return 0;
}

/* The lease signal is the process's choice until the library's thread
 * runs: set before the first run, refused after (but the same value). */
static int mode_lease_signal(int off)
{
    static struct run r;
    struct aj_error err = {0};
    int first = aj_set_lease_signal(SIGRTMIN + off, &err), other, same, bad;

    if (start(&r, 0, NULL) < 0)
        return 1;
    run_one(&r);
    report(&r);
    other = aj_set_lease_signal(SIGRTMIN + off + 1, &err);
    same = aj_set_lease_signal(SIGRTMIN + off, &err);
    bad = aj_set_lease_signal(SIGTERM, &err);
    printf("{\"set_first\": %d, \"set_other_after\": %d, \"set_same_after\": %d, \"set_sigterm\": %d}\n", first,
           other, same, bad);
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1, fds_before, rc = 2;
    uint64_t t0 = now_ms();
    const char *mode;

    aj_policy_init(&pol);
    fds_before = count_fds(); /* before any pool: what is left after it is gone */
    if (i + 1 < argc && strcmp(argv[i], "--pool") == 0) {
        struct aj_error err = {0};
        if (aj_pool_new(&pol, (unsigned)atoi(argv[i + 1]), &pool, &err) < 0) {
            fprintf(stderr, "aj-handles: %s\n", err.msg);
            return 1;
        }
        i += 2;
    }
    if (i >= argc)
        goto usage;
    mode = argv[i++];
    {
        int dd = i;
        while (dd < argc && strcmp(argv[dd], "--") != 0)
            dd++;
        if (dd + 1 >= argc)
            goto usage;
        cmd = argv + dd + 1;
    }
    if (strcmp(mode, "loop") == 0)
        rc = mode_loop(atoi(argv[i]) > MAX_RUNS ? MAX_RUNS : atoi(argv[i]));
    else if (strcmp(mode, "threads") == 0)
        rc = mode_threads(atoi(argv[i]) > 32 ? 32 : atoi(argv[i]), atoi(argv[i + 1]));
    else if (strcmp(mode, "kill") == 0)
        rc = mode_kill(false);
    else if (strcmp(mode, "free") == 0)
        rc = mode_kill(true);
    else if (strcmp(mode, "stdin") == 0)
        rc = mode_stdin(argv[i]);
    else if (strcmp(mode, "lease-signal") == 0)
        rc = mode_lease_signal(atoi(argv[i]));
    else
        goto usage;
    {
        uint64_t wall = now_ms() - t0;
        aj_pool_free(pool);
        printf("{\"fds_before\": %d, \"fds_after\": %d, \"children_left\": %s, \"wall_ms\": %llu}\n", fds_before,
               count_fds(), waitpid(-1, NULL, WNOHANG | __WALL) >= 0 ? "true" : "false", (unsigned long long)wall);
    }
    aj_policy_clear(&pol);
    return rc;
usage:
    fprintf(stderr, "usage: aj-handles [--pool N] loop N|threads T N|kill|free|stdin TEXT -- CMD...\n");
    return 2;
}
