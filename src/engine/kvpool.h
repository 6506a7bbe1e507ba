/* kvpool — the KV block pool and the prefix cache, by block id only (the KV tensors live in the backend).
 *
 * Blocks 0..n_blocks-1 each hold block_size token slots. A block is in exactly one of three states:
 *   free     refcount 0, not cached           (on the free list)
 *   cached   refcount 0, in the prefix cache  (on the LRU list, oldest first; evictable)
 *   in use   refcount > 0                     (held by block tables; may also be in the prefix cache)
 * kv_alloc takes the free list first, most recently released block first (blocks never used come last, so
 * the pages the pool touches grow only as far as the peak use), then evicts the least recently released
 * cached block.
 *
 * Prefix cache: a full block whose KV is computed is registered under the key (parent block, its tokens),
 * hashed as a chain: hash = H(parent's hash, tokens) (xxh3 by default). A lookup compares the hash and then
 * VERIFIES the key: the same parent block id and generation (the generation changes whenever a cached block
 * is evicted, so a stale child never matches a reused parent id) and the same tokens. A hash collision can
 * therefore only cost a miss, never a wrong hit.
 *
 * Complexity: alloc, ref, unref, lookup, register are O(1) expected (+ O(block_size) token compares);
 * kv_check is O(n_blocks * block_size). Not thread-safe.
 */
#ifndef NS_ENGINE_KVPOOL_H
#define NS_ENGINE_KVPOOL_H

#include <stdint.h>

#include "util/err.h"

typedef struct kv_pool kv_pool;

/* Block hash: chains a parent's hash with one block's tokens. */
typedef uint64_t (*kv_hash_fn)(uint64_t parent_hash, const int32_t *tokens, int32_t n);

#define KV_NONE (-1) /* "no block": the parent of a sequence's first block, or a failed alloc/lookup */

int kv_pool_init(int32_t n_blocks, int32_t block_size, kv_pool **out, struct err *e);
void kv_pool_free(kv_pool *p);
/* Replaces the hash function (tests force collisions with it). Only valid while nothing is cached. */
void kv_pool_set_hash(kv_pool *p, kv_hash_fn fn);
/* The default hash: XXH3_64bits_withSeed(tokens, 4 * n, parent_hash). */
uint64_t kv_hash_xxh3(uint64_t parent_hash, const int32_t *tokens, int32_t n);

int32_t kv_n_blocks(const kv_pool *p);
int32_t kv_block_size(const kv_pool *p);
int32_t kv_n_free(const kv_pool *p);     /* free list length */
int32_t kv_n_cached(const kv_pool *p);   /* refcount-0 cached blocks (evictable) */
int32_t kv_n_available(const kv_pool *p); /* free + evictable: what kv_alloc can still hand out */
int32_t kv_n_used(const kv_pool *p);     /* refcount > 0 */
int64_t kv_n_evictions(const kv_pool *p);

/* A block with refcount 1 and no cache entry, or KV_NONE when every block is in use. May evict the LRU
 * cached block (its cache entry disappears and its generation changes). */
int32_t kv_alloc(kv_pool *p);
void kv_ref(kv_pool *p, int32_t id);
/* Drops one reference; at 0 the block goes to the LRU tail if cached, else to the free list. */
void kv_unref(kv_pool *p, int32_t id);
int32_t kv_refcount(const kv_pool *p, int32_t id);
int kv_is_cached(const kv_pool *p, int32_t id);
/* The block's generation: it changes each time the block leaves the prefix cache (eviction), so a
 * (cached, generation) pair names one content of the block for as long as it stays cached. */
uint32_t kv_generation(const kv_pool *p, int32_t id);
/* The parent block id a cached block was registered under (KV_NONE for a first block). */
int32_t kv_parent(const kv_pool *p, int32_t id);

/* Finds the cached block holding `tokens` (block_size of them) after `parent` (KV_NONE for a sequence's
 * first block; otherwise parent must be cached and held by the caller). On a hit takes a reference (the
 * block leaves the LRU list if it was there) and returns its id; KV_NONE on a miss. */
int32_t kv_lookup(kv_pool *p, int32_t parent, const int32_t *tokens);

/* Registers block `id` (held by the caller, not yet cached, KV fully computed) as holding `tokens` after
 * `parent` (KV_NONE or a cached block). If an equal block is already cached, the caller's reference moves
 * to that block instead (id is released) and its id is returned: the caller must put the returned id in
 * its block table. If parent is not cached, nothing is registered and id is returned. */
int32_t kv_register(kv_pool *p, int32_t id, int32_t parent, const int32_t *tokens);

/* Debug check of the invariant at the top of kvpool.c. expected_refs (n_blocks), when not NULL, is the
 * number of references each block should have (counted by the caller from all block tables). 0 when it
 * holds; otherwise e says what is wrong. O(n_blocks * block_size). */
int kv_check(const kv_pool *p, const int32_t *expected_refs, struct err *e);

#endif
