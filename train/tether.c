// train/tether.c — the plain-text KL tether of FTPO training. See tether.h.
#include "train/tether.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "base/util.h"
#include "base/rng.h"
#include "core/ops.h"
#include "train/graph.h"

void bn_log_softmax(const float *z, int T, int V, float *out) {
    for (int t = 0; t < T; t++) {
        const float *zt = z + (size_t)t * V;
        float *ot = out + (size_t)t * V;
        double lse = bn_log_sum_exp(zt, V);
        for (int i = 0; i < V; i++) ot[i] = (float)((double)zt[i] - lse);
    }
}

double bn_tether_kl(const float *z, const float *logp_ref, int T, int V, float scale, float *dz) {
    if (T <= 0) return 0;
    double kl = 0;
    double *lp = xmalloc(sizeof(double) * (size_t)V); // log p_θ of one position
    for (int t = 0; t < T; t++) {
        const float *zt = z + (size_t)t * V, *lr = logp_ref + (size_t)t * V;
        double lse = bn_log_sum_exp(zt, V);
        double kt = 0;
        for (int i = 0; i < V; i++) {
            lp[i] = (float)((double)zt[i] - lse); // rounded as bn_log_softmax rounds logp_ref: equal logits, KL 0
                                                  // and gradient 0 exactly (no rounding noise for AdamW to amplify)
            double pr = exp((double)lr[i]);
            kt += pr * ((double)lr[i] - lp[i]);
        }
        kl += kt;
        if (dz) {
            float *g = dz + (size_t)t * V;
            double k = (double)scale / T;
            for (int i = 0; i < V; i++) g[i] = (float)(k * (exp(lp[i]) - exp((double)lr[i])));
        }
    }
    free(lp);
    return kl / T;
}

int bn_tether_loss(const bn_model *m_pol, bn_lora *l, const int32_t *tokens, int n, const float *logp_ref,
                   float scale, bool backward, double *kl, char *err, size_t errlen) {
    const int V = m_pol->cfg.n_vocab;
    float *z = xmalloc(sizeof(float) * (size_t)V * n);
    bn_train_graph *g = bn_train_forward_all_lora(m_pol, l, tokens, n, z, err, errlen);
    if (!g) { free(z); return -1; }
    float *dz = backward ? xmalloc(sizeof(float) * (size_t)V * n) : NULL;
    *kl = bn_tether_kl(z, logp_ref, n, V, scale, dz);
    int rc = backward ? bn_train_backward_all_lora(g, dz, err, errlen) : 0;
    bn_train_graph_free(g);
    free(dz);
    free(z);
    return rc;
}

int bn_tether_ref(const bn_model *m, const int32_t *tokens, int n, float *logp, char *err, size_t errlen) {
    bn_train_graph *g = bn_train_forward_all(m, tokens, n, logp, err, errlen);
    if (!g) return -1;
    bn_train_graph_free(g);
    bn_log_softmax(logp, n, m->cfg.n_vocab, logp);
    return 0;
}

struct bn_tether {
    const int32_t *tokens; // the text, n_win·ctx tokens used
    float lambda;
    int n_win, ctx, batch;
    int *order;          // [n_win]: seeded shuffled window order
    float **logp;        // [n_win]: cached reference log-probabilities {V, ctx} or NULL
    size_t cached, cap;  // bytes cached / allowed
    const bn_train_device *dev; // the forwards' device backend, or NULL (the CPU)
    void *dev_ctx, *dev_ref_ctx; // the policy's and the reference's contexts on it
};

bn_tether *bn_tether_new(const int32_t *tokens, int64_t n, float lambda, int ctx, int batch, int cache_mb,
                         uint64_t seed, int *rc, char *err, size_t errlen) {
    *rc = 0;
    if (lambda <= 0 || !tokens || n <= 0) return NULL;
    ctx = ctx > 0 ? ctx : 64;
    batch = batch > 0 ? batch : 2;
    if (ctx < 2 || n < ctx) {
        *rc = bn_err(err, errlen, "tether: %lld tokens of text, need at least one window of %d (>= 2)", (long long)n, ctx);
        return NULL;
    }
    bn_tether *t = xcalloc(1, sizeof *t);
    t->tokens = tokens;
    t->lambda = lambda;
    t->ctx = ctx;
    t->batch = batch;
    t->n_win = (int)(n / ctx);
    t->order = xmalloc(sizeof(int) * t->n_win);
    t->logp = xcalloc((size_t)t->n_win, sizeof(float *));
    t->cap = (size_t)(cache_mb > 0 ? cache_mb : 512) << 20;
    bn_rng rng;
    bn_rng_seed(&rng, seed ^ 0x7e7e7e7e7e7e7e7eULL);
    for (int i = 0; i < t->n_win; i++) t->order[i] = i;
    for (int i = t->n_win - 1; i > 0; i--) {
        int j = (int)bn_rng_below(&rng, (uint64_t)i + 1);
        int x = t->order[i]; t->order[i] = t->order[j]; t->order[j] = x;
    }
    return t;
}

void bn_tether_free(bn_tether *t) {
    if (!t) return;
    for (int i = 0; i < t->n_win; i++) free(t->logp[i]);
    free(t->logp);
    free(t->order);
    free(t);
}

void bn_tether_windows(const bn_tether *t, int *batch, int *ctx, int *n_win) {
    *batch = t->batch;
    *ctx = t->ctx;
    *n_win = t->n_win;
}

void bn_tether_use_device(bn_tether *t, const bn_train_device *dev, void *ctx, void *ref_ctx) {
    t->dev = dev && dev->forward_all ? dev : NULL;
    t->dev_ctx = t->dev ? ctx : NULL;
    t->dev_ref_ctx = t->dev ? ref_ctx : NULL;
}

// window_ref: logp {V, n} = the reference's log-probabilities of one window (on the tether's device, the reference
// context's model without its adapter); 0 or -1 (err).
static int window_ref(const bn_tether *t, const bn_model *m_ref, const int32_t *tok, float *logp, char *err,
                      size_t errlen) {
    if (!t->dev) return bn_tether_ref(m_ref, tok, t->ctx, logp, err, errlen);
    void *g = t->dev->forward_all(t->dev_ref_ctx, false, tok, t->ctx, logp, err, errlen);
    if (!g) return -1;
    t->dev->graph_free(g);
    bn_log_softmax(logp, t->ctx, m_ref->cfg.n_vocab, logp);
    return 0;
}

// window_loss: *kl of one window against logp, its gradient scaled by `scale` added (on the tether's device, into the
// device's gradients); 0 or -1 (err).
static int window_loss(const bn_tether *t, const bn_model *m_pol, bn_lora *l, const int32_t *tok, const float *logp,
                       float scale, double *kl, char *err, size_t errlen) {
    if (!t->dev) return bn_tether_loss(m_pol, l, tok, t->ctx, logp, scale, true, kl, err, errlen);
    const size_t n = (size_t)m_pol->cfg.n_vocab * t->ctx;
    float *z = xmalloc(sizeof(float) * n), *dz = xmalloc(sizeof(float) * n);
    void *g = t->dev->forward_all(t->dev_ctx, true, tok, t->ctx, z, err, errlen);
    int rc = -1;
    if (g) {
        *kl = bn_tether_kl(z, logp, t->ctx, m_pol->cfg.n_vocab, scale, dz);
        rc = t->dev->backward(g, dz, err, errlen);
        t->dev->graph_free(g);
    }
    free(dz);
    free(z);
    return rc;
}

int bn_tether_step(bn_tether *t, const bn_model *m_ref, const bn_model *m_pol, bn_lora *l, int64_t step,
                   double *kl_mean, char *err, size_t errlen) {
    const int V = m_ref->cfg.n_vocab;
    const size_t bytes = sizeof(float) * (size_t)V * t->ctx;
    double kl_sum = 0;
    for (int j = 0; j < t->batch; j++) {
        int w = t->order[(step * t->batch + j) % t->n_win];
        const int32_t *tok = t->tokens + (int64_t)w * t->ctx;
        float *logp = t->logp[w], *tmp = NULL;
        if (!logp) {
            logp = tmp = xmalloc(bytes);
            if (window_ref(t, m_ref, tok, logp, err, errlen)) { free(tmp); return -1; }
            if (t->cached + bytes <= t->cap) { t->logp[w] = tmp; tmp = NULL; t->cached += bytes; }
        }
        double kl = 0;
        int rc = window_loss(t, m_pol, l, tok, logp, t->lambda / t->batch, &kl, err, errlen);
        free(tmp);
        if (rc) return -1;
        kl_sum += kl;
    }
    *kl_mean = kl_sum / t->batch;
    return 0;
}
