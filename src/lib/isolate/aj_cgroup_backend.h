/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the cgroup layer: what its front (cgroup.c: detection, one run's
 * groups, limits, stats, kill, cleanup) shares with the two backends
 * (cgroup_v2.c, cgroup_v1.c). Not for other modules: they use aj_cgroup.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aj_cgroup.h"
#include "aj_error.h"

extern const char *const aj_cg_ctrl_names[AJ_CG_NCTRL];

bool aj_cg_has_word(const char *list, const char *word, char sep);
int aj_cg_write_at(const char *dir, const char *file, const char *value);
int aj_cg_read_at(const char *dir, const char *file, char *buf, size_t size);
/* "key value" lines (memory.events, cpu.stat, memory.oom_control). */
bool aj_cg_read_key(const char *dir, const char *file, const char *key, uint64_t *ret);
bool aj_cg_read_u64(const char *dir, const char *file, uint64_t *ret);
/* <mount><self>/agentjail[/rest], or "" if it does not fit. */
void aj_cg_join(char *out, size_t size, const char *mount, const char *self, const char *rest);
/* Write one limit file in dir; fails (naming what, the file and the dir)
 * only when required. */
int aj_cg_write_limit(const char *dir, const char *file, const char *value, bool required, const char *what,
                      struct aj_error *err);
/* Create base (once) and base/run into out. enable (v2 only, may be NULL)
 * turns on the controllers in base before the run's group is made; its
 * result goes to *ret_on. */
int aj_cg_make_run_dir(const char *base, const char *run, char *out, size_t size,
                       uint32_t (*enable)(const char *dir, uint32_t mask, int *ret_errno), uint32_t ctrls,
                       uint32_t *ret_on);

/* What differs between the versions for one controller's limit, its
 * read-back and its statistics (crun keeps its cgroup backends behind a
 * table like this). */
struct aj_cg_backend {
    int version;
    const char *memory_max_file; /* read back: the layer counts only if it holds */
    const char *cpu_quota_file;  /* read back: starts with the quota */
    int (*set_memory)(const char *dir, uint64_t bytes, bool required, struct aj_error *err);
    int (*set_cpu)(const char *dir, uint64_t quota_us, uint64_t period_us, bool required, struct aj_error *err);
    void (*memory_stats)(const char *dir, struct aj_cgroup_stats *st);
};
extern const struct aj_cg_backend aj_cg_v1_backend, aj_cg_v2_backend;

/* ---- v2 (cgroup_v2.c) ---- */
/* The controllers the caller's v2 cgroup would give a run (AJ_CG_* bits);
 * why some are missing goes to why (left alone when nothing is). */
uint32_t aj_cg_v2_predict(const struct aj_cgroup_host *host, char *why, size_t size);
/* The run's v2 group: tracking and kill for the whole tree, plus the
 * controllers in want where they can be enabled. Sets cg->v2_dir (or
 * leaves it empty, with cg->v2_why saying why), cg->v2_fd and drops from
 * cg->version what the group turned out not to have. Fails only when the
 * group exists but cannot be opened. */
int aj_cg_v2_create(const struct aj_cgroup_host *host, const char *run_name, uint32_t want, struct aj_cgroup *cg,
                    struct aj_error *err);

/* ---- v1 (cgroup_v1.c) ---- */
uint32_t aj_cg_v1_predict(const struct aj_cgroup_host *host, char *why, size_t size);
/* One group per v1 hierarchy that provides a controller in want (a
 * hierarchy holding several is one group); the rest are dropped from
 * cg->version. */
void aj_cg_v1_create(const struct aj_cgroup_host *host, const char *run_name, uint32_t want, struct aj_cgroup *cg);
/* Move pid ("123") into each of the run's v1 groups. */
int aj_cg_v1_attach(const struct aj_cgroup *cg, const char *pid, struct aj_error *err);
