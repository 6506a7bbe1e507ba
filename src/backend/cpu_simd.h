/* cpu_simd.h — small AVX2 helpers shared by the CPU kernel files (cpu_kernels.c, cpu_kquant.c), private
 * to src/backend/. Include only where AVX2/FMA/F16C are enabled (inside their CPU_HAVE_AVX2 sections). */
#ifndef NS_BACKEND_CPU_SIMD_H
#define NS_BACKEND_CPU_SIMD_H

#include <immintrin.h>

#define CPU_INLINE static inline __attribute__((always_inline))

/* ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)): the order the scalar references reproduce. */
CPU_INLINE float hsum256(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* Cases of an n_x switch in the integer templates (cpu_kernels_quant.h, cpu_kquant_simd.h), each running
 * the body with the constant NXC = n_x (so the row loops unroll): 1 .. 4 or 8, the last one as the
 * default. */
#define CPU_QCASE(N, ...)                                                                                 \
    case N: {                                                                                             \
        enum { NXC = N };                                                                                 \
        __VA_ARGS__;                                                                                      \
        break;                                                                                            \
    }
#define CPU_QCASES4(...)                                                                                  \
    CPU_QCASE(1, __VA_ARGS__) CPU_QCASE(2, __VA_ARGS__) CPU_QCASE(3, __VA_ARGS__) default : {             \
        enum { NXC = 4 };                                                                                 \
        __VA_ARGS__;                                                                                      \
        break;                                                                                            \
    }
#define CPU_QCASES8(...)                                                                                  \
    CPU_QCASE(1, __VA_ARGS__) CPU_QCASE(2, __VA_ARGS__) CPU_QCASE(3, __VA_ARGS__) CPU_QCASE(4, __VA_ARGS__) \
    CPU_QCASE(5, __VA_ARGS__) CPU_QCASE(6, __VA_ARGS__) CPU_QCASE(7, __VA_ARGS__) default : {             \
        enum { NXC = 8 };                                                                                 \
        __VA_ARGS__;                                                                                      \
        break;                                                                                            \
    }

#endif
