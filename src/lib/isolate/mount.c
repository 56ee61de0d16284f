/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox's root filesystem.
 *
 * Sequence (sandbox side, all in the new mount namespace):
 *  1. make every mount private: nothing propagates back to the host;
 *  2. clone each host source with open_tree() *before* anything is
 *     overmounted, and set its attributes (ro, nosuid, nodev) on the
 *     detached tree, recursively (mount_setattr), so submounts of a
 *     read-only bind are read-only too;
 *  3. mount a fresh tmpfs over /tmp as the new root, create mount points
 *     with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) and attach each
 *     clone by fd (move_mount): no path is checked and then used;
 *  4. fresh /proc of the pid namespace with sensitive entries masked or
 *     read-only, a minimal /dev, private /tmp and /dev/shm;
 *  5. make the root tmpfs read-only, pivot_root into it and detach the old
 *     root, so nothing of the host but the named binds stays reachable. */
#include "aj_mount.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/utsname.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"

/* ---- supervisor side: the plan ----------------------------------------- */

static int plan_push(struct aj_mount_plan *plan, struct aj_mnt_entry e, struct aj_error *err)
{
    struct aj_mnt_entry *ne = realloc(plan->entries, (plan->n + 1) * sizeof(*ne));
    if (!ne) {
        free(e.src);
        free(e.dst);
        free(e.content);
        return aj_err(err, ENOMEM, "mount plan");
    }
    plan->entries = ne;
    e.hostfd = e.idmap_fd = -1;
    plan->entries[plan->n++] = e;
    return 0;
}

static int plan_add(struct aj_mount_plan *plan, enum aj_mnt_kind kind, const char *src, const char *dst,
                    bool rw, bool optional, struct aj_error *err)
{
    struct aj_mnt_entry e = {.kind = kind, .rw = rw, .optional = optional};
    e.src = src ? strdup(src) : NULL;
    e.dst = strdup(dst);
    if ((src && !e.src) || !e.dst) {
        free(e.src);
        free(e.dst);
        return aj_err(err, ENOMEM, "mount plan");
    }
    return plan_push(plan, e, err);
}

static int plan_add_file(struct aj_mount_plan *plan, const char *dst, char *content,
                         struct aj_error *err)
{
    struct aj_mnt_entry e = {.kind = AJ_MNT_FILE, .content = content};
    if (!content)
        return aj_err(err, ENOMEM, "generate %s", dst);
    e.content_len = strlen(content);
    e.dst = strdup(dst);
    if (!e.dst) {
        free(content);
        return aj_err(err, ENOMEM, "mount plan");
    }
    return plan_push(plan, e, err);
}

/* A system path: replicate it if it is a symlink (merged /usr: /bin ->
 * usr/bin), bind it read-only if it is a directory or file, skip it if
 * absent. The target of a replicated symlink is inside the sandbox view. */
static int plan_add_system(struct aj_mount_plan *plan, const char *path, struct aj_error *err)
{
    struct stat st;
    char target[4096];
    ssize_t n;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : aj_err(err, errno, "stat %s", path);
    if (S_ISLNK(st.st_mode)) {
        n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
            return aj_err(err, errno, "readlink %s", path);
        target[n] = '\0';
        return plan_add(plan, AJ_MNT_SYMLINK, target, path, false, false, err);
    }
    return plan_add(plan, AJ_MNT_BIND, path, path, false, true, err);
}

/* The host /etc entries a sandbox sees, read-only: configuration that
 * programs need and that holds no secret (docs/security-model.md lists
 * them, and what is never shown: aj_etc_never). Absent ones are skipped.
 * Patterns name versioned directories (java-17-openjdk, python3.11). */
static const char *const etc_allowed[] = {
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
    "services", "protocols", "rpc", "networks", "ethertypes", "gai.conf", "host.conf",
    "mime.types", "mailcap", "magic", "magic.mime", "papersize", "locale.alias",
    "os-release", "debian_version", "lsb-release", "issue",
    "fonts", "matplotlibrc", "java-*", "python3*", "perl", "R", "ImageMagick-*", "gtk-3.0",
    "bash.bashrc", "inputrc", "profile", "vim", "nanorc", "xdg", "manpath.config", "gprofng.rc",
    "gdb", "libnl-3", "iproute2",
};

/* What agentjail generates under /etc (passwd, group, hosts, hostname,
 * nsswitch.conf, resolv.conf) is never bound from the host; a policy's
 * --bind-ro may add other /etc entries (src/lib/policy/model.c keeps the generated
 * names out). */

bool aj_mount_is_host_etc(const char *path)
{
    if (strncmp(path, "/etc/", 5) != 0)
        return false;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(etc_allowed); i++)
        if (fnmatch(etc_allowed[i], path + 5, FNM_PATHNAME) == 0)
            return true;
    return false;
}

/* /etc is listed once for every pattern (it used to be read again for
 * each: four listings of ~200 names per sandbox). */
static int plan_add_host_etc(struct aj_mount_plan *plan, struct aj_error *err)
{
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool listed = false;
    int r = 0;

    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(etc_allowed); i++) {
        const char *name = etc_allowed[i];
        char path[PATH_MAX];
        if (!strchr(name, '*')) {
            snprintf(path, sizeof(path), "/etc/%s", name);
            r = plan_add_system(plan, path, err);
            continue;
        }
        if (!listed) {
            DIR *d = opendir("/etc");
            struct dirent *de;
            listed = true;
            while (d && (de = readdir(d))) {
                if (de->d_name[0] == '.')
                    continue;
                if (n == cap) {
                    char **nn = realloc(names, (cap ? cap * 2 : 256) * sizeof(*names));
                    if (!nn) {
                        r = aj_err(err, ENOMEM, "list /etc");
                        break;
                    }
                    names = nn;
                    cap = cap ? cap * 2 : 256;
                }
                names[n] = strdup(de->d_name);
                if (!names[n]) {
                    r = aj_err(err, ENOMEM, "list /etc");
                    break;
                }
                n++;
            }
            if (d)
                closedir(d);
        }
        for (size_t j = 0; r == 0 && j < n; j++)
            if (fnmatch(name, names[j], 0) == 0) {
                snprintf(path, sizeof(path), "/etc/%s", names[j]);
                r = plan_add_system(plan, path, err);
            }
    }
    for (size_t j = 0; j < n; j++)
        free(names[j]);
    free(names);
    return r;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static int cmp_entry_dst(const void *a, const void *b)
{
    return strcmp(((const struct aj_mnt_entry *)a)->dst, ((const struct aj_mnt_entry *)b)->dst);
}

void aj_mount_plan_set_scratch_size(struct aj_mount_plan *plan, uint64_t size)
{
    plan->shm_size = size;
    for (size_t i = 0; i < plan->n; i++)
        if (plan->entries[i].kind == AJ_MNT_TMPFS && plan->entries[i].scratch)
            plan->entries[i].size = size;
}

int aj_mount_plan_build(const struct aj_policy *pol, struct aj_mount_plan *ret, struct aj_error *err)
{
    static const char *const system_paths[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                               "/lib32", "/lib64", "/libx32"};
    static const char *const dev_nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                            "/dev/urandom", "/dev/tty"};
    const char *host = pol->hostname ? pol->hostname : AJ_DEFAULT_HOSTNAME;
    struct aj_mount_plan plan = {0};
    size_t user_start;
    bool tmp_listed = false;
    int r = 0;

    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(system_paths); i++)
        r = plan_add_system(&plan, system_paths[i], err);
    if (r == 0)
        r = plan_add_host_etc(&plan, err);
    /* A generated /etc, never the host's: no shadow, no ssh keys, no
     * sudoers, no cloud-init secrets, just what name lookups need. */
    if (r == 0)
        r = plan_add_file(&plan, "/etc/passwd",
                          pol->uid == 0
                              ? xasprintf("root:x:0:%u:root:/tmp:/bin/sh\n"
                                          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                                          pol->gid)
                              : xasprintf("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                          "agent:x:%u:%u:agent:/tmp:/bin/sh\n"
                                          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                                          pol->uid, pol->gid),
                          err);
    if (r == 0)
        r = plan_add_file(&plan, "/etc/group",
                          pol->gid == 0 ? xasprintf("root:x:0:\nnogroup:x:65534:\n")
                                        : xasprintf("root:x:0:\nagent:x:%u:\nnogroup:x:65534:\n", pol->gid),
                          err);
    if (r == 0)
        r = plan_add_file(&plan, "/etc/hosts",
                          xasprintf("127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost %s\n", host, host),
                          err);
    if (r == 0)
        r = plan_add_file(&plan, "/etc/hostname", xasprintf("%s\n", host), err);
    if (r == 0)
        r = plan_add_file(&plan, "/etc/nsswitch.conf",
                          xasprintf("passwd: files\ngroup: files\nshadow: files\nhosts: files\n"
                                    "networks: files\nprotocols: files\nservices: files\n"),
                          err);
    if (r == 0)
        r = plan_add_file(&plan, "/etc/resolv.conf", xasprintf("# no DNS inside agentjail\n"), err);
    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(dev_nodes); i++)
        r = plan_add(&plan, AJ_MNT_DEV, dev_nodes[i], dev_nodes[i], true, false, err);
    if (r < 0)
        goto fail;

    /* The policy's own mounts, parents before children. */
    user_start = plan.n;
    for (size_t i = 0; r == 0 && i < pol->n_binds; i++) {
        r = plan_add(&plan, AJ_MNT_BIND, pol->binds[i].host, pol->binds[i].sandbox, pol->binds[i].rw,
                     false, err);
        if (r == 0 && pol->binds[i].rw && pol->binds[i].owner_set) {
            plan.entries[plan.n - 1].owner_set = true;
            plan.entries[plan.n - 1].owner_uid = pol->binds[i].owner_uid;
            plan.entries[plan.n - 1].owner_gid = pol->binds[i].owner_gid;
        }
        /* A bind at /tmp is the user's /tmp: the default tmpfs on top of it
         * would silently hide it (and catch every write meant for it). */
        if (strcmp(pol->binds[i].sandbox, "/tmp") == 0)
            tmp_listed = true;
    }
    for (size_t i = 0; r == 0 && i < pol->n_tmpfs; i++) {
        r = plan_add(&plan, AJ_MNT_TMPFS, NULL, pol->tmpfs[i].path, true, false, err);
        if (r == 0) {
            plan.entries[plan.n - 1].size = pol->tmpfs[i].size;
            plan.entries[plan.n - 1].noexec = pol->noexec_tmp;
        }
        if (strcmp(pol->tmpfs[i].path, "/tmp") == 0)
            tmp_listed = true;
    }
    if (r == 0 && !tmp_listed) {
        r = plan_add(&plan, AJ_MNT_TMPFS, NULL, "/tmp", true, false, err);
        if (r == 0) {
            plan.entries[plan.n - 1].size = aj_policy_tmp_size(pol, false);
            plan.entries[plan.n - 1].noexec = pol->noexec_tmp;
            plan.entries[plan.n - 1].scratch = true;
        }
    }
    if (r < 0)
        goto fail;
    plan.shm_size = aj_policy_tmp_size(pol, false);
    qsort(plan.entries + user_start, plan.n - user_start, sizeof(*plan.entries), cmp_entry_dst);
    plan.src_fds = calloc(plan.n, sizeof(int));
    if (!plan.src_fds) {
        r = aj_err(err, ENOMEM, "mount plan");
        goto fail;
    }
    *ret = plan;
    return 0;
fail:
    aj_mount_plan_clear(&plan);
    return r;
}

static int grow_fds(struct aj_mount_plan *plan, struct aj_error *err)
{
    int *fds = realloc(plan->src_fds, plan->n * sizeof(int));
    if (!fds)
        return aj_err(err, ENOMEM, "mount plan");
    plan->src_fds = fds;
    return 0;
}

int aj_mount_plan_add_tmpfs(struct aj_mount_plan *plan, const char *dst, uint64_t size, const char *mode,
                            struct aj_error *err)
{
    int r = plan_add(plan, AJ_MNT_TMPFS, NULL, dst, true, false, err);
    if (r == 0) {
        plan->entries[plan->n - 1].size = size;
        plan->entries[plan->n - 1].mode = mode;
        plan->entries[plan->n - 1].noexec = true;
        r = grow_fds(plan, err);
    }
    return r;
}

int aj_mount_plan_add_file(struct aj_mount_plan *plan, const char *dst, const char *content, struct aj_error *err)
{
    char *copy = strdup(content);
    int r;

    if (!copy)
        return aj_err(err, ENOMEM, "mount plan");
    r = plan_add_file(plan, dst, copy, err);
    return r < 0 ? r : grow_fds(plan, err);
}

void aj_mount_plan_clear(struct aj_mount_plan *plan)
{
    if (!plan)
        return;
    aj_mount_plan_drop_hostfds(plan);
    aj_mount_plan_close_idmaps(plan);
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->entries[i].src);
        free(plan->entries[i].dst);
        free(plan->entries[i].content);
    }
    free(plan->entries);
    free(plan->src_fds);
    plan->entries = NULL;
    plan->src_fds = NULL;
    plan->n = 0;
}

/* A bind source is cloned with its submounts (recursive: the host's mounts
 * are locked together in a user namespace). The check on the opened
 * source (check_bind_source) sees only its top; a procfs or sysfs mounted
 * somewhere below it would come along. Refuse such a source here, from
 * the supervisor's mount table, which the sandbox's is a copy of. */
static const char *const refused_fstypes[] = {
    "proc",      "sysfs",   "cgroup",   "cgroup2",   "debugfs",  "securityfs", "bpf",
    "tracefs",   "devpts",  "devtmpfs", "nsfs",      "efivarfs", "pstore",     "configfs",
    "fusectl",   "binfmt_misc",
};

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
            s[3] <= '7') {
            *o++ = (char)(((s[1] - '0') << 6) | ((s[2] - '0') << 3) | (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

int aj_mount_check_bind_submounts(const struct aj_policy *pol, struct aj_error *err)
{
    FILE *f;
    char *line = NULL;
    size_t cap = 0;
    int r = 0;

    if (pol->n_binds == 0)
        return 0;
    f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return aj_err(err, errno, "read /proc/self/mountinfo");
    while (r == 0 && getline(&line, &cap, f) > 0) {
        char mnt[4096], fstype[64];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 || sscanf(sep + 3, "%63s", fstype) != 1)
            continue;
        unescape_octal(mnt);
        for (size_t k = 0; k < AJ_ARRAY_SIZE(refused_fstypes); k++) {
            if (strcmp(fstype, refused_fstypes[k]) != 0)
                continue;
            for (size_t i = 0; i < pol->n_binds; i++) {
                char *real = realpath(pol->binds[i].host, NULL);
                size_t n = real ? strlen(real) : 0;
                bool under = real && strncmp(mnt, real, n) == 0 && (mnt[n] == '/' || (n == 1 && real[0] == '/'));
                if (under)
                    r = aj_err(err, 0,
                               "%s %s: the host has a %s mount inside it (%s), which would come along into "
                               "the sandbox; bind a path without it",
                               pol->binds[i].rw ? "--bind-rw" : "--bind-ro", pol->binds[i].host, fstype, mnt);
                free(real);
                if (r < 0)
                    break;
            }
            break;
        }
    }
    free(line);
    fclose(f);
    return r;
}

/* ---- sandbox side ---------------------------------------------------------- */

/* The oldest kernel the mount layer runs on is 5.12 (mount_setattr); an
 * older one gets the feature and the version named, not a bare ENOSYS. */
static int kernel_lacks(struct aj_error *err, const char *call, const char *since, const char *what)
{
    return aj_err(err, ENOSYS, "%s: this kernel has no %s() (Linux %s or later is needed for agentjail's "
                  "mount layer)", what, call, since);
}

static int set_tree_attrs(int fd, uint64_t attrs, struct aj_error *err, const char *what)
{
    struct aj_mount_attr a = {.attr_set = attrs};
    if (aj_sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &a) < 0) {
        if (errno == ENOSYS)
            return kernel_lacks(err, "mount_setattr", "5.12", what);
        return aj_err(err, errno, "set mount attributes on %s", what);
    }
    return 0;
}

static int attach(int srcfd, int rootfd, const char *dst, bool is_file, struct aj_error *err)
{
    _cleanup_close_ int dfd = aj_mkdir_beneath(rootfd, dst, is_file, err);
    if (dfd < 0)
        return aj_err_prefix(err, dfd, "mount point %s", dst);
    if (aj_sys_move_mount(srcfd, "", dfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return aj_err(err, errno, "attach %s", dst);
    return 0;
}

/* The directory the previous bind's mount point was made in, kept for the
 * next bind in the same directory: the host /etc view attaches ~40
 * entries side by side, and each walked from the new root again (a
 * mkdirat and an openat2 per component). The final component is made and
 * opened as attach does (beneath the kept directory, no symlink). Kept only
 * while nothing else is mounted: a mount at a direct child of the kept
 * directory cannot cover it, any other mount (a tmpfs entry) drops it. */
struct mp_dir {
    char path[4096];
    int fd;
};

static void mp_dir_drop(struct mp_dir *d)
{
    if (d->fd >= 0)
        (void)close(d->fd);
    d->fd = -1;
}

static int attach_in(struct mp_dir *d, int srcfd, int rootfd, const char *dst, bool is_file, struct aj_error *err)
{
    const char *slash = strrchr(dst, '/');
    size_t plen = slash ? (size_t)(slash - dst) : 0;
    const char *name = slash ? slash + 1 : dst;
    _cleanup_close_ int mp = -1;

    if (!*name || plen >= sizeof(d->path)) {
        mp_dir_drop(d);
        return attach(srcfd, rootfd, dst, is_file, err);
    }
    if (d->fd < 0 || strlen(d->path) != plen || memcmp(d->path, dst, plen) != 0) {
        int fd;
        mp_dir_drop(d);
        memcpy(d->path, dst, plen);
        d->path[plen] = '\0';
        fd = aj_mkdir_beneath(rootfd, d->path, false, err);
        if (fd < 0)
            return aj_err_prefix(err, fd, "mount point %s", dst);
        d->fd = fd;
    }
    mp = aj_mkdir_beneath(d->fd, name, is_file, err);
    if (mp < 0)
        return aj_err_prefix(err, mp, "mount point %s", dst);
    if (aj_sys_move_mount(srcfd, "", mp, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return aj_err(err, errno, "attach %s", dst);
    return 0;
}

static int new_fs(const char *type, const char *size, const char *mode, uint64_t attrs,
                  struct aj_error *err)
{
    _cleanup_close_ int fsfd = aj_sys_fsopen(type, AJ_FSOPEN_CLOEXEC);
    int mfd;

    if (fsfd < 0)
        return errno == ENOSYS ? kernel_lacks(err, "fsopen", "5.2", type) : aj_err(err, errno, "fsopen %s", type);
    /* Named as Docker's and the distributions' own mounts are ("tmpfs
     * tmpfs", "proc proc" in mountinfo), not "none": one less sign, to a
     * payload reading mountinfo, of which runtime built its root. */
    if (aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "source", type, 0) < 0)
        return aj_err(err, errno, "%s source", type);
    if (size && aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "size", size, 0) < 0)
        return aj_err(err, errno, "%s size=%s", type, size);
    if (mode && aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "mode", mode, 0) < 0)
        return aj_err(err, errno, "%s mode=%s", type, mode);
    if (aj_sys_fsconfig(fsfd, AJ_FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return aj_err(err, errno, "create %s", type);
    mfd = aj_sys_fsmount(fsfd, AJ_FSMOUNT_CLOEXEC, (unsigned int)attrs);
    if (mfd < 0)
        return aj_err(err, errno, "fsmount %s", type);
    return mfd;
}

static int mount_tmpfs_at(int rootfd, const char *dst, uint64_t size, const char *mode, bool noexec,
                          struct aj_error *err)
{
    char sz[32];
    _cleanup_close_ int mfd = -1;

    (void)snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
    mfd = new_fs("tmpfs", sz, mode,
                 AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NODEV | (noexec ? AJ_MOUNT_ATTR_NOEXEC : 0), err);
    if (mfd < 0)
        return aj_err_prefix(err, mfd, "tmpfs %s", dst);
    return attach(mfd, rootfd, dst, false, err);
}

/* /proc entries that leak host state or accept writes that reach the host
 * kernel. Masked: replaced by an empty read-only file or directory.
 * Read-only: visible, not writable (same lists as Docker/runc, plus
 * kallsyms: kernel addresses help an exploit beat KASLR). */
static const char *const proc_masked[] = {
    "proc/kcore",        "proc/kallsyms",   "proc/keys",        "proc/timer_list",
    "proc/sched_debug",  "proc/latency_stats", "proc/timer_stats", "proc/acpi",
    "proc/asound",       "proc/scsi",       "proc/sysvipc",     "proc/config.gz",
    "proc/kpagecount",   "proc/kpageflags", "proc/kpagecgroup", "proc/vmallocinfo",
    /* Every lock on the host, OFD ones with their inode: agentjail's own
     * per-run uid slot locks, so every live run (and its slot) shows. */
    "proc/locks",
};
/* Host identity an exploit uses to pick its target or to recognise the
 * host again: replaced by plausible per-run values (a file of the mask
 * source), not an empty file that itself says "masked". */
static const struct {
    const char *path, *source;
} proc_faked[] = {
    {"proc/cmdline", "cmdline"},                  /* boot options: mitigations, init, hypervisor */
    {"proc/sys/kernel/random/boot_id", "boot_id"}, /* one id per host boot, shared by every run */
};
static const char *const proc_readonly[] = {"proc/sys", "proc/sysrq-trigger", "proc/bus",
                                            "proc/fs", "proc/irq"};

#define MASK_SOURCE_DIR ".agentjail-masks"

/* Relative to the new root (no path outside it is looked up): detach the
 * mask source and remove its mount point. */
static int detach_mask_source(int rootfd, struct aj_error *err)
{
    if (fchdir(rootfd) < 0)
        return aj_err(err, errno, "chdir new root");
    if (umount2(MASK_SOURCE_DIR, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
        return aj_err(err, errno, "detach the mask source");
    if (unlinkat(rootfd, MASK_SOURCE_DIR, AT_REMOVEDIR) < 0)
        return aj_err(err, errno, "remove the mask source's mount point");
    return 0;
}

/* A random version 4 UUID, as the kernel formats boot_id. */
static int random_uuid(char out[37])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t b[16];
    size_t o = 0;

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return -1;
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    for (size_t i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[b[i] >> 4];
        out[o++] = hex[b[i] & 15];
    }
    out[o] = '\0';
    return 0;
}

static int write_file_at(int dirfd, const char *name, const char *text, struct aj_error *err)
{
    _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);

    if (fd < 0)
        return aj_err(err, errno, "mask file %s", name);
    if (aj_write_all(fd, text, strlen(text)) < 0)
        return aj_err(err, errno, "write mask file %s", name);
    return 0;
}

/* The sandbox's own boot: a fresh boot id, and a command line as a stock
 * distribution kernel of this release would have (nothing of the host's:
 * its mitigations=, init=, hypervisor and console options). Runs in init,
 * after clone: no malloc, stack buffers only. */
static int write_fake_proc_files(int dirfd, struct aj_error *err)
{
    struct utsname u;
    char uuid[37], root_uuid[37], line[384];
    int r;

    if (uname(&u) < 0)
        return aj_err(err, errno, "uname");
    if (random_uuid(uuid) < 0 || random_uuid(root_uuid) < 0)
        return aj_err(err, errno ? errno : EIO, "getrandom");
    r = snprintf(line, sizeof(line), "BOOT_IMAGE=/boot/vmlinuz-%s root=UUID=%s ro quiet\n", u.release, root_uuid);
    if (r < 0 || (size_t)r >= sizeof(line))
        return aj_err(err, ENAMETOOLONG, "fake /proc/cmdline");
    r = write_file_at(dirfd, "cmdline", line, err);
    if (r < 0)
        return r;
    r = snprintf(line, sizeof(line), "%s\n", uuid);
    if (r < 0 || (size_t)r >= sizeof(line))
        return aj_err(err, EIO, "fake boot_id");
    return write_file_at(dirfd, "boot_id", line, err);
}

static int setup_proc(int rootfd, struct aj_error *err)
{
    _cleanup_close_ int procfd = -1, emptyfs = -1;
    int r;

    procfd = new_fs("proc", NULL, NULL, AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NODEV | AJ_MOUNT_ATTR_NOEXEC,
                    err);
    if (procfd < 0)
        return aj_err_prefix(err, procfd, "/proc");
    r = attach(procfd, rootfd, "proc", false, err);
    if (r < 0)
        return r;

    /* A read-only tmpfs holding one empty file and one empty dir, the
     * source of every mask, and the fake files of proc_faked. */
    emptyfs = new_fs("tmpfs", "16384", "0555", AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NODEV | AJ_MOUNT_ATTR_NOEXEC,
                     err);
    if (emptyfs < 0)
        return aj_err_prefix(err, emptyfs, "mask source");
    if (mkdirat(emptyfs, "d", 0555) < 0)
        return aj_err(err, errno, "mask dir");
    {
        int fd = openat(emptyfs, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
        if (fd < 0)
            return aj_err(err, errno, "mask file");
        (void)close(fd);
    }
    r = write_fake_proc_files(emptyfs, err);
    if (r < 0)
        return r;
    /* Before 6.15, open_tree(OPEN_TREE_CLONE) refuses (EINVAL) to clone
     * from a mount that is not attached to the caller's namespace, and
     * fsmount() gives a detached one. So the source is attached first, at
     * a hidden dir of the new root, and detached again (with its dir
     * removed) before the root is made read-only: the payload never sees
     * it. The masks are clones, independent of the source mount. */
    r = attach(emptyfs, rootfd, MASK_SOURCE_DIR, false, err);
    if (r < 0)
        return aj_err_prefix(err, r, "mask source");
    for (size_t i = 0; i < AJ_ARRAY_SIZE(proc_masked) + AJ_ARRAY_SIZE(proc_faked); i++) {
        bool faked = i >= AJ_ARRAY_SIZE(proc_masked);
        const char *path = faked ? proc_faked[i - AJ_ARRAY_SIZE(proc_masked)].path : proc_masked[i];
        struct aj_open_how how = {.flags = O_PATH | O_CLOEXEC,
                                  .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int target = aj_sys_openat2(rootfd, path, &how);
        _cleanup_close_ int src = -1;
        struct stat st;

        if (target < 0) {
            if (errno == ENOENT)
                continue; /* this kernel has no such entry */
            return aj_err(err, errno, "open %s", path);
        }
        if (fstat(target, &st) < 0)
            return aj_err(err, errno, "stat %s", path);
        src = aj_sys_open_tree(emptyfs,
                               faked ? proc_faked[i - AJ_ARRAY_SIZE(proc_masked)].source
                                     : S_ISDIR(st.st_mode) ? "d" : "f",
                               OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (src < 0)
            return aj_err(err, errno, "clone mask for %s", path);
        r = set_tree_attrs(src, AJ_MOUNT_ATTR_RDONLY, err, path);
        if (r < 0)
            return r;
        if (aj_sys_move_mount(src, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
            return aj_err(err, errno, "mask %s", path);
    }
    r = detach_mask_source(rootfd, err);
    if (r < 0)
        return r;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(proc_readonly); i++) {
        struct aj_open_how how = {.flags = O_PATH | O_CLOEXEC,
                                  .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int target = aj_sys_openat2(rootfd, proc_readonly[i], &how);
        _cleanup_close_ int src = -1;

        if (target < 0) {
            if (errno == ENOENT)
                continue;
            return aj_err(err, errno, "open %s", proc_readonly[i]);
        }
        src = aj_sys_open_tree(target, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
        if (src < 0)
            return aj_err(err, errno, "clone %s", proc_readonly[i]);
        r = set_tree_attrs(src, AJ_MOUNT_ATTR_RDONLY | AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NODEV |
                                    AJ_MOUNT_ATTR_NOEXEC,
                           err, proc_readonly[i]);
        if (r < 0)
            return r;
        if (aj_sys_move_mount(src, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
            return aj_err(err, errno, "make %s read-only", proc_readonly[i]);
    }
    return 0;
}

/* /dev/pts: a devpts instance of the sandbox's own (every devpts mount is
 * a new instance since 4.7), and /dev/ptmx pointing into it: os.openpty,
 * pty.spawn, script and REPL drivers work, and no pty of the host (or of
 * another sandbox) is there to open. TIOCSTI, TIOCLINUX and the other
 * terminal-injection ioctls stay refused by the filter. */
static int mount_devpts(int rootfd, int devfd, struct aj_error *err)
{
    _cleanup_close_ int fsfd = aj_sys_fsopen("devpts", AJ_FSOPEN_CLOEXEC);
    _cleanup_close_ int mfd = -1;
    int r;

    if (fsfd < 0)
        return errno == ENOSYS ? kernel_lacks(err, "fsopen", "5.2", "devpts") : aj_err(err, errno, "fsopen devpts");
    if (aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "source", "devpts", 0) < 0 ||
        aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "ptmxmode", "0666", 0) < 0 ||
        aj_sys_fsconfig(fsfd, AJ_FSCONFIG_SET_STRING, "mode", "0620", 0) < 0 ||
        aj_sys_fsconfig(fsfd, AJ_FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return aj_err(err, errno, "create the sandbox's devpts");
    mfd = aj_sys_fsmount(fsfd, AJ_FSMOUNT_CLOEXEC, AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NOEXEC);
    if (mfd < 0)
        return aj_err(err, errno, "fsmount devpts");
    r = attach(mfd, rootfd, "dev/pts", false, err);
    if (r < 0)
        return r;
    if (symlinkat("pts/ptmx", devfd, "ptmx") < 0)
        return aj_err(err, errno, "symlink /dev/ptmx");
    return 0;
}

static int setup_dev(const struct aj_mount_plan *plan, int rootfd, uint64_t shm_size, bool noexec,
                     struct aj_error *err)
{
    static const struct {
        const char *name, *target;
    } links[] = {{"fd", "/proc/self/fd"},
                 {"stdin", "/proc/self/fd/0"},
                 {"stdout", "/proc/self/fd/1"},
                 {"stderr", "/proc/self/fd/2"}};
    _cleanup_close_ int devfd = -1;
    int r;

    r = mount_tmpfs_at(rootfd, "dev", 65536, "0755", true, err);
    if (r < 0)
        return r;
    for (size_t i = 0; i < plan->n; i++) {
        if (plan->entries[i].kind != AJ_MNT_DEV)
            continue;
        r = attach(plan->src_fds[i], rootfd, plan->entries[i].dst + 1, true, err);
        if (r < 0)
            return r;
    }
    devfd = openat(rootfd, "dev", O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (devfd < 0)
        return aj_err(err, errno, "open /dev");
    for (size_t i = 0; i < AJ_ARRAY_SIZE(links); i++)
        if (symlinkat(links[i].target, devfd, links[i].name) < 0)
            return aj_err(err, errno, "symlink /dev/%s", links[i].name);
    r = mount_devpts(rootfd, devfd, err);
    if (r < 0)
        return r;
    /* Private /dev/shm: POSIX shared memory of one sandbox is invisible to
     * every other sandbox and to the host. */
    return mount_tmpfs_at(rootfd, "dev/shm", shm_size, "1777", noexec, err);
}

static int split_parent(int rootfd, const char *dst, char *name, size_t name_size, struct aj_error *err)
{
    char parent[4096];
    const char *slash = strrchr(dst, '/');
    size_t plen;

    if (!slash) {
        if (strlen(dst) >= name_size)
            return aj_err(err, ENAMETOOLONG, "%s", dst);
        strcpy(name, dst);
        return aj_mkdir_beneath(rootfd, "", false, err);
    }
    if (strlen(slash + 1) >= name_size)
        return aj_err(err, EINVAL, "bad sandbox path %s", dst);
    plen = (size_t)(slash - dst);
    if (plen >= sizeof(parent))
        return aj_err(err, ENAMETOOLONG, "%s", dst);
    memcpy(parent, dst, plen);
    parent[plen] = '\0';
    strcpy(name, slash + 1);
    return aj_mkdir_beneath(rootfd, parent, false, err);
}

/* Filesystems that are the host's kernel or its other processes, never a
 * bind source. Checked on what the source resolved to, by fd: the policy
 * check on the path alone is fooled by a symlink to /proc. */
static const struct {
    unsigned long magic;
    const char *name;
} refused_fs[] = {
    {0x9fa0, "proc"},           {0x62656572, "sysfs"},      {0x27e0eb, "cgroup"},
    {0x63677270, "cgroup2"},    {0x64626720, "debugfs"},    {0x73636673, "securityfs"},
    {0xcafe4a11, "bpf"},        {0x74726163, "tracefs"},    {0x1cd1, "devpts"},
    {0x6e736673, "nsfs"},       {0xde5e81e4, "efivarfs"},   {0x6165676c, "pstore"},
    {0x62656570, "configfs"},   {0x65735543, "fusectl"},    {0x42494e4d, "binfmt_misc"},
};

/* The host's root and /dev, looked up once per resolve (or clone_sources)
 * instead of once per source: the host /etc view alone has ~40. */
struct host_ids {
    bool root_ok, dev_ok;
    struct stat root, dev;
};

static void host_ids_get(struct host_ids *h)
{
    h->root_ok = stat("/", &h->root) == 0;
    h->dev_ok = stat("/dev", &h->dev) == 0;
}

static int check_bind_source(int fd, const char *path, const struct host_ids *h, struct aj_error *err)
{
    struct statfs sfs;
    struct stat st;

    if (fstatfs(fd, &sfs) < 0 || fstat(fd, &st) < 0)
        return aj_err(err, errno, "bind source %s", path);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(refused_fs); i++)
        if ((unsigned long)sfs.f_type == refused_fs[i].magic)
            return aj_err(err, 0, "bind source %s is on the host's %s filesystem; refused (it would expose the "
                          "host kernel or its processes)", path, refused_fs[i].name);
    if (S_ISBLK(st.st_mode) || S_ISCHR(st.st_mode))
        return aj_err(err, 0, "bind source %s is a device node; refused", path);
    /* The host's root, or its /dev (devtmpfs looks like any tmpfs). */
    if (h->root_ok && st.st_dev == h->root.st_dev && st.st_ino == h->root.st_ino)
        return aj_err(err, 0, "bind source %s is the host's root directory; refused", path);
    if (h->dev_ok && st.st_dev == h->dev.st_dev)
        return aj_err(err, 0, "bind source %s is in the host's /dev; refused", path);
    return 0;
}

static int clone_sources(const struct aj_mount_plan *plan, struct aj_error *err)
{
    struct host_ids host;

    host_ids_get(&host);
    for (size_t i = 0; i < plan->n; i++) {
        const struct aj_mnt_entry *e = &plan->entries[i];
        uint64_t attrs = AJ_MOUNT_ATTR_NOSUID;
        struct aj_devino id;
        struct stat st;
        int fd, r;

        plan->src_fds[i] = -1;
        if (e->kind != AJ_MNT_BIND && e->kind != AJ_MNT_DEV)
            continue;
        if (e->absent)
            continue; /* optional, and missing when the supervisor looked */
        if (e->idmap_fd >= 0) {
            /* Made by the supervisor from the source it resolved (the
             * workspace's id-mapped tree, with nosuid and nodev): this
             * process's copy of the fd is attached as it is. */
            plan->src_fds[i] = e->idmap_fd;
            r = check_bind_source(e->idmap_fd, e->src, &host, err);
            if (r < 0)
                return r;
            continue;
        }
        /* The supervisor resolved the source (aj_mount_plan_resolve); here
         * it is resolved again, also without following a symlink, and
         * bound only if it is the very object the supervisor checked: a
         * file descriptor of the host's mount namespace cannot be cloned
         * from this one (open_tree refuses a mount of another namespace),
         * so the identity is what carries the check across. From here on
         * only the fd is used. */
        fd = aj_open_nofollow(e->src, O_PATH, 0);
        if (fd < 0) {
            if (e->optional && fd == -ENOENT)
                continue;
            r = aj_err(err, -fd, "bind source %s%s", e->src,
                       fd == -ELOOP ? " became a symlink while the sandbox started; refused" : "");
            if (fd == -ELOOP)
                err->exit_hint = 2;
            return r;
        }
        if (aj_devino_of(fd, &id) < 0 || !aj_devino_same(&id, &e->id)) {
            (void)close(fd);
            r = aj_err(err, 0, "bind source %s was replaced while the sandbox started (it is not what was "
                       "checked); refused", e->src);
            err->exit_hint = 2;
            return r;
        }
        plan->src_fds[i] = aj_sys_open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH |
                                                        (e->kind == AJ_MNT_BIND ? AT_RECURSIVE : 0));
        (void)close(fd);
        fd = plan->src_fds[i];
        if (fd < 0) {
            if (errno == ENOSYS)
                return kernel_lacks(err, "open_tree", "5.2", e->src);
            return aj_err(err, errno, "bind source %s", e->src);
        }
        if (e->kind == AJ_MNT_BIND)
            attrs |= AJ_MOUNT_ATTR_NODEV | (e->rw ? 0 : AJ_MOUNT_ATTR_RDONLY);
        else
            attrs |= AJ_MOUNT_ATTR_NOEXEC;
        r = set_tree_attrs(fd, attrs, err, e->src);
        if (r < 0)
            return r;
        if (e->kind == AJ_MNT_DEV) {
            /* Only character devices from the fixed list: a block device or
             * /dev/mem reached by a swapped path would be game over. */
            if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode))
                return aj_err(err, EINVAL, "%s is not a character device", e->src);
        } else {
            r = check_bind_source(fd, e->src, &host, err);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* ---- supervisor side: resolve the sources ------------------------------------ */

static int refuse(struct aj_error *err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(struct aj_error *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    char msg[sizeof(err->msg)];
    int r;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r = aj_err(err, errnum, "%s", msg);
    err->exit_hint = 2; /* bad input: nothing was started */
    return r;
}

/* Directories already walked up to the root by made_by_sandbox in one
 * aj_mount_plan_resolve, none of them (nor any above) a run uid's: the
 * host's /etc view alone binds dozens of entries of one directory, and
 * each walked /etc and / again. */
struct clean_dirs {
    size_t n;
    struct {
        dev_t dev;
        ino_t ino;
    } id[64];
};

static bool clean_has(const struct clean_dirs *c, const struct stat *st)
{
    for (size_t i = 0; c && i < c->n; i++)
        if (c->id[i].dev == st->st_dev && c->id[i].ino == st->st_ino)
            return true;
    return false;
}

static void clean_add(struct clean_dirs *c, const struct stat *st)
{
    if (c && c->n < sizeof(c->id) / sizeof(c->id[0]) && !clean_has(c, st)) {
        c->id[c->n].dev = st->st_dev;
        c->id[c->n].ino = st->st_ino;
        c->n++;
    }
}

/* Root mode: a directory or file a sandbox made is owned by one of the
 * run uids. The source or any directory above it being one means a run
 * chose what is there. Returns the owner found, or (uid_t)-1. The
 * directories found clean join *clean (may be NULL), and a walk that
 * reaches one of them stops there. */
static uid_t made_by_sandbox(int fd, uint32_t base, uint32_t count, struct clean_dirs *clean)
{
    _cleanup_close_ int cur = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    struct stat st, up, seen[64];
    size_t n_seen = 0;

    if (cur < 0 || count == 0 || fstat(cur, &st) < 0)
        return (uid_t)-1;
    for (int depth = 0; depth < 4096; depth++) {
        int parent;
        if (st.st_uid >= base && st.st_uid - base < count)
            return st.st_uid;
        if (!S_ISDIR(st.st_mode))
            return (uid_t)-1; /* a file: its directory is checked by the caller */
        if (clean_has(clean, &st))
            break;
        if (n_seen < sizeof(seen) / sizeof(seen[0]))
            seen[n_seen++] = st;
        parent = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (parent < 0)
            return (uid_t)-1;
        (void)close(cur);
        cur = parent;
        if (fstat(cur, &up) < 0)
            return (uid_t)-1;
        if (up.st_dev == st.st_dev && up.st_ino == st.st_ino)
            break; /* the root */
        st = up;
    }
    /* Every directory from here up is clean (a walk cut short at 4096
     * levels or by a full list remembers only what it saw). */
    for (size_t i = 0; i < n_seen; i++)
        clean_add(clean, &seen[i]);
    return (uid_t)-1;
}

static const char *bind_flag(const struct aj_mnt_entry *e)
{
    return e->rw ? "--bind-rw" : "--bind-ro";
}

static int refuse_made_by_sandbox(struct aj_error *err, const struct aj_mnt_entry *e, uid_t owner)
{
    return refuse(err, 0,
                  "%s %s: it (or a directory above it) is owned by host uid %u, one of the uids sandbox runs get: "
                  "a sandbox made it and could have planted what is there. Bind a path no sandbox made, or, if you "
                  "trust its contents, set filesystem.allow_bind_inside_writable (--allow-bind-inside-writable)",
                  bind_flag(e), e->src, (unsigned)owner);
}

int aj_mount_plan_resolve(struct aj_mount_plan *plan, const struct aj_policy *pol, const struct aj_bindreg *reg,
                          uint32_t run_uid_base, uint32_t run_uid_count, struct aj_error *err)
{
    struct clean_dirs clean = {0};
    struct aj_devino_memo outside_reg = {0}; /* directories with no writable bind source at or above them */
    struct host_ids host;
    /* The last directory (by path) found in this pass to lie outside every
     * writable bind and to be no sandbox's, up to the root: the host's /etc
     * view binds dozens of entries of one directory, and opening and
     * walking it again for each cost more system calls than the binds
     * themselves. No sandbox can replace a directory that passed, nor any
     * above it, in between: none is a writable bind, or a sandbox's. */
    char clean_dir[4096] = "";

    host_ids_get(&host);
    for (size_t i = 0; i < plan->n; i++) {
        struct aj_mnt_entry *e = &plan->entries[i];
        _cleanup_close_ int fd = -1, dirfd = -1;
        char name[256], dir[4096];
        uid_t owner;
        int r;

        if (e->kind != AJ_MNT_BIND && e->kind != AJ_MNT_DEV)
            continue;
        fd = aj_open_nofollow(e->src, O_PATH, 0);
        if (fd == -ELOOP && e->optional) {
            /* A system path (/usr, /etc/ssl/certs, ...; never a policy's
             * bind) with a symlink on the way, as some distributions have:
             * root's directories, which no sandbox writes. Resolved once
             * here, and both sides then use the real path. */
            char *real = realpath(e->src, NULL);
            if (real) {
                free(e->src);
                e->src = real;
                fd = aj_open_nofollow(e->src, O_PATH, 0);
            }
        }
        if (fd == -ENOENT && e->optional) {
            e->absent = true;
            continue;
        }
        if (fd == -ELOOP)
            return refuse(err, 0,
                          "%s %s: a component of the path is a symlink; bind sources are resolved without "
                          "following symlinks (one in a directory a sandbox could write may have been planted "
                          "to expose a host directory): pass the real path (realpath %s)",
                          bind_flag(e), e->src, e->src);
        if (fd < 0)
            return aj_err(err, -fd, "bind source %s", e->src);
        if (aj_devino_of(fd, &e->id) < 0)
            return aj_err(err, errno, "bind source %s", e->src);
        if (e->kind == AJ_MNT_DEV)
            continue;
        r = check_bind_source(fd, e->src, &host, err);
        if (r < 0)
            return r; /* a setup error (125), as when the sandbox side finds it */
        if (e->rw && e->hostfd < 0) {
            /* The workspace's id-mapped tree is cloned from this very fd
             * (aj_mount_parent_idmap): never resolved by path again. */
            e->hostfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
            if (e->hostfd < 0)
                return aj_err(err, errno, "bind source %s", e->src);
        }
        if (pol->allow_bind_inside_writable)
            continue;
        if (aj_hostpath_split(e->src, dir, sizeof(dir), name, sizeof(name)) < 0)
            dir[0] = '\0';
        if (dir[0] && strcmp(dir, clean_dir) == 0) {
            owner = made_by_sandbox(fd, run_uid_base, run_uid_count, &clean);
            if (owner != (uid_t)-1)
                return refuse_made_by_sandbox(err, e, owner);
            continue;
        }
        /* Inside a writable bind: its directory, or one above, is one. The
         * source itself may be one (a workspace bound again). */
        dirfd = aj_hostpath_open_parent(e->src, bind_flag(e), name, sizeof(name), err);
        if (dirfd < 0) {
            err->exit_hint = 2;
            return dirfd;
        }
        if (reg) {
            ssize_t k = aj_hostpath_find_ancestor_memo(dirfd, reg->id, reg->n, &outside_reg);
            if (k >= 0)
                return refuse(err, 0,
                              "%s %s lies inside %s, which a sandbox run was given to write (--bind-rw; the "
                              "registry of writable bind sources names it): that run could have planted what is "
                              "there. Bind a path outside every writable bind, or, if you trust its contents, "
                              "set filesystem.allow_bind_inside_writable (--allow-bind-inside-writable)",
                              bind_flag(e), e->src, reg->path[k]);
        }
        owner = made_by_sandbox(fd, run_uid_base, run_uid_count, &clean);
        if (owner == (uid_t)-1)
            owner = made_by_sandbox(dirfd, run_uid_base, run_uid_count, &clean);
        if (owner != (uid_t)-1)
            return refuse_made_by_sandbox(err, e, owner);
        (void)snprintf(clean_dir, sizeof(clean_dir), "%s", dir);
    }
    return 0;
}

/* Why an id-mapped tree could not be made: the message alone (the caller
 * names the bind), and -EOPNOTSUPP. */
static int no_idmap(struct aj_error *err, const char *why, int errnum)
{
    if (errnum)
        (void)aj_err(err, 0, "%s (%s)", why, strerrorname_np(errnum) ? strerrorname_np(errnum) : "?");
    else
        (void)aj_err(err, 0, "%s", why);
    err->errnum = EOPNOTSUPP;
    return -EOPNOTSUPP;
}

int aj_mount_parent_idmap(struct aj_mnt_entry *e, int userns_fd, struct aj_error *err)
{
    struct aj_mount_attr a = {.attr_set = AJ_MOUNT_ATTR_IDMAP | AJ_MOUNT_ATTR_NOSUID | AJ_MOUNT_ATTR_NODEV,
                              .userns_fd = (uint64_t)userns_fd};
    _cleanup_close_ int fd = -1;
    int e2;

    if (e->hostfd < 0)
        return aj_err(err, EBADF, "bind source %s was not resolved", e->src);
    fd = aj_sys_open_tree(e->hostfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    if (fd < 0) {
        e2 = errno;
        if (e2 == ENOSYS)
            return no_idmap(err, "this kernel has no open_tree (Linux 5.2 or later)", 0);
        if (e2 == EPERM)
            return no_idmap(err, "cloning it needs CAP_SYS_ADMIN over the host's mounts, which agentjail lacks "
                            "here (a container without it)", 0);
        return no_idmap(err, "cloning it failed", e2);
    }
    /* Recursive: a submount that cannot be id-mapped fails the whole
     * tree, never leaves part of the workspace with the run's own uid.
     * ENOSYS before 5.12; EINVAL from a filesystem without FS_ALLOW_IDMAP
     * (tmpfs before 6.3, overlayfs before 5.19, NFS, FUSE before 6.12). */
    if (aj_sys_mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &a) < 0) {
        e2 = errno;
        if (e2 == ENOSYS)
            return no_idmap(err, "this kernel has no id-mapped mounts (Linux 5.12 or later)", 0);
        if (e2 == EINVAL || e2 == EOPNOTSUPP)
            return no_idmap(err, "its filesystem (or one mounted inside it) has no id-mapped mounts", 0);
        if (e2 == EPERM)
            return no_idmap(err, "id-mapping it needs CAP_SYS_ADMIN in its filesystem's user namespace, which "
                            "agentjail lacks here (a container without it)", 0);
        return no_idmap(err, "id-mapping it failed", e2);
    }
    if (e->idmap_fd >= 0)
        (void)close(e->idmap_fd);
    e->idmap_fd = TAKE_FD(fd);
    return 0;
}

void aj_mount_plan_drop_hostfds(struct aj_mount_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++)
        if (plan->entries[i].hostfd >= 0) {
            (void)close(plan->entries[i].hostfd);
            plan->entries[i].hostfd = -1;
        }
}

void aj_mount_plan_close_idmaps(struct aj_mount_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++)
        if (plan->entries[i].idmap_fd >= 0) {
            (void)close(plan->entries[i].idmap_fd);
            plan->entries[i].idmap_fd = -1;
        }
}

int aj_mount_child_setup(const struct aj_mount_plan *plan, const struct aj_policy *pol,
                         struct aj_error *err)
{
    _cleanup_close_ int rootfd = -1;
    struct aj_mount_attr ro = {.attr_set = AJ_MOUNT_ATTR_RDONLY};
    struct mp_dir mpd = {.fd = -1};
    int r;

    for (size_t i = 0; i < plan->n; i++)
        plan->src_fds[i] = -1;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return aj_err(err, errno, "make / private");
    r = clone_sources(plan, err);
    if (r < 0)
        goto out;

    /* The new root: a small tmpfs over /tmp of this (private) namespace.
     * Every host source is already cloned, so hiding /tmp hides nothing. */
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=2m") < 0) {
        r = aj_err(err, errno, "mount root tmpfs");
        goto out;
    }
    rootfd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (rootfd < 0) {
        r = aj_err(err, errno, "open new root");
        goto out;
    }

    for (size_t i = 0; i < plan->n; i++) {
        const struct aj_mnt_entry *e = &plan->entries[i];
        char name[256];
        _cleanup_close_ int parent = -1;
        struct stat st;

        switch (e->kind) {
        case AJ_MNT_BIND:
            if (plan->src_fds[i] < 0)
                continue; /* optional and absent */
            if (fstat(plan->src_fds[i], &st) < 0) {
                r = aj_err(err, errno, "stat %s", e->src);
                goto out;
            }
            r = attach_in(&mpd, plan->src_fds[i], rootfd, e->dst + 1, !S_ISDIR(st.st_mode), err);
            break;
        case AJ_MNT_SYMLINK:
            parent = split_parent(rootfd, e->dst + 1, name, sizeof(name), err);
            if (parent < 0) {
                r = parent;
                goto out;
            }
            r = symlinkat(e->src, parent, name) < 0 ? aj_err(err, errno, "symlink %s", e->dst) : 0;
            break;
        case AJ_MNT_FILE:
            parent = split_parent(rootfd, e->dst + 1, name, sizeof(name), err);
            if (parent < 0) {
                r = parent;
                goto out;
            }
            /* An O_PATH fd is a valid dirfd for openat. */
            r = aj_write_file_at(parent, name, e->content, e->content_len, O_CREAT | O_EXCL, 0644, err);
            break;
        case AJ_MNT_TMPFS:
            mp_dir_drop(&mpd);
            r = mount_tmpfs_at(rootfd, e->dst + 1, e->size, e->mode ? e->mode : "1777", e->noexec, err);
            break;
        case AJ_MNT_DEV:
            continue; /* in setup_dev */
        }
        if (r < 0)
            goto out;
    }
    mp_dir_drop(&mpd);
    r = setup_proc(rootfd, err);
    if (r < 0)
        goto out;
    r = setup_dev(plan, rootfd, plan->shm_size, pol->noexec_tmp, err);
    if (r < 0)
        goto out;

    /* The root tmpfs itself: read-only from here on (binds keep their own). */
    if (aj_sys_mount_setattr(rootfd, "", AT_EMPTY_PATH, &ro) < 0) {
        r = aj_err(err, errno, "make the root read-only");
        goto out;
    }
    /* pivot_root(".", ".") stacks the old root under the new one; detaching
     * "." then drops the whole host tree from this namespace (no
     * /proc/1/root or .. walk can reach it). */
    if (fchdir(rootfd) < 0) {
        r = aj_err(err, errno, "chdir new root");
        goto out;
    }
    if (syscall(SYS_pivot_root, ".", ".") < 0) {
        r = aj_err(err, errno, "pivot_root");
        goto out;
    }
    if (umount2(".", MNT_DETACH) < 0) {
        r = aj_err(err, errno, "detach old root");
        goto out;
    }
    if (chdir("/") < 0) {
        r = aj_err(err, errno, "chdir /");
        goto out;
    }
    r = 0;
out:
    mp_dir_drop(&mpd);
    for (size_t i = 0; i < plan->n; i++)
        if (plan->src_fds[i] >= 0) {
            (void)close(plan->src_fds[i]);
            plan->src_fds[i] = -1;
        }
    return r;
}
