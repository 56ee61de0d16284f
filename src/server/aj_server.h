/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail serve`: the HTTP API (src/server/, docs/server.md). */
#pragma once

/* Serve until SIGTERM or SIGINT. Returns the process's exit status: 0
 * after a clean shutdown, 2 for a bad config (one line FILE:LINE:COL on
 * stderr), 1 when the server could not start. */
int aj_server_main(const char *config_path);
