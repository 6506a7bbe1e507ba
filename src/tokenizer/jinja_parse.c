/* jinja_parse — tokens to the tree, with Jinja2's grammar.
 *
 * Expressions, loosest first (all binary operators are left-associative, ** included, as in Jinja):
 *   a if b else c  >  or  >  and  >  not  >  comparisons (== != < <= > >= in, not in; chained)
 *   >  + -  >  ~  >  * / // %  >  **  >  unary - +  >  postfix (.name, [index or slice], (call))
 *   then filters and tests (x | f(args), x is [not] t args), which bind tighter than any operator:
 *   'a' + b | trim is 'a' + (b | trim), and -x | abs is (-x) | abs.
 * Statements: if/elif/else, for (targets, `in`, an optional `if` clause, else), set (expression or
 * block, names, ns.attr, tuples), macro, filter, with, break/continue (inside a for only), generation.
 *
 * Invariant: every node is allocated in the template's arena; the parser recurses at most
 * PARSE_MAX_DEPTH levels (a hostile template of 10^5 "(" is an error, not a stack overflow); on an error
 * the message names the token's line:col and what was expected.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_int.h"

enum { PARSE_MAX_DEPTH = 200 };

struct parser {
    const struct jinja_tok *t;
    size_t n, i;
    struct jinja_arena *mem;
    struct err *e;
    int depth;      /* recursion depth now */
    int loop_depth; /* for statements around the current one (break/continue need one) */
};

struct kid_vec {
    struct jinja_node **v;
    uint32_t n, cap;
};

static const struct jinja_tok *cur(const struct parser *p)
{
    return &p->t[p->i];
}

/* The token k places ahead (the final JT_EOF at most). */
static const struct jinja_tok *peek(const struct parser *p, size_t k)
{
    return &p->t[p->i + k < p->n ? p->i + k : p->n - 1];
}

static void adv(struct parser *p)
{
    if (p->t[p->i].type != JT_EOF) p->i++;
}

static int tok_is_name(const struct jinja_tok *t, const char *kw)
{
    return t->type == JT_NAME && t->n == strlen(kw) && memcmp(t->p, kw, t->n) == 0;
}

static int tok_is_op(const struct jinja_tok *t, uint8_t op)
{
    return t->type == JT_OP && t->op == op;
}

static int is_name(const struct parser *p, const char *kw)
{
    return tok_is_name(cur(p), kw);
}

static int is_op(const struct parser *p, uint8_t op)
{
    return tok_is_op(cur(p), op);
}

/* How a token reads in a message. */
static void tok_describe(const struct jinja_tok *t, char *buf, size_t cap)
{
    static const char *const ops[] = {"",   "+", "-",  "*", "/",  "//", "%",      "**", "~", "==",
                                      "!=", "<", "<=", ">", ">=", "in", "not in", "[",  "]", "(",
                                      ")",  "{", "}",  "=", ".",  ":",  "|",      ",",  ";"};
    switch (t->type) {
    case JT_EOF:
        snprintf(buf, cap, "the end of the template");
        break;
    case JT_TEXT:
        snprintf(buf, cap, "text");
        break;
    case JT_VAR_BEGIN:
        snprintf(buf, cap, "'{{'");
        break;
    case JT_VAR_END:
        snprintf(buf, cap, "'}}'");
        break;
    case JT_BLOCK_BEGIN:
        snprintf(buf, cap, "'{%%'");
        break;
    case JT_BLOCK_END:
        snprintf(buf, cap, "'%%}'");
        break;
    case JT_NAME:
        snprintf(buf, cap, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->p);
        break;
    case JT_STRING:
        snprintf(buf, cap, "a string");
        break;
    case JT_INT:
    case JT_FLOAT:
        snprintf(buf, cap, "a number");
        break;
    default:
        snprintf(buf, cap, "'%s'", t->op < sizeof ops / sizeof ops[0] ? ops[t->op] : "?");
        break;
    }
}

static void *fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *fail(struct parser *p, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(p->e, "line %u:%u: %s", cur(p)->line, cur(p)->col, msg);
    return NULL;
}

static void *unexpected(struct parser *p, const char *wanted)
{
    char got[64];
    tok_describe(cur(p), got, sizeof got);
    return fail(p, "expected %s, got %s", wanted, got);
}

static struct jinja_node *new_node(struct parser *p, uint8_t kind, const struct jinja_tok *at)
{
    struct jinja_node *n = jinja_alloc(p->mem, sizeof *n);
    if (!n) return fail(p, "out of memory (template tree)");
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    n->builtin = -1;
    return n;
}

static int kids_push(struct parser *p, struct kid_vec *k, struct jinja_node *n)
{
    if (!n) return -1;
    if (k->n == k->cap) {
        uint32_t cap = k->cap ? k->cap * 2 : 8;
        struct jinja_node **v = realloc(k->v, cap * sizeof *v);
        if (!v) {
            fail(p, "out of memory (template tree)");
            return -1;
        }
        k->v = v;
        k->cap = cap;
    }
    k->v[k->n++] = n;
    return 0;
}

/* Moves the collected children into n (arena) and frees the vector; n NULL: just frees. */
static struct jinja_node *kids_finish(struct parser *p, struct kid_vec *k, struct jinja_node *n)
{
    if (n && k->n) {
        n->kids = jinja_alloc(p->mem, k->n * sizeof *n->kids);
        if (!n->kids)
            n = fail(p, "out of memory (template tree)");
        else
            memcpy(n->kids, k->v, k->n * sizeof *n->kids);
        if (n) n->n_kids = k->n;
    }
    free(k->v);
    memset(k, 0, sizeof *k);
    return n;
}

static int enter(struct parser *p)
{
    if (++p->depth > PARSE_MAX_DEPTH) {
        fail(p, "the template nests deeper than %d levels", PARSE_MAX_DEPTH);
        return -1;
    }
    return 0;
}

static int expect_op(struct parser *p, uint8_t op, const char *what)
{
    if (!is_op(p, op)) {
        unexpected(p, what);
        return -1;
    }
    adv(p);
    return 0;
}

/* ---------- expressions ---------- */

static struct jinja_node *parse_expr(struct parser *p, int with_cond);
static struct jinja_node *parse_unary(struct parser *p, int with_filter);

/* Items up to the closing bracket close: a list, tuple or dict literal, or call arguments. */
static struct jinja_node *parse_items(struct parser *p, struct jinja_node *n, uint8_t close, int dict,
                                      int call)
{
    struct kid_vec k = {0};
    int seen_kw = 0;
    while (!is_op(p, close)) {
        if (k.n && expect_op(p, JO_COMMA, "',' or a closing bracket") != 0) goto fail;
        if (is_op(p, close)) break; /* a trailing comma */
        if (call && is_op(p, JO_MUL)) {
            fail(p, "*args and **kwargs in calls are not supported");
            goto fail;
        }
        if (call && cur(p)->type == JT_NAME && tok_is_op(peek(p, 1), JO_ASSIGN)) {
            struct jinja_node *kw = new_node(p, JN_KWARG, cur(p));
            if (!kw) goto fail;
            kw->name = cur(p)->p;
            kw->name_len = (uint32_t)cur(p)->n;
            p->i += 2;
            kw->a = parse_expr(p, 1);
            if (!kw->a || kids_push(p, &k, kw) != 0) goto fail;
            seen_kw = 1;
            continue;
        }
        if (seen_kw) {
            fail(p, "a positional argument after a keyword argument");
            goto fail;
        }
        if (kids_push(p, &k, parse_expr(p, 1)) != 0) goto fail;
        if (dict &&
            (expect_op(p, JO_COLON, "':' in a dict literal") != 0 || kids_push(p, &k, parse_expr(p, 1)) != 0))
            goto fail;
    }
    adv(p);
    return kids_finish(p, &k, n);
fail:
    kids_finish(p, &k, NULL);
    return NULL;
}

/* A string literal, joined with the literals right after it ('a' 'b' is 'ab'). */
static struct jinja_node *parse_strings(struct parser *p)
{
    struct jinja_node *n = new_node(p, JN_CONST, cur(p));
    if (!n) return NULL;
    size_t total = 0, i;
    for (i = p->i; p->t[i].type == JT_STRING; i++)
        total += p->t[i].n;
    char *s = jinja_alloc(p->mem, total + 1);
    if (!s) return fail(p, "out of memory (template strings)");
    size_t k = 0;
    for (; cur(p)->type == JT_STRING; adv(p)) {
        memcpy(s + k, cur(p)->p, cur(p)->n);
        k += cur(p)->n;
    }
    n->value = jinja_str(s, k);
    return n;
}

static struct jinja_node *parse_name(struct parser *p)
{
    const struct jinja_tok *t = cur(p);
    struct jinja_node *n = new_node(p, JN_CONST, t);
    if (!n) return NULL;
    adv(p);
    if (tok_is_name(t, "true") || tok_is_name(t, "True"))
        n->value = jinja_bool(1);
    else if (tok_is_name(t, "false") || tok_is_name(t, "False"))
        n->value = jinja_bool(0);
    else if (tok_is_name(t, "none") || tok_is_name(t, "None"))
        n->value = jinja_none();
    else {
        n->kind = JN_NAME;
        n->name = t->p;
        n->name_len = (uint32_t)t->n;
    }
    return n;
}

static struct jinja_node *parse_tuple(struct parser *p, int simplified, int with_cond, const char *end_kw,
                                      int explicit_parens);

static struct jinja_node *parse_primary(struct parser *p)
{
    const struct jinja_tok *t = cur(p);
    struct jinja_node *n;
    switch (t->type) {
    case JT_NAME:
        return parse_name(p);
    case JT_STRING:
        return parse_strings(p);
    case JT_INT:
    case JT_FLOAT:
        n = new_node(p, JN_CONST, t);
        if (n) n->value = t->type == JT_INT ? jinja_int(t->i) : jinja_float(t->f);
        adv(p);
        return n;
    case JT_OP:
        if (t->op == JO_LPAREN) {
            adv(p);
            n = parse_tuple(p, 0, 1, NULL, 1);
            if (n && expect_op(p, JO_RPAREN, "')'") != 0) return NULL;
            return n;
        }
        if (t->op == JO_LBRACKET || t->op == JO_LBRACE) {
            n = new_node(p, t->op == JO_LBRACKET ? JN_LIST : JN_DICT, t);
            adv(p);
            return n ? parse_items(p, n, t->op == JO_LBRACKET ? JO_RBRACKET : JO_RBRACE, t->op == JO_LBRACE,
                                   0)
                     : NULL;
        }
        break;
    default:
        break;
    }
    return unexpected(p, "an expression");
}

/* After "[": an index a[i] or a slice a[start:stop:step]. */
static struct jinja_node *parse_subscript(struct parser *p, struct jinja_node *obj,
                                          const struct jinja_tok *at)
{
    struct jinja_node *idx = NULL;
    if (!is_op(p, JO_COLON)) {
        idx = parse_expr(p, 1);
        if (!idx) return NULL;
        if (!is_op(p, JO_COLON)) {
            struct jinja_node *n = new_node(p, JN_ITEM, at);
            if (!n || expect_op(p, JO_RBRACKET, "']'") != 0) return NULL;
            n->a = obj;
            n->b = idx;
            return n;
        }
    }
    struct jinja_node *n = new_node(p, JN_SLICE, at);
    if (!n) return NULL;
    n->a = obj;
    n->kids = jinja_alloc(p->mem, 3 * sizeof *n->kids);
    if (!n->kids) return fail(p, "out of memory (template tree)");
    n->n_kids = 3;
    n->kids[0] = idx;
    for (int k = 1; k < 3 && is_op(p, JO_COLON); k++) {
        adv(p);
        if (!is_op(p, JO_COLON) && !is_op(p, JO_RBRACKET) && !(n->kids[k] = parse_expr(p, 1))) return NULL;
    }
    return expect_op(p, JO_RBRACKET, "']' after a slice") == 0 ? n : NULL;
}

static struct jinja_node *parse_postfix(struct parser *p, struct jinja_node *n)
{
    while (n) {
        const struct jinja_tok *at = cur(p);
        if (is_op(p, JO_DOT)) {
            adv(p);
            const struct jinja_tok *t = cur(p);
            struct jinja_node *m = new_node(p, t->type == JT_INT ? JN_ITEM : JN_ATTR, at);
            if (!m) return NULL;
            m->a = n;
            if (t->type == JT_NAME) {
                m->name = t->p;
                m->name_len = (uint32_t)t->n;
            } else if (t->type == JT_INT) {
                if (!(m->b = new_node(p, JN_CONST, t))) return NULL;
                m->b->value = jinja_int(t->i);
            } else {
                return unexpected(p, "a name after '.'");
            }
            adv(p);
            n = m;
        } else if (is_op(p, JO_LBRACKET)) {
            adv(p);
            n = parse_subscript(p, n, at);
        } else if (is_op(p, JO_LPAREN)) {
            struct jinja_node *m = new_node(p, JN_CALL, at);
            adv(p);
            if (!m) return NULL;
            m->a = n;
            n = parse_items(p, m, JO_RPAREN, 0, 1);
        } else {
            break;
        }
    }
    return n;
}

/* A filter or test name (dotted names allowed) into n. */
static int parse_builtin_name(struct parser *p, struct jinja_node *n, int test)
{
    if (cur(p)->type != JT_NAME) {
        unexpected(p, test ? "a test name" : "a filter name");
        return -1;
    }
    const char *s = cur(p)->p;
    const char *e = s + cur(p)->n;
    adv(p);
    while (is_op(p, JO_DOT) && peek(p, 1)->type == JT_NAME) {
        adv(p);
        e = cur(p)->p + cur(p)->n;
        adv(p);
    }
    n->name = s;
    n->name_len = (uint32_t)(e - s);
    n->builtin = (int16_t)(test ? jinja_test_find(s, n->name_len) : jinja_filter_find(s, n->name_len));
    return 0;
}

/* After "|": one filter applied to operand (NULL in a filter block's chain). */
static struct jinja_node *parse_filter(struct parser *p, struct jinja_node *operand)
{
    struct jinja_node *n = new_node(p, JN_FILTER, cur(p));
    if (!n || parse_builtin_name(p, n, 0) != 0) return NULL;
    n->a = operand;
    if (is_op(p, JO_LPAREN)) {
        adv(p);
        return parse_items(p, n, JO_RPAREN, 0, 1);
    }
    return n;
}

/* After "is": a test, with its arguments in parentheses or one bare argument. */
static struct jinja_node *parse_test(struct parser *p, struct jinja_node *operand, const struct jinja_tok *at)
{
    struct jinja_node *n = new_node(p, JN_TEST, at);
    if (!n) return NULL;
    n->a = operand;
    if (is_name(p, "not")) {
        adv(p);
        n->op = 1;
    }
    if (parse_builtin_name(p, n, 1) != 0) return NULL;
    if (is_op(p, JO_LPAREN)) {
        adv(p);
        return parse_items(p, n, JO_RPAREN, 0, 1);
    }
    const struct jinja_tok *t = cur(p);
    int bare = t->type == JT_NAME || t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT ||
               tok_is_op(t, JO_LPAREN) || tok_is_op(t, JO_LBRACKET) || tok_is_op(t, JO_LBRACE);
    if (!bare || tok_is_name(t, "else") || tok_is_name(t, "or") || tok_is_name(t, "and")) return n;
    if (tok_is_name(t, "is")) return fail(p, "tests cannot be chained with 'is'");
    struct jinja_node *arg = parse_postfix(p, parse_primary(p));
    if (!arg) return NULL;
    n->kids = jinja_alloc(p->mem, sizeof *n->kids);
    if (!n->kids) return fail(p, "out of memory (template tree)");
    n->kids[0] = arg;
    n->n_kids = 1;
    return n;
}

static struct jinja_node *parse_unary(struct parser *p, int with_filter)
{
    if (enter(p) != 0) return NULL;
    const struct jinja_tok *t = cur(p);
    struct jinja_node *n;
    if (is_op(p, JO_SUB) || is_op(p, JO_ADD)) {
        n = new_node(p, is_op(p, JO_SUB) ? JN_NEG : JN_POS, t);
        adv(p);
        if (n && !(n->a = parse_unary(p, 0))) n = NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    while (n && with_filter) {
        const struct jinja_tok *at = cur(p);
        if (is_op(p, JO_PIPE)) {
            adv(p);
            n = parse_filter(p, n);
        } else if (is_name(p, "is")) {
            adv(p);
            n = parse_test(p, n, at);
        } else if (is_op(p, JO_LPAREN)) {
            n = parse_postfix(p, n);
        } else {
            break;
        }
    }
    p->depth--;
    return n;
}

static struct jinja_node *binop(struct parser *p, uint8_t kind, uint8_t op, const struct jinja_tok *at,
                                struct jinja_node *a, struct jinja_node *b)
{
    if (!a || !b) return NULL;
    struct jinja_node *n = new_node(p, kind, at);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* Binary operators of one precedence level, left-associative: level 0 ** ; 1 * / // % ; 2 ~ ; 3 + - */
static struct jinja_node *parse_arith(struct parser *p, int level)
{
    static const uint8_t ops[4][4] = {
        {JO_POW}, {JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD}, {JO_CONCAT}, {JO_ADD, JO_SUB}};
    struct jinja_node *n = level == 0 ? parse_unary(p, 1) : parse_arith(p, level - 1);
    for (;;) {
        const struct jinja_tok *at = cur(p);
        uint8_t op = JO_NONE;
        for (int k = 0; k < 4 && ops[level][k]; k++)
            if (tok_is_op(at, ops[level][k])) op = ops[level][k];
        if (!n || op == JO_NONE) return n;
        adv(p);
        n = binop(p, JN_BINOP, op, at, n, level == 0 ? parse_unary(p, 1) : parse_arith(p, level - 1));
    }
}

/* Comparisons; a chain a < b < c is (a < b) and (b < c). */
static struct jinja_node *parse_compare(struct parser *p)
{
    static const uint8_t cmp_ops[] = {JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE};
    struct jinja_node *left = parse_arith(p, 3), *result = NULL;
    for (;;) {
        const struct jinja_tok *at = cur(p);
        uint8_t op = JO_NONE;
        for (size_t k = 0; k < sizeof cmp_ops; k++)
            if (tok_is_op(at, cmp_ops[k])) op = cmp_ops[k];
        if (is_name(p, "in")) op = JO_IN;
        if (is_name(p, "not") && tok_is_name(peek(p, 1), "in")) {
            op = JO_NOT_IN;
            adv(p);
        }
        if (!left || op == JO_NONE) return result ? result : left;
        adv(p);
        struct jinja_node *right = parse_arith(p, 3);
        struct jinja_node *c = binop(p, JN_BINOP, op, at, left, right);
        result = result ? binop(p, JN_AND, 0, at, result, c) : c;
        if (!result) return NULL;
        left = right;
    }
}

static struct jinja_node *parse_not(struct parser *p)
{
    if (!is_name(p, "not")) return parse_compare(p);
    if (enter(p) != 0) return NULL;
    struct jinja_node *n = new_node(p, JN_NOT, cur(p));
    adv(p);
    if (n && !(n->a = parse_not(p))) n = NULL;
    p->depth--;
    return n;
}

static struct jinja_node *parse_and_or(struct parser *p, int or_level)
{
    struct jinja_node *n = or_level ? parse_and_or(p, 0) : parse_not(p);
    while (n && is_name(p, or_level ? "or" : "and")) {
        const struct jinja_tok *at = cur(p);
        adv(p);
        n = binop(p, or_level ? JN_OR : JN_AND, 0, at, n, or_level ? parse_and_or(p, 0) : parse_not(p));
    }
    return n;
}

static struct jinja_node *parse_expr(struct parser *p, int with_cond)
{
    if (enter(p) != 0) return NULL;
    struct jinja_node *n = parse_and_or(p, 1);
    while (n && with_cond && is_name(p, "if")) {
        struct jinja_node *c = new_node(p, JN_COND, cur(p));
        adv(p);
        if (!c || !(c->b = parse_and_or(p, 1))) {
            n = NULL;
            break;
        }
        c->a = n;
        if (is_name(p, "else")) {
            adv(p);
            if (!(c->c = parse_expr(p, 1))) c = NULL;
        }
        n = c;
    }
    p->depth--;
    return n;
}

/* Expressions separated by commas: one expression, or a tuple when there is a comma (or, with explicit
 * parentheses, none at all: "()"). simplified: names and literals only (assignment targets). */
static struct jinja_node *parse_tuple(struct parser *p, int simplified, int with_cond, const char *end_kw,
                                      int explicit_parens)
{
    const struct jinja_tok *at = cur(p);
    struct kid_vec k = {0};
    int is_tuple = 0;
    for (;;) {
        if (k.n && expect_op(p, JO_COMMA, "','") != 0) goto fail;
        const struct jinja_tok *t = cur(p);
        if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || tok_is_op(t, JO_RPAREN) ||
            (end_kw && tok_is_name(t, end_kw)))
            break;
        if (kids_push(p, &k, simplified ? parse_primary(p) : parse_expr(p, with_cond)) != 0) goto fail;
        if (!is_op(p, JO_COMMA)) break;
        is_tuple = 1;
    }
    if (!is_tuple && k.n == 1) {
        struct jinja_node *only = k.v[0];
        kids_finish(p, &k, NULL);
        return only;
    }
    if (!is_tuple && !explicit_parens) {
        kids_finish(p, &k, NULL);
        return unexpected(p, "an expression");
    }
    return kids_finish(p, &k, new_node(p, JN_TUPLE, at));
fail:
    kids_finish(p, &k, NULL);
    return NULL;
}

/* ---------- statements ---------- */

/* Assignment target of for / set: a name, a tuple of names, or (set only) name.attr. */
static struct jinja_node *parse_target(struct parser *p, const char *end_kw, int with_ns)
{
    if (with_ns && cur(p)->type == JT_NAME && tok_is_op(peek(p, 1), JO_DOT) && peek(p, 2)->type == JT_NAME) {
        struct jinja_node *n = new_node(p, JN_ATTR, cur(p));
        if (!n || !(n->a = parse_name(p))) return NULL;
        adv(p);
        n->name = cur(p)->p;
        n->name_len = (uint32_t)cur(p)->n;
        adv(p);
        return n;
    }
    struct jinja_node *n = parse_tuple(p, 1, 0, end_kw, 0);
    if (!n) return NULL;
    struct jinja_node *const *v = n->kind == JN_TUPLE ? n->kids : &n;
    uint32_t count = n->kind == JN_TUPLE ? n->n_kids : 1;
    for (uint32_t i = 0; i < count; i++)
        if (v[i]->kind != JN_NAME) return fail(p, "can only assign to names here");
    return n;
}

static struct jinja_node *parse_statement(struct parser *p);

/* Statements up to a {% tag %} named in ends (NULL-terminated; NULL: the end of the template). The
 * "{%" and that name are consumed; *which is its index. opener names the statement for messages. */
static struct jinja_node *parse_body(struct parser *p, const char *const *ends, int *which,
                                     const char *opener, const struct jinja_tok *open_at)
{
    if (enter(p) != 0) return NULL;
    struct jinja_node *body = new_node(p, JN_BODY, cur(p));
    struct kid_vec k = {0};
    for (; body;) {
        const struct jinja_tok *t = cur(p);
        if (t->type == JT_EOF) {
            if (!ends) break;
            fail(p, "the {%% %s %%} at line %u:%u is not closed (missing {%% %s %%})", opener, open_at->line,
                 open_at->col, ends[0]);
            goto fail;
        }
        if (t->type == JT_BLOCK_BEGIN && ends) {
            int hit = -1;
            for (int i = 0; ends[i] && hit < 0; i++)
                if (tok_is_name(peek(p, 1), ends[i])) hit = i;
            if (hit >= 0) {
                p->i += 2;
                *which = hit;
                break;
            }
        }
        if (kids_push(p, &k, parse_statement(p)) != 0) goto fail;
    }
    p->depth--;
    return kids_finish(p, &k, body);
fail:
    kids_finish(p, &k, NULL);
    return NULL;
}

static int expect_block_end(struct parser *p)
{
    if (cur(p)->type != JT_BLOCK_END) {
        unexpected(p, "'%}'");
        return -1;
    }
    adv(p);
    return 0;
}

/* After "if" or "elif". */
static struct jinja_node *parse_if(struct parser *p, const struct jinja_tok *at)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct jinja_node *n = new_node(p, JN_IF, at);
    int which = 0;
    if (!n || !(n->a = parse_tuple(p, 0, 1, NULL, 0)) || expect_block_end(p) != 0) return NULL;
    if (!(n->body = parse_body(p, ends, &which, "if", at))) return NULL;
    const struct jinja_tok *kw = &p->t[p->i - 1];
    if (which == 0) {
        n->alt = parse_if(p, kw);
        return n->alt ? n : NULL;
    }
    if (which == 1) {
        static const char *const endif[] = {"endif", NULL};
        if (expect_block_end(p) != 0 || !(n->alt = parse_body(p, endif, &which, "if", at))) return NULL;
    }
    return expect_block_end(p) == 0 ? n : NULL;
}

static struct jinja_node *parse_for(struct parser *p, const struct jinja_tok *at)
{
    static const char *const ends[] = {"endfor", "else", NULL}, *const endfor[] = {"endfor", NULL};
    struct jinja_node *n = new_node(p, JN_FOR, at);
    int which = 0;
    if (!n || !(n->a = parse_target(p, "in", 0))) return NULL;
    if (!is_name(p, "in")) return unexpected(p, "'in'");
    adv(p);
    if (!(n->b = parse_tuple(p, 0, 0, "recursive", 0))) return NULL;
    if (is_name(p, "if")) {
        adv(p);
        if (!(n->c = parse_expr(p, 1))) return NULL;
    }
    if (is_name(p, "recursive")) return fail(p, "recursive loops are not supported");
    if (expect_block_end(p) != 0) return NULL;
    p->loop_depth++;
    n->body = parse_body(p, ends, &which, "for", at);
    p->loop_depth--;
    if (!n->body) return NULL;
    if (which == 1 && (expect_block_end(p) != 0 || !(n->alt = parse_body(p, endfor, &which, "for", at))))
        return NULL;
    return expect_block_end(p) == 0 ? n : NULL;
}

/* A chain of filters "f | g(x)" applied to a block's text (the innermost operand is NULL). */
static struct jinja_node *parse_filter_chain(struct parser *p, int first_pipe)
{
    struct jinja_node *n = NULL;
    if (first_pipe && expect_op(p, JO_PIPE, "'|'") != 0) return NULL;
    do {
        if (n) adv(p);
        if (!(n = parse_filter(p, n))) return NULL;
    } while (is_op(p, JO_PIPE));
    return n;
}

static struct jinja_node *parse_set(struct parser *p, const struct jinja_tok *at)
{
    static const char *const ends[] = {"endset", NULL};
    struct jinja_node *n = new_node(p, JN_SET, at);
    int which = 0;
    if (!n || !(n->a = parse_target(p, NULL, 1))) return NULL;
    if (is_op(p, JO_ASSIGN)) {
        adv(p);
        if (!(n->b = parse_tuple(p, 0, 1, NULL, 0))) return NULL;
        return expect_block_end(p) == 0 ? n : NULL;
    }
    n->kind = JN_SET_BLOCK;
    if (is_op(p, JO_PIPE) && !(n->c = parse_filter_chain(p, 1))) return NULL;
    if (expect_block_end(p) != 0 || !(n->body = parse_body(p, ends, &which, "set", at))) return NULL;
    return expect_block_end(p) == 0 ? n : NULL;
}

static struct jinja_node *parse_macro(struct parser *p, const struct jinja_tok *at)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct jinja_node *n = new_node(p, JN_MACRO, at);
    struct kid_vec k = {0};
    int which = 0;
    if (!n) return NULL;
    if (cur(p)->type != JT_NAME) return unexpected(p, "a macro name");
    n->name = cur(p)->p;
    n->name_len = (uint32_t)cur(p)->n;
    adv(p);
    if (expect_op(p, JO_LPAREN, "'(' after the macro name") != 0) return NULL;
    while (!is_op(p, JO_RPAREN)) {
        if (k.n && expect_op(p, JO_COMMA, "',' or ')'") != 0) goto fail;
        if (cur(p)->type != JT_NAME) {
            unexpected(p, "a parameter name");
            goto fail;
        }
        struct jinja_node *param = parse_name(p);
        if (param && param->kind != JN_NAME) {
            p->i--;
            unexpected(p, "a parameter name");
            goto fail;
        }
        if (!param || kids_push(p, &k, param) != 0) goto fail;
        if (is_op(p, JO_ASSIGN)) {
            adv(p);
            if (!(param->a = parse_expr(p, 1))) goto fail;
        }
    }
    adv(p);
    if (!kids_finish(p, &k, n) || expect_block_end(p) != 0) return NULL;
    int loops = p->loop_depth;
    p->loop_depth = 0;
    n->body = parse_body(p, ends, &which, "macro", at);
    p->loop_depth = loops;
    return n->body && expect_block_end(p) == 0 ? n : NULL;
fail:
    kids_finish(p, &k, NULL);
    return NULL;
}

static struct jinja_node *parse_with(struct parser *p, const struct jinja_tok *at)
{
    static const char *const ends[] = {"endwith", NULL};
    struct jinja_node *n = new_node(p, JN_WITH, at);
    struct kid_vec k = {0};
    int which = 0;
    while (n && cur(p)->type != JT_BLOCK_END) {
        if (k.n && expect_op(p, JO_COMMA, "',' or '%}'") != 0) goto fail;
        struct jinja_node *s = new_node(p, JN_SET, cur(p));
        if (!s || kids_push(p, &k, s) != 0 || !(s->a = parse_target(p, NULL, 0))) goto fail;
        if (expect_op(p, JO_ASSIGN, "'='") != 0 || !(s->b = parse_expr(p, 1))) goto fail;
    }
    if (!kids_finish(p, &k, n) || expect_block_end(p) != 0) return NULL;
    n->body = parse_body(p, ends, &which, "with", at);
    return n->body && expect_block_end(p) == 0 ? n : NULL;
fail:
    kids_finish(p, &k, NULL);
    return NULL;
}

/* After "{%" and a keyword that is not one of the statements above. */
static struct jinja_node *parse_other(struct parser *p, const struct jinja_tok *kw)
{
    static const char *const unsupported[] = {"include", "import",     "from", "extends", "block",
                                              "call",    "autoescape", "do",   "trans",   NULL};
    int which = 0;
    if (tok_is_name(kw, "break") || tok_is_name(kw, "continue")) {
        if (!p->loop_depth) return fail(p, "'%.*s' outside a for loop", (int)kw->n, kw->p);
        struct jinja_node *n = new_node(p, tok_is_name(kw, "break") ? JN_BREAK : JN_CONTINUE, kw);
        return n && expect_block_end(p) == 0 ? n : NULL;
    }
    if (tok_is_name(kw, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        struct jinja_node *n = new_node(p, JN_FILTER_BLOCK, kw);
        if (!n || !(n->c = parse_filter_chain(p, 0)) || expect_block_end(p) != 0) return NULL;
        n->body = parse_body(p, ends, &which, "filter", kw);
        return n->body && expect_block_end(p) == 0 ? n : NULL;
    }
    if (tok_is_name(kw, "generation")) { /* HF's marker of the assistant's text: rendered as is */
        static const char *const ends[] = {"endgeneration", NULL};
        struct jinja_node *n;
        if (expect_block_end(p) != 0 || !(n = parse_body(p, ends, &which, "generation", kw))) return NULL;
        return expect_block_end(p) == 0 ? n : NULL;
    }
    p->i--; /* point the message at the keyword */
    for (int i = 0; unsupported[i]; i++)
        if (tok_is_name(kw, unsupported[i]))
            return fail(p, "{%% %s %%} is not supported (a chat template renders alone, with no files)",
                        unsupported[i]);
    char got[64];
    tok_describe(kw, got, sizeof got);
    return fail(p, "unexpected %s after '{%%'", got);
}

static struct jinja_node *parse_statement(struct parser *p)
{
    const struct jinja_tok *t = cur(p);
    struct jinja_node *n;
    switch (t->type) {
    case JT_TEXT:
        n = new_node(p, JN_TEXT, t);
        if (n) {
            n->name = t->p;
            n->name_len = (uint32_t)t->n;
        }
        adv(p);
        return n;
    case JT_VAR_BEGIN:
        n = new_node(p, JN_OUTPUT, t);
        adv(p);
        if (!n || !(n->a = parse_tuple(p, 0, 1, NULL, 0))) return NULL;
        if (cur(p)->type != JT_VAR_END) return unexpected(p, "'}}'");
        adv(p);
        return n;
    case JT_BLOCK_BEGIN:
        break;
    default:
        return unexpected(p, "text or a tag");
    }
    adv(p);
    const struct jinja_tok *kw = cur(p);
    if (kw->type != JT_NAME) return unexpected(p, "a statement name after '{%'");
    adv(p);
    if (tok_is_name(kw, "if")) return parse_if(p, kw);
    if (tok_is_name(kw, "for")) return parse_for(p, kw);
    if (tok_is_name(kw, "set")) return parse_set(p, kw);
    if (tok_is_name(kw, "macro")) return parse_macro(p, kw);
    if (tok_is_name(kw, "with")) return parse_with(p, kw);
    return parse_other(p, kw);
}

struct jinja_node *jinja_parse(const struct jinja_tok *toks, size_t n_toks, struct jinja_arena *mem,
                               struct err *e)
{
    struct parser p = {.t = toks, .n = n_toks, .mem = mem, .e = e};
    int which = 0;
    return parse_body(&p, NULL, &which, "", toks);
}
