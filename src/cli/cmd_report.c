/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail report`: measure (probe inside the policy, check the host),
 * score, render. The scoring and rendering are the library's
 * (aj_report.h); this file gathers inputs and writes the output. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aj_hostpath.h"
#include "aj_posture.h"
#include "aj_report.h"
#include "aj_verify.h"
#include "cli.h"

enum {
    OPT_POLICY = 256,
    OPT_PROFILE,
    OPT_FORMAT,
    OPT_OUTPUT,
    OPT_PROBE_JSON,
    OPT_CHECK_JSON,
    OPT_EVENTS_KEPT,
    OPT_NOW,
    OPT_HELP,
};

static const struct option report_options[] = {
    {"policy", required_argument, NULL, OPT_POLICY},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"probe-json", required_argument, NULL, OPT_PROBE_JSON},
    {"check-json", required_argument, NULL, OPT_CHECK_JSON},
    {"events-kept", no_argument, NULL, OPT_EVENTS_KEPT},
    {"now", no_argument, NULL, OPT_NOW},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void report_usage(FILE *f)
{
    fputs("usage: agentjail report [--policy FILE | --profile NAME] [--format md|json|html]\n"
          "                        [--output FILE] [--probe-json FILE] [--check-json FILE]\n"
          "                        [--events-kept] [--now]\n"
          "\n"
          "Scores the risk of running agent-written code (the six DAMAGE dimensions, 1-5):\n"
          "inherent (no sandbox) and residual with this policy on this host, from measured\n"
          "findings: agentjail-probe run inside the policy's sandbox, 'agentjail check' of the\n"
          "host, and the detection features the policy turns on. Maps each control to NIST CSF\n"
          "2.0, SP 800-53, SP 800-190, the CIS Docker Benchmark and the OWASP NHI and agentic AI\n"
          "lists, with what each misses. Method: docs/risk-model.md.\n"
          "\n"
          "  --policy FILE      the policy to score (default: the built-in defaults)\n"
          "  --profile NAME     a built-in profile (default, python, shell)\n"
          "  --format F         md (default), json, or html (one self-contained file)\n"
          "  --output FILE      write there instead of stdout\n"
          "  --probe-json FILE  use this saved 'agentjail-probe --json' output instead of running\n"
          "                     the probe (it must come from inside the same policy)\n"
          "  --check-json FILE  use this saved 'agentjail check --json' output\n"
          "  --events-kept      runs keep their audit events (agentjail run --events FILE)\n"
          "  --now              record the current time (UTC) in generated_at; without it the\n"
          "                     report has no time in it and fixed inputs give the same bytes\n"
          "\n"
          "Exit status: 0 when the report was written, 2 for a bad command line, 125 if an\n"
          "input could not be measured or read.\n",
          f);
}

static json_t *load_json(const char *path, const char *what)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);

    if (!j) {
        fprintf(stderr, "agentjail: report: %s %s:%d:%d: %s\n", what, path, jerr.line, jerr.column,
                jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        fprintf(stderr, "agentjail: report: %s %s: not a JSON object\n", what, path);
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Label the sources by base name: a report of the same inputs read from
 * another directory is the same report. */
static void label_file(char *buf, size_t size, const char *prefix, const char *path)
{
    char tmp[4096];

    snprintf(tmp, sizeof(tmp), "%s", path);
    snprintf(buf, size, "%s%s", prefix, basename(tmp));
}

static int write_output(const char *path, const char *text, struct aj_error *werr)
{
    size_t len = strlen(text);

    if (!path || strcmp(path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)
            return -EIO;
        return 0;
    }
    /* Not through a symlink: the report may go to a directory a sandbox
     * wrote (docs/security-model.md §10). */
    return aj_hostpath_write_replace(path, "report", text, len, 0644, werr);
}

int aj_cmd_report(int argc, char **argv)
{
    struct aj_policy *pol = NULL;
    struct aj_error err = {0};
    struct aj_report_input in = {0};
    enum aj_report_format fmt = AJ_REPORT_MD;
    const char *policy = NULL, *profile = NULL, *output = NULL, *probe_path = NULL, *check_path = NULL;
    char label[512] = "built-in defaults", probe_src[512], check_src[512], now[32];
    json_t *probe = NULL, *check = NULL, *rep = NULL;
    char *text = NULL;
    bool stamp = false;
    int opt, r, code = AJ_EXIT_SETUP;

    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+h", report_options, NULL)) != -1) {
        switch (opt) {
        case OPT_POLICY:
            policy = optarg;
            break;
        case OPT_PROFILE:
            profile = optarg;
            break;
        case OPT_FORMAT:
            if (aj_report_parse_format(optarg, &fmt) < 0) {
                fprintf(stderr, "agentjail: report: --format: '%s' is not md, json or html\n", optarg);
                return AJ_EXIT_USAGE;
            }
            break;
        case OPT_OUTPUT:
            output = optarg;
            break;
        case OPT_PROBE_JSON:
            probe_path = optarg;
            break;
        case OPT_CHECK_JSON:
            check_path = optarg;
            break;
        case OPT_EVENTS_KEPT:
            in.events_kept = true;
            break;
        case OPT_NOW:
            stamp = true;
            break;
        case 'h':
        case OPT_HELP:
            report_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "agentjail: report: bad option '%s' (see agentjail report --help)\n",
                    argv[optind - 1]);
            return AJ_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "agentjail: report: unexpected argument '%s'\n", argv[optind]);
        return AJ_EXIT_USAGE;
    }
    pol = aj_policy_new();
    if (!pol) {
        fprintf(stderr, "agentjail: out of memory\n");
        return AJ_EXIT_SETUP;
    }
    /* As `run`: the profile first, the policy file on top of it. */
    if (profile) {
        if (aj_policy_load_profile(pol, profile, &err) < 0)
            goto bad_input;
        snprintf(label, sizeof(label), "profile:%s", profile);
    }
    if (policy) {
        char f[300];
        if (aj_policy_load_file(pol, policy, &err) < 0)
            goto bad_input;
        label_file(f, sizeof(f), "file:", policy);
        if (profile)
            snprintf(label + strlen(label), sizeof(label) - strlen(label), " + %s", f);
        else
            snprintf(label, sizeof(label), "%s", f);
    }

    if (check_path) {
        if (!(check = load_json(check_path, "--check-json")))
            goto out;
        label_file(check_src, sizeof(check_src), "saved: ", check_path);
    } else {
        if (aj_posture_check(NULL, &check, &err) < 0) {
            fprintf(stderr, "agentjail: report: host check: %s\n", err.msg);
            goto out;
        }
        snprintf(check_src, sizeof(check_src), "measured: agentjail check on this host");
    }
    if (probe_path) {
        if (!(probe = load_json(probe_path, "--probe-json")))
            goto out;
        label_file(probe_src, sizeof(probe_src), "saved: ", probe_path);
    } else {
        struct aj_result res;
        char *out_json = NULL;
        json_error_t jerr;
        if (aj_probe_in_policy(pol, &out_json, &res, &err) < 0) {
            fprintf(stderr, "agentjail: report: %s\n", err.msg);
            goto out;
        }
        probe = json_loads(out_json, 0, &jerr);
        free(out_json);
        if (!json_is_object(probe)) {
            fprintf(stderr, "agentjail: report: the probe's output is not a JSON object: %s\n",
                    jerr.text);
            goto out;
        }
        snprintf(probe_src, sizeof(probe_src), "measured: agentjail-probe inside this policy's sandbox");
    }
    if (stamp) {
        time_t t = time(NULL);
        struct tm tm;
        if (!gmtime_r(&t, &tm) || strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
            fprintf(stderr, "agentjail: report: cannot read the clock\n");
            goto out;
        }
        in.generated_at = now;
    }

    in.policy = pol;
    in.policy_label = label;
    in.probe = probe;
    in.probe_source = probe_src;
    in.check = check;
    in.check_source = check_src;
    if (aj_report_build(&in, &rep, &err) < 0 || aj_report_render(rep, fmt, &text, &err) < 0) {
        fprintf(stderr, "agentjail: report: %s\n", err.msg);
        goto out;
    }
    {
        struct aj_error werr = {0};
        r = write_output(output, text, &werr);
        if (r < 0) {
            fprintf(stderr, "agentjail: report: %s\n",
                    werr.msg[0] ? werr.msg : "write stdout: Input/output error");
            goto out;
        }
    }
    code = 0;
    goto out;
bad_input:
    fprintf(stderr, "agentjail: %s\n", err.msg);
    code = AJ_EXIT_USAGE;
out:
    free(text);
    json_decref(rep);
    json_decref(probe);
    json_decref(check);
    aj_policy_free(pol);
    return code;
}
