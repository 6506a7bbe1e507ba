/* qmix — see qmix.h for the rules this file implements. */
#include "gguf/qmix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct qmix_type qmix_types[] = {
    {"f32", QMIX_F32, GGUF_DTYPE_F32},       {"f16", QMIX_F16, GGUF_DTYPE_F16},
    {"bf16", QMIX_BF16, GGUF_DTYPE_BF16},    {"q8_0", QMIX_Q8_0, GGUF_DTYPE_Q8_0},
    {"q4_0", QMIX_Q4_0, GGUF_DTYPE_Q4_0},    {"q4_1", QMIX_Q4_1, GGUF_DTYPE_Q4_1},
    {"q5_0", QMIX_Q5_0, GGUF_DTYPE_Q5_0},    {"q5_1", QMIX_Q5_1, GGUF_DTYPE_Q5_1},
    {"q2_k", QMIX_Q2_K, GGUF_DTYPE_Q2_K},    {"q3_k_s", QMIX_Q3_K_S, GGUF_DTYPE_Q3_K},
    {"q3_k_m", QMIX_Q3_K_M, GGUF_DTYPE_Q3_K}, {"q3_k_l", QMIX_Q3_K_L, GGUF_DTYPE_Q3_K},
    {"q4_k_s", QMIX_Q4_K_S, GGUF_DTYPE_Q4_K}, {"q4_k_m", QMIX_Q4_K_M, GGUF_DTYPE_Q4_K},
    {"q5_k_s", QMIX_Q5_K_S, GGUF_DTYPE_Q5_K}, {"q5_k_m", QMIX_Q5_K_M, GGUF_DTYPE_Q5_K},
    {"q6_k", QMIX_Q6_K, GGUF_DTYPE_Q6_K},     {"iq4_nl", QMIX_IQ4_NL, GGUF_DTYPE_IQ4_NL},
    {"iq4_xs", QMIX_IQ4_XS, GGUF_DTYPE_IQ4_XS},
};

#define QMIX_N (sizeof qmix_types / sizeof qmix_types[0])

const struct qmix_type *qmix_find(const char *name)
{
    for (size_t i = 0; name && i < QMIX_N; i++)
        if (!strcasecmp(qmix_types[i].name, name)) return &qmix_types[i];
    return NULL;
}

size_t qmix_n_types(void)
{
    return QMIX_N;
}

const struct qmix_type *qmix_type_at(size_t i)
{
    return i < QMIX_N ? &qmix_types[i] : NULL;
}

const char *qmix_names(void)
{
    static char buf[256];
    if (!buf[0]) {
        size_t off = 0;
        for (size_t i = 0; i < QMIX_N && off < sizeof buf; i++)
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i ? ", " : "", qmix_types[i].name);
    }
    return buf;
}

int qmix_is_float(const struct qmix_type *t)
{
    return t->base == GGUF_DTYPE_F32 || t->base == GGUF_DTYPE_F16 || t->base == GGUF_DTYPE_BF16;
}

static int qmix_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

int qmix_converts(const char *name, uint32_t n_dims)
{
    return n_dims >= 2 && qmix_ends_with(name, "weight") && !strstr(name, "_norm.weight") &&
           !strstr(name, "ffn_gate_inp.weight") && strcmp(name, "position_embd.weight") != 0 &&
           strcmp(name, "token_types.weight") != 0;
}

/* llama.cpp's layers that get more bits in the _M mixes: the first and last eighth, every third between. */
static int qmix_more_bits(uint32_t il, uint32_t n_layer)
{
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

/* The output head's type: Q6_K, or Q8_0 for a q8_0 target or a row that is not whole base blocks. */
static enum gguf_dtype qmix_head_type(const struct qmix_type *t, uint64_t ne0)
{
    const struct gguf_dtype_info *bi = gguf_dtype_info(t->base);
    if (ne0 % bi->block_size != 0 || t->base == GGUF_DTYPE_Q8_0) return GGUF_DTYPE_Q8_0;
    return GGUF_DTYPE_Q6_K;
}

static enum gguf_dtype qmix_attn_v(enum qmix_ftype f, const struct qmix_model *m, uint32_t il, enum gguf_dtype t)
{
    uint32_t n_gqa = m->n_head && m->n_head_kv ? m->n_head / m->n_head_kv : 1;
    switch (f) {
    case QMIX_Q2_K: return n_gqa >= 4 ? GGUF_DTYPE_Q4_K : GGUF_DTYPE_Q3_K;
    case QMIX_Q3_K_M: return il < 2 ? GGUF_DTYPE_Q5_K : GGUF_DTYPE_Q4_K;
    case QMIX_Q3_K_L: return GGUF_DTYPE_Q5_K;
    case QMIX_Q4_K_S: return il < 4 ? GGUF_DTYPE_Q5_K : t;
    case QMIX_Q4_K_M:
    case QMIX_Q5_K_M: return qmix_more_bits(il, m->n_layer) ? GGUF_DTYPE_Q6_K : t;
    case QMIX_IQ4_NL:
    case QMIX_IQ4_XS: return n_gqa >= 4 ? GGUF_DTYPE_Q5_K : t;
    default: return t;
    }
}

static enum gguf_dtype qmix_ffn_down(enum qmix_ftype f, const struct qmix_model *m, uint32_t il, enum gguf_dtype t)
{
    switch (f) {
    case QMIX_Q2_K: return GGUF_DTYPE_Q3_K;
    case QMIX_Q3_K_M: return il < m->n_layer / 16 ? GGUF_DTYPE_Q5_K : GGUF_DTYPE_Q4_K;
    case QMIX_Q3_K_L: return GGUF_DTYPE_Q5_K;
    case QMIX_Q4_K_S:
    case QMIX_IQ4_NL:
    case QMIX_IQ4_XS: return il < m->n_layer / 8 ? GGUF_DTYPE_Q5_K : t;
    case QMIX_Q4_K_M:
    case QMIX_Q5_K_M: return qmix_more_bits(il, m->n_layer) ? GGUF_DTYPE_Q6_K : t;
    default: return t;
    }
}

static enum gguf_dtype qmix_attn_output(enum qmix_ftype f, enum gguf_dtype t)
{
    switch (f) {
    case QMIX_Q2_K: return GGUF_DTYPE_Q3_K;
    case QMIX_Q3_K_M: return GGUF_DTYPE_Q4_K;
    case QMIX_Q3_K_L: return GGUF_DTYPE_Q5_K;
    default: return t;
    }
}

static enum gguf_dtype qmix_attn_qkv(enum qmix_ftype f, enum gguf_dtype t)
{
    switch (f) {
    case QMIX_Q3_K_M:
    case QMIX_Q3_K_L: return GGUF_DTYPE_Q4_K;
    case QMIX_Q4_K_M: return GGUF_DTYPE_Q5_K;
    case QMIX_Q5_K_M: return GGUF_DTYPE_Q6_K;
    default: return t;
    }
}

enum gguf_dtype qmix_rule_type(const struct qmix_type *t, const struct qmix_model *m, const char *name, uint64_t ne0)
{
    if (m->pure || qmix_is_float(t)) return t->base;
    if (!strcmp(name, "output.weight") || (!m->has_output && !strcmp(name, "token_embd.weight")))
        return qmix_head_type(t, ne0);
    unsigned il = 0;
    if (sscanf(name, "blk.%u.", &il) != 1) il = 0;
    if (strstr(name, "attn_v.weight")) return qmix_attn_v(t->ftype, m, il, t->base);
    if (strstr(name, "ffn_down")) return qmix_ffn_down(t->ftype, m, il, t->base);
    if (strstr(name, "attn_output.weight")) return qmix_attn_output(t->ftype, t->base);
    if (strstr(name, "attn_qkv.weight")) return qmix_attn_qkv(t->ftype, t->base);
    return t->base;
}

enum gguf_dtype qmix_fallback(enum gguf_dtype t, uint64_t ne0)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info(t);
    if (ti && ne0 % ti->block_size == 0) return t;
    enum gguf_dtype f;
    switch (t) {
    case GGUF_DTYPE_Q2_K:
    case GGUF_DTYPE_Q3_K:
    case GGUF_DTYPE_IQ4_XS: f = GGUF_DTYPE_IQ4_NL; break;
    case GGUF_DTYPE_Q4_K: f = GGUF_DTYPE_Q5_0; break;
    case GGUF_DTYPE_Q5_K: f = GGUF_DTYPE_Q5_1; break;
    case GGUF_DTYPE_Q6_K: f = GGUF_DTYPE_Q8_0; break;
    default: f = GGUF_DTYPE_F16; break;
    }
    return ne0 % gguf_dtype_info(f)->block_size == 0 ? f : GGUF_DTYPE_F16;
}

enum gguf_dtype qmix_tensor_type(const struct qmix_type *t, const struct qmix_model *m, const char *name, uint64_t ne0)
{
    return qmix_fallback(qmix_rule_type(t, m, name, ne0), ne0);
}
