/* test_cpu_iquant — the kernels of the codebook, lattice and ternary types and Q8_K (cpu_iquant.c) and
 * hand-computed blocks of their layouts (gguf/quant_iq.c); tests/e2e_iq_py.sh checks every type's
 * dequantization against the gguf package's.
 *
 * Stated tolerances:
 *  - the AVX2 kernels, for 1 .. max_x rows, dot and tile, equal the scalar reference bit for bit (memcmp)
 *    on random blocks (finite scales);
 *  - a row's result is the same bits whatever the other rows of the call (1 row alone vs max_x rows);
 *  - kernel vs dequantize(w) . dequantize(q8(x)) in double: <= 1e-5 * sum |w_i q_i| + 1e-6 (the integer
 *    sums are exact; only the float rounding of cpu_iquant.h differs);
 *  - cpu_matmul with every type of a mix of these types gives each row's kernel result (threads, tiles).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_iquant.h"
#include "backend/cpu_kernels.h"
#include "backend/cpu_kquant.h"
#include "gguf/quant.h"
#include "gguf/quant_iq.h"
#include "synth_util.h"
#include "test.h"
#include "util/threads.h"

static uint64_t rng_state = 4242;

static const enum gguf_dtype itypes[] = {GGUF_DTYPE_IQ4_NL,  GGUF_DTYPE_IQ4_XS, GGUF_DTYPE_IQ3_XXS, GGUF_DTYPE_IQ3_S,
                                         GGUF_DTYPE_IQ2_XXS, GGUF_DTYPE_IQ2_XS, GGUF_DTYPE_IQ2_S,   GGUF_DTYPE_IQ1_S,
                                         GGUF_DTYPE_IQ1_M,   GGUF_DTYPE_TQ1_0,  GGUF_DTYPE_TQ2_0,   GGUF_DTYPE_Q8_K};
#define N_ITYPES (sizeof itypes / sizeof itypes[0])
#define N_IN 512
#define MAX_ROWS CPU_TILE_MAX_X

static const char *tname(enum gguf_dtype t)
{
    return gguf_dtype_info((uint32_t)t)->name;
}

/* Random bytes with every odd byte's top bits cleared: any little-endian f16 (or Q8_K's f32) scale is
 * finite and below 1, wherever the layout keeps it (IQ1_M's nibbles too). */
static void random_bytes(uint8_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)(rng_splitmix64(&rng_state) >> 24);
    for (size_t i = 1; i < n; i += 2) w[i] &= 0x3b;
}

/* n_rows activation rows of N_IN elements in the type's form (x: floats), rows xs bytes apart. */
static int64_t make_acts(enum gguf_dtype t, const float *x, int n_rows, void *out)
{
    const int64_t xs = cpu_type_act(t) == CPU_ACT_Q8 ? cpu_q8_row_bytes(N_IN) : cpu_q8k_row_bytes(N_IN);
    for (int r = 0; r < n_rows; r++) {
        if (cpu_type_act(t) == CPU_ACT_Q8)
            cpu_quantize_row_q8(x + r * N_IN, (char *)out + r * xs, N_IN);
        else
            cpu_quantize_row_q8k(x + r * N_IN, (char *)out + r * xs, N_IN);
    }
    return xs;
}

/* Element i of an activation row, dequantized. */
static double act_value(enum gguf_dtype t, const void *row, int64_t i)
{
    if (cpu_type_act(t) == CPU_ACT_Q8) return cpu_q8_value(row, N_IN, i);
    const struct cpu_q8k_block *b = (const struct cpu_q8k_block *)row + i / CPU_QKK;
    return (double)b->d * b->q[i % CPU_QKK];
}

TEST(test_types_are_computed)
{
    const uint64_t cpu = cpu_weight_types();
    for (size_t ti = 0; ti < N_ITYPES; ti++) {
        const enum gguf_dtype t = itypes[ti];
        CHECK_MSG(cpu >> t & 1 && cpu_iquant_type(t) && !cpu_type_panels(t), "%s", tname(t));
        CHECK_MSG(cpu_type_act(t) == (t == GGUF_DTYPE_IQ4_NL ? CPU_ACT_Q8 : CPU_ACT_Q8K), "%s", tname(t));
    }
}

TEST(test_simd_vs_scalar_vs_dequantized)
{
    static uint8_t w[4 * N_IN / 32 * 292];
    static float x[MAX_ROWS * N_IN], wd[4 * N_IN];
    static uint8_t xq[MAX_ROWS * (N_IN / 256) * sizeof(struct cpu_q8k_block) + MAX_ROWS * (N_IN / 32) * 40];
    for (size_t ti = 0; ti < N_ITYPES; ti++) {
        const enum gguf_dtype t = itypes[ti];
        const int64_t rb = (int64_t)gguf_row_bytes((uint32_t)t, N_IN);
        random_bytes(w, (size_t)(4 * rb));
        for (int i = 0; i < MAX_ROWS * N_IN; i++) x[i] = synth_uniform(&rng_state, 1.0f);
        const int64_t xs = make_acts(t, x, MAX_ROWS, xq);
        CHECK(quant_dequantize_row(t, w, wd, 4 * N_IN) == 0);
        const struct cpu_kernel ref = cpu_kernel_variant(t, CPU_KERNEL_SCALAR);
        float yr[MAX_ROWS * 4], y1[4];
        ref.tile(N_IN, w, rb, 4, xq, xs, MAX_ROWS, yr, 4);
        for (int o = 0; o < 4; o++)
            for (int r = 0; r < MAX_ROWS; r++) {
                double sum = 0, mag = 0;
                for (int64_t i = 0; i < N_IN; i++) {
                    const double p = (double)wd[o * N_IN + i] * act_value(t, xq + r * xs, i);
                    sum += p;
                    mag += fabs(p);
                }
                CHECK_MSG(fabs(yr[r * 4 + o] - sum) <= 1e-5 * mag + 1e-6, "%s row %d out %d: %g vs %g", tname(t), r, o,
                          (double)yr[r * 4 + o], sum);
                /* batch invariance: the row alone */
                ref.tile(N_IN, w + o * rb, rb, 1, xq + r * xs, xs, 1, y1, 1);
                CHECK_MSG(!memcmp(&y1[0], &yr[r * 4 + o], 4), "%s: row %d alone differs", tname(t), r);
            }
        for (int v = CPU_KERNEL_AVX2; v <= CPU_KERNEL_AVX512; v++) {
            const struct cpu_kernel k = cpu_kernel_variant(t, (enum cpu_kernel_variant)v);
            if (!k.tile) continue;
            for (int n_x = 1; n_x <= k.max_x; n_x++) {
                float yt[MAX_ROWS * 4], yd[MAX_ROWS];
                k.tile(N_IN, w, rb, 4, xq, xs, n_x, yt, 4);
                for (int r = 0; r < n_x; r++)
                    for (int o = 0; o < 4; o++)
                        CHECK_MSG(!memcmp(&yt[r * 4 + o], &yr[r * 4 + o], 4), "%s variant %d, %d rows: row %d out %d",
                                  tname(t), v, n_x, r, o);
                k.dot(N_IN, w + rb, xq, xs, n_x, yd);
                for (int r = 0; r < n_x; r++)
                    CHECK_MSG(!memcmp(&yd[r], &yr[r * 4 + 1], 4), "%s variant %d dot, %d rows", tname(t), v, n_x);
            }
        }
    }
}

/* The kernels the matmul picks (cpu_kernel_best), on threads, against the scalar tile per row. */
TEST(test_matmul_rows)
{
    enum { N_OUT = 48, N_ROWS = 11 };
    static uint8_t w[N_OUT * (N_IN / 32) * 292];
    static float x[N_ROWS * N_IN], y[N_ROWS * N_OUT], want[N_ROWS * N_OUT];
    static uint8_t xq[N_ROWS * (N_IN / 32) * 40], xk[N_ROWS * (N_IN / 256) * sizeof(struct cpu_q8k_block)];
    threads_pool *pool = NULL;
    struct err e;
    CHECK(threads_init(2, &pool, &e) == 0);
    for (int i = 0; i < N_ROWS * N_IN; i++) x[i] = synth_uniform(&rng_state, 2.0f);
    for (int r = 0; r < N_ROWS; r++) {
        cpu_quantize_row_q8(x + r * N_IN, xq + r * cpu_q8_row_bytes(N_IN), N_IN);
        cpu_quantize_row_q8k(x + r * N_IN, xk + r * cpu_q8k_row_bytes(N_IN), N_IN);
    }
    for (size_t ti = 0; ti < N_ITYPES; ti++) {
        const enum gguf_dtype t = itypes[ti];
        const int64_t rb = (int64_t)gguf_row_bytes((uint32_t)t, N_IN);
        random_bytes(w, (size_t)(N_OUT * rb));
        struct model_weight mw = {.type = t, .data = w, .ne = {N_IN, N_OUT}};
        struct cpu_matmul_job job = {&mw, y};
        cpu_matmul(pool, &job, 1, x, xq, xk, N_ROWS, NULL);
        const struct cpu_kernel ref = cpu_kernel_variant(t, CPU_KERNEL_SCALAR);
        const uint8_t *xa = cpu_type_act(t) == CPU_ACT_Q8 ? xq : xk;
        const int64_t xs = cpu_type_act(t) == CPU_ACT_Q8 ? cpu_q8_row_bytes(N_IN) : cpu_q8k_row_bytes(N_IN);
        for (int r = 0; r < N_ROWS; r++) ref.tile(N_IN, w, rb, N_OUT, xa + r * xs, xs, 1, want + r * N_OUT, N_OUT);
        CHECK_MSG(!memcmp(y, want, sizeof y), "%s: cpu_matmul differs from the scalar kernel", tname(t));
    }
    threads_free(pool);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Blocks written by hand from the format's definition, their values computed by hand. */
TEST(test_hand_blocks)
{
    static const int kv[16] = QUANT_IQ4_VALUES;
    uint8_t b[292] = {0};
    float y[256];
    /* IQ4_NL: d = 0.5, qs[j] = j | (15 - j) << 4: element j = 0.5 kv[j], element 16 + j = 0.5 kv[15 - j] */
    put16(b, 0x3800);
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK(quant_dequantize_row(GGUF_DTYPE_IQ4_NL, b, y, 32) == 0);
    CHECK(y[0] == -63.5f && y[15] == 56.5f && y[16] == 56.5f && y[31] == -63.5f && y[8] == 0.5f);
    /* IQ4_XS: d = 1; sub-block 0 ls = 33 (scale 1), sub-block 1 ls = 0 (scale -32), sub-block 7 ls = 63
     * (31): scales_l[0] = 1 | 0 << 4, scales_h bits 0-1 = 2, bits 2-3 = 0, bits 14-15 = 3; scales_l[3]'s high
     * nibble 15. Every nibble 8 (kv = 1) */
    memset(b, 0, sizeof b);
    put16(b, 0x3c00);
    put16(b + 2, (uint16_t)(2 | 3u << 14));
    b[4] = 1;
    b[7] = 15 << 4;
    memset(b + 8, 0x88, 128);
    CHECK(quant_dequantize_row(GGUF_DTYPE_IQ4_XS, b, y, 256) == 0);
    CHECK(y[0] == 1.0f && y[31] == 1.0f && y[32] == -32.0f && y[63] == -32.0f && y[224] == 31.0f && y[100] == -32.0f);
    (void)kv;
    /* TQ2_0: d = 2 at 64; qs[0] = 0b11100100: elements 0, 32, 64, 96 = q 0, 1, 2, 3 -> -2, 0, 2, 4 */
    memset(b, 0, sizeof b);
    b[0] = 0xe4;
    put16(b + 64, 0x4000);
    CHECK(quant_dequantize_row(GGUF_DTYPE_TQ2_0, b, y, 256) == 0);
    CHECK(y[0] == -2.0f && y[32] == 0.0f && y[64] == 2.0f && y[96] == 4.0f && y[1] == -2.0f && y[128] == -2.0f);
    /* TQ1_0: d = 1 at 52; qs[0] = 0xff holds the trits of 242 / 243 scaled: 2 2 2 2 2 (x = 1) at elements
     * 0, 32, 64, 96, 128; qs[32] = 0 gives trits 0 (x = -1) at 160 + 16n; qh[0] = 0x80 = 128: digits of
     * 128 * 3^n mod 256 -> ((v * 3) >> 8): n = 0: 128 -> 1 (x = 0) */
    memset(b, 0, sizeof b);
    b[0] = 0xff;
    b[48] = 0x80;
    put16(b + 52, 0x3c00);
    CHECK(quant_dequantize_row(GGUF_DTYPE_TQ1_0, b, y, 256) == 0);
    CHECK(y[0] == 1.0f && y[32] == 1.0f && y[128] == 1.0f && y[160] == -1.0f && y[240] == 0.0f && y[1] == -1.0f);
    /* IQ2_XXS: d = 8 (so d/8 = 1); sub-block 0: grid index 0 in all groups (the point 8 8 8 8 8 8 8 8),
     * sign index 1 in group 0 (signs 0x81: elements 0 and 7 negative), ls = 1 (scale 3): x = +-24 */
    memset(b, 0, sizeof b);
    put16(b, 0x4800);
    b[2 + 4] = 1;
    b[2 + 7] = 1 << 4;
    CHECK(quant_dequantize_row(GGUF_DTYPE_IQ2_XXS, b, y, 256) == 0);
    CHECK(y[0] == -24.0f && y[1] == 24.0f && y[7] == -24.0f && y[8] == 24.0f && y[32] == 8.0f);
    /* IQ1_S: d = 8; sub-block 0 qh = 0: scale 1, delta +1/8; grid point 0 is all -1: x = 8 (-1 + 1/8) = -7 */
    memset(b, 0, sizeof b);
    put16(b, 0x4800);
    CHECK(quant_dequantize_row(GGUF_DTYPE_IQ1_S, b, y, 256) == 0);
    CHECK(y[0] == -7.0f && y[255] == -7.0f);
}

TEST(test_iq4_round_trip)
{
    static float x[4 * 256], y[4 * 256];
    static uint8_t q[4 * 256 / 32 * 18]; /* the larger of IQ4_NL (18 B a 32) and IQ4_XS (136 B a 256) */
    for (int t = 0; t < 2; t++) {
        const enum gguf_dtype ty = t ? GGUF_DTYPE_IQ4_XS : GGUF_DTYPE_IQ4_NL;
        double err = 0, sum = 0;
        for (int i = 0; i < 4 * 256; i++) x[i] = synth_uniform(&rng_state, 1.0f) * (i % 97 == 0 ? 4.0f : 1.0f);
        CHECK(quant_quantize_row(ty, x, q, 4 * 256) == 0 && quant_dequantize_row(ty, q, y, 4 * 256) == 0);
        for (int i = 0; i < 4 * 256; i++) {
            err += (double)(y[i] - x[i]) * (y[i] - x[i]);
            sum += (double)x[i] * x[i];
        }
        /* uniform values with outliers: ~0.07 of the rms (Q4_0 on the same: ~0.11) */
        CHECK_MSG(sqrt(err / sum) < 0.09, "%s: round trip rms error %.4f", tname(ty), sqrt(err / sum));
        printf("# %s: round trip relative rms error %.4f\n", tname(ty), sqrt(err / sum));
        /* zeros stay zeros */
        memset(x, 0, sizeof x);
        CHECK(quant_quantize_row(ty, x, q, 256) == 0 && quant_dequantize_row(ty, q, y, 256) == 0);
        for (int i = 0; i < 256; i++) CHECK(y[i] == 0.0f);
    }
}

int main(void)
{
    RUN(test_types_are_computed);
    RUN(test_simd_vs_scalar_vs_dequantized);
    RUN(test_matmul_rows);
    RUN(test_hand_blocks);
    RUN(test_iq4_round_trip);
    return test_summary();
}
