// core/adapter.h — LoRA adapters in llama.cpp's GGUF form (docs/formats.md §7.1): the one reader and writer of
// the file (train/lora.c keeps its training storage and goes through these), the check of an adapter against a
// loaded model, and the set of adapters an engine applies unmerged at run time (docs/model.md §4.5):
//     y = W·x + Σ_adapters s·B·(A·x),   s = user_scale · alpha / r   (alpha 0: s = user_scale, llama.cpp's rule)
// with r the tensor's own rank (B's ne[0]).
#ifndef BONSAI_ADAPTER_H
#define BONSAI_ADAPTER_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "base/threads.h"

// The most adapters an engine applies at once (--lora / --lora-scaled).
#define BN_LORA_MAX 16

// One adapted weight: A and B in f32 (f16 / bf16 files are widened at load).
typedef struct {
    char name[96];   // base weight: "blk.3.attn_q.weight", "output.weight"
    int64_t n_in;    // the base weight's ne[0]
    int64_t n_out;   // the base weight's ne[1]
    int r;           // rank
    float *A;        // {n_in, r}: r rows of n_in
    float *B;        // {r, n_out}: n_out rows of r
} bn_adapter_tensor;

typedef struct bn_adapter {
    char arch[32];         // general.architecture of the base model
    float alpha;           // adapter.lora.alpha (0: absent)
    int n_tensors;
    bn_adapter_tensor *t;  // [n_tensors], file order (norm adapters are skipped at load, as llama.cpp does)
    float *data;           // owned storage of every A and B (NULL when the tensors point elsewhere)
    char *path;            // the file it was read from (NULL when built in memory)
} bn_adapter;

// bn_adapter_load: reads an adapter GGUF (general.type adapter, adapter.type lora, X.lora_a {n_in, r} and
// X.lora_b {r, n_out} pairs in f32 / f16 / bf16); returns it, or NULL with a message naming the file and the tensor.
bn_adapter *bn_adapter_load(const char *path, char *err, size_t errlen);
// bn_adapter_save: writes a as llama.cpp's adapter GGUF (tensors of type BN_F32 or BN_F16, adapter.lora.alpha,
// general.architecture), atomically; 0 or -1 with err.
int bn_adapter_save(const bn_adapter *a, const char *path, int type, char *err, size_t errlen);
// bn_adapter_free: frees the adapter and its owned data (NULL is fine).
void bn_adapter_free(bn_adapter *a);
// bn_adapter_tensor_scale: s of tensor t for user_scale: user_scale · alpha / t->r, or user_scale when alpha is 0.
float bn_adapter_tensor_scale(const bn_adapter *a, const bn_adapter_tensor *t, float user_scale);
// bn_adapter_weight: the weight of m that base tensor `name` names when the engine can adapt it (the projections
// of attention, FFN and Gated DeltaNet layers and an untied output head), or NULL.
const bn_weight *bn_adapter_weight(const bn_model *m, const char *name);
// bn_adapter_check: 0 when a fits m: the same general.architecture, every tensor naming an adaptable weight of m with
// A {n_in, r} and B {r, n_out} of its shape; else -1 with err naming the tensor and both shapes (or both
// architectures).
int bn_adapter_check(const bn_adapter *a, const bn_model *m, char *err, size_t errlen);

// The adapters an engine applies (the engine owns it): each with its file, its global user scale, and per weight of
// the model the tensors adapting it.
typedef struct bn_lora_set bn_lora_set;
// bn_lora_set_open: loads each of paths[0..n) (n <= BN_LORA_MAX) and checks it against m; the global scales are
// scales[0..n) (NULL: 1 each). Returns the set, or NULL with err naming the file and what is wrong.
bn_lora_set *bn_lora_set_open(const bn_model *m, const char *const *paths, const float *scales, int n, char *err,
                              size_t errlen);
// bn_lora_set_new: a set over adapters already loaded and checked against m (ownership passes to the set when own);
// returns it (dies on OOM).
bn_lora_set *bn_lora_set_new(const bn_model *m, bn_adapter *const *adapters, const float *scales, int n, bool own);
// bn_lora_set_free: frees the set (and its adapters when it owns them; NULL is fine).
void bn_lora_set_free(bn_lora_set *s);
// bn_lora_set_count: the number of adapters (0 for NULL).
int bn_lora_set_count(const bn_lora_set *s);
// bn_lora_set_adapter: adapter i.
const bn_adapter *bn_lora_set_adapter(const bn_lora_set *s, int i);
// bn_lora_set_scales: the global user scales ([count]; a state starts with them; the caller may change them).
float *bn_lora_set_scales(bn_lora_set *s);
// bn_lora_set_max_rank: the largest rank of any tensor of any adapter (the scratch floats per activation row of
// bn_lora_apply), 0 for NULL.
int bn_lora_set_max_rank(const bn_lora_set *s);
// bn_lora_set_adapts: whether any adapter of s adapts weight w (a weight of the set's model).
bool bn_lora_set_adapts(const bn_lora_set *s, const bn_weight *w);

// bn_lora_apply: y[t] += Σ_adapters s_t·B·(A·x[t]) for the n activation rows x [n][ne0] and y [n][ne1] of weight w
// (a no-op when no adapter adapts w), s_t from scales[t] (the user scales of row t's sequence, [count]; a scale of 0
// skips the adapter for that row). The intermediates A·x go to scratch (n × bn_lora_set_max_rank floats). Each row's
// result has the same bits whatever n and the thread count (the speculative verify equals the decode). pool may be
// NULL.
void bn_lora_apply(const bn_lora_set *s, const bn_weight *w, const float *x, float *y, int n,
                   const float *const *scales, float *scratch, bn_pool *pool);

#endif
