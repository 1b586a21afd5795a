// core/ops.c — fp32 math primitives of the forward (see core/ops.h for shapes and semantics).
#include "core/ops.h"
#include "quant/quant.h"
#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

float bn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float bn_silu(float x) { return x / (1.0f + expf(-x)); }
float bn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// ---- dot / axpy with runtime dispatch -------------------------------------------------------
static float dot_scalar(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
    __m128 s4 = _mm_add_ps(lo, hi);
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    float sum = _mm_cvtss_f32(s4);
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static int have_avx2(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return cached;
}
#endif

float bn_dot_f32(const float *a, const float *b, int n) {
#if defined(__x86_64__)
    if (have_avx2()) return dot_avx2(a, b, n);
#endif
    return dot_scalar(a, b, n);
}

void bn_axpy_f32(float *y, float a, const float *x, int n) {
#if defined(__x86_64__)
    if (have_avx2()) {
        axpy_avx2(y, a, x, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

// ---- SiLU over arrays -------------------------------------------------------------------------
#if defined(__x86_64__)
#define SILU_TARGET __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
// exp512: e^x in 16 lanes: x = n ln2 + r (|r| <= ln2 / 2, ln2 in two parts), e^r by its Taylor series to r^7
// (truncation < 6e-9 relative), times 2^n by vscalefps (overflow to inf, gradual underflow); x clamped to
// [-104, 89], beyond which e^x is 0 or inf in fp32 anyway.
SILU_TARGET static inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x); // ln2 = 0.693145752 + 1.42860677e-6
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
// silu_avx512: y[i] = silu(g[i]) * (u ? u[i] : 1) over n, x / (1 + e^-x) with exp512; the tail in masked lanes, so
// an element's result does not depend on its position. y may alias g or u.
SILU_TARGET static void silu_avx512(float *y, const float *g, const float *u, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 v = _mm512_div_ps(x, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        if (u) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}
#endif

// silu_rows: y[i] = silu(g[i]) * (u ? u[i] : 1) over n (AVX-512 where present, else bn_silu per element).
static void silu_rows(float *y, const float *g, const float *u, int n) {
#if defined(__x86_64__)
    if (bn_cpu_has_avx512()) {
        silu_avx512(y, g, u, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) y[i] = bn_silu(g[i]) * (u ? u[i] : 1.0f);
}

// ---- norms ----------------------------------------------------------------------------------
void bn_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double sum_sq = 0.0;
    for (int i = 0; i < n; i++) sum_sq += (double)x[i] * x[i];
    const float mean_sq = (float)(sum_sq / n);
    const float scale = 1.0f / sqrtf(mean_sq + eps);
    if (w)
        for (int i = 0; i < n; i++) y[i] = w[i] * (x[i] * scale);
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void bn_l2norm(float *y, const float *x, int n, float eps) {
    double sum_sq = 0.0;
    for (int i = 0; i < n; i++) sum_sq += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)sum_sq + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void bn_gated_rmsnorm(float *y, const float *o, const float *z, const float *w, int n, float eps) {
    bn_rmsnorm(y, o, w, n, eps);
    silu_rows(y, z, y, n);
}

// ---- rope -----------------------------------------------------------------------------------
// theta_i = pos * base^(-2i/n_rot); computed like ggml (theta_scale power series in float).
void bn_rope_neox(float *x, int head_dim, int n_rot, int pos, float base) {
    (void)head_dim;
    const int half = n_rot / 2;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        const float c = cosf(theta), s = sinf(theta);
        const float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
        theta *= theta_scale;
    }
}

void bn_rope_norm(float *x, int head_dim, int n_rot, int pos, float base) {
    (void)head_dim;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        const float c = cosf(theta), s = sinf(theta);
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = b * c + a * s;
        theta *= theta_scale;
    }
}

// ---- elementwise ----------------------------------------------------------------------------
void bn_swiglu(float *y, const float *gate, const float *up, int n) {
    silu_rows(y, gate, up, n);
}

void bn_sigmoid_gate(float *y, const float *x, const float *g, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] * bn_sigmoid(g[i]);
}

double bn_log_sum_exp(const float *x, int n) {
    float max_v = x[0];
    for (int i = 1; i < n; i++) max_v = x[i] > max_v ? x[i] : max_v;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - max_v);
    return max_v + log(sum);
}

void bn_softmax_inplace(float *x, int n) {
    float max_v = -INFINITY;
    for (int i = 0; i < n; i++) max_v = x[i] > max_v ? x[i] : max_v;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max_v);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

// ---- Gated DeltaNet -------------------------------------------------------------------------
void bn_conv1d_silu_step(float *out, float *window, const float *x, const float *w, int C, int K) {
    const int km1 = K - 1;
    for (int ch = 0; ch < C; ch++) {
        float *win = window + (size_t)ch * km1;
        const float *wc = w + (size_t)ch * K;
        const float x_now = x[ch];
        float acc = wc[km1] * x_now;
        for (int i = 0; i < km1; i++) acc += wc[i] * win[i];
        for (int i = 0; i + 1 < km1; i++) win[i] = win[i + 1];
        if (km1 > 0) win[km1 - 1] = x_now;
        out[ch] = acc;
    }
    silu_rows(out, out, NULL, C);
}

#if defined(__x86_64__)
#define GDN_TARGET __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
GDN_TARGET static inline float hsum512(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
// gdn_rows_avx512: bn_gdn_step for dk = 16 * nv (nv <= 16) in one pass per row of S: the row is held in registers
// through the decay, the read (dot with k), the rank-1 update and the output (dot with q). Same operations per
// element as the four-pass code; the two dots are summed in another order.
GDN_TARGET __attribute__((always_inline)) static inline void gdn_rows_avx512(float *S, const float *q, const float *k,
                                                                              const float *v, float alpha, float beta,
                                                                              float *o, int nv, int dv) {
    const __m512 va = _mm512_set1_ps(alpha);
    for (int j = 0; j < dv; j++) {
        float *row = S + (size_t)j * nv * 16;
        __m512 r[16], u0 = _mm512_setzero_ps(), u1 = _mm512_setzero_ps();
        for (int c = 0; c < nv; c++) {
            r[c] = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * c), va);
            if (c & 1) u1 = _mm512_fmadd_ps(r[c], _mm512_loadu_ps(k + 16 * c), u1);
            else u0 = _mm512_fmadd_ps(r[c], _mm512_loadu_ps(k + 16 * c), u0);
        }
        const __m512 d = _mm512_set1_ps(beta * (v[j] - hsum512(_mm512_add_ps(u0, u1))));
        __m512 o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
        for (int c = 0; c < nv; c++) {
            r[c] = _mm512_fmadd_ps(d, _mm512_loadu_ps(k + 16 * c), r[c]);
            _mm512_storeu_ps(row + 16 * c, r[c]);
            if (c & 1) o1 = _mm512_fmadd_ps(r[c], _mm512_loadu_ps(q + 16 * c), o1);
            else o0 = _mm512_fmadd_ps(r[c], _mm512_loadu_ps(q + 16 * c), o0);
        }
        o[j] = hsum512(_mm512_add_ps(o0, o1));
    }
}
GDN_TARGET static void gdn_step_avx512(float *S, const float *q, const float *k, const float *v, float alpha,
                                       float beta, float *o, int dk, int dv) {
    if (dk == 128) gdn_rows_avx512(S, q, k, v, alpha, beta, o, 8, dv); // the Qwen3.5 head size, unrolled
    else gdn_rows_avx512(S, q, k, v, alpha, beta, o, dk / 16, dv);
}
#endif

void bn_gdn_step(float *S, const float *q, const float *k, const float *v, float alpha, float beta,
                 float *o, int dk, int dv) {
#if defined(__x86_64__)
    if (bn_cpu_has_avx512() && dk % 16 == 0 && dk <= 256) {
        gdn_step_avx512(S, q, k, v, alpha, beta, o, dk, dv);
        return;
    }
#endif
    // Row j of S (dk floats) is column j of the math S (value dim j).
    for (int j = 0; j < dv; j++) {
        float *row = S + (size_t)j * dk;
        // decay, read u_j = Σ_i S_ij k_i (after decay), delta, rank-1 update, output.
        for (int i = 0; i < dk; i++) row[i] *= alpha;
        const float u_j = bn_dot_f32(row, k, dk);
        const float delta_j = beta * (v[j] - u_j);
        bn_axpy_f32(row, delta_j, k, dk);
        o[j] = bn_dot_f32(row, q, dk);
    }
}

// ---- attention ------------------------------------------------------------------------------
void bn_attention_head(float *out, const float *q, const float *K, const float *V, int n_kv,
                       int64_t kv_stride, int hd, float scale, float *scores) {
    for (int t = 0; t < n_kv; t++) scores[t] = scale * bn_dot_f32(q, K + (size_t)t * kv_stride, hd);
    bn_softmax_inplace(scores, n_kv);
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int t = 0; t < n_kv; t++) bn_axpy_f32(out, scores[t], V + (size_t)t * kv_stride, hd);
}

void bn_attention_group(float *out, const float *q, int n_q, int q_stride, const float *K, const float *V,
                        int n_kv, int64_t kv_stride, int hd, float scale, float *scores) {
    for (int t = 0; t < n_kv; t++) {
        const float *k = K + (size_t)t * kv_stride;
        for (int h = 0; h < n_q; h++) scores[(size_t)h * n_kv + t] = scale * bn_dot_f32(q + (size_t)h * q_stride, k, hd);
    }
    for (int h = 0; h < n_q; h++) bn_softmax_inplace(scores + (size_t)h * n_kv, n_kv);
    memset(out, 0, sizeof(float) * (size_t)hd * n_q);
    for (int t = 0; t < n_kv; t++) {
        const float *v = V + (size_t)t * kv_stride;
        for (int h = 0; h < n_q; h++) bn_axpy_f32(out + (size_t)h * hd, scores[(size_t)h * n_kv + t], v, hd);
    }
}

// ---- fp16 K/V rows ---------------------------------------------------------------------------
static float dot_f32_f16_scalar(const float *a, const uint16_t *b, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += a[i] * bn_fp16_to_fp32(b[i]);
    return sum;
}
static void axpy_f16_scalar(float *y, float a, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * bn_fp16_to_fp32(x[i]);
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float dot_f32_f16_avx2(const float *a, const uint16_t *b, int n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8))),
                               acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), acc0);
    __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    float sum = _mm_cvtss_f32(s4);
    for (; i < n; i++) sum += a[i] * bn_fp16_to_fp32(b[i]);
    return sum;
}
__attribute__((target("avx2,fma,f16c"))) static void axpy_f16_avx2(float *y, float a, const uint16_t *x, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * bn_fp16_to_fp32(x[i]);
}
static int have_f16c(void) {
    static int cached = -1;
#if defined(__clang__) // clang 14 knows no "f16c" feature string; its builds enable F16C for the whole library
    if (cached < 0) cached = have_avx2();
#else
    if (cached < 0) cached = have_avx2() && __builtin_cpu_supports("f16c");
#endif
    return cached;
}
#endif

void bn_attention_group_f16(float *out, const float *q, int n_q, int q_stride, const uint16_t *K,
                            const uint16_t *V, int n_kv, int64_t kv_stride, int hd, float scale, float *scores) {
    float (*dot)(const float *, const uint16_t *, int) = dot_f32_f16_scalar;
    void (*axpy)(float *, float, const uint16_t *, int) = axpy_f16_scalar;
#if defined(__x86_64__)
    if (have_f16c()) dot = dot_f32_f16_avx2, axpy = axpy_f16_avx2;
#endif
    for (int t = 0; t < n_kv; t++) {
        const uint16_t *k = K + (size_t)t * kv_stride;
        for (int h = 0; h < n_q; h++) scores[(size_t)h * n_kv + t] = scale * dot(q + (size_t)h * q_stride, k, hd);
    }
    for (int h = 0; h < n_q; h++) bn_softmax_inplace(scores + (size_t)h * n_kv, n_kv);
    memset(out, 0, sizeof(float) * (size_t)hd * n_q);
    for (int t = 0; t < n_kv; t++) {
        const uint16_t *v = V + (size_t)t * kv_stride;
        for (int h = 0; h < n_q; h++) axpy(out + (size_t)h * hd, scores[(size_t)h * n_kv + t], v, hd);
    }
}
