/* SPDX-License-Identifier: Apache-2.0 */
/* The MCP tool run_cell: one cell in a session's live kernel (kernel.c,
 * docs/mcp.md). The session is one of this connection's, made by
 * create_session with "kernel": "python". Figures come back as MCP image
 * content blocks; everything else as one text block with the reply's JSON
 * (structuredContent the same, without the images' data). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "srv.h"

const char mcp_kernel_tool_def[] =
    "{\"name\": \"run_cell\", \"title\": \"Run a cell in a session's Python kernel\","
    "\"description\": \"Runs Python code in the live interpreter of a session made by create_session with "
    "kernel \\\"python\\\": variables, imports and definitions stay between cells, like a notebook. Returns "
    "stdout, stderr, the value of a final expression (repr, and HTML for DataFrames), the error with its "
    "traceback, and the audit events of the cell; matplotlib figures come back as images. A cell over its "
    "timeout is interrupted (KeyboardInterrupt; the state stays); one that does not stop is killed and the "
    "kernel restarted (state lost). An escape attempt kills the kernel for good. isError is true unless the "
    "status is ok.\","
    "\"inputSchema\": {\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"session_id\", "
    "\"code\"], \"properties\": {"
    "\"session_id\": {\"type\": \"string\"},"
    "\"code\": {\"type\": \"string\", \"description\": \"Python source; a final expression's value is "
    "returned.\"},"
    "\"timeout\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 3600, \"description\": "
    "\"Seconds before the cell is interrupted (default 30).\"}}},"
    "\"outputSchema\": {\"type\": \"object\", \"properties\": {"
    "\"status\": {\"type\": \"string\", \"enum\": [\"ok\", \"error\", \"timeout\", \"interrupted\", \"dead\", "
    "\"refused\"]},"
    "\"stdout\": {\"type\": \"string\"}, \"stderr\": {\"type\": \"string\"},"
    "\"result\": {\"type\": [\"object\", \"null\"], \"description\": \"text/plain (repr), text/html.\"},"
    "\"error\": {\"type\": [\"object\", \"null\", \"string\"], \"description\": \"ename, evalue, traceback.\"},"
    "\"events\": {\"type\": \"array\", \"items\": {\"type\": \"object\"}},"
    "\"kernel\": {\"type\": \"object\", \"description\": \"restarted, state_lost.\"},"
    "\"images\": {\"type\": \"integer\"}, \"http_status\": {\"type\": \"integer\"}}},"
    "\"annotations\": {\"readOnlyHint\": false, \"destructiveHint\": false, \"openWorldHint\": false}}";

static json_t *fail(int *code, char *msg, size_t msg_size, const char *text)
{
    *code = MCP_INVALID_PARAMS;
    (void)snprintf(msg, msg_size, "%s", text);
    return NULL;
}

/* Move every "image/png" of o (the result, each display item) to blocks. */
static void take_images(json_t *o, json_t *blocks)
{
    json_t *res = json_object_get(o, "result"), *disp = json_object_get(o, "display"), *d;
    size_t i, n = 0;

    json_array_foreach(disp, i, d) {
        const char *png = json_string_value(json_object_get(d, "image/png"));
        if (png) {
            (void)json_array_append_new(blocks, json_pack("{s:s,s:s,s:s}", "type", "image", "data", png,
                                                          "mimeType", "image/png"));
            n++;
        }
    }
    const char *rpng = json_string_value(json_object_get(res, "image/png"));
    if (rpng && !n) /* a value's own _repr_png_ (figures are in display already) */
        (void)json_array_append_new(blocks, json_pack("{s:s,s:s,s:s}", "type", "image", "data", rpng,
                                                      "mimeType", "image/png"));
    if (json_is_object(res))
        (void)json_object_del(res, "image/png");
    (void)json_object_set_new(o, "display", json_array());
    (void)json_object_set_new(o, "images", json_integer((json_int_t)(json_array_size(blocks))));
}

json_t *mcp_kernel_run_cell(struct mcp_call *call, json_t *args, int *code, char *msg, size_t msg_size)
{
    const char *key;
    json_t *v, *sid = json_object_get(args, "session_id"), *src = json_object_get(args, "code");
    struct srv_reply rep = {0};
    char path[128];

    json_object_foreach(args, key, v) {
        if (strcmp(key, "session_id") != 0 && strcmp(key, "code") != 0 && strcmp(key, "timeout") != 0) {
            *code = MCP_INVALID_PARAMS;
            (void)snprintf(msg, msg_size, "unknown argument '%.64s' (known: session_id, code, timeout)", key);
            return NULL;
        }
    }
    if (!json_is_string(sid))
        return fail(code, msg, msg_size, "session_id: required, a string (create_session gives one)");
    if (!mcp_conn_has_session(call->conn, json_string_value(sid))) {
        *code = MCP_INVALID_PARAMS;
        (void)snprintf(msg, msg_size, "session_id: no session '%.64s' of this connection (create_session makes "
                       "one)", json_string_value(sid));
        return NULL;
    }
    if (!json_is_string(src))
        return fail(code, msg, msg_size, "code: required, a string");
    json_t *body = json_object();
    (void)json_object_set(body, "code", src);
    if (json_object_get(args, "timeout"))
        (void)json_object_set(body, "timeout", json_object_get(args, "timeout"));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return NULL;
    (void)snprintf(path, sizeof(path), "/v1/sessions/%s/cells", json_string_value(sid));
    srv_api_call(mcp_conn_ctx(call->conn), mcp_conn_tenant(call->conn), "POST", path, text, strlen(text), &rep);
    free(text);
    json_t *o = rep.body ? json_loadb(rep.body, rep.len, 0, NULL) : NULL;
    if (rep.status == 400) {
        const char *e = json_string_value(json_object_get(o, "error"));
        (void)snprintf(msg, msg_size, "%s", e ? e : "bad arguments");
        *code = MCP_INVALID_PARAMS;
        json_decref(o);
        srv_reply_clear(&rep);
        return NULL;
    }
    if (rep.status != 200 || !json_is_object(o)) {
        json_t *e = json_pack("{s:s,s:O?,s:i}", "status", "refused", "error", json_object_get(o, "error"),
                              "http_status", (int)rep.status);
        json_decref(o);
        o = e;
    }
    srv_reply_clear(&rep);
    if (!o)
        return NULL;
    json_t *content = json_array();
    take_images(o, content);
    char *summary = json_dumps(o, JSON_COMPACT);
    const char *st = json_string_value(json_object_get(o, "status"));
    json_t *r = summary && content
                    ? json_pack("{s:o,s:o,s:b}", "content", content, "structuredContent", o, "isError",
                                !st || strcmp(st, "ok") != 0)
                    : NULL;
    if (r)
        (void)json_array_insert_new(json_object_get(r, "content"), 0,
                                    json_pack("{s:s,s:s}", "type", "text", "text", summary));
    else {
        json_decref(content);
        json_decref(o);
    }
    free(summary);
    return r;
}
