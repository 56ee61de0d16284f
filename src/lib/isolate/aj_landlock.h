/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "aj_error.h"
#include "aj_policy_model.h"

/* The Landlock ABI this kernel offers (0: none). Query only. */
AJ_EXPORT int aj_landlock_abi(void);

/* Sandbox side, after the mounts and before seccomp: restrict the calling
 * process (and its future children) to the policy's filesystem view, to
 * no TCP when the network is off, and scope abstract unix sockets and
 * signals to the sandbox. host_paths: in degraded mode the sandbox sees
 * the host tree, so the rules name host paths; else sandbox paths.
 * ret_layers gets AJ_LAYER_LANDLOCK_* bits for what was applied. */
int aj_landlock_child_apply(const struct aj_policy *pol, int abi, bool degraded,
                            uint64_t *ret_layers, struct aj_error *err);
/* The same, plus read and write (no create, remove or device ioctl) on
 * each of the n_rw files in rw_files: decoys the payload must be able to
 * open for writing too, so that the open reaches their lease. */
int aj_landlock_child_apply_ex(const struct aj_policy *pol, int abi, bool degraded, const char *const *rw_files,
                               size_t n_rw, uint64_t *ret_layers, struct aj_error *err);
