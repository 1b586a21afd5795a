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

double bn_ftpo_loss(const bn_ftpo_cfg *cfg, const bn_ftpo_row *rows, int B, int V, float *const *dz,
                    bn_ftpo_metrics *metrics) {
    double eps = cfg->eps, tau_h = cfg->tau_h;
    int max_c = 0;
    for (int b = 0; b < B; b++) if (rows[b].n_chosen > max_c) max_c = rows[b].n_chosen;
    int *cidx = xmalloc((size_t)(B * (max_c + 1) + 1) * sizeof(int));   // valid chosen per row
    int *nc = xcalloc((size_t)B + 1, sizeof(int));
    double *delta = xmalloc((size_t)(B * (max_c + 1) + 1) * sizeof(double));
    double *wt = xmalloc((size_t)(B * (max_c + 1) + 1) * sizeof(double));   // taper w (not detached)
    double *sp = xmalloc((size_t)(B * (max_c + 1) + 1) * sizeof(double));
    bool *fallback = xcalloc((size_t)B + 1, sizeof(bool));
    int n_valid = 0, n_fallback = 0;
    double w_total = 0, wsp_total = 0, pref_antidoom = 0;
    double win_sum = 0, margin_cnt = 0, delta_sum = 0, w_sum = 0;
    int win_rows = 0;
    for (int b = 0; b < B; b++) {
        int *cb = cidx + (size_t)b * (max_c + 1);
        nc[b] = valid_chosen(&rows[b], V, cb);
        const float *z = rows[b].z;
        double zr = z[rows[b].rejected];
        double row_w = 0, row_l = 0;
        int wins = 0;
        for (int i = 0; i < nc[b]; i++) {
            size_t k = (size_t)b * (max_c + 1) + i;
            double d = z[cb[i]] - zr;
            double w = (eps - d) / eps;
            w = w < 0 ? 0 : (w > 1 ? 1 : w);
            delta[k] = d;
            wt[k] = w;
            sp[k] = softplus_d((eps - d) / tau_h);
            row_w += w;
            row_l += w * sp[k];
            wins += d > 0;
            margin_cnt += d >= eps;
            delta_sum += d;
            w_sum += w;
        }
        n_valid += nc[b];
        if (nc[b] > 0) { win_sum += (double)wins / nc[b]; win_rows++; }
        pref_antidoom += row_l / (nc[b] > 0 ? nc[b] : 1);
        if (cfg->reduction == BN_FTPO_WEIGHTED) {
            if (nc[b] > 0 && row_w < 1e-12) {
                fallback[b] = true;
                n_fallback++;
                row_w = nc[b];
                row_l = 0;
                for (int i = 0; i < nc[b]; i++) row_l += sp[(size_t)b * (max_c + 1) + i];
            }
            w_total += row_w;
            wsp_total += row_l;
        }
    }
    double L_pref;
    if (cfg->reduction == BN_FTPO_WEIGHTED) L_pref = w_total > 0 ? wsp_total / w_total : 0.0;
    else L_pref = B > 0 ? pref_antidoom / B : 0.0;

    // tethers: counts of non-target / target entries over the batch
    double n_nt = 0, n_t = 0, nt_sum = 0, t_sum = 0, agg_sum = 0;
    for (int b = 0; b < B; b++) { n_t += nc[b] + 1; n_nt += V - (nc[b] + 1); }
    // per row: tether sums over all entries, then split target / non-target
    double *dagg = xcalloc((size_t)B + 1, sizeof(double)); // ∂L_agg/∂z_j for j ∈ T_b
    for (int b = 0; b < B; b++) {
        const float *z = rows[b].z, *zr = rows[b].zref;
        const int *cb = cidx + (size_t)b * (max_c + 1);
        double all = 0;
        for (int j = 0; j < V; j++) { double d = (double)z[j] - zr[j]; all += d * d; }
        double tgt_sq = 0, tgt_mean_diff = 0;
        for (int i = -1; i < nc[b]; i++) {
            int j = i < 0 ? rows[b].rejected : cb[i];
            double d = (double)z[j] - zr[j];
            tgt_sq += d * d;
            double ex = fabs(d) - cfg->tau_t;
            if (ex > 0) t_sum += ex * ex;
            tgt_mean_diff += d;
        }
        nt_sum += all - tgt_sq;
        double db = tgt_mean_diff / (nc[b] + 1);
        double ex = fabs(db) - cfg->tau_agg;
        if (ex > 0) {
            agg_sum += ex * ex;
            dagg[b] = (2.0 * cfg->lambda_agg / B) * (db > 0 ? 1 : -1) * ex / (nc[b] + 1);
        }
    }
    double L_nt = n_nt > 0 ? nt_sum / n_nt : 0.0;
    double L_t = n_t > 0 ? t_sum / n_t : 0.0;
    double L_agg = B > 0 ? agg_sum / B : 0.0;
    double loss = L_pref + cfg->lambda_nt * L_nt + cfg->lambda_t * L_t + (cfg->lambda_agg > 0 ? cfg->lambda_agg * L_agg : 0.0);

    if (dz) {
        for (int b = 0; b < B; b++) {
            const float *z = rows[b].z, *zr = rows[b].zref;
            float *g = dz[b];
            const int *cb = cidx + (size_t)b * (max_c + 1);
            double knt = n_nt > 0 ? 2.0 * cfg->lambda_nt / n_nt : 0.0;
            for (int j = 0; j < V; j++) g[j] = (float)(knt * ((double)z[j] - zr[j]));
            // targets: replace the non-target tether by the target tether (+ agg)
            double kt = n_t > 0 ? 2.0 * cfg->lambda_t / n_t : 0.0;
            for (int i = -1; i < nc[b]; i++) {
                int j = i < 0 ? rows[b].rejected : cb[i];
                double d = (double)z[j] - zr[j];
                double ex = fabs(d) - cfg->tau_t;
                double gt = ex > 0 ? kt * (d > 0 ? 1 : -1) * ex : 0.0;
                g[j] = (float)(gt + (cfg->lambda_agg > 0 ? dagg[b] : 0.0));
            }
            // preference term
            double g_rej = 0;
            for (int i = 0; i < nc[b]; i++) {
                size_t k = (size_t)b * (max_c + 1) + i;
                double d = delta[k];
                double u = (eps - d) / tau_h;
                double active = (d > 0 && d < eps) ? 1.0 : 0.0;
                double dw = -active / eps;              // w'
                double dsp = -sigmoid_d(u) / tau_h;     // sp'
                double G;
                if (cfg->reduction == BN_FTPO_WEIGHTED) {
                    if (w_total <= 0) G = 0;
                    else if (fallback[b]) G = dsp / w_total;           // w ≡ 1, w' = 0
                    else G = (dw * (sp[k] - L_pref) + wt[k] * dsp) / w_total;
                } else {
                    G = (dw * sp[k] + wt[k] * dsp) / ((double)B * nc[b]);
                }
                g[cb[i]] += (float)G;
                g_rej -= G;
            }
            g[rows[b].rejected] += (float)g_rej;
        }
    }

    if (metrics) {
        memset(metrics, 0, sizeof *metrics);
        metrics->loss = loss;
        metrics->pref = L_pref;
        metrics->nt = L_nt;
        metrics->t = L_t;
        metrics->agg = L_agg;
        metrics->n_valid = n_valid;
        metrics->n_fallback = n_fallback;
        metrics->chosen_win = win_rows ? win_sum / win_rows : 0.0;
        if (n_valid) {
            metrics->margin_win = margin_cnt / n_valid;
            metrics->mean_delta = delta_sum / n_valid;
            metrics->active_weight = w_sum / n_valid;
            double *ds = xmalloc((size_t)n_valid * sizeof(double));
            int m = 0;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < nc[b]; i++) ds[m++] = delta[(size_t)b * (max_c + 1) + i];
            qsort(ds, (size_t)m, sizeof(double), cmp_double);
            metrics->median_delta = m % 2 ? ds[m / 2] : 0.5 * (ds[m / 2 - 1] + ds[m / 2]);
            free(ds);
        }
    }
    free(cidx); free(nc); free(delta); free(wt); free(sp); free(fallback); free(dagg);
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
