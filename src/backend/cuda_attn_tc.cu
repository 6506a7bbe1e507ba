/* cuda_attn_tc — the tensor-core attention kernel of the CUDA backend (f16, q8_0 or fp8 KV, head_dim 64 or
 * 128), and the choice between it and the CUDA-core kernel of cuda_kernels.cu. cuda_kernels.h describes the items,
 * the chunks and the invariant both kernels keep.
 *
 * The work: one block of 4 warps per (item, kv head). The item's queries j = 0 .. n_rows * group - 1 (row
 * row0 + j / group, query head kvh * group + j % group; CUDA_TC_QUERIES at most) are the rows of four m16
 * tiles, warp w owning j in [16 w, 16 w + 16). K/V tiles of CUDA_TC_TILE positions are copied (cp.async,
 * zeros past the item's last position) into two shared-memory stages: the next tile's copy is in flight
 * while the current one is computed, and every query head of the kv group (all rows of the item) shares
 * each tile. f16 KV is copied as stored into the f16 tiles the mma reads; q8_0 is copied raw (int8 values
 * and f16 scales, cuda_tc_layout) and, once the tile is in, converted by the whole block into one pair of
 * f16 tiles: each element the f16 of q * scale, rounded once to nearest even (cuda_q8.cuh's cuda_q8_half4;
 * the f32 product is exact, so this is the f16 rounding of the value the CUDA-core kernel reads); from
 * there the compute is the same. fp8 KV (e4m3 values in q8_0's layout) takes q8_0's path with its own
 * conversion (cuda_device.cuh's cuda_kv8_half4: e4m3 to f16 exactly, times the scale, rounded once). Per tile and warp:
 * S = Q K^T by mma.sync m16n8k16 (q scaled by the softmax scale and rounded to f16 once, kept as A fragments in
 * registers; k-steps over head_dim in order), the causal mask (a position past the query's own gets -inf), the online
 * softmax in registers (a quad of lanes holds a row: max and sum by fixed butterflies), the probabilities rounded to
 * f16 (the same rounded values go into l and into P V), then acc = acc * alpha + P V by mma.sync. Chunk states are
 * merged as in the CUDA-core kernel (cuda_att_merge_*); a whole item keeps its merged O in shared memory (each lane its
 * own elements), so only one accumulator set lives in registers.
 *
 * Batch invariance (kept): a query's bits depend only on its q, its position and its sequence's K/V (for
 * q8_0 too: the conversion is per element, the same for every tile that holds the element).
 * Tiles sit at absolute multiples of CUDA_TC_TILE, so every query runs the same tiles of each chunk in
 * the same order; a tile past a query's position (run because another query of its warp needs it) is an
 * exact no-op for it (alpha = exp2(0) = 1, probabilities 0, the mma adds exact zeros); each element of an
 * mma's result depends on its own row of A and column of B only, so the m-row, warp and item a query
 * lands in do not change its bits; whole and split items compute the same chunk states and merge them
 * with the same functions. tests/test_cuda_attn.c checks prefill rows alone, in other item compositions
 * and as lone (split) rows against the same rows in a mixed batch, bit for bit.
 *
 * One kernel function of ~100 lines on purpose: the fragments and states stay in registers throughout.
 */
#include "backend/cuda_device.cuh"
#include "backend/cuda_q8.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#define CUDA_TC_WARPS 4
#define CUDA_TC_TILE 32 /* positions per K/V tile */

static_assert(CUDA_TC_QUERIES == 16 * CUDA_TC_WARPS, "one m16 tile of queries per warp");
static_assert(CUDA_ATT_CHUNK % CUDA_TC_TILE == 0, "tiles inside chunks");

/* ---------------------------------------------------------------- PTX wrappers */

__device__ __forceinline__ uint32_t cuda_tc_saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros (src stays a valid address). */
__device__ __forceinline__ void cuda_tc_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cuda_tc_saddr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* B (4 or 8) bytes global -> shared, asynchronously (cp.async.ca: .cg copies 16 bytes only); src_bytes 0
 * writes zeros. */
template <int B> __device__ __forceinline__ void cuda_tc_cp_small(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(cuda_tc_saddr(dst)), "l"(src), "n"(B),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cuda_tc_cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N committed copy groups of this thread are still in flight. */
template <int N> __device__ __forceinline__ void cuda_tc_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* d (16x8 f32) += a (16x16 f16) * b (16x8 f16), fragments as the PTX ISA lays them out (g = lane / 4,
 * t = lane % 4; the lower half of a 32-bit register holds the lower index): a[0] = A[g][2t, 2t+1],
 * a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g],
 * b1 = B[2t+8, 2t+9][g]; d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1]. */
__device__ __forceinline__ void cuda_tc_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 matrices of 16-bit elements from shared memory: lanes 8i .. 8i+7 give the addresses of the 8
 * rows (16 bytes each) of matrix i. r[i] of lane l: row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of
 * matrix i; transposed (ldm4t): rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4. */
__device__ __forceinline__ void cuda_tc_ldm4(uint32_t (&r)[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(cuda_tc_saddr(p))
                 : "memory");
}

__device__ __forceinline__ void cuda_tc_ldm4t(uint32_t (&r)[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(cuda_tc_saddr(p))
                 : "memory");
}

__device__ __forceinline__ uint32_t cuda_tc_pack(__half lo, __half hi)
{
    return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
}

/* ---------------------------------------------------------------- the kernel */

/* Shared memory: the f16 K and V tiles, rows of HD + 8 halves (the 16 bytes of padding keep ldmatrix and the
 * plain loads free of bank conflicts), NF stages each: two for f16 KV, whose copies land in them; one for
 * q8_0, whose copies land raw in two stages of RAW bytes -- K's int8 values (CUDA_TC_TILE, HD), V's, K's f16
 * scales (CUDA_TC_TILE, HD / 32), V's -- converted into the f16 tiles before each tile is computed. Rows of
 * HD and HD / 16 bytes keep every 16-byte copy of values and every 4- or 8-byte copy of scales aligned (RAW
 * and every offset here are multiples of 16). Then, for the block kernel, the merged O of whole items, per
 * warp (HD / 8 n-tiles x 4 values x 32 lanes, f32). Sizes at HD 128 (64): f16 67,584 (34,816) bytes, q8_0
 * 67,584 (34,304); the split kernel's per warp (one stage): f16 17,408 (9,216), q8_0 26,112 (13,568). */
template <int HD, int Q8 = 0> struct cuda_tc_layout {
    static constexpr int KS = HD + 8;
    static constexpr int STAGE = CUDA_TC_TILE * KS; /* halves of one K (or V) f16 tile */
    static constexpr int NF = Q8 ? 1 : 2;            /* f16 stages of the block kernel */
    static constexpr int RAW = Q8 ? CUDA_TC_TILE * (2 * HD + 2 * (HD / 16)) : 0;
    static constexpr size_t O_FLOATS = (size_t)CUDA_TC_WARPS * (HD / 8) * 4 * 32;
    static constexpr size_t BYTES = (size_t)2 * NF * STAGE * sizeof(__half) + 2 * RAW + O_FLOATS * sizeof(float);
    static constexpr size_t SPLIT_WARP = (size_t)2 * STAGE * sizeof(__half) + RAW; /* a split warp's stage */
    static_assert(RAW % 16 == 0 && STAGE * sizeof(__half) % 16 == 0, "16-byte aligned stages");
};

/* The kernels' KV kind (their template argument Q8): f16 (0), q8_0, or fp8 (both copied raw, one byte an
 * element with an f16 scale per 32, and converted to f16 tiles: cuda_tc_convert). */
#define CUDA_TC_Q8 1
#define CUDA_TC_FP8 2
static inline int cuda_tc_kind(enum kv_type t)
{
    return t == KV_TYPE_Q8_0 ? CUDA_TC_Q8 : t == KV_TYPE_FP8 ? CUDA_TC_FP8 : 0;
}

/* The pool's element: f16, or q8_0's / fp8's byte. */
template <int Q8> using cuda_tc_kv = typename std::conditional<Q8 != 0, int8_t, __half>::type;

/* Where the K/V of one (sequence, kv head) live: the values kb, vb (elements of KV), q8_0's f16 scales kd, vd
 * (value i's at index i / 32), the block table bt of blocks of 1 << bs_log2 positions, blk_stride elements
 * apart. */
template <typename KV> struct cuda_tc_src {
    const KV *kb, *vb;
    const unsigned short *kd, *vd;
    const int32_t *bt;
    int32_t bs_log2;
    int64_t blk_stride;
};

/* The K/V of the sequence of row `row` at kv head kvh. */
template <int HD, typename KV>
__device__ __forceinline__ cuda_tc_src<KV> cuda_tc_src_of(const cuda_attn_args &a, int32_t row, int32_t kvh)
{
    const int32_t bs = a.g.block_size;
    const int64_t v0 = (int64_t)kvh * bs * HD; /* (block 0, kvh, slot 0, dim 0) */
    cuda_tc_src<KV> s;
    s.kb = (const KV *)a.k + v0;
    s.vb = (const KV *)a.v + v0;
    s.kd = s.vd = NULL;
    if (sizeof(KV) == 1) {
        s.kd = (const unsigned short *)((const char *)a.k + a.g.kv_scales) + v0 / CUDA_Q8_GROUP;
        s.vd = (const unsigned short *)((const char *)a.v + a.g.kv_scales) + v0 / CUDA_Q8_GROUP;
    }
    s.bt = a.b.bt + a.b.bt_off[a.b.seq[row]];
    s.bs_log2 = __ffs(bs) - 1; /* block sizes are powers of two (cuda_kv_alloc) */
    s.blk_stride = (int64_t)a.g.n_head_kv * bs * HD;
    return s;
}

/* Issues the copies of positions [t0, t0 + CUDA_TC_TILE) of K's and V's values into (ks, vs), rows of DS
 * elements, zeros from t_end on, by THREADS threads (tid = 0 .. THREADS - 1): thread tid copies the 16-byte
 * column c = tid % CPR (CPR = HD * sizeof(KV) / 16 columns a row) of positions tid / CPR + STEP j. Positions
 * below t_end are in the block table; t0 is a multiple of CUDA_TC_TILE. Blocks of 16 positions or more hold
 * each half of the tile in one block, so the table is read at most twice a tile and every copy is a base
 * plus a constant (STEP <= 16: the half is j's; STEP 32, q8_0 at HD 64 by 128 threads: tid's); smaller
 * blocks look each position's block up. */
template <int HD, int THREADS, int DS, typename KV>
__device__ __forceinline__ void cuda_tc_issue(const cuda_tc_src<KV> &s, int32_t t0, int32_t t_end, KV *ks, KV *vs,
                                              int tid)
{
    constexpr int EV = 16 / sizeof(KV), CPR = HD / EV, STEP = THREADS / CPR, N = CUDA_TC_TILE / STEP;
    static_assert(THREADS % CPR == 0 && (16 % STEP == 0 || STEP == 32) && CUDA_TC_TILE == 32, "whole rows per pass");
    const int tb = tid / CPR, c = tid % CPR;
    const int32_t mask = (1 << s.bs_log2) - 1, lim = t_end - t0 - tb; /* position tb + STEP j is in iff < lim + tb */
    KV *kd = ks + tb * DS + c * EV, *vd = vs + tb * DS + c * EV;
    if (s.bs_log2 >= 4) {
        const int64_t o0 = (int64_t)s.bt[t0 >> s.bs_log2] * s.blk_stride + (int64_t)(t0 & mask) * HD;
        const int64_t o1 = s.bs_log2 >= 5 || t0 + 16 >= t_end ? o0 + 16 * HD
                                                               : (int64_t)s.bt[(t0 + 16) >> s.bs_log2] * s.blk_stride +
                                                                     (int64_t)((t0 + 16) & mask) * HD;
        const int64_t e0 = o0 + tb * HD + c * EV, e1 = o1 + tb * HD + c * EV;
#pragma unroll
        for (int j = 0; j < N; j++) {
            const bool in = STEP * j < lim;
            const int r = STEP == 32 ? tb : STEP * j; /* < 16: position t0 + tb + STEP j is in the first half */
            const int64_t off = r < 16 ? e0 + STEP * j * HD : e1 + (STEP * j - 16) * HD;
            cuda_tc_cp16(kd + STEP * j * DS, in ? s.kb + off : s.kb, in ? 16 : 0);
            cuda_tc_cp16(vd + STEP * j * DS, in ? s.vb + off : s.vb, in ? 16 : 0);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < N; j++) {
        const int32_t p = t0 + tb + STEP * j;
        const bool in = p < t_end;
        const int64_t off = in ? (int64_t)s.bt[p >> s.bs_log2] * s.blk_stride + (int64_t)(p & mask) * HD + c * EV : 0;
        cuda_tc_cp16(kd + STEP * j * DS, s.kb + off, in ? 16 : 0);
        cuda_tc_cp16(vd + STEP * j * DS, s.vb + off, in ? 16 : 0);
    }
}

/* q8_0: issues the copies of the scales of positions [t0, t0 + CUDA_TC_TILE) of K and V into (kd, vd), rows
 * of HD / 32 scales, zeros from t_end on: thread tid < CUDA_TC_TILE copies position t0 + tid's, HD / 16 bytes
 * (4 or 8) each, one cp.async (a head vector's scales start at a multiple of HD / 16 bytes of the 16-byte
 * aligned scales array). */
template <int HD>
__device__ __forceinline__ void cuda_tc_issue_scales(const cuda_tc_src<int8_t> &s, int32_t t0, int32_t t_end,
                                                     unsigned short *kd, unsigned short *vd, int tid)
{
    constexpr int NS = HD / CUDA_Q8_GROUP; /* scales a head vector */
    if (tid >= CUDA_TC_TILE) return;
    const int32_t p = t0 + tid;
    const bool in = p < t_end;
    const int64_t g = in ? ((int64_t)s.bt[p >> s.bs_log2] * s.blk_stride +
                            (int64_t)(p & ((1 << s.bs_log2) - 1)) * HD) / CUDA_Q8_GROUP
                         : 0;
    cuda_tc_cp_small<2 * NS>(kd + tid * NS, s.kd + g, in ? 2 * NS : 0);
    cuda_tc_cp_small<2 * NS>(vd + tid * NS, s.vd + g, in ? 2 * NS : 0);
}

/* The copies of the tile at t0 into a stage: f16 KV into the f16 tiles ks, vs; q8_0 into the raw stage raw
 * (cuda_tc_layout). The caller commits them as one group. */
template <int HD, int THREADS>
__device__ __forceinline__ void cuda_tc_stage(const cuda_tc_src<__half> &s, int32_t t0, int32_t t_end, __half *ks,
                                              __half *vs, int8_t *, int tid)
{
    cuda_tc_issue<HD, THREADS, cuda_tc_layout<HD>::KS>(s, t0, t_end, ks, vs, tid);
}

template <int HD, int THREADS>
__device__ __forceinline__ void cuda_tc_stage(const cuda_tc_src<int8_t> &s, int32_t t0, int32_t t_end, __half *,
                                              __half *, int8_t *raw, int tid)
{
    constexpr int T = CUDA_TC_TILE;
    unsigned short *sc = (unsigned short *)(raw + 2 * T * HD);
    cuda_tc_issue<HD, THREADS, HD>(s, t0, t_end, raw, raw + T * HD, tid);
    cuda_tc_issue_scales<HD>(s, t0, t_end, sc, sc + T * (HD / CUDA_Q8_GROUP), tid);
}

/* q8_0 and fp8 (Q8): a raw stage into the f16 tiles ks, vs (rows of KS halves), by THREADS threads: element
 * (position p, dim d) becomes the f16 of q * scale, rounded once (cuda_q8_half4, cuda_kv8_half4); positions
 * past the copied ones (zero values and scales) become zeros, as an f16 tile's. Thread tid converts the 8-value pieces
 * i = tid + THREADS j of K and of V (position i / (HD / 8), dims 8 (i % (HD / 8)) .. + 7, one scale): an 8-byte load (a
 * half warp reads 128 contiguous bytes), a 16-byte store (a quarter warp writes 128 contiguous bytes of a row): no bank
 * conflicts. Per element, so a query's operands stay those of its own K/V. */
template <int HD, int THREADS, int Q8>
__device__ __forceinline__ void cuda_tc_convert(const int8_t *raw, __half *ks, __half *vs, int tid)
{
    constexpr int T = CUDA_TC_TILE, PR = HD / 8, N = T * PR / THREADS, NS = HD / CUDA_Q8_GROUP;
    constexpr int KS = cuda_tc_layout<HD>::KS;
    static_assert(T * PR % THREADS == 0, "whole passes");
    const unsigned short *sc = (const unsigned short *)(raw + 2 * T * HD);
#pragma unroll
    for (int j = 0; j < N; j++) {
        const int i = tid + THREADS * j, p = i / PR, c = i % PR;
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            const uint2 w = *(const uint2 *)(raw + kv * T * HD + p * HD + 8 * c);
            const unsigned int d = sc[kv * T * NS + p * NS + c / 4]; /* group 8 c / 32 */
            uint4 o;
            if (Q8 == CUDA_TC_FP8) {
                cuda_kv8_half4(w.x, d << 16 | d, &o.x, &o.y);
                cuda_kv8_half4(w.y, d << 16 | d, &o.z, &o.w);
            } else {
                cuda_q8_half4(w.x, d << 16 | d, &o.x, &o.y);
                cuda_q8_half4(w.y, d << 16 | d, &o.z, &o.w);
            }
            *(uint4 *)((kv ? vs : ks) + p * KS + 8 * c) = o;
        }
    }
}

/* One tile for one warp: S = Q K^T, mask, online softmax update of (m, l), acc = acc * alpha + P V.
 * qp: the positions of the lane's m-rows g and g + 8 (-1: no query). LDM: K/V fragments by ldmatrix
 * (else plain shared loads of the same elements). H = 1: the warp has no query in m-rows 8..15 (qp[1] < 0
 * in every lane): their softmax is skipped and their probabilities are zeros (rows 0..7 come out the same:
 * an mma's element depends on its own row of A only; acc[.][2..3] are then meaningless). */
template <int HD, int LDM, int H>
__device__ __forceinline__ void
cuda_tc_tile(const __half *kt, const __half *vt, const uint32_t (&qf)[HD / 16][4], const int32_t (&qp)[2],
             int32_t t0, float (&acc)[HD / 8][4], float (&m)[2], float (&l)[2])
{
    constexpr int NK = HD / 16, ND = HD / 8, NT = CUDA_TC_TILE / 8, KS = cuda_tc_layout<HD>::KS;
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) { /* B[k = dim][n = position] = K[position][dim] */
            uint32_t b[4];
            if (LDM) { /* matrices (positions, dims): (8nt, 16kk), (8nt, 16kk+8), (8nt+8, 16kk), (8nt+8,
                          16kk+8) */
                cuda_tc_ldm4(b, kt + (8 * nt + 8 * (lane >> 4) + (lane & 7)) * KS + 16 * kk +
                                    8 * ((lane >> 3) & 1));
            } else {
                const __half *r0 = kt + (8 * nt + g) * KS + 16 * kk + 2 * tq, *r1 = r0 + 8 * KS;
                b[0] = *(const uint32_t *)r0;
                b[1] = *(const uint32_t *)(r0 + 8);
                b[2] = *(const uint32_t *)r1;
                b[3] = *(const uint32_t *)(r1 + 8);
            }
            cuda_tc_mma(s[nt], qf[kk], b[0], b[1]);
            cuda_tc_mma(s[nt + 1], qf[kk], b[2], b[3]);
        }
    /* s[nt][2h + e]: m-row g + 8h, position t0 + 8nt + 2tq + e */
    float alpha[2] = {1.0f, 1.0f};
    __half ph[NT][4];
    if (H == 1)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) ph[nt][2] = ph[nt][3] = __float2half_rn(0.0f);
#pragma unroll
    for (int h = 0; h < H; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float v = t0 + 8 * nt + 2 * tq + e <= qp[h] ? s[nt][2 * h + e] : -INFINITY;
                s[nt][2 * h + e] = v;
                mx = fmaxf(mx, v);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m[h], mx),
                    mu = mn == -INFINITY ? 0.0f : mn; /* mu: no row without positions yet */
        alpha[h] = exp2f(__fsub_rn(m[h], mu));
        float rs = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                ph[nt][2 * h + e] = __float2half_rn(exp2f(__fsub_rn(s[nt][2 * h + e], mu)));
                rs = __fadd_rn(rs, __half2float(ph[nt][2 * h + e]));
            }
        rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 1)); /* a + b == b + a: the quad agrees */
        rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 2));
        l[h] = __fmaf_rn(l[h], alpha[h], rs);
        m[h] = mn;
    }
#pragma unroll
    for (int dn = 0; dn < ND; dn++) {
        acc[dn][0] = __fmul_rn(acc[dn][0], alpha[0]);
        acc[dn][1] = __fmul_rn(acc[dn][1], alpha[0]);
        if (H == 2) {
            acc[dn][2] = __fmul_rn(acc[dn][2], alpha[1]);
            acc[dn][3] = __fmul_rn(acc[dn][3], alpha[1]);
        }
    }
#pragma unroll
    for (int ks = 0; ks < NT / 2; ks++) { /* k16 step over positions 16ks .. 16ks + 15 */
        const uint32_t pa[4] = {cuda_tc_pack(ph[2 * ks][0], ph[2 * ks][1]),
                                cuda_tc_pack(ph[2 * ks][2], ph[2 * ks][3]),
                                cuda_tc_pack(ph[2 * ks + 1][0], ph[2 * ks + 1][1]),
                                cuda_tc_pack(ph[2 * ks + 1][2], ph[2 * ks + 1][3])};
#pragma unroll
        for (int dn = 0; dn < ND; dn += 2) { /* B[k = position][n = dim] = V[position][dim] */
            uint32_t b[4];
            if (LDM) { /* matrices (positions, dims): (16ks, 8dn), (16ks+8, 8dn), (16ks, 8dn+8), (16ks+8,
                          8dn+8) */
                cuda_tc_ldm4t(b, vt + (16 * ks + 8 * ((lane >> 3) & 1) + (lane & 7)) * KS + 8 * dn +
                                     8 * (lane >> 4));
            } else {
                const __half *v0 = vt + (16 * ks + 2 * tq) * KS + 8 * dn + g;
                b[0] = cuda_tc_pack(v0[0], v0[KS]);
                b[1] = cuda_tc_pack(v0[8 * KS], v0[9 * KS]);
                b[2] = cuda_tc_pack(v0[8], v0[KS + 8]);
                b[3] = cuda_tc_pack(v0[8 * KS + 8], v0[9 * KS + 8]);
            }
            cuda_tc_mma(acc[dn], pa, b[0], b[1]);
            cuda_tc_mma(acc[dn + 1], pa, b[2], b[3]);
        }
    }
}

/* Registers: ~150 at head_dim 128 (Q fragments 32, acc 64, scores 16): 3 blocks per multiprocessor.
 * Stage s of the copies: the f16 tiles kst, vst + (s % NF) STAGE and (q8_0) the raw stage raw + s RAW. */
template <int HD, int LDM, int Q8, typename OUT>
__global__ void __launch_bounds__(32 * CUDA_TC_WARPS, HD == 128 ? 3 : 4)
    cuda_k_attn_tc(const cuda_attn_args a)
{
    using LY = cuda_tc_layout<HD, Q8>;
    constexpr int NK = HD / 16, ND = HD / 8, THREADS = 32 * CUDA_TC_WARPS;
    extern __shared__ float4 sm4[];
    __half *kst = (__half *)sm4, *vst = kst + LY::NF * LY::STAGE;
    int8_t *raw = (int8_t *)(vst + LY::NF * LY::STAGE);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
    float *ow = (float *)(raw + 2 * LY::RAW) + warp * ND * 4 * 32 + lane; /* (dn, r) at ow[(4 dn + r) * 32] */
    const cuda_attn_item it = a.b.items[blockIdx.x];
    const int32_t nh = a.g.n_head, nkv = a.g.n_head_kv, group = nh / nkv, kvh = blockIdx.y;
    const int32_t nq = it.n_rows * group;
    int32_t max_pos = 0, qj[2], qp[2];
    for (int32_t r = 0; r < it.n_rows; r++)
        max_pos = max(max_pos, a.b.pos[it.row0 + r]);
    uint32_t qf[NK][4]; /* A fragments of the warp's 16 queries, prescaled, f16 */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        qj[h] = 16 * warp + (lane >> 2) + 8 * h;
        qp[h] = qj[h] < nq ? a.b.pos[it.row0 + qj[h] / group] : -1;
        const float *q = a.qkv + (int64_t)(it.row0 + qj[h] / group) * a.qkv_stride +
                         (int64_t)(kvh * group + qj[h] % group) * HD + 2 * tq;
#pragma unroll
        for (int kk = 0; kk < NK; kk++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const float2 x =
                    qp[h] >= 0 ? *(const float2 *)(q + 16 * kk + 8 * c) : make_float2(0.0f, 0.0f);
                qf[kk][h + 2 * c] = cuda_tc_pack(__float2half_rn(__fmul_rn(x.x, a.scale)),
                                                 __float2half_rn(__fmul_rn(x.y, a.scale)));
            }
    }
    int32_t wpos = max(qp[0], qp[1]); /* the warp's largest query position (-1: no queries) */
    for (int o = 4; o < 32; o <<= 1)
        wpos = max(wpos, __shfl_xor_sync(0xffffffffu, wpos, o));
    const cuda_tc_src<cuda_tc_kv<Q8>> src = cuda_tc_src_of<HD, cuda_tc_kv<Q8>>(a, it.row0, kvh);
    const int32_t t_begin = it.split ? it.chunk * CUDA_ATT_CHUNK : 0;
    const int32_t t_end = it.split ? min(t_begin + CUDA_ATT_CHUNK, max_pos + 1) : max_pos + 1;
    const int32_t n_tiles = (t_end - t_begin + CUDA_TC_TILE - 1) / CUDA_TC_TILE;

    float acc[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, M[2] = {-INFINITY, -INFINITY},
                      L[2] = {0.0f, 0.0f};
    if (!it.split)
#pragma unroll
        for (int i = 0; i < ND * 4; i++)
            ow[i * 32] = 0.0f;
    cuda_tc_stage<HD, THREADS>(src, t_begin, t_end, kst, vst, raw, threadIdx.x);
    cuda_tc_cp_commit();
    for (int32_t ti = 0; ti < n_tiles; ti++) {
        const int32_t t0 = t_begin + ti * CUDA_TC_TILE;
        const int st = ti & 1; /* tile ti's stage */
        if (ti + 1 < n_tiles) { /* the next tile into the other stage (its readers passed the last barrier) */
            const int sn = st ^ 1;
            cuda_tc_stage<HD, THREADS>(src, t0 + CUDA_TC_TILE, t_end, kst + (sn % LY::NF) * LY::STAGE,
                                       vst + (sn % LY::NF) * LY::STAGE, raw + sn * LY::RAW, threadIdx.x);
            cuda_tc_cp_commit();
            cuda_tc_cp_wait<1>();
        } else {
            cuda_tc_cp_wait<0>();
        }
        __syncthreads(); /* tile ti is in shared memory for every warp; every warp is done with tile ti - 1 */
        if (Q8) {
            cuda_tc_convert<HD, THREADS, Q8>(raw + st * LY::RAW, kst, vst, threadIdx.x);
            __syncthreads(); /* the f16 tile is written for every warp; raw stage st is read */
        }
        if (t0 % CUDA_ATT_CHUNK == 0) { /* a chunk starts: fresh per-chunk states */
#pragma unroll
            for (int dn = 0; dn < ND; dn++)
                acc[dn][0] = acc[dn][1] = acc[dn][2] = acc[dn][3] = 0.0f;
            m[0] = m[1] = -INFINITY;
            l[0] = l[1] = 0.0f;
        }
        if (t0 <= wpos) /* warp-uniform; a tile past every query of the warp would be a no-op */
            cuda_tc_tile<HD, LDM, 2>(kst + (st % LY::NF) * LY::STAGE, vst + (st % LY::NF) * LY::STAGE, qf, qp, t0, acc,
                                     m, l);
        const int32_t c = t0 / CUDA_ATT_CHUNK;
        if (((t0 + CUDA_TC_TILE) % CUDA_ATT_CHUNK == 0 || ti + 1 == n_tiles) && c * CUDA_ATT_CHUNK <= wpos) {
#pragma unroll
            for (int h = 0; h < 2; h++) { /* the chunk ends: write (split) or merge (whole) its states */
                if (it.split) { /* rows with positions in the chunk only (a split item of several rows) */
                    if (qp[h] < c * CUDA_ATT_CHUNK) continue;
                    const int64_t slot = ((int64_t)a.b.part_off[it.row0 + qj[h] / group] + c) * nh +
                                         kvh * group + qj[h] % group;
                    if (tq == 0) {
                        a.part_ml[slot * 2] = m[h];
                        a.part_ml[slot * 2 + 1] = l[h];
                    }
#pragma unroll
                    for (int dn = 0; dn < ND; dn++)
                        *(float2 *)(a.part_acc + slot * HD + 8 * dn + 2 * tq) =
                            make_float2(acc[dn][2 * h], acc[dn][2 * h + 1]);
                } else { /* rows without positions in this chunk: an exact no-op (weights 1 and 0) */
                    const cuda_att_w w = cuda_att_merge_w(M[h], m[h]);
                    L[h] = cuda_att_merge_v(L[h], l[h], w);
#pragma unroll
                    for (int dn = 0; dn < ND; dn++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float *o = ow + (4 * dn + 2 * h + e) * 32;
                            *o = cuda_att_merge_v(*o, acc[dn][2 * h + e], w);
                        }
                    M[h] = fmaxf(M[h], m[h]);
                }
            }
        }
        if (!Q8) __syncthreads(); /* every warp is done with stage st before it is refilled (q8_0: the next tile's
                                     first barrier orders the conversion into the f16 tiles after this tile's reads,
                                     and this tile's second one the refill of raw stage st after its conversion) */
    }
    if (it.split) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (qp[h] < 0) continue;
        const float inv = 1.0f / L[h];
        OUT *o = (OUT *)a.out + (int64_t)(it.row0 + qj[h] / group) * nh * HD +
                 (int64_t)(kvh * group + qj[h] % group) * HD;
#pragma unroll
        for (int dn = 0; dn < ND; dn++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                o[8 * dn + 2 * tq + e] = cuda_from_f32<OUT>(__fmul_rn(ow[(4 * dn + 2 * h + e) * 32], inv));
    }
}

/* ---------------------------------------------------------------- split items, a warp each */

/* Decode: split items (one row, one chunk, group <= 16 queries) a warp each, CUDA_TC_WARPS items a block, each
 * warp with its own K/V stage: the block kernel gives a split item one warp of compute and one tile in flight
 * per block; this gives every warp both (4x the loads in flight at the same shared memory per block). A
 * warp's queries are the item's j = 0 .. 15 (rows g and g + 8 of its m16 tile) and it runs the same tiles
 * through the same cuda_tc_tile and writes the same partials as the block kernel's warp 0: the same bits.
 * A warp's stage: the f16 tiles ks, vs, and for q8_0 one raw stage, refilled as soon as it is converted, so
 * the next tile's copies are in flight while the warp computes (at HD 128 a q8_0 block takes 104 KB of
 * shared memory: 2 blocks per multiprocessor, hence its launch bound). */
template <int HD, int LDM, int H, int Q8>
__global__ void __launch_bounds__(32 * CUDA_TC_WARPS, HD == 128 ? 3 - (Q8 != 0) : 4)
    cuda_k_attn_tc_split(const cuda_attn_args a, int32_t first, int32_t n)
{
    using LY = cuda_tc_layout<HD, Q8>;
    constexpr int NK = HD / 16, ND = HD / 8;
    extern __shared__ float4 sm4[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
    const int32_t k = (int32_t)blockIdx.x * CUDA_TC_WARPS + warp;
    if (k >= n) return; /* warp-uniform; the warps never synchronize with each other */
    __half *ks = (__half *)((char *)sm4 + (size_t)warp * LY::SPLIT_WARP), *vs = ks + LY::STAGE;
    int8_t *raw = (int8_t *)(vs + LY::STAGE);
    const cuda_attn_item it = a.b.items[first + k];
    const int32_t nh = a.g.n_head, nkv = a.g.n_head_kv, group = nh / nkv, kvh = blockIdx.y;
    const int32_t pos = a.b.pos[it.row0];
    int32_t qj[2], qp[2];
    uint32_t qf[NK][4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        qj[h] = (lane >> 2) + 8 * h;
        qp[h] = qj[h] < group ? pos : -1;
        const float *q = a.qkv + (int64_t)it.row0 * a.qkv_stride + (int64_t)(kvh * group + qj[h] % group) * HD + 2 * tq;
#pragma unroll
        for (int kk = 0; kk < NK; kk++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const float2 x = qp[h] >= 0 ? *(const float2 *)(q + 16 * kk + 8 * c) : make_float2(0.0f, 0.0f);
                qf[kk][h + 2 * c] =
                    cuda_tc_pack(__float2half_rn(__fmul_rn(x.x, a.scale)), __float2half_rn(__fmul_rn(x.y, a.scale)));
            }
    }
    const cuda_tc_src<cuda_tc_kv<Q8>> src = cuda_tc_src_of<HD, cuda_tc_kv<Q8>>(a, it.row0, kvh);
    const int32_t t_begin = it.chunk * CUDA_ATT_CHUNK, t_end = min(t_begin + CUDA_ATT_CHUNK, pos + 1);
    float acc[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int dn = 0; dn < ND; dn++)
        acc[dn][0] = acc[dn][1] = acc[dn][2] = acc[dn][3] = 0.0f;
    if (Q8) {
        cuda_tc_stage<HD, 32>(src, t_begin, t_end, ks, vs, raw, lane);
        cuda_tc_cp_commit();
    }
    for (int32_t t0 = t_begin; t0 < t_end; t0 += CUDA_TC_TILE) {
        if (!Q8) {
            cuda_tc_stage<HD, 32>(src, t0, t_end, ks, vs, raw, lane);
            cuda_tc_cp_commit();
        }
        cuda_tc_cp_wait<0>();
        __syncwarp(); /* every lane's copies are visible to the warp */
        if (Q8) {
            cuda_tc_convert<HD, 32, Q8>(raw, ks, vs, lane);
            __syncwarp(); /* the f16 tiles are written; the raw stage is read */
            if (t0 + CUDA_TC_TILE < t_end) {
                cuda_tc_stage<HD, 32>(src, t0 + CUDA_TC_TILE, t_end, ks, vs, raw, lane);
                cuda_tc_cp_commit();
            }
        }
        cuda_tc_tile<HD, LDM, H>(ks, vs, qf, qp, t0, acc, m, l);
        __syncwarp(); /* the warp is done with the f16 tiles before they are refilled or converted into */
    }
#pragma unroll
    for (int h = 0; h < H; h++) {
        if (qp[h] < 0) continue;
        const int64_t slot = ((int64_t)a.b.part_off[it.row0] + it.chunk) * nh + kvh * group + qj[h];
        if (tq == 0) {
            a.part_ml[slot * 2] = m[h];
            a.part_ml[slot * 2 + 1] = l[h];
        }
#pragma unroll
        for (int dn = 0; dn < ND; dn++)
            *(float2 *)(a.part_acc + slot * HD + 8 * dn + 2 * tq) = make_float2(acc[dn][2 * h], acc[dn][2 * h + 1]);
    }
}

typedef void (*cuda_tc_split_fn)(const cuda_attn_args, int32_t, int32_t);

template <int HD, int Q8> static cuda_tc_split_fn cuda_tc_split_pick2(int ldm, int h, size_t *bytes)
{
    *bytes = CUDA_TC_WARPS * cuda_tc_layout<HD, Q8>::SPLIT_WARP; /* a stage per warp */
    if (h == 1) return ldm ? cuda_k_attn_tc_split<HD, 1, 1, Q8> : cuda_k_attn_tc_split<HD, 0, 1, Q8>;
    return ldm ? cuda_k_attn_tc_split<HD, 1, 2, Q8> : cuda_k_attn_tc_split<HD, 0, 2, Q8>;
}

/* The split kernel for (head_dim, ldmatrix or not, m-row halves with queries: 1 when group <= 8, q8_0 KV or
 * f16) and its shared memory; NULL if none. */
static cuda_tc_split_fn cuda_tc_split_pick(int32_t hd, int ldm, int h, int q8, size_t *bytes)
{
    if (hd == 64)
        return q8 == CUDA_TC_FP8 ? cuda_tc_split_pick2<64, CUDA_TC_FP8>(ldm, h, bytes)
               : q8              ? cuda_tc_split_pick2<64, CUDA_TC_Q8>(ldm, h, bytes)
                                 : cuda_tc_split_pick2<64, 0>(ldm, h, bytes);
    if (hd == 128)
        return q8 == CUDA_TC_FP8 ? cuda_tc_split_pick2<128, CUDA_TC_FP8>(ldm, h, bytes)
               : q8              ? cuda_tc_split_pick2<128, CUDA_TC_Q8>(ldm, h, bytes)
                                 : cuda_tc_split_pick2<128, 0>(ldm, h, bytes);
    return NULL;
}

/* ---------------------------------------------------------------- launch and choice */

typedef void (*cuda_tc_fn)(const cuda_attn_args);

template <int HD, int Q8> static cuda_tc_fn cuda_tc_pick2(int ldm, int out_bf16, size_t *bytes)
{
    *bytes = cuda_tc_layout<HD, Q8>::BYTES;
    if (ldm) return out_bf16 ? cuda_k_attn_tc<HD, 1, Q8, __nv_bfloat16> : cuda_k_attn_tc<HD, 1, Q8, float>;
    return out_bf16 ? cuda_k_attn_tc<HD, 0, Q8, __nv_bfloat16> : cuda_k_attn_tc<HD, 0, Q8, float>;
}

/* The instance for (head_dim, ldmatrix or not, q8_0 KV or f16, output type) and its shared memory; NULL if
 * none. */
static cuda_tc_fn cuda_tc_pick(int32_t hd, int ldm, int q8, int out_bf16, size_t *bytes)
{
    if (hd == 64)
        return q8 == CUDA_TC_FP8 ? cuda_tc_pick2<64, CUDA_TC_FP8>(ldm, out_bf16, bytes)
               : q8              ? cuda_tc_pick2<64, CUDA_TC_Q8>(ldm, out_bf16, bytes)
                                 : cuda_tc_pick2<64, 0>(ldm, out_bf16, bytes);
    if (hd == 128)
        return q8 == CUDA_TC_FP8 ? cuda_tc_pick2<128, CUDA_TC_FP8>(ldm, out_bf16, bytes)
               : q8              ? cuda_tc_pick2<128, CUDA_TC_Q8>(ldm, out_bf16, bytes)
                                 : cuda_tc_pick2<128, 0>(ldm, out_bf16, bytes);
    return NULL;
}

int cuda_attn_tc_init(struct err *e)
{
    /* the largest carveout: 3 blocks of ~70 KB per multiprocessor (2 of the q8_0 split kernel's ~104 KB) */
    const int carve = cudaSharedmemCarveoutMaxShared;
    for (int32_t hd = 64; hd <= 128; hd *= 2)
        for (int ldm = 0; ldm < 2; ldm++)
            for (int q8 = 0; q8 <= CUDA_TC_FP8; q8++)
                for (int k = 0; k < 2; k++) { /* k: the block kernel's output type; the split's m-row halves - 1 */
                    size_t bytes = 0;
                    cuda_tc_fn fn = cuda_tc_pick(hd, ldm, q8, k, &bytes);
                    CU_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
                    CU_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, carve));
                    cuda_tc_split_fn sf = cuda_tc_split_pick(hd, ldm, 1 + k, q8, &bytes);
                    CU_TRY(cudaFuncSetAttribute(sf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
                    CU_TRY(cudaFuncSetAttribute(sf, cudaFuncAttributePreferredSharedMemoryCarveout, carve));
                }
    return 0;
}

/* Split lone rows that the split kernel runs: where a warp holds a row's queries (group <= 16). */
static int32_t cuda_tc_n_split(const struct cuda_attn_geom *g, const struct cuda_batch_dev *b)
{
    return g->n_head / g->n_head_kv <= 16 ? b->n_split_items : 0;
}

int cuda_attn_tc_apart(const struct cuda_attn_geom *g, const struct cuda_batch_dev *b)
{
    const int32_t n_split = cuda_tc_n_split(g, b);
    return g->attn != CUDA_ATTN_CORES && n_split > 0 && n_split < b->n_items;
}

int cuda_launch_attn_tc(cudaStream_t st, cudaStream_t split_st, const cuda_attn_args &a, int32_t n_items,
                        int out_bf16, struct err *e)
{
    size_t bytes = 0, split_bytes = 0;
    const int ldm = a.g.attn == CUDA_ATTN_TC, q8 = cuda_tc_kind(a.g.kv_type);
    cuda_tc_fn fn = cuda_tc_pick(a.g.head_dim, ldm, q8, out_bf16, &bytes);
    const int32_t group = a.g.n_head / a.g.n_head_kv;
    cuda_tc_split_fn sf = cuda_tc_split_pick(a.g.head_dim, ldm, group <= 8 ? 1 : 2, q8, &split_bytes);
    if (!fn || !sf) return err_set(e, "cuda backend: no tensor-core attention for head_dim %d", (int)a.g.head_dim);
    const int32_t n_split = cuda_tc_n_split(&a.g, &a.b), n_whole = n_items - n_split;
    if (n_whole > 0) {
        fn<<<dim3((unsigned)n_whole, (unsigned)a.g.n_head_kv), 32 * CUDA_TC_WARPS, bytes, st>>>(a);
        CU_LAUNCHED();
    }
    if (n_split > 0) {
        const unsigned blocks = (unsigned)((n_split + CUDA_TC_WARPS - 1) / CUDA_TC_WARPS);
        sf<<<dim3(blocks, (unsigned)a.g.n_head_kv), 32 * CUDA_TC_WARPS, split_bytes, split_st>>>(a, n_whole, n_split);
        CU_LAUNCHED();
    }
    return 0;
}

int cuda_attn_tc_fits(int32_t head_dim, enum kv_type t)
{
    return (t == KV_TYPE_F16 || cuda_kv_grouped(t)) && (head_dim == 64 || head_dim == 128);
}

/* NIGHTSHIFT_CUDA_ATTN, read once: the kernel it names, or -1. */
static int cuda_attn_forced(void)
{
    static int forced = -2; /* a racing first read stores the same value */
    if (forced == -2) {
        const char *s = getenv("NIGHTSHIFT_CUDA_ATTN");
        forced = !s                         ? -1
                 : strcmp(s, "cores") == 0  ? CUDA_ATTN_CORES
                 : strcmp(s, "tc") == 0     ? CUDA_ATTN_TC
                 : strcmp(s, "tc-lds") == 0 ? CUDA_ATTN_TC_LDS
                                            : -1;
    }
    return forced;
}

enum cuda_attn_kernel cuda_attn_choose(int32_t head_dim, enum kv_type t, int act_bf16)
{
    if (!cuda_attn_tc_fits(head_dim, t)) return CUDA_ATTN_CORES;
    const int forced = cuda_attn_forced();
    if (forced >= 0) return (enum cuda_attn_kernel)forced;
    return act_bf16 ? CUDA_ATTN_TC : CUDA_ATTN_CORES;
}

const char *cuda_attn_kernel_name(enum cuda_attn_kernel k)
{
    return k == CUDA_ATTN_TC       ? "tensor cores (mma.sync, f16 operands)"
           : k == CUDA_ATTN_TC_LDS ? "tensor cores (mma.sync, f16 operands, plain shared loads)"
                                   : "CUDA cores (f32)";
}
