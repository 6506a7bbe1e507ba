/* plan — which work to do and in what order.
 *
 * Folding and skipping: plan_keymap maps a key to a dense index, so requests with the same key share one
 * unit of work and keys already done in the store are found in O(1).
 *
 * Ordering (plan_order): requests whose prompts share their first full KV block (kv_block tokens: the
 * prefix cache's unit) form a group and are submitted together, so the shared blocks are computed once and
 * stay cached while the group runs; prompts shorter than one block can share nothing and form one group.
 * Groups are ordered by their mean prompt length and, inside a group, requests by prompt length, in the
 * chosen direction; equal lengths are ordered by a hash of their tokens (identical prompts end up adjacent).
 * Only that summary of a prompt (struct plan_item, 12 bytes) is kept, not its tokens. See bench/NOTES.md
 * for the measurement behind the default direction.
 */
#ifndef NS_JOBS_PLAN_H
#define NS_JOBS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct plan_keymap plan_keymap;

/* The part of a request key the keymap holds: the first 16 bytes of the sha256 (128 bits tell 10^9 keys
 * apart with a chance of a collision below 10^-20), so that a unique request costs 16 bytes of key. */
#define PLAN_KEY_BYTES 16

plan_keymap *plan_keymap_init(void); /* NULL on out-of-memory */
void plan_keymap_free(plan_keymap *m);
/* Index of key (its first PLAN_KEY_BYTES bytes), adding it as the next index (0, 1, 2, ...) if new; *added
 * says which. -1 on OOM or past UINT32_MAX - 1 keys. Amortized O(1). */
int64_t plan_keymap_put(plan_keymap *m, const uint8_t *key, int *added);
/* Index of key (its first PLAN_KEY_BYTES bytes) or -1. */
int64_t plan_keymap_find(const plan_keymap *m, const uint8_t *key);
int64_t plan_keymap_size(const plan_keymap *m);
/* Frees the slot table (4 bytes a slot, up to 8/3 a key) when no more lookups are due: find then scans
 * (O(keys)), and the next put makes the table again (O(keys), once). The keys stay. */
void plan_keymap_drop_index(plan_keymap *m);
/* The PLAN_KEY_BYTES bytes stored for an index (valid until the next put). */
const uint8_t *plan_keymap_key(const plan_keymap *m, int64_t index);
/* Bytes the keymap holds in use (its keys and its slot table), for the memory budget. */
size_t plan_keymap_bytes(const plan_keymap *m);

enum plan_sort {
    PLAN_SORT_ASCENDING,  /* shortest prompts first */
    PLAN_SORT_DESCENDING, /* longest prompts first */
    PLAN_SORT_INPUT       /* input order (no sorting, no grouping) */
};

const char *plan_sort_name(enum plan_sort s); /* "ascending", "descending", "input" */
int plan_sort_parse(const char *s, enum plan_sort *out); /* -1 if unknown */

/* What ordering needs of a prompt, kept instead of its tokens (12 bytes). */
struct plan_item {
    uint32_t group;   /* hash of its first full KV block; 0: shorter than one block (or grouping off) */
    int32_t n_prompt;
    uint32_t tokens;  /* hash of all its tokens: equal lengths are ordered by it, so identical prompts are
                         adjacent */
};

/* The plan item of a prompt for blocks of kv_block tokens (kv_block <= 0: no grouping). */
struct plan_item plan_item_of(const int32_t *prompt, int32_t n_prompt, int32_t kv_block);

/* Sorts order[0..n) (indices of items; item i at (const char *)items + i * stride) into submission order:
 * groups by mean prompt length, inside a group by length, then by the tokens' hash, then by index (see the
 * top of this file). PLAN_SORT_INPUT leaves order as it is. O(n log n) time; O(max index) extra memory
 * (4 bytes an index, for the group means). Checks that the result holds the same indices. */
int plan_order(const void *items, size_t stride, uint32_t *order, size_t n, enum plan_sort sort, struct err *e);

/* Concurrency from the KV pool (plan_max_seqs). A request in flight needs plan_kv_blocks blocks: its prompt
 * and what it may generate (n_gen) in whole blocks, one more for the draft rows past its end, less its first
 * block when it shares it with the request before it in submission order (prev; NULL: none): the prefix
 * cache holds a shared block once. With n sequences running, the running set is about n consecutive
 * requests of the order (finished ones are replaced by the next), so n fits the pool when every window of
 * n consecutive requests needs at most its blocks; then no sequence is ever preempted for room. */
int64_t plan_kv_blocks(const struct plan_item *it, const struct plan_item *prev, int64_t n_gen, int32_t kv_block);

struct plan_fit {
    int32_t n;             /* the largest n in [1, ceiling] that fits (1 when not even one request does) */
    int64_t window_blocks; /* the most blocks any n consecutive requests need (all of them when fewer) */
    int32_t window_seqs;   /* how many requests that window holds (n, or all when fewer) */
};

/* The fit for requests needing blocks[0..n_req) (in submission order) in a pool of kv_blocks blocks, at most
 * ceiling at once. Monotone: a window of n - 1 is inside one of n, so the largest n is found by bisection,
 * O(n_req log ceiling). */
struct plan_fit plan_max_seqs(const uint32_t *blocks, size_t n_req, int64_t kv_blocks, int32_t ceiling);

/* Debug check: order is a permutation of [0, n). 0 when it holds. */
int plan_check_order(const uint32_t *order, size_t n);

#endif
