/* cuda_draw — the CUDA backend's op sample, host side: packs the rows the engine asks to be drawn (their
 * edits, filters and uniforms) into the pinned sample buffer, launches the draws (cuda_sample.cu), and brings
 * back the tokens and the logits of the rows that go to the host. The step it resolves was enqueued by a
 * forward with logits NULL (pending); this waits for it. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_ctx.h"

/* NIGHTSHIFT_CUDA_SAMPLING=host: the sample op declines every row (their logits go to the host), to measure
 * what drawing on the device saves. Read once. */
static int cuda_sampling_declined(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("NIGHTSHIFT_CUDA_SAMPLING");
        v = s && !strcmp(s, "host");
    }
    return v;
}

/* The kernel's mode for a row: what the op asked, or CUDA_DRAW_EDIT for a row it may draw under
 * NIGHTSHIFT_CUDA_SAMPLING=host. */
static int32_t cuda_draw_mode(enum sample_mode m)
{
    if (m != SAMPLE_HOST && cuda_sampling_declined()) return CUDA_DRAW_EDIT;
    return cuda_draw_mode_of(m);
}

/* Packs the sample op's rows (struct cuda_draw_row) and edits into the pinned buffer after n tokens' room,
 * uploads them (async); *rows_off, *edits_off: where they start (int32 units). */
static int cuda_upload_draws(struct cuda_ctx *c, const struct sample_row *rows, int32_t n, size_t *rows_off,
                             size_t *edits_off, struct err *e)
{
    const size_t rw = sizeof(struct cuda_draw_row) / 4;
    size_t n_edits = 0;
    for (int32_t i = 0; i < n; i++) n_edits += rows[i].mode != SAMPLE_HOST ? (size_t)rows[i].n_edits : 0;
    const size_t r_off = cuda_align4((size_t)n), ed_off = r_off + rw * (size_t)n;
    if (cuda_io_reserve(&c->sample, (ed_off + 4 * n_edits) * sizeof(int32_t), e)) return -1;
    struct cuda_draw_row *dr = (struct cuda_draw_row *)(c->sample.h + r_off);
    size_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct sample_row *r = &rows[i];
        dr[i] = cuda_draw_row_of(r, cuda_draw_mode(r->mode), (int32_t)k);
        const int32_t ne = dr[i].n_edits;
        if (ne > 0) memcpy(c->sample.h + ed_off + 4 * k, r->edits, (size_t)ne * sizeof(struct logit_edit));
        k += (size_t)ne;
    }
    CU_TRY(cudaMemcpyAsync(c->sample.d + r_off, c->sample.h + r_off, (ed_off - r_off + 4 * k) * sizeof(int32_t),
                           cudaMemcpyHostToDevice, c->st));
    *rows_off = r_off;
    *edits_off = ed_off;
    return 0;
}

int cuda_sample(void *ctx, const struct sample_row *rows, int32_t n, int32_t n_ids, int32_t *tokens, float *logits,
                       struct err *e)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (!c->pending || n != c->kept_logits)
        return err_set(e, "cuda backend: sample of %d rows without a forward that kept as many logit rows", (int)n);
    const int32_t n_vocab = c->m->hp.n_vocab;
    if (n_ids < 1 || n_ids > n_vocab) return err_set(e, "cuda backend: sample over %d ids of %d", (int)n_ids, (int)n_vocab);
    const double t_in = cuda_now();
    size_t rows_off = 0, ed_off = 0;
    if (cuda_upload_draws(c, rows, n, &rows_off, &ed_off, e) ||
        cuda_launch_sample(c->st, c->logits_d, n_vocab, n_ids, (const struct cuda_draw_row *)(c->sample.d + rows_off),
                           c->sample.d + ed_off, n, c->sample.d, e))
        return -1;
    CU_TRY(cudaMemcpyAsync(c->sample.h, c->sample.d, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st));
    const double t_wait = cuda_now();
    c->host_ms[2] += (t_wait - t_in) * 1e3;
    CU_TRY(cudaStreamSynchronize(c->st)); /* the tokens say which rows go to the host */
    int32_t n_host = 0;
    for (int32_t i = 0, j; i < n; i = j) { /* the rows not drawn, in runs */
        for (j = i; j < n && (c->sample.h[j] < 0) == (c->sample.h[i] < 0); j++) {}
        if (c->sample.h[i] < 0 && cuda_copy_logit_rows(c, i, j, e)) return -1;
        n_host += c->sample.h[i] < 0 ? j - i : 0;
    }
    cuda_mark(c, CUDA_PROF_COPY);
    if (cuda_finish(c, (uint64_t)n_host * (uint64_t)n_vocab * 4 + (uint64_t)n * 4, e)) return -1;
    const double t0 = cuda_now();
    for (int32_t i = 0; i < n; i++) {
        tokens[i] = c->sample.h[i];
        if (tokens[i] < 0)
            memcpy(logits + (size_t)i * n_vocab, c->logits_h + (size_t)i * n_vocab, (size_t)n_vocab * sizeof(float));
    }
    c->last.logits_host_ms = (cuda_now() - t0) * 1e3;
    c->host_ms[3] += (t0 - t_wait) * 1e3;
    return 0;
}

