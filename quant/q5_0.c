// quant/q5_0.c — Q5_0 (id 6): 32 elements, fp16 d, 5-bit codes (low nibbles in qs as Q4_0, the fifth
// bits in qh: bit j for element j, bit 16+j for element 16+j); y = (q - 16) * d.
#include "quant/quant_impl.h"
#include "quant/q5_bits.h"

void bn_q5_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, sizeof qh);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = (float)(q5_code(b[i].qs, qh, j) - 16) * d;
    }
}

void bn_q5_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        const float max = bn_signed_max_ref(x, 32);
        float d = max / -16;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        uint8_t codes[32];
        for (int j = 0; j < 32; j++) {
            int8_t q = (int8_t)(x[j] * id + 16.5f);   // truncation toward zero
            codes[j] = q < 31 ? (uint8_t)q : 31;
        }
        q5_store(codes, b[i].qs, b[i].qh);
    }
}

// Q5_0 · Q8_0: integer sum per block, scaled by d_x * d_y (ggml's scalar order).
void bn_dot_q5_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q5_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = q5_dot_codes(x[i].qs, x[i].qh, 16, y[i].qs);
        sumf += (bn_h2f(x[i].d) * bn_h2f(y[i].d)) * (float)isum;
    }
    *s = sumf;
}
