/* engine — the step loop: scheduler plan -> step batch -> backend forward -> sampling -> finish checks.
 *
 * Invariant: every request added is in exactly one place: the scheduler (waiting or running, listed in
 * eng->live) or the finished-results FIFO (after its sequence is freed). The text of a request is exactly
 * the UTF-8-complete detokenization of its generated tokens (control tokens render as nothing), cut at
 * the first stop string. A request's tokens depend only on its prompt, params and seed: a draw is a pure
 * function of (the request's params, its own tokens so far, its own logits row, seed, position in the
 * generation) — see sampler.h — so the one sampler scratch is shared by every sequence and no sampling
 * state belongs to a request: queued requests hold only their params, and preemption has nothing to save
 * or rebuild (the recomputed KV is bit-identical on the CPU backend, so nothing changes). A constrained
 * request's automaton state (constrain/constraint.h) is kept with it, but it too is a function of its
 * generated tokens alone (checked by replaying them under debug_checks), so it survives preemption as is.
 * Drafts (prompt lookup) follow from the same property: a step samples every position of a sequence's
 * rows in order, each from its own logits row with the history before it, and stops at the first draft
 * token the sampler disagrees with; everything before that is what the step-by-step run would have drawn,
 * and nothing after it is kept (rejected rows are never committed: sched_accept/sched_commit). The end of a
 * request (EOS, a stop string, max_tokens) is decided token by token in the same order, so a request that
 * ends inside an accepted draft drops the tokens after its end, as if they had never been drawn.
 * With params.debug_checks the scheduler and pool invariants (sched_check) and the sampler scratch's
 * (sampler_check) run after every step.
 */
#include "engine/engine.h"
#include "engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"
#include "engine/kvpool.h"
#include "engine/lookup.h"
#include "engine/pooling.h"
#include "engine/sched.h"
#include "engine/stop.h"
#include "util/clock.h"
#include "util/log.h"

/* The most logit rows a step can have: one per sequence, and ENG_MAX_DRAFT_LOGITS draft rows (reserve_logits). */
static int32_t max_logits(const engine *eng)
{
    int32_t most = eng->p.max_seqs + ENG_MAX_DRAFT_LOGITS;
    return most < eng->p.max_batch_tokens ? most : eng->p.max_batch_tokens;
}

int engine_init(const struct model *m, struct backend *b, const tok_vocab *v, const struct engine_params *p,
                engine **out, struct err *e)
{
    *out = NULL;
    if (engine_check_params(p, e)) return err_prefix(e, "engine");
    if (m->hp.n_vocab < 1) return err_set(e, "engine: model has no vocabulary");
    engine *eng = calloc(1, sizeof *eng);
    if (!eng) return err_set(e, "engine: out of memory");
    eng->m = m;
    eng->b = b;
    eng->v = v;
    eng->p = *p;
    if (eng->p.max_seqs > eng->p.max_batch_tokens) eng->p.max_seqs = eng->p.max_batch_tokens;
    eng->n_vocab = m->hp.n_vocab;
    eng->n_sample = v && tok_n_vocab(v) > 0 && tok_n_vocab(v) < eng->n_vocab ? tok_n_vocab(v) : eng->n_vocab;
    int32_t R = eng->p.max_batch_tokens, S = eng->p.max_seqs;
    eng->row_tokens = malloc((size_t)R * sizeof(int32_t));
    eng->row_pos = malloc((size_t)R * sizeof(int32_t));
    eng->row_seq = malloc((size_t)R * sizeof(int32_t));
    eng->logit_rows = malloc((size_t)R * sizeof(int32_t));
    eng->step_seqs = malloc((size_t)S * sizeof *eng->step_seqs);
    eng->logits = malloc((size_t)S * (size_t)eng->n_vocab * sizeof(float));
    eng->cap_logits = S;
    eng->verdicts = malloc((size_t)S * sizeof *eng->verdicts);
    /* (R) rather than max_logits: every row may have logits (prompt logprobs: engine_lp.c) */
    eng->srows = malloc((size_t)R * sizeof *eng->srows);
    eng->drawn = malloc((size_t)R * sizeof *eng->drawn);
    eng->ent_logit0 = malloc((size_t)S * sizeof *eng->ent_logit0);
    eng->ent_n_plp = malloc((size_t)S * sizeof *eng->ent_n_plp);
    eng->draft = malloc((size_t)(eng->p.lookup > 0 ? eng->p.lookup : 1) * sizeof *eng->draft);
    eng->ent_draft = malloc((size_t)S * sizeof *eng->ent_draft);
    eng->yield = (struct draft_yield){0};
    if (!eng->row_tokens || !eng->row_pos || !eng->row_seq || !eng->logit_rows || !eng->step_seqs || !eng->logits ||
        !eng->verdicts || !eng->draft || !eng->ent_draft || !eng->srows || !eng->drawn || !eng->ent_logit0 ||
        !eng->ent_n_plp) {
        err_set(e, "engine: out of memory for step buffers (%d rows, %d x %d logits)", (int)R, (int)S,
                (int)eng->n_vocab);
        goto fail;
    }
    if (sampler_init(eng->n_sample, &eng->smp, e)) goto fail;
    if (kv_pool_init((int32_t)eng->p.kv_blocks, eng->p.kv_block, &eng->pool, e)) goto fail;
    struct sched_params sp = {.max_batch_tokens = R, .max_seqs = S, .prefix_cache = eng->p.prefix_cache,
                              .hit_ok = eng_lp_hit_ok, .hit_user = eng};
    if (sched_init(&sp, eng->pool, &eng->s, e)) goto fail;
    if (b->ops->kv_alloc(b->ctx, (int32_t)eng->p.kv_blocks, eng->p.kv_block, eng->p.kv_type, e)) {
        err_prefix(e, "engine: KV pool of %lld blocks", (long long)eng->p.kv_blocks);
        goto fail;
    }
    eng->st.kv_blocks_total = eng->p.kv_blocks;
    struct backend_caps caps = {0};
    if (b->ops->caps) b->ops->caps(b->ctx, &caps);
    eng->hidden_states = caps.hidden_states;
    if (b->ops->sample) eng->sample_caps = caps.sampling;
    draft_cost_init(&eng->cost, caps.step_knee_rows);
    *out = eng;
    return 0;
fail:
    engine_free(eng);
    return -1;
}

static void seq_free(engine *eng, struct eng_seq *es)
{
    if (!es) return;
    constraint_release(eng->cc, es->cons);
    constraint_state_free(&es->cstate);
    sched_seq_release(&es->q);
    free(es->bias);
    for (int32_t i = 0; i < es->n_stop; i++) free(es->stop[i]);
    free(es->stop);
    free(es->text);
    lookup_free(es->ix);
    free(es->shadow);
    pooling_free(&es->emb);
    logprob_seq_free(&es->lp);
    free(es);
}

static void live_unlink(engine *eng, struct eng_seq *es)
{
    if (es->live_prev) es->live_prev->live_next = es->live_next;
    else eng->live = es->live_next;
    if (es->live_next) es->live_next->live_prev = es->live_prev;
    es->live_prev = es->live_next = NULL;
}

void engine_free(engine *eng)
{
    if (!eng) return;
    while (eng->live) {
        struct eng_seq *es = eng->live;
        if (eng->s) sched_remove(eng->s, &es->q);
        live_unlink(eng, es);
        seq_free(eng, es);
    }
    constraint_cache_free(eng->cc);
    free(eng->pf_cons);
    free(eng->pf_states);
    for (size_t i = eng->done_head; i < eng->n_done; i++) engine_result_free(&eng->done[i]);
    free(eng->done);
    sched_free(eng->s);
    kv_pool_free(eng->pool);
    free(eng->row_tokens);
    free(eng->row_pos);
    free(eng->row_seq);
    free(eng->logit_rows);
    free(eng->step_seqs);
    free(eng->logits);
    free(eng->verdicts);
    free(eng->lp_dev);
    free(eng->hidden);
    free(eng->hidden_rows);
    free(eng->draft);
    free(eng->srows);
    free(eng->drawn);
    free(eng->edits);
    free(eng->ent_draft);
    free(eng->ent_logit0);
    free(eng->ent_n_plp);
    free(eng->lp_copy);
    free(eng->lp_pending);
    logprob_cache_free(eng->lpc);
    sampler_free(eng->smp);
    free(eng);
}

/* ---- results ---- */

static struct engine_result *push_result(engine *eng)
{
    if (eng->n_done == eng->cap_done) {
        if (eng->done_head > 0) { /* compact */
            memmove(eng->done, eng->done + eng->done_head, (eng->n_done - eng->done_head) * sizeof *eng->done);
            eng->n_done -= eng->done_head;
            eng->done_head = 0;
        }
        if (eng->n_done == eng->cap_done) {
            size_t cap = eng->cap_done ? eng->cap_done * 2 : 64;
            struct engine_result *d = realloc(eng->done, cap * sizeof *d);
            if (!d) return NULL;
            eng->done = d;
            eng->cap_done = cap;
        }
    }
    struct engine_result *r = &eng->done[eng->n_done++];
    memset(r, 0, sizeof *r);
    return r;
}

/* Finishes a request that never entered the scheduler. */
static int fail_request(engine *eng, const struct engine_request *req, const char *msg, struct err *e)
{
    struct engine_result *r = push_result(eng);
    char *text = malloc(1);
    char *err = strdup(msg);
    if (!r || !text || !err) {
        if (r) eng->n_done--;
        free(text);
        free(err);
        return err_set(e, "engine: out of memory");
    }
    text[0] = '\0';
    r->id = req->id;
    r->finish = ENGINE_FINISH_ERROR;
    r->text = text;
    r->error = err;
    r->n_prompt = req->n_prompt > 0 ? req->n_prompt : 0;
    r->t_added = r->t_finished = clock_now();
    return 0;
}

/* Moves a sequence out of the scheduler into the results FIFO and frees it. */
static int finish_seq(engine *eng, struct eng_seq *es, enum engine_finish why, struct err *e)
{
    struct sched_seq *q = &es->q;
    struct engine_result *r = push_result(eng);
    if (!r) return err_set(e, "engine: out of memory for a result");
    int32_t n_gen = q->n_tokens - q->n_prompt;
    r->id = q->id;
    r->finish = why;
    r->tokens = malloc((size_t)(n_gen > 0 ? n_gen : 1) * sizeof *r->tokens);
    if (!r->tokens) {
        eng->n_done--;
        return err_set(e, "engine: out of memory for a result");
    }
    memcpy(r->tokens, q->tokens + q->n_prompt, (size_t)n_gen * sizeof *r->tokens);
    r->n_tokens = n_gen;
    if (es->emb.sum && why == ENGINE_FINISH_STOP) {
        r->embedding = malloc((size_t)es->emb.n_embd * sizeof *r->embedding);
        if (!r->embedding || pooling_finish(&es->emb, r->embedding)) {
            free(r->tokens);
            free(r->embedding);
            eng->n_done--;
            return err_set(e, "engine: out of memory for an embedding (or no row pooled: bug)");
        }
        r->n_embedding = es->emb.n_embd;
    }
    eng_lp_finish(es, r);
    r->text = es->text; /* ownership moves to the result */
    r->text_len = es->text_len;
    r->text[r->text_len] = '\0';
    es->text = NULL;
    r->n_prompt = q->n_prompt;
    r->n_prompt_cached = q->n_prompt_cached;
    r->n_preempted = q->n_preempted;
    r->t_added = es->t_added;
    r->t_first_token = es->t_first;
    r->t_finished = clock_now();
    sched_remove(eng->s, q);
    live_unlink(eng, es);
    seq_free(eng, es);
    return 0;
}

int engine_take(engine *eng, struct engine_result *out)
{
    if (eng->done_head == eng->n_done) return 0;
    *out = eng->done[eng->done_head++];
    if (eng->done_head == eng->n_done) eng->done_head = eng->n_done = 0;
    return 1;
}

void engine_result_free(struct engine_result *r)
{
    if (!r) return;
    free(r->tokens);
    free(r->text);
    free(r->error);
    free(r->embedding);
    free(r->logprobs);
    free(r->prompt_logprobs);
    memset(r, 0, sizeof *r);
}

/* ---- adding ---- */

static int text_reserve(struct eng_seq *es, size_t extra)
{
    size_t need = es->text_len + extra + 1;
    if (need <= es->text_cap) return 0;
    size_t cap = es->text_cap ? es->text_cap : 64;
    while (cap < need) cap *= 2;
    char *t = realloc(es->text, cap);
    if (!t) return -1;
    es->text = t;
    es->text_cap = cap;
    return 0;
}

/* Appends the bytes the UTF-8 decoder still holds (end of the completion). */
static void text_flush(struct eng_seq *es)
{
    if (text_reserve(es, sizeof es->utf8.pending) == 0)
        es->text_len += tok_utf8_flush(&es->utf8, es->text + es->text_len, es->text_cap - es->text_len - 1);
}

/* Compiles (or finds compiled) r's constraint and starts es's automaton state. 1 with msg set when the
 * request fails alone (its constraint does not compile), -1 on out of memory. */
static int seq_constrain(engine *eng, struct eng_seq *es, const struct engine_request *r, char *msg, size_t cap,
                         struct err *e)
{
    if (!r->constraint || r->constraint->kind == CONSTRAINT_NONE) return 0;
    if (!eng->v) {
        snprintf(msg, cap, "structured output needs the model's vocabulary");
        return 1;
    }
    if (!eng->cc) {
        eng->pf_cons = malloc((size_t)eng->p.max_seqs * sizeof *eng->pf_cons);
        eng->pf_states = malloc((size_t)eng->p.max_seqs * sizeof *eng->pf_states);
        if (!eng->pf_cons || !eng->pf_states) return err_set(e, "engine: out of memory");
        if (constraint_cache_init(eng->v, eng->n_sample, 0, &eng->cc, e)) return err_prefix(e, "engine");
    }
    double t0 = clock_now();
    struct err ce;
    int rc = 0;
    if (constraint_acquire(eng->cc, r->constraint, &es->cons, &ce)) {
        snprintf(msg, cap, "%s", ce.msg);
        rc = 1;
    } else if (constraint_state_start(eng->cc, es->cons, &es->cstate, e)) {
        rc = err_prefix(e, "engine");
    }
    eng->st.t_constrain += clock_now() - t0;
    return rc;
}

/* Makes es an embedding request pooled by pooling (and the engine ready for hidden rows). */
static int seq_embed(engine *eng, struct eng_seq *es, int32_t pooling)
{
    size_t R = (size_t)eng->p.max_batch_tokens;
    if (!eng->hidden) eng->hidden = malloc(R * (size_t)eng->m->hp.n_embd * sizeof *eng->hidden);
    if (!eng->hidden_rows) eng->hidden_rows = malloc(R * sizeof *eng->hidden_rows);
    es->q.no_prefix_cache = 1;
    return !eng->hidden || !eng->hidden_rows || pooling_init(&es->emb, pooling, eng->m->hp.n_embd) ? -1 : 0;
}

int engine_add(engine *eng, const struct engine_request *r, struct err *e)
{
    char msg[ERR_MSG_MAX + 64];
    if (engine_check_request(eng, r, msg, sizeof msg) != ENGINE_REQUEST_OK) return fail_request(eng, r, msg, e);

    struct eng_seq *es = calloc(1, sizeof *es);
    if (!es) return err_set(e, "engine: out of memory");
    struct err se;
    const int one = eng_req_no_token(r);
    if (sched_seq_init(&es->q, r->id, r->prompt, r->n_prompt, one ? 1 : r->max_tokens, eng->p.kv_block, &se)) {
        free(es);
        return fail_request(eng, r, se.msg, e);
    }
    if (r->embed_pooling && seq_embed(eng, es, r->embed_pooling)) goto oom;
    if (eng_lp_add(eng, es, r)) goto oom;
    int crc = seq_constrain(eng, es, r, msg, sizeof msg, e);
    if (crc) {
        seq_free(eng, es);
        return crc < 0 ? -1 : fail_request(eng, r, msg, e);
    }
    es->sampling = r->sampling;
    es->sampling.logit_bias = NULL;
    if (r->sampling.n_logit_bias > 0) {
        size_t nb = (size_t)r->sampling.n_logit_bias * sizeof *es->bias;
        es->bias = malloc(nb);
        if (!es->bias) goto oom;
        memcpy(es->bias, r->sampling.logit_bias, nb);
        es->sampling.logit_bias = es->bias;
    }
    if (r->n_stop > 0) {
        es->stop = calloc((size_t)r->n_stop, sizeof *es->stop);
        if (!es->stop) goto oom;
        for (int32_t i = 0; i < r->n_stop; i++) {
            const char *s = r->stop[i] ? r->stop[i] : "";
            if (!*s) continue; /* an empty stop string never matches */
            es->stop[es->n_stop] = strdup(s);
            if (!es->stop[es->n_stop]) goto oom;
            es->n_stop++;
        }
    }
    if (text_reserve(es, 64)) goto oom;
    es->ignore_eos = r->ignore_eos;
    draft_seq_init(&es->acc);
    es->probe_in = 1;
    es->probe_every = ENG_PROBE_EVERY;
    es->t_added = clock_now();
    es->live_next = eng->live;
    if (eng->live) eng->live->live_prev = es;
    eng->live = es;
    sched_seq_set_priority(&es->q, r->priority);
    sched_add(eng->s, &es->q);
    return 0;
oom:
    seq_free(eng, es);
    return err_set(e, "engine: out of memory adding request %llu", (unsigned long long)r->id);
}

int engine_has_work(const engine *eng)
{
    return eng->live != NULL;
}

int engine_peek_text(const engine *eng, uint64_t id, const char **text, size_t *len)
{
    const struct sched_seq *q = sched_find(eng->s, id);
    if (!q) return -1;
    const struct eng_seq *es = (const struct eng_seq *)q;
    *text = es->text;
    *len = es->n_stop ? es->released : es->text_len; /* without stop strings nothing is held back */
    return 0;
}

int engine_cancel(engine *eng, uint64_t id)
{
    struct sched_seq *q = sched_find(eng->s, id);
    if (!q) return -1;
    struct eng_seq *es = (struct eng_seq *)q;
    text_flush(es);
    return finish_seq(eng, es, ENGINE_FINISH_CANCELLED, NULL) ? -1 : 0;
}

/* ---- stepping ---- */

/* Appends the text of a generated token; returns 1 if a stop string now appears (text cut before it). */
static int feed_text(engine *eng, struct eng_seq *es, int32_t token)
{
    if (!eng->v) return 0;
    char buf[256];
    char *bytes = buf;
    int n = tok_token_bytes(eng->v, token, 0, buf, sizeof buf);
    if (n <= 0) return 0;
    if ((size_t)n > sizeof buf) {
        bytes = malloc((size_t)n);
        if (!bytes) return 0;
        tok_token_bytes(eng->v, token, 0, bytes, (size_t)n);
    }
    size_t old = es->text_len;
    if (text_reserve(es, (size_t)n + sizeof es->utf8.pending) == 0)
        es->text_len +=
            tok_utf8_feed(&es->utf8, bytes, (size_t)n, es->text + es->text_len, es->text_cap - es->text_len - 1);
    if (bytes != buf) free(bytes);
    if (!es->n_stop || es->text_len == old) return 0;
    size_t release;
    if (stop_scan(es->text, es->text_len, es->released, (const char *const *)es->stop, es->n_stop, &release)) {
        es->text_len = release; /* the completion ends before the stop string */
        return 1;
    }
    es->released = release;
    return 0;
}

/* 1 if entry en samples after this step: it reaches the end of its sequence's tokens, and its request is a
 * completion (an embedding request's last chunk pools instead; a scoring request's ends it). */
static int samples(const struct sched_entry *en)
{
    const struct eng_seq *es = (const struct eng_seq *)en->seq;
    return en->logits && !es->emb.sum && !es->scoring;
}

/* Starts computing, on the constraint cache's worker, the masks that this step's constrained sequences
 * will sample with and that the cache does not hold yet: they are computed while the forward runs. */
static int prefetch_masks(engine *eng, const struct sched_plan *pl, struct err *e)
{
    int32_t n = 0;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        struct eng_seq *es = (struct eng_seq *)pl->entries[i].seq;
        if (!samples(&pl->entries[i]) || !es->cons) continue;
        eng->pf_cons[n] = es->cons;
        eng->pf_states[n++] = &es->cstate;
    }
    double t0 = clock_now();
    int rc = n ? constraint_prefetch_start(eng->cc, n, eng->pf_cons, eng->pf_states, e) : 0;
    eng->st.t_constrain += clock_now() - t0;
    return rc;
}

/* Finishes a running request that failed alone, with msg as its error. */
static int fail_seq(engine *eng, struct eng_seq *es, const char *msg, struct err *e)
{
    char *copy = strdup(msg);
    if (!copy) return err_set(e, "engine: out of memory");
    text_flush(es);
    if (finish_seq(eng, es, ENGINE_FINISH_ERROR, e)) {
        free(copy);
        return -1;
    }
    eng->done[eng->n_done - 1].error = copy;
    return 0;
}

/* Masks es's logits row with its constraint: 0, or 1 when no token is allowed (the request then fails alone,
 * after the step's commit), -1 on error. */
static int constrain_logits(engine *eng, struct eng_seq *es, float *logits, struct err *e)
{
    double t0 = clock_now();
    const uint32_t *mask;
    if (constraint_mask(eng->cc, es->cons, &es->cstate, &mask, e)) return err_prefix(e, "engine");
    int32_t allowed = constraint_apply_mask(mask, logits, eng->n_sample);
    eng->st.t_constrain += clock_now() - t0;
    return allowed ? 0 : 1;
}

/* Advances es's constraint state by the token just drawn (allowed by the mask). */
static int constrain_advance(engine *eng, struct eng_seq *es, int32_t tok, struct err *e)
{
    double t0 = clock_now();
    int rc = constraint_advance(eng->cc, es->cons, &es->cstate, tok, e);
    eng->st.t_constrain += clock_now() - t0;
    if (rc > 0) return err_set(e, "engine: drew token %d that the constraint does not allow (bug)", (int)tok);
    return rc;
}

/* Debug check: every constrained sequence's state is the one its generated tokens give from the start
 * (what makes the state need no saving across preemption), and the constraint cache's invariant. */
static int check_constraints(engine *eng, struct err *e)
{
    if (!eng->cc) return 0;
    if (constraint_cache_check(eng->cc, e)) return -1;
    for (struct eng_seq *es = eng->live; es; es = es->live_next) {
        if (!es->cons) continue;
        struct constraint_state st;
        const struct sched_seq *q = &es->q;
        int rc = constraint_state_start(eng->cc, es->cons, &st, e);
        for (int32_t i = q->n_prompt; !rc && i < q->n_tokens; i++)
            if (constraint_advance(eng->cc, es->cons, &st, q->tokens[i], e)) rc = err_set(e, "token %d refused", i);
        if (!rc && (st.len != es->cstate.len || memcmp(st.bytes, es->cstate.bytes, st.len) ||
                    st.accept != es->cstate.accept || st.complete != es->cstate.complete))
            rc = err_set(e, "the state differs from the replay of its %d tokens", (int)(q->n_tokens - q->n_prompt));
        constraint_state_free(&st);
        if (rc) return err_prefix(e, "constraint of request %llu", (unsigned long long)q->id);
    }
    return 0;
}

/* Takes tok as the request's n_gen-th generated token: its text, then whether the request ends there.
 * Returns -1 if it goes on, else the enum engine_finish it ends with (its text then complete). */
static int take_token(engine *eng, struct eng_seq *es, int32_t tok, int32_t n_gen)
{
    /* a constrained request ends at an end-of-generation token (allowed only where it is complete) even
     * with ignore_eos, and as soon as its structure is finished (nothing can follow) */
    int eog = eng->v && (!es->ignore_eos || es->cons) && tok_is_eog(eng->v, tok);
    int stopped = !eog && feed_text(eng, es, tok);
    int complete = es->cons && es->cstate.complete;
    int length = n_gen >= es->q.max_tokens;
    if (!eog && !stopped && !complete && !length) return -1;
    if (!stopped) text_flush(es);
    return eog || stopped || complete ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH;
}

/* Room for n logit rows; the rows there are when it cannot grow (out of memory, or at its cap: draft rows
 * beyond ENG_MAX_DRAFT_LOGITS in one step are not worth (n_vocab floats) of host memory each; steps that
 * large are compute-bound, where drafts hardly pay). */
static int32_t reserve_logits(engine *eng, int32_t n)
{
    if (n <= eng->cap_logits) return n;
    int32_t cap = eng->cap_logits * 2 > n ? eng->cap_logits * 2 : n, most = max_logits(eng);
    if (cap > most) cap = most;
    if (cap <= eng->cap_logits) return eng->cap_logits;
    float *l = realloc(eng->logits, (size_t)cap * (size_t)eng->n_vocab * sizeof *l);
    if (!l) return eng->cap_logits;
    eng->logits = l;
    eng->cap_logits = cap;
    return n < cap ? n : cap;
}

/* Proposes a draft for es into eng->draft (lookup tokens at most): the tokens that followed the last
 * earlier occurrence of its last 1-3 tokens. Returns how many (0: none, or out of memory for the index). */
static int32_t propose(engine *eng, struct eng_seq *es)
{
    struct sched_seq *q = &es->q;
    if (!es->ix && !(es->ix = lookup_new())) return 0;
    if (!es->shadow && !(es->shadow = malloc((size_t)eng->p.lookup * sizeof *es->shadow))) return 0;
    eng->st.proposals++;
    if (lookup_update(es->ix, q->tokens, q->n_tokens)) return 0;
    return lookup_propose(es->ix, q->tokens, q->n_tokens, eng->p.lookup, eng->draft, NULL);
}

/* 1 if es proposes a draft this step: always when every proposal is verified; else, in a step that may
 * verify drafts (verify), when even one draft token could pay; else, while no shadow is being scored, when
 * its probe is due (that proposal is only scored against the tokens it draws, keeping its acceptance current
 * at no cost in rows). Probes back off while their first token misses: proposing means bringing the
 * sequence's index up to date, whose cache misses add up over many sequences and cheap steps. */
static int wants_proposal(engine *eng, struct eng_seq *es, double knee, int32_t rows, double value, int verify)
{
    if (!eng->p.lookup_adaptive || (verify && draft_len(knee, &es->acc, rows, &value, 1) > 0)) return 1;
    if (es->i_shadow < es->n_shadow || --es->probe_in > 0) return 0;
    es->probe_in = es->probe_every;
    return 1;
}

/* Plans the drafts of the plan's entries that sample (oldest first) into eng->ent_draft: each sequence's
 * proposal (kept whole as its shadow), cut to what draft_len finds worth verifying in a step of the rows
 * planned so far, drafts included (value: the tokens they yield, a planned row 1, a draft row its chance of
 * acceptance). verify 0: the step verifies none, only probes propose. Returns the draft rows planned. */
static int32_t choose_drafts(engine *eng, const struct sched_plan *pl, int verify)
{
    int32_t n_logits = 0, n_draft = 0;
    double value = pl->n_rows, knee = draft_cost_knee(&eng->cost);
    for (int32_t i = 0; i < pl->n_entries; i++) n_logits += samples(&pl->entries[i]);
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        struct eng_seq *es = (struct eng_seq *)en->seq;
        eng->ent_draft[i] = 0;
        /* a constrained sequence drafts nothing: each draft row would need its own position's mask */
        if (!samples(en) || es->cons || !wants_proposal(eng, es, knee, pl->n_rows + n_draft, value, verify)) continue;
        int32_t n_prop = propose(eng, es);
        es->i_shadow = 0;
        es->n_shadow = n_prop;
        if (n_prop == 0) continue;
        memcpy(es->shadow, eng->draft, (size_t)n_prop * sizeof *es->shadow);
        double before = value;
        int32_t k = eng->p.lookup_adaptive ? draft_len(knee, &es->acc, pl->n_rows + n_draft, &value, n_prop) : n_prop;
        k = reserve_logits(eng, n_logits + k) - n_logits;
        if (k < 0) k = 0;
        eng->ent_draft[i] = k;
        n_logits += k;
        n_draft += k;
        value = before + draft_expected(&es->acc, k);
    }
    return n_draft;
}

/* Adds the planned draft rows to the plan's entries, unless steps with drafts have been yielding tokens at a
 * higher cost than steps without (draft_yield_allows; every proposal is verified with --lookup-always); a
 * sequence's shadow is then what follows its verified drafts. Otherwise the step verifies none and only the
 * sequences' probes propose, their proposals shadows scored against the tokens drawn at no cost in rows (so
 * the sequences' acceptance stays current while the step rule holds drafting back). Times the proposing
 * (eng->step_proposing). */
static void plan_drafts(engine *eng, const struct sched_plan *pl)
{
    const int verify = !eng->p.lookup_adaptive || draft_yield_allows(&eng->yield);
    const double t0 = clock_now();
    const int32_t n_draft = choose_drafts(eng, pl, verify);
    eng->step_proposing = clock_now() - t0;
    eng->st.draft_held_steps += !verify;
    if (!verify || n_draft == 0) return;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        if (eng->ent_draft[i] == 0) continue;
        struct eng_seq *es = (struct eng_seq *)pl->entries[i].seq;
        int32_t got = sched_draft(eng->s, i, es->shadow, eng->ent_draft[i]);
        eng->step_drafts += got;
        es->n_shadow -= got;
        memmove(es->shadow, es->shadow + got, (size_t)es->n_shadow * sizeof *es->shadow);
    }
}

/* Scores the shadow against tok, the token the sequence drew after its verified drafts (a rejected draft
 * drops the shadow: it followed tokens the sequence does not have). A match is an accepted draft token
 * that cost no row; a mismatch a rejected one, and the end of the shadow. */
static void score_shadow(struct eng_seq *es, int32_t tok, int rejected)
{
    if (es->i_shadow == es->n_shadow) return;
    int hit = !rejected && es->shadow[es->i_shadow] == tok;
    if (!rejected) draft_seq_observe(&es->acc, hit, !hit);
    if (es->i_shadow == 0)
        es->probe_every = hit                                   ? ENG_PROBE_EVERY
                          : es->probe_every * 2 > ENG_PROBE_MAX ? ENG_PROBE_MAX
                                                                : es->probe_every * 2;
    es->i_shadow = hit ? es->i_shadow + 1 : es->n_shadow;
}

/* The step batch of the plan: every entry's rows in order; logits for the rows that sample (a sequence's
 * last token and its draft rows) and the prompt rows whose logprobs a sequence wants (engine_lp.c); hidden
 * states for the rows an embedding request pools (whose pooled sum
 * restarts with a chunk at position 0: after a preemption it computes its prompt again). */
static struct step_batch build_batch(engine *eng, const struct sched_plan *pl)
{
    int32_t n_rows = 0, n_logits = 0, n_hidden = 0;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        const struct sched_seq *q = en->seq;
        struct pooling_acc *emb = &((struct eng_seq *)en->seq)->emb;
        const int sample = samples(en);
        eng->step_seqs[i] = (struct step_seq){.block_table = q->blocks, .n_blocks = q->n_blocks};
        if (emb->sum && en->pos0 == 0) pooling_reset(emb);
        int32_t lp0, n_lp = eng_lp_prompt_rows(en, &lp0); /* prompt logprob rows, before its sampling rows */
        eng->ent_logit0[i] = n_logits;
        eng->ent_n_plp[i] = n_lp;
        for (int32_t k = 0; k < en->n_rows; k++) {
            int32_t pos = en->pos0 + k;
            eng->row_tokens[n_rows] = q->tokens[pos]; /* draft tokens follow the sequence's own */
            eng->row_pos[n_rows] = pos;
            eng->row_seq[n_rows] = i;
            if (pos < q->n_prompt) eng->st.prompt_tokens_computed++;
            if ((pos >= lp0 && pos < lp0 + n_lp) || (sample && k >= en->n_rows - 1 - en->n_draft))
                eng->logit_rows[n_logits++] = n_rows;
            if (emb->sum && pooling_wants_row(emb->pooling, pos, q->n_prompt)) eng->hidden_rows[n_hidden++] = n_rows;
            n_rows++;
        }
    }
    return (struct step_batch){
        .n_rows = n_rows,
        .tokens = eng->row_tokens,
        .pos = eng->row_pos,
        .seq = eng->row_seq,
        .n_seqs = pl->n_entries,
        .seqs = eng->step_seqs,
        .n_logits = n_logits,
        .logit_rows = eng->logit_rows,
        .n_hidden = n_hidden,
        .hidden_rows = eng->hidden_rows,
        .hidden = eng->hidden,
    };
}

/* After the forward of b: each embedding entry's hidden rows (in b's order, which is the entries' and their
 * positions') go into its pooled sum. */
static void pool_rows(engine *eng, const struct sched_plan *pl, const struct step_batch *b)
{
    const int64_t n_embd = eng->m->hp.n_embd;
    for (int32_t i = 0, j = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        struct pooling_acc *emb = &((struct eng_seq *)en->seq)->emb;
        for (int32_t k = 0; emb->sum && k < en->n_rows; k++)
            if (pooling_wants_row(emb->pooling, en->pos0 + k, en->seq->n_prompt) && j < b->n_hidden)
                pooling_add(emb, b->hidden + (int64_t)j++ * n_embd);
    }
}

/* Samples entry en's positions in order from its logits rows (1 + n_draft of them; a row's token is drawn[a]
 * when the backend drew it, with its logprobs in lp_dev[a] when it was asked for them; else its logits are
 * there, unedited): the token after the sequence's last, then one more after each draft token the sampler
 * drew too. Fills v with what the sequence keeps: the accepted drafts and the token drawn after them, cut
 * where the request ends. */
static int verify_entry(engine *eng, const struct sched_entry *en, float *logits, const int32_t *drawn,
                        const struct sample_logprobs *lp_dev, struct eng_verdict *v, struct err *e)
{
    struct eng_seq *es = (struct eng_seq *)en->seq;
    struct sched_seq *q = &es->q;
    const int32_t *draft = q->tokens + q->n_tokens;
    int32_t g0 = q->n_tokens - q->n_prompt, a = 0, tok;
    const size_t row_bytes = (size_t)eng->n_vocab * sizeof *logits;
    int copied = 0; /* with logprobs, the sampler edits a copy of each row (eng->lp_copy), they read the row */
    v->failed = 0;
    if (es->cons) { /* constrained sequences verify no drafts (plan_drafts): one masked draw, on the host */
        if (es->lp.gen) memcpy(eng->lp_copy, logits, row_bytes);
        copied = es->lp.gen;
        int rc = constrain_logits(eng, es, copied ? eng->lp_copy : logits, e);
        if (rc < 0) return -1;
        if (rc > 0) { /* no token can continue: it fails alone after the commit, taking nothing */
            v->failed = 1;
            v->n_keep = 1;
            return 0;
        }
    }
    for (;;) { /* history: the prompt, the generated tokens, the drafts accepted so far */
        float *row = logits + (size_t)a * (size_t)eng->n_vocab, *draw = row;
        if (drawn[a] >= 0) {
            tok = drawn[a];
            if (es->lp.gen) logprob_from_sample(&lp_dev[a], &eng->lp_pending[a]); /* asked with the draw */
        } else {
            if (es->lp.gen) {
                if (!copied) memcpy(eng->lp_copy, row, row_bytes);
                copied = 0;
                draw = eng->lp_copy;
            }
            tok = sampler_sample(eng->smp, &es->sampling, q->tokens, q->n_prompt, g0 + a, draw);
            if (tok < 0) return err_set(e, "engine: out of memory for the sampler's edits");
            if (es->lp.gen)
                logprob_fill(row, eng->n_vocab, eng->n_sample, tok, es->lp.n_top, &eng->lp_pending[a]);
        }
        if (a == en->n_draft || tok != draft[a]) break;
        a++;
    }
    eng->st.seq_steps++;
    if (en->n_draft > 0) {
        eng->st.n_drafts++;
        eng->st.draft_tokens += en->n_draft;
        eng->st.draft_accepted += a;
        draft_seq_observe(&es->acc, a, a < en->n_draft);
    }
    score_shadow(es, tok, a < en->n_draft);
    if (es->cons && constrain_advance(eng, es, tok, e)) return -1;
    v->finish = -1;
    for (int32_t d = 0; d <= a && v->finish < 0; d++) {
        v->last = d < a ? draft[d] : tok;
        v->n_keep = d + 1;
        if (es->lp.gen) logprob_seq_push(&es->lp, &eng->lp_pending[d]);
        v->finish = take_token(eng, es, v->last, g0 + d + 1);
    }
    return 0;
}

/* After the commit: appends the token drawn after the accepted drafts (those are tokens already) and
 * finishes the request if it ended. */
static int settle_entry(engine *eng, const struct sched_entry *en, const struct eng_verdict *v, struct err *e)
{
    struct eng_seq *es = (struct eng_seq *)en->seq;
    if (v->failed)
        return fail_seq(eng, es, "structured output: no token of the vocabulary can continue the output here", e);
    sched_seq_append(&es->q, v->last);
    eng->st.gen_tokens += v->n_keep;
    if (es->t_first == 0) es->t_first = clock_now();
    return v->finish < 0 ? 0 : finish_seq(eng, es, (enum engine_finish)v->finish, e);
}

/* A host draw for each of the step's n logit rows. */
static int no_draws(engine *eng, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        eng->drawn[i] = -1;
        eng->srows[i].mode = SAMPLE_HOST;
    }
    return 0;
}

/* 1 if the backend's op sample expresses every draw of es (engine->sample_caps: every SAMPLE_USE_* its
 * params, its logprobs and its constraint need, within the limits); else its rows come to the host. */
static int device_draws(const engine *eng, const struct eng_seq *es)
{
    const struct sample_caps *c = &eng->sample_caps;
    const uint32_t uses = sampler_uses(&es->sampling) | (es->cons ? SAMPLE_USE_MASK : 0u) |
                          (es->lp.gen ? SAMPLE_USE_LOGPROBS : 0u);
    if (uses & ~c->uses) return 0;
    if ((uses & SAMPLE_USE_TOP_K) && c->max_top_k > 0 && es->sampling.top_k > c->max_top_k) return 0;
    return !es->lp.gen || es->lp.n_top <= c->max_top_logprobs;
}

/* The prompt logprob rows of es: on the backend (SAMPLE_LOGPROBS) when it computes logprobs of as many
 * alternatives, else as logits to the host. */
static int device_prompt_logprobs(const engine *eng, const struct eng_seq *es)
{
    const struct sample_caps *c = &eng->sample_caps;
    return (c->uses & SAMPLE_USE_LOGPROBS) && es->lp.n_top <= c->max_top_logprobs;
}

/* How the backend resolves each logit row of the plan: a prompt logprob row gets its logprobs there (the
 * logprob of the prompt's next token); a sampling row of a sequence whose draws the backend expresses
 * (device_draws) is drawn there (greedy, or sampled with the request's filters and the draw's uniform), after
 * its bias and penalties (sampler_edits, with the history up to the row: drafts before it included), with its
 * logprobs when it wants them; every other row comes back as logits (a constrained one: its mask is applied
 * here). Then the backend's sample op fills eng->drawn (and eng->logits, eng->lp_dev). */
static int draw_on_backend(engine *eng, const struct sched_plan *pl, int32_t n_logits, struct err *e)
{
    size_t need = 0;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct eng_seq *es = (const struct eng_seq *)pl->entries[i].seq;
        if (samples(&pl->entries[i]) && device_draws(eng, es))
            for (int32_t a = 0; a <= pl->entries[i].n_draft; a++)
                need += (size_t)sampler_max_edits(&es->sampling, es->q.n_prompt, es->q.n_tokens - es->q.n_prompt + a);
    }
    if (need > eng->cap_edits) {
        struct logit_edit *ed = realloc(eng->edits, need * sizeof *ed);
        if (!ed) return err_set(e, "engine: out of memory for %zu logit edits", need);
        eng->edits = ed;
        eng->cap_edits = need;
    }
    size_t used = 0;
    for (int32_t i = 0; i < pl->n_entries; i++) {
        const struct sched_entry *en = &pl->entries[i];
        const struct eng_seq *es = (const struct eng_seq *)en->seq;
        int32_t j = eng->ent_logit0[i], first;
        eng_lp_prompt_rows(en, &first);
        const int plp = eng->ent_n_plp[i] > 0 && device_prompt_logprobs(eng, es);
        for (int32_t k = 0; k < eng->ent_n_plp[i];
             k++) /* prompt logprob rows: row first + k predicts the next */
            eng->srows[j++] = plp ? (struct sample_row){.mode = SAMPLE_LOGPROBS,
                                                        .logprobs = 1,
                                                        .top_logprobs = es->lp.n_top,
                                                        .token = es->q.tokens[first + k + 1]}
                                  : (struct sample_row){.mode = SAMPLE_HOST};
        if (!samples(en)) continue;
        const int dev = device_draws(eng, es);
        for (int32_t a = 0; a <= en->n_draft; a++, j++) {
            struct sample_row *r = &eng->srows[j];
            const struct sampler_params *sp = &es->sampling;
            const int32_t pos = es->q.n_tokens - es->q.n_prompt + a;
            *r = (struct sample_row){.mode = SAMPLE_HOST};
            if (!dev) continue;
            r->mode = sp->temperature > 0.0f ? SAMPLE_DRAW : SAMPLE_GREEDY;
            r->edits = eng->edits + used;
            r->n_edits = sampler_edits(eng->smp, sp, es->q.tokens, es->q.n_prompt, pos, eng->edits + used);
            r->temperature = sp->temperature;
            r->top_k = sp->top_k;
            r->top_p = sp->top_p;
            r->min_p = sp->min_p;
            r->u = sampler_uniform(sp->seed, pos);
            r->logprobs = es->lp.gen;
            r->top_logprobs = es->lp.n_top;
            used += (size_t)r->n_edits;
        }
    }
    return eng->b->ops->sample(eng->b->ctx, eng->srows, n_logits, eng->n_sample, eng->drawn, eng->logits,
                               eng->lp_dev, e);
}

/* Debug checks after a step: scheduler and pool, sampler scratch, constraint states, step cost, every index
 * and acceptance. */
static int check_step(engine *eng, struct err *e)
{
    if (sched_check(eng->s, e) || sampler_check(eng->smp, e) || check_constraints(eng, e) ||
        draft_check(&eng->cost, NULL, e) || draft_yield_check(&eng->yield, e))
        return -1;
    for (const struct eng_seq *es = eng->live; es; es = es->live_next)
        if ((es->ix && lookup_check(es->ix, es->q.tokens, e)) || draft_check(NULL, &es->acc, e))
            return err_prefix(e, "request %llu", (unsigned long long)es->q.id);
    return 0;
}

int engine_step(engine *eng, struct err *e)
{
    if (!eng->live) return 0;
    const double t_step = clock_now();
    const struct sched_plan *pl = sched_schedule(eng->s);
    if (pl->n_entries == 0)
        return err_set(e, "engine: the scheduler planned nothing with %d running and %d waiting (bug)",
                       (int)sched_n_running(eng->s), (int)sched_n_waiting(eng->s));
    eng->step_drafts = 0;
    eng->step_proposing = 0;
    if (eng->p.lookup > 0) plan_drafts(eng, pl);
    struct step_batch batch = build_batch(eng, pl);
    if (eng->cc && prefetch_masks(eng, pl, e)) return err_prefix(e, "engine step");
    double t0 = clock_now();
    eng->st.t_plan += t0 - t_step;
    const int on_backend = eng->p.device_sampling && eng->b->ops->sample;
    int frc = eng->b->ops->forward(eng->b->ctx, &batch, on_backend ? NULL : eng->logits, e);
    if (!frc && batch.n_logits > 0)
        frc = on_backend ? draw_on_backend(eng, pl, batch.n_logits, e) : no_draws(eng, batch.n_logits);
    double dt = clock_now() - t0;
    eng->st.t_forward += dt;
    if (eng->cc) { /* the masks computed during the forward go into the cache */
        struct err pe;
        double t1 = clock_now();
        int prc = constraint_prefetch_finish(eng->cc, &pe);
        eng->st.t_constrain += clock_now() - t1;
        if (prc && !frc) return err_set(e, "engine step: %s", pe.msg);
    }
    if (frc) return err_prefix(e, "engine step");
    if (batch.n_hidden > 0) pool_rows(eng, pl, &batch);
    if (batch.n_logits > 0) eng_lp_take_prompt(eng, pl);
    eng->st.rows_computed += batch.n_rows;
    /* the steps the draft rule learns from: those whose rows all sample (the steps drafts join), less any
     * that paid a one-off cost; timed whole, from planning to settling (building, verifying and committing
     * rows and proposing drafts are host work the forward's time does not show; with a small model on a
     * fast device it is most of a step) */
    const int timed = eng->p.lookup > 0 && batch.n_logits == batch.n_rows &&
                      !(eng->b->ops->step_one_off && eng->b->ops->step_one_off(eng->b->ctx));
    /* verify, then commit only what the sequences keep */
    int32_t n_entries = pl->n_entries, n_kept = 0;
    const struct sched_entry *ents = pl->entries;
    for (int32_t i = 0; i < n_entries; i++) {
        if (!samples(&ents[i])) continue;
        const int32_t j = eng->ent_logit0[i] + eng->ent_n_plp[i]; /* its sampling rows */
        if (verify_entry(eng, &ents[i], eng->logits + (size_t)j * (size_t)eng->n_vocab, eng->drawn + j,
                         eng->lp_dev ? eng->lp_dev + j : NULL, &eng->verdicts[i], e))
            return err_prefix(e, "engine step");
        sched_accept(eng->s, i, eng->verdicts[i].n_keep - 1);
        n_kept += eng->verdicts[i].n_keep;
    }
    sched_commit(eng->s);
    if (eng_lp_offer(eng, pl, e)) return -1;
    /* Settling may finish (and free) sequences; the plan's pointers are not used after their entry. An
     * embedding request whose last chunk ran is finished (its embedding pooled), and so is a scoring request
     * (its prompt logprobs taken). */
    for (int32_t i = 0; i < n_entries; i++) {
        struct eng_seq *es = (struct eng_seq *)ents[i].seq;
        const int sample = samples(&ents[i]); /* read before settling, which may free the sequence */
        if (sample && settle_entry(eng, &ents[i], &eng->verdicts[i], e)) return -1;
        if (!sample && ents[i].logits &&
            finish_seq(eng, es, es->scoring ? ENGINE_FINISH_LENGTH : ENGINE_FINISH_STOP, e))
            return -1;
    }
    const double t_end = clock_now();
    eng->st.t_settle += t_end - t0 - dt;
    if (timed) {
        const double t = t_end - t_step;
        draft_cost_add(&eng->cost, batch.n_rows, t);
        const int drafted = eng->step_drafts > 0;
        draft_yield_add(&eng->yield, t, eng->step_proposing, n_kept, drafted);
        eng->st.timed_steps[drafted]++;
        eng->st.timed_tokens[drafted] += n_kept;
        eng->st.t_timed[drafted] += drafted ? t : t - eng->step_proposing; /* as draft_yield_add counts them */
    }
    eng->st.draft_steps += eng->step_drafts > 0;
    eng->st.n_steps++;
    if (eng->p.debug_checks && check_step(eng, e)) return err_prefix(e, "engine step %lld", (long long)eng->st.n_steps);
    return 0;
}
