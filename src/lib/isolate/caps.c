/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_caps.h"

#include <errno.h>
#include <stdbool.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aj_missing.h"

int aj_caps_child_drop_all(struct aj_error *err)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2] = {{0}};
    int cap;

    /* A uid change may have cleared the effective set (permitted kept by
     * PR_SET_KEEPCAPS): raise it again so the drops below are permitted. */
    if (syscall(__NR_capget, &hdr, data) < 0)
        return aj_err(err, errno, "capget");
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    if (syscall(__NR_capset, &hdr, data) < 0)
        return aj_err(err, errno, "raise effective capabilities");
    bool bounding_kept = false;

    /* Lock root's special treatment off for good: even a uid-0 process
     * inside gains nothing at exec, and no later setuid fixup or ambient
     * raise can bring capabilities back. Needs CAP_SETPCAP, so first. */
    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
              0, 0, 0) < 0 &&
        errno != EPERM)
        return aj_err(err, errno, "lock securebits");
    /* EPERM above means no CAP_SETPCAP (a degraded run as an ordinary
     * user): there is nothing to lock, the sets below are already empty and
     * no_new_privs stops exec from granting any. */
    /* Bounding set: loop until the kernel says the cap does not exist, so a
     * newer kernel's extra capabilities are dropped too. Without
     * CAP_SETPCAP (only a degraded run as an ordinary user) it cannot be
     * emptied: say so with 1 rather than fail a run that holds no caps. */
    for (cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break;
            if (errno == EPERM && !(data[0].permitted & (1u << CAP_SETPCAP))) {
                bounding_kept = true;
                break;
            }
            return aj_err(err, errno, "drop capability %d from the bounding set", cap);
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return aj_err(err, errno, "clear ambient capabilities");
    memset(data, 0, sizeof(data));
    if (syscall(__NR_capset, &hdr, data) < 0)
        return aj_err(err, errno, "clear capability sets");
    /* Verify, rather than trust, that every set is empty. */
    if (syscall(__NR_capget, &hdr, data) < 0)
        return aj_err(err, errno, "capget");
    for (int i = 0; i < 2; i++)
        if (data[i].effective || data[i].permitted || data[i].inheritable)
            return aj_err(err, EPERM, "capabilities still present after drop");
    if (!bounding_kept && prctl(PR_CAPBSET_READ, 0, 0, 0, 0) != 0)
        return aj_err(err, EPERM, "bounding set not empty after drop");
    return bounding_kept ? 1 : 0;
}

int aj_caps_child_no_new_privs(struct aj_error *err)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return aj_err(err, errno, "set no_new_privs");
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        return aj_err(err, EPERM, "no_new_privs did not take");
    return 0;
}
