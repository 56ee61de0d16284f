/* SPDX-License-Identifier: Apache-2.0 */
/* The single-node store: run records in SQLite (WAL). A run is inserted when it is
 * accepted and updated once when it ends; at open, runs a previous server
 * left queued or running (it was killed) are marked "lost": no accepted
 * run silently vanishes. One connection, serialised by SQLite itself
 * (SQLITE_OPEN_FULLMUTEX): the runner writes, HTTP threads read. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_backend.h"

struct sqlite_store {
    struct srv_store base; /* first: the handle srv_store_* get */
    sqlite3 *db;
};

static struct sqlite_store *S(struct srv_store *s)
{
    return (struct sqlite_store *)s;
}

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS runs ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms INTEGER NOT NULL, ended_ms INTEGER,"
    " argv TEXT NOT NULL, status TEXT NOT NULL, exit_code INTEGER, policy_sha256 TEXT, result TEXT,"
    " error TEXT, stdout BLOB, stderr BLOB, stdout_bytes INTEGER, stderr_bytes INTEGER,"
    " stdout_truncated INTEGER, stderr_truncated INTEGER, events TEXT, events_truncated INTEGER);"
    "CREATE INDEX IF NOT EXISTS runs_tenant ON runs (tenant, created_ms);"
    "CREATE TABLE IF NOT EXISTS sessions ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms INTEGER NOT NULL, ended_ms INTEGER,"
    " expires_ms INTEGER, idle_ms INTEGER, quota INTEGER, status TEXT NOT NULL, reason TEXT,"
    " policy_sha256 TEXT);"
    /* A server killed with live sessions: their tmpfs died with its mount
     * namespace; the directories go as the sessions module starts. */
    "UPDATE sessions SET status = 'lost', reason = 'the server stopped while the session was live (its workspace"
    " does not outlive the server)', ended_ms = CAST(strftime('%s','now') AS INTEGER) * 1000"
    " WHERE status = 'live';"
    "UPDATE runs SET status = 'lost', error = 'the server stopped before the run ended',"
    " ended_ms = CAST(strftime('%s','now') AS INTEGER) * 1000 WHERE status IN ('queued', 'running');";

static const char *col_name(sqlite3_stmt *st)
{
    const unsigned char *t = sqlite3_column_text(st, 1); /* table_info: cid, name, ... */
    return t ? (const char *)t : "";
}

/* The directory (0700, made if missing) and the file (0600) exist before
 * SQLite opens it, so it never creates the file with the umask's mode;
 * its -wal and -shm files take the database's mode. */
static int prepare_path(const char *path, char *msg, size_t msg_size)
{
    char *dir = strdup(path), *slash;
    int fd;

    if (!dir) {
        (void)snprintf(msg, msg_size, "store: out of memory");
        return -1;
    }
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
            (void)snprintf(msg, msg_size, "store: mkdir %s: %s", dir, strerror(errno));
            free(dir);
            return -1;
        }
    }
    /* SQLite reopens the store (and its -wal, -shm and the events
     * directory beside it) by name: a directory someone else can write
     * could swap them between our check and its open. Ours alone, then. */
    {
        struct stat st;
        const char *d = slash && slash != dir ? dir : "/";
        if (lstat(d, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
            (void)snprintf(msg, msg_size,
                           "store: the directory %s must be a directory of uid %u that only it can write "
                           "(the store and its events are reopened by name there)",
                           d, (unsigned)geteuid());
            free(dir);
            return -1;
        }
    }
    free(dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0) {
        (void)snprintf(msg, msg_size, "store: %s: %s", path, strerror(errno));
        return -1;
    }
    (void)close(fd);
    return 0;
}

/* A column a store made by an earlier build lacks. */
static int add_column(struct sqlite_store *s, const char *table, const char *col, char **emsg)
{
    sqlite3_stmt *st = NULL;
    char sql[200];
    bool have = false;

    (void)snprintf(sql, sizeof(sql), "PRAGMA table_info(%s)", table);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(st) == SQLITE_ROW)
        if (strcmp(col_name(st), col) == 0)
            have = true;
    (void)sqlite3_finalize(st);
    if (have)
        return 0;
    (void)snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s TEXT", table, col);
    return sqlite3_exec(s->db, sql, NULL, NULL, emsg) == SQLITE_OK ? 0 : -1;
}

static const struct store_ops sqlite_ops;

int store_sqlite_open(const char *path, struct srv_store **ret, char *msg, size_t msg_size)
{
    struct sqlite_store *s;
    char *emsg = NULL;

    if (prepare_path(path, msg, msg_size) < 0)
        return -1;
    s = calloc(1, sizeof(*s));
    if (!s) {
        (void)snprintf(msg, msg_size, "store: out of memory");
        return -1;
    }
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW,
                        NULL) != SQLITE_OK) {
        (void)snprintf(msg, msg_size, "store: %s: %s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    (void)sqlite3_busy_timeout(s->db, 5000);
    if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &emsg) !=
            SQLITE_OK ||
        sqlite3_exec(s->db, schema, NULL, NULL, &emsg) != SQLITE_OK || add_column(s, "runs", "session", &emsg) < 0 ||
        add_column(s, "runs", "outputs", &emsg) < 0) {
        (void)snprintf(msg, msg_size, "store: %s: %s", path, emsg ? emsg : sqlite3_errmsg(s->db));
        sqlite3_free(emsg);
        goto fail;
    }
    s->base.ops = &sqlite_ops;
    *ret = &s->base;
    return 0;
fail:
    (void)sqlite3_close(s->db);
    free(s);
    return -1;
}

static void sq_close(struct srv_store *s)
{
    (void)sqlite3_close(S(s)->db);
    free(s);
}

static int sq_insert(struct srv_store *s, const struct srv_run *r)
{
    sqlite3_stmt *st = NULL;
    char *argv = store_argv_json(r->argv);
    int rc = -EIO;

    if (!argv)
        return -ENOMEM;
    if (sqlite3_prepare_v2(S(s)->db,
                           "INSERT INTO runs (id, tenant, created_ms, argv, status, session)"
                           " VALUES (?, ?, ?, ?, 'queued', ?)",
                           -1, &st, NULL) == SQLITE_OK &&
        (r->session_id[0] ? sqlite3_bind_text(st, 5, r->session_id, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 5)) ==
            SQLITE_OK &&
        sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_text(st, 2, r->tenant->name, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int64(st, 3, r->created_ms) == SQLITE_OK &&
        sqlite3_bind_text(st, 4, argv, -1, SQLITE_STATIC) == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE)
        rc = 0;
    (void)sqlite3_finalize(st);
    free(argv);
    return rc;
}

static int sq_prune(struct srv_store *s, int64_t before_ms)
{
    sqlite3_stmt *st = NULL;
    int rc = -EIO;

    /* Only ended runs: a live one's row is its only trace if the server dies. */
    if (sqlite3_prepare_v2(S(s)->db,
                           "DELETE FROM runs WHERE ended_ms IS NOT NULL AND ended_ms < ?"
                           " AND status NOT IN ('queued', 'running')",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_int64(st, 1, before_ms) == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE)
        rc = sqlite3_changes(S(s)->db);
    (void)sqlite3_finalize(st);
    st = NULL;
    /* Ended sessions go by the same rule. */
    if (rc >= 0 && (sqlite3_prepare_v2(S(s)->db,
                                       "DELETE FROM sessions WHERE ended_ms IS NOT NULL AND ended_ms < ?"
                                       " AND status != 'live'",
                                       -1, &st, NULL) != SQLITE_OK ||
                    sqlite3_bind_int64(st, 1, before_ms) != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE))
        rc = -EIO;
    (void)sqlite3_finalize(st);
    return rc;
}

static int sq_check_writable(struct srv_store *s)
{
    /* Takes the write lock and lets it go: the file, its WAL and the
     * directory are writable, and no other process holds the lock. */
    if (sqlite3_exec(S(s)->db, "BEGIN IMMEDIATE; ROLLBACK;", NULL, NULL, NULL) != SQLITE_OK) {
        (void)sqlite3_exec(S(s)->db, "ROLLBACK;", NULL, NULL, NULL);
        return -EIO;
    }
    return 0;
}

static int sq_delete(struct srv_store *s, const char *id)
{
    sqlite3_stmt *st = NULL;
    int rc = -EIO;

    if (sqlite3_prepare_v2(S(s)->db, "DELETE FROM runs WHERE id = ?", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE)
        rc = 0;
    (void)sqlite3_finalize(st);
    return rc;
}

static int sq_finish(struct srv_store *s, const struct srv_run *r)
{
    sqlite3_stmt *st = NULL;
    char *events = r->events ? json_dumps(r->events, JSON_COMPACT) : NULL;
    char *outputs = r->outputs_json ? json_dumps(r->outputs_json, JSON_COMPACT) : NULL;
    int rc = -EIO;

    if (sqlite3_prepare_v2(S(s)->db,
                           "UPDATE runs SET ended_ms = ?, status = ?, exit_code = ?, policy_sha256 = ?,"
                           " result = ?, error = ?, stdout = ?, stderr = ?, stdout_bytes = ?,"
                           " stderr_bytes = ?, stdout_truncated = ?, stderr_truncated = ?, events = ?,"
                           " events_truncated = ?, outputs = ? WHERE id = ?",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_int64(st, 1, r->ended_ms) == SQLITE_OK &&
        sqlite3_bind_text(st, 2, r->status, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int(st, 3, r->exit_code) == SQLITE_OK &&
        sqlite3_bind_text(st, 4, r->policy_sha256, -1, SQLITE_STATIC) == SQLITE_OK &&
        (r->result_json ? sqlite3_bind_text(st, 5, r->result_json, -1, SQLITE_STATIC)
                        : sqlite3_bind_null(st, 5)) == SQLITE_OK &&
        (r->error[0] ? sqlite3_bind_text(st, 6, r->error, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 6)) ==
            SQLITE_OK &&
        sqlite3_bind_blob(st, 7, r->out.data ? r->out.data : "", (int)r->out.len, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_blob(st, 8, r->err.data ? r->err.data : "", (int)r->err.len, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int64(st, 9, (sqlite3_int64)r->out.total) == SQLITE_OK &&
        sqlite3_bind_int64(st, 10, (sqlite3_int64)r->err.total) == SQLITE_OK &&
        sqlite3_bind_int(st, 11, r->out.truncated) == SQLITE_OK &&
        sqlite3_bind_int(st, 12, r->err.truncated) == SQLITE_OK &&
        (events ? sqlite3_bind_text(st, 13, events, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 13)) == SQLITE_OK &&
        sqlite3_bind_int(st, 14, r->events_truncated) == SQLITE_OK &&
        (outputs ? sqlite3_bind_text(st, 15, outputs, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 15)) == SQLITE_OK &&
        sqlite3_bind_text(st, 16, r->id, -1, SQLITE_STATIC) == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE)
        rc = 0;
    (void)sqlite3_finalize(st);
    free(events);
    free(outputs);
    return rc;
}

/* A text column, "" for NULL (or when SQLite could not allocate it). */
/* A row of a stepped statement, read through store_row (store.c maps it). */
static bool col_null(const void *st, int i)
{
    return sqlite3_column_type((sqlite3_stmt *)st, i) == SQLITE_NULL;
}

static const char *col_text(const void *st, int i)
{
    const unsigned char *t = sqlite3_column_text((sqlite3_stmt *)st, i);
    return t ? (const char *)t : "";
}

static int64_t col_i64(const void *st, int i)
{
    return sqlite3_column_int64((sqlite3_stmt *)st, i);
}

static char *col_dup(const void *stp, int i, size_t *len)
{
    sqlite3_stmt *st = (sqlite3_stmt *)stp;
    const void *p = sqlite3_column_blob(st, i);
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *s = malloc(n + 1);

    if (!s)
        return NULL;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    if (len)
        *len = n;
    return s;
}

/* One row of sql with id and tenant bound, mapped by map: 0, -ENOENT, -EIO, -ENOMEM. */
static int get_row(struct srv_store *s, const char *sql, const char *tenant, const char *id,
                   int (*map)(const char *id, const char *tenant, const struct store_row *row, char **ret),
                   char **ret)
{
    sqlite3_stmt *st = NULL;
    int rc = -EIO, step;

    *ret = NULL;
    if (sqlite3_prepare_v2(S(s)->db, sql, -1, &st, NULL) != SQLITE_OK ||
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, tenant, -1, SQLITE_STATIC) != SQLITE_OK)
        goto out;
    step = sqlite3_step(st);
    if (step == SQLITE_DONE) {
        rc = -ENOENT;
        goto out;
    }
    if (step != SQLITE_ROW)
        goto out;
    {
        const struct store_row row = {.impl = st, .null = col_null, .text = col_text, .i64 = col_i64,
                                      .copy = col_dup};
        rc = map(id, tenant, &row, ret);
    }
out:
    (void)sqlite3_finalize(st);
    return rc;
}

static int sq_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret)
{
    return get_row(s, "SELECT " STORE_RUN_COLUMNS " FROM runs WHERE id = ? AND tenant = ?", tenant, id,
                   store_run_row_json, ret);
}

/* ---- sessions ------------------------------------------------------------------------------- */

static int sq_session_insert(struct srv_store *s, const struct srv_session_row *row)
{
    sqlite3_stmt *st = NULL;
    int rc = -EIO;

    if (sqlite3_prepare_v2(S(s)->db,
                           "INSERT INTO sessions (id, tenant, created_ms, expires_ms, idle_ms, quota, status,"
                           " policy_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_text(st, 1, row->id, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_text(st, 2, row->tenant, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int64(st, 3, row->created_ms) == SQLITE_OK &&
        sqlite3_bind_int64(st, 4, row->expires_ms) == SQLITE_OK &&
        sqlite3_bind_int64(st, 5, (sqlite3_int64)row->idle_ms) == SQLITE_OK &&
        sqlite3_bind_int64(st, 6, (sqlite3_int64)row->quota) == SQLITE_OK &&
        sqlite3_bind_text(st, 7, row->status, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_text(st, 8, row->policy_sha256, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_DONE)
        rc = 0;
    (void)sqlite3_finalize(st);
    return rc;
}

static int sq_session_end(struct srv_store *s, const char *id, const char *status, const char *reason,
                          int64_t ended_ms)
{
    sqlite3_stmt *st = NULL;
    int rc = -EIO;

    if (sqlite3_prepare_v2(S(s)->db, "UPDATE sessions SET status = ?, reason = ?, ended_ms = ? WHERE id = ?", -1, &st,
                           NULL) == SQLITE_OK &&
        sqlite3_bind_text(st, 1, status, -1, SQLITE_STATIC) == SQLITE_OK &&
        (reason ? sqlite3_bind_text(st, 2, reason, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 2)) == SQLITE_OK &&
        sqlite3_bind_int64(st, 3, ended_ms) == SQLITE_OK && sqlite3_bind_text(st, 4, id, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_DONE)
        rc = 0;
    (void)sqlite3_finalize(st);
    return rc;
}

static int session_row_json(const char *id, const char *tenant, const struct store_row *row, char **ret)
{
    (void)tenant;
    return store_session_row_json(id, row, ret);
}

static int sq_session_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret)
{
    return get_row(s, "SELECT " STORE_SESSION_COLUMNS " FROM sessions WHERE id = ? AND tenant = ?", tenant, id,
                   session_row_json, ret);
}

static const struct store_ops sqlite_ops = {
    .close = sq_close,
    .insert = sq_insert,
    .prune = sq_prune,
    .check_writable = sq_check_writable,
    .del = sq_delete,
    .finish = sq_finish,
    .get_json = sq_get_json,
    .session_insert = sq_session_insert,
    .session_end = sq_session_end,
    .session_get_json = sq_session_get_json,
};
