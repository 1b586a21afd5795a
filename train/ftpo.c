// train/ftpo.c — FTPO loss, gradient and metrics (docs/antidoom.md §9–10). See ftpo.h.
#include "train/ftpo.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "base/util.h"

bn_ftpo_cfg bn_ftpo_cfg_antidoom(void) {
    bn_ftpo_cfg c = {.eps = 2.0f, .tau_h = 1.0f, .lambda_nt = 0.4f, .lambda_t = 0.05f, .tau_t = 0.5f,
                     .lambda_agg = 0.0f, .tau_agg = 0.0f, .reduction = BN_FTPO_ANTIDOOM};
    return c;
}

bn_ftpo_cfg bn_ftpo_cfg_antislop(void) {
    bn_ftpo_cfg c = {.eps = 2.0f, .tau_h = 1.0f, .lambda_nt = 0.4f, .lambda_t = 0.05f, .tau_t = 1.0f,
                     .lambda_agg = 0.1f, .tau_agg = 2.0f, .reduction = BN_FTPO_WEIGHTED};
    return c;
}

static double softplus_d(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// valid_chosen: writes the valid chosen ids of a row (in range, ≠ rejected, first occurrence) into
// out; returns their count.
static int valid_chosen(const bn_ftpo_row *row, int V, int *out) {
    int n = 0;
    for (int i = 0; i < row->n_chosen; i++) {
        int c = row->chosen[i];
        if (c < 0 || c >= V || c == row->rejected) continue;
        bool dup = false;
        for (int j = 0; j < n; j++) if (out[j] == c) { dup = true; break; }
        if (!dup) out[n++] = c;
    }
    return n;
}

// The work of one bn_ftpo_loss call: the batch, each row's valid chosen ids and their terms, the sums.
typedef struct {
    const bn_ftpo_cfg *cfg;
    const bn_ftpo_row *rows;
    int B, V, max_c;
    int *cidx;          // [B][max_c + 1] valid chosen ids per row
    int *nc;            // [B] their count
    double *delta, *wt, *sp; // [B][max_c + 1] Δ = z_c − z_r, taper w (not detached), softplus((ε − Δ)/τ_h)
    bool *fallback;     // [B] weighted reduction: every taper 0, so w ≡ 1 for the row
    double *dagg;       // [B] ∂L_agg/∂z_j for j ∈ T_b
    int n_valid, n_fallback, win_rows;
    double w_total, wsp_total, pref_antidoom;          // preference sums
    double win_sum, margin_cnt, delta_sum, w_sum;      // metric sums
    double n_nt, n_t, nt_sum, t_sum, agg_sum;          // tether counts and sums
    double L_pref, L_nt, L_t, L_agg;
} ftpo_batch;

// pref_terms: each row's valid chosen ids, Δ, tapers and softplus terms, the preference loss L_pref and the metric
// sums.
static void pref_terms(ftpo_batch *f) {
    const bn_ftpo_cfg *cfg = f->cfg;
    const double eps = cfg->eps, tau_h = cfg->tau_h;
    const int B = f->B, stride = f->max_c + 1;
    for (int b = 0; b < B; b++) {
        int *cb = f->cidx + (size_t)b * stride;
        int nc = f->nc[b] = valid_chosen(&f->rows[b], f->V, cb);
        const float *z = f->rows[b].z;
        double zr = z[f->rows[b].rejected];
        double row_w = 0, row_l = 0;
        int wins = 0;
        for (int i = 0; i < nc; i++) {
            size_t k = (size_t)b * stride + i;
            double d = z[cb[i]] - zr;
            double w = (eps - d) / eps;
            w = w < 0 ? 0 : (w > 1 ? 1 : w);
            f->delta[k] = d;
            f->wt[k] = w;
            f->sp[k] = softplus_d((eps - d) / tau_h);
            row_w += w;
            row_l += w * f->sp[k];
            wins += d > 0;
            f->margin_cnt += d >= eps;
            f->delta_sum += d;
            f->w_sum += w;
        }
        f->n_valid += nc;
        if (nc > 0) { f->win_sum += (double)wins / nc; f->win_rows++; }
        f->pref_antidoom += row_l / (nc > 0 ? nc : 1);
        if (cfg->reduction == BN_FTPO_WEIGHTED) {
            if (nc > 0 && row_w < 1e-12) {
                f->fallback[b] = true;
                f->n_fallback++;
                row_w = nc;
                row_l = 0;
                for (int i = 0; i < nc; i++) row_l += f->sp[(size_t)b * stride + i];
            }
            f->w_total += row_w;
            f->wsp_total += row_l;
        }
    }
    if (cfg->reduction == BN_FTPO_WEIGHTED) f->L_pref = f->w_total > 0 ? f->wsp_total / f->w_total : 0.0;
    else f->L_pref = B > 0 ? f->pref_antidoom / B : 0.0;
}

// tether_terms: the non-target, target and aggregate tethers (L_nt, L_t, L_agg) and the aggregate's gradient dagg.
static void tether_terms(ftpo_batch *f) {
    const bn_ftpo_cfg *cfg = f->cfg;
    const int B = f->B, V = f->V;
    // counts of non-target / target entries over the batch
    for (int b = 0; b < B; b++) { f->n_t += f->nc[b] + 1; f->n_nt += V - (f->nc[b] + 1); }
    // per row: tether sums over all entries, then split target / non-target
    for (int b = 0; b < B; b++) {
        const float *z = f->rows[b].z, *zr = f->rows[b].zref;
        const int *cb = f->cidx + (size_t)b * (f->max_c + 1);
        double all = 0;
        for (int j = 0; j < V; j++) { double d = (double)z[j] - zr[j]; all += d * d; }
        double tgt_sq = 0, tgt_mean_diff = 0;
        for (int i = -1; i < f->nc[b]; i++) {
            int j = i < 0 ? f->rows[b].rejected : cb[i];
            double d = (double)z[j] - zr[j];
            tgt_sq += d * d;
            double ex = fabs(d) - cfg->tau_t;
            if (ex > 0) f->t_sum += ex * ex;
            tgt_mean_diff += d;
        }
        f->nt_sum += all - tgt_sq;
        double db = tgt_mean_diff / (f->nc[b] + 1);
        double ex = fabs(db) - cfg->tau_agg;
        if (ex > 0) {
            f->agg_sum += ex * ex;
            f->dagg[b] = (2.0 * cfg->lambda_agg / B) * (db > 0 ? 1 : -1) * ex / (f->nc[b] + 1);
        }
    }
    f->L_nt = f->n_nt > 0 ? f->nt_sum / f->n_nt : 0.0;
    f->L_t = f->n_t > 0 ? f->t_sum / f->n_t : 0.0;
    f->L_agg = B > 0 ? f->agg_sum / B : 0.0;
}

// row_gradient: dz of row b: the tethers' gradient, then the preference term's on the chosen and rejected ids.
static void row_gradient(const ftpo_batch *f, int b, float *g) {
    const bn_ftpo_cfg *cfg = f->cfg;
    const double eps = cfg->eps, tau_h = cfg->tau_h;
    const int V = f->V, nc = f->nc[b];
    const float *z = f->rows[b].z, *zr = f->rows[b].zref;
    const int *cb = f->cidx + (size_t)b * (f->max_c + 1);
    double knt = f->n_nt > 0 ? 2.0 * cfg->lambda_nt / f->n_nt : 0.0;
    for (int j = 0; j < V; j++) g[j] = (float)(knt * ((double)z[j] - zr[j]));
    // targets: replace the non-target tether by the target tether (+ agg)
    double kt = f->n_t > 0 ? 2.0 * cfg->lambda_t / f->n_t : 0.0;
    for (int i = -1; i < nc; i++) {
        int j = i < 0 ? f->rows[b].rejected : cb[i];
        double d = (double)z[j] - zr[j];
        double ex = fabs(d) - cfg->tau_t;
        double gt = ex > 0 ? kt * (d > 0 ? 1 : -1) * ex : 0.0;
        g[j] = (float)(gt + (cfg->lambda_agg > 0 ? f->dagg[b] : 0.0));
    }
    // preference term
    double g_rej = 0;
    for (int i = 0; i < nc; i++) {
        size_t k = (size_t)b * (f->max_c + 1) + i;
        double d = f->delta[k];
        double u = (eps - d) / tau_h;
        double active = (d > 0 && d < eps) ? 1.0 : 0.0;
        double dw = -active / eps;              // w'
        double dsp = -sigmoid_d(u) / tau_h;     // sp'
        double G;
        if (cfg->reduction == BN_FTPO_WEIGHTED) {
            if (f->w_total <= 0) G = 0;
            else if (f->fallback[b]) G = dsp / f->w_total;           // w ≡ 1, w' = 0
            else G = (dw * (f->sp[k] - f->L_pref) + f->wt[k] * dsp) / f->w_total;
        } else {
            G = (dw * f->sp[k] + f->wt[k] * dsp) / ((double)f->B * nc);
        }
        g[cb[i]] += (float)G;
        g_rej -= G;
    }
    g[f->rows[b].rejected] += (float)g_rej;
}

// batch_metrics: the metrics of the batch with total loss `loss`.
static void batch_metrics(const ftpo_batch *f, double loss, bn_ftpo_metrics *metrics) {
    memset(metrics, 0, sizeof *metrics);
    metrics->loss = loss;
    metrics->pref = f->L_pref;
    metrics->nt = f->L_nt;
    metrics->t = f->L_t;
    metrics->agg = f->L_agg;
    metrics->n_valid = f->n_valid;
    metrics->n_fallback = f->n_fallback;
    metrics->chosen_win = f->win_rows ? f->win_sum / f->win_rows : 0.0;
    if (!f->n_valid) return;
    metrics->margin_win = f->margin_cnt / f->n_valid;
    metrics->mean_delta = f->delta_sum / f->n_valid;
    metrics->active_weight = f->w_sum / f->n_valid;
    double *ds = xmalloc((size_t)f->n_valid * sizeof(double));
    int m = 0;
    for (int b = 0; b < f->B; b++)
        for (int i = 0; i < f->nc[b]; i++) ds[m++] = f->delta[(size_t)b * (f->max_c + 1) + i];
    qsort(ds, (size_t)m, sizeof(double), cmp_double);
    metrics->median_delta = m % 2 ? ds[m / 2] : 0.5 * (ds[m / 2 - 1] + ds[m / 2]);
    free(ds);
}

double bn_ftpo_loss(const bn_ftpo_cfg *cfg, const bn_ftpo_row *rows, int B, int V, float *const *dz,
                    bn_ftpo_metrics *metrics) {
    ftpo_batch f = {.cfg = cfg, .rows = rows, .B = B, .V = V};
    for (int b = 0; b < B; b++) if (rows[b].n_chosen > f.max_c) f.max_c = rows[b].n_chosen;
    const size_t per_row = (size_t)(B * (f.max_c + 1) + 1);
    f.cidx = xmalloc(per_row * sizeof(int));
    f.nc = xcalloc((size_t)B + 1, sizeof(int));
    f.delta = xmalloc(per_row * sizeof(double));
    f.wt = xmalloc(per_row * sizeof(double));
    f.sp = xmalloc(per_row * sizeof(double));
    f.fallback = xcalloc((size_t)B + 1, sizeof(bool));
    f.dagg = xcalloc((size_t)B + 1, sizeof(double));
    pref_terms(&f);
    tether_terms(&f);
    double loss = f.L_pref + cfg->lambda_nt * f.L_nt + cfg->lambda_t * f.L_t +
                  (cfg->lambda_agg > 0 ? cfg->lambda_agg * f.L_agg : 0.0);
    for (int b = 0; dz && b < B; b++) row_gradient(&f, b, dz[b]);
    if (metrics) batch_metrics(&f, loss, metrics);
    free(f.cidx); free(f.nc); free(f.delta); free(f.wt); free(f.sp); free(f.fallback); free(f.dagg);
    return loss;
}

// ---- reference cache ------------------------------------------------------------------------

bn_ftpo_refcache *bn_ftpo_refcache_new(int n_rows, int V) {
    bn_ftpo_refcache *c = xcalloc(1, sizeof *c);
    c->n_rows = n_rows;
    c->V = V;
    c->rows = xcalloc((size_t)(n_rows > 0 ? n_rows : 1), sizeof(float *));
    return c;
}

void bn_ftpo_refcache_free(bn_ftpo_refcache *c) {
    if (!c) return;
    for (int i = 0; i < c->n_rows; i++) free(c->rows[i]);
    free(c->rows);
    free(c);
}

const float *bn_ftpo_refcache_get(const bn_ftpo_refcache *c, int i) {
    if (i < 0 || i >= c->n_rows) return NULL;
    return c->rows[i];
}

const float *bn_ftpo_refcache_put(bn_ftpo_refcache *c, int i, const float *z) {
    if (i < 0 || i >= c->n_rows) return NULL;
    if (!c->rows[i]) c->rows[i] = xmalloc((size_t)c->V * sizeof(float));
    memcpy(c->rows[i], z, (size_t)c->V * sizeof(float));
    return c->rows[i];
}
