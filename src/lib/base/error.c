/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Only vsnprintf into the caller's buffer and strerrordesc_np: safe on the
 * sandbox side of clone(), where no malloc or lock may be taken
 * (tools/check-child-calls.py). Not strerror_r: it translates through the
 * message catalogue (dcgettext takes a lock, and may malloc); the
 * library never calls setlocale, so the text is the same English. */
int aj_err(struct aj_error *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    size_t len;

    if (!err)
        return errnum > 0 ? -errnum : -EINVAL;
    err->errnum = errnum > 0 ? errnum : 0;
    err->exit_hint = 0;
    va_start(ap, fmt);
    (void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    len = strlen(err->msg);
    if (errnum > 0 && len + 3 < sizeof(err->msg)) {
        const char *s = strerrordesc_np(errnum);
        if (s)
            (void)snprintf(err->msg + len, sizeof(err->msg) - len, ": %s", s);
        else
            (void)snprintf(err->msg + len, sizeof(err->msg) - len, ": Unknown error %d", errnum);
    }
    return errnum > 0 ? -errnum : -EINVAL;
}

int aj_err_prefix(struct aj_error *err, int r, const char *fmt, ...)
{
    char prefix[192];
    char old[sizeof(err->msg)];
    va_list ap;

    if (!err)
        return r;
    va_start(ap, fmt);
    (void)vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    old[sizeof(old) - 1] = '\0';
    {
        /* Assemble by hand: the message is cut, never overflowed. */
        size_t pl = strnlen(prefix, sizeof(prefix) - 1), ol = strlen(old);
        memcpy(err->msg, prefix, pl);
        memcpy(err->msg + pl, ": ", 2);
        if (ol > sizeof(err->msg) - pl - 3)
            ol = sizeof(err->msg) - pl - 3;
        memcpy(err->msg + pl + 2, old, ol);
        err->msg[pl + 2 + ol] = '\0';
    }
    return r < 0 ? r : -EINVAL;
}
