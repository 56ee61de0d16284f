/* SPDX-License-Identifier: Apache-2.0 */
/* MCP over stdio: newline-delimited JSON-RPC on two fds the CLI moved
 * off 0 and 1 (cmd_mcp.c: close-on-exec, 0 and 1 are /dev/null), logs on
 * stderr. One reader (this thread); a tools/call gets its own thread, so
 * that a ping or a notifications/cancelled is read while a run goes on.
 * EOF on the input, SIGTERM or SIGINT end the session: every run in
 * flight is killed and every sandbox session it created is closed. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "aj_server.h"
#include "mcp.h"

/* A line longer than this is answered -32700 and skipped. */
#define MCP_MAX_LINE (16u << 20)
/* tools/call requests running at once on one stdio session. */
#define MCP_MAX_WORKERS 64

struct out {
    int fd;
    pthread_mutex_t lock;
    bool broken; /* the client went away: nothing more is written */
};

struct stdio_session {
    struct mcp_conn *conn;
    struct out out;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned workers;
};

/* One message, one line: the text and its newline, whole, under the
 * lock (tool calls answer from their own threads). */
static void out_send(void *sink, char *text)
{
    struct out *o = sink;
    char nl = '\n';
    size_t tlen = strlen(text), done = 0;

    (void)pthread_mutex_lock(&o->lock);
    while (!o->broken && done < tlen + 1) {
        struct iovec v[2];
        int k = 0;
        if (done < tlen)
            v[k++] = (struct iovec){.iov_base = text + done, .iov_len = tlen - done};
        v[k++] = (struct iovec){.iov_base = &nl, .iov_len = 1};
        ssize_t n = writev(o->fd, v, k);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            o->broken = true; /* the client went away */
            break;
        }
        done += (size_t)n;
    }
    (void)pthread_mutex_unlock(&o->lock);
    free(text);
}

struct work {
    struct stdio_session *s;
    json_t *msg;
};

static void *worker(void *arg)
{
    struct work *w = arg;
    struct stdio_session *s = w->s;

    mcp_handle(s->conn, w->msg, out_send, &s->out);
    free(w);
    (void)pthread_mutex_lock(&s->lock);
    if (--s->workers == 0)
        (void)pthread_cond_broadcast(&s->cond);
    (void)pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void dispatch(struct stdio_session *s, const char *line, size_t len)
{
    json_error_t e;
    json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &e);
    const char *m;

    if (!msg) {
        char buf[300];
        (void)snprintf(buf, sizeof(buf), "parse error: %d:%d: %s", e.line, e.column, e.text);
        char *t = mcp_error_text(NULL, MCP_PARSE_ERROR, buf);
        if (t)
            out_send(&s->out, t);
        return;
    }
    if (json_is_array(msg)) {
        /* JSON-RPC batches: 2025-03-26 only (2025-06-18 removed them). */
        json_decref(msg);
        char *t = mcp_error_text(NULL, MCP_INVALID_REQUEST, "batches are not supported: one message a line");
        if (t)
            out_send(&s->out, t);
        return;
    }
    m = json_string_value(json_object_get(msg, "method"));
    if (mcp_is_request(msg) && m && strcmp(m, "tools/call") == 0) {
        struct work *w = malloc(sizeof(*w));
        pthread_t th;
        pthread_attr_t attr;
        bool started = false;

        (void)pthread_mutex_lock(&s->lock);
        bool room = s->workers < MCP_MAX_WORKERS;
        if (room)
            s->workers++;
        (void)pthread_mutex_unlock(&s->lock);
        if (w && room) {
            w->s = s;
            w->msg = msg;
            (void)pthread_attr_init(&attr);
            (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            started = pthread_create(&th, &attr, worker, w) == 0;
            (void)pthread_attr_destroy(&attr);
        }
        if (!started) {
            char *t = mcp_error_text(json_object_get(msg, "id"), MCP_INTERNAL_ERROR,
                                     room ? "could not start the request" : "too many requests in flight");
            if (t)
                out_send(&s->out, t);
            json_decref(msg);
            free(w);
            if (room) {
                (void)pthread_mutex_lock(&s->lock);
                s->workers--;
                (void)pthread_mutex_unlock(&s->lock);
            }
        }
        return;
    }
    /* Everything else is quick, and answered in order. */
    mcp_handle(s->conn, msg, out_send, &s->out);
}

int mcp_stdio_serve(struct srv_ctx *ctx, struct srv_tenant *t, int in_fd, int out_fd)
{
    struct stdio_session s = {.out = {.fd = out_fd}};
    sigset_t stop;
    int sfd;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bool skipping = false;

    s.conn = mcp_conn_new(ctx, t, "stdio");
    if (!s.conn)
        return 1;
    (void)pthread_mutex_init(&s.out.lock, NULL);
    (void)pthread_mutex_init(&s.lock, NULL);
    (void)pthread_cond_init(&s.cond, NULL);
    (void)sigemptyset(&stop);
    (void)sigaddset(&stop, SIGTERM);
    (void)sigaddset(&stop, SIGINT);
    /* Blocked in every thread by the server's setup: read here. */
    sfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    (void)fprintf(stderr, "agentjail mcp: stdio: ready (tenant %s; the channel is fds %d and %d)\n", t->name, in_fd,
                  out_fd);
    for (;;) {
        struct pollfd p[2] = {{.fd = in_fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(p, sfd >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (sfd >= 0 && (p[1].revents & POLLIN)) {
            (void)fprintf(stderr, "agentjail mcp: stdio: signal: stopping\n");
            break;
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        if (cap - len < 65536) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, ncap);
            if (!nb)
                break;
            buf = nb;
            cap = ncap;
        }
        ssize_t n = read(in_fd, buf + len, cap - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break; /* EOF: the client is gone */
        len += (size_t)n;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
            size_t l = (size_t)(nl - start);
            if (!skipping && l && !(l == 1 && start[0] == '\r'))
                dispatch(&s, start, l);
            skipping = false;
            start = nl + 1;
        }
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
        if (len > MCP_MAX_LINE) {
            char *t2 = mcp_error_text(NULL, MCP_PARSE_ERROR, "a message longer than 16 MiB: skipped");
            if (t2)
                out_send(&s.out, t2);
            len = 0;
            skipping = true;
        }
        /* A big buffer goes back once its line is done with. */
        if (!len && cap > (1u << 20)) {
            free(buf);
            buf = NULL;
            cap = 0;
        }
    }
    free(buf);
    /* The client is gone (or we stop): kill its runs, wait for their
     * requests to end, close the sessions it left open. */
    mcp_conn_cancel_all(s.conn);
    (void)pthread_mutex_lock(&s.lock);
    while (s.workers)
        (void)pthread_cond_wait(&s.cond, &s.lock);
    (void)pthread_mutex_unlock(&s.lock);
    mcp_conn_free(s.conn);
    if (sfd >= 0)
        (void)close(sfd);
    (void)pthread_mutex_destroy(&s.out.lock);
    (void)pthread_mutex_destroy(&s.lock);
    (void)pthread_cond_destroy(&s.cond);
    (void)fprintf(stderr, "agentjail mcp: stdio: session ended\n");
    return 0;
}

/* The tenant a stdio session acts as: the one named, or the config's
 * only one. */
static struct srv_tenant *pick_tenant(struct srv_config *cfg, const char *name)
{
    if (!name)
        return cfg->n_tenants == 1 ? &cfg->tenants[0] : NULL;
    for (size_t i = 0; i < cfg->n_tenants; i++)
        if (strcmp(cfg->tenants[i].name, name) == 0)
            return &cfg->tenants[i];
    return NULL;
}

int srv_mcp_apply_opts(struct srv_config *cfg, const struct aj_server_opts *o, char *msg, size_t msg_size)
{
    if (o->mcp_in_fd < 0)
        return 0;
    if (o->policy_path) {
        free(cfg->policy_path);
        cfg->policy_path = strdup(o->policy_path);
    }
    if (o->profile) {
        free(cfg->profile);
        cfg->profile = strdup(o->profile);
    }
    if ((o->policy_path && !cfg->policy_path) || (o->profile && !cfg->profile)) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    if (o->policy_path || o->profile) {
        /* The tenants' policies were built from the config's at load:
         * again, from these. (A max_timeout the config's own policy
         * tightened stays: the bound only ever tightens.) */
        char key[300] = "", why[700];
        srv_tenants_clear(cfg);
        if (srv_tenants_build(cfg, key, sizeof(key), why, sizeof(why)) < 0) {
            (void)snprintf(msg, msg_size, "%s%s%s", key, key[0] ? ": " : "", why);
            return -1;
        }
    }
    if (!pick_tenant(cfg, o->tenant)) {
        if (o->tenant)
            (void)snprintf(msg, msg_size, "--tenant %s: no such tenant in the config", o->tenant);
        else
            (void)snprintf(msg, msg_size, "the config has %zu tenants: name the one this session acts as with "
                           "--tenant NAME", cfg->n_tenants);
        return -1;
    }
    return 0;
}

int srv_mcp_stdio_main(struct srv_ctx *ctx, const struct aj_server_opts *o)
{
    return mcp_stdio_serve(ctx, pick_tenant(&ctx->cfg, o->tenant), o->mcp_in_fd, o->mcp_out_fd);
}
