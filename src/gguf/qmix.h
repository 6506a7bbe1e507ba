/* qmix — the named target types of `nightshift quantize` and `nightshift synth` (f32, f16, bf16, q8_0,
 * q4_0 ... q5_1, llama.cpp's K-quant mixes q2_k ... q6_k, and iq4_nl, iq4_xs) and the tensor type each
 * weight gets in them.
 *
 * The rules are llama.cpp's (llama-quantize), taken as facts about its file format conventions:
 *
 * Which tensors are converted (qmix_converts): names ending in "weight" with 2 or more dimensions, except
 * norms ("_norm.weight"), MoE router weights ("ffn_gate_inp.weight"), position embeddings and token types.
 * Everything else (norms, biases, rope factors) is copied as it is.
 *
 * The type of a converted tensor (qmix_rule_type) in a quantized target (not f32/f16/bf16, not pure):
 *   - the output head (output.weight; token_embd.weight when the file has no output.weight, i.e. a tied
 *     head): Q6_K, or Q8_0 when the target is q8_0 or the row is not whole blocks of the target's type;
 *   - attn_v: q2_k Q4_K when n_head / n_head_kv >= 4, else Q3_K; q3_k_m Q5_K in layers 0-1, else Q4_K;
 *     q3_k_l Q5_K; q4_k_s Q5_K in layers 0-3; q4_k_m and q5_k_m Q6_K in the "more bits" layers;
 *   - ffn_down: q2_k Q3_K; q3_k_m Q5_K in the first n_layer/16 layers, else Q4_K; q3_k_l Q5_K; q4_k_s Q5_K
 *     in the first n_layer/8 layers; q4_k_m and q5_k_m Q6_K in the "more bits" layers;
 *   - attn_output: q2_k Q3_K; q3_k_m Q4_K; q3_k_l Q5_K;
 *   - attn_qkv (fused, phi3): q3_k_m, q3_k_l Q4_K; q4_k_m Q5_K; q5_k_m Q6_K;
 *   - iq4_nl, iq4_xs (no importance matrix): attn_v Q5_K when n_head / n_head_kv >= 4, ffn_down Q5_K in
 *     the first n_layer/8 layers;
 *   - everything else (token_embd of an untied model included): the target's base type.
 * "More bits" layers of n: il < n/8, il >= 7n/8, and every third layer between ((il - n/8) % 3 == 2).
 * Left out of llama.cpp's rules: its Falcon, 70B and 8-expert special cases, the IQ types below 4 bits,
 * and importance matrices (nightshift computes none of those).
 *
 * A row must be whole blocks of its type. When it is not (qmix_fallback), as llama.cpp does: Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K, Q3_K and IQ4_XS -> IQ4_NL; and F16 when even that is not whole blocks
 * (llama.cpp refuses such a tensor in the non-K targets; nightshift falls back instead, and says so).
 *
 * Pure tables and functions: no state, no allocation.
 */
#ifndef NS_GGUF_QMIX_H
#define NS_GGUF_QMIX_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* The target types, numbered as general.file_type (llama.cpp's LLAMA_FTYPE_*). */
enum qmix_ftype {
    QMIX_F32 = 0,
    QMIX_F16 = 1,
    QMIX_Q4_0 = 2,
    QMIX_Q4_1 = 3,
    QMIX_Q8_0 = 7,
    QMIX_Q5_0 = 8,
    QMIX_Q5_1 = 9,
    QMIX_Q2_K = 10,
    QMIX_Q3_K_S = 11,
    QMIX_Q3_K_M = 12,
    QMIX_Q3_K_L = 13,
    QMIX_Q4_K_S = 14,
    QMIX_Q4_K_M = 15,
    QMIX_Q5_K_S = 16,
    QMIX_Q5_K_M = 17,
    QMIX_Q6_K = 18,
    QMIX_IQ4_NL = 25,
    QMIX_IQ4_XS = 30,
    QMIX_BF16 = 32,
};

struct qmix_type {
    const char *name;       /* "q4_k_m", as the user types it */
    enum qmix_ftype ftype;  /* general.file_type */
    enum gguf_dtype base;   /* the type of most converted tensors */
};

/* What the rules need to know about the model. */
struct qmix_model {
    uint32_t n_layer;   /* <arch>.block_count */
    uint32_t n_head;    /* <arch>.attention.head_count (0: unknown) */
    uint32_t n_head_kv; /* <arch>.attention.head_count_kv (0: unknown = n_head) */
    int has_output;     /* 1: the file has output.weight (0: token_embd is the tied head) */
    int pure;           /* 1: no mix: every converted tensor gets the base type (llama-quantize --pure) */
};

/* The target type named `name` (case-insensitive), or NULL. */
const struct qmix_type *qmix_find(const char *name);
/* The table, in the order of qmix_names: i < qmix_n_types(). */
size_t qmix_n_types(void);
const struct qmix_type *qmix_type_at(size_t i);
/* "f32, f16, bf16, q8_0, ..." (static). */
const char *qmix_names(void);
/* 1 for f32, f16, bf16 (no mix rules apply: every converted tensor gets the base type). */
int qmix_is_float(const struct qmix_type *t);

/* 1 if a tensor with this name and number of dimensions is converted (see the top of this file). */
int qmix_converts(const char *name, uint32_t n_dims);
/* The type the rules give a converted tensor of row length ne0, before the block-size fallback. */
enum gguf_dtype qmix_rule_type(const struct qmix_type *t, const struct qmix_model *m, const char *name, uint64_t ne0);
/* t when a row of ne0 elements is whole blocks of t; else the fallback (see the top of this file). */
enum gguf_dtype qmix_fallback(enum gguf_dtype t, uint64_t ne0);
/* qmix_fallback(qmix_rule_type(...)): the type the tensor is written in. */
enum gguf_dtype qmix_tensor_type(const struct qmix_type *t, const struct qmix_model *m, const char *name, uint64_t ne0);

#endif
