/* SPDX-License-Identifier: Apache-2.0 */
/* Workspaces (workspace.c): one size-limited filesystem per session (or
 * per one-shot run with files), a tmpfs of size=quota where the kernel
 * can id-map tmpfs (6.3+), else an ext4 image of quota bytes on a loop
 * device (SRV_WS_EXT4_LOOP), mounted on a directory of "workspaces/" beside
 * the store (root's, 0700: nothing a run does can replace the bind
 * source), and the file operations of the API on it, every path resolved
 * from the workspace root's fd with openat2 (RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The backends, in the order "auto" tries them. */
enum srv_ws_backend {
    SRV_WS_TMPFS_IDMAP, /* a tmpfs, size=quota; id-mapped tmpfs mounts: Linux 6.3+ */
    SRV_WS_EXT4_LOOP,   /* an ext4 image of quota bytes (fallocated, unlinked once attached) on a
                         * loop device that detaches itself (LO_FLAGS_AUTOCLEAR); 5.12+, needs
                         * /dev/loop-control and mke2fs */
};
const char *srv_ws_backend_name(enum srv_ws_backend b);

struct srv_ws {
    enum srv_ws_backend backend;
    char *path;     /* the mount point (the runs' bind source) */
    char name[40];  /* its name in the workspaces directory */
    int dirfd;      /* the filesystem's root: every file operation starts here */
    uint32_t owner; /* host uid and gid of what is in it (id-mapped to the sandbox user) */
    uint64_t quota;
    uint64_t base_used; /* bytes the empty filesystem uses (ext4's metadata): not the runs' */
    bool mounted;
};

/* The workspaces directory: dirname(store)/workspaces, root's 0700,
 * emptied of what a killed server left (unmounted, removed). Enters a
 * mount namespace of the server's own first (MS_SLAVE: the host's
 * mounts reach it, its workspace mounts never reach the host and end with
 * the server). Picks the backend: want "auto" (NULL too: id-mapped tmpfs
 * where the kernel has it, else ext4 on loop), "tmpfs" or "ext4" (that
 * one or an error saying why not); *ret_backend. Root only; before any
 * thread (it forks to probe id-mapped tmpfs). */
int srv_ws_root_init(const char *store, const char *want, int *ret_fd, char **ret_path,
                     enum srv_ws_backend *ret_backend, char *msg, size_t msg_size);
/* A filesystem of quota bytes at root/name owned by owner, of the
 * backend srv_ws_root_init chose. */
int srv_ws_create(int rootfd, const char *root_path, const char *name, uint64_t quota, uint32_t owner,
                  struct srv_ws **ret, char *msg, size_t msg_size);
/* Detach the filesystem and remove its directory (what is open in it stays
 * readable through those fds until they close). */
void srv_ws_unmount(int rootfd, struct srv_ws *ws);
void srv_ws_free(struct srv_ws *ws);
/* No free block or inode left. */
bool srv_ws_full(const struct srv_ws *ws);
/* Bytes the files use (the empty filesystem's own taken off). */
uint64_t srv_ws_used(const struct srv_ws *ws);

/* File operations: 0 (or an fd), or a negative HTTP status with msg
 * filled: -400 bad path, -403 a symbolic link or a path out of the
 * workspace, -404, -409 in the way, -413 over max, -507 workspace_full,
 * -500. */
/* Check and normalise a workspace path (relative, or under
 * "/workspace/"): ret points into path. allow_root: "" (the root). */
int srv_ws_path(const char *path, bool allow_root, const char **ret, char *msg, size_t msg_size);
/* Write a file: begin (an O_TMPFILE in the parent, made as needed),
 * write, commit (linked under a temporary name and renamed over path). */
struct srv_ws_file {
    int dirfd, fd;
    char *name; /* the last component */
    uint64_t bytes, max;
    int err;    /* the first error (negative status), 0 */
    char msg[300];
};
int srv_ws_put_begin(struct srv_ws *ws, const char *path, uint64_t max, struct srv_ws_file *f);
void srv_ws_put_write(struct srv_ws_file *f, const void *data, size_t len);
int srv_ws_put_commit(struct srv_ws *ws, struct srv_ws_file *f);
void srv_ws_put_abort(struct srv_ws_file *f);
/* Open for GET: a regular file (1, *ret_fd, *ret_size) or a directory's
 * listing as JSON (0, *ret_json). */
int srv_ws_get(struct srv_ws *ws, const char *path, int *ret_fd, uint64_t *ret_size, char **ret_json, char *msg,
               size_t msg_size);
int srv_ws_delete(struct srv_ws *ws, const char *path, char *msg, size_t msg_size);

/* base64 (nettle's), for files and outputs in run requests. */
char *srv_base64_encode(const uint8_t *p, size_t n);
/* NULL: not base64 (or out of memory: *oom). */
uint8_t *srv_base64_decode(const char *s, size_t n, size_t *ret_len, bool *oom);
/* The outputs of a run: {path: {"base64", "bytes", "truncated"} or
 * {"error"}}, budget bytes in all. */
json_t *srv_ws_outputs(struct srv_ws *ws, char *const *paths, uint64_t max_file, uint64_t budget);
