// tests/ref/llama_ref.h — a small C shim over the prebuilt CPU libllama from npm (node-llama-cpp,
// release v0.5.0), loaded with dlopen at run time. Used only by tests and debugging tools to compare
// our engine/tokenizer against llama.cpp. Library directory: $BONSAI_LLAMA_LIB_DIR, else
// $BONSAI_THIRD_PARTY/node-llama-cpp/bins/linux-x64, else third_party/node-llama-cpp/bins/linux-x64.
// Not thread-safe; one process may hold several llama_ref handles (the library is loaded once).
#ifndef BONSAI_LLAMA_REF_H
#define BONSAI_LLAMA_REF_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

typedef struct llama_ref llama_ref;

// llama_ref_lib_dir: the directory the shim loads libllama from, written into buf; returns buf.
const char *llama_ref_lib_dir(char *buf, size_t n);
// llama_ref_available: true if libllama can be dlopen'ed and all needed symbols resolve; else
// false with the reason in err (tests print it and skip).
bool llama_ref_available(char *err, size_t errlen);

// llama_ref_load: loads a GGUF for evaluation (CPU, mmap, one sequence, context n_ctx, batch = n_ctx,
// n_threads for both prompt and generation); returns NULL with one line in err on failure.
llama_ref *llama_ref_load(const char *gguf, int n_ctx, int n_threads, char *err, size_t errlen);
// llama_ref_load_vocab: loads only the vocabulary of a GGUF (for tokenizer tests; eval is refused).
llama_ref *llama_ref_load_vocab(const char *gguf, char *err, size_t errlen);
// llama_ref_free: frees the context and model (NULL is fine).
void llama_ref_free(llama_ref *r);
// llama_ref_load_weights: the model with its tensors but no context (a file llama.cpp runs only beside another, such
// as a DSpark drafter); NULL with err when llama.cpp refuses it (its reason is in its log on stderr).
llama_ref *llama_ref_load_weights(const char *gguf, char *err, size_t errlen);
// llama_ref_meta: metadata value of key as llama.cpp renders it (llama_model_meta_val_str) into buf; returns its
// length, or -1 when the key is absent.
int llama_ref_meta(const llama_ref *r, const char *key, char *buf, size_t n);

// llama_ref_n_vocab: vocabulary size (rows of the logits).
int llama_ref_n_vocab(const llama_ref *r);
// llama_ref_n_ctx: context length of the loaded context (0 for vocab-only).
int llama_ref_n_ctx(const llama_ref *r);
// llama_ref_add_bos: whether the vocabulary asks for a BOS token on string prompts.
bool llama_ref_add_bos(const llama_ref *r);
// llama_ref_bos: the BOS id (-1 if none).
int32_t llama_ref_bos(const llama_ref *r);
// llama_ref_is_eog: whether token ends generation.
bool llama_ref_is_eog(const llama_ref *r, int32_t token);

// llama_ref_eval: clears the state and evaluates tokens[0..n) at positions 0..n-1 in one batch;
// logits (may be NULL) receives [n][n_vocab] floats, every position. Returns 0, or -1 (n > n_ctx,
// decode error).
int llama_ref_eval(llama_ref *r, const int32_t *tokens, int n, float *logits);
// llama_ref_decode_next: appends n tokens to the current state (positions continue) and, if logits is
// non-NULL, writes [n][n_vocab] logits. Returns 0 or -1. Use after llama_ref_eval for stepwise decoding.
int llama_ref_decode_next(llama_ref *r, const int32_t *tokens, int n, float *logits);
// llama_ref_generate_greedy: evaluates the prompt (fresh state), then decodes n_gen tokens one at a time
// taking the argmax (lowest id on ties) each step, without stopping at EOG. out receives n_gen ids.
// Returns n_gen, or -1 on error.
int llama_ref_generate_greedy(llama_ref *r, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out);

// llama_ref_tokenize: llama_tokenize on text (len bytes); returns the number of ids written to out
// (at most max), or -1 if it does not fit / fails.
int llama_ref_tokenize(llama_ref *r, const char *text, int len, int32_t *out, int max,
                       bool add_special, bool parse_special);
// llama_ref_token_to_piece: the token's text (special tokens rendered if special) into buf with a NUL;
// returns its length in bytes or -1.
int llama_ref_token_to_piece(llama_ref *r, int32_t token, char *buf, int n, bool special);

// llama_ref_quantize: what `llama-quantize [--pure] [--tensor-type PATTERN=TYPE] in out TYPE N_THREADS` does (its
// engine, llama_model_quantize, with the tool's defaults): type is one of llama-quantize's names (Q1_0, Q2_0, Q4_0,
// Q4_K_M, "Q4_K", TQ2_0, ...), tt_type a ggml type id, tt_pattern NULL for no --tensor-type. Returns 0, or -1 with err.
int llama_ref_quantize(const char *in, const char *out, const char *type, bool pure, const char *tt_pattern, int tt_type,
                       int n_threads, char *err, size_t errlen);
// llama_ref_dry: llama.cpp's DRY sampler (llama_sampler_init_dry on r's vocabulary with these settings and
// breaker strings) after llama_sampler_accept of hist[0..n_hist), applied to logits[0..n_vocab of r): the result into
// out. Returns 0, or -1.
int llama_ref_dry(llama_ref *r, const float *logits, const int32_t *hist, int n_hist, float multiplier, float base,
                  int allowed_length, int last_n, const char *const *breakers, int n_breakers, float *out);
// llama_ref_penalties: llama.cpp's penalties sampler (llama_sampler_init_penalties(n_vocab, last_n, repeat, freq,
// present)) after llama_sampler_accept of hist[0..n_hist), applied to logits[0..n_vocab): the penalized logits into
// out[0..n_vocab). Returns 0, or -1 when the library is not available.
int llama_ref_penalties(const float *logits, int n_vocab, const int32_t *hist, int n_hist, int last_n, float repeat,
                        float freq, float present, float *out);

#endif
