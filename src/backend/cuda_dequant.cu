/* cuda_dequant — GGUF weight rows to BF16 on the device, at load (cuda_upload_rows streams the raw bytes up
 * and this file's kernel writes the BF16 matrix).
 *
 * Invariant: the BF16 bits equal, element for element, what the host reference gives: quant_dequantize_row
 * (src/gguf/quant.c) to f32, then quant_f32_to_bf16. Each function below mirrors its quant.c twin: the same
 * f16 decoding (cuda_dq_f16, bit for bit, NaN payloads kept), the same float operations in the same order,
 * each rounded on its own (__fmul_rn / __fadd_rn / __fsub_rn: nvcc would otherwise fuse a*b+c into one
 * FMA, and quant.c is compiled without contraction, -std=c11), and the same rounding to BF16 on the bit
 * pattern (cuda_dq_bf16). That holds for every input whose f16 scales are finite; a block with an inf or
 * NaN scale gives NaN or inf on both sides, but a NaN's bits may differ (the GPU's arithmetic returns its
 * canonical NaN, the host's its own). F32 and F16 sources involve no arithmetic and match for every input.
 *
 * Threads: one per output element, so that a warp writes 64 consecutive bytes of a row. Element i of a
 * block is computed on its own (the block's scales are read again by each of its threads, from cache):
 * each function below states which bytes element i reads, derived from quant.c's loop order. This runs
 * once per weight at load; it is written to be checked, not tuned.
 */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "gguf/gguf.h"
#include "gguf/quant_iq.h"
}
#include "gguf/quant_iq_grids.h"
#include "backend/cuda_kernels.h"

/* ---------------------------------------------------------------- bits */

/* IEEE half bits to f32, as quant_f16_to_f32: exact, subnormals normalized, inf and NaN payloads kept. */
__device__ __forceinline__ float cuda_dq_f16(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return __uint_as_float(sign);
        int e = -14;
        while (!(mant & 0x400)) {
            mant <<= 1;
            e--;
        }
        mant &= 0x3ff;
        return __uint_as_float(sign | (uint32_t)(e + 127) << 23 | mant << 13);
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | mant << 13);
    return __uint_as_float(sign | (exp - 15 + 127) << 23 | mant << 13);
}

/* f32 to BF16 bits, as quant_f32_to_bf16: NaN quieted (payload's top bits kept), else round to nearest even. */
__device__ __forceinline__ uint16_t cuda_dq_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* The f16 at p (little-endian, any alignment). */
__device__ __forceinline__ float cuda_dq_ld_f16(const uint8_t *p)
{
    return cuda_dq_f16((uint16_t)(p[0] | p[1] << 8));
}

/* ---------------------------------------------------------------- element i of one block, per type */

/* Q4_0 (18 B): d; qs[16]. Elements 0..15 are the low nibbles of qs, 16..31 the high. x = d*(q-8). */
__device__ float cuda_dq_q4_0(const uint8_t *b, int i)
{
    const uint8_t q = b[2 + (i & 15)];
    return __fmul_rn(cuda_dq_ld_f16(b), (float)((i < 16 ? q & 15 : q >> 4) - 8));
}

/* Q4_1 (20 B): d, m; qs[16] (nibbles as Q4_0). x = d*q + m. */
__device__ float cuda_dq_q4_1(const uint8_t *b, int i)
{
    const uint8_t q = b[4 + (i & 15)];
    return __fadd_rn(__fmul_rn(cuda_dq_ld_f16(b), (float)(i < 16 ? q & 15 : q >> 4)), cuda_dq_ld_f16(b + 2));
}

/* Q5_0 (22 B: d; qh[4]; qs[16]) and Q5_1 (24 B: d, m; qh[4]; qs[16]): nibbles as Q4_0, the 5th bit of
 * element i is bit i of qh (u32). x = d*(q-16) + 0 (Q5_0: quant.c adds m = 0.0f, which turns -0 into +0)
 * or d*q + m (Q5_1). */
__device__ float cuda_dq_q5(const uint8_t *b, int i, int has_min)
{
    const float d = cuda_dq_ld_f16(b), m = has_min ? cuda_dq_ld_f16(b + 2) : 0.0f;
    const uint8_t *qh = b + (has_min ? 4 : 2), *qs = qh + 4;
    const int hi = (qh[i >> 3] >> (i & 7)) & 1;
    const int q = (i < 16 ? qs[i & 15] & 15 : qs[i & 15] >> 4) | hi << 4;
    return __fadd_rn(__fmul_rn(d, (float)(q - (has_min ? 0 : 16))), m);
}

/* Q8_0 (34 B): d; int8 qs[32]. x = d*q. */
__device__ float cuda_dq_q8_0(const uint8_t *b, int i)
{
    return __fmul_rn(cuda_dq_ld_f16(b), (float)(int8_t)b[2 + i]);
}

/* Q2_K (84 B): scales[16]; qs[64]; d, dmin. Element i: group i/16 (scale = low nibble of scales[i/16],
 * min = high nibble), 2-bit quant at bits 2*((i%128)/32) of qs[32*(i/128) + i%32].
 * x = (d*sc)*q - dmin*m. */
__device__ float cuda_dq_q2_k(const uint8_t *b, int i)
{
    const uint8_t sc = b[i / 16];
    const float dl = __fmul_rn(cuda_dq_ld_f16(b + 80), (float)(sc & 15));
    const float ml = __fmul_rn(cuda_dq_ld_f16(b + 82), (float)(sc >> 4));
    const int q = (b[16 + 32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3;
    return __fsub_rn(__fmul_rn(dl, (float)q), ml);
}

/* Q3_K (110 B): hmask[32]; qs[64]; scales[12]; d. Element i: group g = i/16 with the 6-bit scale stored
 * +32 (low 4 bits: nibble g/8 of scales[g%8]; high 2 bits: bits 2*(g/4) of scales[8 + g%4]); 2 low quant
 * bits as Q2_K, high bit = bit i/32 of hmask[i%32], and q - 4 when that bit is clear. x = (d*(sc-32))*q. */
__device__ float cuda_dq_q3_k(const uint8_t *b, int i)
{
    const uint8_t *s = b + 96;
    const int g = i / 16;
    const int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    const int sc = (lo | hi << 4) - 32;
    const int k = i % 32;
    const int q = ((b[32 + 32 * (i / 128) + k] >> (2 * (i % 128 / 32))) & 3) - ((b[k] >> (i / 32)) & 1 ? 0 : 4);
    return __fmul_rn(__fmul_rn(cuda_dq_ld_f16(b + 108), (float)sc), (float)q);
}

/* Q4_K (144 B: d, dmin; scales[12]; qs[128]) and Q5_K (176 B: d, dmin; scales[12]; qh[32]; qs[128]).
 * Element i: group g = i/32 with its 6-bit scale and min (quant.c's get_scale_min_k4); nibble g%2 of
 * qs[32*(i/64) + i%32]; Q5_K's 5th bit = bit g of qh[i%32]. x = (d*sc)*q - dmin*m. */
__device__ float cuda_dq_k_4_5(const uint8_t *b, int i, int five)
{
    const uint8_t *s = b + 4, *qs = b + (five ? 48 : 16);
    const int g = i / 32, l = i % 32;
    const int sc = g < 4 ? s[g] & 63 : (s[g + 4] & 15) | (s[g - 4] >> 6) << 4;
    const int m = g < 4 ? s[g + 4] & 63 : (s[g + 4] >> 4) | (s[g] >> 6) << 4;
    const float dl = __fmul_rn(cuda_dq_ld_f16(b), (float)sc), ml = __fmul_rn(cuda_dq_ld_f16(b + 2), (float)m);
    const uint8_t qb = qs[32 * (i / 64) + l];
    const int q = (g % 2 ? qb >> 4 : qb & 15) + (five && (b[16 + l] >> g) & 1 ? 16 : 0);
    return __fsub_rn(__fmul_rn(dl, (float)q), ml);
}

/* Q6_K (210 B): ql[128]; qh[64]; int8 scales[16]; d. Element i: half h = i/128, quarter t = (i%128)/32,
 * l = i%32; low 4 bits: nibble t/2 of ql[64*h + 32*(t%2) + l]; high 2 bits: bits 2*t of qh[32*h + l];
 * scale scales[8*h + 2*t + l/16]. x = (d*sc)*(q-32). */
__device__ float cuda_dq_q6_k(const uint8_t *b, int i)
{
    const int h = i / 128, t = i % 128 / 32, l = i % 32;
    const uint8_t lb = b[64 * h + 32 * (t % 2) + l];
    const int q = ((t < 2 ? lb & 15 : lb >> 4) | ((b[128 + 32 * h + l] >> (2 * t)) & 3) << 4) - 32;
    const int sc = (int8_t)b[192 + 8 * h + 2 * t + l / 16];
    return __fmul_rn(__fmul_rn(cuda_dq_ld_f16(b + 208), (float)sc), (float)q);
}

/* ---------------------------------------------------------------- the codebook, lattice and ternary types, Q8_K */

/* Each is quant_iq.c's integer form, element i on its own: w = d' * (float)(s * g) with d' the block's
 * scale (the f16 times 1/8 or 1/4 where quant_iq.c multiplies so), s the element's integer scale and g its
 * signed grid or codebook value, the same two roundings as quant_iq.c's (both exact there but for Q8_K).
 * Layouts: quant_iq.c's top comment; the grids are quant_iq_grids.h's code words. */
__constant__ int8_t cuda_dq_iq4_values[16] = QUANT_IQ4_VALUES;
__constant__ int8_t cuda_dq_iq2_values[3] = QUANT_IQ2_VALUES;
__constant__ int8_t cuda_dq_iq3xxs_values[8] = QUANT_IQ3XXS_VALUES;
__constant__ int8_t cuda_dq_iq3s_values[8] = QUANT_IQ3S_VALUES;
__constant__ int8_t cuda_dq_iq1_values[3] = QUANT_IQ1_VALUES;
__constant__ uint16_t cuda_dq_iq2xxs_grid[QUANT_IQ2XXS_GRID_N] = QUANT_IQ2XXS_GRID;
__constant__ uint16_t cuda_dq_iq2xs_grid[QUANT_IQ2XS_GRID_N] = QUANT_IQ2XS_GRID;
__constant__ uint16_t cuda_dq_iq2s_grid[QUANT_IQ2S_GRID_N] = QUANT_IQ2S_GRID;
__constant__ uint16_t cuda_dq_iq3xxs_grid[QUANT_IQ3XXS_GRID_N] = QUANT_IQ3XXS_GRID;
__constant__ uint16_t cuda_dq_iq3s_grid[QUANT_IQ3S_GRID_N] = QUANT_IQ3S_GRID;
__constant__ uint16_t cuda_dq_iq1s_grid[QUANT_IQ1S_GRID_N] = QUANT_IQ1S_GRID;

__device__ __forceinline__ uint32_t cuda_dq_rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

__device__ __forceinline__ uint32_t cuda_dq_rd32(const uint8_t *p)
{
    return cuda_dq_rd16(p) | cuda_dq_rd16(p + 2) << 16;
}

/* Bit k of the 8 signs of a 7-bit sign index (bit 7 = the parity of the 7). */
__device__ __forceinline__ int cuda_dq_sign7(uint32_t idx, int k)
{
    idx &= 127;
    return (int)(((idx | (uint32_t)(__popc(idx) & 1) << 7) >> k) & 1);
}

__device__ __forceinline__ float cuda_dq_iq(float d, int s, int g)
{
    return __fmul_rn(d, (float)(s * g));
}

/* A 2-bit code k of an 8-value grid word through vals, negated when neg. */
__device__ __forceinline__ int cuda_dq_grid2(uint16_t word, int k, const int8_t *vals, int neg)
{
    const int v = vals[(word >> (2 * k)) & 3];
    return neg ? -v : v;
}

__device__ __forceinline__ int cuda_dq_grid3(uint16_t word, int k, const int8_t *vals, int neg)
{
    const int v = vals[(word >> (3 * k)) & 7];
    return neg ? -v : v;
}

/* IQ4_NL (18 B): d; qs[16], nibbles as Q4_0's through the codebook. */
__device__ float cuda_dq_iq4_nl(const uint8_t *b, int i)
{
    const uint8_t q = b[2 + (i & 15)];
    return cuda_dq_iq(cuda_dq_ld_f16(b), 1, cuda_dq_iq4_values[i < 16 ? q & 15 : q >> 4]);
}

/* IQ4_XS (136 B): d; scales_h; scales_l[4]; qs[128]; sub-block sb = i/32, ls - 32 its scale. */
__device__ float cuda_dq_iq4_xs(const uint8_t *b, int i)
{
    const int sb = i / 32, j = i % 32;
    const int ls = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((cuda_dq_rd16(b + 2) >> (2 * sb)) & 3) << 4;
    const uint8_t q = b[8 + 16 * sb + (j & 15)];
    return cuda_dq_iq(cuda_dq_ld_f16(b), ls - 32, cuda_dq_iq4_values[j < 16 ? q & 15 : q >> 4]);
}

/* IQ2_XXS (66 B): d; per sub-block 4 grid indices and a u32 of 4 sign indices and ls. d/8 * (2ls+1) * g. */
__device__ float cuda_dq_iq2_xxs(const uint8_t *b, int i)
{
    const uint8_t *p = b + 2 + 8 * (i / 32);
    const uint32_t aux = cuda_dq_rd32(p + 4);
    const int l = i % 32 / 8, k = i % 8;
    const int g = cuda_dq_grid2(cuda_dq_iq2xxs_grid[p[l]], k, cuda_dq_iq2_values, cuda_dq_sign7(aux >> (7 * l), k));
    return cuda_dq_iq(__fmul_rn(cuda_dq_ld_f16(b), 0.125f), 2 * (int)(aux >> 28) + 1, g);
}

/* IQ2_XS (74 B): d; u16 qs[32] (9-bit index, 7-bit sign index); scales[8] (a nibble per 16). */
__device__ float cuda_dq_iq2_xs(const uint8_t *b, int i)
{
    const uint32_t q = cuda_dq_rd16(b + 2 + 2 * (i / 8));
    const int k = i % 8, j = i / 16;
    const int g = cuda_dq_grid2(cuda_dq_iq2xs_grid[q & 511], k, cuda_dq_iq2_values, cuda_dq_sign7(q >> 9, k));
    return cuda_dq_iq(__fmul_rn(cuda_dq_ld_f16(b), 0.125f), 2 * ((b[66 + j / 2] >> (4 * (j % 2))) & 15) + 1, g);
}

/* IQ2_S (82 B): d; qs[32]; signs[32]; qh[8] (2 high index bits a group); scales[8]. */
__device__ float cuda_dq_iq2_s(const uint8_t *b, int i)
{
    const int l = i / 8, k = i % 8, j = i / 16;
    const int idx = b[2 + l] | ((b[66 + l / 4] >> (2 * (l % 4))) & 3) << 8;
    const int g = cuda_dq_grid2(cuda_dq_iq2s_grid[idx], k, cuda_dq_iq2_values, (b[34 + l] >> k) & 1);
    return cuda_dq_iq(__fmul_rn(cuda_dq_ld_f16(b), 0.125f), 2 * ((b[74 + j / 2] >> (4 * (j % 2))) & 15) + 1, g);
}

/* IQ3_XXS (98 B): d; qs[64] (an index per 4); u32[8] of sign indices and ls. d/4 * (2ls+1) * g. */
__device__ float cuda_dq_iq3_xxs(const uint8_t *b, int i)
{
    const uint32_t aux = cuda_dq_rd32(b + 66 + 4 * (i / 32));
    const int neg = cuda_dq_sign7(aux >> (7 * (i % 32 / 8)), i % 8);
    const int g = cuda_dq_grid3(cuda_dq_iq3xxs_grid[b[2 + i / 4]], i % 4, cuda_dq_iq3xxs_values, neg);
    return cuda_dq_iq(__fmul_rn(cuda_dq_ld_f16(b), 0.25f), 2 * (int)(aux >> 28) + 1, g);
}

/* IQ3_S (110 B): d; qs[64]; qh[8] (the 9th index bit); signs[32]; scales[4]. d * (2ls+1) * g. */
__device__ float cuda_dq_iq3_s(const uint8_t *b, int i)
{
    const int idx = i / 4, sb = i / 32;
    const int gi = b[2 + idx] | ((b[66 + idx / 8] >> (idx % 8)) & 1) << 8;
    const int g = cuda_dq_grid3(cuda_dq_iq3s_grid[gi], i % 4, cuda_dq_iq3s_values, (b[74 + i / 8] >> (i % 8)) & 1);
    return cuda_dq_iq(cuda_dq_ld_f16(b), 2 * ((b[106 + sb / 2] >> (4 * (sb % 2))) & 15) + 1, g);
}

/* IQ1's 8 grid + delta (in eighths) of grid point idx, value k. */
__device__ __forceinline__ int cuda_dq_iq1_value(int idx, int k, int neg)
{
    return 8 * cuda_dq_iq1_values[(cuda_dq_iq1s_grid[idx] >> (2 * k)) & 3] + (neg ? -1 : 1);
}

/* IQ1_S (50 B): d; qs[32]; u16 qh[8] (3 index bits a group, ls at 12, the delta's sign at 15). */
__device__ float cuda_dq_iq1_s(const uint8_t *b, int i)
{
    const int sb = i / 32, l = i % 32 / 8;
    const uint32_t qh = cuda_dq_rd16(b + 34 + 2 * sb);
    const int g = cuda_dq_iq1_value(b[2 + 4 * sb + l] | ((qh >> (3 * l)) & 7) << 8, i % 8, (qh >> 15) & 1);
    return cuda_dq_iq(__fmul_rn(cuda_dq_ld_f16(b), 0.125f), 2 * ((qh >> 12) & 7) + 1, g);
}

/* IQ1_M (56 B): qs[32]; qh[16] (a nibble a group: 3 index bits, the delta's sign); u16 sc[4] (3-bit scales
 * per 16; the f16 d in their top nibbles). */
__device__ float cuda_dq_iq1_m(const uint8_t *b, int i)
{
    const uint32_t s0 = cuda_dq_rd16(b + 48), s1 = cuda_dq_rd16(b + 50);
    const uint32_t s2 = cuda_dq_rd16(b + 52), s3 = cuda_dq_rd16(b + 54);
    const uint16_t d16 = (uint16_t)(s0 >> 12 | (s1 >> 8 & 0xf0) | (s2 >> 4 & 0xf00) | (s3 & 0xf000));
    const int l = i / 8, j = i / 16;
    const int h = (b[32 + l / 2] >> (4 * (l % 2))) & 15;
    const int g = cuda_dq_iq1_value(b[l] | (h & 7) << 8, i % 8, h >> 3);
    const uint32_t sc = cuda_dq_rd16(b + 48 + 2 * (j / 4));
    return cuda_dq_iq(__fmul_rn(cuda_dq_f16(d16), 0.125f), 2 * ((sc >> (3 * (j % 4))) & 7) + 1, g);
}

/* TQ1_0 (54 B): qs[48]; qh[4]; d. Five (qh: four) base-3 digits a byte. d * (trit - 1). */
__device__ float cuda_dq_tq1_0(const uint8_t *b, int i)
{
    const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t v;
    int n;
    if (i < 160) {
        v = b[i % 32], n = i / 32;
    } else if (i < 240) {
        v = b[32 + (i - 160) % 16], n = (i - 160) / 16;
    } else {
        v = b[48 + (i - 240) % 4], n = (i - 240) / 4;
    }
    const int t = ((uint8_t)(v * pow3[n]) * 3) >> 8;
    return cuda_dq_iq(cuda_dq_ld_f16(b + 52), 1, t - 1);
}

/* TQ2_0 (66 B): qs[64]; d. Element 128h + 32k + m: bits 2k of qs[32h + m]. d * (q - 1). */
__device__ float cuda_dq_tq2_0(const uint8_t *b, int i)
{
    const int q = (b[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3;
    return cuda_dq_iq(cuda_dq_ld_f16(b + 64), 1, q - 1);
}

/* Q8_K (292 B): f32 d; int8 qs[256]; bsums. d * q. */
__device__ float cuda_dq_q8_k(const uint8_t *b, int i)
{
    return cuda_dq_iq(__uint_as_float(cuda_dq_rd32(b)), 1, (int8_t)b[4 + i]);
}

/* Element i of the block at b (i < the type's block size), for the types of the table's gpu column
 * (cuda_dequant_supported). A type marked there without a case here decodes as zeros, which test_cuda's
 * kernel_dequant (it walks the column) reports. */
__device__ __forceinline__ float cuda_dq_element(enum gguf_dtype t, const uint8_t *b, int i)
{
    switch (t) {
    case GGUF_DTYPE_F32: return __uint_as_float((uint32_t)b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24);
    case GGUF_DTYPE_F16: return cuda_dq_ld_f16(b);
    case GGUF_DTYPE_Q4_0: return cuda_dq_q4_0(b, i);
    case GGUF_DTYPE_Q4_1: return cuda_dq_q4_1(b, i);
    case GGUF_DTYPE_Q5_0: return cuda_dq_q5(b, i, 0);
    case GGUF_DTYPE_Q5_1: return cuda_dq_q5(b, i, 1);
    case GGUF_DTYPE_Q8_0: return cuda_dq_q8_0(b, i);
    case GGUF_DTYPE_Q2_K: return cuda_dq_q2_k(b, i);
    case GGUF_DTYPE_Q3_K: return cuda_dq_q3_k(b, i);
    case GGUF_DTYPE_Q4_K: return cuda_dq_k_4_5(b, i, 0);
    case GGUF_DTYPE_Q5_K: return cuda_dq_k_4_5(b, i, 1);
    case GGUF_DTYPE_Q6_K: return cuda_dq_q6_k(b, i);
    case GGUF_DTYPE_IQ4_NL: return cuda_dq_iq4_nl(b, i);
    case GGUF_DTYPE_IQ4_XS: return cuda_dq_iq4_xs(b, i);
    case GGUF_DTYPE_IQ2_XXS: return cuda_dq_iq2_xxs(b, i);
    case GGUF_DTYPE_IQ2_XS: return cuda_dq_iq2_xs(b, i);
    case GGUF_DTYPE_IQ2_S: return cuda_dq_iq2_s(b, i);
    case GGUF_DTYPE_IQ3_XXS: return cuda_dq_iq3_xxs(b, i);
    case GGUF_DTYPE_IQ3_S: return cuda_dq_iq3_s(b, i);
    case GGUF_DTYPE_IQ1_S: return cuda_dq_iq1_s(b, i);
    case GGUF_DTYPE_IQ1_M: return cuda_dq_iq1_m(b, i);
    case GGUF_DTYPE_TQ1_0: return cuda_dq_tq1_0(b, i);
    case GGUF_DTYPE_TQ2_0: return cuda_dq_tq2_0(b, i);
    case GGUF_DTYPE_Q8_K: return cuda_dq_q8_k(b, i);
    default: return 0.0f; /* not reached: the launcher checks cuda_dequant_supported */
    }
}

/* ---------------------------------------------------------------- kernel, launcher */

/* dst (n_rows, n_in) BF16 bits = the rows of src (row_bytes apart; blocks of bs elements, block_bytes
 * each). Column k = blockIdx.x * blockDim.x + threadIdx.x; rows from blockIdx.y, strided by gridDim.y. */
__global__ void cuda_k_dequant(enum gguf_dtype t, const uint8_t *src, int64_t n_rows, int32_t n_in, int32_t bs,
                               int32_t block_bytes, int64_t row_bytes, uint16_t *dst)
{
    const int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= n_in) return;
    const int64_t in_row = (int64_t)(k / bs) * block_bytes;
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y)
        dst[r * n_in + k] = cuda_dq_bf16(cuda_dq_element(t, src + r * row_bytes + in_row, k % bs));
}

/* The table of types' gpu column (quant.c), the one list of what cuda_dq_element decodes; test_cuda's
 * kernel_dequant runs every type it names against the host's conversion. */
int cuda_dequant_supported(enum gguf_dtype t)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    return ti && ti->gpu_dequant;
}

int cuda_launch_dequant(cudaStream_t st, enum gguf_dtype t, const void *src, int64_t n_rows, int64_t n_in,
                        uint16_t *dst, struct err *e)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    if (!cuda_dequant_supported(t) || !ti)
        return err_set(e, "cuda_launch_dequant: type %d cannot be dequantized on the device", (int)t);
    if (n_rows < 0 || n_in < 1 || n_in > INT32_MAX || n_in % ti->block_size)
        return err_set(e, "cuda_launch_dequant: %lld rows of %lld elements of %s (rows must be whole blocks of %u)",
                       (long long)n_rows, (long long)n_in, ti->name, ti->block_size);
    if (n_rows == 0) return 0;
    const int threads = 256;
    const dim3 grid((unsigned)((n_in + threads - 1) / threads), (unsigned)(n_rows < 65535 ? n_rows : 65535));
    const int64_t row_bytes = (int64_t)gguf_row_bytes((uint32_t)t, (uint64_t)n_in);
    cuda_k_dequant<<<grid, threads, 0, st>>>(t, (const uint8_t *)src, n_rows, (int32_t)n_in, (int32_t)ti->block_size,
                                             (int32_t)ti->block_bytes, row_bytes, dst);
    CU_LAUNCHED();
    return 0;
}
