/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agentjail-probe [--json] [--only NAME]
 *
 * Looks for container/sandbox escape vectors from the inside, with
 * harmless probes only (see probe.h), and prints one finding per vector:
 * a table by default, JSON (schema version 1) with --json. Exit status 0
 * whatever it finds; 2 for a bad command line; 1 if the report itself
 * could not be produced (out of memory, stdout closed).
 *
 * Finding ids are stable; docs/probe.md explains each one.
 *
 *   id                          category     what "exposed" means
 *   caps.effective              privileges   dangerous capabilities in effect
 *   caps.permitted              privileges   ... permitted, one capset() away
 *   caps.bounding               privileges   ... grantable by a setuid/file-cap execve
 *   caps.ambient                privileges   ... kept across execve
 *   privileges.no_new_privs     privileges   no_new_privs is not set
 *   privileges.seccomp          privileges   no seccomp filter
 *   privileges.uid              privileges   root in the initial user namespace
 *   namespaces.user             privileges   a user namespace can be created
 *   namespaces.mount            privileges   a mount namespace can be created
 *   syscalls.mount              syscalls     mount / fsopen / open_tree permitted
 *   syscalls.setns              syscalls     setns permitted
 *   syscalls.bpf                syscalls     BPF programs can be loaded
 *   syscalls.perf_event_open    syscalls     perf_event_open reachable
 *   syscalls.io_uring           syscalls     io_uring_setup permitted
 *   syscalls.userfaultfd        syscalls     kernel-mode userfaultfd permitted
 *   syscalls.keyctl             syscalls     keyrings reachable
 *   syscalls.ptrace             syscalls     ptrace reachable
 *   syscalls.process_vm_readv   syscalls     cross-process memory access reachable
 *   syscalls.open_by_handle_at  syscalls     open_by_handle_at permitted ("shocker")
 *   syscalls.kexec_load         syscalls     kexec_load permitted
 *   syscalls.init_module        syscalls     module loading permitted
 *   syscalls.reboot             syscalls     reboot permitted
 *   syscalls.swapon             syscalls     swapon permitted
 *   syscalls.ioport             syscalls     iopl/ioperm permitted (x86-64)
 *   syscalls.compat_abi         syscalls     x32 / int 0x80 entry reachable (x86-64)
 *   filesystem.host_mounts      filesystem   writable or whole host filesystems mounted
 *   filesystem.proc_sys         filesystem   /proc/sys writable
 *   filesystem.core_pattern     filesystem   core_pattern writable
 *   filesystem.sysrq_trigger    filesystem   /proc/sysrq-trigger writable
 *   filesystem.release_agent    filesystem   a cgroup v1 release_agent writable
 *   fds.leaked                  filesystem   inherited directory/socket/outside-file fds
 *   fds.cwd                     filesystem   working directory outside the root
 *   devices.block               devices      a block device can be opened
 *   devices.mem                 devices      /dev/mem, /dev/kmem or /dev/port can be opened
 *   devices.kmsg                devices      /dev/kmsg can be opened
 *   devices.other               devices      KVM, FUSE, TUN, consoles, ... accessible
 *   runtime.docker_sock         runtime      Docker socket connectable
 *   runtime.containerd_sock     runtime      containerd socket connectable
 *   runtime.crio_sock           runtime      CRI-O socket connectable
 *   runtime.podman_sock         runtime      Podman socket connectable
 *   runtime.k8s_token           runtime      a real service-account token readable
 *   runtime.environment         runtime      (info) container markers
 *   credentials.env             credentials  credential-like variable names present
 *   credentials.files           credentials  credential files readable
 *   network.interfaces          network      a non-loopback interface up with an address
 *   network.routes              network      a default route
 *   processes.host_pids         processes    host processes visible
 *   kernel.version              kernel       (info) uname -r / -v
 *   kernel.cve.CVE-YYYY-NNNN    kernel       the release is in a CVE's affected range
 *   kernel.cves                 kernel       (info) no CVE in the table matches
 *
 * AGENTJAIL_PROBE_KERNEL=RELEASE replaces uname -r, for tests of the CVE
 * matching only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "probe.h"

#define FD_SCAN_FALLBACK_MAX 4096

static const struct check {
    const char *name;
    void (*run)(struct pr_ctx *c);
} checks[] = {
    {"caps", pr_check_caps},
    {"privileges", pr_check_privileges},
    {"namespaces", pr_check_namespaces},
    {"syscalls", pr_check_syscalls},
    {"filesystem", pr_check_filesystem},
    {"fds", pr_check_fds},
    {"devices", pr_check_devices},
    {"runtime", pr_check_runtime},
    {"credentials", pr_check_credentials},
    {"network", pr_check_network},
    {"processes", pr_check_processes},
    {"kernel", pr_check_kernel},
};

static void usage(FILE *f)
{
    fputs("usage: agentjail-probe [--json] [--only NAME]\n"
          "\n"
          "Looks for escape vectors from the inside, with harmless probes only.\n"
          "  --json       machine-readable output (schema version 1)\n"
          "  --only NAME  one check, or one finding id (e.g. caps, syscalls.mount)\n"
          "checks:",
          f);
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
        fprintf(f, " %s", checks[i].name);
    fputs("\nExit status: 0 (whatever is found), 2 for a bad command line.\n", f);
}

/* Does NAME select check k (the check itself, or a finding under it)? */
static bool selects(const char *name, const struct check *k)
{
    size_t n = strlen(k->name);

    return strncmp(name, k->name, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

static void add_fd(struct pr_ctx *c, int fd)
{
    if (c->n_inherited_fds == PR_MAX_INHERITED_FDS) {
        c->inherited_fds_truncated = true;
        return;
    }
    c->inherited_fds[c->n_inherited_fds++] = fd;
}

/* Before anything of ours is opened: which descriptors came with us? */
static void snapshot_fds(struct pr_ctx *c)
{
    struct rlimit rl;
    struct dirent *de;
    DIR *d = opendir("/proc/self/fd");
    int max = FD_SCAN_FALLBACK_MAX;

    if (d) {
        while ((de = readdir(d))) {
            unsigned long fd;
            if (pr_parse_uint(de->d_name, &fd) && fd >= 3 && (int)fd != dirfd(d))
                add_fd(c, (int)fd);
        }
        closedir(d);
        return;
    }
    /* No /proc: ask each descriptor number in turn. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)max)
        max = (int)rl.rlim_cur;
    for (int fd = 3; fd < max; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            add_fd(c, fd);
}

static void load_kernel(struct pr_ctx *c)
{
    const char *over = getenv("AGENTJAIL_PROBE_KERNEL");
    struct utsname u;

    if (uname(&u) == 0) {
        snprintf(c->kernel, sizeof(c->kernel), "%s", u.release);
        snprintf(c->kernel_build, sizeof(c->kernel_build), "%s", u.version);
    } else {
        snprintf(c->kernel, sizeof(c->kernel), "unknown");
    }
    if (over && *over) {
        snprintf(c->kernel, sizeof(c->kernel), "%s", over);
        c->kernel_overridden = true;
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"only", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct pr_ctx c;
    bool json = false, known = false;
    int opt, r;

    memset(&c, 0, sizeof(c));
    c.userns_err = -1;
    snapshot_fds(&c); /* first: before any descriptor of our own exists */
    while ((opt = getopt_long(argc, argv, "jo:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j':
            json = true;
            break;
        case 'o':
            c.only = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "agentjail-probe: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    for (size_t i = 0; c.only && i < sizeof(checks) / sizeof(checks[0]); i++)
        known |= selects(c.only, &checks[i]);
    if (c.only && !known) {
        fprintf(stderr, "agentjail-probe: --only %s: no such check\n", c.only);
        usage(stderr);
        return 2;
    }
    pr_creds_load(&c.creds);
    load_kernel(&c);
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
        if (!c.only || selects(c.only, &checks[i]))
            checks[i].run(&c);
    r = json ? pr_write_json(&c, stdout) : pr_write_table(&c, stdout);
    if (r < 0 || c.failed) {
        fprintf(stderr, "agentjail-probe: %s\n",
                c.failed ? "out of memory: report incomplete" : "cannot write the report");
        free(c.items);
        return 1;
    }
    free(c.items);
    return 0;
}
