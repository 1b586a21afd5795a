// quant/act_avx2.c — AVX2 activation quantizers (Q8_0, Q8_1, Q8_K), bit-identical to the scalar
// references (chosen by quant/rows.c).
#pragma GCC target("avx2,fma,f16c")
#include "quant/simd_avx2.h"

// ---- activation quantizers (bit-identical to the references) ----------------------------------
// roundf: ties away from zero, via truncation plus a correction on |fraction| >= 0.5 (exact).
static inline __m256 roundf_ps(__m256 v) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, t));
    __m256 need = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign_mask), _mm256_set1_ps(1.0f));   // copysign(1, v)
    return _mm256_add_ps(t, _mm256_and_ps(need, step));
}

// Packs 4 x 8 int32 (each in int8 range) into 32 int8 in order.
static inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b);
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline float block_amax32(const float *x) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x));
    for (int k = 1; k < 4; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 8 * k)));
    return hmax_ps(m);
}

// Quantizes 32 floats with roundf(x*id) into int8; returns them as a vector.
static inline __m256i q8_round32(const float *x, float id) {
    __m256 vid = _mm256_set1_ps(id);
    __m256i r[4];
    for (int k = 0; k < 4; k++)
        r[k] = _mm256_cvtps_epi32(roundf_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid)));
    return pack_i32_to_i8(r[0], r[1], r[2], r[3]);
}

void bn_quantize_row_q8_0_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float amax = block_amax32(x + 32 * i);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = bn_fp32_to_fp16(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, q8_round32(x + 32 * i, id));
    }
}

void bn_quantize_row_q8_1_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float amax = block_amax32(x + 32 * i);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = bn_fp32_to_fp16(d);
        __m256i q = q8_round32(x + 32 * i, id);
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
        int sum = hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
        y[i].s = bn_fp32_to_fp16((float)sum * d);
    }
}

void bn_quantize_row_q8_K_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_K *y = vy;
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 256; i++) {
        const float *xb = x + 256 * i;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(xb + 8 * k)));
        float amax = hmax_ps(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;   // the reference keeps the first element reaching amax (its sign matters)
        while (first < 256 && fabsf(xb[first]) != amax) first++;
        if (first == 256) {   // NaN in the block: let the reference define the result
            bn_q8_K_from_float_ref(xb, &y[i], 256);
            continue;
        }
        float iscale = -127.0f / xb[first];
        __m256 vs = _mm256_set1_ps(iscale);
        for (int k = 0; k < 8; k++) {
            __m256i r[4];
            for (int j = 0; j < 4; j++) {
                __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * k + 8 * j), vs),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r[j] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
            }
            __m256i q = pack_i32_to_i8(r[0], r[1], r[2], r[3]);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), q);
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);        // pair sums
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));        // sums of 4: lanes 0-3, 4-7
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            __m128i h = _mm_hadd_epi32(lo, hi);                                // 2 sums of 8 per half
            h = _mm_hadd_epi32(h, h);                                          // sums of 16: [lo, hi, ..]
            y[i].bsums[2 * k] = (int16_t)_mm_cvtsi128_si32(h);
            y[i].bsums[2 * k + 1] = (int16_t)_mm_extract_epi32(h, 1);
        }
        y[i].d = 1 / iscale;
    }
}
