/* drawer_backend.h — a test backend that draws rows itself (the op sample), around another backend (the CPU
 * one): its own arithmetic for the edits and the argmax (backend.h's contract), sampler_draw for sampled rows,
 * and it declines every third row it could draw (sending its edited logits to the host instead), as a
 * backend may. SAMPLE_HOST rows go to the host unedited. Set inner, n_vocab and smp (a sampler over the ids
 * it may draw) before use; drawer_release frees what it allocated. */
#ifndef NS_TESTS_DRAWER_BACKEND_H
#define NS_TESTS_DRAWER_BACKEND_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/sampler.h"

struct drawer {
    struct backend inner;
    sampler *smp;  /* (n_ids) for the sampled rows it draws */
    float *logits; /* (cap, n_vocab) the last step's logit rows */
    int32_t cap, n_vocab, n_logits;
    int64_t drawn, declined, host_rows; /* rows drawn, declined (edited logits back), and SAMPLE_HOST rows */
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
        d->cap = b->n_logits;
        if (!(d->logits = malloc((size_t)d->cap * (size_t)d->n_vocab * sizeof(float))))
            return err_set(e, "drawer: oom");
    }
    d->n_logits = b->n_logits;
    return d->inner.ops->forward(d->inner.ctx, b, d->logits, e);
}

static int drawer_sample(void *ctx, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens,
                         float *logits, struct err *e)
{
    struct drawer *d = ctx;
    if (n != d->n_logits) return err_set(e, "drawer: %d rows to resolve, the step had %d", (int)n, (int)d->n_logits);
    for (int32_t i = 0; i < n; i++) {
        float *l = d->logits + (size_t)i * (size_t)d->n_vocab;
        tokens[i] = -1;
        if (rows[i].mode != SAMPLE_HOST)
            for (int32_t k = 0; k < rows[i].n_edits; k++) {
                const struct logit_edit *ed = &rows[i].edits[k];
                float x = l[ed->token] + ed->add;
                if (ed->rep != 1.0f) x = x > 0.0f ? x / ed->rep : x * ed->rep;
                l[ed->token] = x - ed->sub;
            }
        if (rows[i].mode == SAMPLE_HOST || (d->drawn + d->declined) % 3 == 2) { /* declined: edited logits back */
            d->declined += rows[i].mode != SAMPLE_HOST;
            d->host_rows += rows[i].mode == SAMPLE_HOST;
            memcpy(logits + (size_t)i * (size_t)d->n_vocab, l, (size_t)d->n_vocab * sizeof(float));
            continue;
        }
        if (rows[i].mode == SAMPLE_GREEDY) {
            int32_t best = 0;
            for (int32_t t = 1; t < n_ids; t++)
                if (l[t] > l[best]) best = t;
            tokens[i] = best;
        } else { /* the host sampler's steps after the edits, from the row's filters and uniform */
            struct sampler_params p = sampler_default_params();
            p.temperature = rows[i].temperature;
            p.top_k = rows[i].top_k;
            p.top_p = rows[i].top_p;
            p.min_p = rows[i].min_p;
            tokens[i] = sampler_draw(d->smp, &p, rows[i].u, l);
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

static const struct backend_ops drawer_ops = {.name = "drawer", .load = drawer_load, .kv_alloc = drawer_kv_alloc,
                                              .forward = drawer_forward, .scratch_bytes = drawer_scratch_bytes,
                                              .free = drawer_free, .sample = drawer_sample};
/* Frees the drawer's logits and sampler and clears its counts (inner is not touched). */
static void drawer_release(struct drawer *d)
{
    free(d->logits);
    sampler_free(d->smp);
    d->logits = NULL;
    d->smp = NULL;
    d->cap = 0;
    d->drawn = d->declined = d->host_rows = 0;
}

#endif
