// base/bytebuf.h — the little-endian byte buffers the checkpoint files are written from and read
// back through (train/checkpoint.c, train/sft.c): append with PUT/put, read with GET/get.
#ifndef BONSAI_TRAIN_BYTEBUF_H
#define BONSAI_TRAIN_BYTEBUF_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "base/util.h"

typedef struct { uint8_t *p; size_t n, cap; } buf_t;

// put: appends n bytes (grows the buffer; dies on OOM).
static inline void put(buf_t *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
#define PUT(b, v) put((b), &(v), sizeof(v))

typedef struct { const uint8_t *p; size_t n, at; } rd_t;

// get: reads n bytes into dst; returns 0, or -1 when fewer than n bytes are left.
static inline int get(rd_t *r, void *dst, size_t n) {
    if (r->n - r->at < n) return -1;
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}
#define GET(r, v) get((r), &(v), sizeof(v))

#endif
