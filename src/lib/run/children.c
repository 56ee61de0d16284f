/* SPDX-License-Identifier: Apache-2.0 */
/* The library's own children (see children.h). */
#include "children.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t *v;
static size_t n, cap;

void aj_children_add(pid_t pid)
{
    pthread_mutex_lock(&mu);
    if (n == cap) {
        size_t c = cap ? cap * 2 : 64;
        pid_t *nv = realloc(v, c * sizeof(*nv));
        if (nv) {
            v = nv;
            cap = c;
        }
    }
    /* Out of memory: not recorded, so a degraded run's end could take it
     * for an orphan of its own; only a degraded run ever looks. */
    if (n < cap)
        v[n++] = pid;
    pthread_mutex_unlock(&mu);
}

void aj_children_del(pid_t pid)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n; i++)
        if (v[i] == pid) {
            v[i] = v[--n];
            break;
        }
    pthread_mutex_unlock(&mu);
}

bool aj_children_has(pid_t pid)
{
    bool found = false;

    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n && !found; i++)
        found = v[i] == pid;
    pthread_mutex_unlock(&mu);
    return found;
}
