/* SPDX-License-Identifier: Apache-2.0 */
/* Capabilities, no_new_privs, seccomp, uid, and whether new user and mount
 * namespaces can be created (the usual way to regain capabilities). */
#include <errno.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aj_util.h"
#include "probe.h"

/* How much a capability helps an escape: RISK_HOST acts on the host
 * (modules, raw I/O, other processes, kernel attack surface), RISK_LOCAL
 * bypasses file and identity checks inside, RISK_NONE is routine. */
enum cap_risk { RISK_NONE, RISK_LOCAL, RISK_HOST };

static const struct {
    const char *name;
    enum cap_risk risk;
} cap_table[] = {
    [CAP_CHOWN] = {"CAP_CHOWN", RISK_LOCAL},
    [CAP_DAC_OVERRIDE] = {"CAP_DAC_OVERRIDE", RISK_LOCAL},
    [CAP_DAC_READ_SEARCH] = {"CAP_DAC_READ_SEARCH", RISK_HOST}, /* open_by_handle_at: "shocker" */
    [CAP_FOWNER] = {"CAP_FOWNER", RISK_LOCAL},
    [CAP_FSETID] = {"CAP_FSETID", RISK_NONE},
    [CAP_KILL] = {"CAP_KILL", RISK_NONE},
    [CAP_SETGID] = {"CAP_SETGID", RISK_LOCAL},
    [CAP_SETUID] = {"CAP_SETUID", RISK_LOCAL},
    [CAP_SETPCAP] = {"CAP_SETPCAP", RISK_LOCAL},
    [CAP_LINUX_IMMUTABLE] = {"CAP_LINUX_IMMUTABLE", RISK_LOCAL},
    [CAP_NET_BIND_SERVICE] = {"CAP_NET_BIND_SERVICE", RISK_NONE},
    [CAP_NET_BROADCAST] = {"CAP_NET_BROADCAST", RISK_NONE},
    [CAP_NET_ADMIN] = {"CAP_NET_ADMIN", RISK_HOST},
    [CAP_NET_RAW] = {"CAP_NET_RAW", RISK_LOCAL},
    [CAP_IPC_LOCK] = {"CAP_IPC_LOCK", RISK_NONE},
    [CAP_IPC_OWNER] = {"CAP_IPC_OWNER", RISK_LOCAL},
    [CAP_SYS_MODULE] = {"CAP_SYS_MODULE", RISK_HOST},
    [CAP_SYS_RAWIO] = {"CAP_SYS_RAWIO", RISK_HOST},
    [CAP_SYS_CHROOT] = {"CAP_SYS_CHROOT", RISK_NONE},
    [CAP_SYS_PTRACE] = {"CAP_SYS_PTRACE", RISK_HOST},
    [CAP_SYS_PACCT] = {"CAP_SYS_PACCT", RISK_LOCAL},
    [CAP_SYS_ADMIN] = {"CAP_SYS_ADMIN", RISK_HOST},
    [CAP_SYS_BOOT] = {"CAP_SYS_BOOT", RISK_HOST},
    [CAP_SYS_NICE] = {"CAP_SYS_NICE", RISK_NONE},
    [CAP_SYS_RESOURCE] = {"CAP_SYS_RESOURCE", RISK_LOCAL},
    [CAP_SYS_TIME] = {"CAP_SYS_TIME", RISK_LOCAL},
    [CAP_SYS_TTY_CONFIG] = {"CAP_SYS_TTY_CONFIG", RISK_LOCAL},
    [CAP_MKNOD] = {"CAP_MKNOD", RISK_LOCAL},
    [CAP_LEASE] = {"CAP_LEASE", RISK_NONE},
    [CAP_AUDIT_WRITE] = {"CAP_AUDIT_WRITE", RISK_NONE},
    [CAP_AUDIT_CONTROL] = {"CAP_AUDIT_CONTROL", RISK_LOCAL},
    [CAP_SETFCAP] = {"CAP_SETFCAP", RISK_LOCAL},
    [CAP_MAC_OVERRIDE] = {"CAP_MAC_OVERRIDE", RISK_HOST},
    [CAP_MAC_ADMIN] = {"CAP_MAC_ADMIN", RISK_HOST},
    [CAP_SYSLOG] = {"CAP_SYSLOG", RISK_LOCAL},
    [CAP_WAKE_ALARM] = {"CAP_WAKE_ALARM", RISK_NONE},
    [CAP_BLOCK_SUSPEND] = {"CAP_BLOCK_SUSPEND", RISK_NONE},
    [CAP_AUDIT_READ] = {"CAP_AUDIT_READ", RISK_NONE},
    [38] = {"CAP_PERFMON", RISK_LOCAL},
    [39] = {"CAP_BPF", RISK_HOST},
    [40] = {"CAP_CHECKPOINT_RESTORE", RISK_LOCAL},
};

#define PR_CAP_BPF 39

static uint64_t parse_hex_field(const char *status, const char *key, bool *ok)
{
    const char *p = strstr(status, key);
    char *end;
    uint64_t v;

    if (!p) {
        *ok = false;
        return 0;
    }
    errno = 0;
    v = strtoull(p + strlen(key), &end, 16);
    if (errno || end == p + strlen(key))
        *ok = false;
    return v;
}

void pr_creds_load(struct pr_creds *cr)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    char status[8192];
    bool ok = true;

    memset(cr, 0, sizeof(*cr));
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capget, &hdr, d) == 0) {
        cr->eff = (uint64_t)d[1].effective << 32 | d[0].effective;
        cr->prm = (uint64_t)d[1].permitted << 32 | d[0].permitted;
        cr->inh = (uint64_t)d[1].inheritable << 32 | d[0].inheritable;
        for (int i = 0; i < 64; i++) {
            if (prctl(PR_CAPBSET_READ, i, 0, 0, 0) == 1)
                cr->bnd |= 1ULL << i;
            if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, i, 0, 0) == 1)
                cr->amb |= 1ULL << i;
        }
        cr->known = true;
        return;
    }
    /* A filter that refuses capget: /proc still tells. */
    if (pr_read_text("/proc/self/status", status, sizeof(status)) < 0)
        return;
    cr->eff = parse_hex_field(status, "CapEff:", &ok);
    cr->prm = parse_hex_field(status, "CapPrm:", &ok);
    cr->inh = parse_hex_field(status, "CapInh:", &ok);
    cr->bnd = parse_hex_field(status, "CapBnd:", &ok);
    cr->amb = parse_hex_field(status, "CapAmb:", &ok);
    cr->known = ok;
}

/* 1: the initial user namespace (uid_map is the identity over all uids),
 * 0: a child user namespace, -1: cannot tell. */
static int initial_userns(void)
{
    char map[256];
    unsigned long a, b, n;
    char *save = NULL, *t[3];

    if (pr_read_text("/proc/self/uid_map", map, sizeof(map)) <= 0)
        return -1;
    t[0] = strtok_r(map, " \t\n", &save);
    t[1] = strtok_r(NULL, " \t\n", &save);
    t[2] = strtok_r(NULL, " \t\n", &save);
    if (!pr_parse_uint(t[0], &a) || !pr_parse_uint(t[1], &b) || !pr_parse_uint(t[2], &n))
        return -1;
    return a == 0 && b == 0 && n == 4294967295UL && !strtok_r(NULL, " \t\n", &save);
}

/* List the capabilities in set (names, worst first) and return the
 * worst risk among them. */
static enum cap_risk describe_caps(uint64_t set, struct pr_list *l)
{
    enum cap_risk worst = RISK_NONE;

    for (int pass = RISK_HOST; pass >= RISK_NONE; pass--) {
        for (size_t i = 0; i < AJ_ARRAY_SIZE(cap_table); i++) {
            if (!((set >> i) & 1) || (int)cap_table[i].risk != pass)
                continue;
            if (pass == RISK_NONE && l->n >= 4) { /* routine ones: a few names suffice */
                l->dropped++;
                continue;
            }
            pr_list_add(l, "%s", cap_table[i].name);
            if (cap_table[i].risk > worst)
                worst = cap_table[i].risk;
        }
    }
    for (int i = (int)AJ_ARRAY_SIZE(cap_table); i < 64; i++) {
        if ((set >> i) & 1) { /* newer than this table: unknown, so assume the worst */
            pr_list_add(l, "cap %d", i);
            worst = RISK_HOST;
        }
    }
    return worst;
}

static void report_set(struct pr_ctx *c, const char *id, const char *title, uint64_t set,
                       enum pr_sev host_sev, const char *why, int init_ns)
{
    struct pr_list l = {0};
    enum cap_risk risk;
    enum pr_sev sev;

    if (set == 0) {
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_ABSENT, host_sev, title, "empty (0x0)");
        return;
    }
    risk = describe_caps(set, &l);
    if (risk == RISK_NONE) {
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_INFO, PR_SEV_INFO, title,
               "0x%016" PRIx64 ": only routine capabilities (%s)", set, pr_list_str(&l));
        return;
    }
    sev = risk == RISK_HOST ? host_sev : PR_SEV_MEDIUM;
    /* In a child user namespace, capabilities act on that namespace's own
     * resources; they still open kernel attack surface. */
    if (init_ns == 0 && sev == PR_SEV_CRITICAL)
        sev = PR_SEV_HIGH;
    pr_add(c, id, PR_CAT_PRIVILEGES, PR_EXPOSED, sev, title, "0x%016" PRIx64 ": %s%s%s", set,
           pr_list_str(&l), why,
           init_ns == 1   ? " (initial user namespace: they act on the host)"
           : init_ns == 0 ? " (inside a child user namespace)"
                          : "");
}

void pr_check_caps(struct pr_ctx *c)
{
    const struct pr_creds *cr = &c->creds;
    int init_ns = initial_userns();
    int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
    const char *ids[] = {"caps.effective", "caps.permitted", "caps.bounding", "caps.ambient"};

    if (!cr->known) {
        for (size_t i = 0; i < AJ_ARRAY_SIZE(ids); i++)
            pr_add(c, ids[i], PR_CAT_PRIVILEGES, PR_UNKNOWN, PR_SEV_HIGH, "capability set",
                   "capget refused and /proc/self/status unreadable");
        return;
    }
    report_set(c, "caps.effective", "effective capabilities", cr->eff, PR_SEV_CRITICAL, "",
               init_ns);
    report_set(c, "caps.permitted", "permitted capabilities", cr->prm & ~cr->eff, PR_SEV_CRITICAL,
               " (permitted but not effective: capset raises them)", init_ns);
    report_set(c, "caps.ambient", "ambient capabilities", cr->amb, PR_SEV_HIGH,
               " (kept across execve of any program)", init_ns);
    if (cr->bnd && nnp == 1) {
        struct pr_list l = {0};
        describe_caps(cr->bnd, &l);
        pr_add(c, "caps.bounding", PR_CAT_PRIVILEGES, PR_INFO, PR_SEV_MEDIUM,
               "bounding capabilities",
               "0x%016" PRIx64 " (%s), but no_new_privs is set: no execve can grant them", cr->bnd,
               pr_list_str(&l));
    } else {
        report_set(c, "caps.bounding", "bounding capabilities", cr->bnd, PR_SEV_MEDIUM,
                   " (a setuid-root or file-capability program could grant them)", init_ns);
    }
}

/* ---- no_new_privs, seccomp, uid ---------------------------------------- */

/* "Key:\tvalue" from /proc/self/status. */
static bool status_field(const char *key, char *buf, size_t cap)
{
    char status[8192], *p;

    if (pr_read_text("/proc/self/status", status, sizeof(status)) < 0)
        return false;
    for (p = status; (p = strstr(p, key)); p++) {
        if (p == status || p[-1] == '\n') {
            p += strlen(key);
            p += strspn(p, " \t");
            snprintf(buf, cap, "%.*s", (int)strcspn(p, "\n"), p);
            return true;
        }
    }
    return false;
}

static void check_nnp(struct pr_ctx *c)
{
    const char *id = "privileges.no_new_privs", *title = "no_new_privs";
    char v[32];
    int r = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);

    if (r < 0 && status_field("NoNewPrivs:", v, sizeof(v)))
        r = strcmp(v, "1") == 0;
    if (r == 1)
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_BLOCKED, PR_SEV_MEDIUM, title,
               "set: setuid and file-capability programs run without extra privileges");
    else if (r == 0)
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_EXPOSED, PR_SEV_MEDIUM, title,
               "not set: a setuid-root or file-capability program raises privileges");
    else
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_UNKNOWN, PR_SEV_MEDIUM, title,
               "prctl(PR_GET_NO_NEW_PRIVS) refused and /proc/self/status unreadable");
}

static void check_seccomp(struct pr_ctx *c)
{
    const char *id = "privileges.seccomp", *title = "seccomp filter";
    char mode[32] = "", filters[32] = "?";
    unsigned long m;

    if (status_field("Seccomp:", mode, sizeof(mode)))
        (void)status_field("Seccomp_filters:", filters, sizeof(filters)); /* 5.9+ only */
    else {
        /* In strict mode this prctl would kill us, but then we could not
         * have got this far; with a filter it answers 2 (or is refused). */
        int r = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
        snprintf(mode, sizeof(mode), "%d", r < 0 ? 2 : r);
    }
    if (!pr_parse_uint(mode, &m))
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_UNKNOWN, PR_SEV_HIGH, title, "mode unreadable");
    else if (m == 0)
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_EXPOSED, PR_SEV_HIGH, title,
               "mode 0: no filter, every syscall reaches the kernel");
    else
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_BLOCKED, PR_SEV_HIGH, title,
               "mode %lu (%s), %s filter(s)", m, m == 1 ? "strict" : "filter", filters);
}

static void check_uid(struct pr_ctx *c)
{
    const char *id = "privileges.uid", *title = "user id";
    uid_t r, e, s;
    int init_ns;

    if (getresuid(&r, &e, &s) < 0) {
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_UNKNOWN, PR_SEV_HIGH, title, "getresuid: %s",
               pr_errname(errno));
        return;
    }
    if (e != 0 && s != 0 && r != 0) {
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_ABSENT, PR_SEV_HIGH, title, "uid %u, euid %u: not root",
               (unsigned)r, (unsigned)e);
        return;
    }
    init_ns = initial_userns();
    if (init_ns == 0)
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_INFO, PR_SEV_HIGH, title,
               "uid %u, euid %u: root of a child user namespace only", (unsigned)r, (unsigned)e);
    else
        pr_add(c, id, PR_CAT_PRIVILEGES, PR_EXPOSED, PR_SEV_HIGH, title,
               "uid %u, euid %u, saved %u: root%s: owns every root-owned host file it can see",
               (unsigned)r, (unsigned)e, (unsigned)s,
               init_ns == 1 ? " in the initial user namespace" : "");
}

void pr_check_privileges(struct pr_ctx *c)
{
    check_nnp(c);
    check_seccomp(c);
    check_uid(c);
}

/* ---- namespaces -------------------------------------------------------- */

static long try_unshare(void *arg, long *aux)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    long r = unshare(*(int *)arg);

    /* In a fresh user namespace the child holds every capability over it:
     * report how many, to show what an attacker would get. */
    if (r == 0 && syscall(SYS_capget, &hdr, d) == 0)
        *aux = __builtin_popcountll((uint64_t)d[1].effective << 32 | d[0].effective);
    return r;
}

static void append_sysctls(struct pr_list *l)
{
    static const char *const knobs[] = {
        "/proc/sys/user/max_user_namespaces",
        "/proc/sys/kernel/unprivileged_userns_clone",             /* Debian/Ubuntu patch */
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns", /* Ubuntu 23.10+ */
    };
    long v;

    for (size_t i = 0; i < AJ_ARRAY_SIZE(knobs); i++)
        if (pr_read_long(knobs[i], &v) == 0)
            pr_list_add(l, "%s=%ld", knobs[i] + strlen("/proc/sys/"), v);
}

void pr_check_namespaces(struct pr_ctx *c)
{
    struct pr_child_out o;
    struct pr_list ctx = {0};
    int flags;

    append_sysctls(&ctx);
    if (pr_wanted(c, "namespaces.user")) {
        flags = CLONE_NEWUSER;
        if (pr_in_child(try_unshare, &flags, &o) < 0)
            pr_add(c, "namespaces.user", PR_CAT_PRIVILEGES, PR_UNKNOWN, PR_SEV_HIGH,
                   "new user namespace", "could not start a probe child");
        else if (o.signo || o.r < 0)
            pr_add(c, "namespaces.user", PR_CAT_PRIVILEGES, PR_BLOCKED, PR_SEV_HIGH,
                   "new user namespace", "unshare(CLONE_NEWUSER) refused: %s%s%s",
                   o.signo ? strsignal(o.signo) : pr_errname(o.err), ctx.n ? "; " : "",
                   pr_list_str(&ctx));
        else
            pr_add(c, "namespaces.user", PR_CAT_PRIVILEGES, PR_EXPOSED, PR_SEV_HIGH,
                   "new user namespace",
                   "unshare(CLONE_NEWUSER) succeeded in a child, which then held %ld "
                   "capabilities: the namespaced kernel attack surface (netfilter, "
                   "filesystem mounts, ...) is open%s%s",
                   o.aux, ctx.n ? "; " : "", pr_list_str(&ctx));
        if (!o.signo && c->userns_err < 0)
            c->userns_err = o.r < 0 ? o.err : 0;
    }
    if (pr_wanted(c, "namespaces.mount")) {
        const char *id = "namespaces.mount", *title = "new mount namespace";
        flags = CLONE_NEWNS;
        if (pr_in_child(try_unshare, &flags, &o) == 0 && !o.signo && o.r == 0) {
            pr_add(c, id, PR_CAT_PRIVILEGES, PR_EXPOSED, PR_SEV_HIGH, title,
                   "unshare(CLONE_NEWNS) succeeded directly: CAP_SYS_ADMIN over this mount "
                   "namespace's user namespace");
            return;
        }
        flags = CLONE_NEWUSER | CLONE_NEWNS;
        if (pr_in_child(try_unshare, &flags, &o) < 0)
            pr_add(c, id, PR_CAT_PRIVILEGES, PR_UNKNOWN, PR_SEV_HIGH, title,
                   "could not start a probe child");
        else if (!o.signo && o.r == 0)
            pr_add(c, id, PR_CAT_PRIVILEGES, PR_EXPOSED, PR_SEV_MEDIUM, title,
                   "refused directly, but created together with a new user namespace: "
                   "mount, overlayfs and FUSE code is reachable");
        else
            pr_add(c, id, PR_CAT_PRIVILEGES, PR_BLOCKED, PR_SEV_HIGH, title,
                   "unshare(CLONE_NEWNS) and unshare(CLONE_NEWUSER|CLONE_NEWNS) refused: %s",
                   o.signo ? strsignal(o.signo) : pr_errname(o.err));
    }
}

bool pr_bpf_capable(const struct pr_ctx *c)
{
    return pr_has_cap(c, PR_CAP_BPF) || pr_has_cap(c, CAP_SYS_ADMIN);
}
