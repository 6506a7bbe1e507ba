/* quant — block layouts of the ggml tensor types, with plain (scalar, reference) conversion to and from
 * f32. These are the oracle for every SIMD or GPU kernel: a fast dot product must agree with
 * dequantize-then-dot in f32 within a stated tolerance.
 *
 * Layouts (little-endian, packed; "d" and "m" are IEEE half unless stated):
 *   Q8_0: 32 elems, {f16 d; int8 q[32]}                        x = d*q
 *   Q4_0: 32 elems, {f16 d; uint8 qs[16]}                      x = d*(nibble-8); low nibbles = elems 0..15
 *   Q4_1: 32 elems, {f16 d; f16 m; uint8 qs[16]}               x = d*nibble + m
 *   Q5_0, Q5_1: as Q4_* plus uint8 qh[4] holding the 5th bits
 *   Q4_K, Q5_K, Q6_K, Q2_K, Q3_K: 256-element super-blocks (see quant.c for the exact layouts)
 */
#ifndef NS_GGUF_QUANT_H
#define NS_GGUF_QUANT_H

#include <stdint.h>

#include "gguf/gguf.h"

#define QK8_0 32
#define QK4_0 32
#define QK4_1 32
#define QK_K 256

/* IEEE half and bfloat16 <-> f32 (round to nearest even on the way down). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* 1 if the type can be dequantized by quant_dequantize_row (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K..Q6_K). */
int quant_can_dequantize(enum gguf_dtype t);
/* 1 if quant_quantize_row supports the type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K; the K-quants
 * with per-sub-block scales and mins chosen to minimise the squared error, see quant.c). */
int quant_can_quantize(enum gguf_dtype t);

/* n must be a multiple of the type's block size. Return 0, or -1 for an unsupported type / bad n. */
int quant_dequantize_row(enum gguf_dtype t, const void *src, float *dst, int64_t n);
int quant_quantize_row(enum gguf_dtype t, const float *src, void *dst, int64_t n);

#endif
