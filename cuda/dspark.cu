// cuda/dspark.cu — the DSpark drafter on the device (cuda/cuda_dspark.h): its memory. Weight upload, one device
// allocation per drafter state (KV cache of every layer + scratch) and the batch workspace of the batched draft. The
// stages: the encoder and K/V injection (cuda/dspark_context.cu), the block pass, Markov chain and confidence head of
// one state (cuda/dspark_draft.cu), the batched draft of several (cuda/dspark_batch.cu); shared definitions in
// cuda/dspark_impl.cuh. The math is spec/dspark.c's (docs/dspark.md §4), in the same order.
#include "cuda/common.cuh"
#include "cuda/dspark_impl.cuh"

// ---- device weights -------------------------------------------------------------------------------
// upload_all: every weight of cd->d (matrices in their stored type, norms and heads as fp32); 0 or -1.
static int upload_all(bn_cuda_drafter *cd, char *err, size_t errlen) {
    const bn_drafter *d = cd->d;
    const bn_drafter_config *c = &cd->cfg;
    const size_t E = (size_t)c->n_embd, hd = (size_t)c->head_dim;
    bn_cu_allocs *A = &cd->allocs;
#define MAT(w, out) (bn_cu_upload_weight(A, (w), (out), err, errlen) != 0)
#define VEC(host, n, out) (bn_cu_upload_floats(A, (const float *)(host), (n), (out), err, errlen) != 0)
    if (MAT(&d->token_embd, &cd->token_embd)) return -1;
    if (d->output.data == d->token_embd.data) cd->output = cd->token_embd; // tied: one device copy
    else if (MAT(&d->output, &cd->output)) return -1;
    if (MAT(&d->fc, &cd->fc) || MAT(&d->markov_a, &cd->markov_a) || MAT(&d->markov_b, &cd->markov_b)) return -1;
    if (VEC(d->hidden_norm.data, E, &cd->hidden_norm) || VEC(d->output_norm.data, E, &cd->output_norm)) return -1;
    if (c->has_conf) {
        if (VEC(d->conf_wf, (size_t)c->conf_in, &cd->conf_w)) return -1;
        cd->conf_b = ((const float *)d->conf_b.data)[0];
    }
    if (c->log_snr && VEC(d->snr_emb, 2 * E, &cd->snr_emb)) return -1;
    for (int il = 0; il < c->n_layer; il++) {
        const bn_drafter_layer *ly = &d->layers[il];
        ds_layer *L = &cd->layers[il];
        if (MAT(&ly->attn_q, &L->attn_q) || MAT(&ly->attn_k, &L->attn_k) || MAT(&ly->attn_v, &L->attn_v) ||
            MAT(&ly->attn_output, &L->attn_output) || MAT(&ly->ffn_gate, &L->ffn_gate) ||
            MAT(&ly->ffn_up, &L->ffn_up) || MAT(&ly->ffn_down, &L->ffn_down))
            return -1;
        if (VEC(ly->attn_norm.data, E, &L->attn_norm) || VEC(ly->ffn_norm.data, E, &L->ffn_norm) ||
            VEC(ly->attn_q_norm.data, hd, &L->q_norm) || VEC(ly->attn_k_norm.data, hd, &L->k_norm))
            return -1;
    }
#undef MAT
#undef VEC
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    return 0;
}

bn_cuda_drafter *bn_cuda_drafter_upload(const bn_drafter *d, char *err, size_t errlen) {
    if (!bn_cuda_available(err, errlen)) return NULL;
    bn_cuda_mma_in_use(); // the tensor-core self-check runs before anything is captured
    if (d->cfg.head_dim > BN_CU_MAX_HEAD_DIM) {
        bn_err(err, errlen, "CUDA: drafter head_dim %d exceeds the kernels' limit %d", d->cfg.head_dim,
               BN_CU_MAX_HEAD_DIM);
        return NULL;
    }
    bn_cuda_drafter *cd = (bn_cuda_drafter *)xcalloc(1, sizeof *cd);
    cd->d = d;
    cd->cfg = d->cfg;
    cd->layers = (ds_layer *)xcalloc((size_t)d->cfg.n_layer, sizeof(ds_layer));
    if (upload_all(cd, err, errlen) != 0) {
        cudaGetLastError();
        bn_cuda_drafter_free(cd);
        return NULL;
    }
    return cd;
}

static void ds_batch_free(ds_batch *b);

void bn_cuda_drafter_free(bn_cuda_drafter *cd) {
    if (!cd) return;
    ds_batch_free(cd->batch);
    bn_cu_allocs_free(&cd->allocs);
    free(cd->layers);
    free(cd);
}

size_t bn_cuda_drafter_bytes(const bn_cuda_drafter *cd) { return cd->allocs.bytes; }

// ---- the device state ------------------------------------------------------------------------------
static size_t scratch_bytes(const bn_cuda_drafter *cd, int rows) {
    const int B = cd->cfg.block_size;
    size_t m = bn_cu_matmul_scratch_bytes(&cd->fc, rows);
    const size_t head = bn_cu_matmul_scratch_bytes(&cd->output, B), mk = bn_cu_matmul_scratch_bytes(&cd->markov_b, 1);
    m = m > head ? m : head;
    m = m > mk ? m : mk;
    for (int il = 0; il < cd->cfg.n_layer; il++) {
        const ds_layer *L = &cd->layers[il];
        const bn_cu_weight *ws[] = {&L->attn_q, &L->attn_k, &L->attn_v, &L->attn_output,
                                    &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            const size_t a = bn_cu_matmul_scratch_bytes(ws[i], rows), b = bn_cu_matmul_scratch_bytes(ws[i], 1);
            m = m > a ? m : a;
            m = m > b ? m : b;
        }
    }
    return m;
}

// carve_rows: o's block pass activations for R rows (x, xn, mo {E, R}; q, att {nh*hd, R}; kb, vb {nkv*hd, R}; gate,
// up {F, R}) out of c: a drafter state's and the batch workspace's.
template <typename T> static void carve_rows(bn_cu_carver *c, T *o, const bn_drafter_config *f, size_t R) {
    const size_t E = f->n_embd, qw = (size_t)f->n_head * f->head_dim, kvw = (size_t)f->n_head_kv * f->head_dim;
    float **fields[] = {&o->x, &o->xn, &o->mo, &o->q, &o->att, &o->kb, &o->vb, &o->gate, &o->up};
    const size_t widths[] = {E, E, E, qw, qw, kvw, kvw, (size_t)f->n_ff, (size_t)f->n_ff};
    for (int i = 0; i < 9; i++) {
        float *p = (float *)bn_cu_carve(c, sizeof(float) * widths[i] * R);
        if (c->base) *fields[i] = p;
    }
}

// ds_layout: assigns s's device pointers (when c->base != NULL); returns the total bytes.
static size_t ds_layout(bn_cu_carver *c, bn_cuda_dstate *s) {
    const bn_drafter_config *f = &s->cd->cfg;
    const size_t E = f->n_embd, R = s->rows, B = f->block_size, V = f->n_vocab;
    const size_t kvw = (size_t)f->n_head_kv * f->head_dim;
    for (int il = 0; il < f->n_layer; il++) {
        float *k = (float *)bn_cu_carve(c, sizeof(float) * kvw * (size_t)s->n_ctx);
        float *v = (float *)bn_cu_carve(c, sizeof(float) * kvw * (size_t)s->n_ctx);
        if (c->base) s->k_cache[il] = k, s->v_cache[il] = v;
    }
#define PIECE(field, T, n) do { T *p_ = (T *)bn_cu_carve(c, sizeof(T) * (n)); if (c->base) s->field = p_; } while (0)
    PIECE(taps, float, (size_t)f->n_taps * E * R);
    carve_rows(c, s, f, R);
    PIECE(base, float, V * B);
    PIECE(bias, float, V);
    PIECE(logit, float, V);
    PIECE(w1, float, (size_t)f->markov_rank);
    PIECE(conf, float, B);
    PIECE(ids, int32_t, B);
    PIECE(chain, int32_t, B + 1);
    PIECE(d_pos, int, 4);
#undef PIECE
    void *scr = bn_cu_carve(c, scratch_bytes(s->cd, s->rows));
    if (c->base) s->mm_scratch = scr;
    return c->off;
}

bn_cuda_dstate *bn_cuda_dstate_new(bn_cuda_drafter *cd, int n_ctx, char *err, size_t errlen) {
    const bn_drafter_config *f = &cd->cfg;
    bn_cuda_dstate *s = (bn_cuda_dstate *)xcalloc(1, sizeof *s);
    s->cd = cd;
    s->n_ctx = (n_ctx < 1 ? 1 : n_ctx) + f->block_size;
    s->rows = f->block_size > DS_CHUNK ? f->block_size : DS_CHUNK;
    s->k_cache = (float **)xcalloc((size_t)f->n_layer, sizeof(float *));
    s->v_cache = (float **)xcalloc((size_t)f->n_layer, sizeof(float *));
    s->graphs = (cudaGraphExec_t *)xcalloc((size_t)f->block_size + 1, sizeof(cudaGraphExec_t));
    s->no_fuse = bn_env_is("BONSAI_CUDA_FUSE", "0");
    bn_cu_carver count = {NULL, 0};
    const size_t total = ds_layout(&count, s);
    int rc = 0;
    if (cudaMalloc(&s->block, total) != cudaSuccess) {
        s->block = NULL;
        rc = bn_err(err, errlen, "CUDA: out of device memory for a %d-position drafter state (%zu bytes)", n_ctx,
                    total);
    }
    if (rc == 0) {
        bn_cu_carver fill = {(char *)s->block, 0};
        ds_layout(&fill, s);
    }
    if (rc == 0 && (cudaMallocHost((void **)&s->h_io, sizeof(int32_t) * (size_t)(2 * f->block_size + 4)) !=
                        cudaSuccess ||
                    cudaMallocHost((void **)&s->h_conf, sizeof(float) * (size_t)f->block_size) != cudaSuccess))
        rc = bn_err(err, errlen, "CUDA: cannot allocate pinned host memory");
    if (rc == 0) rc = bn_cu_stream_blas_new(&s->stream, &s->blas, err, errlen);
    if (rc == 0 && cudaEventCreateWithFlags(&s->queued, cudaEventDisableTiming) != cudaSuccess)
        rc = bn_err(err, errlen, "CUDA: cannot create an event");
    static uint64_t next_id = 1;
    s->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    if (rc != 0) {
        cudaGetLastError();
        bn_cuda_dstate_free(s);
        return NULL;
    }
    return s;
}

void bn_cuda_dstate_free(bn_cuda_dstate *s) {
    if (!s) return;
    for (int i = 0; i <= s->cd->cfg.block_size; i++)
        if (s->graphs[i]) cudaGraphExecDestroy(s->graphs[i]);
    free(s->graphs);
    if (s->queued) cudaEventDestroy(s->queued);
    bn_cu_stream_blas_free(s->stream, s->blas);
    if (s->h_io) cudaFreeHost(s->h_io);
    if (s->h_conf) cudaFreeHost(s->h_conf);
    if (s->block) cudaFree(s->block);
    free(s->k_cache);
    free(s->v_cache);
    free(s);
}

int bn_cuda_dstate_n_cache(const bn_cuda_dstate *s) { return s->n_cache; }

int bn_cuda_dstate_truncate(bn_cuda_dstate *s, int n) {
    if (n < s->n_cache) s->n_cache = n < 0 ? 0 : n;
    return s->n_cache;
}

// ---- the batch workspace ---------------------------------------------------------------------------
// batch_layout: assigns b's device pointers (when c->base != NULL); returns the total bytes.
static size_t batch_layout(bn_cu_carver *c, ds_batch *b, const bn_cuda_drafter *cd) {
    const bn_drafter_config *f = &cd->cfg;
    const size_t R = DS_BATCH_ROWS, S = DS_BATCH_SEQS, B = f->block_size, V = f->n_vocab;
#define PIECE(field, T, n) do { T *p_ = (T *)bn_cu_carve(c, sizeof(T) * (n)); if (c->base) b->field = p_; } while (0)
    carve_rows(c, b, f, R);
    PIECE(base, float, V * R);
    PIECE(bias, float, V * S);
    PIECE(logit, float, V * S);
    PIECE(w1, float, (size_t)f->markov_rank * S);
    PIECE(conf, float, B * S);
    PIECE(ids, int32_t, R);
    PIECE(chain, int32_t, (B + 1) * S);
#undef PIECE
    size_t m = scratch_bytes(cd, R);
    const size_t head = bn_cu_matmul_scratch_bytes(&cd->output, R), mk = bn_cu_matmul_scratch_bytes(&cd->markov_b, S);
    m = m > head ? m : head;
    m = m > mk ? m : mk;
    void *scr = bn_cu_carve(c, m);
    if (c->base) b->mm_scratch = scr;
    return c->off;
}

static void ds_batch_free(ds_batch *b) {
    if (!b) return;
    for (int i = 0; i < DS_BATCH_GRAPHS; i++)
        if (b->graphs[i].exec) cudaGraphExecDestroy(b->graphs[i].exec);
    bn_cu_stream_blas_free(b->stream, b->blas);
    if (b->h_ids) cudaFreeHost(b->h_ids);
    if (b->h_chain) cudaFreeHost(b->h_chain);
    if (b->h_conf) cudaFreeHost(b->h_conf);
    if (b->block) cudaFree(b->block);
    free(b);
}

// ds_batch_get: cd's batch workspace, made on first use; NULL with err.
ds_batch *ds_batch_get(bn_cuda_drafter *cd, char *err, size_t errlen) {
    if (cd->batch) return cd->batch;
    const bn_drafter_config *f = &cd->cfg;
    ds_batch *b = (ds_batch *)xcalloc(1, sizeof *b);
    bn_cu_carver count = {NULL, 0};
    const size_t total = batch_layout(&count, b, cd);
    int rc = 0;
    if (cudaMalloc(&b->block, total) != cudaSuccess)
        b->block = NULL,
        rc = bn_err(err, errlen, "CUDA: out of device memory for the batched drafter (%zu bytes)", total);
    if (rc == 0) {
        bn_cu_carver fill = {(char *)b->block, 0};
        batch_layout(&fill, b, cd);
    }
    const size_t S = DS_BATCH_SEQS, B = f->block_size;
    if (rc == 0 && (cudaMallocHost((void **)&b->h_ids, sizeof(int32_t) * DS_BATCH_ROWS) != cudaSuccess ||
                    cudaMallocHost((void **)&b->h_chain, sizeof(int32_t) * (B + 1) * S) != cudaSuccess ||
                    cudaMallocHost((void **)&b->h_conf, sizeof(float) * B * S) != cudaSuccess))
        rc = bn_err(err, errlen, "CUDA: cannot allocate pinned host memory");
    if (rc == 0) rc = bn_cu_stream_blas_new(&b->stream, &b->blas, err, errlen);
    if (rc != 0) {
        cudaGetLastError();
        ds_batch_free(b);
        return NULL;
    }
    return cd->batch = b;
}
