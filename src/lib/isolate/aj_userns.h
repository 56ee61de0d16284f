/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "aj_error.h"
#include "aj_policy_model.h"

/* Root mode: a host uid/gid of its own for this run, from the policy's
 * range, held (an OFD lock on the byte at offset uid of /run/agentjail/uids.lock) until
 * released. Two live sandboxes never share a host uid, so one cannot
 * signal, ptrace or read the files of another even if both escaped their
 * namespaces. */
struct aj_uid_lease {
    int lock_fd;
    uid_t host_uid;
    gid_t host_gid;
};

int aj_userns_lease_host_id(const struct aj_policy *pol, struct aj_uid_lease *ret,
                            struct aj_error *err);
void aj_userns_lease_release(struct aj_uid_lease *lease);

/* Supervisor side: write the child's uid/gid maps (one line each: inside id
 * -> host id). Rootless: setgroups is denied first (CVE-2014-8989: an
 * unprivileged map writer must not be able to drop supplementary groups
 * that deny it access). */
int aj_userns_parent_write_maps(pid_t child, uid_t inside_uid, gid_t inside_gid, uid_t host_uid,
                                gid_t host_gid, bool rootless, struct aj_error *err);

/* Supervisor side, root: a user namespace mapping disk_uid/disk_gid (the
 * owner of a workspace) to host_uid/host_gid (the run's), one id each,
 * for an id-mapped mount (aj_mount_parent_idmap). Returns its fd. */
int aj_userns_parent_idmap_ns(uid_t disk_uid, gid_t disk_gid, uid_t host_uid, gid_t host_gid,
                              struct aj_error *err);

/* Sandbox side, after the maps exist: drop the host's supplementary groups
 * (root mode) and switch to the inside ids, keeping capabilities for the
 * rest of the setup. */
int aj_userns_child_become(uid_t uid, gid_t gid, bool rootless, struct aj_error *err);

/* Sandbox side: set every max_*_namespaces of the sandbox's user namespace
 * to 0, a second layer under seccomp (even a filter bypass cannot create a
 * user namespace to regain capabilities, or any other namespace). In two
 * steps: open the files while the host's /proc is still mounted (they
 * resolve to the opener's user namespace), write after the root is built
 * (open_tree clones count as mount namespaces). Entries a kernel lacks are
 * skipped (fd -1). */
#define AJ_USERNS_NS_KINDS 8
int aj_userns_child_nesting_open(int fds[AJ_USERNS_NS_KINDS], struct aj_error *err);
int aj_userns_child_nesting_forbid(int fds[AJ_USERNS_NS_KINDS], struct aj_error *err);

/* After clone(CLONE_NEWUSER) failed with errnum: fill err with the exact
 * cause on this host and the fix. */
int aj_userns_explain_failure(int errnum, struct aj_error *err);
