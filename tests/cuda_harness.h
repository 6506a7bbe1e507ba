/* cuda_harness — host-array wrappers around each kernel of the CUDA backend (for the device tests,
 * tests/test_cuda*.c) and the two ceilings a benchmark measures (a BF16 GEMM rate, a device-to-device copy
 * bandwidth: bench/bench_cuda.c). Plain C. Not part of libnightshift.a: the Makefile links its object into
 * the CUDA build's test_cuda* binaries and bench_cuda only.
 *
 * Every kernel wrapper uploads its inputs, fills its outputs on the device with NaN first (poison: an
 * element the kernel does not write comes back NaN), runs the kernel alone on a fresh stream, and copies
 * the outputs back as f32 (BF16 / F16 outputs widened exactly). Device memory is freed before returning.
 * Built only with NS_CUDA. Returns 0, or -1 with the message in e.
 */
#ifndef NS_TESTS_CUDA_HARNESS_H
#define NS_TESTS_CUDA_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "backend/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x (n_rows, n) = rows tokens[r] of table (n_vocab, n): BF16 bits (bf16 = 1) or F32. */
int cuda_harness_embed(const void *table, int bf16, int32_t n_vocab, int32_t n, const int32_t *tokens, int32_t n_rows,
                       float *x, struct err *e);
/* cs (n_rows, n_rot / 2, 2): cos, sin of pos[r] * inv_freq[i]. */
int cuda_harness_rope_table(const int32_t *pos, int32_t n_rows, const double *inv_freq, int32_t n_rot, float *cs,
                            struct err *e);
/* x (n_x_rows, n) f32 in/out (x_inout), add (n_x_rows, n) or NULL; rows (n_out) or NULL (identity);
 * out (n_out, n) = rmsnorm(x[rows[i]] (+ add)) * w, computed as BF16 (out_bf16) or F32. */
int cuda_harness_rmsnorm(float *x_inout, int32_t n_x_rows, const float *add, const float *w, const int32_t *rows,
                         int32_t n_out, int32_t n, float eps, int out_bf16, float *out, struct err *e);
/* out (n_rows, n_ff) = silu(gu[:, :n_ff]) * gu[:, n_ff:] as BF16 (out_bf16) or F32. */
int cuda_harness_swiglu(const float *gu, int32_t n_rows, int32_t n_ff, int out_bf16, float *out, struct err *e);
/* y (n_rows, n_out) f32 = x (n_rows, n_in) w^T (n_out, n_in); w, x BF16 bits (bf16 = 1) or F32. */
int cuda_harness_gemm(const void *w, const void *x, int bf16, int32_t n_rows, int32_t n_in, int32_t n_out, float *y,
                      struct err *e);
/* A one-row product whose input a kernel makes (cuda_kernels.h, struct cuda_gemv_in): y (n_out) = act w^T,
 * w (n_out, n_in) BF16 bits, y F32 or rounded to BF16 (y_bf16), act the BF16 row of RMSNorm (swiglu 0: row
 * `row` of x (n_x_rows, n_in) f32, plus that of add (may be NULL), weights norm_w (n_in), eps) or of SwiGLU
 * (swiglu 1: gu (2 n_in) BF16 bits, gate then up). fused 1: cuda_launch_gemv_fused, x_out (n_in; norm only) =
 * its x_out; fused 0: the norm or SwiGLU kernel into act, then cuda_matmul, x_out = the row of x after the
 * norm's in-place add, and act (n_in; may be NULL) = that kernel's output. */
struct cuda_harness_gemv_in {
    int swiglu;
    const float *x, *add;
    int32_t n_x_rows, row;
    const float *norm_w;
    float eps;
    const uint16_t *gu;
    const float *w_scale; /* NULL: w is BF16 bits; else w is e4m3 bytes with these row scales (n_out) */
};
int cuda_harness_gemv_in(const struct cuda_harness_gemv_in *in, const void *w, int32_t n_in, int32_t n_out,
                         int fused, int y_bf16, float *y, float *x_out, float *act, struct err *e);
/* q (n_rows, n) e4m3 bytes and scale (n_rows) = cuda_launch_fp8_rows of in (n_rows, n), uploaded as BF16
 * (in_bf16: each value rounded by quant_f32_to_bf16 first) or F32; outputs poisoned first. */
int cuda_harness_fp8_rows(const float *in, int in_bf16, int64_t n_rows, int32_t n, uint8_t *q, float *scale,
                          struct err *e);
/* y (n_rows, n_out) f32 (or rounded to BF16: y_bf16) = cuda_matmul_fp8 of e4m3 w (n_out, n_in) with w_scale
 * (n_out) and e4m3 x (n_rows, n_in) with x_scale (n_rows). */
int cuda_harness_fp8_gemm(const uint8_t *w, const float *w_scale, const uint8_t *x, const float *x_scale,
                          int32_t n_rows, int32_t n_in, int32_t n_out, int y_bf16, float *y, struct err *e);
/* out (n_rows, n_in) BF16 bits = the rows at src (n_rows rows of gguf_row_bytes(t, n_in) bytes) of type t,
 * dequantized on the device (cuda_launch_dequant; out poisoned with 0xFFFF first). */
int cuda_harness_dequant(enum gguf_dtype t, const void *src, int64_t n_rows, int64_t n_in, uint16_t *out,
                         struct err *e);

/* One layer's attention setup: geometry, KV pool (n_blocks blocks, layout [block][kv head][slot][dim]),
 * and a batch (rows of a sequence contiguous). bt: all block tables concatenated, bt_off (n_seqs).
 * The wrappers take a pool layer as floats (pool_floats, in that layout) and pack it into the device's
 * bytes of kv_type (cuda_harness_pool_pack), or as those bytes (the _bytes variants). */
struct cuda_harness_attn {
    int32_t n_head, n_head_kv, head_dim, n_rot, rope_neox;
    float norm_eps;
    int32_t block_size, n_blocks;
    enum kv_type kv_type; /* F32, F16 or Q8_0 (head_dim % 32 == 0) */
    int32_t n_rows;
    const int32_t *pos, *seq; /* (n_rows) */
    int32_t n_seqs;
    const int32_t *bt_off, *bt;
    int32_t n_bt;
    int32_t kernel; /* attention kernel: 0 CUDA cores, 1 tensor cores, 2 tensor cores with plain shared
                       loads (enum cuda_attn_kernel; 1 and 2 need f16 or Q8_0 KV and head_dim 64 or
                       128) */
};
/* Floats of one layer's K (or V) pool of h. */
uint64_t cuda_harness_pool_floats(const struct cuda_harness_attn *h);
/* Bytes of one layer's K (or V) pool of h on the device (cuda_kv_layer_bytes): pool_floats values of 4
 * (F32), 2 (F16) or 1 byte (Q8_0, whose f16 scales follow at byte pool_floats: scale g covers values
 * [32 g, 32 g + 32)), rounded up to 16 bytes for Q8_0. */
uint64_t cuda_harness_pool_bytes(const struct cuda_harness_attn *h);
/* pool (pool_floats) -> bytes (pool_bytes) in h's KV type: F32 as is, F16 by quant_f32_to_f16, Q8_0 by
 * quant_quantize_row per 32 floats (padding zeroed); and back (F16 and Q8_0 read back exactly). Fail only
 * for Q8_0 with head_dim % 32 != 0. */
int cuda_harness_pool_pack(const struct cuda_harness_attn *h, const float *pool, void *bytes, struct err *e);
int cuda_harness_pool_unpack(const struct cuda_harness_attn *h, const void *bytes, float *pool, struct err *e);
/* The q/k/v epilogue: qkv (n_rows, (n_head + 2 n_head_kv) head_dim) in/out (q rotated in place); bias,
 * q_norm, k_norm may be NULL; cs from cuda_harness_rope_table. k_pool / v_pool (pool floats) are
 * uploaded (packed into the KV type), the kernel writes the rows' slots, and they come back unpacked. A
 * Q8_0 pool cannot carry NaN poison through the packing (a group of NaN packs to zeros): use _bytes. */
int cuda_harness_qkv(const struct cuda_harness_attn *h, float *qkv, const float *bias, const float *q_norm,
                     const float *k_norm, const float *cs, float *k_pool, float *v_pool, struct err *e);
/* The same on pools given as their device bytes (pool_bytes each): uploaded as they are, and what the
 * kernel left there comes back as it is (every byte it did not write unchanged). */
int cuda_harness_qkv_bytes(const struct cuda_harness_attn *h, float *qkv, const float *bias, const float *q_norm,
                           const float *k_norm, const float *cs, void *k_bytes, void *v_bytes, struct err *e);
/* The backend's attention plan of h's rows (cuda_attn_plan, partial slots unbounded): the number of items,
 * *n_lone (items of one split row) and *max_item_rows (rows of the largest item, which sets the CUDA-core
 * kernel's queries per warp for the whole launch). -1 on out of memory. */
int64_t cuda_harness_attn_plan(const struct cuda_harness_attn *h, int32_t *n_lone, int32_t *max_item_rows);
/* Attention (and the combine) over k_pool / v_pool (packed into the KV type): out (n_rows, n_head
 * head_dim) as BF16 (out_bf16) or F32. split: 0 = no item split; 1 = the backend's plan (decode rows
 * split into chunks, the split items by their own kernel where there is one); 2 = the same plan, every item
 * by the item kernel; *n_split_rows (may be NULL) says how many rows were split. */
int cuda_harness_attn(const struct cuda_harness_attn *h, const float *qkv, const float *k_pool, const float *v_pool,
                      int split, int out_bf16, float *out, int32_t *n_split_rows, struct err *e);

/* Ceilings, measured with CUDA events after warm-ups on random (not zero) data: the median rate of a
 * BF16 n x n x n GEMM through cuBLAS (FP32 accumulation), in TFLOP/s; and the median bandwidth of a
 * device-to-device copy of `bytes`, counting bytes read plus bytes written, in GB/s. */
/* The sample op's kernels (cuda_launch_logprobs when a row asks for logprobs, then cuda_launch_sample) on n
 * rows of logits (n, n_vocab), with rows as the op takes them; tokens (n) out: the row's token (drawn, or a
 * SAMPLE_LOGPROBS row's), or -1 for a row not resolved (SAMPLE_HOST, or declined); edited (n, n_vocab; may be
 * NULL): the logits after the kernels (a row drawn without logprobs edited, every other row as it was);
 * lp (n; NULL when no row asks): the logprobs of each resolved row with logprobs, the others untouched. */
int cuda_harness_sample(const float *logits, int32_t n, int32_t n_vocab, int32_t n_ids,
                        const struct sample_row *rows, int32_t *tokens, float *edited,
                        struct sample_logprobs *lp, struct err *e);
int cuda_harness_gemm_rate(int32_t n, int reps, double *tflops, struct err *e);
int cuda_harness_copy_rate(uint64_t bytes, int reps, double *gbs, struct err *e);

#ifdef __cplusplus
}
#endif

#endif
