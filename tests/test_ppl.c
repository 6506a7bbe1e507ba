/* test_ppl — runtime/ppl: the log-softmax and the statistics on known values, the window plans, and on
 * stories260K with examples/stories.txt: the perplexity equals a reference computed here independently
 * (one forward call per row, log-sum-exp in long double, windows laid out from the rule as documented),
 * does not depend on the batch size, is much higher on the same tokens shuffled, and a Q4_0 quantization's
 * is within a few percent of the F32 model's. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/quantize.h"
#include "lm_util.h"
#include "runtime/ppl.h"
#include "test.h"

#define TEXT "examples/stories.txt"

static char tmpdir[] = "/tmp/test_ppl_XXXXXX";

static int near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fabs(b);
}

TEST(nll_is_stable)
{
    const float spread[3] = {1000.0f, 0.0f, -1000.0f};
    CHECK(near(ppl_nll(spread, 3, 1), 1000.0, 1e-12));
    CHECK(ppl_nll(spread, 3, 0) >= 0.0 && ppl_nll(spread, 3, 0) < 1e-300);
    CHECK(isfinite(ppl_nll(spread, 3, 2)) && near(ppl_nll(spread, 3, 2), 2000.0, 1e-12));
    float flat[512], shifted[512];
    for (int i = 0; i < 512; i++) {
        flat[i] = 0.25f;
        shifted[i] = (float)(i % 13) * 0.5f;
    }
    CHECK(near(ppl_nll(flat, 512, 7), log(512.0), 1e-12));
    /* shift invariance: the same distribution 30000 higher (exp would overflow without the max) */
    double a = ppl_nll(shifted, 512, 5);
    for (int i = 0; i < 512; i++)
        shifted[i] += 30000.0f;
    CHECK(near(ppl_nll(shifted, 512, 5), a, 1e-3)); /* float spacing at 30000 is ~0.002 */
}

TEST(stats_known_values)
{
    struct ppl_stats s = {0};
    CHECK(isnan(ppl_stats_ppl(&s)) && ppl_stats_err(&s) == 0.0);
    ppl_stats_add(&s, 1.0);
    CHECK(ppl_stats_err(&s) == 0.0);
    ppl_stats_add(&s, 2.0);
    ppl_stats_add(&s, 3.0);
    CHECK(s.n == 3 && near(ppl_stats_ppl(&s), exp(2.0), 1e-14));
    /* variance (1 + 4 + 9) / 3 - 4 = 2/3; standard error of the mean sqrt(var / (n - 1)) */
    CHECK(near(ppl_stats_err(&s), exp(2.0) * sqrt((2.0 / 3.0) / 2.0), 1e-12));
}

TEST(plans)
{
    struct ppl_params p = ppl_default_params();
    struct ppl_plan plan;
    struct err e;
    CHECK(ppl_plan(&p, 5049, 8192, &plan, &e) == 0);
    CHECK(plan.n_windows == 9 && plan.step == 512 && plan.first == 256 && plan.n_scored == 255);
    p.ctx = 64;
    CHECK(ppl_plan(&p, 64, 0, &plan, &e) == 0 && plan.n_windows == 1 && plan.first == 32 && plan.n_scored == 31);
    p.ctx = 512;
    p.stride = 128;
    CHECK(ppl_plan(&p, 1000, 2048, &plan, &e) == 0);
    CHECK(plan.n_windows == 4 && plan.step == 128 && plan.first == 383 && plan.n_scored == 128);
    p.stride = 511;
    CHECK(ppl_plan(&p, 1000, 2048, &plan, &e) == 0 && plan.first == 0 && plan.n_scored == 511);
    CHECK(ppl_plan(&p, 511, 2048, &plan, &e) == -1 && strstr(e.msg, "fewer than one window") && strstr(e.msg, "--ctx"));
    p.stride = 512;
    CHECK(ppl_plan(&p, 1000, 2048, &plan, &e) == -1 && strstr(e.msg, "--stride 512"));
    p.stride = 0;
    CHECK(ppl_plan(&p, 100000, 256, &plan, &e) == -1 && strstr(e.msg, "longer than the model's context of 256"));
    p.ctx = 2;
    CHECK(ppl_plan(&p, 100, 0, &plan, &e) == -1 && strstr(e.msg, "scores none"));
    p.ctx = 1;
    CHECK(ppl_plan(&p, 100, 0, &plan, &e) == -1 && strstr(e.msg, "too short"));
}

/* The tokens of examples/stories.txt for rt's vocab, BOS first (stories260K adds BOS). */
static int32_t *read_tokens(struct runtime *rt, size_t *n, struct err *e)
{
    size_t len;
    char *text = test_read_file(TEXT, &len);
    int32_t *ids = NULL;
    if (!text || tok_encode(rt->vocab, text, len, tok_add_bos(rt->vocab), 0, &ids, n, e)) ids = NULL;
    free(text);
    return ids;
}

/* -log softmax(x)[t] in long double, straight from the definition (no shared code with ppl_nll). */
static long double ref_nll(const float *x, int32_t n, int32_t t)
{
    long double max = x[0], sum = 0;
    for (int32_t i = 1; i < n; i++)
        max = x[i] > max ? x[i] : max;
    for (int32_t i = 0; i < n; i++)
        sum += expl((long double)x[i] - max);
    return logl(sum) + max - x[t];
}

/* The perplexity by the documented rule, one forward call per row: windows at w * step; position 0 holds
 * BOS; positions `first` .. ctx - 2 predict the next token. Checks that the scored text positions are
 * consecutive (stride) or the second halves of side-by-side windows (default). */
static int reference_ppl(struct runtime *rt, const int32_t *text, int64_t n_text, int32_t ctx, int32_t stride,
                         int32_t bos, double *ppl, int64_t *n_scored, struct err *e)
{
    const int32_t nv = rt->model->hp.n_vocab, step = stride ? stride : ctx;
    const int32_t first = stride ? ctx - 1 - stride : ctx / 2;
    int32_t *win = malloc((size_t)ctx * sizeof *win);
    float *logits = malloc((size_t)ctx * (size_t)nv * sizeof *logits);
    long double sum = 0;
    int64_t n = 0, last_scored = -1;
    int rc = win && logits ? 0 : -1;
    for (int64_t start = 0; rc == 0 && start + ctx <= n_text; start += step) {
        memcpy(win, text + start, (size_t)ctx * sizeof *win);
        win[0] = bos;
        if ((rc = lm_logits_ex(rt, win, ctx - 1, 1, logits, e))) break;
        for (int32_t j = first; j < ctx - 1; j++, n++) {
            const int64_t at = start + j + 1;
            if (stride && last_scored >= 0 && at != last_scored + 1)
                rc = err_set(e, "reference: gap at %lld", (long long)at);
            last_scored = at;
            sum += ref_nll(logits + (size_t)j * (size_t)nv, nv, text[at]);
        }
    }
    *ppl = (double)expl(sum / (long double)n);
    *n_scored = n;
    free(win);
    free(logits);
    return rc;
}

static int run_ppl(struct runtime *rt, const int32_t *toks, size_t n, int32_t ctx, int32_t stride, int32_t batch,
                   struct ppl_stats *s, struct err *e)
{
    struct ppl_params p = ppl_default_params();
    p.ctx = ctx;
    p.stride = stride;
    p.bos = tok_bos(rt->vocab);
    p.max_batch_tokens = batch;
    p.kv_type = KV_TYPE_F32;
    return ppl_run(&rt->backend, rt->model, toks, (int64_t)n, &p, NULL, NULL, s, NULL, e);
}

TEST(matches_reference_and_batch_invariant)
{
    const char *model = test_shared("models/stories260K.gguf");
    if (access(model, R_OK) || access(TEXT, R_OK)) SKIP("no stories260K or " TEXT);
    struct runtime rt;
    struct err e;
    CHECK_MSG(lm_open(model, &rt, &e) == 0, "%.900s", e.msg);
    size_t n = 0;
    int32_t *toks = read_tokens(&rt, &n, &e);
    int ok = toks && n > 1000;
    const int32_t strides[] = {0, 24};
    for (int k = 0; ok && k < 2; k++) {
        struct ppl_stats a = {0}, b = {0};
        double ref = 0;
        int64_t n_ref = 0;
        ok = run_ppl(&rt, toks, n, 64, strides[k], 512, &a, &e) == 0 &&
             run_ppl(&rt, toks, n, 64, strides[k], 7, &b, &e) == 0 &&
             reference_ppl(&rt, toks, (int64_t)n, 64, strides[k], tok_bos(rt.vocab), &ref, &n_ref, &e) == 0;
        printf("# stride %d: PPL %.6f +/- %.5f over %lld tokens; reference %.6f over %lld\n", strides[k],
               ppl_stats_ppl(&a), ppl_stats_err(&a), (long long)a.n, ref, (long long)n_ref);
        ok = ok && a.n == n_ref && near(ppl_stats_ppl(&a), ref, 1e-9) && a.n == b.n && a.sum == b.sum &&
             a.sum_sq == b.sum_sq;
        ok = ok && (strides[k] ? a.n == ((int64_t)n - 64) / 24 * 24 + 24 : a.n == (int64_t)n / 64 * 31);
    }
    free(toks);
    runtime_close(&rt);
    CHECK_MSG(ok, "perplexity differs from the reference or between batch sizes: %.900s", e.msg);
}

TEST(shuffled_and_quantized)
{
    const char *model = test_shared("models/stories260K.gguf");
    if (access(model, R_OK) || access(TEXT, R_OK)) SKIP("no stories260K or " TEXT);
    char q4[600];
    snprintf(q4, sizeof q4, "%s/q4_0.gguf", tmpdir);
    struct quantize_params qp = {model, q4, qmix_find("q4_0"), 0, 2, NULL, NULL, NULL};
    struct quantize_report qr;
    struct runtime rt;
    struct err e;
    CHECK_MSG(quantize_file(&qp, &qr, &e) == 0, "%.900s", e.msg);
    CHECK_MSG(lm_open(model, &rt, &e) == 0, "%.900s", e.msg);
    size_t n = 0;
    int32_t *toks = read_tokens(&rt, &n, &e), *mixed = toks ? malloc(n * sizeof *mixed) : NULL;
    struct ppl_stats s, m, q;
    int ok = mixed && run_ppl(&rt, toks, n, 128, 0, 512, &s, &e) == 0;
    if (ok) {
        /* the same tokens in a fixed pseudo-random order (BOS stays first) */
        memcpy(mixed, toks, n * sizeof *mixed);
        uint64_t x = 12345;
        for (size_t i = n - 1; i > 1; i--) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t j = 1 + (size_t)((x >> 33) % i);
            int32_t t = mixed[i];
            mixed[i] = mixed[j];
            mixed[j] = t;
        }
        ok = run_ppl(&rt, mixed, n, 128, 0, 512, &m, &e) == 0;
    }
    runtime_close(&rt);
    ok = ok && lm_open(q4, &rt, &e) == 0 && run_ppl(&rt, toks, n, 128, 0, 512, &q, &e) == 0;
    runtime_close(&rt);
    free(toks);
    free(mixed);
    CHECK_MSG(ok, "%.900s", e.msg);
    double ps = ppl_stats_ppl(&s), pm = ppl_stats_ppl(&m), pq = ppl_stats_ppl(&q);
    printf("# F32 %.4f, shuffled %.4f, Q4_0 %.4f (ratio %.4f)\n", ps, pm, pq, pq / ps);
    CHECK_MSG(pm > 3.0 * ps, "shuffled text: PPL %.3f, not much above the text's %.3f", pm, ps);
    CHECK_MSG(pq / ps > 0.97 && pq / ps < 1.10, "Q4_0 PPL %.4f vs F32 %.4f", pq, ps);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(nll_is_stable);
    RUN(stats_known_values);
    RUN(plans);
    RUN(matches_reference_and_batch_invariant);
    RUN(shuffled_and_quantized);
    test_rm_rf(tmpdir);
    return test_summary();
}
