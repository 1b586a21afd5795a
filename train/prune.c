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

// Everything bn_prune_flips builds: the two models' heads, the changed blocks, the train pairs and the plain text at
// the greedy's state, and the figures it reports.
typedef struct {
    const bn_prune_cfg *cfg;
    bn_model *m0, *m1;                 // base, model
    const gguf_tensor *t0, *t1;        // their output.weight
    const bn_type_traits *tr;          // its block type
    int H, V, blck, bs, bpr;           // hidden size, vocabulary, block elements, block bytes, blocks per row
    int vdt, threads;                  // the head's vec_dot_type, threads for the forward passes
    float *W0, *W1;                    // {H, V} the two heads dequantized
    chg_block *cb;                     // [NB] the changed blocks
    int *row_slot, *slot_row;          // [V] slot of a row (-1: unchanged), [NR] row of a slot
    int NB, NR;                        // changed blocks, changed rows
    int NP;                            // train pairs (rows with chosen ids)
    float *hq_pair;                    // {H, NP} engine-rounded hidden state at each pair's last context position
    pair_state *ps;                    // [NP]
    float *zc_all;                     // the pairs' chosen logits (ps[i].zc point into it)
    void *scratch;                     // one row of activations quantized to vdt
    int64_t T, n_y;                    // text positions, those with a next-token target
    int ctx;                           // text window
    float *hq_text;                    // {H, T}
    float *lse0, *lse, *z0y;           // {T} base and current log-partition, base logit of the target
    int32_t *y;                        // {T} next token within the window, or −1
    int *ys;                           // {T} slot of the target's row (−1: unchanged)
    float *pref, *z0r, *D;             // {T, NR} base probabilities and logits of the changed rows, z_r − z0_r now
    float *dtext, *dpair;              // {T, NB}, {NP, NB}: (w_model − w_base)·h over each block
    bool nll_obj;
    bn_prune_stats s;
} prune_run;

// prune_free: frees what run holds.
static void prune_free(prune_run *r) {
    free(r->W0); free(r->W1); free(r->hq_text); free(r->hq_pair); free(r->lse0); free(r->lse); free(r->pref);
    free(r->z0r); free(r->z0y); free(r->y); free(r->ys); free(r->D); free(r->dtext); free(r->dpair); free(r->zc_all);
    free(r->cb); free(r->ps); free(r->slot_row); free(r->row_slot); free(r->scratch);
    bn_model_free(r->m0);
    bn_model_free(r->m1);
}

// prune_load: both models, the same but for an untied head of a block type; 0 or -1 (err).
static int prune_load(prune_run *r, const char *base_path, const char *model_path, char *err, size_t errlen) {
    if (!(r->m0 = bn_model_load(base_path, err, errlen)) || !(r->m1 = bn_model_load(model_path, err, errlen)))
        return -1;
    if (r->m0->cfg.tied_output || r->m1->cfg.tied_output)
        return bn_err(err, errlen, "the head is tied to token_embd: pruning needs an untied output.weight");
    if (same_but_head(r->m0->gguf, r->m1->gguf, err, errlen)) return -1;
    r->t0 = gguf_find_tensor(r->m0->gguf, "output.weight");
    r->t1 = gguf_find_tensor(r->m1->gguf, "output.weight");
    r->tr = bn_type_traits_of(r->t0->type);
    r->H = r->m0->cfg.n_embd, r->V = r->m0->cfg.n_vocab;
    if (!r->tr || !r->tr->is_quantized || !r->tr->to_float || r->H % r->tr->blck)
        return bn_err(err, errlen, "output.weight type %s is not a block type this can prune",
                      gguf_type_name(r->t0->file_type));
    r->blck = r->tr->blck, r->bs = r->tr->type_size, r->bpr = r->H / r->blck;
    return 0;
}

// prune_blocks: the two heads dequantized, the blocks that differ and their rows.
static void prune_blocks(prune_run *r) {
    const int H = r->H, V = r->V;
    r->s.n_blocks = V * r->bpr;
    r->W0 = xmalloc(sizeof(float) * H * V); // {H, V}
    r->W1 = xmalloc(sizeof(float) * H * V); // {H, V}
    r->tr->to_float(r->t0->data, r->W0, (int64_t)H * V);
    r->tr->to_float(r->t1->data, r->W1, (int64_t)H * V);
    r->cb = xcalloc((size_t)r->s.n_blocks, sizeof *r->cb);
    r->row_slot = xmalloc(sizeof(int) * V);
    r->slot_row = xmalloc(sizeof(int) * V);
    for (int row = 0; row < V; row++) r->row_slot[row] = -1;
    for (int b = 0; b < r->s.n_blocks; b++) {
        const uint8_t *p0 = (const uint8_t *)r->t0->data + (size_t)b * r->bs;
        const uint8_t *p1 = (const uint8_t *)r->t1->data + (size_t)b * r->bs;
        if (memcmp(p0, p1, r->bs) == 0) continue;
        int row = b / r->bpr;
        if (r->row_slot[row] < 0) r->slot_row[r->row_slot[row] = r->s.n_rows_changed++] = row;
        r->cb[r->s.n_changed++] = (chg_block){.r = row, .k0 = (b % r->bpr) * r->blck, .slot = r->row_slot[row]};
    }
    r->NB = r->s.n_changed, r->NR = r->s.n_rows_changed;
}

// prune_pairs: the train pairs' hidden states at their last context position and their current logits (rows with no
// chosen skipped); 0 or -1 (err: a held-out row, a forward error).
static int prune_pairs(prune_run *r, const bn_train_rows *rows, char *err, size_t errlen) {
    const int H = r->H;
    for (int i = 0; i < rows->n_rows; i++)
        if (rows->rows[i].heldout)
            return bn_err(err, errlen, "pair row %d is held out: prune with train pairs only", rows->rows[i].line);
    int max_ctx = 1, n_zc = 0;
    for (int i = 0; i < rows->n_rows; i++)
        if (rows->rows[i].n_chosen > 0) {
            r->NP++;
            n_zc += rows->rows[i].n_chosen;
            if (rows->rows[i].n_ctx > max_ctx) max_ctx = rows->rows[i].n_ctx;
        }
    r->vdt = r->tr->vec_dot_type;
    r->threads = r->cfg->n_threads > 0 ? r->cfg->n_threads : bn_n_threads_default();
    r->scratch = xmalloc((size_t)H * 4 + 1024);
    r->hq_pair = xmalloc(sizeof(float) * H * (r->NP ? r->NP : 1)); // {H, NP}
    r->ps = xcalloc((size_t)(r->NP ? r->NP : 1), sizeof *r->ps);
    r->zc_all = xmalloc(sizeof(float) * (n_zc ? n_zc : 1));
    bn_state *sp = bn_state_new(r->m0, max_ctx, r->threads);
    int j = 0, off = 0;
    for (int i = 0; i < rows->n_rows; i++) {
        const bn_train_row *row = &rows->rows[i];
        if (row->n_chosen <= 0) continue;
        bn_state_reset(sp);
        bn_forward_out o = {.hidden = r->hq_pair + (size_t)j * H};
        if (bn_forward(r->m0, sp, row->ctx, row->n_ctx, &o, err, errlen)) { bn_state_free(sp); return -1; }
        float *h = r->hq_pair + (size_t)j * H;
        engine_input(r->vdt, h, H, r->scratch);
        pair_state *p = &r->ps[j];
        *p = (pair_state){.rej = row->rejected, .n_c = row->n_chosen, .chosen = row->chosen, .zc = r->zc_all + off};
        p->zr = bn_dot_f32(r->W1 + (size_t)row->rejected * H, h, H);
        for (int k = 0; k < row->n_chosen; k++) p->zc[k] = bn_dot_f32(r->W1 + (size_t)row->chosen[k] * H, h, H);
        off += row->n_chosen;
        j++;
    }
    bn_state_free(sp);
    return 0;
}

// prune_text_base: the plain text's hidden states, next-token targets, the base log-partition, and the base logits
// and probabilities of the changed rows; 0 or -1 (err).
static int prune_text_base(prune_run *r, const int32_t *text, int64_t n_text, char *err, size_t errlen) {
    const bn_prune_cfg *cfg = r->cfg;
    const int H = r->H, V = r->V, NR = r->NR;
    r->ctx = cfg->text_ctx > 0 ? cfg->text_ctx : 128;
    const int64_t T = r->T = cfg->max_text > 0 && cfg->max_text < n_text ? cfg->max_text : n_text;
    if (T <= 0) return bn_err(err, errlen, "no plain text to measure the KL on");
    r->s.n_text = T;
    r->hq_text = xmalloc(sizeof(float) * H * T); // {H, T}
    if (hidden_states(r->m0, text, T, r->ctx, r->threads, r->vdt, r->hq_text, r->scratch, err, errlen)) return -1;
    r->lse0 = xmalloc(sizeof(float) * T);
    r->lse = xmalloc(sizeof(float) * T);
    r->pref = xmalloc(sizeof(float) * ((size_t)NR * T + 1)); // {T, NR}
    r->z0r = xmalloc(sizeof(float) * ((size_t)NR * T + 1));  // {T, NR}
    r->D = xcalloc((size_t)NR * T + 1, sizeof(float));       // {T, NR}: z_r − z0_r now
    r->dtext = xmalloc(sizeof(float) * ((size_t)r->NB * T + 1)); // {T, NB}: (w_model − w_base)·h over the block
    r->dpair = xmalloc(sizeof(float) * ((size_t)r->NB * r->NP + 1)); // {NP, NB}
    r->z0y = xmalloc(sizeof(float) * T);
    r->y = xmalloc(sizeof(int32_t) * T); // next token within the window, or −1
    r->ys = xmalloc(sizeof(int) * T);
    for (int64_t t = 0; t < T; t++) {
        r->y[t] = (t + 1) % r->ctx != 0 && t + 1 < T ? text[t + 1] : -1;
        r->ys[t] = r->y[t] >= 0 ? r->row_slot[r->y[t]] : -1;
    }
    float *zrow = xmalloc(sizeof(float) * V);
    for (int64_t t = 0; t < T; t++) {
        const float *h = r->hq_text + t * H;
        for (int v = 0; v < V; v++) zrow[v] = bn_dot_f32(r->W0 + (size_t)v * H, h, H);
        r->lse0[t] = (float)bn_log_sum_exp(zrow, V);
        r->z0y[t] = r->y[t] >= 0 ? zrow[r->y[t]] : 0.0f;
        for (int j = 0; j < NR; j++) {
            r->z0r[(size_t)j * T + t] = zrow[r->slot_row[j]];
            r->pref[(size_t)j * T + t] = (float)exp((double)zrow[r->slot_row[j]] - r->lse0[t]);
        }
    }
    free(zrow);
    return 0;
}

// prune_deltas: each changed block's logit change on the text and the pairs, the changed rows' total D, and the
// model's log-partition (the base's shifted by the changed rows).
static void prune_deltas(prune_run *r) {
    const int H = r->H, blck = r->blck, NP = r->NP, NR = r->NR;
    const int64_t T = r->T;
    float *dw = xmalloc(sizeof(float) * blck); // {blck}
    for (int b = 0; b < r->NB; b++) {
        const chg_block *c = &r->cb[b];
        const float *w0 = r->W0 + (size_t)c->r * H + c->k0, *w1 = r->W1 + (size_t)c->r * H + c->k0;
        for (int k = 0; k < blck; k++) dw[k] = w1[k] - w0[k];
        for (int64_t t = 0; t < T; t++) {
            float d = bn_dot_f32(dw, r->hq_text + t * H + c->k0, blck);
            r->dtext[(size_t)b * T + t] = d;
            r->D[(size_t)c->slot * T + t] += d;
        }
        for (int i = 0; i < NP; i++)
            r->dpair[(size_t)b * NP + i] = bn_dot_f32(dw, r->hq_pair + (size_t)i * H + c->k0, blck);
    }
    free(dw);
    for (int64_t t = 0; t < T; t++) { // lse of the model: base lse shifted by the changed rows
        double se = 1.0;
        for (int j = 0; j < NR; j++) {
            double pj = r->pref[(size_t)j * T + t];
            se += pj * expm1((double)r->D[(size_t)j * T + t]);
        }
        r->lse[t] = (float)(r->lse0[t] + log(se));
    }
}

// prune_before: the figures before the greedy; 0 or -1 (err: the NLL objective without targets).
static int prune_before(prune_run *r, char *err, size_t errlen) {
    const int64_t T = r->T;
    r->s.kl_before = text_kl(r->lse, r->lse0, r->pref, r->D, r->NR, T);
    r->s.nll_base = text_nll(r->lse0, r->z0y, r->y, r->ys, NULL, T);
    r->s.nll_before = text_nll(r->lse, r->z0y, r->y, r->ys, r->D, T);
    for (int64_t t = 0; t < T; t++) r->n_y += r->y[t] >= 0;
    r->nll_obj = r->cfg->objective == BN_PRUNE_NLL;
    if (r->nll_obj && r->n_y == 0) return bn_err(err, errlen, "the NLL objective needs windows of at least 2 tokens");
    pair_score(r->ps, r->NP, &r->s.cw_before, &r->s.margin_before);
    return 0;
}

// prune_revert: block b reverted on the greedy's state (the text's D and lse, the pairs' logits).
static void prune_revert(prune_run *r, int b) {
    const int64_t T = r->T;
    chg_block *c = &r->cb[b];
    const float *d = r->dtext + (size_t)b * T;
    float *Dr = r->D + (size_t)c->slot * T;
    const float *z0 = r->z0r + (size_t)c->slot * T;
    for (int64_t t = 0; t < T; t++) {
        double p = exp((double)z0[t] + Dr[t] - r->lse[t]);
        r->lse[t] = (float)(r->lse[t] + log1p(p * expm1(-(double)d[t])));
        Dr[t] -= d[t];
    }
    pair_shift(r->ps, r->NP, c->r, r->dpair + (size_t)b * r->NP, -1.0f);
    c->reverted = true;
    r->s.n_reverted++;
}

// prune_greedy: lazy greedy: revert the block with the best gain − μ·margin loss while that is > 0 and cw stays ≥
// cw_before − cw_drop. Only the leading candidate is re-scored on the current state; it is taken when its fresh score
// is still ≥ every other (older) score, else it is put back with the fresh one (a block once over the cw bound stays
// out).
static void prune_greedy(prune_run *r) {
    const int NB = r->NB;
    prune_state g = {.T = r->T, .NP = r->NP, .n_y = r->n_y, .nll_obj = r->nll_obj, .mu = r->cfg->mu,
                     .cw_min = r->s.cw_before - r->cfg->cw_drop, .dtext = r->dtext, .dpair = r->dpair, .D = r->D,
                     .z0r = r->z0r, .pref = r->pref, .lse = r->lse, .y = r->y, .ps = r->ps};
    double *score = xmalloc(sizeof(double) * (NB ? NB : 1));
    for (int b = 0; b < NB; b++) score[b] = revert_score(&g, &r->cb[b], b);
    for (;;) {
        int best = -1;
        for (int b = 0; b < NB; b++)
            if (!r->cb[b].reverted && score[b] > 0 && (best < 0 || score[b] > score[best])) best = b;
        if (best < 0) break;
        double fresh = revert_score(&g, &r->cb[best], best), second = 0;
        for (int b = 0; b < NB; b++)
            if (b != best && !r->cb[b].reverted && score[b] > second) second = score[b];
        score[best] = fresh;
        if (fresh <= 0 || fresh < second) continue;
        prune_revert(r, best);
    }
    free(score);
}

// prune_after: the figures after the greedy.
static void prune_after(prune_run *r) {
    r->s.kl_after = text_kl(r->lse, r->lse0, r->pref, r->D, r->NR, r->T);
    r->s.nll_after = text_nll(r->lse, r->z0y, r->y, r->ys, r->D, r->T);
    pair_score(r->ps, r->NP, &r->s.cw_after, &r->s.margin_after);
    bool *row_left = xcalloc((size_t)r->V, 1);
    for (int b = 0; b < r->NB; b++)
        if (!r->cb[b].reverted && !row_left[r->cb[b].r]) { row_left[r->cb[b].r] = true; r->s.n_rows_after++; }
    free(row_left);
}

// prune_write: model_path's bytes with the reverted blocks copied from the base, written to out_path; 0 or -1 (err).
static int prune_write(const prune_run *r, const char *model_path, const char *out_path, char *err, size_t errlen) {
    size_t n_file = 0;
    uint8_t *file = (uint8_t *)bn_read_file(model_path, &n_file, err, errlen);
    if (!file) return -1;
    uint8_t *head = file + r->m1->gguf->data_offset + r->t1->offset;
    for (int b = 0; b < r->NB; b++) {
        if (!r->cb[b].reverted) continue;
        size_t blk = (size_t)r->cb[b].r * r->bpr + (size_t)r->cb[b].k0 / r->blck;
        memcpy(head + blk * r->bs, (const uint8_t *)r->t0->data + blk * r->bs, r->bs);
    }
    int rc = bn_write_file_atomic(out_path, file, n_file, err, errlen);
    free(file);
    return rc;
}

int bn_prune_flips(const char *base_path, const char *model_path, const bn_train_rows *rows, const int32_t *text,
                   int64_t n_text, const bn_prune_cfg *cfg, const char *out_path, bn_prune_stats *st, char *err,
                   size_t errlen) {
    prune_run r = {.cfg = cfg};
    int rc = -1;
    if (prune_load(&r, base_path, model_path, err, errlen) == 0) {
        prune_blocks(&r);
        if (prune_pairs(&r, rows, err, errlen) == 0 && prune_text_base(&r, text, n_text, err, errlen) == 0) {
            prune_deltas(&r);
            if (prune_before(&r, err, errlen) == 0) {
                prune_greedy(&r);
                prune_after(&r);
                rc = prune_write(&r, model_path, out_path, err, errlen);
            }
        }
    }
    if (st) *st = r.s;
    prune_free(&r);
    return rc;
}
