// quant/float_rows.c — F32 / F16 / BF16 weight rows times f32 activation rows (bn_float_rows, bn_float_gemm): the
// dispatch, the scalar dots and the AVX2/FMA/F16C kernels; the AVX-512 kernels are in float_avx512.c. The activation
// stays f32 (ggml rounds it to the weight's type first), so a prefill and a decode see the same inputs.
//
// bn_float_rows computes each dot(weight row, activation row) by one formula per dispatch, whatever the number of
// rows taken together:
//   AVX-512: quant/float_avx512.c (two 16-lane accumulators, masked tail);
//   AVX2:    F16 two 8-lane accumulators over 16-element chunks, BF16 one over 8-element chunks, F32 bn_dot_f32_avx2,
//            then a scalar tail;
//   scalar:  fp32 sum in element order.
#include "quant/quant_impl.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

// row_f32: element i of a F32 / F16 / BF16 row as f32.
static inline float row_f32(int type, const void *w, int64_t i) {
    if (type == BN_F32) return ((const float *)w)[i];
    const uint16_t h = ((const uint16_t *)w)[i];
    return type == BN_F16 ? bn_h2f(h) : bn_bf16_to_fp32(h);
}

static float dot_scalar(int type, const void *w, const float *x, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += row_f32(type, w, i) * x[i];
    return sum;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float hsum256(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}
__attribute__((target("avx2,fma,f16c"))) static float dot_bf16_f32_avx2(const uint16_t *w, const float *x, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i wi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i))), 16);
        acc = _mm256_fmadd_ps(_mm256_castsi256_ps(wi), _mm256_loadu_ps(x + i), acc);
    }
    float sum = hsum256(acc);
    for (; i < n; i++) sum += bn_bf16_to_fp32(w[i]) * x[i];
    return sum;
}
// dot_f16_f32_avx2_x4: one F16 weight row with up to 4 activation rows (x + t * ldx), each weight chunk converted
// once; every result is the same as with nx = 1 (same operations per row).
__attribute__((target("avx2,fma,f16c"))) static void dot_f16_f32_avx2_x4(const uint16_t *w, const float *x,
                                                                         size_t ldx, int nx, int n, float *out) {
    __m256 acc0[4], acc1[4];
    for (int t = 0; t < 4; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        for (int t = 0; t < nx; t++) {
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * ldx + i), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * ldx + i + 8), acc1[t]);
        }
    }
    for (int t = 0; t < nx; t++) {
        float sum = hsum256(_mm256_add_ps(acc0[t], acc1[t]));
        for (int k = i; k < n; k++) sum += bn_h2f(w[k]) * x[t * ldx + k];
        out[t] = sum;
    }
}

// rows_avx2: bn_float_rows with the AVX2 kernels, a weight row at a time against every activation row.
static void rows_avx2(int type, int n, int nrows, int ny, float *s, size_t ss, const char *w, size_t ws,
                      const float *x, size_t xs) {
    for (int r = 0; r < nrows; r++) {
        const char *row = w + (size_t)r * ws;
        for (int t0 = 0; t0 < ny; t0 += 4) {
            const int nx = ny - t0 < 4 ? ny - t0 : 4;
            float out[4];
            for (int t = 0; t < nx; t++) {
                const float *xt = x + (size_t)(t0 + t) * xs;
                if (type == BN_F32) bn_dot_f32_avx2(n, &out[t], row, xt);
                else if (type == BN_BF16) out[t] = dot_bf16_f32_avx2((const uint16_t *)row, xt, n);
            }
            if (type == BN_F16) dot_f16_f32_avx2_x4((const uint16_t *)row, x + (size_t)t0 * xs, xs, nx, n, out);
            for (int t = 0; t < nx; t++) s[(size_t)(t0 + t) * ss + r] = out[t];
        }
    }
}
#endif

void bn_float_rows(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w, size_t w_stride,
                   const float *x, size_t x_stride) {
#if defined(__x86_64__)
    if (bn_have_avx512) {
        bn_float_rows_avx512(type, n, nrows, ny, s, s_stride, w, w_stride, x, x_stride);
        return;
    }
    if (bn_have_avx2) {
        rows_avx2(type, n, nrows, ny, s, s_stride, w, w_stride, x, x_stride);
        return;
    }
#endif
    for (int r = 0; r < nrows; r++)
        for (int t = 0; t < ny; t++)
            s[(size_t)t * s_stride + r] =
                dot_scalar(type, (const char *)w + (size_t)r * w_stride, x + (size_t)t * x_stride, n);
}

int bn_float_gemm(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w, size_t w_stride,
                  const float *x, size_t x_stride) {
#if defined(__x86_64__)
    if (bn_have_avx512) {
        bn_float_gemm_avx512(type, n, nrows, ny, s, s_stride, w, w_stride, x, x_stride);
        return 1;
    }
#endif
    (void)type, (void)n, (void)nrows, (void)ny, (void)s, (void)s_stride, (void)w, (void)w_stride, (void)x;
    (void)x_stride;
    return 0;
}
