// quant/q8_k.c — Q8_K (id 15, activations): 256 elements, fp32 d, int8 codes, 16 block sums of 16.
#include "quant/quant_impl.h"

void bn_q8_K_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q8_K *b = src;
    for (int64_t i = 0; i < n / 256; i++)
        for (int j = 0; j < 256; j++) dst[i * 256 + j] = b[i].d * b[i].qs[j];
}

// Reference: iscale = -127/max (max = signed element of largest |x|, first wins), q = nearest_int
// (ties to even), d = 1/iscale. All-zero blocks: d = 0, codes and sums 0.
void bn_q8_K_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + i * 256;
        float max = 0, amax = 0;
        for (int j = 0; j < 256; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < 256; j++) {
            int v = bn_nearest_int(iscale * x[j]);
            b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b[i].qs[16 * j + l];
            b[i].bsums[j] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}
