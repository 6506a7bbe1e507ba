/* files — the server's file store for the OpenAI Files API (POST /v1/files, GET /v1/files/{id},
 * GET /v1/files/{id}/content): uploaded batch inputs and the batches' output and error files.
 *
 * One directory (the server's data directory's files/). A file with id ID (FILES_ID_PREFIX and 24 lower-case
 * hex digits, drawn from the system's random source) is two entries: ID.jsonl, its bytes, and ID.json, its
 * OpenAI file object (id, object "file", bytes, created_at, filename, purpose, status "processed"), written
 * after the bytes and renamed into place, so a file whose object exists is whole. Every name on disk is made
 * here: a request's file id reaches a path only after files_valid_id, and a client's file name is kept in
 * the object only. An upload streams into a temporary "upload-<random>.part" (removed when the upload fails,
 * and at open: left by a crash), at most max_bytes; the number of files is capped at max_files.
 *
 * Thread-safe: the count is kept under a lock; everything else is a file system operation on names no two
 * callers share.
 */
#ifndef NS_SERVER_FILES_H
#define NS_SERVER_FILES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/err.h"

#define FILES_ID_PREFIX "file-"
#define FILES_ID_LEN 29 /* "file-" + 24 hex digits */

struct files_params {
    const char *dir;    /* created if missing (its parent must exist) */
    uint64_t max_bytes; /* an upload's size at most */
    int32_t max_files;  /* files kept at most (uploads and batch results) */
};

typedef struct files files;

/* Opens (creating) the directory, counts its files and removes partial uploads. */
int files_open(const struct files_params *p, files **out, struct err *e);
void files_close(files *f);

/* 1 when id has the shape of a file id (so it is safe in a path). */
int files_valid_id(const char *id);

typedef struct files_upload files_upload;

/* A new upload (max_files is checked when it finishes): 0, or -1 (e). */
int files_upload_begin(files *f, files_upload **out, struct err *e);
/* Appends n bytes: 0; 1 once the upload passed max_bytes (later bytes are dropped); -1 on an I/O error. */
int files_upload_write(files_upload *u, const void *p, size_t n, struct err *e);
uint64_t files_upload_bytes(const files_upload *u);
/* Makes the upload a file: *obj = its file object (a new reference). 1 when max_files was reached meanwhile.
 * The upload is freed either way. */
int files_upload_finish(files *f, files_upload *u, const char *purpose, const char *filename, json_t **obj,
                        struct err *e);
/* Drops an upload (its temporary file too). NULL is fine. */
void files_upload_abort(files_upload *u);

/* File id's object: 0 with *obj (a new reference), 1 when there is no such file (or id is not one). */
int files_get(files *f, const char *id, json_t **obj);
/* Opens the file's bytes for reading: 0 with *fd and *size, 1 when there is no such file. */
int files_open_content(files *f, const char *id, int *fd, uint64_t *size);
/* The path of a valid id's bytes (for a batch's backlog): 0, or 1 when id is not a file id. */
int files_content_path(const files *f, const char *id, char *buf, size_t cap);
/* Makes the file at path (inside the data directory: a batch's output) a file of the store, by a hard link:
 * 0 with *obj, 1 when max_files is reached, -1 (e). */
int files_adopt(files *f, const char *path, const char *purpose, const char *filename, json_t **obj,
                struct err *e);
int32_t files_count(files *f);

#endif
