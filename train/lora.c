// train/lora.c — LoRA adapter storage, targets, PEFT init, adapter GGUF I/O, merge. See lora.h.
#include "train/lora.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <cblas.h>
#include "base/util.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "core/adapter.h"

// ---- targets --------------------------------------------------------------------------------

typedef struct { const char *name; unsigned mask; } target_alias;

static const target_alias ALIASES[] = {
    {"q", BN_LORA_Q}, {"q_proj", BN_LORA_Q}, {"attn_q", BN_LORA_Q},
    {"k", BN_LORA_K}, {"k_proj", BN_LORA_K}, {"attn_k", BN_LORA_K},
    {"v", BN_LORA_V}, {"v_proj", BN_LORA_V}, {"attn_v", BN_LORA_V},
    {"o", BN_LORA_O}, {"o_proj", BN_LORA_O}, {"attn_output", BN_LORA_O},
    {"gate", BN_LORA_GATE}, {"gate_proj", BN_LORA_GATE}, {"ffn_gate", BN_LORA_GATE},
    {"up", BN_LORA_UP}, {"up_proj", BN_LORA_UP}, {"ffn_up", BN_LORA_UP},
    {"down", BN_LORA_DOWN}, {"down_proj", BN_LORA_DOWN}, {"ffn_down", BN_LORA_DOWN},
    {"qkv", BN_LORA_QKV}, {"in_proj_qkv", BN_LORA_QKV}, {"attn_qkv", BN_LORA_QKV},
    {"z", BN_LORA_Z}, {"in_proj_z", BN_LORA_Z}, {"attn_gate", BN_LORA_Z},
    {"beta", BN_LORA_BETA}, {"in_proj_b", BN_LORA_BETA}, {"ssm_beta", BN_LORA_BETA},
    {"alpha", BN_LORA_ALPHA}, {"in_proj_a", BN_LORA_ALPHA}, {"ssm_alpha", BN_LORA_ALPHA},
    {"out_proj", BN_LORA_SSM_OUT}, {"ssm_out", BN_LORA_SSM_OUT},
    {"lm_head", BN_LORA_HEAD}, {"output", BN_LORA_HEAD}, {"head", BN_LORA_HEAD},
    {"attn", BN_LORA_ATTN}, {"ffn", BN_LORA_FFN}, {"mlp", BN_LORA_FFN}, {"gdn", BN_LORA_GDN},
    {"all", BN_LORA_ATTN | BN_LORA_FFN | BN_LORA_GDN | BN_LORA_HEAD},
};

int bn_lora_parse_targets(const char *list, char *err, size_t errlen) {
    unsigned mask = 0;
    char *copy = xstrdup(list ? list : "");
    char *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        bool found = false;
        for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
            if (strcasecmp(tok, ALIASES[i].name) == 0) { mask |= ALIASES[i].mask; found = true; break; }
        if (!found) {
            bn_err(err, errlen, "unknown LoRA target '%s' (use q,k,v,o,gate,up,down,lm_head, qkv,z,beta,alpha,ssm_out, "
                   "or groups attn, ffn, gdn, all)", tok);
            free(copy);
            return -1;
        }
    }
    free(copy);
    if (!mask) return bn_err(err, errlen, "empty LoRA target list");
    return (int)mask;
}

static const char *TARGET_STEMS[BN_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
    "attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha", "ssm_out", "output",
};

const char *bn_lora_target_gguf(int target) {
    for (int i = 0; i < BN_LORA_N_TARGETS; i++)
        if (target == (1 << i)) return TARGET_STEMS[i];
    return NULL;
}

// target_of_stem: bit for a GGUF stem ("attn_q"), 0 if none.
static int target_of_stem(const char *stem) {
    for (int i = 0; i < BN_LORA_N_TARGETS; i++)
        if (strcmp(stem, TARGET_STEMS[i]) == 0) return 1 << i;
    return 0;
}

// ---- storage --------------------------------------------------------------------------------

bn_lora *bn_lora_new(int r, float alpha, float dropout, const char *arch) {
    bn_lora *l = xcalloc(1, sizeof *l);
    l->r = r;
    l->alpha = alpha;
    l->dropout = dropout;
    snprintf(l->arch, sizeof l->arch, "%s", arch ? arch : "");
    return l;
}

void bn_lora_free(bn_lora *l) {
    if (!l) return;
    free(l->t);
    free(l->params);
    free(l->grads);
    free(l);
}

int bn_lora_add(bn_lora *l, const char *name, int layer, int target, int64_t n_in, int64_t n_out,
                char *err, size_t errlen) {
    if (n_in <= 0 || n_out <= 0 || l->r <= 0) return bn_err(err, errlen, "LoRA %s: bad shape {%lld, %lld} or rank %d",
                                                       name, (long long)n_in, (long long)n_out, l->r);
    if (strlen(name) >= sizeof l->t[0].name) return bn_err(err, errlen, "LoRA tensor name too long: %s", name);
    if (bn_lora_find(l, name) >= 0) return bn_err(err, errlen, "duplicate LoRA tensor %s", name);
    if (l->n_tensors == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    bn_lora_tensor *t = &l->t[l->n_tensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->layer = layer;
    t->target = target;
    t->n_in = n_in;
    t->n_out = n_out;
    t->off_a = l->n_params;
    t->off_b = t->off_a + n_in * l->r;
    int64_t n_new = l->n_params + (n_in + n_out) * l->r;
    if (n_new > l->param_cap) { // geometric growth: building a 27B adapter copies O(total) bytes, not O(n²)
        l->param_cap = n_new > 2 * l->param_cap ? n_new : 2 * l->param_cap;
        l->params = xrealloc(l->params, (size_t)l->param_cap * sizeof(float));
        l->grads = xrealloc(l->grads, (size_t)l->param_cap * sizeof(float));
    }
    memset(l->params + l->n_params, 0, (size_t)(n_new - l->n_params) * sizeof(float));
    memset(l->grads + l->n_params, 0, (size_t)(n_new - l->n_params) * sizeof(float));
    l->n_params = n_new;
    return l->n_tensors++;
}

const bn_weight *bn_lora_layer_weight(const bn_layer_weights *lw, int target) {
    switch (target) {
    case BN_LORA_Q: return &lw->attn_q;
    case BN_LORA_K: return &lw->attn_k;
    case BN_LORA_V: return &lw->attn_v;
    case BN_LORA_O: return &lw->attn_output;
    case BN_LORA_GATE: return &lw->ffn_gate;
    case BN_LORA_UP: return &lw->ffn_up;
    case BN_LORA_DOWN: return &lw->ffn_down;
    case BN_LORA_QKV: return &lw->attn_qkv;
    case BN_LORA_Z: return &lw->attn_gate;
    case BN_LORA_BETA: return &lw->ssm_beta;
    case BN_LORA_ALPHA: return &lw->ssm_alpha;
    case BN_LORA_SSM_OUT: return &lw->ssm_out;
    default: return NULL;
    }
}

bn_lora *bn_lora_from_model(const bn_model *m, unsigned mask, int r, float alpha, float dropout,
                            char *err, size_t errlen) {
    const char *arch = bn_model_arch_name(m);
    bn_lora *l = bn_lora_new(r, alpha, dropout, arch);
    char name[96];
    for (int il = 0; il < m->cfg.n_layer; il++)
        for (int b = 0; b < BN_LORA_N_TARGETS; b++) {
            int target = 1 << b;
            if (!(mask & target) || target == BN_LORA_HEAD) continue;
            const bn_weight *w = bn_lora_layer_weight(&m->w.layers[il], target);
            if (!w || !w->data) continue;
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, TARGET_STEMS[b]);
            if (bn_lora_add(l, name, il, target, w->ne[0], w->ne[1], err, errlen) < 0) { bn_lora_free(l); return NULL; }
        }
    // a tied head (no output.weight: the LM head is token_embd) is not adaptable: llama.cpp looks
    // adapters up by the base tensor name and has no output.weight to attach one to
    if ((mask & BN_LORA_HEAD) && m->w.output.data && !m->cfg.tied_output) {
        if (bn_lora_add(l, "output.weight", -1, BN_LORA_HEAD, m->w.output.ne[0], m->w.output.ne[1], err, errlen) < 0) {
            bn_lora_free(l);
            return NULL;
        }
    }
    if (l->n_tensors == 0) {
        bn_err(err, errlen, "no model weight matches the LoRA targets");
        bn_lora_free(l);
        return NULL;
    }
    return l;
}

void bn_lora_init_peft(bn_lora *l, uint64_t seed) {
    bn_rng rng;
    bn_rng_seed(&rng, seed);
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        double bound = 1.0 / sqrt((double)t->n_in);
        float *A = l->params + t->off_a;
        for (int64_t e = 0; e < t->n_in * l->r; e++) A[e] = (float)((2.0 * bn_rng_uniform(&rng) - 1.0) * bound);
        memset(l->params + t->off_b, 0, (size_t)(t->n_out * l->r) * sizeof(float));
    }
}

float bn_lora_scale(const bn_lora *l) { return l->alpha != 0.0f ? l->alpha / (float)l->r : 1.0f; }

int bn_lora_find(const bn_lora *l, const char *name) {
    for (int i = 0; i < l->n_tensors; i++)
        if (strcmp(l->t[i].name, name) == 0) return i;
    return -1;
}

int bn_lora_get(const bn_lora *l, int layer, int target) {
    for (int i = 0; i < l->n_tensors; i++)
        if (l->t[i].layer == layer && l->t[i].target == target) return i;
    return -1;
}

bn_lora_view bn_lora_view_of(const bn_lora *l, int idx) {
    const bn_lora_tensor *t = &l->t[idx];
    bn_lora_view v = {
        .r = l->r, .scale = bn_lora_scale(l),
        .A = l->params + t->off_a, .B = l->params + t->off_b,
        .dA = l->grads + t->off_a, .dB = l->grads + t->off_b,
    };
    return v;
}

void bn_lora_zero_grad(bn_lora *l) { memset(l->grads, 0, (size_t)l->n_params * sizeof(float)); }

void bn_lora_dropout_mask(bn_rng *rng, float p, int64_t n, float *out) {
    float keep = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; i++) out[i] = (p > 0.0f && bn_rng_uniform(rng) < p) ? 0.0f : (p > 0.0f ? keep : 1.0f);
}

bool bn_lora_same_layout(const bn_lora *a, const bn_lora *b) {
    if (a->r != b->r || a->n_tensors != b->n_tensors || a->n_params != b->n_params) return false;
    for (int i = 0; i < a->n_tensors; i++)
        if (strcmp(a->t[i].name, b->t[i].name) || a->t[i].n_in != b->t[i].n_in || a->t[i].n_out != b->t[i].n_out)
            return false;
    return true;
}

// ---- adapter GGUF (the codec of core/adapter.h) ------------------------------------------------

int bn_lora_save_gguf(const bn_lora *l, const char *path, char *err, size_t errlen) {
    bn_adapter a = {.alpha = l->alpha, .n_tensors = l->n_tensors};
    snprintf(a.arch, sizeof a.arch, "%s", l->arch);
    a.t = xcalloc((size_t)l->n_tensors + 1, sizeof *a.t);
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *t = &l->t[i];
        bn_adapter_tensor *at = &a.t[i];
        snprintf(at->name, sizeof at->name, "%s", t->name);
        at->n_in = t->n_in, at->n_out = t->n_out, at->r = l->r;
        at->A = l->params + t->off_a, at->B = l->params + t->off_b;
    }
    const int rc = bn_adapter_save(&a, path, BN_F32, err, errlen);
    free(a.t);
    return rc;
}

// parse_base_name: layer and target of "blk.N.<stem>.weight" / "output.weight"; false if unknown.
static bool parse_base_name(const char *base, int *layer, int *target) {
    if (strcmp(base, "output.weight") == 0) { *layer = -1; *target = BN_LORA_HEAD; return true; }
    int il, nch = 0;
    char stem[64];
    if (sscanf(base, "blk.%d.%63[^.].weight%n", &il, stem, &nch) != 2 || base[nch] != '\0') return false;
    *layer = il;
    *target = target_of_stem(stem);
    return *target != 0;
}

bn_lora *bn_lora_load_gguf(const char *path, char *err, size_t errlen) {
    bn_adapter *a = bn_adapter_load(path, err, errlen);
    if (!a) return NULL;
    bn_lora *l = NULL;
    const int rank = a->t[0].r;
    for (int i = 1; i < a->n_tensors; i++)
        if (a->t[i].r != rank) {
            bn_err(err, errlen, "%s: mixed LoRA ranks (%d and %d) are not supported", path, rank, a->t[i].r);
            goto fail;
        }
    l = bn_lora_new(rank, a->alpha, 0.0f, a->arch);
    for (int i = 0; i < a->n_tensors; i++) {
        const bn_adapter_tensor *at = &a->t[i];
        int layer, target;
        if (!parse_base_name(at->name, &layer, &target)) {
            bn_err(err, errlen, "%s: unsupported adapted tensor %s", path, at->name);
            goto fail;
        }
        const int idx = bn_lora_add(l, at->name, layer, target, at->n_in, at->n_out, err, errlen);
        if (idx < 0) goto fail;
        memcpy(l->params + l->t[idx].off_a, at->A, sizeof(float) * (size_t)(at->n_in * rank));
        memcpy(l->params + l->t[idx].off_b, at->B, sizeof(float) * (size_t)(at->n_out * rank));
    }
    bn_adapter_free(a);
    return l;
fail:
    bn_lora_free(l);
    bn_adapter_free(a);
    return NULL;
}

// ---- merge ----------------------------------------------------------------------------------

void bn_lora_merge_f32(float *W, int64_t n_in, int64_t n_out, const float *A, const float *B, int r, float scale) {
    // W (n_out × n_in) += scale · B (n_out × r) · A (r × n_in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n_out, (int)n_in, r, scale, B, r, A, (int)n_in,
                1.0f, W, (int)n_in);
}

int bn_lora_merged_f32(const bn_lora *l, int idx, float user_scale, int w_type, const void *w_data, float *out) {
    const bn_lora_tensor *t = &l->t[idx];
    if (bn_dequantize(w_type, w_data, out, t->n_in * t->n_out) != 0) return -1;
    bn_lora_merge_f32(out, t->n_in, t->n_out, l->params + t->off_a, l->params + t->off_b, l->r,
                      user_scale * bn_lora_scale(l));
    return 0;
}
