/* test_cpu_kernels — the CPU backend's kernels alone: the kernel families against the table of types, dot
 * kernels (SIMD vs scalar reference), the row tile vs the dot, quantizing an activation row vs its reference,
 * cpu_exp_row, and attention (each path vs a double-precision reference and vs the row alone). The whole step
 * is tests/test_backend.c.
 *
 * Stated tolerances:
 *  - dot kernels, SIMD vs scalar, same type: |diff| <= 1e-5 * sum|w_i x_i| + 1e-6 (only the float
 *    summation order differs; integer block sums are exact).
 *  - integer kernels vs dequantize-then-dot in f32: <= 1.5e-2 * sum|w_i x_i| (8-bit activations).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_attn.h"
#include "backend/cpu_iquant.h"
#include "backend/cpu_kernels.h"
#include "backend/cpu_kquant.h"
#include "gguf/quant.h"
#include "model/model.h"
#include "synth_util.h"
#include "test.h"

static uint64_t rng_state = 12345;

static float frand(float a)
{
    return synth_uniform(&rng_state, a);
}

/* ---------------------------------------------------------------- kernels */

static const enum gguf_dtype all_types[] = {GGUF_DTYPE_F32,  GGUF_DTYPE_F16,  GGUF_DTYPE_BF16, GGUF_DTYPE_Q8_0,
                                            GGUF_DTYPE_Q4_0, GGUF_DTYPE_Q4_1, GGUF_DTYPE_Q5_0, GGUF_DTYPE_Q5_1};

/* The CPU's kernel families against the table of types: what it computes (cpu_weight_types, its caps) the
 * table dequantizes; each such type is in exactly one family, whose activation blocks are the type's block
 * size; a faster variant exists only for a type with the scalar kernel it falls back to. */
TEST(test_cpu_types_follow_the_table)
{
    const uint64_t cpu = cpu_weight_types();
    CHECK((cpu & ~quant_dequantize_types()) == 0);
    CHECK(cpu >> GGUF_DTYPE_Q4_1 & 1 && cpu >> GGUF_DTYPE_Q6_K & 1 && cpu >> GGUF_DTYPE_BF16 & 1);
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const enum gguf_dtype ty = (enum gguf_dtype)t;
        const struct gguf_dtype_info *ti = gguf_dtype_info(t);
        const char *name = ti ? ti->name : "(no type)";
        for (int v = CPU_KERNEL_SCALAR; v <= CPU_KERNEL_AVX512; v++) {
            const struct cpu_kernel k = cpu_kernel_variant(ty, (enum cpu_kernel_variant)v);
            CHECK_MSG(!k.tile == !k.dot, "%s variant %d: a dot without a tile or the reverse", name, v);
            CHECK_MSG(!k.tile || cpu >> t & 1, "%s variant %d: a kernel for a type the CPU does not compute", name, v);
        }
        if (!(cpu >> t & 1)) {
            CHECK_MSG(!cpu_type_panels(ty) && !cpu_kquant_type(ty) && !cpu_iquant_type(ty),
                      "%s: in a kernel family, without kernels", name);
            continue;
        }
        const int n_families = cpu_type_panels(ty) + cpu_kquant_type(ty) + cpu_iquant_type(ty);
        CHECK_MSG(n_families == 1, "%s: in %d kernel families", name, n_families);
        const enum cpu_act act = cpu_type_act(ty);
        const uint32_t act_block = act == CPU_ACT_Q8 ? CPU_QK : act == CPU_ACT_Q8K ? CPU_QKK : 1;
        CHECK_MSG(ti->block_size == act_block, "%s: blocks of %u elements, activation blocks of %u", name,
                  ti->block_size, act_block);
    }
}

TEST(test_dot_simd_vs_scalar)
{
    /* integer types: 1 .. 33 blocks (the tiles, test_tile_equals_dot, are checked against these dots) */
    const int64_t lens[] = {32, 64, 96, 160, 256, 320, 576, 1024, 1056, 8, 172, 100, 7};
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum gguf_dtype t = all_types[ti];
        int q8 = cpu_type_uses_q8(t);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t n = lens[li];
            if (q8 && n % 32) continue;
            float *wf = malloc((size_t)n * 4), *wd = malloc((size_t)n * 4), *x = malloc(8 * (size_t)n * 4);
            uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n);
            void *w = malloc(rb);
            int64_t qrb = cpu_q8_row_bytes(n);
            uint8_t *xq = malloc(8 * (size_t)qrb + 1);
            CHECK(wf && wd && x && w && xq);
            for (int64_t i = 0; i < n; i++) wf[i] = frand(1.0f);
            for (int64_t i = 0; i < 8 * n; i++) x[i] = frand(2.0f);
            CHECK(quant_quantize_row(t, wf, w, n) == 0); /* dot reads the row as the file has it */
            CHECK(quant_dequantize_row(t, w, wd, n) == 0);
            const void *xin = x;
            int64_t xs = n * 4;
            if (q8) {
                for (int r = 0; r < 8; r++) cpu_quantize_row_q8(x + r * n, xq + r * qrb, n);
                xin = xq;
                xs = qrb;
            }
            float simd4[4], simd1[4], ref[4];
            cpu_kernel_best(t).dot(n, w, xin, xs, 4, simd4);
            for (int r = 0; r < 4; r++) cpu_kernel_best(t).dot(n, w, (const char *)xin + r * xs, xs, 1, &simd1[r]);
            cpu_kernel_variant(t, CPU_KERNEL_SCALAR).dot(n, w, xin, xs, 4, ref);
            /* the AVX-VNNI and AVX-512 integer kernels (when this CPU has them) equal the AVX2 ones bit for
             * bit, for 1 to max_x rows (AVX2 takes rows 0-3 and 4-7 in two calls) */
            cpu_dot_fn avx2 = cpu_kernel_variant(t, CPU_KERNEL_AVX2).dot;
            float want[8];
            if (avx2) {
                avx2(n, w, xin, xs, 4, want);
                avx2(n, w, (const char *)xin + 4 * xs, xs, 4, want + 4);
            }
            const enum cpu_kernel_variant others[] = {CPU_KERNEL_VNNI, CPU_KERNEL_AVX512};
            for (size_t vi = 0; vi < 2 && avx2; vi++) {
                struct cpu_kernel k = cpu_kernel_variant(t, others[vi]);
                if (!k.dot) continue;
                CHECK(k.max_x == CPU_DOT_MAX_X || k.max_x == CPU_TILE_MAX_X);
                for (int nx = 1; nx <= k.max_x; nx++) {
                    float va[CPU_TILE_MAX_X];
                    k.dot(n, w, xin, xs, nx, va);
                    CHECK_MSG(memcmp(va, want, (size_t)nx * sizeof(float)) == 0,
                              "type %s n %lld rows %d: variant %d differs from AVX2", gguf_dtype_info(t)->name,
                              (long long)n, nx, (int)others[vi]);
                }
            }
            /* rows share a weight decode but never an accumulator: bit-identical */
            CHECK_MSG(memcmp(simd4, simd1, sizeof simd4) == 0, "type %s n %lld: 4-row kernel differs from 1-row",
                      gguf_dtype_info(t)->name, (long long)n);
            for (int r = 0; r < 4; r++) {
                double mag = 0, exact = 0, exact_q = 0;
                for (int64_t i = 0; i < n; i++) {
                    mag += fabs((double)wd[i] * x[r * n + i]);
                    exact += (double)wd[i] * x[r * n + i];
                    if (q8) exact_q += (double)wd[i] * cpu_q8_value(xq + r * qrb, n, i);
                }
                /* the integer path equals dequantize(w) . dequantize(q8(x)) up to float rounding */
                CHECK_MSG(!q8 || fabs((double)simd4[r] - exact_q) <= 1e-5 * mag + 1e-6,
                          "type %s n %lld: simd %g vs dequantized dot %g", gguf_dtype_info(t)->name, (long long)n,
                          simd4[r], exact_q);
                CHECK_MSG(fabs((double)simd4[r] - ref[r]) <= 1e-5 * mag + 1e-6, "type %s n %lld: simd %g scalar %g",
                          gguf_dtype_info(t)->name, (long long)n, simd4[r], ref[r]);
                double tol = q8 ? 1.5e-2 * mag : 1e-5 * mag + 1e-6;
                CHECK_MSG(fabs((double)simd4[r] - exact) <= tol, "type %s n %lld: simd %g vs f32 dot %g",
                          gguf_dtype_info(t)->name, (long long)n, simd4[r], exact);
            }
            free(wf);
            free(wd);
            free(x);
            free(w);
            free(xq);
        }
    }
}

/* The tile kernels (what the matmul calls) of every variant this CPU has equal per-row dot calls bit for
 * bit, for every n_x, over 13, 20, 37 and 80 weight rows (panels: one partial; a whole and a partial; two
 * whole and a partial; four at once (AVX-512 float kernels) and one more) and several row lengths. For
 * the panel types the reference dot reads the unpacked row: scalar, AVX2 and AVX-512 panel kernels must
 * all give its bits. */
static void tile_case(int64_t n, int n_w)
{
    static const enum cpu_kernel_variant variants[] = {CPU_KERNEL_SCALAR, CPU_KERNEL_AVX2, CPU_KERNEL_VNNI,
                                                       CPU_KERNEL_AVX512};
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum gguf_dtype t = all_types[ti];
        int q8 = cpu_type_uses_q8(t);
        if (q8 && n % 32) continue;
        uint64_t rb = gguf_row_bytes((uint32_t)t, (uint64_t)n);
        static char w0[80 * 4400], w[80 * 4400];
        static uint8_t xq[8 * 1400];
        static float wf[1100], x[8 * 1100];
        float y[8 * 80], ref[8];
        for (int o = 0; o < n_w; o++) {
            for (int64_t i = 0; i < n; i++) wf[i] = frand(1.0f);
            CHECK(quant_quantize_row(t, wf, w0 + o * rb, n) == 0);
        }
        CHECK(cpu_packed_rows(t, n_w) * (int64_t)rb <= (int64_t)sizeof w);
        cpu_repack_rows(t, w0, n, n_w, 0, n_w, w); /* what the backend does at load */
        for (int64_t i = 0; i < 8 * n; i++) x[i] = frand(1.0f);
        for (int r = 0; r < 8; r++) cpu_quantize_row_q8(x + r * n, xq + r * cpu_q8_row_bytes(n), n);
        const void *xin = q8 ? (const void *)xq : (const void *)x;
        int64_t xs = q8 ? cpu_q8_row_bytes(n) : n * 4;
        CHECK(cpu_kernel_best(t).dot && cpu_kernel_best(t).tile);
        for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
            struct cpu_kernel k = cpu_kernel_variant(t, variants[vi]);
            if (!k.tile) continue;
            for (int n_x = 1; n_x <= k.max_x; n_x++) {
                k.tile(n, w, (int64_t)rb, n_w, xin, xs, n_x, y, 80);
                for (int o = 0; o < n_w; o++) {
                    k.dot(n, (q8 && !cpu_type_panels(t) ? w : w0) + o * rb, xin, xs, n_x, ref);
                    for (int i = 0; i < n_x; i++)
                        CHECK_MSG(memcmp(&y[i * 80 + o], &ref[i], sizeof(float)) == 0,
                                  "type %s variant %d n %lld n_w %d n_x %d o %d i %d: %.9g vs %.9g",
                                  gguf_dtype_info(t)->name, (int)variants[vi], (long long)n, n_w, n_x, o, i,
                                  y[i * 80 + o], ref[i]);
                }
                if (test_cur_failed) return;
            }
        }
    }
}

TEST(test_tile_equals_dot)
{
    const int64_t lens[] = {320, 172, 64, 8, 13, 100, 512, 768, 1056}; /* integer types: 2 .. 33 blocks */
    const int n_ws[] = {13, 20, 37, 80};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (size_t j = 0; j < sizeof n_ws / sizeof n_ws[0]; j++) {
            tile_case(lens[i], n_ws[j]);
            if (test_cur_failed) return;
        }
}

/* The activation quantizer (AVX2 where built) gives the plain-C reference's bytes: random rows of several
 * scales, exact .5 ties, zeros, denormals, huge values, inf and NaN. */
TEST(test_quantize_row_vs_ref)
{
    enum { N = 1056 }; /* 33 blocks */
    static float x[N];
    static uint8_t a[N / 32 * 40], b[N / 32 * 40];
    for (int round = 0; round < 40 && !test_cur_failed; round++) {
        const float scale = round < 10 ? 1.0f : round < 20 ? 1e-3f : round < 30 ? 1e6f : 1e-40f;
        for (int i = 0; i < N; i++) x[i] = frand(scale);
        if (round % 5 == 1)
            for (int i = 0; i < N; i++) x[i] = (float)((i % 255) - 127) * 0.5f; /* ties after scaling */
        if (round % 5 == 2) {
            memset(x, 0, 32 * sizeof(float)); /* an all-zero block */
            x[40] = INFINITY, x[77] = -INFINITY, x[100] = NAN, x[200] = 3e38f, x[201] = -3e38f;
            x[300] = 1e-45f, x[333] = -1e-44f;
        }
        cpu_quantize_row_q8(x, a, N);
        cpu_quantize_row_q8_ref(x, b, N);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "round %d: quantized row differs from the reference", round);
    }
}

/* Q8_0 weights of -128 (not produced by the quantizer, legal in a file) must not saturate, in every
 * variant's tiles (16 rows, 9 blocks). */
TEST(test_dot_q8_0_extremes)
{
    enum { NB = 9, N = NB * 32, ROWS = 16 };
    static uint8_t w0[ROWS * NB * 34], w[ROWS * NB * 34];
    for (int b = 0; b < ROWS * NB; b++) {
        w0[b * 34] = 0x00;
        w0[b * 34 + 1] = 0x3C; /* f16 1.0 */
        for (int i = 0; i < 32; i++) w0[b * 34 + 2 + i] = 0x80; /* -128 */
    }
    cpu_repack_rows(GGUF_DTYPE_Q8_0, w0, N, ROWS, 0, ROWS, w);
    float x[N];
    for (int i = 0; i < N; i++) x[i] = -1.0f; /* quantizes to d = 1/127, q = -127 */
    static uint8_t xq[NB * 40];
    cpu_quantize_row_q8(x, xq, N);
    const double want = 128.0 * 127.0 * N * (1.0 / 127.0);
    for (int v = CPU_KERNEL_SCALAR; v <= CPU_KERNEL_AVX512; v++) {
        struct cpu_kernel k = cpu_kernel_variant(GGUF_DTYPE_Q8_0, (enum cpu_kernel_variant)v);
        if (!k.tile) continue;
        float y[ROWS];
        k.tile(N, w, NB * 34, ROWS, xq, sizeof xq, 1, y, ROWS);
        for (int o = 0; o < ROWS; o++)
            CHECK_MSG(fabs(y[o] - want) < 1e-3 * want, "variant %d row %d: %g want %g", v, o, y[o], want);
    }
}

/* ---------------------------------------------------------------- attention kernel */

/* cpu_exp_row: accurate to a few ulp against exp() in double, exact limits, and each element's bits
 * depend only on its own input (not on n or its place in the row: the vector tail path). */
TEST(test_exp_row)
{
    enum { N = 4099 };
    static float x[N], y[N], y1[N];
    double worst = 0;
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * (float)i / (float)(N - 1);
    x[7] = 0.0f;
    x[8] = -1e-30f;
    x[9] = 1e-7f;
    cpu_exp_row(x, y, N);
    for (int i = 0; i < N; i++) {
        double want = exp((double)x[i]);
        double ulp = nextafterf((float)want, INFINITY) - (float)want;
        double err = fabs((double)y[i] - want) / ulp;
        if (err > worst) worst = err;
    }
    printf("# cpu_exp_row: max error %.2f ulp over [-87, 88]\n", worst);
    CHECK_MSG(worst <= 2.0, "max error %.2f ulp", worst);
    /* element-wise: the same values through other lengths and offsets give the same bits */
    for (int n = 1; n <= 17; n++) {
        cpu_exp_row(x + 100 + n, y1, n);
        CHECK_MSG(memcmp(y1, y + 100 + n, (size_t)n * sizeof(float)) == 0, "n %d differs", n);
    }
    float lim[6] = {-INFINITY, -87.5f, -200.0f, 89.0f, INFINITY, NAN}, out[6];
    cpu_exp_row(lim, out, 6);
    CHECK(out[0] == 0.0f && out[1] == 0.0f && out[2] == 0.0f);
    CHECK(isinf(out[3]) && out[3] > 0 && isinf(out[4]));
    CHECK(isnan(out[5]));
    float one = 0.0f;
    cpu_exp_row(&one, &one, 1);
    CHECK(one == 1.0f);
    /* SwiGLU rows: g / (1 + exp(-g)) * u element by element, whatever the length */
    for (int n = 1; n <= 19; n += 3) {
        float g[19], u[19], e[19];
        for (int i = 0; i < n; i++) g[i] = frand(12.0f), u[i] = frand(2.0f), e[i] = -g[i];
        cpu_exp_row(e, e, n);
        float want[19];
        for (int i = 0; i < n; i++) want[i] = g[i] / (1.0f + e[i]) * u[i];
        cpu_swiglu_row(g, u, n);
        CHECK_MSG(memcmp(g, want, (size_t)n * sizeof(float)) == 0, "swiglu n %d", n);
    }
    /* the softmax's exp2 (inputs <= 0) */
    for (int i = 0; i < N; i++) x[i] = -126.0f * (float)i / (float)(N - 1);
    cpu_exp2_softmax_row(x, y, N);
    worst = 0;
    for (int i = 0; i < N; i++) {
        if (x[i] < -125.0f) {
            CHECK(y[i] == 0.0f);
            continue;
        }
        double want = exp2((double)x[i]);
        double ulp = nextafterf((float)want, INFINITY) - (float)want;
        double err = fabs((double)y[i] - want) / ulp;
        if (err > worst) worst = err;
    }
    printf("# cpu_exp2_softmax_row: max error %.2f ulp over [-125, 0]\n", worst);
    CHECK_MSG(worst <= 2.0, "exp2: max error %.2f ulp", worst);
    for (int n = 1; n <= 17; n++) {
        cpu_exp2_softmax_row(x + 100 + n, y1, n);
        CHECK_MSG(memcmp(y1, y + 100 + n, (size_t)n * sizeof(float)) == 0, "exp2 n %d differs", n);
    }
    float lim2[4] = {-INFINITY, -200.0f, 0.0f, NAN}, out2[4];
    cpu_exp2_softmax_row(lim2, out2, 4);
    CHECK(out2[0] == 0.0f && out2[1] == 0.0f && out2[2] == 1.0f && isnan(out2[3]));
}

enum { NB = 128, NA = 75, NBQ = 40 }; /* attn_case: blocks in the pool, positions of sequences A and B */

/* Writes random K and V for the positions of sequences A (NA, blocks bt_a) and B (NBQ, blocks bt_b) into the
 * pool of kv (kp, vp: its k and v, writable), and their dequantized values into kf and vf, (2, NA, n_kv, hd)
 * for the reference. dt: the KV type's tensor type. */
static void attn_fill_pool(const struct cpu_kv_layer *kv, enum gguf_dtype dt, uint8_t *kp, uint8_t *vp,
                           const int32_t *bt_a, const int32_t *bt_b, float *kf, float *vf)
{
    const enum kv_type t = kv->type;
    const int bs = kv->block_size, n_kv = kv->n_head_kv, hd = kv->head_dim;
    const uint64_t vec = kv->vec_bytes;
    float tmp[256];
    for (int s = 0; s < 2; s++) {
        int n = s == 0 ? NA : NBQ;
        const int32_t *bt = s == 0 ? bt_a : bt_b;
        for (int p = 0; p < n; p++)
            for (int h = 0; h < n_kv; h++) {
                uint64_t region = ((uint64_t)bt[p / bs] * n_kv + h) * bs * vec, off = region + (uint64_t)(p % bs) * vec;
                float *kd = kf + (((size_t)s * NA + p) * n_kv + h) * hd,
                      *vd = vf + (((size_t)s * NA + p) * n_kv + h) * hd;
                uint8_t kvec[256 * 4];
                for (int d = 0; d < hd; d++) tmp[d] = frand(2.0f);
                quant_quantize_row(dt, tmp, kvec, hd);
                quant_dequantize_row(dt, kvec, kd, hd);
                if (cpu_attn_k_transposed(t)) { /* K of f32/f16: [dim][slot] inside the region */
                    const int esz = t == KV_TYPE_F16 ? 2 : 4;
                    for (int d = 0; d < hd; d++)
                        memcpy(kp + region + ((uint64_t)d * bs + p % bs) * esz, kvec + d * esz, esz);
                } else {
                    memcpy(kp + off, kvec, vec);
                }
                for (int d = 0; d < hd; d++) tmp[d] = frand(1.0f);
                quant_quantize_row(dt, tmp, vp + off, hd);
                quant_dequantize_row(dt, vp + off, vd, hd);
            }
    }
}

/* Row r of an attention batch, out (n_head, hd), against a double-precision reference over the dequantized
 * K and V of its sequence (kf, vf: (NA, n_kv, hd)) at positions pos - w + 1 .. pos; 0 when within
 * 2e-6 + 2e-5 |reference|, else -1 and why. */
static int attn_row_vs_reference(const struct cpu_kv_layer *kv, int group, int r, int32_t pos, int w,
                                 const float *q, const float *out, const float *kf, const float *vf, char *why,
                                 size_t why_n)
{
    const int hd = kv->head_dim, n_kv = kv->n_head_kv, n_head = n_kv * group;
    const float scale = kv->scale, cap = kv->softcap;
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + h * hd;
        double sc[NA], mx = -INFINITY, sum = 0;
        const int p0 = pos - w + 1 > 0 ? pos - w + 1 : 0; /* the first position in the window */
        for (int p = p0; p <= pos; p++) {
            const float *k = kf + ((size_t)p * n_kv + h / group) * hd;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)qh[i] * k[i];
            sc[p] = scale > 0 ? d * scale : d / sqrt((double)hd);
            if (cap > 0) sc[p] = cap * tanh(sc[p] / cap);
            if (sc[p] > mx) mx = sc[p];
        }
        for (int p = p0; p <= pos; p++) sum += sc[p] = exp(sc[p] - mx);
        for (int i = 0; i < hd; i++) {
            double o = 0;
            for (int p = p0; p <= pos; p++) o += sc[p] * vf[((size_t)p * n_kv + h / group) * hd + i];
            o /= sum;
            double got = out[h * hd + i];
            if (!(fabs(got - o) <= 2e-6 + 2e-5 * fabs(o)))
                return snprintf(why, why_n, "row %d head %d dim %d: %.8g, reference %.8g", r, h, i, got, o), -1;
        }
    }
    return 0;
}

/* One attention case: a hand-built KV pool (garbage NaN bytes in every slot no row may read), two
 * sequences, a step batch; every row is checked against a double-precision reference and against the
 * same row run alone (bit for bit). window, scale, cap: the layer's sliding window, score scale and
 * soft-cap (struct cpu_kv_layer; 0: none / 1/sqrt(head_dim) / none). */
static int attn_case(int hd, int group, int n_kv, int bs, enum kv_type t, int window, float scale, float cap,
                     char *why, size_t why_n)
{
    const enum gguf_dtype dt = t == KV_TYPE_F32 ? GGUF_DTYPE_F32 : t == KV_TYPE_F16 ? GGUF_DTYPE_F16 : GGUF_DTYPE_Q8_0;
    const uint64_t vec = gguf_row_bytes((uint32_t)dt, (uint64_t)hd);
    const uint64_t pool_bytes = (uint64_t)NB * n_kv * bs * vec;
    const int n_head = n_kv * group, n_q = n_head * hd;
    uint8_t *kp = malloc(pool_bytes), *vp = malloc(pool_bytes);
    /* sequences: A (NA positions), B (NBQ positions), blocks scattered */
    int32_t bt_a[NB], bt_b[NB];
    int na_blocks = (NA + bs - 1) / bs, nb_blocks = (NBQ + bs - 1) / bs;
    if (na_blocks + nb_blocks > NB) return snprintf(why, why_n, "pool too small"), -1;
    for (int i = 0; i < na_blocks; i++) bt_a[i] = (i * 7 + 3) % NB;
    int used[NB] = {0}, nb = 0;
    for (int i = 0; i < na_blocks; i++) used[bt_a[i]] = 1;
    for (int i = 0; i < NB && nb < nb_blocks; i++)
        if (!used[NB - 1 - i]) bt_b[nb++] = NB - 1 - i;
    memset(kp, 0xFF, pool_bytes); /* NaN in every format: must never be read */
    memset(vp, 0xFF, pool_bytes);
    struct cpu_kv_layer kv = {kp, vp, t, bs, n_kv, hd, vec, window, scale, cap};
    float *kf = malloc((size_t)(NA + NBQ) * n_kv * hd * sizeof(float)); /* dequantized, for the reference */
    float *vf = malloc((size_t)(NA + NBQ) * n_kv * hd * sizeof(float));
    attn_fill_pool(&kv, dt, kp, vp, bt_a, bt_b, kf, vf);
    /* the batch: A positions 3..74 (crossing item and chunk boundaries), then B 17..39 */
    enum { NR = 72 + 23 };
    int32_t pos[NR], seq[NR], tok[NR] = {0};
    for (int i = 0; i < 72; i++) pos[i] = 3 + i, seq[i] = 0;
    for (int i = 0; i < 23; i++) pos[72 + i] = 17 + i, seq[72 + i] = 1;
    struct step_seq ss[2] = {{bt_a, na_blocks}, {bt_b, nb_blocks}};
    float *q = malloc((size_t)NR * n_q * sizeof(float)), *out = malloc((size_t)NR * n_q * sizeof(float));
    float *one = malloc((size_t)n_q * sizeof(float));
    for (int64_t i = 0; i < (int64_t)NR * n_q; i++) q[i] = frand(1.0f);
    const int w = window > 0 ? window : 1 << 30;
    struct cpu_attn_item items[NR * 8];
    float *scratch = NULL;
    int rc = -1;
    if (posix_memalign((void **)&scratch, 64, cpu_attn_scratch_floats(hd, group, 128) * sizeof(float))) goto out;
    struct step_batch b = {NR, tok, pos, seq, 2, ss, 0, NULL, 0, NULL, NULL};
    int64_t max_pos = 0, ni = cpu_attn_plan(&b, n_kv, group, items, &max_pos);
    if (max_pos != NA) {
        snprintf(why, why_n, "max_pos %lld", (long long)max_pos);
        goto out;
    }
    cpu_attn_run(&kv, &b, items, ni, group, q, out, scratch, 128);
    /* every path this layout and CPU have gives the general path's bits */
    float *alt = malloc((size_t)NR * n_q * sizeof(float));
    for (int path = CPU_ATTN_GENERAL; path <= CPU_ATTN_FAST_AVX512; path++) {
        memset(alt, 0, (size_t)NR * n_q * sizeof(float));
        int ran = 1;
        for (int64_t i = 0; i < ni && ran; i++)
            ran = !cpu_attn_item_run_path((enum cpu_attn_path)path, &kv, &b, &items[i], group, q, alt, scratch, 128);
        if (ran && memcmp(alt, out, (size_t)NR * n_q * sizeof(float)) != 0) {
            snprintf(why, why_n, "path %d differs from the one cpu_attn_run took", path);
            free(alt);
            goto out;
        }
        if (ran) printf("# attention head_dim %d group %d block %d %s: path %d same bits\n", hd, group, bs,
                        model_kv_type_name(t), path);
    }
    free(alt);
    for (int r = 0; r < NR; r++) {
        /* alone: a one-row batch */
        struct step_batch b1 = {1, tok, &pos[r], &seq[r], 2, ss, 0, NULL, 0, NULL, NULL};
        int64_t mp1 = 0, n1 = cpu_attn_plan(&b1, n_kv, group, items, &mp1);
        cpu_attn_run(&kv, &b1, items, n1, group, q + (int64_t)r * n_q, one, scratch, 128);
        if (memcmp(one, out + (int64_t)r * n_q, (size_t)n_q * sizeof(float)) != 0) {
            snprintf(why, why_n, "row %d (seq %d pos %d) alone differs from in the batch", r, seq[r], pos[r]);
            goto out;
        }
        const size_t base = (size_t)seq[r] * NA * n_kv * hd;
        if (attn_row_vs_reference(&kv, group, r, pos[r], w, q + (int64_t)r * n_q, out + (int64_t)r * n_q, kf + base,
                                  vf + base, why, why_n))
            goto out;
    }
    rc = 0;
out:
    free(kp);
    free(vp);
    free(kf);
    free(vf);
    free(q);
    free(out);
    free(one);
    free(scratch);
    return rc;
}

TEST(test_attn_kernel)
{
    struct {
        int hd, group, n_kv, bs;
        enum kv_type t;
        int window;
        float scale, cap;
    } cases[] = {
        {8, 2, 4, 16, KV_TYPE_F16, 0, 0, 0},
        {8, 2, 4, 4, KV_TYPE_F32, 0, 0, 0},
        {16, 1, 2, 8, KV_TYPE_F32, 0, 0, 0},
        {12, 3, 1, 4, KV_TYPE_F16, 0, 0, 0},
        {32, 4, 2, 16, KV_TYPE_Q8_0, 0, 0, 0},
        {40, 8, 1, 32, KV_TYPE_F32, 0, 0, 0},
        {64, 3, 3, 16, KV_TYPE_F16, 0, 0, 0},
        {8, 17, 1, 2, KV_TYPE_F32, 0, 0, 0},
        {64, 1, 1, 1, KV_TYPE_Q8_0, 0, 0, 0},
        /* fast-path layouts (head_dim 8 or a multiple of 16, block >= 16) */
        {8, 2, 4, 32, KV_TYPE_F32, 0, 0, 0},
        {32, 4, 2, 16, KV_TYPE_F32, 0, 0, 0},
        {16, 1, 2, 64, KV_TYPE_F16, 0, 0, 0},
        {8, 17, 1, 16, KV_TYPE_F16, 0, 0, 0},
        {8, 5, 2, 16, KV_TYPE_F32, 0, 0, 0},
        {128, 2, 1, 16, KV_TYPE_F16, 0, 0, 0},
        /* sliding windows (1 position, shorter and longer than a 32-position chunk: rows skip chunks),
         * a score scale and soft-caps (gemma); these take the general kernels only */
        {8, 2, 4, 16, KV_TYPE_F16, 1, 0, 0},
        {16, 1, 2, 8, KV_TYPE_F32, 7, 0, 0},
        {32, 4, 2, 16, KV_TYPE_Q8_0, 20, 0, 0},
        {32, 4, 2, 16, KV_TYPE_F32, 40, 0.07f, 0},
        {64, 3, 3, 16, KV_TYPE_F16, 0, 0, 1.5f},
        {8, 5, 2, 4, KV_TYPE_F32, 33, 0.5f, 2.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[256] = "";
        int rc = attn_case(cases[i].hd, cases[i].group, cases[i].n_kv, cases[i].bs, cases[i].t, cases[i].window,
                           cases[i].scale, cases[i].cap, why, sizeof why);
        CHECK_MSG(rc == 0, "head_dim %d group %d kv heads %d block %d kv %s window %d scale %g cap %g: %s", cases[i].hd,
                  cases[i].group, cases[i].n_kv, cases[i].bs, model_kv_type_name(cases[i].t), cases[i].window,
                  (double)cases[i].scale, (double)cases[i].cap, why);
    }
}

int main(void)
{
    RUN(test_cpu_types_follow_the_table);
    RUN(test_dot_simd_vs_scalar);
    RUN(test_tile_equals_dot);
    RUN(test_dot_q8_0_extremes);
    RUN(test_exp_row);
    RUN(test_quantize_row_vs_ref);
    RUN(test_attn_kernel);
    return test_summary();
}
