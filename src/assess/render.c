/* SPDX-License-Identifier: Apache-2.0 */
/* The risk report's Markdown and HTML (with an inline SVG chart), rendered
 * from the report's JSON alone, so the forms never disagree. */
#include "aj_report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aj_posture.h"
#include "aj_util.h"
#include "report_int.h"

/* ---- rendering ------------------------------------------------------------------------ */

static const char *js(const json_t *o, const char *key)
{
    return rpt_str_or(o, key, "");
}

static long ji(const json_t *o, const char *key)
{
    return (long)json_integer_value(json_object_get(o, key));
}

static double jr(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* A Markdown table cell: no pipe or line break may end the cell early. */
static void md_cell(FILE *o, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", o);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', o);
        else
            fputc(*s, o);
    }
}

static void md_row(FILE *o, size_t n, ...)
{
    va_list ap;

    va_start(ap, n);
    fputc('|', o);
    for (size_t i = 0; i < n; i++) {
        fputc(' ', o);
        md_cell(o, va_arg(ap, const char *));
        fputs(" |", o);
    }
    fputc('\n', o);
    va_end(ap);
}

static const char *yesno(const json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key)) ? "yes" : "no";
}

static void render_md(const json_t *rep, FILE *o)
{
    const json_t *subj = json_object_get(rep, "subject"), *inp = json_object_get(rep, "inputs");
    const json_t *comp = json_object_get(rep, "composite"), *ctl = json_object_get(rep, "controls");
    const json_t *meth = json_object_get(rep, "method"), *x;
    const json_t *probe = json_object_get(inp, "probe"), *check = json_object_get(inp, "check");
    char a[128], b2[64];
    size_t i;

    fprintf(o, "# %s\n\n", js(rep, "title"));
    md_row(o, 2, "Subject", "Value");
    fputs("|---|---|\n", o);
    md_row(o, 2, "Policy", js(subj, "policy"));
    md_row(o, 2, "Policy sha256", js(subj, "policy_sha256"));
    md_row(o, 2, "Host kernel", js(subj, "kernel"));
    md_row(o, 2, "agentjail mode", js(subj, "mode"));
    md_row(o, 2, "agentjail version", js(rep, "agentjail_version"));
    snprintf(a, sizeof(a), "%ld findings, %ld exposed at medium or worse, %ld at low", ji(probe, "findings"),
             ji(probe, "exposed"), ji(probe, "exposed_low"));
    fputs("| Probe inside the sandbox | ", o);
    md_cell(o, js(probe, "source"));
    fprintf(o, ": %s |\n", a);
    snprintf(a, sizeof(a), "%ld ok, %ld warn, %ld fail, %ld unknown", ji(check, "ok"), ji(check, "warn"),
             ji(check, "fail"), ji(check, "unknown"));
    fputs("| Host check | ", o);
    md_cell(o, js(check, "source"));
    fprintf(o, ": %s |\n", a);
    if (json_is_string(json_object_get(rep, "generated_at")))
        md_row(o, 2, "Generated", js(rep, "generated_at"));

    fprintf(o, "\n## Summary\n\nComposite DAMAGE score: inherent **%.1f** (%s), residual with this "
               "policy on this host **%.1f** (%s).\n",
            jr(comp, "inherent"), js(comp, "inherent_band"), jr(comp, "residual"),
            js(comp, "residual_band"));
    fprintf(o, "Composite: %s. Scale: %s.\n", js(meth, "composite"), js(meth, "scale"));

    fputs("\n## DAMAGE scores\n\n", o);
    md_row(o, 4, "Dimension", "Inherent", "Residual", "Rationale (what moved the residual)");
    fputs("|---|---|---|---|\n", o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        char name[96];
        snprintf(name, sizeof(name), "%s %s", js(x, "letter"), js(x, "name"));
        snprintf(a, sizeof(a), "%ld", ji(x, "inherent"));
        snprintf(b2, sizeof(b2), "%ld", ji(x, "residual"));
        md_row(o, 4, name, a, b2, js(x, "rationale"));
    }
    fputs("\n### Inherent baseline (no sandbox)\n\n", o);
    md_row(o, 3, "Dimension", "Question", "Why the inherent score");
    fputs("|---|---|---|\n", o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        char name[96];
        snprintf(name, sizeof(name), "%s %s (%ld)", js(x, "letter"), js(x, "name"), ji(x, "inherent"));
        md_row(o, 3, name, js(x, "question"), js(x, "inherent_rationale"));
    }

    fputs("\n## Controls in this policy\n\n", o);
    md_row(o, 2, "Control", "Setting");
    fputs("|---|---|\n", o);
    md_row(o, 2, "Network", js(ctl, "network"));
    md_row(o, 2, "Escape monitor (seccomp user notification)", yesno(ctl, "escape_monitor"));
    md_row(o, 2, "Decoys (docker.sock, Kubernetes token)", yesno(ctl, "decoys"));
    md_row(o, 2, "Cloud credential decoys", yesno(ctl, "cloud_decoys"));
    md_row(o, 2, "On escape", js(ctl, "on_escape"));
    md_row(o, 2, "Alert command", yesno(ctl, "alert_cmd"));
    md_row(o, 2, "Audit events kept", yesno(ctl, "events_kept"));
    md_row(o, 2, "Memory and pids limits enforceable here", yesno(ctl, "limits_enforceable"));
    md_row(o, 2, "Time bounded", yesno(ctl, "time_bounded"));
    snprintf(a, sizeof(a), "%ld", ji(ctl, "writable_binds"));
    md_row(o, 2, "Writable host binds", a);
    snprintf(a, sizeof(a), "%ld", ji(ctl, "env_pass"));
    md_row(o, 2, "Variables passed from the caller", a);
    md_row(o, 2, "Degraded mode allowed", yesno(ctl, "allow_degraded"));

    fputs("\n## Host posture findings to act on\n\n", o);
    if (json_array_size(json_object_get(rep, "host_findings")) == 0) {
        fputs("None: every host finding is ok.\n", o);
    } else {
        md_row(o, 4, "Status", "Finding", "Value", "Recommendation");
        fputs("|---|---|---|---|\n", o);
        json_array_foreach(json_object_get(rep, "host_findings"), i, x)
            md_row(o, 4, js(x, "status"), js(x, "id"), js(x, "value"), js(x, "recommendation"));
    }
    fputs("\n## Probe findings inside the sandbox\n\n", o);
    if (json_array_size(json_object_get(rep, "probe_findings")) == 0) {
        fputs("None: the probe found no escape vector or exposure.\n", o);
    } else {
        md_row(o, 4, "Exposed", "Finding", "What", "Detail");
        fputs("|---|---|---|---|\n", o);
        json_array_foreach(json_object_get(rep, "probe_findings"), i, x)
            md_row(o, 4, js(x, "severity"), js(x, "id"), js(x, "title"), js(x, "detail"));
    }

    fputs("\n## Framework mapping\n\n", o);
    md_row(o, 6, "Framework", "Reference", "agentjail control", "Here", "Covers", "Misses");
    fputs("|---|---|---|---|---|---|\n", o);
    json_array_foreach(json_object_get(rep, "frameworks"), i, x) {
        char ref[192];
        snprintf(ref, sizeof(ref), "%s %s", js(x, "reference"), js(x, "title"));
        md_row(o, 6, js(x, "framework"), ref, js(x, "agentjail"), js(x, "status"), js(x, "covers"),
               js(x, "misses"));
    }

    fprintf(o, "\n## Method and limits\n\n- Inherent: %s.\n- Residual: %s.\n- Composite: %s; bands: %s.\n",
            js(meth, "inherent"), js(meth, "residual"), js(meth, "composite"), js(meth, "bands"));
    json_array_foreach(json_object_get(meth, "limits"), i, x)
        fprintf(o, "- %s\n", json_string_value(x));
    fprintf(o, "\nThe method in full: %s.\n", js(meth, "document"));
}

/* Text and attribute values alike. */
static void h(FILE *o, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", o);
            break;
        case '<':
            fputs("&lt;", o);
            break;
        case '>':
            fputs("&gt;", o);
            break;
        case '"':
            fputs("&quot;", o);
            break;
        case '\'':
            fputs("&#39;", o);
            break;
        default:
            fputc(*s, o);
        }
    }
}

/* The chart: inherent and residual bars per dimension, integer geometry. */
#define SVG_W 860
#define SVG_H 330
#define SVG_L 48
#define SVG_R 16
#define SVG_T 44
#define SVG_B 70
#define SVG_UNIT ((SVG_H - SVG_T - SVG_B) / 5)

static void render_svg(const json_t *rep, FILE *o)
{
    const json_t *dl = json_object_get(rep, "dimensions"), *x;
    int group = (SVG_W - SVG_L - SVG_R) / (int)(json_array_size(dl) ? json_array_size(dl) : 1);
    int base = SVG_T + 5 * SVG_UNIT;
    size_t i;

    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\" aria-labelledby=\"chart-title chart-desc\" "
               "id=\"damage-chart\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fputs("<title id=\"chart-title\">DAMAGE scores: inherent vs residual</title>\n<desc "
          "id=\"chart-desc\">",
          o);
    json_array_foreach(dl, i, x) {
        fprintf(o, "%s%s: inherent %ld, residual %ld", i ? "; " : "", js(x, "name"), ji(x, "inherent"),
                ji(x, "residual"));
    }
    fputs("</desc>\n", o);
    for (int v = 0; v <= 5; v++) {
        int y = base - v * SVG_UNIT;
        fprintf(o, "<line class=\"grid\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
                   "<text class=\"axis\" x=\"%d\" y=\"%d\">%d</text>\n",
                SVG_L, y, SVG_W - SVG_R, y, SVG_L - 10, y + 4, v);
    }
    json_array_foreach(dl, i, x) {
        int gx = SVG_L + (int)i * group, bw = group * 3 / 10, cx = gx + group / 2;
        long inh = ji(x, "inherent"), res = ji(x, "residual");
        int hi = (int)inh * SVG_UNIT, hr = (int)res * SVG_UNIT;
        fprintf(o, "<g class=\"dim\" data-key=\"%s\">", js(x, "key"));
        fprintf(o, "<rect class=\"inh\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", cx - bw - 2,
                base - hi, bw, hi);
        fprintf(o, "<text class=\"val\" x=\"%d\" y=\"%d\">%ld</text>", cx - bw / 2 - 2, base - hi - 6, inh);
        fprintf(o, "<rect class=\"res\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", cx + 2,
                base - hr, bw, hr);
        fprintf(o, "<text class=\"val\" x=\"%d\" y=\"%d\">%ld</text>", cx + bw / 2 + 2, base - hr - 6, res);
        fprintf(o, "<text class=\"lbl\" x=\"%d\" y=\"%d\">%s</text>", cx, base + 20, js(x, "letter"));
        {
            /* Two lines ("Multiplicative" / "potential"): the names must not run into each other. */
            const char *name = js(x, "name"), *sp = strchr(name, ' ');
            int n1 = sp ? (int)(sp - name) : (int)strlen(name);
            fprintf(o, "<text class=\"sub\" x=\"%d\" y=\"%d\">%.*s</text>", cx, base + 37, n1, name);
            if (sp)
                fprintf(o, "<text class=\"sub\" x=\"%d\" y=\"%d\">%s</text>", cx, base + 52, sp + 1);
        }
        fputs("</g>\n", o);
    }
    fprintf(o, "<rect class=\"inh\" x=\"%d\" y=\"12\" width=\"14\" height=\"14\"/><text class=\"leg\" "
               "x=\"%d\" y=\"24\">inherent (no sandbox)</text>\n",
            SVG_L, SVG_L + 20);
    fprintf(o, "<rect class=\"res\" x=\"%d\" y=\"12\" width=\"14\" height=\"14\"/><text class=\"leg\" "
               "x=\"%d\" y=\"24\">residual (this policy, this host)</text>\n",
            SVG_L + 200, SVG_L + 220);
    fputs("</svg>\n", o);
}

static const char html_css[] =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;"
    "color:#1b1f24;background:#fff;margin:0}\n"
    "main{max-width:1120px;margin:0 auto;padding:24px 28px 48px}\n"
    "h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid "
    "#d0d7de;padding-bottom:4px}h3{font-size:16px;margin:20px 0 6px}\n"
    "table{border-collapse:collapse;width:100%;margin:8px 0;font-size:14px}\n"
    "th,td{border:1px solid #d0d7de;padding:5px 8px;text-align:left;vertical-align:top}\n"
    "th{background:#f3f5f7}td.n{text-align:center;font-weight:600;white-space:nowrap}\n"
    "code{font:13px ui-monospace,'DejaVu Sans Mono',monospace;background:#f3f5f7;padding:1px 4px;"
    "border-radius:3px;overflow-wrap:anywhere}code.id{white-space:nowrap}\n"
    ".kpi{display:flex;gap:16px;margin:16px 0}.kpi div{border:1px solid #d0d7de;border-radius:6px;"
    "padding:10px 16px}.kpi b{font-size:28px;display:block}\n"
    ".s{display:inline-block;padding:0 6px;border-radius:10px;font-size:12px;font-weight:600;"
    "white-space:nowrap}\n"
    ".ok,.applied{background:#dafbe1;color:#116329}.warn,.partial{background:#fff8c5;color:#7d4e00}"
    ".fail,.not-applied,.not-addressed,.critical,.high{background:#ffebe9;color:#a40e26}"
    ".medium{background:#fff8c5;color:#7d4e00}.low{background:#eaeef2;color:#424a53}.unknown{background:#eaeef2;"
    "color:#424a53}\n"
    ".band-low{color:#116329}.band-moderate{color:#7d4e00}.band-high{color:#bc4c00}"
    ".band-critical{color:#a40e26}\n"
    "svg{max-width:100%;height:auto;font-family:inherit}svg .grid{stroke:#d0d7de;stroke-width:1}"
    "svg .axis{font-size:12px;fill:#57606a;text-anchor:end}svg .inh{fill:#8c959f}svg "
    ".res{fill:#0969da}svg .val{font-size:13px;font-weight:600;fill:#1b1f24;text-anchor:middle}"
    "svg .lbl{font-size:15px;font-weight:700;text-anchor:middle;fill:#1b1f24}svg "
    ".sub{font-size:12px;text-anchor:middle;fill:#57606a}svg .leg{font-size:13px;fill:#1b1f24}\n"
    "figure{margin:8px 0}figcaption{font-size:13px;color:#57606a}\n"
    "pre{background:#f6f8fa;border:1px solid #d0d7de;padding:10px;overflow:auto;font-size:12px}\n"
    "@media print{main{max-width:none}details{display:block}}\n";

static void html_status(FILE *o, const char *s)
{
    fputs("<span class=\"s ", o);
    for (const char *p = s; *p; p++)
        fputc(*p == ' ' ? '-' : *p, o);
    fputs("\">", o);
    h(o, s);
    fputs("</span>", o);
}

/* One findings table: a heading, then a row per finding (status badge, id,
 * two text columns), or a sentence when there is none. */
static void html_findings(FILE *o, json_t *arr, const char *anchor, const char *heading, const char *none,
                          const char *header_row, const char *status_key, const char *col3, const char *col4)
{
    size_t i;
    json_t *x;

    fprintf(o, "<h2 id=\"%s\">", anchor);
    h(o, heading);
    fputs("</h2>\n", o);
    if (json_array_size(arr) == 0) {
        fputs("<p>", o);
        h(o, none);
        fputs("</p>\n", o);
        return;
    }
    fprintf(o, "<table>\n%s\n", header_row);
    json_array_foreach(arr, i, x) {
        fputs("<tr><td>", o);
        html_status(o, js(x, status_key));
        fputs("</td><td><code class=\"id\">", o);
        h(o, js(x, "id"));
        fputs("</code></td><td>", o);
        h(o, js(x, col3));
        fputs("</td><td>", o);
        h(o, js(x, col4));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n", o);
}

static void html_tr(FILE *o, size_t n, ...)
{
    va_list ap;

    va_start(ap, n);
    fputs("<tr>", o);
    for (size_t i = 0; i < n; i++) {
        fputs("<td>", o);
        h(o, va_arg(ap, const char *));
        fputs("</td>", o);
    }
    fputs("</tr>\n", o);
    va_end(ap);
}

static void render_html(const json_t *rep, FILE *o)
{
    const json_t *subj = json_object_get(rep, "subject"), *inp = json_object_get(rep, "inputs");
    const json_t *comp = json_object_get(rep, "composite"), *ctl = json_object_get(rep, "controls");
    const json_t *meth = json_object_get(rep, "method"), *x;
    const json_t *probe = json_object_get(inp, "probe"), *check = json_object_get(inp, "check");
    char *pol;
    char a[96];
    size_t i;

    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", o);
    /* Nothing to fetch, nothing to run: an auditor can open it offline. */
    fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
          "'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
          o);
    fputs("<title>", o);
    h(o, js(rep, "title"));
    fputs(" - ", o);
    h(o, js(subj, "policy"));
    fprintf(o, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n<h1>", html_css);
    h(o, js(rep, "title"));
    fputs("</h1>\n<table>\n", o);
    fputs("<tr><th>Policy</th><td><code>", o);
    h(o, js(subj, "policy"));
    fputs("</code></td></tr>\n<tr><th>Policy sha256</th><td><code>", o);
    h(o, js(subj, "policy_sha256"));
    fputs("</code></td></tr>\n<tr><th>Host kernel</th><td>", o);
    h(o, js(subj, "kernel"));
    fputs("</td></tr>\n<tr><th>agentjail</th><td>", o);
    h(o, js(rep, "agentjail_version"));
    fputs(", ", o);
    h(o, js(subj, "mode"));
    fputs(" mode</td></tr>\n<tr><th>Probe inside the sandbox</th><td>", o);
    h(o, js(probe, "source"));
    fprintf(o, ": %ld findings, %ld exposed at medium or worse, %ld at low</td></tr>\n<tr><th>Host check</th><td>",
            ji(probe, "findings"), ji(probe, "exposed"), ji(probe, "exposed_low"));
    h(o, js(check, "source"));
    fprintf(o, ": %ld ok, %ld warn, %ld fail, %ld unknown</td></tr>\n", ji(check, "ok"),
            ji(check, "warn"), ji(check, "fail"), ji(check, "unknown"));
    if (json_is_string(json_object_get(rep, "generated_at"))) {
        fputs("<tr><th>Generated</th><td>", o);
        h(o, js(rep, "generated_at"));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n", o);

    fprintf(o, "<div class=\"kpi\"><div>Inherent composite<b class=\"band-%s\">%.1f</b>%s</div>"
               "<div>Residual composite<b class=\"band-%s\">%.1f</b>%s</div></div>\n",
            js(comp, "inherent_band"), jr(comp, "inherent"), js(comp, "inherent_band"),
            js(comp, "residual_band"), jr(comp, "residual"), js(comp, "residual_band"));
    fputs("<figure>\n", o);
    render_svg(rep, o);
    fputs("<figcaption>Each DAMAGE dimension on a 1-5 scale. Composite: ", o);
    h(o, js(meth, "composite"));
    fputs(".</figcaption>\n</figure>\n", o);

    fputs("<h2 id=\"scores\">DAMAGE scores</h2>\n<table>\n<tr><th>Dimension</th><th>Inherent</th><th>Residual</th>"
          "<th>Rationale (what moved the residual)</th></tr>\n",
          o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        fputs("<tr><td><b>", o);
        h(o, js(x, "letter"));
        fputs("</b> ", o);
        h(o, js(x, "name"));
        fprintf(o, "</td><td class=\"n\">%ld</td><td class=\"n\">%ld</td><td>", ji(x, "inherent"),
                ji(x, "residual"));
        h(o, js(x, "rationale"));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n<h3>Inherent baseline (no sandbox)</h3>\n<table>\n<tr><th>Dimension</th>"
          "<th>Question</th><th>Why the inherent score</th></tr>\n",
          o);
    json_array_foreach(json_object_get(rep, "dimensions"), i, x) {
        snprintf(a, sizeof(a), "%s %s (%ld)", js(x, "letter"), js(x, "name"), ji(x, "inherent"));
        html_tr(o, 3, a, js(x, "question"), js(x, "inherent_rationale"));
    }
    fputs("</table>\n<h2 id=\"controls\">Controls in this policy</h2>\n<table>\n<tr><th>Control</th><th>Setting</th></tr>\n",
          o);
    html_tr(o, 2, "Network", js(ctl, "network"));
    html_tr(o, 2, "Escape monitor (seccomp user notification)", yesno(ctl, "escape_monitor"));
    html_tr(o, 2, "Decoys (docker.sock, Kubernetes token)", yesno(ctl, "decoys"));
    html_tr(o, 2, "Cloud credential decoys", yesno(ctl, "cloud_decoys"));
    html_tr(o, 2, "On escape", js(ctl, "on_escape"));
    html_tr(o, 2, "Alert command", yesno(ctl, "alert_cmd"));
    html_tr(o, 2, "Audit events kept", yesno(ctl, "events_kept"));
    html_tr(o, 2, "Memory and pids limits enforceable here", yesno(ctl, "limits_enforceable"));
    html_tr(o, 2, "Time bounded", yesno(ctl, "time_bounded"));
    snprintf(a, sizeof(a), "%ld", ji(ctl, "writable_binds"));
    html_tr(o, 2, "Writable host binds", a);
    snprintf(a, sizeof(a), "%ld", ji(ctl, "env_pass"));
    html_tr(o, 2, "Variables passed from the caller", a);
    html_tr(o, 2, "Degraded mode allowed", yesno(ctl, "allow_degraded"));
    fputs("</table>\n", o);
    html_findings(o, json_object_get(rep, "host_findings"), "host", "Host posture findings to act on",
                  "None: every host finding is ok.",
                  "<tr><th>Status</th><th>Finding</th><th>Value</th><th>Recommendation</th></tr>", "status",
                  "value", "recommendation");
    html_findings(o, json_object_get(rep, "probe_findings"), "probe", "Probe findings inside the sandbox",
                  "None: the probe found no escape vector or exposure.",
                  "<tr><th>Exposed</th><th>Finding</th><th>What</th><th>Detail</th></tr>", "severity", "title",
                  "detail");
    fputs("<h2 id=\"frameworks\">Framework mapping</h2>\n<table>\n<tr><th>Framework</th><th>Reference</th>"
          "<th>agentjail control</th><th>Here</th><th>Covers</th><th>Misses</th></tr>\n",
          o);
    json_array_foreach(json_object_get(rep, "frameworks"), i, x) {
        fputs("<tr><td>", o);
        h(o, js(x, "framework"));
        fputs("</td><td><b>", o);
        h(o, js(x, "reference"));
        fputs("</b> ", o);
        h(o, js(x, "title"));
        fputs("</td><td>", o);
        h(o, js(x, "agentjail"));
        fputs("</td><td>", o);
        html_status(o, js(x, "status"));
        fputs("</td><td>", o);
        h(o, js(x, "covers"));
        fputs("</td><td>", o);
        h(o, js(x, "misses"));
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n<h2 id=\"method\">Method and limits</h2>\n<ul>\n<li>Inherent: ", o);
    h(o, js(meth, "inherent"));
    fputs(".</li>\n<li>Residual: ", o);
    h(o, js(meth, "residual"));
    fputs(".</li>\n<li>Composite: ", o);
    h(o, js(meth, "composite"));
    fputs("; bands: ", o);
    h(o, js(meth, "bands"));
    fputs(".</li>\n", o);
    json_array_foreach(json_object_get(meth, "limits"), i, x) {
        fputs("<li>", o);
        h(o, json_string_value(x));
        fputs("</li>\n", o);
    }
    fputs("</ul>\n<p>The method in full: <code>", o);
    h(o, js(meth, "document"));
    fputs("</code>.</p>\n<details><summary>Normalised policy this report is about</summary>\n<pre>", o);
    pol = json_dumps(json_object_get(rep, "policy"), JSON_INDENT(2) | JSON_SORT_KEYS);
    h(o, pol ? pol : "(unavailable)");
    free(pol);
    fputs("</pre>\n</details>\n</main>\n</body>\n</html>\n", o);
}

int aj_report_render(const json_t *report, enum aj_report_format fmt, char **ret, struct aj_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *o;

    *ret = NULL;
    if (fmt == AJ_REPORT_JSON) {
        /* Insertion order (fixed by aj_report_build), reals with a few digits. */
        buf = json_dumps(report, JSON_INDENT(2) | JSON_REAL_PRECISION(4));
        if (!buf)
            return aj_err(err, ENOMEM, "render the report");
        {
            size_t n = strlen(buf);
            char *nl = realloc(buf, n + 2);
            if (!nl) {
                free(buf);
                return aj_err(err, ENOMEM, "render the report");
            }
            memcpy(nl + n, "\n", 2); /* a text file ends with a newline */
            *ret = nl;
        }
        return 0;
    }
    o = open_memstream(&buf, &len);
    if (!o)
        return aj_err(err, errno, "render the report");
    switch (fmt) {
    case AJ_REPORT_MD:
        render_md(report, o);
        break;
    case AJ_REPORT_HTML:
        render_html(report, o);
        break;
    case AJ_REPORT_JSON:
        break;
    }
    if (ferror(o) || fclose(o) != 0) {
        free(buf);
        return aj_err(err, ENOMEM, "render the report");
    }
    *ret = buf;
    return 0;
}

