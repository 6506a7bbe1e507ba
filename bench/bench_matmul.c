/* bench/bench_matmul.c — the CPU backend's matmul kernel alone: one (8192 x 2048) weight matrix of type T
 * (ggml id: 8 Q8_0, 2 Q4_0, 3 Q4_1, 0 F32, 1 F16) times R activation rows on H threads, 20 repetitions.
 * Prints GMAC/s by wall time and by process CPU time (the latter is what a shared, loaded machine can
 * still measure). The weights (~17 MB for Q8_0) mostly fit in L3: this times compute, not DRAM.
 *
 *   bench_matmul [ROWS=1] [THREADS=1] [TYPE=8]      (make build/bench/bench_matmul) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu_kernels.h"
#include "gguf/quant.h"
#include "util/clock.h"

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int rows = argc > 1 ? atoi(argv[1]) : 1, nth = argc > 2 ? atoi(argv[2]) : 1;
    enum gguf_dtype t = argc > 3 ? (enum gguf_dtype)atoi(argv[3]) : GGUF_DTYPE_Q8_0;
    const int64_t n_in = 2048, n_out = 8192;
    uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n_in);
    if (rows < 1 || rows > 512 || rb == 0 || !cpu_kernel_best(t).tile) return 2;
    char *w = malloc(rb * (uint64_t)cpu_packed_rows(t, n_out)), *w0 = malloc(rb * (uint64_t)n_out);
    float *row = malloc((size_t)n_in * 4), *x = malloc((size_t)n_in * 4 * (size_t)rows);
    uint8_t *xq = malloc((size_t)cpu_q8_row_bytes(n_in) * (size_t)rows);
    float *y = malloc((size_t)n_out * 4 * (size_t)rows);
    if (!w || !w0 || !row || !x || !xq || !y) return 1;
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = (float)(((i + 1) * (o + 7) * 7919) % 1000) / 500.0f - 1.0f;
        quant_quantize_row(t, row, w0 + (uint64_t)o * rb, n_in);
    }
    cpu_repack_rows(t, w0, n_in, n_out, 0, n_out, w);
    for (int64_t i = 0; i < n_in * rows; i++) x[i] = (float)((i * 31) % 977) / 488.0f - 1.0f;
    for (int r = 0; r < rows; r++) cpu_quantize_row_q8(x + (int64_t)r * n_in, xq + r * cpu_q8_row_bytes(n_in), n_in);
    struct model_weight mw = {"w", t, {n_in, n_out}, w};
    threads_pool *p;
    if (threads_init(nth, &p, NULL)) return 1;
    struct cpu_matmul_job job = {&mw, y};
    cpu_matmul(p, &job, 1, x, xq, rows, NULL);
    const int iters = 20;
    double t0 = clock_now(), c0 = cpu_seconds();
    for (int i = 0; i < iters; i++) cpu_matmul(p, &job, 1, x, xq, rows, NULL);
    double dt = (clock_now() - t0) / iters, dc = (cpu_seconds() - c0) / iters;
    double macs = (double)n_in * (double)n_out * rows;
    printf("type %s rows %d threads %d: %.3f ms/matmul, %.1f GMAC/s wall, %.1f GMAC per CPU-second\n",
           gguf_dtype_info(t)->name, rows, nth, dt * 1e3, macs / dt / 1e9, macs / dc / 1e9);
    threads_free(p);
    return 0;
}
