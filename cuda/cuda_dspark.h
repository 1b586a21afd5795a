// cuda/cuda_dspark.h — the DSpark drafter on the CUDA device (C API; implemented in cuda/dspark*.cu,
// linked from bonsai_cuda or bonsai_cuda_emu). Same math and order of ops as spec/dspark.c (the
// reference, docs/dspark.md §4): encoder g = RMSNorm(fc·taps; hidden_norm), K/V injection into every
// layer's device KV cache, the non-causal block pass over [id_last, MASK × (n−1)] with the log-SNR
// embedding (computed once at load by spec/dspark_load.c), output norm + LM head, then the Markov chain
// (prev on the device, argmax skipping MASK, ties → lowest id) and the confidence head; a draft
// returns only n int32 ids and n confidences to the host.
// Numerics: quantized weights use int8 (Q8_1) activations on the mmvq path (rows <= 8) and fp16
// GEMMs above (cuda/mm.cuh), so values differ from the CPU drafter by the same few 1e-2 as the target.
// Not thread-safe: one call at a time per state.
#ifndef BONSAI_CUDA_DSPARK_H
#define BONSAI_CUDA_DSPARK_H
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "spec/dspark.h"

typedef struct bn_cuda_drafter bn_cuda_drafter;

// bn_cuda_drafter_register: makes this device drafter bn_spec's drafter for targets on engines with ops
// table engine_ops (cuda/engine.cu; bn_dev_drafter_register). device_taps: the target state's forward
// writes its taps into its device tap buffer (the CUDA engine); false: taps come through host memory (the
// CPU+CUDA engine, whose first layers run on the CPU).
void bn_cuda_drafter_register(const bn_engine_ops *engine_ops, bool device_taps);
typedef struct bn_cuda_dstate bn_cuda_dstate;

// bn_cuda_drafter_upload: copies d's weights to the device (matrices in their stored type, repacked
// like the target's; norms and the confidence head as fp32). d must outlive the result. Returns it,
// or NULL with err filled (no device, a type the kernels do not handle, out of device memory).
bn_cuda_drafter *bn_cuda_drafter_upload(const bn_drafter *d, char *err, size_t errlen);
// bn_cuda_drafter_free: frees the device weights (NULL is fine; free its states first).
void bn_cuda_drafter_free(bn_cuda_drafter *cd);
// bn_cuda_drafter_bytes: device bytes held by the uploaded weights.
size_t bn_cuda_drafter_bytes(const bn_cuda_drafter *cd);

// bn_cuda_dstate_new: a device drafter state for n_ctx target positions (+ the block rows): the KV
// cache of every layer and the scratch in one device allocation, its own stream. NULL with err.
bn_cuda_dstate *bn_cuda_dstate_new(bn_cuda_drafter *cd, int n_ctx, char *err, size_t errlen);
// bn_cuda_dstate_free: frees the state (NULL is fine).
void bn_cuda_dstate_free(bn_cuda_dstate *s);
// bn_cuda_dstate_n_cache: context rows in the device KV cache.
int bn_cuda_dstate_n_cache(const bn_cuda_dstate *s);
// bn_cuda_dstate_truncate: drops context rows at positions >= n (KV truncation); returns the new count.
int bn_cuda_dstate_truncate(bn_cuda_dstate *s, int n);

// bn_cuda_drafter_encode: g [n][E] (host) = the encoder of n host tap rows [n][C][E] (for tests;
// n <= 64). Returns 0 or -1 with err.
int bn_cuda_drafter_encode(bn_cuda_dstate *s, const float *taps, int n, float *g, char *err, size_t errlen);
// bn_cuda_drafter_process: bn_drafter_process's contract on the device; taps [n][C][E] in host
// memory (copied up in chunks of 64 rows). Returns 0 or -1 with err.
int bn_cuda_drafter_process(bn_cuda_dstate *s, const float *taps, int n, int pos0, char *err, size_t errlen);
// bn_cuda_drafter_process_dev: the same with the taps [n][C][E] in device memory (e.g. the target's
// bn_cuda_state_tap_buffer after a forward that wrote its taps there): read in place, nothing crosses
// PCIe. Returns 0 or -1 with err.
int bn_cuda_drafter_process_dev(bn_cuda_dstate *s, const float *dev_taps, int n, int pos0, char *err, size_t errlen);
// bn_cuda_drafter_process_start: bn_cuda_drafter_process (on_device false) or _process_dev (true) that returns once the
// work is enqueued on s's stream (the rows count as present at once: a draft after it reads them in stream order);
// the taps must stay as they are until bn_cuda_drafter_draft_finish (which waits for the stream). Returns 0 or -1.
int bn_cuda_drafter_process_start(bn_cuda_dstate *s, const float *taps, bool on_device, int n, int pos0, char *err,
                                  size_t errlen);
// bn_cuda_drafter_block: bn_drafter_block's contract on the device, h [n_rows][E] and base
// [n_rows][V] copied to the host when not NULL (for tests). Returns 0 or -1 with err.
int bn_cuda_drafter_block(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_rows, float *h, float *base,
                          char *err, size_t errlen);
// bn_cuda_drafter_draft: bn_drafter_draft on the device (block pass + Markov chain + confidence
// head); conf (may be NULL) gets c_i of the returned drafts. Returns the count (>= 0) or -1 with err.
int bn_cuda_drafter_draft(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_max, float p_min, int32_t *drafts,
                          float *conf, char *err, size_t errlen);
// bn_cuda_drafter_draft_start / _finish: bn_cuda_drafter_draft in two halves, so that the drafts of several states run
// at once, each on its own stream. start enqueues the block pass, the chain and their copies to the host and returns
// the rows it drafts (n_max clamped to B; 0: nothing to draft, nothing enqueued) or -1 with err; finish(s, that
// count, ...) waits for s's stream (also with a count of 0) and returns bn_cuda_drafter_draft's count or -1 with err.
// Nothing else may use s between.
int bn_cuda_drafter_draft_start(bn_cuda_dstate *s, int32_t id_last, int n_past, int n_max, char *err, size_t errlen);
int bn_cuda_drafter_draft_finish(bn_cuda_dstate *s, int n_max, float p_min, int32_t *drafts, float *conf, char *err,
                                 size_t errlen);
// bn_cuda_drafter_draft_multi: bn_cuda_drafter_draft for n states of one uploaded drafter (distinct; n <= 64) at once:
// their block rows go through one pass on the drafter's batch workspace (up to 64 rows and 8 states per pass, each
// weight read once per 32 rows instead of once per state; RoPE, cache append and block attention per state on its
// own cache) and their Markov chains step together (one W2 product per step). The pass waits for the work queued on
// each state's stream (bn_cuda_drafter_process_start) and is replayed from a graph per (states, row counts), 32 of
// them kept. With one state drafting, with BONSAI_CUDA_DRAFT_BATCH=0, or when the workspace cannot be had (device
// memory), each state drafts with its own graph instead, all started before any is waited for: the same drafts. Per state: drafts[i] (room for
// n_max[i]) and counts[i] as bn_cuda_drafter_draft's. Not thread-safe per drafter (the batch workspace is shared by
// its states). Returns 0 or -1 with err.
int bn_cuda_drafter_draft_multi(bn_cuda_dstate *const *ss, const int32_t *id_last, const int *n_past, const int *n_max,
                                int n, float p_min, int32_t *const *drafts, int *counts, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
