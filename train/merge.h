// train/merge.h — merging a LoRA adapter into a model GGUF (docs/antidoom.md §12, docs/formats.md §7.1):
// for each adapted tensor W' = W + (α/r)·B·A in fp32 (W dequantized exactly), written either
// re-quantized to its original type with the reference quantizer, or as F16 / F32; every other
// tensor and every KV is copied byte for byte. Per-tensor diagnostics say how much of the delta
// survived the re-quantization.
#ifndef BONSAI_TRAIN_MERGE_H
#define BONSAI_TRAIN_MERGE_H
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "train/lora.h"

enum bn_merge_mode {
    BN_MERGE_KEEP = 0, // adapted tensors re-quantized to their original type
    BN_MERGE_F16 = 1,  // adapted tensors written as F16
    BN_MERGE_F32 = 2,  // adapted tensors written as F32
};

typedef struct {
    char name[96];
    int type;          // bn_type written
    double rel_delta;  // ‖ΔW‖ / ‖W‖ (fp32 delta)
    double kept;       // ⟨deq(written) − W, ΔW⟩ / ‖ΔW‖²: share of the delta that survived (1 = all)
    double sign_flips; // fraction of elements whose written value has the opposite sign of W
} bn_merge_stat;

// bn_lora_merge_gguf: writes base + adapter to out_path atomically (stats: one entry per adapted
// tensor in adapter order, may be NULL; user_scale multiplies α/r like llama.cpp's --lora-scaled).
// Returns 0 or -1 (err: missing/mis-shaped base tensor, unsupported type, I/O).
int bn_lora_merge_gguf(const char *base_path, const bn_lora *l, float user_scale, int mode, const char *out_path,
                       bn_merge_stat *stats, char *err, size_t errlen);

// bn_lora_merge_requant: base + adapter, then every tensor as `bonsai-quantize --type target` (with
// `--output-tensor-type output_type` unless NULL) writes it; the
// adapted tensors are quantized straight from the fp32 merge (no F16 step), so their dequantized values equal
// the STE forward weights of bonsai-ftpo-train --ste-type target (train/fakequant.h); keep_scales: with the
// block scales of the quantized base (bn_quantize_keep_scales; the STE forward of --keep-scales). stats as
// above (kept and sign flips measured on the written, quantized tensors). Returns 0 or -1 (err).
int bn_lora_merge_requant(const char *base_path, const bn_lora *l, float user_scale, const char *target,
                          const char *output_type, bool keep_scales, const char *out_path, bn_merge_stat *stats,
                          char *err, size_t errlen);

#endif
