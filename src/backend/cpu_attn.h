/* cpu_attn — the CPU backend's attention over the paged KV cache, and the vectorized exp it (and the
 * SwiGLU) use. Private to src/backend/.
 *
 * Work unit: an item = (up to cpu_attn_rows_per_item(group) consecutive rows of one sequence, one kv
 * head). It walks the sequence's block table in chunks of CPU_ATT_CHUNK positions (absolute multiples of
 * 32), reads each chunk's K (and later V) once — straight from the pool for F32/F16 (K is stored
 * transposed, so 8 positions of one dim are one vector), else converted to f32 once (Q8_0, odd sizes) —
 * and computes all its rows x query heads against it, vectorized over positions (scores) and over head
 * dims (V sums).
 *
 * Batch invariance (bit for bit): for one (row, query head) the arithmetic is fixed by the row's q, its
 * position and its sequence's KV alone, never by the other rows of the item, the item boundaries, the
 * thread or the batch:
 *   s[t]  = fma chain over d = 0..head_dim-1 of q[d] * k_t[d] (from 0), times c = scale * log2(e) (one
 *           float; scale = 1/sqrt(head_dim) unless the layer sets one), for t <= pos; positions > pos are
 *           -inf; with a sliding window W, positions <= pos - W are -inf too, and chunks wholly before
 *           the row's window are skipped (they would only add exact zeros); with a soft-cap C,
 *           s[t] = C * tanh((q.k * scale) / C) * log2(e) (tanhf per score);
 *   m     = max of s (8 lanes = t mod 8, then a fixed lane tree);
 *   p[t]  = 2^(s[t] - m) (cpu_exp2_softmax_row's polynomial; = e^((q.k)/sqrt(d) - max));
 *   sum   = 8 lane sums (t mod 8, in t order) then a fixed lane tree;
 *   A_j   = fma chain over t <= pos, t mod 4 = j, in t order, of p[t] * v_t (per dim);
 *   out   = ((A_0 + A_1) + (A_2 + A_3)) * (1 / sum).
 * K/V conversion to f32 is exact (f16 -> f32, q8_0 d * q with an 11-bit d and a 7-bit q), so it does not
 * matter which item converts a chunk. Only written KV enters the arithmetic: the general kernels never
 * load positions beyond the item's last row (zero-filled in the chunk buffer); the fast path loads K of
 * whole 16-position groups, and the scores of the slots past a row's position (unwritten ones included,
 * whatever their bits) are blended to -inf before the max, the exp and the sums, and their V is never
 * loaded. Positions between a row's own and the item's last row were written earlier in this step and
 * are masked out of that row's softmax (blend, not arithmetic).
 */
#ifndef NS_BACKEND_CPU_ATTN_H
#define NS_BACKEND_CPU_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"

#define CPU_ATT_CHUNK 32 /* positions per K/V chunk */
#define CPU_MAX_HEAD_DIM_ATT 1024 /* head_dim at most (the backend refuses larger at load) */
#define CPU_ATT_QUERIES 16 /* (rows x query heads) per item, at least (see cpu_attn_rows_per_item) */

/* One layer of the KV pool. Each of K and V is [block][kv_head][region], a region being block_size
 * vectors of vec_bytes (head_dim elements of `type`; Q8_0: head_dim / 32 blocks of {f16 d, int8 q[32]}),
 * at ((block * n_head_kv + kv_head) * block_size) * vec_bytes. Inside a region V is [slot][vec]; K is
 * [dim][slot] (transposed: element (d, slot) at (d * block_size + slot) * element bytes) for F32 and F16
 * (cpu_attn_k_transposed), [slot][vec] for Q8_0. */
struct cpu_kv_layer {
    const uint8_t *k, *v;
    enum kv_type type;
    int32_t block_size, n_head_kv, head_dim;
    uint64_t vec_bytes;
    /* gemma / phi3 (only the general kernels take a layer with any of these set) */
    int32_t window; /* sliding window: a row at position p sees positions > p - window; 0: all */
    float scale;    /* score scale; 0: 1 / sqrt(head_dim) */
    float softcap;  /* scores soft-capped to (-softcap, softcap); 0: not */
};

struct cpu_attn_item {
    int32_t row0, n_rows; /* rows row0 .. row0 + n_rows - 1: one sequence, consecutive positions */
    int32_t kvh;
    int32_t pad_;
    int64_t cost; /* estimated work, for balancing */
};

/* Rows per item: max(1, CPU_ATT_QUERIES / group). */
int32_t cpu_attn_rows_per_item(int32_t group);

/* Splits a (valid) step batch into items, n_head_kv per run tile; items must hold b->n_rows * n_head_kv.
 * Items come out sorted by decreasing cost. Returns the number of items; *max_pos_out = the largest
 * position + 1 of any row (what the scores scratch must hold). */
int64_t cpu_attn_plan(const struct step_batch *b, int32_t n_head_kv, int32_t group, struct cpu_attn_item *items,
                      int64_t *max_pos_out);

/* Groups items [0, n_items) into at most max_parts contiguous parts of similar cost; part i is items
 * [part_start[i], part_start[i + 1]). part_start must hold max_parts + 1. Returns the number of parts. */
int64_t cpu_attn_parts(const struct cpu_attn_item *items, int64_t n_items, int64_t max_parts, int64_t *part_start);

/* Floats of per-thread scratch for a step whose rows have positions < n_pos. */
size_t cpu_attn_scratch_floats(int32_t head_dim, int32_t group, int64_t n_pos);

/* Attention of items [0, n_items), one after the other (each prefetching the next): reads q rows (n_rows,
 * n_head * head_dim), writes the items' heads of out (same shape). scratch: cpu_attn_scratch_floats(head_dim,
 * group, n_pos) floats, 32-byte aligned, where every row of the items has pos < n_pos; it is laid out and
 * the path chosen once per call. */
void cpu_attn_run(const struct cpu_kv_layer *kv, const struct step_batch *b, const struct cpu_attn_item *items,
                  int64_t n_items, int32_t group, const float *q, float *out, float *scratch, int64_t n_pos);

/* Ways to run an item, all with the same bits: the general kernels (any layout), and the fast path
 * (cpu_attn_fast.h: F32/F16 KV, block_size a power of two >= 16, head_dim 8 in AVX2, 8 or a multiple of
 * 16 in AVX-512F; no window, scale or soft-cap). cpu_attn_run takes the fastest this CPU has (capped like
 * the matmul kernels by NIGHTSHIFT_CPU_KERNELS), falling back to the general one. */
enum cpu_attn_path { CPU_ATTN_GENERAL, CPU_ATTN_FAST_AVX2, CPU_ATTN_FAST_AVX512 };

/* One item by one path (for tests and bench/bench_attn.c): returns -1, having done nothing, when the path does not take
 * this layout or the build/CPU lacks it. */
int cpu_attn_item_run_path(enum cpu_attn_path path, const struct cpu_kv_layer *kv, const struct step_batch *b,
                           const struct cpu_attn_item *it, int32_t group, const float *q, float *out, float *scratch,
                           int64_t n_pos);

/* 1 if K of this type is stored transposed inside a region (see struct cpu_kv_layer). */
int cpu_attn_k_transposed(enum kv_type t);

/* y[i] = 2^x[i] for x[i] <= 0 by the softmax's polynomial (exactly 0 below -125, NaN stays NaN); each
 * result depends only on x[i]. For tests. */
void cpu_exp2_softmax_row(const float *x, float *y, int64_t n);

/* g[i] = g[i] / (1 + exp(-g[i])) * u[i] (SwiGLU: silu(gate) * up), exp as cpu_exp_row; each result
 * depends only on g[i] and u[i]. */
void cpu_swiglu_row(float *g, const float *u, int64_t n);

/* g[i] = gelu_tanh(g[i]) * u[i] (GeGLU) = g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))) * u, exp as
 * cpu_exp_row; each result depends only on g[i] and u[i]. */
void cpu_geglu_row(float *g, const float *u, int64_t n);

/* y[i] = exp(x[i]) for i < n (in place allowed), by the same 8-lane polynomial as attention's softmax:
 * results depend only on x[i] (never on n or i), relative error about 2e-7 (a couple of ulp); exactly 0
 * below -87.33 (and for -inf), +inf above 88.72. */
void cpu_exp_row(const float *x, float *y, int64_t n);

#endif
