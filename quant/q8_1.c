// quant/q8_1.c — Q8_1 (id 9, activations): Q8_0 plus s = fp16(d * sum(q)) (CPU reference semantics).
#include "quant/quant_impl.h"

void bn_q8_1_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = (float)b[i].qs[j] * d;
    }
}

void bn_q8_1_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float d = bn_amax_ref(x, 32) / 127;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            b[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = bn_fp32_to_fp16((float)sum * d);
    }
}
