/* SPDX-License-Identifier: Apache-2.0 */
/* bwrap_filter FILE: write a seccomp BPF program for `bwrap --seccomp FD`,
 * so the bwrap baseline pays for a filter as agentjail does. Modelled on
 * flatpak's: allow by default, refuse the usual escape-prone calls. */
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    static const char *deny[] = {"syslog", "uselib", "personality", "acct", "modify_ldt", "quotactl",
                                 "add_key", "keyctl", "request_key", "move_pages", "mbind",
                                 "get_mempolicy", "set_mempolicy", "migrate_pages", "unshare", "setns",
                                 "mount", "umount2", "pivot_root", "chroot", "ptrace",
                                 "perf_event_open", "bpf", "userfaultfd", "kexec_load", "init_module",
                                 "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at",
                                 "io_uring_setup", "fsopen", "fsmount", "open_tree", "move_mount"};
    scmp_filter_ctx ctx;
    int fd;

    if (argc != 2)
        return 2;
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return 1;
    for (size_t i = 0; i < sizeof(deny) / sizeof(deny[0]); i++) {
        int nr = seccomp_syscall_resolve_name(deny[i]);
        if (nr != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) < 0)
            return 1;
    }
    fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || seccomp_export_bpf(ctx, fd) < 0)
        return 1;
    close(fd);
    seccomp_release(ctx);
    return 0;
}
