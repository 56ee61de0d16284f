/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "aj_error.h"

/* Sandbox side: lock securebits, empty the bounding and ambient sets, then
 * the effective, permitted and inheritable sets. Irreversible. Returns 0,
 * or 1 when the bounding set could not be emptied for lack of CAP_SETPCAP
 * (an unprivileged process without a user namespace; every other set is
 * empty then). */
int aj_caps_child_drop_all(struct aj_error *err);
/* Sandbox side: set no_new_privs and confirm it took (fail closed). */
int aj_caps_child_no_new_privs(struct aj_error *err);
