/* cpu_kernels — the CPU backend's inner loops (private to src/backend/): dot products of one weight row
 * with a few activation rows, per weight type, in a plain scalar reference version and an AVX2/FMA
 * version; the quantization of activation rows to 8-bit blocks; and the matmul driver that tiles weight
 * rows over the thread pool.
 *
 * Batch invariance: every dot product of a weight row with an activation row runs the same sequence of
 * floating-point operations whatever the other activation rows handled in the same call (the kernels
 * take up to CPU_DOT_MAX_X rows only to load and decode each weight block once; each row has its own
 * accumulators, reduced in a fixed order that depends only on the row length).
 */
#ifndef NS_BACKEND_CPU_KERNELS_H
#define NS_BACKEND_CPU_KERNELS_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/threads.h"

#define CPU_QK 32       /* activation quantization block */
#define CPU_DOT_MAX_X 4 /* activation rows per kernel call */

/* One block of an activation row quantized for the integer dot products: x ~= d * q, with d = amax/127
 * (round to nearest even), and s = d * sum(q) (used by Q4_1's offset term). 40 bytes. */
struct cpu_q8_block {
    float d;
    float s;
    int8_t q[CPU_QK];
};

/* n % CPU_QK == 0. Deterministic per row (plain C, round-to-nearest-even). */
void cpu_quantize_row_q8(const float *x, struct cpu_q8_block *y, int64_t n);

/* 1 if weights of type t are multiplied with q8-quantized activations (Q8_0, Q4_0, Q4_1); 0 if with f32
 * activations (F32, F16, BF16). */
int cpu_type_uses_q8(enum gguf_dtype t);

/* out[i] = dot(w (n elements of the weight type), x_i) for i < n_x <= CPU_DOT_MAX_X, where x_i starts at
 * (const char *)x + i * x_stride bytes and is n floats (f32-activation types) or n / 32 cpu_q8_blocks. */
typedef void (*cpu_dot_fn)(int64_t n, const void *w, const void *x, int64_t x_stride, int n_x, float *out);

enum cpu_kernel_variant {
    CPU_KERNEL_SCALAR, /* plain C reference */
    CPU_KERNEL_AVX2,   /* AVX2/FMA/F16C (compiled in with the Makefile's default flags) */
    CPU_KERNEL_VNNI    /* AVX2 + AVX-VNNI for the integer kernels, when the CPU has it (run-time check) */
};

/* y[i * y_stride + o] = dot(weight row o, x_i) for o < n_w (weight rows w_stride bytes apart), i < n_x <=
 * CPU_DOT_MAX_X: the same arithmetic per (o, i) as cpu_dot_fn, in one call per tile. */
typedef void (*cpu_tile_fn)(int64_t n, const void *w, int64_t w_stride, int n_w, const void *x, int64_t x_stride,
                            int n_x, float *y, int64_t y_stride);

struct cpu_kernel {
    cpu_dot_fn dot;
    cpu_tile_fn tile;
};

/* The fastest available kernels for a type (what cpu_matmul uses); NULLs for an unsupported type. */
struct cpu_kernel cpu_kernel_best(enum gguf_dtype t);

/* NULL for a type the backend does not compute or a variant this build/CPU lacks. The AVX2 and VNNI
 * variants give bit-identical results (same exact integer lane sums, same float code). */
cpu_dot_fn cpu_dot_variant(enum gguf_dtype t, enum cpu_kernel_variant v);
cpu_dot_fn cpu_dot_scalar(enum gguf_dtype t);
/* The fastest available variant; what cpu_matmul uses. */
cpu_dot_fn cpu_dot_simd(enum gguf_dtype t);

/* One matmul of a step: y (n_rows, w->ne[1]) = x (n_rows, w->ne[0]) * w^T. */
struct cpu_matmul_job {
    const struct model_weight *w;
    float *y; /* (n_rows, w->ne[1]) */
};

/* Runs n_jobs matmuls that share the input rows over the pool: x (n_rows, n_in) as floats and, when any
 * job's weight uses q8 activations, xq (n_rows, n_in / 32) quantized blocks (already filled). Threads split
 * weight rows in tiles; each tile is multiplied with every input row while it is in cache. */
void cpu_matmul(threads_pool *pool, const struct cpu_matmul_job *jobs, int n_jobs, const float *x,
                const struct cpu_q8_block *xq, int32_t n_rows);

#endif
