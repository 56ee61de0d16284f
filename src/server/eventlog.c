/* SPDX-License-Identifier: Apache-2.0 */
/* The events log: every run's audit events (start, escape attempts,
 * canaries, limits, network decisions, errors, exit) as JSON Lines for
 * a log shipper, each with the tenant and the run's id added, appended
 * as the runner processes them. A path is opened O_APPEND (each line
 * one write(2), so lines of concurrent writers never interleave) and
 * created 0600 (events hold system call arguments and paths of hostile
 * code); SIGHUP opens it again, for logrotate. "-" is stdout. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "srv.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static char *log_path; /* NULL for stdout */
static uint64_t log_errors;

static int open_sink(const char *path, char *msg, size_t msg_size)
{
    struct stat st;
    int fd;

    if (!path) {
        fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
            (void)snprintf(msg, msg_size, "stdout: %s", strerror(errno));
        return fd;
    }
    /* No link followed at the last component: a planted symlink must
     * not turn the log into a write to another file. */
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
    if (fd < 0) {
        (void)snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        (void)snprintf(msg, msg_size, "%s: not a regular file", path);
        (void)close(fd);
        return -1;
    }
    return fd;
}

int srv_eventlog_open(const char *spec, char *msg, size_t msg_size)
{
    bool is_stdout = strcmp(spec, "-") == 0;
    int fd = open_sink(is_stdout ? NULL : spec, msg, msg_size);

    if (fd < 0)
        return -1;
    (void)pthread_mutex_lock(&log_lock);
    log_fd = fd;
    free(log_path);
    log_path = is_stdout ? NULL : strdup(spec);
    (void)pthread_mutex_unlock(&log_lock);
    if (!is_stdout && !log_path) {
        srv_eventlog_close();
        (void)snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    return 0;
}

void srv_eventlog_reopen(void)
{
    char msg[600];
    int fd;

    (void)pthread_mutex_lock(&log_lock);
    if (log_fd < 0 || !log_path) {
        (void)pthread_mutex_unlock(&log_lock);
        return;
    }
    fd = open_sink(log_path, msg, sizeof(msg));
    if (fd >= 0) {
        (void)close(log_fd);
        log_fd = fd;
    }
    (void)pthread_mutex_unlock(&log_lock);
    if (fd < 0)
        (void)fprintf(stderr, "agentjail serve: events_log: %s; still writing the file open before\n", msg);
    else
        (void)fprintf(stderr, "agentjail serve: events_log reopened\n");
}

void srv_eventlog_write(const char *tenant, const char *run_id, json_t *ev)
{
    json_t *o;
    char *line;
    size_t n;

    if (__atomic_load_n(&log_fd, __ATOMIC_SEQ_CST) < 0 || !json_is_object(ev))
        return;
    o = json_copy(ev);
    if (!o || json_object_set_new(o, "tenant", json_string(tenant)) < 0 ||
        json_object_set_new(o, "run_id", json_string(run_id)) < 0 || !(line = json_dumps(o, JSON_COMPACT))) {
        json_decref(o);
        (void)pthread_mutex_lock(&log_lock);
        log_errors++;
        (void)pthread_mutex_unlock(&log_lock);
        return;
    }
    json_decref(o);
    n = strlen(line);
    line[n] = '\n'; /* json_dumps's NUL becomes the line's end: one write */
    (void)pthread_mutex_lock(&log_lock);
    ssize_t w;
    do {
        w = write(log_fd, line, n + 1);
    } while (w < 0 && errno == EINTR);
    /* Never waited for: a full pipe or disk loses the line (counted), it
     * does not stall the runner thread and with it every run. */
    if (w != (ssize_t)(n + 1))
        log_errors++;
    (void)pthread_mutex_unlock(&log_lock);
    free(line);
}

uint64_t srv_eventlog_errors(void)
{
    uint64_t n;

    (void)pthread_mutex_lock(&log_lock);
    n = log_errors;
    (void)pthread_mutex_unlock(&log_lock);
    return n;
}

bool srv_eventlog_enabled(void)
{
    return __atomic_load_n(&log_fd, __ATOMIC_SEQ_CST) >= 0;
}

void srv_eventlog_close(void)
{
    (void)pthread_mutex_lock(&log_lock);
    if (log_fd >= 0)
        (void)close(log_fd);
    log_fd = -1;
    free(log_path);
    log_path = NULL;
    (void)pthread_mutex_unlock(&log_lock);
}
