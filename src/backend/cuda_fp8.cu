/* cuda_fp8 — FP8 (e4m3) matrices of the CUDA backend: rows quantized with one f32 scale each, the W8A8
 * product by cuBLASLt, and the one-row W8A16 product's kernel (cuda_gemv.cu holds its template).
 *
 * The format: a row of n values v becomes n e4m3 bytes q and one f32 scale s = amax / 448 (448 is e4m3's
 * largest finite value; s = 1 for a row of zeros), q_i = e4m3(v_i * (448 / amax)) rounded to nearest even
 * and saturated to +-448, so v_i ~ q_i * s. Weights are quantized once at load, one scale per output
 * channel (a row of W); a GEMM's input is quantized every step, one scale per row (per token). A row's
 * bytes and scale are a function of that row alone, so the quantization never depends on the other rows
 * of the step (batch composition), and the amax is a max (order-free): the same bits on every launch.
 *
 * The product: y[r][o] = s_x[r] * s_w[o] * sum_k q_x[r][k] q_w[o][k], in f32 on the tensor cores, by
 * cuBLASLt with outer-vector scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: cuBLAS 12.9 and later,
 * sm_90), output f32 or BF16. A plan (layouts and the heuristic's algorithm) is made once per shape and
 * kept in a small direct-mapped cache; the scale pointers are set on the shared descriptor before each
 * call (host state only: capture-safe, so CUDA graphs replay it).
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_device.cuh"
#include "backend/cuda_kernels.h"

#define CUDA_FP8_MAX 448.0f
#define CUDA_FP8_THREADS 256
#define CUDA_LT_PLANS 1024 /* cached shapes (direct-mapped by a hash of the shape) */

#define LT_TRY(call)                                                                                      \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) return cuda_fail(e, __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
    } while (0)

/* ---------------------------------------------------------------- quantizing rows */

/* Eight elements of a row as f32, from one 16-byte (bf16) or two 16-byte (f32) loads. */
__device__ __forceinline__ void cuda_fp8_load8(const __nv_bfloat16 *p, float *v)
{
    const uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ void cuda_fp8_load8(const float *p, float *v)
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* One block per row r of in (n_rows, n) T, n % 8 == 0: the row's amax (a block max: order-free), then q (n
 * e4m3 bytes, 8 per thread and pass) and scale[r]. The fused kernels below keep this arithmetic. */
template <typename T>
__global__ void __launch_bounds__(CUDA_FP8_THREADS)
    cuda_k_fp8_rows(const T *in, int32_t n, uint8_t *q, float *scale)
{
    __shared__ float part[CUDA_FP8_THREADS / 32];
    const int64_t r = blockIdx.x;
    const T *row = in + r * n;
    float amax = 0.0f, v[8];
    for (int32_t k = 8 * threadIdx.x; k < n; k += 8 * CUDA_FP8_THREADS) {
        cuda_fp8_load8(row + k, v);
#pragma unroll
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
    }
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = 0.0f;
#pragma unroll
    for (int w = 0; w < CUDA_FP8_THREADS / 32; w++) amax = fmaxf(amax, part[w]);
    /* amax is finite for finite rows; an inf or NaN row makes every byte NaN (e4m3's 0x7f), never a number */
    const float inv = amax > 0.0f ? CUDA_FP8_MAX / amax : 1.0f;
    if (threadIdx.x == 0) scale[r] = amax > 0.0f ? amax / CUDA_FP8_MAX : 1.0f;
    uint8_t *qrow = q + r * n;
    for (int32_t k = 8 * threadIdx.x; k < n; k += 8 * CUDA_FP8_THREADS) {
        cuda_fp8_load8(row + k, v);
        uint2 out;
        uint8_t *ob = (uint8_t *)&out;
#pragma unroll
        for (int i = 0; i < 8; i++)
            ob[i] = (uint8_t)__nv_cvt_float_to_fp8(__fmul_rn(v[i], inv), __NV_SATFINITE, __NV_E4M3);
        *(uint2 *)(qrow + k) = out;
    }
}

int cuda_launch_fp8_rows(cudaStream_t st, const void *in, enum cuda_act in_type, int64_t n_rows, int32_t n,
                         uint8_t *q, float *scale, struct err *e)
{
    if (n_rows < 1) return 0;
    if (n % 8) return err_set(e, "cuda backend: FP8 rows of %d values (a multiple of 8 is needed)", (int)n);
    if (in_type == CUDA_ACT_BF16)
        cuda_k_fp8_rows<<<(unsigned)n_rows, CUDA_FP8_THREADS, 0, st>>>((const __nv_bfloat16 *)in, n, q, scale);
    else cuda_k_fp8_rows<<<(unsigned)n_rows, CUDA_FP8_THREADS, 0, st>>>((const float *)in, n, q, scale);
    CU_LAUNCHED();
    return 0;
}

/* ---------------------------------------------------------------- fused into the kernels that make a GEMM's input */

/* The block max of v over blockDim.x threads (a multiple of 32, at most 1,024), in every thread: order-free. */
__device__ __forceinline__ float cuda_fp8_block_max(float v, float *part)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.0f;
    for (int k = 0; k < (int)(blockDim.x >> 5); k++) v = fmaxf(v, part[k]);
    return v;
}

__device__ __forceinline__ float cuda_fp8_bf16(float v)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* The row scale and the multiplier of cuda_k_fp8_rows for a row of largest magnitude amax. */
__device__ __forceinline__ float cuda_fp8_inv(float amax, float *scale_out)
{
    if (threadIdx.x == 0) *scale_out = amax > 0.0f ? amax / CUDA_FP8_MAX : 1.0f;
    return amax > 0.0f ? CUDA_FP8_MAX / amax : 1.0f;
}

/* cuda_k_rmsnorm4 (cuda_kernels.cu) of output row i_out with its outputs rounded to BF16, as that kernel writes
 * them for a BF16 GEMM input, then quantized as cuda_k_fp8_rows quantizes that BF16 row: the same bytes and
 * scale as the two kernels apart (the same sum of squares, scale and products: cuda_device.cuh), in one pass
 * (J float4s a thread, blockDim.x = cuda_norm4_threads(n)). The residual add is written back as there. */
template <int J>
__global__ void cuda_k_rmsnorm_fp8(float *x, const float *add, const float *w, const int32_t *rows, int32_t n,
                                   float eps, uint8_t *q, float *scale)
{
    __shared__ double part[32];
    __shared__ float mpart[32];
    const int64_t i_out = blockIdx.x, r = rows ? rows[i_out] : i_out;
    const int32_t n4 = n / 4;
    float4 v[J];
    const double ss = cuda_norm4_load<J>((float4 *)(x + r * n), add ? (const float4 *)(add + r * n) : NULL, n4, v);
    const float ns = cuda_norm_scale(ss, n, eps, part);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int32_t i = threadIdx.x + j * blockDim.x;
        if (i >= n4) continue;
        const float4 wv = ((const float4 *)w)[i];
        v[j] = make_float4(cuda_fp8_bf16(__fmul_rn(__fmul_rn(v[j].x, ns), wv.x)),
                           cuda_fp8_bf16(__fmul_rn(__fmul_rn(v[j].y, ns), wv.y)),
                           cuda_fp8_bf16(__fmul_rn(__fmul_rn(v[j].z, ns), wv.z)),
                           cuda_fp8_bf16(__fmul_rn(__fmul_rn(v[j].w, ns), wv.w)));
        amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
    }
    const float inv = cuda_fp8_inv(cuda_fp8_block_max(amax, mpart), scale + i_out);
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int32_t i = threadIdx.x + j * blockDim.x;
        if (i >= n4) continue;
        const float f[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
        uchar4 o;
        unsigned char *ob = (unsigned char *)&o;
#pragma unroll
        for (int k = 0; k < 4; k++)
            ob[k] = (unsigned char)__nv_cvt_float_to_fp8(__fmul_rn(f[k], inv), __NV_SATFINITE, __NV_E4M3);
        ((uchar4 *)(q + i_out * n))[i] = o;
    }
}

int cuda_launch_rmsnorm_fp8(cudaStream_t st, float *x, const float *add, const float *w, const int32_t *rows,
                            int32_t n_out, int32_t n, float eps, uint8_t *q, float *scale, struct err *e)
{
    if (n_out < 1) return 0;
    if (!cuda_fp8_norm_fits(n)) return err_set(e, "cuda backend: no FP8 RMSNorm for rows of %d", (int)n);
    const int threads = cuda_norm4_threads(n), j = (n / 4 + threads - 1) / threads;
    if (j == 1) cuda_k_rmsnorm_fp8<1><<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, q, scale);
    else if (j == 2) cuda_k_rmsnorm_fp8<2><<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, q, scale);
    else cuda_k_rmsnorm_fp8<CUDA_NORM4_MAX><<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, q, scale);
    CU_LAUNCHED();
    return 0;
}

int cuda_fp8_norm_fits(int32_t n)
{
    return n % 8 == 0 && n <= 4 * 1024 * CUDA_NORM4_MAX;
}

/* Eight SwiGLU outputs of the BF16 gate / up row at k, rounded to BF16 as cuda_k_swiglu writes them. */
__device__ __forceinline__ void cuda_fp8_swiglu8(const __nv_bfloat16 *g, const __nv_bfloat16 *u, float *o)
{
    float gv[8], uv[8];
    cuda_fp8_load8(g, gv);
    cuda_fp8_load8(u, uv);
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = cuda_fp8_bf16(cuda_silu_mul(gv[i], uv[i]));
}

/* One block per row r of gu (n_rows, 2 n) BF16: SwiGLU rounded to BF16 (cuda_k_swiglu's output for a BF16
 * GEMM input), quantized as cuda_k_fp8_rows quantizes it: the largest magnitude in a first pass, the values
 * made again in the second (the row's gu, 4 n bytes, is read twice: from L2 the second time). n % 8 == 0. */
__global__ void __launch_bounds__(CUDA_FP8_THREADS)
    cuda_k_swiglu_fp8(const __nv_bfloat16 *gu, int32_t n, uint8_t *q, float *scale)
{
    __shared__ float part[CUDA_FP8_THREADS / 32];
    const int64_t r = blockIdx.x;
    const __nv_bfloat16 *g = gu + r * 2 * n, *u = g + n;
    float amax = 0.0f, o[8];
    for (int32_t k = 8 * threadIdx.x; k < n; k += 8 * CUDA_FP8_THREADS) {
        cuda_fp8_swiglu8(g + k, u + k, o);
#pragma unroll
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(o[i]));
    }
    const float inv = cuda_fp8_inv(cuda_fp8_block_max(amax, part), scale + r);
    for (int32_t k = 8 * threadIdx.x; k < n; k += 8 * CUDA_FP8_THREADS) {
        cuda_fp8_swiglu8(g + k, u + k, o);
        uint2 out;
        uint8_t *ob = (uint8_t *)&out;
#pragma unroll
        for (int i = 0; i < 8; i++)
            ob[i] = (uint8_t)__nv_cvt_float_to_fp8(__fmul_rn(o[i], inv), __NV_SATFINITE, __NV_E4M3);
        *(uint2 *)(q + r * n + k) = out;
    }
}

int cuda_launch_swiglu_fp8(cudaStream_t st, const void *gu, int32_t n_rows, int32_t n_ff, uint8_t *q, float *scale,
                           struct err *e)
{
    if (n_rows < 1) return 0;
    if (n_ff % 8) return err_set(e, "cuda backend: no FP8 SwiGLU for rows of %d", (int)n_ff);
    cuda_k_swiglu_fp8<<<(unsigned)n_rows, CUDA_FP8_THREADS, 0, st>>>((const __nv_bfloat16 *)gu, n_ff, q, scale);
    CU_LAUNCHED();
    return 0;
}

/* ---------------------------------------------------------------- the W8A8 GEMM */

struct cuda_lt_plan {
    int32_t n_rows, n_in, n_out, y_type; /* n_rows 0: empty */
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

struct cuda_lt {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc; /* e4m3 x e4m3, f32 compute, W transposed, outer-vector scales */
    cublasLtMatmulPreference_t pref;
    void *ws;
    size_t ws_bytes;
    struct cuda_lt_plan plans[CUDA_LT_PLANS];
};

static void cuda_lt_plan_clear(struct cuda_lt_plan *p)
{
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

void cuda_lt_free(struct cuda_lt *lt)
{
    if (!lt) return;
    for (int i = 0; i < CUDA_LT_PLANS; i++) cuda_lt_plan_clear(&lt->plans[i]);
    if (lt->pref) cublasLtMatmulPreferenceDestroy(lt->pref);
    if (lt->desc) cublasLtMatmulDescDestroy(lt->desc);
    if (lt->h) cublasLtDestroy(lt->h);
    free(lt);
}

static int cuda_lt_setup(struct cuda_lt *lt, struct err *e)
{
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    LT_TRY(cublasLtCreate(&lt->h));
    LT_TRY(cublasLtMatmulDescCreate(&lt->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof outer));
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof outer));
    LT_TRY(cublasLtMatmulPreferenceCreate(&lt->pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->ws_bytes,
                                                sizeof lt->ws_bytes));
    return 0;
}

int cuda_lt_init(struct cuda_lt **out, void *ws, size_t ws_bytes, struct err *e)
{
    struct cuda_lt *lt = (struct cuda_lt *)calloc(1, sizeof *lt);
    *out = NULL;
    if (!lt) return err_set(e, "cuda backend: out of memory");
    lt->ws = ws;
    lt->ws_bytes = ws_bytes;
    if (cuda_lt_setup(lt, e)) {
        cuda_lt_free(lt);
        return -1;
    }
    *out = lt;
    return 0;
}

/* The cached plan of a shape, made on a miss (replacing the slot's plan). */
static int cuda_lt_plan_get(struct cuda_lt *lt, int32_t n_rows, int32_t n_in, int32_t n_out, enum cuda_act y_type,
                            struct cuda_lt_plan **out, struct err *e)
{
    const uint32_t hash = ((uint32_t)n_rows * 2654435761u) ^ ((uint32_t)n_in * 40503u) ^ ((uint32_t)n_out * 97u) ^
                          (uint32_t)y_type;
    struct cuda_lt_plan *p = &lt->plans[hash % CUDA_LT_PLANS];
    *out = p;
    if (p->n_rows == n_rows && p->n_in == n_in && p->n_out == n_out && p->y_type == (int32_t)y_type) return 0;
    cuda_lt_plan_clear(p);
    const cudaDataType_t yt = y_type == CUDA_ACT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    LT_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, n_in, n_out, n_in));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, n_in, n_rows, n_in));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->d, yt, n_out, n_rows, n_out));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(lt->h, lt->desc, p->a, p->b, p->d, p->d, lt->pref, 1, &res, &found));
    if (found < 1) {
        cuda_lt_plan_clear(p);
        return err_set(e, "cuda backend: cuBLASLt has no FP8 algorithm for %d x %d rows of %d", (int)n_rows,
                       (int)n_out, (int)n_in);
    }
    p->algo = res.algo;
    p->n_rows = n_rows, p->n_in = n_in, p->n_out = n_out, p->y_type = (int32_t)y_type;
    return 0;
}

int cuda_matmul_fp8(cudaStream_t st, struct cuda_lt *lt, const uint8_t *w, const float *w_scale, const uint8_t *x,
                    const float *x_scale, int32_t n_rows, int32_t n_in, int32_t n_out, void *y, enum cuda_act y_type,
                    struct err *e)
{
    if (n_rows < 1) return 0;
    if (n_in % 16) return err_set(e, "cuda backend: FP8 GEMM over rows of %d (a multiple of 16 is needed)", (int)n_in);
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale));
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale));
    struct cuda_lt_plan *p;
    if (cuda_lt_plan_get(lt, n_rows, n_in, n_out, y_type, &p, e)) return -1;
    const float one = 1.0f, zero = 0.0f;
    LT_TRY(cublasLtMatmul(lt->h, lt->desc, &one, w, p->a, x, p->b, &zero, y, p->d, y, p->d, &p->algo, lt->ws,
                          lt->ws_bytes, st));
    return 0;
}
