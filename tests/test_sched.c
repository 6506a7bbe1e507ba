/* test_sched — the scheduler on its own (budget, decode-first, FCFS admission, preemption and
 * resumption, prefix-cache hits, no starvation) and the engine over a FAKE backend that keeps its own
 * token store per (block, slot): the logits of a row are a hash of every token at positions 0..pos read
 * back through the row's block table, so a wrong, stale or shared-while-written block changes the output.
 * Results are compared with an independent reference computed without any engine. */
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

/* ------------------------------------------------------------------------------------------------ */
/* engine over a fake backend                                                                        */

#define FAKE_VOCAB 50

struct fake {
    int32_t n_blocks, block;
    int32_t *store;   /* (n_blocks, block) token written at each slot */
    uint8_t *written; /* (n_blocks, block) */
    int32_t *writer;  /* (n_blocks) seq index that wrote the block in the current step, -1 */
    int64_t n_rows, n_steps;
    int64_t n_sampling_steps, n_draft_steps; /* steps whose rows all sample; of those, steps with drafts */
    int drafted_last, one_off;               /* the last such step had drafts; the last step paid a one-off */
    char fail_msg[256];
};

static uint64_t fake_hash_tokens(const int32_t *t, int32_t n)
{
    uint64_t h = 0x1234;
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ ((uint64_t)(uint32_t)t[i] + 0x9e37ull * (uint64_t)i));
    return h;
}

static void fake_logits(uint64_t h, float *out)
{
    for (int v = 0; v < FAKE_VOCAB; v++) out[v] = (float)(mix64(h + (uint64_t)v) >> 40) * (8.0f / 16777216.0f);
}

/* 1: the fake model mostly copies (the token FAKE_PERIOD back gets +16 at 3 of 4 positions), so prompt
 * lookup's drafts are often right and sometimes wrong; 0: pure hash logits. */
static int g_fake_copy;
#define FAKE_PERIOD 6

/* The logits after tokens t[0 .. n) (the model the fake backend and the references share). */
static void fake_row_logits(const int32_t *t, int32_t n, float *out)
{
    uint64_t h = fake_hash_tokens(t, n);
    fake_logits(h, out);
    if (g_fake_copy && n > FAKE_PERIOD && (h >> 60) % 4 != 0) out[t[n - FAKE_PERIOD]] += 16.0f;
}

static int fake_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size, enum kv_type t, struct err *e)
{
    (void)t;
    struct fake *f = ctx;
    free(f->store);
    free(f->written);
    free(f->writer);
    f->n_blocks = n_blocks;
    f->block = block_size;
    f->store = calloc((size_t)n_blocks * (size_t)block_size, sizeof *f->store);
    f->written = calloc((size_t)n_blocks * (size_t)block_size, 1);
    f->writer = malloc((size_t)n_blocks * sizeof *f->writer);
    if (!f->store || !f->written || !f->writer) return err_set(e, "fake: oom");
    for (int32_t i = 0; i < n_blocks; i++) f->writer[i] = -1;
    return 0;
}

/* Step times of the fake (0: as fast as it computes): a step whose rows all sample takes g_fake_plain_us, or
 * g_fake_draft_us when it carries drafts (more rows than sequences) — a step function of the kind a GPU's
 * CUDA graphs make, which the engine's cost line over rows does not see. g_fake_one_off_us more for a step
 * with drafts after one without, reported through step_one_off (a graph captured for a shape not run lately). */
static int g_fake_plain_us, g_fake_draft_us, g_fake_one_off_us;

static void fake_sleep_us(int us)
{
    if (us <= 0) return;
    struct timespec ts = {0, (long)us * 1000L};
    nanosleep(&ts, NULL);
}

static int fake_forward(void *ctx, const struct step_batch *b, float *logits, struct err *e)
{
    struct fake *f = ctx;
    int32_t B = f->block;
    f->n_steps++;
    f->one_off = 0;
    if (b->n_logits == b->n_rows) {
        const int drafted = b->n_rows > b->n_seqs;
        f->one_off = drafted && !f->drafted_last && g_fake_one_off_us > 0;
        f->drafted_last = drafted;
        f->n_draft_steps += drafted;
        f->n_sampling_steps++;
        fake_sleep_us((drafted ? g_fake_draft_us : g_fake_plain_us) + (f->one_off ? g_fake_one_off_us : 0));
    }
    f->n_rows += b->n_rows;
    for (int32_t i = 0; i < f->n_blocks; i++) f->writer[i] = -1;
    /* rows of a sequence are contiguous with consecutive positions */
    for (int32_t r = 0; r < b->n_rows; r++) {
        int32_t s = b->seq[r];
        if (s < 0 || s >= b->n_seqs) return err_set(e, "fake: row %d has bad seq %d", (int)r, (int)s);
        if (r > 0 && b->seq[r - 1] == s && b->pos[r] != b->pos[r - 1] + 1)
            return err_set(e, "fake: row %d not consecutive", (int)r);
        if (r > 0 && b->seq[r - 1] != s && b->seq[r - 1] > s) return err_set(e, "fake: seq rows not contiguous");
    }
    /* writes first */
    for (int32_t r = 0; r < b->n_rows; r++) {
        const struct step_seq *sq = &b->seqs[b->seq[r]];
        int32_t pos = b->pos[r];
        if (pos / B >= sq->n_blocks)
            return err_set(e, "fake: row %d pos %d beyond its %d blocks", (int)r, (int)pos, (int)sq->n_blocks);
        int32_t blk = sq->block_table[pos / B];
        if (blk < 0 || blk >= f->n_blocks) return err_set(e, "fake: bad block id %d", (int)blk);
        if (f->writer[blk] != -1 && f->writer[blk] != b->seq[r])
            return err_set(e, "fake: block %d written by two sequences in one step", (int)blk);
        f->writer[blk] = b->seq[r];
        f->store[(size_t)blk * B + pos % B] = b->tokens[r];
        f->written[(size_t)blk * B + pos % B] = 1;
    }
    /* then logits: a hash of all tokens 0..pos read back through the block table */
    int32_t prev = -1;
    int32_t *buf = malloc(sizeof(int32_t) * 65536);
    if (!buf) return err_set(e, "fake: oom");
    for (int32_t k = 0; k < b->n_logits; k++) {
        int32_t r = b->logit_rows[k];
        if (r <= prev || r >= b->n_rows) {
            free(buf);
            return err_set(e, "fake: logit rows not increasing");
        }
        prev = r;
        const struct step_seq *sq = &b->seqs[b->seq[r]];
        int32_t pos = b->pos[r];
        for (int32_t p = 0; p <= pos; p++) {
            int32_t blk = sq->block_table[p / B];
            if (!f->written[(size_t)blk * B + p % B]) {
                free(buf);
                return err_set(e, "fake: reading unwritten slot (block %d, pos %d)", (int)blk, (int)p);
            }
            buf[p] = f->store[(size_t)blk * B + p % B];
        }
        fake_row_logits(buf, pos + 1, logits + (size_t)k * FAKE_VOCAB);
    }
    free(buf);
    return 0;
}

static uint64_t fake_scratch(void *ctx, int32_t rows)
{
    (void)ctx;
    return (uint64_t)rows * 16;
}

static void fake_free(void *ctx)
{
    struct fake *f = ctx;
    free(f->store);
    free(f->written);
    free(f->writer);
    memset(f, 0, sizeof *f);
}

static int fake_step_one_off(void *ctx)
{
    return ((const struct fake *)ctx)->one_off;
}

static const struct backend_ops fake_ops = {.name = "fake",
                                            .load = NULL,
                                            .kv_alloc = fake_kv_alloc,
                                            .forward = fake_forward,
                                            .scratch_bytes = fake_scratch,
                                            .free = fake_free,
                                            .step_one_off = fake_step_one_off};

struct fake_req {
    int32_t prompt[200];
    int32_t n_prompt, max_tokens;
    float temperature;
    uint64_t seed;
};

/* Greedy reference without any engine. */
static void reference_greedy(const struct fake_req *r, int32_t *out)
{
    int32_t t[400];
    memcpy(t, r->prompt, (size_t)r->n_prompt * sizeof *t);
    int32_t n = r->n_prompt;
    float lg[FAKE_VOCAB];
    for (int32_t g = 0; g < r->max_tokens; g++) {
        fake_row_logits(t, n, lg);
        int32_t best = 0;
        for (int v = 1; v < FAKE_VOCAB; v++)
            if (lg[v] > lg[best]) best = v;
        out[g] = t[n++] = best;
    }
}

/* The sampling parameters of request i (run_engine and reference_sampled use the same). */
static struct sampler_params fake_sampling(const struct fake_req *r, int i)
{
    struct sampler_params sp = sampler_default_params();
    sp.temperature = r->temperature;
    sp.seed = r->seed;
    if (r->temperature > 0) sp.top_k = 20;
    if (r->temperature > 0 && i % 2) { /* penalties read the history, which preemption recomputes */
        sp.repeat_penalty = 1.3f;
        sp.repeat_last_n = 8;
        sp.presence_penalty = 0.4f;
        sp.frequency_penalty = 0.3f;
    }
    return sp;
}

/* Sampled reference without any engine: the sampler drawing generated token g at position g. */
static void reference_sampled(const struct fake_req *r, int i, int32_t *out)
{
    struct sampler_params sp = fake_sampling(r, i);
    sampler *smp = NULL;
    int32_t t[400];
    memcpy(t, r->prompt, (size_t)r->n_prompt * sizeof *t);
    float lg[FAKE_VOCAB];
    if (sampler_init(FAKE_VOCAB, &smp, NULL)) return;
    for (int32_t g = 0; g < r->max_tokens; g++) {
        fake_row_logits(t, r->n_prompt + g, lg);
        out[g] = t[r->n_prompt + g] = sampler_sample(smp, &sp, t, r->n_prompt, g, lg);
    }
    sampler_free(smp);
}

/* A model the engine sees through the fake backend: only the vocabulary and the context matter. */
static struct model fake_model(int32_t n_ctx_train)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.hp.n_vocab = FAKE_VOCAB;
    m.hp.n_ctx_train = n_ctx_train;
    return m;
}

struct run_cfg {
    int32_t kv_blocks, kv_block, max_seqs, max_batch_tokens;
    int prefix_cache;
    int32_t lookup;      /* draft tokens (0 = off) */
    int lookup_adaptive; /* 0: verify every proposed token */
};

struct run_out {
    int32_t tokens[64][64];
    int32_t n_tokens[64];
    enum engine_finish finish[64];
    struct engine_stats st;
    int64_t sampling_steps, draft_steps; /* the fake's counts */
    int ok;
};

static void run_engine(const struct fake_req *reqs, int n, const struct run_cfg *c, struct run_out *out)
{
    struct err e;
    struct fake f = {0};
    struct backend be = {.ops = &fake_ops, .ctx = &f};
    struct model m = fake_model(512);
    struct engine_params p = engine_default_params();
    p.kv_blocks = c->kv_blocks;
    p.kv_block = c->kv_block;
    p.max_seqs = c->max_seqs;
    p.max_batch_tokens = c->max_batch_tokens;
    p.prefix_cache = c->prefix_cache;
    p.lookup = c->lookup;
    p.lookup_adaptive = c->lookup_adaptive;
    p.debug_checks = 1;
    memset(out, 0, sizeof *out);
    engine *eng;
    if (engine_init(&m, &be, NULL, &p, &eng, &e)) {
        fprintf(stderr, "engine_init: %s\n", e.msg);
        fake_free(&f);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct engine_request r = {.id = (uint64_t)i, .prompt = reqs[i].prompt, .n_prompt = reqs[i].n_prompt,
                                   .max_tokens = reqs[i].max_tokens, .sampling = fake_sampling(&reqs[i], i)};
        if (engine_add(eng, &r, &e)) goto fail;
    }
    int got = 0;
    while (engine_has_work(eng) || got < n) {
        if (engine_has_work(eng) && engine_step(eng, &e)) goto fail;
        struct engine_result res;
        while (engine_take(eng, &res)) {
            int i = (int)res.id;
            out->n_tokens[i] = res.n_tokens;
            out->finish[i] = res.finish;
            memcpy(out->tokens[i], res.tokens, (size_t)res.n_tokens * sizeof(int32_t));
            engine_result_free(&res);
            got++;
        }
        if (!engine_has_work(eng) && got < n) break;
    }
    engine_get_stats(eng, &out->st);
    out->sampling_steps = f.n_sampling_steps;
    out->draft_steps = f.n_draft_steps;
    out->ok = got == n;
    engine_free(eng);
    fake_free(&f);
    return;
fail:
    fprintf(stderr, "engine: %s\n", e.msg);
    engine_free(eng);
    fake_free(&f);
}

static void make_reqs(struct fake_req *reqs, int n, int shared_prefix, int sampled)
{
    for (int i = 0; i < n; i++) {
        struct fake_req *r = &reqs[i];
        r->n_prompt = 5 + (int32_t)(mix64((uint64_t)i) % 36);
        if (shared_prefix) r->n_prompt += shared_prefix;
        for (int32_t k = 0; k < r->n_prompt; k++)
            r->prompt[k] =
                (int32_t)(mix64(k < shared_prefix ? 777 + (uint64_t)k : (uint64_t)(i * 1000 + k)) % FAKE_VOCAB);
        r->max_tokens = 8 + i % 17;
        r->temperature = sampled ? 0.9f : 0.0f;
        r->seed = 1000 + (uint64_t)i;
    }
}

static int same_outputs(const struct run_out *a, const struct run_out *b, int n)
{
    for (int i = 0; i < n; i++) {
        if (a->n_tokens[i] != b->n_tokens[i] || a->finish[i] != b->finish[i]) return 0;
        if (memcmp(a->tokens[i], b->tokens[i], (size_t)a->n_tokens[i] * sizeof(int32_t))) return 0;
    }
    return 1;
}

static struct fake_req g_reqs[64];
static struct run_out g_base, g_other;

static void invariance(int sampled)
{
    int n = 40;
    make_reqs(g_reqs, n, 0, sampled);
    struct run_cfg base = {.kv_blocks = 1024, .kv_block = 4, .max_seqs = 1, .max_batch_tokens = 64, .prefix_cache = 0};
    run_engine(g_reqs, n, &base, &g_base);
    if (!g_base.ok) return;
    /* greedy: matches an independent argmax; sampled: the sampler alone, drawing token g at position g */
    for (int i = 0; i < n; i++) {
        int32_t ref[64] = {0};
        if (sampled) reference_sampled(&g_reqs[i], i, ref);
        else reference_greedy(&g_reqs[i], ref);
        if (g_base.n_tokens[i] != g_reqs[i].max_tokens ||
            memcmp(ref, g_base.tokens[i], sizeof(int32_t) * (size_t)g_reqs[i].max_tokens)) {
            g_base.ok = 0;
            return;
        }
    }
}

TEST(engine_fake_invariance_greedy_and_sampled)
{
    for (int sampled = 0; sampled < 2; sampled++) {
        int n = 40;
        invariance(sampled);
        CHECK_MSG(g_base.ok, "baseline (sampled=%d) failed or differs from the reference", sampled);
        struct run_cfg cfgs[] = {
            {.kv_blocks = 1024, .kv_block = 4, .max_seqs = 64, .max_batch_tokens = 64, .prefix_cache = 1},
            {.kv_blocks = 1024, .kv_block = 16, .max_seqs = 7, .max_batch_tokens = 13, .prefix_cache = 1},
            {.kv_blocks = 20,
             .kv_block = 4,
             .max_seqs = 64,
             .max_batch_tokens = 64,
             .prefix_cache = 1}, /* preemption */
            {.kv_blocks = 20, .kv_block = 4, .max_seqs = 64, .max_batch_tokens = 64, .prefix_cache = 0},
            {.kv_blocks = 9, .kv_block = 8, .max_seqs = 16, .max_batch_tokens = 32, .prefix_cache = 1},
        };
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            run_engine(g_reqs, n, &cfgs[c], &g_other);
            CHECK_MSG(g_other.ok, "config %zu (sampled=%d) did not finish", c, sampled);
            CHECK_MSG(same_outputs(&g_base, &g_other, n), "config %zu (sampled=%d) changed outputs", c, sampled);
            if (c == 2 || c == 3 || c == 4) CHECK_MSG(g_other.st.n_preemptions > 0, "config %zu: no preemption", c);
            CHECK_EQ_INT(g_other.st.kv_blocks_used, 0);
        }
        /* shared prefix: cache hits, same outputs as without the cache */
        make_reqs(g_reqs, n, 37, sampled);
        struct run_cfg nocache = {
            .kv_blocks = 1024, .kv_block = 4, .max_seqs = 1, .max_batch_tokens = 64, .prefix_cache = 0};
        struct run_cfg cache = {
            .kv_blocks = 1024, .kv_block = 4, .max_seqs = 16, .max_batch_tokens = 64, .prefix_cache = 1};
        run_engine(g_reqs, n, &nocache, &g_base);
        run_engine(g_reqs, n, &cache, &g_other);
        CHECK(g_base.ok && g_other.ok);
        CHECK(same_outputs(&g_base, &g_other, n));
        CHECK_EQ_INT(g_base.st.prompt_tokens_cached, 0);
        CHECK_MSG(g_other.st.prompt_tokens_cached >= 36 * (n - 2), "cached %lld",
                  (long long)g_other.st.prompt_tokens_cached);
        CHECK(g_other.st.prompt_tokens_computed < g_base.st.prompt_tokens_computed / 2);
    }
}

/* Prompt lookup over the fake backend with a model that mostly copies: drafts verified as extra rows give
 * exactly the tokens of the reference (greedy, and seeded sampling with penalties), at any concurrency,
 * with the row budget cutting drafts, with preemption and with prefix-cache hits; the fake reads every
 * row's history back through the block tables, so KV left behind by a rejected draft row, or a block
 * registered with one, would change the logits. */
TEST(engine_fake_lookup_invariance)
{
    g_fake_copy = 1;
    for (int sampled = 0; sampled < 2; sampled++) {
        int n = 40;
        invariance(sampled);
        CHECK_MSG(g_base.ok, "baseline (sampled=%d) failed or differs from the reference", sampled);
        struct run_cfg cfgs[] = {
            {.kv_blocks = 1024, .kv_block = 4, .max_seqs = 64, .max_batch_tokens = 64, .prefix_cache = 1, .lookup = 4},
            {.kv_blocks = 1024, .kv_block = 16, .max_seqs = 7, .max_batch_tokens = 13, .prefix_cache = 1, .lookup = 8},
            {.kv_blocks = 1024, .kv_block = 4, .max_seqs = 1, .max_batch_tokens = 64, .prefix_cache = 0, .lookup = 1},
            {.kv_blocks = 20, .kv_block = 4, .max_seqs = 64, .max_batch_tokens = 64, .prefix_cache = 1, .lookup = 6},
            {.kv_blocks = 20, .kv_block = 4, .max_seqs = 64, .max_batch_tokens = 64, .prefix_cache = 0, .lookup = 3},
            {.kv_blocks = 9, .kv_block = 8, .max_seqs = 16, .max_batch_tokens = 32, .prefix_cache = 1, .lookup = 8},
            {.kv_blocks = 1024,
             .kv_block = 4,
             .max_seqs = 1,
             .max_batch_tokens = 64,
             .lookup = 8,
             .lookup_adaptive = 1},
            {.kv_blocks = 20,
             .kv_block = 4,
             .max_seqs = 64,
             .max_batch_tokens = 64,
             .prefix_cache = 1,
             .lookup = 8,
             .lookup_adaptive = 1},
        };
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            run_engine(g_reqs, n, &cfgs[c], &g_other);
            const struct engine_stats *st = &g_other.st;
            CHECK_MSG(g_other.ok, "config %zu (sampled=%d) did not finish", c, sampled);
            CHECK_MSG(same_outputs(&g_base, &g_other, n), "config %zu (sampled=%d) changed outputs", c, sampled);
            if (c == 3 || c == 4 || c == 5) CHECK_MSG(st->n_preemptions > 0, "config %zu: no preemption", c);
            CHECK_EQ_INT(st->kv_blocks_used, 0);
            CHECK_EQ_INT(st->gen_tokens, g_base.st.gen_tokens);
            if (cfgs[c].lookup_adaptive) continue;
            /* drafts were verified, some accepted and some not, and they saved steps */
            CHECK_MSG(st->draft_tokens > 0 && st->draft_accepted > 0 && st->draft_accepted < st->draft_tokens,
                      "config %zu: %lld draft tokens, %lld accepted", c, (long long)st->draft_tokens,
                      (long long)st->draft_accepted);
            CHECK(st->n_drafts > 0 && st->n_drafts <= st->seq_steps);
            CHECK(st->seq_steps < g_base.st.seq_steps);
            CHECK(st->rows_computed > st->prompt_tokens_computed + st->gen_tokens - st->seq_steps);
            fprintf(stderr,
                    "# config %zu (sampled %d): %lld drafts, %lld/%lld tokens accepted, %lld seq-steps (base %lld)\n",
                    c, sampled, (long long)st->n_drafts, (long long)st->draft_accepted, (long long)st->draft_tokens,
                    (long long)st->seq_steps, (long long)g_base.st.seq_steps);
        }
        /* shared prefix: cache hits with lookup on, same outputs as without either */
        make_reqs(g_reqs, n, 37, sampled);
        struct run_cfg nocache = {
            .kv_blocks = 1024, .kv_block = 4, .max_seqs = 1, .max_batch_tokens = 64, .prefix_cache = 0};
        struct run_cfg cache = {
            .kv_blocks = 1024, .kv_block = 4, .max_seqs = 16, .max_batch_tokens = 64, .prefix_cache = 1, .lookup = 5};
        run_engine(g_reqs, n, &nocache, &g_base);
        run_engine(g_reqs, n, &cache, &g_other);
        CHECK(g_base.ok && g_other.ok);
        CHECK(same_outputs(&g_base, &g_other, n));
        CHECK_MSG(g_other.st.prompt_tokens_cached >= 36 * (n - 2), "cached %lld",
                  (long long)g_other.st.prompt_tokens_cached);
        CHECK(g_other.st.draft_accepted > 0);
    }
    g_fake_copy = 0;
}

/* The adaptive rule holds drafts back where steps with drafts cost more a token than steps without (a step
 * with drafts 8x a plain one, whatever its rows; then only probes propose), and drafts where they pay (the same time
 * either way), also where the first step with drafts after steps without pays a one-off 20x a step (a GPU capturing a
 * graph: measured, that would hold drafts back for good, each probe paying it again); the outputs are the same as
 * without lookup in all. */
TEST(engine_fake_lookup_yield)
{
    g_fake_copy = 1;
    int n = 8;
    make_reqs(g_reqs, n, 0, 0);
    for (int i = 0; i < n; i++) g_reqs[i].max_tokens = 60;
    struct run_cfg off = {.kv_blocks = 1024, .kv_block = 4, .max_seqs = 4, .max_batch_tokens = 64, .prefix_cache = 0};
    struct run_cfg on = off;
    on.lookup = 8;
    on.lookup_adaptive = 1;
    run_engine(g_reqs, n, &off, &g_base);
    CHECK(g_base.ok);
    /* (plain, draft, one-off) us: steps of milliseconds, so that a loaded machine's scheduling noise stays small */
    const int delays[3][3] = {{2000, 16000, 0}, {2000, 2000, 0}, {2000, 2000, 30000}};
    double share[3], proposals[3];
    for (int k = 0; k < 3; k++) {
        g_fake_plain_us = delays[k][0];
        g_fake_draft_us = delays[k][1];
        g_fake_one_off_us = delays[k][2];
        run_engine(g_reqs, n, &on, &g_other);
        CHECK_MSG(g_other.ok && same_outputs(&g_base, &g_other, n), "delays %d/%d us: outputs changed", delays[k][0],
                  delays[k][1]);
        share[k] = (double)g_other.draft_steps / (double)(g_other.sampling_steps ? g_other.sampling_steps : 1);
        proposals[k] = (double)g_other.st.proposals / (double)(g_other.st.seq_steps ? g_other.st.seq_steps : 1);
        fprintf(stderr,
                "# delays %d/%d/%d us: %lld of %lld sampling steps drafted (%lld/%lld draft tokens accepted), "
                "%.2f proposals a sequence-step\n",
                delays[k][0], delays[k][1], delays[k][2], (long long)g_other.draft_steps,
                (long long)g_other.sampling_steps, (long long)g_other.st.draft_accepted,
                (long long)g_other.st.draft_tokens, proposals[k]);
    }
    g_fake_plain_us = g_fake_draft_us = g_fake_one_off_us = 0;
    g_fake_copy = 0;
    /* held back: the first measurements and the probes (about one step in DRAFT_YIELD_STALE_STEPS) */
    CHECK_MSG(share[0] < 0.1, "costly drafts: %.2f of the steps drafted", share[0]);
    /* held back, only the sequences' probes propose: proposing is host work a step pays */
    CHECK_MSG(proposals[0] < 0.5 * proposals[1], "costly drafts: %.2f proposals a sequence-step (paying: %.2f)",
              proposals[0], proposals[1]);
    CHECK_MSG(share[1] > 0.15, "paying drafts: only %.2f of the steps drafted", share[1]);
    CHECK_MSG(share[2] > 0.15, "paying drafts after one-off costs: only %.2f of the steps drafted", share[2]);
}

TEST(engine_fake_too_large_fails_alone)
{
    struct err e;
    struct fake f = {0};
    struct backend be = {.ops = &fake_ops, .ctx = &f};
    struct model m = fake_model(100);
    struct engine_params p = engine_default_params();
    p.kv_blocks = 8;
    p.kv_block = 4; /* 32 tokens */
    p.debug_checks = 1;
    engine *eng;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) == 0);
    int32_t prompt[120];
    for (int i = 0; i < 120; i++) prompt[i] = i % FAKE_VOCAB;
    struct engine_request r = {.prompt = prompt, .sampling = sampler_default_params()};
    r.id = 1, r.n_prompt = 10, r.max_tokens = 5; /* fits */
    CHECK(engine_add(eng, &r, &e) == 0);
    r.id = 2, r.n_prompt = 30, r.max_tokens = 5; /* 34 tokens > 32 in the pool */
    CHECK(engine_add(eng, &r, &e) == 0);
    r.id = 3, r.n_prompt = 90, r.max_tokens = 20; /* over the context */
    CHECK(engine_add(eng, &r, &e) == 0);
    r.id = 4, r.n_prompt = 0, r.max_tokens = 20;
    CHECK(engine_add(eng, &r, &e) == 0);
    r.id = 5, r.n_prompt = 3, r.max_tokens = 0;
    CHECK(engine_add(eng, &r, &e) == 0);
    prompt[100] = FAKE_VOCAB + 3;
    r.id = 6, r.prompt = prompt + 98, r.n_prompt = 4, r.max_tokens = 2;
    CHECK(engine_add(eng, &r, &e) == 0);
    r.id = 7, r.prompt = prompt, r.n_prompt = 28, r.max_tokens = 5; /* exactly fits: 32 tokens of KV */
    CHECK(engine_add(eng, &r, &e) == 0);
    int seen = 0;
    const char *want[8] = {NULL, NULL, "KV blocks", "context", "empty prompt", "max_tokens", "outside the vocabulary",
                           NULL};
    while (engine_has_work(eng) || seen < 7) {
        if (engine_has_work(eng)) CHECK_MSG(engine_step(eng, &e) == 0, "%.200s", e.msg);
        struct engine_result res;
        while (engine_take(eng, &res)) {
            seen++;
            int id = (int)res.id;
            if (want[id]) {
                CHECK_EQ_INT(res.finish, ENGINE_FINISH_ERROR);
                CHECK_MSG(res.error && strstr(res.error, want[id]), "id %d: %s", id, res.error ? res.error : "(null)");
                CHECK(res.text && res.text[0] == '\0');
            } else {
                CHECK_EQ_INT(res.finish, ENGINE_FINISH_LENGTH);
                CHECK_EQ_INT(res.n_tokens, 5);
                CHECK(res.error == NULL);
            }
            engine_result_free(&res);
        }
        if (!engine_has_work(eng) && seen < 7) break;
    }
    CHECK_EQ_INT(seen, 7);
    engine_free(eng);
    fake_free(&f);
}

TEST(engine_fake_cancel)
{
    struct err e;
    struct fake f = {0};
    struct backend be = {.ops = &fake_ops, .ctx = &f};
    struct model m = fake_model(512);
    struct engine_params p = engine_default_params();
    p.kv_blocks = 64;
    p.kv_block = 4;
    p.max_seqs = 2;
    p.debug_checks = 1;
    engine *eng;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) == 0);
    int32_t prompt[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    struct engine_request r = {
        .prompt = prompt, .n_prompt = 10, .max_tokens = 30, .sampling = sampler_default_params()};
    for (int i = 0; i < 4; i++) {
        r.id = (uint64_t)i;
        CHECK(engine_add(eng, &r, &e) == 0);
    }
    CHECK(engine_step(eng, &e) == 0);
    CHECK(engine_step(eng, &e) == 0);
    CHECK_EQ_INT(engine_cancel(eng, 0), 0); /* running */
    CHECK_EQ_INT(engine_cancel(eng, 3), 0); /* queued */
    CHECK_EQ_INT(engine_cancel(eng, 99), -1);
    struct engine_result res;
    CHECK(engine_take(eng, &res));
    CHECK_EQ_INT(res.id, 0);
    CHECK_EQ_INT(res.finish, ENGINE_FINISH_CANCELLED);
    CHECK(res.n_tokens >= 1);
    engine_result_free(&res);
    CHECK(engine_take(eng, &res));
    CHECK_EQ_INT(res.id, 3);
    CHECK_EQ_INT(res.n_tokens, 0);
    engine_result_free(&res);
    while (engine_has_work(eng)) CHECK(engine_step(eng, &e) == 0);
    int n = 0;
    while (engine_take(eng, &res)) {
        CHECK_EQ_INT(res.finish, ENGINE_FINISH_LENGTH);
        n++;
        engine_result_free(&res);
    }
    CHECK_EQ_INT(n, 2);
    struct engine_stats st;
    engine_get_stats(eng, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK(st.kv_blocks_cached > 0);
    engine_free(eng);
    fake_free(&f);
}

TEST(engine_rejects_bad_params)
{
    struct err e;
    struct fake f = {0};
    struct backend be = {.ops = &fake_ops, .ctx = &f};
    struct model m = fake_model(512);
    engine *eng;
    struct engine_params p = engine_default_params();
    p.kv_blocks = 10;
    p.kv_block = 7;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) != 0);
    CHECK(strstr(e.msg, "power of two") != NULL);
    p.kv_block = 16;
    p.kv_blocks = 0;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) != 0);
    CHECK(strstr(e.msg, "holds no block") != NULL);
    p.kv_blocks = 10;
    p.max_seqs = 0;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) != 0);
    CHECK(strstr(e.msg, "max_seqs") != NULL);
    p.max_seqs = 64;
    p.max_batch_tokens = 1 << 20;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) != 0);
    CHECK(strstr(e.msg, "max_batch_tokens") != NULL);
    p.max_batch_tokens = 512;
    p.lookup = ENGINE_MAX_LOOKUP + 1;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) != 0);
    CHECK(strstr(e.msg, "lookup") != NULL);
    p.lookup = -1;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) != 0);
    p.lookup = ENGINE_MAX_LOOKUP;
    /* max_seqs above max_batch_tokens is lowered, not an error */
    p.max_batch_tokens = 8;
    CHECK(engine_init(&m, &be, NULL, &p, &eng, &e) == 0);
    engine_free(eng);
    fake_free(&f);
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
    RUN(engine_fake_invariance_greedy_and_sampled);
    RUN(engine_fake_lookup_invariance);
    RUN(engine_fake_lookup_yield);
    RUN(engine_fake_too_large_fails_alone);
    RUN(engine_fake_cancel);
    RUN(engine_rejects_bad_params);
    return test_summary();
}
