// train/sft.c — full-parameter training state, cross-entropy, token data and the F32 write-back. See sft.h.
#include "base/bytebuf.h"
#include "train/sft.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "base/util.h"
#include "gguf/gguf.h"
#include "core/ops.h"
#include "quant/quant.h"
#include "train/graph.h"

// bn_layer_weights is walked as an array of bn_weight (every field is one).
_Static_assert(sizeof(bn_layer_weights) % sizeof(bn_weight) == 0, "bn_layer_weights must hold only bn_weight fields");
enum { LAYER_FIELDS = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight)) };

// each_weight: calls fn on every present weight of w (token_embd, output_norm, output unless tied,
// then every layer field in struct order) with the matching weight of the shadow models.
typedef void (*weight_fn)(void *ctx, const bn_weight *src, bn_weight *dst_p, bn_weight *dst_g);

static void each_weight(const bn_model *src, bn_weights *wp, bn_weights *wg, weight_fn fn, void *ctx) {
    const bn_weights *w = &src->w;
    fn(ctx, &w->token_embd, &wp->token_embd, &wg->token_embd);
    fn(ctx, &w->output_norm, &wp->output_norm, &wg->output_norm);
    if (!src->cfg.tied_output) fn(ctx, &w->output, &wp->output, &wg->output);
    for (int il = 0; il < src->cfg.n_layer; il++) {
        const bn_weight *s = (const bn_weight *)&w->layers[il];
        bn_weight *dp = (bn_weight *)&wp->layers[il], *dg = (bn_weight *)&wg->layers[il];
        for (int f = 0; f < LAYER_FIELDS; f++) fn(ctx, &s[f], &dp[f], &dg[f]);
    }
}

typedef struct { bn_sft_params *p; int pass; char *err; size_t errlen; int rc; } build_ctx;

// build_one: pass 0 counts, pass 1 assigns offsets, views and copies the data.
static void build_one(void *vctx, const bn_weight *src, bn_weight *dp, bn_weight *dg) {
    build_ctx *c = vctx;
    bn_sft_params *p = c->p;
    if (!src->data || c->rc) return;
    int64_t n = src->ne[0] * src->ne[1] * src->ne[2] * src->ne[3];
    if (c->pass == 0) {
        p->n_tensors++;
        p->n_params += n;
        return;
    }
    bn_sft_tensor *t = &p->t[p->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", src->name ? src->name : "?");
    const gguf_tensor *gt = src->name ? gguf_find_tensor(p->src->gguf, src->name) : NULL;
    t->n_dims = gt ? (int)gt->n_dims : 2;
    memcpy(t->ne, src->ne, sizeof t->ne);
    t->off = p->n_params;
    t->n = n;
    t->src = src;
    p->n_params += n;
    *dp = *src;
    dp->type = BN_F32;
    dp->data = p->params + t->off;
    *dg = *dp;
    dg->data = p->grads + t->off;
    if (bn_dequantize(src->type, src->data, p->params + t->off, n) != 0) {
        bn_err(c->err, c->errlen, "sft: cannot dequantize %s (type %s)", t->name, bn_type_name(src->type));
        c->rc = -1;
    }
}

typedef struct { bn_sft_params *p; } views_ctx;

// view_one: points the shadow weight of src at params, or at fq for a QAT tensor.
static void view_one(void *vctx, const bn_weight *src, bn_weight *dp, bn_weight *dg) {
    bn_sft_params *p = ((views_ctx *)vctx)->p;
    (void)dg;
    for (int i = 0; i < p->n_tensors; i++) {
        const bn_sft_tensor *t = &p->t[i];
        if (t->src != src) continue;
        dp->data = (t->qat && p->fq ? p->fq : p->params) + t->off;
        return;
    }
}

void bn_sft_set_views(bn_sft_params *p) {
    views_ctx c = {p};
    each_weight(p->src, &p->m.w, &p->g, view_one, &c);
    if (p->src->cfg.tied_output) p->m.w.output = p->m.w.token_embd;
}

bn_sft_params *bn_sft_params_new(const bn_model *src, char *err, size_t errlen) {
    if (src->cfg.arch != BN_ARCH_QWEN35 && src->cfg.arch != BN_ARCH_QWEN3 && src->cfg.arch != BN_ARCH_LLAMA) {
        bn_err(err, errlen, "sft: unsupported architecture (qwen35, qwen3, llama)");
        return NULL;
    }
    bn_sft_params *p = xcalloc(1, sizeof *p);
    p->src = src;
    p->qat_type = -1;
    p->m = *src;
    const int L = src->cfg.n_layer;
    p->m.w.layers = xcalloc((size_t)L, sizeof(bn_layer_weights));
    p->g.layers = xcalloc((size_t)L, sizeof(bn_layer_weights));
    build_ctx c = {.p = p, .pass = 0, .err = err, .errlen = errlen};
    each_weight(src, &p->m.w, &p->g, build_one, &c);
    p->t = xcalloc((size_t)p->n_tensors, sizeof(bn_sft_tensor));
    int64_t n = p->n_params;
    p->params = xcalloc((size_t)(2 * n), sizeof(float)); // params then grads: one allocation
    p->grads = p->params + n;
    p->n_tensors = 0;
    p->n_params = 0;
    c.pass = 1;
    each_weight(src, &p->m.w, &p->g, build_one, &c);
    if (c.rc) { bn_sft_params_free(p); return NULL; }
    if (src->cfg.tied_output) {
        p->m.w.output = p->m.w.token_embd;
        p->g.output = p->g.token_embd;
    }
    return p;
}

void bn_sft_params_free(bn_sft_params *p) {
    if (!p) return;
    free(p->m.w.layers);
    free(p->g.layers);
    free(p->t);
    free(p->params);
    free(p->fq);
    free(p);
}

void bn_sft_zero_grad(bn_sft_params *p) { memset(p->grads, 0, sizeof(float) * (size_t)p->n_params); }

int bn_sft_save_gguf_f32(const bn_sft_params *p, const char *path, char *err, size_t errlen) {
    const gguf_file *f = p->src->gguf;
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < f->n_kv; i++) gguf_set_kv(w, &f->kv[i]);
    gguf_set_u32(w, "general.file_type", 0); // all F32
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors && rc == 0; i++) {
        const gguf_tensor *gt = &f->tensors[i];
        const bn_sft_tensor *t = NULL;
        for (int k = 0; k < p->n_tensors; k++)
            if (strcmp(p->t[k].name, gt->name) == 0) { t = &p->t[k]; break; }
        if (t) rc = gguf_writer_add_tensor(w, gt->name, (int)gt->n_dims, gt->ne, BN_F32, BN_F32, p->params + t->off,
                                           err, errlen) < 0 ? -1 : 0;
        else rc = gguf_writer_add_tensor(w, gt->name, (int)gt->n_dims, gt->ne, gt->type, gt->file_type, gt->data,
                                         err, errlen) < 0 ? -1 : 0;
    }
    if (rc == 0) rc = gguf_writer_write(w, path, NULL, NULL, err, errlen);
    gguf_writer_free(w);
    return rc;
}

// ---- loss ----------------------------------------------------------------------------------------

double bn_sft_ce(const float *logits, const int32_t *targets, int T, int V, float scale, float *dlogits,
                 int *n_counted) {
    int cnt = 0;
    for (int t = 0; t < T; t++) cnt += targets[t] >= 0;
    if (n_counted) *n_counted = cnt;
    if (dlogits) memset(dlogits, 0, sizeof(float) * (size_t)T * V);
    if (cnt == 0) return 0;
    double sum = 0;
    for (int t = 0; t < T; t++) {
        if (targets[t] < 0) continue;
        const float *z = logits + (size_t)t * V;
        double lse = bn_log_sum_exp(z, V);
        sum += lse - z[targets[t]];
        if (dlogits) {
            float *dz = dlogits + (size_t)t * V;
            const double k = (double)scale / cnt;
            for (int i = 0; i < V; i++) dz[i] = (float)(k * exp((double)z[i] - lse));
            dz[targets[t]] -= (float)k;
        }
    }
    return sum / cnt;
}

double bn_sft_seq_loss(bn_sft_params *p, const int32_t *tokens, int T, float scale, bool backward,
                       char *err, size_t errlen) {
    if (T < 2) { bn_err(err, errlen, "sft: a sequence needs at least 2 tokens"); return -1; }
    const int V = p->m.cfg.n_vocab, n = T - 1;
    float *logits = xmalloc(sizeof(float) * (size_t)V * n);
    bn_train_graph *g = bn_train_forward_all(&p->m, tokens, n, logits, err, errlen);
    if (!g) { free(logits); return -1; }
    float *dl = backward ? xmalloc(sizeof(float) * (size_t)V * n) : NULL;
    double loss = bn_sft_ce(logits, tokens + 1, n, V, scale, dl, NULL);
    if (backward && bn_train_backward_full(g, dl, &p->g, err, errlen) != 0) loss = -1;
    bn_train_graph_free(g);
    free(dl);
    free(logits);
    return loss;
}

// ---- token data ----------------------------------------------------------------------------------

int bn_sft_data_load(bn_sft_data *d, const char *path, int n_vocab, double val_frac, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    size_t size;
    char *buf = bn_read_file(path, &size, err, errlen);
    if (!buf) return -1;
    if (size % 4 != 0 || size == 0) {
        free(buf);
        return bn_err(err, errlen, "%s: %zu bytes is not a non-empty list of uint32 token ids", path, size);
    }
    d->n = (int64_t)(size / 4);
    d->tok = xmalloc(sizeof(int32_t) * (size_t)d->n);
    for (int64_t i = 0; i < d->n; i++) {
        const uint8_t *b = (const uint8_t *)buf + 4 * i;
        uint32_t v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        if (v >= (uint32_t)n_vocab) {
            free(buf);
            bn_sft_data_free(d);
            return bn_err(err, errlen, "%s: token %u at position %lld >= n_vocab %d", path, v, (long long)i, n_vocab);
        }
        d->tok[i] = (int32_t)v;
    }
    free(buf);
    d->n_train = d->n - (int64_t)((double)d->n * val_frac);
    return 0;
}

void bn_sft_data_free(bn_sft_data *d) {
    free(d->tok);
    memset(d, 0, sizeof *d);
}

int64_t bn_sft_window(const bn_sft_data *d, int len, bn_rng *rng) {
    int64_t span = d->n_train - len;
    return span > 0 ? (int64_t)bn_rng_below(rng, (uint64_t)span + 1) : 0;
}

double bn_sft_eval_ppl(bn_sft_params *p, const bn_sft_data *d, int ctx, int max_windows, char *err, size_t errlen) {
    double sum = 0;
    int64_t cnt = 0;
    int windows = 0;
    for (int64_t s = d->n_train; s + 1 < d->n; s += ctx) {
        if (max_windows > 0 && windows >= max_windows) break;
        int len = (int)(d->n - s < ctx + 1 ? d->n - s : ctx + 1);
        double l = bn_sft_seq_loss(p, d->tok + s, len, 1.0f, false, err, errlen);
        if (l < 0) return -1;
        sum += l * (len - 1);
        cnt += len - 1;
        windows++;
    }
    if (cnt == 0) { bn_err(err, errlen, "sft: no held-out tokens"); return -1; }
    return exp(sum / cnt);
}
