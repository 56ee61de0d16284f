/* SPDX-License-Identifier: Apache-2.0 */
/* aj-librun: one run through the library, as a server would make it, with
 * what the CLI cannot set or show (issue 12's relay tests).
 *
 *   aj-librun [--timeout-ms N] [--cpu-time DURATION] [--block-signals]
 *             [--ignore-signals] [--block-usr1] [--pool] [--events PATH] -- CMD...
 *
 * --timeout-ms sets the policy's timeout_ms directly (the CLI refuses more
 * than 7 days); --block-signals blocks SIGINT and SIGTERM in the caller, as
 * a server does, runs through a handle it ends (aj_sandbox_kill) when one
 * of them is pending, and the output then lists the signals pending after
 * the run; --ignore-signals sets SIGINT, SIGTERM and SIGHUP to SIG_IGN and
 * --block-usr1 blocks SIGUSR1, before anything else (a caller such as
 * nohup or a server thread); --pool runs through a warm pool of one
 * created after that. Prints one JSON object: {"status", "signal", "rc",
 * "pending": [...], "escape_attempt": N}. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_policy_model.h" /* internal: a timeout_ms no flag or file may set */

int main(int argc, char **argv)
{
    struct aj_policy pol;
    struct aj_result res;
    struct aj_error err = {0};
    struct aj_request req = AJ_REQUEST_INIT;
    struct aj_pool *pool = NULL;
    bool block = false, pooled = false;
    sigset_t set, pend;
    int i = 1, r;

    aj_policy_init(&pol);
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        uint64_t v;
        if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc && aj_parse_u64(argv[i + 1], UINT64_MAX, &v) == 0) {
            pol.timeout_ms = v;
            i++;
        } else if (strcmp(argv[i], "--cpu-time") == 0 && i + 1 < argc) {
            if (aj_policy_set(&pol, "--cpu-time", argv[++i], &err) < 0) {
                fprintf(stderr, "aj-librun: %s\n", err.msg);
                return 2;
            }
        } else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
            req.events_path = argv[++i];
        } else if (strcmp(argv[i], "--block-signals") == 0) {
            block = true;
        } else if (strcmp(argv[i], "--ignore-signals") == 0) {
            signal(SIGINT, SIG_IGN);
            signal(SIGTERM, SIG_IGN);
            signal(SIGHUP, SIG_IGN);
        } else if (strcmp(argv[i], "--block-usr1") == 0) {
            sigemptyset(&set);
            sigaddset(&set, SIGUSR1);
            sigprocmask(SIG_BLOCK, &set, NULL);
        } else if (strcmp(argv[i], "--pool") == 0) {
            pooled = true;
        } else {
            fprintf(stderr, "usage: aj-librun [--timeout-ms N] [--cpu-time D] [--block-signals] [--ignore-signals] "
                            "[--block-usr1] [--pool] [--events PATH] -- CMD...\n");
            return 2;
        }
    }
    if (i >= argc - 1) {
        fprintf(stderr, "aj-librun: no command\n");
        return 2;
    }
    if (block) {
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigprocmask(SIG_BLOCK, &set, NULL);
    }
    /* Our own 0-2, named (the library gives none by default). */
    req.argv = argv + i + 1;
    for (int k = 0; k < 3; k++)
        req.stdio[k] = AJ_STDIO_OF_FD(k);
    if (pooled && aj_pool_new(&pol, 1, &pool, &err) < 0) {
        fprintf(stderr, "aj-librun: %s\n", err.msg);
        return 1;
    }
    if (!block) {
        r = pooled ? aj_pool_run(pool, &req, &res, &err) : aj_run_ex(&pol, &req, &res, &err);
    } else {
        /* As a server would: the library takes no signal, so we watch the
         * blocked SIGINT and SIGTERM ourselves (a signalfd polled, never
         * read: the signal stays pending for us) and end the run with the
         * one that came. */
        struct aj_sandbox *h = NULL;
        int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        bool killed = false;
        r = pooled ? aj_pool_start(pool, &req, &h, &err) : aj_sandbox_start(&pol, &req, &h, &err);
        while (r == 0 && aj_sandbox_process(h) == 0) {
            struct pollfd p[2] = {{.fd = aj_sandbox_fd(h), .events = POLLIN},
                                  {.fd = killed ? -1 : sfd, .events = POLLIN}};
            (void)poll(p, 2, -1);
            if (p[1].revents & POLLIN) {
                sigemptyset(&pend);
                sigpending(&pend);
                for (int s = 1; s < 32 && !killed; s++)
                    if (sigismember(&set, s) == 1 && sigismember(&pend, s) == 1) {
                        (void)aj_sandbox_kill(h, s);
                        killed = true;
                    }
            }
        }
        if (r == 0) {
            r = aj_sandbox_wait(h, &err);
            res = *aj_sandbox_result(h);
            aj_sandbox_free(h);
        }
        close(sfd);
    }
    if (r < 0)
        fprintf(stderr, "aj-librun: %s\n", err.msg);
    sigemptyset(&pend);
    sigpending(&pend);
    printf("{\"status\": \"%s\", \"signal\": %d, \"rc\": %d, \"escape_attempt\": %llu, \"pending\": [", aj_status_name(res.status),
           res.signal, r, (unsigned long long)aj_result_event_count(&res, AJ_EV_ESCAPE_ATTEMPT));
    {
        const char *sep = "";
        for (int s = 1; s < 32; s++)
            if (sigismember(&pend, s) == 1) {
                printf("%s%d", sep, s);
                sep = ", ";
            }
    }
    printf("]}\n");
    fflush(stdout);
    aj_pool_free(pool);
    aj_policy_clear(&pol);
    return 0;
}
