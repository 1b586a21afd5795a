// quantize/fast.c — fused fp16/fp32 → Q1_0 / Q2_0 / PQ2_0 kernels (AVX2 + F16C), bit-identical
// to the reference quantizers in q1_0.c / q2_0.c:
// - Q1_0 needs Σ|x| accumulated in element order in fp32, so 8 blocks are processed side by side,
//   one block per SIMD lane (8×8 transposes), each lane adding its own block's elements in order.
// - Q2_0 uses max|x| (order-free) and code = 1 + sign(v)·[|v| ≥ 0.5] for v = x·(1/d), which equals
//   clamp(roundf(v) + 1, 0, 3) for |v| < 1.5; blocks with NaN/Inf (or 1/d overflowing) use the reference.
#include "quantize/fast.h"
#include "quant/quant.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BN_X86 1
#endif

// reference_blocks: the generic path for a few blocks (tails, NaN/Inf blocks).
static void reference_blocks(int src_type, const void *src, int dst_type, void *dst, int64_t n) {
    float buf[8 * 128];
    int64_t step = 8 * 128;
    size_t src_elem = src_type == BN_F32 ? 4 : 2;
    int blck = bn_type_blck(dst_type);
    size_t dst_block = (size_t)bn_type_size(dst_type);
    for (int64_t i = 0; i < n; i += step) {
        int64_t k = n - i < step ? n - i : step;
        bn_dequantize(src_type, (const uint8_t *)src + (size_t)i * src_elem, buf, k);
        bn_quantize_ref(dst_type, buf, (uint8_t *)dst + (size_t)(i / blck) * dst_block, k);
    }
}

#ifdef BN_X86
#define TARGET __attribute__((target("avx2,f16c")))

TARGET static inline __m256 load8(const void *src, bool f16, int64_t idx) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + idx)));
    return _mm256_loadu_ps((const float *)src + idx);
}

TARGET static inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

// transpose8: r[m] lane k ← r[k] lane m.
TARGET static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// q1_0_x8: quantizes 8 consecutive Q1_0 blocks (1024 elements starting at element e0).
TARGET static void q1_0_x8(const void *src, bool f16, int64_t e0, bn_block_q1_0 *out) {
    __m256 acc = _mm256_setzero_ps();
    const __m256 zero = _mm256_setzero_ps();
    for (int j = 0; j < 128; j += 8) {
        __m256 r[8];
        for (int k = 0; k < 8; k++) {
            __m256 x = load8(src, f16, e0 + 128 * k + j);
            out[k].qs[j >> 3] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(x, zero, _CMP_GE_OQ));
            r[k] = abs8(x);
        }
        transpose8(r);
        for (int m = 0; m < 8; m++) acc = _mm256_add_ps(acc, r[m]); // lane k: block k, element order
    }
    float sums[8];
    _mm256_storeu_ps(sums, acc);
    for (int k = 0; k < 8; k++) out[k].d = bn_fp32_to_fp16(sums[k] / 128);
}

// spread8: bit i of b → bit 2i.
static uint16_t spread8(unsigned b) {
    uint16_t r = 0;
    for (int i = 0; i < 8; i++) r |= (uint16_t)(((b >> i) & 1u) << (2 * i));
    return r;
}
static uint16_t spread_tab[256];
static void init_spread(void) {
    for (unsigned b = 0; b < 256; b++) spread_tab[b] = spread8(b);
}

// q2_group: one Q2_0 group of qk elements at element e0 → d, qs; false if the reference must do it.
TARGET static bool q2_group(const void *src, bool f16, int64_t e0, int qk, uint16_t *hd, uint8_t *qs) {
    __m256 amax = _mm256_setzero_ps();
    __m256 bad = _mm256_setzero_ps();
    const __m256 inf = _mm256_set1_ps(INFINITY);
    for (int j = 0; j < qk; j += 8) {
        __m256 a = abs8(load8(src, f16, e0 + j));
        amax = _mm256_max_ps(amax, a);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); // NaN or Inf
    }
    if (_mm256_movemask_ps(bad)) return false;
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float d = _mm_cvtss_f32(m4);
    float id = d > 0.0f ? 1.0f / d : 0.0f;
    if (isinf(id)) return false;
    *hd = bn_fp32_to_fp16(d);
    const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), mhalf = _mm256_set1_ps(-0.5f);
    for (int j = 0; j < qk; j += 8) {
        __m256 v = _mm256_mul_ps(load8(src, f16, e0 + j), vid);
        unsigned pos = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, half, _CMP_GE_OQ));
        unsigned neg = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, mhalf, _CMP_LE_OQ));
        unsigned zero = ~(pos | neg) & 0xffu;
        uint16_t codes = (uint16_t)(spread_tab[zero] | (spread_tab[pos] << 1)); // 0 → 01, + → 10, − → 00
        qs[j >> 2] = (uint8_t)codes;
        qs[(j >> 2) + 1] = (uint8_t)(codes >> 8);
    }
    return true;
}

static void q1_0_fast(int src_type, const void *src, void *dst, int64_t n) {
    bool f16 = src_type == BN_F16;
    bn_block_q1_0 *out = dst;
    int64_t nb = n / 128, nb8 = nb / 8 * 8;
    for (int64_t b = 0; b < nb8; b += 8) q1_0_x8(src, f16, b * 128, out + b);
    if (nb8 < nb)
        reference_blocks(src_type, (const uint8_t *)src + (size_t)nb8 * 128 * (f16 ? 2 : 4), BN_Q1_0, out + nb8,
                         (nb - nb8) * 128);
}

static void q2_fast(int src_type, const void *src, int dst_type, void *dst, int64_t n) {
    bool f16 = src_type == BN_F16;
    int qk = dst_type == BN_Q2_0 ? 64 : 128;
    size_t bsize = (size_t)bn_type_size(dst_type);
    size_t esize = f16 ? 2 : 4;
    for (int64_t b = 0; b < n / qk; b++) {
        uint8_t *blk = (uint8_t *)dst + (size_t)b * bsize;
        uint16_t hd;
        if (q2_group(src, f16, b * qk, qk, &hd, blk + 2)) {
            memcpy(blk, &hd, 2);
        } else {
            reference_blocks(src_type, (const uint8_t *)src + (size_t)(b * qk) * esize, dst_type, blk, qk);
        }
    }
}

static int simd_ok;
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static void init_simd(void) {
    init_spread();
    simd_ok = bn_cpu_has_avx2();
}

bool bn_quantize_fast(int src_type, const void *src, int dst_type, void *dst, int64_t n) {
    if (src_type != BN_F16 && src_type != BN_F32) return false;
    if (dst_type != BN_Q1_0 && dst_type != BN_Q2_0 && dst_type != BN_PQ2_0) return false;
    pthread_once(&simd_once, init_simd);
    if (!simd_ok) return false;
    if (dst_type == BN_Q1_0) q1_0_fast(src_type, src, dst, n);
    else q2_fast(src_type, src, dst_type, dst, n);
    return true;
}

#else
bool bn_quantize_fast(int src_type, const void *src, int dst_type, void *dst, int64_t n) {
    (void)src_type, (void)src, (void)dst_type, (void)dst, (void)n;
    (void)reference_blocks;
    return false;
}
#endif
