/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail mcp [--config FILE] [--policy FILE] [--profile NAME] [--tenant NAME]`:
 * the server's tools as an MCP server on stdio (src/server/mcp*.c,
 * docs/mcp.md). Part of agentjail-serve, which `agentjail mcp` execs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aj_server.h"
#include "cli.h"

static const char usage_text[] =
    "usage: agentjail mcp [--config FILE] [--policy FILE] [--profile NAME] [--tenant NAME]\n";

/* Take the JSON-RPC channel off fds 0 and 1: it moves to close-on-exec
 * fds above 2, and 0 and 1 become /dev/null. Whatever this process or a
 * child it forks writes to stdout (or reads from stdin) can then never
 * reach the client; the library gives a payload none of the caller's
 * 0-2 anyway (AJ_STDIO_NULL or its own pipes), this is the second wall. */
static int take_channel(int *in_fd, int *out_fd)
{
    int nul;

    *in_fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    *out_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (*in_fd < 0 || *out_fd < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0) {
        (void)fprintf(stderr, "agentjail mcp: stdio: %s\n", strerror(errno));
        return -1;
    }
    (void)close(nul);
    return 0;
}

/* Without --config: a private directory (0700) with a config naming its
 * store there and one tenant, "local", whose token nobody knows (stdio
 * needs none). Removed at exit with the records in it. */
static char *make_local_config(char *dir, size_t dir_size)
{
    const char *tmp = getenv("TMPDIR");
    unsigned char rnd[32];
    char hex[65], *path = NULL;
    FILE *f;
    int fd;

    if (!tmp || tmp[0] != '/')
        tmp = "/tmp";
    (void)snprintf(dir, dir_size, "%s/agentjail-mcp-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        (void)fprintf(stderr, "agentjail mcp: mkdtemp %s: %s\n", dir, strerror(errno));
        dir[0] = '\0';
        return NULL;
    }
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd) || asprintf(&path, "%s/config.json", dir) < 0) {
        (void)fprintf(stderr, "agentjail mcp: out of memory or entropy\n");
        return NULL;
    }
    for (int i = 0; i < 32; i++)
        (void)snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        (void)fprintf(stderr, "agentjail mcp: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            (void)close(fd);
        free(path);
        return NULL;
    }
    (void)fprintf(f, "{\"store\": \"%s/runs.db\", \"tenants\": {\"local\": {\"token_sha256\": \"%s\"}}}\n", dir, hex);
    if (fclose(f) != 0) {
        (void)fprintf(stderr, "agentjail mcp: %s: %s\n", path, strerror(errno));
        free(path);
        return NULL;
    }
    return path;
}

/* The private directory and what the server left in it: files (the
 * store, its journal, the config) and directories it emptied (events/,
 * workspaces/). Nothing is followed: a directory that is not empty (or a
 * mount) stays, and is named. */
static void remove_local(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

    if (!d) {
        if (fd >= 0)
            (void)close(fd);
    } else {
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (unlinkat(dirfd(d), e->d_name, e->d_type == DT_DIR ? AT_REMOVEDIR : 0) < 0)
                (void)fprintf(stderr, "agentjail mcp: could not remove %s/%s: %s\n", dir, e->d_name,
                              strerror(errno));
        }
        (void)closedir(d);
    }
    if (rmdir(dir) < 0)
        (void)fprintf(stderr, "agentjail mcp: could not remove %s: %s\n", dir, strerror(errno));
}

int aj_cmd_mcp(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"policy", required_argument, NULL, 'p'},
        {"profile", required_argument, NULL, 'P'}, {"tenant", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    struct aj_server_opts o = {.mcp_in_fd = -1, .mcp_out_fd = -1};
    char dir[4096] = "";
    char *local = NULL;
    int c, status;

    optind = 1;
    while ((c = getopt_long(argc, argv, "+c:p:P:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            o.config_path = optarg;
            break;
        case 'p':
            o.policy_path = optarg;
            break;
        case 'P':
            o.profile = optarg;
            break;
        case 't':
            o.tenant = optarg;
            break;
        case 'h':
            (void)fputs(usage_text, stdout);
            (void)puts("\n"
                       "An MCP server on stdio (newline-delimited JSON-RPC; logs on stderr): the tools run_code,\n"
                       "run_command and the session tools, each run in a fresh sandbox (docs/mcp.md).\n"
                       "Without --config: one local tenant, its records in a private temp directory\n"
                       "removed at exit. --policy/--profile override the config's. --tenant: the\n"
                       "config's tenant the session acts as (needed when it has several).");
            return 0;
        default:
            return AJ_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        (void)fputs(usage_text, stderr);
        return AJ_EXIT_USAGE;
    }
    if (o.tenant && !o.config_path) {
        (void)fputs("agentjail mcp: --tenant needs --config\n", stderr);
        return AJ_EXIT_USAGE;
    }
    if (take_channel(&o.mcp_in_fd, &o.mcp_out_fd) < 0)
        return AJ_EXIT_SETUP;
    if (!o.config_path) {
        (void)umask(077);
        local = make_local_config(dir, sizeof(dir));
        if (!local) {
            if (dir[0])
                remove_local(dir);
            return AJ_EXIT_SETUP;
        }
        o.config_path = local;
        (void)fprintf(stderr, "agentjail mcp: records in %s (private, removed at exit)\n", dir);
    }
    status = aj_server_run(&o);
    if (local) {
        remove_local(dir);
        free(local);
    }
    return status;
}
