// base/utext.c — UTF-8 decoding with Python-style replacement, character classes, token text.
#include "base/utext.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

#define REPLACEMENT 0xFFFDu

// Length of the valid prefix of a multi-byte sequence starting at s[0] (lead byte already
// classified), and the decoded value when complete. Returns bytes consumed; *ok tells validity.
static size_t decode_multi(const unsigned char *s, size_t avail, uint32_t *out, bool *ok) {
    unsigned char b0 = s[0];
    size_t need;
    uint32_t v;
    unsigned char lo = 0x80, hi = 0xBF; // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) { need = 2; v = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3; v = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4; v = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else { *ok = false; return 1; }
    for (size_t k = 1; k < need; k++) {
        unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
        if (k >= avail || s[k] < lo_k || s[k] > hi_k) { *ok = false; return k; } // maximal subpart
        v = (v << 6) | (s[k] & 0x3F);
    }
    *ok = true;
    *out = v;
    return need;
}

size_t bn_utf8_to_cps(const char *str, size_t len, uint32_t *cp, size_t *first_byte) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t v;
        size_t used;
        if (s[i] < 0x80) { v = s[i]; used = 1; }
        else {
            bool ok;
            used = decode_multi(s + i, len - i, &v, &ok);
            if (!ok) v = REPLACEMENT;
        }
        if (first_byte) first_byte[n] = i;
        cp[n++] = v;
        i += used;
    }
    return n;
}

size_t bn_cps_to_utf8(const uint32_t *cp, size_t n, char *out) {
    unsigned char *o = (unsigned char *)out;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = REPLACEMENT;
        if (c < 0x80) o[k++] = (unsigned char)c;
        else if (c < 0x800) { o[k++] = 0xC0 | (c >> 6); o[k++] = 0x80 | (c & 0x3F); }
        else if (c < 0x10000) {
            o[k++] = 0xE0 | (c >> 12); o[k++] = 0x80 | ((c >> 6) & 0x3F); o[k++] = 0x80 | (c & 0x3F);
        } else {
            o[k++] = 0xF0 | (c >> 18); o[k++] = 0x80 | ((c >> 12) & 0x3F);
            o[k++] = 0x80 | ((c >> 6) & 0x3F); o[k++] = 0x80 | (c & 0x3F);
        }
    }
    o[k] = 0;
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

void bn_toktext_build(bn_toktext *t, const char *const *surf, const size_t *lens, int m) {
    size_t total = 0;
    for (int i = 0; i < m; i++) total += lens[i];
    char *bytes = xmalloc(total + 1);
    size_t *tok_byte = xmalloc((size_t)(m + 1) * sizeof *tok_byte); // byte start of each token
    size_t pos = 0;
    for (int i = 0; i < m; i++) {
        tok_byte[i] = pos;
        if (lens[i]) memcpy(bytes + pos, surf[i], lens[i]);
        pos += lens[i];
    }
    tok_byte[m] = total;
    size_t *cp_byte = xmalloc((total + 1) * sizeof *cp_byte);
    t->m = m;
    t->cp = xmalloc((total + 1) * sizeof *t->cp);
    t->n_cp = bn_utf8_to_cps(bytes, total, t->cp, cp_byte);
    t->off = xmalloc((size_t)(m + 1) * sizeof *t->off);
    // off[i] = number of code points whose first byte lies before token i's first byte.
    size_t c = 0;
    for (int i = 0; i <= m; i++) {
        while (c < t->n_cp && cp_byte[c] < tok_byte[i]) c++;
        t->off[i] = c;
    }
    t->off[m] = t->n_cp;
    free(cp_byte);
    free(tok_byte);
    free(bytes);
}

void bn_toktext_free(bn_toktext *t) {
    free(t->cp);
    free(t->off);
    t->cp = NULL;
    t->off = NULL;
    t->m = 0;
    t->n_cp = 0;
}

bn_span bn_toktext_span(const bn_toktext *t, int i) {
    bn_span s = {t->cp + t->off[i], t->off[i + 1] - t->off[i]};
    return s;
}

int bn_toktext_token_at(const bn_toktext *t, size_t c) {
    if (c >= t->n_cp || t->m == 0) return -1;
    // Last token whose start offset is <= c (empty tokens share an offset with their successor).
    int lo = 0, hi = t->m - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->off[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
