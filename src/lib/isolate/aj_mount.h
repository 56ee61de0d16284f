/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aj_error.h"
#include "aj_bindreg.h"
#include "aj_hostpath.h"
#include "aj_policy_model.h"

enum aj_mnt_kind {
    AJ_MNT_BIND,    /* host path, cloned with open_tree before the root is built */
    AJ_MNT_SYMLINK, /* replicate a host symlink (merged-/usr /bin -> usr/bin) */
    AJ_MNT_TMPFS,
    AJ_MNT_FILE,    /* generated content (/etc/passwd, ...) */
    AJ_MNT_DEV,     /* bind of one host device node (keeps nodev off) */
};

struct aj_mnt_entry {
    enum aj_mnt_kind kind;
    char *src;     /* BIND/DEV: absolute host path; SYMLINK: link target */
    char *dst;     /* absolute sandbox path */
    char *content; /* FILE */
    size_t content_len;
    uint64_t size; /* TMPFS */
    const char *mode; /* TMPFS: octal mode string (static), NULL for 1777 */
    bool rw;
    bool noexec;
    bool optional; /* a missing host path is skipped, not an error */
    /* BIND/DEV: what the supervisor resolved (aj_mount_plan_resolve); the
     * sandbox side binds only an object with this identity. */
    struct aj_devino id;
    bool absent;   /* optional and missing: skipped */
    bool scratch;  /* TMPFS: the default /tmp, sized like /dev/shm (shm_size) */
    /* Writable binds (supervisor side): the source as resolved (O_PATH,
     * until aj_mount_plan_drop_hostfds), the owner the policy set, and
     * the id-mapped detached tree made from it (aj_mount_parent_idmap),
     * which the sandbox side attaches instead of cloning the source. */
    int hostfd;
    int idmap_fd;
    bool owner_set;
    uint32_t owner_uid, owner_gid;
};

/* Everything the sandbox side needs, prepared by the supervisor (malloc is
 * allowed there), so the child only makes syscalls. */
struct aj_mount_plan {
    struct aj_mnt_entry *entries;
    size_t n;
    int *src_fds; /* child-side scratch: one slot per entry */
    uint64_t shm_size; /* /dev/shm, and /tmp unless --tmpfs lists it */
};

int aj_mount_plan_build(const struct aj_policy *pol, struct aj_mount_plan *ret, struct aj_error *err);

/* Whether PATH is one of the host /etc entries every sandbox gets
 * read-only (the allow-list in mount.c). */
bool aj_mount_is_host_etc(const char *path);
void aj_mount_plan_clear(struct aj_mount_plan *plan);
/* The size of /dev/shm and of the default /tmp (policy tmp_size "auto":
 * known only once the memory cgroup is; see aj_policy_tmp_size). */
void aj_mount_plan_set_scratch_size(struct aj_mount_plan *plan, uint64_t size);
/* Entries added after the plan is built are set up last, in order. */
int aj_mount_plan_add_tmpfs(struct aj_mount_plan *plan, const char *dst, uint64_t size, const char *mode,
                            struct aj_error *err);
int aj_mount_plan_add_file(struct aj_mount_plan *plan, const char *dst, const char *content, struct aj_error *err);

/* Supervisor side: refuse a bind source with a kernel filesystem (proc,
 * sysfs, cgroup, devtmpfs...) mounted somewhere inside it. */
int aj_mount_check_bind_submounts(const struct aj_policy *pol, struct aj_error *err);

/* Supervisor side, before the clone: resolve every bind source once
 * without following a symlink (a sandbox with a writable bind could have
 * planted one), check what it is on the fd, and record its identity for
 * the sandbox side. Unless pol->allow_bind_inside_writable, also refuse a
 * source inside a directory in reg (bound writable by this or an earlier
 * run) or, with run_uid_count > 0 (root mode), made by a sandbox (owned by
 * a host uid of [run_uid_base, run_uid_base + run_uid_count)). A refusal
 * sets err->exit_hint to 2. */
int aj_mount_plan_resolve(struct aj_mount_plan *plan, const struct aj_policy *pol, const struct aj_bindreg *reg,
                          uint32_t run_uid_base, uint32_t run_uid_count, struct aj_error *err);

/* Supervisor side (root, the host's mount namespace), after
 * aj_mount_plan_resolve: make e's id-mapped detached tree from its
 * resolved source: a recursive clone (open_tree) with MOUNT_ATTR_IDMAP
 * through userns_fd (whose map takes the workspace owner to the run's
 * host uid), nosuid and nodev. MOUNT_ATTR_IDMAP needs CAP_SYS_ADMIN in
 * the filesystem's user namespace, so the sandbox cannot make it itself.
 * Returns -EOPNOTSUPP when the kernel or a filesystem in the tree has no
 * id-mapped mounts, or agentjail lacks CAP_SYS_ADMIN over the host's
 * mounts (a container); err says which. */
int aj_mount_parent_idmap(struct aj_mnt_entry *e, int userns_fd, struct aj_error *err);
/* Close the resolved sources (before the clone: the sandbox gets none). */
void aj_mount_plan_drop_hostfds(struct aj_mount_plan *plan);
/* Close the supervisor's copies of the id-mapped trees (after the clone). */
void aj_mount_plan_close_idmaps(struct aj_mount_plan *plan);

/* Sandbox side (pid 1 of the new pid namespace, in the new mount and user
 * namespaces, capabilities held): build the root and pivot into it. */
int aj_mount_child_setup(const struct aj_mount_plan *plan, const struct aj_policy *pol,
                         struct aj_error *err);
