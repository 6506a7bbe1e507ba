/* cpu_attn_fast.h — the fast path of one attention item, included twice by cpu_attn.c: once for AVX2
 * (ATTF_512 0: a 16-lane vector is two __m256) and once for AVX-512F (ATTF_512 1: one __m512, compiled
 * with a target attribute and chosen at run time). Private to cpu_attn.c.
 *
 * Taken when K/V are F32 or F16 with head_dim 8 (or, AVX-512 only, a multiple of 16) and block_size a power
 * of two >= 16,
 * so that 16 consecutive positions from a multiple of 16 lie in one block: K (stored [dim][slot]) gives
 * one 16-lane vector per dim, V vectors of a group are contiguous.
 *
 * Same arithmetic as the general path, op for op (cpu_attn.h's contract), hence the same bits:
 *  - scores: per lane (position) the fma chain over d, times scale2, then the mask blend;
 *  - max: exact whatever the order;
 *  - sum: the 8-lane sum in 8-position order — here both halves of a 16-lane vector are added in turn;
 *    extra all-zero groups (masked positions) add exact zeros to a sum that is >= +0;
 *  - V sums: partials A_j over t mod 4 in t order, each lane its own chain. For head_dim 8 a 16-lane
 *    vector holds two positions' vectors: lanes 0..7 of pair (t, t+1) accumulate A_0 (or A_2), lanes 8..15
 *    A_1 (or A_3), so pairs (4u, 4u+1) and (4u+2, 4u+3) go to two accumulators. A row's positions past its
 *    own are never added. */

#if ATTF_512
#define ATTF(x) x##_512
#define ATTF_FN static inline __attribute__((always_inline, target("avx512f")))
#define ATTF_TOP __attribute__((target("avx512f"))) static
#define ATTF_QB 8 /* queries per score pass */
#define ATTF_NG(nq) ((nq) <= 4 ? 4 : 2) /* position groups per score call: nq x groups accumulators */
#define ATTF_QV 4 /* queries per V pass (head_dim % 16 == 0): 16 accumulators */
typedef __m512 vft_512;
#define vf vft_512
ATTF_FN vf ATTF(vf_zero)(void) { return _mm512_setzero_ps(); }
ATTF_FN vf ATTF(vf_set1)(float x) { return _mm512_set1_ps(x); }
ATTF_FN vf ATTF(vf_load)(const float *p) { return _mm512_loadu_ps(p); }
ATTF_FN void ATTF(vf_store)(float *p, vf v) { _mm512_storeu_ps(p, v); }
ATTF_FN vf ATTF(vf_load_kind)(const uint8_t *p, int kind)
{
    return kind ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)) : _mm512_loadu_ps((const float *)p);
}
ATTF_FN vf ATTF(vf_fma)(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
ATTF_FN vf ATTF(vf_mul)(vf a, vf b) { return _mm512_mul_ps(a, b); }
ATTF_FN vf ATTF(vf_sub)(vf a, vf b) { return _mm512_sub_ps(a, b); }
ATTF_FN vf ATTF(vf_add)(vf a, vf b) { return _mm512_add_ps(a, b); }
ATTF_FN vf ATTF(vf_max)(vf a, vf b) { return _mm512_max_ps(a, b); }
ATTF_FN __m256 ATTF(vf_lo)(vf v) { return _mm512_castps512_ps256(v); }
ATTF_FN __m256 ATTF(vf_hi)(vf v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
ATTF_FN vf ATTF(vf_mask_after)(vf s, int32_t first, int32_t last)
{
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(first),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(idx, _mm512_set1_epi32(last)), s, _mm512_set1_ps(-INFINITY));
}
ATTF_FN vf ATTF(vf_exp2_neg)(vf x)
{
    const vf lo = _mm512_set1_ps(ATT_EXP2_LO);
    vf xc = _mm512_max_ps(x, lo);
    vf n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf f = _mm512_sub_ps(xc, n);
    vf q = _mm512_set1_ps(ATT_Q0);
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(ATT_Q1));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(ATT_Q2));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(ATT_Q3));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(ATT_Q4));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(ATT_Q5));
    vf y = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    y = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), e));
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}
/* v8_exp's polynomial and limits, 16 lanes (the same ops lane for lane). */
ATTF_FN vf ATTF(vf_exp)(vf x)
{
    const vf hi = _mm512_set1_ps(ATT_EXP_HI), lo = _mm512_set1_ps(ATT_EXP_LO);
    vf xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    vf n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(ATT_LOG2E)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ATT_LN2_HI), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ATT_LN2_LO), r);
    vf p = _mm512_set1_ps(ATT_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATT_P5));
    vf y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i na = _mm512_srai_epi32(ni, 1), nb = _mm512_sub_epi32(ni, na);
    const __m512i bias = _mm512_set1_epi32(127);
    vf pa = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(na, bias), 23));
    vf pb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(nb, bias), 23));
    y = _mm512_mul_ps(_mm512_mul_ps(y, pa), pb);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* cpu_swiglu_row's arithmetic over the first n - n % 16 elements; returns that count. */
ATTF_TOP int64_t ATTF(swiglu16)(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        vf x = _mm512_loadu_ps(g + i);
        vf e = ATTF(vf_exp)(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_storeu_ps(
            g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), _mm512_loadu_ps(u + i)));
    }
    return i;
}

/* 4 consecutive floats p[0..3] as (p0 x 8 | p1 x 8) and (p2 x 8 | p3 x 8). */
ATTF_FN void ATTF(vf_pairs)(const float *p, vf *p01, vf *p23)
{
    const vf v = _mm512_castps128_ps512(_mm_loadu_ps(p));
    *p01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), v);
    *p23 = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), v);
}
#else
#define ATTF(x) x##_avx2
#define ATTF_FN ATT_INLINE
#define ATTF_TOP static
#define ATTF_QB 4
#define ATTF_NG(nq) ((nq) <= 1 ? 4 : (nq) <= 3 ? 2 : 1)
typedef struct {
    __m256 lo, hi;
} vft_avx2;
#define vf vft_avx2
ATTF_FN vf ATTF(vf_zero)(void) { return (vf){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
ATTF_FN vf ATTF(vf_set1)(float x) { return (vf){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
ATTF_FN vf ATTF(vf_load)(const float *p) { return (vf){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
ATTF_FN void ATTF(vf_store)(float *p, vf v)
{
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
ATTF_FN vf ATTF(vf_load_kind)(const uint8_t *p, int kind)
{
    return (vf){v8_load_kind(p, kind), v8_load_kind(p + (kind ? 16 : 32), kind)};
}
ATTF_FN vf ATTF(vf_fma)(vf a, vf b, vf c) { return (vf){v8_fma(a.lo, b.lo, c.lo), v8_fma(a.hi, b.hi, c.hi)}; }
ATTF_FN vf ATTF(vf_mul)(vf a, vf b) { return (vf){v8_mul(a.lo, b.lo), v8_mul(a.hi, b.hi)}; }
ATTF_FN vf ATTF(vf_sub)(vf a, vf b) { return (vf){v8_sub(a.lo, b.lo), v8_sub(a.hi, b.hi)}; }
ATTF_FN vf ATTF(vf_add)(vf a, vf b) { return (vf){v8_add(a.lo, b.lo), v8_add(a.hi, b.hi)}; }
ATTF_FN vf ATTF(vf_max)(vf a, vf b) { return (vf){v8_max(a.lo, b.lo), v8_max(a.hi, b.hi)}; }
ATTF_FN __m256 ATTF(vf_lo)(vf v) { return v.lo; }
ATTF_FN __m256 ATTF(vf_hi)(vf v) { return v.hi; }
ATTF_FN vf ATTF(vf_mask_after)(vf s, int32_t first, int32_t last)
{
    return (vf){v8_mask_after(s.lo, first, last), v8_mask_after(s.hi, first + 8, last)};
}
ATTF_FN vf ATTF(vf_exp2_neg)(vf x) { return (vf){v8_exp2_neg(x.lo), v8_exp2_neg(x.hi)}; }
ATTF_FN void ATTF(vf_pairs)(const float *p, vf *p01, vf *p23)
{
    *p01 = (vf){_mm256_set1_ps(p[0]), _mm256_set1_ps(p[1])};
    *p23 = (vf){_mm256_set1_ps(p[2]), _mm256_set1_ps(p[3])};
}
#endif

/* Scores of NQ queries (qv[j], of a row whose last position is last[j]) against NG groups of 16
 * positions from t0[g] (K of dim d at kp[g] + d * kds): stored to so[j] + t0[g], folded into the 16-lane
 * running maxima mx[j] (max is exact: any order gives the general path's value). NG groups at once give
 * NG x NQ independent fma chains. */
ATTF_FN void ATTF(attf_scores)(const uint8_t *const *kp, int NG, int64_t kds, int kind, int32_t hd,
                              const float *const *qv, int NQ, float scale2, const int32_t *t0, const int32_t *last,
                              float *const *so, float *const *mx)
{
    vf acc[4][ATTF_QB];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++) acc[g][j] = ATTF(vf_zero)();
    for (int64_t d = 0; d < hd; d++) {
        vf k[4];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) k[g] = ATTF(vf_load_kind)(kp[g] + d * kds, kind);
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++) {
            const vf qd = ATTF(vf_set1)(qv[j][d]);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) acc[g][j] = ATTF(vf_fma)(qd, k[g], acc[g][j]);
        }
    }
    const vf vs = ATTF(vf_set1)(scale2);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++) {
        vf m = ATTF(vf_load)(mx[j]);
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            vf s = ATTF(vf_mul)(acc[g][j], vs);
            if (t0[g] + 15 > last[j]) s = ATTF(vf_mask_after)(s, t0[g], last[j]);
            ATTF(vf_store)(so[j] + t0[g], s);
            m = ATTF(vf_max)(s, m);
        }
        ATTF(vf_store)(mx[j], m);
    }
}

/* head_dim 8: V sums of NQ queries over positions [t, end) (t and end multiples of 4, every query's last
 * position >= end - 1), V of position u at vp + (u - t) * vs bytes when u is in the 16-group of vp. */
ATTF_FN void ATTF(attf_v8_run)(const uint8_t *vp, int64_t vs, int kind, const float *const *p, int NQ, int32_t t,
                              int32_t end, vf *a01, vf *a23)
{
    for (; t < end; t += 4, vp += 4 * vs) {
        const vf v01 = ATTF(vf_load_kind)(vp, kind), v23 = ATTF(vf_load_kind)(vp + 2 * vs, kind);
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++) {
            vf p01, p23;
            ATTF(vf_pairs)(p[j] + t, &p01, &p23);
            a01[j] = ATTF(vf_fma)(p01, v01, a01[j]);
            a23[j] = ATTF(vf_fma)(p23, v23, a23[j]);
        }
    }
}

#if ATTF_512
/* head_dim % 16 == 0: V sums of NQ queries (partials a[j][t mod 4]) over positions [t0, t0 + n) of one
 * 16-group (t0 a multiple of 16), 16 dims of V of position t0 + u at vp + u * vs. */
ATTF_FN void ATTF(attf_v16_run)(const uint8_t *vp, int64_t vs, int kind, const float *const *p, int NQ, int32_t t0,
                               int32_t n, vf (*a)[4])
{
    int32_t u = 0;
    for (; u + 4 <= n; u += 4, vp += 4 * vs) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const vf v = ATTF(vf_load_kind)(vp + k * vs, kind);
#pragma GCC unroll 4
            for (int j = 0; j < NQ; j++) a[j][k] = ATTF(vf_fma)(ATTF(vf_set1)(p[j][t0 + u + k]), v, a[j][k]);
        }
    }
    for (; u < n; u++, vp += vs) {
        const vf v = ATTF(vf_load_kind)(vp, kind);
#pragma GCC unroll 4
        for (int j = 0; j < NQ; j++) a[j][u & 3] = ATTF(vf_fma)(ATTF(vf_set1)(p[j][t0 + u]), v, a[j][u & 3]);
    }
}

#endif

/* One item by the fast path; see the top of this file. */
ATTF_TOP void ATTF(attf_item)(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *it,
                              int32_t group, const float *q, float *out, const struct att_scratch *sc)
{
    const int32_t hd = kv->head_dim, G = group, bs = kv->block_size, sh = __builtin_ctz((unsigned)bs);
    const int64_t n_q = (int64_t)kv->n_head_kv * G * hd;
    const int32_t nr = it->n_rows, r0 = it->row0, pos0 = b->pos[r0], n_valid = pos0 + nr, nq = nr * G;
    const int32_t *bt = b->seqs[b->seq[r0]].block_table;
    const float scale2 = (1.0f / sqrtf((float)hd)) * ATT_LOG2E;
    const int kind = kv->type == KV_TYPE_F16;
    const int64_t esz = kind ? 2 : 4, kds = (int64_t)bs * esz, vs = (int64_t)kv->vec_bytes;
    /* Software prefetch only for short runs: a group's K and V are 16 x head_dim elements each; from 1 KiB
     * on (head_dim 32 in f16) the hardware prefetcher follows them and the prefetch loops only cost. */
    const int prefetch = 16 * hd * esz < 1024;
#define ATTF_Q(qi) (q + (int64_t)(r0 + (qi) / G) * n_q + ((int64_t)it->kvh * G + (qi) % G) * hd)
#define ATTF_LAST(qi) (pos0 + (qi) / G)
#define ATTF_K(t) (att_region(kv, kv->k, bt[(t) >> sh], it->kvh) + (int64_t)((t) & (bs - 1)) * esz)
#define ATTF_V(t) (att_region(kv, kv->v, bt[(t) >> sh], it->kvh) + (int64_t)((t) & (bs - 1)) * vs)

    /* pass 1: scores and running maxima, 16 positions at a time; groups that every row of the item has
     * whole (t0 + 16 <= pos0 + 1) go several at a time */
    for (int32_t qi = 0; qi < nq; qi++) ATTF(vf_store)(sc->mx + qi * 16, ATTF(vf_set1)(-INFINITY));
    const int32_t n_whole = (pos0 + 1) / 16;
    for (int32_t g0 = 0; g0 * 16 < n_valid;) {
        const int32_t t_first = g0 * 16;
        const int32_t qi0 = (t_first > pos0 ? t_first - pos0 : 0) * G;
        /* groups per call: what the first (largest) query batch leaves registers for, if that many whole
         * groups remain; later batches are no larger, so they have the registers too */
        const int NGX = ATTF_NG(nq - qi0 < ATTF_QB ? nq - qi0 : ATTF_QB);
        const int32_t ng = g0 + NGX <= n_whole ? NGX : 1;
        const uint8_t *kp[4];
        int32_t t0[4];
        for (int32_t g = 0; g < ng; g++) {
            t0[g] = t_first + 16 * g;
            kp[g] = ATTF_K(t0[g]);
            if (prefetch && t0[g] + 32 < n_valid) { /* K and V of the group two ahead */
                const uint8_t *kn = ATTF_K(t0[g] + 32);
                if (bs == 16) /* the group's K is its whole region */
                    att_prefetch_lines(kn, hd * kds);
                else
                    for (int32_t d = 0; d < hd; d++) att_prefetch_lines(kn + d * kds, 16 * esz);
                att_prefetch_lines(ATTF_V(t0[g] + 32), 16 * vs);
            }
        }
        for (int32_t qi = qi0; qi < nq; qi += ATTF_QB) {
            const int NQ = nq - qi < ATTF_QB ? nq - qi : ATTF_QB;
            const float *qv[ATTF_QB];
            float *so[ATTF_QB], *mx[ATTF_QB];
            int32_t last[ATTF_QB];
            for (int j = 0; j < NQ; j++) {
                qv[j] = ATTF_Q(qi + j);
                so[j] = sc->s + (int64_t)(qi + j) * sc->stride;
                mx[j] = sc->mx + (int64_t)(qi + j) * 16;
                last[j] = ATTF_LAST(qi + j);
            }
            switch (NQ * 8 + (ng == 4 ? 2 : ng == 2)) {
#define ATTF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ATTF_SC(n)                                                                                        \
    case n * 8: ATTF(attf_scores)(kp, 1, kds, kind, hd, qv, n, scale2, t0, last, so, mx); break;           \
    case n * 8 + 1:                                                                                       \
        ATTF(attf_scores)(kp, ATTF_MIN(2, ATTF_NG(n)), kds, kind, hd, qv, n, scale2, t0, last, so, mx);   \
        break;                                                                                            \
    case n * 8 + 2:                                                                                       \
        ATTF(attf_scores)(kp, ATTF_MIN(4, ATTF_NG(n)), kds, kind, hd, qv, n, scale2, t0, last, so, mx);   \
        break;
                ATTF_SC(1)
                ATTF_SC(2)
                ATTF_SC(3)
                ATTF_SC(4)
#if ATTF_QB > 4
                ATTF_SC(5)
                ATTF_SC(6)
                ATTF_SC(7)
                ATTF_SC(8)
#endif
#undef ATTF_SC
#undef ATTF_MIN
            default: break;
            }
        }
        g0 += ng;
    }
    /* softmax numerators in place (16 positions at a time, the halves summed in order), their sums */
    for (int32_t qi = 0; qi < nq; qi++) {
        float *s = sc->s + (int64_t)qi * sc->stride;
        const float *mq = sc->mx + qi * 16;
        const vf m = ATTF(vf_set1)(v8_hmax(v8_max(v8_load(mq), v8_load(mq + 8))));
        v8f sum = v8_zero();
        for (int32_t t0 = 0; t0 <= ATTF_LAST(qi); t0 += 16) {
            const vf p = ATTF(vf_exp2_neg)(ATTF(vf_sub)(ATTF(vf_load)(s + t0), m));
            ATTF(vf_store)(s + t0, p);
            sum = v8_add(v8_add(sum, ATTF(vf_lo)(p)), ATTF(vf_hi)(p));
        }
        sc->inv[qi] = 1.0f / v8_hsum(sum);
    }
    /* pass 2: weighted V sums; out = ((A0 + A1) + (A2 + A3)) * (1 / sum) */
    if (hd == 8) {
        for (int32_t qi = 0; qi < nq; qi += ATTF_QB) {
            const int NQ = nq - qi < ATTF_QB ? nq - qi : ATTF_QB;
            const float *p[ATTF_QB];
            vf a01[ATTF_QB], a23[ATTF_QB];
            for (int j = 0; j < NQ; j++) {
                p[j] = sc->s + (int64_t)(qi + j) * sc->stride;
                a01[j] = a23[j] = ATTF(vf_zero)();
            }
            /* positions every query of the batch has, in whole quads, group by group */
            const int32_t common = (ATTF_LAST(qi) + 1) & ~3;
            for (int32_t t0 = 0; t0 < common; t0 += 16) {
                const int32_t end = t0 + 16 < common ? t0 + 16 : common;
                switch (NQ) {
#define ATTF_VR(n)                                                                                        \
    case n: ATTF(attf_v8_run)(ATTF_V(t0), vs, kind, p, n, t0, end, a01, a23); break;
                    ATTF_VR(1)
                    ATTF_VR(2)
                    ATTF_VR(3)
#if ATTF_QB > 4
                    ATTF_VR(4)
                    ATTF_VR(5)
                    ATTF_VR(6)
                    ATTF_VR(7)
                    default: ATTF(attf_v8_run)(ATTF_V(t0), vs, kind, p, 8, t0, end, a01, a23); break;
#else
                    default: ATTF(attf_v8_run)(ATTF_V(t0), vs, kind, p, 4, t0, end, a01, a23); break;
#endif
#undef ATTF_VR
                }
            }
            /* each query's remaining positions one by one, into its partial t mod 4 */
            for (int j = 0; j < NQ; j++) {
                v8f a[4] = {ATTF(vf_lo)(a01[j]), ATTF(vf_hi)(a01[j]), ATTF(vf_lo)(a23[j]), ATTF(vf_hi)(a23[j])};
                for (int32_t t = common; t <= ATTF_LAST(qi + j); t++)
                    a[t & 3] = v8_fma(v8_set1(p[j][t]), v8_load_kind(ATTF_V(t), kind), a[t & 3]);
                const v8f r = v8_mul(v8_add(v8_add(a[0], a[1]), v8_add(a[2], a[3])), v8_set1(sc->inv[qi + j]));
                v8_store(out + (int64_t)(r0 + (qi + j) / G) * n_q + ((int64_t)it->kvh * G + (qi + j) % G) * hd, r);
            }
        }
        return;
    }
#if ATTF_512
    /* head_dim a multiple of 16 (AVX-512 only: in AVX2 the general kernels are faster there): per 16 dims,
     * query batches of ATTF_QV sharing each V load, 4 partial vectors per query; positions all of the batch
     * has first, then each query's own */
    for (int32_t qi = 0; qi < nq; qi += ATTF_QV) {
        const int NQ = nq - qi < ATTF_QV ? nq - qi : ATTF_QV;
        const float *p[ATTF_QV];
        for (int j = 0; j < NQ; j++) p[j] = sc->s + (int64_t)(qi + j) * sc->stride;
        const int32_t common = ATTF_LAST(qi) + 1;
        for (int32_t dv = 0; dv < hd; dv += 16) {
            vf a[ATTF_QV][4];
            for (int j = 0; j < NQ; j++) a[j][0] = a[j][1] = a[j][2] = a[j][3] = ATTF(vf_zero)();
            for (int32_t t0 = 0; t0 < common; t0 += 16) {
                const int32_t n = common - t0 < 16 ? common - t0 : 16;
                const uint8_t *vp = ATTF_V(t0) + dv * esz;
                switch (NQ) {
#if ATTF_QV > 1
                case 2: ATTF(attf_v16_run)(vp, vs, kind, p, 2, t0, n, a); break;
                case 3: ATTF(attf_v16_run)(vp, vs, kind, p, 3, t0, n, a); break;
                case 4: ATTF(attf_v16_run)(vp, vs, kind, p, 4, t0, n, a); break;
#endif
                default: ATTF(attf_v16_run)(vp, vs, kind, p, 1, t0, n, a); break;
                }
            }
            for (int j = 0; j < NQ; j++) {
                for (int32_t t = common; t <= ATTF_LAST(qi + j); t++)
                    a[j][t & 3] = ATTF(vf_fma)(ATTF(vf_set1)(p[j][t]), ATTF(vf_load_kind)(ATTF_V(t) + dv * esz, kind),
                                               a[j][t & 3]);
                const vf r = ATTF(vf_mul)(ATTF(vf_add)(ATTF(vf_add)(a[j][0], a[j][1]), ATTF(vf_add)(a[j][2], a[j][3])),
                                          ATTF(vf_set1)(sc->inv[qi + j]));
                ATTF(vf_store)(out + (int64_t)(r0 + (qi + j) / G) * n_q +
                                   ((int64_t)it->kvh * G + (qi + j) % G) * hd + dv,
                               r);
            }
        }
    }
#endif
#undef ATTF_Q
#undef ATTF_LAST
#undef ATTF_K
#undef ATTF_V
}

#undef vf
#undef ATTF
#undef ATTF_FN
#undef ATTF_TOP
#undef ATTF_QB
#undef ATTF_NG
#undef ATTF_QV
