/* SPDX-License-Identifier: Apache-2.0 */
/* The key reference, written from the key table: the tables of
 * docs/policy.md's "Keys" section (`agentjail policy keys --markdown`;
 * tests/integration/test_policy_docs.py fails when the file and the table
 * disagree), or one line per key for people at a terminal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"

/* A table cell: '|' would end it early. */
static void cell(FILE *f, const char *s)
{
    fputs(" ", f);
    for (; s && *s; s++) {
        if (*s == '|')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputs(" |", f);
}

static void code_cell(FILE *f, const char *s)
{
    fprintf(f, " `%s` |", s);
}

static void type_of(const struct aj_policy_key *k, char *buf, size_t size)
{
    const char *base = "";
    size_t n;

    if (k->doc_type) {
        (void)snprintf(buf, size, "%s", k->doc_type);
        return;
    }
    switch (k->type) {
    case AJ_KEY_BOOL:
        base = "boolean";
        break;
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
        base = "integer";
        break;
    case AJ_KEY_SIZE:
        base = "size";
        break;
    case AJ_KEY_DURATION:
        base = "duration";
        break;
    case AJ_KEY_CPUS:
        base = "CPU share";
        break;
    case AJ_KEY_STRING:
        base = "string";
        break;
    case AJ_KEY_ENUM:
        buf[0] = '\0';
        for (size_t i = 0; k->names[i]; i++) {
            n = strlen(buf);
            (void)snprintf(buf + n, size - n, "%s`\"%s\"`", i == 0 ? "" : k->names[i + 1] ? ", " : " or ",
                           k->names[i]);
        }
        return;
    case AJ_KEY_CONST:
    case AJ_KEY_BIND_LIST:
    case AJ_KEY_TMPFS_LIST:
    case AJ_KEY_ENV_MAP:
    case AJ_KEY_NAME_LIST:
    case AJ_KEY_MODULE_LIST:
    case AJ_KEY_ID_RANGE:
    case AJ_KEY_LIMIT_SET:
    case AJ_KEY_STR_LIST:
    case AJ_KEY_SECRET_LIST:
        base = "see below";
        break;
    }
    (void)snprintf(buf, size, "%s%s", base,
                   k->zero == AJ_ZERO_NONE ? " or `null`" : k->zero == AJ_ZERO_AUTO ? " or `\"auto\"`" : "");
}

/* The default as `policy show` prints it; "none" for no limit. */
static void default_of(const struct aj_policy_key *k, char *buf, size_t size)
{
    char v[64];

    if (k->doc_default) {
        (void)snprintf(buf, size, "%s", k->doc_default);
        return;
    }
    switch (k->type) {
    case AJ_KEY_BIND_LIST:
    case AJ_KEY_TMPFS_LIST:
    case AJ_KEY_NAME_LIST:
    case AJ_KEY_STR_LIST:
    case AJ_KEY_SECRET_LIST:
    case AJ_KEY_MODULE_LIST:
        (void)snprintf(buf, size, "`[]`");
        return;
    case AJ_KEY_ENV_MAP:
        (void)snprintf(buf, size, "`{}`");
        return;
    case AJ_KEY_STRING:
    case AJ_KEY_CONST:
        if (k->def_str)
            (void)snprintf(buf, size, "`\"%s\"`", k->def_str);
        else
            (void)snprintf(buf, size, "`null`");
        return;
    case AJ_KEY_ID_RANGE:
    case AJ_KEY_LIMIT_SET:
        (void)snprintf(buf, size, "(see below)");
        return;
    case AJ_KEY_BOOL:
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
    case AJ_KEY_ENUM:
        break;
    }
    if (k->def == 0 && k->zero == AJ_ZERO_NONE) {
        (void)snprintf(buf, size, "none");
        return;
    }
    aj_policy_key_format(k, k->def, v, sizeof(v));
    if (k->type == AJ_KEY_BOOL || k->type == AJ_KEY_COUNT || k->type == AJ_KEY_ID)
        (void)snprintf(buf, size, "`%s`", v);
    else
        (void)snprintf(buf, size, "`\"%s\"`", v);
}

/* What a flag or file may write: min..max of the row. */
static void range_of(const struct aj_policy_key *k, char *buf, size_t size)
{
    char lo[32], hi[32];
    uint64_t max = k->input_max ? k->input_max : k->max;

    buf[0] = '\0';
    switch (k->type) {
    case AJ_KEY_COUNT:
    case AJ_KEY_ID:
    case AJ_KEY_SIZE:
    case AJ_KEY_DURATION:
    case AJ_KEY_CPUS:
    case AJ_KEY_ID_RANGE:
        break;
    case AJ_KEY_BOOL:
    case AJ_KEY_ENUM:
    case AJ_KEY_STRING:
    case AJ_KEY_CONST:
    case AJ_KEY_BIND_LIST:
    case AJ_KEY_TMPFS_LIST:
    case AJ_KEY_ENV_MAP:
    case AJ_KEY_NAME_LIST:
    case AJ_KEY_MODULE_LIST:
    case AJ_KEY_LIMIT_SET:
    case AJ_KEY_STR_LIST:
    case AJ_KEY_SECRET_LIST:
        return;
    }
    if (k->type == AJ_KEY_ID_RANGE) {
        (void)snprintf(buf, size, "%llu..%llu", (unsigned long long)k->min, (unsigned long long)max);
        return;
    }
    if (k->min == 0)
        (void)snprintf(lo, sizeof(lo), "0");
    else
        aj_policy_key_format(k, k->min, lo, sizeof(lo));
    aj_policy_key_format(k, max, hi, sizeof(hi));
    (void)snprintf(buf, size, "%s..%s", lo, hi);
}

static void flag_of(const struct aj_policy_key *k, char *buf, size_t size)
{
    if (k->doc_flag)
        (void)snprintf(buf, size, "%s", k->doc_flag);
    else if (k->flag)
        (void)snprintf(buf, size, "`%s`", k->flag);
    else
        buf[0] = '\0';
}

static void markdown(FILE *f)
{
    char type[256], def[256], range[96], flag[128];

    for (size_t g = 0; g < aj_policy_n_groups; g++) {
        const struct aj_policy_group *grp = &aj_policy_groups[g];
        fprintf(f, "### `%s`\n\n", grp->name);
        if (grp->intro)
            fprintf(f, "%s\n\n", grp->intro);
        fputs("| key | type | default | range | flag | protects against |\n|---|---|---|---|---|---|\n", f);
        for (size_t i = 0; i < aj_policy_n_keys; i++) {
            const struct aj_policy_key *k = &aj_policy_keys[i];
            if (!aj_policy_key_in_group(k, grp->name))
                continue;
            type_of(k, type, sizeof(type));
            default_of(k, def, sizeof(def));
            range_of(k, range, sizeof(range));
            flag_of(k, flag, sizeof(flag));
            fputs("|", f);
            code_cell(f, aj_policy_key_name(k));
            cell(f, type);
            cell(f, def);
            cell(f, range);
            cell(f, flag);
            cell(f, k->doc);
            fputs("\n", f);
        }
        for (size_t i = 0; i < aj_policy_n_keys; i++) {
            const struct aj_policy_key *k = &aj_policy_keys[i];
            if (!aj_policy_key_in_group(k, grp->name) || !k->sub)
                continue;
            /* lists: what one entry holds; objects: their members */
            fprintf(f, k->type == AJ_KEY_ID_RANGE ? "\n`%s` holds:\n\n" : "\nEach `%s` entry:\n\n",
                    aj_policy_key_name(k));
            fputs("| key | type | default | meaning |\n|---|---|---|---|\n", f);
            for (const struct aj_policy_subkey *s = k->sub; s->name; s++) {
                fputs("|", f);
                code_cell(f, s->name);
                cell(f, s->type);
                cell(f, s->def);
                cell(f, s->doc);
                fputs("\n", f);
            }
        }
        if (grp->outro)
            fprintf(f, "\n%s\n", grp->outro);
        if (g + 1 < aj_policy_n_groups)
            fputs("\n", f);
    }
}

/* One line per key; backquotes are Markdown's, not the terminal's. */
static void plain(FILE *f)
{
    char type[256], def[256], range[96], flag[128];

    for (size_t i = 0; i < aj_policy_n_keys; i++) {
        const struct aj_policy_key *k = &aj_policy_keys[i];
        char line[1024];
        size_t o = 0;
        type_of(k, type, sizeof(type));
        default_of(k, def, sizeof(def));
        range_of(k, range, sizeof(range));
        flag_of(k, flag, sizeof(flag));
        (void)snprintf(line, sizeof(line), "%-40s %s; default %s%s%s%s%s", k->key, type, def, range[0] ? "; " : "",
                       range, flag[0] ? "; flag " : "", flag);
        for (size_t j = 0; line[j]; j++)
            if (line[j] != '`')
                line[o++] = line[j];
        line[o] = '\0';
        fprintf(f, "%s\n", line);
    }
}

char *aj_policy_describe_keys(bool md)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (!f)
        return NULL;
    if (md)
        markdown(f);
    else
        plain(f);
    if (ferror(f)) {
        (void)fclose(f);
        free(buf);
        return NULL;
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
