/* ppl — perplexity of a model on a token sequence, through the engine: each window is a scoring request
 * (max_tokens 0, prompt logprobs of the positions it scores: engine.h), so perplexity runs on any backend
 * the engine drives, batched with the engine's step (several windows per step when they fit).
 *
 * Windows (ppl_plan), following llama.cpp's perplexity tool so numbers compare:
 *   - default (stride 0): the text is cut into n_tokens / ctx windows of ctx tokens, side by side; each
 *     window sees its first half as context only and scores the predictions of its tokens after
 *     position first = ctx / 2: the logits at positions first .. ctx - 2 predict the tokens at
 *     first + 1 .. ctx - 1, so ctx - 1 - ctx / 2 tokens per window (255 of 512) are scored, and the
 *     tokens in the first half of each window are never scored;
 *   - stride S (1 <= S < ctx): windows of ctx tokens start every S tokens and each scores its last S
 *     tokens, so every token from position ctx - S of the text on is scored exactly once, each with at
 *     least ctx - S positions of its window before it; windows while one still fits in the text.
 * In both, when bos >= 0 a window's position 0 holds the BOS token in place of the text's token there
 * (llama.cpp does so for models that add BOS), so each window starts like a fresh sequence.
 *
 * Scoring: the negative log-likelihood of each scored token, -log softmax(logits)[token], in double with
 * the maximum subtracted before exponentiating (ppl_nll). Perplexity = exp(mean NLL); its error is the
 * delta-method standard error of the mean, exp(mean) * sqrt(var / (n - 1)) with var the NLLs' variance
 * (what llama.cpp prints as "+/-"). Sums are taken in window order, position order, so the result does
 * not depend on max_batch_tokens, and (the CPU backend's invariant) is bit-identical for any batch size.
 *
 * Steps: the engine runs a window's ctx positions (the last only for its KV, which nothing reads) in chunks
 * of at most max_batch_tokens rows, several windows per step, as many in flight as the batch can hold
 * (max_batch_tokens / (ctx - 1) + 2, at most 64); logprobs are computed from each scored row's logits
 * (engine/logprob.h: -logprob is ppl_nll bit for bit), and each logits row is bit-identical whatever the
 * batch (CPU), so the result does not depend on max_batch_tokens. Memory: that many windows' KV blocks plus
 * (max_batch_tokens, n_vocab) floats of logits, as when ppl drove the backend itself.
 */
#ifndef NS_RUNTIME_PPL_H
#define NS_RUNTIME_PPL_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "util/err.h"

struct ppl_params {
    int32_t ctx;              /* tokens per window, >= 2 and <= the model's context length */
    int32_t stride;           /* 0: llama.cpp's windows; else 1 <= stride < ctx (see the top of this file) */
    int32_t bos;              /* token at each window's position 0, or -1 to keep the text's */
    int32_t max_batch_tokens; /* rows per forward call, >= 1 */
    int32_t kv_block;         /* tokens per KV block, >= 1 */
    enum kv_type kv_type;
};

/* What ppl_plan derives from the params and the text length. */
struct ppl_plan {
    int32_t n_windows;
    int64_t step;     /* tokens between window starts: ctx, or stride */
    int32_t first;    /* first window position whose logits are scored (they predict position first + 1) */
    int32_t n_scored; /* scored tokens per window: ctx - 1 - first */
};

/* Running sums of NLLs. */
struct ppl_stats {
    int64_t n;
    double sum, sum_sq;
};

/* ppl_params with ctx 512, stride 0, bos -1, max_batch_tokens 512, kv_block 16, f16 KV. */
struct ppl_params ppl_default_params(void);

/* Checks the params against a text of n_tokens and a model context of n_ctx_train and fills *plan; fails
 * with a message saying what to change (a text shorter than one window, a window longer than the model's
 * context, a stride outside 1 .. ctx - 1). */
int ppl_plan(const struct ppl_params *p, int64_t n_tokens, int32_t n_ctx_train, struct ppl_plan *plan, struct err *e);

/* -log softmax(logits)[target], in double, stable for any finite logits (the maximum is subtracted). */
double ppl_nll(const float *logits, int32_t n_vocab, int32_t target);

void ppl_stats_add(struct ppl_stats *s, double nll);
/* exp(mean NLL), and its standard error (0 with fewer than two values). */
double ppl_stats_ppl(const struct ppl_stats *s);
double ppl_stats_err(const struct ppl_stats *s);

/* (optional) Called after each window with the stats of windows 0 .. window. */
typedef void (*ppl_window_fn)(void *user, int32_t window, const struct ppl_stats *so_far);

/* Scores tokens[0 .. n_tokens) on backend b with model m's weights already loaded (runtime_open_backend),
 * through an engine of its own (which reallocates b's KV pool: all KV is invalidated; kv_block must be a
 * power of two, engine.h). Fills *out with the sums over every scored token and
 * *plan_out (optional) with the plan. */
int ppl_run(struct backend *b, const struct model *m, const int32_t *tokens, int64_t n_tokens,
            const struct ppl_params *p, ppl_window_fn on_window, void *user, struct ppl_stats *out,
            struct ppl_plan *plan_out, struct err *e);

#endif
