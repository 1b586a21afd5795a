// core/engine.h — one interface over the forward backends so tools pick one at run time with
// llama.cpp's -ngl: the CPU engine (core/forward.h) or the CUDA engine (cuda/cuda_engine.h, linked
// only into binaries built with cuda_dep / cuda_emu_dep, which define BONSAI_CUDA=1).
// -ngl N (llama.cpp's meaning; the default is 0, as llama.cpp's CPU builds), model of n_layer layers:
//   N = 0             the CPU engine: everything on the CPU.
//   N >= n_layer      the CUDA engine: everything on the GPU (token embedding, every layer, head).
//   0 < N < n_layer   the CPU+CUDA engine (partial offload, cuda/engine_split.cu): token embedding and
//                     layers [0, n_layer − N) on the CPU, layers [n_layer − N, n_layer) and the output
//                     head (final norm + lm_head) on the GPU, which holds only those weights; the
//                     residual rows {n_embd, n_tokens} cross once per forward. Difference from
//                     llama.cpp: there the head goes to the GPU only with N > n_layer (N == n_layer
//                     leaves it on the CPU); here it is on the GPU for every N > 0.
// The CUDA and CPU+CUDA engines keep their KV cache in fp16 (llama.cpp's default), the CPU engine in
// fp32.
#ifndef BONSAI_ENGINE_H
#define BONSAI_ENGINE_H
#include <stdint.h>
#include <stddef.h>
#include "core/forward.h"
#include "core/model.h"
#include "base/util.h"
#include "base/args.h"
#include "core/adapter.h"

// A backend's functions; impl is the backend's model object (e.g. bn_cuda_model), st its state.
typedef struct bn_engine_ops {
    const char *name; // "CPU" | "CUDA" | "CPU+CUDA" (llama-bench's backend column)
    void *(*state_new)(void *impl, int n_ctx, char *err, size_t errlen);
    void (*state_free)(void *st);
    void (*state_reset)(void *st);
    int (*state_pos)(const void *st);
    int (*forward)(void *st, const int32_t *tokens, int n, bn_forward_out *out, char *err, size_t errlen);
    void (*impl_free)(void *impl);
    int (*state_n_ctx)(const void *st);
    void *(*snapshot_new)(const void *st, char *err, size_t errlen);
    int (*snapshot_into)(const void *st, void *snap, char *err, size_t errlen);
    int (*restore)(void *st, const void *snap, char *err, size_t errlen);
    void (*snapshot_free)(void *snap);
    // forward + the state after each token t into snaps[t] (the backend's snapshot objects)
    int (*forward_snaps)(void *st, const int32_t *tokens, int n, bn_forward_out *out, void *const *snaps, char *err,
                         size_t errlen);
    // n_tok[i] tokens for each of n states in one pass (a decode step: one each), snaps[i] (NULL or [n_tok[i]]
    // backend snapshots) after each
    int (*forward_multi)(void *const *sts, const int32_t *const *tokens, const int *n_tok, int n,
                         bn_forward_out *const *outs, void *const *const *snaps, char *err, size_t errlen);
    // the state's user scales of the engine's adapters ([n], n = their count); NULL: the backend applies none
    int (*set_lora_scales)(void *st, const float *scales, int n, char *err, size_t errlen);
    // a device backend: takes the adapters of set (before any state is made; the engine keeps set); NULL: none
    int (*attach_lora)(void *impl, const bn_lora_set *set, char *err, size_t errlen);
} bn_engine_ops;

typedef struct bn_engine {
    const bn_engine_ops *ops;
    void *impl;
    const bn_model *m;
    int n_threads;    // CPU threads (CPU and CPU+CUDA engines)
    int n_gpu_layers; // the -ngl value it was opened with
    bn_lora_set *lora; // the LoRA adapters every state applies (owned; NULL: none), at their global scales
} bn_engine;

// A sequence state of some engine, and a snapshot of one (recurrent state + position; the rules of
// core/forward.h: the KV cache is not copied).
typedef struct bn_engine_state {
    const bn_engine *e;
    void *st;
} bn_engine_state;
typedef struct bn_engine_snapshot {
    const bn_engine *e;
    void *snap;
} bn_engine_snapshot;

// bn_engine_new: wraps a backend (used by the backends' constructors); returns it (dies on OOM).
bn_engine *bn_engine_new(const bn_engine_ops *ops, void *impl, const bn_model *m);
// bn_engine_cpu_new: the CPU engine over m with n_threads threads (<= 0: all CPUs); returns it.
bn_engine *bn_engine_cpu_new(const bn_model *m, int n_threads);
// bn_engine_free: frees the engine and its backend model (NULL is fine; free its states first).
void bn_engine_free(bn_engine *e);
// bn_engine_name: "CPU", "CUDA" or "CPU+CUDA".
const char *bn_engine_name(const bn_engine *e);

// bn_engine_state_new: a state for n_ctx positions; NULL with err filled on failure.
bn_engine_state *bn_engine_state_new(const bn_engine *e, int n_ctx, char *err, size_t errlen);
// bn_engine_state_free: frees the state (NULL is fine).
void bn_engine_state_free(bn_engine_state *s);
// bn_engine_state_reset: back to position 0.
void bn_engine_state_reset(bn_engine_state *s);
// bn_engine_state_pos: tokens consumed so far.
int bn_engine_state_pos(const bn_engine_state *s);
// bn_engine_state_n_ctx: the state's capacity.
int bn_engine_state_n_ctx(const bn_engine_state *s);
// bn_engine_state_cpu: the CPU engine's bn_state behind s (for CPU-only code, e.g. sharing its thread pool), or NULL
// for another backend.
bn_state *bn_engine_state_cpu(bn_engine_state *s);
// bn_engine_forward: bn_forward's contract on the engine's backend; 0 or -1 with err filled.
int bn_engine_forward(bn_engine_state *s, const int32_t *tokens, int n, bn_forward_out *out, char *err,
                      size_t errlen);
// bn_engine_forward_batch: one decode step of n sequences, bn_engine_forward_multi with one token each: tokens[t]
// appended to states[t] (distinct states of one engine; outs NULL or outs[t] NULL: no output). Returns 0 or -1 with
// err filled.
int bn_engine_forward_batch(bn_engine_state *const *states, const int32_t *tokens, int n, bn_forward_out *const *outs,
                            char *err, size_t errlen);
// A sequence's part of a ragged engine pass (bn_engine_forward_multi).
typedef struct {
    bn_engine_state *state;
    const int32_t *tokens;             // [n]
    int n;                             // >= 1 (<= BN_ENGINE_MAX_SNAPS with snaps)
    bn_forward_out *out;               // NULL: nothing wanted; out->snaps must be NULL
    bn_engine_snapshot *const *snaps;  // NULL, or [n]: the state after each token (bn_engine_forward_snaps)
} bn_engine_seq;
// bn_engine_forward_multi: one pass of n sequences with several tokens each (distinct states of one engine): what
// bn_engine_forward_snaps (or bn_engine_forward without snaps) does for each alone, batched: every weight read once
// for as many tokens as a pass holds (CPU: bn_forward_multi, a state's batch rows; CUDA: bn_cuda_forward_multi, up to
// BN_CUDA_BATCH_MAX; CPU+CUDA: each half batched, the CPU layers' rows handed over in one copy). A sequence longer
// than a pass runs alone, and so does a single sequence (bn_engine_forward_snaps / bn_engine_forward: on CUDA the
// captured one-token step and verify graphs). When it takes several passes, an error stops it there (the sequences before have
// advanced). Returns 0 or -1 with err filled.
int bn_engine_forward_multi(const bn_engine_seq *seqs, int n, char *err, size_t errlen);
// bn_engine_pass_end: the backends' grouping of a ragged pass into passes of whole sequences: the end of the run of
// sequences i0.. whose token counts n_tok sum to at most cap (a pass's capacity), or i0 when sequence i0 alone is
// longer (it then runs by itself). Sequences [i0, return) form the next pass.
static inline int bn_engine_pass_end(const int *n_tok, int n, int i0, int cap) {
    int i1 = i0, rows = 0;
    while (i1 < n && rows + n_tok[i1] <= cap) rows += n_tok[i1++];
    return i1;
}
// bn_engine_forward_snaps: bn_engine_forward (out->snaps must be NULL) that also stores the recurrent
// state + position after each token t in snaps[t] (from bn_engine_snapshot_new of s's engine), in one
// batched pass of n <= BN_ENGINE_MAX_SNAPS tokens: the CPU fills them through bn_forward_out.snaps,
// CUDA keeps them in device memory (bn_cuda_forward_snaps; no host copies), CPU+CUDA both (host for
// the CPU layers, device for the rest). Speculative
// verification restores the one after the last accepted token. Returns 0 or -1 with err filled.
#define BN_ENGINE_MAX_SNAPS 64
int bn_engine_forward_snaps(bn_engine_state *s, const int32_t *tokens, int n, bn_forward_out *out,
                            bn_engine_snapshot *const *snaps, char *err, size_t errlen);
// bn_engine_snapshot_new: an empty snapshot for s's model; NULL with err filled on failure.
bn_engine_snapshot *bn_engine_snapshot_new(const bn_engine_state *s, char *err, size_t errlen);
// bn_engine_snapshot_into: copies s's recurrent state + position into snap; 0 or -1.
int bn_engine_snapshot_into(const bn_engine_state *s, bn_engine_snapshot *snap, char *err, size_t errlen);
// bn_engine_restore: puts snap back into s; 0 or -1.
int bn_engine_restore(bn_engine_state *s, const bn_engine_snapshot *snap, char *err, size_t errlen);
// bn_engine_snapshot_free: frees a snapshot (NULL is fine).
void bn_engine_snapshot_free(bn_engine_snapshot *snap);

// A device backend: the CUDA library registers one at start-up when it is linked into the program (cuda/engine.cu,
// a constructor); a program without it has none and -ngl > 0 runs on the CPU with a warning.
typedef struct bn_engine_device {
    const char *name; // "CUDA"
    // device_count: how many devices the backend can use now (0: none; bn_engine_open then runs on the CPU)
    int (*device_count)(void);
    // full_new: the engine with every layer and the head on the device; NULL with err filled (e.g. no device)
    bn_engine *(*full_new)(const bn_model *m, char *err, size_t errlen);
    // split_new: the CPU+CUDA engine, the last n_gpu_layers layers + head on the device; NULL with err filled
    bn_engine *(*split_new)(const bn_model *m, int n_gpu_layers, int n_threads, char *err, size_t errlen);
    // describe: a one-line account of the device and the kernels it runs into buf; returns buf
    const char *(*describe)(char *buf, size_t n);
} bn_engine_device;
// bn_engine_device_register: makes d the device backend of bn_engine_open (the last registration wins).
void bn_engine_device_register(const bn_engine_device *d);
// bn_engine_device_get: the registered device backend, or NULL when the program has none.
const bn_engine_device *bn_engine_device_get(void);

// The model and engine options of the tools that run a model (base/args.h): -m/--model, -t/--threads,
// -c/--ctx-size and -ngl/--n-gpu-layers, llama.cpp's spellings, read into a bn_engine_opts by bn_engine_args.
typedef struct {
    const char *model; // -m: the GGUF
    int n_threads;     // -t: CPU threads (0: all CPUs)
    int n_ctx;         // -c: context in tokens (the tool says what 0 means)
    int n_gpu_layers;  // -ngl: bn_engine_open's n_gpu_layers
    const char *lora[BN_LORA_MAX]; // --lora FNAME / --lora-scaled FNAME SCALE (repeatable): adapters applied unmerged
    float lora_scale[BN_LORA_MAX]; // their user scales (--lora: 1)
    int n_lora;
    bool f32_act; // --f32-activations: bn_matmul_set_f32_activations (CPU engine only)
} bn_engine_opts;
extern const bn_arg bn_engine_args[];
// bn_lora_args: --lora and --lora-scaled alone, into a bn_engine_opts (for a tool with its own model options).
extern const bn_arg bn_lora_args[];

// bn_engine_open: the engine for -ngl n_gpu_layers (see the top of this file: 0 CPU with n_threads (<= 0: all CPUs),
// >= n_layer the device, in between CPU+device). Without a device backend or a device, -ngl > 0 warns once on stderr
// and opens the CPU engine (llama.cpp's habit); a device that cannot take the model (upload errors) is an error.
// Returns the engine, or NULL with err filled.
bn_engine *bn_engine_open(const bn_model *m, int n_gpu_layers, int n_threads, char *err, size_t errlen);
// bn_engine_open_lora: bn_engine_open whose states apply the adapters of lora (core/adapter.h; ownership passes to
// the engine, also on failure; NULL: none). The CPU and the CUDA engine apply them; the CPU+CUDA split refuses them.
// Returns the engine, or NULL with err filled.
bn_engine *bn_engine_open_lora(const bn_model *m, int n_gpu_layers, int n_threads, bn_lora_set *lora, char *err,
                               size_t errlen);
// bn_engine_open_opts: the engine of a tool's engine options o over m (-ngl, -t, and the --lora / --lora-scaled
// adapters loaded and checked against m); returns it, or NULL with err naming the file and the problem.
bn_engine *bn_engine_open_opts(const bn_model *m, const bn_engine_opts *o, char *err, size_t errlen);
// bn_engine_opts_f32_activations: turns on the matmul reference path (core/matmul.h) when o asks for
// --f32-activations; call it before any state is made. 0, or -1 with err when o also asks for the GPU.
int bn_engine_opts_f32_activations(const bn_engine_opts *o, char *err, size_t errlen);
// bn_engine_lora: the engine's adapters (NULL: none); their global scales are bn_lora_set_scales of it.
bn_lora_set *bn_engine_lora(const bn_engine *e);
// bn_engine_state_set_lora: state s's user scales of the engine's adapters (n = bn_lora_set_count of them; a new
// state starts at the global scales); 0 or -1 with err filled.
int bn_engine_state_set_lora(bn_engine_state *s, const float *scales, int n, char *err, size_t errlen);

#endif
