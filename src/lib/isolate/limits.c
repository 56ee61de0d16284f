/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_limits.h"

#include <errno.h>
#include <sys/resource.h>

static int set_both(int resource, rlim_t v, const char *name, struct aj_error *err)
{
    struct rlimit cur, rl = {.rlim_cur = v, .rlim_max = v};

    /* Never raise: if the caller already runs with a lower hard limit,
     * keep it (raising needs CAP_SYS_RESOURCE, and lower is safer). */
    if (getrlimit(resource, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && cur.rlim_max < v)
        rl.rlim_cur = rl.rlim_max = cur.rlim_max;
    if (setrlimit(resource, &rl) < 0)
        return aj_err(err, errno, "setrlimit %s", name);
    return 0;
}

int aj_limits_child_apply_rlimits(const struct aj_policy *pol, struct aj_error *err)
{
    int r = set_both(RLIMIT_CORE, 0, "core", err);
    if (r == 0)
        r = set_both(RLIMIT_NOFILE, (rlim_t)pol->rlimit_nofile, "nofile", err);
    if (r == 0)
        r = set_both(RLIMIT_FSIZE, (rlim_t)pol->rlimit_fsize, "fsize", err);
    /* CPU time: the supervisor enforces it for the whole tree from the
     * cgroup's usage; this per-process backstop (SIGKILL one second past
     * the budget) holds even if the supervisor were not scheduled. */
    if (r == 0 && pol->cpu_time_ms)
        r = set_both(RLIMIT_CPU, (rlim_t)(pol->cpu_time_ms / 1000 + 1), "cpu", err);
    return r;
}
