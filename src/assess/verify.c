/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_verify.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_mount.h"

#include "agentjail.h"
#include "aj_policy_model.h"
#include "aj_util.h"

#define PROBE_IN_SANDBOX "/opt/agentjail-probe"
#define PROBE_MAX_OUTPUT (4U << 20)

int aj_probe_locate(char *buf, size_t size, struct aj_error *err)
{
    return aj_locate_companion("AGENTJAIL_PROBE", "agentjail-probe", X_OK, buf, size, err);
}

int aj_probe_in_policy(const struct aj_policy *pol_in, char **ret_json, struct aj_result *ret_res,
                       struct aj_error *err)
{
    struct aj_policy pol = *pol_in; /* shallow: only binds are extended, below */
    struct aj_bind *binds = NULL;
    char probe[4096];
    char *argv[] = {PROBE_IN_SANDBOX, "--json", NULL};
    struct aj_request req = AJ_REQUEST_INIT;
    _cleanup_close_ int out = -1;
    struct stat st;
    char *buf = NULL;
    int r;

    *ret_json = NULL;
    r = aj_probe_locate(probe, sizeof(probe), err);
    if (r < 0)
        return r;
    /* The same policy, plus the probe itself, read-only. */
    binds = calloc(pol.n_binds + 1, sizeof(*binds));
    if (!binds)
        return aj_err(err, ENOMEM, "probe run");
    if (pol.n_binds)
        memcpy(binds, pol.binds, pol.n_binds * sizeof(*binds));
    binds[pol.n_binds] = (struct aj_bind){.host = probe, .sandbox = PROBE_IN_SANDBOX, .rw = false};
    pol.binds = binds;
    pol.n_binds++;
    /* The probe's report must arrive whole. */
    if (pol.output_limit && pol.output_limit < PROBE_MAX_OUTPUT)
        pol.output_limit = PROBE_MAX_OUTPUT;
    out = memfd_create("agentjail-probe-out", MFD_CLOEXEC);
    if (out < 0) {
        free(binds);
        return aj_err(err, errno, "memfd for the probe's output");
    }
    /* stdout to the memfd; stderr is ours, as it was (the probe's
     * complaints reach whoever runs verify); stdin none. */
    req.argv = argv;
    req.stdio[1] = AJ_STDIO_OF_FD(out);
    req.stdio[2] = AJ_STDIO_OF_FD(STDERR_FILENO);
    r = aj_run_ex(&pol, &req, ret_res, err);
    free(binds);
    if (r < 0)
        return aj_err_prefix(err, r, "probe run");
    if (ret_res->status != AJ_STATUS_OK)
        return aj_err(err, 0, "the probe did not complete inside the sandbox (status %s, exit %d)",
                      aj_status_name(ret_res->status), ret_res->exit_code);
    if (fstat(out, &st) < 0)
        return aj_err(err, errno, "probe output");
    if (st.st_size <= 0 || st.st_size > PROBE_MAX_OUTPUT)
        return aj_err(err, EIO, "probe output of %lld bytes", (long long)st.st_size);
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return aj_err(err, ENOMEM, "probe output");
    if (pread(out, buf, (size_t)st.st_size, 0) != st.st_size) {
        free(buf);
        return aj_err(err, EIO, "read the probe output");
    }
    buf[st.st_size] = '\0';
    *ret_json = buf;
    return 0;
}

/* ---- verify ----------------------------------------------------------------- */

struct checks {
    json_t *arr;
    bool all_ok;
};

static void add_check(struct checks *c, const char *protection, const char *declared, const char *observed, bool ok)
{
    json_t *row = json_pack("{s:s, s:s, s:s, s:b}", "protection", protection, "declared", declared, "observed",
                            observed ? observed : "(not reported)", "ok", ok);
    if (row)
        (void)json_array_append_new(c->arr, row);
    c->all_ok &= ok;
}

static json_t *finding(json_t *probe, const char *id)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(probe, "findings"), i, f) {
        const char *fid = json_string_value(json_object_get(f, "id"));
        if (fid && strcmp(fid, id) == 0)
            return f;
    }
    return NULL;
}

static const char *fstatus(json_t *f)
{
    const char *s = f ? json_string_value(json_object_get(f, "status")) : NULL;
    return s ? s : "missing";
}

static const char *fdetail(json_t *f)
{
    const char *s = f ? json_string_value(json_object_get(f, "detail")) : NULL;
    return s ? s : "";
}

/* One finding against the statuses the policy allows. */
static void expect(struct checks *c, json_t *probe, const char *id, const char *declared, const char *ok1,
                   const char *ok2)
{
    json_t *f = finding(probe, id);
    const char *st = fstatus(f);
    char observed[600];
    bool ok = f && (strcmp(st, ok1) == 0 || (ok2 && strcmp(st, ok2) == 0));

    snprintf(observed, sizeof(observed), "%s: %.560s", st, fdetail(f));
    add_check(c, id, declared, observed, ok);
}

/* Every finding of a family (syscalls.*, devices.*) must be blocked/absent. */
static void expect_family(struct checks *c, json_t *probe, const char *prefix, const char *declared)
{
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(probe, "findings"), i, f) {
        const char *id = json_string_value(json_object_get(f, "id"));
        if (id && strncmp(id, prefix, strlen(prefix)) == 0) {
            expect(c, probe, id, declared, "blocked", "absent");
            n++;
        }
    }
    if (n == 0)
        add_check(c, prefix, declared, "the probe reported nothing for it", false);
}

static bool path_in(const char *p, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] && strcmp(p, list[i]) == 0)
            return true;
    return false;
}

/* The host subtrees the probe saw ("... at PATH (fs, ro|rw)") against the
 * binds: system paths, the policy's own, and the probe. */
static void expect_mounts(struct checks *c, json_t *probe, const struct aj_policy *pol)
{
    static const char *const system[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                         PROBE_IN_SANDBOX};
    json_t *f = finding(probe, "filesystem.host_mounts");
    const char *d = fdetail(f);
    char unexpected[512] = "";
    bool ok = f != NULL;

    for (const char *p = strstr(d, " at "); p; p = strstr(p + 4, " at ")) {
        char path[512];
        const char *end = strstr(p + 4, " (");
        const char *mode = end ? strstr(end, ", ") : NULL;
        bool rw = mode && strncmp(mode + 2, "rw", 2) == 0;
        bool known = false, declared_rw = false;
        size_t n;
        if (!end || (n = (size_t)(end - (p + 4))) >= sizeof(path))
            break;
        memcpy(path, p + 4, n);
        path[n] = '\0';
        if (path_in(path, system, AJ_ARRAY_SIZE(system)) || aj_mount_is_host_etc(path))
            known = true;
        for (size_t i = 0; i < pol->n_binds; i++)
            if (strcmp(pol->binds[i].sandbox, path) == 0) {
                known = true;
                declared_rw = pol->binds[i].rw;
            }
        if (!known || (rw && !declared_rw)) {
            ok = false;
            if (strlen(unexpected) + n + 16 < sizeof(unexpected)) {
                strcat(unexpected, unexpected[0] ? ", " : "");
                strcat(unexpected, path);
                strcat(unexpected, rw ? " (rw)" : "");
            }
        }
    }
    {
        char observed[1200];
        if (unexpected[0])
            snprintf(observed, sizeof(observed), "not declared: %s", unexpected);
        else
            snprintf(observed, sizeof(observed), "%.1000s", d);
        add_check(c, "filesystem.host_mounts", "only the system binds and the policy's binds, ro unless declared rw",
                  observed, ok);
    }
}

static void expect_layers(struct checks *c, const struct aj_result *res, const struct aj_policy *pol)
{
    static const enum aj_layer always[] = {
        AJ_LAYER_USERNS,      AJ_LAYER_PIDNS,        AJ_LAYER_MOUNTNS,      AJ_LAYER_NETNS,
        AJ_LAYER_IPCNS,       AJ_LAYER_UTSNS,        AJ_LAYER_CGROUPNS,     AJ_LAYER_ROOTFS,
        AJ_LAYER_CAPS,        AJ_LAYER_NNP,          AJ_LAYER_SECCOMP,      AJ_LAYER_LANDLOCK_FS,
        AJ_LAYER_RLIMITS,     AJ_LAYER_ENV_CLEARED,  AJ_LAYER_FDS_CLOSED,   AJ_LAYER_NEW_SESSION,
        AJ_LAYER_KEYRING,     AJ_LAYER_MONITOR,      AJ_LAYER_NO_NESTED_NS,
    };
    bool want[AJ_LAYER_COUNT] = {false};

    for (size_t i = 0; i < AJ_ARRAY_SIZE(always); i++)
        want[always[i]] = true;
    if (pol->decoys)
        want[AJ_LAYER_DECOYS] = true;
    if (res->landlock_abi >= 4 && pol->network == AJ_NET_NONE)
        want[AJ_LAYER_LANDLOCK_NET] = true;
    if (res->landlock_abi >= 6)
        want[AJ_LAYER_LANDLOCK_SCOPE] = true;
    if (!res->rootless)
        want[AJ_LAYER_UID_ISOLATION] = true;
    /* The cgroup limits the policy declares, its defaults included: a run
     * without them (a container with a read-only cgroup hierarchy, a
     * rootless caller without a delegated cgroup) does not match, whatever
     * the policy says about requiring them. The supervisor sets these
     * layers only after the cgroup's own files read back the values. */
    if (pol->memory_max || pol->pids_max || pol->cpu_milli || pol->cpu_time_ms)
        want[AJ_LAYER_CGROUP] = true;
    if (pol->memory_max)
        want[AJ_LAYER_MEMORY_LIMIT] = true;
    if (pol->pids_max)
        want[AJ_LAYER_PIDS_LIMIT] = true;
    if (pol->cpu_milli)
        want[AJ_LAYER_CPU_LIMIT] = true;
    if (pol->cpu_time_ms)
        want[AJ_LAYER_CPU_TIME_LIMIT] = true;
    if (pol->output_limit)
        want[AJ_LAYER_OUTPUT_LIMIT] = true;
    for (unsigned i = 0; i < AJ_LAYER_COUNT; i++) {
        enum aj_layer l = (enum aj_layer)i;
        bool have = aj_result_has_layer(res, l);
        char name[64];
        if (!want[i])
            continue;
        snprintf(name, sizeof(name), "layer.%s", aj_layer_name(l));
        if (l == AJ_LAYER_CGROUP || l == AJ_LAYER_MEMORY_LIMIT || l == AJ_LAYER_PIDS_LIMIT || l == AJ_LAYER_CPU_LIMIT ||
            l == AJ_LAYER_CPU_TIME_LIMIT) {
            char declared[96];
            if (l == AJ_LAYER_MEMORY_LIMIT)
                snprintf(declared, sizeof(declared), "applied: memory %llu bytes",
                         (unsigned long long)pol->memory_max);
            else if (l == AJ_LAYER_PIDS_LIMIT)
                snprintf(declared, sizeof(declared), "applied: %llu processes", (unsigned long long)pol->pids_max);
            else if (l == AJ_LAYER_CPU_LIMIT)
                snprintf(declared, sizeof(declared), "applied: %u.%03u CPUs", pol->cpu_milli / 1000,
                         pol->cpu_milli % 1000);
            else
                snprintf(declared, sizeof(declared), "applied");
            add_check(c, name, declared,
                      have ? (l == AJ_LAYER_CGROUP || l == AJ_LAYER_CPU_TIME_LIMIT
                                  ? "applied"
                                  : "applied (the cgroup's files read back the limit)")
                           : "NOT applied: no writable cgroup for this run (run as root with the "
                             "cgroup hierarchy, or in a delegated cgroup v2 scope; docs/deploy.md)",
                      have);
            continue;
        }
        add_check(c, name, "applied", have ? "applied" : "NOT applied", have);
    }
}

int aj_verify(const struct aj_policy *pol, json_t **ret_report, struct aj_error *err)
{
    struct aj_result res;
    struct checks c = {.all_ok = true};
    _cleanup_free_ char *text = NULL, *result_json = NULL;
    json_error_t jerr;
    json_t *probe, *report;
    int r;

    *ret_report = NULL;
    r = aj_probe_in_policy(pol, &text, &res, err);
    if (r < 0)
        return r;
    probe = json_loads(text, 0, &jerr);
    if (!probe)
        return aj_err(err, 0, "the probe's report is not JSON (line %d: %s)", jerr.line, jerr.text);
    c.arr = json_array();
    if (!c.arr) {
        json_decref(probe);
        return aj_err(err, ENOMEM, "verify");
    }

    expect_layers(&c, &res, pol);
    expect(&c, probe, "caps.effective", "no capabilities", "absent", NULL);
    expect(&c, probe, "caps.permitted", "no capabilities", "absent", NULL);
    expect(&c, probe, "caps.ambient", "no capabilities", "absent", NULL);
    expect(&c, probe, "caps.bounding", "no capabilities", "absent", NULL);
    expect(&c, probe, "privileges.no_new_privs", "no_new_privs set", "blocked", NULL);
    expect(&c, probe, "privileges.seccomp", "seccomp filter loaded", "blocked", NULL);
    expect(&c, probe, "namespaces.user", "no new user namespace", "blocked", NULL);
    expect(&c, probe, "namespaces.mount", "no new mount namespace", "blocked", NULL);
    expect_family(&c, probe, "syscalls.", "refused");
    expect_mounts(&c, probe, pol);
    expect(&c, probe, "filesystem.proc_sys", "/proc/sys not writable", "blocked", "absent");
    expect(&c, probe, "filesystem.core_pattern", "core_pattern not writable", "blocked", "absent");
    expect(&c, probe, "filesystem.sysrq_trigger", "sysrq-trigger not writable", "blocked", "absent");
    expect(&c, probe, "filesystem.release_agent", "no cgroup release_agent", "blocked", "absent");
    expect(&c, probe, "fds.leaked", "no inherited descriptors", "absent", NULL);
    expect_family(&c, probe, "devices.", "no dangerous device nodes");
    /* Decoys are there when the policy says so, and only then. */
    expect(&c, probe, "runtime.docker_sock", pol->decoys ? "a decoy socket" : "no runtime socket",
           pol->decoys ? "info" : "absent", NULL);
    expect(&c, probe, "runtime.k8s_token", pol->decoys ? "a decoy token" : "no service-account token",
           pol->decoys ? "info" : "absent", NULL);
    expect(&c, probe, "runtime.containerd_sock", "no runtime socket", "absent", NULL);
    expect(&c, probe, "runtime.crio_sock", "no runtime socket", "absent", NULL);
    expect(&c, probe, "runtime.podman_sock", "no runtime socket", "absent", NULL);
    if (!pol->cloud_decoys && pol->n_env == 0 && pol->n_env_pass == 0) {
        expect(&c, probe, "credentials.env", "no credentials in the environment", "absent", NULL);
        expect(&c, probe, "credentials.files", "no credential files", "absent", NULL);
    }
    expect(&c, probe, "network.interfaces",
           pol->network == AJ_NET_NONE ? "no usable interface" : "loopback only", "absent", NULL);
    expect(&c, probe, "network.routes", "no route out", "absent", NULL);
    expect(&c, probe, "processes.host_pids", "no host process visible", "absent", NULL);

    result_json = aj_result_to_json(&res);
    report = json_pack("{s:s, s:b, s:o, s:o*, s:O}", "policy_sha256", res.policy_sha256, "matches", c.all_ok,
                       "checks", c.arr, "result", result_json ? json_loads(result_json, 0, NULL) : NULL,
                       "probe_summary", json_object_get(probe, "summary"));
    json_decref(probe);
    if (!report)
        return aj_err(err, ENOMEM, "verify report");
    *ret_report = report;
    return 0;
}
