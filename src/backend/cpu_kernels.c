/* cpu_kernels — dot products, activation quantization and the tiled matmul; see cpu_kernels.h.
 *
 * Invariant (batch invariance): the value a kernel computes for (weight row, activation row) depends only
 * on those two rows. Each activation row has private accumulators; the order of operations is fixed by
 * the row length; n_x only decides how many rows share one decode of a weight block. The matmul splits
 * work over weight rows (output columns), never over the reduction dimension.
 *
 * Integer paths (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights, repacked into panels of 16 rows; see cpu_kernels.h
 * and cpu_kernels_qpanel.h): one vector lane per output, exact integer sums per block, then per block
 * acc = fma(d_w * d_x, isum, acc) (but for Q8_0 then acc = fma(m_w, s_x, acc)), in block order from the
 * first block to the last. The integer part may be split into any number of partial sums (exact), the
 * float part never is.
 * The K-quants (Q2_K .. Q6_K) have their own kernels and activation blocks: cpu_kquant.c; the codebook,
 * lattice and ternary types and Q8_K theirs in cpu_iquant.c (rows as the file has them, like the K-quants).
 */
#include "backend/cpu_kernels.h"
#include "backend/cpu_iquant.h"
#include "backend/cpu_kquant.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define CPU_HAVE_AVX2 1
#else
#define CPU_HAVE_AVX2 0
#endif
/* AVX-VNNI kernels are compiled with a target attribute and chosen at run time (cpu_kernel_best). */
#if CPU_HAVE_AVX2 && defined(__GNUC__) && !defined(__clang__) && (__GNUC__ >= 11)
#define CPU_HAVE_VNNI 1
#else
#define CPU_HAVE_VNNI 0
#endif

/* AVX-512F float kernels are compiled with target attributes and chosen at run time (cpu_kernel_best). */
#define CPU_HAVE_AVX512 CPU_HAVE_AVX2

#define CPU_TILE_ROWS 32 /* weight rows per task */

enum cpu_act cpu_type_act(enum gguf_dtype t)
{
    if (t == GGUF_DTYPE_Q8_0 || t == GGUF_DTYPE_Q4_0 || t == GGUF_DTYPE_Q4_1 || t == GGUF_DTYPE_Q5_0 ||
        t == GGUF_DTYPE_Q5_1)
        return CPU_ACT_Q8;
    if (t == GGUF_DTYPE_IQ4_NL) return CPU_ACT_Q8; /* blocks of 32, cpu_iquant.h */
    return cpu_kquant_type(t) || cpu_iquant_type(t) ? CPU_ACT_Q8K : CPU_ACT_F32;
}

int cpu_type_uses_q8(enum gguf_dtype t)
{
    return cpu_type_act(t) == CPU_ACT_Q8;
}

int64_t cpu_q8_row_bytes(int64_t n)
{
    return n / CPU_QK * (int64_t)sizeof(struct cpu_q8_block);
}

/* One block: d, s and q[32] of 32 floats (the reference). */
static void cpu_quantize_block(const float *xb, float *d_out, float *s_out, int8_t *q)
{
    float amax = 0.0f;
    for (int i = 0; i < CPU_QK; i++) {
        float a = fabsf(xb[i]);
        if (a > amax) amax = a;
    }
    float d = amax / 127.0f;
    float id = d > 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < CPU_QK; i++) {
        long v = lrintf(xb[i] * id);
        if (v > 127) v = 127;
        if (v < -127) v = -127;
        q[i] = (int8_t)v;
        sum += (int)v;
    }
    *d_out = d;
    *s_out = d * (float)sum;
}

#if CPU_HAVE_AVX2
/* cpu_quantize_block in AVX2, the same values: the max of |x| is exact in any order and skips NaN like
 * the scalar compare; d and 1/d are the same scalar ops; x * id rounds to nearest even in both (lrintf in
 * the default mode, vcvtps2dq); what lrintf and vcvtps2dq give for inf or NaN products both clamp to -127
 * (finite products stay near +-127); the integer sum is exact. */
static void cpu_quantize_block_avx2(const float *xb, float *d_out, float *s_out, int8_t *q)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 x[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        x[k] = _mm256_loadu_ps(xb + 8 * k);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, x[k]), m); /* a NaN |x| gives m */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    __m256i qi[4], acc = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        qi[k] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x[k], vid)), lo), hi);
        acc = _mm256_add_epi32(acc, qi[k]);
    }
    /* packs work per 128-bit lane: 4-byte units come out as (x0a x1a x2a x3a x0b x1b x2b x3b) */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    *d_out = d;
    *s_out = d * (float)_mm_cvtsi128_si32(s4);
}
#endif

typedef void (*cpu_quantize_block_fn)(const float *xb, float *d_out, float *s_out, int8_t *q);

static void cpu_quantize_row_with(cpu_quantize_block_fn block, const float *x, void *y, int64_t n)
{
    struct cpu_q8_block *t = y;
    for (int64_t b = 0; b < n / CPU_QK; b++, t++) block(x + b * CPU_QK, &t->d, &t->s, t->q);
}

void cpu_quantize_row_q8(const float *x, void *y, int64_t n)
{
#if CPU_HAVE_AVX2
    cpu_quantize_row_with(cpu_quantize_block_avx2, x, y, n);
#else
    cpu_quantize_row_with(cpu_quantize_block, x, y, n);
#endif
}

void cpu_quantize_row_q8_ref(const float *x, void *y, int64_t n)
{
    cpu_quantize_row_with(cpu_quantize_block, x, y, n);
}

/* Bytes of one ggml block (the integer types). */
static int64_t cpu_block_bytes(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q8_0   ? 34
           : t == GGUF_DTYPE_Q4_0 ? 18
           : t == GGUF_DTYPE_Q4_1 ? 20
           : t == GGUF_DTYPE_Q5_0 ? 22
                                  : 24;
}

/* 1 for the types with an offset m per block (Q4_1, Q5_1). */
static int cpu_has_min(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q4_1 || t == GGUF_DTYPE_Q5_1;
}

static int cpu_is_q5(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q5_0 || t == GGUF_DTYPE_Q5_1;
}

static int cpu_float_type(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_F32 || t == GGUF_DTYPE_F16 || t == GGUF_DTYPE_BF16;
}

int cpu_type_panels(enum gguf_dtype t)
{
    return cpu_float_type(t) || (cpu_type_uses_q8(t) && !cpu_iquant_type(t));
}

/* Bytes of a panel block's scales: f16 d[16], then the offsets' f16 m[16] (Q4_1, Q5_1); Q5's qh plane (64
 * bytes) follows, then the quants, at cpu_qp_quants. */
static int64_t cpu_qp_scales(enum gguf_dtype t)
{
    return cpu_has_min(t) ? 64 : 32;
}

static int64_t cpu_qp_quants(enum gguf_dtype t)
{
    return cpu_qp_scales(t) + (cpu_is_q5(t) ? 64 : 0);
}

/* The offset m_w of the types that store none, per unit of d_w: Q4_0's quants are taken as q + 8, Q5_0's
 * as q + 16 (Q8_0's are signed: no offset term). */
static float cpu_qp_m_of_d(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q5_0 ? -16.0f : -8.0f;
}

/* The little-endian 32-bit word at p (Q5's qh). */
static uint32_t cpu_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Element e of a ggml block (its fifth bit for Q5) within a panel block: step s = e / 4 (Q8_0), or s = k
 * for the low nibbles of qs bytes 4k .. 4k + 3 (elements 4k .. 4k + 3) and s = k + 4 for their high ones
 * (elements 16 + 4k ..); byte j = e % 4 of the step. */
static int cpu_qp_step(int e)
{
    return e < 16 ? e / 4 : 4 + (e - 16) / 4;
}

/* Rows p0 .. p0 + 15 of an integer matrix (src: row p0, n_valid rows left, nb blocks a row) as one panel at
 * dst (layout: cpu_kernels.h); rows past n_valid are zeros. */
static void cpu_repack_qp_panel(enum gguf_dtype t, const uint8_t *src, uint64_t rb, int64_t n_valid, int64_t nb,
                                uint8_t *dst)
{
    const int64_t bb = cpu_block_bytes(t), sc = cpu_qp_scales(t), qs_at = cpu_qp_quants(t);
    memset(dst, 0, (size_t)(CPU_PANEL * rb));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = dst + b * CPU_PANEL * bb;
        for (int64_t o = 0; o < n_valid && o < CPU_PANEL; o++) {
            const uint8_t *blk = src + (uint64_t)o * rb + (uint64_t)(b * bb);
            memcpy(pb + 2 * o, blk, 2); /* d */
            if (cpu_has_min(t)) memcpy(pb + 32 + 2 * o, blk + 2, 2); /* m */
            const uint8_t *qs = blk + (cpu_has_min(t) ? 4 : 2) + (cpu_is_q5(t) ? 4 : 0);
            if (t == GGUF_DTYPE_Q8_0) { /* step s = elements 4s .. 4s + 3 */
                for (int s8 = 0; s8 < 8; s8++) memcpy(pb + qs_at + 64 * s8 + 4 * o, qs + 4 * s8, 4);
                continue;
            }
            for (int k = 0; k < 4; k++) memcpy(pb + qs_at + 64 * k + 4 * o, qs + 4 * k, 4);
            if (cpu_is_q5(t)) { /* plane byte 4o + j: bit s = the fifth bit of step s's byte j */
                const uint32_t h = cpu_le32(blk + (cpu_has_min(t) ? 4 : 2));
                for (int e = 0; e < 32; e++) pb[sc + 4 * o + e % 4] |= (uint8_t)(((h >> e) & 1) << cpu_qp_step(e));
            }
        }
    }
}

int64_t cpu_packed_rows(enum gguf_dtype t, int64_t n_out)
{
    return cpu_type_panels(t) ? (n_out + CPU_PANEL - 1) / CPU_PANEL * CPU_PANEL : n_out;
}

void cpu_repack_rows(enum gguf_dtype t, const void *src, int64_t n_in, int64_t n_out, int64_t r0, int64_t r1,
                     void *dst)
{
    const uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n_in);
    const uint8_t *s = src;
    uint8_t *d = dst;
    if (!cpu_type_panels(t)) { /* the K-quants and cpu_iquant's types: as they are */
        memcpy(d + (uint64_t)r0 * rb, s + (uint64_t)r0 * rb, (size_t)((uint64_t)(r1 - r0) * rb));
        return;
    }
    assert(r0 % CPU_PANEL == 0 && (r1 % CPU_PANEL == 0 || r1 == n_out));
    if (cpu_type_uses_q8(t)) {
        for (int64_t p0 = r0; p0 < r1; p0 += CPU_PANEL)
            cpu_repack_qp_panel(t, s + (uint64_t)p0 * rb, rb, n_out - p0, n_in / CPU_QK, d + (uint64_t)p0 * rb);
        return;
    }
    const size_t esz = t == GGUF_DTYPE_F32 ? 4 : 2;
    const int64_t end = r1 == n_out ? cpu_packed_rows(t, n_out) : r1;
    for (int64_t p0 = r0; p0 < end; p0 += CPU_PANEL) {
        uint8_t *panel = d + (uint64_t)p0 * rb;
        for (int64_t j = 0; j < CPU_PANEL; j++) {
            const uint8_t *row = s + (uint64_t)(p0 + j) * rb;
            for (int64_t k = 0; k < n_in; k++) {
                uint8_t *e = panel + ((uint64_t)k * CPU_PANEL + (uint64_t)j) * esz;
                if (p0 + j < n_out)
                    memcpy(e, row + (uint64_t)k * esz, esz);
                else
                    memset(e, 0, esz);
            }
        }
    }
}

/* ---------------------------------------------------------------- scalar reference */

static float cpu_bf16(uint16_t h)
{
    return quant_bf16_to_f32(h);
}

/* Element i of a float weight row or panel. kind: 0 f32, 1 f16, 2 bf16. */
static float cpu_wval(const void *w, int64_t i, int kind)
{
    if (kind == 0) return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    return kind == 1 ? quant_f16_to_f32(h) : cpu_bf16(h);
}

/* The float types' reference (and their dot on an unpacked row): y = fma chain over k from 0. */
static void dot_float_scalar(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out, int kind)
{
    for (int i = 0; i < n_x; i++) {
        const float *xf = (const float *)((const char *)x + i * xs);
        float s = 0.0f;
        for (int64_t k = 0; k < n; k++) s = fmaf(cpu_wval(w, k, kind), xf[k], s);
        out[i] = s;
    }
}

/* The same chain per output from panels (w at a panel start, ws the source row bytes). */
static void tile_float_scalar(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs, int n_x,
                              float *y, int64_t ys, int kind)
{
    for (int o = 0; o < n_w; o++) {
        const char *p = (const char *)w + (int64_t)(o - o % CPU_PANEL) * ws;
        for (int i = 0; i < n_x; i++) {
            const float *xf = (const float *)((const char *)x + i * xs);
            float s = 0.0f;
            for (int64_t k = 0; k < n; k++) s = fmaf(cpu_wval(p, k * CPU_PANEL + o % CPU_PANEL, kind), xf[k], s);
            y[i * ys + o] = s;
        }
    }
}

#define DEFINE_FLOAT_SCALAR(t, kind)                                                                      \
    static void dot_##t##_scalar(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out) \
    {                                                                                                     \
        dot_float_scalar(n, w, x, xs, n_x, out, kind);                                                    \
    }                                                                                                     \
    static void tile_##t##_scalar(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs, \
                                  int n_x, float *y, int64_t ys)                                          \
    {                                                                                                     \
        tile_float_scalar(n, w, ws, n_w, x, xs, n_x, y, ys, kind);                                        \
    }
DEFINE_FLOAT_SCALAR(f32, 0)
DEFINE_FLOAT_SCALAR(f16, 1)
DEFINE_FLOAT_SCALAR(bf16, 2)

static uint16_t cpu_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* Block b of a quantized activation row. */
static void cpu_act_block(const uint8_t *row, int64_t b, float *d, float *s, int8_t *q)
{
    const struct cpu_q8_block *t = (const struct cpu_q8_block *)row + b;
    *d = t->d;
    *s = t->s;
    memcpy(q, t->q, 32);
}

float cpu_q8_value(const void *row, int64_t n, int64_t i)
{
    (void)n; /* the blocks lie one after another */
    float d, s;
    int8_t q[32];
    cpu_act_block(row, i / CPU_QK, &d, &s, q);
    return d * (float)q[i % CPU_QK];
}

/* Block b of output o as the panel kernels see it: d, m (the offset of Q4_1 and Q5_1, -8 d for Q4_0, -16 d
 * for Q5_0, 0 for Q8_0) and the 32 quants the integer sum takes (Q4, Q5: unsigned, Q8_0: q) in element
 * order; from a ggml row (panel NULL) or from a panel (row NULL). */
static void cpu_qp_weight_block(enum gguf_dtype t, const uint8_t *row, const uint8_t *panel, int o, int64_t b,
                                float *d, float *m, int *u)
{
    const int64_t bb = cpu_block_bytes(t), nq = t == GGUF_DTYPE_Q8_0 ? 32 : 16;
    uint8_t qs[32];  /* the ggml block's quant bytes */
    uint32_t h = 0; /* Q5's fifth bits, bit e for element e */
    if (row) {
        const uint8_t *blk = row + b * bb, *q = blk + (cpu_has_min(t) ? 4 : 2);
        *d = quant_f16_to_f32(cpu_rd16(blk));
        *m = cpu_has_min(t) ? quant_f16_to_f32(cpu_rd16(blk + 2)) : 0.0f;
        if (cpu_is_q5(t)) h = cpu_le32(q), q += 4;
        memcpy(qs, q, (size_t)nq);
    } else {
        const uint8_t *pb = panel + b * CPU_PANEL * bb, *plane = pb + cpu_qp_scales(t), *q = pb + cpu_qp_quants(t);
        *d = quant_f16_to_f32(cpu_rd16(pb + 2 * o));
        *m = cpu_has_min(t) ? quant_f16_to_f32(cpu_rd16(pb + 32 + 2 * o)) : 0.0f;
        for (int e = 0; e < nq; e++) qs[e] = q[64 * (e / 4) + 4 * o + e % 4];
        if (cpu_is_q5(t))
            for (int e = 0; e < 32; e++) h |= (uint32_t)((plane[4 * o + e % 4] >> cpu_qp_step(e)) & 1) << e;
    }
    if (t == GGUF_DTYPE_Q8_0) {
        for (int e = 0; e < 32; e++) u[e] = (int8_t)qs[e];
        return;
    }
    if (!cpu_has_min(t)) *m = cpu_qp_m_of_d(t) * *d;
    for (int e = 0; e < 16; e++) {
        u[e] = (qs[e] & 15) | (int)((h >> e) & 1) << 4;
        u[e + 16] = (qs[e] >> 4) | (int)((h >> (e + 16)) & 1) << 4;
    }
}

/* One output of the panel kernels (cpu_kernels_qpanel.h), their float part in scalar code: per block,
 * acc = fma(d_w * d_x, isum, acc), then but for Q8_0 acc = fma(m_w, s_x, acc). */
static float cpu_qp_ref(enum gguf_dtype t, int64_t n, const uint8_t *row, const uint8_t *panel, int o,
                        const uint8_t *xr)
{
    const int64_t nb = n / CPU_QK;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        float dw, mw, dx, sx;
        int u[32];
        int8_t qx[32];
        cpu_qp_weight_block(t, row, panel, o, b, &dw, &mw, u);
        cpu_act_block(xr, b, &dx, &sx, qx);
        int isum = 0;
        for (int k = 0; k < 32; k++) isum += u[k] * qx[k];
        acc = fmaf(dw * dx, (float)isum, acc);
        if (t != GGUF_DTYPE_Q8_0) acc = fmaf(mw, sx, acc);
    }
    return acc;
}

/* The panel types' dot of every variant, on an unpacked (ggml) row as for the float types, and their
 * scalar tile. */
#define DEFINE_QP_SCALAR(name, t)                                                                         \
    static void dot_##name##_row(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out) \
    {                                                                                                     \
        for (int i = 0; i < n_x; i++) out[i] = cpu_qp_ref(t, n, w, NULL, 0, (const uint8_t *)x + i * xs); \
    }                                                                                                     \
    static void tile_##name##_scalar(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs, \
                                     int n_x, float *y, int64_t ys)                                       \
    {                                                                                                     \
        for (int o = 0; o < n_w; o++)                                                                     \
            for (int i = 0; i < n_x; i++)                                                                 \
                y[i * ys + o] = cpu_qp_ref(t, n, NULL, (const uint8_t *)w + (int64_t)(o - o % CPU_PANEL) * ws, \
                                           o % CPU_PANEL, (const uint8_t *)x + i * xs);                   \
    }
DEFINE_QP_SCALAR(q4_0, GGUF_DTYPE_Q4_0)
DEFINE_QP_SCALAR(q4_1, GGUF_DTYPE_Q4_1)
DEFINE_QP_SCALAR(q8_0, GGUF_DTYPE_Q8_0)
DEFINE_QP_SCALAR(q5_0, GGUF_DTYPE_Q5_0)
DEFINE_QP_SCALAR(q5_1, GGUF_DTYPE_Q5_1)

/* ---------------------------------------------------------------- AVX2 / FMA */
#if CPU_HAVE_AVX2

#include "backend/cpu_simd.h"

/* Float weights (F32, F16, BF16) are multiplied from panels (cpu_kernels.h): output o of panel p is lane
 * o % 16 of the vectors at p's k * 16, so a vector load gives one k for 16 outputs and each output's
 * y = fma(w_k, x_k, y) runs for k = 0, 1, ... in its own lane — the same chain whatever the vector
 * width, as in the scalar reference (dot_float_scalar). kind: 0 f32, 1 f16, 2 bf16. */

/* Loads 8 weight elements as floats. */
CPU_INLINE __m256 load8(const void *w, int64_t k, int kind)
{
    if (kind == 0) return _mm256_loadu_ps((const float *)w + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
    if (kind == 1) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Outputs [0, m) (m <= 16) of one 16-lane result given as two halves, to y. */
CPU_INLINE void store16_avx2(float *y, __m256 lo, __m256 hi, int m)
{
    if (m == CPU_PANEL) {
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
        return;
    }
    float t[CPU_PANEL];
    _mm256_storeu_ps(t, lo);
    _mm256_storeu_ps(t + 8, hi);
    memcpy(y, t, (size_t)m * sizeof(float));
}

/* One panel x NX rows: 2 NX accumulators (16 lanes as two halves). */
CPU_INLINE void panel_avx2_nx(int64_t n, const char *p, const float *const *xr, int NX, int kind, float *y,
                              int64_t ys, int m)
{
    __m256 lo[CPU_DOT_MAX_X], hi[CPU_DOT_MAX_X];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        __m256 w0 = load8(p, k * CPU_PANEL, kind), w1 = load8(p, k * CPU_PANEL + 8, kind);
#pragma GCC unroll 4
        for (int i = 0; i < NX; i++) {
            __m256 b = _mm256_broadcast_ss(xr[i] + k);
            lo[i] = _mm256_fmadd_ps(w0, b, lo[i]);
            hi[i] = _mm256_fmadd_ps(w1, b, hi[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) store16_avx2(y + i * ys, lo[i], hi[i], m);
}

CPU_INLINE void tile_panels_avx2_nx(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs, int NX,
                                    int kind, float *y, int64_t ys)
{
    const float *xr[CPU_DOT_MAX_X];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) xr[i] = (const float *)((const char *)x + i * xs);
    for (int o = 0; o < n_w; o += CPU_PANEL) {
        const int m = n_w - o < CPU_PANEL ? n_w - o : CPU_PANEL;
        panel_avx2_nx(n, (const char *)w + (int64_t)o * ws, xr, NX, kind, y + o, ys, m);
    }
}

#define DEFINE_PANEL_TILE(name, body, kind)                                                               \
    static void name(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs, int n_x,   \
                     float *y, int64_t ys)                                                                \
    {                                                                                                     \
        switch (n_x) {                                                                                    \
        case 1: body(n, w, ws, n_w, x, xs, 1, kind, y, ys); break;                                        \
        case 2: body(n, w, ws, n_w, x, xs, 2, kind, y, ys); break;                                        \
        case 3: body(n, w, ws, n_w, x, xs, 3, kind, y, ys); break;                                        \
        default: body(n, w, ws, n_w, x, xs, 4, kind, y, ys); break;                                       \
        }                                                                                                 \
    }
DEFINE_PANEL_TILE(tile_f32_avx2, tile_panels_avx2_nx, 0)
DEFINE_PANEL_TILE(tile_f16_avx2, tile_panels_avx2_nx, 1)
DEFINE_PANEL_TILE(tile_bf16_avx2, tile_panels_avx2_nx, 2)

#if CPU_HAVE_AVX512
/* AVX-512F: up to 4 panels x NX rows per pass (16 accumulators), one zmm per panel and k. */
#define CPU_512 static inline __attribute__((always_inline, target("avx512f")))

CPU_512 __m512 load16(const void *w, int64_t k, int kind)
{
    if (kind == 0) return _mm512_loadu_ps((const float *)w + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    if (kind == 1) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

CPU_512 void panels_512(int64_t n, const char *p, int64_t pb, int NP, const float *const *xr, int NX, int kind,
                        float *y, int64_t ys, int m_last)
{
    __m512 acc[CPU_DOT_MAX_X][4];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NP; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NP; j++) wv[j] = load16(p + j * pb, k * CPU_PANEL, kind);
#pragma GCC unroll 4
        for (int i = 0; i < NX; i++) {
            __m512 b = _mm512_set1_ps(xr[i][k]);
#pragma GCC unroll 4
            for (int j = 0; j < NP; j++) acc[i][j] = _mm512_fmadd_ps(wv[j], b, acc[i][j]);
        }
    }
    const __mmask16 last = (__mmask16)((1u << m_last) - 1u);
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NP; j++)
            _mm512_mask_storeu_ps(y + i * ys + j * CPU_PANEL, j + 1 < NP ? 0xFFFF : last, acc[i][j]);
}

CPU_512 void tile_panels_512_nx(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs, int NX,
                                int kind, float *y, int64_t ys)
{
    const float *xr[CPU_DOT_MAX_X];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) xr[i] = (const float *)((const char *)x + i * xs);
    const int64_t pb = CPU_PANEL * ws;
    int o = 0;
    for (; o + 4 * CPU_PANEL <= n_w; o += 4 * CPU_PANEL)
        panels_512(n, (const char *)w + (int64_t)o * ws, pb, 4, xr, NX, kind, y + o, ys, CPU_PANEL);
    const int rest = n_w - o, np = (rest + CPU_PANEL - 1) / CPU_PANEL, m = rest - (np - 1) * CPU_PANEL;
    const char *p = (const char *)w + (int64_t)o * ws;
    if (np == 3) panels_512(n, p, pb, 3, xr, NX, kind, y + o, ys, m);
    if (np == 2) panels_512(n, p, pb, 2, xr, NX, kind, y + o, ys, m);
    if (np == 1) panels_512(n, p, pb, 1, xr, NX, kind, y + o, ys, m);
}

#define DEFINE_PANEL_TILE_512(name, kind)                                                                 \
    __attribute__((target("avx512f"))) DEFINE_PANEL_TILE(name, tile_panels_512_nx, kind)
DEFINE_PANEL_TILE_512(tile_f32_avx512, 0)
DEFINE_PANEL_TILE_512(tile_f16_avx512, 1)
DEFINE_PANEL_TILE_512(tile_bf16_avx512, 2)
#endif

CPU_INLINE uint32_t cpu_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The integer kernels: tile_q4_0_avx2 ... from the template, then tile_q4_0_vnni ... (AVX-VNNI), then
 * tile_q4_0_vnni512 ... (AVX-512 VNNI, 8 rows per call). */
#define CPU_VNNI 0
#define CPU_QMAX 4
#define CPU_QCASES CPU_QCASES4
#define CPU_QNAME(x) x##_avx2
#include "backend/cpu_kernels_qpanel.h"
#undef CPU_VNNI
#undef CPU_QNAME

#if CPU_HAVE_VNNI
#pragma GCC push_options
#pragma GCC target("avxvnni")
#define CPU_VNNI 1
#define CPU_QNAME(x) x##_vnni
#include "backend/cpu_kernels_qpanel.h"
#undef CPU_VNNI
#undef CPU_QNAME
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512vnni")
#undef CPU_QMAX
#undef CPU_QCASES
#define CPU_VNNI 2
#define CPU_QMAX 8
#define CPU_QCASES CPU_QCASES8
#define CPU_QNAME(x) x##_vnni512
#include "backend/cpu_kernels_qpanel.h"
#undef CPU_VNNI
#undef CPU_QNAME
#pragma GCC pop_options

static int cpu_have_vnni512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}
#endif
#undef CPU_QMAX
#undef CPU_QCASES

#endif /* CPU_HAVE_AVX2 */

/* The kernels of one variant for one type; both NULL when unavailable. */
struct cpu_kernel cpu_kernel_variant(enum gguf_dtype t, enum cpu_kernel_variant v)
{
    struct cpu_kernel k = {NULL, NULL, 0};
    if (cpu_kquant_type(t)) return cpu_kquant_variant(t, v);
    if (cpu_iquant_type(t)) return cpu_iquant_variant(t, v);
#define K2(dot, tile) k = (struct cpu_kernel){dot, tile, CPU_DOT_MAX_X}
#define K8(dot, tile) k = (struct cpu_kernel){dot, tile, CPU_TILE_MAX_X}
    switch (v) {
    case CPU_KERNEL_SCALAR:
        switch (t) {
        case GGUF_DTYPE_F32: K2(dot_f32_scalar, tile_f32_scalar); break;
        case GGUF_DTYPE_F16: K2(dot_f16_scalar, tile_f16_scalar); break;
        case GGUF_DTYPE_BF16: K2(dot_bf16_scalar, tile_bf16_scalar); break;
        case GGUF_DTYPE_Q8_0: K2(dot_q8_0_row, tile_q8_0_scalar); break;
        case GGUF_DTYPE_Q4_0: K2(dot_q4_0_row, tile_q4_0_scalar); break;
        case GGUF_DTYPE_Q4_1: K2(dot_q4_1_row, tile_q4_1_scalar); break;
        case GGUF_DTYPE_Q5_0: K2(dot_q5_0_row, tile_q5_0_scalar); break;
        case GGUF_DTYPE_Q5_1: K2(dot_q5_1_row, tile_q5_1_scalar); break;
        default: break;
        }
        break;
    case CPU_KERNEL_AVX2:
#if CPU_HAVE_AVX2
        switch (t) {
        case GGUF_DTYPE_F32: K2(dot_f32_scalar, tile_f32_avx2); break;
        case GGUF_DTYPE_F16: K2(dot_f16_scalar, tile_f16_avx2); break;
        case GGUF_DTYPE_BF16: K2(dot_bf16_scalar, tile_bf16_avx2); break;
        case GGUF_DTYPE_Q8_0: K2(dot_q8_0_row, tile_q8_0_avx2); break;
        case GGUF_DTYPE_Q4_0: K2(dot_q4_0_row, tile_q4_0_avx2); break;
        case GGUF_DTYPE_Q4_1: K2(dot_q4_1_row, tile_q4_1_avx2); break;
        case GGUF_DTYPE_Q5_0: K2(dot_q5_0_row, tile_q5_0_avx2); break;
        case GGUF_DTYPE_Q5_1: K2(dot_q5_1_row, tile_q5_1_avx2); break;
        default: break;
        }
#endif
        break;
    case CPU_KERNEL_VNNI:
#if CPU_HAVE_VNNI
        if (!__builtin_cpu_supports("avxvnni")) break;
        switch (t) {
        case GGUF_DTYPE_Q8_0: K2(dot_q8_0_row, tile_q8_0_vnni); break;
        case GGUF_DTYPE_Q4_0: K2(dot_q4_0_row, tile_q4_0_vnni); break;
        case GGUF_DTYPE_Q4_1: K2(dot_q4_1_row, tile_q4_1_vnni); break;
        case GGUF_DTYPE_Q5_0: K2(dot_q5_0_row, tile_q5_0_vnni); break;
        case GGUF_DTYPE_Q5_1: K2(dot_q5_1_row, tile_q5_1_vnni); break;
        default: break;
        }
#endif
        break;
    case CPU_KERNEL_AVX512:
#if CPU_HAVE_AVX512
        if (!__builtin_cpu_supports("avx512f")) break;
        switch (t) {
        case GGUF_DTYPE_F32: K2(dot_f32_scalar, tile_f32_avx512); break;
        case GGUF_DTYPE_F16: K2(dot_f16_scalar, tile_f16_avx512); break;
        case GGUF_DTYPE_BF16: K2(dot_bf16_scalar, tile_bf16_avx512); break;
#if CPU_HAVE_VNNI
        case GGUF_DTYPE_Q8_0: if (cpu_have_vnni512()) K8(dot_q8_0_row, tile_q8_0_vnni512); break;
        case GGUF_DTYPE_Q4_0: if (cpu_have_vnni512()) K8(dot_q4_0_row, tile_q4_0_vnni512); break;
        case GGUF_DTYPE_Q4_1: if (cpu_have_vnni512()) K8(dot_q4_1_row, tile_q4_1_vnni512); break;
        case GGUF_DTYPE_Q5_0: if (cpu_have_vnni512()) K8(dot_q5_0_row, tile_q5_0_vnni512); break;
        case GGUF_DTYPE_Q5_1: if (cpu_have_vnni512()) K8(dot_q5_1_row, tile_q5_1_vnni512); break;
#endif
        default: break;
        }
#endif
        break;
    }
#undef K2
#undef K8
    return k;
}

uint64_t cpu_weight_types(void)
{
    uint64_t types = 0;
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const enum gguf_dtype ty = (enum gguf_dtype)t;
        if (quant_can_dequantize(ty) && cpu_kernel_variant(ty, CPU_KERNEL_SCALAR).tile) types |= 1ull << t;
    }
    return types;
}

/* The most capable variant cpu_kernel_best may use: NIGHTSHIFT_CPU_KERNELS=scalar or avx2 (plain AVX2,
 * no VNNI or AVX-512) caps it, for comparing variants on one machine; read once. */
enum cpu_kernel_variant cpu_kernel_cap(void)
{
    static int cap = -1; /* a racing first read stores the same value */
    if (cap < 0) {
        const char *e = getenv("NIGHTSHIFT_CPU_KERNELS");
        cap = e && strcmp(e, "scalar") == 0 ? CPU_KERNEL_SCALAR : e && strcmp(e, "avx2") == 0 ? CPU_KERNEL_AVX2
                                                                                               : CPU_KERNEL_AVX512;
    }
    return (enum cpu_kernel_variant)cap;
}

/* The kernels cpu_kernel_best returns, per type: chosen once (they depend only on the type, the CPU and
 * the cap), since every matmul asks. A racing first call stores the same values. */
static struct cpu_kernel cpu_best[GGUF_DTYPE_COUNT_MAX];
static int cpu_best_ready;

struct cpu_kernel cpu_kernel_best(enum gguf_dtype t)
{
    if (!__atomic_load_n(&cpu_best_ready, __ATOMIC_ACQUIRE)) {
        static const enum cpu_kernel_variant order[] = {CPU_KERNEL_AVX512, CPU_KERNEL_VNNI, CPU_KERNEL_AVX2,
                                                        CPU_KERNEL_SCALAR};
        const enum cpu_kernel_variant cap = cpu_kernel_cap();
        for (int ty = 0; ty < GGUF_DTYPE_COUNT_MAX; ty++) {
            struct cpu_kernel k = {NULL, NULL, 0};
            for (size_t i = 0; i < sizeof order / sizeof order[0] && !k.tile; i++)
                if (order[i] <= cap) k = cpu_kernel_variant((enum gguf_dtype)ty, order[i]);
            cpu_best[ty] = k;
        }
        __atomic_store_n(&cpu_best_ready, 1, __ATOMIC_RELEASE);
    }
    if ((unsigned)t >= GGUF_DTYPE_COUNT_MAX) return (struct cpu_kernel){NULL, NULL, 0};
    return cpu_best[t];
}

/* ---------------------------------------------------------------- matmul */

static int64_t cpu_gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

struct cpu_matmul_ctx {
    const struct cpu_matmul_job *jobs;
    int n_jobs;
    int n_units;               /* units of tiles: the jobs, except that a paired 0 and 1 form unit 0 */
    int unit_job[9];           /* first job of each unit */
    int64_t unit_tile[9];      /* tile rows (outputs per task) of each unit */
    int64_t tile_start[10];    /* first tile of each unit */
    cpu_tile_fn tile_fn[8];    /* cpu_kernel_best(type).tile of each job, chosen once per call */
    int max_x[8];              /* and its rows per call */
    const float *x;
    const void *xq, *xk;
    int32_t n_rows;
    int32_t rows_per_block; /* a multiple of CPU_TILE_MAX_X */
    int64_t n_row_blocks;
    int paired;
    cpu_matmul_epilogue epilogue;
    void *epilogue_arg;
};

/* y rows [row0, row1) x outputs [o0, o1) of job j. */
static void cpu_matmul_tile(const struct cpu_matmul_ctx *c, int j, int64_t o0, int64_t o1, int32_t row0, int32_t row1)
{
    const struct cpu_matmul_job *job = &c->jobs[j];
    const struct model_weight *w = job->w;
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    const uint64_t row_bytes = gguf_row_bytes((uint32_t)w->type, (uint64_t)n_in);
    const enum cpu_act act = cpu_type_act(w->type);
    cpu_tile_fn tile_fn = c->tile_fn[j];
    const char *x = act == CPU_ACT_Q8    ? (const char *)c->xq
                    : act == CPU_ACT_Q8K ? (const char *)c->xk
                                         : (const char *)c->x;
    const int64_t x_stride = act == CPU_ACT_Q8    ? cpu_q8_row_bytes(n_in)
                             : act == CPU_ACT_Q8K ? cpu_q8k_row_bytes(n_in)
                                                  : n_in * 4;
    /* The tile of weight rows stays in cache while the block's input rows pass over it. */
    const int mx = c->max_x[j];
    for (int32_t r0 = row0; r0 < row1; r0 += mx) {
        int n_x = row1 - r0 < mx ? row1 - r0 : mx;
        tile_fn(n_in, (const char *)w->data + (uint64_t)o0 * row_bytes, (int64_t)row_bytes, (int)(o1 - o0),
                x + r0 * x_stride, x_stride, n_x, job->y + (int64_t)r0 * n_out + o0, n_out);
    }
}

/* Task = (tile of weight rows of one unit, block of activation rows), then the epilogue. */
static void cpu_matmul_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct cpu_matmul_ctx *c = arg;
    const int64_t tile = task / c->n_row_blocks;
    const int32_t row0 = (int32_t)(task % c->n_row_blocks) * c->rows_per_block;
    const int32_t row1 = c->n_rows - row0 < c->rows_per_block ? c->n_rows : row0 + c->rows_per_block;
    int u = 0;
    while (u + 1 < c->n_units && tile >= c->tile_start[u + 1]) u++;
    const int j = c->unit_job[u];
    const int64_t n_out = c->jobs[j].w->ne[1];
    const int64_t o0 = (tile - c->tile_start[u]) * c->unit_tile[u];
    const int64_t o1 = o0 + c->unit_tile[u] < n_out ? o0 + c->unit_tile[u] : n_out;
    cpu_matmul_tile(c, j, o0, o1, row0, row1);
    if (c->paired && u == 0) cpu_matmul_tile(c, 1, o0, o1, row0, row1);
    if (c->epilogue) c->epilogue(c->epilogue_arg, j, o0, o1, row0, row1);
}

void cpu_matmul(threads_pool *pool, const struct cpu_matmul_job *jobs, int n_jobs, const float *x, const void *xq,
                const void *xk, int32_t n_rows, const struct cpu_matmul_opts *opts)
{
    if (n_rows <= 0 || n_jobs <= 0) return;
    struct cpu_matmul_ctx c = {
        .jobs = jobs, .n_jobs = n_jobs > 8 ? 8 : n_jobs, .x = x, .xq = xq, .xk = xk, .n_rows = n_rows};
    if (opts) {
        c.paired = opts->paired && c.n_jobs >= 2;
        assert(!c.paired || jobs[0].w->ne[1] == jobs[1].w->ne[1]);
        c.epilogue = opts->epilogue;
        c.epilogue_arg = opts->epilogue_arg;
    }
    int64_t n_tiles = 0;
    for (int j = 0; j < c.n_jobs; j++) {
        const struct cpu_kernel kb = cpu_kernel_best(jobs[j].w->type);
        c.tile_fn[j] = kb.tile;
        c.max_x[j] = kb.max_x;
        if (c.paired && j == 1) continue;
        const int u = c.n_units++;
        /* tiles start at multiples of CPU_PANEL (float panels) and of the job's alignment */
        int64_t align = opts && opts->tile_align[j] > 1 ? opts->tile_align[j] : 1;
        align = align * CPU_PANEL / cpu_gcd(align, CPU_PANEL);
        c.unit_job[u] = j;
        c.unit_tile[u] = (CPU_TILE_ROWS + align - 1) / align * align;
        c.tile_start[u] = n_tiles;
        n_tiles += (jobs[j].w->ne[1] + c.unit_tile[u] - 1) / c.unit_tile[u];
    }
    c.tile_start[c.n_units] = n_tiles;
    /* Enough tasks to balance the threads: split the rows too when the weight tiles are few. */
    const int n_threads = pool ? threads_count(pool) : 1;
    int64_t n_blocks = 1;
    if (n_threads > 1 && n_tiles < 4 * n_threads) n_blocks = (4 * n_threads + n_tiles - 1) / n_tiles;
    const int64_t max_blocks = (n_rows + 15) / 16; /* >= 16 rows each */
    if (n_blocks > max_blocks) n_blocks = max_blocks;
    if (n_blocks < 1) n_blocks = 1;
    int64_t per = (n_rows + n_blocks - 1) / n_blocks;
    per = (per + CPU_TILE_MAX_X - 1) / CPU_TILE_MAX_X * CPU_TILE_MAX_X;
    c.rows_per_block = (int32_t)per;
    c.n_row_blocks = (n_rows + per - 1) / per;
    const int64_t n_tasks = n_tiles * c.n_row_blocks;
    if (!pool) {
        for (int64_t t = 0; t < n_tasks; t++) cpu_matmul_task(&c, t, 0);
        return;
    }
    threads_parallel_for(pool, n_tasks, cpu_matmul_task, &c);
}
