/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel CVE table (data/kernel-cves.json, compiled in by
 * tools/embed-cves.py) and the version arithmetic to match it. Pure
 * functions, no I/O: usable by `agentjail check` as well. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct pr_kcve {
    const char *cve, *name, *summary, *severity;
    const char *introduced;   /* first affected mainline release; NULL: not known */
    const char *fixed;        /* first fixed mainline release; NULL for distro-only entries */
    const char *stable_fixes; /* "4.19.188 5.4.113 ...": first fixed release per stable branch */
    const char *requires;     /* "none", "user_namespaces", "unprivileged_bpf", "distro" */
    const char *mitigation;
    const char *distro; /* non-NULL: only this distribution's kernels */
    const char *distro_note;
};

extern const struct pr_kcve pr_kcves[];
extern const size_t pr_kcves_count;

/* An upstream kernel version: "6.18.44-fc-v669" -> 6.18.44, "5.8" -> 5.8.0. */
struct pr_kver {
    unsigned v[3];
};

/* Parse the leading "X.Y[.Z]" of a release string; false if there is none. */
bool pr_kver_parse(const char *s, struct pr_kver *ret);
int pr_kver_cmp(const struct pr_kver *a, const struct pr_kver *b);

enum pr_kmatch {
    PR_KCVE_NOT_AFFECTED,
    PR_KCVE_AFFECTED,        /* the branch's fix is later than this version */
    PR_KCVE_AFFECTED_NO_FIX, /* in range, and no fixed release is recorded for this branch */
    PR_KCVE_DISTRO_UNKNOWN,  /* a distro-only entry and this is that distro's kernel */
};

/* Match one entry against a kernel release (uname -r) and build string
 * (uname -v, for distro entries). */
enum pr_kmatch pr_kcve_match(const struct pr_kcve *e, const char *release, const char *build);
