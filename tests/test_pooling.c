/* test_pooling — engine/pooling (mean, CLS and last-token pooling, L2 normalisation) and the engine's
 * embedding requests on stories260K: the pooled embedding equals the one computed here from the backend's
 * hidden-state output of one whole-prompt step; it does not depend on how the prompt was split into steps,
 * on other requests in the batch, or on the prefix cache (an embedding request is never served from it); a
 * pooling type it does not compute, or a backend without hidden states, fails the request alone. */
#include <math.h>

#include "engine/engine.h"
#include "engine/pooling.h"
#include "lm_util.h"
#include "test.h"

TEST(pooling_rows)
{
    CHECK(pooling_wants_row(MODEL_POOLING_MEAN, 0, 3) && pooling_wants_row(MODEL_POOLING_MEAN, 2, 3));
    CHECK(!pooling_wants_row(MODEL_POOLING_MEAN, 3, 3));
    CHECK(pooling_wants_row(MODEL_POOLING_CLS, 0, 3) && !pooling_wants_row(MODEL_POOLING_CLS, 1, 3));
    CHECK(pooling_wants_row(MODEL_POOLING_LAST, 2, 3) && !pooling_wants_row(MODEL_POOLING_LAST, 0, 3));
    CHECK(!pooling_wants_row(MODEL_POOLING_NONE, 0, 3) && !pooling_wants_row(4, 0, 3));
    CHECK(pooling_supported(1) && pooling_supported(2) && pooling_supported(3));
    CHECK(!pooling_supported(0) && !pooling_supported(4) && !pooling_supported(-1));
}

TEST(pooling_mean_and_normalize)
{
    struct pooling_acc a;
    struct err e;
    CHECK(pooling_init(&a, MODEL_POOLING_NONE, 4) == -1);
    CHECK(pooling_init(&a, MODEL_POOLING_MEAN, 2) == 0);
    float out[2];
    CHECK(pooling_finish(&a, out) == -1); /* no row */
    const float r0[2] = {1.0f, 2.0f}, r1[2] = {5.0f, 0.0f};
    pooling_add(&a, r0);
    pooling_add(&a, r1);
    CHECK(pooling_check(&a, &e) == 0);
    CHECK(pooling_finish(&a, out) == 0); /* mean (3, 1), norm sqrt(10) */
    CHECK(fabsf(out[0] - 3.0f / sqrtf(10.0f)) < 1e-7f && fabsf(out[1] - 1.0f / sqrtf(10.0f)) < 1e-7f);
    pooling_reset(&a);
    CHECK(a.n_rows == 0);
    pooling_add(&a, r1);
    CHECK(pooling_finish(&a, out) == 0 && out[0] == 1.0f && out[1] == 0.0f);
    pooling_free(&a);

    CHECK(pooling_init(&a, MODEL_POOLING_LAST, 2) == 0);
    pooling_add(&a, r0);
    pooling_add(&a, r1); /* a second row for LAST breaks the invariant */
    CHECK(pooling_check(&a, &e) != 0);
    pooling_free(&a);

    float z[3] = {0, 0, 0}, v[3] = {3, 0, -4};
    pooling_normalize(z, 3);
    CHECK(z[0] == 0 && z[1] == 0 && z[2] == 0);
    pooling_normalize(v, 3);
    CHECK(fabsf(v[0] - 0.6f) < 1e-7f && v[1] == 0.0f && fabsf(v[2] + 0.8f) < 1e-7f);
}

#define N_PROMPT 45

/* The final hidden states of every row of toks (n rows, one step) from the backend: (n, n_embd). */
static int hidden_of(struct runtime *rt, const int32_t *toks, int32_t n, float *out, struct err *e)
{
    int32_t *blocks, n_blocks, pos[N_PROMPT], seq[N_PROMPT] = {0}, rows[N_PROMPT], last = n - 1;
    float *logits = malloc((size_t)rt->model->hp.n_vocab * sizeof *logits);
    int rc = logits ? lm_kv(rt, n, &blocks, &n_blocks, e) : -1;
    if (rc) return free(logits), -1;
    for (int32_t i = 0; i < n; i++) pos[i] = rows[i] = i;
    struct step_seq sq = {blocks, n_blocks};
    struct step_batch b = {n, toks, pos, seq, 1, &sq, 1, &last, n, rows, out};
    rc = rt->backend.ops->forward(rt->backend.ctx, &b, logits, e);
    free(blocks);
    free(logits);
    return rc;
}

/* The embedding of toks pooled this way, computed here from the hidden states h (n, n_embd). */
static void pool_here(const float *h, int32_t n, int32_t n_embd, int32_t pooling, float *out)
{
    double ss = 0;
    for (int32_t k = 0; k < n_embd; k++) {
        double v = 0;
        if (pooling == MODEL_POOLING_MEAN)
            for (int32_t r = 0; r < n; r++) v += h[(size_t)r * n_embd + k];
        v = pooling == MODEL_POOLING_MEAN ? v / n : h[(size_t)(pooling == MODEL_POOLING_CLS ? 0 : n - 1) * n_embd + k];
        out[k] = (float)v;
        ss += v * v;
    }
    for (int32_t k = 0; k < n_embd; k++) out[k] = (float)(out[k] / sqrt(ss));
}

/* Runs requests rq (n), one after the other, on a fresh engine with max_batch_tokens mbt; results by request
 * id into res. */
static int run_engine(struct runtime *rt, int32_t mbt, int prefix_cache, const struct engine_request *rq, int n,
                      struct engine_result *res, struct err *e)
{
    struct engine_params ep = engine_default_params();
    ep.kv_blocks = 64;
    ep.kv_type = KV_TYPE_F32; /* as lm_kv's */
    ep.max_batch_tokens = mbt;
    ep.max_seqs = 4;
    ep.prefix_cache = prefix_cache;
    ep.debug_checks = 1;
    engine *eng;
    if (runtime_new_engine(rt, &ep, &eng, e)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) { /* one after the other: a request's blocks are cached for the next */
        rc = engine_add(eng, &rq[i], e);
        while (!rc && engine_has_work(eng)) rc = engine_step(eng, e);
    }
    struct engine_result r;
    while (engine_take(eng, &r)) res[r.id] = r;
    engine_free(eng);
    return rc;
}

static void (*real_caps)(void *ctx, struct backend_caps *out);
static void caps_no_hidden(void *ctx, struct backend_caps *out)
{
    real_caps(ctx, out);
    out->hidden_states = 0;
}

TEST(pooling_engine_stories260K)
{
    struct runtime rt;
    struct err e;
    CHECK_MSG(lm_open(test_shared("models/stories260K.gguf"), &rt, &e) == 0, "%s", e.msg);
    const int32_t n_embd = rt.model->hp.n_embd, nv = rt.model->hp.n_vocab;
    CHECK(rt.model->hp.pooling == MODEL_POOLING_LAST); /* no pooling_type key: the decoder-only default */
    CHECK(rt.caps.hidden_states == 1);
    int32_t toks[N_PROMPT];
    uint64_t x = 7;
    for (int i = 0; i < N_PROMPT; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = 3 + (int32_t)((x >> 33) % (uint64_t)(nv - 3));
    }
    float *h = malloc((size_t)N_PROMPT * n_embd * sizeof *h), *want = malloc((size_t)n_embd * sizeof *want);
    CHECK(h && want);
    CHECK_MSG(hidden_of(&rt, toks, N_PROMPT, h, &e) == 0, "%s", e.msg);
    { /* backend_check_batch refuses hidden rows out of order, or without a buffer */
        int32_t *blocks, n_blocks, pos[2] = {0, 1}, seq[2] = {0, 0}, rows[2] = {1, 0};
        CHECK(lm_kv(&rt, 2, &blocks, &n_blocks, &e) == 0);
        struct step_seq sq = {blocks, n_blocks};
        struct step_batch b = {2, toks, pos, seq, 1, &sq, 0, NULL, 2, rows, h};
        CHECK(rt.backend.ops->forward(rt.backend.ctx, &b, NULL, &e) != 0 && strstr(e.msg, "hidden_rows[1]"));
        b.hidden = NULL;
        rows[0] = 0, rows[1] = 1;
        CHECK(rt.backend.ops->forward(rt.backend.ctx, &b, NULL, &e) != 0 && strstr(e.msg, "n_hidden"));
        free(blocks);
    }
    for (int32_t pooling = MODEL_POOLING_MEAN; pooling <= MODEL_POOLING_LAST; pooling++) {
        pool_here(h, N_PROMPT, n_embd, pooling, want);
        /* a completion of the same prompt first (with the prefix cache on, it registers the prompt's blocks),
         * then the embedding; run whole (512 rows a step) and in chunks of 7 rows */
        struct engine_request rq[2] = {{.id = 0, .prompt = toks, .n_prompt = N_PROMPT, .max_tokens = 4},
                                       {.id = 1, .prompt = toks, .n_prompt = N_PROMPT, .embed_pooling = pooling}};
        rq[0].sampling = sampler_default_params();
        const int32_t mbts[2] = {512, 7};
        float *first = NULL;
        for (int k = 0; k < 2; k++) {
            struct engine_result res[2];
            memset(res, 0, sizeof res);
            CHECK_MSG(run_engine(&rt, mbts[k], 1, rq, 2, res, &e) == 0, "%s", e.msg);
            CHECK_MSG(res[1].finish == ENGINE_FINISH_STOP, "%s", res[1].error ? res[1].error : "?");
            CHECK(res[1].n_embedding == n_embd && res[1].n_tokens == 0 && res[1].n_prompt_cached == 0);
            CHECK_MSG(res[0].embedding == NULL && res[0].n_tokens > 0, "%d %d %s", res[0].finish, res[0].n_tokens,
                      res[0].error ? res[0].error : "");
            double max_diff = 0, norm = 0;
            for (int32_t i = 0; i < n_embd; i++) {
                double d = fabs((double)res[1].embedding[i] - want[i]);
                if (d > max_diff) max_diff = d;
                norm += (double)res[1].embedding[i] * res[1].embedding[i];
            }
            CHECK_MSG(max_diff < 1e-6, "pooling %d, %d rows a step: max |diff| %g", pooling, mbts[k], max_diff);
            CHECK(fabs(norm - 1.0) < 1e-5);
            if (k == 0) {
                first = res[1].embedding;
                res[1].embedding = NULL;
            } else {
                CHECK(memcmp(first, res[1].embedding, (size_t)n_embd * sizeof(float)) == 0); /* split-invariant */
            }
            engine_result_free(&res[0]);
            engine_result_free(&res[1]);
        }
        free(first);
    }
    /* a pooling type the engine does not compute fails the request alone */
    struct engine_request bad = {.id = 0, .prompt = toks, .n_prompt = N_PROMPT, .embed_pooling = 4};
    struct engine_result res[1];
    memset(res, 0, sizeof res);
    CHECK_MSG(run_engine(&rt, 64, 1, &bad, 1, res, &e) == 0, "%s", e.msg);
    CHECK(res[0].finish == ENGINE_FINISH_ERROR && strstr(res[0].error, "pooling type 4"));
    engine_result_free(&res[0]);
    /* a backend without hidden states (as cuda today) fails an embedding request alone, saying so */
    struct backend_ops ops = *rt.backend.ops;
    real_caps = ops.caps;
    ops.caps = caps_no_hidden;
    struct backend nohid = {&ops, rt.backend.ctx};
    struct engine_params ep = engine_default_params();
    ep.kv_blocks = 16;
    engine *eng;
    CHECK_MSG(engine_init(rt.model, &nohid, rt.vocab, &ep, &eng, &e) == 0, "%s", e.msg);
    bad.embed_pooling = MODEL_POOLING_MEAN;
    CHECK(engine_add(eng, &bad, &e) == 0);
    CHECK(engine_take(eng, &res[0]) == 1 && res[0].finish == ENGINE_FINISH_ERROR &&
          strstr(res[0].error, "does not return hidden states"));
    engine_result_free(&res[0]);
    engine_free(eng);
    free(h);
    free(want);
    runtime_close(&rt);
}

int main(void)
{
    RUN(pooling_rows);
    RUN(pooling_mean_and_normalize);
    RUN(pooling_engine_stories260K);
    return test_summary();
}
