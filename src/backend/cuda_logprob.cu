/* cuda_logprob — logprobs where the logits are, for the sample op (backend.h; cuda_kernels.h: struct
 * cuda_lp_row): one block of CUDA_LP_THREADS per row that asks, reading the row once as the forward left it
 * (before any edit).
 *
 * The arithmetic is engine/logprob.h's: max = the largest logit (float), log_sum = log(sum over all n_vocab
 * of exp((double)l - max)), logprob(t) = ((double)l[t] - max) - log_sum. The max is exact (a maximum has no
 * rounding); the sum is in double, each thread over its strided ids, then fixed butterflies and the warps in
 * order: another order than the host's sequential one, so log_sum agrees within the rounding of a double sum
 * of n_vocab terms (relative ~n_vocab * 2^-53), and exp is CUDA's double exp (within 1 ulp of the host's). A
 * NaN logit makes the sum NaN, and with it every logprob of the row, as on the host; a row of -inf (or with
 * +inf) gives NaN the same way.
 *
 * The alternatives: the n_top (<= SAMPLE_MAX_TOP_LOGPROBS) best ids of [0, n_ids) in the host's order (the
 * larger logit first, the lower id on ties, -0 equal to +0, NaN after everything, NaNs by id): each id gets a
 * unique 64-bit key (an order key of the logit, then ~id) and "best" is simply the larger key, so the order
 * is exact integer comparison, never a rounding. Each thread keeps its CUDA_LP_K best keys in registers (a
 * branch-free insertion, skipped for keys below its last); the row's best are then taken one by one as the
 * block maximum of the threads' heads (the winner drops its head): the union of the threads' lists holds the
 * row's best CUDA_LP_K, so this is exact. Deterministic: no atomics, fixed reduction orders.
 */
#include "backend/cuda_kernels.h"

#include <math.h>
#include <stdint.h>

#define CUDA_LP_THREADS 512
#define CUDA_LP_WARPS (CUDA_LP_THREADS / 32)
#define CUDA_LP_K SAMPLE_MAX_TOP_LOGPROBS

/* The rank key of (f, id): larger = ranks first; 0 is below every key (an empty slot). */
__device__ __forceinline__ unsigned long long cuda_lp_key(float f, int32_t id)
{
    uint32_t k = 0; /* NaN: after -inf (whose key is 0x007fffff) */
    if (!isnan(f)) {
        if (f == 0.0f) f = 0.0f; /* -0 ties +0 */
        const uint32_t u = __float_as_uint(f);
        k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    }
    return ((unsigned long long)k << 32) | (uint32_t) ~(uint32_t)id;
}

__device__ __forceinline__ int32_t cuda_lp_key_id(unsigned long long key)
{
    return (int32_t) ~(uint32_t)(key & 0xffffffffull);
}

struct cuda_lp_smem {
    float fred[CUDA_LP_WARPS];
    double dred[CUDA_LP_WARPS];
    unsigned long long kred[CUDA_LP_WARPS];
    unsigned long long best;
};

__device__ float cuda_lp_block_max(float v, cuda_lp_smem &s)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.fred[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int w = 0; w < CUDA_LP_WARPS; w++)
        t = fmaxf(t, s.fred[w]);
    return t;
}

__device__ double cuda_lp_block_sum(double v, cuda_lp_smem &s)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.dred[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < CUDA_LP_WARPS; w++)
        t += s.dred[w];
    return t;
}

/* The largest of every thread's v (unique keys), in every thread. */
__device__ unsigned long long cuda_lp_block_max_key(unsigned long long v, cuda_lp_smem &s)
{
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long ov = __shfl_xor_sync(0xffffffffu, v, o);
        v = ov > v ? ov : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.kred[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t = 0;
        for (int w = 0; w < CUDA_LP_WARPS; w++)
            t = s.kred[w] > t ? s.kred[w] : t;
        s.best = t;
    }
    __syncthreads();
    return s.best;
}

__global__ void __launch_bounds__(CUDA_LP_THREADS)
    cuda_k_logprobs(const float *logits, int32_t n_vocab, int32_t n_ids, const cuda_lp_row *rows,
                    cuda_lp_pair *pairs, cuda_lp_norm *norms)
{
    __shared__ cuda_lp_smem s;
    const cuda_lp_row row = rows[blockIdx.x];
    if (row.n_top < 0) return;
    const float *l = logits + (size_t)blockIdx.x * (size_t)n_vocab;
    float mx = -INFINITY;
    for (int32_t t = threadIdx.x; t < n_vocab; t += blockDim.x)
        mx = fmaxf(mx, l[t]);
    mx = cuda_lp_block_max(mx, s);
    double sum = 0.0;
    for (int32_t t = threadIdx.x; t < n_vocab; t += blockDim.x)
        sum += exp((double)l[t] - (double)mx);
    const double log_sum = log(cuda_lp_block_sum(sum, s));
    if (threadIdx.x == 0) norms[blockIdx.x] = {mx, 0, log_sum};
    if (row.n_top == 0) return;
    unsigned long long top[CUDA_LP_K]; /* this thread's best keys, descending; 0: empty */
#pragma unroll
    for (int j = 0; j < CUDA_LP_K; j++)
        top[j] = 0;
    for (int32_t t = threadIdx.x; t < n_ids; t += blockDim.x) {
        unsigned long long x = cuda_lp_key(l[t], t);
        if (x <= top[CUDA_LP_K - 1]) continue;
#pragma unroll
        for (int j = 0; j < CUDA_LP_K; j++) { /* x goes in at its place, the rest shift down */
            const unsigned long long hi = top[j] > x ? top[j] : x, lo = top[j] > x ? x : top[j];
            top[j] = hi;
            x = lo;
        }
    }
    cuda_lp_pair *out = pairs + row.at + 1;
    for (int32_t j = 0; j < row.n_top; j++) {
        const unsigned long long best = cuda_lp_block_max_key(top[0], s);
        if (top[0] == best) { /* the one thread holding it moves on to its next */
#pragma unroll
            for (int i = 0; i < CUDA_LP_K - 1; i++)
                top[i] = top[i + 1];
            top[CUDA_LP_K - 1] = 0;
        }
        if (threadIdx.x == 0) { /* best is 0 only past the n_ids candidates, which the host never asks for */
            const int32_t id = best ? cuda_lp_key_id(best) : -1;
            out[j] = {id, 0, best ? ((double)l[id] - (double)mx) - log_sum : (double)NAN};
        }
    }
}

int cuda_launch_logprobs(cudaStream_t st, const float *logits, int32_t n_vocab, int32_t n_ids,
                         const struct cuda_sample_lp *lp, int32_t n, struct err *e)
{
    if (n < 1 || !lp) return 0;
    cuda_k_logprobs<<<n, CUDA_LP_THREADS, 0, st>>>(logits, n_vocab, n_ids, lp->rows, lp->pairs, lp->norms);
    CU_LAUNCHED();
    return 0;
}
