/* test_synth — `nightshift synth` (called in-process): every shape detail a loader relies on, value
 * statistics of every type, determinism from the seed, --vocab, --n-vocab padding (built-in SentencePiece
 * and file BPE / SentencePiece vocabularies: the tokenizer encodes as without padding and never produces a
 * padding id), and usage errors. */
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "gguf/quant.h"
#include "model/model.h"
#include "test.h"
#include "tokenizer/tok.h"

/* cmd_synth reports through cli_error, which lives in main.c (not in the library): keep the last message. */
static char last_error[1024];
void cli_error(const char *cmd, const char *fmt, ...)
{
    (void)cmd;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

static char tmpdir[] = "/tmp/test_synth_XXXXXX";

static int synth(const char *shape, const char *type, const char *out, const char *seed, const char *vocab)
{
    char *argv[12] = {"synth", "--shape", (char *)shape, "--type", (char *)type, "-o", (char *)out};
    int argc = 7;
    if (seed) {
        argv[argc++] = "--seed";
        argv[argc++] = (char *)seed;
    }
    if (vocab) {
        argv[argc++] = "--vocab";
        argv[argc++] = (char *)vocab;
    }
    return cmd_synth(argc, argv);
}

/* synth with --n-vocab N (n_vocab a decimal string) and an optional --vocab */
static int synth_n(const char *shape, const char *out, const char *vocab, const char *n_vocab)
{
    char *argv[12] = {"synth", "--shape",   (char *)shape, "--type",       "f32",
                      "-o",    (char *)out, "--n-vocab",   (char *)n_vocab};
    int argc = 9;
    if (vocab) {
        argv[argc++] = "--vocab";
        argv[argc++] = (char *)vocab;
    }
    return cmd_synth(argc, argv);
}

static const char *tmp(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* Opens the file and loads its model (both left open on success). */
static int synth_open(const char *path, gguf_file **f, struct model **m, struct err *e)
{
    if (gguf_open(path, f, e)) return -1;
    if (model_load(*f, m, e)) {
        gguf_close(*f);
        return -1;
    }
    return 0;
}

static int64_t get_int(const gguf_file *f, const char *key)
{
    int64_t v = -1;
    struct err e;
    if (gguf_get_int(f, key, &v, &e)) return -1;
    return v;
}

static int tensor_is(const gguf_file *f, const char *name, enum gguf_dtype t, uint64_t ne0, uint64_t ne1)
{
    const struct gguf_tensor *x = gguf_find_tensor(f, name);
    if (!x) {
        printf("  missing tensor %s\n", name);
        return 0;
    }
    if (x->type != t || x->ne[0] != ne0 || x->ne[1] != ne1 || x->n_dims != (ne1 > 1 ? 2u : 1u)) {
        printf("  tensor %s: type %u ne (%llu, %llu)\n", name, x->type, (unsigned long long)x->ne[0],
               (unsigned long long)x->ne[1]);
        return 0;
    }
    return 1;
}

/* mean and n_in * variance of a tensor's dequantized values */
static void tensor_stats(const struct gguf_tensor *t, double *mean, double *scaled_var, double *amax)
{
    float *row = malloc(t->ne[0] * sizeof *row);
    uint64_t rb = gguf_row_bytes(t->type, t->ne[0]), n_rows = t->n_elements / t->ne[0];
    double s = 0, s2 = 0, mx = 0;
    for (uint64_t r = 0; r < n_rows; r++) {
        quant_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, row, (int64_t)t->ne[0]);
        for (uint64_t j = 0; j < t->ne[0]; j++) {
            s += row[j];
            s2 += (double)row[j] * row[j];
            mx = fmax(mx, fabs(row[j]));
        }
    }
    double n = (double)t->n_elements;
    *mean = s / n;
    *scaled_var = (s2 / n - *mean * *mean) * (double)t->ne[0];
    *amax = mx;
    free(row);
}

TEST(tiny_every_type)
{
    static const struct {
        const char *name;
        enum gguf_dtype t;
        int file_type;
    } types[] = {{"f32", GGUF_DTYPE_F32, 0},   {"f16", GGUF_DTYPE_F16, 1},   {"bf16", GGUF_DTYPE_BF16, 32},
                 {"q8_0", GGUF_DTYPE_Q8_0, 7}, {"q4_0", GGUF_DTYPE_Q4_0, 2}, {"q4_1", GGUF_DTYPE_Q4_1, 3}};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const char *path = tmp("tiny.gguf");
        CHECK_EQ_INT(synth("tiny", types[k].name, path, NULL, NULL), 0);
        gguf_file *f;
        struct err e;
        CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
        char arch[16];
        CHECK(gguf_get_cstr(f, "general.architecture", arch, sizeof arch, &e) == 0 && !strcmp(arch, "llama"));
        CHECK_EQ_INT(get_int(f, "general.file_type"), types[k].file_type);
        CHECK_EQ_INT(get_int(f, "llama.block_count"), 2);
        CHECK_EQ_INT(get_int(f, "llama.embedding_length"), 64);
        CHECK_EQ_INT(get_int(f, "llama.feed_forward_length"), 160);
        CHECK_EQ_INT(get_int(f, "llama.attention.head_count"), 4);
        CHECK_EQ_INT(get_int(f, "llama.attention.head_count_kv"), 2);
        CHECK_EQ_INT(get_int(f, "llama.context_length"), 512);
        CHECK_EQ_INT(get_int(f, "llama.rope.dimension_count"), 16);
        double eps, base;
        CHECK(gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &eps, &e) == 0 &&
              fabs(eps - 1e-5) < 1e-10);
        CHECK(gguf_get_float(f, "llama.rope.freq_base", &base, &e) == 0 && base == 10000.0);
        int64_t tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
        CHECK(tok >= 0);
        uint64_t n_vocab = gguf_kv_arr_n(f, tok);
        CHECK(n_vocab > 259 + 200);
        CHECK_EQ_INT(get_int(f, "llama.vocab_size"), n_vocab);
        CHECK_EQ_INT(gguf_kv_arr_n(f, gguf_find_kv(f, "tokenizer.ggml.scores")), n_vocab);
        CHECK_EQ_INT(gguf_kv_arr_n(f, gguf_find_kv(f, "tokenizer.ggml.token_type")), n_vocab);
        struct gguf_str s0 = gguf_kv_arr_str(f, tok, 0), s1 = gguf_kv_arr_str(f, tok, 1),
                        s2 = gguf_kv_arr_str(f, tok, 2), s3 = gguf_kv_arr_str(f, tok, 3 + 0x41);
        CHECK(s0.len == 5 && !memcmp(s0.ptr, "<unk>", 5) && s1.len == 3 && !memcmp(s1.ptr, "<s>", 3) &&
              s2.len == 4 && !memcmp(s2.ptr, "</s>", 4) && s3.len == 6 && !memcmp(s3.ptr, "<0x41>", 6));
        CHECK_EQ_INT(get_int(f, "tokenizer.ggml.bos_token_id"), 1);
        CHECK_EQ_INT(get_int(f, "tokenizer.ggml.eos_token_id"), 2);
        char model[16];
        CHECK(gguf_get_cstr(f, "tokenizer.ggml.model", model, sizeof model, &e) == 0 &&
              !strcmp(model, "llama"));

        enum gguf_dtype t = types[k].t;
        CHECK_EQ_INT(gguf_n_tensors(f), 3 + 9 * 2);
        CHECK(tensor_is(f, "token_embd.weight", t, 64, n_vocab));
        CHECK(tensor_is(f, "output.weight", t, 64, n_vocab));
        CHECK(tensor_is(f, "output_norm.weight", GGUF_DTYPE_F32, 64, 1));
        for (int il = 0; il < 2; il++) {
            char n[64];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
            CHECK(tensor_is(f, NAME("attn_norm.weight"), GGUF_DTYPE_F32, 64, 1));
            CHECK(tensor_is(f, NAME("attn_q.weight"), t, 64, 64));
            CHECK(tensor_is(f, NAME("attn_k.weight"), t, 64, 32));
            CHECK(tensor_is(f, NAME("attn_v.weight"), t, 64, 32));
            CHECK(tensor_is(f, NAME("attn_output.weight"), t, 64, 64));
            CHECK(tensor_is(f, NAME("ffn_norm.weight"), GGUF_DTYPE_F32, 64, 1));
            CHECK(tensor_is(f, NAME("ffn_gate.weight"), t, 64, 160));
            CHECK(tensor_is(f, NAME("ffn_up.weight"), t, 64, 160));
            CHECK(tensor_is(f, NAME("ffn_down.weight"), t, 160, 64));
#undef NAME
        }
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            const struct gguf_tensor *x = gguf_tensor(f, i);
            double mean, var, amax;
            tensor_stats(x, &mean, &var, &amax);
            if (strstr(x->name, "norm")) {
                CHECK_MSG(mean == 1.0 && amax == 1.0, "%s: norm weights not 1.0", x->name);
                continue;
            }
            /* uniform in [-a, a], a = sqrt(3/n_in): n_in * variance = 1; quantization adds a little */
            double a = sqrt(3.0 / (double)x->ne[0]);
            CHECK_MSG(fabs(mean) < 0.05 * a && var > 0.85 && var < 1.2 && amax <= a * 1.1,
                      "%s (%s): mean %g "
                      "n_in*var %g amax %g (a %g)",
                      x->name, types[k].name, mean, var, amax, a);
        }
        gguf_close(f);
    }
}


/* The K-quant types: general.file_type, each tensor's type as gguf/qmix states the mixes (tiny-256:
 * 8 layers of rows of 256, 4 heads over 2 KV heads; the _M mixes' "more bits" layers of 8 are 0, 3, 6, 7;
 * q2_k's attn_v is Q3_K below 4 query heads per KV head), value statistics as
 * for the other types (looser for Q2_K/Q3_K), and the model loads. On the tiny shape (rows of 64) every
 * K-quant falls back as llama.cpp's does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0). */
TEST(kquant_mixes)
{
    const enum gguf_dtype Q2 = GGUF_DTYPE_Q2_K, Q3 = GGUF_DTYPE_Q3_K, Q4 = GGUF_DTYPE_Q4_K, Q5 = GGUF_DTYPE_Q5_K,
                          Q6 = GGUF_DTYPE_Q6_K;
    const struct {
        const char *name;
        int file_type;
        enum gguf_dtype base, output, v_more, v_other, down_more, down_other, attn_out;
    } mixes[] = {
        {"q4_k_m", 15, Q4, Q6, Q6, Q4, Q6, Q4, Q4},
        {"q5_k_m", 17, Q5, Q6, Q6, Q5, Q6, Q5, Q5},
        {"q6_k", 18, Q6, Q6, Q6, Q6, Q6, Q6, Q6},
        {"q2_k", 10, Q2, Q6, Q3, Q3, Q3, Q3, Q3},
    };
    const int more[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
        const char *path = tmp("k.gguf");
        CHECK_MSG(synth("tiny-256", mixes[k].name, path, NULL, NULL) == 0, "%s: %s", mixes[k].name, last_error);
        gguf_file *f;
        struct model *m;
        struct err e;
        CHECK_MSG(synth_open(path, &f, &m, &e) == 0, "%s: %.900s", mixes[k].name, e.msg);
        CHECK_EQ_INT(get_int(f, "general.file_type"), mixes[k].file_type);
        uint64_t n_vocab = gguf_kv_arr_n(f, gguf_find_kv(f, "tokenizer.ggml.tokens"));
        int ok = tensor_is(f, "token_embd.weight", mixes[k].base, 256, n_vocab) &&
                 tensor_is(f, "output.weight", mixes[k].output, 256, n_vocab);
        for (int il = 0; il < 8 && ok; il++) {
            char n[64];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
            ok = tensor_is(f, NAME("attn_q.weight"), mixes[k].base, 256, 256) &&
                 tensor_is(f, NAME("attn_k.weight"), mixes[k].base, 256, 128) &&
                 tensor_is(f, NAME("attn_v.weight"), more[il] ? mixes[k].v_more : mixes[k].v_other, 256, 128) &&
                 tensor_is(f, NAME("attn_output.weight"), mixes[k].attn_out, 256, 256) &&
                 tensor_is(f, NAME("ffn_gate.weight"), mixes[k].base, 256, 512) &&
                 tensor_is(f, NAME("ffn_up.weight"), mixes[k].base, 256, 512) &&
                 tensor_is(f, NAME("ffn_down.weight"), more[il] ? mixes[k].down_more : mixes[k].down_other, 512, 256);
#undef NAME
        }
        for (uint64_t i = 0; i < gguf_n_tensors(f) && ok; i++) {
            const struct gguf_tensor *x = gguf_tensor(f, i);
            if (strstr(x->name, "norm")) continue;
            double mean, var, amax, a = sqrt(3.0 / (double)x->ne[0]);
            tensor_stats(x, &mean, &var, &amax);
            /* Q2_K's 4 levels fit by least squares may reach past the data's range */
            const double lo = x->type == Q2 || x->type == Q3 ? 0.75 : 0.85, hi = x->type == Q2 ? 1.35 : 1.2;
            if (!(fabs(mean) < 0.05 * a && var > lo && var < hi && amax <= a * (x->type == Q2 ? 1.5 : 1.2))) {
                printf("  %s (%s): mean %g n_in*var %g amax %g (a %g)\n", x->name, mixes[k].name, mean, var, amax, a);
                ok = 0;
            }
        }
        model_free(m);
        gguf_close(f);
        CHECK_MSG(ok, "%s: tensor types or values differ from the stated mix (see above)", mixes[k].name);
    }
    /* q3_k_m: attn_v Q5_K in layers 0-1, Q4_K after; ffn_down Q5_K in the first sixteenth of the layers
     * (none of 8), else Q4_K; attn_output Q4_K */
    const char *path = tmp("k3.gguf");
    CHECK_MSG(synth("tiny-256", "q3_k_m", path, NULL, NULL) == 0, "%s", last_error);
    gguf_file *f;
    struct model *m;
    struct err e;
    CHECK_MSG(synth_open(path, &f, &m, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(get_int(f, "general.file_type"), 12);
    for (int il = 0; il < 8; il++) {
        char n[64];
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", il);
        CHECK(tensor_is(f, n, il < 2 ? Q5 : Q4, 256, 128));
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", il);
        CHECK(tensor_is(f, n, Q4, 512, 256));
        snprintf(n, sizeof n, "blk.%d.attn_output.weight", il);
        CHECK(tensor_is(f, n, Q4, 256, 256));
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", il);
        CHECK(tensor_is(f, n, Q3, 256, 512));
    }
    model_free(m);
    gguf_close(f);
    /* rows of 64: the fallbacks */
    CHECK_MSG(synth("tiny", "q4_k_m", path, NULL, NULL) == 0, "%s", last_error);
    CHECK_MSG(synth_open(path, &f, &m, &e) == 0, "%.900s", e.msg);
    uint64_t n_vocab = gguf_kv_arr_n(f, gguf_find_kv(f, "tokenizer.ggml.tokens"));
    CHECK(tensor_is(f, "output.weight", GGUF_DTYPE_Q8_0, 64, n_vocab));
    CHECK(tensor_is(f, "blk.0.attn_q.weight", GGUF_DTYPE_Q5_0, 64, 64));
    CHECK(tensor_is(f, "blk.0.attn_v.weight", GGUF_DTYPE_Q5_0, 64, 32)); /* layer 0 of 2: no more bits */
    CHECK(tensor_is(f, "blk.1.attn_v.weight", GGUF_DTYPE_Q8_0, 64, 32));
    CHECK(tensor_is(f, "blk.1.ffn_down.weight", GGUF_DTYPE_Q8_0, 160, 64));
    model_free(m);
    gguf_close(f);
    CHECK_MSG(synth("tiny", "q5_k_m", path, NULL, NULL) == 0, "%s", last_error);
    CHECK_MSG(synth_open(path, &f, &m, &e) == 0, "%.900s", e.msg);
    CHECK(tensor_is(f, "blk.0.attn_q.weight", GGUF_DTYPE_Q5_1, 64, 64));
    model_free(m);
    gguf_close(f);
    CHECK_MSG(synth("tiny", "q2_k", path, NULL, NULL) == 0, "%s", last_error);
    CHECK_MSG(synth_open(path, &f, &m, &e) == 0, "%.900s", e.msg);
    /* rows of 64 are no whole K-quant block: llama.cpp's fallback, IQ4_NL */
    CHECK(tensor_is(f, "blk.0.attn_q.weight", GGUF_DTYPE_IQ4_NL, 64, 64));
    CHECK(tensor_is(f, "blk.0.attn_v.weight", GGUF_DTYPE_IQ4_NL, 64, 32)); /* Q3_K (2 heads per KV head) */
    model_free(m);
    gguf_close(f);
    /* a tied head: token_embd is the output head, so it gets the head's type (Q6_K, here its fallback Q8_0) */
    CHECK_MSG(synth("tiny-tied", "q4_k_m", path, NULL, NULL) == 0, "%s", last_error);
    CHECK_MSG(synth_open(path, &f, &m, &e) == 0, "%.900s", e.msg);
    n_vocab = gguf_kv_arr_n(f, gguf_find_kv(f, "tokenizer.ggml.tokens"));
    CHECK(tensor_is(f, "token_embd.weight", GGUF_DTYPE_Q8_0, 64, n_vocab));
    CHECK(!gguf_find_tensor(f, "output.weight"));
    model_free(m);
    gguf_close(f);
}

TEST(deterministic_from_seed)
{
    const char *a = tmp("a.gguf"), *b = tmp("b.gguf"), *c = tmp("c.gguf");
    CHECK_EQ_INT(synth("qwen2-tiny", "q4_0", a, "7", NULL), 0);
    CHECK_EQ_INT(synth("qwen2-tiny", "q4_0", b, "7", NULL), 0);
    CHECK_EQ_INT(synth("qwen2-tiny", "q4_0", c, "8", NULL), 0);
    size_t na = 0, nb = 0, nc = 0;
    char *da = test_read_file(a, &na), *db = test_read_file(b, &nb), *dc = test_read_file(c, &nc);
    CHECK(da && db && dc);
    int same_ab = na == nb && memcmp(da, db, na) == 0;
    int same_len_ac = na == nc, same_ac = same_len_ac && memcmp(da, dc, na) == 0;
    free(da);
    free(db);
    free(dc);
    CHECK(same_ab);
    CHECK(same_len_ac && !same_ac);
}

TEST(qwen2_tiny_and_tied)
{
    const char *path = tmp("q.gguf");
    CHECK_EQ_INT(synth("qwen2-tiny", "f16", path, NULL, NULL), 0);
    gguf_file *f;
    struct err e;
    CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
    char arch[16];
    CHECK(gguf_get_cstr(f, "general.architecture", arch, sizeof arch, &e) == 0 && !strcmp(arch, "qwen2"));
    CHECK_EQ_INT(get_int(f, "qwen2.block_count"), 2);
    CHECK_EQ_INT(get_int(f, "llama.block_count"), -1);
    double base, eps;
    CHECK(gguf_get_float(f, "qwen2.rope.freq_base", &base, &e) == 0 && base == 1e6);
    CHECK(gguf_get_float(f, "qwen2.attention.layer_norm_rms_epsilon", &eps, &e) == 0 &&
          fabs(eps - 1e-6) < 1e-11);
    CHECK_EQ_INT(gguf_n_tensors(f), 3 + 12 * 2);
    CHECK(tensor_is(f, "blk.1.attn_q.bias", GGUF_DTYPE_F32, 64, 1));
    CHECK(tensor_is(f, "blk.1.attn_k.bias", GGUF_DTYPE_F32, 32, 1));
    CHECK(tensor_is(f, "blk.0.attn_v.bias", GGUF_DTYPE_F32, 32, 1));
    const struct gguf_tensor *bias = gguf_find_tensor(f, "blk.0.attn_q.bias");
    const float *bv = bias->data;
    float bmax = 0;
    for (int i = 0; i < 64; i++)
        bmax = fmaxf(bmax, fabsf(bv[i]));
    CHECK(bmax > 0.05f && bmax <= 0.1f);
    gguf_close(f);

    CHECK_EQ_INT(synth("tiny-tied", "q8_0", path, NULL, NULL), 0);
    CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
    CHECK(gguf_find_tensor(f, "output.weight") == NULL);
    CHECK(gguf_find_tensor(f, "token_embd.weight") != NULL);
    CHECK_EQ_INT(gguf_n_tensors(f), 2 + 9 * 2);
    gguf_close(f);
}

TEST(vocab_from_file)
{
    const char *vocab = test_shared("testdata/vocab/ggml-vocab-llama-spm.gguf");
    if (access(vocab, R_OK) != 0) SKIP("no llama-spm vocab");
    const char *path = tmp("v.gguf");
    CHECK_EQ_INT(synth("tiny", "q8_0", path, "3", vocab), 0);
    gguf_file *f, *v;
    struct err e;
    CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
    CHECK_MSG(gguf_open(vocab, &v, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(get_int(f, "llama.vocab_size"), 32000);
    CHECK(tensor_is(f, "token_embd.weight", GGUF_DTYPE_Q8_0, 64, 32000));
    for (uint64_t i = 0; i < gguf_n_kv(v); i++) {
        const char *key = gguf_kv_key(v, i);
        if (strncmp(key, "tokenizer.", 10)) {
            if (strcmp(key, "general.architecture") && strcmp(key, "llama.vocab_size"))
                CHECK_MSG(gguf_find_kv(f, key) < 0 || !strncmp(key, "llama.", 6) ||
                              !strncmp(key, "general.", 8),
                          "unexpected copy of %.200s", key);
            continue;
        }
        int64_t j = gguf_find_kv(f, key);
        CHECK_MSG(j >= 0, "tokenizer key %.200s not copied", key);
        CHECK_EQ_INT(gguf_kv_type(f, j), gguf_kv_type(v, i));
        CHECK_EQ_INT(gguf_kv_arr_n(f, j), gguf_kv_arr_n(v, i));
    }
    int64_t a = gguf_find_kv(f, "tokenizer.ggml.tokens"), b = gguf_find_kv(v, "tokenizer.ggml.tokens");
    for (uint64_t k = 0; k < 32000; k += 997) {
        struct gguf_str x = gguf_kv_arr_str(f, a, k), y = gguf_kv_arr_str(v, b, k);
        CHECK(x.len == y.len && !memcmp(x.ptr, y.ptr, x.len));
    }
    gguf_close(v);
    gguf_close(f);
}

/* The tokenizer of a file (the file is closed again). */
static tok_vocab *load_tok(const char *path)
{
    gguf_file *f;
    tok_vocab *t = NULL;
    struct err e;
    if (gguf_open(path, &f, &e)) return NULL;
    if (tok_load(f, &t, &e)) printf("  tok_load %s: %s\n", path, e.msg);
    gguf_close(f);
    return t;
}

/* Padded (file p, n tokens, the first n0 its vocabulary's) against unpadded (file u): token rows, vocab_size
 * and the token list; padding entries are control tokens "<|reserved_ID|>"; texts encode to the same ids
 * (none a padding id) and decode back; a padding text is that token only with special tokens parsed. */
static int check_padded(const char *p, const char *u, uint64_t n, uint64_t n0, int tied)
{
    static const char *const texts[] = {"Once upon a time, there was a little girl named Lily.",
                                        "Hello world! 12345 x_y <|not|> tabs\tand\nlines",
                                        "caf\xc3\xa9 na\xc3\xafve \xe2\x98\x83 \xe4\xb8\xad\xe6\x96\x87"};
    gguf_file *f;
    struct err e;
    int ok = 0;
    if (gguf_open(p, &f, &e)) return 0;
    const char *head = tied ? "token_embd.weight" : "output.weight";
    if (get_int(f, "llama.vocab_size") == (int64_t)n &&
        tensor_is(f, "token_embd.weight", GGUF_DTYPE_F32, 64, n) &&
        tensor_is(f, head, GGUF_DTYPE_F32, 64, n) &&
        gguf_kv_arr_n(f, (uint64_t)gguf_find_kv(f, "tokenizer.ggml.tokens")) == n)
        ok = 1;
    gguf_close(f);
    if (!ok) return 0;
    tok_vocab *tp = load_tok(p), *tu = load_tok(u);
    ok = tp && tu && tok_n_vocab(tp) == (int32_t)n && tok_n_vocab(tu) == (int32_t)n0;
    for (uint64_t id = n0; ok && id < n; id += 1 + (n - n0) / 7) {
        char want[48];
        snprintf(want, sizeof want, "<|reserved_%llu|>", (unsigned long long)id);
        ok = tok_token_type(tp, (int32_t)id) == 3 && !strcmp(tok_piece(tp, (int32_t)id), want) &&
             tok_find_piece(tp, want, strlen(want)) == (int32_t)id;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        ok = ok && !tok_encode(tp, want, strlen(want), 0, 1, &ids, &n_ids, &e) && n_ids == 1 &&
             ids[0] == (int32_t)id;
        free(ids);
        if (!ok) printf("  padding token %llu\n", (unsigned long long)id);
    }
    for (size_t k = 0; ok && k < sizeof texts / sizeof texts[0]; k++) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0, nd = 0;
        char *dec = NULL;
        size_t len = strlen(texts[k]);
        ok = !tok_encode(tp, texts[k], len, 1, 1, &a, &na, &e) &&
             !tok_encode(tu, texts[k], len, 1, 1, &b, &nb, &e) && na == nb && !memcmp(a, b, na * sizeof *a) &&
             !tok_decode(tp, a, na, &dec, &nd, &e) && nd == len && !memcmp(dec, texts[k], len);
        for (size_t i = 0; ok && i < na; i++)
            ok = a[i] >= 0 && (uint64_t)a[i] < n0;
        if (!ok)
            printf("  text %zu: %zu ids padded, %zu unpadded, decoded '%s'\n", k, na, nb, dec ? dec : "");
        free(a);
        free(b);
        free(dec);
    }
    tok_free(tp);
    tok_free(tu);
    return ok;
}

TEST(n_vocab_pads_builtin)
{
    const char *p = tmp("p.gguf"), *u = tmp("u.gguf"), *q = tmp("q.gguf");
    CHECK_EQ_INT(synth_n("tiny", p, NULL, "4096"), 0);
    CHECK_EQ_INT(synth_n("tiny", u, NULL, "0"), 0);
    gguf_file *f;
    struct err e;
    CHECK_MSG(gguf_open(u, &f, &e) == 0, "%.900s", e.msg);
    uint64_t n0 = (uint64_t)get_int(f, "llama.vocab_size");
    gguf_close(f);
    CHECK(n0 > 500 && n0 < 4096);
    CHECK(check_padded(p, u, 4096, n0, 0));
    /* a function of the arguments: the same again is the same bytes, another --n-vocab other bytes, and
     * --n-vocab of the vocabulary's own size is no padding */
    CHECK_EQ_INT(synth_n("tiny", q, NULL, "4096"), 0);
    size_t np = 0, nq = 0;
    char *dp = test_read_file(p, &np), *dq = test_read_file(q, &nq);
    int same = dp && dq && np == nq && !memcmp(dp, dq, np);
    free(dp);
    free(dq);
    CHECK(same);
    char own[24];
    snprintf(own, sizeof own, "%llu", (unsigned long long)n0);
    CHECK_EQ_INT(synth_n("tiny", q, NULL, own), 0);
    dp = test_read_file(u, &np);
    dq = test_read_file(q, &nq);
    same = dp && dq && np == nq && !memcmp(dp, dq, np);
    free(dp);
    free(dq);
    CHECK(same);
    /* padding only adds */
    CHECK_EQ_INT(synth_n("tiny", q, NULL, "100"), 1);
    CHECK(strstr(last_error, "--n-vocab 100 is less than the vocabulary's"));
}

TEST(n_vocab_pads_file_vocab)
{
    static const struct {
        const char *vocab, *shape, *n;
        int tied;
    } cases[] = {{"testdata/vocab/ggml-vocab-gpt-2.gguf", "tiny-tied", "50304", 1},
                 {"testdata/vocab/ggml-vocab-llama-spm.gguf", "tiny", "32768", 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *vocab = test_shared(cases[k].vocab);
        if (access(vocab, R_OK) != 0) SKIP("no %s", cases[k].vocab);
        const char *p = tmp("p.gguf"), *u = tmp("u.gguf");
        CHECK_EQ_INT(synth_n(cases[k].shape, p, vocab, cases[k].n), 0);
        CHECK_EQ_INT(synth_n(cases[k].shape, u, vocab, "0"), 0);
        gguf_file *f;
        struct err e;
        CHECK_MSG(gguf_open(vocab, &f, &e) == 0, "%.900s", e.msg);
        uint64_t n0 = gguf_kv_arr_n(f, (uint64_t)gguf_find_kv(f, "tokenizer.ggml.tokens"));
        gguf_close(f);
        CHECK_MSG(check_padded(p, u, strtoull(cases[k].n, NULL, 10), n0, cases[k].tied), "%s",
                  cases[k].vocab);
    }
}

/* A vocabulary file of the given tokens (SentencePiece model, no scores, no token types). */
static int write_vocab(const char *path, const char *const *tokens, uint64_t n)
{
    struct gguf_str s[8];
    for (uint64_t i = 0; i < n; i++)
        s[i] = (struct gguf_str){tokens[i], strlen(tokens[i])};
    struct err e;
    gguf_writer *w = gguf_writer_init();
    int rc = !w || gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5, &e) ||
             gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", s, n, &e) ||
             gguf_writer_write(w, path, NULL, NULL, &e);
    gguf_writer_free(w);
    return rc ? -1 : 0;
}

TEST(n_vocab_file_without_types)
{
    static const char *const toks[] = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "\xe2\x96\x81"
                                       "a",
                                       "b",
                                       "<|reserved_7|>"};
    const char *v = tmp("v.gguf"), *p = tmp("p.gguf");
    CHECK_EQ_INT(write_vocab(v, toks, 5), 0);
    CHECK_EQ_INT(synth_n("tiny", p, v, "9"), 0);
    gguf_file *f;
    struct err e;
    CHECK_MSG(gguf_open(p, &f, &e) == 0, "%.900s", e.msg);
    int64_t k = gguf_find_kv(f, "tokenizer.ggml.token_type");
    CHECK(k >= 0 && gguf_kv_arr_type(f, (uint64_t)k) == GGUF_VTYPE_INT32 &&
          gguf_kv_arr_n(f, (uint64_t)k) == 9);
    const int32_t *ty = gguf_kv_arr_data(f, (uint64_t)k);
    int32_t want[9] = {1, 1, 1, 1, 1, 3, 3, 3, 3};
    CHECK(!memcmp(ty, want, sizeof want));
    CHECK(gguf_find_kv(f, "tokenizer.ggml.scores") < 0);
    gguf_close(f);
    /* a vocabulary token with a padding token's name is refused (it would be a duplicate piece) */
    CHECK_EQ_INT(write_vocab(v, toks, 6), 0);
    CHECK_EQ_INT(synth_n("tiny", p, v, "8"), 1);
    CHECK_MSG(strstr(last_error, "'<|reserved_7|>'"), "%s", last_error);
    CHECK_EQ_INT(synth_n("tiny", p, v, "7"), 0); /* ids 6 only: no clash */
}

TEST(usage_errors)
{
    char *help[] = {"synth", "--help"};
    fflush(stdout);
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY); /* keep usage text out of the test log */
    dup2(devnull, 1);
    int rc = cmd_synth(2, help);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(devnull);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(synth("nope", "f32", tmp("x.gguf"), NULL, NULL), 2);
    CHECK(strstr(last_error, "unknown shape 'nope'"));
    CHECK_EQ_INT(synth("tiny", "q5_k", tmp("x.gguf"), NULL, NULL), 2);
    CHECK(strstr(last_error, "unknown type 'q5_k'"));
    CHECK_EQ_INT(synth("tiny", "f32", tmp("x.gguf"), "-1x", NULL), 2);
    char *missing[] = {"synth", "--shape", "tiny", "--type", "f32"};
    CHECK_EQ_INT(cmd_synth(5, missing), 2);
    char *dangling[] = {"synth", "--shape"};
    CHECK_EQ_INT(cmd_synth(2, dangling), 2);
    CHECK_EQ_INT(synth("tiny", "f32", tmp("x.gguf"), NULL, "/nonexistent.gguf"), 1);
    CHECK(strstr(last_error, "/nonexistent.gguf"));
    CHECK_EQ_INT(synth("tiny", "f32", "/nonexistent/dir/x.gguf", NULL, NULL), 1);
    CHECK(strstr(last_error, "/nonexistent/dir/x.gguf") && strstr(last_error, "cannot create"));
    CHECK(access("/nonexistent/dir/x.gguf", F_OK) != 0);
}

int main(void)
{
    freopen("/dev/null", "w", stderr); /* usage text and progress lines */
    if (!mkdtemp(tmpdir)) {
        printf("FAIL test_synth: mkdtemp\n");
        return 1;
    }
    RUN(tiny_every_type);
    RUN(kquant_mixes);
    RUN(deterministic_from_seed);
    RUN(qwen2_tiny_and_tied);
    RUN(vocab_from_file);
    RUN(n_vocab_pads_builtin);
    RUN(n_vocab_pads_file_vocab);
    RUN(n_vocab_file_without_types);
    RUN(usage_errors);
    const char *names[] = {"tiny.gguf", "a.gguf", "b.gguf", "c.gguf", "q.gguf",
                           "v.gguf",    "x.gguf", "p.gguf", "u.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(tmp(names[i]));
    rmdir(tmpdir);
    return test_summary();
}
