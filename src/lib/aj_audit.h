/* SPDX-License-Identifier: Apache-2.0 */
/* Audit events: one JSON object per line (docs/events.md). The supervisor
 * builds them; this module stamps, counts and writes them. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "aj_error.h"

enum aj_event_type {
    AJ_EV_START = 0,
    AJ_EV_EXIT,
    AJ_EV_ESCAPE_ATTEMPT,
    AJ_EV_CANARY,
    AJ_EV_NET_DENIED,
    AJ_EV_NET_ALLOWED,
    AJ_EV_LIMIT,
    AJ_EV_ERROR,
    AJ_EV_COUNT,
};

enum aj_severity {
    AJ_SEV_INFO = 0,
    AJ_SEV_LOW,
    AJ_SEV_MEDIUM,
    AJ_SEV_HIGH,
    AJ_SEV_CRITICAL,
};

struct aj_audit {
    int fd;          /* -1: events are counted, not written */
    bool own_fd;
    char sandbox_id[33];
    char policy_sha256[65];
    uint64_t counts[AJ_EV_COUNT];
    json_t *first_high; /* the first event of severity high or above */
};

AJ_EXPORT const char *aj_event_type_name(enum aj_event_type t);
AJ_EXPORT const char *aj_severity_name(enum aj_severity s);

struct aj_policy;
/* path: NULL (no output), "-" (stderr) or a file (appended, created 0600;
 * reached without following a symlink; refused, with exit_hint 2, inside a
 * writable bind of pol when pol is given). */
int aj_audit_open(struct aj_audit *a, const struct aj_policy *pol, const char *path, const char *sandbox_id,
                  const char *policy_sha256, struct aj_error *err);
void aj_audit_close(struct aj_audit *a);

/* A new event with time, sandbox_id, policy_sha256, type and severity. */
json_t *aj_audit_event(const struct aj_audit *a, enum aj_event_type type, enum aj_severity sev);
/* Add the MITRE ATT&CK technique (id and name) to an event. */
void aj_audit_technique(json_t *ev, const char *id);
/* Write, count and keep the first high-severity event; takes ev. Returns
 * true when ev is the run's first event of severity high or above. */
bool aj_audit_emit(struct aj_audit *a, json_t *ev, enum aj_event_type type, enum aj_severity sev);
