/* Tests of jobs/dist without MPI: the messages (requests and results round-trip; truncated or hostile
 * bytes are refused, never read past), the process-group queries on a single process, and (plain build)
 * the refusal of an MPI launch. The MPI side runs in tests/e2e_mpi.sh. */
#include "jobs/dist.h"

#include "test.h"

static struct engine_request sample_request(void)
{
    static const int32_t prompt[] = {1, 17, 42, 9};
    static const struct logit_bias bias[] = {{5, -1.5f}, {7, 2.0f}};
    static const char *const stop[] = {"\n\n", "END"};
    struct engine_request rq;
    memset(&rq, 0, sizeof rq);
    rq.id = 123456789;
    rq.prompt = prompt;
    rq.n_prompt = 4;
    rq.max_tokens = 33;
    rq.sampling = sampler_default_params();
    rq.sampling.temperature = 0.7f;
    rq.sampling.top_p = 0.9f;
    rq.sampling.seed = 0xfeedfacecafebeefULL;
    rq.sampling.logit_bias = bias;
    rq.sampling.n_logit_bias = 2;
    rq.logprobs = 1;
    rq.prompt_logprobs = 1;
    rq.prompt_logprobs_from = 2;
    rq.top_logprobs = 4;
    rq.stop = stop;
    rq.n_stop = 2;
    rq.ignore_eos = 1;
    return rq;
}

TEST(request_round_trips)
{
    struct engine_request rq = sample_request(), got;
    struct dist_buf b = {0};
    struct err e;
    CHECK(dist_pack_request(&b, &rq) == 0);
    CHECK(dist_pack_request(&b, &rq) == 0);
    for (int k = 0; k < 2; k++) {
        CHECK_MSG(dist_unpack_request(&b, &got, &e) == 0, "%s", e.msg);
        int same = got.id == rq.id && got.n_prompt == 4 && !memcmp(got.prompt, rq.prompt, 4 * sizeof(int32_t)) &&
                   got.max_tokens == 33 && got.sampling.temperature == 0.7f && got.sampling.top_p == 0.9f &&
                   got.sampling.seed == rq.sampling.seed && got.sampling.n_logit_bias == 2 &&
                   got.sampling.logit_bias[1].token == 7 && got.sampling.logit_bias[1].bias == 2.0f &&
                   got.n_stop == 2 && !strcmp(got.stop[0], "\n\n") && !strcmp(got.stop[1], "END") && got.ignore_eos &&
                   got.logprobs == 1 && got.prompt_logprobs == 1 && got.prompt_logprobs_from == 2 &&
                   got.top_logprobs == 4;
        dist_request_free(&got);
        CHECK(same);
    }
    CHECK(b.at == b.n);
    dist_buf_free(&b);
}

TEST(truncated_request_is_refused)
{
    struct engine_request rq = sample_request(), got;
    struct dist_buf b = {0};
    struct err e;
    CHECK(dist_pack_request(&b, &rq) == 0);
    size_t full = b.n;
    for (size_t n = 0; n < full; n += 3) {
        b.n = n;
        b.at = 0;
        b.bad = 0;
        CHECK_MSG(dist_unpack_request(&b, &got, &e) != 0, "%zu of %zu bytes accepted", n, full);
        CHECK(strstr(e.msg, "truncated") != NULL);
    }
    /* a hostile count: the prompt length says more tokens than the message holds */
    b.n = full;
    b.at = 0;
    b.bad = 0;
    int64_t huge = INT32_MAX;
    memcpy(b.p + sizeof(int64_t), &huge, sizeof huge);
    CHECK(dist_unpack_request(&b, &got, &e) != 0);
    dist_buf_free(&b);
}

TEST(result_round_trips)
{
    struct engine_result r, got;
    memset(&r, 0, sizeof r);
    r.id = 77;
    r.finish = ENGINE_FINISH_ERROR;
    r.text = strdup("partial text");
    r.text_len = strlen(r.text);
    r.error = strdup("prompt does not fit");
    r.n_tokens = 3;
    r.n_prompt = 12;
    r.n_prompt_cached = 8;
    r.t_added = 10.0;
    r.t_finished = 12.5;
    r.logprobs = calloc(3, sizeof *r.logprobs); /* generated tokens' logprobs travel; no prompt logprobs */
    r.logprobs[2] = (struct logprob_entry){.token = 5, .logprob = -0.25, .n_top = 1, .top = {{6, -1.5}}};
    struct dist_buf b = {0};
    struct err e;
    CHECK(dist_pack_result(&b, &r) == 0);
    engine_result_free(&r);
    CHECK_MSG(dist_unpack_result(&b, &got, &e) == 0, "%s", e.msg);
    int same = got.id == 77 && got.finish == ENGINE_FINISH_ERROR && got.text_len == 12 &&
               !strcmp(got.text, "partial text") && !strcmp(got.error, "prompt does not fit") && got.n_tokens == 3 &&
               got.n_prompt == 12 && got.n_prompt_cached == 8 && got.t_finished - got.t_added == 2.5 &&
               got.logprobs && !got.prompt_logprobs && got.logprobs[2].token == 5 && got.logprobs[2].logprob == -0.25 &&
               got.logprobs[2].top[0].token == 6;
    engine_result_free(&got);
    CHECK(same);
    /* a bad finish value is refused */
    b.at = 0;
    int64_t bad_finish = 99;
    memcpy(b.p + sizeof(int64_t), &bad_finish, sizeof bad_finish);
    CHECK(dist_unpack_result(&b, &got, &e) != 0);
    dist_buf_free(&b);
}

TEST(single_process_queries)
{
    CHECK(dist_rank(NULL) == 0 && dist_size(NULL) == 1 && dist_local_rank(NULL) == 0 && dist_local_size(NULL) == 1);
    CHECK(dist_done(NULL));
    struct err e;
    CHECK(dist_check(NULL, &e) == 0);
    struct runtime_params p = runtime_default_params();
    dist_pick_resources(NULL, &p);
    CHECK(p.device == 0 && p.threads == runtime_default_params().threads);
    json_t *a = dist_ranks_json(NULL, &(struct dist_rank_stats){.requests = 5, .wall_s = 2, .busy_s = 1});
    CHECK(json_array_size(a) == 1);
    double busy = json_real_value(json_object_get(json_array_get(a, 0), "busy_fraction"));
    json_decref(a);
    CHECK(busy == 0.5);
}

TEST(launch_detection)
{
    dist *d = (dist *)1;
    struct err e;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    CHECK(dist_init(NULL, NULL, &d, &e) == 0 && d == NULL); /* not launched by MPI: one process */
    if (dist_available()) return;                          /* the MPI build would call MPI_Init */
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    CHECK(dist_init(NULL, NULL, &d, &e) == 0 && d == NULL);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    CHECK(dist_init(NULL, NULL, &d, &e) != 0 && strstr(e.msg, "built without MPI") && strstr(e.msg, "4"));
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMI_SIZE", "2", 1);
    CHECK(dist_init(NULL, NULL, &d, &e) != 0);
    unsetenv("PMI_SIZE");
}

int main(void)
{
    RUN(request_round_trips);
    RUN(truncated_request_is_refused);
    RUN(result_round_trips);
    RUN(single_process_queries);
    RUN(launch_detection);
    return test_summary();
}
