/* SPDX-License-Identifier: Apache-2.0 */
/* Sessions: a workspace (workspace.c) that outlives runs, a policy that
 * may only be tighter than the server's, a ttl and an idle timeout. Each
 * run of a session is a fresh sandbox (cold: the pool's parked sandboxes
 * have the server's policy, without the bind) with the workspace bound
 * read-write at /workspace and its workdir there; nothing but the files
 * lasts from one run to the next. One run at a time per session: a
 * second while one is in flight is 409.
 *
 * Live sessions are in memory and each is a row of the store; a thread of
 * this module ends those past their ttl or idle timeout. The server has a
 * mount namespace of its own, so when it dies (SIGKILL included) every
 * workspace filesystem dies with it: a server that starts marks the sessions a
 * killed one left "lost" and removes their directories. Sessions do not
 * survive a restart; nothing of them is left behind either. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "srv.h"
#include "srv_kernel.h"
#include "srv_session.h"
#include "srv_ws.h"

#define SRV_MAX_OUTPUTS 64

/* The registry, for the runner's hooks, which get a run and nothing
 * else (one server per process). */
static struct srv_sessions *the_sessions;

/* ---- the registry ---------------------------------------------------------------------- */

static int alloc_owner(struct srv_sessions *ss, uint32_t *ret)
{
    const struct srv_config *cfg = &ss->ctx->cfg;
    uint32_t start = 0;
    int rc = -EAGAIN;

    if (getrandom(&start, sizeof(start), 0) != (ssize_t)sizeof(start))
        start = (uint32_t)srv_now_ms(); /* any start will do */
    (void)pthread_mutex_lock(&ss->lock);
    for (uint32_t i = 0; i < cfg->ws_uid_count; i++) {
        uint32_t k = (start + i) % cfg->ws_uid_count;
        if (!(ss->owners[k / 8] & (1u << (k % 8)))) {
            ss->owners[k / 8] |= (uint8_t)(1u << (k % 8));
            *ret = cfg->ws_uid_base + k;
            rc = 0;
            break;
        }
    }
    (void)pthread_mutex_unlock(&ss->lock);
    return rc;
}

static void free_owner(struct srv_sessions *ss, uint32_t uid)
{
    uint32_t k = uid - ss->ctx->cfg.ws_uid_base;

    (void)pthread_mutex_lock(&ss->lock);
    if (k < ss->ctx->cfg.ws_uid_count)
        ss->owners[k / 8] &= (uint8_t)~(1u << (k % 8));
    (void)pthread_mutex_unlock(&ss->lock);
}

/* The workspace is gone (unmounted); its fd, the policy and the struct
 * go with the last reference. */
static void session_unref_n(struct srv_sessions *ss, struct srv_session *s, int n)
{
    bool last;

    if (!s)
        return;
    (void)pthread_mutex_lock(&ss->lock);
    s->refs -= n;
    last = s->refs == 0;
    (void)pthread_mutex_unlock(&ss->lock);
    if (!last)
        return;
    srv_kernel_free(s->kernel);
    if (s->ws) {
        free_owner(ss, s->ws->owner);
        srv_ws_free(s->ws);
    }
    aj_policy_free(s->pol);
    free(s);
}

void srv_session_unref(struct srv_sessions *ss, struct srv_session *s)
{
    session_unref_n(ss, s, 1);
}

/* A live session of t by id, with a reference: 0, -ENOENT (none of t's:
 * unknown, another tenant's), -ESTALE (t's, ended: in the store),
 * -EREMOTE (t's, live on another replica of a shared store: its
 * workspace is there, docs/deploy.md "Scaling"). */
int srv_session_find(struct srv_sessions *ss, const struct srv_tenant *t, const char *id,
                        struct srv_session **ret)
{
    char *rec = NULL;
    int rc;

    *ret = NULL;
    if (!srv_valid_id(id))
        return -ENOENT;
    (void)pthread_mutex_lock(&ss->lock);
    for (struct srv_session *s = ss->live; s; s = s->next)
        if (s->tenant == t && strcmp(s->id, id) == 0) {
            s->refs++;
            *ret = s;
            break;
        }
    (void)pthread_mutex_unlock(&ss->lock);
    if (*ret)
        return 0;
    rc = srv_store_session_get_json(ss->ctx->store, t->name, id, &rec);
    if (rc == 0) {
        /* Live here is in memory: a live row is another replica's. */
        json_t *o = json_loads(rec, 0, NULL);
        const char *st = json_string_value(json_object_get(o, "status"));
        rc = st && strcmp(st, "live") == 0 ? -EREMOTE : -ESTALE;
        json_decref(o);
    } else {
        rc = -ENOENT;
    }
    free(rec);
    return rc;
}

bool srv_session_live_here(struct srv_sessions *ss, const struct srv_tenant *t, const char *id)
{
    bool here = false;

    (void)pthread_mutex_lock(&ss->lock);
    for (struct srv_session *s = ss->live; s && !here; s = s->next)
        here = s->tenant == t && strcmp(s->id, id) == 0;
    (void)pthread_mutex_unlock(&ss->lock);
    return here;
}

void srv_find_fail(int rc, const char *id, struct srv_reply *reply)
{
    if (rc == -ESTALE)
        srv_reply_error(reply, 410, "session %s has ended (GET /v1/sessions/%s says how)", id, id);
    else if (rc == -EREMOTE)
        srv_reply_error(reply, 421,
                        "session %s is live on another replica, which holds its workspace and advertises no "
                        "address to forward to (replica.advertise): send its requests there (route by session)",
                        id);
    else
        srv_reply_error(reply, 404, "no session %s", srv_valid_id(id) ? id : "with that id");
}

/* Not idle while something uses it. */
void srv_session_begin(struct srv_sessions *ss, struct srv_session *s)
{
    (void)pthread_mutex_lock(&ss->lock);
    s->active++;
    (void)pthread_mutex_unlock(&ss->lock);
}

void srv_session_end(struct srv_sessions *ss, struct srv_session *s)
{
    (void)pthread_mutex_lock(&ss->lock);
    s->active--;
    s->last_used_ms = srv_now_ms();
    (void)pthread_cond_broadcast(&ss->wake); /* its idle deadline starts now */
    (void)pthread_mutex_unlock(&ss->lock);
}

/* End a live session: no new request finds it, a run in flight is
 * killed, the workspace is detached and its directory removed, the row says
 * how it ended. Takes the caller's reference. */
static void session_close(struct srv_sessions *ss, struct srv_session *s, const char *status, const char *reason)
{
    char run_id[33];
    bool was_closed;

    (void)pthread_mutex_lock(&ss->lock);
    was_closed = s->closed;
    if (!was_closed) {
        s->closed = true;
        for (struct srv_session **p = &ss->live; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
        ss->n_live--;
        srv_tenant_sessions_add(s->tenant, -1);
    }
    memcpy(run_id, s->run_id, sizeof(run_id));
    (void)pthread_mutex_unlock(&ss->lock);
    if (was_closed) {
        srv_session_unref(ss, s);
        return;
    }
    /* A run accepted but not yet started when the workspace goes would find
     * the bare directory under it: root's and 0700, not mapped to the
     * run's user, so not writable (and rmdir'd next): the host's disk
     * takes nothing either way. */
    if (run_id[0] && ss->ctx->rn) {
        struct srv_run *r = srv_runner_find(ss->ctx->rn, s->tenant, run_id);
        if (r) {
            srv_runner_kill(ss->ctx->rn, r);
            srv_run_unref(ss->ctx->rn, r);
        }
    }
    srv_kernel_stop(s->kernel, reason ? reason : status);
    srv_ws_unmount(ss->rootfd, s->ws);
    if (srv_store_session_end(ss->ctx->store, s->id, status, reason, srv_now_ms()) < 0)
        (void)fprintf(stderr, "agentjail serve: store: could not record the end of session %s\n", s->id);
    (void)fprintf(stderr, "agentjail serve: session %s: %s%s%s\n", s->id, status, reason ? ": " : "",
                  reason ? reason : "");
    session_unref_n(ss, s, 2); /* the registry's and the caller's */
}

/* ---- expiry ------------------------------------------------------------------------------- */

static int64_t deadline_of(const struct srv_session *s)
{
    int64_t idle = s->active ? INT64_MAX : s->last_used_ms + (int64_t)s->idle_ms;
    return idle < s->expires_ms ? idle : s->expires_ms;
}

static void *expiry_main(void *arg)
{
    struct srv_sessions *ss = arg;

    (void)pthread_mutex_lock(&ss->lock);
    while (!ss->stopping) {
        int64_t now = srv_now_ms(), next = now + 60000;
        struct srv_session *due = NULL;
        for (struct srv_session *s = ss->live; s; s = s->next) {
            int64_t d = deadline_of(s);
            if (d <= now) {
                due = s;
                break;
            }
            if (d < next)
                next = d;
        }
        if (due) {
            bool ttl = due->expires_ms <= now;
            due->refs++;
            (void)pthread_mutex_unlock(&ss->lock);
            session_close(ss, due, "expired", ttl ? "ttl" : "idle_timeout");
            (void)pthread_mutex_lock(&ss->lock);
            continue;
        }
        struct timespec until = {.tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000};
        (void)pthread_cond_timedwait(&ss->wake, &ss->lock, &until);
    }
    (void)pthread_mutex_unlock(&ss->lock);
    return NULL;
}

/* ---- setup -------------------------------------------------------------------------------- */

int srv_sessions_new(struct srv_ctx *ctx, struct srv_sessions **ret, char *msg, size_t msg_size)
{
    struct srv_sessions *ss = calloc(1, sizeof(*ss));
    struct aj_error err = {0};

    if (!ss) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    ss->ctx = ctx;
    ss->rootfd = -1;
    the_sessions = ss;
    (void)pthread_mutex_init(&ss->lock, NULL);
    (void)pthread_cond_init(&ss->wake, NULL);
    ss->owners = calloc(ctx->cfg.ws_uid_count / 8 + 1, 1);
    ss->base_json = aj_policy_to_json(ctx->pol, true);
    ss->base = aj_policy_new();
    if (!ss->owners || !ss->base_json || !ss->base) {
        (void)snprintf(msg, msg_size, "out of memory");
        goto fail;
    }
    if (aj_policy_load_buffer(ss->base, ss->base_json, strlen(ss->base_json), "the server's policy", &err) < 0) {
        (void)snprintf(msg, msg_size, "sessions: %s", err.msg);
        goto fail;
    }
    if (geteuid() != 0) {
        ss->off = "sessions and run workspaces need agentjail serve to run as root (a filesystem per workspace, "
                  "mounted by the server, bound id-mapped into each run)";
        (void)fprintf(stderr, "agentjail serve: sessions: off: not root\n");
    } else if (srv_ws_root_init(ctx->cfg.store, ctx->cfg.ws_backend[0] ? ctx->cfg.ws_backend : NULL, &ss->rootfd,
                                &ss->root, &ss->backend, msg, msg_size) < 0) {
        /* One-shot runs need none of it: the server still serves them,
         * and says why sessions are refused. */
        (void)snprintf(ss->off_msg, sizeof(ss->off_msg), "sessions are off on this server: %s", msg);
        ss->off = ss->off_msg;
        (void)fprintf(stderr, "agentjail serve: %s\n", ss->off_msg);
    } else {
        (void)fprintf(stderr, "agentjail serve: sessions: workspaces are %s in %s\n",
                      srv_ws_backend_name(ss->backend), ss->root);
    }
    *ret = ss;
    return 0;
fail:
    srv_sessions_free(ss);
    return -1;
}

int srv_sessions_start(struct srv_sessions *ss, char *msg, size_t msg_size)
{
    int e;

    if (ss->off)
        return 0;
    e = pthread_create(&ss->thread, NULL, expiry_main, ss);
    if (e != 0) {
        (void)snprintf(msg, msg_size, "sessions: pthread_create: %s", strerror(e));
        return -1;
    }
    ss->thread_started = true;
    return 0;
}

void srv_sessions_stop(struct srv_sessions *ss)
{
    if (!ss)
        return;
    (void)pthread_mutex_lock(&ss->lock);
    ss->stopping = true;
    (void)pthread_cond_broadcast(&ss->wake);
    (void)pthread_mutex_unlock(&ss->lock);
    if (ss->thread_started)
        (void)pthread_join(ss->thread, NULL);
    ss->thread_started = false;
    for (;;) {
        struct srv_session *s;
        (void)pthread_mutex_lock(&ss->lock);
        s = ss->live;
        if (s)
            s->refs++;
        (void)pthread_mutex_unlock(&ss->lock);
        if (!s)
            break;
        session_close(ss, s, "lost", "the server shut down (a workspace does not outlive the server)");
    }
}

void srv_sessions_free(struct srv_sessions *ss)
{
    if (!ss)
        return;
    srv_sessions_stop(ss);
    if (the_sessions == ss)
        the_sessions = NULL;
    if (ss->rootfd >= 0)
        (void)close(ss->rootfd);
    free(ss->root);
    free(ss->owners);
    free(ss->base_json);
    aj_policy_free(ss->base);
    (void)pthread_mutex_destroy(&ss->lock);
    (void)pthread_cond_destroy(&ss->wake);
    free(ss);
}

unsigned srv_sessions_live(struct srv_sessions *ss)
{
    unsigned n;

    if (!ss)
        return 0;
    (void)pthread_mutex_lock(&ss->lock);
    n = ss->n_live;
    (void)pthread_mutex_unlock(&ss->lock);
    return n;
}

/* ---- policies ------------------------------------------------------------------------------ */

/* Keys aj_policy_diff calls neither weaker nor stronger whose change a
 * session may ask for: the size of its /tmp, the name it sees, which
 * decoys it gets, how many events it writes, and variables it is given
 * (a run's request may set any anyway: its env wins over the policy's;
 * passing the server's own variables, environment.pass, stays refused). */
static bool neutral_key(const char *line)
{
    static const char *const keys[] = {"filesystem.tmp_size:", "identity.hostname:", "detection.cloud_decoys:",
                                       "detection.event_budget:", "environment.set:"};

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(line, keys[i], strlen(keys[i])) == 0)
            return true;
    return false;
}

/* The server's policy, tightened by the request's profile and policy
 * (loaded on top of it: keys not named keep the server's values), then
 * compared with the server's by aj_policy_diff: every difference must
 * make the request's side the stronger one. NULL and msg (a 400) if not. */
static struct aj_policy *tightened(struct srv_sessions *ss, const struct srv_tenant *t, json_t *profile,
                                   json_t *policy, char *msg, size_t msg_size)
{
    struct aj_policy *p = aj_policy_new();
    struct aj_error err = {0};
    char *text = NULL, *diff = NULL;
    bool oom = false;
    /* The tenant's own policy (srv_tenants_load), else the server's. */
    const struct aj_policy *base = t->pol ? t->pol : ss->base;
    char *base_json = aj_policy_to_json(base, true);

    if (!p || !base_json ||
        aj_policy_load_buffer(p, base_json, strlen(base_json), "the tenant's policy", &err) < 0) {
        free(base_json);
        base_json = NULL;
        (void)snprintf(msg, msg_size, "policy: %s", p ? err.msg : "out of memory");
        goto fail;
    }
    if (profile && aj_policy_load_profile(p, json_string_value(profile), &err) < 0) {
        (void)snprintf(msg, msg_size, "profile: %s", err.msg);
        goto fail;
    }
    if (policy) {
        /* A policy file's content; "version" may be left out (1). */
        json_t *copy = json_copy(policy);
        if (copy && !json_object_get(copy, "version"))
            (void)json_object_set_new(copy, "version", json_integer(1));
        text = copy ? json_dumps(copy, JSON_COMPACT) : NULL;
        json_decref(copy);
        if (!text || aj_policy_load_buffer(p, text, strlen(text), "policy", &err) < 0) {
            (void)snprintf(msg, msg_size, "%s", text ? err.msg : "out of memory");
            goto fail;
        }
    }
    (void)pthread_mutex_lock(&ss->lock);
    diff = aj_policy_diff(base, p, &oom);
    (void)pthread_mutex_unlock(&ss->lock);
    if (oom) {
        (void)snprintf(msg, msg_size, "out of memory");
        goto fail;
    }
    for (char *line = diff; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        /* A = the server's, B = the request's: only "A is weaker" lines
         * tighten. Neutral differences are refused too (a bind's path or
         * owner, an identity, an environment entry, an alert command run
         * on the host), but for the few that change nothing of what a run
         * can reach (neutral_keys). */
        if (*line && !strstr(line, "(A is weaker") && !neutral_key(line)) {
            (void)snprintf(msg, msg_size, "policy: a request may only tighten the tenant's policy: %s", line);
            goto fail;
        }
        line = nl ? nl + 1 : line + strlen(line);
    }
    if (aj_policy_validate(p, &err) < 0) {
        (void)snprintf(msg, msg_size, "policy: %s", err.msg);
        goto fail;
    }
    free(base_json);
    free(text);
    free(diff);
    return p;
fail:
    free(base_json);
    free(text);
    free(diff);
    aj_policy_free(p);
    return NULL;
}

static int add_workspace_bind(struct aj_policy *p, const struct srv_ws *ws, char *msg, size_t msg_size)
{
    struct aj_error err = {0};
    char spec[4200], owner[32];

    (void)snprintf(spec, sizeof(spec), "%s:/workspace", ws->path);
    (void)snprintf(owner, sizeof(owner), "%u:%u", ws->owner, ws->owner);
    if (aj_policy_add_bind(p, spec, true, &err) < 0 || aj_policy_set_bind_owner(p, owner, &err) < 0 ||
        aj_policy_validate(p, &err) < 0) {
        (void)snprintf(msg, msg_size, "workspace bind: %s", err.msg);
        return -1;
    }
    return 0;
}

/* ---- records ------------------------------------------------------------------------------- */

static char *session_json(struct srv_sessions *ss, struct srv_session *s)
{
    json_t *o;
    char *text;

    (void)pthread_mutex_lock(&ss->lock);
    o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:o, s:{s:s}}", "id", s->id, "status",
                  s->closed ? "closing" : "live", "created_ms", (json_int_t)s->created_ms, "expires_ms",
                  (json_int_t)s->expires_ms, "idle_timeout", (json_int_t)(s->idle_ms / 1000), "workspace_quota",
                  (json_int_t)s->quota, "workspace_used", (json_int_t)srv_ws_used(s->ws), "policy_sha256",
                  s->policy_sha256, "run", s->run_id[0] ? json_string(s->run_id) : json_null(), "workspace",
                  "backend", srv_ws_backend_name(s->ws->backend));
    if (o && s->kernel)
        (void)json_object_set_new(o, "kernel", srv_kernel_json(s->kernel));
    if (o && !s->active)
        (void)json_object_set_new(o, "idle_expires_ms", json_integer(s->last_used_ms + (json_int_t)s->idle_ms));
    (void)pthread_mutex_unlock(&ss->lock);
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* ---- POST /v1/sessions ------------------------------------------------------------------------ */

/* Seconds as a number > 0, at most max_ms. */
static int get_seconds(json_t *v, const char *key, uint64_t max_ms, uint64_t *ret, char *msg, size_t msg_size)
{
    double s = json_number_value(v);

    if (!json_is_number(v) || s <= 0) {
        (void)snprintf(msg, msg_size, "%s: must be a positive number of seconds", key);
        return -1;
    }
    if (s * 1000.0 > (double)max_ms) {
        (void)snprintf(msg, msg_size, "%s: %g s is more than the server allows (%llu s); a request may only "
                       "tighten it", key, s, (unsigned long long)(max_ms / 1000));
        return -1;
    }
    *ret = (uint64_t)(s * 1000.0);
    if (!*ret)
        *ret = 1;
    return 0;
}

static void create_session(struct srv_ctx *ctx, struct srv_tenant *t, const char *body, size_t body_len,
                           struct srv_reply *reply)
{
    struct srv_sessions *ss = ctx->sessions;
    json_error_t jerr;
    json_t *req = json_loadb(body ? body : "", body ? body_len : 0, JSON_REJECT_DUPLICATES, &jerr), *v;
    json_t *profile = NULL, *policy = NULL;
    const char *kernel = NULL;
    struct srv_session *s = NULL;
    uint64_t ttl = ctx->cfg.session_ttl_ms, idle = ctx->cfg.session_idle_ms, quota = ctx->cfg.workspace_quota;
    char msg[700], name[40];
    const char *key;
    struct aj_error err = {0};
    unsigned mine = 0;
    uint32_t owner;

    if (!req) {
        srv_reply_error(reply, 400, "body:%d:%d: %s", jerr.line, jerr.column, jerr.text);
        return;
    }
    if (!json_is_object(req)) {
        srv_reply_error(reply, 400, "the body is a JSON object");
        goto out;
    }
    json_object_foreach(req, key, v) {
        if (strcmp(key, "profile") == 0) {
            if (!json_is_string(v)) {
                srv_reply_error(reply, 400, "profile: must be a string (agentjail policy profiles)");
                goto out;
            }
            profile = v;
        } else if (strcmp(key, "policy") == 0) {
            if (!json_is_object(v)) {
                srv_reply_error(reply, 400, "policy: must be an object (a policy file's content)");
                goto out;
            }
            policy = v;
        } else if (strcmp(key, "ttl") == 0 || strcmp(key, "idle_timeout") == 0) {
            bool is_ttl = key[0] == 't';
            if (get_seconds(v, key, is_ttl ? ctx->cfg.session_ttl_ms : ctx->cfg.session_idle_ms,
                            is_ttl ? &ttl : &idle, msg, sizeof(msg)) < 0) {
                srv_reply_error(reply, 400, "%s", msg);
                goto out;
            }
        } else if (strcmp(key, "workspace_quota") == 0) {
            if (json_is_integer(v) && json_integer_value(v) > 0)
                quota = (uint64_t)json_integer_value(v);
            else if (!json_is_string(v) || aj_parse_size(json_string_value(v), &quota) < 0) {
                srv_reply_error(reply, 400, "workspace_quota: bytes, as an integer or a size (\"64M\")");
                goto out;
            }
            if (quota < 65536 || quota > ctx->cfg.workspace_quota) {
                srv_reply_error(reply, 400, "workspace_quota: between 65536 and %llu bytes (the server's); a "
                                "request may only tighten it", (unsigned long long)ctx->cfg.workspace_quota);
                goto out;
            }
        } else if (strcmp(key, "kernel") == 0) {
            if (!json_is_string(v) || strcmp(json_string_value(v), "python") != 0) {
                srv_reply_error(reply, 400, "kernel: \"python\" (the only language with live kernels)");
                goto out;
            }
            kernel = "python";
        } else {
            srv_reply_error(reply, 400, "unknown field '%s' (known: policy, profile, ttl, idle_timeout, "
                            "workspace_quota, kernel)", key);
            goto out;
        }
    }
    if (ss->off || !ctx->cfg.max_sessions_per_tenant) {
        srv_reply_error(reply, 501, "%s", ss->off ? ss->off : "sessions are off (sessions.max_per_tenant is 0)");
        goto out;
    }
    s = calloc(1, sizeof(*s));
    if (!s || !srv_new_id(s->id)) {
        srv_reply_error(reply, 500, "%s", s ? "getrandom failed" : "out of memory");
        goto out;
    }
    s->refs = 1;
    s->tenant = t;
    s->quota = quota;
    s->idle_ms = idle;
    s->pol = tightened(ss, t, profile, policy, msg, sizeof(msg));
    if (!s->pol) {
        srv_reply_error(reply, 400, "%s", msg);
        goto out;
    }
    if (alloc_owner(ss, &owner) < 0) {
        srv_reply_error(reply, 503, "no workspace uid is free (sessions.workspace_uids)");
        goto out;
    }
    (void)snprintf(name, sizeof(name), "s-%s", s->id);
    if (srv_ws_create(ss->rootfd, ss->root, name, quota, owner, &s->ws, msg, sizeof(msg)) < 0) {
        free_owner(ss, owner);
        srv_reply_error(reply, 500, "%s", msg);
        goto out;
    }
    if (add_workspace_bind(s->pol, s->ws, msg, sizeof(msg)) < 0 ||
        aj_policy_sha256(s->pol, s->policy_sha256, &err) < 0) {
        srv_reply_error(reply, 500, "%s", msg[0] ? msg : err.msg);
        goto fail_ws;
    }
    if (kernel && srv_kernel_new(ctx, s->pol, s->id, t, &s->kernel, msg, sizeof(msg)) < 0) {
        srv_reply_error(reply, 500, "%s", msg);
        goto fail_ws;
    }
    s->created_ms = s->last_used_ms = srv_now_ms();
    s->expires_ms = s->created_ms + (int64_t)ttl;

    /* The count and the insertion under one lock: two requests at once
     * cannot both take the last place. */
    (void)pthread_mutex_lock(&ss->lock);
    for (struct srv_session *o = ss->live; o; o = o->next)
        mine += o->tenant == t;
    bool full = mine >= ctx->cfg.max_sessions_per_tenant || ss->stopping;
    if (!full) {
        s->refs++; /* the registry's */
        s->next = ss->live;
        ss->live = s;
        ss->n_live++;
        srv_tenant_sessions_add(t, 1);
        (void)pthread_cond_broadcast(&ss->wake);
    }
    (void)pthread_mutex_unlock(&ss->lock);
    if (full) {
        srv_reply_error(reply, 429, "too many live sessions (sessions.max_per_tenant is %u); close one",
                        ctx->cfg.max_sessions_per_tenant);
        goto fail_ws;
    }
    struct srv_session_row row = {.tenant = t->name, .created_ms = s->created_ms, .expires_ms = s->expires_ms,
                                  .idle_ms = idle, .quota = quota, .status = "live",
                                  .policy_sha256 = s->policy_sha256};
    memcpy(row.id, s->id, sizeof(row.id));
    if (srv_store_session_insert(ctx->store, &row) < 0) {
        srv_reply_error(reply, 500, "the store could not be written");
        session_close(ss, s, "lost", "the store could not be written"); /* takes this reference */
        json_decref(req);
        return;
    }
    srv_reply_json(reply, 201, session_json(ss, s));
    (void)fprintf(stderr, "agentjail serve: session %s: live (tenant %s, quota %llu, uid %u)\n", s->id, t->name,
                  (unsigned long long)quota, owner);
    srv_session_unref(ss, s);
    json_decref(req);
    return;
fail_ws:
    srv_kernel_stop(s->kernel, NULL);
    srv_ws_unmount(ss->rootfd, s->ws);
out:
    if (s) {
        s->refs = 1;
        srv_session_unref(ss, s);
    }
    json_decref(req);
}

/* ---- runs ------------------------------------------------------------------------------------ */

/* Let go of what prepare_run took, once: the session's run slot, a
 * temporary workspace (unmounted and removed). */
static void run_release(struct srv_sessions *ss, struct srv_run *r)
{
    if (r->session && r->workdir) {
        struct srv_session *s = r->session;
        (void)pthread_mutex_lock(&ss->lock);
        if (strcmp(s->run_id, r->id) == 0)
            s->run_id[0] = '\0';
        (void)pthread_mutex_unlock(&ss->lock);
        srv_session_end(ss, s);
    }
    if (r->ws && r->ws_temp) {
        srv_ws_unmount(ss->rootfd, r->ws);
        free_owner(ss, r->ws->owner);
        srv_ws_free(r->ws);
    }
    r->ws = NULL;
    r->workdir = NULL;
}

static int write_files(struct srv_ctx *ctx, struct srv_ws *ws, json_t *files, struct srv_reply *reply)
{
    const char *name;
    json_t *v;
    char msg[400];

    json_object_foreach(files, name, v) {
        const char *p;
        struct srv_ws_file f;
        size_t len = 0;
        bool oom = false;
        uint8_t *data;
        int rc = srv_ws_path(name, false, &p, msg, sizeof(msg));
        if (rc < 0) {
            srv_reply_error(reply, (unsigned)-rc, "files.%s", msg);
            return -1;
        }
        if (!json_is_string(v) ||
            !(data = srv_base64_decode(json_string_value(v), json_string_length(v), &len, &oom))) {
            srv_reply_error(reply, oom ? 500 : 400, "files.%s: %s", name,
                            oom ? "out of memory" : "must be a string of base64");
            return -1;
        }
        (void)srv_ws_put_begin(ws, p, ctx->cfg.max_file_bytes, &f); /* an error is kept in f */
        srv_ws_put_write(&f, data, len);
        free(data);
        rc = srv_ws_put_commit(ws, &f);
        srv_ws_put_abort(&f);
        if (rc < 0) {
            srv_reply_error(reply, (unsigned)-rc, "files.%s", f.msg);
            return -1;
        }
    }
    return 0;
}

int srv_session_prepare_run(struct srv_ctx *ctx, struct srv_tenant *t, const char *session_id, json_t *files,
                            json_t *outputs, struct srv_run *r, struct srv_reply *reply)
{
    struct srv_sessions *ss = ctx->sessions;
    char msg[700];
    int rc;

    if (files && !json_is_object(files)) {
        srv_reply_error(reply, 400, "files: must be an object {\"path\": \"base64\"}");
        return -1;
    }
    if (outputs) {
        size_t i;
        json_t *o;
        const char *p;
        if (!json_is_array(outputs) || json_array_size(outputs) > SRV_MAX_OUTPUTS) {
            srv_reply_error(reply, 400, "outputs: must be an array of at most %d paths", SRV_MAX_OUTPUTS);
            return -1;
        }
        r->outputs = calloc(json_array_size(outputs) + 1, sizeof(char *));
        if (!r->outputs) {
            srv_reply_error(reply, 500, "out of memory");
            return -1;
        }
        json_array_foreach(outputs, i, o) {
            if (!json_is_string(o) || strlen(json_string_value(o)) != json_string_length(o)) {
                srv_reply_error(reply, 400, "outputs[%zu]: must be a string", i);
                return -1;
            }
            rc = srv_ws_path(json_string_value(o), false, &p, msg, sizeof(msg));
            if (rc < 0) {
                srv_reply_error(reply, (unsigned)-rc, "outputs[%zu]: %s", i, msg);
                return -1;
            }
            r->outputs[i] = strdup(json_string_value(o));
            if (!r->outputs[i]) {
                srv_reply_error(reply, 500, "out of memory");
                return -1;
            }
        }
    }
    if (!session_id && !files && !outputs)
        return 0;
    if (ss->off) {
        srv_reply_error(reply, 501, "%s", ss->off);
        return -1;
    }
    if (session_id) {
        struct srv_session *s;
        rc = srv_session_find(ss, t, session_id, &s);
        if (rc < 0) {
            srv_find_fail(rc, session_id, reply);
            return -1;
        }
        r->session = s; /* the reference is the run's */
        (void)snprintf(r->session_id, sizeof(r->session_id), "%s", s->id);
        (void)pthread_mutex_lock(&ss->lock);
        bool busy = s->run_id[0] != '\0', closed = s->closed;
        if (!busy && !closed) {
            memcpy(s->run_id, r->id, sizeof(s->run_id));
            s->active++;
        }
        (void)pthread_mutex_unlock(&ss->lock);
        if (closed) {
            srv_reply_error(reply, 410, "session %s has ended", s->id);
            return -1;
        }
        if (busy) {
            srv_reply_error(reply, 409, "session %s has a run in flight (one at a time per session)", s->id);
            return -1;
        }
        r->ws = s->ws;
        r->workdir = "/workspace";
        if (r->pol) {
            /* The request's "network": "none" (srv_tenant_request_network
             * set the tenant's variant): the session's policy, with it. */
            struct aj_error err = {0};
            r->own_pol = aj_policy_new();
            char *sj = aj_policy_to_json(s->pol, true);
            if (!r->own_pol || !sj || aj_policy_load_buffer(r->own_pol, sj, strlen(sj), "the session's policy", &err) < 0 ||
                aj_policy_set(r->own_pol, "network.mode", "none", &err) < 0) {
                free(sj);
                srv_reply_error(reply, 500, "%s", err.msg[0] ? err.msg : "out of memory");
                return -1;
            }
            free(sj);
            r->pol = r->own_pol;
        } else {
            r->pol = s->pol;
        }
    } else {
        uint32_t owner;
        char name[40];
        struct srv_ws *ws = NULL;
        if (alloc_owner(ss, &owner) < 0) {
            srv_reply_error(reply, 503, "no workspace uid is free (sessions.workspace_uids)");
            return -1;
        }
        (void)snprintf(name, sizeof(name), "r-%s", r->id);
        if (srv_ws_create(ss->rootfd, ss->root, name, ctx->cfg.workspace_quota, owner, &ws, msg, sizeof(msg)) < 0) {
            free_owner(ss, owner);
            srv_reply_error(reply, 500, "%s", msg);
            return -1;
        }
        r->ws = ws;
        r->ws_temp = true;
        r->workdir = "/workspace";
        struct aj_error err = {0};
        /* The run's policy as it would be without files (the tenant's, or
         * its network variant), plus the workspace. */
        const struct aj_policy *base = r->pol ? r->pol : t->pol ? t->pol : ss->base;
        char *bj = aj_policy_to_json(base, true);
        msg[0] = '\0';
        r->own_pol = aj_policy_new();
        if (!r->own_pol || !bj || aj_policy_load_buffer(r->own_pol, bj, strlen(bj), "the tenant's policy", &err) < 0 ||
            add_workspace_bind(r->own_pol, ws, msg, sizeof(msg)) < 0) {
            free(bj);
            srv_reply_error(reply, 500, "%s", err.msg[0] ? err.msg : msg[0] ? msg : "out of memory");
            return -1;
        }
        free(bj);
        r->pol = r->own_pol;
    }
    if (files && write_files(ctx, r->ws, files, reply) < 0)
        return -1;
    return 0;
}

void srv_session_run_ended(struct srv_run *r)
{
    struct srv_sessions *ss = the_sessions;

    if (!r->ws || !ss)
        return;
    if (r->outputs)
        r->outputs_json = srv_ws_outputs(r->ws, r->outputs, ss->ctx->cfg.max_file_bytes,
                                         ss->ctx->cfg.max_outputs_bytes);
    /* The payload filled its workspace: say so, rather than the exit
     * status its failed write led to. Limits, timeouts and escape
     * attempts keep their own status. */
    if ((strcmp(r->status, "ok") == 0 || strcmp(r->status, "nonzero_exit") == 0 ||
         strcmp(r->status, "signaled") == 0) &&
        srv_ws_full(r->ws))
        (void)snprintf(r->status, sizeof(r->status), "workspace_full");
    run_release(ss, r);
}

void srv_session_run_free(struct srv_run *r)
{
    struct srv_sessions *ss = the_sessions;

    if (ss) {
        run_release(ss, r);
        if (r->session)
            srv_session_unref(ss, r->session);
    }
    r->session = NULL;
    aj_policy_free(r->own_pol);
    r->own_pol = NULL;
    r->pol = NULL;
    for (size_t i = 0; r->outputs && r->outputs[i]; i++)
        free(r->outputs[i]);
    free(r->outputs);
    r->outputs = NULL;
    json_decref(r->outputs_json);
    r->outputs_json = NULL;
}

/* ---- /v1/sessions --------------------------------------------------------------------------- */

static void one_session(struct srv_ctx *ctx, struct srv_tenant *t, const char *id, bool del,
                        struct srv_reply *reply)
{
    struct srv_sessions *ss = ctx->sessions;
    struct srv_session *s;
    char *rec = NULL;
    int rc = srv_session_find(ss, t, id, &s);

    if (rc == 0) {
        if (!del) {
            srv_reply_json(reply, 200, session_json(ss, s));
            srv_session_unref(ss, s);
            return;
        }
        session_close(ss, s, "deleted", NULL);
    } else if (rc != -ESTALE && !(rc == -EREMOTE && !del)) { /* another replica's: its row reads anywhere */
        srv_find_fail(rc, id, reply);
        return;
    }
    rc = srv_store_session_get_json(ss->ctx->store, t->name, id, &rec);
    if (rc == -ENOENT)
        srv_reply_error(reply, 404, "no session %s", id);
    else if (rc < 0)
        srv_reply_error(reply, 500, "the store could not be read");
    else
        srv_reply_json(reply, 200, rec);
}

static void list_sessions(struct srv_ctx *ctx, struct srv_tenant *t, struct srv_reply *reply)
{
    struct srv_sessions *ss = ctx->sessions;
    json_t *a = json_array();
    char *text;

    (void)pthread_mutex_lock(&ss->lock);
    for (struct srv_session *s = ss->live; a && s; s = s->next)
        if (s->tenant == t && json_array_append_new(a, json_string(s->id)) < 0) {
            json_decref(a);
            a = NULL;
        }
    (void)pthread_mutex_unlock(&ss->lock);
    json_t *o = a ? json_pack("{s:o}", "sessions", a) : NULL;
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    srv_reply_json(reply, 200, text);
}

void srv_sessions_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *rest,
                       const char *body, size_t body_len, struct srv_reply *reply)
{
    char id[33];

    if (!*rest || strcmp(rest, "/") == 0) {
        if (strcmp(method, "POST") == 0)
            create_session(ctx, t, body, body_len, reply);
        else if (strcmp(method, "GET") == 0)
            list_sessions(ctx, t, reply);
        else
            srv_reply_error(reply, 405, "%s /v1/sessions: only POST and GET", method);
        return;
    }
    if (rest[0] != '/' || strlen(rest) < 33 || strspn(rest + 1, "0123456789abcdef") < 32) {
        srv_reply_error(reply, 404, "no session with that id");
        return;
    }
    memcpy(id, rest + 1, 32);
    id[32] = '\0';
    if (!rest[33]) {
        if (strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0)
            one_session(ctx, t, id, method[0] == 'D', reply);
        else
            srv_reply_error(reply, 405, "%s /v1/sessions/%s: only GET and DELETE", method, id);
        return;
    }
    if (strcmp(rest + 33, "/cells") == 0 || strncmp(rest + 33, "/kernel", 7) == 0) {
        srv_kernel_call(ctx, t, method, id, rest + 33, body, body_len, reply);
        return;
    }
    if (strncmp(rest + 33, "/files", 6) == 0 && (rest[39] == '/' || !rest[39])) {
        char url[8192];
        (void)snprintf(url, sizeof(url), "/v1/sessions%s", rest);
        srv_files_call(ctx, t, method, url, body, body_len, reply);
        return;
    }
    srv_reply_error(reply, 404, "no endpoint /v1/sessions%s", rest);
}
