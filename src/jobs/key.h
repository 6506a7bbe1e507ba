/* key — the identity of one unit of work: sha256 over a canonical encoding of everything its result
 * depends on (DESIGN.md invariant 1):
 *
 *   "nightshift-key-v2\0"                               (KEY_VERSION)
 *   model file sha256                                   32 bytes
 *   kv element type                                     u32 (it changes the numerics)
 *   the generation parameters                           genparam_key_encode: every row of the table that
 *                                                       enters the key, in table order, with the seed
 *                                                       actually used for this completion
 *   n_prompt, then the prompt token ids                 i32 each
 *   completion index                                    u32
 *
 * all integers little-endian. Greedy requests (temperature 0) encode top_k, top_p, min_p and the seed as
 * their "off" values: greedy duplicates fold whatever seed they carry.
 *
 * Seeds: a request without a seed that samples gets key_id_seed(custom_id), so a resumed run reproduces
 * it; completion i of n uses key_completion_seed(seed, i) (i = 0 keeps the seed itself).
 *
 * Versions: the tag names KEY_VERSION, bumped whenever the same encoded request would give another result
 * (an encoding change, or a change of what the engine computes from it). v1: sampling drew from a
 * per-request xoshiro256** stream. v2: position-keyed draws (engine/sampler.h), so seeded results differ
 * from v1's. A store records the version it was made with (jobs/job: setting "key.version") and a run
 * refuses a store of another version unless --force (old results stay unused: their keys differ).
 * Embeddings (key_params.embed_pooling) are encoded under a tag of their own, so their keys never meet a
 * completion's. Structured output (the genparam constraint rows) did not need a new version: those rows encode nothing
 * for an unconstrained request, whose key is what it was before (runtime/genparam.h).
 */
#ifndef NS_JOBS_KEY_H
#define NS_JOBS_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/genparam.h"
#include "util/err.h"

#define KEY_BYTES 32
#define KEY_VERSION 2

struct key_params {
    const uint8_t *model_sha256;    /* (32) */
    uint32_t kv_type;
    const struct gen_params *gen;   /* the request's parameters (logit_bias sorted by token) */
    uint64_t seed;                  /* the completion's seed */
    const int32_t *prompt;          /* (n_prompt) rendered prompt ids */
    int32_t n_prompt;
    uint32_t index;                 /* completion index, 0 .. n-1 (an embedding line: its input's index) */
    int32_t embed_pooling;          /* 0: a completion. Else an embedding pooled this way (enum model_pooling):
                                       tag "nightshift-embedding-v1\0", model sha256, kv type, this pooling
                                       (u32), then n_prompt, the ids and index as above; gen and seed are not
                                       encoded (an embedding depends on neither) */
};

/* Writes the canonical encoding into buf (cap bytes) and returns its length; if that exceeds cap only cap
 * bytes were written (call again with a bigger buffer). */
size_t key_encode(const struct key_params *p, uint8_t *buf, size_t cap);
/* sha256 of the canonical encoding. */
int key_compute(const struct key_params *p, uint8_t out[KEY_BYTES], struct err *e);

/* Deterministic seed for a request without one: the first 8 bytes (LE) of sha256("nightshift-seed\0" id). */
uint64_t key_id_seed(const char *custom_id);
/* Seed for completion index i of a request with seed s: s for i = 0, else a splitmix64 mix of (s, i). */
uint64_t key_completion_seed(uint64_t s, uint32_t index);

/* Lower-case hex (65 bytes with the NUL). */
void key_hex(const uint8_t k[KEY_BYTES], char out[2 * KEY_BYTES + 1]);

#endif
