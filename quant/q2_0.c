// quant/q2_0.c — Q2_0 ternary-in-2-bit codec in both layouts (docs/formats.md §3.4, §3.9):
// BN_Q2_0 = mainline group 64 (18 B), BN_PQ2_0 = legacy fork group 128 (34 B). Codes: y = (code-1)*d.
#include "quant/quant_impl.h"

// Shared codec over one group of qk elements: d fp16 then qk/4 code bytes.
static void q2_dequant_group(bn_half hd, const uint8_t *qs, int qk, float *y) {
    float d = bn_h2f(hd);
    for (int j = 0; j < qk; j++) {
        int code = (qs[j >> 2] >> (2 * (j & 3))) & 3;
        y[j] = (float)(code - 1) * d;
    }
}

// q2_codes_group: the codes of one group at scale d (fp32), clamped to [0, max_code].
static void q2_codes_group(const float *x, int qk, float d, int max_code, uint8_t *qs) {
    float id = d > 0.0f ? 1.0f / d : 0.0f;
    memset(qs, 0, (size_t)qk / 4);
    for (int j = 0; j < qk; j++) {
        int code = (int)roundf(x[j] * id) + 1;   // ties away from zero; multiply by fp32 id
        if (code < 0) code = 0;
        if (code > max_code) code = max_code;
        qs[j >> 2] |= (uint8_t)(code << (2 * (j & 3)));
    }
}

static void q2_quant_group(const float *x, int qk, bn_half *hd, uint8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < qk; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    *hd = bn_fp32_to_fp16(amax);
    q2_codes_group(x, qk, amax, 3, qs);
}

void bn_q2_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q2_0 *b = src;
    for (int64_t i = 0; i < n / 64; i++) q2_dequant_group(b[i].d, b[i].qs, 64, dst + i * 64);
}

void bn_q2_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / 64; i++) q2_quant_group(src + i * 64, 64, &b[i].d, b[i].qs);
}

void bn_q2_0_from_float_keep_scales(const float *src, const void *scales_from, void *dst, int64_t n) {
    const bn_block_q2_0 *s = scales_from;
    bn_block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / 64; i++) {
        bn_half d = s[i].d; // read before writing: dst may be scales_from
        b[i].d = d;
        q2_codes_group(src + i * 64, 64, bn_h2f(d), 2, b[i].qs);
    }
}

void bn_pq2_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_pq2_0 *b = src;
    for (int64_t i = 0; i < n / 128; i++) q2_dequant_group(b[i].d, b[i].qs, 128, dst + i * 128);
}

void bn_pq2_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_pq2_0 *b = dst;
    for (int64_t i = 0; i < n / 128; i++) q2_quant_group(src + i * 128, 128, &b[i].d, b[i].qs);
}

void bn_pq2_0_from_float_keep_scales(const float *src, const void *scales_from, void *dst, int64_t n) {
    const bn_block_pq2_0 *s = scales_from;
    bn_block_pq2_0 *b = dst;
    for (int64_t i = 0; i < n / 128; i++) {
        bn_half d = s[i].d;
        b[i].d = d;
        q2_codes_group(src + i * 128, 128, bn_h2f(d), 2, b[i].qs);
    }
}

// Dot of one group (qk/32 Q8_0 blocks): integer sum per Q8_0 block times its d, then times the group d.
static float q2_dot_group(bn_half hd, const uint8_t *qs, int qk, const bn_block_q8_0 *y) {
    float group_sum = 0.0f;
    for (int k = 0; k < qk / 32; k++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) {
            int e = 32 * k + j;
            int code = (qs[e >> 2] >> (2 * (e & 3))) & 3;
            isum += (code - 1) * y[k].qs[j];
        }
        group_sum += bn_h2f(y[k].d) * (float)isum;
    }
    return bn_h2f(hd) * group_sum;
}

void bn_dot_q2_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q2_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 64; i++) sumf += q2_dot_group(x[i].d, x[i].qs, 64, y + 2 * i);
    *s = sumf;
}

void bn_dot_pq2_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_pq2_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 128; i++) sumf += q2_dot_group(x[i].d, x[i].qs, 128, y + 4 * i);
    *s = sumf;
}
