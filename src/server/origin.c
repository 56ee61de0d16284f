/* SPDX-License-Identifier: Apache-2.0 */
/* Origins (RFC 6454: scheme://host[:port]) for /mcp's Origin check: the
 * config's "mcp": {"allowed_origins": [...]} entries (config.c) and the
 * Origin header of a request (mcp_http.c) go through the same parser, so
 * that what the config names and what a browser sends compare as the
 * same thing: scheme and host lowercased, a default port (http 80,
 * https 443) the same as none. */
#include <stdio.h>
#include <string.h>

#include "srv.h"

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

int srv_origin_parse(const char *s, bool pattern, struct srv_origin *out, const char **why)
{
    const char *h, *end;
    size_t n;

    *out = (struct srv_origin){0};
    if (strncasecmp(s, "http://", 7) == 0) {
        h = s + 7;
    } else if (strncasecmp(s, "https://", 8) == 0) {
        out->https = true;
        h = s + 8;
    } else {
        *why = "an origin is http://HOST[:PORT] or https://HOST[:PORT]";
        return -1;
    }
    if (*h == '[') {
        /* An IPv6 literal: [hex digits, colons, dots]. */
        end = strchr(h, ']');
        if (!end || end == h + 1) {
            *why = "an IPv6 host is [ADDRESS]";
            return -1;
        }
        for (const char *p = h + 1; p < end; p++)
            if (!strchr("0123456789abcdefABCDEF:.", *p)) {
                *why = "an IPv6 host is [ADDRESS] of hex digits, ':' and '.'";
                return -1;
            }
        end++;
    } else {
        end = h;
        while (*end && *end != ':' && *end != '/')
            end++;
        for (const char *p = h; p < end; p++)
            if (!host_char((char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p))) {
                *why = "a host is letters, digits, '-', '.' and '_' (or [IPv6])";
                return -1;
            }
    }
    n = (size_t)(end - h);
    if (n == 0 || n >= sizeof(out->host)) {
        *why = "the host is empty or longer than 255 characters";
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        out->host[i] = (char)(h[i] >= 'A' && h[i] <= 'Z' ? h[i] - 'A' + 'a' : h[i]);
    out->host[n] = '\0';
    if (*end == ':') {
        const char *p = end + 1;
        unsigned long port = 0;
        if (pattern && strcmp(p, "*") == 0) {
            out->port = -1;
            return 0;
        }
        if (!*p) {
            *why = pattern ? "a port is 1 to 65535, or * for any" : "a port is 1 to 65535";
            return -1;
        }
        for (; *p; p++) {
            if (*p < '0' || *p > '9' || port > 65535) {
                *why = pattern ? "a port is 1 to 65535, or * for any (and an origin has no path)"
                               : "a port is 1 to 65535 (and an origin has no path)";
                return -1;
            }
            port = port * 10 + (unsigned long)(*p - '0');
        }
        if (port == 0 || port > 65535) {
            *why = "a port is 1 to 65535";
            return -1;
        }
        out->port = (int)port;
        if ((out->https && port == 443) || (!out->https && port == 80))
            out->port = 0;
        return 0;
    }
    if (*end) {
        *why = "an origin has no path, query or trailing '/' (scheme://host[:port] only)";
        return -1;
    }
    return 0;
}

bool srv_origin_match(const struct srv_origin *pat, const struct srv_origin *o)
{
    return pat->https == o->https && strcmp(pat->host, o->host) == 0 && (pat->port == -1 || pat->port == o->port);
}

int srv_origin_format(const struct srv_origin *o, char *buf, size_t size)
{
    char port[16] = "";

    if (o->port == -1)
        (void)snprintf(port, sizeof(port), ":*");
    else if (o->port > 0)
        (void)snprintf(port, sizeof(port), ":%d", o->port);
    return snprintf(buf, size, "%s://%s%s", o->https ? "https" : "http", o->host, port);
}
