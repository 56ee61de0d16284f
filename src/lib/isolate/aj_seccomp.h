/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <linux/filter.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stddef.h>

#include "aj_error.h"
#include "aj_policy_model.h"

/* A compiled filter: built once in the supervisor with libseccomp, loaded
 * in the sandbox with one seccomp(2) call (no malloc after clone). */
struct aj_bpf {
    struct sock_filter *insns;
    size_t len;
    bool owned;  /* insns was malloc'd (compiled now), not the built-in program */
    bool notify; /* escape-indicative calls go to a listener (SECCOMP_RET_USER_NOTIF) */
};

/* The filter for pol: the program compiled into agentjail at build time
 * when pol uses the default filter, else compiled now. */
AJ_EXPORT int aj_seccomp_build(const struct aj_policy *pol, bool notify, struct aj_bpf *ret,
                               struct aj_error *err);
/* Compile with libseccomp now (build-time generator, tests, degraded runs:
 * without a network namespace, socket() is refused altogether). */
AJ_EXPORT int aj_seccomp_compile(const struct aj_policy *pol, bool notify, bool degraded, struct aj_bpf *ret,
                                 struct aj_error *err);
/* memfd_sealed: the sandbox's pid namespace has vm.memfd_noexec=2 (plain
 * memfd_create calls get a sealed, non-executable memfd from the kernel),
 * so memfd_create without flags is allowed; MFD_EXEC stays refused. */
AJ_EXPORT int aj_seccomp_compile_ex(const struct aj_policy *pol, bool notify, bool degraded, bool memfd_sealed,
                                    struct aj_bpf *ret, struct aj_error *err);
/* aj_seccomp_build's program for a sandbox whose pid namespace has
 * vm.memfd_noexec=2. */
AJ_EXPORT int aj_seccomp_build_memfd_sealed(const struct aj_policy *pol, bool notify, struct aj_bpf *ret,
                                            struct aj_error *err);
AJ_EXPORT void aj_seccomp_clear(struct aj_bpf *bpf);
/* network "proxy": the relay's own filter (seccomp_relay.c). */
int aj_seccomp_compile_relay(struct aj_bpf *ret, struct aj_error *err);
/* A libseccomp context's program into ret (owned). */
int aj_seccomp_export(scmp_filter_ctx ctx, struct aj_bpf *ret, struct aj_error *err);
/* Sandbox side: needs no_new_privs set already. Returns the listener fd
 * for a notify filter, 0 otherwise, or -errno. */
int aj_seccomp_child_load(const struct aj_bpf *bpf, struct aj_error *err);

/* Names of syscalls the filter refuses with EPERM on purpose (escape
 * indicative); NULL-terminated. Exposed for docs and tests. */
AJ_EXPORT extern const char *const aj_seccomp_denied_syscalls[];
/* Netlink protocols refused with an event. */
AJ_EXPORT extern const int aj_seccomp_denied_netlink[];
AJ_EXPORT extern const size_t aj_seccomp_denied_netlink_count;
/* The highest address family the filter knows (AF_MCTP, 5.15). */
#define AJ_AF_LAST 45
