/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "aj_error.h"
#include "aj_policy_model.h"

/* Sandbox side: core dumps off (a dump can carry secrets out, and
 * core_pattern pipes run on the host), open files and file size capped. */
int aj_limits_child_apply_rlimits(const struct aj_policy *pol, struct aj_error *err);
