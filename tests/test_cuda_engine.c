/* test_cuda_engine — the CUDA backend through the engine on stories260K (runs only where a GPU is;
 * test_cuda.c says how the device tests are split).
 *
 * Without NS_CUDA it prints "skip cuda_engine: built without CUDA"; with NS_CUDA but no usable GPU, "skip
 * cuda_engine: <reason>"; TEST_CUDA_ONLY=prefix runs only the tests whose names start with it. On a GPU:
 *  - through the engine: greedy completions of stories260K equal ../shared/testdata/golden; greedy outputs
 *    at max_seqs 1 and 64 compared (the number of differing requests is printed and must be 0).
 *  - draws on the device against the same engine drawing on the host; decode steps as CUDA graphs against
 *    the same steps launched kernel by kernel; FP8 layers' greedy completions against F32's.
 *  - logprobs on the device through the engine (engine_logprobs_device_vs_host) against the same backend
 *    with logprobs refused by its caps (within 1e-9, same alternatives) and against the cpu backend (within
 *    2e-2); every sampler row of genparam's table drawn on the device against the host's draws
 *    (engine_genparam_rows_on_device).
 */
#include <stdio.h>

#include "test.h"

#ifndef NS_CUDA
int main(void)
{
    printf("skip cuda_engine: built without CUDA\n");
    return 0;
}
#else

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine/logprob.h"
#include "engine/sampler.h"
#include "runtime/genparam.h"

/* ---------------------------------------------------------------- through the engine */

/* Parses the integer array after "key":[ in a JSON line; returns the count (at most cap). */
static int json_ints(const char *line, const char *key, int32_t *out, int cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":[", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    int n = 0;
    while (*p && *p != ']' && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return -1;
        out[n++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return n;
}

struct gen_req {
    int32_t prompt[256], n_prompt, max_tokens;
    int32_t got[256], n_got;
};

static int g_mixed = 0;           /* run_engine: 1 = requests with penalties and sampling filters (below) */
static int g_device_sampling = 1; /* run_engine: engine_params.device_sampling */

/* The sampling of request i when g_mixed: every other one sampled (plain temperature, min-p, top-k, top-k +
 * top-p, top-p alone, by turns); every third with a repetition penalty and a bias; else greedy. */
static struct sampler_params mixed_params(int i, struct logit_bias *bias)
{
    struct sampler_params sp = sampler_default_params();
    if (i % 3 == 0) {
        sp.repeat_penalty = 1.3f;
        sp.presence_penalty = 0.2f;
        *bias = (struct logit_bias){3 + i, 2.0f};
        sp.logit_bias = bias;
        sp.n_logit_bias = 1;
    }
    if (i % 2 == 0) return sp;
    sp.temperature = 0.8f;
    sp.seed = 1000 + (uint64_t)i;
    const int k = (i / 2) % 5;
    sp.min_p = k == 1 ? 0.05f : 0.0f;
    sp.top_k = k == 2 || k == 3 ? 40 : 0;
    sp.top_p = k == 3 ? 0.9f : k == 4 ? 0.95f : 1.0f;
    return sp;
}

/* Runs requests (greedy; g_mixed: mixed_params) through an engine on be; fills got. */
/* run_engine's prompt lookup: -1 the engine's default (adaptive), 0 off, 1 every proposal verified (--lookup 8
 * --lookup-always). Adaptive drafting follows step times, so two runs may differ in their steps' rows; tests
 * that compare runs step for step use 0 or 1. */
static int g_lookup = -1;

static int run_engine(struct loaded *L, struct backend *be, struct gen_req *r, int n, int32_t max_seqs, struct err *e)
{
    struct engine_params p = engine_default_params();
    if (g_lookup == 0) p.lookup = 0;
    if (g_lookup == 1) p.lookup_adaptive = 0;
    p.kv_blocks = 4096;
    p.max_seqs = max_seqs;
    p.max_batch_tokens = 512;
    p.debug_checks = 1;
    p.device_sampling = g_device_sampling;
    engine *eng;
    if (engine_init(L->m, be, L->v, &p, &eng, e)) return -1;
    for (int i = 0; i < n; i++) {
        struct logit_bias bias;
        struct engine_request q = {.id = (uint64_t)i, .prompt = r[i].prompt, .n_prompt = r[i].n_prompt,
                                   .max_tokens = r[i].max_tokens,
                                   .sampling = g_mixed ? mixed_params(i, &bias) : sampler_default_params(),
                                   .ignore_eos = 1};
        if (engine_add(eng, &q, e)) goto fail;
    }
    for (;;) {
        struct engine_result res;
        while (engine_take(eng, &res)) {
            struct gen_req *g = &r[res.id];
            g->n_got = res.n_tokens < 256 ? res.n_tokens : 256;
            memcpy(g->got, res.tokens, (size_t)g->n_got * 4);
            engine_result_free(&res);
        }
        if (!engine_has_work(eng)) break;
        if (engine_step(eng, e)) goto fail;
    }
    engine_free(eng);
    return 0;
fail:
    engine_free(eng);
    return -1;
}

TEST(engine_golden_stories260K)
{
    struct err e;
    struct loaded L;
    char path[4200], gpath[4200];
    snprintf(path, sizeof path, "%s", test_shared("models/stories260K.gguf"));
    snprintf(gpath, sizeof gpath, "%s", test_shared("testdata/golden/stories260K_greedy64.jsonl"));
    if (access(path, R_OK) != 0 || access(gpath, R_OK) != 0) SKIP("stories260K.gguf or its golden file not found");
    char *text = test_read_file(gpath, NULL);
    CHECK(text);
    static struct gen_req req[16], want[16];
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < 16; line = strtok(NULL, "\n")) {
        int32_t nn[1];
        req[n].n_prompt = json_ints(line, "prompt_ids", req[n].prompt, 256);
        want[n].n_got = json_ints(line, "completion_ids", want[n].got, 256);
        char *np = strstr(line, "\"n\":");
        nn[0] = np ? (int32_t)atoi(np + 4) : -1;
        req[n].max_tokens = nn[0];
        if (req[n].n_prompt > 0 && want[n].n_got == nn[0]) n++;
    }
    free(text);
    CHECK(n >= 3);
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    struct backend be;
    int ok = backend_cuda_init(&be, NULL, &e) == 0 && be.ops->load(be.ctx, L.m, &e) == 0 &&
             run_engine(&L, &be, req, n, 64, &e) == 0;
    backend_free(&be);
    unload_model(&L);
    CHECK_MSG(ok, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < want[i].n_got && k < req[i].n_got && want[i].got[k] == req[i].got[k]) k++;
        CHECK_MSG(req[i].n_got == want[i].n_got && k == want[i].n_got,
                  "golden line %d: first difference at token %d of %d", i, k, (int)want[i].n_got);
    }
    fprintf(stderr, "# golden: %d completions of stories260K equal\n", n);
}

/* n requests of 4..63 random prompt tokens (ids from 3: no control tokens) and 48 generated, into a and b. */
static void random_reqs(struct gen_req *a, struct gen_req *b, int n, int32_t n_vocab, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        a[i].n_prompt = 4 + (int32_t)(rng_splitmix64(&seed) % 60);
        for (int32_t k = 0; k < a[i].n_prompt; k++)
            a[i].prompt[k] = 3 + (int32_t)(rng_splitmix64(&seed) % (uint64_t)(n_vocab - 3));
        a[i].max_tokens = 48;
        b[i] = a[i];
    }
}

TEST(engine_concurrency_1_vs_64)
{
    struct err e;
    struct loaded L;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    enum { N = 64 };
    static struct gen_req a[N], b[N];
    random_reqs(a, b, N, L.m->hp.n_vocab, 77);
    struct backend be;
    int ok = backend_cuda_init(&be, NULL, &e) == 0 && be.ops->load(be.ctx, L.m, &e) == 0 &&
             run_engine(&L, &be, a, N, 1, &e) == 0 && run_engine(&L, &be, b, N, 64, &e) == 0;
    backend_free(&be);
    unload_model(&L);
    CHECK_MSG(ok, "%s", e.msg);
    int differ = 0, first = -1;
    for (int i = 0; i < N; i++) {
        int k = 0;
        while (k < a[i].n_got && k < b[i].n_got && a[i].got[k] == b[i].got[k]) k++;
        if (k != a[i].n_got || a[i].n_got != b[i].n_got) {
            differ++;
            if (first < 0 || k < first) first = k;
        }
    }
    fprintf(stderr, "# concurrency 1 vs 64: %d of %d greedy requests differ (earliest at token %d)\n", differ,
            N, first);
    CHECK_MSG(differ == 0, "%d of %d requests differ", differ, N);
}

/* Draws on the device (greedy with a bias and penalties, and sampled with every filter) against the same
 * engine drawing every row on the host from the same logits (device_sampling 0): the same tokens, but where a
 * draw's uniform falls within a sum's rounding of a boundary (see cuda_sample.cu; then that request goes its
 * own way): at most 2 of 64 requests may differ, none of the greedy ones. */
TEST(engine_device_sampling)
{
    struct err e;
    struct loaded L;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    enum { N = 64 };
    static struct gen_req a[N], b[N];
    random_reqs(a, b, N, L.m->hp.n_vocab, 99);
    struct backend be;
    g_mixed = 1;
    int ok = backend_cuda_init(&be, NULL, &e) == 0 && be.ops->load(be.ctx, L.m, &e) == 0 &&
             run_engine(&L, &be, a, N, 64, &e) == 0;
    g_device_sampling = 0;
    ok = ok && run_engine(&L, &be, b, N, 64, &e) == 0;
    g_device_sampling = 1;
    g_mixed = 0;
    backend_free(&be);
    unload_model(&L);
    CHECK_MSG(ok, "%s", e.msg);
    int differ = 0, greedy_differ = 0;
    for (int i = 0; i < N; i++) {
        const int d = a[i].n_got != b[i].n_got || memcmp(a[i].got, b[i].got, (size_t)a[i].n_got * 4) != 0;
        differ += d;
        greedy_differ += d && i % 2 == 0;
    }
    fprintf(stderr, "# device vs host draws: %d of %d requests differ (%d greedy)\n", differ, N, greedy_differ);
    CHECK_MSG(greedy_differ == 0 && differ <= 2, "%d of %d requests differ, %d of them greedy", differ, N,
              greedy_differ);
}

/* A backend around another (the cuda one) whose caps refuse `refuse` (SAMPLE_USE_* bits) and whose op sample
 * counts the rows it is asked: for the same engine with logprobs forced to the host, and to see where rows
 * went. */
struct spy {
    struct backend inner;
    uint32_t refuse;
    int64_t host_rows, device_rows, lp_rows; /* SAMPLE_HOST rows; others; rows with logprobs */
};
static int spy_load(void *c, const struct model *m, struct err *e)
{
    return ((struct spy *)c)->inner.ops->load(((struct spy *)c)->inner.ctx, m, e);
}
static int spy_kv_alloc(void *c, int32_t n, int32_t bs, enum kv_type t, struct err *e)
{
    return ((struct spy *)c)->inner.ops->kv_alloc(((struct spy *)c)->inner.ctx, n, bs, t, e);
}
static int spy_forward(void *c, const struct step_batch *b, float *logits, struct err *e)
{
    return ((struct spy *)c)->inner.ops->forward(((struct spy *)c)->inner.ctx, b, logits, e);
}
static uint64_t spy_scratch_bytes(void *c, int32_t rows)
{
    return ((struct spy *)c)->inner.ops->scratch_bytes(((struct spy *)c)->inner.ctx, rows);
}
static void spy_free(void *c)
{
    (void)c;
}
static void spy_caps(void *c, struct backend_caps *out)
{
    struct spy *s = c;
    s->inner.ops->caps(s->inner.ctx, out);
    out->sampling.uses &= ~s->refuse;
}
static int spy_sample(void *c, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens,
                      float *logits, struct sample_logprobs *lp, struct err *e)
{
    struct spy *s = c;
    for (int32_t i = 0; i < n; i++) {
        s->host_rows += rows[i].mode == SAMPLE_HOST;
        s->device_rows += rows[i].mode != SAMPLE_HOST;
        s->lp_rows += rows[i].mode != SAMPLE_HOST && rows[i].logprobs;
    }
    return s->inner.ops->sample(s->inner.ctx, rows, n, n_ids, tokens, logits, lp, e);
}
static int spy_step_one_off(void *c)
{
    struct spy *s = c;
    return s->inner.ops->step_one_off ? s->inner.ops->step_one_off(s->inner.ctx) : 0;
}
static const struct backend_ops spy_ops = {.name = "spy",
                                           .load = spy_load,
                                           .kv_alloc = spy_kv_alloc,
                                           .forward = spy_forward,
                                           .scratch_bytes = spy_scratch_bytes,
                                           .free = spy_free,
                                           .caps = spy_caps,
                                           .sample = spy_sample,
                                           .step_one_off = spy_step_one_off};

/* Runs the requests r (n, ids 0 .. n-1) through one engine on be (device_sampling as given); results in id
 * order. Prompt lookup off: two runs of the same requests then make the same steps (adaptive drafts follow step
 * times), so the cuda backend's logits are the same bits in both and only where rows are resolved differs. */
static int run_requests(struct loaded *L, struct backend *be, const struct engine_request *r, int n,
                        int device_sampling, struct engine_result *out, struct err *e)
{
    struct engine_params p = engine_default_params();
    p.kv_blocks = 4096;
    p.max_seqs = 32;
    p.max_batch_tokens = 256;
    p.debug_checks = 1;
    p.device_sampling = device_sampling;
    p.lookup = 0;
    engine *eng;
    if (engine_init(L->m, be, L->v, &p, &eng, e)) return -1;
    for (int i = 0; i < n; i++)
        if (engine_add(eng, &r[i], e)) goto fail;
    for (;;) {
        struct engine_result res;
        while (engine_take(eng, &res))
            out[res.id] = res;
        if (!engine_has_work(eng)) break;
        if (engine_step(eng, e)) goto fail;
    }
    engine_free(eng);
    return 0;
fail:
    engine_free(eng);
    return -1;
}

/* How two runs' logprobs of one request compare, over the tokens both have alike: the worst |a - b| of a
 * token's logprob and of each rank's alternative (by rank: near-ties may swap between backends), the entries
 * compared and those whose alternatives are not the same ids in the same order. */
struct lp_diff {
    double worst;
    int64_t entries, order_differs;
};
static void lp_diff_add(struct lp_diff *d, const struct logprob_entry *a, const struct logprob_entry *b,
                        int32_t n)
{
    for (int32_t k = 0; a && b && k < n; k++) {
        if (a[k].token != b[k].token) break;
        double w = isnan(a[k].logprob) && isnan(b[k].logprob) ? 0 : fabs(a[k].logprob - b[k].logprob);
        int order = a[k].n_top != b[k].n_top;
        for (int32_t j = 0; j < a[k].n_top && j < b[k].n_top; j++) {
            const double dj = fabs(a[k].top[j].logprob - b[k].top[j].logprob);
            w = dj > w ? dj : w;
            order |= a[k].top[j].token != b[k].top[j].token;
        }
        if (!(w <= d->worst)) d->worst = w;
        d->entries++;
        d->order_differs += order;
    }
}

/* How many generated tokens two results have alike from the start. */
static int32_t first_diff(const struct engine_result *a, const struct engine_result *b)
{
    int32_t k = 0;
    while (k < a->n_tokens && k < b->n_tokens && a->tokens[k] == b->tokens[k])
        k++;
    return k;
}

/* Logprobs on the device through the engine (stories260K): 32 requests — greedy with logprobs (0, 1, 5, 20
 * alternatives), echo (prompt and generated logprobs), scoring (max_tokens 0: prompt logprobs only), sampled
 * with a penalty — on the cuda backend (rows resolved there with their logprobs: "device"), on the same
 * backend with SAMPLE_USE_LOGPROBS refused by its caps (every such row to the host, as logits: "host") and on
 * the cpu backend. device vs host (the same logits): the same tokens (sampled ones may part where a uniform
 * falls within a sum's rounding: at most 1 request), the same alternatives in the same order, logprobs within
 * 1e-9; device vs cpu: greedy tokens alike but for at most 1 request (a near-tie), logprobs within 2e-2 (the
 * F32 path's logit error, step_vs_cpu_stories260K) by rank. Printed: rows with logprobs sent to the device,
 * each worst difference. */
TEST(engine_logprobs_device_vs_host)
{
    struct err e;
    struct loaded L;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    enum { N = 32 };
    static struct gen_req g[N], unused[N];
    random_reqs(g, unused, N, L.m->hp.n_vocab, 4242);
    struct engine_request r[N];
    static const int32_t ks[4] = {0, 1, 5, 20};
    for (int i = 0; i < N; i++) {
        const int kind = i % 4; /* greedy, echo, scoring, sampled */
        r[i] = (struct engine_request){.id = (uint64_t)i,
                                       .prompt = g[i].prompt,
                                       .n_prompt = g[i].n_prompt,
                                       .max_tokens = kind == 2 ? 0 : 16,
                                       .sampling = sampler_default_params(),
                                       .ignore_eos = 1,
                                       .logprobs = kind != 2,
                                       .prompt_logprobs = kind == 1 || kind == 2,
                                       .top_logprobs = ks[(i / 4) % 4]};
        if (kind == 3) {
            r[i].sampling.temperature = 0.8f;
            r[i].sampling.repeat_penalty = 1.2f;
            r[i].sampling.seed = 77 + (uint64_t)i;
        }
    }
    static struct engine_result dev[N], host[N], cpu[N];
    struct backend cu, cb;
    struct spy sd = {0}, sh = {0};
    int ok = backend_cuda_init(&cu, NULL, &e) == 0 && cu.ops->load(cu.ctx, L.m, &e) == 0;
    sd.inner = sh.inner = cu;
    sh.refuse = SAMPLE_USE_LOGPROBS;
    struct backend bd = {&spy_ops, &sd}, bh = {&spy_ops, &sh};
    ok = ok && run_requests(&L, &bd, r, N, 1, dev, &e) == 0 && run_requests(&L, &bh, r, N, 1, host, &e) == 0;
    ok = ok && backend_cpu_init(&cb, 0, &e) == 0 && cb.ops->load(cb.ctx, L.m, &e) == 0 &&
         run_requests(&L, &cb, r, N, 1, cpu, &e) == 0;
    backend_free(&cu);
    backend_free(&cb);
    unload_model(&L);
    CHECK_MSG(ok, "%s", e.msg);
    struct lp_diff dh = {0}, dc = {0};
    int tok_host = 0, tok_cpu = 0;
    for (int i = 0; i < N; i++) {
        tok_host += first_diff(&dev[i], &host[i]) < dev[i].n_tokens || dev[i].n_tokens != host[i].n_tokens;
        tok_cpu += i % 4 != 3 &&
                   (first_diff(&dev[i], &cpu[i]) < dev[i].n_tokens || dev[i].n_tokens != cpu[i].n_tokens);
        lp_diff_add(&dh, dev[i].logprobs, host[i].logprobs, first_diff(&dev[i], &host[i]));
        lp_diff_add(&dh, dev[i].prompt_logprobs, host[i].prompt_logprobs, dev[i].n_prompt);
        if (i % 4 == 3) continue;
        lp_diff_add(&dc, dev[i].logprobs, cpu[i].logprobs, first_diff(&dev[i], &cpu[i]));
        lp_diff_add(&dc, dev[i].prompt_logprobs, cpu[i].prompt_logprobs, dev[i].n_prompt);
    }
    fprintf(stderr,
            "# device logprobs: %lld rows with logprobs resolved on the device (%lld there, %lld host rows); "
            "forced to host: %lld on the device, %lld host rows\n",
            (long long)sd.lp_rows, (long long)sd.device_rows, (long long)sd.host_rows, (long long)sh.lp_rows,
            (long long)sh.host_rows);
    fprintf(
        stderr,
        "# device vs host logprobs: %d of %d requests' tokens differ, %lld entries, worst %.3g (tol 1e-9), "
        "%lld with other alternatives (must be 0)\n",
        tok_host, N, (long long)dh.entries, dh.worst, (long long)dh.order_differs);
    fprintf(stderr,
            "# device vs cpu logprobs: %d of %d unsampled requests' tokens differ, %lld entries, worst %.3g "
            "(tol 2e-2), %lld with alternatives in another order (printed only)\n",
            tok_cpu, 3 * N / 4, (long long)dc.entries, dc.worst, (long long)dc.order_differs);
    for (int i = 0; i < N; i++) {
        engine_result_free(&dev[i]);
        engine_result_free(&host[i]);
        engine_result_free(&cpu[i]);
    }
    CHECK_MSG(sd.lp_rows > 0 && sh.lp_rows == 0 && sh.host_rows > 0,
              "rows with logprobs: %lld on the device, %lld when "
              "refused",
              (long long)sd.lp_rows, (long long)sh.lp_rows);
    CHECK_MSG(tok_host <= 1 && dh.entries > 0 && dh.worst <= 1e-9 && dh.order_differs == 0,
              "device vs host: %d requests differ, worst %.3g, %lld orders differ", tok_host, dh.worst,
              (long long)dh.order_differs);
    CHECK_MSG(tok_cpu <= 1 && dc.entries > 0 && dc.worst <= 2e-2,
              "device vs cpu: %d requests differ, worst %.3g", tok_cpu, dc.worst);
}

/* Issue 34.4: every sampler row of genparam's table (those with a sampler field, the logit bias, logprobs)
 * set off its default on a sampled request (16 requests of stories260K, 24 tokens, their own seeds), through
 * device sampling against the same engine drawing on the host (device_sampling 0): the cuda backend's caps
 * must express the request (sampler_uses within caps.sampling: every row resolved on the device, none sent to
 * the host) and the tokens must be the host's but where a uniform falls within a sum's rounding of a boundary
 * (at most 1 of 16 requests per row). Printed per row: its value, rows on the device, requests that differ.
 */
TEST(engine_genparam_rows_on_device)
{
    struct err e;
    struct loaded L;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    enum { N = 16 };
    static struct gen_req g[N], unused[N];
    random_reqs(g, unused, N, L.m->hp.n_vocab, 999);
    struct backend cu;
    struct spy sp = {0};
    int ok = backend_cuda_init(&cu, NULL, &e) == 0 && cu.ops->load(cu.ctx, L.m, &e) == 0, rows_walked = 0;
    sp.inner = cu;
    struct backend b = {&spy_ops, &sp};
    struct backend_caps caps = {0};
    if (ok) spy_caps(&sp, &caps);
    static struct logit_bias bias = {7, 5.0f};
    for (int row = 0; ok && row < genparam_count && !test_cur_failed; row++) {
        const struct genparam *p = &genparam_table[row];
        if (p->sampler < 0 && p->type != GENPARAM_LOGIT_BIAS && p->type != GENPARAM_LOGPROBS) continue;
        struct gen_params gp = genparam_defaults(); /* temperature 1: a drawn request, every filter read */
        char value[32] = "";
        if (p->type == GENPARAM_INT) {
            const int32_t v =
                p->hi >= INT32_MAX ? (int32_t)p->lo + 40 : (int32_t)(p->lo + 0.37 * (p->hi - p->lo));
            *(int32_t *)((char *)&gp + p->offset) = v;
            snprintf(value, sizeof value, "%d", (int)v);
        } else if (p->type == GENPARAM_FLOAT) {
            const float v = (float)(p->lo + 0.37 * (p->hi - p->lo));
            *(float *)((char *)&gp + p->offset) = v;
            snprintf(value, sizeof value, "%g", (double)v);
        } else if (p->type == GENPARAM_LOGIT_BIAS) {
            snprintf(value, sizeof value, "{7: +5}");
        } else {
            snprintf(value, sizeof value, "5 alternatives");
        }
        struct engine_request r[N];
        for (int i = 0; i < N; i++) {
            r[i] = (struct engine_request){.id = (uint64_t)i,
                                           .prompt = g[i].prompt,
                                           .n_prompt = g[i].n_prompt,
                                           .max_tokens = 24,
                                           .ignore_eos = 1,
                                           .logprobs = p->type == GENPARAM_LOGPROBS,
                                           .top_logprobs = p->type == GENPARAM_LOGPROBS ? 5 : 0};
            genparam_to_sampler(&gp, 1000 + (uint64_t)i, &r[i].sampling);
            if (p->type == GENPARAM_LOGIT_BIAS) {
                r[i].sampling.logit_bias = &bias;
                r[i].sampling.n_logit_bias = 1;
            }
        }
        const uint32_t uses = sampler_uses(&r[0].sampling) | (r[0].logprobs ? SAMPLE_USE_LOGPROBS : 0u);
        CHECK_MSG((uses & ~caps.sampling.uses) == 0, "genparam %s: uses 0x%x, the cuda backend states 0x%x",
                  p->name, (unsigned)uses, (unsigned)caps.sampling.uses);
        static struct engine_result a[N], h[N];
        sp.device_rows = sp.host_rows = 0;
        ok = run_requests(&L, &b, r, N, 1, a, &e) == 0;
        const int64_t on_device = sp.device_rows, on_host = sp.host_rows;
        ok = ok && run_requests(&L, &b, r, N, 0, h, &e) == 0;
        int differ = 0;
        struct lp_diff d = {0};
        for (int i = 0; ok && i < N; i++) {
            differ += first_diff(&a[i], &h[i]) < a[i].n_tokens || a[i].n_tokens != h[i].n_tokens;
            lp_diff_add(&d, a[i].logprobs, h[i].logprobs, first_diff(&a[i], &h[i]));
        }
        for (int i = 0; ok && i < N; i++) {
            engine_result_free(&a[i]);
            engine_result_free(&h[i]);
        }
        if (!ok) break;
        rows_walked++;
        fprintf(
            stderr,
            "# genparam %s = %s: %lld rows on the device, %lld on the host; %d of %d requests differ from "
            "the host's draws%s\n",
            p->name, value, (long long)on_device, (long long)on_host, differ, N,
            d.entries ? "" : " (no logprobs)");
        CHECK_MSG(on_device > 0 && on_host == 0,
                  "genparam %s: %lld rows on the device, %lld sent to the host", p->name,
                  (long long)on_device, (long long)on_host);
        CHECK_MSG(differ <= 1, "genparam %s: %d of %d requests differ from the host's draws", p->name, differ,
                  N);
        CHECK_MSG(d.worst <= 1e-9 && d.order_differs == 0, "genparam %s: logprobs differ by %.3g", p->name,
                  d.worst);
    }
    backend_free(&cu);
    unload_model(&L);
    CHECK_MSG(ok, "%s", e.msg);
    fprintf(stderr, "# genparam: %d sampler rows walked through device sampling\n", rows_walked);
}

/* Decode steps as CUDA graphs (cuda_graph.cu) against the same steps launched one kernel at a time on
 * stories260K: the same greedy tokens at concurrency 1 and 4 (steps of 1..4 rows), and without drafts graphs
 * were launched far more often than captured (one capture per row count and attention plan). lookup 0: no
 * drafts; 1: every proposal verified, so decode steps carry drafts (up to 4 x 9 rows). */
static void graphs_on_vs_off(int lookup)
{
    struct err e;
    struct loaded L;
    g_lookup = lookup;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    enum { N = 16 };
    static struct gen_req a[N], b[N], c[N], d[N];
    random_reqs(a, b, N, L.m->hp.n_vocab, 123);
    random_reqs(c, d, N, L.m->hp.n_vocab, 123);
    struct backend be;
    int64_t launches = 0, captures = 0;
    int ok = backend_cuda_init(&be, NULL, &e) == 0 && be.ops->load(be.ctx, L.m, &e) == 0 &&
             backend_cuda_graphs(&be, 1, NULL, NULL) == 0 && run_engine(&L, &be, a, N, 1, &e) == 0 &&
             run_engine(&L, &be, c, N, 4, &e) == 0 && backend_cuda_graphs(&be, 0, &launches, &captures) == 0 &&
             run_engine(&L, &be, b, N, 1, &e) == 0 && run_engine(&L, &be, d, N, 4, &e) == 0;
    backend_free(&be);
    unload_model(&L);
    g_lookup = -1;
    CHECK_MSG(ok, "%s", e.msg);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        differ += a[i].n_got != b[i].n_got || memcmp(a[i].got, b[i].got, (size_t)a[i].n_got * 4) != 0;
        differ += c[i].n_got != d[i].n_got || memcmp(c[i].got, d[i].got, (size_t)c[i].n_got * 4) != 0;
    }
    fprintf(stderr, "# graphs%s: %lld launches, %lld captures; %d of %d requests differ from the launches one by one\n",
            lookup ? " (every proposal verified)" : "", (long long)launches, (long long)captures, differ, 2 * N);
    CHECK_MSG(differ == 0, "%d of %d requests differ", differ, 2 * N);
    CHECK_MSG(launches >= (lookup ? 1 : 16 * 48 / 2) && (lookup || captures * 4 < launches),
              "%lld graph launches, %lld captures", (long long)launches, (long long)captures);
}

TEST(engine_graphs_on_vs_off)
{
    graphs_on_vs_off(0);
}

TEST(engine_graphs_on_vs_off_drafts)
{
    graphs_on_vs_off(1);
}

/* stories260K with FP8 layers (its F32 matrices quantized at load; ffn_down, rows of 172, stays F32): greedy
 * completions of the golden prompts, each compared with the F32 golden (the first divergence is printed:
 * FP8 moves the logits, so a near-tie flips sooner or later); the same run twice gives the same tokens; and
 * concurrency 1 against 64 (a one-row step takes the W8A16 GEMV, a batch the W8A8 GEMM: printed, not
 * asserted; the batch-invariance issue owns that promise). */
TEST(engine_fp8_stories260K)
{
    struct err e;
    struct loaded L;
    const char *path = test_shared("models/stories260K.gguf");
    if (access(path, R_OK) != 0) SKIP("models/stories260K.gguf not found under the shared folder");
    CHECK_MSG(load_model(path, &L, &e) == 0, "%s", e.msg);
    enum { N = 64 };
    static struct gen_req a[N], b[N], c[N], d[N];
    random_reqs(a, b, N, L.m->hp.n_vocab, 321);
    random_reqs(c, d, N, L.m->hp.n_vocab, 321);
    struct backend be, ref;
    const struct backend_config fp8 = {0, 0, BACKEND_WEIGHTS_FP8};
    int ok = backend_cuda_init(&be, &fp8, &e) == 0 && be.ops->load(be.ctx, L.m, &e) == 0 &&
             backend_cuda_init(&ref, NULL, &e) == 0 && ref.ops->load(ref.ctx, L.m, &e) == 0 &&
             run_engine(&L, &be, a, N, 64, &e) == 0 && run_engine(&L, &be, b, N, 64, &e) == 0 &&
             run_engine(&L, &be, c, N, 1, &e) == 0 && run_engine(&L, &ref, d, N, 64, &e) == 0;
    backend_free(&be);
    backend_free(&ref);
    unload_model(&L);
    CHECK_MSG(ok, "%s", e.msg);
    int twice = 0, conc = 0, vs_f32 = 0;
    long first_sum = 0;
    for (int i = 0; i < N; i++) {
        twice += a[i].n_got != b[i].n_got || memcmp(a[i].got, b[i].got, (size_t)a[i].n_got * 4) != 0;
        conc += a[i].n_got != c[i].n_got || memcmp(a[i].got, c[i].got, (size_t)a[i].n_got * 4) != 0;
        int k = 0;
        while (k < a[i].n_got && k < d[i].n_got && a[i].got[k] == d[i].got[k]) k++;
        vs_f32 += k < d[i].n_got;
        first_sum += k;
    }
    fprintf(stderr, "# fp8 stories260K: %d of %d differ between two runs; %d differ at concurrency 1 vs 64; %d differ "
            "from F32 of %d (first divergence at token %.1f of 48 on average)\n", twice, N, conc, vs_f32, N,
            (double)first_sum / N);
    CHECK_MSG(twice == 0, "%d of %d requests differ between two identical FP8 runs", twice, N);
    CHECK_MSG(first_sum >= 8 * N, "FP8 greedy tokens leave F32's after %.1f tokens on average", (double)first_sum / N);
}

int main(void)
{
    char why[512];
    if (!backend_cuda_probe(why, sizeof why)) {
        printf("skip cuda_engine: %s\n", why);
        return 0;
    }
    RUN_SEL(engine_golden_stories260K);
    RUN_SEL(engine_concurrency_1_vs_64);
    RUN_SEL(engine_device_sampling);
    RUN_SEL(engine_logprobs_device_vs_host);
    RUN_SEL(engine_genparam_rows_on_device);
    RUN_SEL(engine_graphs_on_vs_off);
    RUN_SEL(engine_graphs_on_vs_off_drafts);
    RUN_SEL(engine_fp8_stories260K);
    return test_summary();
}

#endif
