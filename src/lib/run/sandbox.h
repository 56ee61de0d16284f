/* SPDX-License-Identifier: Apache-2.0 */
/* One sandbox's lifecycle, the only place that knows the order of steps
 * (as nsjail's contain.cc): begin (validate, hash), open the events,
 * prepare (everything up to GO: ids, filters, mount plan, decoys,
 * cgroups, output, clone, id maps), [pooled: launch], supervise (loop.c),
 * cleanup. The pool (pool.c) calls the same steps, prepare ahead of time. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentjail.h"
#include "aj_audit.h"
#include "aj_cgroup.h"
#include "aj_userns.h"
#include "child.h"
#include "egress.h"
#include "loop.h"
#include "request.h"
#include "zygote.h"

/* Degraded runs have no pid namespace: the supervisor is a subreaper and,
 * when the payload ends, kills what was reparented to it from the run. */
#define AJ_MAX_PRIOR_CHILDREN 64

struct prior_children {
    pid_t pids[AJ_MAX_PRIOR_CHILDREN];
    size_t n;
};

/* Everything the supervisor holds for one sandbox: the handle of
 * agentjail.h. A cold run is prepared and started in the caller's thread;
 * the pool prepares several ahead of time (parked: every layer applied,
 * the payload process waiting for its command) and launches one per run.
 * Heap-allocated, never moved: st and c point into it. */
struct aj_sandbox {
    struct aj_child_ctx c;
    struct supervise_state st;
    struct aj_req req;    /* the request taken; req.eff is the policy this sandbox enforces */
    struct aj_uid_lease lease;
    struct aj_cgroup cg;
    struct aj_audit audit;
    char *decoy_env[2];
    int socks[2];
    int null_fd;          /* /dev/null for init's 0-2 (parked) or a stdin that is none or a terminal */
    int stdin_own;        /* our end of a stdin pipe, until the sandbox has its copy */
    int caller_pipe[3];   /* the caller's ends of AJ_STDIO_PIPE streams, until taken or freed */
    struct aj_egress eg;  /* network "proxy": the run's egress proxy and relay */
    struct aj_result prepared; /* parked: what preparing found out (ids, layers, versions) */
    struct aj_result res; /* the run's result, complete once ended */
    int rc;               /* what aj_sandbox_wait returns: 0, or the sandbox side's setup error */
    struct aj_error run_err;
    bool ended;           /* everything released but the caller's pipe ends and the loop's fds */
    bool run_finished;    /* pooled, ended early: aj_pool_run_finished said so */
    bool teardown;        /* ended early (a warm interpreter's end word): the result is final, the
                           * sandbox killed, init still to reap and the rest to release (sb_teardown) */
    bool audit_open, in_cgroup;
    struct prior_children prior; /* degraded: our children before the run */
    bool subreaper_set;   /* we made this process a subreaper: undo at the end */
    bool degraded_held;   /* this is the process's one degraded run */
    struct aj_pool *pool; /* launched from this pool (which it keeps alive), or NULL */
    struct aj_zygote *zyg; /* prepared by a pool whose zygote clones its init (zygote.h), or NULL */
    uint64_t start;
};

void sb_init(struct aj_sandbox *sb, const struct aj_policy *pol);
/* The payload's environment: PATH, HOME, env_pass (read now), the decoys'
 * variables (extra), the policy's own; *ret_path the PATH it searches. */
char **sb_build_envp(const struct aj_policy *pol, char *const extra[2], const char **ret_path, struct aj_error *err);
void sb_free_envp(char **envp);
/* The policy the sandbox enforces from now on (both sides read it). */
void sb_use_policy(struct aj_sandbox *sb, const struct aj_policy *pol);
/* Validate and hash pol, take req against it (NULL: a parked sandbox's
 * empty request). */
int sb_begin(struct aj_sandbox *sb, const struct aj_policy *pol, const struct aj_request *req, struct aj_result *res,
             struct aj_error *err);
/* argv copied, for the sandbox and the start event. */
int sb_keep_argv(struct aj_sandbox *sb, struct aj_error *err);
int sb_open_audit(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err);
/* Everything up to GO. parked: for the pool (its command comes at launch). */
int sb_prepare(struct aj_sandbox *sb, bool parked, struct aj_result *res, struct aj_error *err);
/* A parked sandbox gets its command (sb->req). */
int sb_launch(struct aj_sandbox *sb, struct aj_result *res, struct aj_error *err);
/* Supervision starts (the loop armed); the handle is the caller's. */
void sb_go(struct aj_sandbox *sb);
/* The end: kill what is left, the end events (res NULL: none); then
 * release everything but the handle's own fds (keep_cg: hand the emptied
 * cgroups back for later removal). */
void sb_end(struct aj_sandbox *sb, int r, struct aj_result *res, struct aj_error *err);
void sb_release(struct aj_sandbox *sb, struct aj_cgroup *keep_cg);
/* A sandbox that never became a running handle: all of the above, freed. */
void sb_discard(struct aj_sandbox *sb, int r, struct aj_result *res, struct aj_error *err, struct aj_cgroup *keep_cg);
/* A cold run up to GO: a running handle, or one that ended at once (could
 * not be set up); negative only without a handle. pipes_ok:
 * AJ_STDIO_PIPE allowed. */
int sb_start_cold(const struct aj_policy *pol, const struct aj_request *req, bool pipes_ok, struct aj_sandbox **ret,
                  struct aj_error *err);
/* Make sb an ended handle whose setup failed with r, err. */
void sb_fail_at_start(struct aj_sandbox *sb, int r, const struct aj_error *err);
/* Release what the run held, and give a pooled run's back to its pool. */
void sb_release_run(struct aj_sandbox *sb);
/* An early-ended handle (sb->teardown): wait for the killed init, then
 * sb_release_run. A no-op otherwise. */
void sb_teardown(struct aj_sandbox *sb);
/* aj_pool_run's handle, ended: freed now, or (a warm run ended early,
 * init still dying) by its pool's filler thread, off the caller's path. */
void aj_pool_free_handle(struct aj_sandbox *sb);
/* A pooled run ended: its cgroups to remove, the filler to wake, the
 * pool's reference dropped (pool.c); finished: aj_pool_run_finished
 * counted it out of the runs in flight already. */
void aj_pool_run_ended(struct aj_pool *pool, struct aj_cgroup *spent, bool finished);
/* A pooled run's result is out (its sandbox still dying): no longer a
 * run in flight for the filler, which may prepare again. */
void aj_pool_run_finished(struct aj_pool *pool);
/* pool.c, for interp.c: a parked sandbox (NULL: none ready; counted warm
 * or cold), its decoys' leases taken before its payload exists, a cold
 * run counted, and a warm run that could not start counted as cold (its
 * reference dropped). */
struct aj_sandbox *aj_pool_take(struct aj_pool *pool);
/* As aj_pool_take; a template pool that is empty is waited for a little
 * (its refill costs far less than a cold interpreter). */
struct aj_sandbox *aj_pool_take_wait(struct aj_pool *pool);
const struct aj_policy *aj_pool_policy(const struct aj_pool *pool);
int aj_pool_arm_decoys(struct aj_sandbox *sb, struct aj_error *err);
int aj_sb_drain_until(struct aj_sandbox *sb, bool (*done)(const struct supervise_state *st), const char *timeout_msg,
                      const char *gone_msg, struct aj_error *err);
void aj_pool_count_cold(struct aj_pool *pool);
void aj_pool_warm_failed(struct aj_pool *pool, struct aj_cgroup *spent);

/* ---- warm interpreters (interp.c) ---- */
/* pol names an interpreter and req's argv is its form (python3 -c CODE
 * ARGS, python3 SCRIPT ARGS). */
bool aj_interp_wants(const struct aj_policy *pol, const struct aj_request *req);
/* For a pool: sb (sb_begin'd) becomes an interpreter's sandbox: the
 * bootstrap as its command, the policy's environment without env_pass. */
int aj_interp_setup_parked(struct aj_sandbox *sb, struct aj_error *err);
/* The bootstrap's argv (NULL: out of memory); template: the template's. */
char **aj_interp_boot_argv(const struct aj_policy *pol, bool template);
/* A sandbox prepared as a parked interpreter's, with init in adopt mode,
 * up to its namespaces (AJ_MSG_ADOPT): for a template's child, or for the
 * template itself (tmpl.c). -EOPNOTSUPP: no cgroup of its own. */
int aj_interp_prepare_adopted(const struct aj_policy *pol, struct aj_zygote *zyg, struct aj_sandbox **ret,
                              struct aj_error *err);
/* After sb_prepare (and the decoys armed): handle the sandbox until the
 * bootstrap has imported the preload and waits (bounded; ECANCELED as
 * soon as *cancel, read atomically, is true: the pool is being freed). */
int aj_interp_wait_parked(struct aj_sandbox *sb, const bool *cancel, struct aj_error *err);
/* sb_launch's end for an interpreter: the request and fds down its channel. */
int aj_interp_send(struct aj_sandbox *sb, const int fds[3], struct aj_error *err);
/* A cold interpreter run (sb_start_cold's): as sb_start_cold; 1: not one
 * after all, run it plain. */
int aj_interp_start_cold(const struct aj_policy *pol, const struct aj_request *req, bool pipes_ok,
                         struct aj_sandbox **ret, struct aj_error *err);
/* pool_start's for a pool of interpreters: takes rq (cleared). */
int aj_interp_pool_start(struct aj_pool *pool, struct aj_req *rq, const struct aj_request *req, bool pipes_ok,
                         struct aj_sandbox **ret, struct aj_error *err);

/* SIGPIPE, SIGTTOU, SIGTTIN blocked in this thread while the library
 * works in it (see sandbox.c). */
struct sig_guard {
    sigset_t old;
    bool pipe_pending;
};
void sb_guard_enter(struct sig_guard *g);
void sb_guard_leave(struct sig_guard *g);

void result_reset(struct aj_result *res);
/* A run that failed before it started: setup_error, err's message. */
void result_refused(struct aj_result *res, const struct aj_error *err);
