// cuda/fwd.cuh — internal to the CUDA forward (C++/CUDA only; include after "cuda/common.cuh"): the
// launchers of the non-matmul kernels (ops.cu: norms, elementwise; gdn.cu: conv + recurrence;
// attention.cu: q/k norm + RoPE + KV append, flash attention) and the device helpers they share. Every
// launcher enqueues on stream s and returns cudaSuccess or the launch error. Activations are fp32,
// token-major: row t of an {n, nb} buffer is buf + t*n. Positions are read from device memory
// (d_pos = position of the chunk's first token) so a captured graph can be replayed unchanged.
#ifndef BONSAI_CUDA_FWD_CUH
#define BONSAI_CUDA_FWD_CUH
#include <stddef.h>
#include <stdint.h>

// Largest head sizes the kernels handle (attention hd, GDN dk; checked at upload).
#define BN_CU_MAX_HEAD_DIM 256
#define BN_CU_MAX_CONV_K 8

// ---- reductions (blockDim.x a multiple of 32; every thread of the block must call; warp sums are
// common.cuh's bn_warp_reduce_sum) ---------------------------------------------------------------
// bn_block_sum: sum of v over the block (every thread gets it); red: 32 shared floats.
__device__ __forceinline__ float bn_block_sum(float v, float *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = bn_warp_reduce_sum(v);
    __syncthreads(); // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float total = lane < n_warps ? red[lane] : 0.0f;
    return bn_warp_reduce_sum(total);
}
// ggml's scalar activations (same formulas as core/ops.c)
__device__ __forceinline__ float bn_cu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float bn_cu_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float bn_cu_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
// bn_cu_gated_norm_elem: element i of the GDN output gate y = RMSNorm(o; w) ⊙ SiLU(z) for o_i, scale = 1/rms(o),
// w_i (w NULL: 1) and z_i.
__device__ __forceinline__ float bn_cu_gated_norm_elem(float o_i, float scale, const float *w, int i, float z_i) {
    const float normed = w ? w[i] * (o_i * scale) : o_i * scale;
    return normed * bn_cu_silu(z_i);
}

// bn_head_norm_rope: v (hd floats in shared memory, loaded and synced by the caller) ← RoPE at pos of
// RMSNorm(v; w) (w NULL: no norm) over the first n_rot dims (neox: rotate-half pairs, else adjacent
// pairs); theta_i = pos·theta_scale^i by repeated multiplication, as core/ops.c. Every thread of the
// block must call; v is complete when it returns. red: 32 shared floats.
__device__ __forceinline__ void bn_head_norm_rope(float *v, const float *w, float eps, int hd, int n_rot,
                                                  float theta_scale, bool neox, int pos, float *red) {
    if (w) {
        float sum_sq = 0.0f;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) sum_sq += v[i] * v[i];
        sum_sq = bn_block_sum(sum_sq, red);
        const float scale = 1.0f / sqrtf(sum_sq / (float)hd + eps);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) v[i] = w[i] * (v[i] * scale);
        __syncthreads();
    }
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float theta = (float)pos;
        for (int k = 0; k < i; k++) theta *= theta_scale;
        const float c = cosf(theta), sn = sinf(theta);
        const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        const float a = v[ia], b = v[ib];
        v[ia] = a * c - b * sn;
        v[ib] = b * c + a * sn;
    }
    __syncthreads();
}

// bn_cu_count_host_tap_bytes: adds bytes of DSpark taps copied between host and device (forward.cu's
// counter behind bn_cuda_host_tap_bytes; the target's tap copies down and the drafter's uploads count).
void bn_cu_count_host_tap_bytes(size_t bytes);

// ---- ops.cu ------------------------------------------------------------------------------------
// The producers of matmul inputs (the norms and SwiGLU) also write the Q8 activations of their output for the
// mmvq path when q8 is not NULL (from bn_cu_q8_fusable, cuda/mm.cuh; q8->ne0 must divide into their rows:
// n % 32 == 0 and, for the gated norm, q8->ne0 % n == 0), with the bytes quantize_act would make from y: the
// matmul group then runs through bn_cu_matmul_multi_q8 without its quantize launch.
struct bn_q8_out;
// y[t] = RMSNorm(x[t]; w) for nb rows of n (w NULL = ones); y may alias x.
cudaError_t bn_cu_rmsnorm(float *y, const float *x, const float *w, int n, int nb, float eps, cudaStream_t s,
                          const bn_q8_out *q8 = nullptr);
// x[t] += r[t], then y[t] = RMSNorm(x[t]; w) for nb rows of n (residual add fused with the next norm).
cudaError_t bn_cu_add_rmsnorm(float *x, const float *r, float *y, const float *w, int n, int nb, float eps,
                              cudaStream_t s, const bn_q8_out *q8 = nullptr);
// y[i] += x[i] for i < count.
cudaError_t bn_cu_add(float *y, const float *x, int64_t count, cudaStream_t s);
// y[t] += b for nb rows of n.
cudaError_t bn_cu_add_bias(float *y, const float *b, int n, int nb, cudaStream_t s);
// y = SiLU(gate) ⊙ up over count (y may alias gate).
// With q8: count % 32 == 0.
cudaError_t bn_cu_swiglu(float *y, const float *gate, const float *up, int64_t count, cudaStream_t s,
                         const bn_q8_out *q8 = nullptr);
// y[r] = RMSNorm(o[r]; w) ⊙ SiLU(z[r]) for n_rows rows of n (GDN output gate); y may alias o.
cudaError_t bn_cu_gated_rmsnorm(float *y, const float *o, const float *z, const float *w, int n, int n_rows,
                                float eps, cudaStream_t s, const bn_q8_out *q8 = nullptr);
// *d_pos += n (after a chunk; inside the decode graph).
cudaError_t bn_cu_advance_pos(int *d_pos, int n, cudaStream_t s);

// ---- gdn.cu ------------------------------------------------------------------------------------
// Causal depthwise conv + SiLU over the C = (2*Hk + Hv)*dk channels for nb tokens in order, in place on
// mix {C, nb}, window {K-1, C} (ops.h layout) advanced, w {K, C}; then the Hk q heads and Hk k heads
// (the first 2*Hk*dk channels) L2-normalised per token, q heads times q_scale. Per-token snapshots:
// snaps (device array of nb device pointers, or NULL) receive the window after token t at
// snaps[t] + snap_off (the layer's offset in the recurrent region); the same for S below.
// From BN_CU_CONV_PARALLEL_NB tokens without snaps, with scratch (bn_cu_gdn_conv_scratch_floats floats),
// the tokens run in parallel (two launches; same results); else one block per head walks the tokens.
#define BN_CU_CONV_PARALLEL_NB 16
// Floats of scratch the token-parallel conv needs: conv outputs {conv_dim, n_batch} + the next window.
size_t bn_cu_gdn_conv_scratch_floats(int conv_dim, int K, int n_batch);
struct bn_cu_cols;
cudaError_t bn_cu_gdn_conv_norm(float *mix, float *window, const float *w, int Hk, int Hv, int dk, int K, int nb,
                                float eps, float q_scale, float *const *snaps, size_t snap_off, float *scratch,
                                cudaStream_t s, const bn_cu_cols *cols = nullptr);
// The gated delta rule over nb tokens for all Hv value heads: S {dk, dv, Hv} (ops.h bn_gdn_step
// layout) updated in place; y {Hv*dv, nb} = Sᵀq per token. beta_logit/alpha_logit {Hv, nb}.
cudaError_t bn_cu_gdn_recurrence(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                 const float *dt_bias, const float *ssm_a, float *y, int dk, int dv, int Hk,
                                 int Hv, int conv_dim, int nb, float *const *snaps, size_t snap_off, cudaStream_t s,
                                 const bn_cu_cols *cols = nullptr);
// bn_cu_gdn_recurrence followed by bn_cu_gated_rmsnorm(y, y, z, norm_w, dv, Hv * nb, eps, q8) in one launch: a block
// per value head, the norm applied to the head's outputs of each token in shared memory (opt-in,
// BONSAI_CUDA_GDN_NORM=1: one launch fewer per GDN layer; for decode-sized nb: the tokens run in order in Hv blocks).
// Needs bn_cu_gdn_recurrence_norm_takes(dk, dv) (dv % 32 == 0, dv <= 128, dk <= 128), else cudaErrorInvalidValue.
bool bn_cu_gdn_recurrence_norm_takes(int dk, int dv);
cudaError_t bn_cu_gdn_recurrence_norm(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                      const float *dt_bias, const float *ssm_a, const float *z, const float *norm_w,
                                      float eps, float *y, int dk, int dv, int Hk, int Hv, int conv_dim, int nb,
                                      float *const *snaps, size_t snap_off, cudaStream_t s, const bn_q8_out *q8,
                                      const bn_cu_cols *cols = nullptr);

// The columns of a batched pass (bn_cuda_forward_batch: one token of each sequence; bn_cuda_forward_multi: several
// tokens of each, a sequence's columns consecutive and in token order): column t is a token at position pos[t], with
// its sequence's state for the current layer (device arrays of nb pointers). The kernels below take it as their
// last argument: NULL (or pos NULL) runs nb tokens of one sequence at d_pos[0] + t on the state passed as before;
// with it each column reads and writes its own sequence's KV cache / conv window / S, the conv and the recurrence
// running each sequence's columns in order (run), and the recurrent state after column t goes to snaps[t] (+ the
// layer's snap_off) where that is not NULL (the kernels' own snaps argument is ignored).
struct bn_cu_cols {
    const int *pos;   // {nb} positions
    void *const *k;   // {nb} KV caches of the layer (fp32 or fp16, as kv_f16)
    void *const *v;
    float *const *conv; // {nb} conv windows {K-1, conv_dim} of the layer
    float *const *ssm;  // {nb} S {dk, dv, Hv} of the layer
    const int *run;     // {nb} the sequence's column count at its first column, 0 at the others
    float *const *snaps; // {nb} snapshot data (device) after each column, NULL entries: none
};

// ---- attention.cu ------------------------------------------------------------------------------
// Per token t at position d_pos[0] + t: the nh query heads (qg + t*q_stride + h*head_stride, in place)
// and the nkv key heads (kb {nkv*hd, nb}) get RMSNorm (q_norm / k_norm {hd}; NULL = none) then RoPE
// (theta_scale = base^(-2/n_rot)); the keys and v (vb {nkv*hd, nb}) are written into the caches
// {nkv*hd, n_ctx} (fp32, or fp16 when kv_f16).
cudaError_t bn_cu_attn_prep(float *qg, int q_stride, int head_stride, const float *kb, const float *vb, void *k_cache,
                            void *v_cache, bool kv_f16, int nh, int nkv, int hd, const float *q_norm,
                            const float *k_norm, float eps, int n_rot, float theta_scale, bool neox, int nb,
                            const int *d_pos, cudaStream_t s, const bn_cu_cols *cols = nullptr);
// Scratch floats bn_cu_attention needs for nh heads of hd, nb tokens, n_splits key splits.
size_t bn_cu_attention_scratch_floats(int nh, int hd, int nb, int n_splits);
// prefill attention kernels (env BONSAI_CUDA_ATTN_TILED at state creation: unset, 1, mma)
enum { BN_CU_ATTN_PER_TOKEN = 0, BN_CU_ATTN_TILED = 1, BN_CU_ATTN_MMA = 2 };
// Causal attention of nb query tokens at positions d_pos[0] + t over cache rows [0, pos + 1):
// out {nh*hd, nb}; query head h of token t at qg + t*q_stride + h*head_stride, its gate (gated) at
// + hd: out = softmax(scale q·K) V (⊙ σ(gate)). GQA: head h reads KV head h / (nh / nkv). The keys
// are split into n_splits ranges (flash-decoding) merged by a second kernel; scratch from
// bn_cu_attention_scratch_floats. q8 (NULL: none; hd % 32 == 0, else cudaErrorInvalidValue): the merge also
// writes out's Q8 activations there (attn_output's input, bn_cu_q8_fusable). tiled (prefill: one split, nb > 1, no
// cols; head sizes dividing 256, GQA groups up to 32), one of the BN_CU_ATTN_* modes: query tiles share each K/V tile
// (attn_tiled_kernel; BN_CU_ATTN_MMA: attn_mma_kernel, both products on fp16 tensor cores, for head sizes 32, 64,
// 128 and 256, others tiled) instead of one block per token; same math, another summation order (MMA: fp16 Q and P).
cudaError_t bn_cu_attention(float *out, const float *qg, int q_stride, int head_stride, bool gated, const void *K,
                            const void *V, bool kv_f16, int nh, int nkv, int hd, float scale, int nb,
                            const int *d_pos, int n_splits, float *scratch, cudaStream_t s, const bn_q8_out *q8,
                            const bn_cu_cols *cols = nullptr, int tiled = BN_CU_ATTN_PER_TOKEN);

#endif
