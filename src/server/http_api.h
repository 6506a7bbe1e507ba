/* http_api — the HTTP side of the Files and Batches API (server/files, server/batches), for server/http:
 *
 *   POST /v1/files                   multipart/form-data: "purpose" (must be "batch") and "file"; parsed by
 *                                    libmicrohttpd's post processor, the file streamed into the store
 *   GET  /v1/files/{id}              the file object
 *   GET  /v1/files/{id}/content      its bytes
 *   POST /v1/batches                 JSON: input_file_id, endpoint, completion_window, metadata
 *   GET  /v1/batches                 ?after=ID&limit=N
 *   GET  /v1/batches/{id}
 *   POST /v1/batches/{id}/cancel
 *
 * Ids in paths are looked up only after files_valid_id / batches_valid_id: nothing from a request names a
 * file on disk. Answers are OpenAI objects or OpenAI error objects: 404 for an unknown id, 400 for a wrong
 * purpose or a malformed upload, 413 for an upload over the cap, 405 with Allow for a wrong method.
 */
#ifndef NS_SERVER_HTTP_API_H
#define NS_SERVER_HTTP_API_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "server/batches.h"
#include "server/files.h"

enum http_api_route {
    HTTP_API_NONE,
    HTTP_API_FILES,        /* POST /v1/files */
    HTTP_API_FILE,         /* GET /v1/files/{id} */
    HTTP_API_FILE_CONTENT, /* GET /v1/files/{id}/content */
    HTTP_API_BATCHES,      /* POST or GET /v1/batches */
    HTTP_API_BATCH,        /* GET /v1/batches/{id} */
    HTTP_API_BATCH_CANCEL  /* POST /v1/batches/{id}/cancel */
};

/* The route of url (HTTP_API_NONE: not one of these paths) and the methods it takes (*allow: "GET",
 * "POST" or "GET, POST"). */
enum http_api_route http_api_route(const char *url, const char **allow);
/* 1 when method is one that *allow names (HEAD counts as GET). */
int http_api_method_ok(const char *allow, const char *method);

/* An answer: status and a malloc'd body of type ctype, or (fd >= 0) fd_size bytes of an open file. */
struct http_api_reply {
    int status;
    char *body;
    size_t len;
    int fd;
    uint64_t fd_size;
    const char *ctype;
};

typedef struct http_api_upload http_api_upload;

/* A POST /v1/files on connection mc: 0 with *out, or 1 with *reply (400: not multipart/form-data; 500). */
int http_api_upload_begin(files *f, struct MHD_Connection *mc, http_api_upload **out, struct http_api_reply *reply);
/* A piece of the body: MHD_YES, or MHD_NO to close the connection (a broken multipart body, an I/O error). */
enum MHD_Result http_api_upload_data(http_api_upload *u, const char *data, size_t n);
void http_api_upload_free(http_api_upload *u);

/* The answer to a request of route r on url (for POST /v1/files: the upload, finished here; for POST
 * /v1/batches: body; for GET /v1/batches: after and limit, each NULL when absent). */
void http_api_answer(files *f, batches *b, enum http_api_route r, const char *url, const char *method,
                     http_api_upload *u, const char *body, size_t len, const char *after, const char *limit,
                     struct http_api_reply *out);

#endif
