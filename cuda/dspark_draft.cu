// cuda/dspark_draft.cu — the device drafter's draft (docs/dspark.md §4.4–4.6): the non-causal block pass over
// [id_last, MASK × (n−1)] with the log-SNR embedding, output norm + LM head, then the Markov chain (prev on the
// device, argmax skipping MASK, ties → lowest id) and the confidence head; one state's draft replayed from a CUDA
// graph, and the passes the batched draft (cuda/dspark_batch.cu) runs over several states. Matrix products, norms,
// RoPE + cache append, SwiGLU and argmax reuse the forward's kernels (cuda/mm.cuh, cuda/fwd.cuh); the non-causal block
// attention, the log-SNR add, the Markov logits and the confidence head are the small kernels below.
#include "cuda/common.cuh"
#include "cuda/dspark_impl.cuh"
#include "cuda/mm_impl.cuh" // bn_q8_store: the block pass's producers write the next product's Q8 activations

#define DS_ATT_THREADS 128
#define DS_ATT_TILE 128   // keys scored per pass of the block attention
#define DS_ACC (BN_CU_MAX_HEAD_DIM / DS_ATT_THREADS)

// ---- kernels ---------------------------------------------------------------------------------------
// ds_add_snr_kernel: block i: x[i] += snr[row 0 for the anchor, row 1 for every mask row].
static __global__ void ds_add_snr_kernel(float *x, const float *snr, int E) {
    bn_cu_grid_begin();
    const int i = blockIdx.x;
    const float *e = snr + (size_t)(i == 0 ? 0 : 1) * E;
    for (int j = threadIdx.x; j < E; j += blockDim.x) x[(size_t)i * E + j] += e[j];
}

// ds_block_attn_kernel: block (head h, row t): softmax(scale·q·K) V over ALL n_kv = d_pos[0] + n_rows
// cache rows (non-causal: context rows and every block row), online over tiles of keys; a warp
// scores one key at a time. out/q {nh*hd, n_rows}, K/V {kvw, n_ctx}; head h reads KV head h / group.
// Q8: also out's Q8 activations (hd % 32 == 0: each warp holds whole 32-element units or none).
template <bool Q8>
static __global__ void __launch_bounds__(DS_ATT_THREADS)
ds_block_attn_kernel(float *out, const float *q, const float *K, const float *V, int group, int hd, int qw, int kvw,
                     float scale, const int *d_pos, int n_rows, bn_q8_out q8) {
    bn_cu_grid_begin();
    BN_SHARED(float, sc, DS_ATT_TILE);
    BN_DYN_SHARED(float, qs); // {hd}
    const int h = blockIdx.x, t = blockIdx.y, kvh = h / group;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    const int n_kv = d_pos[0] + n_rows;
    const float *qh = q + (size_t)t * qw + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qh[d];
    float acc[DS_ACC];
    for (int r = 0; r < DS_ACC; r++) acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    __syncthreads();
    for (int j0 = 0; j0 < n_kv; j0 += DS_ATT_TILE) {
        const int nt = n_kv - j0 < DS_ATT_TILE ? n_kv - j0 : DS_ATT_TILE;
        for (int jj = warp; jj < nt; jj += n_warps) {
            const float *k = K + (size_t)(j0 + jj) * kvw + (size_t)kvh * hd;
            float dot = 0.0f;
            for (int d = lane; d < hd; d += 32) dot += qs[d] * k[d];
            dot = bn_warp_reduce_sum(dot);
            if (lane == 0) sc[jj] = scale * dot;
        }
        __syncthreads();
        float m_tile = -INFINITY;
        for (int jj = 0; jj < nt; jj++) m_tile = fmaxf(m_tile, sc[jj]);
        const float m_new = fmaxf(m, m_tile), rescale = expf(m - m_new);
        __syncthreads(); // every thread has read the scores before they turn into probabilities
        for (int jj = threadIdx.x; jj < nt; jj += blockDim.x) sc[jj] = expf(sc[jj] - m_new);
        __syncthreads();
        l *= rescale;
        for (int jj = 0; jj < nt; jj++) l += sc[jj];
        for (int r = 0; r < DS_ACC; r++) {
            const int d = threadIdx.x + r * DS_ATT_THREADS;
            if (d >= hd) break;
            float a = acc[r] * rescale;
            for (int jj = 0; jj < nt; jj++) a += sc[jj] * V[(size_t)(j0 + jj) * kvw + (size_t)kvh * hd + d];
            acc[r] = a;
        }
        m = m_new;
        __syncthreads(); // the tile's probabilities are read before the next tile's scores
    }
    float *oh = out + (size_t)t * qw + (size_t)h * hd;
    for (int r = 0; r < DS_ACC; r++) {
        const int d = threadIdx.x + r * DS_ATT_THREADS;
        if (d >= hd) break;
        const float v = acc[r] / l;
        oh[d] = v;
        if (Q8) bn_q8_store(v, (int64_t)t * qw + (int64_t)h * hd + d, q8);
    }
}

// ds_markov_logits_kernel: l[v] = base[v] + scale·bias[v]; l[mask] = −inf (the argmax skips MASK).
static __global__ void ds_markov_logits_kernel(float *l, const float *base, const float *bias, float scale, int V,
                                               int mask) {
    bn_cu_grid_begin();
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < V) l[v] = v == mask ? -INFINITY : base[v] + scale * bias[v];
}

// ds_conf_kernel: *conf = σ(w · [h ; w1] + b) (the W1 part only when conf_in > E); one block.
static __global__ void ds_conf_kernel(float *conf, const float *h, const float *w1, const float *w, float b, int E,
                                      int conf_in) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    float z = 0.0f;
    for (int i = threadIdx.x; i < conf_in; i += blockDim.x) z += w[i] * (i < E ? h[i] : w1[i - E]);
    z = bn_block_sum(z, red);
    if (threadIdx.x == 0) *conf = 1.0f / (1.0f + expf(-(z + b)));
}

// ---- the block pass and the Markov chains: one state's draft, or several states' in one batched pass ------------
// mm_chunks: y[i] = W[i]·x for the n_rows columns of a block pass, in chunks of at most BN_CU_MMVQ_MAX_NB columns
// (32: one chunk for a block of 16): the mmvq kernels then read each weight once per chunk, where a call beyond that
// limit would take the GEMM path (every weight dequantized to fp16 per call, and cuBLAS, which the draft graph leaves
// out). Results per column are those of bn_cu_matmul(_multi) at the chunk's size.
static cudaError_t mm_chunks(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int n_rows,
                             void *scratch, cublasHandle_t blas, cudaStream_t stream) {
    for (int c0 = 0; c0 < n_rows; c0 += BN_CU_MMVQ_MAX_NB) {
        const int nb = n_rows - c0 < BN_CU_MMVQ_MAX_NB ? n_rows - c0 : BN_CU_MMVQ_MAX_NB;
        float *yc[BN_CU_MATMUL_MULTI_MAX];
        for (int i = 0; i < n; i++) yc[i] = y[i] + (size_t)c0 * w[i]->ne1;
        TRY(bn_cu_matmul_multi(w, n, x + (size_t)c0 * w[0]->ne0, yc, nb, scratch, blas, stream));
    }
    return cudaSuccess;
}

// ds_block_rows: the block pass of the n sequences ss (rows[q] block rows each, tokens in p->ids, each state's
// first position in its d_pos; docs/dspark.md §4.4): the final hidden (after output_norm) into p->xn and the base
// logits into p->base. Products over all rows (each weight read once per 32 rows, mm_chunks); RoPE + cache append
// (the block rows' K/V after the state's context rows, temporary: n_cache stays) and the block attention per sequence
// on its own cache. Kernels only: graph-capturable. With p->fuse (one sequence) the norms, the attention and SwiGLU
// write the next products' Q8 activations where that fuses (q8_for); the results are bit-identical either way.
cudaError_t ds_block_rows(const bn_cuda_drafter *cd, const ds_pass *p, bn_cuda_dstate *const *ss, const int *rows,
                          int n) {
    const bn_drafter_config *c = &cd->cfg;
    const int E = c->n_embd, hd = c->head_dim, qw = c->n_head * hd, kvw = c->n_head_kv * hd;
    int row0[DS_BATCH_SEQS], n_rows = 0;
    for (int q = 0; q < n; q++) row0[q] = n_rows, n_rows += rows[q];
    const bool fuse = p->fuse && n == 1;
    auto q8 = [&](const bn_cu_weight *const *w, int nw, bn_q8_out *out) {
        return q8_for(fuse, p->mm_scratch, w, nw, n_rows, out);
    };
    auto prod = [&](const bn_cu_weight *const *w, int nw, const float *x, float *const *y, const bn_q8_out *xq) {
        return xq ? bn_cu_matmul_multi_q8(w, nw, x, y, n_rows, p->mm_scratch, p->stream)
                  : mm_chunks(w, nw, x, y, n_rows, p->mm_scratch, p->blas, p->stream);
    };
    TRY(bn_cu_get_rows(&cd->token_embd, p->ids, p->x, n_rows, p->stream));
    for (int q = 0; c->log_snr && q < n; q++) { // anchor row, then mask rows, of each sequence
        BN_LAUNCH(ds_add_snr_kernel, rows[q], 256, 0, p->stream, p->x + (size_t)row0[q] * E, cd->snr_emb, E);
        TRY(cudaGetLastError());
    }
    bn_q8_out xq, oq, dq;
    const ds_layer *L0 = &cd->layers[0];
    const bn_cu_weight *qkv0[] = {&L0->attn_q, &L0->attn_k, &L0->attn_v};
    const bn_q8_out *xq8 = q8(qkv0, 3, &xq); // xn's Q8 activations, written by the norm before
    TRY(bn_cu_rmsnorm(p->xn, p->x, L0->attn_norm, E, n_rows, c->norm_eps, p->stream, xq8));
    for (int il = 0; il < c->n_layer; il++) {
        const ds_layer *L = &cd->layers[il];
        const bn_cu_weight *qkv[] = {&L->attn_q, &L->attn_k, &L->attn_v};
        float *const ys[] = {p->q, p->kb, p->vb};
        TRY(prod(qkv, 3, p->xn, ys, xq8));
        const bn_cu_weight *ow[] = {&L->attn_output};
        const bn_q8_out *oq8 = hd % 32 == 0 ? q8(ow, 1, &oq) : NULL; // (one sequence: its rows are all the rows)
        for (int q = 0; q < n; q++) { // q/k norm + RoPE and K/V append, then the attention, on the state's own cache
            const bn_cuda_dstate *s = ss[q];
            float *qq = p->q + (size_t)row0[q] * qw, *att = p->att + (size_t)row0[q] * qw;
            TRY(bn_cu_attn_prep(qq, qw, hd, p->kb + (size_t)row0[q] * kvw, p->vb + (size_t)row0[q] * kvw,
                                s->k_cache[il], s->v_cache[il], false, c->n_head, c->n_head_kv, hd, L->q_norm,
                                L->k_norm, c->norm_eps, c->n_rot, theta_scale(c), true, rows[q], s->d_pos, p->stream));
            const dim3 grid(c->n_head, rows[q]);
            const int group = c->n_head / c->n_head_kv;
            const float scale = 1.0f / sqrtf((float)hd);
            if (oq8)
                BN_LAUNCH(ds_block_attn_kernel<true>, grid, DS_ATT_THREADS, sizeof(float) * hd, p->stream, att, qq,
                          s->k_cache[il], s->v_cache[il], group, hd, qw, kvw, scale, s->d_pos, rows[q], *oq8);
            else
                BN_LAUNCH(ds_block_attn_kernel<false>, grid, DS_ATT_THREADS, sizeof(float) * hd, p->stream, att, qq,
                          s->k_cache[il], s->v_cache[il], group, hd, qw, kvw, scale, s->d_pos, rows[q], bn_q8_out{});
            TRY(cudaGetLastError());
        }
        float *const oy[] = {p->mo};
        TRY(prod(ow, 1, p->att, oy, oq8));
        const bn_cu_weight *gu[] = {&L->ffn_gate, &L->ffn_up};
        xq8 = q8(gu, 2, &xq);
        TRY(bn_cu_add_rmsnorm(p->x, p->mo, p->xn, L->ffn_norm, E, n_rows, c->norm_eps, p->stream, xq8));
        float *const gy[] = {p->gate, p->up};
        TRY(prod(gu, 2, p->xn, gy, xq8));
        const bn_cu_weight *down[] = {&L->ffn_down};
        const bn_q8_out *dq8 = q8(down, 1, &dq);
        TRY(bn_cu_swiglu(p->gate, p->gate, p->up, (int64_t)c->n_ff * n_rows, p->stream, dq8));
        TRY(prod(down, 1, p->gate, oy, dq8));
        // the next layer's q|k|v, or the head after the last layer
        const bool last = il + 1 == c->n_layer;
        const ds_layer *N = last ? L : &cd->layers[il + 1];
        const bn_cu_weight *next[] = {last ? &cd->output : &N->attn_q, &N->attn_k, &N->attn_v};
        xq8 = q8(next, last ? 1 : 3, &xq);
        TRY(bn_cu_add_rmsnorm(p->x, p->mo, p->xn, last ? cd->output_norm : N->attn_norm, E, n_rows, c->norm_eps,
                              p->stream, xq8));
    }
    const bn_cu_weight *head[] = {&cd->output};
    float *const hy[] = {p->base};
    return prod(head, 1, p->xn, hy, xq8);
}

// ds_chains: the Markov chains of the n sequences after ds_block_rows (docs/dspark.md §4.5–4.6), stepping together:
// per step i, W1[prev_i] → w1 and W2·w1 → bias of every sequence in one product each, then per sequence
// l = base_i + scale·bias, chain[i+1] = argmax l (MASK skipped, ties → lowest id), conf[i] = σ(w·[h_i; w1] + b).
// A sequence past its rows keeps the valid prev it was uploaded with: its later steps are computed and never read.
cudaError_t ds_chains(const bn_cuda_drafter *cd, const ds_pass *p, const int *rows, int n) {
    const bn_drafter_config *c = &cd->cfg;
    const int E = c->n_embd, V = c->n_vocab, R = c->markov_rank, B = c->block_size, S = p->stride;
    int row0[DS_BATCH_SEQS], n_rows = 0, max_rows = 0;
    for (int q = 0; q < n; q++) {
        row0[q] = n_rows, n_rows += rows[q];
        if (rows[q] > max_rows) max_rows = rows[q];
    }
    for (int i = 0; i < max_rows; i++) {
        TRY(bn_cu_get_rows(&cd->markov_a, p->chain + (size_t)i * S, p->w1, n, p->stream));
        TRY(bn_cu_matmul(&cd->markov_b, p->w1, p->bias, n, p->mm_scratch, p->blas, p->stream));
        for (int q = 0; q < n; q++) {
            if (i >= rows[q]) continue;
            float *l = p->logit + (size_t)q * V;
            BN_LAUNCH(ds_markov_logits_kernel, (V + 255) / 256, 256, 0, p->stream, l,
                      p->base + (size_t)(row0[q] + i) * V, p->bias + (size_t)q * V, cd->d->markov_b_scale, V,
                      c->mask_token_id);
            TRY(cudaGetLastError());
            TRY(bn_cu_argmax(l, V, p->chain + (size_t)(i + 1) * S + q, p->stream));
            if (c->has_conf) {
                BN_LAUNCH(ds_conf_kernel, 1, 256, 0, p->stream, p->conf + (size_t)q * B + i,
                          p->xn + (size_t)(row0[q] + i) * E, p->w1 + (size_t)q * R, cd->conf_w, cd->conf_b, E,
                          c->conf_in);
                TRY(cudaGetLastError());
            }
        }
    }
    return cudaSuccess;
}

// draft_kernels: block pass + Markov chain of n rows, replayed from a CUDA graph captured on first use
// for this n (ids, chain[0] and d_pos live in device memory: the graph is replayed unchanged).
static cudaError_t draft_kernels(bn_cuda_dstate *s, int n) {
    cudaGraphExec_t *exec = &s->graphs[n];
    if (!*exec) TRY(bn_cu_capture(s->stream, exec, [&] {
        const ds_pass p = pass_of(s, 1, !s->no_fuse);
        const cudaError_t e = ds_block_rows(s->cd, &p, &s, &n, 1);
        return e == cudaSuccess ? ds_chains(s->cd, &p, &n, 1) : e;
    }));
    return cudaGraphLaunch(*exec, s->stream);
}

// ---- API ---------------------------------------------------------------------------------------------
// start_block: checks the arguments and uploads [id_last, MASK × (n_rows−1)] (and prev_0 = id_last).
static int start_block(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_rows, char *err, size_t errlen) {
    const bn_drafter_config *c = &s->cd->cfg;
    if (n_past != s->n_cache)
        return bn_err(err, errlen, "drafter: block at position %d but the cache holds %d context rows", n_past,
                      s->n_cache);
    if (n_rows < 1 || n_rows > c->block_size) return bn_err(err, errlen, "drafter: block of %d rows (block size %d)",
                                                            n_rows, c->block_size);
    if (n_past + n_rows > s->n_ctx) return bn_err(err, errlen, "drafter: context full");
    if (id_last < 0 || id_last >= c->n_vocab) return bn_err(err, errlen, "drafter: token %d out of range", id_last);
    for (int i = 0; i < n_rows; i++) s->h_io[i] = i == 0 ? id_last : c->mask_token_id;
    cudaError_t e = cudaMemcpyAsync(s->ids, s->h_io, sizeof(int32_t) * n_rows, cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(s->chain, s->h_io, sizeof(int32_t), cudaMemcpyHostToDevice, s->stream);
    return e == cudaSuccess ? 0 : fail(s, e, "drafter block upload", err, errlen);
}

int bn_cuda_drafter_block(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_rows, float *h, float *base,
                          char *err, size_t errlen) {
    if (start_block(s, id_last, n_past, n_rows, err, errlen) != 0) return -1;
    const bn_drafter_config *c = &s->cd->cfg;
    cudaError_t e = set_pos(s, n_past);
    const ds_pass p = pass_of(s, 1, !s->no_fuse);
    if (e == cudaSuccess) e = ds_block_rows(s->cd, &p, &s, &n_rows, 1);
    if (e == cudaSuccess && h)
        e = cudaMemcpyAsync(h, s->xn, sizeof(float) * (size_t)c->n_embd * n_rows, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess && base)
        e = cudaMemcpyAsync(base, s->base, sizeof(float) * (size_t)c->n_vocab * n_rows, cudaMemcpyDeviceToHost,
                            s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    return e == cudaSuccess ? 0 : fail(s, e, "bn_cuda_drafter_block", err, errlen);
}

// ds_read_chain: the drafts of a chain read back to the host (h_chain[i * stride]: prev_i, from prev_0 = id_last; its
// confidences h_conf[i]) under spec/dspark.c's truncation rules (stop at an invalid prev or the first c_i < p_min);
// conf (may be NULL) gets c_i of the returned drafts. Returns their count.
int ds_read_chain(const bn_drafter_config *c, const int32_t *h_chain, int stride, const float *h_conf, int n_max,
                  float p_min, int32_t *drafts, float *conf) {
    int n = 0;
    for (; n < n_max; n++) {
        const int32_t prev = h_chain[(size_t)n * stride], next = h_chain[(size_t)(n + 1) * stride];
        if (prev == c->mask_token_id || prev < 0 || prev >= c->n_vocab || next < 0) break;
        const float ci = c->has_conf ? h_conf[n] : 1.0f;
        if (conf) conf[n] = ci;
        if (p_min > 0 && ci < p_min) break;
        drafts[n] = next;
    }
    return n;
}

int bn_cuda_drafter_draft_start(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_max, char *err, size_t errlen) {
    const bn_drafter_config *c = &s->cd->cfg;
    if (n_max > c->block_size) n_max = c->block_size;
    if (n_max <= 0 || id_last == c->mask_token_id) return 0;
    if (start_block(s, id_last, n_past, n_max, err, errlen) != 0) return -1;
    int32_t *h_chain = s->h_io + c->block_size;
    cudaError_t e = set_pos(s, n_past);
    if (e == cudaSuccess) e = draft_kernels(s, n_max);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(h_chain, s->chain, sizeof(int32_t) * (size_t)(n_max + 1), cudaMemcpyDeviceToHost,
                            s->stream);
    if (e == cudaSuccess && c->has_conf)
        e = cudaMemcpyAsync(s->h_conf, s->conf, sizeof(float) * n_max, cudaMemcpyDeviceToHost, s->stream);
    return e == cudaSuccess ? n_max : fail(s, e, "bn_cuda_drafter_draft_start", err, errlen);
}

int bn_cuda_drafter_draft_finish(bn_cuda_dstate *s, int n_max, float p_min, int32_t *drafts, float *conf, char *err,
                                 size_t errlen) {
    const bn_drafter_config *c = &s->cd->cfg;
    const cudaError_t e = cudaStreamSynchronize(s->stream); // also for n_max 0: work enqueued before (process_start)
    if (e != cudaSuccess) return fail(s, e, "bn_cuda_drafter_draft", err, errlen);
    return ds_read_chain(c, s->h_io + c->block_size, 1, s->h_conf, n_max, p_min, drafts, conf);
}

int bn_cuda_drafter_draft(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_max, float p_min, int32_t *drafts,
                          float *conf, char *err, size_t errlen) {
    const int n = bn_cuda_drafter_draft_start(s, id_last, n_past, n_max, err, errlen);
    return n < 0 ? -1 : bn_cuda_drafter_draft_finish(s, n, p_min, drafts, conf, err, errlen);
}
