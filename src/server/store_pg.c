/* SPDX-License-Identifier: Apache-2.0 */
/* The scale-out store: replicas of `agentjail serve` share run and
 * session records in one PostgreSQL database (libpq). The same tables as
 * the SQLite store, plus "replicas": one row per live replica, whose id
 * is also a PostgreSQL session-level advisory lock the replica holds on
 * its connection for as long as it lives.
 *
 * A replica that dies (SIGKILL, OOM, its node) loses its connection; the
 * database ends that backend and the lock goes with it. Every replica,
 * at start and then every STORE_PG_REAP_MS, tries the lock of each other
 * replica's row: one it can take belongs to a dead replica, whose row it
 * deletes, and every run still queued or running (every session still
 * live) of a replica without a row is marked "lost". No clock, no
 * heartbeat to tune: liveness is the database's own view of the
 * connection. (A node that vanishes without closing its TCP connection is
 * seen when the server's tcp_keepalives_* or client_connection_check_interval
 * end the backend: docs/deploy.md.)
 *
 * One connection, serialised by a mutex, as the SQLite store's one
 * connection is by SQLite: the runner writes, HTTP threads read. A lost
 * connection is reset once per failed statement; the replica then takes
 * its lock again and its row back. */
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "store_backend.h"

#define STORE_PG_REAP_MS 2000

struct pg_store {
    struct srv_store base; /* first: the handle srv_store_* get */
    pthread_mutex_t lock;  /* conn */
    PGconn *conn;
    int64_t replica; /* the row's id and the advisory lock's key */
    char replica_text[24];
    char name[300]; /* host:pid, for operators reading "replicas" */
    char *advertise; /* where other replicas forward its runs' requests (forward.c), or NULL */
    pthread_t reaper;
    bool reaper_started, stop;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cv;
};

static struct pg_store *P(struct srv_store *s)
{
    return (struct pg_store *)s;
}

/* One transaction so that two replicas starting together do not race on
 * CREATE ... IF NOT EXISTS (it is not atomic in PostgreSQL). */
static const char schema[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(6951423887107410273);"
    "CREATE TABLE IF NOT EXISTS replicas ("
    " id BIGINT PRIMARY KEY, name TEXT NOT NULL, started_ms BIGINT NOT NULL);"
    /* Added with forwarding: a database of an older server gets it. */
    "ALTER TABLE replicas ADD COLUMN IF NOT EXISTS advertise TEXT;"
    "CREATE TABLE IF NOT EXISTS runs ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms BIGINT NOT NULL, ended_ms BIGINT,"
    " argv TEXT NOT NULL, status TEXT NOT NULL, exit_code INTEGER, policy_sha256 TEXT, result TEXT,"
    " error TEXT, stdout BYTEA, stderr BYTEA, stdout_bytes BIGINT, stderr_bytes BIGINT,"
    " stdout_truncated INTEGER, stderr_truncated INTEGER, events TEXT, events_truncated INTEGER,"
    " session TEXT, outputs TEXT, replica BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS runs_tenant ON runs (tenant, created_ms);"
    "CREATE INDEX IF NOT EXISTS runs_live ON runs (replica) WHERE status IN ('queued', 'running');"
    "CREATE TABLE IF NOT EXISTS sessions ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms BIGINT NOT NULL, ended_ms BIGINT,"
    " expires_ms BIGINT, idle_ms BIGINT, quota BIGINT, status TEXT NOT NULL, reason TEXT,"
    " policy_sha256 TEXT, replica BIGINT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sessions_live ON sessions (replica) WHERE status = 'live';"
    "COMMIT;";

#define NOW_MS "(extract(epoch from clock_timestamp()) * 1000)::bigint"

/* A count PostgreSQL printed (PQcmdTuples: digits, or "" for none). */
static int count_of(const char *t)
{
    long n = strtol(t, NULL, 10);
    return n < 0 || n > 1 << 30 ? 0 : (int)n;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

const char *srv_store_pg_check_conninfo(const char *conninfo, char *msg, size_t msg_size)
{
    char *err = NULL;
    PQconninfoOption *o = PQconninfoParse(conninfo, &err);

    if (!o) {
        (void)snprintf(msg, msg_size, "not a libpq conninfo or postgresql:// URI: %s", err ? err : "out of memory");
        PQfreemem(err);
        trim(msg);
        return msg;
    }
    for (PQconninfoOption *i = o; i->keyword; i++)
        if (strcmp(i->keyword, "password") == 0 && i->val && i->val[0]) {
            PQconninfoFree(o);
            (void)snprintf(msg, msg_size,
                           "holds a password: the config is no place for it; use passfile=FILE, PGPASSFILE or "
                           "PGPASSWORD in the server's environment");
            return msg;
        }
    PQconninfoFree(o);
    return NULL;
}

/* Under p->lock. The lock, the row: this replica is alive to the others. */
static int join(struct pg_store *p, char *msg, size_t msg_size)
{
    const char *v[4] = {p->replica_text, p->name, NULL, p->advertise};
    char started[24];
    PGresult *res;
    int ok;

    (void)snprintf(started, sizeof(started), "%" PRId64, srv_now_ms());
    v[2] = started;
    res = PQexecParams(p->conn, "SELECT pg_advisory_lock($1)", 1, NULL, v, NULL, NULL, 0);
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    PQclear(res);
    if (ok) {
        res = PQexecParams(p->conn,
                           "INSERT INTO replicas (id, name, started_ms, advertise) VALUES ($1, $2, $3, $4)"
                           " ON CONFLICT (id) DO NOTHING",
                           4, NULL, v, NULL, NULL, 0);
        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
    }
    if (!ok) {
        (void)snprintf(msg, msg_size, "store: postgresql: join: %s", PQerrorMessage(p->conn));
        trim(msg);
        return -1;
    }
    return 0;
}

/* Under p->lock: a statement, reset and retried once if the connection
 * was lost. NULL only when out of memory; check the status. */
static PGresult *run_sql(struct pg_store *p, const char *sql, int n, const char *const *vals, const int *lens,
                         const int *fmts)
{
    PGresult *res = PQexecParams(p->conn, sql, n, NULL, vals, lens, fmts, 0);
    char msg[256];

    if (PQstatus(p->conn) != CONNECTION_BAD)
        return res;
    PQclear(res);
    PQreset(p->conn);
    if (PQstatus(p->conn) != CONNECTION_OK || join(p, msg, sizeof(msg)) < 0) {
        (void)fprintf(stderr, "agentjail serve: store: postgresql: the connection is lost: %s\n",
                      PQerrorMessage(p->conn));
        return PQexecParams(p->conn, sql, n, NULL, vals, lens, fmts, 0); /* fails: its status says so */
    }
    (void)fprintf(stderr, "agentjail serve: store: postgresql: reconnected\n");
    return PQexecParams(p->conn, sql, n, NULL, vals, lens, fmts, 0);
}

static void *reaper_main(void *arg);

/* Under p->lock. The watcher of other replicas starts with the first
 * statement after open, not in open: the server opens the store before it
 * moves into a mount namespace of its own, which only a single-threaded
 * process does whole (workspace.c). */
static void start_reaper(struct pg_store *p)
{
    if (p->reaper_started || p->stop)
        return;
    if (pthread_create(&p->reaper, NULL, reaper_main, p) == 0)
        p->reaper_started = true;
    else
        (void)fprintf(stderr, "agentjail serve: store: could not start the replica watcher (retried)\n");
}

/* A statement without rows: 0, or -EIO. Rows changed into *changed. */
static int exec_cmd(struct pg_store *p, const char *sql, int n, const char *const *vals, const int *lens,
                    const int *fmts, int *changed)
{
    PGresult *res;
    int rc;

    (void)pthread_mutex_lock(&p->lock);
    start_reaper(p);
    res = run_sql(p, sql, n, vals, lens, fmts);
    rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : -EIO;
    if (rc < 0)
        (void)fprintf(stderr, "agentjail serve: store: postgresql: %s", PQresultErrorMessage(res));
    if (rc == 0 && changed)
        *changed = count_of(PQcmdTuples(res));
    PQclear(res);
    (void)pthread_mutex_unlock(&p->lock);
    return rc;
}

/* ---- dead replicas ---------------------------------------------------------------------------------- */

/* Under p->lock. Each other replica whose lock is free is dead: its row
 * goes; then every live run and session of a replica without a row is
 * lost. Returns how many runs were marked. */
static int reap(struct pg_store *p)
{
    PGresult *res;
    const char *v[1] = {p->replica_text};
    int lost = 0;

    res = run_sql(p, "SELECT id, name FROM replicas WHERE id <> $1", 1, v, NULL, NULL);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        PQclear(res);
        return -EIO;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        const char *w[1] = {PQgetvalue(res, i, 0)};
        PGresult *t = PQexecParams(p->conn, "SELECT pg_try_advisory_lock($1)", 1, NULL, w, NULL, NULL, 0);
        bool dead = PQresultStatus(t) == PGRES_TUPLES_OK && strcmp(PQgetvalue(t, 0, 0), "t") == 0;
        PQclear(t);
        if (!dead)
            continue;
        t = PQexecParams(p->conn, "DELETE FROM replicas WHERE id = $1", 1, NULL, w, NULL, NULL, 0);
        if (PQresultStatus(t) == PGRES_COMMAND_OK && count_of(PQcmdTuples(t)) == 1)
            (void)fprintf(stderr, "agentjail serve: store: replica %s (%s) has stopped\n", w[0],
                          PQgetvalue(res, i, 1));
        PQclear(t);
        t = PQexecParams(p->conn, "SELECT pg_advisory_unlock($1)", 1, NULL, w, NULL, NULL, 0);
        PQclear(t);
    }
    PQclear(res);
    res = PQexec(p->conn, "UPDATE runs SET status = 'lost', error = 'the server replica running it stopped before "
                          "the run ended', ended_ms = " NOW_MS " WHERE status IN ('queued', 'running')"
                          " AND replica NOT IN (SELECT id FROM replicas)");
    if (PQresultStatus(res) == PGRES_COMMAND_OK)
        lost = count_of(PQcmdTuples(res));
    PQclear(res);
    res = PQexec(p->conn, "UPDATE sessions SET status = 'lost', reason = 'the server replica holding its workspace "
                          "stopped while the session was live', ended_ms = " NOW_MS
                          " WHERE status = 'live' AND replica NOT IN (SELECT id FROM replicas)");
    PQclear(res);
    if (lost > 0)
        (void)fprintf(stderr, "agentjail serve: store: %d runs of stopped replicas marked lost\n", lost);
    return lost;
}

static void *reaper_main(void *arg)
{
    struct pg_store *p = arg;
    struct timespec ts;

    (void)pthread_mutex_lock(&p->stop_lock);
    while (!p->stop) {
        (void)clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += STORE_PG_REAP_MS / 1000;
        ts.tv_nsec += (long)(STORE_PG_REAP_MS % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&p->stop_cv, &p->stop_lock, &ts);
        if (p->stop)
            break;
        (void)pthread_mutex_unlock(&p->stop_lock);
        (void)pthread_mutex_lock(&p->lock);
        (void)reap(p);
        (void)pthread_mutex_unlock(&p->lock);
        (void)pthread_mutex_lock(&p->stop_lock);
    }
    (void)pthread_mutex_unlock(&p->stop_lock);
    return NULL;
}

/* ---- open, close ---------------------------------------------------------------------------------- */

static const struct store_ops pg_ops;

int store_pg_open(const char *conninfo, const char *advertise, struct srv_store **ret, char *msg, size_t msg_size)
{
    struct pg_store *p = calloc(1, sizeof(*p));
    char host[256] = "";
    uint64_t r = 0;
    PGresult *res;
    pthread_condattr_t ca;

    if (!p) {
        (void)snprintf(msg, msg_size, "store: out of memory");
        return -1;
    }
    (void)pthread_mutex_init(&p->lock, NULL);
    (void)pthread_mutex_init(&p->stop_lock, NULL);
    (void)pthread_condattr_init(&ca);
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    (void)pthread_cond_init(&p->stop_cv, &ca);
    (void)pthread_condattr_destroy(&ca);
    p->base.ops = &pg_ops;
    if (advertise && !(p->advertise = strdup(advertise))) {
        (void)snprintf(msg, msg_size, "store: out of memory");
        goto fail;
    }
    p->conn = PQconnectdb(conninfo);
    if (!p->conn || PQstatus(p->conn) != CONNECTION_OK) {
        (void)snprintf(msg, msg_size, "store: postgresql: %s", p->conn ? PQerrorMessage(p->conn) : "out of memory");
        trim(msg);
        goto fail;
    }
    res = PQexec(p->conn, schema);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        (void)snprintf(msg, msg_size, "store: postgresql: schema: %s", PQresultErrorMessage(res));
        trim(msg);
        PQclear(res);
        goto fail;
    }
    PQclear(res);
    /* A random id: 63 bits, so no two replicas ever share a lock. */
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        (void)snprintf(msg, msg_size, "store: getrandom: %s", strerror(errno));
        goto fail;
    }
    p->replica = (int64_t)(r >> 1);
    (void)snprintf(p->replica_text, sizeof(p->replica_text), "%" PRId64, p->replica);
    (void)gethostname(host, sizeof(host) - 1);
    (void)snprintf(p->name, sizeof(p->name), "%s:%d", host, (int)getpid());
    (void)pthread_mutex_lock(&p->lock);
    if (join(p, msg, msg_size) < 0) {
        (void)pthread_mutex_unlock(&p->lock);
        goto fail;
    }
    (void)reap(p);
    (void)pthread_mutex_unlock(&p->lock);
    (void)fprintf(stderr, "agentjail serve: store: postgresql: replica %s (%s)\n", p->replica_text, p->name);
    *ret = &p->base;
    return 0;
fail:
    PQfinish(p->conn);
    (void)pthread_cond_destroy(&p->stop_cv);
    (void)pthread_mutex_destroy(&p->stop_lock);
    (void)pthread_mutex_destroy(&p->lock);
    free(p->advertise);
    free(p);
    return -1;
}

static void pg_close(struct srv_store *s)
{
    struct pg_store *p = P(s);
    const char *v[1] = {p->replica_text};

    (void)pthread_mutex_lock(&p->lock);
    (void)pthread_mutex_lock(&p->stop_lock);
    p->stop = true; /* read by start_reaper under p->lock too */
    (void)pthread_cond_signal(&p->stop_cv);
    (void)pthread_mutex_unlock(&p->stop_lock);
    (void)pthread_mutex_unlock(&p->lock);
    if (p->reaper_started)
        (void)pthread_join(p->reaper, NULL);
    /* Every run has ended (the runner stopped first): a clean leave. A
     * run somehow left live is then marked lost by the next reaper. */
    (void)exec_cmd(p, "DELETE FROM replicas WHERE id = $1", 1, v, NULL, NULL, NULL);
    PQfinish(p->conn);
    (void)pthread_cond_destroy(&p->stop_cv);
    (void)pthread_mutex_destroy(&p->stop_lock);
    (void)pthread_mutex_destroy(&p->lock);
    free(p->advertise);
    free(p);
}

/* ---- runs -------------------------------------------------------------------------------------------- */

static int pg_insert(struct srv_store *s, const struct srv_run *r)
{
    struct pg_store *p = P(s);
    char *argv = store_argv_json(r->argv);
    char created[24];
    const char *v[6];
    int rc;

    if (!argv)
        return -ENOMEM;
    (void)snprintf(created, sizeof(created), "%" PRId64, r->created_ms);
    v[0] = r->id;
    v[1] = r->tenant->name;
    v[2] = created;
    v[3] = argv;
    v[4] = r->session_id[0] ? r->session_id : NULL;
    v[5] = p->replica_text;
    rc = exec_cmd(p,
                  "INSERT INTO runs (id, tenant, created_ms, argv, status, session, replica)"
                  " VALUES ($1, $2, $3, $4, 'queued', $5, $6)",
                  6, v, NULL, NULL, NULL);
    free(argv);
    return rc;
}

static int pg_prune(struct srv_store *s, int64_t before_ms)
{
    char before[24];
    const char *v[1] = {before};
    int n = 0, m = 0;

    (void)snprintf(before, sizeof(before), "%" PRId64, before_ms);
    /* Only ended runs: a live one's row is its only trace if the server dies. */
    if (exec_cmd(P(s),
                 "DELETE FROM runs WHERE ended_ms IS NOT NULL AND ended_ms < $1 AND status NOT IN ('queued', 'running')",
                 1, v, NULL, NULL, &n) < 0 ||
        exec_cmd(P(s), "DELETE FROM sessions WHERE ended_ms IS NOT NULL AND ended_ms < $1 AND status != 'live'", 1,
                 v, NULL, NULL, &m) < 0)
        return -EIO;
    return n;
}

static int pg_check_writable(struct srv_store *s)
{
    struct pg_store *p = P(s);
    char now[24];
    const char *v[4] = {p->replica_text, p->name, now, p->advertise};

    /* A write (a read-only standby or a full disk fails it) that also
     * puts this replica's row back if someone deleted it by hand. */
    (void)snprintf(now, sizeof(now), "%" PRId64, srv_now_ms());
    return exec_cmd(p,
                    "INSERT INTO replicas (id, name, started_ms, advertise) VALUES ($1, $2, $3, $4)"
                    " ON CONFLICT (id) DO NOTHING",
                    4, v, NULL, NULL, NULL);
}

static int pg_delete(struct srv_store *s, const char *id)
{
    const char *v[1] = {id};

    return exec_cmd(P(s), "DELETE FROM runs WHERE id = $1", 1, v, NULL, NULL, NULL);
}

/* Text columns take valid UTF-8 only (a UTF8 database): an error text
 * with stray bytes gets '?' for them, rather than no record. */
static char *utf8_clean(const char *s)
{
    char *d = strdup(s);
    json_t *j;

    if (!d)
        return NULL;
    j = json_string(d);
    if (j) {
        json_decref(j);
        return d;
    }
    for (unsigned char *c = (unsigned char *)d; *c; c++)
        if (*c >= 0x80)
            *c = '?';
    return d;
}

static int pg_finish(struct srv_store *s, const struct srv_run *r)
{
    char *events = r->events ? json_dumps(r->events, JSON_COMPACT) : NULL;
    char *outputs = r->outputs_json ? json_dumps(r->outputs_json, JSON_COMPACT) : NULL;
    char *error = r->error[0] ? utf8_clean(r->error) : NULL;
    char n[7][24];
    const char *v[16];
    int lens[16] = {0}, fmts[16] = {0};
    int rc = -ENOMEM;

    if (r->error[0] && !error)
        goto out;
    (void)snprintf(n[0], sizeof(n[0]), "%" PRId64, r->ended_ms);
    (void)snprintf(n[1], sizeof(n[1]), "%d", r->exit_code);
    (void)snprintf(n[2], sizeof(n[2]), "%" PRIu64, r->out.total);
    (void)snprintf(n[3], sizeof(n[3]), "%" PRIu64, r->err.total);
    (void)snprintf(n[4], sizeof(n[4]), "%d", r->out.truncated ? 1 : 0);
    (void)snprintf(n[5], sizeof(n[5]), "%d", r->err.truncated ? 1 : 0);
    (void)snprintf(n[6], sizeof(n[6]), "%d", r->events_truncated ? 1 : 0);
    v[0] = n[0];
    v[1] = r->status;
    v[2] = n[1];
    v[3] = r->policy_sha256;
    v[4] = r->result_json;
    v[5] = error;
    v[6] = r->out.data ? r->out.data : "";
    lens[6] = (int)r->out.len;
    fmts[6] = 1; /* bytea, binary: the output as it came */
    v[7] = r->err.data ? r->err.data : "";
    lens[7] = (int)r->err.len;
    fmts[7] = 1;
    v[8] = n[2];
    v[9] = n[3];
    v[10] = n[4];
    v[11] = n[5];
    v[12] = events;
    v[13] = n[6];
    v[14] = outputs;
    v[15] = r->id;
    rc = exec_cmd(P(s),
                  "UPDATE runs SET ended_ms = $1, status = $2, exit_code = $3, policy_sha256 = $4, result = $5,"
                  " error = $6, stdout = $7, stderr = $8, stdout_bytes = $9, stderr_bytes = $10,"
                  " stdout_truncated = $11, stderr_truncated = $12, events = $13, events_truncated = $14,"
                  " outputs = $15 WHERE id = $16",
                  16, v, lens, fmts, NULL);
out:
    free(events);
    free(outputs);
    free(error);
    return rc;
}

/* The first row of a result, read through store_row (store.c maps it). */
static bool val_null(const void *res, int col)
{
    return PQgetisnull(res, 0, col);
}

static const char *val(const void *res, int col)
{
    return PQgetisnull(res, 0, col) ? "" : PQgetvalue(res, 0, col);
}

static int64_t val_i64(const void *res, int col)
{
    return PQgetisnull(res, 0, col) ? 0 : strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

#define BYTEA_OID 17 /* pg_type.h's BYTEAOID (server headers, not libpq's) */

/* A column as a malloc'd, NUL-ended copy: bytea (text format: hex) decoded. */
static char *val_copy(const void *res, int col, size_t *len)
{
    unsigned char *b = NULL;
    const char *t;
    size_t n = 0;
    char *s;

    if (!PQgetisnull(res, 0, col) && PQftype(res, col) == BYTEA_OID) {
        b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, col), &n);
        if (!b)
            return NULL;
        t = (const char *)b;
    } else {
        t = val(res, col);
        n = strlen(t);
    }
    s = malloc(n + 1);
    if (s) {
        if (n)
            memcpy(s, t, n);
        s[n] = '\0';
    }
    PQfreemem(b);
    if (len)
        *len = n;
    return s;
}

/* A SELECT of one row: 0 and *ret (PQclear it), -ENOENT, -EIO. */
static int query_row(struct pg_store *p, const char *sql, int n, const char *const *v, PGresult **ret)
{
    PGresult *res;
    int rc;

    (void)pthread_mutex_lock(&p->lock);
    start_reaper(p);
    res = run_sql(p, sql, n, v, NULL, NULL);
    (void)pthread_mutex_unlock(&p->lock);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        (void)fprintf(stderr, "agentjail serve: store: postgresql: %s", PQresultErrorMessage(res));
        rc = -EIO;
    } else {
        rc = PQntuples(res) == 1 ? 0 : -ENOENT;
    }
    if (rc < 0)
        PQclear(res);
    else
        *ret = res;
    return rc;
}

static int pg_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret)
{
    const char *v[2] = {id, tenant};
    PGresult *res = NULL;
    int rc;

    *ret = NULL;
    rc = query_row(P(s), "SELECT " STORE_RUN_COLUMNS " FROM runs WHERE id = $1 AND tenant = $2", 2, v, &res);
    if (rc < 0)
        return rc;
    {
        const struct store_row row = {.impl = res, .null = val_null, .text = val, .i64 = val_i64, .copy = val_copy};
        rc = store_run_row_json(id, tenant, &row, ret);
    }
    PQclear(res);
    return rc;
}

/* ---- sessions ------------------------------------------------------------------------------------------ */

static int pg_session_insert(struct srv_store *s, const struct srv_session_row *row)
{
    struct pg_store *p = P(s);
    char n[4][24];
    const char *v[9];

    (void)snprintf(n[0], sizeof(n[0]), "%" PRId64, row->created_ms);
    (void)snprintf(n[1], sizeof(n[1]), "%" PRId64, row->expires_ms);
    (void)snprintf(n[2], sizeof(n[2]), "%" PRId64, (int64_t)row->idle_ms);
    (void)snprintf(n[3], sizeof(n[3]), "%" PRId64, (int64_t)row->quota);
    v[0] = row->id;
    v[1] = row->tenant;
    v[2] = n[0];
    v[3] = n[1];
    v[4] = n[2];
    v[5] = n[3];
    v[6] = row->status;
    v[7] = row->policy_sha256;
    v[8] = p->replica_text;
    return exec_cmd(p,
                    "INSERT INTO sessions (id, tenant, created_ms, expires_ms, idle_ms, quota, status,"
                    " policy_sha256, replica) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    9, v, NULL, NULL, NULL);
}

static int pg_session_end(struct srv_store *s, const char *id, const char *status, const char *reason,
                          int64_t ended_ms)
{
    char ended[24];
    char *why = reason ? utf8_clean(reason) : NULL;
    const char *v[4] = {status, why, ended, id};
    int rc;

    if (reason && !why)
        return -ENOMEM;
    (void)snprintf(ended, sizeof(ended), "%" PRId64, ended_ms);
    rc = exec_cmd(P(s), "UPDATE sessions SET status = $1, reason = $2, ended_ms = $3 WHERE id = $4", 4, v, NULL,
                  NULL, NULL);
    free(why);
    return rc;
}

static int pg_session_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret)
{
    const char *v[2] = {id, tenant};
    PGresult *res = NULL;
    int rc;

    *ret = NULL;
    rc = query_row(P(s), "SELECT " STORE_SESSION_COLUMNS " FROM sessions WHERE id = $1 AND tenant = $2", 2, v,
                   &res);
    if (rc < 0)
        return rc;
    {
        const struct store_row row = {.impl = res, .null = val_null, .text = val, .i64 = val_i64, .copy = val_copy};
        rc = store_session_row_json(id, &row, ret);
    }
    PQclear(res);
    return rc;
}

/* ---- forwarding ------------------------------------------------------------------------------------------ */

/* The owner of a live run or session, if another replica with a row (a
 * replica without one has stopped: its runs become lost, nothing to
 * forward to). The tenant is part of the key: another tenant's id is
 * not even looked up on the owner. */
static int pg_locate(struct srv_store *s, bool session, const char *tenant, const char *id, char **ret_advertise)
{
    struct pg_store *p = P(s);
    const char *v[3] = {id, tenant, p->replica_text};
    PGresult *res = NULL;
    int rc;

    rc = query_row(p,
                   session ? "SELECT r.advertise FROM sessions x JOIN replicas r ON r.id = x.replica"
                             " WHERE x.id = $1 AND x.tenant = $2 AND x.status = 'live' AND x.replica <> $3"
                           : "SELECT r.advertise FROM runs x JOIN replicas r ON r.id = x.replica"
                             " WHERE x.id = $1 AND x.tenant = $2 AND x.status IN ('queued', 'running')"
                             " AND x.replica <> $3",
                   3, v, &res);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return rc;
    if (!PQgetisnull(res, 0, 0) && !(*ret_advertise = strdup(PQgetvalue(res, 0, 0))))
        rc = -ENOMEM;
    PQclear(res);
    return rc < 0 ? rc : 1;
}

static const struct store_ops pg_ops = {
    .close = pg_close,
    .insert = pg_insert,
    .prune = pg_prune,
    .check_writable = pg_check_writable,
    .del = pg_delete,
    .finish = pg_finish,
    .get_json = pg_get_json,
    .session_insert = pg_session_insert,
    .session_end = pg_session_end,
    .session_get_json = pg_session_get_json,
    .locate = pg_locate,
};
