// quant/q5_k.c — Q5_K (id 13): 256 elements = 8 sub-blocks of 32, 6-bit scales/mins under fp16 d, dmin
// (packed as Q4_K), 5-bit codes: low nibbles in qs (as Q4_K), the fifth bit of element 64c+l in qh[l]
// bit 2c, of element 64c+32+l in qh[l] bit 2c+1. y = d*sc*q - dmin*m. Reference quantizer without imatrix.
#include "quant/quant_impl.h"
#include "quant/kquant.h"

// q5k_code: the 5-bit code of element 32*j + l of a block (sub-block j, 0..7).
static inline int q5k_code(const bn_block_q5_K *b, int j, int l) {
    int c = j / 2;
    int low = (j & 1) ? b->qs[32 * c + l] >> 4 : b->qs[32 * c + l] & 0xf;
    return low | (((b->qh[l] >> j) & 1) << 4);
}

void bn_q5_K_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q5_K *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = bn_h2f(b[i].d), dmin = bn_h2f(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            bn_k_scale_min(j, b[i].scales, &sc, &mn);
            float dj = d * sc, mj = dmin * mn;
            for (int l = 0; l < 32; l++) dst[i * 256 + 32 * j + l] = dj * q5k_code(&b[i], j, l) - mj;
        }
    }
}

void bn_q5_K_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q5_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t L[256];
        memset(b[i].scales, 0, sizeof b[i].scales);
        bn_k_quantize_block(src + i * 256, 31, -0.5f, 15, b[i].scales, &b[i].d, &b[i].dmin, L);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
            }
    }
}

// Q5_K · Q8_K: per sub-block integer sums; mins via the Q8_K bsums (sum of 16 activations each).
void bn_dot_q5_K_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q5_K *x = vx;
    const bn_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            bn_k_scale_min(j, x[i].scales, &sc, &mn);
            int isum = 0;
            for (int l = 0; l < 32; l++) isum += q5k_code(&x[i], j, l) * y[i].qs[32 * j + l];
            sum_q += sc * isum;
            sum_m += mn * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        float d = bn_h2f(x[i].d) * y[i].d;
        float dmin = bn_h2f(x[i].dmin) * y[i].d;
        sumf += d * (float)sum_q - dmin * (float)sum_m;
    }
    *s = sumf;
}
