/* bench/bench_matmul.c — the CPU backend's matmul kernel alone: one (N_OUT x N_IN, default 8192 x 2048)
 * weight matrix of type T (ggml id: 8 Q8_0, 2 Q4_0, 3 Q4_1, 0 F32, 1 F16, 10..14 Q2_K..Q6_K) times R
 * activation rows on H threads, 20 repetitions. Prints GMAC/s by wall time and by process CPU time (the
 * latter is what a shared, loaded machine can still measure). The weights (~17 MB for Q8_0, ~9.4 MB for Q4_K)
 * mostly fit in L3: this times compute, not DRAM. K-quant weights are random valid blocks (the kernels' speed
 * does not depend on the values); the others are quantized from a fixed pattern.
 *
 *   bench_matmul [ROWS=1] [THREADS=1] [TYPE=8] [N_IN=2048] [N_OUT=8192]      (make build/bench/bench_matmul)
 *   NIGHTSHIFT_CPU_KERNELS=avx2|scalar caps the kernel variant, as for nightshift. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu_kernels.h"
#include "backend/cpu_kquant.h"
#include "gguf/quant.h"
#include "util/clock.h"
#include "util/rng.h"

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Random bytes, with every f16 scale field of a K-quant block set to a small finite value. */
static void fill_kquant(enum gguf_dtype t, uint8_t *w, uint64_t n_bytes)
{
    uint64_t s = 42;
    for (uint64_t i = 0; i < n_bytes; i++) w[i] = (uint8_t)rng_splitmix64(&s);
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    const int off = t == GGUF_DTYPE_Q2_K ? 80 : t == GGUF_DTYPE_Q3_K ? 108 : t == GGUF_DTYPE_Q6_K ? 208 : 0;
    const int n_half = t == GGUF_DTYPE_Q3_K || t == GGUF_DTYPE_Q6_K ? 1 : 2;
    for (uint64_t b = 0; b < n_bytes / ti->block_bytes; b++)
        for (int h = 0; h < n_half; h++) {
            w[b * ti->block_bytes + off + 2 * h] = 0x00;
            w[b * ti->block_bytes + off + 2 * h + 1] = 0x1c; /* f16 2^-8 */
        }
}

int main(int argc, char **argv)
{
    int rows = argc > 1 ? atoi(argv[1]) : 1, nth = argc > 2 ? atoi(argv[2]) : 1;
    enum gguf_dtype t = argc > 3 ? (enum gguf_dtype)atoi(argv[3]) : GGUF_DTYPE_Q8_0;
    const int64_t n_in = argc > 4 ? atoll(argv[4]) : 2048, n_out = argc > 5 ? atoll(argv[5]) : 8192;
    uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n_in);
    if (rows < 1 || rows > 512 || n_in < 32 || n_out < 1 || rb == 0 || !cpu_kernel_best(t).tile) return 2;
    char *w = malloc(rb * (uint64_t)cpu_packed_rows(t, n_out)), *w0 = malloc(rb * (uint64_t)n_out);
    float *row = malloc((size_t)n_in * 4), *x = malloc((size_t)n_in * 4 * (size_t)rows);
    uint8_t *xq = malloc((size_t)cpu_q8_row_bytes(n_in) * (size_t)rows);
    uint8_t *xk = malloc((size_t)cpu_q8k_row_bytes(n_in) * (size_t)rows);
    float *y = malloc((size_t)n_out * 4 * (size_t)rows);
    if (!w || !w0 || !row || !x || !xq || !xk || !y) return 1;
    if (cpu_kquant_type(t)) {
        fill_kquant(t, (uint8_t *)w0, rb * (uint64_t)n_out);
    } else {
        for (int64_t o = 0; o < n_out; o++) {
            for (int64_t i = 0; i < n_in; i++) row[i] = (float)(((i + 1) * (o + 7) * 7919) % 1000) / 500.0f - 1.0f;
            quant_quantize_row(t, row, w0 + (uint64_t)o * rb, n_in);
        }
    }
    cpu_repack_rows(t, w0, n_in, n_out, 0, n_out, w);
    for (int64_t i = 0; i < n_in * rows; i++) x[i] = (float)((i * 31) % 977) / 488.0f - 1.0f;
    for (int r = 0; r < rows; r++) {
        cpu_quantize_row_q8(x + (int64_t)r * n_in, xq + r * cpu_q8_row_bytes(n_in), n_in);
        cpu_quantize_row_q8k(x + (int64_t)r * n_in, xk + r * cpu_q8k_row_bytes(n_in), n_in);
    }
    struct model_weight mw = {"w", t, {n_in, n_out}, w};
    threads_pool *p;
    if (threads_init(nth, &p, NULL)) return 1;
    struct cpu_matmul_job job = {&mw, y};
    cpu_matmul(p, &job, 1, x, xq, xk, rows, NULL);
    const int iters = 20;
    double t0 = clock_now(), c0 = cpu_seconds();
    for (int i = 0; i < iters; i++) cpu_matmul(p, &job, 1, x, xq, xk, rows, NULL);
    double dt = (clock_now() - t0) / iters, dc = (cpu_seconds() - c0) / iters;
    double macs = (double)n_in * (double)n_out * rows;
    printf("type %s %lld x %lld rows %d threads %d: %.3f ms/matmul, %.1f GMAC/s wall, %.1f GMAC per CPU-second\n",
           gguf_dtype_info(t)->name, (long long)n_out, (long long)n_in, rows, nth, dt * 1e3, macs / dt / 1e9,
           macs / dc / 1e9);
    threads_free(p);
    return 0;
}
