/* SPDX-License-Identifier: Apache-2.0 */
/* Where each key path starts in a JSON text, for error messages that point
 * at FILE:LINE:COLUMN. jansson parses and validates the syntax but keeps no
 * positions for values, so this small scanner indexes the (already
 * validated) text. Knows nothing of policies. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_textpos.h"

void srv_pos_index_clear(struct srv_pos_index *idx)
{
    for (size_t i = 0; i < idx->n; i++)
        free(idx->e[i].path);
    free(idx->e);
    idx->e = NULL;
    idx->n = 0;
}

static int srv_pos_add(struct srv_pos_index *idx, const char *path, int line, int col)
{
    struct srv_pos_entry *ne = realloc(idx->e, (idx->n + 1) * sizeof(*ne));
    if (!ne)
        return -ENOMEM;
    idx->e = ne;
    ne[idx->n] = (struct srv_pos_entry){.path = strdup(path), .line = line, .col = col, .vline = line, .vcol = col};
    if (!ne[idx->n].path)
        return -ENOMEM;
    idx->n++;
    return 0;
}

#define POS_DEPTH 64

/* Columns count characters, as jansson's do: UTF-8 continuation bytes
 * (10xxxxxx) do not start one. */
static int chars_in(const char *t, size_t from, size_t to)
{
    int n = 0;
    for (size_t i = from; i < to; i++)
        n += ((unsigned char)t[i] & 0xc0) != 0x80;
    return n;
}

/* Syntax is already validated by jansson, so this only tracks structure;
 * still, every step advances by at least one byte, whatever the input. */
int srv_pos_index_build(const char *t, size_t len, struct srv_pos_index *idx)
{
    struct {
        bool is_obj;
        size_t plen;   /* length of the path prefix for this container */
        size_t index;  /* arrays: current element */
        bool want_key; /* objects: next string is a key */
    } st[POS_DEPTH];
    char path[1024] = "";
    int depth = -1, line = 1, col = 1;
    bool pending_value = true; /* the root value */

    for (size_t i = 0; i < len;) {
        char c = t[i];
        int tline = line, tcol = col;

        if (c == '\n') {
            line++;
            col = 1;
            i++;
            continue;
        }
        if (isspace((unsigned char)c) || c == ':' || c == '\0') {
            col++;
            i++;
            continue;
        }
        if (c == ',') {
            if (depth >= 0) {
                if (st[depth].is_obj)
                    st[depth].want_key = true;
                else {
                    st[depth].index++;
                    pending_value = true;
                }
            }
            col++;
            i++;
            continue;
        }
        if (c == '}' || c == ']') {
            if (depth >= 0) {
                path[st[depth].plen] = '\0';
                depth--;
            }
            col++;
            i++;
            continue;
        }
        /* A value or a key starts here. */
        if (depth >= 0 && st[depth].is_obj && st[depth].want_key && c == '"') {
            size_t j = i + 1, plen = st[depth].plen;
            while (j < len && t[j] != '"')
                j += t[j] == '\\' ? 2 : 1;
            if (j > len)
                j = len;
            path[plen] = '\0';
            if (plen + 1 + (j - i - 1) + 1 < sizeof(path)) {
                if (plen)
                    strcat(path, ".");
                strncat(path, t + i + 1, j - i - 1);
            }
            if (srv_pos_add(idx, path, tline, tcol) < 0)
                return -ENOMEM;
            st[depth].want_key = false;
            pending_value = true;
            col += chars_in(t, i, j < len ? j + 1 : len);
            i = j + 1;
            continue;
        }
        if (depth >= 0 && !st[depth].is_obj && pending_value) {
            size_t plen = st[depth].plen;
            path[plen] = '\0';
            if (plen + 24 < sizeof(path))
                snprintf(path + plen, sizeof(path) - plen, "[%zu]", st[depth].index);
            if (srv_pos_add(idx, path, tline, tcol) < 0)
                return -ENOMEM;
        } else if (depth < 0 && pending_value) {
            /* The top-level value: where errors about it (a missing
             * "version") point. */
            if (srv_pos_add(idx, "", tline, tcol) < 0)
                return -ENOMEM;
        } else if (idx->n && pending_value) {
            idx->e[idx->n - 1].vline = tline;
            idx->e[idx->n - 1].vcol = tcol;
        }
        pending_value = false;
        if (c == '{' || c == '[') {
            if (depth + 1 >= POS_DEPTH)
                return -E2BIG;
            depth++;
            st[depth].is_obj = c == '{';
            st[depth].plen = strlen(path);
            st[depth].index = 0;
            st[depth].want_key = c == '{';
            pending_value = c == '[';
            col++;
            i++;
            continue;
        }
        if (c == '"') {
            size_t j = i + 1;
            while (j < len && t[j] != '"')
                j += t[j] == '\\' ? 2 : 1;
            if (j > len)
                j = len;
            col += chars_in(t, i, j < len ? j + 1 : len);
            i = j + 1;
        } else {
            /* A number or a literal: up to the next delimiter. */
            size_t j = i + 1;
            while (j < len && t[j] != '\0' && !strchr(",}] \t\r\n:", t[j]))
                j++;
            col += chars_in(t, i, j);
            i = j;
        }
        if (depth >= 0)
            path[st[depth].plen] = '\0';
    }
    return 0;
}

const struct srv_pos_entry *srv_pos_find(const struct srv_pos_index *idx, const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    for (;;) {
        for (size_t i = 0; i < idx->n; i++)
            if (strcmp(idx->e[i].path, p) == 0)
                return &idx->e[i];
        char *cut = strrchr(p, '.');
        char *br = strrchr(p, '[');
        if (br && (!cut || br > cut))
            cut = br;
        if (!cut) {
            if (!p[0])
                return NULL;
            cut = p; /* last: the top-level object (path "") */
        }
        *cut = '\0';
    }
}
