/* cuda_diag — the CUDA backend's entries for tests and benchmarks (cuda.h): the last step's times, the
 * profile of a step's phases (its marks: cuda_mark, cuda.cu), and the switches that A/B runs flip in one
 * process: CUDA graphs (cuda_graph.cu) and the fused GEMVs of one-row steps (cuda.cu). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_ctx.h"

extern "C" int backend_cuda_last_times(const struct backend *b, struct cuda_step_times *out)
{
    if (!b->ops || strcmp(b->ops->name, "cuda") != 0) return -1;
    *out = ((const struct cuda_ctx *)b->ctx)->last;
    return 0;
}

extern "C" const char *backend_cuda_profile_name(int phase)
{
    static const char *const names[CUDA_PROF_N] = {"upload", "embed",  "norm", "gemm", "qkv",
                                                   "attn",   "swiglu", "fp8",  "head", "copy"};
    return phase >= 0 && phase < CUDA_PROF_N ? names[phase] : "?";
}

extern "C" int backend_cuda_profile_enable(struct backend *b, int on)
{
    if (!b->ops || strcmp(b->ops->name, "cuda") != 0) return -1;
    struct cuda_ctx *c = (struct cuda_ctx *)b->ctx;
    if (on && !c->prof_ev) {
        c->prof_ev = (cudaEvent_t *)calloc(CUDA_PROF_MARKS, sizeof *c->prof_ev);
        c->prof_phase = (uint8_t *)calloc(CUDA_PROF_MARKS, 1);
        if (!c->prof_ev || !c->prof_phase) return -1;
        for (int i = 0; i < CUDA_PROF_MARKS; i++)
            if (cudaEventCreate(&c->prof_ev[i]) != cudaSuccess) return -1;
    }
    c->prof_on = on;
    c->n_marks = 0;
    memset(&c->prof, 0, sizeof c->prof);
    return 0;
}

extern "C" int backend_cuda_profile_get(const struct backend *b, struct cuda_profile *out)
{
    if (!b->ops || strcmp(b->ops->name, "cuda") != 0) return -1;
    *out = ((const struct cuda_ctx *)b->ctx)->prof;
    return 0;
}

extern "C" int backend_cuda_graphs(struct backend *b, int on, int64_t *launches, int64_t *captures)
{
    if (!b->ops || strcmp(b->ops->name, "cuda") != 0) return -1;
    struct cuda_ctx *c = (struct cuda_ctx *)b->ctx;
    if (on >= 0) c->graphs_on = on;
    if (launches) *launches = c->n_graph_launches;
    if (captures) *captures = c->n_graph_captures;
    return 0;
}

extern "C" int backend_cuda_fuse(struct backend *b, int on)
{
    if (!b->ops || strcmp(b->ops->name, "cuda") != 0) return -1;
    struct cuda_ctx *c = (struct cuda_ctx *)b->ctx;
    if (on >= 0 && on != c->fuse_on) {
        c->fuse_on = on;
        c->gen++; /* the graphs captured hold the other kernels */
    }
    return c->fuse_on;
}
