// cuda/forward.cu — the CUDA forward pass behind cuda/cuda_engine.h: the layer loop (same ops in the same order as
// core/forward.c), the head's outputs, one-token steps, verify passes with device snapshots, batched steps of
// several sequences, and the CUDA graphs they replay. The device model is in cuda/model.cu, the state and snapshots
// in cuda/state.cu (shared definitions: cuda/forward_impl.cuh). Kernels: cuda/ops.cu, gdn.cu, attention.cu
// (cuda/fwd.cuh) and the matrix kernels of cuda/mm.cuh.
#include "cuda/forward_impl.cuh"
extern "C" {
#include "core/engine.h" // bn_engine_pass_end: the passes of a ragged pass
}
#include <atomic>

// Tap bytes that crossed PCIe (target taps copied down here, drafter taps copied up in dspark.cu).
static std::atomic<size_t> host_tap_bytes{0};
void bn_cu_count_host_tap_bytes(size_t bytes) { host_tap_bytes += bytes; }
size_t bn_cuda_host_tap_bytes(void) { return host_tap_bytes.load(); }
// Logits bytes copied to the host (out->logits of every CUDA pass).
static std::atomic<size_t> host_logit_bytes{0};
size_t bn_cuda_host_logit_bytes(void) { return host_logit_bytes.load(); }

// copy_logits_down: rows of s->logits from row dev_row into host dst (counted in bn_cuda_host_logit_bytes), async.
static cudaError_t copy_logits_down(bn_cuda_state *s, float *dst, int rows, int dev_row) {
    const size_t V = (size_t)s->cm->cfg.n_vocab, bytes = sizeof(float) * V * (size_t)rows;
    host_logit_bytes += bytes;
    return cudaMemcpyAsync(dst, s->logits + (size_t)dev_row * V, bytes, cudaMemcpyDeviceToHost, s->stream);
}

// copy_head_down: the argmax (d_argmax, computed before), top-k and lse (computed here from s->logits: bn_cu_topk
// per row, bn_cu_lse_rows) and/or logits of the rows dev_row.. of s->logits, as out asks, into out's rows
// out_row.. on the host, async.
static cudaError_t copy_head_down(bn_cuda_state *s, const bn_forward_out *out, int out_row, int rows, int dev_row = 0) {
    const int V = s->cm->cfg.n_vocab;
    const float *logits = s->logits + (size_t)dev_row * V;
    if (out && out->argmax) {
        const cudaError_t e = cudaMemcpyAsync(out->argmax + out_row, s->d_argmax + dev_row,
                                              sizeof(int32_t) * (size_t)rows, cudaMemcpyDeviceToHost, s->stream);
        if (e != cudaSuccess) return e;
    }
    if (out && out->topk > 0) {
        const int k = out->topk;
        float *vals = s->d_topk_vals + (size_t)dev_row * k;
        int32_t *ids = s->d_topk_ids + (size_t)dev_row * k;
        for (int r = 0; r < rows; r++) {
            const cudaError_t e = bn_cu_topk(logits + (size_t)r * V, V, k, vals + (size_t)r * k, ids + (size_t)r * k,
                                             s->topk_scratch, s->stream);
            if (e != cudaSuccess) return e;
        }
        const size_t n = (size_t)rows * k, off = (size_t)out_row * k;
        cudaError_t e = cudaMemcpyAsync(out->topk_logits + off, vals, sizeof(float) * n, cudaMemcpyDeviceToHost,
                                        s->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(out->topk_ids + off, ids, sizeof(int32_t) * n, cudaMemcpyDeviceToHost, s->stream);
        if (e != cudaSuccess) return e;
    }
    if (out && out->lse) {
        cudaError_t e = bn_cu_lse_rows(logits, V, rows, s->d_lse + dev_row, s->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(out->lse + out_row, s->d_lse + dev_row, sizeof(float) * (size_t)rows,
                                cudaMemcpyDeviceToHost, s->stream);
        if (e != cudaSuccess) return e;
    }
    return out && out->logits ? copy_logits_down(s, out->logits + (size_t)out_row * V, rows, dev_row) : cudaSuccess;
}

// ---- the layer loop -----------------------------------------------------------------------------
#define TRY(call)                                                                                                   \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) return e_;                                                                           \
    } while (0)

// fused_q8: where the producer of the input of W[0..n) writes its Q8 activations (*q, in the state's matmul
// scratch) so that the group skips its quantize launch; returns q, or NULL when the group quantizes (or converts)
// its own input: fusion off (BONSAI_CUDA_FUSE=0), nb on the GEMM path, a float first weight (a later weight of
// another element order quantizes the producer's fp32 output itself).
static const bn_q8_out *fused_q8(bn_cuda_state *s, const bn_cu_weight *const *w, int n, int nb, bn_q8_out *q) {
    return !s->no_fuse && bn_cu_q8_fusable(w, n, nb, s->mm_scratch, q) ? q : NULL;
}

// mm_from: y[i] = W[i]·x for the n weights of one input: from the Q8 activations its producer left in the scratch
// when q8 (fused_q8 of the same group), else from x.
static cudaError_t mm_from(bn_cuda_state *s, const bn_cu_weight *const *w, int n, const float *x, float *const *y,
                           int nb, const bn_q8_out *q8) {
    if (q8) return bn_cu_matmul_multi_q8(w, n, x, y, nb, s->mm_scratch, s->stream);
    return bn_cu_matmul_multi(w, n, x, y, nb, s->mm_scratch, s->blas, s->stream);
}

// mixer_inputs: the weights layer il's mixer multiplies xn by, into ws (4 slots); returns their count.
static int mixer_inputs(const bn_cuda_state *s, int il, const bn_cu_weight **ws) {
    const cu_layer *L = &s->cm->layers[il];
    if (s->cm->cfg.is_recurrent[il]) {
        ws[0] = &L->attn_qkv, ws[1] = &L->attn_gate, ws[2] = &L->ssm_beta, ws[3] = &L->ssm_alpha;
        return 4;
    }
    ws[0] = &L->attn_q, ws[1] = &L->attn_k, ws[2] = &L->attn_v;
    return 3;
}

// mixer_q8: fused_q8 for the input of layer il's mixer (the norm before it writes the Q8 activations).
static const bn_q8_out *mixer_q8(bn_cuda_state *s, int il, int nb, bn_q8_out *q) {
    const bn_cu_weight *ws[4];
    const int n = mixer_inputs(s, il, ws);
    return fused_q8(s, ws, n, nb, q);
}

// ffn_q8: fused_q8 for ffn gate|up of layer il.
static const bn_q8_out *ffn_q8(bn_cuda_state *s, int il, int nb, bn_q8_out *q) {
    const cu_layer *L = &s->cm->layers[il];
    const bn_cu_weight *ws[] = {&L->ffn_gate, &L->ffn_up};
    return fused_q8(s, ws, 2, nb, q);
}

// attention_layer: s->mo = attention(s->xn) for nb tokens at d_pos.., appending to the KV cache; xq8: xn's Q8
// activations are already in the scratch (mixer_q8). The attention merge writes attn_output's Q8 activations when
// that fuses (hd a multiple of 32).
static cudaError_t attention_layer(bn_cuda_state *s, int il, int nb, const bn_q8_out *xq8, const bn_cu_cols *cols) {
    const bn_config *c = &s->cm->cfg;
    const cu_layer *L = &s->cm->layers[il];
    const int hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv, kv_dim = nkv * hd;
    const bool gated = c->arch == BN_ARCH_QWEN35, neox = c->arch != BN_ARCH_LLAMA;
    const int head_stride = gated ? 2 * hd : hd, q_stride = nh * head_stride;
    const float theta_scale = powf(c->rope_base, -2.0f / (float)c->n_rot);
    float *qg = s->qg, *kb = s->kb, *vb = s->vb; // qg per head: query [, gate]
    const bn_cu_weight *ws[4];
    const int n_in = mixer_inputs(s, il, ws);
    float *const ys[] = {qg, kb, vb};
    TRY(mm_from(s, ws, n_in, s->xn, ys, nb, xq8));
    if (L->q_bias) TRY(bn_cu_add_bias(qg, L->q_bias, q_stride, nb, s->stream));
    if (L->k_bias) TRY(bn_cu_add_bias(kb, L->k_bias, kv_dim, nb, s->stream));
    if (L->v_bias) TRY(bn_cu_add_bias(vb, L->v_bias, kv_dim, nb, s->stream));
    const bool f16 = s->kv_type == T_F16;
    TRY(bn_cu_attn_prep(qg, q_stride, head_stride, kb, vb, s->k_cache[il], s->v_cache[il], f16, nh, nkv, hd, L->q_norm,
                        L->k_norm, c->norm_eps, c->n_rot, theta_scale, neox, nb, s->d_pos, s->stream, cols));
    const int n_splits = nb <= BN_CU_MMVQ_MAX_NB ? s->n_splits : 1;
    const bn_cu_weight *out_w[] = {&L->attn_output};
    bn_q8_out oq;
    const bn_q8_out *out_q8 = hd % 32 == 0 ? fused_q8(s, out_w, 1, nb, &oq) : NULL;
    TRY(bn_cu_attention(s->att, qg, q_stride, head_stride, gated, s->k_cache[il], s->v_cache[il], f16, nh, nkv, hd,
                        1.0f / sqrtf((float)hd), nb, s->d_pos, n_splits, s->att_scratch, s->stream, out_q8, cols,
                        s->attn_tiled));
    return mm_from(s, out_w, 1, s->att, &s->mo, nb, out_q8);
}

// gdn_layer: s->mo = GatedDeltaNet(s->xn) for nb tokens, advancing the conv window and S (copied
// after each token t to snaps[t] when snaps, a device pointer table, is not NULL); xq8 as attention_layer.
// The gated norm writes ssm_out's Q8 activations when that fuses (dk a multiple of 32).
static cudaError_t gdn_layer(bn_cuda_state *s, int il, int nb, float *const *snaps, const bn_q8_out *xq8,
                             const bn_cu_cols *cols) {
    const bn_config *c = &s->cm->cfg;
    const cu_layer *L = &s->cm->layers[il];
    const int dk = c->ssm_d_state, Hk = c->ssm_n_group, Hv = c->ssm_dt_rank;
    const int conv_dim = 2 * Hk * dk + Hv * dk;
    // mix {conv_dim, nb}, z {Hv*dv, nb}, beta and alpha logits {Hv, nb}
    float *mix = s->qg, *z = s->z, *bb = s->bb, *ab = s->ab;
    const bn_cu_weight *ws[4];
    const int n_in = mixer_inputs(s, il, ws);
    float *const ys[] = {mix, z, bb, ab};
    TRY(mm_from(s, ws, n_in, s->xn, ys, nb, xq8));
    const size_t conv_off = (size_t)(s->conv[il] - s->recurrent), ssm_off = (size_t)(s->ssm[il] - s->recurrent);
    TRY(bn_cu_gdn_conv_norm(mix, s->conv[il], L->conv1d, Hk, Hv, dk, c->ssm_conv_kernel, nb, c->norm_eps,
                            1.0f / sqrtf((float)dk), snaps, conv_off, s->conv_scratch, s->stream, cols));
    const bn_cu_weight *out_w[] = {&L->ssm_out};
    bn_q8_out oq;
    const bn_q8_out *out_q8 = dk % 32 == 0 ? fused_q8(s, out_w, 1, nb, &oq) : NULL;
    if (s->gdn_norm && nb <= BN_CU_MMVQ_MAX_NB && bn_cu_gdn_recurrence_norm_takes(dk, dk)) { // one launch (opt-in)
        TRY(bn_cu_gdn_recurrence_norm(s->ssm[il], mix, bb, ab, L->ssm_dt, L->ssm_a, z, L->ssm_norm, c->norm_eps, s->att,
                                      dk, dk, Hk, Hv, conv_dim, nb, snaps, ssm_off, s->stream, out_q8, cols));
    } else {
        TRY(bn_cu_gdn_recurrence(s->ssm[il], mix, bb, ab, L->ssm_dt, L->ssm_a, s->att, dk, dk, Hk, Hv, conv_dim, nb,
                                 snaps, ssm_off, s->stream, cols));
        TRY(bn_cu_gated_rmsnorm(s->att, s->att, z, L->ssm_norm, dk, Hv * nb, c->norm_eps, s->stream, out_q8));
    }
    return mm_from(s, out_w, 1, s->att, &s->mo, nb, out_q8);
}

// ffn: s->mo = ffn_down · (SiLU(ffn_gate · xn) ⊙ (ffn_up · xn)); xq8: xn's Q8 activations are already in the
// scratch (ffn_q8). SwiGLU writes ffn_down's Q8 activations when that fuses.
static cudaError_t ffn(bn_cuda_state *s, int il, int nb, const bn_q8_out *xq8) {
    const cu_layer *L = &s->cm->layers[il];
    const int F = s->cm->cfg.n_ff;
    float *gate = s->gate, *up = s->up;
    const bn_cu_weight *ws[] = {&L->ffn_gate, &L->ffn_up};
    float *const ys[] = {gate, up};
    TRY(mm_from(s, ws, 2, s->xn, ys, nb, xq8));
    const bn_cu_weight *down[] = {&L->ffn_down};
    bn_q8_out dq;
    const bn_q8_out *down_q8 = fused_q8(s, down, 1, nb, &dq);
    TRY(bn_cu_swiglu(gate, gate, up, (int64_t)nb * F, s->stream, down_q8));
    return mm_from(s, down, 1, gate, &s->mo, nb, down_q8);
}

// The sequences of a batched pass: n states, state i appending n_tok[i] tokens (n_tok NULL: one each) as
// consecutive columns, with device snapshots snaps[i][0..n_tok[i]) after them (snaps or snaps[i] NULL: none).
struct seqs_in {
    bn_cuda_state *const *states;
    const int *n_tok;
    bn_cuda_snapshot *const *const *snaps;
    int n;
};
// seq_len: the token count of sequence i of q.
static int seq_len(const seqs_in &q, int i) { return q.n_tok ? q.n_tok[i] : 1; }

// Where one chunk's residual stream goes after each tap layer (bn_forward_out.taps layout: host memory,
// or the state's device tap buffer), and whether the recurrent state after each token goes to the
// snapshots in s->d_snap_ptrs. A batched pass instead gives each sequence's out (seqs, outs), or, when every tap
// goes to its sequence's device tap buffer with one tap layer list, that list (n_col_taps, col_tap_layers): each
// column's row is then in the column table (graph-capturable).
struct tap_dst {
    const bn_forward_out *out; // NULL or no taps: none
    int t_off;                 // index of the chunk's first token in the call
    bool dev_snaps;            // per-token device snapshots (bn_cuda_forward_snaps)
    const seqs_in *seqs;       // a batched pass with per-row copies: its sequences (NULL: none)
    bn_forward_out *const *outs; // with seqs: outs[i] receives sequence i's taps (NULL entries: none)
    int n_col_taps;            // a batched pass with table taps: the tap slots (0: none),
    const int *col_tap_layers; //   the layer of each
};
// chunk_taps: the tap_dst of a chunk of one sequence (out's taps from row t_off; dev_snaps as above).
static tap_dst chunk_taps(const bn_forward_out *out, int t_off, bool dev_snaps) {
    tap_dst td = {};
    td.out = out, td.t_off = t_off, td.dev_snaps = dev_snaps;
    return td;
}

// tap_rows_kernel: block t: dst[(*d_row + t)·dst_stride + i] = src[t·n + i] for i < n (one tap layer's rows
// into the [rows][n_taps][E] device tap layout, from the row in device memory: a graph replays unchanged).
static __global__ void tap_rows_kernel(float *dst, const int *d_row, size_t dst_stride, const float *src, int n) {
    bn_cu_grid_begin();
    const int t = blockIdx.x;
    float *row = dst + (size_t)(*d_row + t) * dst_stride;
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = src[(size_t)t * n + i];
}

// dev_tap_row: the row of the state's device tap buffer that out->taps points at (the buffer itself: 0),
// -1 when out has no taps or they go to host memory, -2 when they point inside the buffer off a row start.
static long dev_tap_row(const bn_cuda_state *s, const bn_forward_out *out) {
    if (!out || !out->taps || !s->dev_taps) return -1;
    if (out->taps == s->dev_taps) return 0;
    const uintptr_t p = (uintptr_t)out->taps, base = (uintptr_t)s->dev_taps;
    if (p < base || p >= base + s->dev_tap_floats * sizeof(float)) return -1;
    const size_t off = (size_t)(out->taps - s->dev_taps), row_floats = (size_t)out->n_taps * s->cm->cfg.n_embd;
    return row_floats && off % row_floats == 0 ? (long)(off / row_floats) : -2;
}

// set_tap_row: d_pos[1] = row (the first device tap buffer row of the next pass), copied only when it changes.
static cudaError_t set_tap_row(bn_cuda_state *s, int row) {
    if (row == s->tap_row) return cudaSuccess;
    s->h_io[3] = row;
    TRY(cudaMemcpyAsync(s->d_pos + 1, &s->h_io[3], sizeof(int), cudaMemcpyHostToDevice, s->stream));
    s->tap_row = row;
    return cudaSuccess;
}

// copy_taps: the residual rows of tap layer slot k of this chunk into out->taps: one kernel when they go to
// the state's device tap buffer (from the row in d_pos[1]), else one strided device-to-host copy (counted in
// bn_cuda_host_tap_bytes).
static cudaError_t copy_taps(bn_cuda_state *s, const tap_dst &taps, int k, int nb) {
    const bn_forward_out *out = taps.out;
    const int H = s->cm->cfg.n_embd;
    const size_t row_stride = (size_t)out->n_taps * H;
    if (dev_tap_row(s, out) >= 0) {
        float *dst = s->dev_taps + (size_t)taps.t_off * row_stride + (size_t)k * H;
        BN_LAUNCH(tap_rows_kernel, nb, 256, 0, s->stream, dst, s->d_pos + 1, row_stride, s->x, H);
        return cudaGetLastError();
    }
    float *dst = out->taps + (size_t)taps.t_off * row_stride + (size_t)k * H;
    TRY(cudaMemcpy2DAsync(dst, sizeof(float) * row_stride, s->x, sizeof(float) * H, sizeof(float) * H, nb,
                          cudaMemcpyDeviceToHost, s->stream));
    bn_cu_count_host_tap_bytes(sizeof(float) * H * (size_t)nb);
    return cudaSuccess;
}

// copy_seq_taps: the residual rows of a batched pass after layer il into the taps of each sequence's out that
// taps it: one strided copy per sequence and tap slot (device-to-device into the sequence's own device tap buffer,
// else down to host memory).
static cudaError_t copy_seq_taps(bn_cuda_state *s, const tap_dst &taps, int il) {
    const int H = s->cm->cfg.n_embd;
    const seqs_in &q = *taps.seqs;
    for (int i = 0, c0 = 0; i < q.n; c0 += seq_len(q, i), i++) {
        const bn_forward_out *o = taps.outs ? taps.outs[i] : NULL;
        if (!o || !o->taps) continue;
        const bool dev = dev_tap_row(q.states[i], o) >= 0;
        const size_t row_stride = (size_t)o->n_taps * H;
        for (int k = 0; k < o->n_taps; k++) {
            if (o->tap_layers[k] != il) continue;
            TRY(cudaMemcpy2DAsync(o->taps + (size_t)k * H, sizeof(float) * row_stride, s->x + (size_t)c0 * H,
                                  sizeof(float) * H, sizeof(float) * H, seq_len(q, i),
                                  dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, s->stream));
            if (!dev) bn_cu_count_host_tap_bytes(sizeof(float) * H * (size_t)seq_len(q, i));
        }
    }
    return cudaSuccess;
}

// tap_cols_kernel: block t: rows[t][k·n + i] = src[t·n + i] for i < n where rows[t] (column t's row in its sequence's
// device tap buffer, from the column table: a graph replays unchanged) is not NULL: tap slot k of a batched pass.
static __global__ void tap_cols_kernel(float *const *rows, int k, const float *src, int n) {
    bn_cu_grid_begin();
    float *row = rows[blockIdx.x];
    if (!row) return;
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[(size_t)k * n + i] = src[(size_t)blockIdx.x * n + i];
}

// col_tap_rows: the tap-row part of s's column table (device).
static float *const *col_tap_rows(const bn_cuda_state *s) { return (float *const *)(s->d_cols + 3 * MAX_BATCH_COLS); }

// layer_cols: the columns of layer il in a batched pass (the device column table upload_cols uploaded).
static bn_cu_cols layer_cols(const bn_cuda_state *s, int il) {
    void **base = s->d_cols + 4 * MAX_BATCH_COLS + (size_t)il * 4 * MAX_BATCH_COLS;
    return bn_cu_cols{(const int *)s->d_cols, base, base + MAX_BATCH_COLS, (float *const *)(base + 2 * MAX_BATCH_COLS),
                      (float *const *)(base + 3 * MAX_BATCH_COLS), (const int *)(s->d_cols + MAX_BATCH_COLS),
                      (float *const *)(s->d_cols + 2 * MAX_BATCH_COLS)};
}

// run_layers: embeds s->d_tokens[0..nb) (or, on a model uploaded from a later layer, takes the residual
// rows already in s->x) and runs the device's layers at d_pos, then advances d_pos by nb; taps written as
// they are produced. Everything is enqueued on s->stream (graph-capturable when taps are absent). batch: the nb
// rows are the columns of a batched pass (layer_cols; each column's own state and position, snapshots from the
// table; taps through taps.seqs; d_pos untouched).
static cudaError_t run_layers(bn_cuda_state *s, int nb, tap_dst taps, bool batch = false) {
    const bn_config *c = &s->cm->cfg;
    const int H = c->n_embd, l0 = s->cm->first_layer;
    const cu_layer *layers = s->cm->layers;
    if (l0 == 0) TRY(bn_cu_get_rows(&s->cm->token_embd, s->d_tokens, s->x, nb, s->stream));
    bn_q8_out xq; // where the norm before each matmul group writes its Q8 activations (fused_q8)
    const bn_q8_out *xq8 = mixer_q8(s, l0, nb, &xq);
    TRY(bn_cu_rmsnorm(s->xn, s->x, layers[l0].attn_norm, H, nb, c->norm_eps, s->stream, xq8));
    for (int il = l0; il < c->n_layer; il++) {
        // x += mixer(xn); xn = norm(x); x += ffn(xn); xn = next layer's attn_norm(x)
        const bn_cu_cols cols = batch ? layer_cols(s, il) : bn_cu_cols{};
        TRY(c->is_recurrent[il] ? gdn_layer(s, il, nb, taps.dev_snaps ? s->d_snap_ptrs : NULL, xq8, &cols)
                                : attention_layer(s, il, nb, xq8, &cols));
        xq8 = ffn_q8(s, il, nb, &xq);
        TRY(bn_cu_add_rmsnorm(s->x, s->mo, s->xn, layers[il].post_norm, H, nb, c->norm_eps, s->stream, xq8));
        TRY(ffn(s, il, nb, xq8));
        xq8 = il + 1 < c->n_layer ? mixer_q8(s, il + 1, nb, &xq) : NULL;
        if (il + 1 < c->n_layer)
            TRY(bn_cu_add_rmsnorm(s->x, s->mo, s->xn, layers[il + 1].attn_norm, H, nb, c->norm_eps, s->stream, xq8));
        else
            TRY(bn_cu_add(s->x, s->mo, (int64_t)nb * H, s->stream));
        const bn_forward_out *out = taps.out;
        for (int k = 0; out && out->taps && k < out->n_taps; k++)
            if (out->tap_layers[k] == il) TRY(copy_taps(s, taps, k, nb));
        if (taps.seqs) TRY(copy_seq_taps(s, taps, il));
        for (int k = 0; k < taps.n_col_taps; k++)
            if (taps.col_tap_layers[k] == il) {
                BN_LAUNCH(tap_cols_kernel, nb, 256, 0, s->stream, col_tap_rows(s), k, (const float *)s->x, H);
                TRY(cudaGetLastError());
            }
    }
    return batch ? cudaSuccess : bn_cu_advance_pos(s->d_pos, nb, s->stream);
}

// head_norm: final norm of n_rows residual rows starting at row `first` into s->xn (row 0..); with hq8 (head_q8)
// also the head's Q8 activations.
static cudaError_t head_norm(bn_cuda_state *s, int first, int n_rows, const bn_q8_out *hq8) {
    const bn_config *c = &s->cm->cfg;
    return bn_cu_rmsnorm(s->xn, s->x + (size_t)first * c->n_embd, s->cm->output_norm, c->n_embd, n_rows, c->norm_eps,
                         s->stream, hq8);
}

// head_q8: fused_q8 for the head over n_rows rows when they fit one block of logits rows (else NULL).
static const bn_q8_out *head_q8(bn_cuda_state *s, int n_rows, bn_q8_out *q) {
    const bn_cu_weight *head[] = {&s->cm->output};
    return n_rows <= s->logit_rows ? fused_q8(s, head, 1, n_rows, q) : NULL;
}

// head_logits: s->logits {V, rows} = output · s->xn rows r0.. (from the Q8 activations head_norm wrote when hq8,
// which covers exactly these rows).
static cudaError_t head_logits(bn_cuda_state *s, int r0, int rows, const bn_q8_out *hq8) {
    const bn_cu_weight *head[] = {&s->cm->output};
    return mm_from(s, head, 1, s->xn + (size_t)r0 * s->cm->cfg.n_embd, &s->logits, rows, hq8);
}

// chunk_outputs: hidden / logits / their argmax / top-k of this chunk's output rows copied to the host (see
// forward.c).
static cudaError_t chunk_outputs(bn_cuda_state *s, int nb, int t_off, int n_total, const bn_forward_out *out) {
    const bn_config *c = &s->cm->cfg;
    const int H = c->n_embd, V = c->n_vocab;
    const bool head = bn_forward_wants_head(out);
    if (!head && (!out || !out->hidden)) return cudaSuccess;
    int first, n_rows, out_row;
    if (out->all_logits) {
        first = 0, n_rows = nb, out_row = t_off;
    } else {
        if (t_off + nb != n_total) return cudaSuccess;
        first = nb - 1, n_rows = 1, out_row = 0;
    }
    bn_q8_out hq;
    const bn_q8_out *hq8 = head ? head_q8(s, n_rows, &hq) : NULL; // then one block, r0 0
    TRY(head_norm(s, first, n_rows, hq8));
    if (out->hidden)
        TRY(cudaMemcpyAsync(out->hidden + (size_t)out_row * H, s->xn, sizeof(float) * H * n_rows,
                            cudaMemcpyDeviceToHost, s->stream));
    for (int r0 = 0; head && r0 < n_rows; r0 += s->logit_rows) {
        const int rows = n_rows - r0 < s->logit_rows ? n_rows - r0 : s->logit_rows;
        TRY(head_logits(s, r0, rows, hq8));
        if (out->argmax) TRY(bn_cu_argmax_rows(s->logits, V, rows, s->d_argmax, s->stream));
        TRY(copy_head_down(s, out, out_row + r0, rows));
    }
    return cudaSuccess;
}

// cuda_fail: fills err with a CUDA error of `what`; returns -1.
static int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
    cudaGetLastError();
    return bn_err(err, errlen, "CUDA error: %s in %s (the state is undefined; reset it)", cudaGetErrorString(e), what);
}

// The rows entering the device's first layer: token ids (a whole-model upload embeds them on the device) or
// host residual rows {n_embd, n} (a model uploaded from a later layer, bn_cuda_forward_hidden).
struct rows_in {
    const int32_t *tokens;
    const float *x;
};

// upload_rows: rows [t0, t0 + nb) of in into s->d_tokens or s->x, on s->stream.
static cudaError_t upload_rows(bn_cuda_state *s, rows_in in, int t0, int nb) {
    const size_t H = (size_t)s->cm->cfg.n_embd;
    if (in.x)
        return cudaMemcpyAsync(s->x, in.x + (size_t)t0 * H, sizeof(float) * H * nb, cudaMemcpyHostToDevice, s->stream);
    return cudaMemcpyAsync(s->d_tokens, in.tokens + t0, sizeof(int32_t) * nb, cudaMemcpyHostToDevice, s->stream);
}

static int step_kind_for(const bn_cuda_state *s, const bn_forward_out *out);
static bool verify_graph_ok(const bn_cuda_state *s, int n, const bn_forward_out *out);
static cudaError_t run_verify_graph(bn_cuda_state *s, int n, const bn_forward_out *out);
static int forward_one_graph(bn_cuda_state *s, rows_in in, step_kind kind, bn_forward_out *out, char *err,
                             size_t errlen);

// check_dev_taps: when out's taps go to the state's device tap buffer, they start at a row and n token rows
// fit from there; 0 or -1.
static int check_dev_taps(const bn_cuda_state *s, int n, const bn_forward_out *out, char *err, size_t errlen) {
    const long row = dev_tap_row(s, out);
    if (row == -1) return 0;
    if (row < 0)
        return bn_err(err, errlen, "bn_cuda_forward: taps point inside the device tap buffer, off a row start");
    const size_t need = ((size_t)row + (size_t)n) * (size_t)out->n_taps * (size_t)s->cm->cfg.n_embd;
    if (need > s->dev_tap_floats)
        return bn_err(err, errlen, "bn_cuda_forward: %d tokens x %d taps from row %ld exceed the device tap buffer "
                      "(%zu floats)", n, out->n_taps, row, s->dev_tap_floats);
    return 0;
}

// start_taps: with taps into the device tap buffer, its row for this pass into d_pos[1] (async on s->stream).
static cudaError_t start_taps(bn_cuda_state *s, const bn_forward_out *out) {
    const long row = dev_tap_row(s, out);
    return row >= 0 ? set_tap_row(s, (int)row) : cudaSuccess;
}

// forward_rows: bn_cuda_forward after its checks, for token or residual-row input.
static int forward_rows(bn_cuda_state *s, rows_in in, int n, bn_forward_out *out, char *err, size_t errlen) {
    if (n == 0) return 0;
    // one token with logits and/or device-buffer taps: the captured step graph (no per-kernel launch cost)
    const int kind = n == 1 ? step_kind_for(s, out) : -1;
    if (kind >= 0) return forward_one_graph(s, in, (step_kind)kind, out, err, errlen);
    // with snapshots, one token per chunk so the recurrent state can be copied after each
    const int chunk = out && out->snaps ? 1 : s->n_batch;
    for (int t0 = 0; t0 < n; t0 += chunk) {
        const int nb = n - t0 < chunk ? n - t0 : chunk;
        cudaError_t e = t0 == 0 ? start_taps(s, out) : cudaSuccess;
        if (e == cudaSuccess) e = upload_rows(s, in, t0, nb);
        if (e == cudaSuccess) e = run_layers(s, nb, chunk_taps(out, t0, false));
        if (e == cudaSuccess) e = chunk_outputs(s, nb, t0, n, out);
        if (e == cudaSuccess && out && out->snaps)
            e = cudaMemcpyAsync(out->snaps[t0]->data, s->recurrent, s->n_recurrent * sizeof(float),
                                cudaMemcpyDeviceToHost, s->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
        if (e != cudaSuccess) return cuda_fail(e, "bn_cuda_forward", err, errlen);
        s->pos += nb;
        if (out && out->snaps) out->snaps[t0]->pos = s->pos;
    }
    return 0;
}

// forward_rows_snaps: bn_cuda_forward_snaps after the common checks, for token or residual-row input.
static int forward_rows_snaps(bn_cuda_state *s, rows_in in, int n, bn_forward_out *out, bn_cuda_snapshot *const *snaps,
                              char *err, size_t errlen) {
    if (out && out->snaps) return bn_err(err, errlen, "bn_cuda_forward_snaps: give device snapshots only (out->snaps set)");
    if (n > MAX_SNAPS || n > s->n_batch)
        return bn_err(err, errlen, "bn_cuda_forward_snaps: %d tokens (at most %d per call)", n,
                      MAX_SNAPS < s->n_batch ? MAX_SNAPS : s->n_batch);
    for (int t = 0; t < n; t++)
        if (!snaps || !snaps[t] || snaps[t]->n != s->n_recurrent)
            return bn_err(err, errlen, "snaps[%d] is missing or belongs to another model", t);
    if (n == 0) return 0;
    for (int t = 0; t < n; t++) s->h_snap_ptrs[t] = snaps[t]->data;
    cudaError_t e = cudaMemcpyAsync(s->d_snap_ptrs, s->h_snap_ptrs, sizeof(float *) * n, cudaMemcpyHostToDevice,
                                    s->stream);
    if (e == cudaSuccess) e = start_taps(s, out);
    if (e == cudaSuccess) e = upload_rows(s, in, 0, n);
    if (e == cudaSuccess && verify_graph_ok(s, n, out)) { // the captured pass of this size (no launch cost)
        e = run_verify_graph(s, n, out);
    } else {
        if (e == cudaSuccess) e = run_layers(s, n, chunk_taps(out, 0, true));
        if (e == cudaSuccess) e = chunk_outputs(s, n, 0, n, out);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return cuda_fail(e, "bn_cuda_forward_snaps", err, errlen);
    for (int t = 0; t < n; t++) snaps[t]->pos = s->pos + t + 1;
    s->pos += n;
    return 0;
}

// check_input: the state takes token ids (want_tokens) or residual rows; 0 or -1.
static int check_input(const bn_cuda_state *s, bool want_tokens, const char *fn, char *err, size_t errlen) {
    const int l0 = s->cm->first_layer;
    if (want_tokens && l0 > 0)
        return bn_err(err, errlen, "%s: the state's model starts at layer %d (use bn_cuda_forward_hidden)", fn, l0);
    if (!want_tokens && l0 == 0)
        return bn_err(err, errlen, "%s: the state's model starts at layer 0 (use bn_cuda_forward)", fn);
    return 0;
}

int bn_cuda_forward(bn_cuda_state *s, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen) {
    if (check_input(s, true, "bn_cuda_forward", err, errlen) != 0) return -1;
    if (bn_forward_check(&s->cm->cfg, s->pos, s->n_ctx, s->n_recurrent, tokens, n, out, err, errlen) != 0) return -1;
    if (check_dev_taps(s, n, out, err, errlen) != 0) return -1;
    return forward_rows(s, rows_in{tokens, NULL}, n, out, err, errlen);
}

int bn_cuda_forward_snaps(bn_cuda_state *s, const int32_t *tokens, int n, bn_forward_out *out,
                          bn_cuda_snapshot *const *snaps, char *err, size_t errlen) {
    if (check_input(s, true, "bn_cuda_forward_snaps", err, errlen) != 0) return -1;
    if (bn_forward_check(&s->cm->cfg, s->pos, s->n_ctx, s->n_recurrent, tokens, n, out, err, errlen) != 0) return -1;
    if (check_dev_taps(s, n, out, err, errlen) != 0) return -1;
    return forward_rows_snaps(s, rows_in{tokens, NULL}, n, out, snaps, err, errlen);
}

int bn_cuda_forward_hidden(bn_cuda_state *s, const float *x, int n, bn_forward_out *out, bn_cuda_snapshot *const *snaps,
                           char *err, size_t errlen) {
    if (check_input(s, false, "bn_cuda_forward_hidden", err, errlen) != 0) return -1;
    if (!x && n > 0) return bn_err(err, errlen, "bn_cuda_forward_hidden: no input rows");
    if (bn_forward_check(&s->cm->cfg, s->pos, s->n_ctx, s->n_recurrent, NULL, n, out, err, errlen) != 0) return -1;
    if (check_dev_taps(s, n, out, err, errlen) != 0) return -1;
    const rows_in in = {NULL, x};
    return snaps ? forward_rows_snaps(s, in, n, out, snaps, err, errlen) : forward_rows(s, in, n, out, err, errlen);
}

// batch_check: the inputs of a batched pass (every sequence, before any pass runs): token ids (in.tokens, the
// sequences' tokens one after another) for whole-model states, residual rows (in.x) for states of a model uploaded
// from a later layer; each sequence's tokens within its n_ctx, its snapshots of its model, its taps (if any) in host
// memory or its own device tap buffer; fn names the caller in errors; 0 or -1 with err.
static int batch_check(const char *fn, const seqs_in &q, rows_in in, bn_forward_out *const *outs, char *err,
                       size_t errlen) {
    bn_cuda_state *s = q.states[0];
    if (!s) return bn_err(err, errlen, "%s: sequence 0 is missing", fn);
    if (check_input(s, in.tokens != NULL, fn, err, errlen) != 0) return -1;
    for (int i = 0, c0 = 0; i < q.n; c0 += seq_len(q, i), i++) {
        const bn_cuda_state *st = q.states[i];
        const int n = seq_len(q, i);
        if (!st || st->cm != s->cm || st->kv_type != s->kv_type)
            return bn_err(err, errlen, "%s: sequence %d is missing or not a state of the first one's model and KV "
                          "type", fn, i);
        for (int u = 0; u < i; u++)
            if (q.states[u] == st) return bn_err(err, errlen, "%s: sequences %d and %d share a state", fn, u, i);
        if (n < 1) return bn_err(err, errlen, "%s: sequence %d has %d tokens (at least 1)", fn, i, n);
        const bn_forward_out *o = outs ? outs[i] : NULL;
        if (o && o->snaps)
            return bn_err(err, errlen, "%s: sequence %d: host snapshots need bn_cuda_forward (give device ones)", fn, i);
        if (bn_forward_check(&st->cm->cfg, st->pos, st->n_ctx, st->n_recurrent, in.tokens ? in.tokens + c0 : NULL, n,
                             o, err, errlen) != 0)
            return -1;
        if (check_dev_taps(st, n, o, err, errlen) != 0) return -1;
        for (int j = 0; q.snaps && q.snaps[i] && j < n; j++)
            if (!q.snaps[i][j] || q.snaps[i][j]->n != st->n_recurrent)
                return bn_err(err, errlen, "%s: sequence %d: snaps[%d] is missing or belongs to another model", fn, i,
                              j);
    }
    return 0;
}

// upload_cols: the column table of q (positions, runs, snapshot pointers and, with table taps, each column's row of
// outs[i]->taps, then per layer the k, v, conv, ssm pointers; sequence i's n_tok[i] columns from its position on)
// into states[0]'s d_cols, and the nb rows of input (tokens into its d_tokens, or residual rows into its x); async on
// its stream.
static cudaError_t upload_cols(const seqs_in &q, rows_in in, int nb, bn_forward_out *const *outs, bool table_taps) {
    bn_cuda_state *s = q.states[0];
    const int L = s->cm->cfg.n_layer, H = s->cm->cfg.n_embd;
    int *pos = (int *)s->h_cols, *run = (int *)(s->h_cols + MAX_BATCH_COLS);
    float **snap = (float **)(s->h_cols + 2 * MAX_BATCH_COLS), **tap = (float **)(s->h_cols + 3 * MAX_BATCH_COLS);
    void **ptrs = s->h_cols + 4 * MAX_BATCH_COLS;
    for (int i = 0, t = 0; i < q.n; i++) {
        const bn_cuda_state *st = q.states[i];
        const int n = seq_len(q, i);
        for (int j = 0; j < n; j++, t++) {
            pos[t] = st->pos + j;
            run[t] = j == 0 ? n : 0;
            snap[t] = q.snaps && q.snaps[i] ? q.snaps[i][j]->data : NULL;
            const bn_forward_out *o = outs ? outs[i] : NULL;
            tap[t] = table_taps && o && o->taps ? o->taps + (size_t)j * o->n_taps * H : NULL;
            for (int il = 0; il < L; il++) {
                void **row = ptrs + (size_t)il * 4 * MAX_BATCH_COLS;
                row[t] = st->k_cache[il], row[MAX_BATCH_COLS + t] = st->v_cache[il];
                row[2 * MAX_BATCH_COLS + t] = st->conv[il], row[3 * MAX_BATCH_COLS + t] = st->ssm[il];
            }
        }
    }
    // pageable host memory: the copy is staged before it returns (h_cols may change for the next step)
    TRY(cudaMemcpyAsync(s->d_cols, s->h_cols, sizeof(void *) * col_table_slots(L), cudaMemcpyHostToDevice, s->stream));
    return upload_rows(s, in, 0, nb);
}

// batch_body: the device part of a batched pass of n columns whose table and tokens are uploaded: the layers (taps
// through taps.seqs), with head the final norm and logits rows (hidden: the norm only), with argmax their argmax
// into d_argmax.
static cudaError_t batch_body(bn_cuda_state *s, int n, bool head, bool hidden, bool argmax,
                              tap_dst taps = tap_dst{}) {
    TRY(run_layers(s, n, taps, true));
    bn_q8_out hq;
    const bn_q8_out *hq8 = head ? head_q8(s, n, &hq) : NULL;
    if (head || hidden) TRY(head_norm(s, 0, n, hq8));
    if (head) TRY(head_logits(s, 0, n, hq8));
    return argmax ? bn_cu_argmax_rows(s->logits, s->cm->cfg.n_vocab, n, s->d_argmax, s->stream) : cudaSuccess;
}

static cudaError_t replay(bn_cuda_state *s, step_kind kind, const step_graph *key);

// batch_step: batch_body, replaying the STEP_BATCH pass of n columns (replay) when head is wanted, graphs are on
// and the taps (if any) go through the table (the table holds the rest; the graph is captured per column count and
// tap layer list), else launched kernel by kernel.
static cudaError_t batch_step(bn_cuda_state *s, int n, bool head, bool hidden, bool argmax, tap_dst taps) {
    if (!head || s->no_graphs || taps.seqs) return batch_body(s, n, head, hidden, argmax, taps);
    step_graph key;
    memset(&key, 0, sizeof key);
    key.n = n, key.all_logits = true, key.argmax = argmax, key.n_taps = taps.n_col_taps;
    if (taps.n_col_taps) memcpy(key.tap_layers, taps.col_tap_layers, sizeof(int) * (size_t)taps.n_col_taps);
    return replay(s, STEP_BATCH, &key);
}

// table_taps: whether the taps of a batched pass (outs of q) can go through the column table: every out with taps
// writes them into its own sequence's device tap buffer, all with one tap layer list of at most MAX_GRAPH_TAPS slots.
// *first: an out with taps (NULL: none).
static bool table_taps(const seqs_in &q, bn_forward_out *const *outs, const bn_forward_out **first) {
    *first = NULL;
    for (int i = 0; outs && i < q.n; i++) {
        const bn_forward_out *o = outs[i];
        if (!o || !o->taps) continue;
        if (dev_tap_row(q.states[i], o) < 0 || o->n_taps > MAX_GRAPH_TAPS) return false;
        if (!*first) *first = o;
        else if (o->n_taps != (*first)->n_taps ||
                 memcmp(o->tap_layers, (*first)->tap_layers, sizeof(int) * (size_t)o->n_taps) != 0)
            return false;
    }
    return true;
}

// batch_pass: one batched pass of q (checked inputs; nb = its token count <= the capacity of states[0], which runs
// it): sequence i's outputs of its last column, or of every column with all_logits, into outs[i].
static int batch_pass(const seqs_in &q, rows_in in, int nb, bn_forward_out *const *outs, char *err, size_t errlen) {
    bn_cuda_state *s = q.states[0]; // its stream, scratch and head rows run the pass
    const int H = s->cm->cfg.n_embd;
    bool head = false, hidden = false, argmax = false, taps = false;
    for (int i = 0; outs && i < q.n; i++)
        if (outs[i])
            head |= bn_forward_wants_head(outs[i]), hidden |= outs[i]->hidden != NULL,
                argmax |= outs[i]->argmax != NULL, taps |= outs[i]->taps != NULL;
    const bn_forward_out *tap_out = NULL;
    const bool by_table = taps && table_taps(q, outs, &tap_out);
    tap_dst td = {};
    if (by_table) td.n_col_taps = tap_out->n_taps, td.col_tap_layers = tap_out->tap_layers;
    else if (taps) td.seqs = &q, td.outs = outs;
    cudaError_t e = upload_cols(q, in, nb, outs, by_table);
    if (e == cudaSuccess) e = batch_step(s, nb, head, hidden, argmax, td);
    for (int i = 0, c0 = 0; e == cudaSuccess && i < q.n; c0 += seq_len(q, i), i++) {
        const bn_forward_out *o = outs ? outs[i] : NULL;
        if (!o) continue;
        const int n = seq_len(q, i), rows = o->all_logits ? n : 1, first = c0 + n - rows;
        if (o->hidden)
            e = cudaMemcpyAsync(o->hidden, s->xn + (size_t)first * H, sizeof(float) * H * (size_t)rows,
                                cudaMemcpyDeviceToHost, s->stream);
        if (e == cudaSuccess && bn_forward_wants_head(o)) e = copy_head_down(s, o, 0, rows, first);
    }
    for (int i = 0; e == cudaSuccess && i < q.n; i++) e = bn_cu_advance_pos(q.states[i]->d_pos, seq_len(q, i), s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return cuda_fail(e, "bn_cuda batched pass", err, errlen);
    for (int i = 0; i < q.n; i++) {
        for (int j = 0; q.snaps && q.snaps[i] && j < seq_len(q, i); j++) q.snaps[i][j]->pos = q.states[i]->pos + j + 1;
        q.states[i]->pos += seq_len(q, i);
    }
    return 0;
}

// pass_capacity: the columns a batched pass run by s holds.
static int pass_capacity(const bn_cuda_state *s) { return s->n_batch < MAX_BATCH_COLS ? s->n_batch : MAX_BATCH_COLS; }

// forward_multi: bn_cuda_forward_multi(_hidden) for token or residual-row input (in: the sequences' rows one after
// another; fn names the caller).
static int forward_multi(const char *fn, bn_cuda_state *const *states, rows_in in, const int *n_tok, int n,
                         bn_forward_out *const *outs, bn_cuda_snapshot *const *const *snaps, char *err, size_t errlen) {
    if (batch_check(fn, seqs_in{states, n_tok, snaps, n}, in, outs, err, errlen) != 0) return -1;
    const size_t H = (size_t)states[0]->cm->cfg.n_embd;
    int rc = 0;
    for (int i0 = 0, c0 = 0; rc == 0 && i0 < n;) { // passes of whole sequences, as many as the first state holds
        int i1 = bn_engine_pass_end(n_tok, n, i0, pass_capacity(states[i0])), nb = 0;
        for (int i = i0; i < i1; i++) nb += n_tok[i];
        const rows_in part = {in.tokens ? in.tokens + c0 : NULL, in.x ? in.x + (size_t)c0 * H : NULL};
        if (i1 == i0) { // one sequence longer than a pass: alone
            bn_forward_out none = {}, *o = outs && outs[i0] ? outs[i0] : &none;
            bn_cuda_snapshot *const *sn = snaps ? snaps[i0] : NULL;
            rc = in.x ? bn_cuda_forward_hidden(states[i0], part.x, n_tok[i0], o, sn, err, errlen)
                 : sn ? bn_cuda_forward_snaps(states[i0], part.tokens, n_tok[i0], o, sn, err, errlen)
                      : bn_cuda_forward(states[i0], part.tokens, n_tok[i0], o, err, errlen);
            nb = n_tok[i0], i1 = i0 + 1;
        } else {
            const seqs_in q = {states + i0, n_tok + i0, snaps ? snaps + i0 : NULL, i1 - i0};
            rc = batch_pass(q, part, nb, outs ? outs + i0 : NULL, err, errlen);
        }
        i0 = i1, c0 += nb;
    }
    return rc;
}

int bn_cuda_forward_multi(bn_cuda_state *const *states, const int32_t *const *tokens, const int *n_tok, int n,
                          bn_forward_out *const *outs, bn_cuda_snapshot *const *const *snaps, char *err,
                          size_t errlen) {
    const char *fn = "bn_cuda_forward_multi";
    if (n < 0) return bn_err(err, errlen, "%s: negative sequence count %d", fn, n);
    if (n == 0) return 0;
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (n_tok[i] < 1 || !tokens[i]) return bn_err(err, errlen, "%s: sequence %d has no tokens", fn, i);
        total += n_tok[i];
    }
    int32_t *all = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)total); // the tokens one sequence after another
    for (int i = 0, c0 = 0; i < n; c0 += n_tok[i], i++) memcpy(all + c0, tokens[i], sizeof(int32_t) * (size_t)n_tok[i]);
    const int rc = forward_multi(fn, states, rows_in{all, NULL}, n_tok, n, outs, snaps, err, errlen);
    free(all);
    return rc;
}

int bn_cuda_forward_batch(bn_cuda_state *const *states, const int32_t *tokens, int n, bn_forward_out *const *outs,
                          char *err, size_t errlen) {
    if (n <= 0) return n == 0 ? 0 : bn_err(err, errlen, "bn_cuda_forward_batch: negative sequence count %d", n);
    if (!tokens) return bn_err(err, errlen, "bn_cuda_forward_batch: no tokens");
    int *ones = (int *)xmalloc(sizeof(int) * (size_t)n);
    for (int t = 0; t < n; t++) ones[t] = 1;
    const int rc = forward_multi("bn_cuda_forward_batch", states, rows_in{tokens, NULL}, ones, n, outs, NULL, err,
                                 errlen);
    free(ones);
    return rc;
}

int bn_cuda_forward_multi_hidden(bn_cuda_state *const *states, const float *x, const int *n_tok, int n,
                                 bn_forward_out *const *outs, bn_cuda_snapshot *const *const *snaps, char *err,
                                 size_t errlen) {
    const char *fn = "bn_cuda_forward_multi_hidden";
    if (n < 0) return bn_err(err, errlen, "%s: negative sequence count %d", fn, n);
    if (n == 0) return 0;
    if (!x) return bn_err(err, errlen, "%s: no input rows", fn);
    return forward_multi(fn, states, rows_in{NULL, x}, n_tok, n, outs, snaps, err, errlen);
}

// ---- one-token steps and verify passes through CUDA graphs ----------------------------------------
// taps_graphable: out's taps (if any) can be written by a captured pass: into the device tap buffer, at most
// MAX_GRAPH_TAPS slots.
static bool taps_graphable(const bn_cuda_state *s, const bn_forward_out *out) {
    return !out || !out->taps || (dev_tap_row(s, out) >= 0 && out->n_taps <= MAX_GRAPH_TAPS);
}

// step_kind_for: the captured step serving a one-token bn_cuda_forward with out, or -1 when it runs
// kernel by kernel (hidden rows or host snapshots wanted, taps into host memory, more tap slots than a
// captured step records, graphs switched off).
static int step_kind_for(const bn_cuda_state *s, const bn_forward_out *out) {
    if (s->no_graphs || !taps_graphable(s, out) || (out && (out->snaps || out->hidden))) return -1;
    return out && out->taps ? STEP_TAPS : STEP_LOGITS;
}

// verify_graph_ok: a bn_cuda_forward_snaps pass of n tokens with out can replay a captured STEP_VERIFY pass
// (mmvq-sized, its logits fit s->logits, no hidden rows, graphable taps, graphs on).
static bool verify_graph_ok(const bn_cuda_state *s, int n, const bn_forward_out *out) {
    return !s->no_graphs && n >= 1 && n <= BN_CU_MMVQ_MAX_NB && n <= s->logit_rows && (!out || !out->hidden) &&
           taps_graphable(s, out);
}

// graph_key: the configuration a pass of this kind and n tokens for out is captured with (the tap buffer
// and slots; the row comes from d_pos[1]).
static step_graph graph_key(const bn_cuda_state *s, step_kind kind, int n, const bn_forward_out *out) {
    step_graph key;
    memset(&key, 0, sizeof key);
    key.n = n;
    key.all_logits = kind == STEP_VERIFY && out && out->all_logits;
    key.argmax = out && out->argmax;
    if (!out || !out->taps) return key;
    key.taps = s->dev_taps;
    key.n_taps = out->n_taps;
    memcpy(key.tap_layers, out->tap_layers, sizeof(int) * (size_t)out->n_taps);
    return key;
}

// serves_key: the captured pass g does what key asks for (the same pass, or that pass plus the argmax).
static bool serves_key(const step_graph *g, const step_graph *key) {
    return g->n == key->n && g->all_logits == key->all_logits && (g->argmax || !key->argmax) &&
           g->taps == key->taps && g->n_taps == key->n_taps &&
           memcmp(g->tap_layers, key->tap_layers, sizeof(int) * (size_t)g->n_taps) == 0;
}

// graph_body: key->n tokens from d_tokens (or the residual rows in s->x) at d_pos, their taps into key's
// buffer and the logits of every row (all_logits) or the last into s->logits; STEP_VERIFY: the per-token
// snapshots of d_snap_ptrs; with key->argmax the argmax of each logits row into d_argmax; STEP_GREEDY: the
// argmax of the logits into d_tokens[0]; STEP_BATCH: batch_body. The same launches as
// the launch-by-launch path (run_layers + chunk_outputs, batch_body), so the same results.
static cudaError_t graph_body(bn_cuda_state *s, step_kind kind, const step_graph *key) {
    if (kind == STEP_BATCH) {
        tap_dst td = {};
        td.n_col_taps = key->n_taps, td.col_tap_layers = key->tap_layers;
        return batch_body(s, key->n, true, true, key->argmax, td);
    }
    bn_forward_out taps_out;
    memset(&taps_out, 0, sizeof taps_out);
    taps_out.taps = (float *)key->taps;
    taps_out.n_taps = key->n_taps;
    taps_out.tap_layers = key->tap_layers;
    const int n = key->n, first = key->all_logits ? 0 : n - 1, rows = key->all_logits ? n : 1;
    TRY(run_layers(s, n, chunk_taps(key->taps ? &taps_out : NULL, 0, kind == STEP_VERIFY)));
    bn_q8_out hq;
    const bn_q8_out *hq8 = head_q8(s, rows, &hq);
    TRY(head_norm(s, first, rows, hq8));
    TRY(head_logits(s, 0, rows, hq8));
    if (key->argmax) TRY(bn_cu_argmax_rows(s->logits, s->cm->cfg.n_vocab, rows, s->d_argmax, s->stream));
    return kind == STEP_GREEDY ? bn_cu_argmax(s->logits, s->cm->cfg.n_vocab, s->d_tokens, s->stream) : cudaSuccess;
}

// capture: records graph_body on s->stream into *exec.
static cudaError_t capture(bn_cuda_state *s, step_kind kind, const step_graph *key, cudaGraphExec_t *exec) {
    return bn_cu_capture(s->stream, exec, [&] { return graph_body(s, kind, key); });
}

// replay: launches the captured pass of this kind serving key (captured on first use, and again when its
// slot holds a pass that does not serve key); async on s->stream, inputs already uploaded.
static cudaError_t replay(bn_cuda_state *s, step_kind kind, const step_graph *key) {
    step_graph *g = kind == STEP_VERIFY ? &s->verify[key->n] : kind == STEP_BATCH ? &s->batch[key->n] : &s->graphs[kind];
    if (g->exec && !serves_key(g, key)) drop_graph(g);
    if (!g->exec) {
        cudaGraphExec_t exec = NULL;
        TRY(capture(s, kind, key, &exec));
        *g = *key;
        g->exec = exec;
        s->n_captures++;
    }
    TRY(cudaGraphLaunch(g->exec, s->stream));
    s->n_replays++;
    return cudaSuccess;
}

// run_step_graph: uploads the token (through pinned h_io) or the residual row and replays the one-token
// step of this kind for out; async on s->stream.
static cudaError_t run_step_graph(bn_cuda_state *s, rows_in in, step_kind kind, const bn_forward_out *out) {
    const step_graph key = graph_key(s, kind, 1, out);
    if (in.tokens) s->h_io[0] = in.tokens[0];
    TRY(upload_rows(s, in.tokens ? rows_in{&s->h_io[0], NULL} : in, 0, 1));
    return replay(s, kind, &key);
}

// run_verify_graph: replays the STEP_VERIFY pass of n tokens for out (inputs, snapshot pointers and tap row
// uploaded) and copies its logits and/or their argmax down; async on s->stream.
static cudaError_t run_verify_graph(bn_cuda_state *s, int n, const bn_forward_out *out) {
    const step_graph key = graph_key(s, STEP_VERIFY, n, out);
    TRY(replay(s, STEP_VERIFY, &key));
    return copy_head_down(s, out, 0, key.all_logits ? n : 1);
}

// forward_one_graph: bn_cuda_forward of one token through the captured step of this kind (logits and/or
// their argmax, if wanted, copied down after it).
static int forward_one_graph(bn_cuda_state *s, rows_in in, step_kind kind, bn_forward_out *out, char *err,
                             size_t errlen) {
    cudaError_t e = start_taps(s, out);
    if (e == cudaSuccess) e = run_step_graph(s, in, kind, out);
    if (e == cudaSuccess) e = copy_head_down(s, out, 0, 1);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return cuda_fail(e, "bn_cuda_forward", err, errlen);
    s->pos += 1;
    return 0;
}

int bn_cuda_decode_greedy(bn_cuda_state *s, int32_t token, int32_t *next, char *err, size_t errlen) {
    if (check_input(s, true, "bn_cuda_decode_greedy", err, errlen) != 0) return -1;
    if (s->pos + 1 > s->n_ctx)
        return bn_err(err, errlen, "context overflow: position %d + 1 token exceeds n_ctx %d", s->pos, s->n_ctx);
    if (token < 0 || token >= s->cm->cfg.n_vocab)
        return bn_err(err, errlen, "bad token id %d (vocabulary has %d tokens)", token, s->cm->cfg.n_vocab);
    cudaError_t e = run_step_graph(s, rows_in{&token, NULL}, STEP_GREEDY, NULL);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&s->h_io[1], s->d_tokens, sizeof(int32_t), cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return cuda_fail(e, "bn_cuda_decode_greedy", err, errlen);
    s->pos += 1;
    *next = s->h_io[1];
    return 0;
}
