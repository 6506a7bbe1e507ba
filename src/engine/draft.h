/* draft — how many draft tokens (prompt lookup, lookup.h) a sequence verifies in this step: worth it only
 * while the rows are cheap and the drafts are likely right.
 *
 * Cost: a step of R rows takes about T(R) = t0 + c * R seconds: t0 the part every step pays whatever its rows
 * (reading the weights, launching work), c the cost of a row (its FLOPs, and the host's work on it). draft_cost
 * fits t0 and c to the times of the steps the engine observes (whole engine steps whose rows all sample, the
 * steps drafts join):
 * least squares, exponentially forgetting (the last ~DRAFT_COST_HALF_LIFE steps count most), regularized by
 * DRAFT_PRIOR_W pseudo-steps on the prior line t0 = knee * c (scaled to the observed times; knee is the
 * backend's (backend_caps.step_knee_rows: a GPU's is large, its steps' time hardly grows with rows) or
 * DRAFT_PRIOR_KNEE, about a CPU's), so that steps of one size, which say nothing about the slope, leave the
 * prior; a time more than
 * DRAFT_CLIP times off the current fit counts as that bound (a step slowed by another process does not
 * turn the fit over).
 *
 * Value: a step of R rows that yields E tokens of work (a prompt row or a sampled token: 1 each; a draft row:
 * the chance it is accepted) runs at E / T(R). One more row (a draft token) costs c and yields P, the chance
 * it is accepted. It raises the step's rate iff P / c > E / T(R), i.e.
 *     P > bar(R, E) = c * E / T(R) = E / (R + knee),        knee = t0 / c.
 * Before any draft E = R and the bar is R / (R + knee): few rows (decode at low concurrency, weight-bound)
 * make it low and long drafts pay; many rows (compute-bound) push it to 1, so at high concurrency lookup
 * drafts little or nothing and costs (almost) nothing.
 *
 * Yield: the cost line does not see everything a step with drafts costs: a GPU backend replays captured
 * graphs for decode steps of a few sequences but launches every kernel of a larger step, a GEMM of a few
 * rows more than a tile may take a tile more, and proposing (bringing each sequence's index up to date) is
 * host work that a small model's steps on a fast device feel. So the engine also measures what drafting
 * achieves: draft_yield keeps the decayed seconds per token kept (sampled or accepted) of the steps with
 * drafts and of those without, the latter less the seconds they spent proposing (what they would cost
 * without lookup), and each kind's weight, which decays with every step. While steps with drafts cost more
 * a token than that, a step verifies none, and only the sequences' probes propose (scored as shadows,
 * keeping their acceptance current). When the kind not preferred has not been seen for about
 * DRAFT_YIELD_STALE_STEPS steps, a step does that kind, which keeps both measurements current (where steps
 * of both kinds occur anyway, as they do where some steps find nothing to propose, it never has to).
 * Neither the line nor the yield learns from a step the backend says paid a one-off cost
 * (backend_ops.step_one_off: a GPU capturing the graph of a shape): such a probe would measure the capture,
 * not the kind, and hold drafts back again.
 *
 * Acceptance: each sequence keeps decayed counts of draft tokens the sampler accepted and rejected (plus a
 * prior, and half a miss of doubt in every estimate: drafting when the estimate is high picks the lucky
 * streaks, whose next tokens are accepted less often than the streak says); the d-th token of a draft is
 * accepted with probability p^d (all before it must be). So a sequence
 * drafts while the next token's p^d clears the bar, R and E growing with each row it adds. The engine also
 * scores the next proposed token that it did not verify against the token actually sampled (free
 * information), so a sequence that stopped drafting notices when its proposals become right again.
 */
#ifndef NS_ENGINE_DRAFT_H
#define NS_ENGINE_DRAFT_H

#include <stdint.h>

#include "util/err.h"

#define DRAFT_PRIOR_KNEE 4.0    /* t0 / c assumed before the fit has data where the backend states none (rows;
                                   about a CPU's) */
#define DRAFT_PRIOR_W 16.0      /* weight of the prior, in steps */
#define DRAFT_COST_HALF_LIFE 64 /* steps */
#define DRAFT_CLIP 2.0          /* observations are clipped to [fit / DRAFT_CLIP, fit * DRAFT_CLIP] */
#define DRAFT_KNEE_MIN 0.25     /* the fit never claims a step has no fixed part at all */

/* Exponentially weighted sums of (rows, seconds) per step. */
struct draft_cost {
    double w, sx, sy, sxx, sxy;
    double prior_knee; /* rows: the knee the fit starts from and falls back to */
};

#define DRAFT_YIELD_DECAY 0.95 /* per step: the last ~20 steps count most */
#define DRAFT_YIELD_STALE 0.2  /* a kind's weight below this (~DRAFT_YIELD_STALE_STEPS steps unseen) is stale */
#define DRAFT_YIELD_STALE_STEPS 32

/* Per kind of step ([0] without drafts, [1] with): decayed sums of seconds and of tokens kept (their ratio,
 * not a mean of each step's ratio: a step with drafts keeps 1 to 1 + N tokens, and a mean of ratios would
 * weigh the steps whose drafts were rejected as if they were the rule), and the decayed count of steps
 * (0: never seen). */
struct draft_yield {
    double seconds[2], tokens[2], w[2];
};

/* Decayed counts of draft tokens accepted (hits) and rejected (misses), prior included. */
struct draft_seq {
    float hits, misses;
};

/* prior_knee: the backend's knee in rows (> 0), or 0 for DRAFT_PRIOR_KNEE. */
void draft_cost_init(struct draft_cost *c, double prior_knee);
/* Adds one step: rows run, seconds in the forward pass. */
void draft_cost_add(struct draft_cost *c, int32_t rows, double seconds);
/* t0 / c from the fit, in [DRAFT_KNEE_MIN, 1e6] (the prior knee with no data, or where the fit's slope is not
 * positive). */
double draft_cost_knee(const struct draft_cost *c);
/* share(rows) = rows / (rows + knee), in (0, 1]. */
double draft_cost_share(const struct draft_cost *c, int32_t rows);

/* Adds one step whose rows all sample: seconds, of them the seconds spent proposing, tokens kept, whether
 * it verified drafts. */
void draft_yield_add(struct draft_yield *y, double seconds, double proposing, int32_t tokens, int drafted);
/* 1 if a step that has drafts to verify may verify them (the rule at the top). */
int draft_yield_allows(const struct draft_yield *y);

void draft_seq_init(struct draft_seq *s);
/* Records hits accepted tokens, then a miss (rejected: 1, or 0 when every verified token was accepted). */
void draft_seq_observe(struct draft_seq *s, int32_t hits, int missed);
/* Estimated probability that the next draft token is accepted. */
double draft_seq_p(const struct draft_seq *s);

/* Draft tokens worth verifying for a sequence with acceptance s in a step that has `rows` rows so far
 * yielding *value tokens (E above), with knee = draft_cost_knee(): the rule at the top of this file, at most
 * max (>= 0). Adds the drafts' expected tokens to *value. */
int32_t draft_len(double knee, const struct draft_seq *s, int32_t rows, double *value, int32_t max);

/* Expected accepted tokens of a d-token draft: p + p^2 + ... + p^d. */
double draft_expected(const struct draft_seq *s, int32_t d);

/* Debug check: sums finite and consistent (w >= 0, sxx >= 0, ...), counts positive. */
int draft_check(const struct draft_cost *c, const struct draft_seq *s, struct err *e);
/* Debug check: sums finite and not negative. */
int draft_yield_check(const struct draft_yield *y, struct err *e);

#endif
