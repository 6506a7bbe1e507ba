/* test_runtime — opening the stack through runtime/ and backends through the registry, on stories260K:
 * explicit and auto KV budgets (the figures add up, the cap by max_seqs), a budget that leaves nothing,
 * max_batch_tokens from the backend's caps, the staged opening (engines made and freed in turn), a weight
 * type the backend does not compute, and the registry's errors (unknown name, a backend not built). */
#include "runtime/runtime.h"

#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/draft.h"
#include "test.h"

static const char *model_path(void)
{
    return test_shared("models/stories260K.gguf");
}

#define NEED_MODEL()                                                                                      \
    do {                                                                                                  \
        if (access(model_path(), R_OK) != 0) SKIP("no models/stories260K.gguf under the shared folder");  \
    } while (0)

/* The auto pool's cap for seqs sequences of tokens each: whole blocks of 16 and one more, a quarter more. */
static uint64_t useful_bytes(const struct model_hparams *hp, uint64_t seqs, int64_t tokens)
{
    uint64_t blocks = seqs * ((uint64_t)tokens / 16 + 2);
    return model_kv_bytes_per_token(hp, KV_TYPE_F16) * 16 * (blocks + blocks / 4);
}

/* Runs one greedy request of a few tokens on eng; 0 ok with its token count in *n_tokens. */
static int run_one(engine *eng, int32_t *n_tokens, struct err *e)
{
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    struct engine_request r = {.id = 7, .prompt = prompt, .n_prompt = 5, .max_tokens = 6,
                               .sampling = sampler_default_params(), .ignore_eos = 1};
    if (engine_add(eng, &r, e)) return -1;
    while (engine_has_work(eng))
        if (engine_step(eng, e)) return -1;
    struct engine_result res;
    if (!engine_take(eng, &res)) return err_set(e, "no result");
    *n_tokens = res.n_tokens;
    int bad = res.finish != ENGINE_FINISH_LENGTH || res.id != 7;
    engine_result_free(&res);
    return bad ? err_set(e, "unexpected result") : 0;
}

TEST(runtime_explicit_budget)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.threads = 2;
    p.kv_memory = 1 << 20;
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    int checked = runtime_check(&rt, &e) == 0;
    int ok = checked && rt.eng && rt.backend_name && !strcmp(rt.backend_name, "cpu") && rt.threads == 2;
    const struct runtime_budget *b = &rt.budget;
    int64_t want_blocks = engine_kv_blocks_for_budget(&rt.model->hp, KV_TYPE_F16, 16, 1 << 20);
    ok = ok && !b->automatic && !b->capped && b->kv_bytes == (1u << 20) && b->kv_blocks == want_blocks &&
         want_blocks > 0 && b->kv_tokens == want_blocks * 16 && rt.ep.kv_blocks == want_blocks && b->available > 0 &&
         b->kv_free >= b->kv_bytes; /* a given budget is measured against the machine too */
    int32_t n = 0;
    int ran = run_one(rt.eng, &n, &e) == 0 && n == 6;
    char desc[256];
    runtime_describe(&rt, desc, sizeof desc);
    runtime_close(&rt);
    CHECK_MSG(checked, "%.900s", e.msg);
    CHECK(ok);
    CHECK_MSG(ran, "%.900s", e.msg);
    CHECK_MSG(strstr(desc, "cpu backend, 2 threads") != NULL, "%s", desc);
    CHECK(rt.eng == NULL && rt.model == NULL && rt.backend.ops == NULL); /* closed and zeroed */
}

TEST(runtime_auto_budget)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.headroom = 0; /* whatever this machine has free, something is left */
    p.max_seqs = 3;
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    int checked = runtime_check(&rt, &e) == 0;
    const struct runtime_budget b = rt.budget;
    const struct model_hparams hp = rt.model->hp;
    uint64_t weights = model_weight_bytes(rt.model);
    uint64_t scratch = rt.backend.ops->scratch_bytes(rt.backend.ctx, rt.ep.max_batch_tokens);
    runtime_close(&rt);
    CHECK_MSG(checked, "%.900s", e.msg);
    CHECK(b.automatic);
    CHECK(b.total > 0 && b.available > 0 && b.available <= b.total);
    CHECK_EQ_INT(b.weights, weights); /* cpu: weights_mapped */
    CHECK_EQ_INT(b.scratch, scratch);
    CHECK_EQ_INT(b.headroom, 0);
    CHECK_EQ_INT(b.kv_free, b.available - b.weights - b.scratch);
    /* capped at what 3 sequences of the full context use: whole blocks and one more each, a quarter more */
    uint64_t useful = useful_bytes(&hp, 3, hp.n_ctx_train);
    CHECK_EQ_INT(b.kv_bytes, b.kv_free < useful ? b.kv_free : useful);
    CHECK_EQ_INT(b.kv_blocks, engine_kv_blocks_for_budget(&hp, KV_TYPE_F16, 16, b.kv_bytes));
}

/* params.seq_tokens (what the workload's longest sequence needs): the auto pool is capped at max_seqs
 * such sequences in whole blocks, one more block each, and a quarter more; never more than the context
 * gives, and a seq_tokens past the context changes nothing. */
TEST(runtime_auto_budget_takes_what_the_workload_uses)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.headroom = 0;
    p.max_seqs = 4;
    p.seq_tokens = 100; /* 6 blocks of 16 + 2 = 8 blocks a sequence, 32 for 4, 40 with the quarter */
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    const struct runtime_budget b = rt.budget;
    const struct model_hparams hp = rt.model->hp;
    runtime_close(&rt);
    CHECK(b.automatic);
    CHECK_EQ_INT(b.kv_blocks, 40);
    CHECK_EQ_INT(b.kv_bytes, model_kv_bytes_per_token(&hp, KV_TYPE_F16) * 16 * 40);
    p.seq_tokens = hp.n_ctx_train + 1; /* past the context: the context's cap */
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    uint64_t useful = useful_bytes(&hp, 4, hp.n_ctx_train);
    CHECK_EQ_INT(rt.budget.kv_bytes, rt.budget.kv_free < useful ? rt.budget.kv_free : useful);
    runtime_close(&rt);
}

/* max_seqs auto: the engine is made with the backend's knee (the ceiling) and runs at most what the pool
 * holds at seq_tokens a sequence; the pool's cap counts the knee's sequences. More sequences when the pool
 * allows it, fewer when sequences are long; a given max_seqs wins. */
TEST(runtime_auto_max_seqs)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    CHECK_EQ_INT(p.max_seqs, RUNTIME_MAX_SEQS_AUTO);
    p.model_path = model_path();
    p.headroom = 0;
    p.seq_tokens = 100; /* 8 blocks a sequence */
    struct runtime rt;
    struct err e;
    char why[256];
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    int32_t knee = runtime_seq_knee(&rt.caps, rt.ep.max_batch_tokens);
    CHECK_EQ_INT(knee, RUNTIME_KNEE_FACTOR * DRAFT_PRIOR_KNEE); /* cpu states no knee of its own */
    CHECK(rt.seqs.automatic);
    CHECK_EQ_INT(rt.ep.max_seqs, knee);
    CHECK_EQ_INT(rt.seqs.n, knee); /* the pool was sized for the knee's sequences */
    CHECK_EQ_INT(rt.budget.kv_blocks, knee * 8 + knee * 8 / 4);
    runtime_describe_seqs(&rt.seqs, rt.backend_name, rt.budget.kv_bytes, why, sizeof why);
    CHECK_MSG(strstr(why, "(auto: cpu knee") && strstr(why, "100 tokens (at the backlog"), "%s", why);
    CHECK_MSG(runtime_check(&rt, &e) == 0, "%s", e.msg);
    runtime_close(&rt);
    /* a pool of 20 blocks: 2 sequences of 8 blocks fit, not 3 */
    CHECK_MSG(runtime_open_model(&p, &rt, &e) == 0, "%s", e.msg);
    uint64_t per_token = model_kv_bytes_per_token(&rt.model->hp, KV_TYPE_F16);
    runtime_close(&rt);
    p.kv_memory = per_token * 16 * 20;
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(rt.budget.kv_blocks, 20);
    CHECK_EQ_INT(rt.seqs.n, 2);
    CHECK_EQ_INT(rt.ep.max_seqs, knee); /* the ceiling stays: a run's plan may choose again */
    runtime_describe_seqs(&rt.seqs, rt.backend_name, rt.budget.kv_bytes, why, sizeof why);
    CHECK_MSG(strstr(why, "max-seqs 2 (auto: KV for 2 x 100 tokens"), "%s", why);
    runtime_close(&rt);
    p.seq_tokens = 40; /* shorter: 4 blocks, 5 fit */
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    CHECK_EQ_INT(rt.seqs.n, 5);
    runtime_close(&rt);
    p.max_seqs = 7; /* given: taken as it is */
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    CHECK(!rt.seqs.automatic);
    CHECK_EQ_INT(rt.seqs.n, 7);
    CHECK_EQ_INT(rt.ep.max_seqs, 7);
    runtime_describe_seqs(&rt.seqs, rt.backend_name, rt.budget.kv_bytes, why, sizeof why);
    CHECK_MSG(!strcmp(why, "max-seqs 7 (given)"), "%s", why);
    runtime_close(&rt);
}

/* A given --kv-memory larger than what the machine has for the KV cache is capped there (never accepted as
 * it is), and what the caller reserves (a run's backlog book) comes out of the budget first. */
TEST(runtime_explicit_budget_too_large_is_capped)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.threads = 1;
    p.kv_memory = 1ull << 50; /* a petabyte */
    p.reserve = 64ull << 20;
    p.max_seqs = 2;
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open(&p, &rt, &e) == 0, "%.900s", e.msg);
    const struct runtime_budget b = rt.budget;
    int checked = runtime_check(&rt, &e) == 0;
    runtime_close(&rt);
    CHECK_MSG(checked, "%.900s", e.msg);
    CHECK(!b.automatic && b.capped);
    CHECK_EQ_INT(b.reserve, 64ull << 20);
    CHECK(b.kv_bytes == b.kv_free && b.kv_free < (1ull << 50));
    CHECK_EQ_INT(b.kv_free, b.available - b.weights - b.scratch - b.headroom - b.reserve);
}

TEST(runtime_auto_budget_nothing_left)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.headroom = 1ull << 60;
    struct runtime rt;
    struct err e;
    CHECK(runtime_open(&p, &rt, &e) != 0);
    CHECK_MSG(strstr(e.msg, "nothing is left for the KV cache on the cpu backend") && strstr(e.msg, "headroom"), "%s",
              e.msg);
    CHECK(rt.model == NULL && rt.eng == NULL); /* closed on failure */
}

TEST(runtime_max_batch_tokens_from_caps)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.threads = 1;
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open_model(&p, &rt, &e) == 0 && runtime_open_backend(&rt, &e) == 0, "%.900s", e.msg);
    int32_t dflt = rt.ep.max_batch_tokens, caps_dflt = rt.caps.default_max_batch_tokens;
    int f32_ok = (rt.caps.weight_types >> GGUF_DTYPE_F32 & 1) && !(rt.caps.weight_types >> GGUF_DTYPE_Q8_1 & 1);
    runtime_close(&rt);
    CHECK_EQ_INT(caps_dflt, 512);
    CHECK_EQ_INT(dflt, caps_dflt);
    CHECK(f32_ok);
    p.max_batch_tokens = 77;
    CHECK_MSG(runtime_open_model(&p, &rt, &e) == 0 && runtime_open_backend(&rt, &e) == 0, "%.900s", e.msg);
    int32_t given = rt.ep.max_batch_tokens;
    int64_t blocks = rt.ep.kv_blocks;
    runtime_close(&rt);
    CHECK_EQ_INT(given, 77);
    CHECK_EQ_INT(blocks, 0); /* no budget yet */
}

/* bench's way: the model and backend once, a KV plan with its own cap, engines one after another */
TEST(runtime_staged_engines)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.threads = 1;
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open_model(&p, &rt, &e) == 0 && runtime_open_backend(&rt, &e) == 0, "%.900s", e.msg);
    uint64_t per_block = model_kv_bytes_per_token(&rt.model->hp, KV_TYPE_F16) * 16;
    int ok = runtime_check(&rt, &e) == 0 && runtime_plan_kv(&rt, 10 * per_block + 5, UINT64_MAX, &e) == 0 &&
             rt.ep.kv_blocks == 10 && !rt.budget.automatic && runtime_check(&rt, &e) == 0;
    /* auto with a cap of 4 blocks (headroom 0: something is left on any machine) */
    rt.params.headroom = 0;
    ok = ok && runtime_plan_kv(&rt, RUNTIME_AUTO, 4 * per_block, &e) == 0 && rt.ep.kv_blocks == 4 &&
         rt.budget.automatic && rt.budget.kv_bytes == 4 * per_block && runtime_check(&rt, &e) == 0;
    /* the check notices a budget whose figures do not add up */
    struct runtime broken = rt;
    broken.budget.kv_free += 1;
    int caught = runtime_check(&broken, &e) != 0 && strstr(e.msg, "does not follow");
    int runs = 0;
    for (int32_t seqs = 1; ok && seqs <= 2; seqs++) {
        struct engine_params ep = rt.ep;
        ep.max_seqs = seqs;
        engine *eng = NULL;
        int32_t n = 0;
        if (runtime_new_engine(&rt, &ep, &eng, &e) == 0 && run_one(eng, &n, &e) == 0 && n == 6) runs++;
        engine_free(eng);
    }
    runtime_close(&rt);
    CHECK_MSG(ok && runs == 2, "%.900s", e.msg);
    CHECK(caught);
}

TEST(runtime_weight_type_not_computed)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    struct runtime rt;
    struct err e;
    CHECK_MSG(runtime_open_model(&p, &rt, &e) == 0, "%.900s", e.msg);
    /* stories260K is all F32: a backend without F32 must refuse it, naming the tensor and what it computes */
    struct backend_caps caps = {.default_max_batch_tokens = 64,
                                .weight_types = 1ull << GGUF_DTYPE_F16 | 1ull << GGUF_DTYPE_Q8_0};
    int refused = runtime_check_weight_types(rt.model, &caps, "fake", &e) != 0;
    char msg[ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", e.msg);
    caps.weight_types |= 1ull << GGUF_DTYPE_F32;
    int accepted = runtime_check_weight_types(rt.model, &caps, "fake", &e) == 0;
    runtime_close(&rt);
    CHECK(refused && accepted);
    CHECK_MSG(strstr(msg, "tensor token_embd.weight has type F32, which the fake backend does not compute "
                          "(it computes: F16, Q8_0)"),
              "%s", msg);
}

TEST(runtime_unknown_backend)
{
    NEED_MODEL();
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.backend = "tpu";
    struct runtime rt;
    struct err e;
    CHECK(runtime_open(&p, &rt, &e) != 0);
    CHECK_MSG(strstr(e.msg, "unknown backend 'tpu' (this build has: ") && strstr(e.msg, "cpu"), "%s", e.msg);
    CHECK(backend_check_name("tpu", &e) != 0);
    char why[256];
    CHECK(backend_probe("tpu", why, sizeof why) == 0 && strstr(why, "unknown backend"));
}

/* --gpu-weights on a backend whose weights are the file's own: refused before loading, naming the value and
 * the backend; the names parse back to their values and nothing else parses. */
TEST(runtime_gpu_weights_need_a_gpu)
{
    NEED_MODEL();
    for (int w = 0; w < BACKEND_WEIGHTS_N; w++) {
        enum backend_weights back;
        CHECK(backend_weights_parse(backend_weights_name((enum backend_weights)w), &back) == 0 && (int)back == w);
    }
    enum backend_weights bw;
    CHECK(backend_weights_parse("fp16", &bw) != 0 && backend_weights_parse("", &bw) != 0);
    const enum backend_weights asked[2] = {BACKEND_WEIGHTS_BF16, BACKEND_WEIGHTS_FP8};
    for (int i = 0; i < 2; i++) {
        struct runtime_params p = runtime_default_params();
        p.model_path = model_path();
        p.backend = "cpu";
        p.gpu_weights = asked[i];
        struct runtime rt;
        struct err e;
        CHECK(runtime_open(&p, &rt, &e) != 0);
        CHECK_MSG(strstr(e.msg, "--gpu-weights") && strstr(e.msg, backend_weights_name(asked[i])) &&
                      strstr(e.msg, "backend cpu"),
                  "%s", e.msg);
    }
    /* fp8 KV is a GPU format: the cpu backend's caps leave it out, and the runtime says so before loading */
    struct runtime_params p = runtime_default_params();
    p.model_path = model_path();
    p.backend = "cpu";
    p.kv_type = KV_TYPE_FP8;
    struct runtime rt;
    struct err e;
    CHECK(runtime_open(&p, &rt, &e) != 0);
    CHECK_MSG(strstr(e.msg, "--kv-type fp8: backend cpu has no fp8 KV cache"), "%s", e.msg);
}

TEST(registry_names)
{
    struct err e;
    CHECK(backend_check_name(NULL, &e) == 0);
    CHECK(backend_check_name("auto", &e) == 0);
    CHECK(backend_check_name("cpu", &e) == 0);
    /* every listed name is built; the list ends with cpu, the fallback */
    char list[128];
    snprintf(list, sizeof list, "%s", backend_list());
    size_t n = strlen(list);
    CHECK(n >= 3 && !strcmp(list + n - 3, "cpu"));
    for (char *tok = strtok(list, ", "); tok; tok = strtok(NULL, ", "))
        CHECK_MSG(backend_check_name(tok, &e) == 0, "%s: %s", tok, e.msg);
    char why[256];
    CHECK(backend_probe("cpu", why, sizeof why) == 1);
    struct backend b;
    struct backend_config cfg = {.n_threads = 1};
    CHECK_MSG(backend_open("cpu", &cfg, &b, &e) == 0, "%s", e.msg);
    struct backend_memory mem = {0};
    int mem_ok = b.ops->memory(b.ctx, &mem, &e) == 0 && mem.total > 0 && mem.available <= mem.total && mem.headroom > 0;
    CHECK_STR(b.ops->name, "cpu");
    backend_free(&b);
    CHECK_MSG(mem_ok, "%s", e.msg);
}

TEST(registry_cuda_not_built)
{
#ifdef NS_CUDA
    SKIP("built with CUDA");
#else
    struct backend b = {0};
    struct err e;
    struct backend_config cfg = {0};
    const char *want = "backend cuda: this build has no CUDA backend (build with make CUDA=1)";
    CHECK(backend_open("cuda", &cfg, &b, &e) != 0);
    CHECK_STR(e.msg, want);
    CHECK(b.ops == NULL && b.ctx == NULL);
    CHECK(backend_check_name("cuda", &e) != 0);
    CHECK_STR(e.msg, want);
    char why[256];
    CHECK(backend_probe("cuda", why, sizeof why) == 0 && strstr(why, "make CUDA=1"));
    CHECK(strstr(backend_list(), "cuda") == NULL);
    /* auto: the best available, which is cpu here */
    CHECK_MSG(backend_open(NULL, &cfg, &b, &e) == 0, "%s", e.msg);
    CHECK_STR(b.ops->name, "cpu");
    backend_free(&b);
    CHECK_MSG(backend_open("auto", &cfg, &b, &e) == 0, "%s", e.msg);
    CHECK_STR(b.ops->name, "cpu");
    backend_free(&b);
#endif
}

int main(void)
{
    RUN(runtime_explicit_budget);
    RUN(runtime_auto_budget);
    RUN(runtime_auto_budget_takes_what_the_workload_uses);
    RUN(runtime_auto_max_seqs);
    RUN(runtime_explicit_budget_too_large_is_capped);
    RUN(runtime_auto_budget_nothing_left);
    RUN(runtime_max_batch_tokens_from_caps);
    RUN(runtime_staged_engines);
    RUN(runtime_weight_type_not_computed);
    RUN(runtime_unknown_backend);
    RUN(runtime_gpu_weights_need_a_gpu);
    RUN(registry_names);
    RUN(registry_cuda_not_built);
    return test_summary();
}
