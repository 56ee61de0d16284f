/* SPDX-License-Identifier: Apache-2.0 */
/* The policy model: defaults, clearing, and setting keys from text (flags,
 * aj_policy_set, and the policy-file loader's values), all driven by the
 * key table (keys.c). The rules for paths and variable names that the
 * setters and validation share live here too. Knows nothing of JSON files:
 * load.c and canonical.c build on this file, not the other way round. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <linux/limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"
#include "aj_util.h"

/* ---- fields by row ------------------------------------------------------------ */

uint64_t aj_policy_key_get(const struct aj_policy *pol, const struct aj_policy_key *k)
{
    const char *p = (const char *)pol + k->offset;

    switch (k->width) {
    case sizeof(bool):
        return *(const bool *)(const void *)p;
    case sizeof(uint32_t):
        return *(const uint32_t *)(const void *)p;
    case sizeof(uint64_t):
        return *(const uint64_t *)(const void *)p;
    default:
        return 0;
    }
}

void aj_policy_key_put(struct aj_policy *pol, const struct aj_policy_key *k, uint64_t v)
{
    char *p = (char *)pol + k->offset;

    switch (k->width) {
    case sizeof(bool):
        *(bool *)(void *)p = v != 0;
        break;
    case sizeof(uint32_t):
        *(uint32_t *)(void *)p = (uint32_t)v;
        break;
    case sizeof(uint64_t):
        *(uint64_t *)(void *)p = v;
        break;
    default:
        break;
    }
}

static char **str_slot(struct aj_policy *pol, const struct aj_policy_key *k)
{
    return (char **)(void *)((char *)pol + k->offset);
}

const char *aj_policy_key_get_str(const struct aj_policy *pol, const struct aj_policy_key *k)
{
    const char *s = *(char *const *)(const void *)((const char *)pol + k->offset);
    return s ? s : k->def_str;
}

static uint32_t *range_count(struct aj_policy *pol, const struct aj_policy_key *k)
{
    return (uint32_t *)(void *)((char *)pol + k->count_offset);
}

bool aj_policy_key_is_weak(const struct aj_policy *pol, const struct aj_policy_key *k)
{
    switch (k->weaker) {
    case AJ_WEAKER_TRUE:
        return aj_policy_key_get(pol, k) != 0;
    case AJ_WEAKER_FALSE:
        return aj_policy_key_get(pol, k) == 0;
    case AJ_WEAKER_VALUE:
        return aj_policy_key_get(pol, k) == k->weak_value;
    case AJ_WEAKER_HIGHER:
        return k->zero == AJ_ZERO_NONE && aj_policy_key_get(pol, k) == 0;
    case AJ_WEAKER_NEITHER:
    case AJ_WEAKER_CUSTOM:
    case AJ_WEAKER_NOT_COMPARED:
        break;
    }
    return false;
}

void aj_policy_key_format(const struct aj_policy_key *k, uint64_t v, char *buf, size_t size)
{
    if (v == 0 && k->zero == AJ_ZERO_NONE) {
        (void)snprintf(buf, size, "none");
        return;
    }
    if (v == 0 && k->zero == AJ_ZERO_AUTO) {
        (void)snprintf(buf, size, "auto");
        return;
    }
    switch (k->type) {
    case AJ_KEY_BOOL:
        (void)snprintf(buf, size, "%s", v ? "true" : "false");
        break;
    case AJ_KEY_SIZE:
        aj_fmt_size(buf, size, v);
        break;
    case AJ_KEY_DURATION:
        aj_fmt_duration(buf, size, v);
        break;
    case AJ_KEY_CPUS:
        aj_fmt_cpus(buf, size, v);
        break;
    case AJ_KEY_ENUM:
        if (k->names && v <= k->max && k->names[v]) {
            (void)snprintf(buf, size, "%s", k->names[v]);
            break;
        }
        /* a value no name stands for: shown as the number */
        __attribute__((fallthrough));
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
    case AJ_KEY_STRING:
    case AJ_KEY_CONST:
    case AJ_KEY_BIND_LIST:
    case AJ_KEY_TMPFS_LIST:
    case AJ_KEY_ENV_MAP:
    case AJ_KEY_NAME_LIST:
    case AJ_KEY_MODULE_LIST:
    case AJ_KEY_ID_RANGE:
    case AJ_KEY_LIMIT_SET:
    case AJ_KEY_STR_LIST:
    case AJ_KEY_SECRET_LIST:
        (void)snprintf(buf, size, "%llu", (unsigned long long)v);
        break;
    }
}

/* ---- lifecycle ------------------------------------------------------------------- */

void aj_policy_init(struct aj_policy *pol)
{
    memset(pol, 0, sizeof(*pol));
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        switch (k->type) {
        case AJ_KEY_BOOL:
        case AJ_KEY_COUNT:
        case AJ_KEY_ID:
        case AJ_KEY_SIZE:
        case AJ_KEY_DURATION:
        case AJ_KEY_CPUS:
        case AJ_KEY_ENUM:
        case AJ_KEY_LIMIT_SET:
            aj_policy_key_put(pol, k, k->def);
            break;
        case AJ_KEY_ID_RANGE:
            *(uint32_t *)(void *)((char *)pol + k->offset) = (uint32_t)k->def;
            *range_count(pol, k) = (uint32_t)k->def_count;
            break;
        case AJ_KEY_STRING:  /* NULL: the default (.def_str) */
        case AJ_KEY_CONST:
        case AJ_KEY_BIND_LIST:
        case AJ_KEY_TMPFS_LIST:
        case AJ_KEY_ENV_MAP:
        case AJ_KEY_NAME_LIST:
        case AJ_KEY_STR_LIST:
        case AJ_KEY_SECRET_LIST:
        case AJ_KEY_MODULE_LIST:
            break;
        }
    }
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void aj_policy_clear(struct aj_policy *pol)
{
    if (!pol)
        return;
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        char *base = (char *)pol;
        size_t n = 0;
        switch (k->type) {
        case AJ_KEY_STRING:
            free(*str_slot(pol, k));
            break;
        case AJ_KEY_BIND_LIST: {
            struct aj_bind *b = *(struct aj_bind **)(void *)(base + k->offset);
            n = *(size_t *)(void *)(base + k->count_offset);
            for (size_t j = 0; j < n; j++) {
                free(b[j].host);
                free(b[j].sandbox);
            }
            free(b);
            break;
        }
        case AJ_KEY_TMPFS_LIST: {
            struct aj_tmpfs *t = *(struct aj_tmpfs **)(void *)(base + k->offset);
            n = *(size_t *)(void *)(base + k->count_offset);
            for (size_t j = 0; j < n; j++)
                free(t[j].path);
            free(t);
            break;
        }
        case AJ_KEY_ENV_MAP:
        case AJ_KEY_NAME_LIST: /* count_offset: a size_t for lists (LIST() in keys.c) */
        case AJ_KEY_STR_LIST:
        case AJ_KEY_MODULE_LIST:
            n = *(size_t *)(void *)(base + k->count_offset);
            free_strv(*(char ***)(void *)(base + k->offset), n);
            break;
        case AJ_KEY_SECRET_LIST: {
            struct aj_secret *sv = *(struct aj_secret **)(void *)(base + k->offset);
            n = *(size_t *)(void *)(base + k->count_offset);
            for (size_t j = 0; j < n; j++)
                aj_secret_clear(&sv[j]);
            free(sv);
            break;
        }
        case AJ_KEY_BOOL:
        case AJ_KEY_COUNT:
        case AJ_KEY_ID:
        case AJ_KEY_SIZE:
        case AJ_KEY_DURATION:
        case AJ_KEY_CPUS:
        case AJ_KEY_ENUM:
        case AJ_KEY_CONST:
        case AJ_KEY_ID_RANGE:
        case AJ_KEY_LIMIT_SET:
            break;
        }
    }
    aj_policy_init(pol);
}

struct aj_policy *aj_policy_new(void)
{
    struct aj_policy *pol = malloc(sizeof(*pol));
    if (pol)
        aj_policy_init(pol);
    return pol;
}

void aj_policy_free(struct aj_policy *pol)
{
    if (!pol)
        return;
    aj_policy_clear(pol);
    free(pol);
}

uint64_t aj_policy_tmp_size(const struct aj_policy *pol, bool memory_enforced)
{
    if (pol->tmp_size != AJ_TMP_SIZE_AUTO)
        return pol->tmp_size;
    if (memory_enforced && pol->memory_max / 2 > AJ_DEFAULT_TMP_SIZE)
        return pol->memory_max / 2;
    return AJ_DEFAULT_TMP_SIZE;
}

/* ---- paths ------------------------------------------------------------------------ */

/* Everything in the policy must survive the canonical JSON intact, or two
 * different policies could hash alike: refuse what JSON cannot carry
 * (jansson's own check, so it is exactly what the dump will accept). */
static bool is_utf8(const char *s)
{
    json_t *j = json_string(s);
    bool ok = j != NULL;
    json_decref(j);
    return ok;
}

/* Normalise an absolute path: collapse "//" and "/./", strip a trailing
 * "/". ".." is refused, not resolved: a policy names paths literally. */
static int normalise_abs_path(const char *in, char **ret, const char *what, struct aj_error *err)
{
    _cleanup_free_ char *out = NULL;
    size_t len, o = 0;
    const char *p;

    if (!in || in[0] == '\0')
        return aj_err(err, 0, "%s: empty path (expected an absolute path)", what);
    if (in[0] != '/')
        return aj_err(err, 0, "%s: '%s' is not an absolute path (it must start with /)", what, in);
    len = strlen(in);
    if (len >= PATH_MAX)
        return aj_err(err, 0, "%s: path too long", what);
    out = malloc(len + 1);
    if (!out)
        return aj_err(err, ENOMEM, "%s", what);
    p = in;
    while (*p) {
        const char *start;
        size_t n;
        while (*p == '/')
            p++;
        start = p;
        while (*p && *p != '/')
            p++;
        n = (size_t)(p - start);
        if (n == 0 || (n == 1 && start[0] == '.'))
            continue;
        if (n == 2 && start[0] == '.' && start[1] == '.')
            return aj_err(err, 0, "%s: '%s' contains '..'; name the path without it", what, in);
        out[o++] = '/';
        memcpy(out + o, start, n);
        o += n;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    for (size_t i = 0; i < o; i++)
        if (iscntrl((unsigned char)out[i]))
            return aj_err(err, 0, "%s: '%s' contains a control character", what, in);
    if (!is_utf8(out))
        return aj_err(err, 0, "%s: path is not valid UTF-8", what);
    *ret = TAKE_PTR(out);
    return 0;
}

bool aj_policy_path_is_or_under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strcmp(prefix, "/") == 0)
        return true;
    return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Sandbox paths agentjail itself builds: a bind there would replace or
 * shadow a protection (a host /proc over the masked one, say). */
static const char *const reserved_sandbox_paths[] = {"/", "/proc", "/dev", "/etc"};

/* The /etc entries agentjail generates (mount.c): never replaced by a bind. */
static const char *const etc_generated[] = {"passwd", "group", "hosts", "hostname", "nsswitch.conf",
                                            "resolv.conf"};

/* A read-only bind may add an entry under /etc (a program's config the
 * built-in allow-list lacks), but not /etc itself, not a writable one, and
 * never over what agentjail generates. */
static int check_etc_bind(const char *path, bool rw, const char *what, struct aj_error *err)
{
    const char *rest = path + strlen("/etc/");
    size_t n = strcspn(rest, "/");

    if (rw)
        return aj_err(err, 0, "%s: '%s' is under /etc, which is read-only in the sandbox; use --bind-ro", what,
                      path);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(etc_generated); i++)
        if (strlen(etc_generated[i]) == n && strncmp(rest, etc_generated[i], n) == 0)
            return aj_err(err, 0, "%s: /etc/%s is generated by agentjail and cannot be replaced", what,
                          etc_generated[i]);
    return 0;
}

int aj_policy_check_sandbox_path(const char *path, const char *what, struct aj_error *err)
{
    for (size_t i = 0; i < AJ_ARRAY_SIZE(reserved_sandbox_paths); i++) {
        const char *res = reserved_sandbox_paths[i];
        bool hit = strcmp(res, "/") == 0 ? strcmp(path, "/") == 0 : aj_policy_path_is_or_under(path, res);
        if (hit)
            return aj_err(err, 0,
                          "%s: '%s' is reserved (agentjail builds / /proc /dev /etc itself); "
                          "choose another sandbox path",
                          what, path);
    }
    return 0;
}

/* Host paths that would hand the sandbox the host itself: the whole tree,
 * the host's procfs and sysfs (kernel knobs, other processes), its device
 * nodes, and agentjail's own state. */
static const char *const refused_host_sources[] = {"/proc", "/sys", "/dev", "/run/agentjail"};

int aj_policy_check_host_source(const char *host, const char *what, struct aj_error *err)
{
    if (strcmp(host, "/") == 0)
        return aj_err(err, 0, "%s: binding the host's whole root '/' would undo the sandbox; bind the "
                      "directories the payload needs", what);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(refused_host_sources); i++)
        if (aj_policy_path_is_or_under(host, refused_host_sources[i]))
            return aj_err(err, 0,
                          "%s: '%s' is under %s, which would expose the host kernel or other processes; "
                          "agentjail provides its own /proc and /dev",
                          what, host, refused_host_sources[i]);
    return 0;
}

/* Where a bind may go: anywhere but the reserved paths, except a
 * read-only entry under /etc (check_etc_bind). */
int aj_policy_check_bind_target(const char *path, bool rw, const char *what, struct aj_error *err)
{
    if (strncmp(path, "/etc/", 5) == 0 && path[5])
        return check_etc_bind(path, rw, what, err);
    return aj_policy_check_sandbox_path(path, what, err);
}

bool aj_policy_env_name_ok(const char *s, size_t n)
{
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return false;
    return true;
}

/* ---- compound keys, flag-shaped ------------------------------------------------------ */

static int push(void **arr, size_t *n, size_t elem, const void *item)
{
    void *na = realloc(*arr, (*n + 1) * elem);
    if (!na)
        return -ENOMEM;
    memcpy((char *)na + *n * elem, item, elem);
    *arr = na;
    (*n)++;
    return 0;
}

int aj_policy_add_bind_paths_ex(struct aj_policy *pol, const char *host_in, const char *sandbox_in, bool rw,
                                int *ret_bad_sandbox, struct aj_error *err)
{
    const char *what = rw ? "--bind-rw" : "--bind-ro";
    _cleanup_free_ char *host = NULL, *sandbox = NULL;
    struct aj_bind b;
    int r;

    r = normalise_abs_path(host_in, &host, what, err);
    if (r == 0)
        r = aj_policy_check_host_source(host, what, err);
    if (r < 0)
        return r;
    r = normalise_abs_path(sandbox_in ? sandbox_in : host, &sandbox, what, err);
    if (r == 0)
        r = aj_policy_check_bind_target(sandbox, rw, what, err);
    if (r < 0) {
        if (ret_bad_sandbox)
            *ret_bad_sandbox = 1;
        return r;
    }
    b = (struct aj_bind){.host = host, .sandbox = sandbox, .rw = rw};
    if (push((void **)&pol->binds, &pol->n_binds, sizeof(b), &b) < 0)
        return aj_err(err, ENOMEM, "%s", what);
    host = sandbox = NULL;
    return 0;
}

int aj_policy_add_bind(struct aj_policy *pol, const char *spec, bool rw, struct aj_error *err)
{
    const char *what = rw ? "--bind-rw" : "--bind-ro";
    _cleanup_free_ char *copy = NULL;
    char *colon;

    if (!spec || !*spec)
        return aj_err(err, 0, "%s: empty argument (expected HOST[:SANDBOX])", what);
    copy = strdup(spec);
    if (!copy)
        return aj_err(err, ENOMEM, "%s", what);
    colon = strchr(copy, ':');
    if (colon)
        *colon = '\0';
    return aj_policy_add_bind_paths_ex(pol, copy, colon ? colon + 1 : NULL, rw, NULL, err);
}

int aj_policy_set_bind_owner(struct aj_policy *pol, const char *owner, struct aj_error *err)
{
    struct aj_bind *b = pol->n_binds ? &pol->binds[pol->n_binds - 1] : NULL;
    uint32_t ou, og;

    if (!b || !b->rw)
        return aj_err(err, 0, "--bind-owner %s: it sets the owner of the writable bind added last, and the "
                      "last bind is %s", owner ? owner : "", b ? "read-only" : "missing");
    if (b->owner_set)
        return aj_err(err, 0, "--bind-owner %s: --bind-rw %s has an owner already", owner ? owner : "", b->host);
    if (aj_parse_owner(owner, &ou, &og) < 0)
        return aj_err(err, 0, "--bind-owner: '%s' is not UID:GID (decimal host ids, e.g. 1000:1000)",
                      owner ? owner : "");
    b->owner_set = true;
    b->owner_uid = ou;
    b->owner_gid = og;
    return 0;
}

int aj_policy_add_tmpfs(struct aj_policy *pol, const char *spec, struct aj_error *err)
{
    _cleanup_free_ char *copy = NULL, *path = NULL;
    struct aj_tmpfs t = {.size = AJ_DEFAULT_TMP_SIZE};
    char *colon;
    int r;

    if (!spec || !*spec)
        return aj_err(err, 0, "--tmpfs: empty argument (expected PATH[:SIZE])");
    copy = strdup(spec);
    if (!copy)
        return aj_err(err, ENOMEM, "--tmpfs");
    colon = strchr(copy, ':');
    if (colon) {
        *colon = '\0';
        r = aj_parse_size(colon + 1, &t.size);
        if (r < 0 || t.size < 4096)
            return aj_err(err, 0, "--tmpfs: size '%s' is not valid (use e.g. 512K, 64M, 1G; at least 4K)",
                          colon + 1);
    }
    r = normalise_abs_path(copy, &path, "--tmpfs", err);
    if (r < 0)
        return r;
    if (strcmp(path, "/tmp") != 0) {
        r = aj_policy_check_sandbox_path(path, "--tmpfs", err);
        if (r < 0)
            return r;
    }
    t.path = path;
    if (push((void **)&pol->tmpfs, &pol->n_tmpfs, sizeof(t), &t) < 0)
        return aj_err(err, ENOMEM, "--tmpfs");
    path = NULL;
    return 0;
}

int aj_policy_add_env(struct aj_policy *pol, const char *kv, struct aj_error *err)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    char *dup;

    if (!eq || !aj_policy_env_name_ok(kv, (size_t)(eq - kv)))
        return aj_err(err, 0, "--env: '%s' is not NAME=VALUE with NAME matching [A-Za-z_][A-Za-z0-9_]*",
                      kv ? kv : "");
    if (!is_utf8(kv))
        return aj_err(err, 0, "--env: the value of %.*s is not valid UTF-8", (int)(eq - kv), kv);
    dup = strdup(kv);
    if (!dup || push((void **)&pol->env, &pol->n_env, sizeof(dup), &dup) < 0) {
        free(dup);
        return aj_err(err, ENOMEM, "--env");
    }
    return 0;
}

int aj_policy_add_env_pass(struct aj_policy *pol, const char *name, struct aj_error *err)
{
    char *dup;

    if (!name || !aj_policy_env_name_ok(name, strlen(name)))
        return aj_err(err, 0, "--env-pass: '%s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                      name ? name : "");
    dup = strdup(name);
    if (!dup || push((void **)&pol->env_pass, &pol->n_env_pass, sizeof(dup), &dup) < 0) {
        free(dup);
        return aj_err(err, ENOMEM, "--env-pass");
    }
    return 0;
}

const char *aj_policy_interpreter(const struct aj_policy *pol)
{
    return pol && pol->interp_lang == AJ_INTERP_PYTHON ? "python" : NULL;
}

bool aj_policy_module_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    bool start = true;

    if (n == 0 || n > AJ_INTERP_MODULE_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '.') {
            if (start)
                return false; /* "", "a..b", ".a" */
            start = true;
            continue;
        }
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (!start && c >= '0' && c <= '9')))
            return false;
        start = false;
    }
    return !start; /* not "a." */
}

int aj_policy_add_preload(struct aj_policy *pol, const char *name, struct aj_error *err)
{
    char *dup;

    if (!aj_policy_module_name_ok(name))
        return aj_err(err, 0, "--preload: '%s' is not a module name (identifiers joined by '.', at most %d bytes)",
                      name ? name : "", AJ_INTERP_MODULE_MAX);
    if (pol->n_preload >= AJ_INTERP_MAX_PRELOAD)
        return aj_err(err, 0, "--preload: at most %d modules", AJ_INTERP_MAX_PRELOAD);
    dup = strdup(name);
    if (!dup || push((void **)&pol->preload, &pol->n_preload, sizeof(dup), &dup) < 0) {
        free(dup);
        return aj_err(err, ENOMEM, "--preload");
    }
    return 0;
}

int aj_policy_set_uid_range(struct aj_policy *pol, const char *spec, struct aj_error *err)
{
    const struct aj_policy_key *k = aj_policy_key_find("identity.uid_range");
    char buf[64];
    char *colon;
    uint64_t base, count;

    if (!spec || strlen(spec) >= sizeof(buf))
        return aj_err(err, 0, "--uid-range: expected BASE:COUNT");
    strcpy(buf, spec);
    colon = strchr(buf, ':');
    if (!colon)
        return aj_err(err, 0, "--uid-range: '%s' is not BASE:COUNT", spec);
    *colon = '\0';
    if (aj_parse_u64(buf, UINT32_MAX, &base) < 0 || aj_parse_u64(colon + 1, UINT32_MAX, &count) < 0 ||
        count == 0)
        return aj_err(err, 0, "--uid-range: '%s' is not BASE:COUNT with positive integers", spec);
    if (base < k->min || base + count > k->max)
        return aj_err(err, 0, "--uid-range: '%s' must lie within 65536..4294967294", spec);
    pol->uid_base = (uint32_t)base;
    pol->uid_count = (uint32_t)count;
    return 0;
}

/* ---- setting a key from text --------------------------------------------------------- */

/* The compound setters word their errors for their flag ("--tmpfs: ...");
 * say it as the caller named the key, or (label NULL, the file loader)
 * leave the name to the caller. */
static int relabel(struct aj_error *err, int r, const char *label, const char *flag)
{
    char *p = err->msg;

    if (r == -ENOMEM || (label && flag && strcmp(label, flag) == 0))
        return r;
    if (p[0] == '-' && p[1] == '-' && strstr(p, ": ")) {
        p = strstr(p, ": ") + 2;
        memmove(err->msg, p, strlen(p) + 1);
    }
    return label ? aj_err_prefix(err, r, "%s", label) : r;
}

/* A refused value: the row's explanation with the value in it. The row's
 * text holds one %s; it is filled in by hand rather than used as a printf
 * format, so no table entry is ever a format string. */
static int refuse(const struct aj_policy_key *k, const char *value, const char *label, bool from_flag,
                  struct aj_error *err)
{
    const char *text = from_flag && k->bad_flag ? k->bad_flag : k->bad;
    const char *at = text ? strstr(text, "%s") : NULL;
    char why[256];

    if (!text) {
        /* Enums (and the odd key without words of its own): the choices. */
        char list[160] = "";
        for (size_t i = 0; k->names && k->names[i]; i++)
            if (strlen(list) + strlen(k->names[i]) + 3 < sizeof(list)) {
                if (i)
                    strcat(list, ", ");
                strcat(list, k->names[i]);
            }
        (void)snprintf(why, sizeof(why), "'%s' is not one of: %s", value ? value : "", list);
    } else if (at) {
        (void)snprintf(why, sizeof(why), "%.*s%s%s", (int)(at - text), text, value ? value : "", at + 2);
    } else {
        (void)snprintf(why, sizeof(why), "%s", text);
    }
    if (label)
        return aj_err(err, 0, "%s: %s", label, why);
    return aj_err(err, 0, "%s", why);
}

/* require_cgroup from text: "true", "false" or "memory,pids". */
static int parse_limit_set(const char *s, uint32_t *ret)
{
    uint32_t bits = 0;
    const char *p = s;

    if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
        for (size_t i = 0; s[0] == 't' && i < AJ_ARRAY_SIZE(aj_limit_names); i++)
            bits |= aj_limit_names[i].bit;
        *ret = bits;
        return 0;
    }
    while (*p) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < AJ_ARRAY_SIZE(aj_limit_names); i++)
            if (strlen(aj_limit_names[i].name) == n && strncmp(p, aj_limit_names[i].name, n) == 0) {
                bits |= aj_limit_names[i].bit;
                found = true;
            }
        if (!found)
            return -EINVAL;
        p += n;
        if (*p == ',' && *++p == '\0')
            return -EINVAL;
    }
    *ret = bits;
    return 0;
}

/* A number of the row's type from text, before any range check. */
static int parse_number(const struct aj_policy_key *k, const char *value, uint64_t *ret)
{
    switch (k->type) {
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
        return aj_parse_u64(value, UINT64_MAX, ret);
    case AJ_KEY_SIZE:
        return aj_parse_size(value, ret);
    case AJ_KEY_DURATION:
        return aj_parse_duration_ms(value, ret);
    case AJ_KEY_CPUS:
        return aj_parse_cpus_milli(value, ret);
    case AJ_KEY_BOOL:
    case AJ_KEY_ENUM:
    case AJ_KEY_STRING:
    case AJ_KEY_CONST:
    case AJ_KEY_BIND_LIST:
    case AJ_KEY_TMPFS_LIST:
    case AJ_KEY_ENV_MAP:
    case AJ_KEY_NAME_LIST:
    case AJ_KEY_MODULE_LIST:
    case AJ_KEY_ID_RANGE:
    case AJ_KEY_LIMIT_SET:
    case AJ_KEY_STR_LIST:
    case AJ_KEY_SECRET_LIST:
        break;
    }
    return -EINVAL;
}

/* One more entry of a string list (network.allow...), checked by its row. */
static int add_str_entry(struct aj_policy *pol, const struct aj_policy_key *k, const char *value, struct aj_error *err)
{
    char ***slot = (char ***)(void *)((char *)pol + k->offset);
    size_t *n = (size_t *)(void *)((char *)pol + k->count_offset);
    char *dup, **v;
    int r;

    if (k->check && (r = k->check(value, err)) < 0)
        return r;
    if (!is_utf8(value))
        return aj_err(err, 0, "not valid UTF-8");
    if (*n >= 1024)
        return aj_err(err, 0, "more than 1024 entries");
    dup = strdup(value);
    v = dup ? realloc(*slot, (*n + 1) * sizeof(char *)) : NULL;
    if (!v) {
        free(dup);
        return aj_err(err, ENOMEM, "%s", k->key);
    }
    v[(*n)++] = dup;
    *slot = v;
    return 0;
}

int aj_policy_key_set_text(struct aj_policy *pol, const struct aj_policy_key *k, const char *value,
                           const char *label, bool from_flag, struct aj_error *err)
{
    uint64_t v;
    int r = -EINVAL;

    if (!value) {
        /* A flag without an argument, or null: no limit, unset. */
        if (k->type == AJ_KEY_BOOL && from_flag) {
            aj_policy_key_put(pol, k, k->flag_sets);
            return 0;
        }
        if (k->zero == AJ_ZERO_NONE && k->type == AJ_KEY_STRING) {
            free(*str_slot(pol, k));
            *str_slot(pol, k) = NULL;
            return 0;
        }
        if (k->zero == AJ_ZERO_NONE) {
            aj_policy_key_put(pol, k, 0);
            return 0;
        }
        return aj_err(err, 0, "%s%sneeds a value", label ? label : "", label ? ": " : "");
    }
    switch (k->type) {
    case AJ_KEY_BOOL:
        if (from_flag)
            return aj_err(err, 0, "%s takes no value", label);
        if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
            return aj_err(err, 0, "%s%s'%s' is not true or false", label ? label : "", label ? ": " : "", value);
        aj_policy_key_put(pol, k, value[0] == 't');
        return 0;
    case AJ_KEY_ENUM:
        for (size_t i = 0; k->names && k->names[i]; i++)
            if (strcmp(value, k->names[i]) == 0) {
                aj_policy_key_put(pol, k, i);
                return 0;
            }
        return refuse(k, value, label, from_flag, err);
    case AJ_KEY_STRING: {
        char *dup = strdup(value);
        if (!dup)
            return aj_err(err, ENOMEM, "%s", k->key);
        free(*str_slot(pol, k));
        *str_slot(pol, k) = dup;
        return 0;
    }
    case AJ_KEY_CONST:
        return strcmp(value, k->def_str) == 0 ? 0 : refuse(k, value, label, from_flag, err);
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS: {
        /* What people write is held to .input_max where a library caller
         * filling the struct gets .max (limits.timeout: 7 days, a year). */
        uint64_t max = k->input_max ? k->input_max : k->max;
        if (k->zero == AJ_ZERO_AUTO && strcmp(value, "auto") == 0) {
            aj_policy_key_put(pol, k, 0);
            return 0;
        }
        if (parse_number(k, value, &v) < 0 || v < k->min || v > max)
            return refuse(k, value, label, from_flag, err);
        aj_policy_key_put(pol, k, v);
        /* A limit someone wrote down is one they rely on: the run fails
         * closed if no cgroup can enforce it (docs/policy.md). */
        pol->required_limits |= k->requires;
        return 0;
    }
    case AJ_KEY_LIMIT_SET: {
        uint32_t bits;
        if (parse_limit_set(value, &bits) < 0)
            return aj_err(err, 0, "%s%s'%s' is not a list of limit names (memory, pids, cpus, cpu_time) or "
                          "true/false", label ? label : "", label ? ": " : "", value);
        aj_policy_key_put(pol, k, bits);
        return 0;
    }
    case AJ_KEY_BIND_LIST:
        return aj_err(err, 0, "%s%sbinds are added with aj_policy_add_bind (HOST[:SANDBOX], ro or rw)",
                      label ? label : "", label ? ": " : "");
    case AJ_KEY_TMPFS_LIST:
        r = aj_policy_add_tmpfs(pol, value, err);
        break;
    case AJ_KEY_ENV_MAP:
        r = aj_policy_add_env(pol, value, err);
        break;
    case AJ_KEY_NAME_LIST:
        r = aj_policy_add_env_pass(pol, value, err);
        break;
    case AJ_KEY_MODULE_LIST:
        r = aj_policy_add_preload(pol, value, err);
        break;
    case AJ_KEY_ID_RANGE:
        r = aj_policy_set_uid_range(pol, value, err);
        break;
    case AJ_KEY_STR_LIST:
        r = add_str_entry(pol, k, value, err);
        break;
    case AJ_KEY_SECRET_LIST:
        r = aj_policy_add_secret(pol, value, err);
        break;
    }
    return r < 0 ? relabel(err, r, label, k->flag) : 0;
}

int aj_policy_set(struct aj_policy *pol, const char *name, const char *value, struct aj_error *err)
{
    const struct aj_policy_key *k = aj_policy_key_find(name);

    if (!k)
        return aj_err(err, 0, "unknown policy key '%s' (see docs/policy.md)", name ? name : "");
    return aj_policy_key_set_text(pol, k, value, name, name[0] == '-', err);
}
