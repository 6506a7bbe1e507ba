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
 * e4m3 bytes, 8 per thread and pass) and scale[r]. */
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
