/* base64 — see base64.h. */
#include "util/base64.h"

static const char base64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

size_t base64_encode(const void *in, size_t n, char *out)
{
    const uint8_t *p = in;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        out[o++] = base64_alphabet[(v >> 18) & 63];
        out[o++] = base64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? base64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? base64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int base64_value(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int base64_decode(const char *in, size_t n, uint8_t *out, size_t *out_len)
{
    *out_len = 0;
    if (n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int pad = (in[i + 3] == '=') + (in[i + 2] == '=');
        if ((pad && i + 4 != n) || (pad == 1 && in[i + 2] == '=')) return -1;
        uint32_t v = 0;
        for (int k = 0; k < 4 - pad; k++) {
            int d = base64_value(in[i + k]);
            if (d < 0) return -1;
            v |= (uint32_t)d << (18 - 6 * k);
        }
        out[o++] = (uint8_t)(v >> 16);
        if (pad < 2) out[o++] = (uint8_t)(v >> 8);
        if (pad < 1) out[o++] = (uint8_t)v;
    }
    *out_len = o;
    return 0;
}
