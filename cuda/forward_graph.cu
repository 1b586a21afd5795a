// cuda/forward_graph.cu — the captured passes (CUDA graphs) of the CUDA forward: one-token steps (logits, taps, the
// greedy step of bn_cuda_decode_greedy), verify passes with device snapshots and batched passes, each captured on
// first use per configuration and replayed after; the same launches as the kernel-by-kernel path, so the same
// results. Shared definitions: cuda/forward_pass.cuh.
#include "cuda/common.cuh"
#include "cuda/forward_pass.cuh"

// taps_graphable: out's taps (if any) can be written by a captured pass: into the device tap buffer, at most
// MAX_GRAPH_TAPS slots.
static bool taps_graphable(const bn_cuda_state *s, const bn_forward_out *out) {
    return !out || !out->taps || (fw_dev_tap_row(s, out) >= 0 && out->n_taps <= MAX_GRAPH_TAPS);
}

// fw_step_kind_for: the captured step serving a one-token bn_cuda_forward with out, or -1 when it runs
// kernel by kernel (hidden rows or host snapshots wanted, taps into host memory, more tap slots than a
// captured step records, graphs switched off).
int fw_step_kind_for(const bn_cuda_state *s, const bn_forward_out *out) {
    if (s->no_graphs || !taps_graphable(s, out) || (out && (out->snaps || out->hidden))) return -1;
    return out && out->taps ? STEP_TAPS : STEP_LOGITS;
}

// fw_verify_graph_ok: a bn_cuda_forward_snaps pass of n tokens with out can replay a captured STEP_VERIFY pass
// (mmvq-sized, its logits fit s->logits, no hidden rows, graphable taps, graphs on).
bool fw_verify_graph_ok(const bn_cuda_state *s, int n, const bn_forward_out *out) {
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
// argmax of the logits into d_tokens[0]; STEP_BATCH: fw_batch_body. The same launches as
// the launch-by-launch path (fw_run_layers + fw_chunk_outputs, fw_batch_body), so the same results.
static cudaError_t graph_body(bn_cuda_state *s, step_kind kind, const step_graph *key) {
    if (kind == STEP_BATCH) {
        tap_dst td = {};
        td.n_col_taps = key->n_taps, td.col_tap_layers = key->tap_layers;
        return fw_batch_body(s, key->n, true, true, key->argmax, td);
    }
    bn_forward_out taps_out;
    memset(&taps_out, 0, sizeof taps_out);
    taps_out.taps = (float *)key->taps;
    taps_out.n_taps = key->n_taps;
    taps_out.tap_layers = key->tap_layers;
    const int n = key->n, first = key->all_logits ? 0 : n - 1, rows = key->all_logits ? n : 1;
    TRY(fw_run_layers(s, n, fw_chunk_taps(key->taps ? &taps_out : NULL, 0, kind == STEP_VERIFY)));
    bn_q8_out hq;
    const bn_q8_out *hq8 = fw_head_q8(s, rows, &hq);
    TRY(fw_head_norm(s, first, rows, hq8));
    TRY(fw_head_logits(s, 0, rows, hq8));
    if (key->argmax) TRY(bn_cu_argmax_rows(s->logits, s->cm->cfg.n_vocab, rows, s->d_argmax, s->stream));
    return kind == STEP_GREEDY ? bn_cu_argmax(s->logits, s->cm->cfg.n_vocab, s->d_tokens, s->stream) : cudaSuccess;
}

// capture: records graph_body on s->stream into *exec. With BONSAI_CUDA_GRAPH_LOG=1 each capture prints its node
// count to stderr ("bonsai-cuda: captured a logits graph of 1 token(s): 645 nodes"): the kernels a replay launches,
// as the passes enqueue kernels only (cuda/check.sh's kernels per token).
static cudaError_t capture(bn_cuda_state *s, step_kind kind, const step_graph *key, cudaGraphExec_t *exec) {
    static const bool log = bn_env_is("BONSAI_CUDA_GRAPH_LOG", "1");
    size_t nodes = 0;
    const cudaError_t e = bn_cu_capture(s->stream, exec, [&] { return graph_body(s, kind, key); }, log ? &nodes : NULL);
    static const char *const names[] = {"greedy", "logits", "taps", "verify", "batch"};
    if (e == cudaSuccess && log)
        fprintf(stderr, "bonsai-cuda: captured a %s graph of %d token(s): %zu nodes\n", names[kind], key->n, nodes);
    return e;
}

// fw_replay: launches the captured pass of this kind serving key (captured on first use, and again when its
// slot holds a pass that does not serve key); async on s->stream, inputs already uploaded.
cudaError_t fw_replay(bn_cuda_state *s, step_kind kind, const step_graph *key) {
    step_graph *g = kind == STEP_VERIFY  ? &s->verify[key->n]
                    : kind == STEP_BATCH ? &s->batch[key->n]
                                         : &s->graphs[kind];
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
    TRY(fw_upload_rows(s, in.tokens ? rows_in{&s->h_io[0], NULL} : in, 0, 1));
    return fw_replay(s, kind, &key);
}

// fw_run_verify_graph: replays the STEP_VERIFY pass of n tokens for out (inputs, snapshot pointers and tap row
// uploaded) and copies its logits and/or their argmax down; async on s->stream.
cudaError_t fw_run_verify_graph(bn_cuda_state *s, int n, const bn_forward_out *out) {
    const step_graph key = graph_key(s, STEP_VERIFY, n, out);
    TRY(fw_replay(s, STEP_VERIFY, &key));
    return fw_copy_head_down(s, out, 0, key.all_logits ? n : 1);
}

// fw_forward_one_graph: bn_cuda_forward of one token through the captured step of this kind (logits and/or
// their argmax, if wanted, copied down after it).
int fw_forward_one_graph(bn_cuda_state *s, rows_in in, step_kind kind, bn_forward_out *out, char *err,
                             size_t errlen) {
    cudaError_t e = fw_start_taps(s, out);
    if (e == cudaSuccess) e = run_step_graph(s, in, kind, out);
    if (e == cudaSuccess) e = fw_copy_head_down(s, out, 0, 1);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return fw_cuda_fail(e, "bn_cuda_forward", err, errlen);
    s->pos += 1;
    return 0;
}

int bn_cuda_decode_greedy(bn_cuda_state *s, int32_t token, int32_t *next, char *err, size_t errlen) {
    if (fw_check_input(s, true, "bn_cuda_decode_greedy", err, errlen) != 0) return -1;
    if (s->pos + 1 > s->n_ctx)
        return bn_err(err, errlen, "context overflow: position %d + 1 token exceeds n_ctx %d", s->pos, s->n_ctx);
    if (token < 0 || token >= s->cm->cfg.n_vocab)
        return bn_err(err, errlen, "bad token id %d (vocabulary has %d tokens)", token, s->cm->cfg.n_vocab);
    cudaError_t e = run_step_graph(s, rows_in{&token, NULL}, STEP_GREEDY, NULL);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&s->h_io[1], s->d_tokens, sizeof(int32_t), cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return fw_cuda_fail(e, "bn_cuda_decode_greedy", err, errlen);
    s->pos += 1;
    *next = s->h_io[1];
    return 0;
}
