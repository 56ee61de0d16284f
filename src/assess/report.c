/* SPDX-License-Identifier: Apache-2.0 */
/* The risk report, assembled as JSON from the scores and the framework
 * mapping. See aj_report.h; the method is docs/risk-model.md. */
#include "aj_report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_posture.h"
#include "aj_util.h"
#include "report_int.h"

#ifndef AJ_VERSION
#define AJ_VERSION "unknown"
#endif

#define REPORT_VERSION 1

/* ---- assembly ------------------------------------------------------------------------- */

struct jb {
    bool oom;
};

/* Takes the reference to v, as json_object_set_new does. */
static void jset(struct jb *b, json_t *o, const char *key, json_t *v)
{
    if (!v || json_object_set_new(o, key, v) < 0)
        b->oom = true;
}

static void jpush(struct jb *b, json_t *a, json_t *v)
{
    if (!v || json_array_append_new(a, v) < 0)
        b->oom = true;
}

static json_t *jstr(const char *s)
{
    return json_string(s ? s : "");
}

static json_t *composite_real(int tenths)
{
    return json_real((double)tenths / 10.0);
}

static void rationale(const struct scoring *s, enum dim d, char *buf, size_t size)
{
    size_t off;
    bool any = false;

    off = (size_t)snprintf(buf, size, "%d -> %d:", rpt_dims[d].inherent, s->residual[d]);
    for (size_t i = 0; i < s->n && off < size; i++) {
        if (s->adj[i].d != d)
            continue;
        off += (size_t)snprintf(buf + off, size - off, "%s %+d %s [%s]", any ? ";" : "",
                                s->adj[i].delta, s->adj[i].reason, s->adj[i].evidence);
        any = true;
    }
    if (!any && off < size)
        off += (size_t)snprintf(buf + off, size - off, " no measured control changes this dimension");
    if (s->at_floor[d] && off < size)
        (void)snprintf(buf + off, size - off, "; held at %d: %s", rpt_dims[d].floor, rpt_dims[d].floor_why);
}

static json_t *build_dimensions(struct jb *b, const struct scoring *s)
{
    json_t *arr = json_array();
    char buf[2048];

    if (!arr) {
        b->oom = true;
        return NULL;
    }
    for (int d = 0; d < NDIM; d++) {
        json_t *o = json_object(), *adjs = json_array();
        if (!o || !adjs) {
            json_decref(o);
            json_decref(adjs);
            b->oom = true;
            continue;
        }
        for (size_t i = 0; i < s->n; i++)
            if ((int)s->adj[i].d == d)
                jpush(b, adjs, json_pack("{s:i, s:s, s:s}", "delta", s->adj[i].delta, "reason",
                                         s->adj[i].reason, "evidence", s->adj[i].evidence));
        rationale(s, (enum dim)d, buf, sizeof(buf));
        jset(b, o, "key", jstr(rpt_dims[d].key));
        jset(b, o, "letter", jstr(rpt_dims[d].letter));
        jset(b, o, "name", jstr(rpt_dims[d].name));
        jset(b, o, "question", jstr(rpt_dims[d].question));
        jset(b, o, "inherent", json_integer(rpt_dims[d].inherent));
        jset(b, o, "inherent_rationale", jstr(rpt_dims[d].inherent_why));
        jset(b, o, "residual", json_integer(s->residual[d]));
        jset(b, o, "floor", json_integer(rpt_dims[d].floor));
        jset(b, o, "rationale", jstr(buf));
        jset(b, o, "adjustments", adjs);
        jpush(b, arr, o);
    }
    return arr;
}

static json_t *build_controls(struct jb *b, const struct facts *f)
{
    const struct aj_policy *pol = f->pol;
    size_t rw = 0;
    json_t *o = json_object();

    for (size_t i = 0; i < pol->n_binds; i++)
        rw += pol->binds[i].rw;
    if (!o) {
        b->oom = true;
        return NULL;
    }
    jset(b, o, "network", jstr(pol->network == AJ_NET_NONE ? "none" : pol->network == AJ_NET_PROXY ? "proxy" : "loopback"));
    jset(b, o, "escape_monitor", json_boolean(f->monitor));
    jset(b, o, "decoys", json_boolean(pol->decoys));
    jset(b, o, "cloud_decoys", json_boolean(pol->cloud_decoys));
    jset(b, o, "on_escape", jstr(pol->on_escape == AJ_ON_ESCAPE_KILL ? "kill" : "deny"));
    jset(b, o, "alert_cmd", json_boolean(pol->alert_cmd != NULL));
    jset(b, o, "events_kept", json_boolean(f->events_kept));
    jset(b, o, "limits_enforceable", json_boolean(f->limits_held));
    jset(b, o, "time_bounded", json_boolean(f->time_bounded));
    jset(b, o, "writable_binds", json_integer((json_int_t)rw));
    jset(b, o, "env_pass", json_integer((json_int_t)pol->n_env_pass));
    jset(b, o, "allow_degraded", json_boolean(pol->allow_degraded));
    return o;
}

static json_t *build_inputs(struct jb *b, const struct aj_report_input *in, const struct facts *f)
{
    json_t *o = json_object(), *p = json_object(), *c = json_object();

    if (!o || !p || !c) {
        json_decref(o);
        json_decref(p);
        json_decref(c);
        b->oom = true;
        return NULL;
    }
    jset(b, p, "source", jstr(in->probe ? in->probe_source : "not run"));
    jset(b, p, "findings", json_integer((json_int_t)f->probe_total));
    jset(b, p, "exposed", json_integer((json_int_t)f->probe_fail));
    jset(b, p, "exposed_low", json_integer((json_int_t)f->probe_warn));
    jset(b, c, "source", jstr(in->check ? in->check_source : "not run"));
    for (int s = AJ_POSTURE_OK; s <= AJ_POSTURE_UNKNOWN; s++)
        jset(b, c, aj_posture_status_name((enum aj_posture_status)s),
             json_integer((json_int_t)aj_posture_count(in->check, (enum aj_posture_status)s)));
    jset(b, o, "probe", p);
    jset(b, o, "check", c);
    jset(b, o, "events_kept", json_boolean(in->events_kept));
    return o;
}

static json_t *build_method(struct jb *b)
{
    json_t *o = json_object(), *l = json_array();

    if (!o || !l) {
        json_decref(o);
        json_decref(l);
        b->oom = true;
        return NULL;
    }
    jset(b, o, "scale", jstr("1 (negligible) to 5 (severe) per dimension"));
    jset(b, o, "inherent", jstr("agent-written code run with no sandbox: the fixed baseline of "
                                "docs/risk-model.md"));
    jset(b, o, "residual", jstr("inherent score plus the adjustments listed, each from a measured "
                                "finding or a policy setting, held between the dimension's floor "
                                "and 5"));
    jset(b, o, "composite", jstr("arithmetic mean of the six scores, rounded half up to one decimal"));
    jset(b, o, "bands", jstr("below 2.0 low, below 3.0 moderate, below 4.0 high, else critical"));
    jset(b, o, "document", jstr("docs/risk-model.md"));
    for (size_t i = 0; i < rpt_n_report_limits; i++)
        jpush(b, l, jstr(rpt_report_limits[i]));
    jset(b, o, "limits", l);
    return o;
}

int aj_report_build(const struct aj_report_input *in, json_t **ret, struct aj_error *err)
{
    struct jb b = {0};
    struct facts f;
    struct scoring *s = NULL;
    json_t *rep = NULL, *x, *arr;
    char hash[65];
    char *pj = NULL;
    int inh[NDIM], r;
    size_t i;

    *ret = NULL;
    if (!in || !in->policy)
        return aj_err(err, EINVAL, "report: no policy");
    if ((r = aj_policy_sha256(in->policy, hash, err)) < 0)
        return aj_err_prefix(err, r, "report");
    if (rpt_facts_gather(&f, in) < 0) {
        rpt_facts_clear(&f);
        return aj_err(err, ENOMEM, "report");
    }
    s = malloc(sizeof(*s));
    rep = json_object();
    pj = aj_policy_to_json(in->policy, true);
    if (!s || !rep || !pj) {
        b.oom = true;
        goto out;
    }
    rpt_score(&f, s);
    for (int d = 0; d < NDIM; d++)
        inh[d] = rpt_dims[d].inherent;

    jset(&b, rep, "report_version", json_integer(REPORT_VERSION));
    jset(&b, rep, "title", jstr("Execution-environment escape: agentjail risk report"));
    jset(&b, rep, "generated_at", in->generated_at ? jstr(in->generated_at) : json_null());
    jset(&b, rep, "agentjail_version", jstr(AJ_VERSION));
    x = json_object();
    if (x) {
        long euid = f.euid;
        jset(&b, x, "policy", jstr(in->policy_label ? in->policy_label : "built-in defaults"));
        jset(&b, x, "policy_sha256", jstr(hash));
        jset(&b, x, "kernel", jstr(rpt_str_or(in->check, "kernel", "unknown")));
        jset(&b, x, "mode", jstr(euid < 0 ? "unknown" : euid == 0 ? "root" : "rootless"));
    }
    jset(&b, rep, "subject", x);
    jset(&b, rep, "inputs", build_inputs(&b, in, &f));
    jset(&b, rep, "controls", build_controls(&b, &f));
    jset(&b, rep, "method", build_method(&b));
    jset(&b, rep, "dimensions", build_dimensions(&b, s));
    jset(&b, rep, "composite",
         json_pack("{s:o, s:s, s:o, s:s}", "inherent", composite_real(rpt_composite_tenths(inh)),
                   "inherent_band", rpt_band(rpt_composite_tenths(inh)), "residual",
                   composite_real(rpt_composite_tenths(s->residual)), "residual_band",
                   rpt_band(rpt_composite_tenths(s->residual))));

    /* What the reader should act on: findings that are not ok. */
    arr = json_array();
    json_array_foreach(json_object_get(in->check, "findings"), i, x)
        if (strcmp(rpt_str_or(x, "status", ""), "ok") != 0)
            jpush(&b, arr, json_pack("{s:s, s:s, s:s, s:s}", "id", rpt_str_or(x, "id", "?"), "status",
                                     rpt_str_or(x, "status", "unknown"), "value", rpt_str_or(x, "value", ""),
                                     "recommendation", rpt_str_or(x, "recommendation", "")));
    jset(&b, rep, "host_findings", arr);
    arr = json_array();
    json_array_foreach(json_object_get(in->probe, "findings"), i, x) {
        if (rpt_probe_bad(x) || rpt_probe_minor(x))
            jpush(&b, arr, json_pack("{s:s, s:s, s:s, s:s}", "id", rpt_str_or(x, "id", "?"), "severity",
                                     rpt_str_or(x, "severity", "?"), "title", rpt_str_or(x, "title", ""),
                                     "detail", rpt_str_or(x, "detail", "")));
    }
    jset(&b, rep, "probe_findings", arr);

    arr = json_array();
    for (i = 0; i < rpt_n_mappings; i++) {
        const struct mapping *m = &rpt_mappings[i];
        const char *st = rpt_cond_holds(&f, m->cond) ? "applied" : m->if_not;
        /* Measured beats declared: with exposures inside the sandbox no
         * sandbox control is fully applied (the host check rows stand). */
        if (strcmp(st, "applied") == 0 && m->cond != C_CHECK && f.probe_fail > 0)
            st = "partial";
        jpush(&b, arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "framework", m->framework,
                                 "reference", m->ref, "title", m->title, "agentjail", m->controls,
                                 "status", st,
                                 "covers", m->covers, "misses", m->misses));
    }
    jset(&b, rep, "frameworks", arr);
    jset(&b, rep, "policy", json_loads(pj, 0, NULL));
out:
    free(pj);
    free(s);
    rpt_facts_clear(&f);
    if (b.oom) {
        json_decref(rep);
        return aj_err(err, ENOMEM, "report");
    }
    *ret = rep;
    return 0;
}

int aj_report_parse_format(const char *s, enum aj_report_format *ret)
{
    if (strcmp(s, "md") == 0 || strcmp(s, "markdown") == 0)
        *ret = AJ_REPORT_MD;
    else if (strcmp(s, "json") == 0)
        *ret = AJ_REPORT_JSON;
    else if (strcmp(s, "html") == 0)
        *ret = AJ_REPORT_HTML;
    else
        return -EINVAL;
    return 0;
}

