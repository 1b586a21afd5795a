// core/model.h — the model description (Config, Weights as views into the mmapped GGUF) and the
// per-sequence State, for `qwen35` (Gated DeltaNet + gated attention) and dense `qwen3`/`llama`.
// Facts: docs/model.md §2–4, §7. The forward is in core/forward.h.
#ifndef BONSAI_MODEL_H
#define BONSAI_MODEL_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include "gguf/gguf.h"

enum bn_arch { BN_ARCH_QWEN35 = 0, BN_ARCH_QWEN3 = 1, BN_ARCH_LLAMA = 2, BN_ARCH_QWEN2 = 3 };

// A weight: a view into the file with its type and shape (ne0 = inputs, ne1 = outputs).
typedef struct {
    const void *data;   // NULL if absent (optional tensors)
    int type;           // bn_type
    int64_t ne[4];
    const char *name;
} bn_weight;

typedef struct {
    int arch;              // enum bn_arch
    int n_embd;            // H
    int n_layer;
    int n_ff;              // F
    int n_head;            // nh (query heads)
    int n_head_kv;         // nkv
    int head_dim;          // hd (key_length == value_length)
    int n_rot;             // rotary dims (qwen35: 64 of 256; dense: head_dim)
    float rope_base;
    float norm_eps;
    int n_vocab;
    int n_ctx_train;
    // qwen35 Gated DeltaNet
    int full_attn_interval; // layer il is attention iff (il + 1) % interval == 0
    int ssm_conv_kernel;    // K = 4
    int ssm_d_state;        // dk = dv
    int ssm_n_group;        // Hk
    int ssm_dt_rank;        // Hv
    int ssm_d_inner;        // Hv * dv
    bool *is_recurrent;     // [n_layer]
    bool tied_output;       // no output.weight: LM head = token_embd
} bn_config;

typedef struct {
    bn_weight attn_norm;           // {H}
    bn_weight post_attention_norm; // {H}  (qwen3/llama: ffn_norm)
    bn_weight ffn_gate, ffn_up;    // {H, F}
    bn_weight ffn_down;            // {F, H}
    // gated attention (qwen35 attention layers) / plain attention (dense)
    bn_weight attn_q;              // qwen35: {H, 2*nh*hd} (per head: query then gate); dense: {H, nh*hd}
    bn_weight attn_k, attn_v;      // {H, nkv*hd}
    bn_weight attn_output;         // {nh*hd, H}
    bn_weight attn_q_norm, attn_k_norm; // {hd}
    bn_weight attn_q_bias, attn_k_bias, attn_v_bias; // qwen2 only
    // Gated DeltaNet (qwen35 recurrent layers)
    bn_weight attn_qkv;            // {H, 2*Hk*dk + Hv*dv}
    bn_weight attn_gate;           // {H, Hv*dv}  (z)
    bn_weight ssm_beta, ssm_alpha; // {H, Hv}
    bn_weight ssm_conv1d;          // {K, conv_dim}
    bn_weight ssm_dt;              // {Hv} (bias)
    bn_weight ssm_a;               // {Hv}
    bn_weight ssm_norm;            // {dv}
    bn_weight ssm_out;             // {Hv*dv, H}
} bn_layer_weights;

typedef struct {
    bn_weight token_embd;  // {H, V}
    bn_weight output_norm; // {H}
    bn_weight output;      // {H, V} (== token_embd view when tied)
    bn_layer_weights *layers;
} bn_weights;

typedef struct bn_model {
    bn_config cfg;
    bn_weights w;
    gguf_file *gguf;
    char *path;
    int ftype; // general.file_type or -1
} bn_model;

// Sizes derived from a config that every engine's state layout uses (floats per token or per layer).
typedef struct {
    size_t kv_dim;      // n_head_kv * hd: K or V floats per token per attention layer
    size_t q_rows;      // attn_q outputs: nh*hd, doubled (query + gate) for qwen35
    size_t conv_dim;    // GDN conv channels: 2*Hk*dk + Hv*dv
    size_t value_dim;   // Hv*dv
    size_t conv_floats; // conv window per GDN layer: (K-1) * conv_dim
    size_t ssm_floats;  // S per GDN layer: Hv * dk * dv
} bn_dims;
// bn_config_dims: the sizes above for config c; returns them.
bn_dims bn_config_dims(const bn_config *c);

// bn_model_load: opens and checks a GGUF (every expected tensor present with the right shape and
// a supported type); returns NULL with a message naming the first wrong tensor/key.
bn_model *bn_model_load(const char *path, char *err, size_t errlen);
// bn_model_from_gguf: same on an already open file (ownership passes to the model).
bn_model *bn_model_from_gguf(gguf_file *g, char *err, size_t errlen);
void bn_model_free(bn_model *m);
// bn_model_arch_name: the model's general.architecture ("qwen35", "qwen3", "llama", "qwen2").
const char *bn_model_arch_name(const bn_model *m);
// bn_model_n_params: number of weight elements.
int64_t bn_model_n_params(const bn_model *m);
// bn_model_describe: "<arch> <size label> <ftype name>" like llama.cpp; returns buf.
const char *bn_model_describe(const bn_model *m, char *buf, size_t n);

#endif
