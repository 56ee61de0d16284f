/* SPDX-License-Identifier: Apache-2.0 */
/* Landlock rules that mirror the mount plan, so that even a bug in the
 * mount layer (or a degraded run without one) leaves the filesystem view
 * enforced: read+execute on the read-only tree, full access on the
 * writable places the policy named, nothing anywhere else. */
#include "aj_landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aj_hostpath.h"
#include "aj_missing.h"
#include "aj_result.h"
#include "aj_util.h"

int aj_landlock_abi(void)
{
    long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, AJ_LANDLOCK_CREATE_RULESET_VERSION);

    if (abi < 0)
        return 0;
    if (abi >= 6) {
        /* The feature, not the number: scoping (signals, abstract sockets)
         * is what degraded runs rely on, so confirm a scoped ruleset can be
         * made. A kernel (or a filter in front of it) that refuses one is
         * treated as ABI 5: the run then neither uses nor claims it. */
        struct aj_landlock_ruleset_attr attr = {.handled_access_fs = AJ_LL_FS_READ_FILE,
                                                .scoped = AJ_LL_SCOPE_ABSTRACT_UNIX_SOCKET | AJ_LL_SCOPE_SIGNAL};
        long fd = syscall(__NR_landlock_create_ruleset, &attr, sizeof(attr), 0);
        if (fd < 0)
            return 5;
        (void)close((int)fd);
    }
    return (int)abi;
}

static uint64_t fs_rights_for_abi(int abi)
{
    uint64_t all = (AJ_LL_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
    if (abi >= 2)
        all |= AJ_LL_FS_REFER;
    if (abi >= 3)
        all |= AJ_LL_FS_TRUNCATE;
    if (abi >= 5)
        all |= AJ_LL_FS_IOCTL_DEV;
    return all;
}

#define LL_READ (AJ_LL_FS_READ_FILE | AJ_LL_FS_READ_DIR)
#define LL_FILE_RIGHTS                                                                             \
    (AJ_LL_FS_EXECUTE | AJ_LL_FS_WRITE_FILE | AJ_LL_FS_READ_FILE | AJ_LL_FS_TRUNCATE |             \
     AJ_LL_FS_IOCTL_DEV)

static int add_rule_fd(int ruleset, int fd, const char *path, uint64_t access, uint64_t handled,
                       struct aj_error *err);

static int add_path_rule(int ruleset, const char *path, uint64_t access, uint64_t handled,
                         bool optional, struct aj_error *err)
{
    _cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);

    if (fd < 0) {
        if (optional && errno == ENOENT)
            return 0;
        return aj_err(err, errno, "landlock: open %s", path);
    }
    return add_rule_fd(ruleset, fd, path, access, handled, err);
}

/* Degraded mode: a bind is a rule on a host path. Resolved as the mount
 * layer resolves bind sources, without following a symlink (a sandbox
 * with a writable bind could have planted one to a host directory). */
static int add_host_bind_rule(int ruleset, const char *path, uint64_t access, uint64_t handled,
                              struct aj_error *err)
{
    _cleanup_close_ int fd = aj_open_nofollow(path, O_PATH, 0);

    if (fd < 0)
        return aj_err(err, -fd, "landlock: open %s%s", path,
                      fd == -ELOOP ? " (a component is a symlink: pass the real path)" : "");
    return add_rule_fd(ruleset, fd, path, access, handled, err);
}

static int add_rule_fd(int ruleset, int fd, const char *path, uint64_t access, uint64_t handled,
                       struct aj_error *err)
{
    struct aj_landlock_path_beneath_attr attr;
    struct stat st;

    if (fstat(fd, &st) < 0)
        return aj_err(err, errno, "landlock: stat %s", path);
    access &= handled;
    /* Directory-only rights on a file make landlock_add_rule fail. */
    if (!S_ISDIR(st.st_mode))
        access &= LL_FILE_RIGHTS;
    attr.allowed_access = access;
    attr.parent_fd = fd;
    if (syscall(__NR_landlock_add_rule, ruleset, AJ_LANDLOCK_RULE_PATH_BENEATH, &attr, 0) < 0)
        return aj_err(err, errno, "landlock: rule for %s", path);
    return 0;
}

/* Paths the payload may read (and run programs from) in degraded mode,
 * where there is no private root to confine it: the system dirs a shell or
 * Python needs, nothing of /home, /root, /etc beyond the loader files. */
static const char *const degraded_read_paths[] = {
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache",
    "/etc/ssl/certs", "/etc/alternatives", "/etc/localtime", "/etc/nsswitch.conf",
};

int aj_landlock_child_apply(const struct aj_policy *pol, int abi, bool degraded,
                            uint64_t *ret_layers, struct aj_error *err)
{
    return aj_landlock_child_apply_ex(pol, abi, degraded, NULL, 0, ret_layers, err);
}

int aj_landlock_child_apply_ex(const struct aj_policy *pol, int abi, bool degraded, const char *const *rw_files,
                               size_t n_rw, uint64_t *ret_layers, struct aj_error *err)
{
    struct aj_landlock_ruleset_attr attr = {0};
    size_t attr_size;
    uint64_t handled, rw;
    _cleanup_close_ int ruleset = -1;
    int r;

    *ret_layers = 0;
    if (abi < 1)
        return aj_err(err, EOPNOTSUPP, "landlock is not available on this kernel (CONFIG_SECURITY_LANDLOCK, lsm=landlock)");
    handled = fs_rights_for_abi(abi);
    attr.handled_access_fs = handled;
    attr_size = sizeof(attr.handled_access_fs);
    if (abi >= 4 && pol->network == AJ_NET_NONE) {
        /* No rule for any port: every TCP bind and connect is refused. With
         * loopback networking the netns itself is the boundary. */
        attr.handled_access_net = AJ_LL_NET_BIND_TCP | AJ_LL_NET_CONNECT_TCP;
        attr_size = offsetof(struct aj_landlock_ruleset_attr, scoped);
    }
    if (abi >= 6) {
        /* Abstract unix sockets are not files: without scoping, one in the
         * host's network namespace is reachable from a sandbox sharing it
         * (CVE-2020-15257, containerd-shim). Signals: no kill() of anything
         * outside the sandbox's Landlock domain. */
        attr.scoped = AJ_LL_SCOPE_ABSTRACT_UNIX_SOCKET | AJ_LL_SCOPE_SIGNAL;
        attr_size = sizeof(attr);
    }
    ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, attr_size, 0);
    if (ruleset < 0)
        return aj_err(err, errno, "landlock_create_ruleset (ABI %d)", abi);

    rw = handled & ~(AJ_LL_FS_MAKE_CHAR | AJ_LL_FS_MAKE_BLOCK);
    if (!degraded) {
        /* Read and execute the whole (read-only) sandbox root. */
        r = add_path_rule(ruleset, "/", LL_READ | AJ_LL_FS_EXECUTE, handled, false, err);
        if (r < 0)
            return r;
        /* Writable scratch. Executable by default: compilers, venvs and
         * scripts written to /tmp are ordinary work, and native code can
         * run anyway through interpreters and anonymous memory. With
         * noexec_tmp, no EXECUTE (W^X; the mounts say noexec too). */
        uint64_t scratch = pol->noexec_tmp ? rw & ~AJ_LL_FS_EXECUTE : rw;
        r = add_path_rule(ruleset, "/tmp", scratch, handled, false, err);
        if (r == 0)
            r = add_path_rule(ruleset, "/dev/shm", scratch, handled, false, err);
        if (r < 0)
            return r;
        for (size_t i = 0; i < pol->n_tmpfs; i++) {
            r = add_path_rule(ruleset, pol->tmpfs[i].path, scratch, handled, false, err);
            if (r < 0)
                return r;
        }
    } else {
        for (size_t i = 0; i < AJ_ARRAY_SIZE(degraded_read_paths); i++) {
            r = add_path_rule(ruleset, degraded_read_paths[i], LL_READ | AJ_LL_FS_EXECUTE, handled,
                              true, err);
            if (r < 0)
                return r;
        }
    }
    /* /dev/null and friends: read and write the device nodes that exist. */
    {
        /* The last two only in a full sandbox: there /dev/pts is the
         * sandbox's own devpts and /dev/tty its own controlling terminal;
         * in degraded mode they would be the host's. */
        static const char *const devs[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                           "/dev/urandom", "/dev/tty", "/dev/pts"};
        for (size_t i = 0; i < AJ_ARRAY_SIZE(devs) - (degraded ? 2 : 0); i++) {
            /* IOCTL_DEV: harmless on these nodes, and without it isatty()
             * and stty see EACCES instead of ENOTTY. */
            r = add_path_rule(ruleset, devs[i], LL_READ | AJ_LL_FS_WRITE_FILE | AJ_LL_FS_IOCTL_DEV,
                              handled, true, err);
            if (r < 0)
                return r;
        }
    }
    for (size_t i = 0; i < n_rw; i++) {
        r = add_path_rule(ruleset, rw_files[i], LL_READ | AJ_LL_FS_WRITE_FILE, handled, true, err);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < pol->n_binds; i++) {
        const struct aj_bind *b = &pol->binds[i];
        uint64_t access = b->rw ? rw : (LL_READ | AJ_LL_FS_EXECUTE);
        r = degraded ? add_host_bind_rule(ruleset, b->host, access, handled, err)
                     : add_path_rule(ruleset, b->sandbox, access, handled, false, err);
        if (r < 0)
            return r;
    }
    if (syscall(__NR_landlock_restrict_self, ruleset, 0) < 0)
        return aj_err(err, errno, "landlock_restrict_self");
    *ret_layers = AJ_LAYER_BIT(AJ_LAYER_LANDLOCK_FS);
    if (attr.handled_access_net)
        *ret_layers |= AJ_LAYER_BIT(AJ_LAYER_LANDLOCK_NET);
    if (attr.scoped)
        *ret_layers |= AJ_LAYER_BIT(AJ_LAYER_LANDLOCK_SCOPE);
    return 0;
}
