/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_decoy.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "aj_missing.h"
#include "aj_util.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static void b64url(const uint8_t *in, size_t n, char *out, size_t out_size)
{
    char tmp[BASE64_ENCODE_RAW_LENGTH(256) + 1];
    size_t len;

    if (n > 256)
        n = 256;
    base64_encode_raw(tmp, n, in);
    len = BASE64_ENCODE_RAW_LENGTH(n);
    tmp[len] = '\0';
    for (size_t i = 0; i < len; i++)
        tmp[i] = tmp[i] == '+' ? '-' : tmp[i] == '/' ? '_' : tmp[i];
    while (len && tmp[len - 1] == '=')
        tmp[--len] = '\0';
    snprintf(out, out_size, "%s", tmp);
}

static int random_b64(size_t nbytes, char *out, size_t out_size)
{
    uint8_t raw[128];
    if (nbytes > sizeof(raw))
        return -EINVAL;
    if (getentropy(raw, nbytes) < 0)
        return -errno;
    b64url(raw, nbytes, out, out_size);
    return 0;
}

static bool tmp_is_bound(const struct aj_policy *pol)
{
    for (size_t i = 0; i < pol->n_binds; i++)
        if (strcmp(pol->binds[i].sandbox, "/tmp") == 0 || strncmp(pol->binds[i].sandbox, "/tmp/", 5) == 0)
            return true;
    return false;
}

/* Device nodes that are kernel attack surface (KVM, FUSE, TUN, uinput,
 * userfaultfd, vhost) or host memory and hardware (mem, kmem, port, MSRs).
 * The sandbox's /dev has none of them: an open would just fail with
 * ENOENT, unseen. Here each name is an empty regular file under a lease,
 * like the token: the open is recorded, then gets an empty file with no
 * device behind it. */
static const struct {
    const char *path, *technique;
} device_decoys[] = {
    {"/dev/kvm", "T1068"},       {"/dev/fuse", "T1068"},      {"/dev/net/tun", "T1068"},
    {"/dev/uinput", "T1068"},    {"/dev/userfaultfd", "T1068"}, {"/dev/vhost-net", "T1068"},
    {"/dev/vhost-vsock", "T1068"}, {"/dev/mem", "T1611"},     {"/dev/kmem", "T1611"},
    {"/dev/port", "T1611"},      {"/dev/cpu/0/msr", "T1611"},
};

static void add_file(struct aj_decoy_files *files, const char *path, const char *kind, const char *technique,
                     bool made_at_arm)
{
    if (files->n >= AJ_DECOY_MAX_FILES)
        return; /* cannot happen: the table sizes are fixed (static check below) */
    files->paths[files->n] = path;
    files->kinds[files->n] = kind;
    files->techniques[files->n] = technique;
    files->made_at_arm[files->n++] = made_at_arm;
}

_Static_assert(3 + 11 + 1 <= AJ_DECOY_MAX_FILES, "decoy table fits");

void aj_decoy_plants_clear(struct aj_decoy_plants *plants)
{
    if (!plants)
        return;
    for (size_t i = 0; i < plants->n; i++)
        free(plants->v[i].content);
    memset(plants, 0, sizeof(*plants));
}

static int plant(struct aj_decoy_plants *plants, const char *path, const char *content, uint64_t size,
                 const char *mode, struct aj_error *err)
{
    struct aj_decoy_plant *p;

    if (plants->n >= AJ_DECOY_MAX_PLANTS)
        return aj_err(err, ENOSPC, "decoy plants");
    p = &plants->v[plants->n];
    *p = (struct aj_decoy_plant){.path = path, .size = size, .mode = mode};
    if (content && !(p->content = strdup(content)))
        return aj_err(err, ENOMEM, "decoy %s", path);
    plants->n++;
    return 0;
}

int aj_decoy_plan(const struct aj_policy *pol, const char *sandbox_id, struct aj_decoy_plants *plants,
                  struct aj_decoy_files *files, char *env_out[2], json_t **ret_info, struct aj_error *err)
{
    char header[128], payload[512], sig[128], token[1024], pem[512], body[256];
    json_t *info;
    int r;

    memset(files, 0, sizeof(*files));
    memset(plants, 0, sizeof(*plants));
    env_out[0] = env_out[1] = NULL;
    *ret_info = NULL;
    if (!pol->decoys && !pol->cloud_decoys)
        return 0;
    info = json_array();
    if (!info)
        return aj_err(err, ENOMEM, "decoys");
    if (pol->decoys) {
        /* /var/run: a small tmpfs of agentjail's (read-only once armed), so
         * the socket can be created after the root is sealed. */
        r = plant(plants, "/var/run", NULL, 65536, "0755", err);
        if (r < 0)
            goto fail;
        /* A service-account token shaped like the real thing (a JWT whose
         * claims name this run), with its CA and namespace. */
        {
            static const char hdr[] = "{\"alg\":\"RS256\",\"kid\":\"agentjail-decoy\"}";
            b64url((const uint8_t *)hdr, sizeof(hdr) - 1, header, sizeof(header));
        }
        snprintf(body, sizeof(body),
                 "{\"iss\":\"kubernetes/serviceaccount\",\"sub\":\"system:serviceaccount:default:agentjail-%.12s\","
                 "\"jti\":\"%s\"}",
                 sandbox_id, sandbox_id);
        b64url((const uint8_t *)body, strlen(body), payload, sizeof(payload));
        if ((r = random_b64(96, sig, sizeof(sig))) < 0) {
            r = aj_err(err, -r, "decoy token");
            goto fail;
        }
        snprintf(token, sizeof(token), "%s.%s.%s", header, payload, sig);
        if ((r = random_b64(96, sig, sizeof(sig))) < 0) {
            r = aj_err(err, -r, "decoy CA");
            goto fail;
        }
        snprintf(pem, sizeof(pem), "-----BEGIN CERTIFICATE-----\nMIIagentjail%s\n%s\n-----END CERTIFICATE-----\n",
                 sandbox_id, sig);
        if ((r = plant(plants, SA_DIR "/token", token, 0, NULL, err)) < 0 ||
            (r = plant(plants, SA_DIR "/ca.crt", pem, 0, NULL, err)) < 0 ||
            (r = plant(plants, SA_DIR "/namespace", "default", 0, NULL, err)) < 0)
            goto fail;
        add_file(files, SA_DIR "/token", "kubernetes_token", "T1552", false);
        add_file(files, SA_DIR "/ca.crt", "kubernetes_ca", "T1552", false);
        add_file(files, SA_DIR "/namespace", "kubernetes_namespace", "T1552", false);
        for (size_t i = 0; i < AJ_ARRAY_SIZE(device_decoys); i++)
            add_file(files, device_decoys[i].path, "device", device_decoys[i].technique, true);
        (void)json_array_append_new(info, json_pack("{s:s, s:s}", "kind", "docker_socket", "path", AJ_DECOY_SOCKET));
        (void)json_array_append_new(info, json_pack("{s:s, s:s, s:s}", "kind", "kubernetes_token", "path",
                                                    SA_DIR "/token", "subject_suffix", sandbox_id));
        {
            json_t *paths = json_array();
            for (size_t i = 0; paths && i < AJ_ARRAY_SIZE(device_decoys); i++)
                (void)json_array_append_new(paths, json_string(device_decoys[i].path));
            if (paths)
                (void)json_array_append_new(info, json_pack("{s:s, s:o}", "kind", "devices", "paths", paths));
        }
    }
    if (pol->cloud_decoys) {
        char key_id[32], secret[64], creds[256];
        /* AKIA + 16 characters: the first 16 of the sandbox id, upper case. */
        snprintf(key_id, sizeof(key_id), "AKIA%.16s", sandbox_id);
        for (char *p = key_id; *p; p++)
            *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        if ((r = random_b64(30, secret, sizeof(secret))) < 0) {
            r = aj_err(err, -r, "decoy secret");
            goto fail;
        }
        snprintf(creds, sizeof(creds), "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", key_id,
                 secret);
        /* Only into agentjail's own /tmp: in a host directory bound there
         * it would be written to the host and left behind. */
        if (!tmp_is_bound(pol)) {
            if ((r = plant(plants, "/tmp/.aws/credentials", creds, 0, NULL, err)) < 0)
                goto fail;
            add_file(files, "/tmp/.aws/credentials", "aws_credentials_file", "T1552", false);
        }
        if (asprintf(&env_out[0], "AWS_ACCESS_KEY_ID=%s", key_id) < 0 ||
            asprintf(&env_out[1], "AWS_SECRET_ACCESS_KEY=%s", secret) < 0) {
            r = aj_err(err, ENOMEM, "decoy environment");
            goto fail;
        }
        (void)json_array_append_new(info, json_pack("{s:s, s:s, s:s}", "kind", "aws_credentials", "path",
                                                    tmp_is_bound(pol) ? "environment" : "/tmp/.aws/credentials",
                                                    "aws_access_key_id", key_id));
    }
    *ret_info = info;
    return 0;
fail:
    free(env_out[0]);
    free(env_out[1]);
    env_out[0] = env_out[1] = NULL;
    aj_decoy_plants_clear(plants);
    json_decref(info);
    return r;
}

/* Decoys made a moment ago are recognisable by their times. A Docker
 * socket is as old as dockerd, which starts at boot: the host's boot time.
 * A projected service-account token is rewritten by the kubelet every
 * hour or so: some minutes ago. Sandbox side, before the tmpfs goes
 * read-only; init is not in the sandbox's time namespace, so its
 * CLOCK_BOOTTIME is the host's. Best effort: a decoy with the wrong time
 * still works. (ctime and the birth time cannot be set: they stay the
 * run's start, see docs/security-model.md.) */
static void age_decoys(const struct aj_decoy_files *files)
{
    struct timespec now, up, ts[2];
    uint32_t jitter = 0;

    if (clock_gettime(CLOCK_REALTIME, &now) < 0 || clock_gettime(CLOCK_BOOTTIME, &up) < 0)
        return;
    if (getentropy(&jitter, sizeof(jitter)) < 0)
        jitter = 0; /* no jitter: the times are still plausible */
    /* dockerd: a few seconds after the kernel started. */
    ts[0].tv_sec = ts[1].tv_sec = now.tv_sec - up.tv_sec + 4 + (time_t)(jitter % 7);
    ts[0].tv_nsec = ts[1].tv_nsec = (long)(jitter % 1000000000U);
    if (access("/var/run", F_OK) == 0)
        (void)utimensat(AT_FDCWD, AJ_DECOY_SOCKET, ts, AT_SYMLINK_NOFOLLOW);
    /* Device nodes: as old as the real ones beside them (/dev/null, bound
     * from the host's devtmpfs), else the boot. */
    {
        struct stat null;
        if (stat("/dev/null", &null) == 0 && S_ISCHR(null.st_mode)) {
            ts[0] = null.st_atim;
            ts[1] = null.st_mtim;
        }
    }
    for (size_t i = 0; i < files->n; i++)
        if (files->made_at_arm[i])
            (void)utimensat(AT_FDCWD, files->paths[i], ts, AT_SYMLINK_NOFOLLOW);
    /* The token and its directory: 5 to 55 minutes ago. */
    ts[0].tv_sec = ts[1].tv_sec = now.tv_sec - 300 - (time_t)((jitter >> 8) % 3000);
    for (size_t i = 0; i < files->n; i++)
        if (!files->made_at_arm[i])
            (void)utimensat(AT_FDCWD, files->paths[i], ts, AT_SYMLINK_NOFOLLOW);
    if (files->n > 0 && access(SA_DIR, F_OK) == 0)
        (void)utimensat(AT_FDCWD, SA_DIR, ts, AT_SYMLINK_NOFOLLOW);
}

/* An empty file at path (a /dev name), its missing parents made 0755. */
static int make_device_decoy(const char *path, struct aj_error *err)
{
    char dir[64];
    _cleanup_close_ int fd = -1;

    for (const char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
        size_t len = (size_t)(p - path);
        if (len >= sizeof(dir))
            return aj_err(err, ENAMETOOLONG, "decoy %s", path);
        memcpy(dir, path, len);
        dir[len] = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return aj_err(err, errno, "decoy dir %s", dir);
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0660);
    if (fd < 0)
        return aj_err(err, errno, "decoy %s", path);
    if (fchmod(fd, 0660) < 0) /* whatever the umask */
        return aj_err(err, errno, "decoy %s", path);
    return 0;
}

int aj_decoy_child_arm(const struct aj_decoy_files *files, int *ret_sock, int file_fds[AJ_DECOY_MAX_FILES],
                       struct aj_error *err)
{
    _cleanup_close_ int sock = -1, run = -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct aj_mount_attr ro = {.attr_set = AJ_MOUNT_ATTR_RDONLY};
    mode_t old;

    *ret_sock = -1;
    for (size_t i = 0; i < AJ_DECOY_MAX_FILES; i++)
        file_fds[i] = -1;
    if (files->n == 0)
        return 0;
    if (access("/var/run", F_OK) == 0) {
        sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (sock < 0)
            return aj_err(err, errno, "decoy socket");
        strcpy(sa.sun_path, AJ_DECOY_SOCKET);
        /* srw-rw----, as dockerd makes it; the payload is the owner (a
         * rootless Docker's socket is its user's). */
        old = umask(0117);
        if (bind(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            umask(old);
            return aj_err(err, errno, "bind %s", AJ_DECOY_SOCKET);
        }
        umask(old);
        if (listen(sock, 16) < 0)
            return aj_err(err, errno, "listen %s", AJ_DECOY_SOCKET);
    }
    for (size_t i = 0; i < files->n; i++) {
        int r = files->made_at_arm[i] ? make_device_decoy(files->paths[i], err) : 0;
        if (r < 0)
            return r;
    }
    age_decoys(files);
    for (size_t i = 0; i < files->n; i++) {
        file_fds[i] = open(files->paths[i], O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (file_fds[i] < 0) {
            int e = errno;
            for (size_t j = 0; j < i; j++)
                (void)close(file_fds[j]);
            return aj_err(err, e, "open decoy %s", files->paths[i]);
        }
    }
    /* The decoys stay as they are: their tmpfs becomes read-only. */
    run = open("/var/run", O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (run >= 0 && aj_sys_mount_setattr(run, "", AT_EMPTY_PATH, &ro) < 0) {
        int e = errno;
        for (size_t j = 0; j < files->n; j++)
            (void)close(file_fds[j]);
        return aj_err(err, e, "make /var/run read-only");
    }
    *ret_sock = TAKE_FD(sock);
    return 0;
}

int aj_decoy_parent_lease(int fd, int sig, pid_t owner_tid, struct aj_error *err)
{
    /* To one thread, not the process: the one that blocks sig and reads
     * it from its signalfd. Process-directed, another thread could take
     * it (the canary lost) or, not blocking it, die of it (SIGRTMIN's
     * default action ends the process). */
    struct f_owner_ex owner = {.type = F_OWNER_TID, .pid = owner_tid};

    if (fcntl(fd, F_SETSIG, sig) < 0 || fcntl(fd, F_SETOWN_EX, &owner) < 0)
        return aj_err(err, errno, "decoy signal");
    /* A write lease: broken by any open, for reading too. */
    if (fcntl(fd, F_SETLEASE, F_WRLCK) < 0)
        return aj_err(err, errno, "lease on a decoy file (fs.leases-enable?)");
    return 0;
}

json_t *aj_decoy_lease_event(const struct aj_decoy_files *files, size_t i, struct aj_audit *a)
{
    json_t *ev = aj_audit_event(a, AJ_EV_CANARY, AJ_SEV_HIGH);

    if (ev && i < files->n) {
        (void)json_object_set_new(ev, "decoy", json_string(files->kinds[i]));
        (void)json_object_set_new(ev, "path", json_string(files->paths[i]));
        (void)json_object_set_new(ev, "access", json_string("open"));
        aj_audit_technique(ev, files->techniques[i] ? files->techniques[i] : "T1552");
    }
    return ev;
}

void aj_decoy_release_lease(int fd)
{
    /* Let the opener through: it reads the decoy, which is the point. */
    (void)fcntl(fd, F_SETLEASE, F_UNLCK);
}

int aj_decoy_accept(int sock)
{
    return accept4(sock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
}

json_t *aj_decoy_conn_event(int c, struct aj_audit *a, bool reply_403)
{
    static const char reply[] = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
                                "Connection: close\r\n\r\nforbidden\n";
    char buf[512];
    ssize_t n;
    json_t *ev = aj_audit_event(a, AJ_EV_CANARY, AJ_SEV_HIGH);

    if (ev) {
        (void)json_object_set_new(ev, "decoy", json_string("docker_socket"));
        (void)json_object_set_new(ev, "path", json_string(AJ_DECOY_SOCKET));
        (void)json_object_set_new(ev, "access", json_string("connect"));
        aj_audit_technique(ev, "T1611");
        /* The request line, if the client sent one: what the tool wanted. */
        n = recv(c, buf, sizeof(buf) - 1, MSG_DONTWAIT);
        if (n > 0) {
            buf[n] = '\0';
            buf[strcspn(buf, "\r\n")] = '\0';
            for (char *p = buf; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                    *p = '?';
            (void)json_object_set_new(ev, "request", json_string(buf));
        }
    }
    if (reply_403)
        (void)send(c, reply, sizeof(reply) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)close(c);
    return ev;
}
