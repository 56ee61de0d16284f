/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "sandbox.h"
#include "aj_util.h"
#include "protocol.h"
#include "tmpl.h"

/* Sandboxes prepared ahead of time, each used for exactly one run: the
 * payload process of a parked sandbox has every layer applied and waits on
 * its sync socket for one command. After a run the sandbox is torn down
 * (its pid namespace dies with init); nothing of it is reused.
 *
 * Filler threads prepare replacements and remove finished runs'
 * cgroups. While the pool is at least half full they wait out a run's
 * first POOL_DEFER_MS (they would take the CPU its payload needs to
 * start); below half, under sustained load, they refill during runs too,
 * several sandboxes at once (two fillers per CPU, at most
 * POOL_FILLERS_MAX and the pool's size: much of a sandbox's preparation
 * is waiting on its init and, for interpreters, on the interpreter's
 * start, so one per CPU left CPUs idle). They block every signal, and
 * their sandbox side never mallocs between clone and exec, as always.
 * Runs may be started from several threads at once (the pool's lists are
 * locked); a handle keeps the pool alive until it ends. */
#define AJ_POOL_MAX 64
#define POOL_FILLERS_MAX 8
#define POOL_DEFER_MS 50

struct aj_pool {
    const struct aj_policy *pol;
    unsigned size;
    pthread_mutex_t mu;
    pthread_cond_t wake;                    /* the filler: something to do, or stop */
    pthread_cond_t parked;                  /* a sandbox was parked (aj_pool_take_wait) */
    struct aj_sandbox *ready[AJ_POOL_MAX];
    unsigned n_ready;
    struct aj_cgroup spent[AJ_POOL_MAX];    /* emptied, awaiting removal */
    unsigned n_spent;
    struct aj_sandbox *dying[AJ_POOL_MAX];  /* aj_pool_run's handles, ended early: torn down by the filler */
    unsigned n_dying;
    struct aj_pool_stats stats;
    pthread_t fillers[POOL_FILLERS_MAX];
    unsigned n_fillers;                     /* started */
    unsigned preparing;                     /* sandboxes the fillers are preparing now */
    bool stopping;
    bool cancel;                            /* __atomic: aj_pool_free is under way (an interpreter's import stops) */
    unsigned running;                       /* warm runs in flight */
    uint64_t last_take_ms;                  /* aj_now_ms() of the last warm run's start */
    unsigned refs;                          /* the pool's own (until aj_pool_free), one per live warm run */
    /* An interpreter pool's template (tmpl.c), touched only under tmpl_mu
     * by whoever prepares (aj_pool_new, then the fillers); tmpl_pid and
     * tmpl_why are what aj_pool_template says (under mu). */
    pthread_mutex_t tmpl_mu;
    struct aj_tmpl *tmpl;
    /* Templates that died, kept (their sandboxes hold the reapers of the
     * children they forked) until none of those is left (aj_tmpl_idle):
     * under tmpl_mu. */
    struct retired_tmpl {
        struct aj_tmpl *t;
    } *retired;
    unsigned n_retired, cap_retired;
    bool tmpl_off, tmpl_ever;
    unsigned tmpl_restarts;                 /* consecutive failed restarts */
    pid_t tmpl_pid;
    /* Clones the inits of the pool's sandboxes (zygote.h); NULL: the
     * fillers clone them (out of memory when the pool was made). */
    struct aj_zygote *zyg;
    char tmpl_why[sizeof(((struct aj_error *)0)->msg) + 64];
};

/* After this many template restarts in a row fail, the pool parks
 * interpreters that import the preload themselves. */
#define TMPL_MAX_RESTARTS 3

/* ms from now on the clock pthread_cond_timedwait measures by default. */
static struct timespec deadline_in(uint64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void pool_discard(struct aj_sandbox *sb)
{
    sb_discard(sb, 0, NULL, NULL, NULL);
}

/* Handle a sandbox's messages, while it is prepared, until done() holds.
 * Bounded: a sandbox that neither gets there nor fails within 10 s is
 * broken (timeout_msg); one whose init is gone first, gone_msg. */
int aj_sb_drain_until(struct aj_sandbox *sb, bool (*done)(const struct supervise_state *st), const char *timeout_msg,
                      const char *gone_msg, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    uint64_t deadline = aj_now_ms() + 10000;

    while (!done(st) && !st->have_child_err && st->sock >= 0) {
        struct pollfd p[2] = {{.fd = st->sock, .events = POLLIN}, {.fd = st->pidfd, .events = POLLIN}};
        uint64_t now = aj_now_ms();
        int r;
        if (now >= deadline)
            return aj_err(err, ETIMEDOUT, "%s", timeout_msg);
        r = poll(p, 2, (int)(deadline - now));
        if (r < 0 && errno != EINTR)
            return aj_err(err, errno, "poll a sandbox being prepared");
        if (r > 0)
            aj_loop_drain_msgs(st);
        if (r > 0 && !p[0].revents && p[1].revents)
            break; /* init is gone */
    }
    if (st->have_child_err) {
        *err = st->child_err;
        return -(err->errnum ? err->errnum : EPIPE);
    }
    if (!done(st))
        return aj_err(err, EPIPE, "%s", gone_msg);
    return 0;
}

static bool decoys_armed(const struct supervise_state *st)
{
    return st->decoys_armed;
}

/* The parked sandbox's decoys leased (init then goes on to fork the
 * waiting payload). */
int aj_pool_arm_decoys(struct aj_sandbox *sb, struct aj_error *err)
{
    return aj_sb_drain_until(sb, decoys_armed, "a parked sandbox did not hand over its decoys",
                             "a parked sandbox failed before its decoys were armed", err);
}

static bool have_listener(const struct supervise_state *st)
{
    return st->notify.fd >= 0;
}

/* A parked payload hands over its seccomp listener before it waits for a
 * command: taken now, so that a parked sandbox holds the same fds whenever
 * it is looked at (and the run's start has one message less to read). */
static int pool_wait_listener(struct aj_sandbox *sb, struct aj_error *err)
{
    if (!sb->c.bpf.notify || (sb->c.skip & AJ_SKIP_SECCOMP))
        return 0;
    return aj_sb_drain_until(sb, have_listener, "a parked sandbox did not hand over its seccomp listener",
                             "a parked sandbox failed before it handed over its seccomp listener", err);
}

static void tmpl_set_off(struct aj_pool *pool, const char *why)
{
    pool->tmpl_off = true;
    pthread_mutex_lock(&pool->mu);
    pool->tmpl_pid = 0;
    (void)snprintf(pool->tmpl_why, sizeof(pool->tmpl_why), "%s", why);
    pthread_mutex_unlock(&pool->mu);
}

/* Free the retired templates none of whose children is left. */
static void retired_prune(struct aj_pool *pool)
{
    unsigned k = 0;

    for (unsigned i = 0; i < pool->n_retired; i++) {
        if (aj_tmpl_idle(pool->retired[i].t))
            aj_tmpl_free(pool->retired[i].t);
        else
            pool->retired[k++] = pool->retired[i];
    }
    pool->n_retired = k;
}

/* The pool's template, started (again) if it is not running; NULL when
 * the pool does not use one (err filled only for a failure to report: the
 * first start, from aj_pool_new, where a preload that does not import
 * must fail the pool as it does without a template). */
static struct aj_tmpl *pool_template(struct aj_pool *pool, bool first, struct aj_error *err)
{
    struct aj_error terr = {0};
    char why[sizeof(terr.msg)];
    int r;

    retired_prune(pool);
    if (pool->tmpl_off)
        return NULL;
    if (pool->tmpl && aj_tmpl_alive(pool->tmpl))
        return pool->tmpl;
    if (!pool->tmpl && !aj_tmpl_wanted(pool->pol, why, sizeof(why))) {
        tmpl_set_off(pool, why[0] ? why : "interpreter.template is false");
        return NULL;
    }
    if (pool->tmpl) {
        /* Died: a new one. Freeing it would end its sandbox, and with it
         * the reapers of its children still parked or running. */
        if (pool->n_retired == pool->cap_retired) {
            unsigned cap = pool->cap_retired ? 2 * pool->cap_retired : 4;
            struct retired_tmpl *more = realloc(pool->retired, cap * sizeof(*more));
            if (!more) {
                aj_err(err, ENOMEM, "the pool's retired templates");
                return NULL;
            }
            pool->retired = more;
            pool->cap_retired = cap;
        }
        pool->retired[pool->n_retired++].t = pool->tmpl;
        pool->tmpl = NULL;
    }
    r = aj_tmpl_start(pool->pol, &pool->cancel, &pool->tmpl, &terr);
    if (r == 0) {
        pool->tmpl_restarts = 0;
        pool->tmpl_ever = true;
        pthread_mutex_lock(&pool->mu);
        pool->tmpl_pid = aj_tmpl_pid(pool->tmpl);
        pool->tmpl_why[0] = '\0';
        pthread_mutex_unlock(&pool->mu);
        return pool->tmpl;
    }
    if (first || r == -ECANCELED) {
        *err = terr;
        return NULL;
    }
    if (++pool->tmpl_restarts >= TMPL_MAX_RESTARTS) {
        char msg[sizeof(pool->tmpl_why)];
        (void)snprintf(msg, sizeof(msg), "the template failed %u times in a row: %s", pool->tmpl_restarts, terr.msg);
        tmpl_set_off(pool, msg);
        return NULL;
    }
    *err = terr;
    return NULL;
}

/* One parked sandbox, or NULL with err filled. zyg: the pool's zygote
 * clones its init (a filler's call): the zygote, and the inits it clones
 * (CLONE_PARENT), have the thread that started it as their parent, whose
 * end is their death signal; a filler lives as long as the pool, the
 * thread that called aj_pool_new may not. */
static struct aj_sandbox *pool_prepare(struct aj_pool *pool, struct aj_zygote *zyg, struct aj_error *err)
{
    struct aj_tmpl *tmpl = NULL;
    struct aj_sandbox *sb;
    int r;

    /* A pool of interpreters parks a started one (interp.c): a fork of
     * its template where it has one (tmpl.c). */
    if (pool->pol->interp_lang != AJ_INTERP_NONE) {
        err->msg[0] = '\0';
        pthread_mutex_lock(&pool->tmpl_mu);
        tmpl = pool_template(pool, !pool->tmpl_ever, err);
        pthread_mutex_unlock(&pool->tmpl_mu);
        if (!tmpl && err->msg[0])
            return NULL;
    }
    if (tmpl) {
        r = aj_interp_prepare_adopted(pool->pol, zyg, &sb, err);
        if (r == -EOPNOTSUPP) {
            pthread_mutex_lock(&pool->tmpl_mu);
            tmpl_set_off(pool, err->msg);
            pthread_mutex_unlock(&pool->tmpl_mu);
            *err = (struct aj_error){0};
            return pool_prepare(pool, zyg, err);
        }
        if (r < 0)
            return NULL;
        /* Another filler may have restarted the template (or given up on
         * it) meanwhile: ask again, and hold it for the spawn. */
        pthread_mutex_lock(&pool->tmpl_mu);
        tmpl = pool_template(pool, false, err);
        r = tmpl ? aj_tmpl_spawn(tmpl, sb, err) : err->msg[0] ? -EAGAIN : -EOPNOTSUPP;
        pthread_mutex_unlock(&pool->tmpl_mu);
        if (r == -EOPNOTSUPP) {
            /* No template any more: this sandbox was made for one. */
            pool_discard(sb);
            *err = (struct aj_error){0};
            return pool_prepare(pool, zyg, err);
        }
        if (r == 0)
            r = aj_interp_wait_parked(sb, &pool->cancel, err);
        if (r == 0)
            r = pool_wait_listener(sb, err);
        if (r < 0) {
            pool_discard(sb);
            return NULL;
        }
        return sb;
    }
    sb = malloc(sizeof(*sb));
    if (!sb) {
        aj_err(err, ENOMEM, "pooled sandbox");
        return NULL;
    }
    sb_init(sb, pool->pol);
    sb->zyg = zyg;
    result_reset(&sb->prepared);
    r = sb_begin(sb, pool->pol, NULL, &sb->prepared, err);
    if (r == 0 && pool->pol->interp_lang != AJ_INTERP_NONE)
        r = aj_interp_setup_parked(sb, err);
    if (r == 0)
        r = sb_prepare(sb, !sb->c.interp, &sb->prepared, err);
    if (r < 0) {
        pool_discard(sb);
        return NULL;
    }
    /* A parked sandbox's init waits for the supervisor to lease its decoys
     * before it forks the payload: take them now, not at launch. */
    if (sb->c.decoys.n > 0 && aj_pool_arm_decoys(sb, err) < 0) {
        pool_discard(sb);
        return NULL;
    }
    if ((sb->c.interp && aj_interp_wait_parked(sb, &pool->cancel, err) < 0) || pool_wait_listener(sb, err) < 0) {
        pool_discard(sb);
        return NULL;
    }
    return sb;
}

static void *pool_filler(void *arg)
{
    struct aj_pool *pool = arg;
    uint64_t now;

    /* This filler's zygote (zygote.h): a failure to start one only costs
     * speed, its sandboxes' inits are cloned here then. */
    if (pool->zyg)
        (void)aj_zygote_start_one(pool->zyg);
    pthread_mutex_lock(&pool->mu);
    while (!pool->stopping) {
        if (pool->n_dying > 0) {
            /* A run's result is out; its killed sandbox finishes dying
             * here (mostly a wait on the kernel), then its release. */
            struct aj_sandbox *sb = pool->dying[--pool->n_dying];
            pthread_mutex_unlock(&pool->mu);
            aj_sandbox_free(sb);
            pthread_mutex_lock(&pool->mu);
        } else if (pool->running > 0 && pool->n_ready > 0 && 2 * (pool->n_ready + pool->preparing) >= pool->size &&
                   (now = aj_now_ms()) - pool->last_take_ms < POOL_DEFER_MS) {
            /* A payload is starting: preparing now would take the CPU it
             * needs. The run ends, its start is over, or the pool falls
             * below half full (sustained load), and we go on. */
            struct timespec ts = deadline_in(pool->last_take_ms + POOL_DEFER_MS - now + 1);
            (void)pthread_cond_timedwait(&pool->wake, &pool->mu, &ts);
        } else if (pool->n_spent > 0) {
            /* v1 memory groups can take a while to go: never on a run's path. */
            struct aj_cgroup cg = pool->spent[--pool->n_spent];
            aj_cgroup_init(&pool->spent[pool->n_spent]);
            pthread_mutex_unlock(&pool->mu);
            aj_cgroup_destroy(&cg);
            pthread_mutex_lock(&pool->mu);
        } else if (pool->n_ready + pool->preparing < pool->size) {
            struct aj_error err = {0};
            struct aj_sandbox *sb;
            pool->preparing++;
            pthread_mutex_unlock(&pool->mu);
            sb = pool_prepare(pool, pool->zyg, &err);
            pthread_mutex_lock(&pool->mu);
            pool->preparing--;
            pool->stats.prepared += sb != NULL;
            if (sb && pool->n_ready < pool->size && !pool->stopping) {
                pool->ready[pool->n_ready++] = sb;
                pthread_cond_broadcast(&pool->parked);
            } else if (sb) {
                pthread_mutex_unlock(&pool->mu);
                pool_discard(sb);
                pthread_mutex_lock(&pool->mu);
            } else {
                /* Runs go cold meanwhile; try again shortly, not in a spin. */
                struct timespec ts = deadline_in(100);
                pool->stats.refill_failures++;
                (void)pthread_cond_timedwait(&pool->wake, &pool->mu, &ts);
            }
        } else {
            pthread_cond_wait(&pool->wake, &pool->mu);
        }
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

int aj_pool_new(const struct aj_policy *pol, unsigned size, struct aj_pool **ret, struct aj_error *err)
{
    struct aj_pool *pool;
    sigset_t all, old;
    int r;

    *ret = NULL;
    if (size < 1 || size > AJ_POOL_MAX)
        return aj_err(err, EINVAL, "pool size %u: must be 1 to %d", size, AJ_POOL_MAX);
    if (pol->allow_degraded)
        return aj_err(err, EINVAL, "a pool cannot run degraded sandboxes: drop allow_degraded");
    r = aj_policy_validate(pol, err);
    if (r < 0)
        return r;
    pool = calloc(1, sizeof(*pool));
    if (!pool)
        return aj_err(err, ENOMEM, "pool");
    pool->pol = pol;
    pool->size = size;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_mutex_init(&pool->tmpl_mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->parked, NULL);
    for (unsigned i = 0; i < AJ_POOL_MAX; i++)
        aj_cgroup_init(&pool->spent[i]);
    pool->refs = 1;
    /* The first sandboxes in the caller's thread: if one cannot be
     * prepared here, the caller hears why now. */
    for (unsigned i = 0; i < size; i++) {
        struct aj_sandbox *sb = pool_prepare(pool, NULL, err);
        if (!sb) {
            aj_pool_free(pool);
            return -(err->errnum ? err->errnum : EINVAL);
        }
        pool->ready[pool->n_ready++] = sb;
        pool->stats.prepared++;
    }
    /* Two fillers per CPU this process may use, at most POOL_FILLERS_MAX
     * and no more than the pool holds. */
    cpu_set_t cpus;
    unsigned want = 2;
    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 1)
        want = 2 * (unsigned)CPU_COUNT(&cpus);
    if (want > POOL_FILLERS_MAX)
        want = POOL_FILLERS_MAX;
    if (want > size)
        want = size;
    /* A zygote per filler, started by it before this returns: it then
     * holds nothing of any request the caller takes later. */
    pool->zyg = aj_zygote_new(want);
    if (pool->zyg)
        aj_zygote_set_policy(pool->zyg, &pool->ready[0]->req.eff);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r = 0;
    while (pool->n_fillers < want && r == 0) {
        r = pthread_create(&pool->fillers[pool->n_fillers], NULL, pool_filler, pool);
        pool->n_fillers += r == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pool->n_fillers == 0) {
        aj_pool_free(pool);
        return aj_err(err, r, "start the pool's filler thread");
    }
    if (pool->zyg)
        aj_zygote_wait_started(pool->zyg, pool->n_fillers);
    *ret = pool;
    return 0;
}

static void pool_unref(struct aj_pool *pool)
{
    bool last;

    pthread_mutex_lock(&pool->mu);
    last = --pool->refs == 0;
    pthread_mutex_unlock(&pool->mu);
    if (!last)
        return;
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->parked);
    pthread_mutex_destroy(&pool->tmpl_mu);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

void aj_pool_free(struct aj_pool *pool)
{
    if (!pool)
        return;
    __atomic_store_n(&pool->cancel, true, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pool->mu);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    while (pool->n_fillers > 0)
        pthread_join(pool->fillers[--pool->n_fillers], NULL);
    aj_zygote_free(pool->zyg); /* no more sandboxes to prepare */
    pool->zyg = NULL;
    /* Nothing is queued once stopping is set (aj_pool_free_handle). */
    while (pool->n_dying > 0)
        aj_sandbox_free(pool->dying[--pool->n_dying]);
    while (pool->n_ready > 0)
        pool_discard(pool->ready[--pool->n_ready]);
    aj_tmpl_free(pool->tmpl);
    pool->tmpl = NULL;
    while (pool->n_retired > 0)
        aj_tmpl_free(pool->retired[--pool->n_retired].t);
    free(pool->retired);
    pthread_mutex_lock(&pool->mu);
    pool->tmpl_pid = 0;
    while (pool->n_spent > 0) {
        struct aj_cgroup cg = pool->spent[--pool->n_spent];
        pthread_mutex_unlock(&pool->mu);
        aj_cgroup_destroy(&cg);
        pthread_mutex_lock(&pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
    /* Warm runs still in flight keep the rest until they end. */
    pool_unref(pool);
}

void aj_pool_run_finished(struct aj_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    pool->running--;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
}

void aj_pool_run_ended(struct aj_pool *pool, struct aj_cgroup *spent, bool finished)
{
    pthread_mutex_lock(&pool->mu);
    if (spent->created && !pool->stopping && pool->n_spent < AJ_POOL_MAX) {
        pool->spent[pool->n_spent++] = *spent;
        aj_cgroup_init(spent);
    }
    if (!finished)
        pool->running--;
    pthread_cond_broadcast(&pool->wake); /* refill, and remove what the run left */
    pthread_mutex_unlock(&pool->mu);
    aj_cgroup_destroy(spent); /* only if the list was full, or the pool is going */
    pool_unref(pool);
}

const struct aj_policy *aj_pool_policy(const struct aj_pool *pool)
{
    return pool->pol;
}

void aj_pool_count_cold(struct aj_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    pool->stats.cold_runs++;
    pthread_mutex_unlock(&pool->mu);
}

void aj_pool_warm_failed(struct aj_pool *pool, struct aj_cgroup *spent)
{
    pthread_mutex_lock(&pool->mu);
    pool->stats.warm_runs--;
    pool->stats.cold_runs++;
    pool->stats.discarded++;
    pthread_mutex_unlock(&pool->mu);
    aj_pool_run_ended(pool, spent, false);
}

int aj_pool_template(struct aj_pool *pool, char *why, size_t why_size)
{
    int pid;

    if (!pool)
        return -EINVAL;
    pthread_mutex_lock(&pool->mu);
    pid = pool->tmpl_pid;
    if (why && why_size)
        (void)snprintf(why, why_size, "%s",
                       pid > 0 ? "" : pool->tmpl_why[0] ? pool->tmpl_why : "not an interpreter pool");
    pthread_mutex_unlock(&pool->mu);
    return pid;
}

void aj_pool_get_stats(struct aj_pool *pool, struct aj_pool_stats *out)
{
    pthread_mutex_lock(&pool->mu);
    *out = pool->stats;
    out->ready = pool->n_ready;
    pthread_mutex_unlock(&pool->mu);
}

/* A parked sandbox whose init has exited (setup failed, or it was killed)
 * cannot take a command; nor one whose egress proxy is gone or whose run
 * CA would not outlast the run (network "proxy": parked past
 * AJ_EGRESS_PARK_MAX_S). */
static bool parked_alive(const struct aj_sandbox *sb)
{
    struct pollfd p = {.fd = sb->st.pidfd, .events = POLLIN};
    return sb->st.pidfd >= 0 && poll(&p, 1, 0) == 0 && aj_egress_parked_usable(&sb->eg, sb->c.pol->timeout_ms);
}

/* Whether the request fits what a parked payload takes (AJ_RUN_MAX_*):
 * argv, and the environment it will get (built again at launch; the decoy
 * variables are short, a page covers them). */
static bool run_request_fits(const struct aj_policy *pol, char *const *argv)
{
    size_t len = sizeof(struct aj_run_msg) + 4096, argc = 0;

    for (; argv[argc]; argc++) {
        len += strlen(argv[argc]) + 1;
        if (argc >= AJ_RUN_MAX_ARGS || len > AJ_RUN_MAX_BYTES)
            return false;
    }
    for (size_t i = 0; i < pol->n_env_pass; i++) {
        const char *v = getenv(pol->env_pass[i]);
        if (v)
            len += strlen(pol->env_pass[i]) + strlen(v) + 2;
    }
    for (size_t i = 0; i < pol->n_env; i++)
        len += strlen(pol->env[i]) + 1;
    return pol->n_env_pass + pol->n_env + 8 <= AJ_RUN_MAX_ARGS && len <= AJ_RUN_MAX_BYTES;
}

/* A template pool's refill is a fork and a sandbox (milliseconds), a cold
 * interpreter run a whole import (hundreds): one that finds the pool empty
 * waits this long for the refill under way before it runs cold. */
#define TAKE_WAIT_MS 300

struct aj_sandbox *aj_pool_take_wait(struct aj_pool *pool)
{
    struct timespec ts;
    bool wait;

    pthread_mutex_lock(&pool->mu);
    wait = pool->tmpl_pid > 0 && pool->n_ready == 0 && !pool->stopping;
    if (wait) {
        ts = deadline_in(TAKE_WAIT_MS);
        pthread_cond_broadcast(&pool->wake); /* the filler, if it waits for a run to end */
        while (pool->n_ready == 0 && !pool->stopping && pool->tmpl_pid > 0)
            if (pthread_cond_timedwait(&pool->parked, &pool->mu, &ts) != 0)
                break;
    }
    pthread_mutex_unlock(&pool->mu);
    return aj_pool_take(pool);
}

struct aj_sandbox *aj_pool_take(struct aj_pool *pool)
{
    struct aj_sandbox *sb = NULL;

    pthread_mutex_lock(&pool->mu);
    while (pool->n_ready > 0 && !sb) {
        sb = pool->ready[--pool->n_ready];
        if (!parked_alive(sb)) {
            pool->stats.discarded++;
            pthread_mutex_unlock(&pool->mu);
            pool_discard(sb);
            pthread_mutex_lock(&pool->mu);
            sb = NULL;
        }
    }
    if (sb) {
        pool->stats.warm_runs++;
        /* A warm run: the filler waits, the payload has both CPUs. A cold
         * one (nothing parked) leaves the filler refilling. */
        pool->running++;
        pool->last_take_ms = aj_now_ms();
        pool->refs++; /* until aj_pool_run_ended */
        if (2 * (pool->n_ready + pool->preparing) < pool->size)
            pthread_cond_broadcast(&pool->wake); /* below half: refill now */
    } else {
        pool->stats.cold_runs++;
    }
    pthread_mutex_unlock(&pool->mu);
    return sb;
}

/* The parked payload has its command: wait (bounded) until it says READY
 * (or fails, or is found dead). A parked sandbox can die between the
 * liveness check and the launch (killed from outside, the OOM killer);
 * if its payload never said READY, the command was never executed, and
 * the caller runs it cold instead. */
#define READY_WAIT_MS 5000

static void wait_ready(struct aj_sandbox *sb)
{
    struct supervise_state *st = &sb->st;
    uint64_t deadline = aj_now_ms() + READY_WAIT_MS;

    while (!st->started && !st->have_child_err && st->sock >= 0) {
        struct pollfd p[2] = {{.fd = st->sock, .events = POLLIN}, {.fd = st->pidfd, .events = POLLIN}};
        uint64_t now = aj_now_ms();
        int r;
        if (now >= deadline)
            return;
        r = poll(p, 2, (int)(deadline - now));
        if (r < 0 && errno != EINTR)
            return;
        if (r > 0 && p[0].revents)
            aj_loop_drain_msgs(st);
        else if (r > 0 && p[1].revents)
            return; /* init is gone */
    }
}

static int pool_start(struct aj_pool *pool, const struct aj_request *req, bool pipes_ok, struct aj_sandbox **ret,
                      struct aj_error *err)
{
    const struct aj_policy *pol;
    struct aj_sandbox *sb;
    struct aj_cgroup spent;
    struct aj_req rq;
    bool retry;
    int r;

    *ret = NULL;
    r = aj_req_take(pool->pol, req, &rq, err);
    if (r == 0 && pool->pol->interp_lang != AJ_INTERP_NONE)
        return aj_interp_pool_start(pool, &rq, req, pipes_ok, ret, err); /* a pool of interpreters */
    if (r < 0 || rq.fixed_in_parked || !run_request_fits(&rq.eff, rq.argv)) {
        /* Beyond what a parked payload takes (AJ_RUN_MAX_*), or what it has
         * fixed already (working directory, memory and cpu-time limits): a
         * cold run, which has no such bound. The parked sandboxes stay
         * parked. A refused request: the cold start's refusal, the same
         * ended handle. */
        aj_req_clear(&rq);
        pthread_mutex_lock(&pool->mu);
        pool->stats.cold_runs += r == 0;
        pthread_mutex_unlock(&pool->mu);
        return sb_start_cold(pool->pol, req, pipes_ok, ret, err);
    }
    for (int i = 0; !pipes_ok && i < 3; i++)
        if (rq.stdio[i].kind == AJ_STDIO_PIPE) { /* the cold start says why */
            aj_req_clear(&rq);
            return sb_start_cold(pool->pol, req, pipes_ok, ret, err);
        }
    sb = aj_pool_take(pool);
    if (!sb) { /* empty (or every parked one had died): a cold run, same result */
        aj_req_clear(&rq);
        return sb_start_cold(pool->pol, req, pipes_ok, ret, err);
    }
    sb->res = sb->prepared;
    sb->start = aj_now_ms();
    /* The request's timeout and output limit from here on (both the
     * supervisor's to enforce); the sandbox side has its copy already. */
    aj_req_clear(&sb->req);
    sb->req = rq;
    sb_use_policy(sb, &sb->req.eff);
    r = sb_keep_argv(sb, err);
    if (r == 0)
        r = aj_loop_open(&sb->st, err);
    if (r == 0)
        r = sb_open_audit(sb, &sb->res, err);
    if (r == 0)
        r = sb_launch(sb, &sb->res, err);
    if (r == 0) {
        sb_go(sb);
        wait_ready(sb);
        /* What wait_ready took may have watches of its own: a sandbox
         * launched as soon as it was parked (the first run after
         * aj_pool_new) sends its seccomp listener only now. Unwatched, a
         * payload stopped in a monitored call waited for a round of the
         * loop that nothing else would trigger (rootless, no cgroup timer). */
        aj_loop_arm(&sb->st);
    }
    /* Anything after READY is the run's, and an events file we could not
     * open is the caller's error, not the sandbox's: no retry then. */
    retry = sb->audit_open && !sb->st.started && !sb->st.have_child_err && !sb->st.interrupted &&
            sb->st.limit == AJ_STATUS_OK;
    if (!retry) {
        sb->pool = pool; /* its end goes back to the pool (sb_release_run) */
        if (r < 0)
            sb_fail_at_start(sb, r, err);
        *ret = sb;
        return 0;
    }
    aj_cgroup_init(&spent);
    sb_discard(sb, r, NULL, NULL, &spent); /* no events: it never ran */
    pthread_mutex_lock(&pool->mu);
    pool->stats.warm_runs--;
    pool->stats.cold_runs++;
    pool->stats.discarded++;
    pthread_mutex_unlock(&pool->mu);
    pol = pool->pol; /* the caller's: it outlives the pool, whose reference we drop */
    aj_pool_run_ended(pool, &spent, false);
    *err = (struct aj_error){0};
    return sb_start_cold(pol, req, pipes_ok, ret, err);
}

int aj_pool_start(struct aj_pool *pool, const struct aj_request *req, struct aj_sandbox **ret, struct aj_error *err)
{
    struct sig_guard g;
    int r;

    if (!pool || !ret)
        return aj_err(err, EINVAL, "aj_pool_start: no pool or no handle to return");
    sb_guard_enter(&g);
    r = pool_start(pool, req, true, ret, err);
    sb_guard_leave(&g);
    return r;
}

void aj_pool_free_handle(struct aj_sandbox *sb)
{
    struct aj_pool *pool = sb->pool; /* alive: the handle holds a reference until its release */
    bool queued = false;

    if (sb->teardown && pool) {
        pthread_mutex_lock(&pool->mu);
        if (!pool->stopping && pool->n_dying < AJ_POOL_MAX) {
            pool->dying[pool->n_dying++] = sb;
            pthread_cond_broadcast(&pool->wake);
            queued = true;
        }
        pthread_mutex_unlock(&pool->mu);
    }
    if (!queued)
        aj_sandbox_free(sb);
}

int aj_pool_run(struct aj_pool *pool, const struct aj_request *req, struct aj_result *res, struct aj_error *err)
{
    struct aj_sandbox *sb;
    struct sig_guard g;
    int r;

    sb_guard_enter(&g);
    r = pool_start(pool, req, false, &sb, err);
    sb_guard_leave(&g);
    if (r < 0) {
        result_reset(res);
        result_refused(res, err);
        return r;
    }
    r = aj_sandbox_wait(sb, err);
    *res = *aj_sandbox_result(sb);
    /* The caller never sees this handle: the pool owns what is left of
     * it (aj_pool_free waits for it), the result is the caller's now. */
    aj_pool_free_handle(sb);
    return r;
}
