// tools/bonsai-convert.c — Hugging Face safetensors ↔ GGUF, and PEFT ↔ llama.cpp LoRA adapters
// (convert/convert.h).
#include "convert/convert.h"
#include "base/util.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: bonsai-convert HF_DIR OUT.gguf [--outtype f16|bf16|f32]     import (default f16)\n"
            "       bonsai-convert --to-hf IN.gguf OUT_DIR [--outtype f16|bf16|f32]\n"
            "                      (default: each tensor's float type; quantized tensors dequantized to f32)\n"
            "       bonsai-convert --lora-to-peft ADAPTER.gguf OUT_DIR --base BASE.gguf\n"
            "       bonsai-convert --peft-to-lora PEFT_DIR OUT.gguf --base BASE.gguf\n"
            "  HF import reads config.json (Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3ForCausalLM,\n"
            "  Qwen2ForCausalLM), tokenizer.json, tokenizer_config.json and model.safetensors[.index.json].\n"
            "  -q  no progress bar / summary\n");
}

int main(int argc, char **argv) {
    const char *mode = "import", *base = NULL, *pos[2] = {NULL, NULL};
    int npos = 0;
    bn_convert_opts o = {.outtype = -1, .quiet = false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--to-hf")) mode = "to-hf";
        else if (!strcmp(a, "--lora-to-peft")) mode = "lora-to-peft";
        else if (!strcmp(a, "--peft-to-lora")) mode = "peft-to-lora";
        else if (!strcmp(a, "-q")) o.quiet = true;
        else if (!strcmp(a, "--base") && i + 1 < argc) base = argv[++i];
        else if (!strcmp(a, "--outtype") && i + 1 < argc) {
            const char *t = argv[++i];
            o.outtype = !strcmp(t, "f32") ? BN_F32 : !strcmp(t, "f16") ? BN_F16 : !strcmp(t, "bf16") ? BN_BF16 : -2;
            if (o.outtype == -2) {
                fprintf(stderr, "bonsai-convert: --outtype must be f16, bf16 or f32 (got '%s')\n", t);
                return 1;
            }
        } else if (a[0] == '-' && a[1]) {
            bn_arg_unknown("bonsai-convert", a);
        } else if (npos < 2) pos[npos++] = a;
        else {
            fprintf(stderr, "bonsai-convert: too many arguments\n");
            usage(stderr);
            return 1;
        }
    }
    if (npos != 2) {
        usage(stderr);
        return 1;
    }
    char err[1024] = "";
    int rc;
    if (!strcmp(mode, "import")) rc = bn_convert_hf_to_gguf(pos[0], pos[1], &o, err, sizeof err);
    else if (!strcmp(mode, "to-hf")) rc = bn_convert_gguf_to_hf(pos[0], pos[1], &o, err, sizeof err);
    else if (!strcmp(mode, "lora-to-peft")) rc = bn_convert_lora_to_peft(pos[0], base, pos[1], &o, err, sizeof err);
    else rc = bn_convert_peft_to_lora(pos[0], base, pos[1], &o, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "bonsai-convert: %s\n", err);
        return 1;
    }
    return 0;
}
