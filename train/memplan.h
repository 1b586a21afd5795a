// train/memplan.h — the memory plan of FTPO LoRA training (docs/antidoom.md §19): the bytes of every buffer a run
// holds, from the model's shape (its config and the stored types of its frozen weights) and the run's settings.
// Pure arithmetic: nothing planned is allocated, no GPU is needed. The activation terms follow train/graph.c
// buffer by buffer (the CPU trainer); the kernel scratch terms count every GDN value head at once, as a GPU
// kernel runs them. The device part (bn_memplan_device) follows cuda/train_graph.cu's allocations.
#ifndef BONSAI_TRAIN_MEMPLAN_H
#define BONSAI_TRAIN_MEMPLAN_H
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include "core/model.h"

// The model as the plan sees it.
typedef struct {
    bn_config cfg;       // the model's config; cfg.is_recurrent NULL = the full_attn_interval rule (qwen35)
    int type_layer;      // stored type of the layers' 2-D weights (Q1_0, Q2_0, Q8_0, F16, BF16, F32, ...)
    int type_embd;       // token_embd.weight's type
    int type_head;       // output.weight's type (unused when cfg.tied_output)
    int64_t base_bytes;  // > 0: the frozen weights' stored bytes as measured (a loaded model's tensors);
                         // 0: computed from the shape and the three types
} bn_memshape;

// The run's settings.
typedef struct {
    unsigned targets;     // bn_lora_target mask (train/lora.h)
    int rank;             // LoRA rank r
    int ctx;              // tokens per row: the context the policy forward runs over
    int batch;            // rows per micro-batch (their graphs are alive together)
    int grad_accum;       // micro-batches per optimizer step (no memory: gradients accumulate in place)
    float dropout;        // LoRA dropout (> 0: masks of the adapted projections' inputs)
    bool ste;             // --ste-type: the device also holds the reference model (the quantized base) in a context of
                          // its own; the shape is then the quantized model's
    int act_bytes;        // bytes per activation element: 4 = fp32 (the CPU trainer), 2 = bf16/fp16
    int gemm_bytes;       // the device's base-weight GEMMs (its column only; the CPU trainer computes in fp32):
                          // 2 = bf16, the default (weight chunks made bf16, the activation operand's bf16 copy),
                          // 4 = fp32 (--train-gemm f32)
    int ffn_chunk;        // the device's tokens per FFN pass (train/device.h; 0: BN_TRAIN_FFN_CHUNK)
    int64_t n_rows;       // rows whose reference logits are cached (0: unknown, not counted)
    int tether_ctx;       // plain-text tether window (0: no tether)
    int tether_batch;     // tether windows per step
    int tether_cache_mb;  // the tether's reference log-prob cache cap
} bn_memplan_cfg;

// What a GPU training run (-ngl, cuda/train_graph.cu; docs/antidoom.md §21) holds on the device, buffer by buffer as
// the trainer allocates them: activations in fp32 whatever act_bytes says; AdamW, the reference logits cache and the
// tether stay on the host.
typedef struct {
    int64_t base;     // the weights in their stored types (the plan's base)
    int64_t adapter;  // the adapter's copy: fp32 A, B
    int64_t grads;    // the device's gradients: fp32 ∂A, ∂B
    int64_t kept;     // the graphs of a micro-batch's rows: each layer's input {H, T} (bf16 with bf16 GEMMs), the
                      // last residual {H}, the ids
    int64_t layer;    // one layer's buffers: every intermediate and gradient of either layer kind (the FFN block's for
                      // one span of ffn_chunk tokens), A·x of every target
    int64_t scratch;  // the workspace: the largest linear's (weight chunk, bf16: dy's bf16 copy; x copies, {r, T}
                      // rows), attention's statistics or the GDN backward's state checkpoints
    int64_t head;     // the LM head's logits and their gradient {V}, its normed input and gradient {H}
    int64_t tether;   // the tether's all-position graph of tether_ctx tokens: layer inputs, the final residual, the
                      // head's input and its gradient {H, T_t}, the logits {V, T_t} (0 without a tether)
    int64_t ref;      // with ste, the reference's context: the weights again, its head's, layer and workspace buffers
                      // (no adapter: A·x rows of one value per token, no LoRA rows in the workspace); 0 without
    int64_t total;    // their sum (the tether's graph runs after the micro-batch's: an upper bound, as on the host)
} bn_memplan_device;

// Device memory a GPU run needs beyond its plan, per process: cuBLAS's workspace and kernels, the trainer's own
// kernels and the driver's rounding of each allocation (up to 2 MiB for the large ones). The CUDA context is not in
// it: the free memory a run is compared with is measured after the context exists.
#define BN_MEMPLAN_DEVICE_MARGIN ((int64_t)1 << 30)

// The plan: bytes, and elements per token per layer.
typedef struct {
    int64_t lora_params;      // adapter parameters (A and B of every adapted projection)
    int lora_tensors;         // adapted projections
    int n_gdn, n_attn;        // layers of each kind
    int64_t keep_layer_in;    // elements kept per token per layer with per-layer recomputation (the layer input)
    int64_t keep_gdn_full;    // elements kept per token per GDN layer without recomputation
    int64_t keep_attn_full;   // elements kept per token per attention layer without recomputation
    int64_t base;             // frozen weights as stored
    int64_t adapter;          // fp32 A, B
    int64_t grads;            // fp32 ∂A, ∂B
    int64_t adamw;            // fp32 first and second moments
    int64_t kept;             // activations kept between forward and backward, all rows of a micro-batch,
                              // with per-layer recomputation (what train/graph.c does)
    int64_t kept_full;        // the same without recomputation (every layer's intermediates kept)
    int64_t layer_ws;         // one layer's working set in the backward (recomputed intermediates, gradient
                              // buffers, the layer's dequantized copy), with recomputation
    int64_t layer_ws_full;    // the backward's working set without recomputation
    int64_t scratch;          // kernel scratch: dequantization chunk, LoRA backward, attention rows, GDN checkpoints
    int64_t logits;           // FTPO logits and their gradients (vocab × the rows of a micro-batch)
    int64_t ref_cache;        // cached reference logits (vocab × n_rows)
    int64_t tether;           // tether window: its logits, gradients, reference log-probs, kept inputs, and cache
    int64_t total;            // sum with recomputation
    int64_t total_full;       // sum without recomputation
    bn_memplan_device dev;    // what a GPU run of these settings holds on the device
} bn_memplan;

// bn_memshape_of_model: the shape of a loaded model (config, stored types, measured base bytes); returns it.
// The result points at m's config arrays and lives as long as m.
bn_memshape bn_memshape_of_model(const bn_model *m);
// bn_memplan_cfg_default: the trainer's defaults (q,k,v,o,gate,up,down, r 32, batch 4 × 4, fp32 activations, the
// device's bf16 GEMMs, no tether)
// for ctx tokens; returns them.
bn_memplan_cfg bn_memplan_cfg_default(int ctx);
// bn_memplan_base_bytes: the frozen weights' stored bytes computed from the shape (ignores s->base_bytes); -1 when a
// type is unknown or a row length is not a multiple of its block.
int64_t bn_memplan_base_bytes(const bn_memshape *s);
// bn_memplan_compute: fills p; returns 0 or -1 (err: bad setting, unknown type, unsupported architecture).
int bn_memplan_compute(const bn_memshape *s, const bn_memplan_cfg *c, bn_memplan *p, char *err, size_t errlen);
// bn_memplan_print: the plan as a table on f.
void bn_memplan_print(FILE *f, const bn_memshape *s, const bn_memplan_cfg *c, const bn_memplan *p);
// bn_memplan_device_fits: whether `ranks` processes, each holding p->dev plus BN_MEMPLAN_DEVICE_MARGIN, fit in the
// free_bytes (of total_bytes) device `device` has; returns 0, or -1 with err naming the plan's parts, the free bytes,
// the device and the settings that shrink the plan.
int bn_memplan_device_fits(const bn_memplan *p, const bn_memplan_cfg *c, int ranks, int device, int64_t free_bytes,
                           int64_t total_bytes, char *err, size_t errlen);
// bn_memplan_device_parts: p->dev's parts as one line ("weights 3.79 GiB + adapter ..."); returns buf.
const char *bn_memplan_device_parts(const bn_memplan *p, char *buf, size_t n);
// bn_parse_bytes: "123", "512M", "12G", "1.5GiB" (K/M/G/T = 2^10.., case-insensitive, optional "B"/"iB") into *out;
// returns 0 or -1 on a malformed or non-positive value.
int bn_parse_bytes(const char *s, int64_t *out);

#endif
