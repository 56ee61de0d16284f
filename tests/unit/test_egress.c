/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the egress proxy's decisions (src/egress/policy.c): the
 * deny floor over every special-purpose range and every IPv6 form that
 * embeds an IPv4 address, allow_ranges, the host's own addresses, and the
 * allow/deny entries. Each refused address has a neighbour just outside
 * its range that passes, so a range written too wide fails too. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "eg_policy.h"

static bool denied_with(const char *addr, const struct eg_cidrs *allow, const struct eg_cidrs *own,
                        char *reason, size_t len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
    }
    reason[0] = '\0';
    return eg_addr_denied((struct sockaddr *)&ss, allow, own, reason, len);
}

/* The reason must name the class: "rfc1918 10.0.0.1", "ipv4_mapped rfc1918 ...". */
static void expect_denied(const char *addr, const char *why)
{
    char reason[256];
    bool d = denied_with(addr, NULL, NULL, reason, sizeof(reason));
    if (!d)
        fail_msg("%s was allowed, expected %s", addr, why);
    if (!strstr(reason, why))
        fail_msg("%s: reason \"%s\" does not name %s", addr, reason, why);
}

static void expect_allowed(const char *addr)
{
    char reason[256];
    if (denied_with(addr, NULL, NULL, reason, sizeof(reason)))
        fail_msg("%s was refused: %s", addr, reason);
}

static void test_floor_v4(void **state)
{
    (void)state;
    static const struct { const char *addr, *why; } bad[] = {
        {"0.0.0.0", "unspecified"}, {"0.255.255.255", "unspecified"},
        {"10.0.0.0", "rfc1918"}, {"10.0.0.1", "rfc1918"}, {"10.255.255.255", "rfc1918"},
        {"100.64.0.0", "cgnat"}, {"100.100.100.200", "cgnat"}, {"100.127.255.255", "cgnat"},
        {"127.0.0.1", "loopback"}, {"127.255.255.254", "loopback"},
        {"169.254.0.1", "link_local"}, {"169.254.169.254", "link_local"},
        {"172.16.0.1", "rfc1918"}, {"172.31.255.255", "rfc1918"},
        {"192.0.0.1", "reserved"}, {"192.0.0.192", "reserved"},
        {"192.0.2.1", "documentation"}, {"198.51.100.7", "documentation"}, {"203.0.113.9", "documentation"},
        {"192.88.99.1", "reserved"},
        {"192.168.0.1", "rfc1918"}, {"192.168.255.255", "rfc1918"},
        {"198.18.0.1", "reserved"}, {"198.19.255.255", "reserved"},
        {"224.0.0.1", "multicast"}, {"239.255.255.250", "multicast"},
        {"240.0.0.1", "reserved"}, {"255.255.255.255", "reserved"},
        {"168.63.129.16", "cloud_metadata"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_denied(bad[i].addr, bad[i].why);
    /* Neighbours just outside each range, and ordinary public addresses. */
    static const char *const good[] = {
        "1.0.0.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
        "126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255",
        "172.32.0.0", "192.0.1.0", "192.0.3.0", "192.88.98.255", "192.88.100.0", "192.167.255.255",
        "192.169.0.0", "198.17.255.255", "198.20.0.0", "198.51.99.255", "198.51.101.0",
        "203.0.112.255", "203.0.114.0", "223.255.255.255", "168.63.129.15", "168.63.129.17",
        "93.184.216.34",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        expect_allowed(good[i]);
}

static void test_floor_v6(void **state)
{
    (void)state;
    static const struct { const char *addr, *why; } bad[] = {
        {"::", "unspecified"}, {"::1", "loopback"},
        {"fc00::1", "ula"}, {"fd00:ec2::254", "ula"}, {"fdff:ffff::1", "ula"},
        {"fe80::1", "link_local"}, {"febf:ffff::1", "link_local"},
        {"fec0::1", "reserved"},
        {"ff02::1", "multicast"}, {"ff0e::1", "multicast"},
        {"2001:db8::1", "documentation"}, {"3fff::1", "documentation"},
        {"100::1", "reserved"}, {"2001:2::1", "reserved"}, {"2001:10::1", "reserved"},
        {"5f00::1", "reserved"},
        {"4000::1", "reserved"}, {"e000::1", "reserved"}, {"1::1", "reserved"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_denied(bad[i].addr, bad[i].why);
    static const char *const good[] = {
        "2a00:1450:4001::1", "2606:4700::1111", "2001:4860:4860::8888", "2001:200::1",
        "2001:db9::1", "2400:cb00::1", "3ffe::1", "3fff:1000::1",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        expect_allowed(good[i]);
}

/* Every IPv6 form that carries an IPv4 address is judged by that address. */
static void test_embedded_v4(void **state)
{
    (void)state;
    static const struct { const char *addr, *why; } bad[] = {
        /* the examples */
        {"::ffff:10.0.0.1", "ipv4_mapped rfc1918"}, {"64:ff9b::a00:1", "nat64 rfc1918"},
        /* mapped */
        {"::ffff:127.0.0.1", "ipv4_mapped loopback"}, {"::ffff:169.254.169.254", "ipv4_mapped link_local"},
        {"::ffff:168.63.129.16", "ipv4_mapped cloud_metadata"}, {"::ffff:0.0.0.0", "ipv4_mapped unspecified"},
        /* SIIT translated */
        {"::ffff:0:10.0.0.1", "ipv4_translated rfc1918"},
        /* compatible */
        {"::10.0.0.1", "ipv4_compatible rfc1918"}, {"::127.0.0.1", "ipv4_compatible loopback"},
        {"::169.254.169.254", "ipv4_compatible link_local"},
        /* NAT64 well-known and local-use */
        {"64:ff9b::7f00:1", "nat64 loopback"}, {"64:ff9b::a9fe:a9fe", "nat64 link_local"},
        {"64:ff9b:1::a00:1", "nat64_local rfc1918"},
        {"64:ff9b:1:a00:1::", "nat64_local rfc1918"}, /* RFC 6052 /48 layout: 10.0 | 0.1 */
        /* 6to4 */
        {"2002:a00:1::1", "6to4 rfc1918"}, {"2002:7f00:1::", "6to4 loopback"},
        {"2002:a9fe:a9fe::1", "6to4 link_local"}, {"2002:c0a8:101::1", "6to4 rfc1918"},
        /* Teredo: server in bits 32..63, client inverted in the last 32 */
        {"2001:0:a00:1::1", "teredo rfc1918"},
        {"2001:0:808:808::f5ff:fffe", "teredo rfc1918"}, /* client ~f5ff:fffe = 10.0.0.1 */
        {"2001:0:808:808::80ff:fffe", "teredo loopback"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_denied(bad[i].addr, bad[i].why);
    static const char *const good[] = {
        "::ffff:8.8.8.8", "64:ff9b::808:808", "64:ff9b:1::808:808", "2002:808:808::1",
        "2001:0:808:808::f7f7:f7f7", /* server 8.8.8.8, client 8.8.8.8 */
        "::ffff:93.184.216.34",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        expect_allowed(good[i]);
}

static struct eg_cidr cidr(const char *s)
{
    struct eg_cidr c;
    char err[200];
    if (eg_cidr_parse(s, &c, err, sizeof(err)) != 0)
        fail_msg("%s: %s", s, err);
    return c;
}

static void test_allow_ranges_and_own(void **state)
{
    (void)state;
    char reason[256];
    struct eg_cidr a[] = {cidr("10.1.0.0/16"), cidr("fd00:ec2::/32")};
    struct eg_cidrs allow = {a, 2};
    struct eg_cidr o[] = {cidr("11.1.1.1"), cidr("2a00:11::1")};
    struct eg_cidrs own = {o, 2};

    /* allow_ranges opt a range back in, nothing wider. */
    assert_false(denied_with("10.1.2.3", &allow, NULL, reason, sizeof(reason)));
    assert_true(denied_with("10.2.0.1", &allow, NULL, reason, sizeof(reason)));
    assert_false(denied_with("fd00:ec2::254", &allow, NULL, reason, sizeof(reason)));
    assert_true(denied_with("fd00:ec3::254", &allow, NULL, reason, sizeof(reason)));
    /* ... and the forms embedding an allowed IPv4 address. */
    assert_false(denied_with("::ffff:10.1.2.3", &allow, NULL, reason, sizeof(reason)));
    assert_false(denied_with("64:ff9b::a01:203", &allow, NULL, reason, sizeof(reason)));
    assert_true(denied_with("::ffff:10.2.0.1", &allow, NULL, reason, sizeof(reason)));
    /* The host's own addresses, and forms embedding them. */
    assert_true(denied_with("11.1.1.1", NULL, &own, reason, sizeof(reason)));
    assert_non_null(strstr(reason, "own_address"));
    assert_false(denied_with("11.1.1.2", NULL, &own, reason, sizeof(reason)));
    assert_true(denied_with("::ffff:11.1.1.1", NULL, &own, reason, sizeof(reason)));
    assert_non_null(strstr(reason, "own_address"));
    assert_true(denied_with("2002:b01:101::1", NULL, &own, reason, sizeof(reason)));
    assert_true(denied_with("2a00:11::1", NULL, &own, reason, sizeof(reason)));
    assert_false(denied_with("2a00:11::2", NULL, &own, reason, sizeof(reason)));
}

static void test_cidr_parse(void **state)
{
    (void)state;
    struct eg_cidr c;
    char err[200];
    assert_int_equal(eg_cidr_parse("10.0.0.0/8", &c, err, sizeof(err)), 0);
    assert_int_equal(c.prefix, 8);
    assert_int_equal(eg_cidr_parse("fd00::/8", &c, err, sizeof(err)), 0);
    assert_int_equal(c.family, AF_INET6);
    assert_int_equal(eg_cidr_parse("1.2.3.4", &c, err, sizeof(err)), 0);
    assert_int_equal(c.prefix, 32);
    static const char *const bad[] = {"", "/8", "10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/",
                                      "10.0.0.0/8x", "fd00::/129", "host/8", "10.0.0.0/99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (eg_cidr_parse(bad[i], &c, err, sizeof(err)) == 0)
            fail_msg("\"%s\" parsed as a CIDR", bad[i]);
}

static void test_host_normalise(void **state)
{
    (void)state;
    char out[256];
#define NORM(in) eg_host_normalise(in, strlen(in), out, sizeof(out))
    assert_true(NORM("Example.ORG."));
    assert_string_equal(out, "example.org");
    assert_true(NORM("::FFFF:10.0.0.1"));
    assert_string_equal(out, "::ffff:10.0.0.1");
    assert_true(NORM("10.0.0.1"));
    assert_false(NORM(""));
    assert_false(NORM("a..b"));
    assert_false(NORM("a b"));
    assert_false(NORM("evil.com/x"));
    assert_false(NORM("127.1"));   /* a number to inet_aton */
    assert_false(NORM("0x7f.1"));
    assert_false(NORM("2130706433"));
    assert_false(NORM("a.0x7f"));
    assert_true(NORM("1a.example"));
    assert_false(NORM("a\nb"));
    char big[300];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_false(NORM(big));
#undef NORM
}

static struct eg_rules rules(struct eg_rule *v, const char *const *texts, size_t n)
{
    char err[300];
    for (size_t i = 0; i < n; i++)
        if (eg_rule_parse(texts[i], &v[i], err, sizeof(err)) != 0)
            fail_msg("%s: %s", texts[i], err);
    return (struct eg_rules){v, n};
}

static void free_rules(struct eg_rules *r)
{
    for (size_t i = 0; i < r->n; i++)
        eg_rule_clear(&r->v[i]);
}

static void test_rules(void **state)
{
    (void)state;
    static const char *const at[] = {"pypi.example:443", "*.example.org", "10.1.2.3:8080",
                                     "GET,HEAD files.example", "[2a00::1]:8443", "plain.example",
                                     "CONNECT tunnel.example:22"};
    static const char *const dt[] = {"bad.example.org", "POST *.example.org:443"};
    struct eg_rule av[7], dv[2];
    struct eg_rules allow = rules(av, at, 7), deny = rules(dv, dt, 2);
    char r[300];
#define CHECK(m, h, p, insp) eg_rules_check(&allow, &deny, m, h, p, insp, r, sizeof(r))
    assert_int_equal(CHECK("CONNECT", "pypi.example", 443, false), EG_ALLOW);
    assert_int_equal(CHECK("CONNECT", "pypi.example", 80, false), EG_DENY);       /* port */
    assert_int_equal(CHECK("GET", "other.example", 80, false), EG_DENY);          /* host */
    assert_non_null(strstr(r, "not in the allow list"));
    assert_int_equal(CHECK("GET", "a.example.org", 80, false), EG_ALLOW);         /* wildcard */
    assert_int_equal(CHECK("GET", "a.b.example.org", 443, false), EG_ALLOW);
    assert_int_equal(CHECK("GET", "example.org", 80, false), EG_DENY);            /* not the apex */
    assert_int_equal(CHECK("GET", "badexample.org", 80, false), EG_DENY);
    assert_int_equal(CHECK("GET", "a.example.org", 8080, false), EG_DENY);        /* no port: 80/443 */
    assert_int_equal(CHECK("GET", "bad.example.org", 80, false), EG_DENY);        /* deny wins */
    assert_non_null(strstr(r, "bad.example.org"));
    assert_int_equal(CHECK("GET", "bad.example.org", 9999, false), EG_DENY);      /* deny: every port */
    /* A method-restricted deny: POST refused; the tunnel too (it cannot be
     * inspected) unless it is inspected, where each request is checked. */
    assert_int_equal(CHECK("POST", "a.example.org", 443, false), EG_DENY);
    assert_int_equal(CHECK("GET", "a.example.org", 443, false), EG_ALLOW);
    assert_int_equal(CHECK("CONNECT", "a.example.org", 443, false), EG_DENY);
    assert_int_equal(CHECK("CONNECT", "a.example.org", 443, true), EG_ALLOW);
    assert_int_equal(CHECK("CONNECT", "a.example.org", 80, false), EG_ALLOW);     /* deny is :443 only */
    /* Method-restricted allow. */
    assert_int_equal(CHECK("GET", "files.example", 80, false), EG_ALLOW);
    assert_int_equal(CHECK("HEAD", "files.example", 443, false), EG_ALLOW);
    assert_int_equal(CHECK("POST", "files.example", 80, false), EG_DENY);
    assert_non_null(strstr(r, "method POST"));
    assert_int_equal(CHECK("CONNECT", "files.example", 443, false), EG_DENY);
    assert_int_equal(CHECK("CONNECT", "files.example", 443, true), EG_ALLOW);
    assert_int_equal(CHECK("CONNECT", "tunnel.example", 22, false), EG_ALLOW);
    assert_int_equal(CHECK("GET", "tunnel.example", 22, false), EG_DENY);
    /* IP literals. */
    assert_int_equal(CHECK("GET", "10.1.2.3", 8080, false), EG_ALLOW);
    assert_int_equal(CHECK("GET", "10.1.2.3", 80, false), EG_DENY);
    assert_int_equal(CHECK("CONNECT", "2a00::1", 8443, false), EG_ALLOW);
    assert_int_equal(CHECK("CONNECT", "plain.example", 443, false), EG_ALLOW);
    assert_int_equal(CHECK("CONNECT", "plain.example", 22, false), EG_DENY);
#undef CHECK
    free_rules(&allow);
    free_rules(&deny);

    struct eg_rule any;
    char err[300];
    assert_int_equal(eg_rule_parse("*", &any, err, sizeof(err)), 0);
    struct eg_rules a2 = {&any, 1};
    assert_int_equal(eg_rules_check(&a2, NULL, "GET", "x.y", 443, false, r, sizeof(r)), EG_ALLOW);
    eg_rule_clear(&any);

    static const char *const bad[] = {"", "host:0", "host:65536", "host:", "get host", "GET  host",
                                      "GET, host", "*.com.", "*.", "a b c", "[::1", "[::1]x", "ho st",
                                      "host:80x", "*.*.example"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct eg_rule x;
        if (eg_rule_parse(bad[i], &x, err, sizeof(err)) == 0) {
            eg_rule_clear(&x);
            fail_msg("\"%s\" parsed as an entry", bad[i]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_floor_v4),
        cmocka_unit_test(test_floor_v6),
        cmocka_unit_test(test_embedded_v4),
        cmocka_unit_test(test_allow_ranges_and_own),
        cmocka_unit_test(test_cidr_parse),
        cmocka_unit_test(test_host_normalise),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
