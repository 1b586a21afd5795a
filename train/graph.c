// train/graph.c — whole-model training forward (saving layer inputs) and backward (per-layer
// recompute, then the per-op backward of train/backward.h). See graph.h.
#include "train/graph.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <pthread.h>
#include "base/util.h"
#include "core/ops.h"
#include "core/matmul.h"
#include "quant/quant.h"
#include "train/backward.h"

// lin_saved: what lin_fwd keeps of one LoRA projection for lin_bwd.
typedef struct {
    float *drop; // {n_in, T}: LoRA input dropout mask (NULL = none)
    float *ax;   // {r, T}: A·(x ⊙ drop) (NULL = recompute)
} lin_saved;

struct bn_train_graph {
    const bn_model *m;
    bn_lora *l;
    int T;
    int32_t *tokens;
    float **x_in;        // [n_layer] {H, T}: input of each layer
    float *x_last;       // {H}: final residual stream at the last position
    lin_saved head;      // LM-head LoRA: dropout mask {H} (NULL = none); ax unused
    bn_rng *layer_rng;   // [n_layer]: RNG state at the start of each layer (dropout replay)
    bool use_dropout;
    float *x_final;      // {H, T}: final residual stream at every position (bn_train_forward_all only)
};

// ---- per-layer intermediates ------------------------------------------------------------------
typedef struct {
    float *n, *mo, *h, *mm, *ga, *up, *act;        // norms, mixer out, residual, FFN
    // Gated DeltaNet
    float *mix, *z, *b, *a, *beta, *g, *conv, *q, *k, *v, *qn, *kn, *o, *y;
    // attention
    float *qg, *kr, *vr, *qr, *gate, *qa, *ka, *att, *og;
    lin_saved lin[BN_LORA_N_TARGETS];              // LoRA dropout masks and A·x per projection
} acts_t;

// ---- buffer reuse ---------------------------------------------------------------------------------
// Every layer (forward, recompute, backward) needs the same buffer sizes again. Fresh calloc of large
// buffers means mmap, zero-page faults and TLB shootdowns across threads on each free; so freed
// float buffers are kept (exact-size match, up to BUF_CACHE_MAX bytes) and handed out again.
#define BUF_CACHE_MAX ((size_t)1 << 30)
typedef struct { float *p; size_t n; } buf_ent;
static pthread_mutex_t g_buf_mu = PTHREAD_MUTEX_INITIALIZER;
static buf_ent *g_live, *g_cache; // buffers handed out / kept for reuse
static size_t g_n_live, g_cap_live, g_n_cache, g_cap_cache, g_cache_bytes;
static size_t g_live_bytes, g_peak_bytes; // bytes handed out now / the most at once (bn_train_mem_peak)

static void buf_push(buf_ent **arr, size_t *len, size_t *cap, float *p, size_t n) {
    if (*len == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *arr = xrealloc(*arr, *cap * sizeof(buf_ent));
    }
    (*arr)[(*len)++] = (buf_ent){p, n};
}

// fbuf: a buffer of n floats (n ≥ 1), zeroed when zero is set; release with ffree.
static float *fbuf(size_t n, bool zero) {
    if (n == 0) n = 1;
    float *p = NULL;
    pthread_mutex_lock(&g_buf_mu);
    for (size_t i = g_n_cache; i-- > 0;)
        if (g_cache[i].n == n) {
            p = g_cache[i].p;
            g_cache[i] = g_cache[--g_n_cache];
            g_cache_bytes -= n * sizeof(float);
            break;
        }
    pthread_mutex_unlock(&g_buf_mu);
    if (p && zero) memset(p, 0, n * sizeof(float));
    if (!p) p = zero ? xcalloc(n, sizeof(float)) : xmalloc(n * sizeof(float));
    pthread_mutex_lock(&g_buf_mu);
    buf_push(&g_live, &g_n_live, &g_cap_live, p, n);
    g_live_bytes += n * sizeof(float);
    if (g_live_bytes > g_peak_bytes) g_peak_bytes = g_live_bytes;
    pthread_mutex_unlock(&g_buf_mu);
    return p;
}

static float *fzeros(size_t n) { return fbuf(n, true); }

size_t bn_train_mem_peak(bool reset) {
    pthread_mutex_lock(&g_buf_mu);
    size_t peak = g_peak_bytes;
    if (reset) g_peak_bytes = g_live_bytes;
    pthread_mutex_unlock(&g_buf_mu);
    return peak;
}

// ffree: releases p (from fbuf: kept for reuse while the cache has room; anything else: free()).
static void ffree(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_buf_mu);
    size_t n = 0;
    for (size_t i = g_n_live; i-- > 0;)
        if (g_live[i].p == p) {
            n = g_live[i].n;
            g_live[i] = g_live[--g_n_live];
            g_live_bytes -= n * sizeof(float);
            break;
        }
    bool keep = n > 0 && g_cache_bytes + n * sizeof(float) <= BUF_CACHE_MAX;
    if (keep) {
        buf_push(&g_cache, &g_n_cache, &g_cap_cache, p, n);
        g_cache_bytes += n * sizeof(float);
    }
    pthread_mutex_unlock(&g_buf_mu);
    if (!keep) free(p);
}

static void acts_free(acts_t *a) {
    float **p = (float **)a;
    for (size_t i = 0; i < sizeof *a / sizeof(float *); i++) ffree(p[i]);
    memset(a, 0, sizeof *a);
}

static int target_slot(int target) {
    for (int b = 0; b < BN_LORA_N_TARGETS; b++) if (target == 1 << b) return b;
    return 0;
}

typedef struct {
    const bn_model *m;
    bn_lora *l;
    bn_rng *rng;  // NULL = no dropout
    int T;
    char *err;
    size_t errlen;
    const bn_weights *gw; // full-parameter gradients shaped like m->w (NULL = LoRA mode)
    const bn_layer_weights *lw_f32; // layer lw_f32_il with its non-F32 weights dequantized (NULL = none)
    int lw_f32_il;
} ctx_t;

// layer_w: the weights of layer il (the dequantized copy while the backward holds one).
static const bn_layer_weights *layer_w(const ctx_t *c, int il) {
    return c->lw_f32 && c->lw_f32_il == il ? c->lw_f32 : &c->m->w.layers[il];
}

// Largest dequantized layer copy the backward keeps (its recompute and backward then share one
// dequantization instead of one each).
#define LAYER_F32_MAX ((size_t)512 << 20)
_Static_assert(sizeof(bn_layer_weights) % sizeof(bn_weight) == 0, "bn_layer_weights is a bn_weight array");

// weight_elems: elements of a weight (ne of absent dimensions may be 0 or 1).
static int64_t weight_elems(const bn_weight *w) {
    int64_t n = 1;
    for (int d = 0; d < 4; d++) n *= w->ne[d] > 0 ? w->ne[d] : 1;
    return n;
}

// layer_f32_make: *out = layer il of m with every non-F32 weight dequantized; false (nothing held)
// when the layer is all F32, over LAYER_F32_MAX, or a type cannot be dequantized.
static bool layer_f32_make(const bn_model *m, int il, bn_layer_weights *out) {
    const int per = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    const bn_weight *src = (const bn_weight *)&m->w.layers[il];
    size_t bytes = 0;
    for (int i = 0; i < per; i++)
        if (src[i].data && src[i].type != BN_F32) bytes += (size_t)weight_elems(&src[i]) * sizeof(float);
    if (bytes == 0 || bytes > LAYER_F32_MAX) return false;
    *out = m->w.layers[il];
    bn_weight *dst = (bn_weight *)out;
    for (int i = 0; i < per; i++) {
        if (!src[i].data || src[i].type == BN_F32) continue;
        float *buf = fbuf((size_t)weight_elems(&src[i]), false);
        dst[i].data = buf;
        dst[i].type = BN_F32;
        if (bn_dequantize(src[i].type, src[i].data, buf, weight_elems(&src[i])) != 0) {
            for (int k = 0; k <= i; k++)
                if (src[k].data && src[k].type != BN_F32) ffree((void *)dst[k].data);
            return false;
        }
    }
    return true;
}

// layer_f32_free: releases the buffers of a layer_f32_make copy of layer il.
static void layer_f32_free(const bn_model *m, int il, bn_layer_weights *w) {
    const int per = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    const bn_weight *src = (const bn_weight *)&m->w.layers[il];
    bn_weight *dst = (bn_weight *)w;
    for (int i = 0; i < per; i++)
        if (src[i].data && src[i].type != BN_F32) ffree((void *)dst[i].data);
}

// grad_of: the gradient buffer of weight W of c->m (full-parameter mode), or NULL.
static float *grad_of(const ctx_t *c, const bn_weight *W) {
    if (!c->gw) return NULL;
    const bn_weights *w = &c->m->w;
    if (W == &w->token_embd) return (float *)c->gw->token_embd.data;
    if (W == &w->output) return (float *)c->gw->output.data;
    if (W == &w->output_norm) return (float *)c->gw->output_norm.data;
    const int per = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    for (int il = 0; il < c->m->cfg.n_layer; il++) {
        const bn_weight *base = (const bn_weight *)&w->layers[il];
        if (W >= base && W < base + per) return (float *)((const bn_weight *)&c->gw->layers[il])[W - base].data;
    }
    return NULL;
}

// lora_of: the view of (layer, target) or NULL when not adapted.
static bool lora_of(const ctx_t *c, int layer, int target, bn_lora_view *v) {
    if (!c->l) return false;
    int idx = bn_lora_get(c->l, layer, target);
    if (idx < 0) return false;
    *v = bn_lora_view_of(c->l, idx);
    return true;
}

// lin_fwd: y {n_out, T} = W x (+ bias) (+ LoRA with dropout mask drawn into sv->drop; A·x kept in sv->ax
// for lin_bwd when keep_ax is set).
static int lin_fwd(const ctx_t *c, int layer, int target, const bn_weight *W, const bn_weight *bias,
                   const float *x, float *y, lin_saved *sv, bool keep_ax) {
    bn_lora_view v;
    bool has = lora_of(c, layer, target, &v) && sv;
    // STE: W already is W_eff = deq(Q(W0 + s·B·A)): no additive path, no dropout (lin_bwd recomputes A·x)
    if (has && c->l->ste) has = false;
    const float *mask = NULL;
    if (has && c->rng && c->l->dropout > 0) {
        sv->drop = fbuf((size_t)W->ne[0] * c->T, false);
        bn_lora_dropout_mask(c->rng, c->l->dropout, W->ne[0] * c->T, sv->drop);
        mask = sv->drop;
    }
    float *ax = has && keep_ax ? (sv->ax = fbuf((size_t)v.r * c->T, false)) : NULL; // {r, T}
    if (bn_linear_lora_fwd(W, has ? &v : NULL, x, c->T, mask, y, ax, c->err, c->errlen) < 0) return -1;
    if (bias && bias->data) {
        const float *bb = bias->data;
        for (int t = 0; t < c->T; t++)
            for (int64_t j = 0; j < W->ne[1]; j++) y[(size_t)t * W->ne[1] + j] += bb[j];
    }
    return 0;
}

// lin_bwd: dx += Wᵀdy (+ LoRA part with sv's mask and A·x, recomputed when sv->ax is NULL); LoRA gradients
// into l->grads.
static int lin_bwd(const ctx_t *c, int layer, int target, const bn_weight *W, const float *x, const lin_saved *sv,
                   const float *dy, float *dx) {
    bn_lora_view v;
    bool has = lora_of(c, layer, target, &v);
    const float *drop = has && sv ? sv->drop : NULL, *ax = has && sv ? sv->ax : NULL;
    int rc;
    if (has && c->l->ste) // straight-through: dx = W_effᵀdy; ∂A, ∂B as if W_eff = W0 + s·B·A
        rc = bn_linear_lora_bwd(W, NULL, x, c->T, NULL, NULL, dy, dx, c->err, c->errlen) ||
             bn_linear_lora_bwd(W, &v, x, c->T, drop, NULL, dy, NULL, c->err, c->errlen) ? -1 : 0;
    else
        rc = bn_linear_lora_bwd(W, has ? &v : NULL, x, c->T, drop, ax, dy, dx, c->err, c->errlen);
    float *dW = grad_of(c, W);
    if (rc == 0 && dW) bn_linear_wgrad(x, dy, W->ne[0], W->ne[1], c->T, dW);
    return rc;
}

static const float *F(const bn_weight *w) { return (const float *)w->data; }

// ---- Gated DeltaNet mixer ---------------------------------------------------------------------
static int gdn_fwd(const ctx_t *c, int il, acts_t *a) {
    const bn_config *cf = &c->m->cfg;
    const bn_layer_weights *lw = layer_w(c, il);
    const int T = c->T, dk = cf->ssm_d_state, dv = dk, Hk = cf->ssm_n_group, Hv = cf->ssm_dt_rank;
    const int C = 2 * Hk * dk + Hv * dv, K = cf->ssm_conv_kernel, H = cf->n_embd;
    a->mix = fzeros((size_t)C * T); a->z = fzeros((size_t)Hv * dv * T);
    a->b = fzeros((size_t)Hv * T); a->a = fzeros((size_t)Hv * T);
    if (lin_fwd(c, il, BN_LORA_QKV, &lw->attn_qkv, NULL, a->n, a->mix, &a->lin[target_slot(BN_LORA_QKV)], true) ||
        lin_fwd(c, il, BN_LORA_Z, &lw->attn_gate, NULL, a->n, a->z, &a->lin[target_slot(BN_LORA_Z)], true) ||
        lin_fwd(c, il, BN_LORA_BETA, &lw->ssm_beta, NULL, a->n, a->b, &a->lin[target_slot(BN_LORA_BETA)], true) ||
        lin_fwd(c, il, BN_LORA_ALPHA, &lw->ssm_alpha, NULL, a->n, a->a, &a->lin[target_slot(BN_LORA_ALPHA)], true))
        return -1;
    a->beta = fzeros((size_t)Hv * T); a->g = fzeros((size_t)Hv * T);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hv; h++) {
            size_t i = (size_t)t * Hv + h;
            a->beta[i] = bn_sigmoid(a->b[i]);
            a->g[i] = bn_softplus(a->a[i] + F(&lw->ssm_dt)[h]) * F(&lw->ssm_a)[h];
        }
    a->conv = fzeros((size_t)C * T);
    bn_conv1d_silu_fwd(a->mix, NULL, F(&lw->ssm_conv1d), C, K, T, a->conv, NULL);
    a->q = fzeros((size_t)Hk * dk * T); a->k = fzeros((size_t)Hk * dk * T); a->v = fzeros((size_t)Hv * dv * T);
    a->qn = fzeros((size_t)Hk * dk * T); a->kn = fzeros((size_t)Hk * dk * T);
    const float q_scale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < T; t++) {
        const float *row = a->conv + (size_t)t * C;
        memcpy(a->q + (size_t)t * Hk * dk, row, sizeof(float) * Hk * dk);
        memcpy(a->k + (size_t)t * Hk * dk, row + Hk * dk, sizeof(float) * Hk * dk);
        memcpy(a->v + (size_t)t * Hv * dv, row + 2 * Hk * dk, sizeof(float) * Hv * dv);
        for (int j = 0; j < Hk; j++) {
            size_t off = ((size_t)t * Hk + j) * dk;
            bn_l2norm(a->qn + off, a->q + off, dk, cf->norm_eps);
            bn_l2norm(a->kn + off, a->k + off, dk, cf->norm_eps);
            for (int i = 0; i < dk; i++) a->qn[off + i] *= q_scale;
        }
    }
    a->o = fzeros((size_t)Hv * dv * T); a->y = fzeros((size_t)Hv * dv * T);
    bn_gdn_fwd(T, Hk, Hv, dk, dv, a->qn, a->kn, a->v, a->g, a->beta, NULL, a->o, NULL);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hv; h++) {
            size_t off = ((size_t)t * Hv + h) * dv;
            bn_gated_rmsnorm(a->y + off, a->o + off, a->z + off, F(&lw->ssm_norm), dv, cf->norm_eps);
        }
    a->mo = fzeros((size_t)H * T);
    return lin_fwd(c, il, BN_LORA_SSM_OUT, &lw->ssm_out, NULL, a->y, a->mo,
                   &a->lin[target_slot(BN_LORA_SSM_OUT)], true);
}

// gdn_bwd: dn += ∂L/∂n from dmo (dn NULL: only the LoRA gradients).
static int gdn_bwd(const ctx_t *c, int il, const acts_t *a, const float *dmo, float *dn) {
    const bn_config *cf = &c->m->cfg;
    const bn_layer_weights *lw = layer_w(c, il);
    const int T = c->T, dk = cf->ssm_d_state, dv = dk, Hk = cf->ssm_n_group, Hv = cf->ssm_dt_rank;
    const int C = 2 * Hk * dk + Hv * dv, K = cf->ssm_conv_kernel;
    int rc = -1;
    float *dy = fzeros((size_t)Hv * dv * T), *do_ = fzeros((size_t)Hv * dv * T), *dz = fzeros((size_t)Hv * dv * T);
    float *dqn = fzeros((size_t)Hk * dk * T), *dkn = fzeros((size_t)Hk * dk * T), *dvv = fzeros((size_t)Hv * dv * T);
    float *dq = fzeros((size_t)Hk * dk * T), *dk_ = fzeros((size_t)Hk * dk * T), *dqs = fzeros((size_t)Hk * dk * T);
    float *dg = fzeros((size_t)Hv * T), *dbeta = fzeros((size_t)Hv * T), *db = fzeros((size_t)Hv * T), *da = fzeros((size_t)Hv * T);
    float *dconv = fzeros((size_t)C * T), *dmix = fzeros((size_t)C * T);
    if (lin_bwd(c, il, BN_LORA_SSM_OUT, &lw->ssm_out, a->y, &a->lin[target_slot(BN_LORA_SSM_OUT)], dmo, dy)) goto out;
    bn_gated_rmsnorm_bwd(a->o, a->z, F(&lw->ssm_norm), dv, T * Hv, cf->norm_eps, dy, do_, dz);
    if (grad_of(c, &lw->ssm_norm)) bn_gated_rmsnorm_wgrad(a->o, a->z, dv, T * Hv, cf->norm_eps, dy, grad_of(c, &lw->ssm_norm));
    bn_gdn_bwd(T, Hk, Hv, dk, dv, a->qn, a->kn, a->v, a->g, a->beta, NULL, do_, NULL, 0, dqn, dkn, dvv, dg, dbeta, NULL);
    bn_scale_bwd(1.0f / sqrtf((float)dk), (int64_t)Hk * dk * T, dqn, dqs);
    bn_l2norm_bwd(a->q, dk, T * Hk, cf->norm_eps, dqs, dq);
    bn_l2norm_bwd(a->k, dk, T * Hk, cf->norm_eps, dkn, dk_);
    for (int t = 0; t < T; t++) {
        float *row = dconv + (size_t)t * C;
        memcpy(row, dq + (size_t)t * Hk * dk, sizeof(float) * Hk * dk);
        memcpy(row + Hk * dk, dk_ + (size_t)t * Hk * dk, sizeof(float) * Hk * dk);
        memcpy(row + 2 * Hk * dk, dvv + (size_t)t * Hv * dv, sizeof(float) * Hv * dv);
    }
    bn_conv1d_silu_bwd(a->mix, NULL, F(&lw->ssm_conv1d), C, K, T, dconv, dmix, NULL);
    bn_sigmoid_bwd(a->beta, (int64_t)Hv * T, dbeta, db);
    bn_gdn_gate_bwd(a->a, F(&lw->ssm_dt), F(&lw->ssm_a), Hv, T, dg, da);
    if (c->gw) {
        if (grad_of(c, &lw->ssm_conv1d))
            bn_conv1d_silu_wgrad(a->mix, NULL, F(&lw->ssm_conv1d), C, K, T, dconv, grad_of(c, &lw->ssm_conv1d));
        bn_gdn_gate_param_grad(a->a, F(&lw->ssm_dt), F(&lw->ssm_a), Hv, T, dg, grad_of(c, &lw->ssm_dt),
                               grad_of(c, &lw->ssm_a));
    }
    if (lin_bwd(c, il, BN_LORA_QKV, &lw->attn_qkv, a->n, &a->lin[target_slot(BN_LORA_QKV)], dmix, dn) ||
        lin_bwd(c, il, BN_LORA_Z, &lw->attn_gate, a->n, &a->lin[target_slot(BN_LORA_Z)], dz, dn) ||
        lin_bwd(c, il, BN_LORA_BETA, &lw->ssm_beta, a->n, &a->lin[target_slot(BN_LORA_BETA)], db, dn) ||
        lin_bwd(c, il, BN_LORA_ALPHA, &lw->ssm_alpha, a->n, &a->lin[target_slot(BN_LORA_ALPHA)], da, dn))
        goto out;
    rc = 0;
out:
    ffree(dy); ffree(do_); ffree(dz); ffree(dqn); ffree(dkn); ffree(dvv); ffree(dq); ffree(dk_); ffree(dqs);
    ffree(dg); ffree(dbeta); ffree(db); ffree(da); ffree(dconv); ffree(dmix);
    return rc;
}

// ---- attention mixer ----------------------------------------------------------------------------
static int rope_mode(const bn_config *cf) { return cf->arch == BN_ARCH_LLAMA ? BN_ROPE_NORM : BN_ROPE_NEOX; }

static int attn_fwd(const ctx_t *c, int il, acts_t *a) {
    const bn_config *cf = &c->m->cfg;
    const bn_layer_weights *lw = layer_w(c, il);
    const int T = c->T, hd = cf->head_dim, nh = cf->n_head, nkv = cf->n_head_kv, H = cf->n_embd;
    const bool gated = cf->arch == BN_ARCH_QWEN35;
    const int q_stride = nh * hd * (gated ? 2 : 1), kv_dim = nkv * hd;
    a->qg = fzeros((size_t)q_stride * T); a->kr = fzeros((size_t)kv_dim * T); a->vr = fzeros((size_t)kv_dim * T);
    if (lin_fwd(c, il, BN_LORA_Q, &lw->attn_q, &lw->attn_q_bias, a->n, a->qg, &a->lin[target_slot(BN_LORA_Q)], true) ||
        lin_fwd(c, il, BN_LORA_K, &lw->attn_k, &lw->attn_k_bias, a->n, a->kr, &a->lin[target_slot(BN_LORA_K)], true) ||
        lin_fwd(c, il, BN_LORA_V, &lw->attn_v, &lw->attn_v_bias, a->n, a->vr, &a->lin[target_slot(BN_LORA_V)], true))
        return -1;
    a->qr = fzeros((size_t)nh * hd * T); a->gate = fzeros((size_t)nh * hd * T);
    a->qa = fzeros((size_t)nh * hd * T); a->ka = fzeros((size_t)kv_dim * T);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < nh; h++) {
            const float *src = a->qg + (size_t)t * q_stride + (size_t)h * (gated ? 2 * hd : hd);
            size_t off = ((size_t)t * nh + h) * hd;
            memcpy(a->qr + off, src, sizeof(float) * hd);
            if (gated) memcpy(a->gate + off, src + hd, sizeof(float) * hd);
            if (lw->attn_q_norm.data) bn_rmsnorm(a->qa + off, a->qr + off, F(&lw->attn_q_norm), hd, cf->norm_eps);
            else memcpy(a->qa + off, a->qr + off, sizeof(float) * hd);
        }
        for (int j = 0; j < nkv; j++) {
            size_t off = ((size_t)t * nkv + j) * hd;
            if (lw->attn_k_norm.data) bn_rmsnorm(a->ka + off, a->kr + off, F(&lw->attn_k_norm), hd, cf->norm_eps);
            else memcpy(a->ka + off, a->kr + off, sizeof(float) * hd);
        }
        bn_rope_inplace(a->qa + (size_t)t * nh * hd, hd, nh, cf->n_rot, t, cf->rope_base, rope_mode(cf), +1);
        bn_rope_inplace(a->ka + (size_t)t * kv_dim, hd, nkv, cf->n_rot, t, cf->rope_base, rope_mode(cf), +1);
    }
    a->att = fzeros((size_t)nh * hd * T); a->og = fzeros((size_t)nh * hd * T);
    bn_attn_fwd(a->qa, a->ka, a->vr, T, hd, nh, nkv, 1.0f / sqrtf((float)hd), a->att);
    if (gated) bn_sigmoid_gate(a->og, a->att, a->gate, nh * hd * T);
    else memcpy(a->og, a->att, sizeof(float) * nh * hd * T);
    a->mo = fzeros((size_t)H * T);
    return lin_fwd(c, il, BN_LORA_O, &lw->attn_output, NULL, a->og, a->mo, &a->lin[target_slot(BN_LORA_O)], true);
}

static int attn_bwd(const ctx_t *c, int il, const acts_t *a, const float *dmo, float *dn) {
    const bn_config *cf = &c->m->cfg;
    const bn_layer_weights *lw = layer_w(c, il);
    const int T = c->T, hd = cf->head_dim, nh = cf->n_head, nkv = cf->n_head_kv;
    const bool gated = cf->arch == BN_ARCH_QWEN35;
    const int q_stride = nh * hd * (gated ? 2 : 1), kv_dim = nkv * hd;
    const size_t nq = (size_t)nh * hd * T, nk = (size_t)kv_dim * T;
    int rc = -1;
    float *dog = fzeros(nq), *datt = fzeros(nq), *dgate = fzeros(nq), *dqa = fzeros(nq), *dka = fzeros(nk);
    float *dvr = fzeros(nk), *dqn = fzeros(nq), *dkn = fzeros(nk), *dqr = fzeros(nq), *dkr = fzeros(nk);
    float *dqg = fzeros((size_t)q_stride * T);
    if (lin_bwd(c, il, BN_LORA_O, &lw->attn_output, a->og, &a->lin[target_slot(BN_LORA_O)], dmo, dog)) goto out;
    if (gated) bn_sigmoid_gate_bwd(a->att, a->gate, (int64_t)nq, dog, datt, dgate);
    else memcpy(datt, dog, sizeof(float) * nq);
    bn_attn_bwd(a->qa, a->ka, a->vr, T, hd, nh, nkv, 1.0f / sqrtf((float)hd), datt, dqa, dka, dvr);
    bn_rope_bwd(dqa, hd, nh, T, cf->n_rot, 0, cf->rope_base, rope_mode(cf), dqn);
    bn_rope_bwd(dka, hd, nkv, T, cf->n_rot, 0, cf->rope_base, rope_mode(cf), dkn);
    if (lw->attn_q_norm.data) bn_rmsnorm_bwd(a->qr, F(&lw->attn_q_norm), hd, T * nh, cf->norm_eps, dqn, dqr);
    else memcpy(dqr, dqn, sizeof(float) * nq);
    if (lw->attn_k_norm.data) bn_rmsnorm_bwd(a->kr, F(&lw->attn_k_norm), hd, T * nkv, cf->norm_eps, dkn, dkr);
    else memcpy(dkr, dkn, sizeof(float) * nk);
    if (lw->attn_q_norm.data && grad_of(c, &lw->attn_q_norm))
        bn_rmsnorm_wgrad(a->qr, hd, T * nh, cf->norm_eps, dqn, grad_of(c, &lw->attn_q_norm));
    if (lw->attn_k_norm.data && grad_of(c, &lw->attn_k_norm))
        bn_rmsnorm_wgrad(a->kr, hd, T * nkv, cf->norm_eps, dkn, grad_of(c, &lw->attn_k_norm));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            float *dst = dqg + (size_t)t * q_stride + (size_t)h * (gated ? 2 * hd : hd);
            size_t off = ((size_t)t * nh + h) * hd;
            memcpy(dst, dqr + off, sizeof(float) * hd);
            if (gated) memcpy(dst + hd, dgate + off, sizeof(float) * hd);
        }
    if (lin_bwd(c, il, BN_LORA_Q, &lw->attn_q, a->n, &a->lin[target_slot(BN_LORA_Q)], dqg, dn) ||
        lin_bwd(c, il, BN_LORA_K, &lw->attn_k, a->n, &a->lin[target_slot(BN_LORA_K)], dkr, dn) ||
        lin_bwd(c, il, BN_LORA_V, &lw->attn_v, a->n, &a->lin[target_slot(BN_LORA_V)], dvr, dn))
        goto out;
    rc = 0;
out:
    ffree(dog); ffree(datt); ffree(dgate); ffree(dqa); ffree(dka); ffree(dvr);
    ffree(dqn); ffree(dkn); ffree(dqr); ffree(dkr); ffree(dqg);
    return rc;
}

// ---- one layer ----------------------------------------------------------------------------------
// layer_fwd: x_out {H, T} = layer(x_in), keeping intermediates in a.
static int layer_fwd(const ctx_t *c, int il, const float *x_in, float *x_out, acts_t *a) {
    const bn_config *cf = &c->m->cfg;
    const bn_layer_weights *lw = layer_w(c, il);
    const int T = c->T, H = cf->n_embd, Ff = cf->n_ff;
    a->n = fzeros((size_t)H * T);
    for (int t = 0; t < T; t++) bn_rmsnorm(a->n + (size_t)t * H, x_in + (size_t)t * H, F(&lw->attn_norm), H, cf->norm_eps);
    if ((cf->arch == BN_ARCH_QWEN35 && cf->is_recurrent[il]) ? gdn_fwd(c, il, a) : attn_fwd(c, il, a)) return -1;
    a->h = fzeros((size_t)H * T);
    for (size_t i = 0; i < (size_t)H * T; i++) a->h[i] = x_in[i] + a->mo[i];
    a->mm = fzeros((size_t)H * T);
    for (int t = 0; t < T; t++)
        bn_rmsnorm(a->mm + (size_t)t * H, a->h + (size_t)t * H, F(&lw->post_attention_norm), H, cf->norm_eps);
    a->ga = fzeros((size_t)Ff * T); a->up = fzeros((size_t)Ff * T); a->act = fzeros((size_t)Ff * T);
    if (lin_fwd(c, il, BN_LORA_GATE, &lw->ffn_gate, NULL, a->mm, a->ga, &a->lin[target_slot(BN_LORA_GATE)], true) ||
        lin_fwd(c, il, BN_LORA_UP, &lw->ffn_up, NULL, a->mm, a->up, &a->lin[target_slot(BN_LORA_UP)], true))
        return -1;
    bn_swiglu(a->act, a->ga, a->up, Ff * T);
    if (lin_fwd(c, il, BN_LORA_DOWN, &lw->ffn_down, NULL, a->act, x_out,
                &a->lin[target_slot(BN_LORA_DOWN)], true)) return -1;
    for (size_t i = 0; i < (size_t)H * T; i++) x_out[i] += a->h[i];
    return 0;
}

// layer_bwd: dx_in {H, T} (overwritten) from dx_out.
static int layer_bwd(const ctx_t *c, int il, const float *x_in, const acts_t *a, const float *dx_out, float *dx_in) {
    const bn_config *cf = &c->m->cfg;
    const bn_layer_weights *lw = layer_w(c, il);
    const int T = c->T, H = cf->n_embd, Ff = cf->n_ff;
    int rc = -1;
    float *dh = fzeros((size_t)H * T), *dact = fzeros((size_t)Ff * T), *dga = fzeros((size_t)Ff * T);
    float *dup = fzeros((size_t)Ff * T), *dmm = fzeros((size_t)H * T), *dn = fzeros((size_t)H * T);
    memcpy(dh, dx_out, sizeof(float) * H * T);
    if (lin_bwd(c, il, BN_LORA_DOWN, &lw->ffn_down, a->act, &a->lin[target_slot(BN_LORA_DOWN)], dx_out, dact)) goto out;
    bn_swiglu_bwd(a->ga, a->up, (int64_t)Ff * T, dact, dga, dup);
    if (lin_bwd(c, il, BN_LORA_GATE, &lw->ffn_gate, a->mm, &a->lin[target_slot(BN_LORA_GATE)], dga, dmm) ||
        lin_bwd(c, il, BN_LORA_UP, &lw->ffn_up, a->mm, &a->lin[target_slot(BN_LORA_UP)], dup, dmm))
        goto out;
    bn_rmsnorm_bwd(a->h, F(&lw->post_attention_norm), H, T, cf->norm_eps, dmm, dh);
    if (grad_of(c, &lw->post_attention_norm))
        bn_rmsnorm_wgrad(a->h, H, T, cf->norm_eps, dmm, grad_of(c, &lw->post_attention_norm));
    // layer 0: ∂L/∂x_in would only reach the frozen embedding, so the mixer's input gradient is
    // skipped (full-parameter mode trains the embedding and keeps it)
    const bool need_dx = il > 0 || c->gw;
    float *dn_or_null = need_dx ? dn : NULL;
    if ((cf->arch == BN_ARCH_QWEN35 && cf->is_recurrent[il]) ? gdn_bwd(c, il, a, dh, dn_or_null)
                                                             : attn_bwd(c, il, a, dh, dn_or_null)) goto out;
    memcpy(dx_in, dh, sizeof(float) * H * T);
    if (need_dx) bn_rmsnorm_bwd(x_in, F(&lw->attn_norm), H, T, cf->norm_eps, dn, dx_in);
    if (grad_of(c, &lw->attn_norm)) bn_rmsnorm_wgrad(x_in, H, T, cf->norm_eps, dn, grad_of(c, &lw->attn_norm));
    rc = 0;
out:
    ffree(dh); ffree(dact); ffree(dga); ffree(dup); ffree(dmm); ffree(dn);
    return rc;
}

// ---- whole model --------------------------------------------------------------------------------
// check_supported: fp32 small tensors the training path reads directly.
static int check_supported(const bn_model *m, char *err, size_t errlen) {
    const bn_config *cf = &m->cfg;
    if (cf->arch != BN_ARCH_QWEN35 && cf->arch != BN_ARCH_QWEN3 && cf->arch != BN_ARCH_LLAMA && cf->arch != BN_ARCH_QWEN2)
        return bn_err(err, errlen, "training: unsupported architecture %d", cf->arch);
    if (m->w.output_norm.type != BN_F32) return bn_err(err, errlen, "training: output_norm must be f32");
    for (int il = 0; il < cf->n_layer; il++) {
        const bn_layer_weights *lw = &m->w.layers[il];
        const bn_weight *vecs[] = {&lw->attn_norm, &lw->post_attention_norm, &lw->attn_q_norm, &lw->attn_k_norm,
                                   &lw->attn_q_bias, &lw->attn_k_bias, &lw->attn_v_bias, &lw->ssm_conv1d,
                                   &lw->ssm_dt, &lw->ssm_a, &lw->ssm_norm};
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
            if (vecs[i]->data && vecs[i]->type != BN_F32)
                return bn_err(err, errlen, "training: %s must be f32 (is %s)", vecs[i]->name ? vecs[i]->name : "vector",
                              bn_type_name(vecs[i]->type));
    }
    return 0;
}

// forward_layers: embedding + every layer, saving layer inputs; keeps the final residual stream of
// the last position (x_last) and, with keep_all, of every position (x_final). NULL on error.
static bn_train_graph *forward_layers(const bn_model *m, bn_lora *l, const int32_t *tokens, int n, bn_rng *rng,
                                      bool keep_all, char *err, size_t errlen) {
    const bn_config *cf = &m->cfg;
    const int H = cf->n_embd, L = cf->n_layer;
    if (n <= 0) { bn_err(err, errlen, "training: empty token sequence"); return NULL; }
    if (check_supported(m, err, errlen)) return NULL;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= cf->n_vocab) { bn_err(err, errlen, "training: token %d out of range", tokens[t]); return NULL; }
    bn_train_graph *g = xcalloc(1, sizeof *g);
    g->m = m;
    g->l = l;
    g->T = n;
    g->tokens = xmalloc(sizeof(int32_t) * n);
    memcpy(g->tokens, tokens, sizeof(int32_t) * n);
    g->use_dropout = rng && l && l->dropout > 0;
    g->x_in = xcalloc((size_t)L, sizeof(float *));
    g->layer_rng = xcalloc((size_t)L, sizeof(bn_rng));
    ctx_t c = {.m = m, .l = l, .rng = g->use_dropout ? rng : NULL, .T = n, .err = err, .errlen = errlen};
    float *x = fzeros((size_t)H * n);
    for (int t = 0; t < n; t++)
        if (bn_weight_row_f32(&m->w.token_embd, tokens[t], x + (size_t)t * H) != 0) {
            bn_err(err, errlen, "training: cannot read embedding row %d", tokens[t]);
            ffree(x);
            bn_train_graph_free(g);
            return NULL;
        }
    for (int il = 0; il < L; il++) {
        g->x_in[il] = x;
        if (g->use_dropout) g->layer_rng[il] = *rng;
        float *x_out = fzeros((size_t)H * n);
        acts_t a = {0};
        int rc = layer_fwd(&c, il, x, x_out, &a);
        acts_free(&a);
        if (rc) { ffree(x_out); bn_train_graph_free(g); return NULL; }
        x = x_out;
    }
    g->x_last = fzeros((size_t)H);
    memcpy(g->x_last, x + (size_t)(n - 1) * H, sizeof(float) * H);
    if (keep_all) g->x_final = x;
    else ffree(x);
    return g;
}

bn_train_graph *bn_train_forward(const bn_model *m, bn_lora *l, const int32_t *tokens, int n, bn_rng *rng,
                                 float *logits, char *err, size_t errlen) {
    const bn_config *cf = &m->cfg;
    const int H = cf->n_embd;
    bn_train_graph *g = forward_layers(m, l, tokens, n, rng, false, err, errlen);
    if (!g) return NULL;
    ctx_t c = {.m = m, .l = l, .rng = g->use_dropout ? rng : NULL, .T = n, .err = err, .errlen = errlen};
    // LM head on the last position only
    float *xf = fzeros((size_t)H);
    bn_rmsnorm(xf, g->x_last, F(&m->w.output_norm), H, cf->norm_eps);
    ctx_t ch = c;
    ch.T = 1;
    int rc = lin_fwd(&ch, -1, BN_LORA_HEAD, &m->w.output, NULL, xf, logits, &g->head, false);
    ffree(xf);
    if (rc) { bn_train_graph_free(g); return NULL; }
    return g;
}

int bn_train_backward(bn_train_graph *g, const float *dlogits, char *err, size_t errlen) {
    const bn_model *m = g->m;
    const bn_config *cf = &m->cfg;
    const int H = cf->n_embd, L = cf->n_layer, T = g->T;
    ctx_t c = {.m = m, .l = g->l, .rng = NULL, .T = T, .err = err, .errlen = errlen};
    // head: dxf = outputᵀ dz (+ LoRA); d(x_last) through the final norm
    float *xf = fzeros((size_t)H), *dxf = fzeros((size_t)H);
    bn_rmsnorm(xf, g->x_last, F(&m->w.output_norm), H, cf->norm_eps);
    ctx_t ch = c;
    ch.T = 1;
    int rc = lin_bwd(&ch, -1, BN_LORA_HEAD, &m->w.output, xf, &g->head, dlogits, dxf);
    float *dx = fzeros((size_t)H * T), *dx_prev = fzeros((size_t)H * T);
    if (rc == 0) bn_rmsnorm_bwd(g->x_last, F(&m->w.output_norm), H, 1, cf->norm_eps, dxf, dx + (size_t)(T - 1) * H);
    ffree(xf);
    ffree(dxf);
    for (int il = L - 1; il >= 0 && rc == 0; il--) {
        bn_rng rng = g->layer_rng[il];
        c.rng = g->use_dropout ? &rng : NULL;
        acts_t a = {0};
        bn_layer_weights lw_f32;
        bool have_f32 = layer_f32_make(m, il, &lw_f32); // one dequantization for recompute + backward
        c.lw_f32 = have_f32 ? &lw_f32 : NULL;
        c.lw_f32_il = il;
        float *x_out = fzeros((size_t)H * T);
        rc = layer_fwd(&c, il, g->x_in[il], x_out, &a); // recompute (same dropout masks)
        ffree(x_out);
        if (rc == 0) rc = layer_bwd(&c, il, g->x_in[il], &a, dx, dx_prev);
        acts_free(&a);
        if (have_f32) layer_f32_free(m, il, &lw_f32);
        c.lw_f32 = NULL;
        float *tmp = dx;
        dx = dx_prev;
        dx_prev = tmp;
    }
    ffree(dx);
    ffree(dx_prev);
    return rc;
}

// ---- full-parameter mode (train/sft.h) -----------------------------------------------------------

// forward_all: every position's logits {n_vocab, n} of m with adapter l (NULL = none; no dropout).
static bn_train_graph *forward_all(const bn_model *m, bn_lora *l, const int32_t *tokens, int n, float *logits,
                                   char *err, size_t errlen) {
    const bn_config *cf = &m->cfg;
    const int H = cf->n_embd;
    bn_train_graph *g = forward_layers(m, l, tokens, n, NULL, true, err, errlen);
    if (!g) return NULL;
    ctx_t c = {.m = m, .l = l, .T = n, .err = err, .errlen = errlen};
    float *xf = fzeros((size_t)H * n);
    for (int t = 0; t < n; t++)
        bn_rmsnorm(xf + (size_t)t * H, g->x_final + (size_t)t * H, F(&m->w.output_norm), H, cf->norm_eps);
    int rc = lin_fwd(&c, -1, BN_LORA_HEAD, &m->w.output, NULL, xf, logits, &g->head, false);
    ffree(xf);
    if (rc) { bn_train_graph_free(g); return NULL; }
    return g;
}

bn_train_graph *bn_train_forward_all(const bn_model *m, const int32_t *tokens, int n, float *logits,
                                     char *err, size_t errlen) {
    return forward_all(m, NULL, tokens, n, logits, err, errlen);
}

bn_train_graph *bn_train_forward_all_lora(const bn_model *m, bn_lora *l, const int32_t *tokens, int n, float *logits,
                                          char *err, size_t errlen) {
    return forward_all(m, l, tokens, n, logits, err, errlen);
}

// backward_all: dlogits {n_vocab, T} of a forward_all graph; grads != NULL: ∂L/∂W into grads (full-parameter
// mode, no adapter); grads == NULL: ∂L/∂A, ∂L/∂B into the graph's adapter. Returns 0 or -1 (err).
static int backward_all(bn_train_graph *g, const float *dlogits, const bn_weights *grads, char *err, size_t errlen) {
    const bn_model *m = g->m;
    const bn_config *cf = &m->cfg;
    const int H = cf->n_embd, L = cf->n_layer, T = g->T;
    if (!g->x_final) return bn_err(err, errlen, "training: an all-positions backward needs bn_train_forward_all(_lora)");
    if (!grads && !g->l) return bn_err(err, errlen, "training: no adapter to take the gradients");
    ctx_t c = {.m = m, .l = grads ? NULL : g->l, .T = T, .err = err, .errlen = errlen, .gw = grads};
    // head over all positions: dxf = outputᵀ dlogits, d(output) += dlogits xfᵀ, then the final norm
    float *xf = fzeros((size_t)H * T), *dxf = fzeros((size_t)H * T);
    for (int t = 0; t < T; t++)
        bn_rmsnorm(xf + (size_t)t * H, g->x_final + (size_t)t * H, F(&m->w.output_norm), H, cf->norm_eps);
    int rc = lin_bwd(&c, -1, BN_LORA_HEAD, &m->w.output, xf, &g->head, dlogits, dxf);
    float *dx = fzeros((size_t)H * T), *dx_prev = fzeros((size_t)H * T);
    if (rc == 0) {
        bn_rmsnorm_bwd(g->x_final, F(&m->w.output_norm), H, T, cf->norm_eps, dxf, dx);
        if (grads && grads->output_norm.data)
            bn_rmsnorm_wgrad(g->x_final, H, T, cf->norm_eps, dxf, (float *)grads->output_norm.data);
    }
    ffree(xf);
    ffree(dxf);
    for (int il = L - 1; il >= 0 && rc == 0; il--) {
        acts_t a = {0};
        bn_layer_weights lw_f32; // adapter mode: one dequantization for recompute + backward (grad_of needs m's own)
        bool have_f32 = !grads && layer_f32_make(m, il, &lw_f32);
        c.lw_f32 = have_f32 ? &lw_f32 : NULL;
        c.lw_f32_il = il;
        float *x_out = fzeros((size_t)H * T);
        rc = layer_fwd(&c, il, g->x_in[il], x_out, &a); // recompute
        ffree(x_out);
        if (rc == 0) {
            memset(dx_prev, 0, sizeof(float) * H * T);
            rc = layer_bwd(&c, il, g->x_in[il], &a, dx, dx_prev);
        }
        acts_free(&a);
        if (have_f32) layer_f32_free(m, il, &lw_f32);
        c.lw_f32 = NULL;
        float *tmp = dx;
        dx = dx_prev;
        dx_prev = tmp;
    }
    // embedding rows: d(token_embd)[tok_t] += dx_t
    float *demb = grads ? (float *)grads->token_embd.data : NULL;
    if (rc == 0 && demb)
        for (int t = 0; t < T; t++) {
            float *row = demb + (size_t)g->tokens[t] * H;
            for (int i = 0; i < H; i++) row[i] += dx[(size_t)t * H + i];
        }
    ffree(dx);
    ffree(dx_prev);
    return rc;
}

int bn_train_backward_full(bn_train_graph *g, const float *dlogits, const bn_weights *grads, char *err, size_t errlen) {
    if (!grads) return bn_err(err, errlen, "training: bn_train_backward_full needs gradient buffers");
    return backward_all(g, dlogits, grads, err, errlen);
}

int bn_train_backward_all_lora(bn_train_graph *g, const float *dlogits, char *err, size_t errlen) {
    return backward_all(g, dlogits, NULL, err, errlen);
}

void bn_train_graph_free(bn_train_graph *g) {
    if (!g) return;
    if (g->x_in) {
        // layer inputs: x_in[0] is the embedding buffer; x_in[il+1] the output of layer il
        for (int il = 0; il < g->m->cfg.n_layer; il++) ffree(g->x_in[il]);
        ffree(g->x_in);
    }
    ffree(g->x_last);
    ffree(g->head.drop);
    ffree(g->layer_rng);
    ffree(g->x_final);
    ffree(g->tokens);
    ffree(g);
}
