// tools/bonsai-convert.c — Hugging Face safetensors ↔ GGUF, and PEFT ↔ llama.cpp LoRA adapters
// (convert/convert.h).
#include "convert/convert.h"
#include "base/util.h"
#include "base/args.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *in, *out, *base;
    bool to_hf, lora_to_peft, peft_to_lora;
    bn_convert_opts c;
} convert_opts;

// outtype_fn: --outtype f16|bf16|f32.
static int outtype_fn(void *base, const char *opt, const char *v, char *err, size_t errlen) {
    int *t = &((convert_opts *)base)->c.outtype;
    *t = !strcmp(v, "f32") ? BN_F32 : !strcmp(v, "f16") ? BN_F16 : !strcmp(v, "bf16") ? BN_BF16 : -2;
    return *t == -2 ? bn_err(err, errlen, "'%s' is not one of f16|bf16|f32", v) : 0;
}

#define O(f) offsetof(convert_opts, f)
static const bn_arg convert_args[] = {
    BN_POS(O(in), "IN", "HF_DIR, IN.gguf, ADAPTER.gguf or PEFT_DIR (by the mode)"),
    BN_POS(O(out), "OUT", "OUT.gguf or OUT_DIR"),
    BN_TRUE("--to-hf", O(to_hf), "GGUF -> Hugging Face directory"),
    BN_TRUE("--lora-to-peft", O(lora_to_peft), "llama.cpp LoRA adapter GGUF -> PEFT directory (needs --base)"),
    BN_TRUE("--peft-to-lora", O(peft_to_lora), "PEFT directory -> llama.cpp LoRA adapter GGUF (needs --base)"),
    BN_STR("--base", O(base), "BASE.gguf", "the model the adapter belongs to"),
    BN_FN("--outtype", outtype_fn, "f16|bf16|f32",
          "type of the 2-D weights (default: import f16; --to-hf each tensor's float type, quantized ones dequantized "
          "to f32)"),
    BN_TRUE("-q", O(c.quiet), "no progress and no summary"),
    {0}};
#undef O

static const bn_args_tool tool = {
    .name = "bonsai-convert",
    .usage = "usage: bonsai-convert HF_DIR OUT.gguf [--outtype f16|bf16|f32]     import\n"
             "       bonsai-convert --to-hf IN.gguf OUT_DIR [--outtype f16|bf16|f32]\n"
             "       bonsai-convert --lora-to-peft ADAPTER.gguf OUT_DIR --base BASE.gguf\n"
             "       bonsai-convert --peft-to-lora PEFT_DIR OUT.gguf --base BASE.gguf\n",
    .notes = "HF import reads config.json (Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3ForCausalLM,\n"
             "Qwen2ForCausalLM), tokenizer.json, tokenizer_config.json and model.safetensors[.index.json].\n"};

int main(int argc, char **argv) {
    convert_opts o = {.c = {.outtype = -1, .quiet = false}};
    const bn_arg_table tables[] = {BN_TABLE(convert_args, &o), BN_TABLE(bn_progress_args, NULL), {0}};
    bn_args_parse(&tool, tables, argc, argv);
    if (!o.in || !o.out) bn_args_fail(&tool, "IN and OUT are required");
    if (o.to_hf + o.lora_to_peft + o.peft_to_lora > 1)
        bn_args_fail(&tool, "--to-hf, --lora-to-peft and --peft-to-lora exclude each other");
    char err[1024] = "";
    int rc;
    if (o.to_hf) rc = bn_convert_gguf_to_hf(o.in, o.out, &o.c, err, sizeof err);
    else if (o.lora_to_peft) rc = bn_convert_lora_to_peft(o.in, o.base, o.out, &o.c, err, sizeof err);
    else if (o.peft_to_lora) rc = bn_convert_peft_to_lora(o.in, o.base, o.out, &o.c, err, sizeof err);
    else rc = bn_convert_hf_to_gguf(o.in, o.out, &o.c, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "bonsai-convert: %s\n", err);
        return 1;
    }
    return 0;
}
