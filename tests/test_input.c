/* Tests for jobs/input: format detection, every class of bad line, defaults and overrides, bounded lines. */
#include <math.h>

#include "jobs/input.h"
#include "test.h"
#include "util/log.h"

static char tmp_dir[] = "/tmp/ns_test_input_XXXXXX";

static const char *write_tmp(const char *name, const char *content, size_t len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    return test_write_file(path, content, len) == 0 ? path : NULL;
}

/* Reads every item of a file; returns the count (items stored in out, caller frees). */
static int read_all(const char *path, struct input_opts *o, struct input_item *out, int cap, enum input_format *fmt)
{
    input_reader *r;
    struct err e;
    if (input_open(path, o, &r, &e) != 0) {
        fprintf(stderr, "open: %s\n", e.msg);
        return -1;
    }
    if (fmt) *fmt = input_get_format(r);
    int n = 0;
    struct input_item it;
    while (input_next(r, &it, &e) == 1) {
        if (n < cap) out[n++] = it;
        else input_item_free(&it);
    }
    input_close(r);
    return n;
}

static void free_all(struct input_item *it, int n)
{
    for (int i = 0; i < n; i++) input_item_free(&it[i]);
}

TEST(detect_openai)
{
    const char *s =
        "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\","
        "\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"max_tokens\":7,\"temperature\":0.5,\"seed\":42,\"stop\":[\"x\",\"yy\"]}}\n"
        "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"Once\","
        "\"max_completion_tokens\":3,\"logit_bias\":{\"7\":-100,\"3\":5}}}\n";
    const char *p = write_tmp("a.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    struct input_item it[4];
    enum input_format fmt;
    int n = read_all(p, &o, it, 4, &fmt);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_OPENAI);
    CHECK(it[0].code == NULL);
    CHECK_STR(it[0].custom_id, "a");
    CHECK_EQ_INT(it[0].kind, INPUT_KIND_CHAT);
    CHECK_EQ_INT(it[0].n_msgs, 2);
    CHECK_STR(it[0].msgs[0].role, "system");
    CHECK_STR(it[0].msgs[1].content, "hi");
    CHECK_STR(it[0].model, "m");
    CHECK_EQ_INT(it[0].gen.max_tokens, 7);
    CHECK(it[0].gen.temperature == 0.5f);
    CHECK(it[0].gen.has_seed && it[0].gen.seed == 42);
    CHECK_EQ_INT(it[0].gen.n_stop, 2);
    CHECK_STR(it[0].gen.stop[1], "yy");
    CHECK(it[1].code == NULL);
    CHECK_EQ_INT(it[1].kind, INPUT_KIND_COMPLETION);
    CHECK_STR(it[1].prompt, "Once");
    CHECK_EQ_INT(it[1].gen.max_tokens, 3);
    CHECK_EQ_INT(it[1].gen.n_logit_bias, 2);
    CHECK_EQ_INT(it[1].gen.logit_bias[0].token, 3); /* sorted */
    CHECK(it[1].gen.logit_bias[1].bias == -100.0f);
    CHECK(it[1].gen.temperature == 1.0f); /* default */
    free_all(it, n);
}

TEST(detect_jsonl_and_text)
{
    const char *s = "{\"id\": 5, \"prompt\": \"x\"}\n\n"
                    "{\"id\": \"q\", \"messages\": [{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                    "{\"type\":\"text\",\"text\":\"b\"}]}]}\n";
    const char *p = write_tmp("b.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    struct input_item it[4];
    enum input_format fmt;
    int n = read_all(p, &o, it, 4, &fmt);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_JSONL);
    CHECK_EQ_INT(n, 2);
    CHECK_STR(it[0].custom_id, "5");
    CHECK_EQ_INT(it[1].line, 3); /* the blank line counts as a line but is no request */
    CHECK_STR(it[1].msgs[0].content, "a\nb");
    free_all(it, n);

    const char *t = "Once upon a time\n\n  \nThe dog\r\nlast line without newline";
    p = write_tmp("c.txt", t, strlen(t));
    n = read_all(p, &o, it, 4, &fmt);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_TEXT);
    CHECK_EQ_INT(n, 3);
    CHECK_STR(it[0].custom_id, "1");
    CHECK_STR(it[1].prompt, "The dog"); /* \r stripped */
    CHECK_STR(it[1].custom_id, "4");
    CHECK_STR(it[2].prompt, "last line without newline");
    free_all(it, n);
}

/* One line per class of bad line; checks code and that the line number is right. */
TEST(bad_lines)
{
    const char *s =
        "{\"id\":\"ok1\",\"prompt\":\"fine\"}\n"                        /* 1 ok */
        "this is not json\n"                                           /* 2 invalid_json */
        "{\"id\":\"u\",\"prompt\":\"\xff\xfe\"}\n"                     /* 3 invalid_utf8 */
        "{\"prompt\":\"no id\"}\n"                                     /* 4 missing_id */
        "{\"id\":\"ok1\",\"prompt\":\"dup\"}\n"                        /* 5 duplicate_id */
        "{\"id\":\"t\",\"prompt\":\"x\",\"max_tokens\":\"ten\"}\n"     /* 6 invalid_type */
        "{\"id\":\"r\",\"prompt\":\"x\",\"temperature\":5}\n"          /* 7 invalid_value */
        "{\"id\":\"nan\",\"prompt\":\"x\",\"top_p\":NaN}\n"            /* 8 NaN */
        "{\"id\":\"inf\",\"prompt\":\"x\",\"top_p\":1e999}\n"          /* 9 inf */
        "{\"id\":\"np\"}\n"                                            /* 10 missing_prompt */
        "{\"id\":\"both\",\"prompt\":\"x\",\"messages\":[]}\n"         /* 11 invalid_value */
        "[1,2]\n"                                                      /* 12 not an object */
        "{\"id\":\"dk\",\"prompt\":\"x\",\"prompt\":\"y\"}\n"          /* 13 duplicate key: invalid_json */
        "{\"id\":\"role\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}\n" /* 14 unsupported */
        "{\"id\":\"n0\",\"prompt\":\"x\",\"n\":0}\n"                   /* 15 invalid_value */
        "{\"id\":\"mt\",\"prompt\":\"x\",\"max_tokens\":2.5}\n"        /* 16 invalid_type */
        "{\"id\":\"lb\",\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}\n"  /* 17 invalid_value */
        "{\"id\":\"st\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}\n" /* 18 invalid_value */
        "{\"id\":\"ok2\",\"prompt\":\"fine\",\"mystery\":1,\"mystery\":2}\n" /* 19 duplicate key again */
        "{\"id\":\"uf\",\"prompt\":\"fine\",\"other\":true}\n"                  /* 20 unknown_field */
        "{\"id\":\"uf2\",\"prompt\":\"fine\",\"mystery\":3}\n"                 /* 21 unknown, warned once */
        "{\"id\":\"tl\",\"prompt\":\"x\",\"tools\":[{\"type\":\"function\"}]}\n" /* 22 unsupported_parameter */
        /* 23 unsupported_parameter: echo is for completions only */
        "{\"id\":\"lp\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}\n"
        "{\"id\":\"au\",\"prompt\":\"x\",\"audio\":{\"voice\":\"a\"}}\n"     /* 24 unsupported_parameter */
        "{\"id\":\"pr\",\"prompt\":\"x\",\"prediction\":{\"type\":\"content\"}}\n" /* 25 unsupported_parameter */
        "{\"id\":\"md\",\"prompt\":\"x\",\"modalities\":[\"text\",\"audio\"]}\n" /* 26 unsupported_parameter */
        "{\"id\":\"sm\",\"prompt\":\"x\",\"stream\":true}\n"                   /* 27 unsupported_parameter */
        "{\"id\":\"ok3\",\"prompt\":\"x\",\"metadata\":{\"a\":\"b\"},\"user\":\"u\",\"store\":true,"
        "\"service_tier\":\"auto\",\"stream\":false,\"n\":1,\"logprobs\":false,\"tools\":null,"
        "\"tool_choice\":\"none\",\"parallel_tool_calls\":true,\"modalities\":[\"text\"]}\n"; /* 28 ok */
    const char *p = write_tmp("bad.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    o.format = INPUT_FORMAT_JSONL;
    struct input_item it[40];
    input_reader *r;
    struct err e;
    CHECK(input_open(p, &o, &r, &e) == 0);
    int n = 0;
    while (n < 40 && input_next(r, &it[n], &e) == 1) n++;
    CHECK_EQ_INT(input_n_unknown_fields(r), 2);
    input_close(r);
    CHECK_EQ_INT(n, 28);
    static const char *want[] = {NULL,            "invalid_json",  "invalid_utf8",  "missing_id",    "duplicate_id",
                                 "invalid_type",  "invalid_value", "invalid_value", "invalid_value", "missing_prompt",
                                 "invalid_value", "invalid_type",  "invalid_json",  "unsupported_request",
                                 "invalid_value", "invalid_type",  "invalid_value", "invalid_value", "invalid_json",
                                 "unknown_field", "unknown_field", "unsupported_parameter", "unsupported_parameter",
                                 "unsupported_parameter", "unsupported_parameter", "unsupported_parameter",
                                 "unsupported_parameter", NULL};
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(it[i].line, i + 1);
        if (want[i]) CHECK_MSG(it[i].code && !strcmp(it[i].code, want[i]), "line %d: code %s, want %s (%s)", i + 1,
                               it[i].code ? it[i].code : "(none)", want[i], it[i].message ? it[i].message : "");
        else CHECK_MSG(!it[i].code, "line %d: unexpected %s: %s", i + 1, it[i].code, it[i].message);
        if (it[i].code) CHECK(it[i].message && *it[i].message);
    }
    CHECK(strstr(it[4].message, "first on line 1") != NULL);
    CHECK(strstr(it[6].message, "temperature") != NULL);
    CHECK(strstr(it[7].message, "NaN") != NULL);
    CHECK_STR(it[5].custom_id, "t"); /* bad lines keep their id */
    /* a message about one field names it first, in quotes (the error line's param) */
    CHECK(strncmp(it[21].message, "'tools'", 7) == 0);
    CHECK(strncmp(it[22].message, "'echo'", 6) == 0);
    CHECK(strstr(it[19].message, "'other'") != NULL);
    free_all(it, n);
}

TEST(openai_mismatches)
{
    const char *s =
        "{\"custom_id\":\"a\",\"method\":\"GET\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}\n"
        "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/moderations\",\"body\":{\"input\":\"x\"}}\n"
        "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"prompt\":\"x\"}}\n"
        "{\"custom_id\":7,\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}\n"
        "{\"custom_id\":\"e\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":\"x\"}\n"
        "{\"custom_id\":\"f\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":[1,2,3]}}\n"
        "{\"custom_id\":\"g\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":[\"a\",\"b\"]}}\n";
    const char *p = write_tmp("oa.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    struct input_item it[8];
    enum input_format fmt;
    int n = read_all(p, &o, it, 8, &fmt);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_OPENAI);
    CHECK_EQ_INT(n, 7);
    CHECK_STR(it[0].code, "unsupported_request");
    CHECK_STR(it[1].code, "unsupported_request");
    CHECK_STR(it[2].code, "invalid_value");
    CHECK_STR(it[3].code, "invalid_type");
    CHECK_STR(it[4].code, "invalid_type");
    CHECK(it[5].code == NULL);
    CHECK_EQ_INT(it[5].n_prompt_ids, 3);
    CHECK_EQ_INT(it[5].prompt_ids[2], 3);
    CHECK_STR(it[6].code, "unsupported_request");
    free_all(it, n);
}

TEST(long_lines_are_bounded)
{
    size_t big = 5u << 20;
    char *s = malloc(big + 200);
    size_t off = 0;
    off += (size_t)sprintf(s, "{\"id\":\"a\",\"prompt\":\"short\"}\n{\"id\":\"big\",\"prompt\":\"");
    memset(s + off, 'x', big);
    off += big;
    off += (size_t)sprintf(s + off, "\"}\n{\"id\":\"c\",\"prompt\":\"after\"}\n");
    const char *p = write_tmp("long.jsonl", s, off);
    free(s);
    struct input_opts o = input_default_opts();
    o.max_line_bytes = 4096;
    struct input_item it[4];
    enum input_format fmt;
    int n = read_all(p, &o, it, 4, &fmt);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_JSONL);
    CHECK_EQ_INT(n, 3);
    CHECK(it[0].code == NULL);
    CHECK_STR(it[1].code, "line_too_long");
    CHECK_EQ_INT(it[1].line, 2);
    CHECK(it[2].code == NULL);
    CHECK_STR(it[2].prompt, "after");
    CHECK_EQ_INT(it[2].line, 3);
    free_all(it, n);
}

TEST(defaults_and_overrides)
{
    struct gen_params d = genparam_defaults();
    d.max_tokens = 11;
    d.temperature = 0;
    char *stop0 = strdup("END");
    d.stop = &stop0;
    d.n_stop = 1;
    const char *s = "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"x\",\"stop\":null,\"max_tokens\":null,"
                    "\"temperature\":0.7,\"top_k\":40,\"top_p\":0.9,\"min_p\":0.05,\"presence_penalty\":-1,"
                    "\"frequency_penalty\":1.5,\"repetition_penalty\":1.1,\"n\":3,\"seed\":-1}\n"
                    "{\"id\":\"c\",\"prompt\":\"x\",\"stop\":\"Z\"}\n";
    const char *p = write_tmp("d.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    o.defaults = d;
    struct input_item it[4];
    int n = read_all(p, &o, it, 4, NULL);
    free(stop0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(it[0].gen.max_tokens, 11);
    CHECK(it[0].gen.temperature == 0.0f);
    CHECK_EQ_INT(it[0].gen.n_stop, 1);
    CHECK_STR(it[0].gen.stop[0], "END");
    CHECK_EQ_INT(it[1].gen.max_tokens, 11); /* null keeps the default */
    CHECK_EQ_INT(it[1].gen.n_stop, 1);
    CHECK(fabsf(it[1].gen.temperature - 0.7f) < 1e-6f);
    CHECK_EQ_INT(it[1].gen.top_k, 40);
    CHECK_EQ_INT(it[1].gen.n, 3);
    CHECK(it[1].gen.seed == UINT64_MAX);
    struct err e;
    CHECK(genparam_check(&it[1].gen, &e) == 0);
    CHECK_EQ_INT(it[2].gen.n_stop, 1);
    CHECK_STR(it[2].gen.stop[0], "Z");
    free_all(it, n);

    struct gen_params g = genparam_defaults();
    g.top_p = 0;
    CHECK(genparam_check(&g, &e) != 0);
    CHECK(strstr(e.msg, "top_p") != NULL);
}

TEST(sha_and_counts)
{
    const char *s = "a\n\nb\n";
    const char *p = write_tmp("e.txt", s, strlen(s));
    struct input_opts o = input_default_opts();
    input_reader *r;
    struct err e;
    CHECK(input_open(p, &o, &r, &e) == 0);
    struct input_item it;
    int n = 0;
    while (input_next(r, &it, &e) == 1) {
        n++;
        input_item_free(&it);
    }
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(input_n_lines(r), 3);
    CHECK_EQ_INT(input_n_blank(r), 1);
    CHECK_EQ_INT(input_n_bytes(r), 5);
    uint8_t d[32];
    input_file_sha256(r, d);
    input_close(r);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sha256sum %s", p);
    FILE *f = popen(cmd, "r");
    char hex[65] = {0};
    CHECK(f && fscanf(f, "%64s", hex) == 1);
    pclose(f);
    char mine[65];
    for (int i = 0; i < 32; i++) sprintf(mine + 2 * i, "%02x", d[i]);
    CHECK_STR(mine, hex);
}

/* A truncated line whose text merely contains "nan"/"inf" is plain invalid JSON, not a NaN complaint; real
 * NaN / Infinity / -Infinity tokens are named as such. */
TEST(nan_message_only_for_nan_tokens)
{
    const char *s =
        "{\"id\":\"a\",\"prompt\":\"banana\"\n"               /* 1 truncated: invalid_json */
        "{\"id\":\"b\",\"prompt\":\"tell me info\" \"x\":1}\n" /* 2 missing comma: invalid_json */
        "{\"id\":\"c\",\"prompt\":\"x\",\"top_p\":-Infinity}\n" /* 3 -Infinity */
        "{\"id\":\"d\",\"prompt\":\"x\",\"top_p\":Infinity}\n"  /* 4 Infinity */
        "{\"id\":\"e\",\"prompt\":\"x\",\"top_p\":nan}\n";      /* 5 nan */
    const char *p = write_tmp("nan.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    o.format = INPUT_FORMAT_JSONL;
    struct input_item it[8];
    int n = read_all(p, &o, it, 8, NULL);
    CHECK_EQ_INT(n, 5);
    if (n != 5) return;
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(it[i].code && !strcmp(it[i].code, "invalid_json"), "line %d: %s: %s", i + 1,
                  it[i].code ? it[i].code : "(none)", it[i].message ? it[i].message : "");
        CHECK(it[i].message && !strstr(it[i].message, "NaN"));
    }
    for (int i = 2; i < 5; i++) {
        CHECK_MSG(it[i].code && !strcmp(it[i].code, "invalid_value"), "line %d: %s: %s", i + 1,
                  it[i].code ? it[i].code : "(none)", it[i].message ? it[i].message : "");
        CHECK(it[i].message && strstr(it[i].message, "NaN and Infinity"));
    }
    free_all(it, n);
}

/* A UTF-8 byte order mark before the first line is dropped: a one-line BOM'd JSONL file is detected as
 * JSONL and its line parses; a BOM'd text file's first prompt does not start with U+FEFF. */
TEST(utf8_bom_is_dropped)
{
    const char *s = "\xef\xbb\xbf{\"id\":\"a\",\"prompt\":\"hi\"}\n";
    const char *p = write_tmp("bom.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    struct input_item it[4];
    enum input_format fmt;
    int n = read_all(p, &o, it, 4, &fmt);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_JSONL);
    if (n == 1) {
        CHECK_MSG(!it[0].code, "%s: %s", it[0].code, it[0].message);
        CHECK_STR(it[0].custom_id, "a");
    }
    free_all(it, n);
    s = "\xef\xbb\xbfhello\nworld\n";
    p = write_tmp("bom.txt", s, strlen(s));
    o.format = INPUT_FORMAT_TEXT;
    n = read_all(p, &o, it, 4, NULL);
    CHECK_EQ_INT(n, 2);
    if (n == 2) CHECK_STR(it[0].prompt, "hello");
    free_all(it, n);
}

/* A server body: the same fields and messages as a backlog line; unknown fields and the wrong kind for the
 * endpoint are bad requests; the caller's own fields are skipped and left in root. */
TEST(parse_body_like_a_line)
{
    struct gen_params d = genparam_defaults();
    d.max_tokens = 9;
    struct input_item it;
    json_t *root;
    struct err e;
    static const char *const skip[] = {"stream", NULL};
    const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                    "\"temperature\":0.5,\"stream\":true}";
    CHECK(input_parse_body(b, strlen(b), &d, INPUT_KIND_CHAT, skip, &it, &root, &e) == 0);
    CHECK(it.code == NULL);
    CHECK_EQ_INT(it.kind, INPUT_KIND_CHAT);
    CHECK_STR(it.msgs[0].content, "hi");
    CHECK_STR(it.model, "m");
    CHECK_EQ_INT(it.gen.max_tokens, 9);
    CHECK(it.gen.temperature == 0.5f);
    CHECK(json_is_true(json_object_get(root, "stream")));
    json_decref(root);
    input_item_free(&it);
    struct {
        const char *body;
        enum input_kind want;
        const char *code, *msg;
    } bad[] = {
        {"{\"prompt\":\"x\",\"frob\":[]}", INPUT_KIND_COMPLETION, "unknown_field", "unknown field 'frob'"},
        {"{\"prompt\":\"x\",\"tools\":[{}]}", INPUT_KIND_COMPLETION, "unsupported_parameter",
         "'tools' is not supported"},
        {"{\"prompt\":\"x\"}", INPUT_KIND_CHAT, "invalid_value", "needs body.messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", INPUT_KIND_COMPLETION, "invalid_value",
         "needs body.prompt"},
        {"{\"prompt\":\"x\",", INPUT_KIND_COMPLETION, "invalid_json", "not JSON"},
        {"[1]", INPUT_KIND_COMPLETION, "invalid_type", "the body must be a JSON object, got an array"},
        {"{\"prompt\":\"\xff\"}", INPUT_KIND_COMPLETION, "invalid_utf8", "invalid UTF-8 at byte 11"},
        {"{\"prompt\":\"x\",\"top_p\":2}", INPUT_KIND_COMPLETION, "invalid_value", "'top_p' must be in (0, 1], got 2"},
        {"{\"prompt\":\"x\",\"temperature\":NaN}", INPUT_KIND_COMPLETION, "invalid_value", "NaN and Infinity"},
        {"{\"prompt\":\"x\",\"prompt\":\"y\"}", INPUT_KIND_COMPLETION, "invalid_json", "duplicate"},
        {"{\"max_tokens\":3}", INPUT_KIND_COMPLETION, "missing_prompt", "no 'prompt' or 'messages'"},
        {"{\"prompt\":\"a\\u0000b\"}", INPUT_KIND_COMPLETION, "invalid_value", "'prompt' holds a NUL character"},
        {"{\"prompt\":\"x\",\"seed\":18446744073709551616}", INPUT_KIND_COMPLETION, "invalid_value", "out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(input_parse_body(bad[i].body, strlen(bad[i].body), &d, bad[i].want, skip, &it, &root, &e) == 0);
        CHECK_MSG(it.code && !strcmp(it.code, bad[i].code), "body %zu: code %s", i, it.code ? it.code : "(none)");
        CHECK_MSG(strstr(it.message, bad[i].msg), "body %zu: %s", i, it.message);
        json_decref(root);
        input_item_free(&it);
    }
    genparam_free(&d);
}

/* A first line over --max-line-bytes still counts as JSON when it starts with '{': the next lines are
 * requests, not plain-text prompts holding raw JSON. */
TEST(long_first_line_keeps_json)
{
    size_t big = 64u << 10;
    char *s = malloc(big + 200);
    size_t off = (size_t)sprintf(s, "{\"id\":\"big\",\"prompt\":\"");
    memset(s + off, 'x', big);
    off += big;
    off += (size_t)sprintf(s + off, "\"}\n{\"id\":\"b\",\"prompt\":\"two\"}\n");
    const char *p = write_tmp("longfirst.jsonl", s, off);
    free(s);
    struct input_opts o = input_default_opts();
    o.max_line_bytes = 4096;
    struct input_item it[4];
    enum input_format fmt;
    int n = read_all(p, &o, it, 4, &fmt);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_JSONL);
    CHECK_STR(it[0].code, "line_too_long");
    CHECK_MSG(!it[1].code, "%s: %s", it[1].code, it[1].message);
    CHECK_STR(it[1].custom_id, "b");
    CHECK_STR(it[1].prompt, "two");
    free_all(it, n);
}

/* Binary files are refused with a message, in every format; a text file with a few Latin-1 bytes reads,
 * its bad line being a bad line. */
TEST(binary_files_are_refused)
{
    unsigned char bin[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof bin; i++) {
        x = x * 1664525u + 1013904223u;
        bin[i] = (unsigned char)(x >> 24);
        if (bin[i] == 0) bin[i] = 1; /* no NUL: only the invalid UTF-8 gives it away */
    }
    const char *p = write_tmp("random.bin", (const char *)bin, sizeof bin);
    enum input_format fmts[] = {INPUT_FORMAT_AUTO, INPUT_FORMAT_TEXT, INPUT_FORMAT_JSONL};
    for (int k = 0; k < 3; k++) {
        struct input_opts o = input_default_opts();
        o.format = fmts[k];
        input_reader *r = NULL;
        struct err e = {{0}};
        struct input_item it;
        int rc = input_open(p, &o, &r, &e);
        if (rc == 0) {
            rc = input_next(r, &it, &e) < 0 ? -1 : 0;
            if (rc == 0) input_item_free(&it);
            input_close(r);
        }
        CHECK_MSG(rc != 0, "format %d: a random binary file was read", k);
        CHECK_MSG(strstr(e.msg, "not a text backlog") && strstr(e.msg, "random.bin"), "%s", e.msg);
    }
    const char nul[] = "hello\nwor\0ld\n";
    p = write_tmp("nul.txt", nul, sizeof nul - 1);
    struct input_opts o = input_default_opts();
    input_reader *r = NULL;
    struct err e = {{0}};
    CHECK(input_open(p, &o, &r, &e) != 0);
    CHECK_MSG(strstr(e.msg, "NUL byte (at byte 9)"), "%s", e.msg);
    const char u16[] = "\xff\xfeh\0i\0\n\0";
    p = write_tmp("u16.txt", u16, sizeof u16 - 1);
    CHECK(input_open(p, &o, &r, &e) != 0);
    CHECK_MSG(strstr(e.msg, "UTF-16"), "%s", e.msg);
    const char latin1[] = "caf\xe9 au lait\nsecond line\nthird line, plain\n";
    p = write_tmp("latin1.txt", latin1, sizeof latin1 - 1);
    struct input_item it[4];
    int n = read_all(p, &o, it, 4, NULL);
    CHECK_EQ_INT(n, 3);
    CHECK_STR(it[0].code, "invalid_utf8");
    CHECK(!it[1].code && !it[2].code);
    free_all(it, n);
}

/* A line that is JSON but for an out-of-range number (1e400, a seed of 2^64), a NaN / Infinity token or a
 * \\u0000 escape is a bad line that keeps its id (and the id counts for duplicates); an id that is itself the
 * bad token or holds a NUL is no id. In both JSON formats. */
TEST(bad_numbers_keep_their_id)
{
    const char *s =
        "{\"custom_id\":\"s64\",\"body\":{\"prompt\":\"x\",\"seed\":18446744073709551616}}\n"   /* 1 */
        "{\"custom_id\":\"big\",\"body\":{\"prompt\":\"x\",\"top_p\":1e400,\"x\":[-1e999]}}\n" /* 2 */
        "{\"custom_id\":\"nul\",\"body\":{\"prompt\":\"a\\u0000b\"}}\n"                           /* 3 */
        "{\"custom_id\":\"nan\",\"body\":{\"prompt\":\"x\",\"temperature\":-Infinity}}\n"        /* 4 */
        "{\"custom_id\":\"i\\u0000d\",\"body\":{\"prompt\":\"x\"}}\n"                              /* 5 */
        "{\"custom_id\":\"big\",\"body\":{\"prompt\":\"again\"}}\n"                                /* 6 dup */
        "{\"custom_id\":\"role\",\"body\":{\"messages\":[{\"role\":\"user\\u0000x\",\"content\":\"x\"}]}}\n"
        "{\"custom_id\":\"p\",\"body\":{\"prompt\":\"x\",\"top_p\":1e-300}}\n"                  /* 8 */
        "{\"custom_id\":1e400,\"body\":{\"prompt\":\"x\"}}\n";                                    /* 9 */
    const char *p = write_tmp("numbers.jsonl", s, strlen(s));
    struct input_opts o = input_default_opts();
    struct input_item it[9];
    enum input_format fmt;
    int n = read_all(p, &o, it, 9, &fmt);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_OPENAI);
    CHECK_EQ_INT(n, 9);
    if (n != 9) return;
    const char *ids[] = {"s64", "big", "nul", "nan", NULL, "big", "role", "p", NULL};
    const char *codes[] = {"invalid_value", "invalid_value", "invalid_value", "invalid_value", "invalid_value",
                           "duplicate_id",  "invalid_value", "invalid_value", "invalid_value"};
    for (int i = 0; i < n; i++) {
        CHECK_MSG(it[i].code && !strcmp(it[i].code, codes[i]), "line %d: %s: %s", i + 1, it[i].code ? it[i].code : "ok",
                  it[i].message ? it[i].message : "");
        if (ids[i])
            CHECK_MSG(it[i].custom_id && !strcmp(it[i].custom_id, ids[i]), "line %d: id %s", i + 1,
                      it[i].custom_id ? it[i].custom_id : "(none)");
        else
            CHECK_MSG(!it[i].custom_id, "line %d: id %s", i + 1, it[i].custom_id);
    }
    CHECK_MSG(strstr(it[0].message, "out of range"), "%s", it[0].message);
    CHECK_MSG(strstr(it[2].message, "body.prompt") && strstr(it[2].message, "NUL"), "%s", it[2].message);
    CHECK(strstr(it[3].message, "NaN and Infinity"));
    CHECK_MSG(strstr(it[5].message, "first on line 2"), "%s", it[5].message);
    CHECK_MSG(strstr(it[6].message, "role"), "%s", it[6].message);
    CHECK_MSG(strstr(it[7].message, "top_p"), "%s", it[7].message);
    free_all(it, n);

    const char *j = "{\"id\":7,\"prompt\":\"x\",\"seed\":-18446744073709551616}\n"
                    "{\"prompt\":\"\\u0000\",\"id\":\"z\"}\n";
    p = write_tmp("numbers2.jsonl", j, strlen(j));
    n = read_all(p, &o, it, 9, &fmt);
    CHECK_EQ_INT(fmt, INPUT_FORMAT_JSONL);
    CHECK_EQ_INT(n, 2);
    if (n != 2) return;
    CHECK_MSG(it[0].code && it[0].custom_id && !strcmp(it[0].custom_id, "7"), "%s", it[0].message);
    CHECK_MSG(it[1].code && it[1].custom_id && !strcmp(it[1].custom_id, "z"), "%s", it[1].message);
    free_all(it, n);
}

int main(void)
{
    log_set_level(LOG_QUIET);
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(detect_openai);
    RUN(detect_jsonl_and_text);
    RUN(bad_lines);
    RUN(openai_mismatches);
    RUN(long_lines_are_bounded);
    RUN(defaults_and_overrides);
    RUN(sha_and_counts);
    RUN(nan_message_only_for_nan_tokens);
    RUN(utf8_bom_is_dropped);
    RUN(parse_body_like_a_line);
    RUN(long_first_line_keeps_json);
    RUN(binary_files_are_refused);
    RUN(bad_numbers_keep_their_id);
    if (test_rm_rf(tmp_dir) != 0) return 1;
    return test_summary();
}
