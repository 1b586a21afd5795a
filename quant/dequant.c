// quant/dequant.c — whole-row entry points over the type table: dequantize, reference quantize,
// and activation quantization for a vec_dot_type.
#include "quant/quant_impl.h"

int bn_dequantize(int type, const void *src, float *dst, int64_t n) {
    const bn_type_traits *t = bn_type_traits_of(type);
    if (!t || !t->to_float || n % t->blck != 0) return -1;
    t->to_float(src, dst, n);
    return 0;
}

size_t bn_quantize_ref(int type, const float *src, void *dst, int64_t n) {
    const bn_type_traits *t = bn_type_traits_of(type);
    if (!t || !t->from_float_ref || n % t->blck != 0) return 0;
    t->from_float_ref(src, dst, n);
    return bn_row_size(type, n);
}

bool bn_type_keeps_scales(int type) { return type == BN_Q1_0 || type == BN_Q2_0 || type == BN_PQ2_0; }

size_t bn_quantize_keep_scales(int type, const float *src, const void *scales_from, void *dst, int64_t n) {
    void (*f)(const float *, const void *, void *, int64_t) =
        type == BN_Q1_0 ? bn_q1_0_from_float_keep_scales
        : type == BN_Q2_0 ? bn_q2_0_from_float_keep_scales
        : type == BN_PQ2_0 ? bn_pq2_0_from_float_keep_scales : NULL;
    if (!f || n % bn_type_blck(type) != 0) return 0;
    f(src, scales_from, dst, n);
    return bn_row_size(type, n);
}

size_t bn_quantize_activations(int vec_dot_type, const float *x, void *y, int64_t n) {
    switch (vec_dot_type) {
    case BN_Q8_0: bn_quantize_row_q8_0(x, y, n); break;
    case BN_Q8_1: bn_quantize_row_q8_1(x, y, n); break;
    case BN_Q8_K: bn_quantize_row_q8_K(x, y, n); break;
    case BN_F32: memcpy(y, x, (size_t)n * sizeof(float)); break;
    case BN_F16: bn_fp32_to_fp16_row(x, y, n); break;
    case BN_BF16: bn_fp32_to_bf16_row(x, y, n); break;
    default: return 0;
    }
    return bn_row_size(vec_dot_type, n);
}
