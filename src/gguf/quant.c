/* quant — the table of tensor types (at the end of this file) and the scalar reference conversions
 * between f32 and them.
 *
 * The table is the one list of weight types: gguf_dtype_info() answers from it, and every other list
 * (what quantize reads and writes, what a model may hold, what the GPU converts at load, the names in
 * messages) is derived from its columns. A type is added as one row of it plus its row functions here;
 * a backend that computes it adds its kernels (cpu_kernels*.c / cpu_kquant.c; cuda_dequant.cu for the gpu
 * column). Invariant of the table (quant_check_types):
 *   (1) a row has a name exactly when it is a known type, and then blocks of at least one element and byte;
 *   (2) names are unique (also ignoring case);
 *   (3) a type that quantizes also dequantizes;
 *   (4) a type the GPU converts at load is one the host dequantizes (the device is checked against it).
 * tests/test_dtype.c also checks every row's functions against its geometry (whole rows of several blocks
 * against one block at a time, bytes written, round trips).
 *
 * Invariant of the conversions: every function here is plain C with no SIMD and no table lookups beyond
 * the block layouts below, so it is the oracle fast kernels are checked against. Conversions are pure
 * functions of their input bytes (no global state). Block layouts, byte for byte (all little-endian,
 * packed, no padding):
 *
 *   Q4_0  (32 elems, 18 B): f16 d; u8 qs[16]                 x[j] = d*((qs[j]&15)-8), x[j+16] = d*((qs[j]>>4)-8)
 *   Q4_1  (32 elems, 20 B): f16 d, m; u8 qs[16]              x = d*nibble + m (same nibble order)
 *   Q5_0  (32 elems, 22 B): f16 d; u8 qh[4]; u8 qs[16]       bit j of qh (u32) is the 5th bit of elem j;
 *                                                             x = d*(q5 - 16)
 *   Q5_1  (32 elems, 24 B): f16 d, m; u8 qh[4]; u8 qs[16]    x = d*q5 + m
 *   Q8_0  (32 elems, 34 B): f16 d; i8 qs[32]                 x = d*q
 *   Q2_K (256 elems, 84 B): u8 scales[16]; u8 qs[64]; f16 d, dmin
 *         16 groups of 16; scales[g] low nibble = scale, high nibble = min; 2-bit quants
 *         x = d*sc*q - dmin*m
 *   Q3_K (256 elems, 110 B): u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
 *         16 groups of 16 with 6-bit signed scales (stored +32, packed: low 4 bits in scales[0..7],
 *         high 2 bits in scales[8..11]); 3-bit quants = 2 low bits in qs + 1 high bit in hmask, q-4 when
 *         the high bit is clear;  x = d*(sc-32)*q
 *   Q4_K (256 elems, 144 B): f16 d, dmin; u8 scales[12]; u8 qs[128]
 *         8 groups of 32, 6-bit scale and min each, packed in 12 bytes (get_scale_min_k4 below);
 *         x = d*sc*q - dmin*m
 *   Q5_K (256 elems, 176 B): f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]   as Q4_K + a 5th bit
 *   Q6_K (256 elems, 210 B): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
 *         16 groups of 16 with int8 scales; 6-bit quants = 4 low bits in ql + 2 high bits in qh; x =
 * d*sc*(q-32)
 * The codebook, lattice and ternary types (IQ4_NL, IQ4_XS, IQ3_*, IQ2_*, IQ1_*, TQ1_0, TQ2_0) and Q8_K have
 * their layouts and row functions in quant_iq.c (a decoding to integers that the CPU kernels share).
 */
#include "gguf/quant.h"
#include "gguf/quant_iq.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------------------------------ */
/* half and bfloat16 */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal: mant * 2^-24; normalize */
        int e = -14;
        while (!(mant & 0x400)) {
            mant <<= 1;
            e--;
        }
        mant &= 0x3ff;
        return bits_f32(sign | (uint32_t)(e + 127) << 23 | mant << 13);
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | mant << 13); /* inf, or NaN keeping its payload */
    return bits_f32(sign | (exp - 15 + 127) << 23 | mant << 13);
}

uint16_t quant_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    int32_t exp = (int32_t)((x >> 23) & 0xff);
    uint32_t mant = x & 0x7fffff;
    if (exp == 0xff) {
        if (mant) return (uint16_t)(sign | 0x7e00 | (mant >> 13)); /* quiet NaN, top payload bits kept */
        return (uint16_t)(sign | 0x7c00);
    }
    int32_t e = exp - 127 + 15; /* biased half exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        /* subnormal half (or zero): value = M * 2^(e-14-10) in units of 2^-24 -> M >> (14 - e) */
        if (exp == 0) return sign; /* f32 subnormals are far below the half range */
        uint32_t m = mant | 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        if (shift > 24) return sign;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: still the right encoding */
    }
    uint32_t q = (uint32_t)e << 10 | mant >> 13, rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++; /* may carry into the exponent, up to inf */
    return (uint16_t)(sign | q);
}

float quant_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t quant_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);                                          /* round to nearest even */
    return (uint16_t)(x >> 16);
}

static float ld_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_f16_to_f32(h);
}

static void st_f16(uint8_t *p, float f)
{
    uint16_t h = quant_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* ------------------------------------------------------------------------------------------------ */
/* dequantization, one block at a time; y receives the block's elements */

static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = ld_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 15) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = ld_f16(b), m = ld_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 15) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static void deq_q5(const uint8_t *b, float *y, int has_min)
{
    float d = ld_f16(b), m = has_min ? ld_f16(b + 2) : 0.0f;
    const uint8_t *p = b + (has_min ? 4 : 2);
    uint32_t qh;
    memcpy(&qh, p, 4);
    const uint8_t *qs = p + 4;
    int off = has_min ? 0 : 16;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)(lo - off) + m;
        y[j + 16] = d * (float)(hi - off) + m;
    }
}

static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = ld_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)qs[j];
}

static void deq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *q = b + 16;
    float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                uint8_t sc = scales[is++];
                float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* Q3_K's 16 6-bit scales: low nibbles in bytes 0..7 (groups 0..7 low nibble, 8..15 high nibble), high two
 * bits in bytes 8..11 (byte 8+(g%4), bits 2*(g/4)). */
static void q3_k_scales(const uint8_t *s, int8_t out[16])
{
    for (int g = 0; g < 16; g++) {
        int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
        int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        out[g] = (int8_t)((lo | hi << 4) - 32);
    }
}

static void deq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *q = b + 32;
    int8_t sc[16];
    q3_k_scales(b + 96, sc);
    float d = ld_f16(b + 108);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                float dl = d * (float)sc[is++];
                for (int l = 0; l < 16; l++) {
                    int k = l + 16 * half;
                    int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
                    *y++ = dl * (float)v;
                }
            }
            m <<= 1;
        }
        q += 32;
    }
}

/* Q4_K/Q5_K: 8 (scale, min) pairs of 6 bits in 12 bytes. Groups 0..3: low 6 bits of bytes 0..3 (scale)
 * and 4..7 (min). Groups 4..7: low nibble of bytes 8..11 (scale) / high nibble (min), plus the top two bits
 * of bytes 0..3 (scale) / 4..7 (min) as bits 4..5. */
static void get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 15) | (q[j - 4] >> 6) << 4);
        *m = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
    }
}

/* Q4_K and Q5_K: b holds d, dmin (f16) and the 12 scale bytes; q the 128 nibble bytes; qh the 32 bytes of
 * fifth bits (Q5_K) or NULL (Q4_K). */
static void deq_k_4_5(const uint8_t *b, const uint8_t *q, const uint8_t *qh, float *y)
{
    float d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *scales = b + 4;
    uint8_t u1 = 1, u2 = 2;
    for (int g = 0; g < 8; g += 2) {
        uint8_t sc, m;
        get_scale_min_k4(g, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        get_scale_min_k4(g + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            y[l] = d1 * (float)((q[l] & 15) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            y[l + 32] = d2 * (float)((q[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
        y += 64;
        q += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void deq_q4_k(const uint8_t *b, float *y)
{
    deq_k_4_5(b, b + 16, NULL, y);
}

static void deq_q5_k(const uint8_t *b, float *y)
{
    deq_k_4_5(b, b + 48, b + 16, y);
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = ld_f16(b + 208);
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* quantization of the 32-element types (reference: simple round-to-nearest, no search for the best scale) */

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void q_q8_0(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    st_f16(b, d);
    int8_t *qs = (int8_t *)(b + 2);
    for (int j = 0; j < 32; j++)
        qs[j] = d > 0.0f ? (int8_t)clampi((int)lrintf(x[j] / d), -127, 127) : 0;
}

static void q_q4_0(const float *x, uint8_t *b)
{
    float amax = 0.0f, max = 0.0f; /* max: the signed value of largest magnitude */
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    float d = max / -8.0f;
    st_f16(b, d);
    uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        int lo = d != 0.0f ? clampi((int)lrintf(x[j] / d) + 8, 0, 15) : 8;
        int hi = d != 0.0f ? clampi((int)lrintf(x[j + 16] / d) + 8, 0, 15) : 8;
        qs[j] = (uint8_t)(lo | hi << 4);
    }
}

static void q_q4_1(const float *x, uint8_t *b)
{
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        min = fminf(min, x[j]);
        max = fmaxf(max, x[j]);
    }
    float d = (max - min) / 15.0f;
    st_f16(b, d);
    st_f16(b + 2, min);
    uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        int lo = d > 0.0f ? clampi((int)lrintf((x[j] - min) / d), 0, 15) : 0;
        int hi = d > 0.0f ? clampi((int)lrintf((x[j + 16] - min) / d), 0, 15) : 0;
        qs[j] = (uint8_t)(lo | hi << 4);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* K-quant quantization: per sub-block, the scale (and min) minimising the squared error over a small
 * search of starting scales, each refined by least squares for its rounding; then the sub-block scales
 * are themselves quantized against the super-block's f16 d (and dmin) and every element is rounded again
 * with the scale it will really be decoded with. */

#define KQ_TRIES 21 /* starting scales tried per sub-block */

/* x (n <= 32 values) ~= a * u - m with u = 0 .. nmax and m >= 0 (the stored min is a non-negative offset
 * below zero). Returns a >= 0 and sets *m. */
static float kq_fit_scale_min(const float *x, int n, int nmax, float *m)
{
    float lo = x[0], hi = x[0];
    double sx = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        sx += x[i];
        sxx += (double)x[i] * x[i];
    }
    if (lo > 0.0f) lo = 0.0f;
    *m = -lo;
    if (!(hi > lo)) return 0.0f;
    float best_a = (hi - lo) / (float)nmax, best_b = lo;
    double best_err = INFINITY;
    for (int k = 0; k < KQ_TRIES; k++) {
        const float iscale = ((float)nmax + 0.1f * (float)(k - KQ_TRIES / 2)) / (hi - lo);
        int su = 0, suu = 0;
        double sux = 0;
        for (int i = 0; i < n; i++) {
            const int t = clampi((int)lrintf(iscale * (x[i] - lo)), 0, nmax);
            su += t;
            suu += t * t;
            sux += (double)t * x[i];
        }
        /* least squares x ~= a u + b, with b <= 0 */
        const double det = (double)n * suu - (double)su * su;
        if (det <= 0) continue;
        double a = (n * sux - su * sx) / det, b = (suu * sx - su * sux) / det;
        if (b > 0) {
            b = 0;
            a = sux / suu;
        }
        if (a <= 0) continue;
        /* sum (a u + b - x)^2, expanded: one pass per try */
        const double err = a * a * suu + 2 * a * b * su + n * b * b - 2 * a * sux - 2 * b * sx + sxx;
        if (err < best_err) {
            best_err = err;
            best_a = (float)a;
            best_b = (float)b;
        }
    }
    *m = -best_b;
    return best_a;
}

/* x (n <= 32 values) ~= s * q with q = qmin .. qmax (s of either sign, so the longer side of the range can
 * take the largest magnitude). Returns s. */
static float kq_fit_scale(const float *x, int n, int qmin, int qmax)
{
    float amax = 0.0f, v = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            v = x[i];
        }
    if (amax == 0.0f) return 0.0f;
    float best_s = v / (float)qmax;
    double best_gain = -INFINITY;
    for (int side = 0; side < 2; side++) {
        const float lim = side ? (float)qmax : (float)-qmin; /* v maps to +qmax or to qmin */
        for (int k = 0; k < KQ_TRIES; k++) {
            const float iscale = (side ? 1.0f : -1.0f) * (lim + 0.1f * (float)(k - KQ_TRIES / 2)) / v;
            double sxq = 0;
            int sqq = 0;
            for (int i = 0; i < n; i++) {
                const int q = clampi((int)lrintf(iscale * x[i]), qmin, qmax);
                sxq += (double)x[i] * q;
                sqq += q * q;
            }
            /* at s = sxq / sqq the squared error is sum x^2 - sxq^2 / sqq: maximise the second term */
            if (sqq <= 0 || sxq * sxq / sqq <= best_gain) continue;
            best_gain = sxq * sxq / sqq;
            best_s = (float)(sxq / sqq);
        }
    }
    return best_s;
}

/* The f16 value nearest max / levels (what the super-block stores as d or dmin), as read back. */
static float kq_super_scale(float max, int levels)
{
    return quant_f16_to_f32(quant_f32_to_f16(max / (float)levels));
}

/* Scale-and-min types: ng sub-blocks of gs elements, nmax quant levels, 6-bit (Q4_K/Q5_K) or 4-bit (Q2_K)
 * sub-block scales and mins. Fills sc[ng], mn[ng] (0 .. smax), *d, *dmin and the final quants u[256]. */
static void kq_quantize_scale_min(const float *x, int ng, int gs, int nmax, int smax, uint8_t *sc, uint8_t *mn,
                                  float *d, float *dmin, uint8_t *u)
{
    float a[16], m[16], amax = 0.0f, mmax = 0.0f;
    for (int g = 0; g < ng; g++) {
        a[g] = kq_fit_scale_min(x + g * gs, gs, nmax, &m[g]);
        amax = fmaxf(amax, a[g]);
        mmax = fmaxf(mmax, m[g]);
    }
    *d = kq_super_scale(amax, smax);
    *dmin = kq_super_scale(mmax, smax);
    for (int g = 0; g < ng; g++) {
        sc[g] = (uint8_t)(*d > 0.0f ? clampi((int)lrintf(a[g] / *d), 0, smax) : 0);
        mn[g] = (uint8_t)(*dmin > 0.0f ? clampi((int)lrintf(m[g] / *dmin), 0, smax) : 0);
        const float step = *d * (float)sc[g], off = *dmin * (float)mn[g];
        for (int i = g * gs; i < g * gs + gs; i++)
            u[i] = (uint8_t)(step > 0.0f ? clampi((int)lrintf((x[i] + off) / step), 0, nmax) : 0);
    }
}

/* Offset types (Q3_K, Q6_K): 16 sub-blocks of 16, quants q = qmin .. qmax stored as u = q - qmin, signed
 * sub-block scales |s| <= smax. Fills s[16], *d and u[256]. */
static void kq_quantize_signed(const float *x, int qmin, int qmax, int smax, int *s, float *d, uint8_t *u)
{
    float sc[16], amax = 0.0f;
    for (int g = 0; g < 16; g++) {
        sc[g] = kq_fit_scale(x + 16 * g, 16, qmin, qmax);
        amax = fmaxf(amax, fabsf(sc[g]));
    }
    *d = kq_super_scale(amax, smax);
    for (int g = 0; g < 16; g++) {
        s[g] = *d > 0.0f ? clampi((int)lrintf(sc[g] / *d), -smax, smax) : 0;
        const float step = *d * (float)s[g];
        for (int i = 16 * g; i < 16 * g + 16; i++)
            u[i] = (uint8_t)((step != 0.0f ? clampi((int)lrintf(x[i] / step), qmin, qmax) : 0) - qmin);
    }
}

static void q_q2_k(const float *x, uint8_t *b)
{
    uint8_t sc[16], mn[16], u[QK_K];
    float d, dmin;
    kq_quantize_scale_min(x, 16, 16, 3, 15, sc, mn, &d, &dmin, u);
    memset(b, 0, 84);
    for (int j = 0; j < 16; j++) b[j] = (uint8_t)(sc[j] | mn[j] << 4);
    for (int e = 0; e < QK_K; e++) /* element (half, shift quarter, l) at bits 2*quarter of qs[32 half + l] */
        b[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(u[e] << (2 * (e % 128 / 32)));
    st_f16(b + 80, d);
    st_f16(b + 82, dmin);
}

static void q_q3_k(const float *x, uint8_t *b)
{
    int s[16];
    uint8_t u[QK_K];
    float d;
    kq_quantize_signed(x, -4, 3, 31, s, &d, u);
    memset(b, 0, 110);
    for (int e = 0; e < QK_K; e++) {
        const int half = e / 128, quarter = e % 128 / 32, l = e % 32;
        b[32 + 32 * half + l] |= (uint8_t)((u[e] & 3) << (2 * quarter));
        b[l] |= (uint8_t)((u[e] >> 2) << (4 * half + quarter));
    }
    for (int j = 0; j < 16; j++) { /* stored s + 32: low 4 bits at nibble j/8 of byte j%8, high 2 at byte 8 + j%4 */
        const int v = s[j] + 32;
        b[96 + j % 8] |= (uint8_t)((v & 15) << (4 * (j / 8)));
        b[96 + 8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
    }
    st_f16(b + 108, d);
}

/* Q4_K/Q5_K: scales and mins into the 12 bytes read by get_scale_min_k4. */
static void kq_pack_k4_scales(const uint8_t *sc, const uint8_t *mn, uint8_t *q)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        q[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

static void q_q4_5_k(const float *x, uint8_t *b, int five)
{
    uint8_t sc[8], mn[8], u[QK_K];
    float d, dmin;
    kq_quantize_scale_min(x, 8, 32, five ? 31 : 15, 63, sc, mn, &d, &dmin, u);
    memset(b, 0, five ? 176 : 144);
    st_f16(b, d);
    st_f16(b + 2, dmin);
    kq_pack_k4_scales(sc, mn, b + 4);
    uint8_t *qs = b + (five ? 48 : 16);
    for (int e = 0; e < QK_K; e++) { /* group g = e/32: nibble g%2 of qs[32 (g/2) + l]; 5th bit: bit g of qh[l] */
        qs[32 * (e / 64) + e % 32] |= (uint8_t)((u[e] & 15) << (4 * (e / 32 % 2)));
        if (five) b[16 + e % 32] |= (uint8_t)((u[e] >> 4) << (e / 32));
    }
}

static void q_q6_k(const float *x, uint8_t *b)
{
    int s[16];
    uint8_t u[QK_K];
    float d;
    kq_quantize_signed(x, -32, 31, 127, s, &d, u);
    memset(b, 0, 210);
    for (int e = 0; e < QK_K; e++) {
        const int half = e / 128, quarter = e % 128 / 32, l = e % 32;
        b[64 * half + 32 * (quarter % 2) + l] |= (uint8_t)((u[e] & 15) << (4 * (quarter / 2)));
        b[128 + 32 * half + l] |= (uint8_t)((u[e] >> 4) << (2 * quarter));
    }
    for (int j = 0; j < 16; j++) b[192 + j] = (uint8_t)(int8_t)s[j];
    st_f16(b + 208, d);
}

/* Q5_0 (x = d * (q - 16), d from the value of largest magnitude, which maps to -16) and Q5_1 (x = d * q + m,
 * min to max over 0..31): round to nearest, as Q4_0 / Q4_1. */
static void q_q5(const float *x, uint8_t *b, int has_min)
{
    float d, m = 0.0f;
    if (has_min) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; j++) {
            lo = fminf(lo, x[j]);
            hi = fmaxf(hi, x[j]);
        }
        d = (hi - lo) / 31.0f;
        m = lo;
    } else {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        d = max / -16.0f;
    }
    st_f16(b, d);
    if (has_min) st_f16(b + 2, m);
    uint8_t *p = b + (has_min ? 4 : 2);
    uint32_t qh = 0;
    for (int j = 0; j < 32; j++) {
        int q = d != 0.0f ? clampi((int)lrintf((x[j] - m) / d) + (has_min ? 0 : 16), 0, 31) : (has_min ? 0 : 16);
        if (j < 16)
            p[4 + j] = (uint8_t)(q & 15);
        else
            p[4 + j - 16] |= (uint8_t)((q & 15) << 4);
        qh |= (uint32_t)(q >> 4) << j;
    }
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(qh >> (8 * k));
}

/* ------------------------------------------------------------------------------------------------ */
/* rows: what the table's dequantize_row / quantize_row columns point to. n is whole blocks (checked by
 * quant_dequantize_row / quant_quantize_row); a block type's row is its block function once per block, the
 * block's geometry read from the type's table row, so the loop calls the block function directly. */

static const struct gguf_dtype_info dtype_table[GGUF_DTYPE_COUNT_MAX];

typedef void (*quant_deq_block_fn)(const uint8_t *b, float *y);
typedef void (*quant_q_block_fn)(const float *x, uint8_t *b);

static inline void deq_blocks(enum gguf_dtype t, quant_deq_block_fn block, const void *src, float *dst, int64_t n)
{
    const struct gguf_dtype_info *ti = &dtype_table[t];
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / ti->block_size; i++) block(b + i * ti->block_bytes, dst + i * ti->block_size);
}

static inline void q_blocks(enum gguf_dtype t, quant_q_block_fn block, const float *src, void *dst, int64_t n)
{
    const struct gguf_dtype_info *ti = &dtype_table[t];
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / ti->block_size; i++) block(src + i * ti->block_size, b + i * ti->block_bytes);
}

static void deq_q5_0(const uint8_t *b, float *y)
{
    deq_q5(b, y, 0);
}

static void deq_q5_1(const uint8_t *b, float *y)
{
    deq_q5(b, y, 1);
}

static void q_q5_0(const float *x, uint8_t *b)
{
    q_q5(x, b, 0);
}

static void q_q5_1(const float *x, uint8_t *b)
{
    q_q5(x, b, 1);
}

static void q_q4_k(const float *x, uint8_t *b)
{
    q_q4_5_k(x, b, 0);
}

static void q_q5_k(const float *x, uint8_t *b)
{
    q_q4_5_k(x, b, 1);
}

static void deq_row_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * 4);
}

static void deq_row_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i++) dst[i] = ld_f16(b + 2 * i);
}

static void deq_row_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        dst[i] = quant_bf16_to_f32(h);
    }
}

static void q_row_f32(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * 4);
}

static void q_row_f16(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n; i++) st_f16(b + 2 * i, src[i]);
}

static void q_row_bf16(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = quant_f32_to_bf16(src[i]);
        memcpy(b + 2 * i, &h, 2);
    }
}

/* clang-format off */
static void deq_row_q4_0(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q4_0, deq_q4_0, s, d, n); }
static void deq_row_q4_1(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q4_1, deq_q4_1, s, d, n); }
static void deq_row_q5_0(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q5_0, deq_q5_0, s, d, n); }
static void deq_row_q5_1(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q5_1, deq_q5_1, s, d, n); }
static void deq_row_q8_0(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q8_0, deq_q8_0, s, d, n); }
static void deq_row_q2_k(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q2_K, deq_q2_k, s, d, n); }
static void deq_row_q3_k(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q3_K, deq_q3_k, s, d, n); }
static void deq_row_q4_k(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q4_K, deq_q4_k, s, d, n); }
static void deq_row_q5_k(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q5_K, deq_q5_k, s, d, n); }
static void deq_row_q6_k(const void *s, float *d, int64_t n) { deq_blocks(GGUF_DTYPE_Q6_K, deq_q6_k, s, d, n); }

static void q_row_q4_0(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q4_0, q_q4_0, s, d, n); }
static void q_row_q4_1(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q4_1, q_q4_1, s, d, n); }
static void q_row_q5_0(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q5_0, q_q5_0, s, d, n); }
static void q_row_q5_1(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q5_1, q_q5_1, s, d, n); }
static void q_row_q8_0(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q8_0, q_q8_0, s, d, n); }
static void q_row_q2_k(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q2_K, q_q2_k, s, d, n); }
static void q_row_q3_k(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q3_K, q_q3_k, s, d, n); }
static void q_row_q4_k(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q4_K, q_q4_k, s, d, n); }
static void q_row_q5_k(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q5_K, q_q5_k, s, d, n); }
static void q_row_q6_k(const float *s, void *d, int64_t n) { q_blocks(GGUF_DTYPE_Q6_K, q_q6_k, s, d, n); }
/* clang-format on */

/* ------------------------------------------------------------------------------------------------ */
/* the table of types (see gguf.h for its columns and the top of this file for its invariant) */

/* clang-format off */
#define DEQ(name) deq_row_##name
#define Q(name) q_row_##name
/* the codebook, lattice and ternary types and Q8_K: quant_iq.c */
#define deq_row_q8_k quant_iq_dequantize_row_q8_k
#define deq_row_iq4_nl quant_iq_dequantize_row_iq4_nl
#define deq_row_iq4_xs quant_iq_dequantize_row_iq4_xs
#define deq_row_iq3_xxs quant_iq_dequantize_row_iq3_xxs
#define deq_row_iq3_s quant_iq_dequantize_row_iq3_s
#define deq_row_iq2_xxs quant_iq_dequantize_row_iq2_xxs
#define deq_row_iq2_xs quant_iq_dequantize_row_iq2_xs
#define deq_row_iq2_s quant_iq_dequantize_row_iq2_s
#define deq_row_iq1_s quant_iq_dequantize_row_iq1_s
#define deq_row_iq1_m quant_iq_dequantize_row_iq1_m
#define deq_row_tq1_0 quant_iq_dequantize_row_tq1_0
#define deq_row_tq2_0 quant_iq_dequantize_row_tq2_0
#define q_row_q8_k quant_iq_quantize_row_q8_k
#define q_row_iq4_nl quant_iq_quantize_row_iq4_nl
#define q_row_iq4_xs quant_iq_quantize_row_iq4_xs

static const struct gguf_dtype_info dtype_table[GGUF_DTYPE_COUNT_MAX] = {
    /*                      name       block elems, bytes  dequantize_row  quantize_row  gpu */
    [GGUF_DTYPE_F32] =     {"F32",     1, 4,               DEQ(f32),       Q(f32),       1},
    [GGUF_DTYPE_F16] =     {"F16",     1, 2,               DEQ(f16),       Q(f16),       1},
    [GGUF_DTYPE_Q4_0] =    {"Q4_0",    32, 18,             DEQ(q4_0),      Q(q4_0),      1},
    [GGUF_DTYPE_Q4_1] =    {"Q4_1",    32, 20,             DEQ(q4_1),      Q(q4_1),      1},
    [GGUF_DTYPE_Q5_0] =    {"Q5_0",    32, 22,             DEQ(q5_0),      Q(q5_0),      1},
    [GGUF_DTYPE_Q5_1] =    {"Q5_1",    32, 24,             DEQ(q5_1),      Q(q5_1),      1},
    [GGUF_DTYPE_Q8_0] =    {"Q8_0",    32, 34,             DEQ(q8_0),      Q(q8_0),      1},
    [GGUF_DTYPE_Q8_1] =    {"Q8_1",    32, 36,             NULL,           NULL,         0},
    [GGUF_DTYPE_Q2_K] =    {"Q2_K",    256, 84,            DEQ(q2_k),      Q(q2_k),      1},
    [GGUF_DTYPE_Q3_K] =    {"Q3_K",    256, 110,           DEQ(q3_k),      Q(q3_k),      1},
    [GGUF_DTYPE_Q4_K] =    {"Q4_K",    256, 144,           DEQ(q4_k),      Q(q4_k),      1},
    [GGUF_DTYPE_Q5_K] =    {"Q5_K",    256, 176,           DEQ(q5_k),      Q(q5_k),      1},
    [GGUF_DTYPE_Q6_K] =    {"Q6_K",    256, 210,           DEQ(q6_k),      Q(q6_k),      1},
    [GGUF_DTYPE_Q8_K] =    {"Q8_K",    256, 292,           DEQ(q8_k),      Q(q8_k),      1},
    [GGUF_DTYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66,            DEQ(iq2_xxs),   NULL,         1},
    [GGUF_DTYPE_IQ2_XS] =  {"IQ2_XS",  256, 74,            DEQ(iq2_xs),    NULL,         1},
    [GGUF_DTYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98,            DEQ(iq3_xxs),   NULL,         1},
    [GGUF_DTYPE_IQ1_S] =   {"IQ1_S",   256, 50,            DEQ(iq1_s),     NULL,         1},
    [GGUF_DTYPE_IQ4_NL] =  {"IQ4_NL",  32, 18,             DEQ(iq4_nl),    Q(iq4_nl),    1},
    [GGUF_DTYPE_IQ3_S] =   {"IQ3_S",   256, 110,           DEQ(iq3_s),     NULL,         1},
    [GGUF_DTYPE_IQ2_S] =   {"IQ2_S",   256, 82,            DEQ(iq2_s),     NULL,         1},
    [GGUF_DTYPE_IQ4_XS] =  {"IQ4_XS",  256, 136,           DEQ(iq4_xs),    Q(iq4_xs),    1},
    [GGUF_DTYPE_I8] =      {"I8",      1, 1,               NULL,           NULL,         0},
    [GGUF_DTYPE_I16] =     {"I16",     1, 2,               NULL,           NULL,         0},
    [GGUF_DTYPE_I32] =     {"I32",     1, 4,               NULL,           NULL,         0},
    [GGUF_DTYPE_I64] =     {"I64",     1, 8,               NULL,           NULL,         0},
    [GGUF_DTYPE_F64] =     {"F64",     1, 8,               NULL,           NULL,         0},
    [GGUF_DTYPE_IQ1_M] =   {"IQ1_M",   256, 56,            DEQ(iq1_m),     NULL,         1},
    [GGUF_DTYPE_BF16] =    {"BF16",    1, 2,               DEQ(bf16),      Q(bf16),      0},
    [GGUF_DTYPE_TQ1_0] =   {"TQ1_0",   256, 54,            DEQ(tq1_0),     NULL,         1},
    [GGUF_DTYPE_TQ2_0] =   {"TQ2_0",   256, 66,            DEQ(tq2_0),     NULL,         1},
};

/* clang-format on */

#undef DEQ
#undef Q

const struct gguf_dtype_info *gguf_dtype_info(uint32_t dtype)
{
    if (dtype >= GGUF_DTYPE_COUNT_MAX || !dtype_table[dtype].name) return NULL;
    return &dtype_table[dtype];
}

/* Here, beside the table, so that the lookup inlines: the matmuls ask for row bytes per tile. */
uint64_t gguf_row_bytes(uint32_t dtype, uint64_t n)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info(dtype);
    if (!ti || n % ti->block_size) return 0;
    uint64_t r;
    if (__builtin_mul_overflow(n / ti->block_size, (uint64_t)ti->block_bytes, &r)) return 0;
    return r;
}

int quant_can_dequantize(enum gguf_dtype t)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    return ti && ti->dequantize_row;
}

int quant_can_quantize(enum gguf_dtype t)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    return ti && ti->quantize_row;
}

uint64_t quant_dequantize_types(void)
{
    uint64_t types = 0;
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++)
        if (quant_can_dequantize((enum gguf_dtype)t)) types |= 1ull << t;
    return types;
}

int quant_dequantize_row(enum gguf_dtype t, const void *src, float *dst, int64_t n)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    if (!ti || !ti->dequantize_row || n < 0 || n % ti->block_size) return -1;
    ti->dequantize_row(src, dst, n);
    return 0;
}

int quant_quantize_row(enum gguf_dtype t, const float *src, void *dst, int64_t n)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    if (!ti || !ti->quantize_row || n < 0 || n % ti->block_size) return -1;
    ti->quantize_row(src, dst, n);
    return 0;
}

int quant_check_types(struct err *e)
{
    for (uint32_t t = 0; t < GGUF_DTYPE_COUNT_MAX; t++) {
        const struct gguf_dtype_info *ti = &dtype_table[t];
        if (!ti->name) {
            if (ti->block_size || ti->block_bytes || ti->dequantize_row || ti->quantize_row || ti->gpu_dequant)
                return err_set(e, "quant_check_types: (1) type id %u has no name but other columns", t);
            continue;
        }
        if (ti->block_size < 1 || ti->block_bytes < 1)
            return err_set(e, "quant_check_types: (1) %s has blocks of %u elements, %u bytes", ti->name,
                           ti->block_size, ti->block_bytes);
        for (uint32_t u = 0; u < t; u++)
            if (dtype_table[u].name && !strcasecmp(dtype_table[u].name, ti->name))
                return err_set(e, "quant_check_types: (2) ids %u and %u are both named %s", u, t, ti->name);
        if (ti->quantize_row && !ti->dequantize_row)
            return err_set(e, "quant_check_types: (3) %s quantizes but does not dequantize", ti->name);
        if (ti->gpu_dequant && !ti->dequantize_row)
            return err_set(e, "quant_check_types: (4) %s is converted on the GPU but not on the host", ti->name);
    }
    return 0;
}
