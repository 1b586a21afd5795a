// cuda/forward_pass.cuh — what the files of the CUDA forward share (C++/CUDA only): the layer loop and the head's
// outputs (cuda/forward.cu), the passes of one sequence (cuda/forward_seq.cu), the batched and ragged passes of several
// (cuda/forward_batch.cu) and the captured passes they replay (cuda/forward_graph.cu). Calls go one way, down this
// list: forward_batch.cu, forward_seq.cu, forward_graph.cu, forward.cu.
#ifndef BONSAI_CUDA_FORWARD_PASS_CUH
#define BONSAI_CUDA_FORWARD_PASS_CUH
#include "cuda/forward_impl.cuh"

#define TRY(call)                                                                                                   \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) return e_;                                                                           \
    } while (0)

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

// The rows entering the device's first layer: token ids (a whole-model upload embeds them on the device) or
// host residual rows {n_embd, n} (a model uploaded from a later layer, bn_cuda_forward_hidden).
struct rows_in {
    const int32_t *tokens;
    const float *x;
};

// ---- the layer loop and the head's outputs (cuda/forward.cu) ---------------------------------------
// fw_chunk_taps: the tap_dst of a chunk of one sequence (out's taps from row t_off; dev_snaps: per-token device
// snapshots).
tap_dst fw_chunk_taps(const bn_forward_out *out, int t_off, bool dev_snaps);
// fw_dev_tap_row: the row of the state's device tap buffer that out->taps points at (the buffer itself: 0), -1 when out
// has no taps or they go to host memory, -2 when they point inside the buffer off a row start.
long fw_dev_tap_row(const bn_cuda_state *s, const bn_forward_out *out);
// fw_run_layers: the device's layers over nb rows (embedded from s->d_tokens, or the residual rows in s->x) at d_pos,
// then d_pos += nb; taps as they are produced; batch: the rows are the columns of a batched pass. Async on s->stream.
cudaError_t fw_run_layers(bn_cuda_state *s, int nb, tap_dst taps, bool batch = false);
// fw_head_norm: the final norm of n_rows residual rows from row first into s->xn (with hq8 also their Q8 activations).
cudaError_t fw_head_norm(bn_cuda_state *s, int first, int n_rows, const bn_q8_out *hq8);
// fw_head_q8: where the head's Q8 activations over n_rows rows go when they fit one block of logits rows, else NULL.
const bn_q8_out *fw_head_q8(bn_cuda_state *s, int n_rows, bn_q8_out *q);
// fw_head_logits: s->logits {V, rows} = output · s->xn rows r0.. (from hq8 when the norm wrote them).
cudaError_t fw_head_logits(bn_cuda_state *s, int r0, int rows, const bn_q8_out *hq8);
// fw_copy_head_down: argmax, top-k, lse and/or logits of s->logits rows dev_row.. (as out asks) into out's rows
// out_row.. on the host, async.
cudaError_t fw_copy_head_down(bn_cuda_state *s, const bn_forward_out *out, int out_row, int rows, int dev_row = 0);
// fw_chunk_outputs: hidden / logits / their argmax / top-k of a chunk's output rows copied to the host.
cudaError_t fw_chunk_outputs(bn_cuda_state *s, int nb, int t_off, int n_total, const bn_forward_out *out);
// fw_batch_body: the device part of a batched pass of n columns (table and tokens uploaded): the layers, with head the
// final norm and logits rows (hidden: the norm only), with argmax their argmax into d_argmax.
cudaError_t fw_batch_body(bn_cuda_state *s, int n, bool head, bool hidden, bool argmax, tap_dst taps = tap_dst{});
// fw_cuda_fail: fills err with a CUDA error of `what`; returns -1.
int fw_cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen);
// fw_upload_rows: rows [t0, t0 + nb) of in into s->d_tokens or s->x, on s->stream.
cudaError_t fw_upload_rows(bn_cuda_state *s, rows_in in, int t0, int nb);
// fw_check_dev_taps: out's taps into the device tap buffer (if so) start at a row and n token rows fit; 0 or -1.
int fw_check_dev_taps(const bn_cuda_state *s, int n, const bn_forward_out *out, char *err, size_t errlen);
// fw_start_taps: with taps into the device tap buffer, its row for this pass into d_pos[1] (async on s->stream).
cudaError_t fw_start_taps(bn_cuda_state *s, const bn_forward_out *out);
// fw_check_input: the state takes token ids (want_tokens) or residual rows; 0 or -1 (fn names the caller).
int fw_check_input(const bn_cuda_state *s, bool want_tokens, const char *fn, char *err, size_t errlen);

// ---- captured passes (cuda/forward_graph.cu) --------------------------------------------------------
// fw_step_kind_for: the captured step serving a one-token bn_cuda_forward with out, or -1 (kernel by kernel).
int fw_step_kind_for(const bn_cuda_state *s, const bn_forward_out *out);
// fw_verify_graph_ok: a bn_cuda_forward_snaps pass of n tokens with out can replay a captured STEP_VERIFY pass.
bool fw_verify_graph_ok(const bn_cuda_state *s, int n, const bn_forward_out *out);
// fw_run_verify_graph: replays the STEP_VERIFY pass of n tokens for out and copies its head outputs down; async.
cudaError_t fw_run_verify_graph(bn_cuda_state *s, int n, const bn_forward_out *out);
// fw_forward_one_graph: bn_cuda_forward of one token through the captured step of this kind; 0 or -1.
int fw_forward_one_graph(bn_cuda_state *s, rows_in in, step_kind kind, bn_forward_out *out, char *err, size_t errlen);
// fw_replay: launches the captured pass of this kind serving key (captured when needed); async on s->stream.
cudaError_t fw_replay(bn_cuda_state *s, step_kind kind, const step_graph *key);

#endif
