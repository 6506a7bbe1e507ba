/* test_kvpool — the KV block pool and prefix cache: alloc/free, refcounts, LRU eviction order,
 * verified hits under forced hash collisions, generations, dedup on register, and a random stress run
 * checked against a model of the references after every mutation. */
#include "engine/kvpool.h"

#include <stdint.h>

#include "test.h"

#define B 4

static int check_pool(const kv_pool *p, const int32_t *refs)
{
    struct err e;
    if (kv_check(p, refs, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 0;
    }
    return 1;
}

static uint64_t const_hash(uint64_t parent, const int32_t *t, int32_t n)
{
    (void)parent;
    (void)t;
    (void)n;
    return 42;
}

static uint64_t two_bucket_hash(uint64_t parent, const int32_t *t, int32_t n)
{
    (void)parent;
    (void)n;
    return (uint64_t)(t[0] & 1);
}

TEST(kvpool_init_rejects_bad_sizes)
{
    kv_pool *p = NULL;
    struct err e;
    CHECK(kv_pool_init(0, 16, &p, &e) != 0 && p == NULL);
    CHECK(strstr(e.msg, "0 blocks") != NULL);
    CHECK(kv_pool_init(4, 0, &p, &e) != 0);
    CHECK(kv_pool_init(INT32_MAX / 2, 16, &p, &e) != 0);
}

TEST(kvpool_alloc_all_then_none)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(8, B, &p, &e) == 0);
    int seen[8] = {0};
    for (int i = 0; i < 8; i++) {
        int32_t id = kv_alloc(p);
        CHECK(id >= 0 && id < 8 && !seen[id]);
        seen[id] = 1;
        CHECK_EQ_INT(kv_refcount(p, id), 1);
        CHECK(check_pool(p, NULL));
    }
    CHECK_EQ_INT(kv_alloc(p), KV_NONE);
    CHECK_EQ_INT(kv_n_used(p), 8);
    CHECK_EQ_INT(kv_n_available(p), 0);
    kv_unref(p, 3);
    CHECK_EQ_INT(kv_n_free(p), 1);
    CHECK_EQ_INT(kv_alloc(p), 3); /* the freed block comes back */
    for (int i = 0; i < 8; i++) kv_unref(p, i);
    CHECK_EQ_INT(kv_n_free(p), 8);
    CHECK(check_pool(p, NULL));
    kv_pool_free(p);
}

TEST(kvpool_refcount)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(4, B, &p, &e) == 0);
    int32_t refs[4] = {0};
    int32_t a = kv_alloc(p);
    refs[a] = 1;
    CHECK(check_pool(p, refs));
    int32_t toks[B] = {1, 2, 3, 4};
    CHECK_EQ_INT(kv_register(p, a, KV_NONE, toks), a);
    kv_ref(p, a);
    kv_ref(p, a);
    refs[a] = 3;
    CHECK(check_pool(p, refs));
    CHECK_EQ_INT(kv_refcount(p, a), 3);
    kv_unref(p, a);
    kv_unref(p, a);
    refs[a] = 1;
    CHECK(check_pool(p, refs));
    CHECK_EQ_INT(kv_n_cached(p), 0);
    kv_unref(p, a);
    refs[a] = 0;
    CHECK_EQ_INT(kv_n_cached(p), 1); /* cached blocks stay at refcount 0 */
    CHECK_EQ_INT(kv_n_free(p), 3);
    CHECK_EQ_INT(kv_n_available(p), 4);
    CHECK(check_pool(p, refs));
    /* wrong expected counts are reported */
    refs[a] = 1;
    CHECK(kv_check(p, refs, &e) != 0);
    CHECK(strstr(e.msg, "refcount") != NULL);
    kv_pool_free(p);
}

TEST(kvpool_lookup_hit_and_miss)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(6, B, &p, &e) == 0);
    int32_t t1[B] = {1, 2, 3, 4}, t2[B] = {5, 6, 7, 8}, t3[B] = {1, 2, 3, 5};
    int32_t a = kv_alloc(p), b = kv_alloc(p);
    CHECK_EQ_INT(kv_register(p, a, KV_NONE, t1), a);
    CHECK_EQ_INT(kv_register(p, b, a, t2), b);
    CHECK_EQ_INT(kv_parent(p, b), a);
    kv_unref(p, b);
    kv_unref(p, a);
    CHECK_EQ_INT(kv_n_cached(p), 2);
    /* chain a -> b found again */
    int32_t h1 = kv_lookup(p, KV_NONE, t1);
    CHECK_EQ_INT(h1, a);
    CHECK_EQ_INT(kv_n_cached(p), 1);
    int32_t h2 = kv_lookup(p, h1, t2);
    CHECK_EQ_INT(h2, b);
    CHECK_EQ_INT(kv_refcount(p, b), 1);
    /* misses: other tokens, right tokens at the wrong depth, wrong parent */
    CHECK_EQ_INT(kv_lookup(p, KV_NONE, t3), KV_NONE);
    CHECK_EQ_INT(kv_lookup(p, KV_NONE, t2), KV_NONE);
    CHECK_EQ_INT(kv_lookup(p, b, t2), KV_NONE);
    int32_t refs[6] = {0};
    refs[a] = refs[b] = 1;
    CHECK(check_pool(p, refs));
    kv_unref(p, b);
    kv_unref(p, a);
    kv_pool_free(p);
}

TEST(kvpool_eviction_order_is_lru)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(4, B, &p, &e) == 0);
    int32_t t[4][B] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}, {4, 4, 4, 4}};
    int32_t id[4];
    for (int i = 0; i < 4; i++) {
        id[i] = kv_alloc(p);
        CHECK_EQ_INT(kv_register(p, id[i], KV_NONE, t[i]), id[i]);
    }
    /* release in the order 2, 0, 3, 1: that is the eviction order */
    int order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++) kv_unref(p, id[order[i]]);
    CHECK_EQ_INT(kv_n_free(p), 0);
    CHECK_EQ_INT(kv_n_cached(p), 4);
    /* touching block 0 makes it most recent: order becomes 2, 3, 1, 0 */
    int32_t hit = kv_lookup(p, KV_NONE, t[0]);
    CHECK_EQ_INT(hit, id[0]);
    kv_unref(p, hit);
    int expect[4] = {2, 3, 1, 0};
    for (int i = 0; i < 4; i++) {
        int32_t got = kv_alloc(p);
        CHECK_EQ_INT(got, id[expect[i]]);
        CHECK(!kv_is_cached(p, got));
        CHECK_EQ_INT(kv_n_evictions(p), i + 1);
        /* the evicted block's entry is gone; the others still hit */
        CHECK_EQ_INT(kv_lookup(p, KV_NONE, t[expect[i]]), KV_NONE);
        for (int j = i + 1; j < 4; j++) {
            int32_t h = kv_lookup(p, KV_NONE, t[expect[j]]);
            CHECK_EQ_INT(h, id[expect[j]]);
            kv_unref(p, h); /* goes to the LRU tail: keep the expected order by re-touching in order */
        }
        CHECK(check_pool(p, NULL));
    }
    CHECK_EQ_INT(kv_alloc(p), KV_NONE);
    kv_pool_free(p);
}

TEST(kvpool_free_list_before_eviction)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(3, B, &p, &e) == 0);
    int32_t t[B] = {9, 9, 9, 9};
    int32_t a = kv_alloc(p);
    kv_register(p, a, KV_NONE, t);
    kv_unref(p, a);
    int32_t b = kv_alloc(p), c = kv_alloc(p);
    CHECK(b != a && c != a);
    CHECK_EQ_INT(kv_n_evictions(p), 0);
    CHECK_EQ_INT(kv_alloc(p), a); /* only now the cached block is evicted */
    CHECK_EQ_INT(kv_n_evictions(p), 1);
    kv_pool_free(p);
}

/* The free list is LIFO: a released block is reused before blocks never touched (RSS grows only to the
 * peak), and the pool stays consistent through it. */
TEST(kvpool_reuses_touched_blocks_first)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(8, B, &p, &e) == 0);
    int32_t a = kv_alloc(p), b = kv_alloc(p), c = kv_alloc(p);
    kv_unref(p, b);
    kv_unref(p, a);
    CHECK_EQ_INT(kv_alloc(p), a); /* the last released first */
    CHECK_EQ_INT(kv_alloc(p), b);
    int32_t d = kv_alloc(p); /* only now an untouched block */
    CHECK(d != a && d != b && d != c);
    int32_t held[4] = {a, b, c, d};
    int32_t max_id = 0;
    for (int round = 0; round < 50; round++) { /* release and take 4 blocks again: never past the first 4 */
        for (int i = 0; i < 4; i++) kv_unref(p, held[i]);
        for (int i = 0; i < 4; i++) {
            held[i] = kv_alloc(p);
            if (held[i] > max_id) max_id = held[i];
        }
    }
    CHECK_EQ_INT(max_id, 3);
    CHECK_MSG(kv_check(p, NULL, &e) == 0, "%s", e.msg);
    kv_pool_free(p);
}

TEST(kvpool_forced_collisions_are_verified)
{
    for (int variant = 0; variant < 2; variant++) {
        kv_pool *p;
        struct err e;
        CHECK(kv_pool_init(16, B, &p, &e) == 0);
        kv_pool_set_hash(p, variant ? two_bucket_hash : const_hash);
        /* chains: X=[1111]->[2222]  and  Y=[3333]->[2222]: same child tokens, different parents */
        int32_t t1[B] = {1, 1, 1, 1}, t2[B] = {2, 2, 2, 2}, t3[B] = {3, 3, 3, 3}, t4[B] = {1, 1, 1, 2};
        int32_t x = kv_alloc(p), x2 = kv_alloc(p), y = kv_alloc(p), y2 = kv_alloc(p);
        CHECK_EQ_INT(kv_register(p, x, KV_NONE, t1), x);
        CHECK_EQ_INT(kv_register(p, x2, x, t2), x2);
        CHECK_EQ_INT(kv_register(p, y, KV_NONE, t3), y);
        CHECK_EQ_INT(kv_register(p, y2, y, t2), y2); /* not a duplicate of x2: other parent */
        CHECK(check_pool(p, NULL));
        CHECK_EQ_INT(kv_lookup(p, KV_NONE, t4), KV_NONE); /* same hash, other tokens */
        CHECK_EQ_INT(kv_lookup(p, KV_NONE, t2), KV_NONE); /* same hash and tokens, other parent */
        int32_t h = kv_lookup(p, y, t2);
        CHECK_EQ_INT(h, y2);
        kv_unref(p, h);
        h = kv_lookup(p, x, t2);
        CHECK_EQ_INT(h, x2);
        kv_unref(p, h);
        h = kv_lookup(p, KV_NONE, t3);
        CHECK_EQ_INT(h, y);
        kv_unref(p, h);
        CHECK(check_pool(p, NULL));
        kv_pool_free(p);
    }
}

TEST(kvpool_register_dedups)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(4, B, &p, &e) == 0);
    int32_t t[B] = {7, 7, 7, 7};
    int32_t a = kv_alloc(p), b = kv_alloc(p);
    CHECK_EQ_INT(kv_register(p, a, KV_NONE, t), a);
    /* a second sequence computed the same block: its reference moves to a, b is freed */
    CHECK_EQ_INT(kv_register(p, b, KV_NONE, t), a);
    CHECK_EQ_INT(kv_refcount(p, a), 2);
    CHECK(!kv_is_cached(p, b));
    CHECK_EQ_INT(kv_n_free(p), 3);
    int32_t refs[4] = {0};
    refs[a] = 2;
    CHECK(check_pool(p, refs));
    /* registering under an uncached parent registers nothing */
    int32_t c = kv_alloc(p), d = kv_alloc(p);
    CHECK_EQ_INT(kv_register(p, d, c, t), d);
    CHECK(!kv_is_cached(p, d));
    kv_pool_free(p);
}

TEST(kvpool_stale_child_after_parent_eviction)
{
    kv_pool *p;
    struct err e;
    CHECK(kv_pool_init(2, B, &p, &e) == 0);
    kv_pool_set_hash(p, const_hash); /* even when hashes collide the generation check holds */
    int32_t t1[B] = {1, 2, 3, 4}, t2[B] = {5, 6, 7, 8}, t9[B] = {9, 9, 9, 9};
    int32_t a = kv_alloc(p), b = kv_alloc(p);
    kv_register(p, a, KV_NONE, t1);
    kv_register(p, b, a, t2);
    kv_unref(p, a); /* a is older in the LRU than b */
    kv_unref(p, b);
    /* evict a and reuse its id for other content under the same (root) parent */
    int32_t a2 = kv_alloc(p);
    CHECK_EQ_INT(a2, a);
    CHECK_EQ_INT(kv_register(p, a2, KV_NONE, t9), a2);
    /* b was registered under the old a: it must not match under the new one */
    CHECK_EQ_INT(kv_lookup(p, a2, t2), KV_NONE);
    CHECK(check_pool(p, NULL));
    kv_unref(p, a2);
    kv_pool_free(p);
}

/* Random operations against a model: sequences hold chains of blocks; every mutation is checked. */
TEST(kvpool_random_stress)
{
    enum { NB = 24, NS = 6, MAXLEN = 8 };
    for (int variant = 0; variant < 2; variant++) {
        kv_pool *p;
        struct err e;
        CHECK(kv_pool_init(NB, B, &p, &e) == 0);
        if (variant) kv_pool_set_hash(p, two_bucket_hash);
        int32_t tables[NS][MAXLEN], n_tab[NS] = {0}, reg[NS] = {0};
        int32_t toks[NS][MAXLEN][B];
        int32_t refs[NB];
        uint64_t rng = 12345 + (uint64_t)variant;
        int hits = 0, dedups = 0;
        for (int step = 0; step < 4000; step++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int s = (int)((rng >> 33) % NS), op = (int)((rng >> 40) % 4);
            if (op == 0 && n_tab[s] > 0) { /* release the whole sequence, deepest first */
                for (int k = n_tab[s] - 1; k >= 0; k--) kv_unref(p, tables[s][k]);
                n_tab[s] = reg[s] = 0;
            } else if (n_tab[s] < MAXLEN) {
                /* tokens from a tiny alphabet so chains repeat across sequences */
                int32_t t[B];
                for (int j = 0; j < B; j++) t[j] = (int32_t)((rng >> (20 + j)) & 1);
                int32_t parent = n_tab[s] ? tables[s][n_tab[s] - 1] : KV_NONE;
                int32_t id = KV_NONE;
                if (op == 1 && reg[s] == n_tab[s]) { /* a lookup extends a fully cached chain */
                    id = kv_lookup(p, parent, t);
                    if (id != KV_NONE) {
                        hits++;
                        reg[s]++;
                    }
                }
                if (id == KV_NONE) {
                    id = kv_alloc(p);
                    if (id == KV_NONE) continue;
                    if (reg[s] == n_tab[s]) { /* "computed": register it */
                        int32_t r = kv_register(p, id, parent, t);
                        if (r != id) dedups++;
                        if (kv_is_cached(p, r)) reg[s]++;
                        id = r;
                    }
                }
                memcpy(toks[s][n_tab[s]], t, sizeof t);
                tables[s][n_tab[s]++] = id;
            }
            memset(refs, 0, sizeof refs);
            for (int q = 0; q < NS; q++)
                for (int k = 0; k < n_tab[q]; k++) refs[tables[q][k]]++;
            CHECK_MSG(check_pool(p, refs), "step %d", step);
            /* cached prefixes of each table spell that table's tokens */
            for (int q = 0; q < NS; q++)
                for (int k = 0; k < reg[q]; k++) {
                    CHECK(kv_is_cached(p, tables[q][k]));
                    CHECK_EQ_INT(kv_parent(p, tables[q][k]), k ? tables[q][k - 1] : KV_NONE);
                }
        }
        CHECK_MSG(hits > 50 && dedups > 10, "hits %d dedups %d", hits, dedups);
        kv_pool_free(p);
    }
}

int main(void)
{
    RUN(kvpool_init_rejects_bad_sizes);
    RUN(kvpool_alloc_all_then_none);
    RUN(kvpool_refcount);
    RUN(kvpool_lookup_hit_and_miss);
    RUN(kvpool_eviction_order_is_lru);
    RUN(kvpool_free_list_before_eviction);
    RUN(kvpool_reuses_touched_blocks_first);
    RUN(kvpool_forced_collisions_are_verified);
    RUN(kvpool_register_dedups);
    RUN(kvpool_stale_child_after_parent_eviction);
    RUN(kvpool_random_stress);
    return test_summary();
}
