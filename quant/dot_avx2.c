// quant/dot_avx2.c — AVX2/FMA/F16C kernels: vec_dots for the hot weight types, activation quantizers
// (bit-identical to the scalar references), fp16 row conversions. Called only through dot.c's dispatch
// when the CPU supports AVX2+FMA+F16C. Integer sums per 32-element block are exact; only the fp32
// accumulation order differs from the scalar references.
#pragma GCC target("avx2,fma,f16c")
#include "quant/quant_impl.h"
#include <immintrin.h>

// ---- helpers ----------------------------------------------------------------------------------
static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float h2f(bn_half h) { return _cvtsh_ss(h); }

// Sum of a (unsigned bytes) * b (signed bytes), as 8 int32 lanes.
static inline __m256i dot_u8i8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// Sum of a (signed bytes) * b (signed bytes) via the sign trick, as 8 int32 lanes (|a| <= 127).
static inline __m256i dot_i8i8(__m256i a, __m256i b) {
    return dot_u8i8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

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

// ---- activation quantizers (bit-identical to the references) ----------------------------------
// roundf: ties away from zero, via truncation plus a correction on |fraction| >= 0.5 (exact).
static inline __m256 roundf_ps(__m256 v) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, t));
    __m256 need = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign_mask), _mm256_set1_ps(1.0f));   // copysign(1, v)
    return _mm256_add_ps(t, _mm256_and_ps(need, step));
}

// Packs 4 x 8 int32 (each in int8 range) into 32 int8 in order.
static inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b);
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline float block_amax32(const float *x) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x));
    for (int k = 1; k < 4; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 8 * k)));
    return hmax_ps(m);
}

// Quantizes 32 floats with roundf(x*id) into int8; returns them as a vector.
static inline __m256i q8_round32(const float *x, float id) {
    __m256 vid = _mm256_set1_ps(id);
    __m256i r[4];
    for (int k = 0; k < 4; k++)
        r[k] = _mm256_cvtps_epi32(roundf_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid)));
    return pack_i32_to_i8(r[0], r[1], r[2], r[3]);
}

void bn_quantize_row_q8_0_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float amax = block_amax32(x + 32 * i);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = bn_fp32_to_fp16(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, q8_round32(x + 32 * i, id));
    }
}

void bn_quantize_row_q8_1_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float amax = block_amax32(x + 32 * i);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = bn_fp32_to_fp16(d);
        __m256i q = q8_round32(x + 32 * i, id);
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
        int sum = hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
        y[i].s = bn_fp32_to_fp16((float)sum * d);
    }
}

void bn_quantize_row_q8_K_avx2(const float *x, void *vy, int64_t n) {
    bn_block_q8_K *y = vy;
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 256; i++) {
        const float *xb = x + 256 * i;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(xb + 8 * k)));
        float amax = hmax_ps(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;   // the reference keeps the first element reaching amax (its sign matters)
        while (first < 256 && fabsf(xb[first]) != amax) first++;
        if (first == 256) {   // NaN in the block: let the reference define the result
            bn_q8_K_from_float_ref(xb, &y[i], 256);
            continue;
        }
        float iscale = -127.0f / xb[first];
        __m256 vs = _mm256_set1_ps(iscale);
        for (int k = 0; k < 8; k++) {
            __m256i r[4];
            for (int j = 0; j < 4; j++) {
                __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * k + 8 * j), vs),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r[j] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
            }
            __m256i q = pack_i32_to_i8(r[0], r[1], r[2], r[3]);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), q);
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);        // pair sums
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));        // sums of 4: lanes 0-3, 4-7
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            __m128i h = _mm_hadd_epi32(lo, hi);                                // 2 sums of 8 per half
            h = _mm_hadd_epi32(h, h);                                          // sums of 16: [lo, hi, ..]
            y[i].bsums[2 * k] = (int16_t)_mm_cvtsi128_si32(h);
            y[i].bsums[2 * k + 1] = (int16_t)_mm_extract_epi32(h, 1);
        }
        y[i].d = 1 / iscale;
    }
}

// ---- fp16 rows (F16C rounds to nearest even: identical to bn_fp32_to_fp16) ----------------------
void bn_fp16_to_fp32_row_f16c(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

void bn_fp32_to_fp16_row_f16c(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {   // NaN: F16C keeps payload bits,
            for (int k = 0; k < 8; k++) y[i + k] = bn_fp32_to_fp16(x[i + k]);   // the reference does not
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = bn_fp32_to_fp16(x[i]);
}

// ---- mat-vec with prepared activations (bn_vec_dot_rows) -----------------------------------------
// For Q1_0 / Q2_0 / PQ2_0 the Q8_0 activation row is prepared once per mat-vec so the per-row inner loop
// is broadcast + variable shift + mask + maddubs: the activation bytes of each 32-block are permuted to
// the order in which the shifted weight bytes come out, the fp16 scales are converted once, and the
// activation block sums are pre-multiplied so that sum((2b-1)q) = 2*sum(b*q) - sum(q) (Q1_0) and
// sum((c-1)q) = sum(c*q) - sum(q) (Q2_0) need no per-element correction.
typedef struct {
    int8_t *q;     // {32, nb} permuted codes, 32-byte aligned
    float *d;      // {nb} activation scales
    float *t;      // {nb / per_weight_block} sum over the weight block's Q8_0 blocks of d_k * sum(q_k)
} prepared_q8;

// Permutes one block's 32 activation bytes into the order the weight expansion produces.
// Q1_0: byte 4s+b <- element 8b+s. In-lane shuffle makes word s of lane L = (elements 16L+s, 16L+8+s);
// permute4x64 pairs the lanes' qwords; a second in-lane shuffle interleaves the words.
static inline __m256i permute_q1(__m256i q) {
    const __m256i s1 = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
                                        0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    const __m256i s2 = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                                        0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    __m256i words = _mm256_shuffle_epi8(q, s1);
    __m256i paired = _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_shuffle_epi8(paired, s2);
}

// Q2_0: byte 8s+b <- element 4b+s. In-lane shuffle makes dword s of lane L = (elements 16L+4b'+s, b'=0..3);
// permutevar8x32 interleaves the lanes' dwords.
static inline __m256i permute_q2(__m256i q) {
    const __m256i s1 = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m256i dwords = _mm256_shuffle_epi8(q, s1);
    return _mm256_permutevar8x32_epi32(dwords, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void prepare_q8(const bn_block_q8_0 *y, int nb, int per_wblock, bool q1, prepared_q8 *P) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int k = 0; k < nb; k++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)y[k].qs);
        _mm256_store_si256((__m256i *)(P->q + 32 * k), q1 ? permute_q1(q) : permute_q2(q));
        int sum = hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
        P->d[k] = h2f(y[k].d);
        if (k % per_wblock == 0) P->t[k / per_wblock] = 0.0f;
        P->t[k / per_wblock] += P->d[k] * (float)sum;
    }
}

// The two row kernels are generated twice: AVX2 (maddubs + madd) and AVX512-VNNI on 256-bit vectors
// (vpdpbusd does both in one instruction). ISUM(u, q) = 8 int32 lanes of sum(u (unsigned) * q (signed)).
#define ISUM_AVX2(u, q) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (q)), _mm256_set1_epi16(1))
#define ISUM_VNNI(u, q) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (q))

// Q1_0: dword lane s of broadcast bits >> s, & 0x01010101 -> byte 4s+b = bit s of byte b = element 8b+s.
#define DEFINE_ROWS_Q1_0(name, ISUM)                                                                       \
static float name(int nb, const bn_block_q1_0 *x, const prepared_q8 *P) {                                   \
    const __m256i shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lsb = _mm256_set1_epi8(1);           \
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};                                             \
    float corr = 0.0f;                                                                                      \
    for (int i = 0; i < nb / 4; i++) {                                                                      \
        float dx = h2f(x[i].d);                                                                             \
        __m256 block = _mm256_setzero_ps();  /* sum_k d_k * isum_k; out-of-order overlaps the blocks */    \
        for (int k = 0; k < 4; k++) {                                                                       \
            uint32_t bits;                                                                                  \
            memcpy(&bits, x[i].qs + 4 * k, 4);                                                              \
            __m256i b = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)bits), shifts), lsb);    \
            __m256i q = _mm256_load_si256((const __m256i *)(P->q + 32 * (4 * i + k)));                     \
            block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(b, q)), _mm256_broadcast_ss(&P->d[4 * i + k]), block); \
        }                                                                                                   \
        acc[i & 1] = _mm256_fmadd_ps(block, _mm256_set1_ps(dx), acc[i & 1]);                               \
        corr += dx * P->t[i];                                                                               \
    }                                                                                                       \
    return 2.0f * hsum_ps(_mm256_add_ps(acc[0], acc[1])) - corr;                                            \
}

// Q2_0 (both layouts): qword lane s of broadcast codes >> 2s, & 3 -> byte 8s+b = element 4b+s.
// per = Q8_0 blocks per weight block (2 for g64, 4 for g128); bs = weight block bytes.
#define DEFINE_ROWS_Q2(name, ISUM)                                                                         \
static float name(int nb, const uint8_t *x, int bs, int per, const prepared_q8 *P) {                        \
    const __m256i shifts = _mm256_setr_epi64x(0, 2, 4, 6), three = _mm256_set1_epi8(3);                    \
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};                                             \
    float corr = 0.0f;                                                                                      \
    for (int i = 0; i < nb / per; i++) {                                                                    \
        const uint8_t *blk = x + (size_t)i * bs;                                                            \
        bn_half hd;                                                                                         \
        memcpy(&hd, blk, 2);                                                                                \
        float dx = h2f(hd);                                                                                 \
        __m256 block = _mm256_setzero_ps();                                                                 \
        for (int k = 0; k < per; k++) {                                                                     \
            int64_t codes;                                                                                  \
            memcpy(&codes, blk + 2 + 8 * k, 8);                                                             \
            __m256i c = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(codes), shifts), three);     \
            int kb = per * i + k;                                                                           \
            __m256i q = _mm256_load_si256((const __m256i *)(P->q + 32 * kb));                               \
            block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(c, q)), _mm256_broadcast_ss(&P->d[kb]), block); \
        }                                                                                                   \
        acc[i & 1] = _mm256_fmadd_ps(block, _mm256_set1_ps(dx), acc[i & 1]);                               \
        corr += dx * P->t[i];                                                                               \
    }                                                                                                       \
    return hsum_ps(_mm256_add_ps(acc[0], acc[1])) - corr;                                                   \
}

// Four activation rows at once: the weight expansion (shift + mask) is shared by the four dots.
#define DEFINE_ROWS4_Q1_0(name, ISUM)                                                                      \
static void name(int nb, const bn_block_q1_0 *x, const prepared_q8 *const P[4], float out[4]) {             \
    const __m256i shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lsb = _mm256_set1_epi8(1);           \
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};   \
    float corr[4] = {0, 0, 0, 0};                                                                           \
    for (int i = 0; i < nb / 4; i++) {                                                                      \
        float dx = h2f(x[i].d);                                                                             \
        __m256 block[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
        for (int k = 0; k < 4; k++) {                                                                       \
            uint32_t bits;                                                                                  \
            memcpy(&bits, x[i].qs + 4 * k, 4);                                                              \
            __m256i b = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)bits), shifts), lsb);    \
            int kb = 4 * i + k;                                                                             \
            for (int j = 0; j < 4; j++) {                                                                   \
                __m256i q = _mm256_load_si256((const __m256i *)(P[j]->q + 32 * kb));                        \
                block[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(b, q)), _mm256_broadcast_ss(&P[j]->d[kb]), block[j]); \
            }                                                                                               \
        }                                                                                                   \
        __m256 dxv = _mm256_set1_ps(dx);                                                                    \
        for (int j = 0; j < 4; j++) {                                                                       \
            acc[j] = _mm256_fmadd_ps(block[j], dxv, acc[j]);                                                \
            corr[j] += dx * P[j]->t[i];                                                                     \
        }                                                                                                   \
    }                                                                                                       \
    for (int j = 0; j < 4; j++) out[j] = 2.0f * hsum_ps(acc[j]) - corr[j];                                 \
}

#define DEFINE_ROWS4_Q2(name, ISUM)                                                                        \
static void name(int nb, const uint8_t *x, int bs, int per, const prepared_q8 *const P[4], float out[4]) {  \
    const __m256i shifts = _mm256_setr_epi64x(0, 2, 4, 6), three = _mm256_set1_epi8(3);                    \
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};   \
    float corr[4] = {0, 0, 0, 0};                                                                           \
    for (int i = 0; i < nb / per; i++) {                                                                    \
        const uint8_t *blk = x + (size_t)i * bs;                                                            \
        bn_half hd;                                                                                         \
        memcpy(&hd, blk, 2);                                                                                \
        float dx = h2f(hd);                                                                                 \
        __m256 block[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
        for (int k = 0; k < per; k++) {                                                                     \
            int64_t codes;                                                                                  \
            memcpy(&codes, blk + 2 + 8 * k, 8);                                                             \
            __m256i c = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(codes), shifts), three);     \
            int kb = per * i + k;                                                                           \
            for (int j = 0; j < 4; j++) {                                                                   \
                __m256i q = _mm256_load_si256((const __m256i *)(P[j]->q + 32 * kb));                        \
                block[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(c, q)), _mm256_broadcast_ss(&P[j]->d[kb]), block[j]); \
            }                                                                                               \
        }                                                                                                   \
        __m256 dxv = _mm256_set1_ps(dx);                                                                    \
        for (int j = 0; j < 4; j++) {                                                                       \
            acc[j] = _mm256_fmadd_ps(block[j], dxv, acc[j]);                                                \
            corr[j] += dx * P[j]->t[i];                                                                     \
        }                                                                                                   \
    }                                                                                                       \
    for (int j = 0; j < 4; j++) out[j] = hsum_ps(acc[j]) - corr[j];                                        \
}

DEFINE_ROWS4_Q1_0(rows4_q1_0_avx2, ISUM_AVX2)
DEFINE_ROWS4_Q2(rows4_q2_avx2, ISUM_AVX2)
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vl,avx512bw,avx512f")
DEFINE_ROWS4_Q1_0(rows4_q1_0_vnni, ISUM_VNNI)
DEFINE_ROWS4_Q2(rows4_q2_vnni, ISUM_VNNI)
#pragma GCC pop_options

DEFINE_ROWS_Q1_0(rows_q1_0_avx2, ISUM_AVX2)
DEFINE_ROWS_Q2(rows_q2_avx2, ISUM_AVX2)
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vl,avx512bw,avx512f")
DEFINE_ROWS_Q1_0(rows_q1_0_vnni, ISUM_VNNI)
DEFINE_ROWS_Q2(rows_q2_vnni, ISUM_VNNI)
#pragma GCC pop_options

int bn_vec_dot_rows_avx2(int type, int n, int nrows, float *s, const void *w, size_t stride, const void *vy) {
    if (type != BN_Q1_0 && type != BN_Q2_0 && type != BN_PQ2_0) return 0;
    int nb = n / 32;
    int per = type == BN_Q2_0 ? 2 : 4;
    enum { STACK_BLOCKS = 256 };   // 8192 elements on the stack, larger rows on the heap
    _Alignas(32) int8_t q_stack[32 * STACK_BLOCKS];
    float d_stack[STACK_BLOCKS], t_stack[STACK_BLOCKS];
    prepared_q8 P = {q_stack, d_stack, t_stack};
    void *heap = NULL;
    if (nb > STACK_BLOCKS) {
        heap = aligned_alloc(32, ((size_t)nb * 40 + 64 + 31) & ~(size_t)31);
        if (!heap) return 0;
        P.q = heap;
        P.d = (float *)((char *)heap + (size_t)nb * 32);
        P.t = P.d + nb;
    }
    prepare_q8(vy, nb, per, type == BN_Q1_0, &P);
    const char *row = w;
    int bs = bn_type_size(type);
    if (type == BN_Q1_0) {
        for (int r = 0; r < nrows; r++, row += stride)
            s[r] = bn_have_vnni ? rows_q1_0_vnni(nb, (const bn_block_q1_0 *)row, &P)
                                : rows_q1_0_avx2(nb, (const bn_block_q1_0 *)row, &P);
    } else {
        for (int r = 0; r < nrows; r++, row += stride)
            s[r] = bn_have_vnni ? rows_q2_vnni(nb, (const uint8_t *)row, bs, per, &P)
                                : rows_q2_avx2(nb, (const uint8_t *)row, bs, per, &P);
    }
    free(heap);
    return 1;
}

// Batched mat-mat for Q1_0/Q2_0/PQ2_0: every activation row is prepared once; rows are walked in blocks of
// 16 (kept in cache) against groups of 4 activation rows. Returns 0 for other types or on allocation failure.
int bn_vec_dot_rows_batch_avx2(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                               size_t w_stride, const void *y, size_t y_stride) {
    if (type != BN_Q1_0 && type != BN_Q2_0 && type != BN_PQ2_0) return 0;
    int nb = n / 32, per = type == BN_Q2_0 ? 2 : 4, bs = bn_type_size(type);
    size_t one = (size_t)nb * 32 + (size_t)nb * 4 + (size_t)(nb / per) * 4;
    one = (one + 31) & ~(size_t)31;
    char *heap = aligned_alloc(32, one * ny);
    prepared_q8 *P = malloc(sizeof *P * ny);
    if (!heap || !P) { free(heap); free(P); return 0; }
    for (int t = 0; t < ny; t++) {
        char *base = heap + one * t;
        P[t].q = (int8_t *)base;
        P[t].d = (float *)(base + (size_t)nb * 32);
        P[t].t = P[t].d + nb;
        prepare_q8((const bn_block_q8_0 *)((const char *)y + y_stride * t), nb, per, type == BN_Q1_0, &P[t]);
    }
    enum { ROW_BLOCK = 16 };
    for (int r0 = 0; r0 < nrows; r0 += ROW_BLOCK) {
        int r1 = r0 + ROW_BLOCK < nrows ? r0 + ROW_BLOCK : nrows;
        for (int t0 = 0; t0 < ny; t0 += 4) {
            const prepared_q8 *group[4];
            for (int j = 0; j < 4; j++) group[j] = &P[t0 + j < ny ? t0 + j : ny - 1];   // pad with the last row
            for (int r = r0; r < r1; r++) {
                const char *row = (const char *)w + w_stride * r;
                float out[4];
                if (type == BN_Q1_0) {
                    if (bn_have_vnni) rows4_q1_0_vnni(nb, (const bn_block_q1_0 *)row, group, out);
                    else rows4_q1_0_avx2(nb, (const bn_block_q1_0 *)row, group, out);
                } else {
                    if (bn_have_vnni) rows4_q2_vnni(nb, (const uint8_t *)row, bs, per, group, out);
                    else rows4_q2_avx2(nb, (const uint8_t *)row, bs, per, group, out);
                }
                for (int j = 0; j < 4 && t0 + j < ny; j++) s[s_stride * (t0 + j) + r] = out[j];
            }
        }
    }
    free(heap);
    free(P);
    return 1;
}
