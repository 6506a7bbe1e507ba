/* test_qmix — the named target types and llama.cpp's per-tensor rules (gguf/qmix), checked against the
 * rules written out by hand for a 32-layer Llama with 32 query heads over 8 KV heads. */
#include <string.h>

#include "gguf/qmix.h"
#include "test.h"

#define F32 GGUF_DTYPE_F32
#define F16 GGUF_DTYPE_F16
#define BF16 GGUF_DTYPE_BF16
#define Q8_0 GGUF_DTYPE_Q8_0
#define Q4_0 GGUF_DTYPE_Q4_0
#define Q4_1 GGUF_DTYPE_Q4_1
#define Q5_0 GGUF_DTYPE_Q5_0
#define Q5_1 GGUF_DTYPE_Q5_1
#define Q2_K GGUF_DTYPE_Q2_K
#define Q3_K GGUF_DTYPE_Q3_K
#define Q4_K GGUF_DTYPE_Q4_K
#define Q5_K GGUF_DTYPE_Q5_K
#define Q6_K GGUF_DTYPE_Q6_K

static const struct qmix_model llama8b = {32, 32, 8, 1, 0};

static enum gguf_dtype ty(const char *type, const struct qmix_model *m, const char *name, uint64_t ne0)
{
    const struct qmix_type *t = qmix_find(type);
    return t ? qmix_tensor_type(t, m, name, ne0) : (enum gguf_dtype)-1;
}

static enum gguf_dtype layer_ty(const char *type, const char *role, int il)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s.weight", il, role);
    return ty(type, &llama8b, name, 4096);
}

TEST(names_and_file_types)
{
    const struct {
        const char *name;
        int ftype;
        enum gguf_dtype base;
    } want[] = {{"f32", 0, F32},     {"f16", 1, F16},     {"bf16", 32, BF16},   {"q8_0", 7, Q8_0},
                {"q4_0", 2, Q4_0},   {"q4_1", 3, Q4_1},   {"q5_0", 8, Q5_0},    {"q5_1", 9, Q5_1},
                {"q2_k", 10, Q2_K},  {"q3_k_s", 11, Q3_K}, {"q3_k_m", 12, Q3_K}, {"q3_k_l", 13, Q3_K},
                {"q4_k_s", 14, Q4_K}, {"q4_k_m", 15, Q4_K}, {"q5_k_s", 16, Q5_K}, {"q5_k_m", 17, Q5_K},
                {"q6_k", 18, Q6_K},  {"iq4_nl", 25, GGUF_DTYPE_IQ4_NL}, {"iq4_xs", 30, GGUF_DTYPE_IQ4_XS}};
    CHECK_EQ_INT(qmix_n_types(), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct qmix_type *t = qmix_find(want[i].name);
        CHECK_MSG(t && t->ftype == (enum qmix_ftype)want[i].ftype && t->base == want[i].base, "%s", want[i].name);
        CHECK(qmix_type_at(i) == t);
        CHECK(strstr(qmix_names(), want[i].name));
    }
    CHECK(qmix_find("Q4_K_M") == qmix_find("q4_k_m"));
    CHECK(!qmix_find("q4_k") && !qmix_find("iq2_xxs") && !qmix_find("") && !qmix_find(NULL));
    CHECK(!qmix_type_at(qmix_n_types()));
    CHECK(qmix_is_float(qmix_find("bf16")) && !qmix_is_float(qmix_find("q8_0")));
}

TEST(which_tensors_convert)
{
    CHECK(qmix_converts("token_embd.weight", 2));
    CHECK(qmix_converts("output.weight", 2));
    CHECK(qmix_converts("blk.3.attn_q.weight", 2));
    CHECK(qmix_converts("blk.0.ffn_down_exps.weight", 3));
    CHECK(!qmix_converts("blk.3.attn_q.weight", 1));
    CHECK(!qmix_converts("output_norm.weight", 1));
    CHECK(!qmix_converts("blk.0.attn_norm.weight", 2)); /* a 2-D norm stays as it is too */
    CHECK(!qmix_converts("blk.0.attn_q_norm.weight", 2));
    CHECK(!qmix_converts("blk.0.attn_q.bias", 2));
    CHECK(!qmix_converts("blk.0.ffn_gate_inp.weight", 2));
    CHECK(!qmix_converts("position_embd.weight", 2));
    CHECK(!qmix_converts("token_types.weight", 2));
    CHECK(!qmix_converts("rope_freqs.weight", 1));
}

/* llama.cpp's "more bits" layers of 32: 0-3, 28-31, and 6, 9, ..., 27 */
static int more32(int il)
{
    return il < 4 || il >= 28 || (il - 4) % 3 == 2;
}

TEST(mixes_per_layer)
{
    for (int il = 0; il < 32; il++) {
        CHECK_MSG(layer_ty("q4_k_m", "attn_v", il) == (more32(il) ? Q6_K : Q4_K), "q4_k_m attn_v %d", il);
        CHECK_MSG(layer_ty("q4_k_m", "ffn_down", il) == (more32(il) ? Q6_K : Q4_K), "q4_k_m ffn_down %d", il);
        CHECK(layer_ty("q4_k_m", "attn_q", il) == Q4_K && layer_ty("q4_k_m", "attn_output", il) == Q4_K &&
              layer_ty("q4_k_m", "ffn_up", il) == Q4_K && layer_ty("q4_k_m", "attn_qkv", il) == Q5_K);
        CHECK(layer_ty("q5_k_m", "attn_v", il) == (more32(il) ? Q6_K : Q5_K));
        CHECK(layer_ty("q5_k_m", "ffn_down", il) == (more32(il) ? Q6_K : Q5_K));
        CHECK(layer_ty("q5_k_m", "attn_qkv", il) == Q6_K);
        CHECK(layer_ty("q3_k_m", "attn_v", il) == (il < 2 ? Q5_K : Q4_K));
        CHECK(layer_ty("q3_k_m", "ffn_down", il) == (il < 2 ? Q5_K : Q4_K));
        CHECK(layer_ty("q3_k_m", "attn_output", il) == Q4_K && layer_ty("q3_k_m", "ffn_gate", il) == Q3_K);
        CHECK(layer_ty("q3_k_l", "attn_v", il) == Q5_K && layer_ty("q3_k_l", "ffn_down", il) == Q5_K &&
              layer_ty("q3_k_l", "attn_output", il) == Q5_K && layer_ty("q3_k_l", "attn_k", il) == Q3_K);
        CHECK(layer_ty("q3_k_s", "attn_v", il) == Q3_K && layer_ty("q3_k_s", "ffn_down", il) == Q3_K);
        CHECK(layer_ty("q4_k_s", "attn_v", il) == (il < 4 ? Q5_K : Q4_K));
        CHECK(layer_ty("q4_k_s", "ffn_down", il) == (il < 4 ? Q5_K : Q4_K));
        CHECK(layer_ty("q5_k_s", "attn_v", il) == Q5_K && layer_ty("q5_k_s", "ffn_down", il) == Q5_K);
        CHECK(layer_ty("q2_k", "attn_v", il) == Q4_K && layer_ty("q2_k", "ffn_down", il) == Q3_K &&
              layer_ty("q2_k", "attn_output", il) == Q3_K && layer_ty("q2_k", "ffn_up", il) == Q2_K);
        CHECK(layer_ty("q6_k", "attn_v", il) == Q6_K && layer_ty("q6_k", "ffn_down", il) == Q6_K);
        /* iq4_*: attn_v Q5_K at 4 query heads per KV head (llama8b: 32 / 8), ffn_down Q5_K in the first eighth */
        CHECK(layer_ty("iq4_xs", "attn_v", il) == Q5_K && layer_ty("iq4_nl", "attn_v", il) == Q5_K);
        CHECK(layer_ty("iq4_xs", "ffn_down", il) == (il < 4 ? Q5_K : GGUF_DTYPE_IQ4_XS));
        CHECK(layer_ty("iq4_nl", "ffn_up", il) == GGUF_DTYPE_IQ4_NL &&
              layer_ty("iq4_xs", "attn_q", il) == GGUF_DTYPE_IQ4_XS);
        /* the legacy types bump only the head */
        CHECK(layer_ty("q4_0", "attn_v", il) == Q4_0 && layer_ty("q4_0", "ffn_down", il) == Q4_0);
        CHECK(layer_ty("q8_0", "attn_v", il) == Q8_0 && layer_ty("f16", "ffn_down", il) == F16);
    }
    /* q2_k's attn_v: Q3_K below 4 query heads per KV head */
    const struct qmix_model gqa3 = {32, 24, 8, 1, 0};
    CHECK(ty("q2_k", &gqa3, "blk.0.attn_v.weight", 4096) == Q3_K);
    const struct qmix_model unknown_heads = {32, 0, 0, 1, 0};
    CHECK(ty("q2_k", &unknown_heads, "blk.0.attn_v.weight", 4096) == Q3_K);
}

TEST(output_head_and_embedding)
{
    CHECK(ty("q4_k_m", &llama8b, "output.weight", 4096) == Q6_K);
    CHECK(ty("q4_k_m", &llama8b, "token_embd.weight", 4096) == Q4_K); /* untied: the base type */
    CHECK(ty("q4_0", &llama8b, "output.weight", 4096) == Q6_K);     /* even the legacy types */
    CHECK(ty("q5_1", &llama8b, "output.weight", 4096) == Q6_K);
    CHECK(ty("q8_0", &llama8b, "output.weight", 4096) == Q8_0);
    CHECK(ty("q6_k", &llama8b, "output.weight", 4096) == Q6_K);
    CHECK(ty("bf16", &llama8b, "output.weight", 4096) == BF16);
    CHECK(ty("f32", &llama8b, "output.weight", 4096) == F32);
    /* tied: token_embd is the head */
    const struct qmix_model tied = {30, 9, 3, 0, 0};
    CHECK(ty("q4_k_m", &tied, "token_embd.weight", 2048) == Q6_K);
    CHECK(ty("q4_1", &tied, "token_embd.weight", 2048) == Q6_K);
    /* SmolLM2-135M: rows of 576 are not whole super-blocks: the head falls back to Q8_0 */
    CHECK(ty("q4_k_m", &tied, "token_embd.weight", 576) == Q8_0);
    CHECK(ty("q4_1", &tied, "token_embd.weight", 576) == Q8_0);
    CHECK(ty("q4_k_m", &tied, "blk.0.attn_q.weight", 576) == Q5_0);
    CHECK(ty("q4_k_m", &tied, "blk.0.ffn_down.weight", 1536) == Q6_K); /* layer 0 of 30: more bits */
    CHECK(ty("q4_k_m", &tied, "blk.4.ffn_down.weight", 1536) == Q4_K);
    /* pure: every converted tensor in the base type, head included (the fallback still applies) */
    const struct qmix_model pure = {32, 32, 8, 1, 1};
    CHECK(ty("q4_k_m", &pure, "output.weight", 4096) == Q4_K);
    CHECK(ty("q4_k_m", &pure, "blk.0.attn_v.weight", 4096) == Q4_K);
    CHECK(ty("q4_k_m", &pure, "blk.0.attn_v.weight", 64) == Q5_0);
    CHECK(qmix_rule_type(qmix_find("q4_0"), &llama8b, "output.weight", 4096) == Q6_K);
    CHECK(qmix_rule_type(qmix_find("q4_0"), &llama8b, "output.weight", 48) == Q8_0);
}

TEST(block_size_fallbacks)
{
    CHECK(qmix_fallback(Q4_K, 256) == Q4_K && qmix_fallback(Q4_K, 4096) == Q4_K);
    CHECK(qmix_fallback(Q2_K, 576) == GGUF_DTYPE_IQ4_NL && qmix_fallback(Q3_K, 576) == GGUF_DTYPE_IQ4_NL);
    CHECK(qmix_fallback(GGUF_DTYPE_IQ4_XS, 576) == GGUF_DTYPE_IQ4_NL &&
          qmix_fallback(GGUF_DTYPE_IQ4_NL, 576) == GGUF_DTYPE_IQ4_NL);
    CHECK(qmix_fallback(GGUF_DTYPE_IQ4_NL, 172) == F16);
    CHECK(qmix_fallback(Q4_K, 576) == Q5_0);
    CHECK(qmix_fallback(Q5_K, 576) == Q5_1);
    CHECK(qmix_fallback(Q6_K, 576) == Q8_0);
    CHECK(qmix_fallback(Q6_K, 48) == F16);   /* not whole Q8_0 blocks either */
    CHECK(qmix_fallback(Q4_K, 172) == F16);
    CHECK(qmix_fallback(Q4_0, 172) == F16);  /* stories260K's ffn_down */
    CHECK(qmix_fallback(Q8_0, 172) == F16);
    CHECK(qmix_fallback(Q4_0, 64) == Q4_0);
    CHECK(qmix_fallback(F32, 7) == F32 && qmix_fallback(BF16, 7) == BF16);
    CHECK(ty("q4_0", &llama8b, "blk.0.ffn_down.weight", 172) == F16);
}

int main(void)
{
    RUN(names_and_file_types);
    RUN(which_tensors_convert);
    RUN(mixes_per_layer);
    RUN(output_head_and_embedding);
    RUN(block_size_fallbacks);
    return test_summary();
}
