/* bench/amx_probe.c — what an AMX-INT8 version of the integer panel kernels would cost per block, on a CPU
 * that has AMX (Sapphire Rapids and later Xeons). A block of the panel kernels (cpu_kernels_qpanel.h) is 32
 * quants of 16 outputs times NX activation rows; on AMX it is one TDPBSUD of an NX x 32 A tile by an 8 x 64
 * B tile into an NX x 16 C tile, and then the shared float part per row: cvt, mul, fma, fma from the C
 * tile as stored. The probe times, in ns a block:
 *   tiles   the tile part alone: load A and B, zero C, TDPBSUD, store C (two tile sets alternating);
 *   float   the float part alone (what every row of every block needs whatever computes the isums);
 *   both    the two interleaved, block k's tiles issued before block k - 2's float part: the AMX kernel;
 *   vnni    what the AVX-512 VNNI kernel does instead (a block's 8 weight vectors loaded once for up to 8
 *           rows, 8 VPDPBUSD a row with its activations broadcast, then the same float part).
 * Neither side includes unpacking Q4/Q5 quants to bytes, which the VNNI kernel does in registers and an AMX
 * kernel must do through memory (B tiles load from memory): the real AMX kernel did worse than "both".
 * Data are synthetic (the costs do not depend on the values). bench/NOTES.md, 2026-12-02 20:53, item 1,
 * holds what it measured and why the kernels were not kept.
 *
 *   make build/bench/amx_probe && build/bench/amx_probe      (prints "no AMX" and exits 0 without it) */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NB 16 /* blocks a pass */

static _Alignas(64) uint8_t bbuf[NB][512];
static _Alignas(64) int32_t cbuf[NB][256];
static _Alignas(64) uint8_t act[16][NB * 40]; /* activation rows as cpu_q8 blocks: d, s, 32 quants */
static volatile float sink;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Tiles 0, 1: C (nx x 64 bytes); 2, 3: A (nx x 32); 4, 5: B (8 x 64). LDTILECFG through an operand that
 * covers the whole 64 bytes: gcc 12's _tile_loadconfig names only a pointer's worth of them, and at -O2 the
 * rest of the stores can be dropped (the instruction then faults). */
__attribute__((target("amx-tile"))) static void configure(int nx)
{
    struct {
        uint8_t palette, start, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int j = 0; j < 2; j++) {
        c.rows[j] = (uint8_t)nx, c.colsb[j] = 64;
        c.rows[2 + j] = (uint8_t)nx, c.colsb[2 + j] = 32;
        c.rows[4 + j] = 8, c.colsb[4 + j] = 64;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

#define TILE_BLOCK(tc, ta, tb, k)                                                                         \
    do {                                                                                                  \
        _tile_loadd(ta, act[0] + (k) * 40 + 8, NB * 40);                                                  \
        _tile_loadd(tb, bbuf[k], 64);                                                                     \
        _tile_zero(tc);                                                                                   \
        _tile_dpbsud(tc, ta, tb);                                                                         \
        _tile_stored(tc, cbuf[k], 64);                                                                    \
    } while (0)

__attribute__((target("amx-tile,amx-int8"))) static void tiles(void)
{
    for (int k = 0; k < NB; k += 2) {
        TILE_BLOCK(0, 2, 4, k);
        TILE_BLOCK(1, 3, 5, k + 1);
    }
}

/* The block's made-up weight scales and offsets (what the panel header would hold). */
__attribute__((target("avx512f"))) static inline void block_scales(int k, __m512 *dw, __m512 *mw)
{
    *dw = _mm512_set1_ps(1.0f + (float)k), *mw = _mm512_set1_ps(0.5f);
}

/* The shared float part of one row and block: isum scaled by d_w * d_x, plus m_w * s_x (xb: the row's
 * activation block: d, s, quants). */
__attribute__((target("avx512f"))) static inline __m512 float_row(__m512 acc, __m512i isum, const uint8_t *xb,
                                                                  __m512 dw, __m512 mw)
{
    float d, sx;
    memcpy(&d, xb, 4), memcpy(&sx, xb + 4, 4);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(d)), _mm512_cvtepi32_ps(isum), acc);
    return _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), acc);
}

__attribute__((target("avx512f"))) static inline void float_block(int k, int nx, __m512 *acc)
{
    __m512 dw, mw;
    block_scales(k, &dw, &mw);
    for (int i = 0; i < nx; i++)
        acc[i] = float_row(acc[i], _mm512_load_si512(cbuf[k] + 16 * i), act[i] + k * 40, dw, mw);
}

__attribute__((target("avx512f"))) static void floats(int nx, __m512 *acc)
{
    for (int k = 0; k < NB; k++) float_block(k, nx, acc);
}

__attribute__((target("avx512f,amx-tile,amx-int8"))) static void both(int nx, __m512 *acc)
{
    for (int k = 0; k < NB; k += 2) {
        TILE_BLOCK(0, 2, 4, k);
        TILE_BLOCK(1, 3, 5, k + 1);
        if (k >= 2) float_block(k - 2, nx, acc), float_block(k - 1, nx, acc);
    }
    float_block(NB - 2, nx, acc), float_block(NB - 1, nx, acc);
}

/* Rows i0 .. i0 + N - 1 of block k the VNNI kernel's way: the 8 weight vectors loaded once, each row's
 * 8 VPDPBUSD with its activation bytes broadcast, then the float part. */
__attribute__((target("avx512f,avx512vnni"), always_inline)) static inline void vnni_rows(int k, int i0, int N,
                                                                                         __m512 *acc)
{
    __m512 dw, mw;
    block_scales(k, &dw, &mw);
    __m512i w[8], p[8][2];
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) w[s] = _mm512_load_si512(bbuf[k] + 64 * s);
#pragma GCC unroll 8
    for (int i = 0; i < N; i++) p[i][0] = p[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++)
#pragma GCC unroll 8
        for (int i = 0; i < N; i++) {
            const uint8_t *xb = act[i0 + i] + k * 40;
            int32_t a, b;
            memcpy(&a, xb + 8 + 4 * s, 4), memcpy(&b, xb + 24 + 4 * s, 4);
            p[i][0] = _mm512_dpbusd_epi32(p[i][0], w[s], _mm512_set1_epi32(a));
            p[i][1] = _mm512_dpbusd_epi32(p[i][1], w[s + 4], _mm512_set1_epi32(b));
        }
#pragma GCC unroll 8
    for (int i = 0; i < N; i++)
        acc[i0 + i] = float_row(acc[i0 + i], _mm512_add_epi32(p[i][0], p[i][1]), act[i0 + i] + k * 40, dw, mw);
}

/* The AVX-512 VNNI kernel takes up to 8 rows a call: NX = 16 is two calls. */
__attribute__((target("avx512f,avx512vnni"))) static void vnni(int nx, __m512 *acc)
{
    for (int i0 = 0; i0 < nx; i0 += 8)
        for (int k = 0; k < NB; k++) {
            if (nx == 1) vnni_rows(k, i0, 1, acc);
            else if (nx == 2) vnni_rows(k, i0, 2, acc);
            else if (nx == 4) vnni_rows(k, i0, 4, acc);
            else vnni_rows(k, i0, 8, acc);
        }
}

__attribute__((target("avx512f"))) int main(void)
{
    if (!__builtin_cpu_supports("amx-int8") || !__builtin_cpu_supports("avx512f") ||
        syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
        printf("no AMX on this CPU (or the OS does not grant the tile state)\n");
        return 0;
    }
    const long reps = 200000;
    printf("ns a block of 32 quants x 16 outputs x NX rows (best of 3):\n");
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (int nx = 1; nx <= 16; nx *= 2) {
        configure(nx);
        double t[4] = {1e30, 1e30, 1e30, 1e30};
        for (int round = 0; round < 3; round++)
            for (int w = 0; w < 4; w++) { /* interleaved: a machine whose speed drifts affects all alike */
                double a = now();
                for (long r = 0; r < reps; r++) {
                    if (w == 0) tiles();
                    if (w == 1) floats(nx, acc);
                    if (w == 2) both(nx, acc);
                    if (w == 3) vnni(nx, acc);
                }
                const double ns = (now() - a) / (double)reps / NB * 1e9;
                if (ns < t[w]) t[w] = ns;
            }
        printf("  NX %2d: tiles %5.1f  float %5.1f  both (AMX) %5.1f  vnni %5.1f  vnni/AMX %.2f\n", nx, t[0], t[1],
               t[2], t[3], t[3] / t[2]);
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(acc[i]);
    sink = s;
    return 0;
}
