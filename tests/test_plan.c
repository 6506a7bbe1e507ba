/* Tests for jobs/plan: keymap folding, ordering by length with prefix groups, permutation invariant. */
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
        k[31] = (uint8_t)i;
        CHECK_EQ_INT(plan_keymap_put(m, k, &added), i);
        CHECK(added);
    }
    for (int i = 0; i < 5000; i += 7) {
        memset(k, 0, 32);
        memcpy(k, &i, sizeof i);
        k[31] = (uint8_t)i;
        CHECK_EQ_INT(plan_keymap_put(m, k, &added), i);
        CHECK(!added);
        CHECK_EQ_INT(plan_keymap_find(m, k), i);
        CHECK(!memcmp(plan_keymap_key(m, i), k, 32));
    }
    k[30] = 1;
    CHECK_EQ_INT(plan_keymap_find(m, k), -1);
    CHECK_EQ_INT(plan_keymap_size(m), 5000);
    plan_keymap_free(m);
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
    struct plan_item items[] = {{shared_a, 6}, {other, 7}, {short1, 2}, {shared_b, 10}, {short2, 1}, {shared_c, 5}};
    uint32_t order[6];
    struct err e;
    CHECK(plan_order(items, 6, 4, PLAN_SORT_ASCENDING, order, &e) == 0);
    CHECK(plan_check_order(order, 6) == 0);
    /* groups by mean length: short (1.5), shared (7), other (7: tie broken by group hash) */
    CHECK_EQ_INT(order[0], 4);
    CHECK_EQ_INT(order[1], 2);
    /* the shared group stays together, sorted by length inside */
    int pos[6];
    for (int i = 0; i < 6; i++) pos[order[i]] = i;
    CHECK(pos[5] + 1 == pos[0] && pos[0] + 1 == pos[3]);
    CHECK(pos[1] == 2 || pos[1] == 5);

    CHECK(plan_order(items, 6, 4, PLAN_SORT_DESCENDING, order, &e) == 0);
    CHECK(plan_check_order(order, 6) == 0);
    CHECK_EQ_INT(order[5], 4);
    CHECK_EQ_INT(order[4], 2);
    for (int i = 0; i < 6; i++) pos[order[i]] = i;
    CHECK(pos[3] + 1 == pos[0] && pos[0] + 1 == pos[5]);

    CHECK(plan_order(items, 6, 4, PLAN_SORT_INPUT, order, &e) == 0);
    for (uint32_t i = 0; i < 6; i++) CHECK_EQ_INT(order[i], i);
}

TEST(identical_prompts_adjacent)
{
    int32_t a[] = {5, 6, 7}, b[] = {5, 6, 8}, c[] = {5, 6, 7};
    struct plan_item items[] = {{a, 3}, {b, 3}, {c, 3}};
    uint32_t order[3];
    struct err e;
    CHECK(plan_order(items, 3, 16, PLAN_SORT_ASCENDING, order, &e) == 0);
    CHECK_EQ_INT(order[0], 0);
    CHECK_EQ_INT(order[1], 2);
    CHECK_EQ_INT(order[2], 1);
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
        items[i].prompt = toks[i];
        items[i].n_prompt = n;
    }
    struct err e;
    CHECK(plan_order(items, N, 4, PLAN_SORT_DESCENDING, order, &e) == 0);
    CHECK(plan_check_order(order, N) == 0);
    uint32_t bad[3] = {0, 0, 1};
    CHECK(plan_check_order(bad, 3) != 0);
}

/* Only pending works (non-NULL prompt) are ordered, in the order plan_order gives their prompts. */
TEST(pending_works_only)
{
    int32_t a[] = {5, 5, 5, 5, 1}, b[] = {1, 2}, c[] = {5, 5, 5, 5, 2, 3, 4}, d[] = {7};
    struct plan_item items[] = {{a, 5}, {NULL, 0}, {b, 2}, {NULL, 0}, {c, 7}, {d, 1}};
    struct plan_item sub[] = {{a, 5}, {b, 2}, {c, 7}, {d, 1}};
    uint32_t sub_work[] = {0, 2, 4, 5};
    struct err e;
    for (int sort = PLAN_SORT_ASCENDING; sort <= PLAN_SORT_INPUT; sort++) {
        uint32_t *order, want[4];
        size_t n;
        CHECK(plan_order_pending(items, 6, 4, (enum plan_sort)sort, &order, &n, &e) == 0);
        CHECK(plan_order(sub, 4, 4, (enum plan_sort)sort, want, &e) == 0);
        CHECK_EQ_INT(n, 4);
        for (int i = 0; i < 4; i++) CHECK_EQ_INT(order[i], sub_work[want[i]]);
        free(order);
    }
    uint32_t *order;
    size_t n = 9;
    CHECK(plan_order_pending(items + 1, 1, 4, PLAN_SORT_ASCENDING, &order, &n, &e) == 0);
    CHECK(order != NULL && n == 0);
    free(order);
}

int main(void)
{
    RUN(keymap_folds_and_grows);
    RUN(order_by_length_and_groups);
    RUN(identical_prompts_adjacent);
    RUN(large_permutation);
    RUN(pending_works_only);
    return test_summary();
}
