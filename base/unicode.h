// base/unicode.h — the little Unicode the tokenizer needs: UTF-8 decode/encode and the GPT-2
// byte ↔ char map (docs/model.md §11.1 step 3). Categories (\p{L}, \p{N}, ...) come from PCRE2.
#ifndef BONSAI_UNICODE_H
#define BONSAI_UNICODE_H
#include <stdint.h>
#include <stddef.h>

// bn_utf8_len: byte length of the UTF-8 sequence that starts with lead byte c (1 for invalid leads).
int bn_utf8_len(uint8_t c);
// bn_utf8_decode: code point of the valid UTF-8 sequence at s[0..n) and its length in *len;
// returns -1 (with *len = 1) for an invalid or truncated sequence.
int32_t bn_utf8_decode(const uint8_t *s, size_t n, int *len);
// bn_utf8_encode: writes code point cp as UTF-8 into out (>= 4 bytes); returns the byte count.
int bn_utf8_encode(uint32_t cp, char *out);

// bn_byte_to_cp: GPT-2 bytes_to_unicode code point for byte b.
uint32_t bn_byte_to_cp(uint8_t b);
// bn_cp_to_byte: the byte whose GPT-2 code point is cp, or -1 if cp is not in the map.
int bn_cp_to_byte(uint32_t cp);

#endif
