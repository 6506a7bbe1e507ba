/* ppl — see ppl.h for the windows, the scoring and the KV layout.
 *
 * Invariant of a run (ppl_check_batch, checked on every batch before it goes to the backend): rows are
 * (window, position) pairs in order, positions 0 .. ctx - 2 of each window; a window's rows in one batch
 * are contiguous with consecutive positions and one step_seq pointing at its slot's blocks; no two windows
 * of a batch share a slot; logit rows are exactly the rows at positions first .. ctx - 2, increasing.
 */
#include "runtime/ppl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ppl_params ppl_default_params(void)
{
    return (struct ppl_params){
        .ctx = 512, .stride = 0, .bos = -1, .max_batch_tokens = 512, .kv_block = 16, .kv_type = KV_TYPE_F16};
}

int ppl_plan(const struct ppl_params *p, int64_t n_tokens, int32_t n_ctx_train, struct ppl_plan *plan, struct err *e)
{
    memset(plan, 0, sizeof *plan);
    if (p->ctx < 2) return err_set(e, "a window of %d tokens is too short (--ctx 3 at least)", (int)p->ctx);
    if (n_ctx_train > 0 && p->ctx > n_ctx_train)
        return err_set(e, "a window of %d tokens is longer than the model's context of %d (--ctx)",
                       (int)p->ctx, (int)n_ctx_train);
    if (p->stride < 0 || p->stride >= p->ctx)
        return err_set(e, "--stride %d is outside 1 .. %d (the window minus one token), or 0 for "
                          "llama.cpp's windows", (int)p->stride, (int)p->ctx - 1);
    if (p->max_batch_tokens < 1 || p->kv_block < 1)
        return err_set(e, "max_batch_tokens %d and kv_block %d must be >= 1", (int)p->max_batch_tokens,
                       (int)p->kv_block);
    if (n_tokens < p->ctx)
        return err_set(e, "the text has %lld tokens, fewer than one window of %d (give a longer text or "
                          "a smaller --ctx)", (long long)n_tokens, (int)p->ctx);
    plan->step = p->stride ? p->stride : p->ctx;
    int64_t n_windows = p->stride ? (n_tokens - p->ctx) / p->stride + 1 : n_tokens / p->ctx;
    if (n_windows > INT32_MAX)
        return err_set(e, "%lld windows are too many (give a larger --stride)", (long long)n_windows);
    plan->n_windows = (int32_t)n_windows;
    plan->first = p->stride ? p->ctx - 1 - p->stride : p->ctx / 2;
    plan->n_scored = p->ctx - 1 - plan->first;
    if (plan->n_scored < 1)
        return err_set(e, "a window of %d tokens scores none of them (--ctx 3 at least)", (int)p->ctx);
    return 0;
}

double ppl_nll(const float *logits, int32_t n_vocab, int32_t target)
{
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - (double)max);
    return log(sum) - ((double)logits[target] - (double)max);
}

void ppl_stats_add(struct ppl_stats *s, double nll)
{
    s->n++;
    s->sum += nll;
    s->sum_sq += nll * nll;
}

double ppl_stats_ppl(const struct ppl_stats *s)
{
    return s->n ? exp(s->sum / (double)s->n) : NAN;
}

double ppl_stats_err(const struct ppl_stats *s)
{
    if (s->n < 2) return 0.0;
    double mean = s->sum / (double)s->n, var = s->sum_sq / (double)s->n - mean * mean;
    return exp(mean) * sqrt((var > 0 ? var : 0) / (double)(s->n - 1));
}

/* Buffers of one run, sized for max_batch_tokens rows. */
struct ppl_run {
    const struct ppl_params *p;
    struct ppl_plan plan;
    int32_t n_vocab, n_slots, blocks_per_window;
    int32_t *block_ids;      /* (n_slots, blocks_per_window): slot s holds blocks s * bpw .. */
    int32_t *tokens, *pos, *seq, *logit_rows, *targets; /* (max_batch_tokens) */
    int32_t *row_window;     /* (max_batch_tokens) the window of each row */
    struct step_seq *seqs;   /* (n_slots) */
    float *logits;           /* (max_batch_tokens, n_vocab) */
};

static void ppl_run_free(struct ppl_run *r)
{
    free(r->block_ids);
    free(r->tokens);
    free(r->pos);
    free(r->seq);
    free(r->logit_rows);
    free(r->targets);
    free(r->row_window);
    free(r->seqs);
    free(r->logits);
}

static int ppl_run_alloc(struct ppl_run *r, struct err *e)
{
    const size_t B = (size_t)r->p->max_batch_tokens;
    r->n_slots = r->p->max_batch_tokens / (r->p->ctx - 1) + 2;
    r->blocks_per_window = (r->p->ctx + r->p->kv_block - 1) / r->p->kv_block;
    const size_t n_blocks = (size_t)r->n_slots * (size_t)r->blocks_per_window;
    r->block_ids = malloc(n_blocks * sizeof *r->block_ids);
    r->tokens = malloc(B * sizeof *r->tokens);
    r->pos = malloc(B * sizeof *r->pos);
    r->seq = malloc(B * sizeof *r->seq);
    r->logit_rows = malloc(B * sizeof *r->logit_rows);
    r->targets = malloc(B * sizeof *r->targets);
    r->row_window = malloc(B * sizeof *r->row_window);
    r->seqs = malloc((size_t)r->n_slots * sizeof *r->seqs);
    r->logits = malloc(B * (size_t)r->n_vocab * sizeof *r->logits);
    if (!r->block_ids || !r->tokens || !r->pos || !r->seq || !r->logit_rows || !r->targets || !r->row_window ||
        !r->seqs || !r->logits)
        return err_set(e, "out of memory for a batch of %zu rows over %d tokens of vocabulary", B,
                       (int)r->n_vocab);
    for (size_t i = 0; i < n_blocks; i++)
        r->block_ids[i] = (int32_t)i;
    return 0;
}

/* Fills b with the rows from (window *w, position *j) on, up to max_batch_tokens rows, and advances the
 * cursor past them. */
static void ppl_fill_batch(struct ppl_run *r, const int32_t *text, int32_t *w, int32_t *j, struct step_batch *b)
{
    const struct ppl_params *p = r->p;
    int32_t n = 0, n_logits = 0, n_seqs = 0;
    while (n < p->max_batch_tokens && *w < r->plan.n_windows) {
        if (n == 0 || r->row_window[n - 1] != *w) {
            const int32_t slot = *w % r->n_slots;
            r->seqs[n_seqs++] = (struct step_seq){r->block_ids + (size_t)slot * r->blocks_per_window,
                                                  r->blocks_per_window};
        }
        const int64_t at = (int64_t)*w * r->plan.step + *j;
        r->tokens[n] = *j == 0 && p->bos >= 0 ? p->bos : text[at];
        r->pos[n] = *j;
        r->seq[n] = n_seqs - 1;
        r->row_window[n] = *w;
        if (*j >= r->plan.first) {
            r->logit_rows[n_logits] = n;
            r->targets[n_logits++] = text[at + 1];
        }
        n++;
        if (++*j == p->ctx - 1) {
            *j = 0;
            ++*w;
        }
    }
    *b = (struct step_batch){n, r->tokens, r->pos, r->seq, n_seqs, r->seqs, n_logits, r->logit_rows, 0, NULL, NULL};
}

static int ppl_check_batch(const struct ppl_run *r, const struct step_batch *b, struct err *e)
{
    int32_t k = 0;
    for (int32_t i = 0; i < b->n_rows; i++) {
        const int new_seq = i == 0 || b->seq[i] != b->seq[i - 1];
        if ((new_seq && i > 0 && (b->seq[i] != b->seq[i - 1] + 1 || r->row_window[i] == r->row_window[i - 1])) ||
            (!new_seq && (r->row_window[i] != r->row_window[i - 1] || b->pos[i] != b->pos[i - 1] + 1)) ||
            b->pos[i] < 0 || b->pos[i] > r->p->ctx - 2)
            return err_set(e, "perplexity: internal error: batch row %d breaks the window layout", (int)i);
        if (b->pos[i] >= r->plan.first && (k >= b->n_logits || b->logit_rows[k++] != i))
            return err_set(e, "perplexity: internal error: batch row %d should have logits", (int)i);
    }
    if (k != b->n_logits || b->n_seqs > r->n_slots)
        return err_set(e, "perplexity: internal error: %d logit rows, %d sequences", (int)b->n_logits, (int)b->n_seqs);
    return 0;
}

/* Adds the batch's NLLs in row order and reports each window that ends in it. */
static void ppl_score_batch(const struct ppl_run *r, const struct step_batch *b, ppl_window_fn on_window,
                            void *user, struct ppl_stats *s)
{
    int32_t k = 0;
    for (int32_t i = 0; i < b->n_rows; i++) {
        if (k < b->n_logits && b->logit_rows[k] == i) {
            ppl_stats_add(s, ppl_nll(r->logits + (size_t)k * (size_t)r->n_vocab, r->n_vocab, r->targets[k]));
            k++;
        }
        if (b->pos[i] == r->p->ctx - 2 && on_window) on_window(user, r->row_window[i], s);
    }
}

int ppl_run(struct backend *be, const struct model *m, const int32_t *tokens, int64_t n_tokens,
            const struct ppl_params *p, ppl_window_fn on_window, void *user, struct ppl_stats *out,
            struct ppl_plan *plan_out, struct err *e)
{
    struct ppl_run r = {.p = p, .n_vocab = m->hp.n_vocab};
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (ppl_plan(p, n_tokens, m->hp.n_ctx_train, &r.plan, e)) return -1;
    if (plan_out) *plan_out = r.plan;
    if (p->bos >= m->hp.n_vocab) return err_set(e, "BOS token %d is outside the vocabulary", (int)p->bos);
    if (ppl_run_alloc(&r, e)) goto done;
    if (be->ops->kv_alloc(be->ctx, r.n_slots * r.blocks_per_window, p->kv_block, p->kv_type, e)) goto done;
    int32_t w = 0, j = 0;
    while (w < r.plan.n_windows) {
        struct step_batch b;
        const int32_t w0 = w;
        ppl_fill_batch(&r, tokens, &w, &j, &b);
        if (ppl_check_batch(&r, &b, e)) goto done;
        if (be->ops->forward(be->ctx, &b, r.logits, e)) {
            err_prefix(e, "window %d", (int)w0 + 1);
            goto done;
        }
        ppl_score_batch(&r, &b, on_window, user, out);
    }
    rc = 0;
done:
    ppl_run_free(&r);
    return rc;
}
