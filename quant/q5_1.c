// quant/q5_1.c — Q5_1 (id 7): 32 elements, fp16 d and m, 5-bit codes (qs/qh as Q5_0); y = q*d + m.
#include "quant/quant_impl.h"
#include <float.h>

// q5_code: the 5-bit code of element j (< 16) or 16+j (hi) of a block.
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j, bool hi) {
    int low = hi ? qs[j] >> 4 : qs[j] & 0x0f;
    int bit = (qh >> (j + (hi ? 16 : 0))) & 1;
    return low | (bit << 4);
}

void bn_q5_1_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = bn_h2f(b[i].d), m = bn_h2f(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, sizeof qh);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = (float)q5_code(b[i].qs, qh, j, false) * d + m;
            dst[i * 32 + j + 16] = (float)q5_code(b[i].qs, qh, j, true) * d + m;
        }
    }
}

void bn_q5_1_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        float d = (max - min) / 31;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        b[i].m = bn_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            uint8_t q_lo = (uint8_t)((x[j] - min) * id + 0.5f);   // no clamp, as the reference
            uint8_t q_hi = (uint8_t)((x[j + 16] - min) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((q_lo & 0x0f) | ((q_hi & 0x0f) << 4));
            qh |= (uint32_t)((q_lo >> 4) & 1) << j;
            qh |= (uint32_t)((q_hi >> 4) & 1) << (j + 16);
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}

// Q5_1 · Q8_1: d*dy*sum(q*qy) + m*s_y (s_y = dy*sum(qy) stored in the Q8_1 block).
void bn_dot_q5_1_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q5_1 *x = vx;
    const bn_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        int sum_lo = 0, sum_hi = 0;
        for (int j = 0; j < 16; j++) {
            sum_lo += q5_code(x[i].qs, qh, j, false) * y[i].qs[j];
            sum_hi += q5_code(x[i].qs, qh, j, true) * y[i].qs[j + 16];
        }
        sumf += (bn_h2f(x[i].d) * bn_h2f(y[i].d)) * (float)(sum_lo + sum_hi) + bn_h2f(x[i].m) * bn_h2f(y[i].s);
    }
    *s = sumf;
}
