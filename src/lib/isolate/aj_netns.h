/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "aj_error.h"
#include "aj_policy_model.h"

/* Sandbox side, inside the new network namespace: with network=loopback
 * (or proxy) bring lo up; with none leave it down (no interface at all is usable). */
int aj_netns_child_setup(const struct aj_policy *pol, struct aj_error *err);
