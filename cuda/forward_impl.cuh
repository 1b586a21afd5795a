// cuda/forward_impl.cuh — what the CUDA forward's files share (C++/CUDA only): the limits, the device model
// (cuda/model.cu), the device state and snapshots (cuda/state.cu), and small helpers; the layer loop is in
// cuda/forward.cu, the API's passes in cuda/forward_seq.cu and cuda/forward_batch.cu, their graphs in
// cuda/forward_graph.cu (cuda/forward_pass.cuh). Mirrors core/forward_impl.h for the CPU engine.
#ifndef BONSAI_CUDA_FORWARD_IMPL_CUH
#define BONSAI_CUDA_FORWARD_IMPL_CUH
#include "cuda/common.cuh"
#include "cuda/mm.cuh"
#include "cuda/fwd.cuh"
#include "cuda/upload.cuh"
#include "cuda/cuda_engine.h"
extern "C" {
#include "core/forward_impl.h" // bn_snapshot's layout (host snapshots share the CPU engine's)
#include "base/util.h"
// from quant/quant.h, which cannot be included next to common.cuh (both define bn_half)
int bn_dequantize(int type, const void *src, float *dst, int64_t n);
const char *bn_type_name(int type);
}
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T_F32 = 0, T_F16 = 1 }; // bn_type ids of quant/quant.h

#define MAX_PREFILL_BATCH 512 // tokens per chunk (scratch rows)
#define MAX_LOGIT_ROWS 32     // rows of logits computed per head matmul (the mmvq range, BN_CU_MMVQ_MAX_NB)
#define MAX_BATCH_COLS BN_CUDA_BATCH_MAX // sequences per bn_cuda_forward_batch (their logits rows fit one head block)
static_assert(MAX_BATCH_COLS <= MAX_LOGIT_ROWS, "a batch's logits rows fit one head block");
#define MAX_SPLITS 16         // flash-decoding key splits
#define MAX_SNAPS 64          // tokens of one bn_cuda_forward_snaps call

// ---- the device model ---------------------------------------------------------------------------
struct cu_layer {
    float *attn_norm, *post_norm;              // {H}
    bn_cu_weight ffn_gate, ffn_up, ffn_down;   // {H, F}, {H, F}, {F, H}
    bn_cu_weight attn_q, attn_k, attn_v;       // {H, q rows}, {H, nkv*hd} x2
    bn_cu_weight attn_output;                  // {nh*hd, H}
    float *q_norm, *k_norm;                    // {hd} or NULL
    float *q_bias, *k_bias, *v_bias;           // qwen2 only, else NULL
    bn_cu_weight attn_qkv, attn_gate;          // {H, conv_dim}, {H, Hv*dv}
    bn_cu_weight ssm_beta, ssm_alpha, ssm_out; // {H, Hv} x2, {Hv*dv, H}
    float *conv1d;                             // {K, conv_dim}
    float *ssm_dt, *ssm_a, *ssm_norm;          // {Hv}, {Hv}, {dv}
};

// One adapted weight of one adapter on the device (cuda/lora.cu).
struct cu_lora_ref {
    const bn_cu_weight *w;  // the weight it adapts
    const float *A, *Bt;    // device: A {n_in, r}, B transposed (r rows of n_out)
    int r, adapter;         // rank; the adapter's index (its column scales)
    int64_t n_in, n_out;
    float mult;             // alpha / r (1 when alpha is 0): s = user scale · mult
};
// The adapters of a device model: every adapted weight, the global scales new states start with.
struct cu_lora {
    int n_adapters, n_refs, max_rank;
    cu_lora_ref *refs;      // host array of device pointers
    float scales[BN_LORA_MAX];
};

struct bn_cuda_model {
    const bn_model *m;
    bn_config cfg;
    int first_layer;         // layers [first_layer, n_layer) are on the device (0: the whole model)
    bn_cu_weight token_embd; // {H, V} (first_layer 0 only)
    bn_cu_weight output;     // {H, V} (same device data as token_embd when tied)
    float *output_norm;      // {H}
    cu_layer *layers;        // [n_layer] (zero below first_layer)
    bn_cu_allocs allocs;     // every device allocation, freed together
    cu_lora *lora;           // LoRA adapters (bn_cuda_model_set_lora; NULL: none)
};

// ---- the device state ---------------------------------------------------------------------------
// What a captured pass bakes in besides the kernels of the layer loop. One-token steps: the device argmax
// of the logits (STEP_GREEDY, bn_cuda_decode_greedy), or the logits only, without or with taps written into
// the state's device tap buffer (STEP_LOGITS, STEP_TAPS). STEP_VERIFY: a bn_cuda_forward_snaps pass of n
// <= BN_CU_MMVQ_MAX_NB tokens (no cuBLAS inside) with per-token device snapshots (their pointers are read
// from d_snap_ptrs), optional device taps and the logits of every row or the last. The tap buffer row comes
// from device memory (d_pos[1]), so the row can change between replays. STEP_BATCH: a bn_cuda_forward_batch pass
// of n columns (the column table and tokens are read from device memory) with the logits of every column.
enum step_kind { STEP_GREEDY, STEP_LOGITS, STEP_TAPS, N_STEP_GRAPHS, STEP_VERIFY = N_STEP_GRAPHS, STEP_BATCH };
#define MAX_GRAPH_TAPS 16 // tap slots a captured pass can write (more: the launch-by-launch path)

// A captured pass and the configuration it was captured for (a different configuration re-captures).
struct step_graph {
    cudaGraphExec_t exec;
    int n;                             // tokens
    bool all_logits;                   // STEP_VERIFY: logits of every row (else the last)
    bool argmax;                       // the argmax of each logits row into d_argmax (a pass captured with it
                                       //   also serves requests without it)
    const float *taps;                 // the device tap buffer written (NULL: no taps)
    int n_taps;                        //   its slots per row,
    int tap_layers[MAX_GRAPH_TAPS];    //   the layer of each slot
};

struct bn_cuda_state {
    bn_cuda_model *cm;
    int n_ctx, n_batch, kv_type, pos;
    int n_splits;         // flash-decoding key splits for nb <= BN_CU_MMVQ_MAX_NB
    int logit_rows;       // rows of `logits`
    size_t n_recurrent;   // floats in `recurrent` (same layout as the CPU state's)
    cudaStream_t stream;
    cublasHandle_t blas;
    void *block;          // one device allocation holding every buffer below
    int *d_pos;           // [0] position of the next chunk's first token, [1] device tap buffer row of its taps
    int32_t *d_tokens;    // {n_batch} token ids of the chunk (the decode graph's argmax writes [0])
    int32_t *d_argmax;    // {logit_rows} argmax of each row of `logits` (bn_forward_out.argmax)
    float *d_topk_vals;   // {BN_FORWARD_TOPK_MAX, logit_rows} top-k logits of each row (bn_forward_out.topk)
    int32_t *d_topk_ids;  // {BN_FORWARD_TOPK_MAX, logit_rows} their ids
    void *topk_scratch;   // bn_cu_topk_scratch_bytes(V, BN_FORWARD_TOPK_MAX)
    float *d_lse;         // {logit_rows} ln Σ exp of each row of `logits` (bn_forward_out.lse)
    void **k_cache, **v_cache; // [n_layer] -> {n_head_kv*hd, n_ctx} fp32/fp16 (NULL on GDN layers)
    float **conv, **ssm;  // [n_layer] -> {K-1, conv_dim}, {dk, dv, Hv} inside `recurrent`
    float *recurrent;     // all conv windows and S matrices, contiguous
    float *x, *xn, *mo;   // {H, B}
    float *qg;            // {max(q rows, conv_dim), B}
    float *kb, *vb;       // {n_head_kv*hd, B}
    float *z;             // {Hv*dv, B}
    float *att;           // {max(nh*hd, Hv*dv), B}
    float *bb, *ab;       // {Hv, B}
    float *gate, *up;     // {F, B}
    float *logits;        // {V, logit_rows}
    float *att_scratch;   // bn_cu_attention_scratch_floats
    float *conv_scratch;  // bn_cu_gdn_conv_scratch_floats (token-parallel prefill conv; NULL without GDN layers)
    void *mm_scratch;     // bn_cu_matmul scratch (max over the model's weights)
    int32_t *h_io;        // pinned host ints: [0] token in, [1] next token out, [2] position, [3] tap row
    int tap_row;          // the row in d_pos[1] (-1: not set yet)
    float **d_snap_ptrs;  // {MAX_SNAPS} device pointers: per-token snapshot targets of a chunk
    float **h_snap_ptrs;  // pinned host staging of d_snap_ptrs
    void **d_cols;        // a batched pass's column table (bn_cuda_forward_batch / _multi): {MAX_BATCH_COLS}
                          // pointer-sized slots each for the positions (ints), the runs (ints, bn_cu_cols.run), the
                          // snapshot pointers and the tap rows (each column's row in its sequence's device tap
                          // buffer, or NULL), then {MAX_BATCH_COLS, 4, n_layer}: per layer the columns' k, v caches,
                          // conv windows, S
    void **h_cols;        // its host staging (the same layout), one upload per step
    float *dev_taps;      // bn_cuda_state_tap_buffer: {E, n_taps, rows} (own allocation; NULL until asked for)
    size_t dev_tap_floats; // its capacity
    step_graph graphs[N_STEP_GRAPHS]; // captured one-token steps, one per step_kind (exec NULL until first use)
    step_graph verify[BN_CU_MMVQ_MAX_NB + 1]; // captured STEP_VERIFY passes, by token count
    step_graph batch[MAX_BATCH_COLS + 1]; // captured STEP_BATCH passes (bn_cuda_forward_batch), by column count
    bool no_graphs;       // bn_cuda_state_use_graphs(s, 0): steps and verify passes launch kernel by kernel
    bool no_fuse;         // env BONSAI_CUDA_FUSE=0 at creation: every matmul group quantizes its own input (fused_q8)
    int attn_tiled;       // env BONSAI_CUDA_ATTN_TILED=1|mma at creation: prefill attention by query tiles, BN_CU_ATTN_*
    bool gdn_norm;        // env BONSAI_CUDA_GDN_NORM=1 at creation: GDN recurrence + output norm in one launch (decode)
    int64_t n_replays, n_captures; // bn_cuda_state_graph_counts
    // LoRA (cm->lora): per column, BN_LORA_MAX user scales; a single sequence's passes read d_lora_own (every row
    // this state's scales), a batched pass d_lora_cols (each column its sequence's), through lora_cur
    float h_lora[BN_LORA_MAX];  // this state's scales
    float *d_lora_own;          // {BN_LORA_MAX, n_batch}
    float *d_lora_cols;         // {BN_LORA_MAX, MAX_BATCH_COLS}
    float *h_lora_cols;         // its host staging
    const float *lora_cur;      // the scales of the pass being enqueued
    float *d_lora_u;            // {max rank, max(n_batch, MAX_BATCH_COLS)}: A·x
};

// ---- LoRA adapters (cuda/lora.cu) ------------------------------------------------------------
// bn_cuda_lora_free: frees a model's host adapter table (its device buffers go with the model's allocations).
void bn_cuda_lora_free(cu_lora *L);
// fw_lora: y[t] += Σ adapters of w s_t·B·(A·x[t]) for nb columns (s->lora_cur scales); async on s->stream.
cudaError_t fw_lora(bn_cuda_state *s, const bn_cu_weight *w, const float *x, float *y, int nb);

// ---- snapshots ----------------------------------------------------------------------------------
struct bn_cuda_snapshot {
    int pos;
    size_t n;   // floats
    float *data; // device {n}
};


static inline size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

// col_table_slots: pointer-sized slots of a batched step's column table (d_cols / h_cols) for n_layer layers.
static inline size_t col_table_slots(int n_layer) { return (size_t)MAX_BATCH_COLS * (4 + 4 * (size_t)n_layer); }

// drop_graph: destroys a captured pass (captured again on its next use).
static inline void drop_graph(step_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    memset(g, 0, sizeof *g);
}

#endif
