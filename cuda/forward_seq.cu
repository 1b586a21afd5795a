// cuda/forward_seq.cu — the passes of one sequence behind cuda/cuda_engine.h: bn_cuda_forward (chunks of n_batch
// tokens, one token per chunk with host snapshots, a captured step for one token), bn_cuda_forward_snaps (a verify
// pass with per-token device snapshots, captured when it fits) and bn_cuda_forward_hidden (residual rows into a model
// uploaded from a later layer). Shared definitions: cuda/forward_pass.cuh.
#include "cuda/common.cuh"
#include "cuda/forward_pass.cuh"

// forward_rows: bn_cuda_forward after its checks, for token or residual-row input.
static int forward_rows(bn_cuda_state *s, rows_in in, int n, bn_forward_out *out, char *err, size_t errlen) {
    if (n == 0) return 0;
    // one token with logits and/or device-buffer taps: the captured step graph (no per-kernel launch cost)
    const int kind = n == 1 ? fw_step_kind_for(s, out) : -1;
    if (kind >= 0) return fw_forward_one_graph(s, in, (step_kind)kind, out, err, errlen);
    // with snapshots, one token per chunk so the recurrent state can be copied after each
    const int chunk = out && out->snaps ? 1 : s->n_batch;
    for (int t0 = 0; t0 < n; t0 += chunk) {
        const int nb = n - t0 < chunk ? n - t0 : chunk;
        cudaError_t e = t0 == 0 ? fw_start_taps(s, out) : cudaSuccess;
        if (e == cudaSuccess) e = fw_upload_rows(s, in, t0, nb);
        if (e == cudaSuccess) e = fw_run_layers(s, nb, fw_chunk_taps(out, t0, false));
        if (e == cudaSuccess) e = fw_chunk_outputs(s, nb, t0, n, out);
        if (e == cudaSuccess && out && out->snaps)
            e = cudaMemcpyAsync(out->snaps[t0]->data, s->recurrent, s->n_recurrent * sizeof(float),
                                cudaMemcpyDeviceToHost, s->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
        if (e != cudaSuccess) return fw_cuda_fail(e, "bn_cuda_forward", err, errlen);
        s->pos += nb;
        if (out && out->snaps) out->snaps[t0]->pos = s->pos;
    }
    return 0;
}

// forward_rows_snaps: bn_cuda_forward_snaps after the common checks, for token or residual-row input.
static int forward_rows_snaps(bn_cuda_state *s, rows_in in, int n, bn_forward_out *out, bn_cuda_snapshot *const *snaps,
                              char *err, size_t errlen) {
    if (out && out->snaps)
        return bn_err(err, errlen, "bn_cuda_forward_snaps: give device snapshots only (out->snaps set)");
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
    if (e == cudaSuccess) e = fw_start_taps(s, out);
    if (e == cudaSuccess) e = fw_upload_rows(s, in, 0, n);
    if (e == cudaSuccess && fw_verify_graph_ok(s, n, out)) { // the captured pass of this size (no launch cost)
        e = fw_run_verify_graph(s, n, out);
    } else {
        if (e == cudaSuccess) e = fw_run_layers(s, n, fw_chunk_taps(out, 0, true));
        if (e == cudaSuccess) e = fw_chunk_outputs(s, n, 0, n, out);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return fw_cuda_fail(e, "bn_cuda_forward_snaps", err, errlen);
    for (int t = 0; t < n; t++) snaps[t]->pos = s->pos + t + 1;
    s->pos += n;
    return 0;
}

int bn_cuda_forward(bn_cuda_state *s, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen) {
    if (fw_check_input(s, true, "bn_cuda_forward", err, errlen) != 0) return -1;
    if (bn_forward_check(&s->cm->cfg, s->pos, s->n_ctx, s->n_recurrent, tokens, n, out, err, errlen) != 0) return -1;
    if (fw_check_dev_taps(s, n, out, err, errlen) != 0) return -1;
    return forward_rows(s, rows_in{tokens, NULL}, n, out, err, errlen);
}

int bn_cuda_forward_snaps(bn_cuda_state *s, const int32_t *tokens, int n, bn_forward_out *out,
                          bn_cuda_snapshot *const *snaps, char *err, size_t errlen) {
    if (fw_check_input(s, true, "bn_cuda_forward_snaps", err, errlen) != 0) return -1;
    if (bn_forward_check(&s->cm->cfg, s->pos, s->n_ctx, s->n_recurrent, tokens, n, out, err, errlen) != 0) return -1;
    if (fw_check_dev_taps(s, n, out, err, errlen) != 0) return -1;
    return forward_rows_snaps(s, rows_in{tokens, NULL}, n, out, snaps, err, errlen);
}

int bn_cuda_forward_hidden(bn_cuda_state *s, const float *x, int n, bn_forward_out *out, bn_cuda_snapshot *const *snaps,
                           char *err, size_t errlen) {
    if (fw_check_input(s, false, "bn_cuda_forward_hidden", err, errlen) != 0) return -1;
    if (!x && n > 0) return bn_err(err, errlen, "bn_cuda_forward_hidden: no input rows");
    if (bn_forward_check(&s->cm->cfg, s->pos, s->n_ctx, s->n_recurrent, NULL, n, out, err, errlen) != 0) return -1;
    if (fw_check_dev_taps(s, n, out, err, errlen) != 0) return -1;
    const rows_in in = {NULL, x};
    return snaps ? forward_rows_snaps(s, in, n, out, snaps, err, errlen) : forward_rows(s, in, n, out, err, errlen);
}
