/* quant_iq — block layouts of the codebook, lattice and ternary types and Q8_K, decoded to the integers of
 * quant_iq.h; the row functions of the table of types (quant.c) for them.
 *
 * Layouts, byte for byte (little-endian, packed; "d" an f16 unless stated; element e of a 256-element
 * block; "group" = 8 consecutive elements; grids: quant_iq_grids.h, one entry per grid point). The
 * integer form w_e = d' * s * g is given for each:
 *
 *   IQ4_NL  (32, 18 B):  d; qs[16]. Element j < 16: low nibble of qs[j], j + 16: its high nibble; the
 *           nibble indexes the codebook QUANT_IQ4_VALUES.  w = d * kv[nibble]
 *   IQ4_XS  (256, 136 B): d; u16 scales_h; scales_l[4]; qs[128]. Sub-block b = e / 32: ls = (nibble b % 2 of
 *           scales_l[b / 2]) | (bits 2b, 2b + 1 of scales_h) << 4; its nibbles as IQ4_NL's in qs[16b ..].
 *           w = d * (ls - 32) * kv[nibble]
 *   IQ2_XXS (256, 66 B): d; then per sub-block b (32 elements) 8 bytes: u8 grid index of each of its 4
 *           groups (256-point grid), then a u32 with 4 sign indices of 7 bits (group l at bits 7l) and
 *           the 4-bit ls at bits 28-31. A sign index i stands for the 8 signs of i | parity(i) << 7 (bit k
 *           set: element k negative; always an even number of them).  w = d/8 * (2 ls + 1) * (+-grid)
 *   IQ2_XS  (256, 74 B): d; u16 qs[32] (group l: grid index = low 9 bits, 512 points; sign index = the
 *           top 7); scales[8]: ls of elements 16j .. 16j + 15 = nibble j % 2 of scales[j / 2].  as IQ2_XXS
 *   IQ2_S   (256, 82 B): d; qs[32]; signs[32]; qh[8]; scales[8]. Group l: grid index = qs[l] | (bits
 *           2 (l % 4) .. of qh[l / 4]) << 8 (1024 points), its signs the 8 bits of signs[l]; ls as IQ2_XS.
 *   IQ3_XXS (256, 98 B): d; qs[64] (a grid index per 4 elements, 256 points of 4 values); u32[8], one per
 *           sub-block: 4 sign indices as IQ2_XXS's and ls at bits 28-31.  w = d/4 * (2 ls + 1) * (+-grid)
 *   IQ3_S   (256, 110 B): d; qs[64]; qh[8]; signs[32]; scales[4]. Index i = e / 4: qs[i] | (bit i % 8 of
 *           qh[i / 8]) << 8 (512 points of 4); sign: bit e % 8 of signs[e / 8]; ls of sub-block b: nibble
 *           b % 2 of scales[b / 2].  w = d * (2 ls + 1) * (+-grid)
 *   IQ1_S   (256, 50 B): d; qs[32]; u16 qh[8]. Sub-block b, its group k = 0..3 (l = 4b + k): grid index =
 *           qs[l] | (bits 3k .. 3k + 2 of qh[b]) << 8 (2048 points of 8 values in {-1, 0, 1}); ls = bits
 *           12-14, bit 15 = the sign of the delta 1/8.  w = d/8 * (2 ls + 1) * (8 grid +- 1)
 *   IQ1_M   (256, 56 B): qs[32]; qh[16]; u16 sc[4]. d = the f16 of the top nibbles of sc[0..3] (sc[0]'s the
 *           lowest). Group l: nibble l % 2 of qh[l / 2] = 3 high index bits | the delta's sign at bit 3;
 *           grid index = qs[l] | those << 8; ls of elements 16j .. = bits 3 (j % 4) .. of sc[j / 4].
 *           w = d/8 * (2 ls + 1) * (8 grid +- 1)
 *   TQ1_0   (256, 54 B): qs[48]; qh[4]; d. Five trits a byte (base-3 digits scaled into 0..255: digit n of
 *           byte v is ((uint8)(v * 3^n) * 3) >> 8): elements 32n + m (n < 5) from qs[m], 160 + 16n + m from
 *           qs[32 + m], 240 + 4n + m (n < 4) from qh[m].  w = d * (trit - 1)
 *   TQ2_0   (256, 66 B): qs[64]; d. Element 128h + 32k + m: bits 2k, 2k + 1 of qs[32h + m].  w = d * (q - 1)
 *   Q8_K    (256, 292 B): f32 d; int8 qs[256]; int16 bsums[16] (sums of 16).  w = d * q
 *
 * Invariant: quant_iq_decode is plain C, a pure function of the block's bytes; each row function is
 * decode, then d * (float)(s * g) per element (exact but for Q8_K, quant_iq.h).
 */
#include "gguf/quant_iq.h"

#include <math.h>
#include <string.h>

#include "gguf/quant.h"
#include "gguf/quant_iq_grids.h"

static const int8_t iq4_values[16] = QUANT_IQ4_VALUES;
static const uint16_t iq2xxs_grid[QUANT_IQ2XXS_GRID_N] = QUANT_IQ2XXS_GRID;
static const uint16_t iq2xs_grid[QUANT_IQ2XS_GRID_N] = QUANT_IQ2XS_GRID;
static const uint16_t iq2s_grid[QUANT_IQ2S_GRID_N] = QUANT_IQ2S_GRID;
static const uint16_t iq3xxs_grid[QUANT_IQ3XXS_GRID_N] = QUANT_IQ3XXS_GRID;
static const uint16_t iq3s_grid[QUANT_IQ3S_GRID_N] = QUANT_IQ3S_GRID;
static const uint16_t iq1s_grid[QUANT_IQ1S_GRID_N] = QUANT_IQ1S_GRID;
static const int8_t iq2_values[3] = QUANT_IQ2_VALUES;
static const int8_t iq3xxs_values[8] = QUANT_IQ3XXS_VALUES;
static const int8_t iq3s_values[8] = QUANT_IQ3S_VALUES;
static const int8_t iq1_values[3] = QUANT_IQ1_VALUES;

int quant_iq_type(enum gguf_dtype t)
{
    switch (t) {
    case GGUF_DTYPE_IQ4_NL:
    case GGUF_DTYPE_IQ4_XS:
    case GGUF_DTYPE_IQ3_XXS:
    case GGUF_DTYPE_IQ3_S:
    case GGUF_DTYPE_IQ2_XXS:
    case GGUF_DTYPE_IQ2_XS:
    case GGUF_DTYPE_IQ2_S:
    case GGUF_DTYPE_IQ1_S:
    case GGUF_DTYPE_IQ1_M:
    case GGUF_DTYPE_TQ1_0:
    case GGUF_DTYPE_TQ2_0:
    case GGUF_DTYPE_Q8_K: return 1;
    default: return 0;
    }
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float f16_at(const uint8_t *p)
{
    return quant_f16_to_f32(rd16(p));
}

/* The 8 signs of a 7-bit sign index: bit 7 makes the count of negatives even. */
static uint8_t iq_signs7(uint32_t i)
{
    i &= 127;
    return (uint8_t)(i | (uint32_t)(__builtin_popcount(i) & 1) << 7);
}

/* Scales of 32-element sub-blocks into the 16-element form. */
static void iq_scale32(struct quant_iq_ints *k, int b, int s)
{
    k->s[2 * b] = k->s[2 * b + 1] = (int16_t)s;
}

/* 8 grid values (2-bit codes of `word`, through vals) with signs (bit k: element k negative) at g. */
static void iq_group8(int8_t *g, uint16_t word, const int8_t *vals, uint8_t signs)
{
    for (int k = 0; k < 8; k++) {
        const int v = vals[(word >> (2 * k)) & 3];
        g[k] = (int8_t)(signs >> k & 1 ? -v : v);
    }
}

/* 4 grid values (3-bit codes) with the signs' bits 0..3 at g. */
static void iq_group4(int8_t *g, uint16_t word, const int8_t *vals, unsigned signs)
{
    for (int k = 0; k < 4; k++) {
        const int v = vals[(word >> (3 * k)) & 7];
        g[k] = (int8_t)(signs >> k & 1 ? -v : v);
    }
}

static void iq_nibbles(int8_t *g, const uint8_t *qs)
{
    for (int j = 0; j < 16; j++) {
        g[j] = iq4_values[qs[j] & 15];
        g[j + 16] = iq4_values[qs[j] >> 4];
    }
}

static void dec_iq4_xs(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b);
    const uint16_t sh = rd16(b + 2);
    for (int sb = 0; sb < 8; sb++) {
        const int ls = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((sh >> (2 * sb)) & 3) << 4;
        iq_scale32(k, sb, ls - 32);
        iq_nibbles(k->g + 32 * sb, b + 8 + 16 * sb);
    }
}

static void dec_iq2_xxs(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b) * 0.125f;
    for (int sb = 0; sb < 8; sb++) {
        const uint8_t *p = b + 2 + 8 * sb;
        const uint32_t aux = rd32(p + 4);
        iq_scale32(k, sb, 2 * (int)(aux >> 28) + 1);
        for (int l = 0; l < 4; l++)
            iq_group8(k->g + 32 * sb + 8 * l, iq2xxs_grid[p[l]], iq2_values, iq_signs7(aux >> (7 * l)));
    }
}

static void dec_iq2_xs(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b) * 0.125f;
    for (int l = 0; l < 32; l++) {
        const uint16_t q = rd16(b + 2 + 2 * l);
        iq_group8(k->g + 8 * l, iq2xs_grid[q & 511], iq2_values, iq_signs7(q >> 9));
    }
    for (int j = 0; j < 16; j++) k->s[j] = (int16_t)(2 * ((b[66 + j / 2] >> (4 * (j % 2))) & 15) + 1);
}

static void dec_iq2_s(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b) * 0.125f;
    for (int l = 0; l < 32; l++) {
        const int idx = b[2 + l] | ((b[66 + l / 4] >> (2 * (l % 4))) & 3) << 8;
        iq_group8(k->g + 8 * l, iq2s_grid[idx], iq2_values, b[34 + l]);
    }
    for (int j = 0; j < 16; j++) k->s[j] = (int16_t)(2 * ((b[74 + j / 2] >> (4 * (j % 2))) & 15) + 1);
}

static void dec_iq3_xxs(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b) * 0.25f;
    for (int sb = 0; sb < 8; sb++) {
        const uint32_t aux = rd32(b + 66 + 4 * sb);
        iq_scale32(k, sb, 2 * (int)(aux >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            const uint8_t sg = iq_signs7(aux >> (7 * l));
            const int i = 8 * sb + 2 * l; /* the group's two grid indices */
            iq_group4(k->g + 32 * sb + 8 * l, iq3xxs_grid[b[2 + i]], iq3xxs_values, sg);
            iq_group4(k->g + 32 * sb + 8 * l + 4, iq3xxs_grid[b[3 + i]], iq3xxs_values, sg >> 4);
        }
    }
}

static void dec_iq3_s(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b);
    for (int i = 0; i < 64; i++) {
        const int idx = b[2 + i] | ((b[66 + i / 8] >> (i % 8)) & 1) << 8;
        iq_group4(k->g + 4 * i, iq3s_grid[idx], iq3s_values, (unsigned)b[74 + i / 2] >> (4 * (i % 2)));
    }
    for (int sb = 0; sb < 8; sb++) iq_scale32(k, sb, 2 * ((b[106 + sb / 2] >> (4 * (sb % 2))) & 15) + 1);
}

/* 8 values of IQ1's grid point `idx` as 8 v + delta (delta = +1, or -1 when neg). */
static void iq1_group(int8_t *g, int idx, int neg)
{
    const uint16_t w = iq1s_grid[idx];
    for (int k = 0; k < 8; k++) g[k] = (int8_t)(8 * iq1_values[(w >> (2 * k)) & 3] + (neg ? -1 : 1));
}

static void dec_iq1_s(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b) * 0.125f;
    for (int sb = 0; sb < 8; sb++) {
        const uint16_t qh = rd16(b + 34 + 2 * sb);
        iq_scale32(k, sb, 2 * ((qh >> 12) & 7) + 1);
        for (int l = 0; l < 4; l++)
            iq1_group(k->g + 32 * sb + 8 * l, b[2 + 4 * sb + l] | ((qh >> (3 * l)) & 7) << 8, qh >> 15);
    }
}

static void dec_iq1_m(const uint8_t *b, struct quant_iq_ints *k)
{
    uint16_t sc[4];
    for (int i = 0; i < 4; i++) sc[i] = rd16(b + 48 + 2 * i);
    const uint16_t d16 = (uint16_t)(sc[0] >> 12 | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000));
    k->d = quant_f16_to_f32(d16) * 0.125f;
    for (int l = 0; l < 32; l++) {
        const int h = (b[32 + l / 2] >> (4 * (l % 2))) & 15;
        iq1_group(k->g + 8 * l, b[l] | (h & 7) << 8, h >> 3);
    }
    for (int j = 0; j < 16; j++) k->s[j] = (int16_t)(2 * ((sc[j / 4] >> (3 * (j % 4))) & 7) + 1);
}

static int tq1_trit(uint8_t v, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint8_t)(v * pow3[n]) * 3) >> 8;
}

static void dec_tq1_0(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b + 52);
    for (int e = 0; e < 256; e++) {
        int t;
        if (e < 160)
            t = tq1_trit(b[e % 32], e / 32);
        else if (e < 240)
            t = tq1_trit(b[32 + (e - 160) % 16], (e - 160) / 16);
        else
            t = tq1_trit(b[48 + (e - 240) % 4], (e - 240) / 4);
        k->g[e] = (int8_t)(t - 1);
    }
    for (int j = 0; j < 16; j++) k->s[j] = 1;
}

static void dec_tq2_0(const uint8_t *b, struct quant_iq_ints *k)
{
    k->d = f16_at(b + 64);
    for (int e = 0; e < 256; e++) k->g[e] = (int8_t)(((b[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) - 1);
    for (int j = 0; j < 16; j++) k->s[j] = 1;
}

static void dec_q8_k(const uint8_t *b, struct quant_iq_ints *k)
{
    memcpy(&k->d, b, 4);
    memcpy(k->g, b + 4, 256);
    for (int j = 0; j < 16; j++) k->s[j] = 1;
}

void quant_iq_decode(enum gguf_dtype t, const uint8_t *b, struct quant_iq_ints *k)
{
    switch (t) {
    case GGUF_DTYPE_IQ4_NL:
        k->d = f16_at(b);
        iq_nibbles(k->g, b + 2);
        k->s[0] = k->s[1] = 1;
        break;
    case GGUF_DTYPE_IQ4_XS: dec_iq4_xs(b, k); break;
    case GGUF_DTYPE_IQ2_XXS: dec_iq2_xxs(b, k); break;
    case GGUF_DTYPE_IQ2_XS: dec_iq2_xs(b, k); break;
    case GGUF_DTYPE_IQ2_S: dec_iq2_s(b, k); break;
    case GGUF_DTYPE_IQ3_XXS: dec_iq3_xxs(b, k); break;
    case GGUF_DTYPE_IQ3_S: dec_iq3_s(b, k); break;
    case GGUF_DTYPE_IQ1_S: dec_iq1_s(b, k); break;
    case GGUF_DTYPE_IQ1_M: dec_iq1_m(b, k); break;
    case GGUF_DTYPE_TQ1_0: dec_tq1_0(b, k); break;
    case GGUF_DTYPE_TQ2_0: dec_tq2_0(b, k); break;
    case GGUF_DTYPE_Q8_K: dec_q8_k(b, k); break;
    default: memset(k, 0, sizeof *k); break; /* not reached: callers ask quant_iq_type */
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* rows */

static void iq_dequantize(enum gguf_dtype t, const void *src, float *dst, int64_t n)
{
    const struct gguf_dtype_info *ti = gguf_dtype_info((uint32_t)t);
    const uint8_t *b = src;
    struct quant_iq_ints k;
    for (int64_t i = 0; i < n / ti->block_size; i++) {
        quant_iq_decode(t, b + i * ti->block_bytes, &k);
        float *y = dst + i * ti->block_size;
        for (uint32_t e = 0; e < ti->block_size; e++) y[e] = k.d * (float)(k.s[e / 16] * k.g[e]);
    }
}

/* clang-format off */
void quant_iq_dequantize_row_iq4_nl(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ4_NL, s, d, n); }
void quant_iq_dequantize_row_iq4_xs(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ4_XS, s, d, n); }
void quant_iq_dequantize_row_iq3_xxs(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ3_XXS, s, d, n); }
void quant_iq_dequantize_row_iq3_s(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ3_S, s, d, n); }
void quant_iq_dequantize_row_iq2_xxs(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ2_XXS, s, d, n); }
void quant_iq_dequantize_row_iq2_xs(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ2_XS, s, d, n); }
void quant_iq_dequantize_row_iq2_s(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ2_S, s, d, n); }
void quant_iq_dequantize_row_iq1_s(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ1_S, s, d, n); }
void quant_iq_dequantize_row_iq1_m(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_IQ1_M, s, d, n); }
void quant_iq_dequantize_row_tq1_0(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_TQ1_0, s, d, n); }
void quant_iq_dequantize_row_tq2_0(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_TQ2_0, s, d, n); }
void quant_iq_dequantize_row_q8_k(const void *s, float *d, int64_t n) { iq_dequantize(GGUF_DTYPE_Q8_K, s, d, n); }
/* clang-format on */

/* ------------------------------------------------------------------------------------------------ */
/* quantization */

/* The codebook index nearest v (ties to the lower value). */
static int iq4_nearest(float v)
{
    int best = 0;
    float err = fabsf(v - (float)iq4_values[0]);
    for (int i = 1; i < 16; i++) {
        const float e = fabsf(v - (float)iq4_values[i]);
        if (e < err) {
            err = e;
            best = i;
        }
    }
    return best;
}

#define IQ4_TRIES 10 /* candidate scales either side of each end of the codebook */

/* The scale a for 32 values x ~= a * kv[q] minimising the squared error over a small search: for each
 * candidate inverse scale (the value of largest magnitude mapped near either end of the codebook), assign
 * each element its nearest code, then a = least squares for that assignment. 0 for an all-zero block. */
static float iq4_fit(const float *x)
{
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    if (!(amax > 0.0f) || !isfinite(amax)) return 0.0f;
    float best = vmax / (float)iq4_values[0];
    double best_gain = -1.0;
    for (int side = 0; side < 2; side++) {
        const float end = side ? (float)iq4_values[15] : (float)iq4_values[0];
        for (int k = -IQ4_TRIES; k <= IQ4_TRIES; k++) {
            const float id = (end + (float)k * 2.0f) / vmax;
            double sxq = 0, sqq = 0;
            for (int i = 0; i < 32; i++) {
                const double q = iq4_values[iq4_nearest(x[i] * id)];
                sxq += q * x[i];
                sqq += q * q;
            }
            /* error at a = sxq / sqq is sum x^2 - sxq^2 / sqq: maximise the second term */
            if (sqq > 0 && sxq * sxq / sqq > best_gain) {
                best_gain = sxq * sxq / sqq;
                best = (float)(sxq / sqq);
            }
        }
    }
    return best;
}

/* Nibbles of 32 values for the stored scale step (0: the code nearest 0), in IQ4_NL's order. */
static void iq4_pack(const float *x, float step, uint8_t *qs)
{
    const float inv = step != 0.0f ? 1.0f / step : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(iq4_nearest(x[j] * inv) | iq4_nearest(x[j + 16] * inv) << 4);
}

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void quant_iq_quantize_row_iq4_nl(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 18) {
        const uint16_t d = quant_f32_to_f16(iq4_fit(src + 32 * i));
        wr16(b, d);
        iq4_pack(src + 32 * i, quant_f16_to_f32(d), b + 2);
    }
}

static int iq_clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* One IQ4_XS block: each sub-block's best scale a_b (iq4_fit), then d = the f16 of a / -32 for the a of
 * largest magnitude (the 6-bit ls - 32 spans -32 .. 31), ls = a_b / d rounded, and the nibbles under the
 * stored d * (ls - 32). */
static void q_iq4_xs(const float *x, uint8_t *b)
{
    float a[8], amax = 0.0f, vmax = 0.0f;
    for (int sb = 0; sb < 8; sb++) {
        a[sb] = iq4_fit(x + 32 * sb);
        if (fabsf(a[sb]) > amax) {
            amax = fabsf(a[sb]);
            vmax = a[sb];
        }
    }
    const uint16_t d16 = quant_f32_to_f16(vmax / -32.0f);
    const float d = quant_f16_to_f32(d16);
    memset(b, 0, 136);
    wr16(b, d16);
    uint16_t sh = 0;
    for (int sb = 0; sb < 8; sb++) {
        const int ls = d != 0.0f && isfinite(d) ? iq_clampi((int)lrintf(a[sb] / d), -32, 31) : 0;
        const int u = ls + 32;
        b[4 + sb / 2] |= (uint8_t)((u & 15) << (4 * (sb % 2)));
        sh |= (uint16_t)((u >> 4) << (2 * sb));
        iq4_pack(x + 32 * sb, d * (float)ls, b + 8 + 16 * sb);
    }
    wr16(b + 2, sh);
}

void quant_iq_quantize_row_iq4_xs(const float *src, void *dst, int64_t n)
{
    for (int64_t i = 0; i < n / 256; i++) q_iq4_xs(src + 256 * i, (uint8_t *)dst + 136 * i);
}

void quant_iq_quantize_row_q8_k(const float *src, void *dst, int64_t n)
{
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + 256 * i;
        uint8_t *b = (uint8_t *)dst + 292 * i;
        float amax = 0.0f;
        for (int e = 0; e < 256; e++) amax = fmaxf(amax, fabsf(x[e]));
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        memcpy(b, &d, 4);
        for (int j = 0; j < 16; j++) {
            int16_t sum = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++) {
                const int q = iq_clampi((int)lrintf(x[e] * id), -127, 127);
                b[4 + e] = (uint8_t)(int8_t)q;
                sum = (int16_t)(sum + q);
            }
            wr16(b + 260 + 2 * j, (uint16_t)sum);
        }
    }
}
