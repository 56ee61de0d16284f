/* SPDX-License-Identifier: Apache-2.0 */
/* The risk report's scores: the six dimensions, the facts measured by the
 * probe and the host check, and the rules that move each score (every
 * number and why: docs/risk-model.md, which must change with this file). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_posture.h"
#include "aj_util.h"
#include "report_int.h"

/* ---- the six dimensions ----------------------------------------------------------- */

/* The inherent scores are the source write-up's scores for agent code
 * execution without a boundary (docs/risk-model.md says why each). */
const struct dim_def rpt_dims[NDIM] = {
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

const char *rpt_str_or(const json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

static const char *check_status(const struct facts *f, const char *id)
{
    const json_t *x;
    size_t i;

    json_array_foreach(json_object_get(f->check, "findings"), i, x)
        if (strcmp(rpt_str_or(x, "id", ""), id) == 0)
            return rpt_str_or(x, "status", "unknown");
    return NULL;
}

bool rpt_check_is(const struct facts *f, const char *id, const char *status)
{
    const char *s = check_status(f, id);
    return s && strcmp(s, status) == 0;
}

/* agentjail-probe --json (schema 1) rates each finding: status "exposed"
 * means the vector is there, with a severity for how bad it is. Exposed at
 * medium or worse moves the scores; exposed at low is listed only. */
bool rpt_probe_bad(const json_t *x)
{
    const char *sev = rpt_str_or(x, "severity", "");
    return strcmp(rpt_str_or(x, "status", ""), "exposed") == 0 &&
           (strcmp(sev, "critical") == 0 || strcmp(sev, "high") == 0 || strcmp(sev, "medium") == 0);
}

bool rpt_probe_minor(const json_t *x)
{
    return strcmp(rpt_str_or(x, "status", ""), "exposed") == 0 && !rpt_probe_bad(x);
}

/* Which kind of exposure a probe finding is. Credentials and runtime
 * control sockets widen what an escape reaches (multiplicative, impact);
 * kernel findings and the rest widen the way out (attack surface). */
static enum probe_cat probe_category(const json_t *x)
{
    const char *cat = rpt_str_or(x, "category", "");

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

int rpt_facts_gather(struct facts *f, const struct aj_report_input *in)
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
        if (rpt_probe_bad(x)) {
            f->probe_fail++;
            if (json_array_append_new(f->probe_bad[probe_category(x)],
                                      json_string(rpt_str_or(x, "id", "?"))) < 0)
                return -ENOMEM;
        } else if (rpt_probe_minor(x)) {
            f->probe_warn++;
        }
    }
    /* The monitor needs seccomp user notification on the host, and the
     * probe must not have found the filter missing inside. */
    f->monitor = rpt_check_is(f, "seccomp.user_notif", "ok") && !rpt_probe_contradicts(f, "privileges.seccomp");
    /* Declared limits count only where the host has the controllers. */
    f->limits_held = pol->memory_max && pol->pids_max &&
                     (rpt_check_is(f, "cgroup.memory", "ok") || rpt_check_is(f, "cgroup.memory", "warn")) &&
                     (rpt_check_is(f, "cgroup.pids", "ok") || rpt_check_is(f, "cgroup.pids", "warn"));
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
bool rpt_probe_contradicts(const struct facts *f, const char *prefix)
{
    const json_t *x;
    size_t i;

    for (int c = 0; c < NPCAT; c++)
        json_array_foreach(f->probe_bad[c], i, x)
            if (strncmp(json_string_value(x), prefix, strlen(prefix)) == 0)
                return true;
    return false;
}

void rpt_facts_clear(struct facts *f)
{
    for (int c = 0; c < NPCAT; c++)
        json_decref(f->probe_bad[c]);
}

/* ---- scoring --------------------------------------------------------------------------- */

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
        if (strcmp(rpt_dims[d].letter, letter) == 0)
            return (enum dim)d;
    return NDIM;
}

/* Every rule here is a row of the tables in docs/risk-model.md. */
void rpt_score(const struct facts *f, struct scoring *s)
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
    if (f->euid == 0 && !rpt_probe_contradicts(f, "privileges.uid"))
        add_adj(s, DIM_M, -1, "root mode: each run has its own host uid, shared with no other run "
                "or the agent", "check:euid=0");
    {
        bool rw = false;
        for (size_t i = 0; i < pol->n_binds; i++)
            rw |= pol->binds[i].rw;
        if (!rw && !rpt_probe_contradicts(f, "filesystem.host_mounts"))
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
    if (rpt_check_is(f, "kernel.cves", "fail") || json_array_size(f->probe_bad[PCAT_KERNEL]) > 0) {
        char e2[128];
        join_ids(e2, sizeof(e2), "probe:", f->probe_bad[PCAT_KERNEL]);
        snprintf(ev, sizeof(ev), "%s%s%s", rpt_check_is(f, "kernel.cves", "fail") ? "check:kernel.cves" : "",
                 rpt_check_is(f, "kernel.cves", "fail") && e2[0] ? ", " : "", e2);
        add_adj(s, DIM_AS, +2, "the kernel has a known local privilege escalation", ev);
    }
    ev[0] = '\0';
    for (size_t i = 0; i < AJ_ARRAY_SIZE(layer_checks); i++)
        if (rpt_check_is(f, layer_checks[i], "fail"))
            snprintf(ev + strlen(ev), sizeof(ev) - strlen(ev), "%scheck:%s", ev[0] ? ", " : "",
                     layer_checks[i]);
    if (ev[0])
        add_adj(s, DIM_AS, +1, "a kernel feature agentjail's layers rely on is missing", ev);
    ev[0] = '\0';
    n = 0;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(surface_sysctls); i++)
        if (rpt_check_is(f, surface_sysctls[i], "warn")) {
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
        int v = rpt_dims[d].inherent;
        for (size_t i = 0; i < s->n; i++)
            if ((int)s->adj[i].d == d)
                v += s->adj[i].delta;
        if (v < rpt_dims[d].floor) {
            v = rpt_dims[d].floor;
            s->at_floor[d] = true;
        }
        s->residual[d] = v > 5 ? 5 : v;
    }
}

/* Composite: the plain mean of the six scores, in tenths, rounded half up
 * (integer arithmetic: the same digits on every machine). */
int rpt_composite_tenths(const int v[NDIM])
{
    int sum = 0;
    for (int d = 0; d < NDIM; d++)
        sum += v[d];
    return (sum * 100 / NDIM + 5) / 10;
}

const char *rpt_band(int tenths)
{
    if (tenths < 20)
        return "low";
    if (tenths < 30)
        return "moderate";
    if (tenths < 40)
        return "high";
    return "critical";
}

