// train/fakequant.c — in-memory deq(Q(w)) with bonsai-quantize's rules and quantizers. See fakequant.h.
#include "train/fakequant.h"
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "quantize/rules.h"

int bn_fake_quantize(int type, const float *w, float *out, int64_t n_in, int64_t n_out) {
    int blck = bn_type_blck(type);
    if (blck <= 0 || n_in % blck) return -1;
    if (type == BN_F32) {
        if (out != w) memmove(out, w, sizeof(float) * (size_t)n_in * (size_t)n_out);
        return 0;
    }
    size_t row_bytes = bn_row_size(type, n_in);
    uint8_t *q = xmalloc(row_bytes * (size_t)n_out);
    char err[256];
    // the requantize driver's own row conversion (reference quantizer, or its bit-identical fast path)
    int rc = bn_quantize_rows(BN_F32, w, type, q, n_out, n_in, 1, err, sizeof err);
    if (rc == 0) rc = bn_dequantize(type, q, out, n_in * n_out);
    free(q);
    return rc;
}

int bn_requant_type(const char *target, const char *output_type, const char *name, const int64_t ne[4],
                    int src_type, bool tied, char *err, size_t errlen) {
    int ftype, def;
    if (bn_parse_ftype(target, false, &ftype, &def, err, errlen) != 0) return -1;
    bn_quant_rules rules;
    bn_quant_rules_init(&rules, ftype, def, false);
    rules.tied = tied;
    if (output_type && (rules.output_type = bn_parse_tensor_type_name(output_type, false, err, errlen)) < 0)
        return -1;
    int n_dims = 4;
    while (n_dims > 1 && ne[n_dims - 1] <= 1) n_dims--;
    bn_tensor_choice ch;
    int rc = bn_tensor_choose_type(&rules, name, n_dims, ne, src_type, &ch, err, errlen);
    bn_quant_rules_free(&rules);
    return rc == 0 ? ch.type : -1;
}

int bn_model_weight_slots(bn_model *m, bn_weight **out, int cap) {
    const int per = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    int n = 0;
    bn_weight *top[] = {&m->w.token_embd, &m->w.output_norm, m->cfg.tied_output ? NULL : &m->w.output};
    for (int i = 0; i < 3; i++) {
        if (!top[i]) continue;
        if (n < cap) out[n] = top[i];
        n++;
    }
    for (int il = 0; il < m->cfg.n_layer; il++)
        for (int i = 0; i < per; i++) {
            if (n < cap) out[n] = (bn_weight *)&m->w.layers[il] + i;
            n++;
        }
    return n;
}

// find_weight: the present weight of m named name, or NULL.
static bn_weight *find_weight(bn_model *m, const char *name) {
    int n = bn_model_weight_slots(m, NULL, 0);
    bn_weight **slots = xmalloc(sizeof(bn_weight *) * (size_t)n), *found = NULL;
    bn_model_weight_slots(m, slots, n);
    for (int i = 0; i < n && !found; i++)
        if (slots[i]->data && slots[i]->name && !strcmp(slots[i]->name, name)) found = slots[i];
    free(slots);
    return found;
}

// A requantized model copy and the buffers it owns (q is first: the bn_model * handed out).
typedef struct {
    bn_model q;
    int n_owned;
    void **owned;         // [n_owned] quantized weight buffers
    int n_keep;           // bn_requant_model_keep_scales: weights whose scales are kept (0 = reference quantizer)
    bn_weight **keep_w;   // [n_keep] the weights of q
    const void **keep_of; // [n_keep] their quantized bytes when keep-scales was turned on (never written again)
} requant_model;

bn_model *bn_requant_model(const bn_model *m, const char *target, const char *output_type, char *err, size_t errlen) {
    requant_model *rm = xcalloc(1, sizeof *rm);
    rm->q = *m;
    rm->q.w.layers = xmalloc(sizeof(bn_layer_weights) * (size_t)(m->cfg.n_layer > 0 ? m->cfg.n_layer : 1));
    memcpy(rm->q.w.layers, m->w.layers, sizeof(bn_layer_weights) * (size_t)m->cfg.n_layer);
    int n = bn_model_weight_slots(&rm->q, NULL, 0);
    bn_weight **slots = xmalloc(sizeof(bn_weight *) * (size_t)n);
    bn_model_weight_slots(&rm->q, slots, n);
    rm->owned = xcalloc((size_t)n, sizeof(void *));
    int ftype, def;
    if (bn_parse_ftype(target, false, &ftype, &def, err, errlen) != 0) goto fail;
    for (int i = 0; i < n; i++) {
        bn_weight *w = slots[i];
        if (!w->data || !w->name) continue;
        int64_t ne[4];
        for (int d = 0; d < 4; d++) ne[d] = w->ne[d] > 0 ? w->ne[d] : 1;
        int ty = bn_requant_type(target, output_type, w->name, ne, w->type, m->cfg.tied_output, err, errlen);
        if (ty < 0) goto fail;
        if (ty == w->type) continue; // bonsai-quantize copies it byte for byte
        int64_t nrows = ne[1] * ne[2] * ne[3];
        void *buf = xmalloc(bn_row_size(ty, ne[0]) * (size_t)nrows);
        rm->owned[rm->n_owned++] = buf;
        if (bn_quantize_rows(w->type, w->data, ty, buf, nrows, ne[0], 0, err, errlen) != 0) goto fail;
        w->data = buf;
        w->type = ty;
    }
    if (m->cfg.tied_output) rm->q.w.output = rm->q.w.token_embd;
    rm->q.ftype = ftype;
    free(slots);
    return &rm->q;
fail:
    free(slots);
    bn_requant_model_free(&rm->q);
    return NULL;
}

void bn_requant_model_keep_scales(bn_model *q) {
    requant_model *rm = (requant_model *)q;
    int n = bn_model_weight_slots(q, NULL, 0);
    rm->keep_w = xrealloc(rm->keep_w, sizeof(bn_weight *) * (size_t)n);
    rm->keep_of = xrealloc(rm->keep_of, sizeof(void *) * (size_t)n);
    bn_model_weight_slots(q, rm->keep_w, n);
    for (int i = 0; i < n; i++) rm->keep_of[i] = rm->keep_w[i]->data;
    rm->n_keep = n;
}

// keep_scales_of: the bytes whose scales weight wt keeps, or NULL when keep-scales is off.
static const void *keep_scales_of(const requant_model *rm, const bn_weight *wt) {
    for (int i = 0; i < rm->n_keep; i++)
        if (rm->keep_w[i] == wt) return rm->keep_of[i];
    return NULL;
}

int bn_requant_model_set(bn_model *q, const char *name, const float *w, char *err, size_t errlen) {
    requant_model *rm = (requant_model *)q;
    bn_weight *wt = find_weight(q, name);
    if (!wt) return bn_err(err, errlen, "requantized model has no weight %s", name);
    int64_t nrows = 1;
    for (int d = 1; d < 4; d++) nrows *= wt->ne[d] > 0 ? wt->ne[d] : 1;
    const void *scales = keep_scales_of(rm, wt);
    bool owned = false;
    for (int i = 0; i < rm->n_owned && !owned; i++) owned = rm->owned[i] == wt->data;
    void *dst = (void *)wt->data;
    if (!owned || dst == scales) { // first write (shared with m, or the kept scales): its own buffer
        dst = xmalloc(bn_row_size(wt->type, wt->ne[0]) * (size_t)nrows);
        rm->owned = xrealloc(rm->owned, sizeof(void *) * (size_t)(rm->n_owned + 1));
        rm->owned[rm->n_owned++] = dst;
    }
    if (scales && bn_type_keeps_scales(wt->type)) { // other types (a q6_k head): the reference quantizer
        if (!bn_quantize_keep_scales(wt->type, w, scales, dst, wt->ne[0] * nrows))
            return bn_err(err, errlen, "keep-scales: cannot quantize %s as %s", name, bn_type_name(wt->type));
    } else if (bn_quantize_rows(BN_F32, w, wt->type, dst, nrows, wt->ne[0], 0, err, errlen) != 0)
        return -1;
    wt->data = dst;
    if (q->cfg.tied_output && wt == &q->w.token_embd) q->w.output = q->w.token_embd;
    return 0;
}

int bn_requant_model_apply_lora(bn_model *q, const bn_model *m, const bn_lora *l, char *err, size_t errlen) {
    int rc = 0;
    for (int i = 0; i < l->n_tensors && rc == 0; i++) {
        const bn_lora_tensor *t = &l->t[i];
        const bn_weight *w0 = find_weight((bn_model *)m, t->name);
        if (!w0 || w0->ne[0] != t->n_in || w0->ne[1] != t->n_out) {
            rc = bn_err(err, errlen, "STE: adapter tensor %s is missing or mis-shaped in the model", t->name);
            break;
        }
        float *buf = xmalloc(sizeof(float) * (size_t)(t->n_in * t->n_out));
        if (bn_lora_merged_f32(l, i, 1.0f, w0->type, w0->data, buf) != 0)
            rc = bn_err(err, errlen, "STE: cannot dequantize %s (%s)", t->name, bn_type_name(w0->type));
        else
            rc = bn_requant_model_set(q, t->name, buf, err, errlen);
        free(buf);
    }
    return rc;
}

void bn_requant_model_free(bn_model *q) {
    if (!q) return;
    requant_model *rm = (requant_model *)q;
    for (int i = 0; i < rm->n_owned; i++) free(rm->owned[i]);
    free(rm->owned);
    free(rm->keep_w);
    free(rm->keep_of);
    free(rm->q.w.layers);
    free(rm);
}
