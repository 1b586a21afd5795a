// tests/cuda/test_cuda_bwd_ops.c — the CUDA backward kernels (cuda/bwd_ops.cu) vs the CPU trainer's own functions
// (train/backward.c, train/backward_gdn.c) on random inputs of small shapes with tails (rows > 1, n not a multiple
// of 32, rows longer than a block). Every gradient output starts from the same random values on both sides, so the
// add-into convention is checked too; NULL gradient outputs are skipped on both sides.
// Built twice: `cuda_bwd_ops` links the GPU library (skipped without a device, e.g. CI); `cuda_bwd_ops_emu` links
// the CPU emulator (cuda/emu/) and always runs, also in shuffled order.
// Tolerance: |gpu − cpu| <= 1e-5·(1 + |cpu|). The kernels use the CPU's formulas; they differ only in float
// rounding: the row sums of the norms are float tree sums where the CPU sums in double (relative error ~n·2^-24 at
// worst, ~1e-6 for these n), and the device's expf/sinf/cosf may be 1-2 ulp off the host's.
#include "tests/test.h"
#include "tests/cuda/dev_arrays.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_bwd_ops.h"
#include "train/backward.h"
#include "base/util.h"
#include <string.h>
#include <stdint.h>

#define TOL 1e-5

// arr: a host array and its device copy.
typedef struct {
    float *h, *d;
    size_t n;
} arr;

// arr_rand: n random values in [-scale, scale) on the host and uploaded.
static arr arr_rand(size_t n, float scale) {
    arr a = {xmalloc(n * sizeof(float)), bn_cuda_dev_floats(n, err, sizeof err), n};
    CHECK(a.d != NULL, "%s", err);
    for (size_t i = 0; i < n; i++) a.h[i] = scale * frand();
    if (a.d) CHECK(bn_cuda_dev_upload(a.d, a.h, n, err, sizeof err) == 0, "%s", err);
    return a;
}

static void arr_free(arr *a) {
    free(a->h);
    bn_cuda_dev_free(a->d);
}

// dev: a's device copy, or NULL for no array.
static float *dev(const arr *a) { return a ? a->d : NULL; }
// host: a's host copy, or NULL for no array.
static float *host(const arr *a) { return a ? a->h : NULL; }

// check_same: a's device copy against its host copy (the CPU result); returns max |Δ| / (1 + |cpu|).
static double check_same(const char *what, const arr *a) {
    float *got = xmalloc(a->n * sizeof(float));
    double worst = INFINITY;
    if (bn_cuda_dev_download(got, a->d, a->n, err, sizeof err) == 0) {
        worst = 0;
        for (size_t i = 0; i < a->n; i++) worst = fmax(worst, fabs((double)got[i] - a->h[i]) / (1 + fabs(a->h[i])));
    } else {
        CHECK(0, "%s", err);
    }
    CHECK(worst <= TOL, "%s: max error %.3g", what, worst);
    printf("%-60s max err %.3g\n", what, worst);
    free(got);
    return worst;
}

// ---- norms ----------------------------------------------------------------------------------------

static void check_rmsnorm(int n, int rows, int with_w) {
    arr x = arr_rand((size_t)n * rows, 1.5f), w = arr_rand(n, 1), dy = arr_rand((size_t)n * rows, 1),
        dx = arr_rand((size_t)n * rows, 1);
    const float eps = 1e-6f;
    bn_rmsnorm_bwd(x.h, with_w ? w.h : NULL, n, rows, eps, dy.h, dx.h);
    CHECK(bn_cuda_rmsnorm_bwd(x.d, with_w ? w.d : NULL, n, rows, eps, dy.d, dx.d, NULL, err, sizeof err) == 0, "%s",
          err);
    CHECK(bn_cuda_rmsnorm_bwd(x.d, w.d, n, rows, eps, dy.d, NULL, NULL, err, sizeof err) == 0, "NULL dx: %s", err);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm_bwd n %d rows %d%s", n, rows, with_w ? "" : " (w NULL)");
    check_same(what, &dx);
    arr_free(&x), arr_free(&w), arr_free(&dy), arr_free(&dx);
}

static void check_l2norm(int n, int rows) {
    arr x = arr_rand((size_t)n * rows, 1), dy = arr_rand((size_t)n * rows, 1), dx = arr_rand((size_t)n * rows, 1);
    const float eps = 1e-6f;
    bn_l2norm_bwd(x.h, n, rows, eps, dy.h, dx.h);
    CHECK(bn_cuda_l2norm_bwd(x.d, n, rows, eps, dy.d, dx.d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "l2norm_bwd n %d rows %d", n, rows);
    check_same(what, &dx);
    arr_free(&x), arr_free(&dy), arr_free(&dx);
}

// check_gated_rmsnorm: want_dout / want_dz = 0 passes NULL for that gradient.
static void check_gated_rmsnorm(int n, int rows, int want_dout, int want_dz) {
    const size_t nt = (size_t)n * rows;
    arr o = arr_rand(nt, 1), z = arr_rand(nt, 3), w = arr_rand(n, 1), dy = arr_rand(nt, 1), dout = arr_rand(nt, 1),
        dz = arr_rand(nt, 1);
    arr *pdout = want_dout ? &dout : NULL, *pdz = want_dz ? &dz : NULL;
    const float eps = 1e-6f;
    bn_gated_rmsnorm_bwd(o.h, z.h, w.h, n, rows, eps, dy.h, host(pdout), host(pdz));
    CHECK(bn_cuda_gated_rmsnorm_bwd(o.d, z.d, w.d, n, rows, eps, dy.d, dev(pdout), dev(pdz), NULL, err,
                                    sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "gated_rmsnorm_bwd n %d rows %d: dout%s", n, rows, want_dout ? "" : " (NULL)");
    check_same(what, &dout); // untouched when NULL: still its start values on both sides
    snprintf(what, sizeof what, "gated_rmsnorm_bwd n %d rows %d: dz%s", n, rows, want_dz ? "" : " (NULL)");
    check_same(what, &dz);
    arr_free(&o), arr_free(&z), arr_free(&w), arr_free(&dy), arr_free(&dout), arr_free(&dz);
}

// check_norm_wgrad: bn_rmsnorm_wgrad (gated = 0) or bn_gated_rmsnorm_wgrad (gated = 1).
static void check_norm_wgrad(int n, int rows, int gated) {
    const size_t nt = (size_t)n * rows;
    arr x = arr_rand(nt, 1.5f), z = arr_rand(nt, 3), dy = arr_rand(nt, 1), dw = arr_rand(n, 1), rho = arr_rand(rows, 1);
    const float eps = 1e-6f;
    int rc;
    if (gated) {
        bn_gated_rmsnorm_wgrad(x.h, z.h, n, rows, eps, dy.h, dw.h);
        rc = bn_cuda_gated_rmsnorm_wgrad(x.d, z.d, n, rows, eps, dy.d, dw.d, rho.d, NULL, err, sizeof err);
    } else {
        bn_rmsnorm_wgrad(x.h, n, rows, eps, dy.h, dw.h);
        rc = bn_cuda_rmsnorm_wgrad(x.d, n, rows, eps, dy.d, dw.d, rho.d, NULL, err, sizeof err);
    }
    CHECK(rc == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "%s_wgrad n %d rows %d", gated ? "gated_rmsnorm" : "rmsnorm", n, rows);
    check_same(what, &dw);
    arr_free(&x), arr_free(&z), arr_free(&dy), arr_free(&dw), arr_free(&rho);
}

// ---- elementwise ----------------------------------------------------------------------------------

// An elementwise op of two inputs with a gradient for each (swiglu: a, c; sigmoid gate: u, g), on both sides.
typedef struct {
    const char *name, *d1, *d2;   // "swiglu_bwd", "da", "dc"
    float amp1, amp2;             // the inputs' random ranges
    void (*cpu)(const float *, const float *, int64_t, const float *, float *, float *);
    int (*cuda)(const float *, const float *, int64_t, const float *, float *, float *, void *, char *, size_t);
} pair_op;

static const pair_op swiglu_op = {"swiglu_bwd", "da", "dc", 4, 2, bn_swiglu_bwd, bn_cuda_swiglu_bwd};
static const pair_op sigmoid_gate_op = {"sigmoid_gate_bwd", "du", "dg", 2, 4, bn_sigmoid_gate_bwd,
                                        bn_cuda_sigmoid_gate_bwd};

// check_pair: op's device backward against the CPU's; want1 / want2 = 0 passes NULL for that gradient.
static void check_pair(const pair_op *op, int64_t n, int want1, int want2) {
    arr x1 = arr_rand(n, op->amp1), x2 = arr_rand(n, op->amp2), dy = arr_rand(n, 1), d1 = arr_rand(n, 1),
        d2 = arr_rand(n, 1);
    arr *p1 = want1 ? &d1 : NULL, *p2 = want2 ? &d2 : NULL;
    op->cpu(x1.h, x2.h, n, dy.h, host(p1), host(p2));
    CHECK(op->cuda(x1.d, x2.d, n, dy.d, dev(p1), dev(p2), NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "%s n %lld: %s%s", op->name, (long long)n, op->d1, want1 ? "" : " (NULL)");
    check_same(what, &d1);
    snprintf(what, sizeof what, "%s n %lld: %s%s", op->name, (long long)n, op->d2, want2 ? "" : " (NULL)");
    check_same(what, &d2);
    arr_free(&x1), arr_free(&x2), arr_free(&dy), arr_free(&d1), arr_free(&d2);
}

static void check_sigmoid(int64_t n) {
    arr beta = arr_rand(n, 1), dbeta = arr_rand(n, 1), db = arr_rand(n, 1);
    for (int64_t i = 0; i < n; i++) beta.h[i] = 0.5f + 0.5f * beta.h[i]; // β in [0, 1)
    CHECK(bn_cuda_dev_upload(beta.d, beta.h, n, err, sizeof err) == 0, "%s", err);
    bn_sigmoid_bwd(beta.h, n, dbeta.h, db.h);
    CHECK(bn_cuda_sigmoid_bwd(beta.d, n, dbeta.d, db.d, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_sigmoid_bwd(beta.d, n, dbeta.d, NULL, NULL, err, sizeof err) == 0, "NULL db: %s", err);
    char what[96];
    snprintf(what, sizeof what, "sigmoid_bwd n %lld", (long long)n);
    check_same(what, &db);
    arr_free(&beta), arr_free(&dbeta), arr_free(&db);
}

static void check_gdn_gate(int n, int rows) {
    const size_t nt = (size_t)n * rows;
    arr a = arr_rand(nt, 3), dt = arr_rand(n, 1), ssm_a = arr_rand(n, 2), dg = arr_rand(nt, 1), da = arr_rand(nt, 1);
    bn_gdn_gate_bwd(a.h, dt.h, ssm_a.h, n, rows, dg.h, da.h);
    CHECK(bn_cuda_gdn_gate_bwd(a.d, dt.d, ssm_a.d, n, rows, dg.d, da.d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "gdn_gate_bwd n %d rows %d", n, rows);
    check_same(what, &da);
    arr_free(&a), arr_free(&dt), arr_free(&ssm_a), arr_free(&dg), arr_free(&da);
}

static void check_scale(int64_t n, float s) {
    arr dy = arr_rand(n, 1), dx = arr_rand(n, 1);
    bn_scale_bwd(s, n, dy.h, dx.h);
    CHECK(bn_cuda_scale_bwd(s, n, dy.d, dx.d, NULL, err, sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "scale_bwd n %lld s %g", (long long)n, s);
    check_same(what, &dx);
    arr_free(&dy), arr_free(&dx);
}

// ---- RoPE -----------------------------------------------------------------------------------------

_Static_assert(BN_CUDA_ROPE_NEOX == BN_ROPE_NEOX && BN_CUDA_ROPE_NORM == BN_ROPE_NORM, "RoPE modes");

static void check_rope(int head_dim, int n_heads, int T, int n_rot, int pos0, int mode) {
    const size_t nt = (size_t)head_dim * n_heads * T;
    const float base = 10000000.0f;
    arr dy = arr_rand(nt, 1), dx = arr_rand(nt, 1);
    bn_rope_bwd(dy.h, head_dim, n_heads, T, n_rot, pos0, base, mode, dx.h);
    CHECK(bn_cuda_rope_bwd(dy.d, head_dim, n_heads, T, n_rot, pos0, base, mode, dx.d, NULL, err, sizeof err) == 0,
          "%s", err);
    char what[96];
    snprintf(what, sizeof what, "rope_bwd %s hd %d heads %d T %d n_rot %d pos0 %d",
             mode == BN_ROPE_NEOX ? "neox" : "norm", head_dim, n_heads, T, n_rot, pos0);
    check_same(what, &dx);
    arr_free(&dy), arr_free(&dx);
}

// ---- causal depthwise conv + SiLU ---------------------------------------------------------------------

// check_conv_fwd: with_state = 0 runs without a starting state; the device's state_out aliases its state0, as the
// CPU's does.
static void check_conv_fwd(int C, int K, int T, int with_state) {
    const size_t ns = (size_t)C * (K - 1);
    arr mix = arr_rand((size_t)C * T, 2), state = arr_rand(ns, 2), w = arr_rand((size_t)C * K, 1),
        out = arr_rand((size_t)C * T, 1);
    if (!with_state) memset(state.h, 0, ns * sizeof(float)); // state_out of a NULL state0 into a zeroed array
    bn_conv1d_silu_fwd(mix.h, with_state ? state.h : NULL, w.h, C, K, T, out.h, state.h);
    CHECK(bn_cuda_conv1d_silu_fwd(mix.d, with_state ? state.d : NULL, w.d, C, K, T, out.d, state.d, NULL, err,
                                  sizeof err) == 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, "conv1d_silu_fwd C %d K %d T %d%s: out", C, K, T, with_state ? "" : " (state0 NULL)");
    check_same(what, &out);
    snprintf(what, sizeof what, "conv1d_silu_fwd C %d K %d T %d%s: state_out", C, K, T,
             with_state ? " (aliasing state0)" : " (state0 NULL)");
    check_same(what, &state);
    arr_free(&mix), arr_free(&state), arr_free(&w), arr_free(&out);
}

// check_conv_bwd: with_state = 0 runs without a starting state; want_dmix / want_dstate = 0 passes NULL.
static void check_conv_bwd(int C, int K, int T, int with_state, int want_dmix, int want_dstate) {
    const size_t nt = (size_t)C * T, ns = (size_t)C * (K - 1);
    arr mix = arr_rand(nt, 2), state = arr_rand(ns, 2), w = arr_rand((size_t)C * K, 1), dout = arr_rand(nt, 1),
        dmix = arr_rand(nt, 1), dstate = arr_rand(ns, 1);
    arr *pstate = with_state ? &state : NULL, *pdmix = want_dmix ? &dmix : NULL;
    arr *pdstate = want_dstate ? &dstate : NULL;
    bn_conv1d_silu_bwd(mix.h, host(pstate), w.h, C, K, T, dout.h, host(pdmix), host(pdstate));
    CHECK(bn_cuda_conv1d_silu_bwd(mix.d, dev(pstate), w.d, C, K, T, dout.d, dev(pdmix), dev(pdstate), NULL, err,
                                  sizeof err) == 0, "%s", err);
    char what[96];
    const char *st = with_state ? "" : " (state0 NULL)";
    snprintf(what, sizeof what, "conv1d_silu_bwd C %d K %d T %d%s: dmix%s", C, K, T, st, want_dmix ? "" : " (NULL)");
    check_same(what, &dmix);
    snprintf(what, sizeof what, "conv1d_silu_bwd C %d K %d T %d%s: dstate0%s", C, K, T, st,
             want_dstate ? "" : " (NULL)");
    check_same(what, &dstate);
    arr_free(&mix), arr_free(&state), arr_free(&w), arr_free(&dout), arr_free(&dmix), arr_free(&dstate);
}

int main(void) {
    if (bn_cuda_device_count() == 0) return test_skip("no CUDA device on this machine");
    char name[128];
    printf("device: %s\n", bn_cuda_device_name(name, sizeof name));
    check_rmsnorm(100, 5, 1);
    check_rmsnorm(300, 3, 1);
    check_rmsnorm(45, 2, 0);
    check_l2norm(100, 5);
    check_l2norm(300, 3);
    check_gated_rmsnorm(100, 4, 1, 1);
    check_gated_rmsnorm(300, 2, 1, 0);
    check_gated_rmsnorm(37, 3, 0, 1);
    check_norm_wgrad(300, 7, 0);
    check_norm_wgrad(100, 5, 1);
    check_pair(&swiglu_op, 1000, 1, 1);
    check_pair(&swiglu_op, 77, 0, 1);
    check_pair(&swiglu_op, 77, 1, 0);
    check_pair(&sigmoid_gate_op, 1000, 1, 1);
    check_pair(&sigmoid_gate_op, 77, 1, 0);
    check_pair(&sigmoid_gate_op, 77, 0, 1);
    check_sigmoid(333);
    check_gdn_gate(6, 37);
    check_scale(555, 0.125f);
    check_rope(24, 3, 5, 16, 7, BN_ROPE_NEOX); // partial rotation: dims 16..23 pass through
    check_rope(24, 3, 5, 16, 7, BN_ROPE_NORM);
    check_rope(32, 2, 4, 32, 1000, BN_ROPE_NEOX);
    check_rope(32, 2, 4, 32, 1000, BN_ROPE_NORM);
    check_conv_fwd(70, 4, 9, 1);
    check_conv_fwd(70, 4, 2, 1); // T < K − 1: the new state keeps part of the old one
    check_conv_fwd(33, 4, 5, 0);
    check_conv_bwd(70, 4, 9, 1, 1, 1);
    check_conv_bwd(70, 4, 2, 1, 1, 1);
    check_conv_bwd(33, 4, 5, 0, 1, 1);
    check_conv_bwd(33, 3, 6, 1, 1, 0);
    check_conv_bwd(33, 4, 6, 1, 0, 1);
    return test_done("test_cuda_bwd_ops");
}
