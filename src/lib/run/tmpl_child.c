/* SPDX-License-Identifier: Apache-2.0 */
/* The template's side of a template pool (tmpl.c, docs/interpreters.md,
 * "Templates"). Built into agentjail-interp.so, which the template (a
 * `python3` running interp_boot.py in template mode) loads with ctypes:
 *
 *   aj_tmpl_child_init   once, in the template: the pool's policy (its
 *                        canonical JSON, checked against the supervisor's
 *                        hash), the seccomp programs, the Landlock ABI;
 *   aj_tmpl_child_spawn  in the template, per parked interpreter: fork;
 *                        the fork enters the sandbox's namespaces (setns,
 *                        user namespace first), forks the payload into its
 *                        pid namespace, and there joins the run's cgroups
 *                        and applies every payload layer
 *                        (aj_child_adopted_payload). Returns the fork's pid
 *                        in the template, 0 in the payload, which goes on
 *                        as a parked interpreter; the fork that entered
 *                        stays outside the pid namespace as the payload's
 *                        reaper, reports its wait status (AJ_MSG_EXIT) and
 *                        exits, never back in Python.
 *
 * The sandbox itself (namespaces, root, cgroups, id maps, decoys) was made
 * by the supervisor's ordinary path, with an init in adopt mode (child.c):
 * the template adds a process to it, nothing more. Failures go to the
 * supervisor on the sandbox's sync socket (AJ_MSG_ERROR) as any sandbox
 * side's do. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_caps.h"
#include "aj_landlock.h"
#include "aj_missing.h"
#include "aj_policy_model.h"
#include "aj_seccomp.h"
#include "aj_util.h"
#include "child.h"
#include "protocol.h"
#include "tmpl.h"

#define TMPL_EXPORT __attribute__((visibility("default")))

static struct aj_child_ctx tc;
static bool tc_ready;
/* The pages a run is likely to touch (the template's profile, interp_boot.py):
 * (address, length) pairs, in the template's memory; an address with its low
 * bit set is a file's page to read, the others are pages to write. The
 * payload does both first thing (hot_touch). hot_errno: 0, or why the
 * payload could not. */
static const uint64_t *hot;
static size_t hot_pairs;
static int hot_errno = ENODATA;
static char decoy_path[AJ_DECOY_MAX_FILES][AJ_TMPL_MAX_PATH];

static int fail(char *errbuf, size_t errlen, const struct aj_error *err)
{
    if (errbuf && errlen)
        (void)snprintf(errbuf, errlen, "%s", err->msg[0] ? err->msg : "template set-up failed");
    return -1;
}

TMPL_EXPORT int aj_tmpl_child_init(const char *policy_json, size_t len, const char *sha256, unsigned skip,
                                   char *errbuf, size_t errlen);
TMPL_EXPORT int aj_tmpl_child_spawn(const void *data, size_t len, const int *fds, int nfds);
TMPL_EXPORT void aj_tmpl_child_hot(const uint64_t *pairs, size_t n);
TMPL_EXPORT int aj_tmpl_child_hot_errno(void);

/* The template's profile: N (address, length) pairs, which stay where they
 * are for the template's life (its array's buffer). */
void aj_tmpl_child_hot(const uint64_t *pairs, size_t n)
{
    hot = pairs;
    hot_pairs = n;
}

/* In the payload: 0 once hot_touch went through the profile's pages;
 * EINVAL where the kernel has no MADV_POPULATE_WRITE (before 5.14: the
 * caller writes them itself); ENODATA without a profile. */
int aj_tmpl_child_hot_errno(void)
{
    return hot_errno;
}

/* The profile's pages, made this process's own now, while it is parked,
 * rather than one fault at a time while a run waits for them. First thing
 * after the fork, before Python's after-fork work and the layers' set-up,
 * which would otherwise take many of those faults themselves; in the run's
 * cgroups already, so that the copies are charged to the run.
 * - A page to write that the template shares with this process is copied
 *   (one MADV_POPULATE_WRITE per range: far cheaper than a write fault per
 *   page where faults are dear, as under a hypervisor's shadow page tables,
 *   docs/performance.md).
 * - A file's page to read is mapped (MADV_POPULATE_READ: a fork copies no
 *   page table of a file mapping).
 * - Then one byte of each is read: the first access to a page in a new
 *   address space is what such a hypervisor charges for.
 * A range that fails (ENOMEM: not mapped here, what the probe mapped
 * itself; EFAULT; EINVAL: a VM_IO mapping) is skipped; a zero-length call
 * first tells whether the kernel knows the advice at all (Linux 5.14). */
static void hot_touch(void)
{
    uint64_t page = (uint64_t)getpagesize();

    if (!hot || hot_pairs == 0)
        return;
    if (madvise((void *)(uintptr_t)(hot[0] & ~(page - 1)), 0, MADV_POPULATE_WRITE) < 0) {
        hot_errno = errno;
        return;
    }
    for (size_t i = 0; i < hot_pairs; i++) {
        uint64_t at = hot[2 * i] & ~(uint64_t)1, len = hot[2 * i + 1];
        int advice = (hot[2 * i] & 1) ? MADV_POPULATE_READ : MADV_POPULATE_WRITE;

        if (madvise((void *)(uintptr_t)at, (size_t)len, advice) < 0)
            continue;
        for (uint64_t a = at; a < at + len; a += page)
            (void)*(volatile const char *)(uintptr_t)a;
    }
    hot_errno = 0;
}

int aj_tmpl_child_init(const char *policy_json, size_t len, const char *sha256, unsigned skip, char *errbuf,
                       size_t errlen)
{
    struct aj_error err = {0};
    struct aj_policy *pol;
    char hex[65];

    if (tc_ready) {
        aj_err(&err, EALREADY, "the template is set up already");
        return fail(errbuf, errlen, &err);
    }
    /* This process sees the sandbox's view, not the host's: the supervisor
     * checked the binds' host paths. */
    aj_policy_host_paths_unseen = true;
    pol = aj_policy_new();
    if (!pol) {
        aj_err(&err, ENOMEM, "policy");
        return fail(errbuf, errlen, &err);
    }
    if (aj_policy_load_buffer(pol, policy_json, len, "<template policy>", &err) < 0 ||
        aj_policy_sha256(pol, hex, &err) < 0) {
        aj_policy_free(pol);
        return fail(errbuf, errlen, &err);
    }
    /* The payload layers come from this copy: it must be the pool's policy
     * exactly, not what a round trip through JSON made of it. */
    if (strcmp(hex, sha256) != 0) {
        aj_policy_free(pol);
        aj_err(&err, EPROTO, "the template's copy of the policy differs from the pool's (%.12s, not %.12s)", hex,
               sha256);
        return fail(errbuf, errlen, &err);
    }
    memset(&tc, 0, sizeof(tc));
    tc.pol = pol;
    tc.rootless = geteuid() != 0;
    tc.interp = true;
    tc.skip = skip & ~AJ_TMPL_MEMFD_FILTER;
    tc.sock = tc.in_fd = tc.out_fd = tc.err_fd = tc.pty_slave = -1;
    tc.landlock_abi = aj_landlock_abi();
    if (tc.landlock_abi < 1)
        tc.skip |= AJ_SKIP_LANDLOCK; /* the supervisor refused the pool otherwise (prep_identity) */
    if (aj_seccomp_build(pol, true, &tc.bpf, &err) < 0)
        return fail(errbuf, errlen, &err);
    if ((skip & AJ_TMPL_MEMFD_FILTER) && aj_seccomp_build_memfd_sealed(pol, true, &tc.bpf_memfd, &err) < 0)
        return fail(errbuf, errlen, &err);
    /* Another template (same uid, no capabilities either) must not be able
     * to read or trace this one. */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    tc_ready = true;
    return 0;
}

static __attribute__((noreturn)) void enter_fail(int sock, int e, const char *what)
{
    struct aj_error err = {0};

    aj_err(&err, e, "template: %s", what);
    aj_proto_send_msg(sock, AJ_MSG_ERROR, 0, 0, 0, &err);
    _exit(125);
}

static int child_enter(const void *data, size_t len, const int *fds, int nfds)
{
    static const int nstype[AJ_ADOPT_NS_KINDS] = {CLONE_NEWUSER, CLONE_NEWNS,     CLONE_NEWUTS, CLONE_NEWIPC,
                                                  CLONE_NEWNET,  CLONE_NEWCGROUP, CLONE_NEWPID, CLONE_NEWTIME};
    struct aj_tmpl_spawn hdr;
    struct aj_child_ctx c;
    const char *p, *end;
    int sock, k = 1, st;
    pid_t payload;

    if (nfds < 1 || !data || len < sizeof(hdr))
        _exit(125);
    sock = fds[0];
    memcpy(&hdr, data, sizeof(hdr));
    if (!tc_ready || hdr.magic != AJ_TMPL_MAGIC || hdr.n_cg > AJ_CG_MAX_JOIN + 1 ||
        hdr.n_decoys > AJ_DECOY_MAX_FILES || !(hdr.ns_mask & (1u << AJ_ADOPT_NS_USER)) ||
        !(hdr.ns_mask & (1u << AJ_ADOPT_NS_PID)) || !(hdr.ns_mask & (1u << AJ_ADOPT_NS_MNT)))
        enter_fail(sock, EPROTO, "malformed spawn request");
    for (int i = 0; i < AJ_ADOPT_NS_KINDS; i++)
        k += (hdr.ns_mask >> i) & 1;
    if (nfds != k + (int)hdr.n_cg)
        enter_fail(sock, EPROTO, "malformed spawn request (fds)");
    c = tc;
    c.sock = sock;
    /* The run's decoys that init made in /dev: writable for the payload,
     * as Landlock grants them an exec'd payload (child.c). */
    p = (const char *)data + sizeof(hdr);
    end = (const char *)data + len;
    c.decoys.n = 0;
    for (uint32_t i = 0; i < hdr.n_decoys; i++) {
        const char *z = memchr(p, '\0', (size_t)(end - p));
        if (!z || (size_t)(z - p) >= AJ_TMPL_MAX_PATH)
            enter_fail(sock, EPROTO, "malformed spawn request (decoys)");
        memcpy(decoy_path[i], p, (size_t)(z - p) + 1);
        c.decoys.paths[c.decoys.n] = decoy_path[i];
        c.decoys.made_at_arm[c.decoys.n++] = true;
        p = z + 1;
    }
    /* The user namespace first: its capabilities are what the others'
     * setns checks against (the template is their owner's uid, and has no
     * capability of its own). */
    for (int i = 0, f = 1; i < AJ_ADOPT_NS_KINDS; i++) {
        if (!(hdr.ns_mask & (1u << i)))
            continue;
        if (setns(fds[f], nstype[i]) < 0)
            enter_fail(sock, errno, i == AJ_ADOPT_NS_USER ? "enter the sandbox's user namespace"
                                    : i == AJ_ADOPT_NS_MNT ? "enter the sandbox's mount namespace"
                                    : i == AJ_ADOPT_NS_PID ? "enter the sandbox's pid namespace"
                                                           : "enter the sandbox's namespaces");
        f++;
    }
    {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        (void)sigaction(SIGCHLD, &dfl, NULL); /* the template ignores it; we wait for the payload */
    }
    payload = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (payload < 0)
        enter_fail(sock, errno, "fork the payload");
    if (payload == 0) {
        /* Into the run's cgroups before anything else (the fds: v1 "tasks"
         * files and the v2 group's cgroup.procs, opened by the supervisor):
         * everything the payload does is the run's. Not the reaper: the
         * run's end kills its cgroup, and a reaper killed before it reaped
         * the payload would leave that zombie to the host's init, whose
         * reaping the end of the sandbox's pid namespace then waits for. */
        for (uint32_t i = 0; i < hdr.n_cg; i++)
            if (write(fds[k + (int)i], "0", 1) != 1)
                enter_fail(sock, errno, "join the run's cgroup");
        hot_touch();
        aj_child_adopted_payload(&c); /* returns with every layer on, or exits */
        return 0;
    }
    /* The reaper: outside the pid namespace (the payload cannot see it),
     * holding nothing but the sync socket, no privilege, not dumpable. */
    if ((sock > 3 && aj_sys_close_range(3, (unsigned)sock - 1, 0) < 0) ||
        aj_sys_close_range((unsigned)sock + 1, ~0U, 0) < 0)
        _exit(125);
    {
        struct aj_error err = {0};
        (void)aj_caps_child_drop_all(&err);
    }
    for (;;) {
        pid_t w = waitpid(payload, &st, 0);
        if (w == payload)
            break;
        if (w < 0 && errno != EINTR)
            _exit(125);
    }
    aj_proto_send_msg(sock, AJ_MSG_EXIT, st, 0, 0, NULL);
    _exit(0);
}

/* The fork is made here, not by Python's os.fork: the reaper then runs
 * only this file's code, and writes (copies) a few pages of the template
 * instead of the hundred or so that Python's after-fork work and a ctypes
 * call back into the interpreter touched, each copied again by the
 * payload forked from it. glibc's fork, as os.fork uses: a preloaded
 * module's threads (a BLAS pool) may hold malloc's locks, which its fork
 * handlers take first. The caller holds the interpreter's lock (ctypes
 * PYFUNCTYPE) and runs Python's fork hooks around this as os.fork does
 * (PyOS_BeforeFork; PyOS_AfterFork_Parent in the template,
 * PyOS_AfterFork_Child in the payload). */
int aj_tmpl_child_spawn(const void *data, size_t len, const int *fds, int nfds)
{
    pid_t pid = fork();

    if (pid != 0)
        return pid < 0 ? -1 : (int)pid;
    return child_enter(data, len, fds, nfds);
}
