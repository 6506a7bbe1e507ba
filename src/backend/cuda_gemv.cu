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
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_device.cuh"
#include "backend/cuda_kernels.h"

#define CUDA_GEMV_WARPS 8  /* output rows per block */
#define CUDA_GEMV_UNROLL 4 /* 16-byte loads of W in flight per lane (8 measured slower) */

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

/* y (n_out) = W x as Y (f32, or rounded to bf16 once), W (n_out, n_in) bf16, x (n_in) bf16; n_in % 8 == 0
 * (16-byte rows). */
template <typename Y>
__global__ void __launch_bounds__(32 * CUDA_GEMV_WARPS)
    cuda_k_gemv(const __nv_bfloat16 *W, const __nv_bfloat16 *x, int32_t n_in, int32_t n_out, Y *y)
{
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * CUDA_GEMV_WARPS + (threadIdx.x >> 5);
    if (o >= n_out) return;
    const uint4 *wr = (const uint4 *)(W + o * n_in), *xr = (const uint4 *)x;
    const int32_t n8 = n_in / 8;
    float acc = 0.0f;
    for (int32_t k8 = lane; k8 < n8; k8 += 32 * CUDA_GEMV_UNROLL) {
        uint4 w[CUDA_GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++)
            if (k8 + 32 * u < n8) w[u] = __ldcs(wr + k8 + 32 * u); /* streamed: W is read once a step */
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++)
            if (k8 + 32 * u < n8) acc = cuda_gemv_fma8(acc, w[u], __ldg(xr + k8 + 32 * u));
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) y[o] = cuda_from_f32<Y>(acc);
}

int cuda_matmul(cudaStream_t st, cublasHandle_t blas, const void *w, int bf16, const void *x, int32_t n_rows,
                int32_t n_in, int32_t n_out, void *y, enum cuda_act y_type, struct err *e)
{
    if (n_rows < 1) return 0;
    const int y_bf16 = y_type == CUDA_ACT_BF16;
    if (bf16 && n_rows == 1 && n_in % 8 == 0 && !cuda_gemv_off()) {
        const unsigned blocks = (unsigned)((n_out + CUDA_GEMV_WARPS - 1) / CUDA_GEMV_WARPS);
        const __nv_bfloat16 *wb = (const __nv_bfloat16 *)w, *xb = (const __nv_bfloat16 *)x;
        if (y_bf16) cuda_k_gemv<<<blocks, 32 * CUDA_GEMV_WARPS, 0, st>>>(wb, xb, n_in, n_out, (__nv_bfloat16 *)y);
        else cuda_k_gemv<<<blocks, 32 * CUDA_GEMV_WARPS, 0, st>>>(wb, xb, n_in, n_out, (float *)y);
        CU_LAUNCHED();
        return 0;
    }
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
