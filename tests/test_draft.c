/* test_draft — the draft-length rule: the step cost fit finds t0 / c from step times, the share of a step
 * that its rows cost grows with the rows, and the draft length follows acceptance and step size. */
#include "engine/draft.h"

#include <math.h>
#include <string.h>
#include <stdint.h>

#include "test.h"

TEST(draft_cost_fit)
{
    struct err e;
    struct draft_cost c;
    draft_cost_init(&c, 0);
    CHECK(draft_cost_knee(&c) == DRAFT_PRIOR_KNEE); /* no data */
    /* rows that never vary say nothing about the slope: the prior stands */
    for (int i = 0; i < 100; i++) draft_cost_add(&c, 64, 0.1);
    CHECK(fabs(draft_cost_knee(&c) - DRAFT_PRIOR_KNEE) < 1e-9);
    /* T = 4 ms + 1.5 ms per row over rows 1..9 and 200: knee 2.67 (the prior pulls a little) */
    draft_cost_init(&c, 0);
    for (int i = 0; i < 400; i++) {
        int32_t rows = i % 10 == 9 ? 200 : 1 + i % 9;
        double noise = (i % 3 - 1) * 1e-5;
        draft_cost_add(&c, rows, 0.004 + 0.0015 * rows + noise);
        CHECK(draft_check(&c, NULL, &e) == 0);
    }
    double knee = draft_cost_knee(&c);
    fprintf(stderr, "# fitted knee %.3f (true 2.667, prior %.1f)\n", knee, DRAFT_PRIOR_KNEE);
    CHECK_MSG(fabs(knee - 4.0 / 1.5) < 0.25, "knee %g", knee);
    CHECK(fabs(draft_cost_share(&c, 1) - 1 / (1 + knee)) < 1e-12);
    CHECK(draft_cost_share(&c, 64) > 0.95);
    CHECK(draft_cost_share(&c, 2) < draft_cost_share(&c, 4));
    /* the fit forgets: the same machine turned compute-bound (no fixed part) */
    for (int i = 0; i < 2000; i++) draft_cost_add(&c, 1 + i % 9, 0.002 * (1 + i % 9));
    fprintf(stderr, "# compute-bound: knee %.3f\n", draft_cost_knee(&c));
    CHECK_MSG(draft_cost_knee(&c) < 1.0, "knee %g", draft_cost_knee(&c));
    /* a step 10x slower than the fit (another process ran) moves it little */
    draft_cost_init(&c, 0);
    for (int i = 0; i < 200; i++) draft_cost_add(&c, 1 + i % 9, 0.004 + 0.0015 * (1 + i % 9));
    knee = draft_cost_knee(&c);
    draft_cost_add(&c, 2, 0.2);
    CHECK_MSG(fabs(draft_cost_knee(&c) - knee) < 0.25, "knee %g -> %g", knee, draft_cost_knee(&c));
    /* slopes that say rows are free are noise: back to the prior */
    draft_cost_init(&c, 0);
    for (int i = 0; i < 100; i++) draft_cost_add(&c, 1 + i % 9, 0.01 - 0.001 * (i % 9));
    CHECK(draft_cost_knee(&c) == DRAFT_PRIOR_KNEE);
    /* bad observations are ignored */
    draft_cost_add(&c, 5, NAN);
    draft_cost_add(&c, 0, 1.0);
    CHECK(draft_check(&c, NULL, &e) == 0);
    /* a backend's prior (a GPU's 128 rows) stands where the rows never vary, and the fit learns a CPU-like
     * line from there (the flat prior still pulls it up a little: 5.5 for the true 2.67) */
    draft_cost_init(&c, 128);
    CHECK(draft_cost_knee(&c) == 128);
    for (int i = 0; i < 100; i++) draft_cost_add(&c, 64, 0.002);
    CHECK(fabs(draft_cost_knee(&c) - 128) < 1e-6);
    CHECK(draft_cost_share(&c, 64) < 0.34); /* a step of 64 rows is far from compute-bound */
    for (int i = 0; i < 2000; i++) draft_cost_add(&c, 1 + i % 9, 0.004 + 0.0015 * (1 + i % 9));
    CHECK_MSG(draft_cost_knee(&c) < 8, "knee %g", draft_cost_knee(&c));
    /* a flat line (time hardly grows with rows, as on a GPU at small batches) keeps the knee large */
    draft_cost_init(&c, 128);
    for (int i = 0; i < 400; i++) draft_cost_add(&c, 1 + 8 * (i % 9), 0.002 + 1e-7 * (1 + 8 * (i % 9)));
    CHECK_MSG(draft_cost_knee(&c) > 256, "knee %g", draft_cost_knee(&c)); /* 682 for the true 20,000 */
}

/* 320 steps under the yield rule: a step without drafts takes plain_s seconds (proposing_s of them proposing)
 * and keeps plain_k tokens; the j-th with drafts takes draft_s and keeps draft_k[j % 2]. Checks the sums after
 * every step; *allowed: the steps that drafted. */
static void yield_run(struct draft_yield *y, double plain_s, double proposing_s, int32_t plain_k, double draft_s,
                      const int32_t draft_k[2], int *allowed)
{
    struct err e;
    *allowed = 0;
    for (int i = 0; i < 320; i++) {
        const int d = draft_yield_allows(y);
        draft_yield_add(y, d ? draft_s : plain_s, proposing_s, d ? draft_k[*allowed % 2] : plain_k, d);
        *allowed += d;
        CHECK(draft_yield_check(y, &e) == 0);
    }
}

/* Steps with drafts that cost more a token than steps without stop drafting, but for a probe when their
 * measurement is stale (about every DRAFT_YIELD_STALE_STEPS steps); ones that cost less keep it; a change
 * of machine is followed. */
TEST(draft_yield_rule)
{
    struct draft_yield y = {0};
    CHECK(draft_yield_allows(&y)); /* nothing measured */
    /* GPU-like at 4 sequences: 1 ms and 4 tokens without drafts, 2 ms and 6 tokens with them */
    int allowed;
    yield_run(&y, 0.001, 0, 4, 0.002, (const int32_t[2]){6, 6}, &allowed);
    fprintf(stderr, "# losing drafts: %d of 320 steps drafted\n", allowed);
    CHECK_MSG(allowed <= 320 / (DRAFT_YIELD_STALE_STEPS - 8) + 4, "%d steps drafted", allowed);
    CHECK_MSG(allowed >= 320 / (DRAFT_YIELD_STALE_STEPS + 8) - 1, "%d steps drafted", allowed); /* the probes */
    /* the drafts turn good (2 ms and 12 tokens): drafting resumes at the next probe and stays */
    yield_run(&y, 0.001, 0, 4, 0.002, (const int32_t[2]){12, 12}, &allowed);
    CHECK_MSG(allowed >= 320 - 2 * (DRAFT_YIELD_STALE_STEPS + 8) - 4, "%d steps drafted", allowed);
    /* bad input is ignored */
    struct draft_yield z = y;
    draft_yield_add(&y, NAN, 0, 3, 1);
    draft_yield_add(&y, 0.001, 0.002, 3, 0); /* proposing longer than the step */
    draft_yield_add(&y, 0.001, 0, 0, 0);
    CHECK(memcmp(&y, &z, sizeof y) == 0);
}

/* Cost a token is the ratio of the decayed sums: steps with drafts of 1 ms that keep 1 and 9 tokens in turn
 * (200 us a token) beat steps without of 0.5 ms and 1 token, though the mean of their steps' ratios (555 us)
 * does not. */
TEST(draft_yield_ratio_of_sums)
{
    struct draft_yield y = {0};
    int allowed;
    yield_run(&y, 0.0005, 0, 1, 0.001, (const int32_t[2]){1, 9}, &allowed);
    /* at most one hold at the start (its first step with drafts kept 1 token), then drafts */
    CHECK_MSG(allowed >= 320 - 2 * (DRAFT_YIELD_STALE_STEPS + 8) - 4, "%d of 320 steps drafted", allowed);
}

/* The yield compares steps with drafts against steps without less their proposing: drafts that gain 5% a
 * token but need proposals costing 10% of a step are held back (a small model on a fast device: lookup's
 * host work is a visible share of a step); drafts 2.5% cheaper a token than steps without, proposing free,
 * are kept. */
TEST(draft_yield_counts_proposing)
{
    struct draft_yield y = {0};
    int allowed;
    yield_run(&y, 0.001, 0.0001, 40, 0.001, (const int32_t[2]){42, 42}, &allowed);
    fprintf(stderr, "# drafts gaining less than their proposals: %d of 320 steps drafted\n", allowed);
    CHECK_MSG(allowed <= 320 / (DRAFT_YIELD_STALE_STEPS - 8) + 4, "%d steps drafted", allowed);
    y = (struct draft_yield){0};
    yield_run(&y, 0.001, 0, 40, 0.001, (const int32_t[2]){41, 41}, &allowed);
    CHECK_MSG(allowed >= 320 - 320 / (DRAFT_YIELD_STALE_STEPS - 8) - 4, "%d steps drafted", allowed);
}

TEST(draft_seq_acceptance)
{
    struct err e;
    struct draft_seq s;
    draft_seq_init(&s);
    CHECK(fabs(draft_seq_p(&s) - 0.4) < 1e-6); /* 1 hit, 1 miss, half a miss of doubt */
    draft_seq_observe(&s, 8, 0);
    double p8 = draft_seq_p(&s);
    CHECK_MSG(p8 > 0.85, "p %g", p8);
    draft_seq_observe(&s, 0, 1);
    CHECK(draft_seq_p(&s) < p8);
    for (int i = 0; i < 40; i++) draft_seq_observe(&s, 0, 1);
    CHECK_MSG(draft_seq_p(&s) < 0.05, "p %g", draft_seq_p(&s));
    CHECK(draft_check(NULL, &s, &e) == 0); /* counts stay positive */
    for (int i = 0; i < 10; i++) draft_seq_observe(&s, 3, 0);
    CHECK_MSG(draft_seq_p(&s) > 0.85, "p %g", draft_seq_p(&s)); /* recent tokens count most */
    for (int i = 0; i < 1000; i++) draft_seq_observe(&s, 1, 0);
    CHECK_MSG(draft_seq_p(&s) < 0.97, "p %g", draft_seq_p(&s)); /* a streak never makes it certain */
    s.hits = 0;
    CHECK(draft_check(NULL, &s, &e) != 0);
}

/* draft_len in a step of `rows` rows, each worth a token. */
static int32_t len_at(const struct draft_cost *c, const struct draft_seq *s, int32_t rows, int32_t max)
{
    double value = rows;
    int32_t d = draft_len(draft_cost_knee(c), s, rows, &value, max);
    return fabs(value - rows - draft_expected(s, d)) < 1e-9 ? d : -1; /* the value grew by what it drafted */
}

TEST(draft_len_rule)
{
    struct draft_cost c;
    struct draft_seq hi, mid, lo;
    draft_cost_init(&c, 0); /* prior knee 4: the bar is E / (R + 4) */
    hi.hits = 99, hi.misses = 1;   /* p 0.985 */
    mid.hits = 8, mid.misses = 2;  /* p 0.762 */
    lo.hits = 1, lo.misses = 9;    /* p 0.095 */
    /* one row (decode at concurrency 1) */
    CHECK_EQ_INT(len_at(&c, &hi, 1, 8), 8);
    CHECK_EQ_INT(len_at(&c, &mid, 1, 8), 3); /* .76 * 5 > 1, .58 * 6 > 1.76, .44 * 7 > 2.34, .34 * 8 < 2.79 */
    CHECK_EQ_INT(len_at(&c, &lo, 1, 8), 0);  /* .095 * 5 < 1 */
    CHECK_EQ_INT(len_at(&c, &hi, 1, 3), 3);  /* at most max */
    CHECK_EQ_INT(len_at(&c, &hi, 1, 0), 0);
    /* many rows (compute-bound): the bar nears 1 */
    CHECK_EQ_INT(len_at(&c, &mid, 64, 8), 0);
    /* .985 * 68 > 64, .970 * 69 > 64.98, .956 * 70 > 65.95, .941 * 71 < 66.91 */
    CHECK_EQ_INT(len_at(&c, &hi, 64, 8), 3);
    CHECK_EQ_INT(len_at(&c, &hi, 400, 8), 0);
    /* monotone: more rows never draft more, higher acceptance never drafts less */
    for (int32_t r = 1; r < 200; r++) {
        CHECK(len_at(&c, &hi, r + 1, 8) <= len_at(&c, &hi, r, 8));
        CHECK(len_at(&c, &mid, r, 8) <= len_at(&c, &hi, r, 8));
        CHECK(len_at(&c, &lo, r, 8) >= 0);
    }
    /* a step already holding drafts (E < R) takes more than one holding only sure rows */
    double value = 8;
    CHECK_EQ_INT(draft_len(draft_cost_knee(&c), &mid, 8, &value, 8), 1);
    value = 4;
    CHECK_EQ_INT(draft_len(draft_cost_knee(&c), &mid, 8, &value, 8), 3);
    double p = 8 / 10.5;
    CHECK(fabs(draft_expected(&mid, 2) - (p + p * p)) < 1e-6);
}

int main(void)
{
    RUN(draft_cost_fit);
    RUN(draft_yield_rule);
    RUN(draft_yield_counts_proposing);
    RUN(draft_yield_ratio_of_sums);
    RUN(draft_seq_acceptance);
    RUN(draft_len_rule);
    return test_summary();
}
