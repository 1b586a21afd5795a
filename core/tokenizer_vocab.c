// core/tokenizer_vocab.c — the tokenizer's string tables (docs/model.md §11): strings are interned once, so every
// vocab text and every merge part/result gets a symbol index and merging compares integers; the merge table maps a
// pair of symbols to its rank and result. Built by core/tokenizer.c while loading, read by the encoders
// (core/tokenizer_encode.c).
#include "core/tokenizer_vocab.h"

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// bn_tok_find: sym index of s[0..n) or -1.
int64_t bn_tok_find(const bn_tokenizer *t, const char *s, size_t n) {
    if (!t->ht_cap) return -1;
    size_t mask = t->ht_cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->ht[i];
        if (!v) return -1;
        const intern_sym *y = &t->syms[v - 1];
        if (y->len == n && memcmp(t->arena + y->off, s, n) == 0) return v - 1;
    }
}

static void intern_grow(bn_tokenizer *t) {
    size_t cap = t->ht_cap ? t->ht_cap * 2 : 1024;
    uint32_t *ht = xcalloc(cap, sizeof *ht);
    for (size_t k = 0; k < t->n_syms; k++) {
        const intern_sym *y = &t->syms[k];
        size_t i = hash_bytes(t->arena + y->off, y->len) & (cap - 1);
        while (ht[i]) i = (i + 1) & (cap - 1);
        ht[i] = (uint32_t)k + 1;
    }
    free(t->ht);
    t->ht = ht;
    t->ht_cap = cap;
}

// arena_add: copies s[0..n) (plus a NUL) into the arena; returns its offset.
static uint32_t arena_add(bn_tokenizer *t, const char *s, size_t n) {
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_len + n + 1) cap *= 2;
        t->arena = xrealloc(t->arena, cap);
        t->arena_cap = cap;
    }
    uint32_t off = (uint32_t)t->arena_len;
    memcpy(t->arena + off, s, n);
    t->arena[off + n] = 0;
    t->arena_len += n + 1;
    return off;
}

// bn_tok_intern: sym index of s[0..n), inserting it if new.
int64_t bn_tok_intern(bn_tokenizer *t, const char *s, size_t n) {
    int64_t found = bn_tok_find(t, s, n);
    if (found >= 0) return found;
    if ((t->n_syms + 1) * 2 > t->ht_cap) intern_grow(t);
    if (t->n_syms == t->syms_cap) {
        t->syms_cap = t->syms_cap ? t->syms_cap * 2 : 1024;
        t->syms = xrealloc(t->syms, t->syms_cap * sizeof *t->syms);
    }
    intern_sym *y = &t->syms[t->n_syms];
    y->off = arena_add(t, s, n);
    y->len = (uint32_t)n;
    y->tok = -1;
    size_t mask = t->ht_cap - 1, i = hash_bytes(s, n) & mask;
    while (t->ht[i]) i = (i + 1) & mask;
    t->ht[i] = (uint32_t)t->n_syms + 1;
    return (int64_t)t->n_syms++;
}

// bn_tok_merge: rank of merging syms (a, b) (result sym in *res), or -1.
int32_t bn_tok_merge(const bn_tokenizer *t, uint32_t a, uint32_t b, int32_t *res) {
    if (!t->m_cap) return -1;
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t mask = t->m_cap - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (t->mrank[i] < 0) return -1;
        if (t->mkey[i] == key) { *res = t->mres[i]; return t->mrank[i]; }
    }
}

// bn_tok_merge_add: records (a, b) → res at rank unless the pair already has a (lower) rank.
void bn_tok_merge_add(bn_tokenizer *t, uint32_t a, uint32_t b, int32_t res, int32_t rank) {
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t mask = t->m_cap - 1, i = hash_u64(key) & mask;
    while (t->mrank[i] >= 0) {
        if (t->mkey[i] == key) return;
        i = (i + 1) & mask;
    }
    t->mkey[i] = key;
    t->mrank[i] = rank;
    t->mres[i] = res;
}
