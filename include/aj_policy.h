/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aj_error.h"

/* The one normalised policy. CLI flags fill it today; policy files (JSON)
 * fill the same struct. Every layer reads it; nothing else decides what
 * the sandbox gets. The canonical JSON of this struct is what is hashed. */

enum aj_network {
    AJ_NET_NONE = 0,    /* empty netns, lo down, Landlock refuses TCP */
    AJ_NET_LOOPBACK,    /* the default: empty netns with lo up, the sandbox talks to itself */
};

enum aj_on_escape {
    AJ_ON_ESCAPE_DENY = 0, /* refuse, record, go on */
    AJ_ON_ESCAPE_KILL,     /* end the whole run at the first escape-indicative event */
};

struct aj_bind {
    char *host;    /* absolute host path */
    char *sandbox; /* absolute path inside the sandbox */
    bool rw;
    /* rw only: the host owner of the workspace's files (id-mapped mount,
     * docs/policy.md "owner"); unset: the bind source's owner. */
    bool owner_set;
    uint32_t owner_uid, owner_gid;
};

struct aj_tmpfs {
    char *path;    /* absolute path inside the sandbox */
    uint64_t size; /* bytes */
};

#define AJ_DEFAULT_TIMEOUT_MS   0ULL            /* 0: no wall-clock limit */
#define AJ_DEFAULT_TMP_SIZE     (64ULL << 20)   /* --tmpfs; /tmp and /dev/shm without a memory limit */
#define AJ_TMP_SIZE_AUTO        0ULL            /* tmp_size: half the memory limit (aj_policy_tmp_size) */
#define AJ_DEFAULT_UID          1000U
#define AJ_DEFAULT_GID          1000U
#define AJ_DEFAULT_UID_BASE     0x60000000U     /* root mode: host uids for runs */
#define AJ_DEFAULT_UID_COUNT    65536U
#define AJ_DEFAULT_NOFILE       1024ULL
#define AJ_DEFAULT_FSIZE        (1ULL << 30)
#define AJ_DEFAULT_HOSTNAME     "agentjail"
#define AJ_DEFAULT_WORKDIR      "/tmp"
#define AJ_DEFAULT_PATH         "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

struct aj_policy {
    struct aj_bind *binds;
    size_t n_binds;
    struct aj_tmpfs *tmpfs;
    size_t n_tmpfs;
    char **env;       /* "K=V", in order; later entries override earlier */
    size_t n_env;
    char **env_pass;  /* names copied from the caller's environment */
    size_t n_env_pass;
    char *workdir;
    char *hostname;
    uint64_t timeout_ms;
    uint64_t tmp_size;          /* /tmp and /dev/shm; AJ_TMP_SIZE_AUTO: by the memory limit */
    enum aj_network network;
    uint32_t uid, gid;          /* inside the sandbox */
    uint32_t uid_base, uid_count; /* root mode: host uid/gid range for runs */
    uint64_t rlimit_nofile;
    uint64_t rlimit_fsize;
    bool allow_degraded;        /* run without namespaces if they are refused */
    bool allow_no_landlock;     /* run on a kernel without Landlock (before 5.13) */
    bool noexec_tmp;            /* /tmp, /dev/shm, --tmpfs: noexec mounts, no Landlock execute */
    bool allow_unscoped_signals; /* degraded rootless run where Landlock cannot scope signals (ABI < 6) */
    bool allow_no_decoys;       /* run when the decoys cannot be watched (no CAP_LEASE) */
    /* Bind a source that lies inside a directory a sandbox run was given to
     * write (or that a sandbox made): what is there may have been planted
     * by that run. Off by default. Symlinks are refused regardless. */
    bool allow_bind_inside_writable;
    /* Debuggers (gdb, strace, LeakSanitizer): ptrace, process_vm_readv/
     * writev and kcmp between the payload's own processes; init (pid 1)
     * stays refused and reported. Off by default (docs/security-model.md,
     * "Debuggers"); never in degraded mode (no pid namespace). */
    bool allow_ptrace;

    /* Resource limits (0: none). A cgroup enforces memory, pids and cpu
     * bandwidth; the supervisor enforces cpu time (from the cgroup's usage)
     * and output size. */
    uint64_t memory_max;        /* bytes, RAM + swap */
    uint64_t pids_max;
    uint32_t cpu_milli;         /* CPU bandwidth in thousandths of a CPU */
    uint64_t cpu_time_ms;       /* CPU time of the whole tree */
    uint64_t output_limit;      /* bytes per stream (stdout, stderr) */
    /* The cgroup limits that must hold (AJ_LIMIT_* bits): the run fails
     * closed if one cannot be enforced. A limit set by flag or policy key
     * is required; the defaults apply only where a cgroup is available,
     * and the result says what was applied. */
    uint32_t required_limits;

    /* Detection (see docs/events.md). Escape-indicative syscalls always go
     * to the supervisor, which records them and answers EPERM. */
    bool decoys;                /* docker.sock and Kubernetes token decoys (default on) */
    bool cloud_decoys;          /* cloud credential decoys in env and ~/.aws (default off) */
    enum aj_on_escape on_escape;
    char *alert_cmd;            /* run on the host at the first high-severity event */
    uint64_t alert_timeout_ms;
    /* Events of the budgeted kinds (escape attempts, canaries, ...) written
     * per run; past it they are counted and summarised once a second
     * (events_suppressed), and the events file's growth is capped. */
    uint64_t event_budget;
};

enum aj_limit_bit {
    AJ_LIMIT_MEMORY = 1u << 0,
    AJ_LIMIT_PIDS = 1u << 1,
    AJ_LIMIT_CPUS = 1u << 2,
    AJ_LIMIT_CPU_TIME = 1u << 3,
};

/* Applied when a cgroup is available and the user set no value: a fork
 * bomb or a runaway allocation must not reach the host by default. */
#define AJ_DEFAULT_MEMORY_MAX   (2ULL << 30)
#define AJ_DEFAULT_PIDS_MAX     1024ULL
#define AJ_DEFAULT_ALERT_TIMEOUT_MS 10000ULL
#define AJ_DEFAULT_EVENT_BUDGET 1000ULL
#define AJ_MAX_EVENT_BUDGET     1000000ULL

AJ_EXPORT void aj_policy_init(struct aj_policy *pol);
/* The size /tmp and /dev/shm get: tmp_size if set; else ("auto") half the
 * memory limit when a cgroup enforces it (tmpfs pages are charged to it,
 * so both full still fit), at least AJ_DEFAULT_TMP_SIZE; without an
 * enforced memory limit, AJ_DEFAULT_TMP_SIZE (a tmpfs nothing bounds
 * would be host memory). */
AJ_EXPORT uint64_t aj_policy_tmp_size(const struct aj_policy *pol, bool memory_enforced);
AJ_EXPORT void aj_policy_clear(struct aj_policy *pol);

/* Flag-shaped setters: each validates its own argument and reports the
 * problem in err (errnum 0: bad input). */
AJ_EXPORT int aj_policy_add_bind(struct aj_policy *pol, const char *spec, bool rw,
                                 struct aj_error *err);
AJ_EXPORT int aj_policy_add_tmpfs(struct aj_policy *pol, const char *spec, struct aj_error *err);
AJ_EXPORT int aj_policy_add_env(struct aj_policy *pol, const char *kv, struct aj_error *err);
AJ_EXPORT int aj_policy_add_env_pass(struct aj_policy *pol, const char *name,
                                     struct aj_error *err);
AJ_EXPORT int aj_policy_set_string(char **slot, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_network(struct aj_policy *pol, const char *value,
                                    struct aj_error *err);
AJ_EXPORT int aj_policy_set_uid_range(struct aj_policy *pol, const char *spec,
                                      struct aj_error *err);
/* Limits, flag-shaped: "512M", "100", "0.5", "10s". */
AJ_EXPORT int aj_policy_set_memory(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_pids(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_cpus(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_cpu_time(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_output_limit(struct aj_policy *pol, const char *value,
                                         struct aj_error *err);
AJ_EXPORT int aj_policy_set_file_size(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_open_files(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_on_escape(struct aj_policy *pol, const char *value, struct aj_error *err);
AJ_EXPORT int aj_policy_set_alert_timeout(struct aj_policy *pol, const char *value, struct aj_error *err);
/* 1..1000000 events per run. */
AJ_EXPORT int aj_policy_set_event_budget(struct aj_policy *pol, const char *value, struct aj_error *err);

AJ_EXPORT int aj_policy_add_bind_paths(struct aj_policy *pol, const char *host, const char *sandbox,
                                       bool rw, struct aj_error *err);
/* Same; *ret_bad_sandbox is set when the sandbox path (not the host path)
 * was at fault. */
AJ_EXPORT int aj_policy_add_bind_paths_ex(struct aj_policy *pol, const char *host, const char *sandbox,
                                          bool rw, int *ret_bad_sandbox, struct aj_error *err);

/* Whole-policy checks (conflicts, paths that must exist). The _at form
 * also names the policy key at fault ("filesystem.binds[1].sandbox"). */
AJ_EXPORT int aj_policy_validate(const struct aj_policy *pol, struct aj_error *err);
AJ_EXPORT int aj_policy_validate_at(const struct aj_policy *pol, char *ret_key, size_t key_size,
                                    struct aj_error *err);

/* The normalised policy as a policy file (every default filled in, sorted
 * keys): compact is the canonical form that is hashed, otherwise indented
 * for people. Loading it back gives the same policy and the same hash.
 * NULL on allocation failure. Caller frees. */
AJ_EXPORT char *aj_policy_to_json(const struct aj_policy *pol, bool compact);
#define aj_policy_canonical_json(pol) aj_policy_to_json((pol), true)

/* Policy files (JSON; see docs/policy.md). Loading fills pol on top of what
 * it holds (call aj_policy_init first for a fresh one). Errors name
 * FILE:LINE:COLUMN and the key path (errnum 0: bad input). */
AJ_EXPORT int aj_policy_load_file(struct aj_policy *pol, const char *path, struct aj_error *err);
AJ_EXPORT int aj_policy_load_buffer(struct aj_policy *pol, const char *buf, size_t len,
                                    const char *name, struct aj_error *err);
/* Built-in profiles, compiled in from the JSON files in profiles/. */
AJ_EXPORT int aj_policy_load_profile(struct aj_policy *pol, const char *name, struct aj_error *err);
AJ_EXPORT const char *const *aj_policy_profile_names(void);
/* What a reviewer needs: one line per protection that differs between a
 * and b, saying which side is weaker. NULL when they are the same (and
 * *ret_oom set on allocation failure). Caller frees. */
AJ_EXPORT char *aj_policy_diff(const struct aj_policy *a, const struct aj_policy *b, bool *ret_oom);
AJ_EXPORT int aj_policy_sha256(const struct aj_policy *pol, char ret_hex[65],
                               struct aj_error *err);

/* Strict number parsing shared by every caller (no atoi, no sscanf). */
AJ_EXPORT int aj_parse_u64(const char *s, uint64_t max, uint64_t *ret);
/* "UID:GID", decimal, each below 4294967295. -EINVAL otherwise. */
AJ_EXPORT int aj_parse_owner(const char *s, uint32_t *ret_uid, uint32_t *ret_gid);
AJ_EXPORT int aj_parse_size(const char *s, uint64_t *ret);        /* 512, 64K, 512M, 1G */
AJ_EXPORT int aj_parse_duration_ms(const char *s, uint64_t *ret); /* 10, 10s, 500ms, 2m */
