// cuda/cuda_bwd_ops.h — the GPU trainer's backward of the norms, elementwise ops, RoPE and the GDN causal conv
// (cuda/bwd_ops.cu), callable from C: the same math, layouts and conventions as train/backward.h (docs/model.md §8
// for the formulas). Every pointer argument of an op is device memory, fp32, row-major in ggml order ({n, rows}:
// rows of n contiguous floats). Every backward ADDS into its gradient outputs; a NULL gradient output is skipped.
// The ops enqueue on `stream` (a cudaStream_t; NULL = the default stream) and return 0, or -1 with err filled
// ("CUDA error: <what> (<call>) at file:line", or "cuda: <what>" for a bad argument); results are ready once the
// stream has run them (bn_cuda_dev_download waits for the device). Empty shapes do nothing and return 0.
#ifndef BONSAI_CUDA_BWD_OPS_H
#define BONSAI_CUDA_BWD_OPS_H
#include <stdint.h>
#include <stddef.h>
#include "cuda/cuda_dev_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- norms (one block per row; the weight gradients one thread per column) ---------------------------
// bn_cuda_rmsnorm_bwd: y = w ⊙ x·ρ, ρ = (mean x² + eps)^-½ per row of n (w NULL = ones); dx += ∂L/∂x for dy.
int bn_cuda_rmsnorm_bwd(const float *x, const float *w, int n, int rows, float eps, const float *dy, float *dx,
                        void *stream, char *err, size_t errlen);
// bn_cuda_l2norm_bwd: y = x / sqrt(Σx² + eps) per row of n; dx += (dy − y(y·dy)) / ‖·‖.
int bn_cuda_l2norm_bwd(const float *x, int n, int rows, float eps, const float *dy, float *dx, void *stream,
                       char *err, size_t errlen);
// bn_cuda_gated_rmsnorm_bwd: y = w ⊙ RMSNorm(o) ⊙ SiLU(z) per row of n (shared w {n}; NULL = ones);
// dout += RMSNorm-backward(dy ⊙ SiLU(z), w); dz += dy ⊙ w ⊙ n̂ ⊙ SiLU'(z).
int bn_cuda_gated_rmsnorm_bwd(const float *o, const float *z, const float *w, int n, int rows, float eps,
                              const float *dy, float *dout, float *dz, void *stream, char *err, size_t errlen);

// bn_cuda_rmsnorm_wgrad: y = w ⊙ x·ρ per row of n; dw {n} += Σ_rows dy ⊙ x·ρ. rho_scratch: rows floats of device
// memory (the ρ of each row).
int bn_cuda_rmsnorm_wgrad(const float *x, int n, int rows, float eps, const float *dy, float *dw, float *rho_scratch,
                          void *stream, char *err, size_t errlen);
// bn_cuda_gated_rmsnorm_wgrad: y = w ⊙ RMSNorm(o) ⊙ SiLU(z); dw {n} += Σ_rows dy ⊙ o·ρ ⊙ SiLU(z). rho_scratch: rows
// floats of device memory.
int bn_cuda_gated_rmsnorm_wgrad(const float *o, const float *z, int n, int rows, float eps, const float *dy, float *dw,
                                float *rho_scratch, void *stream, char *err, size_t errlen);

// ---- elementwise (one thread per element) ------------------------------------------------------
// bn_cuda_swiglu_bwd: f = SiLU(a) ⊙ c; da += dy⊙c⊙σ(a)(1 + a(1 − σ(a))), dc += dy⊙SiLU(a).
int bn_cuda_swiglu_bwd(const float *a, const float *c, int64_t n, const float *dy, float *da, float *dc,
                       void *stream, char *err, size_t errlen);
// bn_cuda_sigmoid_gate_bwd: o = u ⊙ σ(g); du += dy⊙σ(g), dg += dy⊙u⊙σ(g)(1 − σ(g)).
int bn_cuda_sigmoid_gate_bwd(const float *u, const float *g, int64_t n, const float *dy, float *du, float *dg,
                             void *stream, char *err, size_t errlen);
// bn_cuda_sigmoid_bwd: β = σ(b) (β given); db += dβ·β(1 − β).
int bn_cuda_sigmoid_bwd(const float *beta, int64_t n, const float *dbeta, float *db, void *stream, char *err,
                        size_t errlen);
// bn_cuda_gdn_gate_bwd: g = softplus(a + dt)·ssm_a per head (n heads per row, rows rows; dt, ssm_a {n});
// da += dg·ssm_a·σ(a + dt).
int bn_cuda_gdn_gate_bwd(const float *a, const float *dt, const float *ssm_a, int n, int rows, const float *dg,
                         float *da, void *stream, char *err, size_t errlen);
// bn_cuda_scale_bwd: y = s·x; dx += s·dy.
int bn_cuda_scale_bwd(float s, int64_t n, const float *dy, float *dx, void *stream, char *err, size_t errlen);

// ---- RoPE ---------------------------------------------------------------------------------------
// The modes, with the values of train/backward.h's enum bn_rope_mode: NEOX pairs (i, i + n_rot/2), NORM (2i, 2i+1).
#define BN_CUDA_ROPE_NEOX 0
#define BN_CUDA_ROPE_NORM 1
// bn_cuda_rope_bwd: y = R_θ x for T rows {head_dim·n_heads} at positions pos0 + t (the first n_rot <= head_dim
// dims of each head rotated, θ_i = pos·base^(−2i/n_rot)); dx += R_−θ dy. A bad n_rot or mode returns -1.
int bn_cuda_rope_bwd(const float *dy, int head_dim, int n_heads, int T, int n_rot, int pos0, float base, int mode,
                     float *dx, void *stream, char *err, size_t errlen);

// ---- causal depthwise conv + SiLU (GDN) -------------------------------------------------------------
// Layout as train/backward.h: mix {C, T}; w {K, C} (K taps per channel contiguous, tap K−1 = current token);
// state {K−1, C}: state[ch·(K−1) + i] = channel ch's input K−1−i steps before the first token (NULL = zeros).
// K <= 8 (BN_CU_MAX_CONV_K).
// bn_cuda_conv1d_silu_fwd: out {C, T} = SiLU(conv); state_out {K−1, C} (may be NULL; may alias state0).
int bn_cuda_conv1d_silu_fwd(const float *mix, const float *state0, const float *w, int C, int K, int T, float *out,
                            float *state_out, void *stream, char *err, size_t errlen);
// bn_cuda_conv1d_silu_bwd: dmix {C, T} += ∂L/∂mix, dstate0 {K−1, C} += ∂L/∂state0 for dout {C, T} (the
// pre-activations recomputed).
int bn_cuda_conv1d_silu_bwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                            const float *dout, float *dmix, float *dstate0, void *stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
