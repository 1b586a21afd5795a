// cuda/cuda_train_step.h — the optimizer end of the GPU trainer (cuda/train_step.cu), callable from C: the FTPO loss
// and its gradient w.r.t. the last-position logits (docs/antidoom.md §9; the CPU's train/ftpo.c), and AdamW, the
// global gradient norm, clipping and scaling (§11.3; the CPU's train/adamw.c), with the same math in the same
// precision (double where the CPU uses double). Every array argument is device memory unless named host; the ops
// enqueue on `stream` (a cudaStream_t; NULL = the default stream) and return 0, or -1 with err filled
// ("CUDA error: <what> (<call>) at file:line", or "cuda: <what>" for a bad argument). Device buffers come from
// cuda/cuda_dev_buf.h.
#ifndef BONSAI_CUDA_TRAIN_STEP_H
#define BONSAI_CUDA_TRAIN_STEP_H
#include <stdint.h>
#include <stddef.h>
#include "train/ftpo.h"
#include "cuda/cuda_dev_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- FTPO loss (docs/antidoom.md §9) -------------------------------------------------------------
// The batch: B rows of V logits, z and zref {V, B} (row b at b·V); rejected [B]; the chosen ids of row b are
// chosen[chosen_off[b] .. chosen_off[b + 1]) (chosen_off [B + 1], chosen_off[0] = 0, n_chosen = chosen_off[B] on the
// host). Invalid chosen (out of range, equal to the rejected id, a repeat) are masked as train/ftpo.c does.
// bn_cuda_ftpo_scratch_floats: floats of device scratch bn_cuda_ftpo_loss needs for B rows and n_chosen chosen ids (it
// holds doubles: pass memory of bn_cuda_dev_floats, or 8-byte aligned).
size_t bn_cuda_ftpo_scratch_floats(int B, int n_chosen);
// bn_cuda_ftpo_loss: enqueues the loss of the batch and its metrics into scratch and, if dz is non-NULL, OVERWRITES
// dz {V, B} with ∂L/∂z. 1 <= B <= 65535. Nothing is copied back: read the loss with bn_cuda_ftpo_metrics.
int bn_cuda_ftpo_loss(const bn_ftpo_cfg *cfg, const float *z, const float *zref, int B, int V, const int *rejected,
                      const int *chosen_off, const int *chosen, int n_chosen, float *dz, float *scratch,
                      void *stream, char *err, size_t errlen);
// bn_cuda_ftpo_metrics: waits for the device, then fills host metrics (every field of bn_ftpo_metrics, the median Δ
// from the downloaded Δ list) from the scratch of the last bn_cuda_ftpo_loss with these B and n_chosen; returns 0 or
// -1.
int bn_cuda_ftpo_metrics(const float *scratch, int B, int n_chosen, bn_ftpo_metrics *metrics, char *err,
                         size_t errlen);

// ---- AdamW, gradient norm, clipping, scaling (docs/antidoom.md §11.3) --------------------------------
// bn_cuda_adamw_step: the update number t (1 for the first; the CPU's o->t after its increment) of AdamW with
// learning rate lr over n parameters, the fields of train/adamw.h's bn_adamw_cfg passed one by one (its header is
// C only): m, v moments [n] updated in place; θ ← θ(1 − lr·wd) − lr/bc1 · m/(√v/√bc2 + eps).
int bn_cuda_adamw_step(float beta1, float beta2, float eps, float weight_decay, float lr, int64_t t, int64_t n,
                       float *params, const float *grads, float *m, float *v, void *stream, char *err, size_t errlen);
// BN_CUDA_GRAD_NORM_SCRATCH: floats of device scratch the norm and clipping need (per-block partial sums in double:
// memory of bn_cuda_dev_floats, or 8-byte aligned).
#define BN_CUDA_GRAD_NORM_SCRATCH 1024
// bn_cuda_grad_norm: waits for the device, then *norm (host) = ‖g‖₂ of n gradients, summed in double in a fixed order
// (per-block partial sums, then one pass over them): the same bits on every run.
int bn_cuda_grad_norm(const float *g, int64_t n, float *scratch, double *norm, void *stream, char *err,
                      size_t errlen);
// bn_cuda_grad_clip: scales g by min(1, max_norm/(‖g‖ + 1e-6)) on the device (max_norm <= 0: no clipping); when norm
// (host) is non-NULL, waits for the device and stores ‖g‖ before clipping there.
int bn_cuda_grad_clip(float *g, int64_t n, float max_norm, float *scratch, double *norm, void *stream, char *err,
                      size_t errlen);
// bn_cuda_grad_scale: g *= s.
int bn_cuda_grad_scale(float *g, int64_t n, float s, void *stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
