// cuda/gdn.cu — Gated DeltaNet kernels of the CUDA forward: causal conv1d + SiLU step fused with the
// q/k L2 norms, and the delta-rule recurrence (docs/model.md §4.3; same math as core/ops.c bn_conv1d_silu_step /
// bn_gdn_step). Shapes and contracts in cuda/fwd.cuh.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/mm_impl.cuh" // bn_q8_store: ssm_out's Q8 activations written by the fused output norm
#include "cuda/gdn_rows.cuh"

#define REC_WARPS 4 // value rows per block (one warp each)
#define CONV_THREADS 256
#define REC_REGS (BN_CU_MAX_HEAD_DIM / 32)

// conv_norm_kernel: block = one head's dk channels (thread i: channel head*dk + i, its window in
// registers), tokens in order; q/k heads (head < 2*Hk) are L2-normalised per token across the block.
// With cols (pos not NULL): block (head, column t) runs the columns of t's sequence in order on its window when t is
// its first column (the others' blocks return).
static __global__ void conv_norm_kernel(float *mix, float *window, const float *w, int C, int K, int nb, int Hk, int dk,
                                        float eps, float q_scale, float *const *snaps, size_t snap_off,
                                        bn_cu_cols cols) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const int head = blockIdx.x, i = threadIdx.x, km1 = K - 1;
    const int t0 = cols.pos ? blockIdx.y : 0, t1 = cols.pos ? t0 + cols.run[t0] : nb;
    if (t1 == t0) return; // not the first column of its sequence (the whole block)
    if (cols.pos) window = cols.conv[t0], snaps = cols.snaps;
    const bool active = i < dk, normed = head < 2 * Hk; // normed is uniform over the block
    const int ch = head * dk + i;
    // the window in registers: every loop over it is unrolled to BN_CU_MAX_CONV_K with k < km1 guards, so
    // its indices are constants (a run-time index would move it to local memory)
    float win[BN_CU_MAX_CONV_K] = {};
    float *wd = window + (size_t)ch * km1;
    const float *wc = w + (size_t)ch * K;
#pragma unroll
    for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
        if (active && k < km1) win[k] = wd[k];
    for (int t = t0; t < t1; t++) {
        float *xt = mix + (size_t)t * C + ch;
        float out = 0.0f;
        if (active) {
            const float x_now = *xt;
            float acc = wc[km1] * x_now;
#pragma unroll
            for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
                if (k < km1) acc += wc[k] * win[k];
#pragma unroll
            for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
                if (k < km1) win[k] = k + 1 < km1 ? win[(k + 1) % BN_CU_MAX_CONV_K] : x_now;
            out = bn_cu_silu(acc);
        }
        if (normed) {
            const float sum_sq = bn_block_sum(out * out, red);
            out = out * (1.0f / sqrtf(sum_sq + eps));
            if (head < Hk) out *= q_scale;
        }
        if (active) {
            *xt = out;
            if (snaps && snaps[t])
#pragma unroll
                for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
                    if (k < km1) snaps[t][snap_off + (size_t)ch * km1 + k] = win[k];
        }
    }
#pragma unroll
    for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
        if (active && k < km1) wd[k] = win[k];
}

// conv_tokens_kernel: the token-parallel conv + SiLU of a prefill chunk; thread (channel ch, token t) of grid
// (ceil(C / CONV_THREADS), nb). Token t's window entry k is the input at time t - (K-1) + k: a row of mix
// (not yet overwritten: the results go to out {C, nb}) or, before the chunk, window[ch][t + k]. Same
// products in the same order as conv_norm_kernel. Token nb-1 also leaves the next window in new_win {K-1, C}.
static __global__ void conv_tokens_kernel(const float *mix, const float *window, const float *w, int C, int K, int nb,
                                          float *out, float *new_win) {
    bn_cu_grid_begin();
    const int ch = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y, km1 = K - 1;
    if (ch >= C) return;
    const float *wc = w + (size_t)ch * K, *wd = window + (size_t)ch * km1;
    float acc = wc[km1] * mix[(size_t)t * C + ch];
    for (int k = 0; k < km1; k++) {
        const int src = t - km1 + k;
        acc += wc[k] * (src >= 0 ? mix[(size_t)src * C + ch] : wd[t + k]);
    }
    out[(size_t)t * C + ch] = bn_cu_silu(acc);
    if (t == nb - 1)
        for (int k = 0; k < km1; k++) {
            const int src = nb - km1 + k;
            new_win[(size_t)ch * km1 + k] = src >= 0 ? mix[(size_t)src * C + ch] : wd[nb + k];
        }
}

// norm_tokens_kernel: block (head, token): mix = conv output, q/k heads L2-normalised as in conv_norm_kernel
// (same block size, same reduction); the last token's blocks install the new window.
static __global__ void norm_tokens_kernel(float *mix, const float *out, float *window, const float *new_win, int C,
                                          int K, int nb, int Hk, int dk, float eps, float q_scale) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const int head = blockIdx.x, t = blockIdx.y, i = threadIdx.x, km1 = K - 1;
    const bool active = i < dk, normed = head < 2 * Hk; // normed is uniform over the block
    const int ch = head * dk + i;
    float v = active ? out[(size_t)t * C + ch] : 0.0f;
    if (normed) {
        const float sum_sq = bn_block_sum(v * v, red);
        v = v * (1.0f / sqrtf(sum_sq + eps));
        if (head < Hk) v *= q_scale;
    }
    if (!active) return;
    mix[(size_t)t * C + ch] = v;
    if (t == nb - 1)
        for (int k = 0; k < km1; k++) window[(size_t)ch * km1 + k] = new_win[(size_t)ch * km1 + k];
}

size_t bn_cu_gdn_conv_scratch_floats(int conv_dim, int K, int n_batch) {
    return (size_t)conv_dim * n_batch + (size_t)conv_dim * (K > 1 ? K - 1 : 0);
}

cudaError_t bn_cu_gdn_conv_norm(float *mix, float *window, const float *w, int Hk, int Hv, int dk, int K, int nb,
                                float eps, float q_scale, float *const *snaps, size_t snap_off, float *scratch,
                                cudaStream_t s, const bn_cu_cols *cols) {
    const int C = (2 * Hk + Hv) * dk, threads = (dk + 31) / 32 * 32;
    const bn_cu_cols cl = cols ? *cols : bn_cu_cols{};
    if (cl.pos) { // a batched pass: each sequence's columns in order on its own window
        BN_LAUNCH(conv_norm_kernel, dim3(2 * Hk + Hv, nb), threads, 0, s, mix, window, w, C, K, nb, Hk, dk, eps,
                  q_scale, (float *const *)nullptr, snap_off, cl);
        return cudaGetLastError();
    }
    if (nb >= BN_CU_CONV_PARALLEL_NB && !snaps && scratch) { // prefill: every token at once, two launches
        float *out = scratch, *new_win = scratch + (size_t)C * nb;
        BN_LAUNCH(conv_tokens_kernel, dim3((C + CONV_THREADS - 1) / CONV_THREADS, nb), CONV_THREADS, 0, s, mix, window,
                  w, C, K, nb, out, new_win);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        BN_LAUNCH(norm_tokens_kernel, dim3(2 * Hk + Hv, nb), threads, 0, s, mix, out, window, new_win, C, K, nb, Hk, dk,
                  eps, q_scale);
        return cudaGetLastError();
    }
    BN_LAUNCH(conv_norm_kernel, 2 * Hk + Hv, threads, 0, s, mix, window, w, C, K, nb, Hk, dk, eps, q_scale, snaps,
              snap_off, cl);
    return cudaGetLastError();
}

// rec_gates: token t's gates of value head h: *beta = σ(beta_logit), *alpha = exp(softplus(alpha_logit + dt_bias)·a).
static __device__ __forceinline__ void rec_gates(const float *beta_logit, const float *alpha_logit, const float *dt_bias,
                                                 const float *ssm_a, int t, int h, int Hv, float *alpha, float *beta) {
    *beta = bn_cu_sigmoid(beta_logit[(size_t)t * Hv + h]);
    *alpha = expf(bn_cu_softplus(alpha_logit[(size_t)t * Hv + h] + dt_bias[h]) * ssm_a[h]);
}

// recurrence_kernel: block (value head h, group of REC_WARPS value rows); warp w owns row
// j = blockIdx.y*REC_WARPS + w of S_h (dk floats, lane l holding elements l, l+32, ...) in registers
// for all nb tokens. Rows are independent given q, k, v, α, β: decay, u_j = row·k, δ_j = β(v_j − u_j),
// row += δ_j k, o_j = row·q. With cols (pos not NULL): blockIdx.z = column t, the columns of t's sequence in order on
// its S when t is its first column (the others' blocks return).
static __global__ void recurrence_kernel(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                  const float *dt_bias, const float *ssm_a, float *y, int dk, int dv, int Hk, int Hv,
                                  int conv_dim, int nb, float *const *snaps, size_t snap_off, bn_cu_cols cols) {
    bn_cu_grid_begin();
    const int h = blockIdx.x, lane = threadIdx.x % 32;
    const int t0 = cols.pos ? blockIdx.z : 0, t1 = cols.pos ? t0 + cols.run[t0] : nb;
    if (t1 == t0) return; // not the first column of its sequence (the whole block)
    if (cols.pos) S = cols.ssm[t0], snaps = cols.snaps;
    const int j = blockIdx.y * REC_WARPS + threadIdx.x / 32;
    if (j >= dv) return; // whole warp leaves together
    const int kh = h % Hk; // GGUF tiled layout: value head h pairs with key head h mod Hk
    float *row = S + ((size_t)h * dv + j) * dk;
    float r[REC_REGS];
    rec_row_load(r, row, lane, dk);
    for (int t = t0; t < t1; t++) {
        const float *c = mix + (size_t)t * conv_dim;
        const float *q = c + (size_t)kh * dk, *k = c + (size_t)(Hk + kh) * dk;
        const float v_j = c[(size_t)2 * Hk * dk + (size_t)h * dv + j];
        float alpha, beta;
        rec_gates(beta_logit, alpha_logit, dt_bias, ssm_a, t, h, Hv, &alpha, &beta);
        const float o = rec_row_step(r, k, q, alpha, beta, v_j, lane, dk);
        if (lane == 0) y[(size_t)t * Hv * dv + (size_t)h * dv + j] = o;
        if (snaps && snaps[t]) rec_row_store(snaps[t] + snap_off + ((size_t)h * dv + j) * dk, r, lane, dk); // after t
    }
    rec_row_store(row, r, lane, dk);
}

cudaError_t bn_cu_gdn_recurrence(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                 const float *dt_bias, const float *ssm_a, float *y, int dk, int dv, int Hk,
                                 int Hv, int conv_dim, int nb, float *const *snaps, size_t snap_off, cudaStream_t s,
                                 const bn_cu_cols *cols) {
    const bn_cu_cols cl = cols ? *cols : bn_cu_cols{};
    dim3 grid(Hv, (dv + REC_WARPS - 1) / REC_WARPS, cl.pos ? nb : 1);
    BN_LAUNCH(recurrence_kernel, grid, REC_WARPS * 32, 0, s, S, mix, beta_logit, alpha_logit, dt_bias, ssm_a, y, dk,
              dv, Hk, Hv, conv_dim, nb, snaps, snap_off, cl);
    return cudaGetLastError();
}

// ---- the recurrence with the output norm (opt-in: BONSAI_CUDA_GDN_NORM=1) -----------------------------------
// recurrence_norm_kernel: block = value head h (with cols: blockIdx.z = column t, run as in recurrence_kernel),
// REC_NORM_WARPS warps, warp w owning rows w, w + REC_NORM_WARPS, ... of S_h (dv / REC_NORM_WARPS each) in registers;
// per token the rows' outputs go to shared memory and the block applies the gated RMSNorm of the head
// (gated_rmsnorm_kernel's math: y = w ⊙ o / rms(o) ⊙ SiLU(z), and with Q8 its Q8 activations for ssm_out), so the
// norm needs no launch of its own. The rows compute
// exactly as in recurrence_kernel (rec_row_step); the norm's sum runs in another order (last bits).
#define REC_NORM_WARPS 32
#define REC_NORM_ROWS 4 // rows per warp: dv <= 128
#define REC_NORM_REGS 4 // row elements per lane: dk <= 128 (16 state floats per thread: no spills at 1024 threads)
template <bool Q8>
static __global__ void __launch_bounds__(REC_NORM_WARPS * 32)
    recurrence_norm_kernel(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                           const float *dt_bias, const float *ssm_a, const float *z, const float *norm_w, float eps,
                           float *y, int dk, int dv, int Hk, int Hv, int conv_dim, int nb, float *const *snaps,
                           size_t snap_off, bn_cu_cols cols, bn_q8_out q8) {
    bn_cu_grid_begin();
    BN_SHARED(float, o_head, REC_NORM_WARPS * REC_NORM_ROWS); // the head's outputs of the current token
    BN_SHARED(float, red, 32);
    const int h = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int t0 = cols.pos ? blockIdx.z : 0, t1 = cols.pos ? t0 + cols.run[t0] : nb;
    if (t1 == t0) return; // not the first column of its sequence (the whole block)
    if (cols.pos) S = cols.ssm[t0], snaps = cols.snaps;
    const int kh = h % Hk; // GGUF tiled layout: value head h pairs with key head h mod Hk
    float r[REC_NORM_ROWS][REC_NORM_REGS];
#pragma unroll
    for (int a = 0; a < REC_NORM_ROWS; a++) {
        const int j = warp + a * REC_NORM_WARPS;
        rec_row_load(r[a], j < dv ? S + ((size_t)h * dv + j) * dk : nullptr, lane, dk);
    }
    for (int t = t0; t < t1; t++) {
        const float *c = mix + (size_t)t * conv_dim;
        const float *q = c + (size_t)kh * dk, *k = c + (size_t)(Hk + kh) * dk;
        float alpha, beta;
        rec_gates(beta_logit, alpha_logit, dt_bias, ssm_a, t, h, Hv, &alpha, &beta);
#pragma unroll
        for (int a = 0; a < REC_NORM_ROWS; a++) {
            const int j = warp + a * REC_NORM_WARPS;
            if (j >= dv) break; // the same for the whole warp
            const float v_j = c[(size_t)2 * Hk * dk + (size_t)h * dv + j];
            const float o = rec_row_step(r[a], k, q, alpha, beta, v_j, lane, dk);
            if (lane == 0) o_head[j] = o;
            if (snaps && snaps[t]) rec_row_store(snaps[t] + snap_off + ((size_t)h * dv + j) * dk, r[a], lane, dk);
        }
        __syncthreads(); // the head's outputs of token t are in o_head
        float sum_sq = 0.0f;
        for (int i = threadIdx.x; i < dv; i += blockDim.x) sum_sq += o_head[i] * o_head[i];
        sum_sq = bn_block_sum(sum_sq, red);
        const float scale = 1.0f / sqrtf(sum_sq / (float)dv + eps);
        const size_t off = ((size_t)t * Hv + h) * dv;
        for (int i = threadIdx.x; i < dv; i += blockDim.x) { // whole warps (dv % 32 == 0): bn_q8_store's units
            const float v = bn_cu_gated_norm_elem(o_head[i], scale, norm_w, i, z[off + i]);
            y[off + i] = v;
            if (Q8) bn_q8_store(v, (int64_t)(off + i), q8);
        }
        __syncthreads(); // o_head is rewritten by the next token
    }
#pragma unroll
    for (int a = 0; a < REC_NORM_ROWS; a++) {
        const int j = warp + a * REC_NORM_WARPS;
        if (j >= dv) break;
        rec_row_store(S + ((size_t)h * dv + j) * dk, r[a], lane, dk);
    }
}

bool bn_cu_gdn_recurrence_norm_takes(int dk, int dv) {
    return dv % 32 == 0 && dv <= REC_NORM_WARPS * REC_NORM_ROWS && dk <= 32 * REC_NORM_REGS;
}

cudaError_t bn_cu_gdn_recurrence_norm(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                      const float *dt_bias, const float *ssm_a, const float *z, const float *norm_w,
                                      float eps, float *y, int dk, int dv, int Hk, int Hv, int conv_dim, int nb,
                                      float *const *snaps, size_t snap_off, cudaStream_t s, const bn_q8_out *q8,
                                      const bn_cu_cols *cols) {
    if (!bn_cu_gdn_recurrence_norm_takes(dk, dv)) return cudaErrorInvalidValue;
    const bn_cu_cols cl = cols ? *cols : bn_cu_cols{};
    dim3 grid(Hv, 1, cl.pos ? nb : 1);
    if (q8)
        BN_LAUNCH(recurrence_norm_kernel<true>, grid, REC_NORM_WARPS * 32, 0, s, S, mix, beta_logit, alpha_logit, dt_bias,
                  ssm_a, z, norm_w, eps, y, dk, dv, Hk, Hv, conv_dim, nb, snaps, snap_off, cl, *q8);
    else
        BN_LAUNCH(recurrence_norm_kernel<false>, grid, REC_NORM_WARPS * 32, 0, s, S, mix, beta_logit, alpha_logit,
                  dt_bias, ssm_a, z, norm_w, eps, y, dk, dv, Hk, Hv, conv_dim, nb, snaps, snap_off, cl, bn_q8_out{});
    return cudaGetLastError();
}

