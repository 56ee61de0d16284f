/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aj_util.h"
#include "probe.h"

#define PR_PROC_SUPER_MAGIC 0x9fa0
/* A probe child that has not answered by then is stuck; it is killed. */
#define PR_CHILD_TIMEOUT_S 5

ssize_t pr_read_text(const char *path, char *buf, size_t cap)
{
    _cleanup_close_ int fd = -1;
    struct stat st;
    size_t len = 0;

    if (cap == 0)
        return -EINVAL;
    buf[0] = '\0';
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == EWOULDBLOCK && stat(path, &st) == 0 && S_ISREG(st.st_mode))
        /* A file lease (agentjail's decoys carry one) makes a non-blocking
         * open fail while the holder is told; a plain open waits for it. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    /* Only regular files: a FIFO or a device planted at a probed path must
     * not make the probe block or touch hardware. */
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    while (len + 1 < cap) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return (ssize_t)len;
}

int pr_read_long(const char *path, long *ret)
{
    char buf[64], *end;
    ssize_t n = pr_read_text(path, buf, sizeof(buf));
    long v;

    if (n < 0)
        return (int)n;
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno || end == buf || (*end != '\0' && *end != '\n'))
        return -EINVAL;
    *ret = v;
    return 0;
}

const char *pr_errname(int e)
{
    static char other[16];
    const char *name = e > 0 ? strerrorname_np(e) : NULL;

    if (!name) { /* a number glibc has no name for */
        snprintf(other, sizeof(other), "E%d", e);
        name = other;
    }
    return name;
}

bool pr_have_proc(void)
{
    struct statfs sfs;

    return statfs("/proc/self", &sfs) == 0 && sfs.f_type == PR_PROC_SUPER_MAGIC;
}

bool pr_parse_uint(const char *s, unsigned long *ret)
{
    char *end;
    unsigned long v;

    if (!s || *s < '0' || *s > '9') /* also refuses "", "-1" and " 1" */
        return false;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end)
        return false;
    *ret = v;
    return true;
}

void pr_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap ? cap - 1 : 0);

    if (cap == 0)
        return;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void pr_printable(char *dst, size_t cap, const char *s, size_t n)
{
    size_t i;

    if (cap == 0)
        return;
    for (i = 0; i < n && i + 1 < cap && s[i]; i++)
        dst[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : (char)'?';
    dst[i] = '\0';
}

int pr_in_child(long (*fn)(void *arg, long *aux), void *arg, struct pr_child_out *out)
{
    _cleanup_close_ int rd = -1, wr = -1;
    int p[2], status;
    ssize_t n;
    pid_t pid;

    memset(out, 0, sizeof(*out));
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    rd = p[0];
    wr = p[1];
    fflush(NULL); /* nothing buffered may be written twice */
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        struct pr_child_out res = {0};
        alarm(PR_CHILD_TIMEOUT_S);
        errno = 0;
        res.r = fn(arg, &res.aux);
        res.err = res.r < 0 ? errno : 0;
        _exit(write(wr, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 1);
    }
    (void)close(TAKE_FD(wr)); /* so a dead child reads as EOF */
    do
        n = read(rd, out, sizeof(*out));
    while (n < 0 && errno == EINTR);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    if (WIFSIGNALED(status)) {
        memset(out, 0, sizeof(*out));
        out->signo = WTERMSIG(status);
        return 0;
    }
    return n == (ssize_t)sizeof(*out) ? 0 : -EIO;
}

bool pr_has_cap(const struct pr_ctx *c, int nr)
{
    return c->creds.known && nr >= 0 && nr < 64 && (c->creds.eff >> nr) & 1;
}

static long try_userns(void *arg, long *aux)
{
    (void)arg;
    (void)aux;
    return unshare(CLONE_NEWUSER);
}

int pr_userns_err(struct pr_ctx *c)
{
    struct pr_child_out o;

    if (c->userns_err >= 0)
        return c->userns_err;
    if (pr_in_child(try_userns, NULL, &o) < 0)
        c->userns_err = EAGAIN;
    else if (o.signo)
        c->userns_err = EPERM; /* killed by a filter */
    else
        c->userns_err = o.r < 0 ? o.err : 0;
    return c->userns_err;
}
