/* SPDX-License-Identifier: Apache-2.0 */
/* agentjail-egress internals: the run's configuration, the proxy state,
 * and the modules (config.c, tls.c, conn.c, events in main.c). */
#ifndef AJ_EG_H
#define AJ_EG_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <event2/event.h>
#include <jansson.h>
#include <openssl/ssl.h>

#include "eg_policy.h"

struct eg_secret {
    char *id;
    char **hosts;      /* patterns as eg_host_matches reads them */
    size_t n_hosts;
    char *header;      /* the one header the value may go into */
    char *value;       /* the real value: never in an event, log or error */
    char *placeholder; /* what the sandbox holds instead */
};

struct eg_caps {
    uint64_t max_connections;       /* 0: EG_DEFAULT_MAX_CONNECTIONS */
    uint64_t max_bytes_out;         /* 0: no cap */
    uint64_t max_bytes_in;
    uint64_t max_connection_seconds;
    uint64_t max_requests_per_second;
};

#define EG_DEFAULT_MAX_CONNECTIONS 256
#define EG_DEFAULT_CA_VALIDITY (24 * 3600)

struct eg_config {
    char *run_id;
    struct eg_rules allow, deny;
    struct eg_cidrs allow_ranges;
    char *resolver; /* "IP:PORT" or NULL */
    struct eg_caps caps;
    struct eg_secret *secrets;
    size_t n_secrets;
    char *upstream_ca_pem; /* tests: an extra trust anchor for re-originated TLS */
    uint64_t ca_validity_seconds;
};

/* config.c: parse the JSON object read from --config-fd. Unknown keys,
 * wrong types and bad entries are errors (the caller exits 2). */
int eg_config_parse(const char *text, size_t len, struct eg_config *ret, char *err, size_t errlen);
void eg_config_clear(struct eg_config *c);

/* tls.c: the per-run CA and the contexts. */
struct eg_tls;
struct eg_tls *eg_tls_new(const struct eg_config *cfg, char *err, size_t errlen);
void eg_tls_free(struct eg_tls *t);
/* The CA certificate in PEM (malloc'd), or NULL when there are no secrets. */
char *eg_tls_ca_pem(struct eg_tls *t);
/* A server-side SSL for host (leaf minted once per host), or NULL. */
SSL *eg_tls_server_ssl(struct eg_tls *t, const char *host);
/* A client-side SSL verifying host against the system trust store (and
 * upstream_ca_pem), with SNI set. */
SSL *eg_tls_client_ssl(struct eg_tls *t, const char *host);

/* The proxy: one per process. */
struct eg {
    struct event_base *base;
    struct evdns_base *dns;
    bool no_dns; /* no resolver: names are refused, literal addresses still served */
    struct eg_config cfg;
    struct eg_tls *tls;
    struct eg_cidrs own;       /* getifaddrs() at start */
    struct bufferevent *events;
    struct bufferevent *control;
    struct evconnlistener *listener;
    struct event *handoff;     /* --handoff-fd: connections the relay accepted, passed by SCM_RIGHTS */
    bool suspended;            /* brokering stopped (control "suspend") */
    uint64_t n_conns;
    uint64_t total_out, total_in;
    time_t rps_window;
    uint64_t rps_count;
    uint64_t events_dropped;
    struct conn *conns;        /* every live connection, for exit */
};

/* main.c: one event line on fd 5 (the object is consumed). */
void eg_event(struct eg *eg, json_t *ev);

/* conn.c */
void eg_conn_accept(struct eg *eg, int fd);
void eg_conn_free_all(struct eg *eg);

#endif
