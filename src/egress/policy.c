/* SPDX-License-Identifier: Apache-2.0 */
/* The deny floor and the allow/deny entries (eg_policy.h says what). */
#include "eg_policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CIDRs ------------------------------------------------------------------ */

static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, b, bytes) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

int eg_cidr_parse(const char *s, struct eg_cidr *ret, char *err, size_t errlen)
{
    char buf[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    struct eg_cidr c = {0};

    if (alen == 0 || alen >= INET6_ADDRSTRLEN) {
        snprintf(err, errlen, "\"%.64s\" is not a CIDR (expected ADDRESS/PREFIX)", s);
        return -1;
    }
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    if (inet_pton(AF_INET, buf, c.addr) == 1)
        c.family = AF_INET;
    else if (inet_pton(AF_INET6, buf, c.addr) == 1)
        c.family = AF_INET6;
    else {
        snprintf(err, errlen, "\"%.64s\" is not a CIDR: \"%s\" is not an IP address", s, buf);
        return -1;
    }
    unsigned max = c.family == AF_INET ? 32 : 128;
    c.prefix = max;
    if (slash) {
        const char *p = slash + 1;
        char *end;
        if (*p < '0' || *p > '9') {
            snprintf(err, errlen, "\"%.64s\": the prefix length must be a number", s);
            return -1;
        }
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno != 0 || *end != '\0' || v > max) {
            snprintf(err, errlen, "\"%.64s\": the prefix length must be 0..%u", s, max);
            return -1;
        }
        c.prefix = (unsigned)v;
    }
    /* Host bits below the prefix: "10.0.0.1/8" is almost always a typo. */
    for (unsigned bit = c.prefix; bit < max; bit++) {
        if (c.addr[bit / 8] & (0x80 >> (bit % 8))) {
            snprintf(err, errlen, "\"%.64s\": host bits are set below the prefix length", s);
            return -1;
        }
    }
    *ret = c;
    return 0;
}

static bool in_cidrs(const struct eg_cidrs *l, int family, const uint8_t *addr)
{
    if (!l)
        return false;
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].family == family && prefix_equal(l->v[i].addr, addr, l->v[i].prefix))
            return true;
    return false;
}

static bool is_own(const struct eg_cidrs *own, int family, const uint8_t *addr)
{
    return in_cidrs(own, family, addr);
}

/* ---- the floor -------------------------------------------------------------- */

struct range4 { uint32_t net; unsigned prefix; const char *why; };
struct range6 { uint8_t net[16]; unsigned prefix; const char *why; };

/* IANA IPv4 Special-Purpose Address Registry plus what clouds use. Order:
 * the most specific first (168.63.129.16 inside nothing else, 192.0.0.0/24
 * before nothing broader), so the reason is the most telling one. */
static const struct range4 floor4[] = {
    {0x00000000, 8, "unspecified"},          /* 0/8 "this network": connect() reaches the host */
    {0x0a000000, 8, "rfc1918"},
    {0x64400000, 10, "cgnat"},               /* 100.64/10; Alibaba metadata 100.100.100.200 */
    {0x7f000000, 8, "loopback"},
    {0xa9fe0000, 16, "link_local"},          /* 169.254/16: 169.254.169.254 metadata */
    {0xac100000, 12, "rfc1918"},
    {0xc0000000, 24, "reserved"},            /* 192.0.0/24 IETF protocol assignments (Oracle 192.0.0.192) */
    {0xc0000200, 24, "documentation"},       /* 192.0.2/24 TEST-NET-1 */
    {0xc0586300, 24, "reserved"},            /* 192.88.99/24 deprecated 6to4 relay anycast */
    {0xc0a80000, 16, "rfc1918"},
    {0xc6120000, 15, "reserved"},            /* 198.18/15 benchmarking */
    {0xc6336400, 24, "documentation"},       /* 198.51.100/24 TEST-NET-2 */
    {0xcb007100, 24, "documentation"},       /* 203.0.113/24 TEST-NET-3 */
    {0xe0000000, 4, "multicast"},
    {0xf0000000, 4, "reserved"},             /* 240/4 and 255.255.255.255 */
    {0xa83f8110, 32, "cloud_metadata"},      /* 168.63.129.16 Azure WireServer */
};

#define V6(a, b, c, d, e, f, g, h)                                                            \
    {(a) >> 8, (a) & 0xff, (b) >> 8, (b) & 0xff, (c) >> 8, (c) & 0xff, (d) >> 8, (d) & 0xff, \
     (e) >> 8, (e) & 0xff, (f) >> 8, (f) & 0xff, (g) >> 8, (g) & 0xff, (h) >> 8, (h) & 0xff}

static const struct range6 floor6[] = {
    {V6(0, 0, 0, 0, 0, 0, 0, 0), 128, "unspecified"},
    {V6(0, 0, 0, 0, 0, 0, 0, 1), 128, "loopback"},
    {V6(0x100, 0, 0, 0, 0, 0, 0, 0), 64, "reserved"},        /* discard-only */
    {V6(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, "documentation"},
    {V6(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, "reserved"},       /* IETF protocol assignments */
    {V6(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, "documentation"},  /* RFC 9637 */
    {V6(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, "reserved"},       /* SRv6 SIDs */
    {V6(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, "ula"},             /* fd00:ec2::254 metadata */
    {V6(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link_local"},
    {V6(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "reserved"},       /* deprecated site-local */
    {V6(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast"},
};

static const char *floor_v4(const uint8_t a[4])
{
    uint32_t v = ((uint32_t)a[0] << 24) | ((uint32_t)a[1] << 16) | ((uint32_t)a[2] << 8) | a[3];
    for (size_t i = 0; i < sizeof(floor4) / sizeof(floor4[0]); i++) {
        uint32_t mask = floor4[i].prefix == 0 ? 0 : 0xffffffffu << (32 - floor4[i].prefix);
        if ((v & mask) == floor4[i].net)
            return floor4[i].why;
    }
    return NULL;
}

static const char *floor_v6(const uint8_t a[16])
{
    for (size_t i = 0; i < sizeof(floor6) / sizeof(floor6[0]); i++)
        if (prefix_equal(a, floor6[i].net, floor6[i].prefix))
            return floor6[i].why;
    /* Everything outside 2000::/3 (global unicast) that is not named
     * above or an embedding form is reserved by the IETF. */
    if ((a[0] & 0xe0) != 0x20)
        return "reserved";
    return NULL;
}

/* The IPv4 addresses an IPv6 address carries, and the name of the form.
 * Returns how many (0..2). */
static size_t embedded_v4(const uint8_t a[16], uint8_t out[2][4], const char **form)
{
    static const uint8_t zero[16];
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t translated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 1};

    if (memcmp(a, mapped, 12) == 0) {                  /* ::ffff:0:0/96 */
        *form = "ipv4_mapped";
        memcpy(out[0], a + 12, 4);
        return 1;
    }
    if (memcmp(a, translated, 12) == 0) {              /* ::ffff:0:0:0/96 (SIIT) */
        *form = "ipv4_translated";
        memcpy(out[0], a + 12, 4);
        return 1;
    }
    if (memcmp(a, zero, 12) == 0) {                    /* ::/96 IPv4-compatible */
        /* :: and ::1 are themselves: the v6 floor names them. */
        if (memcmp(a, zero, 15) == 0 && a[15] <= 1)
            return 0;
        *form = "ipv4_compatible";
        memcpy(out[0], a + 12, 4);
        return 1;
    }
    if (memcmp(a, nat64, 12) == 0) {                   /* 64:ff9b::/96 */
        *form = "nat64";
        memcpy(out[0], a + 12, 4);
        return 1;
    }
    if (memcmp(a, nat64_local, 6) == 0) {              /* 64:ff9b:1::/48 local-use NAT64 */
        /* RFC 6052 puts the IPv4 address after a /48 prefix at bits
         * 48..63 and 72..87 (bits 64..71 are zero); operators also carve
         * /96 prefixes out of it, with the address in the last 32 bits.
         * Both readings are checked, except one that is all zero: that is
         * the other layout's filler (64:ff9b:1::a00:1 reads 0.0.0.0 the
         * /48 way). Both zero: 0.0.0.0, refused. */
        static const uint8_t z4[4];
        size_t n = 0;
        *form = "nat64_local";
        out[n][0] = a[6];
        out[n][1] = a[7];
        out[n][2] = a[9];
        out[n][3] = a[10];
        if (memcmp(out[n], z4, 4) != 0)
            n++;
        memcpy(out[n], a + 12, 4);
        if (memcmp(out[n], z4, 4) != 0 || n == 0)
            n++;
        return n;
    }
    if (a[0] == 0x20 && a[1] == 0x02) {                /* 2002::/16 6to4 */
        *form = "6to4";
        memcpy(out[0], a + 2, 4);
        return 1;
    }
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0) { /* 2001::/32 Teredo */
        /* Server address in bits 32..63; the client's, inverted, in the last 32. */
        *form = "teredo";
        memcpy(out[0], a + 4, 4);
        for (int i = 0; i < 4; i++)
            out[1][i] = (uint8_t)~a[12 + i];
        return 2;
    }
    return 0;
}

bool eg_addr_denied(const struct sockaddr *sa, const struct eg_cidrs *allow,
                    const struct eg_cidrs *own, char *reason, size_t reasonlen)
{
    char text[INET6_ADDRSTRLEN];
    const char *why;

    if (sa->sa_family == AF_INET) {
        const uint8_t *a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        inet_ntop(AF_INET, a, text, sizeof(text));
        if (in_cidrs(allow, AF_INET, a))
            return false;
        why = floor_v4(a);
        if (why) {
            snprintf(reason, reasonlen, "%s %s", why, text);
            return true;
        }
        if (is_own(own, AF_INET, a)) {
            snprintf(reason, reasonlen, "own_address %s", text);
            return true;
        }
        return false;
    }
    if (sa->sa_family != AF_INET6) {
        snprintf(reason, reasonlen, "address family %d", sa->sa_family);
        return true;
    }
    const uint8_t *a = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    inet_ntop(AF_INET6, a, text, sizeof(text));
    if (in_cidrs(allow, AF_INET6, a))
        return false;
    uint8_t v4[2][4];
    const char *form = NULL;
    size_t n = embedded_v4(a, v4, &form);
    if (n > 0) {
        /* Every embedded address must pass; one inside allow_ranges is
         * as good as the IPv6 address being inside them. */
        for (size_t i = 0; i < n; i++) {
            char t4[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, v4[i], t4, sizeof(t4));
            if (in_cidrs(allow, AF_INET, v4[i]))
                continue;
            why = floor_v4(v4[i]);
            if (why) {
                snprintf(reason, reasonlen, "%s %s %s (in %s)", form, why, t4, text);
                return true;
            }
            if (is_own(own, AF_INET, v4[i])) {
                snprintf(reason, reasonlen, "%s own_address %s (in %s)", form, t4, text);
                return true;
            }
        }
        return false; /* a public IPv4 address behind a translation form */
    }
    why = floor_v6(a);
    if (why) {
        snprintf(reason, reasonlen, "%s %s", why, text);
        return true;
    }
    if (is_own(own, AF_INET6, a)) {
        snprintf(reason, reasonlen, "own_address %s", text);
        return true;
    }
    return false;
}

/* ---- hosts and entries ------------------------------------------------------- */

bool eg_host_normalise(const char *in, size_t len, char *out, size_t outlen)
{
    char buf[256];
    uint8_t addr[16];

    if (len == 0 || len >= sizeof(buf) || outlen < sizeof(buf))
        return false;
    memcpy(buf, in, len);
    buf[len] = '\0';
    if (memchr(buf, '\0', len))
        return false;
    if (inet_pton(AF_INET6, buf, addr) == 1) {
        inet_ntop(AF_INET6, addr, out, outlen);
        return true;
    }
    /* Only the dotted-quad form counts as an IPv4 literal; "10.1" or
     * "0x7f.1" are not names either (a resolver or libc could read them
     * as addresses), so they are refused below. */
    if (inet_pton(AF_INET, buf, addr) == 1) {
        inet_ntop(AF_INET, addr, out, outlen);
        return true;
    }
    if (len > 1 && buf[len - 1] == '.')
        buf[--len] = '\0';
    if (len > 253)
        return false;
    size_t label = 0, label_start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)buf[i];
        if (ch == '.') {
            if (label == 0)
                return false;
            label = 0;
            label_start = i + 1;
            continue;
        }
        if (!(isalnum(ch) || ch == '-' || ch == '_'))
            return false;
        if (++label > 63)
            return false;
        buf[i] = (char)tolower(ch);
    }
    if (label == 0)
        return false;
    /* A last label that is a number ("10.1", "127.1", "0x7f") makes the
     * name an IPv4 address to many parsers (the WHATWG URL rule): not a
     * name the proxy resolves. */
    const char *last = buf + label_start;
    bool numeric = strspn(last, "0123456789") == strlen(last) ||
                   (last[0] == '0' && last[1] == 'x' && strspn(last + 2, "0123456789abcdef") == strlen(last + 2));
    if (numeric)
        return false;
    memcpy(out, buf, len + 1);
    return true;
}

bool eg_host_matches(const char *pattern, const char *host)
{
    if (strcmp(pattern, "*") == 0)
        return true;
    if (strncmp(pattern, "*.", 2) == 0) {
        const char *dom = pattern + 2;
        size_t hl = strlen(host), dl = strlen(dom);
        return hl > dl + 1 && host[hl - dl - 1] == '.' && strcmp(host + hl - dl, dom) == 0;
    }
    return strcmp(pattern, host) == 0;
}

void eg_rule_clear(struct eg_rule *r)
{
    if (!r)
        return;
    free(r->text);
    free(r->host);
    memset(r, 0, sizeof(*r));
}

static int parse_port(const char *p, int *ret)
{
    char *end;
    if (*p < '0' || *p > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(p, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > 65535)
        return -1;
    *ret = (int)v;
    return 0;
}

int eg_rule_parse(const char *s, struct eg_rule *ret, char *err, size_t errlen)
{
    struct eg_rule r = {0};
    const char *hp = s;
    char hostpart[300];
    const char *sp = strchr(s, ' ');

    r.port = EG_PORT_DEFAULT;
    if (sp) {
        /* "GET host" or "GET,HEAD host:443" */
        const char *m = s;
        while (m < sp) {
            const char *comma = memchr(m, ',', (size_t)(sp - m));
            const char *e = comma ? comma : sp;
            size_t ml = (size_t)(e - m);
            if (ml == 0 || ml >= sizeof(r.methods[0]) || r.n_methods >= EG_MAX_METHODS)
                goto bad_method;
            for (size_t i = 0; i < ml; i++)
                if (!isupper((unsigned char)m[i]))
                    goto bad_method;
            memcpy(r.methods[r.n_methods], m, ml);
            r.methods[r.n_methods][ml] = '\0';
            r.n_methods++;
            m = e + (comma ? 1 : 0);
            if (comma && m == sp)
                goto bad_method;
        }
        hp = sp + 1;
        if (strchr(hp, ' ')) {
            snprintf(err, errlen, "\"%.80s\": expected [METHOD[,METHOD...] ]HOST[:PORT]", s);
            return -1;
        }
    }
    if (strlen(hp) >= sizeof(hostpart)) {
        snprintf(err, errlen, "\"%.80s...\": the host is too long", s);
        return -1;
    }
    if (hp[0] == '[') {
        const char *close = strchr(hp, ']');
        if (!close) {
            snprintf(err, errlen, "\"%.80s\": missing ']' after the IPv6 address", s);
            return -1;
        }
        memcpy(hostpart, hp + 1, (size_t)(close - hp - 1));
        hostpart[close - hp - 1] = '\0';
        if (close[1] == ':') {
            if (parse_port(close + 2, &r.port) < 0)
                goto bad_port;
        } else if (close[1] != '\0') {
            snprintf(err, errlen, "\"%.80s\": expected :PORT after ']'", s);
            return -1;
        }
    } else {
        const char *colon = strrchr(hp, ':');
        if (colon && strchr(hp, ':') != colon)
            colon = NULL; /* a bare IPv6 address: no port */
        size_t hl = colon ? (size_t)(colon - hp) : strlen(hp);
        memcpy(hostpart, hp, hl);
        hostpart[hl] = '\0';
        if (colon && parse_port(colon + 1, &r.port) < 0)
            goto bad_port;
    }
    char norm[256];
    if (strcmp(hostpart, "*") == 0) {
        r.any_host = true;
        snprintf(norm, sizeof(norm), "*");
    } else if (strncmp(hostpart, "*.", 2) == 0) {
        if (!eg_host_normalise(hostpart + 2, strlen(hostpart + 2), norm, sizeof(norm)) ||
            strchr(norm, '.') == NULL) {
            snprintf(err, errlen, "\"%.80s\": \"*.\" must be followed by a domain with a dot "
                     "(such as *.example.org)", s);
            return -1;
        }
        r.wildcard = true;
    } else if (!eg_host_normalise(hostpart, strlen(hostpart), norm, sizeof(norm))) {
        snprintf(err, errlen, "\"%.80s\": \"%.80s\" is not a host name or IP address", s, hostpart);
        return -1;
    }
    r.text = strdup(s);
    r.host = strdup(norm);
    if (!r.text || !r.host) {
        eg_rule_clear(&r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *ret = r;
    return 0;

bad_method:
    snprintf(err, errlen, "\"%.80s\": methods are upper-case words separated by ',' "
             "before one space (\"GET,HEAD host:443\")", s);
    return -1;
bad_port:
    snprintf(err, errlen, "\"%.80s\": the port must be 1..65535", s);
    return -1;
}

static bool rule_covers_host_port(const struct eg_rule *r, const char *host, int port, bool is_deny)
{
    if (r->port == EG_PORT_DEFAULT) {
        /* Allow entries without a port mean the web ports; deny entries
         * without a port mean every port (deny is never narrower than
         * what it is written as). */
        if (!is_deny && port != 80 && port != 443)
            return false;
    } else if (r->port != port) {
        return false;
    }
    if (r->any_host)
        return true;
    if (r->wildcard) {
        size_t hl = strlen(host), dl = strlen(r->host);
        return hl > dl + 1 && host[hl - dl - 1] == '.' && strcmp(host + hl - dl, r->host) == 0;
    }
    return strcmp(r->host, host) == 0;
}

static bool rule_has_method(const struct eg_rule *r, const char *method)
{
    if (r->n_methods == 0)
        return true;
    for (size_t i = 0; i < r->n_methods; i++)
        if (strcmp(r->methods[i], method) == 0)
            return true;
    return false;
}

enum eg_verdict eg_rules_check(const struct eg_rules *allow, const struct eg_rules *deny,
                               const char *method, const char *host, int port, bool inspected,
                               char *reason, size_t reasonlen)
{
    bool is_connect = strcmp(method, "CONNECT") == 0;

    for (size_t i = 0; deny && i < deny->n; i++) {
        const struct eg_rule *r = &deny->v[i];
        if (!rule_covers_host_port(r, host, port, true))
            continue;
        /* A method-restricted deny entry cannot be enforced inside a tunnel
         * the proxy does not inspect: refuse the tunnel (deny wins). */
        if (rule_has_method(r, method) || (is_connect && !inspected)) {
            snprintf(reason, reasonlen, "denied by \"%s\"", r->text);
            return EG_DENY;
        }
    }
    bool host_port_listed = false;
    for (size_t i = 0; allow && i < allow->n; i++) {
        const struct eg_rule *r = &allow->v[i];
        if (!rule_covers_host_port(r, host, port, false))
            continue;
        host_port_listed = true;
        /* An inspected tunnel's requests are checked one by one, so any
         * entry for host:port lets the tunnel open. */
        if (rule_has_method(r, method) || (is_connect && inspected)) {
            snprintf(reason, reasonlen, "allowed by \"%s\"", r->text);
            return EG_ALLOW;
        }
    }
    if (host_port_listed)
        snprintf(reason, reasonlen, "method %s not allowed for %s:%d%s", method, host, port,
                 is_connect ? " (a method-restricted entry cannot cover an uninspected tunnel)" : "");
    else
        snprintf(reason, reasonlen, "%s:%d is not in the allow list", host, port);
    return EG_DENY;
}
