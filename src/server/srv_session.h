/* SPDX-License-Identifier: Apache-2.0 */
/* Sessions' internals shared by session.c (the registry, sessions, runs)
 * and session_files.c (the files routes). */
#pragma once

#include <pthread.h>

#include "srv.h"
#include "srv_ws.h"

struct srv_session {
    char id[33];
    struct srv_tenant *tenant;
    struct aj_policy *pol; /* the server's, tightened, plus the workspace bind */
    char policy_sha256[65];
    struct srv_ws *ws;
    struct srv_kernel *kernel; /* kernel.c: a live interpreter, or NULL; set before the session is listed */
    uint64_t quota, idle_ms;
    int64_t created_ms, expires_ms, last_used_ms;
    /* Under the registry's lock. */
    int refs;
    int active;       /* runs and file operations in progress: not idle */
    char run_id[33];  /* the run in flight, "" */
    bool closed;
    struct srv_session *next;
};

struct srv_sessions {
    struct srv_ctx *ctx;
    const char *off; /* why sessions and workspaces are refused (501), or NULL */
    char off_msg[700];
    int rootfd;
    char *root;
    enum srv_ws_backend backend; /* what srv_ws_root_init chose */
    struct aj_policy *base; /* a copy of the server's policy (diffs are read here, under the lock) */
    char *base_json;

    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct srv_session *live;
    unsigned n_live;
    uint8_t *owners; /* a bit per uid of ws_uid_base.. in use */
    bool stopping;
    pthread_t thread;
    bool thread_started;
};

/* A live session of t by id, with a reference: 0, -ENOENT (none of t's:
 * unknown, another tenant's), -ESTALE (t's, ended: in the store). */
int srv_session_find(struct srv_sessions *ss, const struct srv_tenant *t, const char *id, struct srv_session **ret);
/* The reply for srv_session_find's error: 404, or 410 for an ended one. */
void srv_find_fail(int rc, const char *id, struct srv_reply *reply);
void srv_session_unref(struct srv_sessions *ss, struct srv_session *s);
/* Something uses the session (a run, a file request): not idle; end
 * restarts its idle clock. */
void srv_session_begin(struct srv_sessions *ss, struct srv_session *s);
void srv_session_end(struct srv_sessions *ss, struct srv_session *s);
/* The files routes with the body in memory (srv_api_call). url is the
 * whole path. */
void srv_files_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *url,
                    const char *body, size_t body_len, struct srv_reply *reply);
