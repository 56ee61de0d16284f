/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-policy validation, whoever filled the policy: the setters check
 * each value as it comes, but the library's own callers fill the struct
 * directly (uid_base = 0 would run the sandbox as host root), so every run
 * and pool checks it all once more here. Single-key bounds come from the
 * key table (min, max, the enum's names); what involves two keys or the
 * host's file system is code below. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aj_policy_model.h"
#include "aj_util.h"

int aj_policy_validate(const struct aj_policy *pol, struct aj_error *err)
{
    return aj_policy_validate_at(pol, NULL, 0, err);
}

#define BAD_KEY(...)                                                                               \
    do {                                                                                           \
        if (ret_key)                                                                               \
            (void)snprintf(ret_key, key_size, __VA_ARGS__);                                        \
    } while (0)

#define BAD_FIELD(key, ...)                                                                        \
    do {                                                                                           \
        BAD_KEY("%s", key);                                                                        \
        return aj_err(err, 0, __VA_ARGS__);                                                        \
    } while (0)

/* A scalar against its row: 0 passes where it means "none" or "auto". */
static int check_scalar(const struct aj_policy *pol, const struct aj_policy_key *k, char *ret_key, size_t key_size,
                        struct aj_error *err)
{
    uint64_t v = aj_policy_key_get(pol, k);
    char sv[32], smin[32], smax[32];

    if (v == 0 && k->zero != AJ_ZERO_VALUE)
        return 0;
    if (v >= k->min && v <= k->max)
        return 0;
    aj_policy_key_format(k, v, sv, sizeof(sv));
    aj_policy_key_format(k, k->min, smin, sizeof(smin));
    aj_policy_key_format(k, k->max, smax, sizeof(smax));
    if (k->min == 0 && k->zero == AJ_ZERO_NONE) /* "none" is not a bound */
        (void)snprintf(smin, sizeof(smin), "0");
    BAD_FIELD(k->key, "%s %s is not within %s..%s", k->what, sv, smin, smax);
}

static int check_enum(const struct aj_policy *pol, const struct aj_policy_key *k, char *ret_key, size_t key_size,
                      struct aj_error *err)
{
    uint64_t v = aj_policy_key_get(pol, k);
    char list[160] = "";

    if (v <= k->max && k->names[v])
        return 0;
    for (size_t i = 0; k->names[i]; i++)
        if (strlen(list) + strlen(k->names[i]) + 3 < sizeof(list)) {
            if (i)
                strcat(list, ", ");
            strcat(list, k->names[i]);
        }
    BAD_FIELD(k->key, "%s %" PRIu64 " is not one of: %s", k->what, v, list);
}

static int check_binds(const struct aj_policy *pol, char *ret_key, size_t key_size, struct aj_error *err)
{
    for (size_t i = 0; i < pol->n_binds; i++) {
        const struct aj_bind *b = &pol->binds[i];
        int r;

        if (!b->host || b->host[0] != '/' || !b->sandbox || b->sandbox[0] != '/') {
            BAD_KEY("filesystem.binds[%zu]", i);
            return aj_err(err, 0, "bind %zu: host and sandbox paths must be absolute", i);
        }
        r = aj_policy_check_host_source(b->host, b->rw ? "--bind-rw" : "--bind-ro", err);
        if (r == 0)
            r = aj_policy_check_bind_target(b->sandbox, b->rw, b->rw ? "--bind-rw" : "--bind-ro", err);
        if (r < 0) {
            BAD_KEY("filesystem.binds[%zu]", i);
            return r;
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
    return 0;
}

/* Every value against its row; the entries of lists against the rules
 * their setters apply. */
static int validate_fields(const struct aj_policy *pol, char *ret_key, size_t key_size, struct aj_error *err)
{
    int r = 0;

    if ((pol->n_binds && !pol->binds) || (pol->n_tmpfs && !pol->tmpfs) || (pol->n_env && !pol->env) ||
        (pol->n_env_pass && !pol->env_pass))
        BAD_FIELD("", "a list's count is set but its array is NULL");
    for (size_t ki = 0; r == 0 && ki < aj_policy_n_keys; ki++) {
        const struct aj_policy_key *k = &aj_policy_keys[ki];
        switch (k->type) {
        case AJ_KEY_COUNT:
        case AJ_KEY_ID:
        case AJ_KEY_SIZE:
        case AJ_KEY_DURATION:
        case AJ_KEY_CPUS:
            r = check_scalar(pol, k, ret_key, key_size, err);
            break;
        case AJ_KEY_ENUM:
            r = check_enum(pol, k, ret_key, key_size, err);
            break;
        case AJ_KEY_ID_RANGE:
            if (pol->uid_base < k->min || pol->uid_count == 0 || (uint64_t)pol->uid_base + pol->uid_count > k->max)
                BAD_FIELD(k->key,
                          "uid range %" PRIu32 ":%" PRIu32 " must be a non-empty range within 65536..4294967294 "
                          "(below 65536 live the host's own users)",
                          pol->uid_base, pol->uid_count);
            break;
        case AJ_KEY_LIMIT_SET: {
            uint32_t known = 0;
            for (size_t i = 0; i < AJ_ARRAY_SIZE(aj_limit_names); i++)
                known |= aj_limit_names[i].bit;
            if (pol->required_limits & ~known)
                BAD_FIELD(k->key, "required_limits 0x%" PRIx32 " names an unknown limit", pol->required_limits);
            break;
        }
        case AJ_KEY_BIND_LIST:
            r = check_binds(pol, ret_key, key_size, err);
            break;
        case AJ_KEY_TMPFS_LIST:
            for (size_t i = 0; i < pol->n_tmpfs; i++) {
                const struct aj_tmpfs *t = &pol->tmpfs[i];
                if (!t->path || t->path[0] != '/' || t->size < 4096 || t->size > (1ULL << 50) ||
                    (strcmp(t->path, "/tmp") != 0 && aj_policy_check_sandbox_path(t->path, "--tmpfs", err) < 0)) {
                    BAD_KEY("filesystem.tmpfs[%zu]", i);
                    return aj_err(err, 0, "tmpfs %zu: '%s' must be an absolute path agentjail does not build, "
                                  "size 4K..1P", i, t->path ? t->path : "(null)");
                }
            }
            break;
        case AJ_KEY_ENV_MAP:
            for (size_t i = 0; i < pol->n_env; i++) {
                const char *eq = pol->env[i] ? strchr(pol->env[i], '=') : NULL;
                if (!eq || !aj_policy_env_name_ok(pol->env[i], (size_t)(eq - pol->env[i]))) {
                    BAD_KEY("environment.set[%zu]", i);
                    return aj_err(err, 0, "environment entry %zu is not NAME=VALUE", i);
                }
            }
            break;
        case AJ_KEY_NAME_LIST:
            for (size_t i = 0; i < pol->n_env_pass; i++)
                if (!pol->env_pass[i] || !aj_policy_env_name_ok(pol->env_pass[i], strlen(pol->env_pass[i]))) {
                    BAD_KEY("environment.pass[%zu]", i);
                    return aj_err(err, 0, "environment pass entry %zu is not a variable name", i);
                }
            break;
        case AJ_KEY_STR_LIST: {
            char *const *v = *(char *const *const *)(const void *)((const char *)pol + k->offset);
            size_t n = *(const size_t *)(const void *)((const char *)pol + k->count_offset);
            if (n && !v)
                BAD_FIELD(k->key, "a list's count is set but its array is NULL");
            for (size_t i = 0; i < n; i++)
                if (!v[i] || (k->check && k->check(v[i], err) < 0)) {
                    BAD_KEY("%s[%zu]", k->key, i);
                    return v[i] ? -EINVAL : aj_err(err, EINVAL, "%s[%zu] is NULL", k->key, i);
                }
            break;
        }
        case AJ_KEY_SECRET_LIST:
            if (pol->n_secrets && !pol->secrets)
                BAD_FIELD(k->key, "a list's count is set but its array is NULL");
            if (pol->n_secrets > AJ_MAX_SECRETS)
                BAD_FIELD(k->key, "at most %d secrets", AJ_MAX_SECRETS);
            for (size_t i = 0; i < pol->n_secrets; i++) {
                const char *member = "id";
                if (aj_policy_check_secret(&pol->secrets[i], &member, err) < 0) {
                    BAD_KEY("secrets[%zu].%s", i, member);
                    return -EINVAL;
                }
                for (size_t j = 0; j < i; j++)
                    if (strcmp(pol->secrets[j].id, pol->secrets[i].id) == 0) {
                        BAD_KEY("secrets[%zu].id", i);
                        return aj_err(err, 0, "secret id '%s' is given twice", pol->secrets[i].id);
                    }
            }
            break;
        case AJ_KEY_MODULE_LIST:
            if (pol->n_preload > AJ_INTERP_MAX_PRELOAD) {
                BAD_KEY("%s", "interpreter.preload");
                return aj_err(err, 0, "interpreter.preload: at most %d modules", AJ_INTERP_MAX_PRELOAD);
            }
            for (size_t i = 0; i < pol->n_preload; i++)
                if (!aj_policy_module_name_ok(pol->preload[i])) {
                    BAD_KEY("interpreter.preload[%zu]", i);
                    return aj_err(err, 0, "interpreter.preload entry %zu is not a module name", i);
                }
            if (pol->n_preload && pol->interp_lang == AJ_INTERP_NONE) {
                BAD_KEY("%s", "interpreter.preload");
                return aj_err(err, 0, "interpreter.preload needs interpreter.language (\"python\")");
            }
            break;
        case AJ_KEY_BOOL:
        case AJ_KEY_STRING: /* workdir, hostname and warmup: below, with the cross-key checks */
        case AJ_KEY_CONST:
            break;
        }
    }
    return r;
}
#undef BAD_FIELD

/* network.mode "proxy" and what only it uses: an allow-list or a secret
 * in another mode would be a promise nothing keeps. A secret's real value
 * must not reach the sandbox by another way (environment.pass of the same
 * variable), and its placeholder must not collide with what the policy
 * sets itself. */
static int validate_network(const struct aj_policy *pol, char *ret_key, size_t key_size, struct aj_error *err)
{
    if (pol->net_resolver) {
        const char *colon = strrchr(pol->net_resolver, ':');
        char host[64];
        unsigned char a[16];
        uint64_t port;
        size_t n = colon ? (size_t)(colon - pol->net_resolver) : 0;
        bool ok = colon && n > 0 && n < sizeof(host) && aj_parse_u64(colon + 1, 65535, &port) == 0 && port > 0;
        if (ok) {
            memcpy(host, pol->net_resolver, n);
            host[n] = '\0';
            if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
                host[n - 1] = '\0';
                ok = inet_pton(AF_INET6, host + 1, a) == 1;
            } else {
                ok = inet_pton(AF_INET, host, a) == 1;
            }
        }
        if (!ok) {
            BAD_KEY("network.resolver");
            return aj_err(err, 0, "network.resolver '%s' is not IP:PORT (e.g. 10.0.0.2:53, [fd00::2]:53)",
                          pol->net_resolver);
        }
    }
    if (pol->network != AJ_NET_PROXY) {
        /* (proxy_port, resolver and the caps have defaults, unused
         * outside "proxy": a profile may set them for every mode.) */
        static const char *const only[] = {"network.allow", "network.deny", "network.allow_ranges", "secrets"};
        size_t n[] = {pol->n_net_allow, pol->n_net_deny, pol->n_net_allow_ranges, pol->n_secrets};
        for (size_t i = 0; i < AJ_ARRAY_SIZE(only); i++)
            if (n[i]) {
                BAD_KEY("%s", only[i]);
                return aj_err(err, 0, "%s needs network.mode \"proxy\" (--network proxy); the mode is "
                              "\"%s\"", only[i], pol->network == AJ_NET_NONE ? "none" : "loopback");
            }
        return 0;
    }
    for (size_t i = 0; i < pol->n_secrets; i++) {
        const struct aj_secret *s = &pol->secrets[i];
        const char *from = strncmp(s->value_from, "env:", 4) == 0 ? s->value_from + 4 : NULL;
        for (size_t j = 0; from && j < pol->n_env_pass; j++)
            if (strcmp(pol->env_pass[j], from) == 0) {
                BAD_KEY("secrets[%zu].value_from", i);
                return aj_err(err, 0, "secret '%s' is read from %s, which environment.pass also hands to the "
                              "sandbox: its real value would be inside; drop it from environment.pass", s->id, from);
            }
        for (size_t j = 0; s->env && j < pol->n_env; j++) {
            size_t k = strcspn(pol->env[j], "=");
            if (strlen(s->env) == k && strncmp(pol->env[j], s->env, k) == 0) {
                BAD_KEY("secrets[%zu].env", i);
                return aj_err(err, 0, "secret '%s': environment.set also sets %s; the placeholder goes there",
                              s->id, s->env);
            }
        }
        for (size_t j = 0; s->env && j < pol->n_env_pass; j++)
            if (strcmp(pol->env_pass[j], s->env) == 0) {
                BAD_KEY("secrets[%zu].env", i);
                return aj_err(err, 0, "secret '%s': environment.pass also hands in %s; the placeholder goes "
                              "there", s->id, s->env);
            }
        for (size_t j = 0; j < i; j++)
            if ((s->env && pol->secrets[j].env && strcmp(s->env, pol->secrets[j].env) == 0) ||
                (s->file && pol->secrets[j].file && strcmp(s->file, pol->secrets[j].file) == 0)) {
                BAD_KEY("secrets[%zu].%s", i, s->env && pol->secrets[j].env && strcmp(s->env, pol->secrets[j].env) == 0
                                                  ? "env" : "file");
                return aj_err(err, 0, "secrets '%s' and '%s' put their placeholders in the same place",
                              pol->secrets[j].id, s->id);
            }
        for (size_t j = 0; s->file && j < pol->n_binds; j++)
            if (aj_policy_path_is_or_under(s->file, pol->binds[j].sandbox)) {
                BAD_KEY("secrets[%zu].file", i);
                return aj_err(err, 0, "secret '%s': file %s lies in the bind %s; choose a path agentjail "
                              "makes", s->id, s->file, pol->binds[j].sandbox);
            }
    }
    if (pol->allow_degraded) {
        BAD_KEY("network.mode");
        return aj_err(err, 0, "network.mode \"proxy\" needs a network namespace, and degraded.allow would "
                      "run without one; drop one of them");
    }
    return 0;
}

bool aj_policy_host_paths_unseen;

int aj_policy_validate_at(const struct aj_policy *pol, char *ret_key, size_t key_size,
                          struct aj_error *err)
{
    struct stat st;
    int r;

    BAD_KEY("%s", "");
    r = validate_fields(pol, ret_key, key_size, err);
    if (r < 0)
        return r;
    for (size_t i = 0; !aj_policy_host_paths_unseen && i < pol->n_binds; i++) {
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
            r = real && strcmp(real, b->host) != 0
                    ? aj_policy_check_host_source(real, b->rw ? "--bind-rw" : "--bind-ro", err)
                    : 0;
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
            if (b->rw && !o->rw && aj_policy_path_is_or_under(b->sandbox, o->sandbox))
                inner = b, outer = o;
            else if (o->rw && !b->rw && aj_policy_path_is_or_under(o->sandbox, b->sandbox))
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
        if (aj_policy_path_is_or_under(pol->binds[i].sandbox, "/var/run")) {
            BAD_KEY("filesystem.binds[%zu].sandbox", i);
            return aj_err(err, 0, "%s is under /var/run, where the decoys live; choose another path or turn "
                          "decoys off (--no-decoys, detection.decoys: false)", pol->binds[i].sandbox);
        }
    for (size_t i = 0; pol->decoys && i < pol->n_tmpfs; i++)
        if (aj_policy_path_is_or_under(pol->tmpfs[i].path, "/var/run")) {
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
    r = validate_network(pol, ret_key, key_size, err);
    if (r < 0)
        return r;
    if (pol->workdir && pol->workdir[0] != '/') {
        BAD_KEY("filesystem.workdir");
        return aj_err(err, 0, "--workdir: '%s' is not an absolute path", pol->workdir);
    }
    if (pol->interp_warmup) {
        BAD_KEY("interpreter.warmup");
        if (pol->interp_lang == AJ_INTERP_NONE)
            return aj_err(err, 0, "interpreter.warmup needs interpreter.language (\"python\")");
        if (strlen(pol->interp_warmup) > AJ_INTERP_MAX_WARMUP)
            return aj_err(err, 0, "interpreter.warmup: at most %d bytes of code", AJ_INTERP_MAX_WARMUP);
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
