// train/backward.h — backward of every op in the qwen35 / dense forward (docs/model.md §8), fp32.
// Conventions:
//  - Tensors are row-major in ggml order: a {n, T} tensor is T rows of n contiguous floats.
//  - Every backward ADDS into its gradient outputs (dx += ...): zero them first; residual branches
//    then accumulate naturally. A NULL gradient output is skipped.
//  - Forward inputs are passed again (no hidden saved state); ops that need an intermediate
//    recompute it (softmax probabilities, conv pre-activations, recurrent states).
//  - The embedding lookup is frozen and needs no backward; the LM head is a linear (+LoRA) on the
//    last position only (bn_linear_lora_bwd with T = 1).
#ifndef BONSAI_TRAIN_BACKWARD_H
#define BONSAI_TRAIN_BACKWARD_H
#include <stddef.h>
#include <stdint.h>
#include "core/model.h"

// bn_train_set_threads: threads for the attention and GDN forward/backward of this module
// (<= 1: single-threaded, the default). Matmuls use OpenBLAS's own threads.
void bn_train_set_threads(int n_threads);

// A LoRA pair attached to one linear: y = W x + scale·B(A x). Gradients dA/dB may be NULL.
typedef struct {
    int r;
    float scale;     // alpha / r
    const float *A;  // {n_in, r}   (torch lora_A.weight (r, n_in))
    const float *B;  // {r, n_out}  (torch lora_B.weight (n_out, r))
    float *dA;       // {n_in, r}
    float *dB;       // {r, n_out}
} bn_lora_view;

// ---- linear + LoRA --------------------------------------------------------------------------
// bn_linear_lora_fwd: y {n_out, T} = W x + scale·B(A·(x⊙drop)); W {n_in, n_out} of any type is
// dequantized in row chunks. lora may be NULL; drop {n_in, T} (dropout multipliers 0 or 1/(1-p))
// may be NULL; ax {r, T} (optional) receives A·(x⊙drop) for the backward. Returns 0 or -1 (err).
int bn_linear_lora_fwd(const bn_weight *W, const bn_lora_view *lora, const float *x, int T,
                       const float *drop, float *y, float *ax, char *err, size_t errlen);
// bn_linear_lora_bwd: given dy {n_out, T}: dx += Wᵀdy + scale·(Aᵀ(Bᵀdy))⊙drop;
// dA += scale·(Bᵀdy)(x⊙drop)ᵀ; dB += scale·dy(A x)ᵀ. ax {r, T} from the forward or NULL
// (recomputed). dx may be NULL. Returns 0 or -1 (err).
int bn_linear_lora_bwd(const bn_weight *W, const bn_lora_view *lora, const float *x, int T,
                       const float *drop, const float *ax, const float *dy, float *dx,
                       char *err, size_t errlen);

// ---- norms ----------------------------------------------------------------------------------
// bn_rmsnorm_bwd: y = w ⊙ x·ρ, ρ = (mean x² + eps)^-½ per row of n (w NULL = ones); dx += ...
void bn_rmsnorm_bwd(const float *x, const float *w, int n, int rows, float eps, const float *dy, float *dx);
// bn_l2norm_bwd: y = x / sqrt(Σx² + eps) per row of n; dx += (dy − y(y·dy)) / ‖·‖.
void bn_l2norm_bwd(const float *x, int n, int rows, float eps, const float *dy, float *dx);
// bn_gated_rmsnorm_bwd: y = w ⊙ RMSNorm(o) ⊙ SiLU(z) per row of n (shared w {n});
// dout += RMSNorm-backward(dy ⊙ SiLU(z), w); dz += dy ⊙ w ⊙ n̂ ⊙ SiLU'(z).
void bn_gated_rmsnorm_bwd(const float *o, const float *z, const float *w, int n, int rows, float eps,
                          const float *dy, float *dout, float *dz);

// ---- elementwise ----------------------------------------------------------------------------
// bn_swiglu_bwd: f = SiLU(a) ⊙ c; da += dy⊙c⊙σ(a)(1 + a(1 − σ(a))), dc += dy⊙SiLU(a).
void bn_swiglu_bwd(const float *a, const float *c, int64_t n, const float *dy, float *da, float *dc);
// bn_sigmoid_gate_bwd: o = u ⊙ σ(g); du += dy⊙σ(g), dg += dy⊙u⊙σ(g)(1 − σ(g)).
void bn_sigmoid_gate_bwd(const float *u, const float *g, int64_t n, const float *dy, float *du, float *dg);
// bn_sigmoid_bwd: β = σ(b) (β given); db += dβ·β(1 − β).
void bn_sigmoid_bwd(const float *beta, int64_t n, const float *dbeta, float *db);
// bn_gdn_gate_bwd: g = softplus(a + dt)·ssm_a per head (n heads per row, rows rows);
// da += dg·ssm_a·σ(a + dt).
void bn_gdn_gate_bwd(const float *a, const float *dt, const float *ssm_a, int n, int rows,
                     const float *dg, float *da);
// bn_scale_bwd: y = s·x; dx += s·dy (the GDN q scale 1/√dk, attention scale).
void bn_scale_bwd(float s, int64_t n, const float *dy, float *dx);

// ---- RoPE -----------------------------------------------------------------------------------
enum bn_rope_mode { BN_ROPE_NEOX = 0, BN_ROPE_NORM = 1 };
// bn_rope_inplace: rotates the first n_rot dims of each of n_heads heads (head_dim apart) at
// position pos by +θ (sign = +1) or −θ (sign = −1); θ_i = pos·base^(−2i/n_rot). NEOX pairs
// (i, i + n_rot/2), NORM pairs (2i, 2i+1).
void bn_rope_inplace(float *x, int head_dim, int n_heads, int n_rot, int pos, float base, int mode, int sign);
// bn_rope_bwd: y = R_θ x for T positions (position of row t = pos0 + t), rows {head_dim·n_heads, T};
// dx += R_−θ dy.
void bn_rope_bwd(const float *dy, int head_dim, int n_heads, int T, int n_rot, int pos0, float base,
                 int mode, float *dx);

// ---- attention ------------------------------------------------------------------------------
// bn_attn_fwd: causal softmax attention with GQA (q head h uses kv head h / (nh/nkv)), scale c.
// q {hd, nh, T}, k/v {hd, nkv, T} → out {hd, nh, T}.
void bn_attn_fwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                 float scale, float *out);
// bn_attn_bwd: dq, dk, dv += gradients for dout {hd, nh, T} (P recomputed per query row;
// dK, dV summed over the q heads sharing a kv head).
void bn_attn_bwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                 float scale, const float *dout, float *dq, float *dk, float *dv);

// ---- causal depthwise conv + SiLU (GDN) ------------------------------------------------------
// Layout: mix {C, T}; conv weight w {K, C} (K taps per channel contiguous, tap K−1 = current
// token); state {K−1, C} as core/ops.h's conv window: state[ch·(K−1) + i] = channel ch's raw input
// K−1−i steps before the first token (oldest first; zeros at sequence start).
// bn_conv1d_silu_fwd: out {C, T} = SiLU(conv); state_out {K−1, C} (may be NULL; may alias state0).
void bn_conv1d_silu_fwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                        float *out, float *state_out);
// bn_conv1d_silu_bwd: dmix {C, T} += ..., dstate0 {K−1, C} += ... (NULL = skip) for dout {C, T}.
void bn_conv1d_silu_bwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                        const float *dout, float *dmix, float *dstate0);

// ---- gated delta-rule recurrence -------------------------------------------------------------
// Layout: q, k {dk, Hk, T} (already L2-normed; q already scaled), v {dv, Hv, T}, g, beta {Hv, T}
// (α = exp(g)), state S {dk, dv, Hv} as core/ops.h: S[h·dk·dv + j·dk + i] = S_ij (i = key dim,
// j = value dim; ggml's "stored transposed" layout).
// Value head h reads key head h mod Hk. Per step: S ← αS; u = Sᵀk; δ = β(v − u); S ← S + kδᵀ; o = Sᵀq.
// bn_gdn_fwd: out {dv, Hv, T}; S0 NULL = zeros; S_out (may be NULL, may alias S0) = final state.
void bn_gdn_fwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *S0, float *out, float *S_out);
// bn_gdn_bwd: backward in time (states recomputed from checkpoints every ckpt_every steps;
// 0 = 32). dout {dv, Hv, T}; dS_final (NULL = 0) is ∂L/∂S_T. Adds into dq, dk (summed over the
// value heads sharing a key head), dv, dg, dbeta, dS0 (any may be NULL).
void bn_gdn_bwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                const float *g, const float *beta, const float *S0, const float *dout, const float *dS_final,
                int ckpt_every, float *dq, float *dk_, float *dv_, float *dg, float *dbeta, float *dS0);

// ---- parameter gradients (full-parameter training, train/sft.h) -------------------------------
// bn_linear_wgrad: dW {n_in, n_out} (row o contiguous) += dyᵀ x for x {n_in, T}, dy {n_out, T}.
void bn_linear_wgrad(const float *x, const float *dy, int64_t n_in, int64_t n_out, int T, float *dW);
// bn_rmsnorm_wgrad: y = w ⊙ x·ρ per row of n; dw {n} += Σ_rows dy ⊙ x·ρ.
void bn_rmsnorm_wgrad(const float *x, int n, int rows, float eps, const float *dy, float *dw);
// bn_gated_rmsnorm_wgrad: y = w ⊙ RMSNorm(o) ⊙ SiLU(z); dw {n} += Σ_rows dy ⊙ o·ρ ⊙ SiLU(z).
void bn_gated_rmsnorm_wgrad(const float *o, const float *z, int n, int rows, float eps, const float *dy, float *dw);
// bn_conv1d_silu_wgrad: dw {K, C} += ∂L/∂w of bn_conv1d_silu_fwd for dout {C, T}.
void bn_conv1d_silu_wgrad(const float *mix, const float *state0, const float *w, int C, int K, int T,
                          const float *dout, float *dw);
// bn_gdn_gate_param_grad: g = softplus(a + dt)·ssm_a; ddt {n} += Σ dg·ssm_a·σ(a + dt),
// dssm_a {n} += Σ dg·softplus(a + dt) (GGUF stores ssm_a = −exp(A_log) directly). Either may be NULL.
void bn_gdn_gate_param_grad(const float *a, const float *dt, const float *ssm_a, int n, int rows,
                            const float *dg, float *ddt, float *dssm_a);

#endif
