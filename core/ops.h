// core/ops.h — the fp32 math primitives of the forward (docs/model.md §4, §7), written once and shared
// with train/. All functions work on one vector / one head / one token; no allocation.
// Output pointers may alias the matching input unless a comment says otherwise.
#ifndef BONSAI_OPS_H
#define BONSAI_OPS_H
#include <stdint.h>

// ---- scalar activations (ggml's definitions) -----------------------------------------------
// bn_sigmoid: 1 / (1 + exp(-x)).
float bn_sigmoid(float x);
// bn_silu: x * sigmoid(x).
float bn_silu(float x);
// bn_softplus: x if x > 20, else log(1 + exp(x)) (ggml's threshold).
float bn_softplus(float x);

// ---- norms ---------------------------------------------------------------------------------
// bn_rmsnorm: y = w ⊙ x / sqrt(mean(x²) + eps); w NULL means all ones. y may alias x.
void bn_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
// bn_l2norm: y = x / sqrt(Σx² + eps) (mainline ggml_l2_norm). y may alias x.
void bn_l2norm(float *y, const float *x, int n, float eps);
// bn_gated_rmsnorm: y = RMSNorm(o; w) ⊙ SiLU(z), all over n (GDN output gate, norm before gate).
void bn_gated_rmsnorm(float *y, const float *o, const float *z, const float *w, int n, float eps);

// ---- rotary embeddings (in place on one head vector x[head_dim]) ----------------------------
// θ_i = pos · base^(−2i/n_rot) for i < n_rot/2; dims >= n_rot are unchanged.
// bn_rope_neox: rotate-half pairs (x_i, x_{i + n_rot/2}) (qwen35, qwen3, qwen2).
void bn_rope_neox(float *x, int head_dim, int n_rot, int pos, float base);
// bn_rope_norm: adjacent pairs (x_{2i}, x_{2i+1}) (llama).
void bn_rope_norm(float *x, int head_dim, int n_rot, int pos, float base);

// ---- elementwise ---------------------------------------------------------------------------
// bn_swiglu: y = SiLU(gate) ⊙ up over n. y may alias gate or up.
void bn_swiglu(float *y, const float *gate, const float *up, int n);
// bn_sigmoid_gate: y = x ⊙ σ(g) over n (gated attention output). y may alias x.
void bn_sigmoid_gate(float *y, const float *x, const float *g, int n);
// bn_log_sum_exp: log Σ_i exp(x_i) over n >= 1 values (max-subtracted, summed in double).
double bn_log_sum_exp(const float *x, int n);
// bn_softmax_inplace: x = softmax(x) over n (max-subtracted, fp32).
void bn_softmax_inplace(float *x, int n);
// bn_dot_f32: Σ a_i b_i (fp32, SIMD where available).
float bn_dot_f32(const float *a, const float *b, int n);
// bn_axpy_f32: y += a * x over n.
void bn_axpy_f32(float *y, float a, const float *x, int n);

// ---- Gated DeltaNet pieces -----------------------------------------------------------------
// bn_conv1d_silu_step: one token of the causal depthwise conv + SiLU over C channels, kernel K.
//   window: {K-1, C} in ggml order — channel ch's previous K-1 raw inputs (pre-conv) at
//           window[ch*(K-1) + i], oldest first (zeros at sequence start); updated in place
//           (shifted by one, x appended). This is llama.cpp's conv-state layout.
//   w:      {K, C} as stored in GGUF (ssm_conv1d: tap i of channel ch at w[ch*K + i];
//           tap K-1 multiplies the current token x).
//   out[ch] = SiLU(Σ_{i<K-1} w[ch*K+i]·window[ch*(K-1)+i] + w[ch*K+K-1]·x[ch]). out may alias x.
void bn_conv1d_silu_step(float *out, float *window, const float *x, const float *w, int C, int K);
// bn_gdn_step: one token of the gated delta rule for one value head (docs/model.md §4.3 step 6).
//   S: {dk, dv} in ggml order = dv rows of dk floats, S[j*dk + i] = S_ij (i key dim, j value dim),
//      i.e. ggml's "stored transposed" layout. Updated in place:
//      S ← α S;  u = Sᵀk;  δ = β (v − u);  S ← S + k δᵀ;  o = Sᵀ q.
//   q (already scaled by 1/√dk), k: [dk]; v, o: [dv]. o must not alias q/k/v.
void bn_gdn_step(float *S, const float *q, const float *k, const float *v, float alpha, float beta,
                 float *o, int dk, int dv);

// ---- attention -----------------------------------------------------------------------------
// bn_attention_head: out[hd] = Σ_τ softmax_τ(scale · q·K_τ) V_τ over τ in [0, n_kv), where
//   K_τ = K + τ*kv_stride and V_τ = V + τ*kv_stride (floats). scores: scratch of n_kv floats.
void bn_attention_head(float *out, const float *q, const float *K, const float *V, int n_kv,
                       int64_t kv_stride, int hd, float scale, float *scores);
// bn_attention_group: bn_attention_head for n_q query heads sharing one K/V head (GQA), reading
//   each K_τ / V_τ row once for all of them: out + h*hd = attention of q + h*q_stride, h < n_q.
//   scores: scratch of n_q * n_kv floats. Same result as n_q bn_attention_head calls.
void bn_attention_group(float *out, const float *q, int n_q, int q_stride, const float *K, const float *V,
                        int n_kv, int64_t kv_stride, int hd, float scale, float *scores);
// bn_attention_group_f16: bn_attention_group with K and V stored as fp16 (kv_stride in elements);
//   q, scores, softmax and accumulation stay fp32.
void bn_attention_group_f16(float *out, const float *q, int n_q, int q_stride, const uint16_t *K,
                            const uint16_t *V, int n_kv, int64_t kv_stride, int hd, float scale, float *scores);

#endif
