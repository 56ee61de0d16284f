/* SPDX-License-Identifier: Apache-2.0 */
/* Network interfaces and routes (read from /proc and interface ioctls: no
 * packet is ever sent), and the host processes visible in /proc. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "aj_util.h"
#include "probe.h"

#define MAX_IFS 64

struct iface {
    char name[IFNAMSIZ];
    bool flags_known, up;
    char addr4[INET_ADDRSTRLEN];
    unsigned v6_global, v6_link;
};

static struct iface *find_or_add(struct iface *ifs, size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(ifs[i].name, name) == 0)
            return &ifs[i];
    if (*n == MAX_IFS)
        return NULL;
    memset(&ifs[*n], 0, sizeof(ifs[*n]));
    pr_copy(ifs[*n].name, sizeof(ifs[*n].name), name);
    return &ifs[(*n)++];
}

/* Names from /proc/net/dev, else from the kernel's index (netlink). */
static void list_names(struct iface *ifs, size_t *n)
{
    char buf[16384], *save = NULL;
    int line = 0;

    if (pr_read_text("/proc/net/dev", buf, sizeof(buf)) > 0) {
        for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
            char *colon = strchr(t, ':');
            if (++line <= 2 || !colon) /* two header lines */
                continue;
            *colon = '\0';
            (void)find_or_add(ifs, n, t + strspn(t, " "));
        }
        return;
    }
    struct if_nameindex *idx = if_nameindex();
    for (struct if_nameindex *p = idx; p && p->if_index; p++)
        (void)find_or_add(ifs, n, p->if_name);
    if (idx)
        if_freenameindex(idx);
}

/* IPv4 addresses (SIOCGIFCONF) and UP flags (SIOCGIFFLAGS) through a
 * datagram socket that is never bound, connected or written to. */
static void ioctl_details(struct iface *ifs, size_t *n)
{
    struct ifreq reqs[MAX_IFS];
    struct ifconf conf = {.ifc_len = sizeof(reqs), .ifc_req = reqs};
    _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (s < 0)
        return;
    memset(reqs, 0, sizeof(reqs));
    if (ioctl(s, SIOCGIFCONF, &conf) == 0) {
        for (size_t i = 0; i < (size_t)conf.ifc_len / sizeof(reqs[0]); i++) {
            struct iface *it = find_or_add(ifs, n, reqs[i].ifr_name);
            struct sockaddr_in *sin = (struct sockaddr_in *)&reqs[i].ifr_addr;
            if (it && sin->sin_family == AF_INET)
                inet_ntop(AF_INET, &sin->sin_addr, it->addr4, sizeof(it->addr4));
        }
    }
    for (size_t i = 0; i < *n; i++) {
        struct ifreq rq;
        memset(&rq, 0, sizeof(rq));
        pr_copy(rq.ifr_name, sizeof(rq.ifr_name), ifs[i].name);
        if (ioctl(s, SIOCGIFFLAGS, &rq) == 0) {
            ifs[i].flags_known = true;
            ifs[i].up = rq.ifr_flags & IFF_UP;
        }
    }
}

/* /proc/net/if_inet6: "addr ifindex prefixlen scope flags name". */
static void inet6_details(struct iface *ifs, size_t *n)
{
    char buf[16384], *save = NULL;

    if (pr_read_text("/proc/net/if_inet6", buf, sizeof(buf)) <= 0)
        return;
    for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
        char addr[40], name[IFNAMSIZ + 1];
        unsigned idx, plen, scope, flags;
        char *end;
        /* Fixed-width hex fields, parsed by hand (no sscanf). */
        if (strlen(t) < 33 || t[32] != ' ')
            continue;
        memcpy(addr, t, 32);
        addr[32] = '\0';
        idx = (unsigned)strtoul(t + 33, &end, 16);
        plen = (unsigned)strtoul(end, &end, 16);
        scope = (unsigned)strtoul(end, &end, 16);
        flags = (unsigned)strtoul(end, &end, 16);
        (void)idx, (void)plen, (void)flags;
        pr_copy(name, sizeof(name), end + strspn(end, " "));
        struct iface *it = find_or_add(ifs, n, name);
        if (!it)
            continue;
        if (scope == 0x20)
            it->v6_link++;
        else if (scope != 0x10) /* not loopback */
            it->v6_global++;
    }
}

static void check_interfaces(struct pr_ctx *c)
{
    const char *id = "network.interfaces", *title = "network interfaces";
    struct iface ifs[MAX_IFS];
    struct pr_list l = {0};
    size_t n = 0;
    unsigned live = 0, others = 0;

    list_names(ifs, &n);
    ioctl_details(ifs, &n);
    inet6_details(ifs, &n);
    if (n == 0) {
        pr_add(c, id, PR_CAT_NETWORK, PR_UNKNOWN, PR_SEV_HIGH, title,
               "no /proc/net/dev and no interface list from the kernel");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const struct iface *it = &ifs[i];
        bool addressed = it->addr4[0] || it->v6_global;
        if (strcmp(it->name, "lo") != 0) {
            others++;
            live += addressed && (it->up || !it->flags_known);
        }
        pr_list_add(&l, "%s %s%s%s%s", it->name,
                    !it->flags_known ? "(state ?)"
                    : it->up         ? "(up)"
                                     : "(down)",
                    it->addr4[0] ? " inet " : "", it->addr4,
                    it->v6_global ? " +inet6"
                    : it->v6_link ? " +inet6 link-local"
                                  : "");
    }
    if (live)
        pr_add(c, id, PR_CAT_NETWORK, PR_EXPOSED, PR_SEV_HIGH, title,
               "%s: a non-loopback interface is up with an address (nothing was sent)",
               pr_list_str(&l));
    else if (others)
        pr_add(c, id, PR_CAT_NETWORK, PR_INFO, PR_SEV_INFO, title,
               "%s: no non-loopback interface is up with an address", pr_list_str(&l));
    else
        pr_add(c, id, PR_CAT_NETWORK, PR_ABSENT, PR_SEV_HIGH, title, "%s: loopback only",
               pr_list_str(&l));
}

static void check_routes(struct pr_ctx *c)
{
    const char *id = "network.routes", *title = "default route";
    char buf[16384], *save = NULL;
    struct pr_list l = {0};
    bool v4 = pr_read_text("/proc/net/route", buf, sizeof(buf)) > 0;

    if (v4) {
        /* "Iface Destination Gateway Flags ...", hex fields. */
        for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
            char *f[4], *s2 = NULL;
            int k = 0;
            for (char *w = strtok_r(t, " \t", &s2); w && k < 4; w = strtok_r(NULL, " \t", &s2))
                f[k++] = w;
            if (k == 4 && strcmp(f[1], "00000000") == 0 && (strtoul(f[3], NULL, 16) & 1))
                pr_list_add(&l, "IPv4 default via %s", f[0]);
        }
    }
    save = NULL;
    bool v6 = pr_read_text("/proc/net/ipv6_route", buf, sizeof(buf)) > 0;
    if (v6) {
        /* "dst dstlen src srclen nexthop metric refcnt use flags iface". */
        for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
            char *f[10], *s2 = NULL;
            int k = 0;
            for (char *w = strtok_r(t, " \t", &s2); w && k < 10; w = strtok_r(NULL, " \t", &s2))
                f[k++] = w;
            if (k == 10 && strspn(f[0], "0") == 32 && strcmp(f[1], "00") == 0 &&
                strcmp(f[9], "lo") != 0 && (strtoul(f[8], NULL, 16) & 1))
                pr_list_add(&l, "IPv6 default via %s", f[9]);
        }
    }
    if (!v4 && !v6)
        pr_add(c, id, PR_CAT_NETWORK, PR_UNKNOWN, PR_SEV_MEDIUM, title,
               "/proc/net/route and /proc/net/ipv6_route unreadable");
    else if (l.n)
        pr_add(c, id, PR_CAT_NETWORK, PR_EXPOSED, PR_SEV_MEDIUM, title,
               "%s: other hosts, the internet and cloud metadata (169.254.169.254) may be "
               "reachable (not tested: the probe sends nothing)",
               pr_list_str(&l));
    else
        pr_add(c, id, PR_CAT_NETWORK, PR_ABSENT, PR_SEV_MEDIUM, title, "no default route");
}

void pr_check_network(struct pr_ctx *c)
{
    if (pr_wanted(c, "network.interfaces"))
        check_interfaces(c);
    if (pr_wanted(c, "network.routes"))
        check_routes(c);
}

/* ---- processes -------------------------------------------------------- */

/* Processes that only exist on a host (or a VM), never in a container of
 * ours. kthreadd is the clearest: kernel threads show only in the initial
 * pid namespace. */
static const char *const host_comms[] = {
    "kthreadd",        "systemd",       "init",  "sshd",        "dockerd",
    "containerd",      "kubelet",       "crio",  "cron",        "rsyslogd",
    "systemd-journal", "systemd-udevd", "snapd", "dbus-daemon",
};

static bool read_comm(const char *pid, char *buf, size_t cap)
{
    char path[300];

    snprintf(path, sizeof(path), "/proc/%s/comm", pid);
    if (pr_read_text(path, buf, cap) <= 0)
        return false;
    buf[strcspn(buf, "\n")] = '\0';
    return true;
}

void pr_check_processes(struct pr_ctx *c)
{
    const char *id = "processes.host_pids", *title = "host processes visible";
    struct pr_list seen = {0};
    char comm[64], pid1[64] = "?";
    unsigned count = 0, host = 0;
    struct dirent *de;
    DIR *d;

    if (!pr_wanted(c, id))
        return;
    if (!pr_have_proc() || !(d = opendir("/proc"))) {
        pr_add(c, id, PR_CAT_PROCESSES, PR_UNKNOWN, PR_SEV_MEDIUM, title, "no /proc mounted");
        return;
    }
    while ((de = readdir(d))) {
        unsigned long pid;
        if (!pr_parse_uint(de->d_name, &pid))
            continue;
        count++;
        if (count > 65536 || !read_comm(de->d_name, comm, sizeof(comm)))
            continue;
        if (pid == 1)
            pr_printable(pid1, sizeof(pid1), comm, strlen(comm));
        for (size_t i = 0; i < AJ_ARRAY_SIZE(host_comms); i++) {
            if (strcmp(comm, host_comms[i]) == 0) {
                host++;
                pr_list_add(&seen, "%s (pid %lu)", host_comms[i], pid);
                break;
            }
        }
    }
    closedir(d);
    if (host)
        pr_add(c, id, PR_CAT_PROCESSES, PR_EXPOSED, PR_SEV_MEDIUM, title,
               "%u processes visible, pid 1 is '%s'; host processes: %s", count, pid1,
               pr_list_str(&seen));
    else
        pr_add(c, id, PR_CAT_PROCESSES, PR_ABSENT, PR_SEV_MEDIUM, title,
               "%u processes visible, pid 1 is '%s'; no host process among them", count, pid1);
}
