/* model — hyper-parameters per architecture and weight binding. A struct model is a read-only description
 * of a Llama-family network whose weights are views into a gguf_file (not owned: the file must outlive
 * the model). It does no math: backends (src/backend/) run the forward step.
 *
 * Supported: `llama` (Llama 1/2/3, Mistral, SmolLM, TinyLlama), `qwen2` (q/k/v biases), `qwen3` (per-head
 * q/k RMSNorm), and (issue 11) `gemma3`, `gemma2`, `phi3`:
 *  - gemma3: token embedding times sqrt(n_embd); RMSNorm weights used as stored (GGUF converters store
 *    Gemma's 1 + w); pre- and post-norms around attention and FFN; per-head q/k RMSNorm; GeGLU with
 *    tanh-GELU; NeoX RoPE; sliding-window ("local") layers: every layer but every 6th, window
 *    gemma3.attention.sliding_window, RoPE base 10,000 (global layers: gemma3.rope.freq_base, scaled
 *    when rope.scaling.type is "linear"); tied head.
 *  - gemma2: as gemma3 without q/k norms, one RoPE base, local layers the even ones, plus soft-capping of
 *    attention scores and final logits (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping).
 *  - phi3: llama with NeoX RoPE, fused attn_qkv (q, k, v rows in that order) and a fused ffn_up holding
 *    the gate rows then the up rows: both are bound as row views (wq/wk/wv, w_gate/w_up) into the fused
 *    tensor, so backends see separate matrices; every layer is local when phi3.attention.sliding_window
 *    is set (LongRoPE files, with rope_factors_long/short, are refused).
 * Weight types are checked at load against what the CPU backend can compute; an unsupported
 * architecture or tensor type is an error naming it.
 */
#ifndef NS_MODEL_H
#define NS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

enum model_arch {
    MODEL_ARCH_LLAMA,
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_GEMMA3,
    MODEL_ARCH_GEMMA2,
    MODEL_ARCH_PHI3,
};

/* Element type of the KV cache (model.c's table of them: name, bytes). Q8_0 and FP8 store a head vector as
 * groups of 32 one-byte values (int8, or e4m3) with an f16 scale each: 34 bytes per 32 elements. */
enum kv_type { KV_TYPE_F32, KV_TYPE_F16, KV_TYPE_Q8_0, KV_TYPE_FP8, KV_TYPE_N };

struct model_hparams {
    enum model_arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train; /* <arch>.context_length: the longest sequence accepted */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim; /* n_embd / n_head unless <arch>.attention.key_length says otherwise */
    int32_t n_ff;
    int32_t n_rot;    /* rotary dims per head (<arch>.rope.dimension_count, default head_dim) */
    float rope_base;
    int rope_neox;    /* 1: rotate pairs (i, i + n_rot/2) (qwen2/3); 0: pairs (2i, 2i+1) (llama) */
    float norm_eps;
    int32_t pooling;  /* <arch>.pooling_type (enum model_pooling; other values are kept and refused by the
                         engine's embedding requests); absent: MODEL_POOLING_LAST, the state of the last
                         token, the one that has seen the whole input in a decoder-only model */
    /* gemma3 / gemma2 / phi3 (issue 11): zero (off) for the llama family */
    float embd_scale;      /* token embedding rows are multiplied by this (gemma: sqrt(n_embd)); 0: not */
    float att_scale;       /* attention score scale; 0: 1 / sqrt(head_dim) (set only when it differs) */
    float att_softcap;     /* scores = c * tanh(scores / c) before the softmax (gemma2); 0: none */
    float final_softcap;   /* logits = c * tanh(logits / c) (gemma2); 0: none */
    int32_t n_swa;         /* window of local layers: a row at position p sees positions > p - n_swa; 0: none */
    int32_t swa_period;    /* local layers (model_layer_window): all (1), all but every period-th (>1) */
    float rope_base_local; /* RoPE base of local layers (gemma3: 10,000; else rope_base) */
    float rope_freq_scale; /* gemma3 rope.scaling.type "linear" (Gemma 3 4B and up): the global layers' RoPE
                              frequencies times this, 1 / rope.scaling.factor; 0: none */
    int ffn_gelu;          /* 1: FFN is GeGLU, gelu_tanh(gate) * up (gemma); 0: SwiGLU */
    int post_norms;        /* 1: post_attention_norm / post_ffw_norm on each block's output (gemma) */
};

/* The attention window of layer il: hp->n_swa when the layer is local, else 0 (sees every position). */
int32_t model_layer_window(const struct model_hparams *hp, int32_t il);

/* How an embedding pools its rows' final hidden states: GGUF's <arch>.pooling_type values. */
enum model_pooling { MODEL_POOLING_NONE = 0, MODEL_POOLING_MEAN = 1, MODEL_POOLING_CLS = 2, MODEL_POOLING_LAST = 3 };

/* One weight tensor: a view into the GGUF file. ne[0] = input dim (row length), ne[1] = output dim. */
struct model_weight {
    const char *name;
    enum gguf_dtype type;
    int64_t ne[2];
    const void *data;
};

struct model_layer {
    struct model_weight attn_norm, wq, wk, wv, wo;
    struct model_weight bq, bk, bv;         /* qwen2 only (data NULL otherwise) */
    struct model_weight q_norm, k_norm;     /* qwen3 only (data NULL otherwise) */
    struct model_weight ffn_norm, w_gate, w_up, w_down;
    struct model_weight post_attn_norm, post_ffw_norm; /* gemma only (data NULL otherwise) */
};

struct model {
    struct model_hparams hp;
    struct model_weight tok_embd;     /* (n_vocab, n_embd) */
    struct model_weight output_norm;  /* (n_embd) */
    struct model_weight output;       /* (n_vocab, n_embd); = tok_embd when tied */
    struct model_weight rope_freqs;   /* optional Llama 3 rope scaling factors (n_rot/2), F32; data NULL if absent */
    struct model_layer *layers;       /* (n_layer), owned */
    const gguf_file *file;            /* not owned; NULL for a model_clone_f32() copy */
    void *owned_data;                 /* weights owned by this model (model_clone_f32), freed by model_free */
};

int model_load(const gguf_file *f, struct model **out, struct err *e);
void model_free(struct model *m);

/* Bytes of all weights the forward step reads: every layer tensor, output_norm and the output head;
 * token_embd only when it is the (tied) output head, since otherwise a step gathers just one row per
 * token. Weight bytes / memory bandwidth = the single-stream decode limit. */
uint64_t model_weight_bytes(const struct model *m);
/* KV bytes per token across all layers (K and V) for a KV element type. */
uint64_t model_kv_bytes_per_token(const struct model_hparams *hp, enum kv_type t);

/* --- additions (issue 3) --- */
/* Bytes of one (token, kv head) vector of K or V: head_dim elements (Q8_0: blocks of 32 + f16 scale). */
uint64_t model_kv_vec_bytes(const struct model_hparams *hp, enum kv_type t);
const char *model_arch_name(enum model_arch a); /* "llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3" */
const char *model_kv_type_name(enum kv_type t);        /* "f32", "f16", "q8_0", "fp8"; "?" past the table */
int model_kv_type_parse(const char *s, enum kv_type *out); /* a name, in any case; -1 if unknown */
/* 1 if a model may hold a weight matrix of this type: the table of types dequantizes it
 * (quant_can_dequantize). Which types a backend computes is its caps' weight_types. */
int model_type_supported(enum gguf_dtype t);
/* Debug check of the invariant at the top of model.c (shapes, types, views inside the file). */
int model_check(const struct model *m, struct err *e);
/* A copy of m whose every weight matrix is dequantized to F32 (in memory owned by the copy); the reference
 * that quantized paths are compared with. The copy references neither m nor its file (norms are copied
 * too). Memory: 4 bytes per weight element. */
int model_clone_f32(const struct model *m, struct model **out, struct err *e);

#endif
