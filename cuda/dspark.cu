// cuda/dspark.cu — the DSpark drafter on the device (cuda/cuda_dspark.h): weight upload, one device
// allocation per drafter state (KV cache of every layer + scratch), encoder + K/V injection, the
// non-causal block pass, LM head, Markov chain and confidence head. The math is spec/dspark.c's
// (docs/dspark.md §4), in the same order; matrix products, norms, RoPE + cache append, SwiGLU and argmax
// reuse the forward's kernels (cuda/mm.cuh, cuda/fwd.cuh); the non-causal block attention, the
// log-SNR add, the Markov logits and the confidence head are the small kernels below.
#include "cuda/common.cuh"
#include "cuda/mm.cuh"
#include "cuda/mm_impl.cuh" // bn_q8_store: the block pass's producers write the next product's Q8 activations
#include "cuda/fwd.cuh"
#include "cuda/upload.cuh"
#include "cuda/cuda_dspark.h"
#include "cuda/cuda_engine.h"
extern "C" {
#include "base/util.h"
}
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DS_CHUNK 64       // context rows per encoder / K-V injection chunk (spec/dspark.c's BN_DSPARK_CHUNK)
#define DS_ATT_THREADS 128
#define DS_ATT_TILE 128   // keys scored per pass of the block attention
#define DS_ACC (BN_CU_MAX_HEAD_DIM / DS_ATT_THREADS)
#define DS_BATCH_ROWS 64  // block rows of one batched draft pass (bn_cuda_drafter_draft_multi): 4 sequences of B = 16
#define DS_BATCH_SEQS 8   // sequences of one batched draft pass
#define DS_BATCH_GRAPHS 32 // captured batched passes kept per drafter (keyed by their states and row counts: the
                          // adaptive draft lengths of a few slots make a few dozen combinations)

#define TRY(call)                                                                                                   \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) return e_;                                                                           \
    } while (0)

// ---- device weights -------------------------------------------------------------------------------
struct ds_layer {
    float *attn_norm, *ffn_norm;              // {E}
    float *q_norm, *k_norm;                   // {hd}
    bn_cu_weight attn_q, attn_k, attn_v;      // {E, nh*hd}, {E, nkv*hd} x2
    bn_cu_weight attn_output;                 // {nh*hd, E}
    bn_cu_weight ffn_gate, ffn_up, ffn_down;  // {E, F} x2, {F, E}
};

struct bn_cuda_drafter {
    const bn_drafter *d;
    bn_drafter_config cfg;
    bn_cu_weight token_embd, output;  // {E, V} (shared device data when the file ties them)
    bn_cu_weight fc;                  // {C*E, E}
    bn_cu_weight markov_a, markov_b;  // {R, V}
    float *hidden_norm, *output_norm; // {E}
    float *conf_w;                    // {conf_in} or NULL
    float conf_b;
    float *snr_emb;                   // {E, 2}: anchor row, mask row (NULL without log-SNR)
    ds_layer *layers;                 // [n_layer]
    bn_cu_allocs allocs;              // every device allocation of the weights
    struct ds_batch *batch;           // the batched draft's workspace (bn_cuda_drafter_draft_multi), NULL until used
};

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

static void ds_batch_free(struct ds_batch *b);

void bn_cuda_drafter_free(bn_cuda_drafter *cd) {
    if (!cd) return;
    ds_batch_free(cd->batch);
    bn_cu_allocs_free(&cd->allocs);
    free(cd->layers);
    free(cd);
}

size_t bn_cuda_drafter_bytes(const bn_cuda_drafter *cd) { return cd->allocs.bytes; }

// ---- the device state ------------------------------------------------------------------------------
struct bn_cuda_dstate {
    bn_cuda_drafter *cd;
    int n_ctx;             // positions (context + block rows)
    int n_cache;           // context rows present
    int rows;              // scratch rows: max(DS_CHUNK, B)
    cudaStream_t stream;
    cublasHandle_t blas;
    void *block;           // one device allocation holding everything below
    float **k_cache, **v_cache; // [n_layer] -> {nkv*hd, n_ctx} fp32: K after k_norm + RoPE
    float *taps;           // {C*E, rows}
    float *x, *xn, *mo;    // {E, rows} (xn holds g while processing)
    float *q, *att;        // {nh*hd, rows}
    float *kb, *vb;        // {nkv*hd, rows}
    float *gate, *up;      // {F, rows}
    float *base;           // {V, B} base logits of the block rows
    float *bias, *logit;   // {V}
    float *w1;             // {R}: W1[prev_i] of the current chain step
    float *conf;           // {B}
    int32_t *ids;          // {B} block tokens [id_last, MASK...]
    int32_t *chain;        // {B + 1}: prev_0 = id_last, then the drafts
    int *d_pos;            // first position of the current chunk / block
    void *mm_scratch;
    int32_t *h_io;         // pinned: [0, B) ids in, [B, 2B+1) chain out
    float *h_conf;         // pinned {B}
    cudaGraphExec_t *graphs; // [B + 1]: the captured draft (block pass + chain) per row count, NULL until used
    bool no_fuse;          // env BONSAI_CUDA_FUSE=0 at creation: every product of the block pass quantizes its input
    cudaEvent_t queued;    // recorded after the work enqueued on stream, for a batched draft pass to wait for
    uint64_t id;           // unique per state ever made (the batched pass's graph keys: addresses get reused)
};

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

// ---- math ----------------------------------------------------------------------------------------
static cudaError_t mm(bn_cuda_dstate *s, const bn_cu_weight *w, const float *x, float *y, int nb) {
    return bn_cu_matmul(w, x, y, nb, s->mm_scratch, s->blas, s->stream);
}

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

// q8_for: where the producer of the input of W[0..n) (a norm or SwiGLU) writes its Q8 activations (*q, in scratch)
// so that the product skips its quantize launch; returns q, or NULL: fusion off, more rows than one mmvq chunk, or
// not bn_cu_q8_fusable (cuda/forward.cu's rule).
static const bn_q8_out *q8_for(bool fuse, void *scratch, const bn_cu_weight *const *w, int n, int n_rows,
                               bn_q8_out *q) {
    return fuse && n_rows <= BN_CU_MMVQ_MAX_NB && bn_cu_q8_fusable(w, n, n_rows, scratch, q) ? q : NULL;
}

// set_pos: d_pos = pos, enqueued. From pageable memory on purpose: such a host-to-device copy is staged
// before cudaMemcpyAsync returns, so the chunks of one bn_cuda_drafter_process can each set their own.
static cudaError_t set_pos(bn_cuda_dstate *s, int pos) {
    const int host_pos = pos;
    return cudaMemcpyAsync(s->d_pos, &host_pos, sizeof(int), cudaMemcpyHostToDevice, s->stream);
}

static float theta_scale(const bn_drafter_config *c) { return powf(c->rope_base, -2.0f / (float)c->n_rot); }

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

// ---- the block pass and the Markov chains: one drafter state's draft, or several states' in one batched pass ----
// ds_pass: what a pass reads and writes: a drafter state's own buffers (one sequence) or the batched draft's workspace
// (several sequences, their block rows one after another). pass_of makes one from either (the same field names).
struct ds_pass {
    float *x, *xn, *mo, *q, *att, *kb, *vb, *gate, *up; // {width, rows} (carve_rows)
    float *base;                  // {V, rows} base logits of every block row
    float *bias, *logit, *w1;     // per sequence q at q·V, q·V, q·R: the current chain step's
    float *conf;                  // per sequence q at q·B: its confidences
    int32_t *ids;                 // {rows} block tokens [id_last, MASK...] of each sequence
    int32_t *chain;               // chain[i * stride + q] = prev_i of sequence q (prev_0 = its id_last)
    int stride;                   // 1 (a state's pass) or DS_BATCH_SEQS (the batched pass)
    void *mm_scratch;
    cublasHandle_t blas;
    cudaStream_t stream;
    bool fuse;                    // the producers write the next products' Q8 activations (a one-sequence pass only)
};
template <typename T> static ds_pass pass_of(T *o, int stride, bool fuse) {
    return ds_pass{o->x, o->xn, o->mo, o->q, o->att, o->kb, o->vb, o->gate, o->up, o->base, o->bias, o->logit, o->w1,
                   o->conf, o->ids, o->chain, stride, o->mm_scratch, o->blas, o->stream, fuse};
}

// block_rows: the block pass of the n sequences ss (rows[q] block rows each, tokens in p->ids, each state's first
// position in its d_pos; docs/dspark.md §4.4): the final hidden (after output_norm) into p->xn and the base logits into
// p->base. Products over all rows (each weight read once per 32 rows, mm_chunks); RoPE + cache append (the block
// rows' K/V after the state's context rows, temporary: n_cache stays) and the block attention per sequence on its
// own cache. Kernels only: graph-capturable. With p->fuse (one sequence) the norms, the attention and SwiGLU write
// the next products' Q8 activations where that fuses (q8_for); the results are bit-identical either way.
static cudaError_t block_rows(const bn_cuda_drafter *cd, const ds_pass *p, bn_cuda_dstate *const *ss, const int *rows,
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

// chains: the Markov chains of the n sequences after block_rows (docs/dspark.md §4.5–4.6), stepping together: per step
// i, W1[prev_i] → w1 and W2·w1 → bias of every sequence in one product each, then per sequence
// l = base_i + scale·bias, chain[i+1] = argmax l (MASK skipped, ties → lowest id), conf[i] = σ(w·[h_i; w1] + b).
// A sequence past its rows keeps the valid prev it was uploaded with: its later steps are computed and never read.
static cudaError_t chains(const bn_cuda_drafter *cd, const ds_pass *p, const int *rows, int n) {
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
        const cudaError_t e = block_rows(s->cd, &p, &s, &n, 1);
        return e == cudaSuccess ? chains(s->cd, &p, &n, 1) : e;
    }));
    return cudaGraphLaunch(*exec, s->stream);
}

// ---- API ---------------------------------------------------------------------------------------------
// fail: err for a CUDA error in `what`; first waits for s's stream, so no kernel enqueued before the error still
// reads the target's taps or the pinned staging rows when the caller moves on.
static int fail(bn_cuda_dstate *s, cudaError_t e, const char *what, char *err, size_t errlen) {
    cudaStreamSynchronize(s->stream);
    cudaGetLastError();
    return bn_err(err, errlen, "CUDA error: %s in %s", cudaGetErrorString(e), what);
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
    if (e == cudaSuccess) e = block_rows(s->cd, &p, &s, &n_rows, 1);
    if (e == cudaSuccess && h)
        e = cudaMemcpyAsync(h, s->xn, sizeof(float) * (size_t)c->n_embd * n_rows, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess && base)
        e = cudaMemcpyAsync(base, s->base, sizeof(float) * (size_t)c->n_vocab * n_rows, cudaMemcpyDeviceToHost,
                            s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    return e == cudaSuccess ? 0 : fail(s, e, "bn_cuda_drafter_block", err, errlen);
}

// read_chain: the drafts of a chain read back to the host (h_chain[i * stride]: prev_i, from prev_0 = id_last; its
// confidences h_conf[i]) under spec/dspark.c's truncation rules (stop at an invalid prev or the first c_i < p_min);
// conf (may be NULL) gets c_i of the returned drafts. Returns their count.
static int read_chain(const bn_drafter_config *c, const int32_t *h_chain, int stride, const float *h_conf, int n_max,
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
    return read_chain(c, s->h_io + c->block_size, 1, s->h_conf, n_max, p_min, drafts, conf);
}

int bn_cuda_drafter_draft(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_max, float p_min, int32_t *drafts,
                          float *conf, char *err, size_t errlen) {
    const int n = bn_cuda_drafter_draft_start(s, id_last, n_past, n_max, err, errlen);
    return n < 0 ? -1 : bn_cuda_drafter_draft_finish(s, n, p_min, drafts, conf, err, errlen);
}

// ---- batched drafting ---------------------------------------------------------------------------------
// bn_cuda_drafter_draft_multi: the block rows of several states go through one pass on the drafter's batch
// workspace: every weight is read once per DS_BATCH_ROWS rows (in mmvq chunks of up to 32 columns) instead of once
// per state, and the Markov chains of all states step together (one W2 product over their columns per step). Per
// state, only the RoPE + cache append and the block attention (on its own cache) run alone. The pass is captured as
// a graph per (states, row counts); the states' ids, chain starts and positions are uploaded before each replay.

struct ds_batch_graph {
    int n;                        // sequences (0: an empty slot)
    uint64_t ids[DS_BATCH_SEQS];  // their states (bn_cuda_dstate.id)
    int rows[DS_BATCH_SEQS];      // their block rows
    cudaGraphExec_t exec;
    uint64_t used;                // last use (replacement: the least recently used)
};

struct ds_batch {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *block;                  // one device allocation holding everything below
    float *x, *xn, *mo;           // {E, DS_BATCH_ROWS}
    float *q, *att;               // {nh*hd, DS_BATCH_ROWS}
    float *kb, *vb;               // {nkv*hd, DS_BATCH_ROWS}
    float *gate, *up;             // {F, DS_BATCH_ROWS}
    float *base;                  // {V, DS_BATCH_ROWS} base logits of every block row
    float *bias, *logit;          // {V, DS_BATCH_SEQS}: each sequence's Markov bias and logits of the current step
    float *w1;                    // {R, DS_BATCH_SEQS}: W1[prev] of each sequence's current step
    float *conf;                  // {B, DS_BATCH_SEQS}
    int32_t *ids;                 // {DS_BATCH_ROWS} block tokens, sequence after sequence
    int32_t *chain;               // {DS_BATCH_SEQS, B + 1}: step-major: chain[i * DS_BATCH_SEQS + q] = prev_i of q
    void *mm_scratch;
    int32_t *h_ids, *h_chain;     // pinned copies of ids and chain
    float *h_conf;                // pinned copy of conf
    ds_batch_graph graphs[DS_BATCH_GRAPHS];
    uint64_t uses;
};

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

// batch_get: cd's batch workspace, made on first use; NULL with err.
static ds_batch *batch_get(bn_cuda_drafter *cd, char *err, size_t errlen) {
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

// batch_graph: the captured block_rows + chains of (ss, rows, n), captured now when not kept; NULL exec with the error.
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
        const cudaError_t e = block_rows(cd, &p, ss, rows, n);
        return e == cudaSuccess ? chains(cd, &p, rows, n) : e;
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
    ds_batch *b = separate || n_drafting < 2 ? NULL : batch_get(cd, batch_err, sizeof batch_err);
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
                read_chain(c, b->h_chain + k, S, b->h_conf + (size_t)k * B, pr[k], p_min, drafts[at[k]], NULL);
    }
    return 0;
}
