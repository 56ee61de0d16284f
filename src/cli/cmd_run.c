/* SPDX-License-Identifier: Apache-2.0 */
/* `agentjail run`: parse flags into the policy, run the sandbox through the
 * library's handle (ending it on SIGINT, SIGTERM, SIGHUP, SIGQUIT), print
 * one line on failure, mirror the payload's exit status. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "agentjail.h"
#include "cli.h"

enum {
    OPT_BIND_RO = 256,
    OPT_BIND_RW,
    OPT_BIND_OWNER,
    OPT_TMPFS,
    OPT_WORKDIR,
    OPT_ENV,
    OPT_ENV_PASS,
    OPT_HOSTNAME,
    OPT_TIMEOUT,
    OPT_RESULT,
    OPT_NETWORK,
    OPT_UID,
    OPT_GID,
    OPT_UID_RANGE,
    OPT_TMP_SIZE,
    OPT_NOEXEC_TMP,
    OPT_ALLOW_PTRACE,
    OPT_ALLOW_DEGRADED,
    OPT_ALLOW_NO_LANDLOCK,
    OPT_ALLOW_UNSCOPED_SIGNALS,
    OPT_ALLOW_NO_DECOYS,
    OPT_ALLOW_BIND_INSIDE_WRITABLE,
    OPT_MEMORY,
    OPT_PIDS,
    OPT_CPUS,
    OPT_CPU_TIME,
    OPT_OUTPUT_LIMIT,
    OPT_FILE_SIZE,
    OPT_OPEN_FILES,
    OPT_POLICY,
    OPT_PROFILE,
    OPT_EVENTS,
    OPT_ON_ESCAPE,
    OPT_ALERT_CMD,
    OPT_ALERT_TIMEOUT,
    OPT_EVENT_BUDGET,
    OPT_NO_DECOYS,
    OPT_DECOY_CLOUD,
    OPT_NET_KEY, /* --allow, --deny, --secret...: policy keys of network "proxy" (keys.c) */
    OPT_INTERPRETER,
    OPT_PRELOAD,
    OPT_WARMUP,
    OPT_HELP,
};

static const struct option run_options[] = {
    {"bind-ro", required_argument, NULL, OPT_BIND_RO},
    {"bind-rw", required_argument, NULL, OPT_BIND_RW},
    {"bind-owner", required_argument, NULL, OPT_BIND_OWNER},
    {"tmpfs", required_argument, NULL, OPT_TMPFS},
    {"workdir", required_argument, NULL, OPT_WORKDIR},
    {"env", required_argument, NULL, OPT_ENV},
    {"env-pass", required_argument, NULL, OPT_ENV_PASS},
    {"hostname", required_argument, NULL, OPT_HOSTNAME},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"result", required_argument, NULL, OPT_RESULT},
    {"network", required_argument, NULL, OPT_NETWORK},
    {"uid", required_argument, NULL, OPT_UID},
    {"gid", required_argument, NULL, OPT_GID},
    {"uid-range", required_argument, NULL, OPT_UID_RANGE},
    {"tmp-size", required_argument, NULL, OPT_TMP_SIZE},
    {"noexec-tmp", no_argument, NULL, OPT_NOEXEC_TMP},
    {"allow-ptrace", no_argument, NULL, OPT_ALLOW_PTRACE},
    {"allow-degraded", no_argument, NULL, OPT_ALLOW_DEGRADED},
    {"allow-no-landlock", no_argument, NULL, OPT_ALLOW_NO_LANDLOCK},
    {"allow-unscoped-signals", no_argument, NULL, OPT_ALLOW_UNSCOPED_SIGNALS},
    {"allow-no-decoys", no_argument, NULL, OPT_ALLOW_NO_DECOYS},
    {"allow-bind-inside-writable", no_argument, NULL, OPT_ALLOW_BIND_INSIDE_WRITABLE},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"pids", required_argument, NULL, OPT_PIDS},
    {"cpus", required_argument, NULL, OPT_CPUS},
    {"cpu-time", required_argument, NULL, OPT_CPU_TIME},
    {"output-limit", required_argument, NULL, OPT_OUTPUT_LIMIT},
    {"file-size", required_argument, NULL, OPT_FILE_SIZE},
    {"open-files", required_argument, NULL, OPT_OPEN_FILES},
    {"policy", required_argument, NULL, OPT_POLICY},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"events", required_argument, NULL, OPT_EVENTS},
    {"on-escape", required_argument, NULL, OPT_ON_ESCAPE},
    {"alert-cmd", required_argument, NULL, OPT_ALERT_CMD},
    {"alert-timeout", required_argument, NULL, OPT_ALERT_TIMEOUT},
    {"event-budget", required_argument, NULL, OPT_EVENT_BUDGET},
    {"no-decoys", no_argument, NULL, OPT_NO_DECOYS},
    {"decoy-cloud", no_argument, NULL, OPT_DECOY_CLOUD},
    {"allow", required_argument, NULL, OPT_NET_KEY},
    {"deny", required_argument, NULL, OPT_NET_KEY},
    {"allow-range", required_argument, NULL, OPT_NET_KEY},
    {"proxy-port", required_argument, NULL, OPT_NET_KEY},
    {"resolver", required_argument, NULL, OPT_NET_KEY},
    {"net-max-connections", required_argument, NULL, OPT_NET_KEY},
    {"net-max-bytes-out", required_argument, NULL, OPT_NET_KEY},
    {"net-max-bytes-in", required_argument, NULL, OPT_NET_KEY},
    {"net-max-connection-time", required_argument, NULL, OPT_NET_KEY},
    {"net-max-rps", required_argument, NULL, OPT_NET_KEY},
    {"secret", required_argument, NULL, OPT_NET_KEY},
    {"interpreter", required_argument, NULL, OPT_INTERPRETER},
    {"preload", required_argument, NULL, OPT_PRELOAD},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void run_usage(FILE *f)
{
    fputs("usage: agentjail run [--profile NAME] [--policy FILE] [FLAGS] -- CMD [ARGS...]\n"
          "       agentjail run --interpreter python [--preload MODULE]... [FLAGS] -- CODE_FILE|-c CODE [ARGS...]\n"
          "\n"
          "  --profile NAME            start from a built-in profile (default, python, shell)\n"
          "  --policy FILE             start from a policy file (JSON, see docs/policy.md);\n"
          "                            flags override its values and add to its lists\n"
          "  --bind-ro HOST[:SANDBOX]  read-only bind of a host path (default SANDBOX=HOST)\n"
          "  --bind-rw HOST[:SANDBOX]  writable bind of a host path; id-mapped as root, so\n"
          "                            its owner's files are the sandbox user's inside\n"
          "  --bind-owner UID:GID      host owner of the --bind-rw just before it (default:\n"
          "                            the directory's owner; never root)\n"
          "  --tmpfs PATH[:SIZE]       private tmpfs (noexec), default size 64M\n"
          "  --tmp-size SIZE           size of /tmp and /dev/shm (default: half the memory\n"
          "                            limit, at least 64M; 64M without a memory cgroup)\n"
          "  --noexec-tmp              files written to /tmp, /dev/shm and --tmpfs cannot be\n"
          "                            executed (noexec, and no Landlock execute right)\n"
          "  --allow-ptrace            debuggers (gdb, strace, LeakSanitizer): ptrace between\n"
          "                            the sandbox's own processes (init stays refused)\n"
          "  --workdir PATH            working directory inside (default /tmp)\n"
          "  --env NAME=VALUE          set a variable (the environment starts empty\n"
          "                            but for PATH and HOME=/tmp)\n"
          "  --env-pass NAME           copy a variable from agentjail's environment\n"
          "  --hostname NAME           hostname inside (default agentjail)\n"
          "  --timeout DURATION        wall-clock limit: 10, 10s, 500ms, 2m; kills the sandbox\n"
          "  --network loopback|none|proxy  loopback (default): a private lo, nothing of\n"
          "                            the host and nothing leaves; none: no usable interface\n"
          "                            (and Landlock refuses TCP where its ABI is 4+); proxy:\n"
          "                            loopback plus HTTP(S) through the run's egress proxy\n"
          "                            to what --allow names (docs/network.md)\n"
          "  --allow HOST[:PORT]       proxy: let HOST (or *.DOMAIN, IP, \"GET HOST:PORT\") through\n"
          "  --deny HOST[:PORT]        proxy: refuse it even if allowed\n"
          "  --allow-range CIDR        proxy: an address range the deny floor refuses, allowed\n"
          "  --proxy-port N            proxy: the relay's port on 127.0.0.1 (default 3128)\n"
          "  --resolver IP:PORT        proxy: the DNS server the proxy asks (default: the host's)\n"
          "  --net-max-connections N, --net-max-bytes-out SIZE, --net-max-bytes-in SIZE,\n"
          "  --net-max-connection-time DURATION, --net-max-rps N   proxy: caps per run\n"
          "  --secret ID,hosts=H1|H2,from=env:NAME|file:/PATH,env=VAR[,file=/PATH][,header=H][,format=F]\n"
          "                            proxy: broker a credential; the sandbox gets a placeholder\n"
          "  --uid N, --gid N          ids inside the sandbox (default 1000)\n"
          "  --uid-range BASE:COUNT    root mode: host uids for runs (default 1610612736:65536)\n"
          "\n"
          "Limits (a cgroup enforces memory, pids and cpus; without a writable cgroup\n"
          "an explicit limit fails the run instead of being ignored):\n"
          "  --memory SIZE             RAM + swap of the whole sandbox (default 2G)\n"
          "  --pids N                  processes and threads (default 1024)\n"
          "  --cpus F                  CPU bandwidth, e.g. 0.5 or 2\n"
          "  --cpu-time DURATION       CPU time of the whole tree\n"
          "  --output-limit SIZE       per stream; past it the output is cut and the run ends\n"
          "  --file-size SIZE          largest file the payload may write (default 1G)\n"
          "  --open-files N            open file descriptors per process (default 1024)\n"
          "\n"
          "Detection (escape-indicative syscalls always reach the supervisor and are refused):\n"
          "  --events FILE             audit events as JSON Lines (- for stderr)\n"
          "  --on-escape deny|kill     deny (default): refuse and go on; kill: end the run\n"
          "                            at the first escape attempt or decoy touch\n"
          "  --alert-cmd CMD           run CMD (sh -c, on the host) once, at the first\n"
          "                            high-severity event, with the event JSON on stdin\n"
          "                            (from /: give CMD absolute paths)\n"
          "  --alert-timeout DURATION  kill the alert command after this (default 10s)\n"
          "  --event-budget N          write at most N attempt events per run, then summarise\n"
          "                            once a second (events_suppressed; default 1000)\n"
          "  --no-decoys               no docker.sock / Kubernetes token / device decoys\n"
          "  --decoy-cloud             also plant cloud credential decoys (env, ~/.aws)\n"
          "\n"
          "Interpreters (docs/interpreters.md): the bootstrap a warm pool parks, started cold:\n"
          "  --interpreter python      run CODE_FILE (read here, on the host) as `python3 -c`\n"
          "                            would run its text, or -c CODE, or python3 SCRIPT\n"
          "                            (a path inside the sandbox)\n"
          "  --preload MODULE          import MODULE before the code (repeatable)\n"
          "  --warmup CODE             run CODE after the preload, before the code (a warm-up cell)\n"
          "\n"
          "  --result FILE             write the result JSON to FILE (refused inside a\n"
          "                            --bind-rw directory; FILE's directories must not\n"
          "                            be symlinks)\n"
          "  --allow-degraded          if namespaces are refused, run with Landlock, seccomp,\n"
          "                            rlimits and no_new_privs only (loudly reported)\n"
          "  --allow-no-landlock       on a kernel without Landlock (before 5.13), run without\n"
          "                            it (the result shows landlock_fs missing)\n"
          "  --allow-unscoped-signals  degraded and rootless on a kernel whose Landlock cannot\n"
          "                            scope signals (before 6.12): run anyway, the payload\n"
          "                            able to signal the caller's other processes\n"
          "  --allow-no-decoys         if the decoys cannot be watched (no CAP_LEASE in a\n"
          "                            container), run anyway (the result shows decoys missing)\n"
          "  --allow-bind-inside-writable  bind a source that lies inside a directory a\n"
          "                            sandbox run could write (refused by default: that run\n"
          "                            could have planted what is there)\n"
          "\n"
          "Exit status: the payload's; 128+N if it was killed by signal N (a timeout or a\n"
          "limit: 137);\n"
          "125 if agentjail failed; 126/127 if CMD cannot be executed / was not found;\n"
          "2 for a bad command line.\n",
          f);
}

/* getopt_long reports a long option missing its argument as '?' here;
 * tell that apart from an unknown flag for a useful message. */
static bool flag_needs_argument(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0)
        return false;
    for (const struct option *o = run_options; o->name; o++)
        if (o->has_arg == required_argument && strcmp(arg + 2, o->name) == 0)
            return true;
    return false;
}

/* A flag that is a policy key (keys.c names each key's flag): the library
 * checks the value and words the error with the flag. */
static int set_policy_flag(struct aj_policy *pol, const char *name, const char *value, struct aj_error *err)
{
    char flag[64];

    (void)snprintf(flag, sizeof(flag), "--%s", name);
    return aj_policy_set(pol, flag, value, err);
}

/* The most code a CODE_FILE may hold (the library's bound on a request). */
#define INTERP_CODE_MAX (8u << 20)

static void free_interp_argv(char **v)
{
    if (v)
        free(v[2]);
    free(v);
}

/* --interpreter python: the command line as an interpreter request.
 * "-c CODE ARGS" and "python3 ..." as they are; "CODE_FILE ARGS": the
 * file read here, on the host, and run as `python3 -c` runs its text. */
static int interp_argv(char **cmd, char ***ret, struct aj_error *err)
{
    size_t n = 0, len = 0;
    char **v;
    FILE *f;
    char *code;

    *ret = NULL;
    while (cmd[n])
        n++;
    v = calloc(n + 3, sizeof(char *));
    if (!v)
        return aj_err(err, ENOMEM, "--interpreter");
    v[0] = (char *)"python3";
    if (strcmp(cmd[0], "python3") == 0 || strcmp(cmd[0], "/usr/bin/python3") == 0) {
        for (size_t i = 0; i < n; i++)
            v[i] = cmd[i];
        v[2] = v[2] ? strdup(v[2]) : NULL; /* freed with the rest */
        if (n > 2 && !v[2]) {
            free(v);
            return aj_err(err, ENOMEM, "--interpreter");
        }
        *ret = v;
        return 0;
    }
    if (strcmp(cmd[0], "-c") == 0) {
        if (!cmd[1]) {
            free(v);
            return aj_err(err, 0, "--interpreter: -c needs the code");
        }
        v[1] = (char *)"-c";
        v[2] = strdup(cmd[1]);
        for (size_t i = 2; i < n; i++)
            v[i + 1] = cmd[i];
        if (!v[2]) {
            free(v);
            return aj_err(err, ENOMEM, "--interpreter");
        }
        *ret = v;
        return 0;
    }
    f = fopen(cmd[0], "re");
    if (!f) {
        int e = errno;
        free(v);
        return aj_err(err, 0, "--interpreter: CODE_FILE %s: %s", cmd[0], strerror(e));
    }
    code = malloc(INTERP_CODE_MAX + 1);
    if (code)
        len = fread(code, 1, INTERP_CODE_MAX + 1, f);
    if (!code || ferror(f) || len > INTERP_CODE_MAX || memchr(code, '\0', len)) {
        int e = errno;
        bool big = code && len > INTERP_CODE_MAX;
        (void)fclose(f);
        free(code);
        free(v);
        if (big)
            return aj_err(err, 0, "--interpreter: CODE_FILE %s is larger than %u bytes", cmd[0], INTERP_CODE_MAX);
        return aj_err(err, 0, "--interpreter: CODE_FILE %s: %s", cmd[0],
                      e ? strerror(e) : "has a NUL byte (python3 -c cannot take it either)");
    }
    (void)fclose(f);
    code[len] = '\0';
    v[1] = (char *)"-c";
    v[2] = code;
    for (size_t i = 1; i < n; i++)
        v[i + 2] = cmd[i];
    *ret = v;
    return 0;
}

static void print_degraded_warning(const struct aj_result *res)
{
    fprintf(stderr, "agentjail: WARNING: DEGRADED sandbox, namespaces unavailable: %s\n",
            res->degraded_reason);
    fputs("agentjail: WARNING: missing layers:", stderr);
    for (unsigned i = 0; i < AJ_LAYER_COUNT; i++)
        if (!aj_result_has_layer(res, (enum aj_layer)i))
            fprintf(stderr, " %s", aj_layer_name((enum aj_layer)i));
    fputc('\n', stderr);
}

/* Run req to its end, ending it at the first of the signals in ending
 * (blocked by the caller), each of which is recorded in got. */
static int run_until_end(const struct aj_policy *pol, const struct aj_request *req, const sigset_t *ending,
                         sigset_t *got, struct aj_result *res, struct aj_error *err)
{
    struct aj_sandbox *h = NULL;
    struct signalfd_siginfo si;
    int sfd, r;

    memset(res, 0, sizeof(*res));
    res->status = AJ_STATUS_SETUP_ERROR;
    res->exit_code = AJ_EXIT_SETUP;
    sfd = signalfd(-1, ending, SFD_CLOEXEC | SFD_NONBLOCK);
    r = sfd < 0 ? aj_err(err, errno, "signalfd") : aj_sandbox_start(pol, req, &h, err);
    if (r < 0 || !h) {
        /* No handle (out of memory or fds): the one line says why. */
        if (sfd >= 0)
            (void)close(sfd);
        snprintf(res->error, sizeof(res->error), "%s", err->msg);
        return r < 0 ? r : -EINVAL;
    }
    while (aj_sandbox_process(h) == 0) {
        struct pollfd p[2] = {{.fd = aj_sandbox_fd(h), .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            if (sigisemptyset(got))
                (void)aj_sandbox_kill(h, (int)si.ssi_signo);
            (void)sigaddset(got, (int)si.ssi_signo);
        }
    }
    r = aj_sandbox_wait(h, err); /* ended: returns at once */
    *res = *aj_sandbox_result(h);
    aj_sandbox_free(h);
    /* One that came as the run ended is ours too. */
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        (void)sigaddset(got, (int)si.ssi_signo);
    (void)close(sfd);
    return r;
}

int aj_cmd_run(int argc, char **argv)
{
    struct aj_policy *pol = aj_policy_new();
    struct aj_result res;
    struct aj_error err = {0};
    const char *result_path = NULL, *events_path = NULL;
    sigset_t ending, old_mask, got;
    int opt, r, code, longindex = 0;
    bool last_rw = false; /* the flag before was a --bind-rw: what a --bind-owner applies to */

    if (!pol) {
        fprintf(stderr, "agentjail: out of memory\n");
        return AJ_EXIT_SETUP;
    }
    /* --profile, then --policy, then every other flag on top: the order
     * on the command line does not matter. */
    if (aj_cli_load_base(argc, argv, run_options, OPT_PROFILE, OPT_POLICY, pol, &err) < 0)
        goto usage_error;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", run_options, &longindex)) != -1) {
        r = 0;
        switch (opt) {
        case OPT_BIND_RO:
        case OPT_BIND_RW:
            r = aj_policy_add_bind(pol, optarg, opt == OPT_BIND_RW, &err);
            last_rw = r == 0 && opt == OPT_BIND_RW;
            break;
        case OPT_BIND_OWNER:
            if (!last_rw)
                r = aj_err(&err, 0, "--bind-owner %s: it sets the owner of the --bind-rw just before it (e.g. "
                           "--bind-rw /srv/ws:/ws --bind-owner 1000:1000), and there is none", optarg);
            else
                r = aj_policy_set_bind_owner(pol, optarg, &err);
            break;
        case OPT_TMPFS:
        case OPT_TMP_SIZE:
        case OPT_WORKDIR:
        case OPT_ENV:
        case OPT_ENV_PASS:
        case OPT_HOSTNAME:
        case OPT_TIMEOUT:
        case OPT_NETWORK:
        case OPT_UID:
        case OPT_GID:
        case OPT_UID_RANGE:
        case OPT_ALLOW_DEGRADED:
        case OPT_ALLOW_NO_LANDLOCK:
        case OPT_NOEXEC_TMP:
        case OPT_ALLOW_PTRACE:
        case OPT_ALLOW_UNSCOPED_SIGNALS:
        case OPT_ALLOW_NO_DECOYS:
        case OPT_ALLOW_BIND_INSIDE_WRITABLE:
        case OPT_MEMORY:
        case OPT_PIDS:
        case OPT_CPUS:
        case OPT_CPU_TIME:
        case OPT_OUTPUT_LIMIT:
        case OPT_FILE_SIZE:
        case OPT_OPEN_FILES:
        case OPT_ON_ESCAPE:
        case OPT_ALERT_CMD:
        case OPT_ALERT_TIMEOUT:
        case OPT_EVENT_BUDGET:
        case OPT_NO_DECOYS:
        case OPT_DECOY_CLOUD:
        case OPT_NET_KEY:
        case OPT_INTERPRETER:
        case OPT_PRELOAD:
        case OPT_WARMUP:
            r = set_policy_flag(pol, run_options[longindex].name, optarg, &err);
            break;
        case OPT_RESULT:
            result_path = optarg;
            break;
        case OPT_POLICY:
        case OPT_PROFILE:
            break; /* loaded first, above */
        case OPT_EVENTS:
            events_path = optarg;
            break;
        case OPT_HELP:
        case 'h':
            run_usage(stdout);
            aj_policy_free(pol);
            return 0;
        case ':':
            aj_err(&err, 0, "%s needs an argument", argv[optind - 1]);
            r = -EINVAL;
            break;
        default:
            if (flag_needs_argument(argv[optind - 1]))
                aj_err(&err, 0, "%s needs an argument", argv[optind - 1]);
            else
                aj_err(&err, 0, "unknown flag '%s' (see agentjail run --help)", argv[optind - 1]);
            r = -EINVAL;
            break;
        }
        if (r < 0)
            goto usage_error;
    }
    if (optind >= argc) {
        aj_err(&err, 0, "no command given: agentjail run [FLAGS] -- CMD [ARGS...]");
        goto usage_error;
    }
    r = aj_policy_validate(pol, &err);
    if (r < 0)
        goto usage_error;
    /* Before anything starts: the result is written as root after the run. */
    if (result_path && strcmp(result_path, "-") != 0 && aj_result_check_path(pol, result_path, &err) < 0)
        goto usage_error;

    /* The library takes no signal: a SIGINT, SIGTERM, SIGHUP or SIGQUIT is
     * ours to catch. Blocked from before the sandbox exists (a ^C during
     * setup must not orphan it) and read from a signalfd: the first one
     * ends the run (aj_sandbox_kill: the result says signaled, that
     * signal); each is raised again after the result is written, and we
     * die of it as a shell expects. */
    sigemptyset(&ending);
    sigaddset(&ending, SIGINT);
    sigaddset(&ending, SIGTERM);
    sigaddset(&ending, SIGHUP);
    sigaddset(&ending, SIGQUIT);
    (void)sigprocmask(SIG_BLOCK, &ending, &old_mask);
    sigemptyset(&got);
    {
        /* The CLI's own 0, 1 and 2, named: the library never hands them
         * over by default. */
        struct aj_request req = AJ_REQUEST_INIT;
        char **iargv = NULL;
        req.argv = argv + optind;
        if (aj_policy_interpreter(pol)) {
            r = interp_argv(argv + optind, &iargv, &err);
            if (r < 0) {
                (void)sigprocmask(SIG_SETMASK, &old_mask, NULL);
                goto usage_error;
            }
            req.argv = iargv;
        }
        req.events_path = events_path;
        for (int i = 0; i < 3; i++)
            req.stdio[i] = AJ_STDIO_OF_FD(i);
        r = run_until_end(pol, &req, &ending, &got, &res, &err);
        free_interp_argv(iargv);
    }
    if (res.degraded)
        print_degraded_warning(&res);
    if (res.unsafe_skipped[0])
        fprintf(stderr, "agentjail: WARNING: the %s layer was LEFT OUT on purpose (AGENTJAIL_UNSAFE_SKIP_LAYER); "
                        "this sandbox is weaker than its policy\n", res.unsafe_skipped);
    if (r < 0)
        fprintf(stderr, "agentjail: %s\n", err.msg);
    if (result_path) {
        struct aj_error werr = {0};
        if (strcmp(result_path, "-") == 0) {
            /* stdout, after everything the payload wrote to it */
            char *json = aj_result_to_json(&res);
            if (!json || printf("%s\n", json) < 0 || fflush(stdout) != 0) {
                fprintf(stderr, "agentjail: write the result to stdout: %s\n", strerror(errno ? errno : ENOMEM));
                free(json);
                aj_policy_free(pol);
                return AJ_EXIT_SETUP;
            }
            free(json);
        } else if (aj_result_write_file(&res, result_path, &werr) < 0) {
            fprintf(stderr, "agentjail: %s\n", werr.msg);
            aj_policy_free(pol);
            return AJ_EXIT_SETUP;
        }
    }
    aj_policy_free(pol);
    (void)fflush(NULL);
    /* Delivered now if one came (default action: we die of it); ignored
     * ones (nohup) are discarded and the exit status says 128+N. */
    for (int s = 1; s < NSIG; s++)
        if (sigismember(&got, s) == 1)
            (void)kill(getpid(), s);
    (void)sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (r < 0)
        return res.exit_code ? res.exit_code : AJ_EXIT_SETUP;
    code = res.exit_code;
    return code;

usage_error:
    fprintf(stderr, "agentjail: %s\n", err.msg);
    aj_policy_free(pol);
    return AJ_EXIT_USAGE;
}
