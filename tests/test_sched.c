/* test_sched — the scheduler on its own: budget, decode-first, FCFS admission, the sequence cap, chunked
 * prefill, preemption and resumption, prefix-cache hits, no starvation, priorities, and draft rows (only the
 * accepted ones committed). The engine over a fake backend is tests/test_engine_fake.c. */
#include "engine/engine.h"
#include "engine/kvpool.h"
#include "engine/sched.h"

#include <stdint.h>
#include <time.h>

#include "test.h"

/* ------------------------------------------------------------------------------------------------ */
/* scheduler alone                                                                                   */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The token a sequence generates next: a function of all its tokens. */
static int32_t next_token_of(const int32_t *t, int32_t n, int32_t n_vocab)
{
    uint64_t h = 7;
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint64_t)(uint32_t)t[i]);
    return (int32_t)(h % (uint64_t)n_vocab);
}

struct sim {
    kv_pool *pool;
    sched *s;
    struct sched_seq seqs[64];
    int done[64];
    int n;
    int32_t max_batch, max_seqs; /* the scheduler's limits, checked against every plan */
    int64_t admitted_order[64];
    int n_admitted;
    int64_t steps;
};

static int sim_init(struct sim *sm, int32_t n_blocks, int32_t block, int32_t max_batch, int32_t max_seqs, int cache)
{
    struct err e;
    memset(sm, 0, sizeof *sm);
    sm->max_batch = max_batch;
    sm->max_seqs = max_seqs;
    if (kv_pool_init(n_blocks, block, &sm->pool, &e)) return -1;
    struct sched_params p = {.max_batch_tokens = max_batch, .max_seqs = max_seqs, .prefix_cache = cache};
    return sched_init(&p, sm->pool, &sm->s, &e);
}

static void sim_add_prio(struct sim *sm, const int32_t *prompt, int32_t n, int32_t max_tokens, int32_t priority)
{
    struct err e;
    int i = sm->n++;
    int rc = sched_seq_init(&sm->seqs[i], (uint64_t)i, prompt, n, max_tokens, kv_block_size(sm->pool), &e);
    if (rc) abort();
    sched_seq_set_priority(&sm->seqs[i], priority);
    sched_add(sm->s, &sm->seqs[i]);
}

static void sim_add(struct sim *sm, const int32_t *prompt, int32_t n, int32_t max_tokens)
{
    sim_add_prio(sm, prompt, n, max_tokens, 0);
}

static void sim_free(struct sim *sm)
{
    sched_free(sm->s);
    for (int i = 0; i < sm->n; i++) sched_seq_release(&sm->seqs[i]);
    kv_pool_free(sm->pool);
}

/* Runs one step; checks the plan against the policy. Returns 0 ok, else a line number. */
static int sim_step(struct sim *sm)
{
    int32_t max_batch = sm->max_batch, max_seqs = sm->max_seqs;
    struct err e;
    /* which running seqs are decodes before planning (they must all be scheduled first) */
    int was_running[64] = {0}, left_before[64] = {0};
    for (int i = 0; i < sm->n; i++) {
        was_running[i] = sm->seqs[i].state == SCHED_RUNNING;
        left_before[i] = sm->seqs[i].n_tokens - sm->seqs[i].n_computed;
    }
    int64_t preempt_before = sched_get_stats(sm->s)->n_preemptions;
    const struct sched_plan *pl = sched_schedule(sm->s);
    if (pl->n_rows > max_batch || pl->n_entries > max_seqs) return __LINE__;
    if (sched_n_running(sm->s) > max_seqs) return __LINE__;
    if (sched_check(sm->s, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return __LINE__;
    }
    int32_t rows = 0;
    int seen_prefill = 0;
    for (int32_t k = 0; k < pl->n_entries; k++) {
        const struct sched_entry *en = &pl->entries[k];
        int i = (int)en->seq->id;
        rows += en->n_rows;
        if (en->pos0 != en->seq->n_computed || en->n_rows < 1) return __LINE__;
        if (en->pos0 + en->n_rows > en->seq->n_tokens) return __LINE__;
        int is_decode = was_running[i] && left_before[i] == 1;
        if (is_decode && seen_prefill) return __LINE__; /* decodes come first */
        if (!is_decode) seen_prefill = 1;
        if (!was_running[i]) sm->admitted_order[sm->n_admitted++] = en->seq->arrival;
    }
    if (rows != pl->n_rows) return __LINE__;
    /* without preemption, every running decode is in the plan */
    if (sched_get_stats(sm->s)->n_preemptions == preempt_before)
        for (int i = 0; i < sm->n; i++)
            if (was_running[i] && left_before[i] == 1 && sm->seqs[i].state == SCHED_RUNNING) {
                int found = 0;
                for (int32_t k = 0; k < pl->n_entries; k++) found |= pl->entries[k].seq == &sm->seqs[i];
                if (!found) return __LINE__;
            }
    sched_commit(sm->s);
    sm->steps++;
    for (int32_t k = 0; k < pl->n_entries; k++) {
        const struct sched_entry *en = &pl->entries[k];
        if (!en->logits) continue;
        struct sched_seq *q = en->seq;
        sched_seq_append(q, next_token_of(q->tokens, q->n_tokens, 1000));
        if (q->n_tokens - q->n_prompt == q->max_tokens) {
            sched_remove(sm->s, q);
            sm->done[q->id] = 1;
        }
    }
    if (sched_check(sm->s, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return __LINE__;
    }
    return 0;
}

static int sim_run(struct sim *sm, int64_t max_steps)
{
    while (sched_n_running(sm->s) + sched_n_waiting(sm->s) > 0) {
        int line = sim_step(sm);
        if (line) return line;
        if (sm->steps > max_steps) return -1;
    }
    return 0;
}

/* Generated tokens of seq i are what next_token_of says, whatever happened on the way. */
static int sim_outputs_ok(const struct sim *sm)
{
    for (int i = 0; i < sm->n; i++) {
        const struct sched_seq *q = &sm->seqs[i];
        if (!sm->done[i] || q->n_tokens != q->n_prompt + q->max_tokens) return 0;
        for (int32_t k = q->n_prompt; k < q->n_tokens; k++)
            if (q->tokens[k] != next_token_of(q->tokens, k, 1000)) return 0;
    }
    return 1;
}

static void make_prompt(int32_t *p, int32_t n, uint64_t seed)
{
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)(mix64(seed * 1000 + (uint64_t)i) % 1000);
}

/* Adds a request whose prompt is make_prompt(n, seed). */
static void sim_add_made(struct sim *sm, int32_t n, uint64_t seed, int32_t max_tokens)
{
    int32_t p[64];
    if (n > 64) abort();
    make_prompt(p, n, seed);
    sim_add(sm, p, n, max_tokens);
}

TEST(sched_budget_decode_first_fcfs)
{
    struct sim sm;
    CHECK(sim_init(&sm, 256, 4, 32, 4, 1) == 0);
    for (int i = 0; i < 12; i++) sim_add_made(&sm, 5 + (i * 7) % 50, (uint64_t)i, 3 + i % 6);
    int line = sim_run(&sm, 10000);
    CHECK_MSG(line == 0, "policy violated at test line %d", line);
    CHECK(sim_outputs_ok(&sm));
    /* admissions happened in arrival order */
    CHECK_EQ_INT(sm.n_admitted, 12);
    for (int i = 1; i < sm.n_admitted; i++) CHECK(sm.admitted_order[i] > sm.admitted_order[i - 1]);
    CHECK_EQ_INT(sched_get_stats(sm.s)->n_preemptions, 0);
    sim_free(&sm);
}

/* A lowered cap stops admissions until the running set is under it; nothing is preempted for it; raising
 * it back admits again. */
TEST(sched_seq_cap_lowered_and_raised)
{
    struct sim sm;
    CHECK(sim_init(&sm, 256, 4, 64, 8, 0) == 0);
    for (int i = 0; i < 16; i++) sim_add_made(&sm, 6, (uint64_t)i + 500, 20);
    CHECK_EQ_INT(sim_step(&sm), 0);
    CHECK_EQ_INT(sched_n_running(sm.s), 8);
    sched_set_seq_cap(sm.s, 2);
    CHECK_EQ_INT(sched_seq_cap(sm.s), 2);
    int32_t peak_after = 0;
    while (sched_n_running(sm.s) > 2) CHECK_EQ_INT(sim_step(&sm), 0);
    for (int k = 0; k < 30; k++) {
        CHECK_EQ_INT(sim_step(&sm), 0);
        if (sched_n_running(sm.s) > peak_after) peak_after = sched_n_running(sm.s);
    }
    CHECK(peak_after <= 2);
    CHECK_EQ_INT(sched_get_stats(sm.s)->n_preemptions, 0);
    sched_set_seq_cap(sm.s, 100); /* clamped to max_seqs */
    CHECK_EQ_INT(sched_seq_cap(sm.s), 8);
    sched_set_seq_cap(sm.s, 0);
    CHECK_EQ_INT(sched_seq_cap(sm.s), 1);
    sched_set_seq_cap(sm.s, 8);
    CHECK_EQ_INT(sim_step(&sm), 0);
    CHECK(sched_n_running(sm.s) > 2);
    CHECK_EQ_INT(sim_run(&sm, 10000), 0);
    CHECK(sim_outputs_ok(&sm));
    sim_free(&sm);
}

TEST(sched_chunked_prefill_catches_up)
{
    struct sim sm;
    CHECK(sim_init(&sm, 64, 4, 8, 2, 0) == 0);
    sim_add_made(&sm, 40, 99, 2);
    /* 40 prompt tokens at 8 rows a step: 5 prefill steps, then 1 decode */
    int line = sim_run(&sm, 100);
    CHECK_EQ_INT(line, 0);
    CHECK_EQ_INT(sm.steps, 6);
    CHECK(sim_outputs_ok(&sm));
    sim_free(&sm);
}

TEST(sched_preemption_and_resumption)
{
    struct sim sm;
    /* 10 blocks of 4 = 40 tokens; six sequences of up to 30 tokens each */
    CHECK(sim_init(&sm, 10, 4, 16, 6, 1) == 0);
    for (int i = 0; i < 6; i++) sim_add_made(&sm, 10 + i, (uint64_t)(50 + i), 14);
    int line = sim_run(&sm, 100000);
    CHECK_MSG(line == 0, "line %d", line);
    CHECK(sched_get_stats(sm.s)->n_preemptions > 0);
    int preempted = 0;
    for (int i = 0; i < 6; i++) preempted += sm.seqs[i].n_preempted > 0;
    CHECK(preempted > 0);
    CHECK(sim_outputs_ok(&sm)); /* resumed sequences kept their generated tokens */
    CHECK_EQ_INT(kv_n_used(sm.pool), 0);
    sim_free(&sm);
}

TEST(sched_preemption_without_cache)
{
    struct sim sm;
    CHECK(sim_init(&sm, 9, 4, 16, 6, 0) == 0);
    for (int i = 0; i < 5; i++) sim_add_made(&sm, 8 + i, (uint64_t)(70 + i), 20);
    int line = sim_run(&sm, 100000);
    CHECK_MSG(line == 0, "line %d", line);
    CHECK(sched_get_stats(sm.s)->n_preemptions > 0);
    CHECK(sim_outputs_ok(&sm));
    CHECK_EQ_INT(kv_n_cached(sm.pool), 0);
    sim_free(&sm);
}

TEST(sched_prefix_hits)
{
    struct sim sm;
    CHECK(sim_init(&sm, 32, 4, 64, 4, 1) == 0);
    int32_t p[13], p2[12];
    make_prompt(p, 13, 5);
    memcpy(p2, p, sizeof p2);
    sim_add(&sm, p, 13, 2);
    CHECK_EQ_INT(sim_run(&sm, 100), 0);
    /* same 13 tokens: the 3 full blocks (12 tokens) hit */
    sim_add(&sm, p, 13, 2);
    /* 12 tokens = exactly 3 blocks: only 2 may hit (the last token must be computed) */
    sim_add(&sm, p2, 12, 2);
    CHECK_EQ_INT(sim_run(&sm, 100), 0);
    CHECK_EQ_INT(sm.seqs[0].n_prompt_cached, 0);
    CHECK_EQ_INT(sm.seqs[1].n_prompt_cached, 12);
    CHECK_EQ_INT(sm.seqs[2].n_prompt_cached, 8);
    CHECK_EQ_INT(sched_get_stats(sm.s)->tokens_cached, 20);
    CHECK(sim_outputs_ok(&sm));
    sim_free(&sm);
}

TEST(sched_no_starvation)
{
    struct sim sm;
    /* the pool fits the long request alone; short ones keep arriving while it waits */
    CHECK(sim_init(&sm, 16, 4, 16, 4, 1) == 0);
    for (int i = 0; i < 3; i++) sim_add_made(&sm, 10, (uint64_t)(200 + i), 10);
    sim_add_made(&sm, 50, 300, 12); /* id 3: needs 16 blocks, the whole pool */
    int long_done_step = -1;
    for (int step = 0; step < 2000 && long_done_step < 0; step++) {
        if (sm.n < 60 && step % 2 == 0) { /* a newer short request every other step */
            sim_add_made(&sm, 6, (uint64_t)(400 + step), 4);
        }
        int line = sim_step(&sm);
        CHECK_MSG(line == 0, "line %d", line);
        if (sm.done[3]) long_done_step = step;
    }
    CHECK_MSG(long_done_step >= 0 && long_done_step < 200, "long request finished at step %d", long_done_step);
    /* nobody newer than the long request was admitted before it */
    for (int i = 0; i < sm.n_admitted; i++) {
        if (sm.admitted_order[i] == 3) break;
        CHECK(sm.admitted_order[i] < 3);
    }
    CHECK_EQ_INT(sim_run(&sm, 100000), 0);
    CHECK(sim_outputs_ok(&sm));
    sim_free(&sm);
}

TEST(sched_oldest_preempts_until_it_fits)
{
    struct sim sm;
    /* two sequences each needing the whole pool eventually: they take turns, both finish */
    CHECK(sim_init(&sm, 6, 4, 8, 2, 1) == 0);
    sim_add_made(&sm, 4, 1, 20);
    sim_add_made(&sm, 4, 2, 20);
    CHECK_EQ_INT(sim_run(&sm, 10000), 0);
    CHECK(sched_get_stats(sm.s)->n_preemptions > 0);
    CHECK(sim_outputs_ok(&sm));
    sim_free(&sm);
}

/* Interactive (priority 1) before batch (priority 0): waiting interactive sequences are admitted before
 * batch ones that arrived earlier, FCFS within a priority; a running batch sequence is not preempted for a
 * waiting interactive one. */
TEST(sched_priority_admits_interactive_first)
{
    struct sim sm;
    int32_t p[8];
    CHECK(sim_init(&sm, 256, 4, 32, 1, 1) == 0);
    make_prompt(p, 6, 1);
    sim_add_prio(&sm, p, 6, 4, 0); /* 0: batch, admitted alone at the first step */
    CHECK_EQ_INT(sim_step(&sm), 0);
    CHECK(sm.seqs[0].state == SCHED_RUNNING);
    for (int i = 1; i <= 4; i++) {
        make_prompt(p, 6, (uint64_t)i + 1);
        sim_add_prio(&sm, p, 6, 4, i <= 2 ? 0 : 1); /* 1, 2: batch; 3, 4: interactive */
    }
    CHECK_EQ_INT(sim_step(&sm), 0);
    CHECK(sm.seqs[0].state == SCHED_RUNNING); /* not preempted for the waiting interactive ones */
    CHECK_EQ_INT(sim_run(&sm, 10000), 0);
    CHECK(sim_outputs_ok(&sm));
    CHECK_EQ_INT(sched_get_stats(sm.s)->n_preemptions, 0);
    int64_t want[5] = {0, 3, 4, 1, 2};
    CHECK_EQ_INT(sm.n_admitted, 5);
    for (int i = 0; i < 5 && i < sm.n_admitted; i++) CHECK_EQ_INT(sm.admitted_order[i], want[i]);
    sim_free(&sm);
}

/* Preemption for memory takes batch sequences first: an older batch sequence and a newer interactive one
 * outgrow the pool together; the batch one is preempted (by age alone it would be the interactive one). */
TEST(sched_priority_preempts_batch_first)
{
    struct sim sm;
    int32_t p[8];
    CHECK(sim_init(&sm, 6, 4, 8, 2, 1) == 0);
    make_prompt(p, 4, 11);
    sim_add_prio(&sm, p, 4, 16, 0);
    CHECK_EQ_INT(sim_step(&sm), 0);
    make_prompt(p, 4, 12);
    sim_add_prio(&sm, p, 4, 16, 1);
    CHECK_EQ_INT(sim_run(&sm, 10000), 0);
    CHECK(sim_outputs_ok(&sm));
    CHECK(sched_get_stats(sm.s)->n_preemptions > 0);
    CHECK(sm.seqs[0].n_preempted > 0);
    CHECK_EQ_INT(sm.seqs[1].n_preempted, 0);
    int32_t nr, nw;
    sched_count_below(sm.s, 1, &nr, &nw);
    CHECK_EQ_INT(nr + nw, 0);
    sim_free(&sm);
}

/* Drafts at the scheduler: every step, each sequence that samples gets a draft of up to `k` tokens whose
 * first `good` are its true continuation (next_token_of) and the rest wrong; the "sampler" accepts the
 * true prefix. Rejected rows must leave no trace: outputs stay what next_token_of says, the invariants
 * hold, drafts never preempt or evict, and no cached block holds a rejected draft token. */
struct wrong_draft {
    int seq;
    int32_t pos, token;
};

static struct wrong_draft g_wrong[20000];
static int g_n_wrong;

static int sim_step_drafts(struct sim *sm, uint64_t salt)
{
    struct err e;
    const struct sched_plan *pl = sched_schedule(sm->s);
    int64_t preempt = sched_get_stats(sm->s)->n_preemptions, evict = kv_n_evictions(sm->pool);
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        if (!en->logits) continue;
        struct sched_seq *q = en->seq;
        uint64_t h = mix64(salt + (uint64_t)sm->steps * 131 + (uint64_t)q->id);
        int32_t k = (int32_t)(h % 7), good = (int32_t)((h >> 8) % 8);
        int32_t t[400], d[8];
        memcpy(t, q->tokens, (size_t)q->n_tokens * sizeof *t);
        for (int32_t m = 0; m < k; m++) {
            int32_t truth = next_token_of(t, q->n_tokens + m, 1000);
            d[m] = t[q->n_tokens + m] = m < good ? truth : 1000 + (truth + 1) % 1000; /* wrong: outside 0..999 */
        }
        int32_t rows_before = pl->n_rows;
        int32_t got = sched_draft(sm->s, i, d, k);
        if (got < 0 || got > k || en->n_draft != got || pl->n_rows != rows_before + got) return __LINE__;
        if (pl->n_rows > sm->max_batch) return __LINE__;
        int32_t a = got < good ? got : good;
        for (int32_t m = a; m < got; m++)
            if (g_n_wrong < 20000) g_wrong[g_n_wrong++] = (struct wrong_draft){(int)q->id, q->n_tokens + m, d[m]};
        sched_accept(sm->s, i, a);
    }
    if (sched_get_stats(sm->s)->n_preemptions != preempt || kv_n_evictions(sm->pool) != evict) return __LINE__;
    sched_commit(sm->s);
    sm->steps++;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        if (!en->logits) continue;
        struct sched_seq *q = en->seq;
        if (q->n_computed != q->n_tokens) return __LINE__;
        sched_seq_append(q, next_token_of(q->tokens, q->n_tokens, 1000));
        if (q->n_tokens - q->n_prompt == q->max_tokens) {
            sched_remove(sm->s, q);
            sm->done[q->id] = 1;
        }
    }
    if (sched_check(sm->s, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return __LINE__;
    }
    return 0;
}

/* 1 if the chain of seq's true full blocks up to block `upto` (exclusive) is cached, with t as the tokens;
 * *parent is the last block (references taken are dropped again). */
static int chain_cached(struct sim *sm, const int32_t *t, int32_t upto, int32_t *parent)
{
    int32_t B = kv_block_size(sm->pool), ids[64];
    *parent = KV_NONE;
    for (int32_t b = 0; b < upto; b++) {
        int32_t id = kv_lookup(sm->pool, *parent, t + (size_t)b * (size_t)B);
        if (id == KV_NONE) {
            for (int32_t j = b - 1; j >= 0; j--) kv_unref(sm->pool, ids[j]);
            return 0;
        }
        ids[b] = *parent = id;
    }
    for (int32_t j = upto - 1; j >= 0; j--) kv_unref(sm->pool, ids[j]);
    return 1;
}

TEST(sched_drafts_commit_accepted_rows_only)
{
    for (int cfg = 0; cfg < 3; cfg++) {
        struct sim sm;
        /* roomy pool (nothing evicted: the cache can be inspected), small blocks; then tight pools */
        int32_t blocks = cfg == 0 ? 512 : cfg == 1 ? 40 : 14, max_batch = cfg == 2 ? 9 : 32;
        CHECK(sim_init(&sm, blocks, 4, max_batch, 6, 1) == 0);
        g_n_wrong = 0;
        for (int i = 0; i < 10; i++) sim_add_made(&sm, 5 + (i * 7) % 30, (uint64_t)(900 + i), 10 + i % 9);
        int64_t steps = 0;
        while (sched_n_running(sm.s) + sched_n_waiting(sm.s) > 0 && steps++ < 10000) {
            int line = sim_step_drafts(&sm, (uint64_t)cfg * 1000003);
            CHECK_MSG(line == 0, "config %d: failed at test line %d", cfg, line);
        }
        CHECK(sim_outputs_ok(&sm));
        CHECK_EQ_INT(kv_n_used(sm.pool), 0);
        CHECK_MSG(g_n_wrong > (cfg == 0 ? 20 : 5), "config %d: %d rejected draft rows", cfg, g_n_wrong);
        if (cfg == 0) {
            CHECK_EQ_INT(kv_n_evictions(sm.pool), 0);
            int32_t B = 4;
            for (int i = 0; i < sm.n; i++) {
                const struct sched_seq *q = &sm.seqs[i];
                int32_t parent, full = (q->n_tokens - 1) / B; /* the last token's KV is never computed */
                CHECK_MSG(chain_cached(&sm, q->tokens, full, &parent), "seq %d: accepted rows not all cached", i);
            }
            /* a block holding a rejected draft token is nowhere in the cache */
            int checked = 0;
            for (int w = 0; w < g_n_wrong; w++) {
                const struct sched_seq *q = &sm.seqs[g_wrong[w].seq];
                int32_t b = g_wrong[w].pos / B, parent, t[400];
                if ((b + 1) * B > q->n_tokens - 1) continue;
                memcpy(t, q->tokens, (size_t)q->n_tokens * sizeof *t);
                t[g_wrong[w].pos] = g_wrong[w].token;
                CHECK(chain_cached(&sm, t, b, &parent));
                CHECK_EQ_INT(kv_lookup(sm.pool, parent, t + (size_t)b * (size_t)B), KV_NONE);
                checked++;
            }
            CHECK(checked > 10);
        } else {
            CHECK(sched_get_stats(sm.s)->n_preemptions > 0 || cfg == 1);
        }
        sim_free(&sm);
    }
}

int main(void)
{
    RUN(sched_budget_decode_first_fcfs);
    RUN(sched_seq_cap_lowered_and_raised);
    RUN(sched_chunked_prefill_catches_up);
    RUN(sched_preemption_and_resumption);
    RUN(sched_preemption_without_cache);
    RUN(sched_prefix_hits);
    RUN(sched_no_starvation);
    RUN(sched_oldest_preempts_until_it_fits);
    RUN(sched_priority_admits_interactive_first);
    RUN(sched_priority_preempts_batch_first);
    RUN(sched_drafts_commit_accepted_rows_only);
    return test_summary();
}
