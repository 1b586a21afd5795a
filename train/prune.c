// train/prune.c — greedy revert of head blocks that do not pay for their plain-text KL. See prune.h.
#include "train/prune.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "core/forward.h"
#include "core/model.h"
#include "core/ops.h"
#include "base/util.h"
#include "quant/quant.h"

bn_prune_cfg bn_prune_cfg_default(void) {
    bn_prune_cfg c = {.cw_drop = 0, .mu = 0.01, .objective = BN_PRUNE_KL, .text_ctx = 128, .max_text = 0,
                      .n_threads = 0};
    return c;
}

// A changed block of the head: row (token) r, inputs [k0, k0 + blck).
typedef struct {
    int r, k0, slot; // slot: index of row r among the changed rows
    bool reverted;
} chg_block;

// One train pair at the state of the greedy: current logits of the rejected and chosen ids.
typedef struct {
    int rej, n_c;
    const int32_t *chosen;
    float zr;
    float *zc; // {n_c}
} pair_state;

// engine_input: h {H} rounded as the head's matmul sees it (quantized to vec_dot_type and back), in place.
static void engine_input(int vdt, float *h, int H, void *scratch) {
    const bn_type_traits *at = bn_type_traits_of(vdt);
    if (vdt == BN_F32 || !at || !at->to_float) return;
    if (bn_quantize_activations_cpu(vdt, h, scratch, H) == 0) return;
    at->to_float(scratch, h, H);
}

// hidden_states: hq {H, n} = the engine-rounded final hidden states of m over tokens cut into ctx-token windows
// (state reset per window). Returns 0 or -1 (err).
static int hidden_states(const bn_model *m, const int32_t *tokens, int64_t n, int ctx, int threads, int vdt,
                         float *hq, void *scratch, char *err, size_t errlen) {
    int H = m->cfg.n_embd;
    bn_state *s = bn_state_new(m, ctx, threads);
    int rc = 0;
    for (int64_t p = 0; p < n && rc == 0; p += ctx) {
        int w = (int)(n - p < ctx ? n - p : ctx);
        bn_state_reset(s);
        bn_forward_out o = {.all_logits = true, .hidden = hq + p * H};
        rc = bn_forward(m, s, tokens + p, w, &o, err, errlen);
    }
    bn_state_free(s);
    for (int64_t t = 0; t < n && rc == 0; t++) engine_input(vdt, hq + t * H, H, scratch);
    return rc;
}

// same_but_head: 0 if every tensor except output.weight is byte-identical in a and b, else -1 (err).
static int same_but_head(const gguf_file *a, const gguf_file *b, char *err, size_t errlen) {
    if (a->n_tensors != b->n_tensors) return bn_err(err, errlen, "the two models have different tensor counts");
    for (size_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *ta = &a->tensors[i], *tb = gguf_find_tensor(b, ta->name);
        if (!tb || tb->type != ta->type || tb->nbytes != ta->nbytes)
            return bn_err(err, errlen, "tensor %s differs in presence, type or size", ta->name);
        if (strcmp(ta->name, "output.weight") != 0 && memcmp(ta->data, tb->data, ta->nbytes) != 0)
            return bn_err(err, errlen, "tensor %s differs (only output.weight may)", ta->name);
    }
    return 0;
}

// pair_score: chosen_win and mean margin of the pairs (rows with no chosen skipped: they have none here).
static void pair_score(const pair_state *ps, int n, double *cw, double *margin) {
    double w = 0, mg = 0;
    for (int i = 0; i < n; i++) {
        int win = 0;
        double m = 0;
        for (int k = 0; k < ps[i].n_c; k++) {
            win += ps[i].zc[k] > ps[i].zr;
            m += (double)ps[i].zc[k] - ps[i].zr;
        }
        w += (double)win / ps[i].n_c;
        mg += m / ps[i].n_c;
    }
    *cw = n ? w / n : 0;
    *margin = n ? mg / n : 0;
}

// pair_shift: moves logit r of every pair i by sign·d[i] (d {n_pairs}).
static void pair_shift(pair_state *ps, int n, int r, const float *d, float sign) {
    for (int i = 0; i < n; i++) {
        if (ps[i].rej == r) ps[i].zr += sign * d[i];
        for (int k = 0; k < ps[i].n_c; k++)
            if (ps[i].chosen[k] == r) ps[i].zc[k] += sign * d[i];
    }
}

// text_kl: mean over t of KL(p_ref ‖ p) = lse(t) − lse0(t) − Σ_changed rows p_ref_r(t)·D_r(t).
// text_nll: mean over the positions with a target (y[t] >= 0) of lse(t) − z_y(t); z0y base logit of the target,
// ys slot of the target's row among the changed rows (−1: unchanged), D NULL for the base.
static double text_nll(const float *lse, const float *z0y, const int32_t *y, const int *ys, const float *D, int64_t T) {
    double s = 0;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) {
        if (y[t] < 0) continue;
        s += (double)lse[t] - z0y[t] - (D && ys[t] >= 0 ? D[(size_t)ys[t] * T + t] : 0.0f);
        n++;
    }
    return n ? s / n : 0;
}

static double text_kl(const float *lse, const float *lse0, const float *pref, const float *D, int n_rows, int64_t T) {
    double s = 0;
    for (int64_t t = 0; t < T; t++) {
        double kt = (double)lse[t] - lse0[t];
        for (int j = 0; j < n_rows; j++) kt -= (double)pref[j * T + t] * D[j * T + t];
        s += kt;
    }
    return T ? s / T : 0;
}

// The state the greedy scores candidates on (pointers into bn_prune_flips' arrays).
typedef struct {
    int64_t T, n_y;
    int NP;
    bool nll_obj;
    double mu, cw_min;
    const float *dtext, *dpair, *D, *z0r, *pref, *lse; // {T, NB}, {NP, NB}, {T, NR} x3, {T}
    const int32_t *y;                                  // {T}
    pair_state *ps;                                    // {NP} (shifted and restored)
} prune_state;

// revert_score: text gain − μ·margin loss of reverting block c (index b) on the current state, or −inf when the
// train-pair chosen_win would fall below cw_min.
static double revert_score(const prune_state *g, const chg_block *c, int b) {
    int64_t T = g->T;
    const float *d = g->dtext + (size_t)b * T, *Dr = g->D + (size_t)c->slot * T, *z0 = g->z0r + (size_t)c->slot * T;
    const float *pr = g->pref + (size_t)c->slot * T;
    // Σ_t of the change of z_r → z_r − d: Δlse = log1p(p_r·expm1(−d)); ΔKL = Δlse + p_ref_r·d,
    // ΔNLL = Δlse + d·[y_t = r]
    double dobj = 0;
    for (int64_t t = 0; t < T; t++) {
        double p = exp((double)z0[t] + Dr[t] - g->lse[t]), dl = log1p(p * expm1(-(double)d[t]));
        if (!g->nll_obj) dobj += dl + (double)pr[t] * d[t];
        else if (g->y[t] >= 0) dobj += dl + (g->y[t] == c->r ? (double)d[t] : 0.0);
    }
    double gain = -dobj / (g->nll_obj ? (double)g->n_y : (double)T), cw_now, mg_now, cw_b, mg_b;
    pair_score(g->ps, g->NP, &cw_now, &mg_now);
    pair_shift(g->ps, g->NP, c->r, g->dpair + (size_t)b * g->NP, -1.0f);
    pair_score(g->ps, g->NP, &cw_b, &mg_b);
    pair_shift(g->ps, g->NP, c->r, g->dpair + (size_t)b * g->NP, +1.0f);
    if (cw_b < g->cw_min - 1e-12) return -INFINITY;
    return gain - g->mu * (mg_now - mg_b);
}

int bn_prune_flips(const char *base_path, const char *model_path, const bn_train_rows *rows, const int32_t *text,
                   int64_t n_text, const bn_prune_cfg *cfg, const char *out_path, bn_prune_stats *st, char *err,
                   size_t errlen) {
    int rc = -1;
    bn_model *m0 = NULL, *m1 = NULL;
    float *W0 = NULL, *W1 = NULL, *hq_text = NULL, *hq_pair = NULL, *lse0 = NULL, *lse = NULL, *pref = NULL;
    float *z0r = NULL, *z0y = NULL, *D = NULL, *dtext = NULL, *dpair = NULL, *zrow = NULL, *dtmp = NULL, *zc_all = NULL;
    chg_block *cb = NULL;
    pair_state *ps = NULL;
    int *slot_row = NULL, *row_slot = NULL, *ys = NULL;
    int32_t *y = NULL;
    uint8_t *file = NULL;
    void *scratch = NULL;
    bn_prune_stats s = {0};

    if (!(m0 = bn_model_load(base_path, err, errlen)) || !(m1 = bn_model_load(model_path, err, errlen))) goto done;
    if (m0->cfg.tied_output || m1->cfg.tied_output) {
        bn_err(err, errlen, "the head is tied to token_embd: pruning needs an untied output.weight");
        goto done;
    }
    if (same_but_head(m0->gguf, m1->gguf, err, errlen)) goto done;
    const gguf_tensor *t0 = gguf_find_tensor(m0->gguf, "output.weight");
    const gguf_tensor *t1 = gguf_find_tensor(m1->gguf, "output.weight");
    const bn_type_traits *tr = bn_type_traits_of(t0->type);
    int H = m0->cfg.n_embd, V = m0->cfg.n_vocab;
    if (!tr || !tr->is_quantized || !tr->to_float || H % tr->blck) {
        bn_err(err, errlen, "output.weight type %s is not a block type this can prune", gguf_type_name(t0->file_type));
        goto done;
    }
    int blck = tr->blck, bs = tr->type_size, bpr = H / blck;
    s.n_blocks = V * bpr;
    W0 = xmalloc(sizeof(float) * H * V); // {H, V}
    W1 = xmalloc(sizeof(float) * H * V); // {H, V}
    tr->to_float(t0->data, W0, (int64_t)H * V);
    tr->to_float(t1->data, W1, (int64_t)H * V);

    // the changed blocks and their rows
    cb = xcalloc((size_t)s.n_blocks, sizeof *cb);
    row_slot = xmalloc(sizeof(int) * V);
    slot_row = xmalloc(sizeof(int) * V);
    for (int r = 0; r < V; r++) row_slot[r] = -1;
    for (int b = 0; b < s.n_blocks; b++) {
        const uint8_t *p0 = (const uint8_t *)t0->data + (size_t)b * bs;
        const uint8_t *p1 = (const uint8_t *)t1->data + (size_t)b * bs;
        if (memcmp(p0, p1, bs) == 0) continue;
        int r = b / bpr;
        if (row_slot[r] < 0) slot_row[row_slot[r] = s.n_rows_changed++] = r;
        cb[s.n_changed++] = (chg_block){.r = r, .k0 = (b % bpr) * blck, .slot = row_slot[r]};
    }
    int NB = s.n_changed, NR = s.n_rows_changed;

    // train pairs: hidden state at the last context position
    for (int i = 0; i < rows->n_rows; i++)
        if (rows->rows[i].heldout) {
            bn_err(err, errlen, "pair row %d is held out: prune with train pairs only", rows->rows[i].line);
            goto done;
        }
    int NP = 0, max_ctx = 1, n_zc = 0;
    for (int i = 0; i < rows->n_rows; i++)
        if (rows->rows[i].n_chosen > 0) {
            NP++;
            n_zc += rows->rows[i].n_chosen;
            if (rows->rows[i].n_ctx > max_ctx) max_ctx = rows->rows[i].n_ctx;
        }
    int vdt = tr->vec_dot_type, threads = cfg->n_threads > 0 ? cfg->n_threads : bn_n_threads_default();
    scratch = xmalloc((size_t)H * 4 + 1024);
    hq_pair = xmalloc(sizeof(float) * H * (NP ? NP : 1)); // {H, NP}
    ps = xcalloc((size_t)(NP ? NP : 1), sizeof *ps);
    zc_all = xmalloc(sizeof(float) * (n_zc ? n_zc : 1));
    {
        bn_state *sp = bn_state_new(m0, max_ctx, threads);
        int j = 0, off = 0;
        for (int i = 0; i < rows->n_rows; i++) {
            const bn_train_row *row = &rows->rows[i];
            if (row->n_chosen <= 0) continue;
            bn_state_reset(sp);
            bn_forward_out o = {.hidden = hq_pair + (size_t)j * H};
            if (bn_forward(m0, sp, row->ctx, row->n_ctx, &o, err, errlen)) { bn_state_free(sp); goto done; }
            float *h = hq_pair + (size_t)j * H;
            engine_input(vdt, h, H, scratch);
            ps[j] = (pair_state){.rej = row->rejected, .n_c = row->n_chosen, .chosen = row->chosen, .zc = zc_all + off};
            ps[j].zr = bn_dot_f32(W1 + (size_t)row->rejected * H, h, H);
            for (int k = 0; k < row->n_chosen; k++) ps[j].zc[k] = bn_dot_f32(W1 + (size_t)row->chosen[k] * H, h, H);
            off += row->n_chosen;
            j++;
        }
        bn_state_free(sp);
    }

    // plain text: hidden states, base log-partition, p_ref and base logits of the changed rows, current lse
    int ctx = cfg->text_ctx > 0 ? cfg->text_ctx : 128;
    int64_t T = cfg->max_text > 0 && cfg->max_text < n_text ? cfg->max_text : n_text;
    if (T <= 0) { bn_err(err, errlen, "no plain text to measure the KL on"); goto done; }
    s.n_text = T;
    hq_text = xmalloc(sizeof(float) * H * T); // {H, T}
    if (hidden_states(m0, text, T, ctx, threads, vdt, hq_text, scratch, err, errlen)) goto done;
    lse0 = xmalloc(sizeof(float) * T);
    lse = xmalloc(sizeof(float) * T);
    pref = xmalloc(sizeof(float) * ((size_t)NR * T + 1)); // {T, NR}
    z0r = xmalloc(sizeof(float) * ((size_t)NR * T + 1));  // {T, NR}
    D = xcalloc((size_t)NR * T + 1, sizeof(float));       // {T, NR}: z_r − z0_r now
    dtext = xmalloc(sizeof(float) * ((size_t)NB * T + 1)); // {T, NB}: (w_model − w_base)·h over the block
    dpair = xmalloc(sizeof(float) * ((size_t)NB * NP + 1)); // {NP, NB}
    zrow = xmalloc(sizeof(float) * V);
    z0y = xmalloc(sizeof(float) * T);
    y = xmalloc(sizeof(int32_t) * T); // next token within the window, or −1
    ys = xmalloc(sizeof(int) * T);
    for (int64_t t = 0; t < T; t++) {
        y[t] = (t + 1) % ctx != 0 && t + 1 < T ? text[t + 1] : -1;
        ys[t] = y[t] >= 0 ? row_slot[y[t]] : -1;
    }
    dtmp = xmalloc(sizeof(float) * blck);
    for (int64_t t = 0; t < T; t++) {
        const float *h = hq_text + t * H;
        for (int v = 0; v < V; v++) zrow[v] = bn_dot_f32(W0 + (size_t)v * H, h, H);
        lse0[t] = (float)bn_log_sum_exp(zrow, V);
        z0y[t] = y[t] >= 0 ? zrow[y[t]] : 0.0f;
        for (int j = 0; j < NR; j++) {
            z0r[(size_t)j * T + t] = zrow[slot_row[j]];
            pref[(size_t)j * T + t] = (float)exp((double)zrow[slot_row[j]] - lse0[t]);
        }
    }
    for (int b = 0; b < NB; b++) {
        const float *w0 = W0 + (size_t)cb[b].r * H + cb[b].k0, *w1 = W1 + (size_t)cb[b].r * H + cb[b].k0;
        float *dw = dtmp; // {blck}
        for (int k = 0; k < blck; k++) dw[k] = w1[k] - w0[k];
        for (int64_t t = 0; t < T; t++) {
            float d = bn_dot_f32(dw, hq_text + t * H + cb[b].k0, blck);
            dtext[(size_t)b * T + t] = d;
            D[(size_t)cb[b].slot * T + t] += d;
        }
        for (int i = 0; i < NP; i++)
            dpair[(size_t)b * NP + i] = bn_dot_f32(dw, hq_pair + (size_t)i * H + cb[b].k0, blck);
    }
    for (int64_t t = 0; t < T; t++) { // lse of the model: base lse shifted by the changed rows
        double se = 1.0;
        for (int j = 0; j < NR; j++) {
            double pj = pref[(size_t)j * T + t];
            se += pj * expm1((double)D[(size_t)j * T + t]);
        }
        lse[t] = (float)(lse0[t] + log(se));
    }
    s.kl_before = text_kl(lse, lse0, pref, D, NR, T);
    s.nll_base = text_nll(lse0, z0y, y, ys, NULL, T);
    s.nll_before = text_nll(lse, z0y, y, ys, D, T);
    int64_t n_y = 0;
    for (int64_t t = 0; t < T; t++) n_y += y[t] >= 0;
    bool nll_obj = cfg->objective == BN_PRUNE_NLL;
    if (nll_obj && n_y == 0) { bn_err(err, errlen, "the NLL objective needs windows of at least 2 tokens"); goto done; }
    pair_score(ps, NP, &s.cw_before, &s.margin_before);

    // lazy greedy: revert the block with the best gain − μ·margin loss while that is > 0 and cw stays ≥
    // cw_before − cw_drop. Only the leading candidate is re-scored on the current state; it is taken when its
    // fresh score is still ≥ every other (older) score, else it is put back with the fresh one (a block once over
    // the cw bound stays out).
    prune_state ctxs = {.T = T, .NP = NP, .n_y = n_y, .nll_obj = nll_obj, .mu = cfg->mu,
                        .cw_min = s.cw_before - cfg->cw_drop, .dtext = dtext, .dpair = dpair, .D = D, .z0r = z0r,
                        .pref = pref, .lse = lse, .y = y, .ps = ps};
    double *score = xmalloc(sizeof(double) * (NB ? NB : 1));
    for (int b = 0; b < NB; b++) score[b] = revert_score(&ctxs, &cb[b], b);
    for (;;) {
        int best = -1;
        for (int b = 0; b < NB; b++)
            if (!cb[b].reverted && score[b] > 0 && (best < 0 || score[b] > score[best])) best = b;
        if (best < 0) break;
        double fresh = revert_score(&ctxs, &cb[best], best), second = 0;
        for (int b = 0; b < NB; b++)
            if (b != best && !cb[b].reverted && score[b] > second) second = score[b];
        score[best] = fresh;
        if (fresh <= 0 || fresh < second) continue;
        chg_block *c = &cb[best];
        const float *d = dtext + (size_t)best * T;
        float *Dr = D + (size_t)c->slot * T;
        const float *z0 = z0r + (size_t)c->slot * T;
        for (int64_t t = 0; t < T; t++) {
            double p = exp((double)z0[t] + Dr[t] - lse[t]);
            lse[t] = (float)(lse[t] + log1p(p * expm1(-(double)d[t])));
            Dr[t] -= d[t];
        }
        pair_shift(ps, NP, c->r, dpair + (size_t)best * NP, -1.0f);
        c->reverted = true;
        s.n_reverted++;
    }
    free(score);
    s.kl_after = text_kl(lse, lse0, pref, D, NR, T);
    s.nll_after = text_nll(lse, z0y, y, ys, D, T);
    pair_score(ps, NP, &s.cw_after, &s.margin_after);
    {
        bool *row_left = xcalloc((size_t)V, 1);
        for (int b = 0; b < NB; b++)
            if (!cb[b].reverted && !row_left[cb[b].r]) { row_left[cb[b].r] = true; s.n_rows_after++; }
        free(row_left);
    }

    // the output: model_path's bytes with the reverted blocks copied from the base
    size_t n_file = 0;
    if (!(file = (uint8_t *)bn_read_file(model_path, &n_file, err, errlen))) goto done;
    uint8_t *head = file + m1->gguf->data_offset + t1->offset;
    for (int b = 0; b < NB; b++) {
        if (!cb[b].reverted) continue;
        size_t blk = (size_t)cb[b].r * bpr + (size_t)cb[b].k0 / blck;
        memcpy(head + blk * bs, (const uint8_t *)t0->data + blk * bs, bs);
    }
    if (bn_write_file_atomic(out_path, file, n_file, err, errlen)) goto done;
    rc = 0;
done:
    if (st) *st = s;
    free(W0); free(W1); free(hq_text); free(hq_pair); free(lse0); free(lse); free(pref); free(z0r); free(z0y);
    free(y); free(ys); free(D);
    free(dtext); free(dpair); free(zrow); free(dtmp); free(zc_all); free(cb); free(ps); free(slot_row); free(row_slot);
    free(file); free(scratch);
    bn_model_free(m0);
    bn_model_free(m1);
    return rc;
}
