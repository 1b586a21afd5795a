// train/adamw.h — AdamW with torch semantics, global-norm gradient clipping, gradient
// accumulation and the HF linear warmup + decay schedule (docs/antidoom.md §11).
#ifndef BONSAI_TRAIN_ADAMW_H
#define BONSAI_TRAIN_ADAMW_H
#include <stdint.h>
#include <stddef.h>
#include "base/bytebuf.h"

typedef struct {
    float beta1, beta2; // 0.9, 0.999
    float eps;          // 1e-8
    float weight_decay; // 0.01 (decoupled)
} bn_adamw_cfg;

typedef struct {
    int64_t n;     // parameters
    int64_t t;     // updates done (bias correction uses t after increment)
    float *m, *v;  // [n] first / second moments
} bn_adamw;

// bn_adamw_cfg_default: β (0.9, 0.999), eps 1e-8, weight decay 0.01.
bn_adamw_cfg bn_adamw_cfg_default(void);
// bn_adamw_new: zeroed state for n parameters; never NULL.
bn_adamw *bn_adamw_new(int64_t n);
// bn_adamw_free: frees the moments and the state (NULL is fine).
void bn_adamw_free(bn_adamw *o);
// bn_adamw_step: one update with learning rate lr: t += 1; m, v moments; θ ← θ(1 − lr·wd);
// θ ← θ − lr·m̂/(√v̂ + eps), split over the training threads (bn_train_set_threads; the same bits for any number).
// Returns the new t.
int64_t bn_adamw_step(bn_adamw *o, const bn_adamw_cfg *cfg, float lr, float *params, const float *grads);

// bn_adamw_commit: the end of a checkpoint: appends o's step and moments (i64 t, f32 m[n], f32 v[n]) and the CRC32
// of everything in b to b, writes b to path atomically and frees b's bytes. Returns 0 or -1 with err.
int bn_adamw_commit(bn_buf *b, const bn_adamw *o, const char *path, char *err, size_t errlen);

// bn_grad_norm: global L2 norm of n gradients (accumulated in double).
double bn_grad_norm(const float *g, int64_t n);
// bn_grad_clip: scales g by min(1, max_norm/(‖g‖ + 1e-6)) (max_norm <= 0: no clipping);
// returns the norm before clipping.
double bn_grad_clip(float *g, int64_t n, float max_norm);
// bn_grad_scale: g *= s (e.g. 1/GA after summing GA micro-batch gradients).
void bn_grad_scale(float *g, int64_t n, float s);

// bn_sched_total_steps: S = ceil(N/(batch·GA))·epochs.
int64_t bn_sched_total_steps(int64_t n_rows, int batch, int grad_accum, int epochs);
// bn_sched_warmup_steps: W = ceil(ratio·S) (ratio 0.1).
int64_t bn_sched_warmup_steps(int64_t total, double ratio);
// bn_sched_lr: learning rate of update k (0-based): lr·k/W for k < W (the first update has lr 0),
// else lr·max(0, (S − k)/(S − W)).
double bn_sched_lr(double lr, int64_t k, int64_t total, int64_t warmup);

#endif
