/* SPDX-License-Identifier: Apache-2.0 */
/* The framework mapping of the risk report: which agentjail controls
 * answer which reference of NIST CSF, ISO 27001, DORA, the OWASP lists...,
 * what they cover and what an auditor must look for elsewhere, and when
 * each control counts for the policy being scored. Data, kept in step with
 * the table in docs/risk-model.md. */
#include <stddef.h>

#include "aj_util.h"
#include "report_int.h"

/* ---- frameworks ------------------------------------------------------------------------ */

/* Our reading of each reference; "misses" is what an auditor must look for
 * elsewhere. Kept in step with the table in docs/risk-model.md. */
const struct mapping rpt_mappings[] = {
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
     "a policy that needs the network uses network.mode proxy (allow-list, deny floor, caps: "
     "docs/network.md); payloads are not inspected beyond brokered hosts' headers",
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
     "runs that need the network go through the egress proxy (network.mode proxy) only when the "
     "policy says so; no content inspection",
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
     "egress filtering only in network.mode proxy (docs/network.md)", C_NET_NONE, "partial"},
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
     "nothing by default; a proxy-mode policy's secrets are brokered (the sandbox holds a placeholder)",
     "credential issuing, rotation and short lifetimes are outside agentjail",
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

bool rpt_cond_holds(const struct facts *f, enum cond c)
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

const char *const rpt_report_limits[] = {
    "Scores are ordinal judgements on a 1-5 scale, not probabilities; the composite is a mean of "
    "ordinal scores, good for comparing configurations scored the same way, not a measurement.",
    "The residual score is only as current as its inputs: one probe run inside the policy's "
    "sandbox and one check of the host. A kernel update, a sysctl change or a policy change "
    "calls for a new report.",
    "The kernel CVE table is a short curated list of local privilege escalations; no match is "
    "not proof that the kernel has no such bug. An unknown bug reachable through an allowed "
    "syscall is not scored at all: the sandbox shares the host kernel.",
    "Not covered by agentjail, whatever the score: secrets rotation, inspection of network "
    "payloads (the egress proxy checks destinations, not content), and the agent's identities, "
    "tools and data outside the sandbox.",
    "The probe's findings are taken as reported; a probe run outside the policy being scored "
    "(--probe-json from elsewhere) scores the wrong sandbox.",
};

const size_t rpt_n_mappings = AJ_ARRAY_SIZE(rpt_mappings);
const size_t rpt_n_report_limits = AJ_ARRAY_SIZE(rpt_report_limits);
