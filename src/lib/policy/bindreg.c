/* SPDX-License-Identifier: Apache-2.0 */
/* The run's writable bind sources and the registry of every directory ever
 * bound writable: what a later run must not bind from, and where the
 * supervisor must not write its own files. Paths are resolved with
 * aj_open_nofollow (base/hostpath.c) and then used through the fd. */
#include "aj_bindreg.h"
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

#define AJ_BINDREG_FILE "writable-binds"
/* A registry larger than this is not read whole: refuse rather than trust
 * a cut list. Entries are ~100 bytes. */
#define AJ_BINDREG_MAX (4u << 20)
/* Past this size the registry is rewritten with the live entries only. */
#define AJ_BINDREG_COMPACT_AT (256u << 10)

int aj_hostpath_writable_binds(const struct aj_policy *pol, struct aj_devino **ret, size_t *ret_n)
{
    struct aj_devino *v = calloc(pol->n_binds ? pol->n_binds : 1, sizeof(*v));
    size_t n = 0;

    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < pol->n_binds; i++) {
        _cleanup_close_ int fd = -1;
        if (!pol->binds[i].rw)
            continue;
        fd = aj_open_nofollow(pol->binds[i].host, O_PATH, 0);
        if (fd >= 0 && aj_devino_of(fd, &v[n]) == 0)
            n++;
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

int aj_hostpath_check_outside_writable(const struct aj_policy *pol, int dirfd, const char *path,
                                       const char *what, struct aj_error *err)
{
    _cleanup_free_ struct aj_devino *set = NULL;
    size_t n = 0;
    ssize_t hit;

    if (aj_hostpath_writable_binds(pol, &set, &n) < 0)
        return aj_err(err, ENOMEM, "%s", what);
    hit = aj_hostpath_find_ancestor(dirfd, set, n);
    if (hit < 0)
        return 0;
    /* set holds the rw binds in policy order: find the hit's bind. */
    for (size_t i = 0, k = 0; i < pol->n_binds; i++) {
        if (!pol->binds[i].rw)
            continue;
        {
            _cleanup_close_ int fd = aj_open_nofollow(pol->binds[i].host, O_PATH, 0);
            struct aj_devino id;
            if (fd < 0 || aj_devino_of(fd, &id) < 0)
                continue;
            if ((size_t)hit == k++) {
                aj_err(err, 0,
                       "%s %s lies inside --bind-rw %s (the sandbox's %s), which the sandbox can write: it could "
                       "replace or rewrite the file; write it outside every writable bind",
                       what, path, pol->binds[i].host, pol->binds[i].sandbox);
                err->exit_hint = 2;
                return -EINVAL;
            }
        }
    }
    aj_err(err, 0, "%s %s lies inside a writable bind of the run; write it outside every writable bind", what,
           path);
    err->exit_hint = 2;
    return -EINVAL;
}

/* ---- registry -------------------------------------------------------------- */

void aj_bindreg_clear(struct aj_bindreg *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n; i++)
        free(reg->path[i]);
    free(reg->path);
    free(reg->id);
    reg->path = NULL;
    reg->id = NULL;
    reg->n = 0;
}

static int reg_push(struct aj_bindreg *reg, const struct aj_devino *id, const char *path)
{
    struct aj_devino *ni;
    char **np, *p = strdup(path);

    if (!p)
        return -ENOMEM;
    ni = realloc(reg->id, (reg->n + 1) * sizeof(*ni));
    if (!ni) {
        free(p);
        return -ENOMEM;
    }
    reg->id = ni;
    np = realloc(reg->path, (reg->n + 1) * sizeof(*np));
    if (!np) {
        free(p);
        return -ENOMEM;
    }
    reg->path = np;
    reg->id[reg->n] = *id;
    reg->path[reg->n++] = p;
    return 0;
}

/* One line: "dev ino btime_sec btime_nsec path\n"; the path (for
 * messages) is the rest of the line. Malformed lines are skipped. */
static int reg_parse(struct aj_bindreg *reg, char *buf)
{
    char *line = buf, *nl;

    for (; (nl = strchr(line, '\n')); line = nl + 1) {
        struct aj_devino id = {0};
        unsigned long long dev, ino, bns;
        long long bs;
        char *p = line, *end;
        int r;

        *nl = '\0';
        errno = 0;
        dev = strtoull(p, &end, 10);
        if (end == p || *end != ' ')
            continue;
        ino = strtoull(p = end + 1, &end, 10);
        if (end == p || *end != ' ')
            continue;
        bs = strtoll(p = end + 1, &end, 10);
        if (end == p || *end != ' ')
            continue;
        bns = strtoull(p = end + 1, &end, 10);
        if (end == p || *end != ' ' || errno)
            continue;
        id.dev = dev;
        id.ino = ino;
        id.btime_sec = bs;
        id.btime_nsec = (uint32_t)bns;
        r = reg_push(reg, &id, end + 1);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Does the entry's path still lead (no symlink followed) to that object? */
static bool reg_entry_live(const struct aj_devino *id, const char *path)
{
    _cleanup_close_ int fd = aj_open_nofollow(path, O_PATH, 0);
    struct aj_devino now;

    return fd >= 0 && aj_devino_of(fd, &now) == 0 && aj_devino_same(&now, id);
}

static int reg_format(char *line, size_t size, const struct aj_devino *id, const char *path)
{
    int n = snprintf(line, size, "%" PRIu64 " %" PRIu64 " %" PRId64 " %" PRIu32 " %s\n", id->dev, id->ino,
                     id->btime_sec, id->btime_nsec, path);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

/* Open the registry and lock it. A compaction by another run renames a
 * new file over the name while we wait for the lock on the old one: then
 * the name is another inode, and we start again. */
static int reg_open_locked(int dfd, const char *dir, struct stat *ret_st, struct aj_error *err)
{
    for (int tries = 0; tries < 20; tries++) {
        _cleanup_close_ int fd = openat(dfd, AJ_BINDREG_FILE,
                                        O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
        struct stat now;

        if (fd < 0)
            return aj_err(err, errno, "open %s/%s", dir, AJ_BINDREG_FILE);
        /* flock is released with the fd, also when the supervisor is killed. */
        while (flock(fd, LOCK_EX) < 0)
            if (errno != EINTR)
                return aj_err(err, errno, "lock %s/%s", dir, AJ_BINDREG_FILE);
        if (fstat(fd, ret_st) < 0)
            return aj_err(err, errno, "stat %s/%s", dir, AJ_BINDREG_FILE);
        if (fstatat(dfd, AJ_BINDREG_FILE, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == ret_st->st_dev &&
            now.st_ino == ret_st->st_ino)
            return TAKE_FD(fd);
    }
    return aj_err(err, EAGAIN, "%s/%s keeps being replaced", dir, AJ_BINDREG_FILE);
}

/* Rewrite the registry with only the entries that are still live, plus
 * the new ones: a host that makes a workspace per session would otherwise
 * grow it without end. Temp file + rename, under the old file's lock. */
static int reg_compact(int dfd, const char *dir, const struct aj_bindreg *reg, struct aj_error *err)
{
    char tmp[64], rnd[17], line[4200];
    _cleanup_close_ int fd = -1;
    int r = 0;

    if (aj_random_hex(rnd, 16) < 0)
        return aj_err(err, EIO, "random name");
    snprintf(tmp, sizeof(tmp), ".%s.%s", AJ_BINDREG_FILE, rnd);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0)
        return aj_err(err, errno, "create %s/%s", dir, tmp);
    for (size_t i = 0; r == 0 && i < reg->n; i++) {
        int n = reg_format(line, sizeof(line), &reg->id[i], reg->path[i]);
        r = n < 0 ? n : aj_write_all(fd, line, (size_t)n);
    }
    if (r == 0 && close(TAKE_FD(fd)) < 0)
        r = -errno;
    if (r == 0 && renameat(dfd, tmp, dfd, AJ_BINDREG_FILE) < 0)
        r = -errno;
    if (r < 0) {
        (void)unlinkat(dfd, tmp, 0);
        return aj_err(err, -r, "rewrite %s/%s", dir, AJ_BINDREG_FILE);
    }
    return 0;
}

int aj_bindreg_update(const struct aj_policy *pol, struct aj_bindreg *ret, struct aj_error *err)
{
    char dir[4096];
    _cleanup_close_ int dfd = -1, fd = -1;
    _cleanup_free_ char *buf = NULL;
    struct aj_bindreg all = {0}, reg = {0};
    struct stat st;
    size_t len = 0;
    bool compact;
    int r;

    memset(ret, 0, sizeof(*ret));
    dfd = aj_state_dir_open(dir, sizeof(dir), err);
    if (dfd < 0)
        return dfd;
    fd = reg_open_locked(dfd, dir, &st, err);
    if (fd < 0)
        return fd;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1 || (st.st_mode & 022))
        return aj_err(err, 0, "%s/%s is not a private file of ours (uid %u, mode %04o, %lu links); remove it",
                      dir, AJ_BINDREG_FILE, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                      (unsigned long)st.st_nlink);
    if ((uint64_t)st.st_size > AJ_BINDREG_MAX)
        return aj_err(err, EFBIG, "%s/%s is larger than %u bytes; remove it", dir, AJ_BINDREG_FILE,
                      AJ_BINDREG_MAX);
    compact = (uint64_t)st.st_size > AJ_BINDREG_COMPACT_AT;
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return aj_err(err, ENOMEM, "registry");
    while (len < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + len, (size_t)st.st_size - len, (off_t)len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return aj_err(err, errno, "read %s/%s", dir, AJ_BINDREG_FILE);
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    r = reg_parse(&all, buf);
    if (r < 0)
        goto fail;
    /* Without a birth time an inode number is all there is, and a new
     * directory may have the number of a deleted one: such an entry counts
     * only while its path still leads to it. When compacting, every entry
     * is held to that. */
    for (size_t i = 0; i < all.n; i++) {
        if ((compact || !all.id[i].btime_sec) && !reg_entry_live(&all.id[i], all.path[i]))
            continue;
        r = reg_push(&reg, &all.id[i], all.path[i]);
        if (r < 0)
            goto fail;
    }
    for (size_t i = 0; i < pol->n_binds; i++) {
        const struct aj_bind *b = &pol->binds[i];
        _cleanup_close_ int bfd = -1;
        struct aj_devino id;
        bool known = false;
        char line[4200];
        int n;

        if (!b->rw)
            continue;
        bfd = aj_open_nofollow(b->host, O_PATH, 0);
        if (bfd < 0 || aj_devino_of(bfd, &id) < 0)
            continue; /* the mount layer names the problem */
        for (size_t k = 0; k < reg.n && !known; k++)
            known = aj_devino_same(&reg.id[k], &id);
        if (known)
            continue;
        /* A newline in the path would start a forged line. */
        if (strchr(b->host, '\n')) {
            r = aj_err(err, EINVAL, "--bind-rw %s: a newline in a bind source is refused", b->host);
            goto fail;
        }
        n = reg_format(line, sizeof(line), &id, b->host);
        if (n < 0) {
            r = aj_err(err, ENAMETOOLONG, "--bind-rw %s", b->host);
            goto fail;
        }
        if (!compact) {
            r = aj_write_all(fd, line, (size_t)n);
            if (r < 0) {
                r = aj_err(err, -r, "write %s/%s", dir, AJ_BINDREG_FILE);
                goto fail;
            }
        }
        r = reg_push(&reg, &id, b->host);
        if (r < 0)
            goto fail;
    }
    if (compact) {
        r = reg_compact(dfd, dir, &reg, err);
        if (r < 0)
            goto fail;
    }
    aj_bindreg_clear(&all);
    *ret = reg;
    return 0;
fail:
    if (r == -ENOMEM)
        r = aj_err(err, ENOMEM, "registry");
    aj_bindreg_clear(&all);
    aj_bindreg_clear(&reg);
    return r;
}
