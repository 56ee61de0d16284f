/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the pure logic of the policy module: strict number
 * parsing, the flag-shaped setters, and the canonical JSON / sha256 of a
 * policy. Looks inside struct aj_policy, so it includes the internal model
 * header (src/lib/policy/aj_policy_model.h).
 *
 * Every rejection is paired with an acceptance of the nearest good input,
 * so a parser that rejects everything fails here as surely as one that
 * accepts everything. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "aj_policy_model.h"

/* ---- helpers ----------------------------------------------------------- */

static void freep(void *p)
{
    free(*(void **)p);
}
#define _cleanup_free_ __attribute__((cleanup(freep)))

static void check_msg_names(const struct aj_error *err, const char *what)
{
    if (!strstr(err->msg, what))
        fail_msg("error message \"%s\" does not name \"%s\"", err->msg, what);
}

/* A rejected flag: negative return, errnum 0 ("bad input"), a message that
 * names the offending value, and nothing appended to the policy. */
static void check_rejected(int r, const struct aj_error *err, const char *what)
{
    if (r >= 0)
        fail_msg("\"%s\" was accepted (r=%d)", what, r);
    assert_int_equal(r, -EINVAL);
    assert_int_equal(err->errnum, 0);
    check_msg_names(err, what);
}

static void fresh(struct aj_policy *pol, struct aj_error *err)
{
    aj_policy_init(pol);
    memset(err, 0, sizeof(*err));
}

/* ---- aj_parse_u64 ------------------------------------------------------ */

static void test_u64_accepts(void **state)
{
    uint64_t v = 12345;
    (void)state;

    assert_int_equal(aj_parse_u64("0", 100, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(aj_parse_u64("42", 100, &v), 0);
    assert_int_equal(v, 42);
    /* max is inclusive */
    assert_int_equal(aj_parse_u64("100", 100, &v), 0);
    assert_int_equal(v, 100);
    assert_int_equal(aj_parse_u64("18446744073709551615", UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
}

static void test_u64_decimal_only(void **state)
{
    uint64_t v = 0;
    int r;
    (void)state;

    /* Base 0 would read "010" as 8 and "0x10" as 16: a policy author who
     * writes 010 means ten. Either reject or read decimal, never octal. */
    r = aj_parse_u64("010", 1000, &v);
    if (r == 0)
        assert_int_equal(v, 10);
    assert_int_not_equal(aj_parse_u64("0x10", 1000, &v), 0);
}

static void test_u64_rejects(void **state)
{
    static const char *const bad[] = {
        "", "-1", "-0", " 1", "1 ", "\t1", "+1", "1x", "x1", "1.0", "1e3",
        "18446744073709551616",      /* UINT64_MAX + 1: strtoull ERANGE */
        "99999999999999999999999",
    };
    uint64_t v;
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 777;
        int r = aj_parse_u64(bad[i], UINT64_MAX, &v);
        if (r >= 0)
            fail_msg("aj_parse_u64(\"%s\") accepted, value %llu", bad[i],
                     (unsigned long long)v);
        assert_true(r == -EINVAL || r == -ERANGE);
        assert_int_equal(v, 777); /* *ret untouched on failure */
    }
}

/* A workspace owner: two decimal ids, neither (uid_t)-1, nothing else. */
static void test_owner_parse(void **state)
{
    static const char *const bad[] = {"", "1000", ":1000", "1000:", "-1:1000", "1000:-1", " 1:1", "1:1 ",
                                      "4294967295:1", "1:4294967295", "1:2:3", "0x10:1", "a:b", NULL};
    uint32_t u = 7, g = 7;
    (void)state;

    assert_int_equal(aj_parse_owner("1234:1235", &u, &g), 0);
    assert_int_equal(u, 1234);
    assert_int_equal(g, 1235);
    assert_int_equal(aj_parse_owner("4294967294:0", &u, &g), 0);
    assert_int_equal(u, 4294967294u);
    assert_int_equal(g, 0);
    for (size_t i = 0; bad[i]; i++) {
        u = g = 7;
        if (aj_parse_owner(bad[i], &u, &g) != -EINVAL)
            fail_msg("owner '%s' accepted", bad[i]);
        assert_int_equal(u, 7);
        assert_int_equal(g, 7);
    }
}

static void test_u64_rejects_above_max(void **state)
{
    uint64_t v = 0;
    (void)state;

    assert_int_equal(aj_parse_u64("100", 100, &v), 0);
    assert_true(aj_parse_u64("101", 100, &v) < 0);
    assert_true(aj_parse_u64("1", 0, &v) < 0);
    assert_int_equal(aj_parse_u64("0", 0, &v), 0);
    /* "-1" must not wrap to UINT64_MAX and then pass a max of UINT64_MAX */
    assert_true(aj_parse_u64("-1", UINT64_MAX, &v) < 0);
}

/* ---- aj_parse_size ----------------------------------------------------- */

static void test_size_accepts(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
    } ok[] = {
        {"0", 0},
        {"512", 512},
        {"64K", 64ULL << 10},
        {"512M", 512ULL << 20},
        {"512B", 512},
        {"64k", 64ULL << 10},
        {"1G", 1ULL << 30},
        {"1g", 1ULL << 30},
        {"16G", 16ULL << 30},
        {"1T", 1ULL << 40},
        /* largest G that fits: (2^64-1) >> 30 */
        {"17179869183G", 17179869183ULL << 30},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        int r = aj_parse_size(ok[i].in, &v);
        if (r != 0)
            fail_msg("aj_parse_size(\"%s\") = %d", ok[i].in, r);
        if (v != ok[i].want)
            fail_msg("aj_parse_size(\"%s\") = %llu, want %llu", ok[i].in,
                     (unsigned long long)v, (unsigned long long)ok[i].want);
    }
}

static void test_size_rejects(void **state)
{
    static const char *const bad[] = {
        "", "M", "K", "-1", "-1M", " 1M", "1M ", "1.5G", "1 M", "1MM", "1MB",
        "1KiB", "1P", "1b", "0x10M", "+1M", "1K\n",
        "17179869184G",              /* 2^34 G = 2^64: overflow after shift */
        "18446744073709551615K",     /* overflow after shift */
        "18446744073709551616",      /* overflow before any suffix */
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 777;
        int r = aj_parse_size(bad[i], &v);
        if (r >= 0)
            fail_msg("aj_parse_size(\"%s\") accepted, value %llu", bad[i],
                     (unsigned long long)v);
        assert_int_equal(v, 777);
    }
}

/* ---- aj_parse_duration_ms ---------------------------------------------- */

static void test_duration_accepts(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
    } ok[] = {
        {"0", 0},
        {"10", 10000},      /* bare number: seconds */
        {"10s", 10000},
        {"500ms", 500},
        {"0ms", 0},
        {"2m", 120000},
        {"1h", 3600000},
        {"1ms", 1},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        int r = aj_parse_duration_ms(ok[i].in, &v);
        if (r != 0)
            fail_msg("aj_parse_duration_ms(\"%s\") = %d", ok[i].in, r);
        if (v != ok[i].want)
            fail_msg("aj_parse_duration_ms(\"%s\") = %llu, want %llu", ok[i].in,
                     (unsigned long long)v, (unsigned long long)ok[i].want);
    }
}

static void test_duration_rejects(void **state)
{
    static const char *const bad[] = {
        "", "s", "ms", "m", "-1", "-1s", " 1s", "1s ", "1.5s", "1x", "1sm",
        "1msec", "1 s", "+1s", "1d", "1S", "1M",
        "18446744073709551615",      /* seconds * 1000 overflows */
        "18446744073709551615s",
        "307445734561825861m",       /* * 60000 overflows */
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 777;
        int r = aj_parse_duration_ms(bad[i], &v);
        if (r >= 0)
            fail_msg("aj_parse_duration_ms(\"%s\") accepted, value %llu", bad[i],
                     (unsigned long long)v);
        assert_int_equal(v, 777);
    }
}

/* ---- aj_policy_add_bind ------------------------------------------------ */

static void test_bind_same_path(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_bind(&pol, "/usr", false, &err), 0);
    assert_int_equal(pol.n_binds, 1);
    assert_string_equal(pol.binds[0].host, "/usr");
    assert_string_equal(pol.binds[0].sandbox, "/usr");
    assert_false(pol.binds[0].rw);
    aj_policy_clear(&pol);
}

static void test_bind_host_to_sandbox(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_bind(&pol, "/usr", false, &err), 0);
    assert_int_equal(aj_policy_add_bind(&pol, "/a:/b", true, &err), 0);
    assert_int_equal(pol.n_binds, 2);
    /* order preserved: later binds mount over earlier ones */
    assert_string_equal(pol.binds[0].host, "/usr");
    assert_string_equal(pol.binds[1].host, "/a");
    assert_string_equal(pol.binds[1].sandbox, "/b");
    assert_true(pol.binds[1].rw);
    aj_policy_clear(&pol);
}

static void test_bind_rejects(void **state)
{
    /* {spec, the substring the message must name} */
    static const struct {
        const char *spec;
        const char *names;
    } bad[] = {
        {"usr", "usr"},                   /* relative host */
        {"./usr", "./usr"},
        {"/a:b", "b"},                    /* relative sandbox */
        {"", "empty"},
        {":/b", "empty"},                 /* empty host */
        {"/a:", "empty"},                 /* empty sandbox */
        {"/a\nb", "/a\nb"},               /* control character */
        {"/usr/../etc", "/usr/../etc"},   /* ".." in host */
        {"/..", "/.."},
        {"/a:/b/../../etc", "/b/../../etc"}, /* ".." in sandbox */
        {"/a:/", "'/'"},                  /* over the whole root */
        {"/a://", "'/'"},
        {"/a:/proc", "/proc"},            /* /proc is the runtime's */
        {"/a:/proc/sys", "/proc/sys"},
        {"/a:/proc/../etc", "/proc/../etc"},
        {"/a:/dev", "/dev"},              /* so are /dev and /etc */
        {"/a:/dev/shm", "/dev/shm"},
        {"/a:/etc/passwd", "/etc/passwd"},
        {"/a:/./proc/", "/proc"},          /* normalised before the check */
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct aj_policy pol;
        struct aj_error err;
        int r;

        fresh(&pol, &err);
        r = aj_policy_add_bind(&pol, bad[i].spec, false, &err);
        check_rejected(r, &err, bad[i].names);
        assert_int_equal(pol.n_binds, 0);
        aj_policy_clear(&pol);
    }
}

static void test_bind_normalises(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_bind(&pol, "//usr/./lib/:/x//y/", false, &err), 0);
    assert_string_equal(pol.binds[0].host, "/usr/lib");
    assert_string_equal(pol.binds[0].sandbox, "/x/y");
    /* a name that merely starts like a reserved one is not reserved */
    assert_int_equal(aj_policy_add_bind(&pol, "/a:/procfoo", false, &err), 0);
    assert_int_equal(aj_policy_add_bind(&pol, "/a:/etcetera", false, &err), 0);
    assert_int_equal(aj_policy_add_bind(&pol, "/a:/devices", false, &err), 0);
    assert_int_equal(pol.n_binds, 4);
    aj_policy_clear(&pol);
}

static void test_bind_dotdot_is_component_only(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    /* "..." and "a..b" are ordinary names; only a ".." component escapes. */
    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_bind(&pol, "/srv/a..b:/data/...", false, &err), 0);
    assert_int_equal(pol.n_binds, 1);
    aj_policy_clear(&pol);
}

/* ---- aj_policy_add_tmpfs ----------------------------------------------- */

static void test_tmpfs_accepts(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_tmpfs(&pol, "/scratch", &err), 0);
    assert_int_equal(aj_policy_add_tmpfs(&pol, "/big:16M", &err), 0);
    assert_int_equal(pol.n_tmpfs, 2);
    assert_string_equal(pol.tmpfs[0].path, "/scratch");
    assert_int_equal(pol.tmpfs[0].size, AJ_DEFAULT_TMP_SIZE); /* never "unlimited" */
    assert_string_equal(pol.tmpfs[1].path, "/big");
    assert_int_equal(pol.tmpfs[1].size, 16ULL << 20);
    /* /tmp is the runtime's own tmpfs, but resizing it is allowed */
    assert_int_equal(aj_policy_add_tmpfs(&pol, "/tmp:4K", &err), 0);
    assert_int_equal(pol.tmpfs[2].size, 4096);
    assert_int_equal(pol.n_tmpfs, 3);
    aj_policy_clear(&pol);
}

static void test_tmpfs_rejects(void **state)
{
    static const struct {
        const char *spec;
        const char *names;
    } bad[] = {
        {"scratch", "scratch"},
        {"", ""},
        {"/scratch:", "size ''"},
        {"/scratch:lots", "lots"},
        {"/scratch:-1M", "-1M"},
        {"/scratch:1K", "1K"},            /* below one page */
        {"/scratch:0", "'0'"},
        {"/a/../etc", "/a/../etc"},
        {"/", "'/'"},
        {"/proc", "/proc"},
        {"/dev/shm", "/dev/shm"},         /* the runtime's; --tmp-size sizes it */
        {"/etc", "/etc"},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct aj_policy pol;
        struct aj_error err;

        fresh(&pol, &err);
        check_rejected(aj_policy_add_tmpfs(&pol, bad[i].spec, &err), &err, bad[i].names);
        assert_int_equal(pol.n_tmpfs, 0);
        aj_policy_clear(&pol);
    }
}

/* ---- aj_policy_add_env / add_env_pass ---------------------------------- */

static void test_env_accepts(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_env(&pol, "K=V", &err), 0);
    assert_int_equal(aj_policy_add_env(&pol, "EMPTY=", &err), 0);
    assert_int_equal(aj_policy_add_env(&pol, "_X1=a=b", &err), 0);
    assert_int_equal(pol.n_env, 3);
    assert_string_equal(pol.env[0], "K=V");
    assert_string_equal(pol.env[1], "EMPTY=");
    assert_string_equal(pol.env[2], "_X1=a=b");
    aj_policy_clear(&pol);
}

static void test_env_rejects(void **state)
{
    static const char *const bad[] = {"=V", "K", "", "1K=V", "K K=V", "K-1=V"};
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct aj_policy pol;
        struct aj_error err;

        fresh(&pol, &err);
        check_rejected(aj_policy_add_env(&pol, bad[i], &err), &err, bad[i]);
        assert_int_equal(pol.n_env, 0);
        aj_policy_clear(&pol);
    }
}

static void test_env_pass(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_add_env_pass(&pol, "HOME", &err), 0);
    assert_int_equal(pol.n_env_pass, 1);
    assert_string_equal(pol.env_pass[0], "HOME");
    check_rejected(aj_policy_add_env_pass(&pol, "A=B", &err), &err, "A=B");
    check_rejected(aj_policy_add_env_pass(&pol, "", &err), &err, "");
    assert_int_equal(pol.n_env_pass, 1);
    aj_policy_clear(&pol);
}

/* ---- network.mode, strings, uid_range ---------------------------------- */

static void test_network(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(pol.network, AJ_NET_LOOPBACK); /* the default: a private loopback */
    assert_int_equal(aj_policy_set(&pol, "--network", "loopback", &err), 0);
    assert_int_equal(pol.network, AJ_NET_LOOPBACK);
    assert_int_equal(aj_policy_set(&pol, "--network", "none", &err), 0);
    assert_int_equal(pol.network, AJ_NET_NONE);

    assert_int_equal(aj_policy_set(&pol, "--network", "loopback", &err), 0);
    check_rejected(aj_policy_set(&pol, "--network", "host", &err), &err, "host");
    assert_int_equal(pol.network, AJ_NET_LOOPBACK); /* unchanged on error */
    check_rejected(aj_policy_set(&pol, "--network", "", &err), &err, "");
    aj_policy_clear(&pol);
}

static void test_uid_range(void **state)
{
    static const char *const bad[] = {
        "0:65536",           /* host root and every system account */
        "1000:1",            /* a real user's files */
        "65535:1",
        "65536:0",           /* empty range */
        "4294901760:65536",  /* ends past 4294967294 (the overflow uid) */
        "4294967295:1",
        "-1:65536", "65536:-1", " 65536:1", "65536:1 ", "0x60000000:65536",
        "65536", "65536:", ":1", "65536:1:1", "", "65536:4294967296",
        "18446744073709551616:1",
    };
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_set_uid_range(&pol, "65536:1", &err), 0);
    assert_int_equal(pol.uid_base, 65536);
    assert_int_equal(pol.uid_count, 1);
    /* the last allowed uid is 4294967293: base + count == 4294967294 */
    assert_int_equal(aj_policy_set_uid_range(&pol, "4294901758:65536", &err), 0);
    assert_int_equal(pol.uid_base, 4294901758U);
    assert_int_equal(aj_policy_set_uid_range(&pol, "1610612736:65536", &err), 0);
    assert_int_equal(pol.uid_base, AJ_DEFAULT_UID_BASE);
    assert_int_equal(pol.uid_count, 65536);

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        check_rejected(aj_policy_set_uid_range(&pol, bad[i], &err), &err, bad[i]);
        /* unchanged on error: a half-applied range is a shared range */
        assert_int_equal(pol.uid_base, AJ_DEFAULT_UID_BASE);
        assert_int_equal(pol.uid_count, 65536);
    }
    aj_policy_clear(&pol);
}

static void test_set_string(void **state)
{
    struct aj_policy pol;
    struct aj_error err;
    (void)state;

    fresh(&pol, &err);
    assert_int_equal(aj_policy_set(&pol, "identity.hostname", "one", &err), 0);
    assert_string_equal(pol.hostname, "one");
    /* replacing frees the old value (ASan's leak checker sees it if not) */
    assert_int_equal(aj_policy_set(&pol, "identity.hostname", "two", &err), 0);
    assert_string_equal(pol.hostname, "two");
    aj_policy_clear(&pol);
}

static void test_init_defaults(void **state)
{
    struct aj_policy pol;
    (void)state;

    aj_policy_init(&pol);
    assert_int_equal(pol.n_binds, 0);
    assert_int_equal(pol.n_tmpfs, 0);
    assert_int_equal(pol.n_env, 0);
    assert_int_equal(pol.n_env_pass, 0);
    assert_int_equal(pol.network, AJ_NET_LOOPBACK);
    assert_int_equal(pol.timeout_ms, AJ_DEFAULT_TIMEOUT_MS);
    assert_int_equal(pol.tmp_size, AJ_TMP_SIZE_AUTO); /* sized by the memory limit */
    assert_int_equal(pol.uid, AJ_DEFAULT_UID);
    assert_int_equal(pol.gid, AJ_DEFAULT_GID);
    assert_int_equal(pol.rlimit_nofile, AJ_DEFAULT_NOFILE);
    assert_int_equal(pol.rlimit_fsize, AJ_DEFAULT_FSIZE);
    assert_false(pol.allow_degraded);
    aj_policy_clear(&pol);
    /* clear leaves a reusable, empty policy and is idempotent */
    aj_policy_clear(&pol);
}

/* ---- canonical JSON and sha256 ---------------------------------------- */

static void build_sample(struct aj_policy *pol)
{
    struct aj_error err;

    aj_policy_init(pol);
    assert_int_equal(aj_policy_add_bind(pol, "/usr", false, &err), 0);
    assert_int_equal(aj_policy_add_bind(pol, "/srv/data:/data", true, &err), 0);
    assert_int_equal(aj_policy_add_tmpfs(pol, "/scratch:16M", &err), 0);
    assert_int_equal(aj_policy_add_env(pol, "LANG=C.UTF-8", &err), 0);
    assert_int_equal(aj_policy_add_env(pol, "A=1", &err), 0);
    assert_int_equal(aj_policy_add_env_pass(pol, "TERM", &err), 0);
    assert_int_equal(aj_policy_set(pol, "identity.hostname", "box", &err), 0);
    assert_int_equal(aj_policy_set(pol, "filesystem.workdir", "/data", &err), 0);
    pol->timeout_ms = 10000;
}

static void hash_of(const struct aj_policy *pol, char hex[65])
{
    struct aj_error err;

    memset(hex, 'x', 65);
    assert_int_equal(aj_policy_sha256(pol, hex, &err), 0);
}

static void test_sha256_shape_and_stability(void **state)
{
    struct aj_policy a, b;
    char ha[65], ha2[65], hb[65];
    (void)state;

    build_sample(&a);
    build_sample(&b);
    hash_of(&a, ha);
    hash_of(&a, ha2);
    hash_of(&b, hb);

    assert_int_equal(strlen(ha), 64);
    for (size_t i = 0; i < 64; i++)
        if (!((ha[i] >= '0' && ha[i] <= '9') || (ha[i] >= 'a' && ha[i] <= 'f')))
            fail_msg("hash char %zu is '%c' in %s", i, ha[i], ha);
    assert_string_equal(ha, ha2);
    assert_string_equal(ha, hb); /* two separately built equal policies */

    aj_policy_clear(&a);
    aj_policy_clear(&b);
}

static void test_sha256_matches_canonical_json(void **state)
{
    /* The hash is of the canonical JSON bytes, so anyone holding the JSON
     * can check it with sha256sum. */
    struct aj_policy pol;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    char hex[65], want[65];
    char *json;
    (void)state;

    build_sample(&pol);
    json = aj_policy_canonical_json(&pol);
    assert_non_null(json);
    hash_of(&pol, hex);

    assert_int_equal(EVP_Digest(json, strlen(json), md, &md_len, EVP_sha256(), NULL), 1);
    assert_int_equal(md_len, 32);
    for (unsigned int i = 0; i < md_len; i++)
        (void)snprintf(want + 2 * i, 3, "%02x", md[i]);
    assert_string_equal(hex, want);

    free(json);
    aj_policy_clear(&pol);
}

static void test_canonical_json_sorted_compact(void **state)
{
    struct aj_policy pol;
    json_error_t jerr;
    json_t *root;
    char *json, *json2, *redump;
    (void)state;

    build_sample(&pol);
    json = aj_policy_canonical_json(&pol);
    json2 = aj_policy_canonical_json(&pol);
    assert_non_null(json);
    assert_non_null(json2);
    assert_string_equal(json, json2);

    root = json_loads(json, 0, &jerr);
    if (!root)
        fail_msg("canonical JSON does not parse: %s: %s", jerr.text, json);
    assert_true(json_is_object(root));
    /* Canonical means: re-serialising with sorted keys, compact, changes
     * nothing (the same bytes, so the same hash, on every machine). */
    redump = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
    assert_non_null(redump);
    assert_string_equal(json, redump);

    /* Positive control for the content: the values are in there. */
    assert_non_null(strstr(json, "\"/srv/data\""));
    assert_non_null(strstr(json, "\"C.UTF-8\""));
    assert_non_null(strstr(json, "\"TERM\""));

    free(redump);
    json_decref(root);
    free(json);
    free(json2);
    aj_policy_clear(&pol);
}

/* The environment is hashed as the effective map: a later NAME= replaces
 * an earlier one (so the supervisor must pass only the last one to execve,
 * or getenv() in the payload would see the first). */
static void test_sha256_env_effective_map(void **state)
{
    struct aj_policy a, b, c;
    struct aj_error err;
    char ha[65], hb[65], hc[65];
    (void)state;

    aj_policy_init(&a);
    aj_policy_init(&b);
    aj_policy_init(&c);
    assert_int_equal(aj_policy_add_env(&a, "A=1", &err), 0);
    assert_int_equal(aj_policy_add_env(&a, "A=2", &err), 0);
    assert_int_equal(aj_policy_add_env(&b, "A=2", &err), 0);
    assert_int_equal(aj_policy_add_env(&c, "A=2", &err), 0);
    assert_int_equal(aj_policy_add_env(&c, "A=1", &err), 0);
    hash_of(&a, ha);
    hash_of(&b, hb);
    hash_of(&c, hc);
    assert_string_equal(ha, hb);
    assert_string_not_equal(ha, hc);
    aj_policy_clear(&a);
    aj_policy_clear(&b);
    aj_policy_clear(&c);
}

/* A value the JSON encoder cannot represent (bytes that are not UTF-8 are
 * legal in Linux paths and environment values) must either be refused by
 * the setter or change the hash. Silently leaving it out of the canonical
 * JSON would give two different sandboxes the same policy_sha256. */
static void check_not_silently_dropped(const char *what, int (*add)(struct aj_policy *,
                                                                     struct aj_error *))
{
    struct aj_policy base, pol;
    struct aj_error err;
    char hbase[65], h[65];
    int r;

    build_sample(&base);
    hash_of(&base, hbase);
    build_sample(&pol);
    memset(&err, 0, sizeof(err));
    r = add(&pol, &err);
    if (r == 0) {
        _cleanup_free_ char *json = aj_policy_canonical_json(&pol);
        memset(&err, 0, sizeof(err));
        if (json && aj_policy_sha256(&pol, h, &err) == 0 && strcmp(h, hbase) == 0)
            fail_msg("%s was accepted and left out of the hash: %s", what, json);
    } else {
        assert_int_equal(err.errnum, 0);
    }
    aj_policy_clear(&pol);
    aj_policy_clear(&base);
}

static int add_bind_latin1(struct aj_policy *pol, struct aj_error *err)
{
    return aj_policy_add_bind(pol, "/srv/caf\xe9:/data2", true, err);
}

static int add_env_latin1(struct aj_policy *pol, struct aj_error *err)
{
    return aj_policy_add_env(pol, "SECRET=caf\xe9", err);
}

static int add_tmpfs_latin1(struct aj_policy *pol, struct aj_error *err)
{
    return aj_policy_add_tmpfs(pol, "/caf\xe9:1M", err);
}

static void test_sha256_non_utf8_bind(void **state)
{
    (void)state;
    check_not_silently_dropped("a bind with a non-UTF-8 path", add_bind_latin1);
}

static void test_sha256_non_utf8_env(void **state)
{
    (void)state;
    check_not_silently_dropped("an env value that is not UTF-8", add_env_latin1);
}

static void test_sha256_non_utf8_tmpfs(void **state)
{
    (void)state;
    check_not_silently_dropped("a tmpfs with a non-UTF-8 path", add_tmpfs_latin1);
}

/* Every field that changes what the sandbox gets must change the hash:
 * otherwise two different sandboxes report the same policy_sha256. */
static void test_sha256_covers_every_field(void **state)
{
    struct aj_policy base;
    char hbase[65];
    (void)state;

    build_sample(&base);
    hash_of(&base, hbase);

    for (int field = 0;; field++) {
        struct aj_policy pol;
        struct aj_error err;
        char h[65];
        const char *what = NULL;

        build_sample(&pol);
        switch (field) {
        case 0: what = "timeout_ms"; pol.timeout_ms++; break;
        case 1: what = "tmp_size"; pol.tmp_size++; break;
        case 2: what = "network"; pol.network = pol.network == AJ_NET_NONE ? AJ_NET_LOOPBACK : AJ_NET_NONE; break;
        case 3: what = "uid"; pol.uid++; break;
        case 4: what = "gid"; pol.gid++; break;
        case 5: what = "uid_base"; pol.uid_base += 65536; break;
        case 6: what = "uid_count"; pol.uid_count++; break;
        case 7: what = "rlimit_nofile"; pol.rlimit_nofile++; break;
        case 8: what = "rlimit_fsize"; pol.rlimit_fsize++; break;
        case 9: what = "allow_degraded"; pol.allow_degraded = !pol.allow_degraded; break;
        case 10:
            what = "hostname";
            assert_int_equal(aj_policy_set(&pol, "identity.hostname", "other", &err), 0);
            break;
        case 11:
            what = "workdir";
            assert_int_equal(aj_policy_set(&pol, "filesystem.workdir", "/tmp", &err), 0);
            break;
        case 12: what = "bind rw"; pol.binds[0].rw = !pol.binds[0].rw; break;
        case 13:
            what = "extra bind";
            assert_int_equal(aj_policy_add_bind(&pol, "/opt", false, &err), 0);
            break;
        case 14: what = "tmpfs size"; pol.tmpfs[0].size++; break;
        case 15:
            what = "extra env";
            assert_int_equal(aj_policy_add_env(&pol, "B=2", &err), 0);
            break;
        case 16:
            what = "extra env_pass";
            assert_int_equal(aj_policy_add_env_pass(&pol, "HOME", &err), 0);
            break;
        case 17:
            /* a later entry overrides an earlier one of the same name */
            what = "env override";
            assert_int_equal(aj_policy_add_env(&pol, "A=2", &err), 0);
            break;
        case 18: {
            /* bind order matters: a later bind mounts over an earlier one */
            struct aj_bind t = pol.binds[0];
            what = "bind order";
            pol.binds[0] = pol.binds[1];
            pol.binds[1] = t;
            break;
        }
        case 19:
            what = "allow_bind_inside_writable";
            pol.allow_bind_inside_writable = !pol.allow_bind_inside_writable;
            break;
        case 20: what = "noexec_tmp"; pol.noexec_tmp = !pol.noexec_tmp; break;
        case 21: what = "allow_unscoped_signals"; pol.allow_unscoped_signals = !pol.allow_unscoped_signals; break;
        case 22: what = "allow_no_decoys"; pol.allow_no_decoys = !pol.allow_no_decoys; break;
        case 23: what = "allow_no_landlock"; pol.allow_no_landlock = !pol.allow_no_landlock; break;
        case 24: what = "allow_ptrace"; pol.allow_ptrace = !pol.allow_ptrace; break;
        case 25:
            what = "bind owner";
            pol.binds[1].owner_set = true;
            pol.binds[1].owner_uid = pol.binds[1].owner_gid = 1234;
            break;
        default:
            break;
        }
        if (!what) {
            aj_policy_clear(&pol);
            break;
        }
        hash_of(&pol, h);
        if (strcmp(h, hbase) == 0)
            fail_msg("changing %s does not change policy_sha256", what);
        aj_policy_clear(&pol);
    }
    aj_policy_clear(&base);
}

/* ---- the key table ------------------------------------------------------- */

static bool is_scalar(const struct aj_policy_key *k)
{
    switch (k->type) {
    case AJ_KEY_BOOL:
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
    case AJ_KEY_ENUM:
    case AJ_KEY_STRING:
        return true;
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
    return false;
}

static bool is_number(const struct aj_policy_key *k)
{
    return is_scalar(k) && k->type != AJ_KEY_BOOL && k->type != AJ_KEY_ENUM && k->type != AJ_KEY_STRING;
}

/* A row added with a mistake (a duplicate path or flag, a group out of
 * order, a default outside its own bounds, an enum without names for its
 * values, a weakening key without the reviewer's reason) fails here. */
static void test_table_rows_are_consistent(void **state)
{
    static const char *const dims[] = {"D", "A", "M", "AS", "G", "E", NULL};
    size_t group = 0;
    (void)state;

    assert_true(aj_policy_n_keys >= 30);
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        const char *dot = strchr(k->key, '.');

        bool whole = false;
        for (size_t g = 0; g < aj_policy_n_groups; g++)
            whole |= aj_policy_groups[g].whole && strcmp(aj_policy_groups[g].name, k->key) == 0;
        if ((!dot && !whole) || (dot && strchr(dot + 1, '.')))
            fail_msg("%s: a key path is GROUP.NAME (or a whole group's name)", k->key);
        while (group < aj_policy_n_groups && !aj_policy_key_in_group(k, aj_policy_groups[group].name))
            group++;
        if (group == aj_policy_n_groups)
            fail_msg("%s: group unknown or out of order", k->key);
        assert_ptr_equal(aj_policy_key_find(k->key), k);
        if (k->flag) {
            assert_true(strncmp(k->flag, "--", 2) == 0);
            assert_ptr_equal(aj_policy_key_find(k->flag), k);
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(aj_policy_keys[j].key, k->key) == 0)
                fail_msg("%s: declared twice", k->key);
        if (!k->doc || !k->doc[0])
            fail_msg("%s: no documentation", k->key);
        if (is_number(k)) {
            uint64_t max = k->input_max ? k->input_max : k->max;
            if (!(k->min <= max && max <= k->max))
                fail_msg("%s: bounds %llu..%llu (input %llu)", k->key, (unsigned long long)k->min,
                         (unsigned long long)k->max, (unsigned long long)max);
            if (!(k->def == 0 && k->zero != AJ_ZERO_VALUE) && (k->def < k->min || k->def > k->max))
                fail_msg("%s: default %llu outside its bounds", k->key, (unsigned long long)k->def);
            /* ids are JSON integers only: the loader's message names the range */
            if (!k->what || !k->bad || (!k->example && k->type != AJ_KEY_ID))
                fail_msg("%s: a number needs .what, .bad and .example", k->key);
        }
        if (k->type == AJ_KEY_ENUM) {
            for (uint64_t v = 0; v <= k->max; v++)
                if (!k->names[v])
                    fail_msg("%s: value %llu has no name", k->key, (unsigned long long)v);
            assert_null(k->names[k->max + 1]);
            assert_true(k->def <= k->max && k->what);
        }
        if ((k->weaker == AJ_WEAKER_TRUE || k->weaker == AJ_WEAKER_FALSE || k->weaker == AJ_WEAKER_VALUE) &&
            !k->review)
            fail_msg("%s: a weakening key needs the reviewer's reason", k->key);
        if (k->risk_dim) {
            bool known = false;
            for (size_t d = 0; dims[d]; d++)
                known |= strcmp(dims[d], k->risk_dim) == 0;
            if (!known || !k->risk_text || k->risk_delta == 0 || !k->weaker || k->weaker == AJ_WEAKER_CUSTOM)
                fail_msg("%s: risk penalty incomplete", k->key);
        }
    }
}

/* A value of k other than the default, as text a file or flag may give. */
static void other_value(const struct aj_policy_key *k, char *buf, size_t size)
{
    uint64_t max = k->input_max ? k->input_max : k->max;

    if (k->type == AJ_KEY_BOOL)
        snprintf(buf, size, "%s", k->def ? "false" : "true");
    else if (k->type == AJ_KEY_ENUM)
        snprintf(buf, size, "%s", k->names[k->def == 0 ? 1 : 0]);
    else if (k->type == AJ_KEY_STRING && k->offset == offsetof(struct aj_policy, net_resolver))
        snprintf(buf, size, "10.0.0.2:53");
    else if (k->type == AJ_KEY_STRING) /* absolute, and a valid hostname too */
        snprintf(buf, size, "%s", k->offset == offsetof(struct aj_policy, workdir) ? "/srv" : "other");
    else
        aj_policy_key_format(k, k->def == k->min ? max : k->min, buf, size);
}

/* Every scalar key, set to another value by its path: the hash changes,
 * the canonical JSON loads back to the same hash, and the diff reports it
 * (unless the row says it is not a protection) but not the round trip. */
static void test_every_scalar_key_is_hashed_loaded_and_diffed(void **state)
{
    struct aj_policy base;
    char hbase[65];
    (void)state;

    aj_policy_init(&base);
    hash_of(&base, hbase);
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        struct aj_policy pol, back;
        struct aj_error err = {0};
        char text[64], h[65], hback[65];
        char *json, *d;
        bool oom;

        if (!is_scalar(k))
            continue;
        other_value(k, text, sizeof(text));
        aj_policy_init(&pol);
        /* interpreter.warmup needs an interpreter to run in. */
        if (k->offset == offsetof(struct aj_policy, interp_warmup) &&
            aj_policy_set(&pol, "interpreter.language", "python", &err) < 0)
            fail_msg("interpreter.language: %s", err.msg);
        if (aj_policy_set(&pol, k->key, text, &err) < 0)
            fail_msg("%s = %s: %s", k->key, text, err.msg);
        hash_of(&pol, h);
        if (strcmp(h, hbase) == 0)
            fail_msg("%s = %s does not change the hash", k->key, text);
        json = aj_policy_canonical_json(&pol);
        assert_non_null(json);
        aj_policy_init(&back);
        if (aj_policy_load_buffer(&back, json, strlen(json), "canonical", &err) < 0)
            fail_msg("%s = %s: canonical JSON does not load: %s", k->key, text, err.msg);
        hash_of(&back, hback);
        assert_string_equal(h, hback);
        d = aj_policy_diff(&base, &pol, &oom);
        assert_false(oom);
        if ((d == NULL) != (k->weaker == AJ_WEAKER_NOT_COMPARED))
            fail_msg("%s = %s: diff says %s", k->key, text, d ? d : "nothing");
        if (d && strncmp(d, k->key, strcspn(k->key, ".")) != 0)
            fail_msg("%s: diff line does not name it: %s", k->key, d);
        free(d);
        d = aj_policy_diff(&pol, &back, &oom);
        assert_null(d);
        free(json);
        aj_policy_clear(&pol);
        aj_policy_clear(&back);
    }
    aj_policy_clear(&base);
}

/* Validation takes each number's bounds from its row: one past them is
 * refused naming the key, the bound itself passes. */
static void test_validate_bounds_come_from_the_table(void **state)
{
    (void)state;

    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        uint64_t bad[2], good[2] = {k->min, k->max};
        size_t n_bad = 0;

        if (!is_number(k) && k->type != AJ_KEY_ENUM)
            continue;
        bad[n_bad++] = k->max + 1;
        if (k->min > 1 || (k->min == 1 && k->zero == AJ_ZERO_VALUE))
            bad[n_bad++] = k->min - 1;
        for (size_t j = 0; j < n_bad + 2; j++) {
            struct aj_policy pol;
            struct aj_error err = {0};
            char key[160] = "unset";
            bool want_ok = j >= n_bad;
            int r;

            aj_policy_init(&pol);
            aj_policy_key_put(&pol, k, want_ok ? good[j - n_bad] : bad[j]);
            r = aj_policy_validate_at(&pol, key, sizeof(key), &err);
            if (want_ok && r < 0)
                fail_msg("%s = %llu refused: %s", k->key, (unsigned long long)good[j - n_bad], err.msg);
            if (!want_ok) {
                if (r >= 0)
                    fail_msg("%s = %llu accepted", k->key, (unsigned long long)bad[j]);
                assert_string_equal(key, k->key);
                assert_int_equal(err.errnum, 0);
                check_msg_names(&err, k->what);
            }
            aj_policy_clear(&pol);
        }
    }
}

/* aj_policy_set: by path or flag, errors named as the caller named the key,
 * nothing changed on error. */
static void test_set_by_path_or_flag(void **state)
{
    struct aj_policy *pol = aj_policy_new();
    struct aj_error err = {0};
    (void)state;

    assert_non_null(pol);
    assert_int_equal(aj_policy_set(pol, "--memory", "1K", &err), -EINVAL);
    assert_string_equal(err.msg, "--memory: '1K' is not a size between 4M and 1P (e.g. 512M, 2G)");
    assert_int_equal(aj_policy_set(pol, "limits.memory", "1K", &err), -EINVAL);
    assert_string_equal(err.msg, "limits.memory: '1K' is not a size between 4M and 1P (e.g. 512M, 2G)");
    assert_int_equal(pol->memory_max, AJ_DEFAULT_MEMORY_MAX); /* unchanged */
    assert_int_equal(pol->required_limits, 0);
    /* a limit given a value is required; NULL lifts it */
    assert_int_equal(aj_policy_set(pol, "limits.memory", "512M", &err), 0);
    assert_int_equal(pol->memory_max, 512ULL << 20);
    assert_int_equal(pol->required_limits, AJ_LIMIT_MEMORY);
    assert_int_equal(aj_policy_set(pol, "--memory", NULL, &err), 0);
    assert_int_equal(pol->memory_max, 0);
    /* a key without "no limit" needs a value */
    assert_int_equal(aj_policy_set(pol, "limits.file_size", NULL, &err), -EINVAL);
    assert_int_equal(pol->rlimit_fsize, AJ_DEFAULT_FSIZE);
    /* a flag without an argument sets what the flag means */
    assert_true(pol->decoys);
    assert_int_equal(aj_policy_set(pol, "--no-decoys", NULL, &err), 0);
    assert_false(pol->decoys);
    assert_int_equal(aj_policy_set(pol, "--no-decoys", "true", &err), -EINVAL);
    assert_false(pol->decoys);
    assert_int_equal(aj_policy_set(pol, "detection.decoys", "true", &err), 0);
    assert_true(pol->decoys);
    check_rejected(aj_policy_set(pol, "detection.decoys", "yes", &err), &err, "yes");
    /* list entries are added; their errors name the key as given */
    check_rejected(aj_policy_set(pol, "filesystem.tmpfs", "rel", &err), &err, "rel");
    assert_true(strncmp(err.msg, "filesystem.tmpfs: ", 18) == 0);
    check_rejected(aj_policy_set(pol, "--tmpfs", "rel", &err), &err, "rel");
    assert_true(strncmp(err.msg, "--tmpfs: ", 9) == 0);
    assert_int_equal(aj_policy_set(pol, "environment.set", "A=1", &err), 0);
    assert_int_equal(aj_policy_set(pol, "--env", "B=2", &err), 0);
    assert_int_equal(pol->n_env, 2);
    assert_int_equal(aj_policy_set(pol, "limits.require_cgroup", "pids,cpus", &err), 0);
    assert_int_equal(pol->required_limits, AJ_LIMIT_PIDS | AJ_LIMIT_CPUS);
    check_rejected(aj_policy_set(pol, "limits.require_cgroup", "pids,disk", &err), &err, "pids,disk");
    assert_int_equal(pol->required_limits, AJ_LIMIT_PIDS | AJ_LIMIT_CPUS);
    check_rejected(aj_policy_set(pol, "limits.memroy", "1G", &err), &err, "memroy");
    check_rejected(aj_policy_set(pol, "filesystem.binds", "/usr", &err), &err, "aj_policy_add_bind");
    assert_int_equal(pol->n_binds, 0);
    aj_policy_free(pol);
    aj_policy_free(NULL);
}

static void test_bind_owner(void **state)
{
    struct aj_policy *pol = aj_policy_new();
    struct aj_error err = {0};
    (void)state;

    assert_non_null(pol);
    check_rejected(aj_policy_set_bind_owner(pol, "1000:1000", &err), &err, "1000:1000"); /* no bind */
    assert_int_equal(aj_policy_add_bind(pol, "/srv/ro:/ro", false, &err), 0);
    check_rejected(aj_policy_set_bind_owner(pol, "1000:1000", &err), &err, "read-only");
    assert_int_equal(aj_policy_add_bind(pol, "/srv/ws:/ws", true, &err), 0);
    check_rejected(aj_policy_set_bind_owner(pol, "1000", &err), &err, "'1000' is not UID:GID");
    assert_false(pol->binds[1].owner_set);
    assert_int_equal(aj_policy_set_bind_owner(pol, "1000:1001", &err), 0);
    assert_true(pol->binds[1].owner_set);
    assert_int_equal(pol->binds[1].owner_uid, 1000);
    assert_int_equal(pol->binds[1].owner_gid, 1001);
    check_rejected(aj_policy_set_bind_owner(pol, "1002:1002", &err), &err, "has an owner already");
    assert_int_equal(pol->binds[1].owner_uid, 1000);
    aj_policy_free(pol);
}

/* The key reference names every key, in both forms. */
/* network "proxy": the entries the egress proxy reads, checked for shape
 * where the policy is loaded (each refusal next to an accepted neighbour). */
static void test_net_entries_and_secrets(void **state)
{
    static const char *const good[] = {"pypi.org", "pypi.org:443", "*.example.org", "10.1.2.3", "10.1.2.3:8080",
                                       "[fd00::1]:443", "fd00::1", "GET api.x.com:443", "GET,HEAD files.x", "*",
                                       "CONNECT git.x:22", "under_score.x"};
    static const char *const bad[] = {"", "a b", "get x.com", "GET,,HEAD x", "x.com:0", "x.com:65536", "x..com",
                                      "-", "[fd00::1", "[zz::1]:1", "fd00::1:99999:x", "*.", ".x.com",
                                      "x.com:80:80"};
    static const char *const cidr_good[] = {"10.0.0.0/8", "10.1.2.3/32", "fd00::/8", "::/0"};
    static const char *const cidr_bad[] = {"10.0.0.0", "10.0.0.0/33", "fd00::/129", "x/8", "/8", "10.0.0.0/-1"};
    struct aj_error err = {0};
    struct aj_policy pol;
    (void)state;

    for (size_t i = 0; i < (sizeof(good) / sizeof(good[0])); i++)
        if (aj_policy_check_net_entry(good[i], &err) < 0)
            fail_msg("'%s' refused: %s", good[i], err.msg);
    for (size_t i = 0; i < (sizeof(bad) / sizeof(bad[0])); i++)
        if (aj_policy_check_net_entry(bad[i], &err) == 0)
            fail_msg("'%s' accepted", bad[i]);
    for (size_t i = 0; i < (sizeof(cidr_good) / sizeof(cidr_good[0])); i++)
        if (aj_policy_check_cidr(cidr_good[i], &err) < 0)
            fail_msg("'%s' refused: %s", cidr_good[i], err.msg);
    for (size_t i = 0; i < (sizeof(cidr_bad) / sizeof(cidr_bad[0])); i++)
        if (aj_policy_check_cidr(cidr_bad[i], &err) == 0)
            fail_msg("'%s' accepted", cidr_bad[i]);

    aj_policy_init(&pol);
    assert_int_equal(aj_policy_set(&pol, "network.mode", "proxy", &err), 0);
    assert_int_equal(aj_policy_add_secret(&pol, "gh,hosts=api.github.com|uploads.github.com,from=env:GH,env=T,"
                                          "format=token {}, of course", &err), 0);
    assert_int_equal(pol.n_secrets, 1);
    assert_string_equal(pol.secrets[0].id, "gh");
    assert_int_equal(pol.secrets[0].n_hosts, 2);
    assert_string_equal(pol.secrets[0].hosts[1], "uploads.github.com");
    assert_string_equal(pol.secrets[0].format, "token {}, of course");
    assert_int_equal(aj_policy_validate(&pol, &err), 0);
    /* The same id twice, no placeholder target, no {} in format, a header
     * the proxy owns, a relative file: each refused. */
    assert_true(aj_policy_add_secret(&pol, "gh,hosts=a.x,from=env:GH,env=U", &err) < 0);
    assert_true(aj_policy_add_secret(&pol, "b,hosts=a.x,from=env:GH", &err) < 0);
    assert_true(aj_policy_add_secret(&pol, "c,hosts=a.x,from=env:GH,env=V,format=Bearer", &err) < 0);
    assert_true(aj_policy_add_secret(&pol, "d,hosts=a.x,from=env:GH,env=V,header=Host", &err) < 0);
    assert_true(aj_policy_add_secret(&pol, "e,hosts=a.x,from=file:rel,env=V", &err) < 0);
    assert_true(aj_policy_add_secret(&pol, "f,hosts=a.x,from=env:GH,file=tok", &err) < 0);
    assert_int_equal(aj_policy_add_secret(&pol, "g,hosts=a.x,from=file:/run/tok,file=/run/secrets/t", &err), 0);
    /* Outside proxy mode a secret is refused by validation. */
    assert_int_equal(aj_policy_set(&pol, "network.mode", "loopback", &err), 0);
    assert_true(aj_policy_validate(&pol, &err) < 0);
    assert_non_null(strstr(err.msg, "needs network.mode \"proxy\""));
    aj_policy_clear(&pol);
}

static void test_describe_keys(void **state)
{
    char *md = aj_policy_describe_keys(true), *plain = aj_policy_describe_keys(false);
    (void)state;

    assert_non_null(md);
    assert_non_null(plain);
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        char cell[96];
        snprintf(cell, sizeof(cell), "| `%s` |", aj_policy_key_name(k));
        if (!strstr(md, cell) || !strstr(plain, k->key))
            fail_msg("%s missing from the key reference", k->key);
    }
    free(md);
    free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64_accepts),
        cmocka_unit_test(test_u64_decimal_only),
        cmocka_unit_test(test_u64_rejects),
        cmocka_unit_test(test_u64_rejects_above_max),
        cmocka_unit_test(test_owner_parse),
        cmocka_unit_test(test_size_accepts),
        cmocka_unit_test(test_size_rejects),
        cmocka_unit_test(test_duration_accepts),
        cmocka_unit_test(test_duration_rejects),
        cmocka_unit_test(test_bind_same_path),
        cmocka_unit_test(test_bind_host_to_sandbox),
        cmocka_unit_test(test_bind_rejects),
        cmocka_unit_test(test_bind_normalises),
        cmocka_unit_test(test_bind_dotdot_is_component_only),
        cmocka_unit_test(test_tmpfs_accepts),
        cmocka_unit_test(test_tmpfs_rejects),
        cmocka_unit_test(test_env_accepts),
        cmocka_unit_test(test_env_rejects),
        cmocka_unit_test(test_env_pass),
        cmocka_unit_test(test_network),
        cmocka_unit_test(test_uid_range),
        cmocka_unit_test(test_set_string),
        cmocka_unit_test(test_init_defaults),
        cmocka_unit_test(test_sha256_shape_and_stability),
        cmocka_unit_test(test_sha256_matches_canonical_json),
        cmocka_unit_test(test_canonical_json_sorted_compact),
        cmocka_unit_test(test_sha256_env_effective_map),
        cmocka_unit_test(test_sha256_non_utf8_bind),
        cmocka_unit_test(test_sha256_non_utf8_env),
        cmocka_unit_test(test_sha256_non_utf8_tmpfs),
        cmocka_unit_test(test_sha256_covers_every_field),
        cmocka_unit_test(test_table_rows_are_consistent),
        cmocka_unit_test(test_every_scalar_key_is_hashed_loaded_and_diffed),
        cmocka_unit_test(test_validate_bounds_come_from_the_table),
        cmocka_unit_test(test_set_by_path_or_flag),
        cmocka_unit_test(test_bind_owner),
        cmocka_unit_test(test_describe_keys),
        cmocka_unit_test(test_net_entries_and_secrets),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
