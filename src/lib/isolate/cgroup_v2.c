/* SPDX-License-Identifier: Apache-2.0 */
/* The cgroup v2 backend: delegation and the leaf that keeps the caller's
 * cgroup free of processes, enabling controllers, the run's group, and
 * v2's limit and statistics files. See aj_cgroup_backend.h. */
#include "aj_cgroup_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Write "+ctrl" for each controller in mask to dir's subtree_control;
 * returns the mask that is enabled afterwards and the first errno. */
static uint32_t enable_ctrls(const char *dir, uint32_t mask, int *ret_errno)
{
    char buf[512];
    uint32_t on = 0;

    *ret_errno = 0;
    if (aj_cg_read_at(dir, "cgroup.subtree_control", buf, sizeof(buf)) >= 0)
        for (int c = 0; c < AJ_CG_NCTRL; c++)
            if (aj_cg_has_word(buf, aj_cg_ctrl_names[c], ' '))
                on |= 1u << c;
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        char w[32];
        int r;
        if (!(mask & (1u << c)) || (on & (1u << c)))
            continue;
        snprintf(w, sizeof(w), "+%s", aj_cg_ctrl_names[c]);
        r = aj_cg_write_at(dir, "cgroup.subtree_control", w);
        if (r == 0)
            on |= 1u << c;
        else if (!*ret_errno)
            *ret_errno = -r;
    }
    return on & mask;
}

/* Whoever set the cgroup up handed its subtree to us: a cgroup owned by
 * the (non-root) caller, one systemd marked with Delegate=yes (the
 * trusted.delegate / user.delegate xattr), or the root of our cgroup
 * namespace (a container's own cgroup). Only then are processes other
 * than our own moved into the leaf. */
static bool v2_delegated(const struct aj_cgroup_host *host, const char *dir)
{
    char v[8];
    struct stat st;
    ssize_t n;

    if (geteuid() != 0)
        return stat(dir, &st) == 0 && st.st_uid == geteuid() && access(dir, W_OK) == 0;
    n = getxattr(dir, "trusted.delegate", v, sizeof(v));
    if (n <= 0)
        n = getxattr(dir, "user.delegate", v, sizeof(v));
    if (n > 0 && v[0] == '1')
        return true;
    return strcmp(host->v2_self, "/") == 0 && !host->v2_real_root;
}

/* Move every process of from/ into to/ (only our own, or all of them). */
static int move_procs(const char *from, const char *to, bool all)
{
    char path[AJ_CG_PATH * 2 + 16], line[32], me[32];
    FILE *f;
    int r = 0;

    snprintf(me, sizeof(me), "%d", (int)getpid());
    r = aj_cg_write_at(to, "cgroup.procs", me);
    if (r < 0 || !all)
        return r;
    snprintf(path, sizeof(path), "%s/cgroup.procs", from);
    /* A few rounds: a process may fork while we move its parent. */
    for (int round = 0; round < 4; round++) {
        int moved = 0;
        f = fopen(path, "re");
        if (!f)
            return -errno;
        while (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = '\0';
            if (line[0] && aj_cg_write_at(to, "cgroup.procs", line) == 0)
                moved++;
        }
        (void)fclose(f);
        if (!moved)
            break;
    }
    return 0;
}

static bool has_procs(const char *dir)
{
    char buf[16];
    return aj_cg_read_at(dir, "cgroup.procs", buf, sizeof(buf)) != 0;
}

/* Make the controllers in want usable below the caller's cgroup S (the
 * runs go to S/agentjail/<run>). v2 refuses to enable a domain controller
 * (memory) in a cgroup that holds processes, and it does enable a
 * threaded one (pids, cpu) there, which turns S into a thread root below
 * which no new group can hold a process (EOPNOTSUPP when the run moves
 * in: what broke delegated users). So nothing is enabled in S while it
 * holds a process: as systemd's delegation rules expect, the processes of
 * S go into the leaf S/agentjail-leaf first (only this process, unless S
 * was delegated to us: then every process in it). The real root is
 * exempt from the rule. Never anything above S.
 * Returns the controllers enabled in S's subtree_control; *ret_usable is
 * false when no group below S can hold a process at all (S is a thread
 * root with processes, set up so by someone else). */
static uint32_t v2_prepare_self(const struct aj_cgroup_host *host, const char *self_dir, uint32_t want,
                                struct aj_cgroup *cg, bool *ret_usable)
{
    char leaf[AJ_CG_PATH * 2 + 32], buf[512];
    uint32_t on = 0, any = 0;
    int e = 0;
    bool all;

    *ret_usable = true;
    if (host->v2_real_root) {
        on = enable_ctrls(self_dir, want, &e);
        goto out;
    }
    if (aj_cg_read_at(self_dir, "cgroup.subtree_control", buf, sizeof(buf)) >= 0)
        for (int c = 0; c < AJ_CG_NCTRL; c++)
            if (aj_cg_has_word(buf, aj_cg_ctrl_names[c], ' '))
                any |= 1u << c;
    on = any & want;
    if (on == want)
        goto out;
    if (has_procs(self_dir)) {
        snprintf(leaf, sizeof(leaf), "%s/%s", self_dir, AJ_CG_LEAF);
        all = v2_delegated(host, self_dir);
        if (any) {
            /* Processes beside enabled controllers: only a thread root. */
            *ret_usable = false;
            e = EOPNOTSUPP;
            goto out;
        }
        if (mkdir(leaf, 0755) < 0 && errno != EEXIST) {
            e = errno;
            goto out;
        }
        e = -move_procs(self_dir, leaf, all);
        if (e || has_procs(self_dir)) {
            /* Others still live in S: go back (S has no controllers
             * enabled, so that is allowed) and leave no leaf behind. */
            char me[32];
            snprintf(me, sizeof(me), "%d", (int)getpid());
            (void)aj_cg_write_at(self_dir, "cgroup.procs", me);
            (void)rmdir(leaf);
            if (!e)
                e = EBUSY;
            goto out;
        }
    }
    on = enable_ctrls(self_dir, want, &e);
out:
    for (int c = 0; c < AJ_CG_NCTRL; c++)
        if ((want & (1u << c)) && !(on & (1u << c))) {
            cg->v2_why[c] = e == EBUSY ? AJ_CG_WHY_BUSY
                            : (e == EACCES || e == EPERM || e == EROFS) ? AJ_CG_WHY_NO_ACCESS
                                                                       : AJ_CG_WHY_ERROR;
            cg->v2_errno[c] = e ? e : EIO;
        }
    return on;
}

/* Whether pid is the only process in dir. */
static bool only_procs_of_self(const char *dir)
{
    char path[AJ_CG_PATH * 2 + 16], line[32];
    FILE *f;
    bool only = true;

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    f = fopen(path, "re");
    if (!f)
        return false;
    while (only && fgets(line, sizeof(line), f)) {
        char *end;
        long pid = strtol(line, &end, 10);
        only = end != line && pid == (long)getpid();
    }
    (void)fclose(f);
    return only;
}

/* The v2 half of aj_cgroup_predict. */
uint32_t aj_cg_v2_predict(const struct aj_cgroup_host *host, char *why, size_t size)
{
    char self_dir[AJ_CG_PATH * 2], buf[512];
    uint32_t ctrls = 0, any = 0;

    if (!host->v2_mount[0] || !(host->v2_avail & ((1u << AJ_CG_MEMORY) | (1u << AJ_CG_PIDS) | (1u << AJ_CG_CPU)))) {
        if (host->v2_mount[0] && host->v2_kernel && !why[0])
            snprintf(why, size, "the parent of this process's cgroup %s delegates no controller to it",
                     host->v2_self);
        return 0;
    }
    snprintf(self_dir, sizeof(self_dir), "%s%s", host->v2_mount,
             strcmp(host->v2_self, "/") == 0 ? "" : host->v2_self);
    if (aj_cg_read_at(self_dir, "cgroup.subtree_control", buf, sizeof(buf)) >= 0)
        for (int c = 0; c < AJ_CG_NCTRL; c++)
            if (aj_cg_has_word(buf, aj_cg_ctrl_names[c], ' '))
                any |= 1u << c;
    if (!host->v2_real_root && access(self_dir, W_OK) < 0)
        snprintf(why, size, "this process's cgroup %s is not writable by uid %u (not delegated)",
                 host->v2_self, (unsigned)geteuid());
    else if (!host->v2_real_root && any && has_procs(self_dir))
        snprintf(why, size, "this process's cgroup %s holds processes and has controllers enabled "
                 "below it (a thread root): no run can be placed under it", host->v2_self);
    else if (!host->v2_real_root && !any && has_procs(self_dir) && !v2_delegated(host, self_dir) &&
             !only_procs_of_self(self_dir))
        snprintf(why, size, "this process's cgroup %s is not delegated and holds other processes: "
                 "runs get a cgroup without controllers (no internal processes)", host->v2_self);
    else
        for (int c = 0; c < AJ_CG_NCTRL; c++)
            if (c != AJ_CG_CPUACCT && (host->v2_avail & (1u << c)))
                ctrls |= 1u << c;
    return ctrls;
}

int aj_cg_v2_create(const struct aj_cgroup_host *host, const char *run_name, uint32_t want, struct aj_cgroup *cg,
                    struct aj_error *err)
{
    char base[AJ_CG_PATH * 2], self_dir[AJ_CG_PATH * 2], buf[512];
    uint32_t on_self = 0, on_base = 0;
    bool usable = true;
    int r;

    if (!host->v2_mount[0])
        return 0;
    snprintf(self_dir, sizeof(self_dir), "%s%s", host->v2_mount,
             strcmp(host->v2_self, "/") == 0 ? "" : host->v2_self);
    if (want)
        on_self = v2_prepare_self(host, self_dir, want, cg, &usable);
    aj_cg_join(base, sizeof(base), host->v2_mount, host->v2_self, NULL);
    r = usable ? aj_cg_make_run_dir(base, run_name, cg->v2_dir, sizeof(cg->v2_dir), enable_ctrls, on_self, &on_base)
               : -EOPNOTSUPP;
    if (r < 0 && !usable) {
        cg->v2_dir[0] = '\0';
    } else if (r < 0) {
        cg->v2_dir[0] = '\0';
        for (int c = 0; c < AJ_CG_NCTRL; c++)
            if (want & (1u << c)) {
                cg->v2_why[c] = AJ_CG_WHY_NO_ACCESS;
                cg->v2_errno[c] = -r;
            }
    } else {
        cg->created = true;
        cg->v2_fd = open(cg->v2_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cg->v2_fd < 0)
            return aj_err(err, errno, "open %s", cg->v2_dir); /* the caller destroys the group */
    }
    /* What the run's group really has is what its parent enabled,
     * whoever did it: the truth for the result and the limits. */
    if (!cg->v2_dir[0] || aj_cg_read_at(cg->v2_dir, "cgroup.controllers", buf, sizeof(buf)) < 0)
        buf[0] = '\0';
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        if (cg->version[c] != 2)
            continue;
        if (!aj_cg_has_word(buf, aj_cg_ctrl_names[c], ' ')) {
            cg->version[c] = 0;
            if ((want & (1u << c)) && !cg->v2_why[c]) {
                cg->v2_why[c] = AJ_CG_WHY_ERROR;
                cg->v2_errno[c] = EIO;
            }
        }
    }
    return 0;
}

static int v2_set_memory(const char *dir, uint64_t bytes, bool req, struct aj_error *err)
{
    char buf[32];
    int r;

    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bytes);
    r = aj_cg_write_limit(dir, "memory.max", buf, req, "--memory", err);
    /* RAM + swap: no swap at all, so the total is memory.max. The file is
     * absent on kernels without swap accounting. */
    if (r == 0) {
        int rs = aj_cg_write_limit(dir, "memory.swap.max", "0", false, "--memory", err);
        if (rs < 0 && rs != -ENOENT)
            r = aj_err(err, -rs, "--memory: cannot set memory.swap.max in %s", dir);
    }
    /* One OOM kill ends the whole group, not a random member. */
    if (r == 0)
        (void)aj_cg_write_limit(dir, "memory.oom.group", "1", false, "--memory", err);
    return r;
}

static int v2_set_cpu(const char *dir, uint64_t quota, uint64_t period, bool req, struct aj_error *err)
{
    char buf[64];

    snprintf(buf, sizeof(buf), "%llu %llu", (unsigned long long)quota, (unsigned long long)period);
    return aj_cg_write_limit(dir, "cpu.max", buf, req, "--cpus", err);
}

static void v2_memory_stats(const char *dir, struct aj_cgroup_stats *st)
{
    uint64_t v;

    if (aj_cg_read_u64(dir, "memory.peak", &v)) {
        st->memory_peak = v;
        st->have_memory_peak = true;
    }
    if (aj_cg_read_key(dir, "memory.events", "oom_kill", &v))
        st->oom_kills = v;
}

const struct aj_cg_backend aj_cg_v2_backend = {
    .version = 2,
    .memory_max_file = "memory.max",
    .cpu_quota_file = "cpu.max",
    .set_memory = v2_set_memory,
    .set_cpu = v2_set_cpu,
    .memory_stats = v2_memory_stats,
};
