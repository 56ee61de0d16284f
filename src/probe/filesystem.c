/* SPDX-License-Identifier: Apache-2.0 */
/* Host paths in the mount table, host knobs writable through /proc and
 * /sys (opened O_WRONLY and closed without a write), and descriptors
 * inherited from whoever started us. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "aj_util.h"
#include "probe.h"

/* ---- mountinfo ------------------------------------------------------- */

/* Filesystems that hold no host data of their own. A devtmpfs counts only
 * when mounted whole: single-node binds (/dev/null) are normal. */
static const char *const pseudo_fs[] = {
    "proc",     "sysfs",      "tmpfs",      "devpts",      "mqueue",  "cgroup",
    "cgroup2",  "securityfs", "debugfs",    "tracefs",     "bpf",     "pstore",
    "configfs", "fusectl",    "hugetlbfs",  "binfmt_misc", "autofs",  "nsfs",
    "efivarfs", "selinuxfs",  "rpc_pipefs", "ramfs",       "overlay", "shm",
};

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
    char *w = s;

    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

struct mnt {
    char *root, *point, *opts, *fstype, *source;
};

/* Split one mountinfo line in place; false if it is malformed. */
static bool parse_mount(char *line, struct mnt *m)
{
    char *f[6], *save = NULL, *rest;
    int n = 0;

    while (n < 6 && (f[n] = strtok_r(n ? NULL : line, " ", &save)))
        n++;
    if (n < 6)
        return false;
    m->root = f[3];
    m->point = f[4];
    m->opts = f[5];
    /* Optional fields end with a lone "-". */
    while ((rest = strtok_r(NULL, " ", &save)) && strcmp(rest, "-") != 0)
        ;
    m->fstype = strtok_r(NULL, " ", &save);
    m->source = strtok_r(NULL, " ", &save);
    if (!rest || !m->fstype || !m->source)
        return false;
    unescape(m->root);
    unescape(m->point);
    unescape(m->source);
    return true;
}

static bool is_pseudo(const struct mnt *m)
{
    if (strcmp(m->fstype, "devtmpfs") == 0)
        return strcmp(m->root, "/") != 0;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(pseudo_fs); i++)
        if (strcmp(m->fstype, pseudo_fs[i]) == 0)
            return true;
    return false;
}

static bool opt_rw(const char *opts)
{
    return strncmp(opts, "rw", 2) == 0 && (opts[2] == ',' || opts[2] == '\0');
}

static void check_host_mounts(struct pr_ctx *c)
{
    const char *id = "filesystem.host_mounts", *title = "host paths in the mount table";
    struct pr_list l = {0};
    unsigned total = 0, host = 0, writable = 0, whole = 0;
    char line[4096];
    FILE *f;

    if (!pr_wanted(c, id))
        return;
    f = fopen("/proc/self/mountinfo", "re");
    if (!f) {
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_UNKNOWN, PR_SEV_HIGH, title,
               "/proc/self/mountinfo unreadable: %s", pr_errname(errno));
        return;
    }
    /* Writable ones first: the detail is bounded (PR_DETAIL_MAX), and a
     * writable host path is what must never be cut off the list. */
    for (int pass = 0; pass < 2; pass++) {
        rewind(f);
        while (fgets(line, sizeof(line), f)) {
            struct mnt m;
            line[strcspn(line, "\n")] = '\0';
            if (!parse_mount(line, &m) || opt_rw(m.opts) != (pass == 0))
                continue;
            total++;
            if (is_pseudo(&m))
                continue;
            host++;
            writable += opt_rw(m.opts);
            whole += strcmp(m.root, "/") == 0;
            pr_list_add(&l, "%s:%s at %s (%s, %s)", m.source, m.root, m.point, m.fstype,
                        opt_rw(m.opts) ? "rw" : "ro");
        }
    }
    fclose(f);
    if (!host)
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_ABSENT, PR_SEV_HIGH, title,
               "%u mounts, all of the sandbox's own (tmpfs, proc, overlay, ...)", total);
    else if (writable || whole)
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_EXPOSED, PR_SEV_HIGH, title,
               "%u host mount(s), %u writable, %u of a whole filesystem: %s", host, writable, whole,
               pr_list_str(&l));
    else
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_INFO, PR_SEV_INFO, title,
               "%u read-only host subtree(s): %s", host, pr_list_str(&l));
}

/* ---- host knobs ------------------------------------------------------ */

/* Open for writing and close at once: the open alone tells whether a
 * write would be allowed (permission, read-only mount, masking). */
static int try_write_open(const char *path, bool *masked)
{
    struct stat st;
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);

    *masked = false;
    if (fd < 0)
        return -errno;
    /* A path masked with /dev/null opens fine and does nothing. */
    *masked = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
    (void)close(fd); /* nothing was written */
    return 0;
}

static const struct knob {
    const char *id, *path, *title, *why;
    enum pr_sev sev;
    bool show_value; /* not a secret, and it tells what a write would do */
} knobs[] = {
    {"filesystem.proc_sys", "/proc/sys/kernel/hostname", "writable /proc/sys",
     "sysctls are writable: kernel and network settings of the host (or its namespaces)",
     PR_SEV_HIGH, false},
    {"filesystem.core_pattern", "/proc/sys/kernel/core_pattern", "writable core_pattern",
     "a '|program' pattern would be run by the kernel as host root at the next crash",
     PR_SEV_CRITICAL, true},
    {"filesystem.sysrq_trigger", "/proc/sysrq-trigger", "writable sysrq-trigger",
     "one byte reboots, crashes or freezes the host", PR_SEV_HIGH, false},
};

static void check_knob(struct pr_ctx *c, const struct knob *k)
{
    char value[256], shown[128] = "";
    bool masked;
    int r;

    if (!pr_wanted(c, k->id))
        return;
    if (k->show_value && pr_read_text(k->path, value, sizeof(value)) > 0) {
        value[strcspn(value, "\n")] = '\0';
        snprintf(shown, sizeof(shown), "; current value: ");
        pr_printable(shown + strlen(shown), sizeof(shown) - strlen(shown), value, strlen(value));
    }
    r = try_write_open(k->path, &masked);
    if (r == 0 && !masked)
        pr_add(c, k->id, PR_CAT_FILESYSTEM, PR_EXPOSED, k->sev, k->title,
               "%s opened for writing (closed, nothing written): %s%s", k->path, k->why, shown);
    else if (r == 0)
        pr_add(c, k->id, PR_CAT_FILESYSTEM, PR_BLOCKED, k->sev, k->title,
               "%s is masked with /dev/null", k->path);
    else if (r == -ENOENT && !pr_have_proc())
        pr_add(c, k->id, PR_CAT_FILESYSTEM, PR_UNKNOWN, k->sev, k->title,
               "no /proc mounted (whether one could be mounted: syscalls.mount)");
    else if (r == -ENOENT)
        pr_add(c, k->id, PR_CAT_FILESYSTEM, PR_ABSENT, k->sev, k->title, "%s does not exist",
               k->path);
    else
        pr_add(c, k->id, PR_CAT_FILESYSTEM, PR_BLOCKED, k->sev, k->title,
               "open(%s, O_WRONLY): %s%s", k->path, pr_errname(-r), shown);
}

/* 1: opened for writing, 0: refused or masked (noted in l), -1: absent. */
static int probe_release_agent(const char *path, struct pr_list *l)
{
    bool masked;
    int r = try_write_open(path, &masked);

    if (r == -ENOENT || r == -ENOTDIR)
        return -1;
    if (r == 0 && !masked)
        return 1;
    pr_list_add(l, "%s: %s", path, r ? pr_errname(-r) : "masked");
    return 0;
}

/* release_agent runs as host root when a cgroup v1 hierarchy empties
 * (CVE-2022-0492 and the classic privileged-container escape). */
static void check_release_agent(struct pr_ctx *c)
{
    const char *id = "filesystem.release_agent", *title = "writable cgroup release_agent";
    const char *base = "/sys/fs/cgroup";
    struct pr_list seen = {0};
    char path[512];
    int r, found = 0;
    struct dirent *de;
    DIR *d;

    if (!pr_wanted(c, id))
        return;
    snprintf(path, sizeof(path), "%s/release_agent", base);
    r = probe_release_agent(path, &seen);
    found += r == 0;
    d = opendir(base);
    while (r < 1 && d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/release_agent", base, de->d_name);
        r = probe_release_agent(path, &seen);
        found += r == 0;
    }
    if (d)
        closedir(d);
    if (r == 1)
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_EXPOSED, PR_SEV_CRITICAL, title,
               "%s opened for writing (closed, nothing written): a program named there runs "
               "as host root when the cgroup empties",
               path);
    else if (found)
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_BLOCKED, PR_SEV_CRITICAL, title, "%s",
               pr_list_str(&seen));
    else
        pr_add(c, id, PR_CAT_FILESYSTEM, PR_ABSENT, PR_SEV_CRITICAL, title,
               "no cgroup v1 release_agent visible under %s", base);
}

void pr_check_filesystem(struct pr_ctx *c)
{
    check_host_mounts(c);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(knobs); i++)
        check_knob(c, &knobs[i]);
    check_release_agent(c);
}

/* ---- inherited descriptors ------------------------------------------- */

static const char *fd_kind(const struct stat *st)
{
    switch (st->st_mode & S_IFMT) {
    case S_IFDIR:
        return "directory";
    case S_IFREG:
        return "file";
    case S_IFSOCK:
        return "socket";
    case S_IFIFO:
        return "pipe";
    case S_IFCHR:
        return "char device";
    case S_IFBLK:
        return "block device";
    default:
        return "other";
    }
}

/* Is the file behind fd reachable under its own name from our root? A
 * descriptor to a file outside the sandbox root is not. */
static bool reachable(const char *target, const struct stat *st)
{
    struct stat by_name;

    return target[0] == '/' && stat(target, &by_name) == 0 && by_name.st_dev == st->st_dev &&
           by_name.st_ino == st->st_ino;
}

void pr_check_fds(struct pr_ctx *c)
{
    const char *id = "fds.leaked", *title = "inherited file descriptors";
    struct pr_list l = {0};
    unsigned danger = 0;
    char cwd[4096];

    if (pr_wanted(c, id)) {
        for (size_t i = 0; i < c->n_inherited_fds; i++) {
            int fd = c->inherited_fds[i];
            char link[64], target[512] = "?";
            struct stat st;
            ssize_t n;
            const char *verdict = "";

            if (fstat(fd, &st) < 0)
                continue; /* closed since (cannot happen: we open nothing below 3) */
            snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
            n = readlink(link, target, sizeof(target) - 1);
            if (n >= 0)
                target[n] = '\0';
            if (S_ISDIR(st.st_mode)) {
                verdict = ": openat(fd, \"..\") walks out of any root (CVE-2024-21626)";
                danger++;
            } else if (S_ISSOCK(st.st_mode)) {
                verdict = ": a channel to whoever holds the other end";
                danger++;
            } else if (S_ISREG(st.st_mode) && !reachable(target, &st)) {
                verdict = ": outside the sandbox root";
                danger++;
            } else if (S_ISCHR(st.st_mode) && isatty(fd)) {
                verdict = ": a terminal (TIOCSTI could type into it where allowed)";
            }
            pr_list_add(&l, "fd %d -> %s (%s)%s", fd, target, fd_kind(&st), verdict);
        }
        if (c->n_inherited_fds == 0)
            pr_add(c, id, PR_CAT_FILESYSTEM, PR_ABSENT, PR_SEV_HIGH, title,
                   "no descriptor above 2 was open at start");
        else
            pr_add(c, id, PR_CAT_FILESYSTEM, danger ? PR_EXPOSED : PR_INFO, PR_SEV_HIGH, title,
                   "%zu open at start%s: %s", c->n_inherited_fds,
                   c->inherited_fds_truncated ? " (list truncated)" : "", pr_list_str(&l));
    }
    if (pr_wanted(c, "fds.cwd")) {
        /* A working directory outside the root is the other half of
         * CVE-2024-21626: getcwd says "(unreachable)" or fails. */
        if (!getcwd(cwd, sizeof(cwd)))
            pr_add(c, "fds.cwd", PR_CAT_FILESYSTEM, errno == ENOENT ? PR_EXPOSED : PR_UNKNOWN,
                   PR_SEV_HIGH, "working directory",
                   "getcwd: %s (the working directory is outside the root or deleted)",
                   pr_errname(errno));
        else if (cwd[0] != '/')
            pr_add(c, "fds.cwd", PR_CAT_FILESYSTEM, PR_EXPOSED, PR_SEV_HIGH, "working directory",
                   "%.200s: outside the root", cwd);
        else
            pr_add(c, "fds.cwd", PR_CAT_FILESYSTEM, PR_ABSENT, PR_SEV_HIGH, "working directory",
                   "%.200s, inside the root", cwd);
    }
}
