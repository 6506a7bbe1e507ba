/* stop — stop strings matched on detokenized text across token boundaries.
 *
 * The caller keeps the whole completion text so far and the length it has already released (emitted).
 * stop_scan() says how much more may be released: up to the earliest occurrence of a stop string (then
 * generation ends and the stop string itself is not returned), or else all but the longest tail that is
 * still the beginning of some stop string (that tail is held back until the next token decides it). So
 * no part of a stop string is ever released.
 */
#ifndef NS_ENGINE_STOP_H
#define NS_ENGINE_STOP_H

#include <stddef.h>
#include <stdint.h>

/* text[0..len): the completion so far; from: bytes already released by an earlier call (its *release),
 * 0 at first. Empty stop strings are ignored. Returns 1 if a stop string occurs: *release is the offset
 * of the earliest occurrence (the completion ends there). Returns 0 otherwise: *release is how far the
 * text may be released now (>= from). O((len - from) * total length of the stop strings). */
int stop_scan(const char *text, size_t len, size_t from, const char *const *stops, int32_t n_stops,
              size_t *release);

#endif
