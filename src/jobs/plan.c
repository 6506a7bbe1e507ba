/* plan — see plan.h.
 *
 * Invariant (keymap): open addressing with linear probing, load factor <= 3/4; slot[i] holds index + 1
 * (0 = empty) and keys[index] is the key stored at that index; indices are dense, assigned in put order.
 * plan_order returns the indices it was given, reordered (checked by their sum and xor).
 */
#include "jobs/plan.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

struct plan_keymap {
    uint8_t (*keys)[PLAN_KEY_BYTES]; /* (n) by index */
    int64_t n, keys_cap;
    uint32_t *slot;      /* (cap) index + 1, or 0 */
    size_t cap;
};

static uint64_t key_hash(const uint8_t *k)
{
    uint64_t h; /* keys are sha256 digests: their first bytes are already uniform */
    memcpy(&h, k, 8);
    return h;
}

plan_keymap *plan_keymap_init(void)
{
    plan_keymap *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cap = 1024;
    m->slot = calloc(m->cap, sizeof *m->slot);
    if (!m->slot) {
        free(m);
        return NULL;
    }
    return m;
}

void plan_keymap_free(plan_keymap *m)
{
    if (!m) return;
    free(m->keys);
    free(m->slot);
    free(m);
}

int64_t plan_keymap_size(const plan_keymap *m) { return m->n; }
const uint8_t *plan_keymap_key(const plan_keymap *m, int64_t index) { return m->keys[index]; }
size_t plan_keymap_bytes(const plan_keymap *m) { return (size_t)m->n * PLAN_KEY_BYTES + m->cap * sizeof *m->slot; }

int64_t plan_keymap_find(const plan_keymap *m, const uint8_t *key)
{
    if (!m->slot) { /* the index was dropped: a scan */
        for (int64_t i = 0; i < m->n; i++)
            if (!memcmp(m->keys[i], key, PLAN_KEY_BYTES)) return i;
        return -1;
    }
    size_t j = key_hash(key) & (m->cap - 1);
    while (m->slot[j]) {
        int64_t idx = (int64_t)m->slot[j] - 1;
        if (!memcmp(m->keys[idx], key, PLAN_KEY_BYTES)) return idx;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

/* The slot table made again at cap slots (a power of 2 above the keys' count). */
static int rehash(plan_keymap *m, size_t cap)
{
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    for (int64_t i = 0; i < m->n; i++) {
        size_t j = key_hash(m->keys[i]) & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = (uint32_t)(i + 1);
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

void plan_keymap_drop_index(plan_keymap *m)
{
    free(m->slot);
    m->slot = NULL;
    m->cap = 0;
}

int64_t plan_keymap_put(plan_keymap *m, const uint8_t *key, int *added)
{
    *added = 0;
    if (!m->slot) { /* the index was dropped: made again, once */
        size_t cap = 1024;
        while ((size_t)(m->n + 1) * 4 > cap * 3) cap *= 2;
        if (rehash(m, cap) != 0) return -1;
    }
    int64_t idx = plan_keymap_find(m, key);
    if (idx >= 0) return idx;
    if (m->n >= (int64_t)UINT32_MAX - 1) return -1;
    if ((size_t)(m->n + 1) * 4 > m->cap * 3 && rehash(m, m->cap * 2) != 0) return -1; /* load <= 3/4 */
    if (m->n == m->keys_cap) {
        int64_t cap = m->keys_cap ? m->keys_cap + m->keys_cap / 2 : 1024; /* x1.5: less slack at 10^7 keys */
        void *nk = realloc(m->keys, (size_t)cap * PLAN_KEY_BYTES);
        if (!nk) return -1;
        m->keys = nk;
        m->keys_cap = cap;
    }
    memcpy(m->keys[m->n], key, PLAN_KEY_BYTES);
    size_t j = key_hash(key) & (m->cap - 1);
    while (m->slot[j]) j = (j + 1) & (m->cap - 1);
    m->slot[j] = (uint32_t)(m->n + 1);
    *added = 1;
    return m->n++;
}

const char *plan_sort_name(enum plan_sort s)
{
    switch (s) {
    case PLAN_SORT_ASCENDING: return "ascending";
    case PLAN_SORT_DESCENDING: return "descending";
    default: return "input";
    }
}

int plan_sort_parse(const char *s, enum plan_sort *out)
{
    if (!strcmp(s, "ascending") || !strcmp(s, "asc")) *out = PLAN_SORT_ASCENDING;
    else if (!strcmp(s, "descending") || !strcmp(s, "desc")) *out = PLAN_SORT_DESCENDING;
    else if (!strcmp(s, "input") || !strcmp(s, "none")) *out = PLAN_SORT_INPUT;
    else return -1;
    return 0;
}

/* --- ordering --- */

struct plan_item plan_item_of(const int32_t *prompt, int32_t n_prompt, int32_t kv_block)
{
    struct plan_item it = {0, n_prompt, 0};
    if (kv_block > 0 && n_prompt >= kv_block) {
        it.group = (uint32_t)XXH3_64bits(prompt, (size_t)kv_block * sizeof(int32_t));
        if (it.group == 0) it.group = 1;
    }
    it.tokens = (uint32_t)XXH3_64bits(prompt, (size_t)(n_prompt > 0 ? n_prompt : 0) * sizeof(int32_t));
    return it;
}

struct sort_ctx {
    const char *items;
    size_t stride;
    const float *group_len; /* by index: its group's mean prompt length */
    int dir;
};

static const struct plan_item *item_at(const struct sort_ctx *c, uint32_t i)
{
    return (const struct plan_item *)(c->items + (size_t)i * c->stride);
}

static int cmp_group(const void *pa, const void *pb, void *ctx)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    const struct plan_item *x = item_at(ctx, a), *y = item_at(ctx, b);
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    return (a > b) - (a < b);
}

static int cmp_final(const void *pa, const void *pb, void *ctx)
{
    const struct sort_ctx *c = ctx;
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    const struct plan_item *x = item_at(c, a), *y = item_at(c, b);
    if (x->group != y->group) {
        if (c->group_len[a] != c->group_len[b]) return (c->group_len[a] < c->group_len[b] ? -1 : 1) * c->dir;
        return x->group < y->group ? -1 : 1;
    }
    if (x->n_prompt != y->n_prompt) return (x->n_prompt < y->n_prompt ? -1 : 1) * c->dir;
    if (x->tokens != y->tokens) return x->tokens < y->tokens ? -1 : 1;
    return (a > b) - (a < b);
}

int plan_order(const void *items, size_t stride, uint32_t *order, size_t n, enum plan_sort sort, struct err *e)
{
    if (sort == PLAN_SORT_INPUT || n == 0) return 0;
    uint64_t sum = 0, xor = 0, max = 0;
    for (size_t i = 0; i < n; i++) {
        sum += order[i];
        xor ^= order[i];
        if (order[i] > max) max = order[i];
    }
    float *group_len = malloc((size_t)(max + 1) * sizeof *group_len);
    if (!group_len) return err_set(e, "plan: out of memory for %zu requests", n);
    struct sort_ctx c = {items, stride, group_len, sort == PLAN_SORT_DESCENDING ? -1 : 1};
    /* mean length per group: sort by group, then one pass */
    qsort_r(order, n, sizeof *order, cmp_group, &c);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double total = 0;
        uint32_t g = item_at(&c, order[i])->group;
        while (j < n && item_at(&c, order[j])->group == g) total += item_at(&c, order[j++])->n_prompt;
        for (size_t k = i; k < j; k++) group_len[order[k]] = (float)(total / (double)(j - i));
        i = j;
    }
    qsort_r(order, n, sizeof *order, cmp_final, &c);
    free(group_len);
    for (size_t i = 0; i < n; i++) {
        sum -= order[i];
        xor ^= order[i];
    }
    if (sum || xor) return err_set(e, "plan: the order lost or repeated a request (bug)");
    return 0;
}

int plan_check_order(const uint32_t *order, size_t n)
{
    uint8_t *seen = calloc(n ? n : 1, 1);
    if (!seen) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (order[i] >= n || seen[order[i]]) rc = -1;
        else seen[order[i]] = 1;
    }
    free(seen);
    return rc;
}

/* --- concurrency --- */

int64_t plan_kv_blocks(const struct plan_item *it, const struct plan_item *prev, int64_t n_gen, int32_t kv_block)
{
    int64_t tokens = (int64_t)it->n_prompt + (n_gen > 0 ? n_gen : 0), block = kv_block > 0 ? kv_block : 1;
    int64_t blocks = (tokens + block - 1) / block + 1;
    if (prev && it->group && it->group == prev->group) blocks--; /* the shared first block is held once */
    return blocks;
}

/* The most blocks any window of n consecutive requests needs (all of them when n >= n_req). */
static int64_t window_max(const uint32_t *blocks, size_t n_req, size_t n)
{
    int64_t sum = 0, most = 0;
    for (size_t i = 0; i < n_req; i++) {
        sum += blocks[i];
        if (i >= n) sum -= blocks[i - n];
        if (sum > most) most = sum;
    }
    return most;
}

struct plan_fit plan_max_seqs(const uint32_t *blocks, size_t n_req, int64_t kv_blocks, int32_t ceiling)
{
    int32_t lo = 1, hi = ceiling > 1 ? ceiling : 1; /* invariant: lo fits or is 1; no n above hi fits */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (window_max(blocks, n_req, (size_t)mid) <= kv_blocks) lo = mid;
        else hi = mid - 1;
    }
    struct plan_fit f = {lo, window_max(blocks, n_req, (size_t)lo), 0};
    f.window_seqs = (size_t)lo < n_req ? lo : (int32_t)n_req;
    return f;
}
