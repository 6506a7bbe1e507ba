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
 */
#include "engine/lookup.h"

#include <stdlib.h>

#define LOOKUP_EMPTY (-1)
#define LOOKUP_CAP0 64u

struct lookup_table {
    int32_t *slot; /* (cap) positions or LOOKUP_EMPTY */
    uint32_t cap, n;
};

struct lookup {
    struct lookup_table t[LOOKUP_MAX_N]; /* t[n - 1]: n-grams */
    int32_t n_indexed;
};

static uint64_t gram_hash(const int32_t *g, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)n;
    for (int k = 0; k < n; k++) {
        h = (h ^ (uint32_t)g[k]) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return h;
}

static int table_init(struct lookup_table *t, uint32_t cap)
{
    t->slot = malloc((size_t)cap * sizeof *t->slot);
    if (!t->slot) return -1;
    for (uint32_t i = 0; i < cap; i++) t->slot[i] = LOOKUP_EMPTY;
    t->cap = cap;
    t->n = 0;
    return 0;
}

lookup *lookup_new(void)
{
    lookup *ix = calloc(1, sizeof *ix);
    if (!ix) return NULL;
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

/* The slot holding gram (n tokens), or the empty slot where it would go. */
static uint32_t table_find(const struct lookup_table *t, const int32_t *tokens, const int32_t *gram, int n)
{
    uint32_t mask = t->cap - 1, i = (uint32_t)gram_hash(gram, n) & mask;
    for (;;) {
        int32_t p = t->slot[i];
        if (p == LOOKUP_EMPTY || gram_equal(tokens + p - n, gram, n)) return i;
        i = (i + 1) & mask;
    }
}

/* Grows the table to hold `need` entries at half load (a power of two) and re-inserts its entries (each
 * n-gram is in it once). */
static int table_grow(struct lookup_table *t, const int32_t *tokens, int n, uint32_t need)
{
    struct lookup_table g;
    uint32_t cap = t->cap;
    while (cap / 2 < need) {
        if (cap > UINT32_MAX / 4) return -1;
        cap *= 2;
    }
    if (table_init(&g, cap)) return -1;
    for (uint32_t i = 0; i < t->cap; i++) {
        int32_t p = t->slot[i];
        if (p == LOOKUP_EMPTY) continue;
        g.slot[table_find(&g, tokens, tokens + p - n, n)] = p;
        g.n++;
    }
    free(t->slot);
    *t = g;
    return 0;
}

int lookup_update(lookup *ix, const int32_t *tokens, int32_t n_tokens)
{
    /* room for every new token at once (a prompt is indexed in one call): one rehash, not one per doubling */
    uint32_t add = n_tokens > ix->n_indexed ? (uint32_t)(n_tokens - ix->n_indexed) : 0;
    for (int n = 1; n <= LOOKUP_MAX_N && add > 1; n++) {
        struct lookup_table *t = &ix->t[n - 1];
        if ((t->n + add) * 2 > t->cap && add < UINT32_MAX / 4 && table_grow(t, tokens, n, t->n + add)) return -1;
    }
    for (int32_t p = ix->n_indexed; p < n_tokens; p++) {
        for (int n = 1; n <= LOOKUP_MAX_N && n <= p; n++) {
            struct lookup_table *t = &ix->t[n - 1];
            if ((t->n + 1) * 2 > t->cap && table_grow(t, tokens, n, t->n + 1)) return -1;
            uint32_t i = table_find(t, tokens, tokens + p - n, n);
            if (t->slot[i] == LOOKUP_EMPTY) t->n++;
            t->slot[i] = p; /* p is the most recent occurrence */
        }
        ix->n_indexed = p + 1;
    }
    return 0;
}

int32_t lookup_propose(const lookup *ix, const int32_t *tokens, int32_t n_tokens, int32_t max_draft,
                       int32_t *draft, int32_t *match_n)
{
    if (match_n) *match_n = 0;
    if (max_draft < 1 || n_tokens != ix->n_indexed) return 0;
    for (int n = LOOKUP_MAX_N; n >= 1; n--) {
        if (n >= n_tokens) continue; /* an earlier occurrence needs at least one token before the suffix */
        const struct lookup_table *t = &ix->t[n - 1];
        int32_t p = t->slot[table_find(t, tokens, tokens + n_tokens - n, n)];
        if (p == LOOKUP_EMPTY) continue;
        /* p < n_tokens: the copy source runs on into the draft when it reaches the end of the tokens */
        for (int32_t m = 0; m < max_draft; m++) {
            int32_t src = p + m;
            draft[m] = src < n_tokens ? tokens[src] : draft[src - n_tokens];
        }
        if (match_n) *match_n = n;
        return max_draft;
    }
    return 0;
}

int lookup_check(const lookup *ix, const int32_t *tokens, struct err *e)
{
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
                return err_set(e, "lookup_check: %d-gram slot %u holds position %d of %d", n, i, (int)p, (int)ix->n_indexed);
            if (table_find(t, tokens, tokens + p - n, n) != i)
                return err_set(e, "lookup_check: %d-gram at %d is not reachable at slot %u (or is there twice)", n, (int)p, i);
        }
        if (count != t->n) return err_set(e, "lookup_check: %d-gram table counts %u entries, holds %u", n, t->n, count);
        for (int32_t p = n; p < ix->n_indexed; p++) {
            int32_t q = t->slot[table_find(t, tokens, tokens + p - n, n)];
            if (q < p) return err_set(e, "lookup_check: the %d-gram ending at %d is indexed at %d", n, (int)(p - 1), (int)q);
        }
    }
    return 0;
}
