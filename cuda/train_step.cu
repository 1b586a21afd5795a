// cuda/train_step.cu — the optimizer end of the GPU trainer (cuda/cuda_train_step.h): the FTPO loss and its logit
// gradient with the formulas and double precision of train/ftpo.c (docs/antidoom.md §9), AdamW, the gradient norm,
// clipping and scaling as train/adamw.c (§11.3).
#include "cuda/common.cuh"
#include "cuda/cuda_train_step.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TS_THREADS 256   // block size of the reductions and elementwise kernels (a power of two)
#define TS_ROW_THREADS 32 // block size of the one-thread-per-row gradient kernel
#define NORM_BLOCKS_MAX 256

// ts_launched: 0 when the kernel just enqueued was accepted, else -1 with err.
static int ts_launched(char *err, size_t errlen) {
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

// ts_blocks: blocks of TS_THREADS covering count elements.
static int ts_blocks(int64_t count) { return (int)((count + TS_THREADS - 1) / TS_THREADS); }

// ts_index: this thread's element of a one-thread-per-element launch.
static BN_DEVICE int64_t ts_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }

// block_sum_d: the sum of v over a block of TS_THREADS threads, a fixed tree in shared memory (every thread gets it);
// red: TS_THREADS shared doubles.
static BN_DEVICE double block_sum_d(double v, double *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = TS_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const double total = red[0];
    __syncthreads(); // red may be reused by the caller
    return total;
}

// ---- FTPO loss --------------------------------------------------------------------------------------

namespace {
// The batch results in the scratch, in this order.
enum ftpo_result {
    R_LOSS, R_PREF, R_NT, R_T, R_AGG, R_CHOSEN_WIN, R_MARGIN_WIN, R_MEAN_DELTA, R_ACTIVE_WEIGHT, R_N_VALID,
    R_N_FALLBACK,
    R_KNT, R_KT, R_W_TOTAL, // the gradient's constants: 2λ_nt/n_nt, 2λ_t/n_t, Σ w of the weighted reduction
    R_COUNT
};

// The scratch of one loss, as doubles: res [R_COUNT]; per row sq (Σ_j (z − zref)²), nc (valid chosen), fallback
// (1: the weighted row's tapers fell back to 1), dagg (∂L_agg/∂z on its targets); per chosen id valid (1/0), Δ, taper
// w and softplus((ε − Δ)/τ_h).
struct ftpo_scratch {
    double *res, *sq, *nc, *fallback, *dagg, *valid, *delta, *wt, *sp;
};

// The batch as the kernels see it.
struct ftpo_batch {
    const float *z, *zref;
    const int *rejected, *chosen_off, *chosen;
    int B, V;
};
} // namespace

// ftpo_scratch_doubles: doubles of the scratch for B rows and n_chosen chosen ids.
static size_t ftpo_scratch_doubles(int B, int n_chosen) { return R_COUNT + 4 * (size_t)B + 4 * (size_t)n_chosen; }

// ftpo_layout: the scratch's arrays in the device memory at base (no access).
static ftpo_scratch ftpo_layout(float *base, int B, int n_chosen) {
    double *p = (double *)base;
    ftpo_scratch s;
    s.res = p, p += R_COUNT;
    s.sq = p, p += B;
    s.nc = p, p += B;
    s.fallback = p, p += B;
    s.dagg = p, p += B;
    s.valid = p, p += n_chosen;
    s.delta = p, p += n_chosen;
    s.wt = p, p += n_chosen;
    s.sp = p;
    return s;
}

// ftpo_softplus / ftpo_sigmoid: train/ftpo.c's double softplus and sigmoid.
static BN_DEVICE double ftpo_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static BN_DEVICE double ftpo_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// ftpo_row_sq_kernel: one block per row b; sq[b] = Σ_j (z_j − zref_j)² in double.
static __global__ void ftpo_row_sq_kernel(const float *z, const float *zref, int V, double *sq) {
    bn_cu_grid_begin();
    BN_SHARED(double, red, TS_THREADS);
    const size_t off = (size_t)blockIdx.x * V;
    double acc = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const double d = (double)z[off + j] - zref[off + j];
        acc += d * d;
    }
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) sq[blockIdx.x] = acc;
}

// ftpo_mark_chosen: row b's chosen ids: valid (in range, ≠ rejected, the first occurrence), and for the valid ones
// Δ = z_c − z_r, the taper w = clamp((ε − Δ)/ε, 0, 1) and softplus((ε − Δ)/τ_h); returns the valid count.
static BN_DEVICE int ftpo_mark_chosen(const bn_ftpo_cfg &cfg, const ftpo_batch &f, const ftpo_scratch &s, int b) {
    const double eps = cfg.eps, tau_h = cfg.tau_h;
    const float *z = f.z + (size_t)b * f.V;
    const int rej = f.rejected[b], k0 = f.chosen_off[b], k1 = f.chosen_off[b + 1];
    const double zr = z[rej];
    int nc = 0;
    for (int k = k0; k < k1; k++) {
        const int c = f.chosen[k];
        bool ok = c >= 0 && c < f.V && c != rej;
        for (int j = k0; ok && j < k; j++) ok = f.chosen[j] != c;
        s.valid[k] = ok ? 1.0 : 0.0;
        if (!ok) continue;
        const double d = z[c] - zr;
        double w = (eps - d) / eps;
        w = w < 0 ? 0 : (w > 1 ? 1 : w);
        s.delta[k] = d;
        s.wt[k] = w;
        s.sp[k] = ftpo_softplus((eps - d) / tau_h);
        nc++;
    }
    return nc;
}

// ftpo_pref_sums: the preference loss L_pref (res[R_PREF], res[R_W_TOTAL]) and the Δ metrics, summed in
// train/ftpo.c's order (row by row, chosen by chosen).
static BN_DEVICE void ftpo_pref_sums(const bn_ftpo_cfg &cfg, const ftpo_batch &f, const ftpo_scratch &s) {
    const double eps = cfg.eps;
    double w_total = 0, wsp_total = 0, pref_antidoom = 0, win_sum = 0, margin_cnt = 0, delta_sum = 0, w_sum = 0;
    int n_valid = 0, n_fallback = 0, win_rows = 0;
    for (int b = 0; b < f.B; b++) {
        const int nc = (int)s.nc[b], k0 = f.chosen_off[b], k1 = f.chosen_off[b + 1];
        double row_w = 0, row_l = 0;
        int wins = 0;
        s.fallback[b] = 0;
        for (int k = k0; k < k1; k++) {
            if (s.valid[k] == 0) continue;
            const double d = s.delta[k], w = s.wt[k];
            row_w += w;
            row_l += w * s.sp[k];
            wins += d > 0;
            margin_cnt += d >= eps;
            delta_sum += d;
            w_sum += w;
        }
        n_valid += nc;
        if (nc > 0) { win_sum += (double)wins / nc; win_rows++; }
        pref_antidoom += row_l / (nc > 0 ? nc : 1);
        if (cfg.reduction == BN_FTPO_WEIGHTED) {
            if (nc > 0 && row_w < 1e-12) {
                s.fallback[b] = 1;
                n_fallback++;
                row_w = nc;
                row_l = 0;
                for (int k = k0; k < k1; k++) if (s.valid[k] != 0) row_l += s.sp[k];
            }
            w_total += row_w;
            wsp_total += row_l;
        }
    }
    double *res = s.res;
    if (cfg.reduction == BN_FTPO_WEIGHTED) res[R_PREF] = w_total > 0 ? wsp_total / w_total : 0.0;
    else res[R_PREF] = f.B > 0 ? pref_antidoom / f.B : 0.0;
    res[R_W_TOTAL] = w_total;
    res[R_N_VALID] = n_valid;
    res[R_N_FALLBACK] = n_fallback;
    res[R_CHOSEN_WIN] = win_rows ? win_sum / win_rows : 0.0;
    res[R_MARGIN_WIN] = n_valid ? margin_cnt / n_valid : 0.0;
    res[R_MEAN_DELTA] = n_valid ? delta_sum / n_valid : 0.0;
    res[R_ACTIVE_WEIGHT] = n_valid ? w_sum / n_valid : 0.0;
}

// ftpo_row_targets: row b's target tether sums (Σ (z − zref)², Σ max(0, |z − zref| − τ_t)², Σ (z − zref)) over the
// rejected id and the valid chosen.
static BN_DEVICE void ftpo_row_targets(const bn_ftpo_cfg &cfg, const ftpo_batch &f, const ftpo_scratch &s, int b,
                                       double *tgt_sq, double *t_sum, double *tgt_diff) {
    const size_t off = (size_t)b * f.V;
    for (int k = f.chosen_off[b] - 1; k < f.chosen_off[b + 1]; k++) {
        if (k >= f.chosen_off[b] && s.valid[k] == 0) continue;
        const int j = k < f.chosen_off[b] ? f.rejected[b] : f.chosen[k];
        const double d = (double)f.z[off + j] - f.zref[off + j];
        *tgt_sq += d * d;
        const double ex = fabs(d) - cfg.tau_t;
        if (ex > 0) *t_sum += ex * ex;
        *tgt_diff += d;
    }
}

// ftpo_tether_sums: the tethers L_nt, L_t, L_agg (res), each row's aggregate gradient dagg, the gradient's constants
// and the total loss, in train/ftpo.c's order.
static BN_DEVICE void ftpo_tether_sums(const bn_ftpo_cfg &cfg, const ftpo_batch &f, const ftpo_scratch &s) {
    double n_t = 0, n_nt = 0, t_sum = 0, nt_sum = 0, agg_sum = 0;
    for (int b = 0; b < f.B; b++) { n_t += s.nc[b] + 1; n_nt += f.V - (s.nc[b] + 1); }
    for (int b = 0; b < f.B; b++) {
        double tgt_sq = 0, tgt_diff = 0;
        ftpo_row_targets(cfg, f, s, b, &tgt_sq, &t_sum, &tgt_diff);
        nt_sum += s.sq[b] - tgt_sq;
        const double db = tgt_diff / (s.nc[b] + 1), ex = fabs(db) - cfg.tau_agg;
        s.dagg[b] = 0;
        if (ex > 0) {
            agg_sum += ex * ex;
            s.dagg[b] = (2.0 * cfg.lambda_agg / f.B) * (db > 0 ? 1 : -1) * ex / (s.nc[b] + 1);
        }
    }
    double *res = s.res;
    res[R_NT] = n_nt > 0 ? nt_sum / n_nt : 0.0;
    res[R_T] = n_t > 0 ? t_sum / n_t : 0.0;
    res[R_AGG] = f.B > 0 ? agg_sum / f.B : 0.0;
    res[R_KNT] = n_nt > 0 ? 2.0 * cfg.lambda_nt / n_nt : 0.0;
    res[R_KT] = n_t > 0 ? 2.0 * cfg.lambda_t / n_t : 0.0;
    res[R_LOSS] = res[R_PREF] + cfg.lambda_nt * res[R_NT] + cfg.lambda_t * res[R_T] +
                  (cfg.lambda_agg > 0 ? cfg.lambda_agg * res[R_AGG] : 0.0);
}

// ftpo_batch_kernel: one thread; every row's chosen terms, then the batch's sums, losses and metrics (the serial part:
// O(Σ chosen²) work, nothing over V).
static __global__ void ftpo_batch_kernel(bn_ftpo_cfg cfg, ftpo_batch f, ftpo_scratch s) {
    bn_cu_grid_begin();
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (int b = 0; b < f.B; b++) s.nc[b] = ftpo_mark_chosen(cfg, f, s, b);
    ftpo_pref_sums(cfg, f, s);
    ftpo_tether_sums(cfg, f, s);
}

// ftpo_tether_grad_kernel: grid (V blocks, B rows); dz = 2λ_nt/n_nt · (z − zref) everywhere (the targets are
// overwritten by ftpo_target_grad_kernel).
static __global__ void ftpo_tether_grad_kernel(const float *z, const float *zref, int V, const double *res,
                                               float *dz) {
    bn_cu_grid_begin();
    const int64_t j = ts_index();
    if (j >= V) return;
    const size_t i = (size_t)blockIdx.y * V + (size_t)j;
    dz[i] = (float)(res[R_KNT] * ((double)z[i] - zref[i]));
}

// ftpo_pref_grad: ∂L_pref/∂Δ of the valid chosen id k of row b (∂/∂z_c; the rejected id gets its negative).
static BN_DEVICE double ftpo_pref_grad(const bn_ftpo_cfg &cfg, const ftpo_scratch &s, int B, int b, int k) {
    const double eps = cfg.eps, tau_h = cfg.tau_h, d = s.delta[k], nc = s.nc[b];
    const double u = (eps - d) / tau_h;
    const double active = (d > 0 && d < eps) ? 1.0 : 0.0;
    const double dw = -active / eps;            // w'
    const double dsp = -ftpo_sigmoid(u) / tau_h; // sp'
    if (cfg.reduction != BN_FTPO_WEIGHTED) return (dw * s.sp[k] + s.wt[k] * dsp) / ((double)B * nc);
    const double w_total = s.res[R_W_TOTAL];
    if (w_total <= 0) return 0;
    if (s.fallback[b] != 0) return dsp / w_total; // w ≡ 1, w' = 0
    return (dw * (s.sp[k] - s.res[R_PREF]) + s.wt[k] * dsp) / w_total;
}

// ftpo_target_grad_kernel: one thread per row; the row's targets (rejected, valid chosen) get the target tether's
// gradient (+ the aggregate's) in place of the non-target one, then the preference term's.
static __global__ void ftpo_target_grad_kernel(bn_ftpo_cfg cfg, ftpo_batch f, ftpo_scratch s, float *dz) {
    bn_cu_grid_begin();
    const int b = (int)ts_index();
    if (b >= f.B) return;
    const size_t off = (size_t)b * f.V;
    const int rej = f.rejected[b], k0 = f.chosen_off[b], k1 = f.chosen_off[b + 1];
    float *g = dz + off;
    const double kt = s.res[R_KT];
    for (int k = k0 - 1; k < k1; k++) {
        if (k >= k0 && s.valid[k] == 0) continue;
        const int j = k < k0 ? rej : f.chosen[k];
        const double d = (double)f.z[off + j] - f.zref[off + j];
        const double ex = fabs(d) - cfg.tau_t;
        const double gt = ex > 0 ? kt * (d > 0 ? 1 : -1) * ex : 0.0;
        g[j] = (float)(gt + (cfg.lambda_agg > 0 ? s.dagg[b] : 0.0));
    }
    double g_rej = 0;
    for (int k = k0; k < k1; k++) {
        if (s.valid[k] == 0) continue;
        const double G = ftpo_pref_grad(cfg, s, f.B, b, k);
        g[f.chosen[k]] += (float)G;
        g_rej -= G;
    }
    g[rej] += (float)g_rej;
}

extern "C" size_t bn_cuda_ftpo_scratch_floats(int B, int n_chosen) {
    return 2 * ftpo_scratch_doubles(B > 0 ? B : 0, n_chosen > 0 ? n_chosen : 0);
}

extern "C" int bn_cuda_ftpo_loss(const bn_ftpo_cfg *cfg, const float *z, const float *zref, int B, int V,
                                 const int *rejected, const int *chosen_off, const int *chosen, int n_chosen,
                                 float *dz, float *scratch, void *stream, char *err, size_t errlen) {
    if (B <= 0 || B > 65535 || V <= 0 || n_chosen < 0) { // B is the gradient grid's y dimension
        if (err && errlen) snprintf(err, errlen, "cuda: ftpo_loss: bad shape B %d V %d n_chosen %d", B, V, n_chosen);
        return -1;
    }
    const ftpo_batch f = {z, zref, rejected, chosen_off, chosen, B, V};
    const ftpo_scratch s = ftpo_layout(scratch, B, n_chosen);
    BN_LAUNCH(ftpo_row_sq_kernel, B, TS_THREADS, 0, stream, z, zref, V, s.sq);
    if (ts_launched(err, errlen)) return -1;
    BN_LAUNCH(ftpo_batch_kernel, 1, 1, 0, stream, *cfg, f, s);
    if (ts_launched(err, errlen)) return -1;
    if (!dz) return 0;
    BN_LAUNCH(ftpo_tether_grad_kernel, dim3(ts_blocks(V), B), TS_THREADS, 0, stream, z, zref, V, s.res, dz);
    if (ts_launched(err, errlen)) return -1;
    BN_LAUNCH(ftpo_target_grad_kernel, (B + TS_ROW_THREADS - 1) / TS_ROW_THREADS, TS_ROW_THREADS, 0, stream, *cfg,
              f, s, dz);
    return ts_launched(err, errlen);
}

// cmp_delta: ascending order of doubles for qsort.
static int cmp_delta(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// median_of_valid: the median of delta[k] over the k with valid[k] != 0 (host arrays of n; 0 when none); sorts
// delta's valid entries to its front.
static double median_of_valid(double *delta, const double *valid, int n) {
    int m = 0;
    for (int k = 0; k < n; k++) if (valid[k] != 0) delta[m++] = delta[k];
    if (m == 0) return 0.0;
    qsort(delta, (size_t)m, sizeof(double), cmp_delta);
    return m % 2 ? delta[m / 2] : 0.5 * (delta[m / 2 - 1] + delta[m / 2]);
}

// download_doubles: host[0..n) = dev[0..n); returns 0 or -1.
static int download_doubles(double *host, const double *dev, size_t n, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaMemcpy(host, dev, n * sizeof(double), cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

// fill_metrics: metrics from the batch results res [R_COUNT] and the median Δ.
static void fill_metrics(const double *res, double median_delta, bn_ftpo_metrics *metrics) {
    memset(metrics, 0, sizeof *metrics);
    metrics->loss = res[R_LOSS];
    metrics->pref = res[R_PREF];
    metrics->nt = res[R_NT];
    metrics->t = res[R_T];
    metrics->agg = res[R_AGG];
    metrics->chosen_win = res[R_CHOSEN_WIN];
    metrics->margin_win = res[R_MARGIN_WIN];
    metrics->mean_delta = res[R_MEAN_DELTA];
    metrics->median_delta = median_delta;
    metrics->active_weight = res[R_ACTIVE_WEIGHT];
    metrics->n_valid = (int)res[R_N_VALID];
    metrics->n_fallback = (int)res[R_N_FALLBACK];
}

extern "C" int bn_cuda_ftpo_metrics(const float *scratch, int B, int n_chosen, bn_ftpo_metrics *metrics, char *err,
                                    size_t errlen) {
    const ftpo_scratch s = ftpo_layout((float *)scratch, B, n_chosen);
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    const size_t nc = (size_t)(n_chosen > 0 ? n_chosen : 0);
    double res[R_COUNT];
    double *valid = (double *)calloc(nc + 1, sizeof(double)), *delta = (double *)calloc(nc + 1, sizeof(double));
    const int rc = download_doubles(res, s.res, R_COUNT, err, errlen) ||
                   download_doubles(valid, s.valid, nc, err, errlen) ||
                   download_doubles(delta, s.delta, nc, err, errlen) ? -1 : 0;
    if (rc == 0) fill_metrics(res, median_of_valid(delta, valid, (int)nc), metrics);
    free(valid);
    free(delta);
    return rc;
}

// ---- AdamW ------------------------------------------------------------------------------------------

// adamw_kernel: one thread per parameter; train/adamw.c's float update with the step's constants step_size = lr/bc1,
// sqrt_bc2 = √bc2 and decay = 1 − lr·wd.
static __global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, int64_t n, float beta1,
                                    float beta2, float eps, float step_size, float sqrt_bc2, float decay) {
    bn_cu_grid_begin();
    const int64_t i = ts_index();
    if (i >= n) return;
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / sqrt_bc2 + eps;
    params[i] = params[i] * decay - step_size * mi / denom;
}

extern "C" int bn_cuda_adamw_step(float beta1, float beta2, float eps, float weight_decay, float lr, int64_t t,
                                  int64_t n, float *params, const float *grads, float *m, float *v, void *stream,
                                  char *err, size_t errlen) {
    if (n <= 0) return 0;
    // the constants as train/adamw.c computes them (torch: step_size = lr/bc1, denom = √v/√bc2 + eps)
    const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    const float step_size = (float)(lr / bc1), sqrt_bc2 = (float)sqrt(bc2), decay = 1.0f - lr * weight_decay;
    BN_LAUNCH(adamw_kernel, ts_blocks(n), TS_THREADS, 0, stream, params, grads, m, v, n, beta1, beta2, eps, step_size,
              sqrt_bc2, decay);
    return ts_launched(err, errlen);
}

// ---- gradient norm, clipping, scaling -------------------------------------------------------------------

// norm_blocks: blocks of the partial sums of n gradients (a function of n alone, so the sum order is fixed).
static int norm_blocks(int64_t n) {
    const int64_t nb = (n + TS_THREADS - 1) / TS_THREADS;
    return nb < 1 ? 1 : nb > NORM_BLOCKS_MAX ? NORM_BLOCKS_MAX : (int)nb;
}

// norm_partial_kernel: partial[block] = Σ g² (double) over the elements block, block + gridDim.x·TS_THREADS, ...
static __global__ void norm_partial_kernel(const float *g, int64_t n, double *partial) {
    bn_cu_grid_begin();
    BN_SHARED(double, red, TS_THREADS);
    double acc = 0;
    for (int64_t i = ts_index(); i < n; i += (int64_t)gridDim.x * TS_THREADS) acc += (double)g[i] * g[i];
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// norm_final_kernel: one block; *norm = √(Σ partial[0..nb)).
static __global__ void norm_final_kernel(const double *partial, int nb, double *norm) {
    bn_cu_grid_begin();
    BN_SHARED(double, red, TS_THREADS);
    double acc = 0;
    for (int i = threadIdx.x; i < nb; i += TS_THREADS) acc += partial[i];
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) *norm = sqrt(acc);
}

// grad_clip_kernel: one thread per gradient; g *= min(1, max_norm/(norm + 1e-6)) as train/adamw.c's bn_grad_clip.
static __global__ void grad_clip_kernel(float *g, int64_t n, float max_norm, const double *norm) {
    bn_cu_grid_begin();
    const int64_t i = ts_index();
    if (i >= n) return;
    const double coef = max_norm / (*norm + 1e-6);
    if (coef < 1.0) g[i] *= (float)coef;
}

// grad_scale_kernel: one thread per element; g *= s.
static __global__ void grad_scale_kernel(float *g, int64_t n, float s) {
    bn_cu_grid_begin();
    const int64_t i = ts_index();
    if (i < n) g[i] *= s;
}

// enqueue_norm: the norm of g into the scratch's double at NORM_BLOCKS_MAX (the partial sums before it); returns its
// device address, or NULL with err.
static double *enqueue_norm(const float *g, int64_t n, float *scratch, void *stream, char *err, size_t errlen) {
    double *partial = (double *)scratch, *norm = partial + NORM_BLOCKS_MAX;
    const int nb = norm_blocks(n);
    BN_LAUNCH(norm_partial_kernel, nb, TS_THREADS, 0, stream, g, n, partial);
    if (ts_launched(err, errlen)) return nullptr;
    BN_LAUNCH(norm_final_kernel, 1, TS_THREADS, 0, stream, partial, nb, norm);
    return ts_launched(err, errlen) ? nullptr : norm;
}

// read_norm: waits for the device; *host = *dev; returns 0 or -1.
static int read_norm(double *host, const double *dev, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    return download_doubles(host, dev, 1, err, errlen);
}

extern "C" int bn_cuda_grad_norm(const float *g, int64_t n, float *scratch, double *norm, void *stream, char *err,
                                 size_t errlen) {
    const double *dev_norm = enqueue_norm(g, n > 0 ? n : 0, scratch, stream, err, errlen);
    return dev_norm ? read_norm(norm, dev_norm, err, errlen) : -1;
}

extern "C" int bn_cuda_grad_clip(float *g, int64_t n, float max_norm, float *scratch, double *norm, void *stream,
                                 char *err, size_t errlen) {
    const double *dev_norm = enqueue_norm(g, n > 0 ? n : 0, scratch, stream, err, errlen);
    if (!dev_norm) return -1;
    if (max_norm > 0 && n > 0) {
        BN_LAUNCH(grad_clip_kernel, ts_blocks(n), TS_THREADS, 0, stream, g, n, max_norm, dev_norm);
        if (ts_launched(err, errlen)) return -1;
    }
    return norm ? read_norm(norm, dev_norm, err, errlen) : 0;
}

extern "C" int bn_cuda_grad_scale(float *g, int64_t n, float s, void *stream, char *err, size_t errlen) {
    if (n <= 0) return 0;
    BN_LAUNCH(grad_scale_kernel, ts_blocks(n), TS_THREADS, 0, stream, g, n, s);
    return ts_launched(err, errlen);
}
