/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kcve.h"

bool pr_kver_parse(const char *s, struct pr_kver *ret)
{
    const char *p = s;
    int n = 0;

    memset(ret, 0, sizeof(*ret));
    while (n < 3 && *p >= '0' && *p <= '9') {
        char *end;
        unsigned long v;
        errno = 0;
        v = strtoul(p, &end, 10);
        if (errno || v > 100000)
            return false;
        ret->v[n++] = (unsigned)v;
        /* A component ends at '.', or the version ends ("-rc5", "-fc-v669",
         * "+", "" ...). */
        if (*end != '.')
            break;
        p = end + 1;
    }
    return n >= 2;
}

int pr_kver_cmp(const struct pr_kver *a, const struct pr_kver *b)
{
    for (int i = 0; i < 3; i++)
        if (a->v[i] != b->v[i])
            return a->v[i] < b->v[i] ? -1 : 1;
    return 0;
}

static bool parse_ok(const char *s, struct pr_kver *v) { return s && pr_kver_parse(s, v); }

enum pr_kmatch pr_kcve_match(const struct pr_kcve *e, const char *release, const char *build)
{
    struct pr_kver k, lo, hi, f;
    const char *p;

    if (!pr_kver_parse(release, &k))
        return PR_KCVE_NOT_AFFECTED;
    if (e->distro)
        return build && strstr(build, e->distro) ? PR_KCVE_DISTRO_UNKNOWN : PR_KCVE_NOT_AFFECTED;
    if (parse_ok(e->introduced, &lo) && pr_kver_cmp(&k, &lo) < 0)
        return PR_KCVE_NOT_AFFECTED;
    if (parse_ok(e->fixed, &hi) && pr_kver_cmp(&k, &hi) >= 0)
        return PR_KCVE_NOT_AFFECTED;
    /* In the mainline range: the fix of this stable branch decides. */
    for (p = e->stable_fixes; p && *p; p += strcspn(p, " "), p += strspn(p, " ")) {
        if (!pr_kver_parse(p, &f))
            continue;
        if (f.v[0] == k.v[0] && f.v[1] == k.v[1])
            return pr_kver_cmp(&k, &f) < 0 ? PR_KCVE_AFFECTED : PR_KCVE_NOT_AFFECTED;
    }
    return PR_KCVE_AFFECTED_NO_FIX;
}
