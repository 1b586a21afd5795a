// tests/core/test_ops.c — every op of core/ops.h against a float64 reference written here, plus
// the thread pool and bn_matmul (all paths) against float64 matvecs. Tolerances next to each check.
#include "tests/test.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "base/threads.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdatomic.h>
#include <string.h>

static uint64_t rng = 88172645463325252ULL;
static float frand(void) { // uniform [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}
static void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = scale * frand();
}
static double maxdiff(const float *a, const double *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

static void test_activations(void) {
    const float xs[] = {-30.f, -5.f, -0.3f, 0.f, 0.7f, 4.f, 19.9f, 20.f, 20.5f, 40.f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        const double x = xs[i];
        const double sig = 1.0 / (1.0 + exp(-x));
        CHECK_NEAR(bn_sigmoid(xs[i]), sig, 1e-6, "sigmoid");
        CHECK_NEAR(bn_silu(xs[i]), x * sig, 1e-5 * fmax(1, fabs(x)), "silu");
        const double sp = x > 20 ? x : log1p(exp(x)); // ggml threshold: x > 20 returns x
        CHECK_NEAR(bn_softplus(xs[i]), sp, 1e-5 * fmax(1, fabs(x)), "softplus");
    }
    CHECK(bn_softplus(20.5f) == 20.5f, "softplus above threshold must be the identity");
}

static void test_norms(void) {
    enum { N = 67 };
    float x[N], w[N], y[N], z[N];
    double r[N];
    fill(x, N, 3.0f), fill(w, N, 1.0f), fill(z, N, 4.0f);
    const double eps = 1e-6;
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (double)x[i] * x[i];
    // rmsnorm with and without weight; relative tolerance 1e-6 of the O(1) outputs
    for (int i = 0; i < N; i++) r[i] = w[i] * x[i] / sqrt(ss / N + eps);
    bn_rmsnorm(y, x, w, N, (float)eps);
    CHECK_NEAR(maxdiff(y, r, N), 0, 2e-6, "rmsnorm");
    memcpy(y, x, sizeof y);
    bn_rmsnorm(y, y, NULL, N, (float)eps); // in place, no weight
    for (int i = 0; i < N; i++) r[i] = x[i] / sqrt(ss / N + eps);
    CHECK_NEAR(maxdiff(y, r, N), 0, 2e-6, "rmsnorm in place, w = NULL");
    // l2norm: x / sqrt(Σx² + eps)
    for (int i = 0; i < N; i++) r[i] = x[i] / sqrt(ss + eps);
    bn_l2norm(y, x, N, (float)eps);
    CHECK_NEAR(maxdiff(y, r, N), 0, 1e-7, "l2norm");
    // gated rmsnorm: RMSNorm(o; w) ⊙ SiLU(z)
    for (int i = 0; i < N; i++) r[i] = w[i] * x[i] / sqrt(ss / N + eps) * (z[i] / (1 + exp(-(double)z[i])));
    bn_gated_rmsnorm(y, x, z, w, N, (float)eps);
    CHECK_NEAR(maxdiff(y, r, N), 0, 1e-5, "gated rmsnorm");
}

static void ref_rope(double *x, int n_rot, int pos, double base, bool neox) {
    for (int i = 0; i < n_rot / 2; i++) {
        const double th = pos * pow(base, -2.0 * i / n_rot);
        const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        const double xa = x[a], xb = x[b];
        x[a] = xa * cos(th) - xb * sin(th);
        x[b] = xb * cos(th) + xa * sin(th);
    }
}

static void test_rope(void) {
    enum { HD = 32 };
    // (n_rot, pos, base, tolerance): theta is accumulated in fp32 like ggml, so the error grows
    // with pos: 1e-5 at pos 3, 1e-4 at pos 37, 2e-3 at pos 3000 (|x| <= 1).
    const struct { int n_rot, pos; float base; double tol; } cases[] = {
        {8, 3, 1e7f, 1e-5}, {8, 37, 1e7f, 1e-4}, {32, 37, 1e6f, 1e-4}, {32, 3000, 10000.f, 2e-3}, {16, 0, 1e4f, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int neox = 0; neox <= 1; neox++) {
            float x[HD];
            double r[HD];
            fill(x, HD, 1.0f);
            for (int i = 0; i < HD; i++) r[i] = x[i];
            ref_rope(r, cases[c].n_rot, cases[c].pos, cases[c].base, neox);
            if (neox)
                bn_rope_neox(x, HD, cases[c].n_rot, cases[c].pos, cases[c].base);
            else
                bn_rope_norm(x, HD, cases[c].n_rot, cases[c].pos, cases[c].base);
            char what[96];
            snprintf(what, sizeof what, "rope %s n_rot %d pos %d", neox ? "neox" : "norm", cases[c].n_rot, cases[c].pos);
            CHECK_NEAR(maxdiff(x, r, HD), 0, cases[c].tol, what);
        }
}

static void test_elementwise(void) {
    enum { N = 45 };
    float a[N], b[N], y[N];
    double r[N];
    fill(a, N, 5.f), fill(b, N, 2.f);
    for (int i = 0; i < N; i++) r[i] = a[i] / (1 + exp(-(double)a[i])) * b[i];
    bn_swiglu(y, a, b, N);
    CHECK_NEAR(maxdiff(y, r, N), 0, 1e-5, "swiglu");
    for (int i = 0; i < N; i++) r[i] = b[i] / (1 + exp(-(double)a[i]));
    bn_sigmoid_gate(y, b, a, N);
    CHECK_NEAR(maxdiff(y, r, N), 0, 1e-6, "sigmoid gate");
    double mx = -1e9, sum = 0;
    for (int i = 0; i < N; i++) mx = fmax(mx, a[i]);
    for (int i = 0; i < N; i++) sum += exp(a[i] - mx);
    for (int i = 0; i < N; i++) r[i] = exp(a[i] - mx) / sum;
    memcpy(y, a, sizeof y);
    bn_softmax_inplace(y, N);
    CHECK_NEAR(maxdiff(y, r, N), 0, 1e-7, "softmax");
    for (int n = 0; n < 40; n += 3) { // dot/axpy across SIMD tails
        double d = 0;
        for (int i = 0; i < n; i++) d += (double)a[i] * b[i];
        CHECK_NEAR(bn_dot_f32(a, b, n), d, 1e-5, "dot_f32");
    }
}

// test_swiglu_range: bn_swiglu (SiLU by the AVX-512 exp where present) over x in [-110, 110], including the ends
// where e^-x overflows or underflows, within 4 ulp of the double-precision value (or 1e-35 absolute: below x = -88.7
// e^-x overflows fp32 and x / (1 + e^-x) is -0 for |true value| < 3e-37); the result of a value does not depend on
// its position in the array (tails).
static void test_swiglu_range(void) {
    enum { N = 4409 };
    float *x = malloc(sizeof(float) * N), *one = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    float *y2 = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = -110.0f + 220.0f * (float)i / (N - 1), one[i] = 1.0f;
    bn_swiglu(y, x, one, N);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const double ref = x[i] / (1 + exp(-(double)x[i]));
        const double err = fabs(y[i] - ref), tol = fmax(4 * 0x1p-24 * fabs(ref), 1e-35);
        if (!(err <= tol)) bad++;
        if (fabs(ref) > 1e-30 && err / fabs(ref) > worst) worst = err / fabs(ref);
    }
    CHECK(bad == 0, "%d of %d silu values off by more than 4 ulp (worst relative %.3g)", bad, N, worst);
    int moved = 0;
    for (int off = 1; off < 17; off += 5) {
        bn_swiglu(y2, x + off, one, N - off);
        for (int i = 0; i < N - off; i++) moved += memcmp(&y2[i], &y[i + off], sizeof(float)) != 0;
    }
    CHECK(moved == 0, "%d silu values change with their position in the array", moved);
    printf("  silu over [-110, 110]: worst relative error %.3g\n", worst);
    free(x), free(one), free(y), free(y2);
}

static void test_conv(void) {
    enum { C = 19, K = 4, T = 7 };
    float w[C * K], win[C * (K - 1)], x[T][C], out[C];
    fill(w, C * K, 0.7f), fill(&x[0][0], T * C, 2.f);
    memset(win, 0, sizeof win);
    double maxd = 0;
    for (int t = 0; t < T; t++) {
        float xt[C];
        memcpy(xt, x[t], sizeof xt);
        bn_conv1d_silu_step(out, win, xt, w, C, K);
        for (int ch = 0; ch < C; ch++) {
            double acc = 0; // c_t = Σ_i w[ch][i]·x_{t−3+i} (zero before the start)
            for (int i = 0; i < K; i++) {
                const int tau = t - (K - 1) + i;
                if (tau >= 0) acc += (double)w[ch * K + i] * x[tau][ch];
            }
            maxd = fmax(maxd, fabs(out[ch] - acc / (1 + exp(-acc))));
        }
    }
    CHECK_NEAR(maxd, 0, 1e-5, "conv1d+silu over 7 steps");
    // in-place (out aliases x) gives the same result
    float win2[C * (K - 1)], xa[C], o2[C];
    memset(win2, 0, sizeof win2);
    memset(win, 0, sizeof win);
    for (int t = 0; t < 3; t++) {
        memcpy(xa, x[t], sizeof xa);
        bn_conv1d_silu_step(xa, win2, xa, w, C, K);
        bn_conv1d_silu_step(o2, win, x[t], w, C, K);
        CHECK(memcmp(xa, o2, sizeof xa) == 0, "conv in place differs at step %d", t);
    }
}

// test_gdn: DK = 16 and 128 (the fused AVX-512 row pass where present: generic and unrolled), 8 value rows.
static void test_gdn_dims(int DK) {
    enum { DV = 8, T = 6 };
    float *S = calloc((size_t)DV * DK, sizeof(float)); // {dk, dv}: S[j*dk + i]
    double *R = calloc((size_t)DK * DV, sizeof(double)), *N = malloc(sizeof(double) * DK * DV); // R[i*DV + j]
    float *q = malloc(sizeof(float) * DK), *k = malloc(sizeof(float) * DK), v[DV], o[DV];
    double maxd_o = 0, maxd_s = 0;
    for (int t = 0; t < T; t++) {
        fill(q, DK, 0.3f), fill(k, DK, 1.f), fill(v, DV, 2.f);
        double kn = 0;
        for (int i = 0; i < DK; i++) kn += (double)k[i] * k[i];
        for (int i = 0; i < DK; i++) k[i] = (float)(k[i] / sqrt(kn)); // unit key like the model
        const float alpha = 0.5f + 0.4f * (frand() + 1) / 2, beta = (frand() + 1) / 2;
        bn_gdn_step(S, q, k, v, alpha, beta, o, DK, DV);
        // matrix form: S_t = α (I − β k kᵀ) S + β k vᵀ ; o = S_tᵀ q
        for (int i = 0; i < DK; i++)
            for (int j = 0; j < DV; j++) {
                double kS = 0;
                for (int l = 0; l < DK; l++) kS += k[l] * R[l * DV + j];
                N[i * DV + j] = alpha * (R[i * DV + j] - beta * k[i] * kS) + beta * k[i] * v[j];
            }
        memcpy(R, N, sizeof(double) * DK * DV);
        for (int j = 0; j < DV; j++) {
            double oj = 0;
            for (int i = 0; i < DK; i++) oj += R[i * DV + j] * q[i];
            maxd_o = fmax(maxd_o, fabs(o[j] - oj));
            for (int i = 0; i < DK; i++) maxd_s = fmax(maxd_s, fabs(S[j * DK + i] - R[i * DV + j]));
        }
    }
    CHECK_NEAR(maxd_o, 0, 1e-5, "gdn output vs matrix form");
    CHECK_NEAR(maxd_s, 0, 1e-5, "gdn state vs matrix form (layout S[j*dk+i])");
    free(S), free(R), free(N), free(q), free(k);
}

static void test_gdn(void) {
    test_gdn_dims(16);
    test_gdn_dims(128);
}

static void test_attention(void) {
    enum { HD = 24, NKV = 9, STRIDE = 3 * HD };
    float q[HD], KV[2][NKV * STRIDE], out[HD], scores[NKV];
    fill(q, HD, 1.f), fill(KV[0], NKV * STRIDE, 1.f), fill(KV[1], NKV * STRIDE, 1.f);
    const int off = HD; // head 1 of a 3-head row
    const double scale = 1.0 / sqrt(HD);
    double s[NKV], mx = -1e9, sum = 0, r[HD] = {0};
    for (int t = 0; t < NKV; t++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)q[i] * KV[0][t * STRIDE + off + i];
        s[t] = d * scale;
        mx = fmax(mx, s[t]);
    }
    for (int t = 0; t < NKV; t++) sum += (s[t] = exp(s[t] - mx));
    for (int t = 0; t < NKV; t++)
        for (int i = 0; i < HD; i++) r[i] += s[t] / sum * KV[1][t * STRIDE + off + i];
    bn_attention_head(out, q, KV[0] + off, KV[1] + off, NKV, STRIDE, HD, (float)scale, scores);
    CHECK_NEAR(maxdiff(out, r, HD), 0, 1e-6, "attention head");
    // grouped: 3 query heads (q, q reversed, q scaled) on the same K/V head == 3 single-head calls
    enum { NQ = 3, QS = HD + 5 };
    float qg[NQ * QS], og[NQ * HD], sg[NQ * NKV], o1[HD];
    for (int i = 0; i < HD; i++) qg[i] = q[i], qg[QS + i] = q[HD - 1 - i], qg[2 * QS + i] = 2.5f * q[i];
    bn_attention_group(og, qg, NQ, QS, KV[0] + off, KV[1] + off, NKV, STRIDE, HD, (float)scale, sg);
    for (int h = 0; h < NQ; h++) {
        bn_attention_head(o1, qg + h * QS, KV[0] + off, KV[1] + off, NKV, STRIDE, HD, (float)scale, scores);
        CHECK(memcmp(o1, og + h * HD, sizeof o1) == 0, "attention group head %d differs from the single-head op", h);
    }
    // fp16 K/V: equal to the fp32 op on the fp16-rounded K/V up to fp32 summation order (1e-6)
    uint16_t K16[NKV * STRIDE], V16[NKV * STRIDE];
    float Kr[NKV * STRIDE], Vr[NKV * STRIDE], o16[NQ * HD];
    for (int i = 0; i < NKV * STRIDE; i++) {
        K16[i] = bn_fp32_to_fp16(KV[0][i]), V16[i] = bn_fp32_to_fp16(KV[1][i]);
        Kr[i] = bn_fp16_to_fp32(K16[i]), Vr[i] = bn_fp16_to_fp32(V16[i]);
    }
    bn_attention_group_f16(o16, qg, NQ, QS, K16 + off, V16 + off, NKV, STRIDE, HD, (float)scale, sg);
    bn_attention_group(og, qg, NQ, QS, Kr + off, Vr + off, NKV, STRIDE, HD, (float)scale, sg);
    double d16 = 0;
    for (int i = 0; i < NQ * HD; i++) d16 = fmax(d16, fabs(o16[i] - og[i]));
    CHECK_NEAR(d16, 0, 1e-6, "attention group with fp16 K/V");
}

// ---- thread pool --------------------------------------------------------------------------
typedef struct {
    atomic_int *hits;
    atomic_int max_tid;
} pool_ctx;
static void pool_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    pool_ctx *c = ctx;
    for (int64_t i = i0; i < i1; i++) atomic_fetch_add(&c->hits[i], 1);
    int cur = atomic_load(&c->max_tid);
    while (tid > cur && !atomic_compare_exchange_weak(&c->max_tid, &cur, tid)) {}
}
static void test_pool(void) {
    enum { N = 1000 };
    bn_pool *p = bn_pool_new(3);
    CHECK(bn_pool_n_threads(p) == 3, "n_threads");
    atomic_int *hits = xcalloc(N, sizeof(atomic_int));
    pool_ctx c = {.hits = hits};
    const int rounds = 2000;
    for (int r = 0; r < rounds; r++) bn_parallel_for(p, N, pool_task, &c);
    bn_parallel_for(p, 2, pool_task, &c); // fewer items than threads
    bn_parallel_for(NULL, N, pool_task, &c);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += atomic_load(&hits[i]) != rounds + 1 + (i < 2);
    CHECK(bad == 0, "%d items not visited exactly once per round", bad);
    // chunks are claimed dynamically: a worker may take none, but every tid must be < n_threads
    CHECK(atomic_load(&c.max_tid) >= 0 && atomic_load(&c.max_tid) <= 2, "max tid %d", atomic_load(&c.max_tid));
    bn_pool_free(p);
    free(hits);
}

// ---- matmul -------------------------------------------------------------------------------
// check_matmul: W {ne0, ne1} of type, n activation rows; compares to float64 on the dequantized
// weights and, for quantized types, on the activations rounded through Q8_0 exactly as the engine
// does (vec_dot_type of every type tested here). tol is relative to the RMS of y.
static void check_matmul(int type, int64_t ne0, int64_t ne1, int n, double tol, bn_pool *pool) {
    float *wf = xmalloc((size_t)(ne0 * ne1) * 4), *x = xmalloc((size_t)(n * ne0) * 4), *y = xmalloc((size_t)(n * ne1) * 4);
    fill(wf, (int)(ne0 * ne1), 0.5f), fill(x, (int)(n * ne0), 1.f);
    const size_t wbytes = bn_row_size(type, ne0) * (size_t)ne1;
    void *wq = xmalloc(wbytes);
    if (type == BN_F32)
        memcpy(wq, wf, wbytes);
    else
        CHECK(bn_quantize_ref(type, wf, wq, ne0 * ne1) == wbytes, "quantize %s", bn_type_name(type));
    CHECK(bn_dequantize(type, wq, wf, ne0 * ne1) == 0, "dequantize %s", bn_type_name(type));
    bn_weight w = {.data = wq, .type = type, .ne = {ne0, ne1, 1, 1}, .name = "w"};
    void *work = bn_aligned_alloc(bn_matmul_work_size(&w, n));
    bn_matmul(&w, x, y, n, work, pool);
    if (bn_type_traits_of(type)->is_quantized) { // the reference sees the Q8_0-rounded activations
        void *xq = xmalloc(bn_row_size(BN_Q8_0, ne0));
        for (int t = 0; t < n; t++) {
            bn_quantize_ref(BN_Q8_0, x + t * ne0, xq, ne0);
            bn_dequantize(BN_Q8_0, xq, x + t * ne0, ne0);
        }
        free(xq);
    }
    double num = 0, den = 0;
    for (int t = 0; t < n; t++)
        for (int64_t j = 0; j < ne1; j++) {
            double r = 0;
            for (int64_t i = 0; i < ne0; i++) r += (double)wf[j * ne0 + i] * x[t * ne0 + i];
            const double d = y[t * ne1 + j] - r;
            num = fmax(num, fabs(d));
            den += r * r;
        }
    const double rel = num / sqrt(den / (n * ne1));
    char what[96];
    snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d (max err / rms)", bn_type_name(type), (long long)ne0,
             (long long)ne1, n);
    CHECK_NEAR(rel, 0, tol, what);
    float row[512];
    CHECK(bn_weight_row_f32(&w, ne1 - 1, row) == 0 && memcmp(row, wf + (ne1 - 1) * ne0, ne0 * 4) == 0, "row lookup %s",
          bn_type_name(type));
    free(wf), free(x), free(y), free(wq), free(work);
}

static void test_matmul(void) {
    bn_pool *pool = bn_pool_new(2);
    const int ns[] = {1, 3, 17};
    for (int k = 0; k < 3; k++) {
        check_matmul(BN_F32, 96, 70, ns[k], 1e-5, pool);
        check_matmul(BN_F16, 64, 33, ns[k], 1e-5, pool);
        check_matmul(BN_BF16, 64, 33, ns[k], 1e-5, pool);
        // quantized, vs Q8_0-rounded activations: only fp32 summation order differs -> 1e-5 of rms
        check_matmul(BN_Q8_0, 256, 40, ns[k], 1e-5, pool);
        check_matmul(BN_Q1_0, 256, 40, ns[k], 1e-5, pool);
        check_matmul(BN_Q2_0, 256, 40, ns[k], 1e-5, pool);
        check_matmul(BN_PQ2_0, 256, 40, ns[k], 1e-5, pool);
        check_matmul(BN_Q4_0, 256, 40, ns[k], 1e-5, pool);
    }
    check_matmul(BN_F32, 96, 70, 5, 1e-5, NULL);
    bn_pool_free(pool);
}

int main(void) {
    test_activations();
    test_norms();
    test_rope();
    test_elementwise();
    test_swiglu_range();
    test_conv();
    test_gdn();
    test_attention();
    test_pool();
    test_matmul();
    return test_done("test_ops");
}
