/* cpu_iquant — kernels for the codebook, lattice and ternary types and Q8_K weights; see cpu_iquant.h for
 * the arithmetic every variant performs.
 *
 * Invariant: the scalar reference (iq_tile_scalar) and the AVX2 version compute the same exact integer P
 * per block and the same float operations in the same order (a = fmaf(d * d_x, (float)P, a), block after
 * block), so their results are identical bit for bit (tests/test_cpu_iquant.c compares them with memcmp).
 * The AVX2 version decodes IQ4_NL and IQ4_XS with its own shuffles, independently of quant_iq_decode, so
 * a wrong nibble or scale in either shows up as a difference. A row's result depends only on its own rows.
 */
#include "backend/cpu_iquant.h"

#include <math.h>
#include <string.h>

#include "backend/cpu_kquant.h"
#include "gguf/quant.h"
#include "gguf/quant_iq.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define IQ_HAVE_AVX2 1
#include "backend/cpu_simd.h"
#else
#define IQ_HAVE_AVX2 0
#endif

int cpu_iquant_type(enum gguf_dtype t)
{
    return quant_iq_type(t);
}

/* The activation block b of row x (the type's form: Q8 for IQ4_NL, else Q8K): its quants and scale. */
static const int8_t *iq_act(enum gguf_dtype t, const void *x, int64_t b, float *dx)
{
    if (t == GGUF_DTYPE_IQ4_NL) {
        const struct cpu_q8_block *xb = (const struct cpu_q8_block *)x + b;
        *dx = xb->d;
        return xb->q;
    }
    const struct cpu_q8k_block *xb = (const struct cpu_q8k_block *)x + b;
    *dx = xb->d;
    return xb->q;
}

/* ---------------------------------------------------------------- scalar reference */

/* P of cpu_iquant.h for a block of n (32 or 256) elements. */
static int32_t iq_block_p(const struct quant_iq_ints *k, const int8_t *q, int n)
{
    int32_t p = 0;
    for (int j = 0; j < n / 16; j++) {
        int32_t sum = 0;
        for (int e = 16 * j; e < 16 * j + 16; e++) sum += k->g[e] * q[e];
        p += k->s[j] * sum;
    }
    return p;
}

/* The tile loop both variants share: row o's blocks decoded by `decode`, each block's integer sum with an
 * activation row by `block_p`, then one fused multiply-add a block, in block order (always inlined, so each
 * variant's calls are direct). */
typedef void (*iq_decode_fn)(enum gguf_dtype t, const uint8_t *b, struct quant_iq_ints *k);
typedef int32_t (*iq_block_p_fn)(const struct quant_iq_ints *k, const int8_t *q, int n);

static inline __attribute__((always_inline)) void iq_tile(enum gguf_dtype t, int64_t n, const void *w, int64_t ws,
                                                          int n_w, const void *x, int64_t xs, int n_x, float *y,
                                                          int64_t ys, iq_decode_fn decode, iq_block_p_fn block_p)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    const int64_t nb = n / ti->block_size;
    struct quant_iq_ints k;
    for (int o = 0; o < n_w; o++) {
        const uint8_t *row = (const uint8_t *)w + o * ws;
        float a[CPU_TILE_MAX_X] = {0};
        for (int64_t b = 0; b < nb; b++) {
            decode(t, row + b * ti->block_bytes, &k);
            for (int i = 0; i < n_x; i++) {
                float dx;
                const int8_t *q = iq_act(t, (const char *)x + i * xs, b, &dx);
                a[i] = fmaf(k.d * dx, (float)block_p(&k, q, (int)ti->block_size), a[i]);
            }
        }
        for (int i = 0; i < n_x; i++) y[i * ys + o] = a[i];
    }
}

static void iq_tile_scalar(enum gguf_dtype t, int64_t n, const void *w, int64_t ws, int n_w, const void *x,
                           int64_t xs, int n_x, float *y, int64_t ys)
{
    iq_tile(t, n, w, ws, n_w, x, xs, n_x, y, ys, quant_iq_decode, iq_block_p);
}

/* ---------------------------------------------------------------- AVX2 */
#if IQ_HAVE_AVX2

/* sum over 32 elements of g * q, the two 16-element halves times s_lo and s_hi (exact: |g| <= 128 as an
 * unsigned byte, pair sums <= 2 * 128 * 127 < 2^15, then 32-bit). */
CPU_INLINE __m256i iq_chunk_avx2(const int8_t *g, const int8_t *q, int s_lo, int s_hi)
{
    const __m256i gv = _mm256_loadu_si256((const __m256i *)g), qv = _mm256_loadu_si256((const __m256i *)q);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(gv, gv), _mm256_sign_epi8(qv, gv));
    const __m256i sc = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)s_lo)),
                                               _mm_set1_epi16((short)s_hi), 1);
    return _mm256_madd_epi16(pairs, sc);
}

CPU_INLINE int32_t iq_hsum_avx2(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static int32_t iq_block_p_avx2(const struct quant_iq_ints *k, const int8_t *q, int n)
{
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < n / 32; c++)
        acc = _mm256_add_epi32(acc, iq_chunk_avx2(k->g + 32 * c, q + 32 * c, k->s[2 * c], k->s[2 * c + 1]));
    return iq_hsum_avx2(acc);
}

/* 16 bytes of IQ4 nibbles (elements 0..15 low, 16..31 high) through the codebook into g[32]. */
CPU_INLINE void iq4_nibbles_avx2(const uint8_t *qs, int8_t *g)
{
    static const int8_t kv[16] = QUANT_IQ4_VALUES;
    const __m128i tbl = _mm_loadu_si128((const __m128i *)kv), m4 = _mm_set1_epi8(15);
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i idx = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                                _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
    _mm256_storeu_si256((__m256i *)g, _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tbl), idx));
}

/* The block as integers: IQ4_NL and IQ4_XS by the shuffles above (scales read here, from the layout of
 * quant_iq.c), the other types through quant_iq_decode. */
static void iq_decode_avx2(enum gguf_dtype t, const uint8_t *b, struct quant_iq_ints *k)
{
    if (t == GGUF_DTYPE_IQ4_NL) {
        k->d = _cvtsh_ss((uint16_t)(b[0] | b[1] << 8));
        k->s[0] = k->s[1] = 1;
        iq4_nibbles_avx2(b + 2, k->g);
    } else if (t == GGUF_DTYPE_IQ4_XS) {
        k->d = _cvtsh_ss((uint16_t)(b[0] | b[1] << 8));
        const unsigned sh = (unsigned)(b[2] | b[3] << 8);
        for (int sb = 0; sb < 8; sb++) {
            const int ls = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((sh >> (2 * sb)) & 3) << 4;
            k->s[2 * sb] = k->s[2 * sb + 1] = (int16_t)(ls - 32);
            iq4_nibbles_avx2(b + 8 + 16 * sb, k->g + 32 * sb);
        }
    } else {
        quant_iq_decode(t, b, k);
    }
}

static void iq_tile_avx2(enum gguf_dtype t, int64_t n, const void *w, int64_t ws, int n_w, const void *x,
                         int64_t xs, int n_x, float *y, int64_t ys)
{
    iq_tile(t, n, w, ws, n_w, x, xs, n_x, y, ys, iq_decode_avx2, iq_block_p_avx2);
}
#endif /* IQ_HAVE_AVX2 */

/* ---------------------------------------------------------------- per-type entry points */

#define IQ_DEFINE(name, type, variant)                                                                    \
    static void tile_##name##_##variant(int64_t n, const void *w, int64_t ws, int n_w, const void *x,     \
                                        int64_t xs, int n_x, float *y, int64_t ys)                        \
    {                                                                                                     \
        iq_tile_##variant(type, n, w, ws, n_w, x, xs, n_x, y, ys);                                        \
    }                                                                                                     \
    static void dot_##name##_##variant(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out) \
    {                                                                                                     \
        iq_tile_##variant(type, n, w, 0, 1, x, xs, n_x, out, 1);                                          \
    }

#if IQ_HAVE_AVX2
#define IQ_DEFINE_ALL(name, type) IQ_DEFINE(name, type, scalar) IQ_DEFINE(name, type, avx2)
#define IQ_AVX2_ROW(name) {dot_##name##_avx2, tile_##name##_avx2, CPU_TILE_MAX_X}
#else
#define IQ_DEFINE_ALL(name, type) IQ_DEFINE(name, type, scalar)
#define IQ_AVX2_ROW(name) {NULL, NULL, 0}
#endif

IQ_DEFINE_ALL(iq4_nl, GGUF_DTYPE_IQ4_NL)
IQ_DEFINE_ALL(iq4_xs, GGUF_DTYPE_IQ4_XS)
IQ_DEFINE_ALL(iq3_xxs, GGUF_DTYPE_IQ3_XXS)
IQ_DEFINE_ALL(iq3_s, GGUF_DTYPE_IQ3_S)
IQ_DEFINE_ALL(iq2_xxs, GGUF_DTYPE_IQ2_XXS)
IQ_DEFINE_ALL(iq2_xs, GGUF_DTYPE_IQ2_XS)
IQ_DEFINE_ALL(iq2_s, GGUF_DTYPE_IQ2_S)
IQ_DEFINE_ALL(iq1_s, GGUF_DTYPE_IQ1_S)
IQ_DEFINE_ALL(iq1_m, GGUF_DTYPE_IQ1_M)
IQ_DEFINE_ALL(tq1_0, GGUF_DTYPE_TQ1_0)
IQ_DEFINE_ALL(tq2_0, GGUF_DTYPE_TQ2_0)
IQ_DEFINE_ALL(q8_k, GGUF_DTYPE_Q8_K)

struct iq_kernels {
    enum gguf_dtype type;
    struct cpu_kernel scalar, avx2;
};

#define IQ_ROW(name, type) {type, {dot_##name##_scalar, tile_##name##_scalar, CPU_TILE_MAX_X}, IQ_AVX2_ROW(name)}
static const struct iq_kernels iq_kernels[] = {
    IQ_ROW(iq4_nl, GGUF_DTYPE_IQ4_NL),   IQ_ROW(iq4_xs, GGUF_DTYPE_IQ4_XS), IQ_ROW(iq3_xxs, GGUF_DTYPE_IQ3_XXS),
    IQ_ROW(iq3_s, GGUF_DTYPE_IQ3_S),     IQ_ROW(iq2_xxs, GGUF_DTYPE_IQ2_XXS), IQ_ROW(iq2_xs, GGUF_DTYPE_IQ2_XS),
    IQ_ROW(iq2_s, GGUF_DTYPE_IQ2_S),     IQ_ROW(iq1_s, GGUF_DTYPE_IQ1_S),   IQ_ROW(iq1_m, GGUF_DTYPE_IQ1_M),
    IQ_ROW(tq1_0, GGUF_DTYPE_TQ1_0),     IQ_ROW(tq2_0, GGUF_DTYPE_TQ2_0),   IQ_ROW(q8_k, GGUF_DTYPE_Q8_K),
};

struct cpu_kernel cpu_iquant_variant(enum gguf_dtype t, enum cpu_kernel_variant v)
{
    for (size_t i = 0; i < sizeof iq_kernels / sizeof iq_kernels[0]; i++) {
        if (iq_kernels[i].type != t) continue;
        if (v == CPU_KERNEL_SCALAR) return iq_kernels[i].scalar;
        if (v == CPU_KERNEL_AVX2) return iq_kernels[i].avx2;
        break;
    }
    return (struct cpu_kernel){NULL, NULL, 0};
}
