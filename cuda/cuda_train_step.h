// cuda/cuda_train_step.h — the optimizer end of the GPU trainer (cuda/train_step.cu), callable from C: the FTPO loss
// and its gradient w.r.t. the last-position logits (docs/antidoom.md §9; the CPU's train/ftpo.c), with the same math
// in the same precision (double where the CPU uses double). Every array argument is device memory unless named host;
// the ops enqueue on `stream` (a cudaStream_t; NULL = the default stream) and return 0, or -1 with err filled
// ("CUDA error: <what> (<call>) at file:line", or "cuda: <what>" for a bad argument). Device buffers come from
// cuda/cuda_bwd_ops.h (bn_cuda_dev_floats and its upload/download) and, for ids, bn_cuda_dev_ints below.
#ifndef BONSAI_CUDA_TRAIN_STEP_H
#define BONSAI_CUDA_TRAIN_STEP_H
#include <stdint.h>
#include <stddef.h>
#include "train/ftpo.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- int device buffers ------------------------------------------------------------------------
// bn_cuda_dev_ints: n ints of device memory (contents undefined); NULL with err filled on failure.
int *bn_cuda_dev_ints(size_t n, char *err, size_t errlen);
// bn_cuda_dev_free_ints: frees memory of bn_cuda_dev_ints (NULL is fine).
void bn_cuda_dev_free_ints(int *dev);
// bn_cuda_dev_upload_ints: dev[0..n) = host[0..n); returns 0 or -1.
int bn_cuda_dev_upload_ints(int *dev, const int *host, size_t n, char *err, size_t errlen);

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

#ifdef __cplusplus
}
#endif
#endif
