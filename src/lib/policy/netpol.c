/* SPDX-License-Identifier: Apache-2.0 */
/* The rules of network.mode "proxy"'s entries (allow, deny, allow_ranges)
 * and of the brokered secrets (top-level "secrets"): what the setters, the
 * loader and validation share. The egress proxy (src/egress/) applies the
 * entries; here they are only checked for shape, so a typo is refused at
 * load time, located, instead of silently allowing nothing. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"
#include "aj_util.h"

/* A DNS name as an allow entry writes it: labels of letters, digits, '-'
 * and '_' (some services use it), 1..63 each, 253 in all, or a leading
 * "*." for "any name under". */
static bool host_ok(const char *h, size_t n)
{
    size_t label = 0;

    if (n >= 2 && h[0] == '*' && h[1] == '.') {
        h += 2;
        n -= 2;
    }
    if (n == 0 || n > 253 || h[0] == '.' || h[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == '.') {
            if (label == 0 || h[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        if (!isalnum(c) && c != '-' && c != '_')
            return false;
        if (c == '-' && label == 0) /* no label starts or ends with '-' */
            return false;
        if (++label > 63)
            return false;
    }
    return h[n - 1] != '-';
}

static bool port_ok(const char *p)
{
    uint64_t v;
    return aj_parse_u64(p, 65535, &v) == 0 && v >= 1;
}

/* "GET" or "GET,HEAD": upper-case methods, comma-separated. */
static bool method_ok(const char *m, size_t n)
{
    size_t run = 0;

    if (n == 0 || n > 128 || m[0] == ',' || m[n - 1] == ',')
        return false;
    for (size_t i = 0; i < n; i++) {
        if (m[i] == ',') {
            if (run == 0)
                return false;
            run = 0;
        } else if (m[i] < 'A' || m[i] > 'Z' || ++run > 16) {
            return false;
        }
    }
    return true;
}

int aj_policy_check_net_entry(const char *s, struct aj_error *err)
{
    char buf[300];
    const char *hp = s, *sp = strchr(s, ' ');
    char *host, *port = NULL;
    unsigned char a6[16];

    if (!s || !*s || strlen(s) >= sizeof(buf))
        return aj_err(err, 0, "'%s' is not a host, *.domain, host:port or \"METHOD host:port\"", s ? s : "");
    if (sp) {
        if (!method_ok(s, (size_t)(sp - s)))
            return aj_err(err, 0, "'%s': the methods must be upper-case letters (GET or GET,HEAD), one space, "
                          "then the host", s);
        hp = sp + 1;
    }
    (void)snprintf(buf, sizeof(buf), "%s", hp);
    host = buf;
    if (host[0] == '[') {
        char *close = strchr(host, ']');
        if (!close)
            return aj_err(err, 0, "'%s': an IPv6 address in brackets needs its ']'", s);
        *close = '\0';
        host++;
        if (close[1] == ':')
            port = close + 2;
        else if (close[1])
            return aj_err(err, 0, "'%s': after ']' only \":PORT\" may follow", s);
        if (inet_pton(AF_INET6, host, a6) != 1)
            return aj_err(err, 0, "'%s': '%s' is not an IPv6 address", s, host);
    } else {
        char *colon = strrchr(host, ':');
        if (colon && strchr(host, ':') != colon) {
            /* Bare IPv6 (no port: brackets are how a port is given). */
            if (inet_pton(AF_INET6, host, a6) != 1)
                return aj_err(err, 0, "'%s' is not an IPv6 address (write [ADDR]:PORT for a port)", s);
            return 0;
        }
        if (colon) {
            *colon = '\0';
            port = colon + 1;
        }
        /* "*": any host (the proxy's deny floor still applies). */
        if (strcmp(host, "*") != 0 && inet_pton(AF_INET, host, a6) != 1 && !host_ok(host, strlen(host)))
            return aj_err(err, 0, "'%s': '%s' is not a host name, *.domain or IP address", s, host);
    }
    if (port && !port_ok(port))
        return aj_err(err, 0, "'%s': '%s' is not a port (1..65535)", s, port);
    return 0;
}

int aj_policy_check_cidr(const char *s, struct aj_error *err)
{
    char buf[64];
    unsigned char a[16];
    const char *slash = s ? strchr(s, '/') : NULL;
    uint64_t bits;
    int fam;

    if (!slash || (size_t)(slash - s) >= sizeof(buf))
        return aj_err(err, 0, "'%s' is not a CIDR range (e.g. 10.1.0.0/16, fd00:1::/64)", s ? s : "");
    memcpy(buf, s, (size_t)(slash - s));
    buf[slash - s] = '\0';
    fam = strchr(buf, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(fam, buf, a) != 1 || aj_parse_u64(slash + 1, fam == AF_INET ? 32 : 128, &bits) < 0)
        return aj_err(err, 0, "'%s' is not a CIDR range (e.g. 10.1.0.0/16, fd00:1::/64)", s);
    return 0;
}

void aj_secret_clear(struct aj_secret *s)
{
    if (!s)
        return;
    free(s->id);
    for (size_t i = 0; i < s->n_hosts; i++)
        free(s->hosts[i]);
    free(s->hosts);
    free(s->header);
    free(s->format);
    free(s->value_from);
    free(s->env);
    free(s->file);
    memset(s, 0, sizeof(*s));
}

static bool id_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* An HTTP header name (RFC 9110 token), not one the proxy itself owns. */
static bool header_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
            return false;
    return strcasecmp(s, "Host") != 0 && strcasecmp(s, "Content-Length") != 0 &&
           strcasecmp(s, "Transfer-Encoding") != 0 && strcasecmp(s, "Connection") != 0;
}

int aj_policy_check_secret(const struct aj_secret *s, const char **ret_member, struct aj_error *err)
{
    const char *fmt = s->format ? s->format : AJ_SECRET_DEFAULT_FORMAT;
    const char *brace = strstr(fmt, "{}");
    bool from_env, from_file;

    *ret_member = "id";
    if (!id_ok(s->id))
        return aj_err(err, 0, "secret id '%s' must be 1..64 letters, digits, '-', '_' or '.'",
                      s->id ? s->id : "");
    *ret_member = "hosts";
    if (s->n_hosts == 0)
        return aj_err(err, 0, "secret '%s' needs at least one host in 'hosts'", s->id);
    for (size_t i = 0; i < s->n_hosts; i++) {
        const char *h = s->hosts[i];
        if (!h || (!host_ok(h, strlen(h)) && aj_policy_check_net_entry(h, err) < 0) || strchr(h, ' '))
            return aj_err(err, 0, "secret '%s': host '%s' is not a host name, *.domain or host:port", s->id,
                          h ? h : "");
    }
    *ret_member = "header";
    if (s->header && !header_ok(s->header))
        return aj_err(err, 0, "secret '%s': header '%s' is not a header name the proxy may set", s->id,
                      s->header);
    *ret_member = "format";
    if (!brace || strstr(brace + 2, "{}") || strpbrk(fmt, "\r\n") || strlen(fmt) > 256)
        return aj_err(err, 0, "secret '%s': format '%s' must hold \"{}\" exactly once (where the value goes) "
                      "and no line break", s->id, fmt);
    *ret_member = "value_from";
    from_env = s->value_from && strncmp(s->value_from, "env:", 4) == 0 &&
               aj_policy_env_name_ok(s->value_from + 4, strlen(s->value_from + 4));
    from_file = s->value_from && strncmp(s->value_from, "file:/", 6) == 0 && strlen(s->value_from) < 4096;
    if (!from_env && !from_file)
        return aj_err(err, 0, "secret '%s': value_from '%s' must be \"env:NAME\" or \"file:/ABSOLUTE/PATH\" "
                      "(read on the host at run time)", s->id, s->value_from ? s->value_from : "");
    *ret_member = "env";
    if (s->env && !aj_policy_env_name_ok(s->env, strlen(s->env)))
        return aj_err(err, 0, "secret '%s': env '%s' is not a variable name", s->id, s->env);
    *ret_member = "file";
    if (s->file && s->file[0] != '/')
        return aj_err(err, 0, "secret '%s': file '%s' is not an absolute path inside the sandbox", s->id, s->file);
    if (s->file && aj_policy_check_sandbox_path(s->file, "secret file", err) < 0)
        return -EINVAL;
    if (!s->env && !s->file) {
        *ret_member = "env";
        return aj_err(err, 0, "secret '%s' needs 'env' (a variable inside) or 'file' (a path inside) for "
                      "its placeholder", s->id);
    }
    return 0;
}

static char *dup_or_null(const char *s, bool *oom)
{
    char *d;
    if (!s)
        return NULL;
    d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

int aj_policy_push_secret(struct aj_policy *pol, const struct aj_secret *s, struct aj_error *err)
{
    struct aj_secret c = {0}, *v;
    const char *member;
    bool oom = false;
    int r;

    r = aj_policy_check_secret(s, &member, err);
    if (r < 0)
        return r;
    if (pol->n_secrets >= AJ_MAX_SECRETS)
        return aj_err(err, 0, "at most %d secrets", AJ_MAX_SECRETS);
    for (size_t i = 0; i < pol->n_secrets; i++)
        if (strcmp(pol->secrets[i].id, s->id) == 0)
            return aj_err(err, 0, "secret id '%s' is given twice", s->id);
    c.id = dup_or_null(s->id, &oom);
    c.header = dup_or_null(s->header, &oom);
    c.format = dup_or_null(s->format, &oom);
    c.value_from = dup_or_null(s->value_from, &oom);
    c.env = dup_or_null(s->env, &oom);
    c.file = dup_or_null(s->file, &oom);
    c.hosts = calloc(s->n_hosts ? s->n_hosts : 1, sizeof(char *));
    oom |= !c.hosts;
    for (size_t i = 0; c.hosts && i < s->n_hosts; i++) {
        c.hosts[i] = dup_or_null(s->hosts[i], &oom);
        c.n_hosts = i + 1;
    }
    v = oom ? NULL : realloc(pol->secrets, (pol->n_secrets + 1) * sizeof(*v));
    if (!v) {
        aj_secret_clear(&c);
        return aj_err(err, ENOMEM, "secret");
    }
    pol->secrets = v;
    pol->secrets[pol->n_secrets++] = c;
    return 0;
}

static int parse_secret(char *buf, const char *spec, struct aj_policy *pol, struct aj_error *err)
{
    char *hosts[32], *save = NULL, *tok;
    struct aj_secret s = {0};

    s.hosts = hosts;
    /* ID first, then key=value members; format may hold commas only last. */
    tok = strtok_r(buf, ",", &save);
    s.id = tok;
    while ((tok = strtok_r(NULL, ",", &save))) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return aj_err(err, 0, "'%s': expected ID,hosts=H1|H2,from=env:NAME|file:/PATH[,env=VAR][,file=/PATH]"
                          "[,header=NAME][,format=TEXT]", spec);
        *eq++ = '\0';
        if (strcmp(tok, "hosts") == 0) {
            char *hs = NULL, *h;
            for (h = strtok_r(eq, "|", &hs); h; h = strtok_r(NULL, "|", &hs)) {
                if (s.n_hosts >= AJ_ARRAY_SIZE(hosts))
                    return aj_err(err, 0, "'%s': at most %zu hosts", spec, AJ_ARRAY_SIZE(hosts));
                hosts[s.n_hosts++] = h;
            }
        } else if (strcmp(tok, "from") == 0 || strcmp(tok, "value_from") == 0) {
            s.value_from = eq;
        } else if (strcmp(tok, "env") == 0) {
            s.env = eq;
        } else if (strcmp(tok, "file") == 0) {
            s.file = eq;
        } else if (strcmp(tok, "header") == 0) {
            s.header = eq;
        } else if (strcmp(tok, "format") == 0) {
            /* The rest of the spec, commas and all. */
            if (*save) {
                eq[strlen(eq)] = ',';
                save += strlen(save);
            }
            s.format = eq;
        } else {
            return aj_err(err, 0, "'%s': unknown member '%s' (hosts, from, env, file, header, format)", spec, tok);
        }
    }
    return aj_policy_push_secret(pol, &s, err);
}

int aj_policy_add_secret(struct aj_policy *pol, const char *spec, struct aj_error *err)
{
    char *buf;
    int r;

    if (!spec)
        return aj_err(err, 0, "secret: no value");
    buf = strdup(spec);
    if (!buf)
        return aj_err(err, ENOMEM, "secret");
    r = parse_secret(buf, spec, pol, err);
    free(buf);
    return r;
}

json_t *aj_policy_dump_secrets(const struct aj_policy *pol)
{
    json_t *arr = json_array();
    bool ok = arr != NULL;

    for (size_t i = 0; ok && i < pol->n_secrets; i++) {
        const struct aj_secret *s = &pol->secrets[i];
        json_t *hosts = json_array(), *o;
        for (size_t j = 0; hosts && j < s->n_hosts; j++)
            ok &= json_array_append_new(hosts, json_string(s->hosts[j])) == 0;
        o = json_pack("{s:s, s:o, s:s, s:s, s:s, s:s?, s:s?}", "id", s->id, "hosts", hosts, "header",
                      s->header ? s->header : AJ_SECRET_DEFAULT_HEADER, "format",
                      s->format ? s->format : AJ_SECRET_DEFAULT_FORMAT, "value_from", s->value_from, "env", s->env,
                      "file", s->file);
        ok &= o && json_array_append_new(arr, o) == 0;
    }
    if (!ok) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}
