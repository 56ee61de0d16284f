/* SPDX-License-Identifier: Apache-2.0 */
/* The MCP protocol core: JSON-RPC 2.0 messages in, responses and
 * notifications out through the caller's sink, whatever the transport.
 * Two eras of the protocol side by side (docs/mcp.md):
 * - legacy (2025-11-25 and older): initialize with version negotiation,
 *   initialized, ping, then tools/list and tools/call on that connection;
 * - modern (2026-07-28, SEP-2575): no handshake; every request carries
 *   its protocol version and client capabilities in params._meta
 *   (io.modelcontextprotocol/...) and is served on its own; results carry
 *   resultType and the server's identity in _meta.
 * server/discover, notifications/cancelled and notifications/progress
 * serve both. Logs go to stderr only: on stdio, stdout is the JSON-RPC
 * channel. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "srv_session.h"

/* Revisions of the handshake this server speaks, newest first: the one
 * a client asks for if listed, else the newest (the client then decides
 * whether it can go on). */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
#define N_VERSIONS (sizeof(versions) / sizeof(versions[0]))
/* The stateless revisions (per-request _meta, no initialize). */
static const char *const modern_versions[] = {MCP_MODERN_VERSION};
#define N_MODERN (sizeof(modern_versions) / sizeof(modern_versions[0]))
/* How long a client may cache tools/list and server/discover (ttlMs):
 * they change only with the server's binary. */
#define MCP_CACHE_TTL_MS 3600000

static const char instructions[] =
    "Runs code in a fresh agentjail sandbox per call (no network, a private read-only root, "
    "no capabilities, seccomp and Landlock; escape attempts are refused and reported). "
    "run_code and run_command run one-shot; for state between calls, create_session, then "
    "write_file/read_file/list_files and run_code/run_command with its session_id (the "
    "workspace is /workspace), and close_session. A result with isError true is a run that "
    "failed: see its status, exit_code, stderr and events.";

struct inflight {
    json_t *id;
    struct mcp_call *call;
    struct inflight *next;
};

/* The sandbox session ids (handles) a connection may use: its own, or,
 * for HTTP requests of the stateless revision, the tenant's shared set
 * (mcp_http.c keeps one per tenant). */
struct mcp_handles {
    pthread_mutex_t lock;
    char **ids;
    size_t n;
};

/* A shared set is pruned of sessions that ended (ttl, idle) once it holds
 * this many: it never holds more than the tenant's live sessions (at most
 * sessions.max_per_tenant) plus this. */
#define MCP_HANDLES_PRUNE 64

struct mcp_conn {
    struct srv_ctx *ctx;
    struct srv_tenant *t;
    const char *transport;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    char version[16];
    bool initialized;
    bool closing;
    unsigned busy; /* requests being handled */
    struct inflight *inflight;
    struct mcp_handles *handles;
    bool own_handles; /* closed with the connection; a shared set is not */
};

struct mcp_handles *mcp_handles_new(void)
{
    struct mcp_handles *h = calloc(1, sizeof(*h));

    if (h)
        (void)pthread_mutex_init(&h->lock, NULL);
    return h;
}

void mcp_handles_free(struct mcp_handles *h, struct srv_ctx *ctx, struct srv_tenant *t, const char *transport)
{
    if (!h)
        return;
    /* Sessions the client forgot: closed with their scope. */
    for (size_t i = 0; i < h->n; i++) {
        (void)fprintf(stderr, "agentjail mcp: %s: closing session %s the client left open\n", transport, h->ids[i]);
        mcp_tools_close_session(ctx, t, h->ids[i]);
        free(h->ids[i]);
    }
    free(h->ids);
    (void)pthread_mutex_destroy(&h->lock);
    free(h);
}

static struct mcp_conn *conn_new(struct srv_ctx *ctx, struct srv_tenant *t, const char *transport,
                                 struct mcp_handles *shared)
{
    struct mcp_conn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->ctx = ctx;
    c->t = t;
    c->transport = transport;
    c->own_handles = !shared;
    c->handles = shared ? shared : mcp_handles_new();
    if (!c->handles) {
        free(c);
        return NULL;
    }
    (void)pthread_mutex_init(&c->lock, NULL);
    (void)pthread_cond_init(&c->idle, NULL);
    return c;
}

struct mcp_conn *mcp_conn_new(struct srv_ctx *ctx, struct srv_tenant *t, const char *transport)
{
    return conn_new(ctx, t, transport, NULL);
}

struct mcp_conn *mcp_conn_new_stateless(struct srv_ctx *ctx, struct srv_tenant *t, struct mcp_handles *shared)
{
    return conn_new(ctx, t, "http", shared);
}

void mcp_conn_cancel_all(struct mcp_conn *c)
{
    (void)pthread_mutex_lock(&c->lock);
    c->closing = true;
    for (struct inflight *f = c->inflight; f; f = f->next) {
        f->call->cancelled = true;
        if (f->call->run)
            srv_runner_kill(c->ctx->rn, f->call->run);
    }
    (void)pthread_mutex_unlock(&c->lock);
}

void mcp_conn_free(struct mcp_conn *c)
{
    if (!c)
        return;
    mcp_conn_cancel_all(c);
    (void)pthread_mutex_lock(&c->lock);
    while (c->busy)
        (void)pthread_cond_wait(&c->idle, &c->lock);
    (void)pthread_mutex_unlock(&c->lock);
    if (c->own_handles)
        mcp_handles_free(c->handles, c->ctx, c->t, c->transport);
    (void)pthread_mutex_destroy(&c->lock);
    (void)pthread_cond_destroy(&c->idle);
    free(c);
}

struct srv_tenant *mcp_conn_tenant(const struct mcp_conn *c)
{
    return c->t;
}

struct srv_ctx *mcp_conn_ctx(const struct mcp_conn *c)
{
    return c->ctx;
}

const char *mcp_conn_version(const struct mcp_conn *c)
{
    return c->version;
}

bool mcp_conn_initialized(const struct mcp_conn *c)
{
    return c->initialized;
}

bool mcp_conn_busy(struct mcp_conn *c)
{
    bool b;

    (void)pthread_mutex_lock(&c->lock);
    b = c->busy > 0;
    (void)pthread_mutex_unlock(&c->lock);
    return b;
}

bool mcp_conn_has_session(struct mcp_conn *c, const char *id)
{
    struct mcp_handles *h = c->handles;
    bool found = false;

    (void)pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->n && !found; i++)
        found = strcmp(h->ids[i], id) == 0;
    (void)pthread_mutex_unlock(&h->lock);
    return found;
}

static void handles_drop_locked(struct mcp_handles *h, size_t i)
{
    free(h->ids[i]);
    h->ids[i] = h->ids[--h->n];
}

int mcp_conn_add_session(struct mcp_conn *c, const char *id)
{
    struct mcp_handles *h = c->handles;
    char *dup = strdup(id);
    char **v;

    if (!dup)
        return -ENOMEM;
    (void)pthread_mutex_lock(&h->lock);
    if (!c->own_handles && h->n >= MCP_HANDLES_PRUNE) {
        /* A shared set has no connection end to close its sessions at:
         * forget those that ended on their own (ttl, idle timeout). */
        for (size_t i = h->n; i-- > 0;) {
            struct srv_session *s = NULL;
            int r = srv_session_find(c->ctx->sessions, c->t, h->ids[i], &s);
            if (r == 0)
                srv_session_unref(c->ctx->sessions, s);
            else if (r == -ENOENT || r == -ESTALE)
                handles_drop_locked(h, i);
        }
    }
    v = realloc(h->ids, (h->n + 1) * sizeof(*v));
    if (v) {
        h->ids = v;
        h->ids[h->n++] = dup;
    }
    (void)pthread_mutex_unlock(&h->lock);
    if (!v) {
        free(dup);
        return -ENOMEM;
    }
    return 0;
}

void mcp_conn_drop_session(struct mcp_conn *c, const char *id)
{
    struct mcp_handles *h = c->handles;

    (void)pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->ids[i], id) == 0) {
            handles_drop_locked(h, i);
            break;
        }
    (void)pthread_mutex_unlock(&h->lock);
}

/* ---- messages ---------------------------------------------------------------------------- */

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    return s;
}

char *mcp_error_text(const json_t *id, int code, const char *message)
{
    return dump(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error",
                          "code", code, "message", message));
}

static void send_error(mcp_send_fn send, void *sink, const json_t *id, int code, const char *message)
{
    char *s = mcp_error_text(id, code, message);

    if (s)
        send(sink, s);
}

/* The server's identity (serverInfo of initialize; a modern result's
 * _meta). */
static json_t *server_info(void)
{
    return json_pack("{s:s, s:s, s:s}", "name", "agentjail", "title", "agentjail sandbox", "version", AJ_VERSION);
}

/* A result of the modern revision: resultType (required) and the server's
 * identity in _meta (SHOULD, on every result). Takes and returns result. */
static json_t *modern_result(json_t *result)
{
    json_t *meta;

    if (!result)
        return NULL;
    if (!json_object_get(result, "resultType"))
        (void)json_object_set_new(result, "resultType", json_string("complete"));
    meta = json_object_get(result, "_meta");
    if (!json_is_object(meta)) {
        meta = json_object();
        (void)json_object_set_new(result, "_meta", meta);
    }
    if (meta)
        (void)json_object_set_new(meta, "io.modelcontextprotocol/serverInfo", server_info());
    return result;
}

static void send_result(mcp_send_fn send, void *sink, const json_t *id, json_t *result, bool modern)
{
    char *s;

    if (modern)
        result = modern_result(result);
    s = dump(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
    if (s)
        send(sink, s);
    else
        send_error(send, sink, id, MCP_INTERNAL_ERROR, "out of memory");
}

bool mcp_is_request(const json_t *msg)
{
    return json_is_object(msg) && json_is_string(json_object_get(msg, "method")) &&
           json_object_get(msg, "id") != NULL;
}

void mcp_progress(struct mcp_call *call, const char *message)
{
    json_t *params;
    char *s;

    if (!call->progress_token)
        return;
    call->progress += 1;
    params = json_pack("{s:O, s:f}", "progressToken", call->progress_token, "progress", call->progress);
    if (params && message)
        (void)json_object_set_new(params, "message", json_string(message));
    s = dump(json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", "notifications/progress", "params", params));
    if (s)
        call->send(call->sink, s);
}

static json_t *capabilities(void)
{
    return json_pack("{s:{s:b}}", "tools", "listChanged", 0);
}

static json_t *initialize(struct mcp_conn *c, json_t *params, int *code, const char **msg)
{
    json_t *pv = json_object_get(params, "protocolVersion");
    const char *chosen = versions[0];

    if (!json_is_object(params) || !json_is_string(pv)) {
        *code = MCP_INVALID_PARAMS;
        *msg = "initialize: params.protocolVersion (a string) is required";
        return NULL;
    }
    for (size_t i = 0; i < N_VERSIONS; i++)
        if (strcmp(json_string_value(pv), versions[i]) == 0)
            chosen = versions[i];
    (void)pthread_mutex_lock(&c->lock);
    if (c->version[0]) {
        (void)pthread_mutex_unlock(&c->lock);
        *code = MCP_INVALID_REQUEST;
        *msg = "initialize: this connection is initialized already";
        return NULL;
    }
    (void)snprintf(c->version, sizeof(c->version), "%s", chosen);
    (void)pthread_mutex_unlock(&c->lock);
    (void)fprintf(stderr, "agentjail mcp: %s: initialize: client asked %s, speaking %s\n", c->transport,
                  json_string_value(pv), chosen);
    return json_pack("{s:s, s:o, s:o, s:s}", "protocolVersion", chosen, "capabilities", capabilities(),
                     "serverInfo", server_info(), "instructions", instructions);
}

/* Every revision this server speaks, the stateless ones first. */
static json_t *all_versions(void)
{
    json_t *v = json_array();

    for (size_t i = 0; v && i < N_MODERN; i++)
        (void)json_array_append_new(v, json_string(modern_versions[i]));
    for (size_t i = 0; v && i < N_VERSIONS; i++)
        (void)json_array_append_new(v, json_string(versions[i]));
    return v;
}

/* server/discover (2026-07-28, SEP-2575): what this server speaks, with
 * no state kept; answered at any time, in either era. A cacheable result
 * (ttlMs, cacheScope); "private": it is answered to a tenant's token. */
static json_t *discover(void)
{
    return json_pack("{s:o, s:o, s:s, s:i, s:s}", "supportedVersions", all_versions(), "capabilities",
                     capabilities(), "instructions", instructions, "ttlMs", MCP_CACHE_TTL_MS, "cacheScope",
                     "private");
}

bool mcp_is_modern(const json_t *msg)
{
    return json_object_get(json_object_get(json_object_get(msg, "params"), "_meta"),
                           "io.modelcontextprotocol/protocolVersion") != NULL;
}

bool mcp_modern_method(const char *m)
{
    return strcmp(m, "server/discover") == 0 || strcmp(m, "tools/list") == 0 || strcmp(m, "tools/call") == 0;
}

char *mcp_modern_check(const json_t *msg, int *code)
{
    json_t *id = json_object_get(msg, "id");
    json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
    json_t *pv = json_object_get(meta, "io.modelcontextprotocol/protocolVersion");
    json_t *caps = json_object_get(meta, "io.modelcontextprotocol/clientCapabilities");
    json_t *info = json_object_get(meta, "io.modelcontextprotocol/clientInfo");
    const json_t *rid = json_is_string(id) || json_is_integer(id) ? id : NULL;

    if (!json_is_string(pv)) {
        *code = MCP_INVALID_PARAMS;
        return mcp_error_text(rid, MCP_INVALID_PARAMS,
                              "params._meta[\"io.modelcontextprotocol/protocolVersion\"] is required, a string "
                              "(protocol revision 2026-07-28)");
    }
    for (size_t i = 0; i < N_MODERN; i++)
        if (strcmp(json_string_value(pv), modern_versions[i]) == 0)
            goto supported;
    /* A revision this server does not serve per request (an unknown one,
     * or a handshake revision: those go through initialize). */
    *code = MCP_UNSUPPORTED_VERSION;
    return dump(json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:o, s:O}}}", "jsonrpc", "2.0", "id",
                          rid ? rid : json_null(), "error", "code", MCP_UNSUPPORTED_VERSION, "message",
                          "Unsupported protocol version", "data", "supported", all_versions(), "requested", pv));
supported:
    if (!json_is_object(caps)) {
        *code = MCP_INVALID_PARAMS;
        return mcp_error_text(rid, MCP_INVALID_PARAMS,
                              "params._meta[\"io.modelcontextprotocol/clientCapabilities\"] is required, an object "
                              "(protocol revision 2026-07-28)");
    }
    if (info && (!json_is_object(info) || !json_is_string(json_object_get(info, "name")) ||
                 !json_is_string(json_object_get(info, "version")))) {
        *code = MCP_INVALID_PARAMS;
        return mcp_error_text(rid, MCP_INVALID_PARAMS,
                              "params._meta[\"io.modelcontextprotocol/clientInfo\"] must be an object with "
                              "name and version (strings)");
    }
    return NULL;
}

static void call_tool(struct mcp_conn *c, const json_t *id, json_t *params, bool modern, mcp_send_fn send,
                      void *sink)
{
    json_t *name = json_object_get(params, "name"), *args = json_object_get(params, "arguments");
    json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    struct mcp_call call = {.conn = c, .send = send, .sink = sink, .lock = &c->lock};
    struct inflight f = {.call = &call};
    char msg[600] = "";
    int code = 0;
    json_t *result;

    if (!json_is_object(params) || !json_is_string(name)) {
        send_error(send, sink, id, MCP_INVALID_PARAMS, "tools/call: params.name (a string) is required");
        return;
    }
    if (args && !json_is_object(args)) {
        send_error(send, sink, id, MCP_INVALID_PARAMS, "tools/call: params.arguments must be an object");
        return;
    }
    if (token && (json_is_string(token) || json_is_integer(token)))
        call.progress_token = token;
    f.id = json_deep_copy(id);
    (void)pthread_mutex_lock(&c->lock);
    f.next = c->inflight;
    c->inflight = &f;
    call.cancelled = c->closing;
    (void)pthread_mutex_unlock(&c->lock);

    json_t *empty = args ? NULL : json_object();
    result = mcp_tools_call(&call, json_string_value(name), args ? args : empty, &code, msg, sizeof(msg));
    json_decref(empty);

    (void)pthread_mutex_lock(&c->lock);
    for (struct inflight **p = &c->inflight; *p; p = &(*p)->next)
        if (*p == &f) {
            *p = f.next;
            break;
        }
    bool cancelled = call.cancelled;
    (void)pthread_mutex_unlock(&c->lock);
    json_decref(f.id);
    /* A cancelled request gets no response (the client has stopped
     * waiting for it). */
    if (cancelled) {
        json_decref(result);
        (void)fprintf(stderr, "agentjail mcp: %s: tools/call %s cancelled: its run was killed\n", c->transport,
                      json_string_value(name));
        return;
    }
    if (result)
        send_result(send, sink, id, result, modern);
    else
        send_error(send, sink, id, code ? code : MCP_INTERNAL_ERROR, msg[0] ? msg : "tools/call failed");
}

void mcp_cancel(struct mcp_conn *c, const json_t *id, const char *reason)
{
    (void)pthread_mutex_lock(&c->lock);
    for (struct inflight *f = c->inflight; f; f = f->next)
        if (json_equal(f->id, (json_t *)id)) {
            f->call->cancelled = true;
            if (f->call->run)
                srv_runner_kill(c->ctx->rn, f->call->run);
            (void)fprintf(stderr, "agentjail mcp: %s: cancel request (%s)\n", c->transport,
                          reason ? reason : "no reason given");
        }
    (void)pthread_mutex_unlock(&c->lock);
}

static bool initialized(struct mcp_conn *c)
{
    bool v;

    (void)pthread_mutex_lock(&c->lock);
    v = c->version[0] != '\0';
    (void)pthread_mutex_unlock(&c->lock);
    return v;
}

static bool valid_id(const json_t *id)
{
    /* MCP: a string or an integer, never null. */
    return json_is_string(id) || json_is_integer(id);
}

void mcp_handle(struct mcp_conn *c, json_t *msg, mcp_send_fn send, void *sink)
{
    json_t *id = json_object_get(msg, "id"), *method = json_object_get(msg, "method");
    json_t *params = json_object_get(msg, "params");
    const char *m, *emsg = NULL;
    int code = 0;
    json_t *result = NULL;

    (void)pthread_mutex_lock(&c->lock);
    c->busy++;
    (void)pthread_mutex_unlock(&c->lock);

    if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0) {
        send_error(send, sink, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST,
                   "not a JSON-RPC 2.0 message (an object with \"jsonrpc\": \"2.0\")");
        goto out;
    }
    if (!method) {
        /* A response: this server sends no requests, so nothing waits for it. */
        if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
            send_error(send, sink, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST,
                       "a message needs a method (or is a response)");
        goto out;
    }
    if (!json_is_string(method)) {
        send_error(send, sink, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST, "method: must be a string");
        goto out;
    }
    if (params && !json_is_object(params)) {
        if (id)
            send_error(send, sink, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST, "params: must be an object");
        goto out;
    }
    m = json_string_value(method);
    if (!id) {
        /* Notifications: never answered. */
        if (strcmp(m, "notifications/initialized") == 0) {
            (void)pthread_mutex_lock(&c->lock);
            c->initialized = true;
            (void)pthread_mutex_unlock(&c->lock);
        } else if (strcmp(m, "notifications/cancelled") == 0) {
            json_t *rid = json_object_get(params, "requestId");
            json_t *reason = json_object_get(params, "reason");
            if (valid_id(rid))
                mcp_cancel(c, rid, json_string_value(reason));
        }
        goto out;
    }
    if (!valid_id(id)) {
        send_error(send, sink, NULL, MCP_INVALID_REQUEST, "id: must be a string or an integer");
        goto out;
    }
    if (mcp_is_modern(msg)) {
        /* The stateless revision: the request says its version and the
         * client's capabilities itself; no initialize is needed, and
         * ping and initialize are not methods of it. */
        char *err = mcp_modern_check(msg, &code);
        if (err) {
            send(sink, err);
            goto out;
        }
        if (!mcp_modern_method(m)) {
            char buf[200];
            (void)snprintf(buf, sizeof(buf), "method not found: %.120s (protocol revision %s)", m,
                           MCP_MODERN_VERSION);
            send_error(send, sink, id, MCP_METHOD_NOT_FOUND, buf);
            goto out;
        }
        if (strcmp(m, "tools/call") == 0) {
            call_tool(c, id, params, true, send, sink);
            goto out;
        }
        result = strcmp(m, "server/discover") == 0
                     ? discover()
                     : json_pack("{s:o, s:i, s:s}", "tools", mcp_tools_list(), "ttlMs", MCP_CACHE_TTL_MS,
                                 "cacheScope", "private");
        if (result)
            send_result(send, sink, id, result, true);
        else
            send_error(send, sink, id, MCP_INTERNAL_ERROR, "out of memory");
        goto out;
    }
    if (strcmp(m, "initialize") == 0) {
        result = initialize(c, params, &code, &emsg);
    } else if (strcmp(m, "ping") == 0) {
        result = json_object();
    } else if (strcmp(m, "server/discover") == 0) {
        /* Without the revision's _meta (a legacy client's probe): the
         * same answer, in the revision's shape. */
        result = modern_result(discover());
    } else if (!initialized(c)) {
        code = MCP_INVALID_REQUEST;
        emsg = "not initialized: send initialize first (or, protocol revision 2026-07-28, params._meta with "
               "io.modelcontextprotocol/protocolVersion and clientCapabilities on every request)";
    } else if (strcmp(m, "tools/list") == 0) {
        result = json_pack("{s:o}", "tools", mcp_tools_list());
    } else if (strcmp(m, "tools/call") == 0) {
        call_tool(c, id, params, false, send, sink);
        goto out;
    } else {
        char buf[200];
        (void)snprintf(buf, sizeof(buf), "method not found: %.120s", m);
        send_error(send, sink, id, MCP_METHOD_NOT_FOUND, buf);
        goto out;
    }
    if (result)
        send_result(send, sink, id, result, false);
    else
        send_error(send, sink, id, code ? code : MCP_INTERNAL_ERROR, emsg ? emsg : "out of memory");
out:
    json_decref(msg);
    (void)pthread_mutex_lock(&c->lock);
    if (--c->busy == 0)
        (void)pthread_cond_broadcast(&c->idle);
    (void)pthread_mutex_unlock(&c->lock);
}
