/* SPDX-License-Identifier: Apache-2.0 */
/* Host paths the supervisor opens while, or after, a sandbox could write
 * to part of the host. Everything here resolves a path once, refusing a
 * symlink at every component, and then works on the fd. */
#include "aj_hostpath.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"

#define AJ_STATE_DIR_ROOT "/run/agentjail"

/* Tests force the fallback (crun's tests/no_openat2 does the same). The
 * fallback is as strict as openat2, so forcing it weakens nothing. */
static bool no_openat2(void)
{
    const char *v = getenv("AGENTJAIL_TEST_NO_OPENAT2");
    return v && v[0] == '1';
}

/* openat2 is missing (ENOSYS before 5.6; also what a seccomp profile of
 * an old container runtime answers): one component at a time, each opened
 * with O_NOFOLLOW and checked not to be a symlink on the fd. */
static int open_walk(const char *path, int flags, mode_t mode)
{
    char comp[256];
    const char *p = path;
    int cur = AT_FDCWD, fd;

    if (*p == '/') {
        cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
            return -errno;
        while (*p == '/')
            p++;
    }
    for (;;) {
        size_t n = strcspn(p, "/");
        const char *next = p + n;
        struct stat st;
        bool last;

        while (*next == '/')
            next++;
        last = *next == '\0';
        if (n == 0) { /* "/" or "dir/": the directory itself */
            fd = cur == AT_FDCWD ? open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)
                                 : fcntl(cur, F_DUPFD_CLOEXEC, 3);
            if (cur >= 0)
                (void)close(cur);
            if (fd < 0)
                return -errno;
            if (flags & O_PATH)
                return fd;
            cur = fd;
            fd = openat(cur, ".", flags | O_CLOEXEC, mode);
            (void)close(cur);
            return fd < 0 ? -errno : fd;
        }
        if (n >= sizeof(comp)) {
            if (cur >= 0)
                (void)close(cur);
            return -ENAMETOOLONG;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        if (last)
            fd = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
        else
            fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (cur >= 0)
                (void)close(cur);
            return -e;
        }
        if (cur >= 0)
            (void)close(cur);
        /* O_PATH | O_NOFOLLOW opens a symlink itself: refuse it here. */
        if (fstat(fd, &st) < 0) {
            int e = errno;
            (void)close(fd);
            return -e;
        }
        if (S_ISLNK(st.st_mode) || (!last && !S_ISDIR(st.st_mode))) {
            (void)close(fd);
            return S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;
        }
        if (last)
            return fd;
        cur = fd;
        p = next;
    }
}

int aj_open_nofollow(const char *path, int flags, mode_t mode)
{
    struct aj_open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
        .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
        .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    int fd;

    if (!path || !*path)
        return -ENOENT;
    /* O_PATH | O_DIRECTORY on a trailing symlink fails with ENOTDIR; open
     * without O_DIRECTORY and check the type on the fd, so a symlink is
     * reported as one (ELOOP). */
    bool want_dir = (flags & O_PATH) && (flags & O_DIRECTORY);

    if (want_dir) {
        flags &= ~O_DIRECTORY;
        how.flags &= ~(uint64_t)O_DIRECTORY;
    }
    fd = -ENOSYS;
    if (!no_openat2()) {
        fd = aj_sys_openat2(AT_FDCWD, path, &how);
        if (fd < 0)
            fd = -errno;
    }
    if (fd == -ENOSYS)
        fd = open_walk(path, flags, mode);
    /* O_PATH | O_NOFOLLOW opens a trailing symlink itself (openat2 too,
     * RESOLVE_NO_SYMLINKS notwithstanding): refuse it. */
    if (fd >= 0 && (flags & O_PATH)) {
        struct stat st;
        if (fstat(fd, &st) < 0 || S_ISLNK(st.st_mode)) {
            (void)close(fd);
            return -ELOOP;
        }
        if (want_dir && !S_ISDIR(st.st_mode)) {
            (void)close(fd);
            return -ENOTDIR;
        }
    }
    return fd;
}

int aj_devino_of(int fd, struct aj_devino *ret)
{
    struct statx stx;

    memset(ret, 0, sizeof(*ret));
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_INO | STATX_BTIME, &stx) == 0) {
        ret->dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
        ret->ino = stx.stx_ino;
        if (stx.stx_mask & STATX_BTIME) {
            ret->btime_sec = stx.stx_btime.tv_sec;
            ret->btime_nsec = stx.stx_btime.tv_nsec;
        }
        return 0;
    }
    {
        struct stat st;
        if (fstat(fd, &st) < 0)
            return -errno;
        ret->dev = st.st_dev;
        ret->ino = st.st_ino;
    }
    return 0;
}

bool aj_devino_same(const struct aj_devino *a, const struct aj_devino *b)
{
    if (a->dev != b->dev || a->ino != b->ino)
        return false;
    /* Both know their birth: a reused inode number is another file. */
    if (a->btime_sec && b->btime_sec)
        return a->btime_sec == b->btime_sec && a->btime_nsec == b->btime_nsec;
    return true;
}

int aj_hostpath_split(const char *path, char *dir, size_t dir_size, char *name, size_t name_size)
{
    const char *slash;
    size_t dlen;

    if (!path || !*path)
        return -EINVAL;
    if (strlen(path) >= dir_size)
        return -ENAMETOOLONG;
    snprintf(dir, dir_size, "%s", path);
    /* "a/b/" names b: drop trailing slashes, which keep the name a directory. */
    dlen = strlen(dir);
    while (dlen > 1 && dir[dlen - 1] == '/')
        dir[--dlen] = '\0';
    slash = strrchr(dir, '/');
    if (!slash) {
        if (strlen(dir) >= name_size)
            return -ENAMETOOLONG;
        snprintf(name, name_size, "%s", dir);
        snprintf(dir, dir_size, ".");
    } else {
        if (!slash[1])
            return -EINVAL; /* "/" */
        if (strlen(slash + 1) >= name_size)
            return -ENAMETOOLONG;
        snprintf(name, name_size, "%s", slash + 1);
        dir[slash == dir ? 1 : (size_t)(slash - dir)] = '\0';
    }
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return -EINVAL;
    return 0;
}

int aj_hostpath_open_parent(const char *path, const char *what, char *name, size_t name_size,
                            struct aj_error *err)
{
    char dir[4096];
    int fd, r;

    if (!path || !*path)
        return aj_err(err, EINVAL, "%s: empty path", what);
    r = aj_hostpath_split(path, dir, sizeof(dir), name, name_size);
    if (r == -ENAMETOOLONG)
        return aj_err(err, ENAMETOOLONG, "%s %s", what, path);
    if (r < 0)
        return aj_err(err, EINVAL, "%s %s: not a file name", what, path);
    fd = aj_open_nofollow(dir, O_PATH | O_DIRECTORY, 0);
    if (fd == -ELOOP)
        return aj_err(err, ELOOP,
                      "%s %s: a directory on the way is a symlink; agentjail writes here as %s and never follows "
                      "a link a sandbox could have planted: pass the real path (realpath %s)",
                      what, path, geteuid() == 0 ? "root" : "you", dir);
    if (fd < 0)
        return aj_err(err, -fd, "%s %s: open directory %s", what, path, dir);
    return fd;
}

int aj_hostpath_write_replace(const char *path, const char *what, const void *data, size_t len, mode_t mode,
                              struct aj_error *err)
{
    _cleanup_close_ int dfd = -1, fd = -1;
    char name[256], tmp[300], rnd[17];
    int r;

    dfd = aj_hostpath_open_parent(path, what, name, sizeof(name), err);
    if (dfd < 0)
        return dfd;
    if (aj_random_hex(rnd, 16) < 0)
        return aj_err(err, EIO, "random name for %s %s", what, path);
    snprintf(tmp, sizeof(tmp), ".%.200s.%s.tmp", name, rnd);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, mode);
    if (fd < 0)
        return aj_err(err, errno, "create %s %s (as %s)", what, path, tmp);
    r = aj_write_all(fd, data, len);
    if (r == 0 && close(TAKE_FD(fd)) < 0)
        r = -errno;
    if (r < 0) {
        (void)unlinkat(dfd, tmp, 0);
        return aj_err(err, -r, "write %s %s", what, path);
    }
    /* Only a regular file (or nothing) is replaced: a symlink, device or
     * FIFO at the name is the operator's (/dev/stdout) or was planted, and
     * is neither written through nor destroyed. */
    {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
            (void)unlinkat(dfd, tmp, 0);
            return aj_err(err, EEXIST,
                          "%s %s exists and is not a regular file (a symlink, device or FIFO is neither "
                          "followed nor replaced)",
                          what, path);
        }
    }
    if (renameat(dfd, tmp, dfd, name) < 0) {
        int e = errno;
        (void)unlinkat(dfd, tmp, 0);
        return aj_err(err, e, "write %s %s (rename)", what, path);
    }
    return 0;
}

static bool memo_has(const struct aj_devino_memo *m, const struct aj_devino *id)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (m->id[i].dev == id->dev && m->id[i].ino == id->ino)
            return true;
    return false;
}

ssize_t aj_hostpath_find_ancestor_memo(int dirfd, const struct aj_devino *set, size_t n, struct aj_devino_memo *memo)
{
    _cleanup_close_ int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    struct aj_devino id, up, seen[64];
    size_t n_seen = 0;

    if (cur < 0 || n == 0)
        return -1;
    if (aj_devino_of(cur, &id) < 0)
        return -1;
    for (int depth = 0; depth < 4096; depth++) {
        int parent;
        for (size_t i = 0; i < n; i++)
            if (aj_devino_same(&id, &set[i]))
                return (ssize_t)i;
        if (memo_has(memo, &id))
            break; /* walked before, nothing of the set above it */
        if (n_seen < AJ_ARRAY_SIZE(seen))
            seen[n_seen++] = id;
        parent = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (parent < 0)
            return -1;
        (void)close(cur);
        cur = parent;
        if (aj_devino_of(cur, &up) < 0)
            return -1;
        if (up.dev == id.dev && up.ino == id.ino)
            break; /* "/" is its own parent */
        id = up;
    }
    /* Nothing of the set from here up: remembered (a full memo keeps what
     * it has; a walk cut short at 4096 levels remembers what it saw). */
    for (size_t i = 0; memo && i < n_seen; i++)
        if (memo->n < AJ_ARRAY_SIZE(memo->id) && !memo_has(memo, &seen[i]))
            memo->id[memo->n++] = seen[i];
    return -1;
}

ssize_t aj_hostpath_find_ancestor(int dirfd, const struct aj_devino *set, size_t n)
{
    return aj_hostpath_find_ancestor_memo(dirfd, set, n, NULL);
}

/* ---- state directory ------------------------------------------------------- */

/* mkdir -p of an absolute path, no symlink followed, each new dir 0700. */
static int mkdir_nofollow(const char *path, struct aj_error *err)
{
    char buf[4096];
    size_t len = strlen(path);

    if (len >= sizeof(buf))
        return aj_err(err, ENAMETOOLONG, "%s", path);
    memcpy(buf, path, len + 1);
    for (char *s = buf + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(buf, 0700) < 0 && errno != EEXIST)
                return aj_err(err, errno, "create %s", buf);
            *s = c;
            if (c == '\0')
                break;
        }
    }
    return 0;
}

int aj_state_dir_open(char *path, size_t path_size, struct aj_error *err)
{
    _cleanup_close_ int fd = -1;
    uid_t me = geteuid();
    struct stat st;
    int r;

    if (me == 0) {
        snprintf(path, path_size, "%s", AJ_STATE_DIR_ROOT);
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
        int n;
        if (xdg && xdg[0] == '/')
            n = snprintf(path, path_size, "%s/agentjail", xdg);
        else if (home && home[0] == '/')
            n = snprintf(path, path_size, "%s/.local/state/agentjail", home);
        else
            return aj_err(err, 0, "no state directory for agentjail: set XDG_RUNTIME_DIR or HOME");
        if (n < 0 || (size_t)n >= path_size)
            return aj_err(err, ENAMETOOLONG, "state directory");
    }
    r = mkdir_nofollow(path, err);
    if (r < 0)
        return me == 0 ? r
                       : aj_err_prefix(err, r, "state directory %s (set XDG_RUNTIME_DIR or HOME to a directory "
                                       "of yours)", path);
    fd = aj_open_nofollow(path, O_PATH | O_DIRECTORY, 0);
    if (fd < 0)
        return aj_err(err, -fd, "open state directory %s%s", path,
                      fd == -ELOOP ? " (a component is a symlink: refused)" : "");
    if (fstat(fd, &st) < 0)
        return aj_err(err, errno, "stat %s", path);
    /* Ours alone: a directory someone else can write could hand us a
     * registry that lets a planted bind source through. */
    if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 022))
        return aj_err(err, 0,
                      "state directory %s must be a directory owned by uid %u and writable by it alone "
                      "(it is uid %u, mode %04o); remove it and agentjail recreates it",
                      path, (unsigned)me, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    return TAKE_FD(fd);
}
