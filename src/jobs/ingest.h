/* ingest — the backlog into the ledger: reads and validates every line (jobs/input), renders chat messages
 * with the model's template, tokenizes, checks the prompt against the model (vocabulary, context), computes
 * the key of every completion (jobs/key) and lets the ledger fold equal keys into one work.
 *
 * A problem with one line makes it a bad line (a code and a message; it will go to the error file), never a
 * failed run. The run fails on an I/O error, out of memory, or chat input for a model without a chat
 * template nightshift recognises (reported once, naming the first such line).
 *
 * A line's completions: n (from the line or the defaults), completion i seeded with
 * key_completion_seed(seed, i) where seed is the line's seed or key_id_seed(custom_id); max_tokens is
 * clamped so that prompt + max_tokens fits the model's context. A line the run's engine would refuse at
 * once (engine_check_request: prompt + max_tokens over the whole KV pool, code "request_too_large"; sampling
 * parameters it refuses) is a bad line here, so that a line read as good never fails for good in the
 * engine. Every line gets a digest of what its output bytes are built from (its id, kind, model name and
 * keys; or its id and error: ledger_digest_*), so that a resumed run can tell whether a stored line row still
 * belongs to it.
 *
 * The book keeps no text (jobs/ledger.h, "Memory"): what ingest read is read again from the backlog when it
 * is needed, by the same code, through the source ingest_backlog returns: a work's prompt and parameters
 * when it is submitted (ingest_work_request; its key is computed again and must be the one in the book) and
 * a line's id, model and message when its bytes are built (the ledger's line_info). Duplicate ids are found
 * with a table of (hash of the id, first line) slots; equal hashes are compared by reading the earlier
 * line's id again. A backlog changed in place during the run is detected (a key or a digest that no longer
 * matches) and fails the run instead of writing something else than was read.
 */
#ifndef NS_JOBS_INGEST_H
#define NS_JOBS_INGEST_H

#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "jobs/job.h"
#include "jobs/ledger.h"
#include "util/err.h"

struct ingest_stats {
    int64_t bad_lines;         /* bad input, chat template failures, prompts that do not fit */
    int64_t requests;          /* good lines: each one request, whatever its n */
    int64_t distinct_requests; /* of those, the ones whose first completion no earlier line has (the rest
                                  repeat an earlier line's request) */
    int64_t completions;       /* the requests' completions (n each): unique ones + folded duplicates */
    int64_t folded_duplicates; /* completions whose key another completion already has */
    int interrupted;           /* *c->stop was set: reading stopped early */
    uint64_t defaults_used;    /* bit i: a request line fell back to the default of genparam row i (it did
                                  not set that field; a line bad from the start, before any default applies,
                                  uses none; one found bad later, against the model, counts as using all
                                  it did not set) */
};

/* What the book of a backlog will hold, for the memory budget before the run (runtime_params.reserve):
 * its lines (counted: one pass over the file, O(bytes) at memchr speed) at ledger_bytes_per_line(n) plus the
 * id table and the plan's scratch (INGEST_BYTES_PER_LINE). n: the default completions per line (lines that
 * ask for more cost more). */
#define INGEST_BYTES_PER_LINE 32
int ingest_estimate_bytes(const char *path, int32_t n, uint64_t *bytes, struct err *e);

/* Tokens a chat template may add to a line's own bytes (roles, markers, a default system prompt). */
#define INGEST_TEMPLATE_TOKENS 256

/* What one sequence of the backlog can need at most, for sizing the KV pool before the run (no line is
 * tokenized yet): the most any good line needs, where a line needs its own bytes (a token is at least one
 * byte of text; JSON escapes and syntax only add bytes) plus INGEST_TEMPLATE_TOKENS for its prompt, plus its
 * max_tokens as jobs/input and runtime/genparam read it (the line's "max_tokens" or
 * "max_completion_tokens", else o->defaults'). Lines are read through jobs/input with o's format, line
 * bound and defaults, the same parse the run gives them: a line that is bad there (not JSON, a field of the
 * wrong type or out of range) widens nothing; one whose only fault is a repeated id counts (this pass keeps
 * no ids). 1 when no line is good (nothing will run). One pass over the file, O(bytes). The pool stays
 * correct however it is sized (the engine preempts and a request too large for the pool fails at read
 * time); this only keeps an auto pool from being far larger than the backlog can touch. */
int ingest_seq_tokens_bound(const char *path, const struct input_opts *o, int64_t *tokens, struct err *e);

/* What reads the backlog's lines again during the run. */
typedef struct ingest_source ingest_source;

/* Reads c->backlog into l (empty, made by ledger_init) and sets l's line_info. Stops early with
 * st->interrupted when *c->stop is set. *backlog = facts about the file for the record (path, sha256,
 * format, lines, blank lines, bytes, unknown fields; a new reference), NULL on failure. *src = the source
 * (c, m and l must outlive it; close it with ingest_source_close after the last commit), NULL on failure. */
int ingest_backlog(const struct job_config *c, const struct job_model *m, ledger *l, struct ingest_stats *st,
                   json_t **backlog, ingest_source **src, struct err *e);
void ingest_source_close(ingest_source *src);
/* Bytes the source holds (the id table), for the record. */
size_t ingest_source_bytes(const ingest_source *src);

/* The engine request that runs work w, read again from its owner line: rq (id = w; its pointers point into
 * this struct; the engine copies what it keeps) and the work's full key (checked against the book's). Free
 * with ingest_request_free. Fails when the line reads back otherwise than it did (the backlog changed). */
struct ingest_request {
    struct engine_request rq;
    uint8_t key[32];
    struct input_item it;  /* the owner line as read again (parameters, stop strings, constraint) */
    int32_t *prompt;       /* (rq.n_prompt) */
};
int ingest_work_request(ingest_source *src, uint32_t w, struct ingest_request *out, struct err *e);
void ingest_request_free(struct ingest_request *r);

/* The ledger's line_info (user = the source): line li's id and model, and a bad line's message, read again
 * (valid until the next call). Fails when the line is another kind of line now. */
int ingest_line_info(void *src, const ledger *l, uint32_t li, struct ledger_line_info *out, struct err *e);

/* What a request's prompt becomes, exactly as for a backlog line: chat messages rendered with m->chat and
 * tokenized (special tokens parsed), a text prompt tokenized (BOS as the vocabulary says; special-token text
 * parsed when parse_special), token ids taken as given; then checked: ids in the vocabulary, not empty,
 * shorter than the model's context, logit_bias tokens (it->gen) in the vocabulary. Returns 0 with *ids
 * (malloc'd; the caller frees it) and *n_ids; 1 for a bad request with *code and its message in msg (cap
 * bytes) as run's error file has them (chat input for a model without a template is one, code
 * "chat_template"); -1 when out of memory. it->prompt_ids may be taken (then NULL). Chat is rendered with
 * the model's own template (m->chat_jinja) when it has one, else its family renderer; a line the template
 * fails on falls back to the family renderer and is counted in fb (may be NULL). Only reads m (thread-safe
 * for concurrent callers when fb is NULL or their own). */
/* Chat lines whose model template failed (other than by raise_exception) and were rendered by the family
 * renderer instead: how many, and the first failure's message. */
struct ingest_fallback {
    int64_t n;
    char msg[256];
};

int ingest_prompt(const struct job_model *m, int parse_special, struct input_item *it, int32_t **ids,
                  int32_t *n_ids, struct ingest_fallback *fb, const char **code, char *msg, size_t cap,
                  struct err *e);
/* The engine request of one completion of a request of this kind and these parameters, with prompt and seed,
 * as run submits it (the pointers point into g and prompt): max_tokens clamped (ingest_max_tokens), the
 * sampler's parameters, stop strings, constraint, logprobs (completions' logprobs: N and chat's top_logprobs
 * as the alternatives) and echo's prompt logprobs; an embedding: prefill only, pooled as the model says. */
void ingest_request_of(const struct job_model *m, enum input_kind kind, const struct gen_params *g,
                       const int32_t *prompt, int32_t n_prompt, uint64_t seed, struct engine_request *rq);
/* What m's engine (m->eng; none: nothing to ask, 0) would say about that request (engine_check_request,
 * read-only): 0 when it takes it, 1 with *code ("request_too_large": prompt + max_tokens over the context or
 * the whole KV pool; "invalid_value": anything else) and the engine's message in msg (cap bytes). */
int ingest_check_request(const struct job_model *m, enum input_kind kind, const struct gen_params *g,
                         const int32_t *prompt, int32_t n_prompt, const char **code, char *msg, size_t cap);
/* An embeddings request's inputs (it->embed), each tokenized and checked as a prompt is (ingest_prompt) and
 * by the engine (ingest_check_request), and its dimensions against the model: 0 with their tokens one after
 * the other in *prompt (*n_prompt; malloc'd), input k at [(*starts)[k], (*starts)[k + 1]) (*starts malloc'd,
 * inputs + 1 entries); 1 for a bad request with *code and msg (cap bytes) naming the input as run's error file
 * does ('input[2]': ...); -1 when out of memory. Input token ids may be taken from it->embed. */
int ingest_embed_prompts(const struct job_model *m, int parse_special, struct input_item *it, int32_t **prompt,
                         int32_t *n_prompt, int32_t **starts, const char **code, char *msg, size_t cap,
                         struct err *e);
/* max_tokens clamped so that n_prompt + max_tokens fits the model's context (n_prompt below the context). */
int32_t ingest_max_tokens(const struct job_model *m, int32_t n_prompt, int32_t max_tokens);

#endif
