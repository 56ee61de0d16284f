/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness for policy files: load arbitrary bytes; whatever loads
 * must render to the canonical JSON, and that JSON must load back to a
 * policy with the same sha256. A second hash that differs is a round-trip
 * bug (two texts of one policy would be reviewed as different, or worse,
 * two different policies hashed alike): abort, so libFuzzer keeps the input.
 * The reviewer's diff of the two must be empty as well. Uses only the public
 * API (include/aj_policy.h), as an embedder would.
 * Build and run: tests/fuzz/run.sh [SECONDS]. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *detail, const char *json)
{
    fprintf(stderr, "fuzz_policy: %s: %s\ncanonical: %s\n", what, detail ? detail : "",
            json ? json : "(none)");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct aj_policy *a = aj_policy_new(), *b = aj_policy_new();
    struct aj_error err = {0};
    char ha[65], hb[65];
    char *ja = NULL, *jb = NULL, *d;
    bool oom;

    if (!a || !b)
        die("out of memory", NULL, NULL);
    if (aj_policy_load_buffer(a, (const char *)data, size, "fuzz", &err) < 0) {
        /* A refusal must say something: the CLI prints exactly this. */
        if (err.msg[0] == '\0')
            die("load failed with an empty message", NULL, NULL);
        aj_policy_free(a);
        aj_policy_free(b);
        return 0;
    }
    ja = aj_policy_to_json(a, true);
    if (!ja)
        die("a policy that loaded cannot be rendered", NULL, NULL);
    if (aj_policy_sha256(a, ha, &err) < 0)
        die("sha256 of a loaded policy failed", err.msg, ja);

    if (aj_policy_load_buffer(b, ja, strlen(ja), "canonical", &err) < 0)
        die("the canonical JSON does not load back", err.msg, ja);
    if (aj_policy_sha256(b, hb, &err) < 0)
        die("sha256 of the reloaded policy failed", err.msg, ja);
    if (strcmp(ha, hb) != 0) {
        jb = aj_policy_to_json(b, true);
        fprintf(stderr, "fuzz_policy: reloaded: %s\n", jb ? jb : "(none)");
        die("round trip changed the hash", ha, ja);
    }
    d = aj_policy_diff(a, b, &oom);
    if (d)
        die("the diff of a policy and its round trip is not empty", d, ja);
    free(ja);
    free(jb);
    aj_policy_free(a);
    aj_policy_free(b);
    return 0;
}
