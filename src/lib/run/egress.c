/* SPDX-License-Identifier: Apache-2.0 */
/* network.mode "proxy", the supervisor's side (see egress.h and
 * docs/network.md). The order, as sandbox.c calls it:
 *
 *   aj_egress_prepare     before init is cloned: the egress uid (root mode),
 *                         the proxy's unix socket in a private directory,
 *                         the secrets read and given placeholders, the proxy
 *                         started (fds 3..7 of the contract) and fed its
 *                         config, the real values wiped from our memory, its
 *                         CA taken; resolv.conf, the trust bundle and the
 *                         placeholder files into the mount plan
 *   (init is cloned: it copies our memory, which holds no secret by now
 *    but in the env: store, a MADV_WIPEONFORK mapping it gets as zeros)
 *   aj_egress_start_relay after the netns helper made the sandbox's network
 *                         namespace and, in it, the relay's listening socket
 *   aj_egress_read_events the event loop, while the run lives
 *   aj_egress_suspend     at the first high-severity escape or canary event
 *   aj_egress_stop        at the run's end: last events, both processes gone
 *   aj_egress_release     fds, lease, directory
 *
 * Nothing here ever prints, logs or puts in an error a secret's value. */
#include "egress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_seccomp.h"
#include "aj_util.h"
#include "children.h"
#include "egress_child.h"
#include "protocol.h"

#define EGRESS_START_TIMEOUT_MS 10000
#define EGRESS_STOP_GRACE_MS 300
#define EGRESS_SUSPEND_WAIT_MS 2000
#define EGRESS_DEATH_GRACE_MS 10
#define SECRET_MAX 16384
#define SYSTEM_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        (void)close(*fd);
        *fd = -1;
    }
}

void aj_egress_init(struct aj_egress *eg)
{
    memset(eg, 0, sizeof(*eg));
    eg->lease.lock_fd = -1;
    eg->null_fd = eg->proxy_pidfd = eg->ev_fd = eg->err_fd = eg->ctl_fd = -1;
    eg->helper_sock[0] = eg->helper_sock[1] = -1;
    eg->handoff[0] = eg->handoff[1] = -1;
    eg->dir_fd = -1;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(eg->cg_join); i++)
        eg->cg_join[i] = -1;
}

void aj_egress_expect_end(struct aj_egress *eg)
{
    if (eg)
        eg->stopping = true;
}

/* ---- the sandbox's environment ------------------------------------------------ */

static int env_add(struct aj_egress *eg, struct aj_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int env_add(struct aj_egress *eg, struct aj_error *err, const char *fmt, ...)
{
    char **v = realloc(eg->env, (eg->n_env + 2) * sizeof(char *));
    va_list ap;
    int n;

    if (!v)
        return aj_err(err, ENOMEM, "egress environment");
    eg->env = v;
    va_start(ap, fmt);
    n = vasprintf(&v[eg->n_env], fmt, ap);
    va_end(ap);
    if (n < 0)
        return aj_err(err, ENOMEM, "egress environment");
    v[++eg->n_env] = NULL;
    return 0;
}

/* The contract's variables: every spelling programs read, and Java's. */
static int env_proxy(struct aj_egress *eg, unsigned port, struct aj_error *err)
{
    static const char *const names[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                                        "all_proxy"};
    int r = 0;

    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(names); i++)
        r = env_add(eg, err, "%s=http://127.0.0.1:%u", names[i], port);
    if (r == 0)
        r = env_add(eg, err, "NO_PROXY=localhost,127.0.0.1,::1");
    if (r == 0)
        r = env_add(eg, err, "no_proxy=localhost,127.0.0.1,::1");
    if (r == 0)
        r = env_add(eg, err,
                    "JAVA_TOOL_OPTIONS=-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=%u -Dhttps.proxyHost=127.0.0.1 "
                    "-Dhttps.proxyPort=%u -Dhttp.nonProxyHosts=localhost|127.0.0.1",
                    port, port);
    return r;
}

static int env_ca(struct aj_egress *eg, struct aj_error *err)
{
    static const char *const names[] = {"SSL_CERT_FILE",       "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                        "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",     "PIP_CERT",
                                        "npm_config_cafile"};
    int r = 0;

    for (size_t i = 0; r == 0 && i < AJ_ARRAY_SIZE(names); i++)
        r = env_add(eg, err, "%s=%s", names[i], AJ_EGRESS_CA_BUNDLE);
    return r;
}

/* ---- secrets ---------------------------------------------------------------------- */

/* A resolved secret: the real value (wiped before the sandbox is cloned)
 * and its placeholder. */
struct resolved {
    char *value;
    size_t len;
    char placeholder[SECRET_MAX + 1];
};

static void wipe(struct resolved *rs, size_t n)
{
    for (size_t i = 0; rs && i < n; i++) {
        if (rs[i].value) {
            explicit_bzero(rs[i].value, rs[i].len);
            free(rs[i].value);
        }
        rs[i].value = NULL;
    }
    free(rs);
}

/* env:NAME sources, consumed: the first run that reads one takes the value
 * out of the process's environment (its bytes wiped in place, where
 * /proc/PID/environ shows them, then the variable unset) into a mapping of
 * its own that no child inherits (MADV_WIPEONFORK, Linux 4.14: the
 * sandbox's init, the proxy's and the relay's clones see zeros there) and
 * no core dump holds. Later runs of the same process (a server's) take it
 * from there; a new value set in the environment later replaces it. A
 * kernel without MADV_WIPEONFORK: the value stays in the environment, read
 * there each time, as before (init blanks its copy; docs/network.md). */
#define ENV_STORE_MAX 64
static struct env_store_entry {
    char *name;
    char *value; /* mmap'ed, map_len bytes, wiped on fork */
    size_t len, map_len;
} env_store[ENV_STORE_MAX];
static size_t n_env_store;
static pthread_mutex_t env_store_mu = PTHREAD_MUTEX_INITIALIZER;

static struct env_store_entry *env_store_find(const char *name)
{
    for (size_t i = 0; i < n_env_store; i++)
        if (strcmp(env_store[i].name, name) == 0)
            return &env_store[i];
    return NULL;
}

/* Whether [p, p+n) lies in the process's original environment block
 * (env_start and env_end, fields 50 and 51 of /proc/self/stat): what
 * /proc/PID/environ shows, on the initial stack, writable. A string set
 * later (setenv's heap copy, a putenv'd string that may be read-only)
 * is only unset, never written. */
static bool in_env_block(const char *p, size_t n)
{
    char buf[1024];
    const char *q;
    unsigned long start = 0, end = 0;
    int field = 2;

    if (aj_read_small_file("/proc/self/stat", buf, sizeof(buf)) <= 0 || !(q = strrchr(buf, ')')))
        return false;
    for (q++; *q && field < 51; q++) {
        if (*q != ' ')
            continue;
        field++;
        if (field == 50)
            start = strtoul(q + 1, NULL, 10);
        else if (field == 51)
            end = strtoul(q + 1, NULL, 10);
    }
    return start && end > start && (uintptr_t)p >= start && (uintptr_t)p + n <= end;
}

/* Move the environment's value of name (v, n bytes) into the store. 1:
 * stored and consumed; 0: this kernel cannot keep it from children (the
 * environment keeps it); <0: no memory. Under env_store_mu. */
static int env_store_take(const char *name, char *v, size_t n)
{
    struct env_store_entry *e = env_store_find(name);
    long page = sysconf(_SC_PAGESIZE);
    size_t map_len = (n + 1 + (size_t)page - 1) / (size_t)page * (size_t)page;
    char *m;

    if (!e && n_env_store >= ENV_STORE_MAX)
        return 0;
    m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -ENOMEM;
    if (madvise(m, map_len, MADV_WIPEONFORK) < 0) {
        (void)munmap(m, map_len);
        return 0;
    }
    (void)madvise(m, map_len, MADV_DONTDUMP); /* best effort: a core is not written by default either */
    (void)mlock(m, map_len);                  /* best effort: RLIMIT_MEMLOCK may be small */
    memcpy(m, v, n);
    m[n] = '\0';
    if (e) {
        explicit_bzero(e->value, e->map_len);
        (void)munmap(e->value, e->map_len);
    } else {
        char *nm = strdup(name);
        if (!nm) {
            explicit_bzero(m, map_len);
            (void)munmap(m, map_len);
            return -ENOMEM;
        }
        e = &env_store[n_env_store++];
        e->name = nm;
    }
    e->value = m;
    e->len = n;
    e->map_len = map_len;
    /* Consumed: the bytes first where /proc/PID/environ shows them (the
     * original block: unset or not, it still holds them), then the
     * variable. */
    if (in_env_block(v, n))
        explicit_bzero(v, n);
    (void)unsetenv(name);
    return 1;
}

/* The value of env:NAME into a malloc'ed copy (the caller wipes it). */
static int read_env_secret(const struct aj_secret *s, const char *name, char **ret, size_t *ret_len,
                           struct aj_error *err)
{
    struct env_store_entry *e;
    const char *v;
    char *buf = NULL;
    size_t n = 0;
    int r = 0;

    *ret = NULL;
    *ret_len = 0;
    pthread_mutex_lock(&env_store_mu);
    v = getenv(name);
    if (v && *v) {
        n = strlen(v);
        if (n > SECRET_MAX) {
            r = aj_err(err, 0, "secret '%s': longer than %d bytes", s->id, SECRET_MAX);
        } else {
            buf = malloc(n + 1);
            if (!buf)
                r = aj_err(err, ENOMEM, "secret");
            else
                memcpy(buf, v, n + 1);
        }
        if (r == 0 && env_store_take(name, (char *)(uintptr_t)v, n) < 0)
            r = aj_err(err, ENOMEM, "secret");
    } else if ((e = env_store_find(name))) {
        n = e->len;
        buf = malloc(n + 1);
        if (!buf)
            r = aj_err(err, ENOMEM, "secret");
        else
            memcpy(buf, e->value, n + 1);
    } else {
        r = aj_err(err, 0, "secret '%s': %s is not set in agentjail's environment", s->id, name);
    }
    pthread_mutex_unlock(&env_store_mu);
    if (r < 0) {
        if (buf) {
            explicit_bzero(buf, n);
            free(buf);
        }
        return r;
    }
    *ret = buf;
    *ret_len = n;
    return 0;
}

/* The real value, from the host: env:NAME (agentjail's environment,
 * consumed: see env_store) or file:/PATH (one trailing newline dropped).
 * Never echoed in an error. */
static int read_secret(const struct aj_secret *s, struct resolved *out, struct aj_error *err)
{
    char *buf;
    size_t n = 0;

    if (strncmp(s->value_from, "env:", 4) == 0) {
        int r = read_env_secret(s, s->value_from + 4, &buf, &n, err);
        if (r < 0)
            return r;
        if (!buf) /* never with r == 0; said for the analyzer */
            return aj_err(err, ENOMEM, "secret");
    } else {
        const char *path = s->value_from + 5;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        struct stat st;
        ssize_t k;
        if (fd < 0)
            return aj_err(err, errno, "secret '%s': %s", s->id, path);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            (void)close(fd);
            return aj_err(err, 0, "secret '%s': %s is not a regular file", s->id, path);
        }
        buf = malloc(SECRET_MAX + 2);
        if (!buf) {
            (void)close(fd);
            return aj_err(err, ENOMEM, "secret");
        }
        while ((k = read(fd, buf + n, SECRET_MAX + 1 - n)) > 0 && n + (size_t)k <= SECRET_MAX)
            n += (size_t)k;
        (void)close(fd);
        if (k > 0 || k < 0) {
            explicit_bzero(buf, SECRET_MAX + 2);
            free(buf);
            return k < 0 ? aj_err(err, errno, "secret '%s': read %s", s->id, path)
                         : aj_err(err, 0, "secret '%s': %s is longer than %d bytes", s->id, path, SECRET_MAX);
        }
        if (n > 0 && buf[n - 1] == '\n')
            n--;
        if (n > 0 && buf[n - 1] == '\r')
            n--;
        buf[n] = '\0';
    }
    /* It goes into an HTTP header: nothing that could end one. */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) {
            explicit_bzero(buf, n);
            free(buf);
            return aj_err(err, 0, "secret '%s': the value holds a control character (a line break?); it must be "
                          "one header value", s->id);
        }
    if (n == 0) {
        free(buf);
        return aj_err(err, 0, "secret '%s': the value from %s is empty", s->id, s->value_from);
    }
    out->value = buf;
    out->len = n;
    return 0;
}

/* A placeholder of the same shape: the known prefix kept (scanners and
 * client libraries check it), the rest random letters and digits, the same
 * length. Never equal to the value, and never containing it. */
static int make_placeholder(struct resolved *rs, struct aj_error *err)
{
    static const char *const prefixes[] = {"github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "sk-ant-api03-",
                                           "sk-ant-", "sk-proj-", "sk-", "xoxb-", "xoxp-", "xoxa-", "xapp-",
                                           "glpat-", "AKIA", "ASIA", "hf_", "npm_", "pypi-"};
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t keep = 0;
    unsigned char rnd[SECRET_MAX];

    for (size_t i = 0; i < AJ_ARRAY_SIZE(prefixes); i++) {
        size_t k = strlen(prefixes[i]);
        if (rs->len > k + 3 && strncmp(rs->value, prefixes[i], k) == 0) {
            keep = k;
            break;
        }
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        if (getrandom(rnd, rs->len - keep, 0) != (ssize_t)(rs->len - keep))
            return aj_err(err, errno, "random placeholder");
        memcpy(rs->placeholder, rs->value, keep);
        for (size_t i = keep; i < rs->len; i++) {
            /* AWS key ids are upper case and digits after their prefix. */
            size_t span = keep && (rs->value[0] == 'A') ? 36 : sizeof(alnum) - 1;
            char c = span == 36 ? "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rnd[i - keep] % 36]
                                : alnum[rnd[i - keep] % span];
            rs->placeholder[i] = c;
        }
        rs->placeholder[rs->len] = '\0';
        /* Short values could collide by chance: make sure. */
        if (strcmp(rs->placeholder, rs->value) != 0 && !strstr(rs->placeholder, rs->value + keep)) {
            explicit_bzero(rnd, sizeof(rnd));
            return 0;
        }
    }
    return aj_err(err, 0, "no placeholder unlike the secret's value could be made (a value this short cannot be "
                  "brokered)");
}

/* ---- the proxy ------------------------------------------------------------------- */

static int locate_binary(char *buf, size_t size, struct aj_error *err)
{
    int r = aj_locate_companion("AGENTJAIL_EGRESS", "agentjail-egress", X_OK, buf, size, err);
    return r < 0 ? aj_err_prefix(err, r, "network.mode \"proxy\" needs") : 0;
}

/* ---- the socket directory ---------------------------------------------------------- */

#define EGRESS_TMP "/tmp"
#define EGRESS_DIR_PREFIX "agentjail-egress-"

/* Whether the supervisor named in a socket directory's name
 * (EGRESS_DIR_PREFIX "<pid>.<starttime>.ns<pid namespace>-XXXXXX") may
 * still live. A name of another pid namespace (or of an older agentjail)
 * cannot be judged from here: left alone, as for run cgroups. */
static bool dir_owner_alive(const char *name)
{
    const char *p = name + strlen(EGRESS_DIR_PREFIX);
    unsigned long long want, ns, st;
    char *end;
    long pid;
    int r;

    pid = strtol(p, &end, 10);
    if (end == p || *end != '.' || pid <= 0)
        return true;
    p = end + 1;
    want = strtoull(p, &end, 10);
    if (end == p || strncmp(end, ".ns", 3) != 0)
        return true;
    p = end + 3;
    ns = strtoull(p, &end, 10);
    if (end == p || *end != '-' || ns == 0 || ns != aj_own_pidns())
        return true;
    r = aj_proc_starttime((pid_t)pid, &st);
    if (r == -ESRCH)
        return false;
    return r < 0 || st == want;
}

/* The socket directories of runs whose supervisor was killed (SIGKILL
 * leaves no chance to clean up): removed at the next proxy-mode start.
 * Only our own (same euid), only when the owner named in the name is
 * gone, and only when no process holds its lock any more (the owner
 * holds it for the run's life; a copy of the fd in a child still dying
 * keeps it too): two supervisors never remove a live run's directory,
 * whatever the pids say. Entries are removed through the opened fd
 * (O_NOFOLLOW), never by a path a process could redirect. */
static void reap_stale_dirs(void)
{
    /* At most once a second per process: a server starting many proxy
     * runs reads /tmp once, not once a run (a leftover waits a second). */
    static uint64_t last_scan;
    uint64_t now = aj_now_ms(), last = __atomic_load_n(&last_scan, __ATOMIC_RELAXED);
    DIR *d;
    struct dirent *de;
    uid_t me = geteuid();

    if (last && now - last < 1000)
        return;
    if (!__atomic_compare_exchange_n(&last_scan, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return; /* another thread scans now */
    d = opendir(EGRESS_TMP);
    if (!d)
        return;
    while ((de = readdir(d))) {
        struct stat st;
        int fd;
        if (strncmp(de->d_name, EGRESS_DIR_PREFIX, strlen(EGRESS_DIR_PREFIX)) != 0 ||
            (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) || dir_owner_alive(de->d_name))
            continue;
        fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0 && st.st_uid == me && flock(fd, LOCK_EX | LOCK_NB) == 0) {
            (void)unlinkat(fd, "proxy.sock", 0);
            (void)unlinkat(fd, "root", AT_REMOVEDIR);
            /* By name in the sticky /tmp: a directory of our euid, which no
             * one else can rename or replace. */
            (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        }
        (void)close(fd);
    }
    (void)closedir(d);
}

/* The proxy's unix socket, listening, in a directory of its own: only the
 * relay and root can connect, never another user of the host. Root mode:
 * the directory is root's, mode 0710, group the egress gid (the relay
 * traverses it, nothing of the egress uid can add, rename or replace an
 * entry in it: the supervisor's cleanup as root never meets a link the
 * proxy planted); rootless: the caller's, 0700. */
static int make_socket(struct aj_egress *eg, struct aj_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    unsigned long long start = 0;
    struct stat st;
    int fd, r;

    r = aj_proc_starttime(getpid(), &start);
    if (r < 0)
        return aj_err(err, -r, "read our own start time");
    if (snprintf(eg->dir, sizeof(eg->dir), EGRESS_TMP "/" EGRESS_DIR_PREFIX "%d.%llu.ns%llu-XXXXXX", (int)getpid(),
                 start, aj_own_pidns()) >= (int)sizeof(eg->dir)) {
        eg->dir[0] = '\0';
        return aj_err(err, ENAMETOOLONG, "egress socket directory");
    }
    if (!mkdtemp(eg->dir)) {
        eg->dir[0] = '\0';
        return aj_err(err, errno, "egress socket directory");
    }
    eg->dir_fd = open(eg->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (eg->dir_fd < 0)
        return aj_err(err, errno, "open %s", eg->dir);
    /* Held for the run's life: reap_stale_dirs of another run skips it. */
    if (flock(eg->dir_fd, LOCK_EX | LOCK_NB) < 0)
        return aj_err(err, errno, "lock %s", eg->dir);
    if (fstat(eg->dir_fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return aj_err(err, EPERM, "%s is not the directory we made", eg->dir);
    if (!eg->rootless && (fchown(eg->dir_fd, (uid_t)-1, eg->gid) < 0 || fchmod(eg->dir_fd, 0710) < 0))
        return aj_err(err, errno, "chown %s", eg->dir);
    if (snprintf(eg->sock_path, sizeof(eg->sock_path), "%.*s/proxy.sock", (int)(sizeof(eg->sock_path) - 12),
                 eg->dir) >= (int)sizeof(eg->sock_path) ||
        strlen(eg->sock_path) >= sizeof(sa.sun_path))
        return aj_err(err, ENAMETOOLONG, "egress socket in %s", eg->dir);
    memcpy(sa.sun_path, eg->sock_path, strlen(eg->sock_path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return aj_err(err, errno, "egress socket");
    /* chmod by name is sound here: only we can write the directory. The
     * socket's own mode lets the relay's uid connect. */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(eg->sock_path, 0666) < 0 || listen(fd, 512) < 0) {
        int e = errno;
        (void)close(fd);
        return aj_err(err, e, "egress socket %s", eg->sock_path);
    }
    return fd;
}

static json_t *strv_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* A cap as the proxy takes it: 0 is "none" to both. */
static json_int_t cap(uint64_t v, uint64_t div)
{
    return v == 0 ? 0 : (json_int_t)(v / div ? v / div : 1);
}

/* The config the proxy reads on fd 3. The values are in it: the text goes
 * into a buffer of ours (json_dumpb writes straight into it, no growing
 * copies) and every copy is wiped once written. */
/* How long the run CA is valid: the run's timeout plus a margin (a day
 * without a timeout), plus, for a parked sandbox, how long it may wait in
 * its pool first. */
static uint64_t ca_validity_s(const struct aj_egress *eg, const struct aj_policy *pol)
{
    return (pol->timeout_ms ? pol->timeout_ms / 1000 + 600 : 86400) + eg->park_s;
}

static int write_config(const struct aj_egress *eg, int fd, const struct aj_policy *pol, const char *run_id,
                        struct resolved *rs, struct aj_error *err)
{
    json_t *root, *secrets = json_array(), *caps;
    size_t need;
    char *buf = NULL;
    int r = 0;

    caps = json_pack("{s:I, s:I, s:I, s:I, s:I}", "max_connections", (json_int_t)pol->net_max_connections,
                     "max_bytes_out", cap(pol->net_max_bytes_out, 1), "max_bytes_in", cap(pol->net_max_bytes_in, 1),
                     "max_connection_seconds", cap(pol->net_max_connection_ms, 1000), "max_requests_per_second",
                     (json_int_t)pol->net_max_requests_per_second);
    for (size_t i = 0; secrets && i < pol->n_secrets; i++) {
        const struct aj_secret *s = &pol->secrets[i];
        json_t *o = json_pack("{s:s, s:o, s:s, s:s, s:s%, s:s}", "id", s->id, "hosts", strv_json(s->hosts, s->n_hosts),
                              "header", s->header ? s->header : AJ_SECRET_DEFAULT_HEADER, "format",
                              s->format ? s->format : AJ_SECRET_DEFAULT_FORMAT, "value", rs[i].value, rs[i].len,
                              "placeholder", rs[i].placeholder);
        if (!o || json_array_append_new(secrets, o) < 0) {
            json_decref(secrets);
            secrets = NULL;
        }
    }
    root = json_pack("{s:s, s:o, s:o, s:o, s:s?, s:o, s:o, s:I}", "run_id", run_id, "allow",
                     strv_json(pol->net_allow, pol->n_net_allow), "deny", strv_json(pol->net_deny, pol->n_net_deny),
                     "allow_ranges", strv_json(pol->net_allow_ranges, pol->n_net_allow_ranges), "resolver",
                     pol->net_resolver, "caps", caps, "secrets", secrets,
                     "ca_validity_seconds", (json_int_t)ca_validity_s(eg, pol));
    if (!root)
        return aj_err(err, ENOMEM, "egress config");
    {
        /* Tests only: a CA the proxy also trusts for upstreams (the test's
         * HTTPS servers); the host's trust store is not the tests' to edit. */
        const char *ca = getenv("AGENTJAIL_TEST_EGRESS_UPSTREAM_CA");
        if (ca && *ca) {
            char pem[65536];
            int n = aj_read_small_file(ca, pem, sizeof(pem));
            if (n <= 0) {
                json_decref(root);
                return aj_err(err, n < 0 ? -n : EINVAL, "AGENTJAIL_TEST_EGRESS_UPSTREAM_CA %s", ca);
            }
            (void)json_object_set_new(root, "upstream_ca_pem", json_string(pem));
        }
    }
    need = json_dumpb(root, NULL, 0, JSON_COMPACT);
    buf = need ? malloc(need) : NULL;
    if (!buf || json_dumpb(root, buf, need, JSON_COMPACT) != need)
        r = aj_err(err, ENOMEM, "egress config");
    else if (aj_write_all(fd, buf, need) < 0 || aj_write_all(fd, "\n", 1) < 0)
        r = aj_err(err, errno, "hand the egress proxy its config");
    if (buf) {
        explicit_bzero(buf, need);
        free(buf);
    }
    /* jansson's own copies of the values, before it frees them. */
    for (size_t i = 0; i < json_array_size(json_object_get(root, "secrets")); i++) {
        json_t *v = json_object_get(json_array_get(json_object_get(root, "secrets"), i), "value");
        if (json_is_string(v))
            explicit_bzero((char *)(uintptr_t)json_string_value(v), json_string_length(v));
    }
    json_decref(root);
    return r;
}

/* The proxy's stderr, what is there now (a setup failure's message). */
static void take_stderr(struct aj_egress *eg)
{
    char buf[1024];
    ssize_t n;

    while (eg->err_fd >= 0 && (n = read(eg->err_fd, buf, sizeof(buf) - 1)) > 0) {
        buf[n] = '\0';
        for (char *p = buf; *p; p++)
            if (*p == '\n' && p[1] == '\0')
                *p = '\0';
            else if ((unsigned char)*p < 0x20)
                *p = ' ';
        if (buf[0])
            (void)snprintf(eg->stderr_tail, sizeof(eg->stderr_tail), "%.250s", buf);
    }
}

static int proxy_died(struct aj_egress *eg, struct aj_error *err)
{
    int st = 0;

    while (waitpid(eg->proxy_pid, &st, 0) < 0 && errno == EINTR)
        ;
    take_stderr(eg);
    aj_children_del(eg->proxy_pid);
    eg->proxy_pid = 0;
    return aj_err(err, 0, "the egress proxy exited at start (%s %d)%s%s", WIFEXITED(st) ? "status" : "signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), eg->stderr_tail[0] ? ": " : "", eg->stderr_tail);
}

/* The CA certificate the proxy writes on fd 7 before it accepts anything
 * (empty without secrets), bounded in time; the proxy's death meanwhile is
 * a setup error with its own words. */
static int read_ca(struct aj_egress *eg, int ca_fd, char **ret, struct aj_error *err)
{
    uint64_t deadline = aj_now_ms() + EGRESS_START_TIMEOUT_MS;
    size_t len = 0, cap_ = 0;
    char *pem = NULL;

    *ret = NULL;
    for (;;) {
        struct pollfd p[2] = {{.fd = ca_fd, .events = POLLIN}, {.fd = eg->proxy_pidfd, .events = POLLIN}};
        uint64_t now = aj_now_ms();
        int n;
        if (now >= deadline) {
            free(pem);
            return aj_err(err, ETIMEDOUT, "the egress proxy did not start within %d s", EGRESS_START_TIMEOUT_MS / 1000);
        }
        n = poll(p, eg->proxy_pidfd >= 0 ? 2 : 1, (int)(deadline - now));
        if (n < 0 && errno != EINTR) {
            free(pem);
            return aj_err(err, errno, "wait for the egress proxy");
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t k;
            if (len + 4096 + 1 > cap_) {
                char *b = cap_ > (1U << 20) ? NULL : realloc(pem, cap_ + 65536);
                if (!b) {
                    free(pem);
                    return aj_err(err, ENOMEM, "the egress proxy's CA certificate");
                }
                pem = b;
                cap_ += 65536;
            }
            k = read(ca_fd, pem + len, cap_ - len - 1);
            if (k > 0) {
                len += (size_t)k;
                continue;
            }
            if (k == 0)
                break;
            if (errno != EINTR && errno != EAGAIN) {
                free(pem);
                return aj_err(err, errno, "read the egress proxy's CA certificate");
            }
        } else if (p[1].revents & POLLIN) {
            free(pem);
            return proxy_died(eg, err);
        }
    }
    /* EOF on fd 7 is also what a proxy that dies at start shows, a moment
     * before it is a zombie (the kernel releases a dying task's files in
     * its own order, then reports it). A short grace tells the two apart in
     * practice; a later death is the loop's (an error event, requests fail). */
    {
        struct pollfd e[2] = {{.fd = eg->ev_fd, .events = POLLIN}, {.fd = eg->proxy_pidfd, .events = POLLIN}};
        if (poll(e, eg->proxy_pidfd >= 0 ? 2 : 1, EGRESS_DEATH_GRACE_MS) > 0 &&
            ((e[0].revents & POLLHUP) || (e[1].revents & POLLIN))) {
            free(pem);
            return proxy_died(eg, err);
        }
    }
    if (pem)
        pem[len] = '\0';
    *ret = pem;
    return 0;
}

/* The proxy's filesystem view (see proxy_fs_view in egress_child.c): what
 * its binary, its libraries, OpenSSL and its resolver read, nothing else. */
static int plan_view(struct aj_egress *eg, struct aj_egress_child *ec, const char *real_path, struct aj_error *err)
{
    static const char *const sys[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
    static const struct {
        const char *path;
        bool file, dev;
    } more[] = {
        {"/etc/ssl", false, false},         {"/etc/ca-certificates", false, false},
        {"/etc/resolv.conf", true, false},  {"/etc/ld.so.cache", true, false},
        {"/etc/nsswitch.conf", true, false}, {"/etc/hosts", true, false},
        {"/etc/gai.conf", true, false},     {"/dev/null", true, true},
        {"/dev/urandom", true, true},       {"/dev/random", true, true},
        {"/proc", false, false},
    };
    char dir[AJ_EGRESS_VIEW_PATH], *slash;
    struct stat st;

#define VIEW_ADD(...)                                                                              \
    do {                                                                                           \
        if (ec->n_view >= AJ_EGRESS_VIEW_MAX)                                                      \
            return aj_err(err, E2BIG, "the proxy's filesystem view");                             \
        ec->view[ec->n_view++] = (struct aj_egress_view_entry){__VA_ARGS__};                       \
    } while (0)
    (void)snprintf(ec->view_root, sizeof(ec->view_root), "%s/root", eg->dir);
    if (mkdirat(eg->dir_fd, "root", 0755) < 0)
        return aj_err(err, errno, "mkdir %s", ec->view_root);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(sys); i++) {
        char link[AJ_EGRESS_VIEW_PATH];
        ssize_t n;
        if (lstat(sys[i], &st) < 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            n = readlink(sys[i], link, sizeof(link) - 1);
            if (n <= 0)
                continue;
            link[n] = '\0';
            VIEW_ADD(.file = false);
            (void)snprintf(ec->view[ec->n_view - 1].path, AJ_EGRESS_VIEW_PATH, "%s", sys[i]);
            (void)snprintf(ec->view[ec->n_view - 1].link, AJ_EGRESS_VIEW_PATH, "%s", link);
        } else if (S_ISDIR(st.st_mode)) {
            VIEW_ADD(.file = false);
            (void)snprintf(ec->view[ec->n_view - 1].path, AJ_EGRESS_VIEW_PATH, "%s", sys[i]);
        }
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(more); i++) {
        if (stat(more[i].path, &st) < 0 || (more[i].file ? S_ISDIR(st.st_mode) : !S_ISDIR(st.st_mode)))
            continue;
        VIEW_ADD(.file = more[i].file, .dev = more[i].dev, .follow = true);
        (void)snprintf(ec->view[ec->n_view - 1].path, AJ_EGRESS_VIEW_PATH, "%s", more[i].path);
    }
    /* Its own directory, where it is not under /usr already. */
    if (snprintf(dir, sizeof(dir), "%s", real_path) >= (int)sizeof(dir))
        return aj_err(err, ENAMETOOLONG, "%s", real_path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir)
        *slash = '\0';
    if (strncmp(dir, "/usr/", 5) != 0) {
        VIEW_ADD(.file = false);
        (void)snprintf(ec->view[ec->n_view - 1].path, AJ_EGRESS_VIEW_PATH, "%s", dir);
    }
#undef VIEW_ADD
    return 0;
}

static int spawn_proxy(struct aj_egress *eg, int fds[AJ_EGRESS_NFDS], int stderr_w, const char *path,
                       uint64_t max_conns, struct aj_error *err)
{
    static char *const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    char *argv[] = {"agentjail-egress", "--config-fd", "3", "--listen-fd", "4", "--events-fd", "5",
                    "--control-fd", "6", "--ca-out-fd", "7", "--handoff-fd", "8", NULL};
    /* Large (the view's paths): not on the stack of a server's thread. */
    struct aj_egress_child *ec = calloc(1, sizeof(*ec));
    char *real = realpath(path, NULL);
    pid_t pid;
    int r;

    if (!ec || !real) {
        free(ec);
        free(real);
        return aj_err(err, errno ? errno : ENOMEM, "agentjail-egress at %s", path);
    }
    *ec = (struct aj_egress_child){
        .parent = getpid(),
        .n_cg_join = eg->n_cg_join,
        .rootless = eg->rootless,
        .uid = eg->uid,
        .gid = eg->gid,
        .null_fd = eg->null_fd,
        .path = real, /* the view has its directory, not a link's */
        .argv = argv,
        .envp = envp,
        .stderr_fd = stderr_w,
        .listen_fd = -1,
        .nofile = 2 * max_conns + 64,
    };
    memcpy(ec->fds, fds, sizeof(ec->fds));
    memcpy(ec->cg_join, eg->cg_join, sizeof(ec->cg_join));
    r = plan_view(eg, ec, real, err);
    if (r < 0) {
        free(ec);
        free(real);
        return r;
    }
    /* A raw clone: the supervisor may have other threads (see child.h). */
    pid = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (pid == 0)
        aj_egress_child_proxy_main(ec);
    free(ec);
    free(real);
    if (pid < 0)
        return aj_err(err, errno, "start the egress proxy");
    aj_children_add(pid);
    eg->proxy_pid = pid;
    eg->proxy_pidfd = (int)syscall(__NR_pidfd_open, pid, 0);
    return 0;
}

/* resolv.conf names no server: a program that ignores the proxy
 * variables finds no resolver to ask (nor any route to one). */
static int plan_files(struct aj_egress *eg, const struct aj_policy *pol, const struct resolved *rs, const char *ca,
                      struct aj_mount_plan *plan, struct aj_error *err)
{
    int r = 0;

    for (size_t i = 0; i < plan->n; i++)
        if (plan->entries[i].kind == AJ_MNT_FILE && strcmp(plan->entries[i].dst, "/etc/resolv.conf") == 0) {
            static const char text[] = "# agentjail network.mode \"proxy\": no DNS server inside; names are resolved "
                                       "by the egress proxy (HTTP_PROXY)\n";
            char *c = strdup(text);
            if (!c)
                return aj_err(err, ENOMEM, "resolv.conf");
            free(plan->entries[i].content);
            plan->entries[i].content = c;
            plan->entries[i].content_len = strlen(c);
        }
    if (ca && *ca) {
        char sys[1 << 16];
        _cleanup_free_ char *bundle = NULL;
        size_t sl = 0;
        int fd = open(SYSTEM_BUNDLE, O_RDONLY | O_CLOEXEC);
        /* The system's bundle is read whole (it is ~200 KiB). */
        char *all = NULL;
        size_t al = 0;
        if (fd >= 0) {
            ssize_t k;
            while ((k = read(fd, sys, sizeof(sys))) > 0) {
                char *b = realloc(all, al + (size_t)k + 1);
                if (!b) {
                    free(all);
                    (void)close(fd);
                    return aj_err(err, ENOMEM, "trust bundle");
                }
                all = b;
                memcpy(all + al, sys, (size_t)k);
                al += (size_t)k;
            }
            (void)close(fd);
        }
        sl = al;
        if (asprintf(&bundle, "%.*s%s# agentjail: this run's egress proxy CA (brokered hosts only)\n%s", (int)sl,
                     all ? all : "", sl && all[sl - 1] != '\n' ? "\n" : "", ca) < 0)
            bundle = NULL;
        free(all);
        if (!bundle)
            return aj_err(err, ENOMEM, "trust bundle");
        r = aj_mount_plan_add_file(plan, AJ_EGRESS_CA_BUNDLE, bundle, err);
        if (r == 0)
            r = env_ca(eg, err);
    }
    for (size_t i = 0; r == 0 && i < pol->n_secrets; i++) {
        const struct aj_secret *s = &pol->secrets[i];
        if (s->file) {
            char *c = NULL;
            if (asprintf(&c, "%s\n", rs[i].placeholder) < 0)
                return aj_err(err, ENOMEM, "placeholder");
            r = aj_mount_plan_add_file(plan, s->file, c, err);
            free(c);
        }
        if (r == 0 && s->env)
            r = env_add(eg, err, "%s=%s", s->env, rs[i].placeholder);
    }
    return r;
}

int aj_egress_prepare(struct aj_egress *eg, const struct aj_policy *pol, const char *run_id, bool rootless,
                      const struct aj_cgroup *cg, struct aj_mount_plan *plan, struct aj_error *err)
{
    char path[4096];
    int cfg[2] = {-1, -1}, ev[2] = {-1, -1}, ctl[2] = {-1, -1}, ca[2] = {-1, -1}, errp[2] = {-1, -1};
    int listen_fd = -1, r;
    struct resolved *rs = NULL;
    char *pem = NULL;

    if (pol->network != AJ_NET_PROXY)
        return 0;
    eg->on = true;
    eg->rootless = rootless;
    r = locate_binary(path, sizeof(path), err);
    if (r < 0)
        return r;
    if (rootless) {
        eg->uid = geteuid();
        eg->gid = getegid();
    } else {
        /* A uid of its own, leased like a run's: the proxy can neither
         * touch the sandbox's files nor signal it, nor be signalled by it. */
        r = aj_userns_lease_host_id(pol, &eg->lease, err);
        if (r < 0)
            return aj_err_prefix(err, r, "egress proxy uid");
        eg->uid = eg->lease.host_uid;
        eg->gid = eg->lease.host_gid;
    }
    eg->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (eg->null_fd < 0)
        return aj_err(err, errno, "open /dev/null");
    if (cg) {
        r = aj_cgroup_open_helper_join_fds(cg, eg->cg_join, &eg->n_cg_join, err);
        if (r < 0)
            return aj_err_prefix(err, r, "the egress proxy's cgroup");
    }
    reap_stale_dirs();
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, eg->helper_sock) < 0)
        return aj_err(err, errno, "socketpair");
    /* [0] the proxy's --handoff-fd, [1] the relay's, kept until it starts. */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, eg->handoff) < 0)
        return aj_err(err, errno, "socketpair");
    eg->secret_ids = json_array();
    if (!eg->secret_ids)
        return aj_err(err, ENOMEM, "secrets");
    rs = calloc(pol->n_secrets ? pol->n_secrets : 1, sizeof(*rs));
    if (!rs)
        return aj_err(err, ENOMEM, "secrets");
    r = listen_fd = make_socket(eg, err);
    if (r >= 0 && (pipe2(cfg, O_CLOEXEC) < 0 || pipe2(ev, O_CLOEXEC) < 0 || pipe2(ctl, O_CLOEXEC) < 0 ||
                   pipe2(ca, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0))
        r = aj_err(err, errno, "pipes for the egress proxy");
    if (r >= 0) {
        int fds[AJ_EGRESS_NFDS] = {cfg[0], listen_fd, ev[1], ctl[0], ca[1], eg->handoff[0]};
        r = spawn_proxy(eg, fds, errp[1], path, pol->net_max_connections, err);
    }
    /* The proxy has its copies. */
    close_fd(&cfg[0]);
    close_fd(&listen_fd);
    close_fd(&eg->handoff[0]);
    close_fd(&ev[1]);
    close_fd(&ctl[0]);
    close_fd(&ca[1]);
    close_fd(&errp[1]);
    eg->ev_fd = ev[0];
    eg->ctl_fd = ctl[1];
    eg->err_fd = errp[0];
    if (eg->ev_fd >= 0)
        (void)fcntl(eg->ev_fd, F_SETFL, O_NONBLOCK);
    if (eg->err_fd >= 0)
        (void)fcntl(eg->err_fd, F_SETFL, O_NONBLOCK);
    /* The values are read only now: the proxy's clone (until its execve)
     * never held one. */
    for (size_t i = 0; r >= 0 && i < pol->n_secrets; i++) {
        r = read_secret(&pol->secrets[i], &rs[i], err);
        if (r == 0)
            r = make_placeholder(&rs[i], err);
        if (r == 0 && json_array_append_new(eg->secret_ids, json_string(pol->secrets[i].id)) < 0)
            r = aj_err(err, ENOMEM, "secrets");
    }
    if (r >= 0) {
        /* Taken before the proxy makes its CA: never later than its end. */
        if (pol->n_secrets)
            eg->ca_not_after_ms = aj_now_ms() + ca_validity_s(eg, pol) * 1000;
        r = write_config(eg, cfg[1], pol, run_id, rs, err);
        /* EPIPE: it is gone before reading its config; say what it said. */
        if (r == -EPIPE && eg->proxy_pidfd >= 0) {
            struct pollfd p = {.fd = eg->proxy_pidfd, .events = POLLIN};
            if (poll(&p, 1, 1000) == 1)
                r = proxy_died(eg, err);
        }
    }
    close_fd(&cfg[1]);
    /* From here on the supervisor holds no secret value outside the env:
     * store (wiped on fork): init, cloned next, copies its memory. */
    if (r >= 0)
        r = read_ca(eg, ca[0], &pem, err);
    close_fd(&ca[0]);
    if (r >= 0 && pol->n_secrets && !(pem && strstr(pem, "-----BEGIN CERTIFICATE-----")))
        r = aj_err(err, EPROTO, "the egress proxy wrote no CA certificate, and secrets are brokered");
    if (r >= 0)
        r = env_proxy(eg, pol->proxy_port, err);
    if (r >= 0)
        r = plan_files(eg, pol, rs, pem, plan, err);
    for (size_t i = 0; rs && i < pol->n_secrets; i++)
        explicit_bzero(rs[i].placeholder, sizeof(rs[i].placeholder));
    wipe(rs, pol->n_secrets);
    free(pem);
    return r < 0 ? r : 0;
}

bool aj_egress_parked_usable(const struct aj_egress *eg, uint64_t timeout_ms)
{
    struct pollfd p = {.fd = eg->proxy_pidfd, .events = POLLIN};

    if (!eg->on)
        return true;
    if (eg->proxy_pid <= 0 || eg->ev_fd < 0 || (eg->proxy_pidfd >= 0 && poll(&p, 1, 0) != 0))
        return false; /* the proxy is gone: the run would have no network */
    /* A minute of margin past the timeout; an hour of run without one. */
    return !eg->ca_not_after_ms || aj_now_ms() + (timeout_ms ? timeout_ms + 60000 : 3600000) < eg->ca_not_after_ms;
}

int aj_egress_helper_sock(const struct aj_egress *eg)
{
    return eg->on ? eg->helper_sock[1] : -1;
}

int aj_egress_start_relay(struct aj_egress *eg, const struct aj_policy *pol, struct aj_error *err)
{
    struct aj_sync_msg m;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof(m)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct pollfd p = {.fd = eg->helper_sock[0], .events = POLLIN};
    struct aj_egress_child ec = {0};
    struct aj_bpf bpf = {0};
    int fd = -1, r;
    ssize_t n;
    pid_t pid;

    if (!eg->on)
        return 0;
    close_fd(&eg->helper_sock[1]); /* the helper has its copy: its death is EOF */
    while (poll(&p, 1, EGRESS_START_TIMEOUT_MS) < 0)
        if (errno != EINTR)
            return aj_err(err, errno, "wait for the relay's socket");
    do
        n = recvmsg(eg->helper_sock[0], &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        (void)aj_proto_collect_fds(&mh, &fd, 1);
    close_fd(&eg->helper_sock[0]);
    if (n != (ssize_t)sizeof(m) || fd < 0) {
        if (fd >= 0)
            (void)close(fd);
        return aj_err(err, n == (ssize_t)sizeof(m) && m.err.errnum ? m.err.errnum : EPROTO,
                      "the relay's socket on 127.0.0.1:%u inside the sandbox", (unsigned)pol->proxy_port);
    }
    ec = (struct aj_egress_child){
        .parent = getpid(),
        .n_cg_join = eg->n_cg_join,
        .rootless = eg->rootless,
        .uid = eg->uid,
        .gid = eg->gid,
        .null_fd = eg->null_fd,
        .listen_fd = fd,
        .handoff_fd = eg->handoff[1],
    };
    memcpy(ec.cg_join, eg->cg_join, sizeof(ec.cg_join));
    r = aj_seccomp_compile_relay(&bpf, err);
    if (r < 0) {
        (void)close(fd);
        return r;
    }
    ec.relay_insns = bpf.insns;
    ec.relay_len = bpf.len;
    pid = (pid_t)syscall(__NR_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (pid == 0)
        aj_egress_child_relay_main(&ec);
    aj_seccomp_clear(&bpf);
    (void)close(fd);
    if (pid < 0)
        return aj_err(err, errno, "start the relay");
    close_fd(&eg->handoff[1]); /* the relay has its copy */
    /* Both helpers have joined (or are joining with their copies). */
    for (size_t i = 0; i < eg->n_cg_join; i++)
        close_fd(&eg->cg_join[i]);
    eg->n_cg_join = 0;
    aj_children_add(pid);
    eg->relay_pid = pid;
    return 0;
}

/* ---- events ------------------------------------------------------------------------- */

static const struct {
    const char *name;
    enum aj_event_type type;
    enum aj_severity sev;
} kinds[] = {
    {"net_allowed", AJ_EV_NET_ALLOWED, AJ_SEV_INFO},
    {"net_denied", AJ_EV_NET_DENIED, AJ_SEV_MEDIUM},
    {"net_cap", AJ_EV_NET_CAP, AJ_SEV_MEDIUM},
    {"secret_used", AJ_EV_SECRET_USED, AJ_SEV_INFO},
    /* A placeholder sent where its secret does not go: the payload is
     * trying to take the credential somewhere else. It is a canary. */
    {"secret_misdirected", AJ_EV_SECRET_MISDIRECTED, AJ_SEV_HIGH},
};

static void copy_str(json_t *to, json_t *from, const char *key)
{
    json_t *v = json_object_get(from, key);
    if (json_is_string(v) && json_string_length(v) <= 512)
        (void)json_object_set_new(to, key, json_stringn(json_string_value(v), json_string_length(v)));
}

static void copy_int(json_t *to, json_t *from, const char *key, uint64_t *sum)
{
    json_t *v = json_object_get(from, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        (void)json_object_set_new(to, key, json_integer(json_integer_value(v)));
        if (sum)
            *sum += (uint64_t)json_integer_value(v);
    }
}

static void take_line(struct aj_egress *eg, const char *line, size_t len, const struct aj_audit *a,
                      aj_egress_emit_fn emit, void *ctx)
{
    json_t *in = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL), *ev;
    const char *t = json_string_value(json_object_get(in, "type"));
    size_t k;

    if (!t) {
        eg->malformed++;
        json_decref(in);
        return;
    }
    if (strcmp(t, "credentials_suspended") == 0) {
        /* The proxy confirms what the supervisor ordered and recorded. */
        json_decref(in);
        return;
    }
    for (k = 0; k < AJ_ARRAY_SIZE(kinds) && strcmp(kinds[k].name, t) != 0; k++)
        ;
    if (k == AJ_ARRAY_SIZE(kinds)) {
        eg->malformed++;
        json_decref(in);
        return;
    }
    /* Past the event budget: counted (emit takes NULL as suppressed),
     * the bytes summed all the same. */
    ev = aj_audit_over_budget(a, kinds[k].type) ? NULL : aj_audit_event(a, kinds[k].type, kinds[k].sev);
    {
        json_t *tmp = ev ? ev : json_object();
        copy_str(tmp, in, "host");
        copy_int(tmp, in, "port", NULL);
        copy_str(tmp, in, "address");
        copy_str(tmp, in, "method");
        copy_int(tmp, in, "bytes_out", &eg->bytes_out);
        copy_int(tmp, in, "bytes_in", &eg->bytes_in);
        copy_int(tmp, in, "duration_ms", NULL);
        copy_str(tmp, in, "reason");
        copy_str(tmp, in, "secret");
        if (!ev)
            json_decref(tmp);
    }
    if (ev && kinds[k].type == AJ_EV_SECRET_MISDIRECTED)
        aj_audit_technique(ev, "T1552");
    json_decref(in);
    emit(ctx, ev, kinds[k].type, kinds[k].sev);
}

static void take_bytes(struct aj_egress *eg, const char *buf, size_t n, const struct aj_audit *a,
                       aj_egress_emit_fn emit, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n') {
            if (!eg->line_skip && eg->line_len)
                take_line(eg, eg->line, eg->line_len, a, emit, ctx);
            eg->line_len = 0;
            eg->line_skip = false;
        } else if (eg->line_len < sizeof(eg->line)) {
            eg->line[eg->line_len++] = c;
        } else if (!eg->line_skip) {
            eg->line_skip = true; /* a line longer than any event: dropped, counted */
            eg->malformed++;
        }
    }
}

void aj_egress_read_events(struct aj_egress *eg, const struct aj_audit *a, aj_egress_emit_fn emit, void *ctx,
                           bool drain)
{
    uint64_t deadline = aj_now_ms() + EGRESS_STOP_GRACE_MS;
    char buf[8192];

    take_stderr(eg);
    if (eg->pend_len) {
        /* What aj_egress_suspend read ahead, first and in order. */
        char *p = eg->pend;
        size_t n = eg->pend_len;
        eg->pend = NULL;
        eg->pend_len = 0;
        take_bytes(eg, p, n, a, emit, ctx);
        free(p);
    }
    while (eg->ev_fd >= 0) {
        ssize_t n = read(eg->ev_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = eg->ev_fd, .events = POLLIN};
            uint64_t now = aj_now_ms();
            if (!drain || now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
                return;
            continue;
        }
        if (n <= 0) {
            /* EOF: the proxy is gone. While the run lives that is news: its
             * programs' requests fail from now on (never around it). */
            close_fd(&eg->ev_fd);
            if (!eg->stopping) {
                json_t *e = aj_audit_event(a, AJ_EV_ERROR, AJ_SEV_MEDIUM);
                take_stderr(eg);
                if (e)
                    (void)json_object_set_new(e, "error", json_string(eg->stderr_tail[0] ? eg->stderr_tail
                                                                      : "the egress proxy exited during the run"));
                emit(ctx, e, AJ_EV_ERROR, AJ_SEV_MEDIUM);
            }
            return;
        }
        take_bytes(eg, buf, (size_t)n, a, emit, ctx);
    }
}

/* The proxy's answer to "suspend": its events are read ahead into
 * eg->pend (taken, in order, by the next aj_egress_read_events) until the
 * credentials_suspended line is among them, or the wait is over. */
static void wait_suspended(struct aj_egress *eg)
{
    uint64_t deadline = aj_now_ms() + EGRESS_SUSPEND_WAIT_MS;
    size_t scanned = 0;

    while (eg->ev_fd >= 0) {
        struct pollfd p = {.fd = eg->ev_fd, .events = POLLIN};
        uint64_t now = aj_now_ms();
        char buf[4096], *np;
        ssize_t n;
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
            return;
        n = read(eg->ev_fd, buf, sizeof(buf));
        if (n <= 0)
            return; /* EOF or an error: the next read_events says so */
        if (eg->pend_len > (4U << 20))
            return;
        np = realloc(eg->pend, eg->pend_len + (size_t)n);
        if (!np)
            return;
        eg->pend = np;
        memcpy(eg->pend + eg->pend_len, buf, (size_t)n);
        eg->pend_len += (size_t)n;
        if (memmem(eg->pend + (scanned > 32 ? scanned - 32 : 0), eg->pend_len - (scanned > 32 ? scanned - 32 : 0),
                   "\"credentials_suspended\"", 23))
            return;
        scanned = eg->pend_len;
    }
}

json_t *aj_egress_suspend(struct aj_egress *eg, const struct aj_audit *a)
{
    json_t *ev;

    if (!eg->on || eg->suspended)
        return NULL;
    eg->suspended = true;
    /* A short line into an empty pipe: never blocks. Best effort: a proxy
     * already gone brokers nothing either. */
    if (eg->ctl_fd >= 0 && aj_write_all(eg->ctl_fd, "suspend\n", 8) == 0 && json_array_size(eg->secret_ids))
        wait_suspended(eg);
    if (!json_array_size(eg->secret_ids))
        return NULL;
    ev = aj_audit_event(a, AJ_EV_CREDENTIALS_SUSPENDED, AJ_SEV_HIGH);
    if (ev) {
        (void)json_object_set(ev, "secrets", eg->secret_ids);
        (void)json_object_set_new(ev, "reason",
                                  json_string("the run raised a high-severity escape or canary event: rotate "
                                              "these credentials; the proxy no longer brokers them"));
        aj_audit_technique(ev, "T1552");
    }
    return ev;
}

static void kill_reap(pid_t *pid)
{
    if (*pid <= 0)
        return;
    (void)kill(*pid, SIGKILL);
    while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
        ;
    aj_children_del(*pid);
    *pid = 0;
}

void aj_egress_stop(struct aj_egress *eg, const struct aj_audit *a, aj_egress_emit_fn emit, void *ctx)
{
    if (!eg->on)
        return;
    /* The relay first: no new connection. Then EOF on the control fd (the
     * proxy closes every connection and exits), and its last events. */
    eg->stopping = true;
    kill_reap(&eg->relay_pid);
    close_fd(&eg->ctl_fd);
    if (emit)
        aj_egress_read_events(eg, a, emit, ctx, true);
    kill_reap(&eg->proxy_pid);
    close_fd(&eg->proxy_pidfd);
}

void aj_egress_fill_result(const struct aj_egress *eg, struct aj_result *res)
{
    if (!eg->on)
        return;
    res->egress = true;
    res->egress_bytes_out = eg->bytes_out;
    res->egress_bytes_in = eg->bytes_in;
    res->credentials_suspended = eg->suspended && json_array_size(eg->secret_ids) > 0;
}

void aj_egress_release(struct aj_egress *eg)
{
    kill_reap(&eg->relay_pid);
    kill_reap(&eg->proxy_pid);
    close_fd(&eg->proxy_pidfd);
    close_fd(&eg->ev_fd);
    close_fd(&eg->err_fd);
    close_fd(&eg->ctl_fd);
    close_fd(&eg->helper_sock[0]);
    close_fd(&eg->helper_sock[1]);
    close_fd(&eg->handoff[0]);
    close_fd(&eg->handoff[1]);
    close_fd(&eg->null_fd);
    for (size_t i = 0; i < eg->n_cg_join; i++)
        close_fd(&eg->cg_join[i]);
    eg->n_cg_join = 0;
    /* Through the directory's fd: never a path (see make_socket). */
    if (eg->dir_fd >= 0) {
        if (eg->sock_path[0])
            (void)unlinkat(eg->dir_fd, "proxy.sock", 0);
        (void)unlinkat(eg->dir_fd, "root", AT_REMOVEDIR);
    }
    eg->sock_path[0] = '\0';
    if (eg->dir[0])
        (void)rmdir(eg->dir); /* ours, in the sticky /tmp: no one else can replace the name */
    eg->dir[0] = '\0';
    close_fd(&eg->dir_fd); /* the lock goes with it */
    aj_userns_lease_release(&eg->lease);
    for (size_t i = 0; i < eg->n_env; i++)
        free(eg->env[i]);
    free(eg->env);
    eg->env = NULL;
    eg->n_env = 0;
    json_decref(eg->secret_ids);
    eg->secret_ids = NULL;
    free(eg->pend);
    eg->pend = NULL;
    eg->pend_len = 0;
}
