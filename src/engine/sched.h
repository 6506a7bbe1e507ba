/* sched — the continuous-batching scheduler: which rows of which sequences run in the next step.
 *
 * Owns the waiting queue and the running set, and every sequence's block table (allocating, sharing and
 * freeing blocks through a kv_pool). It runs no math and samples nothing: the engine asks for a plan,
 * runs the forward step, calls sched_commit, samples, appends tokens and removes finished sequences.
 *
 * Policy (one step):
 *   1. decodes: every running sequence with exactly one token left to compute, in queue order;
 *   2. prefill chunks of running sequences that are part-way through their tokens, in queue order;
 *   3. admission: waiting sequences in queue order (strict: the head is never overtaken), each after a
 *      prefix-cache lookup, while rows remain in max_batch_tokens, the running set is under max_seqs, and
 *      the pool has the blocks for the chunk.
 * Queue order is priority first (higher first: a server's interactive requests before its batch ones),
 * then arrival (first come, first served among equal priorities); with one priority it is plain FCFS. A
 * waiting sequence of higher priority never preempts a running one: it is admitted first, that is all.
 * A sequence's n_computed catches up with n_tokens (prompt + generated); there is no separate prefill
 * phase. When a running sequence needs a block and none is available (free or evictable), the chunk
 * shrinks to what fits; if nothing fits, the last running sequence in queue order (the newest of the lowest
 * priority: batch work before interactive) is preempted: its blocks are released (full blocks stay in the
 * prefix cache), it goes back to the waiting queue in its place and later recomputes prompt + generated
 * tokens. The first running sequence in queue order can always preempt all others, and the caller only
 * adds sequences that fit the pool alone, so every sequence finishes (no starvation among equal
 * priorities; lower-priority work waits while higher-priority work keeps the engine full).
 * After planning, the caller may add draft rows (prompt-lookup decoding) to entries with logits
 * (sched_draft): they only use rows and free blocks nobody else wanted, so they change none of the above.
 */
#ifndef NS_ENGINE_SCHED_H
#define NS_ENGINE_SCHED_H

#include <stdint.h>

#include "engine/kvpool.h"
#include "util/err.h"

struct sched_seq;

struct sched_params {
    int32_t max_batch_tokens; /* rows per step (>= 1) */
    int32_t max_seqs;         /* running sequences at once (>= 1, <= max_batch_tokens) */
    int prefix_cache;         /* 1: look up and register full blocks */
    /* (optional) Whether a prefix-cache hit may give sequence q cached block `block` as its block number
     * `index` (blocks before it are hits already); a refusal ends q's hit there. NULL: every hit is taken.
     * (The engine refuses blocks whose prompt logprobs it cannot serve: engine/logprob.h.) */
    int (*hit_ok)(void *user, const struct sched_seq *q, int32_t index, int32_t block);
    void *hit_user;
};

enum sched_state { SCHED_NEW, SCHED_WAITING, SCHED_RUNNING };

/* A sequence. The caller allocates it (it may embed it as the first member of a larger struct), fills it
 * with sched_seq_init and keeps it alive until sched_remove. Fields are read-only to the caller. */
struct sched_seq {
    uint64_t id;
    int32_t *tokens;         /* (n_prompt + max_tokens) prompt then generated ids; n_tokens in use */
    int32_t n_tokens, n_prompt, max_tokens;
    int32_t n_computed;      /* tokens whose KV is in the blocks */
    int32_t *blocks;         /* (cap_blocks) block table */
    int32_t n_blocks, cap_blocks;
    int32_t n_registered;    /* blocks[0 .. n_registered) are full and in the prefix cache, in chain order */
    int32_t n_prompt_cached; /* prompt tokens served from the cache at the first admission */
    int32_t n_preempted;
    int64_t arrival;         /* order of sched_add: smaller = older */
    int32_t priority;        /* higher runs first (sched_seq_set_priority; 0 by default) */
    int64_t preempted_step;  /* step of the last preemption (-1: never) */
    int admitted;            /* admitted at least once */
    int no_prefix_cache;     /* set by the caller before sched_add: never looked up nor registered in the
                                prefix cache (embedding requests: every row is computed, and no KV is kept
                                after the request) */
    enum sched_state state;
    struct sched_seq *prev, *next; /* waiting queue links */
};

/* Copies the prompt; reserves room for max_tokens generated ids. n_prompt >= 1, max_tokens >= 1. */
int sched_seq_init(struct sched_seq *q, uint64_t id, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                   int32_t block_size, struct err *e);
/* Sets q's priority (higher is admitted first and preempted last); only before sched_add (state NEW). */
void sched_seq_set_priority(struct sched_seq *q, int32_t priority);
/* Frees the arrays (the sequence must not be in a scheduler). */
void sched_seq_release(struct sched_seq *q);
/* Appends a generated token (after sched_commit made n_computed == n_tokens). */
void sched_seq_append(struct sched_seq *q, int32_t token);

/* One entry of a plan: rows for positions [pos0, pos0 + n_rows) of seq; logits = 1 when the chunk reaches
 * the end of the sequence's tokens (its last row's logits give the next token). An entry with logits may
 * carry draft rows (sched_draft): its last n_draft rows are at positions n_tokens .. n_tokens + n_draft - 1,
 * tokens proposed after the sequence's own, and every one of them needs logits too (the 1 + n_draft last
 * rows). n_accepted of them (a prefix, set by sched_accept) become the sequence's tokens at sched_commit. */
struct sched_entry {
    struct sched_seq *seq;
    int32_t pos0, n_rows;
    int logits;
    int32_t n_draft, n_accepted;
};

struct sched_plan {
    struct sched_entry *entries; /* (n_entries): decodes, then running prefills, then admissions, each
                                    group in queue order */
    int32_t n_entries, n_rows;
};

struct sched_stats {
    int64_t n_steps;
    int64_t n_preemptions;
    int64_t tokens_cached;  /* prompt tokens served by prefix-cache hits at admission (resumes included) */
    int64_t blocks_peak;    /* most blocks in use after a plan */
};

typedef struct sched sched;

/* pool must outlive the scheduler. */
int sched_init(const struct sched_params *p, kv_pool *pool, sched **out, struct err *e);
/* Frees the scheduler; sequences still in it are removed (blocks released), not freed. */
void sched_free(sched *s);

/* Queues q (state NEW) in the waiting queue after every sequence of its priority or higher (O(1) when
 * no lower-priority sequence waits; else O(those it passes)). The caller has checked that q fits the pool
 * alone: KV for n_prompt + max_tokens - 1 tokens, rounded up to blocks, <= pool blocks (engine_add). */
void sched_add(sched *s, struct sched_seq *q);
/* Removes q from the waiting queue or the running set and releases its blocks (last block first, so the
 * deepest cached blocks are evicted first). */
void sched_remove(sched *s, struct sched_seq *q);
/* The sequence with this id, or NULL. O(running + waiting). */
struct sched_seq *sched_find(sched *s, uint64_t id);

/* Plans the next step (allocating blocks and preempting as needed). The plan is owned by the scheduler
 * and valid until the next sched_schedule. An empty plan means there is nothing to run. */
const struct sched_plan *sched_schedule(sched *s);
/* Adds up to n draft rows to entry i of the last plan (an entry with logits and no draft yet): draft[0..n)
 * is written after the sequence's tokens (q->tokens[n_tokens ..]) and run like tokens, but is not part of
 * the sequence until sched_accept keeps some. Drafts are optional rows: they take what is left of
 * max_batch_tokens, stay within the sequence's room (n_tokens + n_draft <= n_prompt + max_tokens - 1: the
 * token after the last draft must still fit), and take blocks from the free list only (never evicting a
 * cached block, never preempting). Returns the rows added (0..n). */
int32_t sched_draft(sched *s, int32_t i, const int32_t *draft, int32_t n);
/* Keeps the first n_accepted (<= n_draft) draft rows of entry i at the next sched_commit; the others are
 * rejected (the default): their KV slots are given up, no copy. */
void sched_accept(sched *s, int32_t i, int32_t n_accepted);
/* After the forward step of the last plan: advances n_computed of every entry over its rows, its accepted
 * draft rows included (which become tokens: n_tokens grows by n_accepted) and its rejected ones excluded,
 * releases the blocks that only rejected rows used, and registers the blocks it filled in the prefix cache
 * (which may swap a block id for an equal cached one). A rejected draft token never reaches the cache: a
 * block is registered only when committed rows fill it. */
void sched_commit(sched *s);

/* Lowers (or raises back) the admission cap to n, clamped to [1, max_seqs]: no sequence is admitted while
 * n or more run; sequences already running above a lowered cap are not preempted but finish. */
void sched_set_seq_cap(sched *s, int32_t n);
int32_t sched_seq_cap(const sched *s);
int32_t sched_n_running(const sched *s);
int32_t sched_n_waiting(const sched *s);
/* Running and waiting sequences whose priority is below `priority`. O(running + waiting). */
void sched_count_below(const sched *s, int32_t priority, int32_t *n_running, int32_t *n_waiting);
const struct sched_stats *sched_get_stats(const sched *s);

/* Debug check of the invariant at the top of sched.c, including kv_check with refcounts counted from
 * every block table. O(n_blocks * block_size + tokens of running sequences). 0 when it holds. */
int sched_check(const sched *s, struct err *e);

#endif
