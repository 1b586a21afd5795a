// quant/matvec_avx2.c — mat-vec (bn_vec_dot_rows) and mat-mat (bn_vec_dot_rows_batch) kernels for
// Q1_0 / Q2_0 / PQ2_0 / Q4_0 (and Q8_0 with VNNI) with prepared activations, in AVX2 and AVX512-VNNI (256-bit)
// variants.
#pragma GCC target("avx2,fma,f16c")
#include "quant/simd_avx2.h"

// ---- one formula for the mat-vec and the mat-mat ---------------------------------------------------------------
// Both compute dot(weight row, activation row) as
//     acc = 0;  for each weight block i:  block = 0;  for each Q8_0 sub-block k of it:
//         t_k = integer sum of (weight code - offset) * q over the sub-block   (exact)
//         block = fma(t_k, d_act[k], block);                                   (fp32, in k order)
//     acc = fma(block, d_weight[i], acc)                                       (fp32, in i order)
// so a row's result does not depend on how many activation rows a call takes (decode, a verify pass, a prefill chunk
// and the engine's thread split all give the same bits): DSpark's greedy output is the plain decode's. The mat-vec
// holds 8 weight rows in the 8 lanes (integer sums reduced across lanes per sub-block), the mat-mat 8 activation rows.

// Expansion of Q8_0 sub-block k of weight block blk into 32 unsigned bytes, in the activation order the prepared /
// interleaved activations use (ORDER_Q1, ORDER_Q2; Q4_0: the nibbles, natural order; Q8_0: x + 128, natural order).
static inline __m256i expand_q1(const uint8_t *blk, int k) {
    uint32_t bits;
    memcpy(&bits, blk + 2 + 4 * k, 4);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)bits), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                            _mm256_set1_epi8(1));
}
static inline __m256i expand_q2(const uint8_t *blk, int k) {
    int64_t codes;
    memcpy(&codes, blk + 2 + 8 * k, 8);
    return _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(codes), _mm256_setr_epi64x(0, 2, 4, 6)),
                            _mm256_set1_epi8(3));
}
static inline __m256i expand_q4(const uint8_t *blk, int k) {
    (void)k;
    const __m128i b = _mm_loadu_si128((const __m128i *)(blk + 2)); // byte j: element j (low), element j + 16 (high)
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
}
static inline __m256i expand_q8(const uint8_t *blk, int k) {
    (void)k;
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
}

// ---- mat-vec with prepared activations (bn_vec_dot_rows) -----------------------------------------
// For Q1_0 / Q2_0 / PQ2_0 the Q8_0 activation row is prepared once per mat-vec: the activation bytes of each 32-block
// are permuted to the order in which the shifted weight bytes come out, the fp16 scales are converted once, and the
// integer sum of each block's codes is kept for the correction sum((2b-1)q) = 2*sum(b*q) - sum(q) (Q1_0) and
// sum((c-1)q) = sum(c*q) - sum(q) (Q2_0).
typedef struct {
    int8_t *q;     // {32, nb} permuted codes, 32-byte aligned
    float *d;      // {nb} activation scales
    int32_t *s;    // {nb} sum of each block's codes
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

enum { ORDER_NATURAL, ORDER_Q1, ORDER_Q2 };

// prepare_q8: the activation row's blocks in the given order, their scales, and corr_mul times their code sums
// (1 for Q1_0 / Q2_0; 8 for Q4_0, whose codes are x + 8; 128 for Q8_0, whose expansion is x + 128)
static void prepare_q8(const bn_block_q8_0 *y, int nb, int order, int corr_mul, prepared_q8 *P) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int k = 0; k < nb; k++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)y[k].qs);
        __m256i placed = order == ORDER_Q1 ? permute_q1(q) : order == ORDER_Q2 ? permute_q2(q) : q;
        _mm256_store_si256((__m256i *)(P->q + 32 * k), placed);
        P->s[k] = corr_mul * hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
        P->d[k] = h2f(y[k].d);
    }
}

// reduce8_epi32: lane r = the sum of the 8 lanes of v[r] (integers: exact in any order).
static inline __m256i reduce8_epi32(const __m256i v[8]) {
    const __m256i a0 = _mm256_hadd_epi32(v[0], v[1]), a1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i a2 = _mm256_hadd_epi32(v[4], v[5]), a3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3); // v0..3 | v4..7, per 128-bit half
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

// scales8: the fp16 scale at byte off of the 8 rows x[r], as 8 floats
static inline __m256 scales8(const uint8_t *const x[8], size_t off) {
    uint16_t h[8];
    for (int r = 0; r < 8; r++) memcpy(&h[r], x[r] + off, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

// The row kernels: out[r] = dot(row x[r], the prepared activation) for 8 weight rows, generated for AVX2 (maddubs +
// madd) and AVX512-VNNI on 256-bit vectors (vpdpbusd). nbw weight blocks of bs bytes, per Q8_0 sub-blocks each;
// shift = 1 doubles the integer sum (Q1_0). ISUM(u, q) = 8 int32 lanes of sum(u (unsigned) * q (signed)).
#define ISUM_AVX2(u, q) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (q)), _mm256_set1_epi16(1))
#define ISUM_VNNI(u, q) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (q))
#define DEFINE_ROWS8(name, ISUM_ROW)                                                                              \
static void name(int nbw, const uint8_t *const x[8], int bs, int per, int shift, const prepared_q8 *P,          \
                 float out[8]) {                                                                                 \
    __m256 acc = _mm256_setzero_ps();                                                                            \
    for (int i = 0; i < nbw; i++) {                                                                              \
        const size_t off = (size_t)i * bs;                                                                       \
        __m256 block = _mm256_setzero_ps();                                                                      \
        for (int k = 0; k < per; k++) {                                                                          \
            const int kb = per * i + k;                                                                          \
            const int8_t *q = P->q + 32 * kb;                                                                    \
            __m256i v[8];                                                                                        \
            for (int r = 0; r < 8; r++) v[r] = ISUM_ROW(x[r] + off, k, q);                                       \
            const __m256i t = _mm256_sub_epi32(_mm256_sll_epi32(reduce8_epi32(v), _mm_cvtsi32_si128(shift)),      \
                                               _mm256_set1_epi32(P->s[kb]));                                     \
            block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(P->d[kb]), block);                     \
        }                                                                                                        \
        acc = _mm256_fmadd_ps(block, scales8(x, off), acc);                                                      \
    }                                                                                                            \
    _mm256_storeu_ps(out, acc);                                                                                  \
}
#define ROW_Q1_AVX2(blk, k, q) ISUM_AVX2(expand_q1((blk), (k)), _mm256_load_si256((const __m256i *)(q)))
#define ROW_Q2_AVX2(blk, k, q) ISUM_AVX2(expand_q2((blk), (k)), _mm256_load_si256((const __m256i *)(q)))
#define ROW_Q2_VNNI(blk, k, q) ISUM_VNNI(expand_q2((blk), (k)), _mm256_load_si256((const __m256i *)(q)))
#define ROW_Q4_AVX2(blk, k, q) ISUM_AVX2(expand_q4((blk), (k)), _mm256_load_si256((const __m256i *)(q)))
#define ROW_Q4_VNNI(blk, k, q) ISUM_VNNI(expand_q4((blk), (k)), _mm256_load_si256((const __m256i *)(q)))
#define ROW_Q8_VNNI(blk, k, q) ISUM_VNNI(expand_q8((blk), (k)), _mm256_load_si256((const __m256i *)(q)))
// Q1_0 with AVX512BW masks: the 32 weight bits of a Q8_0 sub-block are the byte mask (element j = bit j, the natural
// activation order), a zero-masked load keeps q where the bit is set, and vpdpbusd with ones sums them.
#define ROW_Q1_MASK(blk, k, q)                                                                                   \
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),                                             \
                        _mm256_maskz_loadu_epi8((__mmask32)load_u32((blk) + 2 + 4 * (k)), (q)))
static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

DEFINE_ROWS8(rows8_q1_avx2, ROW_Q1_AVX2)
DEFINE_ROWS8(rows8_q2_avx2, ROW_Q2_AVX2)
DEFINE_ROWS8(rows8_q4_avx2, ROW_Q4_AVX2)
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vl,avx512bw,avx512f")
DEFINE_ROWS8(rows8_q1_mask, ROW_Q1_MASK)
DEFINE_ROWS8(rows8_q2_vnni, ROW_Q2_VNNI)
DEFINE_ROWS8(rows8_q4_vnni, ROW_Q4_VNNI)
DEFINE_ROWS8(rows8_q8_vnni, ROW_Q8_VNNI)
#pragma GCC pop_options

typedef void (*rows8_fn)(int nbw, const uint8_t *const x[8], int bs, int per, int shift, const prepared_q8 *P,
                         float out[8]);

// PREFETCH: how far ahead of its group of rows the mat-vec asks for weight lines, for rows of PREFETCH_ROW bytes or
// more (see quant/float_avx512.c: the hardware prefetcher alone leaves large mat-vecs well below the memory's rate on
// the test machine). Measured on the 151,936-row output head (K = 256, 2 threads): Q8_0 and Q4_0 tg64 1.3-2x;
// Q1_0 / Q2_0 rows (36 / 72 bytes) no better or worse, so they are left to the hardware.
enum { PREFETCH = 12288, PREFETCH_ROW = 128 };

// rows_kind_of: the mat-vec kernel of a type with its sub-blocks per weight block, activation order and correction
// multiplier; 0 if the type has none (Q8_0 needs VNNI: x + 128 overflows maddubs; the mat-mat has the same rule, so
// both or neither use the shared formula).
typedef struct {
    rows8_fn rows8;
    int per, order, corr_mul;
} rows_kind;
static int rows_kind_of(int type, rows_kind *k) {
    const bool v = bn_have_vnni;
    switch (type) {
    case BN_Q1_0: *k = (rows_kind){v ? rows8_q1_mask : rows8_q1_avx2, 4, v ? ORDER_NATURAL : ORDER_Q1, 1}; return 1;
    case BN_Q2_0: *k = (rows_kind){v ? rows8_q2_vnni : rows8_q2_avx2, 2, ORDER_Q2, 1}; return 1;
    case BN_PQ2_0: *k = (rows_kind){v ? rows8_q2_vnni : rows8_q2_avx2, 4, ORDER_Q2, 1}; return 1;
    case BN_Q4_0: *k = (rows_kind){v ? rows8_q4_vnni : rows8_q4_avx2, 1, ORDER_NATURAL, 8}; return 1;
    case BN_Q8_0: *k = (rows_kind){rows8_q8_vnni, 1, ORDER_NATURAL, 128}; return v;
    default: return 0;
    }
}

int bn_vec_dot_rows_avx2(int type, int n, int nrows, float *s, const void *w, size_t stride, const void *vy) {
    rows_kind kind;
    if (!rows_kind_of(type, &kind)) return 0;
    const int nb = n / 32, bs = bn_type_size(type);
    enum { STACK_BLOCKS = 256 };   // 8192 elements on the stack, larger rows on the heap
    _Alignas(32) int8_t q_stack[32 * STACK_BLOCKS];
    float d_stack[STACK_BLOCKS];
    int32_t s_stack[STACK_BLOCKS];
    prepared_q8 P = {q_stack, d_stack, s_stack};
    void *heap = NULL;
    if (nb > STACK_BLOCKS) {
        heap = aligned_alloc(32, ((size_t)nb * 40 + 31) & ~(size_t)31);
        if (!heap) return 0;
        P.q = heap;
        P.d = (float *)((char *)heap + (size_t)nb * 32);
        P.s = (int32_t *)(P.d + nb);
    }
    prepare_q8(vy, nb, kind.order, kind.corr_mul, &P);
    for (int r0 = 0; r0 < nrows; r0 += 8) {
        const int nr = nrows - r0 < 8 ? nrows - r0 : 8;
        const char *ahead = (const char *)w + stride * (size_t)r0 + PREFETCH; // as many bytes as the group reads
        for (size_t o = 0; stride >= PREFETCH_ROW && o < stride * 8; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
        const uint8_t *x[8];
        for (int r = 0; r < 8; r++) x[r] = (const uint8_t *)w + stride * (size_t)(r0 + (r < nr ? r : nr - 1));
        float out[8];
        kind.rows8(nb / kind.per, x, bs, kind.per, type == BN_Q1_0 ? 1 : 0, &P, out);
        memcpy(s + r0, out, sizeof(float) * (size_t)nr);
    }
    free(heap);
    return 1;
}

// ---- mat-mat for small batches (bn_vec_dot_rows_batch) ------------------------------------------------
// Activation rows are taken 8 at a time and interleaved: for Q8_0 block k and dword g, vector A[k][g] holds
// in int32 lane j the 4 bytes of dword g of activation row j (in the order of the weight expansion above).
// A weight sub-block (32 elements) is expanded once to 32 unsigned bytes u (Q1_0: bits 0/1, Q2_0: codes
// 0..3, Q4_0: x + 8, Q8_0: x + 128); dword g of u is broadcast and dotted with A[k][g], so after 8 dots lane j holds
// sum(u * q_j) for activation row j — 8 dots for 8 rows, no horizontal sums. Exact integer corrections:
// Q1_0 sum((2b-1)q) = 2 sum(bq) - sum(q); Q2_0 sum((c-1)q) = sum(cq) - sum(q); Q4_0 sum((c-8)q) = sum(cq) - 8 sum(q);
// Q8_0 sum(xq) = sum(uq) - 128 sum(q).
// Per weight block the fp32 sum is sum_k d_k * t_k (fmadd), then scaled by the weight's d: the formula at the top of
// this file, so each result equals the mat-vec's bit for bit.
typedef struct {
    __m256i *a;    // {8 dwords, nb}: interleaved codes, lane j = activation row j
    __m256i *corr; // {nb}: lane j = c * sum(q_j) over the block (c = 1 for Q1_0/Q2_0, 8 for Q4_0, 128 for Q8_0)
    __m256 *d;     // {nb}: lane j = activation scale of row j (0 for padding rows)
} batch8;

// transpose8_epi32: r[j] dword g -> r[g] dword j (8x8 int32 transpose).
static inline void transpose8_epi32(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

// prepare_batch8: interleaves up to 8 Q8_0 activation rows (ny of them, y_stride bytes apart; the others
// are zero) for a weight type whose expansion has the given byte order.
static void prepare_batch8(const void *y, size_t y_stride, int ny, int nb, int order, int corr_mul, batch8 *B) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int k = 0; k < nb; k++) {
        __m256i r[8];
        float d[8];
        for (int j = 0; j < 8; j++) {
            if (j >= ny) {
                r[j] = _mm256_setzero_si256();
                d[j] = 0.0f;
                continue;
            }
            const bn_block_q8_0 *blk = (const bn_block_q8_0 *)((const char *)y + y_stride * j) + k;
            __m256i q = _mm256_loadu_si256((const __m256i *)blk->qs);
            r[j] = order == ORDER_Q1 ? permute_q1(q) : order == ORDER_Q2 ? permute_q2(q) : q;
            d[j] = h2f(blk->d);
        }
        transpose8_epi32(r);
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            _mm256_store_si256(&B->a[8 * k + g], r[g]);
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, r[g]), ones16));
        }
        _mm256_store_si256(&B->corr[k], _mm256_mullo_epi32(sum, _mm256_set1_epi32(corr_mul)));
        _mm256_store_ps((float *)&B->d[k], _mm256_loadu_ps(d));
    }
}

#define ISUM_ACC_AVX2(acc, u, q) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (q)), _mm256_set1_epi16(1)))
#define ISUM_ACC_VNNI(acc, u, q) _mm256_dpbusd_epi32((acc), (u), (q))

// One weight row against 8 interleaved activation rows: out[j] = dot(row, activation j). nbw weight blocks
// of bs bytes, per Q8_0 sub-blocks each; shift = 1 doubles the integer sum (Q1_0).
#define DEFINE_ROW_BATCH8(name, EXPAND, ISUM_ACC)                                                           \
static void name(int nbw, const uint8_t *x, int bs, int per, int shift, const batch8 *B, float out[8]) {  \
    __m256 acc = _mm256_setzero_ps();                                                                       \
    for (int i = 0; i < nbw; i++) {                                                                         \
        const uint8_t *blk = x + (size_t)i * bs;                                                            \
        bn_half hd;                                                                                         \
        memcpy(&hd, blk, 2);                                                                                \
        __m256 block = _mm256_setzero_ps();                                                                 \
        for (int k = 0; k < per; k++) {                                                                     \
            const int kb = per * i + k;                                                                     \
            const __m256i e = EXPAND(blk, k);                                                               \
            const __m256i lo = _mm256_permute4x64_epi64(e, 0x44), hi = _mm256_permute4x64_epi64(e, 0xEE);   \
            const __m256i *a = &B->a[8 * kb];                                                               \
            __m256i part[4];  /* four dependency chains; dword g broadcast by an in-lane shuffle */        \
            part[0] = ISUM_ACC(_mm256_setzero_si256(), _mm256_shuffle_epi32(lo, 0x00), a[0]);               \
            part[1] = ISUM_ACC(_mm256_setzero_si256(), _mm256_shuffle_epi32(lo, 0x55), a[1]);               \
            part[2] = ISUM_ACC(_mm256_setzero_si256(), _mm256_shuffle_epi32(lo, 0xAA), a[2]);               \
            part[3] = ISUM_ACC(_mm256_setzero_si256(), _mm256_shuffle_epi32(lo, 0xFF), a[3]);               \
            part[0] = ISUM_ACC(part[0], _mm256_shuffle_epi32(hi, 0x00), a[4]);                              \
            part[1] = ISUM_ACC(part[1], _mm256_shuffle_epi32(hi, 0x55), a[5]);                              \
            part[2] = ISUM_ACC(part[2], _mm256_shuffle_epi32(hi, 0xAA), a[6]);                              \
            part[3] = ISUM_ACC(part[3], _mm256_shuffle_epi32(hi, 0xFF), a[7]);                              \
            __m256i isum = _mm256_add_epi32(_mm256_add_epi32(part[0], part[1]), _mm256_add_epi32(part[2], part[3])); \
            __m256i t = _mm256_sub_epi32(_mm256_sll_epi32(isum, _mm_cvtsi32_si128(shift)), B->corr[kb]);    \
            block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), B->d[kb], block);                               \
        }                                                                                                   \
        acc = _mm256_fmadd_ps(block, _mm256_set1_ps(h2f(hd)), acc);                                         \
    }                                                                                                       \
    _mm256_storeu_ps(out, acc);                                                                             \
}

DEFINE_ROW_BATCH8(row8_q1_avx2, expand_q1, ISUM_ACC_AVX2)
DEFINE_ROW_BATCH8(row8_q2_avx2, expand_q2, ISUM_ACC_AVX2)
DEFINE_ROW_BATCH8(row8_q4_avx2, expand_q4, ISUM_ACC_AVX2)
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vl,avx512bw,avx512f")
DEFINE_ROW_BATCH8(row8_q1_vnni, expand_q1, ISUM_ACC_VNNI)
DEFINE_ROW_BATCH8(row8_q2_vnni, expand_q2, ISUM_ACC_VNNI)
DEFINE_ROW_BATCH8(row8_q4_vnni, expand_q4, ISUM_ACC_VNNI)
DEFINE_ROW_BATCH8(row8_q8_vnni, expand_q8, ISUM_ACC_VNNI)
#pragma GCC pop_options

typedef void (*row_batch8_fn)(int nbw, const uint8_t *x, int bs, int per, int shift, const batch8 *B, float out[8]);

// batch_kind: the row kernel and its parameters for a weight type of the batched mat-mat; 0 if it has none (Q8_0
// needs VNNI: u = x + 128 overflows maddubs).
typedef struct {
    row_batch8_fn row8;
    int per, order, corr_mul, shift;
} batch_kind;
static int batch_kind_of(int type, batch_kind *k) {
    *k = (batch_kind){.corr_mul = 1};
    switch (type) {
    case BN_Q1_0:
        k->row8 = bn_have_vnni ? row8_q1_vnni : row8_q1_avx2, k->per = 4, k->order = ORDER_Q1, k->shift = 1;
        break;
    case BN_Q2_0: k->row8 = bn_have_vnni ? row8_q2_vnni : row8_q2_avx2, k->per = 2, k->order = ORDER_Q2; break;
    case BN_PQ2_0: k->row8 = bn_have_vnni ? row8_q2_vnni : row8_q2_avx2, k->per = 4, k->order = ORDER_Q2; break;
    case BN_Q4_0:
        k->row8 = bn_have_vnni ? row8_q4_vnni : row8_q4_avx2, k->per = 1, k->order = ORDER_NATURAL, k->corr_mul = 8;
        break;
    case BN_Q8_0:
        if (!bn_have_vnni) return 0;
        k->row8 = row8_q8_vnni, k->per = 1, k->order = ORDER_NATURAL, k->corr_mul = 128;
        break;
    default: return 0;
    }
    return 1;
}

// group_bytes: bytes of one prepared group of 8 activation rows of n elements (a, corr, d).
static size_t group_bytes(int n) { return (size_t)(n / 32) * (8 * 32 + 32 + 32); }

// group_at: the prepared group gi in prep.
static batch8 group_at(void *prep, int n, int gi) {
    char *base = (char *)prep + group_bytes(n) * (size_t)gi;
    const size_t nb = (size_t)(n / 32);
    return (batch8){.a = (__m256i *)base, .corr = (__m256i *)(base + nb * 256), .d = (__m256 *)(base + nb * 288)};
}

size_t bn_batch_prep_size_avx2(int type, int n, int ny) {
    batch_kind k;
    return batch_kind_of(type, &k) ? group_bytes(n) * (size_t)((ny + 7) / 8) : 0;
}

void bn_batch_prepare_avx2(int type, int n, int ny, int g0, int g1, const void *y, size_t y_stride, void *prep) {
    batch_kind k;
    if (!batch_kind_of(type, &k)) return;
    for (int gi = g0; gi < g1; gi++) {
        batch8 B = group_at(prep, n, gi);
        const int rows = ny - 8 * gi < 8 ? ny - 8 * gi : 8;
        prepare_batch8((const char *)y + y_stride * (size_t)(8 * gi), y_stride, rows, n / 32, k.order, k.corr_mul, &B);
    }
}

void bn_batch_rows_avx2(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w, size_t w_stride,
                        const void *prep) {
    batch_kind k;
    if (!batch_kind_of(type, &k)) return;
    const int nb = n / 32, bs = bn_type_size(type), n_groups = (ny + 7) / 8;
    enum { ROW_BLOCK = 16 };   // weight rows kept in cache while every group passes
    for (int r0 = 0; r0 < nrows; r0 += ROW_BLOCK) {
        const int r1 = r0 + ROW_BLOCK < nrows ? r0 + ROW_BLOCK : nrows;
        for (int gi = 0; gi < n_groups; gi++) {
            const batch8 B = group_at((void *)prep, n, gi);
            const int rows = ny - 8 * gi < 8 ? ny - 8 * gi : 8;
            for (int r = r0; r < r1; r++) {
                float out[8];
                k.row8(nb / k.per, (const uint8_t *)w + w_stride * (size_t)r, bs, k.per, k.shift, &B, out);
                for (int j = 0; j < rows; j++) s[s_stride * (size_t)(8 * gi + j) + r] = out[j];
            }
        }
    }
}

// Batched mat-mat for Q1_0/Q2_0/PQ2_0/Q4_0 (AVX2 or VNNI) and Q8_0 (VNNI only): activation rows in groups of 8 (each
// prepared once), weight rows in blocks of 16 (kept in cache while every group passes). Returns 0 for other types or
// on allocation failure.
int bn_vec_dot_rows_batch_avx2(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                               size_t w_stride, const void *y, size_t y_stride) {
    const size_t bytes = bn_batch_prep_size_avx2(type, n, ny);
    char *prep = bytes ? aligned_alloc(32, bytes) : NULL;
    if (!prep) return 0;
    bn_batch_prepare_avx2(type, n, ny, 0, (ny + 7) / 8, y, y_stride, prep);
    bn_batch_rows_avx2(type, n, nrows, ny, s, s_stride, w, w_stride, prep);
    free(prep);
    return 1;
}
