/* test_genparam — the generation-parameter table: its own invariant, defaults, JSON and flag parsing,
 * range messages, store settings, the key encoding and the sampler mapping. */
#include <jansson.h>
#include <stdint.h>

#include "runtime/genparam.h"
#include "test.h"

static const char *code_of_last;

/* Applies one field given as JSON text; returns genparam_apply_json's result. */
static int apply(struct gen_params *g, const char *field, const char *json_text, struct err *e)
{
    json_error_t je;
    json_t *v = json_loads(json_text, JSON_DECODE_ANY, &je);
    if (!v) return -99;
    code_of_last = NULL;
    int rc = genparam_apply_json(g, field, v, &code_of_last, e);
    json_decref(v);
    return rc;
}

TEST(table_invariant)
{
    struct err e;
    CHECK_MSG(genparam_check_table(&e) == 0, "%s", e.msg);
}

TEST(defaults_pass_the_check)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    CHECK_EQ_INT(g.max_tokens, 256);
    CHECK(g.temperature == 1.0f && g.top_p == 1.0f && g.repetition_penalty == 1.0f);
    CHECK_EQ_INT(g.repeat_last_n, 64);
    CHECK_EQ_INT(g.n, 1);
    CHECK_EQ_INT(g.has_seed, 0);
    CHECK_EQ_INT(g.ignore_eos, 0);
    CHECK_MSG(genparam_check(&g, &e) == 0, "%s", e.msg);
}

TEST(check_names_the_parameter)
{
    struct err e;
    struct gen_params g = genparam_defaults();
    g.temperature = 3;
    CHECK(genparam_check(&g, &e) != 0);
    CHECK_STR(e.msg, "temperature must be in [0, 2], got 3");
    g = genparam_defaults();
    g.top_p = 0;
    CHECK(genparam_check(&g, &e) != 0);
    CHECK_STR(e.msg, "top_p must be in (0, 1], got 0");
    g = genparam_defaults();
    g.top_k = -1;
    CHECK(genparam_check(&g, &e) != 0);
    CHECK_STR(e.msg, "top_k must be >= 0, got -1");
    g = genparam_defaults();
    g.n = 129;
    CHECK(genparam_check(&g, &e) != 0);
    CHECK_STR(e.msg, "n must be in [1, 128], got 129");
}

TEST(json_fields_and_aliases)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    CHECK_EQ_INT(apply(&g, "max_completion_tokens", "17", &e), 1);
    CHECK_EQ_INT(g.max_tokens, 17);
    CHECK_EQ_INT(apply(&g, "repeat_penalty", "1.5", &e), 1);
    CHECK(g.repetition_penalty == 1.5f);
    CHECK_EQ_INT(apply(&g, "temperature", "null", &e), 1); /* null: not given */
    CHECK(g.temperature == 1.0f);
    CHECK_EQ_INT(apply(&g, "seed", "-1", &e), 1);
    CHECK(g.has_seed && g.seed == UINT64_MAX);
    CHECK_EQ_INT(apply(&g, "stop", "[\"a\", \"bc\"]", &e), 1);
    CHECK_EQ_INT(g.n_stop, 2);
    CHECK_STR(g.stop[1], "bc");
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"9\": 2, \"3\": -1}", &e), 1);
    CHECK_EQ_INT(g.n_logit_bias, 2);
    CHECK_EQ_INT(g.logit_bias[0].token, 3); /* sorted */
    CHECK_EQ_INT(apply(&g, "logit_bias", "{}", &e), 1); /* empty: no bias (UBSan: no qsort of NULL) */
    CHECK_EQ_INT(g.n_logit_bias, 0);
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"9\": 2, \"3\": -1}", &e), 1);
    CHECK_EQ_INT(apply(&g, "ignore_eos", "true", &e), 1);
    CHECK_EQ_INT(g.ignore_eos, 1);
    CHECK_EQ_INT(apply(&g, "messages", "[]", &e), 0); /* not a generation field */
    CHECK_EQ_INT(apply(&g, "repeat_last_n", "3", &e), 0); /* flag only */
    genparam_free(&g);
}

TEST(json_errors_keep_the_value)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    CHECK_EQ_INT(apply(&g, "top_p", "2", &e), -1);
    CHECK_STR(code_of_last, "invalid_value");
    CHECK_STR(e.msg, "'top_p' must be in (0, 1], got 2");
    CHECK(g.top_p == 1.0f);
    CHECK_EQ_INT(apply(&g, "top_p", "1e-300", &e), -1); /* in range as a double, 0 as a float */
    CHECK_STR(e.msg, "'top_p' must be in (0, 1], got 1e-300");
    CHECK_EQ_INT(apply(&g, "max_tokens", "\"many\"", &e), -1);
    CHECK_STR(code_of_last, "invalid_type");
    CHECK_STR(e.msg, "'max_tokens' must be an integer, got a string");
    CHECK_EQ_INT(apply(&g, "n", "1.5", &e), -1);
    CHECK_STR(e.msg, "'n' must be an integer, got 1.5");
    CHECK_EQ_INT(apply(&g, "stop", "[\"a\", \"b\", \"c\", \"d\", \"e\"]", &e), -1);
    CHECK_STR(e.msg, "'stop' holds 5 strings, at most 4");
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"1\": 1, \"01\": 2}", &e), -1);
    CHECK_STR(e.msg, "'logit_bias' names token 1 twice");
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"x\": 1}", &e), -1);
    CHECK_EQ_INT(apply(&g, "ignore_eos", "1", &e), -1);
    CHECK_STR(code_of_last, "invalid_type");
    CHECK_EQ_INT(g.n_stop, 0);
    CHECK_EQ_INT(g.n_logit_bias, 0);
}

TEST(flags)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    const struct genparam *p = genparam_find_flag("--temp");
    CHECK(p && !strcmp(p->name, "temperature"));
    CHECK_EQ_INT(genparam_set_flag(&g, p, "--temp", "0.5", &e), 0);
    CHECK(g.temperature == 0.5f);
    CHECK(genparam_set_flag(&g, p, "--temp", "warm", &e) != 0);
    CHECK_STR(e.msg, "--temp expects a number, got 'warm'");
    p = genparam_find_flag("--top-k");
    CHECK(genparam_set_flag(&g, p, "--top-k", "-3", &e) != 0);
    CHECK_STR(e.msg, "--top-k expects an integer in [0, 2147483647], got '-3'");
    p = genparam_find_flag("--seed");
    CHECK(genparam_set_flag(&g, p, "--seed", "-1", &e) != 0);
    CHECK_EQ_INT(genparam_set_flag(&g, p, "--seed", "18446744073709551615", &e), 0);
    CHECK(g.has_seed && g.seed == UINT64_MAX);
    p = genparam_find_flag("--stop");
    for (int i = 0; i < GENPARAM_MAX_STOP; i++) CHECK_EQ_INT(genparam_set_flag(&g, p, "--stop", "x", &e), 0);
    CHECK(genparam_set_flag(&g, p, "--stop", "x", &e) != 0);
    CHECK_EQ_INT(g.n_stop, GENPARAM_MAX_STOP);
    p = genparam_find_flag("--ignore-eos");
    CHECK(p && p->type == GENPARAM_BOOL);
    CHECK_EQ_INT(genparam_set_flag(&g, p, "--ignore-eos", NULL, &e), 0);
    CHECK_EQ_INT(g.ignore_eos, 1);
    CHECK(genparam_find_flag("--threads") == NULL);
    genparam_free(&g);
}

/* Structured output: the request fields, their shapes and errors, one constraint per request. */
TEST(constraint_fields)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    CHECK_EQ_INT(apply(&g, "response_format", "{\"type\": \"json_object\"}", &e), 1);
    CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_JSON_OBJECT);
    CHECK_EQ_INT(apply(&g, "guided_regex", "\"a+\"", &e), -1); /* a second constraint in one request */
    CHECK_STR(e.msg, "'response_format' and 'guided_regex' both constrain the output: give one of them");
    CHECK_STR(code_of_last, "invalid_value");
    genparam_free(&g);
    static const char *const ok[][3] = {
        {"response_format", "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":"
                            "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}",
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}"},
        {"guided_json", "{\"type\": \"string\"}", "{\"type\":\"string\"}"},
        {"guided_json", "\"{\\\"type\\\": \\\"number\\\"}\"", "{\"type\":\"number\"}"},
        {"guided_regex", "\"[0-9]{3}\"", "[0-9]{3}"},
        {"guided_choice", "[\"yes\", \"no\"]", "[\"yes\",\"no\"]"},
        {"guided_grammar", "\"root ::= \\\"a\\\"\"", "root ::= \"a\""},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        g = genparam_defaults();
        CHECK_MSG(apply(&g, ok[i][0], ok[i][1], &e) == 1, "%s: %s", ok[i][0], e.msg);
        CHECK_STR(g.constraint.text, ok[i][2]);
        genparam_free(&g);
    }
    g = genparam_defaults();
    CHECK_EQ_INT(apply(&g, "guided_regex", "null", &e), 1); /* not given */
    CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_NONE);
    CHECK_EQ_INT(apply(&g, "response_format", "{\"type\": \"text\"}", &e), 1);
    CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_NONE);
    genparam_free(&g);
}

TEST(constraint_errors)
{
    static const char *const bad[][4] = {
        {"response_format", "\"json\"", "invalid_type", "'response_format' must be an object, got a string"},
        {"response_format", "{\"type\": \"xml\"}", "invalid_value", "\"text\", \"json_object\" or \"json_schema\""},
        {"response_format", "{\"type\": \"json_object\", \"extra\": 1}", "invalid_value", "unsupported field 'extra'"},
        {"response_format", "{\"type\": \"json_schema\"}", "invalid_type", "'response_format.json_schema' must be"},
        {"response_format", "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}", "invalid_value",
         "needs a 'schema'"},
        {"response_format", "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"oneOf\": []}}}",
         "invalid_value", "unsupported JSON Schema keyword 'oneOf' at /"},
        {"guided_json", "{\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}", "invalid_value",
         "'not' at /properties/a"},
        {"guided_json", "\"{bad\"", "invalid_value", "not JSON"},
        {"guided_regex", "\"(a\"", "invalid_value", "'guided_regex': unclosed '('"},
        {"guided_regex", "5", "invalid_type", "'guided_regex' must be a string"},
        {"guided_choice", "[]", "invalid_type", "non-empty array"},
        {"guided_choice", "[\"a\", 2]", "invalid_value", "choice 1 is not a string"},
        {"guided_grammar", "\"start ::= \\\"a\\\"\"", "invalid_value", "no 'root' rule"},
    };
    struct err e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gen_params g = genparam_defaults();
        CHECK_MSG(apply(&g, bad[i][0], bad[i][1], &e) == -1, "%s %s accepted", bad[i][0], bad[i][1]);
        CHECK_MSG(code_of_last && !strcmp(code_of_last, bad[i][2]), "%s %s: code %s", bad[i][0], bad[i][1],
                  code_of_last);
        CHECK_MSG(strstr(e.msg, bad[i][3]), "%s %s: '%s' lacks '%s'", bad[i][0], bad[i][1], e.msg, bad[i][3]);
        CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_NONE);
        genparam_free(&g);
    }
}

TEST(constraint_flags)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    const struct genparam *p = genparam_find_flag("--guided-choice");
    CHECK(p && p->type == GENPARAM_CONSTRAINT);
    CHECK_EQ_INT(genparam_set_flag(&g, p, "--guided-choice", "yes", &e), 0);
    CHECK_EQ_INT(genparam_set_flag(&g, p, "--guided-choice", "no \"way\"", &e), 0);
    CHECK_STR(g.constraint.text, "[\"yes\",\"no \\\"way\\\"\"]");
    CHECK_EQ_INT(g.constraint_field, 0); /* a default, not a request's field */
    p = genparam_find_flag("--guided-regex");
    CHECK(genparam_set_flag(&g, p, "--guided-regex", "a+", &e) != 0);
    CHECK_MSG(strstr(e.msg, "another constraint was given already"), "%s", e.msg);
    genparam_free(&g);
    g = genparam_defaults();
    p = genparam_find_flag("--guided-json");
    CHECK(p && !strcmp(p->name, "response_format"));
    CHECK_MSG(genparam_set_flag(&g, p, "--guided-json", "{\"type\":\"boolean\"}", &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_JSON_SCHEMA);
    genparam_free(&g);
    g = genparam_defaults();
    p = genparam_find_flag("--response-format");
    CHECK(genparam_set_flag(&g, p, "--response-format", "{\"type\": \"json_object\"}", &e) == 0);
    CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_JSON_OBJECT);
    genparam_free(&g);
    g = genparam_defaults();
    CHECK(genparam_set_flag(&g, p, "--response-format", "{\"type\": \"json\"}", &e) != 0);
    CHECK_MSG(!strncmp(e.msg, "--response-format: ", 19), "%s", e.msg);
    CHECK(genparam_set_flag(&g, p, "--response-format", "{", &e) != 0);
    CHECK_MSG(strstr(e.msg, "expects JSON"), "%s", e.msg);
    p = genparam_find_flag("--guided-grammar");
    CHECK(genparam_set_flag(&g, p, "--guided-grammar", "root ::= [a-z]+", &e) == 0);
    CHECK_EQ_INT(g.constraint.kind, CONSTRAINT_GRAMMAR);
    genparam_free(&g);
}

TEST(settings_strings)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    char buf[256];
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        genparam_setting(p, &g, buf, sizeof buf);
        if (!strcmp(p->name, "seed")) CHECK_STR(buf, "none");
        if (!strcmp(p->name, "temperature")) CHECK_STR(buf, "1");
        if (!strcmp(p->name, "stop")) CHECK_STR(buf, "[]");
        if (!strcmp(p->name, "logit_bias")) CHECK_STR(buf, "");
    }
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"5\": 0.25, \"2\": -1}", &e), 1);
    for (int i = 0; i < genparam_count; i++)
        if (!strcmp(genparam_table[i].name, "logit_bias")) {
            genparam_setting(&genparam_table[i], &g, buf, sizeof buf);
            CHECK_STR(buf, "2:-1,5:0.25");
        }
    json_t *j = genparam_to_json(&g);
    CHECK(json_is_null(json_object_get(j, "seed")));
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "max_tokens")), 256);
    CHECK_EQ_INT(json_object_size(j), genparam_count);
    json_decref(j);
    genparam_free(&g);
}

struct buf {
    uint8_t b[4096];
    size_t n;
};

static void put(void *w, const void *bytes, size_t n)
{
    struct buf *B = w;
    if (B->n + n <= sizeof B->b) memcpy(B->b + B->n, bytes, n);
    B->n += n;
}

static int same_key(const struct gen_params *a, uint64_t sa, const struct gen_params *b, uint64_t sb)
{
    struct buf x = {{0}, 0}, y = {{0}, 0};
    genparam_key_encode(a, sa, put, &x);
    genparam_key_encode(b, sb, put, &y);
    return x.n == y.n && memcmp(x.b, y.b, x.n) == 0;
}

/* Every in-key row changes the key when it changes; greedy requests ignore sampling-only rows. */
TEST(key_encoding)
{
    struct err e;
    struct gen_params base = genparam_defaults();
    base.temperature = 0.7f;
    struct gen_params g;
    static const char *const change[][2] = {
        {"max_tokens", "9"},        {"temperature", "0.8"},        {"top_p", "0.9"},     {"top_k", "5"},
        {"min_p", "0.1"},           {"presence_penalty", "0.5"},   {"frequency_penalty", "0.5"},
        {"repetition_penalty", "1.1"}, {"stop", "\"x\""},          {"logit_bias", "{\"1\": 1}"},
        {"ignore_eos", "true"},
    };
    for (size_t i = 0; i < sizeof change / sizeof change[0]; i++) {
        CHECK(genparam_copy(&g, &base, &e) == 0);
        CHECK_EQ_INT(apply(&g, change[i][0], change[i][1], &e), 1);
        CHECK_MSG(!same_key(&base, 1, &g, 1), "changing %s leaves the key as it was", change[i][0]);
        genparam_free(&g);
    }
    CHECK(!same_key(&base, 1, &base, 2)); /* the seed used */
    CHECK(genparam_copy(&g, &base, &e) == 0);
    g.n = 7; /* n does not enter the key: each completion has its own index */
    CHECK(same_key(&base, 1, &g, 1));
    /* greedy: top_k, top_p, min_p and the seed fold */
    struct gen_params a = genparam_defaults(), b = genparam_defaults();
    a.temperature = b.temperature = 0;
    b.top_k = 40;
    b.top_p = 0.5f;
    b.min_p = 0.2f;
    CHECK(same_key(&a, 1, &b, 99));
    b.presence_penalty = 1;
    CHECK(!same_key(&a, 1, &b, 99));
    genparam_free(&g);
}

/* Constraint settings and record values; a long text is shown as its sha256. */
TEST(constraint_settings_and_record)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    char buf[768];
    CHECK_EQ_INT(apply(&g, "guided_choice", "[\"a\",\"b\"]", &e), 1);
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (p->type != GENPARAM_CONSTRAINT) continue;
        genparam_setting(p, &g, buf, sizeof buf);
        CHECK_STR(buf, strcmp(p->name, "guided_choice") ? "none" : "choice:[\"a\",\"b\"]");
    }
    json_t *j = genparam_to_json(&g);
    CHECK(json_is_null(json_object_get(j, "guided_regex")));
    CHECK_EQ_INT(json_array_size(json_object_get(j, "guided_choice")), 2);
    json_decref(j);
    genparam_free(&g);
    g = genparam_defaults();
    char schema[600];
    int n = snprintf(schema, sizeof schema, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 20; i++)
        n += snprintf(schema + n, sizeof schema - (size_t)n, "%s\"field%d\":{\"type\":\"string\"}", i ? "," : "", i);
    snprintf(schema + n, sizeof schema - (size_t)n, "}}");
    CHECK_EQ_INT(apply(&g, "guided_json", schema, &e), 1);
    genparam_setting(genparam_find_flag("--response-format"), &g, buf, sizeof buf);
    CHECK_MSG(!strncmp(buf, "json_schema:sha256:", 19) && strlen(buf) == 19 + 64, "%s", buf);
    j = genparam_to_json(&g);
    json_t *rf = json_object_get(j, "response_format");
    CHECK_STR(json_string_value(json_object_get(rf, "type")), "json_schema");
    CHECK(json_is_object(json_object_get(json_object_get(json_object_get(rf, "json_schema"), "schema"), "properties")));
    json_decref(j);
    genparam_free(&g);
}

/* The constraint enters the key canonically: same constraint (however written) folds, another does not, and
 * an unconstrained request's encoding is what it was before constraints existed (no constraint bytes). */
TEST(constraint_key)
{
    struct err e;
    struct gen_params none = genparam_defaults(), a = genparam_defaults(), b = genparam_defaults(),
                      c = genparam_defaults(), d = genparam_defaults();
    CHECK_EQ_INT(apply(&a, "guided_json", "{\"type\": \"integer\"}", &e), 1);
    CHECK_EQ_INT(apply(&b, "response_format",
                       "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"integer\"}}}",
                       &e),
                 1);
    CHECK_EQ_INT(apply(&c, "guided_json", "{\"type\": \"number\"}", &e), 1);
    CHECK_EQ_INT(apply(&d, "guided_regex", "\"[\\\"a\\\"]\"", &e), 1); /* the text ["a"], as a pattern */
    CHECK_EQ_INT(apply(&none, "guided_choice", "[\"a\"]", &e), 1);                 /* ... and as a choice */
    CHECK_STR(d.constraint.text, none.constraint.text);
    CHECK(!same_key(&d, 1, &none, 1));
    genparam_free(&none);
    none = genparam_defaults();
    CHECK(same_key(&a, 1, &b, 1));
    CHECK(!same_key(&a, 1, &c, 1));
    CHECK(!same_key(&a, 1, &none, 1));
    CHECK(!same_key(&a, 1, &d, 1));
    struct buf x = {{0}, 0};
    genparam_key_encode(&none, 1, put, &x);
    for (size_t i = 0; i + 4 <= x.n; i += 4) CHECK(x.b[i + 3] != 0x80 || x.b[i] > 5 || x.b[i + 1] || x.b[i + 2]);
    size_t plain = x.n;
    x.n = 0;
    genparam_key_encode(&a, 1, put, &x);
    CHECK_EQ_INT(x.n, plain + 8 + strlen("{\"type\":\"integer\"}"));
    genparam_free(&a);
    genparam_free(&b);
    genparam_free(&c);
    genparam_free(&d);
}

/* logprobs, top_logprobs, echo: JSON forms and ranges, the checks between fields per endpoint, the key (only
 * when set: other requests keep their keys) and the store setting ("none" at the default). */
TEST(logprobs_fields)
{
    struct err e;
    struct gen_params g = genparam_defaults();
    CHECK_EQ_INT(g.logprobs, -1);
    CHECK_EQ_INT(apply(&g, "logprobs", "true", &e), 1);
    CHECK_EQ_INT(g.logprobs, 0);
    CHECK_EQ_INT(apply(&g, "logprobs", "3", &e), 1);
    CHECK_EQ_INT(g.logprobs, 3);
    CHECK_EQ_INT(apply(&g, "logprobs", "false", &e), 1);
    CHECK_EQ_INT(g.logprobs, -1);
    CHECK_EQ_INT(apply(&g, "logprobs", "\"yes\"", &e), -1);
    CHECK_STR(e.msg, "'logprobs' must be a boolean or an integer, got a string");
    CHECK_EQ_INT(apply(&g, "logprobs", "21", &e), -1);
    CHECK_EQ_INT(apply(&g, "top_logprobs", "21", &e), -1);
    CHECK_EQ_INT(apply(&g, "echo", "1", &e), -1);
    CHECK_EQ_INT(g.logprobs, -1);
    const char *code;
    struct gen_params d = genparam_defaults(), x;
    CHECK(genparam_check_endpoint(&d, 1, &code, &e) == 0 && genparam_check_endpoint(&d, 0, &code, &e) == 0);
    x = d, x.echo = 1;
    CHECK(genparam_check_endpoint(&x, 1, &code, &e) == -1 && !strcmp(code, "unsupported_parameter") &&
          !strncmp(e.msg, "'echo'", 6));
    CHECK(genparam_check_endpoint(&x, 0, &code, &e) == 0);
    x.max_tokens = 0; /* scoring: echo on /v1/completions only */
    CHECK(genparam_check_endpoint(&x, 0, &code, &e) == 0);
    x.echo = 0;
    CHECK(genparam_check_endpoint(&x, 0, &code, &e) == -1 && !strncmp(e.msg, "'max_tokens'", 12));
    x = d, x.top_logprobs = 2;
    CHECK(genparam_check_endpoint(&x, 1, &code, &e) == -1 && !strncmp(e.msg, "'top_logprobs'", 14));
    x.logprobs = 0;
    CHECK(genparam_check_endpoint(&x, 1, &code, &e) == 0);
    CHECK(genparam_check_endpoint(&x, 0, &code, &e) == -1 && !strncmp(e.msg, "'top_logprobs'", 14));
    x = d, x.logprobs = 6;
    CHECK(genparam_check_endpoint(&x, 1, &code, &e) == 0);
    CHECK(genparam_check_endpoint(&x, 0, &code, &e) == -1 && !strncmp(e.msg, "'logprobs'", 10));
    /* the key: unchanged without them (no bytes at all), different with each */
    struct buf k0 = {{0}, 0}, k1 = {{0}, 0};
    genparam_key_encode(&d, 1, put, &k0);
    static const char *const rows[][2] = {
        {"logprobs", "0"}, {"logprobs", "true"}, {"top_logprobs", "1"}, {"echo", "true"}};
    for (int i = 0; i < 4; i++) {
        x = genparam_defaults();
        CHECK(apply(&x, rows[i][0], rows[i][1], &e) == 1);
        k1.n = 0;
        genparam_key_encode(&x, 1, put, &k1);
        CHECK_MSG(k1.n == k0.n + 8 && !memcmp(k0.b, k1.b, k0.n), "%s", rows[i][0]);
    }
    x = genparam_defaults(), x.logprobs = 1;
    CHECK(!same_key(&x, 1, &d, 1));
    struct gen_params y = genparam_defaults();
    y.top_logprobs = 1; /* another row with the same value: another key */
    CHECK(!same_key(&x, 1, &y, 1));
    char buf[64];
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (p->key != GENPARAM_KEY_IF_SET) continue;
        genparam_setting(p, &d, buf, sizeof buf);
        CHECK_STR(buf, "none");
    }
    genparam_setting(&genparam_table[genparam_count - 3], &x, buf, sizeof buf);
    CHECK_STR(buf, "1");
}

/* Fields that are not generation fields: accepted (they change nothing, or are at their neutral value),
 * unsupported (they would change the answer), or unknown. */
TEST(other_fields)
{
    static const struct {
        const char *field, *json;
        enum genparam_other want;
    } c[] = {
        {"metadata", "{\"a\":\"b\"}", GENPARAM_OTHER_ACCEPTED},
        {"user", "\"u1\"", GENPARAM_OTHER_ACCEPTED},
        {"store", "true", GENPARAM_OTHER_ACCEPTED},
        {"service_tier", "\"flex\"", GENPARAM_OTHER_ACCEPTED},
        {"parallel_tool_calls", "false", GENPARAM_OTHER_ACCEPTED},
        {"stream", "false", GENPARAM_OTHER_ACCEPTED},
        {"stream", "true", GENPARAM_OTHER_UNSUPPORTED},
        {"tools", "[]", GENPARAM_OTHER_ACCEPTED},
        {"tools", "null", GENPARAM_OTHER_ACCEPTED},
        {"tools", "[{\"type\":\"function\"}]", GENPARAM_OTHER_UNSUPPORTED},
        {"tool_choice", "\"none\"", GENPARAM_OTHER_ACCEPTED},
        {"tool_choice", "\"auto\"", GENPARAM_OTHER_UNSUPPORTED},
        {"functions", "[{}]", GENPARAM_OTHER_UNSUPPORTED},
        {"logprobs", "false", GENPARAM_OTHER_ACCEPTED},
        {"logprobs", "true", GENPARAM_OTHER_UNSUPPORTED},
        {"top_logprobs", "0", GENPARAM_OTHER_ACCEPTED},
        {"top_logprobs", "3", GENPARAM_OTHER_UNSUPPORTED},
        {"audio", "{\"voice\":\"x\"}", GENPARAM_OTHER_UNSUPPORTED},
        {"modalities", "[\"text\"]", GENPARAM_OTHER_ACCEPTED},
        {"modalities", "[\"text\",\"audio\"]", GENPARAM_OTHER_UNSUPPORTED},
        {"prediction", "{\"type\":\"content\"}", GENPARAM_OTHER_UNSUPPORTED},
        {"echo", "true", GENPARAM_OTHER_UNSUPPORTED},
        {"best_of", "1", GENPARAM_OTHER_ACCEPTED},
        {"best_of", "3", GENPARAM_OTHER_UNSUPPORTED},
        {"reasoning_effort", "\"low\"", GENPARAM_OTHER_UNSUPPORTED},
        {"frobnicate", "1", GENPARAM_OTHER_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        json_t *v = json_loads(c[i].json, JSON_DECODE_ANY, NULL);
        CHECK(v != NULL);
        CHECK_MSG(genparam_other_field(c[i].field, v) == c[i].want, "%s = %s", c[i].field, c[i].json);
        json_decref(v);
    }
    /* a generation field is not an "other" field: the table answers for it */
    struct gen_params g = genparam_defaults();
    json_t *one = json_integer(1);
    const char *code;
    struct err e;
    CHECK(genparam_apply_json(&g, "n", one, &code, &e) == 1);
    json_decref(one);
    genparam_free(&g);
}

TEST(to_sampler)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    CHECK_EQ_INT(apply(&g, "top_k", "12", &e), 1);
    CHECK_EQ_INT(apply(&g, "repeat_penalty", "1.25", &e), 1);
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"4\": 3}", &e), 1);
    g.repeat_last_n = 33;
    struct sampler_params sp;
    genparam_to_sampler(&g, 77, &sp);
    CHECK_EQ_INT(sp.top_k, 12);
    CHECK(sp.repeat_penalty == 1.25f);
    CHECK_EQ_INT(sp.repeat_last_n, 33);
    CHECK(sp.temperature == 1.0f && sp.top_p == 1.0f);
    CHECK(sp.seed == 77);
    CHECK(sp.n_logit_bias == 1 && sp.logit_bias == g.logit_bias);
    genparam_free(&g);
}

/* A value of row p off its default: 37% into its range (an open integer range: lo + 40). */
static void set_off_default(struct gen_params *g, const struct genparam *p)
{
    if (p->type == GENPARAM_INT) {
        int32_t v = p->hi >= INT32_MAX ? (int32_t)p->lo + 40 : (int32_t)(p->lo + 0.37 * (p->hi - p->lo));
        *(int32_t *)((char *)g + p->offset) = v == (int32_t)p->def ? v + 1 : v;
    } else if (p->type == GENPARAM_FLOAT) {
        *(float *)((char *)g + p->offset) = (float)(p->lo + 0.37 * (p->hi - p->lo));
    }
}

/* Every generation parameter that sets a sampler field has a row in the sampler's table of fields (sampler.h:
 * what a backend must express to draw with it), so a field added through genparam cannot reach a device
 * sampler that ignores it; and with every such row off its default (a drawn request with a bias) each field
 * is in use and sampler_uses reports every bit of theirs. */
TEST(sampler_fields_cover_the_table)
{
    struct gen_params g = genparam_defaults();
    struct err e;
    CHECK_EQ_INT(apply(&g, "logit_bias", "{\"4\": 3}", &e), 1);
    uint32_t want = 0;
    for (int i = 0; i < genparam_count; i++) {
        const struct genparam *p = &genparam_table[i];
        if (p->sampler < 0) continue;
        const struct sampler_field *f = NULL;
        for (int k = 0; k < sampler_n_fields; k++)
            if ((ptrdiff_t)sampler_fields[k].offset == p->sampler) f = &sampler_fields[k];
        CHECK_MSG(f, "genparam row %s sets a sampler field that sampler_fields has no row for", p->name);
        want |= f->use;
        set_off_default(&g, p);
    }
    struct sampler_params sp;
    genparam_to_sampler(&g, 9, &sp);
    for (int k = 0; k < sampler_n_fields; k++)
        CHECK_MSG(sampler_fields[k].in_use(&sp), "sampler field %s not in use", sampler_fields[k].name);
    CHECK(want != 0 && (sampler_uses(&sp) & want) == want);
    CHECK_EQ_INT(
        (int)sampler_uses(&(struct sampler_params){.temperature = 0, .top_p = 1, .repeat_penalty = 1}), 0);
    genparam_free(&g);
}

int main(void)
{
    RUN(table_invariant);
    RUN(defaults_pass_the_check);
    RUN(check_names_the_parameter);
    RUN(json_fields_and_aliases);
    RUN(json_errors_keep_the_value);
    RUN(flags);
    RUN(constraint_fields);
    RUN(constraint_errors);
    RUN(constraint_flags);
    RUN(settings_strings);
    RUN(key_encoding);
    RUN(constraint_settings_and_record);
    RUN(constraint_key);
    RUN(logprobs_fields);
    RUN(other_fields);
    RUN(to_sampler);
    RUN(sampler_fields_cover_the_table);
    return test_summary();
}
