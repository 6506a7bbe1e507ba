/* cuda_ctx — the CUDA backend's context, shared by its host-side files (cuda.cu: load, KV pool, forward;
 * cuda_draw.cu: the op sample). Private to src/backend/; cuda.cu's header comment states the invariants. */
#ifndef NS_BACKEND_CUDA_CTX_H
#define NS_BACKEND_CUDA_CTX_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend/backend.h"
#include "model/model.h"
#include "util/err.h"
}
#include "backend/cuda.h"
#include "backend/cuda_kernels.h"

/* A matrix's element type on the device: F32 (an F32 file's exact path), BF16, or e4m3 with one f32 scale
 * per row (cuda_fp8.cu). */
enum cuda_wtype { CUDA_W_F32 = 0, CUDA_W_BF16 = 1, CUDA_W_FP8 = 2 };

struct cuda_matrix {
    void *d;      /* (n_out, n_in) row-major, of type */
    float *scale; /* FP8: (n_out) the rows' scales; NULL otherwise */
    enum cuda_wtype type;
    int32_t n_in, n_out;
};

struct cuda_layer {
    float *attn_norm, *ffn_norm; /* (n_embd) */
    float *bqkv;                 /* (n_q + 2 n_kv) qwen2; NULL otherwise */
    float *q_norm, *k_norm;      /* (head_dim) qwen3; NULL otherwise */
    struct cuda_matrix qkv, wo, gate_up, down;
};

/* A pinned host buffer and its device twin, for uploads and small downloads (grow, never shrink). */
struct cuda_io {
    size_t cap; /* bytes of each */
    int32_t *h, *d;
};

/* A captured decode step for one row count (cuda_graph.cu): valid while its key matches the step's. */
#define CUDA_GRAPH_ROWS 72 /* decode steps (drafts included: 8 sequences of 1 + 8 rows) of at most this many rows */
#define CUDA_GRAPH_SEQS 8  /* ... and sequences run as CUDA graphs (more sequences change the key too often) */
#define CUDA_GRAPH_WAYS 4  /* graphs kept per row count, the least recently launched replaced: with drafts, steps
                              of one row count alternate between attention plans */
struct cuda_graph_key {
    int64_t gen;     /* cuda_ctx.gen when captured: buffers the graph's nodes point into */
    const void *batch_d;
    int32_t n_seqs, n_items, n_split_rows, max_item_rows, n_split_items;
};
struct cuda_graph {
    cudaGraphExec_t exec; /* NULL: none yet */
    struct cuda_graph_key key;
    int64_t used; /* cuda_ctx.n_graph_launches when last launched */
};

struct cuda_ctx {
    int device;
    char device_name[256];
    cudaStream_t st;
    cudaStream_t side;           /* decode attention beside prefill attention (cuda_run_attn); NULL: off */
    cudaEvent_t ev_fork, ev_join; /* st -> side after the K/V writes, side -> st before the combine */
    cublasHandle_t blas;
    void *blas_ws;
    struct cuda_lt *lt; /* FP8 products (cuBLASLt), sharing blas_ws: both run on st, one at a time */
    enum backend_weights weights_asked; /* backend_config.weights */
    enum cuda_wtype layer_wtype;        /* the layers' matrices in this load (FP8 where their rows allow) */
    cudaEvent_t ev_start, ev_head, ev_copied;

    const struct model *m;
    struct cuda_layer *layers; /* (n_layer) */
    struct cuda_matrix embd;   /* token embedding table (n_vocab, n_embd) */
    struct cuda_matrix output; /* output head (n_vocab, n_embd); output.d == embd.d when shared */
    float *output_norm;        /* (n_embd) */
    double *inv_freq;          /* (n_rot / 2) */
    uint64_t weight_bytes;     /* device bytes of all of the above */
    int64_t max_parts;         /* attention partial slots */

    /* KV pool */
    enum kv_type kv_type;
    enum cuda_attn_kernel attn; /* chosen with the pool (cuda_attn_choose), fixed while it lives */
    int32_t n_blocks, block_size;
    void *k_cache, *v_cache;  /* (n_layer, n_blocks, n_head_kv, block_size, head_dim) each; q8_0: each layer's
                                 f16 scales after its values (cuda.cu's top comment) */
    uint64_t kv_layer_bytes;  /* one layer of K (or V): cuda_kv_layer_bytes */

    /* step scratch (device), for up to cap_rows rows */
    int32_t cap_rows;
    void *scratch;
    float *x;    /* (cap, n_embd) residual stream */
    float *tmp;  /* (cap, n_embd) output of wo / down */
    float *x_alt; /* (n_embd) the residual stream between the two adds of a fused layer (one row: cuda.cu) */
    float *qkv;  /* (cap, n_q + 2 n_kv) */
    void *gu;    /* (cap, 2 n_ff) gate and up: BF16 under BF16 weights, else f32 (sized for f32) */
    float *cs;   /* (cap, n_rot / 2, 2) */
    void *act;   /* (cap, max(n_embd, n_q, n_ff)) GEMM input, BF16 or F32 */
    uint8_t *act8;    /* (cap, max(n_embd, n_q, n_ff)) act quantized to e4m3 for an FP8 GEMM */
    float *act_scale; /* (cap) its rows' scales */
    float *part_acc, *part_ml; /* (max_parts, n_head, head_dim), (max_parts, n_head, 2) */
    int32_t cap_logits;
    float *logits_d; /* (cap_logits, n_vocab) */
    float *logits_h; /* pinned, same shape */
    struct cuda_io batch;  /* the step batch (cuda_upload_batch) */
    struct cuda_io sample; /* the sample op's rows and edits up, tokens down */
    int pending;           /* 1: a forward's work is enqueued and not yet waited for (cuda_finish) */
    int32_t kept_logits;   /* logit rows a forward with logits NULL left on the device for sample */

    int fuse_on; /* fused GEMVs in steps of one row, and an FP8 GEMM's input made and quantized in one kernel
                    (cuda.cu); NIGHTSHIFT_CUDA_FUSE=off clears it at init */

    /* CUDA graphs of decode steps (cuda_graph.cu) */
    int graphs_on;                                 /* NIGHTSHIFT_CUDA_GRAPHS=off clears it at init */
    int64_t gen;                                   /* bumped whenever a buffer a graph may point into moves */
    struct cuda_graph graphs[CUDA_GRAPH_ROWS + 1][CUDA_GRAPH_WAYS]; /* by row count */
    int64_t n_graph_launches, n_graph_captures;
    int one_off; /* 1: the last forward captured a graph (backend_ops.step_one_off) */

    struct cuda_step_times last;
    double busy_ms;        /* sum of the steps' device times (last.step_ms) */
    int64_t n_steps;
    double t_first;        /* cuda_now() at the first forward, 0 before */
    double host_ms[4];     /* host time in: forward before the step starts, forward's enqueue, sample's
                              enqueue, sample's waits (NIGHTSHIFT_CUDA_STATS) */
    /* profile (backend_cuda_profile_enable) */
    int prof_on, n_marks;
    cudaEvent_t *prof_ev;  /* (CUDA_PROF_MARKS), created when first enabled */
    uint8_t *prof_phase;   /* (CUDA_PROF_MARKS) phase ended by event i + 1 */
    struct cuda_profile prof;
};

#define CUDA_PROF_MARKS 2048

/* Profile: the phase that just ended on the stream (no-op when the profile is off). */
void cuda_mark(struct cuda_ctx *c, enum cuda_prof phase);
/* cudaFree(*p) unless NULL, then *p = NULL. */
void cuda_free_ptr(void **p);
/* Weights (cuda_upload.cu). The layers' matrix type for loading m as c->weights_asked says, with the reason
 * for the start-up line in why; the upload of c->m's weights (c->layers allocated; c->layer_wtype set) and of
 * its RoPE frequencies; freeing them (c->gen bumped); "N of M layer matrices e4m3" or the BF16 words. */
enum cuda_wtype cuda_pick_wtype(struct cuda_ctx *c, const struct model *m, char *why, size_t why_cap);
int cuda_upload_weights(struct cuda_ctx *c, struct err *e);
int cuda_upload_rope(struct cuda_ctx *c, struct err *e);
void cuda_free_weights(struct cuda_ctx *c);
void cuda_describe_weights(const struct cuda_ctx *c, int quantized, char *out, size_t cap);
/* Seconds on a monotonic clock. */
double cuda_now(void);
/* n rounded up to a multiple of 4. */
size_t cuda_align4(size_t n);
/* Room for bytes in io (half as much again when it grows). */
int cuda_io_reserve(struct cuda_io *io, size_t bytes, struct err *e);
/* Waits for the enqueued step (and its logits or draws) and takes its times; logit_bytes: what came to the
 * host. */
int cuda_finish(struct cuda_ctx *c, uint64_t logit_bytes, struct err *e);
/* Copies rows [i0, i1) of logits_d to the pinned logits_h (async). */
int cuda_copy_logit_rows(struct cuda_ctx *c, int32_t i0, int32_t i1, struct err *e);
/* Enqueues a step's layers and (for n_logits > 0) its output head on the stream, for an uploaded batch. */
int cuda_enqueue_step(struct cuda_ctx *c, const struct cuda_batch_dev *bd, int32_t n_logits, struct err *e);
/* Whether a step runs as a CUDA graph: a decode step (every row drawn on the device: a sequence's last token
 * and its drafts) of at most CUDA_GRAPH_ROWS rows and CUDA_GRAPH_SEQS sequences, graphs on and the profile
 * off. */
int cuda_graph_fits(const struct cuda_ctx *c, const struct step_batch *b, const float *logits);
/* cuda_enqueue_step as the graph for bd->n_rows rows: launched when its key matches, else captured again. */
int cuda_graph_run(struct cuda_ctx *c, const struct cuda_batch_dev *bd, int32_t n_seqs, int32_t n_logits,
                   struct err *e);
/* Destroys every graph (at release). */
void cuda_graph_free(struct cuda_ctx *c);
/* The op sample (backend.h; cuda_draw.cu). */
int cuda_sample(void *ctx, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens, float *logits,
                struct sample_logprobs *logprobs, struct err *e);

#endif
