/* base64 — RFC 4648 base64 (standard alphabet, '=' padding): what OpenAI's embeddings return for
 * encoding_format "base64", and how a run stores an embedding as text. */
#ifndef NS_UTIL_BASE64_H
#define NS_UTIL_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Bytes base64_encode writes for n input bytes, NUL excluded: 4 * ceil(n / 3). */
size_t base64_encoded_len(size_t n);
/* Encodes n bytes into out (base64_encoded_len(n) + 1 bytes, NUL-terminated); returns the length. */
size_t base64_encode(const void *in, size_t n, char *out);
/* Decodes n characters (a multiple of 4, padding only at the end) into out (n / 4 * 3 bytes at most);
 * *out_len = the bytes written. -1 on a character outside the alphabet or bad padding. */
int base64_decode(const char *in, size_t n, uint8_t *out, size_t *out_len);

#endif
