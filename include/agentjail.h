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

/* ---- a run as a handle ------------------------------------------------------------
 *
 * aj_sandbox_start builds the sandbox and starts the command in it (a few
 * milliseconds of system calls in the calling thread; it does not wait
 * for the command) and returns a handle. The run then advances only when
 * the caller calls aj_sandbox_process: when aj_sandbox_fd(h) polls
 * readable (POLLIN; an epoll fd, so it can sit in the caller's own epoll
 * set or event loop), call it; it does what is due without blocking and
 * returns 1 once the run has ended. Deadlines, limits, decoy touches and
 * escape attempts are all handled there: a handle that is not processed
 * holds its sandbox's blocked system calls (a monitored call, a decoy
 * open) until it is. aj_sandbox_wait does the same in a loop, blocking.
 *
 *   aj_sandbox_start(&pol, &req, &h, &err);
 *   out = aj_sandbox_take_pipe(h, 1);        // req.stdio[1] = AJ_STDIO_PIPE_NEW
 *   ... poll aj_sandbox_fd(h) and out; on the former: aj_sandbox_process(h) ...
 *   r = aj_sandbox_wait(h, &err);            // returns at once once ended
 *   res = aj_sandbox_result(h);
 *   aj_sandbox_free(h);
 *
 * Threads: handles are independent; any number may be in flight, from one
 * thread (an event loop) or from several. One handle is used by one thread
 * at a time, aj_sandbox_kill and aj_sandbox_free included (to cancel from
 * another thread, tell the thread that owns the handle). A pool's
 * aj_pool_start may be called from several threads at once. The policy is
 * read, never written, and may be shared by handles; it must outlive them
 * and not change meanwhile. The thread that starts a run must outlive it:
 * the kernel's parent-death signal, the sandbox's backstop should its
 * supervisor die, follows the thread that cloned it.
 *
 * Signals: none is taken from the embedder: no handler, no disposition,
 * no mask of another thread. While a call works in the caller's thread,
 * SIGPIPE, SIGTTOU and SIGTTIN are blocked in that thread and restored
 * before it returns (a write to a pipe whose reader left gives EPIPE, a
 * relay to a terminal from a background job is not stopped; the SIGPIPE
 * such a write causes is taken back). To end a run on ^C or SIGTERM, the
 * embedder catches them as it likes and calls aj_sandbox_kill (the CLI
 * does so with a signalfd). Decoy lease breaks: see aj_set_lease_signal.
 *
 * Children: the library's processes (each sandbox's init, short-lived
 * helpers, the alert hook) are waited for by pid; a caller that reaps
 * any child (waitpid(-1), often in a SIGCHLD handler) takes those
 * statuses away (the run then reports init's status as unknown, SIGKILL).
 * A degraded (no-namespace) run makes the process a child subreaper and
 * at its end kills the children it inherited; only one degraded run may
 * be in flight per process (EBUSY), and children the process starts during
 * one may be taken for its leftovers. */
struct aj_sandbox;

/* Start req in a fresh sandbox built from pol: 0 and *ret a handle. A
 * run that cannot be set up (a refused request or policy, a missing
 * kernel feature, ...) is a handle that has ended already: its result
 * says setup_error, aj_sandbox_wait returns the error, and nothing of the
 * sandbox is left (an events file has its error and exit events, as for
 * any run). A negative errno, err filled and *ret NULL, only when there
 * is no handle to return (out of memory or fds). */
AJ_EXPORT int aj_sandbox_start(const struct aj_policy *pol, const struct aj_request *req, struct aj_sandbox **ret,
                               struct aj_error *err);
/* Readable (POLLIN) when aj_sandbox_process has work, and for good once
 * the run has ended. Owned by the handle: do not close it. */
AJ_EXPORT int aj_sandbox_fd(const struct aj_sandbox *h);
/* The run's id (the result's sandbox_id, the events' sandbox_id). */
AJ_EXPORT const char *aj_sandbox_id(const struct aj_sandbox *h);
/* Do what is due, never waiting. 1: the run has ended (the result is
 * there, the sandbox and everything of it is gone); 0: still running. */
AJ_EXPORT int aj_sandbox_process(struct aj_sandbox *h);
/* Process until the run ends. Returns 0 when the sandbox ran (whatever the
 * payload did: see the result's status), or the sandbox side's setup error
 * (-errno, err filled; the result's status is setup_error). */
AJ_EXPORT int aj_sandbox_wait(struct aj_sandbox *h, struct aj_error *err);
/* End the run now: every process of the sandbox is killed; the result
 * says signaled, signal sig (the reason: the signal the caller got, say).
 * The end is then processed as usual. -ESRCH once ended. */
AJ_EXPORT int aj_sandbox_kill(struct aj_sandbox *h, int sig);
/* The result once the run has ended (owned by the handle), else NULL. */
AJ_EXPORT const struct aj_result *aj_sandbox_result(const struct aj_sandbox *h);
/* The caller's end of an AJ_STDIO_PIPE stream (0, 1, 2), once: the
 * caller owns it from then on (close-on-exec; blocking until the caller
 * sets O_NONBLOCK on it). stdout's and stderr's read EOF when the run has
 * ended. -ENOENT: not a pipe, or taken already. */
AJ_EXPORT int aj_sandbox_take_pipe(struct aj_sandbox *h, int stream);
/* Kill and reap a run still going (its output is dropped; it still gets
 * its end events and, bounded by its timeout, its alert hook), close what
 * is left (an untaken pipe end), free the handle. NULL is a no-op. */
AJ_EXPORT void aj_sandbox_free(struct aj_sandbox *h);

/* Start, wait, result, free: a whole cold run in the caller's thread.
 * Returns as aj_sandbox_wait; res is filled in every case (setup_error
 * when the sandbox could not be set up). AJ_STDIO_PIPE is refused here
 * (nobody could read it while this call blocks). */
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
 * so preparing the next sandbox overlaps the current run. Runs may be
 * started from several threads at once; aj_pool_new, aj_pool_free and
 * aj_pool_get_stats are for the pool's owner (the thread that created it
 * must outlive it: the parked sandboxes' death signal follows it). The
 * policy must outlive the pool. Degraded (no-namespace) policies cannot
 * be pooled. */
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
/* As aj_sandbox_start, in a parked sandbox (or a cold one when none is
 * ready, or when the request sets what a parked sandbox has fixed already:
 * its working directory, memory or cpu-time limit). Thread-safe. The
 * handle keeps what it needs of the pool: it may outlive aj_pool_free. */
AJ_EXPORT int aj_pool_start(struct aj_pool *pool, const struct aj_request *req, struct aj_sandbox **ret,
                            struct aj_error *err);
/* aj_pool_start, wait, result, free (as aj_run_ex). */
AJ_EXPORT int aj_pool_run(struct aj_pool *pool, const struct aj_request *req, struct aj_result *res,
                          struct aj_error *err);
AJ_EXPORT void aj_pool_get_stats(struct aj_pool *pool, struct aj_pool_stats *out);
/* An interpreter pool's template (docs/interpreters.md, "Templates"): the
 * pid of the interpreter its parked interpreters are forked from, or 0
 * with why it has none (interpreter.template false, agentjail-interp.so
 * missing, a kernel without what it needs, not an interpreter pool). */
AJ_EXPORT int aj_pool_template(struct aj_pool *pool, char *why, size_t why_size);
/* Tear down every parked sandbox and remove what is left of finished runs. */
AJ_EXPORT void aj_pool_free(struct aj_pool *pool);
