/* model — hyper-parameters and weight binding for Llama-family GGUF files.
 *
 * Invariant after model_load() succeeds: every hyper-parameter is positive and bounded (n_head divisible
 * by n_head_kv, n_rot even and <= head_dim), and every bound weight is a 1-D or 2-D tensor of the exact
 * shape the forward pass indexes: matrices of a type the table of types dequantizes (model_type_supported;
 * which of those a backend computes is its caps' weight_types), norms, biases and rope_freqs of F32, with
 * data inside the file mapping and aligned to its element (model_data_align: 4 bytes for F32, 2 for the
 * others, whose blocks hold f16 values), so the backend can index weights as typed arrays without further
 * checks (a file with general.alignment = 1 could otherwise place an F32 tensor at an odd address). A
 * weight is a whole tensor or whole rows of one (phi3's fused attn_qkv / ffn_up, model_slice_rows), named
 * after that tensor. The gemma / phi3 parameters are zero for the llama family (so its backends' paths do
 * not change) and non-negative otherwise. model_check() re-verifies this (tests call it).
 */
#include "model/model.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/quant.h"

#define MODEL_MAX_DIM (1 << 20)    /* embedding, ff, vocab sizes */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_HEADS 4096

static const char *const model_arch_names[] = {"llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3"};

const char *model_arch_name(enum model_arch a)
{
    return (unsigned)a < sizeof model_arch_names / sizeof model_arch_names[0] ? model_arch_names[a] : "?";
}

int model_type_supported(enum gguf_dtype t)
{
    return quant_can_dequantize(t);
}

static const char *model_type_name(enum gguf_dtype t)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    return ti ? ti->name : "unknown";
}

/* Optional integer key `<arch>.<suffix>`; *out keeps its default when absent. */
static int model_get_int(const gguf_file *f, const char *arch, const char *suffix, int required, int64_t lo,
                         int64_t hi, int32_t *out, struct err *e)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_kv(f, key) < 0) {
        if (required) return err_set(e, "missing metadata key %s", key);
        return 0;
    }
    int64_t v;
    if (gguf_get_int(f, key, &v, e)) return -1;
    if (v < lo || v > hi) return err_set(e, "metadata %s = %lld is out of range [%lld, %lld]", key, (long long)v,
                                         (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

static int model_get_float(const gguf_file *f, const char *arch, const char *suffix, float *out, struct err *e)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_kv(f, key) < 0) return 0;
    double v;
    if (gguf_get_float(f, key, &v, e)) return -1;
    if (!(v > 0 && v < 1e30)) return err_set(e, "metadata %s = %g is out of range", key, v);
    *out = (float)v;
    return 0;
}

/* Byte alignment a tensor of type t needs so that the backend may read it as an array of its elements
 * (F32: float; F16, BF16 and the block types: 16-bit values). */
static uintptr_t model_data_align(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_F32 ? 4 : 2;
}

/* Binds tensor `name` of shape (ne0) or (ne0, ne1) (ne1 = 0: 1-D). matrix: one of the matmul types;
 * otherwise F32. optional: a missing tensor leaves w->data NULL. */
static int model_bind(const gguf_file *f, struct model_weight *w, const char *name, int64_t ne0, int64_t ne1,
                      int matrix, int optional, struct err *e)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional) return 0;
        return err_set(e, "missing tensor %s", name);
    }
    int64_t want1 = ne1 > 0 ? ne1 : 1;
    if ((int64_t)t->ne[0] != ne0 || (int64_t)t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return err_set(e, "tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]", name,
                       (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                       (unsigned long long)t->ne[3], (long long)ne0, (long long)want1);
    }
    if (matrix) {
        if (!model_type_supported(t->type)) {
            char list[256];
            gguf_dtype_names(quant_dequantize_types(), list, sizeof list);
            return err_set(e, "tensor %s has unsupported type %s (supported: %s)", name, model_type_name(t->type),
                           list);
        }
    } else if (t->type != GGUF_DTYPE_F32) {
        return err_set(e, "tensor %s has unsupported type %s (norms, biases and rope factors must be F32)", name,
                       model_type_name(t->type));
    }
    if ((uintptr_t)t->data % model_data_align(t->type))
        return err_set(e, "tensor %s (%s) at data offset %llu is not aligned to %u bytes (general.alignment = %llu)",
                       name, model_type_name(t->type), (unsigned long long)t->offset,
                       (unsigned)model_data_align(t->type), (unsigned long long)gguf_alignment(f));
    w->name = t->name;
    w->type = t->type;
    w->ne[0] = ne0;
    w->ne[1] = want1;
    w->data = t->data;
    return 0;
}

int32_t model_layer_window(const struct model_hparams *hp, int32_t il)
{
    if (hp->n_swa <= 0 || hp->swa_period < 1) return 0;
    return hp->swa_period == 1 || il % hp->swa_period != hp->swa_period - 1 ? hp->n_swa : 0;
}

/* The gemma / phi3 hyper-parameters (struct model_hparams, last group), after the common ones; the llama
 * family keeps them zero. Facts from the GGUF conventions: gemma3 every 6th layer global and local RoPE base
 * 10,000; gemma2 odd layers global; the attention scale query_pre_attn_scalar^-1/2, the key being optional
 * (llama.cpp's files lack it: 1/sqrt(head_dim), except gemma2 27B, 46 layers, whose scalar is
 * n_embd / n_head). */
static int model_read_arch_hparams(const gguf_file *f, const char *arch, struct model_hparams *hp, struct err *e)
{
    const int gemma = hp->arch == MODEL_ARCH_GEMMA3 || hp->arch == MODEL_ARCH_GEMMA2;
    hp->rope_base_local = hp->rope_base;
    if (hp->arch == MODEL_ARCH_GEMMA3 || hp->arch == MODEL_ARCH_GEMMA2 || hp->arch == MODEL_ARCH_PHI3) {
        if (model_get_int(f, arch, "attention.sliding_window", 0, 0, INT32_MAX, &hp->n_swa, e)) return -1;
        hp->swa_period = hp->arch == MODEL_ARCH_GEMMA3 ? 6 : hp->arch == MODEL_ARCH_GEMMA2 ? 2 : 1;
    }
    if (hp->arch == MODEL_ARCH_PHI3 &&
        (gguf_find_tensor(f, "rope_factors_long.weight") || gguf_find_tensor(f, "rope_factors_short.weight")))
        return err_set(e, "unsupported model: phi3 with LongRoPE factors (rope_factors_long/short.weight: the "
                          "128k-context variants)");
    if (!gemma) return 0;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_gelu = 1;
    hp->post_norms = 1;
    if (hp->arch == MODEL_ARCH_GEMMA3) hp->rope_base_local = 10000.0f;
    if (hp->arch == MODEL_ARCH_GEMMA2) {
        if (model_get_float(f, arch, "attn_logit_softcapping", &hp->att_softcap, e) ||
            model_get_float(f, arch, "final_logit_softcapping", &hp->final_softcap, e))
            return -1;
    }
    float scalar = (float)hp->head_dim;
    if (hp->arch == MODEL_ARCH_GEMMA2 && hp->n_layer == 46) scalar = (float)(hp->n_embd / hp->n_head);
    if (model_get_float(f, arch, "attention.query_pre_attn_scalar", &scalar, e)) return -1;
    if (scalar != (float)hp->head_dim) hp->att_scale = 1.0f / sqrtf(scalar);
    return 0;
}

static int model_read_hparams(const gguf_file *f, struct model_hparams *hp, struct err *e)
{
    char arch[64];
    if (gguf_get_cstr(f, "general.architecture", arch, sizeof arch, e)) return -1;
    if (!strcmp(arch, "llama"))
        hp->arch = MODEL_ARCH_LLAMA;
    else if (!strcmp(arch, "qwen2"))
        hp->arch = MODEL_ARCH_QWEN2;
    else if (!strcmp(arch, "qwen3"))
        hp->arch = MODEL_ARCH_QWEN3;
    else if (!strcmp(arch, "gemma3"))
        hp->arch = MODEL_ARCH_GEMMA3;
    else if (!strcmp(arch, "gemma2"))
        hp->arch = MODEL_ARCH_GEMMA2;
    else if (!strcmp(arch, "phi3"))
        hp->arch = MODEL_ARCH_PHI3;
    else
        return err_set(e, "unsupported architecture '%s' (supported: llama, qwen2, qwen3, gemma3, gemma2, phi3)",
                       arch);

    int32_t n_expert = 0;
    if (model_get_int(f, arch, "expert_count", 0, 0, 1 << 20, &n_expert, e)) return -1;
    if (n_expert > 0)
        return err_set(e, "unsupported model: mixture of experts (%s.expert_count = %d)", arch, (int)n_expert);

    if (model_get_int(f, arch, "context_length", 1, 1, 1 << 24, &hp->n_ctx_train, e)) return -1;
    if (model_get_int(f, arch, "embedding_length", 1, 1, MODEL_MAX_DIM, &hp->n_embd, e)) return -1;
    if (model_get_int(f, arch, "block_count", 1, 1, MODEL_MAX_LAYERS, &hp->n_layer, e)) return -1;
    if (model_get_int(f, arch, "feed_forward_length", 1, 1, MODEL_MAX_DIM, &hp->n_ff, e)) return -1;
    if (model_get_int(f, arch, "attention.head_count", 1, 1, MODEL_MAX_HEADS, &hp->n_head, e)) return -1;
    hp->n_head_kv = hp->n_head;
    if (model_get_int(f, arch, "attention.head_count_kv", 0, 1, MODEL_MAX_HEADS, &hp->n_head_kv, e)) return -1;
    if (hp->n_head % hp->n_head_kv != 0)
        return err_set(e, "%s.attention.head_count (%d) is not a multiple of head_count_kv (%d)", arch,
                       (int)hp->n_head, (int)hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (model_get_int(f, arch, "attention.key_length", 0, 1, 65536, &hp->head_dim, e)) return -1;
    int32_t v_len = hp->head_dim;
    if (model_get_int(f, arch, "attention.value_length", 0, 1, 65536, &v_len, e)) return -1;
    if (v_len != hp->head_dim)
        return err_set(e, "unsupported model: %s.attention.value_length (%d) differs from key_length (%d)", arch,
                       (int)v_len, (int)hp->head_dim);
    if (hp->head_dim < 2 || hp->head_dim % 2 != 0)
        return err_set(e, "head dimension %d must be even and >= 2", (int)hp->head_dim);
    if ((int64_t)hp->head_dim * hp->n_head > MODEL_MAX_DIM)
        return err_set(e, "head_count * key_length = %lld is too large", (long long)hp->head_dim * hp->n_head);
    hp->n_rot = hp->head_dim;
    if (model_get_int(f, arch, "rope.dimension_count", 0, 0, hp->head_dim, &hp->n_rot, e)) return -1;
    if (hp->n_rot % 2 != 0) return err_set(e, "%s.rope.dimension_count = %d must be even", arch, (int)hp->n_rot);
    hp->rope_base = 10000.0f;
    if (model_get_float(f, arch, "rope.freq_base", &hp->rope_base, e)) return -1;
    hp->rope_neox = hp->arch != MODEL_ARCH_LLAMA;
    hp->norm_eps = 1e-5f;
    if (model_get_float(f, arch, "attention.layer_norm_rms_epsilon", &hp->norm_eps, e)) return -1;
    hp->pooling = MODEL_POOLING_LAST; /* a decoder-only model without the key */
    if (model_get_int(f, arch, "pooling_type", 0, 0, INT32_MAX, &hp->pooling, e)) return -1;

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find_kv(f, key) >= 0) {
        char type[64];
        if (gguf_get_cstr(f, key, type, sizeof type, e)) return -1;
        const int linear = !strcmp(type, "linear") && hp->arch == MODEL_ARCH_GEMMA3;
        if (strcmp(type, "none") != 0 && strcmp(type, "llama3") != 0 && !linear)
            return err_set(e, "unsupported rope scaling type '%s' (%s)", type, key);
        float factor = 0.0f;
        if (linear && model_get_float(f, arch, "rope.scaling.factor", &factor, e)) return -1;
        if (linear && factor > 0 && factor != 1.0f) hp->rope_freq_scale = 1.0f / factor;
    }
    return model_read_arch_hparams(f, arch, hp, e);
}

/* w = rows [row0, row0 + n_rows) of the bound matrix `full`: a view with full's name and type (a fused
 * tensor's part; whole rows, so the view stays aligned: every row size is a multiple of the element's). */
static void model_slice_rows(const struct model_weight *full, int64_t row0, int64_t n_rows, struct model_weight *w)
{
    const uint64_t rb = gguf_row_bytes((uint32_t)full->type, (uint64_t)full->ne[0]);
    *w = *full;
    w->ne[1] = n_rows;
    w->data = (const char *)full->data + rb * (uint64_t)row0;
}

/* Binds the tensors of layer il: the llama set, plus the architecture's (qwen2 biases, qwen3/gemma3 q/k
 * norms, gemma post-norms); phi3's fused attn_qkv and ffn_up (gate rows, then up rows) become row views. */
static int model_bind_layer(const gguf_file *f, const struct model_hparams *hp, int32_t il, struct model_layer *L,
                            struct err *e)
{
    const int64_t n_embd = hp->n_embd, n_q = (int64_t)hp->n_head * hp->head_dim,
                  n_kv = (int64_t)hp->n_head_kv * hp->head_dim, n_ff = hp->n_ff;
    char name[96];
    struct model_weight fused;
#define BIND(w, suffix, ne0, ne1, matrix, optional)                                                       \
    do {                                                                                                  \
        snprintf(name, sizeof name, "blk.%d.%s", (int)il, suffix);                                        \
        if (model_bind(f, w, name, ne0, ne1, matrix, optional, e)) return -1;                             \
    } while (0)
    BIND(&L->attn_norm, "attn_norm.weight", n_embd, 0, 0, 0);
    if (hp->arch == MODEL_ARCH_PHI3 && (snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", (int)il),
                                        gguf_find_tensor(f, name))) {
        BIND(&fused, "attn_qkv.weight", n_embd, n_q + 2 * n_kv, 1, 0);
        model_slice_rows(&fused, 0, n_q, &L->wq);
        model_slice_rows(&fused, n_q, n_kv, &L->wk);
        model_slice_rows(&fused, n_q + n_kv, n_kv, &L->wv);
    } else {
        BIND(&L->wq, "attn_q.weight", n_embd, n_q, 1, 0);
        BIND(&L->wk, "attn_k.weight", n_embd, n_kv, 1, 0);
        BIND(&L->wv, "attn_v.weight", n_embd, n_kv, 1, 0);
    }
    BIND(&L->wo, "attn_output.weight", n_q, n_embd, 1, 0);
    BIND(&L->ffn_norm, "ffn_norm.weight", n_embd, 0, 0, 0);
    if (hp->arch == MODEL_ARCH_PHI3) {
        BIND(&fused, "ffn_up.weight", n_embd, 2 * n_ff, 1, 0);
        model_slice_rows(&fused, 0, n_ff, &L->w_gate);
        model_slice_rows(&fused, n_ff, n_ff, &L->w_up);
    } else {
        BIND(&L->w_gate, "ffn_gate.weight", n_embd, n_ff, 1, 0);
        BIND(&L->w_up, "ffn_up.weight", n_embd, n_ff, 1, 0);
    }
    BIND(&L->w_down, "ffn_down.weight", n_ff, n_embd, 1, 0);
    if (hp->arch == MODEL_ARCH_QWEN2) {
        BIND(&L->bq, "attn_q.bias", n_q, 0, 0, 0);
        BIND(&L->bk, "attn_k.bias", n_kv, 0, 0, 0);
        BIND(&L->bv, "attn_v.bias", n_kv, 0, 0, 0);
    }
    if (hp->arch == MODEL_ARCH_QWEN3 || hp->arch == MODEL_ARCH_GEMMA3) {
        BIND(&L->q_norm, "attn_q_norm.weight", hp->head_dim, 0, 0, 0);
        BIND(&L->k_norm, "attn_k_norm.weight", hp->head_dim, 0, 0, 0);
    }
    if (hp->post_norms) {
        BIND(&L->post_attn_norm, "post_attention_norm.weight", n_embd, 0, 0, 0);
        BIND(&L->post_ffw_norm, "post_ffw_norm.weight", n_embd, 0, 0, 0);
    }
#undef BIND
    return 0;
}

int model_load(const gguf_file *f, struct model **out, struct err *e)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m) return err_set(e, "model: out of memory");
    m->file = f;
    struct model_hparams *hp = &m->hp;
    if (model_read_hparams(f, hp, e)) goto fail;

    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) {
        err_set(e, "missing tensor token_embd.weight");
        goto fail;
    }
    if (te->ne[1] < 1 || te->ne[1] > MODEL_MAX_DIM) {
        err_set(e, "tensor token_embd.weight has %llu rows (vocabulary size out of range)",
                (unsigned long long)te->ne[1]);
        goto fail;
    }
    hp->n_vocab = (int32_t)te->ne[1];

    const int64_t n_embd = hp->n_embd, n_vocab = hp->n_vocab;
    if (model_bind(f, &m->tok_embd, "token_embd.weight", n_embd, n_vocab, 1, 0, e)) goto fail;
    if (model_bind(f, &m->output_norm, "output_norm.weight", n_embd, 0, 0, 0, e)) goto fail;
    if (model_bind(f, &m->output, "output.weight", n_embd, n_vocab, 1, 1, e)) goto fail;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if (model_bind(f, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 0, 0, 1, e)) goto fail;
    if (m->rope_freqs.data) { /* divisors of the RoPE frequencies: must be finite and positive */
        const float *rf = m->rope_freqs.data;
        for (int32_t i = 0; i < hp->n_rot / 2; i++)
            if (!(rf[i] > 0.0f) || !isfinite(rf[i])) {
                err_set(e, "tensor 'rope_freqs.weight': element %d is %g; RoPE scaling factors must be finite and > 0",
                        (int)i, (double)rf[i]);
                goto fail;
            }
    }

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        err_set(e, "model: out of memory");
        goto fail;
    }
    for (int32_t il = 0; il < hp->n_layer; il++)
        if (model_bind_layer(f, hp, il, &m->layers[il], e)) goto fail;
    if (model_check(m, e)) goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(struct model *m)
{
    if (!m) return;
    free(m->owned_data);
    free(m->layers);
    free(m);
}

static uint64_t model_weight_nbytes(const struct model_weight *w)
{
    if (!w->data) return 0;
    return gguf_row_bytes((uint32_t)w->type, (uint64_t)w->ne[0]) * (uint64_t)w->ne[1];
}

uint64_t model_weight_bytes(const struct model *m)
{
    /* token_embd is only gathered (one row per token) unless it doubles as the output head. */
    uint64_t n = model_weight_nbytes(&m->output_norm) + model_weight_nbytes(&m->output);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct model_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk,
                                           &L->bv, &L->q_norm, &L->k_norm, &L->ffn_norm, &L->w_gate,
                                           &L->w_up, &L->w_down, &L->post_attn_norm, &L->post_ffw_norm};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) n += model_weight_nbytes(ws[i]);
    }
    return n;
}

/* The KV element types, in enum kv_type's order: a head vector is groups of `group` elements of
 * group_bytes each (a scaled type's group carries its f16 scale). */
static const struct {
    const char *name;
    uint32_t group, group_bytes;
} kv_types[KV_TYPE_N] = {
    [KV_TYPE_F32] = {"f32", 1, 4},
    [KV_TYPE_F16] = {"f16", 1, 2},
    [KV_TYPE_Q8_0] = {"q8_0", 32, 34},
    [KV_TYPE_FP8] = {"fp8", 32, 34},
};

uint64_t model_kv_vec_bytes(const struct model_hparams *hp, enum kv_type t)
{
    if ((unsigned)t >= KV_TYPE_N) return 0;
    return ((uint64_t)hp->head_dim + kv_types[t].group - 1) / kv_types[t].group * kv_types[t].group_bytes;
}

uint64_t model_kv_bytes_per_token(const struct model_hparams *hp, enum kv_type t)
{
    return 2ull * (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * model_kv_vec_bytes(hp, t);
}

const char *model_kv_type_name(enum kv_type t)
{
    return (unsigned)t < KV_TYPE_N ? kv_types[t].name : "?";
}

int model_kv_type_parse(const char *s, enum kv_type *out)
{
    for (int t = 0; t < KV_TYPE_N; t++)
        if (!strcasecmp(s, kv_types[t].name)) {
            *out = (enum kv_type)t;
            return 0;
        }
    return -1;
}

static int model_check_weight(const struct model *m, const struct model_weight *w, int64_t ne0, int64_t ne1,
                              int matrix, int optional, struct err *e)
{
    if (!w->data) return optional ? 0 : err_set(e, "model_check: weight missing");
    if (w->ne[0] != ne0 || w->ne[1] != (ne1 > 0 ? ne1 : 1))
        return err_set(e, "model_check: %s has shape [%lld, %lld]", w->name, (long long)w->ne[0],
                       (long long)w->ne[1]);
    if (matrix ? !model_type_supported(w->type) : w->type != GGUF_DTYPE_F32)
        return err_set(e, "model_check: %s has type %s", w->name, model_type_name(w->type));
    if ((uintptr_t)w->data % model_data_align(w->type)) return err_set(e, "model_check: %s is misaligned", w->name);
    uint64_t rb = gguf_row_bytes((uint32_t)w->type, (uint64_t)w->ne[0]);
    if (rb == 0) return err_set(e, "model_check: %s row length %lld", w->name, (long long)w->ne[0]);
    if (m->file) {
        const struct gguf_tensor *t = gguf_find_tensor(m->file, w->name);
        /* the tensor itself, or whole rows of it (a fused tensor's view, model_slice_rows) */
        const char *a = w->data, *ta = t ? t->data : NULL;
        if (!t || a < ta || (uint64_t)(a - ta) % rb || (uint64_t)(a - ta) > t->n_bytes ||
            t->n_bytes - (uint64_t)(a - ta) < rb * (uint64_t)w->ne[1])
            return err_set(e, "model_check: %s does not match the file's tensor table", w->name);
    }
    return 0;
}

int model_check(const struct model *m, struct err *e)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->n_vocab < 1 || hp->n_embd < 1 || hp->n_layer < 1 || hp->n_ff < 1 || hp->n_head < 1 ||
        hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv || hp->head_dim < 2 || hp->head_dim % 2 ||
        hp->n_rot < 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 || hp->n_ctx_train < 1 || !(hp->norm_eps > 0) ||
        !(hp->embd_scale >= 0) || !(hp->att_scale >= 0) || !(hp->att_softcap >= 0) || !(hp->final_softcap >= 0) ||
        hp->n_swa < 0 || hp->swa_period < 0 || !(hp->rope_base_local > 0) || !(hp->rope_freq_scale >= 0))
        return err_set(e, "model_check: hyper-parameters out of range");
    const int64_t n_embd = hp->n_embd, n_q = (int64_t)hp->n_head * hp->head_dim,
                  n_kv = (int64_t)hp->n_head_kv * hp->head_dim;
    if (model_check_weight(m, &m->tok_embd, n_embd, hp->n_vocab, 1, 0, e) ||
        model_check_weight(m, &m->output_norm, n_embd, 0, 0, 0, e) ||
        model_check_weight(m, &m->output, n_embd, hp->n_vocab, 1, 0, e) ||
        model_check_weight(m, &m->rope_freqs, hp->n_rot / 2, 0, 0, 1, e))
        return -1;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        int qwen2 = hp->arch == MODEL_ARCH_QWEN2,
            qk_norm = hp->arch == MODEL_ARCH_QWEN3 || hp->arch == MODEL_ARCH_GEMMA3;
        if (model_check_weight(m, &L->attn_norm, n_embd, 0, 0, 0, e) ||
            model_check_weight(m, &L->wq, n_embd, n_q, 1, 0, e) ||
            model_check_weight(m, &L->wk, n_embd, n_kv, 1, 0, e) ||
            model_check_weight(m, &L->wv, n_embd, n_kv, 1, 0, e) ||
            model_check_weight(m, &L->wo, n_q, n_embd, 1, 0, e) ||
            model_check_weight(m, &L->ffn_norm, n_embd, 0, 0, 0, e) ||
            model_check_weight(m, &L->w_gate, n_embd, hp->n_ff, 1, 0, e) ||
            model_check_weight(m, &L->w_up, n_embd, hp->n_ff, 1, 0, e) ||
            model_check_weight(m, &L->w_down, hp->n_ff, n_embd, 1, 0, e) ||
            model_check_weight(m, &L->bq, n_q, 0, 0, !qwen2, e) ||
            model_check_weight(m, &L->bk, n_kv, 0, 0, !qwen2, e) ||
            model_check_weight(m, &L->bv, n_kv, 0, 0, !qwen2, e) ||
            model_check_weight(m, &L->q_norm, hp->head_dim, 0, 0, !qk_norm, e) ||
            model_check_weight(m, &L->k_norm, hp->head_dim, 0, 0, !qk_norm, e) ||
            model_check_weight(m, &L->post_attn_norm, n_embd, 0, 0, !hp->post_norms, e) ||
            model_check_weight(m, &L->post_ffw_norm, n_embd, 0, 0, !hp->post_norms, e))
            return err_prefix(e, "layer %d", (int)il);
    }
    return 0;
}

/* Every weight of a model, for walking them uniformly. Returns the count written (<= cap). */
static size_t model_all_weights(struct model *m, struct model_weight **ws, size_t cap)
{
    size_t n = 0;
#define ADD(w) do { if (n < cap) ws[n] = (w); n++; } while (0)
    ADD(&m->tok_embd);
    ADD(&m->output_norm);
    ADD(&m->output);
    ADD(&m->rope_freqs);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        ADD(&L->attn_norm); ADD(&L->wq); ADD(&L->wk); ADD(&L->wv); ADD(&L->wo); ADD(&L->bq); ADD(&L->bk);
        ADD(&L->bv); ADD(&L->q_norm); ADD(&L->k_norm); ADD(&L->ffn_norm); ADD(&L->w_gate); ADD(&L->w_up);
        ADD(&L->w_down); ADD(&L->post_attn_norm); ADD(&L->post_ffw_norm);
    }
#undef ADD
    return n;
}

int model_clone_f32(const struct model *src, struct model **out, struct err *e)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    struct model_weight **ws = NULL;
    if (!m) return err_set(e, "model: out of memory");
    m->hp = src->hp;
    m->tok_embd = src->tok_embd;
    m->output_norm = src->output_norm;
    m->output = src->output;
    m->rope_freqs = src->rope_freqs;
    m->layers = malloc((size_t)src->hp.n_layer * sizeof *m->layers);
    size_t cap = 4 + 16 * (size_t)src->hp.n_layer;
    ws = malloc(cap * sizeof *ws);
    if (!m->layers || !ws) {
        err_set(e, "model: out of memory");
        goto fail;
    }
    memcpy(m->layers, src->layers, (size_t)src->hp.n_layer * sizeof *m->layers);
    size_t n = model_all_weights(m, ws, cap);
    int tied = src->output.data == src->tok_embd.data;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ws[i]->data || (tied && ws[i] == &m->output)) continue;
        total += (uint64_t)ws[i]->ne[0] * (uint64_t)ws[i]->ne[1] * 4;
    }
    m->owned_data = malloc(total ? total : 1);
    if (!m->owned_data) {
        err_set(e, "model: out of memory for an F32 copy of %llu bytes", (unsigned long long)total);
        goto fail;
    }
    float *dst = m->owned_data;
    for (size_t i = 0; i < n; i++) {
        struct model_weight *w = ws[i];
        if (!w->data || (tied && w == &m->output)) continue;
        uint64_t rb = gguf_row_bytes((uint32_t)w->type, (uint64_t)w->ne[0]);
        for (int64_t r = 0; r < w->ne[1]; r++) {
            if (quant_dequantize_row(w->type, (const char *)w->data + rb * (uint64_t)r, dst + r * w->ne[0],
                                     w->ne[0])) {
                err_set(e, "model: cannot dequantize %s (type %s)", w->name, model_type_name(w->type));
                goto fail;
            }
        }
        w->data = dst;
        w->type = GGUF_DTYPE_F32;
        dst += w->ne[0] * w->ne[1];
    }
    if (tied) m->output = m->tok_embd;
    free(ws);
    ws = NULL;
    if (model_check(m, e)) goto fail;
    *out = m;
    return 0;
fail:
    free(ws);
    model_free(m);
    return -1;
}
