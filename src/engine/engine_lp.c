/* engine_lp — the engine's side of logprobs (engine/logprob.h says what they are and how the prefix cache
 * keeps prompt logprobs): which rows of a step need logits for them, filling them in after the forward,
 * the prefix-cache hits a sequence may take, and offering the cache what a step computed.
 *
 * Rows: a sequence that wants prompt logprobs has logits for every prompt row whose prediction it does not
 * hold yet (positions up to n_prompt - 2: row p predicts prompt token p + 1); they come before its sampling
 * rows (the last row, and draft rows), which predict generated tokens. On a backend whose op sample computes
 * logprobs (caps.sampling has SAMPLE_USE_LOGPROBS) a prompt row is a SAMPLE_LOGPROBS row and a sampling row
 * asks for its logprobs with its draw: only the token's logprob and its alternatives come back (eng->lp_dev),
 * computed from the raw row there. Elsewhere, and for every row the backend declines, the row comes to the
 * host unedited and logprob_fill reads it; either way the values are those of the model's raw logits.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/engine_int.h"

int eng_lp_hit_ok(void *user, const struct sched_seq *q, int32_t index, int32_t block)
{
    engine *eng = user;
    struct eng_seq *es = (struct eng_seq *)q;
    return logprob_seq_hit_ok(&es->lp, eng->lpc, q->tokens, q->n_tokens, index, block, eng->p.kv_block);
}

/* Logits room for a whole step of prompt rows (max_batch_tokens rows of n_vocab floats). */
static int full_logits(engine *eng)
{
    int32_t R = eng->p.max_batch_tokens;
    if (eng->cap_logits >= R) return 0;
    float *l = realloc(eng->logits, (size_t)R * (size_t)eng->n_vocab * sizeof *l);
    if (!l) return -1;
    eng->logits = l;
    eng->cap_logits = R;
    return 0;
}

int eng_lp_add(engine *eng, struct eng_seq *es, const struct engine_request *r)
{
    struct err e;
    es->scoring = eng_req_scoring(r);
    if ((!r->logprobs && !r->prompt_logprobs) || r->embed_pooling) return 0;
    if (logprob_seq_init(&es->lp, r->prompt, r->n_prompt, es->scoring ? 0 : r->max_tokens, r->logprobs,
                         r->prompt_logprobs, r->prompt_logprobs_from, r->top_logprobs))
        return -1;
    if (r->logprobs && !eng->lp_copy) {
        eng->lp_copy = malloc((size_t)eng->n_vocab * sizeof *eng->lp_copy);
        eng->lp_pending = malloc((size_t)(eng->p.lookup + 1) * sizeof *eng->lp_pending);
        if (!eng->lp_copy || !eng->lp_pending) return -1;
    }
    if (r->prompt_logprobs) {
        if (!eng->lpc && logprob_cache_init(eng->pool, &eng->lpc, &e)) return -1;
        if (full_logits(eng)) return -1; /* a backend may decline any row */
    }
    if ((eng->sample_caps.uses & SAMPLE_USE_LOGPROBS) && !eng->lp_dev) {
        eng->lp_dev = malloc((size_t)eng->p.max_batch_tokens * sizeof *eng->lp_dev);
        if (!eng->lp_dev) return -1;
    }
    return 0;
}

int32_t eng_lp_prompt_rows(const struct sched_entry *en, int32_t *first)
{
    const struct eng_seq *es = (const struct eng_seq *)en->seq;
    return logprob_seq_prompt_rows(&es->lp, en->pos0, en->n_rows, first);
}

void eng_lp_take_prompt(engine *eng, const struct sched_plan *pl)
{
    for (int32_t i = 0; i < pl->n_entries; i++) {
        struct eng_seq *es = (struct eng_seq *)pl->entries[i].seq;
        int32_t first;
        int32_t n = eng_lp_prompt_rows(&pl->entries[i], &first);
        for (int32_t k = 0; k < n; k++) {
            const int32_t j = eng->ent_logit0[i] + k;
            if (eng->srows[j].mode == SAMPLE_LOGPROBS && eng->drawn[j] >= 0) /* computed by the backend */
                logprob_seq_take_sample(&es->lp, first + k, &eng->lp_dev[j]);
            else
                logprob_seq_take_row(&es->lp, first + k, eng->logits + (size_t)j * (size_t)eng->n_vocab,
                                     eng->n_vocab, eng->n_sample);
        }
    }
}

int eng_lp_offer(engine *eng, const struct sched_plan *pl, struct err *e)
{
    for (int32_t i = 0; eng->lpc && i < pl->n_entries; i++) {
        struct eng_seq *es = (struct eng_seq *)pl->entries[i].seq;
        const struct sched_seq *q = &es->q;
        if (logprob_seq_offer(&es->lp, eng->lpc, q->tokens, q->blocks, q->n_registered, eng->p.kv_block))
            return err_set(e, "engine: out of memory for the prompt logprobs of cached blocks");
    }
    return 0;
}

void eng_lp_finish(struct eng_seq *es, struct engine_result *r)
{
    if (es->lp.gen) {
        r->logprobs = es->lp.out; /* (n_out == the tokens taken) */
        es->lp.out = NULL;
    }
    r->prompt_logprobs = es->lp.prompt;
    es->lp.prompt = NULL;
}
