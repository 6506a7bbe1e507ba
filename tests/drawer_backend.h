/* drawer_backend.h — a test backend that resolves rows itself (the op sample), around another backend (the
 * CPU one): its own arithmetic for the edits and the argmax (backend.h's contract), sampler_draw for sampled
 * rows, logprob_fill on the unedited row for rows that ask for logprobs, and it declines every third row it
 * could resolve (sending its unedited logits to the host instead), as a backend may. SAMPLE_HOST rows go to
 * the host unedited. Its caps.sampling states every SAMPLE_USE_* but the mask, and those in `refuse` not
 * either. Set inner, n_vocab and smp (a sampler over the ids it may draw) before use; drawer_release frees
 * what it allocated. */
#ifndef NS_TESTS_DRAWER_BACKEND_H
#define NS_TESTS_DRAWER_BACKEND_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/logprob.h"
#include "engine/sampler.h"

struct drawer {
    struct backend inner;
    sampler *smp;  /* (n_ids) for the sampled rows it draws */
    float *logits; /* (cap, n_vocab) the last step's logit rows */
    float *work;   /* (n_vocab) a row being edited */
    int32_t cap, n_vocab, n_logits;
    uint32_t refuse;                    /* SAMPLE_USE_* bits its caps do not state */
    int64_t drawn, declined, host_rows; /* rows resolved, declined (logits back), and SAMPLE_HOST rows */
    int64_t lp_rows;                    /* rows resolved with their logprobs */
};

static int drawer_load(void *ctx, const struct model *m, struct err *e)
{
    struct drawer *d = ctx;
    d->n_vocab = m->hp.n_vocab;
    return d->inner.ops->load(d->inner.ctx, m, e);
}

static int drawer_kv_alloc(void *ctx, int32_t n, int32_t bs, enum kv_type t, struct err *e)
{
    struct drawer *d = ctx;
    return d->inner.ops->kv_alloc(d->inner.ctx, n, bs, t, e);
}

static int drawer_forward(void *ctx, const struct step_batch *b, float *logits, struct err *e)
{
    struct drawer *d = ctx;
    if (logits) return err_set(e, "drawer: forward with host logits (the engine should keep them here)");
    if (b->n_logits > d->cap) {
        free(d->logits);
        free(d->work);
        d->cap = b->n_logits;
        d->logits = malloc((size_t)d->cap * (size_t)d->n_vocab * sizeof(float));
        d->work = malloc((size_t)d->n_vocab * sizeof(float));
        if (!d->logits || !d->work) return err_set(e, "drawer: oom");
    }
    d->n_logits = b->n_logits;
    return d->inner.ops->forward(d->inner.ctx, b, d->logits, e);
}

static void drawer_caps(void *ctx, struct backend_caps *out)
{
    struct drawer *d = ctx;
    memset(out, 0, sizeof *out);
    if (d->inner.ops->caps) d->inner.ops->caps(d->inner.ctx, out);
    out->sampling =
        (struct sample_caps){.uses = (SAMPLE_USE_EDITS | SAMPLE_USE_TEMPERATURE | SAMPLE_USE_TOP_K |
                                      SAMPLE_USE_TOP_P | SAMPLE_USE_MIN_P | SAMPLE_USE_LOGPROBS) &
                                     ~d->refuse,
                             .max_top_k = 0,
                             .max_top_logprobs = SAMPLE_MAX_TOP_LOGPROBS};
}

/* The token row i resolves to (its logits l, unedited, stay as they are). */
static int32_t drawer_token(struct drawer *d, const struct sample_row *r, const float *l, int32_t n_ids)
{
    if (r->mode == SAMPLE_LOGPROBS) return r->token;
    float *w = d->work;
    memcpy(w, l, (size_t)d->n_vocab * sizeof(float));
    for (int32_t k = 0; k < r->n_edits; k++) {
        const struct logit_edit *ed = &r->edits[k];
        float x = w[ed->token] + ed->add;
        if (ed->rep != 1.0f) x = x > 0.0f ? x / ed->rep : x * ed->rep;
        w[ed->token] = x - ed->sub;
    }
    if (r->mode == SAMPLE_GREEDY) {
        int32_t best = 0;
        for (int32_t t = 1; t < n_ids; t++)
            if (w[t] > w[best]) best = t;
        return best;
    }
    struct sampler_params p =
        sampler_default_params(); /* the host sampler's steps from the row's filters and u */
    p.temperature = r->temperature;
    p.top_k = r->top_k;
    p.top_p = r->top_p;
    p.min_p = r->min_p;
    return sampler_draw(d->smp, &p, r->u, w);
}

static int drawer_sample(void *ctx, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens,
                         float *logits, struct sample_logprobs *lp, struct err *e)
{
    struct drawer *d = ctx;
    if (n != d->n_logits) return err_set(e, "drawer: %d rows to resolve, the step had %d", (int)n, (int)d->n_logits);
    for (int32_t i = 0; i < n; i++) {
        const float *l = d->logits + (size_t)i * (size_t)d->n_vocab;
        tokens[i] = -1;
        if (rows[i].mode == SAMPLE_HOST ||
            (d->drawn + d->declined) % 3 == 2) { /* declined: unedited logits back */
            d->declined += rows[i].mode != SAMPLE_HOST;
            d->host_rows += rows[i].mode == SAMPLE_HOST;
            memcpy(logits + (size_t)i * (size_t)d->n_vocab, l, (size_t)d->n_vocab * sizeof(float));
            continue;
        }
        tokens[i] = drawer_token(d, &rows[i], l, n_ids);
        if (rows[i].logprobs) {
            if (!lp)
                return err_set(e, "drawer: row %d asks for logprobs and the op has nowhere to put them",
                               (int)i);
            struct logprob_entry en;
            logprob_fill(l, d->n_vocab, n_ids, tokens[i], rows[i].top_logprobs, &en);
            lp[i].tok = (struct sample_logprob){en.token, en.logprob};
            lp[i].n_top = en.n_top;
            for (int32_t j = 0; j < en.n_top; j++)
                lp[i].top[j] = (struct sample_logprob){en.top[j].token, en.top[j].logprob};
            d->lp_rows++;
        }
        d->drawn++;
    }
    return 0;
}

static uint64_t drawer_scratch_bytes(void *ctx, int32_t max_rows)
{
    struct drawer *d = ctx;
    return d->inner.ops->scratch_bytes(d->inner.ctx, max_rows);
}

static void drawer_free(void *ctx)
{
    (void)ctx;
}

static const struct backend_ops drawer_ops = {.name = "drawer",
                                              .load = drawer_load,
                                              .kv_alloc = drawer_kv_alloc,
                                              .forward = drawer_forward,
                                              .scratch_bytes = drawer_scratch_bytes,
                                              .free = drawer_free,
                                              .caps = drawer_caps,
                                              .sample = drawer_sample};
/* Frees the drawer's logits and sampler and clears its counts (inner is not touched). */
static void drawer_release(struct drawer *d)
{
    free(d->logits);
    free(d->work);
    sampler_free(d->smp);
    d->logits = NULL;
    d->work = NULL;
    d->smp = NULL;
    d->cap = 0;
    d->drawn = d->declined = d->host_rows = d->lp_rows = 0;
}

#endif
