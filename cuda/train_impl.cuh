// cuda/train_impl.cuh — internal to the trainer's device graph, shared by its two files: cuda/train_layer.cu (one
// layer: the linears with their LoRA pairs, the Gated DeltaNet and attention mixers, the FFN block, forward and
// backward) and cuda/train_graph.cu (the trainer itself, its buffers, the whole model, the head and the backend of
// train/device.h). The trainer, a layer's buffers, a pass's context and the functions the two files share (namespace
// bn_train). Include from those two only.
#ifndef BONSAI_CUDA_TRAIN_IMPL_CUH
#define BONSAI_CUDA_TRAIN_IMPL_CUH
#include "cuda/common.cuh"
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <initializer_list>
extern "C" {
#include "core/model.h"
#include "train/lora.h"
#include "train/device.h"
#include "base/util.h"
// from quant/quant.h, which cannot be included next to common.cuh (both define bn_half)
size_t bn_row_size(int type, int64_t ne0);
const char *bn_type_name(int type);
}
#include "cuda/mm_impl.cuh" // BN_CU_F32, BN_CU_F16: quant/quant.h's type ids
#include "cuda/cuda_backend.h"
#include "cuda/cuda_fwd_ops.h"
#include "cuda/cuda_bwd_ops.h"
#include "cuda/cuda_bwd_seq.h"
#include "cuda/cuda_train_graph.h"
#include "cuda/train_prof.cuh"

// train_layer_bufs: one layer's intermediates (forward) and gradients (backward) on the device, for up to T_cap tokens
// (the FFN block's for one span of at most ffn_chunk tokens); names as in train/graph.c's acts_t and its backward's
// locals. Buffers whose lives do not overlap share memory: h is written over mo (the backward never reads mo), dn over
// h (the mixer's backward runs after the FFN block's, the last to read h), the Gated DeltaNet's conv output over
// dconv and its dq, dk over d_o, dy, attention's qg over dqg (each staging buffer is dead before its partner is
// written).
struct train_layer_bufs {
    float *n, *mo, *h, *x_in;           // norm, mixer out, residual, layer input (with bf16 kept inputs)
    float *mm, *ga, *up, *act;          // the FFN block's, one span
    float *dn, *dx, *dx_prev;           // gradients: the norm's, the residual's across layers
    float *dmm, *dact, *dga, *dup;      // the FFN block's gradients, one span
    float *mix, *z, *b, *a, *beta, *g, *conv, *q, *k, *v, *qn, *kn, *o, *y; // Gated DeltaNet
    float *dy, *d_o, *dz, *dqn, *dkn, *dvv, *dq, *dk, *dqs, *dg, *dbeta, *db, *da, *dconv, *dmix;
    float *qg, *kr, *vr, *qr, *gate, *qa, *ka, *att, *og;          // attention
    float *dog, *datt, *dgate, *dqa, *dka, *dvr, *dqrot, *dkrot, *dqr, *dkr, *dqg;
    float *ax[BN_LORA_N_TARGETS];                                   // {r, T}: A·x of each adapted projection
};
typedef train_layer_bufs layer_bufs;

struct bn_cuda_trainer {
    const bn_model *m;
    int device;        // the CUDA device it runs on
    bool gemm_bf16;    // the layers' base-weight products with bf16 inputs, fp32 accumulation (else fp32)
    bool kept_bf16;    // a graph keeps its layer inputs as bf16 (with bf16 GEMMs; else fp32)
    int ffn_chunk;     // tokens per FFN pass
    int per;           // bn_weight entries of a bn_layer_weights
    bool ste;          // the adapter trains through a quantizer: m's adapted weights hold W_eff, the forward skips
                       // the LoRA pairs, the backward is straight-through; load_params uploads W_eff again
    void **layer_w;    // [n_layer·per]: device copy of each layer weight in its stored type (NULL: absent)
    void *embd, *out_norm, *out; // token_embd, output_norm, output (== embd when tied)
    // the adapter: bn_lora's layout, parameters and gradients
    int r;
    float scale;
    int64_t n_params;
    int n_tensors;
    int *index;        // [(n_layer + 1)·BN_LORA_N_TARGETS]: tensor of (layer, target bit), layer n_layer = the head
    int64_t *off_a, *off_b; // [n_tensors]
    float *params, *grads;  // device [n_params] (NULL without an adapter)
    void *blas;
    cudaStream_t stream;
    // per-length scratch (grown to the longest sequence seen)
    int T_cap;
    float *arena, *ws;
    size_t ws_floats;
    layer_bufs b;
    float *head_x, *head_dx, *logits, *dlogits; // {H}, {H}, {V}, {V}
    train_prof *prof;  // the device time by part (NULL until set_profile)
};

namespace bn_train {

// run: what one forward or backward pass needs besides its graph (train/graph.c's ctx_t).
struct run {
    bn_cuda_trainer *t;
    bool adapter; // the adapter is applied
    int T;
    char *err;
    size_t errlen;
};

// gdn_dims: dk (= dv), Hk, Hv and the conv channels C of the config.
struct gdn_dims {
    int dk, Hk, Hv, C, K;
};
// attn_dims: head shapes of the config; gated: qwen35's attention (per head: query then gate in attn_q's rows).
struct attn_dims {
    int hd, nh, nkv, kv_dim, nq, q_stride, mode;
    bool gated;
};

// ---- device memory and weights (cuda/train_graph.cu) -----------------------------------------------------------
// zero: p[0..n) = 0 on the trainer's stream; 0 or -1 (err).
int zero(const run *r, float *p, size_t n);
// copy: dst[0..n) = src[0..n), device to device on the trainer's stream; 0 or -1 (err).
int copy(const run *r, float *dst, const float *src, size_t n);
// dev_weight: the device copy of weight w of the trainer's model.
const void *dev_weight(const bn_cuda_trainer *t, const bn_weight *w);
// F: the device fp32 data of a vector weight (checked F32 at open).
const float *F(const run *r, const bn_weight *w);

// ---- one layer (cuda/train_layer.cu) --------------------------------------------------------------------------
// mark: part `part` (train/device.h bn_train_part) starts here when the trainer times its parts; 0 or -1 (err).
int mark(const run *r, int part);
// gemm16: whether the base product of a linear of layer `layer` (−1: the LM head) takes bf16 inputs.
bool gemm16(const bn_cuda_trainer *t, int layer);
// target_slot: the bit index of one LoRA target.
int target_slot(int target);
// is_gdn: layer il is a Gated DeltaNet layer.
bool is_gdn(const bn_config *cf, int il);
// gdn_dims_of, attn_dims_of: the mixers' shapes of the config.
gdn_dims gdn_dims_of(const bn_config *cf);
attn_dims attn_dims_of(const bn_config *cf);
// lin_fwd: y {n_out, T} = W x (+ bias) (+ the adapter's pair of (layer, target)), A·x kept in ax when given; 0 or -1.
int lin_fwd(const run *r, int layer, int target, const bn_weight *W, const bn_weight *bias, const float *x, float *y,
            float *ax);
// lin_bwd: dx += Wᵀdy (+ the LoRA part), the pair's gradients into the device's (dx NULL: only those); 0 or -1.
int lin_bwd(const run *r, int layer, int target, const bn_weight *W, const float *x, const float *ax, const float *dy,
            float *dx);
// layer_mixer_fwd: h = x_in + the mixer of RMSNorm(x_in), its intermediates in the trainer's buffers; 0 or -1.
int layer_mixer_fwd(const run *r, int il, const float *x_in);
// layer_fwd: x_out {H, T} = layer il of x_in, its intermediates in the trainer's buffers; 0 or -1.
int layer_fwd(const run *r, int il, const float *x_in, float *x_out);
// layer_bwd: dx_in {H, T} (overwritten) from dx_out, after layer_mixer_fwd of x_in (dx_out is used up); 0 or -1.
int layer_bwd(const run *r, int il, const float *x_in, float *dx_out, float *dx_in);

} // namespace bn_train

#endif
