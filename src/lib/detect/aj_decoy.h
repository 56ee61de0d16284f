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
#include "aj_policy_model.h"

#define AJ_DECOY_MAX_FILES 16
#define AJ_DECOY_SOCKET "/var/run/docker.sock"

struct aj_decoy_files {
    size_t n;
    const char *paths[AJ_DECOY_MAX_FILES]; /* sandbox paths, static strings */
    const char *kinds[AJ_DECOY_MAX_FILES];
    const char *techniques[AJ_DECOY_MAX_FILES];
    /* Made by aj_decoy_child_arm (device names in the sandbox's /dev, which
     * is built after the mount plan's files), not by the mount plan. The
     * payload needs read and write on them (Landlock) for its open to get
     * as far as the lease. */
    bool made_at_arm[AJ_DECOY_MAX_FILES];
};

/* What the decoys need planted in the sandbox's root: small tmpfs mounts
 * and files with their contents. The run module hands them to the mount
 * layer (a detection module does not call an isolation layer). */
#define AJ_DECOY_MAX_PLANTS 8
struct aj_decoy_plant {
    const char *path; /* sandbox path, a static string */
    char *content;    /* a file's contents (owned); NULL: a tmpfs of size bytes */
    uint64_t size;
    const char *mode; /* tmpfs mode ("0755") */
};
struct aj_decoy_plants {
    size_t n;
    struct aj_decoy_plant v[AJ_DECOY_MAX_PLANTS];
};
void aj_decoy_plants_clear(struct aj_decoy_plants *plants);

/* Supervisor side, before clone: what to plant (plants, to be cleared by
 * the caller on every path), the decoy files to watch, and the cloud env
 * decoys in env_out (up to 2 "NAME=value", caller frees). */
int aj_decoy_plan(const struct aj_policy *pol, const char *sandbox_id, struct aj_decoy_plants *plants,
                  struct aj_decoy_files *files, char *env_out[2], json_t **ret_info, struct aj_error *err);

/* Sandbox side (init, after pivot_root, capabilities held): listen on the
 * decoy socket, open each decoy file (the supervisor takes a lease on it),
 * make /var/run read-only. */
int aj_decoy_child_arm(const struct aj_decoy_files *files, int *ret_sock, int file_fds[AJ_DECOY_MAX_FILES],
                       struct aj_error *err);

/* Supervisor side: a write lease on each decoy file. Any open of the file
 * by anyone else breaks the lease, and the kernel tells thread owner_tid
 * with signal sig (si_fd = the file) before that open returns; the opener
 * waits until aj_decoy_release_lease. fsnotify would do too, but tearing
 * down its marks waits for an SRCU grace period on every run. */
int aj_decoy_parent_lease(int fd, int sig, pid_t owner_tid, struct aj_error *err);

/* Supervisor side: a connection to the decoy socket (non-blocking, or -1);
 * later, its event: the request line if one came, then a 403, then close. */
int aj_decoy_accept(int sock);
json_t *aj_decoy_conn_event(int conn, struct aj_audit *a, bool reply_403);
#define AJ_DECOY_REQUEST_WAIT_MS 1000 /* how long a client has to send its request */
/* A lease on file i broke: its event. The opener is held until
 * aj_decoy_release_lease (then it reads the decoy). */
json_t *aj_decoy_lease_event(const struct aj_decoy_files *files, size_t i, struct aj_audit *a);
void aj_decoy_release_lease(int fd);
