/* engine_int — the engine's private structs, shared by its files: engine.c (the step loop), engine_check.c
 * (request checks and stats) and engine_lp.c (logprobs). Nothing outside src/engine/ includes it.
 */
#ifndef NS_ENGINE_INT_H
#define NS_ENGINE_INT_H

#include "engine/draft.h"
#include "engine/engine.h"
#include "engine/kvpool.h"
#include "engine/logprob.h"
#include "engine/lookup.h"
#include "engine/pooling.h"
#include "engine/sched.h"

#define ENG_PROBE_EVERY 8        /* steps between probes of a sequence that does not draft (wants_proposal) */
#define ENG_PROBE_MAX 128        /* ... at most, after probes that missed at once */
#define ENG_MAX_DRAFT_LOGITS 128 /* draft rows with logits per step, beyond max_seqs (reserve_logits) */

struct eng_seq {
    struct sched_seq q; /* first member: a sched_seq pointer from the scheduler is an eng_seq pointer */
    constraint *cons;   /* structured output (acquired from eng->cc), or NULL */
    struct constraint_state cstate; /* after the tokens generated so far */
    struct sampler_params sampling; /* logit_bias points into bias */
    struct logit_bias *bias;        /* (sampling.n_logit_bias) owned copy */
    char **stop;        /* (n_stop) owned copies */
    int32_t n_stop;
    size_t released;    /* text before this offset holds no stop string nor the start of one */
    int ignore_eos;
    char *text;         /* (text_cap) complete UTF-8 so far */
    size_t text_len, text_cap;
    struct tok_utf8 utf8;
    double t_added, t_first;
    lookup *ix;             /* n-gram index of its tokens (lookup on; built at its first proposal) */
    struct draft_seq acc;   /* how often its drafts are accepted */
    int32_t probe_in;       /* steps until its next probe (a proposal only scored, not verified) */
    int32_t probe_every;    /* ENG_PROBE_EVERY, doubled (to ENG_PROBE_MAX) each time a probe misses at once */
    int32_t *shadow;        /* (lookup) proposed tokens it did not verify, scored against the tokens it draws */
    int32_t n_shadow, i_shadow; /* shadow[i_shadow .. n_shadow) are still to be scored */
    struct pooling_acc emb;  /* an embedding request's pooled rows so far (emb.sum NULL: a completion) */
    struct logprob_seq lp;   /* its logprobs (nothing allocated when it asked for none) */
    int scoring;             /* max_tokens 0: prompt logprobs only; finishes after its prompt, sampling nothing */
    struct eng_seq *live_prev, *live_next;
};

/* What a step gives a sequence that samples in it. */
struct eng_verdict {
    int32_t n_keep; /* tokens it takes: its accepted drafts, then the token drawn after them, cut at its end */
    int32_t last;   /* the last of those (the others are already in its tokens, as draft rows) */
    int finish;     /* -1: it goes on; else the enum engine_finish it ends with */
    int failed;     /* 1: its constraint allows no token: it fails alone after the commit, taking nothing */
};

struct engine {
    const struct model *m;
    struct backend *b;
    const tok_vocab *v;
    struct engine_params p;
    int32_t n_vocab;  /* logits per row: the model's token_embd rows */
    int32_t n_sample; /* ids a sampler draws from: the tokenizer's tokens when fewer (padding rows of
                         token_embd beyond the vocabulary are never sampled) */
    kv_pool *pool;
    sched *s;
    /* step batch buffers */
    int32_t *row_tokens, *row_pos, *row_seq, *logit_rows; /* (max_batch_tokens) */
    struct step_seq *step_seqs;                           /* (max_seqs) */
    float *logits;                                        /* (cap_logits, n_vocab) */
    int32_t cap_logits;   /* max_seqs, grown when drafts need more logit rows (reserve_logits) */
    /* draws on the backend (its op sample; engine_params.device_sampling) */
    struct sample_row *srows;                             /* (max_logits) how each logit row is resolved */
    int32_t *drawn;                                       /* (max_logits) its token, or -1: logits on the host */
    struct logit_edit *edits;                             /* (cap_edits) the srows' edits */
    size_t cap_edits;
    struct sample_caps sample_caps; /* what the backend's op sample expresses (caps) */
    struct sample_logprobs *lp_dev; /* (max_batch_tokens) logprobs the backend computed per logit row: at the
                                       first request for logprobs, when sample_caps has SAMPLE_USE_LOGPROBS */
    struct eng_verdict *verdicts;                         /* (max_seqs) per plan entry */
    float *hidden;        /* (max_batch_tokens, n_embd) a step's hidden rows: at the first embedding request */
    int32_t *hidden_rows; /* (max_batch_tokens) */
    int hidden_states;    /* the backend's caps.hidden_states */
    int32_t *draft;                                       /* (lookup) a proposal */
    int32_t *ent_draft;                                   /* (max_seqs) draft tokens planned per plan entry */
    int32_t step_drafts;                                  /* draft rows of the step being run */
    double step_proposing;                                /* its seconds planning drafts (proposals) */
    struct draft_cost cost;                               /* forward seconds against rows */
    struct draft_yield yield;                             /* seconds a kept token, steps with drafts and without */
    sampler *smp;                                         /* scratch for one draw at a time */
    constraint_cache *cc;                                 /* compiled constraints and masks (on first use) */
    constraint **pf_cons;                                 /* (max_seqs) the step's constrained sequences ... */
    const struct constraint_state **pf_states;            /* (max_seqs) ... and their states (mask prefetch) */
    struct eng_seq *live;                                 /* all sequences in the scheduler */
    /* logprobs (engine_lp.c) */
    int32_t *ent_logit0;  /* (max_seqs) per plan entry: its first logit row in the step ... */
    int32_t *ent_n_plp;   /* (max_seqs) ... and how many of its logit rows (first) give prompt logprobs */
    logprob_cache *lpc;   /* prompt logprobs of cached blocks: at the first request for prompt logprobs */
    float *lp_copy;       /* (n_vocab) a row the sampler edits while its logprobs read the original */
    struct logprob_entry *lp_pending; /* (1 + lookup) entries of a sequence's rows in one step */
    struct engine_result *done;                           /* FIFO [done_head, n_done) */
    size_t n_done, done_head, cap_done;
    struct engine_stats st;
};

/* ---- engine_lp.c: logprobs ---- */

/* sched_params.hit_ok: a sequence that wants prompt logprobs takes a cached block only when they are known
 * for the positions it covers (logprob_seq_hit_ok). */
int eng_lp_hit_ok(void *user, const struct sched_seq *q, int32_t index, int32_t block);
/* A scoring request: prompt logprobs and no token to generate (not an embedding). */
static inline int eng_req_scoring(const struct engine_request *r)
{
    return r->prompt_logprobs && r->max_tokens == 0 && !r->embed_pooling;
}
/* A request that generates no token (an embedding or a scoring request): it needs the KV of its prompt only,
 * as a completion of one token would. */
static inline int eng_req_no_token(const struct engine_request *r)
{
    return r->embed_pooling || eng_req_scoring(r);
}

/* Sets up es's logprobs for request r (and the engine for prompt logprobs: full logits rows for a step, the
 * cache). -1 on out of memory. */
int eng_lp_add(engine *eng, struct eng_seq *es, const struct engine_request *r);
/* The prompt rows of entry en that give logprobs: *first and the count (logprob_seq_prompt_rows). */
int32_t eng_lp_prompt_rows(const struct sched_entry *en, int32_t *first);
/* After the forward: each entry's prompt logprob rows (from eng->lp_dev where the backend computed them, else
 * the logits in eng->logits at eng->ent_logit0) into its sequence. */
void eng_lp_take_prompt(engine *eng, const struct sched_plan *pl);
/* After the commit: offers the cache the prompt logprobs of blocks just registered. -1 on out of memory. */
int eng_lp_offer(engine *eng, const struct sched_plan *pl, struct err *e);
/* Moves es's logprobs into result r. */
void eng_lp_finish(struct eng_seq *es, struct engine_result *r);

#endif
