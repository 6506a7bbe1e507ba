/* lookup — one open-addressing table per n-gram length n (1..LOOKUP_MAX_N).
 *
 * A slot holds a position p (or LOOKUP_EMPTY): the entry of the n-gram tokens[p - n .. p), whose next token
 * was tokens[p]. The key is not stored: it is read back from the tokens, so a table is 4 bytes a slot.
 *
 * Invariant (checked by lookup_check), for each n:
 *  - every slot is LOOKUP_EMPTY or a position p in [n, n_indexed), reachable from its n-gram's hash by
 *    linear probing without crossing an empty slot; no two slots hold the same n-gram;
 *  - every position p in [n, n_indexed) has its n-gram in the table, at a position p' >= p (the most
 *    recent occurrence wins);
 *  - the table counts its entries, and is at most half full (cap a power of two).
 * And of the last proposal: src (where its draft was copied from) < at (n_tokens then) <= n_indexed, or
 * src = at = LOOKUP_EMPTY when there is none.
 */
#include "engine/lookup.h"

#include <stdlib.h>
#include <string.h>

#define LOOKUP_EMPTY (-1)
#define LOOKUP_CAP0 64u
#define LOOKUP_BATCH 16 /* positions whose slots lookup_update prefetches together */
#define LOOKUP_N_AT(p) ((p) < LOOKUP_MAX_N ? (p) : LOOKUP_MAX_N) /* n-grams that end before position p */

struct lookup_table {
    int32_t *slot; /* (cap) positions or LOOKUP_EMPTY */
    uint32_t cap, n;
};

struct lookup {
    struct lookup_table t[LOOKUP_MAX_N]; /* t[n - 1]: n-grams */
    int32_t n_indexed;
    int32_t src, at; /* the last proposal: its draft's source position, and n_tokens then */
};

/* The hash of the n-gram ending just before end (tokens end[-n] .. end[-1]), taken from its last token back
 * to its first, so that the 1-, 2- and 3-grams ending at one position share their steps (gram_hashes). */
static uint64_t hash_step(uint64_t h, int32_t tok)
{
    h = (h ^ (uint32_t)tok) * 0xbf58476d1ce4e5b9ull;
    return h ^ h >> 31;
}

/* h[n - 1] = the hash of the n-gram ending before end, for n = 1 .. n_max. */
static void gram_hashes(const int32_t *end, int n_max, uint64_t *h)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int n = 1; n <= n_max; n++) h[n - 1] = x = hash_step(x, end[-n]);
}

static uint64_t gram_hash(const int32_t *end, int n)
{
    uint64_t h[LOOKUP_MAX_N];
    gram_hashes(end, n, h);
    return h[n - 1];
}

static int table_init(struct lookup_table *t, uint32_t cap)
{
    t->slot = malloc((size_t)cap * sizeof *t->slot);
    if (!t->slot) return -1;
    memset(t->slot, 0xff, (size_t)cap * sizeof *t->slot); /* every slot LOOKUP_EMPTY (-1) */
    t->cap = cap;
    t->n = 0;
    return 0;
}

lookup *lookup_new(void)
{
    lookup *ix = calloc(1, sizeof *ix);
    if (!ix) return NULL;
    ix->src = ix->at = LOOKUP_EMPTY;
    for (int n = 1; n <= LOOKUP_MAX_N; n++)
        if (table_init(&ix->t[n - 1], LOOKUP_CAP0)) {
            lookup_free(ix);
            return NULL;
        }
    return ix;
}

void lookup_free(lookup *ix)
{
    if (!ix) return;
    for (int n = 0; n < LOOKUP_MAX_N; n++) free(ix->t[n].slot);
    free(ix);
}

int32_t lookup_n_indexed(const lookup *ix)
{
    return ix->n_indexed;
}

static int gram_equal(const int32_t *a, const int32_t *b, int n)
{
    for (int k = 0; k < n; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

/* The slot holding the n-gram ending just before end, or the empty slot where it would go; h its hash. */
static uint32_t table_find_h(const struct lookup_table *t, const int32_t *tokens, const int32_t *end, int n,
                             uint64_t h)
{
    uint32_t mask = t->cap - 1, i = (uint32_t)h & mask;
    for (;;) {
        int32_t p = t->slot[i];
        if (p == LOOKUP_EMPTY || gram_equal(tokens + p - n, end - n, n)) return i;
        i = (i + 1) & mask;
    }
}

static uint32_t table_find(const struct lookup_table *t, const int32_t *tokens, const int32_t *end, int n)
{
    return table_find_h(t, tokens, end, n, gram_hash(end, n));
}

/* Grows the table to hold `need` entries at a quarter load (a power of two), so that as many again fit
 * before it grows next (a sequence's tokens arrive a few at a time: each growth re-inserts every entry),
 * and re-inserts its entries (each n-gram is in it once). */
static int table_grow(struct lookup_table *t, const int32_t *tokens, int n, uint32_t need)
{
    struct lookup_table g;
    uint32_t cap = t->cap;
    while (cap / 4 < need) {
        if (cap > UINT32_MAX / 8) return -1;
        cap *= 2;
    }
    if (table_init(&g, cap)) return -1;
    for (uint32_t i = 0; i < t->cap; i++) {
        int32_t p = t->slot[i];
        if (p == LOOKUP_EMPTY) continue;
        g.slot[table_find(&g, tokens, tokens + p, n)] = p;
        g.n++;
    }
    free(t->slot);
    *t = g;
    return 0;
}

int lookup_update(lookup *ix, const int32_t *tokens, int32_t n_tokens)
{
    if (n_tokens <= ix->n_indexed) return 0;
    /* room for every new token at once (a prompt is indexed in one call): one rehash, not one per doubling,
     * and none inside the loop below, whose slot numbers depend on the tables' sizes */
    const uint32_t add = (uint32_t)(n_tokens - ix->n_indexed);
    for (int n = 1; n <= LOOKUP_MAX_N; n++) {
        struct lookup_table *t = &ix->t[n - 1];
        if ((uint64_t)(t->n + add) * 2 <= t->cap) continue;
        if (add >= UINT32_MAX / 4 || table_grow(t, tokens, n, t->n + add)) return -1;
    }
    /* LOOKUP_BATCH positions at a time: first every slot their n-grams hash to is fetched into the cache,
     * then they are inserted in order, so that the misses of a table not touched for a while overlap */
    for (int32_t p0 = ix->n_indexed; p0 < n_tokens; p0 += LOOKUP_BATCH) {
        const int32_t p1 = n_tokens - p0 < LOOKUP_BATCH ? n_tokens : p0 + LOOKUP_BATCH;
        uint64_t h[LOOKUP_BATCH][LOOKUP_MAX_N];
        for (int32_t p = p0; p < p1; p++) {
            gram_hashes(tokens + p, LOOKUP_N_AT(p), h[p - p0]);
            for (int n = 1; n <= LOOKUP_N_AT(p); n++) {
                const struct lookup_table *t = &ix->t[n - 1];
                __builtin_prefetch(&t->slot[(uint32_t)h[p - p0][n - 1] & (t->cap - 1)], 1);
            }
        }
        for (int32_t p = p0; p < p1; p++)
            for (int n = 1; n <= LOOKUP_N_AT(p); n++) {
                struct lookup_table *t = &ix->t[n - 1];
                uint32_t i = table_find_h(t, tokens, tokens + p, n, h[p - p0][n - 1]);
                if (t->slot[i] == LOOKUP_EMPTY) t->n++;
                t->slot[i] = p; /* p is the most recent occurrence */
            }
        ix->n_indexed = p1;
    }
    return 0;
}

/* The position the draft continues from when the tokens appended since the last proposal all equal the
 * tokens its source went on with (src + i < at + i <= n_tokens: always known), else LOOKUP_EMPTY. Called
 * with n_tokens == n_indexed >= at. */
static int32_t continued_source(const lookup *ix, const int32_t *tokens, int32_t n_tokens)
{
    if (ix->src == LOOKUP_EMPTY) return LOOKUP_EMPTY;
    for (int32_t i = 0; i < n_tokens - ix->at; i++)
        if (tokens[ix->at + i] != tokens[ix->src + i]) return LOOKUP_EMPTY;
    return ix->src + (n_tokens - ix->at);
}

/* The source position of the draft found by the longest earlier n-gram (n into *n), or LOOKUP_EMPTY. */
static int32_t ngram_source(const lookup *ix, const int32_t *tokens, int32_t n_tokens, int32_t *n_out)
{
    /* an earlier occurrence needs at least one token before the suffix: n < n_tokens */
    uint64_t h[LOOKUP_MAX_N];
    gram_hashes(tokens + n_tokens, LOOKUP_N_AT(n_tokens - 1), h);
    for (int n = LOOKUP_N_AT(n_tokens - 1); n >= 1; n--) {
        const struct lookup_table *t = &ix->t[n - 1];
        int32_t p = t->slot[table_find_h(t, tokens, tokens + n_tokens, n, h[n - 1])];
        if (p == LOOKUP_EMPTY) continue;
        *n_out = n;
        return p;
    }
    return LOOKUP_EMPTY;
}

int32_t lookup_propose(lookup *ix, const int32_t *tokens, int32_t n_tokens, int32_t max_draft, int32_t *draft,
                       int32_t *match_n)
{
    if (match_n) *match_n = 0;
    if (max_draft < 1 || n_tokens != ix->n_indexed || n_tokens < 2) return 0;
    int32_t n = 0, p = continued_source(ix, tokens, n_tokens);
    if (p == LOOKUP_EMPTY) p = ngram_source(ix, tokens, n_tokens, &n);
    if (p == LOOKUP_EMPTY) {
        ix->src = ix->at = LOOKUP_EMPTY;
        return 0;
    }
    ix->src = p, ix->at = n_tokens;
    /* p < n_tokens: the copy source runs on into the draft when it reaches the end of the tokens */
    for (int32_t m = 0; m < max_draft; m++) {
        int32_t src = p + m;
        draft[m] = src < n_tokens ? tokens[src] : draft[src - n_tokens];
    }
    if (match_n) *match_n = n;
    return max_draft;
}

int lookup_check(const lookup *ix, const int32_t *tokens, struct err *e)
{
    if ((ix->src == LOOKUP_EMPTY) != (ix->at == LOOKUP_EMPTY) ||
        (ix->src != LOOKUP_EMPTY && (ix->src < 0 || ix->src >= ix->at || ix->at > ix->n_indexed)))
        return err_set(e, "lookup_check: last proposal's source %d, made at %d of %d tokens", (int)ix->src,
                       (int)ix->at, (int)ix->n_indexed);
    for (int n = 1; n <= LOOKUP_MAX_N; n++) {
        const struct lookup_table *t = &ix->t[n - 1];
        if (!t->cap || (t->cap & (t->cap - 1)) || t->n * 2 > t->cap)
            return err_set(e, "lookup_check: %d-gram table has %u entries in %u slots", n, t->n, t->cap);
        uint32_t count = 0;
        for (uint32_t i = 0; i < t->cap; i++) {
            int32_t p = t->slot[i];
            if (p == LOOKUP_EMPTY) continue;
            count++;
            if (p < n || p >= ix->n_indexed)
                return err_set(e, "lookup_check: %d-gram slot %u holds position %d of %d", n, i, (int)p,
                               (int)ix->n_indexed);
            if (table_find(t, tokens, tokens + p, n) != i)
                return err_set(e, "lookup_check: %d-gram at %d is not reachable at slot %u (or is there twice)", n,
                               (int)p, i);
        }
        if (count != t->n) return err_set(e, "lookup_check: %d-gram table counts %u entries, holds %u", n, t->n, count);
        for (int32_t p = n; p < ix->n_indexed; p++) {
            int32_t q = t->slot[table_find(t, tokens, tokens + p, n)];
            if (q < p)
                return err_set(e, "lookup_check: the %d-gram ending at %d is indexed at %d", n, (int)(p - 1), (int)q);
        }
    }
    return 0;
}
