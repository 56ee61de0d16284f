/* SPDX-License-Identifier: Apache-2.0 */
#include "aj_verify.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_util.h"

#define PROBE_IN_SANDBOX "/opt/agentjail-probe"
#define PROBE_MAX_OUTPUT (4U << 20)

int aj_probe_locate(char *buf, size_t size, struct aj_error *err)
{
    const char *env = getenv("AGENTJAIL_PROBE");
    char self[4096];
    ssize_t n;

    if (env && *env) {
        if (snprintf(buf, size, "%s", env) >= (int)size)
            return aj_err(err, ENAMETOOLONG, "AGENTJAIL_PROBE");
    } else {
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0)
            return aj_err(err, errno, "find the agentjail binary");
        self[n] = '\0';
        if (snprintf(buf, size, "%s/agentjail-probe", dirname(self)) >= (int)size)
            return aj_err(err, ENAMETOOLONG, "probe path");
    }
    if (access(buf, X_OK) < 0)
        return aj_err(err, errno, "agentjail-probe at %s (set AGENTJAIL_PROBE to its path)", buf);
    return 0;
}

int aj_probe_in_policy(const struct aj_policy *pol_in, char **ret_json, struct aj_result *ret_res,
                       struct aj_error *err)
{
    struct aj_policy pol = *pol_in; /* shallow: only binds are extended, below */
    struct aj_bind *binds = NULL;
    char probe[4096];
    char *argv[] = {PROBE_IN_SANDBOX, "--json", NULL};
    struct aj_run_options opts = {0};
    _cleanup_close_ int out = -1;
    struct stat st;
    char *buf = NULL;
    int r;

    *ret_json = NULL;
    r = aj_probe_locate(probe, sizeof(probe), err);
    if (r < 0)
        return r;
    /* The same policy, plus the probe itself, read-only. */
    binds = calloc(pol.n_binds + 1, sizeof(*binds));
    if (!binds)
        return aj_err(err, ENOMEM, "probe run");
    memcpy(binds, pol.binds, pol.n_binds * sizeof(*binds));
    binds[pol.n_binds] = (struct aj_bind){.host = probe, .sandbox = PROBE_IN_SANDBOX, .rw = false};
    pol.binds = binds;
    pol.n_binds++;
    /* The probe's report must arrive whole. */
    if (pol.output_limit && pol.output_limit < PROBE_MAX_OUTPUT)
        pol.output_limit = PROBE_MAX_OUTPUT;
    out = memfd_create("agentjail-probe-out", MFD_CLOEXEC);
    if (out < 0) {
        free(binds);
        return aj_err(err, errno, "memfd for the probe's output");
    }
    opts.stdout_fd = out;
    r = aj_run_ex(&pol, argv, &opts, ret_res, err);
    free(binds);
    if (r < 0)
        return aj_err_prefix(err, r, "probe run");
    if (ret_res->status != AJ_STATUS_OK)
        return aj_err(err, 0, "the probe did not complete inside the sandbox (status %s, exit %d)",
                      aj_status_name(ret_res->status), ret_res->exit_code);
    if (fstat(out, &st) < 0)
        return aj_err(err, errno, "probe output");
    if (st.st_size <= 0 || st.st_size > PROBE_MAX_OUTPUT)
        return aj_err(err, EIO, "probe output of %lld bytes", (long long)st.st_size);
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return aj_err(err, ENOMEM, "probe output");
    if (pread(out, buf, (size_t)st.st_size, 0) != st.st_size) {
        free(buf);
        return aj_err(err, EIO, "read the probe output");
    }
    buf[st.st_size] = '\0';
    *ret_json = buf;
    return 0;
}
