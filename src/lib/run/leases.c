/* SPDX-License-Identifier: Apache-2.0 */
/* The library's lease-break thread (see leases.h). */
#include "leases.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_util.h"

struct watch {
    int fd;
    int wake_fd;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t up;
    int sig;         /* 0: the default, SIGRTMIN + 6 (clear of glibc's own SIGRTMIN+0..2) */
    bool starting, started;
    pid_t tid;
    struct watch *v;
    size_t n, cap;
} lw = {.mu = PTHREAD_MUTEX_INITIALIZER, .up = PTHREAD_COND_INITIALIZER};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A forked child has no such thread (fork copies the calling thread
 * only): it starts its own at its first lease. */
static void lw_atfork_child(void)
{
    pthread_mutex_init(&lw.mu, NULL);
    pthread_cond_init(&lw.up, NULL);
    lw.starting = lw.started = false;
    lw.tid = 0;
    lw.n = 0; /* the parent's sandboxes are not the child's */
}

static void lw_register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, lw_atfork_child);
}

/* sigwaitinfo, not a signalfd: the thread holds no fd, so the process's
 * fds are the same before the first sandbox and after the last. */
static void *lw_main(void *arg)
{
    int sig = (int)(intptr_t)arg;
    sigset_t one;

    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_mutex_lock(&lw.mu);
    lw.tid = gettid();
    lw.started = true;
    lw.starting = false;
    pthread_cond_broadcast(&lw.up);
    pthread_mutex_unlock(&lw.mu);
    for (;;) {
        siginfo_t si;
        int fd;
        if (sigwaitinfo(&one, &si) != sig)
            continue; /* EINTR */
        /* A break comes from the kernel (si_code POLL_MSG > 0); a kill()
         * or sigqueue() of this number is not one. */
        if (si.si_code <= 0)
            continue;
        fd = si.si_fd;
        pthread_mutex_lock(&lw.mu);
        for (size_t i = 0; i < lw.n; i++)
            if (lw.v[i].fd == fd) {
                /* Non-blocking: the pipe holds 16k breaks, far more than a
                 * sandbox has decoys; a full one loses nothing that matters
                 * (the sandbox is not reading, so is ending). */
                (void)!write(lw.v[i].wake_fd, &fd, sizeof(fd));
                break;
            }
        pthread_mutex_unlock(&lw.mu);
    }
    return NULL;
}

/* Called with lw.mu held. */
static int lw_start(struct aj_error *err)
{
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, old;
    int r;

    if (!lw.sig)
        lw.sig = SIGRTMIN + 6;
    (void)pthread_once(&atfork_once, lw_register_atfork);
    lw.starting = true;
    /* Born with every signal blocked: it takes nothing meant for another
     * thread, and its own signal waits for its sigwaitinfo. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    r = pthread_create(&t, &attr, lw_main, (void *)(intptr_t)lw.sig);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        lw.starting = false;
        return aj_err(err, r, "start the decoy lease thread");
    }
    while (lw.starting)
        pthread_cond_wait(&lw.up, &lw.mu);
    return 0;
}

int aj_leases_watch(int fd, int wake_fd, pid_t *ret_tid, int *ret_sig, struct aj_error *err)
{
    int r = 0;

    pthread_mutex_lock(&lw.mu);
    if (!lw.started)
        r = lw_start(err);
    if (r == 0 && lw.n == lw.cap) {
        size_t cap = lw.cap ? lw.cap * 2 : 64;
        struct watch *v = realloc(lw.v, cap * sizeof(*v));
        if (!v)
            r = aj_err(err, ENOMEM, "decoy lease registry");
        else {
            lw.v = v;
            lw.cap = cap;
        }
    }
    if (r == 0) {
        lw.v[lw.n++] = (struct watch){.fd = fd, .wake_fd = wake_fd};
        *ret_tid = lw.tid;
        *ret_sig = lw.sig;
    }
    pthread_mutex_unlock(&lw.mu);
    return r;
}

void aj_leases_unwatch(int fd)
{
    pthread_mutex_lock(&lw.mu);
    for (size_t i = 0; i < lw.n; i++)
        if (lw.v[i].fd == fd) {
            lw.v[i] = lw.v[--lw.n];
            break;
        }
    pthread_mutex_unlock(&lw.mu);
}

int aj_set_lease_signal(int sig, struct aj_error *err)
{
    int r = 0;

    if (sig < SIGRTMIN + 3 || sig > SIGRTMAX)
        return aj_err(err, EINVAL, "lease signal %d: a real-time signal from SIGRTMIN+3 (glibc keeps the first "
                      "ones) to SIGRTMAX", sig);
    pthread_mutex_lock(&lw.mu);
    if (lw.started || lw.starting)
        r = lw.sig == sig ? 0 : aj_err(err, EBUSY, "the decoy lease thread runs already with signal %d", lw.sig);
    else
        lw.sig = sig;
    pthread_mutex_unlock(&lw.mu);
    return r;
}
