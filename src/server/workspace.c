/* SPDX-License-Identifier: Apache-2.0 */
/* Workspaces: a size-limited filesystem per workspace, its size the
 * quota (the kernel refuses the block past it: ENOSPC, never a full host
 * disk), mounted with the new mount API on a directory made here, under "workspaces/"
 * beside the store: root's and 0700, so no path a run can reach leads to
 * it and nothing a run does can replace the bind source. Two backends:
 *
 * - tmpfs-idmap: a tmpfs, size=quota. Id-mapped tmpfs mounts need Linux
 *   6.3; srv_ws_root_init tries one (a throwaway tmpfs, a user namespace
 *   of a forked child) rather than reading the version.
 * - ext4-loop (5.12+: id-mapped ext4): an image file of quota bytes in
 *   the workspaces directory, made by mke2fs (no journal, no reserved
 *   blocks, the root directory the owner's), fallocated so the host's
 *   disk has its blocks before any run writes, attached to a free loop
 *   device with LO_FLAGS_AUTOCLEAR and unlinked at once: the mount holds
 *   the device, the device holds the file, so when the mount goes (an
 *   unmount, or the server's namespace dying with it, SIGKILL included)
 *   the device detaches itself and the blocks are freed. Only a server
 *   killed within srv_ws_create leaves an image behind; the next start
 *   removes it.
 *
 * Runs see the workspace through the library's id-mapped writable bind (owner: the
 * workspace's uid), so it stays writable whatever host uid each run
 * gets. Files the API writes are made as that owner, so the runs see
 * them as their own.
 *
 * Every path from a client or a run is resolved from the workspace root's fd
 * with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), one component at a time where
 * directories are made: a symbolic link a run planted (to /etc/shadow,
 * to ../..) is refused (ELOOP), never followed, whatever it points to. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <nettle/base64.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "srv.h"
#include "srv_ws.h"

#define WS_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define WS_MAX_LIST 10000

static int ws_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC | O_NOCTTY), .mode = mode, .resolve = WS_RESOLVE};

    for (int i = 0; i < 16; i++) {
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        /* EAGAIN: a rename raced the lookup (RESOLVE_BENEATH re-checks). */
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}

static int fail(char *msg, size_t msg_size, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *msg, size_t msg_size, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
    return -status;
}

/* The status and message of a failed resolution of path. */
static int resolve_fail(int e, const char *path, char *msg, size_t msg_size)
{
    switch (e) {
    case -ENOENT:
        return fail(msg, msg_size, 404, "%s: no such file in the workspace", path);
    case -ELOOP:
        return fail(msg, msg_size, 403, "%s: a symbolic link is in the path, and links are never followed "
                                        "(paths are confined to the workspace)", path);
    case -EXDEV:
        return fail(msg, msg_size, 403, "%s: leads out of the workspace", path);
    case -ENOTDIR:
        return fail(msg, msg_size, 409, "%s: a component of the path is not a directory", path);
    case -ENAMETOOLONG:
        return fail(msg, msg_size, 400, "%s: too long", path);
    case -ENOSPC:
    case -EDQUOT:
        return fail(msg, msg_size, 507, "workspace_full: %s: the workspace's quota is used up", path);
    default:
        return fail(msg, msg_size, 500, "%s: %s", path, strerror(-e));
    }
}

/* ---- the workspaces directory and the mounts ----------------------------------------- */

/* A workspace's directory ("s-ID", "r-ID") or an ext4 image ("s-ID.img"). */
static bool ours(const char *name, bool *image)
{
    size_t n = strlen(name);

    *image = n == 38 && strcmp(name + 34, ".img") == 0;
    return (name[0] == 's' || name[0] == 'r') && name[1] == '-' && (n == 34 || *image) &&
           strspn(name + 2, "0123456789abcdef") == 32;
}

const char *srv_ws_backend_name(enum srv_ws_backend b)
{
    return b == SRV_WS_EXT4_LOOP ? "ext4-loop" : "tmpfs-idmap";
}

static enum srv_ws_backend ws_backend;
static const char *ws_mke2fs; /* ext4-loop: its path */

/* Whether this kernel id-maps a tmpfs mount: a tmpfs of one page, made
 * detached, and mount_setattr(MOUNT_ATTR_IDMAP) with the user namespace
 * of a child made for it (uid and gid 0 mapped to one unused host id).
 * Before 6.3 that is EINVAL. The child is gone on return. */
static bool tmpfs_idmap_works(char *why, size_t why_size)
{
    int fs = -1, mnt = -1, ufd = -1, ready[2] = {-1, -1}, go[2] = {-1, -1};
    pid_t pid = -1;
    bool ok = false;
    char c, path[64];

    (void)snprintf(why, why_size, "setup");
    fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "size", "4096", 0) < 0 ||
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 || (mnt = fsmount(fs, FSMOUNT_CLOEXEC, 0)) < 0 ||
        pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
        (void)snprintf(why, why_size, "a tmpfs to try: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid == 0) {
        /* The child: a user namespace, then wait for the parent. */
        (void)close(ready[0]);
        (void)close(go[1]);
        if (unshare(CLONE_NEWUSER) < 0)
            _exit(1);
        if (write(ready[1], "u", 1) != 1)
            _exit(1);
        (void)!read(go[0], &c, 1);
        _exit(0);
    }
    if (pid < 0) {
        (void)snprintf(why, why_size, "fork: %s", strerror(errno));
        goto out;
    }
    (void)close(ready[1]);
    ready[1] = -1;
    (void)close(go[0]);
    go[0] = -1;
    if (read(ready[0], &c, 1) != 1) {
        (void)snprintf(why, why_size, "a user namespace to map with: unshare failed");
        goto out;
    }
    for (int i = 0; i < 2; i++) {
        int f;
        (void)snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, i ? "gid_map" : "uid_map");
        f = open(path, O_WRONLY | O_CLOEXEC);
        if (f < 0 || write(f, "0 4294967294 1\n", 15) != 15) {
            (void)snprintf(why, why_size, "%s: %s", path, strerror(errno));
            if (f >= 0)
                (void)close(f);
            goto out;
        }
        (void)close(f);
    }
    (void)snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
    ufd = open(path, O_RDONLY | O_CLOEXEC);
    if (ufd < 0) {
        (void)snprintf(why, why_size, "%s: %s", path, strerror(errno));
        goto out;
    }
    {
        struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)ufd};
        ok = mount_setattr(mnt, "", AT_EMPTY_PATH, &a, sizeof(a)) == 0;
        if (!ok)
            (void)snprintf(why, why_size, "an id-mapped tmpfs mount: %s (Linux 6.3 or later has them)",
                           strerror(errno));
    }
out:
    if (go[1] >= 0)
        (void)close(go[1]); /* the child's read returns: it exits */
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    for (int i = 0; i < 2; i++) {
        if (ready[i] >= 0)
            (void)close(ready[i]);
        if (i == 0 && go[0] >= 0)
            (void)close(go[0]);
    }
    if (ufd >= 0)
        (void)close(ufd);
    if (mnt >= 0)
        (void)close(mnt);
    if (fs >= 0)
        (void)close(fs);
    return ok;
}

/* Whether ext4 on loop devices can work here: id-mapped mounts, mke2fs,
 * /dev/loop-control. Runs reach a workspace only through the library's
 * id-mapped bind, and a kernel without mount_setattr (ENOSYS before 5.12,
 * which brought id-mapped mounts and ext4's support of them together)
 * would take every session and then fail each of its runs: refused here,
 * at start, with the reason. The probe is the call itself on no mount
 * (EBADF where it exists), not the kernel's version. */
static bool ext4_loop_works(char *why, size_t why_size)
{
    static const char *const mke2fs[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs", "/usr/bin/mke2fs", NULL};
    struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)-1};
    int fd;

    if (mount_setattr(-1, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0 && (errno == ENOSYS || errno == EPERM)) {
        int e = errno;
        (void)snprintf(why, why_size, "no id-mapped mounts here (mount_setattr: %s): the workspace's bind "
                                      "needs Linux 5.12 or later%s", strerror(e),
                       e == EPERM ? ", and no seccomp filter on the server that refuses mount_setattr" : "");
        return false;
    }
    ws_mke2fs = NULL;
    for (size_t i = 0; mke2fs[i] && !ws_mke2fs; i++)
        if (access(mke2fs[i], X_OK) == 0)
            ws_mke2fs = mke2fs[i];
    if (!ws_mke2fs) {
        (void)snprintf(why, why_size, "no mke2fs (e2fsprogs) in /usr/sbin or /sbin");
        return false;
    }
    fd = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        (void)snprintf(why, why_size, "/dev/loop-control: %s (loop devices: the loop module, or a container "
                                      "given the device)", strerror(errno));
        return false;
    }
    (void)close(fd);
    return true;
}

/* The backend to use: want "auto"/NULL, "tmpfs" or "ext4". */
static int choose_backend(const char *want, char *msg, size_t msg_size)
{
    char why_t[200], why_e[200];
    bool any = !want || strcmp(want, "auto") == 0;

    if ((any || strcmp(want, "tmpfs") == 0) && tmpfs_idmap_works(why_t, sizeof(why_t))) {
        ws_backend = SRV_WS_TMPFS_IDMAP;
        return 0;
    }
    if (!any && strcmp(want, "tmpfs") == 0) {
        (void)snprintf(msg, msg_size, "workspaces: backend tmpfs: %s", why_t);
        return -1;
    }
    if (ext4_loop_works(why_e, sizeof(why_e))) {
        ws_backend = SRV_WS_EXT4_LOOP;
        return 0;
    }
    if (any)
        (void)snprintf(msg, msg_size, "workspaces: no backend works here: tmpfs-idmap: %s; ext4-loop: %s", why_t,
                       why_e);
    else
        (void)snprintf(msg, msg_size, "workspaces: backend ext4: %s", why_e);
    return -1;
}

int srv_ws_root_init(const char *store, const char *want, int *ret_fd, char **ret_path,
                     enum srv_ws_backend *ret_backend, char *msg, size_t msg_size)
{
    const char *slash = strrchr(store, '/');
    char *root = NULL;
    struct stat st;
    DIR *d = NULL;
    int fd = -1, dfd;

    /* A namespace of the server's own: the tmpfs mounts below never
     * reach the host's table and end with the server (a SIGKILL
     * included). Slave, so mounts the host makes later still reach it. */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
        (void)snprintf(msg, msg_size, "workspaces: a mount namespace of the server's own: %s", strerror(errno));
        return -1;
    }
    if (choose_backend(want, msg, msg_size) < 0)
        return -1;
    if (asprintf(&root, "%.*s/workspaces", (int)(slash - store), store) < 0) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    if (strchr(root, ':')) {
        (void)snprintf(msg, msg_size, "workspaces: %s: a ':' in the path (a bind is HOST:SANDBOX)", root);
        goto fail;
    }
    if (mkdir(root, 0700) < 0 && errno != EEXIST) {
        (void)snprintf(msg, msg_size, "workspaces: mkdir %s: %s", root, strerror(errno));
        goto fail;
    }
    fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        (void)snprintf(msg, msg_size, "workspaces: %s: %s", root, strerror(errno));
        goto fail;
    }
    if (st.st_uid != 0 || ((st.st_mode & 077) && fchmod(fd, 0700) < 0)) {
        (void)snprintf(msg, msg_size, "workspaces: %s must be root's and 0700", root);
        goto fail;
    }
    /* What a killed server left: its mounts went with its namespace
     * (a server of an older build may have left them in the host's: they
     * are detached here), then the empty directories. */
    dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            (void)close(dfd);
        (void)snprintf(msg, msg_size, "workspaces: %s: %s", root, strerror(errno));
        goto fail;
    }
    for (struct dirent *e; (e = readdir(d));) {
        char *p = NULL;
        bool image;
        if (!ours(e->d_name, &image))
            continue;
        if (image) {
            /* An ext4 image of a server killed within srv_ws_create (after
             * that it is unlinked): its loop device detached itself. */
            if (unlinkat(fd, e->d_name, 0) < 0)
                (void)fprintf(stderr, "agentjail serve: workspaces: could not remove %s/%s: %s\n", root,
                              e->d_name, strerror(errno));
            else
                (void)fprintf(stderr, "agentjail serve: workspaces: removed %s, left by a server that stopped\n",
                              e->d_name);
            continue;
        }
        if (asprintf(&p, "%s/%s", root, e->d_name) >= 0) {
            for (int i = 0; i < 8 && umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) == 0; i++)
                ;
            free(p);
        }
        if (unlinkat(fd, e->d_name, AT_REMOVEDIR) < 0)
            (void)fprintf(stderr, "agentjail serve: workspaces: could not remove %s/%s: %s\n", root, e->d_name,
                          strerror(errno));
        else
            (void)fprintf(stderr, "agentjail serve: workspaces: removed %s, left by a server that stopped\n",
                          e->d_name);
    }
    (void)closedir(d);
    *ret_fd = fd;
    *ret_path = root;
    *ret_backend = ws_backend;
    return 0;
fail:
    if (fd >= 0)
        (void)close(fd);
    free(root);
    return -1;
}

/* tmpfs-idmap: a detached tmpfs mount of quota bytes owned by owner. */
static int tmpfs_mount(uint64_t quota, uint32_t owner, char *msg, size_t msg_size)
{
    char val[32];
    int fs, mnt = -1;

    /* Each inode of a tmpfs costs kernel memory the size does not count:
     * bounded too, one per 4 KiB of quota (a file with data takes a page
     * of it anyway), at least 1024. */
    fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0)
        goto fail;
    (void)snprintf(val, sizeof(val), "%llu", (unsigned long long)quota);
    if (fsconfig(fs, FSCONFIG_SET_STRING, "size", val, 0) < 0)
        goto fail;
    (void)snprintf(val, sizeof(val), "%llu", (unsigned long long)(quota / 4096 > 1024 ? quota / 4096 : 1024));
    if (fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", val, 0) < 0 ||
        fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0) < 0)
        goto fail;
    (void)snprintf(val, sizeof(val), "%u", owner);
    if (fsconfig(fs, FSCONFIG_SET_STRING, "uid", val, 0) < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "gid", val, 0) < 0 ||
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        goto fail;
    mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (mnt < 0)
        goto fail;
    (void)close(fs);
    return mnt;
fail:
    (void)snprintf(msg, msg_size, "workspace: a tmpfs: %s", strerror(errno));
    if (fs >= 0)
        (void)close(fs);
    return -1;
}

/* mke2fs on the image at path: no journal (the filesystem never outlives
 * the server), no blocks reserved for root, no resize inode, an inode
 * per 4 KiB, the root directory the owner's and 0755. Its environment is
 * fixed (no MKE2FS_CONFIG or the like from the server's). */
static int run_mke2fs(const char *path, uint32_t owner, char *msg, size_t msg_size)
{
    char ext[96];
    char *argv[] = {(char *)"mke2fs", (char *)"-q", (char *)"-F", (char *)"-t", (char *)"ext4", (char *)"-m", (char *)"0",
                    (char *)"-O", (char *)"^has_journal,^resize_inode", (char *)"-i", (char *)"4096", (char *)"-I",
                    (char *)"256", (char *)"-E", ext, (char *)path, NULL};
    char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C", NULL};
    posix_spawn_file_actions_t fa;
    int err[2], st = 0, e;
    char out[512];
    size_t got = 0;
    pid_t pid;

    /* lazy_itable_init: the inode tables are left as the image's holes,
     * which read as zeros (mounted noinit_itable: no kernel thread
     * zeroes them later). */
    (void)snprintf(ext, sizeof(ext), "nodiscard,lazy_itable_init=1,root_owner=%u:%u", owner, owner);
    if (pipe2(err, O_CLOEXEC) < 0) {
        (void)snprintf(msg, msg_size, "workspace: pipe: %s", strerror(errno));
        return -1;
    }
    e = posix_spawn_file_actions_init(&fa);
    if (e == 0)
        e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (e == 0)
        e = posix_spawn_file_actions_adddup2(&fa, err[1], 1);
    if (e == 0)
        e = posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    if (e == 0)
        e = posix_spawn(&pid, ws_mke2fs, &fa, NULL, argv, envp);
    (void)posix_spawn_file_actions_destroy(&fa);
    (void)close(err[1]);
    if (e != 0) {
        (void)close(err[0]);
        (void)snprintf(msg, msg_size, "workspace: %s: %s", ws_mke2fs, strerror(e));
        return -1;
    }
    for (;;) {
        char buf[512];
        ssize_t n = read(err[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n && got + 1 < sizeof(out); i++)
            out[got++] = buf[i] == '\n' ? ' ' : buf[i];
    }
    out[got] = '\0';
    (void)close(err[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        (void)snprintf(msg, msg_size, "workspace: mke2fs failed (status %d): %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                       out);
        return -1;
    }
    return 0;
}

/* ext4-loop: the image root/name.img of quota bytes, on a loop device,
 * mounted detached. The image is unlinked on every path out of here (the
 * loop device holds it while mounted); the device detaches itself when
 * the mount goes (or at once, on a failure: its fd is its last user). */
static int ext4_mount(int rootfd, const char *root_path, const char *name, uint64_t quota, uint32_t owner, char *msg,
                      size_t msg_size)
{
    char img[64], *path = NULL, dev[32];
    int ifd = -1, ctl = -1, lfd = -1, fs = -1, mnt = -1;

    (void)snprintf(img, sizeof(img), "%s.img", name);
    if (asprintf(&path, "%s/%s", root_path, img) < 0) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    ifd = openat(rootfd, img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (ifd < 0 || ftruncate(ifd, (off_t)quota) < 0) {
        (void)snprintf(msg, msg_size, "workspace: an image at %s: %s", path, strerror(errno));
        goto fail;
    }
    if (run_mke2fs(path, owner, msg, msg_size) < 0)
        goto fail;
    /* Every block of it on the host's disk now: a run can fill its
     * workspace, never the host's disk. (A filesystem without fallocate
     * keeps the image sparse.) */
    if (fallocate(ifd, 0, 0, (off_t)quota) < 0 && errno != EOPNOTSUPP) {
        if (errno == ENOSPC)
            (void)snprintf(msg, msg_size, "workspace: the host's disk has no room for a workspace of %llu bytes "
                                          "(%s)", (unsigned long long)quota, root_path);
        else
            (void)snprintf(msg, msg_size, "workspace: fallocate %s: %s", path, strerror(errno));
        goto fail;
    }
    ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0) {
        (void)snprintf(msg, msg_size, "workspace: /dev/loop-control: %s", strerror(errno));
        goto fail;
    }
    /* A free device; another process may take it first (EBUSY): again. */
    for (int i = 0;; i++) {
        struct loop_config lc = {.fd = (uint32_t)ifd, .info = {.lo_flags = LO_FLAGS_AUTOCLEAR}};
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0) {
            (void)snprintf(msg, msg_size, "workspace: no free loop device: %s", strerror(errno));
            goto fail;
        }
        (void)snprintf(dev, sizeof(dev), "/dev/loop%d", n);
        (void)snprintf((char *)lc.info.lo_file_name, sizeof(lc.info.lo_file_name), "agentjail:%s", name);
        lfd = open(dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0) {
            (void)snprintf(msg, msg_size, "workspace: %s: %s (in a container: give it the loop devices too)", dev,
                           strerror(errno));
            goto fail;
        }
        if (ioctl(lfd, LOOP_CONFIGURE, &lc) == 0)
            break;
        if (errno != EBUSY) {
            (void)snprintf(msg, msg_size, "workspace: %s: LOOP_CONFIGURE: %s", dev, strerror(errno));
            goto fail;
        }
        (void)close(lfd);
        lfd = -1;
        if (i == 16) {
            (void)snprintf(msg, msg_size, "workspace: no loop device could be attached (busy)");
            goto fail;
        }
    }
    (void)unlinkat(rootfd, img, 0);
    free(path);
    path = NULL;
    fs = fsopen("ext4", FSOPEN_CLOEXEC);
    if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
        fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
        (mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0) {
        (void)snprintf(msg, msg_size, "workspace: mount %s (ext4): %s", dev, strerror(errno));
        goto fail;
    }
    (void)close(fs);
    (void)close(lfd); /* the mount holds the device now: it detaches when the mount goes */
    (void)close(ctl);
    (void)close(ifd);
    return mnt;
fail:
    if (fs >= 0)
        (void)close(fs);
    if (lfd >= 0)
        (void)close(lfd);
    if (ctl >= 0)
        (void)close(ctl);
    if (ifd >= 0) {
        (void)close(ifd);
        (void)unlinkat(rootfd, img, 0);
    }
    free(path);
    return -1;
}

int srv_ws_create(int rootfd, const char *root_path, const char *name, uint64_t quota, uint32_t owner,
                  struct srv_ws **ret, char *msg, size_t msg_size)
{
    struct srv_ws *ws = calloc(1, sizeof(*ws));
    int mnt = -1, target = -1;
    struct statfs sf;
    bool made = false;

    if (!ws) {
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    ws->dirfd = -1;
    ws->owner = owner;
    ws->quota = quota;
    ws->backend = ws_backend;
    (void)snprintf(ws->name, sizeof(ws->name), "%s", name);
    if (asprintf(&ws->path, "%s/%s", root_path, name) < 0) {
        ws->path = NULL;
        (void)snprintf(msg, msg_size, "out of memory");
        goto fail;
    }
    if (mkdirat(rootfd, name, 0700) < 0) {
        (void)snprintf(msg, msg_size, "workspace: mkdir %s: %s", ws->path, strerror(errno));
        goto fail;
    }
    made = true;
    mnt = ws->backend == SRV_WS_EXT4_LOOP ? ext4_mount(rootfd, root_path, name, quota, owner, msg, msg_size)
                                          : tmpfs_mount(quota, owner, msg, msg_size);
    if (mnt < 0)
        goto fail;
    /* Attached through fds: the directory made above, by its fd. */
    target = openat(rootfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (target < 0 || move_mount(mnt, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        goto fail_errno;
    ws->mounted = true;
    ws->dirfd = openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ws->dirfd < 0 || fstatfs(ws->dirfd, &sf) < 0 ||
        sf.f_type != (ws->backend == SRV_WS_EXT4_LOOP ? EXT4_SUPER_MAGIC : TMPFS_MAGIC))
        goto fail_errno;
    /* mke2fs's lost+found: nothing here needs it (the filesystem is never
     * checked, it ends with the server), and it is not the runs'. */
    if (ws->backend == SRV_WS_EXT4_LOOP && unlinkat(ws->dirfd, "lost+found", AT_REMOVEDIR) < 0 && errno != ENOENT)
        goto fail_errno;
    ws->base_used = srv_ws_used(ws);
    (void)close(mnt);
    (void)close(target);
    *ret = ws;
    return 0;
fail_errno:
    (void)snprintf(msg, msg_size, "workspace: %s at %s: %s", srv_ws_backend_name(ws->backend), ws->path,
                   strerror(errno));
fail:
    if (mnt >= 0)
        (void)close(mnt);
    if (target >= 0)
        (void)close(target);
    if (made)
        srv_ws_unmount(rootfd, ws);
    srv_ws_free(ws);
    return -1;
}

void srv_ws_unmount(int rootfd, struct srv_ws *ws)
{
    if (!ws)
        return;
    /* By path: every component is the server's (root's, 0700). */
    if (ws->mounted && umount2(ws->path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
        (void)fprintf(stderr, "agentjail serve: workspace: umount %s: %s\n", ws->path, strerror(errno));
    ws->mounted = false;
    if (unlinkat(rootfd, ws->name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        (void)fprintf(stderr, "agentjail serve: workspace: rmdir %s: %s\n", ws->path, strerror(errno));
}

void srv_ws_free(struct srv_ws *ws)
{
    if (!ws)
        return;
    if (ws->dirfd >= 0)
        (void)close(ws->dirfd);
    free(ws->path);
    free(ws);
}

bool srv_ws_full(const struct srv_ws *ws)
{
    struct statvfs sv;

    if (fstatvfs(ws->dirfd, &sv) < 0)
        return false;
    /* ext4 refuses a write whose worst-case blocks (data and extent tree)
     * it cannot reserve, with some blocks still free: a 64 KiB write fails
     * whole with about 40 KiB left (measured, 1 KiB and 4 KiB blocks).
     * Within 64 KiB of the end counts as full there. */
    if (ws->backend == SRV_WS_EXT4_LOOP)
        return (uint64_t)sv.f_bavail * sv.f_frsize < 65536 || sv.f_favail == 0;
    return sv.f_bavail == 0 || sv.f_favail == 0;
}

uint64_t srv_ws_used(const struct srv_ws *ws)
{
    struct statvfs sv;

    uint64_t used;

    if (fstatvfs(ws->dirfd, &sv) < 0)
        return 0;
    used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
    return used > ws->base_used ? used - ws->base_used : 0;
}

/* ---- paths ----------------------------------------------------------------------------- */

int srv_ws_path(const char *path, bool allow_root, const char **ret, char *msg, size_t msg_size)
{
    const char *p = path;

    if (strncmp(p, "/workspace/", 11) == 0)
        p += 11;
    else if (strcmp(p, "/workspace") == 0)
        p += 10;
    if (strlen(p) > 4000)
        return fail(msg, msg_size, 400, "path: at most 4000 bytes");
    if (!*p) {
        if (!allow_root)
            return fail(msg, msg_size, 400, "path: a file's path in the workspace is required");
        *ret = p;
        return 0;
    }
    if (*p == '/')
        return fail(msg, msg_size, 400, "%s: a path relative to the workspace (or under /workspace/)", path);
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return fail(msg, msg_size, 400, "%s: empty, '.' and '..' components are refused", path);
        if (n > 255)
            return fail(msg, msg_size, 400, "%s: a component longer than 255 bytes", path);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
                return fail(msg, msg_size, 400, "path: control characters are refused");
        c += n;
        if (*c == '/' && !c[1])
            return fail(msg, msg_size, 400, "%s: a trailing '/'", path);
        if (*c)
            c++;
    }
    *ret = p;
    return 0;
}

/* The directory that holds path's last component, made (as the owner)
 * where missing when create: its fd, *ret_name the last component. */
static int open_parent(struct srv_ws *ws, const char *path, bool create, const char **ret_name, char *msg,
                       size_t msg_size)
{
    const char *last = strrchr(path, '/');
    int cur = fcntl(ws->dirfd, F_DUPFD_CLOEXEC, 3);

    *ret_name = last ? last + 1 : path;
    if (cur < 0)
        return fail(msg, msg_size, 500, "dup: %s", strerror(errno));
    for (const char *c = path; last && c <= last;) {
        size_t n = strcspn(c, "/");
        char comp[256];
        int fd;
        memcpy(comp, c, n);
        comp[n] = '\0';
        c += n + 1;
        fd = ws_openat(cur, comp, O_RDONLY | O_DIRECTORY, 0);
        if (fd == -ENOENT && create) {
            if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
                int e = -errno;
                (void)close(cur);
                return resolve_fail(e, path, msg, msg_size);
            }
            fd = ws_openat(cur, comp, O_RDONLY | O_DIRECTORY, 0);
            /* Made by root: the runs' owner's, as if a run had made it
             * (the mode whatever the server's umask). */
            if (fd >= 0 && (fchown(fd, ws->owner, ws->owner) < 0 || fchmod(fd, 0755) < 0)) {
                int e = -errno;
                (void)close(fd);
                (void)close(cur);
                return resolve_fail(e, path, msg, msg_size);
            }
        }
        (void)close(cur);
        if (fd < 0)
            return resolve_fail(fd, path, msg, msg_size);
        cur = fd;
    }
    return cur;
}

/* ---- PUT ------------------------------------------------------------------------------------ */

int srv_ws_put_begin(struct srv_ws *ws, const char *path, uint64_t max, struct srv_ws_file *f)
{
    const char *name;

    *f = (struct srv_ws_file){.dirfd = -1, .fd = -1, .max = max};
    f->dirfd = open_parent(ws, path, true, &name, f->msg, sizeof(f->msg));
    if (f->dirfd < 0) {
        f->err = f->dirfd;
        f->dirfd = -1;
        return f->err;
    }
    f->name = strdup(name);
    if (!f->name) {
        f->err = fail(f->msg, sizeof(f->msg), 500, "out of memory");
        return f->err;
    }
    /* Unnamed until it is complete: a client that leaves mid-upload (or
     * a write that fails) leaves nothing, not even a temporary name. */
    f->fd = openat(f->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (f->fd < 0 || fchown(f->fd, ws->owner, ws->owner) < 0 || fchmod(f->fd, 0644) < 0) {
        f->err = resolve_fail(-errno, path, f->msg, sizeof(f->msg));
        return f->err;
    }
    return 0;
}

void srv_ws_put_write(struct srv_ws_file *f, const void *data, size_t len)
{
    const char *p = data;

    if (f->err)
        return;
    if (f->bytes + len > f->max) {
        f->err = fail(f->msg, sizeof(f->msg), 413, "the file is larger than %llu bytes (max_file_bytes)",
                      (unsigned long long)f->max);
        return;
    }
    while (len) {
        ssize_t n = write(f->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            if (errno == ENOSPC || errno == EDQUOT || errno == EFBIG)
                f->err = fail(f->msg, sizeof(f->msg), 507,
                              "workspace_full: the workspace's quota is used up (%llu bytes written)",
                              (unsigned long long)f->bytes);
            else
                f->err = fail(f->msg, sizeof(f->msg), 500, "write: %s", strerror(errno));
            return;
        }
        p += n;
        len -= (size_t)n;
        f->bytes += (uint64_t)n;
    }
}

/* Give the unnamed file fd the name dirfd/name, never replacing one
 * (EEXIST). AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH (before 6.10: the
 * server has it as root); /proc/self/fd is the fallback. */
static int link_tmpfile(int fd, int dirfd, const char *name)
{
    char proc[64];

    if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
        return 0;
    if (errno != ENOENT && errno != EPERM && errno != EINVAL)
        return -errno;
    (void)snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

/* A directory of the server's own in dirfd (root's, 0700: a run, as the
 * workspace's owner without a capability over root's inodes, can neither
 * list it nor put a name in it): its fd, its random name in ret_name.
 * A run may remove or swap the name between the mkdir and the open: the
 * fd is then checked to be root's empty 0700 directory, which nothing a
 * run makes can be. */
static int stage_open(int dirfd, char *ret_name, size_t name_size)
{
    for (int i = 0; i < 4; i++) {
        uint8_t rnd[8];
        struct stat st;
        int fd;
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            return -errno;
        (void)snprintf(ret_name, name_size, ".aj-upload-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
                       rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
        if (mkdirat(dirfd, ret_name, 0700) < 0) {
            if (errno == EEXIST)
                continue;
            return -errno;
        }
        fd = ws_openat(dirfd, ret_name, O_RDONLY | O_DIRECTORY, 0);
        if (fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR)
            continue; /* removed or replaced meanwhile */
        if (fd < 0)
            return fd;
        if (fstat(fd, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 0700 && st.st_nlink == 2)
            return fd;
        (void)close(fd); /* a run's directory at our name: theirs, left alone */
    }
    return -EAGAIN;
}

/* Remove the staging directory, if the name still holds it: a run may have
 * renamed it (within the same directory: moving it elsewhere needs write
 * access to it) and put something of its own at the name. */
static void stage_remove(int dirfd, const char *name, int stagefd)
{
    struct stat a, b;

    (void)unlinkat(stagefd, "f", 0); /* only there when the rename failed: by the fd, never a run's name */
    if (fstat(stagefd, &a) == 0 && fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        (void)fprintf(stderr, "agentjail serve: workspace: rmdir %s: %s\n", name, strerror(errno));
}

int srv_ws_put_commit(struct srv_ws *ws, struct srv_ws_file *f)
{
    char stage[64];
    int sfd, r;

    (void)ws;
    if (f->err)
        return f->err;
    /* The file gets no name a run could swap before it is complete and
     * in place: a run can watch the workspace (inotify) and rename its own
     * file over any name the server makes in a directory the run writes,
     * so a temporary name linked there and then renamed by name would
     * install the run's file as the upload. A new file is linked straight
     * at its name (linkat never replaces: atomic, no other name). */
    r = link_tmpfile(f->fd, f->dirfd, f->name);
    if (r == 0)
        return 0;
    if (r != -EEXIST)
        return f->err = resolve_fail(r, f->name, f->msg, sizeof(f->msg));
    /* A replacement: linked in a directory of the server's own, and renamed
     * from there by that directory's fd over the target, so a reader sees
     * the old file or the whole new one, and the inode renamed is the
     * upload's (the run can only rename the directory itself, never reach
     * into it). */
    sfd = stage_open(f->dirfd, stage, sizeof(stage));
    if (sfd < 0)
        return f->err = resolve_fail(sfd, f->name, f->msg, sizeof(f->msg));
    r = link_tmpfile(f->fd, sfd, "f");
    if (r == 0 && renameat(sfd, "f", f->dirfd, f->name) < 0)
        r = -errno;
    stage_remove(f->dirfd, stage, sfd);
    (void)close(sfd);
    if (r == -EISDIR || r == -ENOTEMPTY || r == -EEXIST)
        return f->err = fail(f->msg, sizeof(f->msg), 409, "%s: a directory is in the way", f->name);
    if (r < 0)
        return f->err = resolve_fail(r, f->name, f->msg, sizeof(f->msg));
    return 0;
}

void srv_ws_put_abort(struct srv_ws_file *f)
{
    if (f->fd >= 0)
        (void)close(f->fd);
    if (f->dirfd >= 0)
        (void)close(f->dirfd);
    free(f->name);
    f->fd = f->dirfd = -1;
    f->name = NULL;
}

/* ---- GET, DELETE ------------------------------------------------------------------------------ */

static const char *type_name(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static char *list_dir(int fd, const char *path)
{
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    json_t *o = json_object(), *entries = json_array();
    bool truncated = false;
    char *s = NULL;

    if (!d || !o || !entries) {
        if (!d && dfd >= 0)
            (void)close(dfd);
        goto out;
    }
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (json_array_size(entries) >= WS_MAX_LIST) {
            truncated = true;
            break;
        }
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        /* A name a run made need not be UTF-8: U+FFFD for such bytes. */
        json_t *en = json_pack("{s:o, s:s, s:I}", "name", srv_text_json(e->d_name, strlen(e->d_name)), "type",
                               type_name(st.st_mode), "size", (json_int_t)st.st_size);
        if (!en || json_array_append_new(entries, en) < 0)
            goto out;
    }
    if (json_object_set_new(o, "path", srv_text_json(path, strlen(path))) < 0 || json_object_set_new(o, "type", json_string("dir")) < 0 ||
        json_object_set(o, "entries", entries) < 0 || json_object_set_new(o, "truncated", json_boolean(truncated)) < 0)
        goto out;
    s = json_dumps(o, JSON_COMPACT);
out:
    if (d)
        (void)closedir(d);
    json_decref(o);
    json_decref(entries);
    return s;
}

int srv_ws_get(struct srv_ws *ws, const char *path, int *ret_fd, uint64_t *ret_size, char **ret_json, char *msg,
               size_t msg_size)
{
    struct stat st;
    /* O_NONBLOCK: a FIFO a run made must not hang the request. */
    int fd = ws_openat(ws->dirfd, *path ? path : ".", O_RDONLY | O_NONBLOCK, 0);

    if (fd < 0)
        return resolve_fail(fd, *path ? path : "/", msg, msg_size);
    if (fstat(fd, &st) < 0) {
        int e = -errno;
        (void)close(fd);
        return resolve_fail(e, path, msg, msg_size);
    }
    if (S_ISDIR(st.st_mode)) {
        *ret_json = list_dir(fd, path);
        (void)close(fd);
        return *ret_json ? 0 : fail(msg, msg_size, 500, "out of memory");
    }
    if (!S_ISREG(st.st_mode)) {
        (void)close(fd);
        return fail(msg, msg_size, 400, "%s: not a regular file or a directory", path);
    }
    *ret_fd = fd;
    *ret_size = (uint64_t)st.st_size;
    return 1;
}

int srv_ws_delete(struct srv_ws *ws, const char *path, char *msg, size_t msg_size)
{
    const char *name;
    int d = open_parent(ws, path, false, &name, msg, msg_size), rc = 0;

    if (d < 0)
        return d;
    /* unlinkat never follows the last component: a link is removed, not
     * what it points to. */
    if (unlinkat(d, name, 0) < 0) {
        if (errno == EISDIR && unlinkat(d, name, AT_REMOVEDIR) == 0)
            rc = 0;
        else if (errno == ENOTEMPTY || errno == EEXIST)
            rc = fail(msg, msg_size, 409, "%s: a directory that is not empty", path);
        else
            rc = resolve_fail(-errno, path, msg, msg_size);
    }
    (void)close(d);
    return rc;
}

/* ---- base64 and outputs ---------------------------------------------------------------------- */

char *srv_base64_encode(const uint8_t *p, size_t n)
{
    char *s = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);

    if (!s)
        return NULL;
    base64_encode_raw(s, n, p);
    s[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
    return s;
}

uint8_t *srv_base64_decode(const char *s, size_t n, size_t *ret_len, bool *oom)
{
    struct base64_decode_ctx c;
    uint8_t *out = malloc(BASE64_DECODE_LENGTH(n) + 1);
    size_t len = BASE64_DECODE_LENGTH(n) + 1;

    *oom = !out;
    if (!out)
        return NULL;
    base64_decode_init(&c);
    if (!base64_decode_update(&c, &len, out, n, s) || !base64_decode_final(&c)) {
        free(out);
        return NULL;
    }
    *ret_len = len;
    return out;
}

json_t *srv_ws_outputs(struct srv_ws *ws, char *const *paths, uint64_t max_file, uint64_t budget)
{
    json_t *o = json_object();

    for (size_t i = 0; o && paths && paths[i]; i++) {
        char msg[300];
        const char *p = paths[i];
        int fd = -1;
        uint64_t size = 0;
        char *listing = NULL;
        json_t *v;
        int rc = srv_ws_path(paths[i], false, &p, msg, sizeof(msg));
        if (rc == 0)
            rc = srv_ws_get(ws, p, &fd, &size, &listing, msg, sizeof(msg));
        free(listing);
        if (rc == 0)
            (void)snprintf(msg, sizeof(msg), "%s: a directory", paths[i]);
        if (rc != 1) {
            v = json_pack("{s:s}", "error", msg);
        } else {
            uint64_t want = size < max_file ? size : max_file;
            if (want > budget)
                want = budget;
            uint8_t *buf = malloc(want ? want : 1);
            size_t got = 0;
            while (buf && got < want) {
                ssize_t n = read(fd, buf + got, want - got);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0)
                    break;
                got += (size_t)n;
            }
            char *b64 = buf ? srv_base64_encode(buf, got) : NULL;
            budget -= got;
            v = b64 ? json_pack("{s:s, s:I, s:b}", "base64", b64, "bytes", (json_int_t)size, "truncated",
                                got < size)
                    : NULL;
            free(b64);
            free(buf);
            (void)close(fd);
        }
        if (!v || json_object_set_new(o, paths[i], v) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}
