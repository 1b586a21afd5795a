// cuda/dspark_impl.cuh — what the files of the device drafter share (C++/CUDA only): its weights, a drafter state,
// the batch workspace (cuda/dspark.cu), the encoder and K/V injection (cuda/dspark_context.cu), the block pass,
// Markov chain and draft of one state (cuda/dspark_draft.cu) and the batched draft of several
// (cuda/dspark_batch.cu). Calls go one way, down this list: dspark_batch.cu, dspark_draft.cu, dspark_context.cu,
// dspark.cu.
#ifndef BONSAI_CUDA_DSPARK_IMPL_CUH
#define BONSAI_CUDA_DSPARK_IMPL_CUH
#include "cuda/common.cuh"
#include "cuda/mm.cuh"
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

// ---- the batch workspace (bn_cuda_drafter_draft_multi) -----------------------------------------------
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

// ds_batch_get: cd's batch workspace, made on first use (cuda/dspark.cu); NULL with err.
ds_batch *ds_batch_get(bn_cuda_drafter *cd, char *err, size_t errlen);

// ---- helpers of every stage ------------------------------------------------------------------------
// q8_for: where the producer of the input of W[0..n) (a norm or SwiGLU) writes its Q8 activations (*q, in scratch)
// so that the product skips its quantize launch; returns q, or NULL: fusion off, more rows than one mmvq chunk, or
// not bn_cu_q8_fusable (cuda/forward.cu's rule).
static inline const bn_q8_out *q8_for(bool fuse, void *scratch, const bn_cu_weight *const *w, int n, int n_rows,
                               bn_q8_out *q) {
    return fuse && n_rows <= BN_CU_MMVQ_MAX_NB && bn_cu_q8_fusable(w, n, n_rows, scratch, q) ? q : NULL;
}

// set_pos: d_pos = pos, enqueued. From pageable memory on purpose: such a host-to-device copy is staged
// before cudaMemcpyAsync returns, so the chunks of one bn_cuda_drafter_process can each set their own.
static inline cudaError_t set_pos(bn_cuda_dstate *s, int pos) {
    const int host_pos = pos;
    return cudaMemcpyAsync(s->d_pos, &host_pos, sizeof(int), cudaMemcpyHostToDevice, s->stream);
}

static inline float theta_scale(const bn_drafter_config *c) { return powf(c->rope_base, -2.0f / (float)c->n_rot); }

// fail: err for a CUDA error in `what`; first waits for s's stream, so no kernel enqueued before the error still
// reads the target's taps or the pinned staging rows when the caller moves on.
static inline int fail(bn_cuda_dstate *s, cudaError_t e, const char *what, char *err, size_t errlen) {
    cudaStreamSynchronize(s->stream);
    cudaGetLastError();
    return bn_err(err, errlen, "CUDA error: %s in %s", cudaGetErrorString(e), what);
}

// ---- the block pass and the Markov chains (cuda/dspark_draft.cu) -------------------------------------
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

// ds_block_rows: the block pass of the n sequences ss (rows[q] block rows each, tokens in p->ids; docs/dspark.md
// §4.4): the final hidden into p->xn and the base logits into p->base; kernels only (graph-capturable).
cudaError_t ds_block_rows(const bn_cuda_drafter *cd, const ds_pass *p, bn_cuda_dstate *const *ss, const int *rows,
                          int n);
// ds_chains: the Markov chains of the n sequences after ds_block_rows, stepping together (docs/dspark.md §4.5–4.6).
cudaError_t ds_chains(const bn_cuda_drafter *cd, const ds_pass *p, const int *rows, int n);
// ds_read_chain: the drafts of a chain read back to the host under spec/dspark.c's truncation rules; their count.
int ds_read_chain(const bn_drafter_config *c, const int32_t *h_chain, int stride, const float *h_conf, int n_max,
                  float p_min, int32_t *drafts, float *conf);

#endif
