/* SPDX-License-Identifier: Apache-2.0 */
/* Running the probe inside a policy's sandbox: the basis of `verify` (is
 * the enforced sandbox the declared one?) and of `report`. */
#pragma once

#include "aj_error.h"
#include "aj_policy.h"
#include "aj_result.h"

/* Where agentjail-probe is: $AGENTJAIL_PROBE, else next to the running
 * binary. Returns 0 and fills buf, or -errno. */
AJ_EXPORT int aj_probe_locate(char *buf, size_t size, struct aj_error *err);

/* Run `agentjail-probe --json` inside a sandbox built from pol (plus a
 * read-only bind of the probe) and return its stdout (caller frees) and
 * the run's result. */
AJ_EXPORT int aj_probe_in_policy(const struct aj_policy *pol, char **ret_json, struct aj_result *ret_res,
                                 struct aj_error *err);

#include <jansson.h>

/* Compare what the policy declares with what the probe observed inside
 * the sandbox it describes, protection by protection. *ret_report:
 * {"policy_sha256", "matches", "checks": [{"protection", "declared",
 * "observed", "ok"}], "result": {...}}. Returns 0 (whatever the outcome:
 * see "matches"), or -errno when the probe could not run. */
AJ_EXPORT int aj_verify(const struct aj_policy *pol, json_t **ret_report, struct aj_error *err);
