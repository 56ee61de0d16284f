/* SPDX-License-Identifier: Apache-2.0 */
/* A caller's struct aj_request, taken: read within its declared size,
 * checked, and turned into the run's effective policy (a shallow copy of
 * the caller's with the request's tighter limits, working directory and
 * environment). Nothing here starts anything. */
#pragma once

#include <stdbool.h>

#include "agentjail.h"
#include "aj_policy_model.h"

struct aj_req {
    char *const *argv;
    struct aj_stdio stdio[3];
    const char *events_path;
    /* The policy the run enforces. Shallow: its arrays and strings are the
     * caller's policy's (which must outlive the run), except env and
     * workdir when the request sets them (owned below). */
    struct aj_policy eff;
    char **env;           /* eff.env when the request adds variables: pol's, then copies of the request's */
    size_t n_req_env;     /* the copies: env[n_env - n_req_env ..] */
    char *workdir;        /* eff.workdir when the request sets one (a copy) */
    bool changes_policy;  /* anything of the above differs from the caller's policy */
    bool fixed_in_parked; /* workdir, memory or cpu time: what a parked sandbox has applied already */
};

/* Read in (NULL: an empty request, which fails for want of argv) against
 * pol. -errno with err filled: a malformed request, or one that asks for
 * more than the policy allows (EPERM). out is cleared on failure. */
int aj_req_take(const struct aj_policy *pol, const struct aj_request *in, struct aj_req *out, struct aj_error *err);
/* A request made of argv alone (the pool's parked sandboxes, aj_run). */
void aj_req_plain(const struct aj_policy *pol, char *const *argv, struct aj_req *out);
void aj_req_clear(struct aj_req *r);
