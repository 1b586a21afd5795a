// quant/q8_0.c — Q8_0 (id 8): 32 elements, fp16 d, int8 codes; d = amax/127, q = roundf(x/d via 1/d).
#include "quant/quant_impl.h"

void bn_q8_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = (float)b[i].qs[j] * d;
    }
}

void bn_q8_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float d = bn_amax_ref(x, 32) / 127;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void bn_dot_q8_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q8_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += x[i].qs[j] * y[i].qs[j];
        sumf += (float)isum * (bn_h2f(x[i].d) * bn_h2f(y[i].d));
    }
    *s = sumf;
}
