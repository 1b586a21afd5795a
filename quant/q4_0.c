// quant/q4_0.c — Q4_0 (id 2): 32 elements, fp16 d, 4-bit codes (low nibbles 0–15, high 16–31).
#include "quant/quant_impl.h"

void bn_q4_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            dst[i * 32 + j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void bn_q4_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        const float max = bn_signed_max_ref(x, 32);
        float d = max / -8;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int8_t lo = (int8_t)(x[j] * id + 8.5f);        // truncation toward zero
            int8_t hi = (int8_t)(x[j + 16] * id + 8.5f);
            uint8_t q_lo = lo < 15 ? (uint8_t)lo : 15;
            uint8_t q_hi = hi < 15 ? (uint8_t)hi : 15;
            b[i].qs[j] = (uint8_t)(q_lo | (q_hi << 4));
        }
    }
}

void bn_dot_q4_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q4_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sumf += (float)isum * (bn_h2f(x[i].d) * bn_h2f(y[i].d));
    }
    *s = sumf;
}
