// tests/quant/test_lossless.c — docs/formats.md §3.10: dequantize -> fp16 -> fp32 -> reference quantize
// reproduces Q1_0 and Q2_0 (g64 and g128/PQ2_0) blocks byte for byte, except d = 0 blocks (Q1_0: all
// bits 1; Q2_0: all codes 1) and Q2_0 blocks with no nonzero code (come back with d = 0, codes 1).
// Also shows why bf16 must not be used: an fp16 scale is generally not representable in bf16.
#include "quant/quant.h"
#include "tests/test.h"
#include <string.h>

enum { NBLK = 4096 };

static uint64_t rng = 0xA4093822299F31D0ULL;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }

// A random non-negative finite fp16 scale: normal, subnormal, tiny, near max; 1 in 16 is exactly 0.
static uint16_t random_scale(void) {
    uint32_t r = next_u32();
    switch (r % 16) {
    case 0: return 0;
    case 1: return (uint16_t)(1 + next_u32() % 0x3ff);           // subnormal
    case 2: return (uint16_t)(0x7800 + next_u32() % 0x3ff);      // up to 65504
    default: return (uint16_t)(next_u32() % 0x7c00);              // any finite >= 0
    }
}

// Unpacks n elements through fp16 (as a merge tool writes them) and re-quantizes with the reference.
static void unpack_requant(int type, const void *in, void *out, int n) {
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(n * sizeof *h);
    bn_dequantize(type, in, f, n);
    bn_fp32_to_fp16_row(f, h, n);
    bn_fp16_to_fp32_row(h, f, n);
    memset(out, 0xEE, bn_row_size(type, n));
    bn_quantize_ref(type, f, out, n);
    free(f);
    free(h);
}

static void test_q1_0(void) {
    bn_block_q1_0 *a = malloc(NBLK * sizeof *a), *b = malloc(NBLK * sizeof *b);
    for (int i = 0; i < NBLK; i++) {
        a[i].d = random_scale();
        for (int k = 0; k < 16; k++) a[i].qs[k] = (uint8_t)next_u32();
    }
    unpack_requant(BN_Q1_0, a, b, NBLK * 128);
    int same = 0, zero_ok = 0, bad = 0, zeros = 0;
    for (int i = 0; i < NBLK; i++) {
        if (a[i].d == 0) {
            zeros++;
            bool all_ones = true;
            for (int k = 0; k < 16; k++) all_ones &= b[i].qs[k] == 0xff;
            if (b[i].d == 0 && all_ones) zero_ok++; else bad++;
        } else if (memcmp(&a[i], &b[i], sizeof a[i]) == 0) same++;
        else bad++;
    }
    printf("Q1_0: %d blocks identical, %d d=0 blocks -> all bits 1 (%d ok), %d wrong\n", same, zeros, zero_ok, bad);
    CHECK(bad == 0, "Q1_0: %d blocks not reproduced", bad);
    CHECK(same + zero_ok == NBLK, "Q1_0: accounted %d of %d blocks", same + zero_ok, NBLK);
    free(a); free(b);
}

// Q2_0 codec shared by both layouts: d at offset 0, then qk/4 code bytes; codes drawn from {0,1,2}.
static void test_q2(int type, int qk) {
    int bs = bn_type_size(type);
    uint8_t *a = malloc((size_t)NBLK * bs), *b = malloc((size_t)NBLK * bs);
    for (int i = 0; i < NBLK; i++) {
        uint8_t *blk = a + (size_t)i * bs;
        uint16_t d = random_scale();
        memcpy(blk, &d, 2);
        bool all_zero_codes = next_u32() % 16 == 0;
        for (int k = 0; k < qk / 4; k++) {
            uint8_t byte = 0;
            for (int e = 0; e < 4; e++) byte |= (uint8_t)((all_zero_codes ? 1 : next_u32() % 3) << (2 * e));
            blk[2 + k] = byte;
        }
    }
    unpack_requant(type, a, b, NBLK * qk);
    int same = 0, degenerate_ok = 0, bad = 0, degenerate = 0;
    for (int i = 0; i < NBLK; i++) {
        const uint8_t *x = a + (size_t)i * bs, *y = b + (size_t)i * bs;
        uint16_t d;
        memcpy(&d, x, 2);
        bool any_nonzero = false;
        for (int e = 0; e < qk; e++) any_nonzero |= ((x[2 + e / 4] >> (2 * (e % 4))) & 3) != 1;
        if (d == 0 || !any_nonzero) {
            degenerate++;
            bool ok = y[0] == 0 && y[1] == 0;
            for (int k = 0; k < qk / 4; k++) ok &= y[2 + k] == 0x55;   // all codes 1
            if (ok) degenerate_ok++; else bad++;
        } else if (memcmp(x, y, bs) == 0) same++;
        else bad++;
    }
    printf("%s: %d blocks identical, %d degenerate (d=0 or all-zero codes) -> d=0/codes 1 (%d ok), %d wrong\n",
           bn_type_name(type), same, degenerate, degenerate_ok, bad);
    CHECK(bad == 0, "%s: %d blocks not reproduced", bn_type_name(type), bad);
    CHECK(same + degenerate_ok == NBLK, "%s: accounted %d of %d blocks", bn_type_name(type), same + degenerate_ok, NBLK);
    free(a); free(b);
}

int main(void) {
    test_q1_0();
    test_q2(BN_Q2_0, 64);
    test_q2(BN_PQ2_0, 128);
    // The bf16 warning of §3.2: an fp16 scale with low significand bits set does not survive bf16.
    uint16_t h = 0x3c01;   // 1 + 2^-10
    float through_bf16 = bn_bf16_to_fp32(bn_fp32_to_bf16(bn_fp16_to_fp32(h)));
    CHECK(bn_fp32_to_fp16(through_bf16) != h, "fp16 0x3c01 should not survive a bf16 round trip");
    return test_done("test_lossless");
}
