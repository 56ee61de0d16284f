/* SPDX-License-Identifier: Apache-2.0 */
/* aj-request: one library run built from a struct aj_request, as an
 * embedder makes it (tests/integration/test_library_request.py).
 *
 *   aj-request [--pool] [--stdin S] [--stdout S] [--stderr S] [--env K=V]...
 *              [--workdir PATH] [--timeout-ms N] [--memory N] [--cpu-time-ms N]
 *              [--output-limit N] [--policy-timeout-ms N] [--policy-output-limit N]
 *              [--policy-memory N] [--policy-cpu-time-ms N] [--policy-env K=V]
 *              [--bind-rw HOST:SANDBOX] [--size N] [--tail-byte B] -- CMD...
 *
 * S is "null" (the default: the field left zero), "fd:N" (our fd N),
 * "file:PATH" (a file we create and pass as an fd) or "pipe". --size sets
 * req.size (as an older or newer caller would); with --tail-byte B the
 * request sits in a larger buffer whose bytes past the struct are B.
 * Prints one JSON line: {"rc", "errnum", "error", "warm", "result"}. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_policy_model.h" /* internal: the struct, to set limits directly */

static int parse_stdio(const char *s, struct aj_stdio *out)
{
    if (strcmp(s, "null") == 0) {
        *out = (struct aj_stdio){0};
    } else if (strncmp(s, "fd:", 3) == 0) {
        *out = AJ_STDIO_OF_FD(atoi(s + 3));
    } else if (strncmp(s, "file:", 5) == 0) {
        int fd = open(s + 5, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            return -1;
        *out = AJ_STDIO_OF_FD(fd);
    } else if (strcmp(s, "pipe") == 0) {
        *out = AJ_STDIO_PIPE_NEW;
    } else {
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const streams[] = {"--stdin", "--stdout", "--stderr"};
    struct aj_policy pol;
    struct aj_request req = AJ_REQUEST_INIT;
    struct aj_result res;
    struct aj_error err = {0};
    struct aj_pool *pool = NULL;
    struct aj_pool_stats before = {0}, after = {0};
    char *env[64];
    size_t n_env = 0, size = sizeof(req);
    int tail = -1, i = 1, r;
    bool pooled = false;
    unsigned char *buf;
    char *json;

    aj_policy_init(&pol);
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool used = true;
        uint64_t n = 0;
        int k;

        for (k = 0; k < 3 && strcmp(a, streams[k]) != 0; k++)
            ;
        if (strcmp(a, "--pool") == 0) {
            pooled = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "aj-request: %s needs a value\n", a);
            return 2;
        }
        if (k < 3) {
            if (parse_stdio(v, &req.stdio[k]) < 0) {
                fprintf(stderr, "aj-request: %s %s\n", a, v);
                return 2;
            }
        } else if (strcmp(a, "--env") == 0 && n_env < 63) {
            env[n_env++] = (char *)v;
        } else if (strcmp(a, "--workdir") == 0) {
            req.workdir = v;
        } else if (strcmp(a, "--policy-env") == 0) {
            if (aj_policy_add_env(&pol, v, &err) < 0)
                used = false;
        } else if (strcmp(a, "--bind-rw") == 0) {
            if (aj_policy_add_bind(&pol, v, true, &err) < 0)
                used = false;
        } else if (aj_parse_u64(v, UINT64_MAX, &n) < 0) {
            used = false;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            req.timeout_ms = n;
        } else if (strcmp(a, "--memory") == 0) {
            req.memory_max = n;
        } else if (strcmp(a, "--cpu-time-ms") == 0) {
            req.cpu_time_ms = n;
        } else if (strcmp(a, "--output-limit") == 0) {
            req.output_limit = n;
        } else if (strcmp(a, "--policy-timeout-ms") == 0) {
            pol.timeout_ms = n;
        } else if (strcmp(a, "--policy-output-limit") == 0) {
            pol.output_limit = n;
        } else if (strcmp(a, "--policy-memory") == 0) {
            pol.memory_max = n;
        } else if (strcmp(a, "--policy-cpu-time-ms") == 0) {
            pol.cpu_time_ms = n;
        } else if (strcmp(a, "--size") == 0) {
            size = (size_t)n;
        } else if (strcmp(a, "--tail-byte") == 0) {
            tail = (int)n;
        } else {
            used = false;
        }
        if (!used) {
            fprintf(stderr, "aj-request: bad argument %s %s %s\n", a, v, err.msg);
            return 2;
        }
        i++;
    }
    if (i >= argc - 1) {
        fprintf(stderr, "aj-request: no command\n");
        return 2;
    }
    env[n_env] = NULL;
    req.argv = argv + i + 1;
    req.envp = n_env ? env : NULL;
    req.size = size;
    /* The request inside a larger buffer, as a caller built against a
     * newer header would pass it: what lies past our struct is tail. */
    buf = calloc(1, (size > sizeof(req) ? size : sizeof(req)) + 64);
    if (!buf)
        return 1;
    memcpy(buf, &req, sizeof(req));
    if (tail >= 0 && size > sizeof(req))
        memset(buf + sizeof(req), tail, size - sizeof(req));
    if (pooled) {
        if (aj_pool_new(&pol, 1, &pool, &err) < 0) {
            fprintf(stderr, "aj-request: %s\n", err.msg);
            return 1;
        }
        aj_pool_get_stats(pool, &before);
        r = aj_pool_run(pool, (const struct aj_request *)buf, &res, &err);
        aj_pool_get_stats(pool, &after);
    } else {
        r = aj_run_ex(&pol, (const struct aj_request *)buf, &res, &err);
    }
    json = aj_result_to_json(&res);
    for (char *p = json; p && *p; p++)
        if (*p == '\n')
            *p = ' ';
    for (char *p = err.msg; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = '\'';
    printf("{\"rc\": %d, \"errnum\": %d, \"error\": \"%s\", \"warm\": %s, \"result\": %s}\n", r, r < 0 ? err.errnum : 0,
           r < 0 ? err.msg : "", after.warm_runs > before.warm_runs ? "true" : "false", json ? json : "null");
    fflush(stdout);
    free(json);
    free(buf);
    aj_pool_free(pool);
    aj_policy_clear(&pol);
    return 0;
}
