/* SPDX-License-Identifier: Apache-2.0 */
/* The host's own posture for running untrusted code (`agentjail check`):
 * the kernel features agentjail's layers need and the sysctls that decide
 * how much of the kernel a payload could reach if one layer failed.
 * Read only: nothing here ever writes a sysctl. The finding ids, what each
 * status means and the recommendations are documented in
 * docs/risk-model.md ("Host posture findings"). */
#pragma once

#include <jansson.h>

#include "aj_error.h"

enum aj_posture_status {
    AJ_POSTURE_OK = 0,
    AJ_POSTURE_WARN,
    AJ_POSTURE_FAIL,
    AJ_POSTURE_UNKNOWN,
};

struct aj_posture_options {
    /* NULL or "": the live host. Otherwise read proc/sys/..., proc/self/...
     * and sys/kernel/security/... under this directory (a snapshot, or a
     * test's fake tree); the findings that need a syscall or the live
     * mount table (Landlock ABI, a trial user namespace, cgroup mounts)
     * are then "unknown". */
    const char *sysroot;
};

AJ_EXPORT const char *aj_posture_status_name(enum aj_posture_status s);

/* Build the posture report:
 *   {"version":1, "kernel":"6.1.0-...", "euid":N,
 *    "findings":[{"id","status","value","why","recommendation"}, ...],
 *    "summary":{"ok":N,"warn":N,"fail":N,"unknown":N}}
 * Findings come in a fixed order and every one has a non-empty
 * recommendation. Returns 0 and a new reference in *ret, or -errno. */
AJ_EXPORT int aj_posture_check(const struct aj_posture_options *opts, json_t **ret,
                               struct aj_error *err);

/* Number of findings with status fail in a report built above (or loaded
 * from its JSON): the CLI exits 1 when it is not 0. */
AJ_EXPORT size_t aj_posture_count(const json_t *report, enum aj_posture_status s);
