/* cuda_test_util — what the device tests (tests/test_cuda*.c) share: the random inputs, the tolerance
 * measure, an e4m3 reference, a model file loaded with its vocabulary, and the TEST_CUDA_ONLY selection.
 * Include it after test.h and only under NS_CUDA. Every function is static inline, so that a binary that
 * uses some of them compiles clean under -Werror (-Wunused-function); each binary has its own g_rng. */
#ifndef NS_TESTS_CUDA_TEST_UTIL_H
#define NS_TESTS_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "cuda_harness.h"
#include "gguf/quant.h"
#include "model/model.h"
#include "synth_util.h"
#include "test.h"
#include "tokenizer/tok.h"

static uint64_t g_rng = 20251201;

static inline float frand(float a)
{
    return synth_uniform(&g_rng, a);
}

static inline void fill(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) x[i] = frand(a);
}

static inline float bf16_round(float f)
{
    return quant_bf16_to_f32(quant_f32_to_bf16(f));
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* max over i of |got - ref| / (rel |ref| + abs); NaN counts as infinite. */
static inline double worst(const float *got, const double *ref, size_t n, double rel, double abs_tol)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]) / (rel * fabs(ref[i]) + abs_tol);
        if (isnan(got[i]) || d > w) w = isnan(got[i]) ? INFINITY : d;
    }
    return w;
}

/* An e4m3 byte's value, from the format's definition (1 sign, 4 exponent bits of bias 7, 3 mantissa bits;
 * subnormals at exponent 0; S.1111.111 is NaN, no infinities). */
static inline float e4m3_value(uint8_t b)
{
    const int ex = (b >> 3) & 15, m = b & 7;
    if (ex == 15 && m == 7) return NAN;
    const float v = ex ? ldexpf(1.0f + (float)m / 8.0f, ex - 7) : ldexpf((float)m / 8.0f, -6);
    return b & 0x80 ? -v : v;
}

/* x as e4m3 the reference way: the nearest of the 127 finite magnitudes, a tie to the even code, saturated at
 * 448 (the kernels' __NV_SATFINITE), NaN to 0x7f. */
static inline uint8_t e4m3_of(float x)
{
    if (isnan(x)) return 0x7f;
    const uint8_t s = signbit(x) ? 0x80 : 0;
    const float a = fabsf(x);
    int best = 0;
    float bd = INFINITY;
    for (int c = 0; c <= 0x7e; c++) {
        const float d = fabsf(e4m3_value((uint8_t)c) - a);
        if (d < bd || (d == bd && !(c & 1))) bd = d, best = c;
    }
    return (uint8_t)(s | best);
}

/* A GGUF model with its vocabulary (stories260K in the tests that run the real model). */
struct loaded {
    gguf_file *f;
    struct model *m;
    tok_vocab *v;
};

static inline int load_model(const char *path, struct loaded *L, struct err *e)
{
    memset(L, 0, sizeof *L);
    if (gguf_open(path, &L->f, e) || model_load(L->f, &L->m, e) || tok_load(L->f, &L->v, e)) return -1;
    return 0;
}

static inline void unload_model(struct loaded *L)
{
    tok_free(L->v);
    model_free(L->m);
    gguf_close(L->f);
}

/* TEST_CUDA_ONLY=prefix runs only the tests whose names start with it (e.g. "kernel_" under
 * compute-sanitizer). */
#define RUN_SEL(name)                                                                                     \
    do {                                                                                                  \
        const char *only_ = getenv("TEST_CUDA_ONLY");                                                     \
        if (!only_ || !strncmp(#name, only_, strlen(only_))) RUN(name);                                   \
    } while (0)

#endif
