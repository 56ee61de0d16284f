/* SPDX-License-Identifier: Apache-2.0 */
/* agentjail probe [--json] [--only NAME]: run agentjail-probe here, with no
 * sandbox, so it reports what this environment (a host, a container, a pod)
 * exposes. The probe is the static binary next to this one (or
 * $AGENTJAIL_PROBE); its arguments, output and exit status pass through. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agentjail.h"
#include "aj_verify.h"
#include "cli.h"

int aj_cmd_probe(int argc, char **argv)
{
    struct aj_error err = {0};
    char path[4096];

    (void)argc;
    if (aj_probe_locate(path, sizeof(path), &err) < 0) {
        fprintf(stderr, "agentjail probe: %s\n", err.msg);
        return AJ_EXIT_SETUP;
    }
    fflush(NULL);
    argv[0] = path; /* argv[1..] are the probe's own arguments */
    execv(path, argv);
    fprintf(stderr, "agentjail probe: exec %s: %s\n", path, strerror(errno));
    return AJ_EXIT_SETUP;
}
