/* test_embedding — jobs/embedding: the embeddings body's forms of input and its options, with the codes and
 * messages of bad ones; the stored text of an embedding (exact round trip, little-endian float32 in
 * base64); the embeddings list built from stored results (floats, base64, dimensions truncated and
 * normalised again); and an embeddings line read from a backlog by jobs/input. */
#include <math.h>
#include <stdio.h>

#include "jobs/embedding.h"
#include "jobs/input.h"
#include "test.h"

/* Parses the JSON text j as a body: the rc of embedding_parse_body, *in, *code, msg. */
static int parse(const char *j, struct input_embed **in, const char **code, char *msg, size_t cap)
{
    json_error_t je;
    json_t *body = json_loads(j, 0, &je);
    if (!body) return -2;
    char *model = NULL;
    *code = NULL;
    int rc = embedding_parse_body(body, in, &model, code, msg, cap);
    free(model);
    json_decref(body);
    return rc;
}

TEST(embedding_parse_forms)
{
    struct input_embed *in;
    const char *code;
    char msg[256];
    CHECK(parse("{\"input\":\"hello\",\"model\":\"m\",\"user\":\"u\"}", &in, &code, msg, sizeof msg) == 0);
    CHECK(in->n == 1 && !strcmp(in->text[0], "hello") && in->len[0] == 5 && !in->ids[0]);
    CHECK(in->dimensions == 0 && in->base64 == 0);
    embedding_input_free(in);
    CHECK(parse("{\"input\":[\"a\",\"bc\"],\"encoding_format\":\"base64\",\"dimensions\":8}", &in, &code, msg,
                sizeof msg) == 0);
    CHECK(in->n == 2 && !strcmp(in->text[1], "bc") && in->base64 == 1 && in->dimensions == 8);
    embedding_input_free(in);
    CHECK(parse("{\"input\":[1,2,3]}", &in, &code, msg, sizeof msg) == 0); /* one input of token ids */
    CHECK(in->n == 1 && in->n_ids[0] == 3 && in->ids[0][2] == 3 && !in->text[0]);
    embedding_input_free(in);
    CHECK(parse("{\"input\":[[1,2],[3]],\"encoding_format\":null,\"dimensions\":null}", &in, &code, msg,
                sizeof msg) == 0);
    CHECK(in->n == 2 && in->n_ids[0] == 2 && in->n_ids[1] == 1 && in->ids[1][0] == 3);
    embedding_input_free(in);
}

TEST(embedding_parse_refusals)
{
    static const struct {
        const char *body, *code, *msg;
    } bad[] = {
        {"{\"model\":\"m\"}", "missing_prompt", "missing 'input'"},
        {"{\"input\":\"\"}", "invalid_value", "'input' is an empty string"},
        {"{\"input\":[]}", "invalid_value", "'input' is empty"},
        {"{\"input\":[\"a\",\"\"]}", "invalid_value", "'input[1]' is an empty string"},
        {"{\"input\":7}", "invalid_type", "'input' must be a string"},
        {"{\"input\":[\"a\",[1]]}", "invalid_type", "'input' must be a string"},
        {"{\"input\":[[1],[]]}", "invalid_type", "'input' must be a string"},
        {"{\"input\":[-1]}", "invalid_value", "'input' holds token id -1"},
        {"{\"input\":\"a\",\"dimensions\":0}", "invalid_value", "'dimensions' must be at least 1"},
        {"{\"input\":\"a\",\"dimensions\":\"8\"}", "invalid_type", "'dimensions' must be an integer"},
        {"{\"input\":\"a\",\"encoding_format\":\"hex\"}", "invalid_value", "'encoding_format' must be"},
        {"{\"input\":\"a\",\"user\":3}", "invalid_type", "'user' must be a string"},
        {"{\"input\":\"a\",\"temperature\":1}", "unknown_field", "unknown field 'temperature'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct input_embed *in = NULL;
        const char *code;
        char msg[256];
        int rc = parse(bad[i].body, &in, &code, msg, sizeof msg);
        CHECK_MSG(rc == 1 && !in && !strcmp(code, bad[i].code) && strstr(msg, bad[i].msg) == msg, "%s: rc %d %s %s",
                  bad[i].body, rc, code ? code : "-", msg);
    }
    /* more inputs than a line takes */
    char big[4096];
    size_t n = (size_t)snprintf(big, sizeof big, "{\"input\":[");
    for (int i = 0; i <= EMBEDDING_MAX_INPUTS; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"x\"", i ? "," : "");
    snprintf(big + n, sizeof big - n, "]}");
    struct input_embed *in;
    const char *code;
    char msg[256];
    CHECK(parse(big, &in, &code, msg, sizeof msg) == 1 && !strcmp(code, "invalid_value") && strstr(msg, "at most"));
}

TEST(embedding_text_round_trip)
{
    const float v[3] = {1.0f, -0.5f, 3.14159274f};
    size_t len;
    char *t = embedding_to_text(v, 3, &len);
    CHECK(t && len == 16 && !strncmp(t, "AACAPwAAAL/bD0lA", 16)); /* LE float32, base64 */
    float *back;
    int32_t n;
    CHECK(embedding_from_text(t, len, &back, &n) == 0 && n == 3 && !memcmp(back, v, sizeof v));
    free(back);
    free(t);
    CHECK(embedding_from_text("AACAPw", 6, &back, &n) == -1);      /* not base64 */
    CHECK(embedding_from_text("AACA", 4, &back, &n) == -1);        /* 3 bytes: not float32 values */
    struct engine_result r = {0};
    r.embedding = malloc(3 * sizeof(float));
    memcpy(r.embedding, v, sizeof v);
    r.n_embedding = 3;
    r.text = strdup("");
    CHECK(embedding_result_to_text(&r) == 0 && !r.embedding && r.text_len == 16 && !strcmp(r.text, "AACAPwAAAL/bD0lA"));
    engine_result_free(&r);
}

TEST(embedding_body_list)
{
    const float a[4] = {0.5f, 0.5f, 0.5f, 0.5f}, b[4] = {0.6f, 0.8f, 0.0f, 0.0f};
    size_t la, lb;
    char *ta = embedding_to_text(a, 4, &la), *tb = embedding_to_text(b, 4, &lb);
    const char *texts[2] = {ta, tb};
    size_t lens[2] = {la, lb};
    struct output_buf out = {0};
    struct err e;
    struct embedding_out o = {texts, lens, 2, 0, 0, "m", 9};
    CHECK(embedding_body(&out, &o, &e) == 0);
    output_buf_put(&out, "", 1);
    CHECK_MSG(!strcmp(out.p,
                      "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"index\":0,\"embedding\":[0.5,0.5,"
                      "0.5,0.5]},{\"object\":\"embedding\",\"index\":1,\"embedding\":[0.600000024,0.800000012,0,0]}"
                      "],\"model\":\"m\",\"usage\":{\"prompt_tokens\":9,\"total_tokens\":9}}"),
              "%s", out.p);
    output_buf_free(&out);
    /* dimensions 2: the first two values, unit length again; base64 */
    o.dimensions = 2;
    o.base64 = 1;
    CHECK(embedding_body(&out, &o, &e) == 0);
    output_buf_put(&out, "", 1);
    json_error_t je;
    json_t *j = json_loads(out.p, 0, &je);
    CHECK(j);
    const char *s0 = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding"));
    float *v;
    int32_t n;
    CHECK(s0 && embedding_from_text(s0, strlen(s0), &v, &n) == 0 && n == 2);
    CHECK(fabsf(v[0] - 0.70710678f) < 1e-6f && fabsf(v[1] - 0.70710678f) < 1e-6f);
    free(v);
    json_decref(j);
    output_buf_free(&out);
    o.dimensions = 5; /* more than stored */
    CHECK(embedding_body(&out, &o, &e) == -1 && strstr(e.msg, "dimensions 5"));
    output_buf_free(&out);
    free(ta);
    free(tb);
}

TEST(embedding_backlog_line)
{
    const char *path = "/tmp/ns_test_embedding.jsonl";
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/embeddings\",\"body\":{\"input\":[\"x\",\"y\",\"z\"],"
          "\"model\":\"m\"}}\n"
          "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/embeddings\",\"body\":{\"prompt\":\"x\"}}\n",
          f);
    fclose(f);
    struct input_opts o = input_default_opts();
    struct err e;
    input_reader *r;
    CHECK(input_open(path, &o, &r, &e) == 0);
    struct input_item it;
    CHECK(input_next(r, &it, &e) == 1);
    CHECK(!it.code && it.kind == INPUT_KIND_EMBEDDING && it.embed && it.embed->n == 3 && it.gen.n == 3);
    CHECK(it.model && !strcmp(it.model, "m"));
    input_item_free(&it);
    CHECK(input_next(r, &it, &e) == 1);
    CHECK(it.code && !strcmp(it.code, "unknown_field") && !strcmp(it.custom_id, "b"));
    input_item_free(&it);
    CHECK(input_next(r, &it, &e) == 0);
    input_close(r);
    unlink(path);
}

int main(void)
{
    RUN(embedding_parse_forms);
    RUN(embedding_parse_refusals);
    RUN(embedding_text_round_trip);
    RUN(embedding_body_list);
    RUN(embedding_backlog_line);
    return test_summary();
}
