/* bench/bandwidth.c — STREAM-like read bandwidth: sums a 1 GiB buffer with AVX2 loads on T threads,
 * best of R runs. Built and run by bench/bench_decode.sh (or: make build/bench/bandwidth).
 * Prints "read bandwidth: X GB/s (T threads)" for T = 1 and 2. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BW_BYTES (1ull << 30)

struct bw_part {
    const float *p;
    size_t n;
    float sum;
};

static void *bw_read(void *arg)
{
    struct bw_part *a = arg;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= a->n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(a->p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(a->p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(a->p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(a->p + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    a->sum = out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    float *buf = aligned_alloc(64, BW_BYTES);
    if (!buf) return 1;
    size_t n = BW_BYTES / sizeof(float);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    for (int t = 1; t <= 2; t++) {
        double best = 1e9;
        float sink = 0;
        for (int r = 0; r < 7; r++) {
            struct bw_part parts[2];
            pthread_t tid[2];
            double t0 = now();
            for (int k = 0; k < t; k++) {
                parts[k] = (struct bw_part){buf + k * (n / t), n / t, 0};
                pthread_create(&tid[k], NULL, bw_read, &parts[k]);
            }
            for (int k = 0; k < t; k++) {
                pthread_join(tid[k], NULL);
                sink += parts[k].sum;
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("read bandwidth: %.2f GB/s (%d thread%s, best of 7 over 1 GiB; checksum %g)\n", BW_BYTES / best / 1e9,
               t, t > 1 ? "s" : "", (double)sink);
    }
    free(buf);
    return 0;
}
