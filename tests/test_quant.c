/* test_quant — reference conversions: half/bfloat16 against the F16C instructions, round trips within
 * stated tolerances, and hand-built blocks of every dequantizable type with known values. The hand-built
 * blocks are packed here from the layout description in quant.c, element by element (a second, independent
 * statement of each layout). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "gguf/quant.h"
#include "test.h"
#include "util/rng.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull; /* one splitmix64 stream for the whole file */
static float rng_uniform(void)
{
    return (float)((rng_splitmix64(&rng_state) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- half / bfloat16 ---- */

TEST(f16_to_f32_all_65536_match_f16c)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float ref = _cvtsh_ss((unsigned short)h), got = quant_f16_to_f32((uint16_t)h);
        if (isnan(ref))
            CHECK_MSG(isnan(got), "h=0x%04x", h);
        else
            CHECK_MSG(fbits(ref) == fbits(got), "h=0x%04x: %g != %g", h, got, ref);
    }
}

static int f32_to_f16_matches(float f)
{
    uint16_t ref = (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT), got = quant_f32_to_f16(f);
    if (isnan(f)) return (got & 0x7c00) == 0x7c00 && (got & 0x3ff) && (got & 0x8000) == (ref & 0x8000);
    return ref == got;
}

TEST(f32_to_f16_rounding_matches_f16c)
{
    /* every half value, the midpoints between neighbours, and one ulp either side of each midpoint */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float a = _cvtsh_ss((unsigned short)h), b = _cvtsh_ss((unsigned short)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2);
        float probes[5] = {a, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), -mid};
        for (int k = 0; k < 5; k++)
            CHECK_MSG(f32_to_f16_matches(probes[k]), "f=%a: got 0x%04x want 0x%04x", probes[k],
                      quant_f32_to_f16(probes[k]), (unsigned)_cvtss_sh(probes[k], 0));
    }
    /* random bit patterns: subnormals, huge values, NaNs, infinities */
    for (int i = 0; i < 2000000; i++) {
        float f = bitsf((uint32_t)rng_splitmix64(&rng_state));
        CHECK_MSG(f32_to_f16_matches(f), "f=%a (0x%08x): got 0x%04x want 0x%04x", f, fbits(f),
                  quant_f32_to_f16(f), (unsigned)_cvtss_sh(f, 0));
    }
    CHECK_EQ_INT(quant_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(quant_f32_to_f16(65519.99f), 0x7bff);
    CHECK_EQ_INT(quant_f32_to_f16(65520.0f), 0x7c00); /* ties to even: rounds up to inf */
    CHECK_EQ_INT(quant_f32_to_f16(-INFINITY), 0xfc00);
    CHECK_EQ_INT(quant_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    CHECK_EQ_INT(quant_f32_to_f16(2.9802322e-8f), 0x0000); /* half of it: tie to even -> 0 */
    CHECK_EQ_INT(quant_f32_to_f16(-0.0f), 0x8000);
    CHECK(isnan(quant_f16_to_f32(quant_f32_to_f16(NAN))));
}

TEST(bf16_conversions)
{
    CHECK_EQ_INT(quant_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(quant_f32_to_bf16(bitsf(0x3f808000)), 0x3f80); /* tie, even stays */
    CHECK_EQ_INT(quant_f32_to_bf16(bitsf(0x3f818000)), 0x3f82); /* tie, odd rounds up */
    CHECK_EQ_INT(quant_f32_to_bf16(bitsf(0x3f808001)), 0x3f81);
    CHECK_EQ_INT(quant_f32_to_bf16(bitsf(0x7f7fffff)), 0x7f80); /* FLT_MAX rounds to inf */
    CHECK_EQ_INT(quant_f32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ_INT(quant_f32_to_bf16(bitsf(0x00000001)), 0x0000); /* subnormals round normally */
    uint16_t n = quant_f32_to_bf16(bitsf(0x7f800001));          /* NaN with a low payload stays NaN */
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f));
    CHECK(quant_bf16_to_f32(0xc040) == -3.0f);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) CHECK_EQ_INT(quant_f32_to_bf16(f), h);
    }
}

/* ---- round trips ---- */

static void fill_random(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = rng_uniform() * scale;
}

TEST(round_trip_plain_types)
{
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t buf[N * 4];
    fill_random(x, N, 3.0f);
    x[0] = 0.0f;
    x[1] = 1e-6f;
    CHECK(quant_quantize_row(GGUF_DTYPE_F32, x, buf, N) == 0 &&
          quant_dequantize_row(GGUF_DTYPE_F32, buf, y, N) == 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK(quant_quantize_row(GGUF_DTYPE_F16, x, buf, N) == 0 &&
          quant_dequantize_row(GGUF_DTYPE_F16, buf, y, N) == 0);
    for (int i = 0; i < N; i++)
        CHECK_MSG(fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f, "f16 i=%d %g %g", i, x[i], y[i]);
    CHECK(quant_quantize_row(GGUF_DTYPE_BF16, x, buf, N) == 0 &&
          quant_dequantize_row(GGUF_DTYPE_BF16, buf, y, N) == 0);
    for (int i = 0; i < N; i++)
        CHECK_MSG(fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-8f, "bf16 i=%d %g %g", i, x[i], y[i]);
}

/* Per block of 32: Q8_0 error <= amax/254 (rounding) + 127 * (half rounding error of d: relative 2^-11,
 * or absolute 2^-25 when d is a half subnormal, as for the 1e-4 blocks here). */
TEST(round_trip_q8_0)
{
    enum { N = 32 * 256 };
    static float x[N], y[N];
    static uint8_t buf[N / 32 * 34];
    for (int b = 0; b < N / 32; b++)
        fill_random(x + 32 * b, 32, powf(10.0f, (float)(b % 9) - 4.0f));
    for (int j = 0; j < 32; j++)
        x[32 * 7 + j] = 0.0f; /* an all-zero block */
    CHECK(quant_quantize_row(GGUF_DTYPE_Q8_0, x, buf, N) == 0);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q8_0, buf, y, N) == 0);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        for (int j = 0; j < 32; j++) {
            float err = fabsf(x[32 * b + j] - y[32 * b + j]);
            CHECK_MSG(err <= amax / 254.0f + amax / 2048.0f + 127 * 0x1p-25f,
                      "block %d elem %d: err %g amax %g", b, j, err, amax);
        }
    }
    for (int j = 0; j < 32; j++)
        CHECK(y[32 * 7 + j] == 0.0f);
}

/* Q4_0: d = max/-8 (max = signed value of largest magnitude); error <= |d|/2 except on the side opposite
 * max, where +8 clamps to 7 (error up to |d|); plus the half rounding of d (8|d|/2048). */
TEST(round_trip_q4_0)
{
    enum { N = 32 * 256 };
    static float x[N], y[N];
    static uint8_t buf[N / 32 * 18];
    for (int b = 0; b < N / 32; b++)
        fill_random(x + 32 * b, 32, powf(10.0f, (float)(b % 7) - 3.0f));
    CHECK(quant_quantize_row(GGUF_DTYPE_Q4_0, x, buf, N) == 0);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q4_0, buf, y, N) == 0);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[32 * b + j]) > amax) {
                amax = fabsf(x[32 * b + j]);
                max = x[32 * b + j];
            }
        float d = amax / 8.0f;
        for (int j = 0; j < 32; j++) {
            float v = x[32 * b + j], err = fabsf(v - y[32 * b + j]);
            int clamped = (v > 0) != (max > 0) && fabsf(v) > 7.5f * d;
            float tol = (clamped ? d : d / 2) + 8 * d / 2048 + 1e-30f;
            CHECK_MSG(err <= tol, "block %d elem %d: x %g y %g tol %g", b, j, v, y[32 * b + j], tol);
        }
        /* the element of largest magnitude is reproduced (up to the half rounding of d) */
        for (int j = 0; j < 32; j++)
            if (x[32 * b + j] == max) CHECK(fabsf(y[32 * b + j] - max) <= amax / 1024);
    }
}

/* Q4_1: d = (max-min)/15, m = min; error <= d/2 + half rounding of m and of d*15. */
TEST(round_trip_q4_1)
{
    enum { N = 32 * 256 };
    static float x[N], y[N];
    static uint8_t buf[N / 32 * 20];
    for (int b = 0; b < N / 32; b++) {
        fill_random(x + 32 * b, 32, powf(10.0f, (float)(b % 5) - 2.0f));
        if (b % 3 == 0)
            for (int j = 0; j < 32; j++)
                x[32 * b + j] += 5.0f; /* all positive: min far from 0 */
    }
    for (int j = 0; j < 32; j++)
        x[32 * 4 + j] = 1.25f; /* constant block: d = 0 */
    CHECK(quant_quantize_row(GGUF_DTYPE_Q4_1, x, buf, N) == 0);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q4_1, buf, y, N) == 0);
    for (int b = 0; b < N / 32; b++) {
        float mn = x[32 * b], mx = x[32 * b];
        for (int j = 0; j < 32; j++) {
            mn = fminf(mn, x[32 * b + j]);
            mx = fmaxf(mx, x[32 * b + j]);
        }
        float d = (mx - mn) / 15.0f;
        float tol = d / 2 + fabsf(mn) / 2048 + 15 * d / 2048 + 1e-30f;
        for (int j = 0; j < 32; j++)
            CHECK_MSG(fabsf(x[32 * b + j] - y[32 * b + j]) <= tol, "block %d elem %d: x %g y %g", b, j,
                      x[32 * b + j], y[32 * b + j]);
    }
    CHECK(y[32 * 4] == 1.25f && y[32 * 4 + 31] == 1.25f);
}

/* K-quants: relative rms error sqrt(sum (x - y)^2 / sum x^2) of quantize-then-dequantize on Gaussian
 * data (64 super-blocks), below these bounds (measured: Q2_K 0.270, Q3_K 0.143, Q4_K 0.071, Q5_K 0.036,
 * Q6_K 0.017; for comparison Q4_0 0.085, Q4_1 0.078 on the same data); each type beats the next smaller
 * one; degenerate blocks (zeros, a constant, one outlier, all negative) come back finite and close. */
TEST(round_trip_kquants)
{
    enum { N = 256 * 64 };
    static float x[N], y[N];
    static uint8_t buf[N];
    for (int i = 0; i < N; i += 2) { /* Box-Muller */
        double u1 = (rng_uniform() + 1.0) * 0.5 + 1e-9, u2 = (rng_uniform() + 1.0) * 0.5;
        x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        x[i + 1] = (float)(sqrt(-2.0 * log(u1)) * sin(6.283185307179586 * u2));
    }
    const struct {
        enum gguf_dtype t;
        double bound;
    } cases[] = {{GGUF_DTYPE_Q2_K, 0.30}, {GGUF_DTYPE_Q3_K, 0.16}, {GGUF_DTYPE_Q4_K, 0.08},
                 {GGUF_DTYPE_Q5_K, 0.04}, {GGUF_DTYPE_Q6_K, 0.019}};
    double prev = 1.0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK(quant_quantize_row(cases[c].t, x, buf, N) == 0 && quant_dequantize_row(cases[c].t, buf, y, N) == 0);
        double e = 0, r = 0;
        for (int i = 0; i < N; i++) {
            e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            r += (double)x[i] * x[i];
        }
        const double rel = sqrt(e / r);
        printf("# %s: relative rms error %.4f (bound %.3f)\n", gguf_dtype_info(cases[c].t)->name, rel, cases[c].bound);
        CHECK_MSG(rel <= cases[c].bound && rel < prev, "%s: relative rms error %.4f", gguf_dtype_info(cases[c].t)->name,
                  rel);
        prev = rel;
    }
    /* degenerate super-blocks */
    static float z[256 * 4];
    for (int i = 0; i < 256; i++) {
        z[i] = 0.0f;
        z[256 + i] = 0.75f;
        z[512 + i] = i == 77 ? 100.0f : 0.01f * (float)(i % 7);
        z[768 + i] = -1.0f - 0.001f * (float)i;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK(quant_quantize_row(cases[c].t, z, buf, 1024) == 0 && quant_dequantize_row(cases[c].t, buf, y, 1024) == 0);
        for (int i = 0; i < 1024; i++) {
            const double tol = i < 256 ? 0.0 : i < 512 ? 0.75 * 0.01 : i < 768 ? (i == 512 + 77 ? 1.0 : 0.07) : 0.3;
            CHECK_MSG(isfinite(y[i]) && fabs((double)y[i] - z[i]) <= tol, "%s: element %d: %g for %g",
                      gguf_dtype_info(cases[c].t)->name, i, y[i], z[i]);
        }
    }
}

TEST(bad_arguments)
{
    float x[64] = {0};
    uint8_t buf[1024];
    CHECK(quant_quantize_row(GGUF_DTYPE_Q8_0, x, buf, 33) == -1);
    CHECK(quant_quantize_row(GGUF_DTYPE_Q4_K, x, buf, 64) == -1);
    CHECK(quant_quantize_row(GGUF_DTYPE_IQ2_XXS, x, buf, 256) == -1); /* read-only */
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q6_K, buf, x, 64) == -1);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q8_1, buf, x, 256) == -1);
    CHECK(quant_dequantize_row((enum gguf_dtype)4, buf, x, 32) == -1);
    CHECK(quant_can_dequantize(GGUF_DTYPE_Q5_K) && !quant_can_dequantize(GGUF_DTYPE_Q8_1));
    CHECK(quant_can_quantize(GGUF_DTYPE_Q4_1) && quant_can_quantize(GGUF_DTYPE_Q5_0) &&
          !quant_can_quantize(GGUF_DTYPE_IQ3_S));
    CHECK(quant_can_quantize(GGUF_DTYPE_Q6_K) && !quant_can_quantize(GGUF_DTYPE_TQ1_0));
}

/* ---- hand-built blocks ---- */

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = quant_f32_to_f16(f);
    memcpy(p, &h, 2);
}

TEST(block_q8_0_q4_0_q4_1_known_values)
{
    uint8_t b[34];
    float y[32];
    put_f16(b, 0.5f);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q8_0, b, y, 32) == 0);
    for (int j = 0; j < 32; j++)
        CHECK(y[j] == 0.5f * (float)(j - 16));

    put_f16(b, -2.0f);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | (15 - j) << 4); /* elem j = j, elem j+16 = 15-j */
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q4_0, b, y, 32) == 0);
    for (int j = 0; j < 16; j++)
        CHECK(y[j] == -2.0f * (float)(j - 8) && y[j + 16] == -2.0f * (float)(7 - j));

    put_f16(b, 0.25f);
    put_f16(b + 2, -1.0f);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q4_1, b, y, 32) == 0);
    for (int j = 0; j < 16; j++)
        CHECK(y[j] == 0.25f * (float)j - 1.0f && y[j + 16] == 0.25f * (float)(15 - j) - 1.0f);
}

TEST(block_q5_0_q5_1_known_values)
{
    /* elem i holds q = (i*11) % 32: low 4 bits in the nibble, 5th bit in bit i of qh */
    uint8_t b[24];
    float y[32];
    int q[32];
    uint32_t qh = 0;
    uint8_t qs[16];
    for (int i = 0; i < 32; i++) {
        q[i] = (i * 11) % 32;
        if (q[i] & 16) qh |= 1u << i;
    }
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
    put_f16(b, 0.125f);
    memcpy(b + 2, &qh, 4);
    memcpy(b + 6, qs, 16);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q5_0, b, y, 32) == 0);
    for (int i = 0; i < 32; i++)
        CHECK_MSG(y[i] == 0.125f * (float)(q[i] - 16), "i=%d y=%g", i, y[i]);
    put_f16(b, 0.5f);
    put_f16(b + 2, 3.0f);
    memcpy(b + 4, &qh, 4);
    memcpy(b + 8, qs, 16);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q5_1, b, y, 32) == 0);
    for (int i = 0; i < 32; i++)
        CHECK_MSG(y[i] == 0.5f * (float)q[i] + 3.0f, "i=%d y=%g", i, y[i]);
}

/* Q4_K / Q5_K: element i is in group g = i/32 (8 groups); groups 2k and 2k+1 share qs[32k .. 32k+31]
 * (low nibble = group 2k). Scales and mins are 6 bits: group j < 4 in the low 6 bits of bytes j / j+4;
 * group j >= 4 low nibble in byte j+4 (scale: low half, min: high half), top 2 bits in bits 6..7 of bytes
 * j-4 (scale) and j (min). Q5_K's 5th bit of element (g, l) is bit g of qh[l]. */
static void pack_k4_scales(const int sc[8], const int mn[8], uint8_t s[12])
{
    memset(s, 0, 12);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

TEST(block_q4_k_q5_k_known_values)
{
    int sc[8] = {1, 2, 3, 63, 17, 40, 33, 62}, mn[8] = {0, 5, 63, 7, 48, 16, 1, 31};
    uint8_t b[176];
    float y[256];
    int q[256];
    for (int i = 0; i < 256; i++)
        q[i] = (i * 7 + 3) % 32;
    /* Q4_K: 4-bit quants are the low 4 bits */
    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);
    put_f16(b + 2, 0.25f);
    pack_k4_scales(sc, mn, b + 4);
    for (int i = 0; i < 256; i++) {
        int g = i / 32, l = i % 32;
        b[16 + 32 * (g / 2) + l] |= (uint8_t)((q[i] & 15) << (g % 2 ? 4 : 0));
    }
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q4_K, b, y, 256) == 0);
    for (int i = 0; i < 256; i++) {
        int g = i / 32;
        float want = 0.5f * (float)sc[g] * (float)(q[i] & 15) - 0.25f * (float)mn[g];
        CHECK_MSG(y[i] == want, "Q4_K i=%d: %g != %g", i, y[i], want);
    }
    /* Q5_K: qh[32] after the scales, then qs[128] */
    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);
    put_f16(b + 2, 0.25f);
    pack_k4_scales(sc, mn, b + 4);
    for (int i = 0; i < 256; i++) {
        int g = i / 32, l = i % 32;
        b[48 + 32 * (g / 2) + l] |= (uint8_t)((q[i] & 15) << (g % 2 ? 4 : 0));
        if (q[i] & 16) b[16 + l] |= (uint8_t)(1 << g);
    }
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q5_K, b, y, 256) == 0);
    for (int i = 0; i < 256; i++) {
        int g = i / 32;
        float want = 0.5f * (float)sc[g] * (float)q[i] - 0.25f * (float)mn[g];
        CHECK_MSG(y[i] == want, "Q5_K i=%d: %g != %g", i, y[i], want);
    }
}

/* Q6_K: element i: half n = i/128, r = i%128, quarter k = r/32, l = r%32. Low 4 bits in
 * ql[64n + 32(k&1) + l] (low nibble for k < 2, high for k >= 2); high 2 bits in qh[32n + l] at bit 2k;
 * scale index 8n + 2k + l/16; x = d * scale * (q - 32). */
TEST(block_q6_k_known_values)
{
    uint8_t b[210];
    int8_t sc[16] = {1, -1, 2, -2, 3, -3, 127, -128, 5, 6, 7, 8, -9, -10, 11, 0};
    int q[256];
    float y[256];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 256; i++) {
        q[i] = (i * 13 + 5) % 64;
        int n = i / 128, r = i % 128, k = r / 32, l = r % 32;
        b[64 * n + 32 * (k & 1) + l] |= (uint8_t)((q[i] & 15) << (k >= 2 ? 4 : 0));
        b[128 + 32 * n + l] |= (uint8_t)((q[i] >> 4) << (2 * k));
    }
    memcpy(b + 192, sc, 16);
    put_f16(b + 208, 0.5f);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q6_K, b, y, 256) == 0);
    for (int i = 0; i < 256; i++) {
        int n = i / 128, r = i % 128, k = r / 32, l = r % 32;
        float want = 0.5f * (float)sc[8 * n + 2 * k + l / 16] * (float)(q[i] - 32);
        CHECK_MSG(y[i] == want, "Q6_K i=%d: %g != %g", i, y[i], want);
    }
}

/* Q2_K: 16 groups of 16; element i: half n = i/128, r = i%128, shift s = r/32, rest = r%32; 2-bit quant
 * at bits 2s of qs[32n + rest]; group 8n + 2s + rest/16; scales[g] = scale | min << 4;
 * x = d*scale*q - dmin*min. */
TEST(block_q2_k_known_values)
{
    uint8_t b[84];
    int q[256];
    float y[256];
    memset(b, 0, sizeof b);
    for (int g = 0; g < 16; g++)
        b[g] = (uint8_t)(((g * 5) % 16) | ((15 - g) << 4));
    for (int i = 0; i < 256; i++) {
        q[i] = (i * 3 + i / 7) % 4;
        int n = i / 128, r = i % 128, s = r / 32, rest = r % 32;
        b[16 + 32 * n + rest] |= (uint8_t)(q[i] << (2 * s));
    }
    put_f16(b + 80, 0.5f);
    put_f16(b + 82, 0.125f);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q2_K, b, y, 256) == 0);
    for (int i = 0; i < 256; i++) {
        int n = i / 128, r = i % 128, s = r / 32, rest = r % 32, g = 8 * n + 2 * s + rest / 16;
        float want = 0.5f * (float)(b[g] & 15) * (float)q[i] - 0.125f * (float)(b[g] >> 4);
        CHECK_MSG(y[i] == want, "Q2_K i=%d: %g != %g", i, y[i], want);
    }
}

/* Q3_K: like Q2_K for the low 2 bits (qs at byte 32), high bit in hmask[rest] at bit 4n + s (set means
 * no -4); 16 6-bit scales stored +32: low 4 bits of scale g in byte g%8 (low nibble for g < 8), top 2
 * bits in byte 8 + g%4 at bits 2*(g/4); d at byte 108. */
TEST(block_q3_k_known_values)
{
    uint8_t b[110];
    int q[256], sc[16];
    float y[256];
    memset(b, 0, sizeof b);
    for (int g = 0; g < 16; g++) {
        sc[g] = (g * 9 + 3) % 64 - 32; /* -32..31 */
        int u = sc[g] + 32;
        b[96 + g % 8] |= (uint8_t)((u & 15) << (g < 8 ? 0 : 4));
        b[96 + 8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
    }
    for (int i = 0; i < 256; i++) {
        q[i] = (i * 5 + i / 9) % 8 - 4; /* -4..3 */
        int n = i / 128, r = i % 128, s = r / 32, rest = r % 32;
        int u = q[i] + 4, lo = u & 3, hi = u >> 2; /* hi=1 -> value lo, hi=0 -> lo-4 */
        b[32 + 32 * n + rest] |= (uint8_t)(lo << (2 * s));
        if (hi) b[rest] |= (uint8_t)(1 << (4 * n + s));
    }
    put_f16(b + 108, 0.25f);
    CHECK(quant_dequantize_row(GGUF_DTYPE_Q3_K, b, y, 256) == 0);
    for (int i = 0; i < 256; i++) {
        int n = i / 128, r = i % 128, s = r / 32, rest = r % 32, g = 8 * n + 2 * s + rest / 16;
        float want = 0.25f * (float)sc[g] * (float)q[i];
        CHECK_MSG(y[i] == want, "Q3_K i=%d: %g != %g", i, y[i], want);
    }
}

int main(void)
{
    RUN(f16_to_f32_all_65536_match_f16c);
    RUN(f32_to_f16_rounding_matches_f16c);
    RUN(bf16_conversions);
    RUN(round_trip_plain_types);
    RUN(round_trip_q8_0);
    RUN(round_trip_q4_0);
    RUN(round_trip_q4_1);
    RUN(round_trip_kquants);
    RUN(bad_arguments);
    RUN(block_q8_0_q4_0_q4_1_known_values);
    RUN(block_q5_0_q5_1_known_values);
    RUN(block_q4_k_q5_k_known_values);
    RUN(block_q6_k_known_values);
    RUN(block_q2_k_known_values);
    RUN(block_q3_k_known_values);
    return test_summary();
}
