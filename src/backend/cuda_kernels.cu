/* cuda_kernels — the CUDA backend's own kernels (embedding gather, RoPE table, RMSNorm with the residual
 * add, the q/k/v epilogue with RoPE and the KV writes, paged attention on CUDA cores, SwiGLU) and their
 * launchers; cuda_launch_attn hands tensor-core pools to cuda_attn_tc.cu. See cuda_kernels.h for the
 * contracts and the attention's invariant.
 *
 * The KV pool's element type is a template argument of the KV writes and of the attention: float, __half,
 * cuda_kv_q8 (q8_0: int8 values, an f16 scale per 32 elements apart; cuda_q8.cuh holds its arithmetic,
 * shared with the host test that checks it against gguf/quant.c) or cuda_kv_fp8 (e4m3 values in q8_0's
 * layout; cuda_device.cuh's cuda_kv8_*).
 *
 * Arithmetic that the attention's invariant depends on (the per-chunk online softmax and the merge) is
 * written with explicit round-to-nearest intrinsics (__fmul_rn, __fmaf_rn, __fsub_rn), so that the
 * compiler cannot contract it differently in the two places it runs (whole items and the combine).
 * Nothing reduces through atomics: every output element is written by one thread, in a fixed order.
 */
#include "backend/cuda_kernels.h"
#include "backend/cuda_device.cuh"
#include "backend/cuda_q8.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cuda_fail(struct err *e, const char *file, int line, const char *what, const char *msg)
{
    const char *base = strrchr(file, '/');
    return err_set(e, "cuda backend: %s:%d: %s: %s", base ? base + 1 : file, line, what, msg);
}

/* ---------------------------------------------------------------- helpers */

/* Butterfly reductions: every lane ends with the same value (each level adds a pair in both lanes, and
 * a + b == b + a exactly). */
__device__ __forceinline__ float cuda_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float cuda_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---------------------------------------------------------------- embedding, RoPE table, norm */

template <typename T>
__global__ void cuda_k_embed(const T *table, const int32_t *tokens, int32_t n, float *x)
{
    const int64_t r = blockIdx.x;
    const T *src = table + (int64_t)tokens[r] * n;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) x[r * n + i] = cuda_to_f32(src[i]);
}

int cuda_launch_embed(cudaStream_t st, const void *table, int bf16, const int32_t *tokens, int32_t n_rows, int32_t n,
                      float *x, struct err *e)
{
    if (bf16) cuda_k_embed<<<n_rows, 256, 0, st>>>((const __nv_bfloat16 *)table, tokens, n, x);
    else cuda_k_embed<<<n_rows, 256, 0, st>>>((const float *)table, tokens, n, x);
    CU_LAUNCHED();
    return 0;
}

__global__ void cuda_k_rope_table(const int32_t *pos, const double *inv_freq, int32_t half, float *cs)
{
    const int64_t r = blockIdx.x;
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        const double theta = (double)pos[r] * inv_freq[i];
        cs[(r * half + i) * 2] = (float)cos(theta);
        cs[(r * half + i) * 2 + 1] = (float)sin(theta);
    }
}

int cuda_launch_rope_table(cudaStream_t st, const int32_t *pos, int32_t n_rows, const double *inv_freq, int32_t n_rot,
                           float *cs, struct err *e)
{
    if (n_rot < 2) return 0;
    cuda_k_rope_table<<<n_rows, 64, 0, st>>>(pos, inv_freq, n_rot / 2, cs);
    CU_LAUNCHED();
    return 0;
}

/* Threads of a norm block for rows of n: about 4 elements each, 32 to 1024 (a function of n alone). */
static int cuda_norm_threads(int32_t n)
{
    int t = ((n + 3) / 4 + 31) / 32 * 32;
    return t < 32 ? 32 : t > 1024 ? 1024 : t;
}

/* The sum of squares in double: per-thread partial sums over i = tid mod blockDim in index order, a
 * butterfly per warp, then the warps' sums in warp order (the block size depends on n only).
 * out = (x * (1 / sqrt(mean + eps))) * w, two rounded products like the cpu backend. */
template <typename T>
__global__ void cuda_k_rmsnorm(float *x, const float *add, const float *w, const int32_t *rows, int32_t n, float eps,
                               T *out)
{
    __shared__ double part[32];
    const int64_t i_out = blockIdx.x, r = rows ? rows[i_out] : i_out;
    float *xr = x + r * n;
    double ss = 0.0;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if (add) {
            v = __fadd_rn(v, add[r * n + i]);
            xr[i] = v;
        }
        ss += (double)v * (double)v;
    }
    const float scale = cuda_norm_scale(ss, n, eps, part);
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
        out[i_out * n + i] = cuda_from_f32<T>(__fmul_rn(__fmul_rn(xr[i], scale), w[i]));
}

/* cuda_k_rmsnorm for n % 4 == 0 with 16-byte accesses: thread t owns the float4s t, t + blockDim, ... (J of
 * them, in registers between the two passes); its partial sum runs over its elements in index order, then
 * the same butterfly and warp order (a function of n alone, like the block size). cuda_gemv.cu's fused
 * GEMVs repeat this arithmetic (cuda_gemv_norm_in). */
template <typename T, int J>
__global__ void cuda_k_rmsnorm4(float *x, const float *add, const float *w, const int32_t *rows, int32_t n, float eps,
                                T *out)
{
    __shared__ double part[32];
    const int64_t i_out = blockIdx.x, r = rows ? rows[i_out] : i_out;
    const int32_t n4 = n / 4;
    float4 v[J];
    const double ss = cuda_norm4_load<J>((float4 *)(x + r * n), add ? (const float4 *)(add + r * n) : NULL, n4, v);
    const float scale = cuda_norm_scale(ss, n, eps, part);
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int32_t i = threadIdx.x + j * blockDim.x;
        if (i >= n4) continue;
        const float4 wv = ((const float4 *)w)[i];
        cuda_store4(out + i_out * n + 4 * i, __fmul_rn(__fmul_rn(v[j].x, scale), wv.x),
                    __fmul_rn(__fmul_rn(v[j].y, scale), wv.y), __fmul_rn(__fmul_rn(v[j].z, scale), wv.z),
                    __fmul_rn(__fmul_rn(v[j].w, scale), wv.w));
    }
}

template <typename T>
static void cuda_rmsnorm4(cudaStream_t st, int32_t n_out, int threads, int j, float *x, const float *add,
                          const float *w, const int32_t *rows, int32_t n, float eps, T *out)
{
    if (j == 1) cuda_k_rmsnorm4<T, 1><<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, out);
    else if (j == 2) cuda_k_rmsnorm4<T, 2><<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, out);
    else cuda_k_rmsnorm4<T, CUDA_NORM4_MAX><<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, out);
}

int cuda_launch_rmsnorm(cudaStream_t st, float *x, const float *add, const float *w, const int32_t *rows,
                        int32_t n_out, int32_t n, float eps, void *out, enum cuda_act out_type, struct err *e)
{
    if (n_out < 1) return 0;
    const int bf = out_type == CUDA_ACT_BF16;
    if (n % 4 == 0 && n <= 4 * 1024 * CUDA_NORM4_MAX) { /* 16-byte rows (every row start is: n % 4 == 0) */
        /* about CUDA_NORM4_MAX float4s a thread: several loads in flight each, and small blocks, so many rows
         * share a multiprocessor (one float4 a thread in 1,024-thread blocks was latency-bound) */
        const int threads = cuda_norm4_threads(n), j = (n / 4 + threads - 1) / threads;
        if (bf) cuda_rmsnorm4(st, n_out, threads, j, x, add, w, rows, n, eps, (__nv_bfloat16 *)out);
        else cuda_rmsnorm4(st, n_out, threads, j, x, add, w, rows, n, eps, (float *)out);
    } else {
        const int threads = cuda_norm_threads(n);
        if (bf) cuda_k_rmsnorm<<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, (__nv_bfloat16 *)out);
        else cuda_k_rmsnorm<<<n_out, threads, 0, st>>>(x, add, w, rows, n, eps, (float *)out);
    }
    CU_LAUNCHED();
    return 0;
}

/* ---------------------------------------------------------------- q/k/v epilogue */

#define CUDA_QKV_WARPS 4

/* A q8_0 element of the KV pool: its int8 value (one byte; the scales live after the layer's values,
 * cuda_attn_geom.kv_scales). As a template argument it picks the q8_0 instances of the KV writes and of
 * the attention's tile loads. */
struct cuda_kv_q8 {
    int8_t q;
};
/* An fp8 element of the KV pool: its e4m3 byte (cuda_device.cuh's cuda_kv8_*; q8_0's layout of scales). */
struct cuda_kv_fp8 {
    unsigned char q;
};

/* Writes the head vector h (hd f32, this warp's shared buffer) into its slot dst (hd elements); scales (hd
 * / 32 f16 bits) is its slot's scales, used by q8_0 only. Lane l writes elements l, l + 32, ... */
template <typename KV>
__device__ __forceinline__ void cuda_kv_put(KV *dst, unsigned short *scales, const float *h, int32_t hd, int lane)
{
    (void)scales;
    for (int32_t i = lane; i < hd; i += 32) dst[i] = cuda_from_f32<KV>(h[i]);
}

/* q8_0: group g is elements [32 g, 32 g + 32), one a lane; its amax is a warp max (exact in any order),
 * then cuda_q8.cuh's steps, which are quant_quantize_row's. */
template <>
__device__ __forceinline__ void cuda_kv_put<cuda_kv_q8>(cuda_kv_q8 *dst, unsigned short *scales, const float *h,
                                                        int32_t hd, int lane)
{
    for (int32_t g = 0; g < hd / CUDA_Q8_GROUP; g++) {
        const float x = h[g * CUDA_Q8_GROUP + lane];
        const float d = cuda_q8_scale(fmaxf(0.0f, cuda_warp_max(fabsf(x))));
        dst[g * CUDA_Q8_GROUP + lane].q = (int8_t)cuda_q8_quantize(x, d);
        if (lane == 0) scales[g] = cuda_q8_scale_bits(d);
    }
}

/* fp8: as q8_0, with cuda_kv8's scale (amax / 448) and e4m3 values. */
template <>
__device__ __forceinline__ void cuda_kv_put<cuda_kv_fp8>(cuda_kv_fp8 *dst, unsigned short *scales, const float *h,
                                                         int32_t hd, int lane)
{
    for (int32_t g = 0; g < hd / CUDA_Q8_GROUP; g++) {
        const float x = h[g * CUDA_Q8_GROUP + lane];
        const float d = cuda_kv8_scale(fmaxf(0.0f, cuda_warp_max(fabsf(x))));
        dst[g * CUDA_Q8_GROUP + lane].q = cuda_kv8_quantize(x, d);
        if (lane == 0) scales[g] = cuda_q8_scale_bits(d);
    }
}

struct cuda_qkv_args {
    struct cuda_attn_geom g;
    struct cuda_batch_dev b;
    float *qkv;
    const float *bias, *q_norm, *k_norm, *cs;
    void *k, *v;
};

/* One warp per (row, head); heads are q (n_head), then k, then v (n_head_kv each). */
template <typename KV>
__global__ void cuda_k_qkv(const cuda_qkv_args a)
{
    __shared__ float buf[CUDA_QKV_WARPS][CUDA_MAX_HEAD_DIM];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t nh = a.g.n_head, nkv = a.g.n_head_kv, hd = a.g.head_dim;
    const int32_t hi = blockIdx.y * CUDA_QKV_WARPS + warp;
    if (hi >= nh + 2 * nkv) return; /* whole warps only: nothing below syncs the block */
    const int64_t r = blockIdx.x;
    float *y = a.qkv + r * (int64_t)(nh + 2 * nkv) * hd + (int64_t)hi * hd;
    float *h = buf[warp];
    for (int32_t i = lane; i < hd; i += 32) h[i] = a.bias ? __fadd_rn(y[i], a.bias[(int64_t)hi * hd + i]) : y[i];
    __syncwarp();
    const int kind = hi < nh ? 0 : hi < nh + nkv ? 1 : 2;
    if (kind < 2) {
        const float *nw = kind == 0 ? a.q_norm : a.k_norm;
        if (nw) {
            float ss = 0.0f;
            for (int32_t i = lane; i < hd; i += 32) ss = __fmaf_rn(h[i], h[i], ss);
            ss = cuda_warp_sum(ss);
            const float scale = 1.0f / sqrtf(ss / (float)hd + a.g.norm_eps);
            for (int32_t i = lane; i < hd; i += 32) h[i] = __fmul_rn(__fmul_rn(h[i], scale), nw[i]);
            __syncwarp();
        }
        const int32_t half = a.g.n_rot / 2;
        const float *cs = a.cs + r * 2 * half;
        for (int32_t i = lane; i < half; i += 32) {
            const int32_t p = a.g.rope_neox ? i : 2 * i, q = a.g.rope_neox ? i + half : 2 * i + 1;
            const float c = cs[2 * i], s = cs[2 * i + 1], x0 = h[p], x1 = h[q];
            h[p] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            h[q] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        }
        __syncwarp();
    }
    if (kind == 0) {
        for (int32_t i = lane; i < hd; i += 32) y[i] = h[i];
        return;
    }
    const int32_t pos = a.b.pos[r], bs = a.g.block_size;
    const int32_t blk = a.b.bt[a.b.bt_off[a.b.seq[r]] + pos / bs], slot = pos % bs;
    const int32_t kvh = hi - nh - (kind == 2 ? nkv : 0);
    const int64_t vec = ((int64_t)blk * nkv + kvh) * bs + slot; /* the head vector's index in the layer */
    char *layer = (char *)(kind == 1 ? a.k : a.v);
    cuda_kv_put<KV>((KV *)layer + vec * hd, (unsigned short *)(layer + a.g.kv_scales) + vec * (hd / CUDA_Q8_GROUP), h,
                    hd, lane);
}

int cuda_launch_qkv(cudaStream_t st, const struct cuda_attn_geom *g, const struct cuda_batch_dev *b, float *qkv,
                    const float *bias, const float *q_norm, const float *k_norm, const float *cs, void *k_layer,
                    void *v_layer, struct err *e)
{
    if (cuda_kv_grouped(g->kv_type) && g->head_dim % CUDA_Q8_GROUP)
        return err_set(e, "cuda backend: %s KV needs a head dimension that is a multiple of %d (%d)",
                       model_kv_type_name(g->kv_type), CUDA_Q8_GROUP, (int)g->head_dim);
    const cuda_qkv_args a = {*g, *b, qkv, bias, q_norm, k_norm, cs, k_layer, v_layer};
    const dim3 grid((unsigned)b->n_rows,
                    (unsigned)((g->n_head + 2 * g->n_head_kv + CUDA_QKV_WARPS - 1) / CUDA_QKV_WARPS));
    if (g->kv_type == KV_TYPE_F16) cuda_k_qkv<__half><<<grid, 32 * CUDA_QKV_WARPS, 0, st>>>(a);
    else if (g->kv_type == KV_TYPE_Q8_0) cuda_k_qkv<cuda_kv_q8><<<grid, 32 * CUDA_QKV_WARPS, 0, st>>>(a);
    else if (g->kv_type == KV_TYPE_FP8) cuda_k_qkv<cuda_kv_fp8><<<grid, 32 * CUDA_QKV_WARPS, 0, st>>>(a);
    else cuda_k_qkv<float><<<grid, 32 * CUDA_QKV_WARPS, 0, st>>>(a);
    CU_LAUNCHED();
    return 0;
}

/* ---------------------------------------------------------------- attention */

#define CUDA_ATT_WARPS 4
#define CUDA_ATT_QW (CUDA_ATT_QUERIES / CUDA_ATT_WARPS) /* queries per warp at most */

/* Shared memory of the attention kernel for QW queries per warp, in floats: queries (4 QW, hd), K
 * (TILE, hd + 4), V (TILE, hd), probabilities (4 QW, TILE). */
static size_t cuda_attn_smem_floats(int32_t hd, int qw)
{
    return (size_t)CUDA_ATT_WARPS * qw * hd + (size_t)CUDA_ATT_TILE * (hd + 4) + (size_t)CUDA_ATT_TILE * hd +
           (size_t)CUDA_ATT_WARPS * qw * CUDA_ATT_TILE;
}

/* Whether vectors of KV carry a q8_0 scale. */
template <typename KV> struct cuda_kv_scaled {
    static constexpr bool value = false;
};
template <> struct cuda_kv_scaled<cuda_kv_q8> {
    static constexpr bool value = true;
};
template <> struct cuda_kv_scaled<cuda_kv_fp8> {
    static constexpr bool value = true;
};

/* Element u (a compile-time constant after unrolling) of a 16-byte vector of KV values, as f32 (exact);
 * s: the vector's scale as f32 (q8_0; the other types ignore it). */
template <typename KV> __device__ __forceinline__ float cuda_vec_elem(const uint4 &x, int u, float s);
template <> __device__ __forceinline__ float cuda_vec_elem<__half>(const uint4 &x, int u, float)
{
    const uint32_t w = u < 2 ? x.x : u < 4 ? x.y : u < 6 ? x.z : x.w;
    return __half2float(__ushort_as_half((unsigned short)(u & 1 ? w >> 16 : w & 0xffffu)));
}
template <> __device__ __forceinline__ float cuda_vec_elem<float>(const uint4 &x, int u, float)
{
    return __uint_as_float(u == 0 ? x.x : u == 1 ? x.y : u == 2 ? x.z : x.w);
}
template <> __device__ __forceinline__ float cuda_vec_elem<cuda_kv_q8>(const uint4 &x, int u, float s)
{
    const uint32_t w = u < 4 ? x.x : u < 8 ? x.y : u < 12 ? x.z : x.w;
    const int b = (int)((w >> 8 * (u & 3)) & 0xffu); /* the int8 value, sign-extended below */
    return cuda_q8_value(b < 128 ? b : b - 256, s);
}
template <> __device__ __forceinline__ float cuda_vec_elem<cuda_kv_fp8>(const uint4 &x, int u, float s)
{
    const uint32_t w = u < 4 ? x.x : u < 8 ? x.y : u < 12 ? x.z : x.w;
    return cuda_kv8_value((w >> 8 * (u & 3)) & 0xffu, s);
}

/* One K/V tile in flight: each thread's 16-byte vectors (head_dim is a multiple of 8; of 32 for q8_0, whose
 * vectors of 16 values are half a group each and carry their group's scale). */
template <int DL, typename KV> struct cuda_att_tile {
    static constexpr bool Q8 = cuda_kv_scaled<KV>::value;
    static constexpr int EV = 16 / sizeof(KV); /* elements per vector */
    static constexpr int NV = (CUDA_ATT_TILE * 32 * DL / EV + 32 * CUDA_ATT_WARPS - 1) / (32 * CUDA_ATT_WARPS);
    uint4 k[NV], v[NV];
    unsigned short kd[Q8 ? NV : 1], vd[Q8 ? NV : 1]; /* q8_0: each vector's scale (f16 bits) */

    /* Issues the loads of positions [t0, t0 + nt) (zeros past nt); nothing waits for them here. kd_base,
     * vd_base: the scales of the values at kb, vb (element i's at index i / 32; q8_0 only). */
    __device__ __forceinline__ void issue(const KV *kb, const KV *vb, const unsigned short *kd_base,
                                          const unsigned short *vd_base, const int32_t *bt, int32_t bs,
                                          int64_t blk_stride, int32_t hd, int32_t t0, int32_t nt)
    {
        const int32_t vpr = hd / EV, n_vec = CUDA_ATT_TILE * vpr;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int32_t i = threadIdx.x + 32 * CUDA_ATT_WARPS * j, t = i / vpr;
            k[j] = v[j] = make_uint4(0u, 0u, 0u, 0u);
            if constexpr (Q8) kd[j] = vd[j] = 0; /* past nt: 0 * 0 */
            if (i < n_vec && t < nt) {
                const int32_t p = t0 + t;
                const int64_t off = bt[p / bs] * blk_stride + (int64_t)(p % bs) * hd + (i % vpr) * EV;
                k[j] = *(const uint4 *)(kb + off);
                v[j] = *(const uint4 *)(vb + off);
                if constexpr (Q8) {
                    kd[j] = kd_base[off / CUDA_Q8_GROUP];
                    vd[j] = vd_base[off / CUDA_Q8_GROUP];
                }
            }
        }
    }

    /* Writes the tile into shared memory as f32: K rows of stride hd + 4, V rows of stride hd. */
    __device__ __forceinline__ void commit(int32_t hd, float *ks, float *vs) const
    {
        const int32_t vpr = hd / EV, n_vec = CUDA_ATT_TILE * vpr;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int32_t i = threadIdx.x + 32 * CUDA_ATT_WARPS * j;
            if (i >= n_vec) continue;
            const int32_t t = i / vpr, d0 = (i % vpr) * EV;
            float sk = 1.0f, sv = 1.0f; /* the vectors' scales (q8_0) */
            if constexpr (Q8) {
                sk = cuda_q8_scale_value(kd[j]);
                sv = cuda_q8_scale_value(vd[j]);
            }
#pragma unroll
            for (int u = 0; u < EV; u += 4) {
                *(float4 *)(ks + t * (hd + 4) + d0 + u) =
                    make_float4(cuda_vec_elem<KV>(k[j], u, sk), cuda_vec_elem<KV>(k[j], u + 1, sk),
                                cuda_vec_elem<KV>(k[j], u + 2, sk), cuda_vec_elem<KV>(k[j], u + 3, sk));
                *(float4 *)(vs + t * hd + d0 + u) =
                    make_float4(cuda_vec_elem<KV>(v[j], u, sv), cuda_vec_elem<KV>(v[j], u + 1, sv),
                                cuda_vec_elem<KV>(v[j], u + 2, sv), cuda_vec_elem<KV>(v[j], u + 3, sv));
            }
        }
    }
};

/* One block per (item, kv head), 4 warps. Query j of the item (row row0 + j / group, head kvh * group +
 * j % group) belongs to warp j % 4; a warp keeps up to QW queries' states in registers (the launch picks
 * the smallest QW that holds its items: fewer registers and less shared memory, more blocks per
 * multiprocessor); lane d of a query owns dims d, d + 32, ... (DL of them). The tiles of the item's
 * chunks run in position order; while one tile is computed, the next one's loads are in flight. Per tile:
 * a score per lane (= position; four partial sums over dims mod 4, then (x + y) + (z + w)), the online
 * softmax update, then the V sums in position order. A query's arithmetic depends only on its q, its
 * position and its sequence's KV: never on QW, the other queries or the tiles past its position.
 * One function of ~150 lines on purpose: the per-query states stay in registers across the whole loop. */
/* Blocks per multiprocessor the register budget aims at: fewer queries, more blocks (decode is bound by
 * memory latency; QW = 1 at head_dim 128 holds 6 blocks of shared memory). */
#define CUDA_ATT_MIN_BLOCKS(QW) ((QW) == 1 ? 6 : (QW) == 2 ? 4 : 2)

template <int DL, int QW, typename KV, typename OUT>
__global__ void __launch_bounds__(32 * CUDA_ATT_WARPS, CUDA_ATT_MIN_BLOCKS(QW)) cuda_k_attn(const cuda_attn_args a)
{
    extern __shared__ float4 sm4[];
    const int32_t hd = a.g.head_dim, nh = a.g.n_head, nkv = a.g.n_head_kv, group = nh / nkv, bs = a.g.block_size;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const cuda_attn_item it = a.b.items[blockIdx.x];
    const int32_t kvh = blockIdx.y, nq = it.n_rows * group;
    float *qs = (float *)sm4;                              /* (4 QW, hd) */
    float *ks = qs + CUDA_ATT_WARPS * QW * hd;             /* (TILE, hd + 4) */
    float *vs = ks + CUDA_ATT_TILE * (hd + 4);             /* (TILE, hd) */
    float *ps = vs + CUDA_ATT_TILE * hd + warp * QW * CUDA_ATT_TILE; /* this warp's (QW, TILE) */
    for (int32_t i = threadIdx.x; i < nq * hd; i += blockDim.x) {
        const int32_t j = i / hd, d = i % hd;
        const int64_t row = it.row0 + j / group;
        qs[i] = a.qkv[row * a.qkv_stride + (int64_t)(kvh * group + j % group) * hd + d];
    }
    const int nqw = nq > warp ? (nq - warp + CUDA_ATT_WARPS - 1) / CUDA_ATT_WARPS : 0;
    int32_t qpos[QW], max_pos = 0;
#pragma unroll
    for (int i = 0; i < QW; i++) qpos[i] = i < nqw ? a.b.pos[it.row0 + (warp + CUDA_ATT_WARPS * i) / group] : -1;
    for (int32_t r = 0; r < it.n_rows; r++) max_pos = max(max_pos, a.b.pos[it.row0 + r]);
    const int32_t *bt = a.b.bt + a.b.bt_off[a.b.seq[it.row0]];
    const KV *kb = (const KV *)a.k + (int64_t)kvh * bs * hd, *vb = (const KV *)a.v + (int64_t)kvh * bs * hd;
    const unsigned short *kd = NULL, *vd = NULL; /* q8_0: the scales of kb, vb */
    if constexpr (cuda_att_tile<DL, KV>::Q8) {
        kd = (const unsigned short *)((const char *)a.k + a.g.kv_scales) + (int64_t)kvh * bs * hd / CUDA_Q8_GROUP;
        vd = (const unsigned short *)((const char *)a.v + a.g.kv_scales) + (int64_t)kvh * bs * hd / CUDA_Q8_GROUP;
    }
    const int64_t blk_stride = (int64_t)nkv * bs * hd;
    const int32_t t_begin = (it.split ? it.chunk : 0) * CUDA_ATT_CHUNK;
    const int32_t t_end = it.split ? min(t_begin + CUDA_ATT_CHUNK, max_pos + 1) : max_pos + 1;

    cuda_att_tile<DL, KV> tile;
    tile.issue(kb, vb, kd, vd, bt, bs, blk_stride, hd, t_begin, min(CUDA_ATT_TILE, t_end - t_begin));
    float M[QW], L[QW], O[QW][DL], m[QW], l[QW], acc[QW][DL];
#pragma unroll
    for (int i = 0; i < QW; i++) {
        M[i] = m[i] = -INFINITY;
        L[i] = l[i] = 0.0f;
#pragma unroll
        for (int dd = 0; dd < DL; dd++) O[i][dd] = acc[i][dd] = 0.0f;
    }
    for (int32_t t0 = t_begin; t0 < t_end; t0 += CUDA_ATT_TILE) {
        const int32_t nt = min(CUDA_ATT_TILE, t_end - t0);
        __syncthreads(); /* the previous tile's readers are done (at first: the queries are written) */
        tile.commit(hd, ks, vs);
        __syncthreads();
        if (t0 + CUDA_ATT_TILE < t_end)
            tile.issue(kb, vb, kd, vd, bt, bs, blk_stride, hd, t0 + CUDA_ATT_TILE,
                       min(CUDA_ATT_TILE, t_end - t0 - CUDA_ATT_TILE));
        if (t0 % CUDA_ATT_CHUNK == 0) { /* a chunk starts: fresh per-chunk states */
#pragma unroll
            for (int i = 0; i < QW; i++) {
                m[i] = -INFINITY;
                l[i] = 0.0f;
#pragma unroll
                for (int dd = 0; dd < DL; dd++) acc[i][dd] = 0.0f;
            }
        }
        float sx[QW], sy[QW], sz[QW], sw[QW];
#pragma unroll
        for (int i = 0; i < QW; i++) sx[i] = sy[i] = sz[i] = sw[i] = 0.0f;
        const float4 *kr = (const float4 *)(ks + lane * (hd + 4));
        for (int32_t d4 = 0; d4 < hd / 4; d4++) {
            const float4 k = kr[d4];
#pragma unroll
            for (int i = 0; i < QW; i++) {
                if (i >= nqw) continue;
                const float4 q = ((const float4 *)(qs + (warp + CUDA_ATT_WARPS * i) * hd))[d4];
                sx[i] = __fmaf_rn(q.x, k.x, sx[i]);
                sy[i] = __fmaf_rn(q.y, k.y, sy[i]);
                sz[i] = __fmaf_rn(q.z, k.z, sz[i]);
                sw[i] = __fmaf_rn(q.w, k.w, sw[i]);
            }
        }
        float alpha[QW];
#pragma unroll
        for (int i = 0; i < QW; i++) {
            alpha[i] = 1.0f;
            if (i >= nqw || t0 > qpos[i]) continue; /* warp-uniform */
            const bool valid = t0 + lane <= qpos[i];
            const float sc = valid ? __fmul_rn(__fadd_rn(__fadd_rn(sx[i], sy[i]), __fadd_rn(sz[i], sw[i])), a.scale)
                                   : -INFINITY;
            const float mn = fmaxf(m[i], cuda_warp_max(sc));
            alpha[i] = exp2f(__fsub_rn(m[i], mn));
            const float pr = valid ? exp2f(__fsub_rn(sc, mn)) : 0.0f;
            l[i] = __fmaf_rn(l[i], alpha[i], cuda_warp_sum(pr));
            m[i] = mn;
            ps[i * CUDA_ATT_TILE + lane] = pr;
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < QW; i++)
#pragma unroll
            for (int dd = 0; dd < DL; dd++) acc[i][dd] = __fmul_rn(acc[i][dd], alpha[i]);
        for (int32_t t = 0; t < nt; t++) {
            float pt[QW];
            bool on[QW];
#pragma unroll
            for (int i = 0; i < QW; i++) {
                on[i] = i < nqw && t0 + t <= qpos[i]; /* warp-uniform */
                pt[i] = on[i] ? ps[i * CUDA_ATT_TILE + t] : 0.0f;
            }
#pragma unroll
            for (int dd = 0; dd < DL; dd++) {
                if (lane + 32 * dd >= hd) continue;
                const float v = vs[t * hd + lane + 32 * dd];
#pragma unroll
                for (int i = 0; i < QW; i++)
                    if (on[i]) acc[i][dd] = __fmaf_rn(pt[i], v, acc[i][dd]);
            }
        }
        if ((t0 + CUDA_ATT_TILE) % CUDA_ATT_CHUNK != 0 && t0 + CUDA_ATT_TILE < t_end) continue;
        /* the chunk ends: its state of every query that has positions in it */
        const int32_t c = t0 / CUDA_ATT_CHUNK;
#pragma unroll
        for (int i = 0; i < QW; i++) {
            if (i >= nqw || qpos[i] < c * CUDA_ATT_CHUNK) continue;
            const int32_t j = warp + CUDA_ATT_WARPS * i, h = kvh * group + j % group;
            if (it.split) {
                const int64_t slot = ((int64_t)a.b.part_off[it.row0 + j / group] + c) * nh + h;
                if (lane == 0) {
                    a.part_ml[slot * 2] = m[i];
                    a.part_ml[slot * 2 + 1] = l[i];
                }
#pragma unroll
                for (int dd = 0; dd < DL; dd++)
                    if (lane + 32 * dd < hd) a.part_acc[slot * hd + lane + 32 * dd] = acc[i][dd];
            } else {
                const cuda_att_w w = cuda_att_merge_w(M[i], m[i]);
                L[i] = cuda_att_merge_v(L[i], l[i], w);
#pragma unroll
                for (int dd = 0; dd < DL; dd++) O[i][dd] = cuda_att_merge_v(O[i][dd], acc[i][dd], w);
                M[i] = fmaxf(M[i], m[i]);
            }
        }
    }
    if (it.split) return;
#pragma unroll
    for (int i = 0; i < QW; i++) {
        if (i >= nqw) continue;
        const int32_t j = warp + CUDA_ATT_WARPS * i, h = kvh * group + j % group;
        const float inv = 1.0f / L[i];
        OUT *o = (OUT *)a.out + (int64_t)(it.row0 + j / group) * nh * hd + (int64_t)h * hd;
#pragma unroll
        for (int dd = 0; dd < DL; dd++)
            if (lane + 32 * dd < hd) o[lane + 32 * dd] = cuda_from_f32<OUT>(__fmul_rn(O[i][dd], inv));
    }
}

/* Grid (split rows, n_head * head_dim / 128): one thread per output element merges its row's chunk
 * partials in chunk order (the same merge as above); the partials' loads do not depend on the running
 * state, so unrolling keeps several chunks' loads in flight. */
template <typename OUT>
__global__ void cuda_k_attn_combine(const cuda_attn_args a)
{
    const int32_t r = a.b.split_rows[blockIdx.x];
    const int32_t hd = a.g.head_dim, nh = a.g.n_head, nc = a.b.pos[r] / CUDA_ATT_CHUNK + 1;
    const int32_t i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= nh * hd) return;
    const int32_t h = i / hd, d = i % hd;
    const int64_t base = a.b.part_off[r];
    float M = -INFINITY, L = 0.0f, O = 0.0f;
#pragma unroll 4
    for (int32_t c = 0; c < nc; c++) {
        const int64_t slot = (base + c) * nh + h;
        const float m = a.part_ml[slot * 2], l = a.part_ml[slot * 2 + 1], x = a.part_acc[slot * hd + d];
        const cuda_att_w w = cuda_att_merge_w(M, m);
        L = cuda_att_merge_v(L, l, w);
        O = cuda_att_merge_v(O, x, w);
        M = fmaxf(M, m);
    }
    const float inv = 1.0f / L;
    ((OUT *)a.out)[(int64_t)r * nh * hd + i] = cuda_from_f32<OUT>(__fmul_rn(O, inv));
}

typedef void (*cuda_attn_fn)(const cuda_attn_args);

template <int DL, int QW, typename KV>
static cuda_attn_fn cuda_attn_pick4(int out_bf16)
{
    return out_bf16 ? cuda_k_attn<DL, QW, KV, __nv_bfloat16> : cuda_k_attn<DL, QW, KV, float>;
}

template <int DL, int QW>
static cuda_attn_fn cuda_attn_pick3(enum kv_type kv, int out_bf16)
{
    if (kv == KV_TYPE_F16) return cuda_attn_pick4<DL, QW, __half>(out_bf16);
    if (kv == KV_TYPE_Q8_0) return cuda_attn_pick4<DL, QW, cuda_kv_q8>(out_bf16);
    if (kv == KV_TYPE_FP8) return cuda_attn_pick4<DL, QW, cuda_kv_fp8>(out_bf16);
    return cuda_attn_pick4<DL, QW, float>(out_bf16);
}

template <int DL>
static cuda_attn_fn cuda_attn_pick2(int qw, enum kv_type kv, int out_bf16)
{
    if (qw <= 1) return cuda_attn_pick3<DL, 1>(kv, out_bf16);
    if (qw <= 2) return cuda_attn_pick3<DL, 2>(kv, out_bf16);
    if (qw <= 4) return cuda_attn_pick3<DL, 4>(kv, out_bf16);
    return cuda_attn_pick3<DL, 8>(kv, out_bf16);
}

/* The instance for (head_dim, queries per warp, kv type, output type); NULL if head_dim is not a multiple
 * of 8 (of 32 for q8_0) up to CUDA_MAX_HEAD_DIM. */
static cuda_attn_fn cuda_attn_pick(int32_t hd, int qw, enum kv_type kv, int out_bf16)
{
    if (hd % (cuda_kv_grouped(kv) ? CUDA_Q8_GROUP : 8)) return NULL;
    if (hd <= 32) return cuda_attn_pick2<1>(qw, kv, out_bf16);
    if (hd <= 64) return cuda_attn_pick2<2>(qw, kv, out_bf16);
    if (hd <= 128) return cuda_attn_pick2<4>(qw, kv, out_bf16);
    if (hd <= CUDA_MAX_HEAD_DIM) return cuda_attn_pick2<8>(qw, kv, out_bf16);
    return NULL;
}

int cuda_kernels_init(struct err *e)
{
    const int bytes = (int)(cuda_attn_smem_floats(CUDA_MAX_HEAD_DIM, CUDA_ATT_QW) * sizeof(float));
    for (int32_t hd = 32; hd <= CUDA_MAX_HEAD_DIM; hd *= 2)
        for (int qw = 1; qw <= 8; qw *= 2)
            for (int kv = 0; kv < KV_TYPE_N; kv++)
                for (int ob = 0; ob < 2; ob++)
                    CU_TRY(cudaFuncSetAttribute(cuda_attn_pick(hd, qw, (enum kv_type)kv, ob),
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return cuda_attn_tc_init(e) || cuda_sample_init(e) ? -1 : 0;
}

int cuda_launch_attn(cudaStream_t st, cudaStream_t split_st, const struct cuda_attn_geom *g,
                     const struct cuda_batch_dev *b, const float *qkv, int32_t qkv_stride, const void *k_layer,
                     const void *v_layer, void *out, enum cuda_act out_type, float *part_acc, float *part_ml,
                     struct err *e)
{
    if (b->n_items < 1) return 0;
    const cuda_attn_args a = {*g, *b, qkv, qkv_stride, k_layer, v_layer, out, part_acc, part_ml,
                              (1.0f / sqrtf((float)g->head_dim)) * 1.44269504088896340736f};
    if (g->attn != CUDA_ATTN_CORES) {
        if (!cuda_attn_tc_fits(g->head_dim, g->kv_type))
            return err_set(e,
                           "cuda backend: the tensor-core attention needs f16, q8_0 or fp8 KV and head_dim 64 or 128 "
                           "(%s, %d)",
                           model_kv_type_name(g->kv_type), (int)g->head_dim);
        return cuda_launch_attn_tc(st, split_st, a, b->n_items, out_type == CUDA_ACT_BF16, e);
    }
    const int32_t group = g->n_head / g->n_head_kv;
    const int need = (b->max_item_rows * group + CUDA_ATT_WARPS - 1) / CUDA_ATT_WARPS;
    const int qw = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8; /* the instance cuda_attn_pick2 takes */
    cuda_attn_fn fn = cuda_attn_pick(g->head_dim, qw, g->kv_type, out_type == CUDA_ACT_BF16);
    if (!fn)
        return err_set(e, "cuda backend: head dimension %d is not a multiple of %d up to %d (%s KV)", (int)g->head_dim,
                       cuda_kv_grouped(g->kv_type) ? CUDA_Q8_GROUP : 8, CUDA_MAX_HEAD_DIM,
                       model_kv_type_name(g->kv_type));
    const dim3 grid((unsigned)b->n_items, (unsigned)g->n_head_kv);
    fn<<<grid, 32 * CUDA_ATT_WARPS, cuda_attn_smem_floats(g->head_dim, qw) * sizeof(float), st>>>(a);
    CU_LAUNCHED();
    return 0;
}

int cuda_launch_attn_combine(cudaStream_t st, const struct cuda_attn_geom *g, const struct cuda_batch_dev *b,
                             const float *part_acc, const float *part_ml, void *out, enum cuda_act out_type,
                             struct err *e)
{
    if (b->n_split_rows < 1) return 0;
    const cuda_attn_args a = {*g, *b, NULL, 0, NULL, NULL, out, (float *)part_acc, (float *)part_ml, 0.0f};
    const dim3 grid((unsigned)b->n_split_rows, (unsigned)((g->n_head * g->head_dim + 127) / 128));
    if (out_type == CUDA_ACT_BF16) cuda_k_attn_combine<__nv_bfloat16><<<grid, 128, 0, st>>>(a);
    else cuda_k_attn_combine<float><<<grid, 128, 0, st>>>(a);
    CU_LAUNCHED();
    return 0;
}

int32_t cuda_attn_rows(int32_t group, enum cuda_attn_kernel k)
{
    const int32_t r = (k == CUDA_ATTN_CORES ? CUDA_ATT_ITEM_QUERIES : CUDA_TC_QUERIES) / (group > 0 ? group : 1);
    return r < 1 ? 1 : r;
}

int64_t cuda_attn_max_items(int32_t n_rows, int64_t max_parts)
{
    return (int64_t)n_rows + max_parts;
}

/* The launch group of an item: whole items (0), split items of several rows (1; by the item kernel), split lone
 * rows (2; by the split kernel where there is one). */
static int cuda_attn_item_class(const struct cuda_attn_item *a)
{
    return !a->split ? 0 : a->n_rows > 1 ? 1 : 2;
}

/* By launch group; whole items longest first (by their positions), so the long ones start early instead of
 * trailing the grid; then by row and chunk. The order never changes the arithmetic. */
static int cuda_attn_item_cmp(const void *pa, const void *pb)
{
    const struct cuda_attn_item *a = (const struct cuda_attn_item *)pa, *b = (const struct cuda_attn_item *)pb;
    const int ka = cuda_attn_item_class(a), kb = cuda_attn_item_class(b);
    if (ka != kb) return ka < kb ? -1 : 1;
    if (!a->split && a->chunk != b->chunk) return a->chunk > b->chunk ? -1 : 1;
    if (a->row0 != b->row0) return a->row0 < b->row0 ? -1 : 1;
    return (a->chunk > b->chunk) - (a->chunk < b->chunk);
}

/* Partial slots a split of rows [r, end) takes: each row's chunks. */
static int64_t cuda_attn_parts(const int32_t *pos, int32_t r, int32_t end)
{
    int64_t need = 0;
    for (int32_t k = r; k < end; k++) need += pos[k] / CUDA_ATT_CHUNK + 1;
    return need;
}

/* Marks rows [r, end) split: each row's partial slots from *parts on, the row in split_rows. */
static void cuda_attn_split(const int32_t *pos, int32_t r, int32_t end, int32_t *part_off, int32_t *split_rows,
                            int32_t *ns, int64_t *parts)
{
    for (int32_t k = r; k < end; k++) {
        part_off[k] = (int32_t)*parts;
        split_rows[(*ns)++] = k;
        *parts += pos[k] / CUDA_ATT_CHUNK + 1;
    }
}

int64_t cuda_attn_plan(int32_t n_rows, const int32_t *pos, const int32_t *seq, int32_t per, int64_t max_parts,
                       struct cuda_attn_item *items, int32_t *part_off, int32_t *split_rows, int64_t *n_parts,
                       int32_t *n_split_rows, int32_t *max_item_rows, int32_t *n_lone_items)
{
    int64_t n = 0, parts = 0, lone = 0;
    int32_t ns = 0, mr = 1;
    for (int32_t r = 0; r < n_rows;) {
        /* a sequence of up to CUDA_ATT_LONE_ROWS rows in the step (decode, with or without drafts) past its first
         * chunk: each row alone, an item per chunk of its own, however many rows an item may hold (the split
         * kernel runs them all in parallel, in one launch with the other decode rows) */
        int32_t s_end = r + 1;
        while (s_end < n_rows && seq[s_end] == seq[r] && s_end - r <= CUDA_ATT_LONE_ROWS) s_end++;
        const int alone = r == 0 || seq[r - 1] != seq[r];
        if (alone && s_end - r <= CUDA_ATT_LONE_ROWS && (s_end == n_rows || seq[s_end] != seq[r])) {
            int32_t last = pos[r];
            for (int32_t k = r; k < s_end; k++) last = last > pos[k] ? last : pos[k];
            const int64_t need = cuda_attn_parts(pos, r, s_end);
            if (last >= CUDA_ATT_CHUNK && parts + need <= max_parts) {
                cuda_attn_split(pos, r, s_end, part_off, split_rows, &ns, &parts);
                for (int32_t k = r; k < s_end; k++)
                    for (int32_t c = 0; c <= pos[k] / CUDA_ATT_CHUNK; c++)
                        items[n++] = (struct cuda_attn_item){k, 1, c, 1};
                lone += need;
                r = s_end;
                continue;
            }
        }
        /* else items of up to `per` rows: a sequence whose rows of the step are one item (a short prompt) an
         * item per chunk; the rest whole */
        int32_t end = r + 1, last = pos[r];
        while (end < n_rows && seq[end] == seq[r] && end - r < per) last = last > pos[end] ? last : pos[end], end++;
        for (int32_t k = r; k < end; k++) part_off[k] = -1;
        const int64_t nc = last / CUDA_ATT_CHUNK + 1;
        const int whole_seq = alone && (end == n_rows || seq[end] != seq[r]);
        const int64_t need = cuda_attn_parts(pos, r, end);
        if (whole_seq && nc > 1 && parts + need <= max_parts) {
            cuda_attn_split(pos, r, end, part_off, split_rows, &ns, &parts);
            for (int64_t c = 0; c < nc; c++) items[n++] = (struct cuda_attn_item){r, end - r, (int32_t)c, 1};
        } else {
            items[n++] = (struct cuda_attn_item){r, end - r, last + 1, 0};
        }
        if (end - r > mr) mr = end - r;
        r = end;
    }
    qsort(items, (size_t)n, sizeof *items, cuda_attn_item_cmp);
    *n_parts = parts;
    *n_split_rows = ns;
    *max_item_rows = mr;
    *n_lone_items = (int32_t)lone;
    return n;
}

/* ---------------------------------------------------------------- SwiGLU */

/* VEC consecutive values from p as f32 (VEC = 4: one 16-byte load of f32 or an 8-byte one of bf16). */
template <int VEC> __device__ __forceinline__ void cuda_swiglu_load(const float *p, float *v)
{
    if (VEC == 4) *(float4 *)v = *(const float4 *)p;
    else
#pragma unroll
        for (int i = 0; i < VEC; i++) v[i] = p[i];
}
template <int VEC> __device__ __forceinline__ void cuda_swiglu_load(const __nv_bfloat16 *p, float *v)
{
    if (VEC == 4) {
        const uint2 w = *(const uint2 *)p;
        const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&w.x),
                     b = __bfloat1622float2(*(const __nv_bfloat162 *)&w.y);
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    } else
#pragma unroll
        for (int i = 0; i < VEC; i++) v[i] = __bfloat162float(p[i]);
}

/* out[r][k] = silu(g) * u for g = gu[r][k], u = gu[r][n_ff + k]: a row per blockIdx.y (striding by gridDim.y),
 * VEC consecutive k per thread (vector loads when VEC = 4: n_ff % 4 == 0). */
template <typename G, typename T, int VEC>
__global__ void cuda_k_swiglu(const G *gu, int32_t n_rows, int32_t n_ff, T *out)
{
    const int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (k >= n_ff) return;
    for (int32_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const G *g = gu + (int64_t)r * 2 * n_ff + k;
        float gv[VEC], uv[VEC];
        cuda_swiglu_load<VEC>(g, gv);
        cuda_swiglu_load<VEC>(g + n_ff, uv);
#pragma unroll
        for (int i = 0; i < VEC; i++)
            out[(int64_t)r * n_ff + k + i] = cuda_from_f32<T>(cuda_silu_mul(gv[i], uv[i]));
    }
}

template <typename G, typename T>
static void cuda_swiglu_go(cudaStream_t st, const void *gu, int32_t n_rows, int32_t n_ff, void *out, int vec, dim3 grid,
                           int threads)
{
    if (vec == 4) cuda_k_swiglu<G, T, 4><<<grid, threads, 0, st>>>((const G *)gu, n_rows, n_ff, (T *)out);
    else cuda_k_swiglu<G, T, 1><<<grid, threads, 0, st>>>((const G *)gu, n_rows, n_ff, (T *)out);
}

int cuda_launch_swiglu(cudaStream_t st, const void *gu, enum cuda_act gu_type, int32_t n_rows, int32_t n_ff, void *out,
                       enum cuda_act out_type, struct err *e)
{
    if (n_rows < 1 || n_ff < 1) return 0;
    const int vec = n_ff % 4 == 0 ? 4 : 1, threads = 256;
    const dim3 grid((unsigned)((n_ff / vec + threads - 1) / threads), (unsigned)(n_rows < 65535 ? n_rows : 65535));
    const int gb = gu_type == CUDA_ACT_BF16, ob = out_type == CUDA_ACT_BF16;
    if (gb && ob) cuda_swiglu_go<__nv_bfloat16, __nv_bfloat16>(st, gu, n_rows, n_ff, out, vec, grid, threads);
    else if (gb) cuda_swiglu_go<__nv_bfloat16, float>(st, gu, n_rows, n_ff, out, vec, grid, threads);
    else if (ob) cuda_swiglu_go<float, __nv_bfloat16>(st, gu, n_rows, n_ff, out, vec, grid, threads);
    else cuda_swiglu_go<float, float>(st, gu, n_rows, n_ff, out, vec, grid, threads);
    CU_LAUNCHED();
    return 0;
}
