/* embedding — the jobs side of embeddings: an OpenAI /v1/embeddings request body read into its inputs, an
 * embedding stored as a result's text, and the embeddings list a result line carries.
 *
 * Request (a backlog line with "url": "/v1/embeddings"): body {"input": a string | [string, ...] | [token id,
 * ...] | [[token id, ...], ...], "model", "encoding_format": "float" (default) | "base64", "dimensions": N,
 * "user"}. Each input is one unit of work (a line of k inputs needs k works, like k completions), at most
 * EMBEDDING_MAX_INPUTS a line. "user" is accepted and not used (as OpenAI's own use of it, abuse
 * monitoring, does not apply here); any other field makes the line bad, as for completions.
 *
 * dimensions: none of the supported models carries Matryoshka metadata, so nightshift does what OpenAI's
 * text-embedding-3 models do with it: the first N values of the model's embedding, L2-normalised again.
 * N must be in [1, n_embd] (jobs/ingest checks the upper bound against the model); a larger N is a 400
 * naming 'dimensions'.
 *
 * Stored form (a result's text): the full, normalised embedding as base64 of n_embd little-endian float32,
 * so a result serves any dimensions and either encoding, and is exact. Response body:
 *   {"object":"list","data":[{"object":"embedding","index":i,"embedding":[floats] | "base64 of LE float32"},
 *    ...],"model":..., "usage":{"prompt_tokens":N,"total_tokens":N}}
 * Floats are printed with 9 significant digits (they read back as the same float32).
 */
#ifndef NS_JOBS_EMBEDDING_H
#define NS_JOBS_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "jobs/output.h"
#include "runtime/genparam.h"
#include "util/err.h"

#define EMBEDDING_MAX_INPUTS GENPARAM_MAX_N /* inputs per line: a line's works are counted in a byte */

/* One embeddings request's inputs and output options. */
struct input_embed {
    int32_t n;          /* inputs, 1 .. EMBEDDING_MAX_INPUTS */
    char **text;        /* (n) input i's text (NUL-terminated, len[i] bytes), or NULL when it is token ids */
    size_t *len;        /* (n) */
    int32_t **ids;      /* (n) input i as token ids (n_ids[i] >= 1, not yet checked against a vocab), or NULL */
    int32_t *n_ids;     /* (n) */
    int32_t dimensions; /* 0: all of the model's; else the first N, normalised again */
    int base64;         /* 1: encoding_format "base64"; 0: "float" */
};

/* Reads body (an object). 0 with *out (free with embedding_input_free) and *model (the body's "model", a
 * malloc'd copy, or NULL); 1 for a bad request with *code (one of jobs/ledger's codes) and msg (cap bytes;
 * a message about one field names it first, in single quotes); -1 when out of memory. */
int embedding_parse_body(const json_t *body, struct input_embed **out, char **model, const char **code, char *msg,
                         size_t cap);
void embedding_input_free(struct input_embed *in);

/* An embedding as stored (see above): malloc'd, NUL-terminated text of *len bytes; NULL when out of memory. */
char *embedding_to_text(const float *v, int32_t n, size_t *len);
/* The values of a stored embedding: *v malloc'd (*n values). -1 when text is not one, or out of memory. */
int embedding_from_text(const char *text, size_t len, float **v, int32_t *n);
/* An engine result of an embedding request made storable: its embedding becomes its text (embedding_to_text)
 * and is freed. No-op for a completion's result. -1 when out of memory. */
int embedding_result_to_text(struct engine_result *r);

/* What the body of a result line of embeddings is built from. */
struct embedding_out {
    const char *const *texts; /* (n) stored embeddings, in input order */
    const size_t *lens;       /* (n) */
    int32_t n;
    int32_t dimensions;       /* 0: all */
    int base64;
    const char *model;
    int64_t prompt_tokens;    /* over all inputs */
};
/* Appends the embeddings list (above) to b. Fails when a stored text is not an embedding, or dimensions is
 * more than it holds. */
int embedding_body(struct output_buf *b, const struct embedding_out *o, struct err *e);

#endif
