// train/tether.h — the plain-text tether of FTPO training (bonsai-ftpo-train --tether-text): λ · mean over every
// position of KL(p_ref(·|t) ‖ p_θ(·|t)) on windows of a plain text, p_ref = the model the policy starts from with the
// adapter off (the quantized base under --ste-type). Windows: the text cut into consecutive ctx-token windows,
// visited in one order shuffled from the seed; optimizer step k uses entries k·batch … k·batch + batch − 1 (cyclic),
// a function of seed and step alone (so a resumed run continues with the same windows). The reference
// log-probabilities of a window are computed once and cached in full ({V, ctx} floats) up to a byte cap; windows
// beyond it are recomputed each time.
#ifndef BONSAI_TRAIN_TETHER_H
#define BONSAI_TRAIN_TETHER_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include "core/model.h"
#include "train/lora.h"
#include "train/device.h"

// bn_log_softmax: out {V, T} = log softmax of each column of z {V, T} (out may equal z).
void bn_log_softmax(const float *z, int T, int V, float *out);
// bn_tether_kl: mean over the T positions of KL(p_ref ‖ p_θ), p_ref = exp(logp_ref {V, T}), p_θ = softmax(z
// {V, T}); if dz is non-NULL it is OVERWRITTEN with scale·∂(mean KL)/∂z = scale·(p_θ − p_ref)/T. log p_θ is rounded
// to float as bn_log_softmax rounds logp_ref, so logits equal to the reference's give KL 0 and dz 0 exactly (no
// rounding noise for AdamW to turn into full-size steps). Returns the mean KL (nats, ≥ 0 up to rounding).
double bn_tether_kl(const float *z, const float *logp_ref, int T, int V, float scale, float *dz);
// bn_tether_loss: *kl = mean over the n positions of tokens of KL(p_ref ‖ p_θ), p_θ = m_pol with adapter l (the
// STE model when l->ste), logp_ref {V, n} the reference log-probabilities; with backward, ADDS
// scale·∂KL/∂A, ∂B into l->grads. Returns 0 or -1 (err).
int bn_tether_loss(const bn_model *m_pol, bn_lora *l, const int32_t *tokens, int n, const float *logp_ref,
                   float scale, bool backward, double *kl, char *err, size_t errlen);
// bn_tether_ref: logp {V, n} = log softmax of the reference model m's logits (no adapter) over tokens;
// returns 0 or -1 (err).
int bn_tether_ref(const bn_model *m, const int32_t *tokens, int n, float *logp, char *err, size_t errlen);

typedef struct bn_tether bn_tether;
// bn_tether_new: the tether over tokens[0..n) (kept by pointer) with weight lambda, ctx-token windows (<= 0: 64),
// batch windows per step (<= 0: 2), reference cache up to cache_mb MiB (<= 0: 512), window order from seed.
// Returns NULL with *rc 0 when it is off (lambda <= 0 or no tokens), NULL with *rc -1 (err) when the text is
// shorter than one window.
bn_tether *bn_tether_new(const int32_t *tokens, int64_t n, float lambda, int ctx, int batch, int cache_mb,
                         uint64_t seed, int *rc, char *err, size_t errlen);
// bn_tether_free: frees the tether and its cache (NULL is fine).
void bn_tether_free(bn_tether *t);
// bn_tether_windows: windows per step, tokens per window and windows in the text (for the log line).
void bn_tether_windows(const bn_tether *t, int *batch, int *ctx, int *n_win);
// bn_tether_use_device: the tether's forwards and backwards run on a device backend's contexts (train/device.h, one
// with forward_all): the policy's on ctx, the reference's on ref_ctx without its adapter (ctx itself, or with
// --ste-type a context of the quantized base); its gradients are then ADDED into ctx's, for the trainer to take. NULL
// dev: the CPU.
void bn_tether_use_device(bn_tether *t, const bn_train_device *dev, void *ctx, void *ref_ctx);
// bn_tether_step: the tether term of optimizer step `step` (0-based): ADDS λ·∂(mean KL)/∂(A, B) over the step's
// windows (reference = m_ref, policy = m_pol with l; on a device: its model without and with its adapter) into
// l->grads (the device's gradients) and writes their mean KL into *kl_mean; returns 0 or -1 (err).
int bn_tether_step(bn_tether *t, const bn_model *m_ref, const bn_model *m_pol, bn_lora *l, int64_t step,
                   double *kl_mean, char *err, size_t errlen);

#endif
