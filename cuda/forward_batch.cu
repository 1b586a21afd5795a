// cuda/forward_batch.cu — the batched and ragged passes behind cuda/cuda_engine.h (bn_cuda_forward_multi, _batch,
// _multi_hidden): the sequences' tokens as the columns of one pass through a column table (each column's state,
// position, snapshots and tap row), as many whole sequences per pass as the first state holds, replayed from a captured
// pass when it can. Shared definitions: cuda/forward_pass.cuh.
#include "cuda/common.cuh"
#include "cuda/forward_pass.cuh"
extern "C" {
#include "core/engine.h" // bn_engine_pass_end: the passes of a ragged pass
}

// batch_check: the inputs of a batched pass (every sequence, before any pass runs): token ids (in.tokens, the
// sequences' tokens one after another) for whole-model states, residual rows (in.x) for states of a model uploaded
// from a later layer; each sequence's tokens within its n_ctx, its snapshots of its model, its taps (if any) in host
// memory or its own device tap buffer; fn names the caller in errors; 0 or -1 with err.
static int batch_check(const char *fn, const seqs_in &q, rows_in in, bn_forward_out *const *outs, char *err,
                       size_t errlen) {
    bn_cuda_state *s = q.states[0];
    if (!s) return bn_err(err, errlen, "%s: sequence 0 is missing", fn);
    if (fw_check_input(s, in.tokens != NULL, fn, err, errlen) != 0) return -1;
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
            return bn_err(err, errlen, "%s: sequence %d: host snapshots need bn_cuda_forward (give device ones)", fn,
                          i);
        if (bn_forward_check(&st->cm->cfg, st->pos, st->n_ctx, st->n_recurrent, in.tokens ? in.tokens + c0 : NULL, n,
                             o, err, errlen) != 0)
            return -1;
        if (fw_check_dev_taps(st, n, o, err, errlen) != 0) return -1;
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
    if (s->cm->lora) { // each column's adapter scales: its sequence's
        for (int i = 0, t = 0; i < q.n; i++)
            for (int j = 0; j < seq_len(q, i); j++, t++)
                memcpy(s->h_lora_cols + (size_t)t * BN_LORA_MAX, q.states[i]->h_lora, sizeof q.states[i]->h_lora);
        TRY(cudaMemcpyAsync(s->d_lora_cols, s->h_lora_cols, sizeof(float) * (size_t)nb * BN_LORA_MAX,
                            cudaMemcpyHostToDevice, s->stream));
    }
    return fw_upload_rows(s, in, 0, nb);
}

// batch_step: fw_batch_body, replaying the STEP_BATCH pass of n columns (fw_replay) when head is wanted, graphs are on
// and the taps (if any) go through the table (the table holds the rest; the graph is captured per column count and
// tap layer list), else launched kernel by kernel.
static cudaError_t batch_step(bn_cuda_state *s, int n, bool head, bool hidden, bool argmax, tap_dst taps) {
    if (!head || s->no_graphs || taps.seqs) return fw_batch_body(s, n, head, hidden, argmax, taps);
    step_graph key;
    memset(&key, 0, sizeof key);
    key.n = n, key.all_logits = true, key.argmax = argmax, key.n_taps = taps.n_col_taps;
    if (taps.n_col_taps) memcpy(key.tap_layers, taps.col_tap_layers, sizeof(int) * (size_t)taps.n_col_taps);
    return fw_replay(s, STEP_BATCH, &key);
}

// table_taps: whether the taps of a batched pass (outs of q) can go through the column table: every out with taps
// writes them into its own sequence's device tap buffer, all with one tap layer list of at most MAX_GRAPH_TAPS slots.
// *first: an out with taps (NULL: none).
static bool table_taps(const seqs_in &q, bn_forward_out *const *outs, const bn_forward_out **first) {
    *first = NULL;
    for (int i = 0; outs && i < q.n; i++) {
        const bn_forward_out *o = outs[i];
        if (!o || !o->taps) continue;
        if (fw_dev_tap_row(q.states[i], o) < 0 || o->n_taps > MAX_GRAPH_TAPS) return false;
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
        if (e == cudaSuccess && bn_forward_wants_head(o)) e = fw_copy_head_down(s, o, 0, rows, first);
    }
    for (int i = 0; e == cudaSuccess && i < q.n; i++)
        e = bn_cu_advance_pos(q.states[i]->d_pos, seq_len(q, i), s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return fw_cuda_fail(e, "bn_cuda batched pass", err, errlen);
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
