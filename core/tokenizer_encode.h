// core/tokenizer_encode.h — the encoders behind bn_tokenize (core/tokenizer_encode.c): the fragments the
// special-token partition (core/tokenizer.c) hands them and the id list they append to. Not a public header.
#ifndef BONSAI_TOKENIZER_ENCODE_H
#define BONSAI_TOKENIZER_ENCODE_H
#include "core/tokenizer_vocab.h"

// Growable id list.
typedef struct {
    int32_t *v;
    size_t n, cap;
} idvec;

static inline void idvec_push(idvec *o, int32_t id) {
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        o->v = xrealloc(o->v, o->cap * sizeof *o->v);
    }
    o->v[o->n++] = id;
}

// Input fragments after the special-token partition.
typedef struct {
    size_t off, len;
    int32_t tok; // -1 = raw text
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} fragvec;

// bn_tok_encode_bpe: appends the ids of every fragment (raw text through the pre-tokenizer and BPE);
// returns 0 or -1 (regex engine error).
int bn_tok_encode_bpe(const bn_tokenizer *t, const char *text, const fragment *frags, size_t n_frags, idvec *out);
// bn_tok_encode_spm: appends the ids of every fragment (SentencePiece; space prefix after specials).
void bn_tok_encode_spm(const bn_tokenizer *t, const char *text, const fragment *frags, size_t n_frags, idvec *out);

#endif
