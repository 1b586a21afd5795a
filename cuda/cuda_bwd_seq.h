// cuda/cuda_bwd_seq.h — the trainer's backward (docs/model.md §8) on the device: the sequence ops, causal GQA attention
// (cuda/bwd_attn.cu) and the gated delta rule (cuda/bwd_gdn.cu), forward and backward, and the backward of a linear
// with LoRA (cuda/bwd_linear.cu), with the layouts, formulas and conventions of train/backward.h: fp32 row-major
// tensors in ggml order, every backward ADDS into its gradient outputs and skips a NULL one. All tensor pointers are
// device pointers; stream is a cudaStream_t (NULL = the legacy default stream); work is enqueued, not waited for. Each
// launcher returns 0, or -1 with err filled ("CUDA error: <what> (<call>) at file:line"). Deterministic: no float
// atomics, sums in a fixed order (cuBLAS's GEMMs are deterministic on one stream).
#ifndef BONSAI_CUDA_BWD_SEQ_H
#define BONSAI_CUDA_BWD_SEQ_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "cuda/cuda_dev_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- causal softmax attention with GQA (cuda/bwd_attn.cu; train/backward_attn.c) --------------------------------
// q head h uses kv head h / (nh/nkv); q {hd, nh, T}, k/v {hd, nkv, T}, out/dout {hd, nh, T}. blas: a
// bn_cuda_blas_new handle (the products are cuBLAS GEMMs over blocks of query positions, fp32, or with tf32 their
// operands rounded to TF32 on the tensor cores).
// bn_cuda_attn_max_T: the longest sequence the attention ops take.
int bn_cuda_attn_max_T(void);
// bn_cuda_attn_workspace_floats: device floats bn_cuda_attn_fwd and _bwd need as workspace (the probabilities and
// their gradients of one kv head's block of query positions).
size_t bn_cuda_attn_workspace_floats(int T, int nh, int nkv);
// bn_cuda_attn_fwd: out = softmax(scale·q·kᵀ, causal)·v per q head (bn_attn_fwd); 0 or -1.
int bn_cuda_attn_fwd(void *blas, bool tf32, const float *q, const float *k, const float *v, int T, int hd, int nh,
                     int nkv, float scale, float *out, float *workspace, void *stream, char *err, size_t errlen);
// bn_cuda_attn_bwd: dq, dk, dv += gradients for dout (bn_attn_bwd; any NULL): P recomputed per block of query
// positions; dK, dV of a kv head summed over its q heads and query positions in a fixed order (no atomics). 0 or -1.
int bn_cuda_attn_bwd(void *blas, bool tf32, const float *q, const float *k, const float *v, int T, int hd, int nh,
                     int nkv, float scale, const float *dout, float *dq, float *dk, float *dv, float *workspace,
                     void *stream, char *err, size_t errlen);

// ---- gated delta-rule recurrence (cuda/bwd_gdn.cu; train/backward_gdn.c) ----------------------------------------
// q, k {dk, Hk, T} (L2-normed, q scaled), v {dv, Hv, T}, g, beta {Hv, T} (α = exp(g)), S {dk, dv, Hv} with
// S[h·dk·dv + j·dk + i] = S_ij; value head h reads key head h mod Hk. dk <= 256.
// bn_cuda_gdn_fwd: out {dv, Hv, T} of the recurrence from S0 (NULL = zeros); S_out (may be NULL, may alias S0) =
// the final state (bn_gdn_fwd). 0 or -1.
int bn_cuda_gdn_fwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                    const float *g, const float *beta, const float *S0, float *out, float *S_out, void *stream,
                    char *err, size_t errlen);
// bn_cuda_gdn_bwd_workspace_floats: device floats bn_cuda_gdn_bwd needs as workspace for these shapes (checkpoints
// every ckpt_every steps, one chunk of recomputed states, dS, per-value-head dq/dk rows and dβ, dα sums: all per value
// head).
size_t bn_cuda_gdn_bwd_workspace_floats(int T, int Hv, int dk, int dv, int ckpt_every);
// bn_cuda_gdn_bwd: the backward of bn_cuda_gdn_fwd (bn_gdn_bwd): two blocks per value head run backward in time
// with states recomputed from checkpoints every ckpt_every steps (0 = 32); dout {dv, Hv, T}, dS_final (NULL = 0).
// Adds into dq, dk_ (summed over the value heads of a key head in head order), dv_, dg, dbeta, dS0 (any NULL).
// workspace: bn_cuda_gdn_bwd_workspace_floats floats. 0 or -1.
int bn_cuda_gdn_bwd(int T, int Hk, int Hv, int dk, int dv, const float *q, const float *k, const float *v,
                    const float *g, const float *beta, const float *S0, const float *dout, const float *dS_final,
                    int ckpt_every, float *dq, float *dk_, float *dv_, float *dg, float *dbeta, float *dS0,
                    float *workspace, void *stream, char *err, size_t errlen);

// ---- linear + LoRA (cuda/bwd_linear.cu; train/backward.c) ------------------------------------------------------
// bn_cuda_blas_new: a cuBLAS handle (a cublasHandle_t) for bn_cuda_linear_lora_bwd, or NULL with err filled.
void *bn_cuda_blas_new(char *err, size_t errlen);
// bn_cuda_blas_free: destroys a bn_cuda_blas_new handle (NULL is fine).
void bn_cuda_blas_free(void *blas);
// bn_cuda_lora: a LoRA pair in device memory with bn_lora_view's layout: y = W x + scale·B(A x); A {n_in, r},
// B {r, n_out}; the gradients dA, dB (same shapes) may be NULL.
typedef struct {
    int r;
    float scale;
    const float *A, *B;
    float *dA, *dB;
} bn_cuda_lora;
// The base-weight products of the linear ops (forward W x, backward Wᵀdy) take one of two arithmetics, chosen per
// call by `gemm_bf16` (docs/antidoom.md §21): false, fp32 SGEMMs (F32 weights read in place, the other types made
// fp32 in chunks of 16 MiB, bit-identical to the CPU's dequantization); true, cublasGemmEx with bf16 inputs and fp32
// accumulation into the fp32 output (every type, F32 included, made bf16 in chunks of 16 MiB, twice the rows; the
// activation operand, x or dy, rounded to a bf16 copy in the workspace). The LoRA products are fp32 in both.
// bn_cuda_linear_lora_bwd_workspace_floats: device floats bn_cuda_linear_lora_bwd needs as workspace (r = 0 without
// LoRA).
size_t bn_cuda_linear_lora_bwd_workspace_floats(bool gemm_bf16, int w_type, int64_t n_in, int64_t n_out, int r, int T);
// bn_cuda_linear_lora_bwd: given dy {n_out, T}: dx += Wᵀdy + scale·(Aᵀ(Bᵀdy))⊙drop; dA += scale·(Bᵀdy)(x⊙drop)ᵀ;
// dB += scale·dy(A(x⊙drop))ᵀ (bn_linear_lora_bwd) through cuBLAS on handle blas (set to stream), the base product in
// the arithmetic gemm_bf16 chooses (above). W {n_in, n_out} (row o contiguous) of any type bn_cuda_dequant_rows takes
// (quant/quant.h); lora (a host struct) may be NULL; drop {n_in, T} (0 or 1/(1−p)) may be NULL; ax {r, T} from the
// forward or NULL (recomputed); dx may be NULL. workspace: bn_cuda_linear_lora_bwd_workspace_floats floats. 0 or -1.
int bn_cuda_linear_lora_bwd(void *blas, bool gemm_bf16, int w_type, const void *W, int64_t n_in, int64_t n_out,
                            const bn_cuda_lora *lora, const float *x, int T, const float *drop, const float *ax,
                            const float *dy, float *dx, float *workspace, void *stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
