// core/tokenizer_vocab.h — the tokenizer's insides (struct bn_tokenizer) and its string tables
// (core/tokenizer_vocab.c: the intern table of vocab texts and merge parts, the merge table), shared by the loader and
// public API (core/tokenizer.c) and the encoders (core/tokenizer_encode.c, core/tokenizer_encode.h). Calls go one
// way: tokenizer.c -> tokenizer_encode.c -> tokenizer_vocab.c (and tokenizer.c -> tokenizer_vocab.c while loading).
// Not a public header.
#ifndef BONSAI_TOKENIZER_VOCAB_H
#define BONSAI_TOKENIZER_VOCAB_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer.h"
#include "base/util.h"
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REGEX 4

enum tok_kind { KIND_BPE, KIND_SPM };

// Interned string: bytes [off, off+len) of the intern arena; tok = vocab id or -1.
typedef struct {
    uint32_t off, len;
    int32_t tok;
} intern_sym;

struct bn_tokenizer {
    enum tok_kind kind;
    char pre[32];
    int n_vocab;
    // per token
    uint32_t *text_off, *text_len; // {n_vocab} into `arena`
    uint8_t *type;                 // {n_vocab} enum bn_token_type (after EOG forcing)
    float *score;                  // {n_vocab} SPM scores (0 when absent)
    uint32_t *piece_off, *piece_len; // {n_vocab} decoded bytes (special rendering) into `pieces`
    uint8_t *is_eog;               // {n_vocab}
    char *pieces;
    // intern table (vocab texts + merge strings)
    char *arena;
    size_t arena_len, arena_cap;
    intern_sym *syms;
    size_t n_syms, syms_cap;
    uint32_t *ht; // sym index + 1, 0 = empty
    size_t ht_cap;
    // merges: (left sym, right sym) → rank, result sym
    uint64_t *mkey;
    int32_t *mrank, *mres;
    size_t m_cap;
    // special tokens for the partition, longest first
    int32_t *specials;
    int n_specials;
    // pre-tokenizer
    pcre2_code *re[MAX_REGEX];
    int n_re;
    bool ignore_merges;
    // flags and ids
    bool add_bos, add_eos, add_space_prefix;
    int32_t bos, eos, unk;
    int32_t byte_tok[256]; // byte → token id (mapped char or <0xXX>), -1 if none
    uint32_t byte_sym[256]; // byte → intern sym of its mapped char (+1; 0 = none)
    char byte_utf8[256][4];  // byte → UTF-8 of its GPT-2 mapped char
    uint8_t byte_utf8_len[256];
};

// ---- the intern and merge tables (core/tokenizer_vocab.c) ----
// bn_tok_find: intern symbol index of the string s[0..n), or -1.
int64_t bn_tok_find(const bn_tokenizer *t, const char *s, size_t n);
// bn_tok_intern: intern symbol index of s[0..n), inserting it if new.
int64_t bn_tok_intern(bn_tokenizer *t, const char *s, size_t n);
// bn_tok_merge: rank of merging symbols (a, b) (result symbol in *res), or -1.
int32_t bn_tok_merge(const bn_tokenizer *t, uint32_t a, uint32_t b, int32_t *res);
// bn_tok_merge_add: records (a, b) → res at rank unless the pair already has a (lower) rank (m_cap slots ready).
void bn_tok_merge_add(bn_tokenizer *t, uint32_t a, uint32_t b, int32_t res, int32_t rank);

#endif
