/* engine — continuous batching over a paged KV cache with a prefix cache. No I/O at all.
 *
 * The caller adds requests (prompt token ids + sampling params), calls engine_step() until
 * engine_has_work() is false, and takes finished results with engine_take(). Each step builds one step
 * batch: decode rows of running sequences first, then prefill chunks of waiting requests in queue order,
 * within max_batch_tokens and max_seqs. See DESIGN.md "The engine's core ideas".
 *
 * Invariant (CPU backend): a request's result depends only on (model, prompt, params, seed) — not on what
 * else is running, max_seqs, preemption or prefix-cache hits. Sampling is position-keyed (sampler.h): the
 * draw for a request's k-th generated token depends on (seed, k) and its own history only, so no RNG
 * stream or penalty table belongs to a request; the engine owns one O(n_vocab) sampler scratch.
 *
 * Structured output (constrain/constraint.h): a constrained request's logits row is masked before the draw
 * (tokens the constraint does not allow get -inf; end-of-generation tokens only where it accepts), and its
 * automaton state is advanced by the token drawn, so the state is a function of the tokens generated so
 * far, like the draw. The request finishes (ENGINE_FINISH_STOP) as soon as nothing more can follow, or at
 * an end-of-generation token (even with ignore_eos); max_tokens reached first gives ENGINE_FINISH_LENGTH.
 * Each distinct constraint is compiled once per engine; masks are cached per automaton state, and the masks
 * a step will need that are not cached yet are computed on the constraint cache's worker thread while the
 * forward step runs (constraint_prefetch_start / _finish around backend forward).
 * Prompt-lookup decoding (params.lookup > 0): a sequence about to sample may propose up to `lookup` draft
 * tokens, copied from where its last 1-3 tokens occurred before in its prompt or output (lookup.h), and
 * verify them as extra rows of the same step: the sampler draws at each position as it would have without
 * drafts, and the sequence keeps the drafts it agrees with plus the first token it draws differently. So
 * results are the same with lookup on or off, bit for bit on the CPU backend; only the number of steps
 * changes. How many drafts a sequence verifies is decided per step (draft.h): none when the step is
 * compute-bound or its drafts are seldom accepted.
 * Logprobs (engine/logprob.h): a request may ask for its generated tokens' logprobs, its prompt tokens'
 * (echo, scoring), or both; they are the model's raw log-softmax of each token's row, computed where the
 * logits are when the backend's op sample states it can (caps.sampling), else on the host from the unedited
 * row, so they too are a function of the request alone. Prompt logprobs are kept with the prefix cache's
 * blocks, so a prompt served from the cache still gets them; a block whose logprobs are not known is not
 * taken from the cache by a request that needs them (sched_params.hit_ok). A scoring request (max_tokens 0)
 * finishes once its prompt is computed.
 */
#ifndef NS_ENGINE_H
#define NS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "constrain/constraint.h"
#include "engine/logprob.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/err.h"

/* Valid values (engine_init rejects others with a message): those of engine_param_table below (ranges and
 * defaults of every field a caller sets), and kv_blocks >= 1 with kv_blocks * kv_block <= 2^31 - 1.
 * max_seqs above max_batch_tokens is lowered to max_batch_tokens (every running sequence must be able to
 * decode in one step). */
#define ENGINE_MAX_LOOKUP 64
#define ENGINE_DEFAULT_LOOKUP 8
struct engine_params {
    int32_t kv_block;         /* tokens per KV block (default 16) */
    int64_t kv_blocks;        /* pool size in blocks; computed by the caller from a memory budget
                                 (engine_kv_blocks_for_budget) */
    enum kv_type kv_type;     /* default KV_TYPE_F16 */
    int32_t max_batch_tokens; /* rows per step (default 512; the runtime uses the backend's
                                 backend_caps.default_max_batch_tokens) */
    int32_t max_seqs;         /* running sequences at once (default 64) */
    int prefix_cache;         /* 1 = on (default) */
    int32_t lookup;           /* prompt-lookup decoding: draft tokens a sequence may verify per step, 0 = off
                                 (default ENGINE_DEFAULT_LOOKUP) */
    int lookup_adaptive;      /* 1 (default): verify as many as pay off (draft.h); 0: every token proposed
                                 (measuring acceptance against the draft length; tests) */
    int device_sampling;      /* 1 (default): where the backend can draw (its op sample), a row whose sampling
                                 and logprobs it expresses (caps.sampling) is resolved there and only its token
                                 (and logprobs) come back; 0: every logit row comes to the host */
    int debug_checks;         /* 1: run the pool and scheduler invariant checks after every step (tests;
                                 O(kv_blocks * kv_block) per step). Default 0. */
};

/* The parameters as data: one row per field of struct engine_params that a caller sets (kv_blocks, computed
 * from a budget, is checked on its own). engine_default_params and engine_check_params walk it, and the
 * runtime's flags (runtime/runparam) take their ranges and defaults from it: a new engine parameter is a
 * field and a row. Every field a row describes is 32 bits (int32_t, int or enum kv_type). */
enum engine_param_type {
    ENGINE_PARAM_INT,    /* in [lo, hi] (a power of two too with ENGINE_PARAM_POW2) */
    ENGINE_PARAM_BOOL,   /* 0 or 1 (not checked) */
    ENGINE_PARAM_KV_TYPE /* an enum kv_type that model_kv_type_name names */
};
#define ENGINE_PARAM_POW2 1u
struct engine_param {
    const char *name; /* the field's name, as messages and the run record say it */
    enum engine_param_type type;
    int32_t lo, hi, def;
    unsigned flags;
    size_t offset; /* offsetof(struct engine_params, the field) */
};
extern const struct engine_param engine_param_table[];
extern const int engine_param_count;
/* The row called name ("max_seqs"), or NULL. */
const struct engine_param *engine_param_find(const char *name);
int32_t engine_param_get(const struct engine_params *p, const struct engine_param *row);
void engine_param_set(struct engine_params *p, const struct engine_param *row, int32_t v);
/* 0 if v is valid for row; else fails naming it ("max_seqs 0: must be in [1, 4096]"). */
int engine_param_check(const struct engine_param *row, int32_t v, struct err *e);

struct engine_params engine_default_params(void);
/* 0 if p holds valid values (above); else fails naming the first one that is not. */
int engine_check_params(const struct engine_params *p, struct err *e);

/* Pool size in blocks for a KV memory budget in bytes (0 if the budget holds less than one block). */
int64_t engine_kv_blocks_for_budget(const struct model_hparams *hp, enum kv_type t, int32_t kv_block,
                                    uint64_t kv_bytes);

enum engine_finish {
    ENGINE_FINISH_STOP,   /* EOS/EOT or a stop string */
    ENGINE_FINISH_LENGTH, /* max_tokens reached */
    ENGINE_FINISH_ERROR,  /* failed alone (e.g. can never fit); see engine_result.error */
    ENGINE_FINISH_CANCELLED
};

/* Request priorities (engine_request.priority): the scheduler admits waiting requests of a higher priority
 * first and, when it must preempt for memory, preempts lower-priority ones first (sched.h). Any int32 is
 * valid; these are the two a server uses. */
#define ENGINE_PRIORITY_BATCH 0       /* the default (a zeroed request): `run`, and the server's batches */
#define ENGINE_PRIORITY_INTERACTIVE 1 /* the server's own HTTP requests */

struct engine_request {
    uint64_t id;                /* caller's handle, echoed in the result */
    int32_t priority;           /* ENGINE_PRIORITY_*: higher is admitted first (default 0: batch) */
    const int32_t *prompt;      /* (n_prompt) copied */
    int32_t n_prompt;
    int32_t max_tokens;         /* generated tokens at most (>= 1; 0 for a scoring request: prompt_logprobs) */
    struct sampler_params sampling; /* its logit_bias list is copied */
    const char *const *stop;    /* (n_stop) stop strings, copied; matched on detokenized text */
    int32_t n_stop;
    int ignore_eos;             /* 1: EOS/EOT do not stop (benchmarks) */
    const struct constraint_spec *constraint; /* structured output, or NULL / kind NONE; compiled (or found
                                                 compiled) by engine_add, which does not keep the pointer */
    int logprobs;               /* 1: the result carries each generated token's logprob (engine/logprob.h:
                                   the model's raw log-softmax, before bias, penalties, temperature and
                                   masks) with top_logprobs alternatives */
    int prompt_logprobs;        /* 1: the result carries each prompt token's logprob too (the first's is NAN),
                                   served from the prefix cache where it holds them; with max_tokens 0 the
                                   request only scores its prompt (no token is generated; it finishes with
                                   ENGINE_FINISH_LENGTH) */
    int32_t prompt_logprobs_from; /* with prompt_logprobs: positions before it get no logprob (NAN) and need no
                                     logits (perplexity's context half); 0 or 1: every position */
    int32_t top_logprobs;       /* alternatives per token, 0 .. LOGPROB_MAX_TOP (with logprobs or
                                   prompt_logprobs) */
    int32_t embed_pooling;      /* 0 (MODEL_POOLING_NONE): a completion. Else an embedding request pooled this way
                                   (enum model_pooling; engine/pooling.h): the prompt is prefilled only (no
                                   logits, no sampling: max_tokens, sampling, stop, ignore_eos, constraint are
                                   ignored), never looked up nor registered in the prefix cache (every row's
                                   hidden state is computed; no KV outlives it), and its result carries the
                                   L2-normalised embedding. Needs a backend with caps.hidden_states. */
};

struct engine_result {
    uint64_t id;
    enum engine_finish finish;
    int32_t *tokens;  /* (n_tokens) generated ids, malloc'd; includes the EOS/EOT that stopped it */
    int32_t n_tokens;
    char *text;       /* detokenized completion, stop string removed; malloc'd, NUL-terminated */
    size_t text_len;
    char *error;      /* malloc'd message when finish == ENGINE_FINISH_ERROR, else NULL */
    int32_t n_prompt;
    int32_t n_prompt_cached; /* prompt tokens served from the prefix cache at its first admission */
    int32_t n_preempted;     /* times this request was preempted */
    double t_added, t_first_token, t_finished; /* clock_now() seconds */
    float *embedding;        /* (n_embedding = n_embd) an embedding request's, malloc'd; else NULL, 0 */
    int32_t n_embedding;
    struct logprob_entry *logprobs;        /* (n_tokens) with request.logprobs, malloc'd; else NULL */
    struct logprob_entry *prompt_logprobs; /* (n_prompt) with request.prompt_logprobs, malloc'd; else NULL */
};

struct engine_stats {
    int64_t n_steps;
    int64_t prompt_tokens_computed; /* rows run at prompt positions (recomputation after preemption included) */
    int64_t prompt_tokens_cached;   /* prompt positions served from the prefix cache (at every admission,
                                       resumes after preemption included) */
    int64_t gen_tokens;
    int64_t n_preemptions;
    int64_t kv_blocks_total;
    int64_t kv_blocks_used;         /* now: referenced by running sequences */
    int64_t kv_blocks_peak;
    int32_t n_running, n_waiting;
    int32_t n_running_batch, n_waiting_batch; /* of those, requests below ENGINE_PRIORITY_INTERACTIVE */
    double t_forward;               /* seconds inside backend forward */
    double t_plan;                  /* seconds planning steps (schedule, drafts, the step batch) */
    double t_settle;                /* seconds after the forwards (verify, commit, settle the sequences) */
    int64_t kv_blocks_cached;       /* now: refcount-0 blocks kept by the prefix cache (evictable) */
    int64_t kv_evictions;           /* cached blocks evicted to make room */
    int64_t rows_computed;          /* all rows run (prompt, generated, recomputed, drafts) */
    int64_t seq_steps;              /* times a sequence sampled in a step (it took 1 + accepted drafts tokens):
                                       gen_tokens / seq_steps is the tokens a sequence gains per step */
    int64_t draft_tokens;           /* draft tokens verified (prompt lookup: rows after a sequence's tokens) */
    int64_t draft_accepted;         /* of those, accepted by the sampler (acceptance rate = / draft_tokens) */
    int64_t n_drafts;               /* sequence-steps that verified a draft (mean accepted length =
                                       draft_accepted / n_drafts) */
    int64_t proposals;              /* times a sequence's lookup index was brought up to date and asked */
    int64_t draft_steps;            /* steps that verified drafts */
    int64_t draft_held_steps;       /* steps the draft rule held back (draft.h, yield): only probes proposed */
    int64_t timed_steps[2];         /* the steps the draft rule learned from, [0] without drafts, [1] with: */
    int64_t timed_tokens[2];        /*   tokens they kept */
    double t_timed[2];              /*   their seconds (whole steps; without drafts, less the proposing) */
    double t_constrain;             /* seconds masking logits and advancing constraint states (on the
                                       engine's thread: masks computed during the forward are not in it) */
    int64_t constrain_masks;        /* masks computed (the rest came from the cache) */
    int64_t constrain_mask_hits;
};

typedef struct engine engine;

/* model, backend and vocab must outlive the engine. Allocates the KV pool on the backend. */
int engine_init(const struct model *m, struct backend *b, const tok_vocab *v, const struct engine_params *p,
                engine **out, struct err *e);
void engine_free(engine *eng);

/* Queues a request (everything is copied). A request that can never fit (prompt + max_tokens over the
 * context or the whole pool) is not an error here: it finishes with ENGINE_FINISH_ERROR and a message. */
int engine_add(engine *eng, const struct engine_request *r, struct err *e);

/* What engine_add would say about r, without queueing it: ENGINE_REQUEST_OK, or why it would finish r with
 * ENGINE_FINISH_ERROR at once (msg, cap bytes: the message its result would carry). TOO_LARGE: prompt +
 * max_tokens over the model's context or the whole KV pool (no run of this engine can compute it);
 * INVALID: anything else (an empty prompt, a token outside the vocabulary, sampling parameters the sampler
 * refuses, an embedding request with a pooling type it does not compute or on a backend without hidden
 * states). For an embedding request the size is the prompt's alone. Callers that read requests up front
 * (jobs/ingest) refuse them with the engine's own arithmetic, so that no request they accept fails for good
 * here. A constraint that does not compile is not checked
 * (compiling is engine_add's work). O(n_prompt). */
enum engine_request_check { ENGINE_REQUEST_OK, ENGINE_REQUEST_INVALID, ENGINE_REQUEST_TOO_LARGE };
enum engine_request_check engine_check_request(const engine *eng, const struct engine_request *r, char *msg,
                                               size_t cap);
/* Runs one step (no-op if there is no work): plans rows (allocating blocks, preempting), runs the backend
 * forward, samples the sequences whose rows reached their last token, and moves finished requests to the
 * results. Fails only on a backend error, out of memory, or (debug_checks) a broken invariant; after a
 * failed step the engine can only be freed. */
int engine_step(engine *eng, struct err *e);
/* 1 while requests are queued or running (results waiting in engine_take do not count). */
int engine_has_work(const engine *eng);
/* Moves one finished result into *out (caller frees with engine_result_free); 0 if none is ready. */
int engine_take(engine *eng, struct engine_result *out);
void engine_result_free(struct engine_result *r);
/* The text of a queued or running request that is final so far (for streaming): *text points at its first
 * *len bytes, complete UTF-8 that holds no stop string nor the start of one, so later steps only append to
 * it and the request's result text begins with it. The pointer is valid until the next engine call that
 * is not engine_peek_text. Returns 0, or -1 when id is not queued or running (a finished request's whole
 * text is in its result). O(running + waiting). */
int engine_peek_text(const engine *eng, uint64_t id, const char **text, size_t *len);
/* Cancels a queued or running request; its result finishes with ENGINE_FINISH_CANCELLED. 0 if found. */
int engine_cancel(engine *eng, uint64_t id);
void engine_get_stats(const engine *eng, struct engine_stats *s);
/* Caps the running sequences at n from the next step on, clamped to [1, max_seqs as made]; running ones over
 * a lowered cap finish, none is preempted for it. For a memory watchdog (jobs/job). Returns the cap set. */
int32_t engine_set_max_seqs(engine *eng, int32_t n);

#endif
