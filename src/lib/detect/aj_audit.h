/* SPDX-License-Identifier: Apache-2.0 */
/* Audit events: one JSON object per line (docs/events.md). The supervisor
 * builds them; this module stamps, counts and writes them. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "aj_error.h"
#include "aj_result.h" /* enum aj_event_type */

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
    /* The event budget (see aj_audit_set_budget): a flood of attempts is
     * counted, not written. */
    uint64_t budget;                     /* budgeted events written at most; 0: no budget */
    uint64_t budget_used;
    uint64_t byte_cap;                   /* bytes written per run at most; 0: no cap */
    uint64_t bytes;                      /* written by this run */
    uint64_t suppressed[AJ_EV_COUNT];    /* since the last summary */
    uint64_t suppressed_total;
};

AJ_EXPORT const char *aj_severity_name(enum aj_severity s);

struct aj_policy;
/* path: NULL (no output), "-" (stderr) or a file (appended, created 0600;
 * reached without following a symlink; refused, with exit_hint 2, inside a
 * writable bind of pol when pol is given). */
int aj_audit_open(struct aj_audit *a, const struct aj_policy *pol, const char *path, const char *sandbox_id,
                  const char *policy_sha256, struct aj_error *err);
void aj_audit_close(struct aj_audit *a);

/* Room left in the events file for the end of the run (the final
 * events_suppressed summary and the exit event), past the byte cap's
 * ordinary share. */
#define AJ_AUDIT_RESERVE_BYTES (64 * 1024)
/* The events file's growth per run: every budgeted event at its largest
 * (six decoded 256-byte strings, escaped) plus the summaries. */
#define AJ_AUDIT_BYTES_PER_EVENT 4096ULL
#define AJ_AUDIT_SUMMARY_BYTES (1024 * 1024ULL)

/* After open: at most budget events of the budgeted kinds (every kind but
 * start, exit, limit and events_suppressed) are written; the byte cap
 * follows from it. 0: no budget, no cap. */
void aj_audit_set_budget(struct aj_audit *a, uint64_t budget);
/* true when the next event of this type would not be written (the budget
 * is spent). The supervisor then skips building it and calls
 * aj_audit_suppress instead. */
bool aj_audit_over_budget(const struct aj_audit *a, enum aj_event_type type);
/* Count an event that was not built or not written: the result's counts
 * still include it. */
void aj_audit_suppress(struct aj_audit *a, enum aj_event_type type);
/* Suppressed since the last summary (and reset them with clear). */
uint64_t aj_audit_suppressed_pending(const struct aj_audit *a);

/* A new event with time, sandbox_id, policy_sha256, type and severity. */
json_t *aj_audit_event(const struct aj_audit *a, enum aj_event_type type, enum aj_severity sev);
/* Add the MITRE ATT&CK technique (id and name) to an event. */
void aj_audit_technique(json_t *ev, const char *id);
/* Write, count and keep the first high-severity event; takes ev. Returns
 * true when ev is the run's first event of severity high or above. */
bool aj_audit_emit(struct aj_audit *a, json_t *ev, enum aj_event_type type, enum aj_severity sev);
