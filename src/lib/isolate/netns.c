/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_netns.h"

#include <errno.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "aj_util.h"

int aj_netns_child_setup(const struct aj_policy *pol, struct aj_error *err)
{
    struct ifreq ifr;
    _cleanup_close_ int fd = -1;

    /* proxy: lo is up already (the netns helper brought it up for the
     * relay's socket); again here, harmlessly. */
    if (pol->network != AJ_NET_LOOPBACK && pol->network != AJ_NET_PROXY)
        return 0;
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return aj_err(err, errno, "socket for loopback setup");
    memset(&ifr, 0, sizeof(ifr));
    strcpy(ifr.ifr_name, "lo");
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
        return aj_err(err, errno, "read flags of lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
        return aj_err(err, errno, "bring lo up");
    return 0;
}
