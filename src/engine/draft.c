/* draft — the rule in draft.h.
 *
 * Invariant (checked by draft_check): the cost sums are finite, w >= 0, the weighted variance of rows is
 * not negative beyond rounding and the prior knee is positive; a sequence's counts are finite and positive
 * (the prior never decays to zero: each observation scales the counts by DRAFT_SEQ_DECAY and adds one).
 */
#include "engine/draft.h"

#include <math.h>

#define DRAFT_SEQ_DECAY 0.93f /* per observed token: a sequence's last ~14 tokens count most */
#define DRAFT_SEQ_DOUBT 0.5   /* misses added to every estimate: a streak of hits is partly luck (drafting on
                                 the estimate selects the lucky streaks), so p stays below 0.97 */
#define DRAFT_KNEE_MAX 1e6

void draft_cost_init(struct draft_cost *c, double prior_knee)
{
    *c = (struct draft_cost){.prior_knee = prior_knee > 0 ? prior_knee : DRAFT_PRIOR_KNEE};
}

/* The least-squares line through the observations and the prior (slope, intercept); 0 when it has none. */
static int cost_fit(const struct draft_cost *c, double *slope, double *t0)
{
    if (c->w <= 0 || c->sy <= 0) return 0;
    double mx = c->sx / c->w, my = c->sy / c->w;
    /* the prior: DRAFT_PRIOR_W pseudo-steps, half at 1 row and half at 1 + 2 * DRAFT_PRIOR_KNEE rows, on the
     * line s * (knee + R) through the observations' mean (the same span whatever the knee, so that a large
     * prior knee does not outweigh steps over a few rows by its leverage) */
    double k = c->prior_knee, s = my / (k + mx), half = DRAFT_PRIOR_W / 2;
    double xa = 1, xb = 1 + 2 * DRAFT_PRIOR_KNEE, ya = s * (k + xa), yb = s * (k + xb);
    double w = c->w + DRAFT_PRIOR_W, sx = c->sx + half * (xa + xb), sy = c->sy + half * (ya + yb);
    double sxx = c->sxx + half * (xa * xa + xb * xb), sxy = c->sxy + half * (xa * ya + xb * yb);
    mx = sx / w;
    my = sy / w;
    double vxx = sxx / w - mx * mx, cxy = sxy / w - mx * my;
    if (!(vxx > 0)) return 0;
    *slope = cxy / vxx;
    *t0 = my - *slope * mx;
    return 1;
}

void draft_cost_add(struct draft_cost *c, int32_t rows, double seconds)
{
    static const double decay = 0.98923; /* 2^(-1/DRAFT_COST_HALF_LIFE) */
    if (rows < 1 || !(seconds >= 0) || !isfinite(seconds)) return;
    double x = rows, slope, t0;
    if (c->w >= DRAFT_PRIOR_W && cost_fit(c, &slope, &t0)) {
        double fit = t0 + slope * x;
        if (fit > 0 && seconds > fit * DRAFT_CLIP) seconds = fit * DRAFT_CLIP;
        if (fit > 0 && seconds < fit / DRAFT_CLIP) seconds = fit / DRAFT_CLIP;
    }
    c->w = c->w * decay + 1;
    c->sx = c->sx * decay + x;
    c->sy = c->sy * decay + seconds;
    c->sxx = c->sxx * decay + x * x;
    c->sxy = c->sxy * decay + x * seconds;
}

double draft_cost_knee(const struct draft_cost *c)
{
    double slope, t0;
    if (!cost_fit(c, &slope, &t0)) return c->prior_knee;
    if (!(slope > 0)) return c->prior_knee; /* noise: rows are never free */
    double knee = t0 / slope;
    return knee < DRAFT_KNEE_MIN ? DRAFT_KNEE_MIN : knee > DRAFT_KNEE_MAX ? DRAFT_KNEE_MAX : knee;
}

double draft_cost_share(const struct draft_cost *c, int32_t rows)
{
    double r = rows > 0 ? rows : 1;
    return r / (r + draft_cost_knee(c));
}

void draft_yield_add(struct draft_yield *y, double seconds, double proposing, int32_t tokens, int drafted)
{
    if (tokens < 1 || !(seconds >= 0) || !isfinite(seconds) || !(proposing >= 0) || !(proposing <= seconds)) return;
    const int k = drafted != 0;
    if (!k) seconds -= proposing; /* without lookup it would not have proposed */
    for (int i = 0; i < 2; i++) { /* both forget with every step: a kind seen rarely (the probes) moves fast */
        y->seconds[i] *= DRAFT_YIELD_DECAY;
        y->tokens[i] *= DRAFT_YIELD_DECAY;
        y->w[i] *= DRAFT_YIELD_DECAY;
    }
    y->seconds[k] += seconds;
    y->tokens[k] += tokens;
    y->w[k] += 1;
}

int draft_yield_allows(const struct draft_yield *y)
{
    if (y->w[1] == 0) return 1; /* measure each kind first */
    if (y->w[0] == 0) return 0;
    const int prefer = y->seconds[1] * y->tokens[0] <= y->seconds[0] * y->tokens[1]; /* s1 / k1 <= s0 / k0 */
    return y->w[!prefer] < DRAFT_YIELD_STALE ? !prefer : prefer; /* the kind not preferred stale: measure it */
}

int draft_yield_check(const struct draft_yield *y, struct err *e)
{
    for (int i = 0; i < 2; i++)
        if (!isfinite(y->seconds[i]) || !isfinite(y->tokens[i]) || !(y->seconds[i] >= 0) || !(y->tokens[i] >= 0) ||
            !(y->w[i] >= 0))
            return err_set(e, "draft_yield_check: steps %s drafts: %g s, %g tokens, weight %g", i ? "with" : "without",
                           y->seconds[i], y->tokens[i], y->w[i]);
    return 0;
}

void draft_seq_init(struct draft_seq *s)
{
    s->hits = 1.0f;
    s->misses = 1.0f;
}

void draft_seq_observe(struct draft_seq *s, int32_t hits, int missed)
{
    for (int32_t i = 0; i < hits + (missed != 0); i++) {
        s->hits *= DRAFT_SEQ_DECAY;
        s->misses *= DRAFT_SEQ_DECAY;
        if (i < hits) s->hits += 1.0f;
        else s->misses += 1.0f;
    }
}

double draft_seq_p(const struct draft_seq *s)
{
    return (double)s->hits / ((double)s->hits + (double)s->misses + DRAFT_SEQ_DOUBT);
}

int32_t draft_len(double knee, const struct draft_seq *s, int32_t rows, double *value, int32_t max)
{
    double p = draft_seq_p(s), pk = 1.0;
    int32_t d = 0;
    while (d < max) {
        pk *= p;
        if (pk * ((double)rows + d + knee) <= *value) break; /* pk <= E / (R + knee) */
        *value += pk;
        d++;
    }
    return d;
}

double draft_expected(const struct draft_seq *s, int32_t d)
{
    double p = draft_seq_p(s), pk = 1.0, sum = 0;
    for (int32_t k = 0; k < d; k++) sum += pk *= p;
    return sum;
}

int draft_check(const struct draft_cost *c, const struct draft_seq *s, struct err *e)
{
    if (c) {
        if (!isfinite(c->w) || !isfinite(c->sx) || !isfinite(c->sy) || !isfinite(c->sxx) || !isfinite(c->sxy) ||
            c->w < 0 || c->sx < 0 || c->sy < 0 || c->sxx * c->w < c->sx * c->sx * (1 - 1e-9) || !(c->prior_knee > 0))
            return err_set(e, "draft_check: step cost sums are inconsistent (w %g, rows %g, rows^2 %g)", c->w, c->sx,
                           c->sxx);
    }
    if (s && (!(s->hits > 0) || !(s->misses > 0) || !isfinite(s->hits) || !isfinite(s->misses)))
        return err_set(e, "draft_check: acceptance counts %g hits, %g misses", (double)s->hits, (double)s->misses);
    return 0;
}
