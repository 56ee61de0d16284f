/* SPDX-License-Identifier: Apache-2.0 */
/* agentjail-probe: what an escape attempt would find from the inside.
 *
 * The probe is a list of checks (main.c); each check looks at one area and
 * records findings through pr_add(). Every probe is harmless by design:
 * privileged syscalls get arguments the kernel rejects only after its
 * permission check, files that would matter if written are opened O_WRONLY
 * and closed without a write, namespace and port-I/O attempts run in a
 * child that exits at once, nothing is ever sent over a network, and
 * credentials are reported by name and path, never by value. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

enum pr_status { PR_EXPOSED, PR_BLOCKED, PR_ABSENT, PR_INFO, PR_UNKNOWN };

/* The severity a vector has when it is exposed (summary counts exposed
 * findings only). */
enum pr_sev { PR_SEV_CRITICAL, PR_SEV_HIGH, PR_SEV_MEDIUM, PR_SEV_LOW, PR_SEV_INFO };

enum pr_cat {
    PR_CAT_PRIVILEGES,
    PR_CAT_SYSCALLS,
    PR_CAT_FILESYSTEM,
    PR_CAT_DEVICES,
    PR_CAT_RUNTIME,
    PR_CAT_CREDENTIALS,
    PR_CAT_NETWORK,
    PR_CAT_PROCESSES,
    PR_CAT_KERNEL,
};

#define PR_ID_MAX 64
#define PR_TITLE_MAX 128
#define PR_DETAIL_MAX 1024
#define PR_MAX_INHERITED_FDS 256

struct pr_finding {
    char id[PR_ID_MAX];
    enum pr_cat cat;
    enum pr_status status;
    enum pr_sev sev;
    char title[PR_TITLE_MAX];
    char detail[PR_DETAIL_MAX];
};

/* The five capability sets of this process; known=false if neither
 * capget/prctl nor /proc/self/status could tell. */
struct pr_creds {
    bool known;
    uint64_t eff, prm, inh, bnd, amb;
};

struct pr_ctx {
    const char *only; /* --only NAME, or NULL for every check */
    struct pr_creds creds;
    /* Descriptors >= 3 open when the probe started, taken before the probe
     * opened anything of its own. */
    int inherited_fds[PR_MAX_INHERITED_FDS];
    size_t n_inherited_fds;
    bool inherited_fds_truncated;
    char kernel[128]; /* uname -r, or AGENTJAIL_PROBE_KERNEL */
    bool kernel_overridden;
    char kernel_build[256]; /* uname -v */
    int userns_err;         /* <0: not tried yet; 0: a user namespace could be created */
    struct pr_finding *items;
    size_t n_items, cap_items;
    bool failed; /* out of memory: the report would be incomplete */
};

/* ---- findings (report.c) ---- */

/* Does --only select this finding id (or is there no --only)? */
bool pr_wanted(const struct pr_ctx *c, const char *id);

/* Record one finding. The detail is printf-formatted and cut at
 * PR_DETAIL_MAX; it must never contain a credential's value. */
void pr_add(struct pr_ctx *c, const char *id, enum pr_cat cat, enum pr_status st, enum pr_sev sev,
            const char *title, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* A detail built item by item: "a; b; c", and "(+N more)" once full. */
struct pr_list {
    char buf[PR_DETAIL_MAX - 64];
    size_t len;
    unsigned n, dropped;
};
void pr_list_add(struct pr_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *pr_list_str(struct pr_list *l);

int pr_write_json(const struct pr_ctx *c, FILE *f);
int pr_write_table(const struct pr_ctx *c, FILE *f);

/* ---- helpers (util.c) ---- */

/* Read up to cap-1 bytes of a small file, NUL-terminated. Returns the
 * length or -errno. Never follows into a FIFO or blocks on a device. */
ssize_t pr_read_text(const char *path, char *buf, size_t cap);
/* A sysctl or other one-number file; -errno if missing or not a number. */
int pr_read_long(const char *path, long *ret);
/* "EPERM", or "E123" for a number without a name. Static storage. */
const char *pr_errname(int e);
/* Is a procfs mounted at /proc (checked with fstatfs, not by name)? */
bool pr_have_proc(void);
/* Strict decimal parse of a whole string (no sign, no spaces). */
bool pr_parse_uint(const char *s, unsigned long *ret);
/* Copy src into dst (cap bytes, always terminated, silently cut). */
void pr_copy(char *dst, size_t cap, const char *src);
/* Copy s into dst with anything unprintable replaced by '?'. */
void pr_printable(char *dst, size_t cap, const char *s, size_t n);

struct pr_child_out {
    long r;    /* what fn returned */
    int err;   /* errno after fn, 0 if fn returned >= 0 */
    long aux;  /* fn's extra result */
    int signo; /* the child died of this signal (e.g. SIGSYS from seccomp) */
};
/* Run fn in a forked child: whatever fn changes (namespaces, I/O privilege
 * level) dies with the child, and a seccomp kill takes only the child.
 * Returns 0 with out filled, or -errno if the child could not be run. */
int pr_in_child(long (*fn)(void *arg, long *aux), void *arg, struct pr_child_out *out);

/* Is capability nr in the effective set? */
bool pr_has_cap(const struct pr_ctx *c, int nr);
/* CAP_BPF or CAP_SYS_ADMIN: BPF programs despite unprivileged_bpf_disabled. */
bool pr_bpf_capable(const struct pr_ctx *c);
/* Could this process create a user namespace (tried once, in a child)?
 * Returns 0 if yes, else the positive errno. */
int pr_userns_err(struct pr_ctx *c);

/* ---- the checks (one file per area) ---- */

void pr_check_caps(struct pr_ctx *c);
void pr_check_privileges(struct pr_ctx *c);
void pr_check_namespaces(struct pr_ctx *c);
void pr_check_syscalls(struct pr_ctx *c);
void pr_check_filesystem(struct pr_ctx *c);
void pr_check_fds(struct pr_ctx *c);
void pr_check_devices(struct pr_ctx *c);
void pr_check_runtime(struct pr_ctx *c);
void pr_check_credentials(struct pr_ctx *c);
void pr_check_network(struct pr_ctx *c);
void pr_check_processes(struct pr_ctx *c);
void pr_check_kernel(struct pr_ctx *c);

/* Gather the capability sets once (privileges.c). */
void pr_creds_load(struct pr_creds *cr);
