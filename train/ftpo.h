// train/ftpo.h — the FTPO loss on last-position logits (docs/antidoom.md §9), its analytic gradient
// w.r.t. the logits (§9.4), the training metrics (§10), and a per-row cache of reference logits.
#ifndef BONSAI_TRAIN_FTPO_H
#define BONSAI_TRAIN_FTPO_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

enum bn_ftpo_reduction {
    BN_FTPO_ANTIDOOM = 0, // (1/B) Σ_b (1/|C_b|) Σ_c ℓ_bc; no fallback
    BN_FTPO_WEIGHTED = 1, // auto-antislop: Σ w·sp / Σ w over the batch, all-zero rows fall back to w = 1
};

typedef struct {
    float eps;        // ε clip_epsilon_logits (2.0)
    float tau_h;      // hinge temperature (1.0)
    float lambda_nt;  // non-target tether λ_nt (0.4)
    float lambda_t;   // target tether λ_t (0.05)
    float tau_t;      // target dead zone τ_t (0.5)
    float lambda_agg; // aggregate term λ_agg (0 = off)
    float tau_agg;    // aggregate dead zone
    int reduction;    // enum bn_ftpo_reduction
} bn_ftpo_cfg;

// bn_ftpo_cfg_antidoom: the antidoom shipped preset (ε 2, τ_h 1, λ_nt 0.4, λ_t 0.05, τ_t 0.5, per-row mean).
bn_ftpo_cfg bn_ftpo_cfg_antidoom(void);
// bn_ftpo_cfg_antislop: auto-antislop effective preset (λ_t 0.05, τ_t 1, λ_agg 0.1, τ_agg 2, weighted mean).
bn_ftpo_cfg bn_ftpo_cfg_antislop(void);

// One row: policy logits z {V}, reference logits zref {V}, rejected id (must be in [0, V)), chosen
// ids. Invalid chosen (out of range, equal to the rejected id, duplicates) are masked out.
typedef struct {
    const float *z;
    const float *zref;
    int rejected;
    const int *chosen;
    int n_chosen;
} bn_ftpo_row;

typedef struct {
    double loss, pref, nt, t, agg; // total and raw parts (L_pref, L_nt = mse_elem, L_t = mse_tgt_tokenwise, L_agg)
    double chosen_win;    // mean over rows (with ≥1 valid chosen) of the fraction z_c > z_r
    double margin_win;    // batch fraction of valid chosen with Δ ≥ ε
    double mean_delta, median_delta;
    double active_weight; // mean taper w over valid chosen
    int n_valid;          // valid chosen in the batch
    int n_fallback;       // rows whose weights fell back to 1 (weighted reduction)
} bn_ftpo_metrics;

// bn_ftpo_loss: loss of a batch of B rows over a vocabulary of V; if dz is non-NULL, dz[b] {V} is
// OVERWRITTEN with ∂L/∂z_b. metrics may be NULL. Returns the total loss.
double bn_ftpo_loss(const bn_ftpo_cfg *cfg, const bn_ftpo_row *rows, int B, int V, float *const *dz,
                    bn_ftpo_metrics *metrics);

// ---- reference-logit cache ------------------------------------------------------------------
// Reference logits (adapter disabled) of row i, computed once and kept in memory (V floats per
// row, allocated when the row is first stored: 0.99 MB per row at Qwen3.5's V).
typedef struct {
    int n_rows, V;
    float **rows; // [n_rows]: {V} or NULL (not computed yet)
} bn_ftpo_refcache;

// bn_ftpo_refcache_new: empty cache for n_rows rows of V logits; never NULL.
bn_ftpo_refcache *bn_ftpo_refcache_new(int n_rows, int V);
// bn_ftpo_refcache_free: frees the cache (NULL is fine).
void bn_ftpo_refcache_free(bn_ftpo_refcache *c);
// bn_ftpo_refcache_get: cached logits of row i or NULL if not computed yet.
const float *bn_ftpo_refcache_get(const bn_ftpo_refcache *c, int i);
// bn_ftpo_refcache_put: stores V logits for row i; returns the cached copy.
const float *bn_ftpo_refcache_put(bn_ftpo_refcache *c, int i, const float *z);

#endif
