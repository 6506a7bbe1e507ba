/* sched — continuous batching over the kv_pool. Policy: see sched.h.
 *
 * Invariant (checked by sched_check):
 *  - the running set holds at most max_seqs sequences in state RUNNING, in queue order (priority
 *    descending, then arrival); the waiting queue holds sequences in state WAITING, in queue order
 *    (preempted ones go back in their place);
 *  - a waiting sequence holds no blocks and has n_computed 0;
 *  - a running sequence has n_computed <= n_tokens, blocks covering at least n_computed tokens and at most
 *    n_tokens (rounded up to a block), and n_registered * block_size <= n_computed (between sched_draft
 *    and sched_commit, blocks also cover the draft rows; the commit releases those of rejected rows);
 *  - blocks[0 .. n_registered) are cached, each registered under the previous one (the first under
 *    KV_NONE): the table spells a verified chain of the sequence's tokens; n_registered is 0 for a
 *    sequence with no_prefix_cache;
 *  - every other block of a table is held by that table alone (refcount 1, not cached): a sequence writes
 *    KV only into blocks nobody else can read;
 *  - the pool's refcounts equal the number of block-table entries naming each block (kv_check).
 */
#include "engine/sched.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct sched {
    struct sched_params p;
    kv_pool *pool;
    int32_t block_size;
    struct sched_seq **running; /* (max_seqs) in queue order (runs_before) */
    int32_t n_running;
    int32_t seq_cap; /* admissions stop at this many running: in [1, p.max_seqs] (sched_set_seq_cap) */
    struct sched_seq *wait_head, *wait_tail;
    int32_t n_waiting;
    int64_t next_arrival;
    struct sched_plan plan;
    struct sched_entry *entries; /* (max_seqs) */
    int32_t *ref_scratch;        /* (pool blocks) for sched_check */
    struct sched_stats stats;
};

/* ---- sequences ---- */

static int32_t ceil_div(int64_t a, int32_t b)
{
    return (int32_t)((a + b - 1) / b);
}

int sched_seq_init(struct sched_seq *q, uint64_t id, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                   int32_t block_size, struct err *e)
{
    memset(q, 0, sizeof *q);
    if (n_prompt < 1) return err_set(e, "request %llu: empty prompt", (unsigned long long)id);
    if (max_tokens < 1) return err_set(e, "request %llu: max_tokens %d < 1", (unsigned long long)id, (int)max_tokens);
    if ((int64_t)n_prompt + max_tokens > INT32_MAX / 2)
        return err_set(e, "request %llu: prompt + max_tokens too large", (unsigned long long)id);
    q->id = id;
    q->n_prompt = q->n_tokens = n_prompt;
    q->max_tokens = max_tokens;
    q->cap_blocks = ceil_div((int64_t)n_prompt + max_tokens, block_size);
    q->tokens = malloc(((size_t)n_prompt + (size_t)max_tokens) * sizeof *q->tokens);
    q->blocks = malloc((size_t)q->cap_blocks * sizeof *q->blocks);
    if (!q->tokens || !q->blocks) {
        sched_seq_release(q);
        return err_set(e, "request %llu: out of memory", (unsigned long long)id);
    }
    memcpy(q->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    q->preempted_step = -1;
    q->state = SCHED_NEW;
    return 0;
}

void sched_seq_set_priority(struct sched_seq *q, int32_t priority)
{
    assert(q->state == SCHED_NEW);
    q->priority = priority;
}

void sched_seq_release(struct sched_seq *q)
{
    assert(q->n_blocks == 0);
    free(q->tokens);
    free(q->blocks);
    q->tokens = q->blocks = NULL;
}

void sched_seq_append(struct sched_seq *q, int32_t token)
{
    assert(q->n_computed == q->n_tokens && q->n_tokens < q->n_prompt + q->max_tokens);
    q->tokens[q->n_tokens++] = token;
}

/* ---- init ---- */

int sched_init(const struct sched_params *p, kv_pool *pool, sched **out, struct err *e)
{
    *out = NULL;
    if (p->max_seqs < 1 || p->max_batch_tokens < 1 || p->max_seqs > p->max_batch_tokens)
        return err_set(e, "scheduler: need 1 <= max_seqs (%d) <= max_batch_tokens (%d)", (int)p->max_seqs,
                       (int)p->max_batch_tokens);
    sched *s = calloc(1, sizeof *s);
    if (!s) return err_set(e, "scheduler: out of memory");
    s->p = *p;
    s->seq_cap = p->max_seqs;
    s->pool = pool;
    s->block_size = kv_block_size(pool);
    s->running = calloc((size_t)p->max_seqs, sizeof *s->running);
    s->entries = calloc((size_t)p->max_seqs, sizeof *s->entries);
    s->ref_scratch = calloc((size_t)kv_n_blocks(pool), sizeof *s->ref_scratch);
    if (!s->running || !s->entries || !s->ref_scratch) {
        sched_free(s);
        return err_set(e, "scheduler: out of memory");
    }
    s->plan.entries = s->entries;
    *out = s;
    return 0;
}

/* Releases a sequence's blocks, deepest first. */
static void release_blocks(sched *s, struct sched_seq *q)
{
    for (int32_t i = q->n_blocks - 1; i >= 0; i--) kv_unref(s->pool, q->blocks[i]);
    q->n_blocks = q->n_registered = 0;
    q->n_computed = 0;
}

void sched_free(sched *s)
{
    if (!s) return;
    while (s->n_running) sched_remove(s, s->running[s->n_running - 1]);
    while (s->wait_head) sched_remove(s, s->wait_head);
    free(s->running);
    free(s->entries);
    free(s->ref_scratch);
    free(s);
}

/* ---- queues ---- */

/* Queue order: a before b when its priority is higher, or equal and it arrived first. */
static int runs_before(const struct sched_seq *a, const struct sched_seq *b)
{
    return a->priority != b->priority ? a->priority > b->priority : a->arrival < b->arrival;
}

/* Inserts into the waiting queue keeping queue order (scans from the tail: new arrivals of the lowest
 * priority waiting are O(1)). */
static void wait_insert(sched *s, struct sched_seq *q)
{
    struct sched_seq *after = s->wait_tail;
    while (after && runs_before(q, after)) after = after->prev;
    q->prev = after;
    q->next = after ? after->next : s->wait_head;
    if (q->next) q->next->prev = q;
    else s->wait_tail = q;
    if (after) after->next = q;
    else s->wait_head = q;
    q->state = SCHED_WAITING;
    s->n_waiting++;
}

static void wait_unlink(sched *s, struct sched_seq *q)
{
    if (q->prev) q->prev->next = q->next;
    else s->wait_head = q->next;
    if (q->next) q->next->prev = q->prev;
    else s->wait_tail = q->prev;
    q->prev = q->next = NULL;
    s->n_waiting--;
}

static void running_insert(sched *s, struct sched_seq *q)
{
    assert(s->n_running < s->p.max_seqs);
    int32_t i = s->n_running;
    while (i > 0 && runs_before(q, s->running[i - 1])) {
        s->running[i] = s->running[i - 1];
        i--;
    }
    s->running[i] = q;
    s->n_running++;
    q->state = SCHED_RUNNING;
}

static void running_unlink(sched *s, struct sched_seq *q)
{
    int32_t i = 0;
    while (i < s->n_running && s->running[i] != q) i++;
    assert(i < s->n_running);
    memmove(s->running + i, s->running + i + 1, (size_t)(s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
}

void sched_add(sched *s, struct sched_seq *q)
{
    assert(q->state == SCHED_NEW && q->n_blocks == 0);
    q->arrival = s->next_arrival++;
    wait_insert(s, q);
}

void sched_remove(sched *s, struct sched_seq *q)
{
    if (q->state == SCHED_RUNNING) running_unlink(s, q);
    else if (q->state == SCHED_WAITING) wait_unlink(s, q);
    release_blocks(s, q);
    q->state = SCHED_NEW;
}

struct sched_seq *sched_find(sched *s, uint64_t id)
{
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->id == id) return s->running[i];
    for (struct sched_seq *q = s->wait_head; q; q = q->next)
        if (q->id == id) return q;
    return NULL;
}

void sched_set_seq_cap(sched *s, int32_t n)
{
    s->seq_cap = n < 1 ? 1 : n > s->p.max_seqs ? s->p.max_seqs : n;
}

int32_t sched_seq_cap(const sched *s) { return s->seq_cap; }

int32_t sched_n_running(const sched *s) { return s->n_running; }
int32_t sched_n_waiting(const sched *s) { return s->n_waiting; }

void sched_count_below(const sched *s, int32_t priority, int32_t *n_running, int32_t *n_waiting)
{
    *n_running = *n_waiting = 0;
    for (int32_t i = 0; i < s->n_running; i++) *n_running += s->running[i]->priority < priority;
    for (const struct sched_seq *q = s->wait_head; q; q = q->next) *n_waiting += q->priority < priority;
}
const struct sched_stats *sched_get_stats(const sched *s) { return &s->stats; }

/* ---- planning ---- */

/* Rows q can run from n_computed with its current blocks plus `extra` more. */
static int32_t rows_that_fit(const sched *s, const struct sched_seq *q, int32_t extra)
{
    int64_t cap = (int64_t)(q->n_blocks + extra) * s->block_size - q->n_computed;
    return cap < 0 ? 0 : cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
}

/* Allocates blocks so that q covers n_computed + n_rows tokens; all-or-nothing. */
static int grow(sched *s, struct sched_seq *q, int32_t n_rows)
{
    int32_t need = ceil_div((int64_t)q->n_computed + n_rows, s->block_size) - q->n_blocks;
    if (need <= 0) return 1;
    if (need > kv_n_available(s->pool)) return 0;
    assert(q->n_blocks + need <= q->cap_blocks);
    for (int32_t i = 0; i < need; i++) {
        int32_t id = kv_alloc(s->pool);
        assert(id != KV_NONE);
        q->blocks[q->n_blocks++] = id;
    }
    return 1;
}

static void plan_drop(sched *s, struct sched_seq *q)
{
    struct sched_plan *pl = &s->plan;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        if (pl->entries[i].seq != q) continue;
        pl->n_rows -= pl->entries[i].n_rows;
        memmove(pl->entries + i, pl->entries + i + 1, (size_t)(pl->n_entries - i - 1) * sizeof *pl->entries);
        pl->n_entries--;
        return;
    }
}

static void preempt(sched *s, struct sched_seq *q)
{
    plan_drop(s, q);
    running_unlink(s, q);
    release_blocks(s, q);
    q->n_preempted++;
    q->preempted_step = s->stats.n_steps;
    s->stats.n_preemptions++;
    wait_insert(s, q);
}

static void plan_add(sched *s, struct sched_seq *q, int32_t n_rows)
{
    struct sched_plan *pl = &s->plan;
    assert(pl->n_entries < s->p.max_seqs && n_rows >= 1);
#ifndef NDEBUG
    /* a sequence writes only into blocks it holds alone */
    for (int32_t p = q->n_computed; p < q->n_computed + n_rows; p += s->block_size - p % s->block_size) {
        int32_t id = q->blocks[p / s->block_size];
        assert(kv_refcount(s->pool, id) == 1 && !kv_is_cached(s->pool, id));
    }
#endif
    pl->entries[pl->n_entries++] = (struct sched_entry){
        .seq = q, .pos0 = q->n_computed, .n_rows = n_rows, .logits = q->n_computed + n_rows == q->n_tokens};
    pl->n_rows += n_rows;
}

static void note_peak(sched *s)
{
    int64_t used = kv_n_used(s->pool);
    if (used > s->stats.blocks_peak) s->stats.blocks_peak = used;
}

/* Schedules up to `want` rows of running sequence q, shrinking the chunk to the blocks available and
 * preempting the last running sequences in queue order (the newest of the lowest priority) when not even
 * one row fits. Returns 0 if q itself was
 * preempted. */
static int schedule_running(sched *s, struct sched_seq *q, int32_t want)
{
    for (;;) {
        int32_t fit = rows_that_fit(s, q, kv_n_available(s->pool));
        if (fit >= 1) {
            int32_t n = want < fit ? want : fit;
            int ok = grow(s, q, n);
            assert(ok);
            (void)ok;
            plan_add(s, q, n);
            return 1;
        }
        struct sched_seq *victim = s->running[s->n_running - 1];
        preempt(s, victim);
        if (victim == q) return 0;
    }
}

/* Prefix-cache lookup for a sequence being admitted: takes the longest cached chain of full blocks that
 * still leaves at least one token to compute (and that p.hit_ok accepts, block by block). */
static void lookup_prefix(sched *s, struct sched_seq *q)
{
    assert(q->n_blocks == 0 && q->n_computed == 0);
    if (!s->p.prefix_cache || q->no_prefix_cache) return;
    int32_t max_hits = (q->n_tokens - 1) / s->block_size;
    int32_t parent = KV_NONE;
    for (int32_t i = 0; i < max_hits; i++) {
        int32_t id = kv_lookup(s->pool, parent, q->tokens + (size_t)i * (size_t)s->block_size);
        if (id == KV_NONE) break;
        if (s->p.hit_ok && !s->p.hit_ok(s->p.hit_user, q, i, id)) {
            kv_unref(s->pool, id); /* back to the LRU list if nobody else holds it */
            break;
        }
        q->blocks[q->n_blocks++] = id;
        parent = id;
    }
    q->n_registered = q->n_blocks;
    q->n_computed = q->n_blocks * s->block_size;
}

const struct sched_plan *sched_schedule(sched *s)
{
    struct sched_plan *pl = &s->plan;
    pl->n_entries = pl->n_rows = 0;
    int32_t budget = s->p.max_batch_tokens;

    /* 1 and 2: running decodes, then running prefill chunks; in queue order. Preemption only removes
     * sequences from the tail (the last in queue order), so index i stays valid. */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < s->n_running; i++) {
            struct sched_seq *q = s->running[i];
            int32_t left = q->n_tokens - q->n_computed;
            assert(left >= 1);
            if ((pass == 0) != (left == 1)) continue;
            budget = s->p.max_batch_tokens - pl->n_rows;
            if (budget <= 0) break;
            schedule_running(s, q, left < budget ? left : budget);
        }
    }

    /* 3: admissions, strictly in queue order */
    budget = s->p.max_batch_tokens - pl->n_rows;
    while (budget > 0 && s->n_running < s->seq_cap && s->wait_head) {
        struct sched_seq *q = s->wait_head;
        if (q->preempted_step == s->stats.n_steps) break; /* not back in the step that preempted it */
        lookup_prefix(s, q);
        int32_t left = q->n_tokens - q->n_computed;
        int32_t n = left < budget ? left : budget;
        if (!grow(s, q, n)) {
            release_blocks(s, q); /* cache hits go back to the LRU */
            break;
        }
        int32_t cached = q->n_computed < q->n_prompt ? q->n_computed : q->n_prompt;
        s->stats.tokens_cached += cached;
        if (!q->admitted) {
            q->admitted = 1;
            q->n_prompt_cached = cached;
        }
        wait_unlink(s, q);
        running_insert(s, q);
        plan_add(s, q, n);
        budget -= n;
    }

    note_peak(s);
    return pl;
}

int32_t sched_draft(sched *s, int32_t i, const int32_t *draft, int32_t n)
{
    struct sched_plan *pl = &s->plan;
    assert(i >= 0 && i < pl->n_entries);
    struct sched_entry *en = &pl->entries[i];
    struct sched_seq *q = en->seq;
    assert(en->logits && en->n_draft == 0 && en->pos0 + en->n_rows == q->n_tokens);
    int32_t room = q->n_prompt + q->max_tokens - 1 - q->n_tokens;
    int32_t rows_left = s->p.max_batch_tokens - pl->n_rows;
    if (n > room) n = room;
    if (n > rows_left) n = rows_left;
    /* blocks: the ones the sequence holds, then free ones only */
    int32_t fit = rows_that_fit(s, q, kv_n_free(s->pool)) - en->n_rows;
    if (n > fit) n = fit;
    if (n <= 0) return 0;
    int ok = grow(s, q, en->n_rows + n);
    assert(ok);
    (void)ok;
    memcpy(q->tokens + q->n_tokens, draft, (size_t)n * sizeof *draft);
    en->n_rows += n;
    en->n_draft = n;
    en->n_accepted = 0;
    pl->n_rows += n;
    note_peak(s);
    return n;
}

void sched_accept(sched *s, int32_t i, int32_t n_accepted)
{
    assert(i >= 0 && i < s->plan.n_entries);
    struct sched_entry *en = &s->plan.entries[i];
    assert(n_accepted >= 0 && n_accepted <= en->n_draft);
    en->n_accepted = n_accepted;
}

/* Releases the blocks past those that n_computed needs (they held rejected draft rows only). */
static void trim_blocks(sched *s, struct sched_seq *q)
{
    int32_t keep = ceil_div(q->n_computed, s->block_size);
    assert(keep >= q->n_registered);
    while (q->n_blocks > keep) kv_unref(s->pool, q->blocks[--q->n_blocks]);
}

void sched_commit(sched *s)
{
    struct sched_plan *pl = &s->plan;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        struct sched_seq *q = en->seq;
        assert(q->n_computed == en->pos0);
        q->n_computed += en->n_rows - en->n_draft + en->n_accepted;
        q->n_tokens += en->n_accepted;
        if (en->n_accepted < en->n_draft) trim_blocks(s, q);
        if (!s->p.prefix_cache || q->no_prefix_cache) continue;
        while ((int64_t)(q->n_registered + 1) * s->block_size <= q->n_computed) {
            int32_t k = q->n_registered;
            int32_t parent = k ? q->blocks[k - 1] : KV_NONE;
            int32_t id = kv_register(s->pool, q->blocks[k], parent, q->tokens + (size_t)k * (size_t)s->block_size);
            q->blocks[k] = id;
            assert(kv_is_cached(s->pool, id));
            q->n_registered++;
        }
    }
    s->stats.n_steps++;
}

/* ---- debug check ---- */

int sched_check(const sched *s, struct err *e)
{
    int32_t B = s->block_size, n_pool = kv_n_blocks(s->pool);
    int32_t *refs = s->ref_scratch;
    memset(refs, 0, (size_t)n_pool * sizeof *refs);
    if (s->n_running > s->p.max_seqs) return err_set(e, "sched_check: %d running > max_seqs", (int)s->n_running);
    if (s->seq_cap < 1 || s->seq_cap > s->p.max_seqs)
        return err_set(e, "sched_check: seq_cap %d outside [1, max_seqs %d]", (int)s->seq_cap, (int)s->p.max_seqs);
    for (int32_t i = 0; i < s->n_running; i++) {
        const struct sched_seq *q = s->running[i];
        if (q->state != SCHED_RUNNING)
            return err_set(e, "sched_check: running seq %llu in state %d", (unsigned long long)q->id, q->state);
        if (i && !runs_before(s->running[i - 1], q)) return err_set(e, "sched_check: running set out of order");
        if (q->n_computed > q->n_tokens || q->n_tokens > q->n_prompt + q->max_tokens)
            return err_set(e, "sched_check: seq %llu computed %d of %d tokens", (unsigned long long)q->id,
                           (int)q->n_computed, (int)q->n_tokens);
        if ((int64_t)q->n_blocks * B < q->n_computed || q->n_blocks > ceil_div(q->n_tokens, B) ||
            q->n_blocks > q->cap_blocks)
            return err_set(e, "sched_check: seq %llu has %d blocks for %d computed / %d tokens",
                           (unsigned long long)q->id, (int)q->n_blocks, (int)q->n_computed, (int)q->n_tokens);
        if ((int64_t)q->n_registered * B > q->n_computed || q->n_registered > q->n_blocks ||
            (q->no_prefix_cache && q->n_registered))
            return err_set(e, "sched_check: seq %llu registered %d blocks", (unsigned long long)q->id,
                           (int)q->n_registered);
        for (int32_t k = 0; k < q->n_blocks; k++) {
            int32_t id = q->blocks[k];
            if (id < 0 || id >= n_pool)
                return err_set(e, "sched_check: seq %llu block %d has bad id %d", (unsigned long long)q->id, (int)k,
                               (int)id);
            refs[id]++;
            if (k < q->n_registered) {
                if (!kv_is_cached(s->pool, id) || kv_parent(s->pool, id) != (k ? q->blocks[k - 1] : KV_NONE))
                    return err_set(e, "sched_check: seq %llu block %d (id %d) breaks the cached chain",
                                   (unsigned long long)q->id, (int)k, (int)id);
            } else if (kv_refcount(s->pool, id) != 1 || kv_is_cached(s->pool, id)) {
                return err_set(e,
                               "sched_check: seq %llu block %d (id %d) is written but shared (refcount %d, cached %d)",
                               (unsigned long long)q->id, (int)k, (int)id, (int)kv_refcount(s->pool, id),
                               kv_is_cached(s->pool, id));
            }
        }
    }
    int32_t n_wait = 0;
    const struct sched_seq *prev = NULL;
    for (const struct sched_seq *q = s->wait_head; q; prev = q, q = q->next) {
        if (q->state != SCHED_WAITING || q->prev != prev) return err_set(e, "sched_check: waiting queue is broken");
        if (prev && !runs_before(prev, q)) return err_set(e, "sched_check: waiting queue out of order");
        if (q->n_blocks || q->n_computed || q->n_registered)
            return err_set(e, "sched_check: waiting seq %llu holds blocks", (unsigned long long)q->id);
        if (++n_wait > s->n_waiting) break;
    }
    if (n_wait != s->n_waiting || prev != s->wait_tail)
        return err_set(e, "sched_check: waiting queue has %d entries, counter %d", (int)n_wait, (int)s->n_waiting);
    return kv_check(s->pool, refs, e);
}
