/* rng — the project's one deterministic random number generator: splitmix64 to expand a 64-bit seed,
 * xoshiro256** for the stream. Same seed, same numbers, on every machine (integer arithmetic only).
 * Users: the sampler (per-request seeds), synth (random weights), bench (random prompt ids). */
#ifndef NS_UTIL_RNG_H
#define NS_UTIL_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

/* One splitmix64 step: advances *x by the golden-ratio increment and returns rng_mix64 of it. */
uint64_t rng_splitmix64(uint64_t *x);
/* splitmix64's output function: a bijective 64-bit mix (also a hash of a counter). */
uint64_t rng_mix64(uint64_t z);
/* State = four successive splitmix64 outputs starting from seed. */
void rng_seed(struct rng *r, uint64_t seed);
/* Next xoshiro256** output. */
uint64_t rng_next(struct rng *r);

#endif
