/* SPDX-License-Identifier: Apache-2.0 */
/* The smallest embedder of libagentjail: run one command in the default
 * sandbox, its output on ours, and print what the result says. Built
 * against the installed
 * library only (tests/build/install.sh):
 *
 *     cc embed.c $(pkg-config --cflags --libs agentjail) -o embed
 *     ./embed /bin/echo hello
 */
#include <agentjail.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    struct aj_policy *pol;
    struct aj_result res;
    struct aj_error err = {0};
    struct aj_request req = AJ_REQUEST_INIT;
    int r;

    if (argc < 2) {
        fprintf(stderr, "usage: %s CMD [ARGS...]\n", argv[0]);
        return 2;
    }
    pol = aj_policy_new(); /* the default policy */
    if (!pol) {
        fprintf(stderr, "embed: out of memory\n");
        return 1;
    }
    /* The payload's stdout and stderr are ours only because we say so
     * (by default they are /dev/null); its stdin stays /dev/null. */
    req.argv = argv + 1;
    req.stdio[1] = AJ_STDIO_OF_FD(1);
    req.stdio[2] = AJ_STDIO_OF_FD(2);
    r = aj_run_ex(pol, &req, &res, &err);
    aj_policy_free(pol);
    if (r < 0) {
        fprintf(stderr, "embed: %s\n", err.msg);
        return 1;
    }
    printf("status=%s exit_code=%d seccomp=%s\n", aj_status_name(res.status), res.exit_code,
           aj_result_has_layer(&res, AJ_LAYER_SECCOMP) ? "applied" : "missing");
    return res.status == AJ_STATUS_OK ? 0 : 1;
}
