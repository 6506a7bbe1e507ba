/* engine_check — checking a request without adding it, the engine's counters, and its sequence cap (the
 * engine's private structs: engine_int.h).
 */
#include <stdio.h>

#include "engine/engine.h"
#include "engine/engine_int.h"

int32_t engine_set_max_seqs(engine *eng, int32_t n)
{
    sched_set_seq_cap(eng->s, n);
    return sched_seq_cap(eng->s);
}

void engine_get_stats(const engine *eng, struct engine_stats *s)
{
    *s = eng->st;
    const struct sched_stats *ss = sched_get_stats(eng->s);
    s->prompt_tokens_cached = ss->tokens_cached;
    s->n_preemptions = ss->n_preemptions;
    s->kv_blocks_peak = ss->blocks_peak; /* the scheduler tracks it after each plan */
    s->kv_blocks_total = kv_n_blocks(eng->pool);
    s->kv_blocks_used = kv_n_used(eng->pool);
    s->kv_blocks_cached = kv_n_cached(eng->pool);
    s->kv_evictions = kv_n_evictions(eng->pool);
    s->n_running = sched_n_running(eng->s);
    s->n_waiting = sched_n_waiting(eng->s);
    sched_count_below(eng->s, ENGINE_PRIORITY_INTERACTIVE, &s->n_running_batch, &s->n_waiting_batch);
    if (eng->cc) {
        struct constraint_stats cs;
        constraint_cache_stats(eng->cc, &cs);
        s->constrain_masks = cs.masks_computed;
        s->constrain_mask_hits = cs.mask_hits;
    }
}

/* ---- checking a request without adding it ---- */

/* The same tests and messages as engine_add's refusals before a request enters the scheduler (kept beside
 * them: a change to one is a change to the other; tests/test_engine.c compares the two). */
enum engine_request_check engine_check_request(const engine *eng, const struct engine_request *r, char *msg,
                                               size_t cap)
{
    const struct model_hparams *hp = &eng->m->hp;
    struct err se;
    msg[0] = '\0';
    const int embed = r->embed_pooling != MODEL_POOLING_NONE;
    const int one = eng_req_no_token(r);
    if (r->n_prompt < 1 || !r->prompt) return snprintf(msg, cap, "empty prompt"), ENGINE_REQUEST_INVALID;
    if (embed && !pooling_supported(r->embed_pooling))
        return snprintf(msg, cap,
                        "embeddings: pooling type %d is not one nightshift computes (1 mean, 2 CLS, 3 last token)",
                        (int)r->embed_pooling),
               ENGINE_REQUEST_INVALID;
    if (embed && !eng->hidden_states)
        return snprintf(msg, cap, "embeddings: the %s backend does not return hidden states (use --backend cpu)",
                        eng->b->ops->name ? eng->b->ops->name : "?"), ENGINE_REQUEST_INVALID;
    if (!one && r->max_tokens < 1)
        return snprintf(msg, cap, "max_tokens %d: must be at least 1 (0 only to score a prompt: with prompt logprobs)",
                        (int)r->max_tokens), ENGINE_REQUEST_INVALID;
    if (!embed && (r->logprobs || r->prompt_logprobs) && (r->top_logprobs < 0 || r->top_logprobs > LOGPROB_MAX_TOP))
        return snprintf(msg, cap, "top_logprobs %d: must be in 0 .. %d", (int)r->top_logprobs, LOGPROB_MAX_TOP),
               ENGINE_REQUEST_INVALID;
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= eng->n_vocab)
            return snprintf(msg, cap, "prompt token %d (at %d) is outside the vocabulary (%d tokens)",
                            (int)r->prompt[i], (int)i, (int)eng->n_vocab),
                   ENGINE_REQUEST_INVALID;
    int64_t total = (int64_t)r->n_prompt + (one ? 1 : r->max_tokens);
    if (one && hp->n_ctx_train > 0 && r->n_prompt > hp->n_ctx_train)
        return snprintf(msg, cap, "%s (%d tokens) exceeds the model context of %d tokens", embed ? "input" : "prompt",
                        (int)r->n_prompt, (int)hp->n_ctx_train), ENGINE_REQUEST_TOO_LARGE;
    if (!one && hp->n_ctx_train > 0 && total > hp->n_ctx_train)
        return snprintf(msg, cap, "prompt (%d tokens) + max_tokens (%d) = %lld exceeds the model context of %d tokens",
                        (int)r->n_prompt, (int)r->max_tokens, (long long)total, (int)hp->n_ctx_train),
               ENGINE_REQUEST_TOO_LARGE;
    int64_t need_blocks = (total - 1 + eng->p.kv_block - 1) / eng->p.kv_block;
    if (need_blocks > eng->p.kv_blocks)
        return snprintf(msg, cap,
                        "prompt (%d tokens) + max_tokens (%d) needs %lld KV blocks but the whole pool has %lld (%lld "
                        "tokens): raise the KV memory budget%s",
                        (int)r->n_prompt, (int)(one ? 0 : r->max_tokens), (long long)need_blocks,
                        (long long)eng->p.kv_blocks, (long long)eng->p.kv_blocks * eng->p.kv_block,
                        one ? "" : " or lower max_tokens"),
               ENGINE_REQUEST_TOO_LARGE;
    if (r->n_stop < 0 || (r->n_stop > 0 && !r->stop))
        return snprintf(msg, cap, "bad stop string list"), ENGINE_REQUEST_INVALID;
    if (total > INT32_MAX / 2) /* sched_seq_init's bound */
        return snprintf(msg, cap, "prompt + max_tokens too large (%lld tokens)", (long long)total),
               ENGINE_REQUEST_TOO_LARGE;
    if (!embed && sampler_check_params(&r->sampling, eng->n_sample, &se))
        return snprintf(msg, cap, "sampling parameters: %s", se.msg), ENGINE_REQUEST_INVALID;
    if (r->constraint && r->constraint->kind != CONSTRAINT_NONE && !eng->v)
        return snprintf(msg, cap, "structured output needs the model's vocabulary"), ENGINE_REQUEST_INVALID;
    return ENGINE_REQUEST_OK;
}
