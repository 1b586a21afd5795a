// base/strmap.h — a small string -> dense index map (open addressing, FNV-1a), used to count
// tokens, sources and contexts. Keys are byte strings (copied); indices are 0, 1, 2, ... in order
// of first insertion.
#ifndef BONSAI_DETECT_STRMAP_H
#define BONSAI_DETECT_STRMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **keys;      // {n} copies, by index
    size_t *key_len;  // {n}
    int n;
    int *slots;       // {cap} index + 1, 0 = empty
    uint64_t *hashes; // {cap}
    size_t cap;
} bn_strmap;

// bn_strmap_init: an empty map.
void bn_strmap_init(bn_strmap *m);
// bn_strmap_get: returns the index of key, inserting it when absent (*inserted set if non-NULL).
int bn_strmap_get(bn_strmap *m, const void *key, size_t len, int *inserted);
// bn_strmap_find: returns the index of key or -1.
int bn_strmap_find(const bn_strmap *m, const void *key, size_t len);
// bn_strmap_free: releases everything.
void bn_strmap_free(bn_strmap *m);
#endif
