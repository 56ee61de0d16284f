/* SPDX-License-Identifier: Apache-2.0 */
/* The relay's own filter (network "proxy", src/lib/run/egress_child.c):
 * once its listening socket, its memory and its limits are set up, the
 * relay needs only to wait, accept, open a unix socket to the proxy, move
 * bytes and close. Everything else fails with EPERM (an error, not a
 * kill: a libc path we did not foresee fails one connection, not the
 * run's network). Compiled in the supervisor, loaded by the relay with one
 * seccomp(2) call (aj_seccomp_child_load). */
#include <errno.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_seccomp.h"
#include "aj_util.h"

int aj_seccomp_compile_relay(struct aj_bpf *ret, struct aj_error *err)
{
    static const char *const allowed[] = {
        "read", "write", "sendto", "recvfrom", "poll", "ppoll", "accept", "accept4", "connect", "shutdown",
        "close", "exit", "exit_group", "rt_sigreturn", "restart_syscall", "clock_gettime", "clock_nanosleep",
        "nanosleep",
    };
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    struct sock_filter *buf = NULL;
    struct stat st;
    int memfd = -1, r = 0;

    *ret = (struct aj_bpf){0};
    if (!ctx)
        return aj_err(err, ENOMEM, "seccomp_init");
    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(allowed); i++) {
        int nr = seccomp_syscall_resolve_name(allowed[i]);
        if (nr != __NR_SCMP_ERROR)
            r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
    /* socket(): unix stream sockets (to the proxy) only. */
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
    if (r < 0) {
        r = aj_err(err, -r, "relay seccomp rules");
        goto out;
    }
    memfd = memfd_create("agentjail-relay-bpf", MFD_CLOEXEC);
    if (memfd < 0) {
        r = aj_err(err, errno, "memfd_create");
        goto out;
    }
    r = seccomp_export_bpf(ctx, memfd);
    if (r < 0) {
        r = aj_err(err, -r, "seccomp_export_bpf");
        goto out;
    }
    if (fstat(memfd, &st) < 0 || st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter)) {
        r = aj_err(err, EIO, "exported relay filter has a bad size");
        goto out;
    }
    buf = malloc((size_t)st.st_size);
    if (!buf) {
        r = aj_err(err, ENOMEM, "relay filter");
        goto out;
    }
    if (pread(memfd, buf, (size_t)st.st_size, 0) != st.st_size) {
        free(buf);
        r = aj_err(err, EIO, "read back the relay filter");
        goto out;
    }
    *ret = (struct aj_bpf){.insns = buf, .len = (size_t)st.st_size / sizeof(struct sock_filter), .owned = true};
    r = 0;
out:
    if (memfd >= 0)
        (void)close(memfd);
    seccomp_release(ctx);
    return r;
}
