/* cpu_kernels_quant.h — template of the integer dot kernels of the group layout (Q5_0, Q5_1; Q4_0, Q4_1
 * and Q8_0 have panels, cpu_kernels_qpanel.h), private to cpu_kernels.c, which includes it
 * three times: with CPU_VNNI 0 (AVX2: maddubs + madd + add), with CPU_VNNI 1 inside a target("avxvnni")
 * region (one VEX vpdpbusd), and with CPU_VNNI 2 inside an AVX-512 VNNI/VL/BW region (EVEX vpdpbusd on
 * 256-bit vectors, which may use all 32 vector registers: CPU_QMAX 8 rows per call instead of 4). All
 * produce the same exact 32-bit lane sums (each lane adds products of four consecutive bytes), and the
 * float part is the same code per row, so the variants give bit-identical results. CPU_QNAME(x) names a
 * function of the variant. Layouts: see cpu_kernels.h. */

/* acc + the exact 32-bit lane sums of u8 x s8 products, four bytes per lane. */
CPU_INLINE __m256i CPU_QNAME(dot4)(__m256i acc, __m256i u, __m256i s)
{
#if CPU_VNNI == 2
    return _mm256_dpbusd_epi32(acc, u, s);
#elif CPU_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* The integer part of one interleaved group: isum[i] = the 8 blocks' exact lane sums for row i. */
CPU_INLINE void CPU_QNAME(group_ints)(const uint8_t *wq, const uint8_t *wh, const struct cpu_q8_group *const *xg,
                                      int NX, int kind, __m256i *isum)
{
    enum { P = 4 };
    const int np = NX == 1 ? 4 : NX <= 4 ? 2 : 1;
    const int has_min = kind == 4;
    __m256i ai[CPU_QMAX][P];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++)
#pragma GCC unroll 8
        for (int k = 0; k < np; k++) ai[i][k] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        __m256i wu, wsgn = _mm256_setzero_si256();
        if (kind == 3) {
            wsgn = _mm256_or_si256(unpack_nibbles(wq + 16 * c), unpack_bits16(cpu_rd32(wh + 4 * c)));
            wsgn = _mm256_sub_epi8(wsgn, _mm256_set1_epi8(16));
            wu = _mm256_sign_epi8(wsgn, wsgn);
        } else {
            wu = _mm256_or_si256(unpack_nibbles(wq + 16 * c), unpack_bits16(cpu_rd32(wh + 4 * c)));
        }
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            __m256i xq = _mm256_loadu_si256((const __m256i *)(xg[i]->q + 32 * c));
            if (!has_min) xq = _mm256_sign_epi8(xq, wsgn);
            ai[i][c % np] = CPU_QNAME(dot4)(ai[i][c % np], wu, xq);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        isum[i] = ai[i][0];
#pragma GCC unroll 8
        for (int k = 1; k < np; k++) isum[i] = _mm256_add_epi32(isum[i], ai[i][k]);
    }
}

/* One interleaved group of 8 blocks (weights wg, activation groups xg[i]) into acc[i]. kind: 3 Q5_0 (the
 * sign trick: |w| x sign(x, w)), 4 Q5_1 (the unsigned quants, then m * s added). The integer lane sums use P partial
 * accumulators per row (exact, so P is free to vary: more partials for fewer rows shorten the dependency
 * chains). */
CPU_INLINE void CPU_QNAME(quant_group)(const uint8_t *wg, const struct cpu_q8_group *const *xg, int NX, int kind,
                                       __m256 *acc)
{
    const int has_min = kind == 4;
    const uint8_t *wq = wg + 16 + (has_min ? 16 : 0) + 32, *wh = wg + (has_min ? 32 : 16);
    __m256i isum[CPU_QMAX];
    CPU_QNAME(group_ints)(wq, wh, xg, NX, kind, isum);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wg));
    const __m256 mw = has_min ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wg + 16))) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(xg[i]->d));
        acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[i]), acc[i]);
        if (has_min) acc[i] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xg[i]->s), acc[i]);
    }
}

/* One ggml-layout block (a row's leftover blocks) times block xb[i] of NX rows, into acc[i] (+ accm[i]). */
CPU_INLINE void CPU_QNAME(quant_block)(const uint8_t *wb, const struct cpu_q8_block *const *xb, int NX, int kind,
                                       __m256 *acc, float *accm)
{
    float dw = _cvtsh_ss(cpu_rd16(wb));
    const int has_min = kind == 4;
    __m256i wu, wsgn = _mm256_setzero_si256();
    if (kind == 3) { /* d, qh, qs */
        wsgn = _mm256_or_si256(unpack_nibbles(wb + 6), unpack_bits16(cpu_rd32(wb + 2)));
        wsgn = _mm256_sub_epi8(wsgn, _mm256_set1_epi8(16));
        wu = _mm256_sign_epi8(wsgn, wsgn);
    } else { /* d, m, qh, qs */
        wu = _mm256_or_si256(unpack_nibbles(wb + 8), unpack_bits16(cpu_rd32(wb + 4)));
    }
    float mw = has_min ? _cvtsh_ss(cpu_rd16(wb + 2)) : 0.0f;
    const __m256 vdw = _mm256_set1_ps(dw);
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        __m256i xq = _mm256_loadu_si256((const __m256i *)xb[i]->q);
        if (!has_min) xq = _mm256_sign_epi8(xq, wsgn);
        __m256 p = _mm256_cvtepi32_ps(CPU_QNAME(dot4)(_mm256_setzero_si256(), wu, xq));
        __m256 scale = _mm256_mul_ps(vdw, _mm256_broadcast_ss(&xb[i]->d));
        acc[i] = _mm256_fmadd_ps(scale, p, acc[i]);
        if (has_min) accm[i] = fmaf(mw, xb[i]->s, accm[i]);
    }
}

/* A whole row: groups into acc, leftover blocks into acc_t / accm; out = hsum(acc + acc_t) + accm. */
CPU_INLINE void CPU_QNAME(dot_quant_nx)(int64_t n, const void *w, const void *x, int64_t xs, int NX, int kind,
                                        float *out)
{
    const int64_t bb = kind == 3 ? 22 : 24;
    const int64_t nb = n / 32, ng = nb / CPU_QG;
    const uint8_t *xr[CPU_QMAX];
    __m256 acc[CPU_QMAX], acc_t[CPU_QMAX];
    float accm[CPU_QMAX];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        xr[i] = (const uint8_t *)x + i * xs;
        acc[i] = _mm256_setzero_ps();
        acc_t[i] = _mm256_setzero_ps();
        accm[i] = 0.0f;
    }
    const uint8_t *wg = w;
    for (int64_t g = 0; g < ng; g++, wg += CPU_QG * bb) {
        const struct cpu_q8_group *xg[CPU_QMAX];
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) xg[i] = (const struct cpu_q8_group *)xr[i] + g;
        CPU_QNAME(quant_group)(wg, xg, NX, kind, acc);
    }
    for (int64_t b = ng * CPU_QG; b < nb; b++, wg += bb) {
        const struct cpu_q8_block *xb[CPU_QMAX];
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++)
            xb[i] = (const struct cpu_q8_block *)((const struct cpu_q8_group *)xr[i] + ng) + (b - ng * CPU_QG);
        CPU_QNAME(quant_block)(wg, xb, NX, kind, acc_t, accm);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) out[i] = hsum256(_mm256_add_ps(acc[i], acc_t[i])) + accm[i];
}

#define CPU_DEFINE_QUANT_DOT(name, kind)                                                                  \
    static void CPU_QNAME(name)(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out) \
    {                                                                                                     \
        switch (n_x) {                                                                                    \
        CPU_QCASES(CPU_QNAME(dot_quant_nx)(n, w, x, xs, NXC, kind, out))                                  \
        }                                                                                                 \
    }                                                                                                     \
    static void CPU_QNAME(name##_tile)(int64_t n, const void *w, int64_t ws, int n_w, const void *x,      \
                                       int64_t xs, int n_x, float *y, int64_t ys)                         \
    {                                                                                                     \
        float t[CPU_QMAX];                                                                                \
        switch (n_x) {                                                                                    \
        CPU_QCASES(for (int o = 0; o < n_w; o++) {                                                        \
            CPU_QNAME(dot_quant_nx)(n, (const char *)w + o * ws, x, xs, NXC, kind, t);                    \
            for (int i_ = 0; i_ < NXC; i_++) y[i_ * ys + o] = t[i_];                                      \
        })                                                                                                \
        }                                                                                                 \
    }
CPU_DEFINE_QUANT_DOT(dot_q5_0, 3)
CPU_DEFINE_QUANT_DOT(dot_q5_1, 4)
#undef CPU_DEFINE_QUANT_DOT
