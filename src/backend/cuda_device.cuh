/* cuda_device — device-side pieces shared by the CUDA backend's kernel files (CUDA C++; private to
 * src/backend/): element conversions, the row arithmetic of RMSNorm and SwiGLU (their kernels and the fused
 * GEMVs of cuda_gemv.cu), the attention kernels' arguments and their chunk merge, and the tensor-core
 * attention's entry points (cuda_attn_tc.cu) that cuda_kernels.cu dispatches to.
 */
#ifndef NS_BACKEND_CUDA_DEVICE_CUH
#define NS_BACKEND_CUDA_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda_kernels.h"

template <typename T> __device__ __forceinline__ T cuda_from_f32(float v);
template <> __device__ __forceinline__ float cuda_from_f32<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 cuda_from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half cuda_from_f32<__half>(float v)
{
    return __float2half_rn(v);
}

__device__ __forceinline__ float cuda_to_f32(float v)
{
    return v;
}
__device__ __forceinline__ float cuda_to_f32(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
__device__ __forceinline__ float cuda_to_f32(__half v)
{
    return __half2float(v);
}

/* ---- RMSNorm and SwiGLU: the arithmetic their own kernels (cuda_kernels.cu) and the fused GEMVs' prologues
 * (cuda_gemv.cu) share, so that both give the same bits */

#define CUDA_NORM4_MAX 4 /* float4s per thread of cuda_k_rmsnorm4 at most (n <= 16384 at 1024 threads) */

/* Butterfly sum in double: every lane ends with the same value. */
__device__ __forceinline__ double cuda_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Threads of cuda_k_rmsnorm4's block for rows of n (n % 4 == 0, n <= 4 * 1024 * CUDA_NORM4_MAX): about
 * CUDA_NORM4_MAX float4s each (a function of n alone). */
static inline int cuda_norm4_threads(int32_t n)
{
    const int32_t per = (n / 4 + CUDA_NORM4_MAX - 1) / CUDA_NORM4_MAX;
    return (per + 31) / 32 * 32;
}

/* o[0..3] = a, b, c, d as T, one 16-byte (f32) or 8-byte (bf16) store; o aligned to it. */
__device__ __forceinline__ void cuda_store4(float *o, float a, float b, float c, float d)
{
    *(float4 *)o = make_float4(a, b, c, d);
}

__device__ __forceinline__ void cuda_store4(__nv_bfloat16 *o, float a, float b, float c, float d)
{
    __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
    uint2 u;
    u.x = *(const uint32_t *)&lo;
    u.y = *(const uint32_t *)&hi;
    *(uint2 *)o = u;
}

/* ss + the squares of v's four elements, in order, in double (each square is exact). */
__device__ __forceinline__ double cuda_norm_ss4(double ss, float4 v)
{
    ss += (double)v.x * (double)v.x;
    ss += (double)v.y * (double)v.y;
    ss += (double)v.z * (double)v.z;
    ss += (double)v.w * (double)v.w;
    return ss;
}

/* The first pass of cuda_k_rmsnorm4 (and of cuda_fp8.cu's RMSNorm, which keeps its arithmetic): thread t's
 * float4s t, t + blockDim.x, ... (J of them, below n4) of the row xr into v, plus add's ar (may be NULL;
 * the sums written back into xr); every load first (predicated, no early exit), so all 2 J of a thread are
 * in flight together. Returns the thread's sum of squares of its elements in index order. */
template <int J>
__device__ __forceinline__ double cuda_norm4_load(float4 *xr, const float4 *ar, int32_t n4, float4 (&v)[J])
{
    float4 a[J];
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int32_t i = threadIdx.x + j * blockDim.x;
        if (i < n4) v[j] = xr[i];
        if (ar && i < n4) a[j] = ar[i];
    }
    double ss = 0.0;
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int32_t i = threadIdx.x + j * blockDim.x;
        if (i >= n4) continue;
        if (ar) {
            v[j] = make_float4(__fadd_rn(v[j].x, a[j].x), __fadd_rn(v[j].y, a[j].y), __fadd_rn(v[j].z, a[j].z),
                               __fadd_rn(v[j].w, a[j].w));
            xr[i] = v[j];
        }
        ss = cuda_norm_ss4(ss, v[j]);
    }
    return ss;
}

/* RMSNorm's scale 1 / sqrt(mean + eps) for a row of n whose sum of squares the block's threads hold in
 * parts (ss): a butterfly per warp, then the warps' sums in warp order (part: 32 doubles of shared memory).
 * Every thread of the block calls it (a barrier inside) and gets the scale. A warp that holds none of the
 * row adds 0.0, which leaves the sum as it is (it is >= 0): the scale is a function of the threads' parts
 * alone, not of the block size. */
__device__ __forceinline__ float cuda_norm_scale(double ss, int32_t n, float eps, double *part)
{
    ss = cuda_warp_sum_d(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    double total = 0.0;
    for (int k = 0; k < (int)(blockDim.x >> 5); k++) total += part[k];
    return 1.0f / sqrtf((float)(total / (double)n) + eps);
}

/* SwiGLU of one element: silu(g) * u in f32. */
__device__ __forceinline__ float cuda_silu_mul(float g, float u)
{
    return __fmul_rn(g / (1.0f + expf(-g)), u);
}

/* ---- fp8 KV: q8_0's layout (a group of CUDA_Q8_GROUP elements of a head vector, one f16 scale after the
 * layer's values) with e4m3 values: the group's scale d = amax / 448 in f32, each value e4m3(x / d) rounded
 * to nearest even and saturated (+-448), d stored as f16 (nearest even). A value reads back as e4m3 times
 * the f16 scale: exact in f32 (4 + 11 significant bits), and as an f16 tensor-core operand that product
 * rounded once. The pool's KV write, the CUDA-core kernel and the tensor-core kernel's tile conversion all
 * use these, and tests/test_cuda_attn.c checks them against a reference of its own. */

__device__ __forceinline__ float cuda_kv8_scale(float amax)
{
    return __fdiv_rn(amax, 448.0f);
}

__device__ __forceinline__ unsigned char cuda_kv8_quantize(float x, float d)
{
    return d > 0.0f ? (unsigned char)__nv_cvt_float_to_fp8(__fdiv_rn(x, d), __NV_SATFINITE, __NV_E4M3) : 0;
}

/* The value of e4m3 byte q in a group whose f16 scale is s (as f32). */
__device__ __forceinline__ float cuda_kv8_value(unsigned int q, float s)
{
    const __half h = __half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3));
    return __fmul_rn(__half2float(h), s);
}

/* Four e4m3 values (the bytes of w, the lowest first) as f16 operands, with s2 their group's scale bits in
 * both halves: *lo holds values 0 and 1, *hi values 2 and 3, each the f16 of value * scale rounded once (the
 * e4m3 to f16 conversion is exact). */
__device__ __forceinline__ void cuda_kv8_half4(unsigned int w, unsigned int s2, unsigned int *lo, unsigned int *hi)
{
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
    const unsigned int ua = (unsigned int)a.x | (unsigned int)a.y << 16,
                       ub = (unsigned int)b.x | (unsigned int)b.y << 16;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(*lo) : "r"(ua), "r"(s2));
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(*hi) : "r"(ub), "r"(s2));
}

struct cuda_attn_args {
    struct cuda_attn_geom g;
    struct cuda_batch_dev b;
    const float *qkv;
    int32_t qkv_stride;
    const void *k, *v;
    void *out;
    float *part_acc, *part_ml;
    float scale; /* (1 / sqrt(head_dim)) * log2(e): scores in log2 units */
};

/* The merge of chunk states, in chunk order: (M, L, O) <- (M, L, O) (+) (m, l, acc). The weights of the
 * two sides, then each value; M <- max(M, m) afterwards. From M = -inf (nothing yet) the result is
 * exactly (m, l, acc). */
struct cuda_att_w {
    float a, b;
};

__device__ __forceinline__ cuda_att_w cuda_att_merge_w(float M, float m)
{
    const float mn = fmaxf(M, m);
    return {exp2f(__fsub_rn(M, mn)), exp2f(__fsub_rn(m, mn))};
}

__device__ __forceinline__ float cuda_att_merge_v(float X, float x, cuda_att_w w)
{
    return __fmaf_rn(X, w.a, __fmul_rn(x, w.b));
}

/* The tensor-core kernel's shared-memory limit, raised once (cuda_kernels_init calls it). */
int cuda_attn_tc_init(struct err *e);
/* Launches the tensor-core kernels (a.g.attn is CUDA_ATTN_TC or CUDA_ATTN_TC_LDS, cuda_attn_tc_fits holds):
 * the items kernel over grid (whole and multi-row split items, n_head_kv) on st, the split kernel over the
 * split lone rows on split_st; out_bf16 picks the output type. */
int cuda_launch_attn_tc(cudaStream_t st, cudaStream_t split_st, const cuda_attn_args &a, int32_t n_items,
                        int out_bf16, struct err *e);

#endif
