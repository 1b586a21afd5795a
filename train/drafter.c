// train/drafter.c — the drafter's training forward and backward over all anchors of one tapped target sequence
// (docs/dspark.md §11). The forward is spec/dspark.c's math (§4.2–4.6) with the same ops (bn_rmsnorm, bn_rope_neox,
// one softmax over context + block keys); tests/train/test_drafter_grad.c checks it against bn_drafter_block and
// bn_drafter_step_logits on a written file, and the backward against finite differences.
#include "train/drafter.h"
#include "quant/quant.h"
#include "train/backward.h"
#include "core/ops.h"
#include "core/matmul.h"
#include "base/util.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>

// Saved activations of one drafter layer over the block rows (T rows) and the context rows (N rows).
typedef struct {
    float *xin, *a, *qp, *kp, *q, *k, *v, *att, *xmid, *n2, *gate, *up, *sw; // block rows
    float *ckp, *ck, *cv;                                                      // context rows: K before norm, K, V
} layer_act;

typedef struct {
    int N, T, na;           // context rows, block rows, anchors
    const int *anc;         // [na] anchor positions
    float *fcout, *g;       // [N][E]
    layer_act *L;
    float *x, *h, *logits, *w1; // [T][E], [T][E], [T][V], [T][R]
    int32_t *prev, *target; // [T]
} fwd_ws;

static float *fz(size_t n) { return xcalloc(n ? n : 1, sizeof(float)); }

// wview: an F32 weight view {ne0, ne1} of params at off.
static bn_weight wview(const bn_dtrain *t, int64_t off, int64_t ne0, int64_t ne1) {
    bn_weight w = {.data = t->params + off, .type = BN_F32, .ne = {ne0, ne1, 1, 1}, .name = "dtrain"};
    return w;
}

// lin: y {n_out, T} = W x; dies on error (shapes are ours).
static void lin(const bn_weight *w, const float *x, int T, float *y) {
    char err[256];
    if (bn_linear_lora_fwd(w, NULL, x, T, NULL, y, NULL, err, sizeof err) != 0) bn_die("drafter train: %s", err);
}
// lin_bwd: dx += Wᵀ dy.
static void lin_bwd(const bn_weight *w, const float *x, int T, const float *dy, float *dx) {
    char err[256];
    if (bn_linear_lora_bwd(w, NULL, x, T, NULL, NULL, dy, dx, err, sizeof err) != 0) bn_die("drafter train: %s", err);
}

static void rmsnorm_rows(float *y, const float *x, const float *w, int n, int rows, float eps) {
    for (int r = 0; r < rows; r++) bn_rmsnorm(y + (size_t)r * n, x + (size_t)r * n, w, n, eps);
}

// head_norm_rope_rows: per head RMSNorm(·; w) then NEOX RoPE at pos[r] (spec/dspark.c's head_norm_rope), out of x.
static void head_norm_rope_rows(const bn_drafter_config *c, float *y, const float *x, int n_heads, const float *w,
                                int rows, const int *pos) {
    const int hd = c->head_dim;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < n_heads; h++) {
            const size_t o = ((size_t)r * n_heads + h) * hd;
            bn_rmsnorm(y + o, x + o, w, hd, c->norm_eps);
            bn_rope_neox(y + o, hd, c->n_rot, pos[r], c->rope_base);
        }
}

// key_row: key/value row j of block row r's attention: context rows 0..p−1, then the anchor's B block rows.
static inline const float *key_row(const float *ctx, const float *blk, int p, int base_row, int j, int w) {
    return j < p ? ctx + (size_t)j * w : blk + (size_t)(base_row + j - p) * w;
}

// attn_probs: P[j] = softmax_j(scale · q·K_j) over n keys.
static void attn_probs(const float *q, const float *ck, const float *bk, int p, int base_row, int n, int kvw, int hd,
                       float scale, float *P) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        P[j] = scale * bn_dot_f32(q, key_row(ck, bk, p, base_row, j, kvw), hd);
        if (P[j] > mx) mx = P[j];
    }
    double sum = 0;
    for (int j = 0; j < n; j++) sum += (P[j] = expf(P[j] - mx));
    for (int j = 0; j < n; j++) P[j] = (float)(P[j] / sum);
}

// attention: non-causal attention of every block row over its anchor's context rows and block rows (forward when
// dout is NULL: writes la->att; else adds the gradients into dq, dk, dv, dck, dcv).
static void attention(const bn_drafter_config *c, const fwd_ws *w, const layer_act *la, const float *dout, float *dq,
                      float *dk, float *dv, float *dck, float *dcv, float *P) {
    const int hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd, B = c->block_size;
    const int group = c->n_head / c->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int a = 0; a < w->na; a++) {
        const int p = w->anc[a], n = p + B;
        for (int i = 0; i < B; i++) {
            const int r = a * B + i;
            for (int h = 0; h < c->n_head; h++) {
                const int ko = (h / group) * hd;
                const float *q = la->q + (size_t)r * qw + (size_t)h * hd;
                attn_probs(q, la->ck + ko, la->k + ko, p, a * B, n, kvw, hd, scale, P);
                if (!dout) {
                    float *o = la->att + (size_t)r * qw + (size_t)h * hd;
                    memset(o, 0, sizeof(float) * (size_t)hd);
                    for (int j = 0; j < n; j++)
                        bn_axpy_f32(o, P[j], key_row(la->cv + ko, la->v + ko, p, a * B, j, kvw), hd);
                    continue;
                }
                const float *go = dout + (size_t)r * qw + (size_t)h * hd;
                float *Dp = P + n; // dP_j = dout·V_j in the second half of the scratch
                double dot = 0;
                for (int j = 0; j < n; j++) {
                    Dp[j] = bn_dot_f32(go, key_row(la->cv + ko, la->v + ko, p, a * B, j, kvw), hd);
                    float *dvj = j < p ? dcv + (size_t)j * kvw + ko : dv + (size_t)(a * B + j - p) * kvw + ko;
                    bn_axpy_f32(dvj, P[j], go, hd);
                    dot += (double)P[j] * Dp[j];
                }
                float *gq = dq + (size_t)r * qw + (size_t)h * hd;
                // dS_j = P_j (dP_j − Σ P dP); dq += scale Σ dS_j K_j; dK_j += scale dS_j q
                for (int j = 0; j < n; j++) {
                    const float ds = scale * P[j] * (Dp[j] - (float)dot);
                    const float *kj = key_row(la->ck + ko, la->k + ko, p, a * B, j, kvw);
                    float *dkj = j < p ? dck + (size_t)j * kvw + ko : dk + (size_t)(a * B + j - p) * kvw + ko;
                    bn_axpy_f32(gq, ds, kj, hd);
                    bn_axpy_f32(dkj, ds, q, hd);
                }
            }
        }
    }
}

// argmax_skip: index of the largest l[v], v != skip, ties → lowest id (spec/dspark.c's draft rule).
static int32_t argmax_skip(const float *l, int n, int skip) {
    int32_t best = -1;
    for (int v = 0; v < n; v++)
        if (v != skip && (best < 0 || l[v] > l[best])) best = v;
    return best;
}

// forward: every activation of the pass into w (allocated here).
static void forward(const bn_dtrain *t, const bn_dtrain_seq *seq, fwd_ws *w) {
    const bn_drafter *d = t->d;
    const bn_drafter_config *c = &t->cfg;
    const int E = c->n_embd, B = c->block_size, hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd;
    const int F = c->n_ff, V = c->n_vocab, R = c->markov_rank, CE = c->n_taps * E, T = w->T;
    int N = 0; // context rows needed: up to the last anchor
    for (int a = 0; a < w->na; a++)
        if (w->anc[a] > N) N = w->anc[a];
    w->N = N;
    int *cpos = xmalloc(sizeof(int) * (size_t)(N + 1)), *bpos = xmalloc(sizeof(int) * (size_t)T);
    for (int i = 0; i < N; i++) cpos[i] = i;
    for (int r = 0; r < T; r++) bpos[r] = w->anc[r / B] + r % B;
    // encoder and context K/V (§4.2–4.3)
    w->fcout = fz((size_t)N * E), w->g = fz((size_t)N * E);
    bn_weight fc = wview(t, t->fc, CE, E);
    if (N) lin(&fc, seq->taps, N, w->fcout);
    rmsnorm_rows(w->g, w->fcout, t->params + t->hidden_norm, E, N, c->norm_eps);
    // block rows: [anchor, MASK × (B−1)] + log-SNR embedding (§4.4 steps 1–2)
    w->x = fz((size_t)T * E);
    for (int r = 0; r < T; r++) {
        float *xr = w->x + (size_t)r * E;
        bn_weight_row_f32(&d->token_embd, r % B == 0 ? seq->tokens[bpos[r]] : c->mask_token_id, xr);
        if (c->log_snr) bn_axpy_f32(xr, 1.0f, d->snr_emb + (size_t)(r % B == 0 ? 0 : 1) * E, E);
    }
    float *P = fz(2 * (size_t)(N + B));
    for (int il = 0; il < c->n_layer; il++) {
        const bn_dtrain_layer *ly = &t->layers[il];
        layer_act *la = &w->L[il];
        bn_weight wq = wview(t, ly->attn_q, E, qw), wk = wview(t, ly->attn_k, E, kvw);
        bn_weight wv = wview(t, ly->attn_v, E, kvw);
        bn_weight wo = wview(t, ly->attn_output, qw, E), wg = wview(t, ly->ffn_gate, E, F);
        bn_weight wu = wview(t, ly->ffn_up, E, F), wd = wview(t, ly->ffn_down, F, E);
        la->ckp = fz((size_t)N * kvw), la->ck = fz((size_t)N * kvw), la->cv = fz((size_t)N * kvw);
        if (N) lin(&wk, w->g, N, la->ckp), lin(&wv, w->g, N, la->cv);
        head_norm_rope_rows(c, la->ck, la->ckp, c->n_head_kv, t->params + ly->k_norm, N, cpos);
        la->xin = fz((size_t)T * E), la->a = fz((size_t)T * E);
        la->xmid = fz((size_t)T * E), la->n2 = fz((size_t)T * E);
        la->qp = fz((size_t)T * qw), la->q = fz((size_t)T * qw), la->att = fz((size_t)T * qw);
        la->kp = fz((size_t)T * kvw), la->k = fz((size_t)T * kvw), la->v = fz((size_t)T * kvw);
        la->gate = fz((size_t)T * F), la->up = fz((size_t)T * F), la->sw = fz((size_t)T * F);
        memcpy(la->xin, w->x, sizeof(float) * (size_t)T * E);
        rmsnorm_rows(la->a, la->xin, t->params + ly->attn_norm, E, T, c->norm_eps);
        lin(&wq, la->a, T, la->qp), lin(&wk, la->a, T, la->kp), lin(&wv, la->a, T, la->v);
        head_norm_rope_rows(c, la->q, la->qp, c->n_head, t->params + ly->q_norm, T, bpos);
        head_norm_rope_rows(c, la->k, la->kp, c->n_head_kv, t->params + ly->k_norm, T, bpos);
        attention(c, w, la, NULL, NULL, NULL, NULL, NULL, NULL, P);
        lin(&wo, la->att, T, la->xmid);
        bn_axpy_f32(la->xmid, 1.0f, la->xin, T * E);
        rmsnorm_rows(la->n2, la->xmid, t->params + ly->ffn_norm, E, T, c->norm_eps);
        lin(&wg, la->n2, T, la->gate), lin(&wu, la->n2, T, la->up);
        bn_swiglu(la->sw, la->gate, la->up, F * T);
        lin(&wd, la->sw, T, w->x);
        bn_axpy_f32(w->x, 1.0f, la->xmid, T * E);
    }
    free(P);
    // output norm, LM head, Markov bias under teacher forcing: prev_i = tokens[p + i] (§4.4 step 4, §4.5)
    w->h = fz((size_t)T * E), w->logits = fz((size_t)T * V), w->w1 = fz((size_t)T * R);
    w->prev = xmalloc(sizeof(int32_t) * (size_t)T), w->target = xmalloc(sizeof(int32_t) * (size_t)T);
    rmsnorm_rows(w->h, w->x, t->params + t->output_norm, E, T, c->norm_eps);
    lin(&d->output, w->h, T, w->logits);
    for (int r = 0; r < T; r++) {
        w->prev[r] = seq->tokens[bpos[r]];
        w->target[r] = seq->tokens[bpos[r] + 1];
        memcpy(w->w1 + (size_t)r * R, t->params + t->markov_a + (size_t)w->prev[r] * R, sizeof(float) * (size_t)R);
    }
    float *bias = fz((size_t)T * V);
    bn_weight w2 = wview(t, t->markov_b, R, V);
    lin(&w2, w->w1, T, bias);
    bn_axpy_f32(w->logits, 1.0f, bias, T * V);
    free(bias);
    free(cpos);
    free(bpos);
}

// loss: cross-entropy of the Markov logits against the target's tokens and the confidence head's BCE against "the
// draft equals the target's token" (inputs detached); fills st and, when dl is set, dl = ∂(scale·loss)/∂logits
// and the confidence head's gradients.
static void loss(bn_dtrain *t, const fwd_ws *w, float scale, float *dl, bn_dtrain_stats *st) {
    const bn_drafter_config *c = &t->cfg;
    const int V = c->n_vocab, E = c->n_embd, R = c->markov_rank, B = c->block_size;
    bool run = true; // the current anchor's rows 0..i all matched
    for (int r = 0; r < w->T; r++) {
        const float *l = w->logits + (size_t)r * V;
        const float lse = bn_logits_lse(l, V);
        const double ce = (double)lse - l[w->target[r]];
        const bool hit = argmax_skip(l, V, c->mask_token_id) == w->target[r];
        if (r % B == 0) run = true;
        run = run && hit;
        st->ce += ce, st->loss += ce, st->n_pred++, st->n_top1 += hit, st->n_pos[r % B] += run;
        if (dl) {
            float *g = dl + (size_t)r * V;
            for (int v = 0; v < V; v++) g[v] = scale * expf(l[v] - lse);
            g[w->target[r]] -= scale;
        }
        if (!c->has_conf) continue;
        const float *cw = t->params + t->conf_w;
        const float *h = w->h + (size_t)r * E, *w1 = w->w1 + (size_t)r * R;
        float z = bn_dot_f32(cw, h, E) + (c->conf_in > E ? bn_dot_f32(cw + E, w1, R) : 0) + t->params[t->conf_b];
        const double pc = 1.0 / (1.0 + exp(-(double)z)), y = hit ? 1.0 : 0.0;
        const double bce = -(y * log(pc + 1e-12) + (1 - y) * log(1 - pc + 1e-12));
        st->loss += t->conf_weight * bce;
        if (!dl) continue;
        const float dz = (float)(scale * t->conf_weight * (pc - y));
        bn_axpy_f32(t->grads + t->conf_w, dz, h, E);
        if (c->conf_in > E) bn_axpy_f32(t->grads + t->conf_w + E, dz, w1, R);
        t->grads[t->conf_b] += dz;
    }
}

// head_norm_rope_bwd: dx += ∂ of head_norm_rope_rows (RoPE back per row, then the per-head RMSNorm), dw += its
// weight gradient.
static void head_norm_rope_bwd(const bn_drafter_config *c, const float *x, const float *w, int n_heads, int rows,
                               const int *pos, const float *dy, float *dx, float *dw) {
    const int hd = c->head_dim, width = n_heads * hd;
    float *dn = fz((size_t)rows * width);
    for (int r = 0; r < rows; r++)
        bn_rope_bwd(dy + (size_t)r * width, hd, n_heads, 1, c->n_rot, pos[r], c->rope_base, BN_ROPE_NEOX,
                    dn + (size_t)r * width);
    bn_rmsnorm_bwd(x, w, hd, rows * n_heads, c->norm_eps, dn, dx);
    bn_rmsnorm_wgrad(x, hd, rows * n_heads, c->norm_eps, dn, dw);
    free(dn);
}

// rmsnorm_bwd2: dx += RMSNorm backward, dw += weight gradient.
static void rmsnorm_bwd2(const float *x, const float *w, int n, int rows, float eps, const float *dy, float *dx,
                         float *dw) {
    bn_rmsnorm_bwd(x, w, n, rows, eps, dy, dx);
    bn_rmsnorm_wgrad(x, n, rows, eps, dy, dw);
}

// backward_layers: from dx (the gradient of the last layer's output, [T][E]) back through every layer; the
// context rows' dK/dV go through the K/V injection into dg [N][E].
static void backward_layers(bn_dtrain *t, const fwd_ws *w, float *dx, float *dg) {
    const bn_drafter_config *c = &t->cfg;
    const int E = c->n_embd, B = c->block_size, hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd;
    const int F = c->n_ff, T = w->T, N = w->N;
    int *cpos = xmalloc(sizeof(int) * (size_t)(N + 1)), *bpos = xmalloc(sizeof(int) * (size_t)T);
    for (int i = 0; i < N; i++) cpos[i] = i;
    for (int r = 0; r < T; r++) bpos[r] = w->anc[r / B] + r % B;
    float *G = t->grads, *P = fz(2 * (size_t)(N + B));
    float *dxmid = fz((size_t)T * E), *dsw = fz((size_t)T * F), *dgate = fz((size_t)T * F), *dup = fz((size_t)T * F);
    float *dn2 = fz((size_t)T * E), *datt = fz((size_t)T * qw), *dq = fz((size_t)T * qw), *dk = fz((size_t)T * kvw);
    float *dv = fz((size_t)T * kvw), *dqp = fz((size_t)T * qw), *dkp = fz((size_t)T * kvw), *da = fz((size_t)T * E);
    float *dck = fz((size_t)N * kvw), *dcv = fz((size_t)N * kvw), *dckp = fz((size_t)N * kvw);
    for (int il = c->n_layer - 1; il >= 0; il--) {
        const bn_dtrain_layer *ly = &t->layers[il];
        const layer_act *la = &w->L[il];
        bn_weight wq = wview(t, ly->attn_q, E, qw), wk = wview(t, ly->attn_k, E, kvw);
        bn_weight wv = wview(t, ly->attn_v, E, kvw);
        bn_weight wo = wview(t, ly->attn_output, qw, E), wg = wview(t, ly->ffn_gate, E, F);
        bn_weight wu = wview(t, ly->ffn_up, E, F), wd = wview(t, ly->ffn_down, F, E);
        float *bufs[] = {dsw, dgate, dup, dn2, datt, dq, dk, dv, dqp, dkp, da, dck, dcv, dckp};
        size_t lens[] = {(size_t)T * F, (size_t)T * F, (size_t)T * F, (size_t)T * E, (size_t)T * qw, (size_t)T * qw,
                         (size_t)T * kvw, (size_t)T * kvw, (size_t)T * qw, (size_t)T * kvw, (size_t)T * E,
                         (size_t)N * kvw, (size_t)N * kvw, (size_t)N * kvw};
        for (int i = 0; i < 14; i++) memset(bufs[i], 0, sizeof(float) * lens[i]);
        // FFN: x = xmid + W_down SwiGLU(W_gate n2, W_up n2), n2 = RMSNorm(xmid)
        memcpy(dxmid, dx, sizeof(float) * (size_t)T * E);
        lin_bwd(&wd, la->sw, T, dx, dsw);
        bn_linear_wgrad(la->sw, dx, F, E, T, G + ly->ffn_down);
        bn_swiglu_bwd(la->gate, la->up, (int64_t)T * F, dsw, dgate, dup);
        lin_bwd(&wg, la->n2, T, dgate, dn2), lin_bwd(&wu, la->n2, T, dup, dn2);
        bn_linear_wgrad(la->n2, dgate, E, F, T, G + ly->ffn_gate);
        bn_linear_wgrad(la->n2, dup, E, F, T, G + ly->ffn_up);
        rmsnorm_bwd2(la->xmid, t->params + ly->ffn_norm, E, T, c->norm_eps, dn2, dxmid, G + ly->ffn_norm);
        // attention: xmid = xin + W_o attn
        memcpy(dx, dxmid, sizeof(float) * (size_t)T * E);
        lin_bwd(&wo, la->att, T, dxmid, datt);
        bn_linear_wgrad(la->att, dxmid, qw, E, T, G + ly->attn_output);
        attention(c, w, la, datt, dq, dk, dv, dck, dcv, P);
        head_norm_rope_bwd(c, la->qp, t->params + ly->q_norm, c->n_head, T, bpos, dq, dqp, G + ly->q_norm);
        head_norm_rope_bwd(c, la->kp, t->params + ly->k_norm, c->n_head_kv, T, bpos, dk, dkp, G + ly->k_norm);
        lin_bwd(&wq, la->a, T, dqp, da), lin_bwd(&wk, la->a, T, dkp, da), lin_bwd(&wv, la->a, T, dv, da);
        bn_linear_wgrad(la->a, dqp, E, qw, T, G + ly->attn_q);
        bn_linear_wgrad(la->a, dkp, E, kvw, T, G + ly->attn_k);
        bn_linear_wgrad(la->a, dv, E, kvw, T, G + ly->attn_v);
        rmsnorm_bwd2(la->xin, t->params + ly->attn_norm, E, T, c->norm_eps, da, dx, G + ly->attn_norm);
        // context rows: K = RoPE(k_norm(W_k g)), V = W_v g
        if (N == 0) continue;
        head_norm_rope_bwd(c, la->ckp, t->params + ly->k_norm, c->n_head_kv, N, cpos, dck, dckp, G + ly->k_norm);
        lin_bwd(&wk, w->g, N, dckp, dg), lin_bwd(&wv, w->g, N, dcv, dg);
        bn_linear_wgrad(w->g, dckp, E, kvw, N, G + ly->attn_k);
        bn_linear_wgrad(w->g, dcv, E, kvw, N, G + ly->attn_v);
    }
    float *frees[] = {P, dxmid, dsw, dgate, dup, dn2, datt, dq, dk, dv, dqp, dkp, da, dck, dcv, dckp};
    for (int i = 0; i < 16; i++) free(frees[i]);
    free(cpos);
    free(bpos);
}

// backward: from dl = ∂loss/∂logits to every trainable tensor's gradient.
static void backward(bn_dtrain *t, const bn_dtrain_seq *seq, const fwd_ws *w, const float *dl) {
    const bn_drafter_config *c = &t->cfg;
    const int E = c->n_embd, V = c->n_vocab, R = c->markov_rank, T = w->T, N = w->N, CE = c->n_taps * E;
    float *G = t->grads;
    // Markov: logits = base + W2·W1[prev]; base = output · h
    bn_weight w2 = wview(t, t->markov_b, R, V);
    float *dw1 = fz((size_t)T * R), *dh = fz((size_t)T * E), *dx = fz((size_t)T * E), *dg = fz((size_t)N * E);
    lin_bwd(&w2, w->w1, T, dl, dw1);
    bn_linear_wgrad(w->w1, dl, R, V, T, G + t->markov_b);
    for (int r = 0; r < T; r++) bn_axpy_f32(G + t->markov_a + (size_t)w->prev[r] * R, 1.0f, dw1 + (size_t)r * R, R);
    lin_bwd(&t->d->output, w->h, T, dl, dh);
    rmsnorm_bwd2(w->x, t->params + t->output_norm, E, T, c->norm_eps, dh, dx, G + t->output_norm);
    backward_layers(t, w, dx, dg);
    if (N > 0) { // encoder: g = RMSNorm(fc · taps; hidden_norm)
        float *dfc = fz((size_t)N * E);
        rmsnorm_bwd2(w->fcout, t->params + t->hidden_norm, E, N, c->norm_eps, dg, dfc, G + t->hidden_norm);
        bn_linear_wgrad(seq->taps, dfc, CE, E, N, G + t->fc);
        free(dfc);
    }
    free(dw1), free(dh), free(dx), free(dg);
}

static void ws_free(bn_dtrain *t, fwd_ws *w) {
    for (int il = 0; il < t->cfg.n_layer; il++) {
        layer_act *la = &w->L[il];
        float *b[] = {la->xin, la->a, la->qp, la->kp, la->q, la->k, la->v, la->att, la->xmid, la->n2,
                      la->gate, la->up, la->sw, la->ckp, la->ck, la->cv};
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
    }
    free(w->L), free(w->fcout), free(w->g), free(w->x), free(w->h), free(w->logits), free(w->w1);
    free(w->prev), free(w->target);
}

int bn_dtrain_step(bn_dtrain *t, const bn_dtrain_seq *seq, bool bwd, float scale, bn_dtrain_stats *st, char *err,
                   size_t errlen) {
    const int B = t->cfg.block_size;
    int *all = NULL, na = seq->n_anchors;
    const int *anc = seq->anchors;
    if (!anc) { // every anchor whose block fits: p + B <= n − 1
        na = seq->n - B - (seq->first > 0 ? seq->first : 0);
        if (na < 0) na = 0;
        all = xmalloc(sizeof(int) * (size_t)(na + 1));
        for (int a = 0; a < na; a++) all[a] = (seq->first > 0 ? seq->first : 0) + a;
        anc = all;
    }
    for (int a = 0; a < na; a++)
        if (anc[a] < 0 || anc[a] + B > seq->n - 1) {
            free(all);
            return bn_err(err, errlen, "drafter train: anchor %d has no block of %d tokens in %d", anc[a], B, seq->n);
        }
    for (int i = 0; i < seq->n; i++)
        if (seq->tokens[i] < 0 || seq->tokens[i] >= t->cfg.n_vocab) {
            free(all);
            return bn_err(err, errlen, "drafter train: token %d out of the vocabulary", seq->tokens[i]);
        }
    if (na == 0) {
        free(all);
        return bn_err(err, errlen, "drafter train: a sequence of %d tokens has no anchor", seq->n);
    }
    fwd_ws w = {.na = na, .anc = anc, .T = na * B};
    w.L = xcalloc((size_t)t->cfg.n_layer, sizeof *w.L);
    forward(t, seq, &w);
    bn_dtrain_stats local = {0};
    float *dl = bwd ? fz((size_t)w.T * t->cfg.n_vocab) : NULL;
    loss(t, &w, scale, dl, st ? st : &local);
    if (seq->logits) memcpy(seq->logits, w.logits, sizeof(float) * (size_t)w.T * t->cfg.n_vocab);
    if (bwd) backward(t, seq, &w, dl);
    free(dl);
    ws_free(t, &w);
    free(all);
    return 0;
}
