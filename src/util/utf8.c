/* utf8 — see utf8.h for the table of valid sequences.
 *
 * Invariant: one rule decides everything. utf8_lead() gives the length a lead byte announces and the range
 * its second byte must fall in (that range is what excludes overlongs, surrogates and values above
 * U+10FFFF); every later byte is any continuation byte. Every other function is written in terms of
 * utf8_lead() and utf8_tail_ok(), so they cannot disagree about what is valid.
 */
#include "util/utf8.h"

/* The length lead byte c announces (1 for ASCII, 0 if it cannot start a sequence) and the allowed range
 * [*lo, *hi] of the second byte (for length >= 2). */
static size_t utf8_lead(unsigned c, unsigned *lo, unsigned *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) *lo = 0xA0; /* below: overlong */
        if (c == 0xED) *hi = 0x9F; /* above: surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) *lo = 0x90; /* below: overlong */
        if (c == 0xF4) *hi = 0x8F; /* above: beyond U+10FFFF */
        return 4;
    }
    return 0;
}

/* 1 if the bytes s[1..n) after a lead byte may follow it: s[1] (when n >= 2) inside [lo, hi], the rest
 * continuation bytes. n must not exceed the announced length. */
static int utf8_tail_ok(const unsigned char *s, size_t n, unsigned lo, unsigned hi)
{
    if (n >= 2 && (s[1] < lo || s[1] > hi)) return 0;
    for (size_t k = 2; k < n; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return 1;
}

size_t utf8_lead_len(unsigned char c)
{
    unsigned lo, hi;
    return utf8_lead(c, &lo, &hi);
}

size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    unsigned lo, hi;
    size_t need = utf8_lead(s[0], &lo, &hi);
    if (need == 0 || n < need || !utf8_tail_ok(s, need, lo, hi)) return 0;
    return need;
}

size_t utf8_char_len(const unsigned char *s, size_t n)
{
    size_t len = utf8_seq_len(s, n);
    return len ? len : 1;
}

int32_t utf8_decode(const unsigned char *s, size_t n, size_t *len)
{
    static const unsigned char lead_bits[UTF8_MAX_SEQ + 1] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    size_t m = utf8_seq_len(s, n);
    if (m == 0) {
        *len = n ? 1 : 0;
        return -1;
    }
    uint32_t cp = s[0] & lead_bits[m];
    for (size_t k = 1; k < m; k++) cp = cp << 6 | (s[k] & 0x3Fu);
    *len = m;
    return (int32_t)cp;
}

size_t utf8_encode(uint32_t cp, char out[UTF8_MAX_SEQ])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int utf8_valid(const char *buf, size_t n, size_t *bad_at)
{
    const unsigned char *s = (const unsigned char *)buf;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { /* the common case, without a call */
            i++;
            continue;
        }
        size_t len = utf8_seq_len(s + i, n - i);
        if (len == 0) {
            if (bad_at) *bad_at = i;
            return 0;
        }
        i += len;
    }
    return 1;
}

int utf8_is_partial(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    unsigned lo, hi;
    size_t need = utf8_lead(s[0], &lo, &hi);
    return n < need && utf8_tail_ok(s, n, lo, hi);
}

size_t utf8_partial_tail(const unsigned char *s, size_t n)
{
    /* the last lead byte in the final UTF8_MAX_SEQ - 1 bytes decides: a partial sequence starts there or
     * nowhere */
    for (size_t back = 1; back < UTF8_MAX_SEQ && back <= n; back++) {
        if ((s[n - back] & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        return utf8_is_partial(s + n - back, back) ? back : 0;
    }
    return 0;
}
