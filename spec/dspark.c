// spec/dspark.c — the DSpark drafter's state and forward math (docs/dspark.md §4): encoder + K/V injection, the block
// pass, the Markov chain and the confidence head, one state or several at once. Loading both file conventions into
// one struct is in spec/dspark_load.c; the speculative loop in spec/dspark_spec.c.
#include "spec/dspark.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "base/threads.h"
#include "base/util.h"
#include "quant/quant.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>

#define BN_DSPARK_CHUNK 64 // context rows per encoder / K-V injection chunk

struct bn_dstate {
    int n_ctx;        // positions (context + block rows)
    int n_cache;      // context rows present
    int rows;         // scratch rows (max(chunk, B))
    int n_layer;
    bn_pool *pool;
    bool own_pool;    // false when borrowed (bn_dstate_new_pool)
    float **k_cache;  // [n_layer] -> {nkv*hd, n_ctx}: K after k_norm + RoPE
    float **v_cache;  // [n_layer] -> {nkv*hd, n_ctx}
    float *feat_g;    // {E, rows} encoder output g
    float *x, *xn, *mo; // {E, rows}
    float *q;         // {nh*hd, rows}
    float *k, *v;     // {nkv*hd, rows}
    float *att;       // {nh*hd, rows}
    float *gate, *up; // {F, rows}
    float *scores;    // {n_ctx}
    float *bias;      // {V} Markov bias
    float *logit;     // {V} biased logits
    float *w1;        // {R} W1[prev]
    struct bn_dstate **row_owner; // [rows] the rows of a batched pass (bn_drafter_draft_multi / _process_multi): the
    int *row_pos, *row_kv;        //   state (KV cache) of each, its position and the rows it attends to
    float *tapbuf;                // {C*E, rows} the taps of a batched K/V injection's rows
    void *work;
    size_t work_size;
};

// ---- state -----------------------------------------------------------------------------------

static size_t max_work(const bn_drafter *d, int rows) {
    const bn_weight *ws[] = {&d->fc, &d->output, &d->markov_b};
    size_t m = 0;
    for (int i = 0; i < 3; i++) {
        size_t z = bn_matmul_work_size(ws[i], rows); // markov_b: the chains of up to `rows` sequences
        if (z > m) m = z;
    }
    for (int il = 0; il < d->cfg.n_layer; il++) {
        const bn_drafter_layer *ly = &d->layers[il];
        const bn_weight *lw[] = {&ly->attn_q, &ly->attn_k, &ly->attn_v, &ly->attn_output,
                                 &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down};
        for (int i = 0; i < 7; i++) {
            size_t z = bn_matmul_work_size(lw[i], rows);
            if (z > m) m = z;
        }
    }
    return m;
}

bn_dstate *bn_dstate_new(const bn_drafter *d, int n_ctx, int n_threads) {
    bn_dstate *s = bn_dstate_new_pool(d, n_ctx, bn_pool_new(n_threads > 0 ? n_threads : bn_n_threads_default()));
    s->own_pool = true;
    return s;
}

bn_dstate *bn_dstate_new_pool(const bn_drafter *d, int n_ctx, bn_pool *pool) {
    const bn_drafter_config *c = &d->cfg;
    bn_dstate *s = xcalloc(1, sizeof *s);
    s->n_ctx = n_ctx + c->block_size;
    s->rows = c->block_size > BN_DSPARK_CHUNK ? c->block_size : BN_DSPARK_CHUNK;
    s->pool = pool;
    const size_t kvw = (size_t)c->n_head_kv * c->head_dim, qw = (size_t)c->n_head * c->head_dim;
    const size_t E = (size_t)c->n_embd, R = (size_t)s->rows;
    s->n_layer = c->n_layer;
    s->k_cache = xcalloc((size_t)c->n_layer, sizeof(float *));
    s->v_cache = xcalloc((size_t)c->n_layer, sizeof(float *));
    for (int il = 0; il < c->n_layer; il++) {
        s->k_cache[il] = bn_aligned_alloc(sizeof(float) * kvw * (size_t)s->n_ctx);
        s->v_cache[il] = bn_aligned_alloc(sizeof(float) * kvw * (size_t)s->n_ctx);
    }
    s->feat_g = bn_aligned_alloc(sizeof(float) * E * R);
    s->x = bn_aligned_alloc(sizeof(float) * E * R);
    s->xn = bn_aligned_alloc(sizeof(float) * E * R);
    s->mo = bn_aligned_alloc(sizeof(float) * E * R);
    s->q = bn_aligned_alloc(sizeof(float) * qw * R);
    s->att = bn_aligned_alloc(sizeof(float) * qw * R);
    s->k = bn_aligned_alloc(sizeof(float) * kvw * R);
    s->v = bn_aligned_alloc(sizeof(float) * kvw * R);
    s->gate = bn_aligned_alloc(sizeof(float) * (size_t)c->n_ff * R);
    s->up = bn_aligned_alloc(sizeof(float) * (size_t)c->n_ff * R);
    s->scores = bn_aligned_alloc(sizeof(float) * (size_t)s->n_ctx);
    s->bias = bn_aligned_alloc(sizeof(float) * (size_t)c->n_vocab);
    s->logit = bn_aligned_alloc(sizeof(float) * (size_t)c->n_vocab);
    s->w1 = bn_aligned_alloc(sizeof(float) * (size_t)c->markov_rank);
    s->row_owner = xcalloc(R, sizeof *s->row_owner);
    s->row_pos = xcalloc(R, sizeof *s->row_pos);
    s->row_kv = xcalloc(R, sizeof *s->row_kv);
    s->tapbuf = bn_aligned_alloc(sizeof(float) * E * (size_t)c->n_taps * R);
    s->work_size = max_work(d, s->rows);
    s->work = s->work_size ? bn_aligned_alloc(s->work_size) : NULL;
    return s;
}

void bn_dstate_free(bn_dstate *s) {
    if (!s) return;
    for (int il = 0; il < s->n_layer; il++) {
        free(s->k_cache[il]);
        free(s->v_cache[il]);
    }
    free(s->k_cache);
    free(s->v_cache);
    void *bufs[] = {s->feat_g, s->x, s->xn, s->mo, s->q, s->att, s->k, s->v, s->gate, s->up, s->scores, s->bias,
                    s->logit, s->w1, s->work, s->row_owner, s->row_pos, s->row_kv, s->tapbuf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    if (s->own_pool) bn_pool_free(s->pool);
    free(s);
}

int bn_dstate_n_cache(const bn_dstate *s) { return s->n_cache; }

int bn_dstate_truncate(bn_dstate *s, int n) {
    if (n < s->n_cache) s->n_cache = n < 0 ? 0 : n;
    return s->n_cache;
}

// ---- math ------------------------------------------------------------------------------------

static void mm(bn_dstate *s, const bn_weight *w, const float *x, float *y, int n) {
    bn_matmul(w, x, y, n, s->work, s->pool);
}

int bn_drafter_encode(const bn_drafter *d, bn_dstate *s, const float *taps, int n, float *g) {
    const int E = d->cfg.n_embd;
    const size_t row = (size_t)d->cfg.n_taps * E;
    for (int t0 = 0; t0 < n; t0 += s->rows) {
        int nb = n - t0 < s->rows ? n - t0 : s->rows;
        mm(s, &d->fc, taps + (size_t)t0 * row, g + (size_t)t0 * E, nb); // fc: C·E → E
        for (int t = 0; t < nb; t++) {
            float *gt = g + (size_t)(t0 + t) * E;
            bn_rmsnorm(gt, gt, d->hidden_norm.data, E, d->cfg.norm_eps);
        }
    }
    return 0;
}

// head_norm_rope: per head RMSNorm(x; w) then NEOX RoPE at pos, over n_heads heads of x.
static void head_norm_rope(const bn_drafter_config *c, float *x, int n_heads, const float *w, int pos) {
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * c->head_dim;
        bn_rmsnorm(xh, xh, w, c->head_dim, c->norm_eps);
        bn_rope_neox(xh, c->head_dim, c->n_rot, pos, c->rope_base);
    }
}

int bn_drafter_process_multi(const bn_drafter *d, const bn_process_seq *seqs, int n, char *err, size_t errlen) {
    const bn_drafter_config *c = &d->cfg;
    const int E = c->n_embd, kvw = c->n_head_kv * c->head_dim;
    const size_t row = (size_t)c->n_taps * E;
    bn_dstate *s = NULL; // the scratch state: the first with rows to process
    for (int i = 0; i < n; i++) {
        const bn_process_seq *q = &seqs[i];
        if (q->pos0 != q->s->n_cache)
            return bn_err(err, errlen, "drafter: process at position %d but the cache holds %d rows", q->pos0,
                          q->s->n_cache);
        if (q->n < 0 || q->pos0 + q->n + c->block_size > q->s->n_ctx)
            return bn_err(err, errlen, "drafter: context full (%d + %d rows)", q->pos0, q->n);
        for (int j = 0; j < i; j++)
            if (seqs[j].s == q->s) return bn_err(err, errlen, "drafter: sequences %d and %d share a state", j, i);
        if (!s && q->n > 0) s = q->s;
    }
    if (!s) return 0;
    // the rows of every sequence one after another, in chunks of the scratch rows (each row's K/V depend on its
    // own taps alone: a chunk may hold the end of one sequence and the start of the next), their taps gathered into
    // the scratch's tap rows
    int seq = 0, t = 0; // the next row: row t of sequence seq
    for (;;) {
        int nb = 0;
        while (seq < n && nb < s->rows) {
            const bn_process_seq *q = &seqs[seq];
            if (t >= q->n) {
                seq++, t = 0;
                continue;
            }
            const int take = q->n - t < s->rows - nb ? q->n - t : s->rows - nb;
            for (int r = 0; r < take; r++) {
                s->row_owner[nb + r] = q->s;
                s->row_pos[nb + r] = q->pos0 + t + r;
            }
            memcpy(s->tapbuf + (size_t)nb * row, q->taps + (size_t)t * row, sizeof(float) * row * (size_t)take);
            nb += take, t += take;
        }
        if (nb == 0) break;
        bn_drafter_encode(d, s, s->tapbuf, nb, s->feat_g);
        // context rows: K = RoPE(k_norm(W_k g)), V = W_v g; no attn_norm, Q, FFN or residual (§4.3)
        for (int il = 0; il < c->n_layer; il++) {
            const bn_drafter_layer *ly = &d->layers[il];
            mm(s, &ly->attn_k, s->feat_g, s->k, nb);
            mm(s, &ly->attn_v, s->feat_g, s->v, nb);
            for (int r = 0; r < nb; r++) {
                bn_dstate *o = s->row_owner[r];
                const int pos = s->row_pos[r];
                float *kt = s->k + (size_t)r * kvw;
                head_norm_rope(c, kt, c->n_head_kv, ly->attn_k_norm.data, pos);
                memcpy(o->k_cache[il] + (size_t)pos * kvw, kt, sizeof(float) * (size_t)kvw);
                memcpy(o->v_cache[il] + (size_t)pos * kvw, s->v + (size_t)r * kvw, sizeof(float) * (size_t)kvw);
            }
        }
    }
    for (int i = 0; i < n; i++) seqs[i].s->n_cache = seqs[i].pos0 + seqs[i].n;
    return 0;
}

int bn_drafter_process(const bn_drafter *d, bn_dstate *s, const float *taps, int n, int pos0, char *err,
                       size_t errlen) {
    const bn_process_seq q = {.s = s, .taps = taps, .n = n, .pos0 = pos0};
    return bn_drafter_process_multi(d, &q, 1, err, errlen);
}

// A block pass over the rows of several sequences at once: the rows of sequence i are rows row0[i] ..
// row0[i] + n_rows[i] − 1 of the scratch state's buffers; each attends to its own state's cache.
typedef struct {
    const bn_drafter_config *c;
    bn_dstate *scratch;       // the state whose buffers hold every row (q, att)
    bn_dstate *const *owner;  // [rows] the state (KV cache) of each row
    const int *n_kv;          // [rows] context + block rows that row attends to
    int il;
} attn_job;

// attn_task: items = (row, head) pairs; non-causal: every block row sees all n_kv rows of its sequence.
static void attn_task(void *vctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    attn_job *j = vctx;
    const bn_drafter_config *c = j->c;
    const int hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd, group = c->n_head / c->n_head_kv;
    float *scores = NULL;
    int scores_n = 0;
    for (int64_t it = i0; it < i1; it++) {
        int row = (int)(it / c->n_head), h = (int)(it % c->n_head), kvh = h / group;
        const bn_dstate *o = j->owner[row];
        if (j->n_kv[row] > scores_n) {
            free(scores);
            scores_n = j->n_kv[row];
            scores = xmalloc(sizeof(float) * (size_t)scores_n);
        }
        bn_attention_head(j->scratch->att + (size_t)row * qw + (size_t)h * hd,
                          j->scratch->q + (size_t)row * qw + (size_t)h * hd, o->k_cache[j->il] + (size_t)kvh * hd,
                          o->v_cache[j->il] + (size_t)kvh * hd, j->n_kv[row], kvw, hd, 1.0f / sqrtf((float)hd), scores);
    }
    free(scores);
}

// block_check: the errors of a block pass of n_rows rows for anchor id_last at n_past on s. Returns 0 or -1 with err.
static int block_check(const bn_drafter *d, const bn_dstate *s, int32_t id_last, int n_past, int n_rows, char *err,
                       size_t errlen) {
    const bn_drafter_config *c = &d->cfg;
    if (n_past != s->n_cache)
        return bn_err(err, errlen, "drafter: block at position %d but the cache holds %d context rows", n_past,
                      s->n_cache);
    if (n_rows < 1 || n_rows > c->block_size || n_rows > s->rows)
        return bn_err(err, errlen, "drafter: block of %d rows (block size %d)", n_rows, c->block_size);
    if (n_past + n_rows > s->n_ctx) return bn_err(err, errlen, "drafter: context full");
    if (id_last < 0 || id_last >= c->n_vocab) return bn_err(err, errlen, "drafter: token %d out of range", id_last);
    return 0;
}

// block_rows: the block pass of n sequences (checked, total rows <= scratch->rows) in scratch's buffers: sequence i
// (state ss[i], anchor ids[i] at n_past[i], n_rows[i] rows) in the rows from row0[i] on. Writes h [rows][E] (after
// output_norm) and base logits [rows][V] of all rows in that order (either may be NULL); the block rows' K/V, written
// after each sequence's context rows, are dropped (n_cache is not advanced).
static void block_rows(const bn_drafter *d, bn_dstate *scratch, bn_dstate *const *ss, const int32_t *ids,
                       const int *n_past, const int *n_rows, int n, float *h, float *base) {
    const bn_drafter_config *c = &d->cfg;
    const int E = c->n_embd, hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd, F = c->n_ff;
    bn_dstate **owner = scratch->row_owner;
    int *pos = scratch->row_pos, *n_kv = scratch->row_kv;
    int rows = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < n_rows[i]; r++, rows++) {
            owner[rows] = ss[i];
            pos[rows] = n_past[i] + r;
            n_kv[rows] = n_past[i] + n_rows[i];
            // 1–2. embeddings of [id_last, MASK...] + log-SNR embedding (anchor row 0, mask rows after)
            float *xr = scratch->x + (size_t)rows * E;
            bn_weight_row_f32(&d->token_embd, r == 0 ? ids[i] : c->mask_token_id, xr);
            if (c->log_snr) bn_axpy_f32(xr, 1.0f, d->snr_emb + (size_t)(r == 0 ? 0 : 1) * E, E);
        }
    bn_dstate *s = scratch;
    // 3. layers
    for (int il = 0; il < c->n_layer; il++) {
        const bn_drafter_layer *ly = &d->layers[il];
        for (int i = 0; i < rows; i++)
            bn_rmsnorm(s->xn + (size_t)i * E, s->x + (size_t)i * E, ly->attn_norm.data, E, c->norm_eps);
        mm(s, &ly->attn_q, s->xn, s->q, rows);
        mm(s, &ly->attn_k, s->xn, s->k, rows);
        mm(s, &ly->attn_v, s->xn, s->v, rows);
        for (int i = 0; i < rows; i++) {
            head_norm_rope(c, s->q + (size_t)i * qw, c->n_head, ly->attn_q_norm.data, pos[i]);
            head_norm_rope(c, s->k + (size_t)i * kvw, c->n_head_kv, ly->attn_k_norm.data, pos[i]);
            // block rows go after their sequence's context rows (temporary: n_cache is not advanced)
            memcpy(owner[i]->k_cache[il] + (size_t)pos[i] * kvw, s->k + (size_t)i * kvw, sizeof(float) * (size_t)kvw);
            memcpy(owner[i]->v_cache[il] + (size_t)pos[i] * kvw, s->v + (size_t)i * kvw, sizeof(float) * (size_t)kvw);
        }
        attn_job job = {.c = c, .scratch = s, .owner = owner, .n_kv = n_kv, .il = il};
        bn_parallel_for(s->pool, (int64_t)rows * c->n_head, attn_task, &job);
        mm(s, &ly->attn_output, s->att, s->mo, rows);
        for (int i = 0; i < rows; i++) {
            float *xi = s->x + (size_t)i * E;
            bn_axpy_f32(xi, 1.0f, s->mo + (size_t)i * E, E);
            bn_rmsnorm(s->xn + (size_t)i * E, xi, ly->ffn_norm.data, E, c->norm_eps);
        }
        mm(s, &ly->ffn_gate, s->xn, s->gate, rows);
        mm(s, &ly->ffn_up, s->xn, s->up, rows);
        bn_swiglu(s->gate, s->gate, s->up, F * rows);
        mm(s, &ly->ffn_down, s->gate, s->mo, rows);
        for (int i = 0; i < rows; i++) bn_axpy_f32(s->x + (size_t)i * E, 1.0f, s->mo + (size_t)i * E, E);
    }
    // 4. output norm + LM head
    for (int i = 0; i < rows; i++)
        bn_rmsnorm(s->xn + (size_t)i * E, s->x + (size_t)i * E, d->output_norm.data, E, c->norm_eps);
    if (h) memcpy(h, s->xn, sizeof(float) * (size_t)E * rows);
    if (base) mm(s, &d->output, s->xn, base, rows);
}

int bn_drafter_block(const bn_drafter *d, bn_dstate *s, int32_t id_last, int n_past, int n_rows, float *h,
                     float *base, char *err, size_t errlen) {
    if (block_check(d, s, id_last, n_past, n_rows, err, errlen) != 0) return -1;
    block_rows(d, s, &s, &id_last, &n_past, &n_rows, 1, h, base);
    return 0;
}

// argmax_skip: index of the largest l[v], v != skip; ties → lowest id.
static int32_t argmax_skip(const float *l, int n, int skip) {
    int32_t best = -1;
    for (int v = 0; v < n; v++) {
        if (v == skip) continue;
        if (best < 0 || l[v] > l[best]) best = v;
    }
    return best;
}

void bn_drafter_step_logits(const bn_drafter *d, bn_dstate *s, const float *base_row, int32_t prev, float *logits) {
    const int V = d->cfg.n_vocab;
    // bias[v] = scale · Σ_r W1[prev][r] · W2[v][r]
    bn_weight_row_f32(&d->markov_a, prev, s->w1);
    mm(s, &d->markov_b, s->w1, s->bias, 1);
    for (int v = 0; v < V; v++) logits[v] = base_row[v] + d->markov_b_scale * s->bias[v];
}

// One sequence's Markov chain in markov_multi.
typedef struct {
    bn_dstate *s;        // its state (logits scratch)
    const float *base;   // [n][V] base logits of its block rows
    const float *h;      // [n][E] their hidden rows (confidence head)
    int n;               // rows
    int32_t id_last;     // prev_0
    int32_t *drafts;     // out: room for n
    float *conf;         // out: c_i (may be NULL)
    int count;           // out: drafts written
} chain_seq;

// markov_multi: the Markov chains of g sequences together (docs/dspark.md §4.5–4.6): at step i every live chain looks up
// W1[prev_i], one W2 product (scratch's pool and work) takes all their columns, then each chain's logits
// base_i + scale·W2·W1[prev_i], confidence c_i = σ(w · [h_i ; W1[prev_i]] + b) and draft argmax (skipping MASK,
// ties → lowest id). A chain stops at an invalid prev (MASK never evaluated), at the first c_i < p_min (p_min > 0) or after
// its rows.
static void markov_multi(const bn_drafter *d, bn_dstate *scratch, chain_seq *q, int g, float p_min) {
    const bn_drafter_config *c = &d->cfg;
    const int V = c->n_vocab, E = c->n_embd, R = c->markov_rank;
    int max_n = 0;
    for (int k = 0; k < g; k++) {
        q[k].count = 0;
        if (q[k].n > max_n) max_n = q[k].n;
    }
    float *w1 = xmalloc(sizeof(float) * (size_t)R * (size_t)g), *bias = xmalloc(sizeof(float) * (size_t)V * (size_t)g);
    int live[BN_DRAFT_MULTI_MAX];
    bool stopped[BN_DRAFT_MULTI_MAX] = {false};
    for (int i = 0; i < max_n; i++) {
        int nl = 0;
        for (int k = 0; k < g; k++) {
            const int32_t prev = i == 0 ? q[k].id_last : q[k].drafts[i - 1];
            if (stopped[k] || i >= q[k].n) continue;
            if (prev == c->mask_token_id || prev < 0 || prev >= V) { // never evaluate with prev = MASK
                stopped[k] = true;
                continue;
            }
            bn_weight_row_f32(&d->markov_a, prev, w1 + (size_t)nl * R);
            live[nl++] = k;
        }
        if (nl == 0) break;
        mm(scratch, &d->markov_b, w1, bias, nl); // bias[j][v] = Σ_r W1[prev_j][r] · W2[v][r]
        for (int j = 0; j < nl; j++) {
            chain_seq *cq = &q[live[j]];
            float *logit = cq->s->logit;
            const float *base_i = cq->base + (size_t)i * V, *bias_j = bias + (size_t)j * V;
            for (int v = 0; v < V; v++) logit[v] = base_i[v] + d->markov_b_scale * bias_j[v];
            float ci = 1.0f;
            if (c->has_conf) {
                float z = bn_dot_f32(d->conf_wf, cq->h + (size_t)i * E, E);
                if (c->conf_in > E) z += bn_dot_f32(d->conf_wf + E, w1 + (size_t)j * R, R);
                ci = bn_sigmoid(z + ((const float *)d->conf_b.data)[0]);
            }
            if (cq->conf) cq->conf[i] = ci;
            if (p_min > 0 && ci < p_min) {
                stopped[live[j]] = true;
                continue;
            }
            cq->drafts[i] = argmax_skip(logit, V, c->mask_token_id);
            cq->count = i + 1;
        }
    }
    free(w1);
    free(bias);
}

int bn_drafter_markov(const bn_drafter *d, bn_dstate *s, const float *base, const float *h, int n, int32_t id_last,
                      float p_min, int32_t *drafts, float *conf) {
    chain_seq q = {.s = s, .base = base, .h = h, .n = n, .id_last = id_last, .drafts = drafts, .conf = conf};
    markov_multi(d, s, &q, 1, p_min);
    return q.count;
}

int bn_drafter_draft_multi(const bn_drafter *d, bn_draft_seq *seqs, int n, float p_min, char *err, size_t errlen) {
    const bn_drafter_config *c = &d->cfg;
    const int E = c->n_embd, V = c->n_vocab;
    int n_active = 0, max_rows = 0, all_rows = 0;
    for (int i = 0; i < n; i++) {
        bn_draft_seq *q = &seqs[i];
        q->n_drafts = 0;
        if (q->n_max > c->block_size) q->n_max = c->block_size;
        if (q->n_max <= 0 || q->id_last == c->mask_token_id) continue; // nothing to draft (never after MASK)
        for (int j = 0; j < i; j++)
            if (seqs[j].s == q->s) return bn_err(err, errlen, "drafter: sequences %d and %d share a state", j, i);
        if (block_check(d, q->s, q->id_last, q->n_past, q->n_max, err, errlen) != 0) return -1;
        n_active++, all_rows += q->n_max;
        if (q->s->rows > max_rows) max_rows = q->s->rows;
    }
    if (n_active == 0) return 0;
    if (max_rows > all_rows) max_rows = all_rows; // the most rows one block pass holds
    float *h = xmalloc(sizeof(float) * (size_t)E * (size_t)max_rows);
    float *base = xmalloc(sizeof(float) * (size_t)V * (size_t)max_rows);
    bn_dstate *ss[BN_DRAFT_MULTI_MAX];
    int32_t ids[BN_DRAFT_MULTI_MAX];
    int n_past[BN_DRAFT_MULTI_MAX], n_rows[BN_DRAFT_MULTI_MAX], at[BN_DRAFT_MULTI_MAX];
    for (int i = 0; i < n;) {
        // a group: the next sequences whose rows fit in the first one's scratch rows, in one block pass
        bn_dstate *scratch = NULL;
        int g = 0, rows = 0;
        for (; i < n && g < BN_DRAFT_MULTI_MAX; i++) {
            bn_draft_seq *q = &seqs[i];
            if (q->n_max <= 0 || q->id_last == c->mask_token_id) continue;
            if (!scratch) scratch = q->s;
            if (rows + q->n_max > scratch->rows) break;
            ss[g] = q->s, ids[g] = q->id_last, n_past[g] = q->n_past, n_rows[g] = q->n_max, at[g] = i;
            rows += q->n_max, g++;
        }
        if (g == 0) continue;
        block_rows(d, scratch, ss, ids, n_past, n_rows, g, h, base);
        chain_seq cs[BN_DRAFT_MULTI_MAX];
        for (int k = 0, row0 = 0; k < g; row0 += n_rows[k], k++) {
            bn_draft_seq *q = &seqs[at[k]];
            cs[k] = (chain_seq){.s = q->s, .base = base + (size_t)row0 * V, .h = h + (size_t)row0 * E, .n = n_rows[k],
                                .id_last = q->id_last, .drafts = q->drafts};
        }
        markov_multi(d, scratch, cs, g, p_min); // the chains together: W2 read once per step for all
        for (int k = 0; k < g; k++) seqs[at[k]].n_drafts = cs[k].count;
    }
    free(h);
    free(base);
    return 0;
}

int bn_drafter_draft(const bn_drafter *d, bn_dstate *s, int32_t id_last, int n_past, int n_max, float p_min,
                     int32_t *drafts, char *err, size_t errlen) {
    bn_draft_seq q = {.s = s, .id_last = id_last, .n_past = n_past, .n_max = n_max, .drafts = drafts};
    return bn_drafter_draft_multi(d, &q, 1, p_min, err, errlen) == 0 ? q.n_drafts : -1;
}
