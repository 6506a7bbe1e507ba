/* stop — see stop.h.
 *
 * Invariant relied on by `from`: after a call released r bytes, no stop string occurrence and no tail
 * that is a proper prefix of a stop string starts before r. An occurrence or a held-back prefix found
 * later that started before r would have been a (shorter) stop-string prefix ending at the then end of
 * the text, i.e. a longer held-back tail than the one chosen: a contradiction. So later calls only look at
 * positions >= r.
 */
#include "engine/stop.h"

#include <string.h>

int stop_scan(const char *text, size_t len, size_t from, const char *const *stops, int32_t n_stops,
              size_t *release)
{
    if (from > len) from = len;
    size_t best = len;
    int found = 0;
    for (int32_t i = 0; i < n_stops; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        if (sl == 0 || sl > len - from) continue;
        const char *hit = memmem(text + from, len - from, stops[i], sl);
        if (hit && (size_t)(hit - text) < best) {
            best = (size_t)(hit - text);
            found = 1;
        }
    }
    if (found) {
        *release = best;
        return 1;
    }
    /* hold back the longest tail text[j..len) (j >= from) that is a proper prefix of a stop string */
    size_t keep = len;
    for (size_t j = from; j < len && keep == len; j++) {
        size_t tail = len - j;
        for (int32_t i = 0; i < n_stops; i++) {
            size_t sl = stops[i] ? strlen(stops[i]) : 0;
            if (sl > tail && memcmp(text + j, stops[i], tail) == 0) {
                keep = j;
                break;
            }
        }
    }
    *release = keep;
    return 0;
}
