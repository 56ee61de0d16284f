/* SPDX-License-Identifier: Apache-2.0 */
/* Policy files: JSON in, with errors that point at FILE:LINE:COLUMN and the
 * key path. Walks the key table (keys.c) and sets each value through the
 * model (model.c), as a flag would; compound types (binds, tmpfs,
 * environment, uid range, required limits) have their own code below.
 * Nothing in model.c calls back into this file. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_policy_model.h"
#include "aj_textpos.h"
#include "aj_util.h"

#define AJ_POLICY_VERSION 1
#define AJ_POLICY_MAX_BYTES (1 << 20)

/* ---- loading ------------------------------------------------------------------------- */

struct loader {
    size_t bind_base;   /* binds the policy had before this file (a profile's) */
    const char *name;
    struct pos_index idx;
    struct aj_policy *pol;
    struct aj_error *err;
    size_t *bind_keys;  /* pol bind index -> file bind index */
    size_t n_bind_keys;
};

static int fail_at(struct loader *L, const char *path, bool at_value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(struct loader *L, const char *path, bool at_value, const char *fmt, ...)
{
    const struct pos_entry *e = pos_find(&L->idx, path);
    char msg[400];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (e)
        return aj_err(L->err, 0, "%s:%d:%d: %s: %s", L->name, at_value ? e->vline : e->line,
                      at_value ? e->vcol : e->col, path, msg);
    return aj_err(L->err, 0, "%s: %s: %s", L->name, path, msg);
}

/* A setter failed, its message maybe flag-shaped ("--memory: ..."): keep
 * the explanation, put the file position and key in front. */
static int setter_failed(struct loader *L, const char *path, int r)
{
    char msg[sizeof(L->err->msg)];
    const char *p = L->err->msg;

    if (r == -ENOMEM)
        return r;
    if (p[0] == '-' && p[1] == '-' && strstr(p, ": "))
        p = strstr(p, ": ") + 2;
    (void)snprintf(msg, sizeof(msg), "%s", p);
    return fail_at(L, path, true, "%s", msg);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* Every key of obj must be one of allowed (n names, from next()). */
struct allowed {
    const char *group;                     /* the table's keys of this group, or */
    const struct aj_policy_subkey *sub;    /* a compound key's members, or */
    bool top;                              /* "version" and the groups */
};

static const char *allowed_at(const struct allowed *a, size_t *cursor)
{
    if (a->top) {
        if (*cursor == 0)
            return (*cursor)++, "version";
        return *cursor <= aj_policy_n_groups ? aj_policy_groups[(*cursor)++ - 1].name : NULL;
    }
    if (a->sub)
        return a->sub[*cursor].name ? a->sub[(*cursor)++].name : NULL;
    while (*cursor < aj_policy_n_keys) {
        const struct aj_policy_key *k = &aj_policy_keys[(*cursor)++];
        if (aj_policy_key_in_group(k, a->group))
            return aj_policy_key_name(k);
    }
    return NULL;
}

static int check_keys(struct loader *L, const char *path, const json_t *obj, const struct allowed *a)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)obj, key, v) {
        bool ok = false;
        char accepted[256] = "";
        size_t cursor = 0;
        const char *name;
        while ((name = allowed_at(a, &cursor))) {
            ok |= strcmp(key, name) == 0;
            if (strlen(accepted) + strlen(name) + 3 < sizeof(accepted)) {
                if (accepted[0])
                    strcat(accepted, ", ");
                strcat(accepted, name);
            }
        }
        if (!ok) {
            char kp[512];
            (void)snprintf(kp, sizeof(kp), "%s%s%s", path, path[0] ? "." : "", key);
            return fail_at(L, kp, false, "unknown key '%s'; accepted here: %s", key, accepted);
        }
    }
    return 0;
}

static int want_type(struct loader *L, const char *path, const json_t *v, json_type t, const char *what)
{
    if (json_typeof(v) != t)
        return fail_at(L, path, true, "expected %s, got %s", what, type_name(v));
    return 0;
}

/* Sizes, durations and counts accept a number or a string ("512M", "10s").
 * Returns the text form in buf; *ret_null for null (no limit, where
 * allowed). */
static int scalar_text(struct loader *L, const char *path, const json_t *v, bool null_ok, const char *example,
                       char *buf, size_t size, bool *ret_null)
{
    *ret_null = json_is_null(v) && null_ok;
    if (*ret_null)
        return 0;
    if (json_is_string(v)) {
        (void)snprintf(buf, size, "%s", json_string_value(v));
        return 0;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        (void)snprintf(buf, size, "%lld", (long long)json_integer_value(v));
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 1e6) {
        (void)snprintf(buf, size, "%.3f", json_real_value(v));
        return 0;
    }
    return fail_at(L, path, true, "expected %s%s, got %s", example, null_ok ? " or null (no limit)" : "",
                   type_name(v));
}

static int load_u32(struct loader *L, const char *path, const json_t *v, uint32_t min, uint32_t max, uint32_t *slot)
{
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min || (uint64_t)json_integer_value(v) > max)
        return fail_at(L, path, true, "expected an integer within %u..%u, got %s", min, max,
                       json_is_integer(v) ? "a value out of range" : type_name(v));
    *slot = (uint32_t)json_integer_value(v);
    return 0;
}

/* "${NAME}" as a whole host path: taken from agentjail's environment, so a
 * profile can name the layout and leave the host side to the caller. */
static int expand_host(struct loader *L, const char *path, const char *in, const char **out, bool *unset)
{
    size_t n = strlen(in);
    *unset = false;
    if (n < 4 || in[0] != '$' || in[1] != '{' || in[n - 1] != '}') {
        *out = in;
        return 0;
    }
    {
        char name[128];
        if (n - 3 >= sizeof(name))
            return fail_at(L, path, true, "variable name too long");
        memcpy(name, in + 2, n - 3);
        name[n - 3] = '\0';
        *out = getenv(name);
        if (!*out || !**out) {
            *unset = true;
            *out = NULL;
        }
    }
    return 0;
}

static int load_binds(struct loader *L, const struct aj_policy_key *k, const json_t *arr)
{
    const struct allowed members = {.sub = k->sub};
    size_t i;
    json_t *b;
    int r = want_type(L, k->key, arr, JSON_ARRAY, "an array of {host, sandbox, mode}");

    if (r < 0)
        return r;
    json_array_foreach(arr, i, b) {
        char p[128], kp[160];
        json_t *host, *sandbox, *mode, *optional, *owner;
        const char *hostpath = NULL;
        bool rw = false, opt = false, unset;
        uint32_t ou = 0, og = 0;

        (void)snprintf(p, sizeof(p), "%s[%zu]", k->key, i);
        r = want_type(L, p, b, JSON_OBJECT, "an object {host, sandbox, mode}");
        if (r == 0)
            r = check_keys(L, p, b, &members);
        if (r < 0)
            return r;
        host = json_object_get(b, "host");
        sandbox = json_object_get(b, "sandbox");
        mode = json_object_get(b, "mode");
        optional = json_object_get(b, "optional");
        owner = json_object_get(b, "owner");
        if (!host)
            return fail_at(L, p, true, "missing 'host' (the absolute host path to bind)");
        (void)snprintf(kp, sizeof(kp), "%s.host", p);
        if ((r = want_type(L, kp, host, JSON_STRING, "an absolute path")) < 0)
            return r;
        if (sandbox) {
            (void)snprintf(kp, sizeof(kp), "%s.sandbox", p);
            if ((r = want_type(L, kp, sandbox, JSON_STRING, "an absolute path")) < 0)
                return r;
        }
        if (mode) {
            (void)snprintf(kp, sizeof(kp), "%s.mode", p);
            if (!json_is_string(mode) || (strcmp(json_string_value(mode), "ro") != 0 &&
                                          strcmp(json_string_value(mode), "rw") != 0))
                return fail_at(L, kp, true, "expected \"ro\" or \"rw\"");
            rw = strcmp(json_string_value(mode), "rw") == 0;
        }
        if (optional) {
            (void)snprintf(kp, sizeof(kp), "%s.optional", p);
            if (!json_is_boolean(optional))
                return fail_at(L, kp, true, "expected a boolean, got %s", type_name(optional));
            opt = json_is_true(optional);
        }
        if (owner) {
            (void)snprintf(kp, sizeof(kp), "%s.owner", p);
            if (!json_is_string(owner) || aj_parse_owner(json_string_value(owner), &ou, &og) < 0)
                return fail_at(L, kp, true, "expected \"UID:GID\" (decimal host ids, e.g. \"1000:1000\"): the "
                               "host owner of what the sandbox writes there");
            if (!rw)
                return fail_at(L, kp, true, "'owner' applies to writable binds only (\"mode\": \"rw\")");
        }
        (void)snprintf(kp, sizeof(kp), "%s.host", p);
        r = expand_host(L, kp, json_string_value(host), &hostpath, &unset);
        if (r < 0)
            return r;
        if (unset) {
            if (opt)
                continue;
            return fail_at(L, kp, true, "%s is not set in agentjail's environment (or mark the bind "
                           "\"optional\": true)", json_string_value(host));
        }
        if (opt && !aj_policy_host_paths_unseen && access(hostpath, F_OK) < 0)
            continue;
        {
            int bad_sandbox = 0;
            r = aj_policy_add_bind_paths_ex(L->pol, hostpath, sandbox ? json_string_value(sandbox) : NULL, rw,
                                            &bad_sandbox, L->err);
            if (r < 0) {
                if (bad_sandbox && sandbox)
                    (void)snprintf(kp, sizeof(kp), "%s.sandbox", p);
                return setter_failed(L, kp, r);
            }
            if (owner) {
                struct aj_bind *nb = &L->pol->binds[L->pol->n_binds - 1];
                nb->owner_set = true;
                nb->owner_uid = ou;
                nb->owner_gid = og;
            }
        }
        {
            size_t *nk = realloc(L->bind_keys, (L->n_bind_keys + 1) * sizeof(*nk));
            if (!nk)
                return aj_err(L->err, ENOMEM, "policy");
            L->bind_keys = nk;
            nk[L->n_bind_keys++] = i;
        }
    }
    return 0;
}

static int load_tmpfs(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    const struct allowed members = {.sub = k->sub};
    size_t i;
    json_t *t;
    int r = want_type(L, k->key, v, JSON_ARRAY, "an array of {path, size}");

    if (r < 0)
        return r;
    json_array_foreach(v, i, t) {
        char p[128], kp[160], spec[4200], size[64] = "";
        json_t *path, *sz;
        (void)snprintf(p, sizeof(p), "%s[%zu]", k->key, i);
        if ((r = want_type(L, p, t, JSON_OBJECT, "an object {path, size}")) < 0 ||
            (r = check_keys(L, p, t, &members)) < 0)
            return r;
        path = json_object_get(t, "path");
        sz = json_object_get(t, "size");
        if (!path || !json_is_string(path))
            return fail_at(L, p, true, "needs 'path', an absolute path inside the sandbox");
        if (sz) {
            bool null;
            (void)snprintf(kp, sizeof(kp), "%s.size", p);
            if ((r = scalar_text(L, kp, sz, false, "a size like \"64M\"", size, sizeof(size), &null)) < 0)
                return r;
        }
        (void)snprintf(spec, sizeof(spec), "%s%s%s", json_string_value(path), size[0] ? ":" : "", size);
        r = aj_policy_add_tmpfs(L->pol, spec, L->err);
        if (r < 0) {
            /* A size error names the size; anything else the path. */
            (void)snprintf(kp, sizeof(kp), "%s.%s", p, strstr(L->err->msg, "size") ? "size" : "path");
            return setter_failed(L, kp, r);
        }
    }
    return 0;
}

static int load_env(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    const char *name;
    json_t *val;
    int r = want_type(L, k->key, v, JSON_OBJECT, "an object of NAME: \"value\"");

    if (r < 0)
        return r;
    json_object_foreach((json_t *)v, name, val) {
        char kp[300];
        _cleanup_free_ char *kv = NULL;
        (void)snprintf(kp, sizeof(kp), "%s.%s", k->key, name);
        if ((r = want_type(L, kp, val, JSON_STRING, "a string")) < 0)
            return r;
        if (asprintf(&kv, "%s=%s", name, json_string_value(val)) < 0)
            return aj_err(L->err, ENOMEM, "policy");
        r = aj_policy_add_env(L->pol, kv, L->err);
        if (r < 0)
            return setter_failed(L, kp, r);
    }
    return 0;
}

static int load_names(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    size_t i;
    json_t *n;
    int r = want_type(L, k->key, v, JSON_ARRAY, "an array of variable names");

    if (r < 0)
        return r;
    json_array_foreach(v, i, n) {
        char kp[64];
        (void)snprintf(kp, sizeof(kp), "%s[%zu]", k->key, i);
        if ((r = want_type(L, kp, n, JSON_STRING, "a variable name")) < 0)
            return r;
        r = aj_policy_add_env_pass(L->pol, json_string_value(n), L->err);
        if (r < 0)
            return setter_failed(L, kp, r);
    }
    return 0;
}

static int load_modules(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    size_t i;
    json_t *n;
    int r = want_type(L, k->key, v, JSON_ARRAY, "an array of module names");

    if (r < 0)
        return r;
    json_array_foreach(v, i, n) {
        char kp[64];
        (void)snprintf(kp, sizeof(kp), "%s[%zu]", k->key, i);
        if ((r = want_type(L, kp, n, JSON_STRING, "a module name")) < 0)
            return r;
        r = aj_policy_add_preload(L->pol, json_string_value(n), L->err);
        if (r < 0)
            return setter_failed(L, kp, r);
    }
    return 0;
}

/* network.allow and the like: an array of strings, each checked by the
 * row's rule and located by its index. */
static int load_str_list(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    size_t i;
    json_t *n;
    int r = want_type(L, k->key, v, JSON_ARRAY, "an array of strings");

    if (r < 0)
        return r;
    json_array_foreach(v, i, n) {
        char kp[96];
        (void)snprintf(kp, sizeof(kp), "%s[%zu]", k->key, i);
        if ((r = want_type(L, kp, n, JSON_STRING, "a string")) < 0)
            return r;
        r = aj_policy_key_set_text(L->pol, k, json_string_value(n), NULL, false, L->err);
        if (r < 0)
            return setter_failed(L, kp, r);
    }
    return 0;
}

/* secrets: an array of {id, hosts, header, format, value_from, env, file}. */
static int load_secrets(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    const struct allowed members = {.sub = k->sub};
    size_t i;
    json_t *o;
    int r = want_type(L, k->key, v, JSON_ARRAY, "an array of secret objects");

    if (r < 0)
        return r;
    json_array_foreach(v, i, o) {
        static const char *const strs[] = {"id", "header", "format", "value_from", "env", "file"};
        char p[64], kp[96];
        const char *vals[AJ_ARRAY_SIZE(strs)] = {0}, *member = NULL;
        char *hosts[32] = {0};
        struct aj_secret s = {0};
        json_t *h, *e;
        size_t j;

        (void)snprintf(p, sizeof(p), "%s[%zu]", k->key, i);
        if ((r = want_type(L, p, o, JSON_OBJECT, "a secret object {id, hosts, value_from, env}")) < 0 ||
            (r = check_keys(L, p, o, &members)) < 0)
            return r;
        for (j = 0; j < AJ_ARRAY_SIZE(strs); j++) {
            json_t *m = json_object_get(o, strs[j]);
            if (!m || json_is_null(m)) /* the canonical form writes an unset member as null */
                continue;
            (void)snprintf(kp, sizeof(kp), "%s.%s", p, strs[j]);
            if ((r = want_type(L, kp, m, JSON_STRING, "a string")) < 0)
                return r;
            vals[j] = json_string_value(m);
        }
        (void)snprintf(kp, sizeof(kp), "%s.hosts", p);
        h = json_object_get(o, "hosts");
        if (!h)
            return fail_at(L, p, true, "needs 'hosts', the hosts whose requests get the real value");
        if ((r = want_type(L, kp, h, JSON_ARRAY, "an array of host names")) < 0)
            return r;
        if (json_array_size(h) > AJ_ARRAY_SIZE(hosts))
            return fail_at(L, kp, true, "at most %zu hosts", AJ_ARRAY_SIZE(hosts));
        json_array_foreach(h, j, e) {
            char hp[128];
            (void)snprintf(hp, sizeof(hp), "%s[%zu]", kp, j);
            if ((r = want_type(L, hp, e, JSON_STRING, "a host name")) < 0)
                return r;
            hosts[j] = (char *)(uintptr_t)json_string_value(e);
        }
        s = (struct aj_secret){.id = (char *)(uintptr_t)vals[0], .hosts = hosts, .n_hosts = json_array_size(h),
                               .header = (char *)(uintptr_t)vals[1], .format = (char *)(uintptr_t)vals[2],
                               .value_from = (char *)(uintptr_t)vals[3], .env = (char *)(uintptr_t)vals[4],
                               .file = (char *)(uintptr_t)vals[5]};
        if (!s.id)
            return fail_at(L, p, true, "needs 'id', the name events give the secret");
        if (!s.value_from)
            return fail_at(L, p, true, "needs 'value_from': \"env:NAME\" or \"file:/PATH\" on the host");
        r = aj_policy_check_secret(&s, &member, L->err);
        if (r < 0) {
            (void)snprintf(kp, sizeof(kp), "%s.%s", p, member);
            return setter_failed(L, kp, r);
        }
        r = aj_policy_push_secret(L->pol, &s, L->err);
        if (r < 0) {
            (void)snprintf(kp, sizeof(kp), "%s.id", p);
            return setter_failed(L, kp, r);
        }
    }
    return 0;
}

static int load_id_range(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    const struct allowed members = {.sub = k->sub};
    uint32_t base = 0, count = 0;
    char spec[64], kb[64], kc[64];
    json_t *b, *c;
    int r;

    if ((r = want_type(L, k->key, v, JSON_OBJECT, "an object {base, count}")) < 0 ||
        (r = check_keys(L, k->key, v, &members)) < 0)
        return r;
    b = json_object_get(v, "base");
    c = json_object_get(v, "count");
    if (!b || !c)
        return fail_at(L, k->key, true, "needs both 'base' and 'count'");
    (void)snprintf(kb, sizeof(kb), "%s.base", k->key);
    (void)snprintf(kc, sizeof(kc), "%s.count", k->key);
    if ((r = load_u32(L, kb, b, 0, 0xfffffffeU, &base)) < 0 || (r = load_u32(L, kc, c, 0, 0xfffffffeU, &count)) < 0)
        return r;
    (void)snprintf(spec, sizeof(spec), "%u:%u", base, count);
    r = aj_policy_key_set_text(L->pol, k, spec, NULL, false, L->err);
    return r < 0 ? setter_failed(L, k->key, r) : 0;
}

/* require_cgroup: a list of limit names, or true (every limit), or false
 * (none). It replaces what the limits named above it required. */
static int load_limit_set(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    uint32_t bits = 0;

    if (json_is_boolean(v)) {
        for (size_t i = 0; json_is_true(v) && i < AJ_ARRAY_SIZE(aj_limit_names); i++)
            bits |= aj_limit_names[i].bit;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            char kp[64];
            bool found = false;
            (void)snprintf(kp, sizeof(kp), "%s[%zu]", k->key, i);
            for (size_t n = 0; json_is_string(e) && n < AJ_ARRAY_SIZE(aj_limit_names); n++)
                if (strcmp(json_string_value(e), aj_limit_names[n].name) == 0) {
                    bits |= aj_limit_names[n].bit;
                    found = true;
                }
            if (!found)
                return fail_at(L, kp, true, "expected one of \"memory\", \"pids\", \"cpus\", \"cpu_time\"");
        }
    } else {
        return fail_at(L, k->key, true, "expected a list of limit names (or true/false), got %s", type_name(v));
    }
    aj_policy_key_put(L->pol, k, bits);
    return 0;
}

/* "\"none\" or \"loopback\"": what an enum key accepts. */
static void enum_example(const struct aj_policy_key *k, char *buf, size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    for (size_t i = 0; k->names[i]; i++)
        n += (size_t)snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, "%s\"%s\"",
                              i == 0 ? "" : k->names[i + 1] ? ", " : " or ", k->names[i]);
}

static int load_key(struct loader *L, const struct aj_policy_key *k, const json_t *v)
{
    char buf[64];
    bool null;
    int r;

    switch (k->type) {
    case AJ_KEY_BOOL:
        if (!json_is_boolean(v))
            return fail_at(L, k->key, true, "expected a boolean, got %s", type_name(v));
        aj_policy_key_put(L->pol, k, json_is_true(v));
        return 0;
    case AJ_KEY_ID: {
        uint32_t id = 0;
        if ((r = load_u32(L, k->key, v, (uint32_t)k->min, (uint32_t)k->max, &id)) < 0)
            return r;
        aj_policy_key_put(L->pol, k, id);
        return 0;
    }
    case AJ_KEY_COUNT:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
        r = scalar_text(L, k->key, v, k->zero == AJ_ZERO_NONE, k->example, buf, sizeof(buf), &null);
        if (r < 0)
            return r;
        r = aj_policy_key_set_text(L->pol, k, null ? NULL : buf, NULL, false, L->err);
        return r < 0 ? setter_failed(L, k->key, r) : 0;
    case AJ_KEY_ENUM:
        enum_example(k, buf, sizeof(buf));
        if ((r = want_type(L, k->key, v, JSON_STRING, buf)) < 0)
            return r;
        r = aj_policy_key_set_text(L->pol, k, json_string_value(v), NULL, false, L->err);
        return r < 0 ? setter_failed(L, k->key, r) : 0;
    case AJ_KEY_STRING:
        if (json_is_null(v) && k->zero == AJ_ZERO_NONE)
            return aj_policy_key_set_text(L->pol, k, NULL, NULL, false, L->err);
        if ((r = want_type(L, k->key, v, JSON_STRING, "a string")) < 0)
            return r;
        r = aj_policy_key_set_text(L->pol, k, json_string_value(v), NULL, false, L->err);
        return r < 0 ? setter_failed(L, k->key, r) : 0;
    case AJ_KEY_CONST:
        if (!json_is_string(v) || strcmp(json_string_value(v), k->def_str) != 0)
            return fail_at(L, k->key, true, "%s", k->bad);
        return 0;
    case AJ_KEY_BIND_LIST:
        return load_binds(L, k, v);
    case AJ_KEY_TMPFS_LIST:
        return load_tmpfs(L, k, v);
    case AJ_KEY_ENV_MAP:
        return load_env(L, k, v);
    case AJ_KEY_NAME_LIST:
        return load_names(L, k, v);
    case AJ_KEY_MODULE_LIST:
        return load_modules(L, k, v);
    case AJ_KEY_ID_RANGE:
        return load_id_range(L, k, v);
    case AJ_KEY_LIMIT_SET:
        return load_limit_set(L, k, v);
    case AJ_KEY_STR_LIST:
        return load_str_list(L, k, v);
    case AJ_KEY_SECRET_LIST:
        return load_secrets(L, k, v);
    }
    return -EINVAL;
}

static int load_group(struct loader *L, const char *group, const json_t *obj)
{
    const struct allowed keys = {.group = group};
    int r = want_type(L, group, obj, JSON_OBJECT, "an object");

    if (r == 0)
        r = check_keys(L, group, obj, &keys);
    /* Two passes: require_cgroup (a limit set) overrides what the limits
     * before it required, wherever it stands in the file. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; r == 0 && i < aj_policy_n_keys; i++) {
            const struct aj_policy_key *k = &aj_policy_keys[i];
            const json_t *v;
            if ((k->type == AJ_KEY_LIMIT_SET) != (pass == 1) || !aj_policy_key_in_group(k, group) ||
                !(v = json_object_get(obj, aj_policy_key_name(k))))
                continue;
            r = load_key(L, k, v);
        }
    return r;
}

static int load_root(struct loader *L, const json_t *root)
{
    const struct allowed top = {.top = true};
    json_t *v;
    int r = want_type(L, "(top level)", root, JSON_OBJECT, "an object");

    if (r == 0)
        r = check_keys(L, "", root, &top);
    if (r < 0)
        return r;
    v = json_object_get(root, "version");
    if (!v)
        return fail_at(L, "version", false, "missing \"version\": 1 at the top level");
    if (!json_is_integer(v) || json_integer_value(v) != AJ_POLICY_VERSION)
        return fail_at(L, "version", true, "only version 1 is understood");
    for (size_t g = 0; g < aj_policy_n_groups; g++) {
        const struct aj_policy_group *grp = &aj_policy_groups[g];
        if (!(v = json_object_get(root, grp->name)))
            continue;
        if (grp->whole)
            r = load_key(L, aj_policy_key_find(grp->name), v);
        else
            r = load_group(L, grp->name, v);
        if (r < 0)
            return r;
    }
    return 0;
}

int aj_policy_load_buffer(struct aj_policy *pol, const char *buf, size_t len, const char *name,
                          struct aj_error *err)
{
    struct loader L = {.name = name ? name : "policy", .pol = pol, .err = err, .bind_base = pol->n_binds};
    json_error_t jerr;
    json_t *root;
    char key[160];
    int r;

    if (len > AJ_POLICY_MAX_BYTES)
        return aj_err(err, 0, "%s: larger than %d bytes", L.name, AJ_POLICY_MAX_BYTES);
    /* JSON text has no NUL bytes; jansson lets one through after a number. */
    {
        const char *nul = memchr(buf, '\0', len);
        if (nul) {
            int line = 1, col = 1;
            for (const char *p = buf; p < nul; p++) {
                if (*p == '\n') {
                    line++;
                    col = 1;
                } else if (((unsigned char)*p & 0xc0) != 0x80) {
                    col++;
                }
            }
            return aj_err(err, 0, "%s:%d:%d: a NUL byte; a policy is JSON text", L.name, line, col);
        }
    }
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return aj_err(err, 0, "%s:%d:%d: %s", L.name, jerr.line, jerr.column, jerr.text);
    r = pos_index_build(buf, len, &L.idx);
    if (r < 0) {
        json_decref(root);
        pos_index_clear(&L.idx);
        return r == -ENOMEM ? aj_err(err, ENOMEM, "policy") : aj_err(err, 0, "%s: nested too deeply", L.name);
    }
    r = load_root(&L, root);
    if (r == 0) {
        r = aj_policy_validate_at(pol, key, sizeof(key), err);
        if (r < 0) {
            /* Name the key as it is in the file (optional binds may have
             * been skipped, so indices can differ). */
            static const char binds[] = "filesystem.binds[";
            char *end = NULL;
            unsigned long long bi = 0;
            /* Our own key text, still parsed strictly (STYLE.md §3: no sscanf). */
            if (strncmp(key, binds, sizeof(binds) - 1) == 0 && key[sizeof(binds) - 1] >= '0' &&
                key[sizeof(binds) - 1] <= '9') {
                errno = 0;
                bi = strtoull(key + sizeof(binds) - 1, &end, 10);
                if (errno || *end != ']')
                    end = NULL;
            }
            if (end) {
                const char *rest = end + 1;
                char fixed[160];
                if (bi >= L.bind_base && bi - L.bind_base < L.n_bind_keys)
                    (void)snprintf(fixed, sizeof(fixed), "filesystem.binds[%zu]%s", L.bind_keys[bi - L.bind_base],
                                   rest);
                else /* a bind from an earlier source (a profile) */
                    (void)snprintf(fixed, sizeof(fixed), "filesystem.binds");
                (void)snprintf(key, sizeof(key), "%s", fixed);
            }
            r = setter_failed(&L, key[0] ? key : "(policy)", r);
        }
    }
    json_decref(root);
    pos_index_clear(&L.idx);
    free(L.bind_keys);
    return r;
}

int aj_policy_load_file(struct aj_policy *pol, const char *path, struct aj_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    _cleanup_free_ char *buf = NULL;
    struct stat st;
    size_t off = 0;

    if (fd < 0)
        return aj_err(err, errno, "policy file %s", path);
    if (fstat(fd, &st) < 0)
        return aj_err(err, errno, "policy file %s", path);
    if (!S_ISREG(st.st_mode))
        return aj_err(err, 0, "policy file %s: not a regular file", path);
    if (st.st_size > AJ_POLICY_MAX_BYTES)
        return aj_err(err, 0, "policy file %s: larger than %d bytes", path, AJ_POLICY_MAX_BYTES);
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return aj_err(err, ENOMEM, "policy file %s", path);
    while (off < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return aj_err(err, errno, "read policy file %s", path);
        if (n == 0)
            break;
        off += (size_t)n;
    }
    return aj_policy_load_buffer(pol, buf, off, path, err);
}
