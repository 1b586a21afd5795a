// tests/train/llama_lora.h — llama.cpp (npm libllama) logits with and without a LoRA adapter.
#ifndef BONSAI_TEST_LLAMA_LORA_H
#define BONSAI_TEST_LLAMA_LORA_H
#include <stdint.h>
#include <stddef.h>
// ll_lora_logits: last-position logits {V} of tok[0..n) without (base) and with the adapter at
// scale 1; returns 0, 1 if the reference is unavailable (why says so), -1 on failure (why).
int ll_lora_logits(const char *model_path, const char *adapter_path, const int32_t *tok, int n, int V,
                   float *base, float *with_adapter, char *why, size_t whylen);
#endif
