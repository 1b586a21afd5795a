// train/graph.h — the training forward and backward through a whole model with a LoRA adapter
// (docs/model.md §4, §7 forward; §8 backward), fp32, one sequence from an empty state. Only the last
// position's logits are produced (FTPO needs nothing else, docs/model.md §12). Memory: the input of
// every layer is kept ({H, T} per layer); each layer's intermediates are recomputed from it
// during the backward (docs/model.md §10.4), with the same dropout masks.
// Architectures: qwen35 (Gated DeltaNet + gated attention), qwen3, llama, qwen2 (biases frozen).
#ifndef BONSAI_TRAIN_GRAPH_H
#define BONSAI_TRAIN_GRAPH_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "train/lora.h"
#include "base/rng.h"

typedef struct bn_train_graph bn_train_graph;

// bn_train_forward: runs tokens[0..n) through m with adapter l (NULL = the base model, e.g. for
// reference logits); dropout masks come from rng when l->dropout > 0 (rng NULL = no dropout).
// With l->ste set, m's adapted weights must already be W_eff = deq(Q(W0 + s·B·A)) (train/fakequant.h):
// the forward uses them as they are and the backward is the straight-through estimator.
// Writes the last position's logits {n_vocab} into logits and returns the graph for
// bn_train_backward, or NULL with err filled. Keeps pointers to m, l and tokens' copy.
bn_train_graph *bn_train_forward(const bn_model *m, bn_lora *l, const int32_t *tokens, int n, bn_rng *rng,
                                 float *logits, char *err, size_t errlen);
// bn_train_backward: given dlogits {n_vocab} = ∂L/∂logits of the last position, ADDS ∂L/∂A and
// ∂L/∂B of every adapted tensor into l->grads. Returns 0 or -1 (err).
int bn_train_backward(bn_train_graph *g, const float *dlogits, char *err, size_t errlen);
// ---- full-parameter mode (SFT, train/sft.h): every position's logits, gradients of all weights --
// bn_train_forward_all: runs tokens[0..n) through m (no adapter, no dropout); writes the logits of
// every position {n_vocab, n} into logits; returns the graph or NULL (err). m's weights read by
// the backward (norms, ssm_*) must be F32; linears may be any type but only F32 makes sense to train.
bn_train_graph *bn_train_forward_all(const bn_model *m, const int32_t *tokens, int n, float *logits,
                                     char *err, size_t errlen);
// bn_train_backward_full: given dlogits {n_vocab, n}, ADDS ∂L/∂W into grads, a bn_weights shaped
// like m->w whose .data point to F32 gradient buffers (NULL = not trained; a tied head's output
// should point at token_embd's buffer). Returns 0 or -1 (err).
int bn_train_backward_full(bn_train_graph *g, const float *dlogits, const bn_weights *grads, char *err, size_t errlen);
// ---- adapter over every position (the plain-text tether of train/trainer.h) ----------------------
// bn_train_forward_all_lora: as bn_train_forward_all but with adapter l (no dropout; l->ste as in
// bn_train_forward): every position's logits {n_vocab, n}; returns the graph or NULL (err).
bn_train_graph *bn_train_forward_all_lora(const bn_model *m, bn_lora *l, const int32_t *tokens, int n, float *logits,
                                          char *err, size_t errlen);
// bn_train_backward_all_lora: given dlogits {n_vocab, n} of a bn_train_forward_all_lora graph, ADDS ∂L/∂A and
// ∂L/∂B into l->grads. Returns 0 or -1 (err).
int bn_train_backward_all_lora(bn_train_graph *g, const float *dlogits, char *err, size_t errlen);
// bn_train_mem_peak: the most bytes of this module's activation and working buffers (layer inputs, one layer's
// intermediates and gradients, dequantized layer copies; not the kernels' own scratch) alive at once since the last
// reset; reset starts a new count from the bytes alive now. Returns the peak (train/memplan.h plans these bytes).
size_t bn_train_mem_peak(bool reset);
// bn_train_graph_free: frees the saved activations (NULL is fine).
void bn_train_graph_free(bn_train_graph *g);

#endif
