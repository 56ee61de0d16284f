/* SPDX-License-Identifier: Apache-2.0 */
/* A pool's zygotes: small processes, one forked from the supervisor by
 * each of the pool's filler threads as the pool starts (before it takes a
 * request), that clone the inits of the sandboxes the fillers prepare.
 *
 * Why: init used to be a clone of the supervisor itself. In a server that
 * is a process of many threads and megabytes of heap, each such clone
 * copies the server's page tables; every page the server's threads write
 * afterwards is then a copy-on-write fault with a TLB shootdown; and
 * init's exit tears its copy down again. The zygote is quiet and stays
 * small: cloning from it costs a fraction of that, and the server's
 * threads take no fault for it (measured: about 250 faults per run in the
 * server before, 1-2 after). Init also holds a copy of the server's memory
 * as it was when the pool started, not of whatever requests (other
 * tenants' code, files, environments) the server held at the moment of
 * the clone.
 *
 * How: everything init reads (struct aj_child_ctx and what it points to)
 * is sent down a socket with its fds (SCM_RIGHTS); the zygote rebuilds it
 * in its own memory and clones init with CLONE_PARENT, so init is still
 * the supervisor's child (reaped, signalled and waited for as before), and
 * sends the pidfd back. The policy itself is not sent: the zygote keeps
 * the copy of the pool's policy it was forked with, and is used only for
 * a sandbox whose policy is bytewise that copy (the pointers in it lead
 * to the pool's policy, which does not change while the pool lives).
 * Anything else (another policy, a message too large, a zygote found dead)
 * and the supervisor clones init itself, as without a zygote; a zygote
 * that dies with a request of ours in it fails that sandbox (EPIPE).
 *
 * The zygote is a raw clone of a process that may have other threads: it
 * runs under child.c's rules (no malloc, no locks, no stdio), checked by
 * tools/check-child-calls.py (zygote_child.c). */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "child.h"
#include "protocol.h"

struct aj_zygote;

/* clone3 with CLONE_PIDFD, and CLONE_INTO_CGROUP when cgroup_fd >= 0 (the
 * sandbox is confined from its first instruction); the fallbacks of older
 * kernels and of filters that refuse clone3. 0 in the child, -1 with
 * errno on failure. */
pid_t aj_clone_sandbox(uint64_t flags, int cgroup_fd, int *ret_pidfd, bool *ret_in_cgroup);

/* Supervisor side. Up to n zygote processes, none started yet; NULL when
 * out of memory. */
struct aj_zygote *aj_zygote_new(unsigned n);
/* The policy of the sandboxes the zygotes clone inits for: a sandbox's
 * own (sb->req.eff), whose pointers lead into the pool's policy. Before
 * the first start. */
void aj_zygote_set_policy(struct aj_zygote *z, const struct aj_policy *pol);
/* Fork one more zygote process now, from the calling thread: the zygote,
 * and every init it clones (CLONE_PARENT), have that thread as their
 * parent, whose end sends them their death signal; so a thread that
 * lives as long as the pool (its filler). It holds a copy of this
 * process's memory as it is now: before the pool takes any request. -errno
 * when it could not start (requests go to the others, or none). */
int aj_zygote_start_one(struct aj_zygote *z);
/* Until n starts were tried (or all of z's). */
void aj_zygote_wait_started(struct aj_zygote *z, unsigned n);
/* Clone init for c (its fds as they are in this process) through z:
 * *ret_used false when z cannot serve it (the caller clones init itself);
 * else as aj_clone_sandbox (pid, or -1 with errno: the clone failed in the
 * zygote, for the caller's fallbacks). Thread-safe. */
pid_t aj_zygote_clone(struct aj_zygote *z, const struct aj_child_ctx *c, uint64_t flags, int cgroup_fd,
                      int *ret_pidfd, bool *ret_in_cgroup, bool *ret_used);
/* Sandboxes cloned through z so far (for tests and the pool's stats). */
uint64_t aj_zygote_clones(struct aj_zygote *z);
/* Zygote processes running now. */
unsigned aj_zygote_running(struct aj_zygote *z);
/* End the zygote (it sees EOF), reap it, free z. NULL is a no-op. */
void aj_zygote_free(struct aj_zygote *z);

/* ---- between the two sides (zygote.c, zygote_child.c) ---- */

#define AJ_ZYG_MAGIC 0x5a594731u /* "ZYG1" */
#define AJ_ZYG_MAX_FDS AJ_MAX_SEND_FDS
/* Under the default net.core.wmem_default (212992), the most one
 * SOCK_SEQPACKET message may carry: larger requests are cloned by the
 * caller itself. */
#define AJ_ZYG_MAX_MSG (192u * 1024u)

/* A request: this header, then argv, envp, path_env, the mount plan's
 * entries and their strings, the two filters, the decoys' strings (see
 * zygote.c, encode). In ctx, every pointer is meaningless and every fd is
 * an index into the message's fds (-1: none). */
struct aj_zyg_req {
    uint32_t magic;
    uint32_t nfds;
    uint64_t flags;
    int32_t cgroup_fd; /* index, or -1 */
    uint32_t len;      /* of the whole message */
    sigset_t mask;     /* the caller's: init starts with it, as a clone of the caller would */
    struct aj_child_ctx ctx;
};

struct aj_zyg_reply {
    int32_t err; /* errno of a failed clone, or of a request the zygote could not read */
    int32_t pid;
    uint8_t in_cgroup;
};

/* The zygote process: serves requests on sock until EOF; pol is the copy
 * of the pool's policy every init it clones enforces. */
__attribute__((noreturn)) void aj_zygote_main(int sock, const struct aj_policy *pol);
