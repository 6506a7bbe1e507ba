/* bench/bench_verify.c — the cost of verifying drafts: forward steps of S sequences (context P tokens
 * each), every sequence running R rows that all need logits (its next token plus R - 1 draft tokens), for
 * R = 1..RMAX. Prints the median and best step time per R and the ratio to R = 1: prompt-lookup decoding
 * pays when (1 + expected accepted drafts) / ratio > 1.
 *
 *   make build/bench/bench_verify && build/bench/bench_verify MODEL [-s 1] [-p 128] [-r 16] [-n 15] [-t THREADS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/clock.h"

#define BS 16

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_verify MODEL [-s SEQS] [-p CONTEXT] [-r RMAX] [-n REPS] [-t THREADS]\n");
        return 2;
    }
    int S = 1, P = 128, RMAX = 16, N = 15, T = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) S = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) P = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) RMAX = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) T = atoi(argv[i + 1]);
    }
    if (S < 1 || P < 1 || RMAX < 1 || N < 1) return 2;
    struct err e = {{0}};
    gguf_file *f;
    struct model *m;
    struct backend be;
    if (gguf_open(argv[1], &f, &e) || model_load(f, &m, &e) || backend_cpu_init(&be, T, &e) ||
        be.ops->load(be.ctx, m, &e)) {
        fprintf(stderr, "bench_verify: %s\n", e.msg);
        return 1;
    }
    int32_t per_seq = (P + RMAX + BS - 1) / BS, V = m->hp.n_vocab;
    if (be.ops->kv_alloc(be.ctx, S * per_seq, BS, KV_TYPE_F16, &e)) {
        fprintf(stderr, "bench_verify: %s\n", e.msg);
        return 1;
    }
    int32_t n_max = S * (P > RMAX ? P : RMAX);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_max), *pos = malloc(sizeof(int32_t) * (size_t)n_max);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)n_max), *lrows = malloc(sizeof(int32_t) * (size_t)n_max);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(S * per_seq));
    struct step_seq *ss = malloc(sizeof *ss * (size_t)S);
    float *logits = malloc(sizeof(float) * (size_t)n_max * (size_t)V);
    double *times = malloc(sizeof(double) * (size_t)N);
    if (!tok || !pos || !seq || !lrows || !tables || !ss || !logits || !times) return 1;
    for (int s = 0; s < S; s++) {
        for (int b = 0; b < per_seq; b++) tables[s * per_seq + b] = s * per_seq + b;
        ss[s] = (struct step_seq){.block_table = tables + s * per_seq, .n_blocks = per_seq};
    }
    /* the context: P tokens per sequence, one prefill step each */
    for (int s = 0; s < S; s++) {
        for (int k = 0; k < P; k++) tok[k] = 100 + (k * 37 + s) % 1000, pos[k] = k, seq[k] = 0;
        lrows[0] = P - 1;
        struct step_batch b = {.n_rows = P, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = ss + s,
                               .n_logits = 1, .logit_rows = lrows};
        if (be.ops->forward(be.ctx, &b, logits, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    }
    printf("%s: %d sequence(s) of %d tokens; R rows each, all with logits (median / best of %d)\n", argv[1], S, P, N);
    printf("%4s %10s %10s %8s %12s\n", "R", "median ms", "best ms", "ratio", "rows/s");
    double t1 = 0;
    for (int R = 1; R <= RMAX; R++) {
        int32_t n = 0;
        for (int s = 0; s < S; s++)
            for (int k = 0; k < R; k++, n++) tok[n] = 200 + k, pos[n] = P + k, seq[n] = s, lrows[n] = n;
        struct step_batch b = {.n_rows = n, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = S, .seqs = ss,
                               .n_logits = n, .logit_rows = lrows};
        for (int i = 0; i < N; i++) {
            double t0 = clock_now();
            if (be.ops->forward(be.ctx, &b, logits, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
            times[i] = clock_now() - t0;
        }
        qsort(times, (size_t)N, sizeof *times, cmp_double);
        double med = times[N / 2];
        if (R == 1) t1 = med;
        printf("%4d %10.2f %10.2f %8.2f %12.0f\n", R, med * 1e3, times[0] * 1e3, med / t1, n / med);
    }
    backend_free(&be);
    model_free(m);
    gguf_close(f);
    return 0;
}
