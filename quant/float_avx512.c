// quant/float_avx512.c — AVX-512 kernels for F32 / F16 / BF16 weights times f32 activations (quant/float_rows.c
// dispatches here when the CPU has AVX512F/BW/VL/DQ; the activation is never rounded to the weight's type).
//
// Rows (bn_float_rows_avx512, the decode mat-vec and the small batches of a verify pass): every dot(weight row,
// activation row) is computed by one formula, whatever the number of rows taken together:
//     two accumulators a0, a1 of 16 lanes; for each full chunk of 32 elements at c:
//         a0 = fma(w[c .. c+16], x[c .. c+16], a0);  a1 = fma(w[c+16 .. c+32], x[c+16 .. c+32], a1)
//     a tail of r < 32 elements: its first min(r, 16) into a0, the rest into a1 (masked loads, zeros beyond)
//     result = sum of the 16 lanes of a0 + a1, by halving (hsum16)
// Several weight rows and activation rows go through one pass (each weight chunk converted once, each activation
// chunk loaded once), but every pair has its own accumulators, so each result is bit for bit the single pair's.
//
// Gemm (bn_float_gemm_avx512, prefill): a panel of 32 weight rows x KC elements is converted to f32 and transposed
// once ([k][32] in a thread-local buffer), then 8 activation rows at a time run against it: per element k, two
// vectors of the panel times the broadcast activation, 16 accumulators (y[t][32 rows]). An output's sum is
// sequential over k in fp32 (the panels of KC elements continue from the partial sums stored in y), so it does not
// depend on KC, on the row split or on the number of activation rows.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include "quant/quant_impl.h"
#include <immintrin.h>
#include <stdbool.h>

#define INLINE static inline __attribute__((always_inline))

// ---- loading 16 weights as f32 -------------------------------------------------------------------------------
// ld16: elements i .. i+16 of weight row w (type F32, F16 or BF16) as f32; ld16_mask: only the lanes in m (others 0).
INLINE __m512 ld16(int type, const void *w, int64_t i) {
    if (type == BN_F32) return _mm512_loadu_ps((const float *)w + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (type == BN_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
INLINE __m512 ld16_mask(int type, const void *w, int64_t i, __mmask16 m) {
    if (type == BN_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (type == BN_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// hsum16: the 16 lanes summed by halving (8 + 8, 4 + 4, 2 + 2, 1 + 1).
INLINE float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

// ---- rows: R weight rows x T activation rows per pass (R * T <= 16, 2 accumulators each) ----------------------
// PREFETCH: how far ahead the row kernels ask for weight lines. The hardware prefetcher alone left the output head's
// mat-vec (151,936 x 256 F16, 2 threads) at 5-15 ms on the test machine; 8-16 KiB ahead, 1.5-3 ms.
enum { PREFETCH = 12288 };
// tile: s[t * ss + r] = dot(w + r * ws, x + t * xs) for r < R, t < T over n elements (the formula above).
INLINE void tile(int type, int R, int T, int n, const char *w, size_t ws, const float *x, size_t xs, float *s,
                 size_t ss) {
    __m512 a0[16], a1[16];
    for (int p = 0; p < R * T; p++) a0[p] = a1[p] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0[8], x1[8];
        for (int t = 0; t < T; t++) {
            x0[t] = _mm512_loadu_ps(x + t * xs + i);
            x1[t] = _mm512_loadu_ps(x + t * xs + i + 16);
        }
        for (int r = 0; r < R; r++) { // the lines PREFETCH bytes ahead in each row (F32: two lines per chunk)
            const char *ahead = w + r * ws + PREFETCH + i * (type == BN_F32 ? 4 : 2);
            _mm_prefetch(ahead, _MM_HINT_T0);
            if (type == BN_F32) _mm_prefetch(ahead + 64, _MM_HINT_T0);
        }
        for (int r = 0; r < R; r++) {
            const __m512 w0 = ld16(type, w + r * ws, i), w1 = ld16(type, w + r * ws, i + 16);
            for (int t = 0; t < T; t++) {
                a0[r * T + t] = _mm512_fmadd_ps(w0, x0[t], a0[r * T + t]);
                a1[r * T + t] = _mm512_fmadd_ps(w1, x1[t], a1[r * T + t]);
            }
        }
    }
    const int rem = (int)(n - i);
    if (rem > 0) {
        const __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xffff : (1u << rem) - 1);
        const __mmask16 m1 = (__mmask16)(rem > 16 ? (1u << (rem - 16)) - 1 : 0);
        for (int r = 0; r < R; r++) {
            const __m512 w0 = ld16_mask(type, w + r * ws, i, m0), w1 = ld16_mask(type, w + r * ws, i + 16, m1);
            for (int t = 0; t < T; t++) {
                a0[r * T + t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, x + t * xs + i), a0[r * T + t]);
                a1[r * T + t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, x + t * xs + i + 16), a1[r * T + t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) s[t * ss + r] = hsum16(_mm512_add_ps(a0[r * T + t], a1[r * T + t]));
}

// rows_T: all nrows weight rows against T activation rows, R rows per pass (then single rows for the rest).
#define DEFINE_ROWS(name, R, T)                                                                                  \
    static void name(int type, int n, int nrows, const char *w, size_t ws, const float *x, size_t xs, float *s, \
                     size_t ss) {                                                                              \
        int r = 0;                                                                                              \
        if (type == BN_F32) {                                                                                   \
            for (; r + R <= nrows; r += R) tile(BN_F32, R, T, n, w + r * ws, ws, x, xs, s + r, ss);             \
            for (; r < nrows; r++) tile(BN_F32, 1, T, n, w + r * ws, ws, x, xs, s + r, ss);                    \
        } else if (type == BN_F16) {                                                                            \
            for (; r + R <= nrows; r += R) tile(BN_F16, R, T, n, w + r * ws, ws, x, xs, s + r, ss);             \
            for (; r < nrows; r++) tile(BN_F16, 1, T, n, w + r * ws, ws, x, xs, s + r, ss);                    \
        } else {                                                                                                \
            for (; r + R <= nrows; r += R) tile(BN_BF16, R, T, n, w + r * ws, ws, x, xs, s + r, ss);            \
            for (; r < nrows; r++) tile(BN_BF16, 1, T, n, w + r * ws, ws, x, xs, s + r, ss);                   \
        }                                                                                                       \
    }
DEFINE_ROWS(rows_t1, 8, 1)
DEFINE_ROWS(rows_t2, 4, 2)
DEFINE_ROWS(rows_t3, 2, 3)
DEFINE_ROWS(rows_t4, 2, 4)
DEFINE_ROWS(rows_t8, 1, 8)

void bn_float_rows_avx512(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                          size_t w_stride, const float *x, size_t x_stride) {
    enum { ROW_BLOCK = 64 };   // weight rows in cache while every group of activation rows passes
    for (int r0 = 0; r0 < nrows; r0 += ROW_BLOCK) {
        const int nr = nrows - r0 < ROW_BLOCK ? nrows - r0 : ROW_BLOCK;
        const char *wr = (const char *)w + w_stride * (size_t)r0;
        for (int t0 = 0; t0 < ny;) {
            const int left = ny - t0;
            const float *xt = x + x_stride * (size_t)t0;
            float *st = s + s_stride * (size_t)t0 + r0;
            if (left >= 8) rows_t8(type, n, nr, wr, w_stride, xt, x_stride, st, s_stride), t0 += 8;
            else if (left >= 4) rows_t4(type, n, nr, wr, w_stride, xt, x_stride, st, s_stride), t0 += 4;
            else if (left == 3) rows_t3(type, n, nr, wr, w_stride, xt, x_stride, st, s_stride), t0 += 3;
            else if (left == 2) rows_t2(type, n, nr, wr, w_stride, xt, x_stride, st, s_stride), t0 += 2;
            else rows_t1(type, n, nr, wr, w_stride, xt, x_stride, st, s_stride), t0 += 1;
        }
    }
}

// ---- gemm ------------------------------------------------------------------------------------------------------
enum { NR = 32, MR = 8, KC = 512 };

// transpose16: r[i] lane j -> r[j] lane i (16 x 16 floats).
INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    // r[4a + b] now holds, in 128-bit lane q, elements (rows 4q' of group a ...): lane q of r[4a + b] = column
    // 4q + b of rows 4a .. 4a+3. Gather the four 128-bit lanes q of rows-groups a = 0..3 into output 4q + b.
    for (int b = 0; b < 4; b++) {
        const __m512 l01 = _mm512_shuffle_f32x4(r[b], r[4 + b], 0x44);      // a0.q0 a0.q1 a1.q0 a1.q1
        const __m512 h01 = _mm512_shuffle_f32x4(r[b], r[4 + b], 0xee);      // a0.q2 a0.q3 a1.q2 a1.q3
        const __m512 l23 = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0x44); // a2.q0 a2.q1 a3.q0 a3.q1
        const __m512 h23 = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0xee); // a2.q2 a2.q3 a3.q2 a3.q3
        t[b] = _mm512_shuffle_f32x4(l01, l23, 0x88);                          // q0 of a0 a1 a2 a3
        t[4 + b] = _mm512_shuffle_f32x4(l01, l23, 0xdd);                      // q1
        t[8 + b] = _mm512_shuffle_f32x4(h01, h23, 0x88);                      // q2
        t[12 + b] = _mm512_shuffle_f32x4(h01, h23, 0xdd);                     // q3
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

// pack: rows [0, nr) (nr <= NR; the others zero) of w, elements [k0, k0 + kc), as f32 in P[k][NR].
INLINE void pack(int type, const char *w, size_t ws, int nr, int64_t k0, int kc, float *P) {
    for (int g = 0; g < NR; g += 16) {
        for (int k = 0; k < kc; k += 16) {
            const int left = kc - k < 16 ? kc - k : 16;
            const __mmask16 m = (__mmask16)(left == 16 ? 0xffff : (1u << left) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = g + i < nr ? ld16_mask(type, w + (size_t)(g + i) * ws, k0 + k, m) : _mm512_setzero_ps();
            transpose16(r);
            for (int i = 0; i < left; i++) _mm512_store_ps(P + (size_t)(k + i) * NR + g, r[i]);
        }
    }
}

// micro: y[t][0 .. 32) (+)= sum over k < kc of P[k][.] * x[t][k] for t < mr; first: start from 0, else from y.
// m0 / m1: the valid output lanes of the two halves.
INLINE void micro(int mr, const float *P, int kc, const float *x, size_t xs, float *y, size_t ys, __mmask16 m0,
                  __mmask16 m1, bool first) {
    __m512 c0[MR], c1[MR];
    for (int t = 0; t < mr; t++) {
        c0[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + t * ys);
        c1[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + t * ys + 16);
    }
    for (int k = 0; k < kc; k++) {
        const __m512 w0 = _mm512_load_ps(P + (size_t)k * NR), w1 = _mm512_load_ps(P + (size_t)k * NR + 16);
        for (int t = 0; t < mr; t++) {
            const __m512 b = _mm512_set1_ps(x[t * xs + k]);
            c0[t] = _mm512_fmadd_ps(w0, b, c0[t]);
            c1[t] = _mm512_fmadd_ps(w1, b, c1[t]);
        }
    }
    for (int t = 0; t < mr; t++) {
        _mm512_mask_storeu_ps(y + t * ys, m0, c0[t]);
        _mm512_mask_storeu_ps(y + t * ys + 16, m1, c1[t]);
    }
}

static void micro_any(int mr, const float *P, int kc, const float *x, size_t xs, float *y, size_t ys, __mmask16 m0,
                      __mmask16 m1, bool first) {
    switch (mr) {
    case 8: micro(8, P, kc, x, xs, y, ys, m0, m1, first); break;
    case 7: micro(7, P, kc, x, xs, y, ys, m0, m1, first); break;
    case 6: micro(6, P, kc, x, xs, y, ys, m0, m1, first); break;
    case 5: micro(5, P, kc, x, xs, y, ys, m0, m1, first); break;
    case 4: micro(4, P, kc, x, xs, y, ys, m0, m1, first); break;
    case 3: micro(3, P, kc, x, xs, y, ys, m0, m1, first); break;
    case 2: micro(2, P, kc, x, xs, y, ys, m0, m1, first); break;
    default: micro(1, P, kc, x, xs, y, ys, m0, m1, first); break;
    }
}

static void pack_any(int type, const char *w, size_t ws, int nr, int64_t k0, int kc, float *P) {
    if (type == BN_F32) pack(BN_F32, w, ws, nr, k0, kc, P);
    else if (type == BN_F16) pack(BN_F16, w, ws, nr, k0, kc, P);
    else pack(BN_BF16, w, ws, nr, k0, kc, P);
}

void bn_float_gemm_avx512(int type, int n, int nrows, int ny, float *s, size_t s_stride, const void *w,
                          size_t w_stride, const float *x, size_t x_stride) {
    _Alignas(64) float P[KC * NR];   // 64 KiB
    for (int r0 = 0; r0 < nrows; r0 += NR) {
        const int nr = nrows - r0 < NR ? nrows - r0 : NR;
        const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
        const __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
        const char *wr = (const char *)w + w_stride * (size_t)r0;
        for (int64_t k0 = 0; k0 < n; k0 += KC) {
            const int kc = n - k0 < KC ? (int)(n - k0) : KC;
            pack_any(type, wr, w_stride, nr, k0, kc, P);
            for (int t0 = 0; t0 < ny; t0 += MR) {
                const int mr = ny - t0 < MR ? ny - t0 : MR;
                micro_any(mr, P, kc, x + x_stride * (size_t)t0 + k0, x_stride, s + s_stride * (size_t)t0 + r0,
                          s_stride, m0, m1, k0 == 0);
            }
        }
    }
}
