/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail serve`: the HTTP API (src/server/, docs/server.md), and
 * `agentjail mcp`: the same server speaking MCP on stdio (docs/mcp.md). */
#pragma once

/* Serve until SIGTERM or SIGINT. Returns the process's exit status: 0
 * after a clean shutdown, 2 for a bad config (one line FILE:LINE:COL on
 * stderr), 1 when the server could not start. */
int aj_server_main(const char *config_path);

struct aj_server_opts {
    const char *config_path;
    /* MCP on stdio: the JSON-RPC channel's fds (>= 0), instead of HTTP;
     * -1: serve HTTP as aj_server_main does. */
    int mcp_in_fd, mcp_out_fd;
    const char *policy_path; /* MCP: overrides the config's policy */
    const char *profile;     /* MCP: overrides the config's profile */
    const char *tenant;      /* MCP: the tenant the session acts as (NULL: the config's only one) */
};
/* aj_server_main with options: the same statuses. */
int aj_server_run(const struct aj_server_opts *o);
