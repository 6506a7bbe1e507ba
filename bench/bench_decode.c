/* bench/bench_decode.c — decode throughput of the CPU backend called directly: S sequences, each
 * prefilled with a P-token prompt, then N decode steps of S rows (one row per sequence, greedy next
 * token). Prints tok/s per S, the model's weight bytes and weight bytes / bandwidth as the limit.
 *
 *   bench_decode MODEL [-s 1,16] [-p 32] [-n 16] [-t THREADS] [--bw GB/s]
 *
 * Built by bench/bench_decode.sh against build/libnightshift.a. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/clock.h"

#define BS 16

/* CPU seconds of the whole process (all threads): a load-independent view on a shared machine. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_decode MODEL [-s 1,16] [-p 32] [-n 16] [-t THREADS] [--bw GB/s]\n");
        return 2;
    }
    const char *path = argv[1], *seqs_arg = "1,16";
    int n_prompt = 32, n_steps = 16, n_threads = 0;
    double bw = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) seqs_arg = argv[i + 1];
        else if (!strcmp(argv[i], "-p")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) n_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bw")) bw = atof(argv[i + 1]);
    }
    struct err e = {{0}};
    gguf_file *f;
    struct model *m;
    if (gguf_open(path, &f, &e) || model_load(f, &m, &e)) {
        fprintf(stderr, "bench_decode: %s\n", e.msg);
        return 1;
    }
    const int32_t V = m->hp.n_vocab;
    double wb = (double)model_weight_bytes(m);
    printf("model %s: %s, %d layers, n_embd %d, weights read per step %.1f MB\n", path, model_arch_name(m->hp.arch),
           (int)m->hp.n_layer, (int)m->hp.n_embd, wb / 1e6);
    if (bw > 0)
        printf("bandwidth limit (single stream): %.1f GB/s / %.1f MB = %.1f tok/s\n", bw, wb / 1e6, bw * 1e9 / wb);
    char list[256];
    snprintf(list, sizeof list, "%s", seqs_arg);
    double base = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int S = atoi(tok);
        if (S < 1 || S > 256) continue;
        struct backend be;
        int per_seq = (n_prompt + n_steps + BS) / BS + 1;
        if (backend_cpu_init(&be, n_threads, &e) || be.ops->load(be.ctx, m, &e) ||
            be.ops->kv_alloc(be.ctx, S * per_seq, BS, KV_TYPE_F16, &e)) {
            fprintf(stderr, "bench_decode: %s\n", e.msg);
            return 1;
        }
        int32_t *blocks = malloc(sizeof(int32_t) * (size_t)S * per_seq);
        struct step_seq *ss = malloc(sizeof *ss * (size_t)S);
        int32_t *toks = malloc(sizeof(int32_t) * (size_t)(S + n_prompt)),
                *pos = malloc(sizeof(int32_t) * (size_t)(S + n_prompt));
        int32_t *seq = malloc(sizeof(int32_t) * (size_t)(S + n_prompt)), *lr = malloc(sizeof(int32_t) * (size_t)S);
        float *logits = malloc(sizeof(float) * (size_t)S * V);
        int32_t *next = malloc(sizeof(int32_t) * (size_t)S);
        for (int i = 0; i < S * per_seq; i++) blocks[i] = i;
        for (int s = 0; s < S; s++) ss[s] = (struct step_seq){blocks + s * per_seq, per_seq};
        /* prefill each sequence alone (not timed) */
        for (int s = 0; s < S; s++) {
            for (int i = 0; i < n_prompt; i++) {
                toks[i] = (int32_t)((s * 131 + i * 17 + 1) % V);
                pos[i] = i;
                seq[i] = s;
            }
            lr[0] = n_prompt - 1;
            struct step_batch b = {n_prompt, toks, pos, seq, S, ss, 1, lr, 0, NULL, NULL};
            if (be.ops->forward(be.ctx, &b, logits, &e)) {
                fprintf(stderr, "bench_decode: %s\n", e.msg);
                return 1;
            }
            next[s] = sampler_argmax(logits, V);
        }
        double t0 = clock_now(), c0 = cpu_seconds();
        for (int step = 0; step < n_steps; step++) {
            for (int s = 0; s < S; s++) {
                toks[s] = next[s];
                pos[s] = n_prompt + step;
                seq[s] = s;
                lr[s] = s;
            }
            struct step_batch b = {S, toks, pos, seq, S, ss, S, lr, 0, NULL, NULL};
            if (be.ops->forward(be.ctx, &b, logits, &e)) {
                fprintf(stderr, "bench_decode: %s\n", e.msg);
                return 1;
            }
            for (int s = 0; s < S; s++) next[s] = sampler_argmax(logits + (size_t)s * V, V);
        }
        double dt = clock_now() - t0, dc = cpu_seconds() - c0, tps = S * n_steps / dt;
        if (base == 0) base = tps;
        printf(
            "decode: %3d sequences x %d steps: %.2f tok/s (%.1f ms/step, %.2fx the first; %.2f tok per CPU-second)\n",
            S, n_steps, tps, dt / n_steps * 1e3, tps / base, S * n_steps / dc);
        free(blocks); free(ss); free(toks); free(pos); free(seq); free(lr); free(logits); free(next);
        backend_free(&be);
    }
    model_free(m);
    gguf_close(f);
    return 0;
}
