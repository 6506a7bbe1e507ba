/* cpu_kernels_qpanel.h — template of the panel kernels of the integer types Q4_0, Q4_1, Q5_0, Q5_1 and
 * Q8_0 (layout: cpu_kernels.h), private to cpu_kernels.c, which includes it three times: CPU_VNNI 0 (AVX2:
 * maddubs + madd), 1 (AVX-VNNI: vpdpbusd) and 2 (AVX-512 VNNI: a panel's 16 outputs in one zmm, CPU_QMAX 8
 * rows a call). The 256-bit variants take a panel as two halves of 8 outputs, one pass over the blocks each.
 *
 * A vector lane is one output. A block is 8 steps of 4 elements: a step's weight vector holds those 4
 * quants of every output (Q4, Q5: steps 0-3 are the low nibbles of the panel's qs, 4-7 the high ones, Q5
 * with its fifth bits from the qh plane; Q8_0: one 64-byte line of the panel per step) and is multiplied
 * with the activation's 4 bytes of that step broadcast to every lane. The lane's exact integer sum isum then
 * goes through the float part that every variant and the scalar reference (cpu_qp_ref) share, block after
 * block: acc = fma(d_w * d_x, isum, acc), then, but for Q8_0, acc = fma(m_w, s_x, acc). Q4's and Q5's isum
 * multiplies the unsigned quants u, and m_w is the offset of Q4_1 and Q5_1, or -8 d_w (Q4_0, u = q + 8) or
 * -16 d_w (Q5_0, u = q + 16); Q8_0's isum is of the signed quants (sign trick: |q| times q_x negated where
 * q < 0). No horizontal sum and no leftover-block path: every output is one lane from the first block to
 * the last.
 * Overflow: |q_x| <= 127. AVX2 sums Q4's maddubs in 16 bits: a pair is at most 2 * 15 * 127 = 3810, a
 * block's 8 steps 30480 < 32767; Q5's (pairs up to 7874) two steps at a time, Q8_0's (pairs up to 2 * 128 *
 * 127 = 32512) one step at a time, then to 32 bits. */

#if CPU_VNNI == 2
#define CPU_QPV __m512
#define CPU_QPZERO _mm512_setzero_ps
#else
#define CPU_QPV __m256
#define CPU_QPZERO _mm256_setzero_ps
#endif

/* One block of a panel (pb: its header, then the quants) times NX activation blocks into acc: the whole
 * panel (AVX-512) or half h (outputs 8h .. 8h + 7); xb[i]: row i's activation block (step s: its bytes
 * 4s .. 4s + 3). t: the weight type (a constant in every call, so the type tests fold away). */
CPU_INLINE void CPU_QNAME(qp_block)(const uint8_t *pb, int h, enum gguf_dtype t,
                                    const struct cpu_q8_block *const *xb, int NX, CPU_QPV *acc)
{
    const int has_m = cpu_has_min(t), q5 = cpu_is_q5(t), q8 = t == GGUF_DTYPE_Q8_0;
    const uint8_t *qh = pb + cpu_qp_scales(t), *qs = pb + cpu_qp_quants(t);
#if CPU_VNNI == 2
    (void)h;
    const __m512i lo4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)pb));
    const __m512 mw = has_m ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pb + 32)))
                            : _mm512_mul_ps(dw, _mm512_set1_ps(cpu_qp_m_of_d(t)));
    const __m512i plane = q5 ? _mm512_loadu_si512((const void *)qh) : _mm512_setzero_si512();
    __m512i p[CPU_QMAX][2];
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++)
        p[i][0] = p[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) { /* steps k and k + 4 */
        __m512i wa, wb;
        __mmask64 na = 0, nb = 0; /* Q8_0: the negative weights, whose activations are negated */
        if (q8) {
            wa = _mm512_loadu_si512((const void *)(qs + 64 * k));
            wb = _mm512_loadu_si512((const void *)(qs + 64 * (k + 4)));
            na = _mm512_movepi8_mask(wa), nb = _mm512_movepi8_mask(wb);
            wa = _mm512_abs_epi8(wa), wb = _mm512_abs_epi8(wb);
        } else {
            const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * k));
            wa = _mm512_and_si512(v, lo4);
            wb = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
            if (q5) { /* bits k and k + 4 of each plane byte, moved to bit 4 (no bit crosses a byte) */
                wa = _mm512_or_si512(wa, _mm512_and_si512(_mm512_slli_epi16(plane, 4 - k), b4));
                wb = _mm512_or_si512(wb, _mm512_and_si512(_mm512_srli_epi16(plane, k), b4));
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
            __m512i qa = _mm512_set1_epi32((int)cpu_rd32((const uint8_t *)xb[i]->q + 4 * k));
            __m512i qb = _mm512_set1_epi32((int)cpu_rd32((const uint8_t *)xb[i]->q + 4 * (k + 4)));
            if (q8) {
                qa = _mm512_mask_sub_epi8(qa, na, _mm512_setzero_si512(), qa);
                qb = _mm512_mask_sub_epi8(qb, nb, _mm512_setzero_si512(), qb);
            }
            p[i][0] = _mm512_dpbusd_epi32(p[i][0], wa, qa);
            p[i][1] = _mm512_dpbusd_epi32(p[i][1], wb, qb);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NX; i++) {
        const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(p[i][0], p[i][1]));
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb[i]->d)), f, acc[i]);
        if (!q8) acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xb[i]->s), acc[i]);
    }
#else
    const __m256i lo4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
#if !CPU_VNNI
    const __m256i one = _mm256_set1_epi16(1);
#endif
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pb + 16 * h)));
    const __m256 mw = has_m ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pb + 32 + 16 * h)))
                            : _mm256_mul_ps(dw, _mm256_set1_ps(cpu_qp_m_of_d(t)));
    const __m256i plane = q5 ? _mm256_loadu_si256((const __m256i *)(qh + 32 * h)) : _mm256_setzero_si256();
    qs += 32 * h;
    __m256i p[CPU_QMAX];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++)
        p[i] = _mm256_setzero_si256();
        /* steps k and k + 4; Q8_0: the signed weights sa, sb, their magnitudes wa, wb */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256i wa, wb, sa = _mm256_setzero_si256(), sb = _mm256_setzero_si256();
        if (q8) {
            sa = _mm256_loadu_si256((const __m256i *)(qs + 64 * k));
            sb = _mm256_loadu_si256((const __m256i *)(qs + 64 * (k + 4)));
            wa = _mm256_sign_epi8(sa, sa), wb = _mm256_sign_epi8(sb, sb);
        } else {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * k));
            wa = _mm256_and_si256(v, lo4);
            wb = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
            if (q5) {
                wa = _mm256_or_si256(wa, _mm256_and_si256(_mm256_slli_epi16(plane, 4 - k), b4));
                wb = _mm256_or_si256(wb, _mm256_and_si256(_mm256_srli_epi16(plane, k), b4));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < NX; i++) {
            __m256i qa = _mm256_set1_epi32((int)cpu_rd32((const uint8_t *)xb[i]->q + 4 * k));
            __m256i qb = _mm256_set1_epi32((int)cpu_rd32((const uint8_t *)xb[i]->q + 4 * (k + 4)));
            if (q8) qa = _mm256_sign_epi8(qa, sa), qb = _mm256_sign_epi8(qb, sb);
#if CPU_VNNI
            p[i] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(p[i], wa, qa), wb, qb);
#else
            if (q8) /* 32-bit sums each step */
                p[i] = _mm256_add_epi32(
                    p[i], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wa, qa), one),
                                           _mm256_madd_epi16(_mm256_maddubs_epi16(wb, qb), one)));
            else if (q5) /* 32-bit sums each two steps */
                p[i] =
                    _mm256_add_epi32(p[i], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(wa, qa),
                                                                              _mm256_maddubs_epi16(wb, qb)),
                                                             one));
            else /* Q4: 16-bit sums over the block */
                p[i] = _mm256_add_epi16(
                    p[i], _mm256_add_epi16(_mm256_maddubs_epi16(wa, qa), _mm256_maddubs_epi16(wb, qb)));
#endif
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) {
#if CPU_VNNI
        const __m256i isum = p[i];
#else
        const __m256i isum = q8 || q5 ? p[i] : _mm256_madd_epi16(p[i], one);
#endif
        acc[i] =
            _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb[i]->d)), _mm256_cvtepi32_ps(isum), acc[i]);
        if (!q8) acc[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xb[i]->s), acc[i]);
    }
#endif
}

#ifndef CPU_QP_PREFETCH
/* Bytes ahead of the block in use that the panel kernels prefetch: without it a row streamed from DRAM ran
 * at ~55% of the bandwidth the machine has (bench_matmul; bench/NOTES.md, 2026-12-02 15:42). The 256-bit
 * variants' second pass over a panel (its data in cache by then) prefetches the next panel's block instead,
 * so that the memory keeps streaming during that pass. Prefetches past the matrix's end are harmless (they
 * do not fault). */
#define CPU_QP_PREFETCH 4096
CPU_INLINE void cpu_qp_prefetch(const uint8_t *pb, int64_t pbb)
{
    for (int64_t l = 0; l < pbb; l += 64)
        _mm_prefetch((const char *)pb + CPU_QP_PREFETCH + l, _MM_HINT_T0);
}
#endif

/* One panel (m <= 16 valid outputs; the next panel pst bytes on) times NX activation rows xr (cpu_q8
 * layout, nb blocks) into y[i * ys + o]. A panel block is 16 * bb bytes (bb: the ggml block's bytes). */
CPU_INLINE void CPU_QNAME(qp_panel)(const uint8_t *panel, int64_t pst, int64_t nb, enum gguf_dtype t,
                                    const uint8_t *const *xr, int NX, float *y, int64_t ys, int m)
{
    const int64_t pbb = CPU_PANEL * cpu_block_bytes(t);
    const struct cpu_q8_block *xb[CPU_QMAX];
    CPU_QPV acc[CPU_QMAX];
    for (int h = 0; h < (CPU_VNNI == 2 ? 1 : 2); h++) {
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++)
            acc[i] = CPU_QPZERO();
        const uint8_t *pb = panel;
        for (int64_t b = 0; b < nb; b++, pb += pbb) {
#pragma GCC unroll 8
            for (int i = 0; i < NX; i++)
                xb[i] = (const struct cpu_q8_block *)xr[i] + b;
            cpu_qp_prefetch(pb + h * pst, pbb);
            CPU_QNAME(qp_block)(pb, h, t, xb, NX, acc);
        }
#pragma GCC unroll 8
        for (int i = 0; i < NX; i++) {
#if CPU_VNNI == 2
            _mm512_mask_storeu_ps(y + i * ys, (__mmask16)((1u << m) - 1u), acc[i]);
#else
            const int mh = m - 8 * h; /* valid lanes of this half */
            if (mh >= 8) {
                _mm256_storeu_ps(y + i * ys + 8 * h, acc[i]);
            } else if (mh > 0) {
                float t[8];
                _mm256_storeu_ps(t, acc[i]);
                memcpy(y + i * ys + 8 * h, t, (size_t)mh * sizeof(float));
            }
#endif
        }
    }
}

/* The tile kernels (cpu_tile_fn): w at a panel start, ws the row bytes. */
#define CPU_DEFINE_QP_TILE(name, t)                                                                          \
    static void CPU_QNAME(name)(int64_t n, const void *w, int64_t ws, int n_w, const void *x, int64_t xs,    \
                                int n_x, float *y, int64_t ys)                                               \
    {                                                                                                        \
        const uint8_t *xr[CPU_QMAX];                                                                         \
        for (int i = 0; i < n_x && i < CPU_QMAX; i++)                                                        \
            xr[i] = (const uint8_t *)x + i * xs;                                                             \
        for (int o = 0; o < n_w; o += CPU_PANEL) {                                                           \
            const uint8_t *panel = (const uint8_t *)w + (int64_t)o * ws;                                     \
            const int m = n_w - o < CPU_PANEL ? n_w - o : CPU_PANEL;                                         \
            switch (n_x) {                                                                                   \
                CPU_QCASES(CPU_QNAME(qp_panel)(panel, CPU_PANEL * ws, n / CPU_QK, t, xr, NXC, y + o, ys, m)) \
            }                                                                                                \
        }                                                                                                    \
    }
CPU_DEFINE_QP_TILE(tile_q4_0, GGUF_DTYPE_Q4_0)
CPU_DEFINE_QP_TILE(tile_q4_1, GGUF_DTYPE_Q4_1)
CPU_DEFINE_QP_TILE(tile_q8_0, GGUF_DTYPE_Q8_0)
CPU_DEFINE_QP_TILE(tile_q5_0, GGUF_DTYPE_Q5_0)
CPU_DEFINE_QP_TILE(tile_q5_1, GGUF_DTYPE_Q5_1)
#undef CPU_DEFINE_QP_TILE
#undef CPU_QPV
#undef CPU_QPZERO
