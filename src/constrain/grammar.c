/* grammar — see grammar.h. Per rule: expr -> Thompson NFA (edges labelled by a byte set, epsilon, or a
 * call) -> byte classes -> DFA by subset construction. Failures while building are sticky (b->failed) and
 * reported once per rule.
 */
#include "constrain/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LABEL_EPS (-1)
#define LABEL_CALL(rule) (-2 - (rule)) /* <= -2 */
#define LABEL_RULE(label) (-2 - (label))

enum { FAIL_NONE, FAIL_BIG, FAIL_OOM };

struct nfa_edge {
    int32_t from, to, label;
};

/* One rule's NFA while it is built. */
struct nfa {
    int32_t n_states;
    struct nfa_edge *edges;
    int64_t n_edges, cap_edges;
    struct expr_set *sets; /* interned byte sets: labels >= 0 index them */
    int32_t n_sets, cap_sets;
    int32_t *set_slot; /* open addressing: set index + 1, 0 empty */
    int32_t n_slots;
    const uint8_t *nullable; /* (n_rules) */
    int failed;
};

static int32_t nfa_state(struct nfa *a)
{
    if (a->n_states >= GRAMMAR_MAX_NFA) {
        if (!a->failed) a->failed = FAIL_BIG;
        return 0;
    }
    return a->n_states++;
}

static void nfa_edge(struct nfa *a, int32_t from, int32_t to, int32_t label)
{
    if (a->failed) return;
    if (a->n_edges == a->cap_edges) {
        int64_t cap = a->cap_edges ? a->cap_edges * 2 : 256;
        struct nfa_edge *e = realloc(a->edges, (size_t)cap * sizeof *e);
        if (!e) {
            a->failed = FAIL_OOM;
            return;
        }
        a->edges = e;
        a->cap_edges = cap;
    }
    a->edges[a->n_edges++] = (struct nfa_edge){from, to, label};
}

static uint64_t set_hash(const struct expr_set *s)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ s->w[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int set_grow(struct nfa *a)
{
    int32_t cap = a->cap_sets ? a->cap_sets * 2 : 64;
    struct expr_set *s = realloc(a->sets, (size_t)cap * sizeof *s);
    if (!s) return -1;
    a->sets = s;
    a->cap_sets = cap;
    int32_t n_slots = cap * 2;
    int32_t *slot = calloc((size_t)n_slots, sizeof *slot);
    if (!slot) return -1;
    for (int32_t k = 0; k < a->n_sets; k++) {
        uint64_t h = set_hash(&a->sets[k]);
        int32_t i = (int32_t)(h % (uint64_t)n_slots);
        while (slot[i])
            i = (i + 1) % n_slots;
        slot[i] = k + 1;
    }
    free(a->set_slot);
    a->set_slot = slot;
    a->n_slots = n_slots;
    return 0;
}

/* The label of byte set s (interned). */
static int32_t nfa_set(struct nfa *a, const struct expr_set *s)
{
    if (a->failed) return 0;
    if (a->n_sets == a->cap_sets && set_grow(a)) {
        a->failed = FAIL_OOM;
        return 0;
    }
    int32_t i = (int32_t)(set_hash(s) % (uint64_t)a->n_slots);
    while (a->set_slot[i]) {
        int32_t k = a->set_slot[i] - 1;
        if (!memcmp(&a->sets[k], s, sizeof *s)) return k;
        i = (i + 1) % a->n_slots;
    }
    a->sets[a->n_sets] = *s;
    a->set_slot[i] = a->n_sets + 1;
    return a->n_sets++;
}

static int32_t nfa_build(struct nfa *a, const struct expr *x, int32_t from);

static int32_t build_repeat(struct nfa *a, const struct expr *x, int32_t from)
{
    int32_t cur = from;
    for (int32_t i = 0; i < x->min && !a->failed; i++)
        cur = nfa_build(a, x->kids[0], cur);
    if (x->max == EXPR_INF) { /* hub: loop through the kid and back, or leave */
        int32_t hub = nfa_state(a);
        nfa_edge(a, cur, hub, LABEL_EPS);
        int32_t t = nfa_build(a, x->kids[0], hub);
        nfa_edge(a, t, hub, LABEL_EPS);
        return hub;
    }
    int32_t end = nfa_state(a);
    for (int32_t i = x->min; i < x->max && !a->failed; i++) {
        nfa_edge(a, cur, end, LABEL_EPS);
        cur = nfa_build(a, x->kids[0], cur);
    }
    nfa_edge(a, cur, end, LABEL_EPS);
    return end;
}

/* States q0 (nothing emitted yet) and q1 (something emitted) per item boundary; an item after q1 is
 * preceded by the separator. Linear in the items (each item is built at most twice). */
static int32_t build_seplist(struct nfa *a, const struct expr *x, int32_t from)
{
    int32_t q0 = from, q1 = -1;
    for (int32_t i = 0; i < x->n_kids && !a->failed; i++) {
        int32_t n0 = -1, n1 = -1;
        for (int s = 0; s < 2; s++) {
            int32_t src = s ? q1 : q0;
            if (src < 0) continue;
            int32_t t = s ? nfa_build(a, x->sep, src) : src;
            t = nfa_build(a, x->kids[i], t);
            if (n1 < 0) n1 = nfa_state(a);
            nfa_edge(a, t, n1, LABEL_EPS);
            if (x->required[i]) continue;
            int32_t *skip = s ? &n1 : &n0;
            if (*skip < 0) *skip = nfa_state(a);
            nfa_edge(a, src, *skip, LABEL_EPS);
        }
        q0 = n0;
        q1 = n1;
    }
    int32_t end = nfa_state(a);
    if (q0 >= 0) nfa_edge(a, q0, end, LABEL_EPS);
    if (q1 >= 0) nfa_edge(a, q1, end, LABEL_EPS);
    return end;
}

/* Builds x starting at state `from` and returns its end state. Edges only ever enter states created here,
 * so fragments built from one state never leak into each other. */
static int32_t nfa_build(struct nfa *a, const struct expr *x, int32_t from)
{
    if (a->failed) return from;
    switch (x->op) {
    case EXPR_EMPTY:
        return from;
    case EXPR_NOTHING:
        return nfa_state(a); /* nothing leads there */
    case EXPR_BYTES: {
        int32_t s = nfa_state(a);
        nfa_edge(a, from, s, nfa_set(a, &x->set));
        return s;
    }
    case EXPR_CAT: {
        int32_t cur = from;
        for (int32_t i = 0; i < x->n_kids; i++)
            cur = nfa_build(a, x->kids[i], cur);
        return cur;
    }
    case EXPR_ALT: {
        int32_t end = nfa_state(a);
        for (int32_t i = 0; i < x->n_kids; i++)
            nfa_edge(a, nfa_build(a, x->kids[i], from), end, LABEL_EPS);
        return end;
    }
    case EXPR_REPEAT:
        return build_repeat(a, x, from);
    case EXPR_CALL: {
        int32_t s = nfa_state(a);
        nfa_edge(a, from, s, LABEL_CALL(x->rule));
        if (a->nullable[x->rule])
            nfa_edge(a, from, s, LABEL_EPS); /* the call reads >= 1 byte, or is skipped */
        return s;
    }
    case EXPR_SEPLIST:
        return build_seplist(a, x, from);
    }
    return from;
}

static int expr_nullable(const struct expr *x, const uint8_t *rule_nullable)
{
    switch (x->op) {
    case EXPR_EMPTY:
        return 1;
    case EXPR_NOTHING:
    case EXPR_BYTES:
        return 0;
    case EXPR_CAT:
        for (int32_t i = 0; i < x->n_kids; i++)
            if (!expr_nullable(x->kids[i], rule_nullable)) return 0;
        return 1;
    case EXPR_ALT:
        for (int32_t i = 0; i < x->n_kids; i++)
            if (expr_nullable(x->kids[i], rule_nullable)) return 1;
        return 0;
    case EXPR_REPEAT:
        return x->min == 0 || expr_nullable(x->kids[0], rule_nullable);
    case EXPR_CALL:
        return rule_nullable[x->rule];
    case EXPR_SEPLIST:
        for (int32_t i = 0; i < x->n_kids; i++)
            if (x->required[i] && !expr_nullable(x->kids[i], rule_nullable)) return 0;
        return 1;
    }
    return 0;
}

/* ---- subset construction ---- */

/* The DFA of one rule while it is built: NFA state sets interned by content. */
struct dfa_build {
    const struct nfa *a;
    int32_t final;
    int32_t *adj_at, *adj; /* CSR of a->edges by source state: edge indices */
    uint8_t cls[256];
    int32_t n_cls;
    int32_t *set_cls_at, *set_cls; /* classes inside each byte set (CSR) */
    int32_t *items;                /* NFA state sets of the DFA states, concatenated */
    int64_t n_items, cap_items;
    int64_t *set_at; /* (n_states + 1) */
    int32_t n_states, cap_states;
    int32_t *slot; /* open addressing: DFA state + 1 */
    int32_t n_slots;
    uint32_t *mark, gen;          /* (a->n_states) closure visit marks */
    int32_t *stack, *buf, *seeds; /* (a->n_states) scratch */
    int32_t *next;                /* (n_states, n_cls) */
    int failed;
    int64_t budget; /* DFA states this rule may still add */
    int64_t work;   /* closure and transition work so far (bounded by GRAMMAR_MAX_WORK) */
};

static void compute_classes(struct dfa_build *d)
{
    const struct nfa *a = d->a;
    memset(d->cls, 0, sizeof d->cls);
    d->n_cls = 1;
    for (int32_t k = 0; k < a->n_sets; k++) {
        int16_t map[512];
        memset(map, -1, sizeof map);
        int32_t n = 0;
        uint8_t cls[256];
        for (int b = 0; b < 256; b++) {
            int key = d->cls[b] * 2 + expr_set_has(&a->sets[k], (unsigned)b);
            if (map[key] < 0) map[key] = (int16_t)n++;
            cls[b] = (uint8_t)map[key];
        }
        memcpy(d->cls, cls, sizeof cls);
        d->n_cls = n;
    }
}

static int index_sets_and_edges(struct dfa_build *d)
{
    const struct nfa *a = d->a;
    int32_t rep[256];
    for (int b = 255; b >= 0; b--)
        rep[d->cls[b]] = b;
    d->set_cls_at = malloc((size_t)(a->n_sets + 1) * sizeof(int32_t));
    d->set_cls = malloc(((size_t)a->n_sets * (size_t)d->n_cls + 1) * sizeof(int32_t));
    d->adj_at = calloc((size_t)a->n_states + 1, sizeof(int32_t));
    d->adj = malloc(((size_t)a->n_edges + 1) * sizeof(int32_t));
    if (!d->set_cls_at || !d->set_cls || !d->adj_at || !d->adj) return -1;
    int32_t n = 0;
    for (int32_t k = 0; k < a->n_sets; k++) {
        d->set_cls_at[k] = n;
        for (int32_t c = 0; c < d->n_cls; c++)
            if (expr_set_has(&a->sets[k], (unsigned)rep[c])) d->set_cls[n++] = c;
    }
    d->set_cls_at[a->n_sets] = n;
    for (int64_t i = 0; i < a->n_edges; i++)
        d->adj_at[a->edges[i].from + 1]++;
    for (int32_t s = 0; s < a->n_states; s++)
        d->adj_at[s + 1] += d->adj_at[s];
    int32_t *fill = malloc(((size_t)a->n_states + 1) * sizeof *fill);
    if (!fill) return -1;
    memcpy(fill, d->adj_at, (size_t)a->n_states * sizeof *fill);
    for (int64_t i = 0; i < a->n_edges; i++)
        d->adj[fill[a->edges[i].from]++] = (int32_t)i;
    free(fill);
    return 0;
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* The epsilon closure of seeds[0..n) into d->buf, sorted; returns its size. */
static int32_t closure(struct dfa_build *d, const int32_t *seeds, int32_t n)
{
    if (++d->gen == 0) {
        memset(d->mark, 0, (size_t)d->a->n_states * sizeof *d->mark);
        d->gen = 1;
    }
    int32_t sp = 0, m = 0;
    for (int32_t i = 0; i < n; i++)
        if (d->mark[seeds[i]] != d->gen) {
            d->mark[seeds[i]] = d->gen;
            d->stack[sp++] = seeds[i];
        }
    while (sp) {
        int32_t s = d->stack[--sp];
        d->buf[m++] = s;
        for (int32_t j = d->adj_at[s]; j < d->adj_at[s + 1]; j++) {
            const struct nfa_edge *ed = &d->a->edges[d->adj[j]];
            if (ed->label != LABEL_EPS || d->mark[ed->to] == d->gen) continue;
            d->mark[ed->to] = d->gen;
            d->stack[sp++] = ed->to;
        }
    }
    if (m > 1) qsort(d->buf, (size_t)m, sizeof *d->buf, cmp_i32);
    d->work += m + n;
    return m;
}

static uint64_t items_hash(const int32_t *s, int64_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 31);
}

static int grow_states(struct dfa_build *d)
{
    int32_t cap = d->cap_states ? d->cap_states * 2 : 64;
    int64_t *at = realloc(d->set_at, ((size_t)cap + 1) * sizeof *at);
    if (at) d->set_at = at;
    int32_t *nx = realloc(d->next, (size_t)cap * (size_t)d->n_cls * sizeof *nx);
    if (nx) d->next = nx;
    int32_t *slot = calloc((size_t)cap * 2, sizeof *slot);
    if (!at || !nx || !slot) {
        free(slot);
        return -1;
    }
    for (int32_t s = 0; s < d->n_states; s++) {
        int64_t n = d->set_at[s + 1] - d->set_at[s];
        int32_t i = (int32_t)(items_hash(d->items + d->set_at[s], n) % (uint64_t)(cap * 2));
        while (slot[i])
            i = (i + 1) % (cap * 2);
        slot[i] = s + 1;
    }
    free(d->slot);
    d->slot = slot;
    d->n_slots = cap * 2;
    d->cap_states = cap;
    return 0;
}

/* The DFA state of the NFA set d->buf[0..n) (new ones are appended); -1 on failure. */
static int32_t intern(struct dfa_build *d, int32_t n)
{
    if (d->n_states == d->cap_states && grow_states(d)) goto oom;
    uint64_t h = items_hash(d->buf, n);
    int32_t i = (int32_t)(h % (uint64_t)d->n_slots);
    while (d->slot[i]) {
        int32_t s = d->slot[i] - 1;
        if (d->set_at[s + 1] - d->set_at[s] == n &&
            !memcmp(d->items + d->set_at[s], d->buf, (size_t)n * sizeof *d->buf))
            return s;
        i = (i + 1) % d->n_slots;
    }
    if (d->budget-- <= 0 || d->n_items + n > GRAMMAR_MAX_ITEMS || d->work > GRAMMAR_MAX_WORK ||
        (int64_t)(d->n_states + 1) * d->n_cls > GRAMMAR_MAX_CELLS) {
        d->failed = FAIL_BIG;
        return -1;
    }
    if (d->n_items + n > d->cap_items) {
        int64_t cap = d->cap_items ? d->cap_items : 1024;
        while (cap < d->n_items + n)
            cap *= 2;
        int32_t *it = realloc(d->items, (size_t)cap * sizeof *it);
        if (!it) goto oom;
        d->items = it;
        d->cap_items = cap;
    }
    int32_t s = d->n_states++;
    d->set_at[s] = d->n_items;
    memcpy(d->items + d->n_items, d->buf, (size_t)n * sizeof *d->buf);
    d->n_items += n;
    d->set_at[s + 1] = d->n_items;
    d->slot[i] = s + 1;
    for (int32_t c = 0; c < d->n_cls; c++)
        d->next[(int64_t)s * d->n_cls + c] = -1;
    return s;
oom:
    d->failed = FAIL_OOM;
    return -1;
}

/* Calls of the DFA states as they are expanded (state order). */
struct call_list {
    struct grammar_call *calls;
    int32_t n, cap;
    int32_t *at; /* (n_states + 1) once done */
};

static int call_push(struct call_list *cl, int32_t rule, int32_t to)
{
    if (cl->n == cl->cap) {
        int32_t cap = cl->cap ? cl->cap * 2 : 64;
        struct grammar_call *c = realloc(cl->calls, (size_t)cap * sizeof *c);
        if (!c) return -1;
        cl->calls = c;
        cl->cap = cap;
    }
    cl->calls[cl->n++] = (struct grammar_call){rule, to};
    return 0;
}

/* Scratch of one expansion: (class or rule, target) pairs, grown as needed. */
struct pairs {
    int32_t (*p)[2];
    int64_t n, cap;
};

static int pair_push(struct pairs *q, int32_t key, int32_t to)
{
    if (q->n == q->cap) {
        int64_t cap = q->cap ? q->cap * 2 : 256;
        int32_t(*p)[2] = realloc(q->p, (size_t)cap * sizeof *p);
        if (!p) return -1;
        q->p = p;
        q->cap = cap;
    }
    q->p[q->n][0] = key;
    q->p[q->n][1] = to;
    q->n++;
    return 0;
}

static int cmp_pair(const void *x, const void *y)
{
    const int32_t *a = x, *b = y;
    if (a[0] != b[0]) return (a[0] > b[0]) - (a[0] < b[0]);
    return (a[1] > b[1]) - (a[1] < b[1]);
}

/* The DFA state reached from the pairs q->p[i..j) (same key): the closure of their targets. */
static int32_t target_of(struct dfa_build *d, const struct pairs *q, int64_t i, int64_t j)
{
    int32_t m = 0;
    for (int64_t k = i; k < j; k++)
        if (k == i || q->p[k][1] != q->p[k - 1][1]) d->seeds[m++] = q->p[k][1];
    return intern(d, closure(d, d->seeds, m));
}

/* Expands DFA state s: byte transitions (targets of the byte edges per class) and calls (one per rule
 * called, to the closure of every return state). */
static int expand_state(struct dfa_build *d, int32_t s, struct pairs *q, struct call_list *cl)
{
    for (int pass = 0; pass < 2; pass++) { /* 0: bytes, 1: calls */
        q->n = 0;
        for (int64_t k = d->set_at[s]; k < d->set_at[s + 1]; k++) {
            int32_t at = d->items[k];
            for (int32_t j = d->adj_at[at]; j < d->adj_at[at + 1]; j++) {
                const struct nfa_edge *ed = &d->a->edges[d->adj[j]];
                if (pass == 1 && ed->label <= -2 && pair_push(q, LABEL_RULE(ed->label), ed->to)) return -1;
                if (pass == 0 && ed->label >= 0)
                    for (int32_t t = d->set_cls_at[ed->label]; t < d->set_cls_at[ed->label + 1]; t++)
                        if (pair_push(q, d->set_cls[t], ed->to)) return -1;
            }
        }
        d->work += q->n;
        if (d->work > GRAMMAR_MAX_WORK) {
            d->failed = FAIL_BIG;
            return -1;
        }
        if (q->n > 1) qsort(q->p, (size_t)q->n, sizeof *q->p, cmp_pair);
        for (int64_t i = 0, j; i < q->n; i = j) {
            for (j = i; j < q->n && q->p[j][0] == q->p[i][0];)
                j++;
            int32_t to = target_of(d, q, i, j);
            if (to < 0) return -1;
            if (pass == 0)
                d->next[(int64_t)s * d->n_cls + q->p[i][0]] = to;
            else if (call_push(cl, q->p[i][0], to))
                return -1;
        }
    }
    return 0;
}

static void dfa_build_free(struct dfa_build *d)
{
    free(d->adj_at);
    free(d->adj);
    free(d->set_cls_at);
    free(d->set_cls);
    free(d->items);
    free(d->set_at);
    free(d->slot);
    free(d->mark);
    free(d->stack);
    free(d->buf);
    free(d->seeds);
    free(d->next);
}

static void nfa_free(struct nfa *a)
{
    free(a->edges);
    free(a->sets);
    free(a->set_slot);
}

/* Moves the finished DFA of d (and its calls) into rule r and sets the flags. */
static int finish_rule(struct dfa_build *d, struct call_list *cl, struct grammar_rule *r)
{
    memcpy(r->cls, d->cls, sizeof r->cls);
    r->n_cls = d->n_cls;
    r->n_states = d->n_states;
    r->next = d->next;
    d->next = NULL;
    r->flags = calloc((size_t)d->n_states, 1);
    if (!r->flags) return -1;
    r->calls = cl->calls;
    r->call_at = cl->at;
    cl->calls = NULL;
    cl->at = NULL;
    for (int32_t s = 0; s < d->n_states; s++) {
        uint8_t f = 0;
        for (int64_t k = d->set_at[s]; k < d->set_at[s + 1]; k++)
            if (d->items[k] == d->final) f |= GRAMMAR_ACCEPT;
        for (int32_t c = 0; c < d->n_cls; c++)
            if (r->next[(int64_t)s * d->n_cls + c] >= 0) f |= GRAMMAR_BYTES;
        if (r->call_at[s + 1] > r->call_at[s]) f |= GRAMMAR_CALLS;
        if (f == GRAMMAR_ACCEPT) f |= GRAMMAR_FINAL_ONLY;
        r->flags[s] = f;
    }
    return 0;
}

/* Subset construction of the NFA a (start state 0, final state `final`) into rule r. budget: DFA states
 * this rule may add. */
static int determinize(const struct nfa *a, int32_t final, int64_t budget, struct grammar_rule *r)
{
    struct dfa_build d;
    memset(&d, 0, sizeof d);
    struct call_list cl = {0};
    struct pairs q = {0};
    int rc = -1;
    d.a = a;
    d.final = final;
    d.budget = budget;
    compute_classes(&d);
    size_t ns = (size_t)a->n_states + 1;
    d.mark = calloc(ns, sizeof *d.mark);
    d.stack = malloc(ns * sizeof *d.stack);
    d.buf = malloc(ns * sizeof *d.buf);
    d.seeds = malloc(ns * sizeof *d.seeds);
    if (!d.mark || !d.stack || !d.buf || !d.seeds || index_sets_and_edges(&d)) goto oom;
    int32_t start = 0;
    if (intern(&d, closure(&d, &start, 1)) != 0) goto fail;
    int32_t *at = NULL, cap_at = 0;
    for (int32_t s = 0; s < d.n_states; s++) {
        if (s == cap_at) { /* grows geometrically: many states must not cost quadratic copying */
            cap_at = cap_at ? cap_at * 2 : 64;
            int32_t *x = realloc(at, ((size_t)cap_at + 1) * sizeof *x);
            if (!x) goto oom_at;
            at = x;
        }
        at[s] = cl.n;
        if (expand_state(&d, s, &q, &cl)) {
            free(at);
            goto fail;
        }
    }
    int32_t *x = realloc(at, ((size_t)d.n_states + 1) * sizeof *x);
    if (!x) goto oom_at;
    at = x;
    at[d.n_states] = cl.n;
    cl.at = at;
    if (finish_rule(&d, &cl, r)) goto oom;
    rc = 0;
    goto done;
oom_at:
    free(at);
oom:
    d.failed = FAIL_OOM;
fail:
    rc = d.failed == FAIL_BIG ? -2 : -1;
done:
    free(cl.calls);
    free(cl.at);
    free(q.p);
    dfa_build_free(&d);
    return rc;
}

/* Compiles rule i of src into g->rules[i]. */
static int compile_rule(const struct expr_rules *src, const uint8_t *nullable, struct grammar *g, int32_t i,
                        struct err *e)
{
    struct grammar_rule *r = &g->rules[i];
    struct nfa a;
    memset(&a, 0, sizeof a);
    a.nullable = nullable;
    static const struct expr nothing = {.op = EXPR_NOTHING}; /* a rule named but never defined nor called */
    int32_t start = nfa_state(&a);
    int32_t final = nfa_build(&a, src->bodies[i] ? src->bodies[i] : &nothing, start);
    if (a.failed) {
        nfa_free(&a);
        if (a.failed == FAIL_OOM) return err_set(e, "rule '%s': out of memory", r->name);
        return err_set(e, "rule '%s' is too large to compile (more than %d automaton states)", r->name,
                       GRAMMAR_MAX_NFA);
    }
    int rc = determinize(&a, final, GRAMMAR_MAX_STATES - g->n_states, r);
    nfa_free(&a);
    if (rc == -2)
        return err_set(e,
                       "the constraint is too large to compile (its automaton passes %d states, %d cells or %d "
                       "items; at rule '%s')",
                       GRAMMAR_MAX_STATES, GRAMMAR_MAX_CELLS, GRAMMAR_MAX_ITEMS, r->name);
    if (rc) return err_set(e, "rule '%s': out of memory", r->name);
    g->n_states += r->n_states;
    g->n_cells += (int64_t)r->n_states * r->n_cls;
    if (g->n_cells > GRAMMAR_MAX_CELLS)
        return err_set(e,
                       "the constraint is too large to compile (more than %d transition cells; at rule '%s')",
                       GRAMMAR_MAX_CELLS, r->name);
    return 0;
}

static int compute_nullable(const struct expr_rules *src, uint8_t *nullable)
{
    memset(nullable, 0, (size_t)src->n);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t i = 0; i < src->n; i++)
            if (!nullable[i] && src->bodies[i] && expr_nullable(src->bodies[i], nullable))
                nullable[i] = 1, changed = 1;
    }
    return 0;
}

/* Left recursion: a cycle in "rule A's start state calls rule B". DFS with colours (0 new, 1 on the path,
 * 2 done); the message lists the cycle. */
static int left_dfs(const struct grammar *g, int32_t r, uint8_t *colour, int32_t *path, int32_t depth,
                    struct err *e)
{
    colour[r] = 1;
    path[depth] = r;
    const struct grammar_rule *R = &g->rules[r];
    for (int32_t k = R->n_states ? R->call_at[0] : 0; R->n_states && k < R->call_at[1]; k++) {
        int32_t t = R->calls[k].rule;
        if (colour[t] == 1) {
            char msg[512];
            size_t off = 0;
            int32_t from = depth;
            while (from > 0 && path[from] != t)
                from--;
            for (int32_t i = from; i <= depth && off < sizeof msg - 80; i++)
                off += (size_t)snprintf(msg + off, sizeof msg - off, "%s -> ", g->rules[path[i]].name);
            snprintf(msg + off, sizeof msg - off, "%s", g->rules[t].name);
            return err_set(e, "rule '%s' is left-recursive (%s): it can call itself before reading anything",
                           g->rules[t].name, msg);
        }
        if (colour[t] == 0 && left_dfs(g, t, colour, path, depth + 1, e)) return -1;
    }
    colour[r] = 2;
    return 0;
}

static int check_left_recursion(const struct grammar *g, struct err *e)
{
    uint8_t *colour = calloc((size_t)g->n_rules, 1);
    int32_t *path = malloc((size_t)g->n_rules * sizeof *path);
    int rc = 0;
    if (!colour || !path) rc = err_set(e, "out of memory");
    for (int32_t r = 0; !rc && r < g->n_rules; r++)
        if (!colour[r]) rc = left_dfs(g, r, colour, path, 0, e);
    free(colour);
    free(path);
    return rc;
}

/* Every called rule is defined. */
static int check_defined(const struct expr_rules *src, const struct expr *x, struct err *e)
{
    if (x->op == EXPR_CALL && !src->bodies[x->rule])
        return err_set(e, "rule '%s' is used but not defined", src->names[x->rule]);
    if (x->op == EXPR_SEPLIST && check_defined(src, x->sep, e)) return -1;
    for (int32_t i = 0; i < x->n_kids; i++)
        if (check_defined(src, x->kids[i], e)) return -1;
    return 0;
}

int grammar_compile(const struct expr_rules *src, struct grammar **out, struct err *e)
{
    *out = NULL;
    if (src->n < 1 || !src->bodies[0]) return err_set(e, "the grammar has no root rule");
    if (expr_rules_error(src, "the constraint", e)) return -1;
    for (int32_t i = 0; i < src->n; i++)
        if (src->bodies[i] && check_defined(src, src->bodies[i], e)) return -1;
    struct grammar *g = calloc(1, sizeof *g);
    uint8_t *nullable = calloc((size_t)src->n, 1);
    if (!g || !nullable) goto oom;
    g->rules = calloc((size_t)src->n, sizeof *g->rules);
    if (!g->rules) goto oom;
    g->n_rules = src->n;
    compute_nullable(src, nullable);
    for (int32_t i = 0; i < src->n; i++) {
        g->rules[i].name = strdup(src->names[i]);
        if (!g->rules[i].name) goto oom;
        g->rules[i].nullable = nullable[i];
        if (compile_rule(src, nullable, g, i, e)) goto fail;
    }
    if (check_left_recursion(g, e)) goto fail;
    free(nullable);
    *out = g;
    return 0;
oom:
    err_set(e, "out of memory compiling the constraint");
fail:
    free(nullable);
    grammar_free(g);
    return -1;
}

void grammar_free(struct grammar *g)
{
    if (!g) return;
    for (int32_t i = 0; i < g->n_rules; i++) {
        struct grammar_rule *r = &g->rules[i];
        free(r->name);
        free(r->next);
        free(r->flags);
        free(r->call_at);
        free(r->calls);
    }
    free(g->rules);
    free(g);
}

static int check_state(const struct grammar *g, const struct grammar_rule *r, int32_t s, struct err *e)
{
    uint8_t f = 0;
    for (int32_t c = 0; c < r->n_cls; c++) {
        int32_t t = r->next[(int64_t)s * r->n_cls + c];
        if (t < -1 || t >= r->n_states)
            return err_set(e, "state %d: transition to %d of %d", s, t, r->n_states);
        if (t >= 0) f |= GRAMMAR_BYTES;
    }
    if (r->call_at[s] > r->call_at[s + 1]) return err_set(e, "state %d: call offsets decrease", s);
    for (int32_t k = r->call_at[s]; k < r->call_at[s + 1]; k++) {
        const struct grammar_call *c = &r->calls[k];
        if (c->rule < 0 || c->rule >= g->n_rules || c->to < 0 || c->to >= r->n_states)
            return err_set(e, "state %d: call of rule %d returning to %d", s, c->rule, c->to);
        if (k > r->call_at[s] && c->rule <= r->calls[k - 1].rule)
            return err_set(e, "state %d: calls not sorted", s);
        f |= GRAMMAR_CALLS;
    }
    f |= r->flags[s] & GRAMMAR_ACCEPT;
    if (f == GRAMMAR_ACCEPT) f |= GRAMMAR_FINAL_ONLY;
    if (f != r->flags[s]) return err_set(e, "state %d: flags %#x, transitions say %#x", s, r->flags[s], f);
    return 0;
}

int grammar_check(const struct grammar *g, struct err *e)
{
    int64_t n_states = 0;
    for (int32_t i = 0; i < g->n_rules; i++) {
        const struct grammar_rule *r = &g->rules[i];
        if (r->n_states < 1 || r->n_cls < 1) return err_set(e, "rule '%s': no states", r->name);
        for (int b = 0; b < 256; b++)
            if (r->cls[b] >= r->n_cls)
                return err_set(e, "rule '%s': byte %d in class %d of %d", r->name, b, r->cls[b], r->n_cls);
        for (int32_t s = 0; s < r->n_states; s++)
            if (check_state(g, r, s, e)) return err_prefix(e, "rule '%s'", r->name);
        n_states += r->n_states;
    }
    if (n_states != g->n_states)
        return err_set(e, "grammar: %lld states, counted %lld", (long long)g->n_states, (long long)n_states);
    return check_left_recursion(g, e);
}
