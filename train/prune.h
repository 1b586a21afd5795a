// train/prune.h — post-hoc flip pruning of a requantized head-only antidoom model: the model differs
// from its quantized base only in blocks of output.weight (flipped signs / changed scales of the rows of some
// tokens). Greedily (lazy evaluation: only the leading candidate is re-scored) revert single blocks to the base's
// bytes while that lowers a plain-text objective (KL(p_base ‖ p_model), or the next-token loss) more than μ × the
// mean train-pair margin it costs, and never let the train-pair chosen_win fall below a bound.
// Only the LM head changes, so the body's final hidden states are computed once (base model) and every revert is
// exact: it moves one logit per position by δ_t = (w_base − w_model)·h_t over the block's 128 inputs.
// Logits are computed as the engine does: h quantized to the head's activation type (ggml-CPU Q8_0 rounding),
// dequantized, times the dequantized head (summation order differs from the engine's kernel, ~1e-6 relative).
#ifndef BONSAI_TRAIN_PRUNE_H
#define BONSAI_TRAIN_PRUNE_H
#include <stdint.h>
#include <stddef.h>
#include "train/pairs_in.h"

enum { BN_PRUNE_KL = 0, BN_PRUNE_NLL = 1 };

typedef struct {
    double cw_drop;       // train-pair chosen_win may fall at most this far below the model's own (0: not at all)
    double mu;            // KL nats one unit of mean train-row margin (logits) is worth; 0 = only the cw bound
    int objective;        // BN_PRUNE_KL: KL(p_base ‖ p_model) on the text; BN_PRUNE_NLL: next-token loss on it
    int text_ctx;         // tokens per text window (state reset between windows), 128
    int64_t max_text;     // text tokens used (<= 0: all)
    int n_threads;        // forward threads
} bn_prune_cfg;

typedef struct {
    int n_blocks;                      // blocks of output.weight
    int n_changed, n_reverted;         // blocks that differ from the base; of those reverted
    int n_rows_changed, n_rows_after;  // head rows (tokens) with any changed block, before / after
    int64_t n_text;                    // text positions scored
    double kl_before, kl_after;        // mean KL(p_base ‖ p_model) over the text positions, nats
    double nll_base, nll_before, nll_after; // mean next-token loss on the text (positions with a next token in
                                            // their window) of the base, the model before and after, nats
    double cw_before, cw_after;        // train-pair chosen_win (mean over rows of the fraction z_c > z_r)
    double margin_before, margin_after; // mean over rows of mean_c (z_c − z_r)
} bn_prune_stats;

// bn_prune_cfg_default: cw_drop 0, mu 0.01, objective KL, ctx 128, all text, default threads.
bn_prune_cfg bn_prune_cfg_default(void);

// bn_prune_flips: writes model_path with the pruned output.weight to out_path (atomically; every other byte of
// model_path kept). base_path and model_path must have the same tensors, byte-identical except output.weight
// (Q1_0 or another block type, untied); rows are the TRAIN pairs (held-out rows are an error), text the plain-text
// tokens (windows of text_ctx; the NLL objective scores each position with a next token in its window).
// Deterministic. Returns 0 or -1 (err).
int bn_prune_flips(const char *base_path, const char *model_path, const bn_train_rows *rows, const int32_t *text,
                   int64_t n_text, const bn_prune_cfg *cfg, const char *out_path, bn_prune_stats *st, char *err,
                   size_t errlen);

#endif
