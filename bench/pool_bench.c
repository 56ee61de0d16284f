/* SPDX-License-Identifier: Apache-2.0 */
/* aj-pool-bench: the warm path, measured from inside one process as a
 * server would use it (libagentjail's aj_pool_*), against a bare
 * posix_spawn + waitpid of the same command from the same process.
 *
 *   aj-pool-bench latency N CMD...          start+run+teardown, interleaved
 *   aj-pool-bench throughput SECS CLIENTS CMD...   runs/s, CLIENTS processes
 *   aj-pool-bench memory K                  memory of K idle pooled sandboxes
 *   aj-pool-bench peak N CMD...             peak RSS of CMD's process tree
 *
 * Before the mode, --gap-ms MS sets latency's idle time between rounds
 * (default 10: the pool refills in it), and --set KEY=VALUE sets a policy key (repeatable):
 * --set interpreter.language=python --set interpreter.preload=pandas makes
 * the pools warm interpreters (bench/interp.py), whose commands are then
 * /usr/bin/python3 -c CODE (a path: the bare runs spawn it without PATH).
 *
 * Prints one JSON object; the scripts in bench/ turn it into tables. A
 * benchmark, not a test: it fails only when it cannot run at all. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentjail.h"

extern char **environ;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int devnull = -1;
static unsigned gap_us = 10000; /* latency: idle time between rounds */

static int run_bare(char **cmd)
{
    posix_spawn_file_actions_t fa;
    pid_t pid;
    int st, r;

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, devnull, 1);
    posix_spawn_file_actions_adddup2(&fa, devnull, 2);
    r = posix_spawn(&pid, cmd[0], &fa, NULL, cmd, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0)
        return -r;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static uint64_t warm_cpu_ms; /* the results' cpu_ms (their cgroups': the refill's import included) */

static int run_warm(struct aj_pool *pool, char **cmd)
{
    struct aj_request req = AJ_REQUEST_INIT;
    struct aj_result res;
    struct aj_error err = {0};

    req.argv = cmd;
    req.stdio[1] = req.stdio[2] = AJ_STDIO_OF_FD(devnull);
    if (aj_pool_run(pool, &req, &res, &err) < 0) {
        fprintf(stderr, "aj-pool-bench: %s\n", err.msg);
        return -1;
    }
    warm_cpu_ms += res.cpu_ms;
    if (res.status != AJ_STATUS_OK && getenv("AJ_BENCH_VERBOSE"))
        fprintf(stderr, "aj-pool-bench: a warm run: status %d exit %d signal %d %s\n", (int)res.status, res.exit_code,
                res.signal, res.error);
    return res.status == AJ_STATUS_OK ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void print_stats(const char *name, uint64_t *v, size_t n, unsigned fails)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    printf("\"%s\": {\"median_ns\": %llu, \"p95_ns\": %llu, \"min_ns\": %llu, \"failed\": %u}", name,
           (unsigned long long)v[n / 2], (unsigned long long)v[(n * 95 + 99) / 100 - 1], (unsigned long long)v[0],
           fails);
}

static struct aj_pool *new_pool(struct aj_policy *pol, unsigned size)
{
    struct aj_pool *pool;
    struct aj_error err = {0};

    if (aj_pool_new(pol, size, &pool, &err) < 0) {
        fprintf(stderr, "aj-pool-bench: cannot create the pool: %s\n", err.msg);
        exit(1);
    }
    return pool;
}

static int latency(struct aj_policy *pol, unsigned long n, char **cmd)
{
    uint64_t *bare = calloc(n, sizeof(uint64_t)), *warm = calloc(n, sizeof(uint64_t));
    unsigned fb = 0, fw = 0;
    struct aj_pool *pool = new_pool(pol, 2);
    struct aj_pool_stats ps;

    if (!bare || !warm)
        return 1;
    for (int i = 0; i < 10; i++) {
        (void)run_bare(cmd);
        (void)run_warm(pool, cmd);
    }
    for (unsigned long i = 0; i < n; i++) {
        bool bare_first = rand() & 1; /* each round runs both, in a random order */
        /* Calls from agents are spaced (the model thinks between tool
         * calls): the pool refills in the gap. Sustained back-to-back load
         * is what the throughput mode measures. */
        usleep(gap_us);
        /* ... and at least until it is full again (an interpreter pool's
         * refill imports its preload: seconds on a busy machine). */
        for (int w = 0; w < 6000; w++) {
            aj_pool_get_stats(pool, &ps);
            if (ps.ready >= 2)
                break;
            usleep(10000);
        }
        for (int k = 0; k < 2; k++) {
            bool do_bare = (k == 0) == bare_first;
            uint64_t t0 = now_ns();
            int r = do_bare ? run_bare(cmd) : run_warm(pool, cmd);
            uint64_t dt = now_ns() - t0;
            if (do_bare) {
                bare[i] = dt;
                fb += r < 0;
            } else {
                warm[i] = dt;
                fw += r < 0;
            }
        }
    }
    aj_pool_get_stats(pool, &ps);
    printf("{\"benchmark\": \"pool-latency\", \"runs\": %lu, ", n);
    print_stats("bare", bare, n, fb);
    printf(", ");
    print_stats("warm", warm, n, fw);
    printf(", \"cold_fallbacks\": %llu}\n", (unsigned long long)ps.cold_runs);
    aj_pool_free(pool);
    free(bare);
    free(warm);
    return 0;
}

/* CLIENTS processes, each with its own pool (a pool is single-threaded),
 * released together, each counting its runs until the deadline. */
/* CPU time (user + system, ms) of this process, or of its reaped children. */
static double cpu_ms_of(int who)
{
    struct rusage u;
    getrusage(who, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

/* ... and each client's CPU time per run in the window: its own, plus
 * bare: its reaped children's; warm: the results' cpu_ms, read from each
 * sandbox's cgroup, which counts its refill's import too (rusage would
 * not: what dies with a pid namespace is not accounted to its parent).
 * What a warm sandbox spends after its result (its exit) is not in it. */
static double throughput_of(struct aj_policy *pol, bool warm, double secs, unsigned clients, char **cmd,
                            unsigned long *ret_fail, double *ret_cpu_per_run)
{
    int go[2], counts[2], ready[2];
    pid_t pids[64];
    unsigned long total = 0, fails = 0;
    double cpu = 0;

    if (pipe(go) < 0 || pipe(counts) < 0 || pipe(ready) < 0)
        exit(1);
    for (unsigned c = 0; c < clients; c++) {
        pids[c] = fork();
        if (pids[c] == 0) {
            struct aj_pool *pool = warm ? new_pool(pol, 2) : NULL;
            unsigned long got[3] = {0, 0, 0};
            char b = 'r';
            double c0;
            close(go[1]);
            if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) < 0)
                _exit(1);
            c0 = cpu_ms_of(RUSAGE_SELF) + (warm ? 0 : cpu_ms_of(RUSAGE_CHILDREN));
            warm_cpu_ms = 0;
            uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
            while (now_ns() < end) {
                int r = warm ? run_warm(pool, cmd) : run_bare(cmd);
                got[r < 0]++;
            }
            got[2] = (unsigned long)(cpu_ms_of(RUSAGE_SELF) + (warm ? (double)warm_cpu_ms : cpu_ms_of(RUSAGE_CHILDREN)) - c0);
            if (write(counts[1], got, sizeof(got)) < 0)
                _exit(1);
            aj_pool_free(pool);
            _exit(0);
        }
    }
    close(go[0]);
    for (unsigned c = 0; c < clients; c++) { /* every client's pool is prepared */
        char b;
        if (read(ready[0], &b, 1) != 1)
            exit(1);
    }
    usleep(300000); /* and its filler idle */
    close(go[1]);
    close(ready[0]);
    close(ready[1]);
    for (unsigned c = 0; c < clients; c++) {
        unsigned long got[3];
        if (read(counts[0], got, sizeof(got)) == (ssize_t)sizeof(got)) {
            total += got[0];
            fails += got[1];
            cpu += (double)got[2];
        }
    }
    for (unsigned c = 0; c < clients; c++)
        waitpid(pids[c], NULL, 0);
    close(counts[0]);
    close(counts[1]);
    *ret_fail = fails;
    *ret_cpu_per_run = total ? cpu / (double)total : 0;
    return (double)total / secs;
}

static int throughput(struct aj_policy *pol, double secs, unsigned clients, char **cmd)
{
    unsigned long fb, fw;
    double cb, cw;
    double b = throughput_of(pol, false, secs, clients, cmd, &fb, &cb);
    double w = throughput_of(pol, true, secs, clients, cmd, &fw, &cw);
    printf("{\"benchmark\": \"pool-throughput\", \"seconds\": %.1f, \"clients\": %u, \"bare_per_s\": %.1f, "
           "\"bare_failed\": %lu, \"warm_per_s\": %.1f, \"warm_failed\": %lu, \"bare_cpu_ms_per_run\": %.1f, "
           "\"warm_cpu_ms_per_run\": %.1f}\n",
           secs, clients, b, fb, w, fw, cb, cw);
    return 0;
}

static long read_kb_field(const char *path, const char *field)
{
    FILE *f = fopen(path, "re");
    char line[256];
    long v = -1;
    size_t n = strlen(field);

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0)
            v = strtol(line + n, NULL, 10);
    fclose(f);
    return v;
}

static size_t children_of(pid_t pid, pid_t *out, size_t max)
{
    char path[64];
    FILE *f;
    size_t n = 0;
    long c;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    f = fopen(path, "re");
    if (!f)
        return 0;
    while (n < max && fscanf(f, "%ld", &c) == 1)
        out[n++] = (pid_t)c;
    fclose(f);
    return n;
}

/* The memory cgroup (v1 or v2) a process is in, as charged bytes. */
static long cgroup_kb(pid_t pid)
{
    char path[128], line[512], file[768];
    FILE *f;
    long v = -1;

    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return -1;
    while (v < 0 && fgets(line, sizeof(line), f)) {
        char *p = strstr(line, ":memory:");
        line[strcspn(line, "\n")] = '\0';
        if (p)
            snprintf(file, sizeof(file), "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", p + 8);
        else if (strncmp(line, "0::", 3) == 0)
            snprintf(file, sizeof(file), "/sys/fs/cgroup%s/memory.current", line + 3);
        else
            continue;
        FILE *g = fopen(file, "re");
        long long b;
        if (g && fscanf(g, "%lld", &b) == 1 && strstr(file, "agentjail"))
            v = (long)(b / 1024);
        if (g)
            fclose(g);
    }
    fclose(f);
    return v;
}

static long pss_kb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
    return read_kb_field(path, "Pss:");
}

/* PSS of the parked sandboxes: each init and its payload (one import per
 * interpreter), or (a template pool) each init (the template's own
 * sandbox's too, a few hundred KiB) and the template's children (the
 * reaper outside, the parked python3 inside), and the template apart.
 * Total PSS is what they hold together: pages they share are counted
 * once in all. */
static int memory(struct aj_policy *pol, unsigned k)
{
    long rss0 = read_kb_field("/proc/self/status", "VmRSS:"), rss1, pss = 0, cg = 0, tpss = 0;
    struct aj_pool *pool = new_pool(pol, k);
    pid_t inits[72], tmpl;
    size_t n, cg_n = 0;
    char why[256];

    usleep(300000); /* every parked sandbox has finished setting up */
    rss1 = read_kb_field("/proc/self/status", "VmRSS:");
    tmpl = aj_pool_template(pool, why, sizeof(why));
    n = children_of(getpid(), inits, 72);
    for (size_t i = 0; i < n; i++) {
        pid_t kids[8];
        size_t nk;
        if (inits[i] == tmpl)
            continue;
        pss += pss_kb(inits[i]);
        nk = children_of(inits[i], kids, 8);
        for (size_t j = 0; j < nk; j++)
            pss += pss_kb(kids[j]);
        long c = cgroup_kb(inits[i]);
        if (c >= 0) {
            cg += c;
            cg_n++;
        }
    }
    if (tmpl > 0) {
        pid_t reapers[72];
        size_t nr = children_of(tmpl, reapers, 72);
        tpss = pss_kb(tmpl);
        for (size_t i = 0; i < nr; i++) {
            pid_t kids[2];
            size_t nk = children_of(reapers[i], kids, 2);
            pss += pss_kb(reapers[i]);
            for (size_t j = 0; j < nk; j++)
                pss += pss_kb(kids[j]);
        }
    }
    printf("{\"benchmark\": \"pool-memory\", \"pooled\": %u, \"processes_found\": %u, "
           "\"per_sandbox_pss_kb\": %.0f, \"template_pss_kb\": %ld, \"total_pss_kb\": %ld, "
           "\"template\": %s, \"per_sandbox_cgroup_kb\": %s%.0f, "
           "\"supervisor_rss_before_kb\": %ld, \"supervisor_rss_with_pool_kb\": %ld}\n",
           k, k, (double)pss / (double)k, tpss, pss + tpss, tmpl > 0 ? "true" : "false", cg_n ? "" : "-",
           cg_n ? (double)cg / (double)cg_n : 1.0, rss0, rss1);
    aj_pool_free(pool);
    return 0;
}

/* Peak RSS of CMD's process tree (wait4's ru_maxrss: the largest of the
 * processes it reaped), median of n runs. Forked from this small process,
 * not from a big interpreter: exec carries the old image's high-water mark
 * into ru_maxrss, so the floor is this program's own RSS. */
static int peak(unsigned long n, char **cmd)
{
    long *v = calloc(n, sizeof(long));
    unsigned long got = 0;

    if (!v)
        return 1;
    for (unsigned long i = 0; i < n; i++) {
        struct rusage ru;
        int st;
        pid_t pid = fork();
        if (pid == 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
            execv(cmd[0], cmd);
            _exit(127);
        }
        if (pid < 0 || wait4(pid, &st, 0, &ru) < 0)
            continue;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            v[got++] = ru.ru_maxrss;
    }
    for (unsigned long i = 1; i < got; i++)
        for (unsigned long j = i; j > 0 && v[j - 1] > v[j]; j--) {
            long t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    printf("{\"benchmark\": \"peak-rss\", \"runs\": %lu, \"median_kb\": %ld, \"floor_kb\": %ld}\n", got,
           got ? v[got / 2] : -1L, read_kb_field("/proc/self/status", "VmHWM:"));
    free(v);
    return got ? 0 : 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: aj-pool-bench [--gap-ms MS] [--set KEY=VALUE]... latency N CMD...\n"
                    "       aj-pool-bench throughput SECONDS CLIENTS CMD...\n"
                    "       aj-pool-bench memory K\n"
                    "       aj-pool-bench peak N CMD...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct aj_policy *pol;
    uint64_t a, b;
    int r;

    if (argc < 3)
        usage();
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, 0) < 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)now_ns());
    pol = aj_policy_new(); /* the defaults */
    if (!pol)
        return 1;
    while (argc >= 3 && strcmp(argv[1], "--gap-ms") == 0) {
        if (aj_parse_u64(argv[2], 60000, &a) < 0)
            usage();
        gap_us = (unsigned)(a * 1000);
        argc -= 2;
        argv += 2;
    }
    while (argc >= 3 && strcmp(argv[1], "--set") == 0) {
        char key[128];
        struct aj_error err = {0};
        const char *eq = strchr(argv[2], '=');
        if (!eq || (size_t)(eq - argv[2]) >= sizeof(key))
            usage();
        snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[2]), argv[2]);
        if (aj_policy_set(pol, key, eq + 1, &err) < 0) {
            fprintf(stderr, "aj-pool-bench: %s\n", err.msg);
            return 2;
        }
        argc -= 2;
        argv += 2;
    }
    if (argc < 3)
        usage();
    if (strcmp(argv[1], "latency") == 0 && argc >= 4 && aj_parse_u64(argv[2], 1000000, &a) == 0 && a > 0)
        r = latency(pol, (unsigned long)a, argv + 3);
    else if (strcmp(argv[1], "throughput") == 0 && argc >= 5 && aj_parse_u64(argv[2], 3600, &a) == 0 && a > 0 &&
             aj_parse_u64(argv[3], 64, &b) == 0 && b > 0)
        r = throughput(pol, (double)a, (unsigned)b, argv + 4);
    else if (strcmp(argv[1], "peak") == 0 && argc >= 4 && aj_parse_u64(argv[2], 1000000, &a) == 0 && a > 0)
        r = peak((unsigned long)a, argv + 3);
    else if (strcmp(argv[1], "memory") == 0 && aj_parse_u64(argv[2], 64, &a) == 0 && a > 0)
        r = memory(pol, (unsigned)a);
    else {
        aj_policy_free(pol);
        usage();
    }
    aj_policy_free(pol);
    return r;
}
