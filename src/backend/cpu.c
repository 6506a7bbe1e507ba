/* cpu — the reference backend: the Llama-family forward step over a step batch, on host memory.
 *
 * Invariants:
 *  - Batch invariance (bit for bit): every per-row quantity (embedding, norms, RoPE, K/V, attention,
 *    residuals, logits) is computed by code whose arithmetic depends only on that row's own inputs and its
 *    own sequence's KV: per-row ops run row by row; matmuls split work over weight rows with per-row
 *    accumulators (cpu_kernels.c); attention for a row reads positions 0..pos of its own sequence, in
 *    position order, through its block table. Hence a row's logits do not depend on the batch size, the
 *    other rows, the row's place in the batch, the number of threads, or how its sequence's prefill was
 *    split into steps.
 *  - KV layout: for K and for V, [layer][block][slot][kv_head][vec], where vec is head_dim elements of
 *    kv_type (Q8_0: head_dim/32 blocks of {f16 d, int8 q[32]}; needs head_dim % 32 == 0, else kv_alloc
 *    fails). Position p of a sequence lives in block block_table[p / block_size], slot p % block_size.
 *  - Scratch is sized for cap_rows rows and grows (one reallocation) when a larger step arrives;
 *    attention scratch is sized for the longest position the KV pool can hold.
 * cpu_check() verifies the sizes (debug).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "gguf/quant.h"
#include "util/threads.h"

struct cpu_ctx {
    threads_pool *pool;
    int n_threads;
    const struct model *m;
    double *inv_freq; /* (n_rot / 2) RoPE angular frequency per pair, rope_freqs applied */

    /* KV pool */
    enum kv_type kv_type;
    int32_t n_blocks, block_size;
    uint64_t kv_vec_bytes;   /* one (token, kv head) vector */
    uint64_t kv_layer_bytes; /* n_blocks * block_size * n_head_kv * kv_vec_bytes */
    void *k_cache, *v_cache; /* (n_layer, n_blocks, block_size, n_head_kv, vec) each */
    int64_t max_pos;         /* n_blocks * block_size */
    float *att_scratch;      /* (n_threads, cpu_att_floats()) */

    /* step scratch, for up to cap_rows rows */
    int32_t cap_rows;
    void *scratch;
    float *x;    /* (cap, n_embd) residual stream */
    float *xb;   /* (cap, max(n_embd, n_q)) normalized input of a matmul; gathered output rows */
    float *tmp;  /* (cap, n_embd) output of wo / w_down */
    float *q;    /* (cap, n_q) */
    float *k;    /* (cap, n_kv) */
    float *v;    /* (cap, n_kv) */
    float *att;  /* (cap, n_q) attention output */
    float *hb;   /* (cap, n_ff) */
    float *hb2;  /* (cap, n_ff) */
    float *rope; /* (cap, n_rot / 2, 2) cos, sin per row */
    struct cpu_q8_block *xq; /* (cap, max(n_embd, n_q, n_ff) / 32) quantized matmul input */
};

#define CPU_MAX_GROUP 64 /* query heads per kv head (checked at load) */

/* Floats of attention scratch per thread; see cpu_task_attn. */
static size_t cpu_att_floats(const struct cpu_ctx *c)
{
    const struct model_hparams *hp = &c->m->hp;
    size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    return group * (size_t)c->max_pos + 2 * (size_t)hp->head_dim + group * (size_t)hp->head_dim;
}

static int64_t cpu_max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* Bytes of the step scratch for `rows` rows; fills the buffer pointers when base is not NULL. */
static uint64_t cpu_layout_scratch(struct cpu_ctx *c, int32_t rows, char *base)
{
    const struct model_hparams *hp = &c->m->hp;
    const int64_t n_q = (int64_t)hp->n_head * hp->head_dim, n_kv = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t n_in_max = cpu_max3(hp->n_embd, n_q, hp->n_ff);
    uint64_t off = 0;
#define CARVE(ptr, type, count)                                                                           \
    do {                                                                                                  \
        if (base) c->ptr = (type *)(base + off);                                                          \
        off += ((uint64_t)(count) * sizeof(type) + 63) & ~(uint64_t)63;                                   \
    } while (0)
    CARVE(x, float, (int64_t)rows * hp->n_embd);
    CARVE(xb, float, (int64_t)rows * (hp->n_embd > n_q ? hp->n_embd : n_q));
    CARVE(tmp, float, (int64_t)rows * hp->n_embd);
    CARVE(q, float, (int64_t)rows * n_q);
    CARVE(k, float, (int64_t)rows * n_kv);
    CARVE(v, float, (int64_t)rows * n_kv);
    CARVE(att, float, (int64_t)rows * n_q);
    CARVE(hb, float, (int64_t)rows * hp->n_ff);
    CARVE(hb2, float, (int64_t)rows * hp->n_ff);
    CARVE(rope, float, (int64_t)rows * hp->n_rot + 1);
    CARVE(xq, struct cpu_q8_block, (int64_t)rows * (n_in_max / CPU_QK + 1));
#undef CARVE
    return off;
}

static int cpu_reserve(struct cpu_ctx *c, int32_t rows, struct err *e)
{
    if (rows <= c->cap_rows) return 0;
    uint64_t n = cpu_layout_scratch(c, rows, NULL);
    void *p = NULL;
    if (n > SIZE_MAX || posix_memalign(&p, 64, (size_t)n) != 0)
        return err_set(e, "cpu backend: out of memory for %llu bytes of scratch (%d rows)", (unsigned long long)n,
                       (int)rows);
    free(c->scratch);
    c->scratch = p;
    c->cap_rows = rows;
    cpu_layout_scratch(c, rows, p);
    return 0;
}

static int cpu_check(void *ctx, struct err *e)
{
    const struct cpu_ctx *c = ctx;
    if (!c->m) return 0;
    if (c->cap_rows > 0 && !c->scratch) return err_set(e, "cpu_check: scratch missing");
    if (c->k_cache) {
        const struct model_hparams *hp = &c->m->hp;
        if (c->kv_vec_bytes != model_kv_vec_bytes(hp, c->kv_type) ||
            c->kv_layer_bytes != (uint64_t)c->n_blocks * (uint64_t)c->block_size * (uint64_t)hp->n_head_kv *
                                     c->kv_vec_bytes ||
            c->max_pos != (int64_t)c->n_blocks * c->block_size || !c->att_scratch)
            return err_set(e, "cpu_check: KV pool sizes inconsistent");
    }
    return 0;
}

/* ---------------------------------------------------------------- load / KV */

static void cpu_free_kv(struct cpu_ctx *c)
{
    free(c->k_cache);
    free(c->v_cache);
    free(c->att_scratch);
    c->k_cache = c->v_cache = NULL;
    c->att_scratch = NULL;
    c->n_blocks = c->block_size = 0;
    c->max_pos = 0;
}

static int cpu_load(void *ctx, const struct model *m, struct err *e)
{
    struct cpu_ctx *c = ctx;
    if (model_check(m, e)) return err_prefix(e, "cpu backend");
    if (m->hp.n_head / m->hp.n_head_kv > CPU_MAX_GROUP)
        return err_set(e, "cpu backend: %d query heads per kv head is more than %d", (int)(m->hp.n_head / m->hp.n_head_kv),
                       CPU_MAX_GROUP);
    cpu_free_kv(c);
    free(c->scratch);
    c->scratch = NULL;
    c->cap_rows = 0;
    free(c->inv_freq);
    c->m = m;
    const struct model_hparams *hp = &m->hp;
    c->inv_freq = malloc(((size_t)hp->n_rot / 2 + 1) * sizeof *c->inv_freq);
    if (!c->inv_freq) return err_set(e, "cpu backend: out of memory");
    const float *factors = m->rope_freqs.data;
    for (int32_t i = 0; i < hp->n_rot / 2; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (factors) f /= factors[i];
        c->inv_freq[i] = f;
    }
    return 0;
}

static int cpu_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size, enum kv_type t, struct err *e)
{
    struct cpu_ctx *c = ctx;
    if (!c->m) return err_set(e, "cpu backend: kv_alloc before load");
    const struct model_hparams *hp = &c->m->hp;
    if (n_blocks < 1 || block_size < 1) return err_set(e, "cpu backend: bad KV pool %d blocks x %d tokens",
                                                      (int)n_blocks, (int)block_size);
    if (t != KV_TYPE_F32 && t != KV_TYPE_F16 && t != KV_TYPE_Q8_0)
        return err_set(e, "cpu backend: unknown KV type %d", (int)t);
    if (t == KV_TYPE_Q8_0 && hp->head_dim % 32 != 0)
        return err_set(e, "cpu backend: KV type q8_0 needs a head dimension that is a multiple of 32 (this "
                          "model's is %d); use f16 or f32",
                       (int)hp->head_dim);
    cpu_free_kv(c);
    uint64_t vec = model_kv_vec_bytes(hp, t);
    uint64_t layer = (uint64_t)n_blocks * (uint64_t)block_size * (uint64_t)hp->n_head_kv * vec;
    uint64_t total = layer * (uint64_t)hp->n_layer;
    if (total / (uint64_t)hp->n_layer != layer || total > SIZE_MAX / 2)
        return err_set(e, "cpu backend: KV pool of %d blocks is too large", (int)n_blocks);
    c->k_cache = malloc((size_t)total);
    c->v_cache = malloc((size_t)total);
    int64_t max_pos = (int64_t)n_blocks * block_size;
    c->max_pos = max_pos;
    c->att_scratch = malloc((size_t)c->n_threads * cpu_att_floats(c) * sizeof(float));
    if (!c->k_cache || !c->v_cache || !c->att_scratch) {
        cpu_free_kv(c);
        return err_set(e, "cpu backend: out of memory for a KV pool of %llu bytes (%d blocks x %d tokens, %s)",
                       (unsigned long long)(2 * total), (int)n_blocks, (int)block_size, model_kv_type_name(t));
    }
    /* Zero so that reading a never-written slot is deterministic (it cannot happen for a valid batch). */
    memset(c->k_cache, 0, (size_t)total);
    memset(c->v_cache, 0, (size_t)total);
    c->kv_type = t;
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    c->kv_vec_bytes = vec;
    c->kv_layer_bytes = layer;
    c->max_pos = max_pos;
    return cpu_check(c, e);
}

static uint64_t cpu_scratch_bytes(void *ctx, int32_t max_rows)
{
    struct cpu_ctx *c = ctx;
    if (!c->m) return 0;
    uint64_t att = (uint64_t)c->n_threads * cpu_att_floats(c) * 4;
    return cpu_layout_scratch(c, max_rows, NULL) + att;
}

/* ---------------------------------------------------------------- per-row helpers */

/* out = x / sqrt(mean(x^2) + eps) * w, the sum of squares in double in index order. */
static void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

/* Rotates the first n_rot dims of one head vector. cs: (n_rot / 2, 2) cos, sin. */
static void cpu_rope_head(float *h, const float *cs, int32_t n_rot, int neox)
{
    const int32_t half = n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x0 = h[a], x1 = h[b];
        h[a] = x0 * c - x1 * s;
        h[b] = x0 * s + x1 * c;
    }
}

static uint16_t cpu_f32_to_f16(float f)
{
#if defined(__F16C__)
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    return quant_f32_to_f16(f);
#endif
}

static float cpu_f16_to_f32(uint16_t h)
{
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return quant_f16_to_f32(h);
#endif
}

/* Stores one head vector (head_dim floats) into KV storage of the pool's type. */
static void cpu_kv_store(const struct cpu_ctx *c, void *dst, const float *src, int32_t hd)
{
    switch (c->kv_type) {
    case KV_TYPE_F32: memcpy(dst, src, (size_t)hd * 4); break;
    case KV_TYPE_F16:
        for (int32_t i = 0; i < hd; i++) ((uint16_t *)dst)[i] = cpu_f32_to_f16(src[i]);
        break;
    case KV_TYPE_Q8_0: quant_quantize_row(GGUF_DTYPE_Q8_0, src, dst, hd); break;
    }
}

/* One KV vector as floats: a pointer into the pool (F32) or into buf after conversion (exact). */
static const float *cpu_kv_load(const struct cpu_ctx *c, const void *src, float *buf, int32_t hd)
{
    switch (c->kv_type) {
    case KV_TYPE_F32: return src;
    case KV_TYPE_F16: {
        int32_t i = 0;
#if defined(__F16C__)
        for (; i + 8 <= hd; i += 8)
            _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i))));
#endif
        for (; i < hd; i++) buf[i] = cpu_f16_to_f32(((const uint16_t *)src)[i]);
        return buf;
    }
    case KV_TYPE_Q8_0: {
        const uint8_t *p = src;
        for (int32_t b = 0; b < hd / 32; b++, p += 34) {
            float d = cpu_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
            for (int i = 0; i < 32; i++) buf[b * 32 + i] = d * (float)(int8_t)p[2 + i];
        }
        return buf;
    }
    }
    return buf;
}

/* q . k over head_dim, in a fixed order: two 8-lane FMA accumulators over 16-element steps, one more
 * 8-element step, the lane sum, then a scalar tail (AVX2); the plain loop otherwise. */
static inline float cpu_attn_dot(const float *q, const float *k, int32_t n)
{
#if defined(__AVX2__) && defined(__FMA__)
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    }
    if (i + 8 <= n) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        i += 8;
    }
    a0 = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += q[i] * k[i];
    return s;
#else
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += q[i] * k[i];
    return s;
#endif
}

/* acc[i] += p * v[i], i < n: one FMA per element (AVX2 in groups of 8, fmaf for the tail), so the result
 * of each element does not depend on n. */
static void cpu_axpy(float *acc, float p, const float *v, int32_t n)
{
    int32_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 vp = _mm256_set1_ps(p);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
#endif
    for (; i < n; i++) acc[i] = fmaf(p, v[i], acc[i]);
}

static char *cpu_kv_addr(const struct cpu_ctx *c, void *cache, int32_t layer, int32_t block, int32_t slot,
                         int32_t kvh)
{
    uint64_t idx = ((uint64_t)block * (uint64_t)c->block_size + (uint64_t)slot) * (uint64_t)c->m->hp.n_head_kv +
                   (uint64_t)kvh;
    return (char *)cache + (uint64_t)layer * c->kv_layer_bytes + idx * c->kv_vec_bytes;
}

/* ---------------------------------------------------------------- the step */

struct cpu_step {
    struct cpu_ctx *c;
    const struct step_batch *b;
    int32_t layer;
    int add_tmp;           /* cpu_task_norm: x += tmp first (the previous block's output) */
    const float *norm_w;   /* cpu_task_norm: rmsnorm weight, NULL for the residual add alone */
    int quantize;          /* the next matmul needs xq */
    const float *q_src;    /* cpu_task_quantize: rows of length q_in to quantize into xq */
    int64_t q_in;
};

static void cpu_task_embed(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const struct model *m = c->m;
    const int64_t n_embd = m->hp.n_embd;
    const struct model_weight *te = &m->tok_embd;
    uint64_t rb = gguf_row_bytes((uint32_t)te->type, (uint64_t)n_embd);
    quant_dequantize_row(te->type, (const char *)te->data + rb * (uint64_t)s->b->tokens[r], c->x + r * n_embd,
                         n_embd);
    float *cs = c->rope + r * m->hp.n_rot;
    double pos = (double)s->b->pos[r];
    for (int32_t i = 0; i < m->hp.n_rot / 2; i++) {
        double theta = pos * c->inv_freq[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

/* x += tmp (when add), xb = rmsnorm(x) * norm_w, xq = quantized xb (when needed). */
static void cpu_task_norm(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_embd;
    float *x = c->x + r * n;
    if (s->add_tmp) {
        const float *t = c->tmp + r * n;
        for (int64_t i = 0; i < n; i++) x[i] += t[i];
    }
    if (!s->norm_w) return;
    cpu_rmsnorm(c->xb + r * n, x, s->norm_w, n, c->m->hp.norm_eps);
    if (s->quantize) cpu_quantize_row_q8(c->xb + r * n, c->xq + r * (n / CPU_QK), n);
}

/* Biases, qwen3 q/k norms, RoPE; then K and V of the row into its KV slot. */
static void cpu_task_qkv_post(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const struct model_hparams *hp = &c->m->hp;
    const struct model_layer *L = &c->m->layers[s->layer];
    const int32_t hd = hp->head_dim;
    const int64_t n_q = (int64_t)hp->n_head * hd, n_kv = (int64_t)hp->n_head_kv * hd;
    float *q = c->q + r * n_q, *k = c->k + r * n_kv, *v = c->v + r * n_kv;
    if (L->bq.data) {
        const float *bq = L->bq.data, *bk = L->bk.data, *bv = L->bv.data;
        for (int64_t i = 0; i < n_q; i++) q[i] += bq[i];
        for (int64_t i = 0; i < n_kv; i++) k[i] += bk[i];
        for (int64_t i = 0; i < n_kv; i++) v[i] += bv[i];
    }
    if (L->q_norm.data) {
        for (int32_t h = 0; h < hp->n_head; h++) cpu_rmsnorm(q + h * hd, q + h * hd, L->q_norm.data, hd, hp->norm_eps);
        for (int32_t h = 0; h < hp->n_head_kv; h++)
            cpu_rmsnorm(k + h * hd, k + h * hd, L->k_norm.data, hd, hp->norm_eps);
    }
    const float *cs = c->rope + r * hp->n_rot;
    for (int32_t h = 0; h < hp->n_head; h++) cpu_rope_head(q + h * hd, cs, hp->n_rot, hp->rope_neox);
    for (int32_t h = 0; h < hp->n_head_kv; h++) cpu_rope_head(k + h * hd, cs, hp->n_rot, hp->rope_neox);
    const struct step_seq *sq = &s->b->seqs[s->b->seq[r]];
    int32_t p = s->b->pos[r];
    int32_t blk = sq->block_table[p / c->block_size], slot = p % c->block_size;
    for (int32_t h = 0; h < hp->n_head_kv; h++) {
        cpu_kv_store(c, cpu_kv_addr(c, c->k_cache, s->layer, blk, slot, h), k + h * hd, hd);
        cpu_kv_store(c, cpu_kv_addr(c, c->v_cache, s->layer, blk, slot, h), v + h * hd, hd);
    }
}

/* Attention of one (row, kv head) for every query head of its group: pass 1 computes all scores (each K
 * vector loaded once for the group), pass 2 the exp, sums and weighted V sums (each V loaded once). Per
 * query head the arithmetic is: scores in position order, their max, then in position order p = exp(s -
 * max), sum += p, acc += p * V; out = acc * (1 / sum). It depends only on the row's q and its sequence's
 * KV. Scratch per thread: scores (group, max_pos), then kbuf, vbuf (head_dim), acc (group, head_dim). */
static void cpu_task_attn(void *arg, int64_t task, int thread)
{
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const struct model_hparams *hp = &c->m->hp;
    const int32_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const int64_t r = task / hp->n_head_kv;
    const int32_t kvh = (int32_t)(task % hp->n_head_kv);
    const int64_t n_q = (int64_t)hp->n_head * hd;
    const struct step_seq *sq = &s->b->seqs[s->b->seq[r]];
    const int32_t n_pos = s->b->pos[r] + 1;
    float *scores = c->att_scratch + (size_t)thread * cpu_att_floats(c);
    float *kbuf = scores + (size_t)group * (size_t)c->max_pos, *vbuf = kbuf + hd, *acc = vbuf + hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *q0 = c->q + r * n_q + (int64_t)kvh * group * hd; /* the group's query heads */
    float mx[CPU_MAX_GROUP], sum[CPU_MAX_GROUP];
    for (int32_t g = 0; g < group; g++) mx[g] = -INFINITY;
    for (int32_t t = 0; t < n_pos; t++) {
        int32_t blk = sq->block_table[t / c->block_size], slot = t % c->block_size;
        const float *kt = cpu_kv_load(c, cpu_kv_addr(c, c->k_cache, s->layer, blk, slot, kvh), kbuf, hd);
        for (int32_t g = 0; g < group; g++) {
            float sc = cpu_attn_dot(q0 + (int64_t)g * hd, kt, hd) * scale;
            scores[(size_t)g * (size_t)c->max_pos + (size_t)t] = sc;
            if (sc > mx[g]) mx[g] = sc;
        }
    }
    for (int32_t g = 0; g < group; g++) sum[g] = 0.0f;
    for (int64_t i = 0; i < (int64_t)group * hd; i++) acc[i] = 0.0f;
    for (int32_t t = 0; t < n_pos; t++) {
        int32_t blk = sq->block_table[t / c->block_size], slot = t % c->block_size;
        const float *vt = cpu_kv_load(c, cpu_kv_addr(c, c->v_cache, s->layer, blk, slot, kvh), vbuf, hd);
        for (int32_t g = 0; g < group; g++) {
            float p = expf(scores[(size_t)g * (size_t)c->max_pos + (size_t)t] - mx[g]);
            sum[g] += p;
            cpu_axpy(acc + (int64_t)g * hd, p, vt, hd);
        }
    }
    for (int32_t g = 0; g < group; g++) {
        float inv = 1.0f / sum[g];
        float *out = c->att + r * n_q + ((int64_t)kvh * group + g) * hd;
        for (int32_t i = 0; i < hd; i++) out[i] = acc[(int64_t)g * hd + i] * inv;
    }
}

/* Quantizes rows of `src` (row length s->q_in) into xq. */
static void cpu_task_quantize(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    cpu_quantize_row_q8(s->q_src + r * s->q_in, c->xq + r * (s->q_in / CPU_QK), s->q_in);
}

/* hb = silu(hb) * hb2, then quantized into xq when w_down needs it. */
static void cpu_task_swiglu(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_ff;
    float *g = c->hb + r * n;
    const float *u = c->hb2 + r * n;
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    if (s->quantize) cpu_quantize_row_q8(g, c->xq + r * (n / CPU_QK), n);
}

static int cpu_check_batch(const struct cpu_ctx *c, const struct step_batch *b, struct err *e)
{
    const struct model_hparams *hp = &c->m->hp;
    if (b->n_rows < 1) return err_set(e, "step batch: no rows");
    if (b->n_seqs < 1) return err_set(e, "step batch: no sequences");
    if (b->n_logits < 0 || b->n_logits > b->n_rows) return err_set(e, "step batch: n_logits %d out of range",
                                                                   (int)b->n_logits);
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const struct step_seq *sq = &b->seqs[i];
        if (sq->n_blocks < 0 || (sq->n_blocks > 0 && !sq->block_table))
            return err_set(e, "step batch: sequence %d has a bad block table", (int)i);
        for (int32_t j = 0; j < sq->n_blocks; j++)
            if (sq->block_table[j] < 0 || sq->block_table[j] >= c->n_blocks)
                return err_set(e, "step batch: sequence %d block %d is id %d, pool has %d blocks", (int)i, (int)j,
                               (int)sq->block_table[j], (int)c->n_blocks);
    }
    for (int32_t r = 0; r < b->n_rows; r++) {
        if (b->tokens[r] < 0 || b->tokens[r] >= hp->n_vocab)
            return err_set(e, "step batch: row %d token %d is outside the vocabulary (%d)", (int)r,
                           (int)b->tokens[r], (int)hp->n_vocab);
        if (b->seq[r] < 0 || b->seq[r] >= b->n_seqs)
            return err_set(e, "step batch: row %d sequence index %d out of range", (int)r, (int)b->seq[r]);
        const struct step_seq *sq = &b->seqs[b->seq[r]];
        if (b->pos[r] < 0 || b->pos[r] >= c->max_pos || b->pos[r] / c->block_size >= sq->n_blocks)
            return err_set(e, "step batch: row %d position %d is not covered by its block table (%d blocks of %d)",
                           (int)r, (int)b->pos[r], (int)sq->n_blocks, (int)c->block_size);
    }
    for (int32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_rows || (i > 0 && b->logit_rows[i] <= b->logit_rows[i - 1]))
            return err_set(e, "step batch: logit_rows[%d] = %d is not a strictly increasing row index", (int)i,
                           (int)b->logit_rows[i]);
    return 0;
}

static int cpu_forward(void *ctx, const struct step_batch *b, float *logits, struct err *e)
{
    struct cpu_ctx *c = ctx;
    if (!c->m) return err_set(e, "cpu backend: forward before load");
    if (!c->k_cache) return err_set(e, "cpu backend: forward before kv_alloc");
    if (cpu_check_batch(c, b, e)) return -1;
    if (cpu_reserve(c, b->n_rows, e)) return -1;
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd, n_q = (int64_t)hp->n_head * hp->head_dim;
    const int32_t n = b->n_rows;
    threads_pool *pool = c->pool;
    struct cpu_step s = {.c = c, .b = b, .layer = -1};

    threads_parallel_for(pool, n, cpu_task_embed, &s);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        /* attention block */
        s.layer = il;
        s.add_tmp = il > 0; /* the previous layer's FFN output */
        s.norm_w = L->attn_norm.data;
        s.quantize = cpu_type_uses_q8(L->wq.type) || cpu_type_uses_q8(L->wk.type) || cpu_type_uses_q8(L->wv.type);
        threads_parallel_for(pool, n, cpu_task_norm, &s);
        struct cpu_matmul_job qkv[3] = {{&L->wq, c->q}, {&L->wk, c->k}, {&L->wv, c->v}};
        cpu_matmul(pool, qkv, 3, c->xb, c->xq, n);
        threads_parallel_for(pool, n, cpu_task_qkv_post, &s);
        threads_parallel_for(pool, (int64_t)n * hp->n_head_kv, cpu_task_attn, &s);
        if (cpu_type_uses_q8(L->wo.type)) {
            s.q_src = c->att;
            s.q_in = n_q;
            threads_parallel_for(pool, n, cpu_task_quantize, &s);
        }
        struct cpu_matmul_job wo = {&L->wo, c->tmp};
        cpu_matmul(pool, &wo, 1, c->att, c->xq, n);
        /* feed-forward block */
        s.norm_w = L->ffn_norm.data;
        s.quantize = cpu_type_uses_q8(L->w_gate.type) || cpu_type_uses_q8(L->w_up.type);
        s.add_tmp = 1; /* the attention output */
        threads_parallel_for(pool, n, cpu_task_norm, &s);
        struct cpu_matmul_job gu[2] = {{&L->w_gate, c->hb}, {&L->w_up, c->hb2}};
        cpu_matmul(pool, gu, 2, c->xb, c->xq, n);
        s.quantize = cpu_type_uses_q8(L->w_down.type);
        threads_parallel_for(pool, n, cpu_task_swiglu, &s);
        struct cpu_matmul_job dn = {&L->w_down, c->tmp};
        cpu_matmul(pool, &dn, 1, c->hb, c->xq, n);
    }
    /* the last residual add, then the output head for the rows that want logits */
    s.add_tmp = 1;
    s.norm_w = NULL;
    threads_parallel_for(pool, n, cpu_task_norm, &s);
    if (b->n_logits == 0) return 0;
    for (int32_t i = 0; i < b->n_logits; i++) {
        int32_t r = b->logit_rows[i];
        cpu_rmsnorm(c->xb + (int64_t)i * n_embd, c->x + (int64_t)r * n_embd, m->output_norm.data, n_embd,
                    hp->norm_eps);
    }
    if (cpu_type_uses_q8(m->output.type)) {
        s.q_src = c->xb;
        s.q_in = n_embd;
        threads_parallel_for(pool, b->n_logits, cpu_task_quantize, &s);
    }
    struct cpu_matmul_job out = {&m->output, logits};
    cpu_matmul(pool, &out, 1, c->xb, c->xq, b->n_logits);
    return 0;
}

static void cpu_free(void *ctx)
{
    struct cpu_ctx *c = ctx;
    if (!c) return;
    cpu_free_kv(c);
    free(c->scratch);
    free(c->inv_freq);
    threads_free(c->pool);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .load = cpu_load,
    .kv_alloc = cpu_kv_alloc,
    .forward = cpu_forward,
    .scratch_bytes = cpu_scratch_bytes,
    .free = cpu_free,
    .check = cpu_check,
};

int backend_cpu_init(struct backend *b, int n_threads, struct err *e)
{
    b->ops = NULL;
    b->ctx = NULL;
    struct cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return err_set(e, "cpu backend: out of memory");
    if (threads_init(n_threads, &c->pool, e)) {
        free(c);
        return err_prefix(e, "cpu backend");
    }
    c->n_threads = threads_count(c->pool);
    b->ops = &cpu_ops;
    b->ctx = c;
    return 0;
}
