/* SPDX-License-Identifier: Apache-2.0 */
/* Host paths the supervisor opens while, or after, a sandbox could write
 * to part of the host (a --bind-rw directory, or files its host uid owns):
 * the result and events files, bind sources, and the registry of writable
 * bind sources. A sandbox can plant symlinks (or real directories) there;
 * root must never follow one. See docs/security-model.md, "Host paths the
 * supervisor touches". */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aj_error.h"

/* The identity of a directory or file: device, inode and, where the
 * filesystem records it, the birth time (an inode number is reused once
 * its file is gone; the birth time tells the new file from the old). */
struct aj_devino {
    uint64_t dev, ino;
    int64_t btime_sec;   /* 0: the filesystem has no birth time */
    uint32_t btime_nsec;
};

/* Open path without following a symlink at any component (the last
 * included): openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), or,
 * where openat2 is missing (ENOSYS before 5.6), a walk with O_NOFOLLOW on
 * each component. A relative path starts at the cwd. flags are open(2)
 * flags (O_CLOEXEC and O_NOFOLLOW are added); mode is for O_CREAT.
 * Returns the fd or -errno (-ELOOP: a component is a symlink). No malloc:
 * also used on the sandbox side of clone(). */
int aj_open_nofollow(const char *path, int flags, mode_t mode);

/* The identity of an open fd (statx: the birth time where there is one). */
int aj_devino_of(int fd, struct aj_devino *ret);
bool aj_devino_same(const struct aj_devino *a, const struct aj_devino *b);

/* Split path into the directory holding its last component and that
 * component ("a/b/" names b in a; "b" names b in "."). -EINVAL for "/",
 * "." or ".." as the name, -ENAMETOOLONG where a part does not fit. */
int aj_hostpath_split(const char *path, char *dir, size_t dir_size, char *name, size_t name_size);

/* Open the directory holding path's last component (O_PATH, no symlink
 * followed) and copy that component to name. what names the path in
 * errors ("--result"). */
int aj_hostpath_open_parent(const char *path, const char *what, char *name, size_t name_size,
                            struct aj_error *err);

/* Write a whole file as a new file (O_EXCL, mode) in path's directory
 * (resolved without following a symlink) renamed over path: nothing that
 * sits at path is opened or written through. */
int aj_hostpath_write_replace(const char *path, const char *what, const void *data, size_t len, mode_t mode,
                              struct aj_error *err);

/* Walk from dirfd up to the root through "..": the index in set of the
 * first directory on the way (dirfd itself included) that is one of set,
 * or -1. */
ssize_t aj_hostpath_find_ancestor(int dirfd, const struct aj_devino *set, size_t n);
/* The same, remembering across calls (one pass over many paths, the set
 * unchanged) the directories found to have no ancestor in the set: a
 * later walk that reaches one stops there. */
struct aj_devino_memo {
    size_t n;
    struct aj_devino id[64];
};
ssize_t aj_hostpath_find_ancestor_memo(int dirfd, const struct aj_devino *set, size_t n, struct aj_devino_memo *memo);

/* The supervisor's private state directory, created 0700 if missing and
 * refused if it is not a directory of ours that only we can write.
 * Returns an O_PATH fd; its path goes to path. */
int aj_state_dir_open(char *path, size_t path_size, struct aj_error *err);
