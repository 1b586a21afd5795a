// spec/dspark.c — the DSpark drafter: loading both file conventions into one struct and the
// forward math (docs/dspark.md §2–4). The speculative loop is in spec/dspark_spec.c.
#include "spec/dspark.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "base/threads.h"
#include "base/util.h"
#include "quant/quant.h"
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>

#define BN_DSPARK_CHUNK 64 // context rows per encoder / K-V injection chunk

struct bn_dstate {
    int n_ctx;        // positions (context + block rows)
    int n_cache;      // context rows present
    int rows;         // scratch rows (max(chunk, B))
    int n_layer;
    bn_pool *pool;
    bool own_pool;    // false when borrowed (bn_dstate_new_pool)
    float **k_cache;  // [n_layer] -> {nkv*hd, n_ctx}: K after k_norm + RoPE
    float **v_cache;  // [n_layer] -> {nkv*hd, n_ctx}
    float *feat_g;    // {E, rows} encoder output g
    float *x, *xn, *mo; // {E, rows}
    float *q;         // {nh*hd, rows}
    float *k, *v;     // {nkv*hd, rows}
    float *att;       // {nh*hd, rows}
    float *gate, *up; // {F, rows}
    float *scores;    // {n_ctx}
    float *bias;      // {V} Markov bias
    float *logit;     // {V} biased logits
    float *w1;        // {R} W1[prev]
    struct bn_dstate **row_owner; // [rows] the rows of a batched pass (bn_drafter_draft_multi / _process_multi): the
    int *row_pos, *row_kv;        //   state (KV cache) of each, its position and the rows it attends to
    float *tapbuf;                // {C*E, rows} the taps of a batched K/V injection's rows
    void *work;
    size_t work_size;
};

// ---- loading ---------------------------------------------------------------------------------

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

// ---- state -----------------------------------------------------------------------------------

static size_t max_work(const bn_drafter *d, int rows) {
    const bn_weight *ws[] = {&d->fc, &d->output, &d->markov_b};
    size_t m = 0;
    for (int i = 0; i < 3; i++) {
        size_t z = bn_matmul_work_size(ws[i], rows); // markov_b: the chains of up to `rows` sequences
        if (z > m) m = z;
    }
    for (int il = 0; il < d->cfg.n_layer; il++) {
        const bn_drafter_layer *ly = &d->layers[il];
        const bn_weight *lw[] = {&ly->attn_q, &ly->attn_k, &ly->attn_v, &ly->attn_output,
                                 &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down};
        for (int i = 0; i < 7; i++) {
            size_t z = bn_matmul_work_size(lw[i], rows);
            if (z > m) m = z;
        }
    }
    return m;
}

bn_dstate *bn_dstate_new(const bn_drafter *d, int n_ctx, int n_threads) {
    bn_dstate *s = bn_dstate_new_pool(d, n_ctx, bn_pool_new(n_threads > 0 ? n_threads : bn_n_threads_default()));
    s->own_pool = true;
    return s;
}

bn_dstate *bn_dstate_new_pool(const bn_drafter *d, int n_ctx, bn_pool *pool) {
    const bn_drafter_config *c = &d->cfg;
    bn_dstate *s = xcalloc(1, sizeof *s);
    s->n_ctx = n_ctx + c->block_size;
    s->rows = c->block_size > BN_DSPARK_CHUNK ? c->block_size : BN_DSPARK_CHUNK;
    s->pool = pool;
    const size_t kvw = (size_t)c->n_head_kv * c->head_dim, qw = (size_t)c->n_head * c->head_dim;
    const size_t E = (size_t)c->n_embd, R = (size_t)s->rows;
    s->n_layer = c->n_layer;
    s->k_cache = xcalloc((size_t)c->n_layer, sizeof(float *));
    s->v_cache = xcalloc((size_t)c->n_layer, sizeof(float *));
    for (int il = 0; il < c->n_layer; il++) {
        s->k_cache[il] = bn_aligned_alloc(sizeof(float) * kvw * (size_t)s->n_ctx);
        s->v_cache[il] = bn_aligned_alloc(sizeof(float) * kvw * (size_t)s->n_ctx);
    }
    s->feat_g = bn_aligned_alloc(sizeof(float) * E * R);
    s->x = bn_aligned_alloc(sizeof(float) * E * R);
    s->xn = bn_aligned_alloc(sizeof(float) * E * R);
    s->mo = bn_aligned_alloc(sizeof(float) * E * R);
    s->q = bn_aligned_alloc(sizeof(float) * qw * R);
    s->att = bn_aligned_alloc(sizeof(float) * qw * R);
    s->k = bn_aligned_alloc(sizeof(float) * kvw * R);
    s->v = bn_aligned_alloc(sizeof(float) * kvw * R);
    s->gate = bn_aligned_alloc(sizeof(float) * (size_t)c->n_ff * R);
    s->up = bn_aligned_alloc(sizeof(float) * (size_t)c->n_ff * R);
    s->scores = bn_aligned_alloc(sizeof(float) * (size_t)s->n_ctx);
    s->bias = bn_aligned_alloc(sizeof(float) * (size_t)c->n_vocab);
    s->logit = bn_aligned_alloc(sizeof(float) * (size_t)c->n_vocab);
    s->w1 = bn_aligned_alloc(sizeof(float) * (size_t)c->markov_rank);
    s->row_owner = xcalloc(R, sizeof *s->row_owner);
    s->row_pos = xcalloc(R, sizeof *s->row_pos);
    s->row_kv = xcalloc(R, sizeof *s->row_kv);
    s->tapbuf = bn_aligned_alloc(sizeof(float) * E * (size_t)c->n_taps * R);
    s->work_size = max_work(d, s->rows);
    s->work = s->work_size ? bn_aligned_alloc(s->work_size) : NULL;
    return s;
}

void bn_dstate_free(bn_dstate *s) {
    if (!s) return;
    for (int il = 0; il < s->n_layer; il++) {
        free(s->k_cache[il]);
        free(s->v_cache[il]);
    }
    free(s->k_cache);
    free(s->v_cache);
    void *bufs[] = {s->feat_g, s->x, s->xn, s->mo, s->q, s->att, s->k, s->v, s->gate, s->up, s->scores, s->bias,
                    s->logit, s->w1, s->work, s->row_owner, s->row_pos, s->row_kv, s->tapbuf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    if (s->own_pool) bn_pool_free(s->pool);
    free(s);
}

int bn_dstate_n_cache(const bn_dstate *s) { return s->n_cache; }

int bn_dstate_truncate(bn_dstate *s, int n) {
    if (n < s->n_cache) s->n_cache = n < 0 ? 0 : n;
    return s->n_cache;
}

// ---- math ------------------------------------------------------------------------------------

static void mm(bn_dstate *s, const bn_weight *w, const float *x, float *y, int n) {
    bn_matmul(w, x, y, n, s->work, s->pool);
}

int bn_drafter_encode(const bn_drafter *d, bn_dstate *s, const float *taps, int n, float *g) {
    const int E = d->cfg.n_embd;
    const size_t row = (size_t)d->cfg.n_taps * E;
    for (int t0 = 0; t0 < n; t0 += s->rows) {
        int nb = n - t0 < s->rows ? n - t0 : s->rows;
        mm(s, &d->fc, taps + (size_t)t0 * row, g + (size_t)t0 * E, nb); // fc: C·E → E
        for (int t = 0; t < nb; t++) {
            float *gt = g + (size_t)(t0 + t) * E;
            bn_rmsnorm(gt, gt, d->hidden_norm.data, E, d->cfg.norm_eps);
        }
    }
    return 0;
}

// head_norm_rope: per head RMSNorm(x; w) then NEOX RoPE at pos, over n_heads heads of x.
static void head_norm_rope(const bn_drafter_config *c, float *x, int n_heads, const float *w, int pos) {
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * c->head_dim;
        bn_rmsnorm(xh, xh, w, c->head_dim, c->norm_eps);
        bn_rope_neox(xh, c->head_dim, c->n_rot, pos, c->rope_base);
    }
}

int bn_drafter_process_multi(const bn_drafter *d, const bn_process_seq *seqs, int n, char *err, size_t errlen) {
    const bn_drafter_config *c = &d->cfg;
    const int E = c->n_embd, kvw = c->n_head_kv * c->head_dim;
    const size_t row = (size_t)c->n_taps * E;
    bn_dstate *s = NULL; // the scratch state: the first with rows to process
    for (int i = 0; i < n; i++) {
        const bn_process_seq *q = &seqs[i];
        if (q->pos0 != q->s->n_cache)
            return bn_err(err, errlen, "drafter: process at position %d but the cache holds %d rows", q->pos0,
                          q->s->n_cache);
        if (q->n < 0 || q->pos0 + q->n + c->block_size > q->s->n_ctx)
            return bn_err(err, errlen, "drafter: context full (%d + %d rows)", q->pos0, q->n);
        for (int j = 0; j < i; j++)
            if (seqs[j].s == q->s) return bn_err(err, errlen, "drafter: sequences %d and %d share a state", j, i);
        if (!s && q->n > 0) s = q->s;
    }
    if (!s) return 0;
    // the rows of every sequence one after another, in chunks of the scratch rows (each row's K/V depend on its
    // own taps alone: a chunk may hold the end of one sequence and the start of the next), their taps gathered into
    // the scratch's tap rows
    int seq = 0, t = 0; // the next row: row t of sequence seq
    for (;;) {
        int nb = 0;
        while (seq < n && nb < s->rows) {
            const bn_process_seq *q = &seqs[seq];
            if (t >= q->n) {
                seq++, t = 0;
                continue;
            }
            const int take = q->n - t < s->rows - nb ? q->n - t : s->rows - nb;
            for (int r = 0; r < take; r++) {
                s->row_owner[nb + r] = q->s;
                s->row_pos[nb + r] = q->pos0 + t + r;
            }
            memcpy(s->tapbuf + (size_t)nb * row, q->taps + (size_t)t * row, sizeof(float) * row * (size_t)take);
            nb += take, t += take;
        }
        if (nb == 0) break;
        bn_drafter_encode(d, s, s->tapbuf, nb, s->feat_g);
        // context rows: K = RoPE(k_norm(W_k g)), V = W_v g; no attn_norm, Q, FFN or residual (§4.3)
        for (int il = 0; il < c->n_layer; il++) {
            const bn_drafter_layer *ly = &d->layers[il];
            mm(s, &ly->attn_k, s->feat_g, s->k, nb);
            mm(s, &ly->attn_v, s->feat_g, s->v, nb);
            for (int r = 0; r < nb; r++) {
                bn_dstate *o = s->row_owner[r];
                const int pos = s->row_pos[r];
                float *kt = s->k + (size_t)r * kvw;
                head_norm_rope(c, kt, c->n_head_kv, ly->attn_k_norm.data, pos);
                memcpy(o->k_cache[il] + (size_t)pos * kvw, kt, sizeof(float) * (size_t)kvw);
                memcpy(o->v_cache[il] + (size_t)pos * kvw, s->v + (size_t)r * kvw, sizeof(float) * (size_t)kvw);
            }
        }
    }
    for (int i = 0; i < n; i++) seqs[i].s->n_cache = seqs[i].pos0 + seqs[i].n;
    return 0;
}

int bn_drafter_process(const bn_drafter *d, bn_dstate *s, const float *taps, int n, int pos0, char *err,
                       size_t errlen) {
    const bn_process_seq q = {.s = s, .taps = taps, .n = n, .pos0 = pos0};
    return bn_drafter_process_multi(d, &q, 1, err, errlen);
}

// A block pass over the rows of several sequences at once: the rows of sequence i are rows row0[i] ..
// row0[i] + n_rows[i] − 1 of the scratch state's buffers; each attends to its own state's cache.
typedef struct {
    const bn_drafter_config *c;
    bn_dstate *scratch;       // the state whose buffers hold every row (q, att)
    bn_dstate *const *owner;  // [rows] the state (KV cache) of each row
    const int *n_kv;          // [rows] context + block rows that row attends to
    int il;
} attn_job;

// attn_task: items = (row, head) pairs; non-causal: every block row sees all n_kv rows of its sequence.
static void attn_task(void *vctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    attn_job *j = vctx;
    const bn_drafter_config *c = j->c;
    const int hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd, group = c->n_head / c->n_head_kv;
    float *scores = NULL;
    int scores_n = 0;
    for (int64_t it = i0; it < i1; it++) {
        int row = (int)(it / c->n_head), h = (int)(it % c->n_head), kvh = h / group;
        const bn_dstate *o = j->owner[row];
        if (j->n_kv[row] > scores_n) {
            free(scores);
            scores_n = j->n_kv[row];
            scores = xmalloc(sizeof(float) * (size_t)scores_n);
        }
        bn_attention_head(j->scratch->att + (size_t)row * qw + (size_t)h * hd,
                          j->scratch->q + (size_t)row * qw + (size_t)h * hd, o->k_cache[j->il] + (size_t)kvh * hd,
                          o->v_cache[j->il] + (size_t)kvh * hd, j->n_kv[row], kvw, hd, 1.0f / sqrtf((float)hd), scores);
    }
    free(scores);
}

// block_check: the errors of a block pass of n_rows rows for anchor id_last at n_past on s. Returns 0 or -1 with err.
static int block_check(const bn_drafter *d, const bn_dstate *s, int32_t id_last, int n_past, int n_rows, char *err,
                       size_t errlen) {
    const bn_drafter_config *c = &d->cfg;
    if (n_past != s->n_cache)
        return bn_err(err, errlen, "drafter: block at position %d but the cache holds %d context rows", n_past,
                      s->n_cache);
    if (n_rows < 1 || n_rows > c->block_size || n_rows > s->rows)
        return bn_err(err, errlen, "drafter: block of %d rows (block size %d)", n_rows, c->block_size);
    if (n_past + n_rows > s->n_ctx) return bn_err(err, errlen, "drafter: context full");
    if (id_last < 0 || id_last >= c->n_vocab) return bn_err(err, errlen, "drafter: token %d out of range", id_last);
    return 0;
}

// block_rows: the block pass of n sequences (checked, total rows <= scratch->rows) in scratch's buffers: sequence i
// (state ss[i], anchor ids[i] at n_past[i], n_rows[i] rows) in the rows from row0[i] on. Writes h [rows][E] (after
// output_norm) and base logits [rows][V] of all rows in that order (either may be NULL); the block rows' K/V, written
// after each sequence's context rows, are dropped (n_cache is not advanced).
static void block_rows(const bn_drafter *d, bn_dstate *scratch, bn_dstate *const *ss, const int32_t *ids,
                       const int *n_past, const int *n_rows, int n, float *h, float *base) {
    const bn_drafter_config *c = &d->cfg;
    const int E = c->n_embd, hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd, F = c->n_ff;
    bn_dstate **owner = scratch->row_owner;
    int *pos = scratch->row_pos, *n_kv = scratch->row_kv;
    int rows = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < n_rows[i]; r++, rows++) {
            owner[rows] = ss[i];
            pos[rows] = n_past[i] + r;
            n_kv[rows] = n_past[i] + n_rows[i];
            // 1–2. embeddings of [id_last, MASK...] + log-SNR embedding (anchor row 0, mask rows after)
            float *xr = scratch->x + (size_t)rows * E;
            bn_weight_row_f32(&d->token_embd, r == 0 ? ids[i] : c->mask_token_id, xr);
            if (c->log_snr) bn_axpy_f32(xr, 1.0f, d->snr_emb + (size_t)(r == 0 ? 0 : 1) * E, E);
        }
    bn_dstate *s = scratch;
    // 3. layers
    for (int il = 0; il < c->n_layer; il++) {
        const bn_drafter_layer *ly = &d->layers[il];
        for (int i = 0; i < rows; i++)
            bn_rmsnorm(s->xn + (size_t)i * E, s->x + (size_t)i * E, ly->attn_norm.data, E, c->norm_eps);
        mm(s, &ly->attn_q, s->xn, s->q, rows);
        mm(s, &ly->attn_k, s->xn, s->k, rows);
        mm(s, &ly->attn_v, s->xn, s->v, rows);
        for (int i = 0; i < rows; i++) {
            head_norm_rope(c, s->q + (size_t)i * qw, c->n_head, ly->attn_q_norm.data, pos[i]);
            head_norm_rope(c, s->k + (size_t)i * kvw, c->n_head_kv, ly->attn_k_norm.data, pos[i]);
            // block rows go after their sequence's context rows (temporary: n_cache is not advanced)
            memcpy(owner[i]->k_cache[il] + (size_t)pos[i] * kvw, s->k + (size_t)i * kvw, sizeof(float) * (size_t)kvw);
            memcpy(owner[i]->v_cache[il] + (size_t)pos[i] * kvw, s->v + (size_t)i * kvw, sizeof(float) * (size_t)kvw);
        }
        attn_job job = {.c = c, .scratch = s, .owner = owner, .n_kv = n_kv, .il = il};
        bn_parallel_for(s->pool, (int64_t)rows * c->n_head, attn_task, &job);
        mm(s, &ly->attn_output, s->att, s->mo, rows);
        for (int i = 0; i < rows; i++) {
            float *xi = s->x + (size_t)i * E;
            bn_axpy_f32(xi, 1.0f, s->mo + (size_t)i * E, E);
            bn_rmsnorm(s->xn + (size_t)i * E, xi, ly->ffn_norm.data, E, c->norm_eps);
        }
        mm(s, &ly->ffn_gate, s->xn, s->gate, rows);
        mm(s, &ly->ffn_up, s->xn, s->up, rows);
        bn_swiglu(s->gate, s->gate, s->up, F * rows);
        mm(s, &ly->ffn_down, s->gate, s->mo, rows);
        for (int i = 0; i < rows; i++) bn_axpy_f32(s->x + (size_t)i * E, 1.0f, s->mo + (size_t)i * E, E);
    }
    // 4. output norm + LM head
    for (int i = 0; i < rows; i++)
        bn_rmsnorm(s->xn + (size_t)i * E, s->x + (size_t)i * E, d->output_norm.data, E, c->norm_eps);
    if (h) memcpy(h, s->xn, sizeof(float) * (size_t)E * rows);
    if (base) mm(s, &d->output, s->xn, base, rows);
}

int bn_drafter_block(const bn_drafter *d, bn_dstate *s, int32_t id_last, int n_past, int n_rows, float *h,
                     float *base, char *err, size_t errlen) {
    if (block_check(d, s, id_last, n_past, n_rows, err, errlen) != 0) return -1;
    block_rows(d, s, &s, &id_last, &n_past, &n_rows, 1, h, base);
    return 0;
}

// argmax_skip: index of the largest l[v], v != skip; ties → lowest id.
static int32_t argmax_skip(const float *l, int n, int skip) {
    int32_t best = -1;
    for (int v = 0; v < n; v++) {
        if (v == skip) continue;
        if (best < 0 || l[v] > l[best]) best = v;
    }
    return best;
}

void bn_drafter_step_logits(const bn_drafter *d, bn_dstate *s, const float *base_row, int32_t prev, float *logits) {
    const int V = d->cfg.n_vocab;
    // bias[v] = scale · Σ_r W1[prev][r] · W2[v][r]
    bn_weight_row_f32(&d->markov_a, prev, s->w1);
    mm(s, &d->markov_b, s->w1, s->bias, 1);
    for (int v = 0; v < V; v++) logits[v] = base_row[v] + d->markov_b_scale * s->bias[v];
}

// One sequence's Markov chain in markov_multi.
typedef struct {
    bn_dstate *s;        // its state (logits scratch)
    const float *base;   // [n][V] base logits of its block rows
    const float *h;      // [n][E] their hidden rows (confidence head)
    int n;               // rows
    int32_t id_last;     // prev_0
    int32_t *drafts;     // out: room for n
    float *conf;         // out: c_i (may be NULL)
    int count;           // out: drafts written
} chain_seq;

// markov_multi: the Markov chains of g sequences together (docs/dspark.md §4.5–4.6): at step i every live chain looks up
// W1[prev_i], one W2 product (scratch's pool and work) takes all their columns, then each chain's logits
// base_i + scale·W2·W1[prev_i], confidence c_i = σ(w · [h_i ; W1[prev_i]] + b) and draft argmax (skipping MASK,
// ties → lowest id). A chain stops at an invalid prev (MASK never evaluated), at the first c_i < p_min (p_min > 0) or after
// its rows.
static void markov_multi(const bn_drafter *d, bn_dstate *scratch, chain_seq *q, int g, float p_min) {
    const bn_drafter_config *c = &d->cfg;
    const int V = c->n_vocab, E = c->n_embd, R = c->markov_rank;
    int max_n = 0;
    for (int k = 0; k < g; k++) {
        q[k].count = 0;
        if (q[k].n > max_n) max_n = q[k].n;
    }
    float *w1 = xmalloc(sizeof(float) * (size_t)R * (size_t)g), *bias = xmalloc(sizeof(float) * (size_t)V * (size_t)g);
    int live[BN_DRAFT_MULTI_MAX];
    bool stopped[BN_DRAFT_MULTI_MAX] = {false};
    for (int i = 0; i < max_n; i++) {
        int nl = 0;
        for (int k = 0; k < g; k++) {
            const int32_t prev = i == 0 ? q[k].id_last : q[k].drafts[i - 1];
            if (stopped[k] || i >= q[k].n) continue;
            if (prev == c->mask_token_id || prev < 0 || prev >= V) { // never evaluate with prev = MASK
                stopped[k] = true;
                continue;
            }
            bn_weight_row_f32(&d->markov_a, prev, w1 + (size_t)nl * R);
            live[nl++] = k;
        }
        if (nl == 0) break;
        mm(scratch, &d->markov_b, w1, bias, nl); // bias[j][v] = Σ_r W1[prev_j][r] · W2[v][r]
        for (int j = 0; j < nl; j++) {
            chain_seq *cq = &q[live[j]];
            float *logit = cq->s->logit;
            const float *base_i = cq->base + (size_t)i * V, *bias_j = bias + (size_t)j * V;
            for (int v = 0; v < V; v++) logit[v] = base_i[v] + d->markov_b_scale * bias_j[v];
            float ci = 1.0f;
            if (c->has_conf) {
                float z = bn_dot_f32(d->conf_wf, cq->h + (size_t)i * E, E);
                if (c->conf_in > E) z += bn_dot_f32(d->conf_wf + E, w1 + (size_t)j * R, R);
                ci = bn_sigmoid(z + ((const float *)d->conf_b.data)[0]);
            }
            if (cq->conf) cq->conf[i] = ci;
            if (p_min > 0 && ci < p_min) {
                stopped[live[j]] = true;
                continue;
            }
            cq->drafts[i] = argmax_skip(logit, V, c->mask_token_id);
            cq->count = i + 1;
        }
    }
    free(w1);
    free(bias);
}

int bn_drafter_markov(const bn_drafter *d, bn_dstate *s, const float *base, const float *h, int n, int32_t id_last,
                      float p_min, int32_t *drafts, float *conf) {
    chain_seq q = {.s = s, .base = base, .h = h, .n = n, .id_last = id_last, .drafts = drafts, .conf = conf};
    markov_multi(d, s, &q, 1, p_min);
    return q.count;
}

int bn_drafter_draft_multi(const bn_drafter *d, bn_draft_seq *seqs, int n, float p_min, char *err, size_t errlen) {
    const bn_drafter_config *c = &d->cfg;
    const int E = c->n_embd, V = c->n_vocab;
    int n_active = 0, max_rows = 0, all_rows = 0;
    for (int i = 0; i < n; i++) {
        bn_draft_seq *q = &seqs[i];
        q->n_drafts = 0;
        if (q->n_max > c->block_size) q->n_max = c->block_size;
        if (q->n_max <= 0 || q->id_last == c->mask_token_id) continue; // nothing to draft (never after MASK)
        for (int j = 0; j < i; j++)
            if (seqs[j].s == q->s) return bn_err(err, errlen, "drafter: sequences %d and %d share a state", j, i);
        if (block_check(d, q->s, q->id_last, q->n_past, q->n_max, err, errlen) != 0) return -1;
        n_active++, all_rows += q->n_max;
        if (q->s->rows > max_rows) max_rows = q->s->rows;
    }
    if (n_active == 0) return 0;
    if (max_rows > all_rows) max_rows = all_rows; // the most rows one block pass holds
    float *h = xmalloc(sizeof(float) * (size_t)E * (size_t)max_rows);
    float *base = xmalloc(sizeof(float) * (size_t)V * (size_t)max_rows);
    bn_dstate *ss[BN_DRAFT_MULTI_MAX];
    int32_t ids[BN_DRAFT_MULTI_MAX];
    int n_past[BN_DRAFT_MULTI_MAX], n_rows[BN_DRAFT_MULTI_MAX], at[BN_DRAFT_MULTI_MAX];
    for (int i = 0; i < n;) {
        // a group: the next sequences whose rows fit in the first one's scratch rows, in one block pass
        bn_dstate *scratch = NULL;
        int g = 0, rows = 0;
        for (; i < n && g < BN_DRAFT_MULTI_MAX; i++) {
            bn_draft_seq *q = &seqs[i];
            if (q->n_max <= 0 || q->id_last == c->mask_token_id) continue;
            if (!scratch) scratch = q->s;
            if (rows + q->n_max > scratch->rows) break;
            ss[g] = q->s, ids[g] = q->id_last, n_past[g] = q->n_past, n_rows[g] = q->n_max, at[g] = i;
            rows += q->n_max, g++;
        }
        if (g == 0) continue;
        block_rows(d, scratch, ss, ids, n_past, n_rows, g, h, base);
        chain_seq cs[BN_DRAFT_MULTI_MAX];
        for (int k = 0, row0 = 0; k < g; row0 += n_rows[k], k++) {
            bn_draft_seq *q = &seqs[at[k]];
            cs[k] = (chain_seq){.s = q->s, .base = base + (size_t)row0 * V, .h = h + (size_t)row0 * E, .n = n_rows[k],
                                .id_last = q->id_last, .drafts = q->drafts};
        }
        markov_multi(d, scratch, cs, g, p_min); // the chains together: W2 read once per step for all
        for (int k = 0; k < g; k++) seqs[at[k]].n_drafts = cs[k].count;
    }
    free(h);
    free(base);
    return 0;
}

int bn_drafter_draft(const bn_drafter *d, bn_dstate *s, int32_t id_last, int n_past, int n_max, float p_min,
                     int32_t *drafts, char *err, size_t errlen) {
    bn_draft_seq q = {.s = s, .id_last = id_last, .n_past = n_past, .n_max = n_max, .drafts = drafts};
    return bn_drafter_draft_multi(d, &q, 1, p_min, err, errlen) == 0 ? q.n_drafts : -1;
}
