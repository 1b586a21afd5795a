// core/forward.c — the CPU forward pass (docs/model.md §4 for qwen35, §7 for qwen3 / llama / qwen2).
// Tokens are processed in chunks of at most s->n_batch rows: the matmuls of a chunk run batched,
// the GDN recurrence and the KV-cache attention run token by token (parallel over heads).
#include "core/forward_impl.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "core/sampler.h" // bn_logits_topk_values: bn_forward_out.topk
#include "base/util.h"
#include "quant/quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// Below this many multiply-adds a parallel_for costs more than it saves: run on the caller.
#define MIN_PARALLEL_WORK (1 << 15)

// ---- small helpers --------------------------------------------------------------------------
// rows_job / rows_task: RMSNorm (w) or SwiGLU (w NULL: y = SiLU(y) ⊙ x) of rows [t0, t1) of n.
typedef struct {
    float *y;
    const float *x, *w;
    int n;
    float eps;
} rows_job;
static void rows_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const rows_job *job = ctx;
    for (int64_t t = t0; t < t1; t++) {
        float *y = job->y + (size_t)t * job->n;
        const float *x = job->x + (size_t)t * job->n;
        if (job->w) bn_rmsnorm(y, x, job->w, job->n, job->eps);
        else bn_swiglu(y, y, x, job->n);
    }
}
// rmsnorm_rows: y[t] = RMSNorm(x[t]; w) for nb rows of n (rows in parallel when there are enough).
static void rmsnorm_rows(bn_state *s, float *y, const float *x, const bn_weight *w, int nb, int n, float eps) {
    rows_job job = {.y = y, .x = x, .w = w->data, .n = n, .eps = eps};
    bn_parallel_for((int64_t)nb * n >= MIN_PARALLEL_WORK ? s->pool : NULL, nb, rows_task, &job);
}

// add_rows: y += x over nb*n floats.
static void add_rows(float *y, const float *x, size_t count) {
    for (size_t i = 0; i < count; i++) y[i] += x[i];
}

// add_bias_rows: y[t] += b for nb rows of n (no-op when the bias is absent).
static void add_bias_rows(float *y, const bn_weight *b, int nb, int n) {
    if (!b->data) return;
    for (int t = 0; t < nb; t++) add_rows(y + (size_t)t * n, b->data, (size_t)n);
}

// matmul: y[t] = W·x[t] for nb rows with the state's scratch and threads, plus the LoRA deltas of W at each
// column's scales (s->lora_cols) when the state has adapters (docs/model.md §4.5).
static void matmul(bn_state *s, const bn_weight *w, const float *x, float *y, int nb) {
    bn_matmul(w, x, y, nb, s->work, s->pool);
    if (s->lora) bn_lora_apply(s->lora, w, x, y, nb, s->lora_cols, s->lora_u, s->pool);
}

// lora_cols_own: every column of a pass over s's own sequence takes s's adapter scales.
static void lora_cols_own(bn_state *s, int nb) {
    if (s->lora)
        for (int t = 0; t < nb; t++) s->lora_cols[t] = s->lora_scale;
}

// rope: rotary embedding of one head in place (llama: adjacent pairs; qwen*: rotate-half pairs).
static void rope(const bn_config *c, float *x, int pos) {
    if (c->arch == BN_ARCH_LLAMA)
        bn_rope_norm(x, c->head_dim, c->n_rot, pos, c->rope_base);
    else
        bn_rope_neox(x, c->head_dim, c->n_rot, pos, c->rope_base);
}

// The columns of a pass: nb tokens of one sequence (seqs NULL: column t at position p0 + t of the state that runs
// the pass, row t_off + t of out), or a ragged batch (bn_forward_multi: column t of state seqs[t] at pos[t], row
// rows[t] of outs[t], with seqs[t]'s KV cache and recurrent state; a sequence's columns are consecutive, in token
// order; the scratch buffers are the running state's).
typedef struct {
    bn_state *const *seqs;              // [nb] or NULL (one sequence)
    const int *pos;                     // [nb] with seqs
    const bn_forward_out *const *outs;  // [nb] with seqs (entries may be NULL)
    const int *rows;                    // [nb] with seqs
    int p0, t_off;                      // without seqs
    const bn_forward_out *out;          // without seqs (may be NULL)
} cols;
// col_state: the state whose caches column t reads and writes.
static bn_state *col_state(bn_state *s, const cols *cl, int t) { return cl->seqs ? cl->seqs[t] : s; }
// col_pos: the position of column t.
static int col_pos(const cols *cl, int t) { return cl->seqs ? cl->pos[t] : cl->p0 + t; }
// col_out: the forward_out receiving column t's taps and snapshot (NULL: none).
static const bn_forward_out *col_out(const cols *cl, int t) { return cl->seqs ? cl->outs[t] : cl->out; }
// col_row: column t's row in col_out.
static int col_row(const cols *cl, int t) { return cl->seqs ? cl->rows[t] : cl->t_off + t; }
// col_snap: the snapshot receiving the recurrent state after column t's token, or NULL.
static bn_snapshot *col_snap(const cols *cl, int t) {
    const bn_forward_out *o = col_out(cl, t);
    return o && o->snaps ? o->snaps[col_row(cl, t)] : NULL;
}

// ---- attention ------------------------------------------------------------------------------
typedef struct {
    const bn_config *c;
    bn_state *s;
    cols cl;
    int il, q_stride;     // q_stride: floats per token in s->qg
    bool gated;
    bool grouped;         // items are (token, KV head) groups instead of (token, query head)
} attn_job;

// attn_task: items are (token t, query head h) pairs, index t*n_head + h, or with job->grouped
// (token t, KV head g) pairs, index t*n_head_kv + g, covering the group's query heads at once
// (each K/V row read once per group; same results).
static void attn_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_job *job = ctx;
    const bn_config *c = job->c;
    bn_state *s = job->s;
    const int hd = c->head_dim, group = c->n_head / c->n_head_kv;
    const int64_t kv_dim = (int64_t)c->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const int head_stride = job->gated ? 2 * hd : hd; // query (+ gate) rows per head in s->qg
    float *scores = s->scores + (size_t)tid * s->n_ctx * group;
    const int per_token = job->grouped ? c->n_head_kv : c->n_head;
    for (int64_t i = i0; i < i1; i++) {
        const int t = (int)(i / per_token), j = (int)(i % per_token);
        const int kvh = job->grouped ? j : j / group;
        const int h0 = job->grouped ? j * group : j, n_q = job->grouped ? group : 1;
        const int n_kv = col_pos(&job->cl, t) + 1; // causal: positions 0 ..= the token's
        const bn_state *cs = col_state(s, &job->cl, t);
        const float *q = s->qg + (size_t)t * job->q_stride + (size_t)h0 * head_stride;
        float *o = s->att + (size_t)t * c->n_head * hd + (size_t)h0 * hd;
        if (s->kv_type == BN_F16) {
            const uint16_t *K = (const uint16_t *)cs->k_cache[job->il] + (size_t)kvh * hd;
            const uint16_t *V = (const uint16_t *)cs->v_cache[job->il] + (size_t)kvh * hd;
            bn_attention_group_f16(o, q, n_q, head_stride, K, V, n_kv, kv_dim, hd, scale, scores);
        } else {
            const float *K = (const float *)cs->k_cache[job->il] + (size_t)kvh * hd;
            const float *V = (const float *)cs->v_cache[job->il] + (size_t)kvh * hd;
            if (n_q == 1)
                bn_attention_head(o, q, K, V, n_kv, kv_dim, hd, scale, scores);
            else
                bn_attention_group(o, q, n_q, head_stride, K, V, n_kv, kv_dim, hd, scale, scores);
        }
        if (job->gated) // gate rows follow the query rows of each head
            for (int h = 0; h < n_q; h++) bn_sigmoid_gate(o + (size_t)h * hd, o + (size_t)h * hd, q + (size_t)h * head_stride + hd, hd);
    }
}

// attention_layer: s->mo = attention(s->xn) for the nb columns cl, appending to their KV caches.
static void attention_layer(const bn_model *m, bn_state *s, int il, int nb, const cols *cl) {
    const bn_config *c = &m->cfg;
    const bn_layer_weights *lw = &m->w.layers[il];
    const int hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv;
    const bool gated = c->arch == BN_ARCH_QWEN35;
    const int q_stride = nh * hd * (gated ? 2 : 1), kv_dim = nkv * hd;

    matmul(s, &lw->attn_q, s->xn, s->qg, nb); // per head: query [, gate]
    matmul(s, &lw->attn_k, s->xn, s->kb, nb);
    matmul(s, &lw->attn_v, s->xn, s->vb, nb);
    add_bias_rows(s->qg, &lw->attn_q_bias, nb, q_stride);
    add_bias_rows(s->kb, &lw->attn_k_bias, nb, kv_dim);
    add_bias_rows(s->vb, &lw->attn_v_bias, nb, kv_dim);

    int max_pos = 0;
    for (int t = 0; t < nb; t++) {
        const int pos = col_pos(cl, t);
        bn_state *cs = col_state(s, cl, t);
        max_pos = pos > max_pos ? pos : max_pos;
        for (int h = 0; h < nh; h++) {
            float *q = s->qg + (size_t)t * q_stride + (size_t)h * (gated ? 2 * hd : hd);
            if (lw->attn_q_norm.data) bn_rmsnorm(q, q, lw->attn_q_norm.data, hd, c->norm_eps);
            rope(c, q, pos);
        }
        float *k = s->kb + (size_t)t * kv_dim;
        for (int j = 0; j < nkv; j++) {
            float *kj = k + (size_t)j * hd;
            if (lw->attn_k_norm.data) bn_rmsnorm(kj, kj, lw->attn_k_norm.data, hd, c->norm_eps);
            rope(c, kj, pos);
        }
        const float *v = s->vb + (size_t)t * kv_dim;
        if (s->kv_type == BN_F16) {
            bn_fp32_to_fp16_row(k, (uint16_t *)cs->k_cache[il] + (size_t)pos * kv_dim, kv_dim);
            bn_fp32_to_fp16_row(v, (uint16_t *)cs->v_cache[il] + (size_t)pos * kv_dim, kv_dim);
        } else {
            memcpy((float *)cs->k_cache[il] + (size_t)pos * kv_dim, k, sizeof(float) * kv_dim);
            memcpy((float *)cs->v_cache[il] + (size_t)pos * kv_dim, v, sizeof(float) * kv_dim);
        }
    }

    // Group the query heads of a KV head (K/V read once per group) when that still leaves at
    // least two items per thread; otherwise one item per query head.
    const bool grouped = (int64_t)nb * nkv >= 2 * (int64_t)s->n_threads;
    attn_job job = {.c = c, .s = s, .cl = *cl, .il = il, .q_stride = q_stride, .gated = gated, .grouped = grouped};
    const int64_t macs = (int64_t)nb * nh * (max_pos + 1) * hd * 2; // scores + weighted sum (an upper bound)
    const int64_t n_items = (int64_t)nb * (grouped ? nkv : nh);
    bn_parallel_for(macs >= MIN_PARALLEL_WORK ? s->pool : NULL, n_items, attn_task, &job);
    matmul(s, &lw->attn_output, s->att, s->mo, nb);
}

// ---- Gated DeltaNet -------------------------------------------------------------------------
typedef struct {
    const bn_config *c;
    const bn_layer_weights *lw;
    bn_state *s;
    cols cl;
    int il, nb, conv_dim;
} gdn_job;

// gdn_heads_task: value heads [h0, h1), each running the recurrence over the chunk's tokens.
static void gdn_heads_task(void *ctx, int64_t h0, int64_t h1, int tid) {
    (void)tid;
    const gdn_job *job = ctx;
    const bn_config *c = job->c;
    bn_state *s = job->s;
    const int dk = c->ssm_d_state, dv = c->ssm_d_state, Hk = c->ssm_n_group, Hv = c->ssm_dt_rank;
    const float *dt_bias = job->lw->ssm_dt.data, *ssm_a = job->lw->ssm_a.data, *norm_w = job->lw->ssm_norm.data;
    for (int64_t h = h0; h < h1; h++) {
        const int kh = (int)(h % Hk); // GGUF tiled layout: value head h pairs with key head h mod Hk
        for (int t = 0; t < job->nb; t++) {
            bn_state *cs = col_state(s, &job->cl, t);
            float *S = cs->ssm[job->il] + (size_t)h * dk * dv;
            const float *conv_out = s->qg + (size_t)t * job->conv_dim; // [q | k | v] after conv+SiLU+norms
            const float *q = conv_out + (size_t)kh * dk;
            const float *k = conv_out + (size_t)Hk * dk + (size_t)kh * dk;
            const float *v = conv_out + (size_t)2 * Hk * dk + (size_t)h * dv;
            const float beta = bn_sigmoid(s->bb[(size_t)t * Hv + h]);
            const float g = bn_softplus(s->ab[(size_t)t * Hv + h] + dt_bias[h]) * ssm_a[h];
            const float alpha = expf(g);
            float *y = s->att + (size_t)t * Hv * dv + (size_t)h * dv;
            bn_gdn_step(S, q, k, v, alpha, beta, y, dk, dv);
            bn_snapshot *snap = col_snap(&job->cl, t);
            if (snap) // S of this head after token t
                memcpy(snap->data + (S - cs->recurrent), S, sizeof(float) * dk * dv);
            bn_gated_rmsnorm(y, y, s->z + (size_t)t * Hv * dv + (size_t)h * dv, norm_w, dv, c->norm_eps);
        }
    }
}

// gdn_conv_task: the causal conv + SiLU of channel blocks [b0, b1) (CONV_BLOCK channels each) over the chunk's
// tokens in order (each channel's window advances token by token), each column's slice of its window copied into its
// snapshot after its token, where it has one.
#define CONV_BLOCK 64
static void gdn_conv_task(void *ctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const gdn_job *job = ctx;
    const int K = job->c->ssm_conv_kernel, km1 = K - 1, C = job->conv_dim;
    const int c0 = (int)b0 * CONV_BLOCK, c1 = (int)b1 * CONV_BLOCK < C ? (int)b1 * CONV_BLOCK : C;
    const float *w = (const float *)job->lw->ssm_conv1d.data + (size_t)c0 * K;
    for (int t = 0; t < job->nb; t++) {
        float *mix = job->s->qg + (size_t)t * C + c0;
        bn_state *cs = col_state(job->s, &job->cl, t);
        float *win = cs->conv[job->il] + (size_t)c0 * km1;
        bn_conv1d_silu_step(mix, win, mix, w, c1 - c0, K);
        bn_snapshot *snap = col_snap(&job->cl, t);
        if (snap) memcpy(snap->data + (win - cs->recurrent), win, sizeof(float) * (size_t)km1 * (c1 - c0));
    }
}

// gdn_layer: s->mo = GatedDeltaNet(s->xn) for the nb columns cl, advancing their conv windows and S (copied into
// column t's snapshot after its token, where it has one).
static void gdn_layer(const bn_model *m, bn_state *s, int il, int nb, const cols *cl) {
    const bn_config *c = &m->cfg;
    const bn_layer_weights *lw = &m->w.layers[il];
    const int dk = c->ssm_d_state, Hk = c->ssm_n_group, Hv = c->ssm_dt_rank;
    const int conv_dim = 2 * Hk * dk + Hv * dk;
    const float q_scale = 1.0f / sqrtf((float)dk);

    matmul(s, &lw->attn_qkv, s->xn, s->qg, nb);  // mix {conv_dim, nb}
    matmul(s, &lw->attn_gate, s->xn, s->z, nb);  // z   {Hv*dv, nb}
    matmul(s, &lw->ssm_beta, s->xn, s->bb, nb);  // b   {Hv, nb}
    matmul(s, &lw->ssm_alpha, s->xn, s->ab, nb); // a   {Hv, nb}

    gdn_job job = {.c = c, .lw = lw, .s = s, .cl = *cl, .il = il, .nb = nb, .conv_dim = conv_dim};
    bn_pool *pool = (int64_t)nb * conv_dim * c->ssm_conv_kernel >= MIN_PARALLEL_WORK ? s->pool : NULL;
    bn_parallel_for(pool, (conv_dim + CONV_BLOCK - 1) / CONV_BLOCK, gdn_conv_task, &job);
    for (int t = 0; t < nb; t++) {
        float *mix = s->qg + (size_t)t * conv_dim;
        for (int j = 0; j < Hk; j++) {
            float *q = mix + (size_t)j * dk, *k = mix + (size_t)(Hk + j) * dk;
            bn_l2norm(q, q, dk, c->norm_eps);
            bn_l2norm(k, k, dk, c->norm_eps);
            for (int i = 0; i < dk; i++) q[i] *= q_scale;
        }
    }
    const int64_t work = (int64_t)nb * Hv * dk * dk * 4; // decay, read, update, output per state entry
    bn_parallel_for(work >= MIN_PARALLEL_WORK ? s->pool : NULL, Hv, gdn_heads_task, &job);
    matmul(s, &lw->ssm_out, s->att, s->mo, nb);
}

// ---- FFN ------------------------------------------------------------------------------------
// ffn: s->mo = ffn_down · (SiLU(ffn_gate · xn) ⊙ (ffn_up · xn)).
static void ffn(const bn_model *m, bn_state *s, int il, int nb) {
    const bn_layer_weights *lw = &m->w.layers[il];
    const int F = m->cfg.n_ff;
    matmul(s, &lw->ffn_gate, s->xn, s->gate, nb);
    matmul(s, &lw->ffn_up, s->xn, s->up, nb);
    rows_job job = {.y = s->gate, .x = s->up, .n = F}; // gate = SiLU(gate) ⊙ up, rows in parallel
    bn_parallel_for((int64_t)nb * F >= MIN_PARALLEL_WORK ? s->pool : NULL, nb, rows_task, &job);
    matmul(s, &lw->ffn_down, s->gate, s->mo, nb);
}

// ---- chunk ----------------------------------------------------------------------------------
// run_layers: the state's layers over the nb columns cl whose embeddings are in s->x (taps and snapshots of column
// t into its row of its out).
static void run_layers(const bn_model *m, bn_state *s, int nb, const cols *cl) {
    const bn_config *c = &m->cfg;
    const int H = c->n_embd;
    for (int il = 0; il < s->n_layers; il++) {
        const bn_layer_weights *lw = &m->w.layers[il];
        rmsnorm_rows(s, s->xn, s->x, &lw->attn_norm, nb, H, c->norm_eps);
        if (c->is_recurrent[il])
            gdn_layer(m, s, il, nb, cl);
        else
            attention_layer(m, s, il, nb, cl);
        add_rows(s->x, s->mo, (size_t)nb * H);

        rmsnorm_rows(s, s->xn, s->x, &lw->post_attention_norm, nb, H, c->norm_eps);
        ffn(m, s, il, nb);
        add_rows(s->x, s->mo, (size_t)nb * H);

        for (int t = 0; t < nb; t++) {
            const bn_forward_out *o = col_out(cl, t);
            if (!o || !o->taps) continue;
            for (int k = 0; k < o->n_taps; k++)
                if (o->tap_layers[k] == il)
                    memcpy(o->taps + ((size_t)col_row(cl, t) * o->n_taps + k) * H, s->x + (size_t)t * H,
                           sizeof(float) * H);
        }
    }
}

// row_reductions: what out asks of one logits row besides the row itself (argmax, lse, top-k) into its row `row`.
static void row_reductions(const float *logits, int V, const bn_forward_out *out, int row) {
    if (out->argmax) out->argmax[row] = bn_logits_argmax(logits, V);
    if (out->lse) out->lse[row] = bn_logits_lse(logits, V);
    if (out->topk > 0)
        bn_logits_topk_values(logits, V, out->topk, out->topk_ids + (size_t)row * out->topk,
                              out->topk_logits + (size_t)row * out->topk);
}

// head_rows: what out asks of the LM head (hidden, logits, argmax, lse, top-k) for the n_rows residual rows of
// s->x from row `first`, into out's rows out_row...
static void head_rows(const bn_model *m, bn_state *s, int first, int n_rows, const bn_forward_out *out, int out_row) {
    const bn_config *c = &m->cfg;
    const int H = c->n_embd;
    rmsnorm_rows(s, s->xn, s->x + (size_t)first * H, &m->w.output_norm, n_rows, H, c->norm_eps);
    if (out->hidden) memcpy(out->hidden + (size_t)out_row * H, s->xn, sizeof(float) * H * n_rows);
    if (!bn_forward_wants_head(out)) return;
    const size_t V = (size_t)c->n_vocab;
    // without out->logits the rows go to a scratch copy (argmax / top-k / lse only)
    float *logits = out->logits ? out->logits + (size_t)out_row * V : xmalloc(sizeof(float) * V * (size_t)n_rows);
    matmul(s, &m->w.output, s->xn, logits, n_rows);
    for (int r = 0; r < n_rows; r++) row_reductions(logits + r * V, (int)V, out, out_row + r);
    if (!out->logits) free(logits);
}

// forward_chunk: runs nb tokens (global indices t_off.., of n_total in this call) at s->pos through the
// state's layers; then the head, or with x_out the residual rows into x_out + t_off rows.
static void forward_chunk(const bn_model *m, bn_state *s, const int32_t *tokens, int nb, int t_off, int n_total,
                          const bn_forward_out *out, float *x_out) {
    const int H = m->cfg.n_embd;
    const int p0 = s->pos;
    for (int t = 0; t < nb; t++) bn_weight_row_f32(&m->w.token_embd, tokens[t], s->x + (size_t)t * H);
    lora_cols_own(s, nb);
    const cols cl = {.p0 = p0, .t_off = t_off, .out = out};
    run_layers(m, s, nb, &cl);
    s->pos = p0 + nb;
    if (out && out->snaps)
        for (int t = 0; t < nb; t++) out->snaps[t_off + t]->pos = p0 + t + 1;
    if (x_out) {
        memcpy(x_out + (size_t)t_off * H, s->x, sizeof(float) * H * (size_t)nb);
        return;
    }
    if (!out || (!bn_forward_wants_head(out) && !out->hidden)) return;
    // rows of this chunk that produce output: all of them, or only the very last token
    if (out->all_logits) head_rows(m, s, 0, nb, out, t_off);
    else if (t_off + nb == n_total) head_rows(m, s, nb - 1, 1, out, 0);
}

int32_t bn_logits_argmax(const float *l, int n) {
    int32_t best = 0;
    for (int v = 1; v < n; v++)
        if (l[v] > l[best]) best = v;
    return best;
}

float bn_logits_lse(const float *l, int n) {
    float m = l[0];
    for (int v = 1; v < n; v++) m = l[v] > m ? l[v] : m;
    double sum = 0.0;
    for (int v = 0; v < n; v++) sum += exp((double)l[v] - m);
    return (float)(m + log(sum));
}

int bn_forward_check(const bn_config *c, int pos, int n_ctx, size_t n_recurrent, const int32_t *tokens, int n,
                     const bn_forward_out *out, char *err, size_t errlen) {
    if (n < 0) return bn_err(err, errlen, "bn_forward: negative token count %d", n);
    if (n == 0 && out && (bn_forward_wants_head(out) || out->hidden))
        return bn_err(err, errlen, "bn_forward: no tokens to produce output for");
    if (out && (out->topk < 0 || out->topk > BN_FORWARD_TOPK_MAX || out->topk > c->n_vocab ||
                (out->topk > 0 && (!out->topk_ids || !out->topk_logits))))
        return bn_err(err, errlen, "bn_forward: topk %d must be 0..%d (<= n_vocab %d) with ids and logits", out->topk,
                      BN_FORWARD_TOPK_MAX, c->n_vocab);
    if ((int64_t)pos + n > n_ctx)
        return bn_err(err, errlen, "context overflow: position %d + %d tokens exceeds n_ctx %d", pos, n, n_ctx);
    for (int t = 0; tokens && t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return bn_err(err, errlen, "bad token id %d at index %d (vocabulary has %d tokens)", tokens[t], t, c->n_vocab);
    if (out && out->taps)
        for (int k = 0; k < out->n_taps; k++)
            if (!out->tap_layers || out->tap_layers[k] < 0 || out->tap_layers[k] >= c->n_layer)
                return bn_err(err, errlen, "bad tap layer %d (model has %d layers)",
                              out->tap_layers ? out->tap_layers[k] : -1, c->n_layer);
    if (out && out->snaps)
        for (int t = 0; t < n; t++)
            if (!out->snaps[t] || out->snaps[t]->n != n_recurrent)
                return bn_err(err, errlen, "snaps[%d] is missing or belongs to another model (use bn_snapshot_new)", t);
    return 0;
}

int bn_forward(const bn_model *m, bn_state *s, const int32_t *tokens, int n, bn_forward_out *out, char *err,
               size_t errlen) {
    if (s->m != m) return bn_err(err, errlen, "bn_forward: state was created for a different model");
    if (s->n_layers != m->cfg.n_layer)
        return bn_err(err, errlen, "bn_forward: the state holds layers [0, %d) only (use bn_forward_front)",
                      s->n_layers);
    if (bn_forward_check(&m->cfg, s->pos, s->n_ctx, s->n_recurrent, tokens, n, out, err, errlen) != 0) return -1;
    if (n == 0) return 0;

    for (int t0 = 0; t0 < n; t0 += s->n_batch) {
        const int nb = n - t0 < s->n_batch ? n - t0 : s->n_batch;
        forward_chunk(m, s, tokens + t0, nb, t0, n, out, NULL);
    }
    return 0;
}

// multi_check: the inputs of a ragged pass (fn names the caller in errors): n >= 1 distinct states of m holding the
// first one's layers (all of them, or with front the first one's n_layers) and KV type, n_tok[i] >= 1 tokens each,
// Σ n_tok within the first state's batch rows (its scratch runs the pass) and each sequence's tokens within its own
// and the first state's n_ctx (its attention scratch), outs valid for bn_forward_check (front: taps and snapshots
// only); 0 or -1 with err.
static int multi_check(const char *fn, const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens,
                       const int *n_tok, int n, bn_forward_out *const *outs, bool front, char *err, size_t errlen) {
    const bn_config *c = &m->cfg;
    bn_state *s = seqs[0];
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (n_tok[i] < 1 || !tokens[i])
            return bn_err(err, errlen, "%s: sequence %d has %d tokens (at least 1)", fn, i, tokens[i] ? n_tok[i] : 0);
        total += n_tok[i];
    }
    if (!s || total > s->n_batch)
        return bn_err(err, errlen, "%s: %d tokens of %d sequences (the first state holds %d rows)", fn, total, n,
                      s ? s->n_batch : 0);
    const int n_layers = front ? s->n_layers : c->n_layer;
    for (int i = 0; i < n; i++) {
        const bn_state *q = seqs[i];
        if (!q || q->m != m || q->n_layers != n_layers || q->kv_type != s->kv_type || q->lora != s->lora)
            return bn_err(err, errlen, "%s: sequence %d is missing or not a state of this model with the first one's "
                          "layers, KV type and adapters", fn, i);
        for (int u = 0; u < i; u++)
            if (seqs[u] == q) return bn_err(err, errlen, "%s: sequences %d and %d share a state", fn, u, i);
        if (q->pos + n_tok[i] > s->n_ctx)
            return bn_err(err, errlen, "%s: sequence %d at %d + %d tokens exceeds the first state's n_ctx %d", fn, i,
                          q->pos, n_tok[i], s->n_ctx);
        const bn_forward_out *o = outs ? outs[i] : NULL;
        if (front && o && (bn_forward_wants_head(o) || o->hidden))
            return bn_err(err, errlen, "%s: sequence %d: logits / argmax / top-k / hidden come from the last layers' "
                          "backend", fn, i);
        if (bn_forward_check(c, q->pos, q->n_ctx, q->n_recurrent, tokens[i], n_tok[i], o, err, errlen) != 0) return -1;
    }
    return 0;
}

// The columns of a ragged pass, one per token (cols' arrays).
typedef struct {
    bn_state *seq[BN_MAX_BATCH];
    int pos[BN_MAX_BATCH], row[BN_MAX_BATCH];
    const bn_forward_out *out[BN_MAX_BATCH];
} ragged;

// multi_layers: the layers of a checked ragged pass: sequence i's tokens embedded and run through its layers at its
// positions (the first state's scratch and threads), its snapshots and position advanced; the residual rows are left
// in seqs[0]->x {n_embd, Σ n_tok}, described by rg. Returns the column count.
static int multi_layers(const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens, const int *n_tok,
                        int n, bn_forward_out *const *outs, ragged *rg) {
    bn_state *s = seqs[0];
    const int H = m->cfg.n_embd;
    int nb = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n_tok[i]; j++, nb++) {
            rg->seq[nb] = seqs[i], rg->pos[nb] = seqs[i]->pos + j, rg->row[nb] = j;
            rg->out[nb] = outs ? outs[i] : NULL;
            bn_weight_row_f32(&m->w.token_embd, tokens[i][j], s->x + (size_t)nb * H);
            s->lora_cols[nb] = seqs[i]->lora_scale;
        }
    const cols cl = {.seqs = rg->seq, .pos = rg->pos, .outs = rg->out, .rows = rg->row};
    run_layers(m, s, nb, &cl);
    for (int t = 0; t < nb; t++) {
        bn_snapshot *snap = col_snap(&cl, t);
        if (snap) snap->pos = rg->pos[t] + 1;
    }
    for (int i = 0; i < n; i++) seqs[i]->pos += n_tok[i];
    return nb;
}

int bn_forward_multi(const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens, const int *n_tok, int n,
                     bn_forward_out *const *outs, char *err, size_t errlen) {
    const bn_config *c = &m->cfg;
    if (n < 0) return bn_err(err, errlen, "bn_forward_multi: negative sequence count %d", n);
    if (n == 0) return 0;
    if (multi_check("bn_forward_multi", m, seqs, tokens, n_tok, n, outs, false, err, errlen) != 0) return -1;
    bn_state *s = seqs[0]; // runs the pass: its scratch rows, threads and attention scratch
    const int H = c->n_embd;
    const size_t V = (size_t)c->n_vocab;
    ragged rg;
    const int nb = multi_layers(m, seqs, tokens, n_tok, n, outs, &rg);
    // the rows that produce output (each sequence's last, or every row with all_logits) through the head at once
    // (its weights read once), then each row to its out
    int hr[BN_MAX_BATCH], n_hr = 0;
    bool head = false;
    for (int t = 0; t < nb; t++) {
        const bn_forward_out *o = rg.out[t];
        if (!o || (!bn_forward_wants_head(o) && !o->hidden)) continue;
        const bool last = t + 1 == nb || rg.seq[t + 1] != rg.seq[t];
        if (!o->all_logits && !last) continue;
        rmsnorm_rows(s, s->xn + (size_t)n_hr * H, s->x + (size_t)t * H, &m->w.output_norm, 1, H, c->norm_eps);
        s->lora_cols[n_hr] = rg.seq[t]->lora_scale;
        hr[n_hr++] = t;
        head |= bn_forward_wants_head(o);
    }
    float *logits = head ? xmalloc(sizeof(float) * V * (size_t)n_hr) : NULL;
    if (head) matmul(s, &m->w.output, s->xn, logits, n_hr);
    for (int r = 0; r < n_hr; r++) {
        const bn_forward_out *o = rg.out[hr[r]];
        const int row = o->all_logits ? rg.row[hr[r]] : 0;
        if (o->hidden) memcpy(o->hidden + (size_t)row * H, s->xn + (size_t)r * H, sizeof(float) * H);
        if (!bn_forward_wants_head(o)) continue;
        if (o->logits) memcpy(o->logits + (size_t)row * V, logits + (size_t)r * V, sizeof(float) * V);
        row_reductions(logits + (size_t)r * V, (int)V, o, row);
    }
    free(logits);
    return 0;
}

// one_each: tokp[t] = &tokens[t] and ones[t] = 1 for t < n (<= BN_MAX_BATCH): a one-token step as a ragged pass.
static void one_each(const int32_t *tokens, int n, const int32_t **tokp, int *ones) {
    for (int t = 0; t < n; t++) tokp[t] = &tokens[t], ones[t] = 1;
}

int bn_forward_batch(const bn_model *m, bn_state *const *seqs, const int32_t *tokens, int n,
                     bn_forward_out *const *outs, char *err, size_t errlen) {
    if (n > BN_MAX_BATCH)
        return bn_err(err, errlen, "bn_forward_batch: %d sequences (the first state holds %d rows)", n,
                      seqs[0] ? seqs[0]->n_batch : 0);
    const int32_t *tokp[BN_MAX_BATCH];
    int ones[BN_MAX_BATCH];
    one_each(tokens, n, tokp, ones);
    return bn_forward_multi(m, seqs, tokp, ones, n, outs, err, errlen);
}

// multi_front: bn_forward_multi_front (fn names the caller in errors).
static int multi_front(const char *fn, const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens,
                       const int *n_tok, int n, float *x_out, bn_forward_out *const *outs, char *err, size_t errlen) {
    if (n < 0) return bn_err(err, errlen, "%s: negative sequence count %d", fn, n);
    if (n == 0) return 0;
    if (!x_out) return bn_err(err, errlen, "%s: no x_out", fn);
    if (multi_check(fn, m, seqs, tokens, n_tok, n, outs, true, err, errlen) != 0) return -1;
    ragged rg;
    const int nb = multi_layers(m, seqs, tokens, n_tok, n, outs, &rg);
    memcpy(x_out, seqs[0]->x, sizeof(float) * (size_t)m->cfg.n_embd * (size_t)nb);
    return 0;
}

int bn_forward_multi_front(const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens, const int *n_tok,
                           int n, float *x_out, bn_forward_out *const *outs, char *err, size_t errlen) {
    return multi_front("bn_forward_multi_front", m, seqs, tokens, n_tok, n, x_out, outs, err, errlen);
}

int bn_forward_front(const bn_model *m, bn_state *s, const int32_t *tokens, int n, float *x_out,
                     const bn_forward_out *out, char *err, size_t errlen) {
    if (s->m != m) return bn_err(err, errlen, "bn_forward_front: state was created for a different model");
    if (!x_out) return bn_err(err, errlen, "bn_forward_front: no x_out");
    if (out && (bn_forward_wants_head(out) || out->hidden))
        return bn_err(err, errlen, "bn_forward_front: logits / argmax / top-k / hidden come from the last layers' backend");
    if (bn_forward_check(&m->cfg, s->pos, s->n_ctx, s->n_recurrent, tokens, n, out, err, errlen) != 0) return -1;
    for (int t0 = 0; t0 < n; t0 += s->n_batch) {
        const int nb = n - t0 < s->n_batch ? n - t0 : s->n_batch;
        forward_chunk(m, s, tokens + t0, nb, t0, n, out, x_out);
    }
    return 0;
}
