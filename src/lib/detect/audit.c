/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_audit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "aj_bindreg.h"
#include "aj_hostpath.h"
#include "aj_missing.h"
#include "aj_util.h"

static const char *const type_names[AJ_EV_COUNT] = {
    "start", "exit", "escape_attempt", "canary", "net_denied", "net_allowed", "limit", "error",
    "events_suppressed", "net_cap", "secret_used", "secret_misdirected", "credentials_suspended",
};

const char *aj_event_type_name(enum aj_event_type t)
{
    return (unsigned)t < AJ_EV_COUNT ? type_names[t] : "unknown";
}

const char *aj_severity_name(enum aj_severity s)
{
    switch (s) {
    case AJ_SEV_INFO:
        return "info";
    case AJ_SEV_LOW:
        return "low";
    case AJ_SEV_MEDIUM:
        return "medium";
    case AJ_SEV_HIGH:
        return "high";
    case AJ_SEV_CRITICAL:
        return "critical";
    }
    return "unknown";
}

/* The events file is appended to as the caller (root, usually), also by
 * later runs: a sandbox that could write where it lies could swap it for a
 * symlink to a file of root's (a shell rc file) and have the next run's
 * events, which carry strings the payload chose, appended there. So: the
 * directory is resolved without following a symlink, refused inside a
 * writable bind of the run, and the file opened with O_NOFOLLOW (a symlink
 * fails with ELOOP) and O_NONBLOCK (a FIFO without a reader fails instead
 * of blocking); it must be a regular file with a single link (a hard link
 * to another file would be written through). */
static int open_events_file(const struct aj_policy *pol, const char *path, struct aj_error *err)
{
    char name[256];
    _cleanup_close_ int dfd = aj_hostpath_open_parent(path, "--events", name, sizeof(name), err);
    _cleanup_close_ int fd = -1;
    struct aj_open_how how = {
        .flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK,
        .mode = 0600,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    struct stat st;
    int r, fl;

    if (dfd < 0) {
        err->exit_hint = 2;
        return dfd;
    }
    if (pol) {
        r = aj_hostpath_check_outside_writable(pol, dfd, path, "--events", err);
        if (r < 0)
            return r;
    }
    fd = aj_sys_openat2(dfd, name, &how);
    if (fd < 0 && errno == ENOSYS) /* before 5.6: one component, O_NOFOLLOW is the same check */
        fd = openat(dfd, name, (int)how.flags, 0600);
    if (fd < 0) {
        int e = errno;
        r = aj_err(err, e, "open events file %s%s", path,
                   e == ELOOP ? " (it is a symlink: agentjail never appends through one; remove it)"
                   : e == ENXIO ? " (it is a FIFO)" : "");
        err->exit_hint = 2;
        return r;
    }
    if (fstat(fd, &st) < 0)
        return aj_err(err, errno, "stat events file %s", path);
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
        r = aj_err(err, 0, "events file %s is not a regular file with a single link (%s); refused", path,
                   S_ISREG(st.st_mode) ? "it has other hard links" : "not a regular file");
        err->exit_hint = 2;
        return r;
    }
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
        return aj_err(err, errno, "events file %s", path);
    return TAKE_FD(fd);
}

int aj_audit_open(struct aj_audit *a, const struct aj_policy *pol, const char *path, const char *sandbox_id,
                  const char *policy_sha256, struct aj_error *err)
{
    memset(a, 0, sizeof(*a));
    a->fd = -1;
    snprintf(a->sandbox_id, sizeof(a->sandbox_id), "%s", sandbox_id);
    snprintf(a->policy_sha256, sizeof(a->policy_sha256), "%s", policy_sha256);
    if (!path)
        return 0;
    if (strcmp(path, "-") == 0) {
        a->fd = STDERR_FILENO;
        return 0;
    }
    /* O_APPEND: one write per line, so concurrent runs sharing a file
     * interleave whole lines. 0600: events can carry paths and arguments. */
    a->fd = open_events_file(pol, path, err);
    if (a->fd < 0)
        return a->fd;
    a->own_fd = true;
    return 0;
}

void aj_audit_close(struct aj_audit *a)
{
    if (a->own_fd && a->fd >= 0)
        (void)close(a->fd);
    a->fd = -1;
    a->own_fd = false;
    json_decref(a->first_high);
    a->first_high = NULL;
}

json_t *aj_audit_event(const struct aj_audit *a, enum aj_event_type type, enum aj_severity sev)
{
    struct timespec ts;
    struct tm tm;
    char when[64];

    (void)clock_gettime(CLOCK_REALTIME, &ts);
    (void)gmtime_r(&ts.tv_sec, &tm);
    snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "time", when, "sandbox_id", a->sandbox_id, "policy_sha256",
                     a->policy_sha256, "type", aj_event_type_name(type), "severity", aj_severity_name(sev));
}

static const struct {
    const char *id, *name;
} techniques[] = {
    {"T1611", "Escape to Host"},
    {"T1552", "Unsecured Credentials"},
    {"T1613", "Container and Resource Discovery"},
    {"T1055", "Process Injection"},
    {"T1040", "Network Sniffing"},
    {"T1082", "System Information Discovery"},
    {"T1499", "Endpoint Denial of Service"},
    {"T1068", "Exploitation for Privilege Escalation"},
};

void aj_audit_technique(json_t *ev, const char *id)
{
    if (!ev || !id)
        return;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(techniques); i++)
        if (strcmp(techniques[i].id, id) == 0) {
            (void)json_object_set_new(ev, "technique", json_string(id));
            (void)json_object_set_new(ev, "technique_name", json_string(techniques[i].name));
            return;
        }
}

void aj_audit_set_budget(struct aj_audit *a, uint64_t budget)
{
    a->budget = budget;
    a->byte_cap = 0;
    if (budget && budget <= (UINT64_MAX - AJ_AUDIT_SUMMARY_BYTES - AJ_AUDIT_RESERVE_BYTES) / AJ_AUDIT_BYTES_PER_EVENT)
        a->byte_cap = budget * AJ_AUDIT_BYTES_PER_EVENT + AJ_AUDIT_SUMMARY_BYTES + AJ_AUDIT_RESERVE_BYTES;
}

/* What a run always reports, whatever the payload floods: its start, its
 * end, the limit that ended it, and the summaries themselves. */
static bool budgeted(enum aj_event_type type)
{
    return type != AJ_EV_START && type != AJ_EV_EXIT && type != AJ_EV_LIMIT && type != AJ_EV_EVENTS_SUPPRESSED &&
           type != AJ_EV_CREDENTIALS_SUSPENDED; /* once per run, and responders act on it */
}

bool aj_audit_over_budget(const struct aj_audit *a, enum aj_event_type type)
{
    return a->budget && budgeted(type) && a->budget_used >= a->budget;
}

void aj_audit_suppress(struct aj_audit *a, enum aj_event_type type)
{
    if ((unsigned)type >= AJ_EV_COUNT)
        return;
    a->counts[type]++;
    a->suppressed[type]++;
    a->suppressed_total++;
}

uint64_t aj_audit_suppressed_pending(const struct aj_audit *a)
{
    uint64_t n = 0;
    for (size_t i = 0; i < AJ_EV_COUNT; i++)
        n += a->suppressed[i];
    return n;
}

/* Past the byte cap nothing more is written, except the end of the run
 * (exit, final summary) in the reserve kept for it. */
static bool fits(const struct aj_audit *a, enum aj_event_type type, size_t n)
{
    uint64_t cap = a->byte_cap;

    if (!cap)
        return true;
    if (type != AJ_EV_EXIT && type != AJ_EV_EVENTS_SUPPRESSED)
        cap -= AJ_AUDIT_RESERVE_BYTES;
    return a->bytes <= cap && n <= cap - a->bytes;
}

bool aj_audit_emit(struct aj_audit *a, json_t *ev, enum aj_event_type type, enum aj_severity sev)
{
    bool first = false;
    char *line;

    if (!ev)
        return false;
    if (sev >= AJ_SEV_HIGH && !a->first_high) {
        a->first_high = json_incref(ev);
        first = true;
    }
    if (aj_audit_over_budget(a, type)) {
        aj_audit_suppress(a, type);
        json_decref(ev);
        return first;
    }
    if (a->fd >= 0) {
        line = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
        if (line) {
            size_t n = strlen(line);
            line[n] = '\n'; /* json_dumps leaves room for the NUL we replace */
            if (!fits(a, type, n + 1)) {
                free(line);
                aj_audit_suppress(a, type);
                json_decref(ev);
                return first;
            }
            (void)aj_write_all(a->fd, line, n + 1);
            a->bytes += n + 1;
            free(line);
        }
    }
    if ((unsigned)type < AJ_EV_COUNT)
        a->counts[type]++;
    if (budgeted(type))
        a->budget_used++;
    json_decref(ev);
    return first;
}
