/* SPDX-License-Identifier: Apache-2.0 */
/* Template pools, the supervisor's side (see tmpl.h for the protocol and
 * docs/interpreters.md, "Templates", for what it trades).
 *
 * The template is `python3 -c BOOTSTRAP -t PRELOAD... [-wWARMUP]`, started
 * here: it imports the preload once, runs the warm-up, freezes what it
 * made, and then forks one child per parked interpreter, which enters a
 * sandbox the supervisor prepared for it alone. The template runs no
 * request. It lives in a sandbox of its own (home), prepared as its
 * children's are: it sees the filesystem a run sees (its mount namespace
 * is a copy of home's, with a /proc of the host's pid namespace, where it
 * stays so that its children can enter theirs) and its memory and
 * processes count in home's cgroup, under the policy's limits. It has no
 * capability (an empty bounding set and securebits locked, so its exec as
 * root gains none), no_new_privs, a fresh session keyring, no
 * supplementary groups, a session and network, IPC and UTS namespaces of
 * its own. What it keeps is its uid, root's: a sandbox's user namespace
 * is owned by the supervisor's uid, which is what lets the template's
 * child enter it without any capability of its own. Root mode only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aj_caps.h"
#include "aj_missing.h"
#include "aj_util.h"
#include "children.h"
#include "protocol.h"
#include "sandbox.h"
#include "tmpl.h"

/* How long the template may take to import its preload and run the
 * warm-up (as a parked interpreter may: interp.c). */
#define TMPL_START_MAX_MS 120000

struct aj_tmpl {
    pid_t pid;
    int pidfd;
    int ctl;                /* our end of the template's fd 3 */
    struct aj_sandbox *home; /* the template's own sandbox: its view and its cgroup */
};

/* The variables that keep numpy's BLAS (and OpenMP, numexpr) to one
 * thread: the template must fork with only its own thread. Set unless the
 * policy's environment sets them. */
static const char *const one_thread_env[] = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
                                             "NUMEXPR_NUM_THREADS=1", "VECLIB_MAXIMUM_THREADS=1"};

static int interp_so_path(char *buf, size_t size, struct aj_error *err)
{
    return aj_locate_companion("AGENTJAIL_INTERP_SO", "agentjail-interp.so", R_OK, buf, size, err);
}

bool aj_tmpl_wanted(const struct aj_policy *pol, char *why, size_t why_size)
{
    struct aj_error err = {0};
    char path[4096];

    if (why_size)
        why[0] = '\0';
    if (pol->interp_lang == AJ_INTERP_NONE || !pol->interp_template)
        return false;
    if (geteuid() != 0) {
        (void)snprintf(why, why_size, "rootless mode: a template's children enter their sandboxes as root "
                                      "without capabilities, so only root mode has templates");
        return false;
    }
    if (interp_so_path(path, sizeof(path), &err) < 0) {
        (void)snprintf(why, why_size, "%s", err.msg);
        return false;
    }
    return true;
}

/* The environment of a parked interpreter (the policy's, without env_pass
 * values), plus one_thread_env where the policy leaves them unset. */
static char **template_envp(const struct aj_policy *pol, const char **ret_path, struct aj_error *err)
{
    struct aj_policy parked = *pol;
    char *const none[2] = {NULL, NULL};
    char **base, **v;
    size_t n = 0, k = 0;

    parked.n_env_pass = 0;
    base = sb_build_envp(&parked, none, ret_path, err);
    if (!base)
        return NULL;
    while (base[n])
        n++;
    v = calloc(n + AJ_ARRAY_SIZE(one_thread_env) + 1, sizeof(char *));
    if (!v) {
        sb_free_envp(base);
        aj_err(err, ENOMEM, "template environment");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[k++] = base[i];
    for (size_t i = 0; i < AJ_ARRAY_SIZE(one_thread_env); i++) {
        size_t len = (size_t)(strchr(one_thread_env[i], '=') - one_thread_env[i]) + 1;
        bool set = false;
        for (size_t j = 0; j < n && !set; j++)
            set = strncmp(base[j], one_thread_env[i], len) == 0;
        if (!set && !(v[k++] = strdup(one_thread_env[i]))) {
            free(base);
            sb_free_envp(v);
            aj_err(err, ENOMEM, "template environment");
            return NULL;
        }
    }
    free(base); /* its strings are v's now */
    if (*ret_path) {
        for (size_t i = 0; v[i]; i++)
            if (strncmp(v[i], "PATH=", 5) == 0)
                *ret_path = v[i] + 5;
    }
    return v;
}

struct tmpl_exec {
    const char *path_env;   /* the policy's PATH: python3 is looked up in home's view */
    char **argv, **envp;
    int null_fd, ctl, so_fd;
    int mnt_fd;             /* home's mount namespace */
    int cg[AJ_CG_MAX_JOIN + 1]; /* home's cgroup files */
    size_t n_cg;
};

/* The template's process between clone and exec: no malloc, _exit only
 * (the supervisor may have other threads). Exit codes 120-124 say which
 * step failed (the supervisor reports them). */
static __attribute__((noreturn)) void template_child(const struct tmpl_exec *x)
{
    struct aj_error err = {0};
    const char *p = x->path_env;
    char buf[4096];

    if (setsid() < 0)
        _exit(120);
    for (size_t i = 0; i < x->n_cg; i++)
        if (write(x->cg[i], "0", 1) != 1)
            _exit(121);
    if (dup2(x->null_fd, 0) < 0 || dup2(x->null_fd, 1) < 0 || dup2(x->null_fd, 2) < 0 || dup2(x->ctl, 3) < 0 ||
        dup2(x->so_fd, 4) < 0)
        _exit(120);
    /* home's view, in a copy of its own (what it mounts stays its own),
     * with the host's /proc (its pid namespace is the host's). */
    if (setns(x->mnt_fd, CLONE_NEWNS) < 0 || unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        _exit(122);
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid") < 0 &&
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        _exit(122);
    if (chdir("/") < 0 || aj_sys_close_range(5, ~0U, 0) < 0 || aj_sys_setgroups_none() < 0)
        _exit(120);
    if (syscall(__NR_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != EPERM && errno != ENOSYS)
        _exit(120);
    if (aj_caps_child_drop_all(&err) < 0 || aj_caps_child_no_new_privs(&err) < 0)
        _exit(123);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); /* a backstop: EOF on fd 3 is the real end */
    while (p && *p) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0 && n + sizeof("/python3") < sizeof(buf)) {
            (void)snprintf(buf, sizeof(buf), "%.*s/python3", (int)n, p);
            execve(buf, x->argv, x->envp);
        }
        p = colon ? colon + 1 : NULL;
    }
    _exit(124);
}

static int send_policy(int ctl, const struct aj_policy *pol, unsigned skip, struct aj_error *err)
{
    char hex[65];
    char *json = aj_policy_to_json(pol, true);
    size_t len;
    char *msg;
    int r;

    if (!json)
        return aj_err(err, ENOMEM, "policy JSON");
    r = aj_policy_sha256(pol, hex, err);
    if (r < 0) {
        free(json);
        return r;
    }
    len = strlen(json);
    msg = malloc(1 + 64 + 4 + len + 1);
    if (!msg) {
        free(json);
        return aj_err(err, ENOMEM, "template policy");
    }
    msg[0] = 'I';
    memcpy(msg + 1, hex, 64);
    for (int i = 0; i < 4; i++)
        msg[65 + i] = (char)((skip >> (8 * i)) & 0xff);
    memcpy(msg + 69, json, len + 1); /* the NUL is not sent */
    /* One datagram: a policy can be larger than the socket's default
     * buffer (212992 bytes on most systems, less the overhead), up to the
     * 1 MiB a policy file may be plus its canonical form's growth. Root
     * mode (the only one with templates) may force the size; else the
     * ordinary call gets up to twice net.core.wmem_max. */
    if (69 + len > 65536) {
        int want = (int)(69 + len + 65536);
        if (setsockopt(ctl, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof(want)) < 0)
            (void)setsockopt(ctl, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
    }
    r = aj_proto_send_plain(ctl, msg, 69 + len);
    free(msg);
    free(json);
    if (r == -EMSGSIZE)
        return aj_err(err, EMSGSIZE, "hand the policy to the template: %zu bytes are more than this socket takes "
                      "(net.core.wmem_max); set interpreter.template to false for this policy", len);
    return r < 0 ? aj_err(err, -r, "hand the policy to the template") : 0;
}

static unsigned skip_flags(struct aj_error *err, bool *bad)
{
    const char *skip = getenv("AGENTJAIL_UNSAFE_SKIP_LAYER");

    *bad = false;
    if (!skip || !*skip)
        return 0;
    if (strcmp(skip, "seccomp") == 0)
        return AJ_SKIP_SECCOMP;
    if (strcmp(skip, "landlock") == 0)
        return AJ_SKIP_LANDLOCK;
    *bad = true;
    aj_err(err, 0, "AGENTJAIL_UNSAFE_SKIP_LAYER: '%s' is not seccomp or landlock", skip);
    return 0;
}

/* How the template ended, once it has: its exit status or signal, and
 * for the set-up's own exit codes (template_child) the step. */
static int template_ended(struct aj_tmpl *t, struct aj_error *err)
{
    static const char *const step[] = {"its set-up", "joining its cgroup", "entering its view",
                                       "dropping its privileges", "finding python3 on the policy's PATH"};
    siginfo_t si = {0};
    struct pollfd p = {.fd = t->pidfd, .events = POLLIN};

    /* Its channel closes as it exits: wait (briefly) for the exit itself. */
    (void)poll(&p, 1, 1000);
    if (waitid(P_PIDFD, (id_t)t->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
        return aj_err(err, EPIPE, "the template closed its channel before it was ready");
    if (si.si_code == CLD_EXITED && si.si_status >= 120 && si.si_status <= 124)
        return aj_err(err, EPIPE, "the template failed as it started: %s", step[si.si_status - 120]);
    if (si.si_code == CLD_EXITED)
        return aj_err(err, EPIPE, "the template exited with status %d before it was ready", si.si_status);
    return aj_err(err, EPIPE, "the template was killed by signal %d before it was ready", si.si_status);
}

/* 'P', or 'E' + why, within the bound. */
static int wait_ready(struct aj_tmpl *t, const bool *cancel, struct aj_error *err)
{
    uint64_t deadline = aj_now_ms() + TMPL_START_MAX_MS;

    for (;;) {
        struct pollfd p[2] = {{.fd = t->ctl, .events = POLLIN}, {.fd = t->pidfd, .events = POLLIN}};
        uint64_t now = aj_now_ms();
        char buf[4097];
        ssize_t n;
        int r;

        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return aj_err(err, ECANCELED, "the pool is being freed");
        if (now >= deadline)
            return aj_err(err, ETIMEDOUT, "the template did not import its preload within %d ms",
                          TMPL_START_MAX_MS);
        r = poll(p, 2, (int)(deadline - now < 50 || !cancel ? deadline - now : 50));
        if (r < 0 && errno != EINTR)
            return aj_err(err, errno, "poll the template");
        if (r <= 0)
            continue;
        /* ECONNRESET: the template exited with our policy message unread
         * (a preload or warm-up that failed before it read it); the kernel
         * says so once, and what it sent (its 'E') is still queued. */
        do
            n = recv(t->ctl, buf, sizeof(buf) - 1, MSG_DONTWAIT);
        while (n < 0 && (errno == EINTR || errno == ECONNRESET));
        if (n < 0 && errno == EAGAIN) {
            if (p[1].revents)
                return template_ended(t, err);
            continue;
        }
        if (n == 1 && buf[0] == 'P')
            return 0;
        if (n > 1 && buf[0] == 'E') {
            buf[n] = '\0';
            return aj_err(err, ENOENT, "%s", buf + 1);
        }
        if (n <= 0)
            return template_ended(t, err);
        return aj_err(err, EPROTO, "the template said something else than ready");
    }
}

/* How many entries a /proc directory of the template has (-1: unreadable). */
static int count_entries(pid_t pid, const char *what, int *max_fd)
{
    char path[64];
    DIR *d;
    struct dirent *e;
    int n = 0;

    (void)snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
    d = opendir(path);
    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            long v = strtol(e->d_name, NULL, 10);
            n++;
            if (max_fd && v > *max_fd)
                *max_fd = (int)v;
        }
    closedir(d);
    return n;
}

/* Ready: one thread (a fork copies only the caller's; numpy's BLAS threads
 * were kept to one by the environment) and fds 0-3 only (its children
 * must inherit nothing else), as the host sees it. */
static int check_forkable(struct aj_tmpl *t, struct aj_error *err)
{
    int max_fd = -1;
    int threads = count_entries(t->pid, "task", NULL);
    int fds = count_entries(t->pid, "fd", &max_fd);

    if (threads < 0 || fds < 0)
        return aj_err(err, errno, "read the template's /proc entries");
    if (threads != 1)
        return aj_err(err, EBUSY,
                      "interpreter.template: the preload or the warm-up left %d threads running in the template; it "
                      "forks, so it must have one (set interpreter.template to false)",
                      threads);
    if (fds != 4 || max_fd != 3)
        return aj_err(err, EBUSY,
                      "interpreter.template: the preload or the warm-up left files open in the template (%d fds); its "
                      "children must inherit none (set interpreter.template to false)",
                      fds);
    return 0;
}

int aj_tmpl_start(const struct aj_policy *pol, const bool *cancel, struct aj_tmpl **ret, struct aj_error *err)
{
    struct tmpl_exec x = {.null_fd = -1, .ctl = -1, .so_fd = -1, .mnt_fd = -1};
    struct aj_tmpl *t;
    char so[4096];
    const char *path = NULL;
    int sv[2] = {-1, -1}, r;
    unsigned skip;
    bool bad;

    *ret = NULL;
    skip = skip_flags(err, &bad);
    if (bad)
        return -EINVAL;
    r = interp_so_path(so, sizeof(so), err);
    if (r < 0)
        return r;
    t = calloc(1, sizeof(*t));
    if (!t)
        return aj_err(err, ENOMEM, "template");
    t->pid = -1;
    t->pidfd = t->ctl = -1;
    r = aj_interp_prepare_adopted(pol, NULL, &t->home, err);
    if (r < 0) {
        free(t);
        return r == -EOPNOTSUPP ? r : aj_err_prefix(err, r, "the template's sandbox");
    }
    /* home's mount namespace (the fds follow its sync socket, in
     * AJ_ADOPT_NS_* order) and its cgroup files. */
    for (int i = 0, f = 1; i <= AJ_ADOPT_NS_MNT; i++)
        if (t->home->st.adopt_mask & (1u << i)) {
            if (i == AJ_ADOPT_NS_MNT)
                x.mnt_fd = t->home->st.adopt_fds[f];
            f++;
        }
    if (x.mnt_fd < 0)
        r = aj_err(err, EPROTO, "the template's sandbox handed over no mount namespace");
    if (r == 0)
        r = aj_cgroup_open_helper_join_fds(&t->home->cg, x.cg, &x.n_cg, err);
    x.envp = r == 0 ? template_envp(pol, &path, err) : NULL;
    x.argv = x.envp ? aj_interp_boot_argv(pol, true) : NULL;
    x.path_env = path ? path : AJ_DEFAULT_PATH;
    if (r == 0 && !x.envp)
        r = -ENOMEM;
    else if (r == 0 && !x.argv)
        r = aj_err(err, ENOMEM, "template command line");
    if (r == 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        r = aj_err(err, errno, "template socketpair");
    if (r == 0 && (x.null_fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
        r = aj_err(err, errno, "open /dev/null");
    if (r == 0 && (x.so_fd = open(so, O_RDONLY | O_CLOEXEC)) < 0)
        r = aj_err(err, errno, "open %s", so);
    x.ctl = sv[1];
    if (r == 0) {
        /* A raw clone: the supervisor may have other threads (child.h). */
        t->pid = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
        if (t->pid == 0)
            template_child(&x);
        if (t->pid < 0)
            r = aj_err(err, errno, "start the template");
    }
    if (t->pid > 0) {
        aj_children_add(t->pid);
        t->pidfd = (int)syscall(__NR_pidfd_open, t->pid, 0);
        if (t->pidfd < 0)
            r = aj_err(err, errno, "pidfd_open the template");
    }
    t->ctl = sv[0];
    if (sv[1] >= 0)
        (void)close(sv[1]);
    if (x.null_fd >= 0)
        (void)close(x.null_fd);
    if (x.so_fd >= 0)
        (void)close(x.so_fd);
    for (size_t i = 0; i < x.n_cg; i++)
        (void)close(x.cg[i]);
    aj_loop_close_adopt_fds(&t->home->st); /* the template holds home's view now */
    sb_free_envp(x.envp);
    sb_free_envp(x.argv);
    /* As prep_filters judges it for a sandbox of its own. */
    if (access("/proc/sys/vm/memfd_noexec", F_OK) == 0)
        skip |= AJ_TMPL_MEMFD_FILTER;
    if (r == 0)
        r = send_policy(t->ctl, pol, skip, err);
    if (r == 0)
        r = wait_ready(t, cancel, err);
    if (r == 0)
        r = check_forkable(t, err);
    if (r < 0) {
        aj_tmpl_free(t);
        return r;
    }
    *ret = t;
    return 0;
}

bool aj_tmpl_alive(struct aj_tmpl *t)
{
    struct pollfd p = {.fd = t ? t->pidfd : -1, .events = POLLIN};
    return t && t->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

bool aj_tmpl_idle(struct aj_tmpl *t)
{
    pid_t pids[8];
    int n;

    if (!t || aj_tmpl_alive(t) || !t->home)
        return false;
    /* Its children's reapers stay in this group (tmpl_child.c): the
     * payloads went to their runs' groups, the reapers wait for them. */
    n = aj_cgroup_procs(&t->home->cg, pids, sizeof(pids) / sizeof(pids[0]));
    if (n < 0 || n > (int)(sizeof(pids) / sizeof(pids[0])))
        return false;
    for (int i = 0; i < n; i++)
        if (pids[i] != t->home->st.pid && pids[i] != t->pid)
            return false;
    return true;
}

pid_t aj_tmpl_pid(const struct aj_tmpl *t)
{
    return t ? t->pid : -1;
}

int aj_tmpl_spawn(struct aj_tmpl *t, struct aj_sandbox *sb, struct aj_error *err)
{
    struct supervise_state *st = &sb->st;
    struct aj_child_ctx *c = &sb->c;
    char buf[1 + sizeof(struct aj_tmpl_spawn) + AJ_DECOY_MAX_FILES * AJ_TMPL_MAX_PATH];
    struct aj_tmpl_spawn hdr = {.magic = AJ_TMPL_MAGIC, .ns_mask = st->adopt_mask};
    int fds[1 + AJ_ADOPT_NS_KINDS + AJ_CG_MAX_JOIN + 1];
    int cg[AJ_CG_MAX_JOIN + 1];
    size_t off = 1 + sizeof(hdr), n_cg = 0;
    int nfds = 0, r;

    if (st->n_adopt_fds < 1)
        return aj_err(err, EPROTO, "the sandbox handed over no namespaces");
    for (size_t i = 0; i < c->decoys.n; i++) {
        size_t len = strlen(c->decoys.paths[i]) + 1;
        if (!c->decoys.made_at_arm[i])
            continue;
        if (len > AJ_TMPL_MAX_PATH)
            return aj_err(err, ENAMETOOLONG, "decoy path %s", c->decoys.paths[i]);
        (void)snprintf(buf + off, sizeof(buf) - off, "%s", c->decoys.paths[i]);
        off += len;
        hdr.n_decoys++;
    }
    r = aj_cgroup_open_helper_join_fds(&sb->cg, cg, &n_cg, err);
    if (r < 0)
        return r;
    hdr.n_cg = (uint32_t)n_cg;
    buf[0] = 'S';
    memcpy(buf + 1, &hdr, sizeof(hdr));
    for (int i = 0; i < st->n_adopt_fds; i++)
        fds[nfds++] = st->adopt_fds[i];
    for (size_t i = 0; i < n_cg; i++)
        fds[nfds++] = cg[i];
    r = aj_proto_send_with_fds(t->ctl, buf, off, fds, nfds);
    for (size_t i = 0; i < n_cg; i++)
        (void)close(cg[i]);
    /* The sandbox's end of the sync socket and its namespaces are the
     * template child's now. */
    aj_loop_close_adopt_fds(st);
    if (r < 0)
        return aj_err(err, -r, "hand the sandbox to the template");
    return 0;
}

void aj_tmpl_free(struct aj_tmpl *t)
{
    if (!t)
        return;
    if (t->ctl >= 0)
        (void)close(t->ctl);
    if (t->pid > 0) {
        if (t->pidfd >= 0)
            (void)aj_sys_pidfd_send_signal(t->pidfd, SIGKILL);
        else
            (void)kill(t->pid, SIGKILL);
        while (waitpid(t->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        aj_children_del(t->pid);
    }
    if (t->pidfd >= 0)
        (void)close(t->pidfd);
    /* Its sandbox last: the template was in its cgroup. */
    if (t->home)
        sb_discard(t->home, 0, NULL, NULL, NULL);
    free(t);
}
