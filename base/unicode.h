// base/unicode.h — the project's Unicode: one UTF-8 decoder (bn_utf8_next) and what is built on it,
// the GPT-2 byte <-> char map (docs/model.md §11.1 step 3), Python-like character classes and spans
// of code points. Categories for pre-tokenisation (\p{L}, \p{N}, ...) come from PCRE2.
//
// Two replacement rules for invalid UTF-8, each kept where it is relied on:
//   per byte         every byte that does not start a valid sequence is one error (bn_utf8_decode,
//                    bn_utf8_sanitize: the tokenizer and the server, as llama.cpp does);
//   maximal subpart  the longest prefix of a valid sequence is one error (bn_utf8_to_cps: the detector
//                    and the pair rows, like Python's errors="replace").
#ifndef BONSAI_BASE_UNICODE_H
#define BONSAI_BASE_UNICODE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// bn_utf8_next: decodes the UTF-8 sequence at s[0..n) (n >= 1); *cp = its code point, or -1 when
// it is invalid or truncated. Returns the bytes it covers: the sequence's length, or for an error
// the maximal subpart (1..3 bytes; Unicode §3.9).
int bn_utf8_next(const uint8_t *s, size_t n, int32_t *cp);
// bn_utf8_len: byte length of the UTF-8 sequence that starts with lead byte c (1 for invalid leads).
int bn_utf8_len(uint8_t c);
// bn_utf8_decode: code point of the valid UTF-8 sequence at s[0..n) and its length in *len;
// returns -1 (with *len = 1) for an invalid or truncated sequence.
int32_t bn_utf8_decode(const uint8_t *s, size_t n, int *len);
// bn_utf8_encode: writes code point cp as UTF-8 into out (>= 4 bytes); returns the byte count.
int bn_utf8_encode(uint32_t cp, char *out);

// bn_utf8_valid_prefix: length of the longest prefix of s[0..n) that is complete, valid UTF-8
// (used to cut pieces back to valid UTF-8, docs/server.md §5).
// Note: it stops at the FIRST invalid byte; for streaming use bn_utf8_complete_len + bn_utf8_sanitize.
size_t bn_utf8_valid_prefix(const char *s, size_t n);
// bn_utf8_complete_len: n minus an incomplete multi-byte sequence at the very end (llama.cpp server's
// validate_utf8: what can be streamed now; invalid bytes elsewhere are kept).
size_t bn_utf8_complete_len(const char *s, size_t n);
// bn_utf8_sanitize: malloc'd NUL-terminated copy of s[0..n) with every byte that is not part of a
// valid UTF-8 sequence replaced by U+FFFD (as llama-server's JSON dump with error_handler replace);
// *out_len = its length (may be NULL).
char *bn_utf8_sanitize(const char *s, size_t n, size_t *out_len);

// bn_utf8_to_cps: decodes len bytes into cp (room for len entries), U+FFFD per maximal invalid
// subpart; if first_byte is non-NULL it receives each code point's starting byte offset. Returns the
// number of code points.
size_t bn_utf8_to_cps(const char *s, size_t len, uint32_t *cp, size_t *first_byte);
// bn_cps_to_utf8: writes n code points as UTF-8 into out (room for 4n+1 bytes, NUL-terminated;
// surrogates and values above U+10FFFF become U+FFFD); returns the byte length.
size_t bn_cps_to_utf8(const uint32_t *cp, size_t n, char *out);

// bn_byte_to_cp: GPT-2 bytes_to_unicode code point for byte b.
uint32_t bn_byte_to_cp(uint8_t b);
// bn_cp_to_byte: the byte whose GPT-2 code point is cp, or -1 if cp is not in the map.
int bn_cp_to_byte(uint32_t cp);

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
#endif
