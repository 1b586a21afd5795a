// cuda/cuda_fwd_ops.h — the GPU trainer's forward ops (cuda/fwd_ops.cu, cuda/fwd_linear.cu), callable from C: what
// train/graph.c computes on the CPU between the matmuls (docs/model.md §4, §7), with its layouts: fp32 row-major in
// ggml order ({n, rows}: rows of n contiguous floats). These are the trainer's plain forward, not the inference
// engine's fused kernels: the backward (cuda/cuda_bwd_ops.h, cuda/cuda_bwd_seq.h) recomputes from their outputs.
// Every pointer argument of an op is device memory; ops enqueue on `stream` (a cudaStream_t; NULL = the default
// stream) and return 0, or -1 with err filled. Empty shapes do nothing and return 0. Outputs may not alias inputs
// unless said. Weights in their stored type go to the device through cuda/cuda_dev_buf.h's bn_cuda_dev_bytes.
#ifndef BONSAI_CUDA_FWD_OPS_H
#define BONSAI_CUDA_FWD_OPS_H
#include <stdint.h>
#include <stddef.h>
#include "cuda/cuda_dev_buf.h"
#include "cuda/cuda_bwd_seq.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- weights of any stored type -----------------------------------------------------------------------------------
// bn_cuda_dequant_rows: out {ne0, n_rows} = rows r0 .. r0 + n_rows of W (type: quant/quant.h's bn_type, rows of
// bn_row_size(type, ne0) bytes) as fp32, bit-identical to bn_dequantize; 0 or -1 (an unsupported type names it).
int bn_cuda_dequant_rows(int type, const void *W, int64_t ne0, int64_t r0, int64_t n_rows, float *out, void *stream,
                         char *err, size_t errlen);
// bn_cuda_dequant_rows_bf16: the same rows as bfloat16 bits: bn_cuda_dequant_rows's values rounded to nearest even
// (quant/quant.h's bn_fp32_to_bf16); 0 or -1.
int bn_cuda_dequant_rows_bf16(int type, const void *W, int64_t ne0, int64_t r0, int64_t n_rows, uint16_t *out,
                              void *stream, char *err, size_t errlen);
// bn_cuda_get_rows_f32: out {ne0, n} = rows ids[0..n) (device ints, each in [0, ne1)) of W as fp32 (the embedding
// lookup); 0 or -1.
int bn_cuda_get_rows_f32(int type, const void *W, int64_t ne0, int64_t ne1, const int *ids, int n, float *out,
                         void *stream, char *err, size_t errlen);

// ---- linear + LoRA forward (cuBLAS) -------------------------------------------------------------------------------
// bn_cuda_linear_lora_fwd_workspace_floats: device floats bn_cuda_linear_lora_fwd needs as workspace.
size_t bn_cuda_linear_lora_fwd_workspace_floats(bool gemm_bf16, int w_type, int64_t n_in, int64_t n_out, int r, int T);
// bn_cuda_linear_lora_fwd: y {n_out, T} = W x + scale·B(A·(x⊙drop)) (bn_linear_lora_fwd), W x in the arithmetic
// gemm_bf16 chooses (cuda/cuda_bwd_seq.h: fp32 SGEMMs, or bf16 inputs with fp32 accumulation); W {n_in, n_out} of any
// type bn_cuda_dequant_rows takes; lora may be NULL (then y = W x); drop {n_in, T} may be NULL; ax {r, T} (may be
// NULL) receives A·(x⊙drop) for the backward. workspace: bn_cuda_linear_lora_fwd_workspace_floats floats. 0 or -1.
int bn_cuda_linear_lora_fwd(void *blas, bool gemm_bf16, int w_type, const void *W, int64_t n_in, int64_t n_out,
                            const bn_cuda_lora *lora, const float *x, int T, const float *drop, float *y, float *ax,
                            float *workspace, void *stream, char *err, size_t errlen);
// bn_cuda_lora_ax: ax {r, T} = A·x for x {n_in, T}: the LoRA pair's first product alone, bit for bit what
// bn_cuda_linear_lora_fwd keeps in ax without dropout (the backward's recomputation when only A·x is read); 0 or -1.
int bn_cuda_lora_ax(void *blas, const bn_cuda_lora *lora, int64_t n_in, const float *x, int T, float *ax,
                    void *stream, char *err, size_t errlen);

// ---- norms --------------------------------------------------------------------------------------------------------
// bn_cuda_rmsnorm_fwd: y = w ⊙ x·(mean x² + eps)^-½ per row of n (w NULL = ones); 0 or -1.
int bn_cuda_rmsnorm_fwd(const float *x, const float *w, int n, int rows, float eps, float *y, void *stream,
                        char *err, size_t errlen);
// bn_cuda_l2norm_fwd: y = scale · x / sqrt(Σx² + eps) per row of n (the GDN q and k; q with scale 1/√dk); 0 or -1.
int bn_cuda_l2norm_fwd(const float *x, int n, int rows, float eps, float scale, float *y, void *stream, char *err,
                       size_t errlen);
// bn_cuda_gated_rmsnorm_fwd: y = w ⊙ RMSNorm(o) ⊙ SiLU(z) per row of n (shared w {n}); 0 or -1.
int bn_cuda_gated_rmsnorm_fwd(const float *o, const float *z, const float *w, int n, int rows, float eps, float *y,
                              void *stream, char *err, size_t errlen);

// ---- elementwise --------------------------------------------------------------------------------------------------
// bn_cuda_swiglu_fwd: y = SiLU(a) ⊙ c; 0 or -1.
int bn_cuda_swiglu_fwd(const float *a, const float *c, int64_t n, float *y, void *stream, char *err, size_t errlen);
// bn_cuda_sigmoid_gate_fwd: y = u ⊙ σ(g); 0 or -1.
int bn_cuda_sigmoid_gate_fwd(const float *u, const float *g, int64_t n, float *y, void *stream, char *err,
                             size_t errlen);
// bn_cuda_gdn_gates_fwd: per row of n heads (rows rows): beta = σ(b), g = softplus(a + dt)·ssm_a (dt, ssm_a {n}); 0 or -1.
int bn_cuda_gdn_gates_fwd(const float *b, const float *a, const float *dt, const float *ssm_a, int n, int rows,
                          float *beta, float *g, void *stream, char *err, size_t errlen);
// bn_cuda_add: y = a + b (y may alias a or b); 0 or -1.
int bn_cuda_add(const float *a, const float *b, int64_t n, float *y, void *stream, char *err, size_t errlen);
// bn_cuda_to_bf16: y16[0..n) = the bf16 bits nearest to x[i] (ties to even; quant/quant.h's bn_fp32_to_bf16): the
// trainer's kept layer inputs; 0 or -1.
int bn_cuda_to_bf16(const float *x, int64_t n, uint16_t *y16, void *stream, char *err, size_t errlen);
// bn_cuda_from_bf16: y[0..n) = the floats of bf16 bits x16 (exact); 0 or -1.
int bn_cuda_from_bf16(const uint16_t *x16, int64_t n, float *y, void *stream, char *err, size_t errlen);
// bn_cuda_add_row_bias: y[t·n + j] += bias[j] for rows rows; 0 or -1.
int bn_cuda_add_row_bias(float *y, const float *bias, int n, int rows, void *stream, char *err, size_t errlen);
// bn_cuda_copy_cols: dst[r·dst_stride + dst_off + i] = src[r·src_stride + src_off + i] for i < width, r < rows (the
// splits of packed projections and their gradients' assembly); 0 or -1.
int bn_cuda_copy_cols(const float *src, int64_t src_stride, int64_t src_off, float *dst, int64_t dst_stride,
                      int64_t dst_off, int64_t width, int rows, void *stream, char *err, size_t errlen);

// ---- RoPE ---------------------------------------------------------------------------------------------------------
// bn_cuda_rope_fwd: rotates x {head_dim·n_heads, T} in place by +θ at positions pos0 + t (bn_rope_inplace with sign
// +1 per row; modes BN_CUDA_ROPE_NEOX / BN_CUDA_ROPE_NORM of cuda/cuda_bwd_ops.h); 0 or -1.
int bn_cuda_rope_fwd(float *x, int head_dim, int n_heads, int T, int n_rot, int pos0, float base, int mode,
                     void *stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
