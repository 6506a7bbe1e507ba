/* cpu_kquant_simd.h — template of the K-quant dot kernels, private to cpu_kquant.c, which includes it
 * three times: with CPU_VNNI 0 (AVX2: maddubs, then madd by the scales, then add), with CPU_VNNI 1 inside
 * a target("avxvnni") region (maddubs, then one VEX vpdpwssd) and with CPU_VNNI 2 inside an AVX-512
 * VNNI/VL/BW region (the EVEX vpdpwssd on 256-bit vectors, which may use all 32 vector registers:
 * CPU_KMAX 8 rows per call instead of 4). madd + add and vpdpwssd give the same exact 32-bit lanes, and
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

/* One weight row (nb super-blocks at w) times NX activation rows (xr[i]) of type `kind` (KQ_*): see
 * cpu_kquant.h for the arithmetic. The integer lane sums P use np partial accumulators per row (exact,
 * so np is free to vary: more partials for fewer rows shorten the dependency chains). */
CPU_INLINE void CPU_KNAME(kq_dot_nx)(int64_t nb, const uint8_t *w, const uint8_t *const *xr, int NX, int kind,
                                     float *out)
{
    const int np = NX == 1 ? 4 : NX <= 2 ? 2 : 1;
    const int64_t bb = kq_block_bytes(kind);
    __m256 acc[CPU_KMAX];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += bb) {
        const struct kq_head h = kq_head_avx2(w, kind);
        const struct cpu_q8k_block *xb[CPU_KMAX];
        __m256i P[CPU_KMAX][4];
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            xb[i] = (const struct cpu_q8k_block *)xr[i] + b;
#pragma GCC unroll 4
            for (int k = 0; k < np; k++) P[i][k] = _mm256_setzero_si256();
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m256i u = kq_chunk_avx2(w, kind, c);
            const __m256i s16 = kq_chunk_scales(h.s8, kind, c);
#pragma GCC unroll 8
            for (int i = 0; i < NX; i++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(xb[i]->q + 32 * c));
                P[i][c % np] = CPU_KNAME(kq_madd)(P[i][c % np], u, q, s16);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            __m256i p = P[i][0];
#pragma GCC unroll 4
            for (int k = 1; k < np; k++) p = _mm256_add_epi32(p, P[i][k]);
            const __m256i bsum = _mm256_loadu_si256((const __m256i *)xb[i]->bsum);
            const __m256 dd = _mm256_set1_ps(h.d * xb[i]->d);
            if (kind == KQ_3 || kind == KQ_6) { /* o16 = -off * s: P - off * N in the integer lanes */
                p = CPU_KNAME(kq_madd16)(p, bsum, h.o16);
                acc[i] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[i]);
            } else {
                const __m256i n = _mm256_madd_epi16(bsum, h.o16);
                acc[i] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[i]);
                acc[i] = _mm256_fnmadd_ps(_mm256_set1_ps(h.c * xb[i]->d), _mm256_cvtepi32_ps(n), acc[i]);
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
