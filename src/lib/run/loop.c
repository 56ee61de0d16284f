/* SPDX-License-Identifier: Apache-2.0 */
/* The supervision event loop (see loop.h). */
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"
#include "children.h"
#include "egress.h"
#include "leases.h"
#include "protocol.h"

/* Past the event budget, notifications are taken at FLOOD_PER_WINDOW per
 * FLOOD_WINDOW_MS at most (2,000 a second): the rest wait in the kernel,
 * their callers blocked (killably) until their turn. A flood then costs
 * the supervisor a bounded share of a CPU, whatever the payload's thread
 * count, and each attempt is still answered (EPERM). */
#define FLOOD_WINDOW_MS 10
#define FLOOD_PER_WINDOW 20

static void end_run(struct supervise_state *st, enum aj_status why);

static void start_alert(struct supervise_state *st, json_t *ev, json_t *also)
{
    char *json;
    int p[2];
    pid_t pid;

    if (!st->pol->alert_cmd || st->alert.fired)
        return;
    st->alert.fired = true;
    json = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
    if (!json || pipe2(p, O_CLOEXEC) < 0) {
        free(json);
        return;
    }
    pid = fork();
    if (pid == 0) {
        /* Host side, the operator's own command: not sandboxed, on purpose
         * (it may need to revoke credentials through the network). In a
         * process group of its own, so that the deadline kills all of it. */
        char *const args[] = {"/bin/sh", "-c", st->pol->alert_cmd, NULL};
        sigset_t none;
        (void)setpgid(0, 0);
        /* Not the caller's cwd: it may lie in a writable bind, where the
         * payload could have replaced a relative "./notify.sh". */
        if (chdir("/") < 0)
            _exit(127);
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(p[0], STDIN_FILENO) < 0)
            _exit(127);
        (void)setenv("AGENTJAIL_SANDBOX_ID", st->audit->sandbox_id, 1);
        execv("/bin/sh", args);
        _exit(127);
    }
    (void)close(p[0]);
    if (pid > 0) {
        /* A small write into an empty pipe does not block; a hook that
         * never reads cannot stall the supervisor. */
        int fl = fcntl(p[1], F_GETFL);
        if (fl >= 0)
            (void)fcntl(p[1], F_SETFL, fl | O_NONBLOCK);
        (void)aj_write_all(p[1], json, strlen(json));
        (void)aj_write_all(p[1], "\n", 1);
        if (also) {
            /* credentials_suspended: the responder's list of what to rotate. */
            char *more = json_dumps(also, JSON_COMPACT | JSON_SORT_KEYS);
            if (more) {
                (void)aj_write_all(p[1], more, strlen(more));
                (void)aj_write_all(p[1], "\n", 1);
            }
            free(more);
        }
        aj_children_add(pid);
        st->alert.pid = pid;
        /* Waited for by the event loop once the run is over (5.3+; before,
         * on a short timer). */
        st->alert.pidfd = (int)syscall(__NR_pidfd_open, pid, 0);
        st->alert.deadline = aj_now_ms() + st->pol->alert_timeout_ms;
    }
    (void)close(p[1]);
    free(json);
}

static void alert_reaped(struct supervise_state *st)
{
    aj_children_del(st->alert.pid);
    st->alert.pid = 0;
    if (st->alert.pidfd >= 0) {
        aj_loop_unwatch(st, st->alert.pidfd);
        (void)close(st->alert.pidfd);
    }
    st->alert.pidfd = -1;
}

/* Reap the hook if it is done; at its deadline kill its whole process
 * group. final: wait for it, but never past its deadline. */
void aj_loop_check_alert(struct supervise_state *st, bool final)
{
    int status;

    while (st->alert.pid > 0) {
        siginfo_t si = {0};
        /* WNOWAIT: while the leader is an unreaped zombie its process group
         * id cannot be reused, so killing the group hits only its own. */
        int w = waitid(P_PID, (id_t)st->alert.pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if ((w == 0 && si.si_pid == st->alert.pid) || (w < 0 && errno != EINTR)) {
            (void)kill(-st->alert.pid, SIGKILL); /* anything it left behind */
            while (waitpid(st->alert.pid, &status, 0) < 0 && errno == EINTR)
                ;
            alert_reaped(st);
            return;
        }
        if (aj_now_ms() >= st->alert.deadline) {
            (void)kill(-st->alert.pid, SIGKILL);
            (void)kill(st->alert.pid, SIGKILL);
            while (waitpid(st->alert.pid, &status, 0) < 0 && errno == EINTR)
                ;
            alert_reaped(st);
            return;
        }
        if (!final)
            return;
        {
            struct timespec ts = {0, 5 * 1000 * 1000};
            (void)nanosleep(&ts, NULL);
        }
    }
}

/* Every event goes through here: written, counted, and acted on. */
static void emit_egress(void *ctx, json_t *ev, enum aj_event_type type, enum aj_severity sev);

static void emit(struct supervise_state *st, json_t *ev, enum aj_event_type type, enum aj_severity sev)
{
    json_t *suspended = NULL;
    bool first;

    if (!ev)
        return;
    /* Kill first: the offending call is still held (notification not
     * answered, lease not released), so the payload never goes on. */
    if ((type == AJ_EV_ESCAPE_ATTEMPT || type == AJ_EV_CANARY) && st->pol->on_escape == AJ_ON_ESCAPE_KILL)
        end_run(st, AJ_STATUS_ESCAPE_ATTEMPT);
    /* Revocation: brokering stops before the event is even written, and
     * the ids of what the run could use follow it (docs/network.md). */
    if (st->egress && sev >= AJ_SEV_HIGH &&
        (type == AJ_EV_ESCAPE_ATTEMPT || type == AJ_EV_CANARY || type == AJ_EV_SECRET_MISDIRECTED))
        suspended = aj_egress_suspend(st->egress, st->audit);
    first = aj_audit_emit(st->audit, ev, type, sev); /* takes ev */
    if (suspended)
        (void)aj_audit_emit(st->audit, json_incref(suspended), AJ_EV_CREDENTIALS_SUSPENDED, AJ_SEV_HIGH);
    if (first)
        start_alert(st, st->audit->first_high, suspended);
    json_decref(suspended);
    /* What the proxy said while the suspension was waited for: now, after
     * the events that caused it (epoll would not wake for it again). */
    if (st->egress && st->egress->pend_len)
        aj_egress_read_events(st->egress, st->audit, emit_egress, st, false);
}

/* The proxy's events, as the run's (aj_egress_read_events): NULL is one
 * the budget keeps out, counted all the same. */
static void emit_egress(void *ctx, json_t *ev, enum aj_event_type type, enum aj_severity sev)
{
    struct supervise_state *st = ctx;

    if (!ev)
        aj_audit_suppress(st->audit, type);
    else
        emit(st, ev, type, sev);
}

void aj_loop_egress_stop(struct supervise_state *st)
{
    if (!st->egress)
        return;
    aj_loop_unwatch(st, st->egress->ev_fd);
    aj_egress_stop(st->egress, st->audit, emit_egress, st);
}

/* A suppressed escape attempt, for the summary's per-call counts. */
static void count_suppressed_call(struct supervise_state *st, int nr, uint32_t arch)
{
    for (size_t i = 0; i < st->n_supp_calls; i++)
        if (st->supp_calls[i].nr == nr && st->supp_calls[i].arch == arch) {
            st->supp_calls[i].n++;
            return;
        }
    if (st->n_supp_calls < AJ_ARRAY_SIZE(st->supp_calls))
        st->supp_calls[st->n_supp_calls++] = (typeof(st->supp_calls[0])){.nr = nr, .arch = arch, .n = 1};
    else
        st->supp_calls_other++;
}

/* Past the event budget: one events_suppressed event a second at most,
 * with what was counted but not written since the last one; final: the
 * run's last, with the totals, if anything was ever suppressed. */
void aj_loop_emit_summary(struct supervise_state *st, bool final)
{
    struct aj_audit *a = st->audit;
    uint64_t now = aj_now_ms();
    json_t *ev, *kinds, *calls;

    if (final ? a->suppressed_total == 0 : aj_audit_suppressed_pending(a) == 0)
        return;
    if (!final && st->last_summary_ms && now - st->last_summary_ms < 1000)
        return;
    st->last_summary_ms = now;
    ev = aj_audit_event(a, AJ_EV_EVENTS_SUPPRESSED, AJ_SEV_MEDIUM);
    kinds = json_object();
    calls = json_object();
    for (int i = 0; kinds && i < AJ_EV_COUNT; i++)
        if (a->suppressed[i])
            (void)json_object_set_new(kinds, aj_event_type_name((enum aj_event_type)i),
                                      json_integer((json_int_t)a->suppressed[i]));
    for (size_t i = 0; calls && i < st->n_supp_calls; i++) {
        char *name = aj_notify_syscall_name(st->supp_calls[i].nr, st->supp_calls[i].arch);
        char key[64];
        if (name)
            snprintf(key, sizeof(key), "%s", name);
        else
            snprintf(key, sizeof(key), "nr %d", st->supp_calls[i].nr);
        free(name);
        (void)json_object_set_new(calls, key, json_integer((json_int_t)st->supp_calls[i].n));
    }
    if (calls && st->supp_calls_other)
        (void)json_object_set_new(calls, "other", json_integer((json_int_t)st->supp_calls_other));
    if (ev) {
        (void)json_object_set_new(ev, "suppressed", kinds ? kinds : json_object());
        (void)json_object_set_new(ev, "syscalls", calls ? calls : json_object());
        (void)json_object_set_new(ev, "suppressed_total", json_integer((json_int_t)a->suppressed_total));
        (void)json_object_set_new(ev, "event_budget", json_integer((json_int_t)a->budget));
        (void)json_object_set_new(ev, "final", json_boolean(final));
        kinds = calls = NULL;
    }
    json_decref(kinds);
    json_decref(calls);
    memset(a->suppressed, 0, sizeof(a->suppressed));
    st->n_supp_calls = 0;
    st->supp_calls_other = 0;
    (void)aj_audit_emit(a, ev, AJ_EV_EVENTS_SUPPRESSED, AJ_SEV_MEDIUM);
}

/* The budget is spent and the run's first high-severity event (the alert
 * hook's) is recorded: a further event of this type would only be
 * counted, so the supervisor need not build it. With --on-escape kill the
 * first attempt ends the run anyway. */
static bool fast_path(const struct supervise_state *st, enum aj_event_type type)
{
    return aj_audit_over_budget(st->audit, type) && st->audit->first_high && st->pol->on_escape != AJ_ON_ESCAPE_KILL;
}

static void emit_start(struct supervise_state *st)
{
    json_t *ev = aj_audit_event(st->audit, AJ_EV_START, AJ_SEV_INFO), *argv = json_array(), *layers = json_array();

    st->started = true;
    for (size_t i = 0; st->argv[i] && argv; i++)
        (void)json_array_append_new(argv, json_string(st->argv[i]));
    for (unsigned i = 0; i < AJ_LAYER_COUNT && layers; i++)
        if ((st->layers | st->base_layers) & AJ_LAYER_BIT(i))
            (void)json_array_append_new(layers, json_string(aj_layer_name((enum aj_layer)i)));
    if (ev) {
        (void)json_object_set_new(ev, "command", argv ? argv : json_array());
        (void)json_object_set_new(ev, "layers", layers ? layers : json_array());
        (void)json_object_set_new(ev, "decoys", st->decoy_info ? json_incref(st->decoy_info) : json_array());
    } else {
        json_decref(argv);
        json_decref(layers);
    }
    emit(st, ev, AJ_EV_START, AJ_SEV_INFO);
    if (st->unsafe_skipped && st->unsafe_skipped[0]) {
        ev = aj_audit_event(st->audit, AJ_EV_ERROR, AJ_SEV_HIGH);
        if (ev)
            (void)json_object_set_new(ev, "error", json_pack("s++", "layer skipped on purpose (AGENTJAIL_UNSAFE_SKIP_LAYER): ",
                                                             st->unsafe_skipped, ""));
        emit(st, ev, AJ_EV_ERROR, AJ_SEV_HIGH);
    }
}

static void on_decoy_socket(struct supervise_state *st);
static void check_dconns(struct supervise_state *st, bool all);

static void on_lease_break(struct supervise_state *st, int fd);

/* The breaks leases.c routed to us since the last look. */
static void read_lease_breaks(struct supervise_state *st)
{
    int fds[64];
    ssize_t n;

    while (st->lease_wake[0] >= 0 && (n = read(st->lease_wake[0], fds, sizeof(fds))) > 0)
        for (size_t i = 0; i < (size_t)n / sizeof(int); i++)
            on_lease_break(st, fds[i]);
}

/* Record what is pending on the decoy socket, then let go of the decoys.
 * Now, while the sandbox's mounts are alive: the socket is bound on the
 * sandbox's /var/run, and if our close() dropped the last reference to
 * that mount, tearing it down (an RCU grace period) would land on our path. */
static void finish_decoys(struct supervise_state *st)
{
    struct pollfd d = {.fd = st->decoy_sock, .events = POLLIN};

    if (st->decoy_sock >= 0 && poll(&d, 1, 0) > 0 && (d.revents & POLLIN))
        on_decoy_socket(st);
    check_dconns(st, true);
    read_lease_breaks(st);
    if (st->decoy_sock >= 0) {
        aj_loop_unwatch(st, st->decoy_sock);
        (void)close(st->decoy_sock);
    }
    st->decoy_sock = -1;
    aj_loop_close_decoy_files(st);
}

void aj_loop_close_decoy_files(struct supervise_state *st)
{
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        if (st->decoy_files[i] >= 0) {
            /* Unrouted first: a break of a later lease on the same fd
             * number must not be taken for this one's (see on_lease_break). */
            aj_leases_unwatch(st->decoy_files[i]);
            (void)close(st->decoy_files[i]);
            st->decoy_files[i] = -1;
        }
    for (int i = 0; i < 2; i++)
        if (st->lease_wake[i] >= 0) {
            aj_loop_unwatch(st, st->lease_wake[i]);
            (void)close(st->lease_wake[i]);
            st->lease_wake[i] = -1;
        }
}

static void close_fds_of(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            (void)close(fds[i]);
}

/* A decoy the policy asks for that cannot be watched is a layer missing:
 * fail closed, as for every other layer, unless the policy allows it
 * (degraded.without_decoys). Inside a container the cause is nearly always
 * a root without CAP_LEASE (Docker drops it): leasing a file the run's own
 * host uid owns needs it. */
static void fail_unarmed_decoys(struct supervise_state *st, const struct aj_error *lerr)
{
    if (st->have_child_err)
        return;
    if (geteuid() == 0 && lerr->errnum == EACCES)
        aj_err(&st->child_err, EACCES,
               "decoys cannot be watched: root here lacks CAP_LEASE (Docker drops it), so the supervisor cannot "
               "lease the decoy files; fix: docker run --cap-add LEASE, or run without decoys: "
               "degraded.without_decoys in the policy (--allow-no-decoys; the result then shows decoys false)");
    else
        aj_err(&st->child_err, lerr->errnum ? lerr->errnum : EPERM,
               "decoys cannot be watched (%s); fix: docker run --cap-add LEASE, or run without decoys: "
               "degraded.without_decoys in the policy (--allow-no-decoys; the result then shows decoys false)",
               lerr->msg);
    st->child_err.exit_hint = 125;
    st->have_child_err = true;
    (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
    if (st->cg) {
        /* The egress proxy and relay are in it: their end is expected. */
        aj_egress_expect_end(st->egress);
        aj_cgroup_kill(st->cg);
    }
}

/* The payload's pty master arrived (see child_make_pty): its output is
 * stdout's stream, the caller's terminal input goes to it, the window size
 * is copied, and the caller's terminal is put in raw mode (only when we
 * are its foreground: a background job must not change the terminal of
 * the shell in front), so that ^C, ^Z and line editing are the payload's
 * pty's business. Restored in sb_end, on every path. */
static void pty_attach(struct supervise_state *st, int master)
{
    struct winsize ws;
    int fl = fcntl(master, F_GETFL);

    if (fl >= 0)
        (void)fcntl(master, F_SETFL, fl | O_NONBLOCK); /* our own description */
    st->out[0].rfd = master;
    if (ioctl(st->out[0].dest, TIOCGWINSZ, &ws) == 0 || ioctl(st->in_dest, TIOCGWINSZ, &ws) == 0)
        (void)ioctl(master, TIOCSWINSZ, &ws);
    st->in.buf = malloc(RELAY_BUF_SIZE);
    st->in.wfd = fcntl(master, F_DUPFD_CLOEXEC, 3);
    if (!st->in.buf || st->in.wfd < 0)
        return; /* no input, output still relayed */
    st->in.own_wfd = true;
    st->in.how = RELAY_NONBLOCK;
    st->in.no_limit = true;
    /* The caller's terminal (the request's stdin), read through a
     * non-blocking description of our own. */
    {
        char path[64];
        (void)snprintf(path, sizeof(path), "/proc/self/fd/%d", st->in_dest);
        st->in.rfd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    }
    if (st->in.rfd >= 0 && tcgetpgrp(st->in_dest) == getpgrp() && tcgetattr(st->in_dest, &st->saved_tio) == 0) {
        struct termios raw = st->saved_tio;
        cfmakeraw(&raw);
        if (tcsetattr(st->in_dest, TCSANOW, &raw) == 0)
            st->tio_saved = true;
    }
}

static void handle_msg(struct supervise_state *st, const struct aj_sync_msg *msg, int *fds, int nfds)
{
    if (msg->type == AJ_MSG_ERROR && !st->have_child_err) {
        st->child_err = msg->err;
        st->child_err.msg[sizeof(st->child_err.msg) - 1] = '\0';
        st->have_child_err = true;
        st->layers |= msg->layers;
    } else if (msg->type == AJ_MSG_READY) {
        st->layers |= msg->layers;
        if (!st->defer_start)
            emit_start(st);
    } else if (msg->type == AJ_MSG_INTERP && nfds == 1 && st->interp_fd < 0) {
        st->interp_fd = fds[0];
        fds[0] = -1;
    } else if (msg->type == AJ_MSG_ADOPT && st->adopt && st->n_adopt_fds == 0 && nfds >= 1 &&
               nfds == 1 + __builtin_popcount((unsigned)msg->wstatus & ((1u << AJ_ADOPT_NS_KINDS) - 1))) {
        st->layers |= msg->layers;
        st->adopt_mask = (unsigned)msg->wstatus;
        for (int i = 0; i < nfds; i++) {
            st->adopt_fds[i] = fds[i];
            fds[i] = -1;
        }
        st->n_adopt_fds = nfds;
    } else if (msg->type == AJ_MSG_EXIT && st->early_end) {
        /* The end word decided already; a template child's reaper reports
         * the kill that followed it (it is outside the run's cgroup). */
    } else if (msg->type == AJ_MSG_EXIT) {
        st->exit_wstatus = msg->wstatus;
        st->have_exit = true;
        /* A template's child: its reaper reported, init (which never had
         * the payload as its child) goes now, and everything in the pid
         * namespace with it, as when init returns. */
        if (st->adopt && st->pidfd >= 0)
            (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
        /* init is about to exit: let go of the decoys now, while the
         * sandbox's mounts are still alive. Holding the socket (bound on
         * the sandbox's /var/run) past init's exit would make our close()
         * the one that tears that mount down, an RCU grace period (~10 ms)
         * on the supervisor's path. */
        finish_decoys(st);
    } else if (msg->type == AJ_MSG_PTY && nfds == 1 && st->pty && st->out[0].rfd < 0) {
        pty_attach(st, fds[0]);
        fds[0] = -1;
    } else if (msg->type == AJ_MSG_LISTENER && nfds == 1 && st->notify.fd < 0) {
        st->notify.fd = fds[0];
        fds[0] = -1;
    } else if (msg->type == AJ_MSG_DECOYS && msg->wstatus >= 0 && msg->wstatus <= AJ_DECOY_MAX_FILES &&
               (nfds == msg->wstatus || nfds == msg->wstatus + 1) && st->decoy_sock < 0) {
        int k = 0;
        if (nfds == msg->wstatus + 1) {
            st->decoy_sock = fds[0];
            fds[k++] = -1;
        }
        int failed = 0;
        for (int i = 0; i < msg->wstatus; i++, k++) {
            struct aj_error lerr = {0};
            pid_t tid = 0;
            int sig = 0;
            st->decoy_files[i] = fds[k];
            fds[k] = -1;
            /* Routed to us before the lease exists: no break is lost. */
            if ((st->lease_wake[0] < 0 && pipe2(st->lease_wake, O_CLOEXEC | O_NONBLOCK) < 0 &&
                 aj_err(&lerr, errno, "decoy wake pipe") < 0) ||
                aj_leases_watch(st->decoy_files[i], st->lease_wake[1], &tid, &sig, &lerr) < 0 ||
                aj_decoy_parent_lease(st->decoy_files[i], sig, tid, &lerr) < 0) {
                bool first = !st->decoy_unarmed;
                st->decoy_unarmed = true;
                failed++;
                json_t *ev = aj_audit_event(st->audit, AJ_EV_ERROR, AJ_SEV_MEDIUM);
                if (ev)
                    (void)json_object_set_new(ev, "error", json_string(lerr.msg));
                emit(st, ev, AJ_EV_ERROR, AJ_SEV_MEDIUM);
                if (first && !st->pol->allow_no_decoys)
                    fail_unarmed_decoys(st, &lerr);
            }
        }
        /* init holds the payload back until this arrives. */
        {
            struct aj_sync_msg armed = {.type = AJ_MSG_ARMED, .wstatus = failed};
            (void)aj_proto_send_plain(st->sock, &armed, sizeof(armed));
        }
        st->decoys_armed = true;
    }
    close_fds_of(fds, nfds); /* anything not taken above */
}

/* One message from the sync socket, with any fds it carries (CLOEXEC from
 * birth). Returns 1 for a message, 0 for none now, -1 at EOF. */
static int recv_msg(struct supervise_state *st)
{
    struct aj_sync_msg msg;
    union {
        char buf[CMSG_SPACE(sizeof(int) * AJ_MAX_MSG_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int fds[AJ_MAX_MSG_FDS] = {-1, -1, -1, -1, -1, -1}, nfds = 0;
    ssize_t n = recvmsg(st->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

    if (n < 0) {
        /* The sandbox end was closed with a message still unread in its
         * queue (the netns helper's, the pool's RUN, when init failed
         * first): the kernel reports ECONNRESET once, and what init sent
         * before exiting (its ERROR) is still queued behind it. */
        if (errno == ECONNRESET)
            return 1;
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    }
    if (n == 0)
        return -1;
    nfds = aj_proto_collect_fds(&mh, fds, AJ_MAX_MSG_FDS);
    if (n != (ssize_t)sizeof(msg) || (mh.msg_flags & MSG_CTRUNC)) {
        close_fds_of(fds, nfds);
        return 1; /* malformed: ignored (the sandbox side is ours, but never trusted) */
    }
    handle_msg(st, &msg, fds, nfds);
    return 1;
}

static void end_run(struct supervise_state *st, enum aj_status why)
{
    static const struct {
        enum aj_status status;
        const char *limit;
    } limits[] = {
        {AJ_STATUS_TIMEOUT, "timeout"},       {AJ_STATUS_MEMORY_LIMIT, "memory"},
        {AJ_STATUS_PIDS_LIMIT, "pids"},       {AJ_STATUS_CPU_LIMIT, "cpu_time"},
        {AJ_STATUS_OUTPUT_LIMIT, "output"},
    };

    if (st->limit != AJ_STATUS_OK)
        return;
    st->limit = why;
    (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
    if (st->cg) {
        /* The egress proxy and relay are in it: their end is expected. */
        aj_egress_expect_end(st->egress);
        aj_cgroup_kill(st->cg);
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(limits); i++)
        if (limits[i].status == why) {
            /* A limit hit by a fork bomb or a memory bomb is a resource
             * attack on the host's other tenants. */
            json_t *ev = aj_audit_event(st->audit, AJ_EV_LIMIT, AJ_SEV_MEDIUM);
            if (ev) {
                (void)json_object_set_new(ev, "limit", json_string(limits[i].limit));
                (void)json_object_set_new(ev, "action", json_string("killed"));
                aj_audit_technique(ev, "T1499");
            }
            emit(st, ev, AJ_EV_LIMIT, AJ_SEV_MEDIUM);
        }
}

/* The run's deadline: start + timeout in 64 bits, saturating (a timeout
 * near UINT64_MAX must not wrap into the past). 0: none. */
uint64_t aj_loop_deadline(uint64_t start, uint64_t timeout_ms)
{
    if (!timeout_ms)
        return 0;
    return timeout_ms > UINT64_MAX - start ? UINT64_MAX : start + timeout_ms;
}

/* The caller's reader is gone: from now on output is counted and dropped. */
static void drop_output(struct out_stream *o)
{
    o->dest_gone = true;
    o->head = 0;
    o->len = 0;
}

/* Write what the buffer holds, as far as the destination takes it now.
 * writable: poll said POLLOUT (the only time RELAY_CHUNKED may write). A
 * reader that went away (EPIPE; SIGPIPE is blocked in this thread while
 * the library works, see sb_guard_enter) is that reader's business: the payload's accounting
 * goes on, its output is dropped. */
static void flush_output(struct out_stream *o, bool writable)
{
    while (o->len > 0 && !o->dest_gone) {
        size_t want = o->len;
        ssize_t n;

        if (o->how == RELAY_CHUNKED) {
            if (!writable)
                return;
            if (want > PIPE_BUF)
                want = PIPE_BUF;
            writable = false; /* one chunk per POLLOUT */
        }
        if (o->how == RELAY_SOCKET)
            n = send(o->wfd, o->buf + o->head, want, MSG_DONTWAIT | MSG_NOSIGNAL);
        else
            n = write(o->wfd, o->buf + o->head, want);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return;
            drop_output(o); /* EPIPE, or an fd that stopped working */
            return;
        }
        o->head += (size_t)n;
        o->len -= (size_t)n;
    }
    if (o->len == 0 || o->dest_gone) {
        o->head = 0;
        o->len = 0;
    }
}

/* Take what the payload wrote, as far as the buffer has room (a full
 * buffer leaves it in the pipe: the payload then waits, the supervisor
 * does not); past the budget, discard, flag and end the run: a flood must
 * cost the supervisor bounded memory and time. */
static void pump_output(struct supervise_state *st, struct out_stream *o)
{
    size_t room;
    ssize_t n;

    if (o->len > 0 && o->head + o->len == RELAY_BUF_SIZE) {
        memmove(o->buf, o->buf + o->head, o->len);
        o->head = 0;
    }
    room = RELAY_BUF_SIZE - o->head - o->len;
    if (room == 0)
        return;
    n = read(o->rfd, o->buf + o->head + o->len, room);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        aj_loop_unwatch(st, o->rfd);
        (void)close(o->rfd);
        o->rfd = -1;
        return;
    }
    uint64_t limit = o->no_limit ? 0 : st->pol->output_limit;

    if (!limit || o->bytes < limit) {
        uint64_t keep = limit ? limit - o->bytes : (uint64_t)n;
        o->len += (size_t)n < keep ? (size_t)n : (size_t)keep;
    }
    o->bytes += (uint64_t)n;
    if (limit && o->bytes > limit && !o->truncated) {
        o->truncated = true;
        end_run(st, AJ_STATUS_OUTPUT_LIMIT);
    }
    if (o->dest_gone)
        drop_output(o);
    else if (o->how != RELAY_CHUNKED)
        flush_output(o, false);
}

/* How to write to the caller's fd dest without blocking (see relay_how).
 * A pipe or a terminal is opened again through /proc/self/fd, which gives
 * a description of our own that can be non-blocking; a pipe whose reader
 * is gone cannot be opened so (ENXIO): nothing will read the output. */
static int relay_open_dest(struct out_stream *o, struct aj_error *err)
{
    struct stat s;
    int fl;

    o->wfd = o->dest;
    o->how = RELAY_PLAIN;
    if (fstat(o->dest, &s) < 0)
        return aj_err(err, errno, "output fd %d", o->dest);
    if (S_ISSOCK(s.st_mode)) {
        o->how = RELAY_SOCKET;
        return 0;
    }
    if (!S_ISFIFO(s.st_mode) && !S_ISCHR(s.st_mode))
        return 0;
    fl = fcntl(o->dest, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
        o->how = RELAY_NONBLOCK; /* the caller made it so */
        return 0;
    }
    o->how = RELAY_CHUNKED;
    /* Only pipes and terminals: opening some other character device can
     * have effects of its own (a tape rewinds, a watchdog arms). */
    if (S_ISFIFO(s.st_mode) || isatty(o->dest)) {
        char path[64];
        int fd;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", o->dest);
        fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd >= 0) {
            o->wfd = fd;
            o->own_wfd = true;
            o->how = RELAY_NONBLOCK;
        } else if (errno == ENXIO && S_ISFIFO(s.st_mode)) {
            drop_output(o);
        }
    }
    return 0;
}

/* Relay what is left after the run, until every pipe is at EOF and every
 * buffer is written, but never wait on a stalled reader past the run's
 * deadline (the run then ends as a timeout), nor past a short grace when
 * the run was already ended by a limit or a kill. */
#define RELAY_GRACE_MS 1000

/* Done with the destinations we own (a pipe the library made for the
 * caller, /dev/null): closed now, so the caller's end of a pipe reads EOF
 * as the run ends, not when its handle is freed. */
static void close_own_outputs(struct supervise_state *st)
{
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        if (!o->owns_dest)
            continue;
        if (o->own_wfd && o->wfd >= 0) {
            aj_loop_unwatch(st, o->wfd);
            (void)close(o->wfd);
        }
        o->own_wfd = false;
        o->wfd = -1;
        if (o->dest >= 0) {
            aj_loop_unwatch(st, o->dest);
            (void)close(o->dest);
        }
        o->dest = -1;
        o->owns_dest = false;
    }
}

/* Whether the relay is over (then the owned destinations are closed). */
static bool drain_check(struct supervise_state *st)
{
    bool busy = false;
    uint64_t until;

    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        if (o->dest_gone)
            drop_output(o);
        busy |= o->rfd >= 0 || o->len > 0;
    }
    if (busy && (st->limit != AJ_STATUS_OK || st->interrupted) && !st->drain_grace)
        st->drain_grace = aj_now_ms() + RELAY_GRACE_MS;
    until = st->drain_grace ? st->drain_grace : st->deadline;
    if (busy && until && aj_now_ms() >= until) {
        /* A reader that stalls past the deadline: the run did not finish
         * in time. What is left is dropped. */
        if (!st->drain_grace)
            end_run(st, AJ_STATUS_TIMEOUT);
        for (int i = 0; i < 2; i++) {
            if (st->out[i].rfd >= 0) {
                aj_loop_unwatch(st, st->out[i].rfd);
                (void)close(st->out[i].rfd);
            }
            st->out[i].rfd = -1;
            st->out[i].len = st->out[i].head = 0;
        }
        busy = false;
    }
    if (busy)
        return false;
    close_own_outputs(st);
    return true;
}

static void drain_interest(struct supervise_state *st, struct pollfd pfd[AJ_SLOTS], uint64_t *wake)
{
    /* Ended by the end word: the sandbox's processes are being killed, not
     * yet gone; an escape attempt one makes meanwhile is still the run's. */
    if (st->early_end)
        pfd[AJ_SLOT_NOTIFY] = (struct pollfd){.fd = st->notify.fd, .events = POLLIN};
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        if (o->rfd >= 0 && o->len < RELAY_BUF_SIZE)
            pfd[AJ_SLOT_OUT + i] = (struct pollfd){.fd = o->rfd, .events = POLLIN};
        if (o->len > 0 && o->how != RELAY_PLAIN && !o->dest_gone)
            pfd[AJ_SLOT_OUT_W + i] = (struct pollfd){.fd = o->wfd, .events = POLLOUT};
    }
    *wake = st->drain_grace ? st->drain_grace : st->deadline;
}

static void on_notify(struct supervise_state *st);
static void notify_gone(struct supervise_state *st);

static bool drain_step(struct supervise_state *st, const short revents[AJ_SLOTS])
{
    if (revents[AJ_SLOT_NOTIFY] & POLLIN)
        on_notify(st);
    else if (revents[AJ_SLOT_NOTIFY] & (POLLHUP | POLLERR))
        notify_gone(st); /* every process of the filter is gone: not watched again */
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        short w = revents[AJ_SLOT_OUT_W + i];
        if (revents[AJ_SLOT_OUT + i])
            pump_output(st, o);
        if ((w & (POLLERR | POLLHUP)) && o->how != RELAY_SOCKET)
            drop_output(o); /* the pipe's reader is gone */
        else if (w)
            flush_output(o, true);
        if (o->how == RELAY_PLAIN)
            flush_output(o, true);
    }
    return drain_check(st);
}

void aj_loop_drain_begin(struct supervise_state *st)
{
    st->phase = drain_check(st) ? AJ_LOOP_DRAINED : AJ_LOOP_DRAIN;
}

static void check_cgroup_limits(struct supervise_state *st)
{
    struct aj_cgroup_stats cs;

    if (!st->cg || !st->cg->created || aj_cgroup_read_stats(st->cg, &cs) < 0)
        return;
    if (cs.oom_kills > 0)
        end_run(st, AJ_STATUS_MEMORY_LIMIT);
    else if (cs.pids_max_hits > 0)
        /* A fork refused at the limit: a fork bomb, or a payload that
         * outgrew its budget. Either way the run ends here, named. */
        end_run(st, AJ_STATUS_PIDS_LIMIT);
    else if (st->pol->cpu_time_ms && cs.have_cpu && cs.cpu_usec / 1000 >= st->pol->cpu_time_ms)
        end_run(st, AJ_STATUS_CPU_LIMIT);
}

#define CGROUP_POLL_MS 20


void aj_loop_mark_started(struct supervise_state *st)
{
    st->defer_start = false;
    emit_start(st);
}

/* Every message the sandbox side queued before this moment: the payload
 * sends READY (and with it the start event) before it execs, so draining
 * first keeps "start" ahead of anything the payload does. */
void aj_loop_drain_msgs(struct supervise_state *st)
{
    int r;
    while (st->sock >= 0 && (r = recv_msg(st)) != 0)
        if (r < 0) {
            aj_loop_unwatch(st, st->sock);
            (void)close(st->sock);
            st->sock = -1;
            /* A template's child and its reaper are gone without a word
             * (init closed its own end after handing it over): nothing
             * can report the payload's end any more; init goes too. */
            if (st->adopt && st->pidfd >= 0)
                (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
        }
}

void aj_loop_close_adopt_fds(struct supervise_state *st)
{
    for (int i = 0; i < st->n_adopt_fds; i++)
        if (st->adopt_fds[i] >= 0)
            (void)close(st->adopt_fds[i]);
    st->n_adopt_fds = 0;
}

/* The listener is gone (every process of the filter exited). */
static void notify_gone(struct supervise_state *st)
{
    aj_loop_unwatch(st, st->notify.fd);
    aj_notify_clear(&st->notify);
    (void)aj_notify_init(&st->notify, -1, NULL);
}

static void on_notify(struct supervise_state *st)
{
    json_t *ev = NULL;
    enum aj_severity sev = AJ_SEV_HIGH;
    int r;

    if (fast_path(st, AJ_EV_ESCAPE_ATTEMPT)) {
        /* A flood (unshare in a loop from many threads): one ioctl to take
         * it, a count, one to refuse it. Nothing is read from the caller.
         * While more are queued, take them here (up to the window's quota,
         * see FLOOD_PER_WINDOW) rather than through the whole poll set
         * each time. */
        for (int batch = 0; batch < FLOOD_PER_WINDOW; batch++) {
            struct pollfd p = {.fd = st->notify.fd, .events = POLLIN};
            uint64_t window = aj_now_ms() / FLOOD_WINDOW_MS;
            int nr = -1;
            uint32_t arch = 0;
            if (window != st->flood_window) {
                st->flood_window = window;
                st->flood_taken = 0;
            }
            if (st->flood_taken >= FLOOD_PER_WINDOW)
                return; /* the rest wait for the next window (see supervise) */
            if (batch > 0 && (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)))
                return;
            st->flood_taken++;
            r = aj_notify_receive_bare(&st->notify, &nr, &arch);
            if (r <= 0)
                break;
            aj_audit_suppress(st->audit, AJ_EV_ESCAPE_ATTEMPT);
            count_suppressed_call(st, nr, arch);
            aj_notify_answer(&st->notify);
        }
        if (r > 0)
            return;
    } else {
        r = aj_notify_receive(&st->notify, st->audit, &ev, &sev);
    }
    if (r < 0) {
        notify_gone(st);
        return;
    }
    if (r == 0)
        return;
    aj_loop_drain_msgs(st);
    /* Recorded (and with --on-escape kill, the run ended) while the caller
     * is still held in the kernel. */
    emit(st, ev, AJ_EV_ESCAPE_ATTEMPT, sev);
    /* A run being killed leaves the call unanswered: the caller stays
     * blocked until the SIGKILL reaches it (the wait is killable), so it
     * never runs another instruction. Answering would race the kill. */
    if (st->limit == AJ_STATUS_ESCAPE_ATTEMPT)
        st->notify.pending = false;
    else
        aj_notify_answer(&st->notify);
}

/* A warm interpreter's end word (interp_boot.py): b"D" and its exit
 * status, sent after the code ended as `python3 -c` ends (threads joined,
 * atexit, output flushed) and fds 0-2 were closed. Taken as the payload's
 * exit: the sandbox is killed now (whatever is still running in it, as
 * init's exit would), the result is final once the output pipes reach EOF,
 * and init is reaped when the handle lets go of the sandbox (sandbox.c):
 * the exit of a ~100 MB interpreter with its BLAS threads, and the pid
 * namespace's end, are off the caller's path.
 *
 * The code can send the word too: that is os._exit(status), and the kill
 * makes it so. The word only ever ends a run; it allows nothing. Taken
 * only where the result needs nothing from init's wait: the cgroup has the
 * CPU time and the memory peak (rusage comes with the wait), and nothing
 * else ended the run. Anything else (EOF, garbage): the ordinary end.
 * Returns whether the run ended. */
static bool on_interp_word(struct supervise_state *st)
{
    struct aj_cgroup_stats cs;
    unsigned char w[8];
    ssize_t n;

    do
        n = recv(st->interp_fd, w, sizeof(w), MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return false;
    aj_loop_unwatch(st, st->interp_fd);
    (void)close(st->interp_fd);
    st->interp_fd = -1;
    if (n != 2 || w[0] != 'D' || st->degraded || st->pid <= 0 || st->limit != AJ_STATUS_OK || st->interrupted ||
        st->have_child_err || !st->cg || !st->cg->created || aj_cgroup_read_stats(st->cg, &cs) < 0 ||
        !cs.have_cpu || !cs.have_memory_peak)
        return false;
    /* Escape attempts queued before the word are the run's. */
    for (int i = 0; i < 64 && st->notify.fd >= 0; i++) {
        struct pollfd p = {.fd = st->notify.fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
            break;
        on_notify(st);
    }
    st->exit_wstatus = (int)w[1] << 8; /* as wait() reports exit(w[1]) */
    st->have_exit = true;
    st->early_end = true;
    st->word_cs = cs;
    (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
    aj_egress_expect_end(st->egress); /* its proxy and relay are in the cgroup too */
    aj_cgroup_kill(st->cg);
    aj_loop_drain_msgs(st);
    finish_decoys(st);
    return true;
}

/* A connection's canary: now (request line if any, 403, close). */
static void finish_dconn(struct supervise_state *st, size_t i)
{
    int fd = st->dconn[i].fd;
    bool killing = st->pol->on_escape == AJ_ON_ESCAPE_KILL;
    st->dconn[i].fd = -1;
    /* Being killed: no answer for the client to read before it dies. */
    if (fd >= 0)
        emit(st, aj_decoy_conn_event(fd, st->audit, !killing), AJ_EV_CANARY, AJ_SEV_HIGH);
}

static void on_decoy_socket(struct supervise_state *st)
{
    int c = aj_decoy_accept(st->decoy_sock);
    size_t slot = 0;

    if (c < 0)
        return;
    if (fast_path(st, AJ_EV_CANARY)) {
        /* Connects in a loop count against the budget too: past it, each
         * is counted and closed, unread. */
        (void)close(c);
        aj_audit_suppress(st->audit, AJ_EV_CANARY);
        return;
    }
    aj_loop_drain_msgs(st);
    /* The client writes its request right after connecting: give it a
     * moment, so the event can say what it wanted. With --on-escape kill
     * there is no moment to give. */
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
        if (st->dconn[i].fd < 0 || st->dconn[i].deadline < st->dconn[slot].deadline) {
            slot = i;
            if (st->dconn[i].fd < 0)
                break;
        }
    if (st->dconn[slot].fd >= 0)
        finish_dconn(st, slot);
    st->dconn[slot].fd = c;
    st->dconn[slot].deadline = aj_now_ms() + AJ_DECOY_REQUEST_WAIT_MS;
    if (st->pol->on_escape == AJ_ON_ESCAPE_KILL)
        finish_dconn(st, slot);
}

/* Connections whose request came (or whose time is up). */
static void check_dconns(struct supervise_state *st, bool all)
{
    uint64_t now = aj_now_ms();
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++) {
        struct pollfd p = {.fd = st->dconn[i].fd, .events = POLLIN};
        if (st->dconn[i].fd < 0)
            continue;
        if (all || now >= st->dconn[i].deadline || (poll(&p, 1, 0) > 0 && p.revents))
            finish_dconn(st, i);
    }
}

static void on_lease_break(struct supervise_state *st, int fd)
{
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        if (st->decoy_files[i] == fd && fd >= 0) {
            /* Once per decoy (the lease is gone after), and only a break
             * of our own lease: one that still reads F_WRLCK is unbroken,
             * the wake-up was for an earlier lease on this fd number. */
            if (st->decoy_fired[i] || fcntl(fd, F_GETLEASE) == F_WRLCK)
                return;
            st->decoy_fired[i] = true;
            aj_loop_drain_msgs(st);
            /* The opener waits until the lease goes: record (and maybe end
             * the run) first, then let it through. */
            emit(st, aj_decoy_lease_event(st->decoys, i, st->audit), AJ_EV_CANARY, AJ_SEV_HIGH);
            /* Being killed: the opener stays blocked in open() until then. */
            if (st->limit != AJ_STATUS_ESCAPE_ATTEMPT)
                aj_decoy_release_lease(fd);
            return;
        }
}

/* What the supervision phase waits for, and when it must look again
 * (*wake, aj_now_ms; 0: no timed work). */
static void supervise_interest(struct supervise_state *st, struct pollfd pfd[AJ_SLOTS], uint64_t *wake)
{
    uint64_t now = aj_now_ms();

#define WAKE_BY(t)                                                                                 \
    do {                                                                                           \
        uint64_t _t = (t);                                                                         \
        if (!*wake || _t < *wake)                                                                  \
            *wake = _t;                                                                            \
    } while (0)
    pfd[AJ_SLOT_SOCK] = (struct pollfd){.fd = st->sock, .events = POLLIN};
    pfd[AJ_SLOT_PIDFD] = (struct pollfd){.fd = st->pidfd, .events = POLLIN};
    pfd[AJ_SLOT_NOTIFY] = (struct pollfd){.fd = st->notify.fd, .events = POLLIN};
    pfd[AJ_SLOT_DSOCK] = (struct pollfd){.fd = st->decoy_sock, .events = POLLIN};
    pfd[AJ_SLOT_LEASE] = (struct pollfd){.fd = st->lease_wake[0], .events = POLLIN};
    pfd[AJ_SLOT_EGRESS] = (struct pollfd){.fd = st->egress ? st->egress->ev_fd : -1, .events = POLLIN};
    pfd[AJ_SLOT_INTERP] = (struct pollfd){.fd = st->interp_fd, .events = POLLIN};
    /* Output: read while the buffer has room, write while it holds
     * something and the reader takes it. A full buffer leaves the payload
     * waiting on its pipe, never the supervisor. */
    for (int i = 0; i < 3; i++) {
        struct out_stream *o = i < 2 ? &st->out[i] : &st->in;
        pfd[AJ_SLOT_OUT + i] = (struct pollfd){.fd = o->rfd >= 0 && o->len < RELAY_BUF_SIZE ? o->rfd : -1,
                                               .events = POLLIN};
        pfd[AJ_SLOT_OUT_W + i] = (struct pollfd){
            .fd = o->len > 0 && !o->dest_gone && o->how != RELAY_PLAIN ? o->wfd : -1, .events = POLLOUT};
    }
    if (st->watch_cgroup && st->limit == AJ_STATUS_OK)
        WAKE_BY(st->last_cg_check + CGROUP_POLL_MS);
    if (st->deadline && st->limit == AJ_STATUS_OK)
        WAKE_BY(st->deadline);
    if (st->alert.pid > 0)
        WAKE_BY(now + 50); /* watch the hook's deadline */
    if (st->notify.fd >= 0 && fast_path(st, AJ_EV_ESCAPE_ATTEMPT) && st->flood_taken >= FLOOD_PER_WINDOW &&
        now / FLOOD_WINDOW_MS == st->flood_window) {
        /* This window's quota is spent: not polled until the next. */
        pfd[AJ_SLOT_NOTIFY].fd = -1;
        WAKE_BY((st->flood_window + 1) * FLOOD_WINDOW_MS);
    }
    if (aj_audit_suppressed_pending(st->audit))
        WAKE_BY(st->last_summary_ms + 1000); /* the next events_suppressed summary */
    for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
        if (st->dconn[i].fd >= 0)
            WAKE_BY(now + 20); /* a decoy connection's request */
#undef WAKE_BY
}

/* One wake-up of the supervision phase; true once init is reaped (its
 * last messages taken, the decoys let go). */
static bool supervise_step(struct supervise_state *st, const short revents[AJ_SLOTS])
{
    if (st->limit == AJ_STATUS_OK) {
        uint64_t now = aj_now_ms();
        if (st->deadline && now >= st->deadline)
            end_run(st, AJ_STATUS_TIMEOUT);
        else if (st->watch_cgroup && now - st->last_cg_check >= CGROUP_POLL_MS) {
            /* On the timer, not on every wake-up: an escape notification
             * should not pay for reading cgroup files. */
            st->last_cg_check = now;
            check_cgroup_limits(st);
        }
    }
    aj_loop_check_alert(st, false);
    aj_loop_emit_summary(st, false);
    if (revents[AJ_SLOT_SOCK] & (POLLIN | POLLHUP | POLLERR))
        aj_loop_drain_msgs(st);
    if (revents[AJ_SLOT_NOTIFY] & POLLIN)
        on_notify(st);
    else if (revents[AJ_SLOT_NOTIFY] & (POLLHUP | POLLERR))
        notify_gone(st);
    if (revents[AJ_SLOT_LEASE] & POLLIN)
        read_lease_breaks(st);
    if (revents[AJ_SLOT_DSOCK] & POLLIN)
        on_decoy_socket(st);
    if (revents[AJ_SLOT_EGRESS] & (POLLIN | POLLHUP | POLLERR)) {
        int fd = st->egress->ev_fd;
        aj_egress_read_events(st->egress, st->audit, emit_egress, st, false);
        if (st->egress->ev_fd < 0)
            aj_loop_unwatch(st, fd); /* closed at its EOF */
    }
    check_dconns(st, false);
    for (int i = 0; i < 3; i++) {
        struct out_stream *o = i < 2 ? &st->out[i] : &st->in;
        short w = revents[AJ_SLOT_OUT_W + i];
        if (w & (POLLERR | POLLHUP) && o->how != RELAY_SOCKET)
            drop_output(o); /* the reader of the caller's pipe (or the pty) is gone */
        else if (w)
            flush_output(o, true);
        if (revents[AJ_SLOT_OUT + i] & (POLLIN | POLLHUP | POLLERR))
            pump_output(st, o);
    }
    if ((revents[AJ_SLOT_INTERP] & (POLLIN | POLLHUP | POLLERR)) && !(revents[AJ_SLOT_PIDFD] & POLLIN) &&
        on_interp_word(st))
        return true;
    if (revents[AJ_SLOT_PIDFD] & POLLIN) {
        pid_t w;
        do
            w = wait4(st->pid, &st->init_status, WNOHANG, &st->ru);
        while (w < 0 && errno == EINTR);
        if (w == 0)
            return false; /* not yet a zombie (a pidfd is readable at exit) */
        if (w < 0 && errno == ECHILD)
            /* Reaped by someone else (a caller's waitpid(-1), SIGCHLD
             * ignored): init is gone, its status unknown. Not a loop on a
             * pidfd that stays readable. */
            st->init_status = SIGKILL;
        else if (w != st->pid)
            return false;
        aj_children_del(st->pid);
        st->pid = -1;
        /* Messages sent just before init exited are still queued, and so
         * may be the last decoy touches. */
        while (st->sock >= 0 && recv_msg(st) > 0)
            ;
        finish_decoys(st);
        return true;
    }
    return false;
}

void aj_loop_begin(struct supervise_state *st, uint64_t start)
{
    st->deadline = aj_loop_deadline(start, st->pol->timeout_ms);
    st->watch_cgroup = st->cg && st->cg->created &&
                       (st->cg->limits & (AJ_LAYER_BIT(AJ_LAYER_MEMORY_LIMIT) | AJ_LAYER_BIT(AJ_LAYER_PIDS_LIMIT)) ||
                        st->pol->cpu_time_ms);
    /* The first check one poll interval in (a run has used nothing yet;
     * the result reads the counters at the end in any case). */
    st->last_cg_check = start ? start : aj_now_ms();
    st->phase = AJ_LOOP_SUPERVISE;
}

void aj_loop_interrupt(struct supervise_state *st, int sig)
{
    if (st->interrupted || st->phase >= AJ_LOOP_DRAINED)
        return;
    st->interrupted = sig;
    if (st->pidfd >= 0)
        (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
    if (st->cg) {
        /* The egress proxy and relay are in it: their end is expected. */
        aj_egress_expect_end(st->egress);
        aj_cgroup_kill(st->cg);
    }
}

void aj_loop_alert_begin(struct supervise_state *st)
{
    if (st->alert.pid <= 0) {
        st->phase = AJ_LOOP_DONE;
        return;
    }
    st->phase = AJ_LOOP_ALERT;
    aj_loop_check_alert(st, false);
    if (st->alert.pid <= 0)
        st->phase = AJ_LOOP_DONE;
}

/* ---- the epoll set ------------------------------------------------------------------ */

int aj_loop_open(struct supervise_state *st, struct aj_error *err)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = AJ_SLOT_TIMER};

    st->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (st->epfd < 0)
        return aj_err(err, errno, "epoll_create1");
    st->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (st->timerfd < 0)
        return aj_err(err, errno, "timerfd_create");
    if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->timerfd, &ev) < 0)
        return aj_err(err, errno, "epoll_ctl");
    return 0;
}

void aj_loop_close(struct supervise_state *st)
{
    if (st->timerfd >= 0)
        (void)close(st->timerfd);
    if (st->epfd >= 0)
        (void)close(st->epfd);
    st->timerfd = st->epfd = -1;
}

void aj_loop_unwatch(struct supervise_state *st, int fd)
{
    for (int i = 0; fd >= 0 && i < AJ_SLOTS; i++)
        if (st->reg_fd[i] == fd) {
            if (!st->always[i])
                (void)epoll_ctl(st->epfd, EPOLL_CTL_DEL, fd, NULL);
            st->reg_fd[i] = -1;
            st->reg_ev[i] = st->always[i] = 0;
        }
}

static uint32_t to_epoll(short ev)
{
    return (ev & POLLIN ? EPOLLIN : 0) | (ev & POLLOUT ? EPOLLOUT : 0);
}

static short from_epoll(uint32_t ev)
{
    return (short)((ev & EPOLLIN ? POLLIN : 0) | (ev & EPOLLOUT ? POLLOUT : 0) | (ev & EPOLLHUP ? POLLHUP : 0) |
                   (ev & EPOLLERR ? POLLERR : 0));
}

static void arm_timer(struct supervise_state *st, uint64_t at_ms)
{
    struct itimerspec its = {0};

    if (at_ms == st->timer_at)
        return;
    st->timer_at = at_ms;
    if (at_ms) {
        its.it_value.tv_sec = (time_t)(at_ms / 1000);
        its.it_value.tv_nsec = (long)(at_ms % 1000) * 1000000L;
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
            its.it_value.tv_nsec = 1; /* 0 would disarm */
    }
    (void)timerfd_settime(st->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void aj_loop_arm(struct supervise_state *st)
{
    struct pollfd pfd[AJ_SLOTS];
    uint64_t wake = 0;
    bool always = false;

    for (int i = 0; i < AJ_SLOTS; i++)
        pfd[i] = (struct pollfd){.fd = -1};
    switch (st->phase) {
    case AJ_LOOP_SUPERVISE:
    case AJ_LOOP_INIT_GONE:
        supervise_interest(st, pfd, &wake);
        break;
    case AJ_LOOP_DRAIN:
    case AJ_LOOP_DRAINED:
        drain_interest(st, pfd, &wake);
        break;
    case AJ_LOOP_ALERT:
        pfd[AJ_SLOT_PIDFD] = (struct pollfd){.fd = st->alert.pidfd, .events = POLLIN};
        wake = st->alert.pidfd >= 0 ? st->alert.deadline : aj_now_ms() + 5;
        break;
    case AJ_LOOP_DONE:
        break;
    }
    /* Removals first: an fd number freed by one slot may be another's now. */
    for (int i = 0; i < AJ_SLOTS; i++)
        if (st->reg_fd[i] >= 0 && pfd[i].fd != st->reg_fd[i]) {
            if (!st->always[i])
                (void)epoll_ctl(st->epfd, EPOLL_CTL_DEL, st->reg_fd[i], NULL);
            st->reg_fd[i] = -1;
            st->reg_ev[i] = st->always[i] = 0;
        }
    for (int i = 0; i < AJ_SLOTS; i++) {
        uint32_t want = to_epoll(pfd[i].events);
        struct epoll_event ev = {.events = want, .data.u32 = (uint32_t)i};
        if (pfd[i].fd < 0)
            continue;
        if (st->reg_fd[i] == pfd[i].fd) {
            if (st->reg_ev[i] != want && !st->always[i] && epoll_ctl(st->epfd, EPOLL_CTL_MOD, pfd[i].fd, &ev) < 0)
                continue;
            st->reg_ev[i] = want;
            if (st->always[i])
                st->always[i] = want;
        } else if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, pfd[i].fd, &ev) == 0) {
            st->reg_fd[i] = pfd[i].fd;
            st->reg_ev[i] = want;
        } else if (errno == EPERM) {
            /* A regular file or a device without poll support: poll()
             * calls such an fd always ready, and so do we. */
            st->reg_fd[i] = pfd[i].fd;
            st->reg_ev[i] = st->always[i] = want;
        }
        always |= st->always[i] != 0;
    }
    if (st->phase == AJ_LOOP_DONE || always)
        wake = 1; /* now: the fd reads ready (for good once done) */
    arm_timer(st, wake);
}

enum aj_loop_phase aj_loop_round(struct supervise_state *st)
{
    struct epoll_event ev[AJ_SLOTS + 1];
    short revents[AJ_SLOTS] = {0};
    int n;

    do
        n = epoll_wait(st->epfd, ev, AJ_SLOTS + 1, 0);
    while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u32 == AJ_SLOT_TIMER) {
            uint64_t ticks;
            if (st->phase != AJ_LOOP_DONE && read(st->timerfd, &ticks, sizeof(ticks)) == (ssize_t)sizeof(ticks))
                st->timer_at = 0; /* fired: arm again below */
        } else if (ev[i].data.u32 < AJ_SLOTS) {
            revents[ev[i].data.u32] |= from_epoll(ev[i].events);
        }
    }
    for (int i = 0; i < AJ_SLOTS; i++)
        revents[i] |= (short)(st->always[i] & EPOLLIN ? POLLIN : 0) | (short)(st->always[i] & EPOLLOUT ? POLLOUT : 0);
    switch (st->phase) {
    case AJ_LOOP_SUPERVISE:
        if (supervise_step(st, revents))
            st->phase = AJ_LOOP_INIT_GONE;
        break;
    case AJ_LOOP_DRAIN:
        if (drain_step(st, revents))
            st->phase = AJ_LOOP_DRAINED;
        break;
    case AJ_LOOP_ALERT:
        aj_loop_check_alert(st, false);
        if (st->alert.pid <= 0)
            st->phase = AJ_LOOP_DONE;
        break;
    case AJ_LOOP_INIT_GONE:
    case AJ_LOOP_DRAINED:
    case AJ_LOOP_DONE:
        break;
    }
    return st->phase;
}

void aj_loop_fill_result(struct supervise_state *st, struct aj_result *res)
{
    struct aj_cgroup_stats cs = st->word_cs;
    bool cg_stats = st->early_end || (st->cg && st->cg->created && aj_cgroup_read_stats(st->cg, &cs) == 0);

    res->layer_set[0] |= st->layers;
    if (st->decoy_unarmed)
        res->layer_set[0] &= ~AJ_LAYER_BIT(AJ_LAYER_DECOYS); /* present, but not all watched */
    res->stdout_truncated = st->out[0].truncated;
    res->stderr_truncated = st->out[1].truncated;
    res->stdout_bytes = st->out[0].bytes;
    res->stderr_bytes = st->out[1].bytes;
    /* The cgroup counts the whole tree, including processes killed with the
     * namespace that init never reaped; rusage is the fallback. */
    if (cg_stats && cs.have_cpu)
        res->cpu_ms = cs.cpu_usec / 1000;
    else
        res->cpu_ms = (uint64_t)st->ru.ru_utime.tv_sec * 1000 + (uint64_t)st->ru.ru_utime.tv_usec / 1000 +
                      (uint64_t)st->ru.ru_stime.tv_sec * 1000 + (uint64_t)st->ru.ru_stime.tv_usec / 1000;
    if (cg_stats && cs.have_memory_peak)
        res->max_rss_kb = cs.memory_peak / 1024;
    else
        res->max_rss_kb = (uint64_t)st->ru.ru_maxrss;
    /* A limit the kernel enforced by itself (the OOM killer, a refused
     * fork) while the supervisor was not looking still names the outcome,
     * unless the payload succeeded anyway. */
    if (st->limit == AJ_STATUS_OK && cg_stats && !st->interrupted) {
        bool ok = st->have_exit && WIFEXITED(st->exit_wstatus) && WEXITSTATUS(st->exit_wstatus) == 0;
        if (cs.oom_kills > 0 && !ok)
            st->limit = AJ_STATUS_MEMORY_LIMIT;
        else if (cs.pids_max_hits > 0 && !ok)
            st->limit = AJ_STATUS_PIDS_LIMIT;
        else if (st->pol->cpu_time_ms && cs.have_cpu && cs.cpu_usec / 1000 >= st->pol->cpu_time_ms)
            st->limit = AJ_STATUS_CPU_LIMIT;
    }
    if (st->limit != AJ_STATUS_OK) {
        res->status = st->limit;
        res->signal = SIGKILL;
        res->exit_code = 128 + SIGKILL;
    } else if (st->interrupted) {
        res->status = AJ_STATUS_SIGNALED;
        res->signal = st->interrupted;
        res->exit_code = 128 + st->interrupted;
    } else if (st->have_exit && WIFEXITED(st->exit_wstatus)) {
        res->exit_code = WEXITSTATUS(st->exit_wstatus);
        res->status = res->exit_code == 0 ? AJ_STATUS_OK : AJ_STATUS_NONZERO_EXIT;
    } else if (st->have_exit && WIFSIGNALED(st->exit_wstatus)) {
        res->status = AJ_STATUS_SIGNALED;
        res->signal = WTERMSIG(st->exit_wstatus);
        res->exit_code = 128 + res->signal;
    } else {
        /* init died without reporting (killed from outside, or crashed). */
        res->status = AJ_STATUS_SIGNALED;
        res->signal = WIFSIGNALED(st->init_status) ? WTERMSIG(st->init_status) : SIGKILL;
        res->exit_code = 128 + res->signal;
    }
}

/* A relayed stream: its bounded buffer and our own non-blocking
 * description of the destination (relay_open_dest). */
int aj_loop_relay_open(struct out_stream *o, struct aj_error *err)
{
    o->buf = malloc(RELAY_BUF_SIZE);
    if (!o->buf)
        return aj_err(err, ENOMEM, "output buffer");
    return relay_open_dest(o, err);
}

void aj_loop_emit_end(struct supervise_state *st, struct aj_result *res)
{
    json_t *ev;

    if (res->status == AJ_STATUS_SETUP_ERROR) {
        ev = aj_audit_event(st->audit, AJ_EV_ERROR, AJ_SEV_LOW);
        if (ev)
            (void)json_object_set_new(ev, "error", json_string(res->error));
        emit(st, ev, AJ_EV_ERROR, AJ_SEV_LOW);
    }
    ev = aj_audit_event(st->audit, AJ_EV_EXIT, AJ_SEV_INFO);
    if (ev) {
        (void)json_object_set_new(ev, "status", json_string(aj_status_name(res->status)));
        (void)json_object_set_new(ev, "exit_code", json_integer(res->exit_code));
        (void)json_object_set_new(ev, "signal", json_integer(res->signal));
        (void)json_object_set_new(ev, "wall_ms", json_integer((json_int_t)res->wall_ms));
    }
    emit(st, ev, AJ_EV_EXIT, AJ_SEV_INFO);
    for (int i = 0; i < AJ_EV_COUNT && i < (int)AJ_ARRAY_SIZE(res->event_count); i++)
        if (i != AJ_EV_EVENTS_SUPPRESSED) /* the budget's own summaries are not counted */
            res->event_count[i] = st->audit->counts[i];
    res->escape_attempted = st->audit->counts[AJ_EV_ESCAPE_ATTEMPT] + st->audit->counts[AJ_EV_CANARY] > 0;
}

void aj_loop_discard_output(struct supervise_state *st)
{
    drop_output(&st->out[0]);
    drop_output(&st->out[1]);
    drop_output(&st->in);
}
