/* SPDX-License-Identifier: Apache-2.0 */
/* The zygote process (see zygote.h), and the clone both it and the
 * supervisor make. A raw clone of a process that may have other threads:
 * no malloc, no locks, no stdio; its memory is mmap'd (checked by
 * tools/check-child-calls.py). */
#include "zygote.h"

#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"
#include "protocol.h"

pid_t aj_clone_sandbox(uint64_t flags, int cgroup_fd, int *ret_pidfd, bool *ret_in_cgroup)
{
    struct aj_clone_args args = {
        .flags = flags | CLONE_PIDFD,
        .pidfd = (uint64_t)(uintptr_t)ret_pidfd,
        /* CLONE_PARENT (the zygote's): 0, the kernel's rule; the child
         * signals its parent as its creator does (SIGCHLD). */
        .exit_signal = (flags & CLONE_PARENT) ? 0 : SIGCHLD,
    };
    long pid;

    *ret_in_cgroup = false;
    if (cgroup_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cgroup_fd;
    }
    pid = syscall(__NR_clone3, &args, sizeof(args));
    if (pid >= 0) {
        *ret_in_cgroup = cgroup_fd >= 0;
        return (pid_t)pid;
    }
    /* CLONE_INTO_CGROUP: EINVAL/EOPNOTSUPP before 5.7 or for a v1 host;
     * the supervisor moves the child itself before releasing it. */
    if (cgroup_fd >= 0 && errno != ENOSYS && errno != EPERM && errno != ENOSPC) {
        args.flags &= ~(uint64_t)CLONE_INTO_CGROUP;
        args.cgroup = 0;
        pid = syscall(__NR_clone3, &args, sizeof(args));
        if (pid >= 0)
            return (pid_t)pid;
    }
    /* clone3: ENOSYS before 5.3, and under filters (Docker's) that answer
     * ENOSYS so libc falls back: use clone(), where CLONE_PIDFD (5.2)
     * returns the pidfd through the parent_tid argument. */
    if (errno == ENOSYS)
        pid = syscall(__NR_clone, (unsigned long)(flags | CLONE_PIDFD | SIGCHLD), NULL, ret_pidfd, NULL, 0);
    return (pid_t)pid;
}

/* ---- the zygote ---------------------------------------------------------------------- */

/* What a request may need besides its own bytes: the pointer arrays, the
 * mount plan's entries and scratch, the filters (aligned copies). */
#define ARENA_SIZE (1u << 20)

struct arena {
    char *base;
    size_t used;
};

static void *arena_get(struct arena *a, size_t len)
{
    size_t at = (a->used + 15) & ~(size_t)15;
    if (len > ARENA_SIZE || at > ARENA_SIZE - len)
        return NULL;
    a->used = at + len;
    return a->base + at;
}

struct reader {
    const char *buf;
    size_t len, off;
    bool bad;
};

static const char *get_bytes(struct reader *r, size_t n)
{
    const char *p;
    if (r->bad || n > r->len - r->off) {
        r->bad = true;
        return NULL;
    }
    p = r->buf + r->off;
    r->off += n;
    return p;
}

static uint32_t get_u32(struct reader *r)
{
    const char *p = get_bytes(r, sizeof(uint32_t));
    uint32_t v = 0;
    if (p)
        memcpy(&v, p, sizeof(v));
    return v;
}

/* A string: its length (UINT32_MAX: NULL), its bytes, a NUL; pointed to
 * where it lies in the message. With ret_len, a blob that may hold NULs. */
static char *get_str(struct reader *r, size_t *ret_len)
{
    uint32_t n = get_u32(r);
    const char *p;
    if (r->bad || n == UINT32_MAX)
        return NULL;
    p = get_bytes(r, (size_t)n + 1);
    if (!p || p[n] != '\0') {
        r->bad = true;
        return NULL;
    }
    if (ret_len)
        *ret_len = n;
    else if (memchr(p, '\0', n)) {
        r->bad = true;
        return NULL;
    }
    return (char *)p;
}

static char **get_strv(struct reader *r, struct arena *a)
{
    uint32_t n = get_u32(r);
    char **v;
    if (r->bad || n == UINT32_MAX)
        return NULL;
    v = n < ARENA_SIZE / sizeof(char *) ? arena_get(a, ((size_t)n + 1) * sizeof(char *)) : NULL;
    if (!v) {
        r->bad = true;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        v[i] = get_str(r, NULL);
        if (!v[i])
            r->bad = true;
    }
    v[n] = NULL;
    return v;
}

static void get_bpf(struct reader *r, struct arena *a, struct aj_bpf *b)
{
    uint32_t n = get_u32(r);
    const char *p;
    b->insns = NULL;
    b->owned = false;
    if (r->bad || n == UINT32_MAX) {
        b->len = 0;
        return;
    }
    p = n < ARENA_SIZE / sizeof(struct sock_filter) ? get_bytes(r, (size_t)n * sizeof(struct sock_filter)) : NULL;
    b->insns = p ? arena_get(a, (size_t)n * sizeof(struct sock_filter) + 1) : NULL;
    if (!b->insns) {
        r->bad = true;
        b->len = 0;
        return;
    }
    memcpy(b->insns, p, (size_t)n * sizeof(struct sock_filter));
    b->len = n;
}

static int fd_at(int idx, const int *fds, uint32_t nfds, bool *bad)
{
    if (idx == -1)
        return -1;
    if (idx < 0 || (uint32_t)idx >= nfds) {
        *bad = true;
        return -1;
    }
    return fds[idx];
}

/* The request's ctx, made whole in this process: pointers into the
 * message and the arena, fds renumbered. false: a malformed request. */
static bool decode(struct aj_child_ctx *c, const struct aj_zyg_req *h, struct reader *r, struct arena *a,
                   const struct aj_policy *pol, const int *fds, uint32_t nfds)
{
    bool bad = false;

    *c = h->ctx;
    c->pol = pol;
    c->argv = get_strv(r, a);
    c->envp = get_strv(r, a);
    c->path_env = get_str(r, NULL);
    if (c->plan.n > ARENA_SIZE / sizeof(struct aj_mnt_entry))
        return false;
    c->plan.entries = c->plan.n ? arena_get(a, c->plan.n * sizeof(struct aj_mnt_entry)) : NULL;
    c->plan.src_fds = c->plan.n ? arena_get(a, c->plan.n * sizeof(int)) : NULL;
    if (c->plan.n && (!c->plan.entries || !c->plan.src_fds))
        return false;
    for (size_t i = 0; i < c->plan.n; i++) {
        const char *p = get_bytes(r, sizeof(struct aj_mnt_entry));
        if (p)
            memcpy(&c->plan.entries[i], p, sizeof(struct aj_mnt_entry));
        c->plan.src_fds[i] = -1;
    }
    for (size_t i = 0; i < c->plan.n && !r->bad; i++) {
        struct aj_mnt_entry *e = &c->plan.entries[i];
        size_t clen = 0;
        e->src = get_str(r, NULL);
        e->dst = get_str(r, NULL);
        e->content = get_str(r, &clen);
        if (e->content && clen != e->content_len)
            bad = true;
        e->mode = get_str(r, NULL);
        e->hostfd = -1; /* the supervisor's: only the id-mapped tree comes here */
        e->idmap_fd = fd_at(e->idmap_fd, fds, nfds, &bad);
    }
    get_bpf(r, a, &c->bpf);
    get_bpf(r, a, &c->bpf_memfd);
    if (c->decoys.n > AJ_DECOY_MAX_FILES)
        return false;
    for (size_t i = 0; i < c->decoys.n; i++) {
        c->decoys.paths[i] = get_str(r, NULL);
        c->decoys.kinds[i] = get_str(r, NULL);
        c->decoys.techniques[i] = get_str(r, NULL);
        if (!c->decoys.paths[i])
            bad = true;
    }
    c->sock = fd_at(c->sock, fds, nfds, &bad);
    c->out_fd = fd_at(c->out_fd, fds, nfds, &bad);
    c->err_fd = fd_at(c->err_fd, fds, nfds, &bad);
    c->in_fd = fd_at(c->in_fd, fds, nfds, &bad);
    c->pty_slave = fd_at(c->pty_slave, fds, nfds, &bad);
    if (c->n_cg_join > AJ_CG_MAX_JOIN)
        return false;
    for (size_t i = 0; i < c->n_cg_join; i++)
        c->cg_join[i] = fd_at(c->cg_join[i], fds, nfds, &bad);
    return !bad && !r->bad && r->off == r->len && c->sock >= 0 && !c->degraded;
}

/* Nothing to do on failure: the supervisor sees EOF, gives up on this
 * zygote and ends what it asked for. */
static void reply(int sock, const struct aj_zyg_reply *rep, int pidfd)
{
    (void)aj_proto_send_with_fds(sock, rep, sizeof(*rep), &pidfd, pidfd >= 0);
}

void aj_zygote_main(int sock, const struct aj_policy *pol)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * AJ_ZYG_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct arena a;
    char *msg;

    /* Its copy of the caller's environment (tokens) and command line is
     * not for /proc/PID/environ to show; its inits blank theirs too. */
    aj_child_scrub_cmdline("aj-zygote");
    /* Nothing of the supervisor's but the socket: its listening sockets,
     * databases and sandboxes' fds are not the inits' to inherit. */
    if (sock > 3)
        (void)syscall(__NR_close_range, 3U, (unsigned)sock - 1, 0U);
    (void)syscall(__NR_close_range, (unsigned)sock + 1, ~0U, 0U);
    msg = mmap(NULL, AJ_ZYG_MAX_MSG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    a.base = mmap(NULL, ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (msg == MAP_FAILED || a.base == MAP_FAILED)
        _exit(125);
    /* Started, and blanked: the supervisor waits for this before it says
     * the pool is up, so no one finds the caller's environment here. */
    if (send(sock, "Z", 1, MSG_NOSIGNAL) != 1)
        _exit(125);
    for (;;) {
        struct iovec iov = {.iov_base = msg, .iov_len = AJ_ZYG_MAX_MSG};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
        struct aj_zyg_reply rep = {.pid = -1};
        struct aj_zyg_req h;
        struct aj_child_ctx c;
        struct reader r;
        int fds[AJ_ZYG_MAX_FDS], nfds, pidfd = -1;
        bool in_cg = false;
        sigset_t old;
        ssize_t n;
        pid_t pid;

        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(0); /* EOF: the pool is gone, or the supervisor */
        nfds = aj_proto_collect_fds(&mh, fds, AJ_ZYG_MAX_FDS);
        a.used = 0;
        r = (struct reader){.buf = msg, .len = (size_t)n, .off = sizeof(h)};
        if ((size_t)n < sizeof(h) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
            rep.err = EMSGSIZE;
        } else {
            memcpy(&h, msg, sizeof(h));
            if (h.magic != AJ_ZYG_MAGIC || h.len != (uint32_t)n || h.nfds != (uint32_t)nfds ||
                !decode(&c, &h, &r, &a, pol, fds, (uint32_t)nfds))
                rep.err = EPROTO;
        }
        if (!rep.err) {
            int cgfd = fd_at(h.cgroup_fd, fds, (uint32_t)nfds, &(bool){false});
            (void)sigprocmask(SIG_SETMASK, &h.mask, &old);
            /* CLONE_PARENT: init is the supervisor's child, as if it had
             * cloned it itself. */
            pid = aj_clone_sandbox(h.flags | CLONE_PARENT, cgfd, &pidfd, &in_cg);
            if (pid == 0) {
                (void)close(sock);
                (void)prctl(PR_SET_NAME, "agentjail-init", 0, 0, 0); /* not taken for a zygote in ps */
                aj_child_init_main(&c);
            }
            rep.err = pid < 0 ? errno : 0;
            (void)sigprocmask(SIG_SETMASK, &old, NULL);
            rep.pid = pid;
            rep.in_cgroup = in_cg;
        }
        reply(sock, &rep, pidfd);
        if (pidfd >= 0)
            (void)close(pidfd);
        for (int i = 0; i < nfds; i++)
            (void)close(fds[i]);
    }
}
