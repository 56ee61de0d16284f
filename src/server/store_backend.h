/* SPDX-License-Identifier: Apache-2.0 */
/* The store's two backends (store_sqlite.c, store_pg.c) behind one table,
 * as crun keeps its cgroup backends; store.c dispatches srv_store_* and
 * holds what both share, so both give the same record JSON. */
#pragma once

#include "srv.h"

struct srv_store;
struct store_ops {
    void (*close)(struct srv_store *s);
    int (*insert)(struct srv_store *s, const struct srv_run *r);
    int (*prune)(struct srv_store *s, int64_t before_ms);
    int (*check_writable)(struct srv_store *s);
    int (*del)(struct srv_store *s, const char *id);
    int (*finish)(struct srv_store *s, const struct srv_run *r);
    int (*get_json)(struct srv_store *s, const char *tenant, const char *id, char **ret);
    int (*session_insert)(struct srv_store *s, const struct srv_session_row *row);
    int (*session_end)(struct srv_store *s, const char *id, const char *status, const char *reason, int64_t ended_ms);
    int (*session_get_json)(struct srv_store *s, const char *tenant, const char *id, char **ret);
    /* NULL: one node (SQLite), nothing is ever another replica's. */
    int (*locate)(struct srv_store *s, bool session, const char *tenant, const char *id, char **ret_advertise);
};

/* Each backend's handle starts with this. */
struct srv_store {
    const struct store_ops *ops;
};

int store_sqlite_open(const char *path, struct srv_store **ret, char *msg, size_t msg_size);
/* advertise: this replica's address for forwarded requests, or NULL. */
int store_pg_open(const char *conninfo, const char *advertise, struct srv_store **ret, char *msg, size_t msg_size);

/* argv as a JSON array (the record's summary of what ran): malloc'd text. */
char *store_argv_json(char *const *argv);

/* Reading a row back, the same way from either backend: its columns
 * through the backend's accessors, mapped to the record once (store.c). */
struct store_row {
    const void *impl; /* the backend's statement or result, at the row */
    bool (*null)(const void *impl, int col);
    const char *(*text)(const void *impl, int col); /* "" for NULL; valid while the row is */
    int64_t (*i64)(const void *impl, int col);       /* 0 for NULL */
    /* A malloc'd, NUL-ended copy ("" for NULL; bytea decoded) and its
     * length; NULL when out of memory. */
    char *(*copy)(const void *impl, int col, size_t *len);
};
/* The columns store_run_row_json reads, in its order (a runs row). */
#define STORE_RUN_COLUMNS                                                                                     \
    "created_ms, ended_ms, argv, status, exit_code, policy_sha256, result, error, stdout, stderr, stdout_bytes," \
    " stderr_bytes, stdout_truncated, stderr_truncated, events, events_truncated, session, outputs"
/* A runs row of STORE_RUN_COLUMNS, as the record's JSON text: 0 and *ret, or -ENOMEM. */
int store_run_row_json(const char *id, const char *tenant, const struct store_row *row, char **ret);
/* The columns store_session_row_json reads (a sessions row). */
#define STORE_SESSION_COLUMNS "created_ms, ended_ms, expires_ms, idle_ms, quota, status, reason, policy_sha256"
/* A sessions row of STORE_SESSION_COLUMNS, as JSON text: 0 and *ret, or -ENOMEM. */
int store_session_row_json(const char *id, const struct store_row *row, char **ret);
