// quant/q5_1.c — Q5_1 (id 7): 32 elements, fp16 d and m, 5-bit codes (qs/qh as Q5_0); y = q*d + m.
#include "quant/quant_impl.h"
#include "quant/q5_bits.h"
#include <float.h>

void bn_q5_1_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d), m = bn_h2f(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, sizeof qh);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = (float)q5_code(b[i].qs, qh, j) * d + m;
    }
}

void bn_q5_1_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float min, max;
        bn_minmax_ref(x, 32, &min, &max);
        float d = (max - min) / 31;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        b[i].m = bn_fp32_to_fp16(min);
        uint8_t codes[32];
        for (int j = 0; j < 32; j++) codes[j] = (uint8_t)((x[j] - min) * id + 0.5f);   // no clamp, as the reference
        q5_store(codes, b[i].qs, b[i].qh);
    }
}

// Q5_1 · Q8_1: d*dy*sum(q*qy) + m*s_y (s_y = dy*sum(qy) stored in the Q8_1 block).
void bn_dot_q5_1_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q5_1 *x = vx;
    const bn_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = q5_dot_codes(x[i].qs, x[i].qh, 0, y[i].qs);
        sumf += (bn_h2f(x[i].d) * bn_h2f(y[i].d)) * (float)isum + bn_h2f(x[i].m) * bn_h2f(y[i].s);
    }
    *s = sumf;
}
