/* quant — the table of tensor types (the one list of weight types; its columns: gguf.h) and the block layouts
 * of the ggml tensor types, with plain (scalar, reference) conversion to and from f32. Which types convert
 * is the table's to say (quant_can_dequantize, quant_can_quantize); README and messages list them from it.
 * The conversions are the oracle for every SIMD or GPU kernel: a fast dot product must agree with
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
#include "util/err.h"

#define QK8_0 32
#define QK4_0 32
#define QK4_1 32
#define QK_K 256

/* IEEE half and bfloat16 <-> f32 (round to nearest even on the way down). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* The table's answers (its rows: gguf.h, struct gguf_dtype_info; the table: quant.c). */
/* 1 if quant_dequantize_row reads the type (its row has a dequantize_row). */
int quant_can_dequantize(enum gguf_dtype t);
/* 1 if quant_quantize_row writes the type (its row has a quantize_row; the K-quants with per-sub-block
 * scales and mins chosen to minimise the squared error, see quant.c). */
int quant_can_quantize(enum gguf_dtype t);
/* The types quant_can_dequantize, as bits 1ull << type (the form of backend_caps.weight_types). */
uint64_t quant_dequantize_types(void);
/* Debug check of the table's invariant at the top of quant.c; 0 when it holds, else names the rule's number
 * and the type. */
int quant_check_types(struct err *e);

/* n must be a multiple of the type's block size. Return 0, or -1 for a type the table has no function for
 * / bad n. One call through the table's function per row; the blocks are converted by direct calls. */
int quant_dequantize_row(enum gguf_dtype t, const void *src, float *dst, int64_t n);
int quant_quantize_row(enum gguf_dtype t, const float *src, void *dst, int64_t n);

#endif
