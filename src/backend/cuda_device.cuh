/* cuda_device — device-side pieces shared by the CUDA backend's kernel files (CUDA C++; private to
 * src/backend/): element conversions, the attention kernels' arguments and their chunk merge, and the
 * tensor-core attention's entry points (cuda_attn_tc.cu) that cuda_kernels.cu dispatches to.
 */
#ifndef NS_BACKEND_CUDA_DEVICE_CUH
#define NS_BACKEND_CUDA_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
