/* SPDX-License-Identifier: Apache-2.0 */
/* aj-pool: run several commands through one warm pool (aj_pool_*), as a
 * server would, and report each run as one JSON line, then the pool's
 * counters and what the process held before and after.
 *
 *   aj-pool [--size N] [--profile NAME] [--outdir DIR] [--events DIR] [--wait-file PATH]
 *           -- CMD... [::: CMD...]...
 *
 * With --outdir, run i's stdout and stderr go to DIR/i.out and DIR/i.err;
 * with --events, its events to DIR/i.jsonl. With --wait-file, the pool is
 * prepared, "ready" is printed on stderr, and the runs start once PATH
 * exists (a test does something to the parked sandboxes in between).
 * --pass NAME adds NAME to the policy's env_pass; a command segment that
 * starts with @NAME=VALUE sets that variable in this process just before
 * its run (as a server would per request). --set KEY=VALUE sets a policy
 * key (interpreter.language=python, interpreter.preload=json: a pool of
 * warm interpreters); --bind HOST[:SANDBOX] adds a read-only bind. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentjail.h"
#include "count_fds.h"

static int open_out(const char *dir, unsigned i, const char *ext)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%u.%s", dir, i, ext);
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

int main(int argc, char **argv)
{
    struct aj_policy *pol = NULL;
    struct aj_pool *pool = NULL;
    struct aj_error err = {0};
    struct aj_pool_stats ps;
    const char *profile = NULL, *outdir = NULL, *evdir = NULL, *wait_file = NULL, *pass[8], *sets[16], *binds[8];
    size_t n_pass = 0, n_sets = 0, n_binds = 0;
    uint64_t size = 2;
    int i = 1, fds_before, failures = 0;
    unsigned run = 0;

    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc && aj_parse_u64(argv[i + 1], 1000, &size) == 0)
            i++;
        else if (strcmp(argv[i], "--profile") == 0 && i + 1 < argc)
            profile = argv[++i];
        else if (strcmp(argv[i], "--outdir") == 0 && i + 1 < argc)
            outdir = argv[++i];
        else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc)
            evdir = argv[++i];
        else if (strcmp(argv[i], "--wait-file") == 0 && i + 1 < argc)
            wait_file = argv[++i];
        else if (strcmp(argv[i], "--pass") == 0 && i + 1 < argc)
            n_pass < 8 ? (void)(pass[n_pass++] = argv[++i]) : (void)i++;
        else if (strcmp(argv[i], "--bind") == 0 && i + 1 < argc)
            n_binds < 8 ? (void)(binds[n_binds++] = argv[++i]) : (void)i++;
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && strchr(argv[i + 1], '='))
            n_sets < 16 ? (void)(sets[n_sets++] = argv[++i]) : (void)i++;
        else {
            fprintf(stderr, "usage: aj-pool [--size N] [--profile NAME] [--outdir DIR] [--events DIR] [--wait-file PATH] [--set KEY=VALUE] [--bind HOST[:SANDBOX]] -- CMD... [::: CMD...]...\n");
            return 2;
        }
    }
    if (i >= argc - 1) {
        fprintf(stderr, "aj-pool: no command\n");
        return 2;
    }
    pol = aj_policy_new();
    if (!pol) {
        fprintf(stderr, "aj-pool: out of memory\n");
        return 2;
    }
    if (profile && aj_policy_load_profile(pol, profile, &err) < 0) {
        fprintf(stderr, "aj-pool: %s\n", err.msg);
        aj_policy_free(pol);
        return 2;
    }
    for (size_t k = 0; k < n_pass; k++)
        if (aj_policy_set(pol, "environment.pass", pass[k], &err) < 0) {
            fprintf(stderr, "aj-pool: %s\n", err.msg);
            aj_policy_free(pol);
            return 2;
        }
    for (size_t k = 0; k < n_binds; k++)
        if (aj_policy_add_bind(pol, binds[k], false, &err) < 0) {
            fprintf(stderr, "aj-pool: %s\n", err.msg);
            aj_policy_free(pol);
            return 2;
        }
    for (size_t k = 0; k < n_sets; k++) {
        char key[128];
        const char *eq = strchr(sets[k], '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - sets[k]), sets[k]);
        if (aj_policy_set(pol, key, eq + 1, &err) < 0) {
            fprintf(stderr, "aj-pool: %s\n", err.msg);
            aj_policy_free(pol);
            return 2;
        }
    }
    fds_before = count_fds();
    if (aj_pool_new(pol, (unsigned)size, &pool, &err) < 0) {
        fprintf(stderr, "aj-pool: %s\n", err.msg);
        aj_policy_free(pol);
        return 1;
    }
    if (wait_file) {
        fprintf(stderr, "ready\n");
        while (access(wait_file, F_OK) != 0)
            usleep(10000);
    }
    for (int start = ++i; start < argc; run++) {
        struct aj_request o = AJ_REQUEST_INIT;
        struct aj_result res;
        char evpath[4096], *json;
        int end = start, r;
        uint64_t warm_before;

        while (end < argc && strcmp(argv[end], ":::") != 0)
            end++;
        argv[end < argc ? end : argc] = NULL; /* the command ends here */
        while (argv[start] && argv[start][0] == '@' && strchr(argv[start], '=')) {
            char *eq = strchr(argv[start], '=');
            *eq = '\0';
            setenv(argv[start] + 1, eq + 1, 1);
            start++;
        }
        /* Our own 0-2 unless --outdir (the library gives none by default). */
        for (int k = 0; k < 3; k++)
            o.stdio[k] = AJ_STDIO_OF_FD(k);
        if (outdir) {
            o.stdio[1] = AJ_STDIO_OF_FD(open_out(outdir, run, "out"));
            o.stdio[2] = AJ_STDIO_OF_FD(open_out(outdir, run, "err"));
        }
        if (evdir) {
            snprintf(evpath, sizeof(evpath), "%s/%u.jsonl", evdir, run);
            o.events_path = evpath;
        }
        aj_pool_get_stats(pool, &ps);
        warm_before = ps.warm_runs;
        o.argv = argv + start;
        r = aj_pool_run(pool, &o, &res, &err);
        aj_pool_get_stats(pool, &ps);
        if (r < 0)
            failures++;
        json = aj_result_to_json(&res);
        if (json)
            for (char *p = json; *p; p++)
                if (*p == '\n')
                    *p = ' ';
        printf("{\"run\": %u, \"rc\": %d, \"warm\": %s, \"error\": \"%s\", \"result\": %s}\n", run, r,
               ps.warm_runs > warm_before ? "true" : "false", r < 0 ? "see result" : "", json ? json : "null");
        fflush(stdout);
        free(json);
        if (outdir) {
            close(o.stdio[1].fd);
            close(o.stdio[2].fd);
        }
        start = end + 1;
    }
    aj_pool_get_stats(pool, &ps);
    {
        char why[512], *esc = why;
        int tpid = aj_pool_template(pool, why, sizeof(why));
        for (char *p = why; *p; p++) /* JSON-safe: the reason is plain text */
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                *p = ' ';
        aj_pool_free(pool);
        printf("{\"pool\": {\"prepared\": %llu, \"warm_runs\": %llu, \"cold_runs\": %llu, \"discarded\": %llu, "
               "\"refill_failures\": %llu}, \"template\": %d, \"template_why\": \"%s\", \"fds_before\": %d, "
               "\"fds_after\": %d, \"children_left\": %s}\n",
               (unsigned long long)ps.prepared, (unsigned long long)ps.warm_runs, (unsigned long long)ps.cold_runs,
               (unsigned long long)ps.discarded, (unsigned long long)ps.refill_failures, tpid, esc, fds_before,
               count_fds(), waitpid(-1, NULL, WNOHANG) >= 0 ? "true" : "false");
    }
    aj_policy_free(pol);
    return failures ? 1 : 0;
}
