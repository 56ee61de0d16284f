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
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"
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

static void start_alert(struct supervise_state *st, json_t *ev)
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
        st->alert.pid = pid;
        st->alert.deadline = aj_now_ms() + st->pol->alert_timeout_ms;
    }
    (void)close(p[1]);
    free(json);
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
            st->alert.pid = 0;
            return;
        }
        if (aj_now_ms() >= st->alert.deadline) {
            (void)kill(-st->alert.pid, SIGKILL);
            (void)kill(st->alert.pid, SIGKILL);
            while (waitpid(st->alert.pid, &status, 0) < 0 && errno == EINTR)
                ;
            st->alert.pid = 0;
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
static void emit(struct supervise_state *st, json_t *ev, enum aj_event_type type, enum aj_severity sev)
{
    if (!ev)
        return;
    /* Kill first: the offending call is still held (notification not
     * answered, lease not released), so the payload never goes on. */
    if ((type == AJ_EV_ESCAPE_ATTEMPT || type == AJ_EV_CANARY) && st->pol->on_escape == AJ_ON_ESCAPE_KILL)
        end_run(st, AJ_STATUS_ESCAPE_ATTEMPT);
    if (aj_audit_emit(st->audit, ev, type, sev)) /* takes ev */
        start_alert(st, st->audit->first_high);
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
    if (st->decoy_sock >= 0)
        (void)close(st->decoy_sock);
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
    if (st->cg)
        aj_cgroup_kill(st->cg);
}

/* The payload's pty master arrived (see child_make_pty): its output is
 * stdout's stream, the caller's terminal input goes to it, the window size
 * is copied, and the caller's terminal is put in raw mode (only when we
 * are its foreground: a background job must not change the terminal of
 * the shell in front), so that ^C, ^Z and line editing are the payload's
 * pty's business. Restored in sb_cleanup, on every path. */
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
        emit_start(st);
    } else if (msg->type == AJ_MSG_EXIT) {
        st->exit_wstatus = msg->wstatus;
        st->have_exit = true;
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
    if (st->cg)
        aj_cgroup_kill(st->cg);
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

/* The poll timeout that also wakes us at deadline: the time left is
 * 64-bit arithmetic, clamped to what poll's int can hold. A timeout above
 * INT_MAX ms once turned negative here, and poll then waited forever: no
 * cgroup checks, no cpu-time limit, no timed anything. */
static int clamp_poll_timeout(int timeout, uint64_t deadline)
{
    uint64_t now = aj_now_ms(), left = now >= deadline ? 0 : deadline - now;

    if (left > (uint64_t)INT_MAX)
        left = INT_MAX;
    if (timeout < 0 || (uint64_t)timeout > left)
        return (int)left;
    return timeout;
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
 * reader that went away (EPIPE; SIGPIPE is blocked during the run, see
 * sb_block_signals) is that reader's business: the payload's accounting
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

/* Signals from the signalfd: the ones that end the run (each kept in
 * got_signals for the caller, see sb_cleanup). */

static void read_signals(struct supervise_state *st)
{
    struct signalfd_siginfo si;

    while (read(st->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        (void)sigaddset(&st->got_signals, (int)si.ssi_signo);
        if (!st->interrupted) {
            st->interrupted = (int)si.ssi_signo;
            (void)aj_sys_pidfd_send_signal(st->pidfd, SIGKILL);
            if (st->cg)
                aj_cgroup_kill(st->cg);
        }
    }
}

/* Relay what is left after the run, until every pipe is at EOF and every
 * buffer is written, but never wait on a stalled reader past the run's
 * deadline (the run then ends as a timeout), nor past a short grace when
 * the run was already ended by a limit or a signal, nor past a signal. */
#define RELAY_GRACE_MS 1000

static void relay_rest(struct supervise_state *st)
{
    uint64_t deadline = st->deadline;
    uint64_t grace = 0;

    for (;;) {
        struct pollfd p[5];
        int np = 0, timeout = -1, idx[2][2] = {{-1, -1}, {-1, -1}};
        bool busy = false;
        uint64_t until;

        for (int i = 0; i < 2; i++) {
            struct out_stream *o = &st->out[i];
            if (o->dest_gone)
                drop_output(o);
            if (o->rfd >= 0 && o->len < RELAY_BUF_SIZE) {
                idx[i][0] = np;
                p[np++] = (struct pollfd){.fd = o->rfd, .events = POLLIN};
            }
            if (o->len > 0 && o->how != RELAY_PLAIN) {
                idx[i][1] = np;
                p[np++] = (struct pollfd){.fd = o->wfd, .events = POLLOUT};
            }
            busy |= o->rfd >= 0 || o->len > 0;
        }
        if (!busy)
            return;
        if ((st->limit != AJ_STATUS_OK || st->interrupted) && !grace)
            grace = aj_now_ms() + RELAY_GRACE_MS;
        until = grace ? grace : deadline;
        if (until) {
            if (aj_now_ms() >= until) {
                /* A reader that stalls past the deadline: the run did not
                 * finish in time. What is left is dropped. */
                if (!grace)
                    end_run(st, AJ_STATUS_TIMEOUT);
                for (int i = 0; i < 2; i++) {
                    if (st->out[i].rfd >= 0)
                        (void)close(st->out[i].rfd);
                    st->out[i].rfd = -1;
                    st->out[i].len = st->out[i].head = 0;
                }
                return;
            }
            timeout = clamp_poll_timeout(-1, until);
        }
        p[np++] = (struct pollfd){.fd = st->sigfd, .events = POLLIN};
        if (poll(p, (nfds_t)np, timeout) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (p[np - 1].revents & POLLIN)
            read_signals(st);
        for (int i = 0; i < 2; i++) {
            struct out_stream *o = &st->out[i];
            if (idx[i][0] >= 0 && p[idx[i][0]].revents)
                pump_output(st, o);
            if (idx[i][1] >= 0 && (p[idx[i][1]].revents & (POLLERR | POLLHUP)) && o->how != RELAY_SOCKET) {
                drop_output(o); /* the pipe's reader is gone */
            } else if (idx[i][1] >= 0 && p[idx[i][1]].revents) {
                flush_output(o, true);
            }
            if (o->how == RELAY_PLAIN)
                flush_output(o, true);
        }
    }
}

void aj_loop_finish_output(struct supervise_state *st)
{
    relay_rest(st);
    /* Done with the destinations we own (a pipe the library made for the
     * caller, /dev/null): closed now, so the caller's end of a pipe reads
     * EOF as the run ends, not when its handle is freed. */
    for (int i = 0; i < 2; i++) {
        struct out_stream *o = &st->out[i];
        if (!o->owns_dest)
            continue;
        if (o->own_wfd && o->wfd >= 0)
            (void)close(o->wfd);
        o->own_wfd = false;
        o->wfd = -1;
        if (o->dest >= 0)
            (void)close(o->dest);
        o->dest = -1;
        o->owns_dest = false;
    }
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

enum {
    PF_SOCK, PF_PIDFD, PF_SIG, PF_OUT, PF_ERR, PF_IN, PF_NOTIFY, PF_DSOCK, PF_LEASE, PF_OUT_W, PF_ERR_W, PF_IN_W,
    PF_COUNT
};

/* Every message the sandbox side queued before this moment: the payload
 * sends READY (and with it the start event) before it execs, so draining
 * first keeps "start" ahead of anything the payload does. */
void aj_loop_drain_msgs(struct supervise_state *st)
{
    int r;
    while (st->sock >= 0 && (r = recv_msg(st)) != 0)
        if (r < 0) {
            (void)close(st->sock);
            st->sock = -1;
        }
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
        /* The listener is gone (every process of the filter exited). */
        aj_notify_clear(&st->notify);
        (void)aj_notify_init(&st->notify, -1, NULL);
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

int aj_loop_supervise(struct supervise_state *st, struct aj_error *err)
{
    uint64_t deadline = st->deadline;
    uint64_t last_cg_check = 0;
    bool watch_cgroup = st->cg && st->cg->created &&
                        (st->cg->limits & (AJ_LAYER_BIT(AJ_LAYER_MEMORY_LIMIT) | AJ_LAYER_BIT(AJ_LAYER_PIDS_LIMIT)) ||
                         st->pol->cpu_time_ms);

    for (;;) {
        struct pollfd pfd[PF_COUNT] = {
            [PF_SOCK] = {.fd = st->sock, .events = POLLIN},
            [PF_PIDFD] = {.fd = st->pidfd, .events = POLLIN},
            [PF_SIG] = {.fd = st->sigfd, .events = POLLIN},
            [PF_NOTIFY] = {.fd = st->notify.fd, .events = POLLIN},
            [PF_DSOCK] = {.fd = st->decoy_sock, .events = POLLIN},
            [PF_LEASE] = {.fd = st->lease_wake[0], .events = POLLIN},
        };
        int timeout = watch_cgroup && st->limit == AJ_STATUS_OK ? CGROUP_POLL_MS : -1;
        int r;

        /* Output: read while the buffer has room, write while it holds
         * something and the reader takes it. A full buffer leaves the
         * payload waiting on its pipe, never the supervisor. */
        for (int i = 0; i < 3; i++) {
            struct out_stream *o = i < 2 ? &st->out[i] : &st->in;
            pfd[PF_OUT + i] = (struct pollfd){.fd = o->rfd >= 0 && o->len < RELAY_BUF_SIZE ? o->rfd : -1,
                                              .events = POLLIN};
            pfd[PF_OUT_W + i] = (struct pollfd){
                .fd = o->len > 0 && !o->dest_gone && o->how != RELAY_PLAIN ? o->wfd : -1, .events = POLLOUT};
        }

        if (deadline && st->limit == AJ_STATUS_OK)
            timeout = clamp_poll_timeout(timeout, deadline);
        if (st->alert.pid > 0 && (timeout < 0 || timeout > 50))
            timeout = 50; /* watch the hook's deadline */
        if (st->notify.fd >= 0 && fast_path(st, AJ_EV_ESCAPE_ATTEMPT) && st->flood_taken >= FLOOD_PER_WINDOW) {
            /* This window's quota is spent: not polled until the next. */
            uint64_t now = aj_now_ms();
            if (now / FLOOD_WINDOW_MS == st->flood_window) {
                int wait = (int)(FLOOD_WINDOW_MS - now % FLOOD_WINDOW_MS);
                pfd[PF_NOTIFY].fd = -1;
                if (timeout < 0 || wait < timeout)
                    timeout = wait;
            }
        }
        if (aj_audit_suppressed_pending(st->audit)) {
            /* The next events_suppressed summary is due a second after the last. */
            uint64_t now = aj_now_ms(), due = st->last_summary_ms + 1000;
            int wait = now >= due ? 0 : (int)(due - now);
            if (timeout < 0 || wait < timeout)
                timeout = wait;
        }
        for (size_t i = 0; i < AJ_ARRAY_SIZE(st->dconn); i++)
            if (st->dconn[i].fd >= 0 && (timeout < 0 || timeout > 20))
                timeout = 20; /* a decoy connection's request */
        r = poll(pfd, PF_COUNT, timeout);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return aj_err(err, errno, "poll");
        }
        if (st->limit == AJ_STATUS_OK) {
            uint64_t now = aj_now_ms();
            if (deadline && now >= deadline)
                end_run(st, AJ_STATUS_TIMEOUT);
            else if (watch_cgroup && now - last_cg_check >= CGROUP_POLL_MS) {
                /* On the timer, not on every wake-up: an escape notification
                 * should not pay for reading cgroup files. */
                last_cg_check = now;
                check_cgroup_limits(st);
            }
        }
        aj_loop_check_alert(st, false);
        aj_loop_emit_summary(st, false);
        if (pfd[PF_SOCK].revents & (POLLIN | POLLHUP | POLLERR))
            aj_loop_drain_msgs(st);
        if (pfd[PF_NOTIFY].revents & POLLIN)
            on_notify(st);
        else if (pfd[PF_NOTIFY].revents & (POLLHUP | POLLERR)) {
            aj_notify_clear(&st->notify);
            (void)aj_notify_init(&st->notify, -1, NULL);
        }
        if (pfd[PF_LEASE].revents & POLLIN)
            read_lease_breaks(st);
        if (pfd[PF_DSOCK].revents & POLLIN)
            on_decoy_socket(st);
        check_dconns(st, false);
        for (int i = 0; i < 3; i++) {
            struct out_stream *o = i < 2 ? &st->out[i] : &st->in;
            short w = pfd[PF_OUT_W + i].revents;
            if (w & (POLLERR | POLLHUP) && o->how != RELAY_SOCKET)
                drop_output(o); /* the reader of the caller's pipe (or the pty) is gone */
            else if (w)
                flush_output(o, true);
            if (pfd[PF_OUT + i].revents & (POLLIN | POLLHUP | POLLERR))
                pump_output(st, o);
        }
        if (pfd[PF_SIG].revents & POLLIN)
            read_signals(st);
        if (pfd[PF_PIDFD].revents & POLLIN) {
            pid_t w;
            do
                w = wait4(st->pid, &st->init_status, 0, &st->ru);
            while (w < 0 && errno == EINTR);
            if (w == st->pid)
                break;
            if (w < 0 && errno == ECHILD) {
                /* Reaped by someone else (a caller's waitpid(-1), SIGCHLD
                 * ignored): init is gone, its status unknown. Not a loop on
                 * a pidfd that stays readable. */
                st->init_status = SIGKILL;
                break;
            }
        }
    }
    st->pid = -1;
    /* Messages sent just before init exited are still queued, and so may
     * be the last decoy touches. */
    while (st->sock >= 0 && recv_msg(st) > 0)
        ;
    finish_decoys(st);
    return 0;
}

void aj_loop_fill_result(struct supervise_state *st, struct aj_result *res)
{
    struct aj_cgroup_stats cs = {0};
    bool cg_stats = st->cg && st->cg->created && aj_cgroup_read_stats(st->cg, &cs) == 0;

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
