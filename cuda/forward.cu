// cuda/forward.cu — the CUDA forward's layer loop (same ops in the same order as core/forward.c) and the head's
// outputs, which every pass runs: one sequence's chunks (cuda/forward_seq.cu), batched and ragged passes
// (cuda/forward_batch.cu) and the captured passes (cuda/forward_graph.cu); shared definitions in
// cuda/forward_pass.cuh. The device model is in cuda/model.cu, the state and snapshots in cuda/state.cu
// (cuda/forward_impl.cuh). Kernels: cuda/ops.cu, gdn.cu, attention.cu (cuda/fwd.cuh) and the matrix kernels of
// cuda/mm.cuh.
#include "cuda/common.cuh"
#include "cuda/forward_pass.cuh"
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

// fw_copy_head_down: the argmax (d_argmax, computed before), top-k and lse (computed here from s->logits: bn_cu_topk
// per row, bn_cu_lse_rows) and/or logits of the rows dev_row.. of s->logits, as out asks, into out's rows
// out_row.. on the host, async.
cudaError_t fw_copy_head_down(bn_cuda_state *s, const bn_forward_out *out, int out_row, int rows, int dev_row) {
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
    TRY(q8 ? bn_cu_matmul_multi_q8(w, n, x, y, nb, s->mm_scratch, s->stream)
           : bn_cu_matmul_multi(w, n, x, y, nb, s->mm_scratch, s->blas, s->stream));
    for (int i = 0; s->cm->lora && i < n; i++) TRY(fw_lora(s, w[i], x, y[i], nb)); // the adapters' deltas
    return cudaSuccess;
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

// fw_chunk_taps: the tap_dst of a chunk of one sequence (out's taps from row t_off; dev_snaps as above).
tap_dst fw_chunk_taps(const bn_forward_out *out, int t_off, bool dev_snaps) {
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

// fw_dev_tap_row: the row of the state's device tap buffer that out->taps points at (the buffer itself: 0),
// -1 when out has no taps or they go to host memory, -2 when they point inside the buffer off a row start.
long fw_dev_tap_row(const bn_cuda_state *s, const bn_forward_out *out) {
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
    if (fw_dev_tap_row(s, out) >= 0) {
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
        const bool dev = fw_dev_tap_row(q.states[i], o) >= 0;
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

// fw_run_layers: embeds s->d_tokens[0..nb) (or, on a model uploaded from a later layer, takes the residual
// rows already in s->x) and runs the device's layers at d_pos, then advances d_pos by nb; taps written as
// they are produced. Everything is enqueued on s->stream (graph-capturable when taps are absent). batch: the nb
// rows are the columns of a batched pass (layer_cols; each column's own state and position, snapshots from the
// table; taps through taps.seqs; d_pos untouched).
cudaError_t fw_run_layers(bn_cuda_state *s, int nb, tap_dst taps, bool batch) {
    const bn_config *c = &s->cm->cfg;
    const int H = c->n_embd, l0 = s->cm->first_layer;
    const cu_layer *layers = s->cm->layers;
    s->lora_cur = batch ? s->d_lora_cols : s->d_lora_own; // the adapters' scales of this pass's columns (and head)
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

// fw_head_norm: final norm of n_rows residual rows starting at row `first` into s->xn (row 0..); with hq8 (fw_head_q8)
// also the head's Q8 activations.
cudaError_t fw_head_norm(bn_cuda_state *s, int first, int n_rows, const bn_q8_out *hq8) {
    const bn_config *c = &s->cm->cfg;
    return bn_cu_rmsnorm(s->xn, s->x + (size_t)first * c->n_embd, s->cm->output_norm, c->n_embd, n_rows, c->norm_eps,
                         s->stream, hq8);
}

// fw_head_q8: fused_q8 for the head over n_rows rows when they fit one block of logits rows (else NULL).
const bn_q8_out *fw_head_q8(bn_cuda_state *s, int n_rows, bn_q8_out *q) {
    const bn_cu_weight *head[] = {&s->cm->output};
    return n_rows <= s->logit_rows ? fused_q8(s, head, 1, n_rows, q) : NULL;
}

// fw_head_logits: s->logits {V, rows} = output · s->xn rows r0.. (from the Q8 activations fw_head_norm wrote when hq8,
// which covers exactly these rows).
cudaError_t fw_head_logits(bn_cuda_state *s, int r0, int rows, const bn_q8_out *hq8) {
    const bn_cu_weight *head[] = {&s->cm->output};
    return mm_from(s, head, 1, s->xn + (size_t)r0 * s->cm->cfg.n_embd, &s->logits, rows, hq8);
}

// fw_chunk_outputs: hidden / logits / their argmax / top-k of this chunk's output rows copied to the host (see
// forward.c).
cudaError_t fw_chunk_outputs(bn_cuda_state *s, int nb, int t_off, int n_total, const bn_forward_out *out) {
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
    const bn_q8_out *hq8 = head ? fw_head_q8(s, n_rows, &hq) : NULL; // then one block, r0 0
    TRY(fw_head_norm(s, first, n_rows, hq8));
    if (out->hidden)
        TRY(cudaMemcpyAsync(out->hidden + (size_t)out_row * H, s->xn, sizeof(float) * H * n_rows,
                            cudaMemcpyDeviceToHost, s->stream));
    for (int r0 = 0; head && r0 < n_rows; r0 += s->logit_rows) {
        const int rows = n_rows - r0 < s->logit_rows ? n_rows - r0 : s->logit_rows;
        TRY(fw_head_logits(s, r0, rows, hq8));
        if (out->argmax) TRY(bn_cu_argmax_rows(s->logits, V, rows, s->d_argmax, s->stream));
        TRY(fw_copy_head_down(s, out, out_row + r0, rows));
    }
    return cudaSuccess;
}

// fw_batch_body: the device part of a batched pass of n columns whose table and tokens are uploaded: the layers (taps
// through taps.seqs), with head the final norm and logits rows (hidden: the norm only), with argmax their argmax
// into d_argmax.
cudaError_t fw_batch_body(bn_cuda_state *s, int n, bool head, bool hidden, bool argmax, tap_dst taps) {
    TRY(fw_run_layers(s, n, taps, true));
    bn_q8_out hq;
    const bn_q8_out *hq8 = head ? fw_head_q8(s, n, &hq) : NULL;
    if (head || hidden) TRY(fw_head_norm(s, 0, n, hq8));
    if (head) TRY(fw_head_logits(s, 0, n, hq8));
    return argmax ? bn_cu_argmax_rows(s->logits, s->cm->cfg.n_vocab, n, s->d_argmax, s->stream) : cudaSuccess;
}

// fw_cuda_fail: fills err with a CUDA error of `what`; returns -1.
int fw_cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
    cudaGetLastError();
    return bn_err(err, errlen, "CUDA error: %s in %s (the state is undefined; reset it)", cudaGetErrorString(e), what);
}

// fw_upload_rows: rows [t0, t0 + nb) of in into s->d_tokens or s->x, on s->stream.
cudaError_t fw_upload_rows(bn_cuda_state *s, rows_in in, int t0, int nb) {
    const size_t H = (size_t)s->cm->cfg.n_embd;
    if (in.x)
        return cudaMemcpyAsync(s->x, in.x + (size_t)t0 * H, sizeof(float) * H * nb, cudaMemcpyHostToDevice, s->stream);
    return cudaMemcpyAsync(s->d_tokens, in.tokens + t0, sizeof(int32_t) * nb, cudaMemcpyHostToDevice, s->stream);
}

// fw_check_dev_taps: when out's taps go to the state's device tap buffer, they start at a row and n token rows
// fit from there; 0 or -1.
int fw_check_dev_taps(const bn_cuda_state *s, int n, const bn_forward_out *out, char *err, size_t errlen) {
    const long row = fw_dev_tap_row(s, out);
    if (row == -1) return 0;
    if (row < 0)
        return bn_err(err, errlen, "bn_cuda_forward: taps point inside the device tap buffer, off a row start");
    const size_t need = ((size_t)row + (size_t)n) * (size_t)out->n_taps * (size_t)s->cm->cfg.n_embd;
    if (need > s->dev_tap_floats)
        return bn_err(err, errlen, "bn_cuda_forward: %d tokens x %d taps from row %ld exceed the device tap buffer "
                      "(%zu floats)", n, out->n_taps, row, s->dev_tap_floats);
    return 0;
}

// fw_start_taps: with taps into the device tap buffer, its row for this pass into d_pos[1] (async on s->stream).
cudaError_t fw_start_taps(bn_cuda_state *s, const bn_forward_out *out) {
    const long row = fw_dev_tap_row(s, out);
    return row >= 0 ? set_tap_row(s, (int)row) : cudaSuccess;
}

// fw_check_input: the state takes token ids (want_tokens) or residual rows; 0 or -1.
int fw_check_input(const bn_cuda_state *s, bool want_tokens, const char *fn, char *err, size_t errlen) {
    const int l0 = s->cm->first_layer;
    if (want_tokens && l0 > 0)
        return bn_err(err, errlen, "%s: the state's model starts at layer %d (use bn_cuda_forward_hidden)", fn, l0);
    if (!want_tokens && l0 == 0)
        return bn_err(err, errlen, "%s: the state's model starts at layer 0 (use bn_cuda_forward)", fn);
    return 0;
}
