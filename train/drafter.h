// train/drafter.h — training a DSpark drafter by distillation from its target (docs/dspark.md §11): the drafter's
// trainable weights as fp32 tensors in one flat array, a forward that follows spec/dspark.c's math for every anchor of
// a tapped target sequence at once (encoder, context K/V injection, non-causal block pass, output norm + LM head,
// Markov head under teacher forcing, confidence head), its backward, the file writer (either convention, read by
// spec/dspark_load.c) and a checkpoint of weights + AdamW state.
// Frozen: token_embd and output (the drafter's own or the target's), the log-SNR MLP (its two embeddings are read
// from the loaded drafter). Every other tensor is trained.
#ifndef BONSAI_TRAIN_DRAFTER_H
#define BONSAI_TRAIN_DRAFTER_H
#include <stdint.h>
#include <stddef.h>
#include "spec/dspark.h"
#include "train/adamw.h"
#include "base/rng.h"

#define BN_DTRAIN_MAX_TENSORS (8 + 11 * 64)

typedef struct {
    char name[64];  // dflash name (docs/dspark.md §3.2)
    int64_t ne0, ne1; // {n_in, n_out} (ne1 = 1 for vectors)
    int64_t off;    // offset into params / grads
    bool vec;       // a norm, bias or the confidence head: written as F32
} bn_dtrain_tensor;

// Offsets of one drafter layer's tensors.
typedef struct {
    int64_t attn_norm, attn_q, attn_k, attn_v, attn_output, q_norm, k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down;
} bn_dtrain_layer;

typedef struct {
    const bn_drafter *d;  // the drafter the weights were read from: config, frozen tensors (kept loaded)
    bn_drafter_config cfg;
    bn_dtrain_tensor t[BN_DTRAIN_MAX_TENSORS];
    int n_tensors;
    int64_t n_params;
    float *params, *grads;
    int64_t fc, hidden_norm, output_norm, markov_a, markov_b, conf_w, conf_b;
    bn_dtrain_layer *layers;
    float conf_weight;    // weight of the confidence head's binary cross-entropy in the loss (1)
} bn_dtrain;

// bn_dtrain_new: the trainable copy of a loaded drafter d (weights dequantized to fp32; the Markov head's
// markov_w2.scale folded into W2; grads zeroed). d stays borrowed (frozen tensors). Never NULL.
bn_dtrain *bn_dtrain_new(const bn_drafter *d);
void bn_dtrain_free(bn_dtrain *t);

// One tapped target sequence: tokens[0..n), taps [n][C][E] of each position (bn_forward_out.taps), and the first
// anchor: anchors p = first..n−1−B, each predicting tokens p+1..p+B from context rows 0..p−1 and the anchor tokens[p].
typedef struct {
    const int32_t *tokens;
    const float *taps;
    int n;
    int first;           // first anchor (e.g. n_prompt − 1: the predictions are the target's own tokens)
    const int *anchors;  // optional subset of anchors (NULL: every anchor from first on)
    int n_anchors;       // their count when anchors is set
    float *logits;       // optional out: the Markov logits [anchors][B][V] (tests compare them with spec/dspark.c)
} bn_dtrain_seq;

// Results of one pass.
typedef struct {
    double loss;      // mean cross-entropy per predicted token (+ conf_weight · mean confidence BCE)
    double ce;        // mean cross-entropy alone
    int64_t n_pred;   // predicted tokens (anchors × B)
    int64_t n_top1;   // of which the Markov logits' argmax (MASK skipped) equals the target's token
    int64_t n_pos[BN_DRAFTER_MAX_BLOCK]; // per block row i: predictions whose rows 0..i all matched (accepted)
} bn_dtrain_stats;

// bn_dtrain_step: forward (and, when backward, backward: grads += ∂(loss · scale)/∂params) over all anchors of seq.
// st (may be NULL) gets the sums of this sequence (loss, ce as sums over n_pred; the caller divides). Returns 0 or
// -1 with err (no anchor, shape mismatch).
int bn_dtrain_step(bn_dtrain *t, const bn_dtrain_seq *seq, bool backward, float scale, bn_dtrain_stats *st, char *err,
                   size_t errlen);

// bn_dtrain_write: writes the drafter to path atomically in convention conv (enum bn_drafter_convention): trained
// matrices as type (BN_F32, BN_F16 or a quantized type; F16 where rows are not whole blocks of it), norms, biases and
// the confidence head F32, frozen tensors copied. A dflash file takes the tokenizer.* keys of target (the target's
// GGUF; NULL: none), as the fork's converter gives it the donor's vocabulary (llama.cpp loads a drafter's vocabulary
// from the file itself). Returns 0 or -1 with err.
int bn_dtrain_write(const bn_dtrain *t, const char *path, int type, int conv, const gguf_file *target, char *err,
                    size_t errlen);

// Training position saved with a checkpoint.
typedef struct {
    int64_t step, total_steps, epoch, data_pos;
    bn_rng rng;
} bn_dtrain_pos;
// bn_dtrain_checkpoint_save: params, AdamW moments and pos to path atomically (CRC32 at the end). Returns 0 / -1.
int bn_dtrain_checkpoint_save(const bn_dtrain *t, const bn_adamw *o, const bn_dtrain_pos *pos, const char *path,
                              char *err, size_t errlen);
// bn_dtrain_checkpoint_load: reads a checkpoint of the same layout (tensor names and shapes, checked) into t's params,
// o and pos. Returns 0 or -1 with err.
int bn_dtrain_checkpoint_load(bn_dtrain *t, bn_adamw *o, bn_dtrain_pos *pos, const char *path, char *err,
                              size_t errlen);

#endif
