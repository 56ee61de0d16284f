/* SPDX-License-Identifier: Apache-2.0 */
/* Writable bind sources of a policy and the registry of every directory
 * ever bound writable (docs/security-model.md §10). */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "aj_error.h"
#include "aj_hostpath.h"
#include "aj_policy_model.h"

/* The run's writable bind sources, resolved (no symlink followed). A
 * source that cannot be resolved is left out here: the mount layer reports
 * it. Caller frees *ret. */
int aj_hostpath_writable_binds(const struct aj_policy *pol, struct aj_devino **ret, size_t *ret_n);

/* Refuse (exit status 2) a file the supervisor writes as the caller
 * (--result, --events) that lies inside one of the run's writable bind
 * sources: the payload could rewrite or replace it. dirfd is the file's
 * directory, opened with aj_hostpath_open_parent. */
int aj_hostpath_check_outside_writable(const struct aj_policy *pol, int dirfd, const char *path,
                                       const char *what, struct aj_error *err);

/* ---- the registry of writable bind sources ---------------------------------- */

/* A small file, kept by the supervisor in its state directory
 * (/run/agentjail as root; $XDG_RUNTIME_DIR/agentjail or
 * ~/.local/state/agentjail rootless), of every directory ever bound
 * writable into a sandbox: a later run does not bind from inside one of
 * them (a run could have planted what is there) unless the policy says
 * filesystem.allow_bind_inside_writable. */
struct aj_bindreg {
    struct aj_devino *id;
    char **path;
    size_t n;
};

/* Load the registry and add the run's writable bind sources to it (under
 * an exclusive lock, so concurrent runs do not lose each other's lines).
 * The result holds the old entries and the new ones. */
int aj_bindreg_update(const struct aj_policy *pol, struct aj_bindreg *ret, struct aj_error *err);
void aj_bindreg_clear(struct aj_bindreg *reg);
