// tests/core/tiny.h — a self-contained tiny-model generator for the engine tests: random fp32
// weights kept in memory (so a float64 reference can use exactly the same numbers), written to a
// GGUF with the exact qwen35 / qwen3 / llama keys and tensor names (docs/model.md §2–3, §7).
// Options: store the 2-D weights quantized (the in-memory copy is then the dequantized values),
// drop one tensor or shrink one tensor's ne1 (to test the loader's error messages).
#ifndef BONSAI_TESTS_TINY_H
#define BONSAI_TESTS_TINY_H
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne0, ne1;
    float *data; // [ne1][ne0] (dequantized values when stored quantized)
    int type;
    void *bytes; // what is written (== data for F32)
} tiny_tensor;

typedef struct {
    const char *arch; // "qwen35" | "qwen3" | "llama" | "qwen2" (q/k/v biases)
    int H, L, nh, nkv, hd, n_rot, F, V, ctx;
    int dk, Hk, Hv, K, interval; // qwen35
    const char *pattern;         // qwen35: per-layer "R"ecurrent / "A"ttention written as the
                                 // attention.recurrent_layers bool array (NULL = interval rule)
    float eps, rope_base;
    bool tied;
    bool u32_keys; // llama.cpp-loadable: every integer KV as u32 (llama.cpp rejects i32/u64 there)
                   // and a dummy vocabulary (tokenizer.ggml.model "none" + <arch>.vocab_size)
    int wtype; // type of the 2-D weights (except ssm_conv1d): BN_F32, BN_Q8_0, BN_Q1_0...
    const char *drop;   // tensor name left out of the file (NULL = none)
    const char *shrink; // tensor whose ne1 is halved in the file (NULL = none)
    tiny_tensor t[256];
    int n_t;
    uint64_t rng;
} tiny_model;

static inline float tiny_rand(tiny_model *m) { // uniform in [-1, 1)
    m->rng = m->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((m->rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

static inline void tiny_defaults(tiny_model *m, const char *arch) {
    memset(m, 0, sizeof *m);
    m->arch = arch;
    m->H = 128, m->nh = 4, m->nkv = 2, m->hd = 32, m->F = 256, m->V = 256, m->ctx = 512;
    m->eps = 1e-6f, m->wtype = BN_F32, m->rng = 12345;
    if (strcmp(arch, "qwen35") == 0) {
        m->L = 4, m->n_rot = 8, m->rope_base = 1e7f;
        m->dk = 32, m->Hk = 2, m->Hv = 4, m->K = 4, m->interval = 4;
    } else if (strcmp(arch, "qwen3") == 0) {
        m->L = 2, m->n_rot = 32, m->rope_base = 1e6f, m->tied = true;
    } else if (strcmp(arch, "qwen2") == 0) {
        m->L = 2, m->n_rot = 32, m->rope_base = 1e6f;
    } else { // llama
        m->L = 2, m->n_rot = 32, m->rope_base = 10000.0f, m->eps = 1e-5f;
    }
}

// tiny_find: the tensor called name, or NULL.
static inline const tiny_tensor *tiny_find(const tiny_model *m, const char *name) {
    for (int i = 0; i < m->n_t; i++)
        if (strcmp(m->t[i].name, name) == 0) return &m->t[i];
    return NULL;
}
static inline const float *tiny_w(const tiny_model *m, const char *fmt, int il) {
    char name[64];
    snprintf(name, sizeof name, fmt, il);
    const tiny_tensor *t = tiny_find(m, name);
    if (!t) {
        fprintf(stderr, "tiny_w: no tensor %s\n", name);
        exit(2);
    }
    return t->data;
}

// kinds of initialisation
enum { TINY_MAT, TINY_NORM, TINY_SMALL, TINY_NEG, TINY_CONV };

static inline void tiny_add(tiny_model *m, const char *name, int n_dims, int64_t ne0, int64_t ne1, int kind) {
    tiny_tensor *t = &m->t[m->n_t++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims, t->ne0 = ne0, t->ne1 = n_dims > 1 ? ne1 : 1;
    const int64_t n = t->ne0 * t->ne1;
    t->data = xmalloc((size_t)n * sizeof(float));
    const float mat_scale = 1.0f / sqrtf((float)ne0);
    for (int64_t i = 0; i < n; i++) {
        const float r = tiny_rand(m);
        switch (kind) {
        case TINY_MAT: t->data[i] = 1.7f * r * mat_scale; break;
        case TINY_NORM: t->data[i] = 1.0f + 0.2f * r; break;
        case TINY_SMALL: t->data[i] = 0.5f * r; break;
        case TINY_NEG: t->data[i] = -expf(r); break;
        case TINY_CONV: t->data[i] = 0.6f * r; break;
        }
    }
    t->type = BN_F32;
    t->bytes = t->data;
    if (kind == TINY_MAT && m->wtype != BN_F32) { // quantize, keep the dequantized values as "the" weights
        t->type = m->wtype;
        const size_t nbytes = bn_row_size(m->wtype, ne0) * (size_t)t->ne1;
        t->bytes = xmalloc(nbytes);
        bn_quantize_ref(m->wtype, t->data, t->bytes, n);
        bn_dequantize(m->wtype, t->bytes, t->data, n);
    }
}

static inline void tiny_add_blk(tiny_model *m, int il, const char *suffix, int n_dims, int64_t ne0, int64_t ne1,
                                int kind) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    tiny_add(m, name, n_dims, ne0, ne1, kind);
}

static inline bool tiny_is_recurrent(const tiny_model *m, int il) {
    if (strcmp(m->arch, "qwen35") != 0) return false;
    if (m->pattern) return m->pattern[il] == 'R';
    return (il + 1) % m->interval != 0;
}

// tiny_build: generates all tensors for the configuration in m.
static inline void tiny_build(tiny_model *m) {
    const bool q35 = strcmp(m->arch, "qwen35") == 0, q3 = strcmp(m->arch, "qwen3") == 0;
    tiny_add(m, "token_embd.weight", 2, m->H, m->V, TINY_SMALL);
    tiny_add(m, "output_norm.weight", 1, m->H, 0, TINY_NORM);
    if (!m->tied) tiny_add(m, "output.weight", 2, m->H, m->V, TINY_MAT);
    const int conv_dim = 2 * m->Hk * m->dk + m->Hv * m->dk;
    for (int il = 0; il < m->L; il++) {
        tiny_add_blk(m, il, "attn_norm.weight", 1, m->H, 0, TINY_NORM);
        tiny_add_blk(m, il, q35 ? "post_attention_norm.weight" : "ffn_norm.weight", 1, m->H, 0, TINY_NORM);
        tiny_add_blk(m, il, "ffn_gate.weight", 2, m->H, m->F, TINY_MAT);
        tiny_add_blk(m, il, "ffn_up.weight", 2, m->H, m->F, TINY_MAT);
        tiny_add_blk(m, il, "ffn_down.weight", 2, m->F, m->H, TINY_MAT);
        if (tiny_is_recurrent(m, il)) {
            tiny_add_blk(m, il, "attn_qkv.weight", 2, m->H, conv_dim, TINY_MAT);
            tiny_add_blk(m, il, "attn_gate.weight", 2, m->H, m->Hv * m->dk, TINY_MAT);
            tiny_add_blk(m, il, "ssm_beta.weight", 2, m->H, m->Hv, TINY_MAT);
            tiny_add_blk(m, il, "ssm_alpha.weight", 2, m->H, m->Hv, TINY_MAT);
            tiny_add_blk(m, il, "ssm_conv1d.weight", 2, m->K, conv_dim, TINY_CONV);
            tiny_add_blk(m, il, "ssm_dt.bias", 1, m->Hv, 0, TINY_SMALL);
            tiny_add_blk(m, il, "ssm_a", 1, m->Hv, 0, TINY_NEG);
            tiny_add_blk(m, il, "ssm_norm.weight", 1, m->dk, 0, TINY_NORM);
            tiny_add_blk(m, il, "ssm_out.weight", 2, m->Hv * m->dk, m->H, TINY_MAT);
        } else {
            tiny_add_blk(m, il, "attn_q.weight", 2, m->H, (int64_t)m->nh * m->hd * (q35 ? 2 : 1), TINY_MAT);
            tiny_add_blk(m, il, "attn_k.weight", 2, m->H, (int64_t)m->nkv * m->hd, TINY_MAT);
            tiny_add_blk(m, il, "attn_v.weight", 2, m->H, (int64_t)m->nkv * m->hd, TINY_MAT);
            tiny_add_blk(m, il, "attn_output.weight", 2, (int64_t)m->nh * m->hd, m->H, TINY_MAT);
            if (q35 || q3) {
                tiny_add_blk(m, il, "attn_q_norm.weight", 1, m->hd, 0, TINY_NORM);
                tiny_add_blk(m, il, "attn_k_norm.weight", 1, m->hd, 0, TINY_NORM);
            }
            if (strcmp(m->arch, "qwen2") == 0) {
                tiny_add_blk(m, il, "attn_q.bias", 1, (int64_t)m->nh * m->hd, 0, TINY_SMALL);
                tiny_add_blk(m, il, "attn_k.bias", 1, (int64_t)m->nkv * m->hd, 0, TINY_SMALL);
                tiny_add_blk(m, il, "attn_v.bias", 1, (int64_t)m->nkv * m->hd, 0, TINY_SMALL);
            }
        }
    }
}

// tiny_write: writes the GGUF; returns 0 or -1 with err filled.
static inline int tiny_write(tiny_model *m, const char *path, char *err, size_t errlen) {
    gguf_writer *w = gguf_writer_new();
    char key[128];
    const char *a = m->arch;
#define TK(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    gguf_set_str(w, "general.architecture", a);
    gguf_set_u32(w, TK("block_count"), (uint32_t)m->L);
    gguf_set_u32(w, TK("context_length"), (uint32_t)m->ctx);
    gguf_set_u32(w, TK("embedding_length"), (uint32_t)m->H);
    gguf_set_u32(w, TK("feed_forward_length"), (uint32_t)m->F);
    gguf_set_u32(w, TK("attention.head_count"), (uint32_t)m->nh);
    if (m->u32_keys)
        gguf_set_u32(w, TK("attention.head_count_kv"), (uint32_t)m->nkv);
    else
        gguf_set_i32(w, TK("attention.head_count_kv"), m->nkv); // i32 on purpose: the loader accepts it
    gguf_set_u32(w, TK("attention.key_length"), (uint32_t)m->hd);
    gguf_set_u32(w, TK("attention.value_length"), (uint32_t)m->hd);
    gguf_set_f32(w, TK("attention.layer_norm_rms_epsilon"), m->eps);
    gguf_set_f32(w, TK("rope.freq_base"), m->rope_base);
    if (m->u32_keys)
        gguf_set_u32(w, TK("rope.dimension_count"), (uint32_t)m->n_rot);
    else
        gguf_set_u64(w, TK("rope.dimension_count"), (uint64_t)m->n_rot); // u64 on purpose
    if (strcmp(a, "qwen35") == 0) {
        const int32_t sections[4] = {m->n_rot / 8, m->n_rot / 8, m->n_rot / 4 - 2 * (m->n_rot / 8), 0};
        gguf_set_arr(w, TK("rope.dimension_sections"), GGUF_TYPE_INT32, 4, sections);
        gguf_set_u32(w, TK("ssm.conv_kernel"), (uint32_t)m->K);
        gguf_set_u32(w, TK("ssm.state_size"), (uint32_t)m->dk);
        gguf_set_u32(w, TK("ssm.group_count"), (uint32_t)m->Hk);
        gguf_set_u32(w, TK("ssm.time_step_rank"), (uint32_t)m->Hv);
        gguf_set_u32(w, TK("ssm.inner_size"), (uint32_t)(m->Hv * m->dk));
        gguf_set_u32(w, TK("full_attention_interval"), (uint32_t)m->interval);
        if (m->pattern) { // overrides the interval rule
            bool rec[64];
            for (int il = 0; il < m->L; il++) rec[il] = m->pattern[il] == 'R';
            gguf_set_arr(w, TK("attention.recurrent_layers"), GGUF_TYPE_BOOL, (uint64_t)m->L, rec);
        }
    }
    if (m->u32_keys) {
        gguf_set_str(w, "tokenizer.ggml.model", "none");
        gguf_set_u32(w, TK("vocab_size"), (uint32_t)m->V);
    }
#undef TK
    for (int i = 0; i < m->n_t; i++) {
        tiny_tensor *t = &m->t[i];
        if (m->drop && strcmp(m->drop, t->name) == 0) continue;
        int64_t ne[2] = {t->ne0, t->ne1};
        if (m->shrink && strcmp(m->shrink, t->name) == 0) ne[1] = t->ne1 / 2;
        if (gguf_writer_add_tensor(w, t->name, t->n_dims, ne, t->type, (uint32_t)t->type, t->bytes, err, errlen) < 0) {
            gguf_writer_free(w);
            return -1;
        }
    }
    int rc = gguf_writer_write(w, path, NULL, NULL, err, errlen);
    gguf_writer_free(w);
    return rc;
}

static inline void tiny_free(tiny_model *m) {
    for (int i = 0; i < m->n_t; i++) {
        if (m->t[i].bytes != m->t[i].data) free(m->t[i].bytes);
        free(m->t[i].data);
    }
    m->n_t = 0;
}

#endif
