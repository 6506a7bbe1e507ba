/* cuda_draw — the CUDA backend's op sample, host side: packs the rows the engine asks to be resolved (their
 * edits, filters, uniforms and logprob requests) into the pinned sample buffer, launches the logprobs
 * (cuda_logprob.cu) and the draws (cuda_sample.cu), and brings back the tokens, the logprob pairs (1 + n_top
 * a row that asked) and the logits of the rows that go to the host. The step it resolves was enqueued by a
 * forward with logits NULL (pending); this waits for it.
 *
 * The sample buffer, in int32 units (every part a multiple of 4, so 16-byte aligned): tokens (n) and pairs
 * (n_pairs, 16 bytes each) come down in one copy; norms (n, device only), saved (n_edits floats, device
 * only); rows (cuda_draw_row), lp rows (cuda_lp_row) and edits go up in one copy.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_ctx.h"

/* NIGHTSHIFT_CUDA_SAMPLING=host: the sample op declines every row (their logits go to the host, which draws
 * and computes their logprobs), to measure what resolving rows on the device saves. Read once. */
static int cuda_sampling_declined(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("NIGHTSHIFT_CUDA_SAMPLING");
        v = s && !strcmp(s, "host");
    }
    return v;
}

/* The kernel's mode for a row: what the op asked, or CUDA_DRAW_COPY for every row under
 * NIGHTSHIFT_CUDA_SAMPLING=host. */
static int32_t cuda_draw_mode(enum sample_mode m)
{
    return cuda_sampling_declined() ? CUDA_DRAW_COPY : cuda_draw_mode_of(m);
}

/* Where the parts of the sample buffer start (int32 units). */
struct cuda_draw_layout {
    size_t pairs, norms, saved, rows, lp, edits, end;
    size_t n_pairs, n_edits;
};

/* Packs the sample op's rows into the pinned buffer and uploads them (async); *L: where the parts are. */
static int cuda_upload_draws(struct cuda_ctx *c, const struct sample_row *rows, int32_t n, int32_t n_ids,
                             struct cuda_draw_layout *L, struct err *e)
{
    const size_t rw = sizeof(struct cuda_draw_row) / 4, lw = sizeof(struct cuda_lp_row) / 4;
    size_t n_edits = 0, n_pairs = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t mode = cuda_draw_mode(rows[i].mode);
        const struct cuda_lp_row lr = cuda_lp_row_of(&rows[i], mode, n_ids, 0);
        n_edits += mode == CUDA_DRAW_GREEDY || mode == CUDA_DRAW_SAMPLE ? (size_t)rows[i].n_edits : 0;
        n_pairs += lr.n_top >= 0 ? 1 + (size_t)lr.n_top : 0;
    }
    L->n_pairs = n_pairs;
    L->n_edits = n_edits;
    L->pairs = cuda_align4((size_t)n);
    L->norms = L->pairs + 4 * n_pairs;
    L->saved = L->norms + 4 * (size_t)n;
    L->rows = L->saved + cuda_align4(n_edits);
    L->lp = L->rows + rw * (size_t)n;
    L->edits = L->lp + lw * (size_t)n;
    L->end = L->edits + 4 * n_edits;
    if (cuda_io_reserve(&c->sample, L->end * sizeof(int32_t), e)) return -1;
    struct cuda_draw_row *dr = (struct cuda_draw_row *)(c->sample.h + L->rows);
    struct cuda_lp_row *lr = (struct cuda_lp_row *)(c->sample.h + L->lp);
    size_t k = 0, at = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct sample_row *r = &rows[i];
        const int32_t mode = cuda_draw_mode(r->mode);
        dr[i] = cuda_draw_row_of(r, mode, (int32_t)k);
        lr[i] = cuda_lp_row_of(r, mode, n_ids, (int32_t)at);
        const int32_t ne = dr[i].n_edits;
        if (ne > 0) memcpy(c->sample.h + L->edits + 4 * k, r->edits, (size_t)ne * sizeof(struct logit_edit));
        k += (size_t)ne;
        at += lr[i].n_top >= 0 ? 1 + (size_t)lr[i].n_top : 0;
    }
    CU_TRY(cudaMemcpyAsync(c->sample.d + L->rows, c->sample.h + L->rows, (L->end - L->rows) * sizeof(int32_t),
                           cudaMemcpyHostToDevice, c->st));
    return 0;
}

/* Enqueues the kernels on the uploaded rows and the copy of the tokens and pairs back. */
static int cuda_launch_draws(struct cuda_ctx *c, int32_t n, int32_t n_ids, const struct cuda_draw_layout *L,
                             struct err *e)
{
    const int32_t n_vocab = c->m->hp.n_vocab;
    int32_t *d = c->sample.d;
    const struct cuda_sample_lp lp = {(const struct cuda_lp_row *)(d + L->lp),
                                      (struct cuda_lp_pair *)(d + L->pairs),
                                      (struct cuda_lp_norm *)(d + L->norms)};
    if (L->n_pairs > 0 && cuda_launch_logprobs(c->st, c->logits_d, n_vocab, n_ids, &lp, n, e)) return -1;
    if (cuda_launch_sample(c->st, c->logits_d, n_vocab, n_ids, (const struct cuda_draw_row *)(d + L->rows),
                           d + L->edits, (float *)(d + L->saved), n, d, L->n_pairs > 0 ? &lp : NULL, e))
        return -1;
    CU_TRY(cudaMemcpyAsync(c->sample.h, d, (L->pairs + 4 * L->n_pairs) * sizeof(int32_t),
                           cudaMemcpyDeviceToHost, c->st));
    return 0;
}

int cuda_sample(void *ctx, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens,
                float *logits, struct sample_logprobs *logprobs, struct err *e)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (!c->pending || n != c->kept_logits)
        return err_set(e, "cuda backend: sample of %d rows without a forward that kept as many logit rows", (int)n);
    const int32_t n_vocab = c->m->hp.n_vocab;
    if (n_ids < 1 || n_ids > n_vocab)
        return err_set(e, "cuda backend: sample over %d ids of %d", (int)n_ids, (int)n_vocab);
    for (int32_t i = 0; i < n; i++)
        if (rows[i].mode == SAMPLE_LOGPROBS &&
            (rows[i].token < 0 || rows[i].token >= n_vocab || !rows[i].logprobs))
            return err_set(e, "cuda backend: logprobs row %d of token %d (of %d)", (int)i, (int)rows[i].token,
                           (int)n_vocab);
    const double t_in = cuda_now();
    struct cuda_draw_layout L;
    if (cuda_upload_draws(c, rows, n, n_ids, &L, e)) return -1;
    if (L.n_pairs > 0 && !logprobs)
        return err_set(e, "cuda backend: rows ask for logprobs and the op has no output");
    if (cuda_launch_draws(c, n, n_ids, &L, e)) return -1;
    const double t_wait = cuda_now();
    c->host_ms[2] += (t_wait - t_in) * 1e3;
    CU_TRY(cudaStreamSynchronize(c->st)); /* the tokens say which rows go to the host */
    int32_t n_host = 0;
    for (int32_t i = 0, j; i < n; i = j) { /* the rows not resolved, in runs */
        for (j = i; j < n && (c->sample.h[j] < 0) == (c->sample.h[i] < 0); j++) {}
        if (c->sample.h[i] < 0 && cuda_copy_logit_rows(c, i, j, e)) return -1;
        n_host += c->sample.h[i] < 0 ? j - i : 0;
    }
    cuda_mark(c, CUDA_PROF_COPY);
    if (cuda_finish(c, (uint64_t)n_host * (uint64_t)n_vocab * 4 + (uint64_t)n * 4 + (uint64_t)L.n_pairs * 16,
                    e))
        return -1;
    const double t0 = cuda_now();
    const struct cuda_lp_row *lr = (const struct cuda_lp_row *)(c->sample.h + L.lp); /* still as packed */
    const struct cuda_lp_pair *pairs = (const struct cuda_lp_pair *)(c->sample.h + L.pairs);
    for (int32_t i = 0; i < n; i++) {
        tokens[i] = c->sample.h[i];
        if (tokens[i] < 0)
            memcpy(logits + (size_t)i * n_vocab, c->logits_h + (size_t)i * n_vocab, (size_t)n_vocab * sizeof(float));
        else if (lr[i].n_top >= 0)
            cuda_lp_unpack(pairs + lr[i].at, lr[i].n_top, &logprobs[i]);
    }
    c->last.logits_host_ms = (cuda_now() - t0) * 1e3;
    c->host_ms[3] += (t0 - t_wait) * 1e3;
    return 0;
}
