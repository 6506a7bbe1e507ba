/* plan — see plan.h.
 *
 * Invariant (keymap): open addressing with linear probing, load factor <= 1/2; slot[i] holds index + 1
 * (0 = empty) and keys[index] is the key stored at that index; indices are dense, assigned in put order.
 * plan_order always returns a permutation (plan_check_order).
 */
#include "jobs/plan.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

struct plan_keymap {
    uint8_t (*keys)[32]; /* (n) by index */
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

int64_t plan_keymap_find(const plan_keymap *m, const uint8_t key[32])
{
    size_t j = key_hash(key) & (m->cap - 1);
    while (m->slot[j]) {
        int64_t idx = (int64_t)m->slot[j] - 1;
        if (!memcmp(m->keys[idx], key, 32)) return idx;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

static int grow(plan_keymap *m)
{
    size_t cap = m->cap * 2;
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

int64_t plan_keymap_put(plan_keymap *m, const uint8_t key[32], int *added)
{
    *added = 0;
    int64_t idx = plan_keymap_find(m, key);
    if (idx >= 0) return idx;
    if (m->n >= (int64_t)UINT32_MAX - 1) return -1;
    if ((size_t)(m->n + 1) * 2 > m->cap && grow(m) != 0) return -1;
    if (m->n == m->keys_cap) {
        int64_t cap = m->keys_cap ? m->keys_cap * 2 : 1024;
        void *nk = realloc(m->keys, (size_t)cap * 32);
        if (!nk) return -1;
        m->keys = nk;
        m->keys_cap = cap;
    }
    memcpy(m->keys[m->n], key, 32);
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

struct sort_row {
    uint64_t group;     /* hash of the first block (0: shorter than a block) */
    double group_len;   /* the group's mean prompt length */
    uint32_t index;
    int32_t n_prompt;
    const int32_t *prompt;
};

static int cmp_tokens(const struct sort_row *a, const struct sort_row *b)
{
    int32_t n = a->n_prompt < b->n_prompt ? a->n_prompt : b->n_prompt;
    for (int32_t i = 0; i < n; i++)
        if (a->prompt[i] != b->prompt[i]) return a->prompt[i] < b->prompt[i] ? -1 : 1;
    return (a->n_prompt > b->n_prompt) - (a->n_prompt < b->n_prompt);
}

static int cmp_group(const void *pa, const void *pb)
{
    const struct sort_row *a = pa, *b = pb;
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static int cmp_final(const void *pa, const void *pb, void *ctx)
{
    const struct sort_row *a = pa, *b = pb;
    int dir = *(const int *)ctx;
    if (a->group != b->group) {
        if (a->group_len != b->group_len) return (a->group_len < b->group_len ? -1 : 1) * dir;
        return a->group < b->group ? -1 : 1;
    }
    if (a->n_prompt != b->n_prompt) return (a->n_prompt < b->n_prompt ? -1 : 1) * dir;
    int c = cmp_tokens(a, b);
    if (c) return c;
    return (a->index > b->index) - (a->index < b->index);
}

int plan_order(const struct plan_item *items, size_t n, int32_t kv_block, enum plan_sort sort, uint32_t *order,
               struct err *e)
{
    if (sort == PLAN_SORT_INPUT || n == 0) {
        for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
        return 0;
    }
    struct sort_row *rows = malloc(n * sizeof *rows);
    if (!rows) return err_set(e, "plan: out of memory for %zu requests", n);
    for (size_t i = 0; i < n; i++) {
        rows[i].index = (uint32_t)i;
        rows[i].n_prompt = items[i].n_prompt;
        rows[i].prompt = items[i].prompt;
        rows[i].group = 0;
        if (kv_block > 0 && items[i].n_prompt >= kv_block) {
            rows[i].group = XXH3_64bits(items[i].prompt, (size_t)kv_block * sizeof(int32_t));
            if (rows[i].group == 0) rows[i].group = 1;
        }
    }
    /* mean length per group: sort by group, then one pass */
    qsort(rows, n, sizeof *rows, cmp_group);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double sum = 0;
        while (j < n && rows[j].group == rows[i].group) sum += rows[j++].n_prompt;
        for (size_t k = i; k < j; k++) rows[k].group_len = sum / (double)(j - i);
        i = j;
    }
    int dir = sort == PLAN_SORT_DESCENDING ? -1 : 1;
    qsort_r(rows, n, sizeof *rows, cmp_final, &dir);
    for (size_t i = 0; i < n; i++) order[i] = rows[i].index;
    free(rows);
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

int plan_order_pending(const struct plan_item *items, size_t n, int32_t kv_block, enum plan_sort sort, uint32_t **order,
                       size_t *n_order, struct err *e)
{
    *order = NULL;
    *n_order = 0;
    size_t m = 0;
    for (size_t w = 0; w < n; w++) m += items[w].prompt != NULL;
    struct plan_item *pending = malloc((m ? m : 1) * sizeof *pending);
    uint32_t *work = malloc((m ? m : 1) * sizeof *work); /* pending index -> work index */
    uint32_t *ord = malloc((m ? m : 1) * sizeof *ord);
    if (!pending || !work || !ord) {
        err_set(e, "plan: out of memory for %zu pending works", m);
        goto fail;
    }
    size_t k = 0;
    for (size_t w = 0; w < n; w++)
        if (items[w].prompt) {
            pending[k] = items[w];
            work[k++] = (uint32_t)w;
        }
    if (plan_order(pending, m, kv_block, sort, ord, e) != 0) goto fail;
    if (plan_check_order(ord, m) != 0) {
        err_set(e, "plan: the order is not a permutation (bug)");
        goto fail;
    }
    for (size_t i = 0; i < m; i++) ord[i] = work[ord[i]];
    free(pending);
    free(work);
    *order = ord;
    *n_order = m;
    return 0;
fail:
    free(pending);
    free(work);
    free(ord);
    return -1;
}
