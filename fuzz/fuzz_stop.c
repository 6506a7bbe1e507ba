/* fuzz_stop — libFuzzer target for the stop-string matcher (engine/stop), against a plain reference.
 *
 * Input: byte 0: how many stop strings (0..4); then the stop strings, each ended by a NUL byte; then the
 * completion text, which arrives in pieces whose sizes come from the text's own bytes (as tokens would).
 * After every piece stop_scan must agree with the reference: a stop string occurs in the text so far
 * exactly when it says so, at the earliest occurrence; otherwise it releases everything but the longest
 * tail that begins some stop string, never less than it released before, and never a byte of a stop
 * string.
 */
#include <stdint.h>
#include <string.h>

#include "engine/stop.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

/* The reference: earliest occurrence of a non-empty stop string in text[0..len), or -1. */
static int64_t ref_first(const char *text, size_t len, const char *const *stops, int n)
{
    for (size_t i = 0; i < len; i++)
        for (int k = 0; k < n; k++) {
            size_t m = strlen(stops[k]);
            if (m && m <= len - i && !memcmp(text + i, stops[k], m)) return (int64_t)i;
        }
    return -1;
}

/* The reference: the longest tail of text[0..len) that is a proper beginning of some stop string. */
static size_t ref_tail(const char *text, size_t len, const char *const *stops, int n)
{
    size_t best = 0;
    for (int k = 0; k < n; k++) {
        size_t m = strlen(stops[k]);
        for (size_t t = m ? m - 1 : 0; t > best; t--)
            if (t <= len && !memcmp(text + len - t, stops[k], t)) {
                best = t;
                break;
            }
    }
    return best;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    int n = data[0] % 5;
    const char *stops[4];
    size_t at = 1;
    int k = 0;
    for (; k < n && at < size; k++) {
        const uint8_t *z = memchr(data + at, 0, size - at);
        if (!z) break;
        stops[k] = (const char *)data + at;
        at = (size_t)(z - data) + 1;
    }
    n = k;
    const char *text = (const char *)data + at;
    size_t len = size - at, released = 0;
    for (size_t upto = 0; upto < len;) {
        upto += 1 + (unsigned char)text[upto] % 7;
        if (upto > len) upto = len;
        size_t rel = (size_t)-1;
        int hit = stop_scan(text, upto, released, stops, n, &rel);
        int64_t first = ref_first(text, upto, stops, n);
        if (hit) {
            REQUIRE(first >= 0 && rel == (size_t)first && rel >= released);
            return 0;
        }
        REQUIRE(first < 0);
        REQUIRE(rel == upto - ref_tail(text, upto, stops, n) && rel >= released && rel <= upto);
        released = rel;
    }
    return 0;
}
