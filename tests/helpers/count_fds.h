/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the library-loop helpers: how many fds this process holds. */
#pragma once

#include <dirent.h>

static inline int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;

    if (!d)
        return -1;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the DIR's own fd */
}
