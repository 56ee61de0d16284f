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
#include "loop.h"
#include "request.h"

/* Degraded runs have no pid namespace: the supervisor is a subreaper and,
 * when the payload ends, kills what was reparented to it from the run. */
#define AJ_MAX_PRIOR_CHILDREN 64

struct prior_children {
    pid_t pids[AJ_MAX_PRIOR_CHILDREN];
    size_t n;
};

/* Everything the supervisor holds for one sandbox. aj_run_ex keeps one on
 * its stack and goes straight through; the pool prepares several ahead of
 * time (parked: every layer applied, the payload process waiting for its
 * command) and launches one per run. st points into this struct: it never
 * moves once prepared. */
struct sandbox {
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
    int caller_pipe[3];   /* the caller's ends of AJ_STDIO_PIPE streams, until taken */
    pid_t netns_helper;   /* see spawn_netns_helper; reaped at cleanup */
    int netns_userns_fd;  /* init's user namespace, opened before it changes ids */
    struct aj_result prepared; /* parked: what preparing found out (ids, layers, versions) */
    bool audit_open, mask_set, in_cgroup;
    bool sigpipe_was_pending; /* the caller's own SIGPIPE, pending before the run: not ours to consume */
    sigset_t orig_mask;   /* the caller's mask, restored at cleanup; parked: the pool creator's */
    struct prior_children prior; /* degraded: our children before the run */
    bool subreaper_set;   /* we made this process a subreaper: undo at the end */
    uint64_t start;
};

void sb_init(struct sandbox *sb, const struct aj_policy *pol);
/* The policy the sandbox enforces from now on (both sides read it). */
void sb_use_policy(struct sandbox *sb, const struct aj_policy *pol);
/* Validate and hash pol, take req against it (NULL: a parked sandbox's
 * empty request). */
int sb_begin(struct sandbox *sb, const struct aj_policy *pol, const struct aj_request *req, struct aj_result *res,
             struct aj_error *err);
int sb_open_audit(struct sandbox *sb, struct aj_result *res, struct aj_error *err);
/* Everything up to GO. parked: for the pool (its command comes at
 * launch); base_mask is then the signal mask its payload would otherwise
 * inherit. */
int sb_prepare(struct sandbox *sb, bool parked, const sigset_t *base_mask, struct aj_result *res,
               struct aj_error *err);
/* A parked sandbox gets its command (sb->req). */
int sb_launch(struct sandbox *sb, struct aj_result *res, struct aj_error *err);
/* From GO (or the launch) to the result. */
int sb_supervise(struct sandbox *sb, struct aj_result *res, struct aj_error *err);
/* Kill what is left, report the end, release everything; keep_cg: hand
 * the emptied cgroups back for later removal. */
void sb_cleanup(struct sandbox *sb, int r, struct aj_result *res, struct aj_error *err,
                struct aj_cgroup *keep_cg);
void result_reset(struct aj_result *res);
/* A run that failed before it started: setup_error, err's message. */
void result_refused(struct aj_result *res, const struct aj_error *err);
