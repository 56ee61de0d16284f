/* SPDX-License-Identifier: Apache-2.0 */
/* The /v1/ API as a call: one request whose body is complete in memory,
 * for a tenant already authenticated, answered with a status and a JSON
 * body. http.c serves every complete-body /v1/ request through it, the
 * MCP server calls it for its tools: the same routing, checks, caps,
 * status codes and JSON either way. Streaming (SSE, streamed file
 * bodies) is http.c's alone. Handlers never touch a sandbox: they hand
 * runs to the runner thread (runner.c) and wait for its records. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "srv.h"

/* ---- replies ------------------------------------------------------------------------ */

void srv_reply_clear(struct srv_reply *reply)
{
    if (!reply)
        return;
    free(reply->body);
    *reply = (struct srv_reply){0};
}

/* Takes json (NULL: out of memory, a 500 without a body). */
void srv_reply_json(struct srv_reply *reply, unsigned status, char *json)
{
    free(reply->body);
    reply->status = json ? status : 500;
    reply->body = json;
    reply->len = json ? strlen(json) : 0;
    reply->content_type = "application/json";
    reply->retry_after = 0;
}

void srv_reply_error(struct srv_reply *reply, unsigned status, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    json_t *o;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A path from a URL or a workspace need not be UTF-8: such bytes
     * become U+FFFD rather than no answer at all. */
    o = json_pack("{s:o}", "error", srv_text_json(msg, strlen(msg)));
    srv_reply_json(reply, status, o ? json_dumps(o, JSON_COMPACT) : NULL);
    json_decref(o);
}

/* ---- POST /v1/runs ----------------------------------------------------------------------- */

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static bool plain_string(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* Parse the request into r; NULL, or the message of a 400. */
static const char *parse_run(struct srv_ctx *ctx, json_t *req, struct srv_run *r, bool *wait, json_t **files,
                             json_t **outputs, char *msg, size_t msg_size)
{
    static const char *const interp[][3] = {
        {"python", "python3", "-c"}, {"bash", "bash", "-c"}, {"sh", "sh", "-c"}, {"node", "node", "-e"}};
    json_t *lang = NULL, *code = NULL, *argv = NULL, *v;
    const char *key;
    size_t n;

    (void)ctx; /* the bounds are the tenant's (r->tenant) */
    if (!json_is_object(req))
        return "the body is a JSON object";
    json_object_foreach(req, key, v) {
        if (strcmp(key, "language") == 0 || strcmp(key, "code") == 0 || strcmp(key, "argv") == 0) {
            *(strcmp(key, "language") == 0 ? &lang : strcmp(key, "code") == 0 ? &code : &argv) = v;
        } else if (strcmp(key, "stdin") == 0) {
            if (!json_is_string(v))
                return "stdin: must be a string";
            r->stdin_len = json_string_length(v);
            r->stdin_data = malloc(r->stdin_len + 1);
            if (!r->stdin_data)
                return "out of memory";
            memcpy(r->stdin_data, json_string_value(v), r->stdin_len + 1);
        } else if (strcmp(key, "env") == 0) {
            const char *name;
            json_t *val;
            size_t i = 0;
            if (!json_is_object(v))
                return "env: must be an object of strings";
            r->envp = calloc(json_object_size(v) + 1, sizeof(char *));
            if (!r->envp)
                return "out of memory";
            json_object_foreach(v, name, val) {
                if (!plain_string(val) || !name[0] || strchr(name, '=')) {
                    (void)snprintf(msg, msg_size, "env.%s: a name without '=' and a string value", name);
                    return msg;
                }
                if (asprintf(&r->envp[i], "%s=%s", name, json_string_value(val)) < 0) {
                    r->envp[i] = NULL;
                    return "out of memory";
                }
                i++;
            }
        } else if (strcmp(key, "timeout") == 0) {
            double s = json_number_value(v);
            if (!json_is_number(v) || s <= 0)
                return "timeout: must be a positive number of seconds";
            if (s * 1000.0 > (double)r->tenant->max_timeout_ms) {
                (void)snprintf(msg, msg_size, "timeout: %g s is more than the server allows (%llu s); a request "
                               "may only tighten it", s, (unsigned long long)(r->tenant->max_timeout_ms / 1000));
                return msg;
            }
            r->timeout_ms = (uint64_t)(s * 1000.0);
            if (!r->timeout_ms)
                r->timeout_ms = 1;
        } else if (strcmp(key, "files") == 0) {
            *files = v; /* checked with the workspace (session.c) */
        } else if (strcmp(key, "outputs") == 0) {
            *outputs = v;
        } else if (strcmp(key, "limits") == 0) {
            const char *bad = srv_tenant_request_limits(r->tenant, v, r, msg, msg_size);
            if (bad)
                return bad;
        } else if (strcmp(key, "network") == 0) {
            const char *bad = srv_tenant_request_network(r->tenant, v, r, msg, msg_size);
            if (bad)
                return bad;
        } else if (strcmp(key, "wait") == 0) {
            if (!json_is_boolean(v))
                return "wait: must be true or false";
            *wait = json_is_true(v);
        } else {
            (void)snprintf(msg, msg_size, "unknown field '%s' (known: language, code, argv, stdin, env, timeout, "
                           "files, outputs, limits, network, wait)", key);
            return msg;
        }
    }
    if (argv && (lang || code))
        return "argv: give either argv or language and code, not both";
    if (argv) {
        if (!json_is_array(argv) || json_array_size(argv) == 0 || json_array_size(argv) > 4096)
            return "argv: must be a non-empty array of strings";
        n = json_array_size(argv);
        r->argv = calloc(n + 1, sizeof(char *));
        if (!r->argv)
            return "out of memory";
        for (size_t i = 0; i < n; i++) {
            json_t *a = json_array_get(argv, i);
            if (!plain_string(a)) {
                (void)snprintf(msg, msg_size, "argv[%zu]: must be a string without NUL bytes", i);
                return msg;
            }
            r->argv[i] = strdup(json_string_value(a));
            if (!r->argv[i])
                return "out of memory";
        }
        return NULL;
    }
    if (!lang || !code)
        return lang ? "code: required with language" : code ? "language: required with code"
                                                            : "argv, or language and code, is required";
    if (!json_is_string(lang))
        return "language: must be one of python, bash, sh, node";
    if (!plain_string(code))
        return "code: must be a string without NUL bytes";
    for (size_t i = 0; i < sizeof(interp) / sizeof(interp[0]); i++) {
        if (strcmp(json_string_value(lang), interp[i][0]) != 0)
            continue;
        r->argv = calloc(4, sizeof(char *));
        if (!r->argv || !(r->argv[0] = strdup(interp[i][1])) || !(r->argv[1] = strdup(interp[i][2])) ||
            !(r->argv[2] = strdup(json_string_value(code))))
            return "out of memory";
        return NULL;
    }
    return "language: must be one of python, bash, sh, node";
}

bool srv_new_id(char id[33])
{
    uint8_t b[16];

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return false;
    for (int i = 0; i < 16; i++)
        (void)snprintf(id + 2 * i, 3, "%02x", b[i]);
    return true;
}

bool srv_valid_id(const char *id)
{
    size_t n = strspn(id, "0123456789abcdef");
    return n == 32 && id[n] == '\0';
}

static void discard_run(struct srv_run *r)
{
    srv_session_run_free(r);
    free_strv(r->argv);
    free_strv(r->envp);
    free(r->stdin_data);
    free(r);
}

/* Parse, record and hand to the runner: 0 and *ret (this caller's
 * reference), or -1 with the error reply. */
static int submit_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *session_id, const char *body,
                      size_t body_len, struct srv_run **ret, bool *wait, struct srv_reply *reply)
{
    json_t *files = NULL, *outputs = NULL;
    json_error_t jerr;
    /* \u0000 is allowed (stdin may hold any byte a JSON string can say);
     * argv, env and code refuse strings with a NUL (plain_string). */
    json_t *req = json_loadb(body ? body : "", body ? body_len : 0, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    struct srv_run *r;
    const char *bad;
    char msg[400];
    unsigned retry = 0;
    int rc;

    *ret = NULL;
    if (!req) {
        srv_reply_error(reply, 400, "body:%d:%d: %s", jerr.line, jerr.column, jerr.text);
        return -1;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        json_decref(req);
        srv_reply_error(reply, 500, "out of memory");
        return -1;
    }
    r->tenant = t; /* its bounds (parse_run) */
    bad = parse_run(ctx, req, r, wait, &files, &outputs, msg, sizeof(msg));
    if (bad) {
        json_decref(req);
        srv_reply_error(reply, 400, "%s", bad);
        discard_run(r);
        return -1;
    }
    if (!srv_new_id(r->id)) {
        json_decref(req);
        srv_reply_error(reply, 500, "getrandom: %s", strerror(errno));
        discard_run(r);
        return -1;
    }
    if (srv_runner_take_rate(ctx->rn, t, &retry) < 0) {
        json_decref(req);
        discard_run(r);
        srv_reply_error(reply, 429, "too many runs this minute (the tenant's rate limit); retry later");
        reply->retry_after = retry;
        return -1;
    }
    /* The workspace: the session's, or the run's own for files and
     * outputs; files are written into it now. */
    rc = srv_session_prepare_run(ctx, t, session_id, files, outputs, r, reply);
    json_decref(req);
    if (rc < 0) {
        discard_run(r);
        return -1;
    }
    r->tenant = t;
    r->created_ms = srv_now_ms();
    r->refs = 1; /* this thread's */
    /* Recorded before the runner has it, so that its end (which may come
     * at once: a refused request) always finds the row to update, and a
     * server killed after this point leaves a row the next one marks lost. */
    if (srv_store_insert(ctx->store, r) < 0) {
        discard_run(r);
        srv_reply_error(reply, 500, "the run store could not be written");
        return -1;
    }
    rc = srv_runner_submit(ctx->rn, r);
    if (rc < 0 && srv_store_delete(ctx->store, r->id) < 0)
        (void)fprintf(stderr, "agentjail serve: store: could not remove refused run %s\n", r->id);
    if (rc == -EAGAIN) {
        discard_run(r);
        srv_reply_error(reply, 429, "too many runs at once (the tenant's or the server's limit); retry later");
        reply->retry_after = 1;
        return -1;
    }
    if (rc < 0) {
        discard_run(r);
        srv_reply_error(reply, 503, "the server is shutting down");
        return -1;
    }
    *ret = r;
    return 0;
}

/* /v1/sessions/ID/runs: the id in sid. */
static bool session_runs_path(const char *path, char sid[33])
{
    if (strncmp(path, "/v1/sessions/", 13) != 0 || strlen(path) != 13 + 32 + 5 || strcmp(path + 13 + 32, "/runs") != 0)
        return false;
    memcpy(sid, path + 13, 32);
    sid[32] = '\0';
    return strspn(sid, "0123456789abcdef") == 32;
}

int srv_api_submit_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *path, const char *body,
                       size_t body_len, struct srv_run **ret, struct srv_reply *reply)
{
    bool wait = true;
    char sid[33];

    *ret = NULL;
    if (strcmp(path, "/v1/runs") == 0)
        return submit_run(ctx, t, NULL, body, body_len, ret, &wait, reply);
    if (session_runs_path(path, sid))
        return submit_run(ctx, t, sid, body, body_len, ret, &wait, reply);
    srv_reply_error(reply, 404, "no endpoint %s", path);
    return -1;
}

void srv_api_run_reply(struct srv_ctx *ctx, struct srv_run *r, struct srv_reply *reply)
{
    char *rec = srv_runner_record(ctx->rn, r);

    /* A request the library refused (a limit it may not loosen, an
     * environment entry it does not take) is the client's error. */
    if (rec && r->state == SRV_DONE && strcmp(r->status, "setup_error") == 0 &&
        strncmp(r->error, "request", 7) == 0) {
        srv_reply_error(reply, 400, "%s", r->error);
        free(rec);
        return;
    }
    srv_reply_json(reply, 200, rec);
}

static void post_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *session_id, const char *body,
                     size_t body_len, struct srv_reply *reply)
{
    struct srv_run *r;
    bool wait = true;

    if (submit_run(ctx, t, session_id, body, body_len, &r, &wait, reply) < 0)
        return;
    if (!wait) {
        json_t *o = json_pack("{s:s, s:s}", "id", r->id, "status", "running");
        srv_reply_json(reply, 202, o ? json_dumps(o, JSON_COMPACT) : NULL);
        json_decref(o);
        srv_run_unref(ctx->rn, r);
        return;
    }
    srv_runner_wait(ctx->rn, r);
    srv_api_run_reply(ctx, r, reply);
    srv_run_unref(ctx->rn, r);
}

/* ---- GET / DELETE /v1/runs/{id} ------------------------------------------------------------- */

/* A stored record still queued or running (only another replica's can be). */
static bool record_live(const char *rec)
{
    json_t *o = json_loads(rec, 0, NULL);
    const char *st = json_string_value(json_object_get(o, "status"));
    bool live = st && (strcmp(st, "queued") == 0 || strcmp(st, "running") == 0);

    json_decref(o);
    return live;
}

static void one_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *id, bool kill, struct srv_reply *reply)
{
    struct srv_run *r = srv_valid_id(id) ? srv_runner_find(ctx->rn, t, id) : NULL;
    char *rec = NULL;
    int rc;

    if (r) {
        if (kill) {
            srv_runner_kill(ctx->rn, r);
            srv_runner_wait(ctx->rn, r);
        }
        rec = srv_runner_record(ctx->rn, r);
        srv_run_unref(ctx->rn, r);
        srv_reply_json(reply, 200, rec);
        return;
    }
    if (!srv_valid_id(id)) {
        srv_reply_error(reply, 404, "no run with that id");
        return;
    }
    /* Not live: finished (or never this tenant's, which reads the same). */
    rc = srv_store_get_json(ctx->store, t->name, id, &rec);
    if (rc == -ENOENT)
        srv_reply_error(reply, 404, "no run %s", id);
    else if (rc < 0)
        srv_reply_error(reply, 500, "the run store could not be read");
    else if (kill && record_live(rec)) {
        /* Live, not here: another replica of a shared store runs it. */
        free(rec);
        srv_reply_error(reply, 421,
                        "run %s is running on another replica, which advertises no address to forward to "
                        "(replica.advertise): DELETE it there", id);
    } else
        srv_reply_json(reply, 200, rec);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

void srv_api_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *path,
                  const char *body, size_t body_len, struct srv_reply *reply)
{
    *reply = (struct srv_reply){0};
    if (strcmp(path, "/v1/runs") == 0) {
        if (strcmp(method, "POST") != 0) {
            srv_reply_error(reply, 405, "%s /v1/runs: only POST", method);
            return;
        }
        post_run(ctx, t, NULL, body, body_len, reply);
        return;
    }
    char sid[33];
    if (session_runs_path(path, sid)) {
        if (strcmp(method, "POST") != 0)
            srv_reply_error(reply, 405, "%s %s: only POST", method, path);
        else
            post_run(ctx, t, sid, body, body_len, reply);
        return;
    }
    if (strncmp(path, "/v1/sessions", 12) == 0 && (path[12] == '/' || !path[12])) {
        srv_sessions_call(ctx, t, method, path + 12, body, body_len, reply);
        return;
    }
    if (strncmp(path, "/v1/runs/", 9) == 0 && strlen(path) == 9 + 32 + 7 && strcmp(path + 9 + 32, "/stream") == 0) {
        srv_reply_error(reply, 400, "%s: a stream is served over HTTP only", path);
        return;
    }
    if (strncmp(path, "/v1/runs/", 9) == 0 && !strchr(path + 9, '/')) {
        if (strcmp(method, "GET") == 0)
            one_run(ctx, t, path + 9, false, reply);
        else if (strcmp(method, "DELETE") == 0)
            one_run(ctx, t, path + 9, true, reply);
        else
            srv_reply_error(reply, 405, "%s %s: only GET and DELETE", method, path);
        return;
    }
    srv_reply_error(reply, 404, "no endpoint %s", path);
}
