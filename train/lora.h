// train/lora.h — LoRA adapters: targets by name group, PEFT init, parameter/gradient storage,
// llama.cpp adapter GGUF write/read (docs/formats.md §7.1) and the fp32 merge W' = W + (α/r)·B·A.
#ifndef BONSAI_TRAIN_LORA_H
#define BONSAI_TRAIN_LORA_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "train/backward.h"
#include "base/rng.h"

// One bit per adaptable projection (GGUF name in the comment).
enum bn_lora_target {
    BN_LORA_Q = 1 << 0,        // attn_q       (HF q_proj)
    BN_LORA_K = 1 << 1,        // attn_k       (k_proj)
    BN_LORA_V = 1 << 2,        // attn_v       (v_proj)
    BN_LORA_O = 1 << 3,        // attn_output  (o_proj)
    BN_LORA_GATE = 1 << 4,     // ffn_gate     (gate_proj)
    BN_LORA_UP = 1 << 5,       // ffn_up       (up_proj)
    BN_LORA_DOWN = 1 << 6,     // ffn_down     (down_proj)
    BN_LORA_QKV = 1 << 7,      // attn_qkv     (linear_attn.in_proj_qkv)
    BN_LORA_Z = 1 << 8,        // attn_gate    (in_proj_z)
    BN_LORA_BETA = 1 << 9,     // ssm_beta     (in_proj_b)
    BN_LORA_ALPHA = 1 << 10,   // ssm_alpha    (in_proj_a)
    BN_LORA_SSM_OUT = 1 << 11, // ssm_out      (out_proj)
    BN_LORA_HEAD = 1 << 12,    // output       (lm_head)
    BN_LORA_N_TARGETS = 13,
};
#define BN_LORA_ATTN (BN_LORA_Q | BN_LORA_K | BN_LORA_V | BN_LORA_O)
#define BN_LORA_FFN (BN_LORA_GATE | BN_LORA_UP | BN_LORA_DOWN)
#define BN_LORA_GDN (BN_LORA_QKV | BN_LORA_Z | BN_LORA_BETA | BN_LORA_ALPHA | BN_LORA_SSM_OUT)

typedef struct {
    char name[96];        // base tensor name, e.g. "blk.3.attn_q.weight", "output.weight"
    int layer;            // -1 for the LM head
    int target;           // one enum bn_lora_target bit
    int64_t n_in, n_out;  // base weight {n_in, n_out}
    int64_t off_a, off_b; // offsets into params/grads: A {n_in, r}, B {r, n_out}
} bn_lora_tensor;

typedef struct {
    int r;
    float alpha;          // adapter.lora.alpha (0 = absent: scale 1, llama.cpp rule)
    float dropout;        // on the LoRA input (training only)
    char arch[32];        // general.architecture of the base
    int n_tensors, cap;
    bn_lora_tensor *t;
    int64_t n_params, param_cap;
    float *params;        // [n_params]: every A then B, in tensor order
    float *grads;         // [n_params]
    bool ste;             // trained through a quantizer: the model handed to train/graph.h already holds
                          // W_eff = deq(Q(W0 + scale·B·A)) for every adapted weight, so the forward skips the
                          // additive path and the backward is straight-through (∂A, ∂B as if W_eff = W0 + s·B·A)
} bn_lora;

// bn_lora_layer_weight: the weight of layer lw that LoRA target `target` (one bit) adapts, or NULL for another value.
const bn_weight *bn_lora_layer_weight(const bn_layer_weights *lw, int target);

// bn_lora_parse_targets: comma list of names or groups → bit mask; -1 (err) on an unknown name.
// Accepts short (q,k,v,o,gate,up,down,lm_head), HF (q_proj, in_proj_qkv, ...), GGUF (attn_q,
// ffn_gate, attn_gate = GDN z, ssm_out, output...) and groups attn, ffn|mlp, gdn, all.
int bn_lora_parse_targets(const char *list, char *err, size_t errlen);
// bn_lora_target_gguf: the GGUF base-name stem of one target bit ("attn_q", "output"); NULL if unknown.
const char *bn_lora_target_gguf(int target);

// bn_lora_new: empty adapter (no tensors yet); never NULL.
bn_lora *bn_lora_new(int r, float alpha, float dropout, const char *arch);
// bn_lora_free: frees the adapter (NULL is fine).
void bn_lora_free(bn_lora *l);
// bn_lora_add: appends a tensor pair (params zeroed); returns its index or -1 (err: duplicate/bad shape).
int bn_lora_add(bn_lora *l, const char *name, int layer, int target, int64_t n_in, int64_t n_out,
                char *err, size_t errlen);
// bn_lora_from_model: one pair per weight of the model matching mask (only where the weight exists,
// e.g. q/k/v/o only in attention layers; no LM-head pair for a tied head); NULL (err) if none matched.
bn_lora *bn_lora_from_model(const bn_model *m, unsigned mask, int r, float alpha, float dropout,
                            char *err, size_t errlen);
// bn_lora_init_peft: A ~ U(−1/√n_in, 1/√n_in) (kaiming-uniform a=√5), B = 0, from seed.
void bn_lora_init_peft(bn_lora *l, uint64_t seed);
// bn_lora_scale: alpha / r (1 when alpha == 0, llama.cpp's rule).
float bn_lora_scale(const bn_lora *l);
// bn_lora_find: index of the tensor adapting base weight `name`, or -1.
int bn_lora_find(const bn_lora *l, const char *name);
// bn_lora_get: index for (layer, target) or -1 (layer −1 with BN_LORA_HEAD for the head).
int bn_lora_get(const bn_lora *l, int layer, int target);
// bn_lora_view_of: A/B/dA/dB pointers and scale of tensor idx for backward.h.
bn_lora_view bn_lora_view_of(const bn_lora *l, int idx);
// bn_lora_zero_grad: grads = 0.
void bn_lora_zero_grad(bn_lora *l);
// bn_lora_dropout_mask: n multipliers, 0 with probability p else 1/(1−p) (all 1 when p == 0).
void bn_lora_dropout_mask(bn_rng *rng, float p, int64_t n, float *out);

// bn_lora_save_gguf: llama.cpp LoRA adapter (general.type adapter, adapter.type lora,
// adapter.lora.alpha, X.lora_a {n_in, r}, X.lora_b {r, n_out}, f32), atomically; 0 or -1.
int bn_lora_save_gguf(const bn_lora *l, const char *path, char *err, size_t errlen);
// bn_lora_load_gguf: reads such an adapter (f32 or f16 tensors); NULL with a clear message.
bn_lora *bn_lora_load_gguf(const char *path, char *err, size_t errlen);
// bn_lora_same_layout: true if both adapters have the same r and tensor names/shapes in order.
bool bn_lora_same_layout(const bn_lora *a, const bn_lora *b);

// bn_lora_merge_f32: W {n_in, n_out} (row o contiguous) += scale·B·A, in place.
void bn_lora_merge_f32(float *W, int64_t n_in, int64_t n_out, const float *A, const float *B, int r, float scale);
// bn_lora_merged_f32: out {n_in, n_out} = deq(W) + user_scale·(α/r)·B·A for tensor idx, W {n_in, n_out} of type
// w_type at w_data (the one fp32 merge: train/merge.c and the STE forward weights use it); 0, or -1 when w_type
// cannot be dequantized.
int bn_lora_merged_f32(const bn_lora *l, int idx, float user_scale, int w_type, const void *w_data, float *out);

#endif
