/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the risk report: what its parts share. scoring.c gathers the
 * measured facts and scores the six dimensions, frameworks.c holds the
 * framework mapping (data) and when each control counts, report.c
 * assembles the JSON and render.c turns that JSON into Markdown and HTML.
 * The method is docs/risk-model.md. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "aj_policy_model.h"
#include "aj_report.h"

/* ---- the six dimensions (scoring.c) ---- */
enum dim { DIM_D = 0, DIM_A, DIM_M, DIM_AS, DIM_G, DIM_E, NDIM };

struct dim_def {
    const char *key, *letter, *name, *question;
    int inherent;
    int floor; /* what agentjail alone cannot take the residual below */
    const char *inherent_why;
    const char *floor_why;
};
extern const struct dim_def rpt_dims[NDIM];

/* ---- measured facts (scoring.c) ---- */
enum probe_cat { PCAT_ESCAPE = 0, PCAT_CRED, PCAT_KERNEL, PCAT_NET, NPCAT };

struct facts {
    const struct aj_policy *pol;
    const json_t *probe, *check;
    bool events_kept;
    /* from the probe: ids of findings it rates dangerous, by kind */
    json_t *probe_bad[NPCAT];
    size_t probe_total, probe_fail, probe_warn;
    /* derived */
    bool monitor, limits_held, time_bounded, secret_env;
    long euid; /* -1: unknown */
};

const char *rpt_str_or(const json_t *o, const char *key, const char *dflt);
bool rpt_check_is(const struct facts *f, const char *id, const char *status);
bool rpt_probe_bad(const json_t *x);
bool rpt_probe_minor(const json_t *x);
bool rpt_probe_contradicts(const struct facts *f, const char *prefix);
int rpt_facts_gather(struct facts *f, const struct aj_report_input *in);
void rpt_facts_clear(struct facts *f);

/* ---- scoring (scoring.c) ---- */
#define MAX_ADJ 32

struct adj {
    enum dim d;
    int delta;
    char reason[192];
    char evidence[256];
};

struct scoring {
    struct adj adj[MAX_ADJ];
    size_t n;
    int residual[NDIM];
    bool at_floor[NDIM];
};

void rpt_score(const struct facts *f, struct scoring *s);
int rpt_composite_tenths(const int v[NDIM]);
const char *rpt_band(int tenths);

/* ---- frameworks (frameworks.c) ---- */
enum cond { C_ALWAYS = 0, C_NET_NONE, C_LIMITS, C_MONITOR, C_DECOYS, C_KILL, C_EVENTS, C_CHECK, C_NEVER };

struct mapping {
    const char *framework, *ref, *title, *controls, *covers, *misses;
    enum cond cond;
    const char *if_not; /* status when cond does not hold */
};
extern const struct mapping rpt_mappings[];
extern const size_t rpt_n_mappings;
bool rpt_cond_holds(const struct facts *f, enum cond c);
extern const char *const rpt_report_limits[];
extern const size_t rpt_n_report_limits;
