// convert/convert.h — Hugging Face checkpoints ↔ GGUF for qwen35 / qwen3 / qwen2 (docs/model.md §5, §7),
// and LoRA adapters: llama.cpp adapter GGUF ↔ PEFT (docs/formats.md §7).
//
// Import (HF → GGUF) follows llama.cpp's convert_hf_to_gguf.py: the same KVs, tensor names and
// shapes, tensors in checkpoint order (shards sorted by file name, each in its header order),
// +1 on the zero-centred qwen35 norms in fp32, ssm_a = −exp(A_log), conv1d squeezed, dt_bias →
// ssm_dt.bias, V-head permutation grouped → tiled when Hk ≠ Hv; 2-D weights in the outtype,
// 1-D tensors / ssm_a / conv1d in F32. Streams tensor by tensor (memory: one output tensor buffer,
// as gguf_writer's fill callback works, plus one row). Vision (model.visual.*) and MTP (mtp.*)
// tensors are skipped (= llama.cpp's --no-mtp; our engine has no MTP). A tied config drops lm_head.
// Tokenizer: BPE vocab + added tokens (special or llama.cpp's "looks special" rule → control (3),
// else user-defined (4)), ids missing up to vocab_size → "[PAD<id>]" unused (5); merges as "a b";
// tokenizer.ggml.pre "qwen35" when the tokenizer.json Split regex has \p{M}, else "qwen2";
// bos/eos/unk/sep/pad from tokenizer_config.json, falling back to config.json *_token_id.
//
// Export (GGUF → HF) applies the inverse transforms and writes:
//   qwen35: architectures ["Qwen3_5ForCausalLM"], model_type "qwen3_5_text" (the text-only class of
//           transformers; tensors under "model."), rope in rope_parameters {rope_theta,
//           partial_rotary_factor, mrope_section, mrope_interleaved}; layer_types only when the
//           GGUF has qwen35.attention.recurrent_layers (else full_attention_interval).
//   qwen3:  ["Qwen3ForCausalLM"], model_type "qwen3";  qwen2: ["Qwen2ForCausalLM"], "qwen2".
//   model.safetensors (names sorted), tokenizer.json (BPE vocab + merges + added tokens) and
//   tokenizer_config.json (chat_template, bos/eos/pad/unk) rebuilt from the tokenizer.* KVs, so
//   that import(export(x)) reproduces x's tensors and KVs (plus general.quantization_version).
//   Exact except ssm_a: A_log is written as fp32 and not every fp32 ssm_a has an fp32 preimage of
//   −exp (near |a| = 8 one A_log ulp moves a by ~4 ulp); the exporter picks the nearest, so ssm_a
//   comes back within 2 ulp, and exactly from the second round trip on.
// LoRA ↔ PEFT: docs/formats.md §7; both directions need the base GGUF (--base). token_embd adapters are
// refused; an adapter alpha of 0 (llama.cpp: scale 1) is exported as lora_alpha = r.
#ifndef BONSAI_CONVERT_H
#define BONSAI_CONVERT_H
#include <stddef.h>
#include <stdbool.h>

typedef struct {
    int outtype;  // bn_type for 2-D weights (BN_F32/BN_F16/BN_BF16); -1 = default (import: F16 as
                  // llama.cpp; export: the GGUF tensor's own float type, quantized → F32)
    bool quiet;   // no progress bar / summary on stderr
} bn_convert_opts;

// bn_convert_hf_to_gguf: HF directory (config.json, tokenizer.json, tokenizer_config.json,
// model.safetensors[.index.json]) → GGUF at out (atomic); returns 0 or -1 with err.
int bn_convert_hf_to_gguf(const char *hf_dir, const char *out, const bn_convert_opts *o, char *err, size_t errlen);
// bn_convert_gguf_to_hf: GGUF model → HF directory out_dir (created if needed); returns 0 or -1.
int bn_convert_gguf_to_hf(const char *in, const char *out_dir, const bn_convert_opts *o, char *err, size_t errlen);
// bn_convert_lora_to_peft: adapter GGUF (+ its base GGUF for the arch and V-head layout) → PEFT
// directory (adapter_model.safetensors + adapter_config.json, f32); returns 0 or -1.
int bn_convert_lora_to_peft(const char *adapter, const char *base, const char *out_dir, const bn_convert_opts *o,
                            char *err, size_t errlen);
// bn_convert_peft_to_lora: PEFT directory → adapter GGUF (f32), names/shapes checked against the
// base GGUF; rsLoRA becomes alpha' = lora_alpha·√r; returns 0 or -1.
int bn_convert_peft_to_lora(const char *peft_dir, const char *base, const char *out, const bn_convert_opts *o,
                            char *err, size_t errlen);

// ---- shared helpers (convert/convert.c) --------------------------------------------------------
// bn_vhead_perm_index: GGUF (tiled) head of HF (grouped) value head h_hf, for Hk key heads and
// Hv value heads (identity when Hk == Hv or Hk does not divide Hv).
int bn_vhead_to_gguf(int h_hf, int Hk, int Hv);
// bn_vhead_to_hf: the inverse: HF head of GGUF head h_gg.
int bn_vhead_to_hf(int h_gg, int Hk, int Hv);

#endif
