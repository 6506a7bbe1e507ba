/* quant_iq — the codebook and lattice types of ggml (IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ1_S, IQ1_M), the ternary types (TQ1_0, TQ2_0) and Q8_K: their block layouts (quant_iq.c), decoded to
 * integers, and the row functions of the table of types (quant.c) built on that decoding.
 *
 * Every one of these blocks is, exactly, integers times one float (struct quant_iq_ints):
 *     w_e = d * s[e / 16] * g[e]
 * with g the element's grid or codebook value (its sign applied), s a small integer scale per 16 elements
 * and d the block's float scale (its f16 times a power of two). |s * g| < 2^12 and d has at most 11
 * significant bits (f16), so d * (float)(s * g) is exact in f32 for every type but Q8_K (whose d is an
 * f32: one rounding, as d * q). That is how quant_iq.c dequantizes, and what the CPU kernels
 * (backend/cpu_iquant.c) multiply with exact integer sums: the layout is written once, here.
 */
#ifndef NS_GGUF_QUANT_IQ_H
#define NS_GGUF_QUANT_IQ_H

#include <stdint.h>

#include "gguf/gguf.h"

#define QUANT_IQ4_NL_BLOCK 32 /* elements per IQ4_NL block; every other type here: 256 */

/* The 16 values of the IQ4_NL / IQ4_XS codebook (ascending), a fact of the format. */
#define QUANT_IQ4_VALUES {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

struct quant_iq_ints {
    int8_t g[256];  /* the elements' integer values (IQ4_NL: the first 32) */
    int16_t s[16];  /* scale of elements 16j .. 16j + 15 (IQ4_NL: s[0] = s[1] = 1) */
    float d;        /* the block's scale */
};

/* 1 for the types decoded here (the list above). */
int quant_iq_type(enum gguf_dtype t);

/* The block at b (one block of type t, quant_iq_type(t)) as integers. Pure; reads exactly the block's bytes. */
void quant_iq_decode(enum gguf_dtype t, const uint8_t *b, struct quant_iq_ints *k);

/* The table's row functions (n: whole blocks, checked by quant_dequantize_row / quant_quantize_row). */
void quant_iq_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq3_xxs(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq3_s(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq2_xxs(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq2_xs(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq2_s(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq1_s(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_iq1_m(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_tq1_0(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_tq2_0(const void *src, float *dst, int64_t n);
void quant_iq_dequantize_row_q8_k(const void *src, float *dst, int64_t n);

/* Quantizers (no importance matrix): IQ4_NL and IQ4_XS choose each 32-element scale by a small search over
 * candidate scales (least squares given the codebook assignment), IQ4_XS then the super-block's f16 and the
 * 6-bit sub-block scales; the elements take the codebook value nearest under the stored scale. Q8_K: d =
 * amax / 127, q rounded to nearest, bsums. */
void quant_iq_quantize_row_iq4_nl(const float *src, void *dst, int64_t n);
void quant_iq_quantize_row_iq4_xs(const float *src, void *dst, int64_t n);
void quant_iq_quantize_row_q8_k(const float *src, void *dst, int64_t n);

#endif
