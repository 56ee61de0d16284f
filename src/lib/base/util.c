/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "aj_missing.h"

int aj_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int aj_write_file_at(int dirfd, const char *path, const char *content, size_t len, int flags,
                     mode_t mode, struct aj_error *err)
{
    _cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | flags, mode);
    int r;

    if (fd < 0)
        return aj_err(err, errno, "open %s", path);
    r = aj_write_all(fd, content, len);
    if (r < 0)
        return aj_err(err, -r, "write %s", path);
    return 0;
}

int aj_mkdir_beneath(int rootfd, const char *rel, bool last_is_file, struct aj_error *err)
{
    char comp[4096];
    const char *p = rel;
    _cleanup_close_ int dirfd = -1;
    int cur = rootfd;

    while (*p == '/')
        p++;
    if (*p == '\0') {
        int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        return fd < 0 ? aj_err(err, errno, "dup root fd") : fd;
    }
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        bool last;
        struct aj_open_how how = {
            .flags = O_PATH | O_CLOEXEC,
            /* The tree may already hold a rw bind of a host dir an earlier
             * run could write to: a planted symlink must not steer a mount
             * point outside the new root. */
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        int fd;

        if (n >= sizeof(comp))
            return aj_err(err, ENAMETOOLONG, "path %s", rel);
        memcpy(comp, p, n);
        comp[n] = '\0';
        p += n;
        while (*p == '/')
            p++;
        last = *p == '\0';
        if (n == 0 || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0)
            return aj_err(err, EINVAL, "path component '%s' in %s", comp, rel);

        if (last && last_is_file) {
            /* mknodat, not open(O_CREAT): nothing that already exists is
             * opened (a FIFO planted in a writable bind would block the
             * set-up forever; a host file would be opened for writing). */
            if (mknodat(cur, comp, S_IFREG | 0444, 0) < 0 && errno != EEXIST && errno != EACCES &&
                errno != EROFS)
                return aj_err(err, errno, "create mount point %s", rel);
        } else if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
            return aj_err(err, errno, "mkdir %s (in %s)", comp, rel);
        }
        fd = aj_sys_openat2(cur, comp, &how);
        if (fd < 0)
            return aj_err(err, errno, "open %s (in %s)", comp, rel);
        if (dirfd >= 0)
            (void)close(dirfd);
        dirfd = fd;
        cur = dirfd;
        if (last)
            return TAKE_FD(dirfd);
    }
}

int aj_read_small_file(const char *path, char *buf, size_t size)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    size_t off = 0;

    if (size == 0)
        return -EINVAL;
    if (fd < 0)
        return -errno;
    while (off + 1 < size) {
        ssize_t n = read(fd, buf + off, size - 1 - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        off += (size_t)n;
    }
    buf[off] = '\0';
    return (int)off;
}

int aj_proc_starttime(pid_t pid, unsigned long long *ret)
{
    char path[64], buf[1024];
    const char *p;
    int field = 2;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (aj_read_small_file(path, buf, sizeof(buf)) <= 0)
        return -ESRCH;
    p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (!p)
        return -EINVAL;
    for (p++; *p; p++)
        if (*p == ' ' && ++field == 22) {
            *ret = strtoull(p + 1, NULL, 10);
            return 0;
        }
    return -EINVAL;
}

unsigned long long aj_own_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

int aj_random_hex(char *buf, size_t nhex)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    size_t nraw = (nhex + 1) / 2;

    if (nraw > sizeof(raw))
        return -EINVAL;
    if (getrandom(raw, nraw, 0) != (ssize_t)nraw)
        return -errno;
    for (size_t i = 0; i < nhex; i++)
        buf[i] = hex[(raw[i / 2] >> ((i % 2) ? 0 : 4)) & 0xf];
    buf[nhex] = '\0';
    return 0;
}

int aj_locate_companion(const char *env, const char *name, int amode, char *buf, size_t size,
                        struct aj_error *err)
{
    const char *v = getenv(env);
    char self[4096];
    ssize_t n;

    if (v && *v) {
        if (snprintf(buf, size, "%s", v) >= (int)size)
            return aj_err(err, ENAMETOOLONG, "%s", env);
    } else {
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0)
            return aj_err(err, errno, "find the agentjail binary");
        self[n] = '\0';
        if (snprintf(buf, size, "%s/%s", dirname(self), name) >= (int)size)
            return aj_err(err, ENAMETOOLONG, "%s path", name);
    }
    errno = 0;
    if (buf[0] != '/' || access(buf, amode) < 0)
        return aj_err(err, errno ? errno : ENOENT, "%s at %s (installed beside agentjail; set %s to its absolute path)",
                      name, buf, env);
    return 0;
}

uint64_t aj_now_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
