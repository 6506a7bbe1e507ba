/* test_model — hyper-parameters and weight binding: stories260K, SmolLM2 (when fetched), synthetic
 * llama/qwen2/qwen3 files, defaults of optional keys, tied embeddings, rope_freqs, the F32 clone, and the
 * errors for unsupported architectures and types, missing tensors and inconsistent heads. */
#include <math.h>
#include <string.h>

#include "gguf/quant.h"
#include "model/model.h"
#include "synth_util.h"
#include "test.h"

TEST(test_stories260K_hparams)
{
    struct err e = {{0}};
    gguf_file *f = NULL;
    struct model *m = NULL;
    CHECK_MSG(synth_open_model(test_shared("models/stories260K.gguf"), &f, &m, &e) == 0, "%.900s", e.msg);
    const struct model_hparams *hp = &m->hp;
    CHECK(hp->arch == MODEL_ARCH_LLAMA);
    CHECK_STR(model_arch_name(hp->arch), "llama");
    CHECK_EQ_INT(hp->n_vocab, 512);
    CHECK_EQ_INT(hp->n_ctx_train, 2048);
    CHECK_EQ_INT(hp->n_embd, 64);
    CHECK_EQ_INT(hp->n_layer, 5);
    CHECK_EQ_INT(hp->n_head, 8);
    CHECK_EQ_INT(hp->n_head_kv, 4);
    CHECK_EQ_INT(hp->head_dim, 8);
    CHECK_EQ_INT(hp->n_ff, 172);
    CHECK_EQ_INT(hp->n_rot, 8);
    CHECK(hp->rope_base == 10000.0f);
    CHECK(hp->rope_neox == 0);
    CHECK(fabsf(hp->norm_eps - 1e-5f) < 1e-9f);
    CHECK(m->output.data != m->tok_embd.data); /* has its own output.weight */
    CHECK(m->rope_freqs.data == NULL);
    CHECK(m->layers[4].w_down.type == GGUF_DTYPE_F32 && m->layers[4].w_down.ne[0] == 172);
    CHECK(m->layers[0].bq.data == NULL && m->layers[0].q_norm.data == NULL);
    CHECK(model_check(m, &e) == 0);
    /* weights read per step: every layer matrix + norms + output (token_embd is only gathered) */
    uint64_t per_layer = 4ull * (64 + 64 * 64 + 2 * 64 * 32 + 64 * 64 + 64 + 3 * 64 * 172);
    CHECK_EQ_INT(model_weight_bytes(m), 5 * per_layer + 4ull * (64 + 64 * 512));
    CHECK_EQ_INT(model_kv_bytes_per_token(hp, KV_TYPE_F32), 2 * 5 * 4 * 8 * 4);
    CHECK_EQ_INT(model_kv_bytes_per_token(hp, KV_TYPE_F16), 2 * 5 * 4 * 8 * 2);
    model_free(m);
    gguf_close(f);
}

TEST(test_smollm2_hparams)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) SKIP("%s absent (run scripts/fetch-model)", path);
    struct err e = {{0}};
    gguf_file *f = NULL;
    struct model *m = NULL;
    CHECK_MSG(synth_open_model(path, &f, &m, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(m->hp.n_layer, 30);
    CHECK_EQ_INT(m->hp.n_head, 9);
    CHECK_EQ_INT(m->hp.n_head_kv, 3);
    CHECK_EQ_INT(m->hp.head_dim, 64);
    CHECK_EQ_INT(m->hp.n_vocab, 49152);
    CHECK(m->hp.rope_base == 100000.0f);
    CHECK(m->output.data == m->tok_embd.data); /* tied */
    CHECK(m->tok_embd.type == GGUF_DTYPE_Q8_0);
    CHECK(m->layers[0].wq.type == GGUF_DTYPE_Q4_1);
    CHECK_EQ_INT(model_kv_bytes_per_token(&m->hp, KV_TYPE_Q8_0), 2 * 30 * 3 * 68);
    model_free(m);
    gguf_close(f);
}

static int build(struct synth_cfg c, struct synth_model *sm, struct err *e)
{
    return synth_build(&c, 1, sm, e);
}

TEST(test_synthetic_archs)
{
    struct err e = {{0}};
    struct synth_model sm;
    struct synth_cfg c = synth_default();
    c.arch = "qwen2";
    int rc = build(c, &sm, &e);
    if (rc) synth_free(&sm);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    CHECK(sm.m->hp.arch == MODEL_ARCH_QWEN2 && sm.m->hp.rope_neox == 1);
    CHECK(sm.m->layers[1].bq.data && sm.m->layers[1].bk.data && sm.m->layers[1].bv.data);
    CHECK(sm.m->hp.rope_base == 50000.0f && fabsf(sm.m->hp.norm_eps - 1e-6f) < 1e-12f);
    synth_free(&sm);

    c.arch = "qwen3";
    c.head_dim = 32; /* key_length != n_embd / n_head */
    rc = build(c, &sm, &e);
    if (rc) synth_free(&sm);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    CHECK(sm.m->hp.arch == MODEL_ARCH_QWEN3 && sm.m->hp.rope_neox == 1 && sm.m->hp.head_dim == 32);
    CHECK(sm.m->layers[0].q_norm.data && sm.m->layers[0].k_norm.data && !sm.m->layers[0].bq.data);
    CHECK(sm.m->layers[0].wq.ne[1] == 4 * 32 && sm.m->layers[0].wo.ne[0] == 4 * 32);
    synth_free(&sm);

    c = synth_default();
    c.tied = 1;
    c.rope_freqs = 1;
    c.type = GGUF_DTYPE_Q4_0;
    rc = build(c, &sm, &e);
    if (rc) synth_free(&sm);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    CHECK(sm.m->output.data == sm.m->tok_embd.data && sm.m->output.type == GGUF_DTYPE_Q4_0);
    CHECK(sm.m->rope_freqs.data && ((const float *)sm.m->rope_freqs.data)[1] == 2.0f);
    /* the F32 clone: same shapes, F32 types, dequantized values, still tied */
    struct model *f32 = NULL;
    rc = model_clone_f32(sm.m, &f32, &e);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    CHECK(f32->output.data == f32->tok_embd.data && f32->tok_embd.type == GGUF_DTYPE_F32);
    CHECK(f32->layers[1].w_down.type == GGUF_DTYPE_F32 && f32->file == NULL);
    float row[96];
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q4_0, sm.m->layers[1].w_down.data, row, 96) == 0);
    CHECK(memcmp(row, f32->layers[1].w_down.data, sizeof row) == 0);
    CHECK(model_check(f32, &e) == 0);
    model_free(f32);
    synth_free(&sm);
}

/* issue 11's architectures: the hyper-parameters each implies, the layers' windows, the extra tensors, and
 * phi3's fused tensors bound as row views (which model_check and the F32 clone accept). */
TEST(test_gemma_phi3_archs)
{
    struct err e = {{0}};
    struct synth_model sm;
    struct synth_cfg c = synth_default();
    c.arch = "gemma3";
    c.n_layer = 7;
    c.head_dim = 32;
    c.n_swa = 12;
    c.tied = 1;
    CHECK_MSG(build(c, &sm, &e) == 0, "%.900s", e.msg);
    const struct model_hparams *hp = &sm.m->hp;
    CHECK(hp->arch == MODEL_ARCH_GEMMA3 && hp->rope_neox && hp->ffn_gelu && hp->post_norms);
    CHECK(hp->embd_scale == sqrtf(64.0f) && hp->att_scale == 0 && hp->att_softcap == 0 && hp->final_softcap == 0);
    CHECK(hp->rope_base == 50000.0f && hp->rope_base_local == 10000.0f && hp->n_swa == 12);
    for (int il = 0; il < 7; il++) CHECK_EQ_INT(model_layer_window(hp, il), il == 5 ? 0 : 12);
    CHECK(sm.m->layers[6].q_norm.data && sm.m->layers[6].post_attn_norm.data && sm.m->layers[6].post_ffw_norm.data);
    CHECK(sm.m->output.data == sm.m->tok_embd.data && !strcmp(model_arch_name(hp->arch), "gemma3"));
    synth_free(&sm);

    c = synth_default();
    c.arch = "gemma2";
    c.n_layer = 3;
    c.n_swa = 9;
    c.att_softcap = 50.0f;
    c.final_softcap = 30.0f;
    CHECK_MSG(build(c, &sm, &e) == 0, "%.900s", e.msg);
    hp = &sm.m->hp;
    CHECK(hp->arch == MODEL_ARCH_GEMMA2 && hp->att_softcap == 50.0f && hp->final_softcap == 30.0f);
    CHECK(hp->rope_base_local == hp->rope_base && !sm.m->layers[0].q_norm.data && sm.m->layers[2].post_ffw_norm.data);
    CHECK(model_layer_window(hp, 0) == 9 && model_layer_window(hp, 1) == 0 && model_layer_window(hp, 2) == 9);
    synth_free(&sm);

    c = synth_default();
    c.arch = "phi3";
    c.type = GGUF_DTYPE_Q8_0;
    c.n_swa = 7;
    CHECK_MSG(build(c, &sm, &e) == 0, "%.900s", e.msg);
    hp = &sm.m->hp;
    CHECK(hp->arch == MODEL_ARCH_PHI3 && hp->rope_neox && !hp->ffn_gelu && !hp->post_norms && hp->embd_scale == 0);
    CHECK(model_layer_window(hp, 0) == 7 && model_layer_window(hp, 1) == 7);
    const struct model_layer *L = &sm.m->layers[1];
    const uint64_t rb = gguf_row_bytes(GGUF_DTYPE_Q8_0, 64);
    const struct gguf_tensor *qkv = gguf_find_tensor(sm.f, "blk.1.attn_qkv.weight"),
                             *up = gguf_find_tensor(sm.f, "blk.1.ffn_up.weight");
    CHECK(qkv && up && L->wq.data == qkv->data && L->wq.ne[1] == 64 && L->wk.ne[1] == 32 && L->wv.ne[1] == 32);
    CHECK((const char *)L->wk.data == (const char *)qkv->data + 64 * rb);
    CHECK((const char *)L->wv.data == (const char *)qkv->data + 96 * rb);
    CHECK(L->w_gate.data == up->data && (const char *)L->w_up.data == (const char *)up->data + 96 * rb);
    CHECK(L->w_gate.ne[1] == 96 && L->w_up.ne[1] == 96 && !strcmp(L->w_up.name, "blk.1.ffn_up.weight"));
    CHECK(model_check(sm.m, &e) == 0);
    CHECK(model_weight_bytes(sm.m) > 0);
    struct model *f32 = NULL;
    CHECK_MSG(model_clone_f32(sm.m, &f32, &e) == 0, "%.900s", e.msg);
    float row[64];
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q8_0, (const char *)up->data + 100 * rb, row, 64) == 0);
    CHECK(memcmp(row, (const float *)f32->layers[1].w_up.data + 4 * 64, sizeof row) == 0);
    model_free(f32);
    synth_free(&sm);
    /* a view reaching past its tensor is caught */
    c.n_swa = 0;
    CHECK_MSG(build(c, &sm, &e) == 0, "%.900s", e.msg);
    sm.m->layers[0].wv.ne[1] = 33;
    CHECK(model_check(sm.m, &e) != 0);
    synth_free(&sm);
}

TEST(test_defaults)
{
    struct err e = {{0}};
    struct synth_model sm;
    struct synth_cfg c = synth_default();
    c.omit_optional = 1;
    c.n_head_kv = c.n_head; /* head_count_kv absent: defaults to head_count */
    int rc = build(c, &sm, &e);
    if (rc) synth_free(&sm);
    CHECK_MSG(rc == 0, "%.900s", e.msg);
    CHECK_EQ_INT(sm.m->hp.n_head_kv, 4);
    CHECK_EQ_INT(sm.m->hp.head_dim, 16);
    CHECK_EQ_INT(sm.m->hp.n_rot, 16);
    CHECK(sm.m->hp.rope_base == 10000.0f);
    CHECK(sm.m->hp.norm_eps == 1e-5f);
    synth_free(&sm);
}

/* Builds a model expected to fail and checks that the message contains each of the given words. */
static int expect_error(struct synth_cfg c, const char *w1, const char *w2, char *why, size_t why_n)
{
    struct err e = {{0}};
    struct synth_model sm;
    int rc = synth_build(&c, 1, &sm, &e);
    synth_free(&sm);
    if (rc == 0) return snprintf(why, why_n, "model_load accepted it"), -1;
    if (!strstr(e.msg, w1) || (w2 && !strstr(e.msg, w2)))
        return snprintf(why, why_n, "message lacks '%s'/'%s': %.300s", w1, w2 ? w2 : "", e.msg), -1;
    return 0;
}

TEST(test_errors)
{
    char why[512] = "";
    struct synth_cfg c = synth_default();
    c.arch = "mamba";
    CHECK_MSG(expect_error(c, "unsupported architecture", "mamba", why, sizeof why) == 0, "%s", why);
    /* a supported architecture whose own tensors are missing (gemma2 needs the post-norms) */
    c.arch = "gemma2";
    c.skip_tensor = "blk.0.post_attention_norm.weight";
    CHECK_MSG(expect_error(c, "missing tensor", "blk.0.post_attention_norm.weight", why, sizeof why) == 0, "%s", why);

    c = synth_default();
    c.n_embd = 256;
    c.n_ff = 256;
    c.n_layer = 1;
    c.n_vocab = 32;
    c.force_type = GGUF_DTYPE_Q8_1; /* a type of ggml's that nothing here reads */
    CHECK_MSG(expect_error(c, "Q8_1", "blk.0.ffn_up.weight", why, sizeof why) == 0, "%s", why);

    c = synth_default();
    c.skip_tensor = "blk.1.attn_v.weight";
    CHECK_MSG(expect_error(c, "missing tensor", "blk.1.attn_v.weight", why, sizeof why) == 0, "%s", why);

    c = synth_default();
    c.skip_tensor = "output_norm.weight";
    CHECK_MSG(expect_error(c, "output_norm.weight", NULL, why, sizeof why) == 0, "%s", why);

    c = synth_default();
    c.arch = "qwen2";
    c.skip_tensor = "blk.0.attn_k.bias";
    CHECK_MSG(expect_error(c, "blk.0.attn_k.bias", NULL, why, sizeof why) == 0, "%s", why);

    c = synth_default();
    c.n_head_kv = 3; /* 4 heads are not a multiple of 3 kv heads */
    CHECK_MSG(expect_error(c, "head_count", NULL, why, sizeof why) == 0, "%s", why);

    /* general.alignment = 1 puts tensors at odd addresses: reading them as float arrays would be undefined
     * behaviour (a misaligned load), so the loader refuses them; alignment 4 is enough for every type here */
    c = synth_default();
    c.alignment = 1;
    CHECK_MSG(expect_error(c, "not aligned to 4 bytes", "general.alignment = 1", why, sizeof why) == 0, "%s", why);
    c.type = GGUF_DTYPE_F16;
    CHECK_MSG(expect_error(c, "not aligned to", NULL, why, sizeof why) == 0, "%s", why);
    struct err e = {{0}};
    struct synth_model sm;
    c.alignment = 4;
    int rc = synth_build(&c, 1, &sm, &e);
    synth_free(&sm);
    CHECK_MSG(rc == 0, "alignment 4: %.900s", e.msg);
}

/* A metadata-only llama file: valid base hyper-parameters (n_embd 64, 4 heads, 2 kv heads, 1 layer) with
 * key `<arch>.suffix` replaced by (or, when absent in the base, added as) a value of type t. No tensors. */
static int hp_try(const char *suffix, enum gguf_vtype t, const void *val, struct err *e)
{
    static const struct { const char *suffix; uint32_t v; } base[] = {
        {"context_length", 256}, {"embedding_length", 64}, {"block_count", 1},
        {"feed_forward_length", 96}, {"attention.head_count", 4}, {"attention.head_count_kv", 2}};
    gguf_writer *w = gguf_writer_init();
    void *buf = NULL;
    size_t n = 0;
    gguf_file *f = NULL;
    struct model *m = NULL;
    char key[128];
    int rc = -1, found = 0;
    if (!w || gguf_writer_set_str(w, "general.architecture", "llama", 5, e)) goto out;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        snprintf(key, sizeof key, "llama.%s", base[i].suffix);
        if (!strcmp(base[i].suffix, suffix)) {
            found = 1;
            if (gguf_writer_set_val(w, key, t, val, e)) goto out;
        } else if (gguf_writer_set_u32(w, key, base[i].v, e)) {
            goto out;
        }
    }
    snprintf(key, sizeof key, "llama.%s", suffix);
    if (!found && gguf_writer_set_val(w, key, t, val, e)) goto out;
    if (gguf_writer_write_mem(w, &buf, &n, NULL, NULL, e) || gguf_open_memory(buf, n, &f, e)) goto out;
    rc = model_load(f, &m, e);
out:
    model_free(m);
    gguf_close(f);
    free(buf);
    gguf_writer_free(w);
    return rc;
}

/* Hostile hyper-parameters are clear errors naming the key, never a crash or a huge allocation. */
TEST(test_hparam_bounds)
{
    struct err e = {{0}};
    uint32_t u;
    int32_t i;
    uint64_t u64;
    float fl;
#define HP_FAIL(suffix, T, var, value, w1, w2)                                                            \
    do {                                                                                                  \
        var = value;                                                                                      \
        e.msg[0] = '\0';                                                                                  \
        int rc_ = hp_try(suffix, T, &var, &e);                                                            \
        CHECK_MSG(rc_ != 0, "%s accepted", suffix);                                                       \
        const char *w2_ = w2;                                                                             \
        CHECK_MSG(strstr(e.msg, w1) && (!w2_ || strstr(e.msg, w2_)), "%s: %s", suffix, e.msg);            \
    } while (0)
    HP_FAIL("attention.head_count", GGUF_VTYPE_UINT32, u, 0, "attention.head_count", "out of range");
    HP_FAIL("attention.head_count_kv", GGUF_VTYPE_UINT32, u, 0, "head_count_kv", "out of range");
    HP_FAIL("attention.head_count_kv", GGUF_VTYPE_UINT32, u, 8, "not a multiple", NULL);
    HP_FAIL("attention.head_count", GGUF_VTYPE_UINT32, u, 100000, "attention.head_count", "out of range");
    HP_FAIL("embedding_length", GGUF_VTYPE_UINT32, u, 2, "head dimension 0", NULL); /* 2 / 4 heads */
    HP_FAIL("embedding_length", GGUF_VTYPE_INT32, i, -64, "embedding_length", "out of range");
    HP_FAIL("context_length", GGUF_VTYPE_INT32, i, -1, "context_length", "out of range");
    HP_FAIL("context_length", GGUF_VTYPE_UINT64, u64, 1ull << 40, "context_length", "out of range");
    HP_FAIL("context_length", GGUF_VTYPE_UINT64, u64, UINT64_MAX, "context_length", "int64");
    HP_FAIL("context_length", GGUF_VTYPE_FLOAT32, fl, 256.0f, "context_length", "integer");
    HP_FAIL("block_count", GGUF_VTYPE_UINT32, u, 0, "block_count", "out of range");
    HP_FAIL("block_count", GGUF_VTYPE_UINT32, u, 1u << 30, "block_count", "out of range");
    HP_FAIL("feed_forward_length", GGUF_VTYPE_UINT32, u, 0xFFFFFFFFu, "feed_forward_length", "out of range");
    HP_FAIL("attention.key_length", GGUF_VTYPE_UINT32, u, 15, "head dimension 15", NULL);
    HP_FAIL("attention.key_length", GGUF_VTYPE_UINT32, u, 0, "key_length", "out of range");
    HP_FAIL("attention.value_length", GGUF_VTYPE_UINT32, u, 8, "value_length", NULL);
    HP_FAIL("rope.dimension_count", GGUF_VTYPE_UINT32, u, 32, "rope.dimension_count", "out of range");
    HP_FAIL("rope.dimension_count", GGUF_VTYPE_UINT32, u, 5, "must be even", NULL);
    HP_FAIL("rope.freq_base", GGUF_VTYPE_FLOAT32, fl, NAN, "rope.freq_base", "out of range");
    HP_FAIL("rope.freq_base", GGUF_VTYPE_FLOAT32, fl, INFINITY, "rope.freq_base", "out of range");
    HP_FAIL("attention.layer_norm_rms_epsilon", GGUF_VTYPE_FLOAT32, fl, 0.0f, "epsilon", "out of range");
    HP_FAIL("attention.layer_norm_rms_epsilon", GGUF_VTYPE_FLOAT32, fl, -1e-5f, "epsilon", "out of range");
    HP_FAIL("expert_count", GGUF_VTYPE_UINT32, u, 8, "mixture of experts", NULL);
#undef HP_FAIL
    /* the base itself gets past the hyper-parameters and stops at the first tensor */
    u = 4;
    e.msg[0] = '\0';
    CHECK(hp_try("attention.head_count", GGUF_VTYPE_UINT32, &u, &e) != 0);
    CHECK_MSG(strstr(e.msg, "token_embd.weight") != NULL, "%s", e.msg);
}

TEST(test_kv_type_names)
{
    enum kv_type t;
    CHECK(model_kv_type_parse("q8_0", &t) == 0 && t == KV_TYPE_Q8_0);
    CHECK(model_kv_type_parse("f16", &t) == 0 && t == KV_TYPE_F16);
    CHECK(model_kv_type_parse("F32", &t) == 0 && t == KV_TYPE_F32);
    CHECK(model_kv_type_parse("q4_0", &t) != 0);
    CHECK_STR(model_kv_type_name(KV_TYPE_Q8_0), "q8_0");
    CHECK(model_type_supported(GGUF_DTYPE_Q4_1) && model_type_supported(GGUF_DTYPE_Q6_K) &&
          model_type_supported(GGUF_DTYPE_IQ4_NL) && !model_type_supported(GGUF_DTYPE_Q8_1));
}

/* rope_freqs are divisors of the RoPE frequencies: zero, negative or non-finite values are refused. */
TEST(test_rope_freqs_values)
{
    const float bad[3] = {0.0f, -1.0f, NAN};
    for (int k = 0; k < 3; k++) {
        struct synth_cfg c = synth_default();
        c.rope_freqs = 1;
        struct synth_model sm;
        struct err e = {{0}};
        int rc = synth_build(&c, 0, &sm, &e);
        CHECK_MSG(rc == 0, "%.900s", e.msg);
        const struct gguf_tensor *t = gguf_find_tensor(sm.f, "rope_freqs.weight");
        CHECK(t != NULL);
        size_t off = (size_t)((const char *)t->data - (const char *)sm.buf);
        memcpy((char *)sm.buf + off + sizeof(float), &bad[k], sizeof(float)); /* element 1 */
        struct model *m = NULL;
        rc = model_load(sm.f, &m, &e);
        model_free(m);
        synth_free(&sm);
        CHECK_MSG(rc != 0, "value %g accepted", (double)bad[k]);
        CHECK_MSG(strstr(e.msg, "rope_freqs.weight") && strstr(e.msg, "element 1"), "%.900s", e.msg);
    }
}

int main(void)
{
    RUN(test_stories260K_hparams);
    RUN(test_smollm2_hparams);
    RUN(test_synthetic_archs);
    RUN(test_gemma_phi3_archs);
    RUN(test_defaults);
    RUN(test_errors);
    RUN(test_hparam_bounds);
    RUN(test_rope_freqs_values);
    RUN(test_kv_type_names);
    return test_summary();
}
