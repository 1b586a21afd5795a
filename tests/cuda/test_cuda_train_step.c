// tests/cuda/test_cuda_train_step.c — the optimizer end of the GPU trainer (cuda/train_step.cu) vs the CPU trainer's
// own functions on random inputs (fixed seed): the FTPO loss, metrics and logit gradient vs train/ftpo.c's
// bn_ftpo_loss (both reductions, the aggregate term, rows with 0..5 valid chosen, invalid chosen ids: out of range,
// equal to the rejected id, repeated; V not a multiple of the block size); AdamW over several steps, the gradient
// norm, clipping (active and inactive) and scaling vs train/adamw.c (n not a multiple of the block size).
// Built twice: `cuda_train_step` links the GPU library (skipped without a device, e.g. CI); `cuda_train_step_emu`
// links the CPU emulator (cuda/emu/) and always runs, also in shuffled order.
// Tolerances (why):
//  - FTPO loss and metrics: 1e-9 relative. Both sides sum in double with the same formulas and order; only the
//    Σ_j (z − zref)² over V is a tree on the device (relative difference ~V·2^-53), and the device's exp/log1p may
//    be an ulp off the host's.
//  - dz: 4 float ulps of the value (|Δ| <= 5e-7·|cpu|) plus 1e-6 of the row's largest |dz|. Each entry is the same
//    double expression rounded once to float (plus one float add on the targets); nvcc may contract a multiply-add
//    into an fma (1 double ulp, which can move the float rounding by one ulp) and the target's float add of two
//    nearly cancelling terms can turn that ulp into a larger relative error of a small result.
//  - AdamW params, m, v: 1e-6·(1 + |cpu|). The update is the CPU's float expression; nvcc's fma contraction moves m, v
//    and the step by an ulp.
//  - norm: 1e-10 relative (double sums in another order: at most ~n·2^-53 apart); clipped g: 1e-6 relative (the
//    float coefficient from a norm a few double ulps apart); unclipped and scaled g: exact.
#include "tests/test.h"
#include "tests/cuda/dev_arrays.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_bwd_ops.h"
#include "cuda/cuda_train_step.h"
#include "train/ftpo.h"
#include "train/adamw.h"
#include "base/util.h"
#include <string.h>
#include <stdint.h>

#define TOL_LOSS 1e-9
#define TOL_DZ_ULPS 5e-7
#define TOL_DZ_ROW 1e-6
#define TOL_ADAMW 1e-6
#define TOL_NORM 1e-10
#define TOL_CLIP 1e-6
#define MAX_ROW_CHOSEN 8

// urand: uniform in [lo, hi).
static float urand(float lo, float hi) { return lo + (hi - lo) * 0.5f * (frand() + 1.0f); }

// upload: a device copy of n host floats.
static float *upload(const float *h, size_t n) {
    float *d = bn_cuda_dev_floats(n, err, sizeof err);
    CHECK(d != NULL, "%s", err);
    if (d) CHECK(bn_cuda_dev_upload(d, h, n, err, sizeof err) == 0, "%s", err);
    return d;
}

// upload_ints: a device copy of n host ints.
static int *upload_ints(const int *h, size_t n) {
    int *d = bn_cuda_dev_ints(n, err, sizeof err);
    CHECK(d != NULL, "%s", err);
    if (d && n) CHECK(bn_cuda_dev_upload_ints(d, h, n, err, sizeof err) == 0, "%s", err);
    return d;
}

// download: a host copy of n device floats (waits for the device).
static float *download(const float *d, size_t n) {
    float *h = xmalloc(n * sizeof(float));
    CHECK(bn_cuda_dev_download(h, d, n, err, sizeof err) == 0, "%s", err);
    return h;
}

// ---- FTPO loss ------------------------------------------------------------------------------------

// One row of a test batch: the rejected id, the chosen ids as given (invalid ones included), the range of
// Δ = z_c − z_r the valid chosen get, and a shift of the targets' z − zref (drives the aggregate term).
typedef struct {
    int rejected, n;
    int chosen[MAX_ROW_CHOSEN];
    float delta_lo, delta_hi, shift;
} row_spec;

// A test batch on the host (z, zref {V, B}; chosen in CSR form) and on the device.
typedef struct {
    int B, V, n_chosen;
    float *z, *zref;
    int rejected[16], off[17], chosen[16 * MAX_ROW_CHOSEN];
    float *dz_, *dzref, *ddz;
    int *drej, *doff, *dchosen;
} ftpo_case;

// make_row: row b's logits: zref uniform in [-4, 4), z = zref + 0.3·noise, the rejected id shifted, and each chosen
// id in range set Δ from the rejected (later ids overwrite repeated ones).
static void make_row(ftpo_case *c, int b, const row_spec *r) {
    float *z = c->z + (size_t)b * c->V, *zref = c->zref + (size_t)b * c->V;
    for (int j = 0; j < c->V; j++) {
        zref[j] = urand(-4, 4);
        z[j] = zref[j] + 0.3f * frand();
    }
    z[r->rejected] = zref[r->rejected] + r->shift + frand();
    for (int i = 0; i < r->n; i++) {
        const int id = r->chosen[i];
        if (id < 0 || id >= c->V || id == r->rejected) continue;
        z[id] = z[r->rejected] + urand(r->delta_lo, r->delta_hi);
        zref[id] = z[id] - r->shift - frand();
    }
}

// make_case: the batch of B rows from specs, uploaded.
static ftpo_case make_case(int V, const row_spec *rows, int B) {
    ftpo_case c = {.B = B, .V = V};
    c.z = xmalloc((size_t)V * B * sizeof(float));
    c.zref = xmalloc((size_t)V * B * sizeof(float));
    for (int b = 0; b < B; b++) {
        make_row(&c, b, &rows[b]);
        c.rejected[b] = rows[b].rejected;
        c.off[b] = c.n_chosen;
        for (int i = 0; i < rows[b].n; i++) c.chosen[c.n_chosen++] = rows[b].chosen[i];
    }
    c.off[B] = c.n_chosen;
    c.dz_ = upload(c.z, (size_t)V * B);
    c.dzref = upload(c.zref, (size_t)V * B);
    c.ddz = bn_cuda_dev_floats((size_t)V * B, err, sizeof err);
    c.drej = upload_ints(c.rejected, B);
    c.doff = upload_ints(c.off, B + 1);
    c.dchosen = upload_ints(c.chosen, c.n_chosen);
    return c;
}

static void free_case(ftpo_case *c) {
    free(c->z), free(c->zref);
    bn_cuda_dev_free(c->dz_), bn_cuda_dev_free(c->dzref), bn_cuda_dev_free(c->ddz);
    bn_cuda_dev_free_ints(c->drej), bn_cuda_dev_free_ints(c->doff), bn_cuda_dev_free_ints(c->dchosen);
}

// cpu_loss: train/ftpo.c on the case; dz (host {V, B}) may be NULL.
static double cpu_loss(const ftpo_case *c, const bn_ftpo_cfg *cfg, float *dz, bn_ftpo_metrics *m) {
    bn_ftpo_row rows[16];
    float *dzp[16];
    for (int b = 0; b < c->B; b++) {
        rows[b] = (bn_ftpo_row){c->z + (size_t)b * c->V, c->zref + (size_t)b * c->V, c->rejected[b],
                                c->chosen + c->off[b], c->off[b + 1] - c->off[b]};
        dzp[b] = dz ? dz + (size_t)b * c->V : NULL;
    }
    return bn_ftpo_loss(cfg, rows, c->B, c->V, dz ? dzp : NULL, m);
}

// rel_err: |a − b| / (1 + |b|).
static double rel_err(double a, double b) { return fabs(a - b) / (1 + fabs(b)); }

// check_metrics: every metric of the device against the CPU's; returns the largest relative error.
static double check_metrics(const char *what, const bn_ftpo_metrics *g, const bn_ftpo_metrics *c) {
    const double got[] = {g->loss, g->pref, g->nt, g->t, g->agg, g->chosen_win, g->margin_win, g->mean_delta,
                          g->median_delta, g->active_weight};
    const double want[] = {c->loss, c->pref, c->nt, c->t, c->agg, c->chosen_win, c->margin_win, c->mean_delta,
                           c->median_delta, c->active_weight};
    const char *names[] = {"loss", "pref", "nt", "t", "agg", "chosen_win", "margin_win", "mean_delta",
                           "median_delta", "active_weight"};
    double worst = 0;
    for (int i = 0; i < 10; i++) {
        const double e = rel_err(got[i], want[i]);
        CHECK(e <= TOL_LOSS, "%s: %s %.17g, cpu %.17g", what, names[i], got[i], want[i]);
        worst = fmax(worst, e);
    }
    CHECK(g->n_valid == c->n_valid, "%s: n_valid %d, cpu %d", what, g->n_valid, c->n_valid);
    CHECK(g->n_fallback == c->n_fallback, "%s: n_fallback %d, cpu %d", what, g->n_fallback, c->n_fallback);
    return worst;
}

// check_dz: the device gradient against the CPU's, row by row; returns the largest |Δ| / |row max|.
static double check_dz(const char *what, const ftpo_case *c, const float *got, const float *want) {
    double worst = 0;
    for (int b = 0; b < c->B; b++) {
        const float *g = got + (size_t)b * c->V, *w = want + (size_t)b * c->V;
        double row_max = 0;
        for (int j = 0; j < c->V; j++) row_max = fmax(row_max, fabs(w[j]));
        int bad = 0;
        for (int j = 0; j < c->V; j++) {
            const double d = fabs((double)g[j] - w[j]);
            worst = fmax(worst, d / (row_max > 0 ? row_max : 1));
            if (!(d <= TOL_DZ_ULPS * fabs(w[j]) + TOL_DZ_ROW * row_max) && bad++ < 3)
                CHECK(0, "%s: dz row %d [%d] %.9g, cpu %.9g", what, b, j, g[j], w[j]);
        }
        CHECK(bad == 0, "%s: row %d: %d entries of dz off", what, b, bad);
    }
    return worst;
}

// check_ftpo: the device loss, metrics and gradient of the case against train/ftpo.c under cfg.
static void check_ftpo(const char *what, const ftpo_case *c, const bn_ftpo_cfg *cfg) {
    const size_t nz = (size_t)c->V * c->B;
    float *want = xmalloc(nz * sizeof(float));
    bn_ftpo_metrics mc, mg, mg_nodz;
    cpu_loss(c, cfg, want, &mc);
    float *scratch = bn_cuda_dev_floats(bn_cuda_ftpo_scratch_floats(c->B, c->n_chosen), err, sizeof err);
    CHECK(bn_cuda_ftpo_loss(cfg, c->dz_, c->dzref, c->B, c->V, c->drej, c->doff, c->dchosen, c->n_chosen, NULL,
                            scratch, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_ftpo_metrics(scratch, c->B, c->n_chosen, &mg_nodz, err, sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_ftpo_loss(cfg, c->dz_, c->dzref, c->B, c->V, c->drej, c->doff, c->dchosen, c->n_chosen, c->ddz,
                            scratch, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_ftpo_metrics(scratch, c->B, c->n_chosen, &mg, err, sizeof err) == 0, "%s", err);
    float *got = download(c->ddz, nz);
    char label[128];
    snprintf(label, sizeof label, "%s (dz NULL)", what);
    const double e_nodz = check_metrics(label, &mg_nodz, &mc);
    const double e_m = check_metrics(what, &mg, &mc);
    const double e_dz = check_dz(what, c, got, want);
    printf("%-44s loss %.6f n_valid %d fallback %d: metrics err %.3g (%.3g without dz), dz err %.3g of row max\n",
           what, mc.loss, mc.n_valid, mc.n_fallback, e_m, e_nodz, e_dz);
    bn_cuda_dev_free(scratch);
    free(want), free(got);
}

// The rows of the tests: every kind of chosen list. V must exceed 500 (ids up to 500 are used).
static const row_spec rows_mixed[] = {
    {17, 7, {3, 500, 99, 17, 3, 100000, -2}, -1, 3, 0},  // 3 valid: rejected, repeat, out of range dropped
    {99, 1, {0}, -1, 3, 0},                              // 1 valid
    {250, 5, {1, 2, 4, 5, 6}, -1, 3, 3},                 // 5 valid, targets shifted (aggregate active)
    {5, 0, {0}, 0, 0, 0},                                // no chosen
    {7, 2, {7, 100000}, 0, 0, 0},                        // only invalid chosen
    {300, 3, {301, 302, 303}, 2.5f, 4, -3},              // every Δ past ε: tapers 0 (weighted: falls back to w = 1)
};

// check_ftpo_cases: both reductions, with and without the aggregate term, on V a multiple of nothing.
static void check_ftpo_cases(void) {
    ftpo_case a = make_case(1000, rows_mixed, 6), b = make_case(3001, rows_mixed, 3);
    bn_ftpo_cfg antidoom = bn_ftpo_cfg_antidoom(), antislop = bn_ftpo_cfg_antislop();
    bn_ftpo_cfg antidoom_agg = antidoom, antislop_no_agg = antislop;
    antidoom_agg.lambda_agg = 0.1f, antidoom_agg.tau_agg = 2.0f;
    antislop_no_agg.lambda_agg = 0;
    check_ftpo("antidoom V 1000 B 6", &a, &antidoom);
    check_ftpo("antidoom + aggregate V 1000 B 6", &a, &antidoom_agg);
    check_ftpo("weighted + aggregate V 1000 B 6", &a, &antislop);
    check_ftpo("weighted V 1000 B 6", &a, &antislop_no_agg);
    check_ftpo("antidoom V 3001 B 3", &b, &antidoom);
    check_ftpo("weighted + aggregate V 3001 B 3", &b, &antislop);
    free_case(&a), free_case(&b);
    ftpo_case none = make_case(600, rows_mixed + 3, 2); // no valid chosen at all: Σ w = 0
    check_ftpo("weighted, no valid chosen V 600 B 2", &none, &antislop);
    check_ftpo("antidoom, no valid chosen V 600 B 2", &none, &antidoom);
    free_case(&none);
    float *scratch = bn_cuda_dev_floats(64, err, sizeof err);
    CHECK(bn_cuda_ftpo_loss(&antidoom, scratch, scratch, 0, 10, NULL, NULL, NULL, 0, NULL, scratch, NULL, err,
                            sizeof err) == -1 && strstr(err, "bad shape"), "B 0 accepted (%s)", err);
    bn_cuda_dev_free(scratch);
}

// ---- AdamW, norm, clipping, scaling ---------------------------------------------------------------------------

// max_rel: the largest |got − want| / (1 + |want|) over n.
static double max_rel(const float *got, const float *want, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, rel_err(got[i], want[i]));
    return worst;
}

// check_adamw: steps updates of n parameters with fresh random gradients each, on both sides from the same start.
static void check_adamw(int64_t n, int steps) {
    bn_adamw_cfg cfg = bn_adamw_cfg_default();
    bn_adamw *o = bn_adamw_new(n);
    float *p = xmalloc(n * sizeof(float)), *g = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    float *dp = upload(p, n), *dg = bn_cuda_dev_floats(n, err, sizeof err), *dm = upload(o->m, n),
          *dv = upload(o->v, n);
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        for (int64_t i = 0; i < n; i++) g[i] = (i % 7 == 0 ? 1e-3f : 1.0f) * frand(); // mixed gradient scales
        CHECK(bn_cuda_dev_upload(dg, g, n, err, sizeof err) == 0, "%s", err);
        const float lr = 1e-3f * (float)(s + 1) / steps;
        const int64_t t = bn_adamw_step(o, &cfg, lr, p, g);
        CHECK(bn_cuda_adamw_step(cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, lr, t, n, dp, dg, dm, dv, NULL, err,
                                 sizeof err) == 0, "%s", err);
        float *gp = download(dp, n), *gm = download(dm, n), *gv = download(dv, n);
        const double e = fmax(max_rel(gp, p, n), fmax(max_rel(gm, o->m, n), max_rel(gv, o->v, n)));
        CHECK(e <= TOL_ADAMW, "adamw n %lld step %lld: max error %.3g", (long long)n, (long long)t, e);
        worst = fmax(worst, e);
        free(gp), free(gm), free(gv);
    }
    printf("%-44s max err %.3g (params, m, v)\n", "adamw", worst);
    bn_cuda_dev_free(dp), bn_cuda_dev_free(dg), bn_cuda_dev_free(dm), bn_cuda_dev_free(dv);
    free(p), free(g);
    bn_adamw_free(o);
}

// check_norm: the device norm of n random gradients against bn_grad_norm, and the same bits on a second run.
static void check_norm(int64_t n, float *scratch) {
    float *g = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) g[i] = frand();
    float *dg = upload(g, n);
    double got = -1, again = -2;
    CHECK(bn_cuda_grad_norm(dg, n, scratch, &got, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(bn_cuda_grad_norm(dg, n, scratch, &again, NULL, err, sizeof err) == 0, "%s", err);
    const double want = bn_grad_norm(g, n), e = fabs(got - want) / (want > 0 ? want : 1);
    CHECK(e <= TOL_NORM, "grad_norm n %lld: %.17g, cpu %.17g", (long long)n, got, want);
    CHECK(memcmp(&got, &again, sizeof got) == 0, "grad_norm n %lld: %.17g then %.17g", (long long)n, got, again);
    printf("grad_norm n %-32lld rel err %.3g\n", (long long)n, e);
    bn_cuda_dev_free(dg);
    free(g);
}

// check_clip: bn_cuda_grad_clip with max_norm = ratio·‖g‖ (ratio < 1: clipping active; 0: off) against bn_grad_clip.
static void check_clip(int64_t n, float ratio, float *scratch) {
    float *g = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) g[i] = 3 * frand();
    float *dg = upload(g, n);
    const float max_norm = ratio * (float)bn_grad_norm(g, n);
    double got = -1;
    const double want = bn_grad_clip(g, n, max_norm);
    CHECK(bn_cuda_grad_clip(dg, n, max_norm, scratch, &got, NULL, err, sizeof err) == 0, "%s", err);
    float *gg = download(dg, n);
    const double e = max_rel(gg, g, n);
    const double tol = ratio > 0 && ratio < 1 ? TOL_CLIP : 0;
    CHECK(fabs(got - want) <= TOL_NORM * want, "grad_clip n %lld: norm %.17g, cpu %.17g", (long long)n, got, want);
    CHECK(e <= tol, "grad_clip n %lld ratio %g: max error %.3g", (long long)n, ratio, e);
    char what[96];
    snprintf(what, sizeof what, "grad_clip n %lld max_norm %g x norm (%s)", (long long)n, ratio,
             ratio > 0 && ratio < 1 ? "active" : "inactive");
    printf("%-44s max err %.3g\n", what, e);
    bn_cuda_dev_free(dg);
    free(g), free(gg);
}

// check_scale: bn_cuda_grad_scale against bn_grad_scale (exact).
static void check_scale(int64_t n, float s) {
    float *g = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) g[i] = frand();
    float *dg = upload(g, n);
    bn_grad_scale(g, n, s);
    CHECK(bn_cuda_grad_scale(dg, n, s, NULL, err, sizeof err) == 0, "%s", err);
    float *gg = download(dg, n);
    CHECK(memcmp(gg, g, n * sizeof(float)) == 0, "grad_scale n %lld: differs", (long long)n);
    printf("grad_scale n %-31lld exact\n", (long long)n);
    bn_cuda_dev_free(dg);
    free(g), free(gg);
}

static void check_optimizer(void) {
    check_adamw(1000, 5);
    float *scratch = bn_cuda_dev_floats(BN_CUDA_GRAD_NORM_SCRATCH, err, sizeof err);
    check_norm(1, scratch);
    check_norm(1000, scratch);
    check_norm(100003, scratch); // more than NORM_BLOCKS_MAX blocks of elements: each block strides
    check_clip(1000, 0.5f, scratch);
    check_clip(1000, 2.0f, scratch);
    check_clip(1000, 0.0f, scratch);
    check_scale(1000, 0.25f);
    bn_cuda_dev_free(scratch);
}

int main(void) {
    if (bn_cuda_device_count() == 0) return test_skip("no CUDA device on this machine");
    char name[128];
    printf("device: %s\n", bn_cuda_device_name(name, sizeof name));
    check_ftpo_cases();
    check_optimizer();
    return test_done("test_cuda_train_step");
}
