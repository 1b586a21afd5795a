// cuda/dspark_context.cu — the device drafter's context (docs/dspark.md §4.2–4.3): the encoder
// g = RMSNorm(fc·taps; hidden_norm) of the target's tap rows (host memory, or the target's device tap buffer read in
// place) and the K/V injection of g into every layer's cache, in chunks of DS_CHUNK rows. Shared definitions:
// cuda/dspark_impl.cuh.
#include "cuda/common.cuh"
#include "cuda/dspark_impl.cuh"

static cudaError_t mm(bn_cuda_dstate *s, const bn_cu_weight *w, const float *x, float *y, int nb) {
    return bn_cu_matmul(w, x, y, nb, s->mm_scratch, s->blas, s->stream);
}

// upload_taps: nb host tap rows into s->taps (counted in bn_cuda_host_tap_bytes).
static cudaError_t upload_taps(bn_cuda_dstate *s, const float *taps, int nb) {
    const size_t bytes = sizeof(float) * (size_t)s->cd->cfg.n_taps * s->cd->cfg.n_embd * (size_t)nb;
    bn_cu_count_host_tap_bytes(bytes);
    return cudaMemcpyAsync(s->taps, taps, bytes, cudaMemcpyHostToDevice, s->stream);
}

// encode_chunk: s->xn = RMSNorm(fc · taps; hidden_norm) for nb <= rows tap rows in device memory; with q8 the
// norm also writes xn's Q8 activations there (inject_q8).
static cudaError_t encode_chunk(bn_cuda_dstate *s, const float *d_taps, int nb, const bn_q8_out *q8 = nullptr) {
    const bn_drafter_config *c = &s->cd->cfg;
    TRY(mm(s, &s->cd->fc, d_taps, s->xn, nb));
    return bn_cu_rmsnorm(s->xn, s->xn, s->cd->hidden_norm, c->n_embd, nb, c->norm_eps, s->stream, q8);
}

// inject_q8: where the encoder's norm writes the Q8 activations every layer's K/V product reads (the same g for
// all layers: quantized once instead of once per layer), or NULL: fusion off, more rows than one mmvq chunk, or
// not every attn_k / attn_v of the same type (a second element order would overwrite the scratch).
static const bn_q8_out *inject_q8(bn_cuda_dstate *s, int nb, bn_q8_out *q) {
    const bn_drafter_config *c = &s->cd->cfg;
    const int type = s->cd->layers[0].attn_k.type;
    for (int il = 0; il < c->n_layer; il++)
        if (s->cd->layers[il].attn_k.type != type || s->cd->layers[il].attn_v.type != type) return NULL;
    const bn_cu_weight *ws[] = {&s->cd->layers[0].attn_k, &s->cd->layers[0].attn_v};
    return q8_for(!s->no_fuse, s->mm_scratch, ws, 2, nb, q);
}

// inject_chunk: K = RoPE(k_norm(W_k g)), V = W_v g of nb rows (g in s->xn) into every layer's cache at
// positions pos.. (docs/dspark.md §4.3: no attn_norm, Q, FFN or residual); q8: g's Q8 activations (inject_q8).
static cudaError_t inject_chunk(bn_cuda_dstate *s, int pos, int nb, const bn_q8_out *q8 = nullptr) {
    const bn_drafter_config *c = &s->cd->cfg;
    TRY(set_pos(s, pos));
    for (int il = 0; il < c->n_layer; il++) {
        const ds_layer *L = &s->cd->layers[il];
        const bn_cu_weight *ws[] = {&L->attn_k, &L->attn_v};
        float *const ys[] = {s->kb, s->vb};
        if (q8) TRY(bn_cu_matmul_multi_q8(ws, 2, s->xn, ys, nb, s->mm_scratch, s->stream));
        else TRY(bn_cu_matmul_multi(ws, 2, s->xn, ys, nb, s->mm_scratch, s->blas, s->stream));
        TRY(bn_cu_attn_prep(s->kb, 0, 0, s->kb, s->vb, s->k_cache[il], s->v_cache[il], false, 0, c->n_head_kv,
                            c->head_dim, NULL, L->k_norm, c->norm_eps, c->n_rot, theta_scale(c), true, nb, s->d_pos,
                            s->stream));
    }
    return cudaSuccess;
}

int bn_cuda_drafter_encode(bn_cuda_dstate *s, const float *taps, int n, float *g, char *err, size_t errlen) {
    const int E = s->cd->cfg.n_embd;
    if (n < 0 || n > s->rows) return bn_err(err, errlen, "drafter encode: %d rows (at most %d)", n, s->rows);
    cudaError_t e = upload_taps(s, taps, n);
    if (e == cudaSuccess) e = encode_chunk(s, s->taps, n);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(g, s->xn, sizeof(float) * (size_t)E * n, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    return e == cudaSuccess ? 0 : fail(s, e, "bn_cuda_drafter_encode", err, errlen);
}

// process_rows: encoder + K/V injection of n tap rows at pos0.., in chunks of DS_CHUNK rows; taps in
// device memory (on_device) or host memory (each chunk copied up into s->taps first); with wait, returns once the
// stream is done (the taps may be rewritten then), else once the work is enqueued. Returns 0 or -1.
static int process_rows(bn_cuda_dstate *s, const float *taps, bool on_device, int n, int pos0, bool wait, char *err,
                        size_t errlen) {
    const bn_drafter_config *c = &s->cd->cfg;
    if (pos0 != s->n_cache)
        return bn_err(err, errlen, "drafter: process at position %d but the cache holds %d rows", pos0, s->n_cache);
    if (pos0 + n + c->block_size > s->n_ctx)
        return bn_err(err, errlen, "drafter: context full (%d + %d rows)", pos0, n);
    const size_t row = (size_t)c->n_taps * c->n_embd;
    cudaError_t e = cudaSuccess;
    for (int t0 = 0; t0 < n && e == cudaSuccess; t0 += DS_CHUNK) {
        const int nb = n - t0 < DS_CHUNK ? n - t0 : DS_CHUNK;
        const float *src = taps + (size_t)t0 * row;
        if (!on_device) {
            e = upload_taps(s, src, nb);
            src = s->taps;
        }
        bn_q8_out q;
        const bn_q8_out *q8 = inject_q8(s, nb, &q);
        if (e == cudaSuccess) e = encode_chunk(s, src, nb, q8);
        if (e == cudaSuccess) e = inject_chunk(s, pos0 + t0, nb, q8);
    }
    // the tap buffer (the caller's host one, or the target's device one) is rewritten after return
    if (e == cudaSuccess && wait) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return fail(s, e, "bn_cuda_drafter_process", err, errlen);
    s->n_cache = pos0 + n;
    return 0;
}

int bn_cuda_drafter_process(bn_cuda_dstate *s, const float *taps, int n, int pos0, char *err, size_t errlen) {
    return process_rows(s, taps, false, n, pos0, true, err, errlen);
}

int bn_cuda_drafter_process_dev(bn_cuda_dstate *s, const float *dev_taps, int n, int pos0, char *err, size_t errlen) {
    return process_rows(s, dev_taps, true, n, pos0, true, err, errlen);
}

int bn_cuda_drafter_process_start(bn_cuda_dstate *s, const float *taps, bool on_device, int n, int pos0, char *err,
                                  size_t errlen) {
    return process_rows(s, taps, on_device, n, pos0, false, err, errlen);
}
