/* SPDX-License-Identifier: Apache-2.0 */
/* Forwarding a request to the replica that holds its run or session
 * (forward.c); http.c routes through it. */
#pragma once

#include <microhttpd.h>

#include "srv.h"

/* The hop header: a request that carries it was forwarded once and is
 * never forwarded again. */
#define SRV_FWD_HEADER "X-Agentjail-Forwarded"

struct srv_fwd;

/* Whether this /v1/ request of t is for a run or session live on another
 * replica that has an advertise address: 1 and *ret_addr (malloc'd) to
 * forward it there; 0 to serve it here (its own, not live elsewhere,
 * SQLite, or an owner without an address: the handlers then say 421);
 * -1 with reply filled (508: it was forwarded once already). */
int srv_fwd_route(struct srv_ctx *ctx, const struct srv_tenant *t, struct MHD_Connection *c, const char *url,
                  char **ret_addr, struct srv_reply *reply);

/* Open the request to the owner at addr and send its head: the client's
 * method, url (re-encoded), Authorization and Content-Type, the hop
 * header. body_len: the body's length, or -1 for a body of unknown
 * length (sent chunked), or -2 for none. idle_s bounds each wait for the
 * owner's bytes. 0 and *ret, or -1 with reply filled (503: the owner
 * could not be reached). */
int srv_fwd_open(struct srv_ctx *ctx, struct MHD_Connection *c, const char *addr, const char *method,
                 const char *url, int64_t body_len, unsigned idle_s, struct srv_fwd **ret, struct srv_reply *reply);
/* A piece of the body, sent at once; a failure is kept for srv_fwd_finish. */
void srv_fwd_write(struct srv_fwd *f, const char *data, size_t len);
/* The body is sent: read the owner's status and headers and queue its
 * response, its body streamed back as it comes (f is the response's
 * now). On a failure, f is freed and reply filled (503), which the
 * caller queues. */
int srv_fwd_finish(struct srv_fwd *f, struct MHD_Connection *c, enum MHD_Result *ret, struct srv_reply *reply);
void srv_fwd_free(struct srv_fwd *f);
/* Shutdown: forwarding stops (503), and every forwarded request still
 * waiting on its owner ends now (its client's connection is cut). */
void srv_fwd_shutdown(void);

/* The TLS credentials for https peers (replica.ca or the system's), made
 * once at start; released at exit. 0, or -1 and why. */
int srv_fwd_init(const struct srv_config *cfg, char *msg, size_t msg_size);
void srv_fwd_cleanup(void);
