// quant/fp16.c — fp16 / bf16 scalar conversions and the bf16 rows (docs/formats.md §3.1–3.2), bit-exact with ggml.
// The fp16 rows (the F16C kernel or this scalar conversion per element) are chosen in quant/rows.c.
#include "quant/quant_impl.h"

uint16_t bn_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;          // NaN -> quiet NaN, sign kept
    if (ax >= 0x477ff000u) return sign | 0x7c00;         // |x| >= 65520 (and inf) -> inf
    if (ax >= 0x38800000u) {                             // fp16 normal range (|x| >= 2^-14)
        uint32_t lsb = (ax >> 13) & 1;                   // round to nearest even at bit 13
        uint32_t rounded = ax - 0x38000000u + 0x0fffu + lsb;   // rebias exponent 127 -> 15
        return sign | (uint16_t)(rounded >> 13);
    }
    int exp = (int)(ax >> 23);
    if (exp < 102) return sign;                          // < 2^-25: rounds to zero (ties to even)
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;        // value = mant * 2^(exp-150)
    int shift = 126 - exp;                               // fp16 subnormal unit is 2^-24
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;     // may carry into the smallest normal: fine
    return sign | (uint16_t)q;
}

float bn_fp16_to_fp32(uint16_t h) { return bn_h2f(h); }

uint16_t bn_fp32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040);   // quiet NaN
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
}

float bn_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void bn_bf16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = bn_bf16_to_fp32(x[i]);
}

void bn_fp32_to_bf16_row(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = bn_fp32_to_bf16(x[i]);
}
