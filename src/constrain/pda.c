/* pda — see pda.h. */
#include "constrain/pda.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK 4096 /* nodes */

struct pda_arena {
    struct pda_node **chunks;
    int64_t n_chunks, cap_chunks;
    uint64_t used; /* nodes handed out: chunk used / ARENA_CHUNK, slot used % ARENA_CHUNK */
};

int pda_arena_init(pda_arena **out, struct err *e)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : err_set(e, "out of memory");
}

void pda_arena_free(pda_arena *a)
{
    if (!a) return;
    for (int64_t i = 0; i < a->n_chunks; i++)
        free(a->chunks[i]);
    free(a->chunks);
    free(a);
}

uint64_t pda_mark(const pda_arena *a)
{
    return a->used;
}
void pda_release(pda_arena *a, uint64_t m)
{
    if (m < a->used) a->used = m;
}

static struct pda_node *node_alloc(pda_arena *a)
{
    int64_t c = (int64_t)(a->used / ARENA_CHUNK);
    if (c == a->n_chunks) {
        if (a->n_chunks == a->cap_chunks) {
            int64_t cap = a->cap_chunks ? a->cap_chunks * 2 : 16;
            struct pda_node **ch = realloc(a->chunks, (size_t)cap * sizeof *ch);
            if (!ch) return NULL;
            a->chunks = ch;
            a->cap_chunks = cap;
        }
        a->chunks[a->n_chunks] = malloc(ARENA_CHUNK * sizeof **a->chunks);
        if (!a->chunks[a->n_chunks]) return NULL;
        a->n_chunks++;
    }
    return &a->chunks[c][a->used++ % ARENA_CHUNK];
}

static uint64_t frame_hash(uint64_t below, int32_t rule, int32_t state, int fresh)
{
    uint64_t z = below + 0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)rule * 2 + (uint64_t)fresh + 1) +
                 0xbf58476d1ce4e5b9ull * (uint64_t)(uint32_t)state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A new frame on top of parent; NULL on out of memory. */
static const struct pda_node *frame_new(pda_arena *a, const struct pda_node *parent, int32_t rule,
                                        int32_t state, int fresh)
{
    struct pda_node *n = node_alloc(a);
    if (!n) return NULL;
    n->parent = parent;
    n->rule = rule;
    n->state = state;
    n->fresh = (uint8_t)fresh;
    n->depth = (uint16_t)(parent ? parent->depth + 1 : 1);
    n->hash = frame_hash(parent ? parent->hash : 0x51ed2701u, rule, state, fresh);
    return n;
}

/* Order of stacks: hash, then frames top down. 0 iff the stacks are equal. */
static int stack_cmp(const struct pda_node *x, const struct pda_node *y)
{
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    while (x && y && x != y) {
        if (x->rule != y->rule) return x->rule < y->rule ? -1 : 1;
        if (x->state != y->state) return x->state < y->state ? -1 : 1;
        if (x->fresh != y->fresh) return x->fresh < y->fresh ? -1 : 1;
        x = x->parent;
        y = y->parent;
    }
    if (x == y) return 0;
    return x ? 1 : -1;
}

/* Inserts s into out keeping the stacks sorted and unique. */
static void config_add(struct pda_config *out, const struct pda_node *s)
{
    int32_t i = out->n;
    while (i > 0) {
        int c = stack_cmp(out->stack[i - 1], s);
        if (c == 0) return;
        if (c < 0) break;
        i--;
    }
    if (out->n == PDA_MAX_STACKS) {
        out->overflow = 1;
        return;
    }
    memmove(out->stack + i + 1, out->stack + i, (size_t)(out->n - i) * sizeof *out->stack);
    out->stack[i] = s;
    out->n++;
}

/* Adds to out every stack reachable from the frame n without reading (see Closure in pda.h). */
static int closure(const struct grammar *g, pda_arena *a, const struct pda_node *n, struct pda_config *out)
{
    const struct grammar_rule *r = &g->rules[n->rule];
    uint8_t f = r->flags[n->state];
    if (f & GRAMMAR_BYTES) config_add(out, n);
    if (f & GRAMMAR_CALLS)
        for (int32_t k = r->call_at[n->state]; k < r->call_at[n->state + 1]; k++) {
            const struct grammar_call *c = &r->calls[k];
            const struct pda_node *caller = n->parent;
            if (!(r->flags[c->to] & GRAMMAR_FINAL_ONLY)) {
                if (!(caller = frame_new(a, n->parent, n->rule, c->to, 0))) return -1;
            }
            if ((caller ? caller->depth : 0) >= PDA_MAX_DEPTH) {
                out->overflow = 1;
                continue;
            }
            const struct pda_node *callee = frame_new(a, caller, c->rule, 0, 1);
            if (!callee || closure(g, a, callee, out)) return -1;
        }
    if ((f & GRAMMAR_ACCEPT) && !n->fresh) {
        if (!n->parent)
            out->accept = 1;
        else if (closure(g, a, n->parent, out))
            return -1;
    }
    return 0;
}

int pda_start(const struct grammar *g, pda_arena *a, struct pda_config *out)
{
    out->n = 0;
    out->overflow = 0;
    out->accept = (uint8_t)g->rules[0].nullable;
    const struct pda_node *root = frame_new(a, NULL, 0, 0, 1);
    return root ? closure(g, a, root, out) : -1;
}

int pda_step(const struct grammar *g, pda_arena *a, const struct pda_config *in, uint8_t b,
             struct pda_config *out)
{
    out->n = 0;
    out->accept = 0;
    out->overflow = 0;
    for (int32_t i = 0; i < in->n; i++) {
        const struct pda_node *s = in->stack[i];
        int32_t t = grammar_next(&g->rules[s->rule], s->state, b);
        if (t < 0) continue;
        const struct pda_node *n = frame_new(a, s->parent, s->rule, t, 0);
        if (!n || closure(g, a, n, out)) return -1;
    }
    return 0;
}

/* ---- encoding ---- */

static size_t put_leb(uint8_t *buf, size_t cap, size_t at, uint32_t v)
{
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        if (v) b |= 0x80;
        if (at < cap) buf[at] = b;
        at++;
    } while (v);
    return at;
}

size_t pda_encode(const struct pda_config *c, uint8_t *buf, size_t cap)
{
    size_t at = 0;
    uint8_t head[2] = {c->accept, (uint8_t)c->n};
    for (int k = 0; k < 2; k++, at++)
        if (at < cap) buf[at] = head[k];
    for (int32_t i = 0; i < c->n; i++) {
        const struct pda_node *s = c->stack[i];
        if (at < cap) buf[at] = (uint8_t)s->depth;
        at++;
        for (; s; s = s->parent) {
            at = put_leb(buf, cap, at, (uint32_t)s->rule * 2 + s->fresh);
            at = put_leb(buf, cap, at, (uint32_t)s->state);
        }
    }
    return at;
}

static int get_leb(const uint8_t *buf, size_t len, size_t *at, uint32_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (*at >= len) return -1;
        uint8_t b = buf[(*at)++];
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (x > UINT32_MAX) return -1;
            *v = (uint32_t)x;
            return 0;
        }
    }
    return -1;
}

/* Reads one stack (depth frames, top first) and rebuilds it bottom up. */
static const struct pda_node *decode_stack(const struct grammar *g, pda_arena *a, const uint8_t *buf,
                                           size_t len, size_t *at, struct err *e)
{
    uint32_t rule[PDA_MAX_DEPTH], state[PDA_MAX_DEPTH];
    if (*at >= len) return err_set(e, "constraint state: cut short"), NULL;
    int depth = buf[(*at)++];
    if (depth < 1 || depth > PDA_MAX_DEPTH)
        return err_set(e, "constraint state: stack depth %d", depth), NULL;
    for (int k = 0; k < depth; k++) {
        if (get_leb(buf, len, at, &rule[k]) || get_leb(buf, len, at, &state[k]))
            return err_set(e, "constraint state: cut short"), NULL;
        uint32_t r = rule[k] >> 1;
        if (r >= (uint32_t)g->n_rules || state[k] >= (uint32_t)g->rules[r].n_states)
            return err_set(e, "constraint state: frame (%u, %u) is not in the grammar", r, state[k]), NULL;
        if ((rule[k] & 1) && k > 0) return err_set(e, "constraint state: a fresh frame below the top"), NULL;
    }
    const struct pda_node *n = NULL;
    for (int k = depth - 1; k >= 0; k--)
        if (!(n = frame_new(a, n, (int32_t)(rule[k] >> 1), (int32_t)state[k], (int)(rule[k] & 1))))
            return err_set(e, "out of memory"), NULL;
    return n;
}

int pda_decode(const struct grammar *g, pda_arena *a, const uint8_t *buf, size_t len, struct pda_config *out,
               struct err *e)
{
    if (len < 2 || buf[0] > 1 || buf[1] > PDA_MAX_STACKS) return err_set(e, "constraint state: bad header");
    out->accept = buf[0];
    out->overflow = 0;
    out->n = 0;
    size_t at = 2;
    for (int i = 0; i < buf[1]; i++) {
        const struct pda_node *s = decode_stack(g, a, buf, len, &at, e);
        if (!s) return -1;
        out->stack[out->n++] = s;
    }
    if (at != len) return err_set(e, "constraint state: %zu trailing bytes", len - at);
    return pda_check(g, out, e);
}

int pda_check(const struct grammar *g, const struct pda_config *c, struct err *e)
{
    if (c->n < 0 || c->n > PDA_MAX_STACKS) return err_set(e, "pda: %d stacks", c->n);
    for (int32_t i = 0; i < c->n; i++) {
        const struct pda_node *s = c->stack[i];
        if (i > 0 && stack_cmp(c->stack[i - 1], s) >= 0)
            return err_set(e, "pda: stacks %d and %d out of order", i - 1, i);
        if (!(g->rules[s->rule].flags[s->state] & GRAMMAR_BYTES))
            return err_set(e, "pda: stack %d: top state %d of rule '%s' reads no byte", i, s->state,
                           g->rules[s->rule].name);
        int depth = 0;
        for (const struct pda_node *n = s; n; n = n->parent, depth++) {
            if (n->rule < 0 || n->rule >= g->n_rules || n->state < 0 ||
                n->state >= g->rules[n->rule].n_states)
                return err_set(e, "pda: stack %d: frame (%d, %d) not in the grammar", i, n->rule, n->state);
            if (n != s && n->fresh) return err_set(e, "pda: stack %d: a fresh frame below the top", i);
            if (n->depth != (n->parent ? n->parent->depth + 1 : 1))
                return err_set(e, "pda: stack %d: bad depth", i);
        }
        if (depth > PDA_MAX_DEPTH) return err_set(e, "pda: stack %d: %d frames", i, depth);
    }
    return 0;
}
