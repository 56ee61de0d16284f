/* SPDX-License-Identifier: Apache-2.0 */
/* The canonical JSON of a policy (every default filled in, sorted keys,
 * shortest value forms: two texts of one policy give the same bytes) and
 * its sha256, the policy_sha256 of every run. Walks the key table; the
 * compound types have their own code below. */
#include <errno.h>
#include <jansson.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"
#include "aj_util.h"

#define AJ_POLICY_VERSION 1

/* ---- the policy as JSON -------------------------------------------------------------- */

static json_t *dump_scalar(const struct aj_policy *pol, const struct aj_policy_key *k)
{
    uint64_t v = aj_policy_key_get(pol, k);
    char buf[32];

    if (v == 0 && k->zero == AJ_ZERO_NONE)
        return json_null();
    switch (k->type) {
    case AJ_KEY_BOOL:
        return json_boolean(v);
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
        return json_integer((json_int_t)v);
    case AJ_KEY_ENUM:
        /* Only an unvalidated policy has a value without a name: its
         * number keeps it apart from every valid one. */
        if (v > k->max || !k->names[v])
            return json_integer((json_int_t)v);
        return json_string(k->names[v]);
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
        aj_policy_key_format(k, v, buf, sizeof(buf));
        return json_string(buf);
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
    return NULL;
}

static json_t *dump_binds(const struct aj_policy *pol)
{
    json_t *arr = json_array();
    bool ok = arr != NULL;
    char buf[32];

    for (size_t i = 0; ok && i < pol->n_binds; i++) {
        const struct aj_bind *b = &pol->binds[i];
        json_t *o = json_pack("{s:s, s:s, s:s}", "host", b->host, "sandbox", b->sandbox, "mode", b->rw ? "rw" : "ro");
        if (o && b->owner_set) {
            (void)snprintf(buf, sizeof(buf), "%u:%u", b->owner_uid, b->owner_gid);
            ok &= json_object_set_new(o, "owner", json_string(buf)) == 0;
        }
        ok &= json_array_append_new(arr, o) == 0;
    }
    if (!ok) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static json_t *dump_tmpfs(const struct aj_policy *pol)
{
    json_t *arr = json_array();
    bool ok = arr != NULL;
    char buf[32];

    for (size_t i = 0; ok && i < pol->n_tmpfs; i++) {
        aj_fmt_size(buf, sizeof(buf), pol->tmpfs[i].size);
        ok &= json_array_append_new(arr, json_pack("{s:s, s:s}", "path", pol->tmpfs[i].path, "size", buf)) == 0;
    }
    if (!ok) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

/* Later entries override earlier ones: the effective map is what counts. */
static json_t *dump_env(const struct aj_policy *pol)
{
    json_t *obj = json_object();
    bool ok = obj != NULL;

    for (size_t i = 0; ok && i < pol->n_env; i++) {
        const char *eq = strchr(pol->env[i], '=');
        char *name = eq ? strndup(pol->env[i], (size_t)(eq - pol->env[i])) : NULL;
        ok = name && json_object_set_new(obj, name, json_string(eq + 1)) == 0;
        free(name);
    }
    if (!ok) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static json_t *dump_names(char *const *v, size_t n)
{
    json_t *arr = json_array();
    bool ok = arr != NULL;

    for (size_t i = 0; ok && i < n; i++)
        ok &= json_array_append_new(arr, json_string(v[i])) == 0;
    if (!ok) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static json_t *dump_limit_set(uint32_t bits)
{
    json_t *arr = json_array();
    bool ok = arr != NULL;

    for (size_t i = 0; ok && i < AJ_ARRAY_SIZE(aj_limit_names); i++)
        if (bits & aj_limit_names[i].bit)
            ok &= json_array_append_new(arr, json_string(aj_limit_names[i].name)) == 0;
    if (!ok) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static json_t *dump_key(const struct aj_policy *pol, const struct aj_policy_key *k)
{
    switch (k->type) {
    case AJ_KEY_STRING: {
        const char *s = aj_policy_key_get_str(pol, k);
        return s ? json_string(s) : json_null();
    }
    case AJ_KEY_CONST:
        return json_string(k->def_str);
    case AJ_KEY_BIND_LIST:
        return dump_binds(pol);
    case AJ_KEY_TMPFS_LIST:
        return dump_tmpfs(pol);
    case AJ_KEY_ENV_MAP:
        return dump_env(pol);
    case AJ_KEY_NAME_LIST:
        return dump_names(pol->env_pass, pol->n_env_pass);
    case AJ_KEY_MODULE_LIST:
        return dump_names(pol->preload, pol->n_preload);
    case AJ_KEY_ID_RANGE:
        return json_pack("{s:I, s:I}", "base", (json_int_t)pol->uid_base, "count", (json_int_t)pol->uid_count);
    case AJ_KEY_LIMIT_SET:
        return dump_limit_set(pol->required_limits);
    case AJ_KEY_STR_LIST:
        return dump_names(*(char *const *const *)(const void *)((const char *)pol + k->offset),
                          *(const size_t *)(const void *)((const char *)pol + k->count_offset));
    case AJ_KEY_SECRET_LIST:
        return aj_policy_dump_secrets(pol);
    case AJ_KEY_BOOL:
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
    case AJ_KEY_ENUM:
        break;
    }
    return dump_scalar(pol, k);
}

char *aj_policy_to_json(const struct aj_policy *pol, bool compact)
{
    json_t *root = json_object();
    bool ok = root && json_object_set_new(root, "version", json_integer(AJ_POLICY_VERSION)) == 0;
    char *out;

    for (size_t g = 0; ok && g < aj_policy_n_groups; g++) {
        json_t *group;
        if (aj_policy_groups[g].whole) {
            ok = json_object_set_new(root, aj_policy_groups[g].name,
                                     dump_key(pol, aj_policy_key_find(aj_policy_groups[g].name))) == 0;
            continue;
        }
        group = json_object();
        ok = group && json_object_set_new(root, aj_policy_groups[g].name, group) == 0;
        for (size_t i = 0; ok && i < aj_policy_n_keys; i++) {
            const struct aj_policy_key *k = &aj_policy_keys[i];
            /* set_new takes the value, or drops it on failure */
            if (aj_policy_key_in_group(k, aj_policy_groups[g].name))
                ok = json_object_set_new(group, aj_policy_key_name(k), dump_key(pol, k)) == 0;
        }
    }
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    out = json_dumps(root, JSON_SORT_KEYS | (compact ? JSON_COMPACT : JSON_INDENT(2)) | JSON_ENSURE_ASCII);
    json_decref(root);
    return out;
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
