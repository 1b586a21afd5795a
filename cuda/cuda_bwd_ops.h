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

#ifdef __cplusplus
extern "C" {
#endif

// ---- device buffers ---------------------------------------------------------------------------
// bn_cuda_dev_floats: n floats of device memory (contents undefined); NULL with err filled on failure.
float *bn_cuda_dev_floats(size_t n, char *err, size_t errlen);
// bn_cuda_dev_free: frees memory of bn_cuda_dev_floats (NULL is fine).
void bn_cuda_dev_free(float *dev);
// bn_cuda_dev_upload: dev[0..n) = host[0..n); returns 0 or -1.
int bn_cuda_dev_upload(float *dev, const float *host, size_t n, char *err, size_t errlen);
// bn_cuda_dev_download: waits for all queued device work, then host[0..n) = dev[0..n); returns 0 or -1.
int bn_cuda_dev_download(float *host, const float *dev, size_t n, char *err, size_t errlen);

// ---- norms (one block per row) -----------------------------------------------------------------
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

#ifdef __cplusplus
}
#endif
#endif
