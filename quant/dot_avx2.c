// quant/dot_avx2.c — AVX2/FMA/F16C vec_dot kernels for the hot weight types (one row at a time; the
// mat-vec kernels with prepared activations are in matvec_avx2.c). Called only through dot.c's dispatch
// when the CPU supports AVX2+FMA+F16C. Integer sums per 32-element block are exact; only the fp32
// accumulation order differs from the scalar references.
#pragma GCC target("avx2,fma,f16c")
#include "quant/simd_avx2.h"

// Expands 32 bits (LSB first) to 32 bytes of +1 (bit set) / -1 (bit clear).
static inline __m256i bits_to_pm1(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), _mm256_setzero_si256());   // -1 where 0
    return _mm256_or_si256(clear, _mm256_set1_epi8(1));
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

// ---- float dots -------------------------------------------------------------------------------
void bn_dot_f32_avx2(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

void bn_dot_f16_avx2(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        __m256 y1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8)));
        acc0 = _mm256_fmadd_ps(x0, y0, acc0);
        acc1 = _mm256_fmadd_ps(x1, y1, acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += h2f(x[i]) * h2f(y[i]);
    *s = sum;
}

// ---- Q1_0 · Q8_0 ------------------------------------------------------------------------------
void bn_dot_q1_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q1_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < n / 128; i++) {
        float dx = h2f(x[i].d);
        for (int k = 0; k < 4; k++) {
            const bn_block_q8_0 *yb = &y[4 * i + k];
            __m256i q = _mm256_loadu_si256((const __m256i *)yb->qs);
            __m256i pm = bits_to_pm1(load_u32(x[i].qs + 4 * k));
            __m256i isum = dot_u8i8(ones, _mm256_sign_epi8(q, pm));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dx * h2f(yb->d)), acc[k]);
        }
    }
    *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// ---- Q2_0 (g64 and g128) · Q8_0 ---------------------------------------------------------------
// 8 code bytes (32 elements) -> 32 code bytes, but transposed within each 128-bit lane: byte 4g+b of
// lane L holds the code of element 16L + 4b + g. q8_transpose applies the same permutation to the
// activations, so maddubs pairs each code with its own activation.
static inline __m256i codes_transposed(const uint8_t *qs) {
    const __m256i shuf = _mm256_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3,
                                          4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    uint64_t v;
    memcpy(&v, qs, sizeof v);
    __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)v), shuf);
    __m256i shifted = _mm256_srlv_epi32(rep, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(3));
}

static inline __m256i q8_transpose(__m256i q) {
    const __m256i t = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                       0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm256_shuffle_epi8(q, t);
}

// Integer sum of (code - 1) * q over one Q8_0 block, as 8 int32 lanes.
static inline __m256i q2_block_isum(const uint8_t *qs, const int8_t *yq) {
    __m256i qt = q8_transpose(_mm256_loadu_si256((const __m256i *)yq));
    __m256i c = codes_transposed(qs);
    __m256i cq = _mm256_maddubs_epi16(c, qt);
    __m256i sq = _mm256_maddubs_epi16(_mm256_set1_epi8(1), qt);   // same pairing: lanes are true partial sums
    return _mm256_madd_epi16(_mm256_sub_epi16(cq, sq), _mm256_set1_epi16(1));
}

void bn_dot_q2_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q2_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < n / 64; i++) {
        float dx = h2f(x[i].d);
        for (int k = 0; k < 2; k++) {
            const bn_block_q8_0 *yb = &y[2 * i + k];
            __m256i isum = q2_block_isum(x[i].qs + 8 * k, yb->qs);
            acc[2 * (i & 1) + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dx * h2f(yb->d)), acc[2 * (i & 1) + k]);
        }
    }
    *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void bn_dot_pq2_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_pq2_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < n / 128; i++) {
        float dx = h2f(x[i].d);
        for (int k = 0; k < 4; k++) {
            const bn_block_q8_0 *yb = &y[4 * i + k];
            __m256i isum = q2_block_isum(x[i].qs + 8 * k, yb->qs);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dx * h2f(yb->d)), acc[k]);
        }
    }
    *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// ---- Q4_0 / Q8_0 · Q8_0 -------------------------------------------------------------------------
void bn_dot_q4_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q4_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    const __m256i low = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < n / 32; i++) {
        __m128i packed = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);   // lo nibbles | hi nibbles
        __m256i qx = _mm256_sub_epi8(_mm256_and_si256(both, low), eight);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i isum = dot_i8i8(qx, qy);
        acc[i & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc[i & 3]);
    }
    *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void bn_dot_q8_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q8_0 *x = vx;
    const bn_block_q8_0 *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < n / 32; i++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        // Exact for x = -128 too (|x| reads as unsigned 128); y = -128 never comes from the quantizer.
        __m256i isum = dot_i8i8(qx, qy);
        acc[i & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc[i & 3]);
    }
    *s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// ---- Q6_K · Q8_K --------------------------------------------------------------------------------
// Per 32 codes c in 0..63: sum((c - 32) * q * sc) = sum(c * q * sc) - 32 * sum(sc * bsum); integer-exact.
void bn_dot_q6_K_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q6_K *x = vx;
    const bn_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            const int8_t *q8 = y[i].qs + 128 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i c[4];
            c[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            c[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                __m256i p16 = _mm256_maddubs_epi16(c[k], q);                 // 16 x int16, 8 per sub-block
                __m256i scv = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * k]), _mm_set1_epi16(sc[2 * k + 1]));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, scv));
            }
        }
        // Offset term: 32 * sum_j sc_j * bsum_j over the 16 sub-blocks.
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        int offset = hsum_epi32(_mm256_madd_epi16(sc16, bs));
        int isum = hsum_epi32(acc) - 32 * offset;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    *s = sumf;
}

// ---- Q4_K · Q8_K --------------------------------------------------------------------------------
// Integer-exact per block: sum_j sc_j * sum(q4 * q8) and sum_j mn_j * (bsum pairs); same final fp32
// expression as the scalar reference.
void bn_dot_q4_K_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_q4_K *x = vx;
    const bn_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = x[i].scales;
            if (j < 4) {
                sc[j] = q[j] & 63;
                mn[j] = q[j + 4] & 63;
            } else {
                sc[j] = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
                mn[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
            }
        }
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i packed = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            __m256i lo = _mm256_and_si256(packed, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), m4);
            __m256i qa = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c));
            __m256i qb = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, qa), _mm256_set1_epi16(sc[2 * c])));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, qb), _mm256_set1_epi16(sc[2 * c + 1])));
        }
        int sum_m = 0;
        for (int j = 0; j < 8; j++) sum_m += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        float d = h2f(x[i].d) * y[i].d;
        float dmin = h2f(x[i].dmin) * y[i].d;
        sumf += d * (float)hsum_epi32(acc) - dmin * (float)sum_m;
    }
    *s = sumf;
}

// ---- TQ2_0 · Q8_K ---------------------------------------------------------------------------------
// Element 128c + 32k + m is bits 2k..2k+1 of qs[32c + m]: shifting the 32 code bytes right by 2k gives
// the codes of 32 consecutive elements. sum((c-1)q) = sum(c*q) - sum(bsums); integer-exact.
void bn_dot_tq2_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const bn_block_tq2_0 *x = vx;
    const bn_block_q8_K *y = vy;
    const __m256i three = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int i = 0; i < n / 256; i++) {
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 2; c++) {
            __m256i packed = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            for (int k = 0; k < 4; k++) {
                __m256i codes = _mm256_and_si256(_mm256_srli_epi16(packed, 2 * k), three);
                __m256i q = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * c + 32 * k));
                acc = _mm256_add_epi32(acc, dot_u8i8(codes, q));
            }
        }
        __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        int sum_q = hsum_epi32(_mm256_madd_epi16(bs, _mm256_set1_epi16(1)));
        int sum = hsum_epi32(acc) - sum_q;
        sumf += (float)sum * (h2f(x[i].d) * y[i].d);
    }
    *s = sumf;
}
