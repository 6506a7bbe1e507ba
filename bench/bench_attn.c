/* bench/bench_attn.c — the CPU attention kernel alone: decode items (one row, one kv head) and prefill
 * items (16 / group rows) of a sequence of CTX positions, stories260K's shape by default (head_dim 8,
 * group 2, f16 KV, blocks of 16), on each path this CPU has (general, fast AVX2, fast AVX-512). Prints ns
 * per item and per (row, query head, position).
 *
 *   make build/bench/bench_attn && build/bench/bench_attn [CTX=192] [HEAD_DIM=8] [GROUP=2] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_attn.h"
#include "gguf/quant.h"
#include "util/clock.h"

int main(int argc, char **argv)
{
    const int ctx = argc > 1 ? atoi(argv[1]) : 192, hd = argc > 2 ? atoi(argv[2]) : 8, G = argc > 3 ? atoi(argv[3]) : 2;
    const int bs = 16, nkv = 1, nblk = (ctx + bs - 1) / bs + 1;
    if (ctx < 16 || hd < 8 || hd > 256 || G < 1 || G > 16) return 2;
    const uint64_t vec = (uint64_t)hd * 2, pool = (uint64_t)nblk * bs * vec;
    uint8_t *kp = malloc(pool), *vp = malloc(pool);
    for (uint64_t i = 0; i < pool / 2; i++) {
        ((uint16_t *)kp)[i] = quant_f32_to_f16((float)((i * 7919) % 1000) / 500.0f - 1.0f);
        ((uint16_t *)vp)[i] = quant_f32_to_f16((float)((i * 104729) % 1000) / 500.0f - 1.0f);
    }
    int32_t bt[64];
    for (int i = 0; i < nblk; i++) bt[i] = nblk - 1 - i;
    const int rows = 16 / G > 0 ? 16 / G : 1, n_q = G * hd;
    float *q = malloc((size_t)rows * n_q * 4), *out = malloc((size_t)rows * n_q * 4), *scratch = NULL;
    for (int i = 0; i < rows * n_q; i++) q[i] = (float)(i % 17) / 17.0f - 0.5f;
    if (posix_memalign((void **)&scratch, 64, cpu_attn_scratch_floats(hd, G, ctx + rows) * 4)) return 1;
    struct cpu_kv_layer kv = {kp, vp, KV_TYPE_F16, bs, nkv, hd, vec};
    struct step_seq ss = {bt, nblk};
    const char *names[] = {"general", "fast-avx2", "fast-avx512"};
    for (int kind = 0; kind < 2; kind++) {
        const int nr = kind == 0 ? 1 : rows;
        int32_t pos[16], seq[16] = {0}, tok[16] = {0};
        for (int i = 0; i < nr; i++) pos[i] = ctx - nr + i;
        struct step_batch b = {nr, tok, pos, seq, 1, &ss, 0, NULL, 0, NULL, NULL};
        struct cpu_attn_item it = {0, nr, 0, 0, 0};
        for (int path = CPU_ATTN_GENERAL; path <= CPU_ATTN_FAST_AVX512; path++) {
            if (cpu_attn_item_run_path((enum cpu_attn_path)path, &kv, &b, &it, G, q, out, scratch, ctx + rows))
                continue;
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) {
                const int iters = 20000;
                double t0 = clock_now();
                for (int i = 0; i < iters; i++)
                    cpu_attn_item_run_path((enum cpu_attn_path)path, &kv, &b, &it, G, q, out, scratch, ctx + rows);
                double dt = (clock_now() - t0) / iters;
                if (dt < best) best = dt;
            }
            printf("%-8s ctx %d head_dim %d group %d rows %2d %-12s %8.1f ns/item %6.3f ns per (query, position)\n",
                   kind == 0 ? "decode" : "prefill", ctx, hd, G, nr, names[path], best * 1e9,
                   best * 1e9 / ((double)nr * G * ctx));
        }
    }
    free(kp);
    free(vp);
    free(q);
    free(out);
    free(scratch);
    return 0;
}
