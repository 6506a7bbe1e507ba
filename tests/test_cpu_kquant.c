/* test_cpu_kquant — the K-quant kernels (Q2_K .. Q6_K) and their 256-element activation blocks.
 *
 * Stated tolerances:
 *  - every SIMD variant this CPU has, for 1 .. max_x rows, and the tile kernels equal the scalar
 *    reference bit for bit (memcmp), on random valid blocks;
 *  - kernel vs dequantize(w) . dequantize(q8k(x)) in double: <= 1e-5 * sum |w_i q_i| + 1e-6 (the integer
 *    decomposition is exact; only float rounding differs);
 *  - kernel vs dequantize(w) . x in double (the f32 activations): <= the rigorous bound of 8-bit
 *    rounding, sum over blocks of (d_x / 2) * sum |w_i|, plus the float slack above;
 *  - the activation quantizer (AVX2) equals its plain-C reference byte for byte.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"
#include "backend/cpu_kquant.h"
#include "gguf/quant.h"
#include "synth_util.h"
#include "test.h"
#include "util/threads.h"

static uint64_t rng_state = 777;

static float frand(float a)
{
    return synth_uniform(&rng_state, a);
}

static const enum gguf_dtype ktypes[] = {GGUF_DTYPE_Q2_K, GGUF_DTYPE_Q3_K, GGUF_DTYPE_Q4_K, GGUF_DTYPE_Q5_K,
                                         GGUF_DTYPE_Q6_K};

static const char *tname(enum gguf_dtype t)
{
    return gguf_dtype_info((uint32_t)t)->name;
}

/* Byte offset of the f16 d of a super-block (dmin follows it for Q2_K, Q4_K, Q5_K). */
static int d_offset(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q2_K ? 80 : t == GGUF_DTYPE_Q3_K ? 108 : t == GGUF_DTYPE_Q6_K ? 208 : 0;
}

static int has_dmin(enum gguf_dtype t)
{
    return t == GGUF_DTYPE_Q2_K || t == GGUF_DTYPE_Q4_K || t == GGUF_DTYPE_Q5_K;
}

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = quant_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* n_rows rows of n elements of random valid blocks: every quant and scale bit random, d and dmin small
 * random f16 values (extreme: every byte 0xFF, i.e. the largest quants and scales, Q6_K/Q3_K scales at
 * -1 / +31 resp.; and Q6_K scales of -128 with quants of 63 via the bytes below). */
static void random_blocks(enum gguf_dtype t, uint8_t *w, int64_t n, int n_rows, int extreme)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    const int64_t nb = n / 256 * n_rows;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * ti->block_bytes;
        for (uint32_t i = 0; i < ti->block_bytes; i++)
            blk[i] = extreme ? 0xFF : (uint8_t)rng_splitmix64(&rng_state);
        if (extreme && t == GGUF_DTYPE_Q6_K) memset(blk + 192, 0x80, 16); /* scales -128 */
        put_f16(blk + d_offset(t), extreme ? 0.01f : 0.001f + fabsf(frand(0.01f)));
        if (has_dmin(t)) put_f16(blk + d_offset(t) + 2, extreme ? 0.02f : fabsf(frand(0.01f)));
    }
}

static double dmax(double a, double b)
{
    return a > b ? a : b;
}

/* ---------------------------------------------------------------- activations */

TEST(test_q8k_quantize_vs_ref)
{
    enum { N = 1024 };
    static float x[N];
    static struct cpu_q8k_block a[N / 256], b[N / 256];
    for (int round = 0; round < 40 && !test_cur_failed; round++) {
        const float scale = round < 10 ? 1.0f : round < 20 ? 1e-3f : round < 30 ? 1e6f : 1e-40f;
        for (int i = 0; i < N; i++) x[i] = frand(scale);
        if (round % 5 == 1)
            for (int i = 0; i < N; i++) x[i] = (float)((i % 255) - 127) * 0.5f; /* ties after scaling */
        if (round % 5 == 2) {
            for (int i = 0; i < 256; i++) x[i] = 0.0f; /* an all-zero block */
            x[300] = INFINITY, x[377] = -INFINITY, x[600] = NAN, x[700] = 3e38f, x[701] = -3e38f;
            x[800] = 1e-45f, x[833] = -1e-44f;
        }
        cpu_quantize_row_q8k(x, a, N);
        cpu_quantize_row_q8k_ref(x, b, N);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "round %d: quantized row differs from the reference", round);
        for (int k = 0; k < N / 256; k++) {
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += a[k].q[16 * j + i];
                CHECK_MSG(s == a[k].bsum[j], "round %d block %d: bsum[%d] %d, sum %d", round, k, j, a[k].bsum[j], s);
            }
            if (round % 5 == 0) /* finite rows: |x - d q| <= d / 2 */
                for (int i = 0; i < 256; i++)
                    CHECK_MSG(fabsf(x[256 * k + i] - a[k].d * a[k].q[i]) <= 0.5001f * a[k].d + 1e-30f,
                              "round %d: element %d off by more than half a step", round, 256 * k + i);
        }
    }
    CHECK_EQ_INT(cpu_q8k_row_bytes(512), 2 * 292);
}

/* ---------------------------------------------------------------- kernels */

/* Every variant's dot (1 .. max_x rows) and tile equal the scalar reference; the reference agrees with
 * the dequantized weights. */
static void kernel_case(enum gguf_dtype t, int64_t n, int extreme)
{
    enum { R = 8, NW = 5 };
    const uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n);
    uint8_t *w = malloc(rb * NW);
    float *x = malloc((size_t)(R * n) * sizeof(float)), *wd = malloc((size_t)n * sizeof(float));
    const int64_t xs = cpu_q8k_row_bytes(n);
    uint8_t *xk = malloc((size_t)(R * xs));
    CHECK(w && x && wd && xk);
    random_blocks(t, w, n, NW, extreme);
    for (int64_t i = 0; i < R * n; i++) x[i] = extreme ? (i % 3 ? -1.0f : 1.0f) : frand(i % 97 == 0 ? 8.0f : 1.0f);
    for (int r = 0; r < R; r++) cpu_quantize_row_q8k(x + r * n, xk + r * xs, n);
    float ref[R];
    cpu_kernel_variant(t, CPU_KERNEL_SCALAR).dot(n, w, xk, xs, R, ref);
    /* reference vs the dequantized weights */
    CHECK(quant_dequantize_row(t, w, wd, n) == 0);
    for (int r = 0; r < R; r++) {
        const struct cpu_q8k_block *xb = (const struct cpu_q8k_block *)(xk + r * xs);
        double exact_q = 0, exact = 0, mag = 0, bound = 0;
        for (int64_t i = 0; i < n; i++) {
            const double xq = (double)xb[i / 256].d * xb[i / 256].q[i % 256];
            exact_q += (double)wd[i] * xq;
            exact += (double)wd[i] * x[r * n + i];
            mag += fabs((double)wd[i] * xq);
            bound += fabs((double)wd[i]) * xb[i / 256].d * 0.5;
        }
        const double slack = 1e-5 * dmax(mag, 1e-30) + 1e-6;
        CHECK_MSG(fabs(ref[r] - exact_q) <= slack, "%s n %lld row %d: kernel %.9g, dequantized dot %.9g", tname(t),
                  (long long)n, r, ref[r], exact_q);
        CHECK_MSG(fabs(ref[r] - exact) <= bound * 1.0001 + slack,
                  "%s n %lld row %d: kernel %.9g, f32 dot %.9g, bound %.3g", tname(t), (long long)n, r, ref[r], exact,
                  bound);
    }
    static const enum cpu_kernel_variant variants[] = {CPU_KERNEL_SCALAR, CPU_KERNEL_AVX2, CPU_KERNEL_VNNI,
                                                       CPU_KERNEL_AVX512};
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        struct cpu_kernel k = cpu_kernel_variant(t, variants[vi]);
        if (!k.dot) continue;
        CHECK(k.tile && (k.max_x == CPU_DOT_MAX_X || k.max_x == CPU_TILE_MAX_X));
        /* rows r0 .. r0 + nx - 1 in one call equal the reference's rows */
        for (int r0 = 0; r0 < R; r0 += k.max_x)
            for (int nx = 1; nx <= k.max_x && r0 + nx <= R; nx++) {
                float got[CPU_TILE_MAX_X];
                k.dot(n, w, xk + r0 * xs, xs, nx, got);
                CHECK_MSG(memcmp(got, ref + r0, (size_t)nx * sizeof(float)) == 0,
                          "%s n %lld variant %d rows %d+%d: %.9g vs scalar %.9g", tname(t), (long long)n,
                          (int)variants[vi], r0, nx, got[0], ref[r0]);
            }
        /* tile over NW weight rows vs dot per weight row */
        for (int nx = 1; nx <= k.max_x; nx++) {
            float y[CPU_TILE_MAX_X * NW], d1[CPU_TILE_MAX_X];
            k.tile(n, w, (int64_t)rb, NW, xk, xs, nx, y, NW);
            for (int o = 0; o < NW; o++) {
                cpu_kernel_variant(t, CPU_KERNEL_SCALAR).dot(n, w + o * rb, xk, xs, nx, d1);
                for (int i = 0; i < nx; i++)
                    CHECK_MSG(memcmp(&y[i * NW + o], &d1[i], sizeof(float)) == 0,
                              "%s n %lld variant %d tile n_x %d o %d i %d: %.9g vs %.9g", tname(t), (long long)n,
                              (int)variants[vi], nx, o, i, y[i * NW + o], d1[i]);
            }
        }
    }
    free(w);
    free(x);
    free(wd);
    free(xk);
}

TEST(test_kquant_simd_vs_scalar)
{
    const int64_t lens[] = {256, 512, 768, 2048};
    int n_variants = 0;
    for (size_t ti = 0; ti < sizeof ktypes / sizeof ktypes[0]; ti++) {
        CHECK_MSG(cpu_kernel_best(ktypes[ti]).tile, "%s has no kernel", tname(ktypes[ti]));
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            for (int rep = 0; rep < 3; rep++) {
                kernel_case(ktypes[ti], lens[li], 0);
                if (test_cur_failed) return;
            }
            kernel_case(ktypes[ti], lens[li], 1);
            if (test_cur_failed) return;
        }
    }
    for (int v = CPU_KERNEL_SCALAR; v <= CPU_KERNEL_AVX512; v++)
        n_variants += cpu_kernel_variant(GGUF_DTYPE_Q4_K, (enum cpu_kernel_variant)v).dot != NULL;
    printf("  K-quant kernels: %d variants on this CPU compared with the scalar reference\n", n_variants);
}

/* ---------------------------------------------------------------- matmul */

/* One cpu_matmul call with jobs of mixed weight types (K-quants next to Q8_0, Q4_0 and F16, so the call
 * reads xq, xk and the floats at once): every row's outputs are bit-identical whatever the number of rows
 * in the call (1 .. 20), the pool (none or 2 threads) and the row's place, and equal the scalar reference
 * for the K-quant jobs. */
TEST(test_matmul_mixed_batch_invariance)
{
    enum { N_IN = 512, N_OUT = 48, R = 20, NJ = 7 };
    static const enum gguf_dtype types[NJ] = {GGUF_DTYPE_Q4_K, GGUF_DTYPE_Q6_K, GGUF_DTYPE_Q8_0, GGUF_DTYPE_Q2_K,
                                             GGUF_DTYPE_Q3_K, GGUF_DTYPE_Q5_K, GGUF_DTYPE_F16};
    static float x[R * N_IN], wf[N_IN], y[NJ][R * N_OUT], y1[NJ][N_OUT];
    static uint8_t xq[R * (N_IN / 32) * 40], xk[R * (N_IN / 256) * 292];
    uint8_t *w0[NJ], *w[NJ];
    struct model_weight mw[NJ];
    struct cpu_matmul_job jobs[NJ], jobs1[NJ];
    for (int j = 0; j < NJ; j++) {
        const uint64_t rb = gguf_row_bytes((uint32_t)types[j], N_IN);
        w0[j] = malloc(rb * N_OUT);
        w[j] = malloc(rb * (uint64_t)cpu_packed_rows(types[j], N_OUT));
        CHECK(w0[j] && w[j]);
        for (int o = 0; o < N_OUT; o++) {
            for (int i = 0; i < N_IN; i++) wf[i] = frand(0.05f);
            CHECK(quant_quantize_row(types[j], wf, w0[j] + o * rb, N_IN) == 0);
        }
        cpu_repack_rows(types[j], w0[j], N_IN, N_OUT, 0, N_OUT, w[j]);
        mw[j] = (struct model_weight){"w", types[j], {N_IN, N_OUT}, w[j]};
        jobs[j] = (struct cpu_matmul_job){&mw[j], y[j]};
        jobs1[j] = (struct cpu_matmul_job){&mw[j], y1[j]};
    }
    for (int i = 0; i < R * N_IN; i++) x[i] = frand(1.0f);
    for (int r = 0; r < R; r++) {
        cpu_quantize_row_q8(x + r * N_IN, xq + r * cpu_q8_row_bytes(N_IN), N_IN);
        cpu_quantize_row_q8k(x + r * N_IN, xk + r * cpu_q8k_row_bytes(N_IN), N_IN);
    }
    threads_pool *pool = NULL;
    CHECK(threads_init(2, &pool, NULL) == 0);
    for (int n_rows = 1; n_rows <= R && !test_cur_failed; n_rows += (n_rows < 9 ? 1 : 5)) {
        for (int use_pool = 0; use_pool < 2; use_pool++) {
            const int first = R - n_rows; /* the last n_rows rows: each row sits at another place each time */
            cpu_matmul(use_pool ? pool : NULL, jobs, NJ, x + first * N_IN, xq + first * cpu_q8_row_bytes(N_IN),
                       xk + first * cpu_q8k_row_bytes(N_IN), n_rows, NULL);
            for (int r = 0; r < n_rows; r++) {
                const int row = first + r;
                cpu_matmul(NULL, jobs1, NJ, x + row * N_IN, xq + row * cpu_q8_row_bytes(N_IN),
                           xk + row * cpu_q8k_row_bytes(N_IN), 1, NULL);
                for (int j = 0; j < NJ; j++) {
                    CHECK_MSG(memcmp(y[j] + r * N_OUT, y1[j], sizeof y1[j]) == 0,
                              "%s: row %d of a %d-row call (pool %d) differs from the row alone", tname(types[j]), row,
                              n_rows, use_pool);
                    if (!cpu_kquant_type(types[j])) continue;
                    const uint64_t rb = gguf_row_bytes((uint32_t)types[j], N_IN);
                    for (int o = 0; o < N_OUT; o += 7) {
                        float ref;
                        cpu_kernel_variant(types[j], CPU_KERNEL_SCALAR)
                            .dot(N_IN, w[j] + o * rb, xk + row * cpu_q8k_row_bytes(N_IN), 0, 1, &ref);
                        CHECK_MSG(memcmp(&ref, &y1[j][o], sizeof ref) == 0,
                                  "%s: output %d differs from the scalar kernel", tname(types[j]), o);
                    }
                }
            }
        }
    }
    threads_free(pool);
    for (int j = 0; j < NJ; j++) {
        free(w0[j]);
        free(w[j]);
    }
}

int main(void)
{
    RUN(test_q8k_quantize_vs_ref);
    RUN(test_kquant_simd_vs_scalar);
    RUN(test_matmul_mixed_batch_invariance);
    return test_summary();
}
