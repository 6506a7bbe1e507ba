/* cpu_kernels — the CPU backend's inner loops (private to src/backend/): dot products of weight rows
 * with a few activation rows, per weight type, in a plain scalar reference version and SIMD versions
 * (AVX2/FMA; AVX-VNNI for the integer types and AVX-512F for the float types, chosen at run time); the
 * quantization of activation rows to 8-bit blocks; and the matmul driver that tiles weight rows over the
 * thread pool.
 *
 * Batch invariance: every dot product of a weight row with an activation row runs the same sequence of
 * floating-point operations whatever the other activation rows handled in the same call (the kernels
 * take up to max_x rows only to load and decode each weight block once; each row has its own
 * accumulators, reduced in a fixed order that depends only on the row length).
 *
 * Float weights (F32, F16, BF16): y = fma(w_k, x_k, y) for k = 0 .. n-1 from y = 0, one output per
 * vector lane, so the scalar, AVX2 and AVX-512 kernels give the same bits.
 */
#ifndef NS_BACKEND_CPU_KERNELS_H
#define NS_BACKEND_CPU_KERNELS_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/threads.h"

#define CPU_QK 32       /* activation quantization block */
#define CPU_DOT_MAX_X 4  /* activation rows per kernel call, except where a kernel's max_x says more */
#define CPU_TILE_MAX_X 8 /* the most rows any kernel takes per call */
#define CPU_PANEL 16    /* weight rows per panel */

/* Activations for the integer kernels. A row of n elements (n % 32 == 0) is nb = n / 32 blocks, each
 * quantized as x ~= d * q with d = amax / 127 (q rounded to nearest even, |q| <= 127) and s = d * sum(q)
 * (used by the offset term of Q4_0, Q4_1, Q5_0 and Q5_1), stored one after another: cpu_q8_row_bytes(n) =
 * nb * 40 bytes. */
struct cpu_q8_block {
    float d;
    float s;
    int8_t q[CPU_QK];
};

/* Bytes of one quantized activation row of n elements. */
int64_t cpu_q8_row_bytes(int64_t n);

/* Quantizes one row into the layout above. Deterministic per row; AVX2 where compiled in, with the same
 * bytes as the plain-C reference cpu_quantize_row_q8_ref (tests compare them). */
void cpu_quantize_row_q8(const float *x, void *y, int64_t n);
void cpu_quantize_row_q8_ref(const float *x, void *y, int64_t n);

/* Element i of a quantized activation row of n elements, dequantized (d * q): for tests. */
float cpu_q8_value(const void *row, int64_t n, int64_t i);


/* Repacking of whole matrices, what the backend does at load for every type it computes. The K-quants are
 * copied as they are (see cpu_kquant.h). The panel types: panels of CPU_PANEL rows; panel p holds rows
 * 16p .. 16p + 15 and starts at byte 16p * rb of the repacked matrix (rb = the source row bytes), so weight
 * row o's data "starts" at o * rb for every type when o is a multiple of 16. The last panel's rows past
 * n_out are zeros: the repacked matrix takes cpu_packed_rows(t, n_out) * rb bytes. Within a panel:
 *  - F32, F16, BF16: element k of row 16p + j at index k * 16 + j (elements of the weight type).
 *  - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: block after block (16 ggml blocks' bytes each), a block as f16 d[16]
 *    (row j's scale at j), then the f16 offsets m[16] (Q4_1, Q5_1), then Q5's 64-byte qh plane, then the
 *    quants as 64-byte lines, 4 bytes per row. Row j's bytes 4j .. 4j + 3 of line k hold its elements
 *    4k .. 4k + 3 (Q8_0: lines 0-7, int8) or, Q4 and Q5, its ggml qs bytes 4k .. 4k + 3 (lines 0-3: the
 *    low nibbles are elements 4k .. 4k + 3, the high ones 16 + 4k ..). Byte 4j + i of the qh plane holds
 *    in bit s the fifth bit of row j's element 4s + i (s < 4) or 16 + 4(s - 4) + i (s >= 4): the elements
 *    of byte i of line s's low nibbles (s < 4) or line s - 4's high nibbles.
 *    Q4_0: 288 bytes a block, Q4_1: 320, Q5_0: 352, Q5_1: 384, Q8_0: 544. */
int64_t cpu_packed_rows(enum gguf_dtype t, int64_t n_out);

/* 1 for the types repacked into panels of CPU_PANEL rows (all but the K-quants and cpu_iquant.h's types:
 * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): their dot reads an unpacked row, their tile a panel. */
int cpu_type_panels(enum gguf_dtype t);

/* Repacks rows [r0, r1) of a matrix of n_out rows of n_in elements (src: its row 0, rows rb bytes apart)
 * into dst (the repacked matrix's start). r0 is a multiple of CPU_PANEL; so is r1 unless r1 == n_out
 * (which also writes the padding rows). dst must not overlap src. */
void cpu_repack_rows(enum gguf_dtype t, const void *src, int64_t n_in, int64_t n_out, int64_t r0, int64_t r1,
                     void *dst);

/* The form of the activation rows a weight type is multiplied with. */
enum cpu_act {
    CPU_ACT_F32, /* floats (F32, F16, BF16) */
    CPU_ACT_Q8,  /* 32-element blocks of cpu_quantize_row_q8 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) */
    CPU_ACT_Q8K  /* 256-element blocks of cpu_quantize_row_q8k, cpu_kquant.h (Q2_K .. Q6_K, cpu_iquant.h's
                    256-element types) */
};
enum cpu_act cpu_type_act(enum gguf_dtype t);

/* 1 if weights of type t are multiplied with q8-quantized activations (cpu_type_act(t) == CPU_ACT_Q8). */
int cpu_type_uses_q8(enum gguf_dtype t);

/* out[i] = dot(w (n elements of the weight type, a row as the model file has it: the reference), x_i) for
 * i < n_x <= the kernel's max_x, where x_i starts at (const char *)x + i * x_stride bytes and is an
 * activation row in the type's form (cpu_type_act): n floats, or a row quantized by cpu_quantize_row_q8 or
 * cpu_quantize_row_q8k. */
typedef void (*cpu_dot_fn)(int64_t n, const void *w, const void *x, int64_t x_stride, int n_x, float *out);

enum cpu_kernel_variant {
    CPU_KERNEL_SCALAR, /* plain C reference */
    CPU_KERNEL_AVX2,   /* AVX2/FMA/F16C (compiled in with the Makefile's default flags) */
    CPU_KERNEL_VNNI,   /* AVX2 + AVX-VNNI for the integer kernels, when the CPU has it (run-time check) */
    CPU_KERNEL_AVX512  /* AVX-512F for the float kernels; for the integer ones AVX-512 VNNI/VL/BW, 8 rows per
                          call (512-bit vectors for the panel types, 256-bit for the others; run-time checks) */
};

/* y[i * y_stride + o] = dot(weight row o, x_i) for o < n_w (weight rows w_stride bytes apart; panel types:
 * w at a panel start, w_stride the source row bytes), i < n_x <= the kernel's max_x: the same arithmetic per
 * (o, i) as cpu_dot_fn, in one call per tile. */
typedef void (*cpu_tile_fn)(int64_t n, const void *w, int64_t w_stride, int n_w, const void *x, int64_t x_stride,
                            int n_x, float *y, int64_t y_stride);

struct cpu_kernel {
    cpu_dot_fn dot;
    cpu_tile_fn tile;
    int max_x; /* rows per call (n_x <= max_x) of dot and tile: CPU_DOT_MAX_X, or CPU_TILE_MAX_X for the
                  AVX-512 integer kernels, which have 32 vector registers for 8 rows' accumulators */
};

/* The fastest available kernels for a type (the K-quants' come from cpu_kquant_variant) (what cpu_matmul
 * uses), chosen once per process; NULLs for an unsupported type. The environment variable
 * NIGHTSHIFT_CPU_KERNELS=avx2 (plain AVX2 only) or =scalar caps the choice. */
struct cpu_kernel cpu_kernel_best(enum gguf_dtype t);

/* The weight types the CPU backend computes, as bits 1ull << type (its caps' weight_types): those with a
 * scalar kernel (which every faster variant falls back to) that the table of types also dequantizes (a
 * token's embedding row is read through quant_dequantize_row). Walks the table: O(types). */
uint64_t cpu_weight_types(void);

/* The most capable variant allowed: CPU_KERNEL_AVX512 unless NIGHTSHIFT_CPU_KERNELS says avx2 or scalar
 * (read once). The attention's fast paths follow it too. */
enum cpu_kernel_variant cpu_kernel_cap(void);

/* NULLs for a type the backend does not compute or a variant this build/CPU lacks (or that has no kernel
 * of this type). The variants give bit-identical results: integer AVX2 and VNNI the same exact lane sums
 * and float code; float scalar, AVX2 and AVX-512 the same per-output fma chains. */
struct cpu_kernel cpu_kernel_variant(enum gguf_dtype t, enum cpu_kernel_variant v);

/* One matmul of a step: y (n_rows, w->ne[1]) = x (n_rows, w->ne[0]) * w^T. */
struct cpu_matmul_job {
    const struct model_weight *w;
    float *y; /* (n_rows, w->ne[1]) */
};

/* (optional) Run by a matmul task right after it wrote y[r][o] of job `job` for rows [r0, r1) and outputs
 * [o0, o1) (paired: of jobs 0 and 1, reported as job 0): per-row work fused into the matmul's dispatch
 * (RoPE, KV stores, SwiGLU). It must only touch those rows x outputs (tasks run concurrently). */
typedef void (*cpu_matmul_epilogue)(void *arg, int job, int64_t o0, int64_t o1, int32_t r0, int32_t r1);

struct cpu_matmul_opts {
    int64_t tile_align[8]; /* per job: each task's outputs are a whole multiple of this (e.g. head_dim), 0: any */
    int paired;            /* jobs 0 and 1 have the same outputs and one task computes both (gate, up) */
    cpu_matmul_epilogue epilogue;
    void *epilogue_arg;
};

/* Runs n_jobs (<= 8) matmuls that share the input rows over the pool (pool NULL: inline on the calling
 * thread): x (n_rows, n_in) as floats and, when a job's weight type needs them (cpu_type_act), xq
 * (n_rows rows of cpu_q8_row_bytes(n_in)) and xk (n_rows rows of cpu_q8k_row_bytes(n_in)) quantized
 * (already filled; either may be NULL when no job reads it). Weights must be repacked (cpu_repack_rows); tiles
 * start at multiples of CPU_PANEL outputs. Tasks are (tile of weight rows, block of input rows): each tile
 * is multiplied with the block's rows while it is in cache; rows are split into blocks only when the tiles
 * alone are too few to keep the threads busy. Every output is computed by the same kernel code whatever the
 * split. opts (may be NULL): see struct cpu_matmul_opts. */
void cpu_matmul(threads_pool *pool, const struct cpu_matmul_job *jobs, int n_jobs, const float *x, const void *xq,
                const void *xk, int32_t n_rows, const struct cpu_matmul_opts *opts);

#endif
