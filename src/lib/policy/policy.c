/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_policy.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <linux/limits.h>
#include <nettle/sha2.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aj_util.h"

void aj_policy_init(struct aj_policy *pol)
{
    memset(pol, 0, sizeof(*pol));
    pol->timeout_ms = AJ_DEFAULT_TIMEOUT_MS;
    pol->tmp_size = AJ_TMP_SIZE_AUTO; /* sized by the memory limit */
    pol->network = AJ_NET_LOOPBACK; /* private lo: nothing leaves, local servers work */
    pol->uid = AJ_DEFAULT_UID;
    pol->gid = AJ_DEFAULT_GID;
    pol->uid_base = AJ_DEFAULT_UID_BASE;
    pol->uid_count = AJ_DEFAULT_UID_COUNT;
    pol->rlimit_nofile = AJ_DEFAULT_NOFILE;
    pol->rlimit_fsize = AJ_DEFAULT_FSIZE;
    pol->memory_max = AJ_DEFAULT_MEMORY_MAX;
    pol->pids_max = AJ_DEFAULT_PIDS_MAX;
    pol->decoys = true;
    pol->alert_timeout_ms = AJ_DEFAULT_ALERT_TIMEOUT_MS;
    pol->event_budget = AJ_DEFAULT_EVENT_BUDGET;
}

uint64_t aj_policy_tmp_size(const struct aj_policy *pol, bool memory_enforced)
{
    if (pol->tmp_size != AJ_TMP_SIZE_AUTO)
        return pol->tmp_size;
    if (memory_enforced && pol->memory_max / 2 > AJ_DEFAULT_TMP_SIZE)
        return pol->memory_max / 2;
    return AJ_DEFAULT_TMP_SIZE;
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
    for (size_t i = 0; i < pol->n_binds; i++) {
        free(pol->binds[i].host);
        free(pol->binds[i].sandbox);
    }
    free(pol->binds);
    for (size_t i = 0; i < pol->n_tmpfs; i++)
        free(pol->tmpfs[i].path);
    free(pol->tmpfs);
    free_strv(pol->env, pol->n_env);
    free_strv(pol->env_pass, pol->n_env_pass);
    free(pol->workdir);
    free(pol->hostname);
    free(pol->alert_cmd);
    aj_policy_init(pol);
}

/* ---- numbers ------------------------------------------------------------ */

int aj_parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
    char *end = NULL;
    unsigned long long v;

    /* strtoull accepts leading space and '-' (and wraps "-1" to ULLONG_MAX):
     * refuse both before calling it. */
    if (!s || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (errno != 0 || end == s || *end != '\0')
        return -EINVAL;
    if (v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

int aj_parse_owner(const char *s, uint32_t *ret_uid, uint32_t *ret_gid)
{
    char buf[32];
    const char *colon = s ? strchr(s, ':') : NULL;
    uint64_t u, g;
    size_t n;

    if (!colon || (n = (size_t)(colon - s)) == 0 || n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    /* 4294967295 is (uid_t)-1, "no owner" to chown(2): never an owner. */
    if (aj_parse_u64(buf, UINT32_MAX - 1, &u) < 0 || aj_parse_u64(colon + 1, UINT32_MAX - 1, &g) < 0)
        return -EINVAL;
    *ret_uid = (uint32_t)u;
    *ret_gid = (uint32_t)g;
    return 0;
}

/* Split "123abc" into the number and its suffix. */
static int split_number(const char *s, uint64_t *num, const char **suffix)
{
    char digits[32];
    size_t n = 0;

    if (!s)
        return -EINVAL;
    while (isdigit((unsigned char)s[n]))
        n++;
    if (n == 0 || n >= sizeof(digits))
        return n == 0 ? -EINVAL : -ERANGE;
    memcpy(digits, s, n);
    digits[n] = '\0';
    *suffix = s + n;
    return aj_parse_u64(digits, UINT64_MAX, num);
}

int aj_parse_size(const char *s, uint64_t *ret)
{
    const char *suf;
    uint64_t v, mult;
    int r = split_number(s, &v, &suf);

    if (r < 0)
        return r;
    if (strcmp(suf, "") == 0 || strcmp(suf, "B") == 0)
        mult = 1;
    else if (strcmp(suf, "K") == 0 || strcmp(suf, "k") == 0)
        mult = 1ULL << 10;
    else if (strcmp(suf, "M") == 0 || strcmp(suf, "m") == 0)
        mult = 1ULL << 20;
    else if (strcmp(suf, "G") == 0 || strcmp(suf, "g") == 0)
        mult = 1ULL << 30;
    else if (strcmp(suf, "T") == 0 || strcmp(suf, "t") == 0)
        mult = 1ULL << 40;
    else
        return -EINVAL;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *ret = v * mult;
    return 0;
}

int aj_parse_duration_ms(const char *s, uint64_t *ret)
{
    const char *suf;
    uint64_t v, mult;
    int r = split_number(s, &v, &suf);

    if (r < 0)
        return r;
    if (strcmp(suf, "ms") == 0)
        mult = 1;
    else if (strcmp(suf, "") == 0 || strcmp(suf, "s") == 0)
        mult = 1000;
    else if (strcmp(suf, "m") == 0)
        mult = 60 * 1000;
    else if (strcmp(suf, "h") == 0)
        mult = 3600 * 1000;
    else
        return -EINVAL;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *ret = v * mult;
    return 0;
}

/* ---- paths ---------------------------------------------------------------- */

/* Everything in the policy must survive the canonical JSON intact, or two
 * different policies could hash alike: refuse what JSON cannot carry. */
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

static bool path_is_or_under(const char *path, const char *prefix)
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

static int check_sandbox_path(const char *path, const char *what, struct aj_error *err)
{
    for (size_t i = 0; i < AJ_ARRAY_SIZE(reserved_sandbox_paths); i++) {
        const char *res = reserved_sandbox_paths[i];
        bool hit = strcmp(res, "/") == 0 ? strcmp(path, "/") == 0 : path_is_or_under(path, res);
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

static int check_host_source(const char *host, const char *what, struct aj_error *err)
{
    if (strcmp(host, "/") == 0)
        return aj_err(err, 0, "%s: binding the host's whole root '/' would undo the sandbox; bind the "
                      "directories the payload needs", what);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(refused_host_sources); i++)
        if (path_is_or_under(host, refused_host_sources[i]))
            return aj_err(err, 0,
                          "%s: '%s' is under %s, which would expose the host kernel or other processes; "
                          "agentjail provides its own /proc and /dev",
                          what, host, refused_host_sources[i]);
    return 0;
}

/* Where a bind may go: anywhere but the reserved paths, except a
 * read-only entry under /etc (check_etc_bind). */
static int check_bind_target(const char *path, bool rw, const char *what, struct aj_error *err)
{
    if (strncmp(path, "/etc/", 5) == 0 && path[5])
        return check_etc_bind(path, rw, what, err);
    return check_sandbox_path(path, what, err);
}

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

int aj_policy_add_bind_paths(struct aj_policy *pol, const char *host_in, const char *sandbox_in, bool rw,
                             struct aj_error *err)
{
    return aj_policy_add_bind_paths_ex(pol, host_in, sandbox_in, rw, NULL, err);
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
        r = check_host_source(host, what, err);
    if (r < 0)
        return r;
    r = normalise_abs_path(sandbox_in ? sandbox_in : host, &sandbox, what, err);
    if (r == 0)
        r = check_bind_target(sandbox, rw, what, err);
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
    return aj_policy_add_bind_paths(pol, copy, colon ? colon + 1 : NULL, rw, err);
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
        r = check_sandbox_path(path, "--tmpfs", err);
        if (r < 0)
            return r;
    }
    t.path = path;
    if (push((void **)&pol->tmpfs, &pol->n_tmpfs, sizeof(t), &t) < 0)
        return aj_err(err, ENOMEM, "--tmpfs");
    path = NULL;
    return 0;
}

static bool valid_env_name(const char *s, size_t n)
{
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return false;
    return true;
}

int aj_policy_add_env(struct aj_policy *pol, const char *kv, struct aj_error *err)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    char *dup;

    if (!eq || !valid_env_name(kv, (size_t)(eq - kv)))
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

    if (!name || !valid_env_name(name, strlen(name)))
        return aj_err(err, 0, "--env-pass: '%s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                      name ? name : "");
    dup = strdup(name);
    if (!dup || push((void **)&pol->env_pass, &pol->n_env_pass, sizeof(dup), &dup) < 0) {
        free(dup);
        return aj_err(err, ENOMEM, "--env-pass");
    }
    return 0;
}

int aj_policy_set_string(char **slot, const char *value, struct aj_error *err)
{
    char *dup = strdup(value ? value : "");
    if (!dup)
        return aj_err(err, ENOMEM, "strdup");
    free(*slot);
    *slot = dup;
    return 0;
}

int aj_policy_set_network(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    if (value && strcmp(value, "none") == 0)
        pol->network = AJ_NET_NONE;
    else if (value && strcmp(value, "loopback") == 0)
        pol->network = AJ_NET_LOOPBACK;
    else
        return aj_err(err, 0, "--network: '%s' is not one of: none, loopback", value ? value : "");
    return 0;
}

int aj_policy_set_uid_range(struct aj_policy *pol, const char *spec, struct aj_error *err)
{
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
    /* Below 65536 live the host's real users and system accounts: sharing
     * one of their uids would hand the sandbox their files. */
    if (base < 65536 || base + count > 0xfffffffeULL)
        return aj_err(err, 0, "--uid-range: '%s' must lie within 65536..4294967294", spec);
    pol->uid_base = (uint32_t)base;
    pol->uid_count = (uint32_t)count;
    return 0;
}

/* ---- limits ---------------------------------------------------------------- */

int aj_policy_set_memory(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_size(value, &v) < 0 || v < (4ULL << 20) || v > (1ULL << 50))
        return aj_err(err, 0, "--memory: '%s' is not a size between 4M and 1P (e.g. 512M, 2G)",
                      value ? value : "");
    pol->memory_max = v;
    pol->required_limits |= AJ_LIMIT_MEMORY;
    return 0;
}

int aj_policy_set_pids(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    /* At least 2: init and the payload are both in the group. */
    if (aj_parse_u64(value, 4194304, &v) < 0 || v < 2)
        return aj_err(err, 0, "--pids: '%s' is not a number of processes within 2..4194304",
                      value ? value : "");
    pol->pids_max = v;
    pol->required_limits |= AJ_LIMIT_PIDS;
    return 0;
}

int aj_policy_set_cpus(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    /* "1", "0.5", "1.25": at most three decimals, parsed without floats. */
    char intpart[16], frac[4] = "000";
    const char *dot = value ? strchr(value, '.') : NULL;
    size_t n = dot ? (size_t)(dot - value) : (value ? strlen(value) : 0);
    uint64_t whole, milli;

    if (!value || n == 0 || n >= sizeof(intpart) || (dot && (strlen(dot + 1) == 0 || strlen(dot + 1) > 3)))
        goto bad;
    memcpy(intpart, value, n);
    intpart[n] = '\0';
    if (dot) {
        for (size_t i = 0; dot[1 + i]; i++) {
            if (!isdigit((unsigned char)dot[1 + i]))
                goto bad;
            frac[i] = dot[1 + i];
        }
    }
    if (aj_parse_u64(intpart, 1024, &whole) < 0 || aj_parse_u64(frac, 999, &milli) < 0)
        goto bad;
    milli += whole * 1000;
    /* cpu.max needs a quota of at least 1 ms per 100 ms period. */
    if (milli < 10 || milli > 1024000)
        goto bad;
    pol->cpu_milli = (uint32_t)milli;
    pol->required_limits |= AJ_LIMIT_CPUS;
    return 0;
bad:
    return aj_err(err, 0, "--cpus: '%s' is not a CPU share within 0.01..1024 (e.g. 0.5, 2)",
                  value ? value : "");
}

int aj_policy_set_cpu_time(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_duration_ms(value, &v) < 0 || v == 0 || v > 7ULL * 24 * 3600 * 1000)
        return aj_err(err, 0, "--cpu-time: '%s' is not a duration (e.g. 10, 10s, 500ms; > 0, <= 7 days)",
                      value ? value : "");
    pol->cpu_time_ms = v;
    pol->required_limits |= AJ_LIMIT_CPU_TIME;
    return 0;
}

int aj_policy_set_output_limit(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_size(value, &v) < 0 || v == 0 || v > (1ULL << 40))
        return aj_err(err, 0, "--output-limit: '%s' is not a size within 1..1T (e.g. 64K, 10M)",
                      value ? value : "");
    pol->output_limit = v;
    return 0;
}

int aj_policy_set_file_size(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_size(value, &v) < 0 || v == 0 || v > (1ULL << 50))
        return aj_err(err, 0, "--file-size: '%s' is not a size within 1..1P (e.g. 100M)",
                      value ? value : "");
    pol->rlimit_fsize = v;
    return 0;
}

int aj_policy_set_open_files(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_u64(value, 1048576, &v) < 0 || v < 16)
        return aj_err(err, 0, "--open-files: '%s' is not a number within 16..1048576",
                      value ? value : "");
    pol->rlimit_nofile = v;
    return 0;
}

int aj_policy_set_on_escape(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    if (value && strcmp(value, "deny") == 0)
        pol->on_escape = AJ_ON_ESCAPE_DENY;
    else if (value && strcmp(value, "kill") == 0)
        pol->on_escape = AJ_ON_ESCAPE_KILL;
    else
        return aj_err(err, 0, "--on-escape: '%s' is not one of: deny, kill", value ? value : "");
    return 0;
}

int aj_policy_set_alert_timeout(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_duration_ms(value, &v) < 0 || v == 0 || v > 3600ULL * 1000)
        return aj_err(err, 0, "--alert-timeout: '%s' is not a duration within 1ms..1h (e.g. 10s)",
                      value ? value : "");
    pol->alert_timeout_ms = v;
    return 0;
}

int aj_policy_set_event_budget(struct aj_policy *pol, const char *value, struct aj_error *err)
{
    uint64_t v;
    if (aj_parse_u64(value, AJ_MAX_EVENT_BUDGET, &v) < 0 || v == 0)
        return aj_err(err, 0, "--event-budget: '%s' is not a number of events within 1..%llu", value ? value : "",
                      (unsigned long long)AJ_MAX_EVENT_BUDGET);
    pol->event_budget = v;
    return 0;
}

/* ---- whole policy ----------------------------------------------------------- */

int aj_policy_validate(const struct aj_policy *pol, struct aj_error *err)
{
    return aj_policy_validate_at(pol, NULL, 0, err);
}

#define BAD_KEY(...)                                                                               \
    do {                                                                                           \
        if (ret_key)                                                                               \
            (void)snprintf(ret_key, key_size, __VA_ARGS__);                                        \
    } while (0)

/* Every field, whoever set it: the setters check their own argument, but
 * a library caller may fill the struct directly (uid_base = 0 would run
 * the sandbox as host root). The same bounds as the setters and the
 * policy-file loader, in one place that every run and pool passes. */
#define BAD_FIELD(key, ...)                                                                        \
    do {                                                                                           \
        BAD_KEY("%s", key);                                                                        \
        return aj_err(err, 0, __VA_ARGS__);                                                        \
    } while (0)

static int validate_fields(const struct aj_policy *pol, char *ret_key, size_t key_size, struct aj_error *err)
{
    /* The CLI and policy files take up to 7 days; a library caller (a
     * server's long-lived session) up to a year. Deadlines are 64-bit. */
    const uint64_t year_ms = 366ULL * 24 * 3600 * 1000;

    if (pol->uid_base < 65536 || pol->uid_count == 0 || (uint64_t)pol->uid_base + pol->uid_count > 0xfffffffeULL)
        BAD_FIELD("identity.uid_range",
                  "uid range %" PRIu32 ":%" PRIu32 " must be a non-empty range within 65536..4294967294 "
                  "(below 65536 live the host's own users)",
                  pol->uid_base, pol->uid_count);
    if (pol->uid > 0xfffffffeU || pol->gid > 0xfffffffeU)
        BAD_FIELD("identity", "--uid/--gid: 4294967295 is not a valid id");
    if (pol->network != AJ_NET_NONE && pol->network != AJ_NET_LOOPBACK)
        BAD_FIELD("network.mode", "network mode %d is not one of: none, loopback", (int)pol->network);
    if (pol->on_escape != AJ_ON_ESCAPE_DENY && pol->on_escape != AJ_ON_ESCAPE_KILL)
        BAD_FIELD("detection.on_escape", "on_escape %d is not one of: deny, kill", (int)pol->on_escape);
    if (pol->timeout_ms > year_ms)
        BAD_FIELD("limits.timeout", "timeout %" PRIu64 " ms is more than 366 days", pol->timeout_ms);
    if (pol->memory_max && (pol->memory_max < (4ULL << 20) || pol->memory_max > (1ULL << 50)))
        BAD_FIELD("limits.memory", "memory limit %" PRIu64 " bytes is not within 4M..1P", pol->memory_max);
    if (pol->pids_max && (pol->pids_max < 2 || pol->pids_max > 4194304))
        BAD_FIELD("limits.pids", "pids limit %" PRIu64 " is not within 2..4194304", pol->pids_max);
    if (pol->cpu_milli && (pol->cpu_milli < 10 || pol->cpu_milli > 1024000))
        BAD_FIELD("limits.cpus", "cpus %" PRIu32 "/1000 is not within 0.01..1024", pol->cpu_milli);
    if (pol->cpu_time_ms > year_ms)
        BAD_FIELD("limits.cpu_time", "cpu time %" PRIu64 " ms is more than 366 days", pol->cpu_time_ms);
    if (pol->output_limit > (1ULL << 40))
        BAD_FIELD("limits.output", "output limit %" PRIu64 " bytes is more than 1T", pol->output_limit);
    if (pol->rlimit_fsize == 0 || pol->rlimit_fsize > (1ULL << 50))
        BAD_FIELD("limits.file_size", "file size limit %" PRIu64 " bytes is not within 1..1P", pol->rlimit_fsize);
    if (pol->rlimit_nofile < 16 || pol->rlimit_nofile > 1048576)
        BAD_FIELD("limits.open_files", "open files limit must be within 16..1048576");
    if (pol->tmp_size != AJ_TMP_SIZE_AUTO && (pol->tmp_size < 4096 || pol->tmp_size > (1ULL << 50)))
        BAD_FIELD("filesystem.tmp_size", "tmp size must be within 4K..1P");
    if (pol->alert_timeout_ms == 0 || pol->alert_timeout_ms > 3600ULL * 1000)
        BAD_FIELD("detection.alert_timeout", "alert timeout %" PRIu64 " ms is not within 1ms..1h",
                  pol->alert_timeout_ms);
    if (pol->required_limits & ~(uint32_t)(AJ_LIMIT_MEMORY | AJ_LIMIT_PIDS | AJ_LIMIT_CPUS | AJ_LIMIT_CPU_TIME))
        BAD_FIELD("limits.require_cgroup", "required_limits 0x%" PRIx32 " names an unknown limit",
                  pol->required_limits);
    if ((pol->n_binds && !pol->binds) || (pol->n_tmpfs && !pol->tmpfs) || (pol->n_env && !pol->env) ||
        (pol->n_env_pass && !pol->env_pass))
        BAD_FIELD("", "a list's count is set but its array is NULL");
    for (size_t i = 0; i < pol->n_binds; i++) {
        const struct aj_bind *b = &pol->binds[i];
        if (!b->host || b->host[0] != '/' || !b->sandbox || b->sandbox[0] != '/') {
            BAD_KEY("filesystem.binds[%zu]", i);
            return aj_err(err, 0, "bind %zu: host and sandbox paths must be absolute", i);
        }
        {
            int r = check_host_source(b->host, b->rw ? "--bind-rw" : "--bind-ro", err);
            if (r == 0)
                r = check_bind_target(b->sandbox, b->rw, b->rw ? "--bind-rw" : "--bind-ro", err);
            if (r < 0) {
                BAD_KEY("filesystem.binds[%zu]", i);
                return r;
            }
        }
        /* The owner of what a run writes on the host (an id-mapped mount):
         * never root (the sandbox could leave root-owned setuid files for
         * the host) and never a per-run uid (another run's). */
        if (b->owner_set && !b->rw) {
            BAD_KEY("filesystem.binds[%zu].owner", i);
            return aj_err(err, 0, "--bind-ro %s: 'owner' applies to writable binds only (mode \"rw\")", b->host);
        }
        if (b->owner_set && (b->owner_uid == 0 || b->owner_gid == 0)) {
            BAD_KEY("filesystem.binds[%zu].owner", i);
            return aj_err(err, 0, "--bind-rw %s: owner %u:%u is root's; a workspace owner must be a normal user "
                          "and group (what the sandbox writes lands as them on the host, setuid bits included)",
                          b->host, b->owner_uid, b->owner_gid);
        }
        if (b->owner_set && (b->owner_uid - pol->uid_base < pol->uid_count ||
                             b->owner_gid - pol->uid_base < pol->uid_count)) {
            BAD_KEY("filesystem.binds[%zu].owner", i);
            return aj_err(err, 0, "--bind-rw %s: owner %u:%u lies in the per-run uid range (%u, %u ids), which "
                          "sandbox runs get; pick an id outside it", b->host, b->owner_uid, b->owner_gid,
                          pol->uid_base, pol->uid_count);
        }
    }
    for (size_t i = 0; i < pol->n_tmpfs; i++) {
        const struct aj_tmpfs *t = &pol->tmpfs[i];
        if (!t->path || t->path[0] != '/' || t->size < 4096 || t->size > (1ULL << 50) ||
            (strcmp(t->path, "/tmp") != 0 && check_sandbox_path(t->path, "--tmpfs", err) < 0)) {
            BAD_KEY("filesystem.tmpfs[%zu]", i);
            return aj_err(err, 0, "tmpfs %zu: '%s' must be an absolute path agentjail does not build, size 4K..1P",
                          i, t->path ? t->path : "(null)");
        }
    }
    for (size_t i = 0; i < pol->n_env; i++) {
        const char *eq = pol->env[i] ? strchr(pol->env[i], '=') : NULL;
        if (!eq || !valid_env_name(pol->env[i], (size_t)(eq - pol->env[i]))) {
            BAD_KEY("environment.set[%zu]", i);
            return aj_err(err, 0, "environment entry %zu is not NAME=VALUE", i);
        }
    }
    for (size_t i = 0; i < pol->n_env_pass; i++)
        if (!pol->env_pass[i] || !valid_env_name(pol->env_pass[i], strlen(pol->env_pass[i]))) {
            BAD_KEY("environment.pass[%zu]", i);
            return aj_err(err, 0, "environment pass entry %zu is not a variable name", i);
        }
    return 0;
}
#undef BAD_FIELD

int aj_policy_validate_at(const struct aj_policy *pol, char *ret_key, size_t key_size,
                          struct aj_error *err)
{
    struct stat st;
    int r;

    BAD_KEY("%s", "");
    r = validate_fields(pol, ret_key, key_size, err);
    if (r < 0)
        return r;
    for (size_t i = 0; i < pol->n_binds; i++) {
        const struct aj_bind *b = &pol->binds[i];
        /* Existence only, for an early clear error. The mount layer resolves
         * the path again, once, and uses the fd (no check-then-use). */
        if (stat(b->host, &st) < 0) {
            BAD_KEY("filesystem.binds[%zu].host", i);
            return aj_err(err, errno, "%s: host path %s", b->rw ? "--bind-rw" : "--bind-ro", b->host);
        }
        {
            /* The refused sources, once more on where the path leads (a
             * symlink to /proc, say). The mount layer checks the opened
             * source again by fd; this is for a clear early error. */
            char *real = realpath(b->host, NULL);
            r = real && strcmp(real, b->host) != 0 ? check_host_source(real, b->rw ? "--bind-rw" : "--bind-ro", err) : 0;
            free(real);
            if (r < 0) {
                BAD_KEY("filesystem.binds[%zu].host", i);
                return r;
            }
        }
        for (size_t j = 0; j < i; j++) {
            const struct aj_bind *o = &pol->binds[j];
            if (strcmp(o->sandbox, b->sandbox) == 0) {
                BAD_KEY("filesystem.binds[%zu].sandbox", i);
                return aj_err(err, 0, "binds %s and %s both target %s; keep one", o->host, b->host,
                              b->sandbox);
            }
            /* A rw bind nested inside a ro one would reopen for writing
             * what the ro bind promised to protect, whichever is listed
             * first (mounts are made parents first). */
            const struct aj_bind *inner = NULL, *outer = NULL;
            if (b->rw && !o->rw && path_is_or_under(b->sandbox, o->sandbox))
                inner = b, outer = o;
            else if (o->rw && !b->rw && path_is_or_under(o->sandbox, b->sandbox))
                inner = o, outer = b;
            if (inner) {
                BAD_KEY("filesystem.binds[%zu].sandbox", i);
                return aj_err(err, 0,
                              "--bind-rw %s lies under the read-only bind %s; a writable path "
                              "inside a read-only bind is not allowed",
                              inner->sandbox, outer->sandbox);
            }
        }
    }
    /* /var/run holds the decoys (a tmpfs of agentjail's): a bind or tmpfs
     * there would be hidden by it, or would hide them. */
    for (size_t i = 0; pol->decoys && i < pol->n_binds; i++)
        if (path_is_or_under(pol->binds[i].sandbox, "/var/run")) {
            BAD_KEY("filesystem.binds[%zu].sandbox", i);
            return aj_err(err, 0, "%s is under /var/run, where the decoys live; choose another path or turn "
                          "decoys off (--no-decoys, detection.decoys: false)", pol->binds[i].sandbox);
        }
    for (size_t i = 0; pol->decoys && i < pol->n_tmpfs; i++)
        if (path_is_or_under(pol->tmpfs[i].path, "/var/run")) {
            BAD_KEY("filesystem.tmpfs[%zu].path", i);
            return aj_err(err, 0, "%s is under /var/run, where the decoys live; choose another path or turn "
                          "decoys off (--no-decoys, detection.decoys: false)", pol->tmpfs[i].path);
        }
    for (size_t i = 0; i < pol->n_tmpfs; i++)
        for (size_t j = 0; j < pol->n_binds; j++)
            if (strcmp(pol->tmpfs[i].path, pol->binds[j].sandbox) == 0) {
                BAD_KEY("filesystem.tmpfs[%zu].path", i);
                return aj_err(err, 0, "--tmpfs %s and a bind both target %s", pol->tmpfs[i].path,
                              pol->tmpfs[i].path);
            }
    if (pol->workdir && pol->workdir[0] != '/') {
        BAD_KEY("filesystem.workdir");
        return aj_err(err, 0, "--workdir: '%s' is not an absolute path", pol->workdir);
    }
    if (pol->hostname) {
        size_t n = strlen(pol->hostname);
        BAD_KEY("identity.hostname");
        if (n == 0 || n > 63)
            return aj_err(err, 0, "--hostname: must be 1..63 characters");
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)pol->hostname[i];
            if (!(isalnum(c) || c == '-' || c == '.'))
                return aj_err(err, 0, "--hostname: '%s' may contain only letters, digits, '-' and '.'",
                              pol->hostname);
        }
    }
    BAD_KEY("%s", "");
    return 0;
}

int aj_policy_sha256(const struct aj_policy *pol, char ret_hex[65], struct aj_error *err)
{
    _cleanup_free_ char *json = aj_policy_to_json(pol, true);
    unsigned char md[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    static const char hex[] = "0123456789abcdef";

    if (!json)
        return aj_err(err, ENOMEM, "canonical policy json");
    /* nettle, not OpenSSL: same digest, without OpenSSL's provider set-up
     * (~0.8 ms per process, paid on every sandbox start). */
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(json), (const uint8_t *)json);
    sha256_digest(&ctx, sizeof(md), md);
    for (unsigned i = 0; i < 32; i++) {
        ret_hex[2 * i] = hex[md[i] >> 4];
        ret_hex[2 * i + 1] = hex[md[i] & 0xf];
    }
    ret_hex[64] = '\0';
    return 0;
}
