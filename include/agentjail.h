/* SPDX-License-Identifier: Apache-2.0 */
/* libagentjail: the public interface. The CLI, the server and the tests
 * are all clients of these functions. */
#pragma once

#include "aj_error.h"
#include "aj_policy.h"
#include "aj_result.h"

/* Run argv[0] (searched in the sandbox's PATH) inside a fresh sandbox built
 * from pol, wait for it, fill res. Returns 0 when the sandbox ran (whatever
 * the payload did: see res->status), or a negative errno with err filled
 * when the sandbox could not be set up (nothing is left behind either way).
 * stdin/stdout/stderr of the caller are the payload's 0/1/2. */
AJ_EXPORT int aj_run(const struct aj_policy *pol, char *const argv[], struct aj_result *res,
                     struct aj_error *err);

struct aj_run_options {
    const char *events_path; /* audit events as JSON Lines: a file, "-" for stderr, or NULL */
    int stdout_fd;           /* > 0: the payload's stdout (else the caller's fd 1) */
    int stderr_fd;           /* > 0: the payload's stderr (else the caller's fd 2) */
};

AJ_EXPORT int aj_run_ex(const struct aj_policy *pol, char *const argv[], const struct aj_run_options *opts,
                        struct aj_result *res, struct aj_error *err);

/* A warm pool: sandboxes prepared ahead of time from one policy (namespaces,
 * root filesystem, cgroups, id maps, Landlock, seccomp, the payload process
 * forked and waiting), so a run costs little more than an exec. Each
 * pooled sandbox runs exactly one command and is then torn down; nothing
 * of one run (files, processes, environment, ids) reaches another. The
 * pool refills itself from a thread of its own (which blocks every signal),
 * so preparing the next sandbox overlaps the current run. aj_pool_run is
 * not thread-safe: one caller thread per pool; the policy must outlive
 * the pool. Degraded (no-namespace)
 * policies cannot be pooled. */
struct aj_pool;

struct aj_pool_stats {
    uint64_t prepared;        /* sandboxes prepared, in total */
    uint64_t warm_runs;       /* runs that took a parked sandbox */
    uint64_t cold_runs;       /* runs that found the pool empty and ran cold */
    uint64_t discarded;       /* parked sandboxes found dead and dropped */
    uint64_t refill_failures; /* refills that failed (the pool runs short) */
    unsigned ready;           /* parked now */
};

/* Prepare size (1..64) sandboxes. Fails, with nothing left behind, when
 * even one cannot be prepared. */
AJ_EXPORT int aj_pool_new(const struct aj_policy *pol, unsigned size, struct aj_pool **ret,
                          struct aj_error *err);
/* As aj_run_ex, in a parked sandbox (or a cold one when none is ready).
 * stdin is the caller's fd 0 at the time of the call. */
AJ_EXPORT int aj_pool_run(struct aj_pool *pool, char *const argv[], const struct aj_run_options *opts,
                          struct aj_result *res, struct aj_error *err);
AJ_EXPORT void aj_pool_get_stats(struct aj_pool *pool, struct aj_pool_stats *out);
/* Tear down every parked sandbox and remove what is left of finished runs. */
AJ_EXPORT void aj_pool_free(struct aj_pool *pool);
