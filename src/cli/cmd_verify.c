/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail verify [--policy FILE | --profile NAME] [--json]`: run the
 * probe inside exactly that policy and compare each declared protection
 * with what it observed. Exit 0 when all match, 1 on any mismatch. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "aj_verify.h"
#include "cli.h"

enum { V_POLICY = 256, V_PROFILE, V_JSON, V_HELP };

static const struct option verify_options[] = {
    {"policy", required_argument, NULL, V_POLICY},
    {"profile", required_argument, NULL, V_PROFILE},
    {"json", no_argument, NULL, V_JSON},
    {"help", no_argument, NULL, V_HELP},
    {NULL, 0, NULL, 0},
};

int aj_cmd_verify(int argc, char **argv)
{
    struct aj_policy *pol = aj_policy_new();
    struct aj_error err = {0};
    bool as_json = false;
    json_t *report = NULL, *row;
    size_t i, bad = 0;
    int opt, code;

    if (!pol) {
        fprintf(stderr, "agentjail: out of memory\n");
        return AJ_EXIT_SETUP;
    }
    if (aj_cli_load_base(argc, argv, verify_options, V_PROFILE, V_POLICY, pol, &err) < 0) {
        fprintf(stderr, "agentjail: %s\n", err.msg);
        aj_policy_free(pol);
        return AJ_EXIT_USAGE;
    }
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", verify_options, NULL)) != -1) {
        if (opt == V_JSON) {
            as_json = true;
        } else if (opt == V_HELP || opt == 'h') {
            puts("usage: agentjail verify [--policy FILE | --profile NAME] [--json]\n\n"
                 "Runs agentjail-probe inside the sandbox the policy describes and compares every\n"
                 "declared protection with what the probe observed. Exit 0: all match; 1: a mismatch.");
            aj_policy_free(pol);
            return 0;
        } else if (opt != V_POLICY && opt != V_PROFILE) {
            fprintf(stderr, "agentjail: verify: unknown or incomplete flag '%s'\n", argv[optind - 1]);
            aj_policy_free(pol);
            return AJ_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "agentjail: verify takes no command; it runs the probe itself\n");
        aj_policy_free(pol);
        return AJ_EXIT_USAGE;
    }
    if (aj_verify(pol, &report, &err) < 0) {
        fprintf(stderr, "agentjail: verify: %s\n", err.msg);
        aj_policy_free(pol);
        return AJ_EXIT_SETUP;
    }
    json_array_foreach(json_object_get(report, "checks"), i, row)
        bad += !json_is_true(json_object_get(row, "ok"));
    if (as_json) {
        char *s = json_dumps(report, JSON_INDENT(2) | JSON_SORT_KEYS);
        if (s)
            puts(s);
        free(s);
    } else {
        printf("policy sha256 %s\n\n%-34s %-44s %s\n", json_string_value(json_object_get(report, "policy_sha256")),
               "PROTECTION", "DECLARED", "OBSERVED");
        json_array_foreach(json_object_get(report, "checks"), i, row) {
            bool ok = json_is_true(json_object_get(row, "ok"));
            printf("%-34s %-44s %s%.110s\n", json_string_value(json_object_get(row, "protection")),
                   json_string_value(json_object_get(row, "declared")), ok ? "" : "MISMATCH: ",
                   json_string_value(json_object_get(row, "observed")));
        }
        printf("\n%zu checks, %zu mismatch%s: the enforced sandbox %s the declared one\n",
               json_array_size(json_object_get(report, "checks")), bad, bad == 1 ? "" : "es",
               bad ? "DOES NOT match" : "matches");
    }
    code = bad ? 1 : 0;
    json_decref(report);
    aj_policy_free(pol);
    return code;
}
