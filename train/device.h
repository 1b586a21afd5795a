// train/device.h — a device backend of FTPO LoRA training (docs/antidoom.md §21): the forward and backward of
// train/graph.h (last-position logits, adapter gradients) on a GPU. A device library registers one at start-up
// (cuda/train_graph.cu, a constructor), as core/engine.h's device backends are; a program without one trains on the
// CPU. The trainer (train/trainer.h, -ngl > 0) keeps the adapter, the optimizer and the checkpoints on the host, so
// a run started on one backend resumes on the other; the device holds the model's weights in their stored types,
// a copy of the adapter and the gradients of the micro-batches until the step takes them.
#ifndef BONSAI_TRAIN_DEVICE_H
#define BONSAI_TRAIN_DEVICE_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "core/model.h"
#include "train/lora.h"

// The arithmetic of the frozen base weights' products (forward W x and backward Wᵀdy) on a device, and the precision
// of the layer inputs kept for the backward; the LoRA products and every other op stay fp32 (docs/antidoom.md §21).
// The order is --train-gemm's word list, BN_TRAIN_GEMM_NAMES.
typedef enum {
    BN_TRAIN_GEMM_BF16 = 0, // bf16 inputs, fp32 accumulation and output (tensor cores); layer inputs kept as bf16
                            // (the forward itself runs on fp32 residuals): the default
    BN_TRAIN_GEMM_F32 = 1,  // fp32 throughout: the CPU trainer's arithmetic
} bn_train_gemm;
#define BN_TRAIN_GEMM_NAMES "bf16|f32"

// Tokens per pass of the FFN block (post-attention norm, gate, up, SwiGLU, down): the device runs it, forward and
// backward, over spans of at most this many positions, so its intermediates are sized for a span, not the row
// (docs/antidoom.md §21; train/memplan.c sizes them the same way).
#define BN_TRAIN_FFN_CHUNK 512

// bn_train_gdn_ckpt: the device's Gated DeltaNet checkpoint interval for a backward over T tokens: ⌈√T⌉, which keeps
// the fewest states (⌈T/CK⌉ checkpoints and one chunk of CK recomputed ones) for the same work (every step recomputed
// once); the states, and so the gradients, are the same bits for any interval.
static inline int bn_train_gdn_ckpt(int T) {
    int ck = 1;
    while ((int64_t)ck * ck < T) ck++;
    return ck;
}

// The parts a device's step time is split into when it times them (set_profile): the linears' products (base and
// LoRA, with their dequantization), attention's core (scores, softmax, products), the delta rule's recurrence, and
// the rest (norms, gates, the conv, RoPE, copies, the head's norm). BN_TRAIN_PART_NAMES in this order.
typedef enum {
    BN_TRAIN_PART_LINEAR = 0,
    BN_TRAIN_PART_ATTN = 1,
    BN_TRAIN_PART_GDN = 2,
    BN_TRAIN_PART_OTHER = 3,
    BN_TRAIN_PARTS = 4,
} bn_train_part;
#define BN_TRAIN_PART_NAMES {"linears", "attention", "delta rule", "other"}
// How a device backend runs (zero-initialized: the defaults).
typedef struct {
    bn_train_gemm gemm;
    int ffn_chunk;      // tokens per FFN pass (0: BN_TRAIN_FFN_CHUNK)
} bn_train_device_opts;

typedef struct bn_train_device {
    const char *name; // "CUDA"
    // device_count: devices the backend can use now (0: none)
    int (*device_count)(void);
    // open: the model's weights and a copy of adapter l (its layout; l may be NULL: the base model only) on device
    // `device`, run as opts says (NULL: the defaults); NULL (err) on failure or what the device path does not do
    // (dropout). With l->ste (--ste-type) m is the policy model whose adapted weights hold W_eff: the forward applies
    // no LoRA pair and the backward is straight-through, as train/graph.c does
    void *(*open)(const bn_model *m, const bn_lora *l, int device, const bn_train_device_opts *opts, char *err,
                  size_t errlen);
    // close: frees what open made (NULL is fine)
    void (*close)(void *ctx);
    // load_params: uploads l's parameters (after each optimizer step), with l->ste also the adapted weights of the
    // model open was given, read again from their host buffers (the step's W_eff); 0 or -1 (err)
    int (*load_params)(void *ctx, const bn_lora *l, char *err, size_t errlen);
    // forward: the last position's logits {n_vocab} of tokens[0..n) into host logits, with the adapter or without
    // (the reference); returns the graph for backward (with the adapter) or NULL (err)
    void *(*forward)(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                     size_t errlen);
    // backward: ADDS ∂L/∂A, ∂L/∂B for host dlogits {n_vocab} into the device's gradients; 0 or -1 (err)
    int (*backward)(void *graph, const float *dlogits, char *err, size_t errlen);
    // graph_free: frees a forward's graph (NULL is fine)
    void (*graph_free)(void *graph);
    // take_grads: host grads[0..n_params) += the device's gradients, which are zeroed; 0 or -1 (err)
    int (*take_grads)(void *ctx, float *grads, char *err, size_t errlen);
    // mem_in_use: device bytes in use now, the whole device: total − free as the driver reports it (0: unknown)
    size_t (*mem_in_use)(void *ctx);
    // forward_all: every position's logits {n_vocab, n} into host logits (the tether's forward, train/tether.h);
    // backward then takes dlogits {n_vocab, n}. NULL: the backend has none, and the tether runs on the CPU.
    void *(*forward_all)(void *ctx, bool use_adapter, const int32_t *tokens, int n, float *logits, char *err,
                         size_t errlen);
    // mem_info: the free and total bytes of device `device` as the driver reports them, before (or without) opening
    // it; 0 or -1 (err)
    int (*mem_info)(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen);
    // set_profile: times the device's work by part from now on (an event at every part's start and end, the stream
    // synchronized after each forward and backward: slower) or stops; NULL: the backend cannot
    void (*set_profile)(void *ctx, bool on);
    // take_profile: ms[part] = the device milliseconds timed per bn_train_part since the last call (zeros while
    // untimed), which then start again from zero; 0 or -1 (err)
    int (*take_profile)(void *ctx, double ms[BN_TRAIN_PARTS], char *err, size_t errlen);
} bn_train_device;

// bn_train_device_register: makes d the device backend of training (the last registration wins).
void bn_train_device_register(const bn_train_device *d);
// bn_train_device_get: the registered backend, or NULL when the program has none.
const bn_train_device *bn_train_device_get(void);
// bn_train_gemm_name: "bf16" or "f32" (--train-gemm's words); "?" for another value.
const char *bn_train_gemm_name(bn_train_gemm g);

#endif
