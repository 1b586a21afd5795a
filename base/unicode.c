// base/unicode.c — UTF-8 (one decoder), the GPT-2 byte map, character classes and spans.
#include "base/unicode.h"
#include "base/util.h"
#include <string.h>

#define REPLACEMENT 0xFFFDu

int bn_utf8_next(const uint8_t *s, size_t n, int32_t *cp) {
    uint8_t b0 = s[0];
    if (b0 < 0x80) { *cp = b0; return 1; }
    int need;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF; // allowed range of the next continuation byte (narrower for the second)
    if (b0 >= 0xC2 && b0 <= 0xDF) { need = 2; v = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3; v = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0; // no overlong forms
        if (b0 == 0xED) hi = 0x9F; // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4; v = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90; // no overlong forms
        if (b0 == 0xF4) hi = 0x8F; // nothing above U+10FFFF
    } else { *cp = -1; return 1; }
    for (int k = 1; k < need; k++) {
        if ((size_t)k >= n || s[k] < lo || s[k] > hi) { *cp = -1; return k; } // maximal subpart
        v = (v << 6) | (s[k] & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = (int32_t)v;
    return need;
}

int bn_utf8_len(uint8_t c) {
    static const int lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

int32_t bn_utf8_decode(const uint8_t *s, size_t n, int *len) {
    *len = 1;
    if (n == 0) return -1;
    int32_t cp;
    int k = bn_utf8_next(s, n, &cp);
    if (cp >= 0) *len = k;
    return cp;
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

size_t bn_utf8_to_cps(const char *str, size_t len, uint32_t *cp, size_t *first_byte) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0, n = 0;
    while (i < len) {
        int32_t v;
        int used = bn_utf8_next(s + i, len - i, &v);
        if (first_byte) first_byte[n] = i;
        cp[n++] = v < 0 ? REPLACEMENT : (uint32_t)v;
        i += (size_t)used;
    }
    return n;
}

size_t bn_cps_to_utf8(const uint32_t *cp, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = REPLACEMENT;
        k += (size_t)bn_utf8_encode(c, out + k);
    }
    out[k] = 0;
    return k;
}

bool bn_cp_is_space(uint32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return true;
    if (c < 0x80) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Blocks of non-alphanumeric code points above ASCII (punctuation, symbols, marks, emoji).
static const uint32_t non_alnum_ranges[][2] = {
    {0x80, 0xA9}, {0xAB, 0xB1}, {0xB4, 0xB4}, {0xB6, 0xB8}, {0xBB, 0xBB}, {0xBF, 0xBF},
    {0xD7, 0xD7}, {0xF7, 0xF7}, {0x2C2, 0x2C5}, {0x2D2, 0x2DF}, {0x300, 0x36F},
    {0x2000, 0x206F}, {0x20A0, 0x20FF}, {0x2190, 0x245F}, {0x2500, 0x2775}, {0x2794, 0x2BFF},
    {0x2E00, 0x2E7F}, {0x3000, 0x3004}, {0x3008, 0x3020}, {0x3030, 0x3030}, {0x303D, 0x303F},
    {0xD800, 0xF8FF}, {0xFE00, 0xFE6F}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20}, {0xFF3B, 0xFF40},
    {0xFF5B, 0xFF65}, {0xFFF0, 0xFFFF}, {0x1F000, 0x1FAFF},
};

bool bn_cp_is_alnum(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (bn_cp_is_space(c) || c > 0x10FFFF) return false;
    size_t n_ranges = sizeof non_alnum_ranges / sizeof non_alnum_ranges[0];
    for (size_t i = 0; i < n_ranges; i++)
        if (c >= non_alnum_ranges[i][0] && c <= non_alnum_ranges[i][1]) return false;
    return true;
}

bool bn_cp_is_word(uint32_t c) { return c == '_' || bn_cp_is_alnum(c); }

uint32_t bn_cp_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0xC0) return c;
    if (c <= 0xDE && c != 0xD7) return c + 32;
    if (c >= 0x100 && c <= 0x137) return (c % 2 == 0) ? c + 1 : c;
    if (c >= 0x139 && c <= 0x148) return (c % 2 == 1) ? c + 1 : c;
    if (c >= 0x14A && c <= 0x177) return (c % 2 == 0) ? c + 1 : c;
    if (c == 0x178) return 0xFF;
    if (c >= 0x179 && c <= 0x17E) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 0x25;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    if (c >= 0x410 && c <= 0x42F) return c + 0x20;
    return c;
}

bn_span bn_span_strip(bn_span s, bool lead, bool trail) {
    while (lead && s.n > 0 && bn_cp_is_space(s.p[0])) { s.p++; s.n--; }
    while (trail && s.n > 0 && bn_cp_is_space(s.p[s.n - 1])) s.n--;
    return s;
}

bool bn_span_eq(bn_span a, bn_span b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n * sizeof *a.p) == 0);
}

bool bn_span_has_word(bn_span s) {
    for (size_t i = 0; i < s.n; i++)
        if (bn_cp_is_word(s.p[i])) return true;
    return false;
}

size_t bn_span_normalise_word(bn_span s, uint32_t *out) {
    bn_span t = bn_span_strip(s, true, true);
    size_t a = 0, b = t.n;
    while (a < b && !bn_cp_is_word(t.p[a])) a++;
    while (b > a && !bn_cp_is_word(t.p[b - 1])) b--;
    for (size_t i = a; i < b; i++) out[i - a] = bn_cp_lower(t.p[i]);
    return b - a;
}
