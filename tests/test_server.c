/* Tests for server/server: the engine thread on stories260K through the runtime, without HTTP (requests
 * parsed by openai, submitted to the queue as the connection threads do). The server's results equal the
 * engine's own for the same requests (greedy and seeded, n > 1); a stream's events add up to the final text;
 * a cancelled request ends early and frees its sequence; a drain lets work finish, or cancels it at the
 * deadline, and admission answers 503 from then on. The engine and the queue check their invariants after
 * every loop (debug_checks). */
#include "server/server.h"

#include "test.h"

static const struct job_model no_chat = {.chat = CHAT_NONE, .chat_source = "none"};
#include "util/clock.h"

static struct runtime rt, ref;
static server *srv;
static struct gen_params defaults;

static struct runtime_params stack_params(void)
{
    struct runtime_params p = runtime_default_params();
    p.model_path = test_shared("models/stories260K.gguf");
    p.threads = 1;
    p.kv_memory = 8 << 20;
    p.debug_checks = 1;
    return p;
}

static struct server_req *submit(const char *body)
{
    struct openai_error err;
    struct err e;
    struct server_req *r;
    const struct openai_ctx *c = server_openai(srv);
    if (!c || openai_parse_request(c, 0, body, strlen(body), 1234, &r, &err, &e)) return NULL;
    double retry;
    if (server_queue_submit(server_get_queue(srv), r, &retry) != ADMIT_OK) {
        server_queue_release(server_get_queue(srv), r);
        return NULL;
    }
    return r;
}

/* The reference: the same request straight through an engine of its own. */
static int reference(const struct server_req *r, int32_t c, char **text, int32_t *n_tokens)
{
    struct engine_request rq = {.id = 1,
                                .prompt = r->prompt,
                                .n_prompt = r->n_prompt,
                                .max_tokens = r->max_tokens,
                                .stop = (const char *const *)r->gen.stop,
                                .n_stop = r->gen.n_stop};
    genparam_to_sampler(&r->gen, r->choices[c].seed, &rq.sampling);
    struct err e;
    if (engine_add(ref.eng, &rq, &e)) return -1;
    while (engine_has_work(ref.eng))
        if (engine_step(ref.eng, &e)) return -1;
    struct engine_result res;
    if (!engine_take(ref.eng, &res)) return -1;
    *text = res.text;
    *n_tokens = res.n_tokens;
    res.text = NULL;
    engine_result_free(&res);
    return 0;
}

TEST(server_results_equal_the_engines)
{
    if (!srv) SKIP("no stories260K model");
    server_queue *q = server_get_queue(srv);
    const char *bodies[] = {
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0}",
        "{\"prompt\":\"Lily and Tom\",\"max_tokens\":30,\"temperature\":0.9,\"seed\":3,\"n\":2}",
        "{\"prompt\":\"The cat\",\"max_tokens\":50,\"temperature\":0,\"stop\":[\"the park\"]}",
    };
    struct server_req *r[3];
    for (int i = 0; i < 3; i++)
        CHECK((r[i] = submit(bodies[i])) != NULL); /* all at once: they share steps */
    for (int i = 0; i < 3; i++) {
        CHECK(server_queue_wait_done(q, r[i], 30));
        for (int32_t c = 0; c < r[i]->n_choices; c++) {
            char *text;
            int32_t n;
            CHECK(reference(r[i], c, &text, &n) == 0);
            CHECK_MSG(!strcmp(text, r[i]->choices[c].text), "request %d choice %d: '%s' vs '%s'", i, (int)c,
                      r[i]->choices[c].text, text);
            CHECK_EQ_INT(r[i]->choices[c].n_tokens, n);
            free(text);
        }
        if (i == 1)
            CHECK(r[i]->choices[0].text_len > 0 && strcmp(r[i]->choices[0].text, r[i]->choices[1].text));
        server_queue_release(q, r[i]);
    }
}

TEST(server_stream_adds_up)
{
    if (!srv) SKIP("no stories260K model");
    server_queue *q = server_get_queue(srv);
    struct server_req *r =
        submit("{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,\"stream\":true,"
               "\"stop\":[\"park\"]}");
    CHECK(r);
    char got[4096];
    size_t len = 0;
    int n_events = 0, finished = 0;
    struct server_event *ev;
    double deadline = clock_now() + 30;
    while (!finished && clock_now() < deadline) {
        if (!server_queue_next_event(q, r, 0.1, &ev)) continue;
        CHECK(len + ev->len < sizeof got);
        memcpy(got + len, ev->text, ev->len);
        len += ev->len;
        finished = ev->finished;
        n_events++;
        server_event_free(ev);
    }
    CHECK(finished);
    CHECK(server_queue_wait_done(q, r, 1));
    got[len] = '\0';
    CHECK_MSG(!strcmp(got, r->choices[0].text), "streamed text differs from the result");
    CHECK(n_events > 5);
    server_queue_release(q, r);
}

TEST(server_cancel_ends_early)
{
    if (!srv) SKIP("no stories260K model");
    server_queue *q = server_get_queue(srv);
    struct server_req *r =
        submit("{\"prompt\":\"Once\",\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true}");
    CHECK(r);
    struct server_event *ev;
    CHECK(server_queue_next_event(q, r, 30, &ev)); /* it is running */
    server_event_free(ev);
    server_queue_cancel(q, r);
    CHECK(server_queue_wait_done(q, r, 30));
    CHECK_EQ_INT(r->choices[0].finish, ENGINE_FINISH_CANCELLED);
    CHECK(r->choices[0].n_tokens < 400);
    server_queue_release(q, r);
    CHECK_EQ_INT(server_queue_n_active(q), 0);
}

TEST(server_drain_finishes_then_cancels)
{
    if (!srv) SKIP("no stories260K model");
    server_queue *q = server_get_queue(srv);
    struct server_req *a = submit("{\"prompt\":\"Once\",\"max_tokens\":20,\"temperature\":0}");
    CHECK(a);
    CHECK_EQ_INT(server_drain(srv, 30), 0); /* a finishes within the deadline */
    CHECK(server_queue_wait_done(q, a, 0));
    CHECK_EQ_INT(a->choices[0].finish, ENGINE_FINISH_LENGTH);
    server_queue_release(q, a);
    double retry;
    struct server_req *b = server_req_new(1);
    b->n_prompt = 1;
    b->max_tokens = 1;
    CHECK_EQ_INT(server_queue_submit(q, b, &retry), ADMIT_DRAINING);
    server_queue_release(q, b);
    CHECK(!server_failed(srv, NULL, 0));
}

TEST(server_drain_deadline_cancels)
{
    if (!srv) SKIP("no stories260K model");
    /* a second server on the same runtime's engine, after the first one stopped */
    server_stop(srv);
    server_free(srv);
    struct server_params sp = server_default_params();
    sp.defaults = &defaults;
    sp.debug_checks = 1;
    struct err e;
    CHECK(server_init(&sp, &srv, &e) == 0);
    CHECK(server_openai(srv) == NULL); /* loading */
    CHECK(server_start(srv, &rt, &no_chat, &e) == 0);
    server_queue *q = server_get_queue(srv);
    struct server_req *r[3];
    for (int i = 0; i < 3; i++)
        CHECK((r[i] = submit("{\"prompt\":\"Once\",\"max_tokens\":480,\"ignore_eos\":true}")));
    double t0 = clock_now();
    CHECK_EQ_INT(server_drain(srv, 0.001), 3); /* 480 steps each cannot fit in 1 ms */
    CHECK(clock_now() - t0 < 10);
    for (int i = 0; i < 3; i++) {
        CHECK(server_queue_wait_done(q, r[i], 0));
        CHECK_EQ_INT(r[i]->choices[0].finish, ENGINE_FINISH_CANCELLED);
        server_queue_release(q, r[i]);
    }
}

int main(void)
{
    struct err e;
    struct runtime_params p = stack_params();
    defaults = genparam_defaults();
    if (runtime_open(&p, &rt, &e) == 0 && runtime_open(&p, &ref, &e) == 0) {
        struct server_params sp = server_default_params();
        sp.defaults = &defaults;
        sp.model_name = "tiny";
        sp.debug_checks = 1;
        if (server_init(&sp, &srv, &e) || server_start(srv, &rt, &no_chat, &e)) {
            fprintf(stderr, "server: %s\n", e.msg);
            return 1;
        }
    }
    RUN(server_results_equal_the_engines);
    RUN(server_stream_adds_up);
    RUN(server_cancel_ends_early);
    RUN(server_drain_finishes_then_cancels);
    RUN(server_drain_deadline_cancels);
    server_free(srv);
    runtime_close(&rt);
    runtime_close(&ref);
    genparam_free(&defaults);
    return test_summary();
}
