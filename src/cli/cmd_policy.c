/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail policy check|show|diff`: policies as reviewable documents. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int aj_cli_load_base(int argc, char **argv, const struct option *opts, int profile_opt, int policy_opt,
                     struct aj_policy *pol, struct aj_error *err)
{
    const char *profile = NULL, *policy = NULL;
    int opt, r;

    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        if (opt == profile_opt) {
            if (profile)
                return aj_err(err, 0, "--profile given twice");
            profile = optarg;
        } else if (opt == policy_opt) {
            if (policy)
                return aj_err(err, 0, "--policy given twice");
            policy = optarg;
        }
    }
    if (profile && (r = aj_policy_load_profile(pol, profile, err)) < 0)
        return r;
    if (policy && (r = aj_policy_load_file(pol, policy, err)) < 0)
        return r;
    return 0;
}

static void policy_usage(FILE *f)
{
    fputs("usage: agentjail policy check FILE\n"
          "       agentjail policy show [FILE | --profile NAME]\n"
          "       agentjail policy diff A B          (files, or profile:NAME)\n"
          "       agentjail policy profiles\n"
          "       agentjail policy keys [--markdown]\n"
          "\n"
          "check  validates FILE; exit 0 if it is valid, 2 with FILE:LINE:COLUMN and the key if not\n"
          "show   prints the normalised policy (every default filled in) and its sha256\n"
          "diff   prints every protection that differs and which side is weaker; exit 1 if any\n"
          "keys   lists every policy key: type, default, range, flag (--markdown: the tables of\n"
          "       docs/policy.md)\n",
          f);
}

/* "profile:NAME" or a file path. */
static int load_named(const char *what, struct aj_policy *pol, struct aj_error *err)
{
    if (strncmp(what, "profile:", 8) == 0)
        return aj_policy_load_profile(pol, what + 8, err);
    return aj_policy_load_file(pol, what, err);
}

static int show(struct aj_policy *pol)
{
    struct aj_error err = {0};
    char hash[65];
    char *json = aj_policy_to_json(pol, false);

    if (!json || aj_policy_sha256(pol, hash, &err) < 0) {
        free(json);
        fprintf(stderr, "agentjail: cannot render the policy: %s\n", err.msg[0] ? err.msg : "out of memory");
        return AJ_EXIT_SETUP;
    }
    printf("%s\n", json);
    /* On stderr, so that stdout is a policy file as it is. */
    fprintf(stderr, "sha256: %s\n", hash);
    free(json);
    return 0;
}

int aj_cmd_policy(int argc, char **argv)
{
    struct aj_policy *a = NULL, *b = NULL;
    struct aj_error err = {0};
    int code = AJ_EXIT_USAGE;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        policy_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? AJ_EXIT_USAGE : 0;
    }
    a = aj_policy_new();
    b = aj_policy_new();
    if (!a || !b) {
        fprintf(stderr, "agentjail: out of memory\n");
        code = AJ_EXIT_SETUP;
        goto out;
    }
    if (strcmp(argv[1], "check") == 0 && argc == 3) {
        if (aj_policy_load_file(a, argv[2], &err) < 0) {
            fprintf(stderr, "agentjail: %s\n", err.msg);
        } else {
            printf("%s: valid\n", argv[2]);
            code = 0;
        }
    } else if (strcmp(argv[1], "show") == 0 && argc <= 4) {
        int r = 0;
        if (argc == 4 && strcmp(argv[2], "--profile") == 0)
            r = aj_policy_load_profile(a, argv[3], &err);
        else if (argc == 3)
            r = aj_policy_load_file(a, argv[2], &err);
        else if (argc != 2)
            goto usage;
        if (r < 0)
            fprintf(stderr, "agentjail: %s\n", err.msg);
        else
            code = show(a);
    } else if (strcmp(argv[1], "diff") == 0 && argc == 4) {
        bool oom;
        char *d;
        if (load_named(argv[2], a, &err) < 0 || load_named(argv[3], b, &err) < 0) {
            fprintf(stderr, "agentjail: %s\n", err.msg);
        } else {
            d = aj_policy_diff(a, b, &oom);
            if (oom) {
                fprintf(stderr, "agentjail: out of memory\n");
                code = AJ_EXIT_SETUP;
            } else if (d) {
                printf("A: %s\nB: %s\n%s", argv[2], argv[3], d);
                code = 1;
            } else {
                printf("A: %s\nB: %s\nno difference in protections\n", argv[2], argv[3]);
                code = 0;
            }
            free(d);
        }
    } else if (strcmp(argv[1], "profiles") == 0 && argc == 2) {
        for (const char *const *n = aj_policy_profile_names(); *n; n++)
            puts(*n);
        code = 0;
    } else if (strcmp(argv[1], "keys") == 0 && (argc == 2 || (argc == 3 && strcmp(argv[2], "--markdown") == 0))) {
        char *text = aj_policy_describe_keys(argc == 3);
        if (!text || fputs(text, stdout) == EOF || fflush(stdout) != 0) {
            fprintf(stderr, "agentjail: policy keys: %s\n", text ? strerror(errno) : "out of memory");
            code = AJ_EXIT_SETUP;
        } else {
            code = 0;
        }
        free(text);
    } else {
        goto usage;
    }
out:
    aj_policy_free(a);
    aj_policy_free(b);
    return code;
usage:
    aj_policy_free(a);
    aj_policy_free(b);
    fprintf(stderr, "agentjail: bad 'policy' command (see agentjail policy --help)\n");
    return AJ_EXIT_USAGE;
}
