/* input_int — what input.c (the reader: lines, formats, ids) and input_body.c (one request object into an
 * input_item) share. Private to them. */
#ifndef NS_JOBS_INPUT_INT_H
#define NS_JOBS_INPUT_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "jobs/input.h"
#include "util/err.h"

/* Why a line or a body is bad: its error code ("invalid_json", "duplicate_id", ...) and message. */
struct input_bad {
    const char *code;
    char msg[512];
};

/* Sets b's code and message (printf-style); returns -1. */
int input_set_bad(struct input_bad *b, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Reads the generation fields and the prompt/messages of obj (the body or the whole simple line).
 * skip: names handled by the caller. A field nightshift does not implement (genparam_other_field) or does
 * not know makes the request bad, never ignored; an unknown one is also warned about once (r). */
int input_parse_fields(input_reader *r, const json_t *obj, const char *prefix, const char *const *skip,
                       struct input_item *it, struct input_bad *b);

/* 1 if jansson refused the bytes for a number alone: an integer or a real too big for it ("too big integer",
 * "real number overflow"), or a NaN / Infinity token. */
int input_is_number_error(const char *bytes, size_t len, const json_error_t *jerr);

/* Parses bytes that must hold one JSON object (what: "a line", "the body") into *root (NULL on failure).
 * A string holding a NUL byte is parsed (so that the rest of the object, a line's id, can still be read)
 * and then refused by naming it; *jerr is jansson's error when the bytes are not JSON (text "" else). */
int input_load_object(const char *bytes, size_t len, const char *what, json_t **root, json_error_t *jerr,
                      struct input_bad *b);

/* Refuses an object with a NUL byte in any string (after its id was read: the bad line keeps it). */
int input_refuse_nul(const json_t *root, struct input_bad *b);

/* An embeddings body (jobs/embedding) into *it: one work per input (gen.n counts them). -1: bad. */
int input_read_embedding(const json_t *body, struct input_item *it, struct input_bad *b);

/* A body read for /v1/chat/completions (chat) or /v1/completions that holds the other endpoint's prompt: -1
 * (bad), the same message for a backlog line and a server's body. */
int input_endpoint_mismatch(const struct input_item *it, int chat, struct input_bad *b);

/* Turns *it into a bad line: frees everything but its line number, id and model, and sets b's code and
 * message. */
int input_to_bad_item(struct input_item *it, const struct input_bad *b, struct err *e);

/* input.c: warns about an unknown field (prefix + name, first seen on line) once per name, unless the reader
 * is quiet; at most 256 names. */
void input_warn_unknown(input_reader *r, const char *prefix, const char *name, int64_t line);

#endif
