/* SPDX-License-Identifier: Apache-2.0 */
/* The egress proxy's decisions, free of I/O so that cmocka can test them
 * exhaustively (tests/unit/test_egress.c):
 *   - the deny floor: which resolved addresses may be dialled;
 *   - the allow/deny list: which (method, host, port) may be asked for.
 * Nothing here resolves a name, reads a file or allocates after parsing. */
#ifndef AJ_EG_POLICY_H
#define AJ_EG_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* ---- addresses ------------------------------------------------------------ */

struct eg_cidr {
    int family;        /* AF_INET or AF_INET6 */
    uint8_t addr[16];  /* network byte order; 4 bytes used for AF_INET */
    unsigned prefix;   /* 0..32 or 0..128 */
};

struct eg_cidrs {
    struct eg_cidr *v;
    size_t n;
};

/* "10.0.0.0/8", "fd00::/8", or a bare address (a /32 or /128).
 * Host bits set below the prefix are refused (a typo, not a range).
 * Returns 0, or -1 with a message in err. */
int eg_cidr_parse(const char *s, struct eg_cidr *ret, char *err, size_t errlen);

/* The deny floor. Returns true (and a reason such as "rfc1918 10.0.0.1" or
 * "ipv4_mapped rfc1918 10.0.0.1") when the address must not be dialled:
 * loopback, unspecified, RFC 1918, CGNAT, link-local, ULA, multicast,
 * reserved, documentation, benchmarking, 168.63.129.16, the host's own
 * addresses (own: exact addresses), and every IPv6 form that embeds such an
 * IPv4 address (mapped, compatible, NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
 * 6to4, Teredo). An address inside one of `allow` (policy allow_ranges) is
 * dialled whatever the floor says; for an embedding form, its embedded
 * IPv4 address inside `allow` counts too. */
bool eg_addr_denied(const struct sockaddr *sa, const struct eg_cidrs *allow,
                    const struct eg_cidrs *own, char *reason, size_t reasonlen);

/* ---- allow / deny entries -------------------------------------------------- */

#define EG_PORT_DEFAULT (-1) /* no port written: allow -> 80 and 443; deny -> any */
#define EG_MAX_METHODS 8

struct eg_rule {
    char *text;                /* as written, for reasons */
    char *host;                /* lower case, no trailing dot; IP literals canonical */
    bool any_host;             /* "*" */
    bool wildcard;             /* "*.example.org": host = "example.org", subdomains only */
    int port;                  /* 1..65535 or EG_PORT_DEFAULT */
    size_t n_methods;          /* 0: any method */
    char methods[EG_MAX_METHODS][16];
};

struct eg_rules {
    struct eg_rule *v;
    size_t n;
};

/* "host", "*.domain", "*", "host:port", "[v6]:port", optional leading
 * "METHOD " or "GET,HEAD ". Returns 0 or -1 with a message. */
int eg_rule_parse(const char *s, struct eg_rule *ret, char *err, size_t errlen);
void eg_rule_clear(struct eg_rule *r);

/* Host names as the proxy accepts them from a request: letters, digits,
 * '-', '_', '.', at most 253 characters; or an IP literal (v6 without
 * brackets). Writes the normalised (lower-case, canonical IP, no trailing
 * dot) form to out. Returns false for anything else. */
bool eg_host_normalise(const char *in, size_t len, char *out, size_t outlen);

/* Does `pattern` ("host", "*.domain", "*") cover host (normalised)? */
bool eg_host_matches(const char *pattern, const char *host);

enum eg_verdict { EG_ALLOW, EG_DENY };

/* The list decision for one request. method is the request's method
 * ("CONNECT" for a tunnel). inspected: the proxy will see the requests
 * inside the tunnel (TLS terminated for brokering), so a CONNECT is
 * allowed by any entry for host:port and the inner requests are checked
 * one by one. Deny entries win. The reason names the entry or says that
 * none matched; it never holds more than the host, port and method. */
enum eg_verdict eg_rules_check(const struct eg_rules *allow, const struct eg_rules *deny,
                               const char *method, const char *host, int port, bool inspected,
                               char *reason, size_t reasonlen);

#endif
