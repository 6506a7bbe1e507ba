/* fuzz_model — libFuzzer target for model hyper-parameter and tensor-shape validation (model/model), above
 * the GGUF container that fuzz_gguf covers.
 *
 * An input starting with "GGUF" is a whole file. Any other input describes a model that the target writes
 * (gguf_writer, in memory) before loading it: byte by byte it picks the architecture, a consistent small
 * shape, then for every hyper-parameter key whether it is kept, left out, or replaced (0, a huge value, a
 * negative one, a float, a string), and for every tensor whether it is kept, left out, given a wrong shape
 * (a dimension off by one, swapped, an extra one) or another type. Tensors stay small whatever the
 * hyper-parameters claim, so model_load has to catch every disagreement.
 *
 * For any input: gguf_open_memory and model_load either fail with a message, or the model passes
 * model_check, every weight it binds lies inside the file (ASan checks the bytes touched), and its sizes
 * can be computed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static volatile uint8_t sink;

/* The input as a stream of bytes (0 once it is used up). */
struct stream {
    const uint8_t *p;
    size_t n;
};

static uint8_t next(struct stream *s)
{
    if (!s->n) return 0;
    s->n--;
    return *s->p++;
}

static void touch(const struct model_weight *w)
{
    if (!w->data) return;
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)w->type);
    REQUIRE(ti != NULL);
    uint64_t bytes = gguf_row_bytes(w->type, (uint64_t)w->ne[0]) * (uint64_t)w->ne[1];
    REQUIRE(bytes > 0);
    const uint8_t *b = w->data;
    sink ^= b[0];
    sink ^= b[bytes - 1];
}

static void check_loaded(const gguf_file *f)
{
    struct model *m = NULL;
    struct err e;
    e.msg[0] = '\0';
    if (model_load(f, &m, &e) != 0) {
        REQUIRE(m == NULL && e.msg[0]);
        return;
    }
    REQUIRE(model_check(m, &e) == 0);
    const struct model_hparams *hp = &m->hp;
    REQUIRE(hp->n_embd > 0 && hp->n_layer > 0 && hp->n_head > 0 && hp->n_head_kv > 0 && hp->head_dim >= 2);
    REQUIRE(hp->n_head % hp->n_head_kv == 0 && hp->n_vocab > 0 && hp->n_ctx_train > 0);
    touch(&m->tok_embd);
    touch(&m->output);
    touch(&m->output_norm);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *w[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_norm,
                                          &L->w_gate, &L->w_up, &L->w_down, &L->bq, &L->bk, &L->bv, &L->q_norm,
                                          &L->k_norm};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) touch(w[i]);
    }
    sink ^= (uint8_t)model_weight_bytes(m);
    for (int t = 0; t < 3; t++) sink ^= (uint8_t)model_kv_bytes_per_token(hp, (enum kv_type)t);
    model_free(m);
}

/* One hyper-parameter key: kept as v, left out, or replaced, as the next byte says. */
static void put_key(gguf_writer *w, struct stream *s, const char *arch, const char *suffix, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    struct err e;
    uint8_t mode = next(s);
    switch (mode % 16) {
    case 1: return; /* left out */
    case 2: gguf_writer_set_u32(w, key, 0, &e); return;
    case 3: gguf_writer_set_u32(w, key, UINT32_MAX, &e); return;
    case 4: gguf_writer_set_i32(w, key, -(int32_t)next(s) - 1, &e); return;
    case 5: gguf_writer_set_u64(w, key, (uint64_t)1 << (32 + next(s) % 32), &e); return;
    case 6: gguf_writer_set_f32(w, key, (float)v + 0.5f, &e); return;
    case 7: gguf_writer_set_str(w, key, "12", 2, &e); return;
    case 8: gguf_writer_set_u32(w, key, v + 1, &e); return;
    case 9: gguf_writer_set_u32(w, key, next(s), &e); return;
    case 10: gguf_writer_set_u32(w, key, (uint32_t)next(s) << 16 | next(s), &e); return;
    default: gguf_writer_set_u32(w, key, v, &e); return;
    }
}

static void put_float(gguf_writer *w, struct stream *s, const char *arch, const char *suffix, float v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    struct err e;
    uint8_t mode = next(s);
    if (mode % 8 == 1) return;
    if (mode % 8 == 2) {
        uint32_t bits = (uint32_t)next(s) << 24 | (uint32_t)next(s) << 16 | (uint32_t)next(s) << 8 | next(s);
        memcpy(&v, &bits, 4); /* any float: NaN, inf, negative, denormal */
    }
    gguf_writer_set_f32(w, key, v, &e);
}

/* One tensor of shape (ne0, ne1) (ne1 0: 1-D): kept, left out, reshaped or retyped as the next byte says. */
static void put_tensor(gguf_writer *w, struct stream *s, const char *name, uint64_t ne0, uint64_t ne1, int matrix)
{
    uint64_t ne[3] = {ne0, ne1 ? ne1 : 1, 1};
    uint32_t n_dims = ne1 ? 2 : 1;
    enum gguf_dtype t = GGUF_DTYPE_F32;
    uint8_t mode = next(s);
    switch (mode % 24) {
    case 1: return; /* left out */
    case 2: ne[0]++; break;
    case 3: ne[1]++; break;
    case 4: ne[0] = ne[1], ne[1] = ne0, n_dims = 2; break;
    case 5: n_dims = 3, ne[2] = 2; break;
    case 6: n_dims = 1; break;
    case 7: t = GGUF_DTYPE_F16; break;
    case 8: t = GGUF_DTYPE_Q8_0; break;
    case 9: t = GGUF_DTYPE_Q4_0; break;
    case 10: t = GGUF_DTYPE_I32; break;
    case 11: t = GGUF_DTYPE_BF16; break;
    default: t = matrix && (mode & 32) ? GGUF_DTYPE_F16 : GGUF_DTYPE_F32; break;
    }
    struct err e;
    gguf_writer_add_tensor(w, name, t, n_dims, ne, NULL, &e); /* refused shapes (a block type) are skipped */
}

static int fill(void *user, uint64_t index, void *dst, uint64_t n, struct err *e)
{
    (void)e;
    const struct stream *s = user;
    uint8_t v = (uint8_t)(index * 29 + (s->n ? s->p[0] : 0));
    memset(dst, v | 0x3c, n); /* finite, positive values in F32, F16 and BF16 alike */
    return 0;
}

static void build_and_load(struct stream *s)
{
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gpt2"};
    uint8_t a = next(s);
    const char *arch = archs[a % 4];
    uint32_t head_dim = 2 * (1 + next(s) % 16), n_head_kv = 1 + next(s) % 3, group = 1 + next(s) % 3;
    uint32_t n_head = n_head_kv * group, n_embd = n_head * head_dim, n_ff = 1 + next(s) % 96;
    uint32_t n_layer = 1 + next(s) % 3, n_vocab = 1 + next(s) % 64, n_ctx = 1 + next(s) * 8u;
    if (n_embd > 256) n_embd = 256; /* the shape check must still tell */
    gguf_writer *w = gguf_writer_init();
    REQUIRE(w);
    struct err e;
    gguf_writer_set_str(w, "general.architecture", arch, strlen(arch), &e);
    put_key(w, s, arch, "context_length", n_ctx);
    put_key(w, s, arch, "embedding_length", n_embd);
    put_key(w, s, arch, "block_count", n_layer);
    put_key(w, s, arch, "feed_forward_length", n_ff);
    put_key(w, s, arch, "attention.head_count", n_head);
    put_key(w, s, arch, "attention.head_count_kv", n_head_kv);
    put_key(w, s, arch, "attention.key_length", head_dim);
    put_key(w, s, arch, "attention.value_length", head_dim);
    put_key(w, s, arch, "rope.dimension_count", head_dim);
    put_key(w, s, arch, "expert_count", 0);
    put_float(w, s, arch, "rope.freq_base", 10000.0f);
    put_float(w, s, arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    uint64_t n_q = (uint64_t)n_head * head_dim, n_kv = (uint64_t)n_head_kv * head_dim;
    put_tensor(w, s, "token_embd.weight", n_embd, n_vocab, 1);
    put_tensor(w, s, "output_norm.weight", n_embd, 0, 0);
    put_tensor(w, s, "output.weight", n_embd, n_vocab, 1);
    if (next(s) & 1) put_tensor(w, s, "rope_freqs.weight", head_dim / 2, 0, 0);
    for (uint32_t l = 0; l < n_layer; l++) {
        char name[64];
#define T(suffix, ne0, ne1, matrix)                                                                           \
    do {                                                                                                     \
        snprintf(name, sizeof name, "blk.%u.%s", l, suffix);                                                 \
        put_tensor(w, s, name, ne0, ne1, matrix);                                                            \
    } while (0)
        T("attn_norm.weight", n_embd, 0, 0);
        T("attn_q.weight", n_embd, n_q, 1);
        T("attn_k.weight", n_embd, n_kv, 1);
        T("attn_v.weight", n_embd, n_kv, 1);
        T("attn_output.weight", n_q, n_embd, 1);
        T("ffn_norm.weight", n_embd, 0, 0);
        T("ffn_gate.weight", n_embd, n_ff, 1);
        T("ffn_up.weight", n_embd, n_ff, 1);
        T("ffn_down.weight", n_ff, n_embd, 1);
        if (a % 4 == 1) {
            T("attn_q.bias", n_q, 0, 0);
            T("attn_k.bias", n_kv, 0, 0);
            T("attn_v.bias", n_kv, 0, 0);
        } else if (a % 4 == 2) {
            T("attn_q_norm.weight", head_dim, 0, 0);
            T("attn_k_norm.weight", head_dim, 0, 0);
        }
#undef T
    }
    void *buf = NULL;
    size_t n = 0;
    if (gguf_writer_write_mem(w, &buf, &n, fill, s, &e) == 0) {
        gguf_file *f = NULL;
        REQUIRE(gguf_open_memory(buf, n, &f, &e) == 0); /* what the writer writes, the reader reads */
        check_loaded(f);
        gguf_close(f);
        free(buf);
    }
    gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        gguf_file *f = NULL;
        struct err e;
        if (gguf_open_memory(data, size, &f, &e) == 0) {
            check_loaded(f);
            gguf_close(f);
        }
        return 0;
    }
    struct stream s = {data, size};
    build_and_load(&s);
    return 0;
}
