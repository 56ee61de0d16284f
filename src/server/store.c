/* SPDX-License-Identifier: Apache-2.0 */
/* Run and session records: SQLite (store_sqlite.c, one node, the
 * default) or PostgreSQL (store_pg.c, replicas sharing one database),
 * chosen by the config's "store". What both share lives here, so the
 * record JSON is the same from either. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_backend.h"

/* With PostgreSQL, the state_dir (cfg->store's directory) holds what
 * stays on this replica: made 0700 if missing and, as beside a SQLite
 * file, the server's own (events and workspaces are reopened by name). */
static int state_dir(const char *store, char *msg, size_t msg_size)
{
    const char *slash = strrchr(store, '/');
    char dir[4096];
    struct stat st;

    (void)snprintf(dir, sizeof(dir), "%.*s", (int)(slash - store), store);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        (void)snprintf(msg, msg_size, "store: state_dir %s: %s", dir, strerror(errno));
        return -1;
    }
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        (void)snprintf(msg, msg_size, "store: state_dir %s must be a directory of uid %u that only it can write",
                       dir, (unsigned)geteuid());
        return -1;
    }
    return 0;
}

int srv_store_open(const struct srv_config *cfg, struct srv_store **ret, char *msg, size_t msg_size)
{
    if (cfg->store_pg)
        return state_dir(cfg->store, msg, msg_size) < 0
                   ? -1
                   : store_pg_open(cfg->store_pg, cfg->replica_advertise, ret, msg, msg_size);
    return store_sqlite_open(cfg->store, ret, msg, msg_size);
}

void srv_store_close(struct srv_store *s)
{
    if (s)
        s->ops->close(s);
}

int srv_store_insert(struct srv_store *s, const struct srv_run *r)
{
    return s->ops->insert(s, r);
}

int srv_store_prune(struct srv_store *s, int64_t before_ms)
{
    return s->ops->prune(s, before_ms);
}

int srv_store_check_writable(struct srv_store *s)
{
    return s->ops->check_writable(s);
}

int srv_store_delete(struct srv_store *s, const char *id)
{
    return s->ops->del(s, id);
}

int srv_store_finish(struct srv_store *s, const struct srv_run *r)
{
    return s->ops->finish(s, r);
}

int srv_store_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret)
{
    return s->ops->get_json(s, tenant, id, ret);
}

int srv_store_session_insert(struct srv_store *s, const struct srv_session_row *row)
{
    return s->ops->session_insert(s, row);
}

int srv_store_session_end(struct srv_store *s, const char *id, const char *status, const char *reason,
                          int64_t ended_ms)
{
    return s->ops->session_end(s, id, status, reason, ended_ms);
}

int srv_store_session_get_json(struct srv_store *s, const char *tenant, const char *id, char **ret)
{
    return s->ops->session_get_json(s, tenant, id, ret);
}

int srv_store_locate(struct srv_store *s, bool session, const char *tenant, const char *id, char **ret_advertise)
{
    *ret_advertise = NULL;
    return s->ops->locate ? s->ops->locate(s, session, tenant, id, ret_advertise) : 0;
}

/* ---- shared by the backends -------------------------------------------------------------------- */

char *store_argv_json(char *const *argv)
{
    json_t *a = json_array();
    char *s;

    if (!a)
        return NULL;
    for (size_t i = 0; argv[i]; i++)
        if (json_array_append_new(a, json_string(argv[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

/* A record read back: r filled from the row (its argv still NULL),
 * argv_text the JSON array it was stored as. */
static int record_json(struct srv_run *r, const char *argv_text, char **ret)
{
    /* The record's argv comes back as the JSON array it was stored as. */
    json_t *a = json_loads(argv_text, 0, NULL);
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    char **v = calloc(n + 1, sizeof(*v));

    *ret = NULL;
    if (v) {
        for (size_t i = 0; i < n; i++)
            v[i] = (char *)json_string_value(json_array_get(a, i));
        r->argv = v;
        *ret = srv_record_json(r, NULL);
        r->argv = NULL;
    }
    free(v);
    json_decref(a);
    return *ret ? 0 : -ENOMEM;
}

int store_run_row_json(const char *id, const char *tenant, const struct store_row *row, char **ret)
{
    struct srv_tenant t = {.name = (char *)tenant};
    struct srv_run r = {.tenant = &t, .state = SRV_DONE};
    const void *x = row->impl;
    bool has_result = !row->null(x, 6);
    int rc;

    *ret = NULL;
    (void)snprintf(r.id, sizeof(r.id), "%s", id);
    r.created_ms = row->i64(x, 0);
    r.ended_ms = row->i64(x, 1);
    (void)snprintf(r.status, sizeof(r.status), "%s", row->text(x, 3));
    r.exit_code = (int)row->i64(x, 4);
    (void)snprintf(r.policy_sha256, sizeof(r.policy_sha256), "%s", row->text(x, 5));
    (void)snprintf(r.error, sizeof(r.error), "%s", row->text(x, 7));
    r.result_json = has_result ? row->copy(x, 6, NULL) : NULL;
    r.out.data = row->copy(x, 8, &r.out.len);
    r.err.data = row->copy(x, 9, &r.err.len);
    r.out.total = (uint64_t)row->i64(x, 10);
    r.err.total = (uint64_t)row->i64(x, 11);
    r.out.truncated = row->i64(x, 12) != 0;
    r.err.truncated = row->i64(x, 13) != 0;
    r.events = row->null(x, 14) ? NULL : json_loads(row->text(x, 14), 0, NULL);
    r.events_truncated = row->i64(x, 15) != 0;
    (void)snprintf(r.session_id, sizeof(r.session_id), "%s", row->text(x, 16));
    r.outputs_json = row->null(x, 17) ? NULL : json_loads(row->text(x, 17), 0, NULL);
    if (!r.out.data || !r.err.data || (has_result && !r.result_json))
        rc = -ENOMEM;
    else
        rc = record_json(&r, row->text(x, 2), ret);
    free(r.result_json);
    free(r.out.data);
    free(r.err.data);
    json_decref(r.events);
    json_decref(r.outputs_json);
    return rc;
}

int store_session_row_json(const char *id, const struct store_row *row, char **ret)
{
    const void *x = row->impl;
    const char *reason = row->null(x, 6) ? NULL : row->text(x, 6);
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s}", "id", id, "status", row->text(x, 5),
                          "created_ms", (json_int_t)row->i64(x, 0), "expires_ms", (json_int_t)row->i64(x, 2),
                          "idle_timeout", (json_int_t)(row->i64(x, 3) / 1000), "workspace_quota",
                          (json_int_t)row->i64(x, 4), "ended_ms", (json_int_t)row->i64(x, 1), "policy_sha256",
                          row->text(x, 7));

    if (o && reason)
        (void)json_object_set_new(o, "reason", json_string(reason));
    *ret = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return *ret ? 0 : -ENOMEM;
}
