// cuda/train_graph.cu — the training forward and backward of train/graph.c in LoRA mode (last-position logits, adapter
// gradients) on the device, composed of the trainer's device ops (cuda/cuda_fwd_ops.h, cuda/cuda_bwd_ops.h,
// cuda/cuda_bwd_seq.h) function by function as graph.c composes the CPU ones: the input of every layer is kept (as
// bf16 with bf16 GEMMs), each layer is recomputed from it during the backward, the FFN block runs over spans of at
// most ffn_chunk tokens, layer 0 skips the mixer's input gradient and the LM head runs on the last position only.
// Weights stay in their stored types; the linear ops make a weight of another type than F32 fp32 (bit-identically to
// the CPU), or with bf16 GEMMs every weight bf16, a chunk of rows at a time in their workspace. Registered as the
// bn_train_device backend of train/device.h from a constructor, as cuda/engine.cu registers its engine device.
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

namespace {

// run: what one forward or backward pass needs besides its graph (train/graph.c's ctx_t).
struct run {
    bn_cuda_trainer *t;
    bool adapter; // the adapter is applied
    int T;
    char *err;
    size_t errlen;
};

} // namespace

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

struct bn_cuda_train_graph {
    bn_cuda_trainer *t;
    bool adapter;
    int T;
    int *tokens; // device {T}
    float *x;    // device: the input {H, T} of each layer (unless x16 holds them), then the final residual of the last
                 // position {H} (all: of every position {H, T})
    uint16_t *x16; // device, with kept_bf16: the input {H, T} of each layer as bf16 (NULL: they are in x)
    bool all;    // every position's logits (the tether's forward), not only the last one's
    float *hx;   // all: device {H, T}, the final norm's output (the head's input)
    float *zbuf; // all: device {V, T}, the logits, then their gradients
    float *hdx;  // all: device {H, T}, the gradient of the head's input
};

namespace {

// ---- device memory -------------------------------------------------------------------------------------------------
// dev_alloc: n bytes of device memory into *p; 0 or -1 (err).
int dev_alloc(void **p, size_t n, char *err, size_t errlen) {
    *p = NULL;
    BN_CUDA_TRY(cudaMalloc(p, n ? n : 1), err, errlen);
    return 0;
}

// dev_free: frees device memory (NULL is fine).
void dev_free(void *p) {
    if (p) cudaFree(p);
}

// zero: p[0..n) = 0 on the trainer's stream.
int zero(const run *r, float *p, size_t n) {
    BN_CUDA_TRY(cudaMemsetAsync(p, 0, n * sizeof(float), r->t->stream), r->err, r->errlen);
    return 0;
}

// copy: dst[0..n) = src[0..n), device to device on the trainer's stream.
int copy(const run *r, float *dst, const float *src, size_t n) {
    BN_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, r->t->stream), r->err,
                r->errlen);
    return 0;
}

// weight_rows: rows of a weight (ne of absent dimensions may be 0 or 1).
int64_t weight_rows(const bn_weight *w) {
    int64_t n = 1;
    for (int d = 1; d < 4; d++) n *= w->ne[d] > 0 ? w->ne[d] : 1;
    return n;
}

// weight_bytes: stored bytes of a weight.
size_t weight_bytes(const bn_weight *w) { return bn_row_size(w->type, w->ne[0]) * (size_t)weight_rows(w); }

// upload_weight: *dev = a device copy of w's stored bytes; 0 or -1 (err).
int upload_weight(const bn_weight *w, void **dev, char *err, size_t errlen) {
    const size_t n = weight_bytes(w);
    if (dev_alloc(dev, n, err, errlen)) return -1;
    BN_CUDA_TRY(cudaMemcpy(*dev, w->data, n, cudaMemcpyHostToDevice), err, errlen);
    return 0;
}

// dev_weight: the device copy of weight w of the trainer's model.
const void *dev_weight(const bn_cuda_trainer *t, const bn_weight *w) {
    const bn_weights *mw = &t->m->w;
    if (w == &mw->token_embd) return t->embd;
    if (w == &mw->output_norm) return t->out_norm;
    if (w == &mw->output) return t->out;
    return t->layer_w[w - (const bn_weight *)mw->layers];
}

// F: the device fp32 data of a vector weight (checked F32 at open).
const float *F(const run *r, const bn_weight *w) { return (const float *)dev_weight(r->t, w); }


// ---- linears with LoRA --------------------------------------------------------------------------------------------
// lora_of: the device LoRA pair of (layer, target) (layer −1: the head) when the pass applies the adapter.
bool lora_of(const run *r, int layer, int target, bn_cuda_lora *out) {
    const bn_cuda_trainer *t = r->t;
    if (!r->adapter || !t->params) return false;
    const int il = layer < 0 ? t->m->cfg.n_layer : layer;
    int slot = 0;
    while (slot < BN_LORA_N_TARGETS && target != 1 << slot) slot++;
    const int idx = t->index[il * BN_LORA_N_TARGETS + slot];
    if (idx < 0) return false;
    *out = bn_cuda_lora{t->r, t->scale, t->params + t->off_a[idx], t->params + t->off_b[idx], t->grads + t->off_a[idx],
                        t->grads + t->off_b[idx]};
    return true;
}

// target_slot: the bit index of one target.
int target_slot(int target) {
    for (int b = 0; b < BN_LORA_N_TARGETS; b++)
        if (target == 1 << b) return b;
    return 0;
}

// mark: part `part` starts here when the trainer times its parts; 0 or -1 (err).
int mark(const run *r, int part) {
    return r->t->prof ? prof_mark(r->t->prof, part, r->t->stream, r->err, r->errlen) : 0;
}

// timed: rc of an op run as part `part`, between marks (`part` before it, BN_TRAIN_PART_OTHER after): 0 or -1.
template <class Op> int timed(const run *r, int part, Op op) {
    return mark(r, part) || op() || mark(r, BN_TRAIN_PART_OTHER) ? -1 : 0;
}

// gemm16: whether the base product of a linear of layer `layer` (−1: the LM head) takes bf16 inputs. The head stays
// fp32: it runs on one position (a mat-vec, no tensor-core gain) and gives the logits the loss reads.
bool gemm16(const bn_cuda_trainer *t, int layer) { return t->gemm_bf16 && layer >= 0; }

// lin_fwd_op: y {n_out, T} = W x (+ bias) (+ the adapter's pair of (layer, target), A·x kept in ax when given; none
// through a quantizer: W already is W_eff).
int lin_fwd_op(const run *r, int layer, int target, const bn_weight *W, const bn_weight *bias, const float *x,
               float *y, float *ax) {
    bn_cuda_lora lo;
    const bool has = !r->t->ste && lora_of(r, layer, target, &lo);
    if (bn_cuda_linear_lora_fwd(r->t->blas, gemm16(r->t, layer), W->type, dev_weight(r->t, W), W->ne[0], W->ne[1],
                                has ? &lo : NULL, x, r->T, NULL, y, has ? ax : NULL, r->t->ws, r->t->stream, r->err,
                                r->errlen))
        return -1;
    if (bias && bias->data) return bn_cuda_add_row_bias(y, F(r, bias), (int)W->ne[1], r->T, r->t->stream, r->err,
                                                        r->errlen);
    return 0;
}
// lin_fwd: lin_fwd_op, timed as a linear.
int lin_fwd(const run *r, int layer, int target, const bn_weight *W, const bn_weight *bias, const float *x, float *y,
            float *ax) {
    return timed(r, BN_TRAIN_PART_LINEAR, [&] { return lin_fwd_op(r, layer, target, W, bias, x, y, ax); });
}

// lin_ax: ax {r, T} = A·x of the adapter's pair of (layer, target) (nothing without one, or through a quantizer:
// lin_bwd recomputes it there).
int lin_ax(const run *r, int layer, int target, int64_t n_in, const float *x, float *ax) {
    bn_cuda_lora lo;
    if (r->t->ste || !lora_of(r, layer, target, &lo)) return 0;
    return timed(r, BN_TRAIN_PART_LINEAR, [&] {
        return bn_cuda_lora_ax(r->t->blas, &lo, n_in, x, r->T, ax, r->t->stream, r->err, r->errlen);
    });
}

// lin_bwd_op: dx += Wᵀdy (+ the LoRA part with the forward's A·x); the pair's gradients into the device's (dx NULL:
// only those). Through a quantizer (straight-through): dx += W_effᵀdy alone, and the pair's gradients as if
// W_eff = W0 + s·B·A, A·x recomputed (graph.c lin_bwd).
int lin_bwd_op(const run *r, int layer, int target, const bn_weight *W, const float *x, const float *ax,
               const float *dy, float *dx) {
    bn_cuda_lora lo;
    const bool has = lora_of(r, layer, target, &lo);
    bn_cuda_trainer *t = r->t;
    const void *w = dev_weight(t, W);
    const bool bf16 = gemm16(t, layer);
    if (has && t->ste)
        return bn_cuda_linear_lora_bwd(t->blas, bf16, W->type, w, W->ne[0], W->ne[1], NULL, x, r->T, NULL, NULL, dy,
                                       dx, t->ws, t->stream, r->err, r->errlen) ||
                       bn_cuda_linear_lora_bwd(t->blas, bf16, W->type, w, W->ne[0], W->ne[1], &lo, x, r->T, NULL, NULL,
                                               dy, NULL, t->ws, t->stream, r->err, r->errlen)
                   ? -1 : 0;
    return bn_cuda_linear_lora_bwd(t->blas, bf16, W->type, w, W->ne[0], W->ne[1], has ? &lo : NULL, x, r->T, NULL,
                                   has ? ax : NULL, dy, dx, t->ws, t->stream, r->err, r->errlen);
}
// lin_bwd: lin_bwd_op, timed as a linear.
int lin_bwd(const run *r, int layer, int target, const bn_weight *W, const float *x, const float *ax, const float *dy,
            float *dx) {
    return timed(r, BN_TRAIN_PART_LINEAR, [&] { return lin_bwd_op(r, layer, target, W, x, ax, dy, dx); });
}

// ---- Gated DeltaNet mixer -----------------------------------------------------------------------------------------
// gdn_dims: dk (= dv), Hk, Hv and the conv channels C of the config.
struct gdn_dims {
    int dk, Hk, Hv, C, K;
};
gdn_dims gdn_dims_of(const bn_config *cf) {
    const int dk = cf->ssm_d_state, Hk = cf->ssm_n_group, Hv = cf->ssm_dt_rank;
    return gdn_dims{dk, Hk, Hv, 2 * Hk * dk + Hv * dk, cf->ssm_conv_kernel};
}

// gdn_project: the four input projections of n, the gates beta and g, the conv and its q/k/v split.
int gdn_project(const run *r, int il, layer_bufs *a) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const gdn_dims d = gdn_dims_of(cf);
    const int T = r->T, Qd = d.Hk * d.dk, Vd = d.Hv * d.dk;
    cudaStream_t s = r->t->stream;
    float **ax = a->ax;
    if (lin_fwd(r, il, BN_LORA_QKV, &lw->attn_qkv, NULL, a->n, a->mix, ax[target_slot(BN_LORA_QKV)]) ||
        lin_fwd(r, il, BN_LORA_Z, &lw->attn_gate, NULL, a->n, a->z, ax[target_slot(BN_LORA_Z)]) ||
        lin_fwd(r, il, BN_LORA_BETA, &lw->ssm_beta, NULL, a->n, a->b, ax[target_slot(BN_LORA_BETA)]) ||
        lin_fwd(r, il, BN_LORA_ALPHA, &lw->ssm_alpha, NULL, a->n, a->a, ax[target_slot(BN_LORA_ALPHA)]))
        return -1;
    return bn_cuda_gdn_gates_fwd(a->b, a->a, F(r, &lw->ssm_dt), F(r, &lw->ssm_a), d.Hv, T, a->beta, a->g, s, r->err,
                                 r->errlen) ||
                   bn_cuda_conv1d_silu_fwd(a->mix, NULL, F(r, &lw->ssm_conv1d), d.C, d.K, T, a->conv, NULL, s, r->err,
                                           r->errlen) ||
                   bn_cuda_copy_cols(a->conv, d.C, 0, a->q, Qd, 0, Qd, T, s, r->err, r->errlen) ||
                   bn_cuda_copy_cols(a->conv, d.C, Qd, a->k, Qd, 0, Qd, T, s, r->err, r->errlen) ||
                   bn_cuda_copy_cols(a->conv, d.C, 2 * Qd, a->v, Vd, 0, Vd, T, s, r->err, r->errlen)
               ? -1 : 0;
}

// gdn_fwd: mo = the Gated DeltaNet mixer of n (graph.c gdn_fwd).
int gdn_fwd(const run *r, int il, layer_bufs *a) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const gdn_dims d = gdn_dims_of(cf);
    const int T = r->T;
    cudaStream_t s = r->t->stream;
    if (gdn_project(r, il, a) ||
        bn_cuda_l2norm_fwd(a->q, d.dk, T * d.Hk, cf->norm_eps, 1.0f / sqrtf((float)d.dk), a->qn, s, r->err,
                           r->errlen) ||
        bn_cuda_l2norm_fwd(a->k, d.dk, T * d.Hk, cf->norm_eps, 1.0f, a->kn, s, r->err, r->errlen) ||
        mark(r, BN_TRAIN_PART_GDN) ||
        bn_cuda_gdn_fwd(T, d.Hk, d.Hv, d.dk, d.dk, a->qn, a->kn, a->v, a->g, a->beta, NULL, a->o, NULL, s, r->err,
                        r->errlen) ||
        mark(r, BN_TRAIN_PART_OTHER) ||
        bn_cuda_gated_rmsnorm_fwd(a->o, a->z, F(r, &lw->ssm_norm), d.dk, T * d.Hv, cf->norm_eps, a->y, s, r->err,
                                  r->errlen))
        return -1;
    return lin_fwd(r, il, BN_LORA_SSM_OUT, &lw->ssm_out, NULL, a->y, a->mo, a->ax[target_slot(BN_LORA_SSM_OUT)]);
}

// gdn_zero_grads: zeroes the gradients gdn_bwd adds into (dq and dk, in d_o's and dy's memory, when those are read).
int gdn_zero_grads(const run *r, layer_bufs *a) {
    const gdn_dims d = gdn_dims_of(&r->t->m->cfg);
    const size_t T = (size_t)r->T, Qd = (size_t)d.Hk * d.dk * T, Vd = (size_t)d.Hv * d.dk * T, Hv = (size_t)d.Hv * T;
    return zero(r, a->dy, Vd) || zero(r, a->d_o, Vd) || zero(r, a->dz, Vd) || zero(r, a->dqn, Qd) ||
                   zero(r, a->dkn, Qd) || zero(r, a->dvv, Vd) || zero(r, a->dqs, Qd) || zero(r, a->dg, Hv) ||
                   zero(r, a->dbeta, Hv) || zero(r, a->db, Hv) || zero(r, a->da, Hv) ||
                   zero(r, a->dmix, (size_t)d.C * T)
               ? -1 : 0;
}

// gdn_bwd_core: from dmo through ssm_out, the output norm, the recurrence and the q/k norms to dconv.
int gdn_bwd_core(const run *r, int il, layer_bufs *a, const float *dmo) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const gdn_dims d = gdn_dims_of(cf);
    const int T = r->T, Qd = d.Hk * d.dk, Vd = d.Hv * d.dk;
    cudaStream_t s = r->t->stream;
    char *e = r->err;
    const size_t el = r->errlen;
    return lin_bwd(r, il, BN_LORA_SSM_OUT, &lw->ssm_out, a->y, a->ax[target_slot(BN_LORA_SSM_OUT)], dmo, a->dy) ||
                   bn_cuda_gated_rmsnorm_bwd(a->o, a->z, F(r, &lw->ssm_norm), d.dk, T * d.Hv, cf->norm_eps, a->dy,
                                             a->d_o, a->dz, s, e, el) ||
                   mark(r, BN_TRAIN_PART_GDN) ||
                   bn_cuda_gdn_bwd(T, d.Hk, d.Hv, d.dk, d.dk, a->qn, a->kn, a->v, a->g, a->beta, NULL, a->d_o, NULL,
                                   bn_train_gdn_ckpt(T),
                                   a->dqn, a->dkn, a->dvv, a->dg, a->dbeta, NULL, r->t->ws, s, e, el) ||
                   mark(r, BN_TRAIN_PART_OTHER) ||
                   bn_cuda_scale_bwd(1.0f / sqrtf((float)d.dk), (int64_t)Qd * T, a->dqn, a->dqs, s, e, el) ||
                   zero(r, a->dq, (size_t)Qd * T) || zero(r, a->dk, (size_t)Qd * T) ||
                   bn_cuda_l2norm_bwd(a->q, d.dk, T * d.Hk, cf->norm_eps, a->dqs, a->dq, s, e, el) ||
                   bn_cuda_l2norm_bwd(a->k, d.dk, T * d.Hk, cf->norm_eps, a->dkn, a->dk, s, e, el) ||
                   bn_cuda_copy_cols(a->dq, Qd, 0, a->dconv, d.C, 0, Qd, T, s, e, el) ||
                   bn_cuda_copy_cols(a->dk, Qd, 0, a->dconv, d.C, Qd, Qd, T, s, e, el) ||
                   bn_cuda_copy_cols(a->dvv, Vd, 0, a->dconv, d.C, 2 * Qd, Vd, T, s, e, el)
               ? -1 : 0;
}

// gdn_bwd: dn += ∂L/∂n from dmo (dn NULL: only the LoRA gradients; graph.c gdn_bwd).
int gdn_bwd(const run *r, int il, layer_bufs *a, const float *dmo, float *dn) {
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const gdn_dims d = gdn_dims_of(&r->t->m->cfg);
    const int T = r->T;
    cudaStream_t s = r->t->stream;
    float **ax = a->ax;
    if (gdn_zero_grads(r, a) || gdn_bwd_core(r, il, a, dmo) ||
        bn_cuda_conv1d_silu_bwd(a->mix, NULL, F(r, &lw->ssm_conv1d), d.C, d.K, T, a->dconv, a->dmix, NULL, s, r->err,
                                r->errlen) ||
        bn_cuda_sigmoid_bwd(a->beta, (int64_t)d.Hv * T, a->dbeta, a->db, s, r->err, r->errlen) ||
        bn_cuda_gdn_gate_bwd(a->a, F(r, &lw->ssm_dt), F(r, &lw->ssm_a), d.Hv, T, a->dg, a->da, s, r->err, r->errlen))
        return -1;
    return lin_bwd(r, il, BN_LORA_QKV, &lw->attn_qkv, a->n, ax[target_slot(BN_LORA_QKV)], a->dmix, dn) ||
                   lin_bwd(r, il, BN_LORA_Z, &lw->attn_gate, a->n, ax[target_slot(BN_LORA_Z)], a->dz, dn) ||
                   lin_bwd(r, il, BN_LORA_BETA, &lw->ssm_beta, a->n, ax[target_slot(BN_LORA_BETA)], a->db, dn) ||
                   lin_bwd(r, il, BN_LORA_ALPHA, &lw->ssm_alpha, a->n, ax[target_slot(BN_LORA_ALPHA)], a->da, dn)
               ? -1 : 0;
}

// ---- attention mixer ----------------------------------------------------------------------------------------------
// attn_dims: head shapes of the config; gated: qwen35's attention (per head: query then gate in attn_q's rows).
struct attn_dims {
    int hd, nh, nkv, kv_dim, nq, q_stride, mode;
    bool gated;
};
attn_dims attn_dims_of(const bn_config *cf) {
    const bool gated = cf->arch == BN_ARCH_QWEN35;
    const int hd = cf->head_dim, nh = cf->n_head, nkv = cf->n_head_kv;
    return attn_dims{hd, nh, nkv, nkv * hd, nh * hd, nh * hd * (gated ? 2 : 1),
                     cf->arch == BN_ARCH_LLAMA ? BN_CUDA_ROPE_NORM : BN_CUDA_ROPE_NEOX, gated};
}

// attn_project: q (and gate), k, v of n, normed (q/k norms when present) and rotated into qa, ka.
int attn_project(const run *r, int il, layer_bufs *a) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const attn_dims d = attn_dims_of(cf);
    const int T = r->T;
    cudaStream_t s = r->t->stream;
    char *e = r->err;
    const size_t el = r->errlen;
    float **ax = a->ax;
    if (lin_fwd(r, il, BN_LORA_Q, &lw->attn_q, &lw->attn_q_bias, a->n, a->qg, ax[target_slot(BN_LORA_Q)]) ||
        lin_fwd(r, il, BN_LORA_K, &lw->attn_k, &lw->attn_k_bias, a->n, a->kr, ax[target_slot(BN_LORA_K)]) ||
        lin_fwd(r, il, BN_LORA_V, &lw->attn_v, &lw->attn_v_bias, a->n, a->vr, ax[target_slot(BN_LORA_V)]))
        return -1;
    const int rows_q = T * d.nh, rows_k = T * d.nkv;
    if (d.gated ? bn_cuda_copy_cols(a->qg, 2 * d.hd, 0, a->qr, d.hd, 0, d.hd, rows_q, s, e, el) ||
                      bn_cuda_copy_cols(a->qg, 2 * d.hd, d.hd, a->gate, d.hd, 0, d.hd, rows_q, s, e, el)
                : copy(r, a->qr, a->qg, (size_t)d.nq * T))
        return -1;
    if (lw->attn_q_norm.data ? bn_cuda_rmsnorm_fwd(a->qr, F(r, &lw->attn_q_norm), d.hd, rows_q, cf->norm_eps, a->qa, s,
                                                   e, el)
                             : copy(r, a->qa, a->qr, (size_t)d.nq * T))
        return -1;
    if (lw->attn_k_norm.data ? bn_cuda_rmsnorm_fwd(a->kr, F(r, &lw->attn_k_norm), d.hd, rows_k, cf->norm_eps, a->ka, s,
                                                   e, el)
                             : copy(r, a->ka, a->kr, (size_t)d.kv_dim * T))
        return -1;
    return bn_cuda_rope_fwd(a->qa, d.hd, d.nh, T, cf->n_rot, 0, cf->rope_base, d.mode, s, e, el) ||
                   bn_cuda_rope_fwd(a->ka, d.hd, d.nkv, T, cf->n_rot, 0, cf->rope_base, d.mode, s, e, el)
               ? -1 : 0;
}

// attn_fwd: mo = the attention mixer of n (graph.c attn_fwd).
int attn_fwd(const run *r, int il, layer_bufs *a) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const attn_dims d = attn_dims_of(cf);
    const int T = r->T;
    cudaStream_t s = r->t->stream;
    if (attn_project(r, il, a) ||
        mark(r, BN_TRAIN_PART_ATTN) ||
        bn_cuda_attn_fwd(r->t->blas, gemm16(r->t, il), a->qa, a->ka, a->vr, T, d.hd, d.nh, d.nkv,
                         1.0f / sqrtf((float)d.hd), a->att, r->t->ws, s, r->err, r->errlen) ||
        mark(r, BN_TRAIN_PART_OTHER) ||
        (d.gated ? bn_cuda_sigmoid_gate_fwd(a->att, a->gate, (int64_t)d.nq * T, a->og, s, r->err, r->errlen)
                 : copy(r, a->og, a->att, (size_t)d.nq * T)))
        return -1;
    return lin_fwd(r, il, BN_LORA_O, &lw->attn_output, NULL, a->og, a->mo, a->ax[target_slot(BN_LORA_O)]);
}

// attn_zero_grads: zeroes the gradients attn_bwd adds into.
int attn_zero_grads(const run *r, layer_bufs *a) {
    const attn_dims d = attn_dims_of(&r->t->m->cfg);
    const size_t nq = (size_t)d.nq * r->T, nk = (size_t)d.kv_dim * r->T;
    return zero(r, a->dog, nq) || zero(r, a->datt, nq) || zero(r, a->dgate, nq) || zero(r, a->dqa, nq) ||
                   zero(r, a->dka, nk) || zero(r, a->dvr, nk) || zero(r, a->dqrot, nq) || zero(r, a->dkrot, nk) ||
                   zero(r, a->dqr, nq) || zero(r, a->dkr, nk)
               ? -1 : 0;
}

// attn_bwd_qk: from dqa, dka back through RoPE and the q/k norms to dqr, dkr, then dqg (query and gate rows).
int attn_bwd_qk(const run *r, int il, layer_bufs *a) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const attn_dims d = attn_dims_of(cf);
    const int T = r->T, rows_q = T * d.nh, rows_k = T * d.nkv;
    cudaStream_t s = r->t->stream;
    char *e = r->err;
    const size_t el = r->errlen;
    if (bn_cuda_rope_bwd(a->dqa, d.hd, d.nh, T, cf->n_rot, 0, cf->rope_base, d.mode, a->dqrot, s, e, el) ||
        bn_cuda_rope_bwd(a->dka, d.hd, d.nkv, T, cf->n_rot, 0, cf->rope_base, d.mode, a->dkrot, s, e, el))
        return -1;
    if (lw->attn_q_norm.data ? bn_cuda_rmsnorm_bwd(a->qr, F(r, &lw->attn_q_norm), d.hd, rows_q, cf->norm_eps, a->dqrot,
                                                   a->dqr, s, e, el)
                             : copy(r, a->dqr, a->dqrot, (size_t)d.nq * T))
        return -1;
    if (lw->attn_k_norm.data ? bn_cuda_rmsnorm_bwd(a->kr, F(r, &lw->attn_k_norm), d.hd, rows_k, cf->norm_eps, a->dkrot,
                                                   a->dkr, s, e, el)
                             : copy(r, a->dkr, a->dkrot, (size_t)d.kv_dim * T))
        return -1;
    return d.gated ? bn_cuda_copy_cols(a->dqr, d.hd, 0, a->dqg, 2 * d.hd, 0, d.hd, rows_q, s, e, el) ||
                             bn_cuda_copy_cols(a->dgate, d.hd, 0, a->dqg, 2 * d.hd, d.hd, d.hd, rows_q, s, e, el)
                         ? -1 : 0
                   : copy(r, a->dqg, a->dqr, (size_t)d.nq * T);
}

// attn_bwd: dn += ∂L/∂n from dmo (dn NULL: only the LoRA gradients; graph.c attn_bwd).
int attn_bwd(const run *r, int il, layer_bufs *a, const float *dmo, float *dn) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    const attn_dims d = attn_dims_of(cf);
    const int T = r->T;
    cudaStream_t s = r->t->stream;
    float **ax = a->ax;
    if (attn_zero_grads(r, a) ||
        lin_bwd(r, il, BN_LORA_O, &lw->attn_output, a->og, ax[target_slot(BN_LORA_O)], dmo, a->dog) ||
        (d.gated ? bn_cuda_sigmoid_gate_bwd(a->att, a->gate, (int64_t)d.nq * T, a->dog, a->datt, a->dgate, s, r->err,
                                            r->errlen)
                 : copy(r, a->datt, a->dog, (size_t)d.nq * T)) ||
        mark(r, BN_TRAIN_PART_ATTN) ||
        bn_cuda_attn_bwd(r->t->blas, gemm16(r->t, il), a->qa, a->ka, a->vr, T, d.hd, d.nh, d.nkv,
                         1.0f / sqrtf((float)d.hd), a->datt, a->dqa, a->dka, a->dvr, r->t->ws, s, r->err, r->errlen) ||
        mark(r, BN_TRAIN_PART_OTHER) ||
        attn_bwd_qk(r, il, a))
        return -1;
    return lin_bwd(r, il, BN_LORA_Q, &lw->attn_q, a->n, ax[target_slot(BN_LORA_Q)], a->dqg, dn) ||
                   lin_bwd(r, il, BN_LORA_K, &lw->attn_k, a->n, ax[target_slot(BN_LORA_K)], a->dkr, dn) ||
                   lin_bwd(r, il, BN_LORA_V, &lw->attn_v, a->n, ax[target_slot(BN_LORA_V)], a->dvr, dn)
               ? -1 : 0;
}

// ---- one layer ----------------------------------------------------------------------------------------------------
// is_gdn: layer il is a Gated DeltaNet layer.
bool is_gdn(const bn_config *cf, int il) { return cf->arch == BN_ARCH_QWEN35 && cf->is_recurrent[il]; }

// layer_mixer_fwd: h = x_in + the mixer of RMSNorm(x_in), the mixer's intermediates in the trainer's buffers (h is
// written over mo: the backward reads the mixer's gradient from dh, never mo).
int layer_mixer_fwd(const run *r, int il, const float *x_in) {
    const bn_config *cf = &r->t->m->cfg;
    layer_bufs *a = &r->t->b;
    const int64_t HT = (int64_t)cf->n_embd * r->T;
    if (bn_cuda_rmsnorm_fwd(x_in, F(r, &r->t->m->w.layers[il].attn_norm), cf->n_embd, r->T, cf->norm_eps, a->n,
                            r->t->stream, r->err, r->errlen) ||
        (is_gdn(cf, il) ? gdn_fwd(r, il, a) : attn_fwd(r, il, a)))
        return -1;
    return bn_cuda_add(x_in, a->mo, HT, a->h, r->t->stream, r->err, r->errlen);
}

// span: the FFN block's pass over tokens [t0, t0 + c.T) of a row: its run (T = the span's length) and the span's
// first column in the row's {·, T} buffers.
struct span {
    run c;
    int t0;
};

// span_at: the span of up to ffn_chunk tokens starting at t0.
span span_at(const run *r, int t0) {
    span sp = {*r, t0};
    const int n = r->T - t0;
    sp.c.T = n < r->t->ffn_chunk ? n : r->t->ffn_chunk;
    return sp;
}

// span_ax: the span's columns of the A·x rows {r, T} of target.
float *span_ax(const span &sp, int target) {
    const int rank = sp.c.t->r > 0 ? sp.c.t->r : 1;
    return sp.c.t->b.ax[target_slot(target)] + (size_t)rank * sp.t0;
}

// ffn_fwd_span: out {H, span} = h + FFN(RMSNorm(h)) over the span's columns, its intermediates in the span buffers;
// out NULL (the backward's recomputation): the intermediates only, ffn_down's product left out but for its adapter's
// A·act, which its backward reads.
int ffn_fwd_span(const span &sp, int il, float *out) {
    const run *r = &sp.c;
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    layer_bufs *a = &r->t->b;
    const int H = cf->n_embd;
    const int64_t HT = (int64_t)H * r->T, FT = (int64_t)cf->n_ff * r->T;
    const float *h = a->h + (size_t)H * sp.t0;
    cudaStream_t s = r->t->stream;
    if (bn_cuda_rmsnorm_fwd(h, F(r, &lw->post_attention_norm), H, r->T, cf->norm_eps, a->mm, s, r->err, r->errlen) ||
        lin_fwd(r, il, BN_LORA_GATE, &lw->ffn_gate, NULL, a->mm, a->ga, span_ax(sp, BN_LORA_GATE)) ||
        lin_fwd(r, il, BN_LORA_UP, &lw->ffn_up, NULL, a->mm, a->up, span_ax(sp, BN_LORA_UP)) ||
        bn_cuda_swiglu_fwd(a->ga, a->up, FT, a->act, s, r->err, r->errlen))
        return -1;
    if (!out) return lin_ax(r, il, BN_LORA_DOWN, cf->n_ff, a->act, span_ax(sp, BN_LORA_DOWN));
    if (lin_fwd(r, il, BN_LORA_DOWN, &lw->ffn_down, NULL, a->act, out, span_ax(sp, BN_LORA_DOWN))) return -1;
    return bn_cuda_add(out, h, HT, out, s, r->err, r->errlen);
}

// ffn_bwd_span: dh = dh + ∂L/∂h over the span's columns, through the FFN and the post-attention norm (after
// ffn_fwd_span of the same span; dh holds the layer output's gradient, which is also the FFN's dy).
int ffn_bwd_span(const span &sp, int il, float *dh_row) {
    const run *r = &sp.c;
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    layer_bufs *a = &r->t->b;
    const int H = cf->n_embd;
    const size_t HT = (size_t)H * r->T, FT = (size_t)cf->n_ff * r->T, c0 = (size_t)H * sp.t0;
    float *dh = dh_row + c0;
    cudaStream_t s = r->t->stream;
    char *e = r->err;
    const size_t el = r->errlen;
    return zero(r, a->dact, FT) || zero(r, a->dga, FT) || zero(r, a->dup, FT) || zero(r, a->dmm, HT) ||
                   lin_bwd(r, il, BN_LORA_DOWN, &lw->ffn_down, a->act, span_ax(sp, BN_LORA_DOWN), dh, a->dact) ||
                   bn_cuda_swiglu_bwd(a->ga, a->up, (int64_t)FT, a->dact, a->dga, a->dup, s, e, el) ||
                   lin_bwd(r, il, BN_LORA_GATE, &lw->ffn_gate, a->mm, span_ax(sp, BN_LORA_GATE), a->dga, a->dmm) ||
                   lin_bwd(r, il, BN_LORA_UP, &lw->ffn_up, a->mm, span_ax(sp, BN_LORA_UP), a->dup, a->dmm) ||
                   bn_cuda_rmsnorm_bwd(a->h + c0, F(r, &lw->post_attention_norm), H, r->T, cf->norm_eps, a->dmm, dh,
                                       s, e, el)
               ? -1 : 0;
}

// layer_fwd: x_out {H, T} = layer il of x_in, its intermediates in the trainer's buffers (graph.c layer_fwd); the FFN
// block span by span.
int layer_fwd(const run *r, int il, const float *x_in, float *x_out) {
    if (layer_mixer_fwd(r, il, x_in)) return -1;
    for (int t0 = 0; t0 < r->T; t0 += r->t->ffn_chunk)
        if (ffn_fwd_span(span_at(r, t0), il, x_out + (size_t)r->t->m->cfg.n_embd * t0)) return -1;
    return 0;
}

// layer_bwd_ffn: dh {H, T} += ∂L/∂h through the FFN block (dh: the layer output's gradient on entry), span by span:
// each span's intermediates recomputed, then run backward.
int layer_bwd_ffn(const run *r, int il, float *dh) {
    for (int t0 = 0; t0 < r->T; t0 += r->t->ffn_chunk) {
        const span sp = span_at(r, t0);
        if (ffn_fwd_span(sp, il, NULL) || ffn_bwd_span(sp, il, dh)) return -1;
    }
    return 0;
}

// layer_bwd: dx_in {H, T} (overwritten) from dx_out (graph.c layer_bwd), after layer_mixer_fwd of x_in; dx_out
// becomes the residual's gradient dh on the way. Layer 0 skips the mixer's input gradient (it would only reach the
// frozen embedding).
int layer_bwd(const run *r, int il, const float *x_in, float *dx_out, float *dx_in) {
    const bn_config *cf = &r->t->m->cfg;
    const bn_layer_weights *lw = &r->t->m->w.layers[il];
    layer_bufs *a = &r->t->b;
    const int T = r->T, H = cf->n_embd;
    const size_t HT = (size_t)H * T;
    float *dn = il > 0 ? a->dn : NULL;
    float *dh = dx_out;
    if (layer_bwd_ffn(r, il, dh) || (dn && zero(r, dn, HT)) ||
        (is_gdn(cf, il) ? gdn_bwd(r, il, a, dh, dn) : attn_bwd(r, il, a, dh, dn)) || copy(r, dx_in, dh, HT))
        return -1;
    return dn ? bn_cuda_rmsnorm_bwd(x_in, F(r, &lw->attn_norm), H, T, cf->norm_eps, dn, dx_in, r->t->stream, r->err,
                                    r->errlen)
              : 0;
}

// ---- the trainer's buffers ----------------------------------------------------------------------------------------
// take: the next n floats (256-byte aligned) of an arena at base (NULL: only counted); *off advances.
float *take(float *base, size_t *off, size_t n) {
    float *p = base ? base + *off : NULL;
    *off += (n + 63) / 64 * 64;
    return p;
}

// bufs_carve: lays a layer's buffers for T tokens out in base (NULL: only counted): the FFN block's for spans of
// min(T, chunk) tokens, x_in only when the layer inputs are kept as bf16 (kept16); returns the floats they take.
size_t bufs_carve(layer_bufs *b, float *base, const bn_config *cf, int T, int r, int chunk, bool kept16) {
    const size_t t = (size_t)T, H = (size_t)cf->n_embd * t, c = (size_t)(T < chunk ? T : chunk);
    const size_t Hc = (size_t)cf->n_embd * c, Fc = (size_t)cf->n_ff * c;
    const bool qwen35 = cf->arch == BN_ARCH_QWEN35;
    const gdn_dims g = gdn_dims_of(cf);
    const size_t C = qwen35 ? (size_t)g.C * t : 0, Qd = qwen35 ? (size_t)g.Hk * g.dk * t : 0;
    const size_t Vd = qwen35 ? (size_t)g.Hv * g.dk * t : 0, Hv = qwen35 ? (size_t)g.Hv * t : 0;
    const attn_dims d = attn_dims_of(cf);
    const size_t nq = (size_t)d.nq * t, nk = (size_t)d.kv_dim * t, qs = (size_t)d.q_stride * t;
    size_t off = 0;
    for (float **p : {&b->n, &b->mo, &b->dx, &b->dx_prev}) *p = take(base, &off, H);
    b->h = b->dn = b->mo;
    b->x_in = kept16 ? take(base, &off, H) : NULL;
    for (float **p : {&b->mm, &b->dmm}) *p = take(base, &off, Hc);
    for (float **p : {&b->ga, &b->up, &b->act, &b->dact, &b->dga, &b->dup}) *p = take(base, &off, Fc);
    // A layer is either Gated DeltaNet or attention: the two kinds' buffers share the rest of the arena.
    const size_t kinds = off;
    for (float **p : {&b->mix, &b->dconv, &b->dmix}) *p = take(base, &off, C);
    b->conv = b->dconv;
    for (float **p : {&b->q, &b->k, &b->qn, &b->kn, &b->dqn, &b->dkn, &b->dqs}) *p = take(base, &off, Qd);
    for (float **p : {&b->z, &b->v, &b->o, &b->y, &b->dz, &b->dvv}) *p = take(base, &off, Vd);
    for (float **p : {&b->dy, &b->d_o}) *p = take(base, &off, Vd > Qd ? Vd : Qd);
    b->dk = b->dy, b->dq = b->d_o;
    for (float **p : {&b->b, &b->a, &b->beta, &b->g, &b->dg, &b->dbeta, &b->db, &b->da}) *p = take(base, &off, Hv);
    const size_t gdn_end = off;
    off = kinds;
    for (float **p : {&b->qr, &b->gate, &b->qa, &b->att, &b->og, &b->dog, &b->datt, &b->dgate, &b->dqa, &b->dqrot,
                      &b->dqr})
        *p = take(base, &off, nq);
    for (float **p : {&b->kr, &b->vr, &b->ka, &b->dka, &b->dvr, &b->dkrot, &b->dkr}) *p = take(base, &off, nk);
    b->qg = b->dqg = take(base, &off, qs);
    if (gdn_end > off) off = gdn_end;
    for (int i = 0; i < BN_LORA_N_TARGETS; i++) b->ax[i] = take(base, &off, (size_t)(r > 0 ? r : 1) * t);
    return off;
}

// layer_linears: the 2-D weights of layer lw the linears read (absent ones have no data); returns their count.
int layer_linears(const bn_layer_weights *lw, const bn_weight **out) {
    const bn_weight *all[] = {&lw->attn_q, &lw->attn_k, &lw->attn_v, &lw->attn_output, &lw->ffn_gate,
                              &lw->ffn_up, &lw->ffn_down, &lw->attn_qkv, &lw->attn_gate, &lw->ssm_beta,
                              &lw->ssm_alpha, &lw->ssm_out};
    int n = 0;
    for (const bn_weight *w : all)
        if (w->data) out[n++] = w;
    return n;
}

// is_ffn: whether W is one of the FFN block's weights of layer lw (run over spans of ffn_chunk tokens).
bool is_ffn(const bn_layer_weights *lw, const bn_weight *W) {
    return W == &lw->ffn_gate || W == &lw->ffn_up || W == &lw->ffn_down;
}

// lin_ws: workspace floats of a linear's forward and backward over W for T tokens, in layer `layer` (−1: the head).
size_t lin_ws(const bn_cuda_trainer *t, int layer, const bn_weight *W, int T) {
    const int type = W->type;
    const bool bf16 = gemm16(t, layer);
    const size_t f = bn_cuda_linear_lora_fwd_workspace_floats(bf16, type, W->ne[0], W->ne[1], t->r, T);
    const size_t b = bn_cuda_linear_lora_bwd_workspace_floats(bf16, type, W->ne[0], W->ne[1], t->r, T);
    return f > b ? f : b;
}

// ws_need: workspace floats for T tokens: the largest of every linear's (the FFN block's over one span), the
// attention's and the delta rule's.
size_t ws_need(const bn_cuda_trainer *t, int T) {
    const bn_config *cf = &t->m->cfg;
    size_t need = lin_ws(t, -1, &t->m->w.output, T), n; // the head: one position, or T in an all-position graph
    const int span_len = T < t->ffn_chunk ? T : t->ffn_chunk;
    for (int il = 0; il < cf->n_layer; il++) {
        const bn_weight *lins[12];
        const int k = layer_linears(&t->m->w.layers[il], lins);
        for (int i = 0; i < k; i++)
            if ((n = lin_ws(t, il, lins[i], is_ffn(&t->m->w.layers[il], lins[i]) ? span_len : T)) > need) need = n;
        n = is_gdn(cf, il) ? bn_cuda_gdn_bwd_workspace_floats(T, cf->ssm_dt_rank, cf->ssm_d_state, cf->ssm_d_state,
                                                              bn_train_gdn_ckpt(T))
                           : bn_cuda_attn_workspace_floats(T, cf->n_head, cf->n_head_kv);
        if (n > need) need = n;
    }
    return need;
}

// ensure_capacity: the trainer's per-length buffers hold sequences of T tokens; 0 or -1 (err).
int ensure_capacity(bn_cuda_trainer *t, int T, char *err, size_t errlen) {
    if (T <= t->T_cap) return 0;
    BN_CUDA_TRY(cudaStreamSynchronize(t->stream), err, errlen);
    dev_free(t->arena);
    dev_free(t->ws);
    t->arena = t->ws = NULL;
    t->T_cap = 0;
    const size_t floats = bufs_carve(&t->b, NULL, &t->m->cfg, T, t->r, t->ffn_chunk, t->kept_bf16);
    t->ws_floats = ws_need(t, T);
    if (dev_alloc((void **)&t->arena, floats * sizeof(float), err, errlen) ||
        dev_alloc((void **)&t->ws, (t->ws_floats ? t->ws_floats : 1) * sizeof(float), err, errlen))
        return -1;
    bufs_carve(&t->b, t->arena, &t->m->cfg, T, t->r, t->ffn_chunk, t->kept_bf16);
    t->T_cap = T;
    return 0;
}

// ---- opening: checks, weights, adapter ----------------------------------------------------------------------------
// check_model: what train/graph.c trains (architecture; norms and small tensors F32) and the device kernels' limits.
int check_model(const bn_model *m, char *err, size_t errlen) {
    const bn_config *cf = &m->cfg;
    if (cf->arch != BN_ARCH_QWEN35 && cf->arch != BN_ARCH_QWEN3 && cf->arch != BN_ARCH_LLAMA &&
        cf->arch != BN_ARCH_QWEN2)
        return bn_err(err, errlen, "device training: unsupported architecture %d", cf->arch);
    if (m->w.output_norm.type != BN_CU_F32) return bn_err(err, errlen, "device training: output_norm must be f32");
    if (cf->arch == BN_ARCH_QWEN35 && (cf->ssm_d_state > 256 || cf->ssm_conv_kernel > 8))
        return bn_err(err, errlen, "device training: GDN d_state %d / conv kernel %d over the device's 256 / 8",
                      cf->ssm_d_state, cf->ssm_conv_kernel);
    for (int il = 0; il < cf->n_layer; il++) {
        const bn_layer_weights *lw = &m->w.layers[il];
        const bn_weight *vecs[] = {&lw->attn_norm, &lw->post_attention_norm, &lw->attn_q_norm, &lw->attn_k_norm,
                                   &lw->attn_q_bias, &lw->attn_k_bias, &lw->attn_v_bias, &lw->ssm_conv1d,
                                   &lw->ssm_dt, &lw->ssm_a, &lw->ssm_norm};
        for (const bn_weight *v : vecs)
            if (v->data && v->type != BN_CU_F32)
                return bn_err(err, errlen, "device training: %s must be f32 (is %s)", v->name ? v->name : "vector",
                              bn_type_name(v->type));
    }
    return 0;
}

// check_adapter: what the device path does not do: dropout.
int check_adapter(const bn_lora *l, char *err, size_t errlen) {
    if (l && l->dropout > 0)
        return bn_err(err, errlen, "device training: LoRA dropout %g is not supported (use 0)", (double)l->dropout);
    return 0;
}

// upload_weights: every weight of m on the device in its stored type; 0 or -1.
int upload_weights(bn_cuda_trainer *t, char *err, size_t errlen) {
    const bn_model *m = t->m;
    const int L = m->cfg.n_layer;
    t->layer_w = (void **)xcalloc((size_t)L * t->per, sizeof(void *));
    for (int il = 0; il < L; il++) {
        const bn_weight *w = (const bn_weight *)&m->w.layers[il];
        for (int i = 0; i < t->per; i++)
            if (w[i].data && upload_weight(&w[i], &t->layer_w[il * t->per + i], err, errlen)) return -1;
    }
    if (upload_weight(&m->w.token_embd, &t->embd, err, errlen) ||
        upload_weight(&m->w.output_norm, &t->out_norm, err, errlen))
        return -1;
    const bn_weight *out = &m->w.output;
    if (out->data == m->w.token_embd.data) t->out = t->embd;
    else if (upload_weight(out, &t->out, err, errlen)) return -1;
    return 0;
}

// copy_layout: the adapter's layout (rank, scale, (layer, target) → tensor, offsets) and its device arrays.
int copy_layout(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen) {
    const int L = t->m->cfg.n_layer;
    t->index = (int *)xmalloc(sizeof(int) * (size_t)(L + 1) * BN_LORA_N_TARGETS);
    for (int i = 0; i < (L + 1) * BN_LORA_N_TARGETS; i++) t->index[i] = -1;
    if (!l) return 0;
    t->ste = l->ste;
    t->r = l->r;
    t->scale = bn_lora_scale(l);
    t->n_params = l->n_params;
    t->n_tensors = l->n_tensors;
    t->off_a = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)(l->n_tensors + 1));
    t->off_b = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)(l->n_tensors + 1));
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_lora_tensor *lt = &l->t[i];
        const int il = lt->layer < 0 ? L : lt->layer;
        if (il > L) return bn_err(err, errlen, "device training: adapter tensor %s of layer %d", lt->name, lt->layer);
        t->index[il * BN_LORA_N_TARGETS + target_slot(lt->target)] = i;
        t->off_a[i] = lt->off_a;
        t->off_b[i] = lt->off_b;
    }
    const size_t n = (size_t)(l->n_params > 0 ? l->n_params : 1) * sizeof(float);
    if (dev_alloc((void **)&t->params, n, err, errlen) || dev_alloc((void **)&t->grads, n, err, errlen)) return -1;
    BN_CUDA_TRY(cudaMemset(t->grads, 0, n), err, errlen);
    return bn_cuda_trainer_load_params(t, l, err, errlen);
}

// open_runtime: the device, a stream, the cuBLAS handle and the head's buffers; 0 or -1.
int open_runtime(bn_cuda_trainer *t, int device, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaSetDevice(device), err, errlen);
    t->device = device;
    BN_CUDA_TRY(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking), err, errlen);
    t->blas = bn_cuda_blas_new(err, errlen);
    if (!t->blas) return -1;
    const size_t H = (size_t)t->m->cfg.n_embd, V = (size_t)t->m->cfg.n_vocab;
    return dev_alloc((void **)&t->head_x, H * sizeof(float), err, errlen) ||
                   dev_alloc((void **)&t->head_dx, H * sizeof(float), err, errlen) ||
                   dev_alloc((void **)&t->logits, V * sizeof(float), err, errlen) ||
                   dev_alloc((void **)&t->dlogits, V * sizeof(float), err, errlen)
               ? -1 : 0;
}

// ---- the whole model ----------------------------------------------------------------------------------------------
// graph_x_in: the saved fp32 input {H, T} of layer il (a graph without x16).
float *graph_x_in(const bn_cuda_train_graph *g, int il) {
    return g->x + (size_t)il * g->t->m->cfg.n_embd * g->T;
}

// graph_x16_in: the saved bf16 input {H, T} of layer il (a graph with x16).
uint16_t *graph_x16_in(const bn_cuda_train_graph *g, int il) {
    return g->x16 + (size_t)il * g->t->m->cfg.n_embd * g->T;
}

// graph_x_last: the final residual {H} of the last position ({H, T} of every position in an all-position graph).
float *graph_x_last(const bn_cuda_train_graph *g) { return g->x16 ? g->x : graph_x_in(g, g->t->m->cfg.n_layer); }

// check_tokens: a non-empty sequence of ids in the vocabulary, within the attention kernels' length.
int check_tokens(const bn_cuda_trainer *t, const int32_t *tokens, int n, char *err, size_t errlen) {
    const bn_config *cf = &t->m->cfg;
    if (n <= 0) return bn_err(err, errlen, "device training: empty token sequence");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cf->n_vocab)
            return bn_err(err, errlen, "device training: token %d out of range", tokens[i]);
    bool attn = false;
    for (int il = 0; il < cf->n_layer; il++) attn = attn || !is_gdn(cf, il);
    if (attn && n > bn_cuda_attn_max_T())
        return bn_err(err, errlen, "device training: %d tokens over the attention kernels' %d", n,
                      bn_cuda_attn_max_T());
    return 0;
}

// graph_head_alloc: an all-position graph's head buffers (hx, zbuf, hdx); 0 or -1 (err).
int graph_head_alloc(bn_cuda_train_graph *g, char *err, size_t errlen) {
    if (!g->all) return 0;
    const size_t H = (size_t)g->t->m->cfg.n_embd, V = (size_t)g->t->m->cfg.n_vocab, T = (size_t)g->T;
    return dev_alloc((void **)&g->hx, sizeof(float) * H * T, err, errlen) ||
           dev_alloc((void **)&g->zbuf, sizeof(float) * V * T, err, errlen) ||
           dev_alloc((void **)&g->hdx, sizeof(float) * H * T, err, errlen);
}

// graph_new: a graph of T tokens (device copies of the tokens, room for the layer inputs; all: every position's
// logits); NULL (err).
bn_cuda_train_graph *graph_new(bn_cuda_trainer *t, bool adapter, const int32_t *tokens, int T, bool all, char *err,
                               size_t errlen) {
    bn_cuda_train_graph *g = (bn_cuda_train_graph *)xcalloc(1, sizeof *g);
    g->t = t;
    g->adapter = adapter;
    g->T = T;
    g->all = all;
    const size_t H = (size_t)t->m->cfg.n_embd, L = (size_t)t->m->cfg.n_layer, LHT = L * H * (size_t)T;
    const size_t x_floats = (t->kept_bf16 ? 0 : LHT) + H * (all ? (size_t)T : 1);
    if (dev_alloc((void **)&g->tokens, sizeof(int) * (size_t)T, err, errlen) ||
        (t->kept_bf16 && dev_alloc((void **)&g->x16, sizeof(uint16_t) * LHT, err, errlen)) ||
        dev_alloc((void **)&g->x, sizeof(float) * x_floats, err, errlen) ||
        graph_head_alloc(g, err, errlen) ||
        cudaMemcpyAsync(g->tokens, tokens, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice, t->stream) != cudaSuccess) {
        if (g->tokens && g->x) bn_err(err, errlen, "device training: cannot upload the tokens");
        bn_cuda_train_graph_free(g);
        return NULL;
    }
    return g;
}

// forward_layers: the embedding rows, then every layer, each one's input kept in g (as bf16 with x16: the layers then
// run on fp32 residuals in the arena's dx and dx_prev, each rounded only in its kept copy; the last layer's output
// goes to one of them either way); the last position's final residual (every position's in an all-position graph).
int forward_layers(const run *r, bn_cuda_train_graph *g) {
    const bn_model *m = r->t->m;
    layer_bufs *b = &r->t->b;
    const int L = m->cfg.n_layer, H = m->cfg.n_embd;
    const int64_t HT = (int64_t)H * r->T;
    float *x = g->x16 ? b->dx : graph_x_in(g, 0);
    if (bn_cuda_get_rows_f32(m->w.token_embd.type, r->t->embd, H, m->w.token_embd.ne[1], g->tokens, r->T, x,
                             r->t->stream, r->err, r->errlen))
        return -1;
    for (int il = 0; il < L; il++) {
        if (g->x16 && bn_cuda_to_bf16(x, HT, graph_x16_in(g, il), r->t->stream, r->err, r->errlen)) return -1;
        float *x_out = il + 1 < L && !g->x16 ? graph_x_in(g, il + 1) : x == b->dx ? b->dx_prev : b->dx;
        if (layer_fwd(r, il, x, x_out)) return -1;
        x = x_out;
    }
    if (g->all) return copy(r, graph_x_last(g), x, (size_t)HT);
    return copy(r, graph_x_last(g), x + (size_t)(r->T - 1) * H, (size_t)H);
}

// layer_input: the fp32 input {H, T} of layer il for its recomputation: the kept copy, or the bf16 one widened into
// the arena's x_in; NULL (err).
const float *layer_input(const run *r, const bn_cuda_train_graph *g, int il) {
    if (!g->x16) return graph_x_in(g, il);
    float *x = r->t->b.x_in;
    const int64_t HT = (int64_t)r->t->m->cfg.n_embd * r->T;
    return bn_cuda_from_bf16(graph_x16_in(g, il), HT, x, r->t->stream, r->err, r->errlen) ? NULL : x;
}

// head_pass: where graph g's LM head works: its positions (the last one, or every one in an all-position graph), the
// run over them, and its buffers: the normed input, the logits, their gradient and the input's gradient (the
// trainer's one-position buffers, or the graph's own).
struct head_pass {
    run h;
    float *hx, *z, *dz, *hdx;
};
head_pass head_of(const run *r, const bn_cuda_train_graph *g) {
    bn_cuda_trainer *t = r->t;
    head_pass p = {*r, t->head_x, t->logits, t->dlogits, t->head_dx};
    if (g->all) p = {*r, g->hx, g->zbuf, g->zbuf, g->hdx};
    else p.h.T = 1;
    return p;
}

// head_norm: p.hx = RMSNorm of the final residuals of the head's positions.
int head_norm(const head_pass &p, const bn_cuda_train_graph *g) {
    const bn_model *m = p.h.t->m;
    return bn_cuda_rmsnorm_fwd(graph_x_last(g), F(&p.h, &m->w.output_norm), m->cfg.n_embd, p.h.T, m->cfg.norm_eps,
                               p.hx, p.h.t->stream, p.h.err, p.h.errlen);
}

// head_fwd: host logits {V, positions} = output · RMSNorm(x) (+ the head's LoRA) at the head's positions.
int head_fwd(const run *r, const bn_cuda_train_graph *g, float *logits) {
    const head_pass p = head_of(r, g);
    bn_cuda_trainer *t = r->t;
    if (head_norm(p, g) || lin_fwd(&p.h, -1, BN_LORA_HEAD, &t->m->w.output, NULL, p.hx, p.z, NULL)) return -1;
    BN_CUDA_TRY(cudaMemcpyAsync(logits, p.z, sizeof(float) * (size_t)t->m->cfg.n_vocab * p.h.T,
                                cudaMemcpyDeviceToHost, t->stream), r->err, r->errlen);
    BN_CUDA_TRY(cudaStreamSynchronize(t->stream), r->err, r->errlen);
    return 0;
}

// head_bwd: dx {H, T} = the gradient of the residual stream from host dlogits {V, positions} (zero at the positions
// the head does not cover). The norm is recomputed: the one-position buffers are shared by the trainer's graphs.
int head_bwd(const run *r, const bn_cuda_train_graph *g, const float *dlogits, float *dx) {
    const head_pass p = head_of(r, g);
    bn_cuda_trainer *t = r->t;
    const bn_model *m = t->m;
    const int H = m->cfg.n_embd, cols = p.h.T;
    BN_CUDA_TRY(cudaMemcpyAsync(p.dz, dlogits, sizeof(float) * (size_t)m->cfg.n_vocab * cols, cudaMemcpyHostToDevice,
                                t->stream), r->err, r->errlen);
    return head_norm(p, g) || zero(r, p.hdx, (size_t)H * cols) ||
                   lin_bwd(&p.h, -1, BN_LORA_HEAD, &m->w.output, p.hx, NULL, p.dz, p.hdx) ||
                   zero(r, dx, (size_t)H * r->T) ||
                   bn_cuda_rmsnorm_bwd(graph_x_last(g), F(r, &m->w.output_norm), H, cols, m->cfg.norm_eps, p.hdx,
                                       dx + (size_t)(r->T - cols) * H, t->stream, r->err, r->errlen)
               ? -1 : 0;
}

// backward_layers: from the residual's gradient dx, each layer's mixer recomputed from its input and then the layer
// run backward (its FFN block recomputed span by span there).
int backward_layers(const run *r, const bn_cuda_train_graph *g) {
    layer_bufs *b = &r->t->b;
    float *dx = b->dx, *dx_prev = b->dx_prev;
    for (int il = r->t->m->cfg.n_layer - 1; il >= 0; il--) {
        const float *x_in = layer_input(r, g, il);
        if (!x_in || layer_mixer_fwd(r, il, x_in) || layer_bwd(r, il, x_in, dx, dx_prev)) return -1;
        float *tmp = dx;
        dx = dx_prev;
        dx_prev = tmp;
    }
    BN_CUDA_TRY(cudaStreamSynchronize(r->t->stream), r->err, r->errlen);
    return 0;
}

// ---- the bn_train_device backend ----------------------------------------------------------------------------------
void *device_open(const bn_model *m, const bn_lora *l, int device, const bn_train_device_opts *opts, char *err,
                  size_t errlen) {
    return bn_cuda_trainer_new(m, l, device, opts, err, errlen);
}
void device_close(void *ctx) { bn_cuda_trainer_free((bn_cuda_trainer *)ctx); }
int device_load_params(void *ctx, const bn_lora *l, char *err, size_t errlen) {
    return bn_cuda_trainer_load_params((bn_cuda_trainer *)ctx, l, err, errlen);
}
void *device_forward(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                     size_t errlen) {
    return bn_cuda_train_forward((bn_cuda_trainer *)ctx, use_adapter, tokens, n, logits, err, errlen);
}
void *device_forward_all(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                         size_t errlen) {
    return bn_cuda_train_forward_all((bn_cuda_trainer *)ctx, use_adapter, tokens, n, logits, err, errlen);
}
int device_backward(void *graph, const float *dlogits, char *err, size_t errlen) {
    return bn_cuda_train_backward((bn_cuda_train_graph *)graph, dlogits, err, errlen);
}
void device_graph_free(void *graph) { bn_cuda_train_graph_free((bn_cuda_train_graph *)graph); }
int device_take_grads(void *ctx, float *grads, char *err, size_t errlen) {
    return bn_cuda_trainer_take_grads((bn_cuda_trainer *)ctx, grads, err, errlen);
}
size_t device_mem_in_use(void *ctx) { return bn_cuda_trainer_mem_in_use((bn_cuda_trainer *)ctx); }
int device_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen) {
    return bn_cuda_train_mem_info(device, free_bytes, total_bytes, err, errlen);
}
void device_set_profile(void *ctx, bool on) {
    bn_cuda_trainer *t = (bn_cuda_trainer *)ctx;
    if (!t->prof) t->prof = (train_prof *)xcalloc(1, sizeof *t->prof);
    t->prof->on = on;
    t->prof->n = 0; // a window left open by a failed pass is dropped
}
int device_take_profile(void *ctx, double ms[BN_TRAIN_PARTS], char *err, size_t errlen) {
    bn_cuda_trainer *t = (bn_cuda_trainer *)ctx;
    for (int i = 0; i < BN_TRAIN_PARTS; i++) ms[i] = 0;
    if (!t->prof) return 0;
    if (prof_flush(t->prof, t->stream, err, errlen)) return -1;
    prof_take(t->prof, ms);
    return 0;
}

const bn_train_device cuda_train_device = {"CUDA",         bn_cuda_device_count, device_open,      device_close,
                                           device_load_params, device_forward,   device_backward,  device_graph_free,
                                           device_take_grads, device_mem_in_use, device_forward_all,
                                           device_mem_info,   device_set_profile, device_take_profile};

} // namespace

// The device backend of FTPO training, registered before main (the dependencies pull this object in: cuda/meson.build).
__attribute__((constructor)) static void cuda_train_device_register(void) {
    bn_train_device_register(&cuda_train_device);
}

extern "C" bn_cuda_trainer *bn_cuda_trainer_new(const bn_model *m, const bn_lora *l, int device,
                                                const bn_train_device_opts *opts, char *err, size_t errlen) {
    if (check_model(m, err, errlen) || check_adapter(l, err, errlen)) return NULL;
    if (opts && opts->gemm != BN_TRAIN_GEMM_BF16 && opts->gemm != BN_TRAIN_GEMM_F32) {
        bn_err(err, errlen, "device training: unknown base-weight GEMM %d", (int)opts->gemm);
        return NULL;
    }
    if (opts && opts->ffn_chunk < 0) {
        bn_err(err, errlen, "device training: FFN span of %d tokens (positive, or 0 for %d)", opts->ffn_chunk,
               BN_TRAIN_FFN_CHUNK);
        return NULL;
    }
    bn_cuda_trainer *t = (bn_cuda_trainer *)xcalloc(1, sizeof *t);
    t->m = m;
    t->gemm_bf16 = t->kept_bf16 = !opts || opts->gemm == BN_TRAIN_GEMM_BF16;
    t->ffn_chunk = opts && opts->ffn_chunk > 0 ? opts->ffn_chunk : BN_TRAIN_FFN_CHUNK;
    t->per = (int)(sizeof(bn_layer_weights) / sizeof(bn_weight));
    if (open_runtime(t, device, err, errlen) || upload_weights(t, err, errlen) || copy_layout(t, l, err, errlen)) {
        bn_cuda_trainer_free(t);
        return NULL;
    }
    return t;
}

extern "C" void bn_cuda_trainer_free(bn_cuda_trainer *t) {
    if (!t) return;
    if (t->stream) cudaStreamSynchronize(t->stream);
    if (t->layer_w)
        for (int i = 0; i < t->m->cfg.n_layer * t->per; i++) dev_free(t->layer_w[i]);
    free(t->layer_w);
    if (t->out != t->embd) dev_free(t->out);
    for (void *p : {t->embd, t->out_norm, (void *)t->params, (void *)t->grads, (void *)t->arena,
                    (void *)t->ws, (void *)t->head_x, (void *)t->head_dx, (void *)t->logits, (void *)t->dlogits})
        dev_free(p);
    free(t->index);
    free(t->off_a);
    free(t->off_b);
    bn_cuda_blas_free(t->blas);
    if (t->prof) prof_free(t->prof);
    free(t->prof);
    if (t->stream) cudaStreamDestroy(t->stream);
    free(t);
}

// adapted_weight: the weight of t's model the adapter's tensor lt adapts.
static const bn_weight *adapted_weight(const bn_cuda_trainer *t, const bn_lora_tensor *lt) {
    return lt->layer < 0 ? &t->m->w.output : bn_lora_layer_weight(&t->m->w.layers[lt->layer], lt->target);
}

// upload_adapted: the adapted weights of t's model (W_eff, their host buffers read again) over their device copies,
// the same types and shapes; 0 or -1 (err).
static int upload_adapted(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen) {
    for (int i = 0; i < l->n_tensors; i++) {
        const bn_weight *w = adapted_weight(t, &l->t[i]);
        BN_CUDA_TRY(cudaMemcpyAsync((void *)dev_weight(t, w), w->data, weight_bytes(w), cudaMemcpyHostToDevice,
                                    t->stream), err, errlen);
    }
    return 0;
}

extern "C" int bn_cuda_trainer_load_params(bn_cuda_trainer *t, const bn_lora *l, char *err, size_t errlen) {
    if (!l || !t->params || l->n_params != t->n_params || l->n_tensors != t->n_tensors || l->r != t->r)
        return bn_err(err, errlen, "device training: the adapter's layout differs from the one opened");
    for (int i = 0; i < l->n_tensors; i++)
        if (l->t[i].off_a != t->off_a[i] || l->t[i].off_b != t->off_b[i])
            return bn_err(err, errlen, "device training: the adapter's layout differs from the one opened");
    BN_CUDA_TRY(cudaMemcpyAsync(t->params, l->params, sizeof(float) * (size_t)l->n_params, cudaMemcpyHostToDevice,
                                t->stream), err, errlen);
    if (t->ste && upload_adapted(t, l, err, errlen)) return -1;
    BN_CUDA_TRY(cudaStreamSynchronize(t->stream), err, errlen);
    return 0;
}

// train_forward: the forward of tokens[0..n) into host logits (all: every position's {V, n}, else the last's {V});
// the graph, or NULL (err).
static bn_cuda_train_graph *train_forward(bn_cuda_trainer *t, bool use_adapter, bool all, const int32_t *tokens, int n,
                                          float *logits, char *err, size_t errlen) {
    if (check_tokens(t, tokens, n, err, errlen) || ensure_capacity(t, n, err, errlen)) return NULL;
    bn_cuda_train_graph *g = graph_new(t, use_adapter && t->params, tokens, n, all, err, errlen);
    if (!g) return NULL;
    const run r = {t, g->adapter, n, err, errlen};
    if (mark(&r, BN_TRAIN_PART_OTHER) || forward_layers(&r, g) || head_fwd(&r, g, logits) ||
        (t->prof && prof_flush(t->prof, t->stream, err, errlen))) {
        cudaStreamSynchronize(t->stream);
        bn_cuda_train_graph_free(g);
        return NULL;
    }
    return g;
}

extern "C" bn_cuda_train_graph *bn_cuda_train_forward(bn_cuda_trainer *t, bool use_adapter, const int32_t *tokens,
                                                      int n, float *logits, char *err, size_t errlen) {
    return train_forward(t, use_adapter, false, tokens, n, logits, err, errlen);
}

extern "C" bn_cuda_train_graph *bn_cuda_train_forward_all(bn_cuda_trainer *t, bool use_adapter,
                                                          const int32_t *tokens, int n, float *logits, char *err,
                                                          size_t errlen) {
    return train_forward(t, use_adapter, true, tokens, n, logits, err, errlen);
}

extern "C" int bn_cuda_train_backward(bn_cuda_train_graph *g, const float *dlogits, char *err, size_t errlen) {
    if (!g->adapter) return bn_err(err, errlen, "device training: the backward needs a forward with the adapter");
    bn_cuda_trainer *t = g->t;
    if (ensure_capacity(t, g->T, err, errlen)) return -1;
    const run r = {t, true, g->T, err, errlen};
    return mark(&r, BN_TRAIN_PART_OTHER) || head_bwd(&r, g, dlogits, t->b.dx) || backward_layers(&r, g) ||
                   (t->prof && prof_flush(t->prof, t->stream, err, errlen))
               ? -1 : 0;
}

extern "C" void bn_cuda_train_graph_free(bn_cuda_train_graph *g) {
    if (!g) return;
    cudaStreamSynchronize(g->t->stream);
    for (void *p : {(void *)g->tokens, (void *)g->x, (void *)g->x16, (void *)g->hx, (void *)g->zbuf, (void *)g->hdx})
        dev_free(p);
    free(g);
}

extern "C" int bn_cuda_trainer_take_grads(bn_cuda_trainer *t, float *grads, char *err, size_t errlen) {
    if (!t->grads || t->n_params == 0) return 0;
    const size_t n = (size_t)t->n_params;
    float *host = (float *)xmalloc(n * sizeof(float));
    cudaError_t e = cudaMemcpyAsync(host, t->grads, n * sizeof(float), cudaMemcpyDeviceToHost, t->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(t->stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(t->grads, 0, n * sizeof(float), t->stream);
    if (e == cudaSuccess)
        for (size_t i = 0; i < n; i++) grads[i] += host[i];
    free(host);
    BN_CUDA_TRY(e, err, errlen);
    return 0;
}

extern "C" size_t bn_cuda_trainer_mem_in_use(bn_cuda_trainer *t) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(t->device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
    return total_bytes > free_bytes ? total_bytes - free_bytes : 0;
}

extern "C" int bn_cuda_train_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen) {
    *free_bytes = *total_bytes = 0;
    BN_CUDA_TRY(cudaSetDevice(device), err, errlen);
    BN_CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes), err, errlen);
    return 0;
}
