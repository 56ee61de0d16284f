/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_userns.h"
#include "aj_missing.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "aj_hostpath.h"
#include "aj_util.h"

#define AJ_UID_LOCK_NAME "uids.lock"

int aj_userns_lease_host_id(const struct aj_policy *pol, struct aj_uid_lease *ret,
                            struct aj_error *err)
{
    _cleanup_close_ int fd = -1, dirfd = -1;
    char dir[4096];
    struct stat st;
    uint32_t start;

    ret->lock_fd = -1;
    /* /run/agentjail, checked to be root's alone (aj_state_dir_open), and
     * the lock file in it opened by the directory's fd, no link followed:
     * whoever could swap either could hand two runs the same uid. */
    dirfd = aj_state_dir_open(dir, sizeof(dir), err);
    if (dirfd < 0)
        return dirfd;
    fd = openat(dirfd, AJ_UID_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0)
        return aj_err(err, errno, "open %s/%s", dir, AJ_UID_LOCK_NAME);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
        return aj_err(err, EPERM, "%s/%s is not a regular file of ours; remove it", dir, AJ_UID_LOCK_NAME);
    /* Start at a random slot: concurrent supervisors rarely collide, and a
     * uid is not predictable to a payload planning a cross-run attack. */
    if (getrandom(&start, sizeof(start), 0) != sizeof(start))
        start = (uint32_t)getpid();
    for (uint32_t i = 0; i < pol->uid_count; i++) {
        uint32_t slot = (start + i) % pol->uid_count;
        /* The byte at the uid's own offset, not the slot's: supervisors
         * with different ranges (a server's tenants, an `agentjail run
         * --uid-range`) lease from one file, and a slot number means a
         * different uid in each range. */
        struct flock fl = {.l_type = F_WRLCK,
                           .l_whence = SEEK_SET,
                           .l_start = (off_t)pol->uid_base + slot,
                           .l_len = 1,
                           .l_pid = 0};
        /* OFD locks belong to the open file, not the process: released when
         * the supervisor's fd closes, including when it is SIGKILLed. */
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
            ret->host_uid = pol->uid_base + slot;
            ret->host_gid = pol->uid_base + slot;
            ret->lock_fd = TAKE_FD(fd);
            return 0;
        }
        if (errno != EAGAIN && errno != EACCES)
            return aj_err(err, errno, "lock uid slot");
    }
    return aj_err(err, EBUSY, "all %u host uids of the range starting at %u are in use",
                  pol->uid_count, pol->uid_base);
}

void aj_userns_lease_release(struct aj_uid_lease *lease)
{
    if (lease && lease->lock_fd >= 0) {
        (void)close(lease->lock_fd);
        lease->lock_fd = -1;
    }
}

static int write_proc_file(pid_t pid, const char *name, const char *content, struct aj_error *err)
{
    char path[64];
    _cleanup_close_ int fd = -1;
    int r;

    (void)snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return aj_err(err, errno, "open %s", path);
    r = aj_write_all(fd, content, strlen(content));
    if (r < 0)
        return aj_err(err, -r, "write %s", path);
    return 0;
}

int aj_userns_parent_write_maps(pid_t child, uid_t inside_uid, gid_t inside_gid, uid_t host_uid,
                                gid_t host_gid, bool rootless, struct aj_error *err)
{
    char line[64];
    int r;

    if (rootless) {
        r = write_proc_file(child, "setgroups", "deny", err);
        if (r < 0)
            return r;
    }
    (void)snprintf(line, sizeof(line), "%u %u 1\n", (unsigned)inside_gid, (unsigned)host_gid);
    r = write_proc_file(child, "gid_map", line, err);
    if (r == 0) {
        (void)snprintf(line, sizeof(line), "%u %u 1\n", (unsigned)inside_uid, (unsigned)host_uid);
        r = write_proc_file(child, "uid_map", line, err);
    }
    /* Root mode maps the run to a host uid/gid of its own, which the
     * kernel allows only with CAP_SETUID and CAP_SETGID: a root without
     * them is a container started with --cap-drop ALL. */
    if (r == -EPERM && !rootless)
        return aj_err(err, EPERM,
                      "write the uid/gid maps of pid %d (host uid %u): root here lacks CAP_SETUID/CAP_SETGID "
                      "(a container started with --cap-drop ALL); fix: docker run --cap-add SETUID "
                      "--cap-add SETGID (and LEASE for the decoys, docs/deploy.md), or run "
                      "agentjail as a non-root user (docker run --user 1000), which maps only its own uid",
                      (int)child, (unsigned)host_uid);
    return r;
}

int aj_userns_parent_idmap_ns(uid_t disk_uid, gid_t disk_gid, uid_t host_uid, gid_t host_gid,
                              struct aj_error *err)
{
    int p[2], fd = -1, r = 0, status;
    char path[64];
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) < 0)
        return aj_err(err, errno, "pipe");
    /* A raw clone (the supervisor may be multithreaded): the helper only
     * waits for the pipe to close, then exits. Its user namespace lives
     * on through the fd opened below (and then through the mount). */
    pid = (pid_t)syscall(__NR_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), NULL, NULL, NULL, 0UL);
    if (pid == 0) {
        char c;
        (void)close(p[1]);
        (void)!read(p[0], &c, 1);
        _exit(0);
    }
    (void)close(p[0]);
    if (pid < 0) {
        r = aj_err(err, errno, "clone the id-mapping helper");
        (void)close(p[1]);
        return r;
    }
    /* One id each way: on-disk disk_uid shows as host_uid (the run's uid,
     * which the sandbox's own namespace shows as its user) and what the
     * run creates lands as disk_uid. Every other owner stays unmapped
     * (the overflow id inside; no owner rights). Written as root: no
     * setgroups deny is needed, and the helper gets no privilege from it. */
    r = aj_userns_parent_write_maps(pid, disk_uid, disk_gid, host_uid, host_gid, false, err);
    if (r == 0) {
        (void)snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            r = aj_err(err, errno, "open %s", path);
    }
    (void)close(p[1]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return r < 0 ? r : fd;
}

int aj_userns_child_become(uid_t uid, gid_t gid, bool rootless, struct aj_error *err)
{
    /* Root mode: the supervisor's supplementary groups (root's, often 0)
     * would otherwise follow the sandbox as host gids. */
    if (!rootless && aj_sys_setgroups_none() < 0)
        return aj_err(err, errno, "drop supplementary groups");
    /* Keep the capabilities of the new user namespace across the uid change:
     * mounts come next. They are dropped for good before the payload runs. */
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
        return aj_err(err, errno, "PR_SET_KEEPCAPS");
    if (aj_sys_setresgid(gid) < 0)
        return aj_err(err, errno, "setresgid %u", (unsigned)gid);
    if (aj_sys_setresuid(uid) < 0)
        return aj_err(err, errno, "setresuid %u", (unsigned)uid);
    return 0;
}

int aj_userns_child_nesting_open(int fds[AJ_USERNS_NS_KINDS], struct aj_error *err)
{
    static const char *const names[AJ_USERNS_NS_KINDS] = {"user", "mnt", "pid", "net",
                                                          "ipc", "uts", "cgroup", "time"};

    for (size_t i = 0; i < AJ_USERNS_NS_KINDS; i++) {
        char path[64];
        (void)snprintf(path, sizeof(path), "/proc/sys/user/max_%s_namespaces", names[i]);
        fds[i] = open(path, O_WRONLY | O_CLOEXEC);
        if (fds[i] < 0 && errno != ENOENT) {
            int e = errno;
            for (size_t j = 0; j < i; j++)
                if (fds[j] >= 0)
                    (void)close(fds[j]);
            /* Docker and Kubernetes mount /proc/sys read-only (runc's
             * readonly paths): the limit that keeps the payload from making
             * namespaces of its own cannot be set. */
            if (e == EROFS)
                return aj_err(err, e,
                              "open %s: /proc/sys is mounted read-only (Docker's and Kubernetes' default), so "
                              "nested namespaces cannot be forbidden inside the sandbox; fix: docker run "
                              "--security-opt systempaths=unconfined (Kubernetes: securityContext.procMount: "
                              "Unmasked), see docs/deploy.md",
                              path);
            return aj_err(err, e, "open %s", path);
        }
    }
    return 0;
}

int aj_userns_child_nesting_forbid(int fds[AJ_USERNS_NS_KINDS], struct aj_error *err)
{
    int r = 0;

    for (size_t i = 0; i < AJ_USERNS_NS_KINDS; i++) {
        if (fds[i] < 0)
            continue;
        if (r == 0 && write(fds[i], "0", 1) != 1)
            r = aj_err(err, errno, "limit nested namespaces");
        (void)close(fds[i]);
        fds[i] = -1;
    }
    return r;
}

static long read_long(const char *path, long dflt)
{
    char buf[64];
    char *end;
    long v;

    if (aj_read_small_file(path, buf, sizeof(buf)) <= 0)
        return dflt;
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno || end == buf)
        return dflt;
    return v;
}

static bool self_has_seccomp_filter(void)
{
    char buf[4096];
    const char *p;

    if (aj_read_small_file("/proc/self/status", buf, sizeof(buf)) <= 0)
        return false;
    p = strstr(buf, "\nSeccomp:");
    return p && strtol(p + 9, NULL, 10) == 2;
}

int aj_userns_explain_failure(int errnum, struct aj_error *err)
{
    const char *fix = " (or run with --allow-degraded: Landlock + seccomp + rlimits + no_new_privs, no namespaces)";

    if (read_long("/proc/sys/user/max_user_namespaces", 1) == 0)
        return aj_err(err, errnum,
                      "cannot create a user namespace: user.max_user_namespaces is 0 on this host; "
                      "fix: sysctl -w user.max_user_namespaces=15000%s",
                      fix);
    if (read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", 0) == 1 && geteuid() != 0)
        return aj_err(err, errnum,
                      "cannot create a user namespace: AppArmor restricts unprivileged user namespaces "
                      "(kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 23.10+); fix: install "
                      "an AppArmor profile granting 'userns,' to agentjail, or run as root%s",
                      fix);
    if (read_long("/proc/sys/kernel/unprivileged_userns_clone", 1) == 0 && geteuid() != 0)
        return aj_err(err, errnum,
                      "cannot create a user namespace: kernel.unprivileged_userns_clone is 0; fix: "
                      "sysctl -w kernel.unprivileged_userns_clone=1, or run as root%s",
                      fix);
    if (self_has_seccomp_filter() && (errnum == EPERM || errnum == ENOSYS))
        return aj_err(err, errnum,
                      "cannot create namespaces: a seccomp filter on agentjail refuses them (Docker's default "
                      "profile, Kubernetes' RuntimeDefault); fix: docker run --security-opt "
                      "seccomp=deploy/docker/seccomp.json --security-opt systempaths=unconfined, with --cap-drop "
                      "ALL --user 1000, or as root --cap-add SETUID --cap-add SETGID --cap-add LEASE (docs/deploy.md)%s",
                      fix);
    if (errnum == ENOSPC)
        return aj_err(err, errnum,
                      "cannot create a namespace: a namespace count limit is reached "
                      "(/proc/sys/user/max_*_namespaces); fix: raise it%s",
                      fix);
    if (errnum == EPERM)
        return aj_err(err, errnum,
                      "cannot create namespaces: the kernel refused (nested in a container without "
                      "CAP_SYS_ADMIN, or an LSM policy); fix: run agentjail on the host or grant the "
                      "container user namespaces%s",
                      fix);
    return aj_err(err, errnum, "cannot create the sandbox namespaces%s", fix);
}
