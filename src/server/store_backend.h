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
/* A record read back: r filled from the row (its argv still NULL),
 * argv_text the JSON array it was stored as. 0 and *ret, or -ENOMEM. */
int store_record_json(struct srv_run *r, const char *argv_text, char **ret);
/* A session row read back, as JSON text: 0 and *ret, or -ENOMEM. */
int store_session_json(const char *id, const struct srv_session_row *row, char **ret);
