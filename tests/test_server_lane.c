/* Tests for server/server_lane: the batch lane through a running server (engine thread on stories260K,
 * debug_checks on: the engine side checks the lane and the id map after every loop). A lane request's
 * result equals the engine's own for the same request, and the lane keeps its own copies (the caller's
 * prompt, stop strings and logit bias are overwritten right after the add); an interactive request is
 * answered while lane requests wait; abandoning drops the results and cancels what is in the engine, after
 * which the lane takes requests again. */
#include "server/server.h"

#include "test.h"
#include "util/clock.h"

static const struct job_model no_chat = {.chat = CHAT_NONE, .chat_source = "none"};
static struct runtime rt, ref;
static server *srv;
static struct gen_params defaults;

static const int32_t prompt_ids[5] = {1, 400, 300, 200, 100};

/* A request of 5 prompt tokens, greedy, with a stop string and a logit bias, built in the caller's buffers. */
static void make_request(struct engine_request *rq, int32_t *prompt, char *stop, struct logit_bias *bias, char **stops,
                         uint64_t id, int32_t max_tokens)
{
    memcpy(prompt, prompt_ids, sizeof prompt_ids);
    prompt[4] = (int32_t)(100 + id % 50);
    snprintf(stop, 16, "zzzq");
    stops[0] = stop;
    bias->token = 5;
    bias->bias = -1.0f;
    memset(rq, 0, sizeof *rq);
    rq->id = id;
    rq->prompt = prompt;
    rq->n_prompt = 5;
    rq->max_tokens = max_tokens;
    rq->sampling = sampler_default_params();
    rq->sampling.n_logit_bias = 1;
    rq->sampling.logit_bias = bias;
    rq->stop = (const char *const *)stops;
    rq->n_stop = 1;
}

static int reference_text(uint64_t id, int32_t max_tokens, char **text)
{
    int32_t prompt[5];
    char stop[16], *stops[1];
    struct logit_bias bias;
    struct engine_request rq;
    make_request(&rq, prompt, stop, &bias, stops, id, max_tokens);
    rq.id = 1;
    struct err e;
    struct engine_result res;
    if (engine_add(ref.eng, &rq, &e)) return -1;
    while (engine_has_work(ref.eng))
        if (engine_step(ref.eng, &e)) return -1;
    if (!engine_take(ref.eng, &res)) return -1;
    *text = res.text;
    res.text = NULL;
    engine_result_free(&res);
    return 0;
}

/* Waits (10 s at most) until n results are taken into res (by id - 1). */
static int take_n(server_lane *l, struct engine_result *res, int n)
{
    double deadline = clock_now() + 10;
    int got = 0;
    while (got < n && clock_now() < deadline) {
        struct engine_result r;
        if (!server_lane_take(l, &r)) {
            server_lane_wait(l, 0.1);
            continue;
        }
        if (r.id < 1 || r.id > (uint64_t)n) return -1;
        res[r.id - 1] = r;
        got++;
    }
    return got;
}

TEST(lane_results_equal_the_engines)
{
    server_lane *l = server_get_lane(srv);
    enum { N = 6 };
    struct err e;
    for (uint64_t i = 1; i <= N; i++) {
        int32_t prompt[5];
        char stop[16], *stops[1];
        struct logit_bias bias;
        struct engine_request rq;
        make_request(&rq, prompt, stop, &bias, stops, i, 24);
        CHECK(server_lane_add(l, &rq, &e) == 0);
        memset(prompt, 0x7f, sizeof prompt); /* the lane must have copied them */
        memset(stop, 'a', 15);
        bias.token = -1;
    }
    struct engine_result res[N];
    memset(res, 0, sizeof res);
    CHECK_EQ_INT(take_n(l, res, N), N);
    for (int i = 0; i < N; i++) {
        char *want = NULL;
        CHECK(reference_text((uint64_t)i + 1, 24, &want) == 0);
        CHECK(res[i].finish == ENGINE_FINISH_LENGTH || res[i].finish == ENGINE_FINISH_STOP);
        CHECK_MSG(want && res[i].text && !strcmp(want, res[i].text), "request %d: '%s' vs '%s'", i + 1,
                  res[i].text ? res[i].text : "", want ? want : "");
        free(want);
        engine_result_free(&res[i]);
    }
    CHECK(!server_lane_has_work(l));
    CHECK(server_lane_check(l, &e) == 0);
}

/* An interactive request submitted behind many lane requests is answered before they are all done. */
TEST(lane_interactive_first)
{
    server_lane *l = server_get_lane(srv);
    enum { N = 40 };
    struct err e;
    for (uint64_t i = 1; i <= N; i++) {
        int32_t prompt[5];
        char stop[16], *stops[1];
        struct logit_bias bias;
        struct engine_request rq;
        make_request(&rq, prompt, stop, &bias, stops, i, 120);
        CHECK(server_lane_add(l, &rq, &e) == 0);
    }
    struct openai_error err;
    struct server_req *r;
    const char *body = "{\"prompt\":\"Once upon\",\"max_tokens\":4,\"temperature\":0}";
    CHECK(openai_parse_request(server_openai(srv), 0, body, strlen(body), 1, &r, &err, &e) == 0);
    double retry;
    CHECK(server_queue_submit(server_get_queue(srv), r, &retry) == ADMIT_OK);
    CHECK(server_queue_wait_done(server_get_queue(srv), r, 30));
    CHECK(r->choices[0].finish == ENGINE_FINISH_LENGTH);
    server_queue_release(server_get_queue(srv), r);
    struct engine_stats st;
    server_lane_get_stats(l, &st);
    int32_t left = 0;
    struct engine_result res;
    while (server_lane_take(l, &res)) {
        engine_result_free(&res);
        left++;
    }
    /* max_seqs 4: the interactive request takes the first free slot, so about 4 lane requests finished first
     * (first come, first served would have made it wait for N - 4) */
    CHECK_MSG(left <= N / 2, "%d of %d lane requests finished before the interactive one", (int)left, N);
    /* abandon: the rest is cancelled in the engine, its results dropped; then the lane is as new */
    server_lane_abandon(l);
    server_lane_wait_empty(l);
    CHECK(!server_lane_has_work(l));
    CHECK(!server_lane_take(l, &res));
    CHECK_EQ_INT(server_lane_n_in_engine(l), 0);
    CHECK(server_lane_check(l, &e) == 0);
    /* it takes requests again */
    int32_t prompt[5];
    char stop[16], *stops[1];
    struct logit_bias bias;
    struct engine_request rq;
    make_request(&rq, prompt, stop, &bias, stops, 1, 8);
    CHECK(server_lane_add(l, &rq, &e) == 0);
    struct engine_result one[1];
    CHECK_EQ_INT(take_n(l, one, 1), 1);
    engine_result_free(&one[0]);
}

TEST(lane_refuses_ids_with_the_lane_bit)
{
    struct engine_request rq = {.id = SERVER_LANE_ID_BIT | 3};
    struct err e;
    CHECK(server_lane_add(server_get_lane(srv), &rq, &e) != 0);
}

int main(void)
{
    struct err e;
    struct runtime_params p = runtime_default_params();
    p.model_path = test_shared("models/stories260K.gguf");
    p.threads = 1;
    p.kv_memory = 8 << 20;
    p.debug_checks = 1;
    p.max_seqs = 4;
    defaults = genparam_defaults();
    if (runtime_open(&p, &rt, &e) || runtime_open(&p, &ref, &e)) {
        fprintf(stderr, "runtime: %s\n", e.msg);
        return 1;
    }
    struct server_params sp = server_default_params();
    sp.defaults = &defaults;
    sp.model_name = "tiny";
    sp.debug_checks = 1;
    if (server_init(&sp, &srv, &e) || server_start(srv, &rt, &no_chat, &e)) {
        fprintf(stderr, "server: %s\n", e.msg);
        return 1;
    }
    RUN(lane_results_equal_the_engines);
    RUN(lane_interactive_first);
    RUN(lane_refuses_ids_with_the_lane_bit);
    server_free(srv);
    runtime_close(&rt);
    runtime_close(&ref);
    genparam_free(&defaults);
    return test_summary();
}
