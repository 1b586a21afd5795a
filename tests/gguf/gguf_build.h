// tests/gguf/gguf_build.h — a byte-buffer builder for hand-made (valid or broken) GGUF files,
// shared by test_gguf.c. Everything little-endian (docs/formats.md §1).
#ifndef BONSAI_TEST_GGUF_BUILD_H
#define BONSAI_TEST_GGUF_BUILD_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
// bb_strn: GGUF string with an explicit (possibly lying) length prefix and n real bytes.
static void bb_strn(bb *b, uint64_t len, const char *s, size_t n) {
    bb_u64(b, len);
    bb_put(b, s, n);
}
static void bb_str(bb *b, const char *s) { bb_strn(b, strlen(s), s, strlen(s)); }
// bb_pad: zero bytes up to a multiple of a.
static void bb_pad(bb *b, size_t a) {
    while (b->n % a) bb_u8(b, 0);
}
static void bb_zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}

#endif
