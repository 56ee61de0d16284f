/* SPDX-License-Identifier: Apache-2.0 */
/*
 * syscall_bench: the cost of one system call, for bench/syscall.sh.
 *
 *   syscall_bench OP ITERATIONS [PATH]
 *
 * runs OP ITERATIONS times in a tight loop (after a short warm-up) and
 * prints one line: "OP NS_PER_CALL ERRNO", ERRNO being the error of the
 * last call ("0" if it succeeded).
 *
 *   getppid     syscall(SYS_getppid): the cheapest allowed call
 *   openclose   open(PATH, O_RDONLY|O_CLOEXEC) + close(): path walk, an
 *               allowed call Landlock also checks
 *   stat        stat(PATH) (newfstatat)
 *   unshare     unshare(0x1): an invalid flag. Bare, the kernel answers
 *               EINVAL at once and nothing changes; under agentjail the
 *               filter sends every unshare to the supervisor (the escape
 *               monitor), which records it and answers EPERM: the cost of
 *               one notification round trip.
 *
 * Exit status: 0, or 1 if a call that must succeed failed, 2 for usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* One call of OP; returns 0 or the errno. */
static int one(const char *op, const char *path)
{
    if (strcmp(op, "getppid") == 0) {
        (void)syscall(SYS_getppid);
        return 0;
    }
    if (strcmp(op, "openclose") == 0) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return errno;
        close(fd);
        return 0;
    }
    if (strcmp(op, "stat") == 0) {
        struct stat st;
        return stat(path, &st) < 0 ? errno : 0;
    }
    if (strcmp(op, "unshare") == 0) {
        /* 0x1 is not an unshare flag: EINVAL before anything is done. */
        return syscall(SYS_unshare, 0x1UL) < 0 ? errno : 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    const char *op, *path;
    long iters;
    int e = 0;
    unsigned long long t0, t1;

    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: syscall_bench getppid|openclose|stat|unshare ITERATIONS [PATH]\n");
        return 2;
    }
    op = argv[1];
    iters = strtol(argv[2], NULL, 10);
    path = argc == 4 ? argv[3] : "/usr/bin/env";
    if (iters <= 0 || one(op, path) == -1) {
        fprintf(stderr, "syscall_bench: bad operation or count\n");
        return 2;
    }
    for (long i = 0; i < iters / 10 + 1; i++) /* warm-up: caches, dentries */
        e = one(op, path);
    t0 = now_ns();
    for (long i = 0; i < iters; i++)
        e = one(op, path);
    t1 = now_ns();
    printf("%s %.1f %d\n", op, (double)(t1 - t0) / (double)iters, e);
    if (e && strcmp(op, "unshare") != 0) {
        fprintf(stderr, "syscall_bench: %s %s: %s\n", op, path, strerror(e));
        return 1;
    }
    if (!e && strcmp(op, "unshare") == 0) {
        fprintf(stderr, "syscall_bench: unshare(0x1) succeeded?\n");
        return 1;
    }
    return 0;
}
