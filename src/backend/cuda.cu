/* cuda — the CUDA backend: the Llama-family forward step (llama, qwen2 biases, qwen3 q/k norms) on one GPU.
 *
 * Invariants:
 *  - Weights: uploaded once at load, into device memory the backend owns (freed by free / a new load).
 *    Matrices are row-major (n_out, n_in) BF16, or F32 when the source is F32 (an exact FP32 GEMM path
 *    for small test models; a real model's F16/BF16/quantized matrices are BF16). Every type that
 *    quant.h can dequantize is accepted: BF16 (and F32 into an F32 matrix) is copied as it is; every other
 *    type goes up as its raw GGUF bytes and is dequantized to BF16 on the device (cuda_dequant.cu), bit for
 *    bit what the host's quant_dequantize_row + quant_f32_to_bf16 give — 2 bytes per weight on the device,
 *    said in the start-up line. q, k and v of a layer are one matrix (rows q, then k, then v), gate and up
 *    one matrix (rows gate, then up), so each is one GEMM; such a fused matrix is F32 only if all its parts
 *    are. With FP8 layers (c->layer_wtype, cuda_pick_wtype) every layer matrix whose rows are a multiple of
 *    16 is e4m3 with one f32 scale per row (cuda_fp8.cu), quantized on the device from those BF16 rows (or
 *    from the F32 / BF16 rows as they are); the embeddings and the head stay BF16 (or F32). Norms, biases
 *    and RoPE frequencies are F32 (the frequencies F64, as the cpu backend computes them). cuda_upload.cu
 *    does all of it.
 *  - KV pool: two device allocations (K, V), each n_layer layers of kv_layer_bytes. A layer holds the head
 *    vectors [block][kv_head][slot][head_dim] of f32, f16, q8_0's int8 or fp8's e4m3 values, and for those two
 *    after them
 *    the f16 scales [block][kv_head][slot][head_dim / 32] (one per 32 consecutive elements; head_dim must be
 *    a multiple of 32), the layer rounded up to 16 bytes: with N = n_blocks * n_head_kv * block_size,
 *    kv_layer_bytes = N * head_dim * 4 (f32), N * head_dim * 2 (f16), or (N * head_dim * 17 / 16) rounded up
 *    to a multiple of 16 (q8_0: 34 bytes per 32 elements, as model_kv_bytes_per_token counts; see
 *    cuda_kv_layer_bytes; fp8 the same). q8_0 is written bit for bit as the host's quant_quantize_row would
 *    (cuda_q8.cuh), fp8 by cuda_device.cuh's cuda_kv8 arithmetic; both read back exactly (q * scale in
 *    f32). A step writes K/V of each row (cuda_launch_qkv) before its attention reads positions <= the
 *    rows' own, so no slot is read before it is written. The attention kernel is chosen with the pool
 *    (cuda_attn_choose: tensor cores for f16, q8_0 and fp8 KV at head_dim 64/128 under BF16 or FP8
 *    weights, the exact CUDA-core kernel otherwise, always for f32) and kept while the pool lives, so a
 *    sequence's rows never switch kernels between steps.
 *  - A step: the batch (tokens, positions, sequences, block tables, attention plan) is packed into one
 *    pinned host buffer and uploaded with one asynchronous copy; everything then runs on the backend's
 *    stream (cuBLAS GEMMs with FP32 accumulation over all rows, F32 outputs but for gate/up, which SwiGLU reads
 *    as BF16 under BF16 weights; the kernels of cuda_kernels.cu), but for the split kernel of a step that also
 *    has whole attention items: it runs on the side stream (cuda_run_attn; NIGHTSHIFT_CUDA_SIDE=off keeps
 *    one stream), forked after the layer's K/V writes and joined before its combine; only the
 *    logit rows go through the output head. With a logits buffer, forward copies them back through a pinned
 *    buffer and returns after the stream is synchronized; without (the engine's draws on the device), it
 *    returns with the step in flight (pending) and the op sample enqueues the draws (cuda_sample.cu), copies
 *    the tokens (and any row for the host) back and synchronizes. A forward that finds a step still pending
 *    waits for it first, so every buffer is free again when a step is enqueued.
 *  - Scratch is sized for cap_rows rows (grows in steps of CUDA_RESERVE_ROWS, never shrinks; cap_logits and
 *    the batch buffers likewise); the attention partials hold max_parts chunk states, fixed at load. Every
 *    move of a buffer bumps gen, which invalidates the CUDA graphs of decode steps (cuda_graph.cu: decode
 *    steps of up to CUDA_GRAPH_ROWS rows replay a captured cuda_enqueue_step).
 *  - GEMMs: cuda_matmul (cuda_gemv.cu): cuBLAS, or a GEMV kernel of ours for one BF16 row. A step of one row
 *    (and the output head of one logit row) fuses the kernel that makes a BF16 GEMV's input into the GEMV
 *    (cuda_launch_gemv_fused: every block makes the row itself, bit for bit as the kernel would): the two
 *    norms of a layer into qkv and gate/up, SwiGLU into down, the output norm into the head; the residual
 *    stream then alternates between x and x_alt within a layer (cuda_run_layer), so a graph replays it with
 *    the same buffers. NIGHTSHIFT_CUDA_FUSE=off (read at init) keeps the kernels apart.
 *  - Determinism: no atomics anywhere; cuBLAS is bit-reproducible run to run for the same shapes on the
 *    same GPU (its documented default), so the same steps give the same logits. Batch invariance holds
 *    for every kernel of this backend (per-row arithmetic), but not necessarily for cuBLAS, whose kernel
 *    choice depends on the number of rows (tests/test_cuda.c measures it).
 * cuda_check() verifies the sizes (debug).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "backend/backend.h"
#include "gguf/quant.h"
#include "model/model.h"
#include "util/log.h"
}
#include "backend/cuda.h"
#include "backend/cuda_kernels.h"
#include "backend/cuda_ctx.h"

#define CUBLAS_TRY(call)                                                                                  \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) return cuda_fail(e, __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
    } while (0)

#define CUDA_BLAS_WORKSPACE (32u << 20) /* cuBLAS workspace bytes (ours, so cuBLAS allocates nothing) */
#define CUDA_PARTS_BYTES (64u << 20)    /* attention partials (split decode rows) at most */
#define CUDA_MAX_PARTS 65536
#define CUDA_RESERVE_ROWS 64            /* scratch and logit buffers grow in steps of this many rows */

/* 1 when the switch `name` is set to "off" in the environment. */
static int cuda_env_off(const char *name)
{
    const char *v = getenv(name);
    return v && !strcmp(v, "off");
}

/* Profile: the phase that just ended on the stream (no-op when the profile is off). */
void cuda_mark(struct cuda_ctx *c, enum cuda_prof phase)
{
    if (!c->prof_on || c->n_marks + 1 >= CUDA_PROF_MARKS) return;
    if (cudaEventRecord(c->prof_ev[c->n_marks + 1], c->st) != cudaSuccess) return;
    c->prof_phase[c->n_marks++] = (uint8_t)phase;
}

static int cuda_max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return (int)(m > c ? m : c);
}

double cuda_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---------------------------------------------------------------- probe / init */

extern "C" int backend_cuda_probe(char *why, size_t why_cap)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        snprintf(why, why_cap, "no CUDA device (%s)", cudaGetErrorString(rc));
        return 0;
    }
    if (n < 1) {
        snprintf(why, why_cap, "no CUDA device");
        return 0;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        snprintf(why, why_cap, "cannot read the properties of CUDA device 0");
        return 0;
    }
    if (p.major < 9) {
        snprintf(why, why_cap, "CUDA device 0 (%s) has compute capability %d.%d; this build needs 9.0 (sm_90)", p.name,
                 p.major, p.minor);
        return 0;
    }
    if (why_cap) why[0] = '\0';
    return 1;
}

/* ---------------------------------------------------------------- memory, scratch */

void cuda_free_ptr(void **p)
{
    if (*p) cudaFree(*p);
    *p = NULL;
}

static void cuda_io_free(struct cuda_io *io)
{
    cuda_free_ptr((void **)&io->d);
    if (io->h) cudaFreeHost(io->h);
    io->h = NULL;
    io->cap = 0;
}

/* Room for bytes in io (half as much again when it grows). */
int cuda_io_reserve(struct cuda_io *io, size_t bytes, struct err *e)
{
    if (bytes <= io->cap) return 0;
    bytes += bytes / 2;
    cuda_io_free(io);
    CU_TRY(cudaMalloc(&io->d, bytes));
    CU_TRY(cudaMallocHost(&io->h, bytes));
    io->cap = bytes;
    return 0;
}

static void cuda_free_scratch(struct cuda_ctx *c)
{
    c->gen++; /* graphs point into these buffers */
    cuda_free_ptr(&c->scratch);
    cuda_free_ptr((void **)&c->logits_d);
    if (c->logits_h) cudaFreeHost(c->logits_h);
    c->logits_h = NULL;
    cuda_io_free(&c->batch);
    cuda_io_free(&c->sample);
    c->cap_rows = c->cap_logits = 0;
}

/* Bytes of the step scratch for `rows` rows; carves the buffers when base is not NULL. */
static uint64_t cuda_layout_scratch(struct cuda_ctx *c, int32_t rows, char *base)
{
    const struct model_hparams *hp = &c->m->hp;
    const int64_t n_q = (int64_t)hp->n_head * hp->head_dim, n_kv = (int64_t)hp->n_head_kv * hp->head_dim;
    uint64_t off = 0;
#define CARVE(ptr, type, count)                                                                           \
    do {                                                                                                  \
        if (base) c->ptr = (type *)(base + off);                                                          \
        off += ((uint64_t)(count) * sizeof(type) + 255) & ~(uint64_t)255;                                 \
    } while (0)
    CARVE(x, float, (int64_t)rows * hp->n_embd);
    CARVE(tmp, float, (int64_t)rows * hp->n_embd);
    CARVE(x_alt, float, hp->n_embd);
    CARVE(qkv, float, (int64_t)rows * (n_q + 2 * n_kv));
    CARVE(gu, float, (int64_t)rows * 2 * hp->n_ff);
    CARVE(cs, float, (int64_t)rows * hp->n_rot + 2);
    CARVE(act, float, (int64_t)rows * cuda_max3(hp->n_embd, n_q, hp->n_ff));
    CARVE(act8, uint8_t, (int64_t)rows * cuda_max3(hp->n_embd, n_q, hp->n_ff));
    CARVE(act_scale, float, rows);
    CARVE(part_acc, float, c->max_parts * n_q);
    CARVE(part_ml, float, c->max_parts * hp->n_head * 2);
#undef CARVE
    return off;
}

static int cuda_reserve(struct cuda_ctx *c, int32_t rows, int32_t n_logits, struct err *e)
{
    /* in steps of CUDA_RESERVE_ROWS: a batch that grows a sequence at a time would otherwise reallocate (and
     * re-pin 0.5 MB a logit row) every step; that cost 5 s of a 106 s c256 bench (bench/NOTES.md 2026-12-02) */
    rows = (rows + CUDA_RESERVE_ROWS - 1) / CUDA_RESERVE_ROWS * CUDA_RESERVE_ROWS;
    n_logits = (n_logits + CUDA_RESERVE_ROWS - 1) / CUDA_RESERVE_ROWS * CUDA_RESERVE_ROWS;
    if (rows > c->cap_rows || n_logits > c->cap_logits) c->gen++; /* buffers move: graphs are stale */
    if (rows > c->cap_rows) {
        uint64_t n = cuda_layout_scratch(c, rows, NULL);
        cuda_free_ptr(&c->scratch);
        c->cap_rows = 0;
        CU_TRY(cudaMalloc(&c->scratch, n));
        c->cap_rows = rows;
        cuda_layout_scratch(c, rows, (char *)c->scratch);
    }
    if (n_logits > c->cap_logits) {
        const size_t n = (size_t)n_logits * (size_t)c->m->hp.n_vocab * sizeof(float);
        cuda_free_ptr((void **)&c->logits_d);
        if (c->logits_h) cudaFreeHost(c->logits_h);
        c->logits_h = NULL;
        c->cap_logits = 0;
        CU_TRY(cudaMalloc(&c->logits_d, n));
        CU_TRY(cudaMallocHost(&c->logits_h, n));
        c->cap_logits = n_logits;
    }
    return 0;
}

static int cuda_check(void *ctx, struct err *e)
{
    const struct cuda_ctx *c = (const struct cuda_ctx *)ctx;
    if (!c->m) return 0;
    const struct model_hparams *hp = &c->m->hp;
    if (!c->layers || !c->embd.d || !c->output.d || !c->output_norm) return err_set(e, "cuda_check: weights not bound");
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct cuda_layer *L = &c->layers[il];
        if (!L->qkv.d || !L->wo.d || !L->gate_up.d || !L->down.d || (L->qkv.type == CUDA_W_FP8) != !!L->qkv.scale ||
            (L->wo.type == CUDA_W_FP8) != !!L->wo.scale || (L->gate_up.type == CUDA_W_FP8) != !!L->gate_up.scale ||
            (L->down.type == CUDA_W_FP8) != !!L->down.scale ||
            L->qkv.n_out != (hp->n_head + 2 * hp->n_head_kv) * hp->head_dim || L->gate_up.n_out != 2 * hp->n_ff ||
            L->down.n_in != hp->n_ff || L->wo.n_out != hp->n_embd)
            return err_set(e, "cuda_check: layer %d matrices missing or of the wrong shape", (int)il);
    }
    if (c->cap_rows > 0 && !c->scratch) return err_set(e, "cuda_check: scratch missing");
    if (c->cap_logits > 0 && (!c->logits_d || !c->logits_h)) return err_set(e, "cuda_check: logits buffers missing");
    if (c->k_cache) {
        const uint64_t n_vec = (uint64_t)c->n_blocks * (uint64_t)c->block_size * (uint64_t)hp->n_head_kv;
        if (c->kv_layer_bytes != cuda_kv_layer_bytes(n_vec, hp->head_dim, c->kv_type) || c->kv_layer_bytes % 16 ||
            !c->v_cache)
            return err_set(e, "cuda_check: KV pool sizes inconsistent");
        if (cuda_kv_grouped(c->kv_type) && hp->head_dim % 32)
            return err_set(e, "cuda_check: %s KV pool with head_dim %d", model_kv_type_name(c->kv_type),
                           (int)hp->head_dim);
        if (c->attn != CUDA_ATTN_CORES && !cuda_attn_tc_fits(hp->head_dim, c->kv_type))
            return err_set(e, "cuda_check: tensor-core attention on a pool it does not fit");
    }
    return 0;
}

static void cuda_free_kv(struct cuda_ctx *c)
{
    c->gen++; /* graphs point into the pool */
    cuda_free_ptr(&c->k_cache);
    cuda_free_ptr(&c->v_cache);
    c->n_blocks = c->block_size = 0;
    c->kv_layer_bytes = 0;
}

/* Frees what a loaded model holds: back to the state after init. */
static void cuda_release(struct cuda_ctx *c)
{
    if (c->st) cudaStreamSynchronize(c->st);
    cuda_free_kv(c);
    cuda_free_scratch(c);
    cuda_free_weights(c);
    c->m = NULL;
}

static int cuda_load(void *ctx, const struct model *m, struct err *e)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    CU_TRY(cudaSetDevice(c->device));
    if (model_check(m, e)) return err_prefix(e, "cuda backend");
    if (m->hp.arch != MODEL_ARCH_LLAMA && m->hp.arch != MODEL_ARCH_QWEN2 && m->hp.arch != MODEL_ARCH_QWEN3)
        return err_set(e, "architecture %s is not supported by the cuda backend yet; use --backend cpu",
                       model_arch_name(m->hp.arch));
    const struct model_hparams *hp = &m->hp;
    if (hp->n_head / hp->n_head_kv > CUDA_ATT_QUERIES)
        return err_set(e, "cuda backend: %d query heads per kv head is more than %d", (int)(hp->n_head / hp->n_head_kv),
                       CUDA_ATT_QUERIES);
    if (hp->head_dim > CUDA_MAX_HEAD_DIM || hp->head_dim % 8)
        return err_set(e, "cuda backend: head dimension %d: the attention kernel needs a multiple of 8 up to %d",
                       (int)hp->head_dim, CUDA_MAX_HEAD_DIM);
    cuda_release(c);
    c->m = m;
    char why[256];
    c->layer_wtype = cuda_pick_wtype(c, m, why, sizeof why);
    const double t0 = cuda_now();
    if (cuda_upload_weights(c, e) || cuda_upload_rope(c, e)) {
        cuda_release(c);
        return -1;
    }
    /* the small uploads are cudaMemcpy on the legacy stream, which the steps' non-blocking stream does not wait
     * for (a pageable copy returns once staged): all of it lands before any step reads it */
    const cudaError_t synced = cudaDeviceSynchronize();
    if (synced != cudaSuccess) {
        cuda_release(c);
        return err_set(e, "cuda backend: uploading the weights: %s", cudaGetErrorString(synced));
    }
    const uint64_t part_bytes = (uint64_t)hp->n_head * ((uint64_t)hp->head_dim + 2) * sizeof(float);
    c->max_parts = (int64_t)(CUDA_PARTS_BYTES / part_bytes);
    if (c->max_parts > CUDA_MAX_PARTS) c->max_parts = CUDA_MAX_PARTS;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    int quantized = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        quantized |= L->wq.type != GGUF_DTYPE_F32 && L->wq.type != GGUF_DTYPE_F16 && L->wq.type != GGUF_DTYPE_BF16;
    }
    char what[256];
    cuda_describe_weights(c, quantized, what, sizeof what);
    log_info("cuda backend: %s: weights %.1f MiB on the device (%s; %s) in %.1f s; %.1f of %.1f GiB free",
             c->device_name, (double)c->weight_bytes / (1 << 20), what, why, cuda_now() - t0,
             (double)free_b / (1 << 30), (double)total_b / (1 << 30));
    return 0;
}

static int cuda_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size, enum kv_type t, struct err *e)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (!c->m) return err_set(e, "cuda backend: kv_alloc before load");
    CU_TRY(cudaSetDevice(c->device));
    const struct model_hparams *hp = &c->m->hp;
    if (n_blocks < 1 || block_size < 1 || (block_size & (block_size - 1)))
        return err_set(e, "cuda backend: bad KV pool %d blocks x %d tokens (a power of two)", (int)n_blocks,
                       (int)block_size);
    if ((unsigned)t >= KV_TYPE_N) return err_set(e, "cuda backend: unknown KV type %d", (int)t);
    if (cuda_kv_grouped(t) && hp->head_dim % 32 != 0)
        return err_set(e, "cuda backend: KV type %s needs a head dimension that is a multiple of 32 (this "
                          "model's is %d); use f16 or f32",
                       model_kv_type_name(t), (int)hp->head_dim);
    cudaStreamSynchronize(c->st);
    cuda_free_kv(c);
    const uint64_t layer = cuda_kv_layer_bytes((uint64_t)n_blocks * (uint64_t)block_size * (uint64_t)hp->n_head_kv,
                                               hp->head_dim, t);
    const uint64_t total = layer * (uint64_t)hp->n_layer;
    cudaError_t rc = cudaMalloc(&c->k_cache, total);
    if (rc == cudaSuccess) rc = cudaMalloc(&c->v_cache, total);
    if (rc != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        cuda_free_kv(c);
        return err_set(e,
                       "cuda backend: cannot allocate a KV pool of %.1f MiB (%d blocks x %d tokens, %s): %.1f MiB free",
                       2.0 * (double)total / (1 << 20), (int)n_blocks, (int)block_size, model_kv_type_name(t),
                       (double)free_b / (1 << 20));
    }
    c->kv_type = t;
    int act_bf16 = 1;
    for (int32_t il = 0; il < hp->n_layer; il++) act_bf16 &= c->layers[il].wo.type != CUDA_W_F32;
    c->attn = cuda_attn_choose(hp->head_dim, t, act_bf16);
    log_info("cuda backend: KV pool %.1f MiB (%d blocks x %d tokens, %s); attention on %s",
             2.0 * (double)total / (1 << 20), (int)n_blocks, (int)block_size, model_kv_type_name(t),
             cuda_attn_kernel_name(c->attn));
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    c->kv_layer_bytes = layer;
    return cuda_check(c, e);
}

static uint64_t cuda_scratch_bytes(void *ctx, int32_t max_rows)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (!c->m) return 0;
    /* step scratch, logits of every row (device and pinned host), the batch buffers (generous) */
    return cuda_layout_scratch(c, max_rows, NULL) + 2ull * (uint64_t)max_rows * (uint64_t)c->m->hp.n_vocab * 4 +
           CUDA_BLAS_WORKSPACE + (uint64_t)max_rows * 64 + (uint64_t)c->max_parts * 16;
}

/* ---------------------------------------------------------------- the step */

static int cuda_check_batch(const struct cuda_ctx *c, const struct step_batch *b, struct err *e)
{
    if (b->n_hidden > 0) return err_set(e, "cuda backend: no hidden-state output (caps.hidden_states is 0)");
    return backend_check_batch(b, c->m->hp.n_vocab, c->n_blocks, c->block_size, (int64_t)c->n_blocks * c->block_size,
                               e);
}

size_t cuda_align4(size_t n)
{
    return (n + 3) & ~(size_t)3;
}

/* Packs the batch and its attention plan into the pinned buffer, uploads it (async, two copies: the parts
 * up to the planned items, then the block tables) and fills bd with the device pointers. Layout (int32
 * units, each part 16-byte aligned): tokens, pos, seq, logit_rows, bt_off, part_off, split_rows, items (room
 * for cuda_attn_max_items), bt; so every pointer is a function of (n_rows, n_logits, n_seqs) and the
 * buffer's address, which the CUDA graphs of decode steps rely on (cuda_graph.cu). */
static int cuda_upload_batch(struct cuda_ctx *c, const struct step_batch *b, struct cuda_batch_dev *bd, struct err *e)
{
    const int32_t R = b->n_rows, group = c->m->hp.n_head / c->m->hp.n_head_kv;
    size_t n_bt = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) n_bt += (size_t)b->seqs[i].n_blocks;
    const size_t max_items = (size_t)cuda_attn_max_items(R, c->max_parts);
    size_t off[10];
    off[0] = 0;
    off[1] = off[0] + cuda_align4((size_t)R);             /* pos */
    off[2] = off[1] + cuda_align4((size_t)R);             /* seq */
    off[3] = off[2] + cuda_align4((size_t)R);             /* logit_rows */
    off[4] = off[3] + cuda_align4((size_t)b->n_logits);   /* bt_off */
    off[5] = off[4] + cuda_align4((size_t)b->n_seqs);     /* part_off */
    off[6] = off[5] + cuda_align4((size_t)R);             /* split_rows */
    off[7] = off[6] + cuda_align4((size_t)R);             /* items */
    off[8] = off[7] + 4 * max_items;                      /* bt */
    off[9] = off[8] + n_bt;
    if (cuda_io_reserve(&c->batch, off[9] * sizeof(int32_t), e)) return -1;
    int32_t *h = c->batch.h;
    memcpy(h + off[0], b->tokens, (size_t)R * 4);
    memcpy(h + off[1], b->pos, (size_t)R * 4);
    memcpy(h + off[2], b->seq, (size_t)R * 4);
    if (b->n_logits > 0) memcpy(h + off[3], b->logit_rows, (size_t)b->n_logits * 4);
    size_t k = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        h[off[4] + (size_t)i] = (int32_t)k;
        if (b->seqs[i].n_blocks > 0) memcpy(h + off[8] + k, b->seqs[i].block_table, (size_t)b->seqs[i].n_blocks * 4);
        k += (size_t)b->seqs[i].n_blocks;
    }
    int64_t n_parts = 0;
    int32_t n_split = 0, max_rows = 1, n_lone = 0;
    const int64_t n_items = cuda_attn_plan(R, b->pos, b->seq, cuda_attn_rows(group, c->attn), c->max_parts,
                                           (struct cuda_attn_item *)(h + off[7]), h + off[5], h + off[6], &n_parts,
                                           &n_split, &max_rows, &n_lone);
    const size_t used = off[7] + 4 * (size_t)n_items;
    CU_TRY(cudaMemcpyAsync(c->batch.d, h, used * sizeof(int32_t), cudaMemcpyHostToDevice, c->st));
    if (n_bt > 0)
        CU_TRY(cudaMemcpyAsync(c->batch.d + off[8], h + off[8], n_bt * sizeof(int32_t), cudaMemcpyHostToDevice, c->st));
    const int32_t *d = c->batch.d;
    *bd = (struct cuda_batch_dev){R, d + off[0], d + off[1], d + off[2], d + off[4], d + off[8], d + off[5], d + off[3],
                                  (const struct cuda_attn_item *)(d + off[7]), (int32_t)n_items, d + off[6], n_split,
                                  max_rows, n_lone};
    return 0;
}

/* y (n_rows, w->n_out) = x (n_rows, w->n_in) * w^T as y_type; x of w's type. Column-major view: y^T = W x^T. */
/* y (n_rows, w->n_out) = the FP8 product of w and the rows quantized in act8 / act_scale. */
static int cuda_gemm_q(struct cuda_ctx *c, const struct cuda_matrix *w, int32_t n_rows, void *y, enum cuda_act y_type,
                       struct err *e)
{
    return cuda_matmul_fp8(c->st, c->lt, (const uint8_t *)w->d, w->scale, c->act8, c->act_scale, n_rows, w->n_in,
                           w->n_out, y, y_type, e);
}

static int cuda_gemm(struct cuda_ctx *c, const struct cuda_matrix *w, const void *x, int32_t n_rows, void *y,
                     enum cuda_act y_type, struct err *e)
{
    if (w->type != CUDA_W_FP8)
        return cuda_matmul(c->st, c->blas, w->d, w->type == CUDA_W_BF16, x, n_rows, w->n_in, w->n_out, y, y_type, e);
    /* FP8 (x BF16): one row by the W8A16 GEMV; more quantized per row (act8), then cuBLASLt's W8A8 product */
    if (n_rows == 1 && !cuda_gemv_off())
        return cuda_launch_gemv(c->st, w->d, w->scale, x, w->n_in, w->n_out, y, y_type, e);
    if (cuda_launch_fp8_rows(c->st, x, CUDA_ACT_BF16, n_rows, w->n_in, c->act8, c->act_scale, e)) return -1;
    cuda_mark(c, CUDA_PROF_FP8);
    return cuda_gemm_q(c, w, n_rows, y, y_type, e);
}

/* The type of a matrix's input rows: F32 for an F32 matrix, BF16 for BF16 and FP8 (quantized where used). */
static enum cuda_act cuda_act_of(const struct cuda_matrix *w)
{
    return w->type == CUDA_W_F32 ? CUDA_ACT_F32 : CUDA_ACT_BF16;
}

/* Runs one launcher; on failure returns with the layer in the message; else marks the phase. */
#define CUDA_STEP(call, phase)                                                                            \
    do {                                                                                                  \
        if (call) return err_prefix(e, "layer %d", (int)il);                                              \
        cuda_mark(c, phase);                                                                              \
    } while (0)

/* A layer's attention into act, the split partials merged. Where the tensor-core kernels run both whole
 * items (prefill) and split lone rows (decode) in this step, the split kernel goes on the side stream,
 * forked after the K/V writes and joined before the combine: the decode kernel, bound by the KV bytes it
 * reads, runs beside the prefill kernel, bound by its instructions. The same kernels on the same inputs,
 * so the same bits. */
static int cuda_run_attn(struct cuda_ctx *c, const struct cuda_batch_dev *bd, const struct cuda_attn_geom *g,
                         int32_t qkv_stride, const void *k_layer, const void *v_layer, enum cuda_act out, struct err *e)
{
    const int fork = c->side && cuda_attn_tc_apart(g, bd);
    if (fork) {
        CU_TRY(cudaEventRecord(c->ev_fork, c->st));
        CU_TRY(cudaStreamWaitEvent(c->side, c->ev_fork, 0));
    }
    if (cuda_launch_attn(c->st, fork ? c->side : c->st, g, bd, c->qkv, qkv_stride, k_layer, v_layer, c->act, out,
                         c->part_acc, c->part_ml, e))
        return -1;
    if (fork) {
        CU_TRY(cudaEventRecord(c->ev_join, c->side));
        CU_TRY(cudaStreamWaitEvent(c->st, c->ev_join, 0));
    }
    return cuda_launch_attn_combine(c->st, g, bd, c->part_acc, c->part_ml, c->act, out, e);
}

/* Whether a product of w over n rows whose input `kind` makes runs fused (cuda_launch_gemv_fused). */
static int cuda_fuse(const struct cuda_ctx *c, const struct cuda_matrix *w, enum cuda_gemv_in_kind kind, int32_t n)
{
    return n == 1 && c->fuse_on && w->type != CUDA_W_F32 && cuda_gemv_fused_fits(kind, w->n_in);
}

/* y (n, w->n_out) = act w^T as y_type, act the n rows that `in` describes: fused, in one kernel; else in's
 * kernel into act (the profile's phase in_phase), then the GEMM. Unfused, a norm adds in place: in->x_out
 * must be in->x. */
static int cuda_gemm_in(struct cuda_ctx *c, int fused, const struct cuda_gemv_in *in, int32_t n,
                        const struct cuda_matrix *w, void *y, enum cuda_act y_type, enum cuda_prof in_phase,
                        struct err *e)
{
    if (fused) return cuda_launch_gemv_fused(c->st, w->d, w->scale, w->n_in, w->n_out, in, y, y_type, e);
    if (w->type == CUDA_W_FP8 && n > 1 && c->fuse_on &&
        (in->kind == CUDA_GEMV_IN_NORM ? cuda_fp8_norm_fits(w->n_in) : in->gu_type == CUDA_ACT_BF16)) {
        /* the input made and quantized in one kernel: the bytes the two kernels apart give */
        if (in->kind == CUDA_GEMV_IN_NORM
                ? cuda_launch_rmsnorm_fp8(c->st, in->x_out, in->add, in->w, in->rows, n, w->n_in, in->eps, c->act8,
                                          c->act_scale, e)
                : cuda_launch_swiglu_fp8(c->st, in->gu, n, w->n_in, c->act8, c->act_scale, e))
            return -1;
        cuda_mark(c, in_phase);
        return cuda_gemm_q(c, w, n, y, y_type, e);
    }
    const enum cuda_act act_type = cuda_act_of(w);
    if (in->kind == CUDA_GEMV_IN_NORM
            ? cuda_launch_rmsnorm(c->st, in->x_out, in->add, in->w, in->rows, n, w->n_in, in->eps, c->act, act_type, e)
            : cuda_launch_swiglu(c->st, in->gu, in->gu_type, n, w->n_in, c->act, act_type, e))
        return -1;
    cuda_mark(c, in_phase);
    return cuda_gemm(c, w, c->act, n, y, y_type, e);
}

/* One layer over all rows of the step. On entry x holds the residual stream and tmp (il > 0) the previous
 * layer's FFN output, not yet added; on return the same for this layer. In between: qkv = norm(x + tmp)
 * Wqkv; q roped in place, K/V into the pool; act = attention; tmp = act Wo; gu = norm(x + tmp) Wgu (x the
 * stream after the first add); tmp = SwiGLU(gu) Wdown. Apart, each norm adds in place (x += tmp) and writes
 * act, as SwiGLU does. Fused (one row, BF16 matrices; act then holds only the attention): the qkv GEMV
 * writes x + tmp into x_alt and leaves x as it was (all its blocks read x while one writes x_alt, so none
 * reads a half-written row), the gate/up GEMV likewise x_alt + tmp into x. x ends where it started either
 * way, so every step, and a graph's replay, uses the same buffers. */
static int cuda_run_layer(struct cuda_ctx *c, const struct cuda_batch_dev *bd, const struct cuda_attn_geom *g,
                          int32_t il, struct err *e)
{
    const struct model_hparams *hp = &c->m->hp;
    const struct cuda_layer *L = &c->layers[il];
    const int32_t n = bd->n_rows, qkv_stride = (hp->n_head + 2 * hp->n_head_kv) * hp->head_dim;
    char *k_layer = (char *)c->k_cache + (uint64_t)il * c->kv_layer_bytes;
    char *v_layer = (char *)c->v_cache + (uint64_t)il * c->kv_layer_bytes;
    const int fused = cuda_fuse(c, &L->qkv, CUDA_GEMV_IN_NORM, n) && cuda_fuse(c, &L->gate_up, CUDA_GEMV_IN_NORM, n) &&
                      cuda_fuse(c, &L->down, CUDA_GEMV_IN_SWIGLU, n);
    float *x_mid = fused ? c->x_alt : c->x; /* the stream between the two adds */
    /* gate and up as BF16 under BF16 weights: half the bytes through SwiGLU, whose output into the BF16 GEMM
     * is rounded to BF16 anyway */
    const enum cuda_act gu_type = cuda_act_of(&L->gate_up);
    const float eps = hp->norm_eps;
    const struct cuda_gemv_in attn_in = cuda_gemv_norm(c->x, il > 0 ? c->tmp : NULL, L->attn_norm, NULL, eps, x_mid),
                              ffn_in = cuda_gemv_norm(x_mid, c->tmp, L->ffn_norm, NULL, eps, c->x),
                              down_in = cuda_gemv_swiglu(c->gu, gu_type);
    CUDA_STEP(cuda_gemm_in(c, fused, &attn_in, n, &L->qkv, c->qkv, CUDA_ACT_F32, CUDA_PROF_NORM, e), CUDA_PROF_GEMM);
    CUDA_STEP(cuda_launch_qkv(c->st, g, bd, c->qkv, L->bqkv, L->q_norm, L->k_norm, c->cs, k_layer, v_layer, e),
              CUDA_PROF_QKV);
    CUDA_STEP(cuda_run_attn(c, bd, g, qkv_stride, k_layer, v_layer, cuda_act_of(&L->wo), e), CUDA_PROF_ATTN);
    CUDA_STEP(cuda_gemm(c, &L->wo, c->act, n, c->tmp, CUDA_ACT_F32, e), CUDA_PROF_GEMM);
    CUDA_STEP(cuda_gemm_in(c, fused, &ffn_in, n, &L->gate_up, c->gu, gu_type, CUDA_PROF_NORM, e), CUDA_PROF_GEMM);
    CUDA_STEP(cuda_gemm_in(c, fused, &down_in, n, &L->down, c->tmp, CUDA_ACT_F32, CUDA_PROF_SWIGLU, e),
              CUDA_PROF_GEMM);
    return 0;
}

/* Every layer over all rows of the step; leaves the last FFN output in tmp (not yet added to x). */
static int cuda_run_layers(struct cuda_ctx *c, const struct cuda_batch_dev *bd, struct err *e)
{
    const struct model_hparams *hp = &c->m->hp;
    const uint64_t n_vec = (uint64_t)c->n_blocks * (uint64_t)c->block_size * (uint64_t)hp->n_head_kv;
    const struct cuda_attn_geom g = {
        hp->n_head,    hp->n_head_kv,
        hp->head_dim,  hp->n_rot,
        hp->rope_neox, c->block_size,
        c->kv_type,    hp->norm_eps,
        c->attn,       cuda_kv_grouped(c->kv_type) ? cuda_kv_values_bytes(n_vec, hp->head_dim, c->kv_type) : 0};
    if (cuda_launch_rope_table(c->st, bd->pos, bd->n_rows, c->inv_freq, hp->n_rot, c->cs, e) ||
        cuda_launch_embed(c->st, c->embd.d, c->embd.type == CUDA_W_BF16, bd->tokens, bd->n_rows, hp->n_embd, c->x, e))
        return -1;
    cuda_mark(c, CUDA_PROF_EMBED);
    for (int32_t il = 0; il < hp->n_layer; il++)
        if (cuda_run_layer(c, bd, &g, il, e)) return -1;
    return 0;
}

int cuda_enqueue_step(struct cuda_ctx *c, const struct cuda_batch_dev *bd, int32_t n_logits, struct err *e)
{
    const struct model_hparams *hp = &c->m->hp;
    if (cuda_run_layers(c, bd, e)) return -1;
    if (n_logits > 0) {
        /* the last residual add, the output norm and the head, for the logit rows only (fused, the sum is not
         * kept: nothing reads x after the head) */
        const int fused = cuda_fuse(c, &c->output, CUDA_GEMV_IN_NORM, n_logits);
        const struct cuda_gemv_in in =
            cuda_gemv_norm(c->x, c->tmp, c->output_norm, bd->logit_rows, hp->norm_eps, fused ? NULL : c->x);
        if (cuda_gemm_in(c, fused, &in, n_logits, &c->output, c->logits_d, CUDA_ACT_F32, CUDA_PROF_HEAD, e))
            return err_prefix(e, "output head");
        cuda_mark(c, CUDA_PROF_HEAD);
    }
    return 0;
}

/* Adds the times between the step's profile events to their phases (after the stream is synchronized). */
static void cuda_prof_collect(struct cuda_ctx *c)
{
    if (!c->prof_on) return;
    for (int i = 0; i < c->n_marks; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, c->prof_ev[i], c->prof_ev[i + 1]) == cudaSuccess)
            c->prof.ms[c->prof_phase[i]] += ms;
    }
    c->prof.n_steps++;
    c->n_marks = 0;
}

/* Waits for the enqueued step (and its logits or draws) and takes its times; logit_bytes: what came to the
 * host. */
int cuda_finish(struct cuda_ctx *c, uint64_t logit_bytes, struct err *e)
{
    CU_TRY(cudaEventRecord(c->ev_copied, c->st));
    CU_TRY(cudaStreamSynchronize(c->st));
    c->pending = 0;
    cuda_prof_collect(c);
    float step_ms = 0.0f, copy_ms = 0.0f;
    CU_TRY(cudaEventElapsedTime(&step_ms, c->ev_start, c->ev_copied));
    CU_TRY(cudaEventElapsedTime(&copy_ms, c->ev_head, c->ev_copied));
    c->last = (struct cuda_step_times){step_ms, copy_ms, 0.0, logit_bytes};
    c->busy_ms += step_ms;
    c->n_steps++;
    return 0;
}

/* Copies rows [i0, i1) of logits_d to the pinned logits_h (async). */
int cuda_copy_logit_rows(struct cuda_ctx *c, int32_t i0, int32_t i1, struct err *e)
{
    const size_t row = (size_t)c->m->hp.n_vocab * sizeof(float);
    if (i1 <= i0) return 0;
    CU_TRY(cudaMemcpyAsync((char *)c->logits_h + (size_t)i0 * row, (const char *)c->logits_d + (size_t)i0 * row,
                           (size_t)(i1 - i0) * row, cudaMemcpyDeviceToHost, c->st));
    return 0;
}

/* Enqueues the step; with logits, waits for it and copies the logit rows there; without (the op sample
 * follows), returns with the step in flight and its logits kept on the device. */
static int cuda_forward(void *ctx, const struct step_batch *b, float *logits, struct err *e)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (!c->m) return err_set(e, "cuda backend: forward before load");
    if (!c->k_cache) return err_set(e, "cuda backend: forward before kv_alloc");
    const double t_in = cuda_now();
    CU_TRY(cudaSetDevice(c->device));
    if (c->pending && cuda_finish(c, 0, e)) return -1; /* a kept step nobody sampled: its buffers are ours again */
    if (cuda_check_batch(c, b, e) || cuda_reserve(c, b->n_rows, b->n_logits, e)) return -1;
    const struct model_hparams *hp = &c->m->hp;
    struct cuda_batch_dev bd;
    if (!c->t_first) c->t_first = cuda_now();
    CU_TRY(cudaEventRecord(c->ev_start, c->st));
    c->n_marks = 0;
    c->pending = 1;
    c->kept_logits = 0;
    if (c->prof_on) CU_TRY(cudaEventRecord(c->prof_ev[0], c->st));
    const double t_started = cuda_now();
    c->host_ms[0] += (t_started - t_in) * 1e3;
    if (cuda_upload_batch(c, b, &bd, e)) return -1;
    cuda_mark(c, CUDA_PROF_UPLOAD);
    const int64_t captures = c->n_graph_captures;
    if (cuda_graph_fits(c, b, logits) ? cuda_graph_run(c, &bd, b->n_seqs, b->n_logits, e)
                                      : cuda_enqueue_step(c, &bd, b->n_logits, e))
        return -1;
    c->one_off = c->n_graph_captures != captures;
    CU_TRY(cudaEventRecord(c->ev_head, c->st));
    c->host_ms[1] += (cuda_now() - t_started) * 1e3;
    if (!logits) {
        c->kept_logits = b->n_logits;
        return 0;
    }
    const size_t n_logit_bytes = (size_t)b->n_logits * (size_t)hp->n_vocab * sizeof(float);
    if (b->n_logits > 0 && cuda_copy_logit_rows(c, 0, b->n_logits, e)) return -1;
    cuda_mark(c, CUDA_PROF_COPY);
    if (cuda_finish(c, n_logit_bytes, e)) return -1;
    const double t0 = cuda_now();
    if (b->n_logits > 0) memcpy(logits, c->logits_h, n_logit_bytes);
    c->last.logits_host_ms = (cuda_now() - t0) * 1e3;
    return 0;
}

/* ---------------------------------------------------------------- the rest of the ops */

static int cuda_memory(void *ctx, struct backend_memory *out, struct err *e)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    CU_TRY(cudaSetDevice(c->device));
    size_t free_b = 0, total_b = 0;
    CU_TRY(cudaMemGetInfo(&free_b, &total_b));
    out->total = total_b;
    out->available = free_b;
    /* left unused by the auto budget: cuBLAS workspaces, the CUDA context's growth, fragmentation */
    out->headroom = (2ull << 30) + total_b / 50;
    return 0;
}

static void cuda_caps(void *ctx, struct backend_caps *out)
{
    (void)ctx;
    out->default_max_batch_tokens = 2048;
    out->weights_mapped = 0;
    out->gpu = 1;
    out->hidden_states = 0; /* embeddings: not yet (step_batch.hidden) */
    /* BF16 GEMMs break even at ~200 rows on an H200 (989 TFLOP/s over 4.8 TB/s), small models' steps are bound
     * by kernel latency far beyond; long contexts make rows dearer. The engine's fit learns the real line. */
    out->step_knee_rows = 128;
    out->kv_types = (1u << KV_TYPE_N) - 1; /* every type of the table */
    out->archs = 1u << MODEL_ARCH_LLAMA | 1u << MODEL_ARCH_QWEN2 | 1u << MODEL_ARCH_QWEN3; /* as cuda_load */
    cuda_sample_caps(&out->sampling); /* what the op sample expresses (cuda_sample.cu) */
    out->weight_types = 0;
    for (int t = 0; t < 64; t++) /* what cuda_upload_rows takes: BF16 as it is, the rest converted on the device */
        if (t == GGUF_DTYPE_BF16 || cuda_dequant_supported((enum gguf_dtype)t)) out->weight_types |= 1ull << t;
}

static uint64_t cuda_weight_copy_bytes(void *ctx)
{
    return ((const struct cuda_ctx *)ctx)->weight_bytes;
}

static void cuda_free(void *ctx)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (!c) return;
    if (c->n_steps && getenv("NIGHTSHIFT_CUDA_STATS")) { /* the host's share: time the device had no step */
        const double wall = cuda_now() - c->t_first;
        log_info("cuda: %lld steps (%lld as graphs, %lld captures), the device busy %.2f s of the %.2f s since the "
                 "first step (%.1f%%); host s: forward before the step %.2f, forward enqueue %.2f, sample enqueue "
                 "%.2f, sample waits %.2f",
                 (long long)c->n_steps, (long long)c->n_graph_launches, (long long)c->n_graph_captures,
                 c->busy_ms / 1e3, wall, 100.0 * c->busy_ms / 1e3 / wall, c->host_ms[0] / 1e3, c->host_ms[1] / 1e3,
                 c->host_ms[2] / 1e3, c->host_ms[3] / 1e3);
    }
    if (c->prof_on && c->prof.n_steps) { /* NIGHTSHIFT_CUDA_PROFILE */
        char line[512];
        int n = snprintf(line, sizeof line, "cuda profile: %lld steps, device ms/step:", (long long)c->prof.n_steps);
        for (int i = 0; i < CUDA_PROF_N && n < (int)sizeof line - 32; i++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.4f", backend_cuda_profile_name(i),
                          c->prof.ms[i] / (double)c->prof.n_steps);
        log_info("%s", line);
    }
    cudaSetDevice(c->device);
    cuda_release(c);
    cuda_graph_free(c);
    cuda_lt_free(c->lt);
    if (c->blas) cublasDestroy(c->blas);
    cuda_free_ptr(&c->blas_ws);
    if (c->ev_start) cudaEventDestroy(c->ev_start);
    if (c->ev_head) cudaEventDestroy(c->ev_head);
    if (c->ev_copied) cudaEventDestroy(c->ev_copied);
    for (int i = 0; c->prof_ev && i < CUDA_PROF_MARKS; i++)
        if (c->prof_ev[i]) cudaEventDestroy(c->prof_ev[i]);
    free(c->prof_ev);
    free(c->prof_phase);
    if (c->st) cudaStreamDestroy(c->st);
    if (c->side) cudaStreamDestroy(c->side);
    if (c->ev_fork) cudaEventDestroy(c->ev_fork);
    if (c->ev_join) cudaEventDestroy(c->ev_join);
    free(c);
}

static int cuda_step_one_off(void *ctx)
{
    return ((const struct cuda_ctx *)ctx)->one_off;
}

static const struct backend_ops cuda_ops = {
    "cuda", cuda_load, cuda_kv_alloc, cuda_forward, cuda_scratch_bytes, cuda_free, cuda_check,
    cuda_weight_copy_bytes, cuda_memory, cuda_caps, cuda_sample, cuda_step_one_off,
};

static int cuda_init_ctx(struct cuda_ctx *c, struct err *e)
{
    cudaDeviceProp p;
    CU_TRY(cudaSetDevice(c->device));
    CU_TRY(cudaGetDeviceProperties(&p, c->device));
    if (p.major < 9)
        return err_set(e, "cuda backend: device %d (%s) has compute capability %d.%d; this build needs 9.0", c->device,
                       p.name, p.major, p.minor);
    snprintf(c->device_name, sizeof c->device_name, "%s", p.name);
    CU_TRY(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
    if (!cuda_env_off("NIGHTSHIFT_CUDA_SIDE")) {
        CU_TRY(cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
        CU_TRY(cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming));
        CU_TRY(cudaEventCreateWithFlags(&c->ev_join, cudaEventDisableTiming));
    }
    CU_TRY(cudaEventCreate(&c->ev_start));
    CU_TRY(cudaEventCreate(&c->ev_head));
    CU_TRY(cudaEventCreate(&c->ev_copied));
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->st));
    CU_TRY(cudaMalloc(&c->blas_ws, CUDA_BLAS_WORKSPACE));
    CUBLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, CUDA_BLAS_WORKSPACE));
    if (cuda_lt_init(&c->lt, c->blas_ws, CUDA_BLAS_WORKSPACE, e)) return -1;
    c->graphs_on = !cuda_env_off("NIGHTSHIFT_CUDA_GRAPHS");
    c->fuse_on = !cuda_env_off("NIGHTSHIFT_CUDA_FUSE");
    return cuda_kernels_init(e);
}

extern "C" int backend_cuda_init(struct backend *b, const struct backend_config *cfg, struct err *e)
{
    b->ops = NULL;
    b->ctx = NULL;
    char why[256];
    if (!backend_cuda_probe(why, sizeof why)) return err_set(e, "cuda backend: %s", why);
    struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return err_set(e, "cuda backend: out of memory");
    c->device = cfg ? cfg->device : 0;
    c->weights_asked = cfg ? cfg->weights : BACKEND_WEIGHTS_AUTO;
    if (cuda_init_ctx(c, e)) {
        cuda_free(c);
        return -1;
    }
    b->ops = &cuda_ops;
    b->ctx = c;
    /* each step's device time by phase, logged at exit (events between phases: ~1 us of host time each; no
     * graphs while it is on) */
    if (getenv("NIGHTSHIFT_CUDA_PROFILE") && backend_cuda_profile_enable(b, 1))
        log_warn("cuda backend: NIGHTSHIFT_CUDA_PROFILE: cannot create the profile's events; no profile");
    return 0;
}
