/* cpu_kquant — the CPU backend's kernels for the K-quant weight types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K;
 * private to src/backend/): the 256-element activation blocks they multiply with, and the dot/tile
 * kernels in a scalar reference and SIMD versions (AVX2; AVX-VNNI; AVX-512 VNNI/VL/BW on 256-bit vectors
 * with 8 rows per call), chosen at run time through cpu_kernel_variant / cpu_kernel_best (cpu_kernels.h).
 *
 * Activations (CPU_ACT_Q16K): a row of n elements (n % 256 == 0) is n / 256 struct cpu_q16k_block, each
 * x_e ~= d * q_e with d = amax / 8191, q_e = x_e / d rounded to nearest even, |q_e| <= 8191 (14 bits),
 * plus bsum[j] = the sum of q_e over e = 16j .. 16j + 15. The q are stored per pair of chunks (64
 * elements from 64p): the even elements of chunk 2p, the even ones of chunk 2p + 1, the odd ones of chunk
 * 2p, the odd ones of chunk 2p + 1 (16 each, in element order), so that a vector of 16-bit weight
 * products made by pmaddubsw against scales in every other byte (s * u of the even or odd elements)
 * lines up with them. Why 14 bits and not 8: one scale per 256 values is what makes the super-block
 * arithmetic cheap, but with 8 bits a single outlier leaves the other 255 values a few levels each; on
 * SmolLM2's SwiGLU outputs, 8-bit blocks of 256 doubled the logit error of a K-quant ffn_down (0.27 ->
 * 0.54 std, rms), while 14-bit ones make it negligible (0.008 std), at the same count of vpdpwssd.
 *
 * Weights stay in their ggml layout (see gguf/quant.c): every chunk of 32 consecutive elements of a
 * super-block can be unpacked with a few vector shifts and masks, so no repacking is needed (the backend
 * copies the rows as they are; same bytes).
 *
 * The arithmetic (what every variant computes, bit for bit). A weight super-block is written as integers:
 * element e (0..255) has the unsigned quant u_e, sub-block j = e / 16 has the scale s_j and the offset
 * factor o_j, with the block's float scales d and c:
 *     w_e = d * s_j * u_e - c * o_j          (Q2_K, Q4_K, Q5_K: c = dmin, o_j = the sub-block's min)
 *     w_e = d * s_j * (u_e - off)            (Q3_K: off 4; Q6_K: off 32; o_j = 0)
 * (Q4_K/Q5_K's scales and mins belong to 32-element sub-blocks: s_j = sc[j / 2], o_j = m[j / 2].) With
 * the 16-bit weights v_e = s_j * (u_e - off) (off 0 for the first kind), for a weight super-block and an
 * activation block (d_x, q, bsum), per lane l = 0..7 (exact 32-bit sums):
 *     P_l = sum over chunks k = 0..7 and t = 0..3 of e = 32k + 4l + t:  v_e * q_e
 *     N_l = o_l * bsum_l + o_{l+8} * bsum_{l+8}
 * and a row's eight float lanes accumulate over the super-blocks in order, from 0:
 *     Q3_K, Q6_K:        a_l = fma(d * d_x, (float)P_l, a_l)
 *     Q2_K, Q4_K, Q5_K:  a_l = fma(d * d_x, (float)P_l, a_l);  a_l = fma(-(c * d_x), (float)N_l, a_l)
 * and the dot is ((a_0 + a_4) + (a_2 + a_6)) + ((a_1 + a_5) + (a_3 + a_7)). Bounds: |v| <= 128 * 32 =
 * 4096 (Q6_K), |q| <= 8191, 32 products per lane: |P_l| <= 1.07e9 < 2^31; |N_l| <= 2 * 63 * 16 * 8191
 * < 2^24; a pair of products (vpdpwssd, pmaddwd) fits 32 bits. Each row has its own lanes, so a row's
 * result does not depend on the other rows of a call (batch invariance).
 */
#ifndef NS_BACKEND_CPU_KQUANT_H
#define NS_BACKEND_CPU_KQUANT_H

#include <stdint.h>

#include "backend/cpu_kernels.h"
#include "gguf/gguf.h"

#define CPU_QKK 256      /* elements per K-quant super-block and per activation block */
#define CPU_Q16K_MAX 8191 /* |q| of the activation blocks */

struct cpu_q16k_block {
    int16_t q[CPU_QKK];
    int32_t bsum[CPU_QKK / 16];
    float d;
    float pad[15]; /* 640 bytes: the q of every block of a 64-byte aligned row are 64-byte aligned */
};

/* Where element e (0..255) of a block is stored in cpu_q16k_block.q (the order described above). */
static inline int cpu_q16k_index(int e)
{
    const int p = e / 64, c = e % 64 / 32, j = e % 32;
    return 64 * p + 32 * (j % 2) + 16 * c + j / 2;
}

/* 1 for Q2_K, Q3_K, Q4_K, Q5_K and Q6_K. */
int cpu_kquant_type(enum gguf_dtype t);

/* Bytes of one CPU_ACT_Q16K activation row of n elements (n % 256 == 0): n / 256 * 640. */
int64_t cpu_q16k_row_bytes(int64_t n);

/* Quantizes one row (n % 256 == 0) into cpu_q16k_blocks. Deterministic per row; AVX2 where compiled in,
 * with the same bytes as the plain-C reference cpu_quantize_row_q16k_ref (tests compare them; the padding
 * is written as zeros). */
void cpu_quantize_row_q16k(const float *x, void *y, int64_t n);
void cpu_quantize_row_q16k_ref(const float *x, void *y, int64_t n);

/* The kernels of a K-quant type in one variant (the arithmetic above); NULLs for another type or a variant
 * this build/CPU lacks. max_x: CPU_DOT_MAX_X, or CPU_TILE_MAX_X for the AVX-512 variant. */
struct cpu_kernel cpu_kquant_variant(enum gguf_dtype t, enum cpu_kernel_variant v);

#endif
