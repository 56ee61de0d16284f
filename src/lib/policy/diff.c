/* SPDX-License-Identifier: Apache-2.0 */
/* The reviewer's diff: one line per key whose protection differs between
 * two policies, in key-table order, saying which side is weaker. How a key
 * weakens is in its row (keys.c); compound keys, and uid/gid (one line
 * for both), have code here. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"
#include "aj_util.h"

struct text {
    char *s;
    size_t len;
    bool oom;
};

static void addf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(struct text *t, const char *fmt, ...)
{
    va_list ap;
    char *line = NULL;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->oom = true;
        return;
    }
    char *ns = realloc(t->s, t->len + (size_t)n + 1);
    if (!ns) {
        free(line);
        t->oom = true;
        return;
    }
    memcpy(ns + t->len, line, (size_t)n + 1);
    t->s = ns;
    t->len += (size_t)n;
    free(line);
}

static const struct aj_bind *find_bind(const struct aj_policy *p, const char *sandbox)
{
    for (size_t i = 0; i < p->n_binds; i++)
        if (strcmp(p->binds[i].sandbox, sandbox) == 0)
            return &p->binds[i];
    return NULL;
}

static bool has_str(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return true;
    return false;
}

/* Filesystem: what each side exposes of the host. */
static void diff_binds(struct text *t, const char *key, const struct aj_policy *a, const struct aj_policy *b)
{
    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n_binds; i++) {
            const struct aj_bind *bx = &x->binds[i], *by = find_bind(y, bx->sandbox);
            if (!by)
                addf(t, "%s: only %s binds %s -> %s (%s) (%s is weaker: exposes more of the host)\n", key,
                     side ? "B" : "A", bx->host, bx->sandbox, bx->rw ? "rw" : "ro", side ? "B" : "A");
            else if (side == 0 && (strcmp(bx->host, by->host) != 0 || bx->rw != by->rw))
                addf(t, "%s %s: A %s (%s), B %s (%s)%s\n", key, bx->sandbox, bx->host, bx->rw ? "rw" : "ro",
                     by->host, by->rw ? "rw" : "ro",
                     bx->rw == by->rw ? " (review: different host paths)"
                                      : bx->rw ? " (A is weaker: writable)" : " (B is weaker: writable)");
            else if (side == 0 && (bx->owner_set != by->owner_set ||
                                   (bx->owner_set && (bx->owner_uid != by->owner_uid ||
                                                      bx->owner_gid != by->owner_gid)))) {
                char oa[32] = "source's owner", ob[32] = "source's owner";
                if (bx->owner_set)
                    (void)snprintf(oa, sizeof(oa), "%u:%u", bx->owner_uid, bx->owner_gid);
                if (by->owner_set)
                    (void)snprintf(ob, sizeof(ob), "%u:%u", by->owner_uid, by->owner_gid);
                addf(t, "%s %s owner: A %s, B %s (review: who owns what the sandbox writes)\n", key,
                     bx->sandbox, oa, ob);
            }
        }
    }
}

/* The entry in effect for the variable named by s[0..n): the last one (a
 * later NAME= overrides an earlier one, as in the canonical JSON). */
static const char *env_effective(const struct aj_policy *p, const char *s, size_t n)
{
    for (size_t i = p->n_env; i-- > 0;)
        if (strncmp(p->env[i], s, n) == 0 && p->env[i][n] == '=')
            return p->env[i];
    return NULL;
}

/* Environment: what each side hands in, as the effective map. Values are
 * not printed: they may be secrets. */
static void diff_env(struct text *t, const char *key, const struct aj_policy *a, const struct aj_policy *b)
{
    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n_env; i++) {
            size_t k = strcspn(x->env[i], "=");
            const char *other = env_effective(y, x->env[i], k);
            if (env_effective(x, x->env[i], k) != x->env[i])
                continue; /* overridden by a later entry of x */
            if (!other)
                addf(t, "%s: only %s sets %.*s\n", key, side ? "B" : "A", (int)k, x->env[i]);
            else if (!side && strcmp(other, x->env[i]) != 0)
                addf(t, "%s: %.*s differs\n", key, (int)k, x->env[i]);
        }
    }
}

static void diff_env_pass(struct text *t, const char *key, const struct aj_policy *a, const struct aj_policy *b)
{
    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n_env_pass; i++)
            if (!has_str(y->env_pass, y->n_env_pass, x->env_pass[i]))
                addf(t, "%s: only %s passes %s from the host (%s is weaker)\n", key, side ? "B" : "A",
                     x->env_pass[i], side ? "B" : "A");
    }
}

/* network.mode: none < loopback < proxy, each reaching more. */
static void diff_network(struct text *t, const struct aj_policy_key *k, const struct aj_policy *a,
                         const struct aj_policy *b)
{
    static const char *const why[] = {[AJ_NET_NONE] = "", [AJ_NET_LOOPBACK] = "loopback networking",
                                      [AJ_NET_PROXY] = "network through the egress proxy"};
    char sa[32], sb[32];
    bool a_weak = a->network > b->network;

    if (a->network == b->network)
        return;
    aj_policy_key_format(k, a->network, sa, sizeof(sa));
    aj_policy_key_format(k, b->network, sb, sizeof(sb));
    addf(t, "%s: A %s, B %s (%s is weaker: %s)\n", k->key, sa, sb, a_weak ? "A" : "B",
         (unsigned)(a_weak ? a->network : b->network) < AJ_ARRAY_SIZE(why) ? why[a_weak ? a->network : b->network]
                                                                          : "more network");
}

/* network.allow, deny, allow_ranges: entries only one side has. More
 * allowed (or fewer denied) is weaker. */
static void diff_str_list(struct text *t, const struct aj_policy_key *k, const struct aj_policy *a,
                          const struct aj_policy *b)
{
    bool deny = strcmp(k->key, "network.deny") == 0;

    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        char *const *xv = *(char *const *const *)(const void *)((const char *)x + k->offset);
        char *const *yv = *(char *const *const *)(const void *)((const char *)y + k->offset);
        size_t xn = *(const size_t *)(const void *)((const char *)x + k->count_offset);
        size_t yn = *(const size_t *)(const void *)((const char *)y + k->count_offset);
        for (size_t i = 0; i < xn; i++)
            if (!has_str(yv, yn, xv[i]))
                addf(t, "%s: only %s has %s (%s is weaker)\n", k->key, side ? "B" : "A", xv[i],
                     (side != 0) != deny ? "B" : "A");
    }
}

/* secrets: by id; hosts and header matter (where the value goes). */
static void diff_secrets(struct text *t, const char *key, const struct aj_policy *a, const struct aj_policy *b)
{
    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n_secrets; i++) {
            const struct aj_secret *sx = &x->secrets[i], *sy = NULL;
            for (size_t j = 0; j < y->n_secrets; j++)
                if (strcmp(y->secrets[j].id, sx->id) == 0)
                    sy = &y->secrets[j];
            if (!sy) {
                addf(t, "%s: only %s brokers %s (from %s) (%s is weaker: hands its runs a credential to use)\n", key,
                     side ? "B" : "A", sx->id, sx->value_from, side ? "B" : "A");
                continue;
            }
            for (size_t h = 0; h < sx->n_hosts; h++)
                if (!has_str(sy->hosts, sy->n_hosts, sx->hosts[h]))
                    addf(t, "%s: %s: only %s sends it to %s (%s is weaker)\n", key, sx->id, side ? "B" : "A",
                         sx->hosts[h], side ? "B" : "A");
            if (!side && (strcmp(sx->value_from, sy->value_from) != 0 ||
                          strcmp(sx->header ? sx->header : "", sy->header ? sy->header : "") != 0 ||
                          strcmp(sx->format ? sx->format : "", sy->format ? sy->format : "") != 0 ||
                          strcmp(sx->env ? sx->env : "", sy->env ? sy->env : "") != 0 ||
                          strcmp(sx->file ? sx->file : "", sy->file ? sy->file : "") != 0))
                addf(t, "%s: %s differs (value_from, header, format or placeholder)\n", key, sx->id);
        }
    }
}

static void diff_custom(struct text *t, const struct aj_policy_key *k, const struct aj_policy *a,
                        const struct aj_policy *b)
{
    switch (k->type) {
    case AJ_KEY_STR_LIST:
        diff_str_list(t, k, a, b);
        return;
    case AJ_KEY_SECRET_LIST:
        diff_secrets(t, k->key, a, b);
        return;
    case AJ_KEY_BIND_LIST:
        diff_binds(t, k->key, a, b);
        return;
    case AJ_KEY_TMPFS_LIST:
        if (a->n_tmpfs != b->n_tmpfs)
            addf(t, "%s: A has %zu, B has %zu extra tmpfs mounts\n", k->key, a->n_tmpfs, b->n_tmpfs);
        return;
    case AJ_KEY_ENV_MAP:
        diff_env(t, k->key, a, b);
        return;
    case AJ_KEY_NAME_LIST:
        diff_env_pass(t, k->key, a, b);
        return;
    case AJ_KEY_MODULE_LIST:
        /* Not a protection: what a warm interpreter has imported already. */
        for (int side = 0; side < 2; side++) {
            const struct aj_policy *x = side ? b : a, *y = side ? a : b;
            for (size_t i = 0; i < x->n_preload; i++)
                if (!has_str(y->preload, y->n_preload, x->preload[i]))
                    addf(t, "%s: only %s preloads %s\n", k->key, side ? "B" : "A", x->preload[i]);
        }
        return;
    case AJ_KEY_LIMIT_SET:
        for (size_t i = 0; i < AJ_ARRAY_SIZE(aj_limit_names); i++) {
            bool ra = a->required_limits & aj_limit_names[i].bit, rb = b->required_limits & aj_limit_names[i].bit;
            if (ra != rb)
                addf(t, "%s: %s is required by %s only (%s is weaker: that limit may not apply without a "
                     "cgroup)\n", k->key, aj_limit_names[i].name, ra ? "A" : "B", ra ? "B" : "A");
        }
        return;
    case AJ_KEY_ID_RANGE:
        if (a->uid_base != b->uid_base || a->uid_count != b->uid_count)
            addf(t, "%s: A %u:%u, B %u:%u\n", k->key, a->uid_base, a->uid_count, b->uid_base, b->uid_count);
        return;
    case AJ_KEY_ID:
        /* uid and gid on one line, under "identity", where uid's row is */
        if (strcmp(k->key, "identity.uid") == 0 && (a->uid != b->uid || a->gid != b->gid))
            addf(t, "identity: A uid %u gid %u, B uid %u gid %u%s\n", a->uid, a->gid, b->uid, b->gid,
                 a->uid == 0 ? " (A runs as uid 0 inside)" : b->uid == 0 ? " (B runs as uid 0 inside)" : "");
        return;
    case AJ_KEY_COUNT:
        /* detection.event_budget: neither side is weaker, one writes more */
        if (strcmp(k->key, "detection.event_budget") == 0 && aj_policy_key_get(a, k) != aj_policy_key_get(b, k))
            addf(t, "%s: A %llu, B %llu (%s writes more events per run; past the budget attempts are counted "
                 "and summarised)\n", k->key, (unsigned long long)aj_policy_key_get(a, k),
                 (unsigned long long)aj_policy_key_get(b, k),
                 aj_policy_key_get(a, k) > aj_policy_key_get(b, k) ? "A" : "B");
        return;
    case AJ_KEY_BOOL:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
    case AJ_KEY_STRING:
    case AJ_KEY_CONST:
        break;
    case AJ_KEY_ENUM:
        if (strcmp(k->key, "network.mode") == 0)
            diff_network(t, k, a, b);
        return;
    }
}

/* A value as the diff shows it: booleans as their row names them
 * (detection.decoys: on/off), 0 as "none" or "auto". */
static void show(const struct aj_policy_key *k, const struct aj_policy *p, char *buf, size_t size)
{
    uint64_t v;

    if (k->type == AJ_KEY_STRING) {
        const char *s = aj_policy_key_get_str(p, k);
        (void)snprintf(buf, size, "%s", s ? s : "none");
        return;
    }
    v = aj_policy_key_get(p, k);
    if (k->type == AJ_KEY_BOOL && k->names)
        (void)snprintf(buf, size, "%s", k->names[v != 0]);
    else
        aj_policy_key_format(k, v, buf, size);
}

static const char *weaker_limit(const struct aj_policy_key *k, uint64_t a, uint64_t b)
{
    if (k->zero == AJ_ZERO_NONE && a == 0)
        return "A is weaker: no limit";
    if (k->zero == AJ_ZERO_NONE && b == 0)
        return "B is weaker: no limit";
    return a > b ? "A is weaker: higher limit" : "B is weaker: higher limit";
}

static void diff_key(struct text *t, const struct aj_policy_key *k, const struct aj_policy *a,
                     const struct aj_policy *b)
{
    char sa[256], sb[256];
    const char *weak;

    if (k->weaker == AJ_WEAKER_CUSTOM) {
        diff_custom(t, k, a, b);
        return;
    }
    if (k->weaker == AJ_WEAKER_NOT_COMPARED)
        return;
    if (k->type == AJ_KEY_STRING) {
        /* unset (no default) and the text "none" differ, though both show as none */
        const char *xa = aj_policy_key_get_str(a, k), *xb = aj_policy_key_get_str(b, k);
        if (!xa == !xb && (!xa || strcmp(xa, xb) == 0))
            return;
    } else if (aj_policy_key_get(a, k) == aj_policy_key_get(b, k)) {
        return;
    }
    show(k, a, sa, sizeof(sa));
    show(k, b, sb, sizeof(sb));
    switch (k->weaker) {
    case AJ_WEAKER_NEITHER:
        if (k->review)
            addf(t, "%s: A %s, B %s (%s)\n", k->key, sa, sb, k->review);
        else
            addf(t, "%s: A %s, B %s\n", k->key, sa, sb);
        return;
    case AJ_WEAKER_HIGHER:
        addf(t, "%s: A %s, B %s (%s)\n", k->key, sa, sb,
             weaker_limit(k, aj_policy_key_get(a, k), aj_policy_key_get(b, k)));
        return;
    case AJ_WEAKER_TRUE:
    case AJ_WEAKER_FALSE:
    case AJ_WEAKER_VALUE:
        weak = aj_policy_key_is_weak(a, k) ? "A" : "B";
        addf(t, "%s: A %s, B %s (%s is weaker: %s)\n", k->key, sa, sb, weak, k->review);
        return;
    case AJ_WEAKER_CUSTOM:
    case AJ_WEAKER_NOT_COMPARED:
        break;
    }
}

char *aj_policy_diff(const struct aj_policy *a, const struct aj_policy *b, bool *ret_oom)
{
    struct text t = {0};

    *ret_oom = false;
    for (size_t i = 0; i < aj_policy_n_keys; i++)
        diff_key(&t, &aj_policy_keys[i], a, b);
    if (t.oom) {
        free(t.s);
        *ret_oom = true;
        return NULL;
    }
    return t.s;
}
