// tests/cuda/test_cuda_bwd_seq.c — the trainer's sequence ops on the device (cuda/cuda_bwd_seq.h: causal GQA
// attention and the gated delta rule, forward and backward; the backward of a linear with LoRA) vs the CPU trainer's
// own functions (train/backward.h) on random inputs with a fixed seed. Built twice: `cuda_bwd_seq` on a GPU (skips
// without one) and `cuda_bwd_seq_emu` through the emulator (always; also shuffled). Gradient outputs start non-zero on
// both sides (the ops add into them); some cases pass NULL outputs (and for the GDN no S0 and no dS_final).
// Shapes: GQA with 2 q heads per kv head, head sizes around and above a warp's 32 lanes and not multiples of 32,
// GDN sequences crossing checkpoint boundaries (37 steps, checkpoints every 8 and the default 32), Hv = 2·Hk; F32 and
// F16 base weights, the F16 one in two chunks of widened rows, with and without a dropout mask and a given A·x; the
// linear also with bf16 GEMMs (F32 and F16 weights made bf16, two bf16 chunks of 8192 and 8 rows), its dx held to TOL
// against its fp32 twin (the CPU's product of the bf16-rounded weight and dy, each product exact in fp32, plus the
// LoRA part in fp32) and to BF16_TOL against the plain fp32 dx; dA and dB (fp32 LoRA products) to TOL.
// Tolerance: max |Δ| <= TOL · max(1, max |reference|) per array. Both sides compute in fp32 and differ only in the
// order of their sums (warp butterflies, per-warp partials, the CPU's SIMD lanes and double accumulators, cuBLAS's
// GEMM tiling), which moves results by a few ulp per sum: measured <= 5e-7 in the emulator (0 for the linear, whose
// emulated cuBLAS is the CPU's OpenBLAS on the same products); 2e-5 leaves room for a GPU's own orders while a wrong
// index, a missing term or a lost barrier gives errors of order 1e-2 and more.
#include "tests/test.h"
#include "tests/cuda/dev_arrays.h"
#include "tests/cuda/compare.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_bwd_seq.h"
#include "train/backward.h"
#include "train/device.h"
#include "quant/quant.h"
#include "base/util.h"
#include <math.h>
#include <string.h>

#define TOL 2e-5
// The bf16 GEMM path's dx against the plain fp32 one: each input rounded to bf16 (relative 2^-9) moves a sum of n_out
// products by ~2^-8·sqrt(n_out) of a typical product; measured 1.8e-3..2.1e-3 of the largest dx on these shapes.
#define BF16_TOL 2e-2
// Attention with TF32 products against the CPU's fp32: every GEMM operand (q, k, v, do, P, dS) rounded to 10 mantissa
// bits (relative 2^-11) before exact products and fp32 sums: measured <= 6.5e-4 in the emulator (which rounds to
// nearest); 3e-3 leaves room for a GPU that truncates (twice the error) while a wrong term stays far above it.
#define TF32_TOL 3e-3

// check_close_tol: max |got − ref| relative to max(1, max |ref|) within tol; returns that error (skips NULL pairs).
static double check_close_tol(const char *what, const float *ref, const float *got, size_t n, double tol) {
    if (!ref && !got) return 0;
    double mag = 1;
    for (size_t i = 0; i < n; i++) mag = fmax(mag, fabs(ref[i]));
    double e = max_abs_diff(ref, got, n) / mag;
    CHECK(e <= tol, "%s: max error %.3g (relative to %.3g) above %g", what, e, mag, tol);
    printf("  %-6s max error %.2e (scale %.2f)\n", what, e, mag);
    return e;
}

// check_close: check_close_tol within TOL.
static double check_close(const char *what, const float *ref, const float *got, size_t n) {
    return check_close_tol(what, ref, got, n, TOL);
}

// check_attn: bn_cuda_attn_fwd/_bwd vs bn_attn_fwd/_bwd for one shape; dq and dv NULL when with_null; tf32: the
// products' operands rounded to TF32, held to TF32_TOL.
static void check_attn(int T, int hd, int nh, int nkv, bool with_null, bool tf32) {
    printf("attention T %d hd %d nh %d nkv %d%s%s\n", T, hd, nh, nkv, with_null ? " (dq, dv NULL)" : "",
           tf32 ? " tf32" : "");
    const double tol = tf32 ? TF32_TOL : TOL;
    const size_t nq = (size_t)T * nh * hd, nk = (size_t)T * nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = rand_vec(nq, 2.0f), *k = rand_vec(nk, 2.0f), *v = rand_vec(nk, 1.0f), *dout = rand_vec(nq, 1.0f);
    float *dq = with_null ? NULL : rand_vec(nq, 1.0f), *dk = rand_vec(nk, 1.0f);
    float *dv = with_null ? NULL : rand_vec(nk, 1.0f);
    float *out_d = bn_cuda_dev_floats(nq, err, sizeof err);
    float *ws = bn_cuda_dev_floats(bn_cuda_attn_workspace_floats(T, nh, nkv), err, sizeof err);
    void *blas = bn_cuda_blas_new(err, sizeof err);
    CHECK(blas, "%s", err);
    float *q_d = to_dev(q, nq), *k_d = to_dev(k, nk), *v_d = to_dev(v, nk), *dout_d = to_dev(dout, nq);
    float *dq_d = to_dev(dq, nq), *dk_d = to_dev(dk, nk), *dv_d = to_dev(dv, nk);
    CHECK(bn_cuda_attn_fwd(blas, tf32, q_d, k_d, v_d, T, hd, nh, nkv, scale, out_d, ws, NULL, err, sizeof err) == 0,
          "%s", err);
    CHECK(bn_cuda_attn_bwd(blas, tf32, q_d, k_d, v_d, T, hd, nh, nkv, scale, dout_d, dq_d, dk_d, dv_d, ws, NULL, err,
                           sizeof err) == 0, "%s", err);
    bn_cuda_blas_free(blas);
    float *out = from_dev(out_d, nq), *dq_g = from_dev(dq_d, nq), *dk_g = from_dev(dk_d, nk);
    float *dv_g = from_dev(dv_d, nk);
    float *out_ref = xmalloc(nq * sizeof(float));
    bn_attn_fwd(q, k, v, T, hd, nh, nkv, scale, out_ref);
    bn_attn_bwd(q, k, v, T, hd, nh, nkv, scale, dout, dq, dk, dv);
    check_close_tol("out", out_ref, out, nq, tol);
    check_close_tol("dq", dq, dq_g, nq, tol);
    check_close_tol("dk", dk, dk_g, nk, tol);
    check_close_tol("dv", dv, dv_g, nk, tol);
    bn_cuda_dev_free(q_d), bn_cuda_dev_free(k_d), bn_cuda_dev_free(v_d), bn_cuda_dev_free(dout_d), bn_cuda_dev_free(ws);
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(out_ref);
    free(out), free(dq_g), free(dk_g), free(dv_g);
}

// unit_rows: rows of n floats L2-normalised, times s (the GDN's q and k).
static void unit_rows(float *x, int n, int rows, float s) {
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[(size_t)r * n + i] * x[(size_t)r * n + i];
        for (int i = 0; i < n; i++) x[(size_t)r * n + i] *= s / (float)sqrt(ss + 1e-12);
    }
}

// gdn_grads_with: every gradient of bn_cuda_gdn_bwd for the device inputs in[] (q, k, v, g, beta, S0, dout, dS_final)
// with checkpoints every ckpt steps, from zero, into one host array: dq, dk, dv, dg, dbeta, dS0 one after another.
static float *gdn_grads_with(int T, int Hk, int Hv, int dk, int dv, float *const in[8], int ckpt) {
    const size_t n[6] = {(size_t)T * Hk * dk, (size_t)T * Hk * dk, (size_t)T * Hv * dv, (size_t)T * Hv,
                         (size_t)T * Hv, (size_t)Hv * dk * dv};
    float *d[6], *out = xmalloc(sizeof(float) * (n[0] + n[1] + n[2] + n[3] + n[4] + n[5])), *at = out;
    for (int i = 0; i < 6; i++) {
        float *zero = xcalloc(n[i], sizeof(float));
        d[i] = to_dev(zero, n[i]);
        free(zero);
    }
    float *ws = bn_cuda_dev_floats(bn_cuda_gdn_bwd_workspace_floats(T, Hv, dk, dv, ckpt), err, sizeof err);
    CHECK(bn_cuda_gdn_bwd(T, Hk, Hv, dk, dv, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], ckpt, d[0], d[1],
                          d[2], d[3], d[4], d[5], ws, NULL, err, sizeof err) == 0, "%s", err);
    bn_cuda_dev_free(ws);
    for (int i = 0; i < 6; i++) {
        float *h = from_dev(d[i], n[i]);
        memcpy(at, h, sizeof(float) * n[i]);
        at += n[i];
        free(h);
    }
    return out;
}

// check_gdn_ckpt_bits: the device backward's gradients are the same bits for checkpoint intervals 8, ⌈√T⌉ and T (the
// GPU trainer picks ⌈√T⌉, the CPU 32): every state is recomputed by the same steps from S0. Run shuffled, the blocks
// of a value head add their sums in another order each launch: the bits must not change with it.
static void check_gdn_ckpt_bits(int T, int Hk, int Hv, int dk, int dv) {
    const size_t nqk = (size_t)T * Hk * dk, nv = (size_t)T * Hv * dv, ng = (size_t)T * Hv, ns = (size_t)Hv * dk * dv;
    float *q = rand_vec(nqk, 1.0f), *k = rand_vec(nqk, 1.0f), *g = xmalloc(ng * sizeof(float));
    float *beta = rand_vec(ng, 1.0f);
    unit_rows(q, dk, T * Hk, 1.0f / sqrtf((float)dk));
    unit_rows(k, dk, T * Hk, 1.0f);
    for (size_t i = 0; i < ng; i++) g[i] = -0.3f + 0.25f * frand(), beta[i] = 0.5f + 0.4f * beta[i];
    float *h[8] = {q, k, rand_vec(nv, 1.0f), g, beta, rand_vec(ns, 0.5f), rand_vec(nv, 1.0f), rand_vec(ns, 0.5f)};
    const size_t n[8] = {nqk, nqk, nv, ng, ng, ns, nv, ns}, total = 2 * nqk + nv + 2 * ng + ns;
    float *in[8];
    for (int i = 0; i < 8; i++) in[i] = to_dev(h[i], n[i]);
    const int ck[3] = {8, bn_train_gdn_ckpt(T), T};
    float *ref = gdn_grads_with(T, Hk, Hv, dk, dv, in, ck[0]);
    for (int c = 1; c < 3; c++) {
        float *got = gdn_grads_with(T, Hk, Hv, dk, dv, in, ck[c]);
        char what[96];
        snprintf(what, sizeof what, "gdn T %d: gradients with checkpoints every %d steps against every 8", T, ck[c]);
        check_bits(what, ref, got, total);
        free(got);
    }
    free(ref);
    for (int i = 0; i < 8; i++) bn_cuda_dev_free(in[i]), free(h[i]);
}

// check_gdn: bn_cuda_gdn_fwd/_bwd vs bn_gdn_fwd/_bwd for one shape; with_null: no S0, no dS_final, dk, dg and dS0 NULL.
static void check_gdn(int T, int Hk, int Hv, int dk, int dv, int ckpt_every, bool with_null) {
    printf("gdn T %d Hk %d Hv %d dk %d dv %d ckpt %d%s\n", T, Hk, Hv, dk, dv, ckpt_every,
           with_null ? " (S0, dS_final, dk, dg, dS0 NULL)" : "");
    const size_t nqk = (size_t)T * Hk * dk, nv = (size_t)T * Hv * dv, ng = (size_t)T * Hv, ns = (size_t)Hv * dk * dv;
    float *q = rand_vec(nqk, 1.0f), *k = rand_vec(nqk, 1.0f), *v = rand_vec(nv, 1.0f), *dout = rand_vec(nv, 1.0f);
    unit_rows(q, dk, T * Hk, 1.0f / sqrtf((float)dk));
    unit_rows(k, dk, T * Hk, 1.0f);
    float *g = xmalloc(ng * sizeof(float)), *beta = xmalloc(ng * sizeof(float));
    for (size_t i = 0; i < ng; i++) g[i] = -0.3f + 0.25f * frand(), beta[i] = 1.0f / (1.0f + expf(-2.0f * frand()));
    float *S0 = with_null ? NULL : rand_vec(ns, 0.5f), *dSf = with_null ? NULL : rand_vec(ns, 0.5f);
    float *dq = rand_vec(nqk, 1.0f), *dk_ = with_null ? NULL : rand_vec(nqk, 1.0f), *dv_ = rand_vec(nv, 1.0f);
    float *dg = with_null ? NULL : rand_vec(ng, 1.0f), *dbeta = rand_vec(ng, 1.0f);
    float *dS0 = with_null ? NULL : rand_vec(ns, 1.0f);
    float *q_d = to_dev(q, nqk), *k_d = to_dev(k, nqk), *v_d = to_dev(v, nv), *g_d = to_dev(g, ng);
    float *beta_d = to_dev(beta, ng), *S0_d = to_dev(S0, ns), *dSf_d = to_dev(dSf, ns), *dout_d = to_dev(dout, nv);
    float *dq_d = to_dev(dq, nqk), *dk_d = to_dev(dk_, nqk), *dv_d = to_dev(dv_, nv), *dg_d = to_dev(dg, ng);
    float *dbeta_d = to_dev(dbeta, ng), *dS0_d = to_dev(dS0, ns);
    float *out_d = bn_cuda_dev_floats(nv, err, sizeof err), *Sout_d = bn_cuda_dev_floats(ns, err, sizeof err);
    float *ws = bn_cuda_dev_floats(bn_cuda_gdn_bwd_workspace_floats(T, Hv, dk, dv, ckpt_every), err, sizeof err);
    CHECK(bn_cuda_gdn_fwd(T, Hk, Hv, dk, dv, q_d, k_d, v_d, g_d, beta_d, S0_d, out_d, Sout_d, NULL, err,
                          sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_gdn_bwd(T, Hk, Hv, dk, dv, q_d, k_d, v_d, g_d, beta_d, S0_d, dout_d, dSf_d, ckpt_every, dq_d, dk_d,
                          dv_d, dg_d, dbeta_d, dS0_d, ws, NULL, err, sizeof err) == 0, "%s", err);
    float *out = from_dev(out_d, nv), *Sout = from_dev(Sout_d, ns), *dq_g = from_dev(dq_d, nqk);
    float *dk_g = from_dev(dk_d, nqk), *dv_g = from_dev(dv_d, nv), *dg_g = from_dev(dg_d, ng);
    float *dbeta_g = from_dev(dbeta_d, ng), *dS0_g = from_dev(dS0_d, ns);
    float *out_ref = xmalloc(nv * sizeof(float)), *Sout_ref = xmalloc(ns * sizeof(float));
    bn_gdn_fwd(T, Hk, Hv, dk, dv, q, k, v, g, beta, S0, out_ref, Sout_ref);
    bn_gdn_bwd(T, Hk, Hv, dk, dv, q, k, v, g, beta, S0, dout, dSf, ckpt_every, dq, dk_, dv_, dg, dbeta, dS0);
    check_close("out", out_ref, out, nv);
    check_close("S_out", Sout_ref, Sout, ns);
    check_close("dq", dq, dq_g, nqk);
    check_close("dk", dk_, dk_g, nqk);
    check_close("dv", dv_, dv_g, nv);
    check_close("dg", dg, dg_g, ng);
    check_close("dbeta", dbeta, dbeta_g, ng);
    check_close("dS0", dS0, dS0_g, ns);
    float *S_alias = NULL;
    if (S0_d) { // S_out may alias S0: the forward again, in place on S0
        float *o_d = bn_cuda_dev_floats(nv, err, sizeof err);
        CHECK(bn_cuda_gdn_fwd(T, Hk, Hv, dk, dv, q_d, k_d, v_d, g_d, beta_d, S0_d, o_d, S0_d, NULL, err,
                              sizeof err) == 0, "%s", err);
        bn_cuda_dev_free(o_d);
        S_alias = from_dev(S0_d, ns), S0_d = NULL;
        check_close("S0->S0", Sout_ref, S_alias, ns);
    }
    float *inputs_d[] = {q_d, k_d, v_d, g_d, beta_d, S0_d, dSf_d, dout_d, ws};
    for (size_t i = 0; i < sizeof inputs_d / sizeof *inputs_d; i++) bn_cuda_dev_free(inputs_d[i]);
    float *host[] = {q, k, v, dout, g, beta, S0, dSf, dq, dk_, dv_, dg, dbeta, dS0, out, Sout, dq_g, dk_g, dv_g, dg_g,
                     dbeta_g, dS0_g, out_ref, Sout_ref, S_alias};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

// weight_to_dev: W's n floats on the device as `type` (BN_F32 or BN_F16 bits), through the float buffers.
static float *weight_to_dev(int type, const float *w, size_t n, void **host_bits) {
    if (type == BN_F32) return *host_bits = NULL, to_dev(w, n);
    uint16_t *h = xcalloc((n + 1) / 2 * 2, sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = bn_fp32_to_fp16(w[i]);
    *host_bits = h;
    return to_dev((const float *)h, (n + 1) / 2);
}

// bf16_twin_dx: dx += what the bf16 path adds: bf16(W)ᵀ·bf16(dy) in fp32 (exact products; only the order of the sums
// differs from the device's), through the CPU's bn_linear_lora_bwd on the rounded copies. W {n_in, n_out} as fp32.
static void bf16_twin_dx(const float *w, int64_t n_in, int64_t n_out, const float *x, int T, const float *dy,
                         float *dx) {
    float *wb = bf16_rounded(w, (size_t)(n_in * n_out)), *dyb = bf16_rounded(dy, (size_t)n_out * T);
    bn_weight Wb = {.data = wb, .type = BN_F32, .ne = {n_in, n_out, 1, 1}, .name = "w_bf16"};
    CHECK(bn_linear_lora_bwd(&Wb, NULL, x, T, NULL, NULL, dyb, dx, err, sizeof err) == 0, "%s", err);
    free(wb), free(dyb);
}

// check_linear: bn_cuda_linear_lora_bwd vs bn_linear_lora_bwd for one weight type and shape; with_drop: a dropout
// mask; with_ax: A·(x⊙drop) from the CPU forward (else recomputed); null_dx / null_dA: those outputs NULL; bf16: the
// base product with bf16 inputs (dx against its fp32 twin, and within BF16_TOL of the fp32 dx while farther than TOL).
static void check_linear(int type, int64_t n_in, int64_t n_out, int r, int T, bool with_drop, bool with_ax,
                         bool null_dx, bool null_dA, bool bf16) {
    printf("linear+LoRA %s %lldx%lld r %d T %d%s%s%s%s%s\n", bn_type_name(type), (long long)n_in, (long long)n_out, r,
           T, with_drop ? " drop" : "", with_ax ? " ax given" : "", null_dx ? " (dx NULL)" : "",
           null_dA ? " (dA NULL)" : "", bf16 ? " bf16 GEMM" : "");
    const size_t nw = (size_t)n_in * n_out, nx = (size_t)n_in * T, ny = (size_t)n_out * T;
    const size_t na = (size_t)n_in * r, nb = (size_t)r * n_out, nax = (size_t)r * T;
    float *w = rand_vec(nw, 0.5f), *x = rand_vec(nx, 1.0f), *dy = rand_vec(ny, 1.0f);
    float *A = rand_vec(na, 0.3f), *B = rand_vec(nb, 0.3f), *drop = NULL, *ax = NULL;
    if (with_drop) {
        drop = xmalloc(nx * sizeof(float));
        for (size_t i = 0; i < nx; i++) drop[i] = frand() < -0.6f ? 0.0f : 1.0f / 0.8f;
    }
    float *dx = null_dx ? NULL : rand_vec(nx, 1.0f), *dA = null_dA ? NULL : rand_vec(na, 1.0f);
    float *dB = rand_vec(nb, 1.0f);
    void *w_bits;
    float *w_d = weight_to_dev(type, w, nw, &w_bits);
    if (w_bits) bn_dequantize(type, w_bits, w, (int64_t)nw); // w = the fp32 values the weight holds
    bn_weight W = {.data = w_bits ? w_bits : w, .type = type, .ne = {n_in, n_out, 1, 1}, .name = "w"};
    bn_lora_view view = {.r = r, .scale = 2.0f / r, .A = A, .B = B, .dA = dA, .dB = dB};
    if (with_ax) {
        float *y = xmalloc(ny * sizeof(float));
        ax = xmalloc(nax * sizeof(float));
        CHECK(bn_linear_lora_fwd(&W, &view, x, T, drop, y, ax, err, sizeof err) == 0, "%s", err);
        free(y);
    }
    float *x_d = to_dev(x, nx), *dy_d = to_dev(dy, ny), *A_d = to_dev(A, na), *B_d = to_dev(B, nb);
    float *drop_d = to_dev(drop, nx), *ax_d = to_dev(ax, nax), *dx_d = to_dev(dx, nx), *dA_d = to_dev(dA, na);
    float *dB_d = to_dev(dB, nb);
    float *ws = bn_cuda_dev_floats(bn_cuda_linear_lora_bwd_workspace_floats(bf16, type, n_in, n_out, r, T), err,
                                   sizeof err);
    void *blas = bn_cuda_blas_new(err, sizeof err);
    CHECK(blas, "%s", err);
    bn_cuda_lora lora = {.r = r, .scale = view.scale, .A = A_d, .B = B_d, .dA = dA_d, .dB = dB_d};
    CHECK(bn_cuda_linear_lora_bwd(blas, bf16, type, w_d, n_in, n_out, &lora, x_d, T, drop_d, ax_d, dy_d, dx_d, ws, NULL,
                                  err, sizeof err) == 0, "%s", err);
    float *dx_g = from_dev(dx_d, nx), *dA_g = from_dev(dA_d, na), *dB_g = from_dev(dB_d, nb);
    float *dx_twin = bf16 && dx ? xmalloc(nx * sizeof(float)) : NULL;
    if (dx_twin) { // dx0 + bf16 base product + the LoRA part (a zero weight gives it alone)
        memcpy(dx_twin, dx, nx * sizeof(float));
        bf16_twin_dx(w, n_in, n_out, x, T, dy, dx_twin);
        float *zero = xcalloc(nw, sizeof(float)), *dA2 = dA ? xmalloc(na * sizeof(float)) : NULL;
        float *dB2 = xmalloc(nb * sizeof(float));
        if (dA) memcpy(dA2, dA, na * sizeof(float));
        memcpy(dB2, dB, nb * sizeof(float));
        bn_weight Z = {.data = zero, .type = BN_F32, .ne = {n_in, n_out, 1, 1}, .name = "zero"};
        bn_lora_view v2 = view;
        v2.dA = dA2, v2.dB = dB2;
        CHECK(bn_linear_lora_bwd(&Z, &v2, x, T, drop, ax, dy, dx_twin, err, sizeof err) == 0, "%s", err);
        free(zero), free(dA2), free(dB2);
    }
    CHECK(bn_linear_lora_bwd(&W, &view, x, T, drop, ax, dy, dx, err, sizeof err) == 0, "%s", err);
    check_close(bf16 ? "dx (against its fp32 twin)" : "dx", bf16 ? dx_twin : dx, dx_g, dx ? nx : 0);
    if (dx_twin) {
        const double e = rel_max_diff(dx, dx_g, nx);
        CHECK(e > TOL && e <= BF16_TOL, "dx: %.3g from the fp32 dx (bf16 rounding: above %g, within %g)", e, TOL,
              BF16_TOL);
        printf("  dx     %.2e from the fp32 dx (bf16 GEMM)\n", e);
    }
    check_close("dA", dA, dA_g, na);
    check_close("dB", dB, dB_g, nb);
    bn_cuda_blas_free(blas);
    float *dev[] = {w_d, x_d, dy_d, A_d, B_d, drop_d, ax_d, ws};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) bn_cuda_dev_free(dev[i]);
    float *host[] = {w, x, dy, A, B, drop, ax, dx, dA, dB, dx_g, dA_g, dB_g, dx_twin};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
    free(w_bits);
}

int main(void) {
    if (bn_cuda_device_count() == 0) return test_skip("no CUDA device on this machine");
    char name[128];
    printf("device: %s\n", bn_cuda_device_name(name, sizeof name));
    check_attn(37, 40, 4, 2, false, false);
    check_attn(21, 72, 6, 3, true, false);
    check_attn(300, 8, 4, 2, false, false); // two blocks of query positions, the second 44 rows
    check_attn(300, 8, 4, 1, true, false);
    check_attn(37, 40, 4, 2, false, true);
    check_attn(300, 8, 4, 2, false, true);
    check_gdn(37, 2, 4, 40, 36, 8, false);
    check_gdn(37, 2, 4, 20, 24, 0, true);
    check_gdn(21, 1, 2, 16, 72, 4, false); // full 20-warp blocks: two rows for some warps
    check_gdn(9, 1, 2, 256, 60, 0, false); // dk 256: the longest rows the kernels take
    check_gdn_ckpt_bits(37, 2, 4, 40, 36);
    check_gdn_ckpt_bits(21, 1, 2, 16, 72);
    check_linear(BN_F32, 48, 40, 4, 7, true, false, false, false, false);
    check_linear(BN_F16, 1024, 4100, 8, 5, true, true, false, false, false); // two chunks of widened F16 rows
    check_linear(BN_F32, 40, 56, 6, 9, false, false, false, true, false);
    check_linear(BN_F16, 72, 24, 4, 3, false, true, true, false, false);
    check_linear(BN_F32, 48, 40, 4, 7, true, false, false, false, true);    // bf16 GEMMs: an F32 weight made bf16
    check_linear(BN_F16, 1024, 8200, 8, 3, false, true, false, true, true); // two bf16 chunks: 8192 rows, then 8
    check_linear(BN_F16, 72, 24, 4, 3, false, true, true, false, true);     // dx NULL: no base product
    return test_done("cuda_bwd_seq");
}
