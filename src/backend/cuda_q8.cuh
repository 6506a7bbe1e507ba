/* cuda_q8 — the arithmetic of the CUDA backend's q8_0 KV pool, written once for the device (cuda_kernels.cu
 * includes it with the CUDA intrinsics) and for the host (tests/test_cuda_q8.c includes it with plain C
 * stand-ins of the same IEEE operations and checks it against gguf/quant.c bit for bit).
 *
 * A group of 32 consecutive elements x of a head vector is stored as 32 int8 values q and one f16 scale, bit
 * for bit what quant_quantize_row (GGUF_DTYPE_Q8_0; quant.c's q_q8_0) writes on the host:
 *   amax = max(0, |x_0|, ..., |x_31|)       (fmaxf: a NaN element is skipped; max is exact in any order)
 *   d    = amax / 127                       (f32 division, round to nearest even)
 *   q_j  = d > 0 ? clamp(rint(x_j / d), -127, 127) : 0
 *                                           (the quotient rounded once; rint = round half to EVEN, as
 *                                           lrintf in the default rounding mode, not roundf)
 *   scale = d as f16                        (round to nearest even: quant_f32_to_f16)
 * Note that q is computed with the f32 d, not with its f16 rounding, as on the host. Read back, an element
 * is q * scale in f32: exact (|q| <= 127 needs 7 bits and an f16 scale 11, and f32 holds 24), so it equals
 * the host's quant_dequantize_row. The contract holds for finite x (NaN and infinity are not KV values).
 *
 * The tensor-core attention reads an element as an f16 operand: q * scale rounded once to f16 (to nearest
 * even; the f32 product being exact, that is the f16 of cuda_q8_value). cuda_q8_half4 computes it four at a
 * time with integer and f16x2 operations (no conversion instructions; see there).
 *
 * Every operation is a correctly rounded IEEE one, spelled with the _rn intrinsics (PTX .rn for the f16x2
 * operations) so that nvcc can neither contract nor approximate it. A host includer defines CUDA_Q8_FN, the
 * intrinsics below and cuda_q8_hsub2 / cuda_q8_hmul2 before including.
 */
#ifndef NS_BACKEND_CUDA_Q8_CUH
#define NS_BACKEND_CUDA_Q8_CUH

#ifndef CUDA_Q8_FN
#include <cuda_fp16.h>
#define CUDA_Q8_FN __device__ __forceinline__

/* a - b and a * b on f16x2 bits, each half correctly rounded (nearest even; f16 subnormals kept). */
CUDA_Q8_FN unsigned int cuda_q8_hsub2(unsigned int a, unsigned int b)
{
    unsigned int d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
CUDA_Q8_FN unsigned int cuda_q8_hmul2(unsigned int a, unsigned int b)
{
    unsigned int d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#endif

#define CUDA_Q8_GROUP 32 /* elements per scale */

/* The scale of a group whose largest magnitude is amax (>= 0), in f32 (before its f16 rounding). */
CUDA_Q8_FN float cuda_q8_scale(float amax)
{
    return __fdiv_rn(amax, 127.0f);
}

/* The int8 value of x in a group of f32 scale d. */
CUDA_Q8_FN int cuda_q8_quantize(float x, float d)
{
    if (!(d > 0.0f)) return 0;
    const int q = __float2int_rn(__fdiv_rn(x, d));
    return q < -127 ? -127 : q > 127 ? 127 : q;
}

/* The stored scale: the f16 bits of d. */
CUDA_Q8_FN unsigned short cuda_q8_scale_bits(float d)
{
    return __half_as_ushort(__float2half_rn(d));
}

/* The stored scale as f32 (exact). */
CUDA_Q8_FN float cuda_q8_scale_value(unsigned short bits)
{
    return __half2float(__ushort_as_half(bits));
}

/* An element read back: q times its group's scale (scale_value), exact in f32. */
CUDA_Q8_FN float cuda_q8_value(int q, float scale_value)
{
    return __fmul_rn((float)q, scale_value);
}

/* Four int8 values (the bytes of w, the lowest first) read back as f16 for the tensor cores, with s2 their
 * group's scale bits in both halves: *lo holds values 0 and 1, *hi values 2 and 3 (the lower half of a word
 * holds the lower index), each the f16 bits of q * scale rounded once (to nearest even). A byte b (q = b as
 * int8) flipped in its top bit is q + 128 in [0, 255]; below the f16 exponent byte 0x64 it makes the f16
 * 1024 + q + 128 exactly (f16's step is 1 in [1024, 2048)); minus 1152 (0x6480) that is q, exactly. The f16
 * product q * scale, correctly rounded, is then the f16 of the exact product: one rounding (a product past
 * f16's range becomes an infinity, as an f16 pool would hold that value). */
CUDA_Q8_FN void cuda_q8_half4(unsigned int w, unsigned int s2, unsigned int *lo, unsigned int *hi)
{
    const unsigned int u = w ^ 0x80808080u, bias = 0x64806480u;
    *lo = cuda_q8_hmul2(cuda_q8_hsub2(__byte_perm(u, 0x64646464u, 0x5140), bias), s2);
    *hi = cuda_q8_hmul2(cuda_q8_hsub2(__byte_perm(u, 0x64646464u, 0x7362), bias), s2);
}

#endif
