// core/tokenizer.h — the GGUF vocabulary as llama.cpp runs it: byte-level BPE (`gpt2` model with
// pre types qwen2, qwen35, gpt-2, llama-bpe, and a generic fallback) and SentencePiece-style
// `llama` vocabularies. Facts: docs/model.md §11, docs/formats.md §8.3.
#ifndef BONSAI_TOKENIZER_H
#define BONSAI_TOKENIZER_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "gguf/gguf.h"

typedef struct bn_tokenizer bn_tokenizer;

// Token types as stored in tokenizer.ggml.token_type.
enum bn_token_type {
    BN_TOKEN_UNDEFINED = 0,
    BN_TOKEN_NORMAL = 1,
    BN_TOKEN_UNKNOWN = 2,
    BN_TOKEN_CONTROL = 3,
    BN_TOKEN_USER_DEFINED = 4,
    BN_TOKEN_UNUSED = 5,
    BN_TOKEN_BYTE = 6,
};

// bn_tokenizer_from_gguf: builds the tokenizer from the tokenizer.* keys of g (g may be closed
// afterwards: everything is copied). Returns NULL with err filled on a missing/unsupported vocab.
bn_tokenizer *bn_tokenizer_from_gguf(const gguf_file *g, char *err, size_t errlen);
// bn_tokenizer_free: releases everything (NULL is fine).
void bn_tokenizer_free(bn_tokenizer *t);
// bn_tokenizer_n_vocab: number of token rows.
int bn_tokenizer_n_vocab(const bn_tokenizer *t);

// bn_tokenize: text[0..len) → token ids in a malloc'd *out (free()); returns the count (>= 0) or -1.
// Thread-safe (scratch space per call). Bytes that are not valid UTF-8 are kept as byte tokens, so
// decode(encode(s)) == s for any s (llama.cpp would turn them into U+FFFD first).
// add_special: prepend BOS (and append EOS) when the vocab says so (never for Qwen).
// parse_special: match control/unknown token texts in the input (user-defined ones always match).
int bn_tokenize(const bn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t **out);
// bn_token_to_piece: raw bytes of token id into buf (not NUL-terminated); returns the piece length,
// or -(needed length) if cap is too small. Control tokens give "" unless special is true.
int bn_token_to_piece(const bn_tokenizer *t, int32_t id, char *buf, int cap, bool special);
// bn_token_text: the vocab string as stored (e.g. "Ġthe"); NULL for an out-of-range id.
const char *bn_token_text(const bn_tokenizer *t, int32_t id);
// bn_token_type: the token's enum bn_token_type (BN_TOKEN_UNDEFINED for an out-of-range id).
int bn_token_get_type(const bn_tokenizer *t, int32_t id);
// bn_detokenize: the plain concatenation of the pieces (as llama-server builds its text: no SPM
// leading-space removal, no clean_spaces) as a malloc'd NUL-terminated string (*len = bytes, may be NULL).
char *bn_detokenize(const bn_tokenizer *t, const int32_t *ids, int n, bool special, size_t *len);
// bn_token_lookup: id of the exact vocab string text, or -1.
int32_t bn_token_lookup(const bn_tokenizer *t, const char *text);

// bn_token_is_eog: true for end-of-generation tokens (docs/model.md §11.1 step 7).
bool bn_token_is_eog(const bn_tokenizer *t, int32_t id);
// bn_token_bos / bn_token_eos: ids from the GGUF, or -1 when absent.
int32_t bn_token_bos(const bn_tokenizer *t);
int32_t bn_token_eos(const bn_tokenizer *t);
// bn_tokenizer_add_bos: whether bn_tokenize(add_special = true) prepends BOS.
bool bn_tokenizer_add_bos(const bn_tokenizer *t);
// bn_tokenizer_pre: the pre-tokenizer name in use ("qwen2", "qwen35", "gpt-2", "llama-bpe", "spm", ...).
const char *bn_tokenizer_pre(const bn_tokenizer *t);

#endif
