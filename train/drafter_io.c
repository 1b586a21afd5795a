// train/drafter_io.c — the trainable drafter's tensors (read from a loaded drafter), its file writer (either
// convention, keys and names by synth/mkdrafter.c) and its checkpoint. See train/drafter.h.
#include "train/drafter.h"
#include "synth/mkdrafter.h"
#include "core/matmul.h"
#include "quant/quant.h"
#include "base/bytebuf.h"
#include "base/util.h"
#include <string.h>
#include <stdlib.h>
#include <stdio.h>

// add: registers a trainable tensor read from w (ne1 rows of ne0), values times mult; returns its offset.
static int64_t add(bn_dtrain *t, const char *name, const bn_weight *w, int64_t ne0, int64_t ne1, bool vec, float mult) {
    if (t->n_tensors == BN_DTRAIN_MAX_TENSORS) bn_die("drafter train: too many tensors");
    bn_dtrain_tensor *x = &t->t[t->n_tensors++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ne0 = ne0, x->ne1 = ne1, x->vec = vec, x->off = t->n_params;
    t->n_params += ne0 * ne1;
    t->params = xrealloc(t->params, sizeof(float) * (size_t)t->n_params);
    for (int64_t j = 0; j < ne1; j++) {
        float *row = t->params + x->off + j * ne0;
        if (bn_weight_row_f32(w, j, row) != 0) bn_die("drafter train: cannot read '%s'", name);
        if (mult != 1.0f)
            for (int64_t i = 0; i < ne0; i++) row[i] *= mult;
    }
    return x->off;
}

bn_dtrain *bn_dtrain_new(const bn_drafter *d) {
    const bn_drafter_config *c = &d->cfg;
    const int64_t E = c->n_embd, R = c->markov_rank, V = c->n_vocab, F = c->n_ff;
    const int64_t qw = (int64_t)c->n_head * c->head_dim, kvw = (int64_t)c->n_head_kv * c->head_dim;
    bn_dtrain *t = xcalloc(1, sizeof *t);
    t->d = d, t->cfg = *c, t->conf_weight = 1.0f;
    t->fc = add(t, "fc.weight", &d->fc, (int64_t)c->n_taps * E, E, false, 1);
    t->hidden_norm = add(t, "enc.output_norm.weight", &d->hidden_norm, E, 1, true, 1);
    t->output_norm = add(t, "output_norm.weight", &d->output_norm, E, 1, true, 1);
    t->markov_a = add(t, "markov_w1.weight", &d->markov_a, R, V, false, 1);
    t->markov_b = add(t, "markov_w2.weight", &d->markov_b, R, V, false, d->markov_b_scale); // scale folded in
    if (c->has_conf) {
        t->conf_w = add(t, "conf_proj.weight", &d->conf_w, c->conf_in, 1, true, 1);
        t->conf_b = add(t, "conf_proj.bias", &d->conf_b, 1, 1, true, 1);
    }
    t->layers = xcalloc((size_t)c->n_layer, sizeof *t->layers);
    for (int il = 0; il < c->n_layer; il++) {
        const bn_drafter_layer *ly = &d->layers[il];
        bn_dtrain_layer *o = &t->layers[il];
        char n[64];
#define L(field, sfx, w, ne0, ne1, vec)                                                                                 \
    (snprintf(n, sizeof n, "blk.%d.%s", il, sfx), o->field = add(t, n, w, ne0, ne1, vec, 1))
        L(attn_norm, "attn_norm.weight", &ly->attn_norm, E, 1, true);
        L(attn_q, "attn_q.weight", &ly->attn_q, E, qw, false);
        L(attn_k, "attn_k.weight", &ly->attn_k, E, kvw, false);
        L(attn_v, "attn_v.weight", &ly->attn_v, E, kvw, false);
        L(attn_output, "attn_output.weight", &ly->attn_output, qw, E, false);
        L(q_norm, "attn_q_norm.weight", &ly->attn_q_norm, c->head_dim, 1, true);
        L(k_norm, "attn_k_norm.weight", &ly->attn_k_norm, c->head_dim, 1, true);
        L(ffn_norm, "ffn_norm.weight", &ly->ffn_norm, E, 1, true);
        L(ffn_gate, "ffn_gate.weight", &ly->ffn_gate, E, F, false);
        L(ffn_up, "ffn_up.weight", &ly->ffn_up, E, F, false);
        L(ffn_down, "ffn_down.weight", &ly->ffn_down, F, E, false);
#undef L
    }
    t->grads = xcalloc((size_t)t->n_params, sizeof(float));
    return t;
}

void bn_dtrain_free(bn_dtrain *t) {
    if (!t) return;
    free(t->params), free(t->grads), free(t->layers), free(t);
}

// add_frozen: a frozen tensor copied with its bytes and type (borrowed until the write).
static int add_frozen(gguf_writer *w, int conv, const char *dflash, const bn_weight *x, char *err, size_t errlen) {
    int64_t ne[2] = {x->ne[0], x->ne[1]};
    char name[GGUF_MAX_NAME + 1];
    bn_drafter_tensor_name(conv, dflash, name, sizeof name);
    return gguf_writer_add_tensor(w, name, ne[1] > 1 ? 2 : 1, ne, x->type, (uint32_t)x->type, x->data, err, errlen) < 0
               ? -1
               : 0;
}

// copy_vocab: the target's tokenizer.* keys into w, the drafter's own mask token id kept.
static void copy_vocab(gguf_writer *w, const gguf_file *target) {
    for (size_t i = 0; target && i < target->n_kv; i++) {
        const char *k = target->kv[i].key;
        if (!strncmp(k, "tokenizer.", 10) && strcmp(k, "tokenizer.ggml.mask_token_id")) gguf_set_kv(w, &target->kv[i]);
    }
}

int bn_dtrain_write(const bn_dtrain *t, const char *path, int type, int conv, const gguf_file *target, char *err,
                    size_t errlen) {
    const bn_drafter *d = t->d;
    const bn_drafter_config *c = &t->cfg;
    bn_mkdrafter_params p;
    bn_mkdrafter_defaults(&p);
    p.convention = conv;
    p.n_embd = c->n_embd, p.n_layer = c->n_layer, p.n_ff = c->n_ff, p.n_head = c->n_head;
    p.n_head_kv = c->n_head_kv, p.head_dim = c->head_dim, p.n_rot = c->n_rot, p.rope_base = c->rope_base;
    p.norm_eps = c->norm_eps, p.n_vocab = c->n_vocab, p.block_size = c->block_size;
    p.mask_token_id = c->mask_token_id, p.n_taps = c->n_taps, p.markov_rank = c->markov_rank;
    for (int i = 0; i < c->n_taps; i++) p.target_layers[i] = c->tap_layers[i];
    p.confidence_head = c->has_conf, p.confidence_with_markov = c->conf_in > c->n_embd;
    p.log_snr = c->log_snr, p.min_log_snr = c->min_log_snr, p.max_log_snr = c->max_log_snr, p.snr_feat = c->snr_feat;
    gguf_writer *w = gguf_writer_new();
    bn_mkdrafter_write_keys(w, &p);
    gguf_set_str(w, "general.name", "bonsai-train-drafter");
    if (conv == BN_DRAFTER_DFLASH) copy_vocab(w, target);
    void **bufs = xcalloc((size_t)t->n_tensors, sizeof(void *));
    int rc = 0;
    // frozen tensors: the drafter's own embeddings / head (absent: borrowed from the target) and the log-SNR MLP
    const bool own_embd = d->gguf && gguf_find_tensor(d->gguf, "token_embd.weight");
    const bool own_out = d->gguf && gguf_find_tensor(d->gguf, "output.weight");
    if (own_embd) rc |= add_frozen(w, conv, "token_embd.weight", &d->token_embd, err, errlen);
    if (own_out && rc == 0) rc |= add_frozen(w, conv, "output.weight", &d->output, err, errlen);
    if (c->log_snr && rc == 0) {
        rc |= add_frozen(w, conv, "log_snr_fc1.weight", &d->snr_fc1_w, err, errlen);
        rc |= add_frozen(w, conv, "log_snr_fc1.bias", &d->snr_fc1_b, err, errlen);
        rc |= add_frozen(w, conv, "log_snr_fc2.weight", &d->snr_fc2_w, err, errlen);
        rc |= add_frozen(w, conv, "log_snr_fc2.bias", &d->snr_fc2_b, err, errlen);
    }
    for (int i = 0; i < t->n_tensors && rc == 0; i++) {
        const bn_dtrain_tensor *x = &t->t[i];
        const float *src = t->params + x->off;
        // vectors stay F32; a matrix whose rows are not whole blocks of a quantized type falls back to F16
        int ty = x->vec ? BN_F32 : type;
        if (ty != BN_F32 && ty != BN_F16 && x->ne0 % bn_type_blck(ty)) ty = BN_F16;
        if (ty == BN_F16) {
            bufs[i] = xmalloc(sizeof(uint16_t) * (size_t)(x->ne0 * x->ne1));
            bn_fp32_to_fp16_row(src, bufs[i], x->ne0 * x->ne1);
        } else if (ty != BN_F32) {
            const size_t rb = bn_row_size(ty, x->ne0);
            bufs[i] = xmalloc(rb * (size_t)x->ne1);
            for (int64_t j = 0; j < x->ne1 && rc == 0; j++)
                if (bn_quantize_ref(ty, src + j * x->ne0, (uint8_t *)bufs[i] + (size_t)j * rb, x->ne0) != rb)
                    rc = bn_err(err, errlen, "drafter write: cannot quantize '%s' to %s", x->name, bn_type_name(ty));
        }
        int64_t ne[2] = {x->ne0, x->ne1};
        const int nd = x->ne1 > 1 || !strcmp(x->name, "conf_proj.weight") ? 2 : 1;
        const void *data = bufs[i] ? bufs[i] : src;
        char name[GGUF_MAX_NAME + 1];
        bn_drafter_tensor_name(conv, x->name, name, sizeof name);
        if (rc == 0 && gguf_writer_add_tensor(w, name, nd, ne, ty, (uint32_t)ty, data, err, errlen) < 0)
            rc = -1;
    }
    if (rc == 0) rc = gguf_writer_write(w, path, NULL, NULL, err, errlen);
    for (int i = 0; i < t->n_tensors; i++) free(bufs[i]);
    free(bufs);
    gguf_writer_free(w);
    return rc;
}

// ---- checkpoint ----------------------------------------------------------------------------------
// Layout: "BNDRCKP\1" | u32 layout crc (tensor names and shapes) | i64 n_params | i64 step, total_steps, epoch,
// data_pos | u64 rng[4] | f32 params[n] | i64 adam_t | f32 m[n] | f32 v[n] | u32 crc32 of all preceding bytes.
static const char MAGIC[8] = {'B', 'N', 'D', 'R', 'C', 'K', 'P', 1};

static uint32_t layout_crc(const bn_dtrain *t) {
    uint32_t crc = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        crc = bn_crc32(crc, t->t[i].name, strlen(t->t[i].name));
        crc = bn_crc32(crc, &t->t[i].ne0, sizeof t->t[i].ne0);
        crc = bn_crc32(crc, &t->t[i].ne1, sizeof t->t[i].ne1);
    }
    return crc;
}

int bn_dtrain_checkpoint_save(const bn_dtrain *t, const bn_adamw *o, const bn_dtrain_pos *pos, const char *path,
                              char *err, size_t errlen) {
    bn_buf b = {0};
    uint32_t lay = layout_crc(t);
    bn_put(&b, MAGIC, sizeof MAGIC);
    BN_PUT(&b, lay), BN_PUT(&b, t->n_params);
    BN_PUT(&b, pos->step), BN_PUT(&b, pos->total_steps), BN_PUT(&b, pos->epoch), BN_PUT(&b, pos->data_pos);
    bn_put(&b, pos->rng.s, sizeof pos->rng.s);
    bn_put(&b, t->params, sizeof(float) * (size_t)t->n_params);
    return bn_adamw_commit(&b, o, path, err, errlen);
}

int bn_dtrain_checkpoint_load(bn_dtrain *t, bn_adamw *o, bn_dtrain_pos *pos, const char *path, char *err,
                              size_t errlen) {
    size_t size;
    char *data = bn_read_file(path, &size, err, errlen);
    if (!data) return -1;
    int rc = -1;
    bn_rbuf rd = {(const uint8_t *)data, size, 0};
    char magic[8];
    uint32_t lay = 0, crc = 0;
    int64_t n = 0;
    if (size < sizeof MAGIC + 4 || bn_crc32(0, data, size - 4) != (memcpy(&crc, data + size - 4, 4), crc)) {
        bn_err(err, errlen, "checkpoint %s: truncated or corrupt (CRC mismatch)", path);
    } else if (bn_get(&rd, magic, 8) || memcmp(magic, MAGIC, 8) || BN_GET(&rd, lay) || BN_GET(&rd, n)) {
        bn_err(err, errlen, "checkpoint %s: not a drafter checkpoint", path);
    } else if (lay != layout_crc(t) || n != t->n_params || o->n != n) {
        bn_err(err, errlen, "checkpoint %s: %lld parameters of another drafter layout (this one: %lld)", path,
               (long long)n, (long long)t->n_params);
    } else if (BN_GET(&rd, pos->step) || BN_GET(&rd, pos->total_steps) || BN_GET(&rd, pos->epoch) ||
               BN_GET(&rd, pos->data_pos) || bn_get(&rd, pos->rng.s, sizeof pos->rng.s) ||
               bn_get(&rd, t->params, sizeof(float) * (size_t)n) || BN_GET(&rd, o->t) ||
               bn_get(&rd, o->m, sizeof(float) * (size_t)n) || bn_get(&rd, o->v, sizeof(float) * (size_t)n)) {
        bn_err(err, errlen, "checkpoint %s: truncated", path);
    } else rc = 0;
    free(data);
    return rc;
}
