/* utf8 — the project's one copy of the UTF-8 rules (RFC 3629).
 *
 * A valid sequence is one of
 *   00..7F                      U+0000..U+007F
 *   C2..DF 80..BF               U+0080..U+07FF
 *   E0 A0..BF 80..BF            U+0800..U+0FFF
 *   E1..EC 80..BF 80..BF        U+1000..U+CFFF
 *   ED 80..9F 80..BF            U+D000..U+D7FF (ED A0..BF would be a surrogate, U+D800..U+DFFF)
 *   EE..EF 80..BF 80..BF        U+E000..U+FFFF
 *   F0 90..BF 80..BF 80..BF     U+10000..U+3FFFF
 *   F1..F3 80..BF 80..BF 80..BF U+40000..U+FFFFF
 *   F4 80..8F 80..BF 80..BF     U+100000..U+10FFFF
 * so overlong forms (C0, C1, E0 80..9F, F0 80..8F), surrogates and code points above U+10FFFF (F4 90..,
 * F5..FF) are all invalid, as is a continuation byte (80..BF) on its own and a sequence cut short.
 *
 * Users: jobs/input (backlog lines must be valid), jobs/output and cli/info (repair into JSON strings),
 * the tokenizer (characters of SPM pieces, the BPE byte mapping, streaming detokenization). Every function
 * is pure and O(length).
 */
#ifndef NS_UTIL_UTF8_H
#define NS_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define UTF8_MAX_SEQ 4 /* bytes in the longest sequence */

/* The length a lead byte announces: 1 for ASCII, 2..4 for C2..F4, 0 for a byte that cannot start a valid
 * sequence (a continuation byte 80..BF, C0, C1, F5..FF). Says nothing about the bytes that follow. */
size_t utf8_lead_len(unsigned char c);

/* Length (1..4) of the valid sequence at s[0..n), or 0 if there is none there: a bad lead byte, a bad
 * continuation byte, an overlong, a surrogate, above U+10FFFF, or cut short by n (n = 0 gives 0). */
size_t utf8_seq_len(const unsigned char *s, size_t n);

/* Length of the character at s[0..n) for stepping through any bytes: utf8_seq_len when a valid sequence
 * is there, else 1 (an invalid or truncated byte stands alone). Never 0; at most n when n >= 1 (s is not
 * read when n = 0). */
size_t utf8_char_len(const unsigned char *s, size_t n);

/* The code point at s[0..n) and its length in *len, or -1 with *len = 1 when no valid sequence is there
 * (*len = 0 when n = 0). */
int32_t utf8_decode(const unsigned char *s, size_t n, size_t *len);

/* Writes the UTF-8 of code point cp into out and returns its length (1..4); 0 (nothing written) for a
 * surrogate or a value above U+10FFFF. */
size_t utf8_encode(uint32_t cp, char out[UTF8_MAX_SEQ]);

/* 1 if buf[0..n) is valid UTF-8; else 0, and the offset of the first byte of the first bad sequence goes to
 * *bad_at (may be NULL; left untouched when the buffer is valid). */
int utf8_valid(const char *buf, size_t n, size_t *bad_at);

/* 1 if s[0..n) is an incomplete start of a valid sequence (n >= 1 and shorter than its lead byte
 * announces, every byte so far allowed): more bytes may still make it valid. 0 otherwise, also for a
 * complete sequence. */
int utf8_is_partial(const unsigned char *s, size_t n);

/* How many bytes at the end of s[0..n) are a partial sequence (utf8_is_partial): 0..3. A streaming decoder
 * holds these back until the next bytes arrive; everything before them can be passed on. */
size_t utf8_partial_tail(const unsigned char *s, size_t n);

#endif
