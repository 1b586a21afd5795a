// cuda/cuda_engine.h — the CUDA forward pass (C API, mirrors core/forward.h so callers swap backends
// 1:1). Math and order of ops: core/forward.c (docs/model.md §4 qwen35, §7 qwen3 / llama / qwen2).
// Implemented in cuda/model.cu, state.cu, forward.cu (+ ops.cu, gdn.cu, attention.cu kernels); linked from
// bonsai_cuda (nvcc, real GPU) or bonsai_cuda_emu (the CPU emulator). Programs reach it through core/engine.h;
// the CUDA library's tests include it directly.
//
// Numerics: F32/F16/BF16 weights in fp32 math; quantized weights dot int8 activations rounded with
// the CUDA Q8_1 rule (d = amax/127, q = roundf(x/d); cuda/mm.cuh), so logits differ from the CPU
// engine (ggml-cpu Q8_0 rounding) by a few 1e-2 in logprob on quantized models (see the test).
// Not thread-safe: one call at a time per state; several states may share a model.
#ifndef BONSAI_CUDA_ENGINE_H
#define BONSAI_CUDA_ENGINE_H
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/forward.h"
#include "core/model.h"

typedef struct bn_cuda_model bn_cuda_model;
typedef struct bn_cuda_state bn_cuda_state;
typedef struct bn_cuda_snapshot bn_cuda_snapshot;

// bn_cuda_model_upload: copies every weight of m to the device once (matrices in their stored type,
// norms / ssm parameters / biases as fp32). m must outlive the result. Returns the device model, or
// NULL with err filled (no device, a weight type the kernels do not handle, out of device memory).
bn_cuda_model *bn_cuda_model_upload(const bn_model *m, char *err, size_t errlen);
// bn_cuda_model_upload_from: bn_cuda_model_upload of layers [first_layer, n_layer) and the output head
// (final norm + lm_head) only; no token embedding unless first_layer is 0. The device half of the split
// CPU+CUDA engine (core/engine.h, 0 < -ngl < n_layer): its states hold caches for those layers only and
// take residual rows as input (bn_cuda_forward_hidden). Returns the device model, or NULL with err filled.
bn_cuda_model *bn_cuda_model_upload_from(const bn_model *m, int first_layer, char *err, size_t errlen);
// bn_cuda_model_free: frees the device weights (NULL is fine; free its states first).
void bn_cuda_model_free(bn_cuda_model *cm);
// bn_cuda_model_bytes: device bytes held by the uploaded weights.
size_t bn_cuda_model_bytes(const bn_cuda_model *cm);

// bn_cuda_state_new: a sequence state for up to n_ctx positions with the KV cache as kv_type (BN_F32
// or BN_F16) in device memory, its own stream and scratch. Returns it, or NULL with err filled.
bn_cuda_state *bn_cuda_state_new(bn_cuda_model *cm, int n_ctx, int kv_type, char *err, size_t errlen);
// bn_cuda_state_free: frees the state and its decode graph (NULL is fine).
void bn_cuda_state_free(bn_cuda_state *s);
// bn_cuda_state_reset: back to position 0 with zero conv windows and recurrent matrices.
void bn_cuda_state_reset(bn_cuda_state *s);
// bn_cuda_model_set_lora: uploads the LoRA adapters of set (core/adapter.h) for cm, whose states then apply them
// unmerged (cuda/lora.cu; every layer on the device, before any state of cm is made); 0 or -1 with err.
struct bn_lora_set;
int bn_cuda_model_set_lora(bn_cuda_model *cm, const struct bn_lora_set *set, char *err, size_t errlen);
// bn_cuda_state_set_lora: s's user scales of its model's n adapters (a new state starts at the set's global scales);
// 0 or -1 with err.
int bn_cuda_state_set_lora(bn_cuda_state *s, const float *scales, int n, char *err, size_t errlen);
// bn_cuda_state_pos: number of tokens consumed so far.
int bn_cuda_state_pos(const bn_cuda_state *s);
// bn_cuda_state_n_ctx: the capacity given to bn_cuda_state_new.
int bn_cuda_state_n_ctx(const bn_cuda_state *s);

// Snapshots: the recurrent state (conv windows + S of every DeltaNet layer on the device) and the position, kept
// in device memory; same validity rules as core/forward.h (the KV cache is not copied).
// bn_cuda_snapshot_new: an empty snapshot for s's model (position 0); NULL with err filled on OOM.
bn_cuda_snapshot *bn_cuda_snapshot_new(const bn_cuda_state *s, char *err, size_t errlen);
// bn_cuda_state_snapshot_into: device copy of s's recurrent state + position into snap; 0 or -1.
int bn_cuda_state_snapshot_into(const bn_cuda_state *s, bn_cuda_snapshot *snap, char *err, size_t errlen);
// bn_cuda_state_restore: puts snap's recurrent state + position back into s; 0 or -1.
int bn_cuda_state_restore(bn_cuda_state *s, const bn_cuda_snapshot *snap, char *err, size_t errlen);
// bn_cuda_snapshot_pos: the position stored in a snapshot.
int bn_cuda_snapshot_pos(const bn_cuda_snapshot *snap);
// bn_cuda_snapshot_free: frees a snapshot (NULL is fine).
void bn_cuda_snapshot_free(bn_cuda_snapshot *snap);

// bn_cuda_state_tap_buffer: the state's device tap buffer for up to rows tokens of n_taps taps
// ([rows][n_taps][n_embd] floats, allocated on first use, grown when asked for more; growing frees the
// previous one). A forward whose out->taps is this pointer, or row r of it (+ r·n_taps·n_embd), writes its
// taps there on the device (no host copy; rows r..r+n-1), for a device consumer such as
// bn_cuda_drafter_process_dev.
// Freed with the state. Returns it, or NULL with err (out of device memory).
float *bn_cuda_state_tap_buffer(bn_cuda_state *s, int n_taps, int rows, char *err, size_t errlen);
// bn_cuda_state_tap_buffer_read: copies the first n_floats of the state's device tap buffer into dst
// (host); 0, or -1 with err (more than the buffer holds, CUDA error). For tests and debugging.
int bn_cuda_state_tap_buffer_read(bn_cuda_state *s, float *dst, size_t n_floats, char *err, size_t errlen);
// bn_cuda_host_tap_bytes: bytes of taps copied between host and device so far in this process (target
// taps to host out->taps, host taps up in bn_cuda_drafter_process); device-buffer taps do not count.
size_t bn_cuda_host_tap_bytes(void);
// bn_cuda_host_logit_bytes: bytes of logits copied to the host (out->logits) so far in this process; a pass
// asking for out->argmax only copies none.
size_t bn_cuda_host_logit_bytes(void);

// bn_cuda_forward: appends n tokens at the state's position and runs the model (n > 1: batched
// prefill, recurrences token by token inside the kernels). out as in bn_forward (host buffers:
// logits, hidden, taps; taps may also be the state's device tap buffer, bn_cuda_state_tap_buffer);
// out->argmax: each output row's argmax computed on the device (bn_cu_argmax_rows; only those ints
// cross, also inside the captured passes below).
// out->snaps (host bn_snapshot) are filled by copying the device recurrent state down after every
// token (slow; for tests and CPU-side rollback). One token with logits and/or taps into the device tap
// buffer (nothing else) replays a captured CUDA graph of the step (as bn_cuda_decode_greedy does; one
// graph per tap configuration, captured again when it changes). Returns 0, or -1 with err filled
// (context overflow, bad token id, bad tap layer, more tap rows than the device tap buffer holds, a model
// uploaded from a later layer, CUDA error); on an input error the state is unchanged.
int bn_cuda_forward(bn_cuda_state *s, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen);

// bn_cuda_forward_snaps: bn_cuda_forward (out->snaps must be NULL) that also copies the recurrent
// state + position after each token t into the device snapshot snaps[t], inside one batched pass
// (n <= 64): DSpark verification restores the one after the last accepted token. Up to BN_CU_MMVQ_MAX_NB
// (8) tokens without out->hidden and with taps (if any) into the device tap buffer replay a captured graph
// per size (captured again when the tap set or all_logits changes). Returns 0 or -1.
int bn_cuda_forward_snaps(bn_cuda_state *s, const int32_t *tokens, int n, bn_forward_out *out,
                          bn_cuda_snapshot *const *snaps, char *err, size_t errlen);
// The most tokens one batched pass (bn_cuda_forward_multi / _batch) carries (more run as several passes).
#define BN_CUDA_BATCH_MAX 32
// bn_cuda_forward_multi: core/forward.h bn_forward_multi's contract on the device (the ragged pass of
// bn_engine_forward_multi): sequence i appends n_tok[i] tokens tokens[i] (distinct whole-model states of one model
// and KV type), its device snapshots snaps[i][0..n_tok[i]) (snaps or snaps[i] NULL: none) receiving the recurrent
// state after each, its outs[i] (may be NULL; no host snapshots) its rows' logits / argmax / top-k / lse / hidden and
// taps (host memory or the state's own device tap buffer). Whole sequences go in passes of up to BN_CUDA_BATCH_MAX
// tokens (and the pass's first state's batch rows): one pass through every matmul on states[0]'s stream and
// scratch, attention / conv / recurrence of each column on its own sequence's state (a column table of positions,
// runs, snapshot and per-layer pointers uploaded per pass), each sequence's conv and recurrence walking its columns
// in order. Without taps and with head outputs the device part replays a graph captured per column count (the table
// is read from device memory). A sequence longer than a pass runs alone (bn_cuda_forward_snaps / bn_cuda_forward).
// Returns 0, or -1 with err (input errors leave every state unchanged; a CUDA error stops the passes there).
int bn_cuda_forward_multi(bn_cuda_state *const *states, const int32_t *const *tokens, const int *n_tok, int n,
                          bn_forward_out *const *outs, bn_cuda_snapshot *const *const *snaps, char *err,
                          size_t errlen);
// bn_cuda_forward_batch: one decode step of n sequences, bn_cuda_forward_multi with one token each (core/forward.h
// bn_forward_batch's contract). Returns 0, or -1 with err (input errors leave every state unchanged).
int bn_cuda_forward_batch(bn_cuda_state *const *states, const int32_t *tokens, int n, bn_forward_out *const *outs,
                          char *err, size_t errlen);
// bn_cuda_forward_multi_hidden: bn_cuda_forward_multi for states of a model uploaded from layer l0 > 0: x {n_embd,
// Σ n_tok} (host) holds the residual rows entering layer l0, sequence after sequence (bn_forward_multi_front on the
// CPU layers); taps of layers >= l0 only. Returns 0, or -1 with err.
int bn_cuda_forward_multi_hidden(bn_cuda_state *const *states, const float *x, const int *n_tok, int n,
                                 bn_forward_out *const *outs, bn_cuda_snapshot *const *const *snaps, char *err,
                                 size_t errlen);
// bn_cuda_forward_hidden: for a state of a model uploaded from layer l0 > 0 (bn_cuda_model_upload_from):
// x {n_embd, n} (host; page-locked is faster) is the residual stream entering layer l0 for n tokens
// appended at the state's position; runs layers [l0, n_layer) and the head. snaps NULL: bn_cuda_forward's
// contract (taps of layers >= l0 only, other tap slots untouched; host out->snaps of this state's
// recurrent layout); device snaps: bn_cuda_forward_snaps's. Returns 0 or -1 with err filled.
int bn_cuda_forward_hidden(bn_cuda_state *s, const float *x, int n, bn_forward_out *out,
                           bn_cuda_snapshot *const *snaps, char *err, size_t errlen);
// bn_cuda_snapshot_to_host: copies a device snapshot into a host one (bn_cuda_host_snapshot_new or
// bn_snapshot_new of a CPU state of the same model); 0 or -1.
int bn_cuda_snapshot_to_host(const bn_cuda_snapshot *snap, bn_snapshot *dst, char *err, size_t errlen);

// bn_cuda_host_snapshot_new: a host snapshot (core/forward.h type, same layout as the CPU engine's)
// for out->snaps of bn_cuda_forward; free with bn_snapshot_free.
bn_snapshot *bn_cuda_host_snapshot_new(const bn_cuda_state *s);

// bn_cuda_decode_greedy: one decode step of `token` followed by the argmax of the logits on the
// device; *next = the greedy next token. The step is captured as a CUDA graph on first use (token
// and position live in device memory, the graph is replayed unchanged). Returns 0, or -1 with err
// filled (context full, bad token, CUDA error).
int bn_cuda_decode_greedy(bn_cuda_state *s, int32_t token, int32_t *next, char *err, size_t errlen);

// bn_cuda_state_graph_counts: passes of s that replayed a captured graph (*replays) and graphs captured
// (*captures) since the state was made (either pointer may be NULL): one-token steps with logits and/or
// taps into the state's device tap buffer, bn_cuda_decode_greedy, and small bn_cuda_forward_snaps passes;
// hidden rows, host snaps or host taps run launch by launch.
void bn_cuda_state_graph_counts(const bn_cuda_state *s, int64_t *replays, int64_t *captures);
// bn_cuda_state_use_graphs: on = 0 makes one-token bn_cuda_forward steps and bn_cuda_forward_snaps passes
// launch their kernels one by one (the same kernels, so the same results: for tests and timing); 1 (the
// default) replays captured graphs.
// bn_cuda_decode_greedy always replays.
void bn_cuda_state_use_graphs(bn_cuda_state *s, int on);

// bn_cuda_available: 1 if a CUDA device (or the emulator) can run the engine, else 0 with the
// reason in err ("no CUDA device").
int bn_cuda_available(char *err, size_t errlen);

// bn_cuda_mma_selftest: runs the int8 tensor-core kernels (cuda/mmq_tc.cu) and the dp4a ones on the same random
// Q1_0, Q2_0 and PQ2_0 weights (GGUF and planar layouts; 8 and 24 columns) and returns 1 when they agree (to
// 1e-4 of a column's largest |y|: only the fp32 summation order differs), 0 when not (msg says where), -1 when
// it could not run (msg says why). Changes nothing; on a GPU this proves cuda/mma.cuh's fragment layout.
int bn_cuda_mma_selftest(char *msg, size_t msglen);
// bn_cuda_mma_in_use: 1 when products of 8..32 columns of low-bit weights run on the tensor cores, 0 when on the
// dp4a kernels. The first call decides for the process: off when built with BN_CU_MMA=0, when the environment
// has BONSAI_CUDA_MMA=0, or when bn_cuda_mma_selftest does not pass (a warning on stderr then); model and drafter
// uploads call it, so the decision precedes every captured graph.
int bn_cuda_mma_in_use(void);
// bn_cuda_mma_status: that decision in words: "on", or "off (<why>)" (decides first, like bn_cuda_mma_in_use).
const char *bn_cuda_mma_status(void);
// bn_cuda_mma16_selftest: runs one fp16 mma.sync m16n8k16 (random 16×16 · 16×8 + C, fragments loaded by
// cuda/mma.cuh's formulas) and returns 1 when it matches a double loop (to 1e-4), 0 when not (msg says where), -1
// when it could not run. On a GPU this proves the fp16 fragment layout that attn_mma_kernel uses.
int bn_cuda_mma16_selftest(char *msg, size_t msglen);
// bn_cuda_attn_mma_ok: bn_cuda_mma16_selftest's verdict, taken once per process (a warning on stderr when it fails);
// a state asked for BONSAI_CUDA_ATTN_TILED=mma uses the tiled CUDA-core kernel instead when it is 0.
int bn_cuda_attn_mma_ok(void);
// bn_cuda_pdl_in_use: 1 when kernels are launched with programmatic dependent launch (env BONSAI_CUDA_PDL=1, read
// at the first launch: each kernel may start while the one before it ends, and waits in its first statement).
int bn_cuda_pdl_in_use(void);
// bn_cuda_switches: the kernel choices a state created now gets, in words, into buf (returned): the int8 tensor
// cores' decision, programmatic dependent launch, and the opt-in environment switches (BONSAI_CUDA_FUSE,
// BONSAI_CUDA_GDN_NORM, BONSAI_CUDA_ATTN_TILED, BONSAI_CUDA_MMQ_PREFILL); for logs and benchmarks.
const char *bn_cuda_switches(char *buf, size_t len);

struct bn_engine;
// bn_cuda_engine_new: the CUDA engine (uploads m's weights); NULL with err filled (cuda/engine.cu).
struct bn_engine *bn_cuda_engine_new(const bn_model *m, char *err, size_t errlen);
// bn_cuda_split_engine_new: the CPU+CUDA engine for 0 < n_gpu_layers < n_layer (uploads the last n_gpu_layers layers and
// the head; the CPU half runs with n_threads); NULL with err filled (cuda/engine_split.cu).
struct bn_engine *bn_cuda_split_engine_new(const bn_model *m, int n_gpu_layers, int n_threads, char *err,
                                           size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
