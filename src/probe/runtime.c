/* SPDX-License-Identifier: Apache-2.0 */
/* Container runtime sockets, Kubernetes service-account tokens, and cloud
 * credentials in the environment and in files.
 *
 * Values are never printed: environment variables are reported by name,
 * files by path. Sockets are judged by access(2) (connecting needs write
 * permission on the socket file); nothing is ever connected to. The one
 * file read is the service-account token, in memory only, to tell
 * agentjail's decoy (its `sub` claim names an agentjail run) from a real
 * one; the buffer is wiped after. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_util.h"
#include "probe.h"

extern char **environ;

#define SA_TOKEN_MAX 16384

/* ---- runtime sockets ------------------------------------------------- */

static const struct runtime {
    const char *id, *title;
    const char *paths[4];
} runtimes[] = {
    {"runtime.docker_sock",
     "Docker API socket",
     {"/var/run/docker.sock", "/run/docker.sock", "/run/user/0/docker.sock", NULL}},
    {"runtime.containerd_sock",
     "containerd socket",
     {"/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock",
      "/run/k3s/containerd/containerd.sock", NULL}},
    {"runtime.crio_sock", "CRI-O socket", {"/run/crio/crio.sock", "/var/run/crio/crio.sock", NULL}},
    {"runtime.podman_sock",
     "Podman API socket",
     {"/run/podman/podman.sock", "/var/run/podman/podman.sock", NULL}},
};

static const char *const token_paths[] = {
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/run/secrets/kubernetes.io/serviceaccount/token",
};

/* base64url decoding of a JWT segment, for the claims only. */
static size_t b64url_decode(const char *in, size_t n, char *out, size_t cap)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned acc = 0, bits = 0;
    size_t len = 0;

    for (size_t i = 0; i < n && len + 1 < cap; i++) {
        const char *p = in[i] ? strchr(alpha, in[i]) : NULL;
        if (!p)
            break;
        acc = acc << 6 | (unsigned)(p - alpha);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[len] = '\0';
    return len;
}

/* 1: agentjail's decoy, 0: looks real, -errno: unreadable. */
static int token_is_decoy(const char *path)
{
    static char tok[SA_TOKEN_MAX], claims[SA_TOKEN_MAX];
    const char *dot1, *dot2;
    ssize_t n = pr_read_text(path, tok, sizeof(tok));
    int r = 0;

    if (n < 0)
        return (int)n;
    dot1 = strchr(tok, '.');
    dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    if (dot2) {
        b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), claims, sizeof(claims));
        /* "sub":"system:serviceaccount:default:agentjail-<run id>" */
        r = strstr(claims, ":agentjail-") != NULL && strstr(claims, "\"sub\"") != NULL;
    }
    explicit_bzero(tok, sizeof(tok));
    explicit_bzero(claims, sizeof(claims));
    return r;
}

/* The decoy token, if there is one, and the filesystem it lives on: a
 * socket planted on the same tmpfs is agentjail's decoy too. */
static int decoy_dev(dev_t *ret)
{
    struct stat st;

    for (size_t i = 0; i < AJ_ARRAY_SIZE(token_paths); i++)
        if (lstat(token_paths[i], &st) == 0 && S_ISREG(st.st_mode) &&
            token_is_decoy(token_paths[i]) == 1) {
            *ret = st.st_dev;
            return 1;
        }
    return 0;
}

static void check_sockets(struct pr_ctx *c)
{
    dev_t ddev = 0;
    int have_decoy = -1;

    for (size_t i = 0; i < AJ_ARRAY_SIZE(runtimes); i++) {
        const struct runtime *rt = &runtimes[i];
        struct pr_list l = {0};
        bool usable = false, decoy = false;

        if (!pr_wanted(c, rt->id))
            continue;
        for (size_t j = 0; j < AJ_ARRAY_SIZE(rt->paths) && rt->paths[j]; j++) {
            struct stat st;
            if (lstat(rt->paths[j], &st) < 0)
                continue;
            if (!S_ISSOCK(st.st_mode) && !S_ISLNK(st.st_mode)) {
                pr_list_add(&l, "%s (not a socket)", rt->paths[j]);
                continue;
            }
            bool w = faccessat(AT_FDCWD, rt->paths[j], W_OK, AT_EACCESS) == 0;
            if (have_decoy < 0)
                have_decoy = decoy_dev(&ddev);
            bool d = have_decoy == 1 && st.st_dev == ddev;
            usable |= w && !d;
            decoy |= d;
            pr_list_add(&l, "%s (%s%s)", rt->paths[j],
                        w ? "connectable by this uid" : "no write permission",
                        d ? ", on the same tmpfs as agentjail's decoy token: an agentjail decoy"
                          : "");
        }
        if (!l.n)
            pr_add(c, rt->id, PR_CAT_RUNTIME, PR_ABSENT, PR_SEV_CRITICAL, rt->title, "not present");
        else if (usable)
            pr_add(c, rt->id, PR_CAT_RUNTIME, PR_EXPOSED, PR_SEV_CRITICAL, rt->title,
                   "%s: the runtime API starts a privileged container with the host's root "
                   "mounted (not connected to)",
                   pr_list_str(&l));
        else if (decoy)
            pr_add(c, rt->id, PR_CAT_RUNTIME, PR_INFO, PR_SEV_INFO, rt->title,
                   "present: %s; connecting raises a canary event", pr_list_str(&l));
        else
            pr_add(c, rt->id, PR_CAT_RUNTIME, PR_BLOCKED, PR_SEV_CRITICAL, rt->title, "%s",
                   pr_list_str(&l));
    }
}

static void check_token(struct pr_ctx *c)
{
    const char *id = "runtime.k8s_token", *title = "Kubernetes service-account token";
    struct pr_list l = {0};
    enum pr_status st = PR_ABSENT;

    if (!pr_wanted(c, id))
        return;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(token_paths); i++) {
        struct stat s;
        if (lstat(token_paths[i], &s) < 0)
            continue;
        int d = token_is_decoy(token_paths[i]);
        if (d < 0) {
            pr_list_add(&l, "%s (unreadable: %s)", token_paths[i], pr_errname(-d));
            if (st == PR_ABSENT)
                st = PR_BLOCKED;
        } else if (d == 1) {
            pr_list_add(&l,
                        "%s (an agentjail decoy: its sub claim names an agentjail run; "
                        "reading it raised a canary event)",
                        token_paths[i]);
            if (st != PR_EXPOSED)
                st = PR_INFO;
        } else {
            pr_list_add(&l, "%s (readable; value not shown)", token_paths[i]);
            st = PR_EXPOSED;
        }
    }
    if (st == PR_EXPOSED)
        pr_add(c, id, PR_CAT_RUNTIME, st, PR_SEV_HIGH, title,
               "%s: it authenticates to the cluster's API server as this pod", pr_list_str(&l));
    else
        pr_add(c, id, PR_CAT_RUNTIME, st, PR_SEV_HIGH, title, "%s",
               l.n ? pr_list_str(&l) : "not present");
}

/* What kind of place this is, from well-known markers. Informational. */
static void check_environment(struct pr_ctx *c)
{
    const char *id = "runtime.environment", *title = "execution environment";
    struct pr_list l = {0};
    char buf[4096];
    FILE *f;

    if (!pr_wanted(c, id))
        return;
    if (access("/.dockerenv", F_OK) == 0)
        pr_list_add(&l, "/.dockerenv (Docker)");
    if (access("/run/.containerenv", F_OK) == 0)
        pr_list_add(&l, "/run/.containerenv (Podman)");
    if (getenv("container"))
        pr_list_add(&l, "$container is set");
    if (getenv("KUBERNETES_SERVICE_HOST"))
        pr_list_add(&l, "$KUBERNETES_SERVICE_HOST is set (Kubernetes pod)");
    if (pr_read_text("/proc/self/cgroup", buf, sizeof(buf)) > 0) {
        static const char *const marks[] = {"docker", "kubepods",  "containerd", "crio",
                                            "libpod", "agentjail", "lxc"};
        for (size_t i = 0; i < AJ_ARRAY_SIZE(marks); i++)
            if (strstr(buf, marks[i]))
                pr_list_add(&l, "cgroup path mentions %s", marks[i]);
    }
    f = fopen("/proc/self/mountinfo", "re");
    if (f) {
        while (fgets(buf, sizeof(buf), f)) {
            /* The sandbox root: a tmpfs whose source is "agentjail". */
            if (strstr(buf, " / / ") && strstr(buf, " - tmpfs agentjail ")) {
                pr_list_add(&l, "root is agentjail's tmpfs (agentjail sandbox)");
                break;
            }
        }
        fclose(f);
    }
    pr_add(c, id, PR_CAT_RUNTIME, PR_INFO, PR_SEV_INFO, title, "%s",
           l.n ? pr_list_str(&l) : "no container marker found");
}

void pr_check_runtime(struct pr_ctx *c)
{
    check_sockets(c);
    check_token(c);
    check_environment(c);
}

/* ---- credentials ------------------------------------------------------ */

/* Variable names that carry cloud or service credentials. Whole-prefix
 * matches and case-insensitive substrings. */
static const char *const env_prefixes[] = {
    "AWS_",          "AZURE_",
    "ARM_CLIENT_",   "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_", "GCP_",
    "GCLOUD_",       "CLOUDSDK_",
    "DIGITALOCEAN_", "ALICLOUD_",
    "OCI_CLI_",      "KUBECONFIG",
    "VAULT_",        "DOCKER_AUTH_CONFIG",
    "GITHUB_TOKEN",
};
static const char *const env_words[] = {
    "TOKEN",  "SECRET",     "PASSWORD",    "PASSWD",     "API_KEY",
    "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "CREDENTIAL",
};

/* Settings that share those prefixes but hold no secret. */
static const char *const env_harmless_suffixes[] = {
    "_REGION", "_CA_BUNDLE", "_CA_CERTS_FILE", "_ENDPOINT_URL", "_PAGER", "_OUTPUT",
};

static bool credential_name(const char *name, size_t len)
{
    char upper[256];

    if (len >= sizeof(upper))
        len = sizeof(upper) - 1;
    for (size_t i = 0; i < len; i++)
        upper[i] = (char)toupper((unsigned char)name[i]);
    upper[len] = '\0';
    for (size_t i = 0; i < AJ_ARRAY_SIZE(env_harmless_suffixes); i++) {
        size_t n = strlen(env_harmless_suffixes[i]);
        if (len > n && strcmp(upper + len - n, env_harmless_suffixes[i]) == 0)
            return false;
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(env_prefixes); i++)
        if (strncmp(upper, env_prefixes[i], strlen(env_prefixes[i])) == 0)
            return true;
    for (size_t i = 0; i < AJ_ARRAY_SIZE(env_words); i++)
        if (strstr(upper, env_words[i]))
            return true;
    return false;
}

static void check_env(struct pr_ctx *c)
{
    const char *id = "credentials.env", *title = "credential-like environment variables";
    struct pr_list l = {0};
    unsigned total = 0;

    if (!pr_wanted(c, id))
        return;
    for (char **e = environ; e && *e; e++) {
        size_t len = strcspn(*e, "=");
        total++;
        if (credential_name(*e, len))
            pr_list_add(&l, "%.*s", (int)(len > 128 ? 128 : len),
                        *e); /* the name, never the value */
    }
    if (l.n || l.dropped)
        pr_add(c, id, PR_CAT_CREDENTIALS, PR_EXPOSED, PR_SEV_HIGH, title,
               "%s (names only; %u variables in all)", pr_list_str(&l), total);
    else
        pr_add(c, id, PR_CAT_CREDENTIALS, PR_ABSENT, PR_SEV_HIGH, title, "none among %u variables",
               total);
}

/* Credential files, relative to each home directory. */
static const char *const home_files[] = {
    ".aws/credentials",
    ".aws/config",
    ".config/gcloud/application_default_credentials.json",
    ".config/gcloud/credentials.db",
    ".azure/msal_token_cache.json",
    ".azure/accessTokens.json",
    ".docker/config.json",
    ".kube/config",
    ".ssh/id_rsa",
    ".ssh/id_ed25519",
    ".ssh/id_ecdsa",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".config/gh/hosts.yml",
};
static const char *const system_files[] = {
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/kubelet.conf",
    "/var/lib/kubelet/kubeconfig",
    "/etc/rancher/k3s/k3s.yaml",
    "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
    "/var/run/secrets/azure/tokens/azure-identity-token",
};
/* Variables whose value is the path of a credential file: the file is
 * checked, but reported under the variable's name. */
static const char *const path_vars[] = {
    "GOOGLE_APPLICATION_CREDENTIALS", "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",    "KUBECONFIG",
    "AZURE_FEDERATED_TOKEN_FILE",
};

struct cred_scan {
    struct pr_list l;
    unsigned readable, present;
};

static void cred_file(struct cred_scan *s, const char *path, const char *shown)
{
    struct stat st;
    bool r;

    if (lstat(path, &st) < 0 || S_ISDIR(st.st_mode))
        return;
    r = faccessat(AT_FDCWD, path, R_OK, AT_EACCESS) == 0;
    s->present++;
    s->readable += r;
    pr_list_add(&s->l, "%s (%s)", shown, r ? "readable" : "not readable");
}

static void scan_home(struct cred_scan *s, const char *home)
{
    char path[1024];

    for (size_t i = 0; i < AJ_ARRAY_SIZE(home_files); i++)
        if (snprintf(path, sizeof(path), "%s/%s", home, home_files[i]) < (int)sizeof(path))
            cred_file(s, path, path);
}

static void check_files(struct pr_ctx *c)
{
    const char *id = "credentials.files", *title = "credential files";
    struct cred_scan s;
    const char *home = getenv("HOME");
    char shown[128];

    if (!pr_wanted(c, id))
        return;
    memset(&s, 0, sizeof(s));
    if (home && home[0] == '/' && strcmp(home, "/root") != 0)
        scan_home(&s, home);
    scan_home(&s, "/root");
    /* Other users' homes: at most 64 of them. */
    {
        char path[512];
        struct dirent *de;
        unsigned n = 0;
        DIR *d = opendir("/home");
        while (d && (de = readdir(d)) && n++ < 64) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "/home/%s", de->d_name);
            if (!home || strcmp(home, path) != 0)
                scan_home(&s, path);
        }
        if (d)
            closedir(d);
    }
    for (size_t i = 0; i < AJ_ARRAY_SIZE(system_files); i++)
        cred_file(&s, system_files[i], system_files[i]);
    for (size_t i = 0; i < AJ_ARRAY_SIZE(path_vars); i++) {
        const char *v = getenv(path_vars[i]);
        if (v && v[0] == '/') {
            snprintf(shown, sizeof(shown), "the file named by $%s", path_vars[i]);
            cred_file(&s, v, shown);
        }
    }
    if (s.readable)
        pr_add(c, id, PR_CAT_CREDENTIALS, PR_EXPOSED, PR_SEV_HIGH, title,
               "%s (paths only; contents not read)", pr_list_str(&s.l));
    else if (s.present)
        pr_add(c, id, PR_CAT_CREDENTIALS, PR_BLOCKED, PR_SEV_HIGH, title, "%s", pr_list_str(&s.l));
    else
        pr_add(c, id, PR_CAT_CREDENTIALS, PR_ABSENT, PR_SEV_HIGH, title,
               "none of the well-known credential files is present");
}

void pr_check_credentials(struct pr_ctx *c)
{
    check_env(c);
    check_files(c);
}
