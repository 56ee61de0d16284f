/* SPDX-License-Identifier: Apache-2.0 */
/* Numbers as people write them in flags and policy files, parsed once and
 * strictly (STYLE.md §3: no atoi, no sscanf, no leading '-'), and written
 * back in their shortest exact form: the canonical JSON uses these, so two
 * spellings of one value hash alike. Depends on nothing else in policy/. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_policy_model.h"

int aj_parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
    char *end = NULL;
    unsigned long long v;

    /* strtoull accepts leading space and '-' (and wraps "-1" to ULLONG_MAX):
     * refuse both before calling it. */
    if (!s || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (errno != 0 || end == s || *end != '\0')
        return -EINVAL;
    if (v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

int aj_parse_owner(const char *s, uint32_t *ret_uid, uint32_t *ret_gid)
{
    char buf[32];
    const char *colon = s ? strchr(s, ':') : NULL;
    uint64_t u, g;
    size_t n;

    if (!colon || (n = (size_t)(colon - s)) == 0 || n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    /* 4294967295 is (uid_t)-1, "no owner" to chown(2): never an owner. */
    if (aj_parse_u64(buf, UINT32_MAX - 1, &u) < 0 || aj_parse_u64(colon + 1, UINT32_MAX - 1, &g) < 0)
        return -EINVAL;
    *ret_uid = (uint32_t)u;
    *ret_gid = (uint32_t)g;
    return 0;
}

/* Split "123abc" into the number and its suffix. */
static int split_number(const char *s, uint64_t *num, const char **suffix)
{
    char digits[32];
    size_t n = 0;

    if (!s)
        return -EINVAL;
    while (isdigit((unsigned char)s[n]))
        n++;
    if (n == 0 || n >= sizeof(digits))
        return n == 0 ? -EINVAL : -ERANGE;
    memcpy(digits, s, n);
    digits[n] = '\0';
    *suffix = s + n;
    return aj_parse_u64(digits, UINT64_MAX, num);
}

int aj_parse_size(const char *s, uint64_t *ret)
{
    const char *suf;
    uint64_t v, mult;
    int r = split_number(s, &v, &suf);

    if (r < 0)
        return r;
    if (strcmp(suf, "") == 0 || strcmp(suf, "B") == 0)
        mult = 1;
    else if (strcmp(suf, "K") == 0 || strcmp(suf, "k") == 0)
        mult = 1ULL << 10;
    else if (strcmp(suf, "M") == 0 || strcmp(suf, "m") == 0)
        mult = 1ULL << 20;
    else if (strcmp(suf, "G") == 0 || strcmp(suf, "g") == 0)
        mult = 1ULL << 30;
    else if (strcmp(suf, "T") == 0 || strcmp(suf, "t") == 0)
        mult = 1ULL << 40;
    else
        return -EINVAL;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *ret = v * mult;
    return 0;
}

int aj_parse_duration_ms(const char *s, uint64_t *ret)
{
    const char *suf;
    uint64_t v, mult;
    int r = split_number(s, &v, &suf);

    if (r < 0)
        return r;
    if (strcmp(suf, "ms") == 0)
        mult = 1;
    else if (strcmp(suf, "") == 0 || strcmp(suf, "s") == 0)
        mult = 1000;
    else if (strcmp(suf, "m") == 0)
        mult = 60 * 1000;
    else if (strcmp(suf, "h") == 0)
        mult = 3600 * 1000;
    else
        return -EINVAL;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *ret = v * mult;
    return 0;
}

/* "1", "0.5", "1.25": at most three decimals, parsed without floats (a
 * float's rounding would make "0.1" and "0.1000001" hash differently on
 * different machines). Up to 1024 CPUs. */
int aj_parse_cpus_milli(const char *s, uint64_t *ret)
{
    char intpart[16], frac[4] = "000";
    const char *dot = s ? strchr(s, '.') : NULL;
    size_t n = dot ? (size_t)(dot - s) : (s ? strlen(s) : 0);
    uint64_t whole, milli;

    if (!s || n == 0 || n >= sizeof(intpart) || (dot && (strlen(dot + 1) == 0 || strlen(dot + 1) > 3)))
        return -EINVAL;
    memcpy(intpart, s, n);
    intpart[n] = '\0';
    if (dot) {
        for (size_t i = 0; dot[1 + i]; i++) {
            if (!isdigit((unsigned char)dot[1 + i]))
                return -EINVAL;
            frac[i] = dot[1 + i];
        }
    }
    if (aj_parse_u64(intpart, 1024, &whole) < 0 || aj_parse_u64(frac, 999, &milli) < 0)
        return -EINVAL;
    *ret = milli + whole * 1000;
    return 0;
}

void aj_fmt_size(char *buf, size_t size, uint64_t v)
{
    static const char units[] = "KMGT";
    int u = -1;

    while (v != 0 && u < 3 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        (void)snprintf(buf, size, "%llu", (unsigned long long)v);
    else
        (void)snprintf(buf, size, "%llu%c", (unsigned long long)v, units[u]);
}

void aj_fmt_duration(char *buf, size_t size, uint64_t ms)
{
    if (ms % 3600000 == 0 && ms)
        (void)snprintf(buf, size, "%lluh", (unsigned long long)(ms / 3600000));
    else if (ms % 60000 == 0 && ms)
        (void)snprintf(buf, size, "%llum", (unsigned long long)(ms / 60000));
    else if (ms % 1000 == 0)
        (void)snprintf(buf, size, "%llus", (unsigned long long)(ms / 1000));
    else
        (void)snprintf(buf, size, "%llums", (unsigned long long)ms);
}

void aj_fmt_cpus(char *buf, size_t size, uint64_t milli)
{
    unsigned long long w = milli / 1000, f = milli % 1000;

    if (f == 0)
        (void)snprintf(buf, size, "%llu", w);
    else if (f % 100 == 0)
        (void)snprintf(buf, size, "%llu.%llu", w, f / 100);
    else if (f % 10 == 0)
        (void)snprintf(buf, size, "%llu.%02llu", w, f / 10);
    else
        (void)snprintf(buf, size, "%llu.%03llu", w, f);
}
