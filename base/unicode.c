// base/unicode.c — UTF-8 helpers and the GPT-2 byte map.
#include "base/unicode.h"
#include "core/tokenizer.h"
#include "base/util.h"
#include <stdbool.h>
#include <string.h>

int bn_utf8_len(uint8_t c) {
    static const int lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

int32_t bn_utf8_decode(const uint8_t *s, size_t n, int *len) {
    *len = 1;
    if (n == 0) return -1;
    uint8_t c = s[0];
    if (c < 0x80) return c;
    int need;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { need = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { need = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { need = 4; cp = c & 0x07; min = 0x10000; }
    else return -1;
    if ((size_t)need > n) return -1;
    for (int i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = need;
    return (int32_t)cp;
}

int bn_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// Printable bytes keep their code point; the other 68 map to U+0100 + k in increasing order.
static bool byte_is_printable(int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

// The 68 remapped bytes in order: 0-32 (k = b), 127-160 (k = b - 94), 173 (k = 67).
uint32_t bn_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    int k = b <= 32 ? b : b <= 160 ? b - 94 : 67;
    return 0x100u + (uint32_t)k;
}

int bn_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    int k = (int)(cp - 0x100);
    return k <= 32 ? k : k <= 66 ? k + 94 : 173;
}

size_t bn_utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len;
        if (bn_utf8_decode((const uint8_t *)s + i, n - i, &len) < 0) break;
        i += (size_t)len;
    }
    return i;
}

size_t bn_utf8_complete_len(const char *s, size_t n) {
    // look back at most 3 bytes for a lead byte whose sequence runs past the end
    for (size_t i = 1; i <= 4 && i <= n; i++) {
        uint8_t c = (uint8_t)s[n - i];
        if ((c & 0xC0) == 0x80) continue; // continuation byte: keep looking for its lead
        int need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return (size_t)need > i ? n - i : n;
    }
    return n;
}

char *bn_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    char *out = xmalloc(3 * n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int len;
        if (bn_utf8_decode((const uint8_t *)s + i, n - i, &len) >= 0) {
            memcpy(out + m, s + i, (size_t)len);
            m += (size_t)len;
        } else {
            memcpy(out + m, "\xEF\xBF\xBD", 3);
            m += 3;
        }
        i += (size_t)len;
    }
    out[m] = 0;
    if (out_len) *out_len = m;
    return out;
}
