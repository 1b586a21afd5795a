// gguf/gguf_impl.h — what the GGUF reader (gguf/read.c) and writer (gguf/write.c) share; not a public header
// (gguf/gguf.h is).
#ifndef BONSAI_GGUF_IMPL_H
#define BONSAI_GGUF_IMPL_H
#include "gguf/gguf.h"
#include <stdlib.h>
#include <string.h>

// gguf_align_up: x rounded up to a multiple of a (a > 0).
static inline int64_t gguf_align_up(int64_t x, int64_t a) { return x + (a - x % a) % a; }

// gguf_kv_clear: frees what kv owns (key, data, strings) and zeroes it.
static inline void gguf_kv_clear(gguf_kv *kv) {
    free(kv->key);
    free(kv->data);
    free(kv->str);
    if (kv->strs)
        for (uint64_t i = 0; i < kv->n; i++) free(kv->strs[i]);
    free(kv->strs);
    free(kv->str_lens);
    memset(kv, 0, sizeof *kv);
}

#endif
