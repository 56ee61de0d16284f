/* SPDX-License-Identifier: Apache-2.0 */
/* aj-rawpolicy: a caller that fills struct aj_policy directly, without the
 * setters. Embedders see the struct as opaque, but the library's own
 * modules (and a future one with a bug) fill it directly, and a policy can
 * be changed after it was set: the library must still refuse what the
 * setters would (aj_policy_validate, called by every run and pool). So
 * this helper includes the internal model header, as those modules do.
 *
 *   aj-rawpolicy [--pool] FIELD=VALUE... -- CMD...
 *
 * FIELD is one of uid_base, uid_count, memory_max, pids_max, cpu_milli,
 * timeout_ms, rlimit_nofile, rlimit_fsize, tmp_size, network, on_escape.
 * Prints "refused: MESSAGE" and exits 3 when the library refuses the policy,
 * else runs CMD once and exits with its status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentjail.h"
#include "aj_policy_model.h" /* internal: the struct itself */

static int set_field(struct aj_policy *pol, const char *spec)
{
    const char *eq = strchr(spec, '=');
    unsigned long long v;
    char *end;

    if (!eq)
        return -1;
    v = strtoull(eq + 1, &end, 0);
    if (*end)
        return -1;
#define F(name)                                                                                    \
    if ((size_t)(eq - spec) == strlen(#name) && strncmp(spec, #name, strlen(#name)) == 0) {        \
        pol->name = (__typeof__(pol->name))v;                                                      \
        return 0;                                                                                  \
    }
    F(uid_base) F(uid_count) F(memory_max) F(pids_max) F(cpu_milli) F(timeout_ms) F(rlimit_nofile)
    F(rlimit_fsize) F(tmp_size) F(network) F(on_escape)
#undef F
    return -1;
}

int main(int argc, char **argv)
{
    struct aj_policy pol;
    struct aj_error err = {0};
    struct aj_result res;
    struct aj_request req = AJ_REQUEST_INIT;
    bool pool_mode = false;
    int i = 1, r;

    aj_policy_init(&pol);
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--pool") == 0)
            pool_mode = true;
        else if (set_field(&pol, argv[i]) < 0) {
            fprintf(stderr, "aj-rawpolicy: bad field '%s'\n", argv[i]);
            return 2;
        }
    }
    if (i >= argc - 1) {
        fprintf(stderr, "usage: aj-rawpolicy [--pool] FIELD=VALUE... -- CMD...\n");
        return 2;
    }
    req.argv = argv + i + 1;
    for (int k = 0; k < 3; k++)
        req.stdio[k] = AJ_STDIO_OF_FD(k); /* ours, named: the library gives none by default */
    if (pool_mode) {
        struct aj_pool *pool = NULL;
        r = aj_pool_new(&pol, 1, &pool, &err);
        if (r == 0)
            r = aj_pool_run(pool, &req, &res, &err);
        aj_pool_free(pool);
    } else {
        r = aj_run_ex(&pol, &req, &res, &err);
    }
    aj_policy_clear(&pol);
    if (r < 0) {
        printf("refused: %s\n", err.msg);
        return 3;
    }
    return res.exit_code;
}
