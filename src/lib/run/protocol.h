/* SPDX-License-Identifier: Apache-2.0 */
/* The sync protocol between the supervisor and the sandbox side: one
 * SOCK_SEQPACKET socketpair per sandbox, fixed-size messages (struct
 * aj_sync_msg), fds passed with SCM_RIGHTS. Both sides use these helpers;
 * the sandbox side between clone and exec, so nothing here allocates,
 * locks or touches stdio (checked: tools/check-child-calls.py). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "aj_decoy.h"
#include "aj_error.h"

enum aj_msg_type {
    AJ_MSG_GO = 1,   /* supervisor → init: id maps are written */
    AJ_MSG_ERROR,    /* sandbox → supervisor: setup failed, err says why */
    AJ_MSG_READY,    /* payload → supervisor: every layer applied, about to exec */
    AJ_MSG_EXIT,     /* init → supervisor: the payload's wait status */
    AJ_MSG_DECOYS,   /* init → supervisor: decoy files (+ socket); wstatus = number of files */
    AJ_MSG_LISTENER, /* payload → supervisor: the seccomp notification fd */
    AJ_MSG_RUN,      /* pool → parked payload: its command (struct aj_run_msg) */
    AJ_MSG_NETNS,    /* netns helper → the relay's starter: its listening socket (fd), or err */
    AJ_MSG_ARMED,    /* supervisor → init: the decoys are leased (wstatus: how many failed) */
    AJ_MSG_PTY,      /* init → supervisor: the master of the payload's own pty */
    AJ_MSG_INTERP,   /* warm interpreter's payload → supervisor: our end of its request channel (fd) */
    AJ_MSG_ADOPT,    /* init (adopt mode) → supervisor: a dup of its sync socket end and its namespaces
                      * (fds, wstatus = AJ_ADOPT_NS_* bits of those sent), for a template's child */
};

/* The namespaces an adopt-mode init hands over, in this order (after the
 * socket), each present where its bit is set in the message's wstatus. */
enum {
    AJ_ADOPT_NS_USER,
    AJ_ADOPT_NS_MNT,
    AJ_ADOPT_NS_UTS,
    AJ_ADOPT_NS_IPC,
    AJ_ADOPT_NS_NET,
    AJ_ADOPT_NS_CGROUP,
    AJ_ADOPT_NS_PID,
    AJ_ADOPT_NS_TIME, /* time_for_children: absent on kernels without time namespaces */
    AJ_ADOPT_NS_KINDS
};

/* A pooled run's command: this header, argc then envc NUL-terminated
 * strings, and three fds (stdin, stdout, stderr). Everything of the
 * request travels here, taken when the run starts: a parked sandbox holds
 * no request's data (not even an env_pass value read while it was parked).
 * Bounded so the waiting payload can take it into static memory with one
 * recvmsg. */
struct aj_run_msg {
    uint32_t type;
    uint32_t argc;
    uint32_t envc;
};
#define AJ_RUN_MAX_BYTES (64 * 1024)
#define AJ_RUN_MAX_ARGS 4096

/* fds one message can carry: the decoy socket and its files at most. */
#define AJ_MAX_MSG_FDS (1 + AJ_DECOY_MAX_FILES + 1)
/* fds aj_proto_send_with_fds sends at most (a zygote's request: zygote.h). */
#define AJ_MAX_SEND_FDS 64

struct aj_sync_msg {
    uint32_t type;
    int32_t wstatus;
    uint64_t layers; /* AJ_LAYER_BIT masks */
    int32_t landlock_abi;
    struct aj_error err;
};

/* The fds a received message carried (SCM_RIGHTS), at most max of them;
 * any beyond that are closed, not leaked. */
int aj_proto_collect_fds(struct msghdr *mh, int *fds, int max);

/* One struct aj_sync_msg, no fds. Failure is not reported: the other side
 * sees EOF and reports that. */
void aj_proto_send_msg(int sock, uint32_t type, int wstatus, uint64_t layers, int abi,
                       const struct aj_error *err);

/* One message with 0..AJ_MAX_SEND_FDS fds, MSG_NOSIGNAL, retried on
 * EINTR. Returns 0 or -errno. */
int aj_proto_send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);
int aj_proto_send_fds(int sock, const struct aj_sync_msg *m, const int *fds, int nfds);

/* One message with no fds, MSG_NOSIGNAL, retried on EINTR. 0 or -errno. */
int aj_proto_send_plain(int sock, const void *buf, size_t len);
