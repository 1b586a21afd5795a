// tests/train/test_backward_ops.c — every per-op backward of train/backward.h (except the GDN
// recurrence, see test_backward_gdn.c) against central finite differences of a float64 forward
// written here. Tolerance: max |analytic − fd| / (max |fd| + 1e-3) <= 1e-4 (fp32 backward).
#include <string.h>
#include "tests/test.h"
#include "tests/train/fd.h"
#include "train/backward.h"
#include "core/ops.h"
#include "quant/quant.h"

#define TOL 1e-4
#define EPS_NORM 1e-6

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

// ---- a generic context: up to 6 double inputs, r weights, sizes ----------------------------
typedef struct {
    double *in[6];
    double *r;
    int n, rows, K, T, a, b, c, d;
    double s;
    const double *drop;
} ctx_t;

// ---- norms ----------------------------------------------------------------------------------
static void rmsnorm_d(const double *x, const double *w, int n, double *y) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double rho = 1.0 / sqrt(ss / n + EPS_NORM);
    for (int i = 0; i < n; i++) y[i] = (w ? w[i] : 1.0) * x[i] * rho;
}
static double loss_rmsnorm(void *p) {
    ctx_t *c = p;
    double y[64], L = 0;
    for (int t = 0; t < c->rows; t++) {
        rmsnorm_d(c->in[0] + t * c->n, c->in[1], c->n, y);
        for (int i = 0; i < c->n; i++) L += c->r[t * c->n + i] * y[i];
    }
    return L;
}
static double loss_l2norm(void *p) {
    ctx_t *c = p;
    double L = 0;
    for (int t = 0; t < c->rows; t++) {
        const double *x = c->in[0] + t * c->n;
        double ss = 0;
        for (int i = 0; i < c->n; i++) ss += x[i] * x[i];
        double inv = 1.0 / sqrt(ss + EPS_NORM);
        for (int i = 0; i < c->n; i++) L += c->r[t * c->n + i] * x[i] * inv;
    }
    return L;
}
static double loss_gated_norm(void *p) {
    ctx_t *c = p;
    double y[64], L = 0;
    for (int t = 0; t < c->rows; t++) {
        rmsnorm_d(c->in[0] + t * c->n, c->in[2], c->n, y);
        const double *z = c->in[1] + t * c->n;
        for (int i = 0; i < c->n; i++) L += c->r[t * c->n + i] * y[i] * z[i] * sig(z[i]);
    }
    return L;
}

static void test_norms(void) {
    enum { N = 16, R = 3 };
    double x[N * R], w[N], z[N * R], r[N * R];
    fd_fill(x, N * R, -2, 2); fd_fill(w, N, 0.5, 1.5); fd_fill(z, N * R, -3, 3); fd_fill(r, N * R, -1, 1);
    float *xf = fd_to_f32(x, N * R), *wf = fd_to_f32(w, N), *zf = fd_to_f32(z, N * R), *rf = fd_to_f32(r, N * R);
    float dx[N * R] = {0}, dz[N * R] = {0};
    ctx_t c = {.in = {x, w}, .r = r, .n = N, .rows = R};
    bn_rmsnorm_bwd(xf, wf, N, R, EPS_NORM, rf, dx);
    fd_check("rmsnorm dx", loss_rmsnorm, &c, x, N * R, dx, TOL);

    memset(dx, 0, sizeof dx);
    bn_l2norm_bwd(xf, N, R, EPS_NORM, rf, dx);
    fd_check("l2norm dx", loss_l2norm, &c, x, N * R, dx, TOL);

    memset(dx, 0, sizeof dx);
    ctx_t cg = {.in = {x, z, w}, .r = r, .n = N, .rows = R};
    bn_gated_rmsnorm_bwd(xf, zf, wf, N, R, EPS_NORM, rf, dx, dz);
    fd_check("gated rmsnorm do", loss_gated_norm, &cg, x, N * R, dx, TOL);
    fd_check("gated rmsnorm dz", loss_gated_norm, &cg, z, N * R, dz, TOL);
    free(xf); free(wf); free(zf); free(rf);
}

// ---- elementwise ----------------------------------------------------------------------------
static double loss_swiglu(void *p) {
    ctx_t *c = p;
    double L = 0;
    for (int i = 0; i < c->n; i++) { double a = c->in[0][i]; L += c->r[i] * a * sig(a) * c->in[1][i]; }
    return L;
}
static double loss_siggate(void *p) {
    ctx_t *c = p;
    double L = 0;
    for (int i = 0; i < c->n; i++) L += c->r[i] * c->in[0][i] * sig(c->in[1][i]);
    return L;
}
static double loss_sigmoid(void *p) {
    ctx_t *c = p;
    double L = 0;
    for (int i = 0; i < c->n; i++) L += c->r[i] * sig(c->in[0][i]);
    return L;
}
static double loss_gdn_gate(void *p) { // g = softplus(a + dt)·ssm_a, n heads × rows
    ctx_t *c = p;
    double L = 0;
    for (int t = 0; t < c->rows; t++)
        for (int h = 0; h < c->n; h++) L += c->r[t * c->n + h] * softplus(c->in[0][t * c->n + h] + c->in[1][h]) * c->in[2][h];
    return L;
}
static double loss_scale(void *p) {
    ctx_t *c = p;
    double L = 0;
    for (int i = 0; i < c->n; i++) L += c->r[i] * c->s * c->in[0][i];
    return L;
}

static void test_elementwise(void) {
    enum { N = 40, H = 5, R = 4 };
    double a[N], b[N], r[N], dt[H], sa[H];
    fd_fill(a, N, -4, 4); fd_fill(b, N, -3, 3); fd_fill(r, N, -1, 1); fd_fill(dt, H, -1, 1); fd_fill(sa, H, -2, -0.1);
    a[0] = 21.5; // softplus linear branch (x > 20) for the gate test
    float *af = fd_to_f32(a, N), *bf = fd_to_f32(b, N), *rf = fd_to_f32(r, N), *dtf = fd_to_f32(dt, H), *saf = fd_to_f32(sa, H);
    float da[N] = {0}, db[N] = {0};
    ctx_t c = {.in = {a, b}, .r = r, .n = N};
    bn_swiglu_bwd(af, bf, N, rf, da, db);
    fd_check("swiglu da", loss_swiglu, &c, a, N, da, TOL);
    fd_check("swiglu dc", loss_swiglu, &c, b, N, db, TOL);

    memset(da, 0, sizeof da); memset(db, 0, sizeof db);
    bn_sigmoid_gate_bwd(af, bf, N, rf, da, db);
    fd_check("sigmoid gate du", loss_siggate, &c, a, N, da, TOL);
    fd_check("sigmoid gate dg", loss_siggate, &c, b, N, db, TOL);

    float beta[N];
    for (int i = 0; i < N; i++) beta[i] = (float)sig(b[i]);
    memset(db, 0, sizeof db);
    ctx_t cb = {.in = {b}, .r = r, .n = N};
    bn_sigmoid_bwd(beta, N, rf, db);
    fd_check("beta = sigmoid(b) db", loss_sigmoid, &cb, b, N, db, TOL);

    memset(da, 0, sizeof da);
    ctx_t cgate = {.in = {a, dt, sa}, .r = r, .n = H, .rows = R};
    bn_gdn_gate_bwd(af, dtf, saf, H, R, rf, da);
    fd_check("g = softplus(a+dt)*ssm_a da", loss_gdn_gate, &cgate, a, H * R, da, TOL);

    memset(da, 0, sizeof da);
    ctx_t cs = {.in = {a}, .r = r, .n = N, .s = 1.0 / sqrt(32.0)};
    bn_scale_bwd((float)(1.0 / sqrt(32.0)), N, rf, da);
    fd_check("q scale dq", loss_scale, &cs, a, N, da, TOL);
    free(af); free(bf); free(rf); free(dtf); free(saf);
}

// ---- RoPE -----------------------------------------------------------------------------------
static double loss_rope(void *p) { // a = head_dim, b = n_heads, T, d = n_rot, K = mode, s = base
    ctx_t *c = p;
    int hd = c->a, nh = c->b, n_rot = c->d, half = n_rot / 2;
    double L = 0;
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < nh; h++) {
            const double *x = c->in[0] + ((size_t)t * nh + h) * hd;
            const double *r = c->r + ((size_t)t * nh + h) * hd;
            double y[64];
            for (int i = 0; i < hd; i++) y[i] = x[i];
            for (int i = 0; i < half; i++) {
                double th = (c->c + t) * pow(c->s, -2.0 * i / n_rot);
                int i0 = c->K == BN_ROPE_NEOX ? i : 2 * i, i1 = c->K == BN_ROPE_NEOX ? i + half : 2 * i + 1;
                y[i0] = x[i0] * cos(th) - x[i1] * sin(th);
                y[i1] = x[i1] * cos(th) + x[i0] * sin(th);
            }
            for (int i = 0; i < hd; i++) L += r[i] * y[i];
        }
    return L;
}

static void test_rope(void) {
    enum { HD = 32, NH = 3, T = 4, N = HD * NH * T };
    double x[N], r[N];
    fd_fill(x, N, -1, 1); fd_fill(r, N, -1, 1);
    float *rf = fd_to_f32(r, N);
    for (int mode = 0; mode < 2; mode++) {
        int n_rot = mode == BN_ROPE_NEOX ? 8 : HD; // NEOX partial (qwen35: 64 of 256), NORM full
        float dx[N] = {0};
        ctx_t c = {.in = {x}, .r = r, .a = HD, .b = NH, .T = T, .d = n_rot, .K = mode, .c = 5, .s = 10000.0};
        bn_rope_bwd(rf, HD, NH, T, n_rot, 5, 10000.0f, mode, dx);
        fd_check(mode == BN_ROPE_NEOX ? "rope neox partial dx" : "rope norm dx", loss_rope, &c, x, N, dx, TOL);
    }
    // forward consistency with the +θ rotation: R_{−θ}(R_θ x) = x
    float v[HD];
    for (int i = 0; i < HD; i++) v[i] = (float)x[i];
    bn_rope_inplace(v, HD, 1, 8, 7, 1e7f, BN_ROPE_NEOX, +1);
    bn_rope_inplace(v, HD, 1, 8, 7, 1e7f, BN_ROPE_NEOX, -1);
    double md = 0;
    for (int i = 0; i < HD; i++) md = fmax(md, fabs(v[i] - (float)x[i]));
    CHECK(md < 1e-5, "rope inverse round trip max diff %g (tol 1e-5)", md);
    free(rf);
}

// ---- linear + LoRA --------------------------------------------------------------------------
// in[0] = x {NI, T}, in[1] = W {NI, NO}, in[2] = A {NI, r}, in[3] = B {r, NO}; a = NI, b = NO, d = r
static double loss_linear(void *p) {
    ctx_t *c = p;
    int ni = c->a, no = c->b, r = c->d;
    double L = 0;
    for (int t = 0; t < c->T; t++) {
        const double *x = c->in[0] + (size_t)t * ni;
        double ax[16];
        for (int k = 0; k < r; k++) {
            ax[k] = 0;
            for (int i = 0; i < ni; i++) ax[k] += c->in[2][(size_t)k * ni + i] * x[i] * (c->drop ? c->drop[(size_t)t * ni + i] : 1.0);
        }
        for (int o = 0; o < no; o++) {
            double y = 0;
            for (int i = 0; i < ni; i++) y += c->in[1][(size_t)o * ni + i] * x[i];
            double lo = 0;
            for (int k = 0; k < r; k++) lo += c->in[3][(size_t)o * r + k] * ax[k];
            L += c->r[(size_t)t * no + o] * (y + c->s * lo);
        }
    }
    return L;
}

static void test_linear_lora(int wtype, bool dropout) {
    enum { NI = 128, NO = 12, T = 3, R = 4 };
    static double x[NI * T], W[NI * NO], A[NI * R], B[R * NO], r[NO * T], drop[NI * T];
    fd_fill(x, NI * T, -1, 1); fd_fill(W, NI * NO, -0.5, 0.5); fd_fill(A, NI * R, -0.3, 0.3); fd_fill(B, R * NO, -0.3, 0.3);
    fd_fill(r, NO * T, -1, 1);
    for (int i = 0; i < NI * T; i++) drop[i] = fd_rand(0, 1) < 0.25 ? 0.0 : 1.0 / 0.75;
    // W in the given type; the float64 reference uses its dequantized values
    float *Wf = fd_to_f32(W, NI * NO);
    size_t rs = bn_row_size(wtype, NI);
    void *Wq = malloc(rs * NO);
    if (wtype == BN_F32) memcpy(Wq, Wf, sizeof(float) * NI * NO);
    else {
        CHECK(bn_quantize_ref(wtype, Wf, Wq, NI * NO) > 0, "quantize %s", bn_type_name(wtype));
        CHECK(bn_dequantize(wtype, Wq, Wf, NI * NO) == 0, "dequantize %s", bn_type_name(wtype));
        for (int i = 0; i < NI * NO; i++) W[i] = Wf[i];
    }
    bn_weight w = {.data = Wq, .type = wtype, .ne = {NI, NO, 1, 1}, .name = "test.weight"};
    float *xf = fd_to_f32(x, NI * T), *Af = fd_to_f32(A, NI * R), *Bf = fd_to_f32(B, R * NO), *rf = fd_to_f32(r, NO * T);
    float *dropf = fd_to_f32(drop, NI * T);
    float dx[NI * T] = {0}, dA[NI * R] = {0}, dB[R * NO] = {0}, y[NO * T], ax[R * T];
    bn_lora_view lv = {.r = R, .scale = 0.75f, .A = Af, .B = Bf, .dA = dA, .dB = dB};
    char err[256];
    ctx_t c = {.in = {x, W, A, B}, .r = r, .a = NI, .b = NO, .d = R, .T = T, .s = 0.75, .drop = dropout ? drop : NULL};
    // forward vs float64
    CHECK(bn_linear_lora_fwd(&w, &lv, xf, T, dropout ? dropf : NULL, y, ax, err, sizeof err) == 0, "fwd: %s", err);
    double Lf = 0;
    for (int i = 0; i < NO * T; i++) Lf += r[i] * y[i];
    CHECK_NEAR(Lf, loss_linear(&c), 1e-4 * (1 + fabs(Lf)), "linear+lora forward vs float64 (rel 1e-4)");
    CHECK(bn_linear_lora_bwd(&w, &lv, xf, T, dropout ? dropf : NULL, ax, rf, dx, err, sizeof err) == 0, "bwd: %s", err);
    char what[64];
    snprintf(what, sizeof what, "linear %s%s dx", bn_type_name(wtype), dropout ? "+drop" : "");
    fd_check(what, loss_linear, &c, x, NI * T, dx, TOL);
    snprintf(what, sizeof what, "linear %s%s dA", bn_type_name(wtype), dropout ? "+drop" : "");
    fd_check(what, loss_linear, &c, A, NI * R, dA, TOL);
    snprintf(what, sizeof what, "linear %s%s dB", bn_type_name(wtype), dropout ? "+drop" : "");
    fd_check(what, loss_linear, &c, B, R * NO, dB, TOL);
    // ax == NULL (recomputed) gives the same dA/dB
    float dA2[NI * R] = {0}, dB2[R * NO] = {0};
    bn_lora_view lv2 = lv;
    lv2.dA = dA2; lv2.dB = dB2;
    bn_linear_lora_bwd(&w, &lv2, xf, T, dropout ? dropf : NULL, NULL, rf, NULL, err, sizeof err);
    double md = 0;
    for (int i = 0; i < NI * R; i++) md = fmax(md, fabs(dA2[i] - dA[i]));
    for (int i = 0; i < R * NO; i++) md = fmax(md, fabs(dB2[i] - dB[i]));
    CHECK(md < 1e-6, "recomputed ax changes dA/dB by %g (tol 1e-6)", md);
    free(Wf); free(Wq); free(xf); free(Af); free(Bf); free(rf); free(dropf);
}

// ---- attention ------------------------------------------------------------------------------
// in[0] = q {hd, nh, T}, in[1] = k {hd, nkv, T}, in[2] = v; a = hd, b = nh, c = nkv
static double loss_attn(void *p) {
    ctx_t *c = p;
    int hd = c->a, nh = c->b, nkv = c->c, T = c->T, grp = nh / nkv;
    double L = 0, sc[16];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int kv = h / grp;
            const double *q = c->in[0] + ((size_t)t * nh + h) * hd;
            double mx = -1e300, sum = 0;
            for (int u = 0; u <= t; u++) {
                const double *k = c->in[1] + ((size_t)u * nkv + kv) * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += q[d] * k[d];
                sc[u] = s * c->s;
                if (sc[u] > mx) mx = sc[u];
            }
            for (int u = 0; u <= t; u++) { sc[u] = exp(sc[u] - mx); sum += sc[u]; }
            for (int d = 0; d < hd; d++) {
                double o = 0;
                for (int u = 0; u <= t; u++) o += sc[u] / sum * c->in[2][((size_t)u * nkv + kv) * hd + d];
                L += c->r[((size_t)t * nh + h) * hd + d] * o;
            }
        }
    return L;
}

static void test_attention(void) {
    enum { HD = 8, NH = 4, NKV = 2, T = 5, NQ = HD * NH * T, NK = HD * NKV * T };
    double q[NQ], k[NK], v[NK], r[NQ];
    fd_fill(q, NQ, -1.5, 1.5); fd_fill(k, NK, -1.5, 1.5); fd_fill(v, NK, -1, 1); fd_fill(r, NQ, -1, 1);
    float *qf = fd_to_f32(q, NQ), *kf = fd_to_f32(k, NK), *vf = fd_to_f32(v, NK), *rf = fd_to_f32(r, NQ);
    float dq[NQ] = {0}, dk[NK] = {0}, dv[NK] = {0}, out[NQ];
    double scale = 1.0 / sqrt((double)HD);
    ctx_t c = {.in = {q, k, v}, .r = r, .a = HD, .b = NH, .c = NKV, .T = T, .s = scale};
    bn_attn_fwd(qf, kf, vf, T, HD, NH, NKV, (float)scale, out);
    double Lf = 0;
    for (int i = 0; i < NQ; i++) Lf += r[i] * out[i];
    CHECK_NEAR(Lf, loss_attn(&c), 1e-5 * (1 + fabs(Lf)), "attention forward vs float64 (rel 1e-5)");
    bn_attn_bwd(qf, kf, vf, T, HD, NH, NKV, (float)scale, rf, dq, dk, dv);
    fd_check("attention GQA causal dQ", loss_attn, &c, q, NQ, dq, TOL);
    fd_check("attention GQA causal dK", loss_attn, &c, k, NK, dk, TOL);
    fd_check("attention GQA causal dV", loss_attn, &c, v, NK, dv, TOL);
    free(qf); free(kf); free(vf); free(rf);
}

// ---- conv1d + SiLU --------------------------------------------------------------------------
// in[0] = mix {C, T}, in[1] = state0 {K−1, C} (ops.h window layout), in[2] = w {K, C}; n = C
static double loss_conv(void *p) {
    ctx_t *c = p;
    int C = c->n, K = c->K, T = c->T;
    double L = 0;
    for (int t = 0; t < T; t++)
        for (int ch = 0; ch < C; ch++) {
            double s = 0;
            for (int i = 0; i < K; i++) {
                int e = t + i;
                double in = e < K - 1 ? c->in[1][(size_t)ch * (K - 1) + e] : c->in[0][(size_t)(e - (K - 1)) * C + ch];
                s += c->in[2][(size_t)ch * K + i] * in;
            }
            L += c->r[(size_t)t * C + ch] * s * sig(s);
        }
    return L;
}

static void test_conv(void) {
    enum { C = 6, K = 4, T = 5 };
    double mix[C * T], st[C * (K - 1)], w[C * K], r[C * T];
    fd_fill(mix, C * T, -2, 2); fd_fill(st, C * (K - 1), -2, 2); fd_fill(w, C * K, -1, 1); fd_fill(r, C * T, -1, 1);
    float *mf = fd_to_f32(mix, C * T), *sf = fd_to_f32(st, C * (K - 1)), *wf = fd_to_f32(w, C * K), *rf = fd_to_f32(r, C * T);
    float dmix[C * T] = {0}, dst[C * (K - 1)] = {0}, out[C * T], st_out[C * (K - 1)];
    ctx_t c = {.in = {mix, st, w}, .r = r, .n = C, .K = K, .T = T};
    bn_conv1d_silu_fwd(mf, sf, wf, C, K, T, out, st_out);
    double Lf = 0;
    for (int i = 0; i < C * T; i++) Lf += r[i] * out[i];
    CHECK_NEAR(Lf, loss_conv(&c), 1e-5 * (1 + fabs(Lf)), "conv forward vs float64 (rel 1e-5)");
    // new state = the last K−1 raw inputs; and the same as core/ops.h's per-token step
    float win[C * (K - 1)], o1[C];
    memcpy(win, sf, sizeof win);
    double md = 0;
    for (int t = 0; t < T; t++) {
        bn_conv1d_silu_step(o1, win, mf + t * C, wf, C, K);
        for (int ch = 0; ch < C; ch++) md = fmax(md, fabs(o1[ch] - out[t * C + ch]));
    }
    for (int i = 0; i < C * (K - 1); i++) md = fmax(md, fabs(win[i] - st_out[i]));
    CHECK(md < 1e-6, "conv sequence forward vs ops.h step: max diff %g (tol 1e-6)", md);
    bn_conv1d_silu_bwd(mf, sf, wf, C, K, T, rf, dmix, dst);
    fd_check("conv1d+silu dmix", loss_conv, &c, mix, C * T, dmix, TOL);
    fd_check("conv1d+silu dstate (carry)", loss_conv, &c, st, C * (K - 1), dst, TOL);
    free(mf); free(sf); free(wf); free(rf);
}

int main(void) {
    test_norms();
    test_elementwise();
    test_rope();
    test_linear_lora(BN_F32, false);
    test_linear_lora(BN_F32, true);
    if (bn_type_traits_of(BN_Q8_0) && bn_type_traits_of(BN_Q8_0)->from_float_ref) test_linear_lora(BN_Q8_0, false);
    if (bn_type_traits_of(BN_Q1_0) && bn_type_traits_of(BN_Q1_0)->from_float_ref) test_linear_lora(BN_Q1_0, true);
    test_attention();
    bn_train_set_threads(2); // kv heads over threads
    test_attention();
    bn_train_set_threads(1);
    test_conv();
    return test_done("train_backward_ops");
}
