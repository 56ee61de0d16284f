/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f)
{
    fputs("usage: agentjail run [--profile NAME] [--policy FILE] [FLAGS] -- CMD [ARGS...]\n"
          "       agentjail policy check|show|diff|profiles|keys ...\n"
          "       agentjail verify [--policy FILE | --profile NAME] [--json]\n"
          "       agentjail probe [--json] [--only NAME]\n"
          "       agentjail check [--json]\n"
          "       agentjail report [--policy FILE | --profile NAME] [--format md|json|html]\n"
          "       agentjail serve --config FILE\n"
          "       agentjail mcp [--config FILE] [--policy FILE] [--profile NAME]\n"
          "       agentjail --version | --help\n"
          "\n"
          "Runs CMD in a fresh sandbox: user, pid, mount, network, ipc, uts, cgroup and time\n"
          "namespaces, a private read-only root, no capabilities, no_new_privs, a seccomp\n"
          "allow-list and Landlock. See 'agentjail run --help' and docs/.\n",
          f);
}

/* `agentjail serve` is agentjail-serve, installed beside this binary
 * (serve_main.c says why it is separate): exec it with the same
 * arguments. Found through /proc/self/exe, not PATH, so it is the one
 * built and installed with this agentjail. */
static int exec_serve(char **argv)
{
    char self[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash;

    if (n < 0) {
        fprintf(stderr, "agentjail serve: /proc/self/exe: %s\n", strerror(errno));
        return AJ_EXIT_SETUP;
    }
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    (void)snprintf(path, sizeof(path), "%s/agentjail-serve", self);
    /* argv[0] stays "agentjail": ps shows `agentjail serve --config ...`,
     * and the sandboxes' inits (forks of the server) carry that name as
     * every other agentjail supervisor's do. */
    execv(path, argv);
    fprintf(stderr, "agentjail serve: %s: %s\n", path, strerror(errno));
    return AJ_EXIT_SETUP;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return AJ_EXIT_USAGE;
    }
    if (strcmp(argv[1], "run") == 0)
        return aj_cmd_run(argc - 1, argv + 1);
    if (strcmp(argv[1], "policy") == 0)
        return aj_cmd_policy(argc - 1, argv + 1);
    if (strcmp(argv[1], "verify") == 0)
        return aj_cmd_verify(argc - 1, argv + 1);
    if (strcmp(argv[1], "probe") == 0)
        return aj_cmd_probe(argc - 1, argv + 1);
    if (strcmp(argv[1], "check") == 0)
        return aj_cmd_check(argc - 1, argv + 1);
    if (strcmp(argv[1], "report") == 0)
        return aj_cmd_report(argc - 1, argv + 1);
    if (strcmp(argv[1], "serve") == 0 || strcmp(argv[1], "mcp") == 0)
        return exec_serve(argv);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        puts("agentjail " AJ_VERSION);
        return 0;
    }
    fprintf(stderr, "agentjail: unknown command '%s' (try 'agentjail --help')\n", argv[1]);
    return AJ_EXIT_USAGE;
}
