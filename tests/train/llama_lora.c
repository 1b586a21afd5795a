// tests/train/llama_lora.c — the llama.cpp side of test_adapter_llamacpp.c, in its own
// translation unit (llama.h's ggml/gguf headers clash with gguf/gguf.h): loads a model and an
// adapter in the prebuilt npm libllama (dlopen) and returns last-position logits.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/ref/llama_ref.h"
#include "tests/train/llama_lora.h"
#include "llama.h"

#define FN(name) __typeof__(&name) name
static struct {
    FN(llama_model_default_params); FN(llama_context_default_params); FN(llama_model_load_from_file);
    FN(llama_model_free); FN(llama_init_from_model); FN(llama_free); FN(llama_adapter_lora_init);
    FN(llama_set_adapters_lora); FN(llama_batch_init); FN(llama_batch_free); FN(llama_decode);
    FN(llama_get_logits_ith); FN(llama_get_memory); FN(llama_memory_clear);
} F;

static bool resolve(char *why, size_t n) {
    char dir[1024], path[1200];
    llama_ref_lib_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/libllama.v0.5.0.so", dir);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL); // same handle the shim opened (backends loaded there)
    if (!h) { snprintf(why, n, "cannot load %s", path); return false; }
#define SYM(name) if (!(*(void **)&F.name = dlsym(h, #name))) { snprintf(why, n, "symbol %s missing", #name); return false; }
    SYM(llama_model_default_params) SYM(llama_context_default_params) SYM(llama_model_load_from_file)
    SYM(llama_model_free) SYM(llama_init_from_model) SYM(llama_free) SYM(llama_adapter_lora_init)
    SYM(llama_set_adapters_lora) SYM(llama_batch_init) SYM(llama_batch_free) SYM(llama_decode)
    SYM(llama_get_logits_ith) SYM(llama_get_memory) SYM(llama_memory_clear)
#undef SYM
    return true;
}

// llama_logits: last-position logits of tokens with the adapter at scale (adapter NULL = none).
static int llama_logits(struct llama_context *ctx, struct llama_adapter_lora *ad, const int32_t *tok, int n, int V, float *out) {
    float scale = 1.0f;
    if (F.llama_set_adapters_lora(ctx, ad ? &ad : NULL, ad ? 1 : 0, ad ? &scale : NULL) != 0) return -1;
    F.llama_memory_clear(F.llama_get_memory(ctx), true);
    struct llama_batch b = F.llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tok[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = i == n - 1;
    }
    b.n_tokens = n;
    int rc = F.llama_decode(ctx, b);
    F.llama_batch_free(b);
    if (rc) return -1;
    const float *row = F.llama_get_logits_ith(ctx, -1);
    if (!row) return -1;
    memcpy(out, row, sizeof(float) * V);
    return 0;
}

int ll_lora_logits(const char *model_path, const char *adapter_path, const int32_t *tok, int n, int V,
                   float *base, float *with_adapter, char *why, size_t whylen) {
    static int resolved = -1;
    if (resolved < 0) resolved = llama_ref_available(why, whylen) && resolve(why, whylen);
    if (!resolved) return 1;
    struct llama_model_params mp = F.llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    struct llama_model *lm = F.llama_model_load_from_file(model_path, mp);
    if (!lm) { snprintf(why, whylen, "llama.cpp cannot load %s", model_path); return -1; }
    int rc = -1;
    struct llama_context *ctx = NULL;
    struct llama_adapter_lora *ad = F.llama_adapter_lora_init(lm, adapter_path);
    if (!ad) { snprintf(why, whylen, "llama.cpp refused the adapter %s", adapter_path); goto out; }
    struct llama_context_params cp = F.llama_context_default_params();
    cp.n_ctx = 64; cp.n_batch = 64; cp.n_ubatch = 64; cp.n_seq_max = 1; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    ctx = F.llama_init_from_model(lm, cp);
    if (!ctx) { snprintf(why, whylen, "llama.cpp context failed"); goto out; }
    if (llama_logits(ctx, NULL, tok, n, V, base) || llama_logits(ctx, ad, tok, n, V, with_adapter)) {
        snprintf(why, whylen, "llama.cpp decode failed");
        goto out;
    }
    rc = 0;
out:
    if (ctx) F.llama_free(ctx);
    F.llama_model_free(lm);
    return rc;
}
