/* SPDX-License-Identifier: Apache-2.0 */
/* The risk report (`agentjail report`): the six DAMAGE dimensions scored
 * for the inherent risk of running agent-written code (no sandbox) and the
 * residual risk with one policy on one host, from measured inputs only:
 * the probe's findings inside that policy's sandbox, the host posture
 * (aj_posture_check) and the detection features the policy turns on.
 * Plus the mapping of agentjail's controls to the frameworks institutions
 * are assessed against. The method is docs/risk-model.md.
 *
 * The report is built once as JSON; the Markdown and HTML forms are
 * rendered from that JSON, so the three never disagree. For fixed inputs
 * every form is byte-for-byte the same: the only time in a report is
 * generated_at, and it is set only when the caller asks for it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "aj_error.h"
#include "aj_policy.h"

enum aj_report_format {
    AJ_REPORT_MD = 0,
    AJ_REPORT_JSON,
    AJ_REPORT_HTML,
};

struct aj_report_input {
    const struct aj_policy *policy; /* required */
    const char *policy_label;       /* "profile:default", "file:strict.json", ... */
    const json_t *probe;            /* `agentjail-probe --json` inside the policy, or NULL */
    const char *probe_source;       /* how it was obtained, for the reader */
    const json_t *check;            /* aj_posture_check() output, or NULL */
    const char *check_source;
    bool events_kept;               /* runs keep their audit events (run --events FILE) */
    const char *generated_at;       /* NULL: no time in the report */
};

/* "md", "json", "html". Returns 0, or -EINVAL. */
AJ_EXPORT int aj_report_parse_format(const char *s, enum aj_report_format *ret);

/* Score and assemble. Returns 0 and a new reference in *ret, or -errno. */
AJ_EXPORT int aj_report_build(const struct aj_report_input *in, json_t **ret, struct aj_error *err);

/* Render a report built above as md, json or html (one self-contained
 * file: inline CSS and SVG, no script, nothing fetched). *ret is a
 * NUL-terminated string the caller frees. */
AJ_EXPORT int aj_report_render(const json_t *report, enum aj_report_format fmt, char **ret,
                               struct aj_error *err);
