// synth/mkdrafter.c — random DSpark drafter GGUFs in the legacy `dspark` or the `dflash`
// convention. See synth/mkdrafter.h; names and keys: docs/dspark.md §2.1–2.2, §3.1–3.2.
#include "synth/mkdrafter.h"
#include "synth/mkmodel.h"
#include "base/rng.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

void bn_mkdrafter_defaults(bn_mkdrafter_params *p) {
    memset(p, 0, sizeof *p);
    p->convention = BN_DRAFTER_LEGACY;
    p->n_embd = 128;
    p->n_layer = 2;
    p->n_ff = 256;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->head_dim = 32;
    p->n_rot = 32;
    p->rope_base = 1e6f;
    p->norm_eps = 1e-6f;
    p->ctx = 4096;
    p->n_vocab = 512;
    p->block_size = 4;
    p->mask_token_id = -1; // n_vocab - 1
    p->n_taps = 2;
    p->target_layers[0] = 1;
    p->target_layers[1] = 2;
    p->markov_rank = 16;
    p->confidence_head = true;
    p->confidence_with_markov = true;
    p->log_snr = true;
    p->min_log_snr = -9.0f;
    p->max_log_snr = 9.0f;
    p->snr_feat = 128;
    p->shared = false;
    p->seed = 7;
    p->type = BN_F32;
    p->logit_scale = 4.0f;
    p->markov_scale = 1.0f;
}

int bn_mkdrafter_check(const bn_mkdrafter_params *p, char *err, size_t errlen) {
    if (p->n_embd <= 0 || p->n_layer <= 0 || p->n_ff <= 0 || p->n_head <= 0 || p->n_head_kv <= 0 || p->head_dim <= 0)
        return bn_err(err, errlen, "mkdrafter: shapes must be positive");
    if (p->n_head % p->n_head_kv)
        return bn_err(err, errlen, "mkdrafter: head_count %d not a multiple of head_count_kv %d", p->n_head,
                      p->n_head_kv);
    if (p->n_rot <= 0 || p->n_rot > p->head_dim || p->n_rot % 2)
        return bn_err(err, errlen, "mkdrafter: bad n_rot %d", p->n_rot);
    if (p->n_vocab < 2) return bn_err(err, errlen, "mkdrafter: n_vocab %d too small", p->n_vocab);
    int mask = p->mask_token_id < 0 ? p->n_vocab - 1 : p->mask_token_id;
    if (mask >= p->n_vocab) return bn_err(err, errlen, "mkdrafter: mask_token_id %d >= n_vocab %d", mask, p->n_vocab);
    if (p->block_size < 1 || p->block_size > BN_DRAFTER_MAX_BLOCK)
        return bn_err(err, errlen, "mkdrafter: block_size must be in 1..%d", BN_DRAFTER_MAX_BLOCK);
    if (p->n_taps < 1 || p->n_taps > BN_DRAFTER_MAX_TAPS)
        return bn_err(err, errlen, "mkdrafter: 1..%d taps", BN_DRAFTER_MAX_TAPS);
    for (int i = 0; i < p->n_taps; i++)
        if (p->target_layers[i] < 0) return bn_err(err, errlen, "mkdrafter: negative target layer");
    if (p->markov_rank < 1) return bn_err(err, errlen, "mkdrafter: markov_rank must be >= 1");
    if (p->log_snr && (p->snr_feat < 2 || p->snr_feat % 2))
        return bn_err(err, errlen, "mkdrafter: snr_feat must be even");
    if (p->log_snr && !(p->max_log_snr > p->min_log_snr))
        return bn_err(err, errlen, "mkdrafter: max_log_snr <= min_log_snr");
    const bn_type_traits *tt = bn_type_traits_of(p->type);
    if (!tt) return bn_err(err, errlen, "mkdrafter: unknown type %d", p->type);
    int blck = bn_type_blck(p->type);
    int64_t ne0s[] = {p->n_embd, p->n_ff, (int64_t)p->n_taps * p->n_embd, (int64_t)p->n_head * p->head_dim};
    for (int i = 0; i < 4; i++)
        if (ne0s[i] % blck)
            return bn_err(err, errlen, "mkdrafter: row width %lld not a multiple of %s's block %d", (long long)ne0s[i],
                          bn_type_name(p->type), blck);
    return 0;
}

// ---- tensor list ---------------------------------------------------------------------------

enum kind { K_LINEAR, K_EMBD, K_OUTPUT, K_NORM, K_BIAS, K_MARKOV_A, K_MARKOV_B };

typedef struct {
    char legacy[GGUF_MAX_NAME + 1]; // canonical (legacy) name: seeds the weights
    char name[GGUF_MAX_NAME + 1];   // name written
    int n_dims;
    int64_t ne[2];
    int type;
    int kind;
} tspec;

typedef struct {
    tspec t[128];
    int n;
} tlist;

// Legacy names of the tensors the dflash convention renames (the rest keep their names): docs/dspark.md §3.3 step 3.
static const char *const RENAMED[][2] = {
    {"fc.", "dspark.fc."},
    {"enc.output_norm.", "dspark.hidden_norm."},
    {"markov_w1.", "dspark.markov_head_a."},
    {"markov_w2.", "dspark.markov_head_b."},
    {"conf_proj.", "dspark.confidence_head."},
    {"log_snr_fc1.", "dspark.log_snr_fc1."},
    {"log_snr_fc2.", "dspark.log_snr_fc2."},
};

const char *bn_drafter_tensor_name(int c, const char *dflash, char *buf, size_t n) {
    if (c == BN_DRAFTER_LEGACY)
        for (size_t i = 0; i < sizeof RENAMED / sizeof RENAMED[0]; i++) {
            const size_t k = strlen(RENAMED[i][0]);
            if (!strncmp(dflash, RENAMED[i][0], k)) {
                snprintf(buf, n, "%s%s", RENAMED[i][1], dflash + k);
                return buf;
            }
        }
    snprintf(buf, n, "%s", dflash);
    return buf;
}

int bn_drafter_convention_parse(const char *v, int *c, char *err, size_t errlen) {
    if (!strcmp(v, "legacy") || !strcmp(v, "dspark")) *c = BN_DRAFTER_LEGACY;
    else if (!strcmp(v, "dflash")) *c = BN_DRAFTER_DFLASH;
    else return bn_err(err, errlen, "'%s' is not one of legacy|dflash", v);
    return 0;
}

// add: appends the tensor named dflash in the dflash convention (its legacy name seeds the weights).
static void add(tlist *l, const bn_mkdrafter_params *p, const char *dflash, int n_dims, int64_t ne0, int64_t ne1,
                int kind) {
    if (l->n == (int)(sizeof l->t / sizeof l->t[0])) bn_die("mkdrafter: too many tensors");
    tspec *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    bn_drafter_tensor_name(BN_DRAFTER_LEGACY, dflash, t->legacy, sizeof t->legacy);
    bn_drafter_tensor_name(p->convention, dflash, t->name, sizeof t->name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->kind = kind;
    // big matrices take the chosen type; norms, biases, Markov and confidence heads stay F32
    bool matrix = n_dims == 2 && (kind == K_LINEAR || kind == K_EMBD || kind == K_OUTPUT) && ne1 > 1;
    t->type = matrix ? p->type : BN_F32;
}

static void build(tlist *l, const bn_mkdrafter_params *p) {
    const int64_t E = p->n_embd, F = p->n_ff, hd = p->head_dim, V = p->n_vocab, R = p->markov_rank;
    const int64_t q_rows = (int64_t)p->n_head * hd, kv_rows = (int64_t)p->n_head_kv * hd;
    l->n = 0;
    if (!p->shared) add(l, p, "token_embd.weight", 2, E, V, K_EMBD);
    if (!p->shared) add(l, p, "output.weight", 2, E, V, K_OUTPUT);
    add(l, p, "output_norm.weight", 1, E, 1, K_NORM);
    add(l, p, "fc.weight", 2, (int64_t)p->n_taps * E, E, K_LINEAR);
    add(l, p, "enc.output_norm.weight", 1, E, 1, K_NORM);
    add(l, p, "markov_w1.weight", 2, R, V, K_MARKOV_A);
    add(l, p, "markov_w2.weight", 2, R, V, K_MARKOV_B);
    if (p->confidence_head) {
        add(l, p, "conf_proj.weight", 2, E + (p->confidence_with_markov ? R : 0), 1, K_LINEAR);
        add(l, p, "conf_proj.bias", 1, 1, 1, K_BIAS);
    }
    if (p->log_snr) {
        add(l, p, "log_snr_fc1.weight", 2, p->snr_feat, E, K_LINEAR);
        add(l, p, "log_snr_fc1.bias", 1, E, 1, K_BIAS);
        add(l, p, "log_snr_fc2.weight", 2, E, E, K_LINEAR);
        add(l, p, "log_snr_fc2.bias", 1, E, 1, K_BIAS);
    }
    static const char *const sfx[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                      "attn_output.weight", "attn_q_norm.weight", "attn_k_norm.weight",
                                      "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
    for (int il = 0; il < p->n_layer; il++) {
        int64_t shape[11][2] = {{E, 1}, {E, q_rows}, {E, kv_rows}, {E, kv_rows}, {q_rows, E}, {hd, 1},
                                {hd, 1}, {E, 1}, {E, F}, {E, F}, {F, E}};
        for (int k = 0; k < 11; k++) {
            char name[GGUF_MAX_NAME + 1];
            snprintf(name, sizeof name, "blk.%d.%s", il, sfx[k]);
            int is_norm = shape[k][1] == 1;
            add(l, p, name, is_norm ? 1 : 2, shape[k][0], shape[k][1], is_norm ? K_NORM : K_LINEAR);
        }
    }
}

// ---- random numbers (splitmix64-seeded xorshift per tensor) -------------------------------


// uniform in [-1, 1)
static float rnd_sym(uint64_t *st) { return (float)(bn_rng_splitmix64(st) >> 40) * (2.0f / 16777216.0f) - 1.0f; }

typedef struct {
    const bn_mkdrafter_params *p;
    const tlist *l;
    float *row;
} fill_ctx;

static void gen_row(uint64_t *st, const bn_mkdrafter_params *p, const tspec *t, float *row) {
    const float sqrt3 = 1.7320508f;
    const int64_t n = t->ne[0];
    float std = 1.0f / sqrtf((float)n);
    switch (t->kind) {
    case K_EMBD: std = 1.0f; break;
    case K_OUTPUT: std = p->logit_scale / sqrtf((float)n); break;
    case K_MARKOV_A: std = 1.0f; break;
    case K_MARKOV_B: std = p->markov_scale / sqrtf((float)n); break;
    case K_BIAS: std = 0.1f; break;
    case K_NORM:
        for (int64_t i = 0; i < n; i++) row[i] = 1.0f + 0.05f * rnd_sym(st);
        return;
    default: break;
    }
    for (int64_t i = 0; i < n; i++) row[i] = rnd_sym(st) * sqrt3 * std;
}

static int fill(void *vctx, int idx, void *dst, size_t nbytes, char *err, size_t errlen) {
    fill_ctx *c = vctx;
    const tspec *t = &c->l->t[idx];
    uint64_t st = c->p->seed * 0x9E3779B97F4A7C15ull ^ bn_crc32(0, t->legacy, strlen(t->legacy));
    size_t row_bytes = bn_row_size(t->type, t->ne[0]);
    if (row_bytes * (size_t)t->ne[1] != nbytes) return bn_err(err, errlen, "mkdrafter: '%s': size mismatch", t->name);
    for (int64_t j = 0; j < t->ne[1]; j++) {
        uint8_t *out = (uint8_t *)dst + (size_t)j * row_bytes;
        gen_row(&st, c->p, t, c->row);
        if (bn_quantize_ref(t->type, c->row, out, t->ne[0]) != row_bytes) // F32 / F16 / BF16: plain conversions
            return bn_err(err, errlen, "mkdrafter: cannot quantize '%s' to %s", t->name, bn_type_name(t->type));
    }
    return 0;
}

void bn_mkdrafter_write_keys(gguf_writer *w, const bn_mkdrafter_params *p) {
    const bool dflash = p->convention == BN_DRAFTER_DFLASH;
    const char *a = dflash ? "dflash" : "dspark";
    const int mask = p->mask_token_id < 0 ? p->n_vocab - 1 : p->mask_token_id;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    // drafter-specific keys: double-prefixed in the legacy file, plain in dflash
#define DKEY(suffix) (snprintf(key, sizeof key, dflash ? "dflash.%s" : "dspark.dspark.%s", suffix), key)
    gguf_set_str(w, "general.architecture", a);
    gguf_set_str(w, "general.name", "bonsai-mkdrafter");
    bn_synth_set_shape_keys(w, a, &(bn_synth_shape){p->n_layer, p->ctx, p->n_embd, p->n_ff, p->n_head, p->n_head_kv,
                                                    p->head_dim, p->norm_eps, p->rope_base});
    if (p->n_rot != p->head_dim) gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)p->n_rot);
    gguf_set_u32(w, DKEY("block_size"), (uint32_t)p->block_size);
    int32_t layers[BN_DRAFTER_MAX_TAPS];
    for (int i = 0; i < p->n_taps; i++) layers[i] = p->target_layers[i] + (dflash ? 1 : 0); // docs/dspark.md §3.3 step 4
    gguf_set_arr(w, DKEY("target_layers"), GGUF_TYPE_INT32, (uint64_t)p->n_taps, layers);
    gguf_set_bool(w, DKEY("confidence_head"), p->confidence_head);
    gguf_set_bool(w, DKEY("log_snr_conditioning"), p->log_snr);
    gguf_set_f32(w, DKEY("min_log_snr"), p->min_log_snr);
    gguf_set_f32(w, DKEY("max_log_snr"), p->max_log_snr);
    if (dflash) {
        gguf_set_u32(w, "tokenizer.ggml.mask_token_id", (uint32_t)mask);
        gguf_set_str(w, "dflash.sample_from_anchor", "true");
        // a bool: llama.cpp's loader refuses the string form
        gguf_set_bool(w, "dflash.attention.causal", false);
        gguf_set_bool(w, "dflash.has_confidence_head", p->confidence_head);
    } else {
        gguf_set_u32(w, "dspark.dspark.mask_token_id", (uint32_t)mask);
        gguf_set_u32(w, "dspark.dspark.markov_rank", (uint32_t)p->markov_rank);
        gguf_set_bool(w, "dspark.dspark.confidence_head_with_markov", p->confidence_head && p->confidence_with_markov);
        gguf_set_str(w, "tokenizer.ggml.model", "none"); // stub vocab: the target's is used
    }
#undef KEY
#undef DKEY
}

int bn_mkdrafter_write(const bn_mkdrafter_params *p, const char *path, char *err, size_t errlen) {
    if (bn_mkdrafter_check(p, err, errlen) != 0) return -1;
    gguf_writer *w = gguf_writer_new();
    bn_mkdrafter_write_keys(w, p);
    tlist *l = xcalloc(1, sizeof *l);
    build(l, p);
    int64_t max_ne0 = 0;
    for (int i = 0; i < l->n; i++) {
        const tspec *t = &l->t[i];
        if (gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, (uint32_t)t->type, NULL, err, errlen) < 0) {
            free(l);
            gguf_writer_free(w);
            return -1;
        }
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
    }
    fill_ctx c = {.p = p, .l = l, .row = xmalloc(sizeof(float) * (size_t)max_ne0)};
    int rc = gguf_writer_write(w, path, fill, &c, err, errlen);
    free(c.row);
    free(l);
    gguf_writer_free(w);
    return rc;
}
