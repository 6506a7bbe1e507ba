/* cuda_upload — the CUDA backend's weights at load (cuda.cu's top comment states their invariants): the
 * matrices' type for the load (BF16, the file's F32, or FP8: cuda_pick_wtype), the upload through pinned
 * staging in two halves with the conversion on the device (cuda_dequant.cu's dequantization to BF16, then
 * cuda_fp8.cu's row quantizer for FP8), the norms, biases and RoPE frequencies, and freeing them. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "gguf/quant.h"
#include "model/model.h"
}
#include "backend/cuda_ctx.h"

#define CUDA_STAGING (64u << 20) /* pinned staging for the weight upload, two halves */

/* ---------------------------------------------------------------- weights */

/* The weight upload's buffers: pinned staging in two halves (the host fills one while the other is in
 * flight; done[k] is recorded after the work that reads half k) and its device twin, where quantized rows
 * wait for the dequantization kernel. */
struct cuda_upload {
    void *staging;     /* pinned, CUDA_STAGING bytes */
    void *dev_staging; /* device, CUDA_STAGING bytes */
    void *dev_bf16;    /* device, CUDA_STAGING / 2 bytes: a chunk's BF16 rows on their way to FP8 (FP8 loads) */
    cudaEvent_t done[2];
};

static size_t cuda_wtype_bytes(enum cuda_wtype t)
{
    return t == CUDA_W_F32 ? 4 : t == CUDA_W_BF16 ? 2 : 1;
}

/* One chunk of cuda_upload_rows: nr rows of in_row bytes from src through staging half k into rows r0.. of
 * mx: copied as they are (raw), or dequantized to BF16 on the device from the device half, or for an FP8
 * matrix quantized on the device (from the raw BF16 or F32 rows, or from their BF16 dequantization in
 * dev_bf16, which the stream's order frees before the next chunk writes it). */
static int cuda_upload_chunk(struct cuda_ctx *c, struct cuda_upload *u, int k, const struct model_weight *w,
                             const char *src, int64_t nr, uint64_t in_row, int raw, struct cuda_matrix *mx, int64_t r0,
                             struct err *e)
{
    const size_t half = CUDA_STAGING / 2, out_row = (size_t)mx->n_in * cuda_wtype_bytes(mx->type);
    char *buf = (char *)u->staging + (size_t)k * half, *dbuf = (char *)u->dev_staging + (size_t)k * half;
    char *out = (char *)mx->d + (size_t)r0 * out_row;
    CU_TRY(cudaEventSynchronize(u->done[k])); /* half k's previous copy (and kernel) are done with it */
    memcpy(buf, src, (size_t)nr * in_row);
    if (raw) {
        CU_TRY(cudaMemcpyAsync(out, buf, (size_t)nr * out_row, cudaMemcpyHostToDevice, c->st));
    } else {
        CU_TRY(cudaMemcpyAsync(dbuf, buf, (size_t)nr * in_row, cudaMemcpyHostToDevice, c->st));
        const int direct = mx->type == CUDA_W_FP8 && (w->type == GGUF_DTYPE_BF16 || w->type == GGUF_DTYPE_F32);
        void *bf16 = mx->type == CUDA_W_FP8 ? u->dev_bf16 : out;
        if (!direct && cuda_launch_dequant(c->st, w->type, dbuf, nr, w->ne[0], (uint16_t *)bf16, e)) return -1;
        if (mx->type == CUDA_W_FP8 &&
            cuda_launch_fp8_rows(c->st, direct ? dbuf : bf16, w->type == GGUF_DTYPE_F32 ? CUDA_ACT_F32 : CUDA_ACT_BF16,
                                 nr, mx->n_in, (uint8_t *)out, mx->scale + r0, e))
            return -1;
    }
    CU_TRY(cudaEventRecord(u->done[k], c->st));
    return 0;
}

/* Uploads the rows of w into rows r0.. of mx (n_in = w->ne[0]). Rows already in the matrix's type (BF16
 * into BF16, F32 into F32) are copied as they are; the others go up as their raw bytes and the device
 * converts them (cuda_upload_chunk). Chunks of rows alternate between the two staging halves, so the host
 * copies one chunk while the previous one is on its way. */
static int cuda_upload_rows(struct cuda_ctx *c, const struct model_weight *w, struct cuda_matrix *mx, int64_t r0,
                            struct cuda_upload *u, struct err *e)
{
    const int64_t n_in = w->ne[0], n_rows = w->ne[1];
    const size_t half = CUDA_STAGING / 2;
    const uint64_t in_row = gguf_row_bytes((uint32_t)w->type, (uint64_t)n_in);
    const int raw = (mx->type == CUDA_W_BF16 && w->type == GGUF_DTYPE_BF16) ||
                    (mx->type == CUDA_W_F32 && w->type == GGUF_DTYPE_F32);
    const int fp8_direct = mx->type == CUDA_W_FP8 && (w->type == GGUF_DTYPE_BF16 || w->type == GGUF_DTYPE_F32);
    if (!raw && !fp8_direct && (mx->type == CUDA_W_F32 || !cuda_dequant_supported(w->type)))
        return err_set(e, "cuda backend: %s: cannot convert type %d on the device", w->name, (int)w->type);
    /* a chunk's raw rows fit a staging half, and for FP8 its BF16 rows fit dev_bf16 */
    const uint64_t per_row = mx->type == CUDA_W_FP8 && 2 * (uint64_t)n_in > in_row ? 2 * (uint64_t)n_in : in_row;
    if (in_row == 0 || per_row > half)
        return err_set(e, "cuda backend: %s: rows of %lld elements are too long", w->name, (long long)n_in);
    const int64_t per = (int64_t)(half / per_row);
    int k = 0;
    for (int64_t i = 0; i < n_rows; i += per, k ^= 1) {
        const int64_t nr = n_rows - i < per ? n_rows - i : per;
        if (cuda_upload_chunk(c, u, k, w, (const char *)w->data + (uint64_t)i * in_row, nr, in_row, raw, mx, r0 + i, e))
            return err_prefix(e, "uploading %s", w->name);
    }
    return 0;
}

/* Allocates a matrix of the stacked rows of ws[0..n) (same n_in) and uploads them: FP8 when fp8 is asked and
 * the rows are whole 16-byte groups of e4m3 (n_in % 16 == 0: the FP8 GEMM's and GEMV's access), else BF16
 * unless all are F32. */
static int cuda_upload_matrix(struct cuda_ctx *c, struct cuda_upload *u, const struct model_weight *const *ws, int n,
                              int fp8, struct cuda_matrix *out, struct err *e)
{
    int64_t rows = 0;
    int all_f32 = 1;
    for (int i = 0; i < n; i++) {
        if (ws[i]->ne[0] != ws[0]->ne[0])
            return err_set(e, "cuda backend: %s and %s differ in width", ws[0]->name, ws[i]->name);
        if (!quant_can_dequantize(ws[i]->type))
            return err_set(e, "cuda backend: %s has type %d, which cannot be dequantized", ws[i]->name,
                           (int)ws[i]->type);
        rows += ws[i]->ne[1];
        all_f32 &= ws[i]->type == GGUF_DTYPE_F32;
    }
    out->n_in = (int32_t)ws[0]->ne[0];
    out->n_out = (int32_t)rows;
    out->type = fp8 && out->n_in % 16 == 0 ? CUDA_W_FP8 : all_f32 ? CUDA_W_F32 : CUDA_W_BF16;
    const size_t bytes = (size_t)out->n_in * cuda_wtype_bytes(out->type) * (size_t)rows;
    CU_TRY(cudaMalloc(&out->d, bytes));
    c->weight_bytes += bytes;
    if (out->type == CUDA_W_FP8) {
        CU_TRY(cudaMalloc(&out->scale, (size_t)rows * sizeof(float)));
        c->weight_bytes += (size_t)rows * sizeof(float);
    }
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        if (cuda_upload_rows(c, ws[i], out, r0, u, e)) return -1;
        r0 += ws[i]->ne[1];
    }
    return 0;
}

/* Uploads an F32 vector (norm, bias); *out stays NULL when w has no data. Synchronous (small). */
static int cuda_upload_f32(struct cuda_ctx *c, const struct model_weight *w, float **out, struct err *e)
{
    *out = NULL;
    if (!w->data) return 0;
    const size_t n = (size_t)w->ne[0] * (size_t)w->ne[1] * sizeof(float);
    CU_TRY(cudaMalloc(out, n));
    CU_TRY(cudaMemcpy(*out, w->data, n, cudaMemcpyHostToDevice));
    c->weight_bytes += n;
    return 0;
}

static void cuda_free_matrix(struct cuda_matrix *mx)
{
    cuda_free_ptr(&mx->d);
    cuda_free_ptr((void **)&mx->scale);
}

void cuda_free_weights(struct cuda_ctx *c)
{
    c->gen++; /* graphs point at the weights */
    if (c->layers && c->m) {
        for (int32_t il = 0; il < c->m->hp.n_layer; il++) {
            struct cuda_layer *L = &c->layers[il];
            cuda_free_ptr((void **)&L->attn_norm);
            cuda_free_ptr((void **)&L->ffn_norm);
            cuda_free_ptr((void **)&L->bqkv);
            cuda_free_ptr((void **)&L->q_norm);
            cuda_free_ptr((void **)&L->k_norm);
            cuda_free_matrix(&L->qkv);
            cuda_free_matrix(&L->wo);
            cuda_free_matrix(&L->gate_up);
            cuda_free_matrix(&L->down);
        }
    }
    free(c->layers);
    c->layers = NULL;
    if (c->output.d == c->embd.d) c->output.d = c->output.scale = NULL;
    cuda_free_matrix(&c->output);
    cuda_free_matrix(&c->embd);
    cuda_free_ptr((void **)&c->output_norm);
    cuda_free_ptr((void **)&c->inv_freq);
    c->weight_bytes = 0;
}

/* The q/k/v biases of a qwen2 layer as one vector (n_q + 2 n_kv), in the fused matrix's row order. */
static int cuda_upload_bias(struct cuda_ctx *c, const struct model_layer *M, float **out, struct err *e)
{
    *out = NULL;
    if (!M->bq.data && !M->bk.data && !M->bv.data) return 0;
    const int64_t nq = M->wq.ne[1], nkv = M->wk.ne[1], n = nq + 2 * nkv;
    float *h = (float *)calloc((size_t)n, sizeof(float));
    if (!h) return err_set(e, "cuda backend: out of memory");
    if (M->bq.data) memcpy(h, M->bq.data, (size_t)nq * 4);
    if (M->bk.data) memcpy(h + nq, M->bk.data, (size_t)nkv * 4);
    if (M->bv.data) memcpy(h + nq + nkv, M->bv.data, (size_t)nkv * 4);
    cudaError_t rc = cudaMalloc(out, (size_t)n * 4);
    if (rc == cudaSuccess) rc = cudaMemcpy(*out, h, (size_t)n * 4, cudaMemcpyHostToDevice);
    free(h);
    if (rc != cudaSuccess) return cuda_fail(e, __FILE__, __LINE__, "bias upload", cudaGetErrorString(rc));
    c->weight_bytes += (uint64_t)n * 4;
    return 0;
}

static int cuda_upload_layer(struct cuda_ctx *c, struct cuda_upload *u, int32_t il, struct err *e)
{
    const struct model_layer *M = &c->m->layers[il];
    struct cuda_layer *L = &c->layers[il];
    const struct model_weight *qkv[] = {&M->wq, &M->wk, &M->wv}, *wo[] = {&M->wo}, *gu[] = {&M->w_gate, &M->w_up},
                              *down[] = {&M->w_down};
    const int fp8 = c->layer_wtype == CUDA_W_FP8;
    if (cuda_upload_f32(c, &M->attn_norm, &L->attn_norm, e) || cuda_upload_f32(c, &M->ffn_norm, &L->ffn_norm, e) ||
        cuda_upload_f32(c, &M->q_norm, &L->q_norm, e) || cuda_upload_f32(c, &M->k_norm, &L->k_norm, e) ||
        cuda_upload_bias(c, M, &L->bqkv, e) || cuda_upload_matrix(c, u, qkv, 3, fp8, &L->qkv, e) ||
        cuda_upload_matrix(c, u, wo, 1, fp8, &L->wo, e) || cuda_upload_matrix(c, u, gu, 2, fp8, &L->gate_up, e) ||
        cuda_upload_matrix(c, u, down, 1, fp8, &L->down, e))
        return err_prefix(e, "layer %d", (int)il);
    return 0;
}

int cuda_upload_weights(struct cuda_ctx *c, struct err *e)
{
    const struct model *m = c->m;
    struct cuda_upload u = {NULL, NULL, NULL, {NULL, NULL}};
    int rc = -1;
    c->layers = (struct cuda_layer *)calloc((size_t)m->hp.n_layer, sizeof *c->layers);
    if (!c->layers) return err_set(e, "cuda backend: out of memory");
    if (cudaMallocHost(&u.staging, CUDA_STAGING) != cudaSuccess || cudaEventCreate(&u.done[0]) != cudaSuccess ||
        cudaEventCreate(&u.done[1]) != cudaSuccess) {
        err_set(e, "cuda backend: cannot allocate %u MiB of pinned staging memory", CUDA_STAGING >> 20);
        goto out;
    }
    if (cudaMalloc(&u.dev_staging, CUDA_STAGING) != cudaSuccess ||
        (c->layer_wtype == CUDA_W_FP8 && cudaMalloc(&u.dev_bf16, CUDA_STAGING / 2) != cudaSuccess)) {
        cudaGetLastError(); /* not sticky: cleared, so that no later launch check reports it */
        err_set(e, "cuda backend: cannot allocate %u MiB of device staging memory", CUDA_STAGING >> 20);
        goto out;
    }
    cudaEventRecord(u.done[0], c->st);
    cudaEventRecord(u.done[1], c->st);
    {
        const struct model_weight *te[] = {&m->tok_embd}, *head[] = {&m->output};
        /* the embeddings and the head stay BF16 (or F32) under FP8 layers (bench/NOTES.md says why) */
        if (cuda_upload_matrix(c, &u, te, 1, 0, &c->embd, e)) goto out;
        if (m->output.data == m->tok_embd.data && m->output.type == m->tok_embd.type) c->output = c->embd;
        else if (cuda_upload_matrix(c, &u, head, 1, 0, &c->output, e)) goto out;
        if (cuda_upload_f32(c, &m->output_norm, &c->output_norm, e)) goto out;
        for (int32_t il = 0; il < m->hp.n_layer; il++)
            if (cuda_upload_layer(c, &u, il, e)) goto out;
    }
    {
        const cudaError_t sr = cudaStreamSynchronize(c->st); /* a fault of the dequantization kernel shows here */
        if (sr != cudaSuccess) {
            err_set(e, "cuda backend: weight upload: %s", cudaGetErrorString(sr));
            goto out;
        }
    }
    rc = 0;
out:
    cudaStreamSynchronize(c->st); /* nothing in flight reads the staging any more */
    if (u.staging) cudaFreeHost(u.staging);
    if (u.dev_staging) cudaFree(u.dev_staging);
    if (u.dev_bf16) cudaFree(u.dev_bf16);
    if (u.done[0]) cudaEventDestroy(u.done[0]);
    if (u.done[1]) cudaEventDestroy(u.done[1]);
    return rc;
}

int cuda_upload_rope(struct cuda_ctx *c, struct err *e)
{
    const struct model_hparams *hp = &c->m->hp;
    const int32_t half = hp->n_rot / 2;
    double *h = (double *)malloc(((size_t)half + 1) * sizeof(double));
    if (!h) return err_set(e, "cuda backend: out of memory");
    const float *factors = (const float *)c->m->rope_freqs.data;
    for (int32_t i = 0; i < half; i++) { /* as the cpu backend */
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (factors) f /= factors[i];
        h[i] = f;
    }
    cudaError_t rc = cudaMalloc(&c->inv_freq, ((size_t)half + 1) * sizeof(double));
    if (rc == cudaSuccess) rc = cudaMemcpy(c->inv_freq, h, ((size_t)half + 1) * sizeof(double), cudaMemcpyHostToDevice);
    free(h);
    if (rc != cudaSuccess) return cuda_fail(e, __FILE__, __LINE__, "rope frequencies", cudaGetErrorString(rc));
    return 0;
}

/* Elements of the layers' matrices (n_layer x (qkv, wo, gate/up, down)), and of the embeddings and the head
 * (the head once when it is the embedding table). */
static void cuda_count_weights(const struct model *m, uint64_t *layers, uint64_t *ends)
{
    *layers = 0;
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct model_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            *layers += (uint64_t)ws[i]->ne[0] * (uint64_t)ws[i]->ne[1];
    }
    *ends = (uint64_t)m->tok_embd.ne[0] * (uint64_t)m->tok_embd.ne[1];
    if (m->output.data != m->tok_embd.data) *ends += (uint64_t)m->output.ne[0] * (uint64_t)m->output.ne[1];
}

/* The layers' matrix type for this load (c->weights_asked): BF16 (F32 matrices of an F32 file stay F32), or
 * FP8 when asked, or under AUTO when the BF16 weights would leave the KV cache less than a quarter of the
 * device's free memory past the headroom (cuda_memory's); why: the reason, for the start-up line. */
enum cuda_wtype cuda_pick_wtype(struct cuda_ctx *c, const struct model *m, char *why, size_t why_cap)
{
    uint64_t layers = 0, ends = 0;
    cuda_count_weights(m, &layers, &ends);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const uint64_t headroom = (2ull << 30) + total_b / 50, bf16 = 2 * (layers + ends), room = free_b / 4;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const uint64_t left = free_b > headroom + bf16 ? free_b - headroom - bf16 : 0;
    if (c->weights_asked != BACKEND_WEIGHTS_AUTO) {
        snprintf(why, why_cap, "--gpu-weights %s", backend_weights_name(c->weights_asked));
        return c->weights_asked == BACKEND_WEIGHTS_FP8 ? CUDA_W_FP8 : CUDA_W_BF16;
    }
    if (left >= room) {
        snprintf(why, why_cap, "auto: BF16 weights %.1f GiB leave %.1f GiB for the KV cache", (double)bf16 / gib,
                 (double)left / gib);
        return CUDA_W_BF16;
    }
    snprintf(why, why_cap, "auto: BF16 weights %.1f GiB would leave %.1f GiB of %.1f GiB free for the KV cache",
             (double)bf16 / gib, (double)left / gib, (double)free_b / gib);
    return CUDA_W_FP8;
}

/* "N of M layer matrices e4m3" for the start-up line, or the BF16 / F32 words. */
void cuda_describe_weights(const struct cuda_ctx *c, int quantized, char *out, size_t cap)
{
    int n_fp8 = 0, n = 0;
    for (int32_t il = 0; il < c->m->hp.n_layer; il++) {
        const struct cuda_matrix *ms[] = {&c->layers[il].qkv, &c->layers[il].wo, &c->layers[il].gate_up,
                                          &c->layers[il].down};
        for (int i = 0; i < 4; i++, n++) n_fp8 += ms[i]->type == CUDA_W_FP8;
    }
    if (c->layer_wtype == CUDA_W_FP8)
        snprintf(out, cap, "FP8 e4m3 with a scale per output channel: %d of %d layer matrices (rows of a multiple "
                           "of 16), embeddings and head BF16", n_fp8, n);
    else snprintf(out, cap, "%s", quantized ? "integer types dequantized on the device to BF16: 2 bytes per weight"
                                            : "BF16, F32 matrices kept F32");
}

