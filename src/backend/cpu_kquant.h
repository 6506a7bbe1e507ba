/* cpu_kquant — the CPU backend's kernels for the K-quant weight types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K;
 * private to src/backend/): the 256-element activation blocks they multiply with, and the dot/tile
 * kernels in a scalar reference and SIMD versions (AVX2; AVX-VNNI; AVX-512 VNNI/VL/BW on 256-bit vectors
 * with 8 rows per call), chosen at run time through cpu_kernel_variant / cpu_kernel_best (cpu_kernels.h).
 *
 * Activations (CPU_ACT_Q8K): a row of n elements (n % 256 == 0) is n / 256 struct cpu_q8k_block, each
 * x ~= d * q with d = amax / 127, q = x / d rounded to nearest even, |q| <= 127 (the same rounding as
 * the 32-element blocks of cpu_quantize_row_q8), plus bsum[j] = the sum of q[16j .. 16j + 15]. One
 * scale per 256 values is what llama.cpp's K-quant dot products use (its Q8_K), so results are comparable
 * with it; its cost shows on outliers: on SmolLM2's SwiGLU outputs a K-quant ffn_down is 0.20 std (rms
 * of the logits) from its own F32 copy, where 32-element blocks give 0.12. 14-bit blocks of 256 were
 * tried (commit "cpu_kquant (experiment)", reverted): 0.008 std, but kernels at 0.75x (AVX-512) and
 * 0.55x (AVX2) of these.
 *
 * Weights stay in their ggml layout (see gguf/quant.c): every chunk of 32 consecutive elements of a
 * super-block can be unpacked with a few vector shifts and masks, so no repacking is needed (the backend
 * copies the rows as they are; same bytes).
 *
 * The arithmetic (what every variant computes, bit for bit). A weight super-block is written as integers:
 * element e (0..255) has the unsigned quant u_e, sub-block j = e / 16 has the scale s_j and the offset
 * factor o_j, with the block's float scales d and c:
 *     w_e = d * s_j * u_e - c * o_j          (Q2_K, Q4_K, Q5_K: c = dmin, o_j = the sub-block's min)
 *     w_e = d * s_j * (u_e - off)            (Q3_K: off 4; Q6_K: off 32; o_j = s_j, folded below)
 * (Q4_K/Q5_K's scales and mins belong to 32-element sub-blocks: s_j = sc[j / 2], o_j = m[j / 2].) For
 * a weight super-block and an activation block (d_x, q, bsum), per lane l = 0..7 (exact 32-bit sums):
 *     P_l = sum over chunks k = 0..7, bytes i = 0..3 of e = 32k + 4l + i:  s_{e/16} * u_e * q_e
 *     N_l = o_{2l} * bsum_{2l} + o_{2l+1} * bsum_{2l+1}
 * and a row's eight float lanes accumulate over the super-blocks in order, from 0:
 *     Q3_K, Q6_K:        a_l = fma(d * d_x, (float)(P_l - off * N_l), a_l)
 *     Q2_K, Q4_K, Q5_K:  a_l = fma(d * d_x, (float)P_l, a_l);  a_l = fma(-(c * d_x), (float)N_l, a_l)
 * and the dot is ((a_0 + a_4) + (a_2 + a_6)) + ((a_1 + a_5) + (a_3 + a_7)). Bounds: |s| <= 128, u <= 63,
 * |q| <= 127 give |P_l| < 2^26 and |N_l| < 2^20; every 16-bit intermediate of the SIMD code (u8 x s8 pair
 * sums <= 2 * 63 * 127) fits without saturation. Each row has its own lanes, so a row's result does not
 * depend on the other rows of a call (batch invariance).
 */
#ifndef NS_BACKEND_CPU_KQUANT_H
#define NS_BACKEND_CPU_KQUANT_H

#include <stdint.h>

#include "backend/cpu_kernels.h"
#include "gguf/gguf.h"

#define CPU_QKK 256 /* elements per K-quant super-block and per activation block */

struct cpu_q8k_block {
    int8_t q[CPU_QKK];
    int16_t bsum[CPU_QKK / 16];
    float d;
};

/* 1 for Q2_K, Q3_K, Q4_K, Q5_K and Q6_K. */
int cpu_kquant_type(enum gguf_dtype t);

/* Bytes of one CPU_ACT_Q8K activation row of n elements (n % 256 == 0): n / 256 * 292. */
int64_t cpu_q8k_row_bytes(int64_t n);

/* Quantizes one row (n % 256 == 0) into cpu_q8k_blocks. Deterministic per row; AVX2 where compiled in,
 * with the same bytes as the plain-C reference cpu_quantize_row_q8k_ref (tests compare them). */
void cpu_quantize_row_q8k(const float *x, void *y, int64_t n);
void cpu_quantize_row_q8k_ref(const float *x, void *y, int64_t n);

/* The kernels of a K-quant type in one variant (the arithmetic above); NULLs for another type or a variant
 * this build/CPU lacks. max_x: CPU_DOT_MAX_X, or CPU_TILE_MAX_X for the AVX-512 variant. */
struct cpu_kernel cpu_kquant_variant(enum gguf_dtype t, enum cpu_kernel_variant v);

#endif
