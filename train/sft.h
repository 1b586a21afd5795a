// train/sft.h — full-parameter next-token training (SFT / language-model pretraining of small
// models, such as the shipped looping model): F32 trainable copies of every model tensor, mean next-token cross-entropy over
// all positions, a uint32 token-file loader with seeded random windows, held-out perplexity, a
// checkpoint (params + AdamW state + position, CRC32) and the GGUF write-back. Optional
// quantization-aware training (train/sft_qat.c): the forward uses deq(Q(W)) of the F32 master W for
// every tensor `bonsai-quantize TYPE` would store as TYPE, with the straight-through estimator.
// Memory: the logits of a sequence are held as {V, T} floats (fine for the small vocabularies this
// targets: V 512..32k, T ≤ a few hundred); per-layer activations are recomputed (train/graph.h).
#ifndef BONSAI_TRAIN_SFT_H
#define BONSAI_TRAIN_SFT_H
#include <stdint.h>
#include <stddef.h>
#include "core/model.h"
#include "train/adamw.h"
#include "base/rng.h"

typedef struct {
    char name[96];
    int n_dims;
    int64_t ne[4];
    int64_t off;        // offset into params / grads
    int64_t n;          // elements
    const bn_weight *src; // the source model's weight
    bool qat;           // the forward uses the fake-quantized copy (fq) of this tensor
} bn_sft_tensor;

// Trainable F32 parameters of a model. `m` is a shadow model (config copied, weights all F32 views
// into params, or into fq for QAT tensors) that train/graph.h runs; `g` has the same layout over
// grads. With QAT the gradient w.r.t. the fake-quantized weight lands in grads and the optimizer
// applies it to the master params (straight-through estimator).
typedef struct {
    const bn_model *src;
    bn_model m;
    bn_weights g;
    int n_tensors;
    bn_sft_tensor *t;
    int64_t n_params;
    float *params;      // [n_params] (one allocation with grads)
    float *grads;       // [n_params]
    int qat_type;       // bn_type the QAT tensors are fake-quantized to; -1 = plain training
    char qat_spec[256]; // "" or "TYPE" / "TYPE skip=LIST": stored in checkpoints, must match on resume
    float *fq;          // [n_params] deq(Q(params)) at the QAT tensors' offsets (NULL without QAT)
} bn_sft_params;

// bn_sft_params_new: F32 copies of every tensor of src (dequantized); NULL (err) if the model is not
// trainable (unsupported arch or a tensor type that cannot be dequantized). src must outlive it.
bn_sft_params *bn_sft_params_new(const bn_model *src, char *err, size_t errlen);
// bn_sft_params_free: frees everything (NULL is fine).
void bn_sft_params_free(bn_sft_params *p);
// bn_sft_set_views: points every weight of the shadow model m at params, or at fq for the QAT
// tensors (bn_sft_qat_enable calls it).
void bn_sft_set_views(bn_sft_params *p);
// bn_sft_zero_grad: grads = 0.
void bn_sft_zero_grad(bn_sft_params *p);
// bn_sft_save_gguf_f32: writes the source GGUF's KVs with every trained (master) tensor as F32
// (general.file_type 0) in the source's tensor order, atomically; returns 0 or -1 (err).
int bn_sft_save_gguf_f32(const bn_sft_params *p, const char *path, char *err, size_t errlen);
// bn_sft_save_gguf: without QAT bn_sft_save_gguf_f32; with QAT the file `bonsai-quantize TYPE` (plus
// --tensor-type NAME=f16 per skipped name) makes of that F32 file: QAT tensors stored as TYPE,
// quantized from the master (train/sft_qat.c). Returns 0 or -1 (err).
int bn_sft_save_gguf(const bn_sft_params *p, const char *path, char *err, size_t errlen);

// ---- quantization-aware training (train/sft_qat.c) -----------------------------------------------
// bn_sft_qat_enable: QAT to TYPE ("Q1_0", "Q2_0", ... as bonsai-quantize parses it): every tensor
// that `bonsai-quantize IN OUT TYPE` (default rules) stores as TYPE's own block type is used in the
// forward as deq(Q(master)); skip (NULL/"" = none) is a comma-separated list of tensor-name patterns
// (PCRE2 substring, as --tensor-type) kept out of QAT and stored as F16. Fills fq. Returns the
// number of QAT tensors, or -1 (err: bad type, bad pattern, no tensor qualifies, already enabled).
int bn_sft_qat_enable(bn_sft_params *p, const char *type, const char *skip, char *err, size_t errlen);
// bn_sft_qat_sync: recomputes fq from the master params (bn_sft_step and bn_sft_checkpoint_load do
// it; call it after changing params yourself). No-op without QAT. Returns 0 or -1 (err).
int bn_sft_qat_sync(bn_sft_params *p, char *err, size_t errlen);
// bn_sft_qat_save_gguf: the QAT write-back behind bn_sft_save_gguf (F32 temp file next to path, then
// the bonsai-quantize driver in-process). Returns 0 or -1 (err).
int bn_sft_qat_save_gguf(const bn_sft_params *p, const char *path, char *err, size_t errlen);

// bn_sft_ce: mean next-token cross-entropy of logits {V, T} against targets[T] (targets < 0 are
// ignored); if dlogits is non-NULL it gets scale·∂(mean CE)/∂logits. Returns the mean CE (nats),
// or 0 when no target counts. *n_counted (optional) = number of counted positions.
double bn_sft_ce(const float *logits, const int32_t *targets, int T, int V, float scale, float *dlogits,
                 int *n_counted);
// bn_sft_seq_loss: forward of tokens[0..T) predicting tokens[1..T] (T ≥ 2); with backward, ADDS
// scale·∂CE/∂W into p->grads. Returns the mean CE, or a negative value with err filled.
double bn_sft_seq_loss(bn_sft_params *p, const int32_t *tokens, int T, float scale, bool backward,
                       char *err, size_t errlen);

// ---- token data ----------------------------------------------------------------------------------
typedef struct {
    int32_t *tok;       // [n]
    int64_t n;
    int64_t n_train;    // tokens [0, n_train) train, [n_train, n) held out
} bn_sft_data;

// bn_sft_data_load: reads a little-endian uint32 token file; ids must be < n_vocab; the last
// val_frac of the tokens is held out. Returns 0 or -1 (err).
int bn_sft_data_load(bn_sft_data *d, const char *path, int n_vocab, double val_frac, char *err, size_t errlen);
// bn_sft_data_free: frees the tokens.
void bn_sft_data_free(bn_sft_data *d);
// bn_sft_window: start of a random training window of len tokens (uniform over the train part).
int64_t bn_sft_window(const bn_sft_data *d, int len, bn_rng *rng);
// bn_sft_eval_ppl: perplexity exp(mean CE) over consecutive non-overlapping windows of ctx+1 tokens
// of the held-out part (at most max_windows; 0 = all); negative on error or no held-out data.
double bn_sft_eval_ppl(bn_sft_params *p, const bn_sft_data *d, int ctx, int max_windows, char *err, size_t errlen);

// ---- checkpoint (train/sft_checkpoint.c) ---------------------------------------------------------
typedef struct {
    int64_t step;       // optimizer updates done
    int64_t total_steps;
    bn_rng rng;         // window sampling RNG
    int32_t ctx, batch; // the run's window length and batch (restored on resume; 0 = unknown)
    float lr, warmup_ratio, max_grad_norm, weight_decay; // the run's schedule/optimizer settings
} bn_sft_pos;

// bn_sft_checkpoint_save: params (the F32 master weights under QAT), the QAT spec, AdamW state and
// position with a CRC32, atomically; 0 or -1.
int bn_sft_checkpoint_save(const char *path, const bn_sft_params *p, const bn_adamw *o, const bn_sft_pos *pos,
                           char *err, size_t errlen);
// bn_sft_checkpoint_load: restores params (same layout required), AdamW state (*o, new) and
// position (version-2 files: no QAT), refreshes fq; returns 0 or -1 with a clear message (also when
// the checkpoint's QAT spec differs from p->qat_spec).
int bn_sft_checkpoint_load(const char *path, bn_sft_params *p, bn_adamw **o, bn_sft_pos *pos,
                           char *err, size_t errlen);

// ---- the training loop (train/sft_train.c) -------------------------------------------------------
typedef struct {
    int ctx;               // tokens per training window (the window holds ctx + 1 tokens) (128)
    int batch;             // windows per optimizer step (8)
    int64_t total_steps;   // schedule length S (1000)
    float lr;              // peak learning rate (1e-3)
    float warmup_ratio;    // linear warmup over ceil(ratio·S) steps, then linear decay to 0 (0.05)
    float max_grad_norm;   // global-norm clipping (1.0; <= 0 off)
    bn_adamw_cfg adam;     // β (0.9, 0.95), eps 1e-8, weight decay 0.01 (2-D tensors only: not norms, ssm_a/dt)
} bn_sft_cfg;

// bn_sft_cfg_default: the values in the field comments.
bn_sft_cfg bn_sft_cfg_default(void);
// bn_sft_step: one optimizer update: cfg->batch random windows (from pos->rng) of the training
// part, gradient of the batch mean of the per-window mean CE, clipping, AdamW at the scheduled lr
// of update pos->step (decoupled decay on 2-D tensors only) to the master params, then the QAT
// refresh (bn_sft_qat_sync); pos->step += 1. Writes the batch loss (before the update), the gradient norm
// (before clipping) and the lr used. Returns 0 or -1 (err).
int bn_sft_step(bn_sft_params *p, bn_adamw *o, const bn_sft_cfg *cfg, const bn_sft_data *d, bn_sft_pos *pos,
                double *loss, double *grad_norm, double *lr_used, char *err, size_t errlen);

#endif
