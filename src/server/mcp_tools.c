/* SPDX-License-Identifier: Apache-2.0 */
/* The MCP tools: run_code, run_command and the session tools. Each is a
 * call of the HTTP API in process (srv_api_call: the same checks, caps,
 * records and statuses as over HTTP, for the connection's tenant); a run
 * is submitted without waiting, then followed through the runner for
 * progress notifications and so that a cancel can kill it. */
#include <errno.h>
#include <nettle/base64.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

/* ---- schemas ------------------------------------------------------------------------------- */

#define RUN_COMMON_PROPS                                                                                           \
    "\"files\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\", \"contentEncoding\": "      \
    "\"base64\"}, \"description\": \"Files to write into the sandbox before the run: relative path -> content, "    \
    "base64.\"},"                                                                                                  \
    "\"stdin\": {\"type\": \"string\", \"description\": \"Text written to the program's standard input.\"},"        \
    "\"timeout\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": \"Seconds before the run is "   \
    "killed (status timeout); at most the server's limit.\"},"                                                     \
    "\"session_id\": {\"type\": \"string\", \"description\": \"Run in this session (create_session): its "         \
    "workspace is /workspace and stays between calls. Without it: a one-shot sandbox.\"}"

#define RUN_OUTPUT                                                                                                 \
    "{\"type\": \"object\", \"required\": [\"status\"], \"properties\": {"                                        \
    "\"id\": {\"type\": \"string\", \"description\": \"The run's id (its record on the server).\"},"              \
    "\"status\": {\"type\": \"string\", \"description\": \"ok, nonzero_exit, signaled, timeout, cpu_limit, "       \
    "memory_limit, pids_limit, output_limit, escape_attempt, setup_error, cancelled, lost; refused: the server "   \
    "did not run it (see error).\"},"                                                                              \
    "\"exit_code\": {\"type\": \"integer\"},"                                                                      \
    "\"stdout\": {\"type\": \"string\"}, \"stderr\": {\"type\": \"string\"},"                                      \
    "\"stdout_truncated\": {\"type\": \"boolean\"}, \"stderr_truncated\": {\"type\": \"boolean\"},"                \
    "\"stdout_bytes\": {\"type\": \"integer\"}, \"stderr_bytes\": {\"type\": \"integer\"},"                        \
    "\"events\": {\"type\": \"array\", \"items\": {\"type\": \"object\"}, \"description\": \"Audit events: "       \
    "escape attempts (with the system call), canaries, limits.\"},"                                                \
    "\"result\": {\"type\": [\"object\", \"null\"], \"description\": \"The sandbox's result JSON "                 \
    "(docs/result.md).\"},"                                                                                        \
    "\"error\": {\"type\": \"string\"}, \"retry_after\": {\"type\": \"integer\"}}}"

static const char *const tool_defs[] = {
    /* run_code */
    "{\"name\": \"run_code\", \"title\": \"Run code in a sandbox\","
    "\"description\": \"Runs a program in a fresh agentjail sandbox (no network, read-only system, no "
    "capabilities; escape attempts are refused and reported) and returns its exit status, output and audit "
    "events. isError is true when the run failed: a non-zero exit, a timeout, a limit, an escape attempt.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"language\", "
    "\"code\"], \"properties\": {"
    "\"language\": {\"type\": \"string\", \"enum\": [\"python\", \"bash\", \"sh\", \"node\"]},"
    "\"code\": {\"type\": \"string\", \"description\": \"The program's source.\"}," RUN_COMMON_PROPS "}},"
    "\"outputSchema\": " RUN_OUTPUT ","
    "\"annotations\": {\"readOnlyHint\": false, \"destructiveHint\": false, \"openWorldHint\": false}}",
    /* run_command */
    "{\"name\": \"run_command\", \"title\": \"Run a command in a sandbox\","
    "\"description\": \"Runs a command in a fresh agentjail sandbox: argv (an array, executed as given) or "
    "command (one shell line, run by sh -c). Returns as run_code does.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
    "\"argv\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"minItems\": 1, \"description\": "
    "\"The program and its arguments (not with command).\"},"
    "\"command\": {\"type\": \"string\", \"description\": \"A shell line, run by sh -c (not with argv).\"},"
    RUN_COMMON_PROPS "}},"
    "\"outputSchema\": " RUN_OUTPUT ","
    "\"annotations\": {\"readOnlyHint\": false, \"destructiveHint\": false, \"openWorldHint\": false}}",
};

json_t *mcp_tools_list(void)
{
    json_t *a = json_array();

    for (size_t i = 0; a && i < sizeof(tool_defs) / sizeof(tool_defs[0]); i++) {
        json_error_t e;
        json_t *t = json_loads(tool_defs[i], 0, &e);
        if (!t) {
            /* A programming error in the tables above: say where. */
            (void)fprintf(stderr, "agentjail mcp: tool %zu: %d:%d: %s\n", i, e.line, e.column, e.text);
            continue;
        }
        (void)json_array_append_new(a, t);
    }
    return a;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static int bad(int *code, char *msg, size_t msg_size, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad(int *code, char *msg, size_t msg_size, const char *fmt, ...)
{
    va_list ap;

    *code = MCP_INVALID_PARAMS;
    va_start(ap, fmt);
    (void)vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Only the known keys, each of its type. */
static int check_args(json_t *args, const char *const *known, int *code, char *msg, size_t msg_size)
{
    const char *key;
    json_t *v;

    json_object_foreach(args, key, v) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key) != 0)
            i++;
        if (!known[i])
            return bad(code, msg, msg_size, "unknown argument '%s'", key);
    }
    return 0;
}

/* A tool result: structuredContent and the same JSON as text. Takes o. */
static json_t *tool_result(json_t *o, bool is_error)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_t *r = NULL;

    if (text)
        r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text, "structuredContent", o,
                      "isError", is_error);
    else
        json_decref(o);
    free(text);
    return r;
}

/* The server's {"error": ...} of a reply, or a generic text. */
static void reply_error(const struct srv_reply *rep, char *msg, size_t msg_size)
{
    json_t *o = rep->body ? json_loadb(rep->body, rep->len, 0, NULL) : NULL;
    const char *e = json_string_value(json_object_get(o, "error"));

    (void)snprintf(msg, msg_size, "%s", e ? e : "the server refused the request");
    json_decref(o);
}

/* A request the API refused: the arguments' fault (400, 404 for a
 * session, 413) is a -32602 error; anything else (429, 503) is a tool
 * result with isError, so the model sees why and may retry. Clears rep. */
static json_t *refusal(struct srv_reply *rep, int *code, char *msg, size_t msg_size)
{
    char text[600];
    json_t *o;

    reply_error(rep, text, sizeof(text));
    if (rep->status == 400 || rep->status == 404 || rep->status == 413) {
        *code = MCP_INVALID_PARAMS;
        (void)snprintf(msg, msg_size, "%s", text);
        srv_reply_clear(rep);
        return NULL;
    }
    o = json_pack("{s:s, s:s}", "status", "refused", "error", text);
    if (o && rep->retry_after)
        (void)json_object_set_new(o, "retry_after", json_integer(rep->retry_after));
    srv_reply_clear(rep);
    return tool_result(o, true);
}

/* ---- runs ---------------------------------------------------------------------------------- */

/* Follow a live run to its end: progress notifications (when the client
 * asked for them) for its output and events. */
static void follow(struct mcp_call *call, struct srv_runner *rn, struct srv_run *r)
{
    size_t off[3] = {0, 0, 0};
    char buf[4096];
    int stream;
    ssize_t n;

    if (!call->progress_token) {
        srv_runner_wait(rn, r);
        return;
    }
    mcp_progress(call, "started");
    while ((n = srv_runner_next_output(rn, r, off, buf, sizeof(buf) - 1, &stream)) != 0) {
        char *msg = NULL;
        if (n < 0) {
            mcp_progress(call, "running");
            continue;
        }
        if (stream == 3) {
            json_t *ev = json_loadb(buf, (size_t)n, 0, NULL);
            const char *type = json_string_value(json_object_get(ev, "type"));
            const char *sc = json_string_value(json_object_get(ev, "syscall"));
            if (asprintf(&msg, "event: %s%s%s", type ? type : "?", sc ? " " : "", sc ? sc : "") < 0)
                msg = NULL;
            json_decref(ev);
        } else {
            json_t *s = srv_text_json(buf, (size_t)n);
            if (asprintf(&msg, "%s: %s", stream == 1 ? "stdout" : "stderr", s ? json_string_value(s) : "") < 0)
                msg = NULL;
            json_decref(s);
        }
        mcp_progress(call, msg ? msg : "output");
        free(msg);
    }
}

static bool escaped(json_t *rec)
{
    json_t *res = json_object_get(rec, "result");
    json_t *ev;
    size_t i;

    if (json_is_true(json_object_get(res, "escape_attempted")))
        return true;
    json_array_foreach(json_object_get(rec, "events"), i, ev) {
        const char *type = json_string_value(json_object_get(ev, "type"));
        if (type && strcmp(type, "escape_attempt") == 0)
            return true;
    }
    return false;
}

/* Submit body to path as that POST would be, follow the run to its end,
 * answer its record. */
static json_t *run(struct mcp_call *call, const char *path, json_t *body, int *code, char *msg, size_t msg_size)
{
    struct srv_ctx *ctx = mcp_conn_ctx(call->conn);
    struct srv_reply rep = {0};
    struct srv_run *r = NULL;
    char *text;
    json_t *rec;
    int rc;

    (void)pthread_mutex_lock(call->lock);
    bool cancelled = call->cancelled;
    (void)pthread_mutex_unlock(call->lock);
    if (cancelled)
        return NULL;
    text = json_dumps(body, JSON_COMPACT);
    if (!text)
        return NULL;
    rc = srv_api_submit_run(ctx, mcp_conn_tenant(call->conn), path, text, strlen(text), &r, &rep);
    free(text);
    if (rc < 0)
        return refusal(&rep, code, msg, msg_size);
    (void)pthread_mutex_lock(call->lock);
    call->run = r;
    if (call->cancelled)
        srv_runner_kill(ctx->rn, r);
    (void)pthread_mutex_unlock(call->lock);
    follow(call, ctx->rn, r);
    (void)pthread_mutex_lock(call->lock);
    call->run = NULL;
    (void)pthread_mutex_unlock(call->lock);
    srv_api_run_reply(ctx, r, &rep);
    srv_run_unref(ctx->rn, r);
    if (rep.status != 200)
        return refusal(&rep, code, msg, msg_size);
    rec = rep.body ? json_loadb(rep.body, rep.len, 0, NULL) : NULL;
    srv_reply_clear(&rep);
    if (!json_is_object(rec)) {
        json_decref(rec);
        (void)snprintf(msg, msg_size, "the run's record could not be read");
        *code = MCP_INTERNAL_ERROR;
        return NULL;
    }
    const char *status = json_string_value(json_object_get(rec, "status"));
    bool failed = !status || strcmp(status, "ok") != 0 || escaped(rec);
    return tool_result(rec, failed);
}

static const char *run_path(struct mcp_call *call, json_t *args, char *buf, size_t size, int *code, char *msg,
                            size_t msg_size)
{
    json_t *sid = json_object_get(args, "session_id");

    if (!sid)
        return "/v1/runs";
    if (!json_is_string(sid) || !mcp_conn_has_session(call->conn, json_string_value(sid))) {
        bad(code, msg, msg_size, "session_id: no session '%s' of this connection (create_session makes one)",
            json_is_string(sid) ? json_string_value(sid) : "?");
        return NULL;
    }
    (void)snprintf(buf, size, "/v1/sessions/%s/runs", json_string_value(sid));
    return buf;
}

static json_t *tool_run(struct mcp_call *call, bool code_tool, json_t *args, int *code, char *msg, size_t msg_size)
{
    static const char *const known_code[] = {"language", "code", "files", "stdin", "timeout", "session_id", NULL};
    static const char *const known_cmd[] = {"argv", "command", "files", "stdin", "timeout", "session_id", NULL};
    json_t *body, *res;
    char pbuf[128];
    const char *path;

    if (check_args(args, code_tool ? known_code : known_cmd, code, msg, msg_size) < 0)
        return NULL;
    path = run_path(call, args, pbuf, sizeof(pbuf), code, msg, msg_size);
    if (!path)
        return NULL;
    body = json_deep_copy(args);
    if (!body)
        return NULL;
    (void)json_object_del(body, "session_id");
    if (code_tool) {
        if (!json_object_get(args, "language") || !json_object_get(args, "code")) {
            json_decref(body);
            bad(code, msg, msg_size, "%s", "language and code are required");
            return NULL;
        }
    } else {
        json_t *argv = json_object_get(args, "argv"), *line = json_object_get(args, "command");
        if (!argv == !line) {
            json_decref(body);
            bad(code, msg, msg_size, "%s", "give argv (an array of strings) or command (a shell line), one of them");
            return NULL;
        }
        if (line) {
            if (!json_is_string(line)) {
                json_decref(body);
                bad(code, msg, msg_size, "%s", "command: must be a string (a shell line)");
                return NULL;
            }
            (void)json_object_del(body, "command");
            (void)json_object_set_new(body, "argv", json_pack("[s, s, O]", "sh", "-c", line));
        }
    }
    res = run(call, path, body, code, msg, msg_size);
    json_decref(body);
    return res;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

json_t *mcp_tools_call(struct mcp_call *call, const char *name, json_t *args, int *code, char *msg, size_t msg_size)
{
    if (strcmp(name, "run_code") == 0)
        return tool_run(call, true, args, code, msg, msg_size);
    if (strcmp(name, "run_command") == 0)
        return tool_run(call, false, args, code, msg, msg_size);
    bad(code, msg, msg_size, "unknown tool '%s' (tools/list names them)", name);
    return NULL;
}

void mcp_tools_close_session(struct srv_ctx *ctx, struct srv_tenant *t, const char *id)
{
    struct srv_reply rep = {0};
    char path[128];

    (void)snprintf(path, sizeof(path), "/v1/sessions/%s", id);
    srv_api_call(ctx, t, "DELETE", path, NULL, 0, &rep);
    srv_reply_clear(&rep);
}
