/* SPDX-License-Identifier: Apache-2.0 */
/* The policy keys: one row per key, and nothing but data. Adding a key is
 * one row here (and a field in struct aj_policy) plus the code that
 * enforces it; loading, dumping, hashing, diff, validation, the docs'
 * reference table and the risk report's penalty all read the row.
 *
 * Rows are in file order: groups as in aj_policy_groups, keys as the
 * loader lists them ("accepted here: ...") and as the diff reports them.
 * Messages (.bad, .what) are what users and tests see: keep their wording
 * when moving a row. */
#include <stddef.h>
#include <string.h>

#include "aj_policy_model.h"

#define FIELD(f) .offset = offsetof(struct aj_policy, f), .width = sizeof(((struct aj_policy *)0)->f)
#define LIST(f, n) .offset = offsetof(struct aj_policy, f), .count_offset = offsetof(struct aj_policy, n)

#define KIB (1ULL << 10)
#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define TIB (1ULL << 40)
#define PIB (1ULL << 50)
#define HOUR_MS (3600ULL * 1000)
#define DAY_MS (24 * HOUR_MS)
/* The CLI and policy files take wall-clock and CPU-time limits up to 7
 * days; a library caller that fills the struct (a server's long-lived
 * session) up to a year. Deadlines are 64-bit. */
#define WRITTEN_MAX_MS (7 * DAY_MS)
#define STRUCT_MAX_MS (366 * DAY_MS)

static const char *const network_names[] = {[AJ_NET_NONE] = "none", [AJ_NET_LOOPBACK] = "loopback",
                                             [AJ_NET_PROXY] = "proxy", NULL};
static const char *const on_escape_names[] = {[AJ_ON_ESCAPE_DENY] = "deny", [AJ_ON_ESCAPE_KILL] = "kill", NULL};
static const char *const on_off[] = {"off", "on", NULL};
static const char *const interp_names[] = {[AJ_INTERP_NONE] = "none", [AJ_INTERP_PYTHON] = "python", NULL};

static const struct aj_policy_subkey bind_members[] = {
    {"host", "path, or `\"${NAME}\"`", "(required)", "the host directory or file"},
    {"sandbox", "path", "same as `host`", "where it appears inside"},
    {"mode", "`\"ro\"` or `\"rw\"`", "`\"ro\"`",
     "`ro` binds are read-only mounts and read-only in Landlock; writes fail with `EROFS`"},
    {"optional", "boolean", "`false`",
     "skip the bind when `host` is an unset variable or does not exist, instead of failing"},
    {"owner", "`\"UID:GID\"`", "the source's owner",
     "`rw` only. Writable binds are id-mapped (root mode): files of this host uid/gid are the sandbox "
     "user's inside, and what the run creates is theirs on the host, whatever host uid the run got. "
     "Unset: the owner of the bind source as resolved (a root-owned source is then not id-mapped, and "
     "the result says so). Set: never `0` (root) nor a uid of `identity.uid_range` (exit 2), and a run "
     "that cannot id-map the bind (rootless with another owner, a filesystem or kernel without id-mapped "
     "mounts) stops instead of falling back. Files of other owners in the bind stay theirs (overflow id "
     "inside, not writable). Flag: `--bind-owner UID:GID` after the `--bind-rw` it applies to. See "
     "docs/security-model.md §3.3"},
    {NULL, NULL, NULL, NULL},
};

static const struct aj_policy_subkey tmpfs_members[] = {
    {"path", "path", "(required)", "where the tmpfs is mounted inside"},
    {"size", "size", "`\"64M\"`", "at least `4K`"},
    {NULL, NULL, NULL, NULL},
};

static const struct aj_policy_subkey secret_members[] = {
    {"id", "1..64 of `[A-Za-z0-9._-]`", "(required)",
     "names the secret in events (`secret_used`, `credentials_suspended`) for responders to rotate"},
    {"hosts", "array of `host`, `*.domain`, `host:port`", "(required)",
     "the only destinations whose requests get the real value"},
    {"header", "header name", "`\"Authorization\"`", "the only header the proxy replaces the placeholder in"},
    {"format", "text with `{}` once", "`\"Bearer {}\"`", "the header's value, `{}` standing for the secret"},
    {"value_from", "`\"env:NAME\"` or `\"file:/PATH\"`", "(required)",
     "where the supervisor reads the real value on the host as the run starts; it goes to the proxy alone"},
    {"env", "variable name", "none", "the variable inside that holds the placeholder"},
    {"file", "path", "none", "a read-only file inside that holds the placeholder (one of `env`, `file` at least)"},
    {NULL, NULL, NULL, NULL},
};

static const struct aj_policy_subkey uid_range_members[] = {
    {"base", "integer", "1610612736", "the first host uid (and gid) of the range"},
    {"count", "integer", "65536", "how many"},
    {NULL, NULL, NULL, NULL},
};

const struct aj_policy_group aj_policy_groups[] = {
    {"filesystem", NULL, NULL},
    {"environment", NULL,
     "Names match `[A-Za-z_][A-Za-z0-9_]*`; values must be valid UTF-8. `policy\n"
     "diff` names variables but never prints their values."},
    {"network", NULL, NULL},
    {"limits", "See [limits.md](limits.md) for how each is enforced and how a run ends.", NULL},
    {"identity", NULL, NULL},
    {"degraded", NULL, NULL},
    {"seccomp", NULL, NULL},
    {"detection", NULL, NULL},
    {"interpreter",
     "Warm interpreters ([interpreters.md](interpreters.md)): a pool made from a policy that names a "
     "language parks sandboxes in which the interpreter has started and imported `preload`, inside the "
     "sandbox and under all of its layers; a run of `python3 -c CODE` or `python3 SCRIPT` then takes one. "
     "Not a protection: `policy diff` notes a difference without calling either side weaker.",
     NULL},
    {"secrets", NULL, NULL, .whole = true},
};
const size_t aj_policy_n_groups = sizeof(aj_policy_groups) / sizeof(aj_policy_groups[0]);

const struct aj_policy_key aj_policy_keys[] = {
    /* ---- filesystem ---- */
    {
        .key = "filesystem.binds",
        .doc_flag = "`--bind-ro`, `--bind-rw`",
        .type = AJ_KEY_BIND_LIST,
        LIST(binds, n_binds),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of bind objects (below)",
        .sub = bind_members,
        .doc = "nothing of the host is visible but the system directories agentjail provides read-only "
               "(`/usr`, `/bin`, `/lib*`, an allow-list of `/etc` without secrets, see security-model.md); "
               "a read-only bind may add an entry under `/etc`; each bind opens one more host directory, "
               "so each is a decision to review",
    },
    {
        .key = "filesystem.tmpfs",
        .flag = "--tmpfs",
        .type = AJ_KEY_TMPFS_LIST,
        LIST(tmpfs, n_tmpfs),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of `{\"path\": PATH, \"size\": SIZE}`",
        .sub = tmpfs_members,
        .doc = "a private tmpfs (`noexec` with `noexec_tmp`) at PATH (size default `64M`, at least `4K`): "
               "scratch space that vanishes with the run and cannot fill the host's disk",
    },
    {
        .key = "filesystem.tmp_size",
        .flag = "--tmp-size",
        .type = AJ_KEY_SIZE,
        FIELD(tmp_size),
        .def = AJ_TMP_SIZE_AUTO,
        .zero = AJ_ZERO_AUTO,
        .min = 4 * KIB,
        .max = PIB,
        .example = "a size like \"64M\" or \"auto\"",
        .bad = "'%s' is not a size of at least 4K (e.g. 64M) or \"auto\"",
        .bad_flag = "'%s' is not a size of at least 4K (e.g. 64M)",
        .what = "tmp size",
        .weaker = AJ_WEAKER_NEITHER,
        .review = "auto: half the memory limit, at least 64M",
        .doc = "size of `/tmp` and `/dev/shm`: a payload filling `/tmp` fills its own budget, not the host. "
               "`\"auto\"`: half the memory limit each where a cgroup enforces it (tmpfs pages are charged "
               "to it, so both full still fit in it; at least `64M`), `64M` where none does (a tmpfs nothing "
               "bounds would be host memory). 2G limit → 1G each: joblib's `/dev/shm` memmaps hold ordinary "
               "data",
    },
    {
        .key = "filesystem.workdir",
        .flag = "--workdir",
        .type = AJ_KEY_STRING,
        FIELD(workdir),
        .def_str = AJ_DEFAULT_WORKDIR,
        .weaker = AJ_WEAKER_NEITHER,
        .doc_type = "path",
        .doc = "working directory of the payload",
    },
    {
        .key = "filesystem.noexec_tmp",
        .flag = "--noexec-tmp",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(noexec_tmp),
        .weaker = AJ_WEAKER_FALSE,
        .review = "files written to scratch space can be executed",
        .doc = "`true`: nothing written to `/tmp`, `/dev/shm` or a `tmpfs` mount can be executed (`noexec` "
               "mounts and no Landlock execute right). Off by default: compilers, venvs and scripts in "
               "`/tmp` are ordinary work, and interpreters run arbitrary code anyway",
    },
    {
        .key = "filesystem.allow_bind_inside_writable",
        .flag = "--allow-bind-inside-writable",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(allow_bind_inside_writable),
        .weaker = AJ_WEAKER_TRUE,
        .review = "may bind what an earlier run could have planted",
        /* The report's penalty needs binds as well: code in src/assess/scoring.c. */
        .doc = "a run with a writable bind can plant a directory (or a symlink) in it for a later run to "
               "bind: `false` refuses a bind source that lies inside a directory any run was given to write "
               "(the supervisor's registry of writable bind sources, this run's included) or, as root, that "
               "a sandbox made (owned by a uid of `identity.uid_range`), exit 2. `true` binds it anyway, for "
               "contents you trust. A symlink in a bind source's path is refused either way. See "
               "docs/security-model.md §10",
    },

    /* ---- environment ---- */
    {
        .key = "environment.set",
        .flag = "--env",
        .type = AJ_KEY_ENV_MAP,
        LIST(env, n_env),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "object `{\"NAME\": \"value\"}`",
        .doc = "the environment starts empty but for `PATH` and `HOME=/tmp`: no token of the caller leaks in "
               "unless named here",
    },
    {
        .key = "environment.pass",
        .flag = "--env-pass",
        .type = AJ_KEY_NAME_LIST,
        LIST(env_pass, n_env_pass),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of names",
        .doc = "variables copied from agentjail's own environment at run time; the value is not in the "
               "policy (nor in its hash)",
    },

    /* ---- network ---- */
    {
        .key = "network.mode",
        .flag = "--network",
        .type = AJ_KEY_ENUM,
        FIELD(network),
        .def = AJ_NET_LOOPBACK,
        .max = AJ_NET_PROXY,
        .names = network_names,
        .what = "network mode",
        .weaker = AJ_WEAKER_CUSTOM,
        .doc = "`loopback`: a private `lo` that is up, in an otherwise empty network namespace, so local "
               "servers the payload starts itself (Jupyter kernels, test servers) work; `none`: an empty "
               "network namespace with `lo` down, and Landlock refuses TCP; neither reaches the host's "
               "network. `proxy`: `loopback` plus a relay on `127.0.0.1:proxy_port` to the run's egress "
               "proxy, which lets through only what `allow` names (HTTP and HTTPS; no route out otherwise, no "
               "DNS inside); see [network.md](network.md). In degraded mode (no namespaces) `none` and "
               "`loopback` mean no network and `proxy` is refused",
    },
    {
        .key = "network.allow",
        .flag = "--allow",
        .type = AJ_KEY_STR_LIST,
        LIST(net_allow, n_net_allow),
        .check = aj_policy_check_net_entry,
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of `host`, `*.domain`, `host:port`, `IP[:port]`, `\"METHOD host:port\"`",
        .doc = "`proxy` only: the destinations the egress proxy lets through (no port: 80 and 443); "
               "everything else is refused with 403 and a `net_denied` event",
    },
    {
        .key = "network.deny",
        .flag = "--deny",
        .type = AJ_KEY_STR_LIST,
        LIST(net_deny, n_net_deny),
        .check = aj_policy_check_net_entry,
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array, as `allow`",
        .doc = "`proxy` only: refused even where `allow` matches (deny wins)",
    },
    {
        .key = "network.allow_ranges",
        .flag = "--allow-range",
        .type = AJ_KEY_STR_LIST,
        LIST(net_allow_ranges, n_net_allow_ranges),
        .check = aj_policy_check_cidr,
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of CIDR",
        .doc = "`proxy` only: addresses the deny floor refuses (loopback, RFC 1918, link-local and cloud "
               "metadata, ULA, ...) that an allowed name may resolve to after all, e.g. an internal package "
               "index",
    },
    {
        .key = "network.proxy_port",
        .flag = "--proxy-port",
        .type = AJ_KEY_COUNT,
        FIELD(proxy_port),
        .def = 3128,
        .min = 1,
        .max = 65535,
        .example = "a port like 3128",
        .bad = "'%s' is not a port (1..65535)",
        .what = "proxy port",
        .weaker = AJ_WEAKER_NEITHER,
        .doc = "`proxy` only: the relay's port on the sandbox's `127.0.0.1`, named by `HTTP_PROXY` and the "
               "other proxy variables",
    },
    {
        .key = "network.resolver",
        .flag = "--resolver",
        .type = AJ_KEY_STRING,
        FIELD(net_resolver),
        .zero = AJ_ZERO_NONE,
        .weaker = AJ_WEAKER_NEITHER,
        .doc_type = "`\"IP:PORT\"` or `null`",
        .doc_default = "`null`: the servers of the host's `/etc/resolv.conf`",
        .doc = "`proxy` only: the DNS server the proxy asks, outside the sandbox, after the policy check (the "
               "sandbox has none)",
    },
    {
        .key = "network.max_connections",
        .flag = "--net-max-connections",
        .type = AJ_KEY_COUNT,
        FIELD(net_max_connections),
        .def = 64,
        .min = 1,
        .max = 4096,
        .example = "a number like 64",
        .bad = "'%s' is not a number of connections within 1..4096",
        .what = "max connections",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "`proxy` only: connections through the proxy at once; past it a new one is refused (`net_cap`)",
    },
    {
        .key = "network.max_bytes_out",
        .flag = "--net-max-bytes-out",
        .type = AJ_KEY_SIZE,
        FIELD(net_max_bytes_out),
        .def = 1 * GIB,
        .zero = AJ_ZERO_NONE,
        .min = 1,
        .max = PIB,
        .example = "a size like \"100M\"",
        .bad = "'%s' is not a size within 1..1P (e.g. 100M)",
        .what = "max bytes out",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "`proxy` only: bytes the run may send through the proxy in all (exfiltration volume)",
    },
    {
        .key = "network.max_bytes_in",
        .flag = "--net-max-bytes-in",
        .type = AJ_KEY_SIZE,
        FIELD(net_max_bytes_in),
        .def = 10 * GIB,
        .zero = AJ_ZERO_NONE,
        .min = 1,
        .max = PIB,
        .example = "a size like \"1G\"",
        .bad = "'%s' is not a size within 1..1P (e.g. 1G)",
        .what = "max bytes in",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "`proxy` only: bytes the run may receive through the proxy in all",
    },
    {
        .key = "network.max_connection_time",
        .flag = "--net-max-connection-time",
        .type = AJ_KEY_DURATION,
        FIELD(net_max_connection_ms),
        .def = 10 * 60 * 1000,
        .zero = AJ_ZERO_NONE,
        .min = 1000,
        .max = DAY_MS,
        .example = "a duration like \"10m\"",
        .bad = "'%s' is not a duration within 1s..1 day (e.g. 10m)",
        .what = "max connection time",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "`proxy` only: how long one connection through the proxy may last",
    },
    {
        .key = "network.max_requests_per_second",
        .flag = "--net-max-rps",
        .type = AJ_KEY_COUNT,
        FIELD(net_max_requests_per_second),
        .def = 100,
        .min = 1,
        .max = 100000,
        .example = "a number like 100",
        .bad = "'%s' is not a number of requests within 1..100000",
        .what = "max requests per second",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "`proxy` only: new requests per second through the proxy; past it they are refused (`net_cap`)",
    },

    /* ---- limits ---- */
    {
        .key = "limits.timeout",
        .flag = "--timeout",
        .type = AJ_KEY_DURATION,
        FIELD(timeout_ms),
        .def = AJ_DEFAULT_TIMEOUT_MS,
        .zero = AJ_ZERO_NONE,
        .min = 1,
        .max = STRUCT_MAX_MS,
        .input_max = WRITTEN_MAX_MS,
        .example = "a duration like \"10s\" or \"500ms\"",
        .bad = "'%s' is not a duration (e.g. 10s, 500ms, 2m; > 0, <= 7 days)",
        .bad_flag = "'%s' is not a duration (e.g. 10, 10s, 500ms, 2m; > 0, <= 7 days)",
        .what = "timeout",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "a payload (or a daemon it left behind) running forever; kills the whole sandbox, status "
               "`timeout`",
    },
    {
        .key = "limits.memory",
        .flag = "--memory",
        .type = AJ_KEY_SIZE,
        FIELD(memory_max),
        .def = AJ_DEFAULT_MEMORY_MAX,
        .zero = AJ_ZERO_NONE,
        .min = 4 * MIB,
        .max = PIB,
        .requires = AJ_LIMIT_MEMORY,
        .example = "a size like \"512M\"",
        .bad = "'%s' is not a size between 4M and 1P (e.g. 512M, 2G)",
        .what = "memory limit",
        .weaker = AJ_WEAKER_HIGHER,
        .doc_default = "`\"2G\"` where a cgroup is available",
        .doc = "RAM + swap of the whole tree; status `memory_limit`",
    },
    {
        .key = "limits.pids",
        .flag = "--pids",
        .type = AJ_KEY_COUNT,
        FIELD(pids_max),
        .def = AJ_DEFAULT_PIDS_MAX,
        .zero = AJ_ZERO_NONE,
        .min = 2, /* init and the payload are both in the group */
        .max = 4194304,
        .requires = AJ_LIMIT_PIDS,
        .example = "a number of processes",
        .bad = "'%s' is not a number of processes within 2..4194304",
        .what = "pids limit",
        .weaker = AJ_WEAKER_HIGHER,
        .doc_default = "`1024` where a cgroup is available",
        .doc = "fork bombs; status `pids_limit`",
    },
    {
        .key = "limits.cpus",
        .flag = "--cpus",
        .type = AJ_KEY_CPUS,
        FIELD(cpu_milli),
        .zero = AJ_ZERO_NONE,
        .min = 10, /* cpu.max needs a quota of at least 1 ms per 100 ms period */
        .max = 1024000,
        .requires = AJ_LIMIT_CPUS,
        .example = "a CPU share like \"0.5\"",
        .bad = "'%s' is not a CPU share within 0.01..1024 (e.g. 0.5, 2)",
        .what = "cpus",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "one run taking every core (throttled, not ended)",
    },
    {
        .key = "limits.cpu_time",
        .flag = "--cpu-time",
        .type = AJ_KEY_DURATION,
        FIELD(cpu_time_ms),
        .zero = AJ_ZERO_NONE,
        .min = 1,
        .max = STRUCT_MAX_MS,
        .input_max = WRITTEN_MAX_MS,
        .requires = AJ_LIMIT_CPU_TIME,
        .example = "a duration like \"10s\"",
        .bad = "'%s' is not a duration (e.g. 10, 10s, 500ms; > 0, <= 7 days)",
        .what = "cpu time",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "CPU time of the whole tree; status `cpu_limit`",
    },
    {
        .key = "limits.output",
        .flag = "--output-limit",
        .type = AJ_KEY_SIZE,
        FIELD(output_limit),
        .zero = AJ_ZERO_NONE,
        .min = 1,
        .max = TIB,
        .example = "a size like \"1M\"",
        .bad = "'%s' is not a size within 1..1T (e.g. 64K, 10M)",
        .what = "output limit",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "output floods: each of stdout and stderr is cut at this size and the run ends, status "
               "`output_limit`",
    },
    {
        .key = "limits.file_size",
        .flag = "--file-size",
        .type = AJ_KEY_SIZE,
        FIELD(rlimit_fsize),
        .def = AJ_DEFAULT_FSIZE,
        .min = 1,
        .max = PIB,
        .example = "a size like \"1G\"",
        .bad = "'%s' is not a size within 1..1P (e.g. 100M)",
        .what = "file size limit",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "one file filling the disk (`RLIMIT_FSIZE`, writes fail with `EFBIG`)",
    },
    {
        .key = "limits.open_files",
        .flag = "--open-files",
        .type = AJ_KEY_COUNT,
        FIELD(rlimit_nofile),
        .def = AJ_DEFAULT_NOFILE,
        .min = 16,
        .max = 1048576,
        .example = "a number of files",
        .bad = "'%s' is not a number within 16..1048576",
        .what = "open files limit",
        .weaker = AJ_WEAKER_HIGHER,
        .doc = "descriptor exhaustion (`RLIMIT_NOFILE`, `EMFILE`)",
    },
    {
        .key = "limits.require_cgroup",
        .type = AJ_KEY_LIMIT_SET,
        FIELD(required_limits),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "list of `\"memory\"`, `\"pids\"`, `\"cpus\"`, `\"cpu_time\"`, or a boolean",
        .doc_default = "the cgroup limits the file names, see [below](#require_cgroup)",
        .doc = "a limit silently not applied because no cgroup was available",
    },

    /* ---- identity ---- */
    {
        .key = "identity.uid",
        .flag = "--uid",
        .type = AJ_KEY_ID,
        FIELD(uid),
        .def = AJ_DEFAULT_UID,
        .max = 0xfffffffeU, /* 4294967295 is (uid_t)-1: "no id" to the kernel */
        .bad = "'%s' is not an id (0..4294967294)",
        .what = "uid",
        .weaker = AJ_WEAKER_CUSTOM, /* one line with the gid */
        .doc = "user id inside the sandbox; 0 is allowed and is still an unprivileged user outside (user "
               "namespace)",
    },
    {
        .key = "identity.gid",
        .flag = "--gid",
        .type = AJ_KEY_ID,
        FIELD(gid),
        .def = AJ_DEFAULT_GID,
        .max = 0xfffffffeU,
        .bad = "'%s' is not an id (0..4294967294)",
        .what = "gid",
        .weaker = AJ_WEAKER_CUSTOM, /* on the uid's line */
        .doc = "group id inside the sandbox",
    },
    {
        .key = "identity.hostname",
        .flag = "--hostname",
        .type = AJ_KEY_STRING,
        FIELD(hostname),
        .def_str = AJ_DEFAULT_HOSTNAME,
        .weaker = AJ_WEAKER_NEITHER,
        .doc_type = "1..63 letters, digits, `-`, `.`",
        .doc = "the host's name leaking into logs and outputs",
    },
    {
        .key = "identity.uid_range",
        .flag = "--uid-range",
        .type = AJ_KEY_ID_RANGE,
        .offset = offsetof(struct aj_policy, uid_base),
        .count_offset = offsetof(struct aj_policy, uid_count),
        .def = AJ_DEFAULT_UID_BASE,
        .def_count = AJ_DEFAULT_UID_COUNT,
        /* Below 65536 live the host's real users and system accounts:
         * sharing one of their uids would hand the sandbox their files. */
        .min = 65536,
        .max = 0xfffffffeU,
        .what = "uid range",
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "`{\"base\": N, \"count\": N}`",
        .doc_default = "`{\"base\": 1610612736, \"count\": 65536}`",
        .sub = uid_range_members,
        .doc = "root mode: host uids for runs, so no run shares a uid with a real user or another run",
    },

    /* ---- degraded ---- */
    {
        .key = "degraded.allow",
        .flag = "--allow-degraded",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(allow_degraded),
        .weaker = AJ_WEAKER_TRUE,
        .review = "may run without namespaces",
        .risk_dim = "G",
        .risk_delta = +1,
        .risk_text = "a run may go on without namespaces when they are refused",
        .doc = "when namespaces are refused, `false` fails the run; `true` runs with Landlock, seccomp, "
               "rlimits and no_new_privs only, loudly reported (see [security-model.md](security-model.md))",
    },
    {
        .key = "degraded.without_landlock",
        .flag = "--allow-no-landlock",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(allow_no_landlock),
        .weaker = AJ_WEAKER_TRUE,
        .review = "may run on a kernel without Landlock",
        .risk_dim = "G",
        .risk_delta = +1,
        .risk_text = "a run may go on without Landlock on kernels that lack it",
        .doc = "on a kernel without Landlock (before 5.13, or not in `lsm=`), `false` fails the run; `true` "
               "runs without it, the mount namespace and seccomp holding the filesystem alone, and the "
               "result shows `landlock_fs`, `landlock_net`, `landlock_scope` as `false`. Never together "
               "with degraded mode",
    },
    {
        .key = "degraded.without_signal_scope",
        .flag = "--allow-unscoped-signals",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(allow_unscoped_signals),
        .weaker = AJ_WEAKER_TRUE,
        .review = "a degraded run may signal the caller's other processes",
        .risk_dim = "G",
        .risk_delta = +1,
        .risk_text = "a degraded run may signal the caller's other processes (Landlock before ABI 6)",
        .doc = "a degraded run as an ordinary user runs as the caller's own uid with no pid namespace: "
               "only Landlock's signal scope (ABI 6, Linux 6.12) keeps its `kill()` off the caller's other "
               "processes. `false` fails such a run on an older kernel; `true` runs it anyway, and the "
               "result shows `landlock_scope: false`",
    },
    {
        .key = "degraded.without_decoys",
        .flag = "--allow-no-decoys",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(allow_no_decoys),
        .weaker = AJ_WEAKER_TRUE,
        .review = "may run with decoys nobody watches",
        .doc = "when the decoys cannot be watched (a root without `CAP_LEASE`, as in a Docker container), "
               "`false` fails the run naming the cause and the fix (`--cap-add LEASE`); `true` runs "
               "without them and the result shows `decoys: false`",
    },

    /* ---- seccomp ---- */
    {
        .key = "seccomp.filter",
        .type = AJ_KEY_CONST,
        .def_str = "default",
        .doc_type = "`\"default\"`",
        .bad = "the only filter is \"default\" (see docs/security-model.md)",
        /* One value: two policies never differ here. */
        .weaker = AJ_WEAKER_NOT_COMPARED,
        .doc = "the only filter; naming it keeps the policy explicit, and the hash changes if that ever does",
    },
    {
        .key = "seccomp.allow_ptrace",
        .flag = "--allow-ptrace",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(allow_ptrace),
        .weaker = AJ_WEAKER_TRUE,
        .review = "its processes may trace and rewrite each other",
        .doc = "`true`: debuggers (gdb, strace, LeakSanitizer): `ptrace`, `process_vm_readv/writev` and "
               "`kcmp` between the sandbox's own processes; init (pid 1) stays refused and reported; never "
               "in degraded mode. Off by default: the ptrace code is kernel attack surface most runs never "
               "need (see security-model.md, \"Debuggers\")",
    },

    /* ---- detection ---- */
    {
        .key = "detection.decoys",
        .flag = "--no-decoys",
        .flag_sets = false,
        .type = AJ_KEY_BOOL,
        FIELD(decoys),
        .def = true,
        .names = on_off,
        .weaker = AJ_WEAKER_FALSE,
        .review = "no decoys to catch credential theft",
        .doc = "docker.sock and Kubernetes token decoys: touching one is recorded as an escape attempt",
    },
    {
        .key = "detection.cloud_decoys",
        .flag = "--decoy-cloud",
        .flag_sets = true,
        .type = AJ_KEY_BOOL,
        FIELD(cloud_decoys),
        .names = on_off,
        .weaker = AJ_WEAKER_NEITHER,
        .doc = "cloud credential decoys in the environment and `~/.aws`",
    },
    {
        .key = "detection.on_escape",
        .flag = "--on-escape",
        .type = AJ_KEY_ENUM,
        FIELD(on_escape),
        .def = AJ_ON_ESCAPE_DENY,
        .max = AJ_ON_ESCAPE_KILL,
        .names = on_escape_names,
        .what = "on_escape",
        .weaker = AJ_WEAKER_VALUE,
        .weak_value = AJ_ON_ESCAPE_DENY,
        .review = "an escape attempt does not end the run",
        .doc = "`deny` refuses, records and goes on; `kill` ends the whole run at the first escape attempt "
               "or decoy touch",
    },
    {
        .key = "detection.alert_cmd",
        .flag = "--alert-cmd",
        .type = AJ_KEY_STRING,
        FIELD(alert_cmd),
        .zero = AJ_ZERO_NONE,
        .weaker = AJ_WEAKER_NEITHER,
        .doc = "a command run on the host (`sh -c`) once, at the first high-severity event",
    },
    {
        .key = "detection.alert_timeout",
        .flag = "--alert-timeout",
        .type = AJ_KEY_DURATION,
        FIELD(alert_timeout_ms),
        .def = AJ_DEFAULT_ALERT_TIMEOUT_MS,
        .min = 1,
        .max = HOUR_MS,
        .example = "a duration like \"10s\"",
        .bad = "'%s' is not a duration within 1ms..1h (e.g. 10s)",
        .what = "alert timeout",
        /* How long the alert command may take is not a protection. */
        .weaker = AJ_WEAKER_NOT_COMPARED,
        .doc = "the alert command is killed after this",
    },
    {
        .key = "detection.event_budget",
        .flag = "--event-budget",
        .type = AJ_KEY_COUNT,
        FIELD(event_budget),
        .def = AJ_DEFAULT_EVENT_BUDGET,
        .min = 1,
        .max = AJ_MAX_EVENT_BUDGET,
        .example = "a number of events like 1000",
        .bad = "'%s' is not a number of events within 1..1000000",
        .what = "event budget",
        .weaker = AJ_WEAKER_CUSTOM,
        .doc = "events of the attempt kinds (`escape_attempt`, `canary`, `error`, ...) written per run. Past "
               "it each attempt is still refused and counted in the result, but not written: one "
               "`events_suppressed` summary a second says how many of each kind "
               "([events.md](events.md#events_suppressed-medium)). The events file then grows by at most "
               "4 KiB per budgeted event + 1 MiB of summaries + 64 KiB for the end of the run",
    },

    /* ---- interpreter ---- */
    {
        .key = "interpreter.language",
        .flag = "--interpreter",
        .type = AJ_KEY_ENUM,
        FIELD(interp_lang),
        .def = AJ_INTERP_NONE,
        .max = AJ_INTERP_PYTHON,
        .names = interp_names,
        .what = "interpreter language",
        .weaker = AJ_WEAKER_NEITHER,
        .review = "which interpreter a pool keeps warm",
        .doc = "`\"python\"`: a pool of this policy parks `python3` interpreters, and `agentjail run` runs "
               "`CODE_FILE` (or `-c CODE`) with the same bootstrap, cold; `\"none\"`: plain commands",
    },
    {
        .key = "interpreter.preload",
        .flag = "--preload",
        .type = AJ_KEY_MODULE_LIST,
        LIST(preload, n_preload),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of module names",
        .doc = "modules imported, in order, by each interpreter before it parks (and by a cold run before "
               "the code): `\"numpy\"`, `\"pandas\"`, `\"matplotlib.pyplot\"`. At most 64, each a dotted "
               "name. Needs `language`",
    },
    {
        .key = "interpreter.warmup",
        .flag = "--warmup",
        .type = AJ_KEY_STRING,
        FIELD(interp_warmup),
        .zero = AJ_ZERO_NONE,
        .weaker = AJ_WEAKER_NEITHER,
        .review = "code every interpreter of this policy runs before its request",
        .doc_type = "Python code or `null`",
        .doc_default = "`null`: none",
        .doc = "a cell each interpreter runs after `preload`, before it parks (and a cold run before the "
               "code), in a namespace of its own, output discarded: it warms up what the first use of the "
               "preload costs (lazy imports, caches). Whatever it changes (options, imports, threads) every "
               "run of the policy inherits. At most 64 KiB. Needs `language`",
    },
    {
        .key = "interpreter.template",
        .type = AJ_KEY_BOOL,
        FIELD(interp_template),
        .def = true,
        .weaker = AJ_WEAKER_TRUE,
        .review = "parked interpreters are forks of one template: they share its hash seed and memory layout, "
                  "and the preload was imported outside any sandbox",
        .doc = "`true`: a pool imports the preload once, in a template interpreter outside the sandboxes "
               "(no capabilities, a read-only view, no network), and each parked interpreter is a fork of it "
               "that enters a sandbox made for it alone, every layer applied there; `false`: each parked "
               "interpreter starts `python3` and imports the preload itself, inside its sandbox. See "
               "[interpreters.md](interpreters.md#templates) for the trade-off. Only pools use it; cold "
               "runs import as `false` does",
    },

    /* ---- secrets (top level) ---- */
    {
        .key = "secrets",
        .flag = "--secret",
        .type = AJ_KEY_SECRET_LIST,
        LIST(secrets, n_secrets),
        .weaker = AJ_WEAKER_CUSTOM,
        .doc_type = "array of secret objects (below)",
        .sub = secret_members,
        .doc = "`proxy` only: credentials the sandbox never holds. It gets a placeholder of the same shape; the "
               "egress proxy puts the real value in `header` on requests to `hosts` alone, and stops at the "
               "run's first escape attempt (`credentials_suspended`). See "
               "[network.md](network.md#brokering-the-sandbox-side). Flag: "
               "`--secret ID,hosts=H1|H2,from=env:NAME,env=VAR[,file=/PATH][,header=H][,format=TEXT]`",
    },
};
const size_t aj_policy_n_keys = sizeof(aj_policy_keys) / sizeof(aj_policy_keys[0]);

const struct aj_limit_name aj_limit_names[4] = {
    {"memory", AJ_LIMIT_MEMORY},
    {"pids", AJ_LIMIT_PIDS},
    {"cpus", AJ_LIMIT_CPUS},
    {"cpu_time", AJ_LIMIT_CPU_TIME},
};

const char *aj_policy_key_name(const struct aj_policy_key *k)
{
    const char *dot = strchr(k->key, '.');
    return dot ? dot + 1 : k->key;
}

bool aj_policy_key_in_group(const struct aj_policy_key *k, const char *group)
{
    size_t n = strlen(group);
    /* A whole group ("secrets") is its one key. */
    return strncmp(k->key, group, n) == 0 && (k->key[n] == '.' || k->key[n] == '\0');
}

const struct aj_policy_key *aj_policy_key_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        if (strcmp(k->key, name) == 0 || (k->flag && strcmp(k->flag, name) == 0))
            return k;
    }
    return NULL;
}
