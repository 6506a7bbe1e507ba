/* cuda_gemv — the matrix product of the CUDA backend: y = x W^T for BF16 or F32 weights, by cuBLAS, or for
 * one row of BF16 (decode at batch 1) by this file's kernel.
 *
 * Why a kernel of our own: one row reads each weight once for one FMA, so the product is bound by the bytes
 * of W. At batch 1 on synth llama-8b (bench/NOTES.md, 2026-12-02) cuBLAS's layer GEMMs took 4.25 ms a step,
 * this kernel 4.06. For 2 to 8 rows it lost to cuBLAS (loads of x per weight load, L1-bound), so it takes
 * one row only.
 *
 * The kernel: a warp per output row o, its lanes reading 16 bytes (8 weights) of W's row each, CUDA_GEMV_UNROLL
 * loads in flight per lane; each lane sums its k in increasing order (fmaf, f32), then the warp's butterfly
 * adds the 32 lanes' sums in a fixed order: deterministic, and within 1e-5 of the exact sum like cuBLAS
 * (tests/test_cuda.c kernel_gemm).
 *
 * FP8 (e4m3) weights (cuda_fp8.cu's rows: one scale per output row) take the same kernels at one row: each
 * lane's 16-byte load is 16 weights, converted exactly to f32 and multiplied with the BF16 input (W8A16:
 * the one-row path does not quantize its input), the row's sum times its scale once at the end. Half the
 * bytes of BF16, so about half the time where the weights stream from DRAM.
 *
 * Fused GEMVs (cuda_launch_gemv_fused): at batch 1 the RMSNorms and SwiGLU that make a GEMV's input are
 * one-block kernels that read a few KB and cost a launch gap and a latency each (97 a step on llama-8b:
 * three a layer and the output norm), not bytes. Here every block of the GEMV makes the input row itself,
 * into shared memory, with the arithmetic of those kernels in their order (cuda_device.cuh: the same sum of
 * squares, scale and SwiGLU), so the row and the products are bit for bit those of the two kernels apart
 * (tests/test_cuda.c kernel_gemv_fused, tests/test_cuda_step.c step_fused_vs_unfused). Its blocks are large
 * (1,024 threads, at most 32 registers so that two fit a multiprocessor) and as many as fit the device at
 * once, each warp taking a few rows: the input is made once per block (264 times on an H200), not once per 8
 * rows.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_device.cuh"
#include "backend/cuda_kernels.h"

#define CUDA_GEMV_WARPS 8  /* output rows per block */
#define CUDA_GEMV_UNROLL 4 /* 16-byte loads of W in flight per lane (8 measured slower) */
#define CUDA_GEMV_FUSED_WARPS 32 /* a fused GEMV's block: 1,024 threads make its input once for all its rows */
/* its shared memory at most: a NORM row of 8192 f32, a SWIGLU row of 16384 bf16 */
#define CUDA_GEMV_FUSED_SMEM (32 << 10)
/* float4s of a NORM row per thread of a fused block, at most */
#define CUDA_GEMV_NORM_PER (CUDA_GEMV_FUSED_SMEM / 16 / (32 * CUDA_GEMV_FUSED_WARPS))

/* acc += the dot product of 8 weights w with 8 inputs xv (both packed bf16), in order. */
__device__ __forceinline__ float cuda_gemv_fma8(float acc, uint4 w, uint4 xv)
{
    const __nv_bfloat162 *wp = (const __nv_bfloat162 *)&w, *xp = (const __nv_bfloat162 *)&xv;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}

/* acc += the dot product of 16 e4m3 weights w with 16 inputs (xa, xb: packed bf16), in order. */
__device__ __forceinline__ float cuda_gemv_fma16(float acc, uint4 w, uint4 xa, uint4 xb)
{
    const __nv_fp8x2_storage_t *wp = (const __nv_fp8x2_storage_t *)&w;
    const __nv_bfloat162 *xp[2] = {(const __nv_bfloat162 *)&xa, (const __nv_bfloat162 *)&xb};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float2 a = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(wp[i], __NV_E4M3)));
        const float2 b = __bfloat1622float2(xp[i / 4][i % 4]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}

/* The dot product of W's row wr with x (both n8 packs of 8 bf16), by one warp (lane = its lane): each lane
 * sums its packs k8 = lane, lane + 32, ... in increasing order, CUDA_GEMV_UNROLL loads of W in flight, then
 * the butterfly adds the 32 lanes' sums; every lane returns the sum. X_SHARED: x is in shared memory, else
 * global (read through the read-only cache). */
template <bool X_SHARED>
__device__ __forceinline__ float cuda_gemv_dot(const uint4 *wr, const uint4 *x, int32_t n8, int lane)
{
    float acc = 0.0f;
    for (int32_t k8 = lane; k8 < n8; k8 += 32 * CUDA_GEMV_UNROLL) {
        uint4 w[CUDA_GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++)
            if (k8 + 32 * u < n8) w[u] = __ldcs(wr + k8 + 32 * u); /* streamed: W is read once a step */
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++)
            if (k8 + 32 * u < n8) acc = cuda_gemv_fma8(acc, w[u], X_SHARED ? x[k8 + 32 * u] : __ldg(x + k8 + 32 * u));
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    return acc;
}

/* cuda_gemv_dot for an e4m3 row wr (n16 packs of 16 weights, without its scale) and a bf16 x (2 n16 packs of
 * 8): each lane sums its packs k16 = lane, lane + 32, ... in increasing order, then the butterfly. */
template <bool X_SHARED>
__device__ __forceinline__ float cuda_gemv_dot8(const uint4 *wr, const uint4 *x, int32_t n16, int lane)
{
    float acc = 0.0f;
    for (int32_t k = lane; k < n16; k += 32 * CUDA_GEMV_UNROLL) {
        uint4 w[CUDA_GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++)
            if (k + 32 * u < n16) w[u] = __ldcs(wr + k + 32 * u);
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++) {
            const int32_t j = k + 32 * u;
            if (j < n16)
                acc = cuda_gemv_fma16(acc, w[u], X_SHARED ? x[2 * j] : __ldg(x + 2 * j),
                                      X_SHARED ? x[2 * j + 1] : __ldg(x + 2 * j + 1));
        }
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    return acc;
}

/* Row o of W . x by one warp: bf16 W (W8 false), or e4m3 W times its row scale. */
template <bool X_SHARED, bool W8>
__device__ __forceinline__ float cuda_gemv_row(const void *W, const float *scale, int64_t o, int32_t n_in,
                                               const uint4 *x, int lane)
{
    if (!W8) return cuda_gemv_dot<X_SHARED>((const uint4 *)((const __nv_bfloat16 *)W + o * n_in), x, n_in / 8, lane);
    const float acc = cuda_gemv_dot8<X_SHARED>((const uint4 *)((const uint8_t *)W + o * n_in), x, n_in / 16, lane);
    return __fmul_rn(acc, scale[o]);
}

/* y (n_out) = W x as Y (f32, or rounded to bf16 once), W (n_out, n_in) bf16 (scale NULL) or e4m3 with its
 * row scales, x (n_in) bf16; n_in % 8 == 0 (16-byte rows; % 16 for e4m3). */
template <typename Y, bool W8>
__global__ void __launch_bounds__(32 * CUDA_GEMV_WARPS)
    cuda_k_gemv(const void *W, const float *scale, const __nv_bfloat16 *x, int32_t n_in, int32_t n_out, Y *y)
{
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * CUDA_GEMV_WARPS + (threadIdx.x >> 5);
    if (o >= n_out) return;
    const float acc = cuda_gemv_row<false, W8>(W, scale, o, n_in, (const uint4 *)x, lane);
    if (lane == 0) y[o] = cuda_from_f32<Y>(acc);
}

/* act (n) bf16 = cuda_k_swiglu's BF16 output for the row gu (2 n) bf16 (the same cuda_silu_mul, rounded the
 * same way), 8 elements per thread and pass; n % 8 == 0. */
__device__ __forceinline__ void cuda_gemv_swiglu_in(const __nv_bfloat16 *gu, int32_t n, uint4 *act)
{
    const uint4 *g = (const uint4 *)gu, *u = (const uint4 *)(gu + n);
    for (int32_t k8 = threadIdx.x; k8 < n / 8; k8 += blockDim.x) {
        const uint4 gv = g[k8], uv = u[k8];
        const __nv_bfloat162 *gp = (const __nv_bfloat162 *)&gv, *up = (const __nv_bfloat162 *)&uv;
        uint4 out;
        __nv_bfloat162 *op = (__nv_bfloat162 *)&out;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 a = __bfloat1622float2(gp[i]), b = __bfloat1622float2(up[i]);
            op[i] = __halves2bfloat162(__float2bfloat16_rn(cuda_silu_mul(a.x, b.x)),
                                       __float2bfloat16_rn(cuda_silu_mul(a.y, b.y)));
        }
        act[k8] = out;
    }
}

/* act (n) bf16 = cuda_k_rmsnorm4's BF16 output for the row r = rows ? rows[0] : 0 of in.x (+ in.add), bit for
 * bit: v = x + add the same way; each thread t < norm_threads (cuda_norm4_threads(n), that kernel's block)
 * sums the squares of its float4s t, t + norm_threads, ... in index order as that kernel's thread t does (the
 * rest add nothing), then cuda_norm_scale and the same two rounded products. The row waits in shared memory
 * (vs, n f32) rather than in registers, so that every thread of the block loads a part of it; act then
 * overwrites vs (vs[i] is 16 bytes at 16 i, act's float4 i 8 bytes at 8 i: each thread takes its outputs
 * into registers before a barrier). Block 0 alone writes in.x_out. n % 8 == 0, n <= 8192. */
__device__ __forceinline__ void cuda_gemv_norm_in(const struct cuda_gemv_in &in, int32_t n, int norm_threads,
                                                  float4 *vs, double *part)
{
    const int64_t r = in.rows ? in.rows[0] : 0;
    const float4 *x = (const float4 *)(in.x + r * n), *add = in.add ? (const float4 *)(in.add + r * n) : NULL;
    float4 *x_out = blockIdx.x == 0 ? (float4 *)in.x_out : NULL;
    const int32_t n4 = n / 4;
    for (int32_t i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = x[i];
        if (add) {
            const float4 a = add[i];
            v = make_float4(__fadd_rn(v.x, a.x), __fadd_rn(v.y, a.y), __fadd_rn(v.z, a.z), __fadd_rn(v.w, a.w));
        }
        if (x_out) x_out[i] = v;
        vs[i] = v;
    }
    __syncthreads(); /* vs complete */
    double ss = 0.0;
    if ((int)threadIdx.x < norm_threads)
        for (int32_t i = threadIdx.x; i < n4; i += norm_threads) ss = cuda_norm_ss4(ss, vs[i]);
    const float scale = cuda_norm_scale(ss, n, in.eps, part);
    float4 o[CUDA_GEMV_NORM_PER];
#pragma unroll
    for (int k = 0; k < CUDA_GEMV_NORM_PER; k++) {
        const int32_t i = threadIdx.x + k * blockDim.x;
        if (i >= n4) continue;
        const float4 v = vs[i], wv = ((const float4 *)in.w)[i];
        o[k] = make_float4(__fmul_rn(__fmul_rn(v.x, scale), wv.x), __fmul_rn(__fmul_rn(v.y, scale), wv.y),
                           __fmul_rn(__fmul_rn(v.z, scale), wv.z), __fmul_rn(__fmul_rn(v.w, scale), wv.w));
    }
    __syncthreads(); /* every read of vs done */
#pragma unroll
    for (int k = 0; k < CUDA_GEMV_NORM_PER; k++) {
        const int32_t i = threadIdx.x + k * blockDim.x;
        if (i < n4) cuda_store4((__nv_bfloat16 *)vs + 4 * i, o[k].x, o[k].y, o[k].z, o[k].w);
    }
}

/* The fused GEMV: every block makes the input row act (n_in bf16, in dynamic shared memory) from `in`, then
 * its warps run cuda_gemv_dot on their rows of W from there: the rows blockIdx.x + gridDim.x * (warp +
 * CUDA_GEMV_FUSED_WARPS * i), i = 0, 1, ... (a few rows per warp at most, spread evenly over the blocks).
 * Before making act, each warp prefetches the start of its first row into L2, so that weights are on their
 * way meanwhile. x_out (NORM) is written by block 0 alone and read by no block (never x or add), so no block
 * reads it half written. */
template <int KIND, typename Y, bool W8>
__global__ void __launch_bounds__(32 * CUDA_GEMV_FUSED_WARPS, W8 ? 1 : 2)
    cuda_k_gemv_fused(const void *W, const float *scale, int32_t n_in, int32_t n_out, struct cuda_gemv_in in,
                      int norm_threads, Y *y)
{
    extern __shared__ uint4 cuda_gemv_smem[]; /* NORM: n_in f32, then act over it; SWIGLU: act */
    __shared__ double part[32];
    const int lane = threadIdx.x & 31;
    const int64_t o0 = blockIdx.x + (int64_t)gridDim.x * (threadIdx.x >> 5);
    const int64_t stride = (int64_t)gridDim.x * CUDA_GEMV_FUSED_WARPS;
    const int64_t row_bytes = (int64_t)n_in * (W8 ? 1 : 2);
    if (o0 < n_out)
        for (int64_t b = 16 * lane; b < row_bytes && b < 16 * 32 * CUDA_GEMV_UNROLL; b += 16 * 32)
            asm volatile(
                "prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global((const char *)W + o0 * row_bytes + b)));
    if (KIND == CUDA_GEMV_IN_NORM) cuda_gemv_norm_in(in, n_in, norm_threads, (float4 *)cuda_gemv_smem, part);
    else cuda_gemv_swiglu_in((const __nv_bfloat16 *)in.gu, n_in, cuda_gemv_smem);
    __syncthreads(); /* act complete */
    for (int64_t o = o0; o < n_out; o += stride) {
        const float acc = cuda_gemv_row<true, W8>(W, scale, o, n_in, cuda_gemv_smem, lane);
        if (lane == 0) y[o] = cuda_from_f32<Y>(acc);
    }
}

/* Dynamic shared memory of a fused GEMV: the NORM row in f32 (act over it), the SWIGLU row's act in bf16. */
static size_t cuda_gemv_fused_smem(enum cuda_gemv_in_kind kind, int32_t n_in)
{
    return (size_t)n_in * (kind == CUDA_GEMV_IN_NORM ? 4 : 2);
}

/* Launches the fused GEMV with as many blocks as fit on the device at once (one wave, a few rows per warp),
 * fewer where n_out has fewer rows than warps. Host queries only (no stream work): capture-safe. */
template <int KIND, typename Y, bool W8>
static int cuda_gemv_fused_go(cudaStream_t st, const void *W, const float *scale, int32_t n_in, int32_t n_out,
                              const struct cuda_gemv_in *in, Y *y, struct err *e)
{
    const int threads = 32 * CUDA_GEMV_FUSED_WARPS;
    const size_t smem = cuda_gemv_fused_smem((enum cuda_gemv_in_kind)KIND, n_in);
    int dev = 0, n_sm = 0, per_sm = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cuda_k_gemv_fused<KIND, Y, W8>, threads, smem));
    if (per_sm < 1)
        return err_set(e, "cuda backend: a fused GEMV over rows of %d does not fit a multiprocessor", (int)n_in);
    const int64_t want = (n_out + CUDA_GEMV_FUSED_WARPS - 1) / CUDA_GEMV_FUSED_WARPS, room = (int64_t)n_sm * per_sm;
    const unsigned blocks = (unsigned)(want < room ? want : room);
    cuda_k_gemv_fused<KIND, Y, W8>
        <<<blocks, threads, smem, st>>>(W, scale, n_in, n_out, *in, cuda_norm4_threads(n_in), y);
    CU_LAUNCHED();
    return 0;
}

/* cuda_gemv_fused_go's instance for the input kind and the output type. */
template <bool W8>
static int cuda_gemv_fused_y(cudaStream_t st, const void *W, const float *scale, int32_t n_in, int32_t n_out,
                             const struct cuda_gemv_in *in, void *y, enum cuda_act y_type, struct err *e)
{
    const int bf = y_type == CUDA_ACT_BF16;
    if (in->kind == CUDA_GEMV_IN_NORM)
        return bf ? cuda_gemv_fused_go<CUDA_GEMV_IN_NORM, __nv_bfloat16, W8>(st, W, scale, n_in, n_out, in,
                                                                             (__nv_bfloat16 *)y, e)
                  : cuda_gemv_fused_go<CUDA_GEMV_IN_NORM, float, W8>(st, W, scale, n_in, n_out, in, (float *)y, e);
    return bf ? cuda_gemv_fused_go<CUDA_GEMV_IN_SWIGLU, __nv_bfloat16, W8>(st, W, scale, n_in, n_out, in,
                                                                           (__nv_bfloat16 *)y, e)
              : cuda_gemv_fused_go<CUDA_GEMV_IN_SWIGLU, float, W8>(st, W, scale, n_in, n_out, in, (float *)y, e);
}

int cuda_launch_gemv_fused(cudaStream_t st, const void *W, const float *scale, int32_t n_in, int32_t n_out,
                           const struct cuda_gemv_in *in, void *y, enum cuda_act y_type, struct err *e)
{
    if (n_out < 1) return 0;
    if (!cuda_gemv_fused_fits(in->kind, n_in) || (in->kind == CUDA_GEMV_IN_SWIGLU && in->gu_type != CUDA_ACT_BF16) ||
        (scale && n_in % 16))
        return err_set(e, "cuda backend: no fused GEMV for rows of %d (%s)", (int)n_in,
                       in->kind == CUDA_GEMV_IN_NORM ? "norm" : "swiglu");
    return scale ? cuda_gemv_fused_y<true>(st, W, scale, n_in, n_out, in, y, y_type, e)
                 : cuda_gemv_fused_y<false>(st, W, scale, n_in, n_out, in, y, y_type, e);
}

int cuda_gemv_fused_fits(enum cuda_gemv_in_kind kind, int32_t n_in)
{
    return n_in % 8 == 0 && cuda_gemv_fused_smem(kind, n_in) <= CUDA_GEMV_FUSED_SMEM && !cuda_gemv_off();
}

int cuda_launch_gemv(cudaStream_t st, const void *w, const float *scale, const void *x, int32_t n_in, int32_t n_out,
                     void *y, enum cuda_act y_type, struct err *e)
{
    if (n_in % (scale ? 16 : 8)) return err_set(e, "cuda backend: no GEMV for rows of %d", (int)n_in);
    const unsigned blocks = (unsigned)((n_out + CUDA_GEMV_WARPS - 1) / CUDA_GEMV_WARPS);
    const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x;
    const int bf = y_type == CUDA_ACT_BF16, t = 32 * CUDA_GEMV_WARPS;
    if (scale && bf)
        cuda_k_gemv<__nv_bfloat16, true><<<blocks, t, 0, st>>>(w, scale, xb, n_in, n_out, (__nv_bfloat16 *)y);
    else if (scale) cuda_k_gemv<float, true><<<blocks, t, 0, st>>>(w, scale, xb, n_in, n_out, (float *)y);
    else if (bf) cuda_k_gemv<__nv_bfloat16, false><<<blocks, t, 0, st>>>(w, scale, xb, n_in, n_out, (__nv_bfloat16 *)y);
    else cuda_k_gemv<float, false><<<blocks, t, 0, st>>>(w, scale, xb, n_in, n_out, (float *)y);
    CU_LAUNCHED();
    return 0;
}

int cuda_matmul(cudaStream_t st, cublasHandle_t blas, const void *w, int bf16, const void *x, int32_t n_rows,
                int32_t n_in, int32_t n_out, void *y, enum cuda_act y_type, struct err *e)
{
    if (n_rows < 1) return 0;
    const int y_bf16 = y_type == CUDA_ACT_BF16;
    if (bf16 && n_rows == 1 && n_in % 8 == 0 && !cuda_gemv_off())
        return cuda_launch_gemv(st, w, NULL, x, n_in, n_out, y, y_type, e);
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasStatus_t s =
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, n_rows, n_in, &one, w, t, n_in, x, t, n_in, &zero, y,
                     y_bf16 ? CUDA_R_16BF : CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return cuda_fail(e, __FILE__, __LINE__, "cublasGemmEx", cublasGetStatusString(s));
    return 0;
}

int cuda_gemv_off(void)
{
    static int off = -1;
    if (off < 0) {
        const char *v = getenv("NIGHTSHIFT_CUDA_GEMV");
        off = v && !strcmp(v, "off");
    }
    return off;
}
