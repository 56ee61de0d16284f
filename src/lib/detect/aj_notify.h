/* SPDX-License-Identifier: Apache-2.0 */
/* The supervisor's side of seccomp user notification: every
 * escape-indicative syscall of the sandbox stops here, becomes an
 * escape_attempt event, and is refused. Arguments read from the sandbox's
 * memory go into the record only: the answer never depends on them, and
 * it is never "allow" (pointer arguments can change after they are read). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "aj_audit.h"
#include "aj_error.h"

struct seccomp_notif;
struct seccomp_notif_resp;

struct aj_notify {
    int fd; /* the listener, -1 when none */
    struct seccomp_notif *req;
    struct seccomp_notif_resp *resp;
    bool pending; /* received, not answered yet */
    bool foreign;
};

int aj_notify_init(struct aj_notify *n, int listener_fd, struct aj_error *err);
void aj_notify_clear(struct aj_notify *n);

/* Receive one notification and build its event (*ret_ev). Returns 1 when
 * one is pending an answer, 0 when it vanished, -errno when the listener
 * is gone. The caller is held in the kernel until aj_notify_answer: the
 * supervisor can record it, and end the run, before it goes on. */
int aj_notify_receive(struct aj_notify *n, const struct aj_audit *a, json_t **ret_ev, enum aj_severity *ret_sev);
/* The same without building an event (the event budget is spent): the
 * notification is taken and pending an answer, and *ret_nr and *ret_arch say
 * what the call was, for the summary's counts. Cheap: one ioctl. */
int aj_notify_receive_bare(struct aj_notify *n, int *ret_nr, uint32_t *ret_arch);
/* The name of a system call of the native ABI, for summaries; NULL when
 * unknown. Caller frees. */
char *aj_notify_syscall_name(int nr, uint32_t arch);
/* EPERM; a foreign-ABI caller is also killed with SIGSYS, as the kernel's
 * own filter would. */
void aj_notify_answer(struct aj_notify *n);
