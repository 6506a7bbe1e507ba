/* bench/bench_cuda.c — step timings of the CUDA backend called directly, against two ceilings measured in
 * the same run: a BF16 GEMM rate (cuBLAS, 8192^3, random data) and a device-to-device copy bandwidth
 * (bytes read + written).
 *
 *   bench_cuda MODEL [-L 1024] [-B 1,64,256] [-N 512,2048] [--steps 8] [--kv-type f16|f32|q8_0]
 *
 * Prefill: max(B) sequences of L tokens each are prefilled in steps of N rows (rows packed across
 * sequences; logits only for a sequence's last prompt row), for each N in the list (the KV is rewritten
 * each time); reported per step: ms, rows/s, FLOPs (linear layers of every row, causal attention, the
 * head of the logit rows) / GEMM rate / step time = the fraction of the compute limit.
 * Decode: for each B, steps of B rows (one per sequence, at positions L, L+1, ...; every row wants
 * logits); reported: ms/step (median of --steps after 2 warm-ups), tok/s, and (device weight bytes + KV
 * bytes read) / copy bandwidth / step time = the fraction of the bandwidth limit, and the FLOP fraction;
 * plus what the logits copy to the host costs per step.
 * Built by `make CUDA=1 BUILD=build-cuda build-cuda/bench/bench_cuda`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/log.h"

#ifndef NS_CUDA
int main(void)
{
    fprintf(stderr, "bench_cuda: built without CUDA (make CUDA=1 BUILD=build-cuda build-cuda/bench/bench_cuda)\n");
    return 1;
}
#else
#include "backend/cuda.h"
#include "../tests/cuda_harness.h" /* linked in by the Makefile */

#define BS 16
#define MAX_LIST 16

struct bench {
    const struct model *m;
    struct backend be;
    int32_t L, n_seqs, blocks_per_seq;
    enum kv_type kv_type; /* of the pool (--kv-type; f16 by default) */
    int32_t *bt; /* (n_seqs, blocks_per_seq) */
    double gemm_tflops, copy_gbs;
    /* step buffers */
    int32_t *tokens, *pos, *seq, *lrows;
    struct step_seq *ss;
    float *logits;
    int32_t cap_rows;
};

static int parse_list(const char *s, int32_t *out)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        out[n++] = (int32_t)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

/* Linear-layer FLOPs of one row (all layers), and of the output head for one logit row. */
static double flops_linear_row(const struct model_hparams *hp)
{
    const double e = hp->n_embd, q = (double)hp->n_head * hp->head_dim, kv = (double)hp->n_head_kv * hp->head_dim;
    return 2.0 * hp->n_layer * (e * (q + 2 * kv) + q * e + 3.0 * e * hp->n_ff);
}

static double flops_head_row(const struct model_hparams *hp)
{
    return 2.0 * hp->n_embd * (double)hp->n_vocab;
}

/* Attention FLOPs of one row at position p (QK^T and PV over p + 1 positions, all layers). */
static double flops_attn_row(const struct model_hparams *hp, int32_t p)
{
    return 4.0 * hp->n_layer * (double)hp->n_head * hp->head_dim * (double)(p + 1);
}

static double token_id(int32_t s, int32_t p, int32_t n_vocab)
{
    return (double)(1 + (int32_t)(((uint64_t)s * 2654435761u + (uint64_t)p * 40503u) % (uint64_t)(n_vocab - 1)));
}

/* Prints the per-phase device time of the profiled steps (ms per step) and turns the profile off. */
static void print_profile(struct bench *B, const char *label)
{
    struct cuda_profile pr;
    if (backend_cuda_profile_get(&B->be, &pr) || pr.n_steps == 0) return;
    printf("    %s profile (ms/step):", label);
    for (int i = 0; i < CUDA_PROF_N; i++)
        if (pr.ms[i] > 0) printf(" %s %.3f", backend_cuda_profile_name(i), pr.ms[i] / (double)pr.n_steps);
    printf("\n");
    backend_cuda_profile_enable(&B->be, 0);
}

/* Runs one step; returns wall seconds (forward synchronizes), or -1. */
static double run_step(struct bench *B, int32_t n_rows, int32_t n_seqs, int32_t n_logits, struct err *e)
{
    struct step_batch b = {n_rows, B->tokens, B->pos, B->seq, n_seqs, B->ss, n_logits, B->lrows, 0, NULL, NULL};
    double t0 = clock_now();
    if (B->be.ops->forward(B->be.ctx, &b, B->logits, e)) return -1;
    return clock_now() - t0;
}

/* Prefill of all sequences to L tokens in steps of n rows; prints one line. */
static int bench_prefill(struct bench *B, int32_t n, struct err *e)
{
    const struct model_hparams *hp = &B->m->hp;
    double total = 0, flops = 0;
    int64_t rows_done = 0;
    int32_t s = 0, p = 0, steps = 0;
    backend_cuda_profile_enable(&B->be, 1); /* events between phases: ~1 us of host time each */
    while (s < B->n_seqs) {
        int32_t r = 0, k = 0, nl = 0;
        double f = 0;
        while (r < n && s < B->n_seqs) {
            B->ss[k] = (struct step_seq){B->bt + (size_t)s * B->blocks_per_seq, B->blocks_per_seq};
            while (r < n && p < B->L) {
                B->tokens[r] = (int32_t)token_id(s, p, hp->n_vocab);
                B->pos[r] = p;
                B->seq[r] = k;
                f += flops_linear_row(hp) + flops_attn_row(hp, p);
                r++;
                p++;
            }
            if (p == B->L) {
                B->lrows[nl++] = r - 1;
                f += flops_head_row(hp);
                s++;
                p = 0;
            }
            k++;
        }
        double t = run_step(B, r, k, nl, e);
        if (t < 0) return -1;
        if (steps > 0) { /* the first step warms up */
            total += t;
            flops += f;
            rows_done += r;
        }
        steps++;
    }
    if (steps < 2) return 0;
    const double ms = total / (steps - 1) * 1e3;
    printf("prefill N=%-5d  %3d steps  %8.2f ms/step  %9.0f rows/s  %6.1f TFLOP/s  %5.1f%% of GEMM rate\n", (int)n,
           (int)steps - 1, ms, (double)rows_done / total, flops / total / 1e12,
           100.0 * flops / total / 1e12 / B->gemm_tflops);
    print_profile(B, "prefill");
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Decode steps of nb rows at positions L, L+1, ...; prints one line. */
static int bench_decode(struct bench *B, int32_t nb, int n_steps, uint64_t weight_bytes, struct err *e)
{
    const struct model_hparams *hp = &B->m->hp;
    double t[64];
    struct cuda_step_times ct = {0};
    double copy_ms = 0, host_ms = 0;
    if (n_steps > 62) n_steps = 62;
    for (int k = 0; k < n_steps + 4; k++) {
        if (k == n_steps + 2) backend_cuda_profile_enable(&B->be, 1); /* 2 profiled steps after the timed ones */
        for (int32_t r = 0; r < nb; r++) {
            B->ss[r] = (struct step_seq){B->bt + (size_t)r * B->blocks_per_seq, B->blocks_per_seq};
            B->pos[r] = B->L + k;
            B->tokens[r] = (int32_t)token_id(r, B->L + k, hp->n_vocab);
            B->seq[r] = r;
            B->lrows[r] = r;
        }
        double s = run_step(B, nb, nb, nb, e);
        if (s < 0) return -1;
        if (k >= 2 && k < n_steps + 2) {
            t[k - 2] = s;
            backend_cuda_last_times(&B->be, &ct);
            copy_ms += ct.logits_copy_ms;
            host_ms += ct.logits_host_ms;
        }
    }
    qsort(t, (size_t)n_steps, sizeof t[0], cmp_double);
    const double sec = t[n_steps / 2];
    const int32_t ctx = B->L + n_steps / 2 + 2;
    const double kv_bytes = (double)nb * ctx * (double)model_kv_bytes_per_token(hp, B->kv_type);
    const double bytes = (double)weight_bytes + kv_bytes;
    const double flops = nb * (flops_linear_row(hp) + flops_attn_row(hp, ctx) + flops_head_row(hp));
    printf(
        "decode  B=%-5d  ctx %5d  %8.3f ms/step  %9.0f tok/s  bytes %6.2f GB: %5.1f%% of copy bw  %5.1f%% of GEMM rate"
        "  | logits copy %.3f ms + host %.3f ms (%.1f MB)\n",
        (int)nb, (int)ctx, sec * 1e3, nb / sec, bytes / 1e9, 100.0 * bytes / (B->copy_gbs * 1e9) / sec,
        100.0 * flops / (B->gemm_tflops * 1e12) / sec, copy_ms / n_steps, host_ms / n_steps,
        (double)ct.logits_bytes / 1e6);
    print_profile(B, "decode");
    return 0;
}

static int bench_alloc(struct bench *B, int32_t cap_rows, int32_t n_seqs)
{
    const struct model_hparams *hp = &B->m->hp;
    B->cap_rows = cap_rows > n_seqs ? cap_rows : n_seqs;
    B->tokens = malloc((size_t)B->cap_rows * 4);
    B->pos = malloc((size_t)B->cap_rows * 4);
    B->seq = malloc((size_t)B->cap_rows * 4);
    B->lrows = malloc((size_t)B->cap_rows * 4);
    B->ss = malloc((size_t)B->cap_rows * sizeof *B->ss);
    B->logits = malloc((size_t)B->cap_rows * (size_t)hp->n_vocab * 4);
    B->bt = malloc((size_t)n_seqs * (size_t)B->blocks_per_seq * 4);
    if (!B->tokens || !B->pos || !B->seq || !B->lrows || !B->ss || !B->logits || !B->bt) return -1;
    for (int32_t i = 0; i < n_seqs * B->blocks_per_seq; i++) B->bt[i] = i;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cuda MODEL [-L 1024] [-B 1,64,256] [-N 512,2048] [--steps 8] [--kv-type f16]\n");
        return 2;
    }
    struct bench B = {0};
    int32_t bl[MAX_LIST], nl[MAX_LIST];
    int n_b = parse_list("1,64,256", bl), n_n = parse_list("512,2048", nl), n_steps = 8;
    B.L = 1024;
    B.kv_type = KV_TYPE_F16;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-L")) B.L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-B")) n_b = parse_list(argv[i + 1], bl);
        else if (!strcmp(argv[i], "-N")) n_n = parse_list(argv[i + 1], nl);
        else if (!strcmp(argv[i], "--steps")) n_steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--kv-type") && model_kv_type_parse(argv[i + 1], &B.kv_type)) {
            fprintf(stderr, "bench_cuda: --kv-type %s: expected f32, f16 or q8_0\n", argv[i + 1]);
            return 2;
        }
    }
    struct err e = {{0}};
    log_set_level(LOG_INFO); /* the backend's start-up lines: device, weights, KV pool, attention kernel */
    gguf_file *f = NULL;
    struct model *m = NULL;
    if (cuda_harness_gemm_rate(8192, 20, &B.gemm_tflops, &e) ||
        cuda_harness_copy_rate(2ull << 30, 20, &B.copy_gbs, &e)) {
        fprintf(stderr, "bench_cuda: %s\n", e.msg);
        return 1;
    }
    printf("ceilings: BF16 GEMM 8192^3 %.1f TFLOP/s, device copy %.1f GB/s (read + write), medians of 20\n",
           B.gemm_tflops, B.copy_gbs);
    double t0 = clock_now();
    if (gguf_open(argv[1], &f, &e) || model_load(f, &m, &e)) {
        fprintf(stderr, "bench_cuda: %s\n", e.msg);
        return 1;
    }
    B.m = m;
    const struct model_hparams *hp = &m->hp;
    int32_t max_b = 1, max_n = 1;
    for (int i = 0; i < n_b; i++) max_b = bl[i] > max_b ? bl[i] : max_b;
    for (int i = 0; i < n_n; i++) max_n = nl[i] > max_n ? nl[i] : max_n;
    B.n_seqs = max_b;
    B.blocks_per_seq = (B.L + n_steps + 2 + BS - 1) / BS + 1;
    if (backend_cuda_init(&B.be, NULL, &e) || B.be.ops->load(B.be.ctx, m, &e) ||
        B.be.ops->kv_alloc(B.be.ctx, B.n_seqs * B.blocks_per_seq, BS, B.kv_type, &e) ||
        bench_alloc(&B, max_n, max_b)) {
        fprintf(stderr, "bench_cuda: %s\n", e.msg[0] ? e.msg : "out of memory");
        return 1;
    }
    const uint64_t wbytes = B.be.ops->weight_copy_bytes(B.be.ctx);
    printf("model %s: %s, %d layers, n_embd %d, %d/%d heads x %d, n_ff %d, vocab %d; %.2f GB on the device; loaded in "
           "%.1f s\n",
           argv[1], model_arch_name(hp->arch), (int)hp->n_layer, (int)hp->n_embd, (int)hp->n_head, (int)hp->n_head_kv,
           (int)hp->head_dim, (int)hp->n_ff, (int)hp->n_vocab, (double)wbytes / 1e9, clock_now() - t0);
    printf("KV %s, %d sequences x %d tokens (block %d)\n", model_kv_type_name(B.kv_type), (int)B.n_seqs, (int)B.L, BS);
    for (int i = 0; i < n_n; i++)
        if (bench_prefill(&B, nl[i], &e)) goto fail;
    for (int i = 0; i < n_b; i++)
        if (bench_decode(&B, bl[i], n_steps, wbytes, &e)) goto fail;
    backend_free(&B.be);
    model_free(m);
    gguf_close(f);
    return 0;
fail:
    fprintf(stderr, "bench_cuda: %s\n", e.msg);
    return 1;
}
#endif
