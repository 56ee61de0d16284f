/* SPDX-License-Identifier: Apache-2.0 */
/* The MCP server (docs/mcp.md): JSON-RPC 2.0 over stdio (mcp_stdio.c)
 * and Streamable HTTP at /mcp (mcp_http.c), one protocol core (mcp.c)
 * and the tools (mcp_tools.c), which are clients of the HTTP API's
 * in-process call (srv_api_call) and of the runner (progress, cancel). */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>

#include "srv.h"

/* JSON-RPC 2.0 and MCP error codes. */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)
/* The 2026-07-28 revision's own (the range -32020..-32099 is the spec's). */
#define MCP_HEADER_MISMATCH (-32020)
#define MCP_UNSUPPORTED_VERSION (-32022)

/* The stateless revision (SEP-2575): no initialize, every request carries
 * its protocol version and client capabilities in params._meta. */
#define MCP_MODERN_VERSION "2026-07-28"

/* Where a message of one request goes (its progress notifications, then
 * its response): a line on stdio, an event of an SSE stream or a JSON
 * body. Takes the text (malloc'd) over. */
typedef void (*mcp_send_fn)(void *sink, char *json_text);

struct mcp_conn;
/* A set of sandbox session ids (the handles create_session returns) that
 * the calls of one or more connections may use. */
struct mcp_handles;

/* One MCP connection: a stdio session or an HTTP Mcp-Session-Id. Its
 * sandbox sessions are the tenant's, created through it and closed with
 * it. transport: "stdio" or "http" (logs). */
struct mcp_conn *mcp_conn_new(struct srv_ctx *ctx, struct srv_tenant *t, const char *transport);
/* One HTTP request of the stateless revision: its sandbox sessions go to
 * (and are looked up in) shared, the tenant's set, which outlives it. */
struct mcp_conn *mcp_conn_new_stateless(struct srv_ctx *ctx, struct srv_tenant *t, struct mcp_handles *shared);
struct mcp_handles *mcp_handles_new(void);
/* Close every sandbox session in h (tenant t's), free it. NULL: nothing. */
void mcp_handles_free(struct mcp_handles *h, struct srv_ctx *ctx, struct srv_tenant *t, const char *transport);
/* Cancel what is in flight (kills the runs); later tool calls are
 * refused. */
void mcp_conn_cancel_all(struct mcp_conn *c);
/* Cancel what is in flight (kills the runs), wait for those requests to
 * end, close the sandbox sessions it created, free it. */
void mcp_conn_free(struct mcp_conn *c);
struct srv_tenant *mcp_conn_tenant(const struct mcp_conn *c);
/* The negotiated protocol revision ("" before initialize). */
const char *mcp_conn_version(const struct mcp_conn *c);
bool mcp_conn_initialized(const struct mcp_conn *c);
/* Whether requests are running now (an HTTP session is not expired then). */
bool mcp_conn_busy(struct mcp_conn *c);

/* Whether msg (parsed) is a request (has an id and a method). */
bool mcp_is_request(const json_t *msg);
/* Whether msg carries the stateless revision's envelope
 * (params._meta["io.modelcontextprotocol/protocolVersion"]). */
bool mcp_is_modern(const json_t *msg);
/* Whether m is a method of the stateless revision here (server/discover,
 * tools/list, tools/call). */
bool mcp_modern_method(const char *m);
/* A modern request's envelope: NULL when it is fine, else the error
 * response's text (malloc'd) with *code: MCP_INVALID_PARAMS (a required
 * _meta field missing or mistyped), MCP_UNSUPPORTED_VERSION (data:
 * supported, requested). Over HTTP both are 400. */
char *mcp_modern_check(const json_t *msg, int *code);
/* Handle one parsed message; its outputs go to send(sink). A tools/call
 * blocks until its run ends (the caller gives it a thread). Takes msg. */
void mcp_handle(struct mcp_conn *c, json_t *msg, mcp_send_fn send, void *sink);
/* Cancel the request with this id (notifications/cancelled, or its HTTP
 * stream closed): its run is killed, and no response is sent for it. */
void mcp_cancel(struct mcp_conn *c, const json_t *id, const char *reason);
/* A JSON-RPC error response (id may be NULL: JSON null), as text. */
char *mcp_error_text(const json_t *id, int code, const char *message);

/* ---- tools (mcp_tools.c) ---- */

/* Where a running tool call reports: progress, and its run for a cancel. */
struct mcp_call {
    struct mcp_conn *conn;
    json_t *progress_token; /* NULL: none asked */
    double progress;
    mcp_send_fn send;
    void *sink;
    pthread_mutex_t *lock;  /* the connection's: guards run and cancelled */
    struct srv_run *run;    /* the live run, with a reference, or NULL */
    bool cancelled;
};

/* run_cell (mcp_kernel.c): its description and its call. */
extern const char mcp_kernel_tool_def[];
json_t *mcp_kernel_run_cell(struct mcp_call *call, json_t *args, int *code, char *msg, size_t msg_size);

/* The tools' descriptions (tools/list): a new array. */
json_t *mcp_tools_list(void);
/* Call tool name with arguments: the tool result (content, structuredContent,
 * isError), or NULL with *code and msg set (MCP_INVALID_PARAMS: bad
 * arguments, an unknown tool or session). */
json_t *mcp_tools_call(struct mcp_call *call, const char *name, json_t *args, int *code, char *msg, size_t msg_size);
/* Close a sandbox session the connection created (at its end). */
void mcp_tools_close_session(struct srv_ctx *ctx, struct srv_tenant *t, const char *id);

/* The connection's side of the tools: its sandbox session ids. */
struct srv_ctx *mcp_conn_ctx(const struct mcp_conn *c);
bool mcp_conn_has_session(struct mcp_conn *c, const char *id);
int mcp_conn_add_session(struct mcp_conn *c, const char *id);
void mcp_conn_drop_session(struct mcp_conn *c, const char *id);
void mcp_progress(struct mcp_call *call, const char *message);

/* ---- transports ---- */

/* Serve MCP on in_fd/out_fd (newline-delimited JSON-RPC) for tenant t
 * until EOF or a stop signal (SIGTERM/SIGINT, blocked in the caller and
 * taken here): 0. */
int mcp_stdio_serve(struct srv_ctx *ctx, struct srv_tenant *t, int in_fd, int out_fd);

/* The hooks of the server's setup (http.c: aj_server_run). */
struct aj_server_opts;
/* For MCP on stdio: the options' policy, profile and tenant into cfg: 0,
 * or -1 with msg. Nothing for HTTP. */
int srv_mcp_apply_opts(struct srv_config *cfg, const struct aj_server_opts *o, char *msg, size_t msg_size);
/* Serve MCP on the options' fds until EOF or SIGTERM/SIGINT: the exit status. */
int srv_mcp_stdio_main(struct srv_ctx *ctx, const struct aj_server_opts *o);
/* /mcp (http.c's route): t is the bearer token's tenant, or NULL. */
enum MHD_Result srv_mcp_http(struct srv_ctx *ctx, struct MHD_Connection *c, struct srv_tenant *t,
                             const char *method, const char *body, size_t len);
/* End every HTTP MCP session (at shutdown, after the runner stopped). */
void srv_mcp_http_stop(void);
