/* SPDX-License-Identifier: Apache-2.0 */
/* The files of a session's workspace over the API: PUT (streamed into an
 * O_TMPFILE, then linked or renamed into place: workspace.c), GET (a file streamed from its fd,
 * a directory's listing), DELETE. The workspace operations, and how
 * every path is confined to the workspace, are workspace.c's. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "srv_session.h"

/* ---- files --------------------------------------------------------------------------------- */

bool srv_is_files_path(const char *url)
{
    return strncmp(url, "/v1/sessions/", 13) == 0 && strlen(url) >= 13 + 32 + 6 &&
           strncmp(url + 13 + 32, "/files", 6) == 0 && (url[13 + 32 + 6] == '/' || !url[13 + 32 + 6]);
}

/* The session and the workspace path of a files URL. */
static int files_target(struct srv_ctx *ctx, struct srv_tenant *t, const char *url, bool allow_root,
                        struct srv_session **ret, const char **ret_path, struct srv_reply *reply)
{
    char id[33], msg[400];
    const char *rest = url + 13 + 32 + 6;
    int rc;

    memcpy(id, url + 13, 32);
    id[32] = '\0';
    if (ctx->sessions->off) {
        srv_reply_error(reply, 501, "%s", ctx->sessions->off);
        return -1;
    }
    rc = srv_session_find(ctx->sessions, t, id, ret);
    if (rc < 0) {
        srv_find_fail(rc, id, reply);
        return -1;
    }
    rc = srv_ws_path(*rest == '/' ? rest + 1 : rest, allow_root, ret_path, msg, sizeof(msg));
    if (rc < 0) {
        srv_reply_error(reply, (unsigned)-rc, "%s", msg);
        srv_session_unref(ctx->sessions, *ret);
        *ret = NULL;
        return -1;
    }
    return 0;
}

struct srv_upload {
    struct srv_sessions *ss;
    struct srv_session *s;
    struct srv_ws_file f;
    char *path;
    bool ended;
};

int srv_upload_begin(struct srv_ctx *ctx, struct srv_tenant *t, const char *url, struct srv_upload **ret,
                     struct srv_reply *reply)
{
    struct srv_upload *up = calloc(1, sizeof(*up));
    const char *p;

    *ret = NULL;
    if (!up) {
        srv_reply_error(reply, 500, "out of memory");
        return -1;
    }
    up->ss = ctx->sessions;
    up->f.fd = up->f.dirfd = -1;
    if (files_target(ctx, t, url, false, &up->s, &p, reply) < 0) {
        free(up);
        return -1;
    }
    up->path = strdup(p);
    srv_session_begin(up->ss, up->s);
    if (!up->path || srv_ws_put_begin(up->s->ws, p, ctx->cfg.max_file_bytes, &up->f) < 0) {
        srv_reply_error(reply, up->path ? (unsigned)-up->f.err : 500, "%s", up->path ? up->f.msg : "out of memory");
        srv_upload_free(up);
        return -1;
    }
    *ret = up;
    return 0;
}

void srv_upload_write(struct srv_upload *up, const char *data, size_t len)
{
    srv_ws_put_write(&up->f, data, len);
}

void srv_upload_end(struct srv_upload *up, struct srv_reply *reply)
{
    int rc;
    bool closed;

    (void)pthread_mutex_lock(&up->ss->lock);
    closed = up->s->closed;
    (void)pthread_mutex_unlock(&up->ss->lock);
    /* A session that ended meanwhile: its tmpfs is detached, what would
     * be written there is gone with it. */
    rc = closed ? -410 : srv_ws_put_commit(up->s->ws, &up->f);
    if (closed) {
        srv_reply_error(reply, 410, "the session ended during the upload");
    } else if (rc < 0) {
        srv_reply_error(reply, (unsigned)-rc, "%s", up->f.msg);
    } else {
        json_t *o = json_pack("{s:o, s:I}", "path", srv_text_json(up->path, strlen(up->path)), "bytes",
                              (json_int_t)up->f.bytes);
        srv_reply_json(reply, 201, o ? json_dumps(o, JSON_COMPACT) : NULL);
        json_decref(o);
    }
    srv_ws_put_abort(&up->f);
    up->ended = true;
    srv_session_end(up->ss, up->s);
}

void srv_upload_free(struct srv_upload *up)
{
    if (!up)
        return;
    srv_ws_put_abort(&up->f); /* the unnamed file goes with its fd */
    if (!up->ended)
        srv_session_end(up->ss, up->s);
    srv_session_unref(up->ss, up->s);
    free(up->path);
    free(up);
}

int srv_files_open_get(struct srv_ctx *ctx, struct srv_tenant *t, const char *url, int *ret_fd, uint64_t *ret_size,
                       struct srv_reply *reply)
{
    struct srv_session *s;
    const char *p;
    char msg[400], *listing = NULL;
    int rc;

    if (files_target(ctx, t, url, true, &s, &p, reply) < 0)
        return 0;
    srv_session_begin(ctx->sessions, s);
    rc = srv_ws_get(s->ws, p, ret_fd, ret_size, &listing, msg, sizeof(msg));
    srv_session_end(ctx->sessions, s);
    srv_session_unref(ctx->sessions, s);
    if (rc < 0) {
        srv_reply_error(reply, (unsigned)-rc, "%s", msg);
        return 0;
    }
    if (rc == 0) {
        srv_reply_json(reply, 200, listing);
        return 0;
    }
    if (*ret_size > ctx->cfg.max_file_bytes) {
        (void)close(*ret_fd);
        *ret_fd = -1;
        srv_reply_error(reply, 413, "%s: %llu bytes, more than max_file_bytes (%llu)", p,
                        (unsigned long long)*ret_size, (unsigned long long)ctx->cfg.max_file_bytes);
        return 0;
    }
    return 1;
}

/* The files routes with the body in memory (srv_api_call: MCP). */
void srv_files_call(struct srv_ctx *ctx, struct srv_tenant *t, const char *method, const char *url,
                       const char *body, size_t body_len, struct srv_reply *reply)
{
    if (strcmp(method, "PUT") == 0) {
        struct srv_upload *up;
        if (srv_upload_begin(ctx, t, url, &up, reply) < 0)
            return;
        srv_upload_write(up, body ? body : "", body ? body_len : 0);
        srv_upload_end(up, reply);
        srv_upload_free(up);
    } else if (strcmp(method, "GET") == 0) {
        int fd = -1;
        uint64_t size = 0, got = 0;
        if (!srv_files_open_get(ctx, t, url, &fd, &size, reply))
            return;
        char *buf = malloc(size + 1);
        while (buf && got < size) {
            ssize_t n = read(fd, buf + got, size - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (uint64_t)n;
        }
        (void)close(fd);
        free(reply->body);
        *reply = (struct srv_reply){.status = buf ? 200 : 500, .body = buf, .len = got,
                                    .content_type = "application/octet-stream"};
    } else if (strcmp(method, "DELETE") == 0) {
        struct srv_session *s;
        const char *p;
        char msg[400];
        int rc;
        if (files_target(ctx, t, url, false, &s, &p, reply) < 0)
            return;
        srv_session_begin(ctx->sessions, s);
        rc = srv_ws_delete(s->ws, p, msg, sizeof(msg));
        srv_session_end(ctx->sessions, s);
        if (rc < 0) {
            srv_reply_error(reply, (unsigned)-rc, "%s", msg);
        } else {
            json_t *o = json_pack("{s:o, s:b}", "path", srv_text_json(p, strlen(p)), "deleted", 1);
            srv_reply_json(reply, 200, o ? json_dumps(o, JSON_COMPACT) : NULL);
            json_decref(o);
        }
        srv_session_unref(ctx->sessions, s);
    } else {
        srv_reply_error(reply, 405, "%s %s: only PUT, GET and DELETE", method, url);
    }
}

