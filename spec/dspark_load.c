// spec/dspark_load.c — loading a DSpark drafter (docs/dspark.md §2–3): both file conventions (the legacy dspark keys
// and names, dflash's) into one bn_drafter, every shape checked against the file and the target, the log-SNR
// embedding rows computed once.
#include "spec/dspark.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "base/util.h"
#include "quant/quant.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>

// flag: a BOOL, integer or "true"/"false" string KV; def if absent.
static bool get_flag(const gguf_file *g, const char *key, bool def) {
    bool b;
    int64_t i;
    if (gguf_get_bool(g, key, &b)) return b;
    if (gguf_get_int(g, key, &i)) return i != 0;
    const char *s = gguf_get_str(g, key);
    if (s) return strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0;
    return def;
}

// A drafter file being loaded: its GGUF, its convention (legacy dspark or dflash names and keys), the target it is for
// (NULL: none), where errors go.
typedef struct {
    const gguf_file *g;
    const char *path;
    char *err;
    size_t errlen;
    int failed;
    const char *arch;       // general.architecture: "dspark" or "dflash"
    bool dflash;
    const bn_model *target;
    char key[160];          // the last key built by arch_key / conv_key
} loader;

// take: binds tensor name with shape {ne0, ne1} (ne1 = 1 for vectors); returns 0 if found and
// right, 1 if absent and optional, -1 (err filled) otherwise.
static int take(loader *L, bn_weight *w, const char *name, int64_t ne0, int64_t ne1, bool required, bool need_f32) {
    memset(w, 0, sizeof *w);
    if (L->failed) return -1;
    const gguf_tensor *t = gguf_find_tensor(L->g, name);
    if (!t) {
        if (!required) return 1;
        L->failed = 1;
        return bn_err(L->err, L->errlen, "drafter %s: missing tensor '%s'", L->path, name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        L->failed = 1;
        return bn_err(L->err, L->errlen, "drafter %s: tensor '%s' has shape {%lld, %lld}, expected {%lld, %lld}",
                      L->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)ne0, (long long)ne1);
    }
    if (!bn_type_traits_of(t->type) || (need_f32 && t->type != BN_F32)) {
        L->failed = 1;
        return bn_err(L->err, L->errlen, "drafter %s: tensor '%s' has unsupported type %s%s", L->path, name,
                      bn_type_name(t->type), need_f32 ? " (F32 expected)" : "");
    }
    w->data = t->data;
    w->type = t->type;
    w->ne[0] = t->ne[0];
    w->ne[1] = t->ne[1];
    w->ne[2] = w->ne[3] = 1;
    w->name = t->name;
    return 0;
}

// matvec1: y = W x for one vector without a pool (load-time helper).
static void matvec1(const bn_weight *w, const float *x, float *y) {
    size_t ws = bn_matmul_work_size(w, 1);
    void *work = ws ? bn_aligned_alloc(ws) : NULL;
    bn_matmul(w, x, y, 1, work, NULL);
    free(work);
}

// snr_embedding: emb = fc2 · SiLU(fc1 · feat + b1) + b2 for one log-SNR value (docs/dspark.md §4.4
// step 2). feat = [sin(t·f_0..f_{h−1}), cos(t·f_0..f_{h−1})], t = (log_snr − min)/(max − min)·1000,
// f_k = exp(−ln(10000)·k/h), h = snr_feat/2. ORDER DECISION: sin half first, as docs/dspark.md §4.4
// states (the fork's order is unverified; a cos-first file would need swapping the two halves).
static void snr_embedding(const bn_drafter *d, float log_snr, float *emb) {
    const bn_drafter_config *c = &d->cfg;
    const int half = c->snr_feat / 2, E = c->n_embd;
    const double t = (double)(log_snr - c->min_log_snr) / (double)(c->max_log_snr - c->min_log_snr) * 1000.0;
    float *feat = xmalloc(sizeof(float) * (size_t)c->snr_feat);
    float *a = xmalloc(sizeof(float) * (size_t)E);
    for (int k = 0; k < half; k++) {
        double freq = exp(-log(10000.0) * k / half);
        feat[k] = (float)sin(t * freq);
        feat[half + k] = (float)cos(t * freq);
    }
    matvec1(&d->snr_fc1_w, feat, a);
    const float *b1 = d->snr_fc1_b.data, *b2 = d->snr_fc2_b.data;
    for (int i = 0; i < E; i++) a[i] = bn_silu(a[i] + b1[i]);
    matvec1(&d->snr_fc2_w, a, emb);
    for (int i = 0; i < E; i++) emb[i] += b2[i];
    free(feat);
    free(a);
}

// arch_key: "<arch>.<sfx>" (in L->key).
static const char *arch_key(loader *L, const char *sfx) {
    snprintf(L->key, sizeof L->key, "%s.%s", L->arch, sfx);
    return L->key;
}

// conv_key: the convention's own key sfx: "dflash.<sfx>" or "dspark.dspark.<sfx>" (in L->key).
static const char *conv_key(loader *L, const char *sfx) {
    snprintf(L->key, sizeof L->key, L->dflash ? "dflash.%s" : "dspark.dspark.%s", sfx);
    return L->key;
}

// need_u32: the u32 KV key into *dst; 0, or -1 (err) when it is missing.
static int need_u32(loader *L, const char *key, int *dst) {
    uint32_t v;
    if (!gguf_get_u32(L->g, key, &v)) return bn_err(L->err, L->errlen, "drafter %s: missing key '%s'", L->path, key);
    *dst = (int)v;
    return 0;
}

// name_of: the tensor name of the file's convention.
static const char *name_of(const loader *L, const char *legacy, const char *dflash) {
    return L->dflash ? dflash : legacy;
}

// load_shape: the attention shape, block size and mask token from the KVs; 0 or -1 (err).
static int load_shape(loader *L, bn_drafter_config *c) {
    const gguf_file *g = L->g;
    const char *path = L->path;
    char *err = L->err;
    size_t errlen = L->errlen;
    if (need_u32(L, arch_key(L, "block_count"), &c->n_layer) ||
        need_u32(L, arch_key(L, "embedding_length"), &c->n_embd) ||
        need_u32(L, arch_key(L, "feed_forward_length"), &c->n_ff) ||
        need_u32(L, arch_key(L, "attention.head_count"), &c->n_head) ||
        need_u32(L, arch_key(L, "attention.head_count_kv"), &c->n_head_kv))
        return -1;
    uint32_t u;
    c->head_dim = gguf_get_u32(g, arch_key(L, "attention.key_length"), &u) ? (int)u
                                                                           : c->n_embd / (c->n_head ? c->n_head : 1);
    c->n_rot = gguf_get_u32(g, arch_key(L, "rope.dimension_count"), &u) ? (int)u : c->head_dim;
    if (!gguf_get_f32(g, arch_key(L, "attention.layer_norm_rms_epsilon"), &c->norm_eps)) c->norm_eps = 1e-6f;
    if (!gguf_get_f32(g, arch_key(L, "rope.freq_base"), &c->rope_base))
        return bn_err(err, errlen, "drafter %s: missing key '%s'", path, arch_key(L, "rope.freq_base"));
    if (c->n_layer <= 0 || c->n_embd <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 || c->n_head % c->n_head_kv ||
        c->head_dim <= 0 || c->n_rot <= 0 || c->n_rot > c->head_dim || c->n_rot % 2)
        return bn_err(err, errlen, "drafter %s: inconsistent attention shape (layers %d, heads %d/%d, head dim %d, "
                      "rot %d)", path, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, c->n_rot);
    if (c->n_layer > (int)g->n_tensors) // every layer has tensors (checked before anything is sized by it)
        return bn_err(err, errlen, "drafter %s: block_count %d exceeds the file's %zu tensors", path, c->n_layer,
                      g->n_tensors);
    c->block_size = gguf_get_u32(g, conv_key(L, "block_size"), &u) ? (int)u : (L->dflash ? 16 : 4);
    if (c->block_size < 1 || c->block_size > BN_DRAFTER_MAX_BLOCK) // rows of V logits are allocated per block row
        return bn_err(err, errlen, "drafter %s: block_size %d not in 1..%d", path, c->block_size, BN_DRAFTER_MAX_BLOCK);
    return need_u32(L, L->dflash ? "tokenizer.ggml.mask_token_id" : "dspark.dspark.mask_token_id", &c->mask_token_id);
}

// load_taps: the target layers tapped (increasing, inside the target); 0 or -1 (err).
static int load_taps(loader *L, bn_drafter_config *c) {
    const gguf_kv *tl = gguf_get_arr(L->g, conv_key(L, "target_layers"));
    if (!tl || tl->n < 1 || tl->n > BN_DRAFTER_MAX_TAPS ||
        (tl->arr_type != GGUF_TYPE_INT32 && tl->arr_type != GGUF_TYPE_UINT32))
        return bn_err(L->err, L->errlen, "drafter %s: '%s' missing or not an int32 array of 1..%d ids", L->path,
                      conv_key(L, "target_layers"), BN_DRAFTER_MAX_TAPS);
    c->n_taps = (int)tl->n;
    const bn_model *target = L->target;
    for (int i = 0; i < c->n_taps; i++) {
        int32_t id = ((const int32_t *)tl->data)[i];
        // dflash taps the INPUT of layer id = output of id − 1 (docs/dspark.md §3.3 step 4)
        c->tap_layers[i] = L->dflash ? id - 1 : id;
        if (c->tap_layers[i] < 0 || (target && c->tap_layers[i] >= target->cfg.n_layer))
            return bn_err(L->err, L->errlen, "drafter %s: target layer %d out of range for a %d-layer target%s",
                          L->path, id, target ? target->cfg.n_layer : -1,
                          L->dflash ? " (dflash ids tap a layer's input: must be >= 1)" : "");
        if (i > 0 && c->tap_layers[i] <= c->tap_layers[i - 1])
            return bn_err(L->err, L->errlen, "drafter %s: target_layers must be increasing", L->path);
    }
    return 0;
}

// load_vocab: the embedding width and vocabulary (from the Markov head, always present in a DSpark drafter) checked
// against the target, the Markov rank and the mask token; 0 or -1 (err).
static int load_vocab(loader *L, bn_drafter_config *c) {
    const char *path = L->path;
    char *err = L->err;
    size_t errlen = L->errlen;
    const bn_model *target = L->target;
    if (target && target->cfg.n_embd != c->n_embd)
        return bn_err(err, errlen, "drafter %s: embedding_length %d != target n_embd %d", path, c->n_embd,
                      target->cfg.n_embd);
    const char *mb_name = name_of(L, "dspark.markov_head_b.weight", "markov_w2.weight");
    const gguf_tensor *mb = gguf_find_tensor(L->g, mb_name);
    if (!mb)
        return bn_err(err, errlen, "drafter %s: no Markov head tensor '%s' (a DFlash drafter without it is not DSpark)",
                      path, mb_name);
    c->markov_rank = (int)mb->ne[0];
    c->n_vocab = (int)mb->ne[1];
    if (target && target->cfg.n_vocab != c->n_vocab)
        return bn_err(err, errlen, "drafter %s: vocabulary %d != target vocabulary %d", path, c->n_vocab,
                      target->cfg.n_vocab);
    if (c->mask_token_id < 0 || c->mask_token_id >= c->n_vocab)
        return bn_err(err, errlen, "drafter %s: mask_token_id %d outside the vocabulary (%d)", path, c->mask_token_id,
                      c->n_vocab);
    uint32_t u;
    if (!L->dflash && gguf_get_u32(L->g, "dspark.dspark.markov_rank", &u) && (int)u != c->markov_rank)
        return bn_err(err, errlen, "drafter %s: markov_rank %u != markov_head_b rows %d", path, u, c->markov_rank);
    return 0;
}

// load_heads: the encoder's fc and norm, the Markov head (and its scale), the output norm and the confidence head;
// 0 or -1 (err).
static int load_heads(loader *L, bn_drafter *d) {
    bn_drafter_config *c = &d->cfg;
    const int64_t E = c->n_embd, V = c->n_vocab, R = c->markov_rank;
    take(L, &d->output_norm, "output_norm.weight", E, 1, true, true);
    take(L, &d->fc, name_of(L, "dspark.fc.weight", "fc.weight"), (int64_t)c->n_taps * E, E, true, false);
    take(L, &d->hidden_norm, name_of(L, "dspark.hidden_norm.weight", "enc.output_norm.weight"), E, 1, true, true);
    take(L, &d->markov_a, name_of(L, "dspark.markov_head_a.weight", "markov_w1.weight"), R, V, true, false);
    take(L, &d->markov_b, name_of(L, "dspark.markov_head_b.weight", "markov_w2.weight"), R, V, true, false);
    d->markov_b_scale = 1.0f;
    const gguf_tensor *mscale = gguf_find_tensor(L->g, "markov_w2.scale");
    if (mscale) {
        if (mscale->type != BN_F32 || gguf_tensor_nelements(mscale) != 1)
            return bn_err(L->err, L->errlen, "drafter %s: markov_w2.scale must be one F32", L->path);
        d->markov_b_scale = *(const float *)mscale->data;
    }
    if (gguf_find_tensor(L->g, "fc.scale"))
        return bn_err(L->err, L->errlen, "drafter %s: fc.scale is not supported", L->path);
    // confidence head: {E + R, 1} (with Markov input) or {E, 1}
    const char *cw = name_of(L, "dspark.confidence_head.weight", "conf_proj.weight");
    const gguf_tensor *ct = gguf_find_tensor(L->g, cw);
    c->has_conf = ct != NULL;
    if (c->has_conf) {
        c->conf_in = (int)ct->ne[0];
        if (c->conf_in != E && c->conf_in != E + R)
            return bn_err(L->err, L->errlen, "drafter %s: '%s' input %d is neither E (%d) nor E + rank (%d)", L->path,
                          cw, c->conf_in, (int)E, (int)(E + R));
        take(L, &d->conf_w, cw, c->conf_in, 1, true, false);
        take(L, &d->conf_b, name_of(L, "dspark.confidence_head.bias", "conf_proj.bias"), 1, 1, true, true);
    }
    return 0;
}

// load_snr: the log-SNR conditioning (flag if written, else presence of the tensors) and its MLP; 0 or -1 (err).
static int load_snr(loader *L, bn_drafter *d) {
    bn_drafter_config *c = &d->cfg;
    const int64_t E = c->n_embd;
    const char *fc1 = name_of(L, "dspark.log_snr_fc1.weight", "log_snr_fc1.weight");
    const gguf_tensor *f1 = gguf_find_tensor(L->g, fc1);
    c->log_snr = get_flag(L->g, conv_key(L, "log_snr_conditioning"), f1 != NULL);
    if (!c->log_snr) return 0;
    if (!f1) return bn_err(L->err, L->errlen, "drafter %s: log_snr_conditioning set but '%s' missing", L->path, fc1);
    c->snr_feat = (int)f1->ne[0];
    if (c->snr_feat < 2 || c->snr_feat % 2)
        return bn_err(L->err, L->errlen, "drafter %s: log-SNR feature width %d is not even", L->path, c->snr_feat);
    if (!gguf_get_f32(L->g, conv_key(L, "min_log_snr"), &c->min_log_snr)) c->min_log_snr = -9.0f;
    if (!gguf_get_f32(L->g, conv_key(L, "max_log_snr"), &c->max_log_snr)) c->max_log_snr = 9.0f;
    if (!(c->max_log_snr > c->min_log_snr))
        return bn_err(L->err, L->errlen, "drafter %s: max_log_snr <= min_log_snr", L->path);
    take(L, &d->snr_fc1_w, fc1, c->snr_feat, E, true, false);
    take(L, &d->snr_fc1_b, name_of(L, "dspark.log_snr_fc1.bias", "log_snr_fc1.bias"), E, 1, true, true);
    take(L, &d->snr_fc2_w, name_of(L, "dspark.log_snr_fc2.weight", "log_snr_fc2.weight"), E, E, true, false);
    take(L, &d->snr_fc2_b, name_of(L, "dspark.log_snr_fc2.bias", "log_snr_fc2.bias"), E, 1, true, true);
    return 0;
}

// load_layers: the embeddings and LM head (the drafter's, else borrowed from the target: docs/dspark.md §3.3 step 5)
// and every layer's tensors; 0 or -1 (err).
static int load_layers(loader *L, bn_drafter *d) {
    const bn_drafter_config *c = &d->cfg;
    const int64_t E = c->n_embd, V = c->n_vocab, hd = c->head_dim, q_rows = (int64_t)c->n_head * hd,
                  kv_rows = (int64_t)c->n_head_kv * hd;
    bn_weight own_embd, own_out;
    int has_embd = take(L, &own_embd, "token_embd.weight", E, V, false, false) == 0;
    int has_out = take(L, &own_out, "output.weight", E, V, false, false) == 0;
    if (L->failed) return -1;
    if (!has_embd && !L->target)
        return bn_err(L->err, L->errlen, "drafter %s: no token_embd.weight and no target to borrow it from", L->path);
    d->token_embd = has_embd ? own_embd : L->target->w.token_embd;
    d->output = has_out ? own_out : has_embd ? own_embd : L->target->w.output;
    d->layers = xcalloc((size_t)c->n_layer, sizeof *d->layers);
    for (int il = 0; il < c->n_layer && !L->failed; il++) {
        bn_drafter_layer *ly = &d->layers[il];
        char nm[96];
#define T(field, sfx, ne0, ne1, f32) (snprintf(nm, sizeof nm, "blk.%d.%s", il, sfx), \
        take(L, &ly->field, nm, ne0, ne1, true, f32))
        T(attn_norm, "attn_norm.weight", E, 1, true);
        T(attn_q, "attn_q.weight", E, q_rows, false);
        T(attn_k, "attn_k.weight", E, kv_rows, false);
        T(attn_v, "attn_v.weight", E, kv_rows, false);
        T(attn_output, "attn_output.weight", q_rows, E, false);
        T(attn_q_norm, "attn_q_norm.weight", hd, 1, true);
        T(attn_k_norm, "attn_k_norm.weight", hd, 1, true);
        T(ffn_norm, "ffn_norm.weight", E, 1, true);
        T(ffn_gate, "ffn_gate.weight", E, c->n_ff, false);
        T(ffn_up, "ffn_up.weight", E, c->n_ff, false);
        T(ffn_down, "ffn_down.weight", c->n_ff, E, false);
#undef T
    }
    return L->failed ? -1 : 0;
}

bn_drafter *bn_drafter_load(const char *path, const bn_model *target, char *err, size_t errlen) {
    gguf_file *g = gguf_open(path, err, errlen);
    if (!g) return NULL;
    gguf_align_tensors(g); // a file with general.alignment 1 or 2 may hold weights at odd addresses
    bn_drafter *d = xcalloc(1, sizeof *d);
    d->gguf = g;
    bn_drafter_config *c = &d->cfg;
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch || (strcmp(arch, "dspark") != 0 && strcmp(arch, "dflash") != 0)) {
        bn_err(err, errlen, "drafter %s: general.architecture '%s' is neither 'dspark' nor 'dflash'", path,
               arch ? arch : "(none)");
        bn_drafter_free(d);
        return NULL;
    }
    loader L = {.g = g, .path = path, .err = err, .errlen = errlen, .arch = arch, .dflash = strcmp(arch, "dflash") == 0,
                .target = target};
    c->convention = L.dflash ? BN_DRAFTER_DFLASH : BN_DRAFTER_LEGACY;
    if (load_shape(&L, c) || load_taps(&L, c) || load_vocab(&L, c) || load_heads(&L, d) || load_snr(&L, d) ||
        load_layers(&L, d)) {
        bn_drafter_free(d);
        return NULL;
    }
    if (c->has_conf) {
        d->conf_wf = xmalloc(sizeof(float) * (size_t)c->conf_in);
        bn_weight_row_f32(&d->conf_w, 0, d->conf_wf);
    }
    if (c->log_snr) {
        const int E = c->n_embd;
        d->snr_emb = xmalloc(sizeof(float) * 2 * (size_t)E);
        snr_embedding(d, c->max_log_snr, d->snr_emb);     // anchor row: log_snr = max → t = 1000
        snr_embedding(d, c->min_log_snr, d->snr_emb + E); // mask rows: log_snr = min → t = 0
    }
    return d;
}

void bn_drafter_free(bn_drafter *d) {
    if (!d) return;
    free(d->layers);
    free(d->conf_wf);
    free(d->snr_emb);
    gguf_close(d->gguf);
    free(d);
}
