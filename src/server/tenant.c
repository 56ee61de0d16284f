/* SPDX-License-Identifier: Apache-2.0 */
/* Tenants: each gets its own policy object (the server's profile and
 * file, then its own on top, its timeout and its host uid range) and,
 * in the runner, its own warm pool; nothing of one (a parked sandbox, a
 * uid) is ever another's. A tenant's policy may only tighten the
 * server's: aj_policy_diff says which side of each difference is weaker,
 * and a tenant side that is weaker stops the server at load. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

/* The policy every run of the server would get without tenants: the
 * base a tenant is compared with. The same steps as http.c's. */
static struct aj_policy *base_policy(const struct srv_config *cfg, struct aj_error *err)
{
    struct aj_policy *pol = aj_policy_new();

    if (!pol) {
        (void)snprintf(err->msg, sizeof(err->msg), "out of memory");
        return NULL;
    }
    if ((cfg->profile && aj_policy_load_profile(pol, cfg->profile, err) < 0) ||
        (cfg->policy_path && aj_policy_load_file(pol, cfg->policy_path, err) < 0)) {
        aj_policy_free(pol);
        return NULL;
    }
    return pol;
}

/* The policy's canonical JSON, parsed. */
static json_t *policy_json(const struct aj_policy *pol)
{
    char *s = aj_policy_to_json(pol, true);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;

    free(s);
    return j;
}

static json_t *get2(json_t *root, const char *section, const char *key)
{
    return json_object_get(json_object_get(root, section), key);
}

/* A limit of the canonical JSON ("2G", "10s", null) in bytes or ms; 0: none. */
static uint64_t limit_of(json_t *root, const char *key, bool duration)
{
    json_t *v = get2(root, "limits", key);
    uint64_t n = 0;

    if (!json_is_string(v))
        return 0;
    if ((duration ? aj_parse_duration_ms(json_string_value(v), &n) : aj_parse_size(json_string_value(v), &n)) < 0)
        return 0;
    return n;
}

/* The policy's timeout if it sets one at most max_ms (then it is the
 * bound), else max_ms set as its timeout. */
static int bound_timeout(struct aj_policy *pol, uint64_t *max_ms, struct aj_error *err)
{
    json_t *root = policy_json(pol);
    uint64_t ms = root ? limit_of(root, "timeout", true) : 0;
    char val[32];

    json_decref(root);
    if (!root) {
        (void)snprintf(err->msg, sizeof(err->msg), "out of memory");
        return -1;
    }
    if (ms > 0 && ms <= *max_ms) {
        *max_ms = ms;
        return 0;
    }
    (void)snprintf(val, sizeof(val), "%llums", (unsigned long long)*max_ms);
    return aj_policy_set(pol, "limits.timeout", val, err);
}

static bool overlap(uint32_t a, uint32_t na, uint32_t b, uint32_t nb)
{
    return (uint64_t)a < (uint64_t)b + nb && (uint64_t)b < (uint64_t)a + na;
}

/* The lines of aj_policy_diff(server, tenant) where the tenant's side
 * (B) is the weaker one, or NULL when there are none. */
static char *looser_lines(const struct aj_policy *server, const struct aj_policy *tenant, bool *oom)
{
    char *d = aj_policy_diff(server, tenant, oom), *out = NULL;
    size_t len = 0;

    if (!d)
        return NULL;
    for (const char *line = d; *line && !*oom;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        if (memmem(line, n, "(B is weaker", 12)) {
            char *p = realloc(out, len + n + 3);
            if (!p) {
                *oom = true;
                break;
            }
            out = p;
            if (len) {
                memcpy(out + len, "; ", 2);
                len += 2;
            }
            memcpy(out + len, line, n);
            len += n;
            out[len] = '\0';
        }
        line += n + (nl ? 1 : 0);
    }
    free(d);
    return out;
}

static int fail(char *key, size_t key_size, char *msg, size_t msg_size, const char *k, const char *m)
{
    (void)snprintf(key, key_size, "%s", k);
    (void)snprintf(msg, msg_size, "%s", m);
    return -1;
}

/* The automatic ranges: the server policy's range [sbase, sbase+scount)
 * less every range given by hand (or by a tenant's own policy) and the
 * workspace owners' (sessions.workspace_uids), cut into
 * n_auto equal shares, as large as the free stretches allow. 0, or -1
 * when not one uid per tenant is left. */
static int auto_ranges(struct srv_config *cfg, const bool *given, uint32_t sbase, uint32_t scount, size_t n_auto)
{
    uint64_t lo = sbase, hi = (uint64_t)sbase + scount, seg[2 * 64 + 2][2], total = 0, share, best = 0;
    size_t n_seg = 0, k = 0;

    if (!n_auto)
        return 0;
    /* Free stretches, left to right: the start of each is the end of the
     * given range that reaches furthest below it (a few tenants: a plain
     * scan). Past 64 stretches the rest of the range is not used. */
    for (uint64_t at = lo; at < hi && n_seg < 2 * 64 + 2;) {
        uint64_t next_taken = hi, resume = at;
        bool inside = false;
        for (size_t i = 0; i <= cfg->n_tenants; i++) {
            bool ws = i == cfg->n_tenants; /* the workspace owners' range, last */
            uint64_t a = ws ? cfg->ws_uid_base : cfg->tenants[i].uid_base;
            uint64_t b = a + (ws ? cfg->ws_uid_count : cfg->tenants[i].uid_count);
            if ((!ws && !given[i]) || b <= at)
                continue;
            if (a <= at) {
                inside = true;
                if (b > resume)
                    resume = b;
            } else if (a < next_taken) {
                next_taken = a;
            }
        }
        if (inside) {
            at = resume;
            continue;
        }
        seg[n_seg][0] = at;
        seg[n_seg][1] = next_taken;
        total += next_taken - at;
        n_seg++;
        at = next_taken;
    }
    /* The largest share that n_auto tenants can each get in one stretch. */
    for (uint64_t l = 1, h = total / n_auto; l <= h;) {
        uint64_t mid = l + (h - l) / 2, fits = 0;
        for (size_t i = 0; i < n_seg; i++)
            fits += (seg[i][1] - seg[i][0]) / mid;
        if (fits >= n_auto) {
            best = mid;
            l = mid + 1;
        } else {
            h = mid - 1;
        }
    }
    if (!best)
        return -1;
    share = best;
    for (size_t i = 0; i < cfg->n_tenants; i++) {
        struct srv_tenant *t = &cfg->tenants[i];
        if (given[i])
            continue;
        while (seg[k][1] - seg[k][0] < share)
            k++;
        t->uid_base = (uint32_t)seg[k][0];
        t->uid_count = (uint32_t)share;
        seg[k][0] += share;
    }
    return 0;
}

int srv_tenants_build(struct srv_config *cfg, char *key, size_t key_size, char *msg, size_t msg_size)
{
    struct aj_error err = {0};
    struct aj_policy *base = base_policy(cfg, &err);
    json_t *broot = NULL;
    uint32_t sbase, scount;
    size_t n_auto = 0;
    bool *given = calloc(cfg->n_tenants ? cfg->n_tenants : 1, sizeof(bool));
    char k[300], m[700];
    int r = -1;

    if (!given) {
        aj_policy_free(base);
        return fail(key, key_size, msg, msg_size, "", "out of memory");
    }

    if (!base) {
        free(given);
        return fail(key, key_size, msg, msg_size, cfg->policy_path ? "policy" : "profile", err.msg);
    }
    /* The server's own bound, as http.c's policy has it. */
    if (bound_timeout(base, &cfg->max_timeout_ms, &err) < 0) {
        fail(key, key_size, msg, msg_size, "max_timeout", err.msg);
        goto out;
    }
    broot = policy_json(base);
    if (!broot) {
        fail(key, key_size, msg, msg_size, "", "out of memory");
        goto out;
    }
    sbase = (uint32_t)json_integer_value(json_object_get(get2(broot, "identity", "uid_range"), "base"));
    scount = (uint32_t)json_integer_value(json_object_get(get2(broot, "identity", "uid_range"), "count"));

    for (size_t i = 0; i < cfg->n_tenants; i++) {
        struct srv_tenant *t = &cfg->tenants[i];
        t->index = i;
        if (!t->set_max_runs)
            t->max_runs = cfg->max_runs_per_tenant;
        if (!t->set_rate)
            t->max_runs_per_minute = cfg->max_runs_per_minute;
        if (!t->set_timeout || t->max_timeout_ms > cfg->max_timeout_ms)
            t->max_timeout_ms = cfg->max_timeout_ms;
        if (!t->set_pool)
            t->pool_size = cfg->pool_size;
        {
            const struct srv_interp *in = t->interp.set ? &t->interp : &cfg->interp;
            t->interp_pool = in->python ? in->pool : 0;
        }
    }

    for (size_t i = 0; i < cfg->n_tenants; i++) {
        struct srv_tenant *t = &cfg->tenants[i];
        json_t *root;

        (void)snprintf(k, sizeof(k), "tenants.%s.%s", t->name, t->policy_path ? "policy" : "profile");
        t->pol = base_policy(cfg, &err);
        if (!t->pol || (t->profile && aj_policy_load_profile(t->pol, t->profile, &err) < 0) ||
            (t->policy_path && aj_policy_load_file(t->pol, t->policy_path, &err) < 0)) {
            fail(key, key_size, msg, msg_size, k, err.msg);
            goto out;
        }
        if (bound_timeout(t->pol, &t->max_timeout_ms, &err) < 0) {
            (void)snprintf(k, sizeof(k), "tenants.%s.max_timeout", t->name);
            fail(key, key_size, msg, msg_size, k, err.msg);
            goto out;
        }
        /* Its uids: given, or its policy's when that names a range of
         * its own, or (below) a share of the server policy's range. */
        root = policy_json(t->pol);
        if (!root) {
            fail(key, key_size, msg, msg_size, k, "out of memory");
            goto out;
        }
        given[i] = t->set_uid;
        if (!t->set_uid) {
            uint32_t pb = (uint32_t)json_integer_value(json_object_get(get2(root, "identity", "uid_range"), "base"));
            uint32_t pc = (uint32_t)json_integer_value(json_object_get(get2(root, "identity", "uid_range"), "count"));
            if (pb != sbase || pc != scount) {
                t->uid_base = pb;
                t->uid_count = pc;
                given[i] = true;
            } else {
                n_auto++;
            }
        }
        (void)snprintf(t->net_mode, sizeof(t->net_mode), "%s",
                       json_string_value(get2(root, "network", "mode")) ? json_string_value(get2(root, "network", "mode"))
                                                                        : "none");
        t->lim_memory = limit_of(root, "memory", false);
        t->lim_cpu_time_ms = limit_of(root, "cpu_time", true);
        t->lim_output = limit_of(root, "output", false);
        json_decref(root);
    }

    if (auto_ranges(cfg, given, sbase, scount, n_auto) < 0) {
        for (size_t i = 0; i < cfg->n_tenants; i++)
            if (!given[i]) {
                (void)snprintf(k, sizeof(k), "tenants.%s", cfg->tenants[i].name);
                break;
            }
        (void)snprintf(m, sizeof(m), "no host uids are left for its automatic range: the tenants given ranges take "
                       "the server policy's identity.uid_range (%u..%llu); give it uid_base and uid_count", sbase,
                       (unsigned long long)sbase + scount - 1);
        fail(key, key_size, msg, msg_size, k, m);
        goto out;
    }

    for (size_t i = 0; i < cfg->n_tenants; i++) {
        struct srv_tenant *t = &cfg->tenants[i];
        char range[48], *loose;
        bool oom = false;

        (void)snprintf(k, sizeof(k), "tenants.%s%s", t->name, t->set_uid ? ".uid_count" : "");
        /* A proxy-mode run (live or parked) leases two: its own and its
         * egress proxy's (docs/network.md). */
        unsigned per_run = strcmp(t->net_mode, "proxy") == 0 ? 2 : 1;
        /* An interpreter pool's template lives in a sandbox of its own
         * (docs/interpreters.md, Templates): one more. */
        unsigned tmpl = t->interp_pool ? 1 : 0;
        if (t->uid_count < per_run * (t->max_runs + t->pool_size + t->interp_pool + tmpl)) {
            (void)snprintf(m, sizeof(m),
                           "its uid range has %u uids, fewer than %s (%u)%s; give it more (uid_base, uid_count), or leave more of the server policy's range to "
                           "the automatic ones",
                           t->uid_count,
                           per_run == 2 ? "2 x (max_runs + pool_size + its interpreters' pool and their template)"
                                        : "max_runs + pool_size + its interpreters' pool and their template",
                           per_run * (t->max_runs + t->pool_size + t->interp_pool + tmpl),
                           per_run == 2 ? ": each proxy-mode run also leases one for its egress proxy" : "");
            fail(key, key_size, msg, msg_size, k, m);
            goto out;
        }
        (void)snprintf(range, sizeof(range), "%u:%u", t->uid_base, t->uid_count);
        if (aj_policy_set(t->pol, "--uid-range", range, &err) < 0) {
            fail(key, key_size, msg, msg_size, k, err.msg);
            goto out;
        }
        (void)snprintf(k, sizeof(k), "tenants.%s%s", t->name,
                       t->policy_path ? ".policy" : t->profile ? ".profile" : "");
        if (aj_policy_validate(t->pol, &err) < 0) {
            fail(key, key_size, msg, msg_size, k, err.msg);
            goto out;
        }
        loose = looser_lines(base, t->pol, &oom);
        if (loose || oom) {
            (void)snprintf(m, sizeof(m), "%s%s%s",
                           oom ? "out of memory" : "looser than the server's policy (a tenant may only tighten "
                                                   "it): ",
                           loose ? loose : "", "");
            free(loose);
            fail(key, key_size, msg, msg_size, k, m);
            goto out;
        }
        if (aj_policy_sha256(t->pol, t->policy_sha256, &err) < 0) {
            fail(key, key_size, msg, msg_size, k, err.msg);
            goto out;
        }
        /* A request's "network": "none" on a tenant with a network: the
         * same policy with none, run cold (no pool is kept for it). */
        if (strcmp(t->net_mode, "none") != 0) {
            /* Its whole network group and its secrets go: in a proxy-mode
             * policy the allow-list, caps and brokered secrets mean
             * nothing (and are refused) with no network. */
            char *canon = aj_policy_to_json(t->pol, true), *nonet = NULL;
            json_t *doc = canon ? json_loads(canon, 0, NULL) : NULL;
            if (doc) {
                (void)json_object_del(doc, "secrets");
                (void)json_object_set_new(doc, "network", json_pack("{s:s}", "mode", "none"));
                nonet = json_dumps(doc, JSON_COMPACT);
                json_decref(doc);
            }
            t->pol_nonet = aj_policy_new();
            if (!nonet || !t->pol_nonet ||
                aj_policy_load_buffer(t->pol_nonet, nonet, strlen(nonet), "tenant policy", &err) < 0 ||
                aj_policy_validate(t->pol_nonet, &err) < 0) {
                free(canon);
                free(nonet);
                fail(key, key_size, msg, msg_size, k, err.msg[0] ? err.msg : "out of memory");
                goto out;
            }
            free(canon);
            free(nonet);
        }
        /* Its warm interpreters: the same policy, with the interpreter's
         * keys (docs/interpreters.md). */
        {
            const struct srv_interp *in = t->interp.set ? &t->interp : &cfg->interp;
            if (in->python) {
                char *canon = aj_policy_to_json(t->pol, true);
                (void)snprintf(k, sizeof(k), "%s%s", t->interp.set ? "tenants." : "interpreters",
                               t->interp.set ? t->name : "");
                if (t->interp.set)
                    (void)snprintf(k + strlen(k), sizeof(k) - strlen(k), ".interpreters");
                t->pol_interp = aj_policy_new();
                err = (struct aj_error){0};
                if (!canon || !t->pol_interp ||
                    aj_policy_load_buffer(t->pol_interp, canon, strlen(canon), "tenant policy", &err) < 0 ||
                    aj_policy_set(t->pol_interp, "interpreter.language", "python", &err) < 0) {
                    free(canon);
                    fail(key, key_size, msg, msg_size, k, err.msg[0] ? err.msg : "out of memory");
                    goto out;
                }
                free(canon);
                for (size_t j = 0; j < in->n_preload; j++)
                    if (aj_policy_set(t->pol_interp, "interpreter.preload", in->preload[j], &err) < 0) {
                        (void)snprintf(k + strlen(k), sizeof(k) - strlen(k), "[0].preload[%zu]", j);
                        fail(key, key_size, msg, msg_size, k, err.msg);
                        goto out;
                    }
                /* The entry's warm-up replaces the tenant policy's own. */
                if (in->warmup && aj_policy_set(t->pol_interp, "interpreter.warmup", in->warmup, &err) < 0) {
                    (void)snprintf(k + strlen(k), sizeof(k) - strlen(k), "[0].warmup");
                    fail(key, key_size, msg, msg_size, k, err.msg);
                    goto out;
                }
                if (aj_policy_validate(t->pol_interp, &err) < 0) {
                    if (in->warmup && strstr(err.msg, "interpreter.warmup"))
                        (void)snprintf(k + strlen(k), sizeof(k) - strlen(k), "[0].warmup");
                    fail(key, key_size, msg, msg_size, k, err.msg);
                    goto out;
                }
            }
        }
    }

    /* No uid of one tenant is another's: a run of A would own B's files
     * (and its workspaces) on the host. */
    for (size_t i = 0; i < cfg->n_tenants; i++)
        for (size_t j = 0; j < cfg->n_tenants; j++) {
            struct srv_tenant *a = &cfg->tenants[i], *b = &cfg->tenants[j];
            if (i == j || !overlap(a->uid_base, a->uid_count, b->uid_base, b->uid_count))
                continue;
            /* Name the one set by hand (automatic ranges overlap nothing). */
            if (!a->set_uid && b->set_uid)
                continue;
            (void)snprintf(k, sizeof(k), "tenants.%s%s", a->name, a->set_uid ? ".uid_base" : "");
            (void)snprintf(m, sizeof(m), "its host uid range %u..%u overlaps tenant %s's (%u..%u%s)", a->uid_base,
                           a->uid_base + a->uid_count - 1, b->name, b->uid_base, b->uid_base + b->uid_count - 1,
                           b->set_uid ? "" : ", from its policy's identity.uid_range");
            fail(key, key_size, msg, msg_size, k, m);
            goto out;
        }
    /* Nor a workspace owner's (sessions.workspace_uids): a run would own
     * every workspace on the host. */
    for (size_t i = 0; i < cfg->n_tenants; i++) {
        struct srv_tenant *a = &cfg->tenants[i];
        if (!overlap(a->uid_base, a->uid_count, cfg->ws_uid_base, cfg->ws_uid_count))
            continue;
        (void)snprintf(k, sizeof(k), "tenants.%s%s", a->name, a->set_uid ? ".uid_base" : "");
        (void)snprintf(m, sizeof(m), "its host uid range %u..%u overlaps the workspace owners' (%u..%u, "
                       "sessions.workspace_uids)", a->uid_base, a->uid_base + a->uid_count - 1, cfg->ws_uid_base,
                       cfg->ws_uid_base + cfg->ws_uid_count - 1);
        fail(key, key_size, msg, msg_size, k, m);
        goto out;
    }
    r = 0;
out:
    free(given);
    json_decref(broot);
    aj_policy_free(base);
    return r;
}

void srv_tenants_clear(struct srv_config *cfg)
{
    for (size_t i = 0; cfg->tenants && i < cfg->n_tenants; i++) {
        aj_policy_free(cfg->tenants[i].pol);
        aj_policy_free(cfg->tenants[i].pol_nonet);
        aj_policy_free(cfg->tenants[i].pol_interp);
        cfg->tenants[i].pol = cfg->tenants[i].pol_nonet = cfg->tenants[i].pol_interp = NULL;
    }
}

void srv_tenant_sessions_add(struct srv_tenant *t, int delta)
{
    __atomic_add_fetch(&t->sessions_live, delta, __ATOMIC_SEQ_CST);
}

int srv_tenant_sessions_live(const struct srv_tenant *t)
{
    return __atomic_load_n(&t->sessions_live, __ATOMIC_SEQ_CST);
}

/* ---- a request's "limits" and "network" ------------------------------------------------------ */

/* A number of units (seconds, bytes) or a text the policy's parser takes
 * ("512M", "10s", "500ms"): 0 and *ret (ms or bytes), or -1. */
static int request_value(json_t *v, bool duration, uint64_t *ret)
{
    if (json_is_number(v)) {
        double x = json_number_value(v) * (duration ? 1000.0 : 1.0);
        if (!(x > 0) || x > 1e18)
            return -1;
        *ret = (uint64_t)x ? (uint64_t)x : 1;
        return 0;
    }
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return -1;
    if ((duration ? aj_parse_duration_ms(json_string_value(v), ret) : aj_parse_size(json_string_value(v), ret)) < 0)
        return -1;
    return *ret ? 0 : -1;
}

const char *srv_tenant_request_limits(const struct srv_tenant *t, json_t *limits, struct srv_run *r, char *msg,
                                      size_t msg_size)
{
    static const struct {
        const char *name;
        bool duration;
        const char *unit;
    } known[] = {{"timeout", true, "s"}, {"memory", false, " bytes"}, {"cpu_time", true, "s"}, {"output", false, " bytes"}};
    const char *key;
    json_t *v;

    if (!json_is_object(limits))
        return "limits: must be an object {timeout, memory, cpu_time, output}";
    json_object_foreach(limits, key, v) {
        size_t i;
        uint64_t val = 0, bound;
        for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (strcmp(key, known[i].name) == 0)
                break;
        if (i == sizeof(known) / sizeof(known[0])) {
            (void)snprintf(msg, msg_size, "limits.%.64s: unknown limit (known: timeout, memory, cpu_time, output)", key);
            return msg;
        }
        if (request_value(v, known[i].duration, &val) < 0) {
            (void)snprintf(msg, msg_size, "limits.%s: must be a positive number (%s) or a text such as %s", key,
                           known[i].duration ? "seconds" : "bytes", known[i].duration ? "\"10s\"" : "\"512M\"");
            return msg;
        }
        bound = i == 0 ? t->max_timeout_ms : i == 1 ? t->lim_memory : i == 2 ? t->lim_cpu_time_ms : t->lim_output;
        if (bound && val > bound) {
            double shown = known[i].duration ? (double)bound / 1000.0 : (double)bound;
            (void)snprintf(msg, msg_size, "limits.%s: more than the tenant's policy allows (%.15g%s); a request may "
                           "only tighten it", key, shown, known[i].unit);
            return msg;
        }
        switch (i) {
        case 0:
            r->timeout_ms = val;
            break;
        case 1:
            r->memory_max = val;
            break;
        case 2:
            r->cpu_time_ms = val;
            break;
        default:
            r->output_limit = val;
            break;
        }
    }
    return NULL;
}

const char *srv_tenant_request_network(const struct srv_tenant *t, json_t *net, struct srv_run *r, char *msg,
                                       size_t msg_size)
{
    const char *want = json_string_value(net);

    if (!want || (strcmp(want, "none") != 0 && strcmp(want, "loopback") != 0))
        return "network: must be \"none\" or \"loopback\"";
    if (strcmp(want, t->net_mode) == 0)
        return NULL; /* the tenant's own: its warm pool */
    if (strcmp(want, "none") == 0) {
        r->pol = t->pol_nonet; /* tighter: the variant, cold */
        return NULL;
    }
    if (strcmp(t->net_mode, "none") == 0)
        (void)snprintf(msg, msg_size, "network: \"%s\" is looser than the tenant's policy (\"%s\"); a request may "
                       "only tighten it", want, t->net_mode);
    else /* a mode of its own (egress): only "none" is made as a variant */
        (void)snprintf(msg, msg_size, "network: \"%s\" is not offered to a tenant whose policy has \"%s\" (only "
                       "\"none\" is)", want, t->net_mode);
    return msg;
}
