/* kvpool — block pool with refcounts, a free list, an LRU list of cached refcount-0 blocks and a hash
 * table for the prefix cache.
 *
 * Invariant (checked by kv_check):
 *  - every block is on exactly one of: the free list (refcount 0, not cached), the LRU list (refcount 0,
 *    cached), or no list (refcount > 0, cached or not); n_free + n_lru + n_used = n_blocks;
 *  - both lists are well-formed doubly linked lists whose lengths match their counters;
 *  - a block is cached iff it is reachable from exactly one hash bucket, the bucket of its stored hash;
 *  - a cached block's parent is KV_NONE or a block id; its stored tokens are the block's content;
 *  - no two cached blocks have the same verified key (parent, parent generation, tokens);
 *  - refcounts match the references the caller counted (when given).
 * The free list is a stack (released blocks go to its head, kv_alloc takes the head): a block used before is
 * handed out again before one never used, so the memory the pool touches grows only to the workload's peak.
 * Generations: a block's gen increases each time it leaves the cache (eviction), so a child registered
 * under (parent id, gen) stops matching once that parent id is reused for other content.
 */
#include "engine/kvpool.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define KV_ROOT_HASH 0x6e69676874736866ull /* chain seed of a sequence's first block */

enum { LIST_NONE, LIST_FREE, LIST_LRU };

struct kv_block {
    int32_t ref;
    int32_t prev, next; /* links on the free or LRU list */
    int32_t hnext;      /* next block in the same hash bucket */
    int32_t parent;     /* cached: parent block id or KV_NONE */
    uint32_t gen;       /* bumped each time the block leaves the cache */
    uint32_t parent_gen;
    uint8_t cached;
    uint8_t list;
    uint64_t hash;
};

struct kv_list {
    int32_t head, tail, n;
};

struct kv_pool {
    int32_t n_blocks, block_size;
    struct kv_block *b; /* (n_blocks) */
    int32_t *tokens;    /* (n_blocks, block_size) tokens of cached blocks */
    int32_t *buckets;   /* (n_buckets) first block of each hash chain, or KV_NONE */
    uint32_t n_buckets; /* power of two */
    struct kv_list free_list, lru;
    int32_t n_used;
    int32_t n_cached_total; /* cached blocks, any refcount */
    int64_t n_evictions;
    kv_hash_fn hash;
};

uint64_t kv_hash_xxh3(uint64_t parent_hash, const int32_t *tokens, int32_t n)
{
    return XXH3_64bits_withSeed(tokens, (size_t)n * sizeof *tokens, parent_hash);
}

static void list_push_tail(kv_pool *p, struct kv_list *l, int32_t id, uint8_t which)
{
    struct kv_block *b = &p->b[id];
    assert(b->list == LIST_NONE);
    b->list = which;
    b->prev = l->tail;
    b->next = KV_NONE;
    if (l->tail != KV_NONE) p->b[l->tail].next = id;
    else l->head = id;
    l->tail = id;
    l->n++;
}

static void list_push_head(kv_pool *p, struct kv_list *l, int32_t id, uint8_t which)
{
    struct kv_block *b = &p->b[id];
    assert(b->list == LIST_NONE);
    b->list = which;
    b->prev = KV_NONE;
    b->next = l->head;
    if (l->head != KV_NONE) p->b[l->head].prev = id;
    else l->tail = id;
    l->head = id;
    l->n++;
}

static void list_remove(kv_pool *p, struct kv_list *l, int32_t id)
{
    struct kv_block *b = &p->b[id];
    if (b->prev != KV_NONE) p->b[b->prev].next = b->next;
    else l->head = b->next;
    if (b->next != KV_NONE) p->b[b->next].prev = b->prev;
    else l->tail = b->prev;
    b->prev = b->next = KV_NONE;
    b->list = LIST_NONE;
    l->n--;
}

int kv_pool_init(int32_t n_blocks, int32_t block_size, kv_pool **out, struct err *e)
{
    *out = NULL;
    if (n_blocks < 1) return err_set(e, "kv pool: %d blocks (need at least 1)", (int)n_blocks);
    if (block_size < 1 || block_size > 4096) return err_set(e, "kv pool: block size %d out of range", (int)block_size);
    if ((uint64_t)n_blocks * (uint64_t)block_size > (uint64_t)INT32_MAX)
        return err_set(e, "kv pool: %d blocks of %d tokens is more than 2^31 tokens", (int)n_blocks, (int)block_size);
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "kv pool: out of memory");
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_buckets = 16;
    while (p->n_buckets < (uint32_t)n_blocks && p->n_buckets < (1u << 30)) p->n_buckets <<= 1;
    p->b = calloc((size_t)n_blocks, sizeof *p->b);
    p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
    p->buckets = malloc((size_t)p->n_buckets * sizeof *p->buckets);
    if (!p->b || !p->tokens || !p->buckets) {
        kv_pool_free(p);
        return err_set(e, "kv pool: out of memory for %d blocks", (int)n_blocks);
    }
    for (uint32_t i = 0; i < p->n_buckets; i++) p->buckets[i] = KV_NONE;
    p->free_list = p->lru = (struct kv_list){KV_NONE, KV_NONE, 0};
    for (int32_t i = 0; i < n_blocks; i++) {
        p->b[i].prev = p->b[i].next = p->b[i].hnext = p->b[i].parent = KV_NONE;
        list_push_tail(p, &p->free_list, i, LIST_FREE);
    }
    p->hash = kv_hash_xxh3;
    *out = p;
    return 0;
}

void kv_pool_free(kv_pool *p)
{
    if (!p) return;
    free(p->b);
    free(p->tokens);
    free(p->buckets);
    free(p);
}

void kv_pool_set_hash(kv_pool *p, kv_hash_fn fn)
{
    assert(p->n_cached_total == 0);
    p->hash = fn ? fn : kv_hash_xxh3;
}

int32_t kv_n_blocks(const kv_pool *p) { return p->n_blocks; }
int32_t kv_block_size(const kv_pool *p) { return p->block_size; }
int32_t kv_n_free(const kv_pool *p) { return p->free_list.n; }
int32_t kv_n_cached(const kv_pool *p) { return p->lru.n; }
int32_t kv_n_available(const kv_pool *p) { return p->free_list.n + p->lru.n; }
int32_t kv_n_used(const kv_pool *p) { return p->n_used; }
int64_t kv_n_evictions(const kv_pool *p) { return p->n_evictions; }

static int valid_id(const kv_pool *p, int32_t id)
{
    return id >= 0 && id < p->n_blocks;
}

int32_t kv_refcount(const kv_pool *p, int32_t id)
{
    assert(valid_id(p, id));
    return p->b[id].ref;
}

uint32_t kv_generation(const kv_pool *p, int32_t id)
{
    assert(valid_id(p, id));
    return p->b[id].gen;
}

int kv_is_cached(const kv_pool *p, int32_t id)
{
    assert(valid_id(p, id));
    return p->b[id].cached;
}

int32_t kv_parent(const kv_pool *p, int32_t id)
{
    assert(valid_id(p, id));
    return p->b[id].parent;
}

static uint32_t bucket_of(const kv_pool *p, uint64_t h)
{
    return (uint32_t)(h ^ (h >> 32)) & (p->n_buckets - 1);
}

/* Removes a cached block from its hash chain and bumps its generation. */
static void uncache(kv_pool *p, int32_t id)
{
    struct kv_block *b = &p->b[id];
    assert(b->cached);
    int32_t *link = &p->buckets[bucket_of(p, b->hash)];
    while (*link != id) {
        assert(*link != KV_NONE);
        link = &p->b[*link].hnext;
    }
    *link = b->hnext;
    b->hnext = KV_NONE;
    b->cached = 0;
    b->parent = KV_NONE;
    b->gen++;
    p->n_cached_total--;
}

int32_t kv_alloc(kv_pool *p)
{
    int32_t id = p->free_list.head;
    if (id != KV_NONE) {
        list_remove(p, &p->free_list, id);
    } else {
        id = p->lru.head;
        if (id == KV_NONE) return KV_NONE;
        list_remove(p, &p->lru, id);
        uncache(p, id);
        p->n_evictions++;
    }
    assert(p->b[id].ref == 0);
    p->b[id].ref = 1;
    p->n_used++;
    return id;
}

void kv_ref(kv_pool *p, int32_t id)
{
    assert(valid_id(p, id));
    struct kv_block *b = &p->b[id];
    if (b->ref == 0) {
        assert(b->cached && b->list == LIST_LRU); /* a free block is only handed out by kv_alloc */
        list_remove(p, &p->lru, id);
        p->n_used++;
    }
    b->ref++;
}

void kv_unref(kv_pool *p, int32_t id)
{
    assert(valid_id(p, id));
    struct kv_block *b = &p->b[id];
    assert(b->ref > 0);
    if (--b->ref > 0) return;
    p->n_used--;
    if (b->cached) list_push_tail(p, &p->lru, id, LIST_LRU);
    else list_push_head(p, &p->free_list, id, LIST_FREE); /* LIFO: touched blocks are handed out first */
}

static uint64_t parent_hash(const kv_pool *p, int32_t parent)
{
    return parent == KV_NONE ? KV_ROOT_HASH : p->b[parent].hash;
}

/* The cached block with key (parent, tokens) and hash h, or KV_NONE. */
static int32_t find(const kv_pool *p, uint64_t h, int32_t parent, const int32_t *tokens)
{
    uint32_t pgen = parent == KV_NONE ? 0 : p->b[parent].gen;
    size_t bytes = (size_t)p->block_size * sizeof *tokens;
    for (int32_t id = p->buckets[bucket_of(p, h)]; id != KV_NONE; id = p->b[id].hnext) {
        const struct kv_block *b = &p->b[id];
        if (b->hash != h || b->parent != parent) continue;
        if (parent != KV_NONE && b->parent_gen != pgen) continue;
        if (memcmp(p->tokens + (size_t)id * (size_t)p->block_size, tokens, bytes) != 0) continue;
        return id;
    }
    return KV_NONE;
}

int32_t kv_lookup(kv_pool *p, int32_t parent, const int32_t *tokens)
{
    if (parent != KV_NONE) {
        assert(valid_id(p, parent));
        if (!p->b[parent].cached) return KV_NONE;
    }
    uint64_t h = p->hash(parent_hash(p, parent), tokens, p->block_size);
    int32_t id = find(p, h, parent, tokens);
    if (id != KV_NONE) kv_ref(p, id);
    return id;
}

int32_t kv_register(kv_pool *p, int32_t id, int32_t parent, const int32_t *tokens)
{
    assert(valid_id(p, id));
    struct kv_block *b = &p->b[id];
    assert(b->ref > 0 && !b->cached);
    if (parent != KV_NONE) {
        assert(valid_id(p, parent));
        if (!p->b[parent].cached) return id;
    }
    uint64_t h = p->hash(parent_hash(p, parent), tokens, p->block_size);
    int32_t dup = find(p, h, parent, tokens);
    if (dup != KV_NONE) {
        kv_ref(p, dup);
        kv_unref(p, id);
        return dup;
    }
    b->cached = 1;
    b->hash = h;
    b->parent = parent;
    b->parent_gen = parent == KV_NONE ? 0 : p->b[parent].gen;
    memcpy(p->tokens + (size_t)id * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    uint32_t k = bucket_of(p, h);
    b->hnext = p->buckets[k];
    p->buckets[k] = id;
    p->n_cached_total++;
    return id;
}

int kv_check(const kv_pool *p, const int32_t *expected_refs, struct err *e)
{
    int32_t n = p->n_blocks;
    const struct kv_list *lists[2] = {&p->free_list, &p->lru};
    const uint8_t kinds[2] = {LIST_FREE, LIST_LRU};
    for (int li = 0; li < 2; li++) {
        int32_t count = 0, prev = KV_NONE;
        for (int32_t id = lists[li]->head; id != KV_NONE; id = p->b[id].next) {
            if (!valid_id(p, id)) return err_set(e, "kv_check: list %d holds bad id %d", li, (int)id);
            const struct kv_block *b = &p->b[id];
            if (b->list != kinds[li])
                return err_set(e, "kv_check: block %d on list %d marked %d", (int)id, li, b->list);
            if (b->prev != prev) return err_set(e, "kv_check: block %d has a bad prev link", (int)id);
            if (b->ref != 0)
                return err_set(e, "kv_check: block %d on list %d has refcount %d", (int)id, li, (int)b->ref);
            if ((li == 1) != (b->cached != 0))
                return err_set(e, "kv_check: block %d on list %d has cached=%d", (int)id, li, b->cached);
            if (++count > n) return err_set(e, "kv_check: list %d has a cycle", li);
            prev = id;
        }
        if (prev != lists[li]->tail) return err_set(e, "kv_check: list %d tail is wrong", li);
        if (count != lists[li]->n)
            return err_set(e, "kv_check: list %d has %d blocks, counter says %d", li, (int)count, (int)lists[li]->n);
    }
    int32_t n_used = 0, n_cached = 0;
    for (int32_t id = 0; id < n; id++) {
        const struct kv_block *b = &p->b[id];
        if (b->ref < 0) return err_set(e, "kv_check: block %d has refcount %d", (int)id, (int)b->ref);
        if (b->ref > 0) {
            n_used++;
            if (b->list != LIST_NONE) return err_set(e, "kv_check: block %d in use but on a list", (int)id);
        } else if (b->list == LIST_NONE) {
            return err_set(e, "kv_check: block %d has refcount 0 but is on no list", (int)id);
        }
        if (expected_refs && expected_refs[id] != b->ref)
            return err_set(e, "kv_check: block %d has refcount %d but %d references", (int)id, (int)b->ref,
                           (int)expected_refs[id]);
        if (b->cached) {
            n_cached++;
            if (b->parent != KV_NONE && !valid_id(p, b->parent))
                return err_set(e, "kv_check: block %d has bad parent %d", (int)id, (int)b->parent);
            int found = 0;
            for (int32_t j = p->buckets[bucket_of(p, b->hash)], steps = 0; j != KV_NONE; j = p->b[j].hnext) {
                if (j == id) found++;
                if (++steps > n) return err_set(e, "kv_check: hash chain has a cycle");
            }
            if (found != 1) return err_set(e, "kv_check: cached block %d found %d times in its bucket", (int)id, found);
            /* no other cached block with the same verified key */
            uint32_t pgen = b->parent_gen;
            for (int32_t j = p->buckets[bucket_of(p, b->hash)]; j != KV_NONE; j = p->b[j].hnext) {
                const struct kv_block *o = &p->b[j];
                if (j == id || o->hash != b->hash || o->parent != b->parent || o->parent_gen != pgen) continue;
                if (!memcmp(p->tokens + (size_t)j * (size_t)p->block_size,
                            p->tokens + (size_t)id * (size_t)p->block_size, (size_t)p->block_size * sizeof(int32_t)))
                    return err_set(e, "kv_check: blocks %d and %d are cached under the same key", (int)id, (int)j);
            }
        } else if (b->hnext != KV_NONE) {
            return err_set(e, "kv_check: uncached block %d has a hash link", (int)id);
        }
    }
    int32_t in_buckets = 0;
    for (uint32_t k = 0; k < p->n_buckets; k++)
        for (int32_t j = p->buckets[k]; j != KV_NONE; j = p->b[j].hnext) {
            if (!valid_id(p, j) || !p->b[j].cached || bucket_of(p, p->b[j].hash) != k)
                return err_set(e, "kv_check: bucket %u holds block %d that does not belong there", k, (int)j);
            if (++in_buckets > n) return err_set(e, "kv_check: hash table has a cycle");
        }
    if (in_buckets != n_cached || n_cached != p->n_cached_total)
        return err_set(e, "kv_check: %d cached blocks, %d in the hash table, counter %d", (int)n_cached,
                       (int)in_buckets, (int)p->n_cached_total);
    if (n_used != p->n_used)
        return err_set(e, "kv_check: %d blocks in use, counter says %d", (int)n_used, (int)p->n_used);
    if (n_used + p->free_list.n + p->lru.n != n)
        return err_set(e, "kv_check: used %d + free %d + lru %d != %d blocks", (int)n_used, (int)p->free_list.n,
                       (int)p->lru.n, (int)n);
    return 0;
}
