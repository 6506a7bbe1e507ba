/* test_cuda — the CUDA backend's kernels against references on the host (runs only where a GPU is). The
 * device tests are four binaries, split by what they run: this one (the kernels), test_cuda_attn (the q/k/v
 * epilogue, the attention kernels and their plan), test_cuda_step (full steps against the CPU backend) and
 * test_cuda_engine (through the engine); cuda_test_util.h holds what they share, cuda_harness.cu the
 * host-array wrappers of the kernels.
 *
 * Without NS_CUDA it prints "skip cuda: built without CUDA"; with NS_CUDA but no usable GPU, "skip cuda:
 * <reason>"; TEST_CUDA_ONLY=prefix runs only the tests whose names start with it. On a GPU:
 *  - every kernel on random inputs (fresh per check), outputs poisoned with NaN before the run (a
 *    missed element fails), against a reference in double on the host. Tolerances (measured values are
 *    printed as "# " lines):
 *      embedding gather: exact; RoPE table: |diff| <= 1e-6;
 *      RMSNorm: residual x + add exact, F32 out |diff| <= 1e-5 |ref| + 1e-6, BF16 out <= 2^-8 |ref| + 1e-6;
 *      SwiGLU: F32 <= 1e-5 |ref| + 1e-6, BF16 <= 2^-8 |ref| + 1e-6;
 *      GEMM (BF16 and F32 operands, F32 accumulation): |diff| <= 1e-5 sum|w x| + 1e-6;
 *      fused GEMV (RMSNorm or SwiGLU inside the one-row GEMV): bit for bit the norm or SwiGLU kernel followed
 *        by the GEMV, whose input row equals the host's f32 RMSNorm exactly (SwiGLU within BF16 rounding) and
 *        whose product is within the GEMM tolerance of the host's sum on it; the residual row exact;
 *      weights at load (F32, F16, Q4_0..Q8_0, Q2_K..Q6_K to BF16): bit for bit the host's
 *        quant_dequantize_row + quant_f32_to_bf16 (the number of differing elements is printed, must be 0);
 *  - logprobs on the device: the sample op's (kernel_logprobs) against logprob_fill on the same rows, the ids
 *    exact, the values within 1e-9 + 1e-12 |host| (through the engine: test_cuda_engine).
 */
#include <stdio.h>

#include "test.h"

#ifndef NS_CUDA
int main(void)
{
    printf("skip cuda: built without CUDA\n");
    return 0;
}
#else

#include "cuda_test_util.h"
#include "engine/logprob.h"
#include "engine/sampler.h"

/* ---------------------------------------------------------------- kernels */

TEST(kernel_embed)
{
    struct err e;
    const int32_t nv = 97, n = 300, rows = 13;
    float *tf = xmalloc((size_t)nv * n * 4), *x = xmalloc((size_t)rows * n * 4);
    uint16_t *tb = xmalloc((size_t)nv * n * 2);
    int32_t tok[13];
    fill(tf, (size_t)nv * n, 2.0f);
    for (size_t i = 0; i < (size_t)nv * n; i++) tb[i] = quant_f32_to_bf16(tf[i]);
    for (int r = 0; r < rows; r++) tok[r] = (int32_t)((r * 37 + 5) % nv);
    for (int bf = 0; bf < 2; bf++) {
        CHECK_MSG(cuda_harness_embed(bf ? (void *)tb : (void *)tf, bf, nv, n, tok, rows, x, &e) == 0, "%s", e.msg);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < n; i++) {
                float want = bf ? quant_bf16_to_f32(tb[(size_t)tok[r] * n + i]) : tf[(size_t)tok[r] * n + i];
                CHECK_MSG(x[(size_t)r * n + i] == want, "bf16 %d row %d elem %d", bf, r, i);
            }
    }
    free(tf);
    free(tb);
    free(x);
}

TEST(kernel_rope_table)
{
    struct err e;
    const int32_t rows = 9, n_rot = 128;
    int32_t pos[9] = {0, 1, 2, 17, 255, 256, 4097, 70000, 131071};
    double f[64];
    float cs[9 * 128];
    for (int i = 0; i < n_rot / 2; i++) f[i] = pow(500000.0, -2.0 * i / n_rot) / (i % 3 + 1);
    CHECK_MSG(cuda_harness_rope_table(pos, rows, f, n_rot, cs, &e) == 0, "%s", e.msg);
    double w = 0;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n_rot / 2; i++) {
            double th = (double)pos[r] * f[i];
            double d = fmax(fabs(cs[(r * n_rot / 2 + i) * 2] - (float)cos(th)),
                            fabs(cs[(r * n_rot / 2 + i) * 2 + 1] - (float)sin(th)));
            if (isnan(d) || d > w) w = isnan(d) ? INFINITY : d;
        }
    fprintf(stderr, "# rope table: max |diff| %.3g\n", w);
    CHECK(w <= 1e-6);
}

static void rmsnorm_case(int32_t n);

/* Row lengths: not a multiple of 4 (the scalar kernel), 4096 (16-byte accesses, one float4 a thread), 576 (a
 * partly idle last warp), 8192 (two float4s a thread). */
TEST(kernel_rmsnorm)
{
    for (int ni = 0; ni < 4; ni++) {
        const int32_t lens[4] = {4096 + 37, 4096, 576, 8192};
        rmsnorm_case(lens[ni]);
        if (test_cur_failed) return;
    }
}

static void rmsnorm_case(int32_t n)
{
    struct err e;
    const int32_t nx = 6, n_out = 3;
    const int32_t rows[3] = {5, 0, 3};
    float *x = xmalloc((size_t)nx * n * 4), *x0 = xmalloc((size_t)nx * n * 4), *add = xmalloc((size_t)nx * n * 4);
    float *w = xmalloc((size_t)n * 4), *out = xmalloc((size_t)nx * n * 4);
    double *ref = xmalloc((size_t)nx * n * 8);
    for (int variant = 0; variant < 4; variant++) {
        const int with_add = variant & 1, bf = variant >> 1;
        const int32_t no = with_add ? n_out : nx; /* with add: gathered rows (the output head's use) */
        fill(x0, (size_t)nx * n, 3.0f);
        fill(add, (size_t)nx * n, 1.0f);
        for (int i = 0; i < n; i++) w[i] = 1.0f + frand(0.1f);
        memcpy(x, x0, (size_t)nx * n * 4);
        CHECK_MSG(cuda_harness_rmsnorm(x, nx, with_add ? add : NULL, w, with_add ? rows : NULL, no, n, 1e-5f, bf, out,
                                       &e) == 0, "%s", e.msg);
        for (int i = 0; i < no; i++) {
            const int r = with_add ? rows[i] : i;
            double ss = 0;
            for (int k = 0; k < n; k++) {
                float v = with_add ? x0[(size_t)r * n + k] + add[(size_t)r * n + k] : x0[(size_t)r * n + k];
                CHECK_MSG(x[(size_t)r * n + k] == v, "residual row %d elem %d", r, k);
                ss += (double)v * v;
            }
            double sc = 1.0 / sqrt(ss / n + 1e-5);
            for (int k = 0; k < n; k++) ref[(size_t)i * n + k] = (double)x[(size_t)r * n + k] * sc * w[k];
        }
        double wv = worst(out, ref, (size_t)no * n, bf ? 1.0 / 256 : 1e-5, 1e-6);
        fprintf(stderr, "# rmsnorm n %d add %d bf16 %d: worst %.3g of tolerance\n", (int)n, with_add, bf, wv);
        CHECK_MSG(wv <= 1.0, "add %d bf16 %d: %.3g of tolerance", with_add, bf, wv);
    }
    free(x);
    free(x0);
    free(add);
    free(w);
    free(out);
    free(ref);
}

TEST(kernel_swiglu)
{
    struct err e;
    const int32_t rows = 5, nffs[2] = {1000 + 3, 1024}; /* scalar and 16-byte loads */
    for (int ni = 0; ni < 2; ni++) {
        const int32_t nff = nffs[ni];
        float *gu = xmalloc((size_t)rows * 2 * nff * 4), *out = xmalloc((size_t)rows * nff * 4);
        double *ref = xmalloc((size_t)rows * nff * 8);
        fill(gu, (size_t)rows * 2 * nff, 6.0f);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < nff; i++) {
                double g = gu[(size_t)r * 2 * nff + i], u = gu[(size_t)r * 2 * nff + nff + i];
                ref[(size_t)r * nff + i] = g / (1.0 + exp(-g)) * u;
            }
        for (int bf = 0; bf < 2; bf++) {
            memset(out, 0xFF, (size_t)rows * nff * 4);
            CHECK_MSG(cuda_harness_swiglu(gu, rows, nff, bf, out, &e) == 0, "%s", e.msg);
            double wv = worst(out, ref, (size_t)rows * nff, bf ? 1.0 / 256 : 1e-5, 1e-6);
            fprintf(stderr, "# swiglu n_ff %d bf16 %d: worst %.3g of tolerance\n", (int)nff, bf, wv);
            CHECK(wv <= 1.0);
        }
        free(gu);
        free(out);
        free(ref);
    }
}

/* The sample op's draws against the host sampler (sampler_apply_edits, then sampler_argmax or sampler_draw)
 * on the same logits. Greedy rows: always the same token (ties on a 1/4 grid, NaN, -inf rows, edits that move
 * the maximum). Sampled rows (every filter: temperature alone, min-p, top-k, top-k + top-p, top-p alone over
 * peaked logits, ties): the same token but where u lands within a sum's rounding of a boundary (none expected
 * in these rows; at most 1 of 100 allowed); rows whose candidates do not fit (a flat top-p nucleus, top-k
 * 5000) are declined, and their logits come back unedited, bit for bit as they went in (the edits undone). */
TEST(kernel_sample)
{
    struct err e;
    enum { N = 128, NS = 10 };
    const int32_t nv = 32000 + 7, n_ids = nv - 5;
    /* {temperature, top_k, top_p, min_p, logit scale, quantized} */
    const float cases[NS][6] = {{0, 0, 1, 0, 8, 1},      {1.0f, 0, 1, 0, 8, 0},     {0.7f, 0, 1, 0.05f, 8, 0},
                                {0.8f, 40, 1, 0, 8, 0},  {0.8f, 40, 0.9f, 0, 8, 1}, {1.0f, 0, 0.95f, 0, 30, 0},
                                {1.0f, 0, 0.9f, 0, 1, 0}, {1.0f, 5000, 1, 0, 8, 0}, {0.9f, 10, 0.8f, 0.1f, 8, 1},
                                {1.3f, 0, 1, 0.2f, 4, 1}};
    float *l = xmalloc((size_t)N * nv * 4), *ref = xmalloc((size_t)N * nv * 4), *got = xmalloc((size_t)N * nv * 4);
    static struct sample_row rows[N];
    static struct logit_edit ed[N][16];
    int32_t tok[N];
    sampler *smp;
    CHECK(sampler_init(n_ids, &smp, &e) == 0);
    for (int32_t r = 0; r < N; r++) {
        const float *c = cases[r % NS];
        float *x = l + (size_t)r * nv;
        fill(x, (size_t)nv, c[4]);
        if (c[5])
            for (int32_t t = 0; t < nv; t++) x[t] = floorf(x[t] * 4.0f) / 4.0f;
        if (r == 2 * NS) x[5] = x[77] = NAN;
        if (r == 3 * NS)
            for (int32_t t = 0; t < nv; t++) x[t] = t % 9 ? -INFINITY : NAN;
        const int32_t ne = r % 3 == 0 ? 0 : 16;
        for (int32_t k = 0; k < ne; k++)
            ed[r][k] = (struct logit_edit){(int32_t)((k * 2003 + r) % n_ids), k % 2 ? frand(6.0f) : 0.0f,
                                           k % 3 ? 1.3f : 1.0f, k % 4 ? 0.0f : 0.5f};
        rows[r] = (struct sample_row){c[0] > 0 ? SAMPLE_DRAW : SAMPLE_GREEDY,
                                      ne,
                                      ed[r],
                                      c[0],
                                      c[2],
                                      c[3],
                                      0.5f + frand(0.5f),
                                      (int32_t)c[1],
                                      0,
                                      0,
                                      0};
        if (r % 17 == 16) rows[r].mode = SAMPLE_HOST;
    }
    memcpy(ref, l, (size_t)N * nv * 4);
    CHECK_MSG(cuda_harness_sample(l, N, nv, n_ids, rows, tok, got, NULL, &e) == 0, "%s", e.msg);
    int differ = 0, declined = 0, drawn = 0;
    for (int32_t r = 0; r < N; r++) {
        float *x = ref + (size_t)r * nv;
        if (rows[r].mode == SAMPLE_HOST) {
            CHECK_MSG(tok[r] == -1, "row %d: a host row drew %d", (int)r, (int)tok[r]);
            continue;
        }
        if (tok[r] < 0) { /* declined: the unedited logits for the host */
            declined++;
            CHECK_MSG(rows[r].mode == SAMPLE_DRAW, "row %d: a greedy row was declined", (int)r);
            CHECK_MSG(memcmp(x, got + (size_t)r * nv, (size_t)nv * 4) == 0,
                      "row %d: declined logits not as they were", (int)r);
            continue;
        }
        sampler_apply_edits(rows[r].edits, rows[r].n_edits, x);
        struct sampler_params p = sampler_default_params();
        p.temperature = rows[r].temperature;
        p.top_k = rows[r].top_k;
        p.top_p = rows[r].top_p;
        p.min_p = rows[r].min_p;
        const int32_t want = sampler_draw(smp, &p, rows[r].u, x);
        drawn++;
        if (tok[r] != want) {
            differ++;
            fprintf(stderr, "# sample row %d (case %d): device %d, host %d\n", (int)r, (int)(r % NS),
                    (int)tok[r], (int)want);
        }
        CHECK_MSG(rows[r].mode == SAMPLE_DRAW || tok[r] == want, "greedy row %d: device %d, host %d", (int)r,
                  (int)tok[r], (int)want);
    }
    fprintf(stderr, "# sample: %d rows drawn, %d declined, %d differ from the host\n", drawn, declined, differ);
    CHECK_MSG(declined >= 2 * (N / NS) - 2 && declined <= 2 * (N / NS) + 2, "%d rows declined", declined);
    CHECK_MSG(differ * 100 <= drawn, "%d of %d drawn rows differ", differ, drawn);
    sampler_free(smp);
    free(l);
    free(ref);
    free(got);
}

/* |device - host| of one logprob against the tolerance 1e-9 + 1e-12 |host| (a double log-sum-exp summed in
 * another order): the worst ratio so far in *worst; NaN must meet NaN and an infinity the same infinity. 0 if
 * outside. */
static int lp_close(double dev, double host, double *worst_ratio)
{
    if (isnan(host) || isinf(host)) return isnan(host) ? isnan(dev) : dev == host;
    const double r = fabs(dev - host) / (1e-9 + 1e-12 * fabs(host));
    if (!(r <= *worst_ratio)) *worst_ratio = r;
    return r <= 1.0;
}

/* The sample op's logprobs (cuda_logprob.cu, then cuda_sample.cu's token pair) against logprob_fill on the
 * same unedited rows: rows of 32,007 logits (alternatives among the first 32,002) of eight kinds — plain,
 * ties on a 1/4 grid, every third -inf, 3 finite values only (fewer than the alternatives asked: the rest are
 * -inf ties by id), a NaN (every logprob NaN, the NaN ranked last), zeros of both signs (ties), a large
 * scale, and the padding ids past n_ids the largest (in the normalizer, never an alternative) — with 0, 1, 5
 * and 20 alternatives, greedy and sampled rows with edits (their logprobs raw: before the edits),
 * SAMPLE_LOGPROBS rows of a given token, SAMPLE_HOST rows (no logprobs), and sampled rows with top-k 5000
 * that are declined (their logits back unedited, their outputs left alone). The outputs are poisoned before
 * (host: 0xFF bytes; device: NaN). Tolerances: the token and every alternative's id exact, in the host's
 * order; each logprob within 1e-9 + 1e-12 |host| (the measured worst ratio is printed). */
TEST(kernel_logprobs)
{
    struct err e;
    enum { N = 128, KINDS = 8 };
    const int32_t nv = 32000 + 7, n_ids = nv - 5;
    static const int32_t ks[4] = {0, 1, 5, 20};
    float *l = xmalloc((size_t)N * nv * 4), *got = xmalloc((size_t)N * nv * 4);
    static struct sample_row rows[N];
    static struct logit_edit ed[N][8];
    static struct sample_logprobs lp[N];
    int32_t tok[N];
    for (int32_t r = 0; r < N; r++) {
        float *x = l + (size_t)r * nv;
        const int kind = r % KINDS;
        fill(x, (size_t)nv, kind == 6 ? 80.0f : 8.0f);
        for (int32_t t = 0; t < nv; t++) {
            if (kind == 1) x[t] = floorf(x[t] * 4.0f) / 4.0f;
            if (kind == 2 && t % 3 == 0) x[t] = -INFINITY;
            if (kind == 3) x[t] = t == 5 || t == 900 || t == 31000 ? x[t] : -INFINITY;
            if (kind == 5) x[t] = t % 7 == 0 ? 1.5f : t % 2 ? -0.0f : 0.0f;
            if (kind == 7 && t >= n_ids) x[t] = 50.0f;
        }
        if (kind == 4) x[77] = NAN;
        for (int32_t k = 0; k < 8; k++)
            ed[r][k] = (struct logit_edit){(int32_t)((k * 2003 + r * 7) % n_ids), k % 2 ? 9.0f : 0.0f,
                                           k % 3 ? 1.3f : 1.0f, k % 4 ? 0.0f : 0.5f};
        const int how = (r / KINDS) % 4; /* greedy, sampled, a prompt row, sampled and declined */
        rows[r] = (struct sample_row){how == 0   ? SAMPLE_GREEDY
                                      : how == 2 ? SAMPLE_LOGPROBS
                                                 : SAMPLE_DRAW,
                                      how == 2 ? 0 : 8,
                                      ed[r],
                                      0.8f,
                                      1.0f,
                                      0.0f,
                                      0.5f + frand(0.5f),
                                      how == 3 ? 5000 : 40,
                                      0,
                                      0,
                                      0};
        rows[r].logprobs = 1;
        rows[r].top_logprobs = ks[(r / (4 * KINDS)) % 4];
        rows[r].token = (r * 7919) % nv; /* a padding id now and then */
        if (r % 13 == 12) rows[r] = (struct sample_row){.mode = SAMPLE_HOST};
    }
    memset(lp, 0xFF, sizeof lp);
    CHECK_MSG(cuda_harness_sample(l, N, nv, n_ids, rows, tok, got, lp, &e) == 0, "%s", e.msg);
    double worst_ratio = 0;
    int n_lp = 0, n_alt = 0, declined = 0, host = 0;
    for (int32_t r = 0; r < N; r++) {
        const float *x = l + (size_t)r * nv;
        if (tok[r] < 0) { /* SAMPLE_HOST, or declined: the logits as they went in, the output left alone */
            CHECK_MSG(rows[r].mode == SAMPLE_HOST || rows[r].top_k == 5000, "row %d (mode %d) not resolved",
                      (int)r, (int)rows[r].mode);
            CHECK_MSG(memcmp(x, got + (size_t)r * nv, (size_t)nv * 4) == 0,
                      "row %d: logits back not as they were", (int)r);
            CHECK_MSG(lp[r].n_top == -1, "row %d: logprobs written for a row not resolved", (int)r);
            declined += rows[r].mode != SAMPLE_HOST;
            host += rows[r].mode == SAMPLE_HOST;
            continue;
        }
        CHECK_MSG(rows[r].mode != SAMPLE_LOGPROBS || tok[r] == rows[r].token, "row %d: token %d, asked %d",
                  (int)r, (int)tok[r], (int)rows[r].token);
        struct logprob_entry ref;
        logprob_fill(x, nv, n_ids, tok[r], rows[r].top_logprobs, &ref);
        CHECK_MSG(lp[r].tok.token == tok[r] && lp_close(lp[r].tok.logprob, ref.logprob, &worst_ratio),
                  "row %d (kind %d): token %d logprob %.17g, host %.17g", (int)r, (int)(r % KINDS),
                  (int)lp[r].tok.token, lp[r].tok.logprob, ref.logprob);
        CHECK_MSG(lp[r].n_top == ref.n_top, "row %d: %d alternatives, host %d", (int)r, (int)lp[r].n_top,
                  (int)ref.n_top);
        for (int32_t j = 0; j < ref.n_top; j++)
            CHECK_MSG(lp[r].top[j].token == ref.top[j].token &&
                          lp_close(lp[r].top[j].logprob, ref.top[j].logprob, &worst_ratio),
                      "row %d (kind %d) alternative %d: %d (%.17g), host %d (%.17g)", (int)r,
                      (int)(r % KINDS), (int)j, (int)lp[r].top[j].token, lp[r].top[j].logprob,
                      (int)ref.top[j].token, ref.top[j].logprob);
        n_lp++;
        n_alt += ref.n_top;
    }
    fprintf(stderr,
            "# logprobs: %d rows resolved with logprobs (%d alternatives), %d declined and %d host rows back "
            "unedited; worst |device - host| / (1e-9 + 1e-12 |host|) = %.3g (must be <= 1)\n",
            n_lp, n_alt, declined, host, worst_ratio);
    CHECK_MSG(n_lp >= N / 2 && declined > 0 && host > 0, "%d rows with logprobs, %d declined, %d host", n_lp,
              declined, host);
    free(l);
    free(got);
}

TEST(kernel_gemm)
{
    struct err e;
    const int32_t n_in = 1024 + 64, n_out = 333, rows_list[4] = {1, 2, 7, 96};
    float *wf = xmalloc((size_t)n_out * n_in * 4), *xf = xmalloc((size_t)96 * n_in * 4),
          *y = xmalloc((size_t)96 * n_out * 4);
    uint16_t *wb = xmalloc((size_t)n_out * n_in * 2), *xb = xmalloc((size_t)96 * n_in * 2);
    double *ref = xmalloc((size_t)96 * n_out * 8), *mag = xmalloc((size_t)96 * n_out * 8);
    for (int bf = 0; bf < 2; bf++)
        for (int li = 0; li < 4; li++) {
            const int32_t rows = rows_list[li];
            fill(wf, (size_t)n_out * n_in, 1.0f);
            fill(xf, (size_t)rows * n_in, 2.0f);
            for (size_t i = 0; i < (size_t)n_out * n_in; i++) {
                wb[i] = quant_f32_to_bf16(wf[i]);
                if (bf) wf[i] = quant_bf16_to_f32(wb[i]);
            }
            for (size_t i = 0; i < (size_t)rows * n_in; i++) {
                xb[i] = quant_f32_to_bf16(xf[i]);
                if (bf) xf[i] = quant_bf16_to_f32(xb[i]);
            }
            for (int r = 0; r < rows; r++)
                for (int o = 0; o < n_out; o++) {
                    double s = 0, m = 0;
                    for (int k = 0; k < n_in; k++) {
                        s += (double)wf[(size_t)o * n_in + k] * xf[(size_t)r * n_in + k];
                        m += fabs((double)wf[(size_t)o * n_in + k] * xf[(size_t)r * n_in + k]);
                    }
                    ref[(size_t)r * n_out + o] = s;
                    mag[(size_t)r * n_out + o] = m;
                }
            CHECK_MSG(cuda_harness_gemm(bf ? (void *)wb : (void *)wf, bf ? (void *)xb : (void *)xf, bf, rows,
                                        n_in, n_out, y, &e) == 0,
                      "%s", e.msg);
            double wv = 0;
            for (size_t i = 0; i < (size_t)rows * n_out; i++) {
                double d = fabs(y[i] - ref[i]) / (1e-5 * mag[i] + 1e-6);
                if (isnan(y[i]) || d > wv) wv = isnan(y[i]) ? INFINITY : d;
            }
            fprintf(stderr, "# gemm bf16 %d rows %d: worst %.3g of tolerance\n", bf, rows, wv);
            CHECK_MSG(wv <= 1.0, "bf16 %d rows %d: %.3g of tolerance", bf, rows, wv);
        }
    free(wf);
    free(xf);
    free(y);
    free(wb);
    free(xb);
    free(ref);
    free(mag);
}

/* ---------------------------------------------------------------- FP8 (e4m3) */

/* Random e4m3 bytes (finite: no 0x7f / 0xff) and row scales around `scale`. */
static void fp8_fill(uint8_t *q, size_t n, float *s, size_t n_rows, float scale)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b;
        do b = (uint8_t)(rng_splitmix64(&g_rng) & 0xff);
        while ((b & 0x7f) == 0x7f);
        q[i] = b;
    }
    for (size_t r = 0; r < n_rows; r++) s[r] = scale * (0.5f + frand(0.25f) + 0.25f);
}

/* Rows quantized on the device (cuda_launch_fp8_rows) against the reference e4m3_of, bit for bit: random
 * BF16 and F32 rows of varied magnitude (1e-4 .. 1e3), a row of zeros (scale 1, bytes 0), a row with one
 * large outlier, rows of 8 and of 4104 values (several passes of a block). */
TEST(kernel_fp8_rows)
{
    struct err e;
    const int32_t ns[2] = {8, 4104};
    for (int bf = 0; bf < 2; bf++)
        for (int ni = 0; ni < 2; ni++) {
            const int32_t n = ns[ni], rows = 6;
            float *in = xmalloc((size_t)rows * n * 4), *sc = xmalloc((size_t)rows * 4);
            uint8_t *q = xmalloc((size_t)rows * n);
            const float mags[6] = {1.0f, 1e-4f, 1e3f, 0.0f, 3.0f, 0.01f};
            for (int r = 0; r < rows; r++)
                for (int32_t k = 0; k < n; k++) {
                    float v = frand(mags[r]);
                    if (r == 4 && k == n / 2) v = 700.0f; /* an outlier sets the row's scale */
                    in[(size_t)r * n + k] = bf ? bf16_round(v) : v;
                }
            CHECK_MSG(cuda_harness_fp8_rows(in, bf, rows, n, q, sc, &e) == 0, "%s", e.msg);
            int bad = 0;
            for (int r = 0; r < rows && !bad; r++) {
                float amax = 0;
                for (int32_t k = 0; k < n; k++) amax = fmaxf(amax, fabsf(in[(size_t)r * n + k]));
                const float want_s = amax > 0 ? amax / 448.0f : 1.0f, inv = amax > 0 ? 448.0f / amax : 1.0f;
                CHECK_MSG(memcmp(&sc[r], &want_s, 4) == 0, "bf16 %d n %d row %d: scale %g, want %g", bf, (int)n, r,
                          sc[r], want_s);
                for (int32_t k = 0; k < n && !bad; k++) {
                    const uint8_t want = e4m3_of(in[(size_t)r * n + k] * inv);
                    bad = q[(size_t)r * n + k] != want;
                    CHECK_MSG(!bad, "bf16 %d n %d row %d elem %d: %g -> 0x%02x, want 0x%02x", bf, (int)n, r, (int)k,
                              in[(size_t)r * n + k], q[(size_t)r * n + k], want);
                }
            }
            free(in);
            free(sc);
            free(q);
        }
    fprintf(stderr, "# fp8 rows: bit for bit the reference (bf16 and f32 inputs)\n");
}

/* The W8A8 product (cuda_matmul_fp8: cuBLASLt, outer-vector scales) against the exact sum of the decoded
 * values in double, on poisoned outputs: rows 1, 3, 64 and 300, F32 and BF16 outputs. The products of two
 * e4m3 values are exact in f32; what is left is the f32 accumulation (and the tensor cores' own), so the
 * tolerance is kernel_gemm's 1e-5 of the sum of magnitudes (BF16 outputs: plus their rounding). */
TEST(kernel_fp8_gemm)
{
    struct err e;
    const int32_t n_in = 1024 + 64, n_out = 336, rows_list[4] = {1, 3, 64, 300};
    uint8_t *w = xmalloc((size_t)n_out * n_in), *x = xmalloc((size_t)300 * n_in);
    float *ws = xmalloc((size_t)n_out * 4), *xs = xmalloc(300 * 4), *y = xmalloc((size_t)300 * n_out * 4);
    for (int yb = 0; yb < 2; yb++)
        for (int li = 0; li < 4; li++) {
            const int32_t rows = rows_list[li];
            fp8_fill(w, (size_t)n_out * n_in, ws, (size_t)n_out, 0.01f);
            fp8_fill(x, (size_t)rows * n_in, xs, (size_t)rows, 0.1f);
            CHECK_MSG(cuda_harness_fp8_gemm(w, ws, x, xs, rows, n_in, n_out, yb, y, &e) == 0, "%s", e.msg);
            double wv = 0;
            for (int32_t r = 0; r < rows; r++)
                for (int32_t o = 0; o < n_out; o++) {
                    double s = 0, m = 0;
                    for (int32_t k = 0; k < n_in; k++) {
                        const double p =
                            (double)e4m3_value(w[(size_t)o * n_in + k]) * e4m3_value(x[(size_t)r * n_in + k]);
                        s += p;
                        m += fabs(p);
                    }
                    s *= (double)ws[o] * xs[r];
                    m *= (double)ws[o] * xs[r];
                    const float got = y[(size_t)r * n_out + o];
                    const double d = fabs(got - s) / ((yb ? fabs(s) / 256 : 0) + 1e-5 * m + 1e-30);
                    if (isnan(got) || d > wv) wv = isnan(got) ? INFINITY : d;
                }
            fprintf(stderr, "# fp8 gemm y bf16 %d rows %d: worst %.3g of tolerance\n", yb, (int)rows, wv);
            CHECK_MSG(wv <= 1.0, "y bf16 %d rows %d: %.3g of tolerance", yb, (int)rows, wv);
        }
    free(w);
    free(x);
    free(ws);
    free(xs);
    free(y);
}

/* One case of kernel_gemv_fused: the product of a random W (n_out, n_in), BF16 or e4m3 with row scales
 * (fp8), with the BF16 row that RMSNorm (swiglu 0; row `row` of n_x rows, with the residual add or not) or
 * SwiGLU (swiglu 1) makes, fused and apart. */
static void gemv_fused_case(int swiglu, int32_t n_in, int32_t n_out, int32_t n_x, int32_t row, int with_add, int y_bf16,
                            int fp8)
{
    struct err e;
    const size_t nx = (size_t)n_x * n_in;
    uint16_t *w = xmalloc((size_t)n_out * n_in * 2), *gu = xmalloc((size_t)n_in * 4);
    uint8_t *w8 = xmalloc((size_t)n_out * n_in);
    float *ws = xmalloc((size_t)n_out * 4);
    float *x = xmalloc(nx * 4), *add = xmalloc(nx * 4), *nw = xmalloc((size_t)n_in * 4),
          *act = xmalloc((size_t)n_in * 4);
    float *y[2] = {xmalloc((size_t)n_out * 4), xmalloc((size_t)n_out * 4)};
    float *xo[2] = {xmalloc((size_t)n_in * 4), xmalloc((size_t)n_in * 4)};
    for (size_t i = 0; i < (size_t)n_out * n_in; i++) w[i] = quant_f32_to_bf16(frand(1.0f));
    if (fp8) fp8_fill(w8, (size_t)n_out * n_in, ws, (size_t)n_out, 1.0f / 448);
    for (int32_t i = 0; i < 2 * n_in; i++) gu[i] = quant_f32_to_bf16(frand(6.0f));
    fill(x, nx, 3.0f);
    fill(add, nx, 1.0f);
    for (int32_t i = 0; i < n_in; i++) nw[i] = 1.0f + frand(0.1f);
    const struct cuda_harness_gemv_in in = {swiglu, x, with_add ? add : NULL, n_x, row, nw, 1e-5f, gu,
                                            fp8 ? ws : NULL};
    for (int fused = 0; fused < 2; fused++)
        CHECK_MSG(cuda_harness_gemv_in(&in, fp8 ? (const void *)w8 : (const void *)w, n_in, n_out, fused, y_bf16,
                                       y[fused], xo[fused], fused ? NULL : act, &e) == 0, "%s", e.msg);
    /* the input row apart against the host: RMSNorm exactly as the device rounds it (v = x + add in f32, the
     * scale in f32 from the sum of squares in double, two rounded products), SwiGLU within BF16 rounding */
    const float *xr = x + (size_t)row * n_in, *ar = add + (size_t)row * n_in;
    double ss = 0;
    for (int32_t k = 0; k < n_in; k++) {
        const float v = with_add ? xr[k] + ar[k] : xr[k];
        if (!swiglu) CHECK_MSG(xo[0][k] == v && xo[1][k] == v, "residual elem %d: apart %g fused %g, want %g", (int)k,
                               xo[0][k], xo[1][k], v);
        ss += (double)v * v;
    }
    const float scale = 1.0f / sqrtf((float)(ss / n_in) + 1e-5f);
    for (int32_t k = 0; k < n_in; k++) {
        int bad;
        if (swiglu) {
            const double g = quant_bf16_to_f32(gu[k]), u = quant_bf16_to_f32(gu[n_in + k]);
            const double ref = g / (1.0 + exp(-g)) * u;
            bad = !(fabs(act[k] - ref) <= fabs(ref) / 256 + 1e-6);
        } else {
            const float v = with_add ? xr[k] + ar[k] : xr[k], t = v * scale;
            bad = act[k] != bf16_round(t * nw[k]);
        }
        CHECK_MSG(!bad, "input elem %d: %g", (int)k, act[k]);
    }
    /* the product apart against the host's sum on that row (kernel_gemm's tolerance), fused bit for bit the same */
    double wv = 0;
    for (int32_t o = 0; o < n_out; o++) {
        double ref = 0, mag = 0;
        for (int32_t k = 0; k < n_in; k++) {
            const double wk = fp8 ? (double)e4m3_value(w8[(size_t)o * n_in + k]) * ws[o]
                                  : (double)quant_bf16_to_f32(w[(size_t)o * n_in + k]);
            const double p = wk * act[k];
            ref += p;
            mag += fabs(p);
        }
        const double d = fabs(y[0][o] - ref) / ((y_bf16 ? fabs(ref) / 256 : 0) + 1e-5 * mag + 1e-6);
        if (isnan(y[0][o]) || d > wv) wv = isnan(y[0][o]) ? INFINITY : d;
    }
    int differ = 0;
    for (int32_t o = 0; o < n_out; o++) differ += memcmp(&y[0][o], &y[1][o], 4) != 0;
    fprintf(
        stderr,
        "# gemv fused %s%s n_in %d n_out %d add %d y bf16 %d: apart worst %.3g of tolerance, %d of %d fused "
        "outputs differ\n",
        fp8 ? "fp8 " : "", swiglu ? "swiglu" : "norm", (int)n_in, (int)n_out, with_add, y_bf16, wv, differ,
        (int)n_out);
    CHECK_MSG(wv <= 1.0 && differ == 0, "%s n_in %d: %.3g of tolerance, %d differ", swiglu ? "swiglu" : "norm",
              (int)n_in, wv, differ);
    free(w);
    free(w8);
    free(ws);
    free(gu);
    free(x);
    free(add);
    free(nw);
    free(act);
    free(y[0]);
    free(y[1]);
    free(xo[0]);
    free(xo[1]);
}

/* The fused GEMVs (cuda_launch_gemv_fused) against the same kernels apart, on poisoned outputs: norm rows of
 * 256 (one float4 a thread of the norm's 32-thread layout, J 2), 576 (a partly idle warp, J 3), 4096 and 8192
 * (the largest), with and without the residual add, a gathered row (the head's); SwiGLU rows of 512, 14336
 * (llama-8b's) and 16384 (the largest); n_out from 64 to 20003 (several rows a warp); F32 and BF16 outputs. */
TEST(kernel_gemv_fused)
{
    const char *gemv = getenv("NIGHTSHIFT_CUDA_GEMV");
    if (gemv && !strcmp(gemv, "off")) SKIP("NIGHTSHIFT_CUDA_GEMV=off: no GEMV to fuse");
    const int32_t norm[4][6] = {{256, 20003, 3, 2, 1, 0}, {576, 333, 1, 0, 0, 1}, {4096, 1005, 1, 0, 1, 0},
                                {8192, 97, 2, 1, 1, 1}};
    for (int fp8 = 0; fp8 < 2; fp8++) {
        for (int i = 0; i < 4 && !test_cur_failed; i++)
            gemv_fused_case(0, norm[i][0], norm[i][1], norm[i][2], norm[i][3], norm[i][4], norm[i][5], fp8);
        const int32_t swiglu[3][3] = {{512, 4099, 1}, {14336, 257, 0}, {16384, 64, 0}};
        for (int i = 0; i < 3 && !test_cur_failed; i++)
            gemv_fused_case(1, swiglu[i][0], swiglu[i][1], 1, 0, 0, swiglu[i][2], fp8);
    }
}

/* ---------------------------------------------------------------- weights at load */

/* Byte offsets of the f16 fields (scales and mins) in one block of a quantized type; *n out (0: none). */
static const int *dq_f16_fields(enum gguf_dtype t, int *n)
{
    static const int d[] = {0}, dm[] = {0, 2}, q2k[] = {80, 82}, q3k[] = {108}, q6k[] = {208};
    *n = 1;
    switch (t) {
    case GGUF_DTYPE_Q4_0:
    case GGUF_DTYPE_Q5_0:
    case GGUF_DTYPE_Q8_0: return d;
    case GGUF_DTYPE_Q3_K: return q3k;
    case GGUF_DTYPE_Q6_K: return q6k;
    default: break;
    }
    *n = 2;
    switch (t) {
    case GGUF_DTYPE_Q4_1:
    case GGUF_DTYPE_Q5_1:
    case GGUF_DTYPE_Q4_K:
    case GGUF_DTYPE_Q5_K: return dm;
    case GGUF_DTYPE_Q2_K: return q2k;
    default: break;
    }
    *n = 0;
    return NULL;
}

/* A finite f16 scale: +0, -0, a subnormal, a large magnitude, or U(-2, 2); negative about half the time. */
static uint16_t dq_scale(void)
{
    switch (rng_splitmix64(&g_rng) % 8) {
    case 0: return quant_f32_to_f16(0.0f);
    case 1: return quant_f32_to_f16(-0.0f);
    case 2: return quant_f32_to_f16(frand(6e-5f)); /* below the smallest normal half, 6.1e-5 */
    case 3: return quant_f32_to_f16(frand(60000.0f));
    default: return quant_f32_to_f16(frand(2.0f));
    }
}

/* n_rows rows of type t at src (rb bytes a row): random bytes, made valid. Quantized blocks: any quants,
 * finite scales (dq_scale). F16: every bit pattern (subnormals, inf, NaN). F32: U(-4, 4), every bit pattern,
 * and ties of the rounding to BF16. A NaN is made positive, so that no input gives the BF16 bits 0xFFFF of
 * the poisoned output. */
static void dq_fill(enum gguf_dtype t, uint8_t *src, uint64_t rb, int64_t n_rows, int64_t n_in)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info(t);
    for (uint64_t i = 0; i < rb * (uint64_t)n_rows; i++) src[i] = (uint8_t)rng_splitmix64(&g_rng);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = src + (uint64_t)r * rb;
        for (int64_t i = 0; t == GGUF_DTYPE_F16 && i < n_in; i++) {
            uint16_t h;
            memcpy(&h, row + 2 * i, 2);
            if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) h &= 0x7fff;
            memcpy(row + 2 * i, &h, 2);
        }
        for (int64_t i = 0; t == GGUF_DTYPE_F32 && i < n_in; i++) {
            uint32_t x;
            memcpy(&x, row + 4 * i, 4);
            if (i % 4 == 0) { /* a value */
                const float f = frand(4.0f);
                memcpy(&x, &f, 4);
            } else if (i % 4 == 1) { /* exactly halfway between two BF16 values */
                x = (x & 0xffff0000u) | 0x8000u;
            }
            if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) x &= 0x7fffffffu;
            memcpy(row + 4 * i, &x, 4);
        }
        int n_f;
        const int *f = dq_f16_fields(t, &n_f);
        for (int64_t b = 0; b < n_in / ti->block_size; b++)
            for (int j = 0; j < n_f; j++) {
                const uint16_t h = dq_scale();
                memcpy(row + (uint64_t)b * ti->block_bytes + f[j], &h, 2);
            }
    }
}

/* n_rows rows of n_in elements of type t on the device (cuda_harness_dequant) and on the host
 * (quant_dequantize_row, then quant_f32_to_bf16); prints a "# " line; returns the number of elements
 * whose BF16 bits differ, or -1 with e set. */
static int64_t dequant_case(enum gguf_dtype t, int64_t n_rows, int64_t n_in, struct err *e)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info(t);
    const uint64_t rb = gguf_row_bytes(t, (uint64_t)n_in);
    const size_t n = (size_t)n_rows * (size_t)n_in;
    uint8_t *src = xmalloc(rb * (uint64_t)n_rows);
    uint16_t *want = xmalloc(n * 2), *got = xmalloc(n * 2);
    float *row = xmalloc((size_t)n_in * 4);
    int64_t bad = -1, first = -1;
    dq_fill(t, src, rb, n_rows, n_in);
    for (int64_t r = 0; r < n_rows; r++) {
        if (quant_dequantize_row(t, src + (uint64_t)r * rb, row, n_in)) {
            err_set(e, "%s: the host cannot dequantize %lld elements", ti->name, (long long)n_in);
            goto out;
        }
        for (int64_t i = 0; i < n_in; i++) {
            want[(size_t)r * n_in + i] = quant_f32_to_bf16(row[i]);
            if (want[(size_t)r * n_in + i] == 0xffff) {
                err_set(e, "%s: an input gives the poison bits 0xffff (test inputs are wrong)", ti->name);
                goto out;
            }
        }
    }
    if (cuda_harness_dequant(t, src, n_rows, n_in, got, e)) goto out;
    bad = 0;
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i] && bad++ == 0) first = (int64_t)i;
    fprintf(stderr, "# dequant %-4s n_in %3lld, %5lld rows: %lld of %zu elements differ", ti->name, (long long)n_in,
            (long long)n_rows, (long long)bad, n);
    if (bad)
        fprintf(stderr, "; the first: row %lld elem %lld, host 0x%04x, device 0x%04x", (long long)(first / n_in),
                (long long)(first % n_in), want[first], got[first]);
    fprintf(stderr, "\n");
out:
    free(src);
    free(want);
    free(got);
    free(row);
    return bad;
}

/* Weights at load: every type the device converts (the table of types' gpu column, so a type marked there
 * without its device decoder fails here), on rows of random valid blocks (dq_fill), widths of one block
 * (32-element types), one and two super-blocks; bit for bit the host's BF16 (the output is poisoned with
 * 0xFFFF first, so an element not written differs). Then more rows than one grid column (65535), and every
 * other type, which the launcher must refuse. */
TEST(kernel_dequant)
{
    static const int64_t widths[] = {32, 256, 512};
    struct err e;
    int64_t bad = 0, n_cases = 0, n_bad_cases = 0;
    int n_types = 0;
    char first[128] = "";
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (!ti || !ti->gpu_dequant) continue;
        n_types++;
        for (size_t j = 0; j < sizeof widths / sizeof widths[0]; j++) {
            if (widths[j] % ti->block_size) continue;
            const int64_t b = dequant_case((enum gguf_dtype)t, 7, widths[j], &e);
            CHECK_MSG(b >= 0, "%s", e.msg);
            if (b && !n_bad_cases++) snprintf(first, sizeof first, "%s n_in %lld", ti->name, (long long)widths[j]);
            bad += b;
            n_cases++;
        }
    }
    CHECK_MSG(n_types >= 12, "only %d types in the gpu column", n_types); /* F32, F16, Q4_0 .. Q8_0, Q2_K .. Q6_K */
    const int64_t b = dequant_case(GGUF_DTYPE_Q4_0, 70000, 32, &e);
    CHECK_MSG(b >= 0, "%s", e.msg);
    if (b && !n_bad_cases++) snprintf(first, sizeof first, "Q4_0 70000 rows");
    bad += b;
    n_cases++;
    CHECK_MSG(bad == 0, "%lld elements differ in %lld of %lld cases (the first: %s; the # lines list each)",
              (long long)bad, (long long)n_bad_cases, (long long)n_cases, first);
    static uint8_t raw[8 * 256];
    static uint16_t out[256];
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        if (ti && !ti->gpu_dequant)
            CHECK_MSG(cuda_harness_dequant((enum gguf_dtype)t, raw, 1, 256, out, &e) != 0, "%s was not refused",
                      ti->name);
    }
}

int main(void)
{
    char why[512];
    if (!backend_cuda_probe(why, sizeof why)) {
        printf("skip cuda: %s\n", why);
        return 0;
    }
    RUN_SEL(kernel_embed);
    RUN_SEL(kernel_rope_table);
    RUN_SEL(kernel_rmsnorm);
    RUN_SEL(kernel_swiglu);
    RUN_SEL(kernel_gemm);
    RUN_SEL(kernel_fp8_rows);
    RUN_SEL(kernel_fp8_gemm);
    RUN_SEL(kernel_gemv_fused);
    RUN_SEL(kernel_dequant);
    RUN_SEL(kernel_sample);
    RUN_SEL(kernel_logprobs);
    return test_summary();
}

#endif
