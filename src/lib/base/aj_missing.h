/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel constants and syscall wrappers that Debian 12's headers (6.1 uapi)
 * or glibc 2.36 lack. Each behind #ifndef so newer headers win. */
#pragma once

#include <linux/types.h>
#include <sys/types.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#ifndef __NR_fsopen
#define __NR_fsopen 430
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef __NR_openat2
#define __NR_openat2 437
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct aj_clone_args {
    __aligned_u64 flags;
    __aligned_u64 pidfd;
    __aligned_u64 child_tid;
    __aligned_u64 parent_tid;
    __aligned_u64 exit_signal;
    __aligned_u64 stack;
    __aligned_u64 stack_size;
    __aligned_u64 tls;
    __aligned_u64 set_tid;
    __aligned_u64 set_tid_size;
    __aligned_u64 cgroup;
};

/* madvise: prefault page tables (5.14) */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* open_tree / move_mount / mount_setattr (5.2, 5.12) */
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC 02000000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define AJ_MOUNT_ATTR_RDONLY 0x00000001
#define AJ_MOUNT_ATTR_NOSUID 0x00000002
#define AJ_MOUNT_ATTR_NODEV 0x00000004
#define AJ_MOUNT_ATTR_NOEXEC 0x00000008
#define AJ_MOUNT_ATTR_IDMAP 0x00100000 /* Linux 5.12 */
struct aj_mount_attr {
    __u64 attr_set;
    __u64 attr_clr;
    __u64 propagation;
    __u64 userns_fd;
};

/* openat2 (5.6) */
struct aj_open_how {
    __u64 flags;
    __u64 mode;
    __u64 resolve;
};
#ifndef RESOLVE_NO_XDEV
#define RESOLVE_NO_XDEV 0x01
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#define RESOLVE_IN_ROOT 0x10
#endif

/* Landlock, up to ABI 7 (6.15). Own struct names: the 6.1 header has only
 * the ABI 1 layout of landlock_ruleset_attr. */
struct aj_landlock_ruleset_attr {
    __u64 handled_access_fs;
    __u64 handled_access_net; /* ABI 4 */
    __u64 scoped;             /* ABI 6 */
};
struct aj_landlock_path_beneath_attr {
    __u64 allowed_access;
    __s32 parent_fd;
} __attribute__((packed));
#define AJ_LANDLOCK_RULE_PATH_BENEATH 1
#define AJ_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)

#define AJ_LL_FS_EXECUTE (1ULL << 0)
#define AJ_LL_FS_WRITE_FILE (1ULL << 1)
#define AJ_LL_FS_READ_FILE (1ULL << 2)
#define AJ_LL_FS_READ_DIR (1ULL << 3)
#define AJ_LL_FS_REMOVE_DIR (1ULL << 4)
#define AJ_LL_FS_REMOVE_FILE (1ULL << 5)
#define AJ_LL_FS_MAKE_CHAR (1ULL << 6)
#define AJ_LL_FS_MAKE_DIR (1ULL << 7)
#define AJ_LL_FS_MAKE_REG (1ULL << 8)
#define AJ_LL_FS_MAKE_SOCK (1ULL << 9)
#define AJ_LL_FS_MAKE_FIFO (1ULL << 10)
#define AJ_LL_FS_MAKE_BLOCK (1ULL << 11)
#define AJ_LL_FS_MAKE_SYM (1ULL << 12)
#define AJ_LL_FS_REFER (1ULL << 13)    /* ABI 2 */
#define AJ_LL_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#define AJ_LL_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define AJ_LL_NET_BIND_TCP (1ULL << 0)  /* ABI 4 */
#define AJ_LL_NET_CONNECT_TCP (1ULL << 1)
#define AJ_LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define AJ_LL_SCOPE_SIGNAL (1ULL << 1)

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
#define SECBIT_NO_SETUID_FIXUP (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS (1 << 4)
#define SECBIT_KEEP_CAPS_LOCKED (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

#ifndef KEYCTL_JOIN_SESSION_KEYRING
#define KEYCTL_JOIN_SESSION_KEYRING 1
#endif
#ifndef __NR_keyctl
#define __NR_keyctl 250
#endif

static inline int aj_sys_open_tree(int dfd, const char *path, unsigned int flags)
{
    return (int)syscall(__NR_open_tree, dfd, path, flags);
}
static inline int aj_sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to,
                                    unsigned int flags)
{
    return (int)syscall(__NR_move_mount, from_dfd, from, to_dfd, to, flags);
}
static inline int aj_sys_mount_setattr(int dfd, const char *path, unsigned int flags,
                                       struct aj_mount_attr *attr)
{
    return (int)syscall(__NR_mount_setattr, dfd, path, flags, attr, sizeof(*attr));
}
static inline int aj_sys_openat2(int dfd, const char *path, struct aj_open_how *how)
{
    return (int)syscall(__NR_openat2, dfd, path, how, sizeof(*how));
}
static inline int aj_sys_pidfd_send_signal(int pidfd, int sig)
{
    return (int)syscall(__NR_pidfd_send_signal, pidfd, sig, NULL, 0);
}
/* Credentials on the sandbox side, as raw system calls. glibc's wrappers
 * run its setxid broadcast: in a process it believes multithreaded they
 * signal every other thread and wait for each to follow. The sandbox side
 * is a raw clone of the supervisor, which may have threads (the pool's
 * filler, a server's workers): glibc's thread list is copied, the threads
 * are not, and the wrapper would wait forever. The child is single-threaded
 * in fact, so the per-thread kernel call is the whole job. */
static inline int aj_sys_setgroups_none(void)
{
    return (int)syscall(__NR_setgroups, 0, NULL);
}

static inline int aj_sys_setresgid(gid_t gid)
{
    return (int)syscall(__NR_setresgid, gid, gid, gid);
}

static inline int aj_sys_setresuid(uid_t uid)
{
    return (int)syscall(__NR_setresuid, uid, uid, uid);
}

static inline int aj_sys_close_range(unsigned int first, unsigned int last, unsigned int flags)
{
    return (int)syscall(__NR_close_range, first, last, flags);
}

/* fsopen / fsconfig / fsmount (5.2). glibc 2.36's <sys/mount.h> and
 * <linux/mount.h> clash, so own names. */
#ifndef __NR_fsconfig
#define __NR_fsconfig 431
#endif
#ifndef __NR_fsmount
#define __NR_fsmount 432
#endif
#define AJ_FSOPEN_CLOEXEC 0x00000001
#define AJ_FSMOUNT_CLOEXEC 0x00000001
#define AJ_FSCONFIG_SET_STRING 1
#define AJ_FSCONFIG_CMD_CREATE 6

static inline int aj_sys_fsopen(const char *fsname, unsigned int flags)
{
    return (int)syscall(__NR_fsopen, fsname, flags);
}
static inline int aj_sys_fsconfig(int fd, unsigned int cmd, const char *key, const void *value,
                                  int aux)
{
    return (int)syscall(__NR_fsconfig, fd, cmd, key, value, aux);
}
static inline int aj_sys_fsmount(int fd, unsigned int flags, unsigned int attr_flags)
{
    return (int)syscall(__NR_fsmount, fd, flags, attr_flags);
}
