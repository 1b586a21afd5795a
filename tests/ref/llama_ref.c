// tests/ref/llama_ref.c — dlopen shim over the prebuilt libllama (see llama_ref.h).
// Compiled against third_party/llama.cpp/include/llama.h for the types; every function is resolved
// with dlsym so nothing links against the reference at build time.
#include "tests/ref/llama_ref.h"
#include "base/util.h"
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "ggml-backend.h"

#define REF_FN(name) __typeof__(&name) name
// Function table resolved once from libllama / libggml.
static struct {
    bool loaded;
    char why[2048];
    void *h_llama, *h_ggml;
    REF_FN(ggml_backend_load_all_from_path);
    REF_FN(ggml_backend_dev_count);
    REF_FN(llama_backend_init);
    REF_FN(llama_log_set);
    REF_FN(llama_model_default_params);
    REF_FN(llama_context_default_params);
    REF_FN(llama_model_load_from_file);
    REF_FN(llama_model_free);
    REF_FN(llama_model_meta_val_str);
    REF_FN(llama_init_from_model);
    REF_FN(llama_free);
    REF_FN(llama_model_get_vocab);
    REF_FN(llama_vocab_n_tokens);
    REF_FN(llama_vocab_bos);
    REF_FN(llama_vocab_get_add_bos);
    REF_FN(llama_vocab_is_eog);
    REF_FN(llama_get_memory);
    REF_FN(llama_memory_clear);
    REF_FN(llama_batch_init);
    REF_FN(llama_batch_free);
    REF_FN(llama_decode);
    REF_FN(llama_get_logits_ith);
    REF_FN(llama_tokenize);
    REF_FN(llama_token_to_piece);
    REF_FN(llama_sampler_init_penalties);
    REF_FN(llama_sampler_accept);
    REF_FN(llama_sampler_apply);
    REF_FN(llama_sampler_free);
    REF_FN(llama_model_quantize_default_params);
    REF_FN(llama_model_quantize);
    REF_FN(llama_sampler_init_dry);
} L;

struct llama_ref {
    struct llama_model *model;
    struct llama_context *ctx; // NULL for vocab-only
    const struct llama_vocab *vocab;
    int n_vocab, n_ctx;
    int n_past; // tokens in the current state
};


const char *llama_ref_lib_dir(char *buf, size_t n) {
    const char *dir = getenv("BONSAI_LLAMA_LIB_DIR");
    const char *tp = getenv("BONSAI_THIRD_PARTY");
    if (dir && *dir) snprintf(buf, n, "%s", dir);
    else snprintf(buf, n, "%s/node-llama-cpp/bins/linux-x64", tp && *tp ? tp : "third_party");
    return buf;
}

// Quiet logger: llama.cpp's messages only with LLAMA_REF_VERBOSE=1, errors always.
static void ref_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("LLAMA_REF_VERBOSE") && atoi(getenv("LLAMA_REF_VERBOSE")) > 0;
    if (verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static bool ref_sym(void *h, void **slot, const char *name) {
    *slot = dlsym(h, name);
    if (!*slot) snprintf(L.why, sizeof L.why, "symbol %s not found in the llama.cpp library", name);
    return *slot != NULL;
}

// ref_init: loads the libraries and backends once; returns true when usable (else L.why says why).
static bool ref_init(void) {
    static bool tried;
    if (tried) return L.loaded;
    tried = true;
    char dir[1024], path[1200];
    llama_ref_lib_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/libllama.v0.5.0.so", dir);
    // RTLD_LOCAL keeps ggml's gguf_* symbols from clashing with ours; the library's RUNPATH ($ORIGIN)
    // finds libggml*.so next to it.
    L.h_llama = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!L.h_llama) { snprintf(L.why, sizeof L.why, "cannot load %s: %s", path, dlerror()); return false; }
    snprintf(path, sizeof path, "%s/libggml.v0.5.0.so", dir);
    L.h_ggml = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!L.h_ggml) { snprintf(L.why, sizeof L.why, "cannot load %s: %s", path, dlerror()); return false; }
#define SYM(h, name) if (!ref_sym(h, (void **)&L.name, #name)) return false
    SYM(L.h_ggml, ggml_backend_load_all_from_path);
    SYM(L.h_ggml, ggml_backend_dev_count);
    SYM(L.h_llama, llama_backend_init);
    SYM(L.h_llama, llama_log_set);
    SYM(L.h_llama, llama_model_default_params);
    SYM(L.h_llama, llama_context_default_params);
    SYM(L.h_llama, llama_model_load_from_file);
    SYM(L.h_llama, llama_model_free);
    SYM(L.h_llama, llama_model_meta_val_str);
    SYM(L.h_llama, llama_init_from_model);
    SYM(L.h_llama, llama_free);
    SYM(L.h_llama, llama_model_get_vocab);
    SYM(L.h_llama, llama_vocab_n_tokens);
    SYM(L.h_llama, llama_vocab_bos);
    SYM(L.h_llama, llama_vocab_get_add_bos);
    SYM(L.h_llama, llama_vocab_is_eog);
    SYM(L.h_llama, llama_get_memory);
    SYM(L.h_llama, llama_memory_clear);
    SYM(L.h_llama, llama_batch_init);
    SYM(L.h_llama, llama_batch_free);
    SYM(L.h_llama, llama_decode);
    SYM(L.h_llama, llama_get_logits_ith);
    SYM(L.h_llama, llama_tokenize);
    SYM(L.h_llama, llama_token_to_piece);
    SYM(L.h_llama, llama_sampler_init_penalties);
    SYM(L.h_llama, llama_sampler_accept);
    SYM(L.h_llama, llama_sampler_apply);
    SYM(L.h_llama, llama_sampler_free);
    SYM(L.h_llama, llama_model_quantize_default_params);
    SYM(L.h_llama, llama_model_quantize);
    SYM(L.h_llama, llama_sampler_init_dry);
#undef SYM
    L.llama_log_set(ref_log, NULL);
    // The CPU backend is a separate libggml-cpu-<variant>.so; ggml picks the best one for this CPU.
    L.ggml_backend_load_all_from_path(dir);
    if (L.ggml_backend_dev_count() == 0) {
        snprintf(L.why, sizeof L.why, "no ggml backend found in %s (libggml-cpu-*.so missing?)", dir);
        return false;
    }
    L.llama_backend_init();
    L.loaded = true;
    return true;
}

bool llama_ref_available(char *err, size_t errlen) {
    if (ref_init()) return true;
    bn_err(err, errlen, "%s", L.why);
    return false;
}

// run_sampler: sampler s (freed here) fed hist[0..n_hist) with llama_sampler_accept, then applied to logits[0..n_vocab):
// the resulting logits into out; 0, or -1 when s is NULL
static int run_sampler(struct llama_sampler *s, const float *logits, int n_vocab, const int32_t *hist, int n_hist,
                       float *out) {
    if (!s) return -1;
    for (int i = 0; i < n_hist; i++) L.llama_sampler_accept(s, hist[i]);
    llama_token_data *d = malloc(sizeof *d * (size_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) d[i] = (llama_token_data){i, logits[i], 0.0f};
    llama_token_data_array a = {d, (size_t)n_vocab, -1, false};
    L.llama_sampler_apply(s, &a);
    for (size_t i = 0; i < a.size; i++) out[a.data[i].id] = a.data[i].logit;
    free(d);
    L.llama_sampler_free(s);
    return 0;
}

int llama_ref_penalties(const float *logits, int n_vocab, const int32_t *hist, int n_hist, int last_n, float repeat,
                        float freq, float present, float *out) {
    if (!ref_init()) return -1;
    return run_sampler(L.llama_sampler_init_penalties(n_vocab, last_n, repeat, freq, present), logits, n_vocab, hist,
                       n_hist, out);
}

int llama_ref_dry(llama_ref *r, const float *logits, const int32_t *hist, int n_hist, float multiplier, float base,
                  int allowed_length, int last_n, const char *const *breakers, int n_breakers, float *out) {
    return run_sampler(L.llama_sampler_init_dry(r->vocab, multiplier, base, allowed_length, last_n,
                                                (const char **)breakers, (size_t)n_breakers),
                       logits, r->n_vocab, hist, n_hist, out);
}

int llama_ref_quantize(const char *in, const char *out, const char *type, bool pure, const char *tt_pattern, int tt_type,
                       int n_threads, char *err, size_t errlen) {
    // llama-quantize's names (tools/quantize/quantize.cpp QUANT_OPTIONS; "Q4_K" / "Q5_K" are its aliases of _M)
    static const struct { const char *name; enum llama_ftype ftype; } names[] = {
        {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},     {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},     {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
        {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},     {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},     {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
        {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q4_K", LLAMA_FTYPE_MOSTLY_Q4_K_M},   {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
        {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q5_K", LLAMA_FTYPE_MOSTLY_Q5_K_M},   {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
        {"TQ1_0", LLAMA_FTYPE_MOSTLY_TQ1_0},   {"TQ2_0", LLAMA_FTYPE_MOSTLY_TQ2_0},   {"Q1_0", LLAMA_FTYPE_MOSTLY_Q1_0},
        {"Q2_0", LLAMA_FTYPE_MOSTLY_Q2_0},     {"F16", LLAMA_FTYPE_MOSTLY_F16},       {"BF16", LLAMA_FTYPE_MOSTLY_BF16},
    };
    int k = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(names[i].name, type)) k = i;
    if (k < 0) return bn_err(err, errlen, "llama_ref_quantize: no llama_ftype for '%s'", type);
    if (!ref_init()) return bn_err(err, errlen, "%s", L.why);
    llama_model_quantize_params p = L.llama_model_quantize_default_params();
    p.ftype = names[k].ftype;
    p.pure = pure;
    p.nthread = n_threads;
    // llama-quantize's --tensor-type NAME=TYPE: the name lowercased, a list ended by {NULL, GGML_TYPE_COUNT}
    char pat[256];
    struct llama_model_tensor_override tt[2] = {{NULL, GGML_TYPE_COUNT}, {NULL, GGML_TYPE_COUNT}};
    if (tt_pattern) {
        size_t i = 0;
        for (; tt_pattern[i] && i + 1 < sizeof pat; i++) pat[i] = (char)tolower((unsigned char)tt_pattern[i]);
        pat[i] = 0;
        tt[0] = (struct llama_model_tensor_override){pat, (enum ggml_type)tt_type};
        p.tt_overrides = tt;
    }
    if (L.llama_model_quantize(in, out, &p) != 0) return bn_err(err, errlen, "llama_model_quantize failed on %s", in);
    return 0;
}

// ref_open: shared part of the loaders; n_ctx < 0: vocabulary only, 0: weights without a context.
static llama_ref *ref_open(const char *gguf, int n_ctx, int n_threads, char *err, size_t errlen) {
    if (!ref_init()) { bn_err(err, errlen, "%s", L.why); return NULL; }
    struct llama_model_params mp = L.llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = n_ctx < 0;
    mp.use_extra_bufts = false; // no weight repacking: plain ggml CPU kernels
    struct llama_model *model = L.llama_model_load_from_file(gguf, mp);
    if (!model) { bn_err(err, errlen, "llama.cpp could not load %s", gguf); return NULL; }
    llama_ref *r = calloc(1, sizeof *r);
    if (!r) { L.llama_model_free(model); bn_err(err, errlen, "out of memory"); return NULL; }
    r->model = model;
    r->vocab = L.llama_model_get_vocab(model);
    r->n_vocab = L.llama_vocab_n_tokens(r->vocab);
    if (n_ctx > 0) {
        struct llama_context_params cp = L.llama_context_default_params();
        cp.n_ctx = (uint32_t)n_ctx;
        cp.n_batch = (uint32_t)n_ctx;
        cp.n_ubatch = (uint32_t)(n_ctx < 512 ? n_ctx : 512);
        cp.n_seq_max = 1;
        cp.n_threads = n_threads > 0 ? n_threads : 1;
        cp.n_threads_batch = cp.n_threads;
        cp.no_perf = true;
        // F32 KV cache unless LLAMA_REF_KV_F16=1: the tightest comparison with an fp32 engine.
        const char *kv16 = getenv("LLAMA_REF_KV_F16");
        if (!(kv16 && atoi(kv16) > 0)) { cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; }
        // Flash attention off unless LLAMA_REF_FA=1 (the CPU FA kernel rounds Q/K/V through f16).
        const char *fa = getenv("LLAMA_REF_FA");
        cp.flash_attn_type = fa && atoi(fa) > 0 ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        r->ctx = L.llama_init_from_model(model, cp);
        if (!r->ctx) {
            L.llama_model_free(model);
            free(r);
            bn_err(err, errlen, "llama.cpp could not create a context (n_ctx %d) for %s", n_ctx, gguf);
            return NULL;
        }
        r->n_ctx = n_ctx;
    }
    return r;
}

llama_ref *llama_ref_load(const char *gguf, int n_ctx, int n_threads, char *err, size_t errlen) {
    if (n_ctx <= 0) { bn_err(err, errlen, "llama_ref_load: n_ctx must be > 0"); return NULL; }
    return ref_open(gguf, n_ctx, n_threads, err, errlen);
}

llama_ref *llama_ref_load_vocab(const char *gguf, char *err, size_t errlen) {
    return ref_open(gguf, -1, 1, err, errlen);
}

llama_ref *llama_ref_load_weights(const char *gguf, char *err, size_t errlen) {
    return ref_open(gguf, 0, 1, err, errlen);
}

int llama_ref_meta(const llama_ref *r, const char *key, char *buf, size_t n) {
    return L.llama_model_meta_val_str(r->model, key, buf, n);
}

void llama_ref_free(llama_ref *r) {
    if (!r) return;
    if (r->ctx) L.llama_free(r->ctx);
    L.llama_model_free(r->model);
    free(r);
}

int llama_ref_n_vocab(const llama_ref *r) { return r->n_vocab; }
int llama_ref_n_ctx(const llama_ref *r) { return r->n_ctx; }
bool llama_ref_add_bos(const llama_ref *r) { return L.llama_vocab_get_add_bos(r->vocab); }
int32_t llama_ref_bos(const llama_ref *r) { return L.llama_vocab_bos(r->vocab); }
bool llama_ref_is_eog(const llama_ref *r, int32_t token) { return L.llama_vocab_is_eog(r->vocab, token); }

int llama_ref_decode_next(llama_ref *r, const int32_t *tokens, int n, float *logits) {
    if (!r->ctx || n <= 0 || r->n_past + n > r->n_ctx) return -1;
    struct llama_batch batch = L.llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = r->n_past + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = logits != NULL || i == n - 1;
    }
    batch.n_tokens = n;
    int rc = L.llama_decode(r->ctx, batch);
    L.llama_batch_free(batch);
    if (rc != 0) return -1;
    r->n_past += n;
    if (logits) {
        for (int i = 0; i < n; i++) {
            const float *row = L.llama_get_logits_ith(r->ctx, i);
            if (!row) return -1;
            memcpy(logits + (size_t)i * r->n_vocab, row, sizeof(float) * (size_t)r->n_vocab);
        }
    }
    return 0;
}

int llama_ref_eval(llama_ref *r, const int32_t *tokens, int n, float *logits) {
    if (!r->ctx) return -1;
    L.llama_memory_clear(L.llama_get_memory(r->ctx), true);
    r->n_past = 0;
    return llama_ref_decode_next(r, tokens, n, logits);
}

// ref_argmax: index of the largest value, lowest index on ties.
static int32_t ref_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int llama_ref_generate_greedy(llama_ref *r, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    if (!r->ctx || n_prompt <= 0 || n_prompt + n_gen > r->n_ctx) return -1;
    L.llama_memory_clear(L.llama_get_memory(r->ctx), true);
    r->n_past = 0;
    if (llama_ref_decode_next(r, prompt, n_prompt, NULL) != 0) return -1;
    for (int i = 0; i < n_gen; i++) {
        // The last decoded position is output index (batch size - 1): -1 picks the last one.
        const float *row = L.llama_get_logits_ith(r->ctx, -1);
        if (!row) return -1;
        out[i] = ref_argmax(row, r->n_vocab);
        if (i + 1 < n_gen && llama_ref_decode_next(r, &out[i], 1, NULL) != 0) return -1;
    }
    return n_gen;
}

int llama_ref_tokenize(llama_ref *r, const char *text, int len, int32_t *out, int max,
                       bool add_special, bool parse_special) {
    int n = L.llama_tokenize(r->vocab, text, len, out, max, add_special, parse_special);
    return n < 0 ? -1 : n;
}

int llama_ref_token_to_piece(llama_ref *r, int32_t token, char *buf, int n, bool special) {
    if (n <= 0) return -1;
    int k = L.llama_token_to_piece(r->vocab, token, buf, n - 1, 0, special);
    if (k < 0) return -1;
    buf[k] = '\0';
    return k;
}
