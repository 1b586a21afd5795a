// train/bpe.c — byte-level BPE training and the vocab GGUF. See bpe.h.
#include "train/bpe.h"
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include "base/util.h"
#include "gguf/gguf.h"
#include "base/unicode.h"

enum { CL_SPACE, CL_WS, CL_LETTER, CL_DIGIT, CL_OTHER };

static int byte_class(uint8_t c) {
    if (c == ' ') return CL_SPACE;
    if (c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') return CL_WS;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CL_LETTER;
    if (c >= '0' && c <= '9') return CL_DIGIT;
    return CL_OTHER;
}
static bool is_ws(int cl) { return cl == CL_SPACE || cl == CL_WS; }

// chunk_end: end of the chunk starting at i (see bpe.h).
static size_t chunk_end(const uint8_t *s, size_t n, size_t i) {
    size_t j = i;
    if (s[j] == ' ' && j + 1 < n && !is_ws(byte_class(s[j + 1]))) j++; // leading space joins the word
    int cl = byte_class(s[j]);
    if (is_ws(cl)) {
        while (j < n && is_ws(byte_class(s[j]))) j++;
        if (j < n && j - i > 1 && s[j - 1] == ' ') j--; // leave the last space to the next word
        return j;
    }
    while (j < n && byte_class(s[j]) == cl) j++;
    return j;
}

typedef struct {
    int32_t *sym;  // symbols (token ids)
    int n;
    int64_t freq;
} word_t;

// ---- a uint64 → int64 open-addressing map (key 0 never used: pairs are stored +1) -------------
typedef struct { uint64_t *k; int64_t *v; size_t cap; } map_t;

static void map_init(map_t *m, size_t min_cap) {
    m->cap = 1024;
    while (m->cap < 2 * min_cap) m->cap *= 2;
    m->k = xcalloc(m->cap, sizeof(uint64_t));
    m->v = xcalloc(m->cap, sizeof(int64_t));
}
static void map_clear(map_t *m) { memset(m->k, 0, m->cap * sizeof(uint64_t)); }
static void map_free(map_t *m) { free(m->k); free(m->v); }
static int64_t *map_slot(map_t *m, uint64_t key) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (m->cap - 1);
    while (m->k[h] && m->k[h] != key) h = (h + 1) & (m->cap - 1);
    if (!m->k[h]) { m->k[h] = key; m->v[h] = 0; }
    return &m->v[h];
}
// map_has: true if key was inserted (no insertion).
static bool map_has(const map_t *m, uint64_t key) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (m->cap - 1);
    while (m->k[h] && m->k[h] != key) h = (h + 1) & (m->cap - 1);
    return m->k[h] == key;
}

// ---- unique chunks -----------------------------------------------------------------------------
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h | 1;
}

// collect_words: the unique chunks of the text with their counts; returns the number of words.
static int collect_words(const uint8_t *s, size_t n, word_t **out) {
    size_t cap = 1024;
    while (cap < n / 2 + 16) cap *= 2;
    uint64_t *hk = xcalloc(cap, sizeof(uint64_t));
    int32_t *hw = xcalloc(cap, sizeof(int32_t));
    const uint8_t **wp = NULL;
    word_t *w = NULL;
    int nw = 0, wcap = 0;
    for (size_t i = 0; i < n;) {
        size_t j = chunk_end(s, n, i);
        uint64_t h = hash_bytes(s + i, j - i);
        size_t slot = (size_t)(h >> 7) & (cap - 1);
        int found = -1;
        while (hk[slot]) {
            int c = hw[slot];
            if (hk[slot] == h && w[c].n == (int)(j - i) && memcmp(wp[c], s + i, j - i) == 0) { found = c; break; }
            slot = (slot + 1) & (cap - 1);
        }
        if (found < 0) {
            if (nw == wcap) {
                wcap = wcap ? 2 * wcap : 1024;
                w = xrealloc(w, sizeof(word_t) * wcap);
                wp = xrealloc(wp, sizeof(*wp) * wcap);
            }
            w[nw].n = (int)(j - i);
            w[nw].freq = 0;
            w[nw].sym = xmalloc(sizeof(int32_t) * (j - i));
            for (size_t k = i; k < j; k++) w[nw].sym[k - i] = s[k];
            wp[nw] = s + i;
            hk[slot] = h;
            hw[slot] = nw;
            found = nw++;
        }
        w[found].freq++;
        i = j;
    }
    free(hk);
    free(hw);
    free(wp);
    *out = w;
    return nw;
}

// byte_token: the GPT-2 bytes_to_unicode char of byte b, UTF-8, malloc'd.
static char *byte_token(int b) {
    char buf[8];
    int k = bn_utf8_encode(bn_byte_to_cp((uint8_t)b), buf);
    buf[k] = 0;
    return xstrdup(buf);
}

int bn_bpe_train_vocab(const char *text, size_t len, int n_vocab, const char *path, char *err, size_t errlen) {
    if (n_vocab < 259) return bn_err(err, errlen, "bpe: n_vocab %d < 259 (256 bytes + 3 control tokens)", n_vocab);
    const int max_merges = n_vocab - 259;
    word_t *w = NULL;
    int nw = collect_words((const uint8_t *)text, len, &w);
    size_t total = 0;
    for (int i = 0; i < nw; i++) total += (size_t)w[i].n;
    char **tok = xmalloc(sizeof(char *) * (size_t)n_vocab);
    char **merges = xmalloc(sizeof(char *) * (size_t)(max_merges > 0 ? max_merges : 1));
    int n_tok = 0, n_merges = 0;
    for (int b = 0; b < 256; b++) tok[n_tok++] = byte_token(b);
    map_t counts, banned;
    map_init(&counts, total + 1);
    map_init(&banned, total + 1); // a banned pair is one of the distinct pairs: at most total
    while (n_merges < max_merges) {
        map_clear(&counts);
        for (int i = 0; i < nw; i++)
            for (int k = 0; k + 1 < w[i].n; k++)
                *map_slot(&counts, ((uint64_t)w[i].sym[k] << 32 | (uint32_t)w[i].sym[k + 1]) + 1) += w[i].freq;
        // best pair: highest count >= 2, not banned; ties: the smaller key
        uint64_t best = 0;
        int64_t best_c = 2;
        for (size_t h = 0; h < counts.cap; h++) {
            uint64_t k = counts.k[h];
            if (!k) continue;
            int64_t c = counts.v[h];
            if (c < best_c || (c == best_c && best && k > best)) continue;
            if (map_has(&banned, k)) continue;
            best = k;
            best_c = c;
        }
        if (!best) break;
        const int32_t a = (int32_t)((best - 1) >> 32), b = (int32_t)((best - 1) & 0xffffffffu);
        size_t la = strlen(tok[a]), lb = strlen(tok[b]);
        char *merged = xmalloc(la + lb + 1);
        memcpy(merged, tok[a], la);
        memcpy(merged + la, tok[b], lb + 1);
        bool dup = false;
        for (int t = 0; t < n_tok && !dup; t++) dup = strcmp(tok[t], merged) == 0;
        if (dup) { // the same string from another split: skip this pair for good
            *map_slot(&banned, best) = 1;
            free(merged);
            continue;
        }
        const int32_t id = n_tok;
        tok[n_tok++] = merged;
        char *m = xmalloc(la + lb + 2);
        memcpy(m, tok[a], la);
        m[la] = ' ';
        memcpy(m + la + 1, tok[b], lb + 1);
        merges[n_merges++] = m;
        for (int i = 0; i < nw; i++) {
            int o = 0;
            for (int k = 0; k < w[i].n; k++) {
                if (k + 1 < w[i].n && w[i].sym[k] == a && w[i].sym[k + 1] == b) { w[i].sym[o++] = id; k++; }
                else w[i].sym[o++] = w[i].sym[k];
            }
            w[i].n = o;
        }
    }
    map_free(&counts);
    map_free(&banned);
    for (int i = 0; i < nw; i++) free(w[i].sym);
    free(w);
    const int eos = n_tok;
    tok[n_tok++] = xstrdup("<|endoftext|>");
    tok[n_tok++] = xstrdup("<|im_start|>");
    tok[n_tok++] = xstrdup("<|im_end|>");
    int32_t *types = xmalloc(sizeof(int32_t) * (size_t)n_tok);
    for (int t = 0; t < n_tok; t++) types[t] = t >= eos ? 3 : 1;
    gguf_writer *gw = gguf_writer_new();
    gguf_set_str(gw, "general.name", "bonsai-bpe");
    gguf_set_str(gw, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(gw, "tokenizer.ggml.pre", "qwen35");
    gguf_set_arr_str(gw, "tokenizer.ggml.tokens", (uint64_t)n_tok, (const char *const *)tok);
    gguf_set_arr(gw, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)n_tok, types);
    gguf_set_arr_str(gw, "tokenizer.ggml.merges", (uint64_t)n_merges, (const char *const *)merges);
    gguf_set_u32(gw, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    gguf_set_u32(gw, "tokenizer.ggml.padding_token_id", (uint32_t)eos);
    gguf_set_u32(gw, "tokenizer.ggml.bos_token_id", (uint32_t)eos);
    gguf_set_bool(gw, "tokenizer.ggml.add_bos_token", false);
    int rc = gguf_writer_write(gw, path, NULL, NULL, err, errlen);
    gguf_writer_free(gw);
    for (int t = 0; t < n_tok; t++) free(tok[t]);
    for (int t = 0; t < n_merges; t++) free(merges[t]);
    free(tok);
    free(merges);
    free(types);
    return rc ? -1 : n_tok;
}
