// core/forward.h — CPU inference: per-sequence state (KV cache, GDN conv window + recurrent
// matrix, scratch) and the forward pass over a batch of tokens appended at the state's position.
// Math: docs/model.md §4 (qwen35), §7 (qwen3 / llama / qwen2).
// Numerics: F32-weight models match a float64 reference to ~1e-5 on the logits. Quantized weights
// are dotted with Q8_0/Q8_K-rounded activations like ggml (decode: bn_vec_dot_rows; prefill:
// bn_vec_dot_rows_batch, which may sum in another fp32 order, so a prefill and a token-by-token
// run can differ in the last bits). Decode results do not depend on the thread count.
#ifndef BONSAI_FORWARD_H
#define BONSAI_FORWARD_H
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include "core/model.h"

// Per sequence: KV cache for attention layers (fp32 or fp16, k after norm + RoPE, and v), conv
// window and recurrent matrix S for DeltaNet layers, scratch buffers and a thread pool. One
// anonymous mapping (plus the pool; KV pages are committed only as positions are used). Not thread-safe: one bn_forward at a time per state; several states may
// share a model.
typedef struct bn_state bn_state;

// bn_state_new: state for up to n_ctx positions using n_threads threads (<= 0: all CPUs).
// Returns the state (dies on OOM).
bn_state *bn_state_new(const bn_model *m, int n_ctx, int n_threads);
// bn_state_new_kv: like bn_state_new with the KV cache stored as kv_type: BN_F32 (default, exact)
// or BN_F16 (half the memory and attention bandwidth, like llama.cpp's default; logits move by
// ~1e-3 relative). Returns the state (dies on OOM).
bn_state *bn_state_new_kv(const bn_model *m, int n_ctx, int n_threads, int kv_type);
// bn_state_new_front: like bn_state_new_kv for the first n_layers layers only (KV cache and recurrent
// state of those; snapshots cover them only): the CPU half of a split CPU+GPU engine (core/engine.h),
// run with bn_forward_front. n_layers outside 0..n_layer means all. Returns the state (dies on OOM).
bn_state *bn_state_new_front(const bn_model *m, int n_ctx, int n_threads, int kv_type, int n_layers);
// bn_state_free: frees the state (NULL is fine).
void bn_state_free(bn_state *s);
// bn_state_reset: back to position 0 with zero conv windows and recurrent matrices.
void bn_state_reset(bn_state *s);
// bn_state_pos: number of tokens consumed so far (= position of the next token).
int bn_state_pos(const bn_state *s);
// bn_state_n_ctx: the capacity given to bn_state_new.
int bn_state_n_ctx(const bn_state *s);
// bn_state_set_lora: the LoRA adapters the forward of s applies (core/adapter.h; set NULL or empty: none), each at
// the set's global user scale (bn_state_set_lora_scales changes them for this sequence). set must outlive s's use.
struct bn_lora_set;
void bn_state_set_lora(bn_state *s, const struct bn_lora_set *set);
// bn_state_set_lora_scales: this sequence's user scales of the adapters of its set (n = the set's count; 0 turns an
// adapter off); 0, or -1 when n does not match.
int bn_state_set_lora_scales(bn_state *s, const float *scales, int n);

// A snapshot: the recurrent state (conv windows + S of every DeltaNet layer) and the position.
// The KV cache is NOT copied: restoring sets the position back and the KV rows beyond it are
// dropped (overwritten by later tokens). So a snapshot taken at position p is valid as long as
// the state's KV rows [0, p) have not been rewritten since (i.e. the state was only appended to,
// or restored to a snapshot at a position >= p). Speculative decoding: snapshot before the
// draft, restore + re-run the accepted tokens (or snapshot after each verified token).
typedef struct bn_snapshot bn_snapshot;
// bn_state_snapshot: copy of the recurrent state and position (dies on OOM).
bn_snapshot *bn_state_snapshot(const bn_state *s);
// bn_snapshot_new: an allocated snapshot for s's model (position 0, zero state), to be filled by
// bn_state_snapshot_into or bn_forward_out.snaps (reuse avoids allocating per step).
bn_snapshot *bn_snapshot_new(const bn_state *s);
// bn_state_snapshot_into: copies s's recurrent state and position into snap (from bn_snapshot_new
// or bn_state_snapshot of a state of the same model).
void bn_state_snapshot_into(const bn_state *s, bn_snapshot *snap);
// bn_state_restore: puts the snapshot's recurrent state and position back into s.
void bn_state_restore(bn_state *s, const bn_snapshot *snap);
// bn_snapshot_pos: the position stored in a snapshot.
int bn_snapshot_pos(const bn_snapshot *snap);
// bn_snapshot_free: frees a snapshot (NULL is fine).
void bn_snapshot_free(bn_snapshot *snap);

// What bn_forward writes. Every pointer is optional (NULL = not wanted); the caller owns memory.
typedef struct {
    float *logits;         // [n_out][n_vocab], n_out = all_logits ? n : 1 (the last token)
    int32_t *argmax;       // [n_out]: each output row's argmax (ties -> lowest id); the engine computes the
                           // logits for it even when `logits` is NULL (then they stay inside the engine:
                           // the CUDA engines copy only these n_out ints to the host)
    int topk;              // 0 or 1..BN_FORWARD_TOPK_MAX (<= n_vocab): each output row's topk largest logits
    int32_t *topk_ids;     // [n_out][topk]: their ids, descending logit, ties -> lower id (bn_logits_topk_values)
    float *topk_logits;    // [n_out][topk]: those logits (like argmax, the CUDA engines copy only these rows)
    float *lse;            // [n_out]: ln Σ_v exp(logit_v) of each output row (raw log-prob of v = logit_v − lse;
                           // with topk, the raw top-k log-probs without the row)
    bool all_logits;       // also selects n_out for `hidden`, `argmax` and `topk`
    const int *tap_layers; // [n_taps] layer indices (0-based)
    int n_taps;
    float *taps;           // [n][n_taps][n_embd]: residual stream AFTER each tap layer (every token)
    float *hidden;         // [n_out][n_embd]: final-normed hidden state (input of the LM head)
    bn_snapshot **snaps;   // [n] snapshots (bn_snapshot_new) receiving the recurrent state and
                           // position after each token: speculative verification restores the
                           // one after the last accepted token instead of re-running it
} bn_forward_out;

// The most values bn_forward_out.topk may ask for (the CUDA top-k kernel's limit).
#define BN_FORWARD_TOPK_MAX 64

// bn_forward_wants_head: whether out asks for anything the LM head computes (logits, argmax, top-k or lse).
static inline bool bn_forward_wants_head(const bn_forward_out *out) {
    return out && (out->logits || out->argmax || out->topk > 0 || out->lse);
}

// bn_logits_argmax: the index of the largest of l[0..n) (the first on ties; n >= 1), the rule of
// bn_forward_out.argmax and of greedy sampling.
int32_t bn_logits_argmax(const float *l, int n);
// bn_logits_lse: ln Σ exp(l[0..n)) (n >= 1; shifted by the max, summed in double): bn_forward_out.lse.
float bn_logits_lse(const float *l, int n);

// bn_forward_check: bn_forward's input checks for a state at position pos with capacity n_ctx and
// n_recurrent floats of recurrent state (token count, context overflow, token ids, tap layers,
// snapshot sizes); returns 0 or -1 with err filled. Shared by the CPU and CUDA engines. tokens may be
// NULL (hidden-row input: no id checks).
int bn_forward_check(const bn_config *c, int pos, int n_ctx, size_t n_recurrent, const int32_t *tokens, int n,
                     const bn_forward_out *out, char *err, size_t errlen);

// bn_forward: appends n tokens at the state's position and runs the model over them (n > 1 is a
// batched prefill: matmuls over all tokens at once; recurrences token by token). Returns 0, or -1
// with err filled (context overflow, bad token id, bad tap layer, a bn_state_new_front state of fewer
// layers); on error the state is unchanged.
int bn_forward(const bn_model *m, bn_state *s, const int32_t *tokens, int n, bn_forward_out *out,
               char *err, size_t errlen);

// bn_forward_multi: one pass over n sequences with several tokens each (a ragged batch: the speculative verification
// of some sequences joined with the decode steps of others): sequence i appends n_tok[i] >= 1 tokens tokens[i] at its
// own position (n distinct whole-model states of m with one KV type; Σ n_tok <= the first state's batch rows, and
// each sequence's last position < its own and the first state's n_ctx). The matmuls run over all Σ n_tok columns
// (each weight read once), attention and recurrences per sequence on its own caches, token by token; the first
// state's threads and scratch run it. outs[i] (outs NULL, or outs[i] NULL: nothing) takes what bn_forward's out
// takes for sequence i alone: logits, argmax, lse, top-k and hidden of its last row (every row with all_logits),
// taps and snaps of every row. Each sequence's results equal bn_forward of its tokens alone up to the summation order
// of the many-column kernels (~1e-5 in the tests). Returns 0, or -1 with err and every state unchanged.
int bn_forward_multi(const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens, const int *n_tok, int n,
                     bn_forward_out *const *outs, char *err, size_t errlen);

// bn_forward_batch: one decode step of n sequences at once, bn_forward_multi with one token each: token tokens[t]
// appended to seqs[t] at its own position, outs[t] receiving its single row (a one-token bn_forward of that sequence
// up to the summation order, as a prefill vs decode: ~1e-5 in the tests). Returns 0, or -1 with err and every state
// unchanged.
int bn_forward_batch(const bn_model *m, bn_state *const *seqs, const int32_t *tokens, int n,
                     bn_forward_out *const *outs, char *err, size_t errlen);

// bn_forward_front: bn_forward over the state's layers only (a bn_state_new_front state): token
// embedding and layers [0, n_layers) for n tokens at the state's position, then the residual stream
// after the last of them into x_out {n_embd, n} (the input of layer n_layers on another backend).
// out (optional): taps of layers < n_layers (other tap slots untouched) and snaps (bn_snapshot_new
// of this state); logits, argmax and hidden must be NULL. Returns 0, or -1 with err filled (as bn_forward;
// the state is unchanged on error).
int bn_forward_front(const bn_model *m, bn_state *s, const int32_t *tokens, int n, float *x_out,
                     const bn_forward_out *out, char *err, size_t errlen);

// bn_forward_multi_front: bn_forward_multi over front states (bn_state_new_front, all holding the first one's layers):
// sequence i's tokens embedded and run through its layers at its positions, then the Σ n_tok residual rows into
// x_out {n_embd, Σ n_tok} (sequence after sequence), the input of the next layer on another backend (the CPU+CUDA
// engine's ragged pass). outs[i] (NULL: none) takes taps of layers < n_layers (other tap slots untouched) and snaps of
// the front state; no head outputs. Returns 0, or -1 with err and every state unchanged.
int bn_forward_multi_front(const bn_model *m, bn_state *const *seqs, const int32_t *const *tokens, const int *n_tok,
                           int n, float *x_out, bn_forward_out *const *outs, char *err, size_t errlen);

#endif
