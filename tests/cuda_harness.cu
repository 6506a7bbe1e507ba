/* cuda_harness — see cuda_harness.h. Each wrapper keeps the device buffers it allocates in a small list
 * (struct cuda_hx) that is freed on every return path. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gguf/quant.h"
#include "model/model.h"
}
#include "backend/cuda_kernels.h"
#include "cuda_harness.h"

#define CUDA_HX_MAX 16

struct cuda_hx {
    void *p[CUDA_HX_MAX];
    int n;
    cudaStream_t st;
};

static void cuda_hx_free(struct cuda_hx *x)
{
    if (x->st) {
        cudaStreamSynchronize(x->st);
        cudaStreamDestroy(x->st);
    }
    for (int i = 0; i < x->n; i++) cudaFree(x->p[i]);
    x->n = 0;
    x->st = NULL;
}

/* A device buffer of `bytes`, filled with 0xFF bytes (NaN as f32, bf16 and f16). */
static int cuda_hx_alloc(struct cuda_hx *x, size_t bytes, void **out, struct err *e)
{
    *out = NULL;
    if (x->n == CUDA_HX_MAX) return err_set(e, "cuda harness: too many buffers");
    CU_TRY(cudaMalloc(out, bytes ? bytes : 1));
    x->p[x->n++] = *out;
    CU_TRY(cudaMemset(*out, 0xFF, bytes ? bytes : 1));
    return 0;
}

/* A device copy of host data (NULL host -> NULL device). */
static int cuda_hx_upload(struct cuda_hx *x, const void *host, size_t bytes, void **out, struct err *e)
{
    *out = NULL;
    if (!host) return 0;
    if (cuda_hx_alloc(x, bytes, out, e)) return -1;
    CU_TRY(cudaMemcpy(*out, host, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static int cuda_hx_begin(struct cuda_hx *x, struct err *e)
{
    memset(x, 0, sizeof *x);
    if (cuda_kernels_init(e)) return -1;
    /* a blocking stream: its kernels wait for the poisoning memsets and the uploads before them, which run on
     * the legacy default stream (a non-blocking stream let a kernel run while an upload's DMA or a memset was
     * still landing: a pool's NaN poison over K/V slots the kernel had written, kernel_qkv case 5) */
    CU_TRY(cudaStreamCreate(&x->st));
    return 0;
}

/* Copies n elements of a device buffer of type (0 f32, 1 bf16, 2 f16) into host floats. */
static int cuda_hx_download(const void *dev, int type, size_t n, float *out, struct err *e)
{
    if (type == 0) {
        CU_TRY(cudaMemcpy(out, dev, n * 4, cudaMemcpyDeviceToHost));
        return 0;
    }
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    if (!h) return err_set(e, "cuda harness: out of memory");
    cudaError_t rc = cudaMemcpy(h, dev, n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; rc == cudaSuccess && i < n; i++)
        out[i] = type == 1 ? quant_bf16_to_f32(h[i]) : quant_f16_to_f32(h[i]);
    free(h);
    if (rc != cudaSuccess) return cuda_fail(e, __FILE__, __LINE__, "download", cudaGetErrorString(rc));
    return 0;
}

/* Uploads a pool layer of a given as floats (cuda_harness_pool_floats), packed into its KV type. */
static int cuda_hx_upload_kv(struct cuda_hx *x, const struct cuda_harness_attn *a, const float *host, void **out,
                             struct err *e)
{
    const size_t n = (size_t)cuda_harness_pool_bytes(a);
    void *h = malloc(n + 16);
    if (!h) return err_set(e, "cuda harness: out of memory");
    int rc = cuda_harness_pool_pack(a, host, h, e) || cuda_hx_upload(x, h, n, out, e) ? -1 : 0;
    free(h);
    return rc;
}

static int cuda_hx_sync(struct cuda_hx *x, struct err *e)
{
    CU_TRY(cudaStreamSynchronize(x->st));
    CU_TRY(cudaGetLastError());
    return 0;
}

#define HX(call)                                                                                          \
    do {                                                                                                  \
        if (call) goto fail;                                                                              \
    } while (0)

extern "C" int cuda_harness_embed(const void *table, int bf16, int32_t n_vocab, int32_t n, const int32_t *tokens,
                                  int32_t n_rows, float *x, struct err *e)
{
    struct cuda_hx h;
    void *dt, *dtok, *dx;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, table, (size_t)n_vocab * n * (bf16 ? 2 : 4), &dt, e));
    HX(cuda_hx_upload(&h, tokens, (size_t)n_rows * 4, &dtok, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * n * 4, &dx, e));
    HX(cuda_launch_embed(h.st, dt, bf16, (const int32_t *)dtok, n_rows, n, (float *)dx, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dx, 0, (size_t)n_rows * n, x, e));
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

extern "C" int cuda_harness_rope_table(const int32_t *pos, int32_t n_rows, const double *inv_freq, int32_t n_rot,
                                       float *cs, struct err *e)
{
    struct cuda_hx h;
    void *dp, *df, *dcs;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, pos, (size_t)n_rows * 4, &dp, e));
    HX(cuda_hx_upload(&h, inv_freq, (size_t)(n_rot / 2) * 8, &df, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * n_rot * 4, &dcs, e));
    HX(cuda_launch_rope_table(h.st, (const int32_t *)dp, n_rows, (const double *)df, n_rot, (float *)dcs, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dcs, 0, (size_t)n_rows * n_rot, cs, e));
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

extern "C" int cuda_harness_rmsnorm(float *x_inout, int32_t n_x_rows, const float *add, const float *w,
                                    const int32_t *rows, int32_t n_out, int32_t n, float eps, int out_bf16, float *out,
                                    struct err *e)
{
    struct cuda_hx h;
    void *dx, *da, *dw, *dr, *dout;
    const size_t nx = (size_t)n_x_rows * n;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, x_inout, nx * 4, &dx, e));
    HX(cuda_hx_upload(&h, add, nx * 4, &da, e));
    HX(cuda_hx_upload(&h, w, (size_t)n * 4, &dw, e));
    HX(cuda_hx_upload(&h, rows, (size_t)n_out * 4, &dr, e));
    HX(cuda_hx_alloc(&h, (size_t)n_out * n * (out_bf16 ? 2 : 4), &dout, e));
    HX(cuda_launch_rmsnorm(h.st, (float *)dx, (const float *)da, (const float *)dw, (const int32_t *)dr, n_out, n, eps,
                           dout, out_bf16 ? CUDA_ACT_BF16 : CUDA_ACT_F32, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dx, 0, nx, x_inout, e));
    HX(cuda_hx_download(dout, out_bf16 ? 1 : 0, (size_t)n_out * n, out, e));
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

extern "C" int cuda_harness_swiglu(const float *gu, int32_t n_rows, int32_t n_ff, int out_bf16, float *out,
                                   struct err *e)
{
    struct cuda_hx h;
    void *dgu, *dout;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, gu, (size_t)n_rows * 2 * n_ff * 4, &dgu, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * n_ff * (out_bf16 ? 2 : 4), &dout, e));
    HX(cuda_launch_swiglu(h.st, dgu, CUDA_ACT_F32, n_rows, n_ff, dout, out_bf16 ? CUDA_ACT_BF16 : CUDA_ACT_F32, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dout, out_bf16 ? 1 : 0, (size_t)n_rows * n_ff, out, e));
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

extern "C" int cuda_harness_sample(const float *logits, int32_t n, int32_t n_vocab, int32_t n_ids,
                                   const struct sample_row *rows, int32_t *tokens, float *edited,
                                   struct sample_logprobs *lp, struct err *e)
{
    struct cuda_hx h;
    void *dl, *drows, *ded, *dtok, *dsaved, *dlr = NULL, *dpairs = NULL, *dnorms = NULL;
    struct cuda_draw_row *hrows = (struct cuda_draw_row *)malloc((size_t)n * sizeof *hrows);
    struct cuda_lp_row *hlr = (struct cuda_lp_row *)malloc((size_t)n * sizeof *hlr);
    size_t n_ed = 0, n_pairs = 0;
    for (int32_t i = 0; i < n; i++) n_ed += (size_t)rows[i].n_edits;
    struct logit_edit *hed = (struct logit_edit *)malloc((n_ed ? n_ed : 1) * sizeof *hed);
    struct cuda_lp_pair *hpairs = NULL;
    struct cuda_sample_lp dlp = {NULL, NULL, NULL};
    if (!hrows || !hlr || !hed) {
        err_set(e, "cuda harness: out of memory");
        goto fail_host;
    }
    {
        size_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            const struct sample_row *r = &rows[i];
            const int32_t mode = cuda_draw_mode_of(r->mode);
            hrows[i] = cuda_draw_row_of(r, mode, (int32_t)k);
            hlr[i] = cuda_lp_row_of(r, mode, n_ids, (int32_t)n_pairs);
            memcpy(hed + k, r->edits, (size_t)hrows[i].n_edits * sizeof *hed);
            k += (size_t)hrows[i].n_edits;
            n_pairs += hlr[i].n_top >= 0 ? 1 + (size_t)hlr[i].n_top : 0;
        }
    }
    if (n_pairs > 0 && !lp) {
        err_set(e, "cuda harness: rows ask for logprobs and there is no output");
        goto fail_host;
    }
    if (n_pairs > 0 && !(hpairs = (struct cuda_lp_pair *)malloc(n_pairs * sizeof *hpairs))) {
        err_set(e, "cuda harness: out of memory");
        goto fail_host;
    }
    if (cuda_hx_begin(&h, e)) goto fail;
    HX(cuda_hx_upload(&h, logits, (size_t)n * n_vocab * 4, &dl, e));
    HX(cuda_hx_upload(&h, hrows, (size_t)n * sizeof *hrows, &drows, e));
    HX(cuda_hx_upload(&h, hed, (n_ed ? n_ed : 1) * sizeof *hed, &ded, e));
    HX(cuda_hx_alloc(&h, (n_ed ? n_ed : 1) * 4, &dsaved, e));
    HX(cuda_hx_alloc(&h, (size_t)n * 4, &dtok, e));
    if (n_pairs > 0) { /* pairs and norms poisoned (NaN, token -1) like every output */
        HX(cuda_hx_upload(&h, hlr, (size_t)n * sizeof *hlr, &dlr, e));
        HX(cuda_hx_alloc(&h, n_pairs * sizeof *hpairs, &dpairs, e));
        HX(cuda_hx_alloc(&h, (size_t)n * sizeof(struct cuda_lp_norm), &dnorms, e));
        dlp = {(const struct cuda_lp_row *)dlr, (struct cuda_lp_pair *)dpairs, (struct cuda_lp_norm *)dnorms};
        HX(cuda_launch_logprobs(h.st, (const float *)dl, n_vocab, n_ids, &dlp, n, e));
    }
    HX(cuda_launch_sample(h.st, (float *)dl, n_vocab, n_ids, (const struct cuda_draw_row *)drows, ded,
                          (float *)dsaved, n, (int32_t *)dtok, n_pairs > 0 ? &dlp : NULL, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dtok, 0, (size_t)n, (float *)(void *)tokens, e)); /* 4-byte copy: ids as they are */
    if (edited) HX(cuda_hx_download(dl, 0, (size_t)n * n_vocab, edited, e));
    if (n_pairs > 0) {
        HX(cuda_hx_download(dpairs, 0, n_pairs * sizeof *hpairs / 4, (float *)(void *)hpairs, e));
        for (int32_t i = 0; i < n; i++)
            if (tokens[i] >= 0 && hlr[i].n_top >= 0) cuda_lp_unpack(hpairs + hlr[i].at, hlr[i].n_top, &lp[i]);
    }
    cuda_hx_free(&h);
    free(hrows);
    free(hlr);
    free(hed);
    free(hpairs);
    return 0;
fail:
    cuda_hx_free(&h);
fail_host:
    free(hrows);
    free(hlr);
    free(hed);
    free(hpairs);
    return -1;
}

#define CUBLAS_HX(call)                                                                                   \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            cuda_fail(e, __FILE__, __LINE__, #call, cublasGetStatusString(s_));                           \
            goto fail;                                                                                    \
        }                                                                                                 \
    } while (0)

/* The backend's matrix product (cuda_matmul: cuBLAS or the GEMV kernel), on a handle of its own. */
extern "C" int cuda_harness_gemm(const void *w, const void *x, int bf16, int32_t n_rows, int32_t n_in, int32_t n_out,
                                 float *y, struct err *e)
{
    struct cuda_hx h;
    cublasHandle_t blas = NULL;
    void *dw, *dx, *dy;
    const size_t el = bf16 ? 2 : 4;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, w, (size_t)n_out * n_in * el, &dw, e));
    HX(cuda_hx_upload(&h, x, (size_t)n_rows * n_in * el, &dx, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * n_out * 4, &dy, e));
    CUBLAS_HX(cublasCreate(&blas));
    CUBLAS_HX(cublasSetStream(blas, h.st));
    HX(cuda_matmul(h.st, blas, dw, bf16, dx, n_rows, n_in, n_out, dy, CUDA_ACT_F32, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dy, 0, (size_t)n_rows * n_out, y, e));
    cublasDestroy(blas);
    cuda_hx_free(&h);
    return 0;
fail:
    if (blas) cublasDestroy(blas);
    cuda_hx_free(&h);
    return -1;
}

/* The unfused side of cuda_harness_gemv_in: the input's kernel into act (n_in BF16, device), then cuda_matmul. */
static int cuda_hx_gemv_apart(struct cuda_hx *h, const struct cuda_gemv_in *in, const void *dw, const float *dscale,
                              int32_t n_in, int32_t n_out, void *act, void *dy, enum cuda_act y_type, struct err *e)
{
    cublasHandle_t blas = NULL;
    int rc =
        in->kind == CUDA_GEMV_IN_NORM
            ? cuda_launch_rmsnorm(h->st, in->x_out, in->add, in->w, in->rows, 1, n_in, in->eps, act, CUDA_ACT_BF16, e)
            : cuda_launch_swiglu(h->st, in->gu, CUDA_ACT_BF16, 1, n_in, act, CUDA_ACT_BF16, e);
    if (!rc && (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, h->st) != CUBLAS_STATUS_SUCCESS))
        rc = err_set(e, "cuda harness: cannot set up cuBLAS");
    if (!rc) rc = dscale ? cuda_launch_gemv(h->st, dw, dscale, act, n_in, n_out, dy, y_type, e)
                         : cuda_matmul(h->st, blas, dw, 1, act, 1, n_in, n_out, dy, y_type, e);
    if (!rc) rc = cuda_hx_sync(h, e);
    if (blas) cublasDestroy(blas);
    return rc;
}

extern "C" int cuda_harness_gemv_in(const struct cuda_harness_gemv_in *in, const void *w, int32_t n_in,
                                    int32_t n_out, int fused, int y_bf16, float *y, float *x_out, float *act,
                                    struct err *e)
{
    struct cuda_hx h;
    void *dw, *dx = NULL, *dadd = NULL, *dnw = NULL, *drow = NULL, *dgu = NULL, *dxo = NULL, *dact = NULL, *dy;
    void *dscale = NULL;
    const size_t nx = (size_t)in->n_x_rows * n_in;
    const enum cuda_act y_type = y_bf16 ? CUDA_ACT_BF16 : CUDA_ACT_F32;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, w, (size_t)n_out * n_in * (in->w_scale ? 1 : 2), &dw, e));
    HX(cuda_hx_upload(&h, in->w_scale, (size_t)n_out * 4, &dscale, e));
    HX(cuda_hx_alloc(&h, (size_t)n_out * (y_bf16 ? 2 : 4), &dy, e));
    if (in->swiglu) {
        HX(cuda_hx_upload(&h, in->gu, (size_t)n_in * 4, &dgu, e));
    } else {
        HX(cuda_hx_upload(&h, in->x, nx * 4, &dx, e));
        HX(cuda_hx_upload(&h, in->add, nx * 4, &dadd, e));
        HX(cuda_hx_upload(&h, in->norm_w, (size_t)n_in * 4, &dnw, e));
        HX(cuda_hx_upload(&h, &in->row, 4, &drow, e));
        if (fused) HX(cuda_hx_alloc(&h, (size_t)n_in * 4, &dxo, e));
    }
    {
        const struct cuda_gemv_in gi =
            in->swiglu ? cuda_gemv_swiglu(dgu, CUDA_ACT_BF16)
                       : cuda_gemv_norm((const float *)dx, (const float *)dadd, (const float *)dnw,
                                        (const int32_t *)drow, in->eps, fused ? (float *)dxo : (float *)dx);
        if (fused)
            HX(cuda_launch_gemv_fused(h.st, dw, (const float *)dscale, n_in, n_out, &gi, dy, y_type, e) ||
               cuda_hx_sync(&h, e));
        else HX(cuda_hx_alloc(&h, (size_t)n_in * 2, &dact, e) ||
                cuda_hx_gemv_apart(&h, &gi, dw, (const float *)dscale, n_in, n_out, dact, dy, y_type, e));
    }
    HX(cuda_hx_download(dy, y_bf16 ? 1 : 0, (size_t)n_out, y, e));
    if (!in->swiglu)
        HX(cuda_hx_download(fused ? dxo : (char *)dx + (size_t)in->row * n_in * 4, 0, (size_t)n_in, x_out, e));
    if (!fused && act) HX(cuda_hx_download(dact, 1, (size_t)n_in, act, e));
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

/* ---------------------------------------------------------------- FP8 */

extern "C" int cuda_harness_fp8_rows(const float *in, int in_bf16, int64_t n_rows, int32_t n, uint8_t *q, float *scale,
                                     struct err *e)
{
    struct cuda_hx h;
    void *din, *dq, *ds;
    const size_t count = (size_t)n_rows * (size_t)n;
    uint16_t *b = NULL;
    if (cuda_hx_begin(&h, e)) return -1;
    if (in_bf16) {
        b = (uint16_t *)malloc(count * 2);
        if (!b) HX(err_set(e, "cuda harness: out of memory"));
        for (size_t i = 0; i < count; i++) b[i] = quant_f32_to_bf16(in[i]);
    }
    HX(cuda_hx_upload(&h, in_bf16 ? (const void *)b : (const void *)in, count * (in_bf16 ? 2 : 4), &din, e));
    HX(cuda_hx_alloc(&h, count, &dq, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * 4, &ds, e));
    HX(cuda_launch_fp8_rows(h.st, din, in_bf16 ? CUDA_ACT_BF16 : CUDA_ACT_F32, n_rows, n, (uint8_t *)dq, (float *)ds,
                            e));
    HX(cuda_hx_sync(&h, e));
    CU_TRY(cudaMemcpy(q, dq, count, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(scale, ds, (size_t)n_rows * 4, cudaMemcpyDeviceToHost));
    free(b);
    cuda_hx_free(&h);
    return 0;
fail:
    free(b);
    cuda_hx_free(&h);
    return -1;
}

extern "C" int cuda_harness_fp8_gemm(const uint8_t *w, const float *w_scale, const uint8_t *x, const float *x_scale,
                                     int32_t n_rows, int32_t n_in, int32_t n_out, int y_bf16, float *y, struct err *e)
{
    struct cuda_hx h;
    struct cuda_lt *lt = NULL;
    void *dw, *dws, *dx, *dxs, *dy, *ws;
    const size_t ws_bytes = 32u << 20;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, w, (size_t)n_out * n_in, &dw, e));
    HX(cuda_hx_upload(&h, w_scale, (size_t)n_out * 4, &dws, e));
    HX(cuda_hx_upload(&h, x, (size_t)n_rows * n_in, &dx, e));
    HX(cuda_hx_upload(&h, x_scale, (size_t)n_rows * 4, &dxs, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * n_out * (y_bf16 ? 2 : 4), &dy, e));
    HX(cuda_hx_alloc(&h, ws_bytes, &ws, e));
    HX(cuda_lt_init(&lt, ws, ws_bytes, e));
    HX(cuda_matmul_fp8(h.st, lt, (const uint8_t *)dw, (const float *)dws, (const uint8_t *)dx, (const float *)dxs,
                       n_rows, n_in, n_out, dy, y_bf16 ? CUDA_ACT_BF16 : CUDA_ACT_F32, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dy, y_bf16 ? 1 : 0, (size_t)n_rows * n_out, y, e));
    cuda_lt_free(lt);
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_lt_free(lt);
    cuda_hx_free(&h);
    return -1;
}

/* ---------------------------------------------------------------- weights at load */

extern "C" int cuda_harness_dequant(enum gguf_dtype t, const void *src, int64_t n_rows, int64_t n_in, uint16_t *out,
                                    struct err *e)
{
    struct cuda_hx h;
    void *ds, *dd;
    const uint64_t row_bytes = gguf_row_bytes((uint32_t)t, (uint64_t)n_in);
    cudaError_t rc;
    if (row_bytes == 0)
        return err_set(e, "cuda harness: %lld elements of type %d are not whole blocks", (long long)n_in, (int)t);
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_upload(&h, src, (size_t)(row_bytes * (uint64_t)n_rows), &ds, e));
    HX(cuda_hx_alloc(&h, (size_t)n_rows * (size_t)n_in * 2, &dd, e));
    HX(cuda_launch_dequant(h.st, t, ds, n_rows, n_in, (uint16_t *)dd, e));
    HX(cuda_hx_sync(&h, e));
    rc = cudaMemcpy(out, dd, (size_t)n_rows * (size_t)n_in * 2, cudaMemcpyDeviceToHost);
    if (rc != cudaSuccess) {
        cuda_fail(e, __FILE__, __LINE__, "download", cudaGetErrorString(rc));
        goto fail;
    }
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

/* ---------------------------------------------------------------- attention */

extern "C" uint64_t cuda_harness_pool_floats(const struct cuda_harness_attn *h)
{
    return (uint64_t)h->n_blocks * (uint64_t)h->n_head_kv * (uint64_t)h->block_size * (uint64_t)h->head_dim;
}

/* Head vectors of one layer of h. */
static uint64_t cuda_hx_pool_vecs(const struct cuda_harness_attn *h)
{
    return (uint64_t)h->n_blocks * (uint64_t)h->n_head_kv * (uint64_t)h->block_size;
}

extern "C" uint64_t cuda_harness_pool_bytes(const struct cuda_harness_attn *h)
{
    return cuda_kv_layer_bytes(cuda_hx_pool_vecs(h), h->head_dim, h->kv_type);
}

/* Q8_0 and FP8 need whole groups of 32 in every head vector. */
static int cuda_hx_check_q8(const struct cuda_harness_attn *h, struct err *e)
{
    if (cuda_kv_grouped(h->kv_type) && h->head_dim % 32)
        return err_set(e, "cuda harness: %s KV needs head_dim %% 32 == 0 (%d)", model_kv_type_name(h->kv_type),
                       (int)h->head_dim);
    return 0;
}

/* One group of 32 as fp8 KV, on the host with the device's arithmetic (cuda_device.cuh's cuda_kv8_*: f32
 * division, e4m3 to nearest even saturated, the scale's f16 bits): q (32 bytes), *scale. */
static void cuda_hx_fp8_group(const float *x, uint8_t *q, uint16_t *scale)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 448.0f;
    for (int i = 0; i < 32; i++)
        q[i] = d > 0.0f ? (uint8_t)__nv_cvt_float_to_fp8(x[i] / d, __NV_SATFINITE, __NV_E4M3) : 0;
    *scale = quant_f32_to_f16(d);
}

extern "C" int cuda_harness_pool_pack(const struct cuda_harness_attn *h, const float *pool, void *bytes, struct err *e)
{
    const uint64_t n = cuda_harness_pool_floats(h);
    uint8_t *out = (uint8_t *)bytes;
    if (cuda_hx_check_q8(h, e)) return -1;
    memset(out, 0, (size_t)cuda_harness_pool_bytes(h));
    if (h->kv_type == KV_TYPE_F32) {
        memcpy(out, pool, (size_t)n * 4);
    } else if (h->kv_type == KV_TYPE_F16) {
        for (uint64_t i = 0; i < n; i++) {
            const uint16_t v = quant_f32_to_f16(pool[i]);
            memcpy(out + 2 * i, &v, 2);
        }
    } else if (h->kv_type == KV_TYPE_FP8) {
        for (uint64_t g = 0; g < n / 32; g++) {
            uint16_t sc;
            cuda_hx_fp8_group(pool + 32 * g, out + 32 * g, &sc);
            memcpy(out + n + 2 * g, &sc, 2);
        }
    } else {
        uint8_t blk[34]; /* a GGUF Q8_0 block: f16 scale, 32 int8 */
        for (uint64_t g = 0; g < n / 32; g++) {
            quant_quantize_row(GGUF_DTYPE_Q8_0, pool + 32 * g, blk, 32);
            memcpy(out + 32 * g, blk + 2, 32);
            memcpy(out + n + 2 * g, blk, 2);
        }
    }
    return 0;
}

extern "C" int cuda_harness_pool_unpack(const struct cuda_harness_attn *h, const void *bytes, float *pool,
                                        struct err *e)
{
    const uint64_t n = cuda_harness_pool_floats(h);
    const uint8_t *in = (const uint8_t *)bytes;
    if (cuda_hx_check_q8(h, e)) return -1;
    if (h->kv_type == KV_TYPE_F32) {
        memcpy(pool, in, (size_t)n * 4);
    } else if (h->kv_type == KV_TYPE_F16) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, in + 2 * i, 2);
            pool[i] = quant_f16_to_f32(v);
        }
    } else if (h->kv_type == KV_TYPE_FP8) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t sc;
            memcpy(&sc, in + n + 2 * (i / 32), 2);
            const __half v = __half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)in[i], __NV_E4M3));
            pool[i] = __half2float(v) * quant_f16_to_f32(sc);
        }
    } else {
        uint8_t blk[34];
        for (uint64_t g = 0; g < n / 32; g++) {
            memcpy(blk, in + n + 2 * g, 2);
            memcpy(blk + 2, in + 32 * g, 32);
            quant_dequantize_row(GGUF_DTYPE_Q8_0, blk, pool + 32 * g, 32);
        }
    }
    return 0;
}

static struct cuda_attn_geom cuda_hx_geom(const struct cuda_harness_attn *a)
{
    const uint64_t scales =
        cuda_kv_grouped(a->kv_type) ? cuda_kv_values_bytes(cuda_hx_pool_vecs(a), a->head_dim, a->kv_type) : 0;
    return {a->n_head,    a->n_head_kv,  a->head_dim, a->n_rot,
            a->rope_neox, a->block_size, a->kv_type,  a->norm_eps,
            (enum cuda_attn_kernel)a->kernel, scales};
}

/* The backend's attention plan of a's rows (cuda_attn_plan), in host memory (cuda_hx_plan_free frees it). */
struct cuda_hx_plan {
    struct cuda_attn_item *items;
    int32_t *part_off, *split_rows;
    int64_t n_items, n_parts;
    int32_t n_split, max_rows, n_lone;
};

static void cuda_hx_plan_free(struct cuda_hx_plan *p)
{
    free(p->items);
    free(p->part_off);
    free(p->split_rows);
}

/* 0 ok, -1 out of memory (p freeable either way). max_parts 0: no item split. */
static int cuda_hx_plan_make(const struct cuda_harness_attn *a, int64_t max_parts, struct cuda_hx_plan *p)
{
    const int32_t R = a->n_rows;
    *p = {};
    p->items = (struct cuda_attn_item *)malloc((size_t)cuda_attn_max_items(R, max_parts) * sizeof *p->items);
    p->part_off = (int32_t *)malloc((size_t)R * 4);
    p->split_rows = (int32_t *)malloc((size_t)R * 4);
    if (!p->items || !p->part_off || !p->split_rows) return -1;
    const int32_t per = cuda_attn_rows(a->n_head / a->n_head_kv, (enum cuda_attn_kernel)a->kernel);
    p->n_items = cuda_attn_plan(R, a->pos, a->seq, per, max_parts, p->items, p->part_off, p->split_rows, &p->n_parts,
                                &p->n_split, &p->max_rows, &p->n_lone);
    return 0;
}

/* Uploads the batch of a (and its attention plan: split or not) into bd. */
static int cuda_hx_batch(struct cuda_hx *x, const struct cuda_harness_attn *a, int split, struct cuda_batch_dev *bd,
                         struct err *e)
{
    const int32_t R = a->n_rows;
    struct cuda_hx_plan p;
    void *dpos, *dseq, *doff, *dbt, *dpo, *dsr, *dit;
    int rc = -1;
    if (cuda_hx_plan_make(a, split ? 1 << 20 : 0, &p)) {
        err_set(e, "cuda harness: out of memory");
    } else if (!(cuda_hx_upload(x, a->pos, (size_t)R * 4, &dpos, e) ||
                 cuda_hx_upload(x, a->seq, (size_t)R * 4, &dseq, e) ||
                 cuda_hx_upload(x, a->bt_off, (size_t)a->n_seqs * 4, &doff, e) ||
                 cuda_hx_upload(x, a->bt, (size_t)a->n_bt * 4, &dbt, e) ||
                 cuda_hx_upload(x, p.part_off, (size_t)R * 4, &dpo, e) ||
                 cuda_hx_upload(x, p.split_rows, (size_t)R * 4, &dsr, e) ||
                 cuda_hx_upload(x, p.items, (size_t)p.n_items * sizeof *p.items, &dit, e))) {
        *bd = {R, NULL, (const int32_t *)dpos, (const int32_t *)dseq, (const int32_t *)doff, (const int32_t *)dbt,
               (const int32_t *)dpo, NULL, (const struct cuda_attn_item *)dit, (int32_t)p.n_items,
               (const int32_t *)dsr, p.n_split, p.max_rows, split == 1 ? p.n_lone : 0};
        rc = 0;
    }
    cuda_hx_plan_free(&p);
    return rc;
}

extern "C" int cuda_harness_qkv_bytes(const struct cuda_harness_attn *a, float *qkv, const float *bias,
                                      const float *q_norm, const float *k_norm, const float *cs, void *k_bytes,
                                      void *v_bytes, struct err *e)
{
    struct cuda_hx h;
    struct cuda_batch_dev bd;
    void *dqkv, *db, *dqn, *dkn, *dcs, *dk, *dv;
    const struct cuda_attn_geom g = cuda_hx_geom(a);
    const int32_t w = (a->n_head + 2 * a->n_head_kv) * a->head_dim;
    const size_t pool = (size_t)cuda_harness_pool_bytes(a);
    cudaError_t rc;
    if (cuda_hx_begin(&h, e)) return -1; /* q8_0 at head_dim % 32 != 0: the launcher refuses it (tested) */
    HX(cuda_hx_batch(&h, a, 0, &bd, e));
    HX(cuda_hx_upload(&h, qkv, (size_t)a->n_rows * w * 4, &dqkv, e));
    HX(cuda_hx_upload(&h, bias, (size_t)w * 4, &db, e));
    HX(cuda_hx_upload(&h, q_norm, (size_t)a->head_dim * 4, &dqn, e));
    HX(cuda_hx_upload(&h, k_norm, (size_t)a->head_dim * 4, &dkn, e));
    HX(cuda_hx_upload(&h, cs, (size_t)a->n_rows * a->n_rot * 4 + 4, &dcs, e));
    HX(cuda_hx_upload(&h, k_bytes, pool, &dk, e));
    HX(cuda_hx_upload(&h, v_bytes, pool, &dv, e));
    HX(cuda_launch_qkv(h.st, &g, &bd, (float *)dqkv, (const float *)db, (const float *)dqn, (const float *)dkn,
                       (const float *)dcs, dk, dv, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dqkv, 0, (size_t)a->n_rows * w, qkv, e));
    rc = cudaMemcpy(k_bytes, dk, pool, cudaMemcpyDeviceToHost);
    if (rc == cudaSuccess) rc = cudaMemcpy(v_bytes, dv, pool, cudaMemcpyDeviceToHost);
    if (rc != cudaSuccess) {
        cuda_fail(e, __FILE__, __LINE__, "download", cudaGetErrorString(rc));
        goto fail;
    }
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

extern "C" int cuda_harness_qkv(const struct cuda_harness_attn *a, float *qkv, const float *bias,
                                const float *q_norm, const float *k_norm, const float *cs, float *k_pool, float *v_pool,
                                struct err *e)
{
    const size_t pool = (size_t)cuda_harness_pool_bytes(a);
    void *kb = malloc(pool + 16), *vb = malloc(pool + 16);
    int rc = -1;
    if (!kb || !vb) err_set(e, "cuda harness: out of memory");
    else if (!cuda_harness_pool_pack(a, k_pool, kb, e) && !cuda_harness_pool_pack(a, v_pool, vb, e) &&
             !cuda_harness_qkv_bytes(a, qkv, bias, q_norm, k_norm, cs, kb, vb, e) &&
             !cuda_harness_pool_unpack(a, kb, k_pool, e) && !cuda_harness_pool_unpack(a, vb, v_pool, e))
        rc = 0;
    free(kb);
    free(vb);
    return rc;
}

extern "C" int64_t cuda_harness_attn_plan(const struct cuda_harness_attn *h, int32_t *n_lone, int32_t *max_item_rows)
{
    struct cuda_hx_plan p;
    const int rc = cuda_hx_plan_make(h, 1 << 20, &p);
    *n_lone = p.n_lone;
    *max_item_rows = p.max_rows;
    cuda_hx_plan_free(&p);
    return rc ? -1 : p.n_items;
}

extern "C" int cuda_harness_attn(const struct cuda_harness_attn *a, const float *qkv, const float *k_pool,
                                 const float *v_pool, int split, int out_bf16, float *out, int32_t *n_split_rows,
                                 struct err *e)
{
    struct cuda_hx h;
    struct cuda_batch_dev bd;
    void *dqkv, *dk, *dv, *dout, *dacc, *dml;
    const struct cuda_attn_geom g = cuda_hx_geom(a);
    const int32_t w = (a->n_head + 2 * a->n_head_kv) * a->head_dim, n_q = a->n_head * a->head_dim;
    const enum cuda_act ot = out_bf16 ? CUDA_ACT_BF16 : CUDA_ACT_F32;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_batch(&h, a, split, &bd, e));
    HX(cuda_hx_upload(&h, qkv, (size_t)a->n_rows * w * 4, &dqkv, e));
    HX(cuda_hx_upload_kv(&h, a, k_pool, &dk, e));
    HX(cuda_hx_upload_kv(&h, a, v_pool, &dv, e));
    HX(cuda_hx_alloc(&h, (size_t)a->n_rows * n_q * (out_bf16 ? 2 : 4), &dout, e));
    /* partials: as many slots as the plan used (at most Σ pos / chunk + 1 over the rows) */
    {
        size_t parts = 1;
        for (int32_t r = 0; r < a->n_rows; r++) parts += (size_t)(a->pos[r] / CUDA_ATT_CHUNK + 1);
        HX(cuda_hx_alloc(&h, parts * (size_t)n_q * 4, &dacc, e));
        HX(cuda_hx_alloc(&h, parts * (size_t)a->n_head * 2 * 4, &dml, e));
    }
    HX(cuda_launch_attn(h.st, h.st, &g, &bd, (const float *)dqkv, w, dk, dv, dout, ot, (float *)dacc, (float *)dml, e));
    HX(cuda_launch_attn_combine(h.st, &g, &bd, (const float *)dacc, (const float *)dml, dout, ot, e));
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_download(dout, out_bf16 ? 1 : 0, (size_t)a->n_rows * n_q, out, e));
    if (n_split_rows) *n_split_rows = bd.n_split_rows;
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}

/* ---------------------------------------------------------------- ceilings */

/* Random BF16 values in [-1, 1) from a hash of the index (never zeros). */
__global__ void cuda_hx_fill_bf16(__nv_bfloat16 *p, int64_t n, uint64_t seed)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = (uint64_t)i + seed * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        p[i] = __float2bfloat16_rn((float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f);
    }
}

static int cuda_hx_cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of reps timings (ms) of fn(arg) on st, after 3 warm-ups. */
typedef int (*cuda_hx_fn)(void *arg, cudaStream_t st);

static int cuda_hx_time(cuda_hx_fn fn, void *arg, cudaStream_t st, int reps, float *median_ms, struct err *e)
{
    cudaEvent_t a = NULL, b = NULL;
    float *ms = (float *)calloc((size_t)(reps > 0 ? reps : 1), sizeof(float));
    int rc = -1;
    if (!ms) return err_set(e, "cuda harness: out of memory");
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) goto out;
    for (int i = 0; i < 3; i++)
        if (fn(arg, st)) goto out;
    for (int i = 0; i < reps; i++) {
        if (cudaEventRecord(a, st) != cudaSuccess || fn(arg, st) || cudaEventRecord(b, st) != cudaSuccess ||
            cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms[i], a, b) != cudaSuccess)
            goto out;
    }
    qsort(ms, (size_t)reps, sizeof(float), cuda_hx_cmp_float);
    *median_ms = ms[reps / 2];
    rc = 0;
out:
    if (rc) err_set(e, "cuda harness: timing failed: %s", cudaGetErrorString(cudaGetLastError()));
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    free(ms);
    return rc;
}

struct cuda_hx_gemm {
    cublasHandle_t blas;
    int32_t n;
    void *a, *b, *c;
};

static int cuda_hx_run_gemm(void *arg, cudaStream_t st)
{
    (void)st;
    const struct cuda_hx_gemm *g = (const struct cuda_hx_gemm *)arg;
    const float one = 1.0f, zero = 0.0f;
    return cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a, CUDA_R_16BF, g->n, g->b,
                        CUDA_R_16BF, g->n, &zero, g->c, CUDA_R_16BF, g->n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
}

extern "C" int cuda_harness_gemm_rate(int32_t n, int reps, double *tflops, struct err *e)
{
    struct cuda_hx h;
    struct cuda_hx_gemm g = {NULL, n, NULL, NULL, NULL};
    const size_t el = (size_t)n * n;
    float ms = 0.0f;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_alloc(&h, el * 2, &g.a, e));
    HX(cuda_hx_alloc(&h, el * 2, &g.b, e));
    HX(cuda_hx_alloc(&h, el * 2, &g.c, e));
    cuda_hx_fill_bf16<<<1024, 256, 0, h.st>>>((__nv_bfloat16 *)g.a, (int64_t)el, 1);
    cuda_hx_fill_bf16<<<1024, 256, 0, h.st>>>((__nv_bfloat16 *)g.b, (int64_t)el, 2);
    HX(cuda_hx_sync(&h, e));
    CUBLAS_HX(cublasCreate(&g.blas));
    CUBLAS_HX(cublasSetStream(g.blas, h.st));
    HX(cuda_hx_time(cuda_hx_run_gemm, &g, h.st, reps, &ms, e));
    *tflops = 2.0 * (double)n * n * n / ((double)ms * 1e-3) / 1e12;
    cublasDestroy(g.blas);
    cuda_hx_free(&h);
    return 0;
fail:
    if (g.blas) cublasDestroy(g.blas);
    cuda_hx_free(&h);
    return -1;
}

struct cuda_hx_copy {
    void *src, *dst;
    size_t bytes;
};

static int cuda_hx_run_copy(void *arg, cudaStream_t st)
{
    const struct cuda_hx_copy *c = (const struct cuda_hx_copy *)arg;
    return cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, st) != cudaSuccess;
}

extern "C" int cuda_harness_copy_rate(uint64_t bytes, int reps, double *gbs, struct err *e)
{
    struct cuda_hx h;
    struct cuda_hx_copy c = {NULL, NULL, (size_t)bytes};
    float ms = 0.0f;
    if (cuda_hx_begin(&h, e)) return -1;
    HX(cuda_hx_alloc(&h, c.bytes, &c.src, e));
    HX(cuda_hx_alloc(&h, c.bytes, &c.dst, e));
    cuda_hx_fill_bf16<<<1024, 256, 0, h.st>>>((__nv_bfloat16 *)c.src, (int64_t)(c.bytes / 2), 3);
    HX(cuda_hx_sync(&h, e));
    HX(cuda_hx_time(cuda_hx_run_copy, &c, h.st, reps, &ms, e));
    *gbs = 2.0 * (double)bytes / ((double)ms * 1e-3) / 1e9;
    cuda_hx_free(&h);
    return 0;
fail:
    cuda_hx_free(&h);
    return -1;
}
