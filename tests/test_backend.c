/* test_backend — the CPU backend: kernels (SIMD vs scalar reference), batch invariance (bit for bit),
 * quantized paths vs F32, KV types, the SmolLM2 Q4_1 path vs its F32-dequantized copy, and bad batches.
 *
 * Stated tolerances (measured values in comments, each test prints its own):
 *  - dot kernels, SIMD vs scalar, same type: |diff| <= 1e-5 * sum|w_i x_i| + 1e-6 (only the float
 *    summation order differs; integer block sums are exact).
 *  - integer kernels vs dequantize-then-dot in f32: <= 1.5e-2 * sum|w_i x_i| (8-bit activations).
 *  - synthetic model (64 embd, 2 layers, random uniform weights), errors / std(f32 logits), rms and max,
 *    vs the F32 model with the same values and vs the type's own weights dequantized to F32: see
 *    test_quant_vs_f32_synthetic's table (e.g. Q8_0 rms <= 0.05, Q4_1 rms <= 0.40 vs the F32 model;
 *    F16/BF16 are bit-identical to their F32 copies, Q8_0/Q4_0/Q4_1 within rms 0.03-0.05).
 *  - KV types vs F32 KV on the same model: F16 <= 0.01, Q8_0 <= 0.05 (same measure).
 *  - SmolLM2-135M Q4_1 vs the same weights dequantized to F32 (only the 8-bit activation quantization
 *    differs; with f32 activations the two agree exactly), per position of a 16-token chat prompt:
 *      max |diff| <= 0.75 std(f32 logits) (measured 0.46), rms <= 0.35 std (measured 0.22), the same
 *      argmax at the last position and at all but 2 positions (measured 15/16).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "engine/sampler.h"
#include "gguf/quant.h"
#include "model/model.h"
#include "synth_util.h"
#include "tokenizer/tok.h"
#include "test.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 12345;

static float frand(float a)
{
    return synth_uniform(&rng_state, a);
}

struct seq_spec {
    const int32_t *tokens;
    int32_t n_tokens;
    int32_t blocks[64];
    int32_t n_blocks;
};

/* One step row: (sequence, index into its tokens, wants logits). */
struct row_spec {
    int seq;
    int32_t pos;
    int want;
};

/* Runs one step of the given rows; logits (n_want, n_vocab) in row order. */
static int run_step(struct backend *be, const struct seq_spec *seqs, int n_seqs, const struct row_spec *rows,
                    int n_rows, float *logits, struct err *e)
{
    int32_t tokens[512], pos[512], seq[512], lrows[512];
    struct step_seq ss[16];
    int n_logits = 0;
    for (int i = 0; i < n_seqs; i++) {
        ss[i].block_table = seqs[i].blocks;
        ss[i].n_blocks = seqs[i].n_blocks;
    }
    for (int r = 0; r < n_rows; r++) {
        tokens[r] = seqs[rows[r].seq].tokens[rows[r].pos];
        pos[r] = rows[r].pos;
        seq[r] = rows[r].seq;
        if (rows[r].want) lrows[n_logits++] = r;
    }
    struct step_batch b = {n_rows, tokens, pos, seq, n_seqs, ss, n_logits, lrows};
    return be->ops->forward(be->ctx, &b, logits, e);
}

static int make_backend(struct backend *be, const struct model *m, int n_threads, int32_t n_blocks, int32_t bs,
                        enum kv_type t, struct err *e)
{
    if (backend_cpu_init(be, n_threads, e)) return -1;
    if (be->ops->load(be->ctx, m, e) || be->ops->kv_alloc(be->ctx, n_blocks, bs, t, e)) {
        backend_free(be);
        return -1;
    }
    return 0;
}

/* Logits of every position of one sequence, prefilled in one step (n, n_vocab). */
static float *logits_alone(const struct model *m, const int32_t *tokens, int32_t n, int n_threads, enum kv_type t,
                           struct err *e)
{
    struct backend be;
    if (make_backend(&be, m, n_threads, 64, 4, t, e)) return NULL;
    struct seq_spec s = {tokens, n, {0}, 0};
    for (int i = 0; i < 64; i++) s.blocks[i] = 63 - i; /* any placement */
    s.n_blocks = 64;
    struct row_spec rows[512];
    for (int32_t i = 0; i < n; i++) rows[i] = (struct row_spec){0, i, 1};
    float *out = malloc((size_t)n * (size_t)m->hp.n_vocab * sizeof(float));
    if (!out || run_step(&be, &s, 1, rows, n, out, e)) {
        free(out);
        out = NULL;
    }
    backend_free(&be);
    return out;
}

static double logit_std(const float *x, int64_t n)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    double mean = s / (double)n;
    return sqrt(s2 / (double)n - mean * mean);
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* ---------------------------------------------------------------- kernels */

static const enum gguf_dtype all_types[] = {GGUF_DTYPE_F32, GGUF_DTYPE_F16, GGUF_DTYPE_BF16,
                                            GGUF_DTYPE_Q8_0, GGUF_DTYPE_Q4_0, GGUF_DTYPE_Q4_1};

TEST(test_dot_simd_vs_scalar)
{
    const int64_t lens[] = {32, 64, 96, 160, 1024, 8, 172, 100, 7};
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum gguf_dtype t = all_types[ti];
        int q8 = cpu_type_uses_q8(t);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t n = lens[li];
            if (q8 && n % 32) continue;
            float *wf = malloc((size_t)n * 4), *wd = malloc((size_t)n * 4), *x = malloc(4 * (size_t)n * 4);
            uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n);
            void *w = malloc(rb);
            struct cpu_q8_block *xq = malloc(4 * (size_t)(n / 32 + 1) * sizeof *xq);
            CHECK(wf && wd && x && w && xq);
            for (int64_t i = 0; i < n; i++) wf[i] = frand(1.0f);
            for (int64_t i = 0; i < 4 * n; i++) x[i] = frand(2.0f);
            CHECK(quant_quantize_row(t, wf, w, n) == 0);
            CHECK(quant_dequantize_row(t, w, wd, n) == 0);
            const void *xin = x;
            int64_t xs = n * 4;
            if (q8) {
                for (int r = 0; r < 4; r++) cpu_quantize_row_q8(x + r * n, xq + r * (n / 32), n);
                xin = xq;
                xs = n / 32 * (int64_t)sizeof *xq;
            }
            float simd4[4], simd1[4], ref[4];
            cpu_dot_simd(t)(n, w, xin, xs, 4, simd4);
            for (int r = 0; r < 4; r++) cpu_dot_simd(t)(n, w, (const char *)xin + r * xs, xs, 1, &simd1[r]);
            cpu_dot_scalar(t)(n, w, xin, xs, 4, ref);
            /* the AVX-VNNI integer kernels (when this CPU has them) equal the AVX2 ones bit for bit */
            cpu_dot_fn vnni = cpu_dot_variant(t, CPU_KERNEL_VNNI), avx2 = cpu_dot_variant(t, CPU_KERNEL_AVX2);
            if (vnni && avx2) {
                float va[4], vb[4];
                vnni(n, w, xin, xs, 4, va);
                avx2(n, w, xin, xs, 4, vb);
                CHECK_MSG(memcmp(va, vb, sizeof va) == 0, "type %s n %lld: VNNI differs from AVX2",
                          gguf_dtype_info(t)->name, (long long)n);
            }
            /* rows share a weight decode but never an accumulator: bit-identical */
            CHECK_MSG(memcmp(simd4, simd1, sizeof simd4) == 0, "type %s n %lld: 4-row kernel differs from 1-row",
                      gguf_dtype_info(t)->name, (long long)n);
            for (int r = 0; r < 4; r++) {
                double mag = 0, exact = 0, exact_q = 0;
                for (int64_t i = 0; i < n; i++) {
                    mag += fabs((double)wd[i] * x[r * n + i]);
                    exact += (double)wd[i] * x[r * n + i];
                    if (q8) {
                        const struct cpu_q8_block *blk = &xq[r * (n / 32) + i / 32];
                        exact_q += (double)wd[i] * ((double)blk->d * blk->q[i % 32]);
                    }
                }
                /* the integer path equals dequantize(w) . dequantize(q8(x)) up to float rounding */
                CHECK_MSG(!q8 || fabs((double)simd4[r] - exact_q) <= 1e-5 * mag + 1e-6,
                          "type %s n %lld: simd %g vs dequantized dot %g", gguf_dtype_info(t)->name, (long long)n,
                          simd4[r], exact_q);
                CHECK_MSG(fabs((double)simd4[r] - ref[r]) <= 1e-5 * mag + 1e-6, "type %s n %lld: simd %g scalar %g",
                          gguf_dtype_info(t)->name, (long long)n, simd4[r], ref[r]);
                double tol = q8 ? 1.5e-2 * mag : 1e-5 * mag + 1e-6;
                CHECK_MSG(fabs((double)simd4[r] - exact) <= tol, "type %s n %lld: simd %g vs f32 dot %g",
                          gguf_dtype_info(t)->name, (long long)n, simd4[r], exact);
            }
            free(wf);
            free(wd);
            free(x);
            free(w);
            free(xq);
        }
    }
}

/* The tile kernels (what the matmul calls) equal per-row dot calls bit for bit, for every n_x. */
TEST(test_tile_equals_dot)
{
    const int64_t n = 96;
    const int n_w = 5;
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum gguf_dtype t = all_types[ti];
        int q8 = cpu_type_uses_q8(t);
        uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n);
        char w[5 * 512];
        float wf[96], x[4 * 96], y[4 * 8], ref[4];
        struct cpu_q8_block xq[4 * 3];
        for (int o = 0; o < n_w; o++) {
            for (int64_t i = 0; i < n; i++) wf[i] = frand(1.0f);
            CHECK(quant_quantize_row(t, wf, w + o * rb, n) == 0);
        }
        for (int64_t i = 0; i < 4 * n; i++) x[i] = frand(1.0f);
        for (int r = 0; r < 4; r++) cpu_quantize_row_q8(x + r * n, xq + r * 3, n);
        const void *xin = q8 ? (const void *)xq : (const void *)x;
        int64_t xs = q8 ? 3 * (int64_t)sizeof(struct cpu_q8_block) : n * 4;
        struct cpu_kernel k = cpu_kernel_best(t);
        CHECK(k.dot && k.tile);
        for (int n_x = 1; n_x <= 4; n_x++) {
            k.tile(n, w, (int64_t)rb, n_w, xin, xs, n_x, y, 8);
            for (int o = 0; o < n_w; o++) {
                k.dot(n, w + o * rb, xin, xs, n_x, ref);
                for (int i = 0; i < n_x; i++)
                    CHECK_MSG(memcmp(&y[i * 8 + o], &ref[i], sizeof(float)) == 0, "type %s n_x %d o %d i %d",
                              gguf_dtype_info(t)->name, n_x, o, i);
            }
        }
    }
}

/* Q8_0 weights of -128 (not produced by the quantizer, legal in a file) must not saturate. */
TEST(test_dot_q8_0_extremes)
{
    uint8_t w[34];
    w[0] = 0x00;
    w[1] = 0x3C; /* f16 1.0 */
    for (int i = 0; i < 32; i++) w[2 + i] = 0x80; /* -128 */
    struct cpu_q8_block xq;
    xq.d = 1.0f;
    for (int i = 0; i < 32; i++) xq.q[i] = -127;
    xq.s = -127.0f * 32;
    float a, b;
    cpu_dot_simd(GGUF_DTYPE_Q8_0)(32, w, &xq, sizeof xq, 1, &a);
    cpu_dot_scalar(GGUF_DTYPE_Q8_0)(32, w, &xq, sizeof xq, 1, &b);
    CHECK(a == 128.0f * 127.0f * 32.0f);
    CHECK(b == a);
}

/* ---------------------------------------------------------------- batch invariance */

/* A alone (1 thread) vs A inside mixed batches (2 threads), A in 3 chunks (3 threads), decode rows. */
static int check_invariance(const struct model *m, enum kv_type kvt, char *why, size_t why_n)
{
    struct err e = {{0}};
    const int32_t V = m->hp.n_vocab;
    int32_t ta[24], tb[12], tc[24];
    for (int i = 0; i < 24; i++) ta[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < 12; i++) tb[i] = (int32_t)((i * 53 + 5) % V);
    for (int i = 0; i < 24; i++) tc[i] = (int32_t)((i * 29 + 3) % V);
    const int NA = 24;
    float *ref = logits_alone(m, ta, NA, 1, kvt, &e);
    if (!ref) return snprintf(why, why_n, "alone: %.400s", e.msg), -1;
    float *got = malloc((size_t)64 * V * sizeof(float));
    struct backend be;
    int rc = -1;
    if (make_backend(&be, m, 2, 64, 4, kvt, &e)) {
        snprintf(why, why_n, "backend: %.400s", e.msg);
        goto out;
    }
    /* blocks: A 5,9,1,30,31,2; B 7,8,10; C 11..16 (pool of 64 blocks of 4) */
    struct seq_spec seqs[3] = {{tb, 12, {7, 8, 10}, 3}, {ta, NA, {5, 9, 1, 30, 31, 2}, 6},
                               {tc, 24, {11, 12, 13, 14, 15, 16}, 6}};
    /* step 1: B 0..6 (want last), A 0..9 (want all), C 0..12 (want 3 rows) */
    struct row_spec rows[64];
    int n = 0, a_first[3], a_count[3];
    for (int i = 0; i < 7; i++) rows[n++] = (struct row_spec){0, i, i == 6};
    a_first[0] = n;
    for (int i = 0; i < 10; i++) rows[n++] = (struct row_spec){1, i, 1};
    a_count[0] = 10;
    for (int i = 0; i < 13; i++) rows[n++] = (struct row_spec){2, i, i % 5 == 0};
    if (run_step(&be, seqs, 3, rows, n, got, &e)) {
        snprintf(why, why_n, "step 1: %.400s", e.msg);
        goto out_be;
    }
    /* the A logits are rows 1..10 of the output (B's one logit row comes first) */
    if (memcmp(got + (size_t)1 * V, ref, (size_t)10 * V * sizeof(float)) != 0) {
        snprintf(why, why_n, "step 1 (A in a mixed batch of 30 rows) differs from A alone");
        goto out_be;
    }
    /* step 2: C 13..23, A 10 (decode-like single row, want), B 7 (want) */
    n = 0;
    for (int i = 13; i < 24; i++) rows[n++] = (struct row_spec){2, i, 0};
    rows[n++] = (struct row_spec){1, 10, 1};
    rows[n++] = (struct row_spec){0, 7, 1};
    if (run_step(&be, seqs, 3, rows, n, got, &e)) {
        snprintf(why, why_n, "step 2: %.400s", e.msg);
        goto out_be;
    }
    if (memcmp(got, ref + (size_t)10 * V, (size_t)V * sizeof(float)) != 0) {
        snprintf(why, why_n, "step 2 (A's row 10 among 13 rows) differs from A alone");
        goto out_be;
    }
    /* step 3: A 11..23 alone */
    n = 0;
    for (int i = 11; i < NA; i++) rows[n++] = (struct row_spec){1, i, 1};
    if (run_step(&be, seqs, 3, rows, n, got, &e)) {
        snprintf(why, why_n, "step 3: %.400s", e.msg);
        goto out_be;
    }
    if (memcmp(got, ref + (size_t)11 * V, (size_t)13 * V * sizeof(float)) != 0) {
        snprintf(why, why_n, "step 3 (A's rows 11..23) differs from A alone");
        goto out_be;
    }
    backend_free(&be);
    /* A in 3 chunks (8 + 8 + 8 rows) on 3 threads, logits of the last row of each chunk */
    if (make_backend(&be, m, 3, 64, 4, kvt, &e)) {
        snprintf(why, why_n, "backend: %.400s", e.msg);
        goto out;
    }
    struct seq_spec a_only = {ta, NA, {40, 41, 42, 43, 44, 45}, 6};
    (void)a_first;
    (void)a_count;
    for (int ch = 0; ch < 3; ch++) {
        n = 0;
        for (int i = ch * 8; i < ch * 8 + 8; i++) rows[n++] = (struct row_spec){0, i, i == ch * 8 + 7};
        if (run_step(&be, &a_only, 1, rows, n, got, &e)) {
            snprintf(why, why_n, "chunk %d: %.400s", ch, e.msg);
            goto out_be;
        }
        if (memcmp(got, ref + (size_t)(ch * 8 + 7) * V, (size_t)V * sizeof(float)) != 0) {
            snprintf(why, why_n, "chunk %d of A's prefill differs from A alone", ch);
            goto out_be;
        }
    }
    rc = 0;
out_be:
    backend_free(&be);
out:
    free(ref);
    free(got);
    return rc;
}

TEST(test_invariance_stories260K)
{
    struct err e = {{0}};
    gguf_file *f = NULL;
    struct model *m = NULL;
    CHECK_MSG(gguf_open(test_shared("models/stories260K.gguf"), &f, &e) == 0, "%.900s", e.msg);
    CHECK_MSG(model_load(f, &m, &e) == 0, "%.900s", e.msg);
    char why[512] = "";
    int rc1 = check_invariance(m, KV_TYPE_F32, why, sizeof why);
    int rc2 = rc1 ? 0 : check_invariance(m, KV_TYPE_F16, why, sizeof why);
    model_free(m);
    gguf_close(f);
    CHECK_MSG(rc1 == 0 && rc2 == 0, "%s", why);
}

TEST(test_invariance_synthetic)
{
    struct {
        const char *arch;
        enum gguf_dtype t;
        int head_dim;
        enum kv_type kv;
        int rope_freqs;
    } cases[] = {
        {"llama", GGUF_DTYPE_Q8_0, 0, KV_TYPE_F32, 0},  {"llama", GGUF_DTYPE_Q4_0, 32, KV_TYPE_Q8_0, 1},
        {"llama", GGUF_DTYPE_Q4_1, 0, KV_TYPE_F16, 0},  {"qwen2", GGUF_DTYPE_F16, 0, KV_TYPE_F32, 0},
        {"qwen3", GGUF_DTYPE_BF16, 32, KV_TYPE_Q8_0, 0}, {"llama", GGUF_DTYPE_F32, 0, KV_TYPE_F32, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct synth_cfg c = synth_default();
        c.arch = cases[i].arch;
        c.type = cases[i].t;
        c.head_dim = cases[i].head_dim;
        c.rope_freqs = cases[i].rope_freqs;
        struct synth_model sm;
        struct err e = {{0}};
        int rc = synth_build(&c, 1, &sm, &e);
        if (rc) synth_free(&sm);
        CHECK_MSG(rc == 0, "case %zu: %.900s", i, e.msg);
        char why[512] = "";
        rc = check_invariance(sm.m, cases[i].kv, why, sizeof why);
        synth_free(&sm);
        CHECK_MSG(rc == 0, "case %zu (%s %s kv %s): %s", i, cases[i].arch, gguf_dtype_info(cases[i].t)->name,
                  model_kv_type_name(cases[i].kv), why);
    }
}

/* ---------------------------------------------------------------- quantized vs f32 */

static int32_t test_tokens[16] = {1, 17, 250, 3, 99, 42, 7, 180, 64, 200, 13, 77, 5, 120, 33, 2};

static double rms_diff(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

/* Each type vs (a) the F32 model with the same random values (weight + activation quantization) and
 * (b) its own weights dequantized to F32 (activation quantization only). Errors relative to std(logits). */
TEST(test_quant_vs_f32_synthetic)
{
    struct {
        enum gguf_dtype t;
        double rms_tol, max_tol, clone_rms_tol, clone_max_tol;
    } cases[] = {
        {GGUF_DTYPE_F16, 0.005, 0.02, 1e-5, 1e-4},  {GGUF_DTYPE_BF16, 0.02, 0.08, 1e-5, 1e-4},
        {GGUF_DTYPE_Q8_0, 0.05, 0.20, 0.03, 0.15},  {GGUF_DTYPE_Q4_1, 0.40, 1.60, 0.05, 0.25},
        {GGUF_DTYPE_Q4_0, 0.40, 1.60, 0.05, 0.25},
    };
    struct synth_cfg c = synth_default();
    struct synth_model ref_m;
    struct err e = {{0}};
    CHECK_MSG(synth_build(&c, 1, &ref_m, &e) == 0, "%.900s", e.msg);
    const int64_t nl = 16 * (int64_t)c.n_vocab;
    float *ref = logits_alone(ref_m.m, test_tokens, 16, 2, KV_TYPE_F32, &e);
    synth_free(&ref_m);
    CHECK_MSG(ref, "%.900s", e.msg);
    double sd = logit_std(ref, nl);
    int bad = -1;
    double r[4] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && bad < 0; i++) {
        c.type = cases[i].t;
        struct synth_model sm;
        struct model *clone = NULL;
        float *got = NULL, *cl = NULL;
        if (synth_build(&c, 1, &sm, &e) == 0 && model_clone_f32(sm.m, &clone, &e) == 0) {
            got = logits_alone(sm.m, test_tokens, 16, 2, KV_TYPE_F32, &e);
            cl = logits_alone(clone, test_tokens, 16, 2, KV_TYPE_F32, &e);
        }
        if (got && cl) {
            double csd = logit_std(cl, nl);
            r[0] = rms_diff(ref, got, nl) / sd;
            r[1] = max_abs_diff(ref, got, nl) / sd;
            r[2] = rms_diff(cl, got, nl) / csd;
            r[3] = max_abs_diff(cl, got, nl) / csd;
            printf("# %-4s vs F32 model: rms %.4f max %.4f (tol %.3f, %.3f); vs own F32 copy: rms %.5f max %.5f "
                   "(tol %g, %g)\n",
                   gguf_dtype_info(c.type)->name, r[0], r[1], cases[i].rms_tol, cases[i].max_tol, r[2], r[3],
                   cases[i].clone_rms_tol, cases[i].clone_max_tol);
            if (!(r[0] <= cases[i].rms_tol && r[1] <= cases[i].max_tol && r[2] <= cases[i].clone_rms_tol &&
                  r[3] <= cases[i].clone_max_tol))
                bad = (int)i;
        } else {
            bad = (int)i;
        }
        free(got);
        free(cl);
        model_free(clone);
        synth_free(&sm);
    }
    free(ref);
    CHECK_MSG(bad < 0, "%s: rms %g max %g, vs own copy rms %g max %g (or error: %.400s)",
              gguf_dtype_info(cases[bad < 0 ? 0 : bad].t)->name, r[0], r[1], r[2], r[3], e.msg);
}

TEST(test_kv_types_vs_f32)
{
    struct synth_cfg c = synth_default();
    c.head_dim = 32; /* q8_0 KV needs head_dim % 32 == 0 */
    struct synth_model sm;
    struct err e = {{0}};
    CHECK_MSG(synth_build(&c, 1, &sm, &e) == 0, "%.900s", e.msg);
    const int64_t nl = 16 * (int64_t)c.n_vocab;
    float *ref = logits_alone(sm.m, test_tokens, 16, 2, KV_TYPE_F32, &e);
    float *f16 = logits_alone(sm.m, test_tokens, 16, 2, KV_TYPE_F16, &e);
    float *q8 = logits_alone(sm.m, test_tokens, 16, 2, KV_TYPE_Q8_0, &e);
    synth_free(&sm);
    int ok = ref && f16 && q8;
    double sd = ok ? logit_std(ref, nl) : 1, d16 = ok ? max_abs_diff(ref, f16, nl) / sd : 0,
           d8 = ok ? max_abs_diff(ref, q8, nl) / sd : 0;
    free(ref);
    free(f16);
    free(q8);
    CHECK_MSG(ok, "%.900s", e.msg);
    printf("# KV f16 vs f32: %.5f (tol 0.01); KV q8_0 vs f32: %.5f (tol 0.05)\n", d16, d8);
    CHECK(d16 <= 0.01);
    CHECK(d8 <= 0.05);
    CHECK(d16 > 0 || d8 > 0); /* the KV type is really used */
}

TEST(test_smollm2_q41_vs_f32)
{
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) SKIP("%s absent (run scripts/fetch-model)", path);
    struct err e = {{0}};
    gguf_file *f = NULL;
    struct model *m = NULL, *mf = NULL;
    CHECK_MSG(gguf_open(path, &f, &e) == 0, "%.900s", e.msg);
    CHECK_MSG(model_load(f, &m, &e) == 0, "%.900s", e.msg);
    CHECK_MSG(model_clone_f32(m, &mf, &e) == 0, "%.900s", e.msg);
    static const char chat[] = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    tok_vocab *v = NULL;
    int32_t *toks = NULL;
    size_t n_toks = 0;
    CHECK_MSG(tok_load(f, &v, &e) == 0, "%.900s", e.msg);
    int enc = tok_encode(v, chat, strlen(chat), 0, 1, &toks, &n_toks, &e);
    tok_free(v);
    CHECK_MSG(enc == 0 && n_toks > 4 && n_toks < 64, "%.900s", e.msg);
    const int n = (int)n_toks;
    const int64_t V = m->hp.n_vocab;
    float *q = logits_alone(m, toks, n, 2, KV_TYPE_F32, &e);
    float *r = q ? logits_alone(mf, toks, n, 2, KV_TYPE_F32, &e) : NULL;
    int ok = q && r;
    double worst = 0, worst_rms = 0, abs_max = 0;
    int n_same = 0, last_same = 0;
    for (int i = 0; ok && i < n; i++) {
        double s = logit_std(r + i * V, V), d = max_abs_diff(q + i * V, r + i * V, V);
        double rr = rms_diff(q + i * V, r + i * V, V) / s;
        if (getenv("NS_TEST_VERBOSE")) printf("# pos %d: std %.3f max|diff|/std %.4f rms %.4f\n", i, s, d / s, rr);
        if (d / s > worst) worst = d / s;
        if (d > abs_max) abs_max = d;
        if (rr > worst_rms) worst_rms = rr;
        int same = sampler_argmax(q + i * V, (int32_t)V) == sampler_argmax(r + i * V, (int32_t)V);
        n_same += same;
        if (i == n - 1) last_same = same;
    }
    free(q);
    free(r);
    free(toks);
    model_free(mf);
    model_free(m);
    gguf_close(f);
    CHECK_MSG(ok, "%.900s", e.msg);
    printf("# SmolLM2 Q4_1 vs its F32 copy, %d positions: max |diff| %.3f = %.3f std (tol 0.75 std), rms %.4f std "
           "(tol 0.35), same argmax at %d/%d positions (tol: all but 2, and the last)\n",
           n, abs_max, worst, worst_rms, n_same, n);
    CHECK(worst <= 0.75);
    CHECK(worst_rms <= 0.35);
    CHECK(n_same >= n - 2);
    CHECK(last_same);
}

/* ---------------------------------------------------------------- errors */

TEST(test_bad_batches)
{
    struct err e = {{0}};
    gguf_file *f = NULL;
    struct model *m = NULL;
    CHECK_MSG(gguf_open(test_shared("models/stories260K.gguf"), &f, &e) == 0, "%.900s", e.msg);
    CHECK_MSG(model_load(f, &m, &e) == 0, "%.900s", e.msg);
    struct backend be;
    CHECK_MSG(backend_cpu_init(&be, 2, &e) == 0, "%.900s", e.msg);
    CHECK(be.ops->load(be.ctx, m, &e) == 0);
    /* q8_0 KV with head_dim 8 is refused with a clear message */
    CHECK(be.ops->kv_alloc(be.ctx, 8, 16, KV_TYPE_Q8_0, &e) != 0);
    CHECK_MSG(strstr(e.msg, "head dimension") && strstr(e.msg, "8"), "%.900s", e.msg);
    CHECK(be.ops->kv_alloc(be.ctx, 4, 16, KV_TYPE_F32, &e) == 0);
    int32_t blocks[2] = {0, 1}, tokens[2] = {1, 2}, pos[2] = {0, 1}, seq[2] = {0, 0}, lr[1] = {1};
    struct step_seq ss = {blocks, 2};
    float logits[512];
    struct step_batch b = {2, tokens, pos, seq, 1, &ss, 1, lr};
    CHECK(be.ops->forward(be.ctx, &b, logits, &e) == 0);
    CHECK(be.ops->check(be.ctx, &e) == 0);
    tokens[1] = 512;
    CHECK(be.ops->forward(be.ctx, &b, logits, &e) != 0 && strstr(e.msg, "vocabulary"));
    tokens[1] = 2;
    pos[1] = 40; /* beyond 2 blocks of 16 */
    CHECK(be.ops->forward(be.ctx, &b, logits, &e) != 0 && strstr(e.msg, "position"));
    pos[1] = 1;
    blocks[1] = 9; /* pool has 4 blocks */
    CHECK(be.ops->forward(be.ctx, &b, logits, &e) != 0 && strstr(e.msg, "block"));
    blocks[1] = 1;
    lr[0] = 2;
    CHECK(be.ops->forward(be.ctx, &b, logits, &e) != 0 && strstr(e.msg, "logit_rows"));
    lr[0] = 1;
    CHECK(be.ops->forward(be.ctx, &b, logits, &e) == 0);
    /* scratch grows with rows and covers the KV pool's attention scratch */
    CHECK(be.ops->scratch_bytes(be.ctx, 512) > be.ops->scratch_bytes(be.ctx, 1));
    backend_free(&be);
    model_free(m);
    gguf_close(f);
}

int main(void)
{
    RUN(test_dot_simd_vs_scalar);
    RUN(test_tile_equals_dot);
    RUN(test_dot_q8_0_extremes);
    RUN(test_invariance_stories260K);
    RUN(test_invariance_synthetic);
    RUN(test_quant_vs_f32_synthetic);
    RUN(test_kv_types_vs_f32);
    RUN(test_smollm2_q41_vs_f32);
    RUN(test_bad_batches);
    return test_summary();
}
