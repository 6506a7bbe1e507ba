/* cuda_sample — the sample op's draws on the device (backend.h: struct sample_row): one block of
 * CUDA_SAMPLE_THREADS per logit row, in place on the step's logits.
 *
 * Every drawn row is first edited (struct logit_edit: its bias and penalties; the edits name distinct tokens,
 * so the threads never meet). Then:
 *  - greedy: the argmax by sampler_argmax's rule (the lowest id on ties, NaN never wins, 0 when nothing beats
 *    -inf): per-thread maxima in id order, then fixed butterflies — the host's token on the same logits;
 *  - sampled: sampler_draw's steps on the finite logits below n_ids. With top-k (k < the finite count) or
 *    top-p, the candidates are the k best, or the CUDA_SAMPLE_CAP best (top-p), by (logit desc, id asc):
 *    the k-th key is found by a radix select (4 passes of 8 bits, integer counts: exact), the keys at or
 * above it are gathered and sorted (bitonic, in shared memory), then one thread runs the host's sequential
 * steps over them — softmax terms, top-p cut, min-p, the walk with u — in the host's order, so the sums round
 * as the host's do. Top-p alone needs the total over every finite logit: a parallel double sum (fixed order,
 *    not the host's; where the candidates are all the finite ones the sequential total is used instead).
 *    Without top-k and top-p the walk runs over every finite logit in id order: each thread takes a
 * contiguous run of ids, sums its run in order, one thread prefixes the runs, and the thread whose run the
 * target falls in walks it. Both give the host's token unless u * total lands within the rounding of the sums
 * of a boundary. expf is CUDA's (at most 2 ulp from the host's), which moves boundaries as little.
 *  - A sampled row whose candidates do not fit (top-k above CUDA_SAMPLE_CAP, a nucleus beyond it, more ties
 * at the k-th key than the buffer holds) is declined: its token is -1, its edits are undone (each edited
 * logit was saved before its edit, one float per edit in `saved`, and is put back exactly) and the host does
 * all of it from the unedited logits (the op's contract).
 *  - Logprobs (cuda_logprob.cu ran first on the unedited row, leaving its norm and alternatives): after the
 * draw the edits are undone too, so the drawn token's raw logit gives its logprob by the same formula; a
 *    CUDA_DRAW_LOGPROBS row (a prompt row) is not edited nor drawn, only its token's logprob is written.
 * Determinism: integer atomics only (counts, gather positions — the gather is then sorted by a unique key);
 * every floating sum has a fixed order. So the same logits give the same token, run after run.
 */
#include "backend/cuda_kernels.h"
#include "backend/cuda_device.cuh"

#include <math.h>
#include <stdint.h>

#define CUDA_SAMPLE_THREADS 1024
#define CUDA_SAMPLE_CAP 2048 /* candidates sorted in shared memory at most */
#define CUDA_SAMPLE_WARPS (CUDA_SAMPLE_THREADS / 32)

struct cuda_edit { /* backend.h's struct logit_edit */
    int32_t token;
    float add, rep, sub;
};

struct cuda_sample_smem {
    unsigned long long cand[CUDA_SAMPLE_CAP]; /* (key << 32) | ~id: sorted descending = logit desc, id asc */
    float p[CUDA_SAMPLE_CAP];                 /* their softmax terms, in sorted order */
    double dsum[CUDA_SAMPLE_THREADS];         /* per-thread sums (walk in id order) */
    int32_t hist[256];
    float fred[CUDA_SAMPLE_WARPS];
    int32_t ired[CUDA_SAMPLE_WARPS];
    double dred[CUDA_SAMPLE_WARPS];
    int32_t n_cand, found, result;
    uint32_t prefix;
    int32_t remaining;
    double total, target;
};

/* (v, id) ranks before (bv, bid): a larger value, or the same value at a lower id. */
__device__ __forceinline__ bool cuda_argmax_better(float v, int32_t id, float bv, int32_t bid)
{
    return v > bv || (v == bv && id < bid);
}

/* An order-preserving key of a finite float (-0 as +0: they compare equal on the host). */
__device__ __forceinline__ uint32_t cuda_sample_key(float f)
{
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float cuda_sample_unkey(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* Block-wide sums and maxima in a fixed order (butterflies, then the warps' values in warp order); every
 * thread gets the result. */
__device__ int32_t cuda_block_sum_i(int32_t v, cuda_sample_smem &s)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.ired[threadIdx.x >> 5] = v;
    __syncthreads();
    int32_t t = 0;
    for (int w = 0; w < CUDA_SAMPLE_WARPS; w++) t += s.ired[w];
    return t;
}

__device__ double cuda_block_sum_d(double v, cuda_sample_smem &s)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.dred[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < CUDA_SAMPLE_WARPS; w++) t += s.dred[w];
    return t;
}

__device__ float cuda_block_max_f(float v, cuda_sample_smem &s)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.fred[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int w = 0; w < CUDA_SAMPLE_WARPS; w++) t = fmaxf(t, s.fred[w]);
    return t;
}

/* The argmax of l over [0, n) by sampler_argmax's rule. */
__device__ int32_t cuda_sample_argmax(const float *l, int32_t n, cuda_sample_smem &s)
{
    float bv = -INFINITY; /* strict > in id order: each thread keeps its lowest id among ties */
    int32_t bid = INT32_MAX;
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x)
        if (l[t] > bv) bv = l[t], bid = t;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t oid = __shfl_xor_sync(0xffffffffu, bid, o);
        if (cuda_argmax_better(ov, oid, bv, bid)) bv = ov, bid = oid;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.fred[threadIdx.x >> 5] = bv, s.ired[threadIdx.x >> 5] = bid;
    __syncthreads();
    bv = -INFINITY;
    bid = INT32_MAX;
    for (int w = 0; w < CUDA_SAMPLE_WARPS; w++)
        if (cuda_argmax_better(s.fred[w], s.ired[w], bv, bid)) bv = s.fred[w], bid = s.ired[w];
    return bid == INT32_MAX ? 0 : bid;
}

/* The key of the k-th best finite logit of l over [0, n) (1 <= k <= the finite count): radix select from the
 * top byte down, counting keys in shared-memory histograms (integer atomics: exact). */
__device__ uint32_t cuda_sample_kth_key(const float *l, int32_t n, int32_t k, cuda_sample_smem &s)
{
    if (threadIdx.x == 0) s.prefix = 0, s.remaining = k;
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        const uint32_t mask = pass == 0 ? 0u : 0xffffffffu << (shift + 8);
        for (int i = threadIdx.x; i < 256; i += blockDim.x) s.hist[i] = 0;
        __syncthreads();
        const uint32_t prefix = s.prefix;
        for (int32_t t = threadIdx.x; t < n; t += blockDim.x) {
            if (!isfinite(l[t])) continue;
            const uint32_t key = cuda_sample_key(l[t]);
            if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & 255], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) { /* the digit where the count from the top reaches what is left */
            int32_t cum = 0, d = 255;
            for (; d > 0 && cum + s.hist[d] < s.remaining; d--) cum += s.hist[d];
            s.remaining -= cum;
            s.prefix = prefix | ((uint32_t)d << shift);
        }
        __syncthreads();
    }
    return s.prefix;
}

/* Gathers the finite logits of key >= kmin into s.cand and sorts them best first; 0, or -1 when more than
 * CUDA_SAMPLE_CAP qualify. */
__device__ int cuda_sample_gather(const float *l, int32_t n, uint32_t kmin, cuda_sample_smem &s)
{
    if (threadIdx.x == 0) s.n_cand = 0;
    __syncthreads();
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x) {
        if (!isfinite(l[t])) continue;
        const uint32_t key = cuda_sample_key(l[t]);
        if (key < kmin) continue;
        const int32_t at = atomicAdd(&s.n_cand, 1);
        if (at < CUDA_SAMPLE_CAP) s.cand[at] = ((unsigned long long)key << 32) | (uint32_t)~(uint32_t)t;
    }
    __syncthreads();
    const int32_t m = s.n_cand;
    if (m > CUDA_SAMPLE_CAP) return -1;
    for (int32_t i = m + threadIdx.x; i < CUDA_SAMPLE_CAP; i += blockDim.x) s.cand[i] = 0; /* below every key */
    __syncthreads();
    for (int32_t size = 2; size <= CUDA_SAMPLE_CAP; size <<= 1) /* bitonic sort, descending */
        for (int32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (int32_t i = threadIdx.x; i < CUDA_SAMPLE_CAP; i += blockDim.x) {
                const int32_t j = i ^ stride;
                if (j <= i) continue;
                const bool desc = (i & size) == 0;
                const unsigned long long a = s.cand[i], b = s.cand[j];
                if ((a < b) == desc) s.cand[i] = b, s.cand[j] = a;
            }
            __syncthreads();
        }
    return 0;
}

/* The host's sequential steps over the sorted candidates (m of them): softmax terms relative to the best,
 * top-p (want: top_p times the total over every candidate the host had, or < 0 to take the sequential total of
 * these m), min-p, the walk with u. Thread 0 returns the token, or -1 when the nucleus does not end within the
 * m candidates. */
__device__ int32_t cuda_sample_sorted(int32_t m, const cuda_draw_row &r, double total_all, cuda_sample_smem &s)
{
    const float mx = cuda_sample_unkey((uint32_t)(s.cand[0] >> 32));
    for (int32_t i = threadIdx.x; i < m; i += blockDim.x)
        s.p[i] = expf((cuda_sample_unkey((uint32_t)(s.cand[i] >> 32)) - mx) / r.temperature);
    __syncthreads();
    if (threadIdx.x != 0) return -1;
    double total = 0.0;
    for (int32_t i = 0; i < m; i++) total += s.p[i];
    int32_t n = m;
    if (r.top_p < 1.0f) {
        const double want = (double)r.top_p * (total_all >= 0.0 ? total_all : total);
        double cum = 0.0;
        int32_t keep = -1;
        for (int32_t i = 0; i < n && keep < 0; i++)
            if ((cum += s.p[i]) >= want) keep = i + 1;
        if (keep < 0) {
            if (total_all >= 0.0) return -1; /* the nucleus goes on past the candidates held */
            keep = n;
        }
        n = keep;
        total = 0.0;
        for (int32_t i = 0; i < n; i++) total += s.p[i];
    }
    if (r.min_p > 0.0f) { /* the best term is exp(0) = 1, and it survives */
        int32_t k = 0;
        total = 0.0;
        for (int32_t i = 0; i < n; i++)
            if (s.p[i] >= r.min_p) {
                s.p[k] = s.p[i];
                s.cand[k++] = s.cand[i];
                total += s.p[i];
            }
        n = k;
    }
    const double target = (double)r.u * total;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (target < (cum += s.p[i])) return (int32_t)~(uint32_t)s.cand[i];
    return (int32_t)~(uint32_t)s.cand[n - 1];
}

/* No top-k, no top-p: the walk over every finite logit of l over [0, n) in id order (min-p applied), each
 * thread over its run of ids. Every thread returns the token. */
__device__ int32_t cuda_sample_walk(const float *l, int32_t n, float mx, const cuda_draw_row &r, cuda_sample_smem &s)
{
    const int32_t run = (n + (int32_t)blockDim.x - 1) / (int32_t)blockDim.x;
    const int32_t i0 = min(n, (int32_t)threadIdx.x * run), i1 = min(n, i0 + run);
    double sum = 0.0;
    int32_t last = -1;
    for (int32_t i = i0; i < i1; i++) {
        if (!isfinite(l[i])) continue;
        const float p = expf((l[i] - mx) / r.temperature);
        if (r.min_p > 0.0f && p < r.min_p) continue;
        sum += p;
        last = i;
    }
    s.dsum[threadIdx.x] = sum;
    if (threadIdx.x == 0) s.found = INT32_MAX, s.result = -1;
    __syncthreads();
    if (threadIdx.x == 0) { /* the runs' sums become their starts */
        double cum = 0.0;
        for (int t = 0; t < (int)blockDim.x; t++) {
            const double v = s.dsum[t];
            s.dsum[t] = cum;
            cum += v;
        }
        s.total = cum;
        s.target = (double)r.u * cum;
    }
    __syncthreads();
    atomicMax(&s.result, last); /* the last candidate, if the walk runs off the end */
    double cum = s.dsum[threadIdx.x];
    if (sum > 0.0 && s.target < cum + sum) /* the target may fall in this run: walk it */
        for (int32_t i = i0; i < i1; i++) {
            if (!isfinite(l[i])) continue;
            const float p = expf((l[i] - mx) / r.temperature);
            if (r.min_p > 0.0f && p < r.min_p) continue;
            if (s.target < (cum += p)) {
                atomicMin(&s.found, i);
                break;
            }
        }
    __syncthreads();
    return s.found != INT32_MAX ? s.found : s.result;
}

/* A sampled row (edited): the token, or -1 (declined). */
__device__ int32_t cuda_sample_draw(const float *l, int32_t n, const cuda_draw_row &r, cuda_sample_smem &s)
{
    float mx = -INFINITY;
    int32_t fin = 0;
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x)
        if (isfinite(l[t])) mx = fmaxf(mx, l[t]), fin++;
    mx = cuda_block_max_f(mx, s);
    fin = cuda_block_sum_i(fin, s);
    if (fin == 0) return cuda_sample_argmax(l, n, s);
    if (r.top_k > 0 && r.top_k < fin) {
        if (r.top_k > CUDA_SAMPLE_CAP) return -1;
        if (cuda_sample_gather(l, n, cuda_sample_kth_key(l, n, r.top_k, s), s)) return -1;
        return cuda_sample_sorted(r.top_k, r, -1.0, s);
    }
    if (r.top_p < 1.0f) {
        const int32_t m = fin < CUDA_SAMPLE_CAP ? fin : CUDA_SAMPLE_CAP;
        double total_all = -1.0; /* all candidates held: the sequential total, as the host's */
        if (m < fin) {
            double part = 0.0;
            for (int32_t t = threadIdx.x; t < n; t += blockDim.x)
                if (isfinite(l[t])) part += expf((l[t] - mx) / r.temperature);
            total_all = cuda_block_sum_d(part, s);
        }
        if (cuda_sample_gather(l, n, m < fin ? cuda_sample_kth_key(l, n, m, s) : 0u, s)) return -1;
        /* the gather may hold ties past the m-th: the first m in sorted order are the m best */
        return cuda_sample_sorted(min(m, s.n_cand), r, total_all, s);
    }
    return cuda_sample_walk(l, n, mx, r, s);
}

/* Thread 0: the logprob pair of token tok of row r from its raw logit (its norm from cuda_k_logprobs). */
__device__ void cuda_sample_lp_token(const float *l, int32_t tok, const cuda_lp_row &lr, int32_t r,
                                     const cuda_sample_lp &lp)
{
    const cuda_lp_norm nm = lp.norms[r];
    lp.pairs[lr.at] = {tok, 0, ((double)l[tok] - (double)nm.max) - nm.log_sum};
}

__global__ void __launch_bounds__(CUDA_SAMPLE_THREADS, 1)
    cuda_k_sample(float *logits, int32_t n_vocab, int32_t n_ids, const cuda_draw_row *rows,
                  const cuda_edit *edits, float *saved, int32_t *tokens, cuda_sample_lp lp)
{
    extern __shared__ unsigned long long smem_raw[];
    cuda_sample_smem &s = *(cuda_sample_smem *)smem_raw;
    const int32_t r = blockIdx.x;
    const cuda_draw_row row = rows[r];
    if (row.mode == CUDA_DRAW_COPY) {
        if (threadIdx.x == 0) tokens[r] = -1;
        return;
    }
    const cuda_lp_row lr = lp.rows ? lp.rows[r] : cuda_lp_row{-1, 0, 0, 0};
    float *l = logits + (size_t)r * (size_t)n_vocab;
    if (row.mode == CUDA_DRAW_LOGPROBS) {
        if (threadIdx.x == 0) {
            if (lr.n_top >= 0) cuda_sample_lp_token(l, lr.token, lr, r, lp);
            tokens[r] = lr.n_top >= 0 ? lr.token : -1; /* nothing asked: the logits to the host */
        }
        return;
    }
    for (int32_t k = threadIdx.x; k < row.n_edits; k += blockDim.x) { /* distinct tokens: no two threads meet */
        const cuda_edit ed = edits[row.edit0 + k];
        float x = l[ed.token];
        saved[row.edit0 + k] = x;
        if (ed.add != 0.0f) x = __fadd_rn(x, ed.add);
        if (ed.rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, ed.rep) : __fmul_rn(x, ed.rep);
        if (ed.sub != 0.0f) x = __fsub_rn(x, ed.sub);
        l[ed.token] = x;
    }
    __syncthreads();
    int32_t tok = -1;
    if (row.mode == CUDA_DRAW_GREEDY) tok = cuda_sample_argmax(l, n_ids, s);
    else if (row.mode == CUDA_DRAW_SAMPLE) tok = cuda_sample_draw(l, n_ids, row, s);
    __syncthreads(); /* every thread is done reading l; thread 0's tok is the row's (the draws return it
                        there) */
    if (threadIdx.x == 0) s.result = tok;
    __syncthreads();
    tok = s.result;
    if ((tok < 0 || lr.n_top >= 0) && row.n_edits > 0) { /* undo the edits: the raw row again */
        for (int32_t k = threadIdx.x; k < row.n_edits; k += blockDim.x)
            l[edits[row.edit0 + k].token] = saved[row.edit0 + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (tok >= 0 && lr.n_top >= 0) cuda_sample_lp_token(l, tok, lr, r, lp);
        tokens[r] = tok; /* -1: declined, its unedited logits go to the host */
    }
}

int cuda_sample_init(struct err *e)
{
    CU_TRY(cudaFuncSetAttribute(cuda_k_sample, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)sizeof(cuda_sample_smem)));
    return 0;
}

int cuda_launch_sample(cudaStream_t st, float *logits, int32_t n_vocab, int32_t n_ids,
                       const struct cuda_draw_row *rows, const void *edits, float *saved, int32_t n,
                       int32_t *tokens, const struct cuda_sample_lp *lp, struct err *e)
{
    if (n < 1) return 0;
    const cuda_sample_lp none = {NULL, NULL, NULL};
    cuda_k_sample<<<n, CUDA_SAMPLE_THREADS, sizeof(cuda_sample_smem), st>>>(
        logits, n_vocab, n_ids, rows, (const cuda_edit *)edits, saved, tokens, lp ? *lp : none);
    CU_LAUNCHED();
    return 0;
}

void cuda_sample_caps(struct sample_caps *out)
{
    *out = {SAMPLE_USE_EDITS | SAMPLE_USE_TEMPERATURE | SAMPLE_USE_TOP_K | SAMPLE_USE_TOP_P |
                SAMPLE_USE_MIN_P | SAMPLE_USE_LOGPROBS,
            CUDA_SAMPLE_CAP, SAMPLE_MAX_TOP_LOGPROBS};
}
