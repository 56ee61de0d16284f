/* SPDX-License-Identifier: Apache-2.0 */
/* Positions of key paths in a JSON text (textpos.c). A copy of
 * src/lib/policy/textpos.c under other names: the server is a client of
 * include/ only and may not link against the library's internals. */
#pragma once

#include <stddef.h>

struct srv_pos_entry {
    char *path;      /* "limits.memory", "filesystem.binds[1].host", "" for the top level */
    int line, col;   /* of the key (members) or of the element (arrays) */
    int vline, vcol; /* of the value */
};

struct srv_pos_index {
    struct srv_pos_entry *e;
    size_t n;
};

/* Index t (len bytes, valid JSON: jansson has parsed it). -ENOMEM, or
 * -E2BIG when nested too deeply; idx holds what was indexed either way
 * (srv_pos_index_clear frees it). */
int srv_pos_index_build(const char *t, size_t len, struct srv_pos_index *idx);
void srv_pos_index_clear(struct srv_pos_index *idx);
/* The entry for path, or for its nearest ancestor that has one. */
const struct srv_pos_entry *srv_pos_find(const struct srv_pos_index *idx, const char *path);
