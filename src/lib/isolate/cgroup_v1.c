/* SPDX-License-Identifier: Apache-2.0 */
/* The cgroup v1 backend: one group per hierarchy a run needs, joining them
 * (the child writes its own "tasks" through fds the supervisor opened),
 * and v1's limit and statistics files. See aj_cgroup_backend.h. */
#include "aj_cgroup_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The v1 half of aj_cgroup_predict. */
uint32_t aj_cg_v1_predict(const struct aj_cgroup_host *host, char *why, size_t size)
{
    uint32_t ctrls = 0;

    for (int c = 0; c < AJ_CG_NCTRL; c++)
        if (host->ctrl[c].version == 1 && c != AJ_CG_CPUACCT) {
            char dir[AJ_CG_PATH * 2];
            snprintf(dir, sizeof(dir), "%s%s", host->ctrl[c].mount,
                     strcmp(host->ctrl[c].self, "/") == 0 ? "" : host->ctrl[c].self);
            if (access(dir, W_OK) == 0)
                ctrls |= 1u << c;
            else
                snprintf(why, size, "cgroup v1 %s at %s is not writable by uid %u", aj_cg_ctrl_names[c], dir,
                         (unsigned)geteuid());
        }
    return ctrls;
}

void aj_cg_v1_create(const struct aj_cgroup_host *host, const char *run_name, uint32_t want, struct aj_cgroup *cg)
{
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        char base[AJ_CG_PATH * 2];
        int r;
        if (cg->version[c] != 1)
            continue;
        if (!(want & (1u << c))) {
            cg->version[c] = 0;
            continue;
        }
        /* A hierarchy holding several controllers (cpu,cpuacct) is one dir. */
        for (int o = 0; o < c; o++)
            if (cg->version[o] == 1 && strcmp(host->ctrl[o].mount, host->ctrl[c].mount) == 0) {
                memcpy(cg->v1_dir[c], cg->v1_dir[o], sizeof(cg->v1_dir[c]));
                break;
            }
        if (cg->v1_dir[c][0])
            continue;
        aj_cg_join(base, sizeof(base), host->ctrl[c].mount, host->ctrl[c].self, NULL);
        r = aj_cg_make_run_dir(base, run_name, cg->v1_dir[c], sizeof(cg->v1_dir[c]), NULL, 0, NULL);
        if (r < 0) {
            cg->v1_dir[c][0] = '\0';
            cg->version[c] = 0;
        } else {
            cg->created = true;
        }
    }
}

int aj_cg_v1_attach(const struct aj_cgroup *cg, const char *pid, struct aj_error *err)
{
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        if (!cg->v1_dir[c][0])
            continue;
        bool dup = false;
        for (int o = 0; o < c; o++)
            dup |= strcmp(cg->v1_dir[o], cg->v1_dir[c]) == 0;
        if (dup)
            continue;
        int r = aj_cg_write_at(cg->v1_dir[c], "cgroup.procs", pid);
        if (r < 0)
            return aj_err(err, -r, "move the sandbox into %s", cg->v1_dir[c]);
    }
    return 0;
}

int aj_cgroup_open_join_fds(const struct aj_cgroup *cg, int fds[AJ_CG_MAX_JOIN], size_t *ret_n,
                            struct aj_error *err)
{
    size_t n = 0;

    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        char path[AJ_CG_PATH * 2 + 16];
        bool dup = false;
        if (!cg->v1_dir[c][0])
            continue;
        for (int o = 0; o < c; o++)
            dup |= cg->v1_dir[o][0] && strcmp(cg->v1_dir[o], cg->v1_dir[c]) == 0;
        if (dup)
            continue;
        if (n >= AJ_CG_MAX_JOIN) {
            for (size_t i = 0; i < n; i++)
                (void)close(fds[i]);
            return aj_err(err, E2BIG, "too many cgroup v1 hierarchies");
        }
        snprintf(path, sizeof(path), "%s/tasks", cg->v1_dir[c]);
        fds[n] = open(path, O_WRONLY | O_CLOEXEC);
        if (fds[n] < 0) {
            int e = errno;
            for (size_t i = 0; i < n; i++)
                (void)close(fds[i]);
            return aj_err(err, e, "open %s", path);
        }
        n++;
    }
    *ret_n = n;
    return 0;
}

int aj_cgroup_child_join(const int *fds, size_t n, struct aj_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (write(fds[i], "0", 1) != 1)
            return aj_err(err, errno, "join the run's cgroup");
    return 0;
}

static int v1_set_memory(const char *dir, uint64_t bytes, bool req, struct aj_error *err)
{
    char buf[32];
    int r;

    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bytes);
    r = aj_cg_write_limit(dir, "memory.limit_in_bytes", buf, req, "--memory", err);
    /* memsw exists only with swap accounting; without it there is no swap
     * to account and limit_in_bytes is the whole budget. */
    if (r == 0)
        (void)aj_cg_write_limit(dir, "memory.memsw.limit_in_bytes", buf, false, "--memory", err);
    return r;
}

static int v1_set_cpu(const char *dir, uint64_t quota, uint64_t period, bool req, struct aj_error *err)
{
    char buf[32];
    int r;

    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)period);
    r = aj_cg_write_limit(dir, "cpu.cfs_period_us", buf, req, "--cpus", err);
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)quota);
    if (r == 0)
        r = aj_cg_write_limit(dir, "cpu.cfs_quota_us", buf, req, "--cpus", err);
    return r;
}

static void v1_memory_stats(const char *dir, struct aj_cgroup_stats *st)
{
    uint64_t v;

    if (aj_cg_read_u64(dir, "memory.max_usage_in_bytes", &v)) {
        st->memory_peak = v;
        st->have_memory_peak = true;
    }
    if (aj_cg_read_key(dir, "memory.oom_control", "oom_kill", &v))
        st->oom_kills = v;
}

const struct aj_cg_backend aj_cg_v1_backend = {
    .version = 1,
    .memory_max_file = "memory.limit_in_bytes",
    .cpu_quota_file = "cpu.cfs_quota_us",
    .set_memory = v1_set_memory,
    .set_cpu = v1_set_cpu,
    .memory_stats = v1_memory_stats,
};
