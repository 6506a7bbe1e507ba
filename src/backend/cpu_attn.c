/* cpu_attn — attention over the paged KV cache; see cpu_attn.h for the work unit and the exact per-row
 * arithmetic (the batch-invariance contract).
 *
 * Invariant: the float arithmetic of one (row, query head) is the fixed sequence written in cpu_attn.h;
 * everything else here (whether K/V are read straight from the pool or from an f32 staging copy, how rows
 * and heads are grouped into kernel calls, the order items run in) is data movement or scheduling. The
 * arithmetic is written once, over an 8-lane type (v8f): AVX2/FMA intrinsics when compiled in, otherwise
 * a plain struct whose lane ops (fmaf, the same lane trees, the same polynomials) give the same bits.
 *
 * Two ways to feed the kernels, same results (f16 -> f32 and q8_0 -> f32 are exact):
 *  - direct: F32/F16 pools with head_dim % 8 == 0 and block_size % 8 == 0. A chunk is 4 groups of 8
 *    positions, each inside one block; K is stored transposed per (block, kv head) ([dim][slot]), so 8
 *    positions of one dim are one load (+ one vcvtph2ps); V vectors are read where they are.
 *  - staged: everything else (Q8_0, odd sizes). The chunk's K is converted into an f32 [dim][32] buffer
 *    and its V into f32 rows, and the same kernels read those.
 * The fast path (cpu_attn_fast.h, AVX2 and AVX-512F) replays the same arithmetic over 16-lane vectors for
 * the common layouts; cpu_attn_run takes it when it can. Tests run every path and memcmp them.
 */
#include "backend/cpu_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"
#include "gguf/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define ATT_AVX2 1
#else
#define ATT_AVX2 0
#endif

#define ATT_INLINE static inline __attribute__((always_inline))
#define ATT_PARTS 4 /* partial V sums per (row, head): positions t mod 4 */
#define ATT_GROUPS (CPU_ATT_CHUNK / 8) /* position groups of 8 per chunk */

/* ---------------------------------------------------------------- 8-lane arithmetic */

/* exp (cpu_exp_row): n = round(x * log2(e)); r = x - n * ln2 (two-part ln2); exp(r) = 1 + r + r^2 * P(r)
 * (degree-5 polynomial on [-ln2/2, ln2/2], the Cephes expf coefficients); times 2^n built as two powers
 * of two (so n = 128 and n = -126 stay exact). */
#define ATT_EXP_HI 88.72283905206835f  /* ln(FLT_MAX): above -> +inf */
#define ATT_EXP_LO -87.33654475055310f /* ln(FLT_MIN): below -> 0 */
#define ATT_LOG2E 1.44269504088896341f
#define ATT_LN2_HI 0.693359375f
#define ATT_LN2_LO -2.12194440e-4f
#define ATT_P0 1.9875691500e-4f
#define ATT_P1 1.3981999507e-3f
#define ATT_P2 8.3334519073e-3f
#define ATT_P3 4.1665795894e-2f
#define ATT_P4 1.6666665459e-1f
#define ATT_P5 5.0000001201e-1f
/* exp2 for the softmax (x <= 0): n = round(x), f = x - n (exact), 2^f = 1 + f * Q(f) (degree-5
 * polynomial on [-1/2, 1/2], the Cephes exp2f coefficients), times 2^n by adding n to the exponent;
 * 0 below -125 (so every result is a normal float). */
#define ATT_EXP2_LO -125.0f
#define ATT_Q0 1.535336188319500e-4f
#define ATT_Q1 1.339887440266574e-3f
#define ATT_Q2 9.618437357674640e-3f
#define ATT_Q3 5.550332471162809e-2f
#define ATT_Q4 2.402264791363012e-1f
#define ATT_Q5 6.931472028550421e-1f

#if ATT_AVX2
typedef __m256 v8f;
ATT_INLINE v8f v8_zero(void) { return _mm256_setzero_ps(); }
ATT_INLINE v8f v8_set1(float x) { return _mm256_set1_ps(x); }
ATT_INLINE v8f v8_load(const float *p) { return _mm256_loadu_ps(p); }
ATT_INLINE void v8_store(float *p, v8f v) { _mm256_storeu_ps(p, v); }
/* 8 stored elements: kind 0 f32, 1 f16 (exact conversion) */
ATT_INLINE v8f v8_load_kind(const uint8_t *p, int kind)
{
    return kind ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_ps((const float *)p);
}
ATT_INLINE v8f v8_fma(v8f a, v8f b, v8f c) { return _mm256_fmadd_ps(a, b, c); }
ATT_INLINE v8f v8_mul(v8f a, v8f b) { return _mm256_mul_ps(a, b); }
ATT_INLINE v8f v8_add(v8f a, v8f b) { return _mm256_add_ps(a, b); }
ATT_INLINE v8f v8_sub(v8f a, v8f b) { return _mm256_sub_ps(a, b); }
ATT_INLINE v8f v8_div(v8f a, v8f b) { return _mm256_div_ps(a, b); }
/* lane-wise a > b ? a : b, else b (so a NaN in `a` is dropped, one in `b` kept) */
ATT_INLINE v8f v8_max(v8f a, v8f b) { return _mm256_max_ps(a, b); }
/* lanes whose position first + lane is > last become -inf */
ATT_INLINE v8f v8_mask_after(v8f s, int32_t first, int32_t last)
{
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 out = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(last)));
    return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), out);
}
/* ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) */
ATT_INLINE float v8_hsum(v8f v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
ATT_INLINE float v8_hmax(v8f v)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
ATT_INLINE v8f v8_exp(v8f x)
{
    const v8f hi = _mm256_set1_ps(ATT_EXP_HI), lo = _mm256_set1_ps(ATT_EXP_LO);
    v8f xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    v8f n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(ATT_LOG2E)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v8f r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ATT_LN2_HI), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ATT_LN2_LO), r);
    v8f p = _mm256_set1_ps(ATT_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATT_P5));
    v8f y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i na = _mm256_srai_epi32(ni, 1), nb = _mm256_sub_epi32(ni, na);
    const __m256i bias = _mm256_set1_epi32(127);
    v8f pa = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(na, bias), 23));
    v8f pb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(nb, bias), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, pa), pb);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); /* NaN stays NaN */
}
ATT_INLINE v8f v8_exp2_neg(v8f x)
{
    const v8f lo = _mm256_set1_ps(ATT_EXP2_LO);
    v8f xc = _mm256_max_ps(x, lo);
    v8f n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v8f f = _mm256_sub_ps(xc, n);
    v8f q = _mm256_set1_ps(ATT_Q0);
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(ATT_Q1));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(ATT_Q2));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(ATT_Q3));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(ATT_Q4));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(ATT_Q5));
    v8f y = _mm256_fmadd_ps(q, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), e));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#else
typedef struct {
    float v[8];
} v8f;
#define V8_MAP(expr)                                                                                      \
    v8f o_;                                                                                               \
    for (int l = 0; l < 8; l++) o_.v[l] = (expr);                                                         \
    return o_
ATT_INLINE v8f v8_zero(void) { V8_MAP(0.0f); }
ATT_INLINE v8f v8_set1(float x) { V8_MAP(x); }
ATT_INLINE v8f v8_load(const float *p) { V8_MAP(p[l]); }
ATT_INLINE void v8_store(float *p, v8f v) { memcpy(p, v.v, sizeof v.v); }
static float att_elem(const uint8_t *p, int kind, int l)
{
    if (kind) return quant_f16_to_f32((uint16_t)(p[2 * l] | (p[2 * l + 1] << 8)));
    float f;
    memcpy(&f, p + 4 * l, 4);
    return f;
}
ATT_INLINE v8f v8_load_kind(const uint8_t *p, int kind) { V8_MAP(att_elem(p, kind, l)); }
ATT_INLINE v8f v8_fma(v8f a, v8f b, v8f c) { V8_MAP(fmaf(a.v[l], b.v[l], c.v[l])); }
ATT_INLINE v8f v8_mul(v8f a, v8f b) { V8_MAP(a.v[l] * b.v[l]); }
ATT_INLINE v8f v8_add(v8f a, v8f b) { V8_MAP(a.v[l] + b.v[l]); }
ATT_INLINE v8f v8_sub(v8f a, v8f b) { V8_MAP(a.v[l] - b.v[l]); }
ATT_INLINE v8f v8_div(v8f a, v8f b) { V8_MAP(a.v[l] / b.v[l]); }
ATT_INLINE v8f v8_max(v8f a, v8f b) { V8_MAP(a.v[l] > b.v[l] ? a.v[l] : b.v[l]); }
ATT_INLINE v8f v8_mask_after(v8f s, int32_t first, int32_t last) { V8_MAP(first + l > last ? -INFINITY : s.v[l]); }
ATT_INLINE float v8_hsum(v8f a)
{
    const float *v = a.v;
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}
static inline float att_max1(float a, float b) { return a > b ? a : b; }
ATT_INLINE float v8_hmax(v8f a)
{
    const float *v = a.v;
    return att_max1(att_max1(att_max1(v[0], v[4]), att_max1(v[2], v[6])),
                    att_max1(att_max1(v[1], v[5]), att_max1(v[3], v[7])));
}
static float att_exp1(float x)
{
    if (isnan(x)) return x;
    if (x < ATT_EXP_LO) return 0.0f;
    if (x > ATT_EXP_HI) return INFINITY;
    float n = nearbyintf(x * ATT_LOG2E);
    float r = fmaf(-n, ATT_LN2_HI, x);
    r = fmaf(-n, ATT_LN2_LO, r);
    float p = ATT_P0;
    p = fmaf(p, r, ATT_P1);
    p = fmaf(p, r, ATT_P2);
    p = fmaf(p, r, ATT_P3);
    p = fmaf(p, r, ATT_P4);
    p = fmaf(p, r, ATT_P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    int ni = (int)n, na = ni >> 1, nb = ni - na;
    uint32_t ua = (uint32_t)(na + 127) << 23, ub = (uint32_t)(nb + 127) << 23;
    float pa, pb;
    memcpy(&pa, &ua, 4);
    memcpy(&pb, &ub, 4);
    return (y * pa) * pb;
}
static float att_exp2_neg1(float x)
{
    if (isnan(x)) return x;
    if (x < ATT_EXP2_LO) return 0.0f;
    float n = nearbyintf(x), f = x - n;
    float q = ATT_Q0;
    q = fmaf(q, f, ATT_Q1);
    q = fmaf(q, f, ATT_Q2);
    q = fmaf(q, f, ATT_Q3);
    q = fmaf(q, f, ATT_Q4);
    q = fmaf(q, f, ATT_Q5);
    float y = fmaf(q, f, 1.0f);
    uint32_t u;
    memcpy(&u, &y, 4);
    u += (uint32_t)((int32_t)n * (1 << 23));
    memcpy(&y, &u, 4);
    return y;
}
ATT_INLINE v8f v8_exp(v8f x) { V8_MAP(att_exp1(x.v[l])); }
ATT_INLINE v8f v8_exp2_neg(v8f x) { V8_MAP(att_exp2_neg1(x.v[l])); }
#endif

/* y[i] = v8_exp2_neg(x[i]) (exp2 1) or v8_exp(x[i]) (exp2 0), 8 lanes at a time, the tail through a
 * zero-padded copy. */
ATT_INLINE void att_map_row(const float *x, float *y, int64_t n, int exp2)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f v = v8_load(x + i);
        v8_store(y + i, exp2 ? v8_exp2_neg(v) : v8_exp(v));
    }
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        const v8f v = v8_load(t);
        v8_store(t, exp2 ? v8_exp2_neg(v) : v8_exp(v));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
}

void cpu_exp_row(const float *x, float *y, int64_t n)
{
    att_map_row(x, y, n, 0);
}

void cpu_exp2_softmax_row(const float *x, float *y, int64_t n)
{
    att_map_row(x, y, n, 1);
}

/* ---------------------------------------------------------------- plan */

int32_t cpu_attn_rows_per_item(int32_t group)
{
    int32_t r = CPU_ATT_QUERIES / (group > 0 ? group : 1);
    return r > 0 ? r : 1;
}

static int att_cmp_items(const void *pa, const void *pb)
{
    const struct cpu_attn_item *a = pa, *b = pb;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    if (a->row0 != b->row0) return a->row0 < b->row0 ? -1 : 1;
    return (a->kvh > b->kvh) - (a->kvh < b->kvh);
}

int64_t cpu_attn_plan(const struct step_batch *b, int32_t n_head_kv, int32_t group, struct cpu_attn_item *items,
                      int64_t *max_pos_out)
{
    const int32_t rt = cpu_attn_rows_per_item(group);
    int64_t n = 0, max_pos = 0;
    for (int32_t r = 0; r < b->n_rows;) {
        int32_t e = r + 1;
        while (e < b->n_rows && b->seq[e] == b->seq[r] && b->pos[e] == b->pos[e - 1] + 1) e++;
        for (int32_t t = r; t < e; t += rt) {
            int32_t nr = e - t < rt ? e - t : rt;
            int64_t first = b->pos[t], last = first + nr - 1;
            /* scores + exp + V sums per (row, head, position); K and V reads per position */
            int64_t cost = (int64_t)nr * group * (first + last + 2) / 2 + (last + 1) + 16;
            for (int32_t h = 0; h < n_head_kv; h++) items[n++] = (struct cpu_attn_item){t, nr, h, 0, cost};
        }
        if (b->pos[e - 1] + 1 > max_pos) max_pos = b->pos[e - 1] + 1;
        r = e;
    }
    qsort(items, (size_t)n, sizeof *items, att_cmp_items);
    *max_pos_out = max_pos;
    return n;
}

int64_t cpu_attn_parts(const struct cpu_attn_item *items, int64_t n_items, int64_t max_parts, int64_t *part_start)
{
    int64_t total = 0;
    for (int64_t i = 0; i < n_items; i++) total += items[i].cost;
    if (max_parts < 1) max_parts = 1;
    int64_t target = total / max_parts + 1, acc = 0, np = 0;
    part_start[0] = 0;
    for (int64_t i = 0; i < n_items; i++) {
        acc += items[i].cost;
        if (acc >= target && np + 1 < max_parts && i + 1 < n_items) {
            part_start[++np] = i + 1;
            acc = 0;
        }
    }
    part_start[++np] = n_items;
    return np;
}

/* ---------------------------------------------------------------- scratch */

struct att_scratch {
    float *s;     /* (nq_max, stride) scores, then probabilities */
    float *kt;    /* (hdp, CHUNK) staged K of a chunk, transposed */
    float *vr;    /* (CHUNK, hdp) staged V of a chunk */
    float *kpart; /* (hdp, 8) direct path: the valid slots of a position group cut by n_valid, zero-padded */
    float *acc;   /* (nq_max, ATT_PARTS, hdp) partial V sums */
    float *mx;    /* (nq_max, 16) running max lanes */
    float *inv;   /* (nq_max) 1 / sum */
    int64_t stride;
};

static int64_t att_round(int64_t n, int64_t m)
{
    return (n + m - 1) / m * m;
}

static size_t att_layout(int32_t head_dim, int32_t group, int64_t n_pos, float *base, struct att_scratch *sc)
{
    const int64_t nq = (int64_t)cpu_attn_rows_per_item(group) * group, hdp = att_round(head_dim, 8);
    const int64_t stride = att_round(n_pos > 0 ? n_pos : 1, CPU_ATT_CHUNK);
    int64_t off = 0;
#define ATT_CARVE(field, count)                                                                           \
    do {                                                                                                  \
        if (sc) sc->field = base + off;                                                                   \
        off += att_round(count, 16); /* 64-byte aligned pieces */                                         \
    } while (0)
    ATT_CARVE(s, nq * stride);
    ATT_CARVE(kt, hdp * CPU_ATT_CHUNK);
    ATT_CARVE(vr, hdp * CPU_ATT_CHUNK);
    ATT_CARVE(kpart, hdp * 8);
    ATT_CARVE(acc, nq * ATT_PARTS * hdp);
    ATT_CARVE(mx, nq * 16); /* the general path uses 8 per query, the fast one 16 */
    ATT_CARVE(inv, nq);
#undef ATT_CARVE
    if (sc) sc->stride = stride;
    return (size_t)off;
}

size_t cpu_attn_scratch_floats(int32_t head_dim, int32_t group, int64_t n_pos)
{
    return att_layout(head_dim, group, n_pos, NULL, NULL);
}

/* ---------------------------------------------------------------- reading the pool */

int cpu_attn_k_transposed(enum kv_type t)
{
    return t != KV_TYPE_Q8_0;
}

/* Start of the K (or V) region of (block, kv head): block_size vectors. */
ATT_INLINE const uint8_t *att_region(const struct cpu_kv_layer *kv, const uint8_t *base, int32_t block, int32_t kvh)
{
    return base +
           ((uint64_t)block * (uint64_t)kv->n_head_kv + (uint64_t)kvh) * (uint64_t)kv->block_size * kv->vec_bytes;
}

/* One element of a stored F32/F16 value as float (exact). */
ATT_INLINE float att_scalar(const uint8_t *p, enum kv_type t)
{
    if (t == KV_TYPE_F16) return quant_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* One stored row-layout vector as head_dim floats (exact). */
static void att_convert(enum kv_type type, const uint8_t *src, int32_t hd, float *dst)
{
    if (type == KV_TYPE_Q8_0) {
        for (int32_t blk = 0; blk < hd / 32; blk++, src += 34) {
            float d = quant_f16_to_f32((uint16_t)(src[0] | (src[1] << 8)));
            int32_t k = 0;
#if ATT_AVX2
            for (; k < 32; k += 8) {
                __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + 2 + k))));
                _mm256_storeu_ps(dst + blk * 32 + k, _mm256_mul_ps(_mm256_set1_ps(d), q));
            }
#endif
            for (; k < 32; k++) dst[blk * 32 + k] = d * (float)(int8_t)src[2 + k];
        }
        return;
    }
    const int32_t esz = type == KV_TYPE_F16 ? 2 : 4;
    int32_t i = 0;
#if ATT_AVX2
    for (; i + 8 <= hd; i += 8)
        _mm256_storeu_ps(dst + i, type == KV_TYPE_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i)))
                                                      : _mm256_loadu_ps((const float *)src + i));
#endif
    for (; i < hd; i++) dst[i] = att_scalar(src + (int64_t)i * esz, type);
}

#if ATT_AVX2
ATT_INLINE void att_transpose8(__m256 *r)
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif

/* Staged K: kt (hd, CHUNK) = K of positions [c0, c0 + CHUNK) as f32, transposed; positions >= n_valid are
 * 0 (never loaded). */
static void att_stage_k(const struct cpu_kv_layer *kv, const int32_t *bt, int32_t kvh, int32_t c0, int32_t n_valid,
                        float *kt)
{
    const int32_t hd = kv->head_dim, bs = kv->block_size;
    const int32_t esz = kv->type == KV_TYPE_F16 ? 2 : 4;
    for (int32_t j = 0; j < CPU_ATT_CHUNK; j++) {
        const int32_t t = c0 + j;
        if (t >= n_valid) {
            for (int32_t d = 0; d < hd; d++) kt[(int64_t)d * CPU_ATT_CHUNK + j] = 0.0f;
            continue;
        }
        const uint8_t *reg = att_region(kv, kv->k, bt[t / bs], kvh);
        if (cpu_attn_k_transposed(kv->type)) { /* [dim][slot] */
            const uint8_t *p = reg + (int64_t)(t % bs) * esz;
            for (int32_t d = 0; d < hd; d++)
                kt[(int64_t)d * CPU_ATT_CHUNK + j] = att_scalar(p + (int64_t)d * bs * esz, kv->type);
            continue;
        }
        const uint8_t *src = reg + (uint64_t)(t % bs) * kv->vec_bytes;
#if ATT_AVX2
        if (hd % 8 == 0 && (j & 7) == 0 && c0 + j + 8 <= n_valid) {
            /* eight row-layout vectors at once: convert, transpose 8 x 8 */
            float rows[8][CPU_MAX_HEAD_DIM_ATT];
            for (int k = 0; k < 8; k++) {
                const int32_t tk = t + k;
                att_convert(kv->type, att_region(kv, kv->k, bt[tk / bs], kvh) + (uint64_t)(tk % bs) * kv->vec_bytes, hd,
                            rows[k]);
            }
            for (int32_t dg = 0; dg < hd; dg += 8) {
                __m256 r[8];
                for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(rows[k] + dg);
                att_transpose8(r);
                for (int d = 0; d < 8; d++) _mm256_storeu_ps(kt + (int64_t)(dg + d) * CPU_ATT_CHUNK + j, r[d]);
            }
            j += 7;
            continue;
        }
#endif
        float row[CPU_MAX_HEAD_DIM_ATT];
        att_convert(kv->type, src, hd, row);
        for (int32_t d = 0; d < hd; d++) kt[(int64_t)d * CPU_ATT_CHUNK + j] = row[d];
    }
}

/* Staged V: vr (CHUNK, hdp) = V of positions [c0, min(c0 + CHUNK, n_valid)) as f32 rows, zero-padded to
 * hdp; rows of later positions are left as they are (never read). */
static void att_stage_v(const struct cpu_kv_layer *kv, const int32_t *bt, int32_t kvh, int32_t c0, int32_t n_valid,
                        int32_t hdp, float *vr)
{
    const int32_t hd = kv->head_dim, bs = kv->block_size;
    for (int32_t j = 0; j < CPU_ATT_CHUNK && c0 + j < n_valid; j++) {
        const int32_t t = c0 + j;
        float *dst = vr + (int64_t)j * hdp;
        att_convert(kv->type, att_region(kv, kv->v, bt[t / bs], kvh) + (uint64_t)(t % bs) * kv->vec_bytes, hd, dst);
        for (int32_t d = hd; d < hdp; d++) dst[d] = 0.0f;
    }
}

/* Prefetches the K and V regions of the blocks holding positions [c0, min(c0 + CHUNK, n_valid)): the
 * pool is read in short runs (block_size slots of one kv head), too short for the hardware prefetcher. */
static void att_prefetch_chunk(const struct cpu_kv_layer *kv, const int32_t *bt, int32_t kvh, int32_t c0,
                               int32_t n_valid)
{
#if ATT_AVX2
    const int32_t bs = kv->block_size, end = c0 + CPU_ATT_CHUNK < n_valid ? c0 + CPU_ATT_CHUNK : n_valid;
    for (int32_t t = c0; t < end;) {
        const int32_t slot = t % bs, n = bs - slot < end - t ? bs - slot : end - t;
        /* transposed K: every dim row of the block holds some of these slots, so the whole region */
        const uint64_t k0 = cpu_attn_k_transposed(kv->type) ? 0 : (uint64_t)slot * kv->vec_bytes;
        const uint64_t k1 =
            cpu_attn_k_transposed(kv->type) ? (uint64_t)bs * kv->vec_bytes : (uint64_t)(slot + n) * kv->vec_bytes;
        const uintptr_t kr = (uintptr_t)att_region(kv, kv->k, bt[t / bs], kvh),
                        vrg = (uintptr_t)att_region(kv, kv->v, bt[t / bs], kvh);
        for (uintptr_t a = (kr + k0) & ~(uintptr_t)63; a < kr + k1; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
        for (uintptr_t a = (vrg + (uint64_t)slot * kv->vec_bytes) & ~(uintptr_t)63;
             a < vrg + (uint64_t)(slot + n) * kv->vec_bytes; a += 64)
            _mm_prefetch((const char *)a, _MM_HINT_T0);
        t += n;
    }
#else
    (void)kv, (void)bt, (void)kvh, (void)c0, (void)n_valid;
#endif
}

/* Starts loading the first K/V chunk of an item into the cache (for the next item while the current one runs). */
static void att_item_prefetch(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *it)
{
    const int32_t n_valid = b->pos[it->row0] + it->n_rows;
    att_prefetch_chunk(kv, b->seqs[b->seq[it->row0]].block_table, it->kvh, 0, n_valid);
}

/* ---------------------------------------------------------------- kernels */

/* K of a chunk: group g (positions c0 + 8g .. + 7): element (d, j) at p[g] + d * ds[g] + j * esize. */
struct att_kchunk {
    const uint8_t *p[ATT_GROUPS];
    int64_t ds[ATT_GROUPS];
};

/* V of a chunk: position c0 + 8g + j at p[g] + j * ps, its dims contiguous. */
struct att_vchunk {
    const uint8_t *p[ATT_GROUPS];
    int64_t ps;
};

static const float att_zeros[8] __attribute__((aligned(32)));

/* The sliding window and soft-capping of 8 scores at positions first .. first + 7 (gemma; never called
 * without either): with cap > 0, s = cap * tanh(s / cap) * log2(e) (s being the scaled score; the
 * softmax's base-2 factor comes after the cap); lanes at positions < lo become -inf. Each lane depends
 * only on its own score, position, cap and lo. */
static v8f att_window_cap(v8f s, int32_t first, int32_t lo, float cap)
{
    float t[8];
    v8_store(t, s);
    for (int l = 0; l < 8; l++) {
        if (cap > 0) t[l] = cap * tanhf(t[l] / cap) * ATT_LOG2E;
        if (first + l < lo) t[l] = -INFINITY;
    }
    return v8_load(t);
}

/* Scores of NQ query vectors (one row) against a K chunk: s = (fma chain over d of q[d] * k[d]) * scale2,
 * soft-capped when cap > 0 (att_window_cap; scale2 then lacks the log2(e) factor), -inf before position lo
 * and after position `last`; stored to s_out[i] + c0 .. + CHUNK, and folded into the running max mx[i].
 * kind: 0 f32, 1 f16 elements. Without window or cap (lo <= c0, cap 0) the arithmetic is the plain one. */
ATT_INLINE void att_scores(const struct att_kchunk *kc, int kind, int32_t hd, const float *const *qv, int NQ,
                           float scale2, float cap, int32_t c0, int32_t lo, int32_t last, float *const *s_out,
                           float *const *mx)
{
    v8f acc[2][ATT_GROUPS];
#pragma GCC unroll 2
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int g = 0; g < ATT_GROUPS; g++) acc[i][g] = v8_zero();
    const uint8_t *p0 = kc->p[0], *p1 = kc->p[1], *p2 = kc->p[2], *p3 = kc->p[3];
    for (int32_t d = 0; d < hd; d++) {
        v8f k0 = v8_load_kind(p0, kind), k1 = v8_load_kind(p1, kind), k2 = v8_load_kind(p2, kind),
            k3 = v8_load_kind(p3, kind);
        p0 += kc->ds[0], p1 += kc->ds[1], p2 += kc->ds[2], p3 += kc->ds[3];
#pragma GCC unroll 2
        for (int i = 0; i < NQ; i++) {
            v8f qd = v8_set1(qv[i][d]);
            acc[i][0] = v8_fma(qd, k0, acc[i][0]);
            acc[i][1] = v8_fma(qd, k1, acc[i][1]);
            acc[i][2] = v8_fma(qd, k2, acc[i][2]);
            acc[i][3] = v8_fma(qd, k3, acc[i][3]);
        }
    }
    const v8f vs = v8_set1(scale2);
#pragma GCC unroll 2
    for (int i = 0; i < NQ; i++) {
        v8f m = v8_load(mx[i]);
#pragma GCC unroll 4
        for (int g = 0; g < ATT_GROUPS; g++) {
            v8f s = v8_mul(acc[i][g], vs);
            if (cap > 0 || c0 + 8 * g < lo) s = att_window_cap(s, c0 + 8 * g, lo, cap);
            s = v8_mask_after(s, c0 + 8 * g, last);
            v8_store(s_out[i] + c0 + 8 * g, s);
            m = v8_max(s, m);
        }
        v8_store(mx[i], m);
    }
}

/* V sums of NQ query heads (one row) over the first n positions of a V chunk (n <= CHUNK; the chunk start
 * is a multiple of 8, so local t and the absolute position agree mod 4): acc[i] (ATT_PARTS, hdp), partial
 * j += p[i][t] * v_t for t = j mod 4, in t order. esz: bytes per element. */
ATT_INLINE void att_vsum(const struct att_vchunk *vc, int kind, int32_t esz, int32_t hdp, const float *const *p,
                         int NQ, int32_t n, float *const *acc)
{
    for (int32_t dv = 0; dv < hdp; dv += 8) {
        v8f a0[ATT_PARTS], a1[ATT_PARTS]; /* query 0, query 1 (NQ == 2) */
#pragma GCC unroll 4
        for (int j = 0; j < ATT_PARTS; j++) {
            a0[j] = v8_load(acc[0] + (int64_t)j * hdp + dv);
            a1[j] = NQ == 2 ? v8_load(acc[1] + (int64_t)j * hdp + dv) : v8_zero();
        }
        const float *p0 = p[0], *p1 = NQ == 2 ? p[1] : p[0];
        int32_t t = 0;
        for (; t + ATT_PARTS <= n; t += ATT_PARTS) {
            const uint8_t *vp = vc->p[t >> 3] + (int64_t)(t & 7) * vc->ps + (int64_t)dv * esz;
#pragma GCC unroll 4
            for (int j = 0; j < ATT_PARTS; j++) {
                v8f v = v8_load_kind(vp + (int64_t)j * vc->ps, kind);
                a0[j] = v8_fma(v8_set1(p0[t + j]), v, a0[j]);
                if (NQ == 2) a1[j] = v8_fma(v8_set1(p1[t + j]), v, a1[j]);
            }
        }
        /* the last n mod 4 positions: partials 0, 1, 2 in order */
        for (int j = 0; t < n; t++, j++) {
            v8f v = v8_load_kind(vc->p[t >> 3] + (int64_t)(t & 7) * vc->ps + (int64_t)dv * esz, kind);
            if (j == 0) {
                a0[0] = v8_fma(v8_set1(p0[t]), v, a0[0]);
                if (NQ == 2) a1[0] = v8_fma(v8_set1(p1[t]), v, a1[0]);
            } else if (j == 1) {
                a0[1] = v8_fma(v8_set1(p0[t]), v, a0[1]);
                if (NQ == 2) a1[1] = v8_fma(v8_set1(p1[t]), v, a1[1]);
            } else {
                a0[2] = v8_fma(v8_set1(p0[t]), v, a0[2]);
                if (NQ == 2) a1[2] = v8_fma(v8_set1(p1[t]), v, a1[2]);
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < ATT_PARTS; j++) {
            v8_store(acc[0] + (int64_t)j * hdp + dv, a0[j]);
            if (NQ == 2) v8_store(acc[1] + (int64_t)j * hdp + dv, a1[j]);
        }
    }
}

/* ---------------------------------------------------------------- one item */

/* The K chunk of positions [c0, c0 + CHUNK) in the direct path: groups inside one block each; a group cut
 * by n_valid is copied (valid slots only) into kpart, zero-padded; groups past n_valid read zeros. */
static void att_direct_k(const struct cpu_kv_layer *kv, const int32_t *bt, int32_t kvh, int32_t c0, int32_t n_valid,
                         uint8_t *kpart, struct att_kchunk *kc)
{
    const int32_t bs = kv->block_size, esz = kv->type == KV_TYPE_F16 ? 2 : 4;
    for (int g = 0; g < ATT_GROUPS; g++) {
        const int32_t t = c0 + 8 * g;
        if (t >= n_valid) {
            kc->p[g] = (const uint8_t *)att_zeros;
            kc->ds[g] = 0;
            continue;
        }
        const uint8_t *src = att_region(kv, kv->k, bt[t / bs], kvh) + (int64_t)(t % bs) * esz;
        if (t + 8 <= n_valid) {
            kc->p[g] = src;
            kc->ds[g] = (int64_t)bs * esz;
            continue;
        }
        const int32_t nv = n_valid - t;
        for (int32_t d = 0; d < kv->head_dim; d++) {
            memcpy(kpart + (int64_t)d * 8 * esz, src + (int64_t)d * bs * esz, (size_t)nv * (size_t)esz);
            memset(kpart + (int64_t)d * 8 * esz + nv * esz, 0, (size_t)(8 - nv) * (size_t)esz);
        }
        kc->p[g] = kpart;
        kc->ds[g] = 8 * esz;
    }
}

static void att_direct_v(const struct cpu_kv_layer *kv, const int32_t *bt, int32_t kvh, int32_t c0, int32_t n_valid,
                         struct att_vchunk *vc)
{
    const int32_t bs = kv->block_size;
    for (int g = 0; g < ATT_GROUPS; g++) {
        const int32_t t = c0 + 8 * g;
        vc->p[g] = t < n_valid ? att_region(kv, kv->v, bt[t / bs], kvh) + (uint64_t)(t % bs) * kv->vec_bytes
                               : (const uint8_t *)att_zeros; /* never read */
    }
    vc->ps = (int64_t)kv->vec_bytes;
}

/* ---------------------------------------------------------------- the fast path */

/* Prefetches the cache lines of [a, a + n). */
ATT_INLINE void att_prefetch_lines(const uint8_t *a, int64_t n)
{
#if ATT_AVX2
    for (uintptr_t p = (uintptr_t)a & ~(uintptr_t)63; p < (uintptr_t)a + (uintptr_t)n; p += 64)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
#else
    (void)a, (void)n;
#endif
}

#if ATT_AVX2
#define ATTF_512 0
#include "backend/cpu_attn_fast.h"
#undef ATTF_512
#define ATTF_512 1
#include "backend/cpu_attn_fast.h"
#undef ATTF_512

/* 1 if the AVX-512F forms may run: the CPU has them and NIGHTSHIFT_CPU_KERNELS does not cap them. */
static int att_use_512(void)
{
    static int use = -1; /* a racing first call stores the same value */
    if (use < 0) use = cpu_kernel_cap() >= CPU_KERNEL_AVX512 && __builtin_cpu_supports("avx512f");
    return use;
}

/* 1 if the fast path (AVX-512F: avx512 1) takes this layer's layout (cpu_attn_fast.h). */
static int att_fast_layout(const struct cpu_kv_layer *kv, int avx512)
{
    const int32_t bs = kv->block_size, hd = kv->head_dim;
    return (kv->type == KV_TYPE_F32 || kv->type == KV_TYPE_F16) && bs >= 16 && (bs & (bs - 1)) == 0 &&
           (hd == 8 || (avx512 && hd % 16 == 0)) && kv->window == 0 && kv->scale == 0 && kv->softcap == 0;
}
#endif

void cpu_swiglu_row(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
#if ATT_AVX2
    if (n >= 16 && att_use_512()) i = swiglu16_512(g, u, n);
#endif
    for (; i + 8 <= n; i += 8) {
        v8f x = v8_load(g + i);
        v8f e = v8_exp(v8_sub(v8_zero(), x));
        v8_store(g + i, v8_mul(v8_div(x, v8_add(v8_set1(1.0f), e)), v8_load(u + i)));
    }
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
        cpu_swiglu_row(tg, tu, 8);
        memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
    }
}

void cpu_geglu_row(float *g, const float *u, int64_t n)
{
    const float c1 = 1.5957691216057308f, c2 = 1.5957691216057308f * 0.044715f; /* 2 sqrt(2/pi), times 0.044715 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f x = v8_load(g + i);
        v8f z = v8_mul(x, v8_add(v8_set1(c1), v8_mul(v8_set1(c2), v8_mul(x, x))));
        v8f e = v8_exp(v8_sub(v8_zero(), z));
        v8_store(g + i, v8_mul(v8_div(x, v8_add(v8_set1(1.0f), e)), v8_load(u + i)));
    }
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
        cpu_geglu_row(tg, tu, 8);
        memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
    }
}

static void att_general_item(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *it,
                             int32_t group, const float *q, float *out, const struct att_scratch *sc_in);

/* One item's kernel, with the scratch already laid out. */
typedef void (*att_item_fn)(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *it,
                            int32_t group, const float *q, float *out, const struct att_scratch *sc);

/* The kernel of one path for this layer's layout; NULL when the path does not take it or the build/CPU
 * lacks it. */
static att_item_fn att_path_fn(enum cpu_attn_path path, const struct cpu_kv_layer *kv)
{
    switch (path) {
    case CPU_ATTN_GENERAL: return att_general_item;
#if ATT_AVX2
    case CPU_ATTN_FAST_AVX2: return att_fast_layout(kv, 0) ? attf_item_avx2 : NULL;
    case CPU_ATTN_FAST_AVX512:
        return att_fast_layout(kv, 1) && __builtin_cpu_supports("avx512f") ? attf_item_512 : NULL;
#else
    case CPU_ATTN_FAST_AVX2:
    case CPU_ATTN_FAST_AVX512: (void)kv; return NULL;
#endif
    default: return NULL;
    }
}

int cpu_attn_item_run_path(enum cpu_attn_path path, const struct cpu_kv_layer *kv, const struct step_batch *b,
                           const struct cpu_attn_item *it, int32_t group, const float *q, float *out, float *scratch,
                           int64_t n_pos)
{
    const att_item_fn fn = att_path_fn(path, kv);
    if (!fn) return -1;
    struct att_scratch sc;
    att_layout(kv->head_dim, group, n_pos, scratch, &sc);
    fn(kv, b, it, group, q, out, &sc);
    return 0;
}

void cpu_attn_run(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *items,
                  int64_t n_items, int32_t group, const float *q, float *out, float *scratch, int64_t n_pos)
{
    static int best = -1; /* a racing first call stores the same value */
    if (best < 0) {
#if ATT_AVX2
        best = cpu_kernel_cap() < CPU_KERNEL_AVX2 ? CPU_ATTN_GENERAL
               : att_use_512()                    ? CPU_ATTN_FAST_AVX512
                                                  : CPU_ATTN_FAST_AVX2;
#else
        best = CPU_ATTN_GENERAL;
#endif
    }
    if (n_items <= 0) return;
    att_item_fn fn = att_path_fn((enum cpu_attn_path)best, kv);
    if (!fn) fn = att_general_item;
    struct att_scratch sc;
    att_layout(kv->head_dim, group, n_pos, scratch, &sc);
    att_item_prefetch(kv, b, &items[0]);
    for (int64_t i = 0; i < n_items; i++) {
        if (i + 1 < n_items) att_item_prefetch(kv, b, &items[i + 1]);
        fn(kv, b, &items[i], group, q, out, &sc);
    }
}

static void att_general_item(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *it,
                             int32_t group, const float *q, float *out, const struct att_scratch *sc_in)
{
    const int32_t hd = kv->head_dim, hdp = (int32_t)att_round(hd, 8), G = group;
    const int64_t n_q = (int64_t)kv->n_head_kv * G * hd;
    const int32_t nr = it->n_rows, r0 = it->row0, pos0 = b->pos[r0], n_valid = pos0 + nr;
    const int32_t *bt = b->seqs[b->seq[r0]].block_table;
    const float scale = kv->scale > 0 ? kv->scale : 1.0f / sqrtf((float)hd), cap = kv->softcap;
    const float scale2 = cap > 0 ? scale : scale * ATT_LOG2E; /* with a cap, log2(e) comes after it */
    const int direct = kv->type != KV_TYPE_Q8_0 && hd % 8 == 0 && kv->block_size % 8 == 0;
    /* the first position row i sees (sliding window: 0 without), and the first chunk of the item's rows
     * (rows only start later, so no row needs an earlier chunk); a row skips the chunks before its own
     * first one, so its arithmetic depends on its own window alone */
#define ATT_LO(i) (kv->window > 0 && pos0 + (i) + 1 > kv->window ? pos0 + (i) + 1 - kv->window : 0)
    const int32_t c_first = ATT_LO(0) / CPU_ATT_CHUNK * CPU_ATT_CHUNK;
    const int kind = direct && kv->type == KV_TYPE_F16; /* element kind the kernels read */
    const struct att_scratch sc = *sc_in;
#define ATT_Q(i, g) (q + (int64_t)(r0 + (i)) * n_q + ((int64_t)it->kvh * G + (g)) * hd)
#define ATT_QI(i, g) ((int64_t)(i) * G + (g))

    /* pass 1: scores and running maxima, chunk by chunk */
    for (int64_t qi = 0; qi < (int64_t)nr * G; qi++) v8_store(sc.mx + qi * 8, v8_set1(-INFINITY));
    for (int32_t c0 = c_first; c0 < n_valid; c0 += CPU_ATT_CHUNK) {
        if (c0 + CPU_ATT_CHUNK < n_valid) att_prefetch_chunk(kv, bt, it->kvh, c0 + CPU_ATT_CHUNK, n_valid);
        struct att_kchunk kc;
        if (direct) {
            att_direct_k(kv, bt, it->kvh, c0, n_valid, (uint8_t *)sc.kpart, &kc);
        } else {
            att_stage_k(kv, bt, it->kvh, c0, n_valid, sc.kt);
            for (int g = 0; g < ATT_GROUPS; g++) {
                kc.p[g] = (const uint8_t *)(sc.kt + 8 * g);
                kc.ds[g] = CPU_ATT_CHUNK * (int64_t)sizeof(float);
            }
        }
        for (int32_t i = c0 > pos0 ? c0 - pos0 : 0; i < nr; i++) {
            const int32_t last = pos0 + i, lo = ATT_LO(i);
            if (lo >= c0 + CPU_ATT_CHUNK) break; /* this row's window (and the later rows') starts after the chunk */
            for (int32_t g = 0; g < G;) {
                const int NQ = G - g >= 2 ? 2 : 1;
                const float *qv[2];
                float *so[2], *mx[2];
                for (int k = 0; k < NQ; k++) {
                    qv[k] = ATT_Q(i, g + k);
                    so[k] = sc.s + ATT_QI(i, g + k) * sc.stride;
                    mx[k] = sc.mx + ATT_QI(i, g + k) * 8;
                }
                if (NQ == 2 && kind)
                    att_scores(&kc, 1, hd, qv, 2, scale2, cap, c0, lo, last, so, mx);
                else if (NQ == 2)
                    att_scores(&kc, 0, hd, qv, 2, scale2, cap, c0, lo, last, so, mx);
                else if (kind)
                    att_scores(&kc, 1, hd, qv, 1, scale2, cap, c0, lo, last, so, mx);
                else
                    att_scores(&kc, 0, hd, qv, 1, scale2, cap, c0, lo, last, so, mx);
                g += NQ;
            }
        }
    }
    /* softmax numerators in place, their sums */
    for (int32_t i = 0; i < nr; i++) {
        const int32_t nv = (pos0 + i) / 8 + 1;
        for (int32_t g = 0; g < G; g++) {
            const int64_t qi = ATT_QI(i, g);
            float *s = sc.s + qi * sc.stride;
            const v8f m = v8_set1(v8_hmax(v8_load(sc.mx + qi * 8)));
            v8f sum = v8_zero();
            for (int32_t v = ATT_LO(i) / CPU_ATT_CHUNK * (CPU_ATT_CHUNK / 8); v < nv; v++) {
                v8f p = v8_exp2_neg(v8_sub(v8_load(s + 8 * v), m));
                v8_store(s + 8 * v, p);
                sum = v8_add(sum, p);
            }
            sc.inv[qi] = 1.0f / v8_hsum(sum);
            memset(sc.acc + qi * ATT_PARTS * hdp, 0, (size_t)ATT_PARTS * (size_t)hdp * sizeof(float));
        }
    }
    /* pass 2: weighted V sums, chunk by chunk */
    for (int32_t c0 = c_first; c0 < n_valid; c0 += CPU_ATT_CHUNK) {
        struct att_vchunk vc;
        if (direct) {
            att_direct_v(kv, bt, it->kvh, c0, n_valid, &vc);
        } else {
            att_stage_v(kv, bt, it->kvh, c0, n_valid, hdp, sc.vr);
            for (int g = 0; g < ATT_GROUPS; g++) vc.p[g] = (const uint8_t *)(sc.vr + (int64_t)8 * g * hdp);
            vc.ps = (int64_t)hdp * (int64_t)sizeof(float);
        }
        for (int32_t i = c0 > pos0 ? c0 - pos0 : 0; i < nr; i++) {
            if (ATT_LO(i) >= c0 + CPU_ATT_CHUNK) break;
            const int32_t end = pos0 + i + 1 - c0, n = end < CPU_ATT_CHUNK ? end : CPU_ATT_CHUNK;
            for (int32_t g = 0; g < G;) {
                const int NQ = G - g >= 2 ? 2 : 1;
                const float *p[2];
                float *acc[2];
                for (int k = 0; k < NQ; k++) {
                    p[k] = sc.s + ATT_QI(i, g + k) * sc.stride + c0;
                    acc[k] = sc.acc + ATT_QI(i, g + k) * ATT_PARTS * hdp;
                }
                if (NQ == 2 && kind)
                    att_vsum(&vc, 1, 2, hdp, p, 2, n, acc);
                else if (NQ == 2)
                    att_vsum(&vc, 0, 4, hdp, p, 2, n, acc);
                else if (kind)
                    att_vsum(&vc, 1, 2, hdp, p, 1, n, acc);
                else
                    att_vsum(&vc, 0, 4, hdp, p, 1, n, acc);
                g += NQ;
            }
        }
    }
    /* out = ((A0 + A1) + (A2 + A3)) * (1 / sum) */
    for (int32_t i = 0; i < nr; i++) {
        for (int32_t g = 0; g < G; g++) {
            const int64_t qi = ATT_QI(i, g);
            const float *a = sc.acc + qi * ATT_PARTS * hdp;
            float *o = out + (int64_t)(r0 + i) * n_q + ((int64_t)it->kvh * G + g) * hd;
            const v8f inv = v8_set1(sc.inv[qi]);
            for (int32_t dv = 0; dv < hdp; dv += 8) {
                v8f s01 = v8_add(v8_load(a + dv), v8_load(a + hdp + dv));
                v8f s23 = v8_add(v8_load(a + 2 * hdp + dv), v8_load(a + 3 * hdp + dv));
                v8f r = v8_mul(v8_add(s01, s23), inv);
                if (dv + 8 <= hd) {
                    v8_store(o + dv, r);
                } else {
                    float t[8];
                    v8_store(t, r);
                    memcpy(o + dv, t, (size_t)(hd - dv) * sizeof(float));
                }
            }
        }
    }
#undef ATT_Q
#undef ATT_QI
#undef ATT_LO
}
