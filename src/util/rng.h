/* rng — the project's deterministic random numbers: splitmix64 to expand a 64-bit seed, xoshiro256** for
 * a stream, and a counter-based draw (rng_at) for values that must not depend on a stream's state. Same
 * inputs, same numbers, on every machine and device (64-bit integer arithmetic only).
 * Users: the sampler (rng_at, per request and position), jobs/key (completion seeds), synth (random
 * weights), bench (random prompt ids). */
#ifndef NS_UTIL_RNG_H
#define NS_UTIL_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

/* The golden-ratio increment of splitmix64 (2^64 / phi, odd). */
#define RNG_GOLDEN 0x9e3779b97f4a7c15ull

/* One splitmix64 step: advances *x by RNG_GOLDEN and returns rng_mix64 of it. */
uint64_t rng_splitmix64(uint64_t *x);
/* splitmix64's output function: a bijective 64-bit mix (also a hash of a counter). */
uint64_t rng_mix64(uint64_t z);
/* State = four successive splitmix64 outputs starting from seed. */
void rng_seed(struct rng *r, uint64_t seed);
/* Next xoshiro256** output. */
uint64_t rng_next(struct rng *r);

/* Counter-based draw: value number `index` (0, 1, ...) of the splitmix64 stream that starts at
 * rng_mix64(key), computed directly:
 *
 *     rng_at(key, index) = rng_mix64(rng_mix64(key) + (index + 1) * RNG_GOLDEN)      (all mod 2^64)
 *
 * so it equals the (index + 1)-th rng_splitmix64 output from x = rng_mix64(key). A pure function: no
 * state, any call order, the same bits in a GPU kernel (two 64-bit multiplies per mix, shifts, xors).
 * Mixing the key first keeps small, adjacent keys (seeds 0, 1, 2, ...) on unrelated parts of the
 * splitmix64 sequence. */
uint64_t rng_at(uint64_t key, uint64_t index);

#endif
