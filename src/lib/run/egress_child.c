/* SPDX-License-Identifier: Apache-2.0 */
/* The egress processes' side of their clone (see egress.c): the proxy
 * between clone and execve, and the relay, which never execs. Both are raw
 * clones of a supervisor that may have other threads: no malloc, no locks,
 * no stdio, _exit only (tools/check-child-calls.py checks this object as
 * it checks child.c). Everything they read was built before the clone. */
#include "egress_child.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "aj_caps.h"
#include "aj_missing.h"
#include "aj_seccomp.h"
#include "aj_util.h"
#include "protocol.h"

/* Death with the supervisor, no core, no tracer of the same uid, the
 * caller's signal mask gone. */
static int become_helper(void)
{
    sigset_t none;

    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return -1;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        return -1;
    return 0;
}

static int join_cgroups(const struct aj_egress_child *ec)
{
    struct aj_error err;
    return aj_cgroup_child_join(ec->cg_join, ec->n_cg_join, &err);
}

/* Root mode: the egress uid (leased from identity.uid_range, never the
 * sandbox's), no supplementary groups. Then no capability and
 * no_new_privs, in either mode. */
static int drop_privileges(const struct aj_egress_child *ec)
{
    struct aj_error err;
    int r;

    if (!ec->rootless) {
        /* KEEPCAPS: the uid change keeps the permitted set, so that the
         * bounding set (CAP_SETPCAP) can still be emptied after it. */
        if (aj_sys_setgroups_none() < 0 || prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 ||
            aj_sys_setresgid(ec->gid) < 0 || aj_sys_setresuid(ec->uid) < 0)
            return -1;
        /* The euid change cleared the death signal: arm it again. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
            return -1;
    }
    r = aj_caps_child_drop_all(&err);
    /* 1: the bounding set could not be emptied, which only a caller
     * without privilege and without the view's user namespace sees (it
     * holds no capability to keep anyway). As root: a failure. */
    if (r < 0 || (r == 1 && !ec->rootless) || aj_caps_child_no_new_privs(&err) < 0)
        return -1;
    return 0;
}

/* Say why on stderr (the supervisor reports it) and exit. */
static __attribute__((noreturn)) void view_fail(const char *what, const char *path)
{
    char msg[AJ_EGRESS_VIEW_PATH + 128];
    int e = errno, n = snprintf(msg, sizeof(msg), "the proxy's filesystem view: %s %s: errno %d\n", what, path, e);

    if (n > 0)
        (void)aj_write_all(STDERR_FILENO, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    _exit(124);
}

/* mkdir -p of buf (modified and restored), every component but the last
 * when file. */
static void mkdir_p(char *buf, bool file)
{
    size_t n = strlen(buf);

    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i] == '\0' && file)
            break;
        buf[i] = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            view_fail("mkdir", buf);
        if (i < n)
            buf[i] = '/';
    }
}

/* A writable file write of a short text (the id maps). */
static void write_proc(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || aj_write_all(fd, text, strlen(text)) < 0)
        view_fail("write", path);
    (void)close(fd);
}

/* The proxy sees only what it needs (docs/network.md): its libraries
 * (/usr and the merged-/usr links), the trust store, resolv.conf, the
 * loader's cache, /dev/null and the random devices, /proc (the sanitizer
 * runtimes read it), its own binary's directory. Root mode: a mount
 * namespace of its own; rootless: a user namespace mapping the caller's
 * ids to themselves, so that the mounts are allowed. Each bind read-only,
 * nosuid, keeping the flags the kernel locks (noexec, nodev, atime) as the
 * source has them. Then pivot_root, the old root detached, the new root
 * read-only. */
static void proxy_fs_view(const struct aj_egress_child *ec)
{
    char buf[2 * AJ_EGRESS_VIEW_PATH + 8];
    struct statfs sf;

    if (!ec->n_view)
        return;
    /* The view's directories and files are made here, for the proxy's
     * uid to traverse and read: not at the embedder's umask (a server's
     * 077 would leave them root's alone). */
    (void)umask(022);
    if (ec->rootless) {
        char map[64];
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
            view_fail("unshare", "user+mount namespace");
        /* Our own /proc/self files are root's while we are not dumpable:
         * dumpable for the maps' writes only (this clone holds no secret:
         * the supervisor reads them after starting it). */
        if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
            view_fail("dumpable", "");
        write_proc("/proc/self/setgroups", "deny");
        (void)snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)ec->uid, (unsigned)ec->uid);
        write_proc("/proc/self/uid_map", map);
        (void)snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)ec->gid, (unsigned)ec->gid);
        write_proc("/proc/self/gid_map", map);
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
            view_fail("not dumpable", "");
    } else if (unshare(CLONE_NEWNS) < 0) {
        view_fail("unshare", "mount namespace");
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        view_fail("make private", "/");
    if (mount("tmpfs", ec->view_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
        view_fail("tmpfs", ec->view_root);
    for (size_t i = 0; i < ec->n_view; i++) {
        const struct aj_egress_view_entry *e = &ec->view[i];
        char fdpath[32];
        unsigned long fl;
        struct stat st;
        int src;
        (void)snprintf(buf, sizeof(buf), "%s%s", ec->view_root, e->path);
        if (e->link[0]) {
            mkdir_p(buf, true);
            if (symlink(e->link, buf) < 0)
                view_fail("symlink", buf);
            continue;
        }
        /* The source opened once, its type checked on that fd, and the
         * fd itself bound (/proc/self/fd/N): what was checked is what is
         * mounted, whatever happens to the name meanwhile. Opened here,
         * not by the supervisor: a bind's source must be a mount of the
         * caller's mount namespace, and this is a new one. */
        /* (A mode argument: flags not known at compile time make
         * fortify call __open64_2, not on the child's allow-list.) */
        src = open(e->path, O_PATH | O_CLOEXEC | (e->follow ? 0 : O_NOFOLLOW), 0);
        if (src < 0) {
            if (errno == ENOENT)
                continue; /* gone since the plan (an optional file): not in the view */
            view_fail("open", e->path);
        }
        if (fstat(src, &st) < 0)
            view_fail("fstat", e->path);
        if (e->dev ? !S_ISCHR(st.st_mode) : e->file ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)) {
            errno = EINVAL;
            view_fail(e->dev ? "not a character device:" : e->file ? "not a regular file:" : "not a directory:",
                      e->path);
        }
        mkdir_p(buf, e->file);
        if (e->file) {
            int fd = open(buf, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
            if (fd < 0)
                view_fail("create", buf);
            (void)close(fd);
        }
        (void)snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", src);
        if (mount(fdpath, buf, NULL, MS_BIND | MS_REC, NULL) < 0)
            view_fail("bind", e->path);
        (void)close(src);
        if (statfs(buf, &sf) < 0)
            view_fail("statfs", buf);
        /* ST_* equal MS_* for these bits: keep what is locked. */
        fl = (unsigned long)sf.f_flags & (MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME);
        fl |= MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (e->dev ? 0 : MS_NODEV);
        if (mount(NULL, buf, NULL, fl, NULL) < 0)
            view_fail("read-only", buf);
    }
    if (chdir(ec->view_root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
        view_fail("pivot_root", ec->view_root);
    if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
        view_fail("detach the old root", "/");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        view_fail("read-only", "/");
}

void aj_egress_child_proxy_main(const struct aj_egress_child *ec)
{
    int high[AJ_EGRESS_NFDS];

    if (become_helper() < 0)
        _exit(120);
    if (getppid() != ec->parent)
        _exit(120); /* the supervisor died before the death signal was armed */
    /* Into the run's cgroups before anything of its own: its memory, pids
     * and CPU are the run's from its first page, and the run's kill ends
     * it. The supervisor's fds, so its credentials authorise the move. */
    if (join_cgroups(ec) < 0)
        _exit(120);
    /* As the relay: our copy of the supervisor's environment may hold a
     * secret's source (env:NAME), and a rootless view makes this process
     * dumpable for a moment; the proxy gets its own envp (ec->envp). */
    for (char **e = environ; e && *e; e++)
        memset(*e, 0, strlen(*e));
    /* Onto 3..7 as the contract names them: first above every target, so
     * that no dup2 overwrites a source still to be placed. */
    for (int i = 0; i < AJ_EGRESS_NFDS; i++) {
        high[i] = fcntl(ec->fds[i], F_DUPFD_CLOEXEC, 64);
        if (high[i] < 0)
            _exit(120);
    }
    if (dup2(ec->null_fd, STDIN_FILENO) < 0 || dup2(ec->null_fd, STDOUT_FILENO) < 0 ||
        dup2(ec->stderr_fd, STDERR_FILENO) < 0)
        _exit(120);
    for (int i = 0; i < AJ_EGRESS_NFDS; i++)
        if (dup2(high[i], 3 + i) < 0)
            _exit(120);
    if (aj_sys_close_range(3 + AJ_EGRESS_NFDS, ~0U, 0) < 0)
        _exit(120);
    if (setsid() < 0 || chdir("/") < 0)
        _exit(120);
    proxy_fs_view(ec);
    {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < ec->nofile) {
            rl.rlim_cur = ec->nofile < rl.rlim_max ? ec->nofile : rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl); /* best effort: the proxy's cap answers past it */
        }
    }
    if (drop_privileges(ec) < 0)
        _exit(121);
    execve(ec->path, ec->argv, ec->envp);
    {
        /* The supervisor reports the proxy's stderr at a start failure. */
        char msg[4200];
        int n = snprintf(msg, sizeof(msg), "cannot execute %s as uid %u: errno %d\n", ec->path, (unsigned)ec->uid,
                         errno);
        if (n > 0)
            (void)aj_write_all(STDERR_FILENO, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    }
    _exit(127);
}

/* ---- the relay ------------------------------------------------------------------ */

/* Hand one accepted connection to the proxy: one byte and the fd, on the
 * handoff socket (blocking: a proxy that is busy holds the next accept
 * back; one that is gone is EPIPE, and the connection is closed, which
 * the client sees as a refusal). */
static void hand_over(int handoff, int fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    char byte = 0;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    ssize_t n;

    memset(u.buf, 0, sizeof(u.buf));
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    do
        n = sendmsg(handoff, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
}

void aj_egress_child_relay_main(const struct aj_egress_child *ec)
{
    const int lfd = 3, hfd = 4;

    if (become_helper() < 0)
        _exit(120);
    if (getppid() != ec->parent)
        _exit(120);
    if (join_cgroups(ec) < 0)
        _exit(120);
    (void)prctl(PR_SET_NAME, "agentjail-relay", 0, 0, 0);
    {
        /* Belt and braces with MSG_NOSIGNAL: no signal from a peer ends it. */
        struct sigaction ign = {.sa_handler = SIG_IGN};
        if (sigaction(SIGPIPE, &ign, NULL) < 0)
            _exit(120);
    }
    /* Our copy of the supervisor's environment may hold a secret's source
     * (value_from env:NAME): blanked, in this process's memory only. */
    for (char **e = environ; e && *e; e++)
        memset(*e, 0, strlen(*e));
    /* Keep the listening socket and the handoff socket alone: nothing else
     * of the supervisor's (the sandbox's pidfd, a caller's files or
     * terminal). */
    {
        /* Above 0-4 first: the supervisor's own 0-2 may have been closed. */
        int l = fcntl(ec->listen_fd, F_DUPFD_CLOEXEC, 10), h = fcntl(ec->handoff_fd, F_DUPFD_CLOEXEC, 10),
            nul = fcntl(ec->null_fd, F_DUPFD_CLOEXEC, 10);
        if (l < 0 || h < 0 || nul < 0 || dup2(nul, STDIN_FILENO) < 0 || dup2(nul, STDOUT_FILENO) < 0 ||
            dup2(nul, STDERR_FILENO) < 0 || dup2(l, lfd) < 0 || dup2(h, hfd) < 0 ||
            aj_sys_close_range(hfd + 1, ~0U, 0) < 0)
            _exit(120);
    }
    if (drop_privileges(ec) < 0)
        _exit(121);
    {
        int fl = fcntl(lfd, F_GETFL);
        if (fl < 0 || fcntl(lfd, F_SETFL, fl | O_NONBLOCK) < 0)
            _exit(120);
    }
    {
        /* Set up: from here on it only waits, accepts, hands over and
         * closes (seccomp_relay.c). no_new_privs is set. */
        struct aj_bpf bpf = {.insns = (struct sock_filter *)(uintptr_t)ec->relay_insns, .len = ec->relay_len};
        struct aj_error err;
        if (ec->relay_len && aj_seccomp_child_load(&bpf, &err) < 0)
            _exit(124);
    }
    for (;;) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            _exit(123);
        }
        if (p.revents & (POLLERR | POLLNVAL))
            _exit(0);
        for (;;) {
            /* Never read or written here: the proxy serves it directly. */
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c < 0 && (errno == EINTR || errno == ECONNABORTED))
                continue;
            if (c < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                /* ENFILE, ENOMEM, ENOBUFS: the listening socket stays
                 * readable, so a pause, not a spin on poll. */
                struct timespec pause = {.tv_nsec = 10 * 1000 * 1000};
                (void)nanosleep(&pause, NULL);
            }
            if (c < 0)
                break;
            hand_over(hfd, c);
            (void)close(c);
        }
    }
}

/* ---- inside the netns helper ---------------------------------------------------- */

int aj_egress_child_listen(int relay_sock, uint16_t port)
{
    struct aj_sync_msg m = {.type = AJ_MSG_NETNS};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct ifreq ifr;
    int s, fd;

    /* lo up first: 127.0.0.1 exists once it is. */
    s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
        (void)close(s);
        return -1;
    }
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) {
        (void)close(s);
        return -1;
    }
    (void)close(s);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* A fresh namespace: no TIME_WAIT to reuse past, so no SO_REUSEADDR. */
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 512) < 0) {
        m.err.errnum = errno;
        if (fd >= 0)
            (void)close(fd);
        (void)aj_write_all(relay_sock, &m, sizeof(m));
        return -1;
    }
    if (aj_proto_send_fds(relay_sock, &m, &fd, 1) < 0) {
        (void)close(fd);
        return -1;
    }
    (void)close(fd);
    return 0;
}
