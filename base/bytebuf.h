// base/bytebuf.h — the little-endian byte buffers the checkpoint files are written from and read
// back through (train/checkpoint.c, train/sft.c): append with bn_put / BN_PUT, read with
// bn_get / BN_GET.
#ifndef BONSAI_BASE_BYTEBUF_H
#define BONSAI_BASE_BYTEBUF_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "base/util.h"

typedef struct { uint8_t *p; size_t n, cap; } bn_buf;

// bn_put: appends n bytes (grows the buffer; dies on OOM).
static inline void bn_put(bn_buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
// BN_PUT: appends the bytes of lvalue v.
#define BN_PUT(b, v) bn_put((b), &(v), sizeof(v))

typedef struct { const uint8_t *p; size_t n, at; } bn_rbuf;

// bn_get: reads n bytes into dst; returns 0, or -1 when fewer than n bytes are left.
static inline int bn_get(bn_rbuf *r, void *dst, size_t n) {
    if (r->n - r->at < n) return -1;
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}
// BN_GET: reads sizeof(v) bytes into lvalue v; returns 0 or -1 as bn_get.
#define BN_GET(r, v) bn_get((r), &(v), sizeof(v))

#endif
