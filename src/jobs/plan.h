/* plan — which work to do and in what order.
 *
 * Folding and skipping: plan_keymap maps a 32-byte key to a dense index, so requests with the same key
 * share one unit of work and keys already done in the store are found in O(1).
 *
 * Ordering (plan_order): requests whose prompts share their first full KV block (kv_block tokens: the
 * prefix cache's unit) form a group and are submitted together, so the shared blocks are computed once and
 * stay cached while the group runs; prompts shorter than one block can share nothing and form one group.
 * Groups are ordered by their mean prompt length and, inside a group, requests by prompt length, in the
 * chosen direction; equal lengths are ordered by their tokens (identical prompts end up adjacent). See
 * bench/NOTES.md for the measurement behind the default direction. plan_order_pending applies this to the
 * works of a run that are not done yet.
 */
#ifndef NS_JOBS_PLAN_H
#define NS_JOBS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct plan_keymap plan_keymap;

plan_keymap *plan_keymap_init(void); /* NULL on out-of-memory */
void plan_keymap_free(plan_keymap *m);
/* Index of key, adding it as the next index (0, 1, 2, ...) if new; *added says which. -1 on OOM.
 * Amortized O(1). */
int64_t plan_keymap_put(plan_keymap *m, const uint8_t key[32], int *added);
/* Index of key or -1. */
int64_t plan_keymap_find(const plan_keymap *m, const uint8_t key[32]);
int64_t plan_keymap_size(const plan_keymap *m);
/* The key stored for an index (valid until the next put). */
const uint8_t *plan_keymap_key(const plan_keymap *m, int64_t index);

enum plan_sort {
    PLAN_SORT_ASCENDING,  /* shortest prompts first */
    PLAN_SORT_DESCENDING, /* longest prompts first */
    PLAN_SORT_INPUT       /* input order (no sorting, no grouping) */
};

const char *plan_sort_name(enum plan_sort s); /* "ascending", "descending", "input" */
int plan_sort_parse(const char *s, enum plan_sort *out); /* -1 if unknown */

struct plan_item {
    const int32_t *prompt; /* (n_prompt) rendered prompt ids; borrowed */
    int32_t n_prompt;
};

/* Writes a permutation of [0, n) into order (n entries): the submission order. O(n log n) time,
 * O(n) memory. kv_block <= 0 disables grouping. */
int plan_order(const struct plan_item *items, size_t n, int32_t kv_block, enum plan_sort sort, uint32_t *order,
               struct err *e);

/* Debug check: order is a permutation of [0, n). 0 when it holds. */
int plan_check_order(const uint32_t *order, size_t n);

/* The submission order of the pending works: items[w] is work w's prompt, or {NULL, 0} when w is not pending
 * (done in the store). *order = the indices of the pending works as plan_order orders their prompts
 * (checked to be a permutation), malloc'd, *n_order entries (not NULL on success, also when none is
 * pending). O(n + m log m) for m pending works. */
int plan_order_pending(const struct plan_item *items, size_t n, int32_t kv_block, enum plan_sort sort, uint32_t **order,
                       size_t *n_order, struct err *e);

#endif
