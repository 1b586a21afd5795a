// cuda/gdn.cu — Gated DeltaNet kernels of the CUDA forward: causal conv1d + SiLU step fused with the
// q/k L2 norms, and the delta-rule recurrence (MODEL.md §4.3; same math as core/ops.c bn_conv1d_silu_step /
// bn_gdn_step). Shapes and contracts in cuda/fwd.cuh.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"

#define REC_WARPS 4 // value rows per block (one warp each)
#define REC_REGS (BN_CU_MAX_HEAD_DIM / 32)

// conv_norm_kernel: block = one head's dk channels (thread i: channel head*dk + i, its window in
// registers), tokens in order; q/k heads (head < 2*Hk) are L2-normalised per token across the block.
static __global__ void conv_norm_kernel(float *mix, float *window, const float *w, int C, int K, int nb, int Hk, int dk,
                                        float eps, float q_scale, float *const *snaps, size_t snap_off) {
    BN_SHARED(float, red, 32);
    const int head = blockIdx.x, i = threadIdx.x, km1 = K - 1;
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
    for (int t = 0; t < nb; t++) {
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
            if (snaps)
#pragma unroll
                for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
                    if (k < km1) snaps[t][snap_off + (size_t)ch * km1 + k] = win[k];
        }
    }
#pragma unroll
    for (int k = 0; k < BN_CU_MAX_CONV_K; k++)
        if (active && k < km1) wd[k] = win[k];
}

cudaError_t bn_cu_gdn_conv_norm(float *mix, float *window, const float *w, int Hk, int Hv, int dk, int K, int nb,
                                float eps, float q_scale, float *const *snaps, size_t snap_off, cudaStream_t s) {
    const int C = (2 * Hk + Hv) * dk, threads = (dk + 31) / 32 * 32;
    BN_LAUNCH(conv_norm_kernel, 2 * Hk + Hv, threads, 0, s, mix, window, w, C, K, nb, Hk, dk, eps, q_scale, snaps,
              snap_off);
    return cudaGetLastError();
}

// recurrence_kernel: block (value head h, group of REC_WARPS value rows); warp w owns row
// j = blockIdx.y*REC_WARPS + w of S_h (dk floats, lane l holding elements l, l+32, ...) in registers
// for all nb tokens. Rows are independent given q, k, v, α, β: decay, u_j = row·k, δ_j = β(v_j − u_j),
// row += δ_j k, o_j = row·q.
static __global__ void recurrence_kernel(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                  const float *dt_bias, const float *ssm_a, float *y, int dk, int dv, int Hk, int Hv,
                                  int conv_dim, int nb, float *const *snaps, size_t snap_off) {
    const int h = blockIdx.x, lane = threadIdx.x % 32;
    const int j = blockIdx.y * REC_WARPS + threadIdx.x / 32;
    if (j >= dv) return; // whole warp leaves together
    const int kh = h % Hk; // GGUF tiled layout: value head h pairs with key head h mod Hk
    float *row = S + ((size_t)h * dv + j) * dk;
    float r[REC_REGS];
#pragma unroll
    for (int m = 0; m < REC_REGS; m++) {
        const int i = lane + 32 * m;
        r[m] = i < dk ? row[i] : 0.0f;
    }
    for (int t = 0; t < nb; t++) {
        const float *c = mix + (size_t)t * conv_dim;
        const float *q = c + (size_t)kh * dk, *k = c + (size_t)(Hk + kh) * dk;
        const float v_j = c[(size_t)2 * Hk * dk + (size_t)h * dv + j];
        const float beta = bn_cu_sigmoid(beta_logit[(size_t)t * Hv + h]);
        const float alpha = expf(bn_cu_softplus(alpha_logit[(size_t)t * Hv + h] + dt_bias[h]) * ssm_a[h]);
        float u = 0.0f;
#pragma unroll
        for (int m = 0; m < REC_REGS; m++) {
            const int i = lane + 32 * m;
            r[m] *= alpha;
            if (i < dk) u += r[m] * k[i];
        }
        u = bn_warp_reduce_sum(u);
        const float delta = beta * (v_j - u);
        float o = 0.0f;
#pragma unroll
        for (int m = 0; m < REC_REGS; m++) {
            const int i = lane + 32 * m;
            if (i < dk) {
                r[m] += delta * k[i];
                o += r[m] * q[i];
            }
        }
        o = bn_warp_reduce_sum(o);
        if (lane == 0) y[(size_t)t * Hv * dv + (size_t)h * dv + j] = o;
        if (snaps) { // S row j of head h after token t
            float *dst = snaps[t] + snap_off + ((size_t)h * dv + j) * dk;
#pragma unroll
            for (int m = 0; m < REC_REGS; m++) {
                const int i = lane + 32 * m;
                if (i < dk) dst[i] = r[m];
            }
        }
    }
#pragma unroll
    for (int m = 0; m < REC_REGS; m++) {
        const int i = lane + 32 * m;
        if (i < dk) row[i] = r[m];
    }
}

cudaError_t bn_cu_gdn_recurrence(float *S, const float *mix, const float *beta_logit, const float *alpha_logit,
                                 const float *dt_bias, const float *ssm_a, float *y, int dk, int dv, int Hk,
                                 int Hv, int conv_dim, int nb, float *const *snaps, size_t snap_off, cudaStream_t s) {
    dim3 grid(Hv, (dv + REC_WARPS - 1) / REC_WARPS);
    BN_LAUNCH(recurrence_kernel, grid, REC_WARPS * 32, 0, s, S, mix, beta_logit, alpha_logit, dt_bias, ssm_a, y, dk,
              dv, Hk, Hv, conv_dim, nb, snaps, snap_off);
    return cudaGetLastError();
}
