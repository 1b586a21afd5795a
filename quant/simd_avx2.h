// quant/simd_avx2.h — small AVX2 helpers shared by the quant/ kernels (dot_avx2.c, act_avx2.c,
// fp16_f16c.c, matvec_avx2.c). Include after `#pragma GCC target("avx2,fma,f16c")`; internal to quant/.
#ifndef BONSAI_SIMD_AVX2_H
#define BONSAI_SIMD_AVX2_H
#include "quant/quant_impl.h"
#include <immintrin.h>

// hsum_ps / hsum_epi32 / hmax_ps: horizontal sum / sum / max of the 8 lanes.
static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// h2f: fp16 bits -> fp32 with F16C (exact).
static inline float h2f(bn_half h) { return _cvtsh_ss(h); }

// Sum of a (unsigned bytes) * b (signed bytes), as 8 int32 lanes.
static inline __m256i dot_u8i8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// Sum of a (signed bytes) * b (signed bytes) via the sign trick, as 8 int32 lanes (|a| <= 127).
static inline __m256i dot_i8i8(__m256i a, __m256i b) {
    return dot_u8i8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

#endif
