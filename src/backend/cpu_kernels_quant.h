/* cpu_kernels_quant.h — template of the integer dot kernels, private to cpu_kernels.c, which includes it
 * twice: with CPU_VNNI 0 (AVX2: maddubs + madd) and with CPU_VNNI 1 inside a target("avxvnni") region
 * (one vpdpbusd per block instead). Both produce the same 32-bit lane sums (each lane = the exact sum of
 * four consecutive byte products), and the float part is the same code, so the two variants give
 * bit-identical results. CPU_QNAME(x) names a function of the variant. */

/* The exact 32-bit lane sums of u8 x s8 products, four bytes per lane. */
CPU_INLINE __m256i CPU_QNAME(dot4)(__m256i u, __m256i s)
{
#if CPU_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* One weight block (kind: 0 Q8_0, 1 Q4_0, 2 Q4_1) times block b of NX activation rows, into acc[i]. */
CPU_INLINE void CPU_QNAME(quant_block)(const uint8_t *wb, const struct cpu_q8_block *const *xr, int64_t b, int NX,
                                       int kind, __m256 *acc, float *accm)
{
    float dw = _cvtsh_ss(cpu_rd16(wb));
    __m256i wu, wsgn = _mm256_setzero_si256();
    if (kind == 0) {
        wsgn = _mm256_loadu_si256((const __m256i *)(wb + 2));
        wu = _mm256_sign_epi8(wsgn, wsgn); /* |q_w| */
    } else if (kind == 1) {
        wsgn = _mm256_sub_epi8(unpack_nibbles(wb + 2), _mm256_set1_epi8(8));
        wu = _mm256_sign_epi8(wsgn, wsgn);
    } else {
        wu = unpack_nibbles(wb + 4);
    }
    float mw = kind == 2 ? _cvtsh_ss(cpu_rd16(wb + 2)) : 0.0f;
    const __m256 vdw = _mm256_set1_ps(dw);
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) {
        __m256i xq = _mm256_loadu_si256((const __m256i *)xr[i][b].q);
        if (kind != 2) xq = _mm256_sign_epi8(xq, wsgn);
        __m256 p = _mm256_cvtepi32_ps(CPU_QNAME(dot4)(wu, xq));
        /* d_w * d_x in every lane (a broadcast load, no shuffle), then one FMA */
        __m256 scale = _mm256_mul_ps(vdw, _mm256_broadcast_ss(&xr[i][b].d));
        acc[i] = _mm256_fmadd_ps(scale, p, acc[i]);
        if (kind == 2) accm[i] = fmaf(mw, xr[i][b].s, accm[i]);
    }
}

/* Two 8-lane accumulators per row, for even and odd blocks (so consecutive FMAs of one row do not wait on
 * each other), summed at the end: hsum(acc_even + acc_odd) + (Q4_1 offsets of even + of odd blocks). */
CPU_INLINE void CPU_QNAME(dot_quant_nx)(int64_t n, const void *w, const void *x, int64_t xs, int NX, int kind,
                                        float *out)
{
    const int64_t bytes = kind == 0 ? 34 : kind == 1 ? 18 : 20;
    const struct cpu_q8_block *xr[CPU_DOT_MAX_X];
    __m256 acc0[CPU_DOT_MAX_X], acc1[CPU_DOT_MAX_X];
    float accm0[CPU_DOT_MAX_X], accm1[CPU_DOT_MAX_X];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) {
        xr[i] = (const struct cpu_q8_block *)((const char *)x + i * xs);
        acc0[i] = _mm256_setzero_ps();
        acc1[i] = _mm256_setzero_ps();
        accm0[i] = accm1[i] = 0.0f;
    }
    const uint8_t *wb = w;
    const int64_t nb = n / 32;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, wb += 2 * bytes) {
        CPU_QNAME(quant_block)(wb, xr, b, NX, kind, acc0, accm0);
        CPU_QNAME(quant_block)(wb + bytes, xr, b + 1, NX, kind, acc1, accm1);
    }
    if (b < nb) CPU_QNAME(quant_block)(wb, xr, b, NX, kind, acc0, accm0);
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) out[i] = hsum256(_mm256_add_ps(acc0[i], acc1[i])) + (accm0[i] + accm1[i]);
}

#define CPU_DEFINE_QUANT_DOT(name, kind)                                                                  \
    static void CPU_QNAME(name)(int64_t n, const void *w, const void *x, int64_t xs, int n_x, float *out) \
    {                                                                                                     \
        switch (n_x) {                                                                                    \
        case 1: CPU_QNAME(dot_quant_nx)(n, w, x, xs, 1, kind, out); break;                                \
        case 2: CPU_QNAME(dot_quant_nx)(n, w, x, xs, 2, kind, out); break;                                \
        case 3: CPU_QNAME(dot_quant_nx)(n, w, x, xs, 3, kind, out); break;                                \
        default: CPU_QNAME(dot_quant_nx)(n, w, x, xs, 4, kind, out); break;                               \
        }                                                                                                 \
    }                                                                                                     \
    static void CPU_QNAME(name##_tile)(int64_t n, const void *w, int64_t ws, int n_w, const void *x,      \
                                       int64_t xs, int n_x, float *y, int64_t ys)                         \
    {                                                                                                     \
        CPU_TILE_LOOP(CPU_QNAME(dot_quant_nx)(n, (const char *)w + o * ws, x, xs, NXC, kind, t));         \
    }
CPU_DEFINE_QUANT_DOT(dot_q8_0, 0)
CPU_DEFINE_QUANT_DOT(dot_q4_0, 1)
CPU_DEFINE_QUANT_DOT(dot_q4_1, 2)
#undef CPU_DEFINE_QUANT_DOT
