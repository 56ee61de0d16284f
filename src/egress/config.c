/* SPDX-License-Identifier: Apache-2.0 */
/* The run's egress configuration (docs/egress-contract: fd 3), strictly:
 * an unknown key or a wrong type is an error naming the key. No message
 * ever quotes a secret's value. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eg.h"

__attribute__((format(printf, 3, 4))) static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
#define ERR(...) errf(err, errlen, __VA_ARGS__)

static int str_dup(json_t *v, const char *what, char **out, char *err, size_t errlen)
{
    if (!json_is_string(v))
        return ERR("%s must be a string", what);
    const char *s = json_string_value(v);
    if (strlen(s) != json_string_length(v))
        return ERR("%s holds a NUL byte", what);
    *out = strdup(s);
    return *out ? 0 : ERR("out of memory");
}

static int parse_rules(json_t *arr, const char *key, struct eg_rules *out, char *err, size_t errlen)
{
    if (!json_is_array(arr))
        return ERR("\"%s\" must be an array of strings", key);
    size_t n = json_array_size(arr);
    out->v = calloc(n ? n : 1, sizeof(*out->v));
    if (!out->v)
        return ERR("out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        char m[400];
        if (!json_is_string(e))
            return ERR("\"%s\"[%zu] must be a string", key, i);
        if (eg_rule_parse(json_string_value(e), &out->v[i], m, sizeof(m)) < 0)
            return ERR("\"%s\"[%zu]: %s", key, i, m);
        out->n++;
    }
    return 0;
}

static int parse_u64(json_t *v, const char *key, uint64_t *out, char *err, size_t errlen)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return ERR("caps.%s must be a non-negative integer", key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_caps(json_t *o, struct eg_caps *c, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    if (!json_is_object(o))
        return ERR("\"caps\" must be an object");
    json_object_foreach(o, k, v) {
        uint64_t *dst = NULL;
        if (strcmp(k, "max_connections") == 0)
            dst = &c->max_connections;
        else if (strcmp(k, "max_bytes_out") == 0)
            dst = &c->max_bytes_out;
        else if (strcmp(k, "max_bytes_in") == 0)
            dst = &c->max_bytes_in;
        else if (strcmp(k, "max_connection_seconds") == 0)
            dst = &c->max_connection_seconds;
        else if (strcmp(k, "max_requests_per_second") == 0)
            dst = &c->max_requests_per_second;
        else
            return ERR("unknown key caps.\"%s\" (max_connections, max_bytes_out, max_bytes_in, "
                       "max_connection_seconds, max_requests_per_second)", k);
        if (parse_u64(v, k, dst, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static int parse_secret(json_t *o, size_t idx, struct eg_secret *s, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    char what[64];
    if (!json_is_object(o))
        return ERR("\"secrets\"[%zu] must be an object", idx);
    json_object_foreach(o, k, v) {
        snprintf(what, sizeof(what), "secrets[%zu].%s", idx, k);
        if (strcmp(k, "id") == 0) {
            if (str_dup(v, what, &s->id, err, errlen) < 0)
                return -1;
        } else if (strcmp(k, "header") == 0) {
            if (str_dup(v, what, &s->header, err, errlen) < 0)
                return -1;
        } else if (strcmp(k, "value") == 0) {
            if (!json_is_string(v))
                return ERR("%s must be a string", what);
            if (str_dup(v, what, &s->value, err, errlen) < 0)
                return -1;
        } else if (strcmp(k, "placeholder") == 0) {
            if (str_dup(v, what, &s->placeholder, err, errlen) < 0)
                return -1;
        } else if (strcmp(k, "format") == 0) {
            /* The supervisor shapes the placeholder with it; the proxy
             * replaces the placeholder wherever it sits in the header. */
            if (!json_is_string(v))
                return ERR("%s must be a string", what);
        } else if (strcmp(k, "hosts") == 0) {
            if (!json_is_array(v) || json_array_size(v) == 0)
                return ERR("%s must be a non-empty array of host names", what);
            s->hosts = calloc(json_array_size(v), sizeof(char *));
            if (!s->hosts)
                return ERR("out of memory");
            for (size_t i = 0; i < json_array_size(v); i++) {
                json_t *h = json_array_get(v, i);
                char norm[256];
                const char *hs = json_is_string(h) ? json_string_value(h) : NULL;
                bool wild = hs && strncmp(hs, "*.", 2) == 0;
                if (!hs || !eg_host_normalise(wild ? hs + 2 : hs, strlen(wild ? hs + 2 : hs), norm,
                                              sizeof(norm)) ||
                    strchr(norm, ':') || strspn(norm, "0123456789.") == strlen(norm))
                    /* Names only: the run CA's name constraints permit DNS
                     * names and exclude every IP address. */
                    return ERR("%s[%zu] must be a host name or *.domain (not an IP address)", what, i);
                size_t l = strlen(norm) + 3;
                s->hosts[i] = malloc(l);
                if (!s->hosts[i])
                    return ERR("out of memory");
                snprintf(s->hosts[i], l, "%s%s", wild ? "*." : "", norm);
                s->n_hosts++;
            }
        } else {
            return ERR("unknown key secrets[%zu].\"%s\" (id, hosts, header, format, value, placeholder)",
                       idx, k);
        }
    }
    if (!s->id || !s->hosts || !s->header || !s->value || !s->placeholder)
        return ERR("secrets[%zu] needs id, hosts, header, value and placeholder", idx);
    if (strlen(s->placeholder) < 8)
        return ERR("secrets[%zu].placeholder is shorter than 8 characters (it must not occur by chance)",
                   idx);
    if (strlen(s->value) == 0 || strpbrk(s->value, "\r\n"))
        return ERR("secrets[%zu].value is empty or holds a line break", idx);
    for (const char *p = s->header; *p; p++)
        if (!(*p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z')))
            return ERR("secrets[%zu].header \"%s\" is not a header name", idx, s->header);
    return 0;
}

int eg_config_parse(const char *text, size_t len, struct eg_config *c, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    const char *k;
    json_t *v;
    int r = -1;

    memset(c, 0, sizeof(*c));
    c->ca_validity_seconds = EG_DEFAULT_CA_VALIDITY;
    if (!root)
        return ERR("config: line %d column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(root)) {
        ERR("config: expected one JSON object");
        goto out;
    }
    json_object_foreach(root, k, v) {
        if (strcmp(k, "run_id") == 0) {
            if (str_dup(v, "run_id", &c->run_id, err, errlen) < 0)
                goto out;
        } else if (strcmp(k, "allow") == 0) {
            if (parse_rules(v, "allow", &c->allow, err, errlen) < 0)
                goto out;
        } else if (strcmp(k, "deny") == 0) {
            if (parse_rules(v, "deny", &c->deny, err, errlen) < 0)
                goto out;
        } else if (strcmp(k, "allow_ranges") == 0) {
            if (!json_is_array(v)) {
                ERR("\"allow_ranges\" must be an array of CIDRs");
                goto out;
            }
            c->allow_ranges.v = calloc(json_array_size(v) + 1, sizeof(struct eg_cidr));
            if (!c->allow_ranges.v) {
                ERR("out of memory");
                goto out;
            }
            for (size_t i = 0; i < json_array_size(v); i++) {
                json_t *e = json_array_get(v, i);
                char m[200];
                if (!json_is_string(e)) {
                    ERR("\"allow_ranges\"[%zu] must be a string", i);
                    goto out;
                }
                if (eg_cidr_parse(json_string_value(e), &c->allow_ranges.v[i], m, sizeof(m)) < 0) {
                    ERR("\"allow_ranges\"[%zu]: %s", i, m);
                    goto out;
                }
                c->allow_ranges.n++;
            }
        } else if (strcmp(k, "resolver") == 0) {
            if (json_is_null(v))
                continue;
            if (str_dup(v, "resolver", &c->resolver, err, errlen) < 0)
                goto out;
        } else if (strcmp(k, "caps") == 0) {
            if (parse_caps(v, &c->caps, err, errlen) < 0)
                goto out;
        } else if (strcmp(k, "secrets") == 0) {
            if (!json_is_array(v)) {
                ERR("\"secrets\" must be an array");
                goto out;
            }
            c->secrets = calloc(json_array_size(v) + 1, sizeof(*c->secrets));
            if (!c->secrets) {
                ERR("out of memory");
                goto out;
            }
            for (size_t i = 0; i < json_array_size(v); i++) {
                c->n_secrets++;
                if (parse_secret(json_array_get(v, i), i, &c->secrets[i], err, errlen) < 0)
                    goto out;
            }
        } else if (strcmp(k, "upstream_ca_pem") == 0) {
            if (json_is_null(v))
                continue;
            if (str_dup(v, "upstream_ca_pem", &c->upstream_ca_pem, err, errlen) < 0)
                goto out;
        } else if (strcmp(k, "ca_validity_seconds") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 60 ||
                json_integer_value(v) > 366 * 24 * 3600) {
                ERR("\"ca_validity_seconds\" must be an integer 60..31622400");
                goto out;
            }
            c->ca_validity_seconds = (uint64_t)json_integer_value(v);
        } else {
            ERR("unknown key \"%s\" (run_id, allow, deny, allow_ranges, resolver, caps, secrets, "
                "upstream_ca_pem, ca_validity_seconds)", k);
            goto out;
        }
    }
    if (c->caps.max_connections == 0)
        c->caps.max_connections = EG_DEFAULT_MAX_CONNECTIONS;
    r = 0;
out:
    json_decref(root);
    if (r < 0)
        eg_config_clear(c);
    return r;
}

static void free_rules(struct eg_rules *r)
{
    for (size_t i = 0; i < r->n; i++)
        eg_rule_clear(&r->v[i]);
    free(r->v);
    r->v = NULL;
    r->n = 0;
}

void eg_config_clear(struct eg_config *c)
{
    if (!c)
        return;
    free(c->run_id);
    free_rules(&c->allow);
    free_rules(&c->deny);
    free(c->allow_ranges.v);
    free(c->resolver);
    for (size_t i = 0; i < c->n_secrets; i++) {
        struct eg_secret *s = &c->secrets[i];
        free(s->id);
        for (size_t j = 0; j < s->n_hosts; j++)
            free(s->hosts[j]);
        free(s->hosts);
        free(s->header);
        if (s->value) {
            /* Not left in freed heap for a later core dump to find. */
            OPENSSL_cleanse(s->value, strlen(s->value));
            free(s->value);
        }
        free(s->placeholder);
    }
    free(c->secrets);
    free(c->upstream_ca_pem);
    memset(c, 0, sizeof(*c));
}
