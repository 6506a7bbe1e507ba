/* lm_util.h — a model file opened on the CPU backend, and the logits of token sequences straight from the
 * backend's forward step (no engine), for the tests of quantize and perplexity.
 *
 * lm_logits runs a whole sequence as one step with logits for every row; lm_logits_rowwise runs the same
 * sequence one row per step (decode style); lm_greedy extends a prompt by argmax. All use an F32 KV cache
 * of exactly the blocks the sequence needs (block 16), reallocated per call.
 */
#ifndef NS_TESTS_LM_UTIL_H
#define NS_TESTS_LM_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/runtime.h"

#define LM_BLOCK 16

/* Opens the model file and the cpu backend (2 threads) through the runtime stages; on failure rt is closed. */
static inline int lm_open(const char *path, struct runtime *rt, struct err *e)
{
    struct runtime_params p = runtime_default_params();
    p.model_path = path;
    p.backend = "cpu";
    p.threads = 2;
    if (runtime_open_model(&p, rt, e) || runtime_open_backend(rt, e)) {
        runtime_close(rt);
        return -1;
    }
    return 0;
}

/* Rows [r0, r1) of toks at positions r0.. in one step, logits for each into out (r1 - r0, n_vocab). The
 * blocks hold the sequence from position 0 (rows before r0 must have run before). */
static inline int lm_step(struct runtime *rt, const int32_t *toks, int32_t r0, int32_t r1, const int32_t *blocks,
                          int32_t n_blocks, float *out, struct err *e)
{
    const int32_t n = r1 - r0;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *seq = calloc((size_t)n, sizeof *seq);
    int32_t *rows = malloc((size_t)n * sizeof *rows);
    int rc = -1;
    if (pos && seq && rows) {
        for (int32_t i = 0; i < n; i++) {
            pos[i] = r0 + i;
            rows[i] = i;
        }
        struct step_seq sq = {blocks, n_blocks};
        struct step_batch b = {n, toks + r0, pos, seq, 1, &sq, n, rows, 0, NULL, NULL};
        rc = rt->backend.ops->forward(rt->backend.ctx, &b, out, e);
    }
    free(pos);
    free(seq);
    free(rows);
    return rc;
}

/* A KV pool of the blocks n tokens need, and their ids 0, 1, ... in *blocks (caller frees). */
static inline int lm_kv(struct runtime *rt, int32_t n, int32_t **blocks, int32_t *n_blocks, struct err *e)
{
    *n_blocks = (n + LM_BLOCK - 1) / LM_BLOCK;
    *blocks = malloc((size_t)*n_blocks * sizeof **blocks);
    if (!*blocks) return -1;
    for (int32_t i = 0; i < *n_blocks; i++)
        (*blocks)[i] = i;
    return rt->backend.ops->kv_alloc(rt->backend.ctx, *n_blocks, LM_BLOCK, KV_TYPE_F32, e);
}

/* Logits (n, n_vocab) of every position of toks, in one step (rowwise = 0) or one step per row. */
static inline int lm_logits_ex(struct runtime *rt, const int32_t *toks, int32_t n, int rowwise, float *out,
                               struct err *e)
{
    int32_t *blocks, n_blocks;
    int rc = lm_kv(rt, n, &blocks, &n_blocks, e);
    const size_t nv = (size_t)rt->model->hp.n_vocab;
    for (int32_t r = 0; rc == 0 && r < n; r += rowwise ? 1 : n)
        rc = lm_step(rt, toks, r, rowwise ? r + 1 : n, blocks, n_blocks, out + (size_t)r * nv, e);
    free(blocks);
    return rc;
}

static inline int lm_logits(struct runtime *rt, const int32_t *toks, int32_t n, float *out, struct err *e)
{
    return lm_logits_ex(rt, toks, n, 0, out, e);
}

static inline int32_t lm_argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* toks[0 .. n_prompt) given; fills toks[n_prompt .. n_prompt + n_gen) greedily. */
static inline int lm_greedy(struct runtime *rt, int32_t *toks, int32_t n_prompt, int32_t n_gen, struct err *e)
{
    const int32_t nv = rt->model->hp.n_vocab, n = n_prompt + n_gen;
    int32_t *blocks, n_blocks;
    float *logits = malloc((size_t)n_prompt * (size_t)nv * sizeof *logits);
    int rc = logits ? lm_kv(rt, n, &blocks, &n_blocks, e) : -1;
    if (rc == 0) {
        rc = lm_step(rt, toks, 0, n_prompt, blocks, n_blocks, logits, e);
        const float *last = logits + (size_t)(n_prompt - 1) * (size_t)nv;
        for (int32_t r = n_prompt; rc == 0 && r < n; r++) {
            toks[r] = lm_argmax(last, nv);
            if (r + 1 < n) rc = lm_step(rt, toks, r, r + 1, blocks, n_blocks, logits, e);
            last = logits;
        }
        free(blocks);
    }
    free(logits);
    return rc;
}

/* Pearson correlation of two float arrays of n values. */
static inline double lm_corr(const float *a, const float *b, size_t n)
{
    double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
    for (size_t i = 0; i < n; i++) {
        sa += a[i];
        sb += b[i];
        saa += (double)a[i] * a[i];
        sbb += (double)b[i] * b[i];
        sab += (double)a[i] * b[i];
    }
    double cov = sab - sa * sb / (double)n, va = saa - sa * sa / (double)n, vb = sbb - sb * sb / (double)n;
    return va > 0 && vb > 0 ? cov / sqrt(va * vb) : 0.0;
}

#endif
