/* test_cuda_q8 — the CUDA backend's q8_0 KV arithmetic (src/backend/cuda_q8.cuh) on the host, against
 * gguf/quant.c bit for bit. Runs everywhere (no GPU): the header is compiled here with plain C stand-ins of
 * the CUDA intrinsics it uses, each the same correctly rounded IEEE operation (a / b, a * b, rint to nearest
 * even, float <-> _Float16), and the warp's max as the kernel computes it (a butterfly over 32 lanes). Every
 * group's int8 values and f16 scale must equal quant_quantize_row's (GGUF_DTYPE_Q8_0), and every value read
 * back must equal quant_dequantize_row's, over random groups of many magnitudes, groups of zeros, tiny and
 * subnormal values, scales that round to zero or overflow as f16, and quotients that are exact ties (k + 0.5).
 * The tensor-core read (cuda_q8_half4: byte permutes and f16x2 arithmetic) must give, for every int8 value in
 * every byte of a word and every finite f16 scale, the f16 of the exact f32 value read back.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf/quant.h"
#include "test.h"
#include "util/rng.h"

/* ---- stand-ins of the intrinsics cuda_q8.cuh uses (round to nearest even throughout) ---- */
#define CUDA_Q8_FN static inline
static inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline int __float2int_rn(float x)
{
    return (int)nearbyintf(x);
}
static inline _Float16 __float2half_rn(float f)
{
    return (_Float16)f;
}
static inline unsigned short __half_as_ushort(_Float16 h)
{
    unsigned short b;
    memcpy(&b, &h, 2);
    return b;
}
static inline _Float16 __ushort_as_half(unsigned short b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return h;
}
static inline float __half2float(_Float16 h)
{
    return (float)h;
}
/* __byte_perm(a, b, s): byte i of the result is byte (s >> 4 i) & 7 of the 8 bytes b:a (a's bytes 0..3) */
static inline unsigned int __byte_perm(unsigned int a, unsigned int b, unsigned int s)
{
    const uint64_t x = (uint64_t)b << 32 | a;
    unsigned int r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned int)(x >> 8 * ((s >> 4 * i) & 7) & 0xffu) << 8 * i;
    return r;
}
/* f16x2 a - b and a * b, each half rounded once: the difference of two f16 is exact in double, the product
 * of two f16 exact in float */
static inline unsigned int h2_pack(_Float16 lo, _Float16 hi)
{
    return __half_as_ushort(lo) | (unsigned int)__half_as_ushort(hi) << 16;
}
static inline _Float16 h2_half(unsigned int x, int i)
{
    return __ushort_as_half((unsigned short)(x >> 16 * i));
}
static inline unsigned int cuda_q8_hsub2(unsigned int a, unsigned int b)
{
    return h2_pack((_Float16)((double)h2_half(a, 0) - (double)h2_half(b, 0)),
                   (_Float16)((double)h2_half(a, 1) - (double)h2_half(b, 1)));
}
static inline unsigned int cuda_q8_hmul2(unsigned int a, unsigned int b)
{
    return h2_pack(__float2half_rn((float)h2_half(a, 0) * (float)h2_half(b, 0)),
                   __float2half_rn((float)h2_half(a, 1) * (float)h2_half(b, 1)));
}
#include "backend/cuda_q8.cuh"

static uint64_t g_rng = 0x5eed0008ull;

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A uniform float in [-1, 1). */
static float urand(void)
{
    return (float)((rng_splitmix64(&g_rng) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/* The kernel's amax: |x| in each lane, a butterfly of fmaxf over the 32 lanes, then fmaxf(0, .). */
static float warp_amax(const float *x)
{
    float m[32], t[32];
    for (int l = 0; l < 32; l++) m[l] = fabsf(x[l]);
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < 32; l++) t[l] = fmaxf(m[l], m[l ^ o]);
        memcpy(m, t, sizeof m);
    }
    for (int l = 1; l < 32; l++)
        if (m[l] != m[0]) return NAN; /* every lane ends with the same value */
    return fmaxf(0.0f, m[0]);
}

struct q8_tally {
    long groups, ties, differ;
    char first[160];
};

/* Quantizes one group both ways and compares the bytes and the values read back. */
static void check_group(const float *x, struct q8_tally *t, const char *kind)
{
    uint8_t blk[34];
    float back[32];
    quant_quantize_row(GGUF_DTYPE_Q8_0, x, blk, 32);
    quant_dequantize_row(GGUF_DTYPE_Q8_0, blk, back, 32);
    const float amax = warp_amax(x), d = cuda_q8_scale(amax);
    const unsigned short bits = cuda_q8_scale_bits(d);
    const float sv = cuda_q8_scale_value(bits);
    int bad = memcmp(&bits, blk, 2) != 0;
    for (int j = 0; j < 32; j++) {
        const int q = cuda_q8_quantize(x[j], d);
        const float v = cuda_q8_value(q, sv);
        bad |= (int8_t)q != (int8_t)blk[2 + j] || memcmp(&v, &back[j], 4) != 0;
        if (d > 0.0f) {
            const float r = x[j] / d;
            t->ties += r == floorf(r) + 0.5f;
        }
    }
    t->groups++;
    if (bad && t->differ++ == 0)
        snprintf(t->first, sizeof t->first, "%s group, amax %g, scale bits 0x%04x (host 0x%02x%02x)", kind,
                 (double)amax, bits, blk[1], blk[0]);
}

TEST(f16_stand_in_matches_quant_f32_to_f16)
{
    /* every f32 whose exponent lies between f16's subnormals and its overflow, at a stride through the
     * mantissas that hits the rounding boundaries (low 13 bits) in every pattern */
    long n = 0, differ = 0;
    for (uint32_t e = 0x58; e <= 0x90; e++)
        for (uint32_t m = 0; m < (1u << 23); m += 0x1001) {
            for (uint32_t s = 0; s < 2; s++) {
                const float f = bitsf(s << 31 | e << 23 | m);
                differ += cuda_q8_scale_bits(f) != quant_f32_to_f16(f);
                n++;
            }
        }
    fprintf(stderr, "# f16: %ld values, %ld differ\n", n, differ);
    CHECK_MSG(differ == 0, "%ld of %ld f32 -> f16 conversions differ", differ, n);
}

TEST(groups_match_quant_c)
{
    struct q8_tally t = {0};
    float x[32];
    /* random groups, amplitudes log-uniform over 2^-149 .. 2^40 (subnormal f32 to f16-overflowing scales) */
    for (int g = 0; g < 200000; g++) {
        const float a = ldexpf(1.0f, -149 + (int)(rng_splitmix64(&g_rng) % 190));
        for (int j = 0; j < 32; j++) x[j] = urand() * a;
        check_group(x, &t, "random");
    }
    /* zeros; one nonzero element; a single tiny value */
    memset(x, 0, sizeof x);
    check_group(x, &t, "zero");
    for (int j = 0; j < 32; j++) {
        memset(x, 0, sizeof x);
        x[j] = j & 1 ? -1.5f : 0.75f;
        check_group(x, &t, "one-hot");
        x[j] = bitsf(1u + (uint32_t)j);
        check_group(x, &t, "subnormal");
    }
    /* scales near f16's smallest subnormal (2^-24) and largest normal (65504): the f16 rounding of d */
    for (int g = 0; g < 20000; g++) {
        const float a = (g & 1 ? 65504.0f * 127.0f : ldexpf(127.0f, -24)) * (0.25f + 1.5f * fabsf(urand()));
        for (int j = 0; j < 32; j++) x[j] = urand() * a;
        x[g % 32] = g & 2 ? -a : a;
        check_group(x, &t, "f16-edge");
    }
    /* exact ties: amax = 127 * 2^e, so d = 2^e and x / d = k + 0.5 exactly (round half to even decides) */
    for (int g = 0; g < 20000; g++) {
        const int e = -30 + (int)(rng_splitmix64(&g_rng) % 40);
        for (int j = 0; j < 32; j++) {
            const int k = (int)(rng_splitmix64(&g_rng) % 254) - 127; /* -127 .. 126: k + 0.5 in (-127, 127) */
            x[j] = ldexpf((float)k + 0.5f, e);
        }
        x[g % 32] = ldexpf(g & 1 ? -127.0f : 127.0f, e);
        check_group(x, &t, "tie");
    }
    fprintf(stderr, "# q8 groups: %ld checked, %ld elements on an exact .5 tie, %ld differ%s%s\n", t.groups, t.ties,
            t.differ, t.differ ? "; the first: " : "", t.differ ? t.first : "");
    CHECK_MSG(t.differ == 0, "%ld of %ld groups differ from quant.c (the first: %s)", t.differ, t.groups, t.first);
    CHECK(t.ties > 100000); /* the tie groups did produce ties */
}

TEST(value_is_exact)
{
    /* q * scale in f32 equals the double product for every q and every finite f16 scale */
    long differ = 0;
    for (uint32_t h = 0; h < 0x7c00; h++)
        for (int q = -127; q <= 127; q++) {
            const float v = cuda_q8_value(q, cuda_q8_scale_value((unsigned short)h));
            differ += (double)v != (double)q * (double)quant_f16_to_f32((uint16_t)h);
        }
    CHECK_MSG(differ == 0, "%ld products are not exact", differ);
}

TEST(half4_is_value_rounded_once)
{
    /* every int8 value in each of the four bytes (w's bytes are b, b + 1, b + 2, b + 3), every finite f16
     * scale of either sign: the f16 bits of q * scale (exact in f32) rounded by quant_f32_to_f16 */
    long n = 0, differ = 0;
    char first[120] = "";
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue; /* infinities and NaNs are not scales */
        const float sv = cuda_q8_scale_value((unsigned short)h);
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t w = 0, got[2];
            for (uint32_t i = 0; i < 4; i++) w |= ((b + i) & 0xffu) << 8 * i;
            cuda_q8_half4(w, h << 16 | h, &got[0], &got[1]);
            for (uint32_t i = 0; i < 4; i++) {
                const int q = (int8_t)(uint8_t)(b + i);
                const uint16_t want = quant_f32_to_f16(cuda_q8_value(q, sv));
                const uint16_t g = (uint16_t)(got[i / 2] >> 16 * (i % 2));
                if (g != want && differ++ == 0)
                    snprintf(first, sizeof first, "q %d, scale bits 0x%04x: 0x%04x, want 0x%04x", q, (unsigned)h, g,
                             want);
                n++;
            }
        }
    }
    fprintf(stderr, "# half4: %ld values, %ld differ%s%s\n", n, differ, differ ? "; the first: " : "", first);
    CHECK_MSG(differ == 0, "%ld of %ld f16 reads differ (the first: %s)", differ, n, first);
}

int main(void)
{
    RUN(f16_stand_in_matches_quant_f32_to_f16);
    RUN(groups_match_quant_c);
    RUN(value_is_exact);
    RUN(half4_is_value_rounded_once);
    return test_summary();
}
