/* SPDX-License-Identifier: Apache-2.0 */
/* Decoy lease breaks, without taking a signal from the embedder.
 *
 * The kernel reports a lease break only by a signal (F_SETSIG) to the
 * lease's owner (F_SETOWN_EX), and holds the opener until the holder lets
 * go. Sent to the process, the signal would reach whichever thread of the
 * embedder does not block it (a real-time signal's default action ends
 * the process); read from a signalfd, it would need every thread of the
 * process to block it. So the owner is a thread of the library's own
 * (F_OWNER_TID), started at the process's first lease, which blocks every
 * signal and takes this one with sigwaitinfo: a thread-directed signal
 * reaches no other thread, whatever their masks and dispositions. It
 * passes each break's fd to the sandbox that registered it, down that
 * sandbox's wake pipe, which the sandbox's event loop polls. */
#pragma once

#include <sys/types.h>

#include "aj_error.h"

/* Route breaks of the lease on fd to wake_fd (an int, the fd, per break).
 * Starts the thread if needed; returns its tid and the signal to set on
 * fd (F_SETSIG) in ret_tid and ret_sig. */
int aj_leases_watch(int fd, int wake_fd, pid_t *ret_tid, int *ret_sig, struct aj_error *err);
/* Before fd is closed: a break of it is no longer routed (a late one for
 * the same fd number, reused, is told apart by F_GETLEASE). */
void aj_leases_unwatch(int fd);
