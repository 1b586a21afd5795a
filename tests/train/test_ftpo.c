// tests/train/test_ftpo.c — FTPO loss (docs/antidoom.md §9): values and metrics on hand-made logits,
// and the analytic gradient w.r.t. the logits vs central finite differences for both reductions
// (taper-active region 0 < Δ < ε, Δ >= ε (zero preference gradient), Δ < 0, fallback rows,
// invalid chosen ids, tethers with the dead zone, the aggregate term).
// FD: h = 1e-3 on the fp32 logits (the loss is accumulated in double), logits kept >= 0.02 away
// from every kink; tolerance max |analytic − fd| / (max |fd| + 1e-3) <= 1e-5.
#include <string.h>
#include "tests/test.h"
#include "train/ftpo.h"

static double sp(double x) { return log1p(exp(x)); }

static void test_hand_made(void) {
    enum { V = 8 };
    // row 0: rejected 0 (z 3); chosen 1 (Δ 1), 2 (Δ −2), 3 (Δ 3); non-targets 4..7
    // row 1: rejected 5 (z 0); chosen 6 (Δ 2.5), 7 (Δ 2): both past the margin → fallback (weighted)
    float z0[V] = {3, 4, 1, 6, 0.5f, 0, 0, 0}, z1[V] = {0, 0, 0, 0, 0, 0, 2.5f, 2};
    float r0[V], r1[V];
    memcpy(r0, z0, sizeof r0);
    memcpy(r1, z1, sizeof r1);
    r0[4] = z0[4] - 1.0f;  // non-target difference 1 → L_nt = 1/9 (|N| = 4 + 5)
    r0[0] = z0[0] - 1.5f;  // target difference 1.5, τ_t 0.5 → (1.0)² / 7 (|T| = 4 + 3)
    int c0[] = {1, 2, 3}, c1[] = {6, 7, 5, 6}; // row 1: 5 (= rejected) and the duplicate 6 are ignored
    bn_ftpo_row rows[2] = {{z0, r0, 0, c0, 3}, {z1, r1, 5, c1, 4}};
    bn_ftpo_cfg cfg = bn_ftpo_cfg_antidoom();
    bn_ftpo_metrics m;
    double L = bn_ftpo_loss(&cfg, rows, 2, V, NULL, &m);
    double pref = ((0.5 * sp(1.0) + 1.0 * sp(4.0) + 0.0) / 3.0 + 0.0) / 2.0;
    CHECK_NEAR(m.pref, pref, 1e-12, "antidoom L_pref");
    CHECK_NEAR(m.nt, 1.0 / 9.0, 1e-7, "L_nt (mse_elem)");
    CHECK_NEAR(m.t, 1.0 / 7.0, 1e-7, "L_t (mse_tgt_tokenwise)");
    CHECK_NEAR(L, pref + 0.4 / 9.0 + 0.05 / 7.0, 1e-7, "antidoom total loss");
    CHECK_NEAR(m.chosen_win, (2.0 / 3.0 + 1.0) / 2.0, 1e-12, "chosen_win");
    CHECK_NEAR(m.margin_win, 3.0 / 5.0, 1e-12, "margin_win");
    CHECK_NEAR(m.mean_delta, 6.5 / 5.0, 1e-12, "mean_delta");
    CHECK_NEAR(m.median_delta, 2.0, 1e-12, "median_delta");
    CHECK_NEAR(m.active_weight, 1.5 / 5.0, 1e-12, "active_weight");
    CHECK(m.n_valid == 5, "n_valid %d (expected 5)", m.n_valid);
    CHECK(m.n_fallback == 0, "antidoom has no fallback (%d)", m.n_fallback);

    bn_ftpo_cfg wc = cfg;
    wc.reduction = BN_FTPO_WEIGHTED;
    bn_ftpo_loss(&wc, rows, 2, V, NULL, &m);
    double wpref = (0.5 * sp(1.0) + 1.0 * sp(4.0) + sp(-0.5) + sp(0.0)) / (1.5 + 2.0);
    CHECK_NEAR(m.pref, wpref, 1e-12, "weighted L_pref with the all-zero-row fallback");
    CHECK(m.n_fallback == 1, "fallback rows %d (expected 1)", m.n_fallback);

    // aggregate term: row 0 target mean difference (1.5 + 0 + 0 + 0)/4 = 0.375; τ_agg 0.125 → 0.25²
    bn_ftpo_cfg ac = wc;
    ac.lambda_agg = 0.1f;
    ac.tau_agg = 0.125f;
    bn_ftpo_loss(&ac, rows, 2, V, NULL, &m);
    CHECK_NEAR(m.agg, 0.25 * 0.25 / 2.0, 1e-9, "L_agg");

    // a row whose chosen are all past the margin has zero preference gradient (antidoom; tethers off)
    float g0[V], g1[V];
    float *dz[2] = {g0, g1};
    bn_ftpo_cfg nc = cfg;
    nc.lambda_nt = nc.lambda_t = 0;
    bn_ftpo_loss(&nc, rows, 2, V, dz, NULL);
    double mx = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, fabs(g1[j]));
    CHECK(mx == 0.0, "Δ >= ε row has gradient %g (expected exactly 0)", mx);
    CHECK(g0[3] == 0.0f, "chosen with Δ = 3 >= ε has gradient %g (expected 0)", g0[3]);
    CHECK(g0[1] < 0 && g0[2] < 0 && g0[0] > 0, "descent raises losing chosen and lowers the rejected (%g %g %g)",
          g0[1], g0[2], g0[0]);
}

// kink-free test logits: explicit Δ values per region; zref offsets away from τ_t.
enum { V = 40, B = 4 };
static float Z[B][V], ZR[B][V];
static int CH[B][6], NCH[B], REJ[B];

static void setup_rows(void) {
    uint64_t s = 12345;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < V; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            double u = (double)(s >> 11) / 9007199254740992.0;
            Z[b][j] = (float)(4.0 * u - 2.0);
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            double u2 = (double)(s >> 11) / 9007199254740992.0;
            double off = 2.0 * u2 - 1.0; // |off| in [0,1), keep away from τ_t = 0.5 (and 1.0)
            if (fabs(fabs(off) - 0.5) < 0.05) off += 0.1;
            if (fabs(fabs(off) - 1.0) < 0.05) off *= 0.8;
            ZR[b][j] = Z[b][j] - (float)off;
        }
    // row 0: Δ −1.3 (w 1), 0.7 and 1.6 (taper active), 2.8 (past margin)
    REJ[0] = 3; Z[0][3] = 1.0f;
    int c0[] = {10, 11, 12, 13}; float d0[] = {-1.3f, 0.7f, 1.6f, 2.8f};
    for (int i = 0; i < 4; i++) { CH[0][i] = c0[i]; Z[0][c0[i]] = 1.0f + d0[i]; }
    NCH[0] = 4;
    // row 1: every chosen past the margin (fallback row for the weighted reduction)
    REJ[1] = 7; Z[1][7] = -0.5f;
    CH[1][0] = 20; Z[1][20] = -0.5f + 2.3f; CH[1][1] = 21; Z[1][21] = -0.5f + 3.1f; NCH[1] = 2;
    // row 2: Δ 0.4 and −0.2, plus invalid ids (duplicate, the rejected id, out of range)
    REJ[2] = 0; Z[2][0] = 0.3f;
    CH[2][0] = 5; Z[2][5] = 0.7f; CH[2][1] = 6; Z[2][6] = 0.1f; CH[2][2] = 5; CH[2][3] = 0; CH[2][4] = V + 3; NCH[2] = 5;
    // row 3: one chosen, Δ 1.1
    REJ[3] = 39; Z[3][39] = 0.0f; CH[3][0] = 1; Z[3][1] = 1.1f; NCH[3] = 1;
}

static double eval_loss(const bn_ftpo_cfg *cfg, float *const *dz) {
    bn_ftpo_row rows[B];
    for (int b = 0; b < B; b++) rows[b] = (bn_ftpo_row){Z[b], ZR[b], REJ[b], CH[b], NCH[b]};
    return bn_ftpo_loss(cfg, rows, B, V, dz, NULL);
}

static void fd_ftpo(const char *what, const bn_ftpo_cfg *cfg) {
    static float G[B][V];
    float *dz[B] = {G[0], G[1], G[2], G[3]};
    eval_loss(cfg, dz);
    double max_fd = 0, max_err = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < V; j++) {
            float save = Z[b][j];
            float zp = save + 1e-3f, zm = save - 1e-3f;
            Z[b][j] = zp;
            double lp = eval_loss(cfg, NULL);
            Z[b][j] = zm;
            double lm = eval_loss(cfg, NULL);
            Z[b][j] = save;
            double fd = (lp - lm) / ((double)zp - (double)zm);
            max_fd = fmax(max_fd, fabs(fd));
            max_err = fmax(max_err, fabs(fd - G[b][j]));
        }
    double rel = max_err / (max_fd + 1e-3);
    CHECK(rel <= 1e-5, "%s: FTPO gradient relative error %.3g > 1e-5", what, rel);
    printf("  %-40s max|fd|=%-9.4g rel err=%.3g\n", what, max_fd, rel);
}

int main(void) {
    test_hand_made();
    setup_rows();
    bn_ftpo_cfg a = bn_ftpo_cfg_antidoom();
    fd_ftpo("antidoom reduction (+tethers)", &a);
    bn_ftpo_cfg ap = a;
    ap.lambda_nt = ap.lambda_t = 0;
    fd_ftpo("antidoom reduction, preference only", &ap);
    bn_ftpo_cfg w = a;
    w.reduction = BN_FTPO_WEIGHTED;
    fd_ftpo("weighted mean + fallback (+tethers)", &w);
    bn_ftpo_cfg wp = w;
    wp.lambda_nt = wp.lambda_t = 0;
    fd_ftpo("weighted mean + fallback, preference only", &wp);
    bn_ftpo_cfg s = bn_ftpo_cfg_antislop();
    s.tau_agg = 0.05f; // make the aggregate term active on some rows
    fd_ftpo("auto-antislop preset + aggregate term", &s);
    {
        bn_ftpo_row rows[B];
        bn_ftpo_metrics m;
        for (int b = 0; b < B; b++) rows[b] = (bn_ftpo_row){Z[b], ZR[b], REJ[b], CH[b], NCH[b]};
        bn_ftpo_loss(&s, rows, B, V, NULL, &m);
        CHECK(m.agg > 0 && m.n_fallback == 1, "aggregate term active (%g) and one fallback row (%d)", m.agg, m.n_fallback);
    }

    // reference cache
    bn_ftpo_refcache *rc = bn_ftpo_refcache_new(3, V);
    CHECK(bn_ftpo_refcache_get(rc, 1) == NULL, "empty cache returns NULL");
    bn_ftpo_refcache_put(rc, 1, Z[2]);
    const float *got = bn_ftpo_refcache_get(rc, 1);
    CHECK(got && memcmp(got, Z[2], sizeof Z[2]) == 0, "cached logits round trip");
    CHECK(bn_ftpo_refcache_get(rc, 0) == NULL && bn_ftpo_refcache_get(rc, 5) == NULL, "other rows absent");
    bn_ftpo_refcache_free(rc);
    return test_done("train_ftpo");
}
