/* cpu_iquant — the CPU backend's kernels for the codebook, lattice and ternary weight types (IQ4_NL,
 * IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0) and Q8_K weights (private to
 * src/backend/): a scalar reference and an AVX2 version, chosen at run time through cpu_kernel_variant /
 * cpu_kernel_best (cpu_kernels.h); the VNNI and AVX-512 variants are the AVX2 one (cpu_kernel_best falls
 * back to it).
 *
 * Weights stay in their ggml layout (the backend copies the rows as they are). Each block is decoded to
 * the integers of gguf/quant_iq.h, w_e = d * s[e / 16] * g[e] (the same decoding the dequantizer uses;
 * the AVX2 version decodes IQ4_NL and IQ4_XS with its own byte shuffles, the rest through quant_iq_decode).
 *
 * Activations: IQ4_NL rows (32-element blocks) with CPU_ACT_Q8 (struct cpu_q8_block), every other type
 * with CPU_ACT_Q8K (struct cpu_q8k_block, cpu_kquant.h).
 *
 * The arithmetic (what every variant computes, bit for bit). Per weight block and activation block
 * (d_x, q), an exact integer
 *     P = sum over j of s_j * (sum of g_e * q_e over the elements e of scale j)
 * (|s * g| < 2^12 but for Q8_K's g <= 128, |q| <= 127, 256 elements: |P| < 2^27), then, from a = 0 and in
 * block order, a = fma(d * d_x, (float)P, a); the dot is a. The integer sums may be split in any order
 * (exact); the float part is one chain per (weight row, activation row), so a row's result does not depend
 * on the other rows of a call (batch invariance). Bound against the dequantized weights: the result
 * differs from sum_e w_e * d_x * q_e by the rounding of (float)P, of d * d_x and of each fma, i.e. within a
 * few units in the last place of sum |w_e d_x q_e| per block (tests/test_cpu_iquant.c states its bound).
 */
#ifndef NS_BACKEND_CPU_IQUANT_H
#define NS_BACKEND_CPU_IQUANT_H

#include "backend/cpu_kernels.h"
#include "gguf/gguf.h"

/* 1 for the types above (gguf/quant_iq.h's quant_iq_type). */
int cpu_iquant_type(enum gguf_dtype t);

/* The kernels of such a type in one variant; NULLs for another type or a variant this build lacks. */
struct cpu_kernel cpu_iquant_variant(enum gguf_dtype t, enum cpu_kernel_variant v);

#endif
