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
 * never from the policy alone. Indices (not bits): ask a result with
 * aj_result_has_layer, so the set can grow past 32 (or 64) kinds without
 * changing what a caller compiled against this header sees. */
enum aj_layer {
    AJ_LAYER_USERNS = 0,
    AJ_LAYER_PIDNS = 1,
    AJ_LAYER_MOUNTNS = 2,
    AJ_LAYER_NETNS = 3,
    AJ_LAYER_IPCNS = 4,
    AJ_LAYER_UTSNS = 5,
    AJ_LAYER_CGROUPNS = 6,
    AJ_LAYER_TIMENS = 7,
    AJ_LAYER_ROOTFS = 8,      /* tmpfs root + pivot_root, old root detached */
    AJ_LAYER_CAPS = 9,        /* all five capability sets empty, securebits locked */
    AJ_LAYER_NNP = 10,
    AJ_LAYER_SECCOMP = 11,
    AJ_LAYER_LANDLOCK_FS = 12,
    AJ_LAYER_LANDLOCK_NET = 13,
    AJ_LAYER_LANDLOCK_SCOPE = 14,
    AJ_LAYER_RLIMITS = 15,
    AJ_LAYER_UID_ISOLATION = 16, /* run has its own host uid (root mode) */
    AJ_LAYER_ENV_CLEARED = 17,
    AJ_LAYER_FDS_CLOSED = 18,
    AJ_LAYER_NEW_SESSION = 19,
    AJ_LAYER_KEYRING = 20,
    AJ_LAYER_CGROUP = 21,       /* the tree is in its own cgroup: accounted, killable */
    AJ_LAYER_MEMORY_LIMIT = 22,
    AJ_LAYER_PIDS_LIMIT = 23,
    AJ_LAYER_CPU_LIMIT = 24,    /* CPU bandwidth */
    AJ_LAYER_CPU_TIME_LIMIT = 25,
    AJ_LAYER_OUTPUT_LIMIT = 26,
    AJ_LAYER_MONITOR = 27,      /* escape-indicative syscalls reach the supervisor */
    AJ_LAYER_DECOYS = 28,       /* honeytokens in place and watched */
    AJ_LAYER_NO_NESTED_NS = 29, /* max_*_namespaces = 0 inside */
    AJ_LAYER_COUNT, /* grows as layers are added: not a bound to compile in */
};

/* Event kinds (docs/events.md), as counted in a result: the first eight
 * are the result's "events" object. */
enum aj_event_type {
    AJ_EV_START = 0,
    AJ_EV_EXIT,
    AJ_EV_ESCAPE_ATTEMPT,
    AJ_EV_CANARY,
    AJ_EV_NET_DENIED,
    AJ_EV_NET_ALLOWED,
    AJ_EV_LIMIT,
    AJ_EV_ERROR,
    AJ_EV_EVENTS_SUPPRESSED, /* the event budget's summary (not in the result's counts) */
    AJ_EV_NET_CAP,           /* network "proxy": a cap refused a connection or request */
    AJ_EV_SECRET_USED,       /* the proxy put a brokered secret in a request */
    AJ_EV_SECRET_MISDIRECTED, /* a placeholder went to a host its secret is not for */
    AJ_EV_CREDENTIALS_SUSPENDED, /* brokering stopped after an escape attempt: rotate these */
    AJ_EV_COUNT,             /* grows as kinds are added */
};

struct aj_result {
    enum aj_status status;
    int exit_code;   /* valid when the payload exited */
    int signal;      /* valid when status == SIGNALED (or the kill signal) */
    uint64_t wall_ms;
    uint64_t cpu_ms;
    uint64_t max_rss_kb;
    char policy_sha256[65];
    char sandbox_id[33];
    /* Applied layers and events counted by kind: read them with
     * aj_result_has_layer and aj_result_event_count. Room for 256 layers
     * and 32 event kinds: new kinds do not change this struct's size. */
    uint64_t layer_set[4];
    int landlock_abi;         /* 0: unavailable */
    bool degraded;            /* ran without namespaces (--allow-degraded) */
    bool rootless;
    uint32_t host_uid, host_gid;
    char error[512];          /* setup_error: the one-line reason */
    char degraded_reason[512]; /* degraded: why namespaces were unavailable */
    bool stdout_truncated, stderr_truncated;
    uint64_t stdout_bytes, stderr_bytes; /* what the payload wrote (captured runs) */
    char cgroup_versions[4][8];          /* per controller: "v1", "v2", "none" */
    uint64_t event_count[32];            /* by enum aj_event_type: aj_result_event_count */
    bool escape_attempted;               /* any escape_attempt or canary event */
    char unsafe_skipped[16];             /* a layer left out on purpose (tests only) */
    bool has_rw_binds;                   /* the policy binds something writable */
    bool workspace_idmap;                /* ... and every writable bind is id-mapped */
    char workspace_idmap_note[512];      /* why one is not (the first), or "" */
    /* network.mode "proxy" (docs/network.md): what went through the
     * egress proxy, and whether brokering was stopped. */
    bool egress;
    uint64_t egress_bytes_out, egress_bytes_in;
    bool credentials_suspended;
};

AJ_EXPORT const char *aj_status_name(enum aj_status s);
AJ_EXPORT const char *aj_layer_name(enum aj_layer l); /* NULL past the last */
AJ_EXPORT const char *aj_event_type_name(enum aj_event_type t);
/* Whether the run applied layer l (false for a layer this library does not know). */
AJ_EXPORT bool aj_result_has_layer(const struct aj_result *res, enum aj_layer l);
/* Events of kind t the run raised (written or suppressed by the budget); 0 for an unknown kind. */
AJ_EXPORT uint64_t aj_result_event_count(const struct aj_result *res, enum aj_event_type t);
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
