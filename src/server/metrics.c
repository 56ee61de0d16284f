/* SPDX-License-Identifier: Apache-2.0 */
/* GET /metrics: the Prometheus text format (version 0.0.4). Names that
 * existed in the first slice keep their meaning; per-tenant series have
 * a tenant label (names are checked at load: no quote, backslash or
 * control character, so they go into labels as they are). */
#include <stdio.h>
#include <stdlib.h>

#include "srv.h"

static void header(FILE *f, const char *name, const char *type, const char *help)
{
    (void)fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *srv_metrics_text(struct srv_runner *rn, const struct srv_config *cfg)
{
    struct srv_metrics m;
    struct srv_tenant *snap;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    long sessions = 0;

    snap = calloc(cfg->n_tenants ? cfg->n_tenants : 1, sizeof(*snap));
    if (!snap)
        return NULL;
    f = open_memstream(&buf, &len);
    if (!f) {
        free(snap);
        return NULL;
    }
    srv_runner_metrics(rn, &m);
    for (size_t i = 0; i < cfg->n_tenants; i++) {
        srv_runner_tenant_snapshot(rn, &cfg->tenants[i], &snap[i]);
        sessions += srv_tenant_sessions_live(&cfg->tenants[i]);
    }

    header(f, "agentjail_runs_started_total", "counter", "Sandboxes started.");
    (void)fprintf(f, "agentjail_runs_started_total %llu\n", (unsigned long long)m.started);
    header(f, "agentjail_runs_finished_total", "counter", "Runs ended, by result status.");
    for (int i = 0; i < 16; i++)
        if (srv_status_names[i])
            (void)fprintf(f, "agentjail_runs_finished_total{status=\"%s\"} %llu\n", srv_status_names[i],
                          (unsigned long long)m.finished_by_status[i]);
    header(f, "agentjail_runs_running", "gauge", "Sandboxes running now.");
    (void)fprintf(f, "agentjail_runs_running %u\n", m.running);
    header(f, "agentjail_runner_threads", "gauge", "Threads that start runs and own them (runner_threads).");
    (void)fprintf(f, "agentjail_runner_threads %u\n", srv_config_runner_threads(cfg));
    header(f, "agentjail_runs_queued", "gauge", "Runs accepted and not started yet (the runner's queue).");
    (void)fprintf(f, "agentjail_runs_queued %u\n", m.queued);
    header(f, "agentjail_http_429_total", "counter", "Runs refused over a concurrency or rate limit.");
    (void)fprintf(f, "agentjail_http_429_total %llu\n", (unsigned long long)m.rejected_429);
    header(f, "agentjail_escape_attempts_total", "counter", "escape_attempt events of ended runs.");
    (void)fprintf(f, "agentjail_escape_attempts_total %llu\n", (unsigned long long)m.escape_attempts);
    header(f, "agentjail_canaries_total", "counter", "Decoy (canary) touches of ended runs.");
    (void)fprintf(f, "agentjail_canaries_total %llu\n", (unsigned long long)m.canaries);
    header(f, "agentjail_net_denials_total", "counter", "net_denied events of runs, as processed.");
    (void)fprintf(f, "agentjail_net_denials_total %llu\n", (unsigned long long)m.net_denied);
    header(f, "agentjail_sessions_live", "gauge", "Sessions open now.");
    (void)fprintf(f, "agentjail_sessions_live %ld\n", sessions);
    if (cfg->store_pg) {
        uint64_t ok, unreachable, loop;
        srv_fwd_counts(&ok, &unreachable, &loop);
        header(f, "agentjail_forwarded_total", "counter",
               "Requests forwarded to the replica holding their run or session, by result.");
        (void)fprintf(f, "agentjail_forwarded_total{result=\"ok\"} %llu\n", (unsigned long long)ok);
        (void)fprintf(f, "agentjail_forwarded_total{result=\"unreachable\"} %llu\n", (unsigned long long)unreachable);
        (void)fprintf(f, "agentjail_forwarded_total{result=\"loop\"} %llu\n", (unsigned long long)loop);
    }
    if (srv_eventlog_enabled()) {
        header(f, "agentjail_events_log_errors_total", "counter", "Event lines the events log could not take.");
        (void)fprintf(f, "agentjail_events_log_errors_total %llu\n", (unsigned long long)srv_eventlog_errors());
    }

    header(f, "agentjail_run_duration_seconds", "histogram", "Runs from accepted to ended.");
    uint64_t cum = 0;
    for (int b = 0; b < SRV_LATENCY_BUCKETS; b++) {
        cum += m.latency_le[b];
        (void)fprintf(f, "agentjail_run_duration_seconds_bucket{le=\"%g\"} %llu\n", srv_latency_bounds_ms[b] / 1000.0,
                      (unsigned long long)cum);
    }
    (void)fprintf(f,
                  "agentjail_run_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
                  "agentjail_run_duration_seconds_sum %.3f\n"
                  "agentjail_run_duration_seconds_count %llu\n",
                  (unsigned long long)m.latency_count, (double)m.latency_sum_ms / 1000.0,
                  (unsigned long long)m.latency_count);

    header(f, "agentjail_tenant_runs_running", "gauge", "Runs queued or running, by tenant.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        (void)fprintf(f, "agentjail_tenant_runs_running{tenant=\"%s\"} %u\n", snap[i].name, snap[i].running);
    header(f, "agentjail_tenant_runs_queued", "gauge", "Runs accepted and not started yet, by tenant.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        (void)fprintf(f, "agentjail_tenant_runs_queued{tenant=\"%s\"} %u\n", snap[i].name, snap[i].queued);
    header(f, "agentjail_tenant_runs_finished_total", "counter", "Runs ended, by tenant.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        (void)fprintf(f, "agentjail_tenant_runs_finished_total{tenant=\"%s\"} %llu\n", snap[i].name,
                      (unsigned long long)snap[i].finished);
    header(f, "agentjail_tenant_runs_by_status_total", "counter", "Runs ended, by tenant and result status.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        for (int k = 0; k < 16; k++)
            if (srv_status_names[k])
                (void)fprintf(f, "agentjail_tenant_runs_by_status_total{tenant=\"%s\",status=\"%s\"} %llu\n",
                              snap[i].name, srv_status_names[k], (unsigned long long)snap[i].finished_by_status[k]);
    header(f, "agentjail_tenant_escape_attempts_total", "counter", "escape_attempt events, by tenant.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        (void)fprintf(f, "agentjail_tenant_escape_attempts_total{tenant=\"%s\"} %llu\n", snap[i].name,
                      (unsigned long long)snap[i].escapes);
    header(f, "agentjail_tenant_net_denials_total", "counter", "net_denied events, by tenant.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        (void)fprintf(f, "agentjail_tenant_net_denials_total{tenant=\"%s\"} %llu\n", snap[i].name,
                      (unsigned long long)snap[i].net_denied);
    header(f, "agentjail_tenant_sessions_live", "gauge", "Sessions open now, by tenant.");
    for (size_t i = 0; i < cfg->n_tenants; i++)
        (void)fprintf(f, "agentjail_tenant_sessions_live{tenant=\"%s\"} %d\n", snap[i].name,
                      srv_tenant_sessions_live(&cfg->tenants[i]));

    if (m.pool) {
        header(f, "agentjail_pool_runs_total", "counter", "Runs by whether a parked sandbox was ready (all pools).");
        (void)fprintf(f, "agentjail_pool_runs_total{kind=\"warm\"} %llu\nagentjail_pool_runs_total{kind=\"cold\"} %llu\n",
                      (unsigned long long)m.warm_runs, (unsigned long long)m.cold_runs);
        header(f, "agentjail_pool_ready", "gauge", "Parked sandboxes ready now, all pools.");
        (void)fprintf(f, "agentjail_pool_ready %u\n", m.pool_ready);
        header(f, "agentjail_tenant_pool_runs_total", "counter", "Runs by tenant and whether its pool had one ready.");
        for (size_t i = 0; i < cfg->n_tenants; i++)
            if (snap[i].pool)
                (void)fprintf(f,
                              "agentjail_tenant_pool_runs_total{tenant=\"%s\",kind=\"warm\"} %llu\n"
                              "agentjail_tenant_pool_runs_total{tenant=\"%s\",kind=\"cold\"} %llu\n",
                              snap[i].name, (unsigned long long)snap[i].warm_runs, snap[i].name,
                              (unsigned long long)snap[i].cold_runs);
        header(f, "agentjail_tenant_pool_ready", "gauge", "Parked sandboxes ready, by tenant.");
        for (size_t i = 0; i < cfg->n_tenants; i++)
            if (snap[i].pool)
                (void)fprintf(f, "agentjail_tenant_pool_ready{tenant=\"%s\"} %u\n", snap[i].name, snap[i].pool_ready);
    }
    if (m.interp) {
        header(f, "agentjail_interp_runs_total", "counter",
               "python runs sent to warm interpreters, by whether one was parked (all tenants).");
        (void)fprintf(f, "agentjail_interp_runs_total{kind=\"warm\"} %llu\nagentjail_interp_runs_total{kind=\"cold\"} %llu\n",
                      (unsigned long long)m.interp_warm_runs, (unsigned long long)m.interp_cold_runs);
        header(f, "agentjail_interp_ready", "gauge", "Parked warm interpreters ready now, all tenants.");
        (void)fprintf(f, "agentjail_interp_ready %u\n", m.interp_ready);
        header(f, "agentjail_tenant_interp_ready", "gauge", "Parked warm interpreters ready now, by tenant.");
        for (size_t i = 0; i < cfg->n_tenants; i++)
            if (snap[i].interp_pool_on)
                (void)fprintf(f, "agentjail_tenant_interp_ready{tenant=\"%s\"} %u\n", snap[i].name,
                              snap[i].interp_ready);
    }
    free(snap);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
