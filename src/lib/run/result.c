/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_result.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_bindreg.h"
#include "aj_hostpath.h"
#include "aj_util.h"

const char *aj_status_name(enum aj_status s)
{
    switch (s) {
    case AJ_STATUS_OK:
        return "ok";
    case AJ_STATUS_NONZERO_EXIT:
        return "nonzero_exit";
    case AJ_STATUS_SIGNALED:
        return "signaled";
    case AJ_STATUS_TIMEOUT:
        return "timeout";
    case AJ_STATUS_SETUP_ERROR:
        return "setup_error";
    case AJ_STATUS_CPU_LIMIT:
        return "cpu_limit";
    case AJ_STATUS_MEMORY_LIMIT:
        return "memory_limit";
    case AJ_STATUS_PIDS_LIMIT:
        return "pids_limit";
    case AJ_STATUS_OUTPUT_LIMIT:
        return "output_limit";
    case AJ_STATUS_ESCAPE_ATTEMPT:
        return "escape_attempt";
    }
    return "unknown";
}

bool aj_result_has_layer(const struct aj_result *res, enum aj_layer l)
{
    unsigned i = (unsigned)l;

    if (!res || i >= AJ_LAYER_COUNT || i / 64 >= AJ_ARRAY_SIZE(res->layer_set))
        return false;
    return (res->layer_set[i / 64] >> (i % 64)) & 1;
}

uint64_t aj_result_event_count(const struct aj_result *res, enum aj_event_type t)
{
    unsigned i = (unsigned)t;

    if (!res || i >= AJ_EV_COUNT || i >= AJ_ARRAY_SIZE(res->event_count))
        return 0;
    return res->event_count[i];
}

const char *aj_layer_name(enum aj_layer l)
{
    switch (l) {
    case AJ_LAYER_USERNS:
        return "user_namespace";
    case AJ_LAYER_PIDNS:
        return "pid_namespace";
    case AJ_LAYER_MOUNTNS:
        return "mount_namespace";
    case AJ_LAYER_NETNS:
        return "network_namespace";
    case AJ_LAYER_IPCNS:
        return "ipc_namespace";
    case AJ_LAYER_UTSNS:
        return "uts_namespace";
    case AJ_LAYER_CGROUPNS:
        return "cgroup_namespace";
    case AJ_LAYER_TIMENS:
        return "time_namespace";
    case AJ_LAYER_ROOTFS:
        return "private_root";
    case AJ_LAYER_CAPS:
        return "capabilities_dropped";
    case AJ_LAYER_NNP:
        return "no_new_privs";
    case AJ_LAYER_SECCOMP:
        return "seccomp";
    case AJ_LAYER_LANDLOCK_FS:
        return "landlock_fs";
    case AJ_LAYER_LANDLOCK_NET:
        return "landlock_net";
    case AJ_LAYER_LANDLOCK_SCOPE:
        return "landlock_scope";
    case AJ_LAYER_RLIMITS:
        return "rlimits";
    case AJ_LAYER_UID_ISOLATION:
        return "per_run_host_uid";
    case AJ_LAYER_ENV_CLEARED:
        return "environment_cleared";
    case AJ_LAYER_FDS_CLOSED:
        return "fds_closed";
    case AJ_LAYER_NEW_SESSION:
        return "new_session";
    case AJ_LAYER_KEYRING:
        return "fresh_keyring";
    case AJ_LAYER_CGROUP:
        return "cgroup";
    case AJ_LAYER_MEMORY_LIMIT:
        return "memory_limit";
    case AJ_LAYER_PIDS_LIMIT:
        return "pids_limit";
    case AJ_LAYER_CPU_LIMIT:
        return "cpu_bandwidth_limit";
    case AJ_LAYER_CPU_TIME_LIMIT:
        return "cpu_time_limit";
    case AJ_LAYER_OUTPUT_LIMIT:
        return "output_limit";
    case AJ_LAYER_MONITOR:
        return "escape_monitor";
    case AJ_LAYER_DECOYS:
        return "decoys";
    case AJ_LAYER_NO_NESTED_NS:
        return "nested_namespaces_refused";
    case AJ_LAYER_COUNT:
        break;
    }
    return NULL;
}

/* Error texts can carry bytes from paths (not always UTF-8); jansson
 * refuses those, which would silently drop the field. Replace them. */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    char buf[512];
    size_t i;

    if (j)
        return j;
    for (i = 0; s[i] && i + 1 < sizeof(buf); i++)
        buf[i] = ((unsigned char)s[i] < 0x80 && (unsigned char)s[i] >= 0x20) ? s[i] : '?';
    buf[i] = '\0';
    return json_string(buf);
}

char *aj_result_to_json(const struct aj_result *res)
{
    json_t *root, *layers;
    char *out;

    layers = json_object();
    for (unsigned i = 0; i < AJ_LAYER_COUNT; i++) {
        const char *name = aj_layer_name((enum aj_layer)i);
        if (name)
            (void)json_object_set_new(layers, name, json_boolean(aj_result_has_layer(res, (enum aj_layer)i)));
    }
    root = json_pack("{s:i, s:s, s:s, s:i, s:i, s:I, s:I, s:I, s:s, s:o, s:i, s:b, s:s, s:I, s:I}",
                     "version", 1, "sandbox_id", res->sandbox_id, "status", aj_status_name(res->status),
                     "exit_code", res->exit_code, "signal", res->signal, "wall_ms",
                     (json_int_t)res->wall_ms, "cpu_ms", (json_int_t)res->cpu_ms, "max_rss_kb",
                     (json_int_t)res->max_rss_kb, "policy_sha256", res->policy_sha256, "layers", layers,
                     "landlock_abi", res->landlock_abi, "degraded", res->degraded, "mode",
                     res->rootless ? "rootless" : "root", "host_uid", (json_int_t)res->host_uid,
                     "host_gid", (json_int_t)res->host_gid);
    if (!root)
        return NULL;
    {
        static const char *const ctrl[] = {"memory", "pids", "cpu", "cpuacct"};
        json_t *cgv = json_object();
        for (size_t i = 0; i < 4; i++)
            (void)json_object_set_new(cgv, ctrl[i],
                                      json_string(res->cgroup_versions[i][0] ? res->cgroup_versions[i] : "none"));
        static const char *const ev[] = {"start", "exit", "escape_attempt", "canary", "net_denied",
                                         "net_allowed", "limit", "error"};
        json_t *evc = json_object();
        for (size_t i = 0; i < 8; i++)
            (void)json_object_set_new(evc, ev[i], json_integer((json_int_t)aj_result_event_count(res, (enum aj_event_type)i)));
        if (json_object_set_new(root, "events", evc) < 0 ||
            json_object_set_new(root, "escape_attempted", json_boolean(res->escape_attempted)) < 0 ||
            json_object_set_new(root, "cgroup_controllers", cgv) < 0 ||
            json_object_set_new(root, "stdout_truncated", json_boolean(res->stdout_truncated)) < 0 ||
            json_object_set_new(root, "stderr_truncated", json_boolean(res->stderr_truncated)) < 0) {
            json_decref(root);
            return NULL;
        }
    }
    if (res->has_rw_binds &&
        (json_object_set_new(root, "workspace_idmap", json_boolean(res->workspace_idmap)) < 0 ||
         (res->workspace_idmap_note[0] &&
          json_object_set_new(root, "workspace_idmap_note", json_text(res->workspace_idmap_note)) < 0))) {
        json_decref(root);
        return NULL;
    }
    if (res->egress) {
        /* network "proxy": what the egress proxy decided (docs/result.md). */
        json_t *net = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "mode", "proxy", "allowed",
                                (json_int_t)aj_result_event_count(res, AJ_EV_NET_ALLOWED), "denied",
                                (json_int_t)aj_result_event_count(res, AJ_EV_NET_DENIED), "cap_refused",
                                (json_int_t)aj_result_event_count(res, AJ_EV_NET_CAP), "secret_used",
                                (json_int_t)aj_result_event_count(res, AJ_EV_SECRET_USED), "secret_misdirected",
                                (json_int_t)aj_result_event_count(res, AJ_EV_SECRET_MISDIRECTED), "bytes_out",
                                (json_int_t)res->egress_bytes_out, "bytes_in", (json_int_t)res->egress_bytes_in,
                                "credentials_suspended", res->credentials_suspended);
        if (!net || json_object_set_new(root, "network", net) < 0) {
            json_decref(root);
            return NULL;
        }
    }
    if (res->unsafe_skipped[0] &&
        json_object_set_new(root, "unsafe_skipped_layer", json_string(res->unsafe_skipped)) < 0) {
        json_decref(root);
        return NULL;
    }
    if ((res->status == AJ_STATUS_SETUP_ERROR &&
         json_object_set_new(root, "error", json_text(res->error)) < 0) ||
        (res->degraded && json_object_set_new(root, "degraded_reason", json_text(res->degraded_reason)) < 0)) {
        json_decref(root);
        return NULL;
    }
    out = json_dumps(root, JSON_SORT_KEYS | JSON_INDENT(2));
    json_decref(root);
    return out;
}

int aj_result_check_path(const struct aj_policy *pol, const char *path, struct aj_error *err)
{
    char name[256];
    _cleanup_close_ int dfd = aj_hostpath_open_parent(path, "--result", name, sizeof(name), err);

    struct stat st;

    if (dfd < 0) {
        err->exit_hint = 2;
        return dfd;
    }
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
        err->exit_hint = 2;
        return aj_err(err, EEXIST,
                      "--result: %s exists and is not a regular file (a symlink, device or FIFO is neither "
                      "followed nor replaced); give a file's path, or --result - for stdout",
                      path);
    }
    return aj_hostpath_check_outside_writable(pol, dfd, path, "--result", err);
}

/* Written as a new file renamed over path (aj_hostpath_write_replace):
 * whatever sits at path (a symlink a sandbox planted to a file of root's,
 * a hard link, a FIFO) is replaced, never written through. */
int aj_result_write_file(const struct aj_result *res, const char *path, struct aj_error *err)
{
    _cleanup_free_ char *json = aj_result_to_json(res);
    size_t n;

    if (!json)
        return aj_err(err, ENOMEM, "result json");
    n = strlen(json);
    json[n] = '\n'; /* json_dumps leaves room for the NUL we replace */
    return aj_hostpath_write_replace(path, "result file", json, n + 1, 0644, err);
}
