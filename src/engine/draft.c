/* draft — the rule in draft.h.
 *
 * Invariant (checked by draft_check): the cost sums are finite, w >= 0 and the weighted variance of rows
 * is not negative beyond rounding; a sequence's counts are finite and positive (the prior never decays to
 * zero: each observation scales the counts by DRAFT_SEQ_DECAY and adds one).
 */
#include "engine/draft.h"

#include <math.h>

#define DRAFT_SEQ_DECAY 0.85f /* per observed token: a sequence's last ~7 tokens count most */
#define DRAFT_FIT_MIN_W 8.0   /* weighted steps before the fit is trusted */
#define DRAFT_FIT_MIN_VAR 0.25 /* weighted variance of rows (rows^2) before the fit is trusted */
#define DRAFT_KNEE_MAX 1e6

void draft_cost_init(struct draft_cost *c)
{
    *c = (struct draft_cost){0};
}

void draft_cost_add(struct draft_cost *c, int32_t rows, double seconds)
{
    static const double decay = 0.98923; /* 2^(-1/DRAFT_COST_HALF_LIFE) */
    if (rows < 1 || !(seconds >= 0) || !isfinite(seconds)) return;
    double x = rows;
    c->w = c->w * decay + 1;
    c->sx = c->sx * decay + x;
    c->sy = c->sy * decay + seconds;
    c->sxx = c->sxx * decay + x * x;
    c->sxy = c->sxy * decay + x * seconds;
}

double draft_cost_knee(const struct draft_cost *c)
{
    if (c->w < DRAFT_FIT_MIN_W) return DRAFT_PRIOR_KNEE;
    double mx = c->sx / c->w, my = c->sy / c->w;
    double vxx = c->sxx / c->w - mx * mx, cxy = c->sxy / c->w - mx * my;
    if (vxx < DRAFT_FIT_MIN_VAR) return DRAFT_PRIOR_KNEE;
    double slope = cxy / vxx, t0 = my - slope * mx;
    if (!(slope > 0)) return DRAFT_PRIOR_KNEE; /* rows that cost nothing: noise, not a measurement */
    if (t0 <= 0) return 0;                     /* no fixed part: every row is paid in full */
    double knee = t0 / slope;
    return knee < DRAFT_KNEE_MAX ? knee : DRAFT_KNEE_MAX;
}

double draft_cost_share(const struct draft_cost *c, int32_t rows)
{
    double r = rows > 0 ? rows : 1;
    return r / (r + draft_cost_knee(c));
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
    return (double)s->hits / ((double)s->hits + (double)s->misses);
}

int32_t draft_len(const struct draft_cost *c, const struct draft_seq *s, int32_t rows, int32_t max)
{
    double knee = draft_cost_knee(c), p = draft_seq_p(s), pk = 1.0;
    int32_t d = 0;
    while (d < max) {
        double r = (double)rows + d;
        pk *= p;
        if (pk <= r / (r + knee)) break;
        d++;
    }
    return d;
}

int draft_check(const struct draft_cost *c, const struct draft_seq *s, struct err *e)
{
    if (c) {
        if (!isfinite(c->w) || !isfinite(c->sx) || !isfinite(c->sy) || !isfinite(c->sxx) || !isfinite(c->sxy) || c->w < 0 ||
            c->sx < 0 || c->sy < 0 || c->sxx * c->w < c->sx * c->sx * (1 - 1e-9))
            return err_set(e, "draft_check: step cost sums are inconsistent (w %g, rows %g, rows^2 %g)", c->w, c->sx, c->sxx);
    }
    if (s && (!(s->hits > 0) || !(s->misses > 0) || !isfinite(s->hits) || !isfinite(s->misses)))
        return err_set(e, "draft_check: acceptance counts %g hits, %g misses", (double)s->hits, (double)s->misses);
    return 0;
}
