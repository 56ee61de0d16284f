/* SPDX-License-Identifier: Apache-2.0 */
/* agentjail-serve: the server's own executable, which `agentjail serve`
 * execs (main.c). Separate because libmicrohttpd links GnuTLS, which has
 * no static build here: linked into `agentjail`, its shared objects and
 * constructors would cost every `agentjail run` about 2 ms at start
 * (measured: 0.6 -> 2.8 ms for an empty main), against the static-pie
 * binary's 0.15 ms saving (docs/performance.md). */
#include <string.h>

#include "cli.h"

/* Started as `agentjail-serve --config FILE` or, from `agentjail serve`,
 * with argv "agentjail" "serve" "--config" FILE; from `agentjail mcp`,
 * with argv "agentjail" "mcp" .... */
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "mcp") == 0)
        return aj_cmd_mcp(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "serve") == 0)
        return aj_cmd_serve(argc - 1, argv + 1);
    return aj_cmd_serve(argc, argv);
}
