/* SPDX-License-Identifier: Apache-2.0 */
/* A pool's zygote, the supervisor's side (see zygote.h). */
#include "zygote.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aj_util.h"
#include "children.h"
#include "protocol.h"

/* One zygote process. Requests to it are one at a time (mu). */
struct zslot {
    pthread_mutex_t mu;
    pid_t pid;   /* 0: not started (or ended) */
    int sock;
    bool broken; /* could not start, or died: no more requests */
};

/* A zygote per filler, each started by its filler (aj_zygote_start_one):
 * one process for all would queue the fillers' clones behind each other. */
struct aj_zygote {
    unsigned n;
    pthread_mutex_t mu; /* clones, next, claimed, tried */
    pthread_cond_t cond; /* tried grew */
    uint64_t clones;
    unsigned next;
    unsigned claimed;     /* slots a start took, in order */
    unsigned tried;       /* starts tried, whether or not they got a slot */
    struct aj_policy pol; /* the pool's sandboxes', as the zygotes have it (aj_zygote_set_policy) */
    bool have_pol;
    struct zslot slot[];
};

struct aj_zygote *aj_zygote_new(unsigned n)
{
    struct aj_zygote *z;

    if (n < 1)
        n = 1;
    z = calloc(1, sizeof(*z) + n * sizeof(z->slot[0]));
    if (!z)
        return NULL;
    z->n = n;
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->cond, NULL);
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_init(&z->slot[i].mu, NULL);
        z->slot[i].sock = -1;
    }
    return z;
}

/* How long a zygote may take to say it started (it blanks a few pages). */
#define ZYGOTE_START_TIMEOUT_MS 10000

static void stop(struct zslot *s);

/* Under s->mu: s's zygote forked now; its policy is z->pol. */
static int start(struct aj_zygote *z, struct zslot *s)
{
    int sv[2];
    pid_t pid;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    /* The raw system call, as for init: glibc's fork would take locks
     * another thread may hold. */
    pid = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (pid < 0) {
        int e = errno;
        (void)close(sv[0]);
        (void)close(sv[1]);
        return -e;
    }
    if (pid == 0) {
        (void)close(sv[0]);
        aj_zygote_main(sv[1], &z->pol);
    }
    (void)close(sv[1]);
    aj_children_add(pid);
    s->pid = pid;
    s->sock = sv[0];
    /* Its first word: it has blanked its copy of the caller's environment
     * and command line. A zygote that dies or stalls first is not used. */
    {
        struct pollfd pfd = {.fd = sv[0], .events = POLLIN};
        char c = 0;
        ssize_t n = -1;
        int pr;
        do
            pr = poll(&pfd, 1, ZYGOTE_START_TIMEOUT_MS);
        while (pr < 0 && errno == EINTR);
        if (pr > 0) {
            do
                n = recv(sv[0], &c, 1, MSG_DONTWAIT);
            while (n < 0 && errno == EINTR);
        }
        if (n != 1 || c != 'Z') {
            stop(s);
            return pr == 0 ? -ETIMEDOUT : -EPROTO;
        }
    }
    return 0;
}

/* Under s->mu: no more requests; the zygote ends (EOF) and is reaped. */
static void stop(struct zslot *s)
{
    if (s->sock >= 0)
        (void)close(s->sock);
    s->sock = -1;
    if (s->pid > 0) {
        /* It exits at EOF; one that stopped answering is killed. */
        if (waitpid(s->pid, NULL, WNOHANG) == 0) {
            (void)kill(s->pid, SIGKILL);
            while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        aj_children_del(s->pid);
    }
    s->pid = 0;
    s->broken = true;
}

/* ---- the request: see struct aj_zyg_req and zygote_child.c's decode ---- */

struct writer {
    char *buf;
    size_t len, cap;
    bool full;
};

static void put(struct writer *w, const void *p, size_t n)
{
    if (w->full || n > w->cap - w->len) {
        w->full = true;
        return;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void put_u32(struct writer *w, uint32_t v)
{
    put(w, &v, sizeof(v));
}

static void put_blob(struct writer *w, const char *s, size_t n)
{
    if (!s) {
        put_u32(w, UINT32_MAX);
        return;
    }
    if (n >= UINT32_MAX) {
        w->full = true;
        return;
    }
    put_u32(w, (uint32_t)n);
    put(w, s, n);
    put(w, "", 1);
}

static void put_str(struct writer *w, const char *s)
{
    put_blob(w, s, s ? strlen(s) : 0);
}

static void put_strv(struct writer *w, char *const *v)
{
    uint32_t n = 0;
    if (!v) {
        put_u32(w, UINT32_MAX);
        return;
    }
    while (v[n])
        n++;
    put_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        put_str(w, v[i]);
}

static void put_bpf(struct writer *w, const struct aj_bpf *b)
{
    if (!b->insns) {
        put_u32(w, UINT32_MAX);
        return;
    }
    put_u32(w, (uint32_t)b->len);
    put(w, b->insns, b->len * sizeof(struct sock_filter));
}

struct fdlist {
    int fds[AJ_ZYG_MAX_FDS];
    uint32_t n;
    bool full;
};

/* fd's index in the message (-1 for none). */
static int put_fd(struct fdlist *l, int fd)
{
    if (fd < 0)
        return -1;
    if (l->n == AJ_ZYG_MAX_FDS) {
        l->full = true;
        return -1;
    }
    l->fds[l->n] = fd;
    return (int)l->n++;
}

/* The request for c into w (w->full: it does not fit), its fds into l. */
static void encode(struct writer *w, struct fdlist *l, const struct aj_child_ctx *c, uint64_t flags, int cgroup_fd)
{
    struct aj_zyg_req h = {.magic = AJ_ZYG_MAGIC, .flags = flags};
    struct aj_child_ctx *hc = &h.ctx;

    (void)pthread_sigmask(SIG_SETMASK, NULL, &h.mask);
    *hc = *c;
    hc->pol = NULL;
    hc->argv = hc->envp = NULL;
    hc->path_env = NULL;
    hc->plan.entries = NULL;
    hc->plan.src_fds = NULL;
    hc->bpf.insns = hc->bpf_memfd.insns = NULL;
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        hc->decoys.paths[i] = hc->decoys.kinds[i] = hc->decoys.techniques[i] = NULL;
    hc->sock = put_fd(l, c->sock);
    hc->out_fd = put_fd(l, c->out_fd);
    hc->err_fd = put_fd(l, c->err_fd);
    hc->in_fd = put_fd(l, c->in_fd);
    hc->pty_slave = put_fd(l, c->pty_slave);
    for (size_t i = 0; i < c->n_cg_join && i < AJ_CG_MAX_JOIN; i++)
        hc->cg_join[i] = put_fd(l, c->cg_join[i]);
    h.cgroup_fd = put_fd(l, cgroup_fd);
    put(w, &h, sizeof(h));

    put_strv(w, c->argv);
    put_strv(w, c->envp);
    put_str(w, c->path_env);
    for (size_t i = 0; i < c->plan.n; i++) {
        struct aj_mnt_entry e = c->plan.entries[i];
        e.src = e.dst = e.content = NULL;
        e.mode = NULL;
        e.hostfd = -1;
        e.idmap_fd = put_fd(l, c->plan.entries[i].idmap_fd);
        put(w, &e, sizeof(e));
    }
    for (size_t i = 0; i < c->plan.n; i++) {
        const struct aj_mnt_entry *e = &c->plan.entries[i];
        put_str(w, e->src);
        put_str(w, e->dst);
        put_blob(w, e->content, e->content_len);
        put_str(w, e->mode);
    }
    put_bpf(w, &c->bpf);
    put_bpf(w, &c->bpf_memfd);
    for (size_t i = 0; i < c->decoys.n && i < AJ_DECOY_MAX_FILES; i++) {
        put_str(w, c->decoys.paths[i]);
        put_str(w, c->decoys.kinds[i]);
        put_str(w, c->decoys.techniques[i]);
    }
    if (!w->full) {
        struct aj_zyg_req *hp = (struct aj_zyg_req *)(void *)w->buf;
        hp->len = (uint32_t)w->len;
        hp->nfds = l->n;
    }
}

static int recv_reply(int sock, struct aj_zyg_reply *rep, int *ret_pidfd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = rep, .iov_len = sizeof(*rep)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int fds[1], nfds;
    ssize_t n;

    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    nfds = aj_proto_collect_fds(&mh, fds, 1);
    if (n != (ssize_t)sizeof(*rep) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds != (rep->pid > 0)) {
        if (nfds > 0)
            (void)close(fds[0]);
        return n == 0 ? -EPIPE : -EPROTO;
    }
    *ret_pidfd = nfds ? fds[0] : -1;
    return 0;
}

void aj_zygote_set_policy(struct aj_zygote *z, const struct aj_policy *pol)
{
    pthread_mutex_lock(&z->mu);
    z->pol = *pol;
    z->have_pol = true;
    pthread_mutex_unlock(&z->mu);
}

int aj_zygote_start_one(struct aj_zygote *z)
{
    struct zslot *s = NULL;
    int r = -ENOSPC;

    pthread_mutex_lock(&z->mu);
    if (z->have_pol && z->claimed < z->n)
        s = &z->slot[z->claimed++];
    pthread_mutex_unlock(&z->mu);
    if (s) {
        pthread_mutex_lock(&s->mu);
        r = start(z, s);
        if (r < 0)
            s->broken = true;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_lock(&z->mu);
    z->tried++;
    pthread_cond_broadcast(&z->cond);
    pthread_mutex_unlock(&z->mu);
    return r;
}

void aj_zygote_wait_started(struct aj_zygote *z, unsigned n)
{
    pthread_mutex_lock(&z->mu);
    while (z->tried < n)
        pthread_cond_wait(&z->cond, &z->mu);
    pthread_mutex_unlock(&z->mu);
}

/* Under s->mu: s's zygote runs. One that died (killed from outside) is
 * reaped now, not left a zombie until the pool ends. */
static bool slot_alive(struct zslot *s)
{
    if (s->pid <= 0)
        return false;
    if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
        aj_children_del(s->pid);
        s->pid = 0;
        stop(s);
        return false;
    }
    return true;
}

/* A started slot for a request, locked: an idle one, else (all busy) the
 * next in turn, waited for. NULL: none runs. */
static struct zslot *take_slot(struct aj_zygote *z)
{
    unsigned k, n;

    pthread_mutex_lock(&z->mu);
    n = z->claimed;
    pthread_mutex_unlock(&z->mu);
    for (unsigned i = 0; i < n; i++) {
        struct zslot *s = &z->slot[i];
        if (pthread_mutex_trylock(&s->mu) != 0)
            continue;
        if (slot_alive(s))
            return s;
        pthread_mutex_unlock(&s->mu);
    }
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_lock(&z->mu);
        k = z->next++ % n;
        pthread_mutex_unlock(&z->mu);
        pthread_mutex_lock(&z->slot[k].mu);
        if (slot_alive(&z->slot[k]))
            return &z->slot[k];
        pthread_mutex_unlock(&z->slot[k].mu);
    }
    return NULL;
}

pid_t aj_zygote_clone(struct aj_zygote *z, const struct aj_child_ctx *c, uint64_t flags, int cgroup_fd,
                      int *ret_pidfd, bool *ret_in_cgroup, bool *ret_used)
{
    struct writer w = {.cap = AJ_ZYG_MAX_MSG};
    struct fdlist l = {.n = 0};
    struct aj_zyg_reply rep = {0};
    struct zslot *s;
    pid_t pid = -1;
    int r, e = 0;

    *ret_used = false;
    if (c->degraded)
        return -1;
    /* The zygotes' inits enforce their copy of the pool's policy: only a
     * sandbox with that very policy (bytes and pointers) is theirs. The
     * object representation on purpose: both are copies of the pool's
     * policy made by the same assignment (aj_req_plain), padding included;
     * a difference there would only send this sandbox the slow way. */
    pthread_mutex_lock(&z->mu);
    r = z->have_pol ? memcmp(c->pol, &z->pol, sizeof(z->pol)) : 1;
    pthread_mutex_unlock(&z->mu);
    if (r != 0)
        return -1;
    w.buf = malloc(w.cap);
    if (!w.buf)
        return -1;
    encode(&w, &l, c, flags, cgroup_fd);
    if (w.full || l.full) {
        free(w.buf); /* too large for a message: the caller clones init itself */
        return -1;
    }
    s = take_slot(z);
    if (!s) {
        free(w.buf);
        return -1;
    }
    r = aj_proto_send_with_fds(s->sock, w.buf, w.len, l.fds, (int)l.n);
    if (r == -EMSGSIZE || r == -ENOBUFS || r == -ENOMEM)
        goto out; /* this request, not the zygote: the caller clones init itself */
    if (r < 0) {
        /* Nothing was delivered (a datagram goes whole or not at all): the
         * zygote is gone, and the caller clones init itself. */
        stop(s);
        goto out;
    }
    r = recv_reply(s->sock, &rep, ret_pidfd);
    if (r < 0) {
        /* The request was delivered: the zygote may have cloned an init on
         * this sandbox's sync socket before it went. Another init on that
         * socket would share it with this one, so this sandbox fails
         * (EPIPE); its socket closed, an init cloned meanwhile reads EOF
         * where it waits for GO, and exits. */
        stop(s);
        *ret_used = true;
        e = EPIPE;
        goto out;
    }
    if (rep.err == EPROTO || rep.err == EMSGSIZE)
        goto out; /* its reading of the request failed, not the clone */
    *ret_used = true;
    if (rep.err) {
        e = rep.err;
        goto out;
    }
    pid = rep.pid;
    *ret_in_cgroup = rep.in_cgroup;
    pthread_mutex_lock(&z->mu);
    z->clones++;
    pthread_mutex_unlock(&z->mu);
out:
    pthread_mutex_unlock(&s->mu);
    free(w.buf);
    if (e)
        errno = e;
    return pid;
}

uint64_t aj_zygote_clones(struct aj_zygote *z)
{
    uint64_t n;
    pthread_mutex_lock(&z->mu);
    n = z->clones;
    pthread_mutex_unlock(&z->mu);
    return n;
}

unsigned aj_zygote_running(struct aj_zygote *z)
{
    unsigned n = 0;
    for (unsigned i = 0; i < z->n; i++) {
        pthread_mutex_lock(&z->slot[i].mu);
        n += z->slot[i].pid > 0;
        pthread_mutex_unlock(&z->slot[i].mu);
    }
    return n;
}

void aj_zygote_free(struct aj_zygote *z)
{
    if (!z)
        return;
    for (unsigned i = 0; i < z->n; i++) {
        pthread_mutex_lock(&z->slot[i].mu);
        stop(&z->slot[i]);
        pthread_mutex_unlock(&z->slot[i].mu);
        pthread_mutex_destroy(&z->slot[i].mu);
    }
    pthread_cond_destroy(&z->cond);
    pthread_mutex_destroy(&z->mu);
    free(z);
}
