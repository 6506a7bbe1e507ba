/* cpu_kquant_simd.h — template of the K-quant dot kernels, private to cpu_kquant.c, which includes it
 * three times: with CPU_VNNI 0 (AVX2: pmaddwd + add on 16 products of 16-bit weights and activations),
 * with CPU_VNNI 1 inside a target("avxvnni") region (one VEX vpdpwssd instead) and with CPU_VNNI 2 inside
 * an AVX-512 VNNI/VL/BW region (the EVEX vpdpwssd on 512-bit vectors, a whole chunk of 32 products, with
 * all 32 vector registers: CPU_KMAX 8 rows per call instead of 4). All give the same exact 32-bit lane
 * sums and run the same float code per row, so the variants are bit-identical (the arithmetic is spelled
 * out in cpu_kquant.h; kq_dot_scalar in cpu_kquant.c is its plain-C form). CPU_KNAME(x) names a function
 * of the variant; CPU_KCASES expands the n_x switch (cpu_simd.h). */

/* acc + the 32-bit lane sums of a16 x b16 (pairs of 16-bit products; no pair overflows, see cpu_kquant.h). */
CPU_INLINE __m256i CPU_KNAME(kq_madd16)(__m256i acc, __m256i a16, __m256i b16)
{
#if CPU_VNNI == 2
    return _mm256_dpwssd_epi32(acc, a16, b16);
#elif CPU_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a16, b16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a16, b16));
#endif
}

#if CPU_VNNI == 2
/* P of one super-block for NX rows on 512-bit vectors: per pair of chunks, the 16-bit weights of their
 * even and of their odd elements against the matching activations (cpu_kquant.h's order); lane l of Z
 * sums elements 4l .. 4l + 3 of chunk 2p (l < 8) or of chunk 2p + 1 (l - 8), folded at the end: the same
 * sums as P_l, exact. np partial accumulators per row. */
CPU_INLINE void CPU_KNAME(kq_super_p)(const uint8_t *w, int kind, __m128i s8, const struct cpu_q16k_block *const *xb,
                                      int NX, int np, __m256i *P)
{
    __m512i Z[CPU_KMAX][2];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 2
        for (int k = 0; k < np; k++) Z[i][k] = _mm512_setzero_si512();
    const __m512i s8x4 = _mm512_broadcast_i32x4(s8);
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m512i up = kq_pair512(w, kind, p);
#pragma GCC unroll 2
        for (int odd = 0; odd < 2; odd++) {
            const __m512i v = kq_weights512(up, s8x4, kind, p, odd);
#pragma GCC unroll 8
            for (int i = 0; i < NX; i++)
                Z[i][odd % np] = _mm512_dpwssd_epi32(Z[i][odd % np], v,
                                                     _mm512_loadu_si512((const void *)(xb[i]->q + 64 * p + 32 * odd)));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        __m512i z = Z[i][0];
        if (np > 1) z = _mm512_add_epi32(z, Z[i][1]);
        P[i] = _mm256_add_epi32(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
    }
}

/* N_l = o_l * bsum_l + o_{l+8} * bsum_{l+8} (o: the 16 offset factors as 32-bit lanes). */
CPU_INLINE __m256i CPU_KNAME(kq_n)(__m512i o32, const int32_t *bsum)
{
    const __m512i z = _mm512_mullo_epi32(o32, _mm512_loadu_si512((const void *)bsum));
    return _mm256_add_epi32(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
}
#define KQ_O32 __m512i
#define KQ_O32_FROM(o8) _mm512_cvtepu8_epi32(o8)
#else
/* P of one super-block for NX rows, the even or the odd 16 elements of a chunk per vector (lane l: elements
 * 4l, 4l + 2 or 4l + 1, 4l + 3); np partial accumulators. */
CPU_INLINE void CPU_KNAME(kq_super_p)(const uint8_t *w, int kind, __m128i s8, const struct cpu_q16k_block *const *xb,
                                      int NX, int np, __m256i *P)
{
    __m256i Z[CPU_KMAX][4];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 4
        for (int k = 0; k < np; k++) Z[i][k] = _mm256_setzero_si256();
    const __m256i s8x2 = _mm256_broadcastsi128_si256(s8);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i u = kq_chunk_avx2(w, kind, c);
#pragma GCC unroll 2
        for (int odd = 0; odd < 2; odd++) {
            const __m256i v = kq_weights16(u, s8x2, kind, c, odd);
#pragma GCC unroll 8
            for (int i = 0; i < NX; i++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(xb[i]->q + 64 * (c / 2) + 32 * odd + 16 * (c % 2)));
                Z[i][(2 * c + odd) % np] = CPU_KNAME(kq_madd16)(Z[i][(2 * c + odd) % np], v, q);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        __m256i z = Z[i][0];
#pragma GCC unroll 4
        for (int k = 1; k < np; k++) z = _mm256_add_epi32(z, Z[i][k]);
        P[i] = z;
    }
}

/* The offset factors as 32-bit lanes: o_0 .. o_7 and o_8 .. o_15. */
struct CPU_KNAME(kq_o32) {
    __m256i lo, hi;
};

CPU_INLINE struct CPU_KNAME(kq_o32) CPU_KNAME(kq_o32_from)(__m128i o8)
{
    return (struct CPU_KNAME(kq_o32)){_mm256_cvtepu8_epi32(o8), _mm256_cvtepu8_epi32(_mm_srli_si128(o8, 8))};
}

/* N_l = o_l * bsum_l + o_{l+8} * bsum_{l+8}. */
CPU_INLINE __m256i CPU_KNAME(kq_n)(struct CPU_KNAME(kq_o32) o, const int32_t *bsum)
{
    return _mm256_add_epi32(_mm256_mullo_epi32(o.lo, _mm256_loadu_si256((const __m256i *)bsum)),
                            _mm256_mullo_epi32(o.hi, _mm256_loadu_si256((const __m256i *)(bsum + 8))));
}
#define KQ_O32 struct CPU_KNAME(kq_o32)
#define KQ_O32_FROM(o8) CPU_KNAME(kq_o32_from)(o8)
#endif

/* One weight row (nb super-blocks at w) times NX activation rows (xr[i]) of type `kind` (KQ_*): see
 * cpu_kquant.h for the arithmetic. d * d_x and c * d_x are one multiply each, as in the reference. */
CPU_INLINE void CPU_KNAME(kq_dot_nx)(int64_t nb, const uint8_t *w, const uint8_t *const *xr, int NX, int kind,
                                     float *out)
{
#if CPU_VNNI == 2
    const int np = 2; /* 8 vpdpwssd per row and super-block: one chain of 8 would be latency-bound */
#else
    const int np = NX == 1 ? 4 : 2;
#endif
    const int has_min = kind == KQ_2 || kind == KQ_4 || kind == KQ_5;
    const int64_t bb = kq_block_bytes(kind);
    __m256 acc[CPU_KMAX];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += bb) {
        const struct kq_head h = kq_head_avx2(w, kind);
        const struct cpu_q16k_block *xb[CPU_KMAX];
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) xb[i] = (const struct cpu_q16k_block *)xr[i] + b;
        __m256i P[CPU_KMAX];
        CPU_KNAME(kq_super_p)(w, kind, h.s8, xb, NX, np, P);
        const __m256 vd = _mm256_set1_ps(h.d), vc = _mm256_set1_ps(h.c);
        const KQ_O32 o32 = KQ_O32_FROM(h.o8);
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            const __m256 dx = _mm256_broadcast_ss(&xb[i]->d);
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(vd, dx), _mm256_cvtepi32_ps(P[i]), acc[i]);
            if (has_min) {
                const __m256i n = CPU_KNAME(kq_n)(o32, xb[i]->bsum);
                acc[i] = _mm256_fnmadd_ps(_mm256_mul_ps(vc, dx), _mm256_cvtepi32_ps(n), acc[i]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) out[i] = hsum256(acc[i]);
}
#undef KQ_O32
#undef KQ_O32_FROM

#define CPU_DEFINE_KQ_DOT(name, kind)                                                                     \
    static void CPU_KNAME(name)(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out) \
    {                                                                                                     \
        const uint8_t *xr[CPU_KMAX];                                                                      \
        for (int i = 0; i < n_x && i < CPU_KMAX; i++) xr[i] = (const uint8_t *)x + i * xs;               \
        switch (n_x) {                                                                                    \
        CPU_KCASES(CPU_KNAME(kq_dot_nx)(n / CPU_QKK, w, xr, NXC, kind, out))                              \
        }                                                                                                 \
    }                                                                                                     \
    static void CPU_KNAME(name##_tile)(int64_t n, const void *w, int64_t ws, int n_w, const void *x,      \
                                       int64_t xs, int n_x, float *y, int64_t ys)                         \
    {                                                                                                     \
        const uint8_t *xr[CPU_KMAX];                                                                      \
        for (int i = 0; i < n_x && i < CPU_KMAX; i++) xr[i] = (const uint8_t *)x + i * xs;               \
        float t[CPU_KMAX];                                                                                \
        switch (n_x) {                                                                                    \
        CPU_KCASES(for (int o = 0; o < n_w; o++) {                                                        \
            CPU_KNAME(kq_dot_nx)(n / CPU_QKK, (const uint8_t *)w + o * ws, xr, NXC, kind, t);             \
            for (int i_ = 0; i_ < NXC; i_++) y[i_ * ys + o] = t[i_];                                      \
        })                                                                                                \
        }                                                                                                 \
    }
CPU_DEFINE_KQ_DOT(dot_q2_k, KQ_2)
CPU_DEFINE_KQ_DOT(dot_q3_k, KQ_3)
CPU_DEFINE_KQ_DOT(dot_q4_k, KQ_4)
CPU_DEFINE_KQ_DOT(dot_q5_k, KQ_5)
CPU_DEFINE_KQ_DOT(dot_q6_k, KQ_6)
#undef CPU_DEFINE_KQ_DOT
