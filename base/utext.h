// base/utext.h — the small amount of Unicode the detector needs: UTF-8 <-> code points,
// Python-like character classes (isspace, isalnum, lower) and a "token text" that maps the
// decoded surfaces of generated tokens onto code-point offsets of their concatenation.
//
// Partial UTF-8 tokens: byte-level BPE can split one character over several tokens. We decode the
// CONCATENATED bytes once (invalid input -> U+FFFD per maximal invalid subpart, like Python's
// errors="replace"), and each code point belongs to the token holding its FIRST byte. A token that
// holds only continuation bytes of a character started earlier therefore owns zero code points
// (its text is "", which the localiser treats like a whitespace-only token). Concatenating the
// per-token texts always gives exactly the scanned text, so char offsets and token indices agree.
#ifndef BONSAI_DETECT_UTEXT_H
#define BONSAI_DETECT_UTEXT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// bn_utf8_to_cps: decodes len bytes into cp (room for len entries); if first_byte is non-NULL it
// receives each code point's starting byte offset. Returns the number of code points.
size_t bn_utf8_to_cps(const char *s, size_t len, uint32_t *cp, size_t *first_byte);
// bn_cps_to_utf8: writes n code points as UTF-8 into out (room for 4n+1 bytes, NUL-terminated);
// returns the byte length.
size_t bn_cps_to_utf8(const uint32_t *cp, size_t n, char *out);

// bn_cp_is_space: Python str.isspace() for one code point; returns true for whitespace.
bool bn_cp_is_space(uint32_t c);
// bn_cp_is_alnum: Python str.isalnum() approximation: exact for ASCII; other code points count
// as alphanumeric unless they lie in a punctuation/symbol/space/emoji block; returns the verdict.
bool bn_cp_is_alnum(uint32_t c);
// bn_cp_is_word: alnum or '_' (regex \w); returns the verdict.
bool bn_cp_is_word(uint32_t c);
// bn_cp_lower: simple lower-case mapping (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic);
// returns the mapped code point (unchanged when unknown).
uint32_t bn_cp_lower(uint32_t c);

// A span of code points (not owned).
typedef struct {
    const uint32_t *p;
    size_t n;
} bn_span;

// bn_span_strip: span without leading/trailing whitespace (lead/trail select the sides).
bn_span bn_span_strip(bn_span s, bool lead, bool trail);
// bn_span_eq: returns true when both spans hold the same code points.
bool bn_span_eq(bn_span a, bn_span b);
// bn_span_has_word: returns true when some code point is alnum or '_'.
bool bn_span_has_word(bn_span s);
// bn_span_normalise_word: lower-cased, stripped, leading/trailing non-word chars removed, into
// out (room for s.n entries); returns its length (0 = not a word).
size_t bn_span_normalise_word(bn_span s, uint32_t *out);

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
