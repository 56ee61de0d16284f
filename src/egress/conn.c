/* SPDX-License-Identifier: Apache-2.0 */
/* One client connection (one TCP connection a program in the sandbox made
 * to the relay), from the request head to close:
 *
 *   HEAD ── CONNECT, not brokered ──> RESOLVE > DIAL > TUNNEL (bytes both ways)
 *        ── CONNECT, brokered ──────> RESOLVE > DIAL (TCP + verified TLS) >
 *                                     TLS accept with a minted leaf > HEAD (inner)
 *        ── absolute-form http:// ──> RESOLVE > DIAL > BODY (one request, its
 *                                     body framed by http_parser; response
 *                                     streamed until the upstream closes)
 *
 * One request per connection: the upstream gets "Connection: close", so
 * each request is checked on its own and a request pipelined behind an
 * allowed one is never carried to that upstream unchecked. Clients reopen.
 *
 * Nothing here writes a secret's value anywhere but the upstream's socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/util.h>
#include <http_parser.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "eg.h"

#define MAX_HEAD (64 * 1024)    /* request head; larger: 431 */
#define MAX_HEADERS 128
#define MAX_ADDRS 8
#define HIGH_WATER (256 * 1024) /* per direction buffered before reading pauses */
#define HEAD_TIMEOUT_S 30       /* slow clients: the head must arrive in this */
#define WRITE_TIMEOUT_S 60      /* a peer that stops reading */
#define CONNECT_TIMEOUT_S 10    /* TCP (and for brokered hosts TLS) to the upstream */
/* After a refusal, what the client still sends is read and dropped (up to
 * LINGER_MAX bytes, LINGER_IDLE_S apart) before the socket closes: closed
 * with unread data, it would answer the client with a reset, which can
 * reach the client before it has read the refusal (a client still sending
 * a 100 KB head gets EPIPE instead of the 431). */
#define LINGER_MAX (4 * 1024 * 1024)
#define LINGER_IDLE_S 2

enum cstate { ST_HEAD, ST_RESOLVE, ST_DIAL, ST_BODY, ST_TUNNEL, ST_CLOSING };

struct hdr {
    size_t name_off, name_len, val_off, val_len;
};

struct conn {
    struct eg *eg;
    struct conn *next, *prev;
    struct bufferevent *cli, *up;
    int cli_fd, up_fd; /* the raw sockets (for shutdown) */
    enum cstate state;
    bool inspected;    /* TLS terminated: the requests inside are seen */
    bool dialled;      /* a net_allowed event is owed at close */
    bool msg_done;     /* the request message (with its body) is complete */
    bool cli_eof, up_eof, cli_shut, up_shut;
    bool linger;       /* an error response: read the client's rest before closing (conn_done) */
    bool lingering;    /* the response is out, the write side shut: dropping what still comes */
    size_t lingered;
    bool dead;
    struct event *free_ev, *deadline;
    struct timespec t0;
    uint64_t bytes_out, bytes_in;

    http_parser parser;
    bool headers_done, last_was_value;
    char *head;
    size_t head_len;
    const char *url;
    size_t url_len;
    struct hdr hdrs[MAX_HEADERS];
    size_t n_hdrs;
    bool too_many_headers;
    size_t scanned;          /* bytes of the head already searched for its end */

    char method[24];
    char host[256];
    int port;
    char *path;              /* origin-form request target */
    char inner_method[24];   /* the request inside an inspected tunnel */
    struct evbuffer *out_head;

    struct evutil_addrinfo *ai_keep;
    struct sockaddr_storage addrs[MAX_ADDRS];
    socklen_t addr_lens[MAX_ADDRS];
    int n_addrs, cur_addr;
    char address[INET6_ADDRSTRLEN];
    struct evdns_getaddrinfo_request *dnsreq;
    char note[600];          /* why the connection ended, for net_allowed */

    /* Request bodies seen in clear, searched for placeholders (scan_body):
     * the last bytes of what came before (a placeholder split across
     * reads), and the secrets already reported for this connection. */
    char *scan;
    size_t scan_len, scan_cap;
    uint32_t body_flagged;
};

static void conn_close(struct conn *c);
static void cli_read(struct bufferevent *bev, void *arg);
static void cli_write(struct bufferevent *bev, void *arg);
static void cli_event(struct bufferevent *bev, short what, void *arg);
static void up_read(struct bufferevent *bev, void *arg);
static void up_write(struct bufferevent *bev, void *arg);
static void up_event(struct bufferevent *bev, short what, void *arg);

/* ---- events --------------------------------------------------------------- */

static long ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

static void emit(struct conn *c, const char *type, const char *reason)
{
    json_t *o = json_object();
    if (!o)
        return;
    json_object_set_new(o, "type", json_string(type));
    if (c->host[0])
        json_object_set_new(o, "host", json_string(c->host));
    if (c->port > 0)
        json_object_set_new(o, "port", json_integer(c->port));
    if (c->address[0])
        json_object_set_new(o, "address", json_string(c->address));
    if (c->method[0]) {
        json_object_set_new(o, "method", json_string(c->inner_method[0] ? c->inner_method : c->method));
        if (c->inner_method[0])
            json_object_set_new(o, "tunnel", json_string("CONNECT"));
    }
    if (c->inspected)
        json_object_set_new(o, "inspected", json_true());
    json_object_set_new(o, "bytes_out", json_integer((json_int_t)c->bytes_out));
    json_object_set_new(o, "bytes_in", json_integer((json_int_t)c->bytes_in));
    json_object_set_new(o, "duration_ms", json_integer(ms_since(&c->t0)));
    if (reason && reason[0])
        json_object_set_new(o, "reason", json_string(reason));
    eg_event(c->eg, o);
}

/* ---- lifetime -------------------------------------------------------------- */

static void free_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    struct eg *eg = c->eg;

    if (c->dnsreq) {
        struct evdns_getaddrinfo_request *r = c->dnsreq;
        c->dnsreq = NULL;
        evdns_getaddrinfo_cancel(r); /* calls dns_done with EVUTIL_EAI_CANCEL */
    }
    if (c->cli)
        bufferevent_free(c->cli);
    if (c->up)
        bufferevent_free(c->up);
    if (c->deadline)
        event_free(c->deadline);
    event_free(c->free_ev);
    if (c->out_head)
        evbuffer_free(c->out_head);
    free(c->head);
    free(c->path);
    free(c->scan);
    if (c->prev)
        c->prev->next = c->next;
    else
        eg->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    eg->n_conns--;
    free(c);
}

/* Deferred: callbacks up the stack may still hold c. */
static void conn_close(struct conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    if (c->dialled)
        emit(c, "net_allowed", c->note);
    if (c->cli)
        bufferevent_disable(c->cli, EV_READ | EV_WRITE);
    if (c->up)
        bufferevent_disable(c->up, EV_READ | EV_WRITE);
    event_active(c->free_ev, EV_TIMEOUT, 0);
}

/* Nothing left to send: for the TLS filter toward the client, the
 * records already encrypted into the socket bufferevent under it count. */
static bool out_empty(struct bufferevent *b)
{
    if (!b)
        return true;
    if (evbuffer_get_length(bufferevent_get_output(b)) != 0)
        return false;
    struct bufferevent *u = bufferevent_get_underlying(b);
    return !u || evbuffer_get_length(bufferevent_get_output(u)) == 0;
}

/* A closing connection's output is all out: close it, or, after an error
 * response, first shut the client's write side and drop what the client
 * still sends (LINGER_MAX), until it closes or goes quiet. */
static void conn_done(struct conn *c)
{
    struct timeval idle = {LINGER_IDLE_S, 0};

    if (!c->linger || c->lingering || !c->cli || c->cli_eof || c->cli_fd < 0) {
        conn_close(c);
        return;
    }
    c->lingering = true;
    if (shutdown(c->cli_fd, SHUT_WR) < 0) {
        conn_close(c);
        return;
    }
    bufferevent_set_timeouts(c->cli, &idle, NULL);
    bufferevent_enable(c->cli, EV_READ);
}

/* Stop reading; close once what is queued has been written. */
static void conn_finish(struct conn *c)
{
    c->state = ST_CLOSING;
    if (c->cli)
        bufferevent_disable(c->cli, EV_READ);
    if (c->up)
        bufferevent_disable(c->up, EV_READ);
    if (out_empty(c->cli) && out_empty(c->up))
        conn_done(c);
}

static void sanitise(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            *s = ' ';
}

/* An error response to the client (and the connection ends). */
static void respond(struct conn *c, int code, const char *status, const char *reason)
{
    char r[800];
    snprintf(r, sizeof(r), "%s", reason);
    sanitise(r);
    if (c->up) {
        bufferevent_free(c->up);
        c->up = NULL;
    }
    struct evbuffer *out = bufferevent_get_output(c->cli);
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nX-Agentjail-Reason: %s\r\nContent-Type: text/plain\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                        code, status, r, strlen(r) + 1, r);
    bufferevent_enable(c->cli, EV_WRITE);
    c->linger = true;
    conn_finish(c);
}

static void deny(struct conn *c, int code, const char *status, const char *reason)
{
    c->dialled = false; /* the last word on this connection is the refusal */
    emit(c, "net_denied", reason);
    respond(c, code, status, reason);
}

static void cap_hit(struct conn *c, const char *which)
{
    char r[120];
    snprintf(r, sizeof(r), "cap %s", which);
    emit(c, "net_cap", r);
    snprintf(c->note, sizeof(c->note), "closed: cap %s", which);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    cap_hit(c, "max_connection_seconds");
    conn_close(c);
}

/* libevent reads and writes at most 16 KiB per callback by default: a
 * bulk download then costs a wakeup per 16 KiB. IO_CHUNK per call keeps
 * tunnels near the speed of the sockets. */
#define IO_CHUNK (128 * 1024)
static void tune(struct bufferevent *b)
{
    (void)bufferevent_set_max_single_read(b, IO_CHUNK);  /* fails only for invalid sizes */
    (void)bufferevent_set_max_single_write(b, IO_CHUNK);
}

/* ---- caps -------------------------------------------------------------------- */

static bool rate_ok(struct eg *eg)
{
    uint64_t max = eg->cfg.caps.max_requests_per_second;
    struct timespec now;
    if (max == 0)
        return true;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec != eg->rps_window) {
        eg->rps_window = now.tv_sec;
        eg->rps_count = 0;
    }
    return ++eg->rps_count <= max;
}

/* Move n bytes of in to dst's output, within the run's byte caps.
 * Returns false when a cap stopped it (the connection is finishing). */
static bool move_bytes(struct conn *c, struct evbuffer *in, size_t n, struct bufferevent *dst,
                       bool outbound)
{
    struct eg *eg = c->eg;
    uint64_t *total = outbound ? &eg->total_out : &eg->total_in;
    uint64_t cap = outbound ? eg->cfg.caps.max_bytes_out : eg->cfg.caps.max_bytes_in;
    bool over = false;

    if (cap && *total + n > cap) {
        n = (size_t)(cap - *total);
        over = true;
    }
    if (n > 0)
        evbuffer_remove_buffer(in, bufferevent_get_output(dst), n);
    *total += n;
    if (outbound)
        c->bytes_out += n;
    else
        c->bytes_in += n;
    if (over) {
        cap_hit(c, outbound ? "max_bytes_out" : "max_bytes_in");
        evbuffer_drain(in, evbuffer_get_length(in));
        conn_finish(c);
        return false;
    }
    return true;
}

/* The fast path of a plain (not TLS-terminated) relay. libevent 2.1 reads
 * at most 4096 bytes per readiness (EVBUFFER_MAX_READ) and defers every
 * write to the next loop turn (an EPOLLOUT add and remove per chunk), so
 * a bulk transfer costs a loop turn per 4 KiB. Here, inside the same read
 * callback, what libevent read is written to dst's socket at once when
 * nothing is queued before it, and then up to RELAY_BURST more chunks are
 * read from src's socket and written the same way. Whatever dst does not
 * take goes to its output buffer (order kept: nothing is written directly
 * while that buffer holds data). EOF and errors on src are left for
 * libevent to see on its next read. */
#define RELAY_BURST 16
static unsigned char relay_buf[IO_CHUNK];

static bool push_direct(struct conn *c, struct bufferevent *dst, const unsigned char *p, size_t n,
                        bool outbound)
{
    struct eg *eg = c->eg;
    uint64_t *total = outbound ? &eg->total_out : &eg->total_in;
    uint64_t cap = outbound ? eg->cfg.caps.max_bytes_out : eg->cfg.caps.max_bytes_in;
    bool over = false;
    struct evbuffer *out = bufferevent_get_output(dst);

    if (cap && *total + n > cap) {
        n = (size_t)(cap - *total);
        over = true;
    }
    size_t done = 0;
    if (evbuffer_get_length(out) == 0) {
        ssize_t w = send(bufferevent_getfd(dst), p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            done = (size_t)w;
        /* EAGAIN or an error: the rest is queued; libevent reports errors. */
    }
    if (done < n)
        evbuffer_add(out, p + done, n - done);
    *total += n;
    if (outbound)
        c->bytes_out += n;
    else
        c->bytes_in += n;
    if (over) {
        cap_hit(c, outbound ? "max_bytes_out" : "max_bytes_in");
        conn_finish(c);
        return false;
    }
    return true;
}

/* Move what src has read to dst; pause src while dst holds HIGH_WATER
 * unsent (dst's write callback resumes it). */
static void relay(struct conn *c, struct bufferevent *src, struct bufferevent *dst, bool outbound)
{
    struct evbuffer *in = bufferevent_get_input(src);
    if (c->inspected) {
        if (!move_bytes(c, in, evbuffer_get_length(in), dst, outbound))
            return;
    } else {
        while (evbuffer_get_length(in) > 0) {
            int k = evbuffer_remove(in, relay_buf, sizeof(relay_buf));
            if (k <= 0 || !push_direct(c, dst, relay_buf, (size_t)k, outbound))
                return;
        }
        int sfd = bufferevent_getfd(src);
        for (int i = 0; i < RELAY_BURST && evbuffer_get_length(bufferevent_get_output(dst)) == 0; i++) {
            ssize_t r = recv(sfd, relay_buf, sizeof(relay_buf), MSG_DONTWAIT);
            if (r <= 0)
                break; /* EAGAIN, EOF or an error: libevent's next read sees it */
            if (!push_direct(c, dst, relay_buf, (size_t)r, outbound))
                return;
        }
    }
    if (evbuffer_get_length(bufferevent_get_output(dst)) >= HIGH_WATER)
        bufferevent_disable(src, EV_READ);
}

/* ---- the request head ---------------------------------------------------------- */

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (!c->url)
        c->url = at;
    c->url_len = (size_t)(at + len - c->url);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->n_hdrs == 0 || c->last_was_value) {
        if (c->n_hdrs == MAX_HEADERS) {
            c->too_many_headers = true;
            return 1;
        }
        c->hdrs[c->n_hdrs++] = (struct hdr){(size_t)(at - c->head), len, 0, 0};
    } else {
        c->hdrs[c->n_hdrs - 1].name_len += len;
    }
    c->last_was_value = false;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    struct hdr *h = &c->hdrs[c->n_hdrs - 1];
    if (!c->last_was_value) {
        h->val_off = (size_t)(at - c->head);
        h->val_len = len;
    } else {
        h->val_len = (size_t)(at + len - (c->head + h->val_off));
    }
    c->last_was_value = true;
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    c->headers_done = true;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct conn *c = p->data;
    c->msg_done = true;
    http_parser_pause(p, 1); /* what follows is not this request's */
    return 0;
}

static const http_parser_settings head_settings = {
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

/* After the head: only the end of the message matters (trailers and
 * chunk data go through as bytes). */
static const http_parser_settings body_settings = {
    .on_message_complete = on_message_complete,
};

static bool hdr_is(const struct conn *c, const struct hdr *h, const char *name)
{
    return h->name_len == strlen(name) && strncasecmp(c->head + h->name_off, name, h->name_len) == 0;
}

/* ---- brokering -------------------------------------------------------------------- */

static bool secret_covers(const struct eg_secret *s, const char *host)
{
    for (size_t i = 0; i < s->n_hosts; i++)
        if (eg_host_matches(s->hosts[i], host))
            return true;
    return false;
}

static bool brokered_host(const struct eg *eg, const char *host)
{
    for (size_t i = 0; i < eg->cfg.n_secrets; i++)
        if (secret_covers(&eg->cfg.secrets[i], host))
            return true;
    return false;
}

static const char *memfind(const char *hay, size_t hl, const char *needle, size_t nl)
{
    return nl == 0 ? NULL : memmem(hay, hl, needle, nl);
}

static void secret_event(struct conn *c, const char *type, const struct eg_secret *s, const char *where)
{
    json_t *o = json_object();
    if (!o)
        return;
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "secret", json_string(s->id));
    json_object_set_new(o, "host", json_string(c->host));
    json_object_set_new(o, "port", json_integer(c->port));
    json_object_set_new(o, "method", json_string(c->inner_method[0] ? c->inner_method : c->method));
    json_object_set_new(o, "where", json_string(where));
    eg_event(c->eg, o);
}

/* Writes value to out with every placeholder of the secrets that may go
 * into this header replaced (unless brokering is suspended); reports
 * placeholders that sit anywhere else. */
static void add_header_value(struct conn *c, const struct hdr *h, struct evbuffer *out,
                             uint32_t *used, uint32_t *misdirected)
{
    struct eg *eg = c->eg;
    const char *v = c->head + h->val_off;
    size_t vl = h->val_len;
    char where[96];

    snprintf(where, sizeof(where), "header %.*s", (int)(h->name_len > 64 ? 64 : h->name_len),
             c->head + h->name_off);
    for (size_t i = 0; i < eg->cfg.n_secrets && i < 32; i++) {
        const struct eg_secret *s = &eg->cfg.secrets[i];
        size_t pl = strlen(s->placeholder);
        if (!memfind(v, vl, s->placeholder, pl))
            continue;
        bool here = secret_covers(s, c->host) && hdr_is(c, h, s->header);
        if (!here) {
            if (!(*misdirected & (1u << i)))
                secret_event(c, "secret_misdirected", s, where);
            *misdirected |= 1u << i;
            continue;
        }
        if (eg->suspended) {
            snprintf(c->note, sizeof(c->note), "brokering suspended: placeholder of %s sent as is", s->id);
            continue;
        }
        /* Replace every occurrence in this header, then stop: one secret
         * per header. */
        const char *p = v, *e = v + vl, *hit;
        while ((hit = memfind(p, (size_t)(e - p), s->placeholder, pl)) != NULL) {
            evbuffer_add(out, p, (size_t)(hit - p));
            evbuffer_add(out, s->value, strlen(s->value));
            p = hit + pl;
        }
        evbuffer_add(out, p, (size_t)(e - p));
        if (!(*used & (1u << i)))
            secret_event(c, "secret_used", s, where);
        *used |= 1u << i;
        return;
    }
    evbuffer_add(out, v, vl);
}

/* A placeholder in a request body sent to a host its secret does not go
 * to: the payload carrying the credential elsewhere (secret_misdirected,
 * which the supervisor treats as a canary). Only what the proxy sees in
 * clear: plain-HTTP requests, and those inside a TLS-terminated tunnel;
 * a tunnel that is not intercepted is opaque bytes. The body as sent:
 * chunk framing between the halves of a placeholder, compression or any
 * encoding hides it from this check (a tripwire for the plain case, not a
 * guarantee; docs/network.md). A body to one of the secret's own hosts
 * goes as it is, placeholder included, without an event. The search
 * carries the last (longest placeholder - 1) bytes over to the next
 * piece, so that a placeholder split across reads is found. */
#define SCAN_PIECE (16 * 1024)

static void scan_body(struct conn *c, const char *p, size_t n)
{
    struct eg *eg = c->eg;
    size_t keep = 0;

    if (eg->cfg.n_secrets == 0)
        return;
    for (size_t i = 0; i < eg->cfg.n_secrets && i < 32; i++) {
        size_t pl = strlen(eg->cfg.secrets[i].placeholder);
        if (pl > keep + 1)
            keep = pl - 1;
    }
    while (n > 0) {
        size_t k = n < SCAN_PIECE ? n : SCAN_PIECE;
        if (c->scan_len + k > c->scan_cap) {
            char *w = realloc(c->scan, keep + SCAN_PIECE);
            if (!w)
                return; /* out of memory: the check is skipped, never the request */
            c->scan = w;
            c->scan_cap = keep + SCAN_PIECE;
        }
        memcpy(c->scan + c->scan_len, p, k);
        c->scan_len += k;
        p += k;
        n -= k;
        for (size_t i = 0; i < eg->cfg.n_secrets && i < 32; i++) {
            const struct eg_secret *s = &eg->cfg.secrets[i];
            if ((c->body_flagged & (1u << i)) || secret_covers(s, c->host))
                continue;
            if (memfind(c->scan, c->scan_len, s->placeholder, strlen(s->placeholder))) {
                secret_event(c, "secret_misdirected", s, "body");
                c->body_flagged |= 1u << i;
            }
        }
        if (c->scan_len > keep) {
            memmove(c->scan, c->scan + c->scan_len - keep, keep);
            c->scan_len = keep;
        }
    }
}

/* The request as the upstream gets it: origin-form, Host from the URL,
 * hop-by-hop headers dropped, Connection: close. */
static int build_upstream_head(struct conn *c, const char *method, int default_port)
{
    struct eg *eg = c->eg;
    struct evbuffer *out = evbuffer_new();
    uint32_t used = 0, misdirected = 0;

    if (!out)
        return -1;
    for (size_t i = 0; i < eg->cfg.n_secrets && i < 32; i++) {
        const struct eg_secret *s = &eg->cfg.secrets[i];
        if (strstr(c->path, s->placeholder)) {
            secret_event(c, "secret_misdirected", s, "url");
            misdirected |= 1u << i;
        }
    }
    bool v6 = strchr(c->host, ':') != NULL;
    evbuffer_add_printf(out, "%s %s HTTP/1.1\r\nHost: %s%s%s", method, c->path, v6 ? "[" : "", c->host,
                        v6 ? "]" : "");
    if (c->port != default_port)
        evbuffer_add_printf(out, ":%d", c->port);
    evbuffer_add(out, "\r\n", 2);
    for (size_t i = 0; i < c->n_hdrs; i++) {
        const struct hdr *h = &c->hdrs[i];
        if (hdr_is(c, h, "Host") || hdr_is(c, h, "Connection") || hdr_is(c, h, "Keep-Alive") ||
            hdr_is(c, h, "Proxy-Connection") || hdr_is(c, h, "Proxy-Authorization") ||
            hdr_is(c, h, "TE") || hdr_is(c, h, "Upgrade"))
            continue;
        evbuffer_add(out, c->head + h->name_off, h->name_len);
        evbuffer_add(out, ": ", 2);
        add_header_value(c, h, out, &used, &misdirected);
        evbuffer_add(out, "\r\n", 2);
    }
    evbuffer_add_printf(out, "Connection: close\r\n\r\n");
    c->out_head = out;
    return 0;
}

/* ---- resolution and dialling --------------------------------------------------------- */

static void dial(struct conn *c);

static void dns_done(int result, struct evutil_addrinfo *res, void *arg)
{
    struct conn *c = arg;
    char why[300];

    if (result == EVUTIL_EAI_CANCEL) {
        if (res)
            evutil_freeaddrinfo(res);
        return;
    }
    c->dnsreq = NULL;
    if (c->dead) {
        if (res)
            evutil_freeaddrinfo(res);
        return;
    }
    if (result != 0 || !res) {
        snprintf(why, sizeof(why), "resolve %s: %s", c->host,
                 result ? evutil_gai_strerror(result) : "no address");
        if (res)
            evutil_freeaddrinfo(res);
        deny(c, 502, "Bad Gateway", why);
        return;
    }
    /* Every answer is classified; one bad address refuses the name (a
     * resolver mixing a public and a private answer is not trusted with
     * either). */
    for (struct evutil_addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (eg_addr_denied(ai->ai_addr, &c->eg->cfg.allow_ranges, &c->eg->own, why, sizeof(why))) {
            const void *a = ai->ai_family == AF_INET
                                ? (const void *)&((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr
                                : (const void *)&((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr;
            inet_ntop(ai->ai_family, a, c->address, sizeof(c->address));
            char r[700];
            snprintf(r, sizeof(r), "deny floor: %s resolves to %s", c->host, why);
            evutil_freeaddrinfo(res);
            deny(c, 403, "Forbidden", r);
            return;
        }
        if (c->n_addrs < MAX_ADDRS && ai->ai_addrlen <= sizeof(c->addrs[0])) {
            memcpy(&c->addrs[c->n_addrs], ai->ai_addr, ai->ai_addrlen);
            c->addr_lens[c->n_addrs] = (socklen_t)ai->ai_addrlen;
            ((struct sockaddr_in *)(void *)&c->addrs[c->n_addrs])->sin_port = htons((uint16_t)c->port);
            c->n_addrs++;
        }
    }
    evutil_freeaddrinfo(res);
    dial(c);
}

static void resolve(struct conn *c)
{
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)c->port)};
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    char why[300];

    bufferevent_disable(c->cli, EV_READ);
    c->state = ST_RESOLVE;
    /* A literal address is checked the same way, and never asked of DNS. */
    const struct sockaddr *lit = NULL;
    socklen_t litlen = 0;
    if (inet_pton(AF_INET, c->host, &s4.sin_addr) == 1) {
        lit = (struct sockaddr *)&s4;
        litlen = sizeof(s4);
    } else if (inet_pton(AF_INET6, c->host, &s6.sin6_addr) == 1) {
        lit = (struct sockaddr *)&s6;
        litlen = sizeof(s6);
    }
    if (lit) {
        snprintf(c->address, sizeof(c->address), "%.45s", c->host);
        if (eg_addr_denied(lit, &c->eg->cfg.allow_ranges, &c->eg->own, why, sizeof(why))) {
            char r[400];
            snprintf(r, sizeof(r), "deny floor: %s", why);
            deny(c, 403, "Forbidden", r);
            return;
        }
        memcpy(&c->addrs[0], lit, litlen);
        c->addr_lens[0] = litlen;
        c->n_addrs = 1;
        dial(c);
        return;
    }
    if (c->eg->no_dns) {
        deny(c, 502, "Bad Gateway",
             "no DNS server: the host's /etc/resolv.conf names none and the policy gives no network.resolver");
        return;
    }
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                    .ai_protocol = IPPROTO_TCP};
    struct evdns_getaddrinfo_request *r = evdns_getaddrinfo(c->eg->dns, c->host, NULL, &hints, dns_done, c);
    /* dns_done may have run already (then r is NULL and the state moved on). */
    if (c->state == ST_RESOLVE && !c->dead)
        c->dnsreq = r;
}

static void dial(struct conn *c)
{
    struct eg *eg = c->eg;
    while (c->cur_addr < c->n_addrs) {
        struct sockaddr *sa = (struct sockaddr *)&c->addrs[c->cur_addr];
        const void *a = sa->sa_family == AF_INET ? (const void *)&((struct sockaddr_in *)(void *)sa)->sin_addr
                                                 : (const void *)&((struct sockaddr_in6 *)(void *)sa)->sin6_addr;
        inet_ntop(sa->sa_family, a, c->address, sizeof(c->address));
        int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
        if (fd < 0) {
            c->cur_addr++;
            continue;
        }
        struct bufferevent *b;
        if (c->inspected) {
            SSL *ssl = eg_tls_client_ssl(eg->tls, c->host);
            b = ssl ? bufferevent_openssl_socket_new(eg->base, fd, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                     BEV_OPT_CLOSE_ON_FREE)
                    : NULL;
            if (!b)
                SSL_free(ssl);
        } else {
            b = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        }
        if (!b) {
            close(fd);
            break;
        }
        if (c->inspected)
            /* Many servers close without close_notify; the client still
             * sees the end (and HTTP framing tells it of truncation). */
            bufferevent_openssl_set_allow_dirty_shutdown(b, 1);
        c->up = b;
        c->up_fd = fd;
        bufferevent_setcb(b, up_read, up_write, up_event, c);
        bufferevent_setwatermark(b, EV_WRITE, HIGH_WATER / 2, 0);
        tune(b);
        /* A silent address (SYN dropped) moves on to the next checked one
         * after CONNECT_TIMEOUT_S, not the kernel's two minutes. */
        struct timeval ct = {CONNECT_TIMEOUT_S, 0};
        bufferevent_set_timeouts(b, &ct, &ct);
        c->state = ST_DIAL;
        c->dialled = true;
        if (bufferevent_socket_connect(b, sa, c->addr_lens[c->cur_addr]) < 0) {
            bufferevent_free(b);
            c->up = NULL;
            c->cur_addr++;
            continue;
        }
        return;
    }
    c->dialled = false;
    char r[400];
    snprintf(r, sizeof(r), "could not connect to %s port %d", c->address[0] ? c->address : c->host, c->port);
    emit(c, "net_allowed", r); /* allowed, but nothing answered */
    respond(c, 502, "Bad Gateway", r);
}

/* ---- states ----------------------------------------------------------------------- */

static void forward_body(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->cli);
    while (!c->msg_done && evbuffer_get_length(in) > 0) {
        size_t n = evbuffer_get_contiguous_space(in);
        char *p = (char *)evbuffer_pullup(in, (ev_ssize_t)n);
        size_t parsed = http_parser_execute(&c->parser, &body_settings, p, n);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (e != HPE_OK && e != HPE_PAUSED) {
            snprintf(c->note, sizeof(c->note), "malformed request body: %s", http_errno_name(e));
            conn_close(c);
            return;
        }
        scan_body(c, p, parsed);
        /* Exactly the bytes of this request go on. */
        if (!move_bytes(c, in, parsed, c->up, true))
            return;
        if (parsed < n && !c->msg_done)
            break;
    }
    if (c->msg_done) {
        /* Anything after the request is another request: not carried. */
        evbuffer_drain(in, evbuffer_get_length(in));
    } else if (evbuffer_get_length(bufferevent_get_output(c->up)) >= HIGH_WATER) {
        bufferevent_disable(c->cli, EV_READ);
    }
}

static void handle_connect(struct conn *c)
{
    struct http_parser_url u;
    char r[400];

    http_parser_url_init(&u);
    if (http_parser_parse_url(c->url, c->url_len, 1, &u) != 0 || !(u.field_set & (1 << UF_HOST)) ||
        !(u.field_set & (1 << UF_PORT)) ||
        !eg_host_normalise(c->url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, c->host,
                           sizeof(c->host))) {
        deny(c, 400, "Bad Request", "CONNECT needs HOST:PORT with a valid host name");
        return;
    }
    c->port = u.port;
    bool inspect = c->eg->tls && brokered_host(c->eg, c->host);
    if (eg_rules_check(&c->eg->cfg.allow, &c->eg->cfg.deny, "CONNECT", c->host, c->port, inspect, r,
                       sizeof(r)) != EG_ALLOW) {
        deny(c, 403, "Forbidden", r);
        return;
    }
    c->inspected = inspect;
    resolve(c);
}

static void handle_http(struct conn *c)
{
    struct http_parser_url u;
    char r[400];

    http_parser_url_init(&u);
    if (http_parser_parse_url(c->url, c->url_len, 0, &u) != 0) {
        deny(c, 400, "Bad Request", "the request target is not a URL");
        return;
    }
    if (!(u.field_set & (1 << UF_SCHEMA)) || !(u.field_set & (1 << UF_HOST))) {
        deny(c, 400, "Bad Request", "a proxy request needs an absolute http:// URL (or CONNECT for https)");
        return;
    }
    const char *schema = c->url + u.field_data[UF_SCHEMA].off;
    size_t sl = u.field_data[UF_SCHEMA].len;
    if (!(sl == 4 && strncasecmp(schema, "http", 4) == 0)) {
        deny(c, 400, "Bad Request", "only http:// URLs are forwarded; https goes through CONNECT");
        return;
    }
    if (!eg_host_normalise(c->url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, c->host,
                           sizeof(c->host))) {
        deny(c, 400, "Bad Request", "the URL's host is not a valid host name or address");
        return;
    }
    c->port = (u.field_set & (1 << UF_PORT)) ? u.port : 80;
    if (u.field_set & (1 << UF_USERINFO)) {
        deny(c, 400, "Bad Request", "user information in the URL is not forwarded");
        return;
    }
    /* The origin-form target: path and query, never the fragment;
     * "http://h" is "/", "http://h?q" is "/?q". */
    size_t end = c->url_len;
    if (u.field_set & (1 << UF_FRAGMENT))
        end = u.field_data[UF_FRAGMENT].off - 1;
    if (u.field_set & (1 << UF_PATH)) {
        c->path = strndup(c->url + u.field_data[UF_PATH].off, end - u.field_data[UF_PATH].off);
    } else if (u.field_set & (1 << UF_QUERY)) {
        size_t qo = u.field_data[UF_QUERY].off - 1; /* the '?' */
        c->path = malloc(end - qo + 2);
        if (c->path)
            snprintf(c->path, end - qo + 2, "/%.*s", (int)(end - qo), c->url + qo);
    } else {
        c->path = strdup("/");
    }
    if (!c->path) {
        conn_close(c);
        return;
    }
    if (eg_rules_check(&c->eg->cfg.allow, &c->eg->cfg.deny, c->method, c->host, c->port, false, r,
                       sizeof(r)) != EG_ALLOW) {
        deny(c, 403, "Forbidden", r);
        return;
    }
    if (build_upstream_head(c, c->method, 80) < 0) {
        conn_close(c);
        return;
    }
    resolve(c);
}

/* A request inside a terminated tunnel: origin-form, for the CONNECT's host. */
static void handle_inner(struct conn *c)
{
    char r[400];
    snprintf(c->inner_method, sizeof(c->inner_method), "%s", http_method_str(c->parser.method));
    if (c->parser.method == HTTP_CONNECT || c->url_len == 0 || c->url[0] != '/') {
        deny(c, 400, "Bad Request", "inside the tunnel: an origin-form request (GET /path) expected");
        return;
    }
    for (size_t i = 0; i < c->n_hdrs; i++) {
        const struct hdr *h = &c->hdrs[i];
        if (hdr_is(c, h, "Host")) {
            /* The credential goes only to the host the tunnel was opened
             * to and verified; a Host naming another is refused. */
            char hn[256];
            const char *v = c->head + h->val_off;
            size_t vl = h->val_len;
            const char *colon = memchr(v, ':', vl);
            if (colon && v[0] != '[')
                vl = (size_t)(colon - v);
            if (!eg_host_normalise(v, vl, hn, sizeof(hn)) || strcmp(hn, c->host) != 0) {
                deny(c, 421, "Misdirected Request", "the Host header names another host than the tunnel");
                return;
            }
        }
    }
    if (eg_rules_check(&c->eg->cfg.allow, &c->eg->cfg.deny, c->inner_method, c->host, c->port, false, r,
                       sizeof(r)) != EG_ALLOW) {
        deny(c, 403, "Forbidden", r);
        return;
    }
    c->path = strndup(c->url, c->url_len);
    if (!c->path || build_upstream_head(c, c->inner_method, 443) < 0) {
        conn_close(c);
        return;
    }
    bufferevent_write_buffer(c->up, c->out_head);
    c->state = ST_BODY;
    bufferevent_enable(c->up, EV_READ);
    forward_body(c);
}

static void process_head(struct conn *c, size_t head_len)
{
    struct evbuffer *in = bufferevent_get_input(c->cli);
    struct eg *eg = c->eg;

    free(c->head);
    c->head = malloc(head_len + 1);
    if (!c->head) {
        conn_close(c);
        return;
    }
    evbuffer_remove(in, c->head, head_len);
    c->head[head_len] = '\0';
    c->head_len = head_len;
    /* The head counts toward bytes_out (and the cap) as sent by the client. */
    if (eg->cfg.caps.max_bytes_out && eg->total_out + head_len > eg->cfg.caps.max_bytes_out) {
        emit(c, "net_cap", "cap max_bytes_out");
        respond(c, 503, "Service Unavailable", "cap max_bytes_out reached for this run");
        return;
    }
    eg->total_out += head_len;
    c->bytes_out += head_len;

    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->url = NULL;
    c->url_len = 0;
    c->n_hdrs = 0;
    c->headers_done = c->msg_done = c->last_was_value = c->too_many_headers = false;
    size_t n = http_parser_execute(&c->parser, &head_settings, c->head, head_len);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    (void)n;
    if (c->too_many_headers) {
        deny(c, 431, "Request Header Fields Too Large", "more than 128 header fields");
        return;
    }
    if ((e != HPE_OK && e != HPE_PAUSED) || !c->headers_done || !c->url) {
        char r[160];
        snprintf(r, sizeof(r), "malformed request: %s", e != HPE_OK ? http_errno_description(e) : "incomplete");
        deny(c, 400, "Bad Request", r);
        return;
    }
    if (e == HPE_PAUSED)
        http_parser_pause(&c->parser, 0);
    if (c->parser.http_major != 1) {
        deny(c, 505, "HTTP Version Not Supported", "only HTTP/1.x requests are forwarded");
        return;
    }
    for (size_t i = 0; i < c->n_hdrs; i++)
        if (memchr(c->head + c->hdrs[i].val_off, '\r', c->hdrs[i].val_len) ||
            memchr(c->head + c->hdrs[i].val_off, '\n', c->hdrs[i].val_len)) {
            deny(c, 400, "Bad Request", "folded header lines are not forwarded");
            return;
        }
    if (!c->inspected)
        snprintf(c->method, sizeof(c->method), "%s", http_method_str(c->parser.method));
    if (!rate_ok(eg)) {
        emit(c, "net_cap", "cap max_requests_per_second");
        respond(c, 429, "Too Many Requests", "cap max_requests_per_second reached for this run");
        return;
    }
    if (eg->cfg.caps.max_bytes_in && eg->total_in >= eg->cfg.caps.max_bytes_in) {
        emit(c, "net_cap", "cap max_bytes_in");
        respond(c, 503, "Service Unavailable", "cap max_bytes_in reached for this run");
        return;
    }
    bufferevent_set_timeouts(c->cli, NULL, NULL);
    if (c->inspected)
        handle_inner(c);
    else if (c->parser.method == HTTP_CONNECT)
        handle_connect(c);
    else
        handle_http(c);
}

static void cli_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->dead)
        return;
    switch (c->state) {
    case ST_HEAD: {
        /* Search only what is new (and the 3 bytes before it): a client
         * trickling a 64 KiB head byte by byte must not cost a rescan
         * per byte. */
        struct evbuffer_ptr start, p;
        size_t len = evbuffer_get_length(in);
        size_t from = c->scanned > 3 ? c->scanned - 3 : 0;
        if (evbuffer_ptr_set(in, &start, from, EVBUFFER_PTR_SET) < 0)
            from = 0;
        p = evbuffer_search(in, "\r\n\r\n", 4, from ? &start : NULL);
        if (p.pos < 0) {
            c->scanned = len;
            if (len > MAX_HEAD)
                deny(c, 431, "Request Header Fields Too Large", "the request head exceeds 64 KiB");
            return;
        }
        c->scanned = 0;
        if ((size_t)p.pos + 4 > MAX_HEAD) {
            deny(c, 431, "Request Header Fields Too Large", "the request head exceeds 64 KiB");
            return;
        }
        process_head(c, (size_t)p.pos + 4);
        return;
    }
    case ST_BODY:
        forward_body(c);
        return;
    case ST_TUNNEL:
        relay(c, c->cli, c->up, true);
        return;
    case ST_RESOLVE:
    case ST_DIAL:
        bufferevent_disable(bev, EV_READ);
        return;
    case ST_CLOSING:
        c->lingered += evbuffer_get_length(in);
        evbuffer_drain(in, evbuffer_get_length(in));
        if (c->lingered > LINGER_MAX)
            conn_close(c);
        return;
    }
}

static void up_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    if (c->dead)
        return;
    if (c->state == ST_TUNNEL || c->state == ST_BODY)
        relay(c, c->up, c->cli, false);
    else
        evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

static void check_half_close(struct conn *c)
{
    /* Tunnels carry a half-close through once the data before it is out. */
    if (c->state != ST_TUNNEL)
        return;
    if (c->cli_eof && !c->up_shut && out_empty(c->up)) {
        (void)shutdown(c->up_fd, SHUT_WR); /* the peer may be gone already: nothing to do then */
        c->up_shut = true;
    }
    if (c->up_eof && !c->cli_shut && out_empty(c->cli)) {
        (void)shutdown(c->cli_fd, SHUT_WR);
        c->cli_shut = true;
    }
    if (c->cli_shut && c->up_shut)
        conn_close(c);
}

static void cli_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    if (c->dead)
        return;
    if (c->state == ST_CLOSING) {
        if (!c->lingering && out_empty(c->cli) && out_empty(c->up))
            conn_done(c);
        return;
    }
    if ((c->state == ST_BODY) && c->up_eof && out_empty(c->cli)) {
        conn_close(c); /* the response is out */
        return;
    }
    if (c->up && !c->up_eof && (c->state == ST_TUNNEL || c->state == ST_BODY))
        bufferevent_enable(c->up, EV_READ);
    check_half_close(c);
}

static void up_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    if (c->dead)
        return;
    if (c->state == ST_CLOSING) {
        if (!c->lingering && out_empty(c->cli) && out_empty(c->up))
            conn_done(c);
        return;
    }
    if (!c->cli_eof && (c->state == ST_TUNNEL || (c->state == ST_BODY && !c->msg_done)))
        bufferevent_enable(c->cli, EV_READ);
    check_half_close(c);
}

/* The socket under the client's TLS filter drained: the last records of a
 * finished response are out, the connection can close. */
static void under_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct conn *c = arg;
    if (c->dead || info->n_deleted == 0 || evbuffer_get_length(buf) != 0 || !out_empty(c->cli))
        return;
    if (c->state == ST_CLOSING && out_empty(c->up)) {
        if (!c->lingering)
            conn_done(c);
    } else if (c->state == ST_BODY && c->up_eof) {
        conn_close(c);
    }
}

static void start_tls_accept(struct conn *c)
{
    SSL *ssl = eg_tls_server_ssl(c->eg->tls, c->host);
    struct bufferevent *b = ssl ? bufferevent_openssl_filter_new(c->eg->base, c->cli, ssl,
                                                                 BUFFEREVENT_SSL_ACCEPTING,
                                                                 BEV_OPT_CLOSE_ON_FREE)
                                : NULL;
    if (!b) {
        SSL_free(ssl);
        snprintf(c->note, sizeof(c->note), "could not start TLS toward the client");
        conn_close(c);
        return;
    }
    /* The filter moves records into the socket's buffer only up to its
     * write high-water mark: without one, a slow client would make the
     * proxy hold a whole download. */
    bufferevent_setwatermark(c->cli, EV_WRITE, 0, HIGH_WATER);
    evbuffer_add_cb(bufferevent_get_output(c->cli), under_out_cb, c);
    c->cli = b;
    bufferevent_setcb(b, cli_read, cli_write, cli_event, c);
    bufferevent_setwatermark(b, EV_WRITE, HIGH_WATER / 2, 0);
    tune(b);
    struct timeval ht = {HEAD_TIMEOUT_S, 0}, wt = {WRITE_TIMEOUT_S, 0};
    bufferevent_set_timeouts(b, &ht, &wt);
    c->state = ST_HEAD;
    bufferevent_enable(b, EV_READ | EV_WRITE);
}

static void up_connected(struct conn *c)
{
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    struct timeval wt = {WRITE_TIMEOUT_S, 0};

    bufferevent_set_timeouts(c->up, NULL, &wt);

    if (c->parser.method == HTTP_CONNECT && !c->inspected) {
        bufferevent_write(c->cli, ok, sizeof(ok) - 1);
        c->state = ST_TUNNEL;
        bufferevent_set_timeouts(c->cli, NULL, &wt);
        bufferevent_enable(c->cli, EV_READ | EV_WRITE);
        bufferevent_enable(c->up, EV_READ | EV_WRITE);
        relay(c, c->cli, c->up, true); /* bytes the client sent early */
        return;
    }
    if (c->parser.method == HTTP_CONNECT && c->inspected) {
        bufferevent_write(c->cli, ok, sizeof(ok) - 1);
        bufferevent_disable(c->up, EV_READ); /* until the inner request */
        start_tls_accept(c);
        return;
    }
    bufferevent_write_buffer(c->up, c->out_head);
    c->state = ST_BODY;
    bufferevent_set_timeouts(c->cli, NULL, &wt);
    bufferevent_enable(c->up, EV_READ | EV_WRITE);
    bufferevent_enable(c->cli, EV_READ | EV_WRITE);
    forward_body(c);
}

static void up_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    if (c->dead)
        return;
    if (what & BEV_EVENT_CONNECTED) {
        if (c->state == ST_DIAL)
            up_connected(c);
        return;
    }
    if (c->state == ST_DIAL) {
        /* TLS verification failures are final; a refused TCP connect
         * tries the next checked address. */
        unsigned long e = bufferevent_get_openssl_error(bev);
        if (c->inspected && e) {
            char r[600], es[200];
            ERR_error_string_n(e, es, sizeof(es));
            snprintf(r, sizeof(r), "upstream TLS verification failed for %s: %s", c->host, es);
            while (bufferevent_get_openssl_error(bev))
                ;
            snprintf(c->note, sizeof(c->note), "%s", r);
            respond(c, 502, "Bad Gateway", r);
            return;
        }
        bufferevent_free(c->up);
        c->up = NULL;
        c->cur_addr++;
        dial(c);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        c->up_eof = true;
        if (c->state == ST_TUNNEL) {
            check_half_close(c);
            return;
        }
        if (c->state == ST_BODY) {
            if (out_empty(c->cli))
                conn_close(c);
            return;
        }
        conn_finish(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT)
        snprintf(c->note, sizeof(c->note), "upstream stopped reading");
    else if (what & BEV_EVENT_ERROR)
        snprintf(c->note, sizeof(c->note), "upstream connection error: %s",
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    /* What the upstream sent before failing still reaches the client. */
    bufferevent_free(c->up);
    c->up = NULL;
    c->up_eof = true;
    conn_finish(c);
}

static void cli_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    if (c->dead)
        return;
    if (what & BEV_EVENT_CONNECTED)
        return; /* the TLS handshake with the client is done */
    if (c->lingering) {
        conn_close(c); /* the client closed, went quiet or failed after its refusal */
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (c->state == ST_HEAD && (what & BEV_EVENT_READING)) {
            if (evbuffer_get_length(bufferevent_get_input(c->cli)) > 0)
                deny(c, 408, "Request Timeout", "the request head did not arrive in time");
            else
                conn_close(c);
            return;
        }
        snprintf(c->note, sizeof(c->note), "client stopped reading");
        conn_close(c);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        c->cli_eof = true;
        if (c->state == ST_TUNNEL) {
            check_half_close(c);
            return;
        }
        if (c->state == ST_BODY && c->msg_done)
            return; /* a half-closed client still gets its response */
        if (c->state != ST_CLOSING && c->state != ST_HEAD && c->note[0] == '\0')
            snprintf(c->note, sizeof(c->note), "client closed before the end of the request");
        conn_close(c);
        return;
    }
    if (c->note[0] == '\0') {
        unsigned long e = c->inspected ? bufferevent_get_openssl_error(c->cli) : 0;
        char es[160] = "";
        if (e)
            ERR_error_string_n(e, es, sizeof(es));
        snprintf(c->note, sizeof(c->note), "client connection error (0x%x%s%s)", (unsigned)what,
                 e ? ": " : "", es);
    }
    conn_close(c);
}

/* ---- accept ------------------------------------------------------------------------------ */

void eg_conn_accept(struct eg *eg, int fd)
{
    if (eg->n_conns >= eg->cfg.caps.max_connections) {
        static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
                                   "X-Agentjail-Reason: cap max_connections reached for this run\r\n"
                                   "Content-Length: 0\r\nConnection: close\r\n\r\n";
        /* Best effort: a fresh socket has room for this; the client is told why. */
        ssize_t w = send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
        close(fd);
        json_t *o = json_pack("{s:s, s:s}", "type", "net_cap", "reason", "cap max_connections");
        if (o)
            eg_event(eg, o);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    c->eg = eg;
    c->cli_fd = fd;
    c->up_fd = -1;
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    c->free_ev = event_new(eg->base, -1, 0, free_cb, c);
    c->cli = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->free_ev || !c->cli) {
        if (c->free_ev)
            event_free(c->free_ev);
        if (c->cli)
            bufferevent_free(c->cli);
        else
            close(fd);
        free(c);
        return;
    }
    c->next = eg->conns;
    if (eg->conns)
        eg->conns->prev = c;
    eg->conns = c;
    eg->n_conns++;
    if (eg->cfg.caps.max_connection_seconds) {
        c->deadline = evtimer_new(eg->base, deadline_cb, c);
        struct timeval tv = {(time_t)eg->cfg.caps.max_connection_seconds, 0};
        if (c->deadline)
            evtimer_add(c->deadline, &tv);
    }
    bufferevent_setcb(c->cli, cli_read, cli_write, cli_event, c);
    bufferevent_setwatermark(c->cli, EV_WRITE, HIGH_WATER / 2, 0);
    tune(c->cli);
    struct timeval ht = {HEAD_TIMEOUT_S, 0}, wt = {WRITE_TIMEOUT_S, 0};
    bufferevent_set_timeouts(c->cli, &ht, &wt);
    c->state = ST_HEAD;
    bufferevent_enable(c->cli, EV_READ | EV_WRITE);
}

void eg_conn_free_all(struct eg *eg)
{
    struct conn *next;
    for (struct conn *c = eg->conns; c; c = next) {
        next = c->next; /* free_cb unlinks c */
        if (!c->dead) {
            c->dead = true;
            if (c->dialled)
                emit(c, "net_allowed", "closed: the proxy is exiting");
        }
        free_cb(-1, 0, c);
    }
}
