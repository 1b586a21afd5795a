// core/model.c — bn_model_load: Config from GGUF KVs, weight views into the mmapped file, and a
// check of every expected tensor's presence, shape and type (docs/model.md §2–3, §7).
#include "core/model.h"
#include "quantize/rules.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static const char *arch_names[] = {[BN_ARCH_QWEN35] = "qwen35", [BN_ARCH_QWEN3] = "qwen3",
                                   [BN_ARCH_LLAMA] = "llama", [BN_ARCH_QWEN2] = "qwen2"};

const char *bn_model_arch_name(const bn_model *m) {
    return m->cfg.arch >= 0 && m->cfg.arch < (int)(sizeof arch_names / sizeof arch_names[0]) ? arch_names[m->cfg.arch]
                                                                                             : "";
}

// ---- KV helpers -----------------------------------------------------------------------------
// key_int: "<arch>.<suffix>" as an integer; def when absent and not required. Returns 0/-1.
static int key_int(const gguf_file *g, const char *arch, const char *suffix, bool required, int64_t def,
                   int64_t *out, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_get_int(g, key, out)) {
        if (*out < 0 || *out > INT32_MAX) return bn_err(err, errlen, "%s: value %lld out of range", key, (long long)*out);
        return 0;
    }
    if (gguf_find_key(g, key) >= 0) return bn_err(err, errlen, "%s: expected an integer", key);
    if (required) return bn_err(err, errlen, "%s: missing key", key);
    *out = def;
    return 0;
}

static float key_f32(const gguf_file *g, const char *arch, const char *suffix, float def) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    return gguf_get_f32(g, key, &v) ? v : def;
}

// ---- tensor checks --------------------------------------------------------------------------
typedef struct {
    const gguf_file *g;
    char *err;
    size_t errlen;
} loader;

static void fmt_shape(char *buf, size_t n, int n_dims, const int64_t *ne) {
    size_t off = (size_t)snprintf(buf, n, "{");
    for (int d = 0; d < n_dims && off < n; d++)
        off += (size_t)snprintf(buf + off, n - off, d ? ", %lld" : "%lld", (long long)ne[d]);
    if (off < n) snprintf(buf + off, n - off, "}");
}

// want: binds *w to tensor `name` after checking shape {ne0[, ne1]} (n_dims 1 or 2) and type
// (F32 only when f32_only, else any type with a dequantizer). Absent + !required leaves w->data
// NULL. Returns 0/-1.
static int want(loader *L, bn_weight *w, const char *name, int n_dims, int64_t ne0, int64_t ne1, bool required,
                bool f32_only) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(L->g, name);
    if (!t) return required ? bn_err(L->err, L->errlen, "%s: missing tensor", name) : 0;
    const int64_t want_ne[4] = {ne0, n_dims > 1 ? ne1 : 1, 1, 1};
    bool shape_ok = true;
    for (int d = 0; d < 4; d++) shape_ok = shape_ok && t->ne[d] == want_ne[d];
    if (!shape_ok) {
        char want_s[96], got_s[96];
        fmt_shape(want_s, sizeof want_s, n_dims, want_ne);
        fmt_shape(got_s, sizeof got_s, (int)(t->n_dims ? t->n_dims : 1), t->ne);
        return bn_err(L->err, L->errlen, "%s: expected %s, got %s", name, want_s, got_s);
    }
    const bn_type_traits *tr = bn_type_traits_of(t->type);
    if (f32_only && t->type != BN_F32)
        return bn_err(L->err, L->errlen, "%s: expected type f32, got %s", name, bn_type_name(t->type));
    if (!tr || t->type == BN_Q8_1 || t->type == BN_Q8_K || t->type == BN_I32)
        return bn_err(L->err, L->errlen, "%s: unsupported type %s (id %u)", name, bn_type_name(t->type), t->file_type);
    if (ne0 % tr->blck != 0)
        return bn_err(L->err, L->errlen, "%s: row length %lld is not a multiple of the %s block (%d)", name,
                      (long long)ne0, tr->name, tr->blck);
    w->data = t->data;
    w->type = t->type;
    for (int d = 0; d < 4; d++) w->ne[d] = t->ne[d];
    w->name = t->name;
    return 0;
}

// want_blk: want() for "blk.<il>.<suffix>".
static int want_blk(loader *L, bn_weight *w, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1,
                    bool required, bool f32_only) {
    char name[GGUF_MAX_NAME + 1];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return want(L, w, name, n_dims, ne0, ne1, required, f32_only);
}

// ---- config ---------------------------------------------------------------------------------
static int read_layer_pattern(const gguf_file *g, const char *arch, bn_config *c, int n_layer_all, char *err,
                              size_t errlen) {
    c->is_recurrent = xcalloc((size_t)c->n_layer, sizeof(bool));
    if (c->arch != BN_ARCH_QWEN35) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    const gguf_kv *arr = gguf_get_arr(g, key);
    int64_t scalar;
    if (arr) {
        const size_t esz = gguf_type_size(arr->arr_type);
        const bool int_like = arr->arr_type == GGUF_TYPE_BOOL || arr->arr_type == GGUF_TYPE_UINT8 ||
                              arr->arr_type == GGUF_TYPE_INT8 || arr->arr_type == GGUF_TYPE_UINT32 ||
                              arr->arr_type == GGUF_TYPE_INT32;
        if (!int_like || arr->n < (uint64_t)c->n_layer)
            return bn_err(err, errlen, "%s: expected %d bool/int entries, got %llu of %s", key, n_layer_all,
                          (unsigned long long)arr->n, gguf_type_name(arr->arr_type));
        for (int il = 0; il < c->n_layer; il++) {
            const uint8_t *p = (const uint8_t *)arr->data + (size_t)il * esz;
            uint32_t v = 0;
            memcpy(&v, p, esz);
            c->is_recurrent[il] = v != 0;
        }
        c->full_attn_interval = 0;
    } else if (gguf_get_int(g, key, &scalar)) {
        for (int il = 0; il < c->n_layer; il++) c->is_recurrent[il] = scalar != 0;
        c->full_attn_interval = 0;
    } else {
        int64_t interval;
        if (key_int(g, arch, "full_attention_interval", false, 4, &interval, err, errlen)) return -1;
        if (interval < 1) return bn_err(err, errlen, "%s.full_attention_interval: must be >= 1", arch);
        c->full_attn_interval = (int)interval;
        for (int il = 0; il < c->n_layer; il++) c->is_recurrent[il] = (il + 1) % interval != 0;
    }
    return 0;
}

static int read_config(const gguf_file *g, bn_config *c, char *err, size_t errlen) {
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch) return bn_err(err, errlen, "general.architecture: missing key");
    c->arch = -1;
    for (int a = 0; a < 4; a++)
        if (strcmp(arch, arch_names[a]) == 0) c->arch = a;
    if (c->arch < 0) return bn_err(err, errlen, "unsupported architecture '%s' (supported: qwen35, qwen3, llama, qwen2)", arch);

    int64_t v, n_layer_all, nextn = 0;
    if (key_int(g, arch, "block_count", true, 0, &n_layer_all, err, errlen)) return -1;
    if (key_int(g, arch, "nextn_predict_layers", false, 0, &nextn, err, errlen)) return -1;
    // every layer has tensors: a count beyond the file's tensors is a hostile value (before anything is sized by it)
    if (n_layer_all < 1 || n_layer_all > (int64_t)g->n_tensors)
        return bn_err(err, errlen, "%s.block_count %lld: not between 1 and the file's %zu tensors", arch,
                      (long long)n_layer_all, g->n_tensors);
    if (nextn >= n_layer_all) return bn_err(err, errlen, "%s.nextn_predict_layers: %lld >= block_count", arch, (long long)nextn);
    c->n_layer = (int)(n_layer_all - nextn);
    if (key_int(g, arch, "embedding_length", true, 0, &v, err, errlen)) return -1;
    c->n_embd = (int)v;
    if (key_int(g, arch, "feed_forward_length", true, 0, &v, err, errlen)) return -1;
    c->n_ff = (int)v;
    if (key_int(g, arch, "attention.head_count", true, 0, &v, err, errlen)) return -1;
    c->n_head = (int)v;
    if (key_int(g, arch, "attention.head_count_kv", false, c->n_head, &v, err, errlen)) return -1;
    c->n_head_kv = (int)v;
    if (c->n_head < 1 || c->n_head_kv < 1 || c->n_head % c->n_head_kv != 0)
        return bn_err(err, errlen, "%s: head_count %d is not a multiple of head_count_kv %d", arch, c->n_head, c->n_head_kv);
    if (key_int(g, arch, "attention.key_length", false, c->n_embd / c->n_head, &v, err, errlen)) return -1;
    c->head_dim = (int)v;
    if (key_int(g, arch, "attention.value_length", false, c->head_dim, &v, err, errlen)) return -1;
    if (v != c->head_dim)
        return bn_err(err, errlen, "%s.attention.value_length %lld != key_length %d (unsupported)", arch, (long long)v, c->head_dim);
    if (key_int(g, arch, "rope.dimension_count", false, c->head_dim, &v, err, errlen)) return -1;
    c->n_rot = (int)v;
    if (c->n_rot > c->head_dim || c->n_rot % 2 != 0)
        return bn_err(err, errlen, "%s.rope.dimension_count %d: must be even and <= head dim %d", arch, c->n_rot, c->head_dim);
    c->rope_base = key_f32(g, arch, "rope.freq_base", 10000.0f);
    c->norm_eps = key_f32(g, arch, "attention.layer_norm_rms_epsilon", c->arch == BN_ARCH_LLAMA ? 1e-5f : 1e-6f);
    if (key_int(g, arch, "context_length", false, 4096, &v, err, errlen)) return -1;
    c->n_ctx_train = (int)v;

    if (c->arch == BN_ARCH_QWEN35) {
        if (key_int(g, arch, "ssm.conv_kernel", true, 0, &v, err, errlen)) return -1;
        c->ssm_conv_kernel = (int)v;
        if (key_int(g, arch, "ssm.state_size", true, 0, &v, err, errlen)) return -1;
        c->ssm_d_state = (int)v;
        if (key_int(g, arch, "ssm.group_count", true, 0, &v, err, errlen)) return -1;
        c->ssm_n_group = (int)v;
        if (key_int(g, arch, "ssm.time_step_rank", true, 0, &v, err, errlen)) return -1;
        c->ssm_dt_rank = (int)v;
        if (key_int(g, arch, "ssm.inner_size", true, 0, &v, err, errlen)) return -1;
        c->ssm_d_inner = (int)v;
        if (c->ssm_conv_kernel < 1 || c->ssm_n_group < 1 || c->ssm_dt_rank % c->ssm_n_group != 0)
            return bn_err(err, errlen, "%s.ssm: conv_kernel %d, group_count %d, time_step_rank %d are inconsistent", arch,
                          c->ssm_conv_kernel, c->ssm_n_group, c->ssm_dt_rank);
        if (c->ssm_d_inner != (int64_t)c->ssm_dt_rank * c->ssm_d_state)
            return bn_err(err, errlen, "%s.ssm.inner_size %d != time_step_rank %d x state_size %d", arch, c->ssm_d_inner,
                          c->ssm_dt_rank, c->ssm_d_state);
    }
    return read_layer_pattern(g, arch, c, (int)n_layer_all, err, errlen);
}

// ---- weights --------------------------------------------------------------------------------
static int load_layer(loader *L, const bn_config *c, int il, bn_layer_weights *lw) {
    const int64_t H = c->n_embd, F = c->n_ff, hd = c->head_dim;
    const int64_t q_rows = (int64_t)c->n_head * hd, kv_rows = (int64_t)c->n_head_kv * hd;
    const bool qwen35 = c->arch == BN_ARCH_QWEN35;
    if (want_blk(L, &lw->attn_norm, il, "attn_norm.weight", 1, H, 0, true, true)) return -1;
    if (want_blk(L, &lw->post_attention_norm, il, qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight", 1, H, 0,
                 true, true))
        return -1;
    if (want_blk(L, &lw->ffn_gate, il, "ffn_gate.weight", 2, H, F, true, false)) return -1;
    if (want_blk(L, &lw->ffn_up, il, "ffn_up.weight", 2, H, F, true, false)) return -1;
    if (want_blk(L, &lw->ffn_down, il, "ffn_down.weight", 2, F, H, true, false)) return -1;

    if (qwen35 && c->is_recurrent[il]) {
        const int64_t dk = c->ssm_d_state, Hk = c->ssm_n_group, Hv = c->ssm_dt_rank;
        const int64_t conv_dim = 2 * Hk * dk + Hv * dk, value_dim = Hv * dk;
        if (want_blk(L, &lw->attn_qkv, il, "attn_qkv.weight", 2, H, conv_dim, true, false)) return -1;
        if (want_blk(L, &lw->attn_gate, il, "attn_gate.weight", 2, H, value_dim, true, false)) return -1;
        if (want_blk(L, &lw->ssm_beta, il, "ssm_beta.weight", 2, H, Hv, true, false)) return -1;
        if (want_blk(L, &lw->ssm_alpha, il, "ssm_alpha.weight", 2, H, Hv, true, false)) return -1;
        if (want_blk(L, &lw->ssm_conv1d, il, "ssm_conv1d.weight", 2, c->ssm_conv_kernel, conv_dim, true, true)) return -1;
        if (want_blk(L, &lw->ssm_dt, il, "ssm_dt.bias", 1, Hv, 0, true, true)) return -1;
        if (want_blk(L, &lw->ssm_a, il, "ssm_a", 1, Hv, 0, true, true)) return -1;
        if (want_blk(L, &lw->ssm_norm, il, "ssm_norm.weight", 1, dk, 0, true, true)) return -1;
        if (want_blk(L, &lw->ssm_out, il, "ssm_out.weight", 2, value_dim, H, true, false)) return -1;
        return 0;
    }
    // attention layer
    const bool has_qk_norm = qwen35 || c->arch == BN_ARCH_QWEN3;
    if (want_blk(L, &lw->attn_q, il, "attn_q.weight", 2, H, qwen35 ? 2 * q_rows : q_rows, true, false)) return -1;
    if (want_blk(L, &lw->attn_k, il, "attn_k.weight", 2, H, kv_rows, true, false)) return -1;
    if (want_blk(L, &lw->attn_v, il, "attn_v.weight", 2, H, kv_rows, true, false)) return -1;
    if (want_blk(L, &lw->attn_output, il, "attn_output.weight", 2, q_rows, H, true, false)) return -1;
    if (want_blk(L, &lw->attn_q_norm, il, "attn_q_norm.weight", 1, hd, 0, has_qk_norm, true)) return -1;
    if (want_blk(L, &lw->attn_k_norm, il, "attn_k_norm.weight", 1, hd, 0, has_qk_norm, true)) return -1;
    if (!qwen35) { // qwen2 biases (optional everywhere: used when present)
        if (want_blk(L, &lw->attn_q_bias, il, "attn_q.bias", 1, q_rows, 0, false, true)) return -1;
        if (want_blk(L, &lw->attn_k_bias, il, "attn_k.bias", 1, kv_rows, 0, false, true)) return -1;
        if (want_blk(L, &lw->attn_v_bias, il, "attn_v.bias", 1, kv_rows, 0, false, true)) return -1;
    }
    return 0;
}

static int load_weights(bn_model *m, char *err, size_t errlen) {
    loader L = {.g = m->gguf, .err = err, .errlen = errlen};
    bn_config *c = &m->cfg;
    const gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return bn_err(err, errlen, "token_embd.weight: missing tensor");
    if (emb->ne[1] < 1) return bn_err(err, errlen, "token_embd.weight: empty vocabulary");
    c->n_vocab = (int)emb->ne[1];
    if (want(&L, &m->w.token_embd, "token_embd.weight", 2, c->n_embd, c->n_vocab, true, false)) return -1;
    if (want(&L, &m->w.output_norm, "output_norm.weight", 1, c->n_embd, 0, true, true)) return -1;
    if (want(&L, &m->w.output, "output.weight", 2, c->n_embd, c->n_vocab, false, false)) return -1;
    c->tied_output = m->w.output.data == NULL;
    if (c->tied_output) m->w.output = m->w.token_embd;
    m->w.layers = xcalloc((size_t)c->n_layer, sizeof *m->w.layers);
    for (int il = 0; il < c->n_layer; il++)
        if (load_layer(&L, c, il, &m->w.layers[il])) return -1;
    return 0;
}

bn_model *bn_model_from_gguf(gguf_file *g, char *err, size_t errlen) {
    bn_model *m = xcalloc(1, sizeof *m);
    m->gguf = g;
    gguf_align_tensors(g); // a file with general.alignment 1 or 2 may hold weights at odd addresses
    m->path = xstrdup(g->path ? g->path : "");
    int64_t ftype;
    m->ftype = gguf_get_int(g, "general.file_type", &ftype) ? (int)ftype : -1;
    if (read_config(g, &m->cfg, err, errlen) || load_weights(m, err, errlen)) {
        bn_model_free(m);
        return NULL;
    }
    return m;
}

bn_model *bn_model_load(const char *path, char *err, size_t errlen) {
    gguf_file *g = gguf_open(path, err, errlen);
    if (!g) return NULL;
    return bn_model_from_gguf(g, err, errlen);
}

void bn_model_free(bn_model *m) {
    if (!m) return;
    gguf_close(m->gguf);
    free(m->cfg.is_recurrent);
    free(m->w.layers);
    free(m->path);
    free(m);
}

int64_t bn_model_n_params(const bn_model *m) {
    int64_t n = 0;
    for (size_t i = 0; i < m->gguf->n_tensors; i++) n += gguf_tensor_nelements(&m->gguf->tensors[i]);
    return n;
}

// ---- description ----------------------------------------------------------------------------
static const char *size_label(const bn_config *c) {
    if (c->arch == BN_ARCH_QWEN35) {
        switch (c->n_layer) {
        case 24: return c->n_embd == 1024 ? "0.8B" : "2B";
        case 32: return c->n_embd == 2560 ? "4B" : "9B";
        case 64: return "27B";
        }
    } else if (c->arch == BN_ARCH_QWEN3) {
        switch (c->n_layer) {
        case 28: return c->n_embd == 1024 ? "0.6B" : "1.7B";
        case 36: return c->n_embd == 2560 ? "4B" : "8B";
        case 40: return "14B";
        case 64: return "32B";
        }
    }
    return "?B";
}

// ftype_name: display name of a llama_ftype (quantize/rules.h), NULL if unknown.
static const char *ftype_name(int ftype) {
    const char *s = bn_ftype_name(ftype);
    return strcmp(s, "?") ? s : NULL;
}

// guess_ftype: llama_ftype of the most frequent 2-D tensor type (as llama.cpp guesses).
static int guess_ftype(const bn_model *m) {
    int count[BN_TYPE_MAX] = {0};
    for (size_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        if (t->n_dims >= 2 && t->type >= 0 && t->type < BN_TYPE_MAX) count[t->type]++;
    }
    int best = BN_F32;
    for (int ty = 0; ty < BN_TYPE_MAX; ty++)
        if (count[ty] > count[best]) best = ty;
    switch (best) {
    case BN_F32: return 0;
    case BN_F16: return 1;
    case BN_Q4_0: return 2;
    case BN_Q4_1: return 3;
    case BN_Q8_0: return 7;
    case BN_Q4_K: return 15;
    case BN_Q6_K: return 18;
    case BN_BF16: return 32;
    case BN_TQ1_0: return 36;
    case BN_TQ2_0: return 37;
    case BN_Q1_0: return 40;
    case BN_Q2_0: return 41;
    case BN_PQ2_0: return 41;
    case BN_PTQ1_0: return 143;
    default: return -1;
    }
}

const char *bn_model_describe(const bn_model *m, char *buf, size_t n) {
    const char *arch = arch_names[m->cfg.arch];
    const char *ft = ftype_name(m->ftype);
    if (ft) {
        snprintf(buf, n, "%s %s %s", arch, size_label(&m->cfg), ft);
    } else {
        const char *guessed = ftype_name(guess_ftype(m));
        snprintf(buf, n, "%s %s (guessed) %s", arch, size_label(&m->cfg), guessed ? guessed : "unknown");
    }
    return buf;
}

bn_dims bn_config_dims(const bn_config *c) {
    bn_dims d;
    const size_t dk = (size_t)c->ssm_d_state, Hk = (size_t)c->ssm_n_group, Hv = (size_t)c->ssm_dt_rank;
    d.kv_dim = (size_t)c->n_head_kv * c->head_dim;
    d.q_rows = (size_t)c->n_head * c->head_dim * (c->arch == BN_ARCH_QWEN35 ? 2 : 1);
    d.conv_dim = 2 * Hk * dk + Hv * dk;
    d.value_dim = Hv * dk;
    d.conv_floats = (c->ssm_conv_kernel > 0 ? (size_t)c->ssm_conv_kernel - 1 : 0) * d.conv_dim;
    d.ssm_floats = Hv * dk * dk;
    return d;
}
