/* SPDX-License-Identifier: Apache-2.0 */
/* The risk report. See aj_report.h; the method (every number below and why)
 * is docs/risk-model.md, which must change with this file. */
#include "aj_report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"
#include "aj_posture.h"
#include "aj_util.h"

#ifndef AJ_VERSION
#define AJ_VERSION "unknown"
#endif

#define REPORT_VERSION 1

/* ---- the six dimensions ----------------------------------------------------------- */

enum dim { DIM_D = 0, DIM_A, DIM_M, DIM_AS, DIM_G, DIM_E, NDIM };

struct dim_def {
    const char *key, *letter, *name, *question;
    int inherent;
    int floor; /* what agentjail alone cannot take the residual below */
    const char *inherent_why;
    const char *floor_why;
};

/* The inherent scores are the source write-up's scores for agent code
 * execution without a boundary (docs/risk-model.md says why each). */
static const struct dim_def dims[NDIM] = {
    {"detectability", "D", "Detectability",
     "How likely is an escape attempt to go unnoticed?", 4, 1,
     "Escape attempts look like ordinary process activity to the host; host EDR is not built to "
     "tell them apart, so most attempts are seen only if someone analyses behaviour.",
     ""},
    {"autonomy", "A", "Autonomy sensitivity",
     "How much does acting without a human in the loop raise the risk?", 4, 2,
     "The agent writes and runs code on its own: an injected instruction becomes an executed "
     "escape attempt with no person in between, and it can retry.",
     "the agent still runs code it wrote itself; only the deployment can put a person back in "
     "the loop"},
    {"multiplicative", "M", "Multiplicative potential",
     "How far does one compromised run spread?", 4, 1,
     "A run that gets out shares the host with every other workload and tenant on it, and "
     "usually the agent's own account.",
     ""},
    {"attack_surface", "A", "Attack surface",
     "How much kernel and runtime can the code reach to break out?", 3, 1,
     "The kernel's syscall interface, the container runtime and the orchestration layer are all "
     "within reach of code that runs on the host.",
     ""},
    {"governance", "G", "Governance gap",
     "How far is the institution from showing the boundary holds and is watched?", 3, 2,
     "Few institutions can show that the sandbox they run is the one they approved, or that "
     "anyone watches for escape attempts.",
     "agentjail produces the evidence; review, ownership and response remain the institution's "
     "process"},
    {"enterprise_impact", "E", "Enterprise impact",
     "What is the worst credible outcome if the boundary fails?", 5, 3,
     "Getting out reaches the host, the orchestration layer and, through them, credentials and "
     "other customers' data: a material, reportable failure of isolation.",
     "the sandbox shares the host kernel: an escape through a kernel bug still lands on the host"},
};

/* ---- measured facts ------------------------------------------------------------------ */

enum probe_cat { PCAT_ESCAPE = 0, PCAT_CRED, PCAT_KERNEL, PCAT_NET, NPCAT };

struct facts {
    const struct aj_policy *pol;
    const json_t *probe, *check;
    bool events_kept;
    /* from the probe: ids of findings it rates dangerous, by kind */
    json_t *probe_bad[NPCAT];
    size_t probe_total, probe_fail, probe_warn;
    /* derived */
    bool monitor, limits_held, time_bounded, secret_env;
    long euid; /* -1: unknown */
};

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

static const char *check_status(const struct facts *f, const char *id)
{
    const json_t *x;
    size_t i;

    json_array_foreach(json_object_get(f->check, "findings"), i, x)
        if (strcmp(str_or(x, "id", ""), id) == 0)
            return str_or(x, "status", "unknown");
    return NULL;
}

static bool check_is(const struct facts *f, const char *id, const char *status)
{
    const char *s = check_status(f, id);
    return s && strcmp(s, status) == 0;
}

/* agentjail-probe --json (schema 1) rates each finding: status "exposed"
 * means the vector is there, with a severity for how bad it is. Exposed at
 * medium or worse moves the scores; exposed at low is listed only. */
static bool probe_bad(const json_t *x)
{
    const char *sev = str_or(x, "severity", "");
    return strcmp(str_or(x, "status", ""), "exposed") == 0 &&
           (strcmp(sev, "critical") == 0 || strcmp(sev, "high") == 0 || strcmp(sev, "medium") == 0);
}

static bool probe_minor(const json_t *x)
{
    return strcmp(str_or(x, "status", ""), "exposed") == 0 && !probe_bad(x);
}

/* Which kind of exposure a probe finding is. Credentials and runtime
 * control sockets widen what an escape reaches (multiplicative, impact);
 * kernel findings and the rest widen the way out (attack surface). */
static enum probe_cat probe_category(const json_t *x)
{
    const char *cat = str_or(x, "category", "");

    if (strcmp(cat, "kernel") == 0)
        return PCAT_KERNEL;
    if (strcmp(cat, "credentials") == 0 || strcmp(cat, "runtime") == 0)
        return PCAT_CRED;
    if (strcmp(cat, "network") == 0)
        return PCAT_NET;
    return PCAT_ESCAPE;
}

static bool contains_any(const char *s, const char *const *words, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strstr(s, words[i]))
            return true;
    return false;
}

static bool name_looks_secret(const char *kv)
{
    static const char *const words[] = {"KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "AUTH"};
    size_t n = strcspn(kv, "=");
    char name[128];

    if (n >= sizeof(name))
        n = sizeof(name) - 1;
    memcpy(name, kv, n);
    name[n] = '\0';
    return contains_any(name, words, AJ_ARRAY_SIZE(words));
}

static bool probe_contradicts(const struct facts *f, const char *prefix);

static int facts_gather(struct facts *f, const struct aj_report_input *in)
{
    const struct aj_policy *pol = in->policy;
    const json_t *x;
    size_t i;

    memset(f, 0, sizeof(*f));
    f->pol = pol;
    f->probe = in->probe;
    f->check = in->check;
    f->events_kept = in->events_kept;
    for (int c = 0; c < NPCAT; c++)
        if (!(f->probe_bad[c] = json_array()))
            return -ENOMEM;
    json_array_foreach(json_object_get(in->probe, "findings"), i, x) {
        f->probe_total++;
        if (probe_bad(x)) {
            f->probe_fail++;
            if (json_array_append_new(f->probe_bad[probe_category(x)],
                                      json_string(str_or(x, "id", "?"))) < 0)
                return -ENOMEM;
        } else if (probe_minor(x)) {
            f->probe_warn++;
        }
    }
    /* The monitor needs seccomp user notification on the host, and the
     * probe must not have found the filter missing inside. */
    f->monitor = check_is(f, "seccomp.user_notif", "ok") && !probe_contradicts(f, "privileges.seccomp");
    /* Declared limits count only where the host has the controllers. */
    f->limits_held = pol->memory_max && pol->pids_max &&
                     (check_is(f, "cgroup.memory", "ok") || check_is(f, "cgroup.memory", "warn")) &&
                     (check_is(f, "cgroup.pids", "ok") || check_is(f, "cgroup.pids", "warn"));
    f->time_bounded = pol->timeout_ms || pol->cpu_time_ms;
    for (i = 0; i < pol->n_env; i++)
        if (name_looks_secret(pol->env[i]))
            f->secret_env = true;
    x = json_object_get(in->check, "euid");
    f->euid = json_is_integer(x) ? (long)json_integer_value(x) : -1;
    return 0;
}

/* A declared protection counts only if the probe, run inside the sandbox,
 * does not contradict it: an exposure whose id starts with prefix. */
static bool probe_contradicts(const struct facts *f, const char *prefix)
{
    const json_t *x;
    size_t i;

    for (int c = 0; c < NPCAT; c++)
        json_array_foreach(f->probe_bad[c], i, x)
            if (strncmp(json_string_value(x), prefix, strlen(prefix)) == 0)
                return true;
    return false;
}

static void facts_clear(struct facts *f)
{
    for (int c = 0; c < NPCAT; c++)
        json_decref(f->probe_bad[c]);
}

/* ---- scoring --------------------------------------------------------------------------- */

#define MAX_ADJ 32

struct adj {
    enum dim d;
    int delta;
    char reason[192];
    char evidence[256];
};

struct scoring {
    struct adj adj[MAX_ADJ];
    size_t n;
    int residual[NDIM];
    bool at_floor[NDIM];
};

static void add_adj(struct scoring *s, enum dim d, int delta, const char *reason,
                    const char *evidence)
{
    if (s->n >= MAX_ADJ)
        return; /* the rules below add at most ~20 */
    s->adj[s->n].d = d;
    s->adj[s->n].delta = delta;
    snprintf(s->adj[s->n].reason, sizeof(s->adj[s->n].reason), "%s", reason);
    snprintf(s->adj[s->n].evidence, sizeof(s->adj[s->n].evidence), "%s", evidence);
    s->n++;
}

/* "probe:a, probe:b" from an array of ids. */
/* "probe:a, probe:b (+3 more)" from an array of ids: whole ids only, and
 * the count of what did not fit. */
static void join_ids(char *buf, size_t size, const char *prefix, const json_t *ids)
{
    const size_t reserve = 16; /* " (+NNN more)" */
    const json_t *x;
    size_t i, off = 0, total = json_array_size(ids);

    buf[0] = '\0';
    if (size <= reserve)
        return;
    json_array_foreach(ids, i, x) {
        int n = snprintf(buf + off, size - reserve - off, "%s%s%s", i ? ", " : "", prefix,
                         json_string_value(x));
        if (n < 0 || (size_t)n >= size - reserve - off) {
            buf[off] = '\0';
            (void)snprintf(buf + off, size - off, " (+%zu more)", total - i);
            return;
        }
        off += (size_t)n;
    }
}

static const char *const layer_checks[] = {"landlock.abi", "seccomp.user_notif", "lsm.stack",
                                           "userns.available"};
static const char *const surface_sysctls[] = {
    "kernel.unprivileged_bpf_disabled", "vm.unprivileged_userfaultfd", "kernel.io_uring_disabled",
    "kernel.perf_event_paranoid",       "kernel.kptr_restrict",        "kernel.dmesg_restrict",
};

/* The dimension a key-table row's risk_dim names ("G"); NDIM for none. */
static enum dim dim_of(const char *letter)
{
    for (int d = 0; letter && d < NDIM; d++)
        if (strcmp(dims[d].letter, letter) == 0)
            return (enum dim)d;
    return NDIM;
}

/* Every rule here is a row of the tables in docs/risk-model.md. */
static void score(const struct facts *f, struct scoring *s)
{
    const struct aj_policy *pol = f->pol;
    char ev[256];
    size_t n;

    memset(s, 0, sizeof(*s));

    /* D: is an attempt seen? */
    if (f->monitor)
        add_adj(s, DIM_D, -1, "escape-indicative syscalls reach the supervisor, which records them",
                "check:seccomp.user_notif");
    if (pol->decoys)
        add_adj(s, DIM_D, -1, "decoy docker.sock and Kubernetes token turn probing into an event",
                "policy:detection.decoys");
    if (pol->alert_cmd || f->events_kept)
        add_adj(s, DIM_D, -1, "someone is told: an alert hook or kept audit events",
                pol->alert_cmd ? "policy:detection.alert_cmd" : "input:events_kept");

    /* A: does autonomy buy the attacker retries? */
    if (pol->on_escape == AJ_ON_ESCAPE_KILL)
        add_adj(s, DIM_A, -1, "the run ends at the first escape attempt: no second try",
                "policy:detection.on_escape=kill");
    if (f->time_bounded)
        add_adj(s, DIM_A, -1, "wall-clock or CPU-time limit bounds how long the code can keep trying",
                pol->timeout_ms ? "policy:limits.timeout" : "policy:limits.cpu_time");

    /* M: how far does one run spread? */
    if (f->limits_held)
        add_adj(s, DIM_M, -1, "memory and pids limits on cgroups the host provides: one run cannot "
                "starve the others", "policy:limits.memory, policy:limits.pids, check:cgroup.memory, "
                "check:cgroup.pids");
    if (f->euid == 0 && !probe_contradicts(f, "privileges.uid"))
        add_adj(s, DIM_M, -1, "root mode: each run has its own host uid, shared with no other run "
                "or the agent", "check:euid=0");
    {
        bool rw = false;
        for (size_t i = 0; i < pol->n_binds; i++)
            rw |= pol->binds[i].rw;
        if (!rw && !probe_contradicts(f, "filesystem.host_mounts"))
            add_adj(s, DIM_M, -1, "no writable host path: nothing the run writes reaches the host",
                    "policy:filesystem.binds");
    }
    if (f->probe && json_array_size(f->probe_bad[PCAT_CRED]) > 0) {
        join_ids(ev, sizeof(ev), "probe:", f->probe_bad[PCAT_CRED]);
        add_adj(s, DIM_M, +1, "credentials or a control socket reachable inside", ev);
    }

    /* AS: how much can the code reach to get out? */
    n = json_array_size(f->probe_bad[PCAT_ESCAPE]) + json_array_size(f->probe_bad[PCAT_NET]);
    if (f->probe && n == 0 && json_array_size(f->probe_bad[PCAT_KERNEL]) == 0)
        add_adj(s, DIM_AS, -1, "the probe found no escape vector inside this sandbox",
                "probe:all findings");
    if (pol->network == AJ_NET_NONE && json_array_size(f->probe_bad[PCAT_NET]) == 0)
        add_adj(s, DIM_AS, -1, "no network: no interface, TCP refused by Landlock",
                "policy:network.mode=none");
    /* loopback (the default): no egress either, but the kernel's TCP stack
     * is reachable; no credit for that surface. */
    if (f->probe && n > 0) {
        json_t *both = json_copy(f->probe_bad[PCAT_ESCAPE]);
        /* Out of memory: the escape ids alone, the delta is the same. */
        if (both && json_array_extend(both, f->probe_bad[PCAT_NET]) == 0)
            join_ids(ev, sizeof(ev), "probe:", both);
        else
            join_ids(ev, sizeof(ev), "probe:", f->probe_bad[PCAT_ESCAPE]);
        json_decref(both);
        add_adj(s, DIM_AS, n > 1 ? +2 : +1, "escape vectors open inside the sandbox", ev);
    }
    if (check_is(f, "kernel.cves", "fail") || json_array_size(f->probe_bad[PCAT_KERNEL]) > 0) {
        char e2[128];
        join_ids(e2, sizeof(e2), "probe:", f->probe_bad[PCAT_KERNEL]);
        snprintf(ev, sizeof(ev), "%s%s%s", check_is(f, "kernel.cves", "fail") ? "check:kernel.cves" : "",
                 check_is(f, "kernel.cves", "fail") && e2[0] ? ", " : "", e2);
        add_adj(s, DIM_AS, +2, "the kernel has a known local privilege escalation", ev);
    }
    ev[0] = '\0';
    for (size_t i = 0; i < AJ_ARRAY_SIZE(layer_checks); i++)
        if (check_is(f, layer_checks[i], "fail"))
            snprintf(ev + strlen(ev), sizeof(ev) - strlen(ev), "%scheck:%s", ev[0] ? ", " : "",
                     layer_checks[i]);
    if (ev[0])
        add_adj(s, DIM_AS, +1, "a kernel feature agentjail's layers rely on is missing", ev);
    ev[0] = '\0';
    n = 0;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(surface_sysctls); i++)
        if (check_is(f, surface_sysctls[i], "warn")) {
            snprintf(ev + strlen(ev), sizeof(ev) - strlen(ev), "%scheck:%s", ev[0] ? ", " : "",
                     surface_sysctls[i]);
            n++;
        }
    if (n >= 2)
        add_adj(s, DIM_AS, +1, "the host leaves kernel interfaces open that a filter bypass would reach",
                ev);

    /* G: is the boundary shown, not assumed? */
    if (f->probe && f->check && f->probe_fail == 0 && aj_posture_count(f->check, AJ_POSTURE_FAIL) == 0)
        add_adj(s, DIM_G, -1, "the enforced sandbox and the host were measured and found clean",
                "probe:all findings, check:all findings");
    /* Keys that weaken the policy on their own: each key-table row with a
     * risk penalty (src/lib/policy/keys.c), while the key is on its weaker
     * side. Penalties that depend on more than one key stay code here. */
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        enum dim d = dim_of(k->risk_dim);
        if (d < NDIM && aj_policy_key_is_weak(pol, k)) {
            snprintf(ev, sizeof(ev), "policy:%s", k->key);
            add_adj(s, d, k->risk_delta, k->risk_text, ev);
        }
    }
    if (pol->allow_bind_inside_writable && pol->n_binds)
        add_adj(s, DIM_G, +1, "a bind may come from inside a directory a sandbox could write (what is there "
                "may have been planted by an earlier run)", "policy:filesystem.allow_bind_inside_writable");

    /* E: what would a failure cost? */
    if (f->probe && json_array_size(f->probe_bad[PCAT_CRED]) == 0)
        add_adj(s, DIM_E, -1, "no credential, token or control socket inside the sandbox",
                "probe:credential findings");
    if (pol->n_env_pass == 0 && !f->secret_env)
        add_adj(s, DIM_E, -1, "nothing ambient: no variable passed from the caller, none named like "
                "a secret", "policy:environment");

    for (int d = 0; d < NDIM; d++) {
        int v = dims[d].inherent;
        for (size_t i = 0; i < s->n; i++)
            if ((int)s->adj[i].d == d)
                v += s->adj[i].delta;
        if (v < dims[d].floor) {
            v = dims[d].floor;
            s->at_floor[d] = true;
        }
        s->residual[d] = v > 5 ? 5 : v;
    }
}

/* Composite: the plain mean of the six scores, in tenths, rounded half up
 * (integer arithmetic: the same digits on every machine). */
static int composite_tenths(const int v[NDIM])
{
    int sum = 0;
    for (int d = 0; d < NDIM; d++)
        sum += v[d];
    return (sum * 100 / NDIM + 5) / 10;
}

static const char *band(int tenths)
{
    if (tenths < 20)
        return "low";
    if (tenths < 30)
        return "moderate";
    if (tenths < 40)
        return "high";
    return "critical";
}

/* ---- frameworks ------------------------------------------------------------------------ */

enum cond { C_ALWAYS = 0, C_NET_NONE, C_LIMITS, C_MONITOR, C_DECOYS, C_KILL, C_EVENTS, C_CHECK, C_NEVER };

struct mapping {
    const char *framework, *ref, *title, *controls, *covers, *misses;
    enum cond cond;
    const char *if_not; /* status when cond does not hold */
};

/* Our reading of each reference; "misses" is what an auditor must look for
 * elsewhere. Kept in step with the table in docs/risk-model.md. */
static const struct mapping mappings[] = {
    /* NIST CSF 2.0 */
    {"NIST CSF 2.0", "PR.AA-05", "Least-privilege access permissions",
     "empty capability sets, no_new_privs, own host uid per run (root mode), Landlock file rules, "
     "empty environment",
     "the code gets only what the policy names, with no ambient authority",
     "the agent's own accounts, API keys and tool permissions outside the sandbox; agentjail "
     "reviews no entitlements",
     C_ALWAYS, ""},
    {"NIST CSF 2.0", "PR.PS-01", "Configuration management",
     "one normalised policy, hashed; policy diff; verify runs the probe inside the enforced policy",
     "the configuration enforced is the configuration reviewed: its sha256 is in every result",
     "approval of policy changes and who owns them is the institution's process", C_ALWAYS, ""},
    {"NIST CSF 2.0", "PR.PS-05", "Unauthorised software is prevented from running",
     "read-only root, seccomp allow-list; noexec scratch space when the policy sets filesystem.noexec_tmp",
     "what the code can execute and leave behind is bounded; nothing persists after the run",
     "the agent's code is unvetted by design: agentjail does not judge what it does inside the "
     "boundary",
     C_ALWAYS, ""},
    {"NIST CSF 2.0", "PR.IR-01", "Environments protected from unauthorised logical access",
     "empty network namespace, Landlock TCP rules",
     "with network none the code has no route to any other system",
     "no egress proxy yet: a policy that needs the network gets no destination allow-list and no "
     "payload inspection",
     C_NET_NONE, "partial"},
    {"NIST CSF 2.0", "PR.IR-04", "Adequate resource capacity", "cgroup memory, pids and CPU limits, "
     "CPU-time and wall-clock limits, output caps",
     "a run cannot exhaust the shared host", "disk I/O bandwidth is not limited", C_LIMITS,
     "partial"},
    {"NIST CSF 2.0", "DE.CM-09", "Runtime environments are monitored",
     "seccomp user-notification monitor, decoys, audit events with ATT&CK technique tags",
     "escape-indicative syscalls and decoy touches are seen as they happen",
     "syscalls on the allow-list are not analysed: code that stays inside the allow-list raises "
     "nothing",
     C_MONITOR, "not applied"},
    {"NIST CSF 2.0", "RS.MI-01", "Incidents are contained",
     "on_escape kill, cgroup kill, pid-namespace teardown",
     "the whole run ends at the first escape attempt, nothing it started survives",
     "credentials the agent held are not revoked; the agent itself is not stopped", C_KILL,
     "partial"},
    {"NIST CSF 2.0", "ID.RA-01", "Vulnerabilities are identified",
     "agentjail check (kernel against a CVE table, hardening sysctls), agentjail probe",
     "known local privilege escalations in the running kernel, weak host settings",
     "the CVE table is a short curated list, not a vulnerability scanner", C_CHECK, "not applied"},
    /* NIST SP 800-53 Rev. 5 */
    {"NIST SP 800-53", "SC-39", "Process isolation",
     "user, pid, mount, network, IPC, UTS, cgroup and time namespaces; private root",
     "each run is a separate set of processes with its own view of the system",
     "the kernel is shared: this is not a hypervisor boundary", C_ALWAYS, ""},
    {"NIST SP 800-53", "SC-7", "Boundary protection", "empty network namespace, Landlock TCP rules",
     "no traffic crosses the sandbox boundary with network none",
     "no managed interface for runs that need the network (the egress proxy is not built), no "
     "content inspection",
     C_NET_NONE, "partial"},
    {"NIST SP 800-53", "AC-6", "Least privilege",
     "no capabilities, no_new_privs, unprivileged uid inside, own host uid per run",
     "the code runs with no privilege it could use against the host",
     "privileges of the agent platform and its service accounts", C_ALWAYS, ""},
    {"NIST SP 800-53", "CM-7", "Least functionality",
     "seccomp allow-list, minimal /dev, no nested namespaces",
     "kernel interfaces the code does not need are refused",
     "one allow-list per profile, not per task", C_ALWAYS, ""},
    {"NIST SP 800-53", "AU-2", "Event logging",
     "audit events (JSON Lines): start, exit, escape_attempt, canary, limit",
     "the events that matter for escape are defined and recorded",
     "no log shipping, retention or tamper protection: the event file is as safe as the host",
     C_EVENTS, "partial"},
    {"NIST SP 800-53", "SI-4", "System monitoring", "seccomp user-notification monitor, decoys",
     "escape attempts are detected in real time and can alert",
     "network payloads and allowed syscalls are not inspected", C_MONITOR, "not applied"},
    {"NIST SP 800-53", "SC-26", "Decoys", "docker.sock and Kubernetes token decoys (cloud "
     "credential decoys optional)",
     "probing for the usual escape targets is caught", "decoys cover the common targets only",
     C_DECOYS, "not applied"},
    {"NIST SP 800-53", "SC-44", "Detonation chambers", "the sandbox itself",
     "untrusted code runs where its effects are contained and observed",
     "no analysis of what the code did, for later blocking", C_ALWAYS, ""},
    /* NIST SP 800-190 */
    {"NIST SP 800-190", "4.4.3", "Insecure container runtime configurations",
     "secure defaults, one hashed policy, fail closed when a layer is missing, verify",
     "a weakened configuration is visible and does not start silently",
     "policies written for other runtimes are not checked", C_ALWAYS, ""},
    {"NIST SP 800-190", "4.4.2", "Unbounded network access from containers",
     "empty network namespace", "no network unless the policy asks for a private loopback",
     "no egress filtering for runs that need the network", C_NET_NONE, "partial"},
    {"NIST SP 800-190", "4.4.1", "Vulnerabilities within the runtime software",
     "the supervisor never joins a live sandbox, inherits no fds into it, keeps its binary out "
     "of reach (CVE-2019-5736 class)",
     "the runtime is not the easy way out", "agentjail's own code is not formally verified; keep "
     "it updated",
     C_ALWAYS, ""},
    {"NIST SP 800-190", "4.5.2", "Shared kernel",
     "seccomp allow-list, Landlock, no nested user namespaces, check's kernel CVE table",
     "the part of the kernel the code can reach is small and known",
     "a bug in an allowed syscall still escapes; for hostile multi-tenant code add a VM boundary",
     C_ALWAYS, ""},
    {"NIST SP 800-190", "4.5.1", "Large host OS attack surface",
     "agentjail check and its sysctl recommendations", "weak host settings are named with the fix",
     "check only reads: the host is not hardened for you", C_CHECK, "not applied"},
    {"NIST SP 800-190", "4.5.5", "Host OS file system tampering",
     "tmpfs root, read-only binds, Landlock", "the host file system is read-only or invisible",
     "a writable bind the policy names is writable", C_ALWAYS, ""},
    /* CIS Docker Benchmark, section 5 (container runtime); titles, not numbers: the numbering
     * moves between versions. */
    {"CIS Docker Benchmark", "5 runtime",
     "Restrict capabilities; no privileged containers; restrict acquiring additional privileges",
     "all capability sets empty, securebits locked, no_new_privs; no privileged mode exists",
     "the equivalents of --cap-drop=ALL and no-new-privileges, always on",
     "sections 1-4 (host, daemon, images) are about Docker itself and stay with it", C_ALWAYS, ""},
    {"CIS Docker Benchmark", "5 runtime",
     "Do not share the host's network, PID, IPC, UTS or user namespaces",
     "every namespace is new for every run", "the host's namespaces are never shared",
     "a loopback network is still a network: Landlock then allows TCP inside", C_NET_NONE,
     "partial"},
    {"CIS Docker Benchmark", "5 runtime",
     "Read-only root; no sensitive host directories; no host devices; no Docker socket",
     "tmpfs root, only the binds the policy names, minimal /dev, docker.sock only as a decoy",
     "the host's files and devices are out of sight",
     "agentjail does not refuse a sensitive path the policy itself names", C_ALWAYS, ""},
    {"CIS Docker Benchmark", "5 runtime", "Limit memory and PIDs; keep the default seccomp profile",
     "cgroup memory and pids limits, seccomp allow-list always on",
     "resource and syscall limits that cannot be switched off by accident",
     "CPU shares are off unless the policy sets cpus", C_LIMITS, "partial"},
    /* OWASP Non-Human Identities Top 10 (2025) */
    {"OWASP NHI Top 10", "NHI2", "Secret leakage",
     "empty environment, no inherited fds, probe lists credentials visible inside (names only)",
     "a run sees no secret it was not handed on purpose",
     "no scanning of code, output or logs for secrets; no secrets store", C_ALWAYS, ""},
    {"OWASP NHI Top 10", "NHI5", "Overprivileged NHI",
     "the run's own identity: no capabilities, own host uid",
     "the identity the code runs as holds nothing",
     "the privileges of the agent's service accounts and API keys are outside agentjail",
     C_ALWAYS, ""},
    {"OWASP NHI Top 10", "NHI7", "Long-lived secrets", "none",
     "nothing: agentjail does not issue, rotate or broker credentials",
     "secrets rotation and short-lived credentials (brokering is planned in the egress proxy, "
     "not built)",
     C_NEVER, "not addressed"},
    {"OWASP NHI Top 10", "NHI8", "Environment isolation",
     "a fresh sandbox per run: nothing shared between runs",
     "one run, one tenant's code, cannot reach another's", "isolation of the agent platform's "
     "own environments (dev, prod) is not agentjail's",
     C_ALWAYS, ""},
    /* OWASP Agentic AI - Threats and Mitigations */
    {"OWASP Agentic AI", "T11", "Unexpected RCE and code attacks", "the whole sandbox",
     "agent-written code runs contained, however hostile",
     "whether the code should run at all (review, intent checks) is decided elsewhere", C_ALWAYS,
     ""},
    {"OWASP Agentic AI", "T3", "Privilege compromise",
     "no capabilities, no_new_privs, no nested namespaces, decoy credentials",
     "the code cannot raise its own privilege on the host",
     "privilege the agent gains through its tools and tokens outside the sandbox", C_ALWAYS, ""},
    {"OWASP Agentic AI", "T2", "Tool misuse",
     "a code-execution tool bounded by the policy, escape attempts refused and recorded",
     "the blast radius of a misused code tool",
     "misuse within what the policy allows (say, deleting data in a writable bind) raises nothing",
     C_ALWAYS, ""},
    {"OWASP Agentic AI", "T4", "Resource overload", "cgroup limits, timeouts, output caps",
     "one run cannot exhaust the host", "many runs at once are the platform's to limit",
     C_LIMITS, "partial"},
    {"OWASP Agentic AI", "T8", "Repudiation and untraceability",
     "audit events, the policy hash and sandbox id in every result",
     "which code ran under which policy, and what it tried",
     "no tamper-evident log store; the agent's reasoning is not recorded", C_EVENTS, "partial"},
};

static bool cond_holds(const struct facts *f, enum cond c)
{
    switch (c) {
    case C_ALWAYS:
        return true;
    case C_NET_NONE:
        return f->pol->network == AJ_NET_NONE;
    case C_LIMITS:
        return f->limits_held;
    case C_MONITOR:
        return f->monitor;
    case C_DECOYS:
        return f->pol->decoys;
    case C_KILL:
        return f->pol->on_escape == AJ_ON_ESCAPE_KILL;
    case C_EVENTS:
        return f->events_kept || f->pol->alert_cmd;
    case C_CHECK:
        return f->check != NULL;
    case C_NEVER:
        return false;
    }
    return false;
}

static const char *const report_limits[] = {
    "Scores are ordinal judgements on a 1-5 scale, not probabilities; the composite is a mean of "
    "ordinal scores, good for comparing configurations scored the same way, not a measurement.",
    "The residual score is only as current as its inputs: one probe run inside the policy's "
    "sandbox and one check of the host. A kernel update, a sysctl change or a policy change "
    "calls for a new report.",
    "The kernel CVE table is a short curated list of local privilege escalations; no match is "
    "not proof that the kernel has no such bug. An unknown bug reachable through an allowed "
    "syscall is not scored at all: the sandbox shares the host kernel.",
    "Not covered by agentjail, whatever the score: secrets rotation and brokering, inspection "
    "of network payloads, an egress proxy (not built yet), and the agent's identities, tools "
    "and data outside the sandbox.",
    "The probe's findings are taken as reported; a probe run outside the policy being scored "
    "(--probe-json from elsewhere) scores the wrong sandbox.",
};

/* ---- assembly ------------------------------------------------------------------------- */

struct jb {
    bool oom;
};

/* Takes the reference to v, as json_object_set_new does. */
static void jset(struct jb *b, json_t *o, const char *key, json_t *v)
{
    if (!v || json_object_set_new(o, key, v) < 0)
        b->oom = true;
}

static void jpush(struct jb *b, json_t *a, json_t *v)
{
    if (!v || json_array_append_new(a, v) < 0)
        b->oom = true;
}

static json_t *jstr(const char *s)
{
    return json_string(s ? s : "");
}

static json_t *composite_real(int tenths)
{
    return json_real((double)tenths / 10.0);
}

static void rationale(const struct scoring *s, enum dim d, char *buf, size_t size)
{
    size_t off;
    bool any = false;

    off = (size_t)snprintf(buf, size, "%d -> %d:", dims[d].inherent, s->residual[d]);
    for (size_t i = 0; i < s->n && off < size; i++) {
        if (s->adj[i].d != d)
            continue;
        off += (size_t)snprintf(buf + off, size - off, "%s %+d %s [%s]", any ? ";" : "",
                                s->adj[i].delta, s->adj[i].reason, s->adj[i].evidence);
        any = true;
    }
    if (!any && off < size)
        off += (size_t)snprintf(buf + off, size - off, " no measured control changes this dimension");
    if (s->at_floor[d] && off < size)
        (void)snprintf(buf + off, size - off, "; held at %d: %s", dims[d].floor, dims[d].floor_why);
}

static json_t *build_dimensions(struct jb *b, const struct scoring *s)
{
    json_t *arr = json_array();
    char buf[2048];

    if (!arr) {
        b->oom = true;
        return NULL;
    }
    for (int d = 0; d < NDIM; d++) {
        json_t *o = json_object(), *adjs = json_array();
        if (!o || !adjs) {
            json_decref(o);
            json_decref(adjs);
            b->oom = true;
            continue;
        }
        for (size_t i = 0; i < s->n; i++)
            if ((int)s->adj[i].d == d)
                jpush(b, adjs, json_pack("{s:i, s:s, s:s}", "delta", s->adj[i].delta, "reason",
                                         s->adj[i].reason, "evidence", s->adj[i].evidence));
        rationale(s, (enum dim)d, buf, sizeof(buf));
        jset(b, o, "key", jstr(dims[d].key));
        jset(b, o, "letter", jstr(dims[d].letter));
        jset(b, o, "name", jstr(dims[d].name));
        jset(b, o, "question", jstr(dims[d].question));
        jset(b, o, "inherent", json_integer(dims[d].inherent));
        jset(b, o, "inherent_rationale", jstr(dims[d].inherent_why));
        jset(b, o, "residual", json_integer(s->residual[d]));
        jset(b, o, "floor", json_integer(dims[d].floor));
        jset(b, o, "rationale", jstr(buf));
        jset(b, o, "adjustments", adjs);
        jpush(b, arr, o);
    }
    return arr;
}

static json_t *build_controls(struct jb *b, const struct facts *f)
{
    const struct aj_policy *pol = f->pol;
    size_t rw = 0;
    json_t *o = json_object();

    for (size_t i = 0; i < pol->n_binds; i++)
        rw += pol->binds[i].rw;
    if (!o) {
        b->oom = true;
        return NULL;
    }
    jset(b, o, "network", jstr(pol->network == AJ_NET_NONE ? "none" : "loopback"));
    jset(b, o, "escape_monitor", json_boolean(f->monitor));
    jset(b, o, "decoys", json_boolean(pol->decoys));
    jset(b, o, "cloud_decoys", json_boolean(pol->cloud_decoys));
    jset(b, o, "on_escape", jstr(pol->on_escape == AJ_ON_ESCAPE_KILL ? "kill" : "deny"));
    jset(b, o, "alert_cmd", json_boolean(pol->alert_cmd != NULL));
    jset(b, o, "events_kept", json_boolean(f->events_kept));
    jset(b, o, "limits_enforceable", json_boolean(f->limits_held));
    jset(b, o, "time_bounded", json_boolean(f->time_bounded));
    jset(b, o, "writable_binds", json_integer((json_int_t)rw));
    jset(b, o, "env_pass", json_integer((json_int_t)pol->n_env_pass));
    jset(b, o, "allow_degraded", json_boolean(pol->allow_degraded));
    return o;
}

static json_t *build_inputs(struct jb *b, const struct aj_report_input *in, const struct facts *f)
{
    json_t *o = json_object(), *p = json_object(), *c = json_object();

    if (!o || !p || !c) {
        json_decref(o);
        json_decref(p);
        json_decref(c);
        b->oom = true;
        return NULL;
    }
    jset(b, p, "source", jstr(in->probe ? in->probe_source : "not run"));
    jset(b, p, "findings", json_integer((json_int_t)f->probe_total));
    jset(b, p, "exposed", json_integer((json_int_t)f->probe_fail));
    jset(b, p, "exposed_low", json_integer((json_int_t)f->probe_warn));
    jset(b, c, "source", jstr(in->check ? in->check_source : "not run"));
    for (int s = AJ_POSTURE_OK; s <= AJ_POSTURE_UNKNOWN; s++)
        jset(b, c, aj_posture_status_name((enum aj_posture_status)s),
             json_integer((json_int_t)aj_posture_count(in->check, (enum aj_posture_status)s)));
    jset(b, o, "probe", p);
    jset(b, o, "check", c);
    jset(b, o, "events_kept", json_boolean(in->events_kept));
    return o;
}

static json_t *build_method(struct jb *b)
{
    json_t *o = json_object(), *l = json_array();

    if (!o || !l) {
        json_decref(o);
        json_decref(l);
        b->oom = true;
        return NULL;
    }
    jset(b, o, "scale", jstr("1 (negligible) to 5 (severe) per dimension"));
    jset(b, o, "inherent", jstr("agent-written code run with no sandbox: the fixed baseline of "
                                "docs/risk-model.md"));
    jset(b, o, "residual", jstr("inherent score plus the adjustments listed, each from a measured "
                                "finding or a policy setting, held between the dimension's floor "
                                "and 5"));
    jset(b, o, "composite", jstr("arithmetic mean of the six scores, rounded half up to one decimal"));
    jset(b, o, "bands", jstr("below 2.0 low, below 3.0 moderate, below 4.0 high, else critical"));
    jset(b, o, "document", jstr("docs/risk-model.md"));
    for (size_t i = 0; i < AJ_ARRAY_SIZE(report_limits); i++)
        jpush(b, l, jstr(report_limits[i]));
    jset(b, o, "limits", l);
    return o;
}

int aj_report_build(const struct aj_report_input *in, json_t **ret, struct aj_error *err)
{
    struct jb b = {0};
    struct facts f;
    struct scoring *s = NULL;
    json_t *rep = NULL, *x, *arr;
    char hash[65];
    char *pj = NULL;
    int inh[NDIM], r;
    size_t i;

    *ret = NULL;
    if (!in || !in->policy)
        return aj_err(err, EINVAL, "report: no policy");
    if ((r = aj_policy_sha256(in->policy, hash, err)) < 0)
        return aj_err_prefix(err, r, "report");
    if (facts_gather(&f, in) < 0) {
        facts_clear(&f);
        return aj_err(err, ENOMEM, "report");
    }
    s = malloc(sizeof(*s));
    rep = json_object();
    pj = aj_policy_to_json(in->policy, true);
    if (!s || !rep || !pj) {
        b.oom = true;
        goto out;
    }
    score(&f, s);
    for (int d = 0; d < NDIM; d++)
        inh[d] = dims[d].inherent;

    jset(&b, rep, "report_version", json_integer(REPORT_VERSION));
    jset(&b, rep, "title", jstr("Execution-environment escape: agentjail risk report"));
    jset(&b, rep, "generated_at", in->generated_at ? jstr(in->generated_at) : json_null());
    jset(&b, rep, "agentjail_version", jstr(AJ_VERSION));
    x = json_object();
    if (x) {
        long euid = f.euid;
        jset(&b, x, "policy", jstr(in->policy_label ? in->policy_label : "built-in defaults"));
        jset(&b, x, "policy_sha256", jstr(hash));
        jset(&b, x, "kernel", jstr(str_or(in->check, "kernel", "unknown")));
        jset(&b, x, "mode", jstr(euid < 0 ? "unknown" : euid == 0 ? "root" : "rootless"));
    }
    jset(&b, rep, "subject", x);
    jset(&b, rep, "inputs", build_inputs(&b, in, &f));
    jset(&b, rep, "controls", build_controls(&b, &f));
    jset(&b, rep, "method", build_method(&b));
    jset(&b, rep, "dimensions", build_dimensions(&b, s));
    jset(&b, rep, "composite",
         json_pack("{s:o, s:s, s:o, s:s}", "inherent", composite_real(composite_tenths(inh)),
                   "inherent_band", band(composite_tenths(inh)), "residual",
                   composite_real(composite_tenths(s->residual)), "residual_band",
                   band(composite_tenths(s->residual))));

    /* What the reader should act on: findings that are not ok. */
    arr = json_array();
    json_array_foreach(json_object_get(in->check, "findings"), i, x)
        if (strcmp(str_or(x, "status", ""), "ok") != 0)
            jpush(&b, arr, json_pack("{s:s, s:s, s:s, s:s}", "id", str_or(x, "id", "?"), "status",
                                     str_or(x, "status", "unknown"), "value", str_or(x, "value", ""),
                                     "recommendation", str_or(x, "recommendation", "")));
    jset(&b, rep, "host_findings", arr);
    arr = json_array();
    json_array_foreach(json_object_get(in->probe, "findings"), i, x) {
        if (probe_bad(x) || probe_minor(x))
            jpush(&b, arr, json_pack("{s:s, s:s, s:s, s:s}", "id", str_or(x, "id", "?"), "severity",
                                     str_or(x, "severity", "?"), "title", str_or(x, "title", ""),
                                     "detail", str_or(x, "detail", "")));
    }
    jset(&b, rep, "probe_findings", arr);

    arr = json_array();
    for (i = 0; i < AJ_ARRAY_SIZE(mappings); i++) {
        const struct mapping *m = &mappings[i];
        const char *st = cond_holds(&f, m->cond) ? "applied" : m->if_not;
        /* Measured beats declared: with exposures inside the sandbox no
         * sandbox control is fully applied (the host check rows stand). */
        if (strcmp(st, "applied") == 0 && m->cond != C_CHECK && f.probe_fail > 0)
            st = "partial";
        jpush(&b, arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "framework", m->framework,
                                 "reference", m->ref, "title", m->title, "agentjail", m->controls,
                                 "status", st,
                                 "covers", m->covers, "misses", m->misses));
    }
    jset(&b, rep, "frameworks", arr);
    jset(&b, rep, "policy", json_loads(pj, 0, NULL));
out:
    free(pj);
    free(s);
    facts_clear(&f);
    if (b.oom) {
        json_decref(rep);
        return aj_err(err, ENOMEM, "report");
    }
    *ret = rep;
    return 0;
}

int aj_report_parse_format(const char *s, enum aj_report_format *ret)
{
    if (strcmp(s, "md") == 0 || strcmp(s, "markdown") == 0)
        *ret = AJ_REPORT_MD;
    else if (strcmp(s, "json") == 0)
        *ret = AJ_REPORT_JSON;
    else if (strcmp(s, "html") == 0)
        *ret = AJ_REPORT_HTML;
    else
        return -EINVAL;
    return 0;
}

/* ---- rendering ------------------------------------------------------------------------ */

static const char *js(const json_t *o, const char *key)
{
    return str_or(o, key, "");
}

static long ji(const json_t *o, const char *key)
{
    return (long)json_integer_value(json_object_get(o, key));
}

static double jr(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* A Markdown table cell: no pipe or line break may end the cell early. */
static void md_cell(FILE *o, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", o);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', o);
        else
            fputc(*s, o);
    }
}

static void md_row(FILE *o, size_t n, ...)
{
    va_list ap;

    va_start(ap, n);
    fputc('|', o);
    for (size_t i = 0; i < n; i++) {
        fputc(' ', o);
        md_cell(o, va_arg(ap, const char *));
        fputs(" |", o);
    }
    fputc('\n', o);
    va_end(ap);
}

static const char *yesno(const json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key)) ? "yes" : "no";
}

static void render_md(const json_t *rep, FILE *o)
{
    const json_t *subj = json_object_get(rep, "subject"), *inp = json_object_get(rep, "inputs");
    const json_t *comp = json_object_get(rep, "composite"), *ctl = json_object_get(rep, "controls");
    const json_t *meth = json_object_get(rep, "method"), *x;
    const json_t *probe = json_object_get(inp, "probe"), *check = json_object_get(inp, "check");
    char a[128], b2[64];
    size_t i;

    fprintf(o, "# %s\n\n", js(rep, "title"));
    md_row(o, 2, "Subject", "Value");
    fputs("|---|---|\n", o);
    md_row(o, 2, "Policy", js(subj, "policy"));
    md_row(o, 2, "Policy sha256", js(subj, "policy_sha256"));
    md_row(o, 2, "Host kernel", js(subj, "kernel"));
    md_row(o, 2, "agentjail mode", js(subj, "mode"));
    md_row(o, 2, "agentjail version", js(rep, "agentjail_version"));
    snprintf(a, sizeof(a), "%ld findings, %ld exposed at medium or worse, %ld at low", ji(probe, "findings"),
             ji(probe, "exposed"), ji(probe, "exposed_low"));
    fputs("| Probe inside the sandbox | ", o);
    md_cell(o, js(probe, "source"));
    fprintf(o, ": %s |\n", a);
    snprintf(a, sizeof(a), "%ld ok, %ld warn, %ld fail, %ld unknown", ji(check, "ok"), ji(check, "warn"),
             ji(check, "fail"), ji(check, "unknown"));
    fputs("| Host check | ", o);
    md_cell(o, js(check, "source"));
    fprintf(o, ": %s |\n", a);
    if (json_is_string(json_object_get(rep, "generated_at")))
        md_row(o, 2, "Generated", js(rep, "generated_at"));

    fprintf(o, "\n## Summary\n\nComposite DAMAGE score: inherent **%.1f** (%s), residual with this "
               "policy on this host **%.1f** (%s).\n",
            jr(comp, "inherent"), js(comp, "inherent_band"), jr(comp, "residual"),
            js(comp, "residual_band"));
    fprintf(o, "Composite: %s. Scale: %s.\n", js(meth, "composite"), js(meth, "scale"));

    fputs("\n## DAMAGE scores\n\n", o);
    md_row(o, 4, "Dimension", "Inherent", "Residual", "Rationale (what moved the residual)");
    fputs("|---|---|---|---|\n", o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        char name[96];
        snprintf(name, sizeof(name), "%s %s", js(x, "letter"), js(x, "name"));
        snprintf(a, sizeof(a), "%ld", ji(x, "inherent"));
        snprintf(b2, sizeof(b2), "%ld", ji(x, "residual"));
        md_row(o, 4, name, a, b2, js(x, "rationale"));
    }
    fputs("\n### Inherent baseline (no sandbox)\n\n", o);
    md_row(o, 3, "Dimension", "Question", "Why the inherent score");
    fputs("|---|---|---|\n", o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        char name[96];
        snprintf(name, sizeof(name), "%s %s (%ld)", js(x, "letter"), js(x, "name"), ji(x, "inherent"));
        md_row(o, 3, name, js(x, "question"), js(x, "inherent_rationale"));
    }

    fputs("\n## Controls in this policy\n\n", o);
    md_row(o, 2, "Control", "Setting");
    fputs("|---|---|\n", o);
    md_row(o, 2, "Network", js(ctl, "network"));
    md_row(o, 2, "Escape monitor (seccomp user notification)", yesno(ctl, "escape_monitor"));
    md_row(o, 2, "Decoys (docker.sock, Kubernetes token)", yesno(ctl, "decoys"));
    md_row(o, 2, "Cloud credential decoys", yesno(ctl, "cloud_decoys"));
    md_row(o, 2, "On escape", js(ctl, "on_escape"));
    md_row(o, 2, "Alert command", yesno(ctl, "alert_cmd"));
    md_row(o, 2, "Audit events kept", yesno(ctl, "events_kept"));
    md_row(o, 2, "Memory and pids limits enforceable here", yesno(ctl, "limits_enforceable"));
    md_row(o, 2, "Time bounded", yesno(ctl, "time_bounded"));
    snprintf(a, sizeof(a), "%ld", ji(ctl, "writable_binds"));
    md_row(o, 2, "Writable host binds", a);
    snprintf(a, sizeof(a), "%ld", ji(ctl, "env_pass"));
    md_row(o, 2, "Variables passed from the caller", a);
    md_row(o, 2, "Degraded mode allowed", yesno(ctl, "allow_degraded"));

    fputs("\n## Host posture findings to act on\n\n", o);
    if (json_array_size(json_object_get(rep, "host_findings")) == 0) {
        fputs("None: every host finding is ok.\n", o);
    } else {
        md_row(o, 4, "Status", "Finding", "Value", "Recommendation");
        fputs("|---|---|---|---|\n", o);
        json_array_foreach(json_object_get(rep, "host_findings"), i, x)
            md_row(o, 4, js(x, "status"), js(x, "id"), js(x, "value"), js(x, "recommendation"));
    }
    fputs("\n## Probe findings inside the sandbox\n\n", o);
    if (json_array_size(json_object_get(rep, "probe_findings")) == 0) {
        fputs("None: the probe found no escape vector or exposure.\n", o);
    } else {
        md_row(o, 4, "Exposed", "Finding", "What", "Detail");
        fputs("|---|---|---|---|\n", o);
        json_array_foreach(json_object_get(rep, "probe_findings"), i, x)
            md_row(o, 4, js(x, "severity"), js(x, "id"), js(x, "title"), js(x, "detail"));
    }

    fputs("\n## Framework mapping\n\n", o);
    md_row(o, 6, "Framework", "Reference", "agentjail control", "Here", "Covers", "Misses");
    fputs("|---|---|---|---|---|---|\n", o);
    json_array_foreach(json_object_get(rep, "frameworks"), i, x) {
        char ref[192];
        snprintf(ref, sizeof(ref), "%s %s", js(x, "reference"), js(x, "title"));
        md_row(o, 6, js(x, "framework"), ref, js(x, "agentjail"), js(x, "status"), js(x, "covers"),
               js(x, "misses"));
    }

    fprintf(o, "\n## Method and limits\n\n- Inherent: %s.\n- Residual: %s.\n- Composite: %s; bands: %s.\n",
            js(meth, "inherent"), js(meth, "residual"), js(meth, "composite"), js(meth, "bands"));
    json_array_foreach(json_object_get(meth, "limits"), i, x)
        fprintf(o, "- %s\n", json_string_value(x));
    fprintf(o, "\nThe method in full: %s.\n", js(meth, "document"));
}

/* Text and attribute values alike. */
static void h(FILE *o, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", o);
            break;
        case '<':
            fputs("&lt;", o);
            break;
        case '>':
            fputs("&gt;", o);
            break;
        case '"':
            fputs("&quot;", o);
            break;
        case '\'':
            fputs("&#39;", o);
            break;
        default:
            fputc(*s, o);
        }
    }
}

/* The chart: inherent and residual bars per dimension, integer geometry. */
#define SVG_W 860
#define SVG_H 330
#define SVG_L 48
#define SVG_R 16
#define SVG_T 44
#define SVG_B 70
#define SVG_UNIT ((SVG_H - SVG_T - SVG_B) / 5)

static void render_svg(const json_t *rep, FILE *o)
{
    const json_t *dl = json_object_get(rep, "dimensions"), *x;
    int group = (SVG_W - SVG_L - SVG_R) / (int)(json_array_size(dl) ? json_array_size(dl) : 1);
    int base = SVG_T + 5 * SVG_UNIT;
    size_t i;

    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\" aria-labelledby=\"chart-title chart-desc\" "
               "id=\"damage-chart\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fputs("<title id=\"chart-title\">DAMAGE scores: inherent vs residual</title>\n<desc "
          "id=\"chart-desc\">",
          o);
    json_array_foreach(dl, i, x) {
        fprintf(o, "%s%s: inherent %ld, residual %ld", i ? "; " : "", js(x, "name"), ji(x, "inherent"),
                ji(x, "residual"));
    }
    fputs("</desc>\n", o);
    for (int v = 0; v <= 5; v++) {
        int y = base - v * SVG_UNIT;
        fprintf(o, "<line class=\"grid\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
                   "<text class=\"axis\" x=\"%d\" y=\"%d\">%d</text>\n",
                SVG_L, y, SVG_W - SVG_R, y, SVG_L - 10, y + 4, v);
    }
    json_array_foreach(dl, i, x) {
        int gx = SVG_L + (int)i * group, bw = group * 3 / 10, cx = gx + group / 2;
        long inh = ji(x, "inherent"), res = ji(x, "residual");
        int hi = (int)inh * SVG_UNIT, hr = (int)res * SVG_UNIT;
        fprintf(o, "<g class=\"dim\" data-key=\"%s\">", js(x, "key"));
        fprintf(o, "<rect class=\"inh\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", cx - bw - 2,
                base - hi, bw, hi);
        fprintf(o, "<text class=\"val\" x=\"%d\" y=\"%d\">%ld</text>", cx - bw / 2 - 2, base - hi - 6, inh);
        fprintf(o, "<rect class=\"res\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", cx + 2,
                base - hr, bw, hr);
        fprintf(o, "<text class=\"val\" x=\"%d\" y=\"%d\">%ld</text>", cx + bw / 2 + 2, base - hr - 6, res);
        fprintf(o, "<text class=\"lbl\" x=\"%d\" y=\"%d\">%s</text>", cx, base + 20, js(x, "letter"));
        {
            /* Two lines ("Multiplicative" / "potential"): the names must not run into each other. */
            const char *name = js(x, "name"), *sp = strchr(name, ' ');
            int n1 = sp ? (int)(sp - name) : (int)strlen(name);
            fprintf(o, "<text class=\"sub\" x=\"%d\" y=\"%d\">%.*s</text>", cx, base + 37, n1, name);
            if (sp)
                fprintf(o, "<text class=\"sub\" x=\"%d\" y=\"%d\">%s</text>", cx, base + 52, sp + 1);
        }
        fputs("</g>\n", o);
    }
    fprintf(o, "<rect class=\"inh\" x=\"%d\" y=\"12\" width=\"14\" height=\"14\"/><text class=\"leg\" "
               "x=\"%d\" y=\"24\">inherent (no sandbox)</text>\n",
            SVG_L, SVG_L + 20);
    fprintf(o, "<rect class=\"res\" x=\"%d\" y=\"12\" width=\"14\" height=\"14\"/><text class=\"leg\" "
               "x=\"%d\" y=\"24\">residual (this policy, this host)</text>\n",
            SVG_L + 200, SVG_L + 220);
    fputs("</svg>\n", o);
}

static const char html_css[] =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;"
    "color:#1b1f24;background:#fff;margin:0}\n"
    "main{max-width:1120px;margin:0 auto;padding:24px 28px 48px}\n"
    "h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid "
    "#d0d7de;padding-bottom:4px}h3{font-size:16px;margin:20px 0 6px}\n"
    "table{border-collapse:collapse;width:100%;margin:8px 0;font-size:14px}\n"
    "th,td{border:1px solid #d0d7de;padding:5px 8px;text-align:left;vertical-align:top}\n"
    "th{background:#f3f5f7}td.n{text-align:center;font-weight:600;white-space:nowrap}\n"
    "code{font:13px ui-monospace,'DejaVu Sans Mono',monospace;background:#f3f5f7;padding:1px 4px;"
    "border-radius:3px;overflow-wrap:anywhere}code.id{white-space:nowrap}\n"
    ".kpi{display:flex;gap:16px;margin:16px 0}.kpi div{border:1px solid #d0d7de;border-radius:6px;"
    "padding:10px 16px}.kpi b{font-size:28px;display:block}\n"
    ".s{display:inline-block;padding:0 6px;border-radius:10px;font-size:12px;font-weight:600;"
    "white-space:nowrap}\n"
    ".ok,.applied{background:#dafbe1;color:#116329}.warn,.partial{background:#fff8c5;color:#7d4e00}"
    ".fail,.not-applied,.not-addressed,.critical,.high{background:#ffebe9;color:#a40e26}"
    ".medium{background:#fff8c5;color:#7d4e00}.low{background:#eaeef2;color:#424a53}.unknown{background:#eaeef2;"
    "color:#424a53}\n"
    ".band-low{color:#116329}.band-moderate{color:#7d4e00}.band-high{color:#bc4c00}"
    ".band-critical{color:#a40e26}\n"
    "svg{max-width:100%;height:auto;font-family:inherit}svg .grid{stroke:#d0d7de;stroke-width:1}"
    "svg .axis{font-size:12px;fill:#57606a;text-anchor:end}svg .inh{fill:#8c959f}svg "
    ".res{fill:#0969da}svg .val{font-size:13px;font-weight:600;fill:#1b1f24;text-anchor:middle}"
    "svg .lbl{font-size:15px;font-weight:700;text-anchor:middle;fill:#1b1f24}svg "
    ".sub{font-size:12px;text-anchor:middle;fill:#57606a}svg .leg{font-size:13px;fill:#1b1f24}\n"
    "figure{margin:8px 0}figcaption{font-size:13px;color:#57606a}\n"
    "pre{background:#f6f8fa;border:1px solid #d0d7de;padding:10px;overflow:auto;font-size:12px}\n"
    "@media print{main{max-width:none}details{display:block}}\n";

static void html_status(FILE *o, const char *s)
{
    fputs("<span class=\"s ", o);
    for (const char *p = s; *p; p++)
        fputc(*p == ' ' ? '-' : *p, o);
    fputs("\">", o);
    h(o, s);
    fputs("</span>", o);
}

/* One findings table: a heading, then a row per finding (status badge, id,
 * two text columns), or a sentence when there is none. */
static void html_findings(FILE *o, json_t *arr, const char *anchor, const char *heading, const char *none,
                          const char *header_row, const char *status_key, const char *col3, const char *col4)
{
    size_t i;
    json_t *x;

    fprintf(o, "<h2 id=\"%s\">", anchor);
    h(o, heading);
    fputs("</h2>\n", o);
    if (json_array_size(arr) == 0) {
        fputs("<p>", o);
        h(o, none);
        fputs("</p>\n", o);
        return;
    }
    fprintf(o, "<table>\n%s\n", header_row);
    json_array_foreach(arr, i, x) {
        fputs("<tr><td>", o);
        html_status(o, js(x, status_key));
        fputs("</td><td><code class=\"id\">", o);
        h(o, js(x, "id"));
        fputs("</code></td><td>", o);
        h(o, js(x, col3));
        fputs("</td><td>", o);
        h(o, js(x, col4));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n", o);
}

static void html_tr(FILE *o, size_t n, ...)
{
    va_list ap;

    va_start(ap, n);
    fputs("<tr>", o);
    for (size_t i = 0; i < n; i++) {
        fputs("<td>", o);
        h(o, va_arg(ap, const char *));
        fputs("</td>", o);
    }
    fputs("</tr>\n", o);
    va_end(ap);
}

static void render_html(const json_t *rep, FILE *o)
{
    const json_t *subj = json_object_get(rep, "subject"), *inp = json_object_get(rep, "inputs");
    const json_t *comp = json_object_get(rep, "composite"), *ctl = json_object_get(rep, "controls");
    const json_t *meth = json_object_get(rep, "method"), *x;
    const json_t *probe = json_object_get(inp, "probe"), *check = json_object_get(inp, "check");
    char *pol;
    char a[96];
    size_t i;

    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", o);
    /* Nothing to fetch, nothing to run: an auditor can open it offline. */
    fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
          "'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
          o);
    fputs("<title>", o);
    h(o, js(rep, "title"));
    fputs(" - ", o);
    h(o, js(subj, "policy"));
    fprintf(o, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n<h1>", html_css);
    h(o, js(rep, "title"));
    fputs("</h1>\n<table>\n", o);
    fputs("<tr><th>Policy</th><td><code>", o);
    h(o, js(subj, "policy"));
    fputs("</code></td></tr>\n<tr><th>Policy sha256</th><td><code>", o);
    h(o, js(subj, "policy_sha256"));
    fputs("</code></td></tr>\n<tr><th>Host kernel</th><td>", o);
    h(o, js(subj, "kernel"));
    fputs("</td></tr>\n<tr><th>agentjail</th><td>", o);
    h(o, js(rep, "agentjail_version"));
    fputs(", ", o);
    h(o, js(subj, "mode"));
    fputs(" mode</td></tr>\n<tr><th>Probe inside the sandbox</th><td>", o);
    h(o, js(probe, "source"));
    fprintf(o, ": %ld findings, %ld exposed at medium or worse, %ld at low</td></tr>\n<tr><th>Host check</th><td>",
            ji(probe, "findings"), ji(probe, "exposed"), ji(probe, "exposed_low"));
    h(o, js(check, "source"));
    fprintf(o, ": %ld ok, %ld warn, %ld fail, %ld unknown</td></tr>\n", ji(check, "ok"),
            ji(check, "warn"), ji(check, "fail"), ji(check, "unknown"));
    if (json_is_string(json_object_get(rep, "generated_at"))) {
        fputs("<tr><th>Generated</th><td>", o);
        h(o, js(rep, "generated_at"));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n", o);

    fprintf(o, "<div class=\"kpi\"><div>Inherent composite<b class=\"band-%s\">%.1f</b>%s</div>"
               "<div>Residual composite<b class=\"band-%s\">%.1f</b>%s</div></div>\n",
            js(comp, "inherent_band"), jr(comp, "inherent"), js(comp, "inherent_band"),
            js(comp, "residual_band"), jr(comp, "residual"), js(comp, "residual_band"));
    fputs("<figure>\n", o);
    render_svg(rep, o);
    fputs("<figcaption>Each DAMAGE dimension on a 1-5 scale. Composite: ", o);
    h(o, js(meth, "composite"));
    fputs(".</figcaption>\n</figure>\n", o);

    fputs("<h2 id=\"scores\">DAMAGE scores</h2>\n<table>\n<tr><th>Dimension</th><th>Inherent</th><th>Residual</th>"
          "<th>Rationale (what moved the residual)</th></tr>\n",
          o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        fputs("<tr><td><b>", o);
        h(o, js(x, "letter"));
        fputs("</b> ", o);
        h(o, js(x, "name"));
        fprintf(o, "</td><td class=\"n\">%ld</td><td class=\"n\">%ld</td><td>", ji(x, "inherent"),
                ji(x, "residual"));
        h(o, js(x, "rationale"));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n<h3>Inherent baseline (no sandbox)</h3>\n<table>\n<tr><th>Dimension</th>"
          "<th>Question</th><th>Why the inherent score</th></tr>\n",
          o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        snprintf(a, sizeof(a), "%s %s (%ld)", js(x, "letter"), js(x, "name"), ji(x, "inherent"));
        html_tr(o, 3, a, js(x, "question"), js(x, "inherent_rationale"));
    }
    fputs("</table>\n<h2 id=\"controls\">Controls in this policy</h2>\n<table>\n<tr><th>Control</th><th>Setting</th></tr>\n",
          o);
    html_tr(o, 2, "Network", js(ctl, "network"));
    html_tr(o, 2, "Escape monitor (seccomp user notification)", yesno(ctl, "escape_monitor"));
    html_tr(o, 2, "Decoys (docker.sock, Kubernetes token)", yesno(ctl, "decoys"));
    html_tr(o, 2, "Cloud credential decoys", yesno(ctl, "cloud_decoys"));
    html_tr(o, 2, "On escape", js(ctl, "on_escape"));
    html_tr(o, 2, "Alert command", yesno(ctl, "alert_cmd"));
    html_tr(o, 2, "Audit events kept", yesno(ctl, "events_kept"));
    html_tr(o, 2, "Memory and pids limits enforceable here", yesno(ctl, "limits_enforceable"));
    html_tr(o, 2, "Time bounded", yesno(ctl, "time_bounded"));
    snprintf(a, sizeof(a), "%ld", ji(ctl, "writable_binds"));
    html_tr(o, 2, "Writable host binds", a);
    snprintf(a, sizeof(a), "%ld", ji(ctl, "env_pass"));
    html_tr(o, 2, "Variables passed from the caller", a);
    html_tr(o, 2, "Degraded mode allowed", yesno(ctl, "allow_degraded"));
    fputs("</table>\n", o);
    html_findings(o, json_object_get(rep, "host_findings"), "host", "Host posture findings to act on",
                  "None: every host finding is ok.",
                  "<tr><th>Status</th><th>Finding</th><th>Value</th><th>Recommendation</th></tr>", "status",
                  "value", "recommendation");
    html_findings(o, json_object_get(rep, "probe_findings"), "probe", "Probe findings inside the sandbox",
                  "None: the probe found no escape vector or exposure.",
                  "<tr><th>Exposed</th><th>Finding</th><th>What</th><th>Detail</th></tr>", "severity", "title",
                  "detail");
    fputs("<h2 id=\"frameworks\">Framework mapping</h2>\n<table>\n<tr><th>Framework</th><th>Reference</th>"
          "<th>agentjail control</th><th>Here</th><th>Covers</th><th>Misses</th></tr>\n",
          o);
    json_array_foreach(json_object_get(rep, "frameworks"), i, x) {
        fputs("<tr><td>", o);
        h(o, js(x, "framework"));
        fputs("</td><td><b>", o);
        h(o, js(x, "reference"));
        fputs("</b> ", o);
        h(o, js(x, "title"));
        fputs("</td><td>", o);
        h(o, js(x, "agentjail"));
        fputs("</td><td>", o);
        html_status(o, js(x, "status"));
        fputs("</td><td>", o);
        h(o, js(x, "covers"));
        fputs("</td><td>", o);
        h(o, js(x, "misses"));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n<h2 id=\"method\">Method and limits</h2>\n<ul>\n<li>Inherent: ", o);
    h(o, js(meth, "inherent"));
    fputs(".</li>\n<li>Residual: ", o);
    h(o, js(meth, "residual"));
    fputs(".</li>\n<li>Composite: ", o);
    h(o, js(meth, "composite"));
    fputs("; bands: ", o);
    h(o, js(meth, "bands"));
    fputs(".</li>\n", o);
    json_array_foreach(json_object_get(meth, "limits"), i, x) {
        fputs("<li>", o);
        h(o, json_string_value(x));
        fputs("</li>\n", o);
    }
    fputs("</ul>\n<p>The method in full: <code>", o);
    h(o, js(meth, "document"));
    fputs("</code>.</p>\n<details><summary>Normalised policy this report is about</summary>\n<pre>", o);
    pol = json_dumps(json_object_get(rep, "policy"), JSON_INDENT(2) | JSON_SORT_KEYS);
    h(o, pol ? pol : "(unavailable)");
    free(pol);
    fputs("</pre>\n</details>\n</main>\n</body>\n</html>\n", o);
}

int aj_report_render(const json_t *report, enum aj_report_format fmt, char **ret, struct aj_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *o;

    *ret = NULL;
    if (fmt == AJ_REPORT_JSON) {
        /* Insertion order (fixed by aj_report_build), reals with a few digits. */
        buf = json_dumps(report, JSON_INDENT(2) | JSON_REAL_PRECISION(4));
        if (!buf)
            return aj_err(err, ENOMEM, "render the report");
        {
            size_t n = strlen(buf);
            char *nl = realloc(buf, n + 2);
            if (!nl) {
                free(buf);
                return aj_err(err, ENOMEM, "render the report");
            }
            memcpy(nl + n, "\n", 2); /* a text file ends with a newline */
            *ret = nl;
        }
        return 0;
    }
    o = open_memstream(&buf, &len);
    if (!o)
        return aj_err(err, errno, "render the report");
    switch (fmt) {
    case AJ_REPORT_MD:
        render_md(report, o);
        break;
    case AJ_REPORT_HTML:
        render_html(report, o);
        break;
    case AJ_REPORT_JSON:
        break;
    }
    if (ferror(o) || fclose(o) != 0) {
        free(buf);
        return aj_err(err, ENOMEM, "render the report");
    }
    *ret = buf;
    return 0;
}
