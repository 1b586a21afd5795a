// train/merge.c — adapter merge into a GGUF. See merge.h.
#include "train/merge.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "core/gguf.h"
#include "core/util.h"
#include "quant/quant.h"

typedef struct {
    const gguf_file *g;
    const bn_lora *l;
    float scale;
    int *lora_of;          // [n_tensors]: adapter tensor index or -1
    int *out_type;         // [n_tensors]
    bn_merge_stat *stats;  // [l->n_tensors] or NULL
} merge_ctx;

// fill: writes tensor idx — merged (adapted) or copied bytes.
static int fill(void *vctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    merge_ctx *c = vctx;
    const gguf_tensor *t = &c->g->tensors[idx];
    int li = c->lora_of[idx];
    if (li < 0) { memcpy(dst, t->data, nbytes); return 0; }
    const bn_lora_tensor *lt = &c->l->t[li];
    int64_t n = gguf_tensor_nelements(t);
    float *W = xmalloc(sizeof(float) * n), *Wm = xmalloc(sizeof(float) * n), *back = xmalloc(sizeof(float) * n);
    int rc = -1;
    if (bn_dequantize(t->type, t->data, W, n)) { bn_err(err, errlen, "merge: cannot dequantize %s (%s)", t->name, bn_type_name(t->type)); goto out; }
    memcpy(Wm, W, sizeof(float) * n);
    bn_lora_merge_f32(Wm, lt->n_in, lt->n_out, c->l->params + lt->off_a, c->l->params + lt->off_b, c->l->r, c->scale);
    int ty = c->out_type[idx];
    if (ty == BN_F32) memcpy(dst, Wm, sizeof(float) * n);
    else if (bn_quantize_ref(ty, Wm, dst, n) != nbytes) { bn_err(err, errlen, "merge: cannot quantize %s to %s", t->name, bn_type_name(ty)); goto out; }
    if (c->stats) {
        bn_merge_stat *s = &c->stats[li];
        snprintf(s->name, sizeof s->name, "%s", t->name);
        s->type = ty;
        if (bn_dequantize(ty, dst, back, n)) { bn_err(err, errlen, "merge: cannot read back %s", t->name); goto out; }
        double ww = 0, dd = 0, kept = 0;
        int64_t flips = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = (double)Wm[i] - W[i];
            ww += (double)W[i] * W[i];
            dd += d * d;
            kept += ((double)back[i] - W[i]) * d;
            flips += (W[i] > 0 && back[i] < 0) || (W[i] < 0 && back[i] > 0);
        }
        s->rel_delta = ww > 0 ? sqrt(dd / ww) : 0;
        s->kept = dd > 0 ? kept / dd : 1;
        s->sign_flips = (double)flips / n;
    }
    rc = 0;
out:
    free(W); free(Wm); free(back);
    return rc;
}

int bn_lora_merge_gguf(const char *base_path, const bn_lora *l, float user_scale, int mode, const char *out_path,
                       bn_merge_stat *stats, char *err, size_t errlen) {
    gguf_file *g = gguf_open(base_path, err, errlen);
    if (!g) return -1;
    merge_ctx c = {.g = g, .l = l, .scale = user_scale * bn_lora_scale(l), .stats = stats};
    c.lora_of = xmalloc(sizeof(int) * (g->n_tensors + 1));
    c.out_type = xmalloc(sizeof(int) * (g->n_tensors + 1));
    gguf_writer *w = gguf_writer_new();
    int rc = -1, n_found = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int li = bn_lora_find(l, t->name);
        c.lora_of[i] = li;
        c.out_type[i] = t->type;
        if (li < 0) continue;
        n_found++;
        if (t->ne[0] != l->t[li].n_in || t->ne[1] != l->t[li].n_out || t->n_dims != 2) {
            bn_err(err, errlen, "merge: %s is {%lld, %lld} in the base but {%lld, %lld} in the adapter", t->name,
                   (long long)t->ne[0], (long long)t->ne[1], (long long)l->t[li].n_in, (long long)l->t[li].n_out);
            goto out;
        }
        if (mode == BN_MERGE_F16) c.out_type[i] = BN_F16;
        else if (mode == BN_MERGE_F32) c.out_type[i] = BN_F32;
        const bn_type_traits *tr = bn_type_traits_of(c.out_type[i]);
        if (c.out_type[i] != BN_F32 && (!tr || !tr->from_float_ref)) {
            bn_err(err, errlen, "merge: no quantizer for %s (type %s); use F16 or F32 output", t->name, bn_type_name(c.out_type[i]));
            goto out;
        }
    }
    if (n_found != l->n_tensors) {
        for (int i = 0; i < l->n_tensors; i++)
            if (!gguf_find_tensor(g, l->t[i].name)) { bn_err(err, errlen, "merge: adapter tensor %s is not in %s", l->t[i].name, base_path); break; }
        goto out;
    }
    for (size_t i = 0; i < g->n_kv; i++) gguf_set_kv(w, &g->kv[i]);
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        bool changed = c.lora_of[i] >= 0;
        uint32_t file_type = changed && c.out_type[i] != t->type ? (uint32_t)c.out_type[i] : t->file_type;
        if (gguf_writer_add_tensor(w, t->name, (int)t->n_dims, t->ne, c.out_type[i], file_type, NULL, err, errlen) < 0) goto out;
    }
    rc = gguf_writer_write(w, out_path, fill, &c, err, errlen);
out:
    gguf_writer_free(w);
    free(c.lora_of);
    free(c.out_type);
    gguf_close(g);
    return rc;
}
