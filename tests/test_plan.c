/* Tests for jobs/plan: keymap folding on key prefixes, ordering by length with prefix groups from plan items,
 * a subset of indices through a stride, permutation invariant. */
#include "jobs/plan.h"
#include "test.h"

TEST(keymap_folds_and_grows)
{
    plan_keymap *m = plan_keymap_init();
    CHECK(m != NULL);
    uint8_t k[32] = {0};
    int added;
    for (int i = 0; i < 5000; i++) {
        memset(k, 0, 32);
        memcpy(k, &i, sizeof i);
        k[15] = (uint8_t)i;
        CHECK_EQ_INT(plan_keymap_put(m, k, &added), i);
        CHECK(added);
    }
    for (int i = 0; i < 5000; i += 7) {
        memset(k, 0, 32);
        memcpy(k, &i, sizeof i);
        k[15] = (uint8_t)i;
        k[31] = 0xaa; /* bytes past PLAN_KEY_BYTES do not count */
        CHECK_EQ_INT(plan_keymap_put(m, k, &added), i);
        CHECK(!added);
        CHECK_EQ_INT(plan_keymap_find(m, k), i);
        CHECK(!memcmp(plan_keymap_key(m, i), k, PLAN_KEY_BYTES));
    }
    k[15] = 1; /* the keymap tells keys apart by their first PLAN_KEY_BYTES bytes */
    CHECK_EQ_INT(plan_keymap_find(m, k), -1);
    CHECK(plan_keymap_bytes(m) >= 5000 * (PLAN_KEY_BYTES + 4));
    CHECK_EQ_INT(plan_keymap_size(m), 5000);
    plan_keymap_free(m);
}

/* With its slot table dropped (after reconcile) the keymap still answers, by a scan, and a put makes the
 * table again. */
TEST(keymap_drop_index)
{
    plan_keymap *m = plan_keymap_init();
    uint8_t k[32] = {0};
    int added;
    for (int i = 0; i < 3000; i++) {
        memcpy(k, &i, sizeof i);
        CHECK_EQ_INT(plan_keymap_put(m, k, &added), i);
    }
    size_t with = plan_keymap_bytes(m);
    plan_keymap_drop_index(m);
    CHECK(plan_keymap_bytes(m) == 3000 * PLAN_KEY_BYTES && plan_keymap_bytes(m) < with);
    for (int i = 0; i < 3000; i += 11) {
        memcpy(k, &i, sizeof i);
        CHECK_EQ_INT(plan_keymap_find(m, k), i);
    }
    int i = 5000;
    memcpy(k, &i, sizeof i);
    CHECK_EQ_INT(plan_keymap_find(m, k), -1);
    CHECK_EQ_INT(plan_keymap_put(m, k, &added), 3000);
    CHECK(added);
    for (i = 0; i < 3000; i += 13) {
        memcpy(k, &i, sizeof i);
        CHECK_EQ_INT(plan_keymap_put(m, k, &added), i);
        CHECK(!added);
    }
    CHECK_EQ_INT(plan_keymap_size(m), 3001);
    plan_keymap_free(m);
}

/* Plan items of prompts for blocks of kv_block tokens. */
static void items_of(const int32_t *const *prompts, const int32_t *lens, size_t n, int32_t kv_block,
                     struct plan_item *items, uint32_t *order)
{
    for (size_t i = 0; i < n; i++) {
        items[i] = plan_item_of(prompts[i], lens[i], kv_block);
        order[i] = (uint32_t)i;
    }
}

TEST(order_by_length_and_groups)
{
    /* block 4: prompts with the shared head {9,9,9,9} form a group; short ones form the "no block" group */
    int32_t shared_a[] = {9, 9, 9, 9, 1, 2};
    int32_t shared_b[] = {9, 9, 9, 9, 5, 6, 7, 8, 1, 1};
    int32_t shared_c[] = {9, 9, 9, 9, 3};
    int32_t other[] = {1, 2, 3, 4, 5, 6, 7};
    int32_t short1[] = {1, 2};
    int32_t short2[] = {1};
    const int32_t *prompts[] = {shared_a, other, short1, shared_b, short2, shared_c};
    const int32_t lens[] = {6, 7, 2, 10, 1, 5};
    struct plan_item items[6];
    uint32_t order[6];
    struct err e;
    items_of(prompts, lens, 6, 4, items, order);
    CHECK(items[2].group == 0 && items[0].group == items[3].group && items[0].group != items[1].group);
    CHECK(plan_order(items, sizeof items[0], order, 6, PLAN_SORT_ASCENDING, &e) == 0);
    CHECK(plan_check_order(order, 6) == 0);
    /* groups by mean length: short (1.5), shared (7), other (7: tie broken by group hash) */
    CHECK_EQ_INT(order[0], 4);
    CHECK_EQ_INT(order[1], 2);
    /* the shared group stays together, sorted by length inside */
    int pos[6];
    for (int i = 0; i < 6; i++) pos[order[i]] = i;
    CHECK(pos[5] + 1 == pos[0] && pos[0] + 1 == pos[3]);
    CHECK(pos[1] == 2 || pos[1] == 5);

    items_of(prompts, lens, 6, 4, items, order);
    CHECK(plan_order(items, sizeof items[0], order, 6, PLAN_SORT_DESCENDING, &e) == 0);
    CHECK(plan_check_order(order, 6) == 0);
    CHECK_EQ_INT(order[5], 4);
    CHECK_EQ_INT(order[4], 2);
    for (int i = 0; i < 6; i++) pos[order[i]] = i;
    CHECK(pos[3] + 1 == pos[0] && pos[0] + 1 == pos[5]);

    items_of(prompts, lens, 6, 4, items, order);
    CHECK(plan_order(items, sizeof items[0], order, 6, PLAN_SORT_INPUT, &e) == 0);
    for (uint32_t i = 0; i < 6; i++) CHECK_EQ_INT(order[i], i);
}

TEST(identical_prompts_adjacent)
{
    int32_t a[] = {5, 6, 7}, b[] = {5, 6, 8}, c[] = {5, 6, 7}, d[] = {5, 6, 9};
    const int32_t *prompts[] = {a, b, c, d};
    const int32_t lens[] = {3, 3, 3, 3};
    struct plan_item items[4];
    uint32_t order[4];
    struct err e;
    items_of(prompts, lens, 4, 16, items, order);
    CHECK(plan_order(items, sizeof items[0], order, 4, PLAN_SORT_ASCENDING, &e) == 0);
    int pos[4];
    for (int i = 0; i < 4; i++) pos[order[i]] = i;
    CHECK(pos[0] + 1 == pos[2]); /* a before c: equal hashes fall back to the index */
}

TEST(large_permutation)
{
    enum { N = 20000 };
    static int32_t toks[N][8];
    static struct plan_item items[N];
    static uint32_t order[N];
    unsigned s = 1;
    for (int i = 0; i < N; i++) {
        int n = 1 + (int)((s = s * 1103515245 + 12345) >> 16) % 8;
        for (int k = 0; k < n; k++) toks[i][k] = (int32_t)((s = s * 1103515245 + 12345) >> 16) % 3;
        items[i] = plan_item_of(toks[i], n, 4);
        order[i] = (uint32_t)i;
    }
    struct err e;
    CHECK(plan_order(items, sizeof items[0], order, N, PLAN_SORT_DESCENDING, &e) == 0);
    CHECK(plan_check_order(order, N) == 0);
    uint32_t bad[3] = {0, 0, 1};
    CHECK(plan_check_order(bad, 3) != 0);
}

/* A subset of the indices is ordered (the pending works of a run), items found through a stride. */
TEST(subset_with_stride)
{
    struct row {
        uint64_t other;
        struct plan_item plan;
    } rows[6];
    int32_t a[] = {5, 5, 5, 5, 1}, b[] = {1, 2}, c[] = {5, 5, 5, 5, 2, 3, 4}, d[] = {7};
    const int32_t *prompts[] = {a, d, b, d, c, d};
    const int32_t lens[] = {5, 1, 2, 1, 7, 1};
    for (int i = 0; i < 6; i++) rows[i].plan = plan_item_of(prompts[i], lens[i], 4);
    uint32_t order[] = {0, 2, 4, 5};
    struct err e;
    CHECK(plan_order(&rows[0].plan, sizeof rows[0], order, 4, PLAN_SORT_ASCENDING, &e) == 0);
    /* short ones first (group 0: d, b by length), then the group of a and c by length */
    CHECK_EQ_INT(order[0], 5);
    CHECK_EQ_INT(order[1], 2);
    CHECK_EQ_INT(order[2], 0);
    CHECK_EQ_INT(order[3], 4);
}

/* A request needs its prompt + what it may generate in whole blocks, one more, less a first block it shares
 * with the request before it. */
TEST(kv_blocks_of_a_request)
{
    struct plan_item a = {7, 40, 1}, b = {7, 50, 2}, c = {9, 50, 3}, tiny = {0, 5, 4};
    CHECK_EQ_INT(plan_kv_blocks(&a, NULL, 24, 16), 4 + 1);  /* 64 tokens: 4 blocks, one more */
    CHECK_EQ_INT(plan_kv_blocks(&a, NULL, 25, 16), 5 + 1);  /* 65: 5 */
    CHECK_EQ_INT(plan_kv_blocks(&b, &a, 14, 16), 4 + 1 - 1); /* shares its first block with a */
    CHECK_EQ_INT(plan_kv_blocks(&c, &a, 14, 16), 4 + 1);     /* another group */
    CHECK_EQ_INT(plan_kv_blocks(&tiny, &tiny, 0, 16), 1 + 1); /* shorter than a block: shares nothing */
}

/* The largest n whose every window of n consecutive requests fits: more sequences when requests are short,
 * fewer when they are long, the ceiling when everything fits, 1 when nothing does. */
TEST(max_seqs_from_the_pool)
{
    uint32_t shorts[100], longs[100], mixed[100];
    for (int i = 0; i < 100; i++) shorts[i] = 4, longs[i] = 40, mixed[i] = i < 50 ? 4 : 40;
    struct plan_fit f = plan_max_seqs(shorts, 100, 400, 512);
    CHECK_EQ_INT(f.n, 512); /* all 100 fit (400 blocks): the ceiling */
    CHECK_EQ_INT(f.window_blocks, 400);
    CHECK_EQ_INT(f.window_seqs, 100);
    f = plan_max_seqs(shorts, 100, 399, 512);
    CHECK_EQ_INT(f.n, 99); /* 99 x 4 = 396 */
    CHECK_EQ_INT(f.window_seqs, 99);
    f = plan_max_seqs(longs, 100, 400, 512);
    CHECK_EQ_INT(f.n, 10); /* long prompts: fewer */
    CHECK_EQ_INT(f.window_blocks, 400);
    f = plan_max_seqs(mixed, 100, 400, 512);
    CHECK_EQ_INT(f.n, 10); /* the long end of the order binds */
    f = plan_max_seqs(shorts, 100, 400, 16);
    CHECK_EQ_INT(f.n, 16); /* the ceiling (the knee) */
    CHECK_EQ_INT(f.window_blocks, 64);
    f = plan_max_seqs(longs, 100, 10, 16);
    CHECK_EQ_INT(f.n, 1); /* not even one fits: one (the engine preempts or refuses) */
    f = plan_max_seqs(NULL, 0, 10, 16);
    CHECK_EQ_INT(f.n, 16);
    CHECK_EQ_INT(f.window_seqs, 0);
}

int main(void)
{
    RUN(keymap_folds_and_grows);
    RUN(order_by_length_and_groups);
    RUN(keymap_drop_index);
    RUN(identical_prompts_adjacent);
    RUN(large_permutation);
    RUN(subset_with_stride);
    RUN(kv_blocks_of_a_request);
    RUN(max_seqs_from_the_pool);
    return test_summary();
}
