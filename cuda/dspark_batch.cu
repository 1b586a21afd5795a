// cuda/dspark_batch.cu — the batched draft of several device drafter states (bn_cuda_drafter_draft_multi). Shared
// definitions: cuda/dspark_impl.cuh.
#include "cuda/common.cuh"
#include "cuda/dspark_impl.cuh"

// bn_cuda_drafter_draft_multi: the block rows of several states go through one pass on the drafter's batch
// workspace: every weight is read once per DS_BATCH_ROWS rows (in mmvq chunks of up to 32 columns) instead of once
// per state, and the Markov chains of all states step together (one W2 product over their columns per step). Per
// state, only the RoPE + cache append and the block attention (on its own cache) run alone. The pass is captured as
// a graph per (states, row counts); the states' ids, chain starts and positions are uploaded before each replay.

// batch_graph: the captured ds_block_rows + ds_chains of (ss, rows, n), captured now when not kept; NULL exec with the
// error.
static cudaError_t batch_graph(ds_batch *b, const bn_cuda_drafter *cd, bn_cuda_dstate *const *ss, const int *rows,
                               int n, cudaGraphExec_t *exec) {
    ds_batch_graph *slot = &b->graphs[0];
    for (int g = 0; g < DS_BATCH_GRAPHS; g++) {
        ds_batch_graph *k = &b->graphs[g];
        bool same = k->n == n && k->exec;
        for (int q = 0; same && q < n; q++) same = k->ids[q] == ss[q]->id && k->rows[q] == rows[q];
        if (same) {
            k->used = ++b->uses;
            *exec = k->exec;
            return cudaSuccess;
        }
        if (k->used < slot->used) slot = k; // the least recently used (an empty slot has used 0)
    }
    if (slot->exec) cudaGraphExecDestroy(slot->exec);
    *slot = ds_batch_graph{};
    TRY(bn_cu_capture(b->stream, &slot->exec, [&] { // no Q8 fusion: its attention writes per sequence
        const ds_pass p = pass_of(b, DS_BATCH_SEQS, false);
        const cudaError_t e = ds_block_rows(cd, &p, ss, rows, n);
        return e == cudaSuccess ? ds_chains(cd, &p, rows, n) : e;
    }));
    slot->n = n;
    for (int q = 0; q < n; q++) slot->ids[q] = ss[q]->id, slot->rows[q] = rows[q];
    slot->used = ++b->uses;
    *exec = slot->exec;
    return cudaSuccess;
}

// draft_separately: bn_cuda_drafter_draft_multi's results from each state's own captured draft, all started before any
// is waited for (they run at once, each on its own stream). Returns 0 or -1 with err.
static int draft_separately(bn_cuda_dstate *const *ss, const int32_t *id_last, const int *n_past, const int *n_max,
                            int n, float p_min, int32_t *const *drafts, int *counts, char *err, size_t errlen) {
    int rc = 0, started[64];
    for (int i = 0; i < n; i++) {
        started[i] = rc == 0 ? bn_cuda_drafter_draft_start(ss[i], id_last[i], n_past[i], n_max[i], err, errlen) : 0;
        if (started[i] < 0) rc = -1, started[i] = 0;
    }
    for (int i = 0; i < n; i++) { // every stream waited for, also after a failure
        char e2[256];
        counts[i] = bn_cuda_drafter_draft_finish(ss[i], started[i], p_min, drafts[i], NULL, e2, sizeof e2);
        if (counts[i] < 0 && rc == 0) rc = bn_err(err, errlen, "%s", e2);
    }
    return rc;
}

int bn_cuda_drafter_draft_multi(bn_cuda_dstate *const *ss, const int32_t *id_last, const int *n_past, const int *n_max,
                                int n, float p_min, int32_t *const *drafts, int *counts, char *err, size_t errlen) {
    if (n <= 0) return 0;
    bn_cuda_drafter *cd = ss[0]->cd;
    const bn_drafter_config *c = &cd->cfg;
    const int B = c->block_size, S = DS_BATCH_SEQS;
    int rows[64];
    if (n > 64) return bn_err(err, errlen, "drafter: %d sequences in one batched draft (at most 64)", n);
    for (int q = 0; q < n; q++) {
        counts[q] = 0;
        rows[q] = n_max[q] > B ? B : n_max[q];
        if (ss[q]->cd != cd) return bn_err(err, errlen, "drafter: sequence %d belongs to another drafter", q);
        for (int u = 0; u < q; u++)
            if (ss[u] == ss[q]) return bn_err(err, errlen, "drafter: sequences %d and %d share a state", u, q);
        if (rows[q] <= 0 || id_last[q] == c->mask_token_id) { // nothing to draft
            rows[q] = 0;
            continue;
        }
        bn_cuda_dstate *s = ss[q];
        if (n_past[q] != s->n_cache)
            return bn_err(err, errlen, "drafter: block at position %d but the cache holds %d context rows", n_past[q],
                          s->n_cache);
        if (n_past[q] + rows[q] > s->n_ctx) return bn_err(err, errlen, "drafter: context full");
        if (id_last[q] < 0 || id_last[q] >= c->n_vocab)
            return bn_err(err, errlen, "drafter: token %d out of range", id_last[q]);
    }
    // one state with rows, BONSAI_CUDA_DRAFT_BATCH=0 (for comparison), or no device memory for the batch workspace:
    // each state's own captured draft
    static const bool separate = bn_env_is("BONSAI_CUDA_DRAFT_BATCH", "0");
    int n_drafting = 0;
    for (int q = 0; q < n; q++) n_drafting += rows[q] > 0;
    char batch_err[256];
    ds_batch *b = separate || n_drafting < 2 ? NULL : ds_batch_get(cd, batch_err, sizeof batch_err);
    if (!b) return draft_separately(ss, id_last, n_past, n_max, n, p_min, drafts, counts, err, errlen);
    for (int q0 = 0; q0 < n;) {
        // a pass: the next sequences with rows, up to DS_BATCH_SEQS of them and DS_BATCH_ROWS rows
        bn_cuda_dstate *ps[DS_BATCH_SEQS];
        int pr[DS_BATCH_SEQS], at[DS_BATCH_SEQS], g = 0, total = 0;
        for (; q0 < n && g < S; q0++) {
            if (rows[q0] == 0) continue;
            if (total + rows[q0] > DS_BATCH_ROWS) break;
            ps[g] = ss[q0], pr[g] = rows[q0], at[g] = q0, total += rows[q0], g++;
        }
        if (g == 0) continue;
        cudaError_t e = cudaSuccess;
        for (int k = 0; k < g; k++) { // the batch stream waits for each state's queued work (its K/V injection)
            if (e == cudaSuccess) e = cudaEventRecord(ps[k]->queued, ps[k]->stream);
            if (e == cudaSuccess) e = cudaStreamWaitEvent(b->stream, ps[k]->queued, 0);
        }
        for (int k = 0, r = 0; k < g; k++) { // tokens [id_last, MASK...] and chain starts; positions
            const int32_t anchor = id_last[at[k]];
            for (int i = 0; i < pr[k]; i++) b->h_ids[r++] = i == 0 ? anchor : c->mask_token_id;
            for (int i = 0; i <= B; i++) b->h_chain[(size_t)i * S + k] = anchor;
            const int pos = n_past[at[k]];
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(ps[k]->d_pos, &pos, sizeof(int), cudaMemcpyHostToDevice, b->stream);
        }
        for (int k = g; k < S; k++)
            for (int i = 0; i <= B; i++) b->h_chain[(size_t)i * S + k] = 0;
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(b->ids, b->h_ids, sizeof(int32_t) * total, cudaMemcpyHostToDevice, b->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(b->chain, b->h_chain, sizeof(int32_t) * (size_t)(B + 1) * S, cudaMemcpyHostToDevice,
                                b->stream);
        cudaGraphExec_t exec = NULL;
        if (e == cudaSuccess) e = batch_graph(b, cd, ps, pr, g, &exec);
        if (e == cudaSuccess) e = cudaGraphLaunch(exec, b->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(b->h_chain, b->chain, sizeof(int32_t) * (size_t)(B + 1) * S, cudaMemcpyDeviceToHost,
                                b->stream);
        if (e == cudaSuccess && c->has_conf)
            e = cudaMemcpyAsync(b->h_conf, b->conf, sizeof(float) * (size_t)B * S, cudaMemcpyDeviceToHost, b->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);
        if (e != cudaSuccess) {
            cudaStreamSynchronize(b->stream);
            cudaGetLastError();
            return bn_err(err, errlen, "CUDA error: %s in bn_cuda_drafter_draft_multi", cudaGetErrorString(e));
        }
        for (int k = 0; k < g; k++)
            counts[at[k]] =
                ds_read_chain(c, b->h_chain + k, S, b->h_conf + (size_t)k * B, pr[k], p_min, drafts[at[k]], NULL);
    }
    return 0;
}
