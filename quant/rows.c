// quant/rows.c — the row conversions that run an AVX2 / F16C kernel when the CPU has one (bn_have_avx2) and the
// scalar reference otherwise, bit-identical either way: fp16 rows, Q8_0 / Q8_1 / Q8_K activation rows, and F32 / F16 /
// BF16 as block-size-1 formats of the type table.
#include "quant/quant_impl.h"

// ---- fp16 rows -----------------------------------------------------------------------------------
void bn_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
    if (bn_have_avx2) { bn_fp16_to_fp32_row_f16c(x, y, n); return; }
    for (int64_t i = 0; i < n; i++) y[i] = bn_h2f(x[i]);
}

void bn_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n) {
    if (bn_have_avx2) { bn_fp32_to_fp16_row_f16c(x, y, n); return; }
    for (int64_t i = 0; i < n; i++) y[i] = bn_fp32_to_fp16(x[i]);
}

// ---- activation rows ----------------------------------------------------------------------------
// bn_quantize_row_q8_0: the reference rounding; AVX2 version when available (bit-identical).
void bn_quantize_row_q8_0(const float *x, void *y, int64_t n) {
    if (bn_have_avx2) bn_quantize_row_q8_0_avx2(x, y, n);
    else bn_q8_0_from_float_ref(x, y, n);
}

// bn_quantize_row_q8_1: the reference rounding; AVX2 version when available (bit-identical).
void bn_quantize_row_q8_1(const float *x, void *y, int64_t n) {
    if (bn_have_avx2) bn_quantize_row_q8_1_avx2(x, y, n);
    else bn_q8_1_from_float_ref(x, y, n);
}

// bn_quantize_row_q8_K: the reference rounding; AVX2 version when available (bit-identical).
void bn_quantize_row_q8_K(const float *x, void *y, int64_t n) {
    if (bn_have_avx2) bn_quantize_row_q8_K_avx2(x, y, n);
    else bn_q8_K_from_float_ref(x, y, n);
}

// ---- F32 / F16 / BF16 as "formats" (block size 1) ---------------------------------------------
void bn_f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
void bn_f32_from_float_ref(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
void bn_f16_to_float(const void *src, float *dst, int64_t n) { bn_fp16_to_fp32_row(src, dst, n); }
void bn_f16_from_float_ref(const float *src, void *dst, int64_t n) { bn_fp32_to_fp16_row(src, dst, n); }
void bn_bf16_to_float(const void *src, float *dst, int64_t n) { bn_bf16_to_fp32_row(src, dst, n); }
void bn_bf16_from_float_ref(const float *src, void *dst, int64_t n) { bn_fp32_to_bf16_row(src, dst, n); }
