/* SPDX-License-Identifier: Apache-2.0 */
/* Host posture (`agentjail check`). See aj_posture.h and
 * docs/risk-model.md. Read only: sysctls are read, never written. */
#include "aj_posture.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_policy_model.h"
#include "aj_cgroup.h"
#include "aj_result.h"
#include "kcve.h" /* src/probe: the CVE table, shared with agentjail-probe */
#include "aj_landlock.h"
#include "aj_missing.h"
#include "aj_util.h"

static const char *const status_names[] = {"ok", "warn", "fail", "unknown"};

const char *aj_posture_status_name(enum aj_posture_status s)
{
    return (unsigned)s < AJ_ARRAY_SIZE(status_names) ? status_names[s] : "unknown";
}

struct ctx {
    const char *root; /* NULL: live host */
    json_t *findings;
    struct aj_error *err;
    /* What the trial run showed, for the report's "trial" object (the
     * CLI derives the deployment way from it, docs/deploy.md). */
    enum { TRIAL_NOT_RUN, TRIAL_FAILED, TRIAL_DEGRADED, TRIAL_RAN } trial;
    bool trial_rootless;
    uint64_t trial_missing; /* layers of the default policy the trial lacked */
};

#define KEEP "nothing to change; persist the current value in /etc/sysctl.d/ so a reboot keeps it"

static int add(struct ctx *c, const char *id, enum aj_posture_status st, const char *value,
               const char *why, const char *rec)
{
    json_t *f = json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", id, "status", aj_posture_status_name(st),
                          "value", value, "why", why, "recommendation", rec);
    if (!f || json_array_append_new(c->findings, f) < 0)
        return aj_err(c->err, ENOMEM, "posture finding %s", id);
    return 0;
}

/* rel is relative to / (or to the sysroot): "proc/sys/kernel/kptr_restrict". */
static int read_host_file(const struct ctx *c, const char *rel, char *buf, size_t size)
{
    char path[PATH_MAX];
    int n;

    if (snprintf(path, sizeof(path), "%s/%s", c->root ? c->root : "", rel) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    n = aj_read_small_file(path, buf, size);
    if (n < 0)
        return n;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* Strict: optional '-', digits, nothing else (sysctls such as
 * perf_event_paranoid can be -1). */
static int parse_long(const char *s, long *ret)
{
    char *end;
    long v;

    if (!*s)
        return -EINVAL;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return -EINVAL;
    *ret = v;
    return 0;
}

/* ---- sysctls ------------------------------------------------------------------ */

struct sysctl_rule {
    const char *id;   /* the sysctl's name */
    const char *path; /* under the (sys)root */
    long safe;        /* ok at this value or beyond it */
    bool at_most;     /* "beyond" is below (ok when value <= safe) */
    enum aj_posture_status if_absent;
    const char *absent;
    const char *why;
    const char *fix;
};

static const struct sysctl_rule sysctl_rules[] = {
    {"kernel.unprivileged_bpf_disabled", "proc/sys/kernel/unprivileged_bpf_disabled", 1, false,
     AJ_POSTURE_OK, "absent: this kernel has no bpf() syscall",
     "Unprivileged eBPF puts verifier-checked programs of any local user into the kernel; verifier "
     "bugs are a recurring local privilege escalation (CVE-2021-3490, CVE-2022-23222). agentjail's "
     "seccomp filter refuses bpf() inside the sandbox; this closes it for the rest of the host.",
     "set kernel.unprivileged_bpf_disabled=2 in /etc/sysctl.d/ (1 also stops root from turning it "
     "back on until reboot)"},
    {"vm.unprivileged_userfaultfd", "proc/sys/vm/unprivileged_userfaultfd", 0, true,
     AJ_POSTURE_UNKNOWN, "absent: kernel before 5.2, or built without userfaultfd",
     "userfaultfd lets a process stall the kernel on a page fault of its choosing, which turns "
     "narrow kernel races into reliable exploits. Unprivileged code has no need for it.",
     "set vm.unprivileged_userfaultfd=0 in /etc/sysctl.d/"},
    {"kernel.io_uring_disabled", "proc/sys/kernel/io_uring_disabled", 1, false, AJ_POSTURE_UNKNOWN,
     "absent: kernel before 6.6 (io_uring cannot be switched off) or built without io_uring",
     "io_uring is a large, fast-changing kernel interface with a long list of privilege-escalation "
     "bugs, and the operations of a ring are not seen by a per-syscall seccomp filter. agentjail "
     "refuses io_uring_setup inside the sandbox; this removes it for the rest of the host.",
     "set kernel.io_uring_disabled=2 in /etc/sysctl.d/ (1 keeps it for members of "
     "kernel.io_uring_group); on kernels before 6.6 boot with a kernel that has no io_uring"},
    {"kernel.kptr_restrict", "proc/sys/kernel/kptr_restrict", 1, false, AJ_POSTURE_UNKNOWN,
     "absent", "Kernel addresses in /proc/kallsyms and /proc/modules undo KASLR, the first step of "
     "most kernel exploits.",
     "set kernel.kptr_restrict=1 in /etc/sysctl.d/ (2 hides them from root too)"},
    {"kernel.dmesg_restrict", "proc/sys/kernel/dmesg_restrict", 1, false, AJ_POSTURE_UNKNOWN,
     "absent", "The kernel log leaks addresses and lets exploit code watch its own attempts "
     "(oopses, warnings) and retry.",
     "set kernel.dmesg_restrict=1 in /etc/sysctl.d/"},
    {"kernel.perf_event_paranoid", "proc/sys/kernel/perf_event_paranoid", 2, false,
     AJ_POSTURE_UNKNOWN, "absent: kernel built without perf events",
     "Below 2, unprivileged perf_event_open reaches kernel profiling: a large attack surface with "
     "its own CVEs, and a source of kernel addresses and side channels.",
     "set kernel.perf_event_paranoid=3 in /etc/sysctl.d/ where the kernel knows 3 (Debian, "
     "Android: no perf for unprivileged users), else 2"},
    {"kernel.yama.ptrace_scope", "proc/sys/kernel/yama/ptrace_scope", 1, false, AJ_POSTURE_WARN,
     "absent: Yama is not active",
     "At scope 0 a process may trace any other process of its uid: code that gets out of the "
     "sandbox as the agent's user can read the memory, and the secrets, of the agent and its tools.",
     "set kernel.yama.ptrace_scope=1 in /etc/sysctl.d/ (2: only root may attach); if absent, add "
     "yama to the lsm= boot parameter"},
    {"fs.protected_symlinks", "proc/sys/fs/protected_symlinks", 1, false, AJ_POSTURE_UNKNOWN,
     "absent", "Following a symlink planted in a sticky world-writable directory (/tmp) is the "
     "classic time-of-check/time-of-use attack on a privileged process such as a supervisor.",
     "set fs.protected_symlinks=1 in /etc/sysctl.d/"},
    {"fs.protected_hardlinks", "proc/sys/fs/protected_hardlinks", 1, false, AJ_POSTURE_UNKNOWN,
     "absent", "Hard links to files the user cannot write let an attacker pin an old setuid binary "
     "or steer a privileged writer into a root-owned file.",
     "set fs.protected_hardlinks=1 in /etc/sysctl.d/"},
    {"fs.protected_fifos", "proc/sys/fs/protected_fifos", 1, false, AJ_POSTURE_UNKNOWN, "absent",
     "A privileged process that opens a name in a sticky directory with O_CREAT can be handed a "
     "FIFO the attacker owns and reads from.",
     "set fs.protected_fifos=2 in /etc/sysctl.d/"},
    {"fs.protected_regular", "proc/sys/fs/protected_regular", 1, false, AJ_POSTURE_UNKNOWN, "absent",
     "The same for regular files: an O_CREAT open in /tmp must not land in a file the attacker "
     "created in advance.",
     "set fs.protected_regular=2 in /etc/sysctl.d/"},
    {"kernel.kexec_load_disabled", "proc/sys/kernel/kexec_load_disabled", 1, false, AJ_POSTURE_OK,
     "absent: this kernel has no kexec",
     "After a host compromise, kexec swaps the running kernel for one of the attacker's choosing, "
     "taking every LSM and the audit trail with it.",
     "set kernel.kexec_load_disabled=1 late in boot (one-way until reboot)"},
    {"kernel.modules_disabled", "proc/sys/kernel/modules_disabled", 1, false, AJ_POSTURE_OK,
     "absent: this kernel has no loadable modules",
     "While modules can be loaded, root gained by an escape becomes kernel code, and unprivileged "
     "requests (a socket family, a filesystem type) can pull in rarely used, weakly maintained "
     "modules.",
     "set kernel.modules_disabled=1 once every needed module is loaded (one-way until reboot); at "
     "least blacklist unused socket families and filesystems in /etc/modprobe.d/"},
};

static int check_sysctl(struct ctx *c, const struct sysctl_rule *r)
{
    char buf[64], value[96];
    long v;
    int n = read_host_file(c, r->path, buf, sizeof(buf));

    if (n == -ENOENT)
        return add(c, r->id, r->if_absent, r->absent, r->why,
                   r->if_absent == AJ_POSTURE_OK ? "nothing to change" : r->fix);
    if (n < 0) {
        snprintf(value, sizeof(value), "unreadable: %s", strerror(-n));
        return add(c, r->id, AJ_POSTURE_UNKNOWN, value, r->why, r->fix);
    }
    if (parse_long(buf, &v) < 0) {
        snprintf(value, sizeof(value), "not a number: '%.40s'", buf);
        return add(c, r->id, AJ_POSTURE_UNKNOWN, value, r->why, r->fix);
    }
    snprintf(value, sizeof(value), "%ld", v);
    if (r->at_most ? v <= r->safe : v >= r->safe)
        return add(c, r->id, AJ_POSTURE_OK, value, r->why, KEEP);
    return add(c, r->id, AJ_POSTURE_WARN, value, r->why, r->fix);
}

/* ---- kernel version against the CVE table -------------------------------------- */

/* Distribution kernels keep the upstream base in uname -r ("6.1.0-18-amd64")
 * while their package follows the stable branch; the build string says
 * which. Debian: uname -v "... Debian 6.1.76-1 (2024-02-01)". Ubuntu:
 * /proc/version_signature "Ubuntu 5.15.0-91.101-generic 5.15.131". Without
 * this every Debian 12 host would match every CVE fixed after 6.1.0. */
static void effective_release(const struct ctx *c, const char *release, char *ret, size_t size,
                              char *note, size_t nsize)
{
    char buf[256];
    const char *p;
    struct pr_kver k;

    snprintf(ret, size, "%s", release);
    note[0] = '\0';
    if (read_host_file(c, "proc/version_signature", buf, sizeof(buf)) == 0 &&
        (p = strrchr(buf, ' ')) && pr_kver_parse(p + 1, &k)) {
        snprintf(ret, size, "%s", p + 1);
        snprintf(note, nsize, " (Ubuntu package, upstream %s)", p + 1);
        return;
    }
    if (read_host_file(c, "proc/sys/kernel/version", buf, sizeof(buf)) == 0 &&
        (p = strstr(buf, "Debian ")) && pr_kver_parse(p + 7, &k)) {
        size_t n = strcspn(p + 7, " -");
        snprintf(ret, size, "%.*s", (int)n, p + 7);
        snprintf(note, nsize, " (Debian package %.*s)", (int)strcspn(p + 7, " "), p + 7);
    }
}

static int check_kernel_cves(struct ctx *c, const char *release)
{
    static const char why[] =
        "A payload that finds a kernel with a known local privilege escalation does not need a "
        "sandbox bug: the kernel is the boundary every layer of agentjail stands on.";
    char eff[64], note[96], build[256] = "", value[512], rec[1024];
    const struct pr_kcve *first = NULL, *vendor = NULL;
    size_t n = 0, off;
    struct pr_kver k;

    effective_release(c, release, eff, sizeof(eff), note, sizeof(note));
    if (!release[0] || !pr_kver_parse(eff, &k))
        return add(c, "kernel.cves", AJ_POSTURE_UNKNOWN,
                   release[0] ? "kernel release not understood" : "kernel release unreadable", why,
                   "compare the running kernel with data/kernel-cves.json by hand");
    (void)read_host_file(c, "proc/sys/kernel/version", build, sizeof(build)); /* "" if not */
    off = (size_t)snprintf(value, sizeof(value), "%s%s: ", release, note);
    for (size_t i = 0; i < pr_kcves_count; i++) {
        const struct pr_kcve *e = &pr_kcves[i];
        switch (pr_kcve_match(e, eff, build)) {
        case PR_KCVE_NOT_AFFECTED:
            continue;
        case PR_KCVE_DISTRO_UNKNOWN:
            if (!vendor)
                vendor = e;
            continue;
        case PR_KCVE_AFFECTED:
        case PR_KCVE_AFFECTED_NO_FIX:
            break;
        }
        if (!first)
            first = e;
        if (off < sizeof(value))
            off += (size_t)snprintf(value + off, sizeof(value) - off, "%s%s", n ? ", " : "", e->cve);
        n++;
    }
    if (first) {
        snprintf(rec, sizeof(rec),
                 "update the kernel to a release with the fixes (upstream %s fixed %s, %s; check "
                 "the vendor's advisory, distribution kernels backport fixes) and reboot into it; "
                 "until then: %s",
                 first->fixed ? first->fixed : "(see the advisory)", first->cve, first->name,
                 first->mitigation);
        return add(c, "kernel.cves", AJ_POSTURE_FAIL, value, why, rec);
    }
    if (off >= sizeof(value)) /* cannot happen with n == 0: release and note are short */
        off = strlen(value);
    if (vendor) {
        snprintf(value + off, sizeof(value) - off, "%s kernel: %s may apply", vendor->distro, vendor->cve);
        snprintf(rec, sizeof(rec), "confirm the vendor fix is installed: %s. %s", vendor->distro_note,
                 vendor->mitigation);
        return add(c, "kernel.cves", AJ_POSTURE_WARN, value, why, rec);
    }
    snprintf(value + off, sizeof(value) - off, "none of the %zu table entries applies", pr_kcves_count);
    return add(c, "kernel.cves", AJ_POSTURE_OK, value, why,
               "nothing to change; keep taking the distribution's kernel updates and reboot into them");
}

/* ---- kernel features agentjail's layers use ------------------------------------ */

static int check_landlock(struct ctx *c)
{
    static const char why[] =
        "Landlock is the layer that limits files, TCP ports and (ABI 6) abstract unix sockets and "
        "signals from inside the sandbox, independent of mounts. agentjail fails closed without it.";
    static const char rec[] =
        "run a kernel of 6.12 or later (ABI 6) with CONFIG_SECURITY_LANDLOCK=y and landlock in the "
        "lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor,bpf)";
    char value[64];
    int abi;

    if (c->root)
        return add(c, "landlock.abi", AJ_POSTURE_UNKNOWN, "not measured (--sysroot)", why, rec);
    abi = aj_landlock_abi();
    snprintf(value, sizeof(value), "ABI %d", abi);
    if (abi == 0)
        return add(c, "landlock.abi", AJ_POSTURE_FAIL, "unavailable", why, rec);
    if (abi < 4)
        return add(c, "landlock.abi", AJ_POSTURE_WARN, value, why,
                   "ABI 4 (6.7) adds TCP rules and ABI 6 (6.12) scopes unix sockets and signals: "
                   "upgrade the kernel");
    if (abi < 6)
        return add(c, "landlock.abi", AJ_POSTURE_WARN, value, why,
                   "ABI 6 (6.12) scopes abstract unix sockets and signals to the sandbox: upgrade "
                   "the kernel");
    return add(c, "landlock.abi", AJ_POSTURE_OK, value, why, "nothing to change");
}

static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, " ,\t");
        if (len == n && strncmp(p, word, n) == 0)
            return true;
        p += len;
        p += strspn(p, " ,\t");
    }
    return false;
}

static int check_seccomp(struct ctx *c)
{
    static const char why[] =
        "agentjail's seccomp filter is the syscall allow-list; user notification is how an "
        "escape-indicative syscall reaches the supervisor, which records it and refuses it. "
        "Without it escape attempts are refused but nobody sees them.";
    char buf[256];
    int r = read_host_file(c, "proc/sys/kernel/seccomp/actions_avail", buf, sizeof(buf));

    if (r == -ENOENT)
        return add(c, "seccomp.user_notif", AJ_POSTURE_FAIL, "no seccomp filter support", why,
                   "run a kernel built with CONFIG_SECCOMP_FILTER=y (5.0 or later for user "
                   "notification)");
    if (r < 0)
        return add(c, "seccomp.user_notif", AJ_POSTURE_UNKNOWN, "actions_avail unreadable", why,
                   "check /proc/sys/kernel/seccomp/actions_avail lists user_notif");
    if (!has_word(buf, "user_notif"))
        return add(c, "seccomp.user_notif", AJ_POSTURE_FAIL, buf, why,
                   "run a kernel of 5.0 or later (5.9 or later for the addfd and the 5.5 "
                   "continue flags)");
    return add(c, "seccomp.user_notif", AJ_POSTURE_OK, buf, why, "nothing to change");
}

static int check_lsm(struct ctx *c)
{
    static const char why[] =
        "The active Linux Security Modules: Landlock is one of agentjail's layers, Yama limits "
        "ptrace between processes, AppArmor or SELinux confine the supervisor and the agent "
        "platform outside the sandbox.";
    static const char rec[] =
        "boot with lsm=landlock,lockdown,yama,integrity,apparmor,bpf (or selinux in place of "
        "apparmor)";
    char buf[512];
    int r = read_host_file(c, "sys/kernel/security/lsm", buf, sizeof(buf));

    if (r < 0)
        return add(c, "lsm.stack", AJ_POSTURE_UNKNOWN,
                   r == -ENOENT ? "securityfs not mounted" : "unreadable", why,
                   "mount securityfs (mount -t securityfs securityfs /sys/kernel/security) to see "
                   "the list; it is normally mounted by systemd");
    if (!has_word(buf, "landlock"))
        return add(c, "lsm.stack", AJ_POSTURE_FAIL, buf, why, rec);
    if (!has_word(buf, "apparmor") && !has_word(buf, "selinux") && !has_word(buf, "smack") &&
        !has_word(buf, "tomoyo"))
        return add(c, "lsm.stack", AJ_POSTURE_WARN, buf, why, rec);
    return add(c, "lsm.stack", AJ_POSTURE_OK, buf, why, "nothing to change");
}

static int check_cgroups(struct ctx *c)
{
    static const struct {
        enum aj_cg_ctrl ctrl;
        const char *id;
        enum aj_posture_status if_missing;
        const char *why;
    } rows[] = {
        {AJ_CG_MEMORY, "cgroup.memory", AJ_POSTURE_FAIL,
         "The memory controller caps RAM and swap of the whole sandbox; without it a payload can "
         "push the shared host into its OOM killer (rlimits bound one process, not a tree)."},
        {AJ_CG_PIDS, "cgroup.pids", AJ_POSTURE_FAIL,
         "The pids controller stops a fork bomb at the sandbox; RLIMIT_NPROC counts per uid and "
         "is no substitute."},
        {AJ_CG_CPU, "cgroup.cpu", AJ_POSTURE_WARN,
         "The cpu controller shares CPU bandwidth fairly between sandboxes and the host; without "
         "it only the CPU-time limit applies."},
    };
    static const char v1_rec[] =
        "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 only): v1 hierarchies carry "
        "release_agent, the mechanism of CVE-2022-0492, and lack cgroup.kill";
    struct aj_cgroup_host host;
    struct aj_error cgerr = {0};
    bool detected;
    int r;

    detected = !c->root && aj_cgroup_detect(&host, &cgerr) >= 0;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(rows); i++) {
        int v = detected ? host.ctrl[rows[i].ctrl].version : -1;
        if (v < 0)
            r = add(c, rows[i].id, AJ_POSTURE_UNKNOWN,
                    c->root ? "not measured (--sysroot)" : "mount table unreadable", rows[i].why,
                    "check /proc/self/mountinfo for a cgroup2 mount");
        else if (v == 2)
            r = add(c, rows[i].id, AJ_POSTURE_OK, "v2", rows[i].why, "nothing to change");
        else if (v == 1)
            r = add(c, rows[i].id, AJ_POSTURE_WARN, "v1", rows[i].why, v1_rec);
        else
            r = add(c, rows[i].id, rows[i].if_missing, "none", rows[i].why,
                    "enable the controller for agentjail's cgroup (cgroup v2: add it to "
                    "cgroup.subtree_control of the parent, e.g. systemd Delegate=yes for the "
                    "service that runs agentjail)");
        if (r < 0)
            return r;
    }
    return 0;
}

/* Where this host sits in the kernel support matrix (docs/security-
 * model.md, "Kernels"): each layer with the feature it needs, probed
 * directly (a call with invalid arguments: ENOSYS means absent), never
 * guessed from the version string. */
static int check_kernel_layers(struct ctx *c)
{
    static const char why[] =
        "Which of agentjail's layers this kernel can apply. The mount layer needs mount_setattr "
        "(5.12), the filesystem rules need Landlock (5.13; TCP rules ABI 4, 6.7; scoping of unix "
        "sockets and signals ABI 6, 6.12), the escape monitor seccomp user notification (5.0). A "
        "layer the kernel lacks is reported missing in every run's result, never skipped silently.";
    char value[512], missing[256] = "", fatal[256] = "", buf[256];
    int abi, n;
    bool notif, timens;

    if (c->root)
        return add(c, "kernel.layers", AJ_POSTURE_UNKNOWN, "not measured (--sysroot)", why,
                   "run 'agentjail check' on the live host");
    abi = aj_landlock_abi();
    notif = read_host_file(c, "proc/sys/kernel/seccomp/actions_avail", buf, sizeof(buf)) == 0 &&
            has_word(buf, "user_notif");
    timens = access("/proc/self/ns/time", F_OK) == 0;
    errno = 0;
    if (syscall(__NR_mount_setattr, -1, "", 0, NULL, (size_t)0) < 0 && errno == ENOSYS)
        snprintf(fatal + strlen(fatal), sizeof(fatal) - strlen(fatal),
                 "%smount_setattr (Linux 5.12: the mount layer)", fatal[0] ? ", " : "");
    if (abi < 1)
        snprintf(fatal + strlen(fatal), sizeof(fatal) - strlen(fatal),
                 "%sLandlock (Linux 5.13; a policy may allow running without it: "
                 "degraded.without_landlock)", fatal[0] ? ", " : "");
    if (!notif)
        snprintf(fatal + strlen(fatal), sizeof(fatal) - strlen(fatal),
                 "%sseccomp user notification (Linux 5.0: the escape monitor)", fatal[0] ? ", " : "");
    if (abi >= 1 && abi < 4)
        snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
                 "%slandlock_net (ABI 4, 6.7: the network namespace stays the boundary)",
                 missing[0] ? ", " : "");
    if (abi >= 1 && abi < 6)
        snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
                 "%slandlock_scope (ABI 6, 6.12: the pid and network namespaces stay the boundary)",
                 missing[0] ? ", " : "");
    if (!timens)
        snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
                 "%stime_namespace (5.6)", missing[0] ? ", " : "");
    n = snprintf(value, sizeof(value), "Landlock ABI %d; ", abi);
    if (fatal[0])
        snprintf(value + n, sizeof(value) - (size_t)n, "cannot run: no %s%s%s", fatal,
                 missing[0] ? "; also missing: " : "", missing);
    else if (missing[0])
        snprintf(value + n, sizeof(value) - (size_t)n, "every layer but %s", missing);
    else
        snprintf(value + n, sizeof(value) - (size_t)n, "every layer");
    if (fatal[0])
        return add(c, "kernel.layers", AJ_POSTURE_FAIL, value, why,
                   "run Linux 6.8 or later (6.12+ for every layer) with CONFIG_SECURITY_LANDLOCK=y and "
                   "landlock in lsm=; Debian 12: the 6.1 kernel runs all but the layers listed, "
                   "bookworm's linux-image-6.12-amd64 runs all");
    if (missing[0])
        return add(c, "kernel.layers", AJ_POSTURE_WARN, value, why,
                   "a kernel of 6.12 or later applies every layer (Debian 12: linux-image-6.12-amd64)");
    return add(c, "kernel.layers", AJ_POSTURE_OK, value, why, "nothing to change");
}

/* What a run started by this user, from this cgroup, would get: limits
 * depend on delegation, not only on what the kernel has. Read only. */
static int check_cgroup_limits(struct ctx *c)
{
    static const char why[] =
        "Memory, pids and CPU limits need a cgroup the caller may write to. On cgroup v2 agentjail "
        "puts its runs below its own cgroup (never above it) and enables only what the parent "
        "delegates; without that the default limits are reported missing and explicit ones refuse "
        "to run.";
    static const char rec[] =
        "run agentjail in a unit that delegates the controllers: systemd-run --scope -p Delegate=yes "
        "agentjail ... (a user: systemd-run --user --scope -p Delegate=yes ...), or Delegate=yes in "
        "the service that runs it";
    struct aj_cgroup_host host;
    struct aj_error cgerr = {0};
    uint32_t ctrls = 0;
    char why_not[384], value[512];
    int n;

    if (c->root)
        return add(c, "cgroup.limits", AJ_POSTURE_UNKNOWN, "not measured (--sysroot)", why,
                   "run 'agentjail check' on the live host");
    if (aj_cgroup_detect(&host, &cgerr) < 0 || aj_cgroup_predict(&host, &ctrls, why_not, sizeof(why_not)) < 0)
        return add(c, "cgroup.limits", AJ_POSTURE_UNKNOWN, "cgroups unreadable", why, rec);
    n = snprintf(value, sizeof(value), "runs get:");
    for (int k = 0; k < AJ_CG_NCTRL; k++)
        if (k != AJ_CG_CPUACCT && (ctrls & (1u << k)))
            n += snprintf(value + n, sizeof(value) - (size_t)n, " %s", aj_cgroup_ctrl_name((enum aj_cg_ctrl)k));
    if (!(ctrls & ((1u << AJ_CG_MEMORY) | (1u << AJ_CG_PIDS) | (1u << AJ_CG_CPU))))
        n += snprintf(value + n, sizeof(value) - (size_t)n, " no limits");
    if (why_not[0])
        snprintf(value + n, sizeof(value) - (size_t)n, " (%s)", why_not);
    if (!(ctrls & (1u << AJ_CG_MEMORY)) || !(ctrls & (1u << AJ_CG_PIDS)))
        return add(c, "cgroup.limits", AJ_POSTURE_FAIL, value, why, rec);
    if (!(ctrls & (1u << AJ_CG_CPU)))
        return add(c, "cgroup.limits", AJ_POSTURE_WARN, value, why, rec);
    return add(c, "cgroup.limits", AJ_POSTURE_OK, value, why, "nothing to change");
}

/* Try a user namespace in a throwaway child, as this user: the sysctls
 * alone do not say (a container's seccomp profile or an LSM may refuse
 * it too). The child only calls unshare and _exit: safe after fork in a
 * threaded caller. */
static int try_userns(void)
{
    int status;
    pid_t pid = fork();

    if (pid < 0)
        return -errno;
    if (pid == 0)
        _exit(unshare(CLONE_NEWUSER) < 0 ? (errno > 0 && errno < 256 ? errno : 1) : 0);
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (!WIFEXITED(status))
        return -ECHILD;
    return -WEXITSTATUS(status);
}

static int check_userns(struct ctx *c)
{
    static const char why[] =
        "agentjail builds every sandbox in a new user namespace. The same feature is also a large "
        "kernel attack surface when any local user can use it: a root-mode host does not need it "
        "for unprivileged users (inside sandboxes agentjail sets every max_*_namespaces to 0).";
    char max[32] = "", clone_ok[32] = "", aa[32] = "", value[320];
    long vmax = -1, vclone = -1, vaa = -1;
    bool restricted;
    int trial = 1;

    if (read_host_file(c, "proc/sys/user/max_user_namespaces", max, sizeof(max)) < 0)
        snprintf(max, sizeof(max), "absent");
    else
        (void)parse_long(max, &vmax); /* unparsable: stays -1, shown as read */
    if (read_host_file(c, "proc/sys/kernel/unprivileged_userns_clone", clone_ok, sizeof(clone_ok)) < 0)
        snprintf(clone_ok, sizeof(clone_ok), "absent");
    else
        (void)parse_long(clone_ok, &vclone);
    if (read_host_file(c, "proc/sys/kernel/apparmor_restrict_unprivileged_userns", aa, sizeof(aa)) < 0)
        snprintf(aa, sizeof(aa), "absent");
    else
        (void)parse_long(aa, &vaa);
    if (!c->root)
        trial = try_userns();
    restricted = vclone == 0 || vaa == 1;
    snprintf(value, sizeof(value),
             "trial unshare(CLONE_NEWUSER) as euid %u: %s; user.max_user_namespaces=%s, "
             "kernel.unprivileged_userns_clone=%s, kernel.apparmor_restrict_unprivileged_userns=%s",
             (unsigned)geteuid(),
             c->root ? "not run (--sysroot)" : trial == 0 ? "works" : strerror(-trial), max, clone_ok, aa);
    if (vmax == 0 || (!c->root && trial < 0))
        return add(c, "userns.available", AJ_POSTURE_FAIL, value, why,
                   vmax == 0 ? "set user.max_user_namespaces=15000 in /etc/sysctl.d/"
                   : restricted && geteuid() != 0
                       ? "run agentjail as root (root mode needs no unprivileged user namespaces), "
                         "or allow them: kernel.unprivileged_userns_clone=1 (Debian) or an AppArmor "
                         "profile with 'userns,' for agentjail (Ubuntu 24.04)"
                       : "allow user namespaces for agentjail: in a container, a seccomp profile "
                         "that permits unshare/clone with CLONE_NEWUSER; on the host, "
                         "user.max_user_namespaces > 0");
    if (c->root && vmax < 0)
        return add(c, "userns.available", AJ_POSTURE_UNKNOWN, value, why,
                   "run 'agentjail check' on the live host");
    if (!restricted && geteuid() == 0)
        return add(c, "userns.available", AJ_POSTURE_WARN, value, why,
                   "agentjail runs as root here and does not need unprivileged user namespaces: "
                   "set kernel.unprivileged_userns_clone=0 (Debian) or "
                   "kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu) in /etc/sysctl.d/");
    return add(c, "userns.available", AJ_POSTURE_OK, value, why, "nothing to change");
}

/* ---- a trial run ------------------------------------------------------------------ */

/* The findings above read the host's settings; inside a container, what
 * decides whether a run works is the container's seccomp profile, its
 * capabilities and its read-only /proc/sys and cgroups, which none of them
 * sees. So build a real minimal sandbox: /bin/true under the default
 * policy, through the library exactly as `agentjail run` does, and report
 * what run will do, with the fix (the run's own error names it). */
static void missing_layers(const struct aj_result *res, uint64_t want, char *buf, size_t size)
{
    size_t off = 0;

    buf[0] = '\0';
    for (unsigned i = 0; i < AJ_LAYER_COUNT && i < 64; i++) {
        if ((want & AJ_LAYER_BIT(i)) && !aj_result_has_layer(res, (enum aj_layer)i) && off + 1 < size) {
            int n = snprintf(buf + off, size - off, "%s%s", off ? ", " : "", aj_layer_name((enum aj_layer)i));
            if (n < 0)
                break;
            off += (size_t)n < size - off ? (size_t)n : size - off - 1;
        }
    }
}

static uint64_t missing_mask(const struct aj_result *res, uint64_t want)
{
    uint64_t m = 0;

    for (unsigned i = 0; i < AJ_LAYER_COUNT && i < 64; i++)
        if ((want & AJ_LAYER_BIT(i)) && !aj_result_has_layer(res, (enum aj_layer)i))
            m |= AJ_LAYER_BIT(i);
    return m;
}

/* "trial": {"outcome": "not_run"|"failed"|"degraded"|"ran", "mode":
 * "root"|"rootless"|null, "missing": [layer names of the default policy
 * the trial lacked]}: run.trial's finding as data. */
static json_t *trial_json(const struct ctx *c)
{
    static const char *const outcomes[] = {"not_run", "failed", "degraded", "ran"};
    json_t *o, *missing = json_array();

    if (!missing)
        return NULL;
    for (unsigned i = 0; i < AJ_LAYER_COUNT && i < 64; i++)
        if ((c->trial_missing & AJ_LAYER_BIT(i)) &&
            json_array_append_new(missing, json_string(aj_layer_name((enum aj_layer)i))) < 0) {
            json_decref(missing);
            return NULL;
        }
    o = json_pack("{s:s, s:o, s:o}", "outcome", outcomes[c->trial], "mode",
                  c->trial == TRIAL_RAN || c->trial == TRIAL_DEGRADED
                      ? json_string(c->trial_rootless ? "rootless" : "root")
                      : json_null(),
                  "missing", missing);
    return o;
}

static int check_trial_run(struct ctx *c)
{
    static const char *const why = "check reads the host's settings; a container's seccomp profile, capabilities "
                                   "and read-only /proc/sys or cgroups only show when a sandbox is built";
    const uint64_t security = AJ_LAYER_BIT(AJ_LAYER_USERNS) | AJ_LAYER_BIT(AJ_LAYER_PIDNS) | AJ_LAYER_BIT(AJ_LAYER_MOUNTNS) | AJ_LAYER_BIT(AJ_LAYER_NETNS) |
                              AJ_LAYER_BIT(AJ_LAYER_IPCNS) | AJ_LAYER_BIT(AJ_LAYER_UTSNS) | AJ_LAYER_BIT(AJ_LAYER_CGROUPNS) | AJ_LAYER_BIT(AJ_LAYER_ROOTFS) |
                              AJ_LAYER_BIT(AJ_LAYER_SECCOMP) | AJ_LAYER_BIT(AJ_LAYER_LANDLOCK_FS) | AJ_LAYER_BIT(AJ_LAYER_NNP) | AJ_LAYER_BIT(AJ_LAYER_KEYRING) |
                              AJ_LAYER_BIT(AJ_LAYER_DECOYS) | AJ_LAYER_BIT(AJ_LAYER_NO_NESTED_NS) | AJ_LAYER_BIT(AJ_LAYER_MONITOR);
    const uint64_t limits = AJ_LAYER_BIT(AJ_LAYER_CGROUP) | AJ_LAYER_BIT(AJ_LAYER_MEMORY_LIMIT) | AJ_LAYER_BIT(AJ_LAYER_PIDS_LIMIT);
    char *const argv[] = {"/bin/true", NULL};
    struct aj_policy pol;
    struct aj_result res;
    struct aj_error rerr = {0};
    struct aj_request req = AJ_REQUEST_INIT;
    char value[1024], miss[512];
    int devnull, r;

    if (c->root) /* a snapshot: nothing to run */
        return add(c, "run.trial", AJ_POSTURE_UNKNOWN, "not run (--sysroot)", why,
                   "run agentjail check on the live host (or inside the container) to try a sandbox");
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        return aj_err(c->err, errno, "open /dev/null");
    req.argv = argv;
    req.stdio[1] = req.stdio[2] = AJ_STDIO_OF_FD(devnull);
    aj_policy_init(&pol);
    r = aj_run_ex(&pol, &req, &res, &rerr);
    if (r < 0) {
        const char *fix = strstr(rerr.msg, "fix: ");
        char degraded[256] = "";
        /* Would --allow-degraded work? Say so, with what it lacks. */
        pol.allow_degraded = true;
        c->trial = TRIAL_FAILED;
        if (aj_run_ex(&pol, &req, &res, &(struct aj_error){0}) == 0 && res.degraded) {
            c->trial = TRIAL_DEGRADED;
            c->trial_rootless = res.rootless;
            c->trial_missing = missing_mask(&res, security | limits | AJ_LAYER_BIT(AJ_LAYER_UID_ISOLATION));
            missing_layers(&res, security | limits, miss, sizeof(miss));
            snprintf(degraded, sizeof(degraded), "; --allow-degraded would run, without: %.200s", miss);
        }
        aj_policy_clear(&pol);
        (void)close(devnull);
        snprintf(value, sizeof(value), "agentjail run fails here: %s%s", rerr.msg, degraded);
        return add(c, "run.trial", AJ_POSTURE_FAIL, value, why,
                   fix ? fix + 5 : "see the error; docs/deploy.md covers containers");
    }
    aj_policy_clear(&pol);
    (void)close(devnull);
    if (res.status != AJ_STATUS_OK) {
        c->trial = TRIAL_FAILED;
        snprintf(value, sizeof(value), "agentjail run of /bin/true ended %s (%.400s)", aj_status_name(res.status),
                 res.error);
        return add(c, "run.trial", AJ_POSTURE_FAIL, value, why, "see the error; docs/deploy.md covers containers");
    }
    c->trial = TRIAL_RAN;
    c->trial_rootless = res.rootless;
    c->trial_missing = missing_mask(&res, security | limits | AJ_LAYER_BIT(AJ_LAYER_UID_ISOLATION));
    missing_layers(&res, security, miss, sizeof(miss));
    if (miss[0]) {
        snprintf(value, sizeof(value), "agentjail run works, without: %s", miss);
        return add(c, "run.trial", AJ_POSTURE_FAIL, value, why,
                   "a layer the default policy asks for is missing: see docs/deploy.md");
    }
    missing_layers(&res, limits, miss, sizeof(miss));
    if (miss[0]) {
        snprintf(value, sizeof(value), "agentjail run works, without the cgroup limits: %s", miss);
        return add(c, "run.trial", AJ_POSTURE_WARN, value, why,
                   "memory and process limits need a writable cgroup: run as root with the cgroup hierarchy "
                   "(in Docker: a writable cgroup mount, docs/deploy.md), or in a delegated cgroup v2 scope "
                   "(systemd-run --user -p Delegate=yes)");
    }
    return add(c, "run.trial", AJ_POSTURE_OK, "agentjail run works here with every layer of the default policy",
               why, "nothing to change");
}

/* ---- the report ----------------------------------------------------------------- */

int aj_posture_check(const struct aj_posture_options *opts, json_t **ret, struct aj_error *err)
{
    struct ctx c = {.err = err};
    char release[128] = "";
    json_t *report;
    int r;

    *ret = NULL;
    if (opts && opts->sysroot && opts->sysroot[0])
        c.root = opts->sysroot;
    c.findings = json_array();
    if (!c.findings)
        return aj_err(err, ENOMEM, "posture report");
    (void)read_host_file(&c, "proc/sys/kernel/osrelease", release, sizeof(release)); /* "" if not */
    if ((r = check_kernel_cves(&c, release)) < 0 || (r = check_landlock(&c)) < 0 ||
        (r = check_seccomp(&c)) < 0 || (r = check_lsm(&c)) < 0 || (r = check_kernel_layers(&c)) < 0 ||
        (r = check_cgroups(&c)) < 0 || (r = check_cgroup_limits(&c)) < 0 || (r = check_userns(&c)) < 0 ||
        (r = check_trial_run(&c)) < 0)
        goto fail;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(sysctl_rules); i++)
        if ((r = check_sysctl(&c, &sysctl_rules[i])) < 0)
            goto fail;
    report = json_pack("{s:i, s:s, s:i, s:o}", "version", 1, "kernel", release, "euid",
                       (json_int_t)geteuid(), "findings", c.findings);
    c.findings = NULL; /* "o" stole it, also on failure */
    if (!report)
        return aj_err(err, ENOMEM, "posture report");
    {
        json_t *sum = json_object();
        for (int s = AJ_POSTURE_OK; s <= AJ_POSTURE_UNKNOWN; s++)
            if (!sum || json_object_set_new(sum, status_names[s],
                                            json_integer((json_int_t)aj_posture_count(
                                                report, (enum aj_posture_status)s))) < 0) {
                json_decref(sum);
                json_decref(report);
                return aj_err(err, ENOMEM, "posture report");
            }
        if (json_object_set_new(report, "summary", sum) < 0 ||
            json_object_set_new(report, "trial", trial_json(&c)) < 0) {
            json_decref(report);
            return aj_err(err, ENOMEM, "posture report");
        }
    }
    *ret = report;
    return 0;
fail:
    json_decref(c.findings);
    return r;
}

size_t aj_posture_count(const json_t *report, enum aj_posture_status s)
{
    const json_t *f, *findings = json_object_get(report, "findings");
    size_t i, n = 0;

    json_array_foreach(findings, i, f) {
        const char *st = json_string_value(json_object_get(f, "status"));
        if (st && strcmp(st, aj_posture_status_name(s)) == 0)
            n++;
    }
    return n;
}
