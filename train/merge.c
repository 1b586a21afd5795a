// train/merge.c — adapter merge into a GGUF. See merge.h.
#include "train/merge.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include "quantize/quantize.h"
#include "train/fakequant.h"
#include <unistd.h>

typedef struct {
    const gguf_file *g;
    const bn_lora *l;
    float user_scale;      // × α/r
    int *lora_of;          // [n_tensors]: adapter tensor index or -1
    int *out_type;         // [n_tensors]
    bool keep_scales;      // adapted tensors: bn_quantize_keep_scales with the scales of Q(W) in out_type
    bn_merge_stat *stats;  // [l->n_tensors] or NULL
} merge_ctx;

// merge_stat: fills s for base W, fp32 merge Wm and the dequantized written tensor back (n elements).
static void merge_stat(const char *name, int type, const float *W, const float *Wm, const float *back, int64_t n,
                       bn_merge_stat *s) {
    snprintf(s->name, sizeof s->name, "%s", name);
    s->type = type;
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

// fill: writes tensor idx — merged (adapted) or copied bytes.
static int fill(void *vctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    merge_ctx *c = vctx;
    const gguf_tensor *t = &c->g->tensors[idx];
    int li = c->lora_of[idx];
    if (li < 0) { memcpy(dst, t->data, nbytes); return 0; }
    int64_t n = gguf_tensor_nelements(t);
    float *W = xmalloc(sizeof(float) * n), *Wm = xmalloc(sizeof(float) * n), *back = xmalloc(sizeof(float) * n);
    int rc = -1;
    if (bn_dequantize(t->type, t->data, W, n) || bn_lora_merged_f32(c->l, li, c->user_scale, t->type, t->data, Wm)) {
        bn_err(err, errlen, "merge: cannot dequantize %s (%s)", t->name, bn_type_name(t->type));
        goto out;
    }
    int ty = c->out_type[idx];
    if (ty == BN_F32) memcpy(dst, Wm, sizeof(float) * n);
    else if (c->keep_scales && bn_type_keeps_scales(ty)) { // the base's scales: Q(W), then the merged codes at them
        if (bn_quantize_ref(ty, W, dst, n) != nbytes || bn_quantize_keep_scales(ty, Wm, dst, dst, n) != nbytes) {
            bn_err(err, errlen, "merge: keep-scales: cannot quantize %s as %s", t->name, bn_type_name(ty));
            goto out;
        }
    } else if (bn_quantize_ref(ty, Wm, dst, n) != nbytes) { bn_err(err, errlen, "merge: cannot quantize %s to %s", t->name, bn_type_name(ty)); goto out; }
    if (c->stats) {
        if (bn_dequantize(ty, dst, back, n)) { bn_err(err, errlen, "merge: cannot read back %s", t->name); goto out; }
        merge_stat(t->name, ty, W, Wm, back, n, &c->stats[li]);
    }
    rc = 0;
out:
    free(W); free(Wm); free(back);
    return rc;
}

// merge_write: bn_lora_merge_gguf, or with ks_target the adapted tensors in the type `bonsai-quantize --type
// ks_target [--output-tensor-type ks_output]` gives them, quantized with keep-scales (everything else copied);
// 0 or -1 (err).
static int merge_write(const char *base_path, const bn_lora *l, float user_scale, int mode, const char *ks_target,
                       const char *ks_output, const char *out_path, bn_merge_stat *stats, char *err, size_t errlen) {
    gguf_file *g = gguf_open(base_path, err, errlen);
    if (!g) return -1;
    merge_ctx c = {.g = g, .l = l, .user_scale = user_scale, .keep_scales = ks_target != NULL, .stats = stats};
    bool tied = gguf_find_tensor(g, "output.weight") == NULL;
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
        if (ks_target) {
            int64_t ne[4] = {t->ne[0], t->ne[1], 1, 1};
            if ((c.out_type[i] = bn_requant_type(ks_target, ks_output, t->name, ne, t->type, tied, err, errlen)) < 0)
                goto out;
        } else if (mode == BN_MERGE_F16) c.out_type[i] = BN_F16;
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

int bn_lora_merge_gguf(const char *base_path, const bn_lora *l, float user_scale, int mode, const char *out_path,
                       bn_merge_stat *stats, char *err, size_t errlen) {
    return merge_write(base_path, l, user_scale, mode, NULL, NULL, out_path, stats, err, errlen);
}

// requant_stats: stats of every adapted tensor of out_path (quantized) against base_path; 0 or -1.
static int requant_stats(const char *base_path, const char *out_path, const bn_lora *l, float user_scale,
                         bn_merge_stat *stats, char *err, size_t errlen) {
    gguf_file *gb = gguf_open(base_path, err, errlen), *go = gb ? gguf_open(out_path, err, errlen) : NULL;
    int rc = gb && go ? 0 : -1;
    for (int i = 0; i < l->n_tensors && rc == 0; i++) {
        const gguf_tensor *tb = gguf_find_tensor(gb, l->t[i].name), *to = gguf_find_tensor(go, l->t[i].name);
        int64_t n = l->t[i].n_in * l->t[i].n_out;
        float *W = xmalloc(sizeof(float) * n), *Wm = xmalloc(sizeof(float) * n), *back = xmalloc(sizeof(float) * n);
        if (!tb || !to || bn_dequantize(tb->type, tb->data, W, n) ||
            bn_lora_merged_f32(l, i, user_scale, tb->type, tb->data, Wm) || bn_dequantize(to->type, to->data, back, n))
            rc = bn_err(err, errlen, "merge: cannot read %s back", l->t[i].name);
        else
            merge_stat(l->t[i].name, to->type, W, Wm, back, n, &stats[i]);
        free(W); free(Wm); free(back);
    }
    gguf_close(go);
    gguf_close(gb);
    return rc;
}

int bn_lora_merge_requant(const char *base_path, const bn_lora *l, float user_scale, const char *target,
                          const char *output_type, bool keep_scales, const char *out_path, bn_merge_stat *stats,
                          char *err, size_t errlen) {
    // the fp32 merge in a temporary file (keep_scales: the adapted tensors already in their target type), then
    // the requantize driver on it: every tensor gets exactly the type and bytes `bonsai-quantize --type target`
    // would give, adapted ones from their fp32 values (keep_scales: copied, as their type no longer changes)
    size_t n = strlen(out_path) + 32;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.merge-f32.tmp", out_path);
    int rc = merge_write(base_path, l, user_scale, BN_MERGE_F32, keep_scales ? target : NULL, output_type, tmp, NULL,
                         err, errlen);
    if (rc == 0) {
        bn_quantize_params p = bn_quantize_params_default();
        p.type = target;
        p.output_type = output_type;
        p.allow_requantize = true;
        p.log = NULL;
        rc = bn_quantize_file(&p, tmp, out_path, err, errlen);
        unlink(tmp);
    }
    free(tmp);
    if (rc == 0 && stats) rc = requant_stats(base_path, out_path, l, user_scale, stats, err, errlen);
    return rc;
}
