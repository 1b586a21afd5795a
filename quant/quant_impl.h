// quant/quant_impl.h — internal to quant/: rounding primitives (docs/formats.md §3.3), inline fp16
// helpers, and the per-format functions the type table (types.c) and the dispatch (dot.c) use.
#ifndef BONSAI_QUANT_IMPL_H
#define BONSAI_QUANT_IMPL_H
#include "quant/quant.h"
#include <float.h>
#include <math.h>
#include <string.h>

_Static_assert(sizeof(bn_block_q1_0) == 18, "q1_0 block");
_Static_assert(sizeof(bn_block_q2_0) == 18, "q2_0 block");
_Static_assert(sizeof(bn_block_pq2_0) == 34, "pq2_0 block");
_Static_assert(sizeof(bn_block_ptq1_0) == 28, "ptq1_0 block");
_Static_assert(sizeof(bn_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(bn_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(bn_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(bn_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(bn_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(bn_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(bn_block_q8_K) == 292, "q8_K block");
_Static_assert(sizeof(bn_block_tq1_0) == 54, "tq1_0 block");
_Static_assert(sizeof(bn_block_tq2_0) == 66, "tq2_0 block");

// bn_nearest_int: nearest integer, ties to even, via the 1.5*2^23 trick; valid for |v| <= 4194303.
static inline int bn_nearest_int(float v) {
    float shifted = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

// bn_h2f: fp16 bits -> fp32 (exact), inline for kernels.
static inline float bn_h2f(bn_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);          // inf / NaN (payload kept, made quiet as
        if (mant) bits |= 0x00400000u;                       // ggml's and F16C's conversions do)
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);   // normal: rebias 15 -> 127
    } else if (mant == 0) {
        bits = sign;                                         // signed zero
    } else {
        float sub = (float)mant * 0x1p-24f;                  // subnormal: mant * 2^-24, exact
        memcpy(&bits, &sub, sizeof bits);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// ---- per-format functions (one file each) ---------------------------------------------------
#define BN_DECLARE_FORMAT(t) \
    void bn_##t##_to_float(const void *src, float *dst, int64_t n); \
    void bn_##t##_from_float_ref(const float *src, void *dst, int64_t n);
BN_DECLARE_FORMAT(f32)
BN_DECLARE_FORMAT(f16)
BN_DECLARE_FORMAT(bf16)
BN_DECLARE_FORMAT(q1_0)
BN_DECLARE_FORMAT(q2_0)
BN_DECLARE_FORMAT(pq2_0)
BN_DECLARE_FORMAT(ptq1_0)
BN_DECLARE_FORMAT(q4_0)
BN_DECLARE_FORMAT(q4_1)
BN_DECLARE_FORMAT(q8_0)
BN_DECLARE_FORMAT(q8_1)
BN_DECLARE_FORMAT(q4_K)
BN_DECLARE_FORMAT(q6_K)
BN_DECLARE_FORMAT(q8_K)
BN_DECLARE_FORMAT(tq1_0)
BN_DECLARE_FORMAT(tq2_0)

// Keep-scales quantizers (bn_quantize_keep_scales): d of each block from scales_from, codes from src.
void bn_q1_0_from_float_keep_scales(const float *src, const void *scales_from, void *dst, int64_t n);
void bn_q2_0_from_float_keep_scales(const float *src, const void *scales_from, void *dst, int64_t n);
void bn_pq2_0_from_float_keep_scales(const float *src, const void *scales_from, void *dst, int64_t n);

// Scalar reference dots (dot.c and the format files), one per weight type.
void bn_dot_f32_ref(int n, float *s, const void *x, const void *y);
void bn_dot_f16_ref(int n, float *s, const void *x, const void *y);
void bn_dot_bf16_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q1_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q2_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_pq2_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_ptq1_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q4_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q4_1_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q8_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q4_K_ref(int n, float *s, const void *x, const void *y);
void bn_dot_q6_K_ref(int n, float *s, const void *x, const void *y);
void bn_dot_tq1_0_ref(int n, float *s, const void *x, const void *y);
void bn_dot_tq2_0_ref(int n, float *s, const void *x, const void *y);

// Dispatching dots used by the traits table (call the kernel chosen at start-up).
void bn_dot_dispatch(int type, int n, float *s, const void *x, const void *y);

// AVX2/FMA kernels (dot_avx2.c); only called when the CPU has AVX2+FMA+F16C.
void bn_dot_f32_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_f16_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_q1_0_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_q2_0_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_pq2_0_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_q4_0_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_q8_0_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_q6_K_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_q4_K_avx2(int n, float *s, const void *x, const void *y);
void bn_dot_tq2_0_avx2(int n, float *s, const void *x, const void *y);
// bn_vec_dot_rows_avx2: mat-vec with prepared activations for Q1_0/Q2_0/PQ2_0/Q4_0 (Q8_0 with VNNI); returns 1 if
// it handled the type, 0 if the caller must use the per-row kernel.
int bn_vec_dot_rows_avx2(int type, int n, int nrows, float *s, const void *w, size_t stride, const void *y);
// bn_vec_dot_rows_batch_avx2: bn_vec_dot_rows_batch for the same types; returns 1 if handled, else 0.
int bn_vec_dot_rows_batch_avx2(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                               size_t w_stride, const void *y, size_t y_stride);
// bn_batch_prep_size_avx2 / bn_batch_prepare_avx2 / bn_batch_rows_avx2: the same mat-mat in steps (dot.c's
// bn_vec_dot_batch_*): bytes of the prepared activations (0: type not handled), preparing groups [g0, g1) of 8 rows,
// and the rows against all prepared groups.
size_t bn_batch_prep_size_avx2(int type, int n, int ny);
void bn_batch_prepare_avx2(int type, int n, int ny, int g0, int g1, const void *y, size_t y_stride, void *prep);
void bn_batch_rows_avx2(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w, size_t w_stride,
                        const void *prep);
// AVX2 activation quantizers (act_avx2.c), bit-identical to bn_q8_0/q8_1/q8_K_from_float_ref; chosen in rows.c.
void bn_quantize_row_q8_0_avx2(const float *x, void *y, int64_t n);
void bn_quantize_row_q8_1_avx2(const float *x, void *y, int64_t n);
void bn_quantize_row_q8_K_avx2(const float *x, void *y, int64_t n);
// F16C fp16 rows (fp16_f16c.c), identical to the scalar conversions; chosen in rows.c.
void bn_fp16_to_fp32_row_f16c(const uint16_t *x, float *y, int64_t n);
void bn_fp32_to_fp16_row_f16c(const float *x, uint16_t *y, int64_t n);
// bn_float_rows_avx512 / bn_float_gemm_avx512: bn_float_rows / bn_float_gemm with AVX-512 (float_avx512.c); only
// called when bn_have_avx512.
void bn_float_rows_avx512(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                          size_t w_stride, const float *x, size_t x_stride);
void bn_float_gemm_avx512(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                          size_t w_stride, const float *x, size_t x_stride);

// bn_have_avx2: true when the dispatch uses the AVX2 kernels (set once at start-up); bn_have_vnni: the
// mat-vec kernels may also use AVX512-VNNI on 256-bit vectors (AVX512F/BW/VL/VNNI present); bn_have_avx512: the
// float-weight kernels (float_avx512.c) may use 512-bit vectors (AVX512F/BW/VL/DQ present).
extern int bn_have_avx2, bn_have_vnni, bn_have_avx512;

// bn_amax_ref: max |x[j]| over n values with ggml's MAX(a, b) = a > b ? a : b (a NaN input
// propagates), as the reference quantizers q8_0, q8_1, tq1_0, tq2_0 and ptq1_0 compute it.
static inline float bn_amax_ref(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    return amax;
}

// bn_signed_max_ref: the element of largest |x[j]| with its sign (first one on ties; 0 if all are 0),
// as the reference quantizers q4_0 and q5_0 pick their scale.
static inline float bn_signed_max_ref(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    return max;
}

// bn_minmax_ref: smallest and largest of n values (the q4_1 / q5_1 reference quantizers' scan).
static inline void bn_minmax_ref(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX, *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

#endif
