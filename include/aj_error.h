/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdarg.h>

#define AJ_EXPORT __attribute__((visibility("default")))

/* A failing library function returns a negative errno and fills this
 * caller-owned struct; it is left untouched on success. Fixed size on
 * purpose: the sandbox side of clone() must not malloc, and sends this
 * struct to the supervisor verbatim over the sync socket. */
struct aj_error {
    int errnum;     /* positive errno, or 0 for "no errno" (bad input) */
    int exit_hint;  /* 0, or the exit status the CLI should use (126/127) */
    char msg[512];
};

/* Fill err ("what: strerror") and return -errnum. Never returns 0: an
 * errnum of 0 (bad input, no syscall involved) is returned as -EINVAL. */
int aj_err(struct aj_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "what: " to the message already in err; returns r unchanged
 * (r must be negative). */
int aj_err_prefix(struct aj_error *err, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
