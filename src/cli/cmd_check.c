/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail check`: the host's own posture for running untrusted code.
 * The library measures (aj_posture_check); this file only renders. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
          "Last, the deployment way it found (docs/deploy.md): every-layer, rootless, partial,\n"
          "degraded or none, and what is missing for the rootless way and for every layer.\n"
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

/* ---- the deployment way (docs/deploy.md) ------------------------------------------
 * Which of the two least-privilege ways this process is in, from the
 * trial run (the report's "trial") and the capabilities it holds, and what
 * is missing for "every layer". Ways:
 *   every-layer  root mode (a host uid per run) with every layer of the
 *                default policy and the memory and pids limits;
 *   rootless     every sandbox layer, as a non-root user (no per-run host
 *                uid; limits only with a delegated cgroup);
 *   partial      root mode, some of every layer missing (the cgroup);
 *   degraded     only --allow-degraded runs (no namespaces);
 *   none         agentjail run fails here. */

/* What root mode needs besides uid 0 (measured: tests/integration/
 * test_deploy_image.py and test_container.py): SETUID/SETGID write the
 * per-run uid and gid maps, LEASE arms the decoys. */
static const struct {
    int cap;
    const char *name;
} every_layer_caps[] = {
    {CAP_SETUID, "CAP_SETUID"},
    {CAP_SETGID, "CAP_SETGID"},
    {CAP_LEASE, "CAP_LEASE"},
};

/* One capability mask line of /proc/self/status ("CapEff:\t000001ff..."). */
static int read_cap_mask(const char *key, uint64_t *ret)
{
    char line[256];
    size_t klen = strlen(key);
    FILE *f = fopen("/proc/self/status", "re");
    int r = -ENOENT;

    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        char *end;
        unsigned long long v;
        if (strncmp(line, key, klen) != 0 || line[klen] != ':')
            continue;
        errno = 0;
        v = strtoull(line + klen + 1, &end, 16);
        r = errno || end == line + klen + 1 || (*end != '\n' && *end != '\0') ? -EINVAL : 0;
        if (r == 0)
            *ret = (uint64_t)v;
        break;
    }
    fclose(f);
    return r;
}

/* Where this runs: a guess from what the runtimes leave (for the report's
 * wording only: nothing depends on it). */
static const char *container_kind(void)
{
    char buf[4096];
    FILE *f;
    size_t n = 0;

    if (getenv("KUBERNETES_SERVICE_HOST"))
        return "kubernetes";
    if (access("/run/.containerenv", F_OK) == 0)
        return "podman";
    if (access("/.dockerenv", F_OK) == 0)
        return "docker";
    f = fopen("/proc/1/cgroup", "re");
    if (f) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    if (strstr(buf, "kubepods"))
        return "kubernetes";
    if (strstr(buf, "docker"))
        return "docker";
    if (strstr(buf, "libpod"))
        return "podman";
    return "none";
}

#define UNMASKED_PROC                                                                              \
    "an unmasked /proc (docker: --security-opt systempaths=unconfined; podman: --security-opt "        \
    "unmask=ALL; Kubernetes: procMount: Unmasked)"

static bool has_str(const json_t *arr, const char *s)
{
    const json_t *v;
    size_t i;

    json_array_foreach(arr, i, v) {
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return true;
    }
    return false;
}

static const json_t *finding(const json_t *rep, const char *id)
{
    const json_t *f;
    size_t i;

    json_array_foreach(json_object_get(rep, "findings"), i, f) {
        if (strcmp(str(f, "id"), id) == 0)
            return f;
    }
    return NULL;
}

/* Append to buf (size bytes, *n used): cut at the end, never past it. */
static void __attribute__((format(printf, 4, 5))) append(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (*n + 1 >= size)
        return;
    va_start(ap, fmt);
    w = vsnprintf(buf + *n, size - *n, fmt, ap);
    va_end(ap);
    if (w > 0)
        *n += (size_t)w < size - *n ? (size_t)w : size - *n - 1;
}

static void append_list(char *buf, size_t size, size_t *n, const char *title, const json_t *list)
{
    const json_t *v;
    size_t i;

    if (!json_array_size(list))
        return;
    append(buf, size, n, "%s", title);
    json_array_foreach(list, i, v) {
        append(buf, size, n, "%s %s", i ? "," : "", json_string_value(v));
    }
}

/* Adds rep["deployment"]: {"way", "container", "euid", "missing_for_every_layer": [...],
 * "missing_for_rootless": [...], "summary"}. */
static int add_deployment(json_t *rep)
{
    static const char *const sandbox_layers[] = {
        "user_namespace", "pid_namespace", "mount_namespace", "network_namespace", "ipc_namespace",
        "uts_namespace", "cgroup_namespace", "private_root", "seccomp", "landlock_fs", "no_new_privs",
        "fresh_keyring", "decoys", "nested_namespaces_refused", "escape_monitor"};
    const json_t *trial = json_object_get(rep, "trial");
    const json_t *missing = json_object_get(trial, "missing");
    const char *outcome = str(trial, "outcome"), *mode = str(trial, "mode"), *way;
    const char *trial_value = str(finding(rep, "run.trial"), "value");
    json_t *dep, *for_every = json_array(), *for_rootless = json_array();
    uint64_t eff = 0, bnd = 0;
    bool root = geteuid() == 0, sandbox_ok = true, limits;
    char summary[1024];
    size_t i, n;
    int r;

    if (!for_every || !for_rootless)
        goto nomem;
    (void)read_cap_mask("CapEff", &eff); /* unreadable: none held, and said so below */
    (void)read_cap_mask("CapBnd", &bnd);
    for (i = 0; i < sizeof(sandbox_layers) / sizeof(sandbox_layers[0]); i++)
        if (has_str(missing, sandbox_layers[i]))
            sandbox_ok = false;
    limits = !has_str(missing, "memory_limit") && !has_str(missing, "pids_limit");

    /* Every layer: uid 0 with the capabilities above and a cgroup. */
    if (!root && json_array_append_new(for_every, json_string("uid 0")) < 0)
        goto nomem;
    for (i = 0; i < sizeof(every_layer_caps) / sizeof(every_layer_caps[0]); i++) {
        uint64_t bit = 1ull << every_layer_caps[i].cap;
        /* A non-root user holds none: what root here could hold is the bounding set. */
        if (!((root ? eff : bnd) & bit) &&
            json_array_append_new(for_every, json_string(every_layer_caps[i].name)) < 0)
            goto nomem;
    }
    /* The trial's limits when it ran; else what cgroup.limits predicts. */
    if (strcmp(outcome, "ran") != 0)
        limits = strcmp(str(finding(rep, "cgroup.limits"), "status"), "fail") != 0;
    if (!limits &&
        json_array_append_new(for_every, json_string("a delegated cgroup (memory, pids)")) < 0)
        goto nomem;

    /* Rootless (and anything at all): what the trial's error names. */
    if (strcmp(outcome, "ran") != 0) {
        static const struct {
            const char *says, *missing;
        } causes[] = {
            {"seccomp filter", "a seccomp profile allowing agentjail's namespace, mount and keyring calls "
                               "(deploy/docker/seccomp.json)"},
            {"/proc/sys is mounted read-only", UNMASKED_PROC},
            /* A masked path anywhere in /proc (podman's unmask=/proc/sys
             * alone): the kernel refuses a new proc mount. */
            {"mount proc: Operation not permitted", UNMASKED_PROC},
            {"CAP_SETUID/CAP_SETGID", "CAP_SETUID and CAP_SETGID for root (or a non-root user: the rootless way)"},
            {"CAP_LEASE", "CAP_LEASE for root (or a non-root user: the rootless way)"},
        };
        bool named = false;
        for (i = 0; i < sizeof(causes) / sizeof(causes[0]); i++)
            if (strstr(trial_value, causes[i].says)) {
                named = true;
                if (!has_str(for_rootless, causes[i].missing) &&
                    json_array_append_new(for_rootless, json_string(causes[i].missing)) < 0)
                    goto nomem;
            }
        if (!named && json_array_append_new(for_rootless, json_string(trial_value)) < 0)
            goto nomem;
    }

    if (strcmp(outcome, "ran") != 0)
        way = strcmp(outcome, "degraded") == 0 ? "degraded" : "none";
    else if (strcmp(mode, "rootless") == 0)
        way = sandbox_ok ? "rootless" : "partial";
    else
        way = sandbox_ok && limits && json_array_size(for_every) == 0 ? "every-layer" : "partial";

    n = 0;
    append(summary, sizeof(summary), &n, "%s", way);
    if (strcmp(container_kind(), "none") != 0)
        append(summary, sizeof(summary), &n, " (in a %s container)", container_kind());
    append_list(summary, sizeof(summary), &n, "; missing for rootless:", for_rootless);
    append_list(summary, sizeof(summary), &n, "; missing for every layer:", for_every);
    dep = json_pack("{s:s, s:s, s:i, s:o, s:o, s:s}", "way", way, "container", container_kind(), "euid",
                    (json_int_t)geteuid(), "missing_for_every_layer", for_every, "missing_for_rootless",
                    for_rootless, "summary", summary);
    for_every = for_rootless = NULL; /* "o" stole them, also on failure */
    if (!dep)
        return -ENOMEM;
    r = json_object_set_new(rep, "deployment", dep);
    return r < 0 ? -ENOMEM : 0;
nomem:
    json_decref(for_every);
    json_decref(for_rootless);
    return -ENOMEM;
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
    printf("\ndeployment: %s\n", str(json_object_get(rep, "deployment"), "summary"));
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
    if (!popts.sysroot && add_deployment(rep) < 0) {
        json_decref(rep);
        fprintf(stderr, "agentjail: check: out of memory\n");
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
