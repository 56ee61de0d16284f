/* SPDX-License-Identifier: Apache-2.0 */
/* The relay's own filter (network "proxy", src/lib/run/egress_child.c):
 * once its listening socket and the handoff socket are in place, the
 * relay needs only to wait, accept, hand each connection to the proxy
 * (sendmsg with SCM_RIGHTS) and close it. Everything else fails with EPERM (an error, not a
 * kill: a libc path we did not foresee fails one connection, not the
 * run's network). Compiled in the supervisor, loaded by the relay with one
 * seccomp(2) call (aj_seccomp_child_load). */
#include <errno.h>
#include <seccomp.h>
#include <sys/socket.h>

#include "aj_seccomp.h"
#include "aj_util.h"

int aj_seccomp_compile_relay(struct aj_bpf *ret, struct aj_error *err)
{
    static const char *const allowed[] = {
        "sendmsg", "poll", "ppoll", "accept", "accept4", "close", "exit", "exit_group", "rt_sigreturn",
        "restart_syscall", "clock_gettime", "clock_nanosleep", "nanosleep",
    };
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    int r = 0;

    *ret = (struct aj_bpf){0};
    if (!ctx)
        return aj_err(err, ENOMEM, "seccomp_init");
    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(allowed); i++) {
        int nr = seccomp_syscall_resolve_name(allowed[i]);
        if (nr != __NR_SCMP_ERROR)
            r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
    if (r < 0) {
        r = aj_err(err, -r, "relay seccomp rules");
        goto out;
    }
    r = aj_seccomp_export(ctx, ret, err);
out:
    seccomp_release(ctx);
    return r;
}
