/* logprob — log-probabilities of tokens from logits rows, and the prefix cache's store of prompt logprobs.
 *
 * What a logprob is (the choice, for both endpoints and for scoring): the log-softmax of the model's own
 * logits row, over every row of the output head (n_vocab, padding rows included), before anything the
 * sampler does — no logit bias, no penalties, no temperature, no top-k/top-p/min-p, no structured-output
 * mask. So a token's logprob is the model's, the same whatever sampling parameters drew it (vLLM's default,
 * "raw logprobs"; OpenAI's values do not change with temperature either), and a scoring request
 * (perplexity, classification by likelihood) gets exactly the numbers perplexity needs. Arithmetic, fixed:
 *     max = the largest logit (float), log_sum = log(sum over the row, in id order, of exp((double)l - max)),
 *     logprob(t) = ((double)l[t] - max) - log_sum     (double; so -logprob(t) is ppl_nll bit for bit).
 * Alternatives (top_logprobs): the n_top tokens of the largest logits among ids [0, n_ids) (tokens the
 * tokenizer has), best first, the lower id first on ties; their logprobs by the same formula.
 * Each value is a function of its logits row alone, so (CPU backend) bit-identical whatever else is in the
 * batch.
 *
 * The prefix cache (choice (a) of issue 11: store, not recompute). A prompt token's logprob comes from the
 * logits of the row before it. A request whose prompt prefix is served from the prefix cache computes no
 * rows there, so the logprobs of those positions must come from where they were computed: a logprob_cache
 * keeps, per KV block b (block_size tokens, positions [b*B, (b+1)*B)), the entries of the B positions
 * b*B + 1 .. (b+1)*B — the predictions made by the block's own rows. They are a function of the tokens of
 * positions 0 .. (b+1)*B: the block's chain hash covers all but the last, which the entry keeps as
 * next_token and a lookup compares. An entry is valid while its block is in the pool's prefix cache with
 * the generation it had when stored (kv_generation: a block evicted and reused is another block). Each
 * block's entries carry n_top alternatives; a request asking for more cannot use them.
 * Memory: one logprob_block (B entries) per block stored, allocated when stored, kept until the engine is
 * freed or the slot is overwritten; only requests that ask for prompt logprobs store any.
 */
#ifndef NS_ENGINE_LOGPROB_H
#define NS_ENGINE_LOGPROB_H

#include <stdint.h>

#include "backend/backend.h"
#include "engine/kvpool.h"
#include "util/err.h"

#define LOGPROB_MAX_TOP 20 /* alternatives per token at most (OpenAI's top_logprobs limit) */

struct logprob_top {
    int32_t token;
    double logprob;
};

/* One token's logprob and its alternatives. */
struct logprob_entry {
    int32_t token;
    double logprob; /* NAN where nothing predicts the token (a prompt's first) */
    int32_t n_top;
    struct logprob_top top[LOGPROB_MAX_TOP]; /* (n_top) best first */
};

/* The normalizer of one logits row. */
struct logprob_norm {
    float max;
    double log_sum;
};

/* max and log_sum of logits (n) as above. O(n). */
struct logprob_norm logprob_norm_row(const float *logits, int32_t n);
/* logprob of token t under a row with normalizer nm. */
double logprob_of(const struct logprob_norm *nm, const float *logits, int32_t t);
/* Fills *out for token t (0 <= t < n) from a logits row of n values, with its n_top (0 .. LOGPROB_MAX_TOP)
 * alternatives among ids [0, n_ids). O(n + n_ids * n_top). */
void logprob_fill(const float *logits, int32_t n, int32_t n_ids, int32_t t, int32_t n_top, struct logprob_entry *out);
/* The entry of a prompt's first token: its id, logprob NAN, no alternatives. */
void logprob_first(int32_t t, struct logprob_entry *out);
/* The entry a backend's op sample computed where the logits are (backend.h: the same formula, the same order
 * of alternatives; the log-sum-exp summed in another order, so the values agree with logprob_fill's within
 * the rounding of a double sum of n terms). */
void logprob_from_sample(const struct sample_logprobs *in, struct logprob_entry *out);

typedef struct logprob_cache logprob_cache;

/* A store for a pool's blocks (the pool must outlive it). */
int logprob_cache_init(const kv_pool *pool, logprob_cache **out, struct err *e);
void logprob_cache_free(logprob_cache *c);
/* The block_size entries stored for block id (positions b*B + 1 .. (b+1)*B of whatever sequence holds it),
 * when they are valid (above), carry at least n_top alternatives and were stored with next_token as the
 * token after the block; else NULL. O(1). */
const struct logprob_entry *logprob_cache_get(const logprob_cache *c, int32_t id, int32_t next_token, int32_t n_top);
/* Stores entries (block_size of them) for block id (which must be cached in the pool) made with n_top
 * alternatives each, after which comes next_token. Keeps what is there when it is valid, has as many
 * alternatives and the same next_token; otherwise replaces it. -1 only when out of memory. */
int logprob_cache_put(logprob_cache *c, int32_t id, int32_t next_token, int32_t n_top,
                      const struct logprob_entry *entries);
/* Blocks with entries stored (valid or not). */
int32_t logprob_cache_n_stored(const logprob_cache *c);

/* ---- one request's logprobs ----
 * A request asks for the logprobs of its generated tokens (gen), of its prompt tokens (prompt), or both,
 * with n_top alternatives each. Prompt position p's entry comes from the logits of row p - 1 (or from the
 * cache, for positions a prefix-cache hit covers); rows are computed in position order, so the entries
 * filled are always a prefix: prompt[0 .. n_prompt_have). Generated entries are appended as the tokens
 * are taken. */
struct logprob_seq {
    int gen;                      /* 1: out holds an entry per generated token */
    int32_t n_top;
    struct logprob_entry *prompt; /* (n_prompt) or NULL: not asked for */
    int32_t n_prompt, n_prompt_have;
    int32_t from;                 /* prompt positions before it have no entry (logprob NAN): not asked for */
    struct logprob_entry *out;    /* (cap_out) */
    int32_t n_out, cap_out;
    int32_t n_offered;            /* the sequence's registered blocks already offered to the cache */
};

/* Starts s for a request of n_prompt tokens (prompt) that generates max_tokens at most, with prompt entries
 * from position `from` on (1: all; clamped to 1 .. n_prompt). 0 or -1 (out of memory). Neither gen nor
 * want_prompt: nothing is allocated. */
int logprob_seq_init(struct logprob_seq *s, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, int gen,
                     int want_prompt, int32_t from, int32_t n_top);
void logprob_seq_free(struct logprob_seq *s);
/* The rows of a chunk of positions [pos0, pos0 + n_rows) whose logits give prompt entries not filled yet:
 * positions [*first, *first + return value). */
int32_t logprob_seq_prompt_rows(const struct logprob_seq *s, int32_t pos0, int32_t n_rows, int32_t *first);
/* Fills the entry of prompt position pos + 1 from row pos's logits (n values, alternatives among n_ids). */
void logprob_seq_take_row(struct logprob_seq *s, int32_t pos, const float *logits, int32_t n, int32_t n_ids);
/* The same from what the backend computed for row pos (its token: the prompt's token at pos + 1). */
void logprob_seq_take_sample(struct logprob_seq *s, int32_t pos, const struct sample_logprobs *in);
/* Appends a generated token's entry (room for max_tokens was made at init). */
void logprob_seq_push(struct logprob_seq *s, const struct logprob_entry *e);
/* Whether a prefix-cache hit may give the sequence (tokens: n_tokens of them) cached block `block` as its
 * block `index` of block_size tokens: yes when the prompt entries of the positions it covers are filled
 * already, or c holds them for this block (then they are copied into s). */
int logprob_seq_hit_ok(struct logprob_seq *s, const logprob_cache *c, const int32_t *tokens, int32_t n_tokens,
                       int32_t index, int32_t block, int32_t block_size);
/* Offers the cache the entries of the sequence's registered blocks (blocks[0 .. n_registered)) not offered
 * yet whose positions are all prompt positions with entries filled (none before `from`). -1 only when out of memory. */
int logprob_seq_offer(struct logprob_seq *s, logprob_cache *c, const int32_t *tokens, const int32_t *blocks,
                      int32_t n_registered, int32_t block_size);

#endif
