/* test_cuda_attn — the CUDA backend's q/k/v epilogue and attention kernels against references on the host,
 * and the attention plan (runs only where a GPU is; test_cuda.c says how the device tests are split).
 *
 * Without NS_CUDA it prints "skip cuda_attn: built without CUDA"; with NS_CUDA but no usable GPU, "skip
 * cuda_attn: <reason>"; TEST_CUDA_ONLY=prefix runs only the tests whose names start with it. On a GPU, each
 * kernel on random inputs, outputs poisoned with NaN before the run, against a reference in double on the
 * host (measured values are printed as "# " lines):
 *  - q/k/v epilogue: q <= 1e-5 (|ref| + 1), K/V slots (F32) likewise, (F16) within 1 half ulp + 1e-5,
 *    and every slot no row owns still NaN; (Q8_0) every byte of the slots' int8 values and f16 scales
 *    equal to quant_quantize_row of the F32 run's K/V on the same inputs, every other byte unchanged,
 *    head_dim % 32 != 0 refused;
 *  - attention (CUDA cores; KV F32, F16, Q8_0 with the reference on the dequantized values): F32 out <=
 *    2e-5 (max|v| = 1); whole vs split items bit-identical; a decode row alone bit-identical to the same
 *    row inside a mixed batch; BF16 out = the F32 out rounded; for Q8_0 also the tensor-core test's
 *    batch (shared prefix, drafts) with its rows alone or in other batches bit-identical.
 *  - tensor-core attention (f16 KV; q and probabilities rounded to f16): F32 out <= 2e-3 (max|v| = 1);
 *    whole vs split, ldmatrix vs plain shared loads bit-identical; prefill and decode rows alone, in
 *    other item compositions or as lone split rows bit-identical to the same rows in a mixed batch;
 *    the same on q8_0 KV (each K/V value also rounded to f16) against the CUDA-core kernel on the same
 *    pool, <= 2e-3.
 */
#include <stdio.h>

#include "test.h"

#ifndef NS_CUDA
int main(void)
{
    printf("skip cuda_attn: built without CUDA\n");
    return 0;
}
#else

#include "cuda_test_util.h"

/* ---- attention setups: sequences of rows over a random block placement ---- */

#define MAX_ROWS 160
#define MAX_BT 256

struct att_case {
    struct cuda_harness_attn h;
    int32_t pos[MAX_ROWS], seq[MAX_ROWS], bt[MAX_BT], bt_off[8];
};

/* Sequences s: rows at positions [first[s], first[s] + n[s]); blocks of each sequence drawn without
 * replacement from a shuffled pool. */
static void att_case_init(struct att_case *c, int32_t n_head, int32_t n_kv, int32_t hd, int32_t bs, enum kv_type t,
                          int n_seqs, const int32_t *first, const int32_t *n)
{
    memset(c, 0, sizeof *c);
    int32_t n_bt = 0, n_rows = 0, perm[MAX_BT];
    for (int s = 0; s < n_seqs; s++) n_bt += (first[s] + n[s] + bs - 1) / bs;
    for (int i = 0; i < n_bt; i++) perm[i] = i;
    for (int i = n_bt - 1; i > 0; i--) {
        int j = (int)(rng_splitmix64(&g_rng) % (uint64_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    int32_t k = 0;
    for (int s = 0; s < n_seqs; s++) {
        c->bt_off[s] = k;
        for (int32_t b = 0; b < (first[s] + n[s] + bs - 1) / bs; b++) c->bt[k + b] = perm[k + b];
        k += (first[s] + n[s] + bs - 1) / bs;
        for (int32_t i = 0; i < n[s]; i++) {
            c->pos[n_rows] = first[s] + i;
            c->seq[n_rows++] = s;
        }
    }
    c->h = (struct cuda_harness_attn){n_head, n_kv, hd, hd, 0, 1e-6f, bs, n_bt, t, n_rows, c->pos, c->seq, n_seqs,
                                      c->bt_off, c->bt, n_bt, 0};
}

/* Prefix sharing: the first n_blocks blocks of sequence dst become those of sequence src (as the prefix
 * cache maps them); dst's own first blocks go unused. */
static void att_case_share(struct att_case *c, int dst, int src, int32_t n_blocks)
{
    for (int32_t i = 0; i < n_blocks; i++) c->bt[c->bt_off[dst] + i] = c->bt[c->bt_off[src] + i];
}

/* A batch of some rows of c (rows of one sequence consecutive in `rows`) over the same pool and block
 * tables, their q rows copied into qkv_out (w floats a row). */
static void att_case_subset(const struct att_case *c, const int32_t *rows, int n, const float *qkv, size_t w,
                            struct att_case *out, float *qkv_out)
{
    *out = *c;
    out->h.pos = out->pos;
    out->h.seq = out->seq;
    out->h.bt_off = out->bt_off;
    out->h.bt = out->bt;
    int n_seqs = 0;
    for (int i = 0; i < n; i++) {
        const int32_t r = rows[i];
        if (i == 0 || c->seq[r] != c->seq[rows[i - 1]]) out->bt_off[n_seqs++] = c->bt_off[c->seq[r]];
        out->pos[i] = c->pos[r];
        out->seq[i] = n_seqs - 1;
        memcpy(qkv_out + (size_t)i * w, qkv + (size_t)r * w, w * 4);
    }
    out->h.n_rows = n;
    out->h.n_seqs = n_seqs;
}

/* Index in a pool of (position p of sequence s, kv head h, dim 0). */
static size_t att_slot(const struct att_case *c, int s, int32_t p, int32_t h)
{
    const struct cuda_harness_attn *a = &c->h;
    int32_t blk = c->bt[c->bt_off[s] + p / a->block_size];
    return (((size_t)blk * a->n_head_kv + h) * a->block_size + p % a->block_size) * a->head_dim;
}

/* Reference attention in double: out (n_rows, n_head * hd). */
static void att_ref(const struct att_case *c, const float *qkv, const float *kp, const float *vp, double *out)
{
    const struct cuda_harness_attn *a = &c->h;
    const int32_t hd = a->head_dim, group = a->n_head / a->n_head_kv, w = (a->n_head + 2 * a->n_head_kv) * hd;
    double *sc = xmalloc(4096 * 8);
    for (int32_t r = 0; r < a->n_rows; r++)
        for (int32_t h = 0; h < a->n_head; h++) {
            const float *q = qkv + (size_t)r * w + (size_t)h * hd;
            double mx = -INFINITY, sum = 0;
            for (int32_t p = 0; p <= c->pos[r]; p++) {
                const float *k = kp + att_slot(c, c->seq[r], p, h / group);
                double s = 0;
                for (int32_t d = 0; d < hd; d++) s += (double)q[d] * k[d];
                sc[p] = s / sqrt((double)hd);
                mx = fmax(mx, sc[p]);
            }
            for (int32_t p = 0; p <= c->pos[r]; p++) sum += (sc[p] = exp(sc[p] - mx));
            for (int32_t d = 0; d < hd; d++) {
                double o = 0;
                for (int32_t p = 0; p <= c->pos[r]; p++) o += sc[p] * vp[att_slot(c, c->seq[r], p, h / group) + d];
                out[((size_t)r * a->n_head + h) * hd + d] = o / sum;
            }
        }
    free(sc);
}

/* x (n values of pools, n % 32 == 0 for Q8_0 and FP8) rounded to what a pool of type t holds: f16, or q8_0 /
 * fp8 groups of 32 quantized and read back (the reference then sees the values the kernel reads). */
/* A group of 32 as fp8 KV by the reference (e4m3_of): q (32), its scale's f16 bits. */
static void fp8_kv_group(const float *x, uint8_t *q, uint16_t *scale)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 448.0f;
    for (int i = 0; i < 32; i++) q[i] = d > 0.0f ? e4m3_of(x[i] / d) : 0;
    *scale = quant_f32_to_f16(d);
}

static void kv_round(float *x, size_t n, enum kv_type t)
{
    if (t == KV_TYPE_FP8)
        for (size_t g = 0; g + 32 <= n; g += 32) {
            uint8_t q[32];
            uint16_t sc;
            fp8_kv_group(x + g, q, &sc);
            for (int i = 0; i < 32; i++) x[g + i] = e4m3_value(q[i]) * quant_f16_to_f32(sc);
        }
    if (t == KV_TYPE_F16)
        for (size_t i = 0; i < n; i++) x[i] = quant_f16_to_f32(quant_f32_to_f16(x[i]));
    if (t == KV_TYPE_Q8_0)
        for (size_t g = 0; g + 32 <= n; g += 32) {
            uint8_t blk[34];
            quant_quantize_row(GGUF_DTYPE_Q8_0, x + g, blk, 32);
            quant_dequantize_row(GGUF_DTYPE_Q8_0, blk, x + g, 32);
        }
}

/* *dst = *src, pointing at dst's own arrays. */
static void att_case_copy(struct att_case *dst, const struct att_case *src)
{
    *dst = *src;
    dst->h.pos = dst->pos;
    dst->h.seq = dst->seq;
    dst->h.bt_off = dst->bt_off;
    dst->h.bt = dst->bt;
}

struct att_shape {
    int32_t n_head, n_kv, hd, bs;
};

/* The attention plan (host): a decode row's sequence with drafts is split row by row even past the rows an
 * item holds (8 here: 16 queries / group 2), so every item of a decode step has one row and the CUDA-core
 * kernel runs with one query per warp; a short prompt's rows are one item; a sequence of more rows than
 * CUDA_ATT_LONE_ROWS is cut into items of up to 8 rows. */
static void plan_case(const int32_t *pos, const int32_t *seq, int32_t n, int64_t want_items, int32_t want_lone,
                      int32_t want_rows)
{
    struct cuda_harness_attn h = {0};
    h.n_head = 8;
    h.n_head_kv = 4;
    h.n_rows = n;
    h.pos = pos;
    h.seq = seq;
    int32_t lone = -1, rows = -1;
    const int64_t items = cuda_harness_attn_plan(&h, &lone, &rows);
    CHECK_MSG(items == want_items && lone == want_lone && rows == want_rows,
              "%d rows: %lld items (want %lld), %d lone (want %d), largest %d rows (want %d)", (int)n, (long long)items,
              (long long)want_items, (int)lone, (int)want_lone, (int)rows, (int)want_rows);
}

TEST(attn_plan_lone_rows)
{
    int32_t pos[40], seq[40], n = 0;
    pos[n] = 300, seq[n++] = 0; /* 3 chunks */
    for (int32_t k = 0; k < 9; k++) pos[n] = 200 + k, seq[n++] = 1; /* 1 + 8 drafts, 2 chunks each */
    pos[n] = 130, seq[n++] = 2;
    plan_case(pos, seq, n, 3 + 18 + 2, 23, 1);
    for (int32_t k = 0; k < 5; k++) pos[n] = k, seq[n++] = 3; /* a prompt of 5 rows in its first chunk */
    plan_case(pos, seq, n, 24, 23, 5);
    n = 0;
    for (int32_t k = 0; k < 17; k++) pos[n] = 200 + k, seq[n++] = 0; /* past CUDA_ATT_LONE_ROWS: 8 + 8 + 1 rows */
    plan_case(pos, seq, n, 3, 0, 8);
}

TEST(kernel_attention)
{
    struct err e;
    /* stories-like (hd 8, group 2), SmolLM-like (hd 64, group 3), Llama-like (hd 128, group 4), MHA hd 80,
     * MHA hd 32, hd 256 (group 2); KV f32, f16 and q8_0 (head_dim 32, 64, 128 and 256) */
    const struct att_shape shapes[] = {{8, 4, 8, 16}, {9, 3, 64, 16}, {8, 2, 128, 16}, {4, 4, 80, 32}, {8, 8, 32, 16},
                                       {4, 2, 256, 16}};
    const enum kv_type types[4] = {KV_TYPE_F32, KV_TYPE_F16, KV_TYPE_Q8_0, KV_TYPE_FP8};
    /* seq 0: prefill from 0 (40 rows); seq 1: one decode row at 700 (3 chunks, split); seq 2: prefill
     * rows 300..305 (after earlier KV); seq 3: decode at 5 */
    const int32_t first[4] = {0, 700, 300, 5}, n[4] = {40, 1, 6, 1};
    static struct att_case c, c1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int kt = 0; kt < 4; kt++) {
            const struct att_shape *sh = &shapes[si];
            const enum kv_type t = types[kt];
            if ((t == KV_TYPE_Q8_0 || t == KV_TYPE_FP8) && sh->hd % 32) continue; /* no such pool */
            att_case_init(&c, sh->n_head, sh->n_kv, sh->hd, sh->bs, t, 4, first, n);
            const size_t pool = cuda_harness_pool_floats(&c.h), w = (size_t)(sh->n_head + 2 * sh->n_kv) * sh->hd;
            const size_t n_out = (size_t)c.h.n_rows * sh->n_head * sh->hd;
            float *kp = xmalloc(pool * 4), *vp = xmalloc(pool * 4), *qkv = xmalloc(c.h.n_rows * w * 4);
            float *o0 = xmalloc(n_out * 4), *o1 = xmalloc(n_out * 4), *ob = xmalloc(n_out * 4);
            double *ref = xmalloc(n_out * 8);
            fill(kp, pool, 1.0f);
            fill(vp, pool, 1.0f);
            fill(qkv, c.h.n_rows * w, 2.0f);
            kv_round(kp, pool, t);
            kv_round(vp, pool, t);
            att_ref(&c, qkv, kp, vp, ref);
            int32_t n_split = 0;
            CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 0, 0, o0, NULL, &e) == 0, "%s", e.msg);
            CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, o1, &n_split, &e) == 0, "%s", e.msg);
            CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 1, ob, NULL, &e) == 0, "%s", e.msg);
            double wv = worst(o0, ref, n_out, 0, 2e-5);
            fprintf(stderr, "# attention hd %d group %d kv %s: worst %.3g of tolerance, %d rows split\n", (int)sh->hd,
                    (int)(sh->n_head / sh->n_kv), model_kv_type_name(t), wv, (int)n_split);
            CHECK_MSG(wv <= 1.0, "hd %d kv %s: %.3g of tolerance", (int)sh->hd, model_kv_type_name(t), wv);
            CHECK(n_split >= 1); /* the decode row at 700 (and a lone last row of a prefill run) */
            CHECK_MSG(memcmp(o0, o1, n_out * 4) == 0, "hd %d kv %s: split items differ from whole items", (int)sh->hd,
                      model_kv_type_name(t));
            for (size_t i = 0; i < n_out; i++)
                CHECK_MSG(ob[i] == bf16_round(o0[i]), "hd %d kv %s: bf16 output %zu", (int)sh->hd,
                          model_kv_type_name(t), i);
            /* the decode row of seq 1 alone in its batch (same pool, same q) */
            att_case_copy(&c1, &c);
            c1.h.n_rows = 1;
            c1.pos[0] = 700;
            c1.seq[0] = 0;
            c1.bt_off[0] = c.bt_off[1];
            c1.h.n_seqs = 1;
            float *q1 = qkv + (size_t)40 * w, *one = xmalloc((size_t)sh->n_head * sh->hd * 4);
            CHECK_MSG(cuda_harness_attn(&c1.h, q1, kp, vp, 1, 0, one, NULL, &e) == 0, "%s", e.msg);
            CHECK_MSG(memcmp(one, o0 + (size_t)40 * sh->n_head * sh->hd, (size_t)sh->n_head * sh->hd * 4) == 0,
                      "hd %d kv %s: a decode row alone differs from the same row in a mixed batch", (int)sh->hd,
                      model_kv_type_name(t));
            free(one);
            free(kp);
            free(vp);
            free(qkv);
            free(o0);
            free(o1);
            free(ob);
            free(ref);
        }
}

/* Runs the rows `rows` of c as their own batch (kernel, split as given) and checks that each comes out
 * with the same bits as row rows[i] of full (the outputs of the whole batch c). Returns the rows that differ. */
static int att_rows_same(const struct att_case *c, const int32_t *rows, int n, const float *qkv, const float *kp,
                         const float *vp, int kernel, int split, const float *full)
{
    static struct att_case sub;
    const size_t w = (size_t)(c->h.n_head + 2 * c->h.n_head_kv) * c->h.head_dim,
                 ro = (size_t)c->h.n_head * c->h.head_dim;
    float *q = xmalloc((size_t)n * w * 4), *o = xmalloc((size_t)n * ro * 4);
    struct err e;
    int differ = 0;
    att_case_subset(c, rows, n, qkv, w, &sub, q);
    sub.h.kernel = kernel;
    if (cuda_harness_attn(&sub.h, q, kp, vp, split, 0, o, NULL, &e) != 0) {
        fprintf(stderr, "# subset batch: %s\n", e.msg);
        differ = n;
    } else {
        for (int i = 0; i < n; i++) differ += memcmp(o + (size_t)i * ro, full + (size_t)rows[i] * ro, ro * 4) != 0;
    }
    free(q);
    free(o);
    return differ;
}

/* Batch invariance on kernel_attention_tc's batch (seq 0: rows 0..76, seq 1's decode row 77, seq 2 78..117,
 * seq 3 118..138, seq 4 139, seq 5 140..142), each subset against full (the mixed batch's outputs by
 * `kernel`): seq 0's last rows with seq 4's row (other items, a lone last row); the decode row alone, and the
 * decode row with its drafts alone, split and not; seqs 3 (shared prefix) and 2 together by kernel `alt`;
 * every 19th row of seq 0 alone (a lone row of many lengths); seq 2's first and last rows alone (lone rows
 * past a chunk). Returns the rows that differ; prints each part that has some. */
static int att_rows_invariant(const struct att_case *c, const float *qkv, const float *kp, const float *vp, int kernel,
                              int alt, const float *full)
{
    static const char *const part[6] = {"seq 0's rows 60..76 with seq 4's", "the decode row alone",
                                        "the drafted decode rows alone", "seqs 3 and 2 (the other kernel)",
                                        "seq 0's rows alone", "seq 2's first and last rows alone"};
    int32_t rows[80];
    int d[6] = {0}, n = 0;
    for (int i = 0; i < 17; i++) rows[i] = 60 + i;
    rows[17] = 139;
    d[0] = att_rows_same(c, rows, 18, qkv, kp, vp, kernel, 1, full);
    rows[0] = 77;
    for (int split = 0; split < 2; split++) d[1] += att_rows_same(c, rows, 1, qkv, kp, vp, kernel, split, full);
    for (int i = 0; i < 3; i++) rows[i] = 140 + i;
    for (int split = 0; split < 2; split++) d[2] += att_rows_same(c, rows, 3, qkv, kp, vp, kernel, split, full);
    for (int i = 0; i < 21; i++) rows[i] = 118 + i;
    for (int i = 0; i < 40; i++) rows[21 + i] = 78 + i;
    d[3] = att_rows_same(c, rows, 61, qkv, kp, vp, alt, 1, full);
    for (int i = 0; i < 77; i++) rows[i] = i;
    for (int i = 0; i < 77; i += 19) d[4] += att_rows_same(c, rows + i, 1, qkv, kp, vp, kernel, 1, full);
    rows[0] = 78;
    rows[1] = 117;
    for (int i = 0; i < 2; i++) d[5] += att_rows_same(c, rows + i, 1, qkv, kp, vp, kernel, 1, full);
    for (int i = 0; i < 6; i++) {
        if (d[i]) fprintf(stderr, "# kernel %d hd %d: %d rows differ: %s\n", kernel, (int)c->h.head_dim, d[i], part[i]);
        n += d[i];
    }
    return n;
}

/* The tensor-core kernel (f16 KV): against the reference in double, |diff| <= 2e-3 (max|v| = 1; q and the
 * probabilities are rounded to f16, the accumulation is f32); whole vs split items, ldmatrix vs plain
 * shared loads and alone vs in a mixed batch all bit-identical; BF16 out = the F32 out rounded. Shapes:
 * head_dim 64 and 128, GQA groups 1, 4 and 8, blocks of 16 and 32; sequences: a prefill of 77 rows from
 * 0 (not a multiple of the 32-position tile, several items), a decode row at 700 (6 chunks, split), 40
 * prefill rows 370..409 (across a chunk boundary), 21 prefill rows after a 2-block prefix shared with the
 * first sequence (the prefix cache), a decode row at 5, a decode row with two drafts at 254..256 (a split
 * item of three rows, across a chunk boundary). */
TEST(kernel_attention_tc)
{
    struct err e;
    const struct att_shape shapes[] = {{8, 8, 64, 16}, {16, 4, 128, 16}, {16, 2, 128, 32}, {8, 2, 64, 16},
                                       {16, 1, 64, 16}}; /* the last: group 16, both m-row halves of a decode warp */
    static struct att_case c;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct att_shape *sh = &shapes[si];
        const int32_t first[6] = {0, 700, 370, 2 * sh->bs, 5, 254}, n[6] = {77, 1, 40, 21, 1, 3};
        att_case_init(&c, sh->n_head, sh->n_kv, sh->hd, sh->bs, KV_TYPE_F16, 6, first, n);
        att_case_share(&c, 3, 0, 2);
        c.h.kernel = 1;
        const size_t pool = cuda_harness_pool_floats(&c.h), w = (size_t)(sh->n_head + 2 * sh->n_kv) * sh->hd;
        const size_t n_out = (size_t)c.h.n_rows * sh->n_head * sh->hd;
        float *kp = xmalloc(pool * 4), *vp = xmalloc(pool * 4), *qkv = xmalloc(c.h.n_rows * w * 4);
        float *o0 = xmalloc(n_out * 4), *o1 = xmalloc(n_out * 4), *o2 = xmalloc(n_out * 4), *ob = xmalloc(n_out * 4);
        double *ref = xmalloc(n_out * 8);
        fill(kp, pool, 1.0f);
        fill(vp, pool, 1.0f);
        fill(qkv, c.h.n_rows * w, 2.0f);
        kv_round(kp, pool, KV_TYPE_F16);
        kv_round(vp, pool, KV_TYPE_F16);
        att_ref(&c, qkv, kp, vp, ref);
        int32_t n_split = 0;
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 0, 0, o0, NULL, &e) == 0, "%s", e.msg);
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, o1, &n_split, &e) == 0, "%s", e.msg);
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 1, ob, NULL, &e) == 0, "%s", e.msg);
        c.h.kernel = 2;
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, o2, NULL, &e) == 0, "%s", e.msg);
        c.h.kernel = 1;
        const double wv = worst(o0, ref, n_out, 0, 2e-3), wl = worst(o2, ref, n_out, 0, 2e-3);
        fprintf(stderr, "# attention tc hd %d group %d bs %d: worst %.3g (ldmatrix) %.3g (plain loads) of tolerance, "
                "%d rows split\n", (int)sh->hd, (int)(sh->n_head / sh->n_kv), (int)sh->bs, wv, wl, (int)n_split);
        fprintf(stderr, "# tc verdict: ldmatrix %s, plain loads %s\n", wv <= 1.0 ? "ok" : "bad",
                wl <= 1.0 ? "ok" : "bad");
        CHECK_MSG(wv <= 1.0, "hd %d group %d: %.3g of tolerance", (int)sh->hd, (int)(sh->n_head / sh->n_kv), wv);
        CHECK_MSG(wl <= 1.0, "hd %d group %d plain loads: %.3g of tolerance", (int)sh->hd,
                  (int)(sh->n_head / sh->n_kv), wl);
        CHECK(n_split >= 4); /* the decode rows at 700 and 5, and the three at 254..256 */
        CHECK_MSG(memcmp(o0, o1, n_out * 4) == 0, "hd %d: split items differ from whole items", (int)sh->hd);
        CHECK_MSG(memcmp(o1, o2, n_out * 4) == 0, "hd %d: plain shared loads differ from ldmatrix", (int)sh->hd);
        size_t bad = 0;
        for (size_t i = 0; i < n_out; i++) bad += ob[i] != bf16_round(o0[i]);
        CHECK_MSG(bad == 0, "hd %d: %zu bf16 outputs are not the f32 ones rounded", (int)sh->hd, bad);
        const int d = att_rows_invariant(&c, qkv, kp, vp, 1, 2, o0);
        CHECK_MSG(d == 0, "hd %d group %d: %d rows differ alone or in other batches (# lines)", (int)sh->hd,
                  (int)(sh->n_head / sh->n_kv), d);
        free(kp);
        free(vp);
        free(qkv);
        free(o0);
        free(o1);
        free(o2);
        free(ob);
        free(ref);
    }
}

/* The CUDA-core kernel on q8_0 KV, on kernel_attention_tc's batch (prefills across tiles and chunks, a shared
 * prefix, decode rows with and without drafts): against the reference in double on the dequantized K/V
 * (<= 2e-5, the f32 kernel's tolerance: the values it reads are exactly those), whole vs split items
 * bit-identical, BF16 out = the F32 out rounded,
 * and rows alone or in other batches bit-identical to the same rows in the mixed batch. Shapes: head_dim
 * 32, 64, 128 and 256 (one to eight 32-element groups a lane), GQA groups 1 to 8, blocks of 16 and 32. */
static void kernel_attention_q8_case(enum kv_type t)
{
    struct err e;
    const struct att_shape shapes[] = {{8, 8, 32, 16}, {8, 2, 64, 16}, {16, 4, 128, 32}, {8, 1, 256, 16}};
    static struct att_case c;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct att_shape *sh = &shapes[si];
        const int32_t first[6] = {0, 700, 370, 2 * sh->bs, 5, 254}, n[6] = {77, 1, 40, 21, 1, 3};
        att_case_init(&c, sh->n_head, sh->n_kv, sh->hd, sh->bs, t, 6, first, n);
        att_case_share(&c, 3, 0, 2);
        const size_t pool = cuda_harness_pool_floats(&c.h), w = (size_t)(sh->n_head + 2 * sh->n_kv) * sh->hd;
        const size_t n_out = (size_t)c.h.n_rows * sh->n_head * sh->hd;
        float *kp = xmalloc(pool * 4), *vp = xmalloc(pool * 4), *qkv = xmalloc(c.h.n_rows * w * 4);
        float *o0 = xmalloc(n_out * 4), *o1 = xmalloc(n_out * 4), *ob = xmalloc(n_out * 4);
        double *ref = xmalloc(n_out * 8);
        fill(kp, pool, 1.0f);
        fill(vp, pool, 1.0f);
        fill(qkv, c.h.n_rows * w, 2.0f);
        kv_round(kp, pool, t);
        kv_round(vp, pool, t);
        att_ref(&c, qkv, kp, vp, ref);
        int32_t n_split = 0;
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 0, 0, o0, NULL, &e) == 0, "%s", e.msg);
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, o1, &n_split, &e) == 0, "%s", e.msg);
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 1, ob, NULL, &e) == 0, "%s", e.msg);
        const double wv = worst(o0, ref, n_out, 0, 2e-5);
        size_t d01 = 0, bad = 0;
        for (size_t i = 0; i < n_out; i++) {
            d01 += memcmp(o0 + i, o1 + i, 4) != 0;
            bad += ob[i] != bf16_round(o0[i]);
        }
        fprintf(stderr, "# attention %s hd %d group %d bs %d: worst %.3g of tolerance, %d rows split; outputs that "
                "differ: whole vs split %zu, bf16 vs f32 rounded %zu\n", model_kv_type_name(t), (int)sh->hd,
                (int)(sh->n_head / sh->n_kv), (int)sh->bs, wv, (int)n_split, d01, bad);
        CHECK_MSG(wv <= 1.0, "hd %d group %d: %.3g of tolerance", (int)sh->hd, (int)(sh->n_head / sh->n_kv), wv);
        CHECK(n_split >= 1); /* the decode row at 700 at least */
        CHECK_MSG(d01 == 0, "hd %d: %zu outputs of split items differ from whole items", (int)sh->hd, d01);
        CHECK_MSG(bad == 0, "hd %d: %zu bf16 outputs are not the f32 ones rounded", (int)sh->hd, bad);
        const int d = att_rows_invariant(&c, qkv, kp, vp, 0, 0, o0);
        fprintf(stderr, "# attention %s hd %d: %d rows differ alone or in other batches\n", model_kv_type_name(t),
                (int)sh->hd, d);
        CHECK_MSG(d == 0, "hd %d: %d rows differ alone or in other batches from the same rows in the mixed batch",
                  (int)sh->hd, d);
        free(kp);
        free(vp);
        free(qkv);
        free(o0);
        free(o1);
        free(ob);
        free(ref);
    }
}

TEST(kernel_attention_q8)
{
    kernel_attention_q8_case(KV_TYPE_Q8_0);
    if (!test_cur_failed) kernel_attention_q8_case(KV_TYPE_FP8);
}

/* The tensor-core kernel on q8_0 KV, on kernel_attention_tc's batch: against the CUDA-core kernel on the same
 * pool (the exact values, <= 2e-5 of the reference), |diff| <= 2e-3 (max|v| = 1), the f16 kernel's tolerance:
 * q, the probabilities and here also each K/V value are rounded to f16 once (2^-11 relative each); whole vs
 * split items, ldmatrix vs plain shared loads and rows alone or in other batches bit-identical; BF16 out =
 * the F32 out rounded (every output poisoned with NaN first by the harness). Shapes: head_dim 64 and 128,
 * GQA groups 1, 4, 8 and 16 (both m-row halves of a decode warp), blocks of 8 (a block looked up per
 * position), 16 (a tile's halves in two blocks; at head_dim 64 a copy pass spans both) and 32. */
static void kernel_attention_tc_q8_case(enum kv_type t)
{
    struct err e;
    const struct att_shape shapes[] = {{8, 2, 64, 16}, {16, 4, 128, 32}, {16, 2, 128, 16}, {16, 1, 64, 8},
                                       {8, 8, 128, 16}};
    static struct att_case c;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct att_shape *sh = &shapes[si];
        const int32_t first[6] = {0, 700, 370, 2 * sh->bs, 5, 254}, n[6] = {77, 1, 40, 21, 1, 3};
        att_case_init(&c, sh->n_head, sh->n_kv, sh->hd, sh->bs, t, 6, first, n);
        att_case_share(&c, 3, 0, 2);
        const size_t pool = cuda_harness_pool_floats(&c.h), w = (size_t)(sh->n_head + 2 * sh->n_kv) * sh->hd;
        const size_t n_out = (size_t)c.h.n_rows * sh->n_head * sh->hd;
        float *kp = xmalloc(pool * 4), *vp = xmalloc(pool * 4), *qkv = xmalloc(c.h.n_rows * w * 4);
        float *oc = xmalloc(n_out * 4), *o0 = xmalloc(n_out * 4), *o1 = xmalloc(n_out * 4), *o2 = xmalloc(n_out * 4),
              *ob = xmalloc(n_out * 4);
        double *ref = xmalloc(n_out * 8);
        fill(kp, pool, 1.0f);
        fill(vp, pool, 1.0f);
        fill(qkv, c.h.n_rows * w, 2.0f);
        int32_t n_split = 0;
        c.h.kernel = 0;
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, oc, NULL, &e) == 0, "%s", e.msg);
        c.h.kernel = 1;
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 0, 0, o0, NULL, &e) == 0, "%s", e.msg);
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, o1, &n_split, &e) == 0, "%s", e.msg);
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 1, ob, NULL, &e) == 0, "%s", e.msg);
        c.h.kernel = 2;
        CHECK_MSG(cuda_harness_attn(&c.h, qkv, kp, vp, 1, 0, o2, NULL, &e) == 0, "%s", e.msg);
        c.h.kernel = 1;
        for (size_t i = 0; i < n_out; i++) ref[i] = oc[i];
        const double wv = worst(o0, ref, n_out, 0, 2e-3), wl = worst(o2, ref, n_out, 0, 2e-3);
        size_t d01 = 0, d12 = 0, bad = 0;
        for (size_t i = 0; i < n_out; i++) {
            d01 += memcmp(o0 + i, o1 + i, 4) != 0;
            d12 += memcmp(o1 + i, o2 + i, 4) != 0;
            bad += ob[i] != bf16_round(o0[i]);
        }
        fprintf(stderr, "# attention tc %s hd %d group %d bs %d: worst vs CUDA cores %.3g (ldmatrix) %.3g (plain "
                "loads) of tolerance, %d rows split; outputs that differ: whole vs split %zu, ldmatrix vs plain "
                "loads %zu, bf16 vs f32 rounded %zu\n", model_kv_type_name(t), (int)sh->hd,
                (int)(sh->n_head / sh->n_kv), (int)sh->bs, wv, wl, (int)n_split, d01, d12, bad);
        CHECK_MSG(wv <= 1.0 && wl <= 1.0, "hd %d group %d bs %d: %.3g, %.3g of tolerance", (int)sh->hd,
                  (int)(sh->n_head / sh->n_kv), (int)sh->bs, wv, wl);
        CHECK(n_split >= 4); /* the decode rows at 700 and 5, and the three at 254..256 */
        CHECK_MSG(d01 == 0 && d12 == 0, "hd %d: %zu outputs differ whole vs split, %zu ldmatrix vs plain loads",
                  (int)sh->hd, d01, d12);
        CHECK_MSG(bad == 0, "hd %d: %zu bf16 outputs are not the f32 ones rounded", (int)sh->hd, bad);
        const int d = att_rows_invariant(&c, qkv, kp, vp, 1, 2, o0);
        CHECK_MSG(d == 0, "hd %d group %d bs %d: %d rows differ alone or in other batches (# lines)", (int)sh->hd,
                  (int)(sh->n_head / sh->n_kv), (int)sh->bs, d);
        free(kp);
        free(vp);
        free(qkv);
        free(oc);
        free(o0);
        free(o1);
        free(o2);
        free(ob);
        free(ref);
    }
}

TEST(kernel_attention_tc_q8)
{
    kernel_attention_tc_q8_case(KV_TYPE_Q8_0);
    if (!test_cur_failed) kernel_attention_tc_q8_case(KV_TYPE_FP8);
}

/* Reference q/k/v epilogue of one row in double; y: (n_head + 2 n_kv) * hd values, in place. */
static void qkv_ref(const struct cuda_harness_attn *a, double *y, const float *bias, const float *qn, const float *kn,
                    const float *cs)
{
    const int32_t hd = a->head_dim, nh = a->n_head, nkv = a->n_head_kv, half = a->n_rot / 2;
    for (int32_t hi = 0; hi < nh + 2 * nkv; hi++) {
        double *h = y + (size_t)hi * hd;
        if (bias)
            for (int32_t i = 0; i < hd; i++) h[i] += bias[(size_t)hi * hd + i];
        if (hi >= nh + nkv) continue;
        const float *nw = hi < nh ? qn : kn;
        if (nw) {
            double ss = 0;
            for (int32_t i = 0; i < hd; i++) ss += h[i] * h[i];
            double sc = 1.0 / sqrt(ss / hd + a->norm_eps);
            for (int32_t i = 0; i < hd; i++) h[i] = h[i] * sc * nw[i];
        }
        for (int32_t i = 0; i < half; i++) {
            int32_t p = a->rope_neox ? i : 2 * i, q = a->rope_neox ? i + half : 2 * i + 1;
            double c = cs[2 * i], s = cs[2 * i + 1], x0 = h[p], x1 = h[q];
            h[p] = x0 * c - x1 * s;
            h[q] = x0 * s + x1 * c;
        }
    }
}

/* The q8_0 epilogue on the inputs of an F32 run of case c that gave q32 (its qkv out) and k32 / v32 (its
 * pools): pools poisoned with byte patterns, uploaded as bytes; every K/V slot a row owns must then hold bit
 * for bit quant_quantize_row (GGUF_DTYPE_Q8_0) of the F32 run's values (the kernel computes the same f32
 * values before it stores them), at the layout cuda_kernels.h states (int8 values [vector][head_dim], then
 * the f16 scales [vector][head_dim / 32]); every other byte keeps its poison; q equals the F32 run's. With
 * head_dim % 32 != 0 the launch must be refused. Returns the number of differing bytes (q elements count
 * as one each), details of the first few on stderr; -1 if the harness failed. */
static long qkv_q8_check(const struct att_case *c, enum kv_type t, const float *qkv0, const float *bias,
                         const float *qn, const float *kn, const float *cs, const float *q32, const float *k32,
                         const float *v32)
{
    static struct att_case q8;
    att_case_copy(&q8, c);
    q8.h.kv_type = t;
    const char *tn = model_kv_type_name(t);
    const struct cuda_harness_attn *a = &q8.h;
    const int32_t hd = a->head_dim, nkv = a->n_head_kv, R = a->n_rows;
    const size_t w = (size_t)(a->n_head + 2 * nkv) * hd, nb = cuda_harness_pool_bytes(a),
                 nf = cuda_harness_pool_floats(a);
    uint8_t *kb = xmalloc(nb), *vb = xmalloc(nb), *ek = xmalloc(nb), *ev = xmalloc(nb);
    float *qkv = xmalloc((size_t)R * w * 4);
    struct err e;
    long bad = -1;
    memset(kb, 0xA5, nb);
    memset(vb, 0x5A, nb);
    memcpy(ek, kb, nb);
    memcpy(ev, vb, nb);
    memcpy(qkv, qkv0, (size_t)R * w * 4);
    const int rc = cuda_harness_qkv_bytes(a, qkv, bias, qn, kn, cs, kb, vb, &e);
    if (hd % 32) {
        fprintf(stderr, "# qkv %s hd %d: %s%s\n", tn, (int)hd, rc ? "refused: " : "NOT refused", rc ? e.msg : "");
        bad = rc ? 0 : 1;
        goto out;
    }
    if (rc) {
        fprintf(stderr, "# qkv %s hd %d: %s\n", tn, (int)hd, e.msg);
        goto out;
    }
    /* the expected pools: the poison, with each row's slots quantized on the host from the F32 run's values */
    for (int32_t r = 0; r < R; r++)
        for (int32_t h = 0; h < 2 * nkv; h++) {
            const size_t at = att_slot(&q8, q8.seq[r], q8.pos[r], h % nkv); /* = vector index * hd */
            for (int32_t g = 0; g < hd / 32; g++) {
                uint8_t blk[34];
                const float *x = (h < nkv ? k32 : v32) + at + 32 * g;
                if (t == KV_TYPE_FP8) {
                    uint16_t sc;
                    fp8_kv_group(x, blk + 2, &sc);
                    memcpy(blk, &sc, 2);
                } else {
                    quant_quantize_row(GGUF_DTYPE_Q8_0, x, blk, 32);
                }
                memcpy((h < nkv ? ek : ev) + at + 32 * g, blk + 2, 32);
                memcpy((h < nkv ? ek : ev) + nf + 2 * (at / 32 + g), blk, 2);
            }
        }
    bad = 0;
    for (int p = 0; p < 2; p++) {
        const uint8_t *got = p ? vb : kb, *want = p ? ev : ek;
        const float *x = p ? v32 : k32;
        for (size_t i = 0; i < nb; i++) {
            if (got[i] == want[i]) continue;
            if (bad++ >= 8) continue;
            if (i < nf)
                fprintf(stderr, "# qkv %s hd %d: %c value %zu (vector %zu, group %zu): device %d, host %d (f32 %.9g)\n",
                        tn, (int)hd, "KV"[p], i, i / (size_t)hd, i % (size_t)hd / 32, (int8_t)got[i], (int8_t)want[i],
                        (double)x[i]);
            else if (i < nf + nf / 16)
                fprintf(stderr, "# qkv %s hd %d: %c scale byte %zu (group %zu): device 0x%02x, host 0x%02x\n",
                        tn, (int)hd, "KV"[p], i - nf, (i - nf) / 2, got[i], want[i]);
            else
                fprintf(stderr, "# qkv %s hd %d: %c padding byte %zu: 0x%02x, poison 0x%02x\n", tn, (int)hd, "KV"[p],
                        i - nf - nf / 16, got[i], want[i]);
        }
    }
    for (int32_t r = 0; r < R; r++)
        for (int32_t i = 0; i < a->n_head * hd; i++)
            if (memcmp(qkv + (size_t)r * w + i, q32 + (size_t)r * w + i, 4) && bad++ < 8)
                fprintf(stderr, "# qkv %s hd %d: q row %d element %d differs from the F32 run's\n", tn, (int)hd,
                        (int)r, (int)i);
    fprintf(stderr, "# qkv %s hd %d: %d rows x %d K/V vectors quantized, %ld bytes differ from the host's "
            "quantization or the poison\n", tn, (int)hd, (int)R, (int)(2 * nkv), bad);
out:
    free(kb);
    free(vb);
    free(ek);
    free(ev);
    free(qkv);
    return bad;
}

TEST(kernel_qkv)
{
    struct err e;
    /* (shape, n_rot, neox, bias, norms) */
    const struct {
        struct att_shape s;
        int32_t n_rot;
        int neox, bias, norm;
    } cases[] = {{{8, 4, 8, 16}, 8, 0, 0, 0},   {{9, 3, 64, 16}, 64, 1, 1, 0}, {{8, 2, 128, 16}, 128, 1, 0, 1},
                 {{4, 2, 64, 4}, 32, 0, 1, 1},  {{4, 1, 32, 2}, 32, 1, 1, 1},  {{4, 2, 256, 2}, 256, 0, 1, 1}};
    const int32_t first[3] = {0, 300, 17}, n[3] = {20, 1, 3};
    static struct att_case c;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int kt = 0; kt < 2; kt++) {
            const enum kv_type t = kt ? KV_TYPE_F16 : KV_TYPE_F32;
            const struct att_shape *sh = &cases[ci].s;
            att_case_init(&c, sh->n_head, sh->n_kv, sh->hd, sh->bs, t, 3, first, n);
            c.h.n_rot = cases[ci].n_rot;
            c.h.rope_neox = cases[ci].neox;
            const size_t pool = cuda_harness_pool_floats(&c.h), w = (size_t)(sh->n_head + 2 * sh->n_kv) * sh->hd;
            const int32_t R = c.h.n_rows, half = c.h.n_rot / 2;
            float *qkv = xmalloc(R * w * 4), *qkv0 = xmalloc(R * w * 4), *kp = xmalloc(pool * 4),
                  *vp = xmalloc(pool * 4);
            float *bias = xmalloc(w * 4), qn[256], kn[256], *cs = xmalloc((size_t)R * half * 2 * 4 + 4);
            double *y = xmalloc(w * 8), inv[128];
            fill(qkv0, R * w, 2.0f);
            fill(bias, w, 0.1f);
            for (int i = 0; i < sh->hd; i++) {
                qn[i] = 1.0f + frand(0.1f);
                kn[i] = 1.0f + frand(0.1f);
            }
            for (int i = 0; i < half; i++) inv[i] = pow(10000.0, -2.0 * i / c.h.n_rot);
            CHECK_MSG(cuda_harness_rope_table(c.pos, R, inv, c.h.n_rot, cs, &e) == 0, "%s", e.msg);
            for (size_t i = 0; i < pool; i++) kp[i] = vp[i] = NAN; /* the pool's other slots stay NaN */
            memcpy(qkv, qkv0, R * w * 4);
            CHECK_MSG(cuda_harness_qkv(&c.h, qkv, cases[ci].bias ? bias : NULL, cases[ci].norm ? qn : NULL,
                                       cases[ci].norm ? kn : NULL, cs, kp, vp, &e) == 0, "%s", e.msg);
            double wq = 0, wkv = 0;
            size_t written = 0;
            for (int32_t r = 0; r < R; r++) {
                for (size_t i = 0; i < w; i++) y[i] = qkv0[(size_t)r * w + i];
                qkv_ref(&c.h, y, cases[ci].bias ? bias : NULL, cases[ci].norm ? qn : NULL, cases[ci].norm ? kn : NULL,
                        cs + (size_t)r * half * 2);
                for (int32_t i = 0; i < sh->n_head * sh->hd; i++) {
                    double d = fabs(qkv[(size_t)r * w + i] - y[i]) / (1e-5 * (fabs(y[i]) + 1));
                    if (isnan(d) || d > wq) wq = isnan(d) ? INFINITY : d;
                }
                for (int32_t h = 0; h < 2 * sh->n_kv; h++) {
                    const float *slot = (h < sh->n_kv ? kp : vp) + att_slot(&c, c.seq[r], c.pos[r], h % sh->n_kv);
                    for (int32_t d = 0; d < sh->hd; d++) {
                        const double ref = y[(size_t)(sh->n_head + h) * sh->hd + d];
                        const double tol = (kt ? fabs(ref) / 1024 : 1e-5 * (fabs(ref) + 1)) + 1e-5;
                        double dd = fabs(slot[d] - ref) / tol;
                        if (isnan(dd) || dd > wkv) wkv = isnan(dd) ? INFINITY : dd;
                    }
                }
                written += 2 * (size_t)sh->n_kv * sh->hd;
            }
            size_t not_nan = 0;
            for (size_t i = 0; i < pool; i++) not_nan += !isnan(kp[i]) + !isnan(vp[i]);
            fprintf(stderr, "# qkv case %zu kv %s: q worst %.3g, k/v worst %.3g of tolerance\n", ci,
                    model_kv_type_name(t), wq, wkv);
            CHECK_MSG(wq <= 1.0 && wkv <= 1.0, "case %zu kv %d: q %.3g, kv %.3g", ci, kt, wq, wkv);
            CHECK_MSG(not_nan == written, "case %zu: %zu pool values written, %zu expected", ci, not_nan, written);
            if (t == KV_TYPE_F32) { /* q8_0 on the same inputs, against this run's K/V quantized on the host */
                for (int kt = 0; kt < 2; kt++) {
                    const enum kv_type t = kt ? KV_TYPE_FP8 : KV_TYPE_Q8_0;
                    const long bad =
                        qkv_q8_check(&c, t, qkv0, cases[ci].bias ? bias : NULL, cases[ci].norm ? qn : NULL,
                                     cases[ci].norm ? kn : NULL, cs, qkv, kp, vp);
                    CHECK_MSG(bad == 0, "case %zu (hd %d) kv %s: %ld bytes differ (-1: the harness failed; # lines)",
                              ci, (int)sh->hd, model_kv_type_name(t), bad);
                }
            }
            free(qkv);
            free(qkv0);
            free(kp);
            free(vp);
            free(bias);
            free(cs);
            free(y);
        }
}

int main(void)
{
    char why[512];
    if (!backend_cuda_probe(why, sizeof why)) {
        printf("skip cuda_attn: %s\n", why);
        return 0;
    }
    RUN_SEL(kernel_qkv);
    RUN_SEL(attn_plan_lone_rows);
    RUN_SEL(kernel_attention);
    RUN_SEL(kernel_attention_tc);
    RUN_SEL(kernel_attention_q8);
    RUN_SEL(kernel_attention_tc_q8);
    return test_summary();
}

#endif
