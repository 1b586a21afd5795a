// tests/spec/test_dspark_ref.c — the drafter math against a float64 reference on a tiny random
// drafter (E 16, 2 layers, heads 2/1, hd 8, n_rot 4 of 8, V 16, rank 4, block 4, taps [1, 3],
// log-SNR feature width 8; docs/dspark.md §10 items 2–4):
//   encoder g = RMSNorm(fc·f; hidden_norm)                          tol 1e-5 abs (|g| ~ 1)
//   block pass incl. context K/V injection + non-causal attention   tol 1e-4 abs on h, base logits
//     (the reference without context rows, and a causal reference, both differ by > 1e-3: the
//     comparison would catch a missing injection or a causal mask)
//   Markov chain: prev chaining vs the reference chain, confidence c_i (tol 1e-5), ties → lowest
//     id, the mask token never drafted and never used as prev, p_min truncation.
//   batched K/V injection and drafting (bn_drafter_process_multi, bn_drafter_draft_multi; 24 states in two chunks /
//   block passes) == each state processing and drafting alone.
#include "tests/test.h"
#include "tests/spec/fixture.h"
#include "gguf/gguf.h"
#include <math.h>

enum { E = 16, NL = 2, NH = 2, NKV = 1, HD = 8, NROT = 4, FF = 32, V = 16, R = 4, B = 4, C = 2, NCTX = 6, FEAT = 8 };
#define MASK 15
#define EPS 1e-6
#define BASE 10000.0

static const gguf_file *G;

// W: tensor `name` (F32) as doubles, n = ne0*ne1 values (caller frees).
static double *W(const char *name) {
    const gguf_tensor *t = gguf_find_tensor(G, name);
    if (!t || t->type != 0) bn_die("reference: tensor %s missing or not F32", name);
    int64_t n = gguf_tensor_nelements(t);
    double *out = xmalloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) out[i] = ((const float *)t->data)[i];
    return out;
}
static double *WL(int il, const char *sfx) {
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%d.%s", il, sfx);
    return W(nm);
}

// y[o] = Σ_i w[o*n_in + i] x[i]
static void matvec(double *y, const double *w, const double *x, int n_in, int n_out) {
    for (int o = 0; o < n_out; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++) s += w[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}
static void rmsnorm(double *y, const double *x, const double *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + EPS);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * (w ? w[i] : 1.0);
}
static void rope(double *x, int pos) { // NEOX: pairs (i, i + NROT/2), dims >= NROT untouched
    for (int i = 0; i < NROT / 2; i++) {
        double th = pos * pow(BASE, -2.0 * i / NROT), c = cos(th), s = sin(th);
        double a = x[i], b = x[i + NROT / 2];
        x[i] = a * c - b * s;
        x[i + NROT / 2] = a * s + b * c;
    }
}
static double silu(double x) { return x / (1 + exp(-x)); }

// ref_block: h [B][E] and base [B][V] for [anchor, MASK...] at position n_past = NCTX.
// with_ctx: include the injected context rows; causal: mask later block rows.
static void ref_block(const float *taps, int32_t anchor, bool with_ctx, bool causal, double *h, double *base) {
    double *fc = W("dspark.fc.weight"), *hn = W("dspark.hidden_norm.weight");
    double g[NCTX][E];
    for (int p = 0; p < NCTX; p++) {
        double f[C * E];
        for (int i = 0; i < C * E; i++) f[i] = taps[p * C * E + i];
        double tmp[E];
        matvec(tmp, fc, f, C * E, E);
        rmsnorm(g[p], tmp, hn, E);
    }
    // embeddings + log-SNR (sin half first)
    double *emb = W("token_embd.weight"), *f1 = W("dspark.log_snr_fc1.weight"), *b1 = W("dspark.log_snr_fc1.bias"),
           *f2 = W("dspark.log_snr_fc2.weight"), *b2 = W("dspark.log_snr_fc2.bias");
    double x[B][E];
    for (int i = 0; i < B; i++) {
        int tok = i == 0 ? anchor : MASK;
        double t = i == 0 ? 1000.0 : 0.0, feat[FEAT], a[E], e2[E];
        for (int k = 0; k < FEAT / 2; k++) {
            double fr = exp(-log(10000.0) * k / (FEAT / 2));
            feat[k] = sin(t * fr);
            feat[FEAT / 2 + k] = cos(t * fr);
        }
        matvec(a, f1, feat, FEAT, E);
        for (int k = 0; k < E; k++) a[k] = silu(a[k] + b1[k]);
        matvec(e2, f2, a, E, E);
        for (int k = 0; k < E; k++) x[i][k] = emb[(size_t)tok * E + k] + e2[k] + b2[k];
    }
    for (int il = 0; il < NL; il++) {
        double *an = WL(il, "attn_norm.weight"), *wq = WL(il, "attn_q.weight"), *wk = WL(il, "attn_k.weight"),
               *wv = WL(il, "attn_v.weight"), *wo = WL(il, "attn_output.weight"), *qn = WL(il, "attn_q_norm.weight"),
               *kn = WL(il, "attn_k_norm.weight"), *fn = WL(il, "ffn_norm.weight"), *wg = WL(il, "ffn_gate.weight"),
               *wu = WL(il, "ffn_up.weight"), *wd = WL(il, "ffn_down.weight");
        double K[NCTX + B][NKV * HD], Vv[NCTX + B][NKV * HD], Q[B][NH * HD];
        for (int p = 0; p < NCTX; p++) { // context rows: no attn_norm, no Q
            matvec(K[p], wk, g[p], E, NKV * HD);
            matvec(Vv[p], wv, g[p], E, NKV * HD);
            for (int hh = 0; hh < NKV; hh++) {
                rmsnorm(K[p] + hh * HD, K[p] + hh * HD, kn, HD);
                rope(K[p] + hh * HD, p);
            }
        }
        for (int i = 0; i < B; i++) {
            double a[E];
            rmsnorm(a, x[i], an, E);
            matvec(Q[i], wq, a, E, NH * HD);
            matvec(K[NCTX + i], wk, a, E, NKV * HD);
            matvec(Vv[NCTX + i], wv, a, E, NKV * HD);
            for (int hh = 0; hh < NH; hh++) {
                rmsnorm(Q[i] + hh * HD, Q[i] + hh * HD, qn, HD);
                rope(Q[i] + hh * HD, NCTX + i);
            }
            for (int hh = 0; hh < NKV; hh++) {
                rmsnorm(K[NCTX + i] + hh * HD, K[NCTX + i] + hh * HD, kn, HD);
                rope(K[NCTX + i] + hh * HD, NCTX + i);
            }
        }
        double att[B][NH * HD];
        for (int i = 0; i < B; i++)
            for (int hh = 0; hh < NH; hh++) {
                int kvh = hh / (NH / NKV);
                double sc[NCTX + B], mx = -1e300, sum = 0;
                int lo = with_ctx ? 0 : NCTX, hi = causal ? NCTX + i + 1 : NCTX + B;
                for (int t = lo; t < hi; t++) {
                    double s = 0;
                    for (int k = 0; k < HD; k++) s += Q[i][hh * HD + k] * K[t][kvh * HD + k];
                    sc[t] = s / sqrt((double)HD);
                    if (sc[t] > mx) mx = sc[t];
                }
                for (int t = lo; t < hi; t++) sum += (sc[t] = exp(sc[t] - mx));
                for (int k = 0; k < HD; k++) {
                    double o = 0;
                    for (int t = lo; t < hi; t++) o += sc[t] / sum * Vv[t][kvh * HD + k];
                    att[i][hh * HD + k] = o;
                }
            }
        for (int i = 0; i < B; i++) {
            double o[E], n[E], gt[FF], up[FF], dn[E];
            matvec(o, wo, att[i], NH * HD, E);
            for (int k = 0; k < E; k++) x[i][k] += o[k];
            rmsnorm(n, x[i], fn, E);
            matvec(gt, wg, n, E, FF);
            matvec(up, wu, n, E, FF);
            for (int k = 0; k < FF; k++) gt[k] = silu(gt[k]) * up[k];
            matvec(dn, wd, gt, FF, E);
            for (int k = 0; k < E; k++) x[i][k] += dn[k];
        }
        double *ws[] = {an, wq, wk, wv, wo, qn, kn, fn, wg, wu, wd};
        for (int k = 0; k < 11; k++) free(ws[k]);
    }
    double *on = W("output_norm.weight"), *out = W("output.weight");
    for (int i = 0; i < B; i++) {
        rmsnorm(h + i * E, x[i], on, E);
        matvec(base + i * V, out, h + i * E, E, V);
    }
    double *ws[] = {fc, hn, emb, f1, b1, f2, b2, on, out};
    for (int k = 0; k < 9; k++) free(ws[k]);
}

// ref_markov: reference chain from float base/h; drafts, conf, and the top-2 gap per row.
static void ref_markov(const float *base, const float *h, int32_t id_last, int32_t *drafts, double *conf, double *gap) {
    double *w1 = W("dspark.markov_head_a.weight"), *w2 = W("dspark.markov_head_b.weight"),
           *cw = W("dspark.confidence_head.weight"), *cb = W("dspark.confidence_head.bias");
    int32_t prev = id_last;
    for (int i = 0; i < B; i++) {
        double l[V], z = cb[0];
        for (int v = 0; v < V; v++) {
            double b = 0;
            for (int r = 0; r < R; r++) b += w1[(size_t)prev * R + r] * w2[(size_t)v * R + r];
            l[v] = base[i * V + v] + b;
        }
        for (int k = 0; k < E; k++) z += cw[k] * h[i * E + k];
        for (int r = 0; r < R; r++) z += cw[E + r] * w1[(size_t)prev * R + r];
        conf[i] = 1 / (1 + exp(-z));
        int best = -1, second = -1;
        for (int v = 0; v < V; v++) {
            if (v == MASK) continue;
            if (best < 0 || l[v] > l[best]) second = best, best = v;
            else if (second < 0 || l[v] > l[second]) second = v;
        }
        gap[i] = l[best] - l[second];
        drafts[i] = prev = best;
    }
    free(w1);
    free(w2);
    free(cw);
    free(cb);
}

// multi_check: N_SEQ states get their context rows (1..NCTX each, 84 in all: a 64-row chunk ends inside a sequence)
// from one bn_drafter_process_multi, N_SEQ more from bn_drafter_process one by one; bn_drafter_draft_multi over the
// first (anchors, n_max 0..B, a MASK anchor; 24 sequences of <= 4 rows: two block passes of the 64 scratch rows)
// drafts what bn_drafter_draft drafts for each of the others alone, leaves every cache as it was, and both reject two
// sequences on one state.
static void multi_check(const bn_drafter *d, const float *taps) {
    enum { N_SEQ = 24 };
    char err[256];
    bn_dstate *ss[N_SEQ], *sa[N_SEQ]; // batched, alone
    bn_process_seq pq[N_SEQ];
    bn_draft_seq q[N_SEQ];
    int32_t multi[N_SEQ][B], alone[N_SEQ][B];
    int n_alone[N_SEQ], rows = 0;
    for (int i = 0; i < N_SEQ; i++) {
        ss[i] = bn_dstate_new(d, 64, 1);
        sa[i] = bn_dstate_new(d, 64, 1);
        const int n_ctx = 1 + i % NCTX;
        pq[i] = (bn_process_seq){.s = ss[i], .taps = taps + (size_t)(NCTX - n_ctx) * C * E, .n = n_ctx};
        CHECK(bn_drafter_process(d, sa[i], pq[i].taps, n_ctx, 0, err, sizeof err) == 0, "process: %s", err);
        const int32_t anchor = i == 7 ? MASK : (int32_t)((3 * i + 1) % MASK);
        q[i] = (bn_draft_seq){.s = ss[i], .id_last = anchor, .n_past = n_ctx, .n_max = i % 9 == 4 ? 0 : i % 3 == 0 ? 2 : B,
                              .drafts = multi[i]};
        rows += q[i].n_max;
    }
    CHECK(rows > 64, "the sequences must need two block passes (%d rows)", rows);
    CHECK(bn_drafter_process_multi(d, pq, N_SEQ, err, sizeof err) == 0, "process_multi: %s", err);
    for (int i = 0; i < N_SEQ; i++)
        CHECK(bn_dstate_n_cache(ss[i]) == pq[i].n, "seq %d: %d context rows after process_multi", i, bn_dstate_n_cache(ss[i]));
    CHECK(bn_drafter_draft_multi(d, q, N_SEQ, 0.0f, err, sizeof err) == 0, "draft_multi: %s", err);
    int same = 0;
    for (int i = 0; i < N_SEQ; i++) {
        n_alone[i] = bn_drafter_draft(d, sa[i], q[i].id_last, q[i].n_past, q[i].n_max, 0.0f, alone[i], err, sizeof err);
        CHECK(bn_dstate_n_cache(ss[i]) == q[i].n_past, "seq %d: block rows stayed in the cache", i);
        const bool eq = n_alone[i] == q[i].n_drafts && memcmp(alone[i], multi[i], sizeof(int32_t) * n_alone[i]) == 0;
        CHECK(eq, "seq %d: draft_multi %d drafts, alone %d (first %d vs %d)", i, q[i].n_drafts, n_alone[i], multi[i][0],
              alone[i][0]);
        same += eq;
    }
    CHECK(q[7].n_drafts == 0 && q[4].n_drafts == 0, "a MASK anchor or n_max 0 drafts nothing");
    printf("draft_multi: %d of %d sequences (%d rows, two block passes) draft what they draft alone\n", same, N_SEQ,
           rows);
    // the multi pass wrote block rows into every cache; a second one drafts the same again
    int32_t again[N_SEQ][B];
    for (int i = 0; i < N_SEQ; i++) q[i].drafts = again[i];
    CHECK(bn_drafter_draft_multi(d, q, N_SEQ, 0.0f, err, sizeof err) == 0, "draft_multi: %s", err);
    for (int i = 0; i < N_SEQ; i++)
        CHECK(memcmp(again[i], alone[i], sizeof(int32_t) * n_alone[i]) == 0, "seq %d: second draft_multi differs", i);
    q[1].s = q[0].s;
    CHECK(bn_drafter_draft_multi(d, q, 2, 0.0f, err, sizeof err) != 0 && strstr(err, "share"),
          "two sequences on one state must fail (%s)", err);
    pq[0].pos0 = pq[1].pos0 = NCTX, pq[0].s = pq[1].s = sa[5]; // sa[5] holds NCTX rows
    CHECK(bn_drafter_process_multi(d, pq, 2, err, sizeof err) != 0 && strstr(err, "share"),
          "two sequences on one state must fail (%s)", err);
    for (int i = 0; i < N_SEQ; i++) bn_dstate_free(ss[i]), bn_dstate_free(sa[i]);
}

int main(void) {
    char path[512], err[512];
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    p.n_embd = E, p.n_layer = NL, p.n_head = NH, p.n_head_kv = NKV, p.head_dim = HD, p.n_rot = NROT, p.n_ff = FF;
    p.n_vocab = V, p.markov_rank = R, p.block_size = B, p.n_taps = C, p.target_layers[0] = 1, p.target_layers[1] = 3;
    p.snr_feat = FEAT, p.rope_base = (float)BASE, p.norm_eps = (float)EPS, p.logit_scale = 2.0f;
    fx_drafter(&p, fx_path(path, sizeof path, "ref.gguf"));
    bn_drafter *d = bn_drafter_load(path, NULL, err, sizeof err);
    if (!d) bn_die("%s", err);
    G = d->gguf;
    CHECK(d->cfg.n_rot == NROT && d->cfg.mask_token_id == MASK && d->cfg.snr_feat == FEAT, "config");

    // random taps for NCTX context positions
    float taps[NCTX * C * E];
    uint64_t st = 12345;
    for (int i = 0; i < NCTX * C * E; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        taps[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    }
    bn_dstate *s = bn_dstate_new(d, 64, 1);
    // 1. encoder
    float g[NCTX * E];
    bn_drafter_encode(d, s, taps, NCTX, g);
    double *fc = W("dspark.fc.weight"), *hn = W("dspark.hidden_norm.weight");
    double max_g = 0;
    for (int p0 = 0; p0 < NCTX; p0++) {
        double f[C * E], tmp[E], gr[E];
        for (int i = 0; i < C * E; i++) f[i] = taps[p0 * C * E + i];
        matvec(tmp, fc, f, C * E, E);
        rmsnorm(gr, tmp, hn, E);
        for (int k = 0; k < E; k++) max_g = fmax(max_g, fabs(gr[k] - g[p0 * E + k]));
    }
    free(fc);
    free(hn);
    printf("encoder max |g - ref| = %.3g\n", max_g);
    CHECK(max_g <= 1e-5, "encoder error %g > 1e-5", max_g);

    // 2. context injection in two chunks (4 + 2 rows) + block pass
    CHECK(bn_drafter_process(d, s, taps, 4, 0, err, sizeof err) == 0, "process: %s", err);
    CHECK(bn_drafter_process(d, s, taps + 4 * C * E, 2, 4, err, sizeof err) == 0, "process: %s", err);
    CHECK(bn_drafter_process(d, s, taps, 1, 3, err, sizeof err) != 0, "process at the wrong position must fail");
    const int32_t anchor = 6;
    float h[B * E], base[B * V];
    CHECK(bn_drafter_block(d, s, anchor, NCTX, B, h, base, err, sizeof err) == 0, "block: %s", err);
    double hr[B * E], br[B * V], hc[B * E], bc[B * V], hx[B * E], bx[B * V];
    ref_block(taps, anchor, true, false, hr, br);
    ref_block(taps, anchor, true, true, hc, bc);  // causal variant
    ref_block(taps, anchor, false, false, hx, bx); // without context rows
    double e_h = 0, e_b = 0, d_causal = 0, d_noctx = 0;
    for (int i = 0; i < B * E; i++) e_h = fmax(e_h, fabs(h[i] - hr[i]));
    for (int i = 0; i < B * V; i++) {
        e_b = fmax(e_b, fabs(base[i] - br[i]));
        d_causal = fmax(d_causal, fabs(bc[i] - br[i]));
        d_noctx = fmax(d_noctx, fabs(bx[i] - br[i]));
    }
    printf("block: max |h - ref| = %.3g, max |logit - ref| = %.3g; ref causal differs by %.3g, ref w/o context by %.3g\n",
           e_h, e_b, d_causal, d_noctx);
    CHECK(e_h <= 1e-4 && e_b <= 1e-4, "block pass error h %g logits %g > 1e-4", e_h, e_b);
    CHECK(d_causal > 1e-3 && d_noctx > 1e-3, "the reference must be sensitive to masking (%g) and injection (%g)",
          d_causal, d_noctx);
    CHECK(bn_dstate_n_cache(s) == NCTX, "block rows dropped from the cache");
    // a second block pass gives the same result (temporary rows really are temporary)
    float base2[B * V];
    bn_drafter_block(d, s, anchor, NCTX, B, NULL, base2, err, sizeof err);
    CHECK(memcmp(base, base2, sizeof base) == 0, "block pass not repeatable");

    // 3. Markov chain + confidence vs the reference chain
    int32_t dr[B], drr[B];
    float conf[B];
    double confr[B], gap[B];
    int n = bn_drafter_markov(d, s, base, h, B, anchor, 0.0f, dr, conf);
    ref_markov(base, h, anchor, drr, confr, gap);
    CHECK(n == B, "markov count %d", n);
    for (int i = 0; i < B; i++) {
        if (gap[i] > 1e-4) CHECK(dr[i] == drr[i], "draft %d: %d vs reference %d", i, dr[i], drr[i]);
        else break; // a near-tie: the rest of the chain may legitimately differ
        CHECK_NEAR(conf[i], confr[i], 1e-5, "confidence");
        CHECK(dr[i] != MASK, "mask drafted");
    }
    printf("drafts %d %d %d %d (ref %d %d %d %d), conf %.4f %.4f %.4f %.4f\n", dr[0], dr[1], dr[2], dr[3], drr[0], drr[1],
           drr[2], drr[3], conf[0], conf[1], conf[2], conf[3]);
    // chaining: with zero base logits every draft is argmax of the bias of the previous draft
    float zero[B * V];
    memset(zero, 0, sizeof zero);
    bn_drafter_markov(d, s, zero, h, B, anchor, 0.0f, dr, NULL);
    ref_markov(zero, h, anchor, drr, confr, gap);
    for (int i = 0; i < B && gap[i] > 1e-4; i++) CHECK(dr[i] == drr[i], "chain draft %d: %d vs %d", i, dr[i], drr[i]);
    // the mask token is never drafted nor used as prev
    float mb[B * V];
    memcpy(mb, base, sizeof mb);
    for (int i = 0; i < B; i++) mb[i * V + MASK] = 1e6f;
    n = bn_drafter_markov(d, s, mb, h, B, anchor, 0.0f, dr, NULL);
    CHECK(n == B, "mask-heavy logits: %d drafts", n);
    for (int i = 0; i < n; i++) CHECK(dr[i] != MASK, "mask token drafted at %d", i);
    CHECK(bn_drafter_markov(d, s, base, h, B, MASK, 0.0f, dr, NULL) == 0, "prev = MASK must draft nothing");
    CHECK(bn_drafter_draft(d, s, MASK, NCTX, B, 0.0f, dr, err, sizeof err) == 0, "anchor MASK drafts nothing");
    // p_min: stops at the first c_i < p_min
    float thr = conf[2] + 1e-6f;
    int expect = 0;
    while (expect < B && conf[expect] >= thr) expect++;
    n = bn_drafter_markov(d, s, base, h, B, anchor, thr, dr, NULL);
    CHECK(n == expect, "p_min %.6f: %d drafts, expected %d", thr, n, expect);
    CHECK(bn_drafter_markov(d, s, base, h, B, anchor, 1.01f, dr, NULL) == 0, "p_min > 1 drafts nothing");
    bn_dstate_free(s);
    multi_check(d, taps);
    bn_drafter_free(d);

    // 4. tie rule: a drafter with a zero Markov head (W2 = 0): ties → lowest id, MASK skipped
    p.markov_scale = 0.0f;
    fx_drafter(&p, path);
    d = bn_drafter_load(path, NULL, err, sizeof err);
    if (!d) bn_die("%s", err);
    s = bn_dstate_new(d, 64, 1);
    float tb[B * V], th[B * E];
    memset(th, 0, sizeof th);
    for (int i = 0; i < B * V; i++) tb[i] = -1.0f;
    const int ties[B][2] = {{5, 3}, {9, 0}, {12, 7}, {14, 13}};
    for (int i = 0; i < B; i++) {
        tb[i * V + ties[i][0]] = tb[i * V + ties[i][1]] = 2.5f;
        tb[i * V + MASK] = 9.0f; // larger, but the mask is skipped
    }
    n = bn_drafter_markov(d, s, tb, th, B, anchor, 0.0f, dr, NULL);
    CHECK(n == B, "tie rows");
    for (int i = 0; i < n; i++) {
        int lo = ties[i][0] < ties[i][1] ? ties[i][0] : ties[i][1];
        CHECK(dr[i] == lo, "tie row %d: %d, expected the lower id %d", i, dr[i], lo);
    }
    bn_dstate_free(s);
    bn_drafter_free(d);
    unlink(path);
    return test_done("dspark_ref");
}
