// quant/q5_bits.h — internal to quant/: the 5-bit code layout Q5_0 and Q5_1 share (32 codes: low
// nibbles in qs[16] as Q4_0, element j's fifth bit in bit j of the little-endian u32 qh).
#ifndef BONSAI_Q5_BITS_H
#define BONSAI_Q5_BITS_H
#include <stdint.h>
#include <string.h>

// q5_code: the 5-bit code of element j (0..31) of a block.
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j) {
    int low = j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
    return low | (int)(((qh >> j) & 1) << 4);
}

// q5_store: packs 32 codes (0..31) into qs and qh.
static inline void q5_store(const uint8_t codes[32], uint8_t qs[16], uint8_t qh_bytes[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((codes[j] & 0x0f) | ((codes[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)((codes[j] >> 4) & 1) << j;
        qh |= (uint32_t)((codes[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh_bytes, &qh, sizeof qh);
}

// q5_dot_codes: sum over the block of (code_j - offset) * y[j].
static inline int q5_dot_codes(const uint8_t *qs, const uint8_t qh_bytes[4], int offset, const int8_t *y) {
    uint32_t qh;
    memcpy(&qh, qh_bytes, sizeof qh);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += (q5_code(qs, qh, j) - offset) * y[j];
    return sum;
}
#endif
