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
 * engine. Every line gets a digest of what its output
 * bytes are built from (its id, kind, model name and keys; or its id and error), so that a resumed run can
 * tell whether a stored line row still belongs to it.
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
    int64_t folded_duplicates; /* completions whose key another completion already has */
    int interrupted;           /* *c->stop was set: reading stopped early */
};

/* Reads c->backlog into l (empty, made by ledger_init). Stops early with st->interrupted when *c->stop is
 * set. *backlog = facts about the file for the record (path, sha256, format, lines, blank lines, bytes,
 * unknown fields; a new reference), NULL on failure. */
int ingest_backlog(const struct job_config *c, const struct job_model *m, ledger *l, struct ingest_stats *st,
                   json_t **backlog, struct err *e);

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
/* max_tokens clamped so that n_prompt + max_tokens fits the model's context (n_prompt below the context). */
int32_t ingest_max_tokens(const struct job_model *m, int32_t n_prompt, int32_t max_tokens);

/* The engine request that runs work w: its owner line's prompt and parameters, id = w. Points into l (the
 * engine copies what it keeps). The same parameters went into w's key. */
void ingest_work_request(const ledger *l, uint32_t w, struct engine_request *rq);

#endif
