/* SPDX-License-Identifier: Apache-2.0 */
/* agentjail-egress: the run's egress proxy (docs/network.md, the contract
 * in docs/network.md "The proxy process").
 *
 *   agentjail-egress --config-fd 3 --listen-fd 4 --events-fd 5 --control-fd 6 --ca-out-fd 7
 *                    [--handoff-fd 8]
 *
 * --handoff-fd: a unix SOCK_SEQPACKET socket on which each message carries
 * one connected socket (SCM_RIGHTS, one byte of data): served as if it had
 * been accepted on the listening socket. agentjail's relay hands over the
 * TCP connections it accepts inside the sandbox's network namespace this
 * way, so that their bytes go straight between the client's socket and
 * the upstream's, with no copy through the relay and a unix socket.
 *
 * Order: read the config; learn the host's own addresses; make the run CA
 * and load the trust store; set up DNS; write the CA to the ca-out fd;
 * then no_new_privs and the seccomp allow-list; then serve until the
 * control fd reaches EOF. Exit 0 after that EOF, 2 for a bad config, 1 for
 * any other setup failure (one line on stderr, never a secret). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <seccomp.h>

#include "eg.h"

#define MAX_CONFIG (4 * 1024 * 1024)
#define MAX_EVENT_BACKLOG (8 * 1024 * 1024)

static struct eg g_eg;

__attribute__((format(printf, 2, 3))) static int die(int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "agentjail-egress: %s\n", msg);
    return status;
}

static int parse_fd(const char *s, int *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

/* ---- events (fd 5) -------------------------------------------------------- */

void eg_event(struct eg *eg, json_t *ev)
{
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!s)
        return;
    if (!eg->events) {
        free(s);
        return;
    }
    struct evbuffer *out = bufferevent_get_output(eg->events);
    if (evbuffer_get_length(out) > MAX_EVENT_BACKLOG) {
        /* The supervisor is not reading: count, do not grow without end. */
        eg->events_dropped++;
    } else {
        evbuffer_add(out, s, strlen(s));
        evbuffer_add(out, "\n", 1);
    }
    free(s);
}

static void events_flush_blocking(struct eg *eg)
{
    if (!eg->events)
        return;
    int fd = bufferevent_getfd(eg->events);
    struct evbuffer *out = bufferevent_get_output(eg->events);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); /* best effort: exiting anyway */
    while (evbuffer_get_length(out) > 0)
        if (evbuffer_write(out, fd) <= 0)
            break;
}

static void events_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    struct eg *eg = arg;
    /* The reader went away: decisions can no longer be recorded, so stop. */
    bufferevent_free(eg->events);
    eg->events = NULL;
    event_base_loopbreak(eg->base);
}

/* ---- control (fd 6) ----------------------------------------------------------- */

static void control_read(struct bufferevent *bev, void *arg)
{
    struct eg *eg = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char *line;
    size_t n;
    while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF)) != NULL) {
        if (strcmp(line, "suspend") == 0) {
            eg->suspended = true;
            json_t *ids = json_array();
            for (size_t i = 0; i < eg->cfg.n_secrets; i++)
                json_array_append_new(ids, json_string(eg->cfg.secrets[i].id));
            eg_event(eg, json_pack("{s:s, s:o}", "type", "credentials_suspended", "secrets", ids));
        } else {
            fprintf(stderr, "agentjail-egress: unknown control line ignored\n");
        }
        free(line);
    }
    if (evbuffer_get_length(in) > 4096)
        evbuffer_drain(in, evbuffer_get_length(in));
}

static void control_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    struct eg *eg = arg;
    event_base_loopbreak(eg->base); /* EOF: exit at once */
}

/* ---- listener ------------------------------------------------------------------ */

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    (void)l;
    (void)sa;
    (void)len;
    eg_conn_accept(arg, fd);
}

/* Every connection waiting on the handoff socket. Its EOF (the relay is
 * gone) or an error ends the handoff, never the proxy. */
static void handoff_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct eg *eg = arg;
    for (;;) {
        char byte;
        union {
            char buf[CMSG_SPACE(sizeof(int) * 4)];
            struct cmsghdr align;
        } u;
        struct iovec iov = {.iov_base = &byte, .iov_len = 1};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            event_del(eg->handoff);
            return;
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int cfd;
                memcpy(&cfd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                int type = 0;
                socklen_t tl = sizeof(type);
                /* A stream socket, or nothing: the relay is ours, but a
                 * handed fd is checked as anything from outside is. */
                if (getsockopt(cfd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
                    evutil_make_socket_nonblocking(cfd) < 0) {
                    close(cfd);
                    continue;
                }
                eg_conn_accept(eg, cfd);
            }
        }
    }
}

static void accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct eg *eg = arg;
    evconnlistener_enable(eg->listener);
}

static void accept_error(struct evconnlistener *l, void *arg)
{
    struct eg *eg = arg;
    int e = EVUTIL_SOCKET_ERROR();
    /* Out of fds: the pending connection stays readable, so libevent would
     * spin on accept. Pause accepting for 100 ms instead; connections that
     * close meanwhile give fds back. */
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        static const struct timeval pause = {0, 100 * 1000};
        evconnlistener_disable(l);
        if (event_base_once(eg->base, -1, EV_TIMEOUT, accept_resume, eg, &pause) < 0)
            evconnlistener_enable(l); /* cannot schedule: keep accepting */
    }
}

/* ---- setup ------------------------------------------------------------------------ */

static int read_all(int fd, char **ret, size_t *ret_len)
{
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (len == cap) {
            if (cap >= MAX_CONFIG) {
                free(buf);
                return -EFBIG;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            free(buf);
            return -e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    *ret = buf;
    *ret_len = len;
    return 0;
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The host's own addresses (of the network namespace the proxy runs in):
 * dialling one reaches the host's services. */
static int own_addresses(struct eg_cidrs *own)
{
    struct ifaddrs *ifa, *i;
    size_t n = 0;
    if (getifaddrs(&ifa) < 0)
        return -1;
    for (i = ifa; i; i = i->ifa_next)
        n++;
    own->v = calloc(n + 1, sizeof(*own->v));
    if (!own->v) {
        freeifaddrs(ifa);
        return -1;
    }
    for (i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        struct eg_cidr *c = &own->v[own->n];
        if (i->ifa_addr->sa_family == AF_INET) {
            c->family = AF_INET;
            memcpy(c->addr, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, 4);
            c->prefix = 32;
            own->n++;
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            c->family = AF_INET6;
            memcpy(c->addr, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, 16);
            c->prefix = 128;
            own->n++;
        }
    }
    freeifaddrs(ifa);
    return 0;
}

/* The allow-list of system calls once serving: the event loop, sockets
 * toward the upstreams and the resolver, memory, time, randomness.
 * Anything else fails with EPERM (not a kill: a libc path nobody listed
 * should fail one request, not every connection of the run). */
static int apply_seccomp(void)
{
    static const char *const allowed[] = {
        "read", "write", "readv", "writev", "close", "shutdown",
        "epoll_wait", "epoll_pwait", "epoll_ctl", "poll", "ppoll", "select", "pselect6",
        "accept", "accept4", "connect", "sendto", "recvfrom", "sendmsg", "recvmsg",
        "getsockopt", "setsockopt", "getsockname", "getpeername", "fcntl",
        "clock_gettime", "clock_nanosleep", "gettimeofday", "nanosleep", "time",
        "brk", "munmap", "mremap", "madvise",
        "getrandom", "futex", "rt_sigreturn", "rt_sigprocmask", "rt_sigaction", "sigaltstack",
        "exit", "exit_group", "getpid", "gettid", "sched_yield", "restart_syscall",
        "fstat", "newfstatat", "lseek", "eventfd2", "pipe2", "getrlimit",
        "sched_getaffinity", "uname",
#ifdef __SANITIZE_ADDRESS__
        /* Test builds only: LeakSanitizer stops the world at exit with a
         * ptrace-ing clone and reads /proc/self. Never in a release build. */
        "clone", "clone3", "ptrace", "wait4", "waitid", "prctl", "openat", "open", "getdents64", "getdents",
        "readlink", "readlinkat", "kill", "sched_getparam", "getppid", "dup", "dup2", "dup3",
        "pipe", "munlock", "mlock", "msync", "statx", "stat", "lstat",
        "mmap", "mprotect", "ioctl", "tgkill", "prlimit64",
#endif
    };
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    int r = 0;
    if (!ctx)
        return -ENOMEM;
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]) && r == 0; i++) {
        int nr = seccomp_syscall_resolve_name(allowed[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture */
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
    /* New sockets only for IPv4/IPv6 (upstreams and DNS): no netlink, no
     * packet sockets, no unix sockets to the host's daemons. */
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_INET));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_INET6));
#ifndef __SANITIZE_ADDRESS__
    /* No executable memory (an exploit's shellcode stays data); ioctl
     * only for FIONREAD (libevent sizes its reads with it); signals only
     * to itself (abort). */
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
                             SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_EQ, FIONREAD));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()));
#endif
    if (r == 0)
        r = seccomp_load(ctx);
    seccomp_release(ctx);
    return r;
}

static int setup_dns(struct eg *eg)
{
    eg->dns = evdns_base_new(eg->base, 0);
    if (!eg->dns)
        return -1;
    /* The resolver's answers are classified per name; hosts files and
     * search lists are not read (a name means what the resolver says). */
    if (eg->cfg.resolver) {
        if (evdns_base_nameserver_ip_add(eg->dns, eg->cfg.resolver) != 0)
            return -2;
    } else if (evdns_base_resolv_conf_parse(eg->dns, DNS_OPTION_NAMESERVERS | DNS_OPTION_MISC,
                                            "/etc/resolv.conf") != 0 ||
               evdns_base_count_nameservers(eg->dns) == 0) {
        /* A host without a resolver (an offline machine, a container with
         * none): allow-listed literal addresses still work; every name is
         * refused with the reason (conn.c), never looked up elsewhere. */
        eg->no_dns = true;
        return 0;
    }
    (void)evdns_base_set_option(eg->dns, "timeout:", "3"); /* defaults stay if refused */
    (void)evdns_base_set_option(eg->dns, "attempts:", "2");
    return 0;
}

int main(int argc, char **argv)
{
    struct eg *eg = &g_eg;
    int fds[6] = {-1, -1, -1, -1, -1, -1};
    static const char *const names[6] = {"--config-fd", "--listen-fd", "--events-fd", "--control-fd",
                                         "--ca-out-fd", "--handoff-fd"};
    char err[512];

    for (int i = 1; i < argc; i++) {
        int k;
        for (k = 0; k < 6; k++)
            if (strcmp(argv[i], names[k]) == 0)
                break;
        if (k == 6 || i + 1 >= argc || parse_fd(argv[i + 1], &fds[k]) < 0)
            return die(2, "usage: agentjail-egress --config-fd N --listen-fd N --events-fd N "
                          "--control-fd N --ca-out-fd N [--handoff-fd N] (bad argument \"%s\")", argv[i]);
        i++;
    }
    for (int k = 0; k < 5; k++)
        if (fds[k] < 0)
            return die(2, "missing %s", names[k]);
    (void)signal(SIGPIPE, SIG_IGN); /* a peer that went away is an error return, not a death */

    char *text = NULL;
    size_t len = 0;
    int r = read_all(fds[0], &text, &len);
    close(fds[0]);
    if (r < 0)
        return die(2, "read the config: %s", strerror(-r));
    r = eg_config_parse(text, len, &eg->cfg, err, sizeof(err));
    free(text);
    if (r < 0)
        return die(2, "%s", err);

    int acc = 0;
    socklen_t al = sizeof(acc);
    if (getsockopt(fds[1], SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 || !acc)
        return die(1, "%s", "--listen-fd is not a listening socket");
    if (fds[5] >= 0) {
        int type = 0;
        al = sizeof(type);
        if (getsockopt(fds[5], SOL_SOCKET, SO_TYPE, &type, &al) < 0 || type != SOCK_SEQPACKET)
            return die(1, "%s", "--handoff-fd is not a unix SOCK_SEQPACKET socket");
    }
    if (own_addresses(&eg->own) < 0)
        return die(1, "getifaddrs: %s", strerror(errno));

    OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
    eg->tls = eg_tls_new(&eg->cfg, err, sizeof(err));
    if (!eg->tls)
        return die(1, "%s", err);
    /* A random byte now: the DRBG seeds itself before the filter. */
    unsigned char rb;
    if (RAND_bytes(&rb, 1) != 1)
        return die(1, "%s", "the random number generator is not available");
    evutil_secure_rng_init();

    /* The epoll changelist folds the add/remove of a write event that a
     * relay step causes and completes within one loop turn into nothing:
     * about a third fewer system calls per chunk on a tunnel. */
    struct event_config *ecfg = event_config_new();
    if (ecfg)
        (void)event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST); /* a hint */
    eg->base = ecfg ? event_base_new_with_config(ecfg) : NULL;
    if (ecfg)
        event_config_free(ecfg);
    if (!eg->base)
        return die(1, "%s", "event_base_new failed");
    r = setup_dns(eg);
    if (r < 0)
        return die(1, "%s", r == -2 ? "\"resolver\" is not IP:PORT" : "evdns_base_new failed");


    /* libevent's listener accepts in a loop until EAGAIN: a blocking
     * listening socket would stall the whole proxy on the second accept. */
    evutil_make_socket_nonblocking(fds[1]);
    evutil_make_socket_nonblocking(fds[2]);
    evutil_make_socket_nonblocking(fds[3]);
    eg->events = bufferevent_socket_new(eg->base, fds[2], BEV_OPT_CLOSE_ON_FREE);
    eg->control = bufferevent_socket_new(eg->base, fds[3], BEV_OPT_CLOSE_ON_FREE);
    eg->listener = evconnlistener_new(eg->base, accept_cb, eg, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                      -1, fds[1]);
    if (fds[5] >= 0) {
        evutil_make_socket_nonblocking(fds[5]);
        eg->handoff = event_new(eg->base, fds[5], EV_READ | EV_PERSIST, handoff_cb, eg);
        if (!eg->handoff || event_add(eg->handoff, NULL) < 0)
            return die(1, "%s", "set up the handoff socket");
    }
    if (!eg->events || !eg->control || !eg->listener)
        return die(1, "%s", "set up the event loop");
    evconnlistener_set_error_cb(eg->listener, accept_error);
    bufferevent_setcb(eg->events, NULL, NULL, events_event, eg);
    bufferevent_enable(eg->events, EV_WRITE);
    bufferevent_setcb(eg->control, control_read, NULL, control_event, eg);
    bufferevent_enable(eg->control, EV_READ);

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return die(1, "no_new_privs: %s", strerror(errno));
    r = apply_seccomp();
    if (r < 0)
        return die(1, "seccomp: %s", strerror(-r));

    /* Last step of setup: the CA fd's EOF tells the supervisor that the
     * proxy is confined and about to accept. */
    char *pem = eg_tls_ca_pem(eg->tls);
    if (pem) {
        r = write_all(fds[4], pem, strlen(pem));
        free(pem);
        if (r < 0)
            return die(1, "write the CA certificate: %s", strerror(errno));
    }
    close(fds[4]);

    event_base_dispatch(eg->base);

    evconnlistener_free(eg->listener);
    if (eg->handoff) {
        event_free(eg->handoff);
        close(fds[5]);
    }
    eg_conn_free_all(eg);
    if (eg->events_dropped)
        eg_event(eg, json_pack("{s:s, s:I}", "type", "events_dropped", "count", (json_int_t)eg->events_dropped));
    events_flush_blocking(eg);
    if (eg->events)
        bufferevent_free(eg->events);
    bufferevent_free(eg->control);
    evdns_base_free(eg->dns, 0);
    event_base_free(eg->base);
    eg_tls_free(eg->tls);
    eg_config_clear(&eg->cfg);
    free(eg->own.v);
    return 0;
}
