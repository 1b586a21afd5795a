// quant/q4_1.c — Q4_1 (id 3): 32 elements, fp16 d and m, 4-bit codes; y = q*d + m.
#include "quant/quant_impl.h"
#include <float.h>

void bn_q4_1_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d), m = bn_h2f(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = (float)(b[i].qs[j] & 0x0f) * d + m;
            dst[i * 32 + j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void bn_q4_1_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float min, max;
        bn_minmax_ref(x, 32, &min, &max);
        float d = (max - min) / 15;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        b[i].m = bn_fp32_to_fp16(min);
        for (int j = 0; j < 16; j++) {
            int8_t lo = (int8_t)((x[j] - min) * id + 0.5f);
            int8_t hi = (int8_t)((x[j + 16] - min) * id + 0.5f);
            uint8_t q_lo = lo < 15 ? (uint8_t)lo : 15;
            uint8_t q_hi = hi < 15 ? (uint8_t)hi : 15;
            b[i].qs[j] = (uint8_t)(q_lo | (q_hi << 4));
        }
    }
}

// Q4_1 · Q8_1: sum(q*d+m)*(dy*qy) = d*dy*sum(q*qy) + m*s_y (s_y = dy*sum(qy) stored in the Q8_1 block).
void bn_dot_q4_1_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q4_1 *x = vx;
    const bn_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (x[i].qs[j] & 0x0f) * y[i].qs[j];
            isum += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sumf += (bn_h2f(x[i].d) * bn_h2f(y[i].d)) * (float)isum + bn_h2f(x[i].m) * bn_h2f(y[i].s);
    }
    *s = sumf;
}
