/* SPDX-License-Identifier: Apache-2.0 */
/* libagentjail: the public interface. The CLI, the server and the tests
 * are all clients of these functions. */
#pragma once

#include "aj_error.h"
#include "aj_policy.h"
#include "aj_result.h"
#include "aj_verify.h"

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
