// quant/q4_k.c — Q4_K (id 12): 256 elements = 8 sub-blocks of 32 with 6-bit scales/mins under fp16
// super-scales d, dmin (docs/formats.md §3.4). Reference quantizer without imatrix, bit-exact with ggml.
#include "quant/quant_impl.h"
#include "quant/kquant.h"

void bn_k_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4));
        *mn = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

void bn_q4_K_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q4_K *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = bn_h2f(b[i].d), dmin = bn_h2f(b[i].dmin);
        const uint8_t *q = b[i].qs;
        float *y = dst + i * 256;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, mn;
            bn_k_scale_min(2 * c, b[i].scales, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            bn_k_scale_min(2 * c + 1, b[i].scales, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) y[64 * c + l] = d1 * (q[32 * c + l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) y[64 * c + 32 + l] = d2 * (q[32 * c + l] >> 4) - m2;
        }
    }
}

// make_qkx2: weighted min/scale search for one sub-block (n codes in 0..nmax, L2 error);
// returns the scale, *the_min = -min (>= 0).
static float make_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                       float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = bn_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = bn_nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

void bn_k_quantize_block(const float *x, int nmax, float rmin, int nstep, uint8_t scales[12], bn_half *d_out,
                         bn_half *dmin_out, uint8_t L[256]) {
    float weights[32], mins[8], sub_scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        sub_scales[j] = make_qkx2(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (sub_scales[j] > max_scale) max_scale = sub_scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)bn_nearest_int(inv_scale * sub_scales[j]);   // uint8 wrap as in ggml
        uint8_t lm = (uint8_t)bn_nearest_int(inv_min * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = bn_fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = bn_fp32_to_fp16(max_min / 63.0f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        bn_k_scale_min(j, scales, &sc, &mn);
        float d = bn_h2f(*d_out) * sc;
        if (!d) continue;
        float dm = bn_h2f(*dmin_out) * mn;
        for (int l = 0; l < 32; l++) {
            int q = bn_nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
        }
    }
}

void bn_q4_K_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q4_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t L[256];
        memset(b[i].scales, 0, sizeof b[i].scales);
        bn_k_quantize_block(src + i * 256, 15, -1.0f, 20, b[i].scales, &b[i].d, &b[i].dmin, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

// Q4_K · Q8_K: per sub-block integer sums; mins via the Q8_K bsums (sum of 16 activations each).
void bn_dot_q4_K_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q4_K *x = vx;
    const bn_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            bn_k_scale_min(j, x[i].scales, &sc, &mn);
            int c = j / 2, hi = j & 1;
            int isum = 0;
            for (int l = 0; l < 32; l++) {
                int q = hi ? x[i].qs[32 * c + l] >> 4 : x[i].qs[32 * c + l] & 0xf;
                isum += q * y[i].qs[32 * j + l];
            }
            sum_q += sc * isum;
            sum_m += mn * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        float d = bn_h2f(x[i].d) * y[i].d;
        float dmin = bn_h2f(x[i].dmin) * y[i].d;
        sumf += d * (float)sum_q - dmin * (float)sum_m;
    }
    *s = sumf;
}
