/* SPDX-License-Identifier: Apache-2.0 */
/* Template pools (docs/interpreters.md, "Templates"): one interpreter per
 * pool imports the preload once; every parked interpreter is a fork of it
 * that enters a sandbox made for it alone (the supervisor's ordinary path,
 * init in adopt mode) and applies every payload layer there.
 *
 * The supervisor's side is tmpl.c; the template's is tmpl_child.c, built
 * into agentjail-interp.so (beside the agentjail binaries, or
 * AGENTJAIL_INTERP_SO), which the template loads. They speak over one
 * SOCK_SEQPACKET socketpair, the template's fd 3:
 *
 *   supervisor → template  "I" sha256(64) skip(4, little-endian) policy-JSON
 *                           (fd 4: the .so, for the template to load)
 *   template → supervisor  "P" (ready: imported, warmed, frozen) or "E" + why
 *   supervisor → template  "S" struct aj_tmpl_spawn, decoy paths (NUL after each);
 *                           fds: sync socket, namespaces (AJ_ADOPT_NS_* order,
 *                           those in ns_mask), cgroup join files
 *
 * A spawn is answered on the sandbox's own sync socket (the child's
 * messages, as any payload's), not on this one. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentjail.h"

#define AJ_TMPL_MAGIC 0x4a41544du /* "MTAJ" */
#define AJ_TMPL_MAX_PATH 256
/* In the "I" message's flags beside AJ_SKIP_*: build the filter for a pid
 * namespace with vm.memfd_noexec=2 too (the supervisor's judgement: root
 * mode, Linux 6.3+; the template's /proc shows no sysctls). */
#define AJ_TMPL_MEMFD_FILTER (1u << 31)

struct aj_tmpl_spawn {
    uint32_t magic;
    uint32_t ns_mask;  /* AJ_ADOPT_NS_* bits: which namespace fds follow the socket */
    uint32_t n_cg;     /* cgroup join fds after the namespaces */
    uint32_t n_decoys; /* writable decoy paths after this header */
};

struct aj_tmpl;
struct aj_sandbox;

/* Whether a pool of pol uses a template: interpreter.template on, root or
 * rootless with cgroups of its own (the run's CPU and memory come from
 * them), and agentjail-interp.so found. why: the reason it does not
 * (for the pool's stats), or "". */
bool aj_tmpl_wanted(const struct aj_policy *pol, char *why, size_t why_size);
/* Start pol's template and wait (bounded, *cancel checked) until it has
 * imported the preload. Errors name interpreter.preload / .warmup / the
 * template. */
int aj_tmpl_start(const struct aj_policy *pol, const bool *cancel, struct aj_tmpl **ret, struct aj_error *err);
bool aj_tmpl_alive(struct aj_tmpl *t);
/* sb: prepared with c.adopt, its AJ_MSG_ADOPT taken. The template forks a
 * child into it; its progress comes on sb's sync socket. */
int aj_tmpl_spawn(struct aj_tmpl *t, struct aj_sandbox *sb, struct aj_error *err);
/* A template that died: whether nothing it forked is left (its sandbox's
 * group holds no process but that sandbox's init), so that freeing it
 * ends no run. False while it lives, or when that cannot be read. */
bool aj_tmpl_idle(struct aj_tmpl *t);
/* Kill and reap. NULL is fine. */
void aj_tmpl_free(struct aj_tmpl *t);
pid_t aj_tmpl_pid(const struct aj_tmpl *t);
