/* input — reads a backlog file line by line and turns each line into a request or a bad-line record.
 *
 * Formats (auto-detected from the first non-blank lines, or forced):
 *   openai  OpenAI Batch API JSONL: {"custom_id", "method": "POST", "url": "/v1/chat/completions" |
 *           "/v1/completions", "body": {"messages" | "prompt", generation fields..., "model"}}; or "url":
 *           "/v1/embeddings", "body": {"input", "model", "encoding_format", "dimensions", "user"}
 *           (jobs/embedding)
 *   jsonl   {"id", "prompt" | "messages", generation fields..., "model"}
 *   text    one prompt per line; the id is the line number ("17").
 * Blank (whitespace-only) lines are skipped in every format and are not requests.
 *
 * Lines are read with a bounded reader: a line over max_line_bytes is never held in memory (the rest of
 * it is skipped up to the newline) and becomes a bad line. Every other problem with a line — not JSON,
 * invalid UTF-8, a missing or duplicate id, a wrong type, a NaN/inf or out-of-range value, a missing prompt —
 * also becomes a bad line with a code and a message; reading continues. A line that is JSON but for an
 * out-of-range number (1e400, a seed of 2^64) or a NaN / Infinity token, or whose strings hold a NUL byte
 * (a \u0000 escape), keeps its id in the bad line. Checks that need the model (prompt length against the
 * context, token ids against the vocabulary) are the caller's.
 *
 * Every line has its byte offset (input_item.off): input_reread reads it again from there and parses it the
 * same way, so a caller need not keep what a line holds (jobs/ingest keeps offsets, not text).
 *
 * Memory: one line buffer of max_line_bytes (two more once input_reread is used), plus the set of ids seen
 * so far (for duplicates; O(ids)) unless the caller keeps it (input_opts.id_seen).
 */
#ifndef NS_JOBS_INPUT_H
#define NS_JOBS_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/genparam.h"
#include "util/err.h"

/* A format's name is input_format_name's (the one list of names, in input.c); flags and settings parse it with
 * input_format_parse. INPUT_FORMAT_COUNT is not a format. */
enum input_format { INPUT_FORMAT_AUTO, INPUT_FORMAT_OPENAI, INPUT_FORMAT_JSONL, INPUT_FORMAT_TEXT, INPUT_FORMAT_COUNT };
enum input_kind { INPUT_KIND_COMPLETION, INPUT_KIND_CHAT, INPUT_KIND_EMBEDDING };

struct input_embed; /* jobs/embedding.h */

#define INPUT_MAX_ID_BYTES 1024

struct input_msg {
    char *role;    /* "system", "user", "assistant" ("developer" is read as "system") */
    char *content; /* text parts joined with "\n" */
};

struct input_item {
    int64_t line;         /* 1-based line number in the file */
    int64_t off;          /* byte offset of the line in the file (input_reread reads it again from there) */
    char *custom_id;      /* NULL only for a bad line without a readable id */
    /* bad line: code is non-NULL ("invalid_json", "invalid_utf8", "line_too_long", "missing_id",
     * "duplicate_id", "invalid_type", "invalid_value", "missing_prompt", "unsupported_request",
     * "unsupported_parameter" (a field nightshift does not implement: runtime/genparam's genparam_other_field),
     * "unknown_field"; a message about one field names it first in single quotes, or as "unknown field 'x'") */
    const char *code;
    char *message;
    /* request (code == NULL) */
    enum input_kind kind;
    char *prompt;         /* completion text (NUL-terminated; prompt_len bytes) or NULL */
    size_t prompt_len;
    int32_t *prompt_ids;  /* completion given as token ids (not yet checked against a vocab) or NULL */
    int32_t n_prompt_ids;
    struct input_msg *msgs; /* (n_msgs) chat */
    size_t n_msgs;
    char *model;          /* the line's "model" (recorded only) or NULL */
    struct gen_params gen; /* defaults with the line's fields applied (runtime/genparam); an embeddings
                              line: the defaults, but n = its inputs */
    struct input_embed *embed; /* kind EMBEDDING: its inputs and output options, else NULL */
};

void input_item_free(struct input_item *it);

struct input_opts {
    enum input_format format; /* AUTO to detect */
    size_t max_line_bytes;    /* default 1 MiB */
    struct gen_params defaults; /* borrowed; copied into each item */
    /* Duplicate ids (openai and jsonl; a text line's id is its number, unique by construction). NULL
     * (default): the reader keeps every id in a set of its own (O(ids) memory). Else called for every id
     * read: returns 1 with *first_line when an earlier line (a smaller number) has the same id, 0 when none
     * has (the id is then this line's), -1 when it cannot tell (out of memory). */
    int (*id_seen)(void *user, const char *id, int64_t line, int64_t *first_line);
    void *id_user;
    int quiet;                /* 1: no warnings (unknown fields): a pass before the one that reports */
};

struct input_opts input_default_opts(void);

typedef struct input_reader input_reader;

/* Opens the backlog and, for AUTO, detects its format from the first 32 non-blank lines (a majority that
 * start with '{' means JSON, a line over max_line_bytes included; JSON with "custom_id" or "body" means
 * openai). A file that is not UTF-8 text is refused, in any format, when its first block is read: a UTF-16
 * byte order mark, a NUL byte, or more than 1/8 of the first 64 KiB invalid UTF-8 or control bytes (a
 * binary file would otherwise become thousands of bad lines and random-byte prompts). */
int input_open(const char *path, const struct input_opts *o, input_reader **out, struct err *e);
void input_close(input_reader *r);
enum input_format input_get_format(const input_reader *r);
const char *input_format_name(enum input_format f);
int input_format_parse(const char *name, enum input_format *out); /* -1 if unknown */
/* "auto, openai, jsonl or text": the names, for messages and --help. Truncated to cap. */
void input_format_list(char *buf, size_t cap);

/* Reads the next non-blank line into *it (request or bad line). Returns 1, 0 at end of file, -1 on an I/O
 * error. *it is overwritten; the caller frees it with input_item_free. */
int input_next(input_reader *r, struct input_item *it, struct err *e);

/* Reads the line numbered `line` at byte off again (an item's line and off) and parses it as input_next
 * did: the same request or bad line, as long as the file has not changed (ids go through the same duplicate
 * check, so id_seen must answer "not a duplicate" for the line's own id). Blank now: an error. Does not
 * disturb input_next. O(line). */
int input_reread(input_reader *r, int64_t off, int64_t line, struct input_item *it, struct err *e);
/* The id of the line at off as input_reread reads it (*id malloc'd, NULL for none), without the duplicate
 * check: for an id_seen callback comparing with an earlier line. */
int input_reread_id(input_reader *r, int64_t off, int64_t line, char **id, struct err *e);

/* One request body from elsewhere than a backlog (a server's POST body): bytes that must be one JSON object
 * with "prompt" or "messages", "model" and generation fields, read with the rules and messages of a
 * backlog line (invalid UTF-8, not JSON, NaN, duplicate keys, wrong types, ranges through runtime/genparam),
 * starting from defaults. want: the kind the endpoint takes (the other is a bad request; EMBEDDING: the body
 * is read as a backlog line's /v1/embeddings body, jobs/embedding, and skip is not used). skip: field names
 * the caller reads from *root itself (NULL-terminated; may be NULL); any other field that is not a request
 * field makes the request bad (code "unknown_field", as in a backlog). Fills *it
 * (line 0, no id) as a request or as a bad request (it->code, it->message); *root = the parsed object (a
 * new reference) or NULL when the bytes are not one. Returns -1 only when out of memory. */
int input_parse_body(const char *bytes, size_t len, const struct gen_params *defaults, enum input_kind want,
                     const char *const *skip, struct input_item *it, json_t **root, struct err *e);

/* After the last input_next: physical lines read, blank lines skipped, bytes, and the sha256 of the whole
 * file (valid once input_next has returned 0). */
int64_t input_n_lines(const input_reader *r);
int64_t input_n_blank(const input_reader *r);
uint64_t input_n_bytes(const input_reader *r);
void input_file_sha256(const input_reader *r, uint8_t out[32]);
/* Unknown field names warned about so far (each once; their lines are bad): count. */
int input_n_unknown_fields(const input_reader *r);

#endif
