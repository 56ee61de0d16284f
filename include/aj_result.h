/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "aj_error.h"

enum aj_status {
    AJ_STATUS_OK = 0,
    AJ_STATUS_NONZERO_EXIT,
    AJ_STATUS_SIGNALED,
    AJ_STATUS_TIMEOUT,
    AJ_STATUS_SETUP_ERROR,
    AJ_STATUS_CPU_LIMIT,
    AJ_STATUS_MEMORY_LIMIT,
    AJ_STATUS_PIDS_LIMIT,
    AJ_STATUS_OUTPUT_LIMIT,
    AJ_STATUS_ESCAPE_ATTEMPT,
};

/* Which layers were actually applied: set by the code that applied them,
 * never from the policy alone. */
enum aj_layer {
    AJ_LAYER_USERNS = 1u << 0,
    AJ_LAYER_PIDNS = 1u << 1,
    AJ_LAYER_MOUNTNS = 1u << 2,
    AJ_LAYER_NETNS = 1u << 3,
    AJ_LAYER_IPCNS = 1u << 4,
    AJ_LAYER_UTSNS = 1u << 5,
    AJ_LAYER_CGROUPNS = 1u << 6,
    AJ_LAYER_TIMENS = 1u << 7,
    AJ_LAYER_ROOTFS = 1u << 8,      /* tmpfs root + pivot_root, old root detached */
    AJ_LAYER_CAPS = 1u << 9,        /* all five capability sets empty, securebits locked */
    AJ_LAYER_NNP = 1u << 10,
    AJ_LAYER_SECCOMP = 1u << 11,
    AJ_LAYER_LANDLOCK_FS = 1u << 12,
    AJ_LAYER_LANDLOCK_NET = 1u << 13,
    AJ_LAYER_LANDLOCK_SCOPE = 1u << 14,
    AJ_LAYER_RLIMITS = 1u << 15,
    AJ_LAYER_UID_ISOLATION = 1u << 16, /* run has its own host uid (root mode) */
    AJ_LAYER_ENV_CLEARED = 1u << 17,
    AJ_LAYER_FDS_CLOSED = 1u << 18,
    AJ_LAYER_NEW_SESSION = 1u << 19,
    AJ_LAYER_KEYRING = 1u << 20,
    AJ_LAYER_CGROUP = 1u << 21,       /* the tree is in its own cgroup: accounted, killable */
    AJ_LAYER_MEMORY_LIMIT = 1u << 22,
    AJ_LAYER_PIDS_LIMIT = 1u << 23,
    AJ_LAYER_CPU_LIMIT = 1u << 24,    /* CPU bandwidth */
    AJ_LAYER_CPU_TIME_LIMIT = 1u << 25,
    AJ_LAYER_OUTPUT_LIMIT = 1u << 26,
    AJ_LAYER_MONITOR = 1u << 27,      /* escape-indicative syscalls reach the supervisor */
    AJ_LAYER_DECOYS = 1u << 28,       /* honeytokens in place and watched */
    AJ_LAYER_NO_NESTED_NS = 1u << 29, /* max_*_namespaces = 0 inside */
};
#define AJ_LAYER_COUNT 30

struct aj_result {
    enum aj_status status;
    int exit_code;   /* valid when the payload exited */
    int signal;      /* valid when status == SIGNALED (or the kill signal) */
    uint64_t wall_ms;
    uint64_t cpu_ms;
    uint64_t max_rss_kb;
    char policy_sha256[65];
    char sandbox_id[33];
    uint32_t layers;          /* enum aj_layer bits */
    int landlock_abi;         /* 0: unavailable */
    bool degraded;            /* ran without namespaces (--allow-degraded) */
    bool rootless;
    uint32_t host_uid, host_gid;
    char error[512];          /* setup_error: the one-line reason */
    char degraded_reason[512]; /* degraded: why namespaces were unavailable */
    bool stdout_truncated, stderr_truncated;
    uint64_t stdout_bytes, stderr_bytes; /* what the payload wrote (captured runs) */
    char cgroup_versions[4][8];          /* per controller: "v1", "v2", "none" */
    uint64_t event_counts[8];            /* by enum aj_event_type */
    bool escape_attempted;               /* any escape_attempt or canary event */
    char unsafe_skipped[16];             /* a layer left out on purpose (tests only) */
    bool has_rw_binds;                   /* the policy binds something writable */
    bool workspace_idmap;                /* ... and every writable bind is id-mapped */
    char workspace_idmap_note[512];      /* why one is not (the first), or "" */
};

AJ_EXPORT const char *aj_status_name(enum aj_status s);
AJ_EXPORT const char *aj_layer_name(enum aj_layer l);
/* Result JSON (versioned, see docs/result.md); caller frees. */
AJ_EXPORT char *aj_result_to_json(const struct aj_result *res);
struct aj_policy;
/* Before the run: refuse (exit_hint 2) a result path whose directory is
 * reached through a symlink or lies inside one of the run's writable binds. */
AJ_EXPORT int aj_result_check_path(const struct aj_policy *pol, const char *path, struct aj_error *err);
/* Written to a temporary file in the (symlink-free) directory and renamed
 * over path: nothing at path is followed or written through. */
AJ_EXPORT int aj_result_write_file(const struct aj_result *res, const char *path,
                                   struct aj_error *err);
