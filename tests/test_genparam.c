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

int main(void)
{
    RUN(table_invariant);
    RUN(defaults_pass_the_check);
    RUN(check_names_the_parameter);
    RUN(json_fields_and_aliases);
    RUN(json_errors_keep_the_value);
    RUN(flags);
    RUN(settings_strings);
    RUN(key_encoding);
    RUN(to_sampler);
    return test_summary();
}
