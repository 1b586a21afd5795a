// quant/tq.c — base-3 and 2-bit ternary formats: TQ1_0 (34), TQ2_0 (35), PTQ1_0 (143) (docs/formats.md §3.4).
// TQ1_0/PTQ1_0 pack 5 trits per qs byte and 4 per qh byte as ceil(V*256/243) with the first trit most
// significant; stage widths 32,16 (TQ1_0) or 16,8 (PTQ1_0). d = amax, trit = lroundf(x/d) + 1.
#include "quant/quant_impl.h"

// Base-3 layout of one block: qs stages (bytes per stage, 5 trits each), then qh bytes (4 trits each).
typedef struct {
    int nstage;
    int stage_width[2];
    int nqh;
} trit_layout;

static const trit_layout TQ1_LAYOUT = {2, {32, 16}, 4};    // 160 + 80 + 16 = 256 elements
static const trit_layout PTQ1_LAYOUT = {2, {16, 8}, 2};    // 80 + 40 + 8 = 128 elements

static uint8_t pack_trits(const float *x, int stride, int count, float id, int pad) {
    uint8_t q = 0;
    for (int n = 0; n < count; n++) q = (uint8_t)(q * 3 + (lroundf(x[n * stride] * id) + 1));
    for (int n = 0; n < pad; n++) q = (uint8_t)(q * 3);      // qh: shift to the top trit
    return (uint8_t)(((uint16_t)q * 256 + 242) / 243);       // ceiling division
}

static int trit_of(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t q = (uint8_t)(byte * pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

// Encodes one block of x (len elements) into qs/qh.
static void trit_encode(const trit_layout *L, const float *x, float id, uint8_t *qs, uint8_t *qh) {
    for (int s = 0; s < L->nstage; s++) {
        int w = L->stage_width[s];
        for (int m = 0; m < w; m++) qs[m] = pack_trits(x + m, w, 5, id, 0);
        qs += w;
        x += 5 * w;
    }
    for (int j = 0; j < L->nqh; j++) qh[j] = pack_trits(x + j, L->nqh, 4, id, 1);
}

// Decodes one block into signed trits t-1 in element order.
static void trit_decode(const trit_layout *L, const uint8_t *qs, const uint8_t *qh, int8_t *t) {
    for (int s = 0; s < L->nstage; s++) {
        int w = L->stage_width[s];
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < w; m++) t[n * w + m] = (int8_t)(trit_of(qs[m], n) - 1);
        qs += w;
        t += 5 * w;
    }
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < L->nqh; j++) t[n * L->nqh + j] = (int8_t)(trit_of(qh[j], n) - 1);
}

void bn_tq1_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_tq1_0 *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t t[256];
        trit_decode(&TQ1_LAYOUT, b[i].qs, b[i].qh, t);
        float d = bn_h2f(b[i].d);
        for (int j = 0; j < 256; j++) dst[i * 256 + j] = (float)t[j] * d;
    }
}

void bn_tq1_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_tq1_0 *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + i * 256;
        float d = bn_amax_ref(x, 256);
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        trit_encode(&TQ1_LAYOUT, x, id, b[i].qs, b[i].qh);
    }
}

void bn_ptq1_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_ptq1_0 *b = src;
    for (int64_t i = 0; i < n / 128; i++) {
        int8_t t[128];
        trit_decode(&PTQ1_LAYOUT, b[i].qs, b[i].qh, t);
        float d = bn_h2f(b[i].d);
        for (int j = 0; j < 128; j++) dst[i * 128 + j] = (float)t[j] * d;
    }
}

void bn_ptq1_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_ptq1_0 *b = dst;
    for (int64_t i = 0; i < n / 128; i++) {
        const float *x = src + i * 128;
        float d = bn_amax_ref(x, 128);
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        trit_encode(&PTQ1_LAYOUT, x, id, b[i].qs, b[i].qh);
    }
}

// TQ2_0: element 128c + 32n + m is bits 2n..2n+1 of qs[32c + m].
void bn_tq2_0_to_float(const void *src, float *dst, int64_t n) {
    const bn_block_tq2_0 *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = bn_h2f(b[i].d);
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++) {
                    int code = (b[i].qs[32 * c + m] >> (2 * k)) & 3;
                    dst[i * 256 + 128 * c + 32 * k + m] = (float)(code - 1) * d;
                }
    }
}

void bn_tq2_0_from_float_ref(const float *src, void *dst, int64_t n) {
    bn_block_tq2_0 *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + i * 256;
        float d = bn_amax_ref(x, 256);
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = bn_fp32_to_fp16(d);
        for (int c = 0; c < 2; c++)
            for (int m = 0; m < 32; m++) {
                uint8_t q = 0;
                for (int k = 0; k < 4; k++) {
                    int code = (int)lroundf(x[128 * c + 32 * k + m] * id) + 1;
                    q = (uint8_t)(q + ((code & 3) << (2 * k)));
                }
                b[i].qs[32 * c + m] = q;
            }
    }
}

// ---- dots -------------------------------------------------------------------------------------
void bn_dot_tq1_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_tq1_0 *x = vx;
    const bn_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        int8_t t[256];
        trit_decode(&TQ1_LAYOUT, x[i].qs, x[i].qh, t);
        int sum = 0;
        for (int j = 0; j < 256; j++) sum += t[j] * y[i].qs[j];
        sumf += (float)sum * (bn_h2f(x[i].d) * y[i].d);
    }
    *s = sumf;
}

void bn_dot_tq2_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_tq2_0 *x = vx;
    const bn_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        int sum = 0;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++) {
                    int code = (x[i].qs[32 * c + m] >> (2 * k)) & 3;
                    sum += (code - 1) * y[i].qs[128 * c + 32 * k + m];
                }
        sumf += (float)sum * (bn_h2f(x[i].d) * y[i].d);
    }
    *s = sumf;
}

// PTQ1_0 · Q8_0: one block spans four Q8_0 blocks (same structure as Q1_0).
void bn_dot_ptq1_0_ref(int n, float *s, const void *vx, const void *vy) {
    const bn_block_ptq1_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / 128; i++) {
        int8_t t[128];
        trit_decode(&PTQ1_LAYOUT, x[i].qs, x[i].qh, t);
        float block_sum = 0.0f;
        for (int k = 0; k < 4; k++) {
            int isum = 0;
            for (int j = 0; j < 32; j++) isum += t[32 * k + j] * y[4 * i + k].qs[j];
            block_sum += bn_h2f(y[4 * i + k].d) * (float)isum;
        }
        sumf += bn_h2f(x[i].d) * block_sum;
    }
    *s = sumf;
}
