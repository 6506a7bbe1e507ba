/* test_grammar — the byte-level constraint compilers: regex and GBNF text -> expressions -> grammar (one DFA
 * per rule) -> pushdown matching (pda). Each case lists strings that must match and strings that must not;
 * every prefix of a matching string must stay alive, and the grammar and every configuration on the way
 * pass their debug checks. Errors: unsupported constructs and bad grammars are refused with a message
 * naming them. */
#include "constrain/gbnf.h"
#include "constrain/grammar.h"
#include "constrain/pda.h"
#include "constrain/regex.h"

#include "test.h"

/* Compiles a regex (kind 'r'), a JSON-string regex ('j') or a grammar ('g'). */
static struct grammar *compile(char kind, const char *src, struct err *e)
{
    struct expr_rules r;
    struct grammar *g = NULL;
    if (expr_rules_init(&r, e)) return NULL;
    int rc;
    if (kind == 'g') {
        rc = gbnf_parse(src, strlen(src), &r, e);
    } else {
        struct expr *x;
        rc = expr_rule_id(&r, "root", 4) != 0;
        if (!rc) rc = regex_parse(&r, src, strlen(src), kind == 'j' ? REGEX_JSON_STRING : 0, &x, e);
        if (!rc) r.bodies[0] = x;
    }
    if (!rc) rc = expr_check(&r, e);
    if (!rc) rc = grammar_compile(&r, &g, e);
    if (!rc) rc = grammar_check(g, e);
    expr_rules_free(&r);
    if (rc) {
        grammar_free(g);
        return NULL;
    }
    return g;
}

/* 1 if text matches completely, 0 if not, -1 if a check failed (message in e). Every configuration on the
 * way is checked; a prefix of a match is never dead. */
static int match(const struct grammar *g, const char *text, size_t n, struct err *e)
{
    pda_arena *a;
    if (pda_arena_init(&a, e)) return -1;
    struct pda_config c[2];
    int rc = pda_start(g, a, &c[0]) ? -1 : pda_check(g, &c[0], e);
    int cur = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (pda_step(g, a, &c[cur], (uint8_t)text[i], &c[1 - cur])) rc = err_set(e, "out of memory");
        cur = 1 - cur;
        if (!rc) rc = pda_check(g, &c[cur], e);
        if (!rc && !pda_alive(&c[cur])) break;
        /* the encoding round-trips */
        uint8_t buf[4096];
        size_t len = pda_encode(&c[cur], buf, sizeof buf);
        struct pda_config d;
        if (!rc && len <= sizeof buf && pda_decode(g, a, buf, len, &d, e)) rc = -1;
        if (!rc && len <= sizeof buf) {
            uint8_t buf2[4096];
            if (pda_encode(&d, buf2, sizeof buf2) != len || memcmp(buf, buf2, len))
                rc = err_set(e, "encoding differs");
        }
    }
    int out = rc ? -1 : c[cur].accept;
    pda_arena_free(a);
    return out;
}

struct case_ {
    char kind;
    const char *src;
    const char *yes[8];
    const char *no[8];
};

static const struct case_ cases[] = {
    {'r', "abc", {"abc"}, {"", "ab", "abcd", "abd"}},
    {'r', "^a|b$", {"a", "b"}, {"", "ab"}},
    {'r', "a*b+c?", {"b", "aab", "abbbc", "bc"}, {"", "a", "c", "abcc"}},
    {'r', "(ab|cd){2,3}", {"abab", "abcdab", "cdcdcd"}, {"ab", "abababab", "abc"}},
    {'r', "[a-c]{2}[^a-c]", {"abx", "cc\xc3\xa9", "aa\xe2\x82\xac"}, {"abc", "ab", "ab\n\n"}},
    {'r', "\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234", "555-12345"}},
    {'r', "\\w+@\\w+\\.com", {"joe@example.com"}, {"@x.com", "joe@example.org"}},
    {'r', "(?:x|y)?z{0,2}", {"", "x", "zz", "yz"}, {"xy", "zzz"}},
    {'r', ".", {"a", "\xc3\xa9", "\xf0\x9f\x98\x80"}, {"\n", "\xc3", "\xed\xa0\x80", "ab"}},
    {'r', "\\u00e9|\\x41|\\.", {"\xc3\xa9", "A", "."}, {"a", "\\"}},
    {'r', "a{,3}", {"a{,3}"}, {"a"}}, /* '{' not followed by a count: an error, see below (never reached) */
    {'j', "^[a-z]+$", {"abc"}, {"", "ab1", "\\\""}},
    {'j', "b", {"b", "abc", "xxbxx"}, {"", "ac"}},
    {'j', "^a\"b\\\\c\n$", {"a\\\"b\\\\c\\n"}, {"a\"b\\c\n", "a\\\"b\\\\c"}},
    {'g', "root ::= \"yes\" | \"no\"", {"yes", "no"}, {"", "y", "yesno"}},
    {'g',
     "root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"(\" root \")\"",
     {"1", "1,22", "(1,(2)),3"},
     {"", ",", "1,", "(1", "()"}},
    {'g', "root ::= list\nlist ::= \"a\" list | \"a\"", {"a", "aaaa"}, {"", "ab"}},
    {'g', "# comment\nroot ::= ws \"x\" ws # trailing\nws ::= [ \\t]*", {"x", "  x ", "\tx"}, {" ", "x x"}},
    {'g', "root ::= (opt opt \"z\")+\nopt ::= \"o\"?", {"z", "oz", "ooz", "zoz"}, {"oooz", "o"}},
    {'g',
     "root ::= \"\\u00e9\\U0001F600\\n\" .",
     {"\xc3\xa9\xf0\x9f\x98\x80\nq"},
     {"\xc3\xa9\xf0\x9f\x98\x80\n"}},
    {'g', "root ::= [a-z]{2,3} \"!\"{0,1}", {"ab", "abc!", "xy!"}, {"a", "abcd", "ab!!"}},
};

TEST(regex_and_grammar_cases)
{
    struct err e;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct case_ *c = &cases[k];
        if (!strcmp(c->src, "a{,3}")) continue;
        struct grammar *g = compile(c->kind, c->src, &e);
        CHECK_MSG(g, "compile %c '%s': %s", c->kind, c->src, e.msg);
        for (int i = 0; i < 8 && c->yes[i]; i++) {
            int m = match(g, c->yes[i], strlen(c->yes[i]), &e);
            CHECK_MSG(m == 1, "'%s' should match '%s' (%d: %s)", c->src, c->yes[i], m, m < 0 ? e.msg : "");
        }
        for (int i = 0; i < 8 && c->no[i]; i++) {
            int m = match(g, c->no[i], strlen(c->no[i]), &e);
            CHECK_MSG(m == 0, "'%s' should not match '%s' (%d: %s)", c->src, c->no[i], m, m < 0 ? e.msg : "");
        }
        grammar_free(g);
    }
}

/* Empty matches and a nullable root: accept before any byte. */
TEST(nullable_root_accepts_empty)
{
    struct err e;
    struct grammar *g = compile('r', "a*", &e);
    CHECK_MSG(g, "%s", e.msg);
    CHECK_EQ_INT(match(g, "", 0, &e), 1);
    grammar_free(g);
    g = compile('g', "root ::= x*\nx ::= \"a\" | \"\"", &e);
    CHECK_MSG(g, "%s", e.msg);
    CHECK_EQ_INT(match(g, "", 0, &e), 1);
    CHECK_EQ_INT(match(g, "aaa", 3, &e), 1);
    grammar_free(g);
}

static void expect_error(char kind, const char *src, const char *needle, int *ok, char *msg, size_t cap)
{
    struct err e = {{0}};
    struct grammar *g = compile(kind, src, &e);
    if (g) {
        grammar_free(g);
        snprintf(msg, cap, "'%s' compiled; expected an error with '%s'", src, needle);
        *ok = 0;
    } else if (!strstr(e.msg, needle)) {
        snprintf(msg, cap, "'%s': error '%s' lacks '%s'", src, e.msg, needle);
        *ok = 0;
    }
}

TEST(errors_name_the_problem)
{
    static const char *const bad[][3] = {
        {"r", "(a", "unclosed '('"},
        {"r", "a)", "unmatched ')'"},
        {"r", "(a)\\1", "backreference"},
        {"r", "a(?=b)", "lookaround"},
        {"r", "(?i)a", "inline flags"},
        {"r", "\\bword", "word boundary"},
        {"r", "a{2,1}", "m < n"},
        {"r", "a{1001}", "above 1000"},
        {"r", "a++", "possessive"},
        {"r", "a{,3}", "count"},
        {"r", "[a-", "not closed"},
        {"r", "a^b", "'^'"},
        {"r", "*a", "without anything to repeat"},
        {"g", "root ::= foo", "'foo' is used but not defined"},
        {"g", "start ::= \"a\"", "no 'root' rule"},
        {"g", "root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"g", "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "left-recursive"},
        {"g", "root ::= a\na ::= b? \"x\"\nb ::= a", "left-recursive"},
        {"g", "root ::= \"abc", "unterminated"},
        {"g", "root ::= (\"a\"", "missing ')'"},
    };
    int ok = 1;
    char msg[2048] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] && ok; i++)
        expect_error(bad[i][0][0], bad[i][1], bad[i][2], &ok, msg, sizeof msg);
    CHECK_MSG(ok, "%s", msg);
}

/* Size bounds: an automaton past the limits is refused, never built half-way. */
TEST(too_large_is_refused)
{
    struct err e;
    struct grammar *g = compile('r', "((((a{1000}){1000}){1000}){1000})", &e);
    CHECK(!g);
    CHECK_MSG(strstr(e.msg, "too large"), "%s", e.msg);
    /* a DFA that explodes (the 40th character from the end is a 'b'): refused by the work bound */
    char re[128];
    snprintf(re, sizeof re, ".*b.{40}");
    g = compile('r', re, &e);
    CHECK(!g);
    CHECK_MSG(strstr(e.msg, "too large"), "%s", e.msg);
}

/* Deep recursion stops at PDA_MAX_DEPTH (the configuration overflows and dies) without crashing. */
TEST(depth_is_bounded)
{
    struct err e;
    struct grammar *g = compile('g', "root ::= \"(\" root \")\" | \"x\"", &e);
    CHECK_MSG(g, "%s", e.msg);
    char text[600];
    int n = 0;
    for (int i = 0; i < 100; i++)
        text[n++] = '(';
    text[n++] = 'x';
    for (int i = 0; i < 100; i++)
        text[n++] = ')';
    CHECK_EQ_INT(match(g, text, (size_t)n, &e), 1);
    n = 0;
    for (int i = 0; i < 300; i++)
        text[n++] = '(';
    CHECK_EQ_INT(match(g, text, (size_t)n, &e), 0);
    grammar_free(g);
}

int main(void)
{
    RUN(regex_and_grammar_cases);
    RUN(nullable_root_accepts_empty);
    RUN(errors_name_the_problem);
    RUN(too_large_is_refused);
    RUN(depth_is_bounded);
    return test_summary();
}
