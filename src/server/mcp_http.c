/* SPDX-License-Identifier: Apache-2.0 */
/* MCP over Streamable HTTP at /mcp on `agentjail serve`, in two eras.
 * Stateless (2026-07-28): each POST is one request served on its own,
 * its revision in params._meta and mirrored in the MCP-Protocol-Version,
 * Mcp-Method and Mcp-Name headers (checked against the body: 400
 * HeaderMismatch); no MCP session, and the sandbox sessions it creates
 * are the tenant's stateless set (until close_session, their ttl or idle
 * timeout, or the server's end). Legacy (2025-11-25 and older): POST a
 * JSON-RPC message (initialize makes an MCP session, named by the
 * Mcp-Session-Id header of its answer, owned by the bearer token's
 * tenant). In both, a tools/call
 * is answered as an SSE stream (its progress notifications, then its
 * response) when the client accepts one, and closing that stream cancels
 * the call (its run is killed); DELETE ends the session (its runs killed,
 * its sandbox sessions closed). GET (a server-to-client stream) is 405:
 * this server sends no requests of its own. An Origin header that is not
 * one of the config's mcp.allowed_origins (by default: a loopback origin)
 * is refused (403), against DNS rebinding from a browser. */
#include <errno.h>
#include <microhttpd.h>
#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

/* MCP sessions kept at once (all tenants; one tenant), and how long an
 * idle one lives. */
#define MCP_HTTP_MAX_SESSIONS 256
#define MCP_HTTP_MAX_PER_TENANT 64
#define MCP_HTTP_IDLE_MS (30 * 60 * 1000)

struct entry {
    char id[33];     /* "" for a stateless request's */
    struct srv_tenant *t;
    struct mcp_conn *conn;
    int refs;        /* the registry's (while listed) + each request using it */
    bool listed;
    bool stateless;  /* one request of the stateless revision: on the stateless list */
    int64_t used_ms;
    struct entry *next;
};

/* A tenant's sandbox session handles made by stateless requests (they
 * have no MCP session to belong to): the tenant's own, closed at the end. */
struct tscope {
    struct srv_ctx *ctx;
    struct srv_tenant *t;
    struct mcp_handles *h;
    struct tscope *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond = PTHREAD_COND_INITIALIZER;
static struct entry *reg;
static struct entry *stateless; /* stateless requests in progress (cancelled at the end) */
static struct tscope *tscopes;
static unsigned reg_count; /* entries alive, listed or not, stateless ones too */

static void entry_unref(struct entry *e)
{
    bool last;

    (void)pthread_mutex_lock(&reg_lock);
    last = --e->refs == 0;
    if (last && e->stateless)
        for (struct entry **p = &stateless; *p; p = &(*p)->next)
            if (*p == e) {
                *p = e->next;
                break;
            }
    (void)pthread_mutex_unlock(&reg_lock);
    if (!last)
        return;
    if (!e->stateless)
        (void)fprintf(stderr, "agentjail mcp: http: session %.8s... ended\n", e->id);
    mcp_conn_free(e->conn);
    free(e);
    (void)pthread_mutex_lock(&reg_lock);
    reg_count--;
    (void)pthread_cond_broadcast(&reg_cond);
    (void)pthread_mutex_unlock(&reg_lock);
}

/* Unlist e (under reg_lock): the caller drops the registry's reference. */
static void unlist_locked(struct entry *e)
{
    for (struct entry **p = &reg; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    e->listed = false;
    if (e->conn)
        mcp_conn_cancel_all(e->conn);
}

/* Idle sessions past their time: unlisted, returned for the caller to
 * release outside the lock. */
static struct entry *expire_locked(int64_t now)
{
    struct entry *gone = NULL, *next;

    for (struct entry *e = reg; e; e = next) {
        next = e->next;
        if (e->refs == 1 && now - e->used_ms > MCP_HTTP_IDLE_MS && !mcp_conn_busy(e->conn)) {
            unlist_locked(e);
            e->next = gone;
            gone = e;
        }
    }
    return gone;
}

static void release_all(struct entry *list)
{
    for (struct entry *e = list, *next; e; e = next) {
        next = e->next;
        entry_unref(e);
    }
}

/* The listed session id of tenant t, with a reference; NULL if none. */
static struct entry *find(const char *id, const struct srv_tenant *t)
{
    struct entry *found = NULL, *gone;

    (void)pthread_mutex_lock(&reg_lock);
    gone = expire_locked(srv_now_ms());
    for (struct entry *e = reg; e; e = e->next)
        if (e->t == t && strcmp(e->id, id) == 0) {
            e->refs++;
            e->used_ms = srv_now_ms();
            found = e;
            break;
        }
    (void)pthread_mutex_unlock(&reg_lock);
    release_all(gone);
    return found;
}

void srv_mcp_http_stop(void)
{
    struct entry *list;
    struct tscope *scopes;
    bool drained;

    (void)pthread_mutex_lock(&reg_lock);
    list = reg;
    for (struct entry *e = reg; e; e = e->next) {
        e->listed = false;
        mcp_conn_cancel_all(e->conn);
    }
    for (struct entry *e = stateless; e; e = e->next)
        mcp_conn_cancel_all(e->conn);
    reg = NULL;
    (void)pthread_mutex_unlock(&reg_lock);
    release_all(list);
    /* Calls still answering from their own threads hold references: wait
     * for them (their runs were killed), bounded. */
    struct timespec until;
    (void)clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    (void)pthread_mutex_lock(&reg_lock);
    while (reg_count && pthread_cond_timedwait(&reg_cond, &reg_lock, &until) == 0)
        ;
    drained = reg_count == 0;
    scopes = tscopes;
    tscopes = NULL;
    (void)pthread_mutex_unlock(&reg_lock);
    /* The sessions stateless requests made and nobody closed: closed now,
     * once no request uses the sets (else they are left to the sessions'
     * own end at shutdown). */
    for (struct tscope *ts = scopes, *next; ts; ts = next) {
        next = ts->next;
        if (drained)
            mcp_handles_free(ts->h, ts->ctx, ts->t, "http");
        free(ts);
    }
}

/* Tenant t's set of stateless handles, made on first use; NULL: out of
 * memory. */
static struct mcp_handles *tenant_handles(struct srv_ctx *ctx, struct srv_tenant *t)
{
    struct mcp_handles *h = NULL;

    (void)pthread_mutex_lock(&reg_lock);
    for (struct tscope *ts = tscopes; ts && !h; ts = ts->next)
        if (ts->t == t)
            h = ts->h;
    if (!h) {
        struct tscope *ts = calloc(1, sizeof(*ts));
        h = ts ? mcp_handles_new() : NULL;
        if (h) {
            *ts = (struct tscope){.ctx = ctx, .t = t, .h = h, .next = tscopes};
            tscopes = ts;
        } else {
            free(ts);
        }
    }
    (void)pthread_mutex_unlock(&reg_lock);
    return h;
}

/* ---- responses ---------------------------------------------------------------------------- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, char *body, const char *type,
                               const char *session_id, bool www_auth)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    size_t len = body ? strlen(body) : 0;

    resp = MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE
                                                                            : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if ((type && MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type) != MHD_YES) ||
        (session_id && MHD_add_response_header(resp, "Mcp-Session-Id", session_id) != MHD_YES) ||
        (www_auth && MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer") != MHD_YES) ||
        (status == MHD_HTTP_METHOD_NOT_ALLOWED &&
         MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "POST, DELETE") != MHD_YES)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* An HTTP error with a JSON-RPC error body (id null). */
static enum MHD_Result rpc_error(struct MHD_Connection *c, unsigned status, int code, const char *message)
{
    return respond(c, status, mcp_error_text(NULL, code, message), "application/json", NULL,
                   status == MHD_HTTP_UNAUTHORIZED);
}

/* ---- Origin ------------------------------------------------------------------------------- */

/* No Origin (not a browser): served. With the config's
 * mcp.allowed_origins: one of them; without: a loopback origin,
 * http(s)://localhost, 127.0.0.1 or [::1], any port. */
static bool origin_allowed(const struct srv_config *cfg, const char *o)
{
    static const char *const loopback[] = {"http://localhost:*", "https://localhost:*", "http://127.0.0.1:*",
                                           "https://127.0.0.1:*", "http://[::1]:*",     "https://[::1]:*"};
    struct srv_origin got, pat;
    const char *why;

    if (!o)
        return true;
    if (srv_origin_parse(o, false, &got, &why) < 0)
        return false;
    if (cfg->mcp_origins_set) {
        for (size_t i = 0; i < cfg->n_mcp_origins; i++)
            if (srv_origin_match(&cfg->mcp_origins[i], &got))
                return true;
        return false;
    }
    for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++)
        if (srv_origin_parse(loopback[i], true, &pat, &why) == 0 && srv_origin_match(&pat, &got))
            return true;
    return false;
}

/* ---- sinks -------------------------------------------------------------------------------- */

/* One answer, collected (a JSON response; notifications are dropped). */
struct one {
    char *text;
};

static void one_send(void *sink, char *text)
{
    struct one *o = sink;
    json_t *m = json_loads(text, 0, NULL);

    /* Keep the response, not a progress notification. */
    if (json_object_get(m, "id") && !o->text)
        o->text = text;
    else
        free(text);
    json_decref(m);
}

/* An SSE stream of one request: the worker thread queues, MHD's reader
 * callback (the connection's thread) takes. */
struct stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char **q;
    size_t n, head, cap;
    bool done;   /* the worker has answered */
    bool closed; /* MHD is done with the stream */
    int refs;    /* the stream's and the worker's */
    json_t *id;
    json_t *msg;
    struct entry *e;
    char *pending;
    size_t plen, ppos;
};

static void stream_unref(struct stream *s)
{
    bool last;

    (void)pthread_mutex_lock(&s->lock);
    last = --s->refs == 0;
    (void)pthread_mutex_unlock(&s->lock);
    if (!last)
        return;
    for (size_t i = s->head; i < s->n; i++)
        free(s->q[i]);
    free(s->q);
    free(s->pending);
    json_decref(s->id);
    json_decref(s->msg);
    (void)pthread_mutex_destroy(&s->lock);
    (void)pthread_cond_destroy(&s->cond);
    free(s);
}

static void stream_send(void *sink, char *text)
{
    struct stream *s = sink;

    (void)pthread_mutex_lock(&s->lock);
    if (!s->closed && s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        char **nq = realloc(s->q, ncap * sizeof(*nq));
        if (nq) {
            s->q = nq;
            s->cap = ncap;
        }
    }
    if (!s->closed && s->n < s->cap) {
        s->q[s->n++] = text;
        text = NULL;
        (void)pthread_cond_broadcast(&s->cond);
    }
    (void)pthread_mutex_unlock(&s->lock);
    free(text);
}

static void *stream_worker(void *arg)
{
    struct stream *s = arg;
    json_t *msg = s->msg;

    s->msg = NULL;
    mcp_handle(s->e->conn, msg, stream_send, s);
    (void)pthread_mutex_lock(&s->lock);
    s->done = true;
    (void)pthread_cond_broadcast(&s->cond);
    (void)pthread_mutex_unlock(&s->lock);
    entry_unref(s->e);
    stream_unref(s);
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *s = cls;

    (void)pos;
    while (s->ppos == s->plen) {
        char *next = NULL;
        bool end = false;

        free(s->pending);
        s->pending = NULL;
        s->plen = s->ppos = 0;
        (void)pthread_mutex_lock(&s->lock);
        if (s->head == s->n && !s->done) {
            /* A second at most: then a comment goes out, and a client that
             * closed the stream is found out by the write. */
            struct timespec until;
            (void)clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            (void)pthread_cond_timedwait(&s->cond, &s->lock, &until);
        }
        if (s->head < s->n)
            next = s->q[s->head++];
        else
            end = s->done;
        (void)pthread_mutex_unlock(&s->lock);
        if (next) {
            if (asprintf(&s->pending, "event: message\ndata: %s\n\n", next) < 0)
                s->pending = NULL;
            free(next);
            if (!s->pending)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (end) {
            return MHD_CONTENT_READER_END_OF_STREAM;
        } else {
            s->pending = strdup(": waiting\n\n");
            if (!s->pending)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        s->plen = strlen(s->pending);
    }
    size_t k = s->plen - s->ppos < max ? s->plen - s->ppos : max;
    memcpy(buf, s->pending + s->ppos, k);
    s->ppos += k;
    return (ssize_t)k;
}

/* MHD is done with the stream: sent whole, or the client went away. A
 * call still running then is cancelled: its run is killed. */
static void stream_free(void *cls)
{
    struct stream *s = cls;

    (void)pthread_mutex_lock(&s->lock);
    s->closed = true;
    /* Under the stream's lock: the worker cannot mark itself done, and so
     * cannot drop its entry reference (which keeps conn alive), meanwhile. */
    if (!s->done)
        mcp_cancel(s->e->conn, s->id, "the HTTP stream was closed");
    (void)pthread_mutex_unlock(&s->lock);
    stream_unref(s);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, struct entry *e, json_t *msg)
{
    struct stream *s = calloc(1, sizeof(*s));
    struct MHD_Response *resp;
    pthread_attr_t attr;
    pthread_t th;
    enum MHD_Result ret;

    if (!s) {
        json_decref(msg);
        entry_unref(e);
        return rpc_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, MCP_INTERNAL_ERROR, "out of memory");
    }
    (void)pthread_mutex_init(&s->lock, NULL);
    (void)pthread_cond_init(&s->cond, NULL);
    s->refs = 2;
    s->id = json_incref(json_object_get(msg, "id"));
    s->msg = msg;
    s->e = e; /* the worker's reference now */
    (void)pthread_attr_init(&attr);
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, stream_worker, s) != 0) {
        (void)pthread_attr_destroy(&attr);
        entry_unref(e);
        s->refs = 1;
        stream_unref(s);
        return rpc_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, MCP_INTERNAL_ERROR, "could not start the call");
    }
    (void)pthread_attr_destroy(&attr);
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free);
    if (!resp) {
        stream_free(s);
        return MHD_NO;
    }
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream") != MHD_YES ||
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") != MHD_YES ||
        (e->id[0] && MHD_add_response_header(resp, "Mcp-Session-Id", e->id) != MHD_YES) ||
        MHD_add_response_header(resp, "X-Accel-Buffering", "no") != MHD_YES) {
        MHD_destroy_response(resp); /* calls stream_free */
        return MHD_NO;
    }
    ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- requests ----------------------------------------------------------------------------- */

static bool accepts(struct MHD_Connection *c, const char *type)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);

    return a && strstr(a, type);
}

/* A handshake revision (a legacy client's MCP-Protocol-Version). */
static bool legacy_version(const char *v)
{
    static const char *const legacy[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

    for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]); i++)
        if (strcmp(v, legacy[i]) == 0)
            return true;
    return false;
}

/* A header value is visible ASCII, space or tab (RFC 9110). */
static bool header_chars_ok(const char *v)
{
    for (; *v; v++)
        if ((*v < 0x20 && *v != '\t') || *v == 0x7f || (unsigned char)*v > 0x7f)
            return false;
    return true;
}

/* Whether header value h (Mcp-Name: plain, or "=?base64?B64?=") is the
 * body's value (len bytes). */
static bool header_matches(const char *h, const char *value, size_t len)
{
    size_t hl = strlen(h);

    if (hl >= 11 && strncmp(h, "=?base64?", 9) == 0 && strcmp(h + hl - 2, "?=") == 0) {
        struct base64_decode_ctx b;
        size_t in = hl - 11, n = BASE64_DECODE_LENGTH(in);
        uint8_t *out = malloc(n + 1);
        bool same;
        if (!out)
            return false;
        base64_decode_init(&b);
        same = base64_decode_update(&b, &n, out, in, h + 9) && base64_decode_final(&b) && n == len &&
               memcmp(out, value, len) == 0;
        free(out);
        return same;
    }
    return hl == len && memcmp(h, value, len) == 0;
}

/* The request's headers against its body (Streamable HTTP 2026-07-28,
 * "Server Validation": a proxy may route on the headers, so they must
 * say what the body does): NULL, or why not (a -32020 HeaderMismatch). */
static const char *check_headers(struct MHD_Connection *c, json_t *msg, const char *pv, char *buf, size_t size)
{
    const char *hm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Method");
    const char *hn = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Name");
    const char *m = json_string_value(json_object_get(msg, "method"));
    json_t *params = json_object_get(msg, "params");
    json_t *pvb = json_object_get(json_object_get(params, "_meta"), "io.modelcontextprotocol/protocolVersion");
    json_t *name = NULL;

    if (!pv || !hm)
        return !pv ? "Header mismatch: the MCP-Protocol-Version header is required"
                   : "Header mismatch: the Mcp-Method header is required";
    if (!header_chars_ok(pv) || !header_chars_ok(hm) || (hn && !header_chars_ok(hn)))
        return "Header mismatch: a header value has characters a header may not carry";
    if (strcmp(pv, json_string_value(pvb)) != 0) {
        (void)snprintf(buf, size, "Header mismatch: MCP-Protocol-Version header value '%.40s' does not match "
                       "body value '%.40s'", pv, json_string_value(pvb));
        return buf;
    }
    if (strcmp(hm, m) != 0) {
        (void)snprintf(buf, size, "Header mismatch: Mcp-Method header value '%.80s' does not match body value "
                       "'%.80s'", hm, m);
        return buf;
    }
    if (strcmp(m, "tools/call") == 0 || strcmp(m, "prompts/get") == 0)
        name = json_object_get(params, "name");
    else if (strcmp(m, "resources/read") == 0)
        name = json_object_get(params, "uri");
    if (json_is_string(name) && !hn)
        return "Header mismatch: the Mcp-Name header is required for this method";
    if (hn && !(json_is_string(name) && header_matches(hn, json_string_value(name), json_string_length(name)))) {
        (void)snprintf(buf, size, "Header mismatch: Mcp-Name header value '%.80s' does not match the body's", hn);
        return buf;
    }
    return NULL;
}

/* An HTTP error status with a JSON-RPC error response as its body. */
static enum MHD_Result rpc_error_text(struct MHD_Connection *c, unsigned status, char *text)
{
    if (!text)
        return rpc_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, MCP_INTERNAL_ERROR, "out of memory");
    return respond(c, status, text, "application/json", NULL, false);
}

/* One POST of the stateless revision: checked (400 with the revision's
 * error, 404 for a method it does not have), then served by a connection
 * made for it alone, whose sandbox sessions are the tenant's stateless
 * set. No Mcp-Session-Id is read (one sent is ignored) or made. */
static enum MHD_Result post_stateless(struct srv_ctx *ctx, struct MHD_Connection *c, struct srv_tenant *t,
                                      json_t *msg, const char *pv)
{
    const char *m = json_string_value(json_object_get(msg, "method"));
    json_t *id = json_object_get(msg, "id");
    const json_t *rid = json_is_string(id) || json_is_integer(id) ? id : NULL;
    struct mcp_handles *h;
    struct entry *e;
    struct one one = {NULL};
    char buf[400];
    const char *why;
    char *err;
    int code = 0;

    if (!mcp_is_request(msg)) {
        bool note = m && !id;
        json_decref(msg);
        /* This revision has no client notifications over HTTP (closing a
         * call's stream cancels it): one is accepted and dropped. */
        if (note)
            return respond(c, MHD_HTTP_ACCEPTED, NULL, NULL, NULL, false);
        return rpc_error(c, MHD_HTTP_BAD_REQUEST, MCP_INVALID_REQUEST,
                         "a JSON-RPC request (method and id) or notification; this server takes no responses");
    }
    if (!json_is_string(json_object_get(json_object_get(json_object_get(msg, "params"), "_meta"),
                                        "io.modelcontextprotocol/protocolVersion"))) {
        err = mcp_modern_check(msg, &code); /* the missing or mistyped field's -32602 */
        json_decref(msg);
        return rpc_error_text(c, MHD_HTTP_BAD_REQUEST, err);
    }
    if ((why = check_headers(c, msg, pv, buf, sizeof(buf)))) {
        err = mcp_error_text(rid, MCP_HEADER_MISMATCH, why);
        json_decref(msg);
        return rpc_error_text(c, MHD_HTTP_BAD_REQUEST, err);
    }
    if ((err = mcp_modern_check(msg, &code))) {
        json_decref(msg);
        return rpc_error_text(c, MHD_HTTP_BAD_REQUEST, err);
    }
    if (!mcp_modern_method(m)) {
        (void)snprintf(buf, sizeof(buf), "method not found: %.120s (protocol revision %s)", m, MCP_MODERN_VERSION);
        err = mcp_error_text(rid, MCP_METHOD_NOT_FOUND, buf);
        json_decref(msg);
        return rpc_error_text(c, MHD_HTTP_NOT_FOUND, err);
    }
    h = tenant_handles(ctx, t);
    e = h ? calloc(1, sizeof(*e)) : NULL;
    if (e) {
        e->t = t;
        e->stateless = true;
        e->refs = 1; /* the request's */
        e->conn = mcp_conn_new_stateless(ctx, t, h);
    }
    if (!e || !e->conn) {
        free(e);
        json_decref(msg);
        return rpc_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, MCP_INTERNAL_ERROR, "out of memory");
    }
    (void)pthread_mutex_lock(&reg_lock);
    e->next = stateless;
    stateless = e;
    reg_count++;
    (void)pthread_mutex_unlock(&reg_lock);
    if (strcmp(m, "tools/call") == 0 && accepts(c, "text/event-stream"))
        return answer_stream(c, e, msg); /* takes msg and the reference */
    mcp_handle(e->conn, msg, one_send, &one);
    entry_unref(e);
    return respond(c, MHD_HTTP_OK, one.text, "application/json", NULL, false);
}

static enum MHD_Result post(struct srv_ctx *ctx, struct MHD_Connection *c, struct srv_tenant *t, const char *body,
                            size_t len)
{
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
    json_error_t jerr;
    json_t *msg = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &jerr);
    const char *m;
    struct entry *e = NULL;
    struct one one = {NULL};
    char buf[300];

    if (!msg) {
        (void)snprintf(buf, sizeof(buf), "parse error: %d:%d: %s", jerr.line, jerr.column, jerr.text);
        return rpc_error(c, MHD_HTTP_BAD_REQUEST, MCP_PARSE_ERROR, buf);
    }
    if (!json_is_object(msg)) {
        json_decref(msg);
        return rpc_error(c, MHD_HTTP_BAD_REQUEST, MCP_INVALID_REQUEST,
                         json_is_array(msg) ? "batches are not supported: one message a request"
                                            : "a JSON-RPC message is an object");
    }
    if (mcp_is_modern(msg) || (pv && !legacy_version(pv) && !sid))
        return post_stateless(ctx, c, t, msg, pv); /* takes msg */
    m = json_string_value(json_object_get(msg, "method"));
    if (m && mcp_is_request(msg) && (strcmp(m, "initialize") == 0 || strcmp(m, "server/discover") == 0) && !sid) {
        /* initialize makes a session; discover needs none and keeps nothing. */
        bool init = strcmp(m, "initialize") == 0;
        struct mcp_conn *conn = mcp_conn_new(ctx, t, "http");
        if (!conn) {
            json_decref(msg);
            return rpc_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, MCP_INTERNAL_ERROR, "out of memory");
        }
        mcp_handle(conn, msg, one_send, &one);
        json_t *ans = one.text ? json_loads(one.text, 0, NULL) : NULL;
        bool ok = json_object_get(ans, "result") != NULL;
        json_decref(ans);
        if (!init || !ok) {
            mcp_conn_free(conn);
            return respond(c, MHD_HTTP_OK, one.text, "application/json", NULL, false);
        }
        e = calloc(1, sizeof(*e));
        struct entry *gone = NULL;
        (void)pthread_mutex_lock(&reg_lock);
        gone = expire_locked(srv_now_ms());
        unsigned mine = 0, all = 0;
        for (struct entry *x = reg; x; x = x->next) {
            mine += x->t == t;
            all++;
        }
        /* Listed sessions (not stateless requests in flight, which
         * reg_count also counts). */
        bool room = all < MCP_HTTP_MAX_SESSIONS && mine < MCP_HTTP_MAX_PER_TENANT;
        if (e && room && srv_new_id(e->id)) {
            e->t = t;
            e->conn = conn;
            e->refs = 1;
            e->listed = true;
            e->used_ms = srv_now_ms();
            e->next = reg;
            reg = e;
            reg_count++;
        } else {
            free(e);
            e = NULL;
        }
        (void)pthread_mutex_unlock(&reg_lock);
        release_all(gone);
        if (!e) {
            mcp_conn_free(conn);
            free(one.text);
            return rpc_error(c, room ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_TOO_MANY_REQUESTS, MCP_INTERNAL_ERROR,
                             room ? "out of memory"
                                  : "too many MCP sessions (64 per tenant, 256 in all); end some (DELETE /mcp)");
        }
        (void)fprintf(stderr, "agentjail mcp: http: session %.8s... started (tenant %s)\n", e->id, t->name);
        return respond(c, MHD_HTTP_OK, one.text, "application/json", e->id, false);
    }
    if (!sid) {
        json_decref(msg);
        return rpc_error(c, MHD_HTTP_BAD_REQUEST, MCP_INVALID_REQUEST,
                         "Mcp-Session-Id is required (initialize gives one)");
    }
    e = find(sid, t);
    if (!e) {
        json_decref(msg);
        return rpc_error(c, MHD_HTTP_NOT_FOUND, MCP_INVALID_REQUEST, "no such MCP session (initialize a new one)");
    }
    if (pv && strcmp(pv, mcp_conn_version(e->conn)) != 0 && strcmp(pv, "2025-03-26") != 0) {
        /* Clients send the negotiated revision; 2025-03-26 is assumed
         * when the header is missing, so it is always accepted. */
        (void)snprintf(buf, sizeof(buf), "MCP-Protocol-Version %.40s is not this session's (%s)", pv,
                       mcp_conn_version(e->conn));
        json_decref(msg);
        entry_unref(e);
        return rpc_error(c, MHD_HTTP_BAD_REQUEST, MCP_INVALID_REQUEST, buf);
    }
    if (!mcp_is_request(msg)) {
        /* A notification or a response: accepted, nothing to answer. */
        mcp_handle(e->conn, msg, one_send, &one);
        entry_unref(e);
        if (one.text) /* an invalid message's error */
            return respond(c, MHD_HTTP_BAD_REQUEST, one.text, "application/json", NULL, false);
        return respond(c, MHD_HTTP_ACCEPTED, NULL, NULL, NULL, false);
    }
    if (m && strcmp(m, "tools/call") == 0 && accepts(c, "text/event-stream"))
        return answer_stream(c, e, msg); /* takes msg and the reference */
    mcp_handle(e->conn, msg, one_send, &one);
    enum MHD_Result ret = respond(c, MHD_HTTP_OK, one.text, "application/json", e->id, false);
    entry_unref(e);
    return ret;
}

enum MHD_Result srv_mcp_http(struct srv_ctx *ctx, struct MHD_Connection *c, struct srv_tenant *t,
                             const char *method, const char *body, size_t len)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");

    if (!origin_allowed(&ctx->cfg, origin))
        return rpc_error(c, MHD_HTTP_FORBIDDEN, MCP_INVALID_REQUEST,
                         ctx->cfg.mcp_origins_set
                             ? "Origin not allowed (not one of the config's mcp.allowed_origins)"
                             : "Origin not allowed (only loopback origins may call /mcp from a browser; the "
                               "config's mcp.allowed_origins names others)");
    if (!t)
        return rpc_error(c, MHD_HTTP_UNAUTHORIZED, MCP_INVALID_REQUEST,
                         "a valid 'Authorization: Bearer TOKEN' is required");
    if (strcmp(method, "POST") == 0)
        return post(ctx, c, t, body, len);
    if (strcmp(method, "DELETE") == 0) {
        const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
        struct entry *e = sid ? find(sid, t) : NULL;
        if (!sid)
            return rpc_error(c, MHD_HTTP_BAD_REQUEST, MCP_INVALID_REQUEST, "Mcp-Session-Id is required");
        if (!e)
            return rpc_error(c, MHD_HTTP_NOT_FOUND, MCP_INVALID_REQUEST, "no such MCP session");
        (void)pthread_mutex_lock(&reg_lock);
        if (e->listed) {
            unlist_locked(e);
            e->refs--; /* the registry's: ours keeps it above 0 */
        }
        (void)pthread_mutex_unlock(&reg_lock);
        entry_unref(e); /* ours: the last one frees it, closing its sandbox sessions */
        return respond(c, MHD_HTTP_OK, NULL, NULL, NULL, false);
    }
    return rpc_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, MCP_INVALID_REQUEST,
                     "only POST and DELETE: this server opens no server-to-client stream");
}
