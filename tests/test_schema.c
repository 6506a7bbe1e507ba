/* test_schema — JSON Schema and json_object to grammars: documents that must match and must not, random
 * documents drawn from each grammar (every one must parse as JSON and validate against the schema's
 * simple rules checked here: required keys, types of listed properties, integer bounds), and the errors
 * for unsupported keywords (each named, with its path). */
#include "constrain/grammar.h"
#include "constrain/pda.h"
#include "constrain/schema.h"

#include <jansson.h>

#include "test.h"

static struct grammar *compile_schema(const char *text, struct err *e)
{
    json_error_t je;
    json_t *s = text ? json_loads(text, JSON_DECODE_ANY, &je) : NULL;
    if (text && !s) {
        err_set(e, "bad test schema: %s", je.text);
        return NULL;
    }
    struct expr_rules r;
    struct grammar *g = NULL;
    int rc = expr_rules_init(&r, e);
    if (!rc) rc = s ? schema_compile(s, &r, e) : schema_any_object(&r, e);
    if (!rc) rc = expr_check(&r, e) || grammar_compile(&r, &g, e) || grammar_check(g, e);
    expr_rules_free(&r);
    json_decref(s);
    if (rc) {
        grammar_free(g);
        return NULL;
    }
    return g;
}

static int match(const struct grammar *g, const char *text)
{
    pda_arena *a;
    struct err e;
    if (pda_arena_init(&a, &e)) return -1;
    struct pda_config c[2];
    int cur = 0, rc = pda_start(g, a, &c[0]);
    for (size_t i = 0; !rc && text[i] && pda_alive(&c[cur]); i++, cur ^= 1)
        rc = pda_step(g, a, &c[cur], (uint8_t)text[i], &c[cur ^ 1]);
    int out = rc ? -1 : c[cur].accept;
    pda_arena_free(a);
    return out;
}

static uint64_t rnd(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The first byte of a shortest way from c to an accepting configuration (breadth first over distinct
 * configurations, at most 4096 of them); -1 if none is found. */
static int closing_byte(const struct grammar *g, pda_arena *a, const struct pda_config *c)
{
    enum { CAP = 4096, ENC = 512 };
    static uint8_t enc[CAP][ENC];
    static size_t len[CAP];
    static int first[CAP];
    int n = 0, head = 0;
    len[0] = pda_encode(c, enc[0], ENC);
    first[n++] = -1;
    struct err e;
    while (head < n) {
        uint64_t m = pda_mark(a);
        struct pda_config cur, next;
        if (len[head] > ENC || pda_decode(g, a, enc[head], len[head], &cur, &e)) return -1;
        for (int b = 0; b < 256 && n < CAP; b++) {
            uint64_t m2 = pda_mark(a);
            pda_step(g, a, &cur, (uint8_t)b, &next);
            int fb = first[head] < 0 ? b : first[head];
            if (next.accept) return fb;
            if (next.n) {
                size_t l = pda_encode(&next, enc[n], ENC);
                int seen = l > ENC;
                for (int k = 0; k < n && !seen; k++)
                    seen = len[k] == l && !memcmp(enc[k], enc[n], l);
                if (!seen) len[n] = l, first[n++] = fb;
            }
            pda_release(a, m2);
        }
        pda_release(a, m);
        head++;
    }
    return -1;
}

/* A random document of g (NUL-terminated into out): random allowed bytes, stopping when accepting with
 * probability 1/4; past 64 bytes, a byte on a shortest way to the end. 0 if none was finished. */
static int generate(const struct grammar *g, uint64_t seed, char *out, size_t cap)
{
    pda_arena *a;
    struct err e;
    if (pda_arena_init(&a, &e)) return 0;
    struct pda_config c[2];
    int cur = 0, ok = 0;
    size_t n = 0;
    pda_start(g, a, &c[0]);
    while (n + 1 < cap) {
        if (c[cur].accept && (pda_complete(&c[cur]) || rnd(&seed) % 4 == 0)) {
            ok = 1;
            break;
        }
        int allowed[256], n_allowed = 0, pick = -1;
        for (int b = 0; b < 256; b++) {
            uint64_t m = pda_mark(a);
            pda_step(g, a, &c[cur], (uint8_t)b, &c[cur ^ 1]);
            if (pda_alive(&c[cur ^ 1])) allowed[n_allowed++] = b;
            pda_release(a, m);
        }
        if (!n_allowed) break;
        if (n > 64) pick = closing_byte(g, a, &c[cur]);
        if (pick < 0) pick = allowed[rnd(&seed) % (uint64_t)n_allowed];
        out[n++] = (char)pick;
        pda_step(g, a, &c[cur], (uint8_t)pick, &c[cur ^ 1]);
        cur ^= 1;
    }
    out[n] = '\0';
    pda_arena_free(a);
    return ok;
}

struct case_ {
    const char *schema;
    const char *yes[6];
    const char *no[8];
};

static const struct case_ cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
     "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
     {"{\"name\":\"Bob\",\"age\":30}", "{ \"name\" : \"A\\\"b\" ,\n  \"age\": -1, \"ok\": true }",
      "{\"name\":\"\",\"age\":0,\"ok\":false}"},
     {"{\"name\":\"Bob\"}", "{\"age\":3,\"name\":\"x\"}", "{\"name\":\"x\",\"age\":3,\"z\":1}",
      "{\"name\":1,\"age\":3}", "{\"name\":\"x\",\"age\":03}", "{\"name\":\"x\",\"age\":3,}",
      "{\"name\":\"x\"\"age\":3}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{"
     "\"type\":\"integer\"}}}",
     {"{}", "{\"b\":1}", "{\"a\":1,\"c\":2}", "{\"a\":1,\"b\":2,\"c\":3}"},
     {"{,\"b\":1}", "{\"a\":1,}", "{\"a\":1\"b\":2}", "{\"c\":1,\"a\":2}"}},
    {"{\"type\":\"integer\",\"minimum\":17,\"maximum\":243}",
     {"17", "99", "100", "243", "20"},
     {"16", "244", "017", "-17", "1000", "9", "17.0"}},
    {"{\"type\":\"integer\",\"minimum\":-15,\"exclusiveMaximum\":-3}",
     {"-15", "-4", "-10"},
     {"-3", "-16", "0", "3", "-0"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":-1,\"maximum\":1.5}", {"0", "1"}, {"-1", "2", "-0", "1.5"}},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}",
     {"0", "0.5", "1", "1.000", "0.999"},
     {"1.5", "-0.1", "2", "1.01", "1e0"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", {"0.001", "5", "12345.5"}, {"0", "0.000", "-1", "-0.5"}},
    {"{\"type\":\"number\",\"minimum\":-2,\"exclusiveMaximum\":0}",
     {"-2", "-0.5", "-1.99", "-2.000"},
     {"0", "-2.5", "0.5", "-0"}},
    {"{\"type\":\"number\"}", {"0", "-1.5", "3e10", "2.5E-3"}, {"01", "1.", ".5", "+1", "1e"}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"\\n\\t\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\""},
     {"\"a\"", "\"abcd\"", "\"a\nb\"", "ab"}},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]+$\"}",
     {"\"ABC-1\"", "\"XYZ-123\""},
     {"\"AB-1\"", "\"ABC-\"", "\"xABC-1\""}},
    {"{\"type\":\"string\",\"pattern\":\"cat\"}", {"\"cat\"", "\"a cat!\""}, {"\"dog\"", "\"\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}",
     {"\"2024-02-28\"", "\"1999-12-31\""},
     {"\"2024-02-30\"", "\"2024-13-01\"", "\"24-01-01\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}",
     {"\"2024-05-01T12:30:00Z\"", "\"2024-05-01T23:59:59.5+02:00\""},
     {"\"2024-05-01 12:30:00Z\"", "\"2024-05-01T24:00:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}",
     {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\""}},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}",
     {"\"192.168.0.1\"", "\"0.0.0.0\""},
     {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""}},
    {"{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1,2]}]}",
     {"\"red\"", "1", "null", "{\"a\":[1,2]}"},
     {"\"blue\"", "2", "\"Red\""}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1]}", {"\"a\""}, {"1"}},
    {"{\"const\":\"fixed\"}", {"\"fixed\""}, {"\"other\""}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1", "true"}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}},"
     "\"required\":[\"k\"]}]}",
     {"5", "{\"k\":\"v\"}"},
     {"\"5\"", "{}", "{\"k\":1}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
     {"[1,2]", "[1, 2, 3]", "[ 1 ,2 ]"},
     {"[]", "[1]", "[1,2,3,4]", "[1,,2]", "[1,2,]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},"
     "\"required\":[\"x\"]},\"maxItems\":2}",
     {"[]", "[{\"x\":1}]", "[{\"x\":1},{\"x\":2.5}]"},
     {"[{}]", "[{\"x\":1},{\"x\":1},{\"x\":1}]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
     {"[]", "[\"a\"]", "[\"a\",1]"},
     {"[1]", "[\"a\",1,2]", "[\"a\",\"b\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},"
     "\"minItems\":2}",
     {"[\"a\",true]", "[\"a\",true,false]"},
     {"[\"a\"]", "[true,true]"}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{"
     "\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3,\"kids\":[{\"v\":4}]}]}"},
     {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{}", "{\"a\":1,\"b\":2}"},
     {"{\"a\":\"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"meta\":{}},\"required\":[\"meta\",\"extra\"]}",
     {"{\"meta\":[1,{\"a\":null}],\"extra\":\"x\"}"},
     {"{\"meta\":1}"}},
    {"true", {"1", "\"s\"", "{\"a\":[true,null]}", "[]"}, {"tru", "{", "[1,]"}},
    {NULL, {"{}", "{\"a\":{\"b\":[1,2,{\"c\":\"d\"}]},\"e\":-0.5e3}"}, {"[]", "1", "{\"a\"}", "{\"a\":1,}"}},
};

TEST(documents_match_and_not)
{
    struct err e;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct case_ *c = &cases[k];
        struct grammar *g = compile_schema(c->schema, &e);
        CHECK_MSG(g, "case %zu: %s", k, e.msg);
        for (int i = 0; i < 6 && c->yes[i]; i++)
            CHECK_MSG(match(g, c->yes[i]) == 1, "case %zu: %s should match %s", k,
                      c->schema ? c->schema : "json_object", c->yes[i]);
        for (int i = 0; i < 8 && c->no[i]; i++)
            CHECK_MSG(match(g, c->no[i]) == 0, "case %zu: %s should not match %s", k,
                      c->schema ? c->schema : "json_object", c->no[i]);
        grammar_free(g);
    }
}

/* Every random document parses as JSON; for object schemas, required keys are there. */
TEST(random_documents_are_json)
{
    struct err e;
    char doc[8192];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct grammar *g = compile_schema(cases[k].schema, &e);
        CHECK_MSG(g, "%s", e.msg);
        json_t *s = cases[k].schema ? json_loads(cases[k].schema, JSON_DECODE_ANY, NULL) : NULL;
        int finished = 0;
        for (uint64_t seed = 1; seed <= 20; seed++) {
            if (!generate(g, seed * 7919 + k, doc, sizeof doc)) continue;
            finished++;
            json_error_t je;
            json_t *d = json_loads(doc, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            CHECK_MSG(d, "case %zu: generated '%.2000s' is not JSON: %s", k, doc, je.text);
            const json_t *req = json_object_get(s, "required");
            size_t i;
            json_t *r;
            json_array_foreach(req, i, r)
                CHECK_MSG(json_object_get(d, json_string_value(r)), "case %zu: '%.2000s' lacks %s", k, doc,
                          json_string_value(r));
            json_decref(d);
        }
        CHECK_MSG(finished >= 10, "case %zu: only %d of 20 random walks finished", k, finished);
        json_decref(s);
        grammar_free(g);
    }
}

TEST(unsupported_is_an_error_naming_it)
{
    static const char *const bad[][2] = {
        {"{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf' at /"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"patternProperties\":{}}}}",
         "'patternProperties' at /properties/a"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems"},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "format 'hostname'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "does not resolve"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "unsupported $ref"},
        {"false", "allows no value"},
        {"{\"type\":\"number\",\"minimum\":0.5}", "number bounds must be integers"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no number"},
        {"{\"type\":\"strin\"}", "unknown type 'strin'"},
        {"{\"type\":\"string\",\"requried\":[\"a\"]}", "'requried'"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", "unclosed '('"},
        {"{\"type\":\"string\",\"maxLength\":100000}", "above"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "together with pattern"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"minLength\":1}]}", "allOf"},
        {"{\"type\":\"integer\",\"multipleOf\":5}", "multipleOf"},
    };
    struct err e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct grammar *g = compile_schema(bad[i][0], &e);
        CHECK_MSG(!g, "%s compiled", bad[i][0]);
        CHECK_MSG(strstr(e.msg, bad[i][1]), "%s: '%s' lacks '%s'", bad[i][0], e.msg, bad[i][1]);
    }
    /* annotations and x- extensions are fine */
    struct grammar *g = compile_schema(
        "{\"title\":\"T\",\"description\":\"d\",\"x-foo\":1,\"type\":\"string\",\"default\":\"a\"}", &e);
    CHECK_MSG(g, "%s", e.msg);
    grammar_free(g);
}

/* A typical extraction schema compiles into a modest automaton. */
TEST(typical_schema_size)
{
    struct err e;
    struct grammar *g =
        compile_schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"email\":{"
                       "\"type\":\"string\",\"format\":\"email\"},"
                       "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":"
                       "\"array\",\"items\":{\"type\":\"string\"},"
                       "\"maxItems\":5},\"sentiment\":{\"enum\":[\"positive\",\"neutral\",\"negative\"]},"
                       "\"address\":{\"type\":\"object\","
                       "\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\","
                       "\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\"]}},"
                       "\"required\":[\"name\",\"age\",\"sentiment\"],\"additionalProperties\":false}",
                       &e);
    CHECK_MSG(g, "%s", e.msg);
    fprintf(stderr, "# typical schema: %d rules, %lld states, %lld cells\n", g->n_rules,
            (long long)g->n_states, (long long)g->n_cells);
    CHECK(g->n_states < 20000);
    grammar_free(g);
}

int main(void)
{
    RUN(documents_match_and_not);
    RUN(random_documents_are_json);
    RUN(unsupported_is_an_error_naming_it);
    RUN(typical_schema_size);
    return test_summary();
}
