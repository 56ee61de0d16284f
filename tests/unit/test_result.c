/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for result.h: status and layer names, and the result JSON
 * (parsed back with jansson, so the test checks the document a client
 * reads, not the string the encoder happened to build). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "aj_result.h"
#include "aj_util.h" /* AJ_LAYER_BIT: how the library fills the set */

static const enum aj_status all_status[] = {
    AJ_STATUS_OK, AJ_STATUS_NONZERO_EXIT, AJ_STATUS_SIGNALED,
    AJ_STATUS_TIMEOUT, AJ_STATUS_SETUP_ERROR,
};
#define N_STATUS (sizeof(all_status) / sizeof(all_status[0]))

/* ---- names ------------------------------------------------------------- */

static void test_status_names(void **state)
{
    (void)state;

    /* The names are the stable strings of DESIGN.md's result shape. */
    assert_string_equal(aj_status_name(AJ_STATUS_OK), "ok");
    assert_string_equal(aj_status_name(AJ_STATUS_NONZERO_EXIT), "nonzero_exit");
    assert_string_equal(aj_status_name(AJ_STATUS_SIGNALED), "signaled");
    assert_string_equal(aj_status_name(AJ_STATUS_TIMEOUT), "timeout");
    assert_string_equal(aj_status_name(AJ_STATUS_SETUP_ERROR), "setup_error");

    for (size_t i = 0; i < N_STATUS; i++)
        for (size_t j = i + 1; j < N_STATUS; j++)
            assert_string_not_equal(aj_status_name(all_status[i]),
                                    aj_status_name(all_status[j]));
}

static void test_status_name_out_of_range(void **state)
{
    (void)state;

    /* A corrupt status must not crash the encoder or read out of bounds;
     * it must also not masquerade as "ok". */
    const char *n = aj_status_name((enum aj_status)9999);
    if (n)
        assert_string_not_equal(n, "ok");
    n = aj_status_name((enum aj_status)-1);
    if (n)
        assert_string_not_equal(n, "ok");
}

static void test_layer_names(void **state)
{
    const char *names[AJ_LAYER_COUNT];
    (void)state;

    for (int i = 0; i < AJ_LAYER_COUNT; i++) {
        names[i] = aj_layer_name((enum aj_layer)i);
        if (!names[i] || !names[i][0])
            fail_msg("layer %d has no name", i);
        for (const char *c = names[i]; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
                fail_msg("layer name \"%s\" is not a snake_case JSON key", names[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                fail_msg("layers %d and %d share the name \"%s\"", j, i, names[i]);
    }
}

static void test_layer_name_out_of_range(void **state)
{
    struct aj_result res;
    (void)state;

    /* Not a layer: past the last one, or negative. No name, and never a
     * real layer's. */
    assert_null(aj_layer_name(AJ_LAYER_COUNT));
    assert_null(aj_layer_name((enum aj_layer)-1));
    assert_null(aj_layer_name((enum aj_layer)1000));
    /* The accessors: a layer or event kind this library does not know reads
     * as absent, whatever the (reserved) storage holds. */
    memset(&res, 0xff, sizeof(res));
    assert_true(aj_result_has_layer(&res, AJ_LAYER_SECCOMP));
    assert_false(aj_result_has_layer(&res, AJ_LAYER_COUNT));
    assert_false(aj_result_has_layer(&res, (enum aj_layer)255));
    assert_false(aj_result_has_layer(&res, (enum aj_layer)-1));
    assert_int_equal(aj_result_event_count(&res, AJ_EV_COUNT), 0);
    assert_int_equal(aj_result_event_count(&res, (enum aj_event_type)-1), 0);
    assert_true(aj_result_event_count(&res, AJ_EV_CANARY) != 0);
    memset(&res, 0, sizeof(res));
    assert_false(aj_result_has_layer(&res, AJ_LAYER_SECCOMP));
}

/* ---- result JSON ------------------------------------------------------- */

static void sample(struct aj_result *res)
{
    memset(res, 0, sizeof(*res));
    res->status = AJ_STATUS_NONZERO_EXIT;
    res->exit_code = 3;
    res->signal = 0;
    res->wall_ms = 1234;
    res->cpu_ms = 567;
    res->max_rss_kb = 8901;
    memset(res->policy_sha256, 'a', 64);
    res->policy_sha256[0] = '0';
    res->policy_sha256[64] = '\0';
    (void)snprintf(res->sandbox_id, sizeof(res->sandbox_id), "%s",
                   "0123456789abcdef0123456789abcdef");
    res->layer_set[0] = AJ_LAYER_BIT(AJ_LAYER_USERNS) | AJ_LAYER_BIT(AJ_LAYER_MOUNTNS) |
                        AJ_LAYER_BIT(AJ_LAYER_SECCOMP) | AJ_LAYER_BIT(AJ_LAYER_KEYRING);
    res->landlock_abi = 4;
}

static json_t *encode(const struct aj_result *res)
{
    json_error_t jerr;
    char *s = aj_result_to_json(res);
    json_t *root;

    assert_non_null(s);
    root = json_loads(s, 0, &jerr);
    if (!root)
        fail_msg("result JSON does not parse: %s: %s", jerr.text, s);
    free(s);
    assert_true(json_is_object(root));
    return root;
}

static json_int_t get_int(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        fail_msg("result JSON lacks \"%s\"", key);
    if (!json_is_integer(v))
        fail_msg("result \"%s\" is not an integer", key);
    return json_integer_value(v);
}

static const char *get_str(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        fail_msg("result JSON lacks \"%s\"", key);
    if (!json_is_string(v))
        fail_msg("result \"%s\" is not a string", key);
    return json_string_value(v);
}

/* Is layer `name` reported as applied? Accepts the two reasonable shapes,
 * {"name": true/false, ...} (every layer listed) and ["name", ...]
 * (applied ones only), and fails on anything else. */
static int layer_applied(json_t *layers, const char *name)
{
    if (json_is_object(layers)) {
        json_t *v = json_object_get(layers, name);
        if (!v)
            fail_msg("layers object lacks \"%s\"", name);
        if (!json_is_boolean(v))
            fail_msg("layers.%s is not a boolean", name);
        return json_is_true(v);
    }
    if (json_is_array(layers)) {
        size_t i;
        json_t *v;
        json_array_foreach(layers, i, v) {
            if (!json_is_string(v))
                fail_msg("layers[%zu] is not a string", i);
            if (strcmp(json_string_value(v), name) == 0)
                return 1;
        }
        return 0;
    }
    fail_msg("layers is neither an object nor an array");
    return -1;
}

static void test_json_fields(void **state)
{
    struct aj_result res;
    json_t *root;
    (void)state;

    sample(&res);
    root = encode(&res);

    assert_string_equal(get_str(root, "status"), "nonzero_exit");
    assert_int_equal(get_int(root, "exit_code"), 3);
    assert_int_equal(get_int(root, "signal"), 0);
    assert_int_equal(get_int(root, "wall_ms"), 1234);
    assert_int_equal(get_int(root, "cpu_ms"), 567);
    assert_int_equal(get_int(root, "max_rss_kb"), 8901);
    assert_string_equal(get_str(root, "policy_sha256"), res.policy_sha256);
    assert_non_null(json_object_get(root, "layers"));
    /* versioned (DESIGN.md: "stable, versioned") */
    assert_true(get_int(root, "version") >= 1);
    assert_int_equal(get_int(root, "landlock_abi"), 4);
    assert_true(json_is_false(json_object_get(root, "degraded")));

    json_decref(root);
}

static void test_json_layers(void **state)
{
    struct aj_result res;
    json_t *root, *layers;
    int n_applied = 0;
    (void)state;

    sample(&res);
    root = encode(&res);
    layers = json_object_get(root, "layers");
    assert_non_null(layers);

    for (int i = 0; i < AJ_LAYER_COUNT; i++) {
        const char *name = aj_layer_name((enum aj_layer)i);
        int want = (res.layer_set[0] & AJ_LAYER_BIT(i)) != 0;
        if (aj_result_has_layer(&res, (enum aj_layer)i) != want)
            fail_msg("layer %s: the accessor disagrees with the bits", name);
        int got = layer_applied(layers, name);
        if (got != want)
            fail_msg("layer %s: JSON says %s, bits say %s", name,
                     got ? "applied" : "not applied", want ? "applied" : "not applied");
        n_applied += got;
    }
    assert_int_equal(n_applied, 4);
    json_decref(root);
}

static void test_json_layers_none_and_all(void **state)
{
    struct aj_result res;
    (void)state;

    /* Control pair: with no bits nothing may read as applied (the
     * dangerous direction), with all bits everything must. */
    for (int all = 0; all <= 1; all++) {
        json_t *root, *layers;

        sample(&res);
        res.layer_set[0] = all ? (uint64_t)(AJ_LAYER_BIT(AJ_LAYER_COUNT) - 1) : 0;
        root = encode(&res);
        layers = json_object_get(root, "layers");
        assert_non_null(layers);
        for (int i = 0; i < AJ_LAYER_COUNT; i++) {
            const char *name = aj_layer_name((enum aj_layer)i);
            if (layer_applied(layers, name) != all)
                fail_msg("layers=%s: %s reads as %s", all ? "all" : "none", name,
                         all ? "not applied" : "applied");
        }
        json_decref(root);
    }
}

static void test_json_every_status(void **state)
{
    (void)state;

    for (size_t i = 0; i < N_STATUS; i++) {
        struct aj_result res;
        json_t *root;

        sample(&res);
        res.status = all_status[i];
        if (res.status == AJ_STATUS_SIGNALED)
            res.signal = 9;
        root = encode(&res);
        assert_string_equal(get_str(root, "status"), aj_status_name(all_status[i]));
        if (res.status == AJ_STATUS_SIGNALED)
            assert_int_equal(get_int(root, "signal"), 9);
        json_decref(root);
    }
}

static void test_json_large_numbers(void **state)
{
    struct aj_result res;
    json_t *root;
    (void)state;

    /* uint64 counters above INT32_MAX must not be truncated. */
    sample(&res);
    res.wall_ms = 5000000000ULL;
    res.max_rss_kb = 1ULL << 40;
    root = encode(&res);
    assert_true(get_int(root, "wall_ms") == 5000000000LL);
    assert_true(get_int(root, "max_rss_kb") == (json_int_t)(1ULL << 40));
    json_decref(root);
}

static void test_json_hostile_error_string(void **state)
{
    struct aj_result res;
    char *s;
    json_t *root;
    json_error_t jerr;
    (void)state;

    /* The setup error can quote a path from the policy: quotes, newlines
     * and control bytes must be escaped, not break the document. */
    sample(&res);
    res.status = AJ_STATUS_SETUP_ERROR;
    (void)snprintf(res.error, sizeof(res.error), "%s", "bind \"/a\nb\\\x01\": ENOENT");
    s = aj_result_to_json(&res);
    assert_non_null(s);
    root = json_loads(s, 0, &jerr);
    if (!root)
        fail_msg("result JSON with a hostile error does not parse: %s: %s", jerr.text, s);
    json_t *e = json_object_get(root, "error");
    if (e && json_is_string(e))
        assert_string_equal(json_string_value(e), res.error);
    json_decref(root);
    free(s);
}

static void test_json_error_not_utf8(void **state)
{
    struct aj_result res;
    json_t *root, *e;
    (void)state;

    /* The reason quotes host paths, which need not be UTF-8 ("caf\xe9" in
     * Latin-1). Whatever the encoding, the reason must not vanish: a
     * setup_error without its error is a failure nobody can diagnose. */
    sample(&res);
    res.status = AJ_STATUS_SETUP_ERROR;
    (void)snprintf(res.error, sizeof(res.error), "%s", "bind /srv/caf\xe9: ENOENT");
    root = encode(&res);
    assert_string_equal(get_str(root, "status"), "setup_error");
    e = json_object_get(root, "error");
    if (!e || !json_is_string(e))
        fail_msg("setup_error result lost its error string");
    assert_non_null(strstr(json_string_value(e), "bind /srv/caf"));
    json_decref(root);

    /* positive control: a plain ASCII reason comes through verbatim */
    (void)snprintf(res.error, sizeof(res.error), "%s", "bind /srv/cafe: ENOENT");
    root = encode(&res);
    assert_string_equal(get_str(root, "error"), "bind /srv/cafe: ENOENT");
    json_decref(root);
}

static void test_write_file(void **state)
{
    struct aj_result res;
    struct aj_error err;
    char dir[] = "/tmp/aj-test-result-XXXXXX";
    char path[sizeof(dir) + 16];
    json_error_t jerr;
    json_t *root;
    (void)state;

    assert_non_null(mkdtemp(dir));
    (void)snprintf(path, sizeof(path), "%s/r.json", dir);

    sample(&res);
    memset(&err, 0, sizeof(err));
    assert_int_equal(aj_result_write_file(&res, path, &err), 0);
    root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("written result does not parse: %s", jerr.text);
    assert_string_equal(get_str(root, "status"), "nonzero_exit");
    json_decref(root);
    assert_int_equal(unlink(path), 0);

    /* negative control: a directory that does not exist */
    char missing[sizeof(dir) + 32];
    (void)snprintf(missing, sizeof(missing), "%s/nope/r.json", dir);
    memset(&err, 0, sizeof(err));
    assert_int_equal(aj_result_write_file(&res, missing, &err), -ENOENT);
    assert_int_equal(err.errnum, ENOENT);
    if (!strstr(err.msg, missing))
        fail_msg("error \"%s\" does not name the path", err.msg);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_status_name_out_of_range),
        cmocka_unit_test(test_layer_names),
        cmocka_unit_test(test_layer_name_out_of_range),
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_json_layers),
        cmocka_unit_test(test_json_layers_none_and_all),
        cmocka_unit_test(test_json_every_status),
        cmocka_unit_test(test_json_large_numbers),
        cmocka_unit_test(test_json_hostile_error_string),
        cmocka_unit_test(test_json_error_not_utf8),
        cmocka_unit_test(test_write_file),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
