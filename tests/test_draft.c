/* test_draft — the draft-length rule: the step cost fit finds t0 / c from step times, the share of a step
 * that its rows cost grows with the rows, and the draft length follows acceptance and step size. */
#include "engine/draft.h"

#include <math.h>
#include <stdint.h>

#include "test.h"

TEST(draft_cost_fit)
{
    struct err e;
    struct draft_cost c;
    draft_cost_init(&c);
    CHECK(draft_cost_knee(&c) == DRAFT_PRIOR_KNEE); /* no data */
    /* rows that never vary say nothing about the slope */
    for (int i = 0; i < 100; i++) draft_cost_add(&c, 64, 0.1);
    CHECK(draft_cost_knee(&c) == DRAFT_PRIOR_KNEE);
    /* T = 4 ms + 1.5 ms per row over rows 1..9 and 200: knee 2.67 */
    draft_cost_init(&c);
    for (int i = 0; i < 400; i++) {
        int32_t rows = i % 10 == 9 ? 200 : 1 + i % 9;
        double noise = (i % 3 - 1) * 1e-5;
        draft_cost_add(&c, rows, 0.004 + 0.0015 * rows + noise);
        CHECK(draft_check(&c, NULL, &e) == 0);
    }
    double knee = draft_cost_knee(&c);
    CHECK_MSG(fabs(knee - 4.0 / 1.5) < 0.05, "knee %g", knee);
    CHECK(fabs(draft_cost_share(&c, 1) - 1 / (1 + knee)) < 1e-12);
    CHECK(draft_cost_share(&c, 64) > 0.95);
    CHECK(draft_cost_share(&c, 2) < draft_cost_share(&c, 4));
    /* the fit forgets: the same machine turned compute-bound (no fixed part) */
    for (int i = 0; i < 2000; i++) draft_cost_add(&c, 1 + i % 9, 0.002 * (1 + i % 9));
    CHECK_MSG(draft_cost_knee(&c) < 0.05, "knee %g", draft_cost_knee(&c));
    /* slopes that say rows are free are noise: back to the prior */
    draft_cost_init(&c);
    for (int i = 0; i < 100; i++) draft_cost_add(&c, 1 + i % 9, 0.01 - 0.0001 * (i % 9));
    CHECK(draft_cost_knee(&c) == DRAFT_PRIOR_KNEE);
    /* bad observations are ignored */
    draft_cost_add(&c, 5, NAN);
    draft_cost_add(&c, 0, 1.0);
    CHECK(draft_check(&c, NULL, &e) == 0);
}

TEST(draft_seq_acceptance)
{
    struct err e;
    struct draft_seq s;
    draft_seq_init(&s);
    CHECK(fabs(draft_seq_p(&s) - 0.5) < 1e-6);
    draft_seq_observe(&s, 8, 0);
    double p8 = draft_seq_p(&s);
    CHECK(p8 > 0.85);
    draft_seq_observe(&s, 0, 1);
    CHECK(draft_seq_p(&s) < p8);
    for (int i = 0; i < 30; i++) draft_seq_observe(&s, 0, 1);
    CHECK(draft_seq_p(&s) < 0.05);
    CHECK(draft_check(NULL, &s, &e) == 0); /* counts stay positive */
    for (int i = 0; i < 10; i++) draft_seq_observe(&s, 3, 0);
    CHECK(draft_seq_p(&s) > 0.9); /* recent tokens count most */
    s.hits = 0;
    CHECK(draft_check(NULL, &s, &e) != 0);
}

TEST(draft_len_rule)
{
    struct draft_cost c;
    struct draft_seq hi, mid, lo;
    draft_cost_init(&c); /* prior knee 4: share(r) = r / (r + 4) */
    hi.hits = 99, hi.misses = 1;   /* p 0.99 */
    mid.hits = 8, mid.misses = 2;  /* p 0.8 */
    lo.hits = 1, lo.misses = 9;    /* p 0.1 */
    /* one row (decode at concurrency 1): share 0.2, 0.33, 0.43, 0.5, 0.56, 0.6, 0.64, 0.67 ... */
    CHECK_EQ_INT(draft_len(&c, &hi, 1, 8), 8);
    CHECK_EQ_INT(draft_len(&c, &mid, 1, 8), 3); /* 0.8 > 0.2, 0.64 > 0.33, 0.51 > 0.43, 0.41 < 0.5 */
    CHECK_EQ_INT(draft_len(&c, &lo, 1, 8), 0);
    CHECK_EQ_INT(draft_len(&c, &hi, 1, 3), 3); /* at most max */
    CHECK_EQ_INT(draft_len(&c, &hi, 1, 0), 0);
    /* many rows (compute-bound): share(64) = 0.94, share(400) = 0.99 */
    CHECK_EQ_INT(draft_len(&c, &mid, 64, 8), 0);
    CHECK_EQ_INT(draft_len(&c, &hi, 64, 8), 5); /* 0.99^5 = 0.951 > share(68) = 0.944; 0.99^6 < share(69) */
    CHECK_EQ_INT(draft_len(&c, &hi, 400, 8), 0);
    /* monotone: more rows never draft more, higher acceptance never drafts less */
    for (int32_t r = 1; r < 200; r++) {
        CHECK(draft_len(&c, &hi, r + 1, 8) <= draft_len(&c, &hi, r, 8));
        CHECK(draft_len(&c, &mid, r, 8) <= draft_len(&c, &hi, r, 8));
    }
}

int main(void)
{
    RUN(draft_cost_fit);
    RUN(draft_seq_acceptance);
    RUN(draft_len_rule);
    return test_summary();
}
