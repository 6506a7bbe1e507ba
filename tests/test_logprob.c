/* test_logprob — logprobs (engine/logprob.h) and the engine's logprobs, echo and scoring.
 *
 * The math against a long-double reference and its fixed rules (ties, NaN, the ppl_nll identity); the
 * cache (generations, next token, alternatives); a request's prompt rows, hits and offers. Then the engine on
 * stories260K (CPU backend): generated and prompt logprobs equal the log-softmax of a separate forward of the
 * whole sequence, bit for bit; they are the same at max_seqs 1 and with 7 other requests in the batch (bit
 * for bit); a scoring request (max_tokens 0) whose prefix is in the cache reports cached tokens and the same
 * values as an uncached one; a prefix cached by a request without prompt logprobs is not used (its
 * logprobs are unknown) but is once a scoring request has stored them; logprobs do not change with the
 * temperature or a logit bias (raw logprobs); and on a backend that resolves rows itself (drawer_backend.h)
 * logprobs are asked of it where its caps state them and come to the host where they do not, with the same
 * results either way.
 */
#include "engine/logprob.h"

#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "drawer_backend.h"
#include "engine/engine.h"
#include "engine/kvpool.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "runtime/ppl.h"
#include "test.h"
#include "tokenizer/tok.h"

/* ---- math ---- */

static long double ref_logprob(const float *x, int32_t n, int32_t t)
{
    long double max = x[0], sum = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    for (int32_t i = 0; i < n; i++)
        sum += expl((long double)x[i] - max);
    return (long double)x[t] - max - logl(sum);
}

TEST(fill_matches_reference_and_ppl_nll)
{
    enum { N = 1000 };
    static float x[N];
    uint64_t s = 7;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 40.0 - 20.0);
    }
    x[17] = x[523] = 30.0f; /* a tie for the best */
    struct logprob_entry en;
    logprob_fill(x, N, N - 100, 42, 5, &en);
    CHECK_EQ_INT(en.token, 42);
    CHECK(fabsl((long double)en.logprob - ref_logprob(x, N, 42)) < 1e-12L);
    CHECK(-en.logprob == ppl_nll(x, N, 42)); /* bit for bit: perplexity can be scoring requests */
    CHECK_EQ_INT(en.n_top, 5);
    CHECK_EQ_INT(en.top[0].token, 17); /* the lower id first on ties */
    CHECK_EQ_INT(en.top[1].token, 523);
    CHECK(en.top[0].logprob == en.top[1].logprob);
    for (int k = 1; k < 5; k++) CHECK(x[en.top[k].token] <= x[en.top[k - 1].token]);
    for (int i = 0; i < N - 100; i++) /* nothing outside the list beats its last */
        if (i != en.top[0].token && i != en.top[1].token && i != en.top[2].token && i != en.top[3].token &&
            i != en.top[4].token)
            CHECK(x[i] <= x[en.top[4].token]);
    /* alternatives only among ids below n_ids */
    x[950] = 99.0f;
    logprob_fill(x, N, N - 100, 950, 3, &en);
    CHECK_EQ_INT(en.top[0].token, 17);
    CHECK(en.logprob > -1e-6 && en.logprob <= 0); /* 950 holds nearly all the mass */
    /* NaN never ranks; n_top 0 and above the max */
    x[3] = NAN;
    logprob_fill(x, 10, 10, 0, 0, &en);
    CHECK_EQ_INT(en.n_top, 0);
    float y[4] = {NAN, 1.0f, 2.0f, 2.0f};
    logprob_fill(y, 4, 4, 1, 99, &en);
    CHECK_EQ_INT(en.n_top, 4);
    CHECK_EQ_INT(en.top[0].token, 2);
    CHECK_EQ_INT(en.top[1].token, 3);
    CHECK_EQ_INT(en.top[2].token, 1);
    CHECK_EQ_INT(en.top[3].token, 0);
    logprob_first(5, &en);
    CHECK(isnan(en.logprob) && en.n_top == 0 && en.token == 5);
}

/* ---- the cache ---- */

static void entries(struct logprob_entry *e, int32_t n, double base, int32_t n_top)
{
    for (int32_t i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof e[i]);
        e[i].token = i;
        e[i].logprob = base - i;
        e[i].n_top = n_top;
        for (int32_t k = 0; k < n_top; k++) e[i].top[k] = (struct logprob_top){k, base - k};
    }
}

TEST(cache_generations_next_token_and_alternatives)
{
    struct err e;
    kv_pool *pool;
    logprob_cache *c;
    CHECK(kv_pool_init(2, 4, &pool, &e) == 0);
    CHECK(logprob_cache_init(pool, &c, &e) == 0);
    const int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {9, 9, 9, 9};
    struct logprob_entry a[4], b[4];
    entries(a, 4, -1.0, 2);
    entries(b, 4, -2.0, 5);
    int32_t id = kv_alloc(pool);
    CHECK(logprob_cache_put(c, id, 7, 2, a) == 0);
    CHECK(logprob_cache_n_stored(c) == 0); /* not cached in the pool: nothing kept */
    CHECK(kv_register(pool, id, KV_NONE, t1) == id);
    CHECK(logprob_cache_put(c, id, 7, 2, a) == 0);
    CHECK(logprob_cache_get(c, id, 7, 2) != NULL);
    CHECK(logprob_cache_get(c, id, 7, 2)[3].logprob == -4.0);
    CHECK(logprob_cache_get(c, id, 8, 2) == NULL); /* another next token */
    CHECK(logprob_cache_get(c, id, 7, 3) == NULL); /* more alternatives than stored */
    CHECK(logprob_cache_put(c, id, 7, 5, b) == 0); /* more alternatives replace */
    CHECK(logprob_cache_get(c, id, 7, 3) != NULL && logprob_cache_get(c, id, 7, 0)[0].logprob == -2.0);
    CHECK(logprob_cache_put(c, id, 7, 2, a) == 0); /* fewer do not */
    CHECK(logprob_cache_get(c, id, 7, 5) != NULL);
    /* evicted and reused: the old entries are not served */
    kv_unref(pool, id);
    int32_t other = kv_alloc(pool), again = kv_alloc(pool); /* the free block, then the evicted one */
    CHECK(again == id && other != id);
    CHECK(kv_register(pool, again, KV_NONE, t2) == again);
    CHECK(logprob_cache_get(c, id, 7, 0) == NULL);
    CHECK(logprob_cache_n_stored(c) == 1);
    logprob_cache_free(c);
    kv_unref(pool, other);
    kv_unref(pool, again);
    kv_pool_free(pool);
}

TEST(seq_rows_hits_and_offers)
{
    struct err e;
    kv_pool *pool;
    logprob_cache *c;
    CHECK(kv_pool_init(4, 4, &pool, &e) == 0);
    CHECK(logprob_cache_init(pool, &c, &e) == 0);
    int32_t prompt[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, first;
    struct logprob_seq s;
    CHECK(logprob_seq_init(&s, prompt, 10, 3, 1, 1, 0, 2) == 0);
    CHECK(s.n_prompt_have == 1 && s.prompt[9].token == 14 && isnan(s.prompt[0].logprob));
    /* rows 0 .. 8 predict prompt tokens 1 .. 9; row 9 predicts the first generated token */
    CHECK_EQ_INT(logprob_seq_prompt_rows(&s, 0, 4, &first), 4);
    CHECK_EQ_INT(first, 0);
    CHECK_EQ_INT(logprob_seq_prompt_rows(&s, 6, 4, &first), 3);
    CHECK_EQ_INT(first, 6);
    float row[16];
    for (int i = 0; i < 16; i++) row[i] = (float)i;
    for (int32_t p = 0; p < 5; p++) logprob_seq_take_row(&s, p, row, 16, 16);
    CHECK_EQ_INT(s.n_prompt_have, 6);
    CHECK_EQ_INT(logprob_seq_prompt_rows(&s, 0, 8, &first), 3); /* after a preemption: only what is missing */
    CHECK_EQ_INT(first, 5);
    /* block 0 (positions 0..3) predicts 1..4: known; block 1 predicts 5..8: position 5 only is known */
    CHECK(logprob_seq_hit_ok(&s, c, prompt, 10, 0, 0, 4) == 1);
    CHECK(logprob_seq_hit_ok(&s, c, prompt, 10, 1, 1, 4) == 0);
    /* offers: block 0 once it is registered, whose last prediction (position 4) is known */
    int32_t blocks[2] = {kv_alloc(pool), kv_alloc(pool)};
    CHECK(kv_register(pool, blocks[0], KV_NONE, prompt) == blocks[0]);
    CHECK(logprob_seq_offer(&s, c, prompt, blocks, 1, 4) == 0);
    CHECK(logprob_cache_n_stored(c) == 1 && s.n_offered == 1);
    const struct logprob_entry *got = logprob_cache_get(c, blocks[0], prompt[4], 2);
    CHECK(got && memcmp(got, &s.prompt[1], 4 * sizeof *got) == 0);
    /* another sequence with the same first five tokens takes block 0 from the cache */
    struct logprob_seq t;
    CHECK(logprob_seq_init(&t, prompt, 10, 0, 0, 1, 1, 1) == 0);
    CHECK(logprob_seq_hit_ok(&t, c, prompt, 10, 0, blocks[0], 4) == 1);
    CHECK_EQ_INT(t.n_prompt_have, 5);
    CHECK(t.prompt[4].logprob == s.prompt[4].logprob && t.prompt[4].n_top == 1);
    int32_t diverging[10] = {5, 6, 7, 8, 99, 10, 11, 12, 13, 14};
    struct logprob_seq u;
    CHECK(logprob_seq_init(&u, diverging, 10, 0, 0, 1, 1, 0) == 0);
    CHECK(logprob_seq_hit_ok(&u, c, diverging, 10, 0, blocks[0], 4) == 0); /* its token 4 differs */
    struct logprob_seq w; /* entries from position 6 on: rows from 5, and block 0 (predicting 1..4) is never offered */
    CHECK(logprob_seq_init(&w, prompt, 10, 0, 0, 1, 6, 0) == 0);
    CHECK_EQ_INT(logprob_seq_prompt_rows(&w, 0, 4, &first), 0);
    CHECK_EQ_INT(logprob_seq_prompt_rows(&w, 4, 4, &first), 3);
    CHECK_EQ_INT(first, 5);
    for (int32_t p = 5; p < 8; p++) logprob_seq_take_row(&w, p, row, 16, 16);
    CHECK(logprob_seq_hit_ok(&w, c, prompt, 10, 0, blocks[0], 4) == 1); /* nothing asked for there */
    CHECK(isnan(w.prompt[4].logprob));
    int32_t n_stored = logprob_cache_n_stored(c);
    CHECK(logprob_seq_offer(&w, c, prompt, blocks, 1, 4) == 0 && w.n_offered == 1);
    CHECK(logprob_cache_n_stored(c) == n_stored);
    logprob_seq_free(&w);
    logprob_seq_push(&s, &s.prompt[2]);
    CHECK(s.n_out == 1 && s.out[0].token == 7);
    logprob_seq_free(&s);
    logprob_seq_free(&t);
    logprob_seq_free(&u);
    logprob_cache_free(c);
    kv_unref(pool, blocks[0]);
    kv_unref(pool, blocks[1]);
    kv_pool_free(pool);
}

/* ---- the engine on stories260K ---- */

struct loaded {
    gguf_file *f;
    struct model *m;
    tok_vocab *v;
    struct backend be;
};

static int load(struct loaded *L)
{
    struct err e;
    memset(L, 0, sizeof *L);
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK)) return 1;
    if (gguf_open(path, &L->f, &e) || model_load(L->f, &L->m, &e) || tok_load(L->f, &L->v, &e) ||
        backend_cpu_init(&L->be, 2, &e) || L->be.ops->load(L->be.ctx, L->m, &e)) {
        fprintf(stderr, "load: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void unload(struct loaded *L)
{
    backend_free(&L->be);
    tok_free(L->v);
    model_free(L->m);
    gguf_close(L->f);
}

/* The engine parameters of these tests: kv_blocks blocks, max_seqs, f32 KV, debug checks, steps of 64 rows
 * (prompts span several steps). */
static struct engine_params test_params(int32_t kv_blocks, int32_t max_seqs, int prefix_cache)
{
    struct engine_params p = engine_default_params();
    p.kv_blocks = kv_blocks;
    p.max_seqs = max_seqs;
    p.max_batch_tokens = 64;
    p.prefix_cache = prefix_cache;
    p.kv_type = KV_TYPE_F32;
    p.debug_checks = 1;
    return p;
}

static engine *new_engine(struct loaded *L, int32_t max_seqs, int prefix_cache, struct err *e)
{
    struct engine_params p = test_params(256, max_seqs, prefix_cache);
    engine *eng = NULL;
    return engine_init(L->m, &L->be, L->v, &p, &eng, e) ? NULL : eng;
}

/* Runs the requests (all added at once) and returns their results in id order (ids 0 .. n-1). */
static int run_all(engine *eng, const struct engine_request *r, int n, struct engine_result *out, struct err *e)
{
    for (int i = 0; i < n; i++)
        if (engine_add(eng, &r[i], e)) return -1;
    while (engine_has_work(eng))
        if (engine_step(eng, e)) return -1;
    struct engine_result res;
    int got = 0;
    while (engine_take(eng, &res)) {
        if (res.id >= (uint64_t)n) return err_set(e, "unexpected id");
        out[res.id] = res;
        got++;
    }
    return got == n ? 0 : err_set(e, "%d results of %d", got, n);
}

static void prompt_of(int32_t *p, int32_t n, uint64_t salt, int32_t n_vocab)
{
    p[0] = 1; /* BOS */
    for (int32_t i = 1; i < n; i++) {
        salt = salt * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = 2 + (int32_t)((salt >> 33) % (uint64_t)(n_vocab - 2));
    }
}

/* The logprob entries of seq[1 .. n) by one forward of the whole sequence (a fresh KV pool). */
static int reference(struct loaded *L, const int32_t *seq, int32_t n, int32_t n_top, struct logprob_entry *out,
                     struct err *e)
{
    const int32_t nv = L->m->hp.n_vocab;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *sq = calloc((size_t)n, sizeof *sq),
            *rows = malloc((size_t)n * sizeof *rows);
    int32_t blocks[64];
    float *logits = malloc((size_t)n * (size_t)nv * sizeof *logits);
    int rc = pos && sq && rows && logits && n <= 64 * 16 ? 0 : err_set(e, "reference: out of memory");
    for (int32_t i = 0; i < n && !rc; i++) pos[i] = rows[i] = i;
    for (int32_t i = 0; i < 64; i++) blocks[i] = i;
    struct step_seq ss = {blocks, (n + 15) / 16};
    struct step_batch b = {.n_rows = n, .tokens = seq, .pos = pos, .seq = sq, .n_seqs = 1, .seqs = &ss,
                           .n_logits = n, .logit_rows = rows};
    if (!rc)
        rc = L->be.ops->kv_alloc(L->be.ctx, 64, 16, KV_TYPE_F32, e) || L->be.ops->forward(L->be.ctx, &b, logits, e);
    for (int32_t i = 1; i < n && !rc; i++)
        logprob_fill(logits + (size_t)(i - 1) * (size_t)nv, nv, tok_n_vocab(L->v), seq[i], n_top, &out[i]);
    free(pos);
    free(sq);
    free(rows);
    free(logits);
    return rc;
}

static int same_entry(const struct logprob_entry *a, const struct logprob_entry *b)
{
    if (a->token != b->token || a->n_top != b->n_top || memcmp(&a->logprob, &b->logprob, sizeof a->logprob)) return 0;
    for (int32_t k = 0; k < a->n_top; k++)
        if (a->top[k].token != b->top[k].token || memcmp(&a->top[k].logprob, &b->top[k].logprob, sizeof(double)))
            return 0;
    return 1;
}

#define NP 50
#define NG 12

TEST(engine_logprobs_equal_a_full_forward_and_are_batch_invariant)
{
    struct loaded L;
    struct err e;
    int lr = load(&L);
    if (lr > 0) SKIP("no stories260K");
    CHECK(lr == 0);
    const int32_t nv = L.m->hp.n_vocab;
    static int32_t prompts[8][NP];
    struct engine_request r[8];
    struct engine_result one[8], all[8];
    for (int i = 0; i < 8; i++) {
        prompt_of(prompts[i], NP, 100 + (uint64_t)i, nv);
        r[i] = (struct engine_request){.id = (uint64_t)i, .prompt = prompts[i], .n_prompt = NP - 3 * i,
                                       .max_tokens = NG, .sampling = sampler_default_params(), .ignore_eos = 1,
                                       .logprobs = i % 2 == 0, .prompt_logprobs = i % 4 == 0,
                                       .top_logprobs = i % 3 * 2};
        r[i].sampling.temperature = i % 3 ? 0.8f : 0.0f;
        r[i].sampling.seed = 5 + (uint64_t)i;
    }
    /* request 0 alone, then all 8 together */
    engine *eng = new_engine(&L, 1, 1, &e);
    CHECK_MSG(eng && run_all(eng, r, 1, one, &e) == 0, "%s", e.msg);
    engine_free(eng);
    eng = new_engine(&L, 8, 1, &e);
    CHECK_MSG(eng && run_all(eng, r, 8, all, &e) == 0, "%s", e.msg);
    engine_free(eng);
    CHECK_EQ_INT(one[0].n_tokens, NG);
    CHECK(one[0].logprobs && one[0].prompt_logprobs && !all[1].logprobs && !all[1].prompt_logprobs);
    CHECK(all[2].logprobs && !all[2].prompt_logprobs);
    for (int32_t k = 0; k < NG; k++) CHECK(same_entry(&one[0].logprobs[k], &all[0].logprobs[k]));
    for (int32_t k = 0; k < NP; k++) CHECK(same_entry(&one[0].prompt_logprobs[k], &all[0].prompt_logprobs[k]));
    /* against one forward of prompt + generated tokens: request 0 (greedy, 0 alternatives), 4 (sampled, 2) */
    for (int i = 0; i < 8; i += 4) {
        static int32_t seq[NP + NG];
        static struct logprob_entry ref[NP + NG];
        const struct engine_result *x = &all[i];
        memcpy(seq, prompts[i], (size_t)x->n_prompt * sizeof *seq);
        memcpy(seq + x->n_prompt, x->tokens, (size_t)x->n_tokens * sizeof *seq);
        CHECK_MSG(reference(&L, seq, x->n_prompt + x->n_tokens, r[i].top_logprobs, ref, &e) == 0, "%s", e.msg);
        CHECK(isnan(x->prompt_logprobs[0].logprob) && x->prompt_logprobs[0].token == seq[0]);
        for (int32_t k = 1; k < x->n_prompt; k++)
            CHECK_MSG(same_entry(&x->prompt_logprobs[k], &ref[k]), "request %d prompt %d", i, k);
        for (int32_t k = 0; k < x->n_tokens; k++)
            CHECK_MSG(same_entry(&x->logprobs[k], &ref[x->n_prompt + k]), "request %d token %d", i, k);
    }
    for (int i = 0; i < 8; i++) {
        engine_result_free(&one[i < 1 ? i : 0]);
        engine_result_free(&all[i]);
    }
    unload(&L);
}

TEST(engine_scoring_uses_the_prefix_cache)
{
    struct loaded L;
    struct err e;
    int lr = load(&L);
    if (lr > 0) SKIP("no stories260K");
    CHECK(lr == 0);
    static int32_t p[70], q[70];
    prompt_of(p, 70, 9, L.m->hp.n_vocab);
    memcpy(q, p, sizeof p);
    q[60] = 3; /* shares 60 tokens: three blocks of 16 */
    struct engine_request base = {.prompt = p, .n_prompt = 70, .max_tokens = 0, .sampling = sampler_default_params(),
                                  .prompt_logprobs = 1, .top_logprobs = 3};
    struct engine_request plain = base; /* a completion without logprobs: caches blocks, stores no logprobs */
    plain.max_tokens = 2;
    plain.prompt_logprobs = 0;
    struct engine_result cold, res[3];
    engine *eng = new_engine(&L, 4, 0, &e);
    CHECK_MSG(eng && run_all(eng, &base, 1, &cold, &e) == 0, "%s", e.msg);
    engine_free(eng);
    CHECK(cold.finish == ENGINE_FINISH_LENGTH && cold.n_tokens == 0 && cold.n_prompt_cached == 0);
    CHECK(cold.prompt_logprobs && !cold.logprobs && isnan(cold.prompt_logprobs[0].logprob));
    /* one engine: the plain completion, then scoring (must not hit: no logprobs stored for those blocks), a
     * prompt sharing 60 tokens (hits 3 blocks), the same prompt again (hits 4: all but the last 6 tokens) */
    struct engine_request c = base;
    struct engine_result r2;
    c.prompt = q;
    c.top_logprobs = 2;
    eng = new_engine(&L, 4, 1, &e);
    CHECK(eng);
    CHECK_MSG(run_all(eng, &plain, 1, &res[0], &e) == 0, "%s", e.msg);
    CHECK_MSG(run_all(eng, &base, 1, &res[1], &e) == 0, "%s", e.msg);
    CHECK_MSG(run_all(eng, &c, 1, &res[2], &e) == 0, "%s", e.msg);
    CHECK_MSG(run_all(eng, &base, 1, &r2, &e) == 0, "%s", e.msg);
    /* logprobs from position 30 on only: the same values there, NAN before */
    struct engine_request half = base;
    struct engine_result h;
    half.prompt_logprobs_from = 30;
    CHECK_MSG(run_all(eng, &half, 1, &h, &e) == 0, "%s", e.msg);
    engine_free(eng);
    for (int32_t k = 0; k < 70; k++)
        CHECK_MSG(k < 30 ? isnan(h.prompt_logprobs[k].logprob)
                         : same_entry(&h.prompt_logprobs[k], &cold.prompt_logprobs[k]),
                  "position %d (from 30)", k);
    engine_result_free(&h);
    CHECK_MSG(res[1].n_prompt_cached == 0, "cached %d: blocks without logprobs were used", (int)res[1].n_prompt_cached);
    CHECK_MSG(res[2].n_prompt_cached == 48, "cached %d", (int)res[2].n_prompt_cached);
    CHECK_MSG(r2.n_prompt_cached == 64, "cached %d", (int)r2.n_prompt_cached);
    for (int32_t k = 0; k < 70; k++) {
        CHECK_MSG(same_entry(&res[1].prompt_logprobs[k], &cold.prompt_logprobs[k]), "position %d", k);
        CHECK_MSG(same_entry(&r2.prompt_logprobs[k], &cold.prompt_logprobs[k]), "position %d (cached)", k);
        struct logprob_entry want = cold.prompt_logprobs[k];
        want.n_top = k ? 2 : 0;
        if (k < 60) CHECK_MSG(same_entry(&res[2].prompt_logprobs[k], &want), "position %d (other prompt)", k);
    }
    engine_result_free(&cold);
    engine_result_free(&r2);
    for (int i = 0; i < 3; i++) engine_result_free(&res[i]);
    unload(&L);
}

TEST(engine_logprobs_are_raw)
{
    struct loaded L;
    struct err e;
    int lr = load(&L);
    if (lr > 0) SKIP("no stories260K");
    CHECK(lr == 0);
    static int32_t p[20];
    prompt_of(p, 20, 3, L.m->hp.n_vocab);
    struct engine_request r = {.prompt = p, .n_prompt = 20, .max_tokens = 6, .sampling = sampler_default_params(),
                               .ignore_eos = 1, .logprobs = 1, .top_logprobs = 1};
    struct engine_result g, s;
    engine *eng = new_engine(&L, 2, 0, &e);
    CHECK_MSG(eng && run_all(eng, &r, 1, &g, &e) == 0, "%s", e.msg);
    /* greedy: each token is its row's best, so it is its own first alternative */
    for (int32_t k = 0; k < g.n_tokens; k++)
        CHECK(g.logprobs[k].top[0].token == g.tokens[k] && g.logprobs[k].top[0].logprob == g.logprobs[k].logprob);
    /* a logit bias that forces the first token, and a temperature: the logprobs are still the model's */
    struct logit_bias lb = {g.tokens[0] == 5 ? 6 : 5, 100.0f};
    r.sampling.logit_bias = &lb;
    r.sampling.n_logit_bias = 1;
    r.sampling.temperature = 1.5f;
    CHECK_MSG(run_all(eng, &r, 1, &s, &e) == 0, "%s", e.msg);
    engine_free(eng);
    CHECK_EQ_INT(s.tokens[0], lb.token);
    struct logprob_entry ref[21];
    static int32_t seq[21];
    memcpy(seq, p, sizeof p);
    seq[20] = lb.token;
    CHECK_MSG(reference(&L, seq, 21, 1, ref, &e) == 0, "%s", e.msg);
    CHECK(same_entry(&s.logprobs[0], &ref[20]));
    CHECK(s.logprobs[0].logprob < g.logprobs[0].logprob); /* not the biased distribution's ~0 */
    CHECK(s.logprobs[0].top[0].token == g.tokens[0]);
    engine_result_free(&g);
    engine_result_free(&s);
    unload(&L);
}

/* The mixed requests of the device and preemption tests: greedy and sampled, with and without logprobs,
 * with prompt logprobs, with prompts that repeat (so prompt lookup proposes drafts). */
static void mixed_requests(struct engine_request *r, int32_t (*prompts)[NP], int n, const struct loaded *L)
{
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct err e;
    const char *text = "Lily has a red ball. Lily has a red ball. Lily has a red ball. Lily has a red ball. Lily has";
    if (tok_encode(L->v, text, strlen(text), 1, 0, &ids, &n_ids, &e) || n_ids > NP) n_ids = 0;
    for (int i = 0; i < n; i++) {
        int32_t n_prompt = NP - 2 * i;
        prompt_of(prompts[i], NP, 700 + (uint64_t)i, L->m->hp.n_vocab);
        if (i % 2 && n_ids) { /* text that repeats: prompt lookup proposes drafts, and the model takes them */
            memcpy(prompts[i], ids, n_ids * sizeof *ids);
            n_prompt = (int32_t)n_ids;
        }
        r[i] = (struct engine_request){.id = (uint64_t)i, .prompt = prompts[i], .n_prompt = n_prompt,
                                       .max_tokens = NG, .sampling = sampler_default_params(), .ignore_eos = 1,
                                       .logprobs = i % 3 != 2, .prompt_logprobs = i % 4 == 1, .top_logprobs = i % 3};
        r[i].sampling.temperature = i % 4 == 3 ? 0.9f : 0.0f;
        r[i].sampling.seed = 11 + (uint64_t)i;
    }
    free(ids);
}

static int same_results(const struct engine_result *a, const struct engine_result *b, int n)
{
    for (int i = 0; i < n; i++) {
        if (a[i].n_tokens != b[i].n_tokens ||
            memcmp(a[i].tokens, b[i].tokens, (size_t)a[i].n_tokens * sizeof(int32_t)) ||
            !a[i].logprobs != !b[i].logprobs || !a[i].prompt_logprobs != !b[i].prompt_logprobs)
            return 0;
        for (int32_t k = 0; a[i].logprobs && k < a[i].n_tokens; k++)
            if (!same_entry(&a[i].logprobs[k], &b[i].logprobs[k])) return 0;
        for (int32_t k = 0; a[i].prompt_logprobs && k < a[i].n_prompt; k++)
            if (!same_entry(&a[i].prompt_logprobs[k], &b[i].prompt_logprobs[k])) return 0;
    }
    return 1;
}

/* Runs r (n) on the CPU backend behind a drawer (drawer_backend.h) whose caps refuse `refuse`; *d keeps its
 * counts (released). */
static int run_drawer(struct loaded *L, uint32_t refuse, const struct engine_request *r, int n,
                      struct engine_result *out, struct drawer *d, struct err *e)
{
    memset(d, 0, sizeof *d);
    d->inner = L->be;
    d->n_vocab = L->m->hp.n_vocab;
    d->refuse = refuse;
    struct backend db = {&drawer_ops, d};
    struct engine_params p = test_params(256, 8, 1);
    const int32_t n_ids = tok_n_vocab(L->v) < d->n_vocab ? tok_n_vocab(L->v) : d->n_vocab;
    engine *eng = NULL;
    int rc = sampler_init(n_ids, &d->smp, e) || engine_init(L->m, &db, L->v, &p, &eng, e) ||
             run_all(eng, r, n, out, e);
    engine_free(eng);
    struct drawer keep = *d;
    drawer_release(d);
    d->drawn = keep.drawn;
    d->declined = keep.declined;
    d->host_rows = keep.host_rows;
    d->lp_rows = keep.lp_rows;
    return rc ? -1 : 0;
}

/* A backend that resolves rows where the logits are (drawer_backend.h: logprobs by logprob_fill on the
 * unedited row, every third row declined): the rows of requests with logprobs are drawn there with their
 * logprobs, prompt rows are SAMPLE_LOGPROBS rows (scoring requests with 5 and 20 alternatives among them),
 * and only the logprobs come back; with caps that refuse SAMPLE_USE_LOGPROBS those rows come to the host
 * instead (SAMPLE_HOST), and with caps that refuse SAMPLE_USE_TOP_K so do the rows of a request with top_k.
 * Every way, the results equal the host-only engine's bit for bit (a declined row is done on the host from
 * its unedited logits). */
TEST(engine_logprobs_on_a_backend_that_samples)
{
    struct loaded L;
    struct err e;
    int lr = load(&L);
    if (lr > 0) SKIP("no stories260K");
    CHECK(lr == 0);
    enum { N = 11 };
    static int32_t prompts[N][NP];
    struct engine_request r[N];
    static struct engine_result host[N], dev[3][N];
    mixed_requests(r, prompts, 8, &L);
    for (int i = 8; i < N; i++) {
        prompt_of(prompts[i], NP, 900 + (uint64_t)i, L.m->hp.n_vocab);
        r[i] = (struct engine_request){.id = (uint64_t)i,
                                       .prompt = prompts[i],
                                       .n_prompt = NP - i,
                                       .max_tokens = i < 10 ? 0 : NG,
                                       .sampling = sampler_default_params(),
                                       .ignore_eos = 1,
                                       .logprobs = i == 10,
                                       .prompt_logprobs = i < 10,
                                       .top_logprobs = i == 8 ? 5 : 20};
    }
    r[10].sampling.temperature = 0.8f; /* sampled with top-k */
    r[10].sampling.top_k = 40;
    r[10].sampling.seed = 5;
    engine *eng = new_engine(&L, 8, 1, &e);
    CHECK_MSG(eng && run_all(eng, r, N, host, &e) == 0, "%s", e.msg);
    engine_free(eng);
    static const uint32_t refuse[3] = {0, SAMPLE_USE_LOGPROBS, SAMPLE_USE_TOP_K};
    struct drawer d[3];
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(run_drawer(&L, refuse[k], r, N, dev[k], &d[k], &e) == 0, "%s", e.msg);
        CHECK_MSG(same_results(host, dev[k], N), "results differ with device sampling (caps refusing 0x%x)",
                  (unsigned)refuse[k]);
    }
    CHECK_MSG(d[0].lp_rows > 0 && d[0].declined > 0, "%lld rows with logprobs on the backend, %lld declined",
              (long long)d[0].lp_rows, (long long)d[0].declined);
    CHECK_MSG(d[1].lp_rows == 0 && d[1].host_rows > 0 && d[1].drawn > 0,
              "refusing logprobs: %lld logprob rows, %lld "
              "host rows, %lld drawn",
              (long long)d[1].lp_rows, (long long)d[1].host_rows, (long long)d[1].drawn);
    CHECK_MSG(d[2].host_rows > 0 && d[2].lp_rows > 0, "refusing top_k: %lld host rows, %lld logprob rows",
              (long long)d[2].host_rows, (long long)d[2].lp_rows);
    for (int i = 0; i < N; i++) {
        engine_result_free(&host[i]);
        for (int k = 0; k < 3; k++)
            engine_result_free(&dev[k][i]);
    }
    unload(&L);
}

/* Preemption (a pool of 10 blocks) and prompt-lookup drafts (verified every time) change nothing in
 * logprobs: the same values as a large pool without drafts, bit for bit. */
TEST(engine_logprobs_survive_preemption_and_drafts)
{
    struct loaded L;
    struct err e;
    int lr = load(&L);
    if (lr > 0) SKIP("no stories260K");
    CHECK(lr == 0);
    enum { N = 8 };
    static int32_t prompts[N][NP];
    struct engine_request r[N];
    struct engine_result base[N], tight[N];
    mixed_requests(r, prompts, N, &L);
    engine *eng = new_engine(&L, 8, 1, &e);
    CHECK_MSG(eng && run_all(eng, r, N, base, &e) == 0, "%s", e.msg);
    engine_free(eng);
    struct engine_params p = test_params(10, 8, 1);
    p.lookup = 4;
    p.lookup_adaptive = 0;
    struct engine_stats st;
    CHECK_MSG(engine_init(L.m, &L.be, L.v, &p, &eng, &e) == 0 && run_all(eng, r, N, tight, &e) == 0, "%s", e.msg);
    engine_get_stats(eng, &st);
    engine_free(eng);
    CHECK_MSG(same_results(base, tight, N), "logprobs differ under preemption and drafts");
    CHECK_MSG(st.n_preemptions > 0 && st.draft_tokens > 0 && st.draft_accepted > 0,
              "%lld preemptions, %lld/%lld drafts accepted", (long long)st.n_preemptions,
              (long long)st.draft_accepted, (long long)st.draft_tokens);
    for (int i = 0; i < N; i++) {
        engine_result_free(&base[i]);
        engine_result_free(&tight[i]);
    }
    unload(&L);
}

TEST(engine_refuses_bad_logprob_requests)
{
    struct loaded L;
    struct err e;
    int lr = load(&L);
    if (lr > 0) SKIP("no stories260K");
    CHECK(lr == 0);
    engine *eng = new_engine(&L, 2, 0, &e);
    CHECK(eng);
    int32_t p[3] = {1, 2, 3};
    char msg[256];
    struct engine_request r = {.prompt = p, .n_prompt = 3, .max_tokens = 0, .sampling = sampler_default_params()};
    CHECK(engine_check_request(eng, &r, msg, sizeof msg) == ENGINE_REQUEST_INVALID && strstr(msg, "0 only to score"));
    r.prompt_logprobs = 1;
    CHECK(engine_check_request(eng, &r, msg, sizeof msg) == ENGINE_REQUEST_OK);
    r.top_logprobs = LOGPROB_MAX_TOP + 1;
    CHECK(engine_check_request(eng, &r, msg, sizeof msg) == ENGINE_REQUEST_INVALID && strstr(msg, "top_logprobs 21"));
    engine_free(eng);
    unload(&L);
}

int main(void)
{
    RUN(fill_matches_reference_and_ppl_nll);
    RUN(cache_generations_next_token_and_alternatives);
    RUN(seq_rows_hits_and_offers);
    RUN(engine_logprobs_equal_a_full_forward_and_are_batch_invariant);
    RUN(engine_scoring_uses_the_prefix_cache);
    RUN(engine_logprobs_are_raw);
    RUN(engine_logprobs_on_a_backend_that_samples);
    RUN(engine_logprobs_survive_preemption_and_drafts);
    RUN(engine_refuses_bad_logprob_requests);
    return test_summary();
}
