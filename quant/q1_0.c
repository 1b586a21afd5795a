// quant/q1_0.c — Q1_0 (id 41): 128 elements per block, fp16 d + 1 sign bit each (docs/formats.md §3.4).
#include "quant/quant_impl.h"

void bn_q1_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q1_0 *b = src;
    for (int64_t i = 0; i < n / 128; i++) {
        float d = bn_h2f(b[i].d);
        float neg_d = -d;
        for (int j = 0; j < 128; j++) {
            int bit = (b[i].qs[j >> 3] >> (j & 7)) & 1;
            dst[i * 128 + j] = bit ? d : neg_d;
        }
    }
}

// q1_signs: the sign bits of one block (1 = x >= 0).
static void q1_signs(const float *x, uint8_t qs[16]) {
    memset(qs, 0, 16);
    for (int j = 0; j < 128; j++)
        if (x[j] >= 0.0f) qs[j >> 3] |= (uint8_t)(1u << (j & 7));
}

void bn_q1_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q1_0 *b = dst;
    for (int64_t i = 0; i < n / 128; i++) {
        const float *x = src + i * 128;
        float sum_abs = 0.0f;                     // fp32, in element order (bit-exact with ggml)
        for (int j = 0; j < 128; j++) sum_abs += fabsf(x[j]);
        b[i].d = bn_fp32_to_fp16(sum_abs / 128);
        q1_signs(x, b[i].qs);
    }
}

void bn_q1_0_from_float_keep_scales(const float *src, const void *scales_from, void *dst, int64_t n) {
    const bn_block_q1_0 *s = scales_from;
    bn_block_q1_0 *b = dst;
    for (int64_t i = 0; i < n / 128; i++) {
        b[i].d = s[i].d;
        q1_signs(src + i * 128, b[i].qs);
    }
}

// One Q1_0 block spans four Q8_0 blocks: per Q8_0 block an integer sum of ±q, scaled by its d.
void bn_dot_q1_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q1_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 128; i++) {
        float block_sum = 0.0f;
        for (int k = 0; k < 4; k++) {
            const bn_block_q8_0 *yb = &y[4 * i + k];
            int isum = 0;
            for (int j = 0; j < 32; j++) {
                int e = 32 * k + j;
                int bit = (x[i].qs[e >> 3] >> (e & 7)) & 1;
                isum += bit ? yb->qs[j] : -yb->qs[j];
            }
            block_sum += bn_h2f(yb->d) * (float)isum;
        }
        sumf += bn_h2f(x[i].d) * block_sum;
    }
    *s = sumf;
}
