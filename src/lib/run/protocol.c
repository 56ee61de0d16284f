/* SPDX-License-Identifier: Apache-2.0 */
/* The sync protocol's helpers (see protocol.h). Used on the sandbox side
 * between clone and exec: system calls and memcpy only. */
#include "protocol.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "aj_util.h"

int aj_proto_collect_fds(struct msghdr *mh, int *fds, int max)
{
    int n = 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (n < max)
                fds[n++] = fd;
            else
                (void)close(fd);
        }
    }
    return n;
}

void aj_proto_send_msg(int sock, uint32_t type, int wstatus, uint64_t layers, int abi, const struct aj_error *err)
{
    struct aj_sync_msg m = {.type = type, .wstatus = wstatus, .layers = layers, .landlock_abi = abi};
    if (err)
        m.err = *err;
    /* Nothing to do on failure: the supervisor sees EOF and reports it. */
    (void)aj_write_all(sock, &m, sizeof(m));
}

/* One message with fds (SCM_RIGHTS): the decoys, the seccomp listener and
 * the netns go to the supervisor or init this way, a pooled command's
 * stdin/stdout/stderr to its payload. MSG_NOSIGNAL: a gone peer is an
 * error to report, not a SIGPIPE. */
int aj_proto_send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * AJ_MAX_SEND_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *cm;
    ssize_t n;

    if (nfds < 0 || nfds > AJ_MAX_SEND_FDS)
        return -EINVAL;
    if (nfds == 0)
        return aj_proto_send_plain(sock, buf, len);
    memset(&u, 0, sizeof(u));
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return n == (ssize_t)len ? 0 : -EIO;
}

int aj_proto_send_fds(int sock, const struct aj_sync_msg *m, const int *fds, int nfds)
{
    return aj_proto_send_with_fds(sock, m, sizeof(*m), fds, nfds);
}

/* MSG_NOSIGNAL: a sandbox that already exited must give us EPIPE, not a
 * SIGPIPE that kills the supervisor (and, through the death signal, the
 * report of why). */
int aj_proto_send_plain(int sock, const void *buf, size_t len)
{
    ssize_t n;

    do
        n = send(sock, buf, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return n == (ssize_t)len ? 0 : -EIO;
}
