// base/strmap.c — string -> index hash map.
#include "base/strmap.h"
#include "base/util.h"
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    return h;
}

void bn_strmap_init(bn_strmap *m) { memset(m, 0, sizeof *m); }

static int lookup(const bn_strmap *m, const void *key, size_t len, uint64_t h, size_t *slot) {
    size_t i = h & (m->cap - 1);
    while (m->slots[i]) {
        int idx = m->slots[i] - 1;
        if (m->hashes[i] == h && m->key_len[idx] == len && memcmp(m->keys[idx], key, len) == 0) {
            *slot = i;
            return idx;
        }
        i = (i + 1) & (m->cap - 1);
    }
    *slot = i;
    return -1;
}

static void grow(bn_strmap *m) {
    size_t old_cap = m->cap;
    int *old_slots = m->slots;
    uint64_t *old_h = m->hashes;
    m->cap = old_cap ? 2 * old_cap : 64;
    m->slots = xcalloc(m->cap, sizeof *m->slots);
    m->hashes = xcalloc(m->cap, sizeof *m->hashes);
    for (size_t i = 0; i < old_cap; i++) {
        if (!old_slots[i]) continue;
        size_t j = old_h[i] & (m->cap - 1);
        while (m->slots[j]) j = (j + 1) & (m->cap - 1);
        m->slots[j] = old_slots[i];
        m->hashes[j] = old_h[i];
    }
    free(old_slots);
    free(old_h);
    m->keys = xrealloc(m->keys, m->cap * sizeof *m->keys);
    m->key_len = xrealloc(m->key_len, m->cap * sizeof *m->key_len);
}

int bn_strmap_find(const bn_strmap *m, const void *key, size_t len) {
    if (!m->cap) return -1;
    size_t slot;
    return lookup(m, key, len, fnv1a(key, len), &slot);
}

int bn_strmap_get(bn_strmap *m, const void *key, size_t len, int *inserted) {
    if (2 * (size_t)(m->n + 1) > m->cap) grow(m);
    uint64_t h = fnv1a(key, len);
    size_t slot;
    int idx = lookup(m, key, len, h, &slot);
    if (inserted) *inserted = idx < 0;
    if (idx >= 0) return idx;
    idx = m->n++;
    m->keys[idx] = xmalloc(len + 1);
    memcpy(m->keys[idx], key, len);
    m->keys[idx][len] = 0;
    m->key_len[idx] = len;
    m->slots[slot] = idx + 1;
    m->hashes[slot] = h;
    return idx;
}

void bn_strmap_free(bn_strmap *m) {
    for (int i = 0; i < m->n; i++) free(m->keys[i]);
    free(m->keys);
    free(m->key_len);
    free(m->slots);
    free(m->hashes);
    memset(m, 0, sizeof *m);
}
