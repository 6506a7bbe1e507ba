/* ppl — see ppl.h for the windows and the scoring.
 *
 * Invariant of a run: window w is engine request w, whose prompt is the window (BOS at position 0 when
 * bos >= 0) and which asks for the logprobs of positions first + 1 .. ctx - 1 only; stats hold the NLLs of
 * windows 0 .. next_sum - 1 exactly, each window's in position order; the ring holds finished windows
 * next_sum .. next_add - 1 (at most n_ring), each at its index modulo n_ring.
 */
#include "runtime/ppl.h"

#include "engine/engine.h"
#include "engine/logprob.h"

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
    const struct logprob_norm nm = logprob_norm_row(logits, n_vocab);
    return -logprob_of(&nm, logits, target); /* -(a - b) is b - a exactly: the NLL of before, bit for bit */
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

/* One run: windows go to the engine as scoring requests (request id = window index), at most max_seqs * 2
 * queued or running at a time; results come back in any order and are summed in window order from the
 * ring of those that finished ahead of their turn. */
struct ppl_run {
    const struct ppl_params *p;
    struct ppl_plan plan;
    engine *eng;
    int32_t *window;               /* (ctx) the request being added */
    struct engine_result *ring;    /* (n_ring) window w's result at w % n_ring; id == UINT64_MAX: empty */
    int32_t n_ring, next_add, next_sum;
};

static void ppl_run_free(struct ppl_run *r)
{
    for (int32_t i = 0; r->ring && i < r->n_ring; i++) engine_result_free(&r->ring[i]);
    free(r->ring);
    free(r->window);
    engine_free(r->eng);
}

/* The engine for the run: every window fits at once (max_seqs of them, KV for each), no prefix cache
 * (windows share no prefix but BOS), no drafts. */
static int ppl_run_open(struct ppl_run *r, struct backend *be, const struct model *m, struct err *e)
{
    const struct ppl_params *p = r->p;
    struct engine_params ep = engine_default_params();
    int64_t seqs = p->max_batch_tokens / (p->ctx - 1) + 2;
    ep.kv_block = p->kv_block;
    ep.kv_type = p->kv_type;
    ep.max_batch_tokens = p->max_batch_tokens;
    ep.max_seqs = (int32_t)(seqs < 64 ? seqs : 64);
    ep.kv_blocks = (int64_t)ep.max_seqs * ((p->ctx + p->kv_block - 1) / p->kv_block);
    ep.prefix_cache = 0;
    ep.lookup = 0;
    if (engine_init(m, be, NULL, &ep, &r->eng, e)) return -1;
    r->n_ring = ep.max_seqs * 2;
    r->window = malloc((size_t)p->ctx * sizeof *r->window);
    r->ring = calloc((size_t)r->n_ring, sizeof *r->ring);
    if (!r->window || !r->ring) return err_set(e, "out of memory for %d windows", (int)r->n_ring);
    for (int32_t i = 0; i < r->n_ring; i++) r->ring[i].id = UINT64_MAX;
    return 0;
}

/* Queues windows while fewer than n_ring are unsummed. */
static int ppl_add_windows(struct ppl_run *r, const int32_t *text, struct err *e)
{
    const struct ppl_params *p = r->p;
    while (r->next_add < r->plan.n_windows && r->next_add - r->next_sum < r->n_ring) {
        const int64_t at = (int64_t)r->next_add * r->plan.step;
        memcpy(r->window, text + at, (size_t)p->ctx * sizeof *r->window);
        if (p->bos >= 0) r->window[0] = p->bos;
        struct engine_request rq = {.id = (uint64_t)r->next_add, .prompt = r->window, .n_prompt = p->ctx,
                                    .max_tokens = 0, .sampling = sampler_default_params(), .prompt_logprobs = 1,
                                    .prompt_logprobs_from = r->plan.first + 1};
        if (engine_add(r->eng, &rq, e)) return -1;
        r->next_add++;
    }
    return 0;
}

/* Takes finished windows into the ring, then sums those whose turn it is (in window order, position order)
 * and reports each. */
static int ppl_take_windows(struct ppl_run *r, ppl_window_fn on_window, void *user, struct ppl_stats *s,
                            struct err *e)
{
    struct engine_result res;
    while (engine_take(r->eng, &res)) {
        if (res.finish == ENGINE_FINISH_ERROR || !res.prompt_logprobs) {
            err_set(e, "window %d: %s", (int)res.id + 1, res.error ? res.error : "no logprobs (bug)");
            engine_result_free(&res);
            return -1;
        }
        r->ring[res.id % (uint64_t)r->n_ring] = res;
    }
    for (;;) {
        struct engine_result *w = &r->ring[r->next_sum % r->n_ring];
        if (w->id != (uint64_t)r->next_sum) return 0;
        for (int32_t j = r->plan.first + 1; j < r->p->ctx; j++) ppl_stats_add(s, -w->prompt_logprobs[j].logprob);
        engine_result_free(w);
        w->id = UINT64_MAX;
        if (on_window) on_window(user, r->next_sum, s);
        r->next_sum++;
    }
}

int ppl_run(struct backend *be, const struct model *m, const int32_t *tokens, int64_t n_tokens,
            const struct ppl_params *p, ppl_window_fn on_window, void *user, struct ppl_stats *out,
            struct ppl_plan *plan_out, struct err *e)
{
    struct ppl_run r = {.p = p};
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (ppl_plan(p, n_tokens, m->hp.n_ctx_train, &r.plan, e)) return -1;
    if (plan_out) *plan_out = r.plan;
    if (p->bos >= m->hp.n_vocab) return err_set(e, "BOS token %d is outside the vocabulary", (int)p->bos);
    if (ppl_run_open(&r, be, m, e)) goto done;
    while (r.next_sum < r.plan.n_windows) {
        if (ppl_add_windows(&r, tokens, e)) goto done;
        if (engine_step(r.eng, e)) {
            err_prefix(e, "window %d", (int)r.next_sum + 1);
            goto done;
        }
        if (ppl_take_windows(&r, on_window, user, out, e)) goto done;
    }
    rc = 0;
done:
    ppl_run_free(&r);
    return rc;
}
