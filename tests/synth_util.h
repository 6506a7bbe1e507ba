/* synth_util.h — small random-weight Llama-family models built in memory for the model/backend tests
 * (and gemma3 / gemma2 / phi3 ones: their extra tensors, phi3's fused attn_qkv and ffn_up, the sliding
 * window and soft-cap keys).
 *
 * The same (config, seed) gives the same F32 values whatever the weight type; matrices are then
 * quantized to cfg.type with quant_quantize_row, so models of different types are the same network up to
 * quantization error. Values: matrices uniform in [-a, a], a = sqrt(3 / n_in) (unit gain); norm weights
 * 1 + U(-0.1, 0.1); biases U(-0.1, 0.1); rope_freqs (when asked) 1, 2, 3, ... (a Llama 3 style factor).
 */
#ifndef NS_TESTS_SYNTH_UTIL_H
#define NS_TESTS_SYNTH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/quant.h"
#include "model/model.h"
#include "util/rng.h"

struct synth_cfg {
    const char *arch; /* "llama", "qwen2", "qwen3", or anything (for error tests) */
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    enum gguf_dtype type;       /* matrices (token embedding included) */
    int tied;                   /* no output.weight */
    int rope_freqs;             /* add rope_freqs.weight */
    uint64_t seed;
    enum gguf_dtype force_type; /* if != 0: blk.0.ffn_up.weight gets this type (raw random bytes) */
    const char *skip_tensor;    /* if set: this tensor is left out */
    int omit_optional;          /* leave out head_count_kv, key_length, rope.*, epsilon (defaults apply) */
    uint32_t alignment;         /* if != 0: general.alignment */
    /* if set: the type of the matrix `name` (quantized from the same values), or 0 (F32 is not
     * choosable this way) for `type`: mixed-type files such as Q4_K_M */
    enum gguf_dtype (*type_of)(const char *name);
    int n_swa;                        /* if != 0: <arch>.attention.sliding_window */
    float att_softcap, final_softcap; /* if != 0: gemma2's soft-cap keys */
    const gguf_file *vocab;           /* if set: its tokenizer.* keys are copied (n_vocab must match) */
};

static inline struct synth_cfg synth_default(void)
{
    struct synth_cfg c = {"llama", 64, 2, 4, 2, 0, 96, 300, 256, GGUF_DTYPE_F32, 0, 0, 1, 0, NULL, 0, 0, NULL,
                          0, 0.0f, 0.0f, NULL};
    return c;
}

struct synth_model {
    void *buf;
    size_t n;
    gguf_file *f;
    struct model *m;
    void *blobs[512];
    int n_blobs;
};

static inline float synth_uniform(uint64_t *s, float a)
{
    return ((float)(rng_splitmix64(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * a;
}

/* kind: 0 matrix, 1 norm, 2 bias, 3 rope factors. */
static inline int synth_add(gguf_writer *w, struct synth_model *sm, const struct synth_cfg *c, const char *name,
                            int64_t ne0, int64_t ne1, int kind, uint64_t *rng, struct err *e)
{
    int64_t n = ne0 * (ne1 > 0 ? ne1 : 1);
    if (c->skip_tensor && !strcmp(name, c->skip_tensor)) return 0;
    float *vals = malloc((size_t)n * sizeof(float));
    if (!vals) return -1;
    float a = sqrtf(3.0f / (float)ne0);
    for (int64_t i = 0; i < n; i++) {
        if (kind == 0) vals[i] = synth_uniform(rng, a);
        else if (kind == 1) vals[i] = 1.0f + synth_uniform(rng, 0.1f);
        else if (kind == 2) vals[i] = synth_uniform(rng, 0.1f);
        else vals[i] = (float)(i + 1);
    }
    enum gguf_dtype t = kind == 0 ? c->type : GGUF_DTYPE_F32;
    if (kind == 0 && c->type_of && c->type_of(name)) t = c->type_of(name);
    if (c->force_type && !strcmp(name, "blk.0.ffn_up.weight")) t = c->force_type;
    uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)ne0);
    uint64_t rows = (uint64_t)(ne1 > 0 ? ne1 : 1);
    void *data = malloc(rb * rows + 1);
    if (!data || rb == 0) {
        free(vals);
        free(data);
        return err_set(e, "synth: bad tensor %s", name);
    }
    for (uint64_t r = 0; r < rows; r++) {
        if (c->force_type && t == c->force_type) {
            for (uint64_t i = 0; i < rb; i++) ((uint8_t *)data)[r * rb + i] = (uint8_t)(rng_splitmix64(rng) & 0x3F);
        } else if (quant_quantize_row(t, vals + r * (uint64_t)ne0, (char *)data + r * rb, ne0)) {
            free(vals);
            free(data);
            return err_set(e, "synth: cannot quantize %s", name);
        }
    }
    free(vals);
    sm->blobs[sm->n_blobs++] = data;
    uint64_t ne[2] = {(uint64_t)ne0, rows};
    return gguf_writer_add_tensor(w, name, t, ne1 > 0 ? 2 : 1, ne, data, e);
}

static inline void synth_free(struct synth_model *sm)
{
    model_free(sm->m);
    gguf_close(sm->f);
    free(sm->buf);
    for (int i = 0; i < sm->n_blobs; i++) free(sm->blobs[i]);
    memset(sm, 0, sizeof *sm);
}

/* Builds the GGUF in memory and opens it. load_model: also model_load (an error there fails the call and
 * leaves the message in e, with sm->f still open for inspection until synth_free). */
static inline int synth_build(const struct synth_cfg *c, int load_model, struct synth_model *sm, struct err *e)
{
    memset(sm, 0, sizeof *sm);
    gguf_writer *w = gguf_writer_init();
    if (!w) return err_set(e, "synth: oom");
    char key[128];
    uint64_t rng = c->seed * 1000003u + 17;
    int hd = c->head_dim ? c->head_dim : c->n_embd / c->n_head;
    int64_t n_q = (int64_t)c->n_head * hd, n_kv = (int64_t)c->n_head_kv * hd;
    int rc = -1;
#define KU(suffix, val)                                                                                   \
    do {                                                                                                  \
        snprintf(key, sizeof key, "%s.%s", c->arch, suffix);                                              \
        if (gguf_writer_set_u32(w, key, (uint32_t)(val), e)) goto out;                                    \
    } while (0)
    if (gguf_writer_set_str(w, "general.architecture", c->arch, strlen(c->arch), e)) goto out;
    if (c->alignment && gguf_writer_set_u32(w, "general.alignment", c->alignment, e)) goto out;
    KU("context_length", c->n_ctx);
    KU("embedding_length", c->n_embd);
    KU("block_count", c->n_layer);
    KU("feed_forward_length", c->n_ff);
    KU("attention.head_count", c->n_head);
    if (!c->omit_optional) {
        KU("attention.head_count_kv", c->n_head_kv);
        if (c->head_dim) KU("attention.key_length", c->head_dim);
        KU("rope.dimension_count", hd);
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", c->arch);
        if (gguf_writer_set_f32(w, key, 1e-6f, e)) goto out;
        snprintf(key, sizeof key, "%s.rope.freq_base", c->arch);
        if (gguf_writer_set_f32(w, key, 50000.0f, e)) goto out;
    }
    if (c->n_swa) KU("attention.sliding_window", c->n_swa);
    snprintf(key, sizeof key, "%s.attn_logit_softcapping", c->arch);
    if (c->att_softcap > 0 && gguf_writer_set_f32(w, key, c->att_softcap, e)) goto out;
    snprintf(key, sizeof key, "%s.final_logit_softcapping", c->arch);
    if (c->final_softcap > 0 && gguf_writer_set_f32(w, key, c->final_softcap, e)) goto out;
    for (uint64_t i = 0; c->vocab && i < gguf_n_kv(c->vocab); i++)
        if (!strncmp(gguf_kv_key(c->vocab, i), "tokenizer.", 10) && gguf_writer_copy_kv_at(w, c->vocab, i, e)) goto out;
#undef KU
    if (synth_add(w, sm, c, "token_embd.weight", c->n_embd, c->n_vocab, 0, &rng, e)) goto out;
    if (synth_add(w, sm, c, "output_norm.weight", c->n_embd, 0, 1, &rng, e)) goto out;
    if (!c->tied && synth_add(w, sm, c, "output.weight", c->n_embd, c->n_vocab, 0, &rng, e)) goto out;
    if (c->rope_freqs && synth_add(w, sm, c, "rope_freqs.weight", hd / 2, 0, 3, &rng, e)) goto out;
    for (int il = 0; il < c->n_layer; il++) {
        char name[96];
#define T(suffix, ne0, ne1, kind)                                                                         \
    do {                                                                                                  \
        snprintf(name, sizeof name, "blk.%d.%s", il, suffix);                                             \
        if (synth_add(w, sm, c, name, ne0, ne1, kind, &rng, e)) goto out;                                 \
    } while (0)
        const int phi3 = !strcmp(c->arch, "phi3"), gemma = !strncmp(c->arch, "gemma", 5);
        T("attn_norm.weight", c->n_embd, 0, 1);
        if (phi3) {
            T("attn_qkv.weight", c->n_embd, n_q + 2 * n_kv, 0);
        } else {
            T("attn_q.weight", c->n_embd, n_q, 0);
            T("attn_k.weight", c->n_embd, n_kv, 0);
            T("attn_v.weight", c->n_embd, n_kv, 0);
        }
        T("attn_output.weight", n_q, c->n_embd, 0);
        T("ffn_norm.weight", c->n_embd, 0, 1);
        if (phi3) {
            T("ffn_up.weight", c->n_embd, 2 * c->n_ff, 0);
        } else {
            T("ffn_gate.weight", c->n_embd, c->n_ff, 0);
            T("ffn_up.weight", c->n_embd, c->n_ff, 0);
        }
        T("ffn_down.weight", c->n_ff, c->n_embd, 0);
        if (gemma) {
            T("post_attention_norm.weight", c->n_embd, 0, 1);
            T("post_ffw_norm.weight", c->n_embd, 0, 1);
        }
        if (!strcmp(c->arch, "qwen2")) {
            T("attn_q.bias", n_q, 0, 2);
            T("attn_k.bias", n_kv, 0, 2);
            T("attn_v.bias", n_kv, 0, 2);
        }
        if (!strcmp(c->arch, "qwen3") || !strcmp(c->arch, "gemma3")) {
            T("attn_q_norm.weight", hd, 0, 1);
            T("attn_k_norm.weight", hd, 0, 1);
        }
#undef T
    }
    if (gguf_writer_write_mem(w, &sm->buf, &sm->n, NULL, NULL, e)) goto out;
    if (gguf_open_memory(sm->buf, sm->n, &sm->f, e)) goto out;
    if (load_model && model_load(sm->f, &sm->m, e)) goto out;
    rc = 0;
out:
    gguf_writer_free(w);
    return rc;
}

/* Opens the GGUF file at path and loads its model into *f and *m (the caller frees both: model_free, then
 * gguf_close). On failure nothing is left open and e says why. */
static inline int synth_open_model(const char *path, gguf_file **f, struct model **m, struct err *e)
{
    *f = NULL;
    *m = NULL;
    if (gguf_open(path, f, e)) return -1;
    if (model_load(*f, m, e)) {
        gguf_close(*f);
        *f = NULL;
        return -1;
    }
    return 0;
}

#endif
