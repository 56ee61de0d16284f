/* SPDX-License-Identifier: Apache-2.0 */
/* The egress processes between their clone and execve (the proxy) or
 * their end (the relay), and the listening socket the netns helper makes
 * for the relay. Raw clones of a supervisor that may have other threads:
 * no malloc, no locks, no stdio (tools/check-child-calls.py). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aj_cgroup.h"

struct sock_filter;

/* The contract's fds: config, listen, events, control, CA out, handoff
 * (3..8). */
#define AJ_EGRESS_NFDS 6

/* One entry of the proxy's filesystem view: a host path bound read-only at
 * the same place, or a symlink replicated (merged /usr: /lib -> usr/lib). */
#define AJ_EGRESS_VIEW_MAX 24
#define AJ_EGRESS_VIEW_PATH 512
struct aj_egress_view_entry {
    char path[AJ_EGRESS_VIEW_PATH];
    char link[AJ_EGRESS_VIEW_PATH]; /* non-empty: a symlink to this */
    bool file;                       /* a file (bound on an empty file), else a directory */
    bool dev;                        /* a device node: no nodev */
    bool follow;                     /* the path itself may be a symlink (/etc/resolv.conf often is) */
};

/* Built by the supervisor before the clone, never freed by the child. */
struct aj_egress_child {
    pid_t parent;       /* the supervisor: gone before the death signal was armed = exit */
    int cg_join[AJ_CG_MAX_JOIN + 1]; /* the run's cgroups, written "0" first thing */
    size_t n_cg_join;
    bool rootless;
    uid_t uid;          /* root mode: the egress uid (a second lease of identity.uid_range) */
    gid_t gid;
    int null_fd;        /* /dev/null, for 0 and 1 (and the relay's 2) */
    /* proxy */
    const char *path;   /* agentjail-egress */
    char *const *argv;
    char *const *envp;
    int fds[AJ_EGRESS_NFDS]; /* become 3..8 */
    int stderr_fd;
    uint64_t nofile;     /* RLIMIT_NOFILE the proxy needs (2 fds a connection), within the hard limit */
    /* The proxy's own root: a tmpfs at view_root (an empty directory of
     * the supervisor's) with these entries, pivoted into. n_view 0: none. */
    char view_root[AJ_EGRESS_VIEW_PATH];
    struct aj_egress_view_entry view[AJ_EGRESS_VIEW_MAX];
    size_t n_view;
    /* relay */
    int listen_fd;      /* TCP, 127.0.0.1:proxy_port, in the sandbox's network namespace */
    int handoff_fd;     /* SOCK_SEQPACKET to the proxy's --handoff-fd: each accepted connection goes there */
    const struct sock_filter *relay_insns; /* its seccomp filter (aj_seccomp_compile_relay) */
    size_t relay_len;
};

/* The proxy: fds into place, setsid, egress uid, no capability,
 * no_new_privs, execve. Never returns. */
__attribute__((noreturn)) void aj_egress_child_proxy_main(const struct aj_egress_child *ec);
/* The relay: each connection accepted on listen_fd handed to the proxy
 * (SCM_RIGHTS on handoff_fd), until the supervisor kills it. Never
 * returns. */
__attribute__((noreturn)) void aj_egress_child_relay_main(const struct aj_egress_child *ec);
/* In the netns helper, inside the new network namespace: lo up, a
 * listening socket on 127.0.0.1:port, sent down relay_sock (an
 * AJ_MSG_NETNS message with the fd, or with err.errnum set). */
int aj_egress_child_listen(int relay_sock, uint16_t port);
