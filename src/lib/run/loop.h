/* SPDX-License-Identifier: Apache-2.0 */
/* The supervision event loop: from GO (or a pooled launch) until the
 * sandbox's init is gone and its output is relayed. It handles the sync
 * socket's messages, the payload's output (relayed within a byte budget,
 * never blocking on a stalled reader), seccomp notifications, decoy
 * touches, the wall-clock deadline, cgroup limits, the alert hook and the
 * event budget's summaries. It does not know the order of the sandbox's
 * steps: sandbox.c calls it. */
#pragma once


#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <termios.h>

#include "agentjail.h"
#include "aj_audit.h"
#include "aj_cgroup.h"
#include "aj_decoy.h"
#include "aj_notify.h"
#include "protocol.h"

/* How the relay writes to the caller's fd without ever blocking on it: a
 * stalled reader must not suspend the supervisor (deadlines, cgroup
 * checks, seccomp notifications), and O_NONBLOCK is a property of the open
 * file description, which the caller shares: it is never set on theirs. */
enum relay_how {
    RELAY_PLAIN,    /* a regular file (or similar): write() does not wait on a reader */
    RELAY_NONBLOCK, /* wfd is a non-blocking description of its own (a reopened pipe or tty) */
    RELAY_SOCKET,   /* send(MSG_DONTWAIT) */
    RELAY_CHUNKED,  /* no way around blocking mode: PIPE_BUF bytes at a time, only after POLLOUT */
};

#define RELAY_BUF_SIZE (64 * 1024)

/* One captured output stream (stdout or stderr) with its byte budget. */
struct out_stream {
    int rfd;          /* read end, -1 once EOF */
    int wfd_child;    /* what the sandbox gets as this fd, or -1 for ours as it is */
    bool owns_w;      /* wfd_child is our pipe's write end (closed after clone) */
    int dest;         /* where it goes: the caller's fd, or (owns_dest) our /dev/null or pipe */
    bool owns_dest;   /* closed when the output is done, so a pipe's reader sees EOF */
    int wfd;          /* what the relay writes to: dest, or its reopening (own_wfd) */
    bool own_wfd;
    enum relay_how how;
    bool dest_gone;   /* the reader went away (EPIPE): output is counted, then dropped */
    char *buf;        /* RELAY_BUF_SIZE bytes read from the payload, not yet written */
    size_t head, len;
    uint64_t bytes;   /* written by the payload */
    bool truncated;
    bool no_limit;    /* the caller's terminal input: not the payload's output */
};

/* The alert hook: run once, on the host, outside the sandbox, at the first
 * high-severity event, with that event on stdin and a deadline. */
struct alert {
    pid_t pid;
    int pidfd;        /* to wait for it in the event loop; -1: polled on a timer */
    uint64_t deadline;
    bool fired;
};

/* What the loop watches, one fd each (-1: nothing now). */
enum {
    AJ_SLOT_SOCK,
    AJ_SLOT_PIDFD,    /* init's; the alert hook's once the run is over */
    AJ_SLOT_OUT,      /* stdout, stderr, the caller's terminal (pty): read ends */
    AJ_SLOT_ERR,
    AJ_SLOT_IN,
    AJ_SLOT_NOTIFY,
    AJ_SLOT_DSOCK,
    AJ_SLOT_LEASE,
    AJ_SLOT_OUT_W,    /* their destinations, while something waits to be written */
    AJ_SLOT_ERR_W,
    AJ_SLOT_IN_W,
    AJ_SLOT_EGRESS,   /* the egress proxy's events (network "proxy") */
    AJ_SLOT_INTERP,   /* a warm interpreter's channel: its end word */
    AJ_SLOTS,
    AJ_SLOT_TIMER = AJ_SLOTS, /* the timerfd's tag in the epoll set */
};

/* Where a run is. */
enum aj_loop_phase {
    AJ_LOOP_SUPERVISE, /* init runs */
    AJ_LOOP_INIT_GONE, /* reaped this round: the lifecycle takes over, then aj_loop_drain_begin */
    AJ_LOOP_DRAIN,     /* relaying what is left in the output pipes */
    AJ_LOOP_DRAINED,   /* output done: the lifecycle concludes, then aj_loop_alert_begin */
    AJ_LOOP_ALERT,     /* waiting (bounded) for the alert hook */
    AJ_LOOP_DONE,
};

struct aj_egress;

struct supervise_state {
    const struct aj_policy *pol;
    struct aj_egress *egress;    /* network "proxy": the run's proxy, else NULL */
    struct aj_cgroup *cg;
    struct aj_audit *audit;
    char *const *argv;
    json_t *decoy_info;
    const struct aj_decoy_files *decoys;
    pid_t pid;
    int pidfd, sock;
    struct out_stream out[2];
    /* pty mode (aj_child_ctx.want_pty): out[0] reads the payload's pty master
     * (stdout, and stderr with pty_err), in relays the caller's terminal
     * to it, which is in raw mode meanwhile (saved_tio). */
    bool pty, pty_err;
    int in_dest;      /* the request's stdin (the caller's terminal in pty mode), or -1 */
    struct out_stream in;
    bool tio_saved;
    struct termios saved_tio;
    struct aj_notify notify;     /* fd -1 until the payload hands it over */
    int decoy_sock;
    struct {
        int fd;
        uint64_t deadline;
    } dconn[4];                          /* decoy socket connections awaiting their request */
    int decoy_files[AJ_DECOY_MAX_FILES]; /* leased (see aj_decoy_parent_lease) */
    bool decoy_fired[AJ_DECOY_MAX_FILES]; /* its break recorded, its lease let go */
    int lease_wake[2];                   /* breaks routed here by leases.c: an int fd each */
    bool decoy_unarmed;                  /* a lease failed: the decoys are not all watched */
    bool decoys_armed;                   /* leases taken, AJ_MSG_ARMED sent to init */
    struct alert alert;
    bool degraded, started;
    /* A warm interpreter (interp.c): its payload says READY as it execs the
     * bootstrap, long before a run; the start event waits for the run
     * (aj_loop_mark_started). interp_fd: our end of its request channel. */
    bool defer_start;
    int interp_fd;
    /* The bootstrap's end word was taken as the payload's exit (see
     * on_interp_word): the sandbox is killed, init not reaped yet. */
    bool early_end;
    /* The cgroup's counters read at the end word: the run's own (what the
     * kill and the interpreter's teardown add after it is not). */
    struct aj_cgroup_stats word_cs;
    /* A template's child (tmpl.c): init is in adopt mode; what it handed
     * over (AJ_MSG_ADOPT: the sync socket's dup first, then the
     * namespaces in adopt_mask) until it goes to the template. The
     * payload's reaper, not init, reports its exit: init is killed then. */
    bool adopt;
    int adopt_fds[1 + AJ_ADOPT_NS_KINDS];
    int n_adopt_fds;
    unsigned adopt_mask;
    /* outcome */
    bool have_exit, have_child_err;
    int exit_wstatus, init_status, interrupted;
    enum aj_status limit;  /* the limit that ended the run, or AJ_STATUS_OK */
    struct aj_error child_err;
    uint64_t layers;       /* reported by the sandbox side (AJ_LAYER_BIT) */
    uint64_t base_layers;  /* applied by the supervisor (namespaces, cgroup, uid) */
    const char *unsafe_skipped;
    struct rusage ru;
    /* The event budget's summaries (see emit_summary). */
    uint64_t last_summary_ms;
    struct {
        int nr;
        uint32_t arch;
        uint64_t n;
    } supp_calls[16];            /* suppressed escape attempts by system call, since the last summary */
    size_t n_supp_calls;
    uint64_t supp_calls_other;   /* ... beyond the 16 distinct calls the table holds */
    uint64_t deadline;           /* the run's wall-clock deadline (ms, aj_now_ms), 0: none */
    uint64_t flood_window;       /* past the budget: the current FLOOD_WINDOW_MS slot */
    unsigned flood_taken;        /* notifications taken in it */
    bool watch_cgroup;           /* limits read from the cgroup every CGROUP_POLL_MS */
    uint64_t last_cg_check;
    uint64_t drain_grace;        /* the output relay's end after a limit or a kill, 0: not yet */
    /* The event loop: an epoll set of the slots' fds and a timerfd for
     * the next timed check; aj_loop_fd is what the embedder polls. */
    enum aj_loop_phase phase;
    int epfd, timerfd;
    int reg_fd[AJ_SLOTS];        /* registered in epfd now, or -1 */
    uint32_t reg_ev[AJ_SLOTS];
    uint32_t always[AJ_SLOTS];   /* an fd epoll cannot watch (EPERM): taken as always ready */
    uint64_t timer_at;           /* armed for (ms), 0: disarmed */
};

/* A warm interpreter's run has its request: the start event now. */
void aj_loop_mark_started(struct supervise_state *st);

/* Close what an adopt-mode init handed over and was not passed on. */
void aj_loop_close_adopt_fds(struct supervise_state *st);

/* Every message the sandbox side queued before this moment. */
void aj_loop_drain_msgs(struct supervise_state *st);

/* The epoll set and timerfd (before the sandbox is released), and their
 * end (after everything else is closed). */
int aj_loop_open(struct supervise_state *st, struct aj_error *err);
void aj_loop_close(struct supervise_state *st);
/* Supervision starts: the deadline and the timed checks. */
void aj_loop_begin(struct supervise_state *st, uint64_t start);
/* One round: what epoll says is ready now, handled, never waiting.
 * Returns the phase reached. At AJ_LOOP_INIT_GONE init has been reaped
 * and its last messages taken; the caller kills what is left of a
 * degraded run, then calls aj_loop_drain_begin. */
enum aj_loop_phase aj_loop_round(struct supervise_state *st);
/* Relay what is left in the output pipes (everything inside is dead),
 * bounded by the deadline, or a short grace after a limit or a kill. */
void aj_loop_drain_begin(struct supervise_state *st);
/* After the end events: wait for the alert hook if it runs (bounded by
 * its deadline), else done. */
void aj_loop_alert_begin(struct supervise_state *st);
/* The epoll set and the timer as this phase needs them; at
 * AJ_LOOP_DONE: nothing but the timer, fired, so the fd stays readable. */
void aj_loop_arm(struct supervise_state *st);
/* End the run from outside (aj_sandbox_kill): the result says signaled,
 * signal sig. A no-op once something else ended it. */
void aj_loop_interrupt(struct supervise_state *st, int sig);
/* The handle is freed while running: what the payload still writes is
 * counted and dropped, not relayed (no reader is waited for). */
void aj_loop_discard_output(struct supervise_state *st);
/* Before an fd the loop may watch is closed. */
void aj_loop_unwatch(struct supervise_state *st, int fd);
/* The run's outcome into res (status, exit code, usage, layers). */
void aj_loop_fill_result(struct supervise_state *st, struct aj_result *res);
/* The end of the events: the pending summary (final), error and exit
 * events, the result's event counts; then wait (bounded) for the hook. */
void aj_loop_emit_summary(struct supervise_state *st, bool final);
void aj_loop_emit_end(struct supervise_state *st, struct aj_result *res);
void aj_loop_check_alert(struct supervise_state *st, bool final);
/* network "proxy": the proxy told to stop, its last events written (before
 * the exit event), the relay and the proxy reaped. */
void aj_loop_egress_stop(struct supervise_state *st);
/* Let go of the decoy files (their leases) and the lease wake pipe. */
void aj_loop_close_decoy_files(struct supervise_state *st);
/* A relayed stream: its bounded buffer and our own non-blocking
 * description of the destination o->dest. */
int aj_loop_relay_open(struct out_stream *o, struct aj_error *err);
/* The run's deadline: start + timeout, saturating; 0: none. */
uint64_t aj_loop_deadline(uint64_t start, uint64_t timeout_ms);
