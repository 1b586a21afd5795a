// quant/q5_0.c — Q5_0 (id 6): 32 elements, fp16 d, 5-bit codes (low nibbles in qs as Q4_0, the fifth
// bits in qh: bit j for element j, bit 16+j for element 16+j); y = (q - 16) * d.
#include "quant/quant_impl.h"

// q5_code: the 5-bit code of element j (< 16) or 16+j (hi) of a block.
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j, bool hi) {
    int low = hi ? qs[j] >> 4 : qs[j] & 0x0f;
    int bit = (qh >> (j + (hi ? 16 : 0))) & 1;
    return low | (bit << 4);
}

void bn_q5_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, sizeof qh);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = (float)(q5_code(b[i].qs, qh, j, false) - 16) * d;
            dst[i * 32 + j + 16] = (float)(q5_code(b[i].qs, qh, j, true) - 16) * d;
        }
    }
}

void bn_q5_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float amax = 0.0f, max = 0.0f;   // max: the signed element of largest |x|, first wins ties
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        float d = max / -16;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int8_t lo = (int8_t)(x[j] * id + 16.5f);        // truncation toward zero
            int8_t hi = (int8_t)(x[j + 16] * id + 16.5f);
            uint8_t q_lo = lo < 31 ? (uint8_t)lo : 31;
            uint8_t q_hi = hi < 31 ? (uint8_t)hi : 31;
            b[i].qs[j] = (uint8_t)((q_lo & 0x0f) | ((q_hi & 0x0f) << 4));
            qh |= (uint32_t)((q_lo >> 4) & 1) << j;
            qh |= (uint32_t)((q_hi >> 4) & 1) << (j + 16);
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}

// Q5_0 · Q8_0: integer sum per block, scaled by d_x * d_y (ggml's scalar order).
void bn_dot_q5_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q5_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        int sum_lo = 0, sum_hi = 0;
        for (int j = 0; j < 16; j++) {
            sum_lo += (q5_code(x[i].qs, qh, j, false) - 16) * y[i].qs[j];
            sum_hi += (q5_code(x[i].qs, qh, j, true) - 16) * y[i].qs[j + 16];
        }
        sumf += (bn_h2f(x[i].d) * bn_h2f(y[i].d)) * (float)(sum_lo + sum_hi);
    }
    *s = sumf;
}
