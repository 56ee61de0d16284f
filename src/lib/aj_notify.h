/* SPDX-License-Identifier: Apache-2.0 */
/* The supervisor's side of seccomp user notification: every
 * escape-indicative syscall of the sandbox stops here, becomes an
 * escape_attempt event, and is refused. Arguments read from the sandbox's
 * memory go into the record only: the answer never depends on them, and
 * it is never "allow" (pointer arguments can change after they are read). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "aj_audit.h"
#include "aj_error.h"

struct seccomp_notif;
struct seccomp_notif_resp;

struct aj_notify {
    int fd; /* the listener, -1 when none */
    struct seccomp_notif *req;
    struct seccomp_notif_resp *resp;
};

int aj_notify_init(struct aj_notify *n, int listener_fd, struct aj_error *err);
void aj_notify_clear(struct aj_notify *n);

/* Receive one notification, answer it (EPERM; a foreign-ABI call also
 * kills the caller with SIGSYS, as the kernel's own filter would) and
 * return its event in *ret_ev (NULL if the notification vanished).
 * Returns 0, or -errno when the listener is gone. */
int aj_notify_handle(struct aj_notify *n, const struct aj_audit *a, json_t **ret_ev, enum aj_severity *ret_sev);
