/* SPDX-License-Identifier: Apache-2.0 */
/* aj-nouserns [--net-only] CMD [ARGS...]: run CMD under a seccomp filter
 * that refuses namespace creation the way restrictive hosts do (Docker's
 * default profile: clone3 -> ENOSYS, clone/unshare with namespace flags ->
 * EPERM). --net-only refuses network namespaces alone (clone or unshare
 * with CLONE_NEWNET), as some hosts do.
 * --enosys NAME[,NAME...] instead makes the named system calls fail with
 * ENOSYS, as on a kernel that predates them (landlock_create_ruleset on
 * 5.12, mount_setattr on 5.11), and refuses no namespace.
 * --no-landlock-scope refuses namespaces as the default does, and refuses
 * a Landlock ruleset with scoping (attr size 24 and up) with E2BIG, as a
 * kernel before Landlock ABI 6 (6.12) does.
 * Used by the tests to exercise agentjail's diagnosis and --allow-degraded
 * path without changing the host's configuration. */
#include <errno.h>
#include <linux/sched.h>
#include <stdbool.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#define NS_FLAGS                                                                                   \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |  \
     CLONE_NEWNET | CLONE_NEWTIME)

int main(int argc, char **argv)
{
    scmp_filter_ctx ctx;
    int r, first = 1;
    bool no_scope = false;

    if (argc > 1 && strcmp(argv[1], "--net-only") == 0)
        first = 2;
    if (argc > 1 && strcmp(argv[1], "--no-landlock-scope") == 0) {
        no_scope = true;
        first = 2;
    }
    if (argc > 2 && strcmp(argv[1], "--enosys") == 0)
        first = 3;
    if (argc < first + 1) {
        fprintf(stderr, "usage: aj-nouserns [--net-only | --no-landlock-scope | --enosys NAME[,NAME...]] CMD [ARGS...]\n");
        return 2;
    }
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return 1;
    if (first == 3) {
        char list[1024], *save = NULL;
        r = 0;
        snprintf(list, sizeof(list), "%s", argv[2]);
        for (char *name = strtok_r(list, ",", &save); r == 0 && name; name = strtok_r(NULL, ",", &save)) {
            int nr = seccomp_syscall_resolve_name(name);
            if (nr == __NR_SCMP_ERROR) {
                fprintf(stderr, "aj-nouserns: unknown system call %s\n", name);
                return 2;
            }
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
        }
        goto load;
    }
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (r == 0 && no_scope)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(E2BIG), SCMP_SYS(landlock_create_ruleset), 1,
                             SCMP_A1_64(SCMP_CMP_GE, 24));
    if (r == 0 && first == 2 && !no_scope) {
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_NEWNET, CLONE_NEWNET));
        if (r == 0)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                                 SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_NEWNET, CLONE_NEWNET));
        goto load;
    }
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0_64(SCMP_CMP_MASKED_EQ, NS_FLAGS, CLONE_NEWUSER));
    /* Any namespace flag: one rule per flag (libseccomp ANDs conditions). */
    for (unsigned bit = 0; r == 0 && bit < 64; bit++) {
        unsigned long long f = 1ULL << bit;
        if (!(f & NS_FLAGS) || f == CLONE_NEWUSER)
            continue;
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0_64(SCMP_CMP_MASKED_EQ, f, f));
    }
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 0);
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setns), 0);
load:
    if (r == 0)
        r = seccomp_load(ctx);
    seccomp_release(ctx);
    if (r < 0) {
        fprintf(stderr, "aj-nouserns: seccomp: %d\n", r);
        return 1;
    }
    execvp(argv[first], argv + first);
    perror("aj-nouserns: exec");
    return 127;
}
