/* SPDX-License-Identifier: Apache-2.0 */
/* Forwarding between replicas of a PostgreSQL store. A run or session
 * lives on the replica that started it (its sandbox, its workspace); a
 * request for it that reaches another replica is proxied to that one,
 * at the address it advertised in its "replicas" row: the request
 * streamed in (a file PUT as it comes), the response streamed back (an
 * SSE stream, a file GET), the client's bearer token passed through so
 * that the owner authenticates the tenant itself (no tenant name is ever
 * sent, none would be believed), a hop header so that a request is
 * forwarded once at most, and every wait bounded (replica.timeout).
 *
 * A small HTTP/1.1 client of our own rather than libcurl: the request
 * is pushed piece by piece as libmicrohttpd hands us the client's body
 * and the response pulled by libmicrohttpd's content reader, both in the
 * connection's own thread (thread per connection), which is the shape of
 * a plain socket and not of curl's callbacks. TLS with GnuTLS, which
 * libmicrohttpd already links. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "srv_fwd.h"

#define FWD_HEAD_MAX 16384 /* the owner's status line and headers */
#define FWD_BUF 16384

/* Every forwarded request with a connection to its owner, so that a
 * server shutting down cuts them (a thread waiting on another replica's
 * run would otherwise hold the shutdown up to the run's timeout). */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct srv_fwd *open_list;
static bool stopping;

static uint64_t n_ok, n_unreachable, n_loop; /* atomic: srv_fwd_counts */

void srv_fwd_counts(uint64_t *ok, uint64_t *unreachable, uint64_t *loop)
{
    *ok = __atomic_load_n(&n_ok, __ATOMIC_RELAXED);
    *unreachable = __atomic_load_n(&n_unreachable, __ATOMIC_RELAXED);
    *loop = __atomic_load_n(&n_loop, __ATOMIC_RELAXED);
}

static void count(uint64_t *n)
{
    (void)__atomic_add_fetch(n, 1, __ATOMIC_RELAXED);
}

/* ---- addresses ---------------------------------------------------------------------------------- */

struct peer {
    bool unix_sock, tls;
    char host[256]; /* without [] */
    char port[6];
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static int peer_parse(const char *spec, struct peer *p, char *why, size_t why_size)
{
    const char *h, *end, *colon;
    size_t n;

    *p = (struct peer){0};
    /* It goes into a header (the hop header) and messages as it is. */
    for (const unsigned char *c = (const unsigned char *)spec; *c; c++)
        if (*c < 0x20 || *c == 0x7f) {
            (void)snprintf(why, why_size, "a control character in the address");
            return -1;
        }
    if (strncmp(spec, "unix:", 5) == 0) {
        if (spec[5] != '/' || strlen(spec + 5) >= sizeof(p->path)) {
            (void)snprintf(why, why_size, "unix:PATH needs an absolute path shorter than %zu bytes", sizeof(p->path));
            return -1;
        }
        p->unix_sock = true;
        memcpy(p->path, spec + 5, strlen(spec + 5) + 1);
        return 0;
    }
    if (strncmp(spec, "http://", 7) == 0) {
        h = spec + 7;
    } else if (strncmp(spec, "https://", 8) == 0) {
        h = spec + 8;
        p->tls = true;
    } else {
        (void)snprintf(why, why_size, "'%.200s' is not http://HOST:PORT, https://HOST:PORT or unix:/PATH", spec);
        return -1;
    }
    end = h + strlen(h);
    if (end > h && end[-1] == '/')
        end--; /* "http://h:8080/" as people write it */
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (!rb || rb[1] != ':') {
            (void)snprintf(why, why_size, "'%.200s': an IPv6 address is [ADDR]:PORT", spec);
            return -1;
        }
        n = (size_t)(rb - h - 1);
        colon = rb + 1;
        if (n == 0 || n >= sizeof(p->host)) {
            (void)snprintf(why, why_size, "'%.200s': not an IPv6 address", spec);
            return -1;
        }
        memcpy(p->host, h + 1, n);
        struct in6_addr a6;
        if (inet_pton(AF_INET6, p->host, &a6) != 1) {
            (void)snprintf(why, why_size, "'%.200s': not an IPv6 address", spec);
            return -1;
        }
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        if (!colon || colon == h || (size_t)(colon - h) >= sizeof(p->host)) {
            (void)snprintf(why, why_size, "'%.200s': HOST:PORT is required (no path, no user)", spec);
            return -1;
        }
        memcpy(p->host, h, (size_t)(colon - h));
        if (strspn(p->host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != strlen(p->host)) {
            (void)snprintf(why, why_size, "'%.200s': the host is an IPv4 address, [IPv6] or a DNS name", spec);
            return -1;
        }
    }
    n = (size_t)(end - colon - 1);
    if (n == 0 || n > 5 || strspn(colon + 1, "0123456789") < n) {
        (void)snprintf(why, why_size, "'%.200s': the port is 1 to 65535, and nothing after it", spec);
        return -1;
    }
    memcpy(p->port, colon + 1, n);
    p->port[n] = '\0';
    unsigned long port = strtoul(p->port, NULL, 10);
    if (port == 0 || port > 65535) {
        (void)snprintf(why, why_size, "'%.200s': the port is 1 to 65535", spec);
        return -1;
    }
    return 0;
}

int srv_peer_check(const char *spec, char *why, size_t why_size)
{
    struct peer p;

    return peer_parse(spec, &p, why, why_size);
}

static gnutls_certificate_credentials_t tls_cred; /* https peers; NULL until srv_fwd_init */
static bool tls_cred_none; /* set up, but no CA at all (no system store): https peers fail verification */

static int load_ca(const char *path, gnutls_certificate_credentials_t *ret, char *why, size_t why_size)
{
    gnutls_certificate_credentials_t cred = NULL;
    struct stat st;
    int e;

    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
        (void)snprintf(why, why_size, "%s: %s", path, errno ? strerror(errno) : "not a regular file");
        return -1;
    }
    e = gnutls_certificate_allocate_credentials(&cred);
    if (e >= 0)
        e = gnutls_certificate_set_x509_trust_file(cred, path, GNUTLS_X509_FMT_PEM);
    if (e <= 0) {
        (void)snprintf(why, why_size, "%s: no PEM CA certificate in it%s%s", path, e < 0 ? ": " : "",
                       e < 0 ? gnutls_strerror(e) : "");
        if (cred)
            gnutls_certificate_free_credentials(cred);
        return -1;
    }
    *ret = cred;
    return 0;
}

int srv_peer_check_ca(const char *path, char *why, size_t why_size)
{
    gnutls_certificate_credentials_t cred = NULL;

    errno = 0;
    if (load_ca(path, &cred, why, why_size) < 0)
        return -1;
    gnutls_certificate_free_credentials(cred);
    return 0;
}

int srv_fwd_init(const struct srv_config *cfg, char *msg, size_t msg_size)
{
    char why[512];

    (void)pthread_mutex_lock(&open_lock);
    stopping = false; /* a server started again in this process (the library's callers may) */
    (void)pthread_mutex_unlock(&open_lock);
    if (!cfg->store_pg || tls_cred)
        return 0;
    if (cfg->replica_ca_path) {
        errno = 0;
        if (load_ca(cfg->replica_ca_path, &tls_cred, why, sizeof(why)) < 0) {
            (void)snprintf(msg, msg_size, "replica.ca: %s", why);
            return -1;
        }
        return 0;
    }
    if (gnutls_certificate_allocate_credentials(&tls_cred) < 0) {
        (void)snprintf(msg, msg_size, "replica: out of memory");
        return -1;
    }
    /* A container without a CA bundle: https peers fail verification
     * (with the reason), http and unix peers are unaffected. */
    tls_cred_none = gnutls_certificate_set_x509_system_trust(tls_cred) <= 0;
    return 0;
}

void srv_fwd_cleanup(void)
{
    if (tls_cred)
        gnutls_certificate_free_credentials(tls_cred);
    tls_cred = NULL;
}

/* ---- the connection to the owner ------------------------------------------------------------------ */

struct srv_fwd {
    int fd;
    gnutls_session_t tls; /* NULL: plain */
    char addr[300];       /* as advertised, for messages */
    unsigned idle_s;
    bool chunked_up;    /* the request body goes chunked */
    int send_err;       /* the first failure sending the body (errno), 0: none */
    /* the response */
    char *buf;
    size_t pos, len;
    enum { BODY_LENGTH, BODY_CHUNKED, BODY_CLOSE } mode;
    uint64_t left; /* BODY_LENGTH: bytes to come; BODY_CHUNKED: of this chunk */
    bool chunk_started, done;
    unsigned status;
    int64_t content_length; /* -1: not said */
    char ctype[128], retry_after[16], cache_control[64];
    struct srv_fwd *prev, *next; /* open: the registry's (srv_fwd_shutdown) */
    bool listed;
};

/* 0, or -1 when the server is shutting down. */
static int list_add(struct srv_fwd *f)
{
    int rc = -1;

    (void)pthread_mutex_lock(&open_lock);
    if (!stopping) {
        f->next = open_list;
        if (open_list)
            open_list->prev = f;
        open_list = f;
        f->listed = true;
        rc = 0;
    }
    (void)pthread_mutex_unlock(&open_lock);
    return rc;
}

void srv_fwd_shutdown(void)
{
    (void)pthread_mutex_lock(&open_lock);
    stopping = true;
    /* The fds stay open (their threads close them): reads and writes on
     * them end at once. */
    for (struct srv_fwd *f = open_list; f; f = f->next)
        (void)shutdown(f->fd, SHUT_RDWR);
    (void)pthread_mutex_unlock(&open_lock);
}

void srv_fwd_free(struct srv_fwd *f)
{
    if (!f)
        return;
    if (f->listed) {
        (void)pthread_mutex_lock(&open_lock);
        if (f->prev)
            f->prev->next = f->next;
        else
            open_list = f->next;
        if (f->next)
            f->next->prev = f->prev;
        (void)pthread_mutex_unlock(&open_lock);
    }
    if (f->tls) {
        /* No bye: the connection is ours alone and goes now. */
        gnutls_deinit(f->tls);
    }
    if (f->fd >= 0)
        (void)close(f->fd);
    free(f->buf);
    free(f);
}

static int set_timeouts(int fd, unsigned seconds)
{
    struct timeval tv = {.tv_sec = (time_t)seconds};

    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
        return -errno;
    return 0;
}

/* A non-blocking connect bounded by timeout_ms, then back to blocking
 * with send/receive timeouts: 0, or -errno. */
static int connect_bounded(int fd, const struct sockaddr *sa, socklen_t sl, int timeout_ms)
{
    int flags = fcntl(fd, F_GETFL);
    int err = 0;
    socklen_t el = sizeof(err);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    if (connect(fd, sa, sl) < 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int r;
        /* EAGAIN: a unix socket whose backlog is full (its server is
         * stuck): refused now rather than waited for. */
        if (errno != EINPROGRESS)
            return -errno;
        do
            r = poll(&pfd, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r == 0)
            return -ETIMEDOUT;
        if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
            return -errno;
        if (err)
            return -err;
    }
    if (fcntl(fd, F_SETFL, flags) < 0)
        return -errno;
    return 0;
}

static int peer_connect(struct srv_fwd *f, const struct peer *p, unsigned timeout_s, char *why, size_t why_size)
{
    int rc = -ECONNREFUSED;

    if (p->unix_sock) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, p->path, strlen(p->path) + 1);
        f->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (f->fd < 0)
            rc = -errno;
        else
            rc = connect_bounded(f->fd, (struct sockaddr *)&sa, sizeof(sa), (int)timeout_s * 1000);
    } else {
        /* A name is resolved here, outside the bound (getaddrinfo has
         * none): advertise an address where that matters. */
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
        int g = getaddrinfo(p->host, p->port, &hints, &res);
        if (g != 0) {
            (void)snprintf(why, why_size, "%s: %s", p->host, gai_strerror(g));
            return -1;
        }
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            f->fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (f->fd < 0) {
                rc = -errno;
                continue;
            }
            rc = connect_bounded(f->fd, a->ai_addr, a->ai_addrlen, (int)timeout_s * 1000);
            if (rc == 0)
                break;
            (void)close(f->fd);
            f->fd = -1;
        }
        freeaddrinfo(res);
    }
    if (rc == 0)
        rc = set_timeouts(f->fd, timeout_s);
    if (rc < 0) {
        (void)snprintf(why, why_size, "%s", strerror(-rc));
        return -1;
    }
    if (!p->tls)
        return 0;
    /* https: the peer's certificate must chain to replica.ca (or the
     * system's CAs) and name the advertised host. */
    struct in6_addr a6;
    bool literal = inet_pton(AF_INET6, p->host, &a6) == 1 || inet_pton(AF_INET, p->host, &a6) == 1;
    int e;
    if (!tls_cred) {
        (void)snprintf(why, why_size, "TLS is not set up on this replica");
        return -1;
    }
    if ((e = gnutls_init(&f->tls, GNUTLS_CLIENT | GNUTLS_NO_SIGNAL)) < 0 ||
        (e = gnutls_set_default_priority(f->tls)) < 0 ||
        (e = gnutls_credentials_set(f->tls, GNUTLS_CRD_CERTIFICATE, tls_cred)) < 0 ||
        (!literal && (e = gnutls_server_name_set(f->tls, GNUTLS_NAME_DNS, p->host, strlen(p->host))) < 0)) {
        (void)snprintf(why, why_size, "TLS: %s", gnutls_strerror(e));
        return -1;
    }
    gnutls_session_set_verify_cert(f->tls, p->host, 0);
    gnutls_transport_set_int(f->tls, f->fd);
    gnutls_handshake_set_timeout(f->tls, timeout_s * 1000);
    do
        e = gnutls_handshake(f->tls);
    while (e < 0 && !gnutls_error_is_fatal(e) && e != GNUTLS_E_AGAIN);
    if (e < 0) {
        if (e == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
            gnutls_datum_t out = {0};
            unsigned st = gnutls_session_get_verify_cert_status(f->tls);
            if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &out, 0) >= 0) {
                (void)snprintf(why, why_size, "TLS: the peer's certificate is not trusted%s: %s",
                               tls_cred_none ? " (no replica.ca and no system CAs)" : "", out.data);
                gnutls_free(out.data);
                return -1;
            }
        }
        (void)snprintf(why, why_size, "TLS: %s", e == GNUTLS_E_AGAIN ? "timed out" : gnutls_strerror(e));
        return -1;
    }
    return 0;
}

/* All of p: 0 or -errno (-ETIMEDOUT: the owner stopped reading). */
static int io_write(struct srv_fwd *f, const char *p, size_t n)
{
    while (n) {
        ssize_t k;
        if (f->tls) {
            k = gnutls_record_send(f->tls, p, n);
            if (k == GNUTLS_E_INTERRUPTED)
                continue;
            if (k < 0)
                return k == GNUTLS_E_AGAIN ? -ETIMEDOUT : -EPIPE;
        } else {
            k = send(f->fd, p, n, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                return errno == EAGAIN ? -ETIMEDOUT : -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Bytes read, 0 at the end, -ETIMEDOUT after idle_s without any, -errno. */
static ssize_t io_read(struct srv_fwd *f, char *p, size_t n)
{
    for (;;) {
        ssize_t k;
        if (f->tls) {
            k = gnutls_record_recv(f->tls, p, n);
            if (k == GNUTLS_E_INTERRUPTED)
                continue;
            if (k == GNUTLS_E_PREMATURE_TERMINATION)
                return 0; /* the owner closed without a bye (Connection: close) */
            if (k < 0)
                return k == GNUTLS_E_AGAIN ? -ETIMEDOUT : -EPROTO;
            return k;
        }
        k = recv(f->fd, p, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno == EAGAIN ? -ETIMEDOUT : -errno;
        return k;
    }
}

/* More bytes into buf (compacted first): their count, 0 at the end, <0. */
static ssize_t fill(struct srv_fwd *f)
{
    ssize_t k;

    if (f->pos) {
        memmove(f->buf, f->buf + f->pos, f->len - f->pos);
        f->len -= f->pos;
        f->pos = 0;
    }
    if (f->len == FWD_BUF)
        return -EMSGSIZE;
    k = io_read(f, f->buf + f->len, FWD_BUF - f->len);
    if (k > 0)
        f->len += (size_t)k;
    return k;
}

/* The path as it goes on the request line: libmicrohttpd hands it
 * decoded, so every byte but unreserved ones and '/' is escaped again (a
 * file name with a space, a '%' or a CR stays one path, never a header). */
static char *encode_path(const char *url)
{
    size_t n = strlen(url);
    char *out = malloc(3 * n + 1), *o = out;

    if (!out)
        return NULL;
    for (const unsigned char *u = (const unsigned char *)url; *u; u++) {
        if ((*u >= 'a' && *u <= 'z') || (*u >= 'A' && *u <= 'Z') || (*u >= '0' && *u <= '9') || *u == '-' ||
            *u == '.' || *u == '_' || *u == '~' || *u == '/')
            *o++ = (char)*u;
        else
            o += sprintf(o, "%%%02X", *u);
    }
    *o = '\0';
    return out;
}

/* A header value from the client, passed on only if it is one line. */
static bool one_line(const char *v)
{
    return v && !strpbrk(v, "\r\n");
}

int srv_fwd_open(struct srv_ctx *ctx, struct MHD_Connection *c, const char *addr, const char *method,
                 const char *url, int64_t body_len, unsigned idle_s, struct srv_fwd **ret, struct srv_reply *reply)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    struct srv_fwd *f = calloc(1, sizeof(*f));
    struct peer p;
    char why[600], *path = NULL, *head = NULL, framing[64] = "", hostport[300];
    int rc;

    *ret = NULL;
    if (!f || !(f->buf = malloc(FWD_BUF + 1))) {
        free(f);
        srv_reply_error(reply, 500, "out of memory");
        return -1;
    }
    f->fd = -1;
    f->idle_s = idle_s;
    f->content_length = -1;
    (void)snprintf(f->addr, sizeof(f->addr), "%s", addr);
    if (peer_parse(addr, &p, why, sizeof(why)) < 0 ||
        peer_connect(f, &p, ctx->cfg.replica_timeout, why, sizeof(why)) < 0) {
        srv_reply_error(reply, 503, "the replica that holds it (%s) cannot be reached: %s; if it has stopped, "
                        "its runs and sessions are marked lost within seconds", f->addr, why);
        count(&n_unreachable);
        srv_fwd_free(f);
        return -1;
    }
    if (list_add(f) < 0) {
        srv_reply_error(reply, 503, "the server is shutting down");
        srv_fwd_free(f);
        return -1;
    }
    if (body_len >= 0)
        (void)snprintf(framing, sizeof(framing), "Content-Length: %" PRId64 "\r\n", body_len);
    else if (body_len == -1) {
        (void)snprintf(framing, sizeof(framing), "Transfer-Encoding: chunked\r\n");
        f->chunked_up = true;
    }
    if (p.unix_sock)
        (void)snprintf(hostport, sizeof(hostport), "localhost");
    else
        (void)snprintf(hostport, sizeof(hostport), strchr(p.host, ':') ? "[%s]:%s" : "%s:%s", p.host, p.port);
    path = encode_path(url);
    /* The token as the client sent it: the owner authenticates the tenant
     * itself. The hop header names this replica's address (or "-"). */
    if (!path || asprintf(&head,
                          "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s%s%s%s%s%s: %s\r\n%s\r\n",
                          method, path, hostport, one_line(auth) ? "Authorization: " : "",
                          one_line(auth) ? auth : "", one_line(auth) ? "\r\n" : "",
                          one_line(ctype) ? "Content-Type: " : "", one_line(ctype) ? ctype : "",
                          one_line(ctype) ? "\r\n" : "", SRV_FWD_HEADER,
                          ctx->cfg.replica_advertise ? ctx->cfg.replica_advertise : "-", framing) < 0) {
        free(path);
        srv_reply_error(reply, 500, "out of memory");
        srv_fwd_free(f);
        return -1;
    }
    free(path);
    rc = io_write(f, head, strlen(head));
    free(head);
    if (rc < 0) {
        srv_reply_error(reply, 503, "the replica that holds it (%s) did not take the request: %s", f->addr,
                        strerror(-rc));
        count(&n_unreachable);
        srv_fwd_free(f);
        return -1;
    }
    *ret = f;
    return 0;
}

void srv_fwd_write(struct srv_fwd *f, const char *data, size_t len)
{
    char size[24];
    int rc = 0;

    if (f->send_err || !len)
        return;
    if (f->chunked_up) {
        (void)snprintf(size, sizeof(size), "%zx\r\n", len);
        rc = io_write(f, size, strlen(size));
    }
    if (rc == 0)
        rc = io_write(f, data, len);
    if (rc == 0 && f->chunked_up)
        rc = io_write(f, "\r\n", 2);
    if (rc < 0)
        f->send_err = -rc;
}

/* ---- the response ----------------------------------------------------------------------------------- */

static void header_copy(char *dst, size_t size, const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    (void)snprintf(dst, size, "%s", v);
}

/* The status line and headers, from buf: 0, or -1 and why. */
static int read_head(struct srv_fwd *f, char *why, size_t why_size)
{
    char *end = NULL, *line, *next;
    ssize_t k;

    for (;;) {
        f->buf[f->len] = '\0';
        end = memmem(f->buf, f->len, "\r\n\r\n", 4);
        if (end)
            break;
        if (f->len >= FWD_HEAD_MAX) {
            (void)snprintf(why, why_size, "its response headers are larger than %d bytes", FWD_HEAD_MAX);
            return -1;
        }
        k = io_read(f, f->buf + f->len, FWD_HEAD_MAX - f->len);
        if (k == 0) {
            (void)snprintf(why, why_size, "it closed the connection without an answer");
            return -1;
        }
        if (k < 0) {
            if (k == -ETIMEDOUT)
                (void)snprintf(why, why_size, "it did not answer within %u s", f->idle_s);
            else
                (void)snprintf(why, why_size, "%s", strerror((int)-k));
            return -1;
        }
        f->len += (size_t)k;
    }
    *end = '\0';
    f->pos = (size_t)(end + 4 - f->buf);
    if (strncmp(f->buf, "HTTP/1.", 7) != 0 || strlen(f->buf) < 12 || f->buf[8] != ' ') {
        (void)snprintf(why, why_size, "its answer is not HTTP/1.x");
        return -1;
    }
    f->status = (unsigned)strtoul(f->buf + 9, NULL, 10);
    if (f->status < 100 || f->status > 599) {
        (void)snprintf(why, why_size, "its answer has no status");
        return -1;
    }
    f->mode = BODY_CLOSE;
    for (line = strstr(f->buf, "\r\n"); line; line = next) {
        char *colon;
        line += 2;
        next = strstr(line, "\r\n");
        if (next)
            *next = '\0';
        colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        if (strcasecmp(line, "Content-Length") == 0) {
            char *e;
            errno = 0;
            unsigned long long n = strtoull(colon + 1, &e, 10);
            if (errno || e == colon + 1) {
                (void)snprintf(why, why_size, "its Content-Length is not a number");
                return -1;
            }
            f->content_length = (int64_t)n;
            if (f->mode != BODY_CHUNKED) {
                f->mode = BODY_LENGTH;
                f->left = n;
            }
        } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
            if (!strstr(colon + 1, "chunked")) {
                (void)snprintf(why, why_size, "its Transfer-Encoding is not chunked");
                return -1;
            }
            f->mode = BODY_CHUNKED;
            f->content_length = -1;
        } else if (strcasecmp(line, "Content-Type") == 0) {
            header_copy(f->ctype, sizeof(f->ctype), colon + 1);
        } else if (strcasecmp(line, "Retry-After") == 0) {
            header_copy(f->retry_after, sizeof(f->retry_after), colon + 1);
        } else if (strcasecmp(line, "Cache-Control") == 0) {
            header_copy(f->cache_control, sizeof(f->cache_control), colon + 1);
        }
    }
    return 0;
}

/* The next bytes of the body, decoded: their count, 0 at its end, <0. */
static ssize_t body_read(struct srv_fwd *f, char *out, size_t max)
{
    for (;;) {
        size_t have = f->len - f->pos;
        ssize_t k;

        if (f->done)
            return 0;
        if (f->mode == BODY_LENGTH && f->left == 0) {
            f->done = true;
            return 0;
        }
        if (f->mode == BODY_CHUNKED && f->left == 0) {
            /* [CRLF after the previous chunk] SIZE[;ext] CRLF */
            char *crlf;
            if (f->chunk_started && have >= 2) {
                if (memcmp(f->buf + f->pos, "\r\n", 2) != 0)
                    return -EPROTO;
                f->pos += 2;
                f->chunk_started = false;
                continue;
            }
            f->buf[f->len] = '\0';
            crlf = !f->chunk_started ? memmem(f->buf + f->pos, have, "\r\n", 2) : NULL;
            if (crlf) {
                char *e;
                unsigned long long n = strtoull(f->buf + f->pos, &e, 16);
                if (e == f->buf + f->pos)
                    return -EPROTO;
                f->pos = (size_t)(crlf + 2 - f->buf);
                if (n == 0) {
                    f->done = true; /* trailers, if any, are not needed: the connection closes */
                    return 0;
                }
                f->left = n;
                f->chunk_started = true;
                continue;
            }
            k = fill(f);
            if (k <= 0)
                return k == 0 ? -EPROTO : k;
            continue;
        }
        if (have == 0) {
            k = fill(f);
            if (k == 0 && f->mode == BODY_CLOSE) {
                f->done = true;
                return 0;
            }
            if (k <= 0)
                return k == 0 ? -EPROTO : k;
            continue;
        }
        size_t n = have < max ? have : max;
        if (f->mode != BODY_CLOSE && n > f->left)
            n = (size_t)f->left;
        memcpy(out, f->buf + f->pos, n);
        f->pos += n;
        if (f->mode != BODY_CLOSE)
            f->left -= n;
        return (ssize_t)n;
    }
}

static ssize_t response_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct srv_fwd *f = cls;
    ssize_t k;

    (void)pos;
    k = body_read(f, buf, max);
    if (k > 0)
        return k;
    /* Cut short (the owner stopped, went quiet past the bound): the
     * client sees the connection end without a complete body. */
    return k == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void response_free(void *cls)
{
    srv_fwd_free(cls);
}

int srv_fwd_finish(struct srv_fwd *f, struct MHD_Connection *c, enum MHD_Result *ret, struct srv_reply *reply)
{
    struct MHD_Response *resp;
    char why[300];
    int rc = 0;

    if (f->chunked_up && !f->send_err && io_write(f, "0\r\n\r\n", 5) < 0)
        f->send_err = EPIPE;
    /* The body could not all be sent: the owner may have answered early
     * (a 413, a 404) and closed; its answer, if any, is the one to give. */
    if (set_timeouts(f->fd, f->idle_s) < 0 || read_head(f, why, sizeof(why)) < 0) {
        bool cut;
        (void)pthread_mutex_lock(&open_lock);
        cut = stopping;
        (void)pthread_mutex_unlock(&open_lock);
        if (cut)
            srv_reply_error(reply, 503, "this replica is shutting down: the request forwarded to the replica that "
                            "holds it (%s) was cut (what it started there goes on)", f->addr);
        else if (f->send_err)
            srv_reply_error(reply, 503, "the replica that holds it (%s) stopped taking the request body: %s",
                            f->addr, strerror(f->send_err));
        else
            srv_reply_error(reply, 503, "the replica that holds it (%s): %s", f->addr, why);
        count(&n_unreachable);
        srv_fwd_free(f);
        return -1;
    }
    count(&n_ok);
    resp = MHD_create_response_from_callback(f->content_length >= 0 ? (uint64_t)f->content_length
                                                                      : MHD_SIZE_UNKNOWN,
                                             FWD_BUF, response_read, f, response_free);
    if (!resp) {
        srv_fwd_free(f);
        *ret = MHD_NO;
        return 0;
    }
    if ((f->ctype[0] && MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, f->ctype) != MHD_YES) ||
        (f->retry_after[0] && MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, f->retry_after) != MHD_YES) ||
        (f->cache_control[0] &&
         MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, f->cache_control) != MHD_YES))
        rc = -1;
    *ret = rc < 0 ? MHD_NO : MHD_queue_response(c, f->status, resp);
    MHD_destroy_response(resp); /* f goes with it (response_free) */
    return 0;
}

/* ---- which requests go ---------------------------------------------------------------------------------- */

int srv_fwd_route(struct srv_ctx *ctx, const struct srv_tenant *t, struct MHD_Connection *c, const char *url,
                  char **ret_addr, struct srv_reply *reply)
{
    char id[33], *addr = NULL;
    const char *rest, *hop;
    bool session;
    int rc;

    *ret_addr = NULL;
    if (!ctx->cfg.store_pg)
        return 0;
    if (strncmp(url, "/v1/runs/", 9) == 0) {
        session = false;
        rest = url + 9;
    } else if (strncmp(url, "/v1/sessions/", 13) == 0) {
        session = true;
        rest = url + 13;
    } else {
        return 0;
    }
    if (strspn(rest, "0123456789abcdef") != 32 || (rest[32] && rest[32] != '/'))
        return 0;
    memcpy(id, rest, 32);
    id[32] = '\0';
    /* Running or held here: no store round trip. */
    if (session && srv_session_live_here(ctx->sessions, t, id))
        return 0;
    if (!session) {
        struct srv_run *r = srv_runner_find(ctx->rn, t, id);
        if (r) {
            srv_run_unref(ctx->rn, r);
            return 0;
        }
    }
    rc = srv_store_locate(ctx->store, session, t->name, id, &addr);
    if (rc <= 0 || !addr) /* a store error: the handler reads the store too, and says so */
        return 0;
    hop = MHD_lookup_connection_value(c, MHD_HEADER_KIND, SRV_FWD_HEADER);
    if (hop) {
        srv_reply_error(reply, 508,
                        "%s %s is live on the replica at %s, and this request was forwarded already (by %.200s): "
                        "a request is forwarded once at most; is an advertise address reaching the wrong replica?",
                        session ? "session" : "run", id, addr, one_line(hop) ? hop : "?");
        count(&n_loop);
        free(addr);
        return -1;
    }
    *ret_addr = addr;
    return 1;
}
