/* SPDX-License-Identifier: Apache-2.0 */
/* cgroup v2 and v1, per controller: the front of the layer (detection, a
 * run's groups and limits, statistics, kill, cleanup); what differs between
 * the versions is in cgroup_v2.c and cgroup_v1.c. See aj_cgroup.h.
 *
 * Layout: <hierarchy>/<the supervisor's own cgroup>/agentjail/<run>, where
 * <run> is "<supervisor pid>.<its start time>.<sandbox id>.ns<its pid namespace>"
 * so that a later
 * supervisor can tell a run whose owner died (and clean it up) from one
 * that is still live. Nesting under our own cgroup keeps agentjail inside
 * whatever limits its own caller set (a container, a systemd slice). */
#include "aj_cgroup_backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_result.h"
#include "aj_util.h"

const char *const aj_cg_ctrl_names[AJ_CG_NCTRL] = {"memory", "pids", "cpu", "cpuacct"};

const char *aj_cgroup_ctrl_name(enum aj_cg_ctrl c)
{
    return (unsigned)c < AJ_CG_NCTRL ? aj_cg_ctrl_names[c] : "?";
}

void aj_cgroup_init(struct aj_cgroup *cg)
{
    memset(cg, 0, sizeof(*cg));
    cg->v2_fd = -1;
}

/* ---- detection ------------------------------------------------------------- */

bool aj_cg_has_word(const char *list, const char *word, char sep)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, sep);
        size_t len = e ? (size_t)(e - p) : strcspn(p, "\n");
        if (len == n && strncmp(p, word, n) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

int aj_cgroup_detect(struct aj_cgroup_host *host, struct aj_error *err)
{
    FILE *f;
    char *line = NULL;
    size_t cap = 0;

    memset(host, 0, sizeof(*host));
    /* Mount points: field 5 is the mount point, after " - " come the fs
     * type, the source and the super options (v1: the controller list). */
    f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return aj_err(err, errno, "read /proc/self/mountinfo");
    while (getline(&line, &cap, f) > 0) {
        char mnt[AJ_CG_PATH], fstype[32], opts[512];
        char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 ||
            sscanf(sep + 3, "%31s %*s %511s", fstype, opts) != 2)
            continue;
        if (strcmp(fstype, "cgroup2") == 0 && !host->v2_mount[0]) {
            snprintf(host->v2_mount, sizeof(host->v2_mount), "%s", mnt);
        } else if (strcmp(fstype, "cgroup") == 0) {
            for (int c = 0; c < AJ_CG_NCTRL; c++)
                if (aj_cg_has_word(opts, aj_cg_ctrl_names[c], ',') && !host->ctrl[c].mount[0]) {
                    snprintf(host->ctrl[c].mount, sizeof(host->ctrl[c].mount), "%s", mnt);
                    host->ctrl[c].version = 1;
                }
        }
    }
    free(line);
    fclose(f);

    /* Our own place in each hierarchy. */
    f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return aj_err(err, errno, "read /proc/self/cgroup");
    line = NULL;
    cap = 0;
    while (getline(&line, &cap, f) > 0) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        c2[1 + strcspn(c2 + 1, "\n")] = '\0';
        if (c1[1] == '\0') {
            snprintf(host->v2_self, sizeof(host->v2_self), "%s", c2 + 1);
            continue;
        }
        for (int c = 0; c < AJ_CG_NCTRL; c++)
            if (aj_cg_has_word(c1 + 1, aj_cg_ctrl_names[c], ','))
                snprintf(host->ctrl[c].self, sizeof(host->ctrl[c].self), "%s", c2 + 1);
    }
    free(line);
    fclose(f);

    /* A caller that an earlier run moved into our leaf belongs to the
     * cgroup above it: that is where its runs go. */
    if (host->v2_mount[0]) {
        char *slash = strrchr(host->v2_self, '/');
        if (slash && strcmp(slash + 1, AJ_CG_LEAF) == 0) {
            if (slash == host->v2_self)
                slash[1] = '\0';
            else
                *slash = '\0';
        }
    }

    /* v2 wins for every controller it offers to our cgroup. */
    if (host->v2_mount[0]) {
        char path[AJ_CG_PATH * 2 + 32], buf[512];
        const char *self = strcmp(host->v2_self, "/") == 0 ? "" : host->v2_self;
        struct stat st;

        snprintf(path, sizeof(path), "%s/cgroup.controllers", host->v2_mount);
        if (aj_read_small_file(path, buf, sizeof(buf)) >= 0)
            for (int c = 0; c < AJ_CG_NCTRL; c++)
                if (aj_cg_has_word(buf, aj_cg_ctrl_names[c], ' '))
                    host->v2_kernel |= 1u << c;
        /* Only the real root lacks cgroup.type; the root of a cgroup
         * namespace (a container's "/") has it, and the no-internal-
         * processes rule applies there. */
        snprintf(path, sizeof(path), "%s%s/cgroup.type", host->v2_mount, self);
        host->v2_real_root = !self[0] && stat(path, &st) < 0 && errno == ENOENT;
        snprintf(path, sizeof(path), "%s%s/cgroup.controllers", host->v2_mount, self);
        if (aj_read_small_file(path, buf, sizeof(buf)) >= 0)
            for (int c = 0; c < AJ_CG_NCTRL; c++)
                if (c != AJ_CG_CPUACCT && aj_cg_has_word(buf, aj_cg_ctrl_names[c], ' ')) {
                    host->v2_avail |= 1u << c;
                    host->ctrl[c].version = 2;
                    host->ctrl[c].mount[0] = '\0';
                }
    }
    return 0;
}

/* ---- helpers --------------------------------------------------------------- */

int aj_cg_write_at(const char *dir, const char *file, const char *value)
{
    char path[AJ_CG_PATH * 2 + 64];
    _cleanup_close_ int fd = -1;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (write(fd, value, strlen(value)) < 0)
        return -errno;
    return 0;
}

int aj_cg_read_at(const char *dir, const char *file, char *buf, size_t size)
{
    char path[AJ_CG_PATH * 2 + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return aj_read_small_file(path, buf, size);
}

/* "key value" lines (memory.events, cpu.stat, memory.oom_control). */
bool aj_cg_read_key(const char *dir, const char *file, const char *key, uint64_t *ret)
{
    char buf[4096];
    size_t n = strlen(key);

    if (aj_cg_read_at(dir, file, buf, sizeof(buf)) < 0)
        return false;
    for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            *ret = strtoull(p + n + 1, NULL, 10);
            return true;
        }
    return false;
}

bool aj_cg_read_u64(const char *dir, const char *file, uint64_t *ret)
{
    char buf[64];
    char *end;
    if (aj_cg_read_at(dir, file, buf, sizeof(buf)) <= 0)
        return false;
    errno = 0;
    *ret = strtoull(buf, &end, 10);
    return errno == 0 && end != buf;
}

void aj_cg_join(char *out, size_t size, const char *mount, const char *self, const char *rest)
{
    int n = snprintf(out, size, "%s%s/agentjail%s%s", mount, strcmp(self, "/") == 0 ? "" : self,
                     rest ? "/" : "", rest ? rest : "");
    /* mount and self come from the kernel and fit easily; if they ever do
     * not, an empty path fails the mkdir cleanly instead of a cut one. */
    if (n < 0 || (size_t)n >= size)
        out[0] = '\0';
}

/* This process's pid, start time and pid namespace, read once per
 * process (a fork reads them again): every run's cgroup name has them,
 * and the stale scan compares every name against them. */
struct self_id {
    pid_t pid;
    unsigned long long start, pidns;
};
static pthread_mutex_t self_mu = PTHREAD_MUTEX_INITIALIZER;
static struct self_id self_cache;

static int self_id(struct self_id *ret)
{
    int r = 0;

    (void)pthread_mutex_lock(&self_mu);
    if (self_cache.pid != getpid()) {
        struct self_id n = {.pid = getpid()};
        r = aj_proc_starttime(n.pid, &n.start);
        n.pidns = aj_own_pidns();
        if (r == 0)
            self_cache = n;
    }
    *ret = self_cache;
    (void)pthread_mutex_unlock(&self_mu);
    return r;
}

int aj_cgroup_run_name(const char *sandbox_id, char *buf, size_t size)
{
    struct self_id me;
    int r = self_id(&me);
    if (r < 0)
        return r;
    snprintf(buf, size, "%d.%llu.%.12s.ns%llu", (int)me.pid, me.start, sandbox_id, me.pidns);
    return 0;
}

int aj_cgroup_predict(const struct aj_cgroup_host *host, uint32_t *ret_ctrls, char *why, size_t size)
{
    why[0] = '\0';
    *ret_ctrls = aj_cg_v1_predict(host, why, size);
    *ret_ctrls |= aj_cg_v2_predict(host, why, size);
    return 0;
}

/* Create base (once) and base/run; on v2, enable ctrls in base first. */
int aj_cg_make_run_dir(const char *base, const char *run, char *out, size_t size,
                       uint32_t (*enable)(const char *dir, uint32_t mask, int *ret_errno), uint32_t ctrls,
                       uint32_t *ret_on)
{
    snprintf(out, size, "%s/%s", base, run);
    for (int tries = 0;; tries++) {
        int e;
        if (mkdir(base, 0755) < 0 && errno != EEXIST)
            return -errno;
        if (enable && ctrls)
            *ret_on = enable(base, ctrls, &e);
        if (mkdir(out, 0755) == 0)
            return 0;
        e = errno;
        /* ENOENT: a concurrent run removed the (then empty) base dir between
         * the two: all again, the controllers included. */
        if (e != ENOENT || tries >= 5) {
            (void)rmdir(base); /* ours alone if empty: nothing left behind */
            return -e;
        }
    }
}

/* The base dir goes when its last run does, so no trace of agentjail is
 * left in the host's cgroup tree; EBUSY means other runs are live. */
static void remove_base_of(const char *run_dir)
{
    char base[AJ_CG_PATH * 2];
    char *slash;

    snprintf(base, sizeof(base), "%s", run_dir);
    slash = strrchr(base, '/');
    if (!slash)
        return;
    *slash = '\0';
    (void)rmdir(base);
}

/* ---- create ---------------------------------------------------------------- */

static const char *cg_dir(const struct aj_cgroup *cg, enum aj_cg_ctrl c)
{
    return cg->version[c] == 2 ? cg->v2_dir : cg->v1_dir[c];
}

static const struct aj_cg_backend *backend_of(const struct aj_cgroup *cg, enum aj_cg_ctrl c)
{
    return cg->version[c] == 2 ? &aj_cg_v2_backend : &aj_cg_v1_backend;
}

int aj_cg_write_limit(const char *dir, const char *file, const char *value, bool required, const char *what,
                      struct aj_error *err)
{
    int r = dir[0] ? aj_cg_write_at(dir, file, value) : -ENOENT;

    if (r < 0 && required)
        return aj_err(err, -r, "%s: cannot set %s in %s", what, file, dir[0] ? dir : "(no cgroup)");
    return r;
}
/* Read the limit back: the layer counts as applied only when the cgroup's
 * own file shows it (a write can succeed on a file another layer of the
 * hierarchy overrides, or be rounded: memory limits go down to a page). */
static int limit_holds(struct aj_cgroup *cg, enum aj_cg_ctrl c, const char *file, uint64_t want, uint64_t slack,
                       bool required, const char *what, struct aj_error *err)
{
    const char *dir = cg_dir(cg, c);
    char buf[64], *end;
    unsigned long long v;

    if (aj_cg_read_at(dir, file, buf, sizeof(buf)) <= 0)
        return required ? aj_err(err, EIO, "%s: cannot read back %s in %s", what, file, dir) : -EIO;
    errno = 0;
    v = strtoull(buf, &end, 10);
    if (errno || end == buf || v > want || want - v > slack)
        return required ? aj_err(err, EIO, "%s: %s in %s reads %.32s, not %llu", what, file, dir, buf,
                                 (unsigned long long)want)
                        : -EIO;
    return 0;
}

/* Whether the policy insists on a limit it sets (see required_limits). */
static bool required(const struct aj_policy *pol, uint32_t bit)
{
    if (!(pol->required_limits & bit))
        return false;
    switch (bit) {
    case AJ_LIMIT_MEMORY:
        return pol->memory_max != 0;
    case AJ_LIMIT_PIDS:
        return pol->pids_max != 0;
    case AJ_LIMIT_CPUS:
        return pol->cpu_milli != 0;
    case AJ_LIMIT_CPU_TIME:
        return pol->cpu_time_ms != 0;
    default:
        return false;
    }
}

/* Root that still cannot write the hierarchy is nearly always inside a
 * container, which mounts /sys/fs/cgroup read-only (Docker's default):
 * "run as root" would not help there. */
static const char *root_hint(void)
{
    return geteuid() == 0 ? "; as root inside a container, /sys/fs/cgroup is mounted read-only: see "
                            "docs/deploy.md, cgroup limits"
                          : "";
}

/* Why an explicit limit cannot be had here, and what to do about it. */
static int explain_missing(const struct aj_cgroup_host *host, const struct aj_cgroup *cg, enum aj_cg_ctrl c,
                           const char *flag, struct aj_error *err)
{
    const char *self = host->v2_self;
    char avail[64] = "";

    if (host->ctrl[c].version == 1)
        return aj_err(err, 0, "%s needs a writable cgroup for the '%s' controller (cgroup v1 at %s%s); "
                      "run as root, or in a delegated cgroup (systemd-run --user -p Delegate=yes ...)%s",
                      flag, aj_cg_ctrl_names[c], host->ctrl[c].mount, host->ctrl[c].self, root_hint());
    if (!host->v2_mount[0] || cg->v2_why[c] == AJ_CG_WHY_KERNEL)
        return aj_err(err, 0, "%s needs the cgroup '%s' controller, which this host does not provide "
                      "(neither cgroup v2 nor a v1 hierarchy)", flag, aj_cg_ctrl_names[c]);
    switch (cg->v2_why[c]) {
    case AJ_CG_WHY_NOT_DELEGATED:
        for (int o = 0; o < AJ_CG_NCTRL; o++)
            if (host->v2_avail & (1u << o)) {
                size_t n = strlen(avail);
                snprintf(avail + n, sizeof(avail) - n, "%s%s", n ? " " : "", aj_cg_ctrl_names[o]);
            }
        return aj_err(err, 0, "%s needs the cgroup '%s' controller, which the kernel has but the parent of "
                      "this process's cgroup (%s) does not delegate to it (it gets: %s); run agentjail in a "
                      "unit that delegates it: systemd-run --scope -p Delegate=yes ... (as a user: "
                      "systemd-run --user --scope -p Delegate=yes ...), or Delegate=yes in its service",
                      flag, aj_cg_ctrl_names[c], self, avail[0] ? avail : "none");
    case AJ_CG_WHY_BUSY:
        return aj_err(err, 0, "%s needs the cgroup '%s' controller, and cgroup v2 cannot enable it below %s "
                      "while other processes live in that cgroup (no internal processes; it is not delegated "
                      "to agentjail, so only agentjail itself was moved into %s/%s); run agentjail in its own "
                      "delegated unit: systemd-run --scope -p Delegate=yes ...",
                      flag, aj_cg_ctrl_names[c], self, self, AJ_CG_LEAF);
    case AJ_CG_WHY_NO_ACCESS:
        return aj_err(err, 0, "%s needs a writable cgroup for the '%s' controller (cgroup v2 at %s%s: %s); "
                      "run as root, or in a delegated cgroup (systemd-run --user --scope -p Delegate=yes ...)%s",
                      flag, aj_cg_ctrl_names[c], host->v2_mount, self,
                      strerror(cg->v2_errno[c] ? cg->v2_errno[c] : EACCES), root_hint());
    default:
        return aj_err(err, 0, "%s needs the cgroup '%s' controller, which could not be enabled below %s: %s",
                      flag, aj_cg_ctrl_names[c], self, strerror(cg->v2_errno[c] ? cg->v2_errno[c] : EIO));
    }
}

int aj_cgroup_create(const struct aj_cgroup_host *host, const struct aj_policy *pol,
                     const char *run_name, struct aj_cgroup *cg, struct aj_error *err)
{
    static const struct {
        uint32_t limit_bit;
        enum aj_cg_ctrl ctrl;
        const char *flag;
    } needs[] = {
        {AJ_LIMIT_MEMORY, AJ_CG_MEMORY, "--memory"},
        {AJ_LIMIT_PIDS, AJ_CG_PIDS, "--pids"},
        {AJ_LIMIT_CPUS, AJ_CG_CPU, "--cpus"},
    };
    uint32_t want2 = 0;
    char buf[512];
    int r;

    aj_cgroup_init(cg);
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        bool wanted = (c == AJ_CG_MEMORY && pol->memory_max) || (c == AJ_CG_PIDS && pol->pids_max) ||
                      (c == AJ_CG_CPU && pol->cpu_milli);
        cg->version[c] = host->ctrl[c].version;
        /* Every v2 controller there is, whether this run sets its limit
         * or not: the runs share one parent, and what a run's group has
         * should not depend on what an earlier run asked for. */
        if (cg->version[c] == 2 && c != AJ_CG_CPUACCT)
            want2 |= 1u << c;
        else if (wanted && cg->version[c] != 1 && host->v2_mount[0])
            cg->v2_why[c] = (host->v2_kernel & (1u << c)) ? AJ_CG_WHY_NOT_DELEGATED : AJ_CG_WHY_KERNEL;
    }
    /* The v2 group: tracking and kill for the whole tree, plus the
     * controllers this run needs, where they can be enabled. */
    r = aj_cg_v2_create(host, run_name, want2, cg, err);
    if (r < 0)
        goto fail;
    /* A v1 hierarchy costs a mkdir and an rmdir per run (the memory one a
     * slow rmdir): only join those this run needs. */
    aj_cg_v1_create(host, run_name,
                    (pol->memory_max ? 1u << AJ_CG_MEMORY : 0) | (pol->pids_max ? 1u << AJ_CG_PIDS : 0) |
                        (pol->cpu_milli ? 1u << AJ_CG_CPU : 0) | (!cg->v2_dir[0] ? 1u << AJ_CG_CPUACCT : 0),
                    cg);
    /* Explicit limits without a usable controller: fail closed, naming the
     * controller, where it is and why it cannot be used. */
    for (size_t i = 0; i < AJ_ARRAY_SIZE(needs); i++) {
        enum aj_cg_ctrl c = needs[i].ctrl;
        if (!required(pol, needs[i].limit_bit) || cg->version[c])
            continue;
        r = explain_missing(host, cg, c, needs[i].flag, err);
        goto fail;
    }
    if (required(pol, AJ_LIMIT_CPU_TIME) && !cg->v2_dir[0] && cg->version[AJ_CG_CPUACCT] != 1) {
        r = aj_err(err, 0, "--cpu-time needs a cgroup to measure the CPU time of the whole process tree, "
                   "and none is writable here; run as root or in a delegated cgroup");
        goto fail;
    }

    if (pol->memory_max && cg->version[AJ_CG_MEMORY]) {
        const struct aj_cg_backend *be = backend_of(cg, AJ_CG_MEMORY);
        bool req = required(pol, AJ_LIMIT_MEMORY);
        r = be->set_memory(cg_dir(cg, AJ_CG_MEMORY), pol->memory_max, req, err);
        if (r == 0)
            r = limit_holds(cg, AJ_CG_MEMORY, be->memory_max_file, pol->memory_max, 65535, req, "--memory", err);
        if (r < 0 && req)
            goto fail;
        if (r == 0)
            cg->limits |= AJ_LAYER_BIT(AJ_LAYER_MEMORY_LIMIT);
    }
    if (pol->pids_max && cg->version[AJ_CG_PIDS]) {
        bool req = required(pol, AJ_LIMIT_PIDS);
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)pol->pids_max);
        r = aj_cg_write_limit(cg_dir(cg, AJ_CG_PIDS), "pids.max", buf, req, "--pids", err);
        if (r == 0)
            r = limit_holds(cg, AJ_CG_PIDS, "pids.max", pol->pids_max, 0, req, "--pids", err);
        if (r < 0 && req)
            goto fail;
        if (r == 0)
            cg->limits |= AJ_LAYER_BIT(AJ_LAYER_PIDS_LIMIT);
    }
    if (pol->cpu_milli && cg->version[AJ_CG_CPU]) {
        const struct aj_cg_backend *be = backend_of(cg, AJ_CG_CPU);
        bool req = required(pol, AJ_LIMIT_CPUS);
        uint64_t period = 100000, quota = (uint64_t)pol->cpu_milli * period / 1000;
        r = be->set_cpu(cg_dir(cg, AJ_CG_CPU), quota, period, req, err);
        if (r == 0)
            r = limit_holds(cg, AJ_CG_CPU, be->cpu_quota_file, quota, 0, req, "--cpus", err);
        /* Like memory and pids: fatal only when the policy requires it. */
        if (r < 0 && req)
            goto fail;
        if (r == 0)
            cg->limits |= AJ_LAYER_BIT(AJ_LAYER_CPU_LIMIT);
    }
    return 0;
fail:
    aj_cgroup_destroy(cg);
    return r < 0 ? r : -EINVAL;
}

int aj_cgroup_parent_attach(const struct aj_cgroup *cg, pid_t pid, bool v2_too, struct aj_error *err)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%d", (int)pid);
    if (v2_too && cg->v2_dir[0]) {
        int r = aj_cg_write_at(cg->v2_dir, "cgroup.procs", buf);
        if (r < 0)
            return aj_err(err, -r, "move the sandbox into %s", cg->v2_dir);
    }
    return aj_cg_v1_attach(cg, buf, err);
}

int aj_cgroup_open_helper_join_fds(const struct aj_cgroup *cg, int fds[AJ_CG_MAX_JOIN + 1], size_t *ret_n,
                                   struct aj_error *err)
{
    size_t n = 0;
    int r;

    *ret_n = 0;
    if (!cg->created)
        return 0;
    r = aj_cgroup_open_join_fds(cg, fds, &n, err);
    if (r < 0)
        return r;
    if (cg->v2_dir[0]) {
        char path[AJ_CG_PATH * 2 + 16];
        snprintf(path, sizeof(path), "%s/cgroup.procs", cg->v2_dir);
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

int aj_cgroup_procs(const struct aj_cgroup *cg, pid_t *pids, size_t max)
{
    const char *dir = cg->v2_dir[0] ? cg->v2_dir : NULL;
    char path[sizeof(cg->v2_dir) + 16], buf[4096];
    size_t n = 0;
    FILE *f;

    for (int i = 0; !dir && i < AJ_CG_NCTRL; i++)
        if (cg->v1_dir[i][0])
            dir = cg->v1_dir[i];
    if (!cg->created || !dir)
        return -ENOENT;
    (void)snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    f = fopen(path, "re");
    if (!f)
        return -errno;
    while (fgets(buf, sizeof(buf), f)) {
        long v = strtol(buf, NULL, 10);
        if (v <= 0)
            continue;
        if (n < max)
            pids[n] = (pid_t)v;
        n++;
    }
    if (ferror(f)) {
        int e = errno ? errno : EIO;
        (void)fclose(f);
        return -e;
    }
    (void)fclose(f);
    return n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
}

int aj_cgroup_read_stats(const struct aj_cgroup *cg, struct aj_cgroup_stats *st)
{
    uint64_t v;
    memset(st, 0, sizeof(*st));
    /* CPU: v2's cpu.stat exists in every v2 group (no controller needed). */
    if (cg->v2_dir[0] && aj_cg_read_key(cg->v2_dir, "cpu.stat", "usage_usec", &v)) {
        st->cpu_usec = v;
        st->have_cpu = true;
    } else if (cg->version[AJ_CG_CPUACCT] == 1 && aj_cg_read_u64(cg->v1_dir[AJ_CG_CPUACCT], "cpuacct.usage", &v)) {
        st->cpu_usec = v / 1000;
        st->have_cpu = true;
    }
    if (cg->version[AJ_CG_MEMORY])
        backend_of(cg, AJ_CG_MEMORY)->memory_stats(cg_dir(cg, AJ_CG_MEMORY), st);
    if (cg->version[AJ_CG_PIDS]) {
        if (aj_cg_read_key(cg_dir(cg, AJ_CG_PIDS), "pids.events", "max", &v))
            st->pids_max_hits = v;
    }
    return 0;
}

/* SIGKILL every member (v1, or v2 before cgroup.kill). Read line by line:
 * a fixed buffer cut a long list mid-number, and the prefix of a pid is
 * some other host process's pid. Only whole lines count. */
static int kill_procs_in(const char *dir)
{
    char path[AJ_CG_PATH * 2 + 16], line[32];
    FILE *f;
    int n = 0;

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    f = fopen(path, "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        char *end;
        long pid = strtol(line, &end, 10);
        if (end == line || *end != '\n')
            continue; /* not a whole line */
        if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
            n++;
    }
    (void)fclose(f);
    return n;
}

void aj_cgroup_kill(const struct aj_cgroup *cg)
{
    /* cgroup.kill (5.14) kills every member atomically, forks included. */
    if (cg->v2_dir[0] && aj_cg_write_at(cg->v2_dir, "cgroup.kill", "1") == 0)
        return;
    if (cg->v2_dir[0])
        (void)kill_procs_in(cg->v2_dir);
    for (int c = 0; c < AJ_CG_NCTRL; c++)
        if (cg->v1_dir[c][0])
            (void)kill_procs_in(cg->v1_dir[c]);
}

static void remove_dir(const char *dir)
{
    /* A group empties asynchronously after its last process is reaped:
     * retry briefly, killing anything that is still (or newly) there. */
    for (int i = 0; i < 200; i++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return;
        if (errno != EBUSY)
            return;
        (void)kill_procs_in(dir);
        struct timespec ts = {0, 1000000 * (i < 20 ? 1 : 10)};
        (void)nanosleep(&ts, NULL);
    }
}

void aj_cgroup_destroy(struct aj_cgroup *cg)
{
    if (!cg)
        return;
    if (cg->created)
        aj_cgroup_kill(cg);
    if (cg->v2_fd >= 0) {
        (void)close(cg->v2_fd);
        cg->v2_fd = -1;
    }
    if (cg->v2_dir[0]) {
        remove_dir(cg->v2_dir);
        remove_base_of(cg->v2_dir);
    }
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        if (!cg->v1_dir[c][0])
            continue;
        remove_dir(cg->v1_dir[c]);
        remove_base_of(cg->v1_dir[c]);
        /* Shared hierarchies (cpu,cpuacct) point at the same dir. */
        for (int o = c + 1; o < AJ_CG_NCTRL; o++)
            if (strcmp(cg->v1_dir[o], cg->v1_dir[c]) == 0)
                cg->v1_dir[o][0] = '\0';
        cg->v1_dir[c][0] = '\0';
    }
    cg->v2_dir[0] = '\0';
    cg->created = false;
}

/* ---- stale runs -------------------------------------------------------------- */

/* Whether the supervisor that made run cgroup NAME may still live. Only a
 * supervisor of our own pid namespace can be judged: another one's pid
 * (two containers sharing a cgroup base) means nothing here, so its runs
 * are left alone. */
static bool owner_alive(const char *name, const struct self_id *me)
{
    const char *ns = strstr(name, ".ns");
    char *end;
    long pid = strtol(name, &end, 10);
    unsigned long long st, want;

    if (end == name || *end != '.' || pid <= 0)
        return true; /* not ours: leave it alone */
    if (!ns || strtoull(ns + 3, NULL, 10) != me->pidns)
        return true; /* another pid namespace's, or an older agentjail's */
    want = strtoull(end + 1, NULL, 10);
    if (pid == me->pid && want == me->start)
        return true; /* this process's own runs (a server's are most of them) */
    if (aj_proc_starttime((pid_t)pid, &st) < 0)
        return false;
    return st == want;
}

static int cleanup_base(const char *base, const struct self_id *me)
{
    DIR *d = opendir(base);
    struct dirent *de;
    int n = 0;

    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char dir[AJ_CG_PATH * 2 + 300];
        if (de->d_type != DT_DIR || de->d_name[0] == '.' || owner_alive(de->d_name, me))
            continue;
        snprintf(dir, sizeof(dir), "%s/%s", base, de->d_name);
        if (aj_cg_write_at(dir, "cgroup.kill", "1") < 0)
            (void)kill_procs_in(dir);
        remove_dir(dir);
        n++;
    }
    closedir(d);
    /* An empty base left by a dead run goes too (EBUSY: live runs in it). */
    (void)rmdir(base);
    return n;
}

int aj_cgroup_cleanup_stale(const struct aj_cgroup_host *host)
{
    static _Atomic long long last_ms;
    static _Atomic pid_t last_pid;
    char base[AJ_CG_PATH * 2];
    struct self_id me;
    struct timespec ts;
    long long now;
    int n = 0;

    /* At most once a second per process: a server starting hundreds of
     * sandboxes a second scanned every run's groups (and read each
     * owner's /proc stat) for each of them. A SIGKILLed supervisor's
     * groups still go at the next start in another process, or within a
     * second in this one. */
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (last_pid == getpid() && now - last_ms < 1000)
        return 0;
    last_ms = now;
    last_pid = getpid();
    if (self_id(&me) < 0)
        return 0;
    if (host->v2_mount[0]) {
        aj_cg_join(base, sizeof(base), host->v2_mount, host->v2_self, NULL);
        /* Only our own subtree: a base elsewhere belongs to another caller,
         * whose owner pid may not even be visible from here. */
        n += cleanup_base(base, &me);
    }
    for (int c = 0; c < AJ_CG_NCTRL; c++) {
        if (host->ctrl[c].version != 1)
            continue;
        aj_cg_join(base, sizeof(base), host->ctrl[c].mount, host->ctrl[c].self, NULL);
        n += cleanup_base(base, &me);
    }
    return n;
}
