/* SPDX-License-Identifier: Apache-2.0 */
/* network.mode "proxy", the supervisor's side (docs/network.md): the run's
 * egress proxy (agentjail-egress, src/egress/) started with the contract's
 * fds, the brokered secrets resolved and replaced by placeholders, the
 * relay in the sandbox's network namespace, the proxy's events turned into
 * the run's, revocation, and the end of both processes on every path.
 * sandbox.c calls these in its order of steps; loop.c reads the events. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentjail.h"
#include "aj_audit.h"
#include "aj_cgroup.h"
#include "aj_mount.h"
#include "aj_policy_model.h"
#include "aj_userns.h"

/* The path inside the sandbox of the trust bundle (the system's + the
 * run's CA), when a secret is brokered. */
#define AJ_EGRESS_CA_BUNDLE "/etc/agentjail/ca-bundle.pem"

/* How long a parked sandbox's proxy may wait for its run: its CA's
 * validity grows by this much; a pool discards it past that. */
#define AJ_EGRESS_PARK_MAX_S 3600

struct aj_egress {
    bool on;                 /* network.mode "proxy" */
    bool rootless;
    struct aj_uid_lease lease; /* root mode: the egress uid */
    uid_t uid;
    gid_t gid;
    int null_fd;
    pid_t proxy_pid;
    int proxy_pidfd;
    pid_t relay_pid;
    int ev_fd;               /* the proxy's fd 5, our read end (non-blocking) */
    int err_fd;              /* its stderr, our read end (non-blocking) */
    int ctl_fd;              /* its fd 6, our write end */
    int helper_sock[2];      /* the netns helper sends the relay's listening socket on [1] */
    int handoff[2];          /* SOCK_SEQPACKET: the relay hands accepted connections ([1]) to the proxy ([0]) */
    /* The proxy's unix socket's directory, in /tmp, named after its owner
     * (agentjail-egress-<pid>.<starttime>.ns<pidns>-XXXXXX: a later run
     * reaps it when that supervisor is gone) and held open: flock'ed for
     * the run's life, and its entries removed through this fd only. */
    char dir[112];
    int dir_fd;
    char sock_path[108];
    /* The run's cgroups, joined by the proxy and the relay as their first
     * step (v1 "tasks" and v2 "cgroup.procs", written "0"): their memory,
     * pids and CPU are the run's, and they die with it. */
    int cg_join[AJ_CG_MAX_JOIN + 1];
    size_t n_cg_join;
    char **env;              /* "K=V" the sandbox gets (proxy variables, CA, placeholders); NULL-terminated */
    size_t n_env;
    json_t *secret_ids;      /* the ids of the brokered secrets (credentials_suspended) */
    bool suspended;
    bool stopping;           /* aj_egress_stop: the proxy's EOF is expected */
    char *pend;              /* read while waiting for the suspension's answer, not yet taken */
    size_t pend_len;
    char line[8192];         /* a partial line of the proxy's events */
    size_t line_len;
    bool line_skip;          /* the line was too long: dropped to its end */
    uint64_t park_s;         /* a parked (pooled) sandbox's: how long it may wait for its run (CA validity) */
    uint64_t ca_not_after_ms; /* aj_now_ms() clock: the run CA's end (0: no CA) */
    uint64_t bytes_out, bytes_in;
    uint64_t malformed;      /* event lines that were not what the contract says */
    char stderr_tail[256];   /* the proxy's last words, for a setup error */
};

void aj_egress_init(struct aj_egress *eg);

/* Before the sandbox is cloned (its memory must never hold a secret):
 * resolve the secrets, start the proxy with its config, take its CA, and
 * add to the mount plan what the sandbox sees (resolv.conf, the trust
 * bundle, placeholder files); eg->env then holds the variables. A no-op
 * unless pol->network is proxy. */
int aj_egress_prepare(struct aj_egress *eg, const struct aj_policy *pol, const char *run_id, bool rootless,
                      const struct aj_cgroup *cg, struct aj_mount_plan *plan, struct aj_error *err);
/* A parked sandbox's proxy, at the moment its run would start: alive,
 * and its CA valid for a run of timeout_ms (0: none) from now. */
bool aj_egress_parked_usable(const struct aj_egress *eg, uint64_t timeout_ms);
/* The netns helper's end of the socket the relay's listening socket comes
 * back on (-1 when not in proxy mode). */
int aj_egress_helper_sock(const struct aj_egress *eg);
/* After the netns helper was started: take the listening socket it made
 * inside the sandbox's network namespace and start the relay on it. */
int aj_egress_start_relay(struct aj_egress *eg, const struct aj_policy *pol, struct aj_error *err);

/* Events: read what the proxy wrote (non-blocking) and hand each as an
 * audit event to emit. drain: also wait (bounded) for the proxy's EOF. */
typedef void (*aj_egress_emit_fn)(void *ctx, json_t *ev, enum aj_event_type type, enum aj_severity sev);
void aj_egress_read_events(struct aj_egress *eg, const struct aj_audit *a, aj_egress_emit_fn emit, void *ctx,
                           bool drain);
/* Stop brokering now: "suspend" to the proxy, and its answer waited for
 * (bounded), so that the call that caused it (held meanwhile: the seccomp
 * notification unanswered, the decoy's opener blocked) returns only once
 * no request gets the credential any more. Returns the
 * credentials_suspended event to emit, or NULL when nothing was
 * brokered or it was already suspended. */
json_t *aj_egress_suspend(struct aj_egress *eg, const struct aj_audit *a);
/* The run is being killed whole (a limit, an interrupt: its cgroup,
 * which holds the proxy and the relay, is killed): the proxy's end is
 * expected, not news. */
void aj_egress_expect_end(struct aj_egress *eg);
/* The end of the run: the proxy told to exit (EOF on its control fd),
 * its last events taken, then both processes killed and reaped. */
void aj_egress_stop(struct aj_egress *eg, const struct aj_audit *a, aj_egress_emit_fn emit, void *ctx);
void aj_egress_fill_result(const struct aj_egress *eg, struct aj_result *res);
/* Every fd, the lease, the socket directory. Kills what still runs. */
void aj_egress_release(struct aj_egress *eg);
