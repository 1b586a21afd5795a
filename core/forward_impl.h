// core/forward_impl.h — internal to the CPU engine (state.c, forward.c): the layout of bn_state.
#ifndef BONSAI_FORWARD_IMPL_H
#define BONSAI_FORWARD_IMPL_H
#include "core/forward.h"
#include "base/threads.h"
#include "core/adapter.h"

// Tokens per internal prefill chunk: scratch buffers hold this many activation rows.
#define BN_MAX_BATCH 64

struct bn_state {
    const bn_model *m;
    size_t alloc_bytes;   // size of the one anonymous mapping holding this struct and all buffers
    int n_ctx;
    int pos;              // tokens consumed
    int n_batch;          // rows in the scratch buffers (min(n_ctx, BN_MAX_BATCH))
    int n_threads;
    int n_layers;         // layers this state runs and holds caches for: [0, n_layers) (bn_state_new_front)
    bn_pool *pool;
    int kv_type;          // BN_F32 or BN_F16: element type of the KV cache
    // per layer views [n_layer] (NULL where the layer has no such state, and for il >= n_layers)
    void **k_cache;       // [n_layer] -> {n_head_kv*hd, n_ctx} of kv_type: k after q/k-norm and RoPE
    void **v_cache;       // [n_layer] -> {n_head_kv*hd, n_ctx} of kv_type
    float **conv;         // [n_layer] -> {K-1, conv_dim}: previous raw conv inputs (ops.h layout)
    float **ssm;          // [n_layer] -> {dk, dv, Hv}: S per value head (ops.h bn_gdn_step layout)
    // all conv windows and S matrices, contiguous (snapshot = one memcpy)
    float *recurrent;
    size_t n_recurrent;   // floats
    // scratch, rows = n_batch
    float *x;             // {H, B} residual stream
    float *xn;            // {H, B} normed input of a mixer / FFN / head
    float *mo;            // {H, B} mixer / FFN output
    float *qg;            // {max(q rows, conv_dim), B}: attention q(+gate) or GDN qkv mix
    float *kb, *vb;       // {n_head_kv*hd, B}
    float *z;             // {Hv*dv, B} GDN output gate
    float *att;           // {max(nh*hd, Hv*dv), B}: attention heads output / GDN gated-norm output
    float *bb, *ab;       // {Hv, B} GDN beta / alpha logits
    float *gate, *up;     // {F, B}
    float *scores;        // {n_ctx, n_head/n_head_kv, n_threads} attention scores per thread
    void *work;           // matmul scratch
    size_t work_size;
    // LoRA adapters applied unmerged (bn_state_set_lora; NULL: none)
    const bn_lora_set *lora;
    float lora_scale[BN_LORA_MAX];           // this sequence's user scale of each adapter of the set
    float *lora_u;                           // {max rank, n_batch}: the A·x intermediates (heap)
    const float *lora_cols[BN_MAX_BATCH];    // the pass's column t -> its sequence's lora_scale
};

// A snapshot: position + a copy of the recurrent region (same layout as bn_state.recurrent).
struct bn_snapshot {
    int pos;
    size_t n;     // floats
    float data[]; // [n]
};

#endif
