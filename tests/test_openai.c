/* Tests for server/openai on the stories260K vocabulary: request bodies become the prompt and parameters
 * that run would use (the same tokens, the same seeds for seeded requests, the same error messages);
 * server fields (stream, stream_options) and neutral OpenAI fields; unsupported and unknown fields are 400
 * with run's codes and params;
 * response objects, stream chunks and errors have the OpenAI shapes (each checked by parsing it back). */
#include "server/openai.h"

#include "gguf/gguf.h"
#include "jobs/key.h"
#include "test.h"

static tok_vocab *vocab;
static struct model_hparams hp;
static struct job_model model;
static struct gen_params defaults;
static struct openai_ctx ctx;

static int parse(int chat, const char *body, struct server_req **r, struct openai_error *err)
{
    struct err e;
    int rc = openai_parse_request(&ctx, chat, body, strlen(body), 77, r, err, &e);
    if (rc < 0) fprintf(stderr, "parse: %s\n", e.msg);
    return rc;
}

TEST(openai_completion_request_like_run)
{
    if (!vocab) SKIP("no stories260K model");
    struct server_req *r;
    struct openai_error err;
    const char *b =
        "{\"model\":\"x\",\"prompt\":\"Once upon a time\",\"max_tokens\":7,\"temperature\":0,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"user\":\"u\",\"logprobs\":false,\"echo\":false}";
    CHECK(parse(0, b, &r, &err) == 0);
    int32_t *ids;
    size_t n;
    struct err e;
    CHECK(tok_encode(vocab, "Once upon a time", 16, tok_add_bos(vocab), 1, &ids, &n, &e) == 0);
    CHECK_EQ_INT(r->n_prompt, (int32_t)n);
    CHECK(!memcmp(r->prompt, ids, n * sizeof *ids));
    free(ids);
    CHECK_EQ_INT(r->max_tokens, 7);
    CHECK(r->gen.temperature == 0);
    CHECK(r->stream && r->include_usage && !r->chat);
    CHECK_EQ_INT(r->n_choices, 1);
    CHECK(r->choices[0].seed == key_completion_seed(77, 0)); /* no seed: the caller's base */
    server_req_discard(r);
    /* a seed and n: completion i gets key_completion_seed(seed, i), as in run; max_tokens clamped to the
     * context */
    CHECK(parse(0, "{\"prompt\":\"Once\",\"seed\":5,\"n\":3,\"max_tokens\":100000}", &r, &err) == 0);
    CHECK_EQ_INT(r->n_choices, 3);
    for (int i = 0; i < 3; i++)
        CHECK(r->choices[i].seed == key_completion_seed(5, (uint32_t)i));
    CHECK_EQ_INT(r->max_tokens, hp.n_ctx_train - r->n_prompt);
    CHECK(!r->stream);
    server_req_discard(r);
}

TEST(openai_bad_requests)
{
    if (!vocab) SKIP("no stories260K model");
    struct {
        int chat;
        const char *body, *code, *msg, *param; /* code and param as run's error file has them */
    } bad[] = {
        {0, "{\"prompt\":\"x\",\"best_of\":2}", "unsupported_parameter", "'best_of'", "best_of"},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
         "unsupported_parameter", "'tools'", "tools"},
        {0, "{\"prompt\":\"x\",\"frobnicate\":1}", "unknown_parameter", "unknown field 'frobnicate'", "frobnicate"},
        {0, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "invalid_type", "'stream' must be a boolean", "stream"},
        {0, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "invalid_value",
         "only allowed with", "stream_options"},
        {0, "{\"prompt\":\"x\",\"temperature\":-1}", "invalid_value",
         "'temperature' must be in [0, 2], got -1", "temperature"},
        {0, "{\"prompt\":\"x\"", "invalid_json", "not JSON", NULL},
        {0, "{\"prompt\":\"\xc3\x28\"}", "invalid_utf8", "invalid UTF-8 at byte 11", NULL},
        {0, "{\"prompt\":[1,99999999]}", "invalid_value", "outside the vocabulary", NULL},
        {0, "{\"prompt\":[]}", "invalid_value", "'prompt' is empty", "prompt"},
        {1, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "unsupported_value",
         "is not supported", NULL},
        {1, "{\"prompt\":\"x\"}", "invalid_value", "needs body.messages", NULL},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", "unsupported_parameter",
         "'echo' is a /v1/completions field", "echo"},
        {0, "{\"prompt\":\"x\",\"logprobs\":2,\"top_logprobs\":2}", "invalid_value",
         "'top_logprobs' is a chat completions field", "top_logprobs"},
        {0, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"xml\"}}", "invalid_value", "response_format",
         "response_format.type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct server_req *r = NULL;
        struct openai_error err;
        CHECK_MSG(parse(bad[i].chat, bad[i].body, &r, &err) == 1, "body %zu parsed", i);
        CHECK(r == NULL);
        CHECK_EQ_INT(err.status, 400);
        CHECK_STR(err.type, "invalid_request_error");
        CHECK_MSG(!strcmp(err.code, bad[i].code), "body %zu: code %s", i, err.code);
        CHECK_MSG(strstr(err.message, bad[i].msg), "body %zu: %s", i, err.message);
        CHECK_MSG(!strcmp(err.param, bad[i].param ? bad[i].param : ""), "body %zu: param '%s'", i, err.param);
        size_t len;
        char *body = openai_error_body(&err, &len);
        json_t *j = json_loadb(body, len, 0, NULL);
        const json_t *param = json_object_get(json_object_get(j, "error"), "param");
        CHECK(j && json_is_string(json_object_get(json_object_get(j, "error"), "message")));
        CHECK(bad[i].param ? json_is_string(param) && !strcmp(json_string_value(param), bad[i].param)
                           : json_is_null(param));
        json_decref(j);
        free(body);
    }
}

TEST(openai_chat_uses_the_template)
{
    if (!vocab) SKIP("no stories260K model");
    struct server_req *r;
    struct openai_error err;
    CHECK(parse(1, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &r, &err) == 0);
    struct chat_msg msg = {"user", "Hi"};
    const char *bos = tok_piece(vocab, tok_bos(vocab)), *eos = tok_piece(vocab, tok_eos(vocab));
    char *rendered;
    int32_t *ids;
    size_t n;
    struct err e;
    CHECK(chat_render(CHAT_CHATML, &msg, 1, bos, eos, &rendered, &e) == 0);
    int add_bos = tok_add_bos(vocab) && strncmp(rendered, bos, strlen(bos)) != 0;
    CHECK(tok_encode(vocab, rendered, strlen(rendered), add_bos, 1, &ids, &n, &e) == 0);
    CHECK_EQ_INT(r->n_prompt, (int32_t)n);
    CHECK(!memcmp(r->prompt, ids, n * sizeof *ids));
    CHECK(r->chat);
    free(rendered);
    free(ids);
    server_req_discard(r);
    model.chat = CHAT_NONE;
    CHECK(parse(1, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &r, &err) == 1);
    CHECK_STR(err.code, "chat_template");
    model.chat = CHAT_CHATML;
}

/* A finished request as the queue leaves it. */
static struct server_req *finished(int chat, int n, enum engine_finish f)
{
    struct server_req *r = server_req_new(n);
    r->chat = chat;
    r->n_prompt = 4;
    r->id = 9;
    for (int i = 0; i < n; i++) {
        r->choices[i].done = 1;
        r->choices[i].finish = f;
        r->choices[i].text = strdup(i ? "second \"quoted\"" : "first\n");
        r->choices[i].text_len = strlen(r->choices[i].text);
        r->choices[i].n_tokens = 3 + i;
        r->choices[i].n_cached = 2;
        if (f == ENGINE_FINISH_ERROR) r->choices[i].error = strdup("the backend broke");
    }
    return r;
}

TEST(openai_response_shapes)
{
    for (int chat = 0; chat < 2; chat++) {
        struct server_req *r = finished(chat, 2, ENGINE_FINISH_LENGTH);
        char id[64];
        openai_request_id(r, 0xabc, id, sizeof id);
        CHECK(!strncmp(id, chat ? "chatcmpl-" : "cmpl-", chat ? 9 : 5));
        size_t len;
        struct openai_error err;
        char *body = openai_response(r, id, "tiny", 1700000000, &len, &err);
        CHECK(body);
        json_t *j = json_loadb(body, len, 0, NULL);
        CHECK_MSG(j, "%s", body);
        CHECK_STR(json_string_value(json_object_get(j, "object")),
                  chat ? "chat.completion" : "text_completion");
        CHECK_STR(json_string_value(json_object_get(j, "id")), id);
        CHECK_STR(json_string_value(json_object_get(j, "model")), "tiny");
        CHECK_EQ_INT(json_integer_value(json_object_get(j, "created")), 1700000000);
        json_t *ch = json_object_get(j, "choices");
        CHECK_EQ_INT(json_array_size(ch), 2);
        json_t *c1 = json_array_get(ch, 1);
        CHECK_EQ_INT(json_integer_value(json_object_get(c1, "index")), 1);
        CHECK_STR(json_string_value(json_object_get(c1, "finish_reason")), "length");
        const json_t *text =
            chat ? json_object_get(json_object_get(c1, "message"), "content") : json_object_get(c1, "text");
        CHECK_STR(json_string_value(text), "second \"quoted\"");
        if (chat)
            CHECK_STR(json_string_value(json_object_get(json_object_get(c1, "message"), "role")),
                      "assistant");
        json_t *u = json_object_get(j, "usage");
        CHECK_EQ_INT(json_integer_value(json_object_get(u, "prompt_tokens")), 4);
        CHECK_EQ_INT(json_integer_value(json_object_get(u, "completion_tokens")), 7);
        CHECK_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), 11);
        /* the same usage object as run's result lines (jobs/output) */
        CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")),
                     2);
        CHECK(json_is_object(json_object_get(u, "completion_tokens_details")));
        CHECK(json_is_null(json_object_get(j, "system_fingerprint")));
        json_decref(j);
        free(body);
        server_req_discard(r);
    }
    struct server_req *r = finished(0, 1, ENGINE_FINISH_ERROR);
    size_t len;
    struct openai_error err;
    CHECK(openai_response(r, "x", "tiny", 0, &len, &err) == NULL);
    CHECK_EQ_INT(err.status, 500);
    CHECK(strstr(err.message, "the backend broke"));
    server_req_discard(r);
    r = finished(0, 1, ENGINE_FINISH_CANCELLED);
    CHECK(openai_response(r, "x", "tiny", 0, &len, &err) == NULL);
    CHECK_EQ_INT(err.status, 503);
    server_req_discard(r);
    char *m = openai_models("tiny", 5, 0, &len);
    json_t *j = json_loads(m, 0, NULL);
    CHECK(j && json_array_size(json_object_get(j, "data")) == 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
              "tiny");
    json_decref(j);
    free(m);
}

/* Splits "data: X\n\n" events; returns how many, each X parsed into out (NULL for [DONE]). */
static int split_sse(const char *s, json_t **out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        if (strncmp(s, "data: ", 6)) return -1;
        const char *end = strstr(s, "\n\n");
        if (!end) return -1;
        out[n++] = strncmp(s + 6, "[DONE]", 6) ? json_loadb(s + 6, (size_t)(end - s - 6), 0, NULL) : NULL;
        s = end + 2;
    }
    return n;
}

TEST(openai_stream_chunks)
{
    struct server_req *r = finished(1, 1, ENGINE_FINISH_STOP);
    r->include_usage = 1;
    size_t len;
    json_t *ev[8];
    char *s = openai_stream_start(r, "chatcmpl-1", "tiny", 3, &len);
    CHECK_EQ_INT(split_sse(s, ev, 8), 1);
    json_t *d = json_object_get(json_array_get(json_object_get(ev[0], "choices"), 0), "delta");
    CHECK_STR(json_string_value(json_object_get(d, "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(ev[0], "object")), "chat.completion.chunk");
    json_decref(ev[0]);
    free(s);
    struct server_event e1 = {.choice = 0, .text = "Hel\"lo", .len = 6};
    s = openai_stream_event(r, "chatcmpl-1", "tiny", 3, &e1, &len);
    CHECK_EQ_INT(split_sse(s, ev, 8), 1);
    d = json_object_get(json_array_get(json_object_get(ev[0], "choices"), 0), "delta");
    CHECK_STR(json_string_value(json_object_get(d, "content")), "Hel\"lo");
    CHECK(
        json_is_null(json_object_get(json_array_get(json_object_get(ev[0], "choices"), 0), "finish_reason")));
    json_decref(ev[0]);
    free(s);
    struct server_event e2 = {
        .choice = 0, .text = "!", .len = 1, .finished = 1, .finish = ENGINE_FINISH_STOP};
    s = openai_stream_event(r, "chatcmpl-1", "tiny", 3, &e2, &len);
    CHECK_EQ_INT(split_sse(s, ev, 8), 2);
    CHECK_STR(json_string_value(
                  json_object_get(json_array_get(json_object_get(ev[1], "choices"), 0), "finish_reason")),
              "stop");
    json_decref(ev[0]);
    json_decref(ev[1]);
    free(s);
    s = openai_stream_end(r, "chatcmpl-1", "tiny", 3, &len);
    CHECK_EQ_INT(split_sse(s, ev, 8), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(ev[0], "usage"), "completion_tokens")),
                 3);
    CHECK(ev[1] == NULL); /* [DONE] */
    CHECK(len >= 14 && !strcmp(s + len - 14, "data: [DONE]\n\n"));
    json_decref(ev[0]);
    free(s);
    /* an engine failure inside a stream: an error object */
    struct server_event e3 = {
        .choice = 0, .text = "", .finished = 1, .finish = ENGINE_FINISH_ERROR, .error = "boom"};
    s = openai_stream_event(r, "chatcmpl-1", "tiny", 3, &e3, &len);
    CHECK_EQ_INT(split_sse(s, ev, 8), 1);
    CHECK_STR(json_string_value(json_object_get(json_object_get(ev[0], "error"), "message")), "boom");
    json_decref(ev[0]);
    free(s);
    server_req_discard(r);
    /* completions: no start chunk, "text" chunks */
    r = finished(0, 1, ENGINE_FINISH_LENGTH);
    s = openai_stream_start(r, "cmpl-1", "tiny", 3, &len);
    CHECK_EQ_INT(len, 0);
    free(s);
    s = openai_stream_event(r, "cmpl-1", "tiny", 3, &e1, &len);
    CHECK_EQ_INT(split_sse(s, ev, 8), 1);
    CHECK_STR(
        json_string_value(json_object_get(json_array_get(json_object_get(ev[0], "choices"), 0), "text")),
        "Hel\"lo");
    CHECK_STR(json_string_value(json_object_get(ev[0], "object")), "text_completion");
    json_decref(ev[0]);
    free(s);
    server_req_discard(r);
}

int main(void)
{
    gguf_file *f;
    struct err e;
    if (gguf_open(test_shared("models/stories260K.gguf"), &f, &e) == 0) {
        if (tok_load(f, &vocab, &e) != 0) vocab = NULL;
        gguf_close(f);
    }
    hp.n_ctx_train = 64;
    model = (struct job_model){
        .name = "tiny", .hp = &hp, .vocab = vocab, .chat = CHAT_CHATML, .chat_source = "flag"};
    defaults = genparam_defaults();
    ctx = (struct openai_ctx){&model, &defaults, 1};
    RUN(openai_completion_request_like_run);
    RUN(openai_bad_requests);
    RUN(openai_chat_uses_the_template);
    RUN(openai_response_shapes);
    RUN(openai_stream_chunks);
    genparam_free(&defaults);
    tok_free(vocab);
    return test_summary();
}
