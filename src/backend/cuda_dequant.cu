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
}
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
