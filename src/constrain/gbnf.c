/* gbnf — see gbnf.h. Recursive descent over the text; positions are reported as line numbers. */
#include "constrain/gbnf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/regex.h"
#include "util/utf8.h"

#define GBNF_MAX_DEPTH 200

struct gp {
    const char *s;
    size_t n, i;
    struct expr_rules *r;
    struct err *e;
    int depth, failed;
};

static int line_of(const struct gp *p)
{
    int line = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++)
        line += p->s[k] == '\n';
    return line;
}

static int gp_fail(struct gp *p, const char *what)
{
    if (!p->failed) err_set(p->e, "grammar line %d: %s", line_of(p), what);
    p->failed = 1;
    return -1;
}

/* A sub-parser (regex_parse_class / escape) failed: its message gets the line in front. */
static int gp_fail_sub(struct gp *p)
{
    if (!p->failed) err_prefix(p->e, "grammar line %d", line_of(p));
    p->failed = 1;
    return -1;
}

static void skip_space(struct gp *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#')
            while (p->i < p->n && p->s[p->i] != '\n')
                p->i++;
        else if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            p->i++;
        else
            break;
    }
}

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static size_t name_len(const struct gp *p, size_t at)
{
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k]))
        k++;
    return k - at;
}

/* 1 if a rule definition `name ::=` starts at p->i. */
static int at_rule_start(const struct gp *p)
{
    size_t l = name_len(p, p->i);
    if (!l) return 0;
    size_t k = p->i + l;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t'))
        k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static struct expr *parse_literal(struct gp *p)
{
    p->i++; /* the opening quote */
    int32_t n = 0, cap = 16;
    struct expr **k = malloc((size_t)cap * sizeof *k);
    if (!k) return gp_fail(p, "out of memory"), NULL;
    while (p->i < p->n && p->s[p->i] != '"') {
        if (n == cap) {
            struct expr **t = realloc(k, (size_t)(cap *= 2) * sizeof *k);
            if (!t) break;
            k = t;
        }
        struct expr_cpset set = {0};
        if (p->s[p->i] == '\\' && p->i + 1 < p->n && p->s[p->i + 1] == 'U') {
            uint32_t cp = 0;
            p->i += 2;
            for (int d = 0; d < 8; d++, p->i++) {
                char c = p->i < p->n ? p->s[p->i] : 0;
                int v = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
                if (v < 0) return free(k), gp_fail(p, "\\U needs eight hex digits"), NULL;
                cp = cp * 16 + (uint32_t)v;
            }
            if (cp > EXPR_MAX_CP || expr_cpset_add(&set, cp, cp))
                return free(k), gp_fail(p, "bad \\U escape"), NULL;
        } else if (p->s[p->i] == '\\') {
            p->i++;
            if (regex_parse_escape(p->s, p->n, &p->i, &set, p->e))
                return free(k), expr_cpset_free(&set), gp_fail_sub(p), NULL;
        } else {
            size_t l;
            int32_t cp = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &l);
            if (cp < 0) return free(k), gp_fail(p, "invalid UTF-8 in a literal"), NULL;
            p->i += l;
            expr_cpset_add(&set, (uint32_t)cp, (uint32_t)cp);
        }
        k[n++] = expr_from_cpset(p->r, &set, 0);
        expr_cpset_free(&set);
    }
    if (p->i >= p->n) return free(k), gp_fail(p, "unterminated string literal"), NULL;
    p->i++;
    struct expr *x = expr_cat(p->r, k, n);
    free(k);
    return x;
}

static struct expr *parse_alts(struct gp *p);

static struct expr *parse_primary(struct gp *p)
{
    char c = p->s[p->i];
    struct expr_cpset set = {0};
    if (c == '"') return parse_literal(p);
    if (c == '[') {
        if (regex_parse_class(p->s, p->n, &p->i, &set, p->e))
            return expr_cpset_free(&set), gp_fail_sub(p), NULL;
        struct expr *x = expr_from_cpset(p->r, &set, 0);
        expr_cpset_free(&set);
        return x;
    }
    if (c == '.') {
        p->i++;
        if (expr_cpset_add(&set, 0, EXPR_MAX_CP)) return gp_fail(p, "out of memory"), NULL;
        struct expr *x = expr_from_cpset(p->r, &set, 0);
        expr_cpset_free(&set);
        return x;
    }
    if (c == '(') {
        p->i++;
        if (++p->depth > GBNF_MAX_DEPTH) return gp_fail(p, "groups nested too deeply"), NULL;
        struct expr *x = parse_alts(p);
        p->depth--;
        skip_space(p);
        if (!x) return NULL;
        if (p->i >= p->n || p->s[p->i] != ')') return gp_fail(p, "missing ')'"), NULL;
        p->i++;
        return x;
    }
    size_t l = name_len(p, p->i);
    if (!l) return gp_fail(p, "expected a literal, a class, a rule name or '('"), NULL;
    int32_t id = expr_rule_id(p->r, p->s + p->i, l);
    p->i += l;
    return expr_call(p->r, id);
}

static int read_int(struct gp *p, int32_t *v)
{
    int64_t x = 0;
    size_t start = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > REGEX_MAX_COUNT) return gp_fail(p, "repetition count above 1000");
    }
    if (p->i == start) return gp_fail(p, "expected a number in {m,n}");
    *v = (int32_t)x;
    return 0;
}

static struct expr *parse_postfix(struct gp *p, struct expr *x)
{
    while (x && p->i < p->n) {
        char c = p->s[p->i];
        int32_t min, max;
        if (c == '*')
            min = 0, max = EXPR_INF;
        else if (c == '+')
            min = 1, max = EXPR_INF;
        else if (c == '?')
            min = 0, max = 1;
        else if (c != '{')
            break;
        p->i++;
        if (c == '{') {
            skip_space(p);
            if (read_int(p, &min)) return NULL;
            max = min;
            skip_space(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                skip_space(p);
                max = EXPR_INF;
                if (p->i < p->n && p->s[p->i] != '}' && read_int(p, &max)) return NULL;
                skip_space(p);
            }
            if (p->i >= p->n || p->s[p->i] != '}') return gp_fail(p, "missing '}'"), NULL;
            p->i++;
            if (max < min) return gp_fail(p, "{m,n} with n < m"), NULL;
        }
        x = expr_repeat(p->r, x, min, max);
    }
    return x;
}

/* A sequence: items until '|', ')', the end, or the next rule definition. */
static struct expr *parse_seq(struct gp *p)
{
    int32_t n = 0, cap = 8;
    struct expr **k = malloc((size_t)cap * sizeof *k);
    if (!k) return gp_fail(p, "out of memory"), NULL;
    for (;;) {
        skip_space(p);
        if (p->i >= p->n || p->s[p->i] == '|' || p->s[p->i] == ')' || at_rule_start(p)) break;
        if (n == cap) {
            struct expr **t = realloc(k, (size_t)(cap *= 2) * sizeof *k);
            if (!t) break;
            k = t;
        }
        if (!(k[n++] = parse_postfix(p, parse_primary(p)))) break;
    }
    struct expr *x = p->failed || (n && !k[n - 1]) ? NULL : expr_cat(p->r, k, n);
    free(k);
    return x;
}

static struct expr *parse_alts(struct gp *p)
{
    int32_t n = 0, cap = 4;
    struct expr **k = malloc((size_t)cap * sizeof *k);
    if (!k) return gp_fail(p, "out of memory"), NULL;
    for (;;) {
        if (n == cap) {
            struct expr **t = realloc(k, (size_t)(cap *= 2) * sizeof *k);
            if (!t) break;
            k = t;
        }
        if (!(k[n++] = parse_seq(p))) break;
        if (p->i >= p->n || p->s[p->i] != '|') break;
        p->i++;
    }
    struct expr *x = p->failed || !k[n - 1] ? NULL : expr_alt(p->r, k, n);
    free(k);
    return x;
}

static int parse_rule(struct gp *p)
{
    size_t l = name_len(p, p->i);
    if (!l || !at_rule_start(p)) return gp_fail(p, "expected a rule definition 'name ::= ...'");
    int32_t id = expr_rule_id(p->r, p->s + p->i, l);
    if (id < 0) return gp_fail(p, "too many rules");
    if (p->r->bodies[id]) {
        char msg[160];
        snprintf(msg, sizeof msg, "rule '%.*s' is defined twice", (int)(l > 64 ? 64 : l), p->s + p->i);
        return gp_fail(p, msg);
    }
    p->i += l;
    skip_space(p);
    p->i += 3; /* ::= */
    struct expr *body = parse_alts(p);
    if (!body) return p->failed ? -1 : gp_fail(p, "the grammar is too large");
    p->r->bodies[id] = body;
    return 0;
}

int gbnf_parse(const char *text, size_t len, struct expr_rules *r, struct err *e)
{
    if (len > GBNF_MAX_BYTES) return err_set(e, "the grammar is %zu bytes, at most %d", len, GBNF_MAX_BYTES);
    struct gp p = {text, len, 0, r, e, 0, 0};
    if (expr_rule_id(r, "root", 4) != 0) return err_set(e, "out of memory");
    for (;;) {
        skip_space(&p);
        if (p.i >= p.n) break;
        if (parse_rule(&p)) return -1;
    }
    if (expr_rules_error(r, "the grammar", e)) return -1;
    if (!r->bodies[0]) return err_set(e, "the grammar has no 'root' rule (the rule output must match)");
    for (int32_t i = 0; i < r->n; i++)
        if (!r->bodies[i]) return err_set(e, "grammar: rule '%s' is used but not defined", r->names[i]);
    return 0;
}
