/* test_cuda_step — whole forward steps of the CUDA backend against the CPU backend, the oracle (runs only
 * where a GPU is; test_cuda.c says how the device tests are split).
 *
 * Without NS_CUDA it prints "skip cuda_step: built without CUDA"; with NS_CUDA but no usable GPU, "skip
 * cuda_step: <reason>"; TEST_CUDA_ONLY=prefix runs only the tests whose names start with it. On a GPU:
 *  - full steps against the CPU backend on synthetic llama/qwen2/qwen3 models (F32, BF16, Q8_0; BF16/F16
 *    at head_dim 64 and 128 run the tensor-core attention) and on stories260K, prefill and decode rows
 *    mixed, positions past one attention chunk: error / std(CPU logits), rms and max: F32 weights rms
 *    <= 1e-4, max <= 1e-3; BF16 rms <= 2e-2 (3e-2 for F16 weights at head_dim 128: their rounding to BF16
 *    alone is 1.7e-2), max <= 1.5e-1; Q8_0 (the CPU quantizes activations to 8 bits, the GPU rounds them
 *    to BF16) rms <= 8e-2, max <= 0.5; the same for two K-quant mixes (Q4_K_M's, and Q5_K/Q3_K/Q2_K/Q5_0/Q6_K);
 *    F32 weights with q8_0 KV (head_dim 32, 64, 128) rms <= 1e-2, max <= 5e-2 (a value on a rounding edge
 *    may round the other way on the two backends; see the cases); BF16 weights with q8_0 KV (head_dim 64,
 *    128: the tensor-core attention) rms <= 4e-2, max <= 0.25; q8_0 KV refused at head_dim 16.
 *  - the same steps twice give bit-identical logits (f16 and q8_0 KV, both on the tensor cores).
 *  - steps of one row on a BF16 model (a prompt whose last row wants logits, decode steps launched and as
 *    CUDA graphs): the fused GEMVs on and off give bit-identical logits; fused vs the CPU backend within the
 *    BF16 tolerances above.
 *  - FP8 layers (--gpu-weights fp8) against the CPU backend within the tolerances of step_vs_cpu_fp8's
 *    table; their steps with the GEMM inputs quantized fused and apart bit-identical.
 */
#include <stdio.h>

#include "test.h"

#ifndef NS_CUDA
int main(void)
{
    printf("skip cuda_step: built without CUDA\n");
    return 0;
}
#else

#include "cuda_test_util.h"

/* ---------------------------------------------------------------- full steps vs the CPU backend */

struct pair {
    struct backend cpu, gpu;
};

/* The GPU backends' weights of the tests below (pair_init, gpu_open): AUTO unless a test sets FP8. */
static struct backend_config g_gpu = {0, 0, BACKEND_WEIGHTS_AUTO};

static int pair_init(struct pair *p, const struct model *m, int32_t n_blocks, int32_t bs, enum kv_type t,
                     struct err *e)
{
    memset(p, 0, sizeof *p);
    /* the cpu has no fp8 KV cache: against a GPU's fp8 pool it runs f32 KV (the error is then fp8's own) */
    if (backend_cpu_init(&p->cpu, 2, e) || p->cpu.ops->load(p->cpu.ctx, m, e) ||
        p->cpu.ops->kv_alloc(p->cpu.ctx, n_blocks, bs, t == KV_TYPE_FP8 ? KV_TYPE_F32 : t, e))
        return -1;
    if (backend_cuda_init(&p->gpu, &g_gpu, e) || p->gpu.ops->load(p->gpu.ctx, m, e) ||
        p->gpu.ops->kv_alloc(p->gpu.ctx, n_blocks, bs, t, e) || p->gpu.ops->check(p->gpu.ctx, e))
        return -1;
    return 0;
}

static void pair_free(struct pair *p)
{
    backend_free(&p->cpu);
    backend_free(&p->gpu);
}

/* A scripted sequence of steps over 3 sequences (tokens from a seed): step 0 prefills seq 0 (300 rows,
 * past one attention chunk) and seq 1 (7 rows); step 1 decodes seq 0, continues seq 1 (5 rows), starts
 * seq 2 (3 rows); steps 2..4 decode all three. Every row of every step wants logits. */
#define SCRIPT_STEPS 5
#define SCRIPT_MAX_ROWS 320

struct script {
    int32_t n_vocab, bs;
    int32_t bt[3][64];
    int32_t len[3]; /* tokens so far */
    uint64_t seed;
};

static int32_t script_token(const struct script *s, int seq, int32_t p)
{
    uint64_t x = s->seed + (uint64_t)seq * 1000003u + (uint64_t)p * 7919u;
    return 1 + (int32_t)(rng_splitmix64(&x) % (uint64_t)(s->n_vocab - 1));
}

/* Runs the script's step `k` on be; logits (n_rows, n_vocab) into out; *n_rows out. */
static int script_step(struct script *s, int k, struct backend *be, float *out, int32_t *n_rows, struct err *e)
{
    static const int32_t plan[SCRIPT_STEPS][3] = {{300, 7, 0}, {1, 5, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
    int32_t tokens[SCRIPT_MAX_ROWS], pos[SCRIPT_MAX_ROWS], seq[SCRIPT_MAX_ROWS], lr[SCRIPT_MAX_ROWS];
    struct step_seq ss[3];
    int32_t n = 0, n_seqs = 0, start[3];
    for (int q = 0; q < 3; q++) start[q] = s->len[q];
    for (int q = 0; q < 3; q++) {
        if (!plan[k][q]) continue;
        for (int32_t i = 0; i < plan[k][q]; i++) {
            tokens[n] = script_token(s, q, start[q] + i);
            pos[n] = start[q] + i;
            seq[n] = n_seqs;
            lr[n] = n;
            n++;
        }
        ss[n_seqs].block_table = s->bt[q];
        ss[n_seqs].n_blocks = (start[q] + plan[k][q] + s->bs - 1) / s->bs;
        n_seqs++;
    }
    struct step_batch b = {n, tokens, pos, seq, n_seqs, ss, n, lr, 0, NULL, NULL};
    if (be->ops->forward(be->ctx, &b, out, e)) return -1;
    *n_rows = n;
    return 0;
}

static void script_reset(struct script *s, int32_t n_vocab, int32_t bs, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->n_vocab = n_vocab;
    s->bs = bs;
    s->seed = seed;
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 64; i++) s->bt[q][i] = 191 - (q * 64 + i); /* any placement */
}

static void script_advance(struct script *s, int k)
{
    static const int32_t plan[SCRIPT_STEPS][3] = {{300, 7, 0}, {1, 5, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
    for (int q = 0; q < 3; q++) s->len[q] += plan[k][q];
}

/* The error of logit row y against the cpu backend's x (n_vocab), as rms and max over std(x), folded into
 * *rms and *mx (their maxima); NaN counts as infinite. */
static void logit_error(const float *x, const float *y, int32_t nv, double *rms, double *mx)
{
    double s = 0, s2 = 0, d2 = 0, dm = 0;
    for (int32_t i = 0; i < nv; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
        double d = fabs((double)x[i] - y[i]);
        if (isnan(d)) d = INFINITY;
        d2 += d * d;
        dm = fmax(dm, d);
    }
    const double sd = sqrt(fmax(s2 / nv - (s / nv) * (s / nv), 1e-30));
    *rms = fmax(*rms, sqrt(d2 / nv) / sd);
    *mx = fmax(*mx, dm / sd);
}

/* The script on both backends; worst rms and max error / std(cpu logits) over steps and rows. */
static int compare_steps(const struct model *m, enum kv_type t, double *rms_out, double *max_out, struct err *e)
{
    struct pair p;
    struct script sc;
    const int32_t nv = m->hp.n_vocab;
    float *a = xmalloc((size_t)SCRIPT_MAX_ROWS * nv * 4), *b = xmalloc((size_t)SCRIPT_MAX_ROWS * nv * 4);
    int rc = -1;
    *rms_out = *max_out = 0;
    if (pair_init(&p, m, 192, 16, t, e)) goto out;
    script_reset(&sc, nv, 16, 99);
    for (int k = 0; k < SCRIPT_STEPS; k++) {
        int32_t n = 0, n2 = 0;
        for (size_t i = 0; i < (size_t)SCRIPT_MAX_ROWS * nv; i++) b[i] = NAN;
        if (script_step(&sc, k, &p.cpu, a, &n, e) || script_step(&sc, k, &p.gpu, b, &n2, e)) goto out;
        script_advance(&sc, k);
        for (int32_t r = 0; r < n; r++) logit_error(a + (size_t)r * nv, b + (size_t)r * nv, nv, rms_out, max_out);
    }
    rc = 0;
out:
    pair_free(&p);
    free(a);
    free(b);
    return rc;
}

struct synth_case {
    const char *name, *arch;
    enum gguf_dtype type;
    int head_dim, tied, rope_freqs;
    enum kv_type kv;
    double rms_tol, max_tol;
};

/* Builds the synthetic model of cfg and checks a step's logits on the device against the cpu backend's
 * (compare_steps) within the tolerances, printing the errors. */
static void check_synth_step(const char *name, const struct synth_cfg *cfg, enum kv_type kv, double rms_tol,
                             double max_tol)
{
    struct err e;
    struct synth_model sm;
    CHECK_MSG(synth_build(cfg, 1, &sm, &e) == 0, "%s: %s", name, e.msg);
    double rms, mx;
    int rc = compare_steps(sm.m, kv, &rms, &mx, &e);
    synth_free(&sm);
    CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
    fprintf(stderr, "# %s: logits error / std: rms %.3g (tol %.3g), max %.3g (tol %.3g)\n", name, rms, rms_tol, mx,
            max_tol);
    CHECK_MSG(rms <= rms_tol && mx <= max_tol, "%s: rms %.3g, max %.3g", name, rms, mx);
}

TEST(step_vs_cpu_synthetic)
{
    const struct synth_case cases[] = {
        {"llama f32", "llama", GGUF_DTYPE_F32, 0, 0, 0, KV_TYPE_F32, 1e-4, 1e-3},
        {"llama f32 kv f16", "llama", GGUF_DTYPE_F32, 0, 0, 0, KV_TYPE_F16, 1e-4, 1e-3},
        {"llama f32 tied rope_freqs", "llama", GGUF_DTYPE_F32, 0, 1, 1, KV_TYPE_F32, 1e-4, 1e-3},
        {"qwen2 f32", "qwen2", GGUF_DTYPE_F32, 0, 0, 0, KV_TYPE_F32, 1e-4, 1e-3},
        {"qwen3 f32 hd 32", "qwen3", GGUF_DTYPE_F32, 32, 0, 0, KV_TYPE_F32, 1e-4, 1e-3},
        {"llama bf16", "llama", GGUF_DTYPE_BF16, 0, 0, 0, KV_TYPE_F16, 2e-2, 1.5e-1},
        {"qwen3 f16", "qwen3", GGUF_DTYPE_F16, 0, 0, 0, KV_TYPE_F16, 2e-2, 1.5e-1},
        {"llama bf16 hd 64 (tensor-core attention)", "llama", GGUF_DTYPE_BF16, 64, 0, 0, KV_TYPE_F16, 2e-2, 1.5e-1},
        /* F16 weights become BF16 on the device: on the CPU alone that rounding moves this model's logits
         * by rms 0.0172 (0.0152 for "qwen3 f16" above); measured on the H200 with the tensor-core
         * attention: 0.0203 (and 0.0187 above with the CUDA-core one), hence 3e-2 here */
        {"qwen3 f16 hd 128 (tensor-core attention)", "qwen3", GGUF_DTYPE_F16, 128, 0, 0, KV_TYPE_F16, 3e-2, 1.5e-1},
        {"llama q8_0", "llama", GGUF_DTYPE_Q8_0, 0, 0, 0, KV_TYPE_F16, 8e-2, 0.5},
        {"qwen2 q4_1", "qwen2", GGUF_DTYPE_Q4_1, 0, 0, 0, KV_TYPE_F16, 8e-2, 0.5},
        /* q8_0 KV (the CUDA-core attention): both backends quantize the same way, but a K/V value whose
         * x / d lies within the two backends' f32 difference of a .5 rounds to the other integer, and one
         * step moves (then the next layer's K/V differ by more). Measured on the CPU alone with these three
         * models, their F32 weights moved by one ulp (the logits then move by rms 1.7e-6): under q8_0 KV the
         * logits move by rms 2e-4 .. 8e-4, max 7e-4 .. 3e-3 (growing about as the square root of the
         * difference); q8_0 against f32 KV is rms 0.016 .. 0.018, max 0.05 .. 0.06; a wrong read is O(1).
         * Hence 1e-2 and 5e-2; kernel_qkv and kernel_attention* check the q8_0 arithmetic bit for bit. */
        {"llama f32 hd 32 kv q8_0", "llama", GGUF_DTYPE_F32, 32, 0, 0, KV_TYPE_Q8_0, 1e-2, 5e-2},
        {"qwen2 f32 hd 64 kv q8_0", "qwen2", GGUF_DTYPE_F32, 64, 0, 0, KV_TYPE_Q8_0, 1e-2, 5e-2},
        {"qwen3 f32 hd 128 kv q8_0", "qwen3", GGUF_DTYPE_F32, 128, 0, 0, KV_TYPE_Q8_0, 1e-2, 5e-2},
        /* q8_0 KV under BF16 weights: the tensor-core attention. The BF16 case above (f16 KV, tensor cores)
         * measured rms 0.0099, max 0.036 on the H200. Here the K/V the two backends quantize differ by that
         * BF16 noise, so values near a rounding edge (~10% of them, estimated) land one step apart, a
         * difference about as large as q8_0's own error (rms 0.016 .. 0.018 of the logits against f32 KV);
         * with the BF16 noise, rms ~0.02 .. 0.03 expected (not yet measured when written), hence 4e-2 and
         * 0.25: below a wrong read's O(1) */
        {"llama bf16 hd 64 kv q8_0 (tensor-core attention)", "llama", GGUF_DTYPE_BF16, 64, 0, 0, KV_TYPE_Q8_0, 4e-2,
         0.25},
        {"qwen3 bf16 hd 128 kv q8_0 (tensor-core attention)", "qwen3", GGUF_DTYPE_BF16, 128, 0, 0, KV_TYPE_Q8_0, 4e-2,
         0.25},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct synth_cfg cfg = synth_default();
        cfg.arch = cases[i].arch;
        cfg.type = cases[i].type;
        cfg.n_embd = 128;
        cfg.n_head = 8;
        cfg.n_head_kv = 2;
        cfg.n_ff = 192;
        cfg.n_vocab = 320;
        cfg.n_ctx = 1024;
        cfg.head_dim = cases[i].head_dim;
        cfg.tied = cases[i].tied;
        cfg.rope_freqs = cases[i].rope_freqs;
        cfg.seed = 7 + i;
        check_synth_step(cases[i].name, &cfg, cases[i].kv, cases[i].rms_tol, cases[i].max_tol);
    }
    /* q8_0 KV with a head dimension that is not a multiple of 32 (16 here): kv_alloc refuses it, saying why */
    struct err e;
    struct synth_model sm;
    struct backend be = {0};
    const struct synth_cfg cfg = synth_default(); /* n_embd 64, 4 heads */
    CHECK_MSG(synth_build(&cfg, 1, &sm, &e) == 0, "%s", e.msg);
    int rc = backend_cuda_init(&be, NULL, &e) || be.ops->load(be.ctx, sm.m, &e)
                 ? -2
                 : be.ops->kv_alloc(be.ctx, 16, 16, KV_TYPE_Q8_0, &e);
    backend_free(&be);
    synth_free(&sm);
    fprintf(stderr, "# kv q8_0 at head_dim 16: %s\n", rc == -2 ? e.msg : rc ? e.msg : "NOT refused");
    CHECK_MSG(rc == -1 && strstr(e.msg, "multiple of 32"), "q8_0 KV at head_dim 16: rc %d (%s)", rc, rc ? e.msg : "");
}

/* Q4_K_M's rule (llama.cpp's mix): Q4_K, with Q6_K for attn_v, ffn_down and the output head. */
static enum gguf_dtype mix_q4_k_m(const char *name)
{
    if (strstr(name, "attn_v") || strstr(name, "ffn_down") || !strcmp(name, "output.weight")) return GGUF_DTYPE_Q6_K;
    return 0;
}

/* The other K-quants and a 32-element type in one model (Q4_K elsewhere). */
static enum gguf_dtype mix_k_others(const char *name)
{
    if (strstr(name, "attn_k")) return GGUF_DTYPE_Q5_K;
    if (strstr(name, "attn_output")) return GGUF_DTYPE_Q3_K;
    if (strstr(name, "ffn_gate")) return GGUF_DTYPE_Q2_K;
    if (strstr(name, "ffn_up")) return GGUF_DTYPE_Q5_0;
    if (strstr(name, "ffn_down")) return GGUF_DTYPE_Q6_K;
    return 0;
}

/* Models of K-quant mixes (rows of whole 256-element super-blocks: n_embd 256, n_ff 512), their weights
 * dequantized on the device at load, against the CPU backend. The CPU quantizes the activations of these
 * matmuls to 8 bits and the GPU rounds them and the weights to BF16, hence Q8_0's tolerances: on the CPU
 * alone, these models vs their own weights dequantized and rounded to BF16 differ by rms 0.044 and 0.041,
 * max 0.13 (measured when the test was written). */
TEST(step_vs_cpu_kquant)
{
    const struct {
        const char *name, *arch;
        enum gguf_dtype (*type_of)(const char *);
    } cases[] = {{"llama q4_k_m", "llama", mix_q4_k_m}, {"qwen2 q5_k q3_k q2_k q5_0 q6_k", "qwen2", mix_k_others}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct synth_cfg cfg = synth_default();
        cfg.arch = cases[i].arch;
        cfg.type = GGUF_DTYPE_Q4_K;
        cfg.type_of = cases[i].type_of;
        cfg.n_embd = 256;
        cfg.n_head = 8;
        cfg.n_head_kv = 2;
        cfg.n_ff = 512;
        cfg.n_vocab = 320;
        cfg.n_ctx = 1024;
        cfg.seed = 41 + i;
        check_synth_step(cases[i].name, &cfg, KV_TYPE_F16, 8e-2, 0.5);
    }
}

/* FP8 layers (--gpu-weights fp8) against the CPU backend's own types: e4m3 with a scale per output channel
 * and per input row rounds each weight and each GEMM input to 3 mantissa bits (a relative error of up to
 * 1/16, about 3.6% rms for each), so the logits move far more than under BF16 (rms 0.01 .. 0.02 above); a
 * wrong scale or a misread row is off by O(1) or more. Sources: F32 (quantized from the f32 rows), BF16,
 * F16 and Q4_1 / Q4_K_M (dequantized on the device first); CUDA-core and tensor-core attention. The
 * tolerances are set from the H200's measurements (bench/NOTES.md). */
TEST(step_vs_cpu_fp8)
{
    const struct synth_case cases[] = {
        {"llama f32 fp8", "llama", GGUF_DTYPE_F32, 0, 0, 0, KV_TYPE_F16, 0.15, 0.8},
        {"llama bf16 hd 64 fp8 (tensor-core attention)", "llama", GGUF_DTYPE_BF16, 64, 0, 0, KV_TYPE_F16, 0.15, 0.8},
        {"qwen3 f16 hd 128 fp8", "qwen3", GGUF_DTYPE_F16, 128, 0, 0, KV_TYPE_F16, 0.15, 0.8},
        {"qwen2 q4_1 fp8 kv q8_0", "qwen2", GGUF_DTYPE_Q4_1, 64, 1, 0, KV_TYPE_Q8_0, 0.15, 0.8},
        {"llama bf16 hd 128 fp8 kv fp8 (tensor-core attention)", "llama", GGUF_DTYPE_BF16, 128, 0, 0, KV_TYPE_FP8,
         0.2, 1.0},
        {"qwen3 f32 hd 32 fp8 kv fp8 (CUDA-core attention)", "qwen3", GGUF_DTYPE_F32, 32, 0, 0, KV_TYPE_FP8, 0.2, 1.0},
    };
    g_gpu.weights = BACKEND_WEIGHTS_FP8;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !test_cur_failed; i++) {
        struct synth_cfg cfg = synth_default();
        cfg.arch = cases[i].arch;
        cfg.type = cases[i].type;
        cfg.n_embd = 128;
        cfg.n_head = 8;
        cfg.n_head_kv = 2;
        cfg.n_ff = 192;
        cfg.n_vocab = 320;
        cfg.n_ctx = 1024;
        cfg.head_dim = cases[i].head_dim;
        cfg.tied = cases[i].tied;
        cfg.seed = 17 + i;
        check_synth_step(cases[i].name, &cfg, cases[i].kv, cases[i].rms_tol, cases[i].max_tol);
    }
    g_gpu.weights = BACKEND_WEIGHTS_AUTO;
}

TEST(step_vs_cpu_stories260K)
{
    struct err e;
    struct loaded L;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    double rms, mx;
    int rc = compare_steps(L.m, KV_TYPE_F32, &rms, &mx, &e);
    unload_model(&L);
    CHECK_MSG(rc == 0, "%s", e.msg);
    fprintf(stderr, "# stories260K: logits error / std: rms %.3g (tol 1e-4), max %.3g (tol 1e-3)\n", rms, mx);
    CHECK(rms <= 1e-4 && mx <= 1e-3);
}

/* A small synthetic llama in BF16 at head_dim 64: f16 and q8_0 KV both run the tensor-core attention, and
 * one-row steps the (fused) GEMVs. */
static struct synth_cfg bf16_hd64_cfg(void)
{
    struct synth_cfg cfg = synth_default();
    cfg.type = GGUF_DTYPE_BF16;
    cfg.n_embd = 256;
    cfg.n_head = 8;
    cfg.n_head_kv = 2;
    cfg.n_ff = 512;
    cfg.n_vocab = 1000;
    cfg.n_ctx = 1024;
    cfg.head_dim = 64;
    return cfg;
}

/* The script twice on one GPU backend (the KV pool re-used): bit-identical logits. */
TEST(step_deterministic)
{
    struct err e;
    const struct synth_cfg cfg = bf16_hd64_cfg();
    struct synth_model sm;
    CHECK_MSG(synth_build(&cfg, 1, &sm, &e) == 0, "%s", e.msg);
    struct backend be;
    const size_t n = (size_t)SCRIPT_STEPS * SCRIPT_MAX_ROWS * cfg.n_vocab;
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    int32_t rows[2][SCRIPT_STEPS];
    const enum kv_type types[2] = {KV_TYPE_F16, KV_TYPE_Q8_0};
    int ok = backend_cuda_init(&be, NULL, &e) == 0 && be.ops->load(be.ctx, sm.m, &e) == 0, same = 1;
    for (int kt = 0; ok && same && kt < 2; kt++) {
        ok = be.ops->kv_alloc(be.ctx, 192, 16, types[kt], &e) == 0;
        for (int run = 0; ok && run < 2; run++) {
            struct script sc;
            script_reset(&sc, cfg.n_vocab, 16, 5);
            for (int k = 0; ok && k < SCRIPT_STEPS; k++) {
                ok = script_step(&sc, k, &be, out[run] + (size_t)k * SCRIPT_MAX_ROWS * cfg.n_vocab,
                                 &rows[run][k], &e) == 0;
                script_advance(&sc, k);
            }
        }
        for (int k = 0; ok && k < SCRIPT_STEPS; k++)
            same &= rows[0][k] == rows[1][k] && memcmp(out[0] + (size_t)k * SCRIPT_MAX_ROWS * cfg.n_vocab,
                                                       out[1] + (size_t)k * SCRIPT_MAX_ROWS * cfg.n_vocab,
                                                       (size_t)rows[0][k] * cfg.n_vocab * 4) == 0;
        if (ok)
            fprintf(stderr, "# deterministic, kv %s: %s\n", model_kv_type_name(types[kt]),
                    same ? "same logits" : "DIFFER");
    }
    backend_free(&be);
    synth_free(&sm);
    free(out[0]);
    free(out[1]);
    CHECK_MSG(ok, "%s", e.msg);
    CHECK_MSG(same, "two runs of the same steps gave different logits");
}

/* One sequence as the engine runs it alone: a prompt of ONE_PROMPT rows whose last row wants logits (the
 * output head of one row in a step of many), then ONE_DECODE decode steps of one row; the first half with a
 * logits buffer (launched kernel by kernel), the second half (keep = 1) kept on the device and brought back
 * by the op sample as a SAMPLE_HOST row (CUDA graphs where the backend has them); keep = 0: all with a
 * buffer. out (1 + ONE_DECODE, n_vocab). */
#define ONE_PROMPT 37
#define ONE_DECODE 12

static int one_seq_steps(struct backend *be, int32_t nv, int keep, float *out, struct err *e)
{
    static const int32_t bt[4] = {3, 0, 2, 1}; /* 64 positions of 16-token blocks */
    int32_t tokens[ONE_PROMPT], pos[ONE_PROMPT], seq[ONE_PROMPT] = {0};
    const struct sample_row host_row = {SAMPLE_HOST, 0, NULL, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 0};
    for (int32_t i = 0; i < ONE_PROMPT; i++) {
        tokens[i] = 1 + (i * 7919) % (nv - 1);
        pos[i] = i;
    }
    for (int k = 0; k <= ONE_DECODE; k++) {
        const int32_t n = k ? 1 : ONE_PROMPT, p0 = k ? ONE_PROMPT + k - 1 : 0, last = n - 1;
        if (k) {
            tokens[0] = 1 + (p0 * 104729) % (nv - 1);
            pos[0] = p0;
        }
        const struct step_seq ss = {bt, (p0 + n + 15) / 16};
        const struct step_batch b = {n, tokens, pos, seq, 1, &ss, 1, &last, 0, NULL, NULL};
        float *row = out + (size_t)k * nv;
        int32_t tok = 0;
        if (!keep || 2 * k <= ONE_DECODE) {
            if (be->ops->forward(be->ctx, &b, row, e)) return -1;
        } else if (be->ops->forward(be->ctx, &b, NULL, e) ||
                   be->ops->sample(be->ctx, &host_row, 1, nv, &tok, row, NULL, e)) {
            return -1;
        }
    }
    return 0;
}

/* Steps of one row on a BF16 model with the fused GEMVs on and off (backend_cuda_fuse): bit-identical logits
 * (the fused kernels make the same inputs as the norm and SwiGLU kernels, and take the same products), graphed
 * steps among them; the fused run against the cpu backend within the BF16 tolerances of step_vs_cpu_synthetic. */
TEST(step_fused_vs_unfused)
{
    struct err e;
    const struct synth_cfg cfg = bf16_hd64_cfg();
    struct synth_model sm;
    CHECK_MSG(synth_build(&cfg, 1, &sm, &e) == 0, "%s", e.msg);
    const size_t n = (size_t)(1 + ONE_DECODE) * cfg.n_vocab;
    float *ref = xmalloc(n * 4), *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    int64_t launches[3] = {0, 0, 0};
    struct pair p;
    int ok = pair_init(&p, sm.m, 64, 16, KV_TYPE_F16, &e) == 0 && one_seq_steps(&p.cpu, cfg.n_vocab, 0, ref, &e) == 0;
    for (int fuse = 0; ok && fuse < 2; fuse++) {
        for (size_t i = 0; i < n; i++) out[fuse][i] = NAN;
        ok = backend_cuda_fuse(&p.gpu, fuse) == fuse && backend_cuda_graphs(&p.gpu, -1, &launches[fuse], NULL) == 0 &&
             one_seq_steps(&p.gpu, cfg.n_vocab, 1, out[fuse], &e) == 0;
    }
    ok = ok && backend_cuda_graphs(&p.gpu, -1, &launches[2], NULL) == 0;
    pair_free(&p);
    synth_free(&sm);
    CHECK_MSG(ok, "%s", e.msg);
    double rms = 0, mx = 0;
    for (int k = 0; k <= ONE_DECODE; k++)
        logit_error(ref + (size_t)k * cfg.n_vocab, out[1] + (size_t)k * cfg.n_vocab, cfg.n_vocab, &rms, &mx);
    const int same = memcmp(out[0], out[1], n * 4) == 0;
    fprintf(stderr, "# one-row steps: fused %s unfused; graph launches %lld unfused, %lld fused; fused vs cpu: rms "
            "%.3g (tol 2e-2), max %.3g (tol 1.5e-1)\n", same ? "==" : "DIFFER from",
            (long long)(launches[1] - launches[0]), (long long)(launches[2] - launches[1]), rms, mx);
    free(ref);
    free(out[0]);
    free(out[1]);
    CHECK_MSG(same, "fused and unfused logits differ");
    CHECK_MSG(launches[1] > launches[0] && launches[2] > launches[1], "no graphed step");
    CHECK_MSG(rms <= 2e-2 && mx <= 1.5e-1, "fused vs cpu: rms %.3g, max %.3g", rms, mx);
}

/* FP8 layers: the script's steps (multi-row ones included) with the GEMM inputs made and quantized in one
 * kernel (RMSNorm and SwiGLU fused with the row quantizer) and apart (backend_cuda_fuse off): bit-identical
 * logits, the fused kernels keeping the arithmetic of the kernels apart. */
TEST(step_fp8_fused_vs_unfused)
{
    struct err e;
    struct synth_cfg cfg = bf16_hd64_cfg();
    struct synth_model sm;
    CHECK_MSG(synth_build(&cfg, 1, &sm, &e) == 0, "%s", e.msg);
    const size_t n = (size_t)SCRIPT_STEPS * SCRIPT_MAX_ROWS * cfg.n_vocab;
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    int32_t rows[2][SCRIPT_STEPS];
    struct backend be;
    const struct backend_config fp8 = {0, 0, BACKEND_WEIGHTS_FP8};
    int ok = backend_cuda_init(&be, &fp8, &e) == 0 && be.ops->load(be.ctx, sm.m, &e) == 0 &&
             be.ops->kv_alloc(be.ctx, 192, 16, KV_TYPE_F16, &e) == 0;
    for (int fuse = 0; ok && fuse < 2; fuse++) {
        for (size_t i = 0; i < n; i++) out[fuse][i] = NAN;
        ok = backend_cuda_fuse(&be, fuse) == fuse;
        struct script sc;
        script_reset(&sc, cfg.n_vocab, 16, 5);
        for (int k = 0; ok && k < SCRIPT_STEPS; k++) {
            ok = script_step(&sc, k, &be, out[fuse] + (size_t)k * SCRIPT_MAX_ROWS * cfg.n_vocab,
                             &rows[fuse][k], &e) == 0;
            script_advance(&sc, k);
        }
    }
    int same = ok;
    for (int k = 0; ok && k < SCRIPT_STEPS; k++)
        same &= memcmp(out[0] + (size_t)k * SCRIPT_MAX_ROWS * cfg.n_vocab,
                       out[1] + (size_t)k * SCRIPT_MAX_ROWS * cfg.n_vocab,
                       (size_t)rows[0][k] * cfg.n_vocab * 4) == 0;
    backend_free(&be);
    synth_free(&sm);
    free(out[0]);
    free(out[1]);
    CHECK_MSG(ok, "%s", e.msg);
    fprintf(stderr, "# fp8 steps: fused inputs %s the kernels apart\n", same ? "==" : "DIFFER from");
    CHECK_MSG(same, "FP8 steps with fused and unfused GEMM inputs differ");
}

int main(void)
{
    char why[512];
    if (!backend_cuda_probe(why, sizeof why)) {
        printf("skip cuda_step: %s\n", why);
        return 0;
    }
    RUN_SEL(step_vs_cpu_synthetic);
    RUN_SEL(step_vs_cpu_kquant);
    RUN_SEL(step_vs_cpu_fp8);
    RUN_SEL(step_fp8_fused_vs_unfused);
    RUN_SEL(step_vs_cpu_stories260K);
    RUN_SEL(step_deterministic);
    RUN_SEL(step_fused_vs_unfused);
    return test_summary();
}

#endif
