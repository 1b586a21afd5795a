// quant/q6_k.c — Q6_K (id 14): 256 elements = 16 sub-blocks of 16 with int8 scales under fp16 d
// (stored last); 6-bit codes split into ql (low 4) and qh (high 2). Reference quantizer, bit-exact.
#include "quant/quant_impl.h"

#define GROUP_MAX_EPS 1e-15f

void bn_q6_K_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_q6_K *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = bn_h2f(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            float *y = dst + i * 256 + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

// make_qx (rmse_type 1, weights x^2): symmetric scale search for n codes in [-nmax, nmax-1];
// L gets code + nmax; returns the scale (0 for an all-(near-)zero group).
static float make_qx(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = bn_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = bn_nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = bn_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void bn_q6_K_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_q6_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + i * 256;
        int8_t L[256];
        float scales[16];
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = make_qx(16, 32, x + 16 * ib, L + 16 * ib);
            float abs_scale = fabsf(scales[ib]);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scales[ib]; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -128.0f / max_scale;
        b[i].d = bn_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int v = bn_nearest_int(iscale * scales[ib]);
            b[i].scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            float d = bn_h2f(b[i].d) * b[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                int q = bn_nearest_int(x[16 * j + l] / d);   // division, as in ggml
                q = q < -32 ? -32 : q > 31 ? 31 : q;
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xf) | ((Lh[l + 64] & 0xf) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xf) | ((Lh[l + 96] & 0xf) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

// Unpacks the 256 signed 6-bit codes (q - 32) of one block in element order.
static void q6k_codes(const bn_block_q6_K *b, int8_t *q) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

// Q6_K · Q8_K: integer sum over 16-element sub-blocks times the int8 scale; block times d*dy.
void bn_dot_q6_K_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q6_K *x = vx;
    const bn_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        int8_t q[256];
        q6k_codes(&x[i], q);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            int isum = 0;
            for (int l = 0; l < 16; l++) isum += q[16 * j + l] * y[i].qs[16 * j + l];
            sum += x[i].scales[j] * isum;
        }
        sumf += bn_h2f(x[i].d) * y[i].d * (float)sum;
    }
    *s = sumf;
}
