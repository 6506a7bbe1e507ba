/* cpu_kquant_simd.h — template of the K-quant dot kernels, private to cpu_kquant.c, which includes it
 * three times: with CPU_VNNI 0 (AVX2: maddubs, then madd by the scales, then add), with CPU_VNNI 1 inside
 * a target("avxvnni") region (maddubs, then one VEX vpdpwssd) and with CPU_VNNI 2 inside an AVX-512
 * VNNI/VL/BW region (the EVEX vpdpwssd on 512-bit vectors holding two chunks, with all 32 vector
 * registers: CPU_KMAX 8 rows per call instead of 4). madd + add and vpdpwssd give the same exact 32-bit lanes, and
 * the float part is the same code per row, so the variants give bit-identical results (the arithmetic is
 * spelled out in cpu_kquant.h; kq_dot_scalar in cpu_kquant.c is its plain-C form). CPU_KNAME(x) names a
 * function of the variant; CPU_KCASES expands the n_x switch (cpu_simd.h). */

/* acc + the 32-bit lane sums of s16 x (the i16 pair sums of u x q): lane l gets s * (u x q over bytes
 * 4l .. 4l + 3), where s is the i16 of s16 at lanes 2l and 2l + 1 (both the same sub-block's scale). */
CPU_INLINE __m256i CPU_KNAME(kq_madd)(__m256i acc, __m256i u, __m256i q, __m256i s16)
{
    const __m256i p = _mm256_maddubs_epi16(u, q); /* <= 2 * 63 * 127: no saturation */
#if CPU_VNNI == 2
    return _mm256_dpwssd_epi32(acc, p, s16);
#elif CPU_VNNI
    return _mm256_dpwssd_avx_epi32(acc, p, s16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s16));
#endif
}

/* acc + the lane sums of a16 x b16 (i16 pairs). */
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
/* P of one super-block for NX rows on 512-bit vectors: chunks 2k and 2k + 1 side by side (u, scales and
 * the 64 activation bytes), so the low and high 256-bit halves of Z hold the lane sums of the even and the
 * odd chunks; P_l = their sum (exact). np partial accumulators per row. */
CPU_INLINE void CPU_KNAME(kq_super_p)(const uint8_t *w, int kind, __m128i s8, const struct cpu_q8k_block *const *xb,
                                      int NX, int np, __m256i *P)
{
    __m512i Z[CPU_KMAX][2];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 2
        for (int k = 0; k < np; k++) Z[i][k] = _mm512_setzero_si512();
    const __m256i s8x2 = _mm256_broadcastsi128_si256(s8);
#pragma GCC unroll 4
    for (int c = 0; c < 8; c += 2) {
        const __m512i u = kq_pair512(w, kind, c / 2);
        const __m512i s16 = kq_pair_scales512(s8x2, kind, c / 2);
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            const __m512i q = _mm512_loadu_si512((const void *)(xb[i]->q + 32 * c));
            Z[i][c / 2 % np] = _mm512_dpwssd_epi32(Z[i][c / 2 % np], _mm512_maddubs_epi16(u, q), s16);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        __m512i z = Z[i][0];
        if (np > 1) z = _mm512_add_epi32(z, Z[i][1]);
        P[i] = _mm256_add_epi32(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
    }
}
#else
/* P of one super-block for NX rows, chunk by chunk; np partial accumulators per row. */
CPU_INLINE void CPU_KNAME(kq_super_p)(const uint8_t *w, int kind, __m128i s8, const struct cpu_q8k_block *const *xb,
                                      int NX, int np, __m256i *P)
{
    __m256i Z[CPU_KMAX][4];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 4
        for (int k = 0; k < np; k++) Z[i][k] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i u = kq_chunk_avx2(w, kind, c);
        const __m256i s16 = kq_chunk_scales(s8, kind, c);
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(xb[i]->q + 32 * c));
            Z[i][c % np] = CPU_KNAME(kq_madd)(Z[i][c % np], u, q, s16);
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
#endif

/* One weight row (nb super-blocks at w) times NX activation rows (xr[i]) of type `kind` (KQ_*): see
 * cpu_kquant.h for the arithmetic. d * d_x and c * d_x are one multiply each, as in the reference. */
CPU_INLINE void CPU_KNAME(kq_dot_nx)(int64_t nb, const uint8_t *w, const uint8_t *const *xr, int NX, int kind,
                                     float *out)
{
#if CPU_VNNI == 2
    const int np = NX <= 2 ? 2 : 1;
#else
    const int np = NX == 1 ? 4 : NX <= 2 ? 2 : 1;
#endif
    const int64_t bb = kq_block_bytes(kind);
    __m256 acc[CPU_KMAX];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += bb) {
        const struct kq_head h = kq_head_avx2(w, kind);
        const struct cpu_q8k_block *xb[CPU_KMAX];
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) xb[i] = (const struct cpu_q8k_block *)xr[i] + b;
        __m256i P[CPU_KMAX];
        CPU_KNAME(kq_super_p)(w, kind, h.s8, xb, NX, np, P);
        const __m256 vd = _mm256_set1_ps(h.d), vc = _mm256_set1_ps(h.c);
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            const __m256i bsum = _mm256_loadu_si256((const __m256i *)xb[i]->bsum);
            const __m256 dx = _mm256_broadcast_ss(&xb[i]->d);
            if (kind == KQ_3 || kind == KQ_6) { /* o16 = -off * s: P - off * N in the integer lanes */
                const __m256i p = CPU_KNAME(kq_madd16)(P[i], bsum, h.o16);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(vd, dx), _mm256_cvtepi32_ps(p), acc[i]);
            } else {
                const __m256i n = _mm256_madd_epi16(bsum, h.o16);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(vd, dx), _mm256_cvtepi32_ps(P[i]), acc[i]);
                acc[i] = _mm256_fnmadd_ps(_mm256_mul_ps(vc, dx), _mm256_cvtepi32_ps(n), acc[i]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) out[i] = hsum256(acc[i]);
}

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
