/* SPDX-License-Identifier: Apache-2.0 */
/* Honeytokens: decoys where escape tooling looks first. A Docker socket
 * the supervisor listens on, a Kubernetes service-account token, CA and
 * namespace, and (if asked) cloud credentials in the environment and in
 * ~/.aws/credentials. Every value embeds the sandbox id, so a decoy that
 * shows up anywhere later traces back to its run. Touching one raises a
 * canary event at once. The decoys live inside the sandbox's own tmpfs: no
 * host file is created, nothing can be left behind. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "aj_audit.h"
#include "aj_error.h"
#include "aj_mount.h"
#include "aj_policy.h"

#define AJ_DECOY_MAX_FILES 4
#define AJ_DECOY_SOCKET "/var/run/docker.sock"

struct aj_decoy_files {
    size_t n;
    const char *paths[AJ_DECOY_MAX_FILES]; /* sandbox paths, static strings */
    const char *kinds[AJ_DECOY_MAX_FILES];
};

/* Supervisor side, before clone: add the decoy files to the mount plan, and
 * the cloud env decoys to env_out (up to 2 "NAME=value", caller frees). */
int aj_decoy_plan(const struct aj_policy *pol, const char *sandbox_id, struct aj_mount_plan *plan,
                  struct aj_decoy_files *files, char *env_out[2], json_t **ret_info, struct aj_error *err);

/* Sandbox side (init, after pivot_root, capabilities held): listen on the
 * decoy socket, watch the decoy files, make /var/run read-only. */
int aj_decoy_child_arm(const struct aj_decoy_files *files, int *ret_sock, int *ret_inotify,
                       int wds[AJ_DECOY_MAX_FILES], struct aj_error *err);

/* Supervisor side: turn activity on the decoys into canary events. */
void aj_decoy_on_socket(int sock, struct aj_audit *a, json_t **ret_ev);
size_t aj_decoy_on_inotify(int ifd, const struct aj_decoy_files *files, const int wds[AJ_DECOY_MAX_FILES],
                           struct aj_audit *a, json_t **ret_evs, size_t max);
