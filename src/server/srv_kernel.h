/* SPDX-License-Identifier: Apache-2.0 */
/* A session's live interpreter (kernel.c, docs/server.md 'Kernels'): one
 * python3 in one long-lived sandbox of the session's policy, run by a
 * thread of its own that owns the library handle. */
#pragma once

#include <jansson.h>

#include "srv.h"

struct srv_kernel;
struct srv_session;

/* Start a kernel for tenant's session_id under pol (which must outlive
 * it): the thread and the first sandbox. 0, or -1 and msg. */
int srv_kernel_new(struct srv_ctx *ctx, const struct aj_policy *pol, const char *session_id, struct srv_tenant *tenant,
                   struct srv_kernel **ret, char *msg, size_t msg_size);
/* Kill the sandbox and join the thread; cells waiting get status dead.
 * Idempotent; NULL is a no-op. */
void srv_kernel_stop(struct srv_kernel *k, const char *why);
/* Stop and free. NULL is a no-op. */
void srv_kernel_free(struct srv_kernel *k);
/* {"language", "status", "reason", "restarts", "cells"} (new reference). */
json_t *srv_kernel_json(struct srv_kernel *k);
/* /v1/sessions/ID/cells and /v1/sessions/ID/kernel/restart; rest is what
 * follows the id. */
void srv_kernel_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *id,
                     const char *rest, const char *body, size_t body_len, struct srv_reply *reply);
/* One cell, blocking until it has ended (for MCP's run_cell): reply as
 * POST /v1/sessions/ID/cells answers. */
void srv_kernel_run_cell(struct srv_ctx *ctx, struct srv_tenant *t, const char *id, const char *code,
                         uint64_t timeout_ms, struct srv_reply *reply);
