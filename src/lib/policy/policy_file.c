/* SPDX-License-Identifier: Apache-2.0 */
/* Policy files: the normalised policy as JSON, loading it back with errors
 * that point at FILE:LINE:COLUMN and the key path, built-in profiles, and
 * the reviewer's diff.
 *
 * jansson parses and validates the syntax; it keeps no positions for
 * values, so a small scanner indexes where each key path starts in the
 * (already validated) text, for the error messages only. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_policy.h"
#include "aj_util.h"

#define AJ_POLICY_VERSION 1
#define AJ_POLICY_MAX_BYTES (1 << 20)

/* ---- normalised values as text --------------------------------------------- */

static void fmt_size(char *buf, size_t size, uint64_t v)
{
    static const char units[] = "KMGT";
    int u = -1;

    while (v != 0 && u < 3 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, size, "%llu", (unsigned long long)v);
    else
        snprintf(buf, size, "%llu%c", (unsigned long long)v, units[u]);
}

static void fmt_duration(char *buf, size_t size, uint64_t ms)
{
    if (ms % 3600000 == 0 && ms)
        snprintf(buf, size, "%lluh", (unsigned long long)(ms / 3600000));
    else if (ms % 60000 == 0 && ms)
        snprintf(buf, size, "%llum", (unsigned long long)(ms / 60000));
    else if (ms % 1000 == 0)
        snprintf(buf, size, "%llus", (unsigned long long)(ms / 1000));
    else
        snprintf(buf, size, "%llums", (unsigned long long)ms);
}

static void fmt_cpus(char *buf, size_t size, uint32_t milli)
{
    if (milli % 1000 == 0)
        snprintf(buf, size, "%u", milli / 1000);
    else if (milli % 100 == 0)
        snprintf(buf, size, "%u.%u", milli / 1000, (milli % 1000) / 100);
    else if (milli % 10 == 0)
        snprintf(buf, size, "%u.%02u", milli / 1000, (milli % 1000) / 10);
    else
        snprintf(buf, size, "%u.%03u", milli / 1000, milli % 1000);
}

static json_t *size_or_null(uint64_t v)
{
    char buf[32];
    if (!v)
        return json_null();
    fmt_size(buf, sizeof(buf), v);
    return json_string(buf);
}

static json_t *duration_or_null(uint64_t ms)
{
    char buf[32];
    if (!ms)
        return json_null();
    fmt_duration(buf, sizeof(buf), ms);
    return json_string(buf);
}

/* Cgroup limits by policy key, in a fixed order. */
static const struct {
    const char *key;
    uint32_t bit;
} limit_names[] = {
    {"memory", AJ_LIMIT_MEMORY},
    {"pids", AJ_LIMIT_PIDS},
    {"cpus", AJ_LIMIT_CPUS},
    {"cpu_time", AJ_LIMIT_CPU_TIME},
};

/* ---- the policy as JSON ---------------------------------------------------- */

char *aj_policy_to_json(const struct aj_policy *pol, bool compact)
{
    json_t *root = NULL, *binds, *tmpfs, *envset, *pass, *limits;
    char buf[32], tmp[32];
    char *out = NULL;
    bool ok = true;

    binds = json_array();
    tmpfs = json_array();
    envset = json_object();
    pass = json_array();
    if (!binds || !tmpfs || !envset || !pass)
        goto fail;
    for (size_t i = 0; i < pol->n_binds; i++) {
        json_t *b = json_pack("{s:s, s:s, s:s}", "host", pol->binds[i].host, "sandbox", pol->binds[i].sandbox,
                              "mode", pol->binds[i].rw ? "rw" : "ro");
        if (b && pol->binds[i].owner_set) {
            snprintf(buf, sizeof(buf), "%u:%u", pol->binds[i].owner_uid, pol->binds[i].owner_gid);
            ok &= json_object_set_new(b, "owner", json_string(buf)) == 0;
        }
        ok &= json_array_append_new(binds, b) == 0;
    }
    for (size_t i = 0; i < pol->n_tmpfs; i++) {
        fmt_size(buf, sizeof(buf), pol->tmpfs[i].size);
        ok &= json_array_append_new(tmpfs, json_pack("{s:s, s:s}", "path", pol->tmpfs[i].path, "size", buf)) == 0;
    }
    /* Later entries override earlier ones: the effective map is what counts. */
    for (size_t i = 0; i < pol->n_env; i++) {
        const char *eq = strchr(pol->env[i], '=');
        char *name = strndup(pol->env[i], (size_t)(eq - pol->env[i]));
        if (!name)
            goto fail;
        ok &= json_object_set_new(envset, name, json_string(eq + 1)) == 0;
        free(name);
    }
    for (size_t i = 0; i < pol->n_env_pass; i++)
        ok &= json_array_append_new(pass, json_string(pol->env_pass[i])) == 0;
    if (!ok)
        goto fail;

    limits = json_object();
    if (!limits)
        goto fail;
    fmt_size(buf, sizeof(buf), pol->rlimit_fsize);
    ok &= json_object_set_new(limits, "timeout", duration_or_null(pol->timeout_ms)) == 0;
    ok &= json_object_set_new(limits, "memory", size_or_null(pol->memory_max)) == 0;
    ok &= json_object_set_new(limits, "pids", pol->pids_max ? json_integer((json_int_t)pol->pids_max)
                                                            : json_null()) == 0;
    fmt_cpus(tmp, sizeof(tmp), pol->cpu_milli);
    ok &= json_object_set_new(limits, "cpus", pol->cpu_milli ? json_string(tmp) : json_null()) == 0;
    ok &= json_object_set_new(limits, "cpu_time", duration_or_null(pol->cpu_time_ms)) == 0;
    ok &= json_object_set_new(limits, "output", size_or_null(pol->output_limit)) == 0;
    ok &= json_object_set_new(limits, "file_size", json_string(buf)) == 0;
    ok &= json_object_set_new(limits, "open_files", json_integer((json_int_t)pol->rlimit_nofile)) == 0;
    {
        json_t *req = json_array();
        for (size_t i = 0; req && i < AJ_ARRAY_SIZE(limit_names); i++)
            if (pol->required_limits & limit_names[i].bit)
                (void)json_array_append_new(req, json_string(limit_names[i].key));
        ok &= req && json_object_set_new(limits, "require_cgroup", req) == 0;
    }
    if (!ok) {
        json_decref(limits);
        goto fail;
    }
    if (pol->tmp_size == AJ_TMP_SIZE_AUTO)
        snprintf(buf, sizeof(buf), "auto");
    else
        fmt_size(buf, sizeof(buf), pol->tmp_size);
    fmt_duration(tmp, sizeof(tmp), pol->alert_timeout_ms);
    root = json_pack("{s:i, s:{s:o, s:o, s:s, s:s, s:b, s:b}, s:{s:o, s:o}, s:{s:s}, s:o, "
                     "s:{s:I, s:I, s:s, s:{s:I, s:I}}, s:{s:b, s:b, s:b, s:b}, s:{s:s, s:b}, s:{s:b, s:b, s:s, s:o, s:s, s:I}}",
                     "version", AJ_POLICY_VERSION,
                     "filesystem", "binds", binds, "tmpfs", tmpfs, "tmp_size", buf, "workdir",
                     pol->workdir ? pol->workdir : AJ_DEFAULT_WORKDIR, "noexec_tmp", pol->noexec_tmp,
                     "allow_bind_inside_writable", pol->allow_bind_inside_writable,
                     "environment", "set", envset, "pass", pass,
                     "network", "mode", pol->network == AJ_NET_LOOPBACK ? "loopback" : "none",
                     "limits", limits,
                     "identity", "uid", (json_int_t)pol->uid, "gid", (json_int_t)pol->gid, "hostname",
                     pol->hostname ? pol->hostname : AJ_DEFAULT_HOSTNAME, "uid_range", "base",
                     (json_int_t)pol->uid_base, "count", (json_int_t)pol->uid_count,
                     "degraded", "allow", pol->allow_degraded, "without_landlock", pol->allow_no_landlock,
                     "without_signal_scope", pol->allow_unscoped_signals,
                     "without_decoys", pol->allow_no_decoys,
                     "seccomp", "filter", "default", "allow_ptrace", pol->allow_ptrace,
                     "detection", "decoys", pol->decoys, "cloud_decoys", pol->cloud_decoys, "on_escape",
                     pol->on_escape == AJ_ON_ESCAPE_KILL ? "kill" : "deny", "alert_cmd",
                     pol->alert_cmd ? json_string(pol->alert_cmd) : json_null(), "alert_timeout", tmp,
                     "event_budget", (json_int_t)pol->event_budget);
    /* json_pack took the references (also on failure). */
    binds = tmpfs = envset = pass = NULL;
    if (!root)
        return NULL;
    out = json_dumps(root, JSON_SORT_KEYS | (compact ? JSON_COMPACT : JSON_INDENT(2)) | JSON_ENSURE_ASCII);
    json_decref(root);
    return out;
fail:
    json_decref(binds);
    json_decref(tmpfs);
    json_decref(envset);
    json_decref(pass);
    return NULL;
}

/* ---- where each key path is in the text ------------------------------------ */

struct pos_entry {
    char *path;
    int line, col;   /* of the key (members) or of the element (arrays) */
    int vline, vcol; /* of the value */
};

struct pos_index {
    struct pos_entry *e;
    size_t n;
};

static void pos_index_clear(struct pos_index *idx)
{
    for (size_t i = 0; i < idx->n; i++)
        free(idx->e[i].path);
    free(idx->e);
    idx->e = NULL;
    idx->n = 0;
}

static int pos_add(struct pos_index *idx, const char *path, int line, int col)
{
    struct pos_entry *ne = realloc(idx->e, (idx->n + 1) * sizeof(*ne));
    if (!ne)
        return -ENOMEM;
    idx->e = ne;
    ne[idx->n] = (struct pos_entry){.path = strdup(path), .line = line, .col = col, .vline = line, .vcol = col};
    if (!ne[idx->n].path)
        return -ENOMEM;
    idx->n++;
    return 0;
}

#define POS_DEPTH 64

/* Syntax is already validated by jansson, so this only tracks structure. */
/* Columns count characters, as jansson's do: UTF-8 continuation bytes
 * (10xxxxxx) do not start one. */
static int chars_in(const char *t, size_t from, size_t to)
{
    int n = 0;
    for (size_t i = from; i < to; i++)
        n += ((unsigned char)t[i] & 0xc0) != 0x80;
    return n;
}

/* Syntax is already validated by jansson, so this only tracks structure;
 * still, every step advances by at least one byte, whatever the input. */
static int index_positions(const char *t, size_t len, struct pos_index *idx)
{
    struct {
        bool is_obj;
        size_t plen;   /* length of the path prefix for this container */
        size_t index;  /* arrays: current element */
        bool want_key; /* objects: next string is a key */
    } st[POS_DEPTH];
    char path[1024] = "";
    int depth = -1, line = 1, col = 1;
    bool pending_value = true; /* the root value */

    for (size_t i = 0; i < len;) {
        char c = t[i];
        int tline = line, tcol = col;

        if (c == '\n') {
            line++;
            col = 1;
            i++;
            continue;
        }
        if (isspace((unsigned char)c) || c == ':' || c == '\0') {
            col++;
            i++;
            continue;
        }
        if (c == ',') {
            if (depth >= 0) {
                if (st[depth].is_obj)
                    st[depth].want_key = true;
                else {
                    st[depth].index++;
                    pending_value = true;
                }
            }
            col++;
            i++;
            continue;
        }
        if (c == '}' || c == ']') {
            if (depth >= 0) {
                path[st[depth].plen] = '\0';
                depth--;
            }
            col++;
            i++;
            continue;
        }
        /* A value or a key starts here. */
        if (depth >= 0 && st[depth].is_obj && st[depth].want_key && c == '"') {
            size_t j = i + 1, plen = st[depth].plen;
            while (j < len && t[j] != '"')
                j += t[j] == '\\' ? 2 : 1;
            if (j > len)
                j = len;
            path[plen] = '\0';
            if (plen + 1 + (j - i - 1) + 1 < sizeof(path)) {
                if (plen)
                    strcat(path, ".");
                strncat(path, t + i + 1, j - i - 1);
            }
            if (pos_add(idx, path, tline, tcol) < 0)
                return -ENOMEM;
            st[depth].want_key = false;
            pending_value = true;
            col += chars_in(t, i, j < len ? j + 1 : len);
            i = j + 1;
            continue;
        }
        if (depth >= 0 && !st[depth].is_obj && pending_value) {
            size_t plen = st[depth].plen;
            path[plen] = '\0';
            if (plen + 24 < sizeof(path))
                snprintf(path + plen, sizeof(path) - plen, "[%zu]", st[depth].index);
            if (pos_add(idx, path, tline, tcol) < 0)
                return -ENOMEM;
        } else if (depth < 0 && pending_value) {
            /* The top-level value: where errors about it (a missing
             * "version") point. */
            if (pos_add(idx, "", tline, tcol) < 0)
                return -ENOMEM;
        } else if (idx->n && pending_value) {
            idx->e[idx->n - 1].vline = tline;
            idx->e[idx->n - 1].vcol = tcol;
        }
        pending_value = false;
        if (c == '{' || c == '[') {
            if (depth + 1 >= POS_DEPTH)
                return -E2BIG;
            depth++;
            st[depth].is_obj = c == '{';
            st[depth].plen = strlen(path);
            st[depth].index = 0;
            st[depth].want_key = c == '{';
            pending_value = c == '[';
            col++;
            i++;
            continue;
        }
        if (c == '"') {
            size_t j = i + 1;
            while (j < len && t[j] != '"')
                j += t[j] == '\\' ? 2 : 1;
            if (j > len)
                j = len;
            col += chars_in(t, i, j < len ? j + 1 : len);
            i = j + 1;
        } else {
            /* A number or a literal: up to the next delimiter. */
            size_t j = i + 1;
            while (j < len && t[j] != '\0' && !strchr(",}] \t\r\n:", t[j]))
                j++;
            col += chars_in(t, i, j);
            i = j;
        }
        if (depth >= 0)
            path[st[depth].plen] = '\0';
    }
    return 0;
}

/* The entry for path, or for its nearest ancestor that has one. */
static const struct pos_entry *pos_find(const struct pos_index *idx, const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    for (;;) {
        for (size_t i = 0; i < idx->n; i++)
            if (strcmp(idx->e[i].path, p) == 0)
                return &idx->e[i];
        char *cut = strrchr(p, '.');
        char *br = strrchr(p, '[');
        if (br && (!cut || br > cut))
            cut = br;
        if (!cut) {
            if (!p[0])
                return NULL;
            cut = p; /* last: the top-level object (path "") */
        }
        *cut = '\0';
    }
}

/* ---- loading ----------------------------------------------------------------- */

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

/* A setter failed with a flag-shaped message ("--memory: ..."): keep the
 * explanation, put the file position and key in front. */
static int setter_failed(struct loader *L, const char *path, int r)
{
    char msg[sizeof(L->err->msg)];
    const char *p = L->err->msg;

    if (r == -ENOMEM)
        return r;
    if (p[0] == '-' && p[1] == '-' && strstr(p, ": "))
        p = strstr(p, ": ") + 2;
    snprintf(msg, sizeof(msg), "%s", p);
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

static int check_keys(struct loader *L, const char *path, const json_t *obj, const char *const *allowed)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)obj, key, v) {
        bool ok = false;
        char accepted[256] = "";
        for (size_t i = 0; allowed[i]; i++) {
            ok |= strcmp(key, allowed[i]) == 0;
            if (strlen(accepted) + strlen(allowed[i]) + 3 < sizeof(accepted)) {
                if (i)
                    strcat(accepted, ", ");
                strcat(accepted, allowed[i]);
            }
        }
        if (!ok) {
            char kp[512];
            snprintf(kp, sizeof(kp), "%s%s%s", path, path[0] ? "." : "", key);
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

/* A group of the policy: an object whose keys are all known. */
static int open_group(struct loader *L, const char *path, const json_t *v, const char *const *keys)
{
    int r = want_type(L, path[0] ? path : "(top level)", v, JSON_OBJECT, "an object");
    return r < 0 ? r : check_keys(L, path, v, keys);
}

/* Sizes, durations and counts accept a number or a string ("512M", "10s").
 * Returns the text form in buf, or "" for null (no limit, where allowed). */
static int scalar_text(struct loader *L, const char *path, const json_t *v, bool null_ok, const char *example,
                       char *buf, size_t size)
{
    if (json_is_null(v) && null_ok) {
        buf[0] = '\0';
        return 0;
    }
    if (json_is_string(v)) {
        snprintf(buf, size, "%s", json_string_value(v));
        return 0;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 1e6) {
        snprintf(buf, size, "%.3f", json_real_value(v));
        return 0;
    }
    return fail_at(L, path, true, "expected %s%s, got %s", example, null_ok ? " or null (no limit)" : "",
                   type_name(v));
}

static int load_string(struct loader *L, const char *path, const json_t *v, char **slot)
{
    int r = want_type(L, path, v, JSON_STRING, "a string");
    if (r < 0)
        return r;
    r = aj_policy_set_string(slot, json_string_value(v), L->err);
    return r < 0 ? setter_failed(L, path, r) : 0;
}

static int load_u32(struct loader *L, const char *path, const json_t *v, uint32_t max, uint32_t *slot)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return fail_at(L, path, true, "expected an integer within 0..%u, got %s", max,
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

static int load_binds(struct loader *L, const json_t *arr)
{
    static const char *const keys[] = {"host", "sandbox", "mode", "optional", "owner", NULL};
    size_t i;
    json_t *b;
    int r = want_type(L, "filesystem.binds", arr, JSON_ARRAY, "an array of {host, sandbox, mode}");

    if (r < 0)
        return r;
    json_array_foreach(arr, i, b) {
        char p[128], kp[160];
        json_t *host, *sandbox, *mode, *optional, *owner;
        const char *hostpath = NULL;
        bool rw = false, opt = false, unset;
        uint32_t ou = 0, og = 0;

        snprintf(p, sizeof(p), "filesystem.binds[%zu]", i);
        r = want_type(L, p, b, JSON_OBJECT, "an object {host, sandbox, mode}");
        if (r == 0)
            r = check_keys(L, p, b, keys);
        if (r < 0)
            return r;
        host = json_object_get(b, "host");
        sandbox = json_object_get(b, "sandbox");
        mode = json_object_get(b, "mode");
        optional = json_object_get(b, "optional");
        owner = json_object_get(b, "owner");
        if (!host)
            return fail_at(L, p, true, "missing 'host' (the absolute host path to bind)");
        snprintf(kp, sizeof(kp), "%s.host", p);
        if ((r = want_type(L, kp, host, JSON_STRING, "an absolute path")) < 0)
            return r;
        if (sandbox) {
            snprintf(kp, sizeof(kp), "%s.sandbox", p);
            if ((r = want_type(L, kp, sandbox, JSON_STRING, "an absolute path")) < 0)
                return r;
        }
        if (mode) {
            snprintf(kp, sizeof(kp), "%s.mode", p);
            if (!json_is_string(mode) || (strcmp(json_string_value(mode), "ro") != 0 &&
                                          strcmp(json_string_value(mode), "rw") != 0))
                return fail_at(L, kp, true, "expected \"ro\" or \"rw\"");
            rw = strcmp(json_string_value(mode), "rw") == 0;
        }
        if (optional) {
            snprintf(kp, sizeof(kp), "%s.optional", p);
            if (!json_is_boolean(optional))
                return fail_at(L, kp, true, "expected a boolean, got %s", type_name(optional));
            opt = json_is_true(optional);
        }
        if (owner) {
            snprintf(kp, sizeof(kp), "%s.owner", p);
            if (!json_is_string(owner) || aj_parse_owner(json_string_value(owner), &ou, &og) < 0)
                return fail_at(L, kp, true, "expected \"UID:GID\" (decimal host ids, e.g. \"1000:1000\"): the "
                               "host owner of what the sandbox writes there");
            if (!rw)
                return fail_at(L, kp, true, "'owner' applies to writable binds only (\"mode\": \"rw\")");
        }
        snprintf(kp, sizeof(kp), "%s.host", p);
        r = expand_host(L, kp, json_string_value(host), &hostpath, &unset);
        if (r < 0)
            return r;
        if (unset) {
            if (opt)
                continue;
            return fail_at(L, kp, true, "%s is not set in agentjail's environment (or mark the bind "
                           "\"optional\": true)", json_string_value(host));
        }
        if (opt && access(hostpath, F_OK) < 0)
            continue;
        {
            int bad_sandbox = 0;
            r = aj_policy_add_bind_paths_ex(L->pol, hostpath, sandbox ? json_string_value(sandbox) : NULL, rw,
                                            &bad_sandbox, L->err);
            if (r < 0) {
                if (bad_sandbox && sandbox)
                    snprintf(kp, sizeof(kp), "%s.sandbox", p);
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

static int load_filesystem(struct loader *L, const json_t *fs)
{
    static const char *const keys[] = {"binds", "tmpfs", "tmp_size", "workdir", "noexec_tmp",
                                       "allow_bind_inside_writable", NULL};
    json_t *v;
    int r = open_group(L, "filesystem", fs, keys);

    if (r < 0)
        return r;
    if ((v = json_object_get(fs, "binds")) && (r = load_binds(L, v)) < 0)
        return r;
    if ((v = json_object_get(fs, "tmpfs"))) {
        static const char *const tkeys[] = {"path", "size", NULL};
        size_t i;
        json_t *t;
        if ((r = want_type(L, "filesystem.tmpfs", v, JSON_ARRAY, "an array of {path, size}")) < 0)
            return r;
        json_array_foreach(v, i, t) {
            char p[128], spec[4200], size[64] = "";
            json_t *path, *sz;
            snprintf(p, sizeof(p), "filesystem.tmpfs[%zu]", i);
            if ((r = want_type(L, p, t, JSON_OBJECT, "an object {path, size}")) < 0 ||
                (r = check_keys(L, p, t, tkeys)) < 0)
                return r;
            path = json_object_get(t, "path");
            sz = json_object_get(t, "size");
            if (!path || !json_is_string(path))
                return fail_at(L, p, true, "needs 'path', an absolute path inside the sandbox");
            if (sz) {
                char kp[160];
                snprintf(kp, sizeof(kp), "%s.size", p);
                if ((r = scalar_text(L, kp, sz, false, "a size like \"64M\"", size, sizeof(size))) < 0)
                    return r;
            }
            snprintf(spec, sizeof(spec), "%s%s%s", json_string_value(path), size[0] ? ":" : "", size);
            r = aj_policy_add_tmpfs(L->pol, spec, L->err);
            if (r < 0) {
                char kp[160];
                /* A size error names the size; anything else the path. */
                snprintf(kp, sizeof(kp), "%s.%s", p, strstr(L->err->msg, "size") ? "size" : "path");
                return setter_failed(L, kp, r);
            }
        }
    }
    if ((v = json_object_get(fs, "tmp_size"))) {
        char buf[64];
        uint64_t n;
        if ((r = scalar_text(L, "filesystem.tmp_size", v, false, "a size like \"64M\" or \"auto\"", buf, sizeof(buf))) < 0)
            return r;
        if (strcmp(buf, "auto") == 0)
            n = AJ_TMP_SIZE_AUTO;
        else if (aj_parse_size(buf, &n) < 0 || n < 4096)
            return fail_at(L, "filesystem.tmp_size", true, "'%s' is not a size of at least 4K (e.g. 64M) or \"auto\"", buf);
        L->pol->tmp_size = n;
    }
    if ((v = json_object_get(fs, "workdir")) && (r = load_string(L, "filesystem.workdir", v, &L->pol->workdir)) < 0)
        return r;
    if ((v = json_object_get(fs, "noexec_tmp"))) {
        if (!json_is_boolean(v))
            return fail_at(L, "filesystem.noexec_tmp", true, "expected a boolean, got %s", type_name(v));
        L->pol->noexec_tmp = json_is_true(v);
    }
    if ((v = json_object_get(fs, "allow_bind_inside_writable"))) {
        if (!json_is_boolean(v))
            return fail_at(L, "filesystem.allow_bind_inside_writable", true, "expected a boolean, got %s",
                           type_name(v));
        L->pol->allow_bind_inside_writable = json_is_true(v);
    }
    return 0;
}

static int load_environment(struct loader *L, const json_t *env)
{
    static const char *const keys[] = {"set", "pass", NULL};
    json_t *v;
    int r = open_group(L, "environment", env, keys);

    if (r < 0)
        return r;
    if ((v = json_object_get(env, "set"))) {
        const char *k;
        json_t *val;
        if ((r = want_type(L, "environment.set", v, JSON_OBJECT, "an object of NAME: \"value\"")) < 0)
            return r;
        json_object_foreach(v, k, val) {
            char kp[300];
            _cleanup_free_ char *kv = NULL;
            snprintf(kp, sizeof(kp), "environment.set.%s", k);
            if ((r = want_type(L, kp, val, JSON_STRING, "a string")) < 0)
                return r;
            if (asprintf(&kv, "%s=%s", k, json_string_value(val)) < 0)
                return aj_err(L->err, ENOMEM, "policy");
            r = aj_policy_add_env(L->pol, kv, L->err);
            if (r < 0)
                return setter_failed(L, kp, r);
        }
    }
    if ((v = json_object_get(env, "pass"))) {
        size_t i;
        json_t *n;
        if ((r = want_type(L, "environment.pass", v, JSON_ARRAY, "an array of variable names")) < 0)
            return r;
        json_array_foreach(v, i, n) {
            char kp[64];
            snprintf(kp, sizeof(kp), "environment.pass[%zu]", i);
            if ((r = want_type(L, kp, n, JSON_STRING, "a variable name")) < 0)
                return r;
            r = aj_policy_add_env_pass(L->pol, json_string_value(n), L->err);
            if (r < 0)
                return setter_failed(L, kp, r);
        }
    }
    return 0;
}

typedef int (*limit_setter)(struct aj_policy *, const char *, struct aj_error *);

static int load_limits(struct loader *L, const json_t *lim)
{
    static const struct {
        const char *key;
        limit_setter set;
        const char *example;
        bool nullable;
    } table[] = {
        {"timeout", NULL, "a duration like \"10s\" or \"500ms\"", true},
        {"memory", aj_policy_set_memory, "a size like \"512M\"", true},
        {"pids", aj_policy_set_pids, "a number of processes", true},
        {"cpus", aj_policy_set_cpus, "a CPU share like \"0.5\"", true},
        {"cpu_time", aj_policy_set_cpu_time, "a duration like \"10s\"", true},
        {"output", aj_policy_set_output_limit, "a size like \"1M\"", true},
        {"file_size", aj_policy_set_file_size, "a size like \"1G\"", false},
        {"open_files", aj_policy_set_open_files, "a number of files", false},
    };
    static const char *const keys[] = {"timeout", "memory", "pids", "cpus", "cpu_time", "output",
                                       "file_size", "open_files", "require_cgroup", NULL};
    uint32_t named = 0;
    json_t *v;
    int r = open_group(L, "limits", lim, keys);

    if (r < 0)
        return r;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(table); i++) {
        char path[64], buf[64];
        if (!(v = json_object_get(lim, table[i].key)))
            continue;
        snprintf(path, sizeof(path), "limits.%s", table[i].key);
        r = scalar_text(L, path, v, table[i].nullable, table[i].example, buf, sizeof(buf));
        if (r < 0)
            return r;
        if (strcmp(table[i].key, "timeout") == 0) {
            uint64_t ms = 0;
            if (buf[0] && (aj_parse_duration_ms(buf, &ms) < 0 || ms == 0 || ms > 7ULL * 24 * 3600 * 1000))
                return fail_at(L, path, true, "'%s' is not a duration (e.g. 10s, 500ms, 2m; > 0, <= 7 days)", buf);
            L->pol->timeout_ms = ms;
            continue;
        }
        if (!buf[0]) { /* null: no limit */
            if (strcmp(table[i].key, "memory") == 0)
                L->pol->memory_max = 0;
            else if (strcmp(table[i].key, "pids") == 0)
                L->pol->pids_max = 0;
            else if (strcmp(table[i].key, "cpus") == 0)
                L->pol->cpu_milli = 0;
            else if (strcmp(table[i].key, "cpu_time") == 0)
                L->pol->cpu_time_ms = 0;
            else if (strcmp(table[i].key, "output") == 0)
                L->pol->output_limit = 0;
            continue;
        }
        r = table[i].set(L->pol, buf, L->err);
        if (r < 0)
            return setter_failed(L, path, r);
        for (size_t k = 0; k < AJ_ARRAY_SIZE(limit_names); k++)
            if (strcmp(table[i].key, limit_names[k].key) == 0)
                named |= limit_names[k].bit;
    }
    /* A limit named in the file is one the author relies on: fail closed
     * if it cannot be enforced, unless require_cgroup says otherwise (a list
     * of limit keys, or true for every limit set, or false for none). */
    L->pol->required_limits = L->pol->required_limits | named;
    if ((v = json_object_get(lim, "require_cgroup"))) {
        if (json_is_boolean(v)) {
            L->pol->required_limits = 0;
            if (json_is_true(v))
                for (size_t k = 0; k < AJ_ARRAY_SIZE(limit_names); k++)
                    L->pol->required_limits |= limit_names[k].bit;
        } else if (json_is_array(v)) {
            size_t i;
            json_t *e;
            L->pol->required_limits = 0;
            json_array_foreach(v, i, e) {
                char kp[64];
                bool found = false;
                snprintf(kp, sizeof(kp), "limits.require_cgroup[%zu]", i);
                for (size_t k = 0; json_is_string(e) && k < AJ_ARRAY_SIZE(limit_names); k++)
                    if (strcmp(json_string_value(e), limit_names[k].key) == 0) {
                        L->pol->required_limits |= limit_names[k].bit;
                        found = true;
                    }
                if (!found)
                    return fail_at(L, kp, true, "expected one of \"memory\", \"pids\", \"cpus\", \"cpu_time\"");
            }
        } else {
            return fail_at(L, "limits.require_cgroup", true,
                           "expected a list of limit names (or true/false), got %s", type_name(v));
        }
    }
    return 0;
}

static int load_identity(struct loader *L, const json_t *id)
{
    static const char *const keys[] = {"uid", "gid", "hostname", "uid_range", NULL};
    json_t *v;
    int r = open_group(L, "identity", id, keys);

    if (r < 0)
        return r;
    if ((v = json_object_get(id, "uid")) && (r = load_u32(L, "identity.uid", v, 0xfffffffeU, &L->pol->uid)) < 0)
        return r;
    if ((v = json_object_get(id, "gid")) && (r = load_u32(L, "identity.gid", v, 0xfffffffeU, &L->pol->gid)) < 0)
        return r;
    if ((v = json_object_get(id, "hostname")) && (r = load_string(L, "identity.hostname", v, &L->pol->hostname)) < 0)
        return r;
    if ((v = json_object_get(id, "uid_range"))) {
        static const char *const rkeys[] = {"base", "count", NULL};
        uint32_t base = 0, count = 0;
        char spec[64];
        json_t *b, *c;
        if ((r = want_type(L, "identity.uid_range", v, JSON_OBJECT, "an object {base, count}")) < 0 ||
            (r = check_keys(L, "identity.uid_range", v, rkeys)) < 0)
            return r;
        b = json_object_get(v, "base");
        c = json_object_get(v, "count");
        if (!b || !c)
            return fail_at(L, "identity.uid_range", true, "needs both 'base' and 'count'");
        if ((r = load_u32(L, "identity.uid_range.base", b, 0xfffffffeU, &base)) < 0 ||
            (r = load_u32(L, "identity.uid_range.count", c, 0xfffffffeU, &count)) < 0)
            return r;
        snprintf(spec, sizeof(spec), "%u:%u", base, count);
        r = aj_policy_set_uid_range(L->pol, spec, L->err);
        if (r < 0)
            return setter_failed(L, "identity.uid_range", r);
    }
    return 0;
}

static int load_bool(struct loader *L, const char *path, const json_t *v, bool *slot)
{
    if (!json_is_boolean(v))
        return fail_at(L, path, true, "expected a boolean, got %s", type_name(v));
    *slot = json_is_true(v);
    return 0;
}

static int load_detection(struct loader *L, const json_t *d)
{
    static const char *const keys[] = {"decoys",        "cloud_decoys",  "on_escape", "alert_cmd",
                                       "alert_timeout", "event_budget", NULL};
    json_t *v;
    int r = open_group(L, "detection", d, keys);

    if (r < 0)
        return r;
    if ((v = json_object_get(d, "decoys")) && (r = load_bool(L, "detection.decoys", v, &L->pol->decoys)) < 0)
        return r;
    if ((v = json_object_get(d, "cloud_decoys")) &&
        (r = load_bool(L, "detection.cloud_decoys", v, &L->pol->cloud_decoys)) < 0)
        return r;
    if ((v = json_object_get(d, "on_escape"))) {
        if ((r = want_type(L, "detection.on_escape", v, JSON_STRING, "\"deny\" or \"kill\"")) < 0)
            return r;
        r = aj_policy_set_on_escape(L->pol, json_string_value(v), L->err);
        if (r < 0)
            return setter_failed(L, "detection.on_escape", r);
    }
    if ((v = json_object_get(d, "alert_cmd"))) {
        if (json_is_null(v)) {
            free(L->pol->alert_cmd);
            L->pol->alert_cmd = NULL;
        } else if ((r = load_string(L, "detection.alert_cmd", v, &L->pol->alert_cmd)) < 0) {
            return r;
        }
    }
    if ((v = json_object_get(d, "alert_timeout"))) {
        char buf[64];
        if ((r = scalar_text(L, "detection.alert_timeout", v, false, "a duration like \"10s\"", buf, sizeof(buf))) < 0)
            return r;
        r = aj_policy_set_alert_timeout(L->pol, buf, L->err);
        if (r < 0)
            return setter_failed(L, "detection.alert_timeout", r);
    }
    if ((v = json_object_get(d, "event_budget"))) {
        char buf[64];
        if ((r = scalar_text(L, "detection.event_budget", v, false, "a number of events like 1000", buf,
                             sizeof(buf))) < 0)
            return r;
        r = aj_policy_set_event_budget(L->pol, buf, L->err);
        if (r < 0)
            return setter_failed(L, "detection.event_budget", r);
    }
    return 0;
}

static int load_root(struct loader *L, const json_t *root)
{
    static const char *const keys[] = {"version", "filesystem", "environment", "network", "limits",
                                       "identity", "degraded", "seccomp", "detection", NULL};
    json_t *v;
    int r = want_type(L, "(top level)", root, JSON_OBJECT, "an object");

    if (r == 0)
        r = check_keys(L, "", root, keys);
    if (r < 0)
        return r;
    v = json_object_get(root, "version");
    if (!v)
        return fail_at(L, "version", false, "missing \"version\": 1 at the top level");
    if (!json_is_integer(v) || json_integer_value(v) != AJ_POLICY_VERSION)
        return fail_at(L, "version", true, "only version 1 is understood");
    if ((v = json_object_get(root, "filesystem")) && (r = load_filesystem(L, v)) < 0)
        return r;
    if ((v = json_object_get(root, "environment")) && (r = load_environment(L, v)) < 0)
        return r;
    if ((v = json_object_get(root, "network"))) {
        static const char *const nkeys[] = {"mode", NULL};
        json_t *m;
        if ((r = open_group(L, "network", v, nkeys)) < 0)
            return r;
        if ((m = json_object_get(v, "mode"))) {
            if ((r = want_type(L, "network.mode", m, JSON_STRING, "\"none\" or \"loopback\"")) < 0)
                return r;
            r = aj_policy_set_network(L->pol, json_string_value(m), L->err);
            if (r < 0)
                return setter_failed(L, "network.mode", r);
        }
    }
    if ((v = json_object_get(root, "limits")) && (r = load_limits(L, v)) < 0)
        return r;
    if ((v = json_object_get(root, "identity")) && (r = load_identity(L, v)) < 0)
        return r;
    if ((v = json_object_get(root, "degraded"))) {
        static const char *const dkeys[] = {"allow", "without_landlock", "without_signal_scope", "without_decoys", NULL};
        json_t *a;
        if ((r = open_group(L, "degraded", v, dkeys)) < 0)
            return r;
        if ((a = json_object_get(v, "allow"))) {
            if (!json_is_boolean(a))
                return fail_at(L, "degraded.allow", true, "expected a boolean, got %s", type_name(a));
            L->pol->allow_degraded = json_is_true(a);
        }
        if ((a = json_object_get(v, "without_landlock"))) {
            if (!json_is_boolean(a))
                return fail_at(L, "degraded.without_landlock", true, "expected a boolean, got %s", type_name(a));
            L->pol->allow_no_landlock = json_is_true(a);
        }
        if ((a = json_object_get(v, "without_signal_scope"))) {
            if (!json_is_boolean(a))
                return fail_at(L, "degraded.without_signal_scope", true, "expected a boolean, got %s", type_name(a));
            L->pol->allow_unscoped_signals = json_is_true(a);
        }
        if ((a = json_object_get(v, "without_decoys"))) {
            if (!json_is_boolean(a))
                return fail_at(L, "degraded.without_decoys", true, "expected a boolean, got %s", type_name(a));
            L->pol->allow_no_decoys = json_is_true(a);
        }
    }
    if ((v = json_object_get(root, "detection")) && (r = load_detection(L, v)) < 0)
        return r;
    if ((v = json_object_get(root, "seccomp"))) {
        static const char *const skeys[] = {"filter", "allow_ptrace", NULL};
        json_t *f;
        if ((r = open_group(L, "seccomp", v, skeys)) < 0)
            return r;
        /* One filter exists today; naming it keeps the policy explicit
         * about what is enforced, and its hash changes if that ever does. */
        if ((f = json_object_get(v, "filter")) && (!json_is_string(f) || strcmp(json_string_value(f), "default") != 0))
            return fail_at(L, "seccomp.filter", true, "the only filter is \"default\" (see docs/security-model.md)");
        if ((f = json_object_get(v, "allow_ptrace"))) {
            if (!json_is_boolean(f))
                return fail_at(L, "seccomp.allow_ptrace", true, "expected a boolean, got %s", type_name(f));
            L->pol->allow_ptrace = json_is_true(f);
        }
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
    r = index_positions(buf, len, &L.idx);
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
            size_t bi;
            if (sscanf(key, "filesystem.binds[%zu]", &bi) == 1) {
                const char *rest = strchr(key, ']') + 1;
                char fixed[160];
                if (bi >= L.bind_base && bi - L.bind_base < L.n_bind_keys)
                    snprintf(fixed, sizeof(fixed), "filesystem.binds[%zu]%s", L.bind_keys[bi - L.bind_base], rest);
                else /* a bind from an earlier source (a profile) */
                    snprintf(fixed, sizeof(fixed), "filesystem.binds");
                snprintf(key, sizeof(key), "%s", fixed);
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

/* ---- profiles ------------------------------------------------------------------ */

struct aj_profile_blob {
    const char *name;
    const char *json;
};
extern const struct aj_profile_blob aj_builtin_profiles[]; /* generated: tools/embed-profiles.py */

const char *const *aj_policy_profile_names(void)
{
    static const char *names[16];
    size_t n = 0;
    for (size_t i = 0; aj_builtin_profiles[i].name && n + 1 < AJ_ARRAY_SIZE(names); i++)
        names[n++] = aj_builtin_profiles[i].name;
    names[n] = NULL;
    return names;
}

int aj_policy_load_profile(struct aj_policy *pol, const char *name, struct aj_error *err)
{
    char label[96];
    for (size_t i = 0; aj_builtin_profiles[i].name; i++)
        if (strcmp(aj_builtin_profiles[i].name, name) == 0) {
            snprintf(label, sizeof(label), "profile %s", name);
            return aj_policy_load_buffer(pol, aj_builtin_profiles[i].json, strlen(aj_builtin_profiles[i].json),
                                         label, err);
        }
    {
        char list[256] = "";
        for (size_t i = 0; aj_builtin_profiles[i].name; i++)
            if (strlen(list) + strlen(aj_builtin_profiles[i].name) + 3 < sizeof(list)) {
                if (i)
                    strcat(list, ", ");
                strcat(list, aj_builtin_profiles[i].name);
            }
        return aj_err(err, 0, "unknown profile '%s'; built-in profiles: %s", name, list);
    }
}

/* ---- diff ---------------------------------------------------------------------- */

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

/* "A is weaker" / "B is weaker" for a limit (0 = none = weakest). */
static const char *weaker_limit(uint64_t a, uint64_t b)
{
    if (a == b)
        return "";
    if (a == 0)
        return "A is weaker: no limit";
    if (b == 0)
        return "B is weaker: no limit";
    return a > b ? "A is weaker: higher limit" : "B is weaker: higher limit";
}

static void diff_limit(struct text *t, const char *key, uint64_t a, uint64_t b, void (*fmt)(char *, size_t, uint64_t))
{
    char sa[32] = "none", sb[32] = "none";
    if (a == b)
        return;
    if (a)
        fmt(sa, sizeof(sa), a);
    if (b)
        fmt(sb, sizeof(sb), b);
    addf(t, "%s: A %s, B %s (%s)\n", key, sa, sb, weaker_limit(a, b));
}

static void fmt_count(char *buf, size_t size, uint64_t v)
{
    snprintf(buf, size, "%llu", (unsigned long long)v);
}

static void fmt_cpus64(char *buf, size_t size, uint64_t v)
{
    fmt_cpus(buf, size, (uint32_t)v);
}

static const struct aj_bind *find_bind(const struct aj_policy *p, const char *sandbox)
{
    for (size_t i = 0; i < p->n_binds; i++)
        if (strcmp(p->binds[i].sandbox, sandbox) == 0)
            return &p->binds[i];
    return NULL;
}

static bool has_str(char **v, size_t n, const char *s, size_t cmp_len)
{
    for (size_t i = 0; i < n; i++)
        if (cmp_len ? strncmp(v[i], s, cmp_len) == 0 && v[i][cmp_len] == '=' : strcmp(v[i], s) == 0)
            return true;
    return false;
}

char *aj_policy_diff(const struct aj_policy *a, const struct aj_policy *b, bool *ret_oom)
{
    struct text t = {0};

    *ret_oom = false;
    /* Filesystem: what each side exposes of the host. */
    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n_binds; i++) {
            const struct aj_bind *bx = &x->binds[i], *by = find_bind(y, bx->sandbox);
            if (!by)
                addf(&t, "filesystem.binds: only %s binds %s -> %s (%s) (%s is weaker: exposes more of the host)\n",
                     side ? "B" : "A", bx->host, bx->sandbox, bx->rw ? "rw" : "ro", side ? "B" : "A");
            else if (side == 0 && (strcmp(bx->host, by->host) != 0 || bx->rw != by->rw))
                addf(&t, "filesystem.binds %s: A %s (%s), B %s (%s)%s\n", bx->sandbox, bx->host, bx->rw ? "rw" : "ro",
                     by->host, by->rw ? "rw" : "ro",
                     bx->rw == by->rw ? " (review: different host paths)"
                                      : bx->rw ? " (A is weaker: writable)" : " (B is weaker: writable)");
            else if (side == 0 && (bx->owner_set != by->owner_set ||
                                   (bx->owner_set && (bx->owner_uid != by->owner_uid ||
                                                      bx->owner_gid != by->owner_gid)))) {
                char oa[32] = "source's owner", ob[32] = "source's owner";
                if (bx->owner_set)
                    snprintf(oa, sizeof(oa), "%u:%u", bx->owner_uid, bx->owner_gid);
                if (by->owner_set)
                    snprintf(ob, sizeof(ob), "%u:%u", by->owner_uid, by->owner_gid);
                addf(&t, "filesystem.binds %s owner: A %s, B %s (review: who owns what the sandbox writes)\n",
                     bx->sandbox, oa, ob);
            }
        }
    }
    if (a->n_tmpfs != b->n_tmpfs)
        addf(&t, "filesystem.tmpfs: A has %zu, B has %zu extra tmpfs mounts\n", a->n_tmpfs, b->n_tmpfs);
    if (a->tmp_size != b->tmp_size) {
        char sa[32] = "auto", sb[32] = "auto";
        if (a->tmp_size != AJ_TMP_SIZE_AUTO)
            fmt_size(sa, sizeof(sa), a->tmp_size);
        if (b->tmp_size != AJ_TMP_SIZE_AUTO)
            fmt_size(sb, sizeof(sb), b->tmp_size);
        addf(&t, "filesystem.tmp_size: A %s, B %s (auto: half the memory limit, at least 64M)\n", sa, sb);
    }
    if (a->allow_ptrace != b->allow_ptrace)
        addf(&t, "seccomp.allow_ptrace: A %s, B %s (%s is weaker: its processes may trace and rewrite each other)\n",
             a->allow_ptrace ? "true" : "false", b->allow_ptrace ? "true" : "false", a->allow_ptrace ? "A" : "B");
    if (a->noexec_tmp != b->noexec_tmp)
        addf(&t, "filesystem.noexec_tmp: A %s, B %s (%s is weaker: files written to scratch space can be executed)\n",
             a->noexec_tmp ? "true" : "false", b->noexec_tmp ? "true" : "false", a->noexec_tmp ? "B" : "A");
    if (strcmp(a->workdir ? a->workdir : AJ_DEFAULT_WORKDIR, b->workdir ? b->workdir : AJ_DEFAULT_WORKDIR))
        addf(&t, "filesystem.workdir: A %s, B %s\n", a->workdir ? a->workdir : AJ_DEFAULT_WORKDIR,
             b->workdir ? b->workdir : AJ_DEFAULT_WORKDIR);
    if (a->allow_bind_inside_writable != b->allow_bind_inside_writable)
        addf(&t, "filesystem.allow_bind_inside_writable: A %s, B %s (%s is weaker: may bind what an earlier run "
                 "could have planted)\n",
             a->allow_bind_inside_writable ? "true" : "false", b->allow_bind_inside_writable ? "true" : "false",
             a->allow_bind_inside_writable ? "A" : "B");
    /* Environment: what each side hands in. Values are not printed: they
     * may be secrets. */
    for (int side = 0; side < 2; side++) {
        const struct aj_policy *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n_env_pass; i++)
            if (!has_str(y->env_pass, y->n_env_pass, x->env_pass[i], 0))
                addf(&t, "environment.pass: only %s passes %s from the host (%s is weaker)\n", side ? "B" : "A",
                     x->env_pass[i], side ? "B" : "A");
        for (size_t i = 0; i < x->n_env; i++) {
            size_t k = strcspn(x->env[i], "=");
            if (!has_str(y->env, y->n_env, x->env[i], k))
                addf(&t, "environment.set: only %s sets %.*s\n", side ? "B" : "A", (int)k, x->env[i]);
            else if (!side && !has_str(y->env, y->n_env, x->env[i], 0))
                addf(&t, "environment.set: %.*s differs\n", (int)k, x->env[i]);
        }
    }
    if (a->network != b->network)
        addf(&t, "network.mode: A %s, B %s (%s is weaker: loopback networking)\n",
             a->network == AJ_NET_LOOPBACK ? "loopback" : "none", b->network == AJ_NET_LOOPBACK ? "loopback" : "none",
             a->network == AJ_NET_LOOPBACK ? "A" : "B");
    diff_limit(&t, "limits.timeout", a->timeout_ms, b->timeout_ms, fmt_duration);
    diff_limit(&t, "limits.memory", a->memory_max, b->memory_max, fmt_size);
    diff_limit(&t, "limits.pids", a->pids_max, b->pids_max, fmt_count);
    diff_limit(&t, "limits.cpus", a->cpu_milli, b->cpu_milli, fmt_cpus64);
    diff_limit(&t, "limits.cpu_time", a->cpu_time_ms, b->cpu_time_ms, fmt_duration);
    diff_limit(&t, "limits.output", a->output_limit, b->output_limit, fmt_size);
    diff_limit(&t, "limits.file_size", a->rlimit_fsize, b->rlimit_fsize, fmt_size);
    diff_limit(&t, "limits.open_files", a->rlimit_nofile, b->rlimit_nofile, fmt_count);
    for (size_t k = 0; k < AJ_ARRAY_SIZE(limit_names); k++) {
        bool ra = a->required_limits & limit_names[k].bit, rb = b->required_limits & limit_names[k].bit;
        if (ra != rb)
            addf(&t, "limits.require_cgroup: %s is required by %s only (%s is weaker: that limit may not apply "
                     "without a cgroup)\n", limit_names[k].key, ra ? "A" : "B", ra ? "B" : "A");
    }
    if (a->uid != b->uid || a->gid != b->gid)
        addf(&t, "identity: A uid %u gid %u, B uid %u gid %u%s\n", a->uid, a->gid, b->uid, b->gid,
             a->uid == 0 ? " (A runs as uid 0 inside)" : b->uid == 0 ? " (B runs as uid 0 inside)" : "");
    if (strcmp(a->hostname ? a->hostname : AJ_DEFAULT_HOSTNAME, b->hostname ? b->hostname : AJ_DEFAULT_HOSTNAME))
        addf(&t, "identity.hostname: A %s, B %s\n", a->hostname ? a->hostname : AJ_DEFAULT_HOSTNAME,
             b->hostname ? b->hostname : AJ_DEFAULT_HOSTNAME);
    if (a->uid_base != b->uid_base || a->uid_count != b->uid_count)
        addf(&t, "identity.uid_range: A %u:%u, B %u:%u\n", a->uid_base, a->uid_count, b->uid_base, b->uid_count);
    if (a->allow_degraded != b->allow_degraded)
        addf(&t, "degraded.allow: A %s, B %s (%s is weaker: may run without namespaces)\n",
             a->allow_degraded ? "true" : "false", b->allow_degraded ? "true" : "false", a->allow_degraded ? "A" : "B");
    if (a->allow_no_landlock != b->allow_no_landlock)
        addf(&t, "degraded.without_landlock: A %s, B %s (%s is weaker: may run on a kernel without Landlock)\n",
             a->allow_no_landlock ? "true" : "false", b->allow_no_landlock ? "true" : "false",
             a->allow_no_landlock ? "A" : "B");
    if (a->allow_unscoped_signals != b->allow_unscoped_signals)
        addf(&t,
             "degraded.without_signal_scope: A %s, B %s (%s is weaker: a degraded run may signal the caller's "
             "other processes)\n",
             a->allow_unscoped_signals ? "true" : "false", b->allow_unscoped_signals ? "true" : "false",
             a->allow_unscoped_signals ? "A" : "B");
    if (a->allow_no_decoys != b->allow_no_decoys)
        addf(&t, "degraded.without_decoys: A %s, B %s (%s is weaker: may run with decoys nobody watches)\n",
             a->allow_no_decoys ? "true" : "false", b->allow_no_decoys ? "true" : "false",
             a->allow_no_decoys ? "A" : "B");
    if (a->decoys != b->decoys)
        addf(&t, "detection.decoys: A %s, B %s (%s is weaker: no decoys to catch credential theft)\n",
             a->decoys ? "on" : "off", b->decoys ? "on" : "off", a->decoys ? "B" : "A");
    if (a->cloud_decoys != b->cloud_decoys)
        addf(&t, "detection.cloud_decoys: A %s, B %s\n", a->cloud_decoys ? "on" : "off", b->cloud_decoys ? "on" : "off");
    if (a->on_escape != b->on_escape)
        addf(&t, "detection.on_escape: A %s, B %s (%s is weaker: an escape attempt does not end the run)\n",
             a->on_escape == AJ_ON_ESCAPE_KILL ? "kill" : "deny", b->on_escape == AJ_ON_ESCAPE_KILL ? "kill" : "deny",
             a->on_escape == AJ_ON_ESCAPE_KILL ? "B" : "A");
    if (!a->alert_cmd != !b->alert_cmd || (a->alert_cmd && strcmp(a->alert_cmd, b->alert_cmd)))
        addf(&t, "detection.alert_cmd: A %s, B %s\n", a->alert_cmd ? a->alert_cmd : "none",
             b->alert_cmd ? b->alert_cmd : "none");
    if (a->event_budget != b->event_budget)
        addf(&t, "detection.event_budget: A %llu, B %llu (%s writes more events per run; past the budget attempts "
                 "are counted and summarised)\n",
             (unsigned long long)a->event_budget, (unsigned long long)b->event_budget,
             a->event_budget > b->event_budget ? "A" : "B");
    if (t.oom) {
        free(t.s);
        *ret_oom = true;
        return NULL;
    }
    return t.s;
}
