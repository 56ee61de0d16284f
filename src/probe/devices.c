/* SPDX-License-Identifier: Apache-2.0 */
/* Device nodes under /dev, recognised by device number (a renamed node is
 * still found). Only block devices and the memory/kmsg nodes are opened,
 * read-only and closed at once; every other node is judged by access(2),
 * never opened (opening /dev/watchdog arms it). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "aj_util.h"
#include "probe.h"

#define DEV_MAX_DEPTH 3
#define DEV_MAX_ENTRIES 4096
#define DEV_MAX_OPENS 64

enum dev_group { G_BLOCK, G_MEM, G_KMSG, G_OTHER, G_COUNT };

static const struct dev_class {
    unsigned major;
    int minor; /* -1: any */
    int minor_max;
    const char *what;
    enum dev_group group;
} classes[] = {
    {1, 1, 1, "physical memory", G_MEM},
    {1, 2, 2, "kernel memory", G_MEM},
    {1, 4, 4, "I/O ports", G_MEM},
    {1, 11, 11, "kernel log", G_KMSG},
    {10, 232, 232, "KVM", G_OTHER},
    {10, 229, 229, "FUSE", G_OTHER},
    {10, 200, 200, "TUN/TAP", G_OTHER},
    {10, 238, 238, "vhost-net", G_OTHER},
    {10, 241, 241, "vhost-vsock", G_OTHER},
    {10, 237, 237, "loop-control", G_OTHER},
    {10, 236, 236, "device-mapper control", G_OTHER},
    {10, 234, 234, "btrfs-control", G_OTHER},
    {10, 223, 223, "uinput", G_OTHER},
    {10, 231, 231, "hibernation snapshot", G_OTHER},
    {10, 130, 130, "watchdog", G_OTHER},
    {4, 0, 63, "virtual console", G_OTHER}, /* TIOCSTI/TIOCLINUX on the host console */
    {5, 1, 1, "system console", G_OTHER},
    {202, -1, -1, "CPU MSR", G_OTHER},
    {226, -1, -1, "GPU (DRI)", G_OTHER},
};

struct group_state {
    struct pr_list l;
    unsigned present, usable;
};

/* Per device class: how many nodes, how many usable, the first one's
 * path (64 virtual consoles make one line, not 64). */
struct class_state {
    unsigned present, usable;
    char first[128];
};

struct walk {
    struct group_state g[G_COUNT];
    struct class_state k[AJ_ARRAY_SIZE(classes)];
    unsigned entries, opens;
};

static const struct dev_class *classify(dev_t rdev)
{
    unsigned ma = major(rdev), mi = minor(rdev);

    for (size_t i = 0; i < AJ_ARRAY_SIZE(classes); i++) {
        const struct dev_class *k = &classes[i];
        if (k->major == ma &&
            (k->minor < 0 || (mi >= (unsigned)k->minor && mi <= (unsigned)k->minor_max)))
            return k;
    }
    return NULL;
}

/* Read-only open and immediate close: the only test that also sees a
 * device cgroup or LSM refusal. */
static bool opens_readonly(struct walk *w, const char *path)
{
    int fd;

    if (w->opens++ >= DEV_MAX_OPENS)
        return false;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return false;
    (void)close(fd);
    return true;
}

static void note_block(struct group_state *g, const char *path, bool usable)
{
    g->present++;
    g->usable += usable;
    pr_list_add(&g->l, "%s (%s)", path, usable ? "accessible" : "refused");
}

/* Fold the per-class counts into their groups' lists. */
static void fold_classes(struct walk *w)
{
    for (size_t i = 0; i < AJ_ARRAY_SIZE(classes); i++) {
        const struct class_state *ks = &w->k[i];
        struct group_state *g = &w->g[classes[i].group];
        if (!ks->present)
            continue;
        g->present += ks->present;
        g->usable += ks->usable;
        if (ks->present == 1)
            pr_list_add(&g->l, "%s: %s (%s)", classes[i].what, ks->first,
                        ks->usable ? "accessible" : "refused");
        else
            pr_list_add(&g->l, "%s: %s and %u more (%u accessible)", classes[i].what, ks->first,
                        ks->present - 1, ks->usable);
    }
}

static void walk_dir(struct walk *w, const char *dir, int depth)
{
    struct dirent *de;
    DIR *d = opendir(dir);

    if (!d)
        return;
    while ((de = readdir(d)) && w->entries < DEV_MAX_ENTRIES) {
        char path[512];
        struct stat st;
        const struct dev_class *k;

        if (de->d_name[0] == '.' || strcmp(de->d_name, "fd") == 0)
            continue;
        w->entries++;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
            continue;
        if (lstat(path, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < DEV_MAX_DEPTH)
            walk_dir(w, path, depth + 1);
        else if (S_ISBLK(st.st_mode))
            note_block(&w->g[G_BLOCK], path, opens_readonly(w, path));
        else if (S_ISCHR(st.st_mode) && (k = classify(st.st_rdev))) {
            struct class_state *ks = &w->k[k - classes];
            bool usable = k->group == G_OTHER
                              ? faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS) == 0
                              : opens_readonly(w, path);
            if (!ks->present++)
                pr_copy(ks->first, sizeof(ks->first), path);
            ks->usable += usable;
        }
    }
    closedir(d);
}

static void report(struct pr_ctx *c, const struct group_state *gs, const char *id,
                   const char *title, enum pr_sev sev, const char *why)
{
    struct group_state g = *gs;

    if (!g.present)
        pr_add(c, id, PR_CAT_DEVICES, PR_ABSENT, sev, title, "none under /dev");
    else if (g.usable)
        pr_add(c, id, PR_CAT_DEVICES, PR_EXPOSED, sev, title, "%s: %s", why, pr_list_str(&g.l));
    else
        pr_add(c, id, PR_CAT_DEVICES, PR_BLOCKED, sev, title, "present but refused: %s",
               pr_list_str(&g.l));
}

void pr_check_devices(struct pr_ctx *c)
{
    struct walk w;
    struct stat st;

    memset(&w, 0, sizeof(w));
    if (stat("/dev", &st) < 0) {
        const char *ids[] = {"devices.block", "devices.mem", "devices.kmsg", "devices.other"};
        for (size_t i = 0; i < AJ_ARRAY_SIZE(ids); i++)
            pr_add(c, ids[i], PR_CAT_DEVICES, PR_ABSENT, PR_SEV_HIGH, "device nodes", "no /dev");
        return;
    }
    walk_dir(&w, "/dev", 1);
    fold_classes(&w);
    report(c, &w.g[G_BLOCK], "devices.block", "block devices", PR_SEV_CRITICAL,
           "a disk opened for reading exposes every file on it, past all permissions");
    report(c, &w.g[G_MEM], "devices.mem", "/dev/mem, /dev/kmem, /dev/port", PR_SEV_CRITICAL,
           "physical or kernel memory, or I/O ports");
    report(c, &w.g[G_KMSG], "devices.kmsg", "kernel log", PR_SEV_MEDIUM,
           "the kernel log leaks addresses and host activity");
    report(c, &w.g[G_OTHER], "devices.other", "other host devices", PR_SEV_MEDIUM,
           "reachable host device drivers");
}
