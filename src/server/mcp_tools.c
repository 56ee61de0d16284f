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
    "\"outputs\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": \"Workspace paths "  \
    "read back once the run has ended (into outputs, base64).\"},"                                                    \
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
    "\"outputs\": {\"type\": \"object\", \"description\": \"path -> {base64, bytes, truncated} or {error}.\"}," \
    "\"session\": {\"type\": \"string\"},"                                                                          \
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
    /* create_session */
    "{\"name\": \"create_session\", \"title\": \"Create a sandbox session\","
    "\"description\": \"Creates a session: a private workspace (/workspace, size-limited) that stays between "
    "calls. Each run_code/run_command with its session_id runs in a fresh sandbox with that workspace; no process "
    "survives between calls. It ends with close_session, at its ttl or idle timeout, or when this MCP connection "
    "ends.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
    "\"ttl\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": \"Seconds it lives at most.\"},"
    "\"idle_timeout\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": \"Seconds without use "
    "before it ends.\"},"
    "\"workspace_quota\": {\"type\": [\"integer\", \"string\"], \"description\": \"Bytes, or a size such as "
    "\\\"64M\\\".\"},"
    "\"profile\": {\"type\": \"string\", \"description\": \"A built-in profile for its runs (it may only "
    "tighten the server's policy).\"}}},"
    "\"outputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"session_id\": {\"type\": \"string\"}, \"status\": {\"type\": \"string\"}, \"expires_ms\": "
    "{\"type\": \"integer\"}, \"workspace_quota\": {\"type\": \"integer\"}, \"workspace_used\": {\"type\": "
    "\"integer\"}, \"error\": {\"type\": \"string\"}}}}",
    /* write_file */
    "{\"name\": \"write_file\", \"title\": \"Write a file into a session's workspace\","
    "\"description\": \"Writes a file at path (relative to /workspace; directories are made) in a session: "
    "content as text, or content_base64 for bytes. Replaces a file that is there.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\", "
    "\"path\"], \"properties\": {"
    "\"session_id\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"},"
    "\"content\": {\"type\": \"string\", \"description\": \"The file's text (UTF-8).\"},"
    "\"content_base64\": {\"type\": \"string\", \"contentEncoding\": \"base64\", \"description\": "
    "\"The file's bytes, base64 (not with content).\"}}},"
    "\"outputSchema\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, "
    "\"bytes\": {\"type\": \"integer\"}, \"error\": {\"type\": \"string\"}}}}",
    /* read_file */
    "{\"name\": \"read_file\", \"title\": \"Read a file of a session's workspace\","
    "\"description\": \"Reads the file at path (relative to /workspace) of a session: its text when it is "
    "UTF-8, else base64 (encoding says which).\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\", "
    "\"path\"], \"properties\": {\"session_id\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}}},"
    "\"outputSchema\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, "
    "\"bytes\": {\"type\": \"integer\"}, \"encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", "
    "\"base64\"]}, \"content\": {\"type\": \"string\"}, \"error\": {\"type\": \"string\"}}}, "
    "\"annotations\": {\"readOnlyHint\": true}}",
    /* list_files */
    "{\"name\": \"list_files\", \"title\": \"List a directory of a session's workspace\","
    "\"description\": \"Lists the directory at path (relative to /workspace; the workspace itself when "
    "left out) of a session: each entry's name, type and size.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\"], "
    "\"properties\": {\"session_id\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}}},"
    "\"outputSchema\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, "
    "\"entries\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {\"name\": "
    "{\"type\": \"string\"}, \"type\": {\"type\": \"string\"}, \"size\": {\"type\": \"integer\"}}}}, "
    "\"truncated\": {\"type\": \"boolean\"}, \"error\": {\"type\": \"string\"}}}, "
    "\"annotations\": {\"readOnlyHint\": true}}",
    /* close_session */
    "{\"name\": \"close_session\", \"title\": \"Close a sandbox session\","
    "\"description\": \"Ends a session: a run in flight is killed and its workspace is removed.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\"], "
    "\"properties\": {\"session_id\": {\"type\": \"string\"}}},"
    "\"outputSchema\": {\"type\": \"object\", \"properties\": {\"session_id\": {\"type\": \"string\"}, "
    "\"status\": {\"type\": \"string\"}, \"error\": {\"type\": \"string\"}}}, "
    "\"annotations\": {\"destructiveHint\": true}}",
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

/* A request the API refused: the arguments' fault (400, 413) is a
 * -32602 error; anything else (a missing file, a link in the path, the
 * quota, a session that ended or has a run in flight, 429, 503) is a
 * tool result with isError, so the model sees why and may retry. Clears
 * rep. */
static json_t *refusal(struct srv_reply *rep, int *code, char *msg, size_t msg_size)
{
    char text[600];
    json_t *o;

    reply_error(rep, text, sizeof(text));
    if (rep->status == 400 || rep->status == 413) {
        *code = MCP_INVALID_PARAMS;
        (void)snprintf(msg, msg_size, "%s", text);
        srv_reply_clear(rep);
        return NULL;
    }
    o = json_pack("{s:s, s:s, s:i}", "status", "refused", "error", text, "http_status", (int)rep->status);
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
    static const char *const known_code[] = {"language", "code",    "files",      "outputs",
                                             "stdin",    "timeout", "session_id", NULL};
    static const char *const known_cmd[] = {"argv",  "command", "files",      "outputs",
                                            "stdin", "timeout", "session_id", NULL};
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

/* ---- sessions ------------------------------------------------------------------------------ */

static json_t *api(struct mcp_call *call, const char *method, const char *path, const char *body, size_t len,
                   struct srv_reply *rep)
{
    srv_api_call(mcp_conn_ctx(call->conn), mcp_conn_tenant(call->conn), method, path, body, len, rep);
    return rep->body && rep->content_type && strncmp(rep->content_type, "application/json", 16) == 0
               ? json_loadb(rep->body, rep->len, 0, NULL)
               : NULL;
}

/* The session_id argument, one of this connection's. */
static const char *session_arg(struct mcp_call *call, json_t *args, int *code, char *msg, size_t msg_size)
{
    json_t *sid = json_object_get(args, "session_id");

    if (!json_is_string(sid)) {
        bad(code, msg, msg_size, "session_id: required, a string (create_session gives one)");
        return NULL;
    }
    if (!mcp_conn_has_session(call->conn, json_string_value(sid))) {
        bad(code, msg, msg_size, "session_id: no session '%.64s' of this connection (create_session makes one)",
            json_string_value(sid));
        return NULL;
    }
    return json_string_value(sid);
}

static const char *path_arg(json_t *args, bool required, int *code, char *msg, size_t msg_size)
{
    json_t *p = json_object_get(args, "path");

    if (!p && !required)
        return "";
    if (!json_is_string(p) || strlen(json_string_value(p)) != json_string_length(p) ||
        (required && !json_string_length(p))) {
        bad(code, msg, msg_size, "path: %s", required ? "required, a non-empty string" : "must be a string");
        return NULL;
    }
    return json_string_value(p);
}

static json_t *create_session(struct mcp_call *call, json_t *args, int *code, char *msg, size_t msg_size)
{
    static const char *const known[] = {"ttl", "idle_timeout", "workspace_quota", "profile", NULL};
    struct srv_reply rep = {0};
    char *body;
    json_t *o;

    if (check_args(args, known, code, msg, msg_size) < 0)
        return NULL;
    body = json_dumps(args, JSON_COMPACT);
    if (!body)
        return NULL;
    o = api(call, "POST", "/v1/sessions", body, strlen(body), &rep);
    free(body);
    if (rep.status != 201 || !json_is_string(json_object_get(o, "id"))) {
        json_decref(o);
        return refusal(&rep, code, msg, msg_size);
    }
    srv_reply_clear(&rep);
    if (mcp_conn_add_session(call->conn, json_string_value(json_object_get(o, "id"))) < 0) {
        /* Not trackable: not handed out either. */
        mcp_tools_close_session(mcp_conn_ctx(call->conn), mcp_conn_tenant(call->conn),
                                json_string_value(json_object_get(o, "id")));
        json_decref(o);
        return NULL;
    }
    (void)json_object_set(o, "session_id", json_object_get(o, "id"));
    (void)json_object_del(o, "id");
    return tool_result(o, false);
}

static int b64_decode(const char *in, size_t in_len, char **ret, size_t *ret_len)
{
    struct base64_decode_ctx b;
    size_t n = BASE64_DECODE_LENGTH(in_len);
    char *out = malloc(n + 1);

    if (!out)
        return -1;
    base64_decode_init(&b);
    if (!base64_decode_update(&b, &n, (uint8_t *)out, in_len, in) || !base64_decode_final(&b)) {
        free(out);
        return -1;
    }
    *ret = out;
    *ret_len = n;
    return 0;
}

static json_t *write_file(struct mcp_call *call, json_t *args, int *code, char *msg, size_t msg_size)
{
    static const char *const known[] = {"session_id", "path", "content", "content_base64", NULL};
    json_t *text = json_object_get(args, "content"), *b64 = json_object_get(args, "content_base64");
    struct srv_reply rep = {0};
    const char *sid, *path;
    char *data = NULL, *url = NULL;
    size_t len = 0;
    json_t *o;

    if (check_args(args, known, code, msg, msg_size) < 0 || !(sid = session_arg(call, args, code, msg, msg_size)) ||
        !(path = path_arg(args, true, code, msg, msg_size)))
        return NULL;
    if (!text == !b64 || (text && !json_is_string(text)) || (b64 && !json_is_string(b64))) {
        bad(code, msg, msg_size, "give content (text) or content_base64 (bytes), one of them, as a string");
        return NULL;
    }
    if (text) {
        len = json_string_length(text);
        data = malloc(len + 1);
        if (data)
            memcpy(data, json_string_value(text), len + 1);
    } else if (b64_decode(json_string_value(b64), json_string_length(b64), &data, &len) < 0) {
        bad(code, msg, msg_size, "content_base64: not valid base64");
        return NULL;
    }
    if (!data || asprintf(&url, "/v1/sessions/%s/files/%s", sid, path) < 0) {
        free(data);
        return NULL;
    }
    o = api(call, "PUT", url, data, len, &rep);
    free(url);
    free(data);
    if (rep.status != 201 && rep.status != 200) {
        json_decref(o);
        return refusal(&rep, code, msg, msg_size);
    }
    srv_reply_clear(&rep);
    return tool_result(o ? o : json_pack("{s:s, s:I}", "path", path, "bytes", (json_int_t)len), false);
}

static bool utf8_valid(const char *p, size_t n)
{
    json_t *s = json_stringn(p, n); /* jansson refuses invalid UTF-8 (and keeps NULs) */
    bool ok = s != NULL;

    json_decref(s);
    return ok;
}

static json_t *read_or_list(struct mcp_call *call, json_t *args, bool list, int *code, char *msg, size_t msg_size)
{
    static const char *const known[] = {"session_id", "path", NULL};
    struct srv_reply rep = {0};
    const char *sid, *path;
    char *url = NULL;
    json_t *o;

    if (check_args(args, known, code, msg, msg_size) < 0 || !(sid = session_arg(call, args, code, msg, msg_size)) ||
        !(path = path_arg(args, !list, code, msg, msg_size)))
        return NULL;
    if (asprintf(&url, "/v1/sessions/%s/files/%s", sid, path) < 0)
        return NULL;
    o = api(call, "GET", url, NULL, 0, &rep);
    free(url);
    if (rep.status != 200) {
        json_decref(o);
        return refusal(&rep, code, msg, msg_size);
    }
    bool is_dir = o && json_is_string(json_object_get(o, "type")) &&
                  strcmp(json_string_value(json_object_get(o, "type")), "dir") == 0;
    if (list != is_dir) {
        json_decref(o);
        srv_reply_clear(&rep);
        bad(code, msg, msg_size, list ? "path: '%.200s' is a file: read_file reads it"
                                      : "path: '%.200s' is a directory: list_files lists it",
            path);
        return NULL;
    }
    if (list) {
        srv_reply_clear(&rep);
        (void)json_object_del(o, "type");
        return tool_result(o, false);
    }
    json_decref(o);
    if (utf8_valid(rep.body ? rep.body : "", rep.len)) {
        o = json_pack("{s:s, s:I, s:s, s:s%}", "path", path, "bytes", (json_int_t)rep.len, "encoding", "utf-8",
                      "content", rep.body ? rep.body : "", rep.len);
    } else {
        size_t n = BASE64_ENCODE_RAW_LENGTH(rep.len);
        char *enc = malloc(n + 1);
        if (enc) {
            base64_encode_raw(enc, rep.len, (const uint8_t *)rep.body);
            enc[n] = '\0';
        }
        o = enc ? json_pack("{s:s, s:I, s:s, s:s}", "path", path, "bytes", (json_int_t)rep.len, "encoding", "base64",
                            "content", enc)
                : NULL;
        free(enc);
    }
    srv_reply_clear(&rep);
    return o ? tool_result(o, false) : NULL;
}

static json_t *close_session(struct mcp_call *call, json_t *args, int *code, char *msg, size_t msg_size)
{
    static const char *const known[] = {"session_id", NULL};
    struct srv_reply rep = {0};
    const char *sid;
    char *url = NULL;
    json_t *o;

    if (check_args(args, known, code, msg, msg_size) < 0 || !(sid = session_arg(call, args, code, msg, msg_size)))
        return NULL;
    if (asprintf(&url, "/v1/sessions/%s", sid) < 0)
        return NULL;
    o = api(call, "DELETE", url, NULL, 0, &rep);
    free(url);
    /* Gone from the server (ended, expired) or closed now: gone here too. */
    if (rep.status == 200 || rep.status == 404 || rep.status == 410)
        mcp_conn_drop_session(call->conn, sid);
    if (rep.status != 200) {
        json_decref(o);
        return refusal(&rep, code, msg, msg_size);
    }
    srv_reply_clear(&rep);
    if (o) {
        (void)json_object_set(o, "session_id", json_object_get(o, "id"));
        (void)json_object_del(o, "id");
    }
    return tool_result(o ? o : json_pack("{s:s, s:s}", "session_id", sid, "status", "deleted"), false);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

json_t *mcp_tools_call(struct mcp_call *call, const char *name, json_t *args, int *code, char *msg, size_t msg_size)
{
    if (strcmp(name, "run_code") == 0)
        return tool_run(call, true, args, code, msg, msg_size);
    if (strcmp(name, "run_command") == 0)
        return tool_run(call, false, args, code, msg, msg_size);
    if (strcmp(name, "create_session") == 0)
        return create_session(call, args, code, msg, msg_size);
    if (strcmp(name, "write_file") == 0)
        return write_file(call, args, code, msg, msg_size);
    if (strcmp(name, "read_file") == 0)
        return read_or_list(call, args, false, code, msg, msg_size);
    if (strcmp(name, "list_files") == 0)
        return read_or_list(call, args, true, code, msg, msg_size);
    if (strcmp(name, "close_session") == 0)
        return close_session(call, args, code, msg, msg_size);
    bad(code, msg, msg_size, "unknown tool '%.100s' (tools/list names them)", name);
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
