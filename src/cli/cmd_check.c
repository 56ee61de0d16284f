/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail check`: the host's own posture for running untrusted code.
 * The library measures (aj_posture_check); this file only renders. */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "aj_posture.h"
#include "cli.h"

enum { OPT_JSON = 256, OPT_SYSROOT, OPT_HELP };

static const struct option check_options[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"sysroot", required_argument, NULL, OPT_SYSROOT},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void check_usage(FILE *f)
{
    fputs("usage: agentjail check [--json] [--sysroot DIR]\n"
          "\n"
          "Reads (never writes) the kernel features and sysctls that decide how safe this host\n"
          "is for untrusted code: the kernel against the CVE table, Landlock ABI, seccomp user\n"
          "notification, LSMs, cgroup controllers, user namespaces, and the hardening sysctls.\n"
          "Each finding is ok, warn, fail or unknown, with why it matters and the fix.\n"
          "Then it builds one real minimal sandbox (/bin/true under the default policy, as\n"
          "'agentjail run' would) and reports what run will do here (run.trial): inside a\n"
          "container this is what names the missing seccomp calls, capabilities or mounts.\n"
          "\n"
          "  --json          one JSON object (findings in a fixed order) instead of the table\n"
          "  --sysroot DIR   read proc/sys/... and sys/kernel/security/... under DIR instead of\n"
          "                  the live host (a saved snapshot, or a test tree); the findings that\n"
          "                  need a syscall (Landlock, a trial user namespace, cgroups) are unknown\n"
          "\n"
          "Exit status: 0 when no finding is 'fail', 1 otherwise, 2 for a bad command line,\n"
          "125 if the check itself failed. Finding ids: docs/risk-model.md.\n",
          f);
}

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void print_table(const json_t *rep)
{
    const json_t *findings = json_object_get(rep, "findings"), *f;
    size_t i;

    printf("agentjail check: host posture for running untrusted code (kernel %s)\n\n",
           str(rep, "kernel"));
    printf("%-8s %-34s %s\n", "STATUS", "FINDING", "VALUE");
    json_array_foreach(findings, i, f) {
        const char *v = str(f, "value");
        /* The table stays one line a finding; the details below give it whole. */
        if (strlen(v) > 60)
            printf("%-8s %-34s %.57s...\n", str(f, "status"), str(f, "id"), v);
        else
            printf("%-8s %-34s %s\n", str(f, "status"), str(f, "id"), v);
    }
    json_array_foreach(findings, i, f) {
        if (strcmp(str(f, "status"), "ok") == 0)
            continue;
        printf("\n%s %s = %s\n  why: %s\n  fix: %s\n", str(f, "status"), str(f, "id"), str(f, "value"),
               str(f, "why"), str(f, "recommendation"));
    }
    printf("\n%zu ok, %zu warn, %zu fail, %zu unknown\n", aj_posture_count(rep, AJ_POSTURE_OK),
           aj_posture_count(rep, AJ_POSTURE_WARN), aj_posture_count(rep, AJ_POSTURE_FAIL),
           aj_posture_count(rep, AJ_POSTURE_UNKNOWN));
}

int aj_cmd_check(int argc, char **argv)
{
    struct aj_posture_options popts = {0};
    struct aj_error err = {0};
    bool as_json = false;
    json_t *rep = NULL;
    int opt, code;

    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+h", check_options, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            as_json = true;
            break;
        case OPT_SYSROOT:
            popts.sysroot = optarg;
            break;
        case 'h':
        case OPT_HELP:
            check_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "agentjail: check: bad option '%s' (see agentjail check --help)\n",
                    argv[optind - 1]);
            return AJ_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "agentjail: check: unexpected argument '%s'\n", argv[optind]);
        return AJ_EXIT_USAGE;
    }
    if (aj_posture_check(&popts, &rep, &err) < 0) {
        fprintf(stderr, "agentjail: check: %s\n", err.msg);
        return AJ_EXIT_SETUP;
    }
    if (as_json) {
        if (json_dumpf(rep, stdout, JSON_INDENT(2)) < 0) {
            json_decref(rep);
            fprintf(stderr, "agentjail: check: cannot write the report\n");
            return AJ_EXIT_SETUP;
        }
        putchar('\n');
    } else {
        print_table(rep);
    }
    code = aj_posture_count(rep, AJ_POSTURE_FAIL) ? 1 : 0;
    json_decref(rep);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "agentjail: check: cannot write the report\n");
        return AJ_EXIT_SETUP;
    }
    return code;
}
