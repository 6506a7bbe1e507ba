/* cuda — the CUDA backend: the whole forward step on one NVIDIA GPU (sm_90 build), behind backend_ops.
 * Built only with `make CUDA=1` (NS_CUDA defined); this header is plain C, usable from C and CUDA C++.
 *
 * What it does (details at the top of cuda.cu): weights are uploaded once at load as BF16 (F16/BF16 and
 * every type quant.h can dequantize, converted on the device from the raw GGUF bytes), except F32
 * matrices, which stay F32 and run as FP32 GEMMs (the exact path for small test models); with
 * backend_config.weights FP8 (or AUTO when BF16 does not fit) the layers' matrices are e4m3 with a scale
 * per output channel instead (cuda_fp8.cu); norms and biases are F32. The KV pool lives in device memory
 * (f32, f16, q8_0 or fp8). A step uploads its batch once, runs cuBLAS GEMMs over all rows for every linear
 * layer (a GEMV kernel of its own for one row) and the backend's own kernels (cuda_kernels.cu) for the
 * rest, decode steps of a few rows as CUDA graphs, and draws the tokens on the device (the op sample,
 * cuda_sample.cu): only token ids come back, or the logit rows the engine asks for.
 */
#ifndef NS_BACKEND_CUDA_H
#define NS_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a usable GPU is present (a CUDA device of compute capability >= 9.0 for this sm_90 build);
 * 0 if not, with the reason in why (NUL-terminated, at most why_cap bytes). */
int backend_cuda_probe(char *why, size_t why_cap);

/* Creates the CUDA backend on cfg->device (cfg may be NULL: device 0). Fails with a message when no
 * usable GPU is there. */
int backend_cuda_init(struct backend *b, const struct backend_config *cfg, struct err *e);

/* Device-side times of the last forward step (CUDA events), in milliseconds: the whole step (upload to
 * logits on the host), and the copy of the logits rows from device to host (pinned) plus their copy into
 * the caller's buffer. */
struct cuda_step_times {
    double step_ms;
    double logits_copy_ms; /* device -> pinned host, measured by events */
    double logits_host_ms; /* pinned -> caller's buffer (memcpy on the host) */
    uint64_t logits_bytes;
};
/* b must be a CUDA backend (ops->name "cuda"); 0 on success. */
int backend_cuda_last_times(const struct backend *b, struct cuda_step_times *out);

/* Where a step's device time goes (for benchmarks): with the profile on, an event is recorded on the
 * stream after every phase of the step, and the time between consecutive events is added to the phase
 * that ended (launch gaps included). Off by default (it costs ~1 us of host time per event). */
enum cuda_prof {
    CUDA_PROF_UPLOAD, /* the batch upload */
    CUDA_PROF_EMBED,  /* RoPE table and embedding gather */
    CUDA_PROF_NORM,   /* RMSNorm (with the residual add) */
    CUDA_PROF_GEMM,   /* the layers' GEMMs */
    CUDA_PROF_QKV,    /* q/k/v epilogue (bias, norms, RoPE, KV writes) */
    CUDA_PROF_ATTN,   /* attention and its combine */
    CUDA_PROF_SWIGLU,
    CUDA_PROF_FP8,    /* GEMM inputs quantized to e4m3 (FP8 matrices) */
    CUDA_PROF_HEAD,   /* final norm and the output head GEMM */
    CUDA_PROF_COPY,   /* logits to the host */
    CUDA_PROF_N
};
struct cuda_profile {
    double ms[CUDA_PROF_N];
    int64_t n_steps;
};
const char *backend_cuda_profile_name(int phase);
/* Turns the profile on or off and clears it; b must be a CUDA backend. 0 on success. */
int backend_cuda_profile_enable(struct backend *b, int on);
int backend_cuda_profile_get(const struct backend *b, struct cuda_profile *out);

/* CUDA graphs for decode steps of up to 8 sequences and 72 rows, drafts included (cuda_graph.cu): on
 * unless NIGHTSHIFT_CUDA_GRAPHS=off at init; on = 1 / 0 turns them on / off, -1 leaves them; *launches
 * and *captures (may be NULL): graph launches and captures so far. b must be a CUDA backend; 0 on success. */
int backend_cuda_graphs(struct backend *b, int on, int64_t *launches, int64_t *captures);

/* Fused GEMVs in steps of one row (cuda.cu: each norm and SwiGLU inside the GEMV it feeds, the same bits as
 * apart): on unless NIGHTSHIFT_CUDA_FUSE=off at init; on = 1 / 0 turns them on / off (graphs captured under
 * the other setting are recaptured), -1 leaves them. Returns 1 when on, 0 when off, -1 when b is not a CUDA
 * backend. */
int backend_cuda_fuse(struct backend *b, int on);

#ifdef __cplusplus
}
#endif

#endif
