/* SPDX-License-Identifier: Apache-2.0 */
/* aj-loop N: call aj_run() N times in one process (as a long-running server
 * would) and print what the supervisor process held before and after:
 * open fds, child processes, resident memory. The test asserts that
 * nothing grows. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agentjail.h"
#include "count_fds.h"

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    long v = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            v = strtol(line + 6, NULL, 10);
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    struct aj_policy *pol;
    char *cmd[] = {"/bin/true", NULL};
    uint64_t n;
    int fds_before, fds_after, failures = 0, children;
    long rss_before, rss_mid = 0, rss_after;

    if (argc != 2 || aj_parse_u64(argv[1], 1000000, &n) < 0 || n == 0) {
        fprintf(stderr, "usage: aj-loop N\n");
        return 2;
    }
    pol = aj_policy_new();
    if (!pol) {
        fprintf(stderr, "aj-loop: out of memory\n");
        return 2;
    }
    fds_before = count_fds();
    rss_before = rss_kb();
    for (uint64_t i = 0; i < n; i++) {
        struct aj_result res;
        struct aj_error err = {0};
        if (aj_run(pol, cmd, &res, &err) < 0 || res.status != AJ_STATUS_OK) {
            if (failures++ == 0)
                fprintf(stderr, "aj-loop: run %llu: %s (status %s)\n", (unsigned long long)i, err.msg,
                        aj_status_name(res.status));
        }
        if (i == n / 10)
            rss_mid = rss_kb(); /* after warm-up: allocator caches are filled */
    }
    fds_after = count_fds();
    rss_after = rss_kb();
    children = waitpid(-1, NULL, WNOHANG) >= 0; /* any child left (zombie or live)? */
    printf("{\"runs\": %llu, \"failures\": %d, \"fds_before\": %d, \"fds_after\": %d, "
           "\"rss_before_kb\": %ld, \"rss_warm_kb\": %ld, \"rss_after_kb\": %ld, \"children_left\": %s}\n",
           (unsigned long long)n, failures, fds_before, fds_after, rss_before, rss_mid, rss_after,
           children ? "true" : "false");
    aj_policy_free(pol);
    return failures ? 1 : 0;
}
