// core/adapter.c — the LoRA adapter GGUF codec and the check against a model (see core/adapter.h).
#include "core/adapter.h"
#include "base/util.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 65536

// ---- reading --------------------------------------------------------------------------------

// suffix_is: whether name ends in suf.
static bool suffix_is(const char *name, const char *suf) {
    size_t n = strlen(name), k = strlen(suf);
    return n > k && strcmp(name + n - k, suf) == 0;
}

// widen: tensor data as f32 into dst (f32, f16 or bf16); -1 on another type.
static int widen(const gguf_tensor *t, float *dst) {
    int64_t n = gguf_tensor_nelements(t);
    if (t->type == BN_F32) {
        memcpy(dst, t->data, (size_t)n * sizeof(float));
        return 0;
    }
    const uint16_t *h = t->data;
    if (t->type == BN_F16) for (int64_t i = 0; i < n; i++) dst[i] = bn_fp16_to_fp32(h[i]);
    else if (t->type == BN_BF16) for (int64_t i = 0; i < n; i++) dst[i] = bn_bf16_to_fp32(h[i]);
    else return -1;
    return 0;
}

// pair_check: the lora_b tensor of lora_a tensor ta (base name base) when the pair is well formed (2-D, the rank
// shared, a supported type), else NULL with err.
static const gguf_tensor *pair_check(const gguf_file *g, const char *path, const gguf_tensor *ta, const char *base,
                                     char *err, size_t errlen) {
    char other[176];
    snprintf(other, sizeof other, "%s.lora_b", base);
    const gguf_tensor *tb = gguf_find_tensor(g, other);
    if (!tb) return bn_err(err, errlen, "%s: %s has no matching .lora_b", path, ta->name), NULL;
    if (ta->ne[2] * ta->ne[3] != 1 || tb->ne[2] * tb->ne[3] != 1)
        return bn_err(err, errlen, "%s: %s: LoRA tensors must be 2-D (lora_a %u dims, lora_b %u dims)", path, base,
                      ta->n_dims, tb->n_dims), NULL;
    if (ta->ne[1] != tb->ne[0])
        return bn_err(err, errlen, "%s: %s: lora_a {%lld, %lld} and lora_b {%lld, %lld} do not share a rank (lora_a "
                      "is {n_in, r}, lora_b {r, n_out})", path, base, (long long)ta->ne[0], (long long)ta->ne[1],
                      (long long)tb->ne[0], (long long)tb->ne[1]), NULL;
    if (tb->ne[0] < 1 || tb->ne[0] > MAX_RANK)
        return bn_err(err, errlen, "%s: LoRA rank %lld of %s is out of range (1..%d)", path, (long long)tb->ne[0],
                      tb->name, MAX_RANK), NULL;
    for (int k = 0; k < 2; k++) {
        const gguf_tensor *t = k ? tb : ta;
        if (t->type != BN_F32 && t->type != BN_F16 && t->type != BN_BF16)
            return bn_err(err, errlen, "%s: %s: tensor type %s not supported (f32, f16, bf16)", path, t->name,
                          bn_type_name(t->type)), NULL;
    }
    return tb;
}

// scan: checks every tensor of g (each .lora_a paired with its .lora_b) and counts the pairs kept and their floats;
// 0 or -1 with err.
static int scan(const gguf_file *g, const char *path, int *n_pairs, int64_t *n_floats, char *err, size_t errlen) {
    *n_pairs = 0, *n_floats = 0;
    char base[160], other[176];
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const bool is_a = suffix_is(t->name, ".lora_a"), is_b = suffix_is(t->name, ".lora_b");
        if (!is_a && !is_b)
            return bn_err(err, errlen, "%s: unexpected tensor %s (only .lora_a/.lora_b)", path, t->name);
        snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name);
        if (suffix_is(base, "_norm.weight")) continue; // skipped like llama.cpp
        if (is_b) {
            snprintf(other, sizeof other, "%s.lora_a", base);
            if (!gguf_find_tensor(g, other))
                return bn_err(err, errlen, "%s: %s has no matching .lora_a", path, t->name);
            continue;
        }
        if (strlen(base) >= sizeof ((bn_adapter_tensor *)0)->name)
            return bn_err(err, errlen, "%s: tensor name too long: %s", path, t->name);
        const gguf_tensor *tb = pair_check(g, path, t, base, err, errlen);
        if (!tb) return -1;
        *n_floats += gguf_tensor_nelements(t) + gguf_tensor_nelements(tb);
        (*n_pairs)++;
    }
    if (*n_pairs == 0) return bn_err(err, errlen, "%s: no .lora_a/.lora_b tensor pairs", path);
    return 0;
}

bn_adapter *bn_adapter_load(const char *path, char *err, size_t errlen) {
    gguf_file *g = gguf_open(path, err, errlen);
    if (!g) return NULL;
    bn_adapter *a = NULL;
    const char *gtype = gguf_get_str(g, "general.type"), *atype = gguf_get_str(g, "adapter.type");
    const char *arch = gguf_get_str(g, "general.architecture");
    int n_pairs;
    int64_t n_floats;
    if (!gtype || strcmp(gtype, "adapter") != 0) bn_err(err, errlen, "%s: general.type is not 'adapter'", path);
    else if (!atype || strcmp(atype, "lora") != 0) bn_err(err, errlen, "%s: adapter.type is not 'lora'", path);
    else if (scan(g, path, &n_pairs, &n_floats, err, errlen) == 0) {
        a = xcalloc(1, sizeof *a);
        snprintf(a->arch, sizeof a->arch, "%s", arch ? arch : "");
        gguf_get_f32(g, "adapter.lora.alpha", &a->alpha);
        a->t = xcalloc((size_t)n_pairs, sizeof *a->t);
        a->data = xmalloc((size_t)n_floats * sizeof(float));
        a->path = xstrdup(path);
        float *p = a->data;
        char base[160];
        for (size_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *ta = &g->tensors[i];
            if (!suffix_is(ta->name, ".lora_a")) continue;
            snprintf(base, sizeof base, "%.*s", (int)(strlen(ta->name) - 7), ta->name);
            if (suffix_is(base, "_norm.weight")) continue;
            snprintf(base + strlen(base), sizeof base - strlen(base), ".lora_b");
            const gguf_tensor *tb = gguf_find_tensor(g, base);
            bn_adapter_tensor *t = &a->t[a->n_tensors++];
            snprintf(t->name, sizeof t->name, "%.*s", (int)(strlen(ta->name) - 7), ta->name);
            t->n_in = ta->ne[0], t->r = (int)ta->ne[1], t->n_out = tb->ne[1];
            t->A = p, p += gguf_tensor_nelements(ta);
            t->B = p, p += gguf_tensor_nelements(tb);
            widen(ta, t->A), widen(tb, t->B); // types checked by scan
        }
    }
    gguf_close(g);
    return a;
}

void bn_adapter_free(bn_adapter *a) {
    if (!a) return;
    free(a->t);
    free(a->data);
    free(a->path);
    free(a);
}

// ---- writing --------------------------------------------------------------------------------

// as_type: n floats of src as type (BN_F16: a converted copy in *own; else src itself).
static const void *as_type(const float *src, int64_t n, int type, void **own) {
    *own = NULL;
    if (type != BN_F16) return src;
    uint16_t *h = xmalloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) h[i] = bn_fp32_to_fp16(src[i]);
    return *own = h;
}

int bn_adapter_save(const bn_adapter *a, const char *path, int type, char *err, size_t errlen) {
    if (type != BN_F32 && type != BN_F16) return bn_err(err, errlen, "adapter tensors are written as F32 or F16");
    void **own = xcalloc(2 * (size_t)a->n_tensors + 1, sizeof *own);
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.type", "adapter");
    gguf_set_str(w, "general.architecture", a->arch[0] ? a->arch : "qwen35");
    gguf_set_str(w, "adapter.type", "lora");
    gguf_set_f32(w, "adapter.lora.alpha", a->alpha);
    char name[128];
    int rc = 0;
    for (int i = 0; i < a->n_tensors && rc >= 0; i++) {
        const bn_adapter_tensor *t = &a->t[i];
        const int64_t ne_a[2] = {t->n_in, t->r}, ne_b[2] = {t->r, t->n_out};
        const void *da = as_type(t->A, t->n_in * t->r, type, &own[2 * i]);
        const void *db = as_type(t->B, t->n_out * t->r, type, &own[2 * i + 1]);
        snprintf(name, sizeof name, "%s.lora_a", t->name);
        rc = gguf_writer_add_tensor(w, name, 2, ne_a, type, (uint32_t)type, da, err, errlen);
        snprintf(name, sizeof name, "%s.lora_b", t->name);
        if (rc >= 0) rc = gguf_writer_add_tensor(w, name, 2, ne_b, type, (uint32_t)type, db, err, errlen);
    }
    if (rc >= 0) rc = gguf_writer_write(w, path, NULL, NULL, err, errlen);
    gguf_writer_free(w);
    for (int i = 0; i < 2 * a->n_tensors; i++) free(own[i]);
    free(own);
    return rc < 0 ? -1 : 0;
}

// ---- the model side -------------------------------------------------------------------------

float bn_adapter_tensor_scale(const bn_adapter *a, const bn_adapter_tensor *t, float user_scale) {
    return a->alpha != 0.0f ? user_scale * a->alpha / (float)t->r : user_scale;
}

// The layer projections an adapter may name, by GGUF stem.
static const struct {
    const char *stem;
    size_t off; // offsetof in bn_layer_weights
} STEMS[] = {
    {"attn_q", offsetof(bn_layer_weights, attn_q)},       {"attn_k", offsetof(bn_layer_weights, attn_k)},
    {"attn_v", offsetof(bn_layer_weights, attn_v)},       {"attn_output", offsetof(bn_layer_weights, attn_output)},
    {"ffn_gate", offsetof(bn_layer_weights, ffn_gate)},   {"ffn_up", offsetof(bn_layer_weights, ffn_up)},
    {"ffn_down", offsetof(bn_layer_weights, ffn_down)},   {"attn_qkv", offsetof(bn_layer_weights, attn_qkv)},
    {"attn_gate", offsetof(bn_layer_weights, attn_gate)}, {"ssm_beta", offsetof(bn_layer_weights, ssm_beta)},
    {"ssm_alpha", offsetof(bn_layer_weights, ssm_alpha)}, {"ssm_out", offsetof(bn_layer_weights, ssm_out)},
};

const bn_weight *bn_adapter_weight(const bn_model *m, const char *name) {
    if (strcmp(name, "output.weight") == 0) return m->cfg.tied_output || !m->w.output.data ? NULL : &m->w.output;
    int il, nch = 0;
    char stem[64];
    if (sscanf(name, "blk.%d.%63[^.].weight%n", &il, stem, &nch) != 2 || name[nch] != '\0') return NULL;
    if (il < 0 || il >= m->cfg.n_layer) return NULL;
    for (size_t k = 0; k < sizeof STEMS / sizeof STEMS[0]; k++)
        if (strcmp(stem, STEMS[k].stem) == 0) {
            const bn_weight *w = (const bn_weight *)((const char *)&m->w.layers[il] + STEMS[k].off);
            return w->data ? w : NULL;
        }
    return NULL;
}

int bn_adapter_check(const bn_adapter *a, const bn_model *m, char *err, size_t errlen) {
    const char *file = a->path ? a->path : "adapter";
    const char *arch = bn_model_arch_name(m);
    if (strcmp(a->arch, arch) != 0)
        return bn_err(err, errlen, "%s: adapter for architecture '%s', the model is '%s'", file, a->arch, arch);
    for (int i = 0; i < a->n_tensors; i++) {
        const bn_adapter_tensor *t = &a->t[i];
        const bn_weight *w = bn_adapter_weight(m, t->name);
        if (!w && strcmp(t->name, "output.weight") == 0 && m->cfg.tied_output)
            return bn_err(err, errlen, "%s: %s: the model has no output.weight (its head is tied to token_embd)",
                          file, t->name);
        if (!w) return bn_err(err, errlen, "%s: %s: the model has no such weight the engine can adapt", file, t->name);
        if (t->n_in != w->ne[0] || t->n_out != w->ne[1])
            return bn_err(err, errlen, "%s: %s: lora_a {%lld, %d} and lora_b {%d, %lld} do not fit the weight "
                          "{%lld, %lld} (expected lora_a {%lld, r}, lora_b {r, %lld})", file, t->name,
                          (long long)t->n_in, t->r, t->r, (long long)t->n_out, (long long)w->ne[0],
                          (long long)w->ne[1], (long long)w->ne[0], (long long)w->ne[1]);
        for (int j = 0; j < i; j++)
            if (strcmp(a->t[j].name, t->name) == 0) return bn_err(err, errlen, "%s: %s adapted twice", file, t->name);
    }
    return 0;
}
