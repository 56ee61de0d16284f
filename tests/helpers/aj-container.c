/* SPDX-License-Identifier: Apache-2.0 */
/* Run a command confined the way `docker run` confines a container's
 * process, without Docker: the tests reproduce each container condition
 * agentjail meets on the host.
 *
 *   aj-container [--profile FILE] [--cap-drop ALL] [--cap-add CAP[,CAP...]]
 *                [--ro-proc-sys] [--user UID] -- CMD ARGS...
 *
 * --profile FILE   a seccomp profile in Docker's JSON format (Docker's
 *                  default, or deploy/docker/seccomp.json), compiled the way
 *                  moby's profiles/seccomp does it: includes/excludes by
 *                  capability, architecture and minimum kernel, the same
 *                  capability set as the "container" decides which rules
 *                  apply. Loaded without no_new_privs, as runc does.
 * --cap-drop ALL / --cap-add CAPS   start from Docker's default capability
 *                  set and change it as docker run does; the bounding set and
 *                  the permitted/effective/inheritable sets end up equal to it.
 * --ro-proc-sys    a mount namespace where /proc/sys is a read-only bind,
 *                  as runc's readonly paths make it.
 * --ro-cgroup      a mount namespace where /sys/fs/cgroup and everything
 *                  under it is read-only, as Docker mounts it.
 * --user UID       become UID:UID with no supplementary groups (docker run
 *                  --user): no capabilities left, as in Docker.
 *
 * Exit status 120 if the confinement cannot be set up; otherwise the
 * command replaces this process. */

#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <sched.h>
#include <linux/capability.h>
#include <seccomp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

static const struct {
    const char *name;
    int cap;
} caps_table[] = {
    {"CHOWN", CAP_CHOWN},
    {"DAC_OVERRIDE", CAP_DAC_OVERRIDE},
    {"DAC_READ_SEARCH", CAP_DAC_READ_SEARCH},
    {"FOWNER", CAP_FOWNER},
    {"FSETID", CAP_FSETID},
    {"KILL", CAP_KILL},
    {"SETGID", CAP_SETGID},
    {"SETUID", CAP_SETUID},
    {"SETPCAP", CAP_SETPCAP},
    {"LINUX_IMMUTABLE", CAP_LINUX_IMMUTABLE},
    {"NET_BIND_SERVICE", CAP_NET_BIND_SERVICE},
    {"NET_BROADCAST", CAP_NET_BROADCAST},
    {"NET_ADMIN", CAP_NET_ADMIN},
    {"NET_RAW", CAP_NET_RAW},
    {"IPC_LOCK", CAP_IPC_LOCK},
    {"IPC_OWNER", CAP_IPC_OWNER},
    {"SYS_MODULE", CAP_SYS_MODULE},
    {"SYS_RAWIO", CAP_SYS_RAWIO},
    {"SYS_CHROOT", CAP_SYS_CHROOT},
    {"SYS_PTRACE", CAP_SYS_PTRACE},
    {"SYS_PACCT", CAP_SYS_PACCT},
    {"SYS_ADMIN", CAP_SYS_ADMIN},
    {"SYS_BOOT", CAP_SYS_BOOT},
    {"SYS_NICE", CAP_SYS_NICE},
    {"SYS_RESOURCE", CAP_SYS_RESOURCE},
    {"SYS_TIME", CAP_SYS_TIME},
    {"SYS_TTY_CONFIG", CAP_SYS_TTY_CONFIG},
    {"MKNOD", CAP_MKNOD},
    {"LEASE", CAP_LEASE},
    {"AUDIT_WRITE", CAP_AUDIT_WRITE},
    {"AUDIT_CONTROL", CAP_AUDIT_CONTROL},
    {"SETFCAP", CAP_SETFCAP},
    {"MAC_OVERRIDE", CAP_MAC_OVERRIDE},
    {"MAC_ADMIN", CAP_MAC_ADMIN},
    {"SYSLOG", CAP_SYSLOG},
    {"WAKE_ALARM", CAP_WAKE_ALARM},
    {"BLOCK_SUSPEND", CAP_BLOCK_SUSPEND},
    {"AUDIT_READ", CAP_AUDIT_READ},
    {"PERFMON", 38},
    {"BPF", 39},
    {"CHECKPOINT_RESTORE", 40},
};

/* moby's oci/caps/defaults.go */
static const char *const docker_default_caps[] = {
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
    "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
};

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
{
    va_list ap;
    fputs("aj-container: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(120);
}

static int cap_by_name(const char *name)
{
    if (strncasecmp(name, "CAP_", 4) == 0)
        name += 4;
    for (size_t i = 0; i < sizeof(caps_table) / sizeof(caps_table[0]); i++)
        if (strcasecmp(caps_table[i].name, name) == 0)
            return caps_table[i].cap;
    die("unknown capability %s", name);
}

static uint64_t caps_set;

static bool has_cap_named(const char *name)
{
    int c = cap_by_name(name);
    return (caps_set >> c) & 1;
}

static bool in_strings(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach (arr, i, v)
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return true;
    return false;
}

static int kernel_at_least(const char *min)
{
    struct utsname u;
    unsigned a = 0, b = 0, x = 0, y = 0;
    if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &a, &b) != 2 || sscanf(min, "%u.%u", &x, &y) < 1)
        return 1;
    return a > x || (a == x && b >= y);
}

/* moby profiles/seccomp/seccomp_linux.go: a rule applies if no exclude
 * matches and every include does. */
static bool rule_applies(json_t *rule)
{
    json_t *inc = json_object_get(rule, "includes"), *exc = json_object_get(rule, "excludes"), *v;
    size_t i;

    if (exc) {
        json_t *arches = json_object_get(exc, "arches"), *caps = json_object_get(exc, "caps");
        if (arches && (in_strings(arches, "amd64")))
            return false;
        json_array_foreach (caps, i, v)
            if (has_cap_named(json_string_value(v)))
                return false;
        if ((v = json_object_get(exc, "minKernel")) && json_is_string(v) && kernel_at_least(json_string_value(v)))
            return false;
    }
    if (inc) {
        json_t *arches = json_object_get(inc, "arches"), *caps = json_object_get(inc, "caps");
        if (arches && json_array_size(arches) > 0 && !in_strings(arches, "amd64") && !in_strings(arches, "x86") &&
            !in_strings(arches, "x32"))
            return false;
        json_array_foreach (caps, i, v)
            if (!has_cap_named(json_string_value(v)))
                return false;
        if ((v = json_object_get(inc, "minKernel")) && json_is_string(v) && !kernel_at_least(json_string_value(v)))
            return false;
    }
    return true;
}

static uint32_t parse_action(json_t *rule, const char *key, const char *errkey, uint32_t dflt_errno)
{
    const char *a = json_string_value(json_object_get(rule, key));
    json_t *e = json_object_get(rule, errkey);
    uint32_t eno = e && json_is_integer(e) ? (uint32_t)json_integer_value(e) : dflt_errno;

    if (!a)
        die("rule without %s", key);
    if (!strcmp(a, "SCMP_ACT_ALLOW"))
        return SCMP_ACT_ALLOW;
    if (!strcmp(a, "SCMP_ACT_ERRNO"))
        return SCMP_ACT_ERRNO(eno);
    if (!strcmp(a, "SCMP_ACT_KILL") || !strcmp(a, "SCMP_ACT_KILL_THREAD"))
        return SCMP_ACT_KILL;
    if (!strcmp(a, "SCMP_ACT_KILL_PROCESS"))
        return SCMP_ACT_KILL_PROCESS;
    if (!strcmp(a, "SCMP_ACT_LOG"))
        return SCMP_ACT_LOG;
    if (!strcmp(a, "SCMP_ACT_TRACE"))
        return SCMP_ACT_TRACE(eno);
    die("unknown action %s", a);
}

static enum scmp_compare parse_op(const char *op)
{
    static const struct {
        const char *n;
        enum scmp_compare c;
    } ops[] = {{"SCMP_CMP_NE", SCMP_CMP_NE},         {"SCMP_CMP_LT", SCMP_CMP_LT}, {"SCMP_CMP_LE", SCMP_CMP_LE},
               {"SCMP_CMP_EQ", SCMP_CMP_EQ},         {"SCMP_CMP_GE", SCMP_CMP_GE}, {"SCMP_CMP_GT", SCMP_CMP_GT},
               {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (op && !strcmp(ops[i].n, op))
            return ops[i].c;
    die("unknown comparison %s", op ? op : "(none)");
}

static scmp_filter_ctx build_filter(const char *file)
{
    json_error_t jerr;
    json_t *root = json_load_file(file, 0, &jerr), *calls, *rule;
    scmp_filter_ctx ctx;
    uint32_t dflt_errno = EPERM, dflt;
    size_t i;

    if (!root)
        die("%s:%d: %s", file, jerr.line, jerr.text);
    if (json_is_integer(json_object_get(root, "defaultErrnoRet")))
        dflt_errno = (uint32_t)json_integer_value(json_object_get(root, "defaultErrnoRet"));
    dflt = parse_action(root, "defaultAction", "defaultErrnoRet", dflt_errno);
    ctx = seccomp_init(dflt);
    if (!ctx)
        die("seccomp_init");
    /* Docker's archMap for amd64: x86_64 with the x86 and x32 sub-ABIs. */
    if (seccomp_arch_add(ctx, SCMP_ARCH_X86) < 0 || seccomp_arch_add(ctx, SCMP_ARCH_X32) < 0)
        die("seccomp_arch_add");
    calls = json_object_get(root, "syscalls");
    json_array_foreach (calls, i, rule) {
        json_t *names = json_object_get(rule, "names"), *args = json_object_get(rule, "args"), *n;
        uint32_t act;
        struct scmp_arg_cmp cmp[6];
        unsigned ncmp = 0;
        size_t j;

        if (!rule_applies(rule))
            continue;
        act = parse_action(rule, "action", "errnoRet", EPERM);
        if (act == dflt)
            continue;
        json_array_foreach (args, j, n) {
            if (ncmp >= 6)
                die("too many argument conditions");
            cmp[ncmp++] = (struct scmp_arg_cmp){
                .arg = (unsigned)json_integer_value(json_object_get(n, "index")),
                .op = parse_op(json_string_value(json_object_get(n, "op"))),
                .datum_a = (scmp_datum_t)json_integer_value(json_object_get(n, "value")),
                .datum_b = (scmp_datum_t)json_integer_value(json_object_get(n, "valueTwo")),
            };
        }
        json_array_foreach (names, j, n) {
            int nr = seccomp_syscall_resolve_name(json_string_value(n));
            if (nr == __NR_SCMP_ERROR)
                continue; /* a name this libseccomp does not know: Docker skips it too */
            /* Errors ignored as Docker ignores them: a rule this
             * architecture cannot express (a multiplexed call) is left out. */
            (void)seccomp_rule_add_array(ctx, act, nr, ncmp, cmp);
        }
    }
    json_decref(root);
    return ctx;
}

static void add_caps(const char *list)
{
    char *dup = strdup(list), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(t, "ALL"))
            caps_set = ~0ULL;
        else
            caps_set |= 1ULL << cap_by_name(t);
    }
    free(dup);
}

static void drop_caps(const char *list)
{
    char *dup = strdup(list), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(t, "ALL"))
            caps_set = 0;
        else
            caps_set &= ~(1ULL << cap_by_name(t));
    }
    free(dup);
}

static void apply_bounding(void)
{
    for (int c = 0; c <= 63; c++) {
        if ((caps_set >> c) & 1)
            continue;
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
            die("drop capability %d from the bounding set: %s", c, strerror(errno));
    }
}

static void apply_caps(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];

    memset(d, 0, sizeof(d));
    if (syscall(SYS_capget, &h, d) < 0)
        die("capget: %s", strerror(errno));
    for (int k = 0; k < 2; k++) {
        uint32_t want = (uint32_t)(caps_set >> (32 * k));
        d[k].effective &= want;
        d[k].permitted &= want;
        d[k].inheritable = d[k].permitted;
    }
    if (syscall(SYS_capset, &h, d) < 0)
        die("capset: %s", strerror(errno));
}

int main(int argc, char **argv)
{
    const char *profile = NULL;
    bool ro_proc_sys = false, ro_cgroup = false;
    long user = -1;
    int i;
    scmp_filter_ctx ctx = NULL;

    for (size_t k = 0; k < sizeof(docker_default_caps) / sizeof(docker_default_caps[0]); k++)
        caps_set |= 1ULL << cap_by_name(docker_default_caps[k]);
    for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--profile") && i + 1 < argc)
            profile = argv[++i];
        else if (!strcmp(argv[i], "--cap-add") && i + 1 < argc)
            add_caps(argv[++i]);
        else if (!strcmp(argv[i], "--cap-drop") && i + 1 < argc)
            drop_caps(argv[++i]);
        else if (!strcmp(argv[i], "--ro-proc-sys"))
            ro_proc_sys = true;
        else if (!strcmp(argv[i], "--ro-cgroup"))
            ro_cgroup = true;
        else if (!strcmp(argv[i], "--user") && i + 1 < argc)
            user = strtol(argv[++i], NULL, 10);
        else
            die("usage: aj-container [--profile FILE] [--cap-drop ALL] [--cap-add CAPS] [--ro-proc-sys] "
                "[--user UID] -- CMD ARGS...");
    }
    if (i + 1 >= argc)
        die("no command");
    if ((ro_proc_sys || ro_cgroup) &&
        (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0))
        die("mount namespace: %s", strerror(errno));
    if (ro_cgroup) {
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
        if (syscall(SYS_mount_setattr, AT_FDCWD, "/sys/fs/cgroup", AT_RECURSIVE, &attr, sizeof(attr)) < 0)
            die("read-only /sys/fs/cgroup: %s", strerror(errno));
    }
    if (ro_proc_sys) {
        if (mount("/proc/sys", "/proc/sys", NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
            die("read-only /proc/sys: %s", strerror(errno));
    }
    if (profile)
        ctx = build_filter(profile);
    /* As runc without no_new_privs: the filter goes on while the process
     * still has CAP_SYS_ADMIN, then the capabilities are dropped. */
    if (ctx && geteuid() != 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        die("no_new_privs: %s", strerror(errno));
    if (ctx) {
        int r = seccomp_load(ctx);
        if (r < 0)
            die("seccomp_load: %s", strerror(-r));
        seccomp_release(ctx);
    }
    if (geteuid() == 0)
        apply_bounding();
    if (user >= 0) {
        if (setgroups(0, NULL) < 0 || setresgid((gid_t)user, (gid_t)user, (gid_t)user) < 0 ||
            setresuid((uid_t)user, (uid_t)user, (uid_t)user) < 0)
            die("become %ld: %s", user, strerror(errno));
    }
    if (geteuid() == 0)
        apply_caps();
    execvp(argv[i + 1], argv + i + 1);
    die("exec %s: %s", argv[i + 1], strerror(errno));
}
