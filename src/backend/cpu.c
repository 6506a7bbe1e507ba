/* cpu — the reference backend: the Llama-family forward step over a step batch, on host memory; with
 * the gemma3 / gemma2 / phi3 deltas (model.h) switched on by the model's hyper-parameters: the embedding
 * scale, per-layer RoPE tables (local layers' own base, cpu_local_rope), post-norms of the block outputs,
 * GeGLU, the attention window / scale / soft-cap (cpu_attn.h) and the final soft-cap. Each is a per-row
 * (or per-element) op, so the invariants below hold for them as they are; all are off for the llama
 * family, whose arithmetic is unchanged.
 *
 * Invariants:
 *  - Batch invariance (bit for bit): every per-row quantity (embedding, norms, RoPE, K/V, attention,
 *    residuals, logits) is computed by code whose arithmetic depends only on that row's own inputs and its
 *    own sequence's KV: per-row ops run row by row (also when fused into a matmul task's epilogue);
 *    matmuls split work over weight rows and blocks of activation rows, never the reduction, with per-row
 *    accumulators (cpu_kernels.c); attention for a row reads positions 0..pos of its own sequence through
 *    its block table, in a fixed per-row order (cpu_attn.h) whatever rows share its work item. Whether a
 *    dispatch runs on the pool or inline (cpu_par, the pool's own adaptive choice) never changes the
 *    arithmetic. Hence a row's logits do not depend on the batch size, the other rows, the row's place in
 *    the batch, the number of threads, or how its sequence's prefill was split into steps.
 *  - KV layout: for K and for V, [layer][block][kv_head][region of block_size slots] (struct cpu_kv_layer
 *    in cpu_attn.h: V [slot][vec]; K [dim][slot] for f32/f16, [slot][vec] for q8_0), where a vec is
 *    head_dim elements of kv_type (Q8_0: head_dim/32 blocks of {f16 d, int8 q[32]}; needs head_dim % 32
 *    == 0, else kv_alloc fails). Position p of a sequence lives in block block_table[p / block_size],
 *    slot p % block_size.
 *  - The KV pool is one anonymous MAP_NORESERVE mapping, never cleared: a page is committed when a slot in
 *    it is first written. A step writes K/V of every row (cpu_epi_qkv, inside the q/k/v matmul) before its
 *    attention, and attention (cpu_attn.c) uses only positions <= the last row of the item's sequence in
 *    this step, all written by this or an earlier step (or by the step that computed a prefix-cache
 *    block). The general kernels never load a slot past that; the fast path loads K of whole 16-slot
 *    groups inside the sequence's own last block, and the lanes of unwritten slots (any bits, NaN
 *    included) are replaced by -inf before anything uses them (cpu_attn.h).
 *  - Weights: at load every matrix is repacked once (cpu_repack_rows: F32/F16/BF16/Q4_x/Q5_x/Q8_0 into panels
 *    of 16 rows, padded to a multiple of 16 rows; the K-quants Q2_K..Q6_K copied as they are, cpu_kquant.h)
 *    into one buffer that the backend owns (memory = the matrices' bytes again; the model's mapping is then
 *    read only for token embedding rows and the small F32 tensors). As rows are repacked, their pages of a
 *    file mapping are dropped from the process (MADV_DONTNEED; cpu_releasable says when), so peak RSS stays
 *    ~1x the weights, not 2x. c->layers/c->output are the model's views with data pointing at the repacked
 *    rows.
 *  - Scratch is sized for cap_rows rows and grows (one reallocation) when a larger step arrives; the
 *    attention scratch (per thread) is sized for the longest position seen in a step so far and grows the
 *    same way.
 * cpu_check() verifies the sizes (debug).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/backend.h"
#include "backend/cpu_attn.h"
#include "backend/cpu_kernels.h"
#include "backend/cpu_kquant.h"
#include "gguf/quant.h"
#include "util/sysmem.h"
#include "util/threads.h"

struct cpu_ctx {
    threads_pool *pool;
    int n_threads;
    const struct model *m;
    double *inv_freq; /* (n_rot / 2) RoPE angular frequency per pair, rope_freqs applied */
    double *inv_freq_local; /* (n_rot / 2) the same for local layers when their RoPE differs (cpu_local_rope),
                               else NULL */
    /* The model's matrices as the kernels read them: repacked (cpu_repack_rows) into
     * `packed`, others pointing at the model's data; norms and biases are the model's. */
    struct model_layer *layers; /* (n_layer) */
    struct model_weight output;
    void *packed;
    uint64_t packed_bytes;

    /* KV pool */
    enum kv_type kv_type;
    int32_t n_blocks, block_size;
    uint64_t kv_vec_bytes;   /* one (token, kv head) vector */
    uint64_t kv_layer_bytes; /* n_blocks * block_size * n_head_kv * kv_vec_bytes */
    void *k_cache, *v_cache; /* (n_layer, n_blocks, n_head_kv, block_size, vec) each, one mapping */
    uint64_t kv_map_bytes;   /* the mapping: 2 * n_layer * kv_layer_bytes */
    int64_t max_pos;         /* n_blocks * block_size */
    float *att_scratch;      /* (n_threads, att_floats) attention scratch per thread */
    size_t att_floats;       /* cpu_attn_scratch_floats(head_dim, group, att_pos) */
    int64_t att_pos;         /* positions the attention scratch holds */

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
    float *rope_local; /* (cap, n_rot / 2, 2) the same at the local layers' base (when inv_freq_local) */
    uint8_t *xq; /* (cap, cpu_q8_row_bytes(max(n_embd, n_q, n_ff))) quantized matmul input (CPU_ACT_Q8) */
    uint8_t *xk; /* (cap, cpu_q8k_row_bytes(max(n_embd, n_q, n_ff))) the same for the K-quants (CPU_ACT_Q8K) */
    struct cpu_attn_item *att_items; /* (cap * n_head_kv) the step's attention work items */
    int64_t *att_parts;              /* (cpu_att_max_parts + 1) item ranges handed to threads */
};

#define CPU_MAX_GROUP 64       /* query heads per kv head (checked at load) */

/* 1 if local layers have a RoPE table of their own: another base, or linear scaling of the global one
 * (gemma3). */
static int cpu_local_rope(const struct model_hparams *hp)
{
    return hp->rope_base_local != hp->rope_base || hp->rope_freq_scale > 0;
}

/* Attention items are grouped into this many parts (claimed dynamically by the threads). */
static int64_t cpu_att_max_parts(const struct cpu_ctx *c)
{
    return 8 * (int64_t)c->n_threads;
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
    CARVE(rope_local, float, cpu_local_rope(hp) ? (int64_t)rows * hp->n_rot + 1 : 1);
    CARVE(xq, uint8_t, (int64_t)rows * cpu_q8_row_bytes(n_in_max) + 64);
    CARVE(xk, uint8_t, (int64_t)rows * cpu_q8k_row_bytes(n_in_max) + 64);
    CARVE(att_items, struct cpu_attn_item, (int64_t)rows * hp->n_head_kv);
    CARVE(att_parts, int64_t, cpu_att_max_parts(c) + 1);
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
    if (!c->layers || (c->packed_bytes > 0) != (c->packed != NULL)) return err_set(e, "cpu_check: weights not bound");
    if (c->inv_freq && cpu_local_rope(&c->m->hp) != (c->inv_freq_local != NULL))
        return err_set(e, "cpu_check: local RoPE table %s", c->inv_freq_local ? "without local layers" : "missing");
    for (int32_t il = 0; il < c->m->hp.n_layer; il++) {
        const struct model_layer *L = &c->layers[il], *M = &c->m->layers[il];
        if (L->attn_norm.data != M->attn_norm.data || L->wq.type != M->wq.type || L->w_down.ne[0] != M->w_down.ne[0] ||
            (const uint8_t *)L->wq.data < (const uint8_t *)c->packed)
            return err_set(e, "cpu_check: layer %d views do not match the model", (int)il);
    }
    if (c->k_cache) {
        const struct model_hparams *hp = &c->m->hp;
        if (c->kv_vec_bytes != model_kv_vec_bytes(hp, c->kv_type) ||
            c->kv_layer_bytes != (uint64_t)c->n_blocks * (uint64_t)c->block_size * (uint64_t)hp->n_head_kv *
                                     c->kv_vec_bytes ||
            c->max_pos != (int64_t)c->n_blocks * c->block_size ||
            c->kv_map_bytes != 2 * c->kv_layer_bytes * (uint64_t)hp->n_layer)
            return err_set(e, "cpu_check: KV pool sizes inconsistent");
        if (c->att_scratch &&
            c->att_floats < cpu_attn_scratch_floats(hp->head_dim, hp->n_head / hp->n_head_kv, c->att_pos))
            return err_set(e, "cpu_check: attention scratch smaller than its positions need");
    }
    return 0;
}

/* ---------------------------------------------------------------- load / KV */

static void cpu_free_kv(struct cpu_ctx *c)
{
    if (c->k_cache) munmap(c->k_cache, (size_t)c->kv_map_bytes);
    free(c->att_scratch);
    c->k_cache = c->v_cache = NULL;
    c->kv_map_bytes = 0;
    c->att_scratch = NULL;
    c->att_floats = 0;
    c->att_pos = 0;
    c->n_blocks = c->block_size = 0;
    c->max_pos = 0;
}

/* Makes the attention scratch hold steps with positions < n_pos (grows, never shrinks). */
static int cpu_reserve_att(struct cpu_ctx *c, int64_t n_pos, struct err *e)
{
    if (c->att_scratch && n_pos <= c->att_pos) return 0;
    const struct model_hparams *hp = &c->m->hp;
    if (n_pos < 256) n_pos = 256;
    size_t per = cpu_attn_scratch_floats(hp->head_dim, hp->n_head / hp->n_head_kv, n_pos);
    void *p = NULL;
    if (per > SIZE_MAX / sizeof(float) / (size_t)c->n_threads ||
        posix_memalign(&p, 64, per * sizeof(float) * (size_t)c->n_threads) != 0)
        return err_set(e, "cpu backend: out of memory for the attention scratch of %lld positions", (long long)n_pos);
    free(c->att_scratch);
    c->att_scratch = p;
    c->att_floats = per;
    c->att_pos = n_pos;
    return 0;
}

static void cpu_free_packed(struct cpu_ctx *c)
{
    free(c->packed);
    free(c->layers);
    c->packed = NULL;
    c->layers = NULL;
    c->packed_bytes = 0;
}

/* The matrices of layer il (or the output head when il == n_layer) that the matmuls read. */
static int cpu_matrices(struct cpu_ctx *c, int32_t il, struct model_weight **ws)
{
    if (il == c->m->hp.n_layer) {
        ws[0] = &c->output;
        return 1;
    }
    struct model_layer *L = &c->layers[il];
    struct model_weight *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    for (int i = 0; i < 7; i++) ws[i] = all[i];
    return 7;
}

struct cpu_pack_job {
    struct model_weight *const *ws; /* views to repack, data still pointing at the model */
    const int64_t *first_task;      /* (n_ws + 1) */
    uint8_t *const *dst;            /* (n_ws) */
    const uint8_t *release;         /* (n_ws) 1: drop the source's file pages once repacked */
    int n_ws;
};

#define CPU_PACK_ROWS 256 /* a multiple of CPU_PANEL */

/* Drops the whole pages inside [p, p + n) of a read-only MAP_PRIVATE file mapping from this process
 * (MADV_DONTNEED): they leave the RSS; a later read would fault them in again from the file, so this
 * can never change what the mapping reads. */
static void cpu_release_pages(const void *p, uint64_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + (uintptr_t)n) & ~(page - 1);
    if (b > a) (void)madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
}

/* Bytes of the whole matrix w (ne[1] rows of its type). */
static uint64_t cpu_weight_bytes(const struct model_weight *w)
{
    return gguf_row_bytes((uint32_t)w->type, (uint64_t)w->ne[0]) * (uint64_t)w->ne[1];
}

/* Bytes of w once repacked (cpu_repack_rows). */
static uint64_t cpu_packed_bytes(const struct model_weight *w)
{
    return gguf_row_bytes((uint32_t)w->type, (uint64_t)w->ne[0]) * (uint64_t)cpu_packed_rows(w->type, w->ne[1]);
}

/* 1 if w's source bytes may be released after repacking: they live in a file mapping (not a caller's
 * buffer, where MADV_DONTNEED would discard data), match the file's tensor, and nothing reads them in
 * place later (the token embedding rows are looked up from the mapping, so a tensor that overlaps
 * tok_embd — a tied output head — is kept). */
static int cpu_releasable(const struct model *m, const struct model_weight *w)
{
    if (!m->file || !gguf_path(m->file)[0] || !w->name) return 0;
    const struct gguf_tensor *t = gguf_find_tensor(m->file, w->name);
    uint64_t n = cpu_weight_bytes(w);
    if (!t || t->data != w->data || t->n_bytes < n) return 0;
    const struct model_weight *te = &m->tok_embd;
    uint64_t ne = cpu_weight_bytes(te);
    const uint8_t *a = w->data, *b = te->data;
    return !(a < b + ne && b < a + n);
}

static void cpu_task_pack(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct cpu_pack_job *p = arg;
    int k = 0;
    while (k + 1 < p->n_ws && task >= p->first_task[k + 1]) k++;
    const struct model_weight *w = p->ws[k];
    uint64_t rb = gguf_row_bytes((uint32_t)w->type, (uint64_t)w->ne[0]);
    int64_t r0 = (task - p->first_task[k]) * CPU_PACK_ROWS;
    int64_t r1 = r0 + CPU_PACK_ROWS < w->ne[1] ? r0 + CPU_PACK_ROWS : w->ne[1];
    cpu_repack_rows(w->type, w->data, w->ne[0], w->ne[1], r0, r1, p->dst[k]);
    /* the file pages of these rows, so that peak RSS stays near the repacked size (pages shared with the
     * neighbouring tasks' rows are dropped after the loop) */
    if (p->release[k]) cpu_release_pages((const uint8_t *)w->data + (uint64_t)r0 * rb, (uint64_t)(r1 - r0) * rb);
}

/* Builds c->layers / c->output and repacks every matrix into one buffer (in parallel). */
static int cpu_pack_weights(struct cpu_ctx *c, struct err *e)
{
    const struct model *m = c->m;
    const int32_t nl = m->hp.n_layer;
    struct model_weight **ws = NULL;
    uint8_t **dst = NULL, *release = NULL;
    int64_t *first = NULL;
    int rc = -1;
    c->layers = malloc((size_t)nl * sizeof *c->layers);
    ws = malloc(((size_t)nl * 7 + 1) * sizeof *ws);
    dst = malloc(((size_t)nl * 7 + 1) * sizeof *dst);
    release = malloc((size_t)nl * 7 + 1);
    first = malloc(((size_t)nl * 7 + 2) * sizeof *first);
    if (!c->layers || !ws || !dst || !release || !first) goto oom;
    memcpy(c->layers, m->layers, (size_t)nl * sizeof *c->layers);
    c->output = m->output;
    int n_ws = 0;
    uint64_t total = 0;
    const uint64_t types = cpu_weight_types();
    for (int32_t il = 0; il <= nl; il++) {
        struct model_weight *lw[7];
        int n = cpu_matrices(c, il, lw);
        for (int i = 0; i < n; i++) {
            if (!(types >> lw[i]->type & 1)) {
                const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)lw[i]->type);
                err_set(e, "cpu backend: %s has type %s, which it has no kernels for", lw[i]->name,
                        ti ? ti->name : "unknown");
                goto fail;
            }
            ws[n_ws++] = lw[i];
            total += cpu_packed_bytes(lw[i]);
        }
    }
    if (total > 0) {
        void *p = NULL;
        if (total > SIZE_MAX || posix_memalign(&p, 64, (size_t)total) != 0) {
            err_set(e, "cpu backend: out of memory for %llu bytes of repacked weights", (unsigned long long)total);
            goto fail;
        }
        c->packed = p;
        c->packed_bytes = total;
    }
    uint64_t off = 0;
    int64_t n_tasks = 0;
    for (int i = 0; i < n_ws; i++) {
        dst[i] = (uint8_t *)c->packed + off;
        off += cpu_packed_bytes(ws[i]);
        first[i] = n_tasks;
        n_tasks += (ws[i]->ne[1] + CPU_PACK_ROWS - 1) / CPU_PACK_ROWS;
        release[i] = (uint8_t)cpu_releasable(m, ws[i]);
    }
    first[n_ws] = n_tasks;
    struct cpu_pack_job job = {ws, first, dst, release, n_ws};
    if (n_ws > 0) threads_parallel_for(c->pool, n_tasks, cpu_task_pack, &job);
    for (int i = 0; i < n_ws; i++) {
        if (release[i]) cpu_release_pages(ws[i]->data, cpu_weight_bytes(ws[i]));
        ws[i]->data = dst[i]; /* the views now read the repacked rows */
    }
    rc = 0;
    goto out;
oom:
    err_set(e, "cpu backend: out of memory");
fail:
    cpu_free_packed(c);
out:
    free(ws);
    free(dst);
    free(release);
    free(first);
    return rc;
}

/* Frees what a loaded model and its KV pool hold (the pool of threads stays): back to the state before load. */
static void cpu_release(struct cpu_ctx *c)
{
    cpu_free_kv(c);
    free(c->scratch);
    c->scratch = NULL;
    c->cap_rows = 0;
    free(c->inv_freq);
    free(c->inv_freq_local);
    c->inv_freq = c->inv_freq_local = NULL;
    cpu_free_packed(c);
}

static int cpu_load(void *ctx, const struct model *m, struct err *e)
{
    struct cpu_ctx *c = ctx;
    if (model_check(m, e)) return err_prefix(e, "cpu backend");
    if (m->hp.n_head / m->hp.n_head_kv > CPU_MAX_GROUP)
        return err_set(e, "cpu backend: %d query heads per kv head is more than %d",
                       (int)(m->hp.n_head / m->hp.n_head_kv), CPU_MAX_GROUP);
    if (m->hp.head_dim > CPU_MAX_HEAD_DIM_ATT)
        return err_set(e, "cpu backend: head dimension %d is more than %d", (int)m->hp.head_dim, CPU_MAX_HEAD_DIM_ATT);
    cpu_release(c);
    c->m = m;
    if (cpu_pack_weights(c, e)) return -1;
    const struct model_hparams *hp = &m->hp;
    c->inv_freq = malloc(((size_t)hp->n_rot / 2 + 1) * sizeof *c->inv_freq);
    if (cpu_local_rope(hp)) c->inv_freq_local = malloc(((size_t)hp->n_rot / 2 + 1) * sizeof *c->inv_freq_local);
    if (!c->inv_freq || (cpu_local_rope(hp) && !c->inv_freq_local)) return err_set(e, "cpu backend: out of memory");
    const float *factors = m->rope_freqs.data;
    for (int32_t i = 0; i < hp->n_rot / 2; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (factors) f /= factors[i];
        if (hp->rope_freq_scale > 0) f *= hp->rope_freq_scale;
        c->inv_freq[i] = f;
        if (c->inv_freq_local) c->inv_freq_local[i] = pow((double)hp->rope_base_local, -2.0 * i / hp->n_rot);
    }
    return 0;
}

/* The KV element types of the pool and the attention here (fp8 is a GPU format: q8_0 takes the same memory). */
#define CPU_KV_TYPES (1u << KV_TYPE_F32 | 1u << KV_TYPE_F16 | 1u << KV_TYPE_Q8_0)

static int cpu_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size, enum kv_type t, struct err *e)
{
    struct cpu_ctx *c = ctx;
    if (!c->m) return err_set(e, "cpu backend: kv_alloc before load");
    const struct model_hparams *hp = &c->m->hp;
    if (n_blocks < 1 || block_size < 1) return err_set(e, "cpu backend: bad KV pool %d blocks x %d tokens",
                                                      (int)n_blocks, (int)block_size);
    if (!(CPU_KV_TYPES >> t & 1))
        return err_set(e, "cpu backend: no %s KV cache (it has f32, f16 and q8_0)", model_kv_type_name(t));
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
    /* Reserved address space only: a page is committed when a slot in it is first written (see the top
     * of this file: no slot is read before it is written, so nothing needs clearing). */
    void *map = mmap(NULL, (size_t)(2 * total), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (map == MAP_FAILED)
        return err_set(e, "cpu backend: cannot map a KV pool of %llu bytes (%d blocks x %d tokens, %s)",
                       (unsigned long long)(2 * total), (int)n_blocks, (int)block_size, model_kv_type_name(t));
    c->k_cache = map;
    c->v_cache = (char *)map + total;
    c->kv_map_bytes = 2 * total;
    int64_t max_pos = (int64_t)n_blocks * block_size;
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
    /* attention scratch for the longest sequence a step can hold (the context length when the model
     * states one, else the pool) */
    const struct model_hparams *hp = &c->m->hp;
    int64_t n_pos = c->max_pos > 0 ? c->max_pos : hp->n_ctx_train;
    if (hp->n_ctx_train > 0 && hp->n_ctx_train < n_pos) n_pos = hp->n_ctx_train;
    uint64_t att =
        (uint64_t)c->n_threads * cpu_attn_scratch_floats(hp->head_dim, hp->n_head / hp->n_head_kv, n_pos) * 4;
    return cpu_layout_scratch(c, max_rows, NULL) + att;
}

/* ---------------------------------------------------------------- per-row helpers */

/* out = x / sqrt(mean(x^2) + eps) * w, the sum of squares in double: four partial sums over i mod 4 in
 * index order, then (s0 + s1) + (s2 + s3). */
static void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double s4[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
#if defined(__AVX2__)
    __m256d acc = _mm256_setzero_pd(); /* lane j: the partial sum of i mod 4 == j */
    for (; i + 4 <= n; i += 4) {
        const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        acc = _mm256_add_pd(acc, _mm256_mul_pd(xd, xd));
    }
    _mm256_storeu_pd(s4, acc);
#endif
    for (; i < n; i++) s4[i & 3] += (double)x[i] * x[i];
    const double ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
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

/* Stores one head vector (head_dim floats) of slot `slot` into the region (block_size vectors) of the
 * pool's type; `transposed`: element d goes to (d * block_size + slot) (K of f32/f16), else the vector
 * goes to slot * vec_bytes. */
static void cpu_kv_store(const struct cpu_ctx *c, char *region, int32_t slot, const float *src, int32_t hd,
                         int transposed)
{
    const int64_t bs = c->block_size;
    switch (c->kv_type) {
    case KV_TYPE_F32:
        if (transposed)
            for (int32_t i = 0; i < hd; i++) ((float *)region)[i * bs + slot] = src[i];
        else
            memcpy(region + (uint64_t)slot * c->kv_vec_bytes, src, (size_t)hd * 4);
        break;
    case KV_TYPE_F16:
        for (int32_t i = 0; i < hd; i++)
            ((uint16_t *)region)[transposed ? i * bs + slot : (int64_t)slot * hd + i] = cpu_f32_to_f16(src[i]);
        break;
    case KV_TYPE_Q8_0: quant_quantize_row(GGUF_DTYPE_Q8_0, src, region + (uint64_t)slot * c->kv_vec_bytes, hd); break;
    default: break; /* cpu_kv_alloc takes CPU_KV_TYPES only */
    }
}

/* The region of (layer, block, kv head) in the K or V pool: block_size vectors. */
static char *cpu_kv_region(const struct cpu_ctx *c, void *cache, int32_t layer, int32_t block, int32_t kvh)
{
    uint64_t idx = ((uint64_t)block * (uint64_t)c->m->hp.n_head_kv + (uint64_t)kvh) * (uint64_t)c->block_size;
    return (char *)cache + (uint64_t)layer * c->kv_layer_bytes + idx * c->kv_vec_bytes;
}

/* ---------------------------------------------------------------- the step */

/* A dispatch runs on the pool only when its work (rough multiply-adds) reaches this; below, the
 * hand-off costs more than it saves, and the tasks run inline on the calling thread. Results are the same
 * either way (tasks never depend on the thread). */
#define CPU_PAR_MIN_WORK 100000

/* Runs of consecutive task indices handed to the pool as one task each (cpu_par). */
struct cpu_runs {
    threads_task_fn fn;
    void *arg;
    int64_t n, per;
};

static void cpu_task_run(void *arg, int64_t t, int thread)
{
    const struct cpu_runs *r = arg;
    const int64_t end = (t + 1) * r->per < r->n ? (t + 1) * r->per : r->n;
    for (int64_t i = t * r->per; i < end; i++) r->fn(r->arg, i, thread);
}

/* fn(arg, t) for t < n_tasks, on the pool when `work` is worth it. Small tasks (one row each) go to the
 * pool in runs, about 8 per thread, so that claiming and counting tasks does not cost more than they do. */
static void cpu_par(const struct cpu_ctx *c, int64_t n_tasks, threads_task_fn fn, void *arg, int64_t work)
{
    if (c->n_threads > 1 && n_tasks > 1 && work >= CPU_PAR_MIN_WORK) {
        const int64_t runs = 8 * (int64_t)c->n_threads;
        struct cpu_runs r = {fn, arg, n_tasks, (n_tasks + runs - 1) / runs};
        threads_parallel_for(c->pool, (n_tasks + r.per - 1) / r.per, cpu_task_run, &r);
        return;
    }
    for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
}

static void cpu_mm(const struct cpu_ctx *c, const struct cpu_matmul_job *jobs, int n_jobs, const float *x,
                   int32_t n_rows, const struct cpu_matmul_opts *opts)
{
    int64_t work = 0;
    for (int j = 0; j < n_jobs; j++) work += jobs[j].w->ne[0] * jobs[j].w->ne[1];
    cpu_matmul(work * n_rows >= CPU_PAR_MIN_WORK ? c->pool : NULL, jobs, n_jobs, x, c->xq, c->xk, n_rows, opts);
}

/* The quantized forms (bit 1 << CPU_ACT_Q8, 1 << CPU_ACT_Q8K) the matmul of weights ws needs. */
static unsigned cpu_acts(const struct model_weight *const *ws, int n)
{
    unsigned acts = 0;
    for (int i = 0; i < n; i++) acts |= 1u << cpu_type_act(ws[i]->type);
    return acts & ~(1u << CPU_ACT_F32);
}

/* Row `out` of xq and/or xk (acts: cpu_acts) = the quantized row x of n floats. */
static void cpu_quantize_acts(const struct cpu_ctx *c, unsigned acts, const float *x, int64_t out, int64_t n)
{
    if (acts & (1u << CPU_ACT_Q8)) cpu_quantize_row_q8(x, c->xq + out * cpu_q8_row_bytes(n), n);
    if (acts & (1u << CPU_ACT_Q8K)) cpu_quantize_row_q8k(x, c->xk + out * cpu_q8k_row_bytes(n), n);
}

struct cpu_step {
    struct cpu_ctx *c;
    const struct step_batch *b;
    int32_t layer;
    int embed;             /* cpu_task_norm: look up the token embedding and the RoPE table first */
    int add_tmp;           /* cpu_task_norm: x += tmp first (the previous block's output) */
    const float *norm_w;   /* cpu_task_norm: rmsnorm weight */
    unsigned quantize;     /* the quantized forms the next matmul needs (cpu_acts) */
    const float *q_src;    /* cpu_task_quantize: rows of length q_in to quantize into xq / xk */
    int64_t q_in;
    struct cpu_kv_layer kv; /* cpu_task_attn: this layer's KV */
    int64_t att_n_pos;     /* cpu_task_attn: positions the scratch holds */
    const float *rope;     /* cpu_epi_qkv: this layer's RoPE table (c->rope or, local layers, c->rope_local) */
    const float *post_w;   /* cpu_task_post_norm: post-norm weight (gemma) */
    float *logits;         /* cpu_task_softcap: the step's logits (n_logits, n_vocab) */
};

/* cs (n_rot / 2, 2) = cos, sin of pos * inv_freq[i] per rotated pair. */
static void cpu_rope_table(float *cs, const double *inv_freq, int32_t n_rot, int32_t pos)
{
    for (int32_t i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * inv_freq[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

/* Token embedding row (times embd_scale when the model has one) and the row's RoPE tables. */
static void cpu_embed_row(const struct cpu_step *s, int64_t r)
{
    const struct cpu_ctx *c = s->c;
    const struct model *m = c->m;
    const int64_t n_embd = m->hp.n_embd;
    const struct model_weight *te = &m->tok_embd;
    uint64_t rb = gguf_row_bytes((uint32_t)te->type, (uint64_t)n_embd);
    float *x = c->x + r * n_embd; /* (n_embd) */
    quant_dequantize_row(te->type, (const char *)te->data + rb * (uint64_t)s->b->tokens[r], x, n_embd);
    if (m->hp.embd_scale > 0)
        for (int64_t i = 0; i < n_embd; i++) x[i] *= m->hp.embd_scale;
    cpu_rope_table(c->rope + r * m->hp.n_rot, c->inv_freq, m->hp.n_rot, s->b->pos[r]);
    if (c->inv_freq_local)
        cpu_rope_table(c->rope_local + r * m->hp.n_rot, c->inv_freq_local, m->hp.n_rot, s->b->pos[r]);
}

/* Post-norm of a block's output row r (gemma): tmp = rmsnorm(tmp) * post_w, before the residual add. */
static void cpu_task_post_norm(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_embd;
    cpu_rmsnorm(c->tmp + r * n, c->tmp + r * n, s->post_w, n, c->m->hp.norm_eps);
}

/* Final soft-capping of logit row i (gemma2): l = cap * tanh(l / cap). */
static void cpu_task_softcap(void *arg, int64_t i, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const int64_t n = s->c->m->hp.n_vocab;
    const float cap = s->c->m->hp.final_softcap;
    float *l = s->logits + i * n; /* (n_vocab) */
    for (int64_t k = 0; k < n; k++) l[k] = cap * tanhf(l[k] / cap);
}

/* [x += add,] row `out` of xb = rmsnorm(x) * norm_w, [row `out` of xq / xk = quantized xb]. x: one row of c->x. */
static void cpu_add_norm_row(const struct cpu_ctx *c, float *x, const float *add, const float *norm_w, int64_t out,
                             unsigned quantize)
{
    const int64_t n = c->m->hp.n_embd;
    if (add)
        for (int64_t i = 0; i < n; i++) x[i] += add[i];
    cpu_rmsnorm(c->xb + out * n, x, norm_w, n, c->m->hp.norm_eps);
    cpu_quantize_acts(c, quantize, c->xb + out * n, out, n);
}

/* [embedding,] [x += tmp,] xb = rmsnorm(x) * norm_w, xq = quantized xb (when needed). */
static void cpu_task_norm(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_embd;
    if (s->embed) cpu_embed_row(s, r);
    cpu_add_norm_row(c, c->x + r * n, s->add_tmp ? c->tmp + r * n : NULL, s->norm_w, r, s->quantize);
}

/* Output head input of logit row i: x += tmp (the last FFN output), the output norm, quantized when the
 * head needs it. */
static void cpu_task_final(void *arg, int64_t i, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_embd;
    const int64_t r = s->b->logit_rows[i];
    cpu_add_norm_row(c, c->x + r * n, c->tmp + r * n, c->m->output_norm.data, i, s->quantize);
}

/* Hidden row i (step_batch.hidden): rmsnorm(x + tmp) * output_norm of row hidden_rows[i], into b->hidden
 * (x is left as it is: the row may want logits too). */
static void cpu_task_hidden(void *arg, int64_t i, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_embd;
    const int64_t r = s->b->hidden_rows[i];
    float *out = s->b->hidden + i * n; /* (n_embd) */
    for (int64_t k = 0; k < n; k++) out[k] = c->x[r * n + k] + c->tmp[r * n + k];
    cpu_rmsnorm(out, out, c->m->output_norm.data, n, c->m->hp.norm_eps);
}

/* Epilogue of the q/k/v matmul (tasks hold whole heads: outputs [o0, o1) are multiples of head_dim), rows
 * [r0, r1): biases, qwen3 q/k norms, RoPE of q and k; then K and V of the rows into their KV slots. Per
 * row and head, the same arithmetic whatever the task split. */
static void cpu_epi_qkv(void *arg, int job, int64_t o0, int64_t o1, int32_t r0, int32_t r1)
{
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const struct model_hparams *hp = &c->m->hp;
    const struct model_layer *L = &c->m->layers[s->layer];
    const int32_t hd = hp->head_dim;
    const int64_t n_q = (int64_t)hp->n_head * hd, n_kv = (int64_t)hp->n_head_kv * hd;
    const int32_t h0 = (int32_t)(o0 / hd), h1 = (int32_t)(o1 / hd);
    const float *bias = job == 0 ? L->bq.data : job == 1 ? L->bk.data : L->bv.data;
    const float *norm = job == 0 ? L->q_norm.data : job == 1 ? L->k_norm.data : NULL;
    const int kt = cpu_attn_k_transposed(c->kv_type);
    for (int32_t r = r0; r < r1; r++) {
        float *y = job == 0 ? c->q + r * n_q : job == 1 ? c->k + r * n_kv : c->v + r * n_kv;
        if (bias)
            for (int64_t i = o0; i < o1; i++) y[i] += bias[i];
        if (job < 2) {
            const float *cs = s->rope + (int64_t)r * hp->n_rot;
            for (int32_t h = h0; h < h1; h++) {
                if (norm) cpu_rmsnorm(y + h * hd, y + h * hd, norm, hd, hp->norm_eps);
                cpu_rope_head(y + h * hd, cs, hp->n_rot, hp->rope_neox);
            }
        }
        if (job > 0) {
            const struct step_seq *sq = &s->b->seqs[s->b->seq[r]];
            const int32_t p = s->b->pos[r], blk = sq->block_table[p / c->block_size], slot = p % c->block_size;
            void *cache = job == 1 ? c->k_cache : c->v_cache;
            for (int32_t h = h0; h < h1; h++)
                cpu_kv_store(c, cpu_kv_region(c, cache, s->layer, blk, h), slot, y + h * hd, hd, job == 1 && kt);
        }
    }
}

/* Attention: the items of one part (cpu_attn_parts), each (rows of one sequence, one kv head). */
static void cpu_task_attn(void *arg, int64_t part, int thread)
{
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int32_t group = c->m->hp.n_head / c->m->hp.n_head_kv;
    float *scratch = c->att_scratch + (size_t)thread * c->att_floats;
    const int64_t i0 = c->att_parts[part];
    cpu_attn_run(&s->kv, s->b, &c->att_items[i0], c->att_parts[part + 1] - i0, group, c->q, c->att, scratch,
                 s->att_n_pos);
}

/* Quantizes rows of `src` (row length s->q_in) into xq / xk (s->quantize). */
static void cpu_task_quantize(void *arg, int64_t r, int thread)
{
    (void)thread;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    cpu_quantize_acts(c, s->quantize, s->q_src + r * s->q_in, r, s->q_in);
}

/* y (n rows) = x (n rows of n_in) * w^T, quantizing x into xq or xk first when w multiplies quantized
 * activations. */
static void cpu_mm_one(struct cpu_step *s, const struct model_weight *w, const float *x, int64_t n_in, float *y,
                       int32_t n)
{
    const struct cpu_ctx *c = s->c;
    s->quantize = cpu_acts(&w, 1);
    if (s->quantize) {
        s->q_src = x;
        s->q_in = n_in;
        cpu_par(c, n, cpu_task_quantize, s, n * n_in * 4);
    }
    const struct cpu_matmul_job job = {w, y};
    cpu_mm(c, &job, 1, x, n, NULL);
}

/* Epilogue of the paired gate/up matmul: hb = silu(hb) * hb2 = hb / (1 + exp(-hb)) * hb2 (cpu_swiglu_row),
 * or for gemma hb = gelu_tanh(hb) * hb2 (cpu_geglu_row), on rows [r0, r1) x outputs [o0, o1). Each element
 * depends only on its own two inputs. */
static void cpu_epi_swiglu(void *arg, int job, int64_t o0, int64_t o1, int32_t r0, int32_t r1)
{
    (void)job;
    const struct cpu_step *s = arg;
    const struct cpu_ctx *c = s->c;
    const int64_t n = c->m->hp.n_ff;
    void (*glu)(float *, const float *, int64_t) = c->m->hp.ffn_gelu ? cpu_geglu_row : cpu_swiglu_row;
    for (int32_t r = r0; r < r1; r++) glu(c->hb + (int64_t)r * n + o0, c->hb2 + (int64_t)r * n + o0, o1 - o0);
}

/* tmp = rmsnorm(tmp) * w, row by row (gemma's post-norms). */
static void cpu_post_norm(struct cpu_step *s, const float *w, int64_t work)
{
    s->post_w = w;
    cpu_par(s->c, s->b->n_rows, cpu_task_post_norm, s, work);
}

static int cpu_check_batch(const struct cpu_ctx *c, const struct step_batch *b, struct err *e)
{
    return backend_check_batch(b, c->m->hp.n_vocab, c->n_blocks, c->block_size, c->max_pos, e);
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
    const int64_t n_embd = hp->n_embd, n_q = (int64_t)hp->n_head * hp->head_dim, n_ff = hp->n_ff;
    const int64_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const int32_t n = b->n_rows;
    struct cpu_step s = {.c = c, .b = b, .layer = -1, .logits = logits};

    /* attention work items: the same for every layer of the step */
    int64_t att_n_pos = 0;
    const int64_t n_items = cpu_attn_plan(b, hp->n_head_kv, (int32_t)group, c->att_items, &att_n_pos);
    const int64_t n_parts = cpu_attn_parts(c->att_items, n_items, cpu_att_max_parts(c), c->att_parts);
    int64_t att_work = 0;
    for (int64_t i = 0; i < n_items; i++) att_work += c->att_items[i].cost;
    att_work *= hd;
    if (cpu_reserve_att(c, att_n_pos, e)) return -1;
    s.att_n_pos = c->att_pos;
    s.kv = (struct cpu_kv_layer){.type = c->kv_type, .block_size = c->block_size, .n_head_kv = hp->n_head_kv,
                                 .head_dim = hp->head_dim, .vec_bytes = c->kv_vec_bytes, .scale = hp->att_scale,
                                 .softcap = hp->att_softcap};
    const int64_t row_work = n * n_embd * 4; /* a per-row pass (norm, quantize) */
    const struct cpu_matmul_opts qkv_opts = {.tile_align = {hd, hd, hd}, .epilogue = cpu_epi_qkv, .epilogue_arg = &s};
    const struct cpu_matmul_opts glu_opts = {.paired = 1, .epilogue = cpu_epi_swiglu, .epilogue_arg = &s};

    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &c->layers[il]; /* matrices repacked */
        /* attention block */
        s.layer = il;
        s.kv.window = model_layer_window(hp, il);
        s.rope = s.kv.window > 0 && c->inv_freq_local ? c->rope_local : c->rope;
        s.embed = il == 0;
        s.add_tmp = il > 0; /* the previous layer's FFN output */
        s.norm_w = L->attn_norm.data;
        s.quantize = cpu_acts((const struct model_weight *[]){&L->wq, &L->wk, &L->wv}, 3);
        cpu_par(c, n, cpu_task_norm, &s, row_work + (il == 0 ? n * (n_embd + 16 * hp->n_rot) : 0));
        struct cpu_matmul_job qkv[3] = {{&L->wq, c->q}, {&L->wk, c->k}, {&L->wv, c->v}};
        cpu_mm(c, qkv, 3, c->xb, n, &qkv_opts); /* + biases, norms, RoPE, KV stores */
        s.kv.k = (const uint8_t *)c->k_cache + (uint64_t)il * c->kv_layer_bytes;
        s.kv.v = (const uint8_t *)c->v_cache + (uint64_t)il * c->kv_layer_bytes;
        cpu_par(c, n_parts, cpu_task_attn, &s, att_work);
        cpu_mm_one(&s, &L->wo, c->att, n_q, c->tmp, n);
        if (L->post_attn_norm.data) cpu_post_norm(&s, L->post_attn_norm.data, row_work);
        /* feed-forward block */
        s.embed = 0;
        s.norm_w = L->ffn_norm.data;
        s.quantize = cpu_acts((const struct model_weight *[]){&L->w_gate, &L->w_up}, 2);
        s.add_tmp = 1; /* the attention output */
        cpu_par(c, n, cpu_task_norm, &s, row_work);
        struct cpu_matmul_job gu[2] = {{&L->w_gate, c->hb}, {&L->w_up, c->hb2}};
        cpu_mm(c, gu, 2, c->xb, n, &glu_opts); /* + SwiGLU */
        cpu_mm_one(&s, &L->w_down, c->hb, n_ff, c->tmp, n);
        if (L->post_ffw_norm.data) cpu_post_norm(&s, L->post_ffw_norm.data, row_work);
    }
    /* the hidden states asked for (before the logit rows' x += tmp below) */
    if (b->n_hidden > 0) cpu_par(c, b->n_hidden, cpu_task_hidden, &s, (int64_t)b->n_hidden * n_embd * 4);
    /* the last residual add, the output norm and the output head, for the rows that want logits only */
    if (b->n_logits == 0) return 0;
    s.quantize = cpu_acts((const struct model_weight *[]){&c->output}, 1);
    cpu_par(c, b->n_logits, cpu_task_final, &s, (int64_t)b->n_logits * n_embd * 4);
    struct cpu_matmul_job out = {&c->output, logits};
    cpu_mm(c, &out, 1, c->xb, b->n_logits, NULL);
    if (hp->final_softcap > 0) cpu_par(c, b->n_logits, cpu_task_softcap, &s, (int64_t)b->n_logits * hp->n_vocab * 16);
    return 0;
}

static uint64_t cpu_weight_copy_bytes(void *ctx)
{
    const struct cpu_ctx *c = ctx;
    return c->packed_bytes;
}

static int cpu_memory(void *ctx, struct backend_memory *out, struct err *e)
{
    (void)ctx;
    struct sysmem_info mi;
    if (sysmem_read(&mi, e)) return err_prefix(e, "cpu backend memory");
    out->total = sysmem_ram(&mi);
    out->available = sysmem_available(&mi);
    out->headroom = sysmem_default_headroom(&mi);
    return 0;
}

static void cpu_caps(void *ctx, struct backend_caps *out)
{
    (void)ctx;
    /* 512 rows keep a step's activations in cache-friendly sizes while a long prompt still fills a step;
     * see bench/NOTES.md */
    out->default_max_batch_tokens = 512;
    out->weight_types = cpu_weight_types();
    /* the budget has always counted the weights against RAM; conservative now that load repacks the
     * matrices into memory of its own (weight_copy_bytes) and drops their file pages */
    out->weights_mapped = 1;
    out->gpu = 0;
    out->hidden_states = 1;
    out->archs = 1u << MODEL_ARCH_LLAMA | 1u << MODEL_ARCH_QWEN2 | 1u << MODEL_ARCH_QWEN3 | 1u << MODEL_ARCH_GEMMA3 |
                 1u << MODEL_ARCH_GEMMA2 | 1u << MODEL_ARCH_PHI3;
    out->kv_types = CPU_KV_TYPES;
}

static void cpu_free(void *ctx)
{
    struct cpu_ctx *c = ctx;
    if (!c) return;
    cpu_release(c);
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
    .weight_copy_bytes = cpu_weight_copy_bytes,
    .memory = cpu_memory,
    .caps = cpu_caps,
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
