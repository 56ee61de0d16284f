/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail serve --config FILE`: parse the arguments, run the server
 * (src/server/, docs/server.md). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "aj_server.h"
#include "cli.h"

int aj_cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config = NULL;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'h':
            puts("usage: agentjail serve --config FILE\n"
                 "\n"
                 "Serves the HTTP API for one-shot sandboxed runs (docs/server.md) until SIGTERM or\n"
                 "SIGINT, which kill the runs in flight and record them.");
            return 0;
        default:
            return AJ_EXIT_USAGE;
        }
    }
    if (!config || optind != argc) {
        (void)fputs("usage: agentjail serve --config FILE\n", stderr);
        return AJ_EXIT_USAGE;
    }
    return aj_server_main(config);
}
