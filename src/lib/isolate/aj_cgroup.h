/* SPDX-License-Identifier: Apache-2.0 */
/* Control groups for one run: limits (memory, pids, cpu bandwidth), whole
 * tree accounting and kill. cgroup v2 first; a controller that only a v1
 * hierarchy provides (as on hosts with a "mixed" layout) is used there.
 * Detection is per controller, from the host's mounts, never per distro. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "aj_error.h"
#include "aj_policy_model.h"

enum aj_cg_ctrl {
    AJ_CG_MEMORY = 0,
    AJ_CG_PIDS,
    AJ_CG_CPU,
    AJ_CG_CPUACCT, /* v1 only: CPU usage accounting (v2 has cpu.stat always) */
    AJ_CG_NCTRL,
};

#define AJ_CG_PATH 512

/* cgroup v2: the caller's processes are moved into this leaf of their own
 * cgroup so that controllers can be enabled below it ("no internal
 * processes"); a caller found in it counts as being in its parent. */
#define AJ_CG_LEAF "agentjail-leaf"

/* Where each controller lives on this host. version 0: nowhere usable. */
struct aj_cgroup_host {
    char v2_mount[AJ_CG_PATH]; /* "" when no cgroup2 mount */
    char v2_self[AJ_CG_PATH];  /* the caller's v2 cgroup ("/" for the root); its parent
                                * if the caller sits in an AJ_CG_LEAF */
    uint32_t v2_kernel;        /* controllers the v2 root offers (what the kernel has) */
    uint32_t v2_avail;         /* controllers enabled for v2_self by its parent */
    bool v2_real_root;         /* v2_self is the root of the whole hierarchy */
    struct {
        int version;                /* 0, 1 or 2 */
        char mount[AJ_CG_PATH];     /* v1: the hierarchy's mount point */
        char self[AJ_CG_PATH];      /* v1: this process's path in it */
    } ctrl[AJ_CG_NCTRL];
};

/* One run's cgroups: a v2 directory (tracking, kill, and the controllers v2
 * provides) and one directory per v1 hierarchy that provides the rest. */
struct aj_cgroup {
    char v2_dir[AJ_CG_PATH * 2];
    int v2_fd;                             /* O_PATH|O_DIRECTORY, for CLONE_INTO_CGROUP */
    char v1_dir[AJ_CG_NCTRL][AJ_CG_PATH * 2];
    int version[AJ_CG_NCTRL];              /* where each controller is for this run */
    uint64_t limits;                       /* AJ_LAYER_BIT(AJ_LAYER_*_LIMIT) actually written */
    bool created;
    /* v2, per controller: why it is not in the run's group (AJ_CG_WHY_*). */
    int v2_why[AJ_CG_NCTRL];
    int v2_errno[AJ_CG_NCTRL];
};

enum {
    AJ_CG_WHY_OK = 0,
    AJ_CG_WHY_KERNEL,       /* the kernel has no such v2 controller */
    AJ_CG_WHY_NOT_DELEGATED,/* the parent does not enable it for the caller's cgroup */
    AJ_CG_WHY_BUSY,         /* other processes in the caller's cgroup keep it from being enabled */
    AJ_CG_WHY_NO_ACCESS,    /* the caller's cgroup is not writable (no delegation) */
    AJ_CG_WHY_ERROR,        /* another error (v2_errno) */
};

struct aj_cgroup_stats {
    uint64_t cpu_usec;
    uint64_t memory_peak;   /* bytes, 0 if unknown */
    uint64_t oom_kills;
    uint64_t pids_max_hits;
    bool have_cpu, have_memory_peak;
};

AJ_EXPORT const char *aj_cgroup_ctrl_name(enum aj_cg_ctrl c);
int aj_cgroup_detect(struct aj_cgroup_host *ret, struct aj_error *err);

/* Read only: the controllers a run started by this process would get
 * limits from (AJ_CG_* bits), and, when some are missing, why. */
int aj_cgroup_predict(const struct aj_cgroup_host *host, uint32_t *ret_ctrls, char *why, size_t size);

/* Create the run's cgroups under "agentjail" in the caller's own cgroup of
 * each hierarchy and write the policy's limits. Fails closed when a limit
 * the policy set explicitly has no writable controller; a default limit
 * without one is skipped (cg->limits says what was applied). A cgroup
 * that cannot be created at all leaves cg->created false: the run goes on
 * without one (rlimits only) unless an explicit limit needs it. */
int aj_cgroup_create(const struct aj_cgroup_host *host, const struct aj_policy *pol,
                     const char *run_name, struct aj_cgroup *cg, struct aj_error *err);
/* Supervisor side, before releasing the child: move pid into every v1
 * hierarchy (v2 is entered at clone time with CLONE_INTO_CGROUP). */
int aj_cgroup_parent_attach(const struct aj_cgroup *cg, pid_t pid, bool v2_too, struct aj_error *err);

/* Faster v1 path: the supervisor opens each v1 group's "tasks" file before
 * the clone, and the child writes "0" (itself) to them. Moving the calling
 * thread alone skips the global threadgroup lock whose write side waits
 * for an RCU grace period (~10 ms per move); the write is authorised by
 * the opener's credentials (the supervisor), not the child's. */
#define AJ_CG_MAX_JOIN 4
int aj_cgroup_open_join_fds(const struct aj_cgroup *cg, int fds[AJ_CG_MAX_JOIN], size_t *ret_n,
                            struct aj_error *err);
/* For a helper process of the run (the egress proxy and its relay): the
 * fds of aj_cgroup_open_join_fds plus the v2 group's "cgroup.procs" (v2
 * moves the writer's whole process), for the helper to write "0" to with
 * aj_cgroup_child_join first thing after its clone: its memory, pids and
 * CPU are the run's, and the run's kill is its end. */
int aj_cgroup_open_helper_join_fds(const struct aj_cgroup *cg, int fds[AJ_CG_MAX_JOIN + 1], size_t *ret_n,
                                   struct aj_error *err);
/* Sandbox side, first thing after clone; async-signal-safe. */
int aj_cgroup_child_join(const int *fds, size_t n, struct aj_error *err);
int aj_cgroup_read_stats(const struct aj_cgroup *cg, struct aj_cgroup_stats *ret);
/* The processes in the run's group (its v2 group, else a v1 one):
 * how many (those beyond max are counted, not stored), or -errno. */
int aj_cgroup_procs(const struct aj_cgroup *cg, pid_t *pids, size_t max);
/* SIGKILL every process in the run's cgroups (cgroup.kill on v2). */
void aj_cgroup_kill(const struct aj_cgroup *cg);
/* Kill, wait for empty, remove. Safe on a half-created or zeroed cg. */
void aj_cgroup_destroy(struct aj_cgroup *cg);
void aj_cgroup_init(struct aj_cgroup *cg);

/* Remove run cgroups whose supervisor is gone (killed with SIGKILL, say):
 * their processes are killed first. Returns how many were removed. */
int aj_cgroup_cleanup_stale(const struct aj_cgroup_host *host);

/* "<pid>.<starttime>.<id>.ns<pid namespace inode>": who owns a run cgroup,
 * checkable later from the same pid namespace. */
int aj_cgroup_run_name(const char *sandbox_id, char *buf, size_t size);
