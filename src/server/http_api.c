/* http_api — see http_api.h. */
#include "server/http_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"

#define HTTP_API_POST_BUFFER 65536 /* libmicrohttpd's post processor buffer */
#define HTTP_API_FIELD_MAX 256     /* "purpose" and the file name, at most */

struct http_api_upload {
    struct MHD_PostProcessor *pp;
    files *f;
    files_upload *up;
    char purpose[HTTP_API_FIELD_MAX];
    char filename[HTTP_API_FIELD_MAX];
    int n_file_parts; /* "file" fields with bytes seen (a second one is an error) */
    int seen_file;
    int too_big, failed, bad_field;
    struct err e;
};

/* The id after prefix in url, up to the next '/' or the end, into buf; *rest = what follows. 0 when there
 * is none (or it is too long). */
static int path_id(const char *url, const char *prefix, char *buf, size_t cap, const char **rest)
{
    size_t np = strlen(prefix);
    if (strncmp(url, prefix, np)) return 0;
    const char *id = url + np, *slash = strchr(id, '/');
    size_t n = slash ? (size_t)(slash - id) : strlen(id);
    if (n == 0 || n >= cap) return 0;
    memcpy(buf, id, n);
    buf[n] = '\0';
    *rest = id + n;
    return 1;
}

enum http_api_route http_api_route(const char *url, const char **allow)
{
    char id[64];
    const char *rest;
    if (!strcmp(url, "/v1/files")) return *allow = "POST", HTTP_API_FILES;
    if (!strcmp(url, "/v1/batches")) return *allow = "GET, POST", HTTP_API_BATCHES;
    if (path_id(url, "/v1/files/", id, sizeof id, &rest)) {
        if (!*rest) return *allow = "GET", HTTP_API_FILE;
        if (!strcmp(rest, "/content")) return *allow = "GET", HTTP_API_FILE_CONTENT;
    }
    if (path_id(url, "/v1/batches/", id, sizeof id, &rest)) {
        if (!*rest) return *allow = "GET", HTTP_API_BATCH;
        if (!strcmp(rest, "/cancel")) return *allow = "POST", HTTP_API_BATCH_CANCEL;
    }
    return HTTP_API_NONE;
}

int http_api_method_ok(const char *allow, const char *method)
{
    int get = strstr(allow, "GET") != NULL, post = strstr(allow, "POST") != NULL;
    return ((!strcmp(method, "GET") || !strcmp(method, "HEAD")) && get) || (!strcmp(method, "POST") && post);
}

/* ---- replies ---- */

static void reply_json(struct http_api_reply *out, int status, json_t *obj)
{
    out->fd = -1;
    out->status = status;
    out->body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    out->len = out->body ? strlen(out->body) : 0;
    out->ctype = "application/json";
    if (!out->body) out->status = 500;
    json_decref(obj);
}

static void reply_error(struct http_api_reply *out, const struct openai_error *err)
{
    out->fd = -1;
    out->status = err->status;
    out->body = openai_error_body(err, &out->len);
    out->ctype = "application/json";
}

static void reply_fail(struct http_api_reply *out, int status, const char *type, const char *code, const char *msg)
{
    struct openai_error err;
    openai_set_error(&err, status, type, code, "%s", msg);
    reply_error(out, &err);
}

/* ---- uploads ---- */

/* libmicrohttpd's post processor calls this for every piece of every field. */
static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                const char *content_type, const char *transfer_encoding, const char *data,
                                uint64_t off, size_t size)
{
    http_api_upload *u = cls;
    (void)kind, (void)content_type, (void)transfer_encoding;
    if (!strcmp(key, "purpose")) {
        if (off + size >= sizeof u->purpose) return u->bad_field = 1, MHD_YES;
        memcpy(u->purpose + off, data, size);
        u->purpose[off + size] = '\0';
        return MHD_YES;
    }
    if (strcmp(key, "file")) return u->bad_field = 1, MHD_YES; /* unknown fields are refused at the end */
    u->seen_file = 1;
    if (off == 0 && size > 0 && ++u->n_file_parts > 1) return u->bad_field = 1, MHD_YES;
    if (off == 0 && filename) snprintf(u->filename, sizeof u->filename, "%s", filename);
    if (u->too_big || u->failed) return MHD_YES;
    int rc = files_upload_write(u->up, data, size, &u->e);
    if (rc > 0) u->too_big = 1;
    if (rc < 0) u->failed = 1;
    return MHD_YES;
}

int http_api_upload_begin(files *f, struct MHD_Connection *mc, http_api_upload **out, struct http_api_reply *reply)
{
    *out = NULL;
    http_api_upload *u = calloc(1, sizeof *u);
    if (!u) return reply_fail(reply, 500, "server_error", "memory", "out of memory"), 1;
    u->f = f;
    u->pp = MHD_create_post_processor(mc, HTTP_API_POST_BUFFER, on_field, u);
    const char *ct = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!u->pp || !ct || strncmp(ct, "multipart/form-data", 19)) {
        http_api_upload_free(u);
        reply_fail(reply, 400, "invalid_request_error", "invalid_upload",
                   "POST /v1/files takes multipart/form-data with fields 'purpose' and 'file'");
        return 1;
    }
    if (files_upload_begin(f, &u->up, &u->e)) {
        reply_fail(reply, 500, "server_error", "storage", u->e.msg);
        http_api_upload_free(u);
        return 1;
    }
    *out = u;
    return 0;
}

enum MHD_Result http_api_upload_data(http_api_upload *u, const char *data, size_t n)
{
    return MHD_post_process(u->pp, data, n);
}

void http_api_upload_free(http_api_upload *u)
{
    if (!u) return;
    if (u->pp) MHD_destroy_post_processor(u->pp);
    files_upload_abort(u->up);
    free(u);
}

/* The end of a POST /v1/files: the last field is flushed (destroying the post processor), then checked. */
static void finish_upload(files *f, http_api_upload *u, struct http_api_reply *out)
{
    if (!u) return reply_fail(out, 400, "invalid_request_error", "invalid_upload", "no upload");
    enum MHD_Result whole = MHD_destroy_post_processor(u->pp);
    u->pp = NULL;
    char msg[400];
    if (u->failed) return reply_fail(out, 500, "server_error", "storage", u->e.msg);
    if (u->too_big) {
        snprintf(msg, sizeof msg, "the file is over this server's upload limit (--max-upload-bytes)");
        return reply_fail(out, 413, "invalid_request_error", "file_too_large", msg);
    }
    if (whole != MHD_YES || u->bad_field || !u->seen_file || u->n_file_parts > 1)
        return reply_fail(out, 400, "invalid_request_error", "invalid_upload",
                          "expected one 'file' and one 'purpose' field in multipart/form-data, and nothing else");
    if (strcmp(u->purpose, "batch")) {
        snprintf(msg, sizeof msg, "purpose '%.64s': this server takes files of purpose 'batch' only", u->purpose);
        return reply_fail(out, 400, "invalid_request_error", "invalid_purpose", msg);
    }
    json_t *obj;
    int rc = files_upload_finish(f, u->up, u->purpose, u->filename[0] ? u->filename : "upload.jsonl", &obj, &u->e);
    u->up = NULL; /* freed by finish */
    if (rc > 0) return reply_fail(out, 400, "invalid_request_error", "file_limit_reached", "the file store is full");
    if (rc < 0) return reply_fail(out, 500, "server_error", "storage", u->e.msg);
    reply_json(out, 200, obj);
}

/* ---- answers ---- */

static void answer_file(files *f, enum http_api_route r, const char *id, struct http_api_reply *out)
{
    json_t *obj;
    if (r == HTTP_API_FILE) {
        if (files_get(f, id, &obj) == 0) return reply_json(out, 200, obj);
    } else if (files_open_content(f, id, &out->fd, &out->fd_size) == 0) {
        out->status = 200;
        out->ctype = "application/octet-stream";
        return;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "No such File object: %.64s", id);
    reply_fail(out, 404, "invalid_request_error", "not_found", msg);
}

void http_api_answer(files *f, batches *b, enum http_api_route r, const char *url, const char *method,
                     http_api_upload *u, const char *body, size_t len, const char *after, const char *limit,
                     struct http_api_reply *out)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    char id[64];
    const char *rest;
    json_t *obj = NULL;
    struct openai_error err;
    int rc = 0;
    switch (r) {
    case HTTP_API_FILES:
        return finish_upload(f, u, out);
    case HTTP_API_FILE:
    case HTTP_API_FILE_CONTENT:
        path_id(url, "/v1/files/", id, sizeof id, &rest);
        return answer_file(f, r, id, out);
    case HTTP_API_BATCHES:
        rc = !strcmp(method, "POST") ? batches_create(b, body ? body : "", len, &obj, &err)
                                     : batches_list(b, after, limit, &obj, &err);
        break;
    case HTTP_API_BATCH:
    case HTTP_API_BATCH_CANCEL:
        path_id(url, "/v1/batches/", id, sizeof id, &rest);
        rc = r == HTTP_API_BATCH ? batches_get(b, id, &obj, &err) : batches_cancel(b, id, &obj, &err);
        break;
    default:
        return reply_fail(out, 404, "invalid_request_error", "not_found", "unknown path");
    }
    if (rc) return reply_error(out, &err);
    reply_json(out, 200, obj);
}
