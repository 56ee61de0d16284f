/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP side of `agentjail serve`: libmicrohttpd with a thread per
 * connection, bearer-token tenants, JSON in and out. Handlers never touch
 * a sandbox: they hand runs to the runner thread (runner.c) and wait for
 * its records. Every error is {"error": "..."}. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "aj_server.h"
#include "mcp.h"
#include "srv.h"
#include "srv_fwd.h"

struct srv_conn {
    struct srv_upload *upload; /* a streamed file PUT (session.c) */
    struct srv_fwd *fwd;       /* a streamed file PUT forwarded to the replica of its session (forward.c) */
    char *body;
    size_t len;
    bool responded; /* a response was queued at the first call (413 by Content-Length) */
    bool too_large; /* the body outgrew max_body_bytes: dropped, 413 at its end */
};

/* ---- responses ---------------------------------------------------------------------- */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type,
                                 const char *retry_after)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    if (!text)
        return MHD_NO; /* out of memory: MHD closes the connection */
    resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type) != MHD_YES ||
        (retry_after && MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry_after) != MHD_YES)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, char *json)
{
    return send_text(c, status, json, "application/json", NULL);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    json_t *o;
    char *s;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    o = json_pack("{s:s}", "error", msg);
    s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_json(c, status, s);
}

/* ---- auth ---------------------------------------------------------------------------- */

/* The tenant whose token_sha256 is the sha256 of the bearer token, or
 * NULL. Every tenant is compared, each in constant time, so the time
 * taken says nothing about which digest came close. */
static struct srv_tenant *authenticate(struct srv_ctx *ctx, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    struct sha256_ctx sc;
    uint8_t digest[SHA256_DIGEST_SIZE];
    struct srv_tenant *found = NULL;

    if (!h || strncmp(h, "Bearer ", 7) != 0 || !h[7])
        return NULL;
    sha256_init(&sc);
    sha256_update(&sc, strlen(h + 7), (const uint8_t *)h + 7);
    sha256_digest(&sc, sizeof(digest), digest);
    for (size_t i = 0; i < ctx->cfg.n_tenants; i++)
        if (memeql_sec(digest, ctx->cfg.tenants[i].token_sha256, sizeof(digest)))
            found = &ctx->cfg.tenants[i];
    return found;
}

/* ---- GET /v1/runs/{id}/stream ------------------------------------------------------------- */

/* Server-Sent Events: "start" (id, argv), "stdout" and "stderr" chunks
 * ({"data": TEXT}, in the order the runner read them; what the server
 * keeps of each stream, up to max_output_bytes), "event" for each audit
 * event of the run but start and exit (escape attempts, canaries, limits:
 * as the library writes them), then "exit" with the record, and the
 * stream ends. A run that has ended already (in the store)
 * is replayed the same way. The content reader blocks in its connection's
 * own thread (thread per connection) until there is output or an end. */
struct srv_stream {
    struct srv_ctx *ctx;
    struct srv_run *r; /* live: a reference; NULL for a replay */
    size_t off[3];
    bool started, ended;
    char *pending; /* the event being sent */
    size_t len, pos;
};

static char *sse_event(const char *type, json_t *data)
{
    char *d = data ? json_dumps(data, JSON_COMPACT) : NULL, *out = NULL;

    json_decref(data);
    if (d && asprintf(&out, "event: %s\ndata: %s\n\n", type, d) < 0)
        out = NULL;
    free(d);
    return out;
}

static char *sse_next(struct srv_stream *st)
{
    char chunk[8192], *rec;
    int stream = 0;
    ssize_t n;

    if (!st->started) {
        st->started = true;
        rec = srv_runner_record(st->ctx->rn, st->r);
        json_t *o = rec ? json_loads(rec, 0, NULL) : NULL, *start;
        free(rec);
        if (!o)
            return NULL;
        start = json_pack("{s:O, s:O}", "id", json_object_get(o, "id"), "argv", json_object_get(o, "argv"));
        json_decref(o);
        return sse_event("start", start);
    }
    n = srv_runner_next_output(st->ctx->rn, st->r, st->off, chunk, sizeof(chunk), &stream);
    if (n > 0 && stream == 3)
        return sse_event("event", json_loadb(chunk, (size_t)n, 0, NULL));
    if (n > 0)
        return sse_event(stream == 1 ? "stdout" : "stderr",
                         json_pack("{s:o}", "data", srv_text_json(chunk, (size_t)n)));
    if (n < 0)
        return strdup(": keep-alive\n\n"); /* a quiet run: the connection is not idle */
    st->ended = true;
    rec = srv_runner_record(st->ctx->rn, st->r);
    json_t *o = rec ? json_loads(rec, 0, NULL) : NULL;
    free(rec);
    return sse_event("exit", o);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct srv_stream *st = cls;

    (void)pos;
    while (st->pos == st->len) {
        free(st->pending);
        st->pending = NULL;
        st->len = st->pos = 0;
        if (st->ended || !st->r)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->pending = sse_next(st);
        if (!st->pending)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        st->len = strlen(st->pending);
    }
    size_t k = st->len - st->pos < max ? st->len - st->pos : max;
    memcpy(buf, st->pending + st->pos, k);
    st->pos += k;
    return (ssize_t)k;
}

static void sse_free(void *cls)
{
    struct srv_stream *st = cls;

    if (st->r)
        srv_run_unref(st->ctx->rn, st->r);
    free(st->pending);
    free(st);
}

/* A finished run's events from its stored record, all at once: start,
 * its audit events, stdout, stderr, exit. */
static char *sse_replay(const char *rec_text)
{
    json_t *o = json_loads(rec_text, 0, NULL), *e;
    char *ev[4] = {NULL}, *out = NULL, *events = strdup("");
    size_t i;

    if (!o || !events) {
        json_decref(o);
        free(events);
        return NULL;
    }
    json_array_foreach(json_object_get(o, "events"), i, e) {
        char *one = sse_event("event", json_incref(e)), *both = NULL;
        if (!one || asprintf(&both, "%s%s", events, one) < 0)
            both = NULL;
        free(one);
        free(events);
        events = both;
        if (!events) {
            json_decref(o);
            return NULL;
        }
    }
    ev[0] = sse_event("start", json_pack("{s:O, s:O}", "id", json_object_get(o, "id"), "argv",
                                         json_object_get(o, "argv")));
    ev[1] = sse_event("stdout", json_pack("{s:O}", "data", json_object_get(o, "stdout")));
    ev[2] = sse_event("stderr", json_pack("{s:O}", "data", json_object_get(o, "stderr")));
    ev[3] = sse_event("exit", o); /* takes o */
    if (ev[0] && ev[1] && ev[2] && ev[3] && asprintf(&out, "%s%s%s%s%s", ev[0], events, ev[1], ev[2], ev[3]) < 0)
        out = NULL;
    free(events);
    for (int k = 0; k < 4; k++)
        free(ev[k]);
    return out;
}

static enum MHD_Result stream_run(struct srv_ctx *ctx, struct MHD_Connection *c, struct srv_tenant *t,
                                  const char *id)
{
    struct srv_stream *st;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    char *rec = NULL;
    int rc;

    if (!srv_valid_id(id))
        return send_error(c, MHD_HTTP_NOT_FOUND, "no run with that id");
    st = calloc(1, sizeof(*st));
    if (!st)
        return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    st->ctx = ctx;
    st->r = srv_runner_find(ctx->rn, t, id);
    if (!st->r) {
        rc = srv_store_get_json(ctx->store, t->name, id, &rec);
        if (rc < 0) {
            free(st);
            return rc == -ENOENT ? send_error(c, MHD_HTTP_NOT_FOUND, "no run %s", id)
                                 : send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "the run store could not be read");
        }
        st->pending = sse_replay(rec);
        free(rec);
        if (!st->pending) {
            free(st);
            return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        }
        st->len = strlen(st->pending);
        st->started = st->ended = true;
    }
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
    if (!resp) {
        sse_free(st);
        return MHD_NO;
    }
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream") != MHD_YES ||
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") != MHD_YES) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- GET /metrics ------------------------------------------------------------------------ */

static enum MHD_Result metrics(struct srv_ctx *ctx, struct MHD_Connection *c)
{
    char *text = srv_metrics_text(ctx->rn, &ctx->cfg);

    if (!text)
        return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    return send_text(c, MHD_HTTP_OK, text, "text/plain; version=0.0.4", NULL);
}

/* ---- the rest of /v1/: srv_api_call --------------------------------------------------------- */

/* Send a reply of srv_api_call's shape (its body taken). */
static enum MHD_Result queue_reply(struct MHD_Connection *c, struct srv_reply reply)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    char ra[16];

    if (!reply.body)
        return MHD_NO; /* out of memory: MHD closes the connection */
    resp = MHD_create_response_from_buffer(reply.len, reply.body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        srv_reply_clear(&reply);
        return MHD_NO;
    }
    reply.body = NULL; /* the response's now */
    (void)snprintf(ra, sizeof(ra), "%u", reply.retry_after);
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, reply.content_type) != MHD_YES ||
        (reply.retry_after && MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra) != MHD_YES)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(c, reply.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A complete-body /v1/ request, answered by srv_api_call as the MCP
 * server's calls are. */
static enum MHD_Result send_reply(struct MHD_Connection *c, struct srv_ctx *ctx, struct srv_tenant *t,
                                  const char *method, const char *url, const struct srv_conn *cc)
{
    struct srv_reply reply;

    srv_api_call(ctx, t, method, url, cc->body, cc->len, &reply);
    return queue_reply(c, reply);
}

/* GET /v1/sessions/ID/files/PATH: a regular file is streamed from its
 * fd (MHD closes it); a directory's listing and errors are JSON. */
static enum MHD_Result get_file(struct MHD_Connection *c, struct srv_ctx *ctx, struct srv_tenant *t,
                                const char *url)
{
    struct srv_reply reply = {0};
    struct MHD_Response *resp;
    enum MHD_Result ret;
    uint64_t size = 0;
    int fd = -1;

    if (!srv_files_open_get(ctx, t, url, &fd, &size, &reply))
        return queue_reply(c, reply);
    resp = MHD_create_response_from_fd64(size, fd);
    if (!resp) {
        (void)close(fd);
        return MHD_NO;
    }
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream") != MHD_YES) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- another replica's run or session (forward.c) ------------------------------------------ */

/* How long the owner may stay silent: a POST (a run, a cell) waits for
 * its run, at most the tenant's timeout; a stream has a keep-alive at
 * least every 15 s; anything else answers at once. */
static unsigned fwd_idle_s(const struct srv_ctx *ctx, const struct srv_tenant *t, const char *method,
                           const char *url)
{
    size_t n = strlen(url);

    if (strcmp(method, "POST") == 0)
        return (unsigned)(t->max_timeout_ms / 1000) + 1 + ctx->cfg.replica_timeout;
    if (n > 7 && strcmp(url + n - 7, "/stream") == 0)
        return ctx->cfg.replica_timeout + 15;
    return ctx->cfg.replica_timeout;
}

/* A complete-body request, proxied to addr (taken). */
static enum MHD_Result forward(struct srv_ctx *ctx, struct MHD_Connection *c, const struct srv_tenant *t,
                               const char *method, const char *url, const struct srv_conn *cc, char *addr)
{
    bool has_body = cc->len || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0;
    struct srv_reply reply = {0};
    struct srv_fwd *f = NULL;
    enum MHD_Result ret = MHD_NO;
    int rc;

    rc = srv_fwd_open(ctx, c, addr, method, url, has_body ? (int64_t)cc->len : -2, fwd_idle_s(ctx, t, method, url),
                      &f, &reply);
    free(addr);
    if (rc < 0)
        return queue_reply(c, reply);
    srv_fwd_write(f, cc->body, cc->len);
    if (srv_fwd_finish(f, c, &ret, &reply) < 0)
        return queue_reply(c, reply);
    return ret;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static enum MHD_Result route(struct srv_ctx *ctx, struct MHD_Connection *c, const char *url, const char *method,
                             struct srv_conn *cc)
{
    struct srv_tenant *t;

    if (strcmp(url, "/metrics") == 0) {
        if (strcmp(method, "GET") != 0)
            return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s /metrics: only GET", method);
        return metrics(ctx, c);
    }
    /* Liveness and readiness, for a load balancer or an orchestrator: no
     * token, nothing about any run. */
    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0) {
        if (strcmp(method, "GET") != 0)
            return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s %s: only GET", method, url);
        if (url[1] == 'h')
            return send_json(c, MHD_HTTP_OK, strdup("{\"status\":\"ok\"}"));
        if (!srv_runner_accepting(ctx->rn))
            return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting down");
        if (!srv_runner_warm(ctx->rn))
            return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "warming up: the warm pools are being filled");
        if (srv_store_check_writable(ctx->store) < 0)
            return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "the run store is not writable");
        return send_json(c, MHD_HTTP_OK, strdup("{\"status\":\"ready\"}"));
    }
    if (strcmp(url, "/mcp") == 0) /* MCP over Streamable HTTP (mcp_http.c) */
        return srv_mcp_http(ctx, c, authenticate(ctx, c), method, cc->body, cc->len);
    if (strncmp(url, "/v1/", 4) != 0)
        return send_error(c, MHD_HTTP_NOT_FOUND, "no endpoint %s", url);
    t = authenticate(ctx, c);
    if (!t)
        return send_error(c, MHD_HTTP_UNAUTHORIZED, "a valid 'Authorization: Bearer TOKEN' is required");
    {
        struct srv_reply reply = {0};
        char *addr = NULL;
        int fr = srv_fwd_route(ctx, t, c, url, &addr, &reply);
        if (fr < 0)
            return queue_reply(c, reply);
        if (fr > 0)
            return forward(ctx, c, t, method, url, cc, addr);
    }
    if (strncmp(url, "/v1/runs/", 9) == 0 && strlen(url) == 9 + 32 + 7 && strcmp(url + 9 + 32, "/stream") == 0) {
        char id[33];
        memcpy(id, url + 9, 32);
        id[32] = '\0';
        if (strcmp(method, "GET") != 0)
            return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s %s: only GET", method, url);
        return stream_run(ctx, c, t, id);
    }
    if (strcmp(method, "GET") == 0 && srv_is_files_path(url))
        return get_file(c, ctx, t, url);
    return send_reply(c, ctx, t, method, url, cc);
}

static enum MHD_Result begin_upload(struct srv_ctx *ctx, struct MHD_Connection *c, const char *url,
                                    struct srv_conn *cc, const char *content_length)
{
    struct srv_tenant *t = authenticate(ctx, c);
    struct srv_reply reply = {0};

    if (!t) {
        cc->responded = true;
        return send_error(c, MHD_HTTP_UNAUTHORIZED, "a valid 'Authorization: Bearer TOKEN' is required");
    }
    if (content_length && strtoull(content_length, NULL, 10) > ctx->cfg.max_file_bytes) {
        cc->responded = true;
        return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the file is larger than %llu bytes (max_file_bytes)",
                          (unsigned long long)ctx->cfg.max_file_bytes);
    }
    {
        char *addr = NULL;
        int fr = srv_fwd_route(ctx, t, c, url, &addr, &reply);
        if (fr > 0) {
            /* The body goes on to the owner as it comes, as it would into
             * a workspace here. */
            int64_t len = content_length ? (int64_t)strtoull(content_length, NULL, 10) : -1;
            fr = srv_fwd_open(ctx, c, addr, "PUT", url, len, ctx->cfg.replica_timeout, &cc->fwd, &reply);
            free(addr);
            if (fr == 0)
                return MHD_YES;
        }
        if (fr < 0) {
            cc->responded = true;
            return queue_reply(c, reply);
        }
    }
    if (srv_upload_begin(ctx, t, url, &cc->upload, &reply) < 0) {
        cc->responded = true;
        return queue_reply(c, reply);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct srv_ctx *ctx = cls;
    struct srv_conn *cc = *con_cls;

    (void)version;
    if (!cc) {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        cc = calloc(1, sizeof(*cc));
        if (!cc)
            return MHD_NO;
        *con_cls = cc;
        __atomic_add_fetch(&ctx->in_flight, 1, __ATOMIC_SEQ_CST);
        /* A file PUT is streamed into the workspace as it comes (capped
         * by max_file_bytes and the quota, not max_body_bytes). */
        if (strcmp(method, "PUT") == 0 && srv_is_files_path(url))
            return begin_upload(ctx, c, url, cc, cl);
        /* Refused before a byte of it is read. */
        if (cl && strtoull(cl, NULL, 10) > ctx->cfg.max_body_bytes) {
            cc->responded = true;
            return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the body is larger than %zu bytes",
                              ctx->cfg.max_body_bytes);
        }
        return MHD_YES;
    }
    if (cc->responded) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cc->fwd) {
        struct srv_reply reply = {0};
        struct srv_fwd *f = cc->fwd;
        enum MHD_Result ret = MHD_NO;
        if (*upload_data_size) {
            srv_fwd_write(f, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        cc->fwd = NULL; /* the response's, or freed */
        if (srv_fwd_finish(f, c, &ret, &reply) < 0)
            return queue_reply(c, reply);
        return ret;
    }
    if (cc->upload) {
        struct srv_reply reply = {0};
        if (*upload_data_size) {
            srv_upload_write(cc->upload, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        srv_upload_end(cc->upload, &reply);
        srv_upload_free(cc->upload);
        cc->upload = NULL;
        return queue_reply(c, reply);
    }
    if (*upload_data_size) {
        /* A body without a Content-Length (chunked) that grows too large:
         * MHD takes no response in the middle of an upload, so the rest
         * is read and dropped, and the 413 goes at its end. */
        if (cc->too_large || cc->len + *upload_data_size > ctx->cfg.max_body_bytes) {
            cc->too_large = true;
            *upload_data_size = 0;
            return MHD_YES;
        }
        char *p = realloc(cc->body, cc->len + *upload_data_size + 1);
        if (!p)
            return MHD_NO;
        memcpy(p + cc->len, upload_data, *upload_data_size);
        cc->body = p;
        cc->len += *upload_data_size;
        cc->body[cc->len] = '\0';
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cc->too_large)
        return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the body is larger than %zu bytes",
                          ctx->cfg.max_body_bytes);
    return route(ctx, c, url, method, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct srv_ctx *ctx = cls;
    struct srv_conn *cc = *con_cls;

    (void)c;
    (void)toe;
    if (cc) {
        srv_upload_free(cc->upload); /* a client that left mid-upload: the unnamed file goes */
        srv_fwd_free(cc->fwd);       /* or the forwarded request: the owner sees its connection close */
        free(cc->body);
        free(cc);
        *con_cls = NULL;
        __atomic_sub_fetch(&ctx->in_flight, 1, __ATOMIC_SEQ_CST);
    }
}

/* ---- listening ------------------------------------------------------------------------------ */

/* The listening socket, made here (close-on-exec) and handed to MHD.
 * "unix:/path" or "HOST:PORT" (an IPv4 or [IPv6] literal; port 0: any,
 * printed). */
static int listen_on(const char *spec, char **unix_path, char *msg, size_t msg_size)
{
    int fd = -1;

    *unix_path = NULL;
    if (strncmp(spec, "unix:", 5) == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct stat st;
        const char *path = spec + 5;
        if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
            (void)snprintf(msg, msg_size, "listen: unix:PATH needs an absolute path shorter than %zu bytes",
                           sizeof(sa.sun_path));
            return -1;
        }
        /* A socket left by a previous server is replaced; anything else
         * at the path is not ours to remove. */
        if (lstat(path, &st) == 0) {
            if (!S_ISSOCK(st.st_mode)) {
                (void)snprintf(msg, msg_size, "listen: %s exists and is not a socket", path);
                return -1;
            }
            (void)unlink(path);
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
            (void)snprintf(msg, msg_size, "listen: %s: %s", path, strerror(errno));
            goto fail;
        }
        *unix_path = strdup(path);
        if (!*unix_path) {
            (void)unlink(path);
            (void)snprintf(msg, msg_size, "out of memory");
            goto fail;
        }
        (void)fprintf(stderr, "agentjail serve: listening on unix:%s\n", path);
        return fd;
    }

    char host[64];
    const char *colon = strrchr(spec, ':');
    char *end;
    unsigned long port;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    int one = 1;

    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host)) {
        (void)snprintf(msg, msg_size, "listen: '%s' is not HOST:PORT or unix:PATH", spec);
        return -1;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port > 65535) {
        (void)snprintf(msg, msg_size, "listen: '%s': the port is 0 to 65535", spec);
        return -1;
    }
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        host[strlen(host) - 1] = '\0';
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1) {
            (void)snprintf(msg, msg_size, "listen: '%s': not an IPv6 address", host + 1);
            return -1;
        }
        sl = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, &s4->sin_addr) != 1) {
            (void)snprintf(msg, msg_size, "listen: '%s': not an IPv4 address (or [IPv6])", host);
            return -1;
        }
        sl = sizeof(*s4);
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        (void)snprintf(msg, msg_size, "listen: %s: %s", spec, strerror(errno));
        goto fail;
    }
    port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
    (void)fprintf(stderr, "agentjail serve: listening on %s:%lu\n", host, port);
    return fd;
fail:
    if (fd >= 0)
        (void)close(fd);
    return -1;
}

/* ---- the policy ------------------------------------------------------------------------------ */

/* The policy runs get: the default, or the config's profile and file,
 * with a timeout of at most max_timeout (a policy's own tighter timeout
 * wins and becomes the bound requests are checked against). */
static int make_policy(struct srv_config *cfg, struct aj_policy **ret, char *msg, size_t msg_size)
{
    struct aj_policy *pol = aj_policy_new();
    struct aj_error err = {0};
    char *json = NULL;
    json_t *root = NULL, *to;
    char val[32];

    if (!pol) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    if ((cfg->profile && aj_policy_load_profile(pol, cfg->profile, &err) < 0) ||
        (cfg->policy_path && aj_policy_load_file(pol, cfg->policy_path, &err) < 0))
        goto fail;
    json = aj_policy_to_json(pol, true);
    root = json ? json_loads(json, 0, NULL) : NULL;
    if (!root) {
        (void)snprintf(err.msg, sizeof(err.msg), "out of memory");
        goto fail;
    }
    to = json_object_get(json_object_get(root, "limits"), "timeout");
    uint64_t ms = 0;
    if (json_is_string(to) && aj_parse_duration_ms(json_string_value(to), &ms) == 0 && ms > 0 &&
        ms <= cfg->max_timeout_ms) {
        cfg->max_timeout_ms = ms;
    } else {
        (void)snprintf(val, sizeof(val), "%llums", (unsigned long long)cfg->max_timeout_ms);
        if (aj_policy_set(pol, "limits.timeout", val, &err) < 0)
            goto fail;
    }
    if (aj_policy_validate(pol, &err) < 0)
        goto fail;
    json_decref(root);
    free(json);
    *ret = pol;
    return 0;
fail:
    (void)snprintf(msg, msg_size, "policy: %s", err.msg);
    json_decref(root);
    free(json);
    aj_policy_free(pol);
    return -1;
}

/* Runs' audit events files: "events/" beside the store (the server's
 * directory, 0700), emptied of what a killed server left. The library
 * writes each run's events there (refusing a symlink); the runner reads
 * them back and removes each file as its run ends. */
static char *make_events_dir(const char *store, char *msg, size_t msg_size)
{
    const char *slash = strrchr(store, '/');
    char *dir = NULL;
    DIR *d;
    int fd;

    if (asprintf(&dir, "%.*s/events", (int)(slash - store), store) < 0) {
        (void)snprintf(msg, msg_size, "out of memory");
        return NULL;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        (void)snprintf(msg, msg_size, "events: mkdir %s: %s", dir, strerror(errno));
        free(dir);
        return NULL;
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        (void)snprintf(msg, msg_size, "events: %s: %s", dir, strerror(errno));
        if (fd >= 0)
            (void)close(fd);
        free(dir);
        return NULL;
    }
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            (void)unlinkat(dirfd(d), e->d_name, 0);
    (void)closedir(d);
    return dir;
}

/* ---- the server ------------------------------------------------------------------------------ */

/* libmicrohttpd on the listening socket: a thread per connection, at
 * most max_connections, max_connections_per_ip of them from one address
 * (so that one client holding connections open, slowly or not at all
 * sending, cannot take every thread: slowloris), each closed after
 * connection_timeout seconds without a byte; TLS when configured. */
static struct MHD_Daemon *start_daemon(struct srv_ctx *ctx, int lfd)
{
    struct MHD_OptionItem opts[12];
    size_t n = 0;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;

    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, lfd, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, ctx};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, ctx->cfg.max_connections, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, ctx->cfg.connection_timeout, NULL};
    if (ctx->cfg.max_connections_per_ip)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, ctx->cfg.max_connections_per_ip,
                                            NULL};
    if (ctx->cfg.tls_cert_pem) {
        flags |= MHD_USE_TLS;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, ctx->cfg.tls_cert_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, ctx->cfg.tls_key_pem};
    }
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, ctx, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
}

int aj_server_main(const char *config_path)
{
    const struct aj_server_opts o = {.config_path = config_path, .mcp_in_fd = -1, .mcp_out_fd = -1};

    return aj_server_run(&o);
}

int aj_server_run(const struct aj_server_opts *o)
{
    const char *config_path = o->config_path;
    struct srv_ctx ctx = {0};
    struct MHD_Daemon *d = NULL;
    char msg[1024];
    char *unix_path = NULL, *events_dir = NULL;
    int lfd = -1, status = 1, sig;
    sigset_t stop;

    if (srv_config_load(config_path, &ctx.cfg, msg, sizeof(msg)) < 0 ||
        srv_mcp_apply_opts(&ctx.cfg, o, msg, sizeof(msg)) < 0) {
        (void)fprintf(stderr, "agentjail serve: %s\n", msg);
        srv_config_clear(&ctx.cfg);
        return 2;
    }
    if (make_policy(&ctx.cfg, &ctx.pol, msg, sizeof(msg)) < 0) {
        (void)fprintf(stderr, "agentjail serve: %s\n", msg);
        srv_config_clear(&ctx.cfg);
        return 2;
    }
    if (srv_fwd_init(&ctx.cfg, msg, sizeof(msg)) < 0) {
        (void)fprintf(stderr, "agentjail serve: %s\n", msg);
        aj_policy_free(ctx.pol);
        srv_config_clear(&ctx.cfg);
        return 2;
    }
    /* Files the server makes (the store, a unix socket) are its own. */
    (void)umask(077);
    /* A client that goes away mid-response is an EPIPE, not the end of
     * the server; the library's pipes get the same treatment. */
    (void)signal(SIGPIPE, SIG_IGN);
    /* SIGTERM and SIGINT are taken by this thread alone (sigwait): every
     * thread started below inherits the mask. */
    (void)sigemptyset(&stop);
    (void)sigaddset(&stop, SIGTERM);
    (void)sigaddset(&stop, SIGINT);
    (void)sigaddset(&stop, SIGHUP); /* the events log's reopen (logrotate) */
    if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0)
        goto out;
    if (srv_store_open(&ctx.cfg, &ctx.store, msg, sizeof(msg)) < 0)
        goto fail_msg;
    /* Before any thread: as root it moves the server to a mount
     * namespace of its own (session.c). */
    if (srv_sessions_new(&ctx, &ctx.sessions, msg, sizeof(msg)) < 0)
        goto fail_msg;
    events_dir = make_events_dir(ctx.cfg.store, msg, sizeof(msg));
    if (!events_dir ||
        srv_runner_new(&ctx.cfg, ctx.pol, ctx.store, events_dir, &ctx.rn, msg, sizeof(msg)) < 0 ||
        srv_sessions_start(ctx.sessions, msg, sizeof(msg)) < 0)
        goto fail_msg;
    if (o->mcp_in_fd >= 0) { /* `agentjail mcp`: MCP on stdio, no HTTP (mcp_stdio.c) */
        status = srv_mcp_stdio_main(&ctx, o);
        srv_runner_stop(ctx.rn);
        goto out;
    }
    lfd = listen_on(ctx.cfg.listen, &unix_path, msg, sizeof(msg));
    if (lfd < 0)
        goto fail_msg;
    d = start_daemon(&ctx, lfd);
    if (!d) {
        (void)snprintf(msg, sizeof(msg), "libmicrohttpd could not start on %s", ctx.cfg.listen);
        goto fail_msg;
    }
    lfd = -1; /* MHD's now: closed by MHD_stop_daemon */
    (void)fprintf(stderr, "agentjail serve: ready\n");
    do {
        sig = sigwaitinfo(&stop, NULL);
        if (sig == SIGHUP)
            srv_eventlog_reopen();
    } while ((sig < 0 && errno == EINTR) || sig == SIGHUP);
    (void)fprintf(stderr, "agentjail serve: signal %d: stopping\n", sig);

    /* Stop accepting, end every run (recorded as signaled), answer the
     * requests that waited on them, then stop the HTTP threads. */
    {
        MHD_socket q = MHD_quiesce_daemon(d);
        if (q != MHD_INVALID_SOCKET)
            (void)close(q); /* handed back to us by the quiesce */
    }
    srv_runner_stop(ctx.rn);
    srv_fwd_shutdown();
    /* Every run has ended: let the requests that waited on them (and the
     * streams' exit events) reach their clients before MHD closes the
     * connections; bounded, a client that does not read is not waited for. */
    for (int i = 0; i < 500 && __atomic_load_n(&ctx.in_flight, __ATOMIC_SEQ_CST) > 0; i++)
        (void)usleep(10000);
    MHD_stop_daemon(d);
    d = NULL;
    /* No request is left: every session ends, its workspace removed. */
    srv_sessions_stop(ctx.sessions);
    status = 0;
    goto out;
fail_msg:
    (void)fprintf(stderr, "agentjail serve: %s\n", msg);
out:
    if (d)
        MHD_stop_daemon(d);
    srv_mcp_http_stop();
    if (lfd >= 0)
        (void)close(lfd);
    srv_sessions_stop(ctx.sessions);
    srv_runner_free(ctx.rn);
    srv_sessions_free(ctx.sessions);
    srv_store_close(ctx.store);
    if (unix_path) {
        (void)unlink(unix_path);
        free(unix_path);
    }
    if (events_dir) {
        (void)rmdir(events_dir); /* empty once every run has ended */
        free(events_dir);
    }
    aj_policy_free(ctx.pol);
    srv_fwd_cleanup();
    srv_eventlog_close();
    srv_config_clear(&ctx.cfg);
    return status;
}
