/* SPDX-License-Identifier: Apache-2.0 */
/* Taking a request (see request.h). */
#include "request.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "aj_util.h"

void aj_req_plain(const struct aj_policy *pol, char *const *argv, struct aj_req *out)
{
    memset(out, 0, sizeof(*out));
    out->argv = argv;
    out->eff = *pol;
}

void aj_req_clear(struct aj_req *r)
{
    if (r->env)
        for (size_t i = r->eff.n_env - r->n_req_env; i < r->eff.n_env; i++)
            free(r->env[i]);
    free(r->env);
    free(r->workdir);
    memset(r, 0, sizeof(*r));
}

/* The caller's struct as this library knows it: a shorter one (an older
 * caller) reads as zero past its end; a longer one (a newer caller) is
 * accepted only if what lies past our end is zero, as the kernel does for
 * clone3 and openat2 (copy_struct_from_user). */
static int read_sized(const struct aj_request *in, struct aj_request *out, struct aj_error *err)
{
    size_t n = in->size;

    memset(out, 0, sizeof(*out));
    if (n < offsetof(struct aj_request, argv) + sizeof(in->argv))
        return aj_err(err, EINVAL, "request: size %zu is too small (initialise it with AJ_REQUEST_INIT)", n);
    if (n > sizeof(*out)) {
        const unsigned char *tail = (const unsigned char *)in + sizeof(*out);
        for (size_t i = 0; i < n - sizeof(*out); i++)
            if (tail[i])
                return aj_err(err, E2BIG, "request: it sets fields this library does not know (size %zu, "
                              "this library's %zu)", n, sizeof(*out));
        n = sizeof(*out);
    }
    memcpy(out, in, n);
    out->size = n;
    return 0;
}

/* A request may tighten a limit, never loosen it: 0 in the policy means
 * none (any value tightens), 0 in the request means the policy's. */
static int tighten(uint64_t *eff, uint64_t want, const char *name, struct aj_error *err)
{
    if (!want)
        return 0;
    if (*eff && want > *eff)
        return aj_err(err, EPERM, "request: %s %" PRIu64 " is more than the policy allows (%" PRIu64 ")", name,
                      want, *eff);
    *eff = want;
    return 1;
}

static int take_stdio(const struct aj_stdio *s, int i, struct aj_error *err)
{
    static const char *const names[] = {"stdin", "stdout", "stderr"};

    switch (s->kind) {
    case AJ_STDIO_NULL:
    case AJ_STDIO_PIPE:
        return 0;
    case AJ_STDIO_FD:
        if (s->fd < 0)
            return aj_err(err, EBADF, "request: %s: fd %d", names[i], s->fd);
        return 0;
    }
    return aj_err(err, EINVAL, "request: %s: unknown kind %d", names[i], (int)s->kind);
}

int aj_req_take(const struct aj_policy *pol, const struct aj_request *in, struct aj_req *out, struct aj_error *err)
{
    struct aj_request req;
    size_t n_env = 0;
    int r;

    memset(out, 0, sizeof(*out));
    if (!in) {
        r = aj_err(err, EINVAL, "no request");
        goto fail;
    }
    r = read_sized(in, &req, err);
    if (r < 0)
        goto fail;
    if (!req.argv || !req.argv[0]) {
        r = aj_err(err, 0, "no command given");
        goto fail;
    }
    for (int i = 0; i < 3; i++) {
        r = take_stdio(&req.stdio[i], i, err);
        if (r < 0)
            goto fail;
        out->stdio[i] = req.stdio[i];
    }
    out->argv = req.argv;
    out->events_path = req.events_path;
    out->eff = *pol;
    if ((r = tighten(&out->eff.timeout_ms, req.timeout_ms, "timeout_ms", err)) < 0 ||
        (r = tighten(&out->eff.output_limit, req.output_limit, "output_limit", err)) < 0)
        goto fail;
    out->changes_policy |= req.timeout_ms || req.output_limit;
    if ((r = tighten(&out->eff.memory_max, req.memory_max, "memory_max", err)) < 0 ||
        (r = tighten(&out->eff.cpu_time_ms, req.cpu_time_ms, "cpu_time_ms", err)) < 0)
        goto fail;
    /* Asked for by name: enforced, or the run fails (as a flag does). */
    if (req.memory_max)
        out->eff.required_limits |= AJ_LIMIT_MEMORY;
    if (req.cpu_time_ms)
        out->eff.required_limits |= AJ_LIMIT_CPU_TIME;
    if (req.workdir) {
        out->workdir = strdup(req.workdir);
        if (!out->workdir) {
            r = aj_err(err, ENOMEM, "request: workdir");
            goto fail;
        }
        out->eff.workdir = out->workdir;
    }
    out->fixed_in_parked = req.memory_max || req.cpu_time_ms || req.workdir;
    out->changes_policy |= out->fixed_in_parked;
    for (; req.envp && req.envp[n_env]; n_env++)
        ;
    if (n_env) {
        /* Later entries override earlier ones (build_envp): the request's
         * come after the policy's. */
        out->env = calloc(pol->n_env + n_env + 1, sizeof(char *));
        if (!out->env) {
            r = aj_err(err, ENOMEM, "request: environment");
            goto fail;
        }
        if (pol->n_env)
            memcpy(out->env, pol->env, pol->n_env * sizeof(char *));
        out->eff.env = out->env;
        out->eff.n_env = pol->n_env;
        for (size_t i = 0; i < n_env; i++) {
            out->env[out->eff.n_env] = strdup(req.envp[i]);
            if (!out->env[out->eff.n_env]) {
                r = aj_err(err, ENOMEM, "request: environment");
                goto fail;
            }
            out->eff.n_env++;
            out->n_req_env++;
        }
        out->changes_policy = true;
    }
    if (out->changes_policy) {
        /* The same bounds as for a policy: limits in range, an absolute
         * working directory, NAME=VALUE entries. */
        r = aj_policy_validate(&out->eff, err);
        if (r < 0) {
            r = aj_err_prefix(err, r, "request");
            goto fail;
        }
    }
    return 0;
fail:
    aj_req_clear(out);
    err->exit_hint = 2; /* refused input: nothing started */
    return r;
}
