/* SPDX-License-Identifier: Apache-2.0 */
/* The server's modules: config (config.c), run records (store.c), the
 * runner thread that owns every sandbox handle (runner.c) and the HTTP
 * side (http.c). A client of the library's public headers only. */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentjail.h"

/* ---- config ------------------------------------------------------------------ */

#define SRV_LATENCY_BUCKETS 12
#define SRV_MAX_EVENTS 100
extern const unsigned srv_latency_bounds_ms[SRV_LATENCY_BUCKETS];

/* Runs queued or running at once, all tenants: the bound of max_runs. */
#define SRV_MAX_RUNS 256

/* The config's "interpreters": warm interpreters to keep (docs/interpreters.md).
 * Only python exists: at most one entry. */
struct srv_interp {
    bool set;           /* given (a tenant's replaces the server's; [] turns them off) */
    bool python;        /* an entry for python */
    char **preload;     /* module names */
    size_t n_preload;
    char *warmup;       /* code each runs before it parks (interpreter.warmup); NULL: the policy's */
    unsigned pool;      /* parked interpreters */
};

struct srv_tenant {
    char *name;
    uint8_t token_sha256[32];
    /* From the config; what a tenant does not set is the server's (filled
     * in at load, tenant.c). */
    char *policy_path;            /* loaded on top of the server's policy; NULL: none */
    char *profile;                /* loaded on top of the server's policy, before policy_path */
    unsigned max_runs;            /* queued + running at once */
    unsigned max_runs_per_minute; /* a token bucket of that size; 0: none */
    uint64_t max_timeout_ms;      /* the runs' timeout and what a request may ask for */
    unsigned pool_size;           /* its warm pool's sandboxes; 0: cold runs */
    struct srv_interp interp;     /* its "interpreters" (interp.set: given) */
    uint32_t uid_base, uid_count; /* its host uids (root mode): never another tenant's */
    bool set_max_runs, set_rate, set_timeout, set_pool, set_uid; /* given in the config */

    /* Built at load (srv_tenants_build), read-only afterwards. */
    size_t index;                 /* in cfg->tenants */
    struct aj_policy *pol;        /* its own policy object: its uid range, its timeout. Every run
                                   * of t starts from it (a session's policy too), never from
                                   * the server's */
    struct aj_policy *pol_nonet;  /* pol with network.mode none (a request's "network": "none"),
                                   * NULL when pol has no network already */
    struct aj_policy *pol_interp; /* pol with its python interpreter (interpreter.language and
                                   * preload), NULL: none; its pool parks interp_pool of them */
    unsigned interp_pool;
    char net_mode[16];            /* pol's network.mode */
    uint64_t lim_memory, lim_cpu_time_ms, lim_output; /* pol's limits, 0: none (bounds of "limits") */
    char policy_sha256[65];

    /* Under the runner's lock. */
    unsigned running;    /* queued or running now */
    unsigned queued;     /* accepted, not started yet */
    uint64_t finished;   /* runs ended */
    uint64_t finished_by_status[16];
    uint64_t escapes;    /* escape_attempt events of its runs */
    uint64_t net_denied; /* net_denied events of its runs, as processed */
    double tokens;       /* the run-rate bucket (max_runs_per_minute) */
    int64_t tokens_ms;   /* when it was last filled */
    bool pool;           /* its warm pool is in use */
    uint64_t warm_runs, cold_runs; /* its pool's counts (aj_pool_get_stats) */
    unsigned pool_ready;
    bool interp_pool_on;                  /* its warm interpreters' pool is in use */
    uint64_t interp_warm_runs, interp_cold_runs; /* that pool's counts */
    unsigned interp_ready;
    /* The session code's gauge (srv_tenant_sessions_add); atomic. */
    int sessions_live;
};

/* An origin (origin.c): scheme://host[:port], lowercased, a default port
 * as none (0); port -1 (a config pattern's ":*"): any port. */
struct srv_origin {
    bool https;
    char host[256];
    int port;
};

struct srv_config {
    char *listen;           /* "HOST:PORT" or "unix:/path" */
    char *store;            /* SQLite file; with PostgreSQL, STATE_DIR/postgresql (never opened: its
                             * directory holds the replica's events and workspaces, as beside a
                             * SQLite file) */
    char *store_pg;         /* PostgreSQL conninfo (store_pg.c); NULL: SQLite */
    char *policy_path;      /* NULL: the default policy */
    char *profile;          /* NULL: none */
    struct srv_tenant *tenants;
    size_t n_tenants;
    unsigned max_runs;            /* queued + running, all tenants */
    unsigned max_runs_per_tenant; /* queued + running, one tenant (a tenant's default max_runs) */
    size_t max_body_bytes;
    size_t max_output_bytes;      /* per stream, what the server keeps */
    uint64_t max_timeout_ms;      /* the policy's timeout: requests may only tighten it */
    unsigned max_connections;
    unsigned max_connections_per_ip; /* 0: no per-address limit */
    unsigned connection_timeout;  /* seconds a connection may stay idle */
    unsigned pool_size;           /* parked sandboxes (aj_pool_new); 0: every run cold */
    unsigned runner_threads;      /* threads that start runs and own their handles; 0: one per CPU, at most 8 */
    struct srv_interp interp;     /* "interpreters": every tenant's unless it has its own */
    unsigned max_runs_per_minute; /* per tenant, a token bucket of that size; 0: no rate limit */
    unsigned retention_days;      /* records of ended runs kept; 0: forever */
    /* Sessions and workspaces (the config's "sessions" object; session.c). */
    unsigned max_sessions_per_tenant; /* live sessions of one tenant; 0: no sessions */
    uint64_t session_ttl_ms;          /* the default ttl, and the most a session may ask */
    uint64_t session_idle_ms;         /* the default idle_timeout, and the most */
    uint64_t workspace_quota;         /* bytes: the default quota, and the most */
    uint64_t max_file_bytes;          /* one file in or out (PUT, GET, a run's files) */
    uint64_t max_outputs_bytes;       /* a run's outputs in its record, all together */
    uint32_t ws_uid_base, ws_uid_count; /* host uids that own workspaces, one per workspace */
    char ws_backend[8];               /* "auto" (""), "tmpfs" or "ext4" (srv_ws_root_init) */
    char *events_log;             /* JSON Lines sink of every run's events: a path, "-": stdout; NULL: none */
    char *tls_cert_path, *tls_key_path;
    char *tls_cert_pem, *tls_key_pem; /* read and checked at load; NULL: no TLS */
    /* Forwarding between replicas of a PostgreSQL store (the config's
     * "replica"; forward.c). */
    char *replica_advertise;  /* where the other replicas reach this one (http://, https://, unix:);
                               * NULL: they answer 421 for its live runs and sessions */
    char *replica_ca_path;    /* PEM CA(s) an https peer's certificate must chain to; NULL: the system's */
    unsigned replica_timeout; /* seconds: connecting to a peer, and each wait for its bytes */
    /* "mcp": {"allowed_origins": [...]}: the Origins /mcp serves; not set:
     * loopback origins only (mcp_http.c). A request without Origin is
     * served either way (not a browser). */
    struct srv_origin *mcp_origins;
    size_t n_mcp_origins;
    bool mcp_origins_set;
};

/* Parse path: 0, or -1 with one line FILE:LINE:COL: KEY: what in msg. */
int srv_config_load(const char *path, struct srv_config *cfg, char *msg, size_t msg_size);
void srv_config_clear(struct srv_config *cfg);
/* runner_threads, or its default for this machine's CPUs (0 in the config). */
unsigned srv_config_runner_threads(const struct srv_config *cfg);

/* ---- tenants (tenant.c) ------------------------------------------------------------- */

/* Each tenant's own policy (the server's profile and file, then the
 * tenant's on top, its timeout and uid range), checked to be no looser
 * than the server's and its uid range to overlap no other tenant's. -1
 * with the config key at fault in key and the message in msg. */
int srv_tenants_build(struct srv_config *cfg, char *key, size_t key_size, char *msg, size_t msg_size);
void srv_tenants_clear(struct srv_config *cfg);
/* The session code's hook for the sessions_live gauge (/metrics): +1 as
 * a session of t is created, -1 as it ends (closed, expired). Any thread. */
void srv_tenant_sessions_add(struct srv_tenant *t, int delta);
int srv_tenant_sessions_live(const struct srv_tenant *t);
struct srv_run;
/* A run request's "limits" {timeout, memory, cpu_time, output} (numbers
 * of seconds or bytes, or texts such as "10s", "512M") into r, each
 * checked against t's policy: NULL, or the message of a 400 naming the
 * field. A request may only tighten. */
const char *srv_tenant_request_limits(const struct srv_tenant *t, json_t *limits, struct srv_run *r, char *msg,
                                      size_t msg_size);
/* A run request's "network" ("none" | "loopback"): NULL and r->pol set
 * to t's variant when it tightens t's policy, or the message of a 400. */
const char *srv_tenant_request_network(const struct srv_tenant *t, json_t *net, struct srv_run *r, char *msg,
                                       size_t msg_size);

/* ---- origins (origin.c) ------------------------------------------------------------------ */

/* s as an origin (pattern: a config entry, which may end in ":*"): 0, or
 * -1 with why. */
int srv_origin_parse(const char *s, bool pattern, struct srv_origin *out, const char **why);
bool srv_origin_match(const struct srv_origin *pat, const struct srv_origin *o);
/* Its normal form, as snprintf. */
int srv_origin_format(const struct srv_origin *o, char *buf, size_t size);

/* ---- TLS (tls.c) ------------------------------------------------------------------------ */

/* A replica's advertise address ("http://HOST:PORT", "https://HOST:PORT",
 * "unix:/PATH"; forward.c): 0, or -1 and why. */
int srv_peer_check(const char *spec, char *why, size_t why_size);
/* A CA file for https peers (replica.ca): 0, or -1 and why. */
int srv_peer_check_ca(const char *path, char *why, size_t why_size);
/* Requests forwarded to another replica (GET /metrics): answered by the
 * owner, 503 (it could not be reached or did not answer), 508 (a loop). */
void srv_fwd_counts(uint64_t *ok, uint64_t *unreachable, uint64_t *loop);

/* Read and check the certificate chain and key (PEM): 0, or -1 with
 * which ("cert" or "key") and the reason. */
int srv_tls_load(struct srv_config *cfg, const char **which, char *msg, size_t msg_size);

/* ---- the events log (eventlog.c) --------------------------------------------------------- */

/* Every run's audit events as JSON Lines, each with "tenant" and
 * "run_id" added, for log shippers: spec is an absolute path (appended,
 * made 0600) or "-" (stdout). One sink per process. */
int srv_eventlog_open(const char *spec, char *msg, size_t msg_size);
/* SIGHUP (logrotate): open the path again; a failure keeps the old file. */
void srv_eventlog_reopen(void);
/* One event line (ev is the library's event object; not changed). */
void srv_eventlog_write(const char *tenant, const char *run_id, json_t *ev);
/* Lines that could not be written (the sink full, gone, ...). */
uint64_t srv_eventlog_errors(void);
bool srv_eventlog_enabled(void);
void srv_eventlog_close(void);

/* ---- runs ----------------------------------------------------------------------- */

enum srv_run_state { SRV_QUEUED, SRV_RUNNING, SRV_DONE };

struct srv_buf {
    char *data;
    size_t len, cap;   /* kept: at most the config's max_output_bytes */
    uint64_t total;    /* what the payload wrote */
    bool truncated;
};

struct srv_run;
/* What an epoll event of the runner is about (its data.ptr). */
enum srv_watch_kind { SRV_W_HANDLE, SRV_W_STDIN, SRV_W_STDOUT, SRV_W_STDERR };
struct srv_watch {
    struct srv_run *run;
    enum srv_watch_kind kind;
};

struct srv_run {
    /* Set by the HTTP thread before queueing, then read-only. */
    char id[33];
    struct srv_tenant *tenant;
    char **argv;
    char **envp;
    char *stdin_data;
    size_t stdin_len;
    uint64_t timeout_ms;
    /* The request's "limits" (0: the policy's; checked to only tighten)
     * and its "network": a policy other than the tenant's (NULL: the
     * tenant's, from its warm pool). */
    uint64_t memory_max, cpu_time_ms, output_limit;
    const struct aj_policy *pol;
    int64_t created_ms;

    /* Under the runner's lock. */
    int refs;
    enum srv_run_state state;
    bool kill_requested;
    struct srv_run *next;  /* the runner's list of live runs */
    struct srv_run *qnext; /* the runner's queue of runs to start */
    unsigned lane;         /* the runner thread (runner.c) that starts it and owns its handle */

    /* The runner thread's own while the run is live; read by others
     * (under the lock) once state is SRV_DONE. */
    struct aj_sandbox *h;
    struct srv_watch watch[4];
    int fd_in, fd_out, fd_err;
    size_t stdin_off;
    bool ended;
    struct srv_buf out, err;
    int64_t ended_ms;
    char status[32];
    int exit_code;
    char policy_sha256[65];
    char *result_json; /* the library's result JSON */
    /* The run's audit events file (the runner's), tailed after each
     * aj_sandbox_process; what it says beyond start and exit goes to
     * events (under the lock once added; at most SRV_MAX_EVENTS). */
    char *events_path;
    int ev_fd;
    char ev_line[4096];
    size_t ev_len;
    json_t *events;
    bool events_truncated;
    char error[512];   /* a run that could not start */

    /* A run with a workspace (session.c): set before it is submitted,
     * then read-only until the runner's srv_session_run_ended. */
    struct aj_policy *own_pol;   /* the run's own (a temporary workspace's bind): freed with it */
    const char *workdir;         /* "/workspace", or NULL */
    struct srv_session *session; /* a reference, or NULL */
    struct srv_ws *ws;           /* the session's workspace or a temporary one, or NULL */
    bool ws_temp;                /* the workspace is the run's own: removed as it ends */
    char **outputs;              /* workspace paths whose contents go into the record */
    char session_id[33];         /* "" when none */
    json_t *outputs_json;        /* set by the runner as the run ends; NULL: none asked */
};

/* ---- store ---------------------------------------------------------------------- */

struct srv_store;
/* cfg->store_pg ? PostgreSQL : the SQLite file cfg->store. */
int srv_store_open(const struct srv_config *cfg, struct srv_store **ret, char *msg, size_t msg_size);
/* A conninfo the config may hold (config.c): NULL, or why not. */
const char *srv_store_pg_check_conninfo(const char *conninfo, char *msg, size_t msg_size);
void srv_store_close(struct srv_store *s);
/* Sessions (session.c): live ones are in memory, every one is a row.
 * At open, rows a killed server left live are marked "lost". */
struct srv_session_row {
    char id[33];
    const char *tenant;
    int64_t created_ms, ended_ms, expires_ms;
    uint64_t idle_ms, quota;
    const char *status; /* live, deleted, expired, lost */
    const char *reason; /* NULL or why it ended */
    const char *policy_sha256;
};
int srv_store_session_insert(struct srv_store *s, const struct srv_session_row *row);
int srv_store_session_end(struct srv_store *s, const char *id, const char *status, const char *reason,
                          int64_t ended_ms);
/* The row of id if tenant owns it, as JSON text (caller frees): 0, -ENOENT, -EIO. */
int srv_store_session_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret);
/* Whether the live run (session: the live session) id of tenant is
 * another replica's: 1 and *ret_advertise, its address (malloc'd; NULL
 * when it has none), or 0 (not live elsewhere: unknown, ended, this
 * replica's, or its replica has stopped), or -EIO. Always 0 with SQLite. */
int srv_store_locate(struct srv_store *s, bool session, const char *tenant, const char *id, char **ret_advertise);
/* A run accepted (status "queued"). */
int srv_store_insert(struct srv_store *s, const struct srv_run *r);
/* Remove the records of runs that ended before before_ms: how many, or -EIO. */
int srv_store_prune(struct srv_store *s, int64_t before_ms);
/* Whether a record could be written now (GET /readyz): 0 or -EIO. */
int srv_store_check_writable(struct srv_store *s);
/* A run refused after its insert (429, shutdown): no record. */
int srv_store_delete(struct srv_store *s, const char *id);
/* A run ended: its final record. */
int srv_store_finish(struct srv_store *s, const struct srv_run *r);
/* The record of id if tenant owns it, as JSON text (caller frees): 0,
 * -ENOENT when there is none for this tenant, -EIO on a store error. */
int srv_store_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret);

/* Output as a JSON string: bytes that are not UTF-8 become U+FFFD. */
json_t *srv_text_json(const char *p, size_t n);
/* The record's JSON (the same shape from memory and from the store). */
char *srv_record_json(const struct srv_run *r, const char *state_name);

/* ---- runner ---------------------------------------------------------------------- */

struct srv_runner;
struct srv_metrics {
    uint64_t started, rejected_429, finished_by_status[16];
    uint64_t escape_attempts, canaries; /* events of ended runs */
    uint64_t net_denied;                /* net_denied events, as processed */
    unsigned queued;                    /* accepted, not started yet */
    /* Accepted to ended, per run: counts at or under srv_latency_bounds_ms
     * (cumulative when printed), their sum. */
    uint64_t latency_le[SRV_LATENCY_BUCKETS], latency_count, latency_sum_ms;
    unsigned running;
    bool pool;                        /* a warm pool is in use (some tenant's) */
    uint64_t warm_runs, cold_runs;    /* the pools' counts, summed (aj_pool_get_stats) */
    unsigned pool_ready;              /* as of the read (each pool asked then) */
    bool interp;                      /* some tenant's warm interpreters are in use */
    uint64_t interp_warm_runs, interp_cold_runs;
    unsigned interp_ready;
};
/* The Prometheus text of GET /metrics (metrics.c); NULL when out of memory. */
char *srv_metrics_text(struct srv_runner *rn, const struct srv_config *cfg);
/* events_dir: where runs' audit events files go (the server's own,
 * 0700), or NULL for none. */
int srv_runner_new(const struct srv_config *cfg, const struct aj_policy *pol, struct srv_store *store,
                   const char *events_dir, struct srv_runner **ret, char *msg, size_t msg_size);
/* One run of t's rate (max_runs_per_minute): 0, or -EAGAIN and the
 * seconds until the next one is allowed. */
int srv_runner_take_rate(struct srv_runner *rn, struct srv_tenant *t, unsigned *retry_after);
/* Accept r (refs taken over by the runner): 0, or -EAGAIN over a cap. */
int srv_runner_submit(struct srv_runner *rn, struct srv_run *r);
/* A live run of tenant by id, with a reference; NULL if none. */
struct srv_run *srv_runner_find(struct srv_runner *rn, const struct srv_tenant *tenant, const char *id);
void srv_runner_kill(struct srv_runner *rn, struct srv_run *r);
/* Block until r is done. */
void srv_runner_wait(struct srv_runner *rn, struct srv_run *r);
/* The record of r now (running or done), as JSON text. */
char *srv_runner_record(struct srv_runner *rn, struct srv_run *r);
void srv_run_unref(struct srv_runner *rn, struct srv_run *r);
/* Wait until r has output past off[1] (stdout) or off[2] (stderr), copy
 * up to max bytes of it to buf, advance that offset, say which stream
 * (1, 2), or an event's JSON past off[0] (stream 3): the byte count; 0
 * once the run has ended and all was copied;
 * -EAGAIN after 15 s with neither (half of connection_timeout when that
 * is shorter). */
ssize_t srv_runner_next_output(struct srv_runner *rn, struct srv_run *r, size_t off[3], char *buf, size_t max,
                              int *stream);
void srv_runner_metrics(struct srv_runner *rn, struct srv_metrics *m);
/* Escape attempts and canaries seen outside a run (a session's kernel,
 * kernel.c): into the server's and t's counts. */
void srv_runner_count_events(struct srv_runner *rn, struct srv_tenant *t, uint64_t escapes, uint64_t canaries);
/* A tenant's counts, read under the runner's lock. */
void srv_runner_tenant_counts(struct srv_runner *rn, const struct srv_tenant *t, unsigned *running,
                              uint64_t *finished, uint64_t *escapes);
/* A copy of t's counts (the fields under the runner's lock). */
void srv_runner_tenant_snapshot(struct srv_runner *rn, const struct srv_tenant *t, struct srv_tenant *ret);
/* Remove records past retention_days (now: whatever the hour). The
 * runner thread's, or before it runs anything. */
void srv_runner_prune(struct srv_runner *rn, bool now);
/* Whether runs are accepted (not shutting down). */
/* Whether the runner has made its warm pools (each filled as it is made). */
bool srv_runner_warm(struct srv_runner *rn);
bool srv_runner_accepting(struct srv_runner *rn);
/* Refuse new runs, kill every live one, end the thread once they are
 * all recorded. Requests still waiting on runs are answered; the struct
 * stays valid for them until srv_runner_free. */
void srv_runner_stop(struct srv_runner *rn);
void srv_runner_free(struct srv_runner *rn);

extern const char *const srv_status_names[16];
int srv_status_index(const char *name);

/* Wait up to timeout_ms for r to end: true once it is done. */
bool srv_runner_wait_for(struct srv_runner *rn, struct srv_run *r, int64_t timeout_ms);

/* ---- the API (api.c): /v1/ as a call ---------------------------------------------- */

/* The server: what every request handler shares. */
struct srv_ctx {
    struct srv_config cfg;
    struct aj_policy *pol;
    struct srv_store *store;
    struct srv_runner *rn;
    int in_flight; /* HTTP requests between their first call and their completion (atomic) */
    struct srv_sessions *sessions; /* session.c */
};

struct srv_reply {
    unsigned status;          /* HTTP status */
    char *body;               /* malloc'd: JSON text (or raw bytes for a file GET); NULL: out of memory */
    size_t len;
    const char *content_type; /* static string */
    unsigned retry_after;     /* seconds, for 429; 0: none */
};

/* Serve one /v1/ request whose body is complete in memory, for tenant t
 * (already authenticated): the same routing, checks, caps, status codes
 * and JSON as over HTTP (docs/server.md): /v1/runs, /v1/runs/ID,
 * /v1/sessions, /v1/sessions/ID, /v1/sessions/ID/runs and
 * /v1/sessions/ID/files/PATH (PUT with the file as the body, capped at
 * max_file_bytes; GET answers the raw bytes, content_type
 * "application/octet-stream", or a directory's JSON listing). Only the
 * SSE stream (/v1/runs/ID/stream) is HTTP's alone. A `wait: true` run
 * blocks the calling thread until the run ends. path has no query
 * string. */
void srv_api_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *path,
                  const char *body, size_t body_len, struct srv_reply *reply);
void srv_reply_clear(struct srv_reply *reply);
void srv_reply_json(struct srv_reply *reply, unsigned status, char *json); /* takes json */
void srv_reply_error(struct srv_reply *reply, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For a caller that follows a run as it goes (MCP progress and cancel):
 * parse, check and submit the body of POST path ("/v1/runs" or
 * "/v1/sessions/ID/runs") as that request would, whatever its `wait`: 0 and *ret the run, with a
 * reference that is the caller's (srv_run_unref); or -1, *ret NULL and
 * reply filled with the error the request would get (400, 404, 429 with
 * retry_after, 500, 503). Then: srv_runner_wait_for / srv_runner_wait,
 * srv_runner_next_output, srv_runner_kill, and srv_api_run_reply for the
 * answer POST would give once it has ended. */
int srv_api_submit_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *path, const char *body,
                       size_t body_len, struct srv_run **ret, struct srv_reply *reply);
/* The reply to a `wait: true` POST of r (which has ended): 200 with its
 * record, or 400 for a request the library refused. */
void srv_api_run_reply(struct srv_ctx *ctx, struct srv_run *r, struct srv_reply *reply);

/* A random 32-hex-digit id (run, session): false if getrandom failed. */
bool srv_new_id(char id[33]);
bool srv_valid_id(const char *id);

/* ---- sessions and workspaces (session.c, workspace.c) ------------------------------ */

struct srv_sessions;
struct srv_session;
struct srv_ws;

/* Sessions need root (a tmpfs per workspace): as root, the server moves
 * to a mount namespace of its own (so a killed server's workspaces go
 * with it), makes "workspaces/" beside the store (root's, 0700) and
 * removes what a killed server left there; not as root (or when that
 * set-up fails: one stderr line), sessions and run workspaces are
 * refused (501) and the server goes on. Call before any thread starts.
 * Then srv_sessions_start (the expiry thread) once ctx->rn exists. */
int srv_sessions_new(struct srv_ctx *ctx, struct srv_sessions **ret, char *msg, size_t msg_size);
int srv_sessions_start(struct srv_sessions *ss, char *msg, size_t msg_size);
/* Shutdown: every live session ends ("lost", the server shut down), its
 * workspace removed. Runs have ended (srv_runner_stop) before. */
void srv_sessions_stop(struct srv_sessions *ss);
void srv_sessions_free(struct srv_sessions *ss);
/* Whether t's session id is live on this replica (memory only, no store:
 * forward.c asks before it looks for another replica's). */
bool srv_session_live_here(struct srv_sessions *ss, const struct srv_tenant *t, const char *id);
/* The live sessions (metrics). */
unsigned srv_sessions_live(struct srv_sessions *ss);

/* The /v1/sessions routes (api.c dispatches): reply filled. rest is the
 * path after /v1/sessions ("" or "/ID..."). */
void srv_sessions_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *rest,
                       const char *body, size_t body_len, struct srv_reply *reply);
/* A run's workspace, before it is submitted: the session's (session_id,
 * with the session marked busy: one run at a time) or a temporary one
 * (files or outputs without a session), files (an object of base64)
 * written into it, outputs (an array of paths) kept. 0, or -1 with the
 * error reply. */
int srv_session_prepare_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *session_id, json_t *files,
                            json_t *outputs, struct srv_run *r, struct srv_reply *reply);
/* The runner thread, as a run ends (its sandbox gone): outputs read,
 * workspace_full decided, the session let go, a temporary workspace
 * removed. */
void srv_session_run_ended(struct srv_run *r);
/* What a run holds of sessions and workspaces, freed (the run is freed,
 * or was never submitted). */
void srv_session_run_free(struct srv_run *r);

/* Streamed file bodies (HTTP only). A PUT of /v1/sessions/ID/files/PATH:
 * begin (0, or -1 and the error reply), write each piece, end (reply
 * filled); free at any point drops what was written (an O_TMPFILE: a
 * client that leaves mid-upload leaves no file). */
struct srv_upload;
bool srv_is_files_path(const char *url);
int srv_upload_begin(struct srv_ctx *ctx, struct srv_tenant *t, const char *url, struct srv_upload **ret,
                     struct srv_reply *reply);
void srv_upload_write(struct srv_upload *up, const char *data, size_t len);
void srv_upload_end(struct srv_upload *up, struct srv_reply *reply);
void srv_upload_free(struct srv_upload *up);
/* A GET of /v1/sessions/ID/files/PATH that is a regular file: 1 and an
 * fd (the caller's) and its size to stream; 0 and reply filled
 * otherwise (a directory's listing, an error). */
int srv_files_open_get(struct srv_ctx *ctx, struct srv_tenant *t, const char *url, int *ret_fd, uint64_t *ret_size,
                       struct srv_reply *reply);

/* ---- HTTP ----------------------------------------------------------------------- */

int64_t srv_now_ms(void);
