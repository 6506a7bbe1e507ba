/* cpu_kquant — K-quant kernels and the 256-element activation blocks; see cpu_kquant.h for the layouts
 * and the exact arithmetic every variant performs.
 *
 * Invariant: the scalar reference (kq_dot_scalar) and the SIMD variants compute the same integer lanes
 * P_l and N_l (exact) and the same float operations in the same order, so their results are identical
 * bit for bit; tests compare them with memcmp. The reference decodes each super-block with plain loops
 * written from the block layouts (kq_decode), independently of the SIMD unpacking, so a wrong shift or
 * mask in either shows up as a difference. A row's result depends only on its own activation row.
 */
#include "backend/cpu_kquant.h"

#include <math.h>
#include <string.h>

#include "gguf/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KQ_HAVE_AVX2 1
#else
#define KQ_HAVE_AVX2 0
#endif
/* the AVX-VNNI and AVX-512 VNNI variants need GCC's target pragmas (as cpu_kernels.c's) */
#if KQ_HAVE_AVX2 && defined(__GNUC__) && !defined(__clang__) && (__GNUC__ >= 11)
#define KQ_HAVE_VNNI 1
#else
#define KQ_HAVE_VNNI 0
#endif

enum kq_kind { KQ_2, KQ_3, KQ_4, KQ_5, KQ_6 };

int cpu_kquant_type(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q2_K || t == GGUF_DTYPE_Q3_K || t == GGUF_DTYPE_Q4_K || t == GGUF_DTYPE_Q5_K ||
           t == GGUF_DTYPE_Q6_K;
}

static int64_t kq_block_bytes(int kind)
{
    static const int64_t bytes[] = {84, 110, 144, 176, 210};
    return bytes[kind];
}

int64_t cpu_q8k_row_bytes(int64_t n)
{
    return n / CPU_QKK * (int64_t)sizeof(struct cpu_q8k_block);
}

static uint16_t kq_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* ---------------------------------------------------------------- activations */

/* One block (the reference): d = amax / 127, q = x / d rounded to nearest even and clamped to +-127 (what
 * lrintf gives for a NaN or infinite product clamps to -127), bsum per 16. */
static void kq_quantize_block_ref(const float *x, struct cpu_q8k_block *b)
{
    float amax = 0.0f;
    for (int i = 0; i < CPU_QKK; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < CPU_QKK / 16; j++) {
        int sum = 0;
        for (int i = 16 * j; i < 16 * j + 16; i++) {
            long v = lrintf(x[i] * id);
            if (v > 127) v = 127;
            if (v < -127) v = -127;
            b->q[i] = (int8_t)v;
            sum += (int)v;
        }
        b->bsum[j] = (int16_t)sum;
    }
    b->d = d;
}

void cpu_quantize_row_q8k_ref(const float *x, void *y, int64_t n)
{
    struct cpu_q8k_block *b = y;
    for (int64_t i = 0; i < n / CPU_QKK; i++) kq_quantize_block_ref(x + i * CPU_QKK, b + i);
}

#if KQ_HAVE_AVX2
#include "backend/cpu_simd.h"

/* kq_quantize_block_ref in AVX2, the same bytes: the max of |x| is exact in any order and skips NaN like
 * the scalar compare; d and 1/d are the same scalar ops; x * id rounds to nearest even in both; vcvtps2dq
 * gives INT_MIN for NaN or out-of-range products, clamped to -127 like lrintf's LONG_MIN; sums are exact. */
static void kq_quantize_block_avx2(const float *x, struct cpu_q8k_block *b)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < CPU_QKK / 8; k++) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float d = _mm_cvtss_f32(h) / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (int c = 0; c < CPU_QKK / 32; c++) {
        __m256i qi[4];
        for (int k = 0; k < 4; k++) {
            __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * k), vid));
            qi[k] = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
        }
        /* packs work per 128-bit lane: 4-byte units come out as (x0a x1a x2a x3a x0b x1b x2b x3b) */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(b->q + 32 * c), p);
        /* sums of elements 0..15 (qi[0], qi[1]) and 16..31 (qi[2], qi[3]) */
        __m256i s = _mm256_hadd_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
        s = _mm256_hadd_epi32(s, s); /* per 128-bit half: (lo, hi, lo, hi) partial sums */
        __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        b->bsum[2 * c] = (int16_t)_mm_cvtsi128_si32(s2);
        b->bsum[2 * c + 1] = (int16_t)_mm_extract_epi32(s2, 1);
    }
    b->d = d;
}
#endif

void cpu_quantize_row_q8k(const float *x, void *y, int64_t n)
{
    struct cpu_q8k_block *b = y;
    for (int64_t i = 0; i < n / CPU_QKK; i++) {
#if KQ_HAVE_AVX2
        kq_quantize_block_avx2(x + i * CPU_QKK, b + i);
#else
        kq_quantize_block_ref(x + i * CPU_QKK, b + i);
#endif
    }
}

/* ---------------------------------------------------------------- scalar reference */

/* One weight super-block as the integers of cpu_kquant.h: quants u, sub-block scales s and offset
 * factors o (per 16 elements), the float scales d and c (c unused by Q3_K/Q6_K) and the folded offset
 * `off` (4 or 32 for Q3_K/Q6_K, whose o_j = s_j; else 0). */
struct kq_ints {
    uint8_t u[CPU_QKK];
    int s[16], o[16];
    float d, c;
    int off;
};

/* Q4_K/Q5_K scale (is_min 0) or min (1) of 32-element sub-block g from the 12 packed bytes: 6 bits each;
 * groups 0..3 in the low 6 bits of bytes g (scale) and g + 4 (min); groups 4..7 take their low 4 bits
 * from byte g + 4 (scale: low nibble, min: high nibble) and their high 2 bits from the top of byte g - 4
 * (scale) or g (min). */
static int kq_k4_value(const uint8_t *q, int g, int is_min)
{
    if (g < 4) return q[g + 4 * is_min] & 63;
    int low = is_min ? q[g + 4] >> 4 : q[g + 4] & 15;
    return low | (q[g - 4 + 4 * is_min] >> 6) << 4;
}

static void kq_decode(const uint8_t *b, int kind, struct kq_ints *k)
{
    k->off = kind == KQ_3 ? 4 : kind == KQ_6 ? 32 : 0;
    k->c = 0.0f;
    for (int e = 0; e < CPU_QKK; e++) {
        const int half = e / 128, quarter = e % 128 / 32, l = e % 32;
        switch (kind) {
        case KQ_2: /* qs at 16: element (half, quarter, l) in bits 2*quarter of qs[32 half + l] */
            k->u[e] = (uint8_t)((b[16 + 32 * half + l] >> (2 * quarter)) & 3);
            break;
        case KQ_3: /* hmask at 0 (bit 4 half + quarter of hmask[l]), qs at 32 as Q2_K */
            k->u[e] = (uint8_t)(((b[32 + 32 * half + l] >> (2 * quarter)) & 3) |
                                ((b[l] >> (4 * half + quarter)) & 1) << 2);
            break;
        case KQ_4: /* qs at 16: 32-element group g = e / 32 in the low (even g) or high nibbles of qs[32 (g/2) + l] */
            k->u[e] = (uint8_t)((b[16 + 32 * (e / 64) + l] >> (4 * (e / 32 % 2))) & 15);
            break;
        case KQ_5: /* qh at 16 (bit g of qh[l]), qs at 48 as Q4_K */
            k->u[e] = (uint8_t)(((b[48 + 32 * (e / 64) + l] >> (4 * (e / 32 % 2))) & 15) |
                                ((b[16 + l] >> (e / 32)) & 1) << 4);
            break;
        default: /* KQ_6: ql at 0, qh at 128: low 4 bits in ql[64 half + 32 (quarter % 2) + l] (low nibble for
                    quarters 0, 1), high 2 bits at bit 2*quarter of qh[32 half + l] */
            k->u[e] = (uint8_t)(((b[64 * half + 32 * (quarter % 2) + l] >> (4 * (quarter / 2))) & 15) |
                                ((b[128 + 32 * half + l] >> (2 * quarter)) & 3) << 4);
            break;
        }
    }
    for (int j = 0; j < 16; j++) {
        switch (kind) {
        case KQ_2: /* scales[16] at 0: low nibble scale, high nibble min */
            k->s[j] = b[j] & 15;
            k->o[j] = b[j] >> 4;
            break;
        case KQ_3: { /* 6-bit scales at 96, stored + 32: low 4 bits in byte j % 8 (nibble j / 8), high 2 bits
                        at bit 2 (j / 4) of byte 8 + j % 4 */
            const uint8_t *sc = b + 96;
            int low = (sc[j % 8] >> (4 * (j / 8))) & 15, high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
            k->s[j] = k->o[j] = (low | high << 4) - 32;
            break;
        }
        case KQ_4:
        case KQ_5:
            k->s[j] = kq_k4_value(b + 4, j / 2, 0);
            k->o[j] = kq_k4_value(b + 4, j / 2, 1);
            break;
        default: /* KQ_6: int8 scales at 192 */
            k->s[j] = k->o[j] = (int8_t)b[192 + j];
            break;
        }
    }
    switch (kind) {
    case KQ_2:
        k->d = quant_f16_to_f32(kq_rd16(b + 80));
        k->c = quant_f16_to_f32(kq_rd16(b + 82));
        break;
    case KQ_3:
        k->d = quant_f16_to_f32(kq_rd16(b + 108));
        break;
    case KQ_4:
    case KQ_5:
        k->d = quant_f16_to_f32(kq_rd16(b));
        k->c = quant_f16_to_f32(kq_rd16(b + 2));
        break;
    default:
        k->d = quant_f16_to_f32(kq_rd16(b + 208));
        break;
    }
}

/* The arithmetic of cpu_kquant.h, one row at a time. */
static void kq_dot_scalar(int kind, int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out)
{
    const int64_t nb = n / CPU_QKK, bb = kq_block_bytes(kind);
    for (int i = 0; i < n_x; i++) {
        const struct cpu_q8k_block *xb = (const struct cpu_q8k_block *)((const char *)x + i * xs);
        float a[8] = {0};
        for (int64_t b = 0; b < nb; b++) {
            struct kq_ints k;
            kq_decode((const uint8_t *)w + b * bb, kind, &k);
            for (int l = 0; l < 8; l++) {
                int32_t P = 0;
                for (int c = 0; c < 8; c++)
                    for (int t = 0; t < 4; t++) {
                        const int e = 32 * c + 4 * l + t;
                        P += k.s[e / 16] * k.u[e] * xb[b].q[e];
                    }
                const int32_t N = k.o[2 * l] * xb[b].bsum[2 * l] + k.o[2 * l + 1] * xb[b].bsum[2 * l + 1];
                const float dd = k.d * xb[b].d;
                if (k.off) {
                    a[l] = fmaf(dd, (float)(P - k.off * N), a[l]);
                } else {
                    a[l] = fmaf(dd, (float)P, a[l]);
                    a[l] = fmaf(-(k.c * xb[b].d), (float)N, a[l]);
                }
            }
        }
        out[i] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    }
}

#define KQ_DEFINE_SCALAR(name, kind)                                                                      \
    static void name##_scalar(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out)   \
    {                                                                                                     \
        kq_dot_scalar(kind, n, w, x, xs, n_x, out);                                                       \
    }                                                                                                     \
    static void name##_tile_scalar(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs,     \
                            int n_x, float *y, int64_t ys)                                                \
    {                                                                                                     \
        float t[CPU_TILE_MAX_X];                                                                          \
        for (int o = 0; o < n_w; o++) {                                                                   \
            kq_dot_scalar(kind, n, (const char *)w + o * ws, x, xs, n_x, t);                              \
            for (int i = 0; i < n_x; i++) y[i * ys + o] = t[i];                                           \
        }                                                                                                 \
    }
KQ_DEFINE_SCALAR(dot_q2_k, KQ_2)
KQ_DEFINE_SCALAR(dot_q3_k, KQ_3)
KQ_DEFINE_SCALAR(dot_q4_k, KQ_4)
KQ_DEFINE_SCALAR(dot_q5_k, KQ_5)
KQ_DEFINE_SCALAR(dot_q6_k, KQ_6)
#undef KQ_DEFINE_SCALAR

/* ---------------------------------------------------------------- AVX2 unpacking */
#if KQ_HAVE_AVX2

/* A super-block's scales as the kernels use them: s8 = the 16 sub-block scales as int8 (Q4_K/Q5_K: the 8
 * scales of 32-element sub-blocks in bytes 0..7), o16 = the 16 offset factors as int16 (Q3_K/Q6_K: the
 * folded -off * s_j), and the float scales d and c. */
struct kq_head {
    __m128i s8;
    __m256i o16;
    float d, c;
};

CPU_INLINE uint32_t kq_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Q4_K/Q5_K's 12 packed bytes (layout at kq_k4_value) as 16 bytes: the 8 scales, then the 8 mins. With
 * a0, a1, a2 the three little-endian words: scales 0..3 = a0 & 63 per byte, mins 0..3 = a1 & 63;
 * scales 4..7 = low nibbles of a2 | top 2 bits of a0 << 4; mins 4..7 = high nibbles of a2 | top of a1. */
CPU_INLINE __m128i kq_k4_scales(const uint8_t *q)
{
    const uint32_t a0 = kq_rd32(q), a1 = kq_rd32(q + 4), a2 = kq_rd32(q + 8);
    /* built in registers: four 32-bit stores and a 16-byte load would stall store forwarding */
    return _mm_setr_epi32((int)(a0 & 0x3f3f3f3fu), (int)((a2 & 0x0f0f0f0fu) | ((a0 >> 6) & 0x03030303u) << 4),
                          (int)(a1 & 0x3f3f3f3fu), (int)(((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 6) & 0x03030303u) << 4));
}

/* Q3_K's 12 packed bytes (layout at kq_decode) as 16 bytes, the stored values 0..63 (scale + 32). */
CPU_INLINE __m128i kq_q3_scales(const uint8_t *q)
{
    const uint32_t a0 = kq_rd32(q), a1 = kq_rd32(q + 4), a2 = kq_rd32(q + 8);
    return _mm_setr_epi32((int)((a0 & 0x0f0f0f0fu) | (a2 & 0x03030303u) << 4),
                          (int)((a1 & 0x0f0f0f0fu) | ((a2 >> 2) & 0x03030303u) << 4),
                          (int)(((a0 >> 4) & 0x0f0f0f0fu) | ((a2 >> 4) & 0x03030303u) << 4),
                          (int)(((a1 >> 4) & 0x0f0f0f0fu) | ((a2 >> 6) & 0x03030303u) << 4));
}

CPU_INLINE float kq_f16(const uint8_t *p)
{
    return _cvtsh_ss(kq_rd16(p));
}

CPU_INLINE struct kq_head kq_head_avx2(const uint8_t *b, int kind)
{
    struct kq_head h;
    const __m256i zero = _mm256_setzero_si256();
    h.c = 0.0f;
    if (kind == KQ_2) {
        const __m128i v = _mm_loadu_si128((const __m128i *)b), m4 = _mm_set1_epi8(15);
        h.s8 = _mm_and_si128(v, m4);
        h.o16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m4));
        h.d = kq_f16(b + 80);
        h.c = kq_f16(b + 82);
    } else if (kind == KQ_3) {
        h.s8 = _mm_sub_epi8(kq_q3_scales(b + 96), _mm_set1_epi8(32));
        h.o16 = _mm256_sub_epi16(zero, _mm256_slli_epi16(_mm256_cvtepi8_epi16(h.s8), 2)); /* -4 s */
        h.d = kq_f16(b + 108);
    } else if (kind == KQ_6) {
        h.s8 = _mm_loadu_si128((const __m128i *)(b + 192));
        h.o16 = _mm256_sub_epi16(zero, _mm256_slli_epi16(_mm256_cvtepi8_epi16(h.s8), 5)); /* -32 s */
        h.d = kq_f16(b + 208);
    } else { /* KQ_4, KQ_5: the mins (bytes 8..15) to 16-element sub-blocks: byte 8 + j / 2 */
        h.s8 = kq_k4_scales(b + 4);
        const __m128i pick = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
        h.o16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(h.s8, pick));
        h.d = kq_f16(b);
        h.c = kq_f16(b + 2);
    }
    return h;
}

/* Byte selectors of the scales of chunk c (elements 32c .. 32c + 31) from kq_head.s8: 16-element
 * sub-blocks 2c (bytes 0..15 of the chunk) and 2c + 1; for Q4_K/Q5_K sub-block c (all 32). */
static const uint8_t kq_pick16[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* The int16 scale of every pair of bytes of chunk c (lanes 0..7: bytes 0..15, lanes 8..15: 16..31). */
CPU_INLINE __m256i kq_chunk_scales(__m128i s8, int kind, int c)
{
    const __m128i pick = kind == KQ_4 || kind == KQ_5 ? _mm_set1_epi8((char)c)
                                                      : _mm_loadu_si128((const __m128i *)kq_pick16[c]);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, pick));
}

/* v shifted left by k bits (right by -k) in 16-bit lanes; callers mask so no bit crosses a byte. */
CPU_INLINE __m256i kq_shift(__m256i v, int k)
{
    return k > 0 ? _mm256_slli_epi16(v, k) : k < 0 ? _mm256_srli_epi16(v, -k) : v;
}

/* The 32 quants u of chunk c (elements 32c .. 32c + 31) in element order. */
CPU_INLINE __m256i kq_chunk_avx2(const uint8_t *b, int kind, int c)
{
    const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15);
    const int half = c / 4, quarter = c % 4;
    switch (kind) {
    case KQ_2:
        return _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)(b + 16 + 32 * half)), -2 * quarter), m2);
    case KQ_3: {
        __m256i lo =
            _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)(b + 32 + 32 * half)), -2 * quarter), m2);
        __m256i hi = _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)b), 2 - c), _mm256_set1_epi8(4));
        return _mm256_or_si256(lo, hi);
    }
    case KQ_4:
        return _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)(b + 16 + 32 * (c / 2))), -4 * (c % 2)),
                                m4);
    case KQ_5: {
        __m256i lo =
            _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)(b + 48 + 32 * (c / 2))), -4 * (c % 2)), m4);
        __m256i hi =
            _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)(b + 16)), 4 - c), _mm256_set1_epi8(16));
        return _mm256_or_si256(lo, hi);
    }
    default: {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(b + 64 * half + 32 * (quarter % 2)));
        lo = _mm256_and_si256(kq_shift(lo, -4 * (quarter / 2)), m4);
        __m256i hi =
            _mm256_and_si256(kq_shift(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * half)), 4 - 2 * quarter),
                             _mm256_set1_epi8(48));
        return _mm256_or_si256(lo, hi);
    }
    }
}

/* The SIMD kernels: dot_q2_k_avx2 ... from the template, then dot_q2_k_vnni ... (AVX-VNNI), then
 * dot_q2_k_vnni512 ... (AVX-512 VNNI on 256-bit vectors, 8 rows per call). */
#define CPU_VNNI 0
#define CPU_KMAX 4
#define CPU_KCASES CPU_QCASES4
#define CPU_KNAME(x) x##_avx2
#include "backend/cpu_kquant_simd.h"
#undef CPU_VNNI
#undef CPU_KNAME

#if KQ_HAVE_VNNI
#pragma GCC push_options
#pragma GCC target("avxvnni")
#define CPU_VNNI 1
#define CPU_KNAME(x) x##_vnni
#include "backend/cpu_kquant_simd.h"
#undef CPU_VNNI
#undef CPU_KNAME
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512vnni")
/* The AVX-512 variant unpacks chunks 2p and 2p + 1 together into one 512-bit vector (the same bytes as
 * two kq_chunk_avx2 calls side by side, in fewer instructions: the two chunks of a pair share their
 * source bytes, taken in a 256-bit broadcast and shifted by a different count per half). */
#define KQ_512 static inline __attribute__((always_inline))

KQ_512 __m512i kq_bcast(const uint8_t *p)
{
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* 16-bit lane shift counts: a in the low 256 bits, b in the high ones. */
KQ_512 __m512i kq_counts(int a, int b)
{
    return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}

/* bytes + add (bytes < add: an or) where the byte of the 32 at `bits` has bit c (low half) or bit c + 1
 * (high half) set. */
KQ_512 __m512i kq_or_bit(__m512i bytes, const uint8_t *bits, int c, int add)
{
    const __m512i m = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << c)), _mm256_set1_epi8((char)(1 << (c + 1))), 1);
    const __mmask64 k = _mm512_test_epi8_mask(kq_bcast(bits), m);
    return _mm512_mask_add_epi8(bytes, k, bytes, _mm512_set1_epi8((char)add));
}

/* The quants u of chunks 2p (low half) and 2p + 1 (high half), as kq_chunk_avx2 gives them. */
KQ_512 __m512i kq_pair512(const uint8_t *b, int kind, int p)
{
    const __m512i m2 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(15);
    const int c = 2 * p, half = c / 4, q0 = c % 4; /* quarters q0, q0 + 1 of the half */
    switch (kind) {
    case KQ_2:
        return _mm512_and_si512(_mm512_srlv_epi16(kq_bcast(b + 16 + 32 * half), kq_counts(2 * q0, 2 * q0 + 2)), m2);
    case KQ_3: {
        __m512i lo =
            _mm512_and_si512(_mm512_srlv_epi16(kq_bcast(b + 32 + 32 * half), kq_counts(2 * q0, 2 * q0 + 2)), m2);
        return kq_or_bit(lo, b, c, 4);
    }
    case KQ_4:
        return _mm512_and_si512(_mm512_srlv_epi16(kq_bcast(b + 16 + 32 * p), kq_counts(0, 4)), m4);
    case KQ_5: {
        __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(kq_bcast(b + 48 + 32 * p), kq_counts(0, 4)), m4);
        return kq_or_bit(lo, b + 16, c, 16);
    }
    default: { /* KQ_6: quarters 0, 1 = low nibbles of ql[64 half .. + 63], quarters 2, 3 = high nibbles */
        __m512i lo = _mm512_loadu_si512((const void *)(b + 64 * half));
        lo = _mm512_and_si512(q0 ? _mm512_srli_epi16(lo, 4) : lo, m4);
        const __m512i hi = _mm512_srlv_epi16(kq_bcast(b + 128 + 32 * half), kq_counts(2 * q0, 2 * q0 + 2));
        return _mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(hi, 4), _mm512_set1_epi8(0x30), 0xF8); /* a | (b & c) */
    }
    }
}

/* Byte selectors of the scales of chunk pair p from s8 in both 128-bit halves of a 256-bit vector: 16-element
 * sub-blocks 4p .. 4p + 3, 8 bytes each (for Q4_K/Q5_K: sub-blocks 2p, 2p + 1, 16 bytes each). */
KQ_512 __m512i kq_pair_scales512(__m256i s8x2, int kind, int p)
{
    __m256i pick;
    if (kind == KQ_4 || kind == KQ_5)
        pick = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi8((char)(2 * p))),
                                       _mm_set1_epi8((char)(2 * p + 1)), 1);
    else
        pick = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)kq_pick16[2 * p])),
                                       _mm_loadu_si128((const __m128i *)kq_pick16[2 * p + 1]), 1);
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(s8x2, pick));
}
#undef CPU_KMAX
#undef CPU_KCASES
#define CPU_VNNI 2
#define CPU_KMAX 8
#define CPU_KCASES CPU_QCASES8
#define CPU_KNAME(x) x##_vnni512
#include "backend/cpu_kquant_simd.h"
#undef CPU_VNNI
#undef CPU_KNAME
#pragma GCC pop_options

static int kq_have_vnni512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}
#endif
#undef CPU_KMAX
#undef CPU_KCASES

#endif /* KQ_HAVE_AVX2 */

struct cpu_kernel cpu_kquant_variant(enum gguf_dtype t, enum cpu_kernel_variant v)
{
    struct cpu_kernel k = {NULL, NULL, 0};
    if (!cpu_kquant_type(t)) return k;
    const int i = t == GGUF_DTYPE_Q2_K   ? 0
                  : t == GGUF_DTYPE_Q3_K ? 1
                  : t == GGUF_DTYPE_Q4_K ? 2
                  : t == GGUF_DTYPE_Q5_K ? 3
                                         : 4;
#define KQ_ROW(suffix, max_x)                                                                             \
    {                                                                                                     \
        {dot_q2_k_##suffix, dot_q2_k_tile_##suffix, max_x}, {dot_q3_k_##suffix, dot_q3_k_tile_##suffix, max_x}, \
            {dot_q4_k_##suffix, dot_q4_k_tile_##suffix, max_x},                                        \
            {dot_q5_k_##suffix, dot_q5_k_tile_##suffix, max_x},                                        \
            {dot_q6_k_##suffix, dot_q6_k_tile_##suffix, max_x},                                        \
    }
    static const struct cpu_kernel scalar[5] = KQ_ROW(scalar, CPU_TILE_MAX_X);
    switch (v) {
    case CPU_KERNEL_SCALAR:
        k = scalar[i];
        break;
    case CPU_KERNEL_AVX2: {
#if KQ_HAVE_AVX2
        static const struct cpu_kernel avx2[5] = KQ_ROW(avx2, CPU_DOT_MAX_X);
        k = avx2[i];
#endif
        break;
    }
    case CPU_KERNEL_VNNI: {
#if KQ_HAVE_VNNI
        static const struct cpu_kernel vnni[5] = KQ_ROW(vnni, CPU_DOT_MAX_X);
        if (__builtin_cpu_supports("avxvnni")) k = vnni[i];
#endif
        break;
    }
    case CPU_KERNEL_AVX512: {
#if KQ_HAVE_VNNI
        static const struct cpu_kernel v512[5] = KQ_ROW(vnni512, CPU_TILE_MAX_X);
        if (kq_have_vnni512()) k = v512[i];
#endif
        break;
    }
    }
#undef KQ_ROW
    return k;
}
