/* sampler — turns one row of logits into a token, deterministically, from the request alone.
 *
 * A draw is a pure function of (params, token history, logits, seed, position): the sampler keeps no
 * per-request state at all — no RNG stream, no penalty tables. So a request's tokens never depend on what
 * else is in the batch, a preempted request resumes with nothing to restore, a draft token that is
 * rejected (prompt-lookup decoding) leaves nothing to undo, and a GPU can draw on the device from the
 * same inputs. The penalties are recomputed from the history at every draw (O(window + generated)).
 *
 * Order of operations (documented, fixed): logit bias (a token's biases summed first, when it is listed
 * twice) -> repetition penalty (llama.cpp style: divide positive / multiply negative logits of the distinct
 * tokens among the last repeat_last_n tokens of prompt + generated) -> presence/frequency penalties (OpenAI:
 * logit -= presence + frequency * count, for each distinct generated token) -> if temperature <= 0: argmax
 * (lowest id on ties) -> top-k -> softmax (logits / temp) -> top-p -> min-p -> draw with
 * sampler_uniform(seed, pos). The first three are per-token edits (backend.h's struct logit_edit, built by
 * sampler_edits), so a backend that draws greedy rows where the logits lie applies exactly what this
 * sampler applies.
 *
 * The draw (the contract a GPU backend implements bit for bit): pos is the index of the token within the
 * generation (0 for the first generated token), and
 *
 *     r = rng_at(seed, pos) = mix64(mix64(seed) + (pos + 1) * 0x9e3779b97f4a7c15)     (mod 2^64)
 *     mix64(z): z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9; z = (z ^ z >> 27) * 0x94d049bb133111eb;
 *               return z ^ z >> 31
 *     u = (float)(r >> 40) * 2^-24                                            (24 bits, u in [0, 1))
 *
 * The kept candidates (best first when top-k or top-p sorted them, else in id order) are walked until the
 * cumulative unnormalized probability exceeds (double)u * total; the last one is taken if rounding leaves
 * none. Greedy draws nothing. Candidates with a non-finite logit (e.g. a logit bias of -inf) are never
 * drawn.
 */
#ifndef NS_ENGINE_SAMPLER_H
#define NS_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

struct logit_bias {
    int32_t token;
    float bias;
};

struct sampler_params {
    float temperature;        /* <= 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repeat_penalty;     /* 1: off */
    int32_t repeat_last_n;    /* window over prompt+generated; default 64 */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    uint64_t seed;
    int32_t n_logit_bias;
    const struct logit_bias *logit_bias; /* (n_logit_bias) borrowed: the caller keeps it alive (the engine
                                            copies a request's list) */
};

/* Defaults: greedy, no penalties, repeat_last_n 64, seed 0. */
struct sampler_params sampler_default_params(void);
/* 0 when p is usable with a vocabulary of n_vocab tokens; else a message naming the parameter. */
int sampler_check_params(const struct sampler_params *p, int32_t n_vocab, struct err *e);

/* The uniform draw of the token at generation position pos >= 0 of a request with this seed (formula
 * above). */
float sampler_uniform(uint64_t seed, int32_t pos);

/* Scratch for one draw at a time: O(n_vocab) (candidates, and a count table that is all zero between
 * draws). Not per request: one per engine (or per thread that samples). */
typedef struct sampler sampler;

int sampler_init(int32_t n_vocab, sampler **out, struct err *e);
void sampler_free(sampler *s);

/* Samples the token at generation position pos of a request with params p (checked by
 * sampler_check_params) from logits (n_vocab), which are modified in place. tokens (n_prompt + pos) is
 * the request's history: its prompt, then the pos tokens generated before this one; ids outside
 * [0, n_vocab) are ignored by the penalties. Returns -1 only when out of memory (for the edits). */
int32_t sampler_sample(sampler *s, const struct sampler_params *p, const int32_t *tokens, int32_t n_prompt,
                       int32_t pos, float *logits);

/* sampler_sample after the edits: argmax when p->temperature <= 0, else top-k -> softmax -> top-p -> min-p ->
 * the walk with the uniform u (sampler_uniform(p->seed, pos)). logits (n_vocab, edited) are modified. */
int32_t sampler_draw(sampler *s, const struct sampler_params *p, float u, float *logits);

/* The bias and penalties of the draw at pos (arguments as for sampler_sample) as edits, one per distinct
 * token they touch; returns their count, at most sampler_max_edits(p, n_prompt, pos), which out must hold.
 * O(that bound). */
int32_t sampler_edits(sampler *s, const struct sampler_params *p, const int32_t *tokens, int32_t n_prompt,
                      int32_t pos, struct logit_edit *out);
int32_t sampler_max_edits(const struct sampler_params *p, int32_t n_prompt, int32_t pos);
/* Applies n edits to logits (the arithmetic of struct logit_edit). */
void sampler_apply_edits(const struct logit_edit *ed, int32_t n, float *logits);

/* What a draw asks of a backend that draws where the logits are (backend.h's SAMPLE_USE_*): one row per field
 * of struct sampler_params, with the bit it needs and when a draw reads it (a filter only when the row is
 * drawn, the window only with its penalty). sampler_uses ORs the bits of the fields in use, so a backend gets
 * a row only when its caps.sampling states them all; a field added to the params needs its row here, and
 * test_genparam fails while a generation parameter that sets a sampler field has none. */
struct sampler_field {
    const char *name; /* the field of struct sampler_params */
    size_t offset;    /* offsetof(struct sampler_params, the field) */
    uint32_t use;     /* SAMPLE_USE_* */
    int (*in_use)(const struct sampler_params *p);
};
extern const struct sampler_field sampler_fields[];
extern const int sampler_n_fields;
/* The SAMPLE_USE_* bits of the draws of a request with p (a greedy draw without bias or penalties: 0).
 * O(fields). */
uint32_t sampler_uses(const struct sampler_params *p);

/* Index of the largest value; the lowest index on ties; NaN never wins (0 if all are -inf/NaN). */
int32_t sampler_argmax(const float *logits, int32_t n);
/* Debug check of the scratch's invariant (the count table is all zero between draws). O(n_vocab). */
int sampler_check(const sampler *s, struct err *e);

#endif
