/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel release against the shipped CVE table. By version only:
 * distribution kernels backport fixes without changing it, so a match
 * says "check your vendor", and the detail says what would stop the known
 * exploits here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kcve.h"
#include "probe.h"

static enum pr_sev sev_of(const char *s)
{
    static const char *const names[] = {"critical", "high", "medium", "low", "info"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i]) == 0)
            return (enum pr_sev)i;
    return PR_SEV_HIGH;
}

/* What this environment does about the exploit's precondition. */
static void here_note(struct pr_ctx *c, const struct pr_kcve *e, char *buf, size_t cap)
{
    long knob;

    buf[0] = '\0';
    if (strcmp(e->requires, "user_namespaces") == 0) {
        int err = pr_userns_err(c);
        snprintf(buf, cap,
                 err ? " Here: creating a user namespace is refused (%s), which stops the known "
                       "exploit path."
                     : " Here: user namespaces can be created, so the known exploit path is open.",
                 pr_errname(err));
    } else if (strcmp(e->requires, "unprivileged_bpf") == 0) {
        bool off = pr_read_long("/proc/sys/kernel/unprivileged_bpf_disabled", &knob) == 0 &&
                   knob != 0 && !pr_bpf_capable(c);
        snprintf(buf, cap,
                 off ? " Here: unprivileged BPF is disabled."
                     : " Here: BPF programs can be loaded.");
    }
}

static void report_cve(struct pr_ctx *c, const struct pr_kcve *e, enum pr_kmatch m)
{
    char id[PR_ID_MAX], range[160], here[160], branch[32];
    struct pr_kver k;

    snprintf(id, sizeof(id), "kernel.cve.%s", e->cve);
    if (!pr_wanted(c, id))
        return;
    if (m == PR_KCVE_DISTRO_UNKNOWN) {
        pr_add(c, id, PR_CAT_KERNEL, PR_UNKNOWN, sev_of(e->severity), e->name,
               "%s: %s. %s kernel: %s. Mitigation: %s", e->cve, e->summary, e->distro,
               e->distro_note, e->mitigation);
        return;
    }
    (void)pr_kver_parse(c->kernel, &k);
    snprintf(branch, sizeof(branch), "%u.%u", k.v[0], k.v[1]);
    if (m == PR_KCVE_AFFECTED_NO_FIX)
        snprintf(range, sizeof(range), "affected %s to %s, no fixed %s.x release recorded",
                 e->introduced ? e->introduced : "(all earlier)", e->fixed, branch);
    else
        snprintf(range, sizeof(range), "affected %s to %s; fixed in %s.x by a later release",
                 e->introduced ? e->introduced : "(all earlier)", e->fixed, branch);
    here_note(c, e, here, sizeof(here));
    pr_add(c, id, PR_CAT_KERNEL, PR_EXPOSED, sev_of(e->severity), e->name,
           "%s (%s): %s. Kernel %s is in range (%s; distribution kernels may carry the fix: "
           "check the vendor). Mitigation: %s%s",
           e->cve, e->name, e->summary, c->kernel, range, e->mitigation, here);
}

void pr_check_kernel(struct pr_ctx *c)
{
    struct pr_kver k;
    unsigned matched = 0;

    pr_add(c, "kernel.version", PR_CAT_KERNEL, PR_INFO, PR_SEV_INFO, "kernel release", "%s%s%s%s",
           c->kernel, c->kernel_build[0] ? " (" : "", c->kernel_build,
           c->kernel_overridden ? ") (from AGENTJAIL_PROBE_KERNEL, a test override)"
           : c->kernel_build[0] ? ")"
                                : "");
    if (!pr_kver_parse(c->kernel, &k)) {
        pr_add(c, "kernel.cves", PR_CAT_KERNEL, PR_UNKNOWN, PR_SEV_HIGH, "known kernel CVEs",
               "cannot read a version from '%s'", c->kernel);
        return;
    }
    for (size_t i = 0; i < pr_kcves_count; i++) {
        enum pr_kmatch m = pr_kcve_match(&pr_kcves[i], c->kernel, c->kernel_build);
        if (m == PR_KCVE_NOT_AFFECTED)
            continue;
        matched++;
        report_cve(c, &pr_kcves[i], m);
    }
    if (!matched)
        pr_add(c, "kernel.cves", PR_CAT_KERNEL, PR_INFO, PR_SEV_INFO, "known kernel CVEs",
               "%u.%u.%u matches none of the %zu local privilege-escalation CVEs in the table",
               k.v[0], k.v[1], k.v[2], pr_kcves_count);
}
