// cuda/train_layer.cu — one layer of the training graph on the device (train/graph.c's layer functions written with
// the trainer's device ops): the linears with their LoRA pairs (timed as linears when the trainer times its parts),
// the Gated DeltaNet and attention mixers, the FFN block over spans of at most ffn_chunk tokens, forward and backward
// (a layer's backward recomputes it from its kept input). The whole model, the buffers and the trainer are
// cuda/train_graph.cu's (cuda/train_impl.cuh).
#include "cuda/train_impl.cuh"

namespace bn_train {

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
        timed(r, BN_TRAIN_PART_GDN, [&] {
            return bn_cuda_gdn_fwd(T, d.Hk, d.Hv, d.dk, d.dk, a->qn, a->kn, a->v, a->g, a->beta, NULL, a->o, NULL, s,
                                   r->err, r->errlen);
        }) ||
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
                   timed(r, BN_TRAIN_PART_GDN, [&] {
                       return bn_cuda_gdn_bwd(T, d.Hk, d.Hv, d.dk, d.dk, a->qn, a->kn, a->v, a->g, a->beta, NULL,
                                              a->d_o, NULL, bn_train_gdn_ckpt(T), a->dqn, a->dkn, a->dvv, a->dg,
                                              a->dbeta, NULL, r->t->ws, s, e, el);
                   }) ||
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
        timed(r, BN_TRAIN_PART_ATTN, [&] {
            return bn_cuda_attn_fwd(r->t->blas, gemm16(r->t, il), a->qa, a->ka, a->vr, T, d.hd, d.nh, d.nkv,
                                    1.0f / sqrtf((float)d.hd), a->att, r->t->ws, s, r->err, r->errlen);
        }) ||
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
        timed(r, BN_TRAIN_PART_ATTN, [&] {
            return bn_cuda_attn_bwd(r->t->blas, gemm16(r->t, il), a->qa, a->ka, a->vr, T, d.hd, d.nh, d.nkv,
                                    1.0f / sqrtf((float)d.hd), a->datt, a->dqa, a->dka, a->dvr, r->t->ws, s, r->err,
                                    r->errlen);
        }) ||
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

} // namespace bn_train
