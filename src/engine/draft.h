/* draft — how many draft tokens (prompt lookup, lookup.h) a sequence verifies in this step: worth it only
 * while the rows are cheap and the drafts are likely right.
 *
 * Cost: a step of R rows takes about T(R) = t0 + c * R seconds: t0 the part every step pays whatever its rows
 * (reading the weights, launching work), c the cost of a row. draft_cost fits t0 and c to the forward times
 * the engine observes (least squares, exponentially forgetting: the last ~DRAFT_COST_HALF_LIFE steps count
 * most); until the data pin the fit down it assumes t0 = knee * c for the prior knee DRAFT_PRIOR_KNEE.
 *
 * Value: a step of R rows yields R rows of work in T(R). One more row (a draft token) costs c and is worth a
 * row of work when it is accepted, which it is with probability P. So it pays iff P * T(R) / R > c, i.e.
 *     P > share(R) = c * R / T(R) = R / (R + knee),        knee = t0 / c.
 * Few rows (decode at low concurrency, weight-bound): share is small and long drafts pay; many rows
 * (compute-bound): share -> 1 and only near-certain drafts pay, so at high concurrency lookup drafts little
 * or nothing and costs (almost) nothing.
 *
 * Acceptance: each sequence keeps decayed counts of draft tokens the sampler accepted and rejected (plus a
 * prior); the d-th token of a draft is accepted with probability p^d (all before it must be). So a sequence
 * drafts the largest d <= max with p^k > share(R + k - 1) for every k <= d. The engine also scores the next
 * proposed token that it did not verify against the token actually sampled (free information), so a
 * sequence that stopped drafting notices when its proposals become right again.
 */
#ifndef NS_ENGINE_DRAFT_H
#define NS_ENGINE_DRAFT_H

#include <stdint.h>

#include "util/err.h"

#define DRAFT_PRIOR_KNEE 4.0    /* t0 / c assumed before the fit has data (rows) */
#define DRAFT_COST_HALF_LIFE 64 /* steps */

/* Exponentially weighted sums of (rows, seconds) per step. */
struct draft_cost {
    double w, sx, sy, sxx, sxy;
};

/* Decayed counts of draft tokens accepted (hits) and rejected (misses), prior included. */
struct draft_seq {
    float hits, misses;
};

void draft_cost_init(struct draft_cost *c);
/* Adds one step: rows run, seconds in the forward pass. */
void draft_cost_add(struct draft_cost *c, int32_t rows, double seconds);
/* t0 / c from the fit (DRAFT_PRIOR_KNEE while the data cannot tell: few steps or rows that hardly vary). */
double draft_cost_knee(const struct draft_cost *c);
/* share(rows) = rows / (rows + knee), in (0, 1]. */
double draft_cost_share(const struct draft_cost *c, int32_t rows);

void draft_seq_init(struct draft_seq *s);
/* Records hits accepted tokens, then a miss (rejected: 1, or 0 when every verified token was accepted). */
void draft_seq_observe(struct draft_seq *s, int32_t hits, int missed);
/* Estimated probability that the next draft token is accepted. */
double draft_seq_p(const struct draft_seq *s);

/* Draft tokens worth verifying for a sequence with acceptance s in a step that has `rows` rows so far:
 * the rule at the top of this file, at most max (>= 0). */
int32_t draft_len(const struct draft_cost *c, const struct draft_seq *s, int32_t rows, int32_t max);

/* Debug check: sums finite and consistent (w >= 0, sxx >= 0, ...), counts positive. */
int draft_check(const struct draft_cost *c, const struct draft_seq *s, struct err *e);

#endif
