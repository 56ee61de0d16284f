/* SPDX-License-Identifier: Apache-2.0 */
/* The server's config file: strict JSON, as policy files are. An unknown
 * key, a wrong type or a value out of range is one line naming
 * FILE:LINE:COL and the key, and the server does not start. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "srv.h"
#include "srv_textpos.h"

#define CONFIG_MAX_BYTES (1 << 20)

struct cfg_loader {
    const char *name;
    struct srv_pos_index idx;
    char *msg;
    size_t msg_size;
};

static int cfg_fail(struct cfg_loader *L, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cfg_fail(struct cfg_loader *L, const char *path, const char *fmt, ...)
{
    const struct srv_pos_entry *e = srv_pos_find(&L->idx, path);
    char what[1024], shown[300];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    /* One line, whatever a key holds: control characters show as '?'. */
    (void)snprintf(shown, sizeof(shown), "%s", path);
    for (char *p = shown; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    path = shown;
    if (e)
        (void)snprintf(L->msg, L->msg_size, "%s:%d:%d: %s: %s", L->name, e->line, e->col, path, what);
    else
        (void)snprintf(L->msg, L->msg_size, "%s: %s: %s", L->name, path, what);
    return -1;
}

static char *read_all(const char *path, size_t *len, char *msg, size_t msg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    char *buf = NULL;
    size_t n = 0;

    if (fd < 0) {
        (void)snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX_BYTES) {
        (void)snprintf(msg, msg_size, "%s: not a regular file of at most 1 MiB", path);
        goto fail;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        (void)snprintf(msg, msg_size, "%s: out of memory", path);
        goto fail;
    }
    while (n < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            (void)snprintf(msg, msg_size, "%s: read: %s", path, k < 0 ? strerror(errno) : "short read");
            goto fail;
        }
        n += (size_t)k;
    }
    buf[n] = '\0';
    *len = n;
    (void)close(fd);
    return buf;
fail:
    free(buf);
    (void)close(fd);
    return NULL;
}

static int get_string(struct cfg_loader *L, const char *path, json_t *v, char **ret)
{
    if (!json_is_string(v))
        return cfg_fail(L, path, "must be a string");
    if (strlen(json_string_value(v)) != json_string_length(v) || !json_string_length(v))
        return cfg_fail(L, path, "must be a non-empty string without NUL bytes");
    free(*ret);
    *ret = strdup(json_string_value(v));
    if (!*ret)
        return cfg_fail(L, path, "out of memory");
    return 0;
}

static int get_uint(struct cfg_loader *L, const char *path, json_t *v, uint64_t min, uint64_t max, uint64_t *ret)
{
    if (!json_is_integer(v))
        return cfg_fail(L, path, "must be an integer");
    if (json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) < min ||
        (uint64_t)json_integer_value(v) > max)
        return cfg_fail(L, path, "must be between %llu and %llu", (unsigned long long)min,
                        (unsigned long long)max);
    *ret = (uint64_t)json_integer_value(v);
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "interpreters": [{"language": "python", "preload": [MODULE...], "warmup": CODE, "pool": N}].
 * The module names and the code's size are checked when the policy is built (tenant.c). */
static int load_interpreters(struct cfg_loader *L, const char *path, json_t *v, struct srv_interp *out)
{
    char p[400];
    size_t i;
    json_t *e;

    if (!json_is_array(v))
        return cfg_fail(L, path, "must be an array of {\"language\": \"python\", \"preload\": [...], "
                        "\"warmup\": CODE, \"pool\": N}");
    out->set = true;
    json_array_foreach(v, i, e) {
        const char *key;
        json_t *m;
        uint64_t u = 2;
        bool lang = false;
        (void)snprintf(p, sizeof(p), "%s[%zu]", path, i);
        if (!json_is_object(e))
            return cfg_fail(L, p, "must be an object {\"language\", \"preload\", \"warmup\", \"pool\"}");
        if (out->python)
            return cfg_fail(L, p, "python is given twice (one entry per language)");
        out->pool = 2;
        json_object_foreach(e, key, m) {
            (void)snprintf(p, sizeof(p), "%s[%zu].%s", path, i, key);
            if (strcmp(key, "language") == 0) {
                if (!json_is_string(m) || strcmp(json_string_value(m), "python") != 0)
                    return cfg_fail(L, p, "must be \"python\" (the only interpreter there is)");
                lang = true;
            } else if (strcmp(key, "preload") == 0) {
                size_t k;
                json_t *s;
                if (!json_is_array(m) || json_array_size(m) > 64)
                    return cfg_fail(L, p, "must be an array of at most 64 module names");
                out->preload = calloc(json_array_size(m) + 1, sizeof(char *));
                if (!out->preload)
                    return cfg_fail(L, p, "out of memory");
                json_array_foreach(m, k, s) {
                    (void)snprintf(p, sizeof(p), "%s[%zu].preload[%zu]", path, i, k);
                    if (!json_is_string(s))
                        return cfg_fail(L, p, "must be a module name");
                    out->preload[out->n_preload] = strdup(json_string_value(s));
                    if (!out->preload[out->n_preload++])
                        return cfg_fail(L, p, "out of memory");
                }
            } else if (strcmp(key, "warmup") == 0) {
                if (!json_is_string(m) || !json_string_length(m))
                    return cfg_fail(L, p, "must be Python code (a non-empty string)");
                if (strlen(json_string_value(m)) != json_string_length(m))
                    return cfg_fail(L, p, "must not contain a NUL character");
                free(out->warmup);
                out->warmup = strdup(json_string_value(m));
                if (!out->warmup)
                    return cfg_fail(L, p, "out of memory");
            } else if (strcmp(key, "pool") == 0) {
                if (get_uint(L, p, m, 0, 64, &u) < 0)
                    return -1;
                out->pool = (unsigned)u;
            } else {
                return cfg_fail(L, p, "unknown key (known: language, preload, warmup, pool)");
            }
        }
        if (!lang) {
            (void)snprintf(p, sizeof(p), "%s[%zu]", path, i);
            return cfg_fail(L, p, "\"language\" is required");
        }
        out->python = true;
    }
    return 0;
}

static void interp_clear(struct srv_interp *in)
{
    for (size_t i = 0; i < in->n_preload; i++)
        free(in->preload[i]);
    free(in->preload);
    free(in->warmup);
    *in = (struct srv_interp){0};
}

static int load_tenant(struct cfg_loader *L, const char *name, json_t *obj, struct srv_tenant *t)
{
    char path[300];
    const char *key;
    json_t *v;
    uint64_t u = 0;
    bool have_token = false;

    (void)snprintf(path, sizeof(path), "tenants.%s", name);
    if (!json_is_object(obj))
        return cfg_fail(L, path, "must be an object");
    bool ctrl = false;
    for (const char *p = name; *p; p++)
        ctrl |= (unsigned char)*p < 0x20 || *p == 0x7f;
    if (!name[0] || strlen(name) > 64 || strpbrk(name, ".[]\"\\/") || ctrl)
        return cfg_fail(L, path, "a tenant name is 1 to 64 characters, none of . [ ] \" \\ / or a control "
                                 "character");
    t->name = strdup(name);
    if (!t->name)
        return cfg_fail(L, path, "out of memory");
    json_object_foreach(obj, key, v) {
        (void)snprintf(path, sizeof(path), "tenants.%s.%s", name, key);
        if (strcmp(key, "token_sha256") == 0) {
            const char *hex = json_string_value(v);
            if (!json_is_string(v) || json_string_length(v) != 64)
                return cfg_fail(L, path, "must be a string of 64 hex digits (sha256 of the token)");
            for (size_t i = 0; i < 32; i++) {
                int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
                if (hi < 0 || lo < 0)
                    return cfg_fail(L, path, "must be a string of 64 hex digits (sha256 of the token)");
                t->token_sha256[i] = (uint8_t)(hi << 4 | lo);
            }
            have_token = true;
        } else if (strcmp(key, "policy") == 0) {
            if (get_string(L, path, v, &t->policy_path) < 0)
                return -1;
        } else if (strcmp(key, "profile") == 0) {
            if (get_string(L, path, v, &t->profile) < 0)
                return -1;
        } else if (strcmp(key, "max_runs") == 0) {
            if (get_uint(L, path, v, 1, SRV_MAX_RUNS, &u) < 0)
                return -1;
            t->max_runs = (unsigned)u;
            t->set_max_runs = true;
        } else if (strcmp(key, "max_runs_per_minute") == 0) {
            if (get_uint(L, path, v, 0, 1000000, &u) < 0)
                return -1;
            t->max_runs_per_minute = (unsigned)u;
            t->set_rate = true;
        } else if (strcmp(key, "max_timeout") == 0) {
            if (get_uint(L, path, v, 1, 86400, &u) < 0)
                return -1;
            t->max_timeout_ms = u * 1000;
            t->set_timeout = true;
        } else if (strcmp(key, "pool_size") == 0) {
            if (get_uint(L, path, v, 0, 64, &u) < 0)
                return -1;
            t->pool_size = (unsigned)u;
            t->set_pool = true;
        } else if (strcmp(key, "interpreters") == 0) {
            interp_clear(&t->interp);
            if (load_interpreters(L, path, v, &t->interp) < 0)
                return -1;
        } else if (strcmp(key, "uid_base") == 0) {
            /* Below 65536 live the host's real users (the policy's own bound). */
            if (get_uint(L, path, v, 65536, 0xfffffffeU, &u) < 0)
                return -1;
            t->uid_base = (uint32_t)u;
            t->set_uid = true;
        } else if (strcmp(key, "uid_count") == 0) {
            if (get_uint(L, path, v, 1, 0xfffffffeU - 65536, &u) < 0)
                return -1;
            t->uid_count = (uint32_t)u;
            t->set_uid = true;
        } else {
            return cfg_fail(L, path, "unknown key (a tenant has: token_sha256, policy, profile, max_runs, "
                                     "max_runs_per_minute, max_timeout, pool_size, interpreters, uid_base, "
                                     "uid_count)");
        }
    }
    if (t->set_uid && (!t->uid_base || !t->uid_count)) {
        (void)snprintf(path, sizeof(path), "tenants.%s.%s", name, t->uid_base ? "uid_count" : "uid_base");
        return cfg_fail(L, path, "uid_base and uid_count go together");
    }
    if (t->set_uid && (uint64_t)t->uid_base + t->uid_count > 0xfffffffeU) {
        (void)snprintf(path, sizeof(path), "tenants.%s.uid_count", name);
        return cfg_fail(L, path, "the range ends past 4294967294");
    }
    if (!have_token) {
        (void)snprintf(path, sizeof(path), "tenants.%s", name);
        return cfg_fail(L, path, "token_sha256 is required");
    }
    return 0;
}

/* "mcp": {"allowed_origins": ["https://HOST[:PORT]", "http://localhost:*", ...]}:
 * the browser origins /mcp serves, instead of loopback ones only. */
#define CFG_MAX_ORIGINS 64
static int load_mcp(struct cfg_loader *L, json_t *obj, struct srv_config *cfg)
{
    char path[300];
    const char *key;
    json_t *v;

    if (!json_is_object(obj))
        return cfg_fail(L, "mcp", "must be an object {\"allowed_origins\": [...]}");
    json_object_foreach(obj, key, v) {
        (void)snprintf(path, sizeof(path), "mcp.%.200s", key);
        if (strcmp(key, "allowed_origins") != 0)
            return cfg_fail(L, path, "unknown key (known: allowed_origins)");
        if (!json_is_array(v) || json_array_size(v) > CFG_MAX_ORIGINS)
            return cfg_fail(L, path, "must be an array of at most %d origins such as \"https://app.example.com\" "
                            "or \"http://localhost:*\" ([] refuses every browser origin)", CFG_MAX_ORIGINS);
        free(cfg->mcp_origins);
        cfg->mcp_origins = calloc(json_array_size(v) + 1, sizeof(*cfg->mcp_origins));
        if (!cfg->mcp_origins)
            return cfg_fail(L, path, "out of memory");
        cfg->n_mcp_origins = 0;
        cfg->mcp_origins_set = true;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            const char *why = NULL;
            struct srv_origin *o = &cfg->mcp_origins[cfg->n_mcp_origins];
            (void)snprintf(path, sizeof(path), "mcp.allowed_origins[%zu]", i);
            if (!json_is_string(e) || strlen(json_string_value(e)) != json_string_length(e))
                return cfg_fail(L, path, "must be a string: scheme://host[:port]");
            if (strcmp(json_string_value(e), "*") == 0 || strcmp(json_string_value(e), "null") == 0)
                return cfg_fail(L, path, "\"%s\" is not allowed: it would let any web page drive the server "
                                "(DNS rebinding); name the origins", json_string_value(e));
            if (srv_origin_parse(json_string_value(e), true, o, &why) < 0)
                return cfg_fail(L, path, "%s", why);
            for (size_t j = 0; j < cfg->n_mcp_origins; j++)
                if (srv_origin_match(&cfg->mcp_origins[j], o) && cfg->mcp_origins[j].port == o->port)
                    return cfg_fail(L, path, "the same origin as mcp.allowed_origins[%zu]", j);
            cfg->n_mcp_origins++;
        }
    }
    return 0;
}

/* "sessions": {"max_per_tenant", "ttl", "idle_timeout", "workspace_quota",
 * "max_file_bytes", "max_outputs_bytes", "workspace_uids",
 * "workspace_backend"}. */
static int load_sessions(struct cfg_loader *L, json_t *obj, struct srv_config *cfg)
{
    char path[300];
    const char *key;
    json_t *v;
    uint64_t u = 0;

    if (!json_is_object(obj))
        return cfg_fail(L, "sessions", "must be an object");
    json_object_foreach(obj, key, v) {
        (void)snprintf(path, sizeof(path), "sessions.%s", key);
        if (strcmp(key, "max_per_tenant") == 0) {
            if (get_uint(L, path, v, 0, 1024, &u) < 0)
                return -1;
            cfg->max_sessions_per_tenant = (unsigned)u;
        } else if (strcmp(key, "ttl") == 0) {
            if (get_uint(L, path, v, 1, 30 * 86400, &u) < 0)
                return -1;
            cfg->session_ttl_ms = u * 1000;
        } else if (strcmp(key, "idle_timeout") == 0) {
            if (get_uint(L, path, v, 1, 30 * 86400, &u) < 0)
                return -1;
            cfg->session_idle_ms = u * 1000;
        } else if (strcmp(key, "workspace_quota") == 0) {
            if (get_uint(L, path, v, 65536, 1ull << 40, &u) < 0)
                return -1;
            cfg->workspace_quota = u;
        } else if (strcmp(key, "max_file_bytes") == 0) {
            if (get_uint(L, path, v, 1, 1ull << 40, &u) < 0)
                return -1;
            cfg->max_file_bytes = u;
        } else if (strcmp(key, "max_outputs_bytes") == 0) {
            if (get_uint(L, path, v, 0, 64u << 20, &u) < 0)
                return -1;
            cfg->max_outputs_bytes = u;
        } else if (strcmp(key, "workspace_uids") == 0) {
            const char *s = json_string_value(v), *colon = s ? strchr(s, ':') : NULL;
            uint64_t base = 0, count = 0;
            char b[16];
            if (!colon || (size_t)(colon - s) >= sizeof(b))
                return cfg_fail(L, path, "must be \"BASE:COUNT\" (host uids that own workspaces)");
            memcpy(b, s, (size_t)(colon - s));
            b[colon - s] = '\0';
            if (aj_parse_u64(b, 0xfffffffeu, &base) < 0 || aj_parse_u64(colon + 1, 1u << 20, &count) < 0 ||
                base < 65536 || count == 0 || base + count > 0xffffffffu)
                return cfg_fail(L, path, "must be \"BASE:COUNT\" with BASE at least 65536 (never a system or "
                                         "human account) and BASE+COUNT below 4294967295");
            cfg->ws_uid_base = (uint32_t)base;
            cfg->ws_uid_count = (uint32_t)count;
        } else if (strcmp(key, "workspace_backend") == 0) {
            const char *b = json_string_value(v);
            if (!b || (strcmp(b, "auto") != 0 && strcmp(b, "tmpfs") != 0 && strcmp(b, "ext4") != 0))
                return cfg_fail(L, path, "must be \"auto\" (id-mapped tmpfs where the kernel has it, else ext4 "
                                         "on a loop device), \"tmpfs\" or \"ext4\"");
            (void)snprintf(cfg->ws_backend, sizeof(cfg->ws_backend), "%s", b);
        } else {
            return cfg_fail(L, path, "unknown key (known: max_per_tenant, ttl, idle_timeout, workspace_quota, "
                                     "max_file_bytes, max_outputs_bytes, workspace_uids, workspace_backend)");
        }
    }
    return 0;
}

/* "store": the SQLite file (an absolute path), or a PostgreSQL database
 * shared by replicas: {"postgresql": CONNINFO, "state_dir": DIR}, DIR
 * holding what stays on the replica (its runs' events, its sessions'
 * workspaces). The conninfo (key=value or a postgresql:// URI) may not
 * hold a password: the config is no secret (a ConfigMap); libpq takes it
 * from passfile=, PGPASSFILE or ~/.pgpass, or PGPASSWORD. */
static int load_store(struct cfg_loader *L, json_t *v, struct srv_config *cfg)
{
    const char *key;
    char *dir = NULL;
    json_t *e;
    int rc = -1;

    if (json_is_string(v)) {
        if (get_string(L, "store", v, &cfg->store) < 0)
            return -1;
        if (strncmp(cfg->store, "postgres://", 11) == 0 || strncmp(cfg->store, "postgresql://", 13) == 0)
            return cfg_fail(L, "store",
                            "a PostgreSQL store is {\"postgresql\": CONNINFO, \"state_dir\": DIR} (DIR: where "
                            "this replica keeps its events and workspaces)");
        if (cfg->store[0] != '/')
            return cfg_fail(L, "store", "must be an absolute path (the SQLite file) or {\"postgresql\": ...}");
        return 0;
    }
    if (!json_is_object(v))
        return cfg_fail(L, "store", "must be a path (SQLite) or {\"postgresql\": CONNINFO, \"state_dir\": DIR}");
    json_object_foreach(v, key, e) {
        if (strcmp(key, "postgresql") == 0) {
            char why[512];
            if (get_string(L, "store.postgresql", e, &cfg->store_pg) < 0)
                goto out;
            if (srv_store_pg_check_conninfo(cfg->store_pg, why, sizeof(why))) {
                (void)cfg_fail(L, "store.postgresql", "%s", why);
                goto out;
            }
        } else if (strcmp(key, "state_dir") == 0) {
            if (get_string(L, "store.state_dir", e, &dir) < 0)
                goto out;
            if (!dir || dir[0] != '/') {
                (void)cfg_fail(L, "store.state_dir", "must be an absolute path");
                goto out;
            }
        } else {
            (void)cfg_fail(L, "store", "unknown key %s (known: postgresql, state_dir)", key);
            goto out;
        }
    }
    if (!cfg->store_pg || !dir) {
        (void)cfg_fail(L, "store", "needs both \"postgresql\" (the conninfo) and \"state_dir\"");
        goto out;
    }
    free(cfg->store);
    if (asprintf(&cfg->store, "%s/postgresql", dir) < 0) {
        cfg->store = NULL;
        (void)cfg_fail(L, "store", "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(dir);
    return rc;
}

/* "replica": {"advertise": ADDR, "ca": PEM, "timeout": SECONDS}, for
 * forwarding between replicas of a PostgreSQL store (forward.c). ADDR
 * ("http://HOST:PORT", "https://HOST:PORT", "unix:/PATH") may be
 * "env:NAME": the address in that environment variable (Kubernetes gives
 * a pod its IP only that way). */
static int load_replica(struct cfg_loader *L, json_t *v, struct srv_config *cfg)
{
    const char *key;
    json_t *e;
    uint64_t u = 0;
    char why[400];

    if (!json_is_object(v))
        return cfg_fail(L, "replica", "must be an object {\"advertise\": ADDRESS, \"ca\": PEM, \"timeout\": SECONDS}");
    json_object_foreach(v, key, e) {
        if (strcmp(key, "advertise") == 0) {
            if (get_string(L, "replica.advertise", e, &cfg->replica_advertise) < 0)
                return -1;
            if (strncmp(cfg->replica_advertise, "env:", 4) == 0) {
                const char *name = cfg->replica_advertise + 4, *val = *name ? getenv(name) : NULL;
                char *copy;
                if (!val || !*val)
                    return cfg_fail(L, "replica.advertise", "%s: the environment variable %s is not set",
                                    cfg->replica_advertise, *name ? name : "(no name)");
                copy = strdup(val);
                if (!copy)
                    return cfg_fail(L, "replica.advertise", "out of memory");
                free(cfg->replica_advertise);
                cfg->replica_advertise = copy;
            }
            if (srv_peer_check(cfg->replica_advertise, why, sizeof(why)) < 0)
                return cfg_fail(L, "replica.advertise", "%s", why);
        } else if (strcmp(key, "ca") == 0) {
            if (get_string(L, "replica.ca", e, &cfg->replica_ca_path) < 0)
                return -1;
            if (cfg->replica_ca_path[0] != '/')
                return cfg_fail(L, "replica.ca", "must be an absolute path");
        } else if (strcmp(key, "timeout") == 0) {
            if (get_uint(L, "replica.timeout", e, 1, 3600, &u) < 0)
                return -1;
            cfg->replica_timeout = (unsigned)u;
        } else {
            return cfg_fail(L, "replica", "unknown key %s (known: advertise, ca, timeout)", key);
        }
    }
    return 0;
}

static int load_top(struct cfg_loader *L, json_t *root, struct srv_config *cfg)
{
    const char *key;
    json_t *v;
    uint64_t u = 0;

    if (!json_is_object(root))
        return cfg_fail(L, "", "the config is a JSON object");
    json_object_foreach(root, key, v) {
        if (strcmp(key, "listen") == 0) {
            if (get_string(L, key, v, &cfg->listen) < 0)
                return -1;
        } else if (strcmp(key, "store") == 0) {
            if (load_store(L, v, cfg) < 0)
                return -1;
        } else if (strcmp(key, "policy") == 0) {
            if (get_string(L, key, v, &cfg->policy_path) < 0)
                return -1;
        } else if (strcmp(key, "profile") == 0) {
            if (get_string(L, key, v, &cfg->profile) < 0)
                return -1;
        } else if (strcmp(key, "max_runs") == 0) {
            if (get_uint(L, key, v, 1, SRV_MAX_RUNS, &u) < 0)
                return -1;
            cfg->max_runs = (unsigned)u;
        } else if (strcmp(key, "max_runs_per_tenant") == 0) {
            if (get_uint(L, key, v, 1, SRV_MAX_RUNS, &u) < 0)
                return -1;
            cfg->max_runs_per_tenant = (unsigned)u;
        } else if (strcmp(key, "max_body_bytes") == 0) {
            if (get_uint(L, key, v, 1024, 64u << 20, &u) < 0)
                return -1;
            cfg->max_body_bytes = (size_t)u;
        } else if (strcmp(key, "max_output_bytes") == 0) {
            if (get_uint(L, key, v, 1, 64u << 20, &u) < 0)
                return -1;
            cfg->max_output_bytes = (size_t)u;
        } else if (strcmp(key, "max_timeout") == 0) {
            if (get_uint(L, key, v, 1, 86400, &u) < 0)
                return -1;
            cfg->max_timeout_ms = u * 1000;
        } else if (strcmp(key, "max_connections") == 0) {
            if (get_uint(L, key, v, 1, 4096, &u) < 0)
                return -1;
            cfg->max_connections = (unsigned)u;
        } else if (strcmp(key, "max_runs_per_minute") == 0) {
            if (get_uint(L, key, v, 0, 1000000, &u) < 0)
                return -1;
            cfg->max_runs_per_minute = (unsigned)u;
        } else if (strcmp(key, "retention_days") == 0) {
            if (get_uint(L, key, v, 0, 36500, &u) < 0)
                return -1;
            cfg->retention_days = (unsigned)u;
        } else if (strcmp(key, "pool_size") == 0) {
            if (get_uint(L, key, v, 0, 64, &u) < 0)
                return -1;
            cfg->pool_size = (unsigned)u;
        } else if (strcmp(key, "runner_threads") == 0) {
            if (get_uint(L, key, v, 0, 64, &u) < 0)
                return -1;
            cfg->runner_threads = (unsigned)u;
        } else if (strcmp(key, "interpreters") == 0) {
            interp_clear(&cfg->interp);
            if (load_interpreters(L, key, v, &cfg->interp) < 0)
                return -1;
        } else if (strcmp(key, "sessions") == 0) {
            if (load_sessions(L, v, cfg) < 0)
                return -1;
        } else if (strcmp(key, "mcp") == 0) {
            if (load_mcp(L, v, cfg) < 0)
                return -1;
        } else if (strcmp(key, "max_connections_per_ip") == 0) {
            if (get_uint(L, key, v, 0, 4096, &u) < 0)
                return -1;
            cfg->max_connections_per_ip = (unsigned)u;
        } else if (strcmp(key, "connection_timeout") == 0) {
            if (get_uint(L, key, v, 2, 3600, &u) < 0)
                return -1;
            cfg->connection_timeout = (unsigned)u;
        } else if (strcmp(key, "events_log") == 0) {
            if (get_string(L, key, v, &cfg->events_log) < 0)
                return -1;
            if (strcmp(cfg->events_log, "-") != 0 && cfg->events_log[0] != '/')
                return cfg_fail(L, key, "must be an absolute path, or \"-\" for stdout");
        } else if (strcmp(key, "replica") == 0) {
            if (load_replica(L, v, cfg) < 0)
                return -1;
        } else if (strcmp(key, "tls") == 0) {
            const char *k2;
            json_t *v2;
            char sub[64];
            if (!json_is_object(v))
                return cfg_fail(L, key, "must be an object {\"cert\": PATH, \"key\": PATH}");
            json_object_foreach(v, k2, v2) {
                (void)snprintf(sub, sizeof(sub), "tls.%.50s", k2);
                if (strcmp(k2, "cert") == 0 || strcmp(k2, "key") == 0) {
                    char **dst = k2[0] == 'c' ? &cfg->tls_cert_path : &cfg->tls_key_path;
                    if (get_string(L, sub, v2, dst) < 0)
                        return -1;
                    if (!*dst || (*dst)[0] != '/')
                        return cfg_fail(L, sub, "must be an absolute path");
                } else {
                    return cfg_fail(L, sub, "unknown key (tls has: cert, key)");
                }
            }
            if (!cfg->tls_cert_path || !cfg->tls_key_path)
                return cfg_fail(L, key, "needs both cert and key (PEM files)");
        } else if (strcmp(key, "tenants") == 0) {
            const char *name;
            json_t *t;
            if (!json_is_object(v) || json_object_size(v) == 0)
                return cfg_fail(L, key, "must be an object with at least one tenant");
            cfg->tenants = calloc(json_object_size(v), sizeof(*cfg->tenants));
            if (!cfg->tenants)
                return cfg_fail(L, key, "out of memory");
            json_object_foreach(v, name, t) {
                if (load_tenant(L, name, t, &cfg->tenants[cfg->n_tenants++]) < 0)
                    return -1;
            }
        } else {
            return cfg_fail(L, key,
                            "unknown key (known: listen, store, policy, profile, tenants, max_runs, "
                            "max_runs_per_tenant, max_body_bytes, max_output_bytes, max_timeout, "
                            "max_connections, max_connections_per_ip, connection_timeout, max_runs_per_minute, "
                            "retention_days, pool_size, runner_threads, interpreters, events_log, tls, sessions, mcp, "
                            "replica)");
        }
    }
    if (!cfg->store)
        return cfg_fail(L, "", "\"store\" is required (the SQLite file of run records, or {\"postgresql\": ...})");
    if (!cfg->tenants)
        return cfg_fail(L, "", "\"tenants\" is required (at least one, with its token_sha256)");
    if (json_object_get(root, "replica") && !cfg->store_pg)
        return cfg_fail(L, "replica", "replicas need a shared store: {\"postgresql\": ...} as \"store\"");
    return 0;
}

int srv_config_load(const char *path, struct srv_config *cfg, char *msg, size_t msg_size)
{
    struct cfg_loader L = {.name = path, .msg = msg, .msg_size = msg_size};
    json_error_t jerr;
    json_t *root = NULL;
    size_t len = 0;
    char *text;
    int r = -1;

    *cfg = (struct srv_config){
        .max_runs = 16,
        .max_runs_per_tenant = 4,
        .max_body_bytes = 1u << 20,
        .max_output_bytes = 1u << 20,
        .max_timeout_ms = 300000,
        .max_connections = 64,
        .max_connections_per_ip = 16,
        .connection_timeout = 30,
        .pool_size = 2,
        .max_sessions_per_tenant = 8,
        .session_ttl_ms = 3600 * 1000,
        .session_idle_ms = 600 * 1000,
        .workspace_quota = 256u << 20,
        .max_file_bytes = 64u << 20,
        .max_outputs_bytes = 1u << 20,
        .ws_uid_base = 0x70000000u,
        .ws_uid_count = 65536,
        .replica_timeout = 30,
    };
    text = read_all(path, &len, msg, msg_size);
    if (!text)
        return -1;
    if (memchr(text, '\0', len)) {
        (void)snprintf(msg, msg_size, "%s: a NUL byte; a config is JSON text", path);
        goto out;
    }
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        (void)snprintf(msg, msg_size, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (srv_pos_index_build(text, len, &L.idx) < 0) {
        (void)snprintf(msg, msg_size, "%s: out of memory or nested too deeply", path);
        goto out;
    }
    r = load_top(&L, root, cfg);
    if (r == 0 && !cfg->listen) {
        cfg->listen = strdup("127.0.0.1:8080");
        if (!cfg->listen) {
            (void)snprintf(msg, msg_size, "%s: out of memory", path);
            r = -1;
        }
    }
    if (r == 0 && cfg->max_runs_per_tenant > cfg->max_runs)
        r = cfg_fail(&L, "max_runs_per_tenant", "is more than max_runs (%u)", cfg->max_runs);
    if (r == 0 && cfg->max_connections_per_ip > cfg->max_connections)
        r = cfg_fail(&L, "max_connections_per_ip", "is more than max_connections (%u)", cfg->max_connections);
    /* One token, one tenant: a token two tenants share would make every
     * request of one the other's (authenticate takes either). */
    for (size_t i = 0; r == 0 && i < cfg->n_tenants; i++)
        for (size_t j = 0; r == 0 && j < i; j++)
            if (memcmp(cfg->tenants[i].token_sha256, cfg->tenants[j].token_sha256, 32) == 0) {
                char key[300];
                (void)snprintf(key, sizeof(key), "tenants.%s.token_sha256", cfg->tenants[i].name);
                r = cfg_fail(&L, key, "the same token as tenant %s's; each tenant has its own", cfg->tenants[j].name);
            }
    for (size_t i = 0; r == 0 && i < cfg->n_tenants; i++) {
        const struct srv_tenant *t = &cfg->tenants[i];
        char key[300];
        (void)snprintf(key, sizeof(key), "tenants.%s.max_runs", t->name);
        if (t->set_max_runs && t->max_runs > cfg->max_runs)
            r = cfg_fail(&L, key, "is more than the server's max_runs (%u)", cfg->max_runs);
        (void)snprintf(key, sizeof(key), "tenants.%s.max_timeout", t->name);
        if (r == 0 && t->set_timeout && t->max_timeout_ms > cfg->max_timeout_ms)
            r = cfg_fail(&L, key, "is more than the server's max_timeout (%llu); a tenant may only tighten it",
                         (unsigned long long)(cfg->max_timeout_ms / 1000));
    }
    if (r == 0 && cfg->replica_ca_path) {
        char why[512];
        if (srv_peer_check_ca(cfg->replica_ca_path, why, sizeof(why)) < 0)
            r = cfg_fail(&L, "replica.ca", "%s", why);
    }
    if (r == 0 && cfg->tls_cert_path) {
        const char *which = "cert";
        char why[512];
        if (srv_tls_load(cfg, &which, why, sizeof(why)) < 0)
            r = cfg_fail(&L, which[0] == 'c' ? "tls.cert" : "tls.key", "%s", why);
    }
    if (r == 0) {
        char key[300] = "", why[700];
        if (srv_tenants_build(cfg, key, sizeof(key), why, sizeof(why)) < 0)
            r = cfg_fail(&L, key, "%s", why);
    }
    /* Last: nothing after it fails, so the sink is never left open by a
     * config that is refused. */
    if (r == 0 && cfg->events_log) {
        char why[700];
        if (srv_eventlog_open(cfg->events_log, why, sizeof(why)) < 0)
            r = cfg_fail(&L, "events_log", "%s", why);
    }
out:
    srv_pos_index_clear(&L.idx);
    json_decref(root);
    free(text);
    if (r < 0)
        srv_config_clear(cfg);
    return r;
}

unsigned srv_config_runner_threads(const struct srv_config *cfg)
{
    long n;

    if (cfg->runner_threads)
        return cfg->runner_threads;
    /* One per CPU: starting and ending a sandbox is CPU work (clone,
     * mounts, teardown); more threads than CPUs only take turns. */
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (unsigned)n;
}

void srv_config_clear(struct srv_config *cfg)
{
    srv_tenants_clear(cfg);
    for (size_t i = 0; i < cfg->n_tenants; i++) {
        free(cfg->tenants[i].name);
        free(cfg->tenants[i].policy_path);
        free(cfg->tenants[i].profile);
        interp_clear(&cfg->tenants[i].interp);
    }
    interp_clear(&cfg->interp);
    free(cfg->tenants);
    free(cfg->events_log);
    free(cfg->tls_cert_path);
    free(cfg->tls_key_path);
    free(cfg->tls_cert_pem);
    if (cfg->tls_key_pem) /* the private key: not left in freed memory */
        explicit_bzero(cfg->tls_key_pem, strlen(cfg->tls_key_pem));
    free(cfg->tls_key_pem);
    free(cfg->replica_advertise);
    free(cfg->replica_ca_path);
    free(cfg->listen);
    free(cfg->store);
    free(cfg->store_pg);
    free(cfg->policy_path);
    free(cfg->profile);
    free(cfg->mcp_origins);
    *cfg = (struct srv_config){0};
}
