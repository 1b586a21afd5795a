// tests/train/test_backward_gdn.c — the gated delta-rule recurrence backward (docs/model.md §8) over
// several steps with a carried-in state S0 and a loss on the final state, Hk = 2 < Hv = 4 (value
// head h reads key head h mod Hk), against central finite differences of a float64 forward.
// Also: the forward equals core/ops.h bn_gdn_step, checkpoint spacing does not change the
// result, and the whole GDN core chain (L2 norm → q scale → recurrence → gated norm) composes.
// Tolerance: max |analytic − fd| / (max |fd| + 1e-3) <= 1e-4.
#include <string.h>
#include "tests/test.h"
#include "tests/train/fd.h"
#include "train/backward.h"
#include "core/ops.h"

enum { T = 7, HK = 2, HV = 4, DK = 4, DV = 3 };
enum { NQ = DK * HK * T, NV = DV * HV * T, NG = HV * T, NS = DK * DV * HV };

typedef struct {
    double q[NQ], k[NQ], v[NV], g[NG], beta[NG], S0[NS];
    double r[NV], rS[NS]; // loss weights on outputs and on the final state
} gdn_ctx;

// S index as core/ops.h: S[h][j*dk + i]
static double loss_gdn(void *p) {
    gdn_ctx *c = p;
    double S[NS], L = 0;
    memcpy(S, c->S0, sizeof S);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < HV; h++) {
            int kh = h % HK;
            double *Sh = S + h * DK * DV;
            const double *q = c->q + (t * HK + kh) * DK, *k = c->k + (t * HK + kh) * DK, *v = c->v + (t * HV + h) * DV;
            double alpha = exp(c->g[t * HV + h]), b = c->beta[t * HV + h];
            for (int e = 0; e < DK * DV; e++) Sh[e] *= alpha;
            for (int j = 0; j < DV; j++) {
                double u = 0;
                for (int i = 0; i < DK; i++) u += Sh[j * DK + i] * k[i];
                double d = b * (v[j] - u);
                for (int i = 0; i < DK; i++) Sh[j * DK + i] += k[i] * d;
            }
            for (int j = 0; j < DV; j++) {
                double o = 0;
                for (int i = 0; i < DK; i++) o += Sh[j * DK + i] * q[i];
                L += c->r[(t * HV + h) * DV + j] * o;
            }
        }
    for (int e = 0; e < NS; e++) L += c->rS[e] * S[e];
    return L;
}

static void test_recurrence(int ckpt_every) {
    static gdn_ctx c;
    fd_fill(c.q, NQ, -0.5, 0.5); fd_fill(c.k, NQ, -0.5, 0.5); fd_fill(c.v, NV, -1, 1);
    fd_fill(c.g, NG, -0.7, -0.01); fd_fill(c.beta, NG, 0.1, 0.9); fd_fill(c.S0, NS, -0.5, 0.5);
    fd_fill(c.r, NV, -1, 1); fd_fill(c.rS, NS, -1, 1);
    float *q = fd_to_f32(c.q, NQ), *k = fd_to_f32(c.k, NQ), *v = fd_to_f32(c.v, NV), *g = fd_to_f32(c.g, NG);
    float *beta = fd_to_f32(c.beta, NG), *S0 = fd_to_f32(c.S0, NS), *r = fd_to_f32(c.r, NV), *rS = fd_to_f32(c.rS, NS);
    float out[NV], S_out[NS];
    bn_gdn_fwd(T, HK, HV, DK, DV, q, k, v, g, beta, S0, out, S_out);
    double Lf = 0;
    for (int i = 0; i < NV; i++) Lf += c.r[i] * out[i];
    for (int i = 0; i < NS; i++) Lf += c.rS[i] * S_out[i];
    CHECK_NEAR(Lf, loss_gdn(&c), 1e-5 * (1 + fabs(Lf)), "gdn forward vs float64 (rel 1e-5)");
    float dq[NQ] = {0}, dk[NQ] = {0}, dv[NV] = {0}, dg[NG] = {0}, db[NG] = {0}, dS0[NS] = {0};
    bn_gdn_bwd(T, HK, HV, DK, DV, q, k, v, g, beta, S0, r, rS, ckpt_every, dq, dk, dv, dg, db, dS0);
    char what[64];
    printf(" checkpoint every %d steps:\n", ckpt_every);
    snprintf(what, sizeof what, "gdn dq");    fd_check(what, loss_gdn, &c, c.q, NQ, dq, 1e-4);
    snprintf(what, sizeof what, "gdn dk");    fd_check(what, loss_gdn, &c, c.k, NQ, dk, 1e-4);
    snprintf(what, sizeof what, "gdn dv");    fd_check(what, loss_gdn, &c, c.v, NV, dv, 1e-4);
    snprintf(what, sizeof what, "gdn dg");    fd_check(what, loss_gdn, &c, c.g, NG, dg, 1e-4);
    snprintf(what, sizeof what, "gdn dbeta"); fd_check(what, loss_gdn, &c, c.beta, NG, db, 1e-4);
    snprintf(what, sizeof what, "gdn dS0");   fd_check(what, loss_gdn, &c, c.S0, NS, dS0, 1e-4);
    free(q); free(k); free(v); free(g); free(beta); free(S0); free(r); free(rS);
}

// The forward matches core/ops.h's per-token step, and a run split in two (state carried through
// S_out → S0) gives the same outputs as one run.
static void test_forward_consistency(void) {
    static gdn_ctx c;
    fd_fill(c.q, NQ, -0.5, 0.5); fd_fill(c.k, NQ, -0.5, 0.5); fd_fill(c.v, NV, -1, 1);
    fd_fill(c.g, NG, -0.7, -0.01); fd_fill(c.beta, NG, 0.1, 0.9);
    float *q = fd_to_f32(c.q, NQ), *k = fd_to_f32(c.k, NQ), *v = fd_to_f32(c.v, NV), *g = fd_to_f32(c.g, NG);
    float *beta = fd_to_f32(c.beta, NG);
    float out[NV], out2[NV], S[NS], Sm[NS];
    bn_gdn_fwd(T, HK, HV, DK, DV, q, k, v, g, beta, NULL, out, S);
    int t1 = 3;
    bn_gdn_fwd(t1, HK, HV, DK, DV, q, k, v, g, beta, NULL, out2, Sm);
    bn_gdn_fwd(T - t1, HK, HV, DK, DV, q + t1 * HK * DK, k + t1 * HK * DK, v + t1 * HV * DV, g + t1 * HV, beta + t1 * HV,
               Sm, out2 + t1 * HV * DV, Sm);
    double md = 0;
    for (int i = 0; i < NV; i++) md = fmax(md, fabs(out[i] - out2[i]));
    for (int i = 0; i < NS; i++) md = fmax(md, fabs(S[i] - Sm[i]));
    CHECK(md < 1e-6, "split run with carried state differs by %g (tol 1e-6)", md);
    free(q); free(k); free(v); free(g); free(beta);
}

// ---- the GDN core chain: qr, kr (raw conv outputs) → L2 norm → q/√dk → recurrence → gated norm
typedef struct {
    double qr[NQ], kr[NQ], v[NV], g[NG], beta[NG], z[NV], w[DV], r[NV];
} chain_ctx;

static double loss_chain(void *p) {
    chain_ctx *c = p;
    static gdn_ctx gc;
    for (int t = 0; t < T * HK; t++) {
        double sq = 0, sk = 0;
        for (int i = 0; i < DK; i++) { sq += c->qr[t * DK + i] * c->qr[t * DK + i]; sk += c->kr[t * DK + i] * c->kr[t * DK + i]; }
        for (int i = 0; i < DK; i++) {
            gc.q[t * DK + i] = c->qr[t * DK + i] / sqrt(sq + 1e-6) / sqrt((double)DK);
            gc.k[t * DK + i] = c->kr[t * DK + i] / sqrt(sk + 1e-6);
        }
    }
    memcpy(gc.v, c->v, sizeof gc.v); memcpy(gc.g, c->g, sizeof gc.g); memcpy(gc.beta, c->beta, sizeof gc.beta);
    memset(gc.S0, 0, sizeof gc.S0); memset(gc.rS, 0, sizeof gc.rS);
    // outputs o via the recurrence with unit weights per element: run and collect o directly
    double S[NS] = {0}, L = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < HV; h++) {
            int kh = h % HK;
            double *Sh = S + h * DK * DV, o[DV];
            const double *q = gc.q + (t * HK + kh) * DK, *k = gc.k + (t * HK + kh) * DK, *v = gc.v + (t * HV + h) * DV;
            double alpha = exp(gc.g[t * HV + h]), b = gc.beta[t * HV + h];
            for (int e = 0; e < DK * DV; e++) Sh[e] *= alpha;
            for (int j = 0; j < DV; j++) {
                double u = 0;
                for (int i = 0; i < DK; i++) u += Sh[j * DK + i] * k[i];
                double d = b * (v[j] - u);
                for (int i = 0; i < DK; i++) Sh[j * DK + i] += k[i] * d;
            }
            double ss = 0;
            for (int j = 0; j < DV; j++) {
                o[j] = 0;
                for (int i = 0; i < DK; i++) o[j] += Sh[j * DK + i] * q[i];
                ss += o[j] * o[j];
            }
            double rho = 1.0 / sqrt(ss / DV + 1e-6);
            for (int j = 0; j < DV; j++) {
                double z = c->z[(t * HV + h) * DV + j];
                L += c->r[(t * HV + h) * DV + j] * c->w[j] * o[j] * rho * z / (1 + exp(-z));
            }
        }
    return L;
}

static void test_chain(void) {
    static chain_ctx c;
    fd_fill(c.qr, NQ, -1, 1); fd_fill(c.kr, NQ, -1, 1); fd_fill(c.v, NV, -1, 1); fd_fill(c.g, NG, -0.5, -0.01);
    fd_fill(c.beta, NG, 0.1, 0.9); fd_fill(c.z, NV, -2, 2); fd_fill(c.w, DV, 0.5, 1.5); fd_fill(c.r, NV, -1, 1);
    float *qr = fd_to_f32(c.qr, NQ), *kr = fd_to_f32(c.kr, NQ), *v = fd_to_f32(c.v, NV), *g = fd_to_f32(c.g, NG);
    float *beta = fd_to_f32(c.beta, NG), *z = fd_to_f32(c.z, NV), *w = fd_to_f32(c.w, DV), *r = fd_to_f32(c.r, NV);
    // forward (fp32, ops.h pieces)
    float qn[NQ], kn[NQ], qs[NQ], o[NV];
    float sc = 1.0f / sqrtf((float)DK);
    for (int t = 0; t < T * HK; t++) { bn_l2norm(qn + t * DK, qr + t * DK, DK, 1e-6f); bn_l2norm(kn + t * DK, kr + t * DK, DK, 1e-6f); }
    for (int i = 0; i < NQ; i++) qs[i] = qn[i] * sc;
    bn_gdn_fwd(T, HK, HV, DK, DV, qs, kn, v, g, beta, NULL, o, NULL);
    // backward
    float dy_o[NV] = {0}, dz[NV] = {0}, dqs[NQ] = {0}, dqn[NQ] = {0}, dkn[NQ] = {0}, dqr[NQ] = {0}, dkr[NQ] = {0};
    float dv[NV] = {0}, dg[NG] = {0}, db[NG] = {0};
    bn_gated_rmsnorm_bwd(o, z, w, DV, T * HV, 1e-6f, r, dy_o, dz);
    bn_gdn_bwd(T, HK, HV, DK, DV, qs, kn, v, g, beta, NULL, dy_o, NULL, 0, dqs, dkn, dv, dg, db, NULL);
    bn_scale_bwd(sc, NQ, dqs, dqn);
    bn_l2norm_bwd(qr, DK, T * HK, 1e-6f, dqn, dqr);
    bn_l2norm_bwd(kr, DK, T * HK, 1e-6f, dkn, dkr);
    printf(" GDN core chain (l2norm, q scale, recurrence, gated norm):\n");
    fd_check("chain d(q raw)", loss_chain, &c, c.qr, NQ, dqr, 1e-4);
    fd_check("chain d(k raw)", loss_chain, &c, c.kr, NQ, dkr, 1e-4);
    fd_check("chain dv", loss_chain, &c, c.v, NV, dv, 1e-4);
    fd_check("chain dg", loss_chain, &c, c.g, NG, dg, 1e-4);
    fd_check("chain dbeta", loss_chain, &c, c.beta, NG, db, 1e-4);
    fd_check("chain dz", loss_chain, &c, c.z, NV, dz, 1e-4);
    free(qr); free(kr); free(v); free(g); free(beta); free(z); free(w); free(r);
}

int main(void) {
    test_recurrence(0);  // default spacing 32 > T: one chunk
    test_recurrence(3);  // chunks of 3 (7 = 3 + 3 + 1): recompute from checkpoints
    test_recurrence(1);
    test_forward_consistency();
    test_chain();
    bn_train_set_threads(3); // the same checks with key heads spread over threads
    printf(" with 3 threads:\n");
    test_recurrence(3);
    test_forward_consistency();
    test_chain();
    bn_train_set_threads(1);
    return test_done("train_backward_gdn");
}
