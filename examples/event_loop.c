/* SPDX-License-Identifier: Apache-2.0 */
/* Many sandboxes at once from one thread: one epoll loop over every run's
 * pollable fd and every run's stdout, a pipe the library made. This is
 * the example of docs/library.md; tests/integration/test_library_example.py
 * runs it.
 *
 *     event_loop CMD [ARGS...] [::: CMD [ARGS...]]...
 *
 * Each command runs in its own sandbox (the default policy, 10 s timeout),
 * all at once. For each, in the order given, one line:
 *
 *     run 0: ok, exit 0, 6 bytes: hello\n      (its id, then its output)
 *
 * and at the end the fds this process held before and after (the same: a
 * run leaves nothing behind). Uses the public header only. */
#include <agentjail.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MAX_RUNS 64

struct run {
    struct aj_sandbox *h;
    int out;         /* our end of its stdout, -1 once at EOF */
    bool ended;
    char buf[4096];  /* the first 4 KiB of its output */
    size_t len;
};

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = -1; /* the DIR's own */

    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* Read what the pipe has now (non-blocking); true at EOF. */
static bool read_output(struct run *r)
{
    char tmp[4096];
    ssize_t n;

    while ((n = read(r->out, tmp, sizeof(tmp))) > 0) {
        size_t room = sizeof(r->buf) - r->len, k = (size_t)n < room ? (size_t)n : room;
        memcpy(r->buf + r->len, tmp, k);
        r->len += k;
    }
    return n == 0;
}

static void print_output(const struct run *r)
{
    for (size_t i = 0; i < r->len; i++) {
        unsigned char c = (unsigned char)r->buf[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20 || c >= 0x7f || c == '\\')
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

int main(int argc, char **argv)
{
    static struct run runs[MAX_RUNS];
    struct aj_policy *pol = aj_policy_new(); /* the default policy */
    struct aj_error err = {0};
    int n = 0, ep, pending = 0, fds_before = count_fds();

    if (!pol || aj_policy_set(pol, "limits.timeout", "10s", &err) < 0) {
        fprintf(stderr, "event_loop: %s\n", pol ? err.msg : "out of memory");
        return 1;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    /* Start every run: each returns at once with a handle. */
    for (int i = 1; i < argc && n < MAX_RUNS; n++) {
        struct aj_request req = AJ_REQUEST_INIT;
        struct run *r = &runs[n];
        struct epoll_event ev = {.events = EPOLLIN};
        int end = i;

        while (end < argc && strcmp(argv[end], ":::") != 0)
            end++;
        argv[end < argc ? end : argc] = NULL; /* this command ends here */
        req.argv = argv + i;
        req.stdio[1] = AJ_STDIO_PIPE_NEW; /* stdin and stderr: /dev/null */
        if (aj_sandbox_start(pol, &req, &r->h, &err) < 0) {
            fprintf(stderr, "event_loop: %s\n", err.msg); /* no handle: out of memory or fds */
            return 1;
        }
        r->out = aj_sandbox_take_pipe(r->h, 1);
        (void)fcntl(r->out, F_SETFL, O_NONBLOCK);
        /* Two entries per run: its fd (even tags) and its stdout (odd). */
        ev.data.u32 = (uint32_t)n * 2;
        (void)epoll_ctl(ep, EPOLL_CTL_ADD, aj_sandbox_fd(r->h), &ev);
        ev.data.u32 = (uint32_t)n * 2 + 1;
        (void)epoll_ctl(ep, EPOLL_CTL_ADD, r->out, &ev);
        pending += 2;
        i = end + 1;
    }
    /* The loop: process a run when its fd is readable, read its output
     * when there is some; done when every run has ended and every pipe is
     * at EOF. */
    while (pending > 0) {
        struct epoll_event evs[32];
        int k = epoll_wait(ep, evs, 32, -1);
        for (int j = 0; j < k; j++) {
            struct run *r = &runs[evs[j].data.u32 / 2];
            if (evs[j].data.u32 % 2 == 1) {
                if (r->out >= 0 && read_output(r)) {
                    (void)epoll_ctl(ep, EPOLL_CTL_DEL, r->out, NULL);
                    (void)close(r->out);
                    r->out = -1;
                    pending--;
                }
            } else if (!r->ended && aj_sandbox_process(r->h) == 1) {
                /* Ended: its fd stays readable from now on; stop watching it. */
                (void)epoll_ctl(ep, EPOLL_CTL_DEL, aj_sandbox_fd(r->h), NULL);
                r->ended = true;
                pending--;
            }
        }
    }
    (void)close(ep);
    for (int i = 0; i < n; i++) {
        struct run *r = &runs[i];
        const struct aj_result *res = aj_sandbox_result(r->h);
        int rc = aj_sandbox_wait(r->h, &err); /* ended: returns at once */

        printf("run %d: %s, exit %d, sandbox %s, %zu bytes: ", i, aj_status_name(res->status), res->exit_code,
               aj_sandbox_id(r->h), r->len);
        print_output(r);
        if (rc < 0)
            printf(" (%s)", err.msg);
        putchar('\n');
        aj_sandbox_free(r->h);
    }
    aj_policy_free(pol);
    printf("fds: %d before, %d after\n", fds_before, count_fds());
    return 0;
}
