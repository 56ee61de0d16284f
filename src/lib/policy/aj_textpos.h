/* SPDX-License-Identifier: Apache-2.0 */
/* Positions of key paths in a JSON text (textpos.c). */
#pragma once

#include <stddef.h>

struct pos_entry {
    char *path;      /* "limits.memory", "filesystem.binds[1].host", "" for the top level */
    int line, col;   /* of the key (members) or of the element (arrays) */
    int vline, vcol; /* of the value */
};

struct pos_index {
    struct pos_entry *e;
    size_t n;
};

/* Index t (len bytes, valid JSON: jansson has parsed it). -ENOMEM, or
 * -E2BIG when nested too deeply; idx holds what was indexed either way
 * (pos_index_clear frees it). */
int pos_index_build(const char *t, size_t len, struct pos_index *idx);
void pos_index_clear(struct pos_index *idx);
/* The entry for path, or for its nearest ancestor that has one. */
const struct pos_entry *pos_find(const struct pos_index *idx, const char *path);
