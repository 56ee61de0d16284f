/* SPDX-License-Identifier: Apache-2.0 */
/* The library's own child processes, process-wide: every sandbox's init
 * (or degraded payload), the helpers, the alert hooks, of every handle
 * and pool in the process. A degraded run, whose supervisor is a
 * subreaper, kills the children the run left behind at its end: never
 * one of these (another run's sandbox), nor one the embedder had before. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

void aj_children_add(pid_t pid);
void aj_children_del(pid_t pid);
bool aj_children_has(pid_t pid);
