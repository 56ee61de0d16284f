/* SPDX-License-Identifier: Apache-2.0 */
/* libagentjail: the public interface. The CLI, the server and the tests
 * are all clients of these functions. */
#pragma once

#include "aj_error.h"
#include "aj_policy.h"
#include "aj_result.h"

#include <stddef.h>
#include <stdint.h>

/* Where one of the payload's standard streams goes. The zero value is
 * AJ_STDIO_NULL: a payload never gets the caller's own 0, 1 or 2 unless
 * the caller names them (an MCP server speaking JSON-RPC on its stdio
 * would otherwise hand that channel to the code it runs). A terminal is
 * never handed over either: its output is relayed, and a payload whose
 * stdin and stdout are both terminals gets a pty of its own. */
enum aj_stdio_kind {
    AJ_STDIO_NULL = 0, /* /dev/null */
    AJ_STDIO_FD,       /* the caller's fd (not closed, not made non-blocking) */
    AJ_STDIO_PIPE,     /* a pipe the library makes; the caller's end: aj_sandbox_take_pipe */
};

struct aj_stdio {
    enum aj_stdio_kind kind;
    int fd; /* AJ_STDIO_FD only */
};

#define AJ_STDIO_OF_FD(f) ((struct aj_stdio){.kind = AJ_STDIO_FD, .fd = (f)})
#define AJ_STDIO_PIPE_NEW ((struct aj_stdio){.kind = AJ_STDIO_PIPE, .fd = -1})

/* One command to run. size is sizeof(struct aj_request) as the caller
 * was compiled (AJ_REQUEST_INIT sets it): fields added later to the end
 * read as zero for older callers, and a newer caller's request is refused
 * (E2BIG) only if it sets a field this library does not know. Read during
 * the call that takes it; nothing of it is kept afterwards. */
struct aj_request {
    size_t size;
    char *const *argv;       /* argv[0] searched in the sandbox's PATH; required */
    char *const *envp;       /* NAME=VALUE added to the policy's environment (and winning), or NULL */
    struct aj_stdio stdio[3]; /* stdin, stdout, stderr */
    const char *workdir;     /* absolute path inside; NULL: the policy's */
    const char *events_path; /* audit events as JSON Lines: a file, "-" for stderr, or NULL */
    /* Per-request limits, 0: the policy's. A request may only tighten the
     * policy: a value above the policy's fails with EPERM and a message
     * naming the limit (where the policy sets none, any value tightens).
     * A request that sets memory_max or cpu_time_ms also makes that limit
     * required: with no cgroup to enforce it the run fails instead of
     * going on without it. */
    uint64_t timeout_ms;
    uint64_t memory_max;  /* bytes */
    uint64_t cpu_time_ms;
    uint64_t output_limit; /* bytes per stream */
};

#define AJ_REQUEST_INIT {.size = sizeof(struct aj_request)}

/* Run req->argv inside a fresh sandbox built from pol, wait for it, fill
 * res. Returns 0 when the sandbox ran (whatever the payload did: see
 * res->status), or a negative errno with err filled when it could not be
 * set up (nothing is left behind either way; res->status is then
 * setup_error). AJ_STDIO_PIPE is refused here (nobody could read the
 * caller's end while this call blocks). */
AJ_EXPORT int aj_run_ex(const struct aj_policy *pol, const struct aj_request *req, struct aj_result *res,
                        struct aj_error *err);
/* aj_run_ex with argv and nothing else: stdin, stdout and stderr are
 * /dev/null, no events file. */
AJ_EXPORT int aj_run(const struct aj_policy *pol, char *const argv[], struct aj_result *res,
                     struct aj_error *err);

/* Decoys are watched with file leases, and the kernel reports a lease
 * break only by a signal. It goes to a thread of the library's own
 * (started at the first sandbox with decoys), which blocks every signal:
 * a thread-directed signal reaches no other thread, whatever its mask or
 * disposition, so an embedder need do nothing about it. The default is
 * SIGRTMIN+6; change it (before the first sandbox; EBUSY after) only if the
 * process uses that number process-wide with every thread blocking it,
 * where the library's thread could read it: then the signal is taken but
 * ignored (a kill or sigqueue is not a lease break). */
AJ_EXPORT int aj_set_lease_signal(int sig, struct aj_error *err);

/* A warm pool: sandboxes prepared ahead of time from one policy (namespaces,
 * root filesystem, cgroups, id maps, Landlock, seccomp, the payload process
 * forked and waiting), so a run costs little more than an exec. Each
 * pooled sandbox runs exactly one command and is then torn down; nothing
 * of one run (files, processes, environment, ids) reaches another. The
 * pool refills itself from a thread of its own (which blocks every signal),
 * so preparing the next sandbox overlaps the current run. aj_pool_run is
 * not thread-safe: one caller thread per pool; the policy must outlive
 * the pool. Degraded (no-namespace)
 * policies cannot be pooled. */
struct aj_pool;

struct aj_pool_stats {
    uint64_t prepared;        /* sandboxes prepared, in total */
    uint64_t warm_runs;       /* runs that took a parked sandbox */
    uint64_t cold_runs;       /* runs that found the pool empty and ran cold */
    uint64_t discarded;       /* parked sandboxes found dead and dropped */
    uint64_t refill_failures; /* refills that failed (the pool runs short) */
    unsigned ready;           /* parked now */
};

/* Prepare size (1..64) sandboxes. Fails, with nothing left behind, when
 * even one cannot be prepared. */
AJ_EXPORT int aj_pool_new(const struct aj_policy *pol, unsigned size, struct aj_pool **ret,
                          struct aj_error *err);
/* As aj_run_ex, in a parked sandbox (or a cold one when none is ready, or
 * when the request sets what a parked sandbox has fixed already: its
 * working directory, memory or cpu-time limit). */
AJ_EXPORT int aj_pool_run(struct aj_pool *pool, const struct aj_request *req, struct aj_result *res,
                          struct aj_error *err);
AJ_EXPORT void aj_pool_get_stats(struct aj_pool *pool, struct aj_pool_stats *out);
/* Tear down every parked sandbox and remove what is left of finished runs. */
AJ_EXPORT void aj_pool_free(struct aj_pool *pool);
