/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "aj_error.h"

/* Scope-bound ownership, as crun/systemd. Destructors accept "nothing". */
static inline void aj_freep(void *p)
{
    free(*(void **)p);
}
static inline void aj_closep(int *fd)
{
    /* No retry on EINTR: on Linux the fd is already gone (systemd's
     * close_nointr explains), a retry could close another thread's fd. */
    if (*fd >= 0)
        (void)close(*fd);
}
#define _cleanup_free_ __attribute__((cleanup(aj_freep)))
#define _cleanup_close_ __attribute__((cleanup(aj_closep)))

/* Hand an fd out of a _cleanup_close_ scope. */
#define TAKE_FD(fd)                                                                                \
    ({                                                                                             \
        int _fd_ = (fd);                                                                           \
        (fd) = -1;                                                                                 \
        _fd_;                                                                                      \
    })
#define TAKE_PTR(p)                                                                                \
    ({                                                                                             \
        __typeof__(p) _p_ = (p);                                                                   \
        (p) = NULL;                                                                                \
        _p_;                                                                                       \
    })

#define AJ_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A layer (enum aj_layer, an index) as a bit of the 64-bit masks the
 * layers and the run pass around inside the library; struct aj_result
 * keeps room for more (aj_result_has_layer). */
#define AJ_LAYER_BIT(l) (UINT64_C(1) << (l))

/* Async-signal-safe helpers (usable between clone and exec). */
int aj_write_all(int fd, const void *buf, size_t len);
/* Write a small file relative to dirfd (O_CLOEXEC|O_NOFOLLOW). */
int aj_write_file_at(int dirfd, const char *path, const char *content, size_t len, int flags,
                     mode_t mode, struct aj_error *err);
/* Create every missing directory of rel (relative, no "..") beneath rootfd
 * without following symlinks, and return an O_PATH fd on the last
 * component. If last_is_file, the last component is created as an empty
 * regular file (a mount point for a file bind). */
int aj_mkdir_beneath(int rootfd, const char *rel, bool last_is_file, struct aj_error *err);

/* Read a whole small file (e.g. /proc/sys value) into buf, NUL-terminated. */
int aj_read_small_file(const char *path, char *buf, size_t size);

/* A process's start time (field 22 of /proc/PID/stat, clock ticks since
 * boot): with the pid, who owns a run's leftovers (a cgroup, the egress
 * socket directory) across pid reuse. -ESRCH: no such process. */
int aj_proc_starttime(pid_t pid, unsigned long long *ret);
/* The inode of our pid namespace (0 if unknown): a pid means something
 * only there. */
unsigned long long aj_own_pidns(void);

/* 32 hex chars of fresh randomness (sandbox ids). */
int aj_random_hex(char *buf, size_t nbytes_hex);

uint64_t aj_now_ms(void);

/* A companion file of agentjail's (agentjail-egress, agentjail-probe,
 * agentjail-interp.so): $env when set, else NAME beside the running
 * binary; its absolute path in buf, checked with access(amode). The error
 * names the path and the variable. */
int aj_locate_companion(const char *env, const char *name, int amode, char *buf, size_t size,
                        struct aj_error *err);
