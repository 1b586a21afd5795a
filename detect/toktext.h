// detect/toktext.h — the "token text": the decoded surfaces of generated tokens mapped onto the code
// points of their concatenation (the detector, the localiser and mining index text by it).
//
// Partial UTF-8 tokens: byte-level BPE can split one character over several tokens. We decode the
// CONCATENATED bytes once (invalid input -> U+FFFD per maximal invalid subpart, like Python's
// errors="replace"), and each code point belongs to the token holding its FIRST byte. A token that
// holds only continuation bytes of a character started earlier therefore owns zero code points
// (its text is "", which the localiser treats like a whitespace-only token). Concatenating the
// per-token texts always gives exactly the scanned text, so char offsets and token indices agree.
#ifndef BONSAI_DETECT_TOKTEXT_H
#define BONSAI_DETECT_TOKTEXT_H
#include <stddef.h>
#include <stdint.h>
#include "base/unicode.h"

// Token text: generated tokens' surfaces mapped onto the code points of their concatenation.
typedef struct {
    int m;          // number of tokens
    uint32_t *cp;   // {n_cp} code points of the concatenated text
    size_t n_cp;
    size_t *off;    // {m+1} token i owns cp[off[i] .. off[i+1])
} bn_toktext;

// bn_toktext_build: decodes m byte surfaces (surf[i], lens[i] bytes) into t; always succeeds.
void bn_toktext_build(bn_toktext *t, const char *const *surf, const size_t *lens, int m);
// bn_toktext_free: releases what build allocated.
void bn_toktext_free(bn_toktext *t);
// bn_toktext_span: returns token i's code points.
bn_span bn_toktext_span(const bn_toktext *t, int i);
// bn_toktext_token_at: index of the token owning code point c, or -1 if c is out of range.
int bn_toktext_token_at(const bn_toktext *t, size_t c);
#endif
