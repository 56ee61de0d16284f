/* SPDX-License-Identifier: Apache-2.0 */
/* The policy inside the library: the struct every layer reads, and the key
 * table that declares each policy key once (name, type, field, default,
 * bounds, how it weakens the policy, its documentation). Not installed:
 * embedders see struct aj_policy as opaque (include/aj_policy.h) and set
 * keys by name; the library's own modules, assess and the tests include
 * this header.
 *
 * Who reads the table (none of them lists keys of its own):
 *   model.c     defaults, clearing, setting a key from text (flags, aj_policy_set)
 *   validate.c  range checks from min/max; the cross-key checks stay code
 *   load.c      policy files in
 *   canonical.c the canonical JSON out (and so the hash)
 *   diff.c      the reviewer's diff
 *   keydoc.c    the key reference in docs/policy.md
 *   src/assess/scoring.c the risk report's penalties for weakening keys */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "aj_error.h"
#include "aj_policy.h"

enum aj_network {
    AJ_NET_NONE = 0,    /* empty netns, lo down, Landlock refuses TCP */
    AJ_NET_LOOPBACK,    /* the default: empty netns with lo up, the sandbox talks to itself */
    AJ_NET_PROXY,       /* lo up, no route out; a relay on 127.0.0.1:proxy_port to the egress proxy */
};

/* interpreter.language: a pool of this policy parks interpreters (docs/interpreters.md). */
enum aj_interp_lang {
    AJ_INTERP_NONE = 0,
    AJ_INTERP_PYTHON,
};
#define AJ_INTERP_MAX_PRELOAD 64
/* A process that cannot see the host's filesystem (a template pool's
 * template, tmpl_child.c) loads a policy the supervisor checked already:
 * host paths are taken as given, not looked up. Not for anything else. */
extern bool aj_policy_host_paths_unseen;
#define AJ_INTERP_MAX_WARMUP (64 * 1024) /* bytes of interpreter.warmup code */
#define AJ_INTERP_MODULE_MAX 128

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

/* A brokered credential (top-level "secrets", docs/network.md): the
 * sandbox gets a placeholder of the same shape in env (a variable) or file
 * (a path inside); the egress proxy swaps in the real value, read by the
 * supervisor from value_from at run time, only in header on requests to
 * hosts. The value is never in the policy (nor in its hash). */
struct aj_secret {
    char *id;
    char **hosts;
    size_t n_hosts;
    char *header;     /* NULL: "Authorization" */
    char *format;     /* NULL: "Bearer {}" */
    char *value_from; /* "env:NAME" or "file:/abs/path" (host) */
    char *env;        /* variable inside that gets the placeholder, or NULL */
    char *file;       /* file inside that holds the placeholder, or NULL */
};

#define AJ_SECRET_DEFAULT_HEADER "Authorization"
#define AJ_SECRET_DEFAULT_FORMAT "Bearer {}"
#define AJ_MAX_SECRETS 16

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

/* The one normalised policy. Flags, policy files and aj_policy_set fill it
 * through the key table; every layer reads it; nothing else decides what
 * the sandbox gets. Its canonical JSON is what is hashed. A field added
 * here gets a row in keys.c, or it is neither loaded, dumped, hashed,
 * compared nor validated. */
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
    /* network.mode "proxy" (docs/network.md): what the egress proxy lets
     * through, as written ("host", "*.domain", "host:port", "METHOD
     * host:port"); deny wins; allow_ranges opts CIDRs back in past the
     * deny floor. The caps bound what one run may do through it. */
    char **net_allow;
    size_t n_net_allow;
    char **net_deny;
    size_t n_net_deny;
    char **net_allow_ranges;
    size_t n_net_allow_ranges;
    uint32_t proxy_port;
    char *net_resolver;         /* "IP:PORT" the proxy asks; NULL: the host's resolv.conf */
    uint64_t net_max_connections;
    uint64_t net_max_bytes_out;
    uint64_t net_max_bytes_in;
    uint64_t net_max_connection_ms;
    uint64_t net_max_requests_per_second;
    struct aj_secret *secrets;
    size_t n_secrets;
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

    /* Warm interpreters (src/lib/run/interp.c): the language a pool parks,
     * and the modules it imports inside each parked sandbox first. */
    enum aj_interp_lang interp_lang;
    char **preload;             /* module names ("numpy", "matplotlib.pyplot"), in order */
    size_t n_preload;
    char *interp_warmup;        /* Python code run after the preload, before parking; NULL: none */
    bool interp_template;       /* pools fork interpreters from one template (tmpl.c); default true */
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

/* A policy in caller-owned storage (the library's own modules and tests;
 * embedders use aj_policy_new). init fills the defaults from the key
 * table; clear frees what the policy holds and re-initialises it. */
void aj_policy_init(struct aj_policy *pol);
void aj_policy_clear(struct aj_policy *pol);

/* The size /tmp and /dev/shm get: tmp_size if set; else ("auto") half the
 * memory limit when a cgroup enforces it (tmpfs pages are charged to it,
 * so both full still fit), at least AJ_DEFAULT_TMP_SIZE; without an
 * enforced memory limit, AJ_DEFAULT_TMP_SIZE (a tmpfs nothing bounds
 * would be host memory). */
uint64_t aj_policy_tmp_size(const struct aj_policy *pol, bool memory_enforced);

/* ---- the key table ------------------------------------------------------------ */

/* How a key's value is written and stored. Scalars live in one field;
 * compound types (lists, ranges) have their own code in each reader, and
 * a new key of an existing type needs none. */
enum aj_key_type {
    AJ_KEY_BOOL,       /* bool; JSON true/false */
    AJ_KEY_COUNT,      /* uint32/64; JSON integer or decimal string */
    AJ_KEY_ID,         /* uint32; JSON integer only (a uid or gid) */
    AJ_KEY_SIZE,       /* bytes; JSON integer (bytes) or "512M" */
    AJ_KEY_DURATION,   /* milliseconds; JSON integer (seconds) or "10s", "500ms" */
    AJ_KEY_CPUS,       /* thousandths of a CPU; JSON number or "0.5" */
    AJ_KEY_ENUM,       /* an enum field; JSON one of .names */
    AJ_KEY_STRING,     /* char *, NULL: .def_str */
    AJ_KEY_CONST,      /* no field: the only value is .def_str (seccomp.filter) */
    AJ_KEY_BIND_LIST,  /* struct aj_bind[]: JSON array of {host, sandbox, mode, optional, owner} */
    AJ_KEY_TMPFS_LIST, /* struct aj_tmpfs[]: JSON array of {path, size}; text "PATH[:SIZE]" */
    AJ_KEY_ENV_MAP,    /* char *[] "K=V": JSON object {"K": "V"}; text "K=V" */
    AJ_KEY_NAME_LIST,  /* char *[] variable names: JSON array; text "NAME" */
    AJ_KEY_ID_RANGE,   /* two uint32 (base at .offset, count at .count_offset): {base, count}; "BASE:COUNT" */
    AJ_KEY_LIMIT_SET,  /* uint32 of AJ_LIMIT_* bits: JSON list of limit names or a boolean */
    AJ_KEY_STR_LIST,   /* char *[]: JSON array of strings, each checked by .check; text: one entry */
    AJ_KEY_SECRET_LIST, /* struct aj_secret[]: JSON array of secret objects; text: see aj_policy_add_secret */
    AJ_KEY_MODULE_LIST, /* char *[] dotted module names: JSON array; text "NAME" (interpreter.preload) */
};

/* What 0 means for a number. */
enum aj_key_zero {
    AJ_ZERO_VALUE = 0, /* nothing special: the bounds apply to it */
    AJ_ZERO_NONE,      /* no limit; JSON null */
    AJ_ZERO_AUTO,      /* chosen at run time; JSON "auto" */
};

/* Which side of a difference is the weaker policy. */
enum aj_key_weaker {
    AJ_WEAKER_NEITHER = 0, /* a difference to review, no side weaker (.review: a note) */
    AJ_WEAKER_TRUE,        /* a boolean: true weakens (.review says how) */
    AJ_WEAKER_FALSE,       /* a boolean: false weakens */
    AJ_WEAKER_HIGHER,      /* a limit: higher, or none, is weaker */
    AJ_WEAKER_VALUE,       /* an enum: .weak_value is weaker */
    AJ_WEAKER_CUSTOM,      /* diff.c has code for this key (compound keys, joined lines) */
    AJ_WEAKER_NOT_COMPARED, /* not a protection: the diff leaves it out (the row says why) */
};

/* A member of a compound key's objects (a bind's "host"): for the loader's
 * unknown-key check and the docs. */
struct aj_policy_subkey {
    const char *name;
    const char *type;
    const char *def;
    const char *doc;
};

struct aj_policy_key {
    const char *key;           /* "limits.memory": group.name, as in policy files */
    const char *flag;          /* "--memory": the agentjail run flag, or NULL */
    const char *doc_flag;      /* docs: the flags, where they are not one plain .flag */
    enum aj_key_type type;
    size_t offset;             /* of the field in struct aj_policy */
    size_t count_offset;       /* lists: of the count; AJ_KEY_ID_RANGE: of the count field */
    uint8_t width;             /* scalars: sizeof the field (enums: of the enum) */
    uint64_t def;              /* default of numbers, booleans and enums; AJ_KEY_ID_RANGE: base */
    uint64_t def_count;        /* AJ_KEY_ID_RANGE: default count */
    const char *def_str;       /* strings and constants: what NULL stands for */
    uint64_t min, max;         /* the values validation accepts, from any source */
    uint64_t input_max;        /* tighter bound on what flags and files may write; 0: max */
    enum aj_key_zero zero;
    bool flag_sets;            /* booleans: the value the flag (no argument) sets */
    uint32_t requires;         /* AJ_LIMIT_* bit a value given in a flag or file makes required */
    const char *const *names;  /* enums: names by value; booleans: how diff says false, true */
    const char *example;       /* files: what the value should have been ("a size like \"512M\"") */
    const char *bad;           /* printf format (%s: the value): why a text value is refused */
    const char *bad_flag;      /* the same for the flag where its wording differs; NULL: .bad */
    const char *what;          /* how validation errors name the field ("memory limit") */
    enum aj_key_weaker weaker;
    uint64_t weak_value;       /* AJ_WEAKER_VALUE: the weaker value */
    const char *review;        /* diff: why that side is weaker, or (AJ_WEAKER_NEITHER) a note */
    /* The risk report's penalty while the key is on its weaker side
     * (src/assess/scoring.c, docs/risk-model.md): dimension, +delta, why. */
    const char *risk_dim;
    int risk_delta;
    const char *risk_text;
    const char *doc_type;      /* docs: the type, where the generated one says too little */
    const char *doc_default;   /* docs: the default, where the value alone says too little */
    const char *doc;           /* docs: what the key protects against */
    const struct aj_policy_subkey *sub; /* compound objects' members, NULL-terminated */
    /* AJ_KEY_STR_LIST: the rule every entry follows (0 or -errno + err). */
    int (*check)(const char *entry, struct aj_error *err);
};

/* The groups of a policy file, in file and documentation order. */
struct aj_policy_group {
    const char *name;
    const char *intro; /* docs: before the group's table, or NULL */
    const char *outro; /* docs: after it, or NULL */
    /* The group's value is one key of the same name (top-level "secrets",
     * an array) rather than an object of keys. */
    bool whole;
};

extern const struct aj_policy_key aj_policy_keys[];
extern const size_t aj_policy_n_keys;
extern const struct aj_policy_group aj_policy_groups[];
extern const size_t aj_policy_n_groups;

/* By key path ("limits.memory") or flag ("--memory"); NULL if none. */
const struct aj_policy_key *aj_policy_key_find(const char *name);
/* The part after the group: "memory" of "limits.memory". */
const char *aj_policy_key_name(const struct aj_policy_key *k);
/* Whether k is in group g ("limits"). */
bool aj_policy_key_in_group(const struct aj_policy_key *k, const char *group);

/* Scalar fields, by row. */
uint64_t aj_policy_key_get(const struct aj_policy *pol, const struct aj_policy_key *k);
void aj_policy_key_put(struct aj_policy *pol, const struct aj_policy_key *k, uint64_t v);
const char *aj_policy_key_get_str(const struct aj_policy *pol, const struct aj_policy_key *k);
/* Whether pol has k on its weaker side (a weakening boolean set, an enum
 * at its weak value, a limit lifted): what the risk report penalises. */
bool aj_policy_key_is_weak(const struct aj_policy *pol, const struct aj_policy_key *k);

/* Set a key from text, flag-shaped ("512M", "0.5", "10s", "true"). label
 * prefixes the error ("--memory", "limits.memory"); from_flag picks the
 * flag's wording. Lists add an entry. Used by aj_policy_set and the
 * policy-file loader (which passes label NULL: no prefix, the loader
 * puts FILE:LINE:COLUMN: key in front). */
int aj_policy_key_set_text(struct aj_policy *pol, const struct aj_policy_key *k, const char *value,
                           const char *label, bool from_flag, struct aj_error *err);

/* A scalar's value as policy files write it: "512M", "10s", "0.5", "none",
 * "auto", "true", "loopback"; strings as they are. */
void aj_policy_key_format(const struct aj_policy_key *k, uint64_t v, char *buf, size_t size);

/* ---- values as text (parse.c) ----------------------------------------------- */

void aj_fmt_size(char *buf, size_t size, uint64_t v);        /* 512M, 4194305 */
void aj_fmt_duration(char *buf, size_t size, uint64_t ms);   /* 2m, 1500ms */
void aj_fmt_cpus(char *buf, size_t size, uint64_t milli);    /* 0.5, 2 */
int aj_parse_cpus_milli(const char *s, uint64_t *ret);       /* "0.5" -> 500; at most 3 decimals */

/* ---- the rules the setters and validation share (model.c) -------------------- */

int aj_policy_add_bind_paths_ex(struct aj_policy *pol, const char *host, const char *sandbox, bool rw,
                                int *ret_bad_sandbox, struct aj_error *err);
int aj_policy_add_tmpfs(struct aj_policy *pol, const char *spec, struct aj_error *err);
int aj_policy_add_env(struct aj_policy *pol, const char *kv, struct aj_error *err);
int aj_policy_add_env_pass(struct aj_policy *pol, const char *name, struct aj_error *err);
int aj_policy_add_preload(struct aj_policy *pol, const char *name, struct aj_error *err);
/* A dotted Python module name: identifiers ([A-Za-z_][A-Za-z0-9_]*) joined by '.', at most
 * AJ_INTERP_MODULE_MAX bytes. */
bool aj_policy_module_name_ok(const char *s);
int aj_policy_set_uid_range(struct aj_policy *pol, const char *spec, struct aj_error *err);
bool aj_policy_env_name_ok(const char *s, size_t n);
bool aj_policy_path_is_or_under(const char *path, const char *prefix);
int aj_policy_check_host_source(const char *host, const char *what, struct aj_error *err);
int aj_policy_check_bind_target(const char *path, bool rw, const char *what, struct aj_error *err);
int aj_policy_check_sandbox_path(const char *path, const char *what, struct aj_error *err);

/* ---- network "proxy" entries and secrets (netpol.c) ------------------------------- */

/* An allow/deny entry: "host", "*.domain", "host:port", "[v6]:port",
 * "IP", "METHOD host[:port]". */
int aj_policy_check_net_entry(const char *s, struct aj_error *err);
/* A CIDR: "10.1.0.0/16", "fd00::/8". */
int aj_policy_check_cidr(const char *s, struct aj_error *err);
/* Add a secret from text, the flag's form:
 *   ID,hosts=H1|H2,from=env:NAME|file:/PATH[,env=VAR][,file=/PATH][,header=H][,format=F] */
int aj_policy_add_secret(struct aj_policy *pol, const char *spec, struct aj_error *err);
/* Add a copy of s (loader). */
int aj_policy_push_secret(struct aj_policy *pol, const struct aj_secret *s, struct aj_error *err);
void aj_secret_clear(struct aj_secret *s);
/* One secret's rules, wherever it came from; ret_member names what is
 * wrong ("id", "hosts", ...). */
int aj_policy_check_secret(const struct aj_secret *s, const char **ret_member, struct aj_error *err);
/* The secret list as canonical JSON (no values: they are not in the policy). */
json_t *aj_policy_dump_secrets(const struct aj_policy *pol);

/* Cgroup limits by policy name, in a fixed order (limits.require_cgroup). */
struct aj_limit_name {
    const char *name;
    uint32_t bit;
};
extern const struct aj_limit_name aj_limit_names[4];
