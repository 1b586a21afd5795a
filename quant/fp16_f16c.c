// quant/fp16_f16c.c — fp16 row conversions with F16C (rounds to nearest even: identical to bn_fp32_to_fp16 /
// bn_fp16_to_fp32; quant/rows.c chooses them when the CPU has AVX2 + F16C).
#pragma GCC target("avx2,fma,f16c")
#include "quant/simd_avx2.h"

void bn_fp16_to_fp32_row_f16c(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

void bn_fp32_to_fp16_row_f16c(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {   // NaN: F16C keeps payload bits,
            for (int k = 0; k < 8; k++) y[i + k] = bn_fp32_to_fp16(x[i + k]);   // the reference does not
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = bn_fp32_to_fp16(x[i]);
}
