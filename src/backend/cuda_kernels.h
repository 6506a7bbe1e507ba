/* cuda_kernels — the CUDA backend's own kernels and their launchers (CUDA C++; private to src/backend/).
 *
 * Every launcher enqueues on the given stream and returns 0, or -1 with the launch error in e (file:line).
 * Buffers are device pointers; shapes are in the comments. "act" buffers (inputs of a GEMM) are BF16 or
 * F32 per the matrix they feed (enum cuda_act); everything else is F32.
 *
 * Attention (cuda_launch_attn) works on items planned on the host (cuda_attn_plan): an item is (up to
 * cuda_attn_rows() consecutive rows of one sequence) x (one kv head, grid.y) x (position chunks).
 * Positions are split into chunks of CUDA_ATT_CHUNK at absolute multiples, each chunk into tiles of
 * CUDA_ATT_TILE. For one (row, query head) the arithmetic is fixed by the row's q, its position and its
 * sequence's KV alone: per chunk c <= pos / CUDA_ATT_CHUNK an online softmax over its tiles in order gives
 * (m_c, l_c, acc_c); the chunks are then merged in order c = 0, 1, ... (cuda_attn_merge). A "whole" item
 * does both in one block and writes the output; a "split" item does one chunk and writes the partial, and
 * cuda_launch_attn_combine merges the partials with the same merge. Both give bit-identical outputs, so
 * the host may split or not as it likes (it splits single-row items, decode, for parallelism).
 *
 * Two attention kernels follow that structure (enum cuda_attn_kernel, chosen per KV pool, never per step):
 * the CUDA-core kernel (f32 arithmetic throughout: the exact path, any head_dim, f32, f16 or q8_0 KV, each
 * element converted exactly to f32 as its tile is loaded) and the tensor-core kernel of cuda_attn_tc.cu
 * (f16 or q8_0 KV, head_dim 64 or 128: f16 operands, f32 accumulation; q8_0 elements rounded to f16 as
 * their tile is converted). Each
 * is batch-invariant on its own: a row's bits depend on its q, its position and its sequence's KV, never on
 * the other rows of the step, the items the plan makes or whether a row is split. The two kernels give
 * different bits, so the backend picks one for the whole life of a KV pool (cuda_attn_choose).
 */
#ifndef NS_BACKEND_CUDA_KERNELS_H
#define NS_BACKEND_CUDA_KERNELS_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "model/model.h"
#include "util/err.h"
}

#define CUDA_ATT_TILE 32       /* positions per K/V tile in shared memory (one per lane) */
#define CUDA_ATT_CHUNK 128     /* positions per chunk (a multiple of CUDA_ATT_TILE) */
#define CUDA_ATT_QUERIES 32    /* (rows x query heads) per item at most: 4 warps x 8 */
#define CUDA_ATT_ITEM_QUERIES 16 /* queries a multi-row item aims at (4 per warp: more blocks resident) */
#define CUDA_TC_QUERIES 64     /* queries per item of the tensor-core kernel: 4 warps x 16 (one m16 tile each) */
#define CUDA_MAX_HEAD_DIM 256  /* head_dim at most, a multiple of 8 (load refuses others) */
#define CUDA_ATT_LONE_ROWS 16  /* a sequence's rows of a step split one by one (decode and its drafts) at most */

/* Records a failed CUDA call into e with file:line; returns -1. */
int cuda_fail(struct err *e, const char *file, int line, const char *what, const char *msg);

#define CU_TRY(call)                                                                                      \
    do {                                                                                                  \
        cudaError_t rc_ = (call);                                                                         \
        if (rc_ != cudaSuccess) return cuda_fail(e, __FILE__, __LINE__, #call, cudaGetErrorString(rc_));  \
    } while (0)

/* After a kernel launch: the launch error, if any. */
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())

enum cuda_act { CUDA_ACT_F32 = 0, CUDA_ACT_BF16 = 1 };

/* One attention item (see the top of this file); 16 bytes, read as an int4. */
struct cuda_attn_item {
    int32_t row0, n_rows;
    int32_t chunk; /* split: the one chunk this item computes; whole: its positions (max pos + 1, ordering) */
    int32_t split; /* 1: write the partial of `chunk`; 0: every chunk, then the output */
};

/* The step batch as the kernels read it (device pointers into the uploaded batch). */
struct cuda_batch_dev {
    int32_t n_rows;
    const int32_t *tokens;   /* (n_rows) */
    const int32_t *pos;      /* (n_rows) */
    const int32_t *seq;      /* (n_rows) index into bt_off */
    const int32_t *bt_off;   /* (n_seqs) offset of each sequence's block table in bt */
    const int32_t *bt;       /* block tables, concatenated */
    const int32_t *part_off; /* (n_rows) first partial slot of a split row, -1 if the row is not split */
    const int32_t *logit_rows;
    const struct cuda_attn_item *items;
    int32_t n_items;
    const int32_t *split_rows; /* (n_split_rows) rows whose output cuda_launch_attn_combine writes */
    int32_t n_split_rows;
    int32_t max_item_rows; /* rows of the largest item (picks the kernel instance) */
    int32_t n_split_items; /* the last n_split_items items are split lone rows (cuda_attn_plan puts them last),
                              for the split kernel; 0: every item by the item kernel (the same bits) */
};

/* The attention kernel of a KV pool. CUDA_ATTN_TC_LDS is the tensor-core kernel with its K/V operands
 * read by plain shared-memory loads instead of ldmatrix: the same values into the same mma, so the same
 * bits (tests/test_cuda_attn.c checks it; a fallback selectable by NIGHTSHIFT_CUDA_ATTN). */
enum cuda_attn_kernel { CUDA_ATTN_CORES = 0, CUDA_ATTN_TC = 1, CUDA_ATTN_TC_LDS = 2 };

/* Geometry of the model's attention and of one layer of the KV pool, K and V separately: the head vectors
 * [block][kv head][slot][head_dim] of kv_type elements (F32, F16, or Q8_0's int8 values), and for Q8_0 after
 * them, kv_scales bytes from the layer's base, the f16 scales [block][kv head][slot][head_dim / 32]: one per
 * 32 consecutive elements of a head vector, so element i of the layer (counted in the values array) has
 * scale i / 32 (cuda_q8.cuh states the arithmetic). Q8_0 needs head_dim % 32 == 0. */
struct cuda_attn_geom {
    int32_t n_head, n_head_kv, head_dim, n_rot, rope_neox;
    int32_t block_size;
    enum kv_type kv_type;
    float norm_eps;
    enum cuda_attn_kernel attn; /* a tensor-core kernel only where cuda_attn_tc_fits */
    uint64_t kv_scales;         /* Q8_0: cuda_kv_values_bytes of the layer; 0 for F32 and F16 */
};

/* 1 for the KV types stored as one byte an element with an f16 scale per 32 (CUDA_Q8_GROUP) elements of a
 * head vector, the scales after the layer's values: Q8_0 (int8 values) and FP8 (e4m3 values). */
static inline int cuda_kv_grouped(enum kv_type t)
{
    return t == KV_TYPE_Q8_0 || t == KV_TYPE_FP8;
}

/* Bytes of the values of one layer (K or V) of n_vec head vectors (n_blocks * n_head_kv * block_size) of
 * head_dim elements of type t: 4 (F32), 2 (F16) or 1 (Q8_0, FP8: the values, without the scales) each. */
static inline uint64_t cuda_kv_values_bytes(uint64_t n_vec, int32_t head_dim, enum kv_type t)
{
    return n_vec * (uint64_t)head_dim * (t == KV_TYPE_F32 ? 4u : t == KV_TYPE_F16 ? 2u : 1u);
}

/* Bytes of one layer (K or V): the values, and for Q8_0 the f16 scales after them (2 bytes per 32 elements:
 * 34 bytes per 32 elements, as model_kv_bytes_per_token counts), rounded up to a multiple of 16 bytes so
 * that every layer starts 16-byte aligned (the attention reads 16-byte vectors; F32 and F16 layers are
 * multiples of 16 already, head_dim being a multiple of 8). */
static inline uint64_t cuda_kv_layer_bytes(uint64_t n_vec, int32_t head_dim, enum kv_type t)
{
    const uint64_t n = cuda_kv_values_bytes(n_vec, head_dim, t);
    return cuda_kv_grouped(t) ? (n + n / 16 + 15) / 16 * 16 : n;
}

/* Whether the tensor-core kernel handles this head_dim and KV type (f16, Q8_0 or FP8 KV, head_dim 64 or 128). */
int cuda_attn_tc_fits(int32_t head_dim, enum kv_type t);
/* The kernel for a KV pool: the tensor-core kernel where it fits and the GEMM inputs are BF16 (act_bf16:
 * its f16 rounding of q and of the probabilities is then below the rounding of its BF16 output), else the
 * CUDA-core kernel (F32 models keep the exact path). NIGHTSHIFT_CUDA_ATTN=cores|tc|tc-lds overrides the
 * choice where the kernel fits (read once). */
enum cuda_attn_kernel cuda_attn_choose(int32_t head_dim, enum kv_type t, int act_bf16);
const char *cuda_attn_kernel_name(enum cuda_attn_kernel k);

/* Rows per attention item for a GQA group size and kernel: max(1, CUDA_ATT_ITEM_QUERIES / group) for the
 * CUDA-core kernel (queries per item <= CUDA_ATT_QUERIES, as load refuses larger groups), max(1,
 * CUDA_TC_QUERIES / group) for the tensor-core kernels. */
int32_t cuda_attn_rows(int32_t group, enum cuda_attn_kernel k);

/* Plans the attention items of a batch (host). rows: n_rows positions pos and sequences seq (rows of a
 * sequence contiguous); per: rows per item at most (cuda_attn_rows). items must hold cuda_attn_max_items()
 * and come out in launch groups: whole items (longest first), split items of several rows, split items of one
 * row (*n_lone_items of them, last). A sequence of at most CUDA_ATT_LONE_ROWS rows in the step (decode, drafts
 * included) past its first chunk is split row by row, an item per row and chunk, whatever per is; else one
 * whose rows fit one item is split into its chunks when it has more than one (an item of its rows per
 * chunk). part_off (n_rows) and split_rows (n_rows) are filled; max_parts bounds the
 * partial slots (sum over split rows of pos / CUDA_ATT_CHUNK + 1): rows that would pass it are not split.
 * Returns the number of items; *n_parts, *n_split_rows and *max_item_rows (rows of the largest item) out. */
int64_t cuda_attn_plan(int32_t n_rows, const int32_t *pos, const int32_t *seq, int32_t per, int64_t max_parts,
                       struct cuda_attn_item *items, int32_t *part_off, int32_t *split_rows, int64_t *n_parts,
                       int32_t *n_split_rows, int32_t *max_item_rows, int32_t *n_lone_items);
/* Items cuda_attn_plan can produce for n_rows rows and max_parts partial slots, at most. */
int64_t cuda_attn_max_items(int32_t n_rows, int64_t max_parts);

/* ---- launchers ---- */

/* y (n_rows, n_out) = x (n_rows, n_in) * w^T as y_type (F32, or BF16: the F32 sums rounded once), w (n_out,
 * n_in) row-major BF16 (bf16 = 1; x BF16 too) or F32: cuBLAS with FP32 accumulation, or for one row of BF16
 * with n_in % 8 == 0 cuda_gemv.cu's kernel (unless NIGHTSHIFT_CUDA_GEMV=off). */
int cuda_matmul(cudaStream_t st, cublasHandle_t blas, const void *w, int bf16, const void *x, int32_t n_rows,
                int32_t n_in, int32_t n_out, void *y, enum cuda_act y_type, struct err *e);
/* 1 when NIGHTSHIFT_CUDA_GEMV=off (read once): every product by cuBLAS. */
int cuda_gemv_off(void);

/* The input of a fused GEMV: the kernel that would make the GEMV's input row, run by every block of the GEMV
 * itself, into its shared memory (cuda_launch_gemv_fused). */
enum cuda_gemv_in_kind {
    CUDA_GEMV_IN_NORM,   /* cuda_launch_rmsnorm for one row, with the residual add */
    CUDA_GEMV_IN_SWIGLU, /* cuda_launch_swiglu for one row */
};
struct cuda_gemv_in {
    enum cuda_gemv_in_kind kind;
    /* NORM: the row r = rows ? rows[0] : 0 of x (., n) f32, plus that of add (NULL: none), normalized with the
     * weights w (n) and eps */
    const float *x, *add, *w;
    const int32_t *rows;
    float eps;
    float *x_out; /* NORM: (n) the row's x + add (x without add), written by one block; NULL: not kept; not x, add */
    const void *gu; /* SWIGLU: (2 n) gate, then up, as gu_type */
    enum cuda_act gu_type;
};
static inline struct cuda_gemv_in cuda_gemv_norm(const float *x, const float *add, const float *w, const int32_t *rows,
                                                  float eps, float *x_out)
{
    return {CUDA_GEMV_IN_NORM, x, add, w, rows, eps, x_out, NULL, CUDA_ACT_F32};
}
static inline struct cuda_gemv_in cuda_gemv_swiglu(const void *gu, enum cuda_act gu_type)
{
    return {CUDA_GEMV_IN_SWIGLU, NULL, NULL, NULL, NULL, 0.0f, NULL, gu, gu_type};
}
/* y (n_out) = W act as y_type, W (n_out, n_in) BF16 (scale NULL) or e4m3 with its row scales (n_out), act
 * the BF16 row that `in` describes: bit for bit cuda_launch_rmsnorm or cuda_launch_swiglu (one row, BF16
 * output) followed by cuda_launch_gemv, in one kernel; for NORM, also x_out. Needs
 * cuda_gemv_fused_fits(in->kind, n_in), for e4m3 n_in % 16 == 0, and for SWIGLU gu BF16. */
int cuda_launch_gemv_fused(cudaStream_t st, const void *W, const float *scale, int32_t n_in, int32_t n_out,
                           const struct cuda_gemv_in *in, void *y, enum cuda_act y_type, struct err *e);
/* y (n_out) = W x as y_type for one BF16 row x (n_in): W BF16 (scale NULL; n_in % 8 == 0) or e4m3 with its row
 * scales (n_in % 16 == 0), by cuda_gemv.cu's kernel (W8A16 for e4m3: x is not quantized). */
int cuda_launch_gemv(cudaStream_t st, const void *w, const float *scale, const void *x, int32_t n_in, int32_t n_out,
                     void *y, enum cuda_act y_type, struct err *e);

/* ---- FP8 (cuda_fp8.cu: the format and the product's arithmetic) */

/* q (n_rows, n) e4m3 and scale (n_rows) f32 = the rows of in (n_rows, n) BF16 or F32, each with its own scale
 * amax / 448; n % 8 == 0. A row's result depends on that row alone. */
int cuda_launch_fp8_rows(cudaStream_t st, const void *in, enum cuda_act in_type, int64_t n_rows, int32_t n,
                         uint8_t *q, float *scale, struct err *e);
/* The same bytes and scales as cuda_launch_rmsnorm (BF16 output) or cuda_launch_swiglu (BF16 gu, BF16
 * output) followed by cuda_launch_fp8_rows, in one kernel: the input of an FP8 GEMM made and quantized in one
 * pass (RMSNorm: n % 8 == 0 and n <= 16384, cuda_fp8_norm_fits; the residual add written back as there). */
int cuda_launch_rmsnorm_fp8(cudaStream_t st, float *x, const float *add, const float *w, const int32_t *rows,
                            int32_t n_out, int32_t n, float eps, uint8_t *q, float *scale, struct err *e);
int cuda_fp8_norm_fits(int32_t n);
int cuda_launch_swiglu_fp8(cudaStream_t st, const void *gu, int32_t n_rows, int32_t n_ff, uint8_t *q, float *scale,
                           struct err *e);
/* cuBLASLt's state for FP8 products: a handle, the descriptor and the plans of the shapes seen, using the
 * caller's workspace ws (ws_bytes, device memory that outlives it; one stream at a time). */
struct cuda_lt;
int cuda_lt_init(struct cuda_lt **lt, void *ws, size_t ws_bytes, struct err *e);
void cuda_lt_free(struct cuda_lt *lt);
/* y (n_rows, n_out) as y_type = (x w^T) scaled: w (n_out, n_in) e4m3 with w_scale (n_out), x (n_rows, n_in)
 * e4m3 with x_scale (n_rows); y[r][o] = x_scale[r] w_scale[o] sum_k x[r][k] w[o][k] (f32 accumulation).
 * n_in % 16 == 0; pointers 16-byte aligned. */
int cuda_matmul_fp8(cudaStream_t st, struct cuda_lt *lt, const uint8_t *w, const float *w_scale, const uint8_t *x,
                    const float *x_scale, int32_t n_rows, int32_t n_in, int32_t n_out, void *y, enum cuda_act y_type,
                    struct err *e);
/* 1 if cuda_launch_gemv_fused takes inputs of this kind of n_in (n_in % 8 == 0; at most 8192 for NORM, 16384
 * for SWIGLU) and the GEMV is not off. */
int cuda_gemv_fused_fits(enum cuda_gemv_in_kind kind, int32_t n_in);


/* Weights at load (cuda_dequant.cu): dst (n_rows, n_in) BF16 bits, row-major, = the n_rows rows at src of
 * GGUF type t (ggml block layouts; row r at src + r * gguf_row_bytes(t, n_in), n_in a whole number of
 * blocks). Bit for bit what the host gives (quant_dequantize_row, then quant_f32_to_bf16) wherever the
 * blocks' f16 scales are finite (the file's top comment says what differs otherwise). src and dst are
 * device memory; src must stay unchanged until the kernel has run (stream order). t must pass
 * cuda_dequant_supported: the types whose row of the table of types (quant.c) has gpu_dequant set (BF16 is
 * copied, not converted). */
int cuda_launch_dequant(cudaStream_t st, enum gguf_dtype t, const void *src, int64_t n_rows, int64_t n_in,
                        uint16_t *dst, struct err *e);
int cuda_dequant_supported(enum gguf_dtype t);

/* x (n_rows, n) f32 = the rows tokens[r] of the embedding table (n_vocab, n), BF16 (bf16 = 1) or F32. */
int cuda_launch_embed(cudaStream_t st, const void *table, int bf16, const int32_t *tokens, int32_t n_rows, int32_t n,
                      float *x, struct err *e);
/* cs (n_rows, n_rot / 2, 2) = cos, sin of pos[r] * inv_freq[i] (computed in double, like the cpu backend). */
int cuda_launch_rope_table(cudaStream_t st, const int32_t *pos, int32_t n_rows, const double *inv_freq, int32_t n_rot,
                           float *cs, struct err *e);
/* For output row i (i < n_out), input row r = rows ? rows[i] : i: [x[r] += add[r] (written back)];
 * out[i] = rmsnorm(x[r]) * w as `out_type`. x, add: (., n) f32; out (n_out, n). */
int cuda_launch_rmsnorm(cudaStream_t st, float *x, const float *add, const float *w, const int32_t *rows,
                        int32_t n_out, int32_t n, float eps, void *out, enum cuda_act out_type, struct err *e);
/* The q/k/v epilogue of a layer on qkv (n_rows, (n_head + 2 n_head_kv) * head_dim) f32, heads in that
 * order: + bias (may be NULL), qwen3 per-head RMSNorm of q and k (q_norm/k_norm may be NULL), RoPE of q
 * and k with cs; q is written back in place, K and V go to their slots of this layer's pool (k_layer,
 * v_layer) through the sequences' block tables: rounded to f16, or for Q8_0 quantized per 32 elements bit
 * for bit as quant_quantize_row (GGUF_DTYPE_Q8_0) would from the same f32 values (cuda_q8.cuh). Q8_0 with
 * head_dim % 32 != 0 is refused (an error, nothing launched). */
int cuda_launch_qkv(cudaStream_t st, const struct cuda_attn_geom *g, const struct cuda_batch_dev *b, float *qkv,
                    const float *bias, const float *q_norm, const float *k_norm, const float *cs, void *k_layer,
                    void *v_layer, struct err *e);
/* Attention of the planned items with the kernel g->attn: q from qkv (n_rows, qkv_stride) f32; whole
 * items write out (n_rows, n_head * head_dim) as out_type; split items write partials acc (n_parts,
 * n_head, head_dim) and ml (n_parts, n_head, 2). Then cuda_launch_attn_combine for the split rows. The
 * tensor-core kernel runs split lone rows by its split kernel on split_st (st for one stream). The
 * tensor-core kernel also reads the K/V of positions past a row's own (up to the largest position of its
 * item, masked to probability 0): every position up to a sequence's largest row in the step must hold
 * finite K/V (the engine writes them in order; a NaN there would leak through 0 * NaN). */
int cuda_launch_attn(cudaStream_t st, cudaStream_t split_st, const struct cuda_attn_geom *g,
                     const struct cuda_batch_dev *b, const float *qkv, int32_t qkv_stride, const void *k_layer,
                     const void *v_layer, void *out, enum cuda_act out_type, float *part_acc, float *part_ml,
                     struct err *e);
/* 1 if cuda_launch_attn runs this batch as two kernels, the items kernel and the split kernel (whose lone rows
 * then go on split_st; the caller orders split_st after the K/V writes and the combine after it). */
int cuda_attn_tc_apart(const struct cuda_attn_geom *g, const struct cuda_batch_dev *b);
int cuda_launch_attn_combine(cudaStream_t st, const struct cuda_attn_geom *g, const struct cuda_batch_dev *b,
                             const float *part_acc, const float *part_ml, void *out, enum cuda_act out_type,
                             struct err *e);

/* The sample op's rows as the kernel reads them (cuda_sample.cu): mode, edits (struct logit_edit, 16 bytes
 * each: edits[edit0 .. edit0 + n_edits)), and a sampled row's filters and uniform. */
enum cuda_draw_mode {
    CUDA_DRAW_COPY = 0,     /* unedited logits to the host */
    CUDA_DRAW_GREEDY = 1,   /* edit, argmax */
    CUDA_DRAW_SAMPLE = 2,   /* edit, sampler_draw's steps */
    CUDA_DRAW_LOGPROBS = 3, /* nothing drawn: the logprobs of its token (cuda_lp_row.token) only */
};
struct cuda_draw_row {
    int32_t mode, edit0, n_edits, top_k;
    float temperature, top_p, min_p, u;
};
/* The kernel's mode for a sample_row's (backend.h). */
static inline int32_t cuda_draw_mode_of(enum sample_mode m)
{
    return m == SAMPLE_HOST     ? CUDA_DRAW_COPY
           : m == SAMPLE_GREEDY ? CUDA_DRAW_GREEDY
           : m == SAMPLE_DRAW   ? CUDA_DRAW_SAMPLE
                                : CUDA_DRAW_LOGPROBS;
}
/* The kernel's row for r with this mode, its edits from edit0 (none for a copied row). */
static inline struct cuda_draw_row cuda_draw_row_of(const struct sample_row *r, int32_t mode, int32_t edit0)
{
    const int32_t ne = mode == CUDA_DRAW_GREEDY || mode == CUDA_DRAW_SAMPLE ? r->n_edits : 0;
    return {mode, edit0, ne, r->top_k, r->temperature, r->top_p, r->min_p, r->u};
}
/* Logprobs where the logits are (cuda_logprob.cu; backend.h's formula): a row of the sample op that asks for
 * them has a cuda_lp_row, and its output is 1 + n_top pairs: pairs[at] its token's, pairs[at + 1 ..] the
 * alternatives best first; only those cross the bus. */
struct cuda_lp_row {
    int32_t n_top; /* -1: no logprobs; else its alternatives, at most min(SAMPLE_MAX_TOP_LOGPROBS, n_ids) */
    int32_t at;    /* its first pair */
    int32_t token; /* CUDA_DRAW_LOGPROBS: the token whose logprob is wanted */
    int32_t pad;
};
struct cuda_lp_pair {
    int32_t token, pad;
    double logprob;
};
struct cuda_lp_norm { /* a row's normalizer: logprob(t) = ((double)l[t] - max) - log_sum */
    float max;
    int32_t pad;
    double log_sum;
};
/* The logprob outputs of the sample op's kernels (device pointers; lp == NULL: no row asks). */
struct cuda_sample_lp {
    const struct cuda_lp_row *rows; /* (n) */
    struct cuda_lp_pair *pairs;     /* (sum of 1 + n_top over rows with n_top >= 0) */
    struct cuda_lp_norm *norms;     /* (n) */
};
/* The draws of n logit rows of logits (n, n_vocab), in place: tokens[i] = row i's token over ids [0, n_ids)
 * (a CUDA_DRAW_LOGPROBS row's: its lp token), or -1 for a row whose logits go to the host, unedited
 * (CUDA_DRAW_COPY, or a draw declined: its edits undone from saved, one float per edit). One block a row;
 * cuda_sample.cu says how each draw follows the host sampler. With lp: after cuda_launch_logprobs on the same
 * logits, the token's pair of every row it resolved with n_top >= 0, from the row's raw logit and its norm.
 */
int cuda_launch_sample(cudaStream_t st, float *logits, int32_t n_vocab, int32_t n_ids,
                       const struct cuda_draw_row *rows, const void *edits, float *saved, int32_t n,
                       int32_t *tokens, const struct cuda_sample_lp *lp, struct err *e);
int cuda_sample_init(struct err *e);
/* What the op sample expresses (backend.h's struct sample_caps): every sampler field but masks, top_k up to
 * the candidates the draw sorts, logprobs with up to SAMPLE_MAX_TOP_LOGPROBS alternatives. */
void cuda_sample_caps(struct sample_caps *out);
/* The alternatives' pairs and norms of every row of lp->rows (n) with n_top >= 0, from logits (n, n_vocab) as
 * the forward left them: max and log-sum-exp over all n_vocab values, the n_top best of ids [0, n_ids) by
 * (logit desc, id asc, NaN last), in one pass over the row; one block a row. Before cuda_launch_sample (which
 * edits). */
int cuda_launch_logprobs(cudaStream_t st, const float *logits, int32_t n_vocab, int32_t n_ids,
                         const struct cuda_sample_lp *lp, int32_t n, struct err *e);
/* The request of a sample_row (n_top -1 without logprobs or for a row copied to the host), its pairs from at.
 */
static inline struct cuda_lp_row cuda_lp_row_of(const struct sample_row *r, int32_t mode, int32_t n_ids,
                                                int32_t at)
{
    int32_t k = r->top_logprobs < 0 ? 0 : r->top_logprobs;
    if (k > SAMPLE_MAX_TOP_LOGPROBS) k = SAMPLE_MAX_TOP_LOGPROBS;
    if (k > n_ids) k = n_ids;
    return {mode != CUDA_DRAW_COPY && r->logprobs ? k : -1, at, r->token, 0};
}
/* A row's pairs (1 + n_top from p) as the op's output. */
static inline void cuda_lp_unpack(const struct cuda_lp_pair *p, int32_t n_top, struct sample_logprobs *out)
{
    out->tok = {p[0].token, p[0].logprob};
    out->n_top = n_top;
    for (int32_t j = 0; j < n_top; j++)
        out->top[j] = {p[1 + j].token, p[1 + j].logprob};
}
/* out (n_rows, n_ff) as out_type = silu(gu[:, :n_ff]) * gu[:, n_ff:] (in f32); gu (n_rows, 2 n_ff) as gu_type. */
int cuda_launch_swiglu(cudaStream_t st, const void *gu, enum cuda_act gu_type, int32_t n_rows, int32_t n_ff, void *out,
                       enum cuda_act out_type, struct err *e);
/* Raises the attention kernels' shared-memory limit (once per process and device; idempotent). */
int cuda_kernels_init(struct err *e);

#endif
