// train/fakequant.h — fake quantization for quantization-aware training: the exact round trip
// deq(Q(w)) that bonsai-quantize applies (same per-tensor type rules, same reference quantizers),
// computed in memory. Used by the STE LoRA path (bonsai-ftpo-train --ste-type) and by QAT
// full-parameter training (bonsai-train-lm).
#ifndef BONSAI_TRAIN_FAKEQUANT_H
#define BONSAI_TRAIN_FAKEQUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/model.h"
#include "train/lora.h"

// bn_fake_quantize: out {n_in, n_out} = deq(Q(w)) row by row, Q = the quantizer bonsai-quantize
// uses for `type` (the reference quantizer; F16/BF16: rounding; F32: copy). out may equal w.
// Returns 0, or -1 when the type has no quantizer/dequantizer here or n_in is not a multiple of
// its block size.
int bn_fake_quantize(int type, const float *w, float *out, int64_t n_in, int64_t n_out);

// bn_requant_type: the bn_type `bonsai-quantize --type target` (default rules: not pure, no
// llama-mix; output_type: its --output-tensor-type, NULL for the rule) writes for tensor `name` of shape ne
// {ne0, ne1, ne2, ne3} stored as src_type; tied = the model has no output.weight. Returns the type, or -1 (err:
// unknown target or output type, shape no type holds).
int bn_requant_type(const char *target, const char *output_type, const char *name, const int64_t ne[4],
                    int src_type, bool tied, char *err, size_t errlen);

// bn_requant_model: a copy of m in memory whose weights are exactly what `bonsai-quantize --type
// target [--output-tensor-type output_type]` would store (output_type NULL: the rule; quantized bytes; weights
// whose type does not change are shared with m, as are cfg arrays and the GGUF handle). m must outlive the copy.
// Free it with bn_requant_model_free (never bn_model_free). Returns NULL with err filled.
bn_model *bn_requant_model(const bn_model *m, const char *target, const char *output_type, char *err, size_t errlen);
// bn_requant_model_set: stores fp32 values w (all elements of weight `name`) into the copy q, quantized to
// the type q holds for that weight (its own buffer from then on; m is never written). Returns 0 or -1 (err:
// no such weight in q, no quantizer).
int bn_requant_model_set(bn_model *q, const char *name, const float *w, char *err, size_t errlen);
// bn_requant_model_keep_scales: from now on bn_requant_model_set quantizes each weight with the block scales
// it holds now (bn_quantize_keep_scales: the codes change, the scales stay those of the quantized base; for
// Q1_0, Q2_0 and PQ2_0 weights, others make set fail). Call it right after bn_requant_model.
void bn_requant_model_keep_scales(bn_model *q);
// bn_requant_model_apply_lora: for every tensor of l, stores W_eff = deq(Q(W0 + s·B·A)) into q (W0 read from
// m, the model q was made from; the same fp32 merge as train/merge.h, so a merged-and-requantized file holds
// exactly these weights). The STE forward weights of bonsai-ftpo-train --ste-type. Returns 0 or -1 (err).
int bn_requant_model_apply_lora(bn_model *q, const bn_model *m, const bn_lora *l, char *err, size_t errlen);
// bn_requant_model_free: frees a bn_requant_model copy (NULL is fine).
void bn_requant_model_free(bn_model *q);

// bn_model_weight_slots: pointers to every bn_weight of m (token_embd, output_norm, output unless
// tied, then each layer's weights in struct order; absent ones included) into out[cap]; returns
// the count (the count needed if larger than cap).
int bn_model_weight_slots(bn_model *m, bn_weight **out, int cap);

#endif
