/* expr — see expr.h. The pool is a bump allocator over 64 KiB chunks (large requests get their own chunk);
 * nothing is freed before the whole grammar is.
 */
#include "constrain/expr.h"

#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

#define POOL_CHUNK (64 * 1024)

struct pool_chunk {
    struct pool_chunk *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
};

struct expr_pool {
    struct pool_chunk *chunks;
    int64_t n_nodes;
    int failed; /* 1: over the node budget, 2: out of memory */
};

static void *pool_alloc(struct expr_pool *p, size_t n)
{
    if (p->failed) return NULL;
    n = (n + 15) & ~(size_t)15;
    struct pool_chunk *c = p->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > POOL_CHUNK ? n : POOL_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c) {
            p->failed = 2;
            return NULL;
        }
        c->used = 0;
        c->cap = cap;
        c->next = p->chunks;
        p->chunks = c;
    }
    void *out = (char *)c->data + c->used;
    c->used += n;
    return out;
}

static struct expr *node_new(struct expr_rules *r, enum expr_op op)
{
    struct expr_pool *p = r->pool;
    if (!p || p->failed) return NULL;
    if (++p->n_nodes > EXPR_MAX_NODES) {
        p->failed = 1;
        return NULL;
    }
    struct expr *x = pool_alloc(p, sizeof *x);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    x->op = op;
    return x;
}

int expr_rules_init(struct expr_rules *r, struct err *e)
{
    memset(r, 0, sizeof *r);
    r->pool = calloc(1, sizeof *r->pool);
    if (!r->pool) return err_set(e, "out of memory");
    return 0;
}

void expr_rules_free(struct expr_rules *r)
{
    if (!r) return;
    if (r->pool) {
        struct pool_chunk *c = r->pool->chunks;
        while (c) {
            struct pool_chunk *n = c->next;
            free(c);
            c = n;
        }
        free(r->pool);
    }
    for (int32_t i = 0; i < r->n; i++)
        free(r->names[i]);
    free(r->names);
    free(r->bodies);
    memset(r, 0, sizeof *r);
}

int32_t expr_rule_id(struct expr_rules *r, const char *name, size_t len)
{
    for (int32_t i = 0; i < r->n; i++)
        if (strlen(r->names[i]) == len && !memcmp(r->names[i], name, len)) return i;
    if (r->pool->failed) return -1;
    if (r->n >= EXPR_MAX_RULES) {
        r->pool->failed = 1;
        return -1;
    }
    if (r->n == r->cap) {
        int32_t cap = r->cap ? r->cap * 2 : 16;
        char **nm = realloc(r->names, (size_t)cap * sizeof *nm);
        if (nm) r->names = nm;
        struct expr **b = realloc(r->bodies, (size_t)cap * sizeof *b);
        if (b) r->bodies = b;
        if (!nm || !b) {
            r->pool->failed = 2;
            return -1;
        }
        r->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        r->pool->failed = 2;
        return -1;
    }
    memcpy(copy, name, len);
    copy[len] = '\0';
    r->names[r->n] = copy;
    r->bodies[r->n] = NULL;
    return r->n++;
}

int expr_rules_error(const struct expr_rules *r, const char *what, struct err *e)
{
    if (!r->pool || r->pool->failed == 2) return err_set(e, "%s: out of memory", what);
    if (r->pool->failed == 1)
        return err_set(e, "%s is too large to compile (more than %d expression nodes or %d rules)", what,
                       EXPR_MAX_NODES, EXPR_MAX_RULES);
    return 0;
}

static int check_node(const struct expr_rules *r, const struct expr *x, int depth, struct err *e)
{
    if (!x) return err_set(e, "expr: NULL node");
    if (depth > 100000) return err_set(e, "expr: tree deeper than 100000");
    switch (x->op) {
    case EXPR_REPEAT:
        if (x->n_kids != 1 || x->min < 0 || x->max < x->min) return err_set(e, "expr: bad REPEAT");
        break;
    case EXPR_CALL:
        if (x->rule < 0 || x->rule >= r->n) return err_set(e, "expr: CALL of rule %d of %d", x->rule, r->n);
        break;
    case EXPR_SEPLIST:
        if (!x->sep || !x->required) return err_set(e, "expr: SEPLIST without separator or flags");
        if (check_node(r, x->sep, depth + 1, e)) return -1;
        break;
    default:
        break;
    }
    for (int32_t i = 0; i < x->n_kids; i++)
        if (check_node(r, x->kids[i], depth + 1, e)) return -1;
    return 0;
}

int expr_check(const struct expr_rules *r, struct err *e)
{
    for (int32_t i = 0; i < r->n; i++)
        if (r->bodies[i] && check_node(r, r->bodies[i], 0, e)) return err_prefix(e, "rule %s", r->names[i]);
    return 0;
}

/* --- constructors --- */

struct expr *expr_empty(struct expr_rules *r)
{
    return node_new(r, EXPR_EMPTY);
}
struct expr *expr_nothing(struct expr_rules *r)
{
    return node_new(r, EXPR_NOTHING);
}

void expr_set_add(struct expr_set *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi && b < 256; b++)
        s->w[b >> 5] |= 1u << (b & 31);
}

int expr_set_has(const struct expr_set *s, unsigned b)
{
    return b < 256 && (s->w[b >> 5] >> (b & 31)) & 1;
}

struct expr *expr_bytes(struct expr_rules *r, const struct expr_set *s)
{
    int any = 0;
    for (int i = 0; i < 8; i++)
        any |= s->w[i] != 0;
    struct expr *x = node_new(r, any ? EXPR_BYTES : EXPR_NOTHING);
    if (x) x->set = *s;
    return x;
}

struct expr *expr_byte_range(struct expr_rules *r, uint8_t lo, uint8_t hi)
{
    struct expr_set s = {{0}};
    expr_set_add(&s, lo, hi);
    return expr_bytes(r, &s);
}

static struct expr *list_node(struct expr_rules *r, enum expr_op op, struct expr *const *kids, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!kids[i]) return NULL;
    struct expr *x = node_new(r, op);
    if (!x) return NULL;
    x->kids = pool_alloc(r->pool, (size_t)(n ? n : 1) * sizeof *x->kids);
    if (!x->kids) return NULL;
    if (n) memcpy(x->kids, kids, (size_t)n * sizeof *kids);
    x->n_kids = n;
    return x;
}

struct expr *expr_cat(struct expr_rules *r, struct expr *const *kids, int32_t n)
{
    if (n == 0) return expr_empty(r);
    if (n == 1) return kids[0];
    return list_node(r, EXPR_CAT, kids, n);
}

struct expr *expr_alt(struct expr_rules *r, struct expr *const *kids, int32_t n)
{
    if (n == 0) return expr_nothing(r);
    if (n == 1) return kids[0];
    return list_node(r, EXPR_ALT, kids, n);
}

struct expr *expr_literal(struct expr_rules *r, const char *bytes, size_t n)
{
    if (n == 0) return expr_empty(r);
    if (n > EXPR_MAX_NODES) {
        if (r->pool) r->pool->failed = 1;
        return NULL;
    }
    struct expr **k = malloc(n * sizeof *k);
    if (!k) {
        r->pool->failed = 2;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        k[i] = expr_byte_range(r, (uint8_t)bytes[i], (uint8_t)bytes[i]);
    struct expr *x = expr_cat(r, k, (int32_t)n);
    free(k);
    return x;
}

struct expr *expr_str(struct expr_rules *r, const char *s)
{
    return expr_literal(r, s, strlen(s));
}

struct expr *expr_cat2(struct expr_rules *r, struct expr *a, struct expr *b)
{
    struct expr *k[2] = {a, b};
    return expr_cat(r, k, 2);
}

struct expr *expr_cat3(struct expr_rules *r, struct expr *a, struct expr *b, struct expr *c)
{
    struct expr *k[3] = {a, b, c};
    return expr_cat(r, k, 3);
}

struct expr *expr_alt2(struct expr_rules *r, struct expr *a, struct expr *b)
{
    struct expr *k[2] = {a, b};
    return expr_alt(r, k, 2);
}

struct expr *expr_repeat(struct expr_rules *r, struct expr *kid, int32_t min, int32_t max)
{
    if (!kid || min < 0 || max < min) return NULL;
    if (max == 0) return expr_empty(r);
    if (min == 1 && max == 1) return kid;
    struct expr *x = list_node(r, EXPR_REPEAT, &kid, 1);
    if (x) {
        x->min = min;
        x->max = max;
    }
    return x;
}

struct expr *expr_opt(struct expr_rules *r, struct expr *kid)
{
    return expr_repeat(r, kid, 0, 1);
}

struct expr *expr_call(struct expr_rules *r, int32_t rule)
{
    if (rule < 0) return NULL;
    struct expr *x = node_new(r, EXPR_CALL);
    if (x) x->rule = rule;
    return x;
}

struct expr *expr_seplist(struct expr_rules *r, struct expr *const *kids, const uint8_t *required, int32_t n,
                          struct expr *sep)
{
    if (!sep) return NULL;
    struct expr *x = list_node(r, EXPR_SEPLIST, kids, n);
    if (!x) return NULL;
    x->sep = sep;
    x->required = pool_alloc(r->pool, (size_t)(n ? n : 1));
    if (!x->required) return NULL;
    if (n) memcpy(x->required, required, (size_t)n);
    return x;
}

/* --- code point sets --- */

void expr_cpset_free(struct expr_cpset *s)
{
    free(s->lo);
    free(s->hi);
    memset(s, 0, sizeof *s);
}

int expr_cpset_add(struct expr_cpset *s, uint32_t lo, uint32_t hi)
{
    if (lo > hi || hi > EXPR_MAX_CP) return -1;
    /* find the first range that ends at or after lo - 1 (touching ranges merge) */
    int32_t i = 0;
    while (i < s->n && s->hi[i] + 1 < lo)
        i++;
    int32_t j = i;
    while (j < s->n && s->lo[j] <= hi + 1) {
        if (s->lo[j] < lo) lo = s->lo[j];
        if (s->hi[j] > hi) hi = s->hi[j];
        j++;
    }
    if (j == i) { /* insert at i */
        if (s->n >= EXPR_CPSET_MAX) return -1;
        if (s->n == s->cap) {
            int32_t cap = s->cap ? s->cap * 2 : 8;
            uint32_t *a = realloc(s->lo, (size_t)cap * sizeof *a);
            if (a) s->lo = a;
            uint32_t *b = realloc(s->hi, (size_t)cap * sizeof *b);
            if (b) s->hi = b;
            if (!a || !b) return -1;
            s->cap = cap;
        }
        memmove(s->lo + i + 1, s->lo + i, (size_t)(s->n - i) * sizeof *s->lo);
        memmove(s->hi + i + 1, s->hi + i, (size_t)(s->n - i) * sizeof *s->hi);
        s->n++;
    } else if (j > i + 1) { /* ranges i..j-1 collapse into i */
        memmove(s->lo + i + 1, s->lo + j, (size_t)(s->n - j) * sizeof *s->lo);
        memmove(s->hi + i + 1, s->hi + j, (size_t)(s->n - j) * sizeof *s->hi);
        s->n -= j - i - 1;
    }
    s->lo[i] = lo;
    s->hi[i] = hi;
    return 0;
}

int expr_cpset_negate(struct expr_cpset *s)
{
    struct expr_cpset t = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (s->lo[i] > next && expr_cpset_add(&t, next, s->lo[i] - 1)) goto fail;
        next = s->hi[i] + 1;
    }
    if (next <= EXPR_MAX_CP && expr_cpset_add(&t, next, EXPR_MAX_CP)) goto fail;
    expr_cpset_free(s);
    *s = t;
    return 0;
fail:
    expr_cpset_free(&t);
    return -1;
}

/* UTF-8 sequences of the code points lo..hi (no surrogates inside): splits the range until every piece is
 * one sequence of byte ranges (all code points of one length whose lower bytes span whole ranges), then
 * adds that sequence to alts. */
struct seqs {
    struct expr_rules *r;
    struct expr **alts;
    int32_t n, cap;
    struct expr_set ascii; /* one-byte code points, merged into one BYTES node */
};

static void seqs_push(struct seqs *q, struct expr *x)
{
    if (!x) return;
    if (q->n == q->cap) {
        int32_t cap = q->cap ? q->cap * 2 : 16;
        struct expr **a = realloc(q->alts, (size_t)cap * sizeof *a);
        if (!a) {
            q->r->pool->failed = 2;
            return;
        }
        q->alts = a;
        q->cap = cap;
    }
    q->alts[q->n++] = x;
}

static void utf8_split(struct seqs *q, uint32_t lo, uint32_t hi)
{
    static const uint32_t top[3] = {0x7F, 0x7FF, 0xFFFF};
    if (lo > hi) return;
    for (int i = 0; i < 3; i++)
        if (lo <= top[i] && hi > top[i]) {
            utf8_split(q, lo, top[i]);
            utf8_split(q, top[i] + 1, hi);
            return;
        }
    if (hi <= 0x7F) {
        expr_set_add(&q->ascii, lo, hi);
        return;
    }
    char a[UTF8_MAX_SEQ], b[UTF8_MAX_SEQ];
    int n = (int)utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            utf8_split(q, lo, lo | m);
            utf8_split(q, (lo | m) + 1, hi);
            return;
        }
        if ((hi & m) != m) {
            utf8_split(q, lo, (hi & ~m) - 1);
            utf8_split(q, hi & ~m, hi);
            return;
        }
    }
    utf8_encode(hi, b);
    struct expr *k[UTF8_MAX_SEQ];
    for (int i = 0; i < n; i++)
        k[i] = expr_byte_range(q->r, (uint8_t)a[i], (uint8_t)b[i]);
    seqs_push(q, expr_cat(q->r, k, n));
}

/* The escape a JSON string must use for cp (a quote, backslash or control character). */
static void json_escape_of(uint32_t cp, char *out)
{
    static const char hex[] = "0123456789abcdef";
    switch (cp) {
    case '"':
        strcpy(out, "\\\"");
        return;
    case '\\':
        strcpy(out, "\\\\");
        return;
    case '\n':
        strcpy(out, "\\n");
        return;
    case '\t':
        strcpy(out, "\\t");
        return;
    case '\r':
        strcpy(out, "\\r");
        return;
    case '\b':
        strcpy(out, "\\b");
        return;
    case '\f':
        strcpy(out, "\\f");
        return;
    default:
        out[0] = '\\', out[1] = 'u', out[2] = '0', out[3] = '0';
        out[4] = hex[(cp >> 4) & 15], out[5] = hex[cp & 15], out[6] = '\0';
    }
}

static int needs_json_escape(uint32_t cp)
{
    return cp < 0x20 || cp == '"' || cp == '\\';
}

static void add_range(struct seqs *q, uint32_t lo, uint32_t hi, int json_escape)
{
    if (json_escape) /* the escaped code points below 0x80 come out of the raw range */
        for (uint32_t c = lo; c <= hi && c < 0x80; c++)
            if (needs_json_escape(c)) {
                char esc[8];
                json_escape_of(c, esc);
                seqs_push(q, expr_str(q->r, esc));
                if (c > lo) add_range(q, lo, c - 1, 0);
                if (c < hi) add_range(q, c + 1, hi, json_escape);
                return;
            }
    if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates never match */
        if (lo < 0xD800) utf8_split(q, lo, 0xD7FF);
        if (hi > 0xDFFF) utf8_split(q, 0xE000, hi);
        return;
    }
    utf8_split(q, lo, hi);
}

struct expr *expr_from_cpset(struct expr_rules *r, const struct expr_cpset *s, int json_escape)
{
    struct seqs q = {r, NULL, 0, 0, {{0}}};
    for (int32_t i = 0; i < s->n; i++)
        add_range(&q, s->lo[i], s->hi[i], json_escape);
    int any = 0;
    for (int i = 0; i < 8; i++)
        any |= q.ascii.w[i] != 0;
    if (any) seqs_push(&q, expr_bytes(r, &q.ascii));
    struct expr *x = r->pool->failed ? NULL : expr_alt(r, q.alts, q.n);
    free(q.alts);
    return x;
}

struct expr *expr_codepoint(struct expr_rules *r, uint32_t cp, int json_escape)
{
    if (json_escape && needs_json_escape(cp)) {
        char esc[8];
        json_escape_of(cp, esc);
        return expr_str(r, esc);
    }
    char b[UTF8_MAX_SEQ];
    size_t n = utf8_encode(cp, b);
    return n ? expr_literal(r, b, n) : expr_nothing(r);
}
