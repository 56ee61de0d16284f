/* SPDX-License-Identifier: Apache-2.0 */
/* Findings and their two renderings: JSON (schema version 1, written by
 * hand: the probe is static and carries no JSON library) and a table. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

static const char *const status_names[] = {
    [PR_EXPOSED] = "exposed", [PR_BLOCKED] = "blocked", [PR_ABSENT] = "absent",
    [PR_INFO] = "info",       [PR_UNKNOWN] = "unknown",
};
static const char *const sev_names[] = {
    [PR_SEV_CRITICAL] = "critical", [PR_SEV_HIGH] = "high", [PR_SEV_MEDIUM] = "medium",
    [PR_SEV_LOW] = "low",           [PR_SEV_INFO] = "info",
};
static const char *const cat_names[] = {
    [PR_CAT_PRIVILEGES] = "privileges", [PR_CAT_SYSCALLS] = "syscalls",
    [PR_CAT_FILESYSTEM] = "filesystem", [PR_CAT_DEVICES] = "devices",
    [PR_CAT_RUNTIME] = "runtime",       [PR_CAT_CREDENTIALS] = "credentials",
    [PR_CAT_NETWORK] = "network",       [PR_CAT_PROCESSES] = "processes",
    [PR_CAT_KERNEL] = "kernel",
};

bool pr_wanted(const struct pr_ctx *c, const char *id)
{
    size_t n;

    if (!c->only)
        return true;
    n = strlen(c->only);
    return strncmp(id, c->only, n) == 0 && (id[n] == '\0' || id[n] == '.');
}

void pr_add(struct pr_ctx *c, const char *id, enum pr_cat cat, enum pr_status st, enum pr_sev sev,
            const char *title, const char *fmt, ...)
{
    struct pr_finding *f;
    va_list ap;
    int n;

    if (!pr_wanted(c, id))
        return;
    if (c->n_items == c->cap_items) {
        size_t cap = c->cap_items ? c->cap_items * 2 : 64;
        struct pr_finding *items = realloc(c->items, cap * sizeof(*items));
        if (!items) {
            c->failed = true;
            return;
        }
        c->items = items;
        c->cap_items = cap;
    }
    f = &c->items[c->n_items++];
    memset(f, 0, sizeof(*f));
    snprintf(f->id, sizeof(f->id), "%s", id);
    snprintf(f->title, sizeof(f->title), "%s", title);
    f->cat = cat;
    f->status = st;
    /* Severity says how bad the vector is when present; a finding that
     * only informs carries no severity of its own. */
    f->sev = st == PR_INFO ? PR_SEV_INFO : sev;
    va_start(ap, fmt);
    n = vsnprintf(f->detail, sizeof(f->detail), fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(f->detail))
        memcpy(f->detail + sizeof(f->detail) - 4, "...", 4);
}

void pr_list_add(struct pr_list *l, const char *fmt, ...)
{
    char item[512];
    const char *sep = l->n ? "; " : "";
    va_list ap;
    size_t need;

    va_start(ap, fmt);
    vsnprintf(item, sizeof(item), fmt, ap);
    va_end(ap);
    need = strlen(sep) + strlen(item);
    if (l->dropped || l->len + need >= sizeof(l->buf)) {
        l->dropped++;
        return;
    }
    l->len += (size_t)snprintf(l->buf + l->len, sizeof(l->buf) - l->len, "%s%s", sep, item);
    l->n++;
}

const char *pr_list_str(struct pr_list *l)
{
    if (l->dropped) {
        /* The buffer keeps 64 bytes of the detail free for this tail. */
        size_t room = sizeof(l->buf) - l->len;
        if (room > 24)
            snprintf(l->buf + l->len, room, " (+%u more)", l->dropped);
        l->dropped = 0;
    }
    return l->buf;
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    static const char from[] = "\"\\\n\r\t\b\f";
    static const char to[] = "\"\\nrtbf";

    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *hit = strchr(from, *p);
        if (hit)
            fprintf(f, "\\%c", to[hit - from]);
        else if (*p < 0x20 || *p > 0x7e)
            /* Bytes outside printable ASCII (a path need not be UTF-8)
             * become \u00XX: the output always parses. */
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_field(FILE *f, const char *key, const char *value, bool comma)
{
    json_str(f, key);
    fputc(':', f);
    json_str(f, value);
    if (comma)
        fputc(',', f);
}

static void count_exposed(const struct pr_ctx *c, unsigned by_sev[PR_SEV_INFO + 1], unsigned *total)
{
    *total = 0;
    for (size_t i = 0; i <= PR_SEV_INFO; i++)
        by_sev[i] = 0;
    for (size_t i = 0; i < c->n_items; i++) {
        if (c->items[i].status != PR_EXPOSED)
            continue;
        (*total)++;
        by_sev[c->items[i].sev]++;
    }
}

int pr_write_json(const struct pr_ctx *c, FILE *f)
{
    unsigned by_sev[PR_SEV_INFO + 1], exposed;

    fputs("{\"version\":1,", f);
    json_field(f, "probe", "agentjail-probe", true);
    json_field(f, "kernel", c->kernel, true);
    fputs("\"findings\":[", f);
    for (size_t i = 0; i < c->n_items; i++) {
        const struct pr_finding *it = &c->items[i];
        fputs(i ? ",\n{" : "\n{", f);
        json_field(f, "id", it->id, true);
        json_field(f, "category", cat_names[it->cat], true);
        json_field(f, "status", status_names[it->status], true);
        json_field(f, "severity", sev_names[it->sev], true);
        json_field(f, "title", it->title, true);
        json_field(f, "detail", it->detail, false);
        fputc('}', f);
    }
    count_exposed(c, by_sev, &exposed);
    fprintf(f, "],\n\"summary\":{\"exposed\":%u,\"by_severity\":{", exposed);
    for (size_t s = 0; s <= PR_SEV_INFO; s++)
        fprintf(f, "%s\"%s\":%u", s ? "," : "", sev_names[s], by_sev[s]);
    fputs("}}}\n", f);
    return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}

/* ---- table -------------------------------------------------------------- */

int pr_write_table(const struct pr_ctx *c, FILE *f)
{
    unsigned by_sev[PR_SEV_INFO + 1], exposed;
    int idw = (int)strlen("CHECK"), stw = (int)strlen("STATUS");
    char st[32];

    for (size_t i = 0; i < c->n_items; i++) {
        int n = (int)strlen(c->items[i].id);
        idw = n > idw ? n : idw;
    }
    stw = (int)strlen("exposed (critical)") > stw ? (int)strlen("exposed (critical)") : stw;
    fprintf(f, "%-*s  %-*s  %s\n", idw, "CHECK", stw, "STATUS", "DETAIL");
    for (size_t i = 0; i < c->n_items; i++) {
        const struct pr_finding *it = &c->items[i];
        if (it->status == PR_EXPOSED)
            snprintf(st, sizeof(st), "exposed (%s)", sev_names[it->sev]);
        else
            snprintf(st, sizeof(st), "%s", status_names[it->status]);
        fprintf(f, "%-*s  %-*s  %s\n", idw, it->id, stw, st, it->detail);
    }
    count_exposed(c, by_sev, &exposed);
    fprintf(f, "\n%u exposed of %zu findings (", exposed, c->n_items);
    for (size_t s = 0; s < PR_SEV_INFO; s++)
        fprintf(f, "%s%u %s", s ? ", " : "", by_sev[s], sev_names[s]);
    fprintf(f, "); kernel %s%s\n", c->kernel, c->kernel_overridden ? " (overridden)" : "");
    return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
