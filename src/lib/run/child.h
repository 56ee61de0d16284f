/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox side: init (pid 1 of the new namespaces) and the payload,
 * from clone to execve, plus the short-lived helper processes the
 * supervisor clones. All of it runs in a raw clone of a process that may
 * have other threads (a server, the pool's filler): no malloc, no locks,
 * no stdio, _exit only. Everything it reads is built before the clone and
 * never freed here (the process execs or exits). The build checks the
 * calls this object can reach (tools/check-child-calls.py). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aj_cgroup.h"
#include "aj_decoy.h"
#include "aj_mount.h"
#include "aj_policy.h"
#include "aj_seccomp.h"

/* Everything the sandbox side reads. Built before clone, never freed by
 * the child (it execs or _exits). */
struct aj_child_ctx {
    const struct aj_policy *pol;
    char **argv;          /* a copy: see copy_argv */
    char **envp;
    const char *path_env; /* PATH value used for the command search */
    struct aj_mount_plan plan;
    struct aj_bpf bpf;
    /* The filter for a pid namespace with vm.memfd_noexec=2 (root mode,
     * Linux 6.3+; init sets it, seal_memfds in child.c): len 0 where it cannot be set. */
    struct aj_bpf bpf_memfd;
    int sock;             /* sandbox end of the sync socket */
    int out_fd, err_fd;   /* captured stdout/stderr write ends, or -1 */
    int in_fd;            /* parked: /dev/null for init's stdin, else -1 */
    bool parked;          /* pooled: the payload waits for AJ_MSG_RUN before exec */
    /* A warm interpreter (interp.c): the payload makes a request channel,
     * sends one end up (AJ_MSG_INTERP), keeps the other as its fd 3 and
     * execs argv (the bootstrap) at once; 0-2 are /dev/null until a request. */
    bool interp;
    /* A template's child (tmpl.c, tmpl_child.c): init does all its setup,
     * then hands its namespaces to the supervisor (AJ_MSG_ADOPT) instead of
     * forking the payload, and only reaps; the payload is a process of the
     * template that enters those namespaces (aj_child_adopted_payload). */
    bool adopt;
    int cg_join[AJ_CG_MAX_JOIN]; /* v1 "tasks" files to write "0" to, first thing */
    size_t n_cg_join;
    int landlock_abi;
    bool rootless;
    bool degraded;
    uid_t host_uid;
    gid_t host_gid;
    uint64_t layers;      /* accumulated on the sandbox side (AJ_LAYER_BIT) */
    struct aj_decoy_files decoys;
    unsigned skip;        /* AJ_SKIP_*: layers left out on purpose (tests of verify) */
    /* The caller's stdin and stdout are a terminal: the payload gets a pty
     * of its own instead (see child_make_pty), as its 0 and 1 (and 2 with
     * pty_err); init's own 0-2 are /dev/null meanwhile. */
    bool want_pty, pty_err;
    int pty_slave;
};

/* AGENTJAIL_UNSAFE_SKIP_LAYER=seccomp|landlock: leave one layer out, so
 * that the tests can show `agentjail verify` notices. Never for production:
 * it is loud on stderr, in the result's layers and in a warning event. */
enum {
    AJ_SKIP_SECCOMP = 1u << 0,
    AJ_SKIP_LANDLOCK = 1u << 1,
};

/* init: pid 1 of the sandbox's namespaces. Never returns. */
__attribute__((noreturn)) void aj_child_init_main(struct aj_child_ctx *c);
/* A template's child, already in the sandbox's namespaces and cgroup
 * (tmpl_child.c): every layer of the payload, as an exec'd payload gets
 * them, then READY; returns (into the template's interpreter) only when
 * all of it is applied, else reports on c->sock and exits. It keeps the
 * interpreter's signal handlers and closes, not just marks close-on-exec,
 * every other fd: no exec follows. */
void aj_child_adopted_payload(struct aj_child_ctx *c);
/* Blank this process's command line and environment (what
 * /proc/PID/cmdline and /proc/PID/environ show: the host command line,
 * the caller's environment) and name it name, there and in comm. */
void aj_child_scrub_cmdline(const char *name);
/* A degraded run's only sandbox process: the payload itself. */
__attribute__((noreturn)) void aj_child_degraded_main(struct aj_child_ctx *c);
/* The network namespace helper (see sandbox.c, spawn_netns_helper): with
 * userns_fd >= 0 join that user namespace, join netns_fd, make the relay's
 * listening socket on 127.0.0.1:port there and send it down relay_sock (or
 * the error). May share the supervisor's memory: system calls only. */
struct aj_child_netns_listen {
    int userns_fd, netns_fd, relay_sock;
    uint16_t port;
};
int aj_child_netns_listen_main(void *arg);
