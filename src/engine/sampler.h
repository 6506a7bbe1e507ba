/* sampler — turns one row of logits into a token, per request, deterministically.
 *
 * Each request owns a sampler_state whose RNG is seeded from the request's seed only, so its tokens never
 * depend on what else is in the batch. Order of operations (documented, fixed): logit bias -> repetition
 * penalty (llama.cpp style: divide positive / multiply negative logits of tokens seen in the last
 * repeat_last_n) -> presence/frequency penalties (OpenAI: logit -= presence*[count>0] + frequency*count over
 * generated tokens) -> if temperature <= 0: argmax (lowest id on ties) -> top-k -> softmax(logits/temp) ->
 * top-p -> min-p -> draw with the RNG.
 */
#ifndef NS_ENGINE_SAMPLER_H
#define NS_ENGINE_SAMPLER_H

#include <stdint.h>

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
    const struct logit_bias *logit_bias; /* (n_logit_bias); copied by sampler_init */
};

/* Defaults: greedy, no penalties, repeat_last_n 64, seed 0. */
struct sampler_params sampler_default_params(void);

typedef struct sampler sampler;

int sampler_init(const struct sampler_params *p, int32_t n_vocab, sampler **out, struct err *e);
void sampler_free(sampler *s);
/* Records a token as context (prompt or generated) for the penalties. */
void sampler_accept(sampler *s, int32_t token, int is_generated);
/* Samples from logits (n_vocab); logits may be modified in place. */
int32_t sampler_sample(sampler *s, float *logits);

/* --- additions (issue 3) ---
 * RNG: splitmix64(seed) fills the four words of a xoshiro256** state; each non-greedy sample draws one
 * uniform float u = (next() >> 40) * 2^-24 in [0, 1) and walks the kept candidates (best first when top-k
 * or top-p sorted them, else in id order) until the cumulative probability exceeds u * total. Greedy draws
 * nothing. Candidates with a non-finite logit (e.g. a logit bias of -inf) are never drawn. */
/* Index of the largest value; the lowest index on ties; NaN never wins (0 if all are -inf/NaN). */
int32_t sampler_argmax(const float *logits, int32_t n);
/* Debug check of the sampler's invariant (history window and count table). */
int sampler_check(const sampler *s, struct err *e);

#endif
