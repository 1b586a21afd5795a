// quant/act_cpu.c — activation quantizers with llama.cpp's CPU-backend semantics (ggml-cpu's
// quantize_row_q8_0 / q8_1 / q8_K as built for x86 AVX/AVX2/AVX-512), used by the engine so that its
// int8 dot products see the same activation bytes as llama.cpp. They differ from the *_ref quantizers
// in two places: id = 127/amax (not 1/(amax/127)), and q = round-to-nearest-even (not roundf's ties
// away from zero). d = amax/127 is the same. Q8_K: ggml-cpu uses the reference there, so do we.
// Scalar and AVX2 versions are bit-identical (tests/quant/test_act_cpu.c checks both against ggml).
#include "quant/quant_impl.h"

// ---- scalar -------------------------------------------------------------------------------------
// Block amax and the two scale factors exactly as ggml-cpu computes them.
static inline float block_amax(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

// Quantizes one 32-element block with ggml-cpu's rounding; returns the sum of the codes.
static int act_block_q8(const float *x, bn_half *d_out, int8_t *qs, float *d_ret) {
    float amax = block_amax(x);
    float d = amax / 127.f;
    float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        float scaled = x[j] * id;
        int q = bn_nearest_int(scaled);   // ties to even, |scaled| <= 127 + 1 ulp
        qs[j] = (int8_t)q;
        sum += q;
    }
    *d_out = bn_fp32_to_fp16(d);
    *d_ret = d;
    return sum;
}

static void act_q8_0_scalar(const float *x, void *vy, int64_t n) {
    bn_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        act_block_q8(x + 32 * i, &y[i].d, y[i].qs, &d);
    }
}

static void act_q8_1_scalar(const float *x, void *vy, int64_t n) {
    bn_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        int sum = act_block_q8(x + 32 * i, &y[i].d, y[i].qs, &d);
        y[i].s = bn_fp32_to_fp16(d * (float)sum);
    }
}

// ---- AVX2 ---------------------------------------------------------------------------------------
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

// One 32-float block: returns its 32 int8 codes in order; d and the code sum via the out args.
static inline __m256i act_block_avx2(const float *x, float *d_out, int *sum_out) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
    __m256 max_abs = _mm256_andnot_ps(sign_bit, v[0]);
    for (int k = 1; k < 4; k++) max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v[k]));
    __m128 max4 = _mm_max_ps(_mm256_extractf128_ps(max_abs, 1), _mm256_castps256_ps128(max_abs));
    max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
    max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
    float amax = _mm_cvtss_f32(max4);

    *d_out = amax / 127.f;
    __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));

    __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
    sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, _MM_SHUFFLE(1, 0, 3, 2)));
    sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum_out = _mm_cvtsi128_si32(sum4);

    __m256i q01 = _mm256_packs_epi32(q[0], q[1]);
    __m256i q23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i packed = _mm256_packs_epi16(q01, q23);
    return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void act_q8_0_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        int sum;
        __m256i qs = act_block_avx2(x + 32 * i, &d, &sum);
        _mm256_storeu_si256((__m256i *)y[i].qs, qs);
        y[i].d = bn_fp32_to_fp16(d);
    }
}

static void act_q8_1_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        int sum;
        __m256i qs = act_block_avx2(x + 32 * i, &d, &sum);
        _mm256_storeu_si256((__m256i *)y[i].qs, qs);
        y[i].d = bn_fp32_to_fp16(d);
        y[i].s = bn_fp32_to_fp16(d * (float)sum);
    }
}
#pragma GCC pop_options

// ---- dispatch -----------------------------------------------------------------------------------
void bn_quantize_act_q8_0(const float *x, void *y, int64_t n) {
    if (bn_have_avx2) act_q8_0_avx2(x, y, n);
    else act_q8_0_scalar(x, y, n);
}

void bn_quantize_act_q8_1(const float *x, void *y, int64_t n) {
    if (bn_have_avx2) act_q8_1_avx2(x, y, n);
    else act_q8_1_scalar(x, y, n);
}

void bn_quantize_act_q8_K(const float *x, void *y, int64_t n) { bn_quantize_row_q8_K(x, y, n); }

size_t bn_quantize_activations_cpu(int vec_dot_type, const float *x, void *y, int64_t n) {
    switch (vec_dot_type) {
    case BN_Q8_0: bn_quantize_act_q8_0(x, y, n); break;
    case BN_Q8_1: bn_quantize_act_q8_1(x, y, n); break;
    case BN_Q8_K: bn_quantize_act_q8_K(x, y, n); break;
    default: return bn_quantize_activations(vec_dot_type, x, y, n);
    }
    return bn_row_size(vec_dot_type, n);
}
