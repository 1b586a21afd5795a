// tests/convert/fuzz_safetensors.c — libFuzzer target for the safetensors reader (bonsai-convert's input): the
// input's first byte sets how many data bytes follow the header (0..255, a pattern), the rest is the JSON header;
// the file is written to a temp path and opened, then every accepted tensor is converted to f32 (so ASan sees any
// view that leaves the mapping) and its element count must match its byte count.
//
// In the suite (any compiler) test convert_fuzz_replay runs it without libFuzzer: tests/fuzz_replay.c feeds it the seed
// corpus and fixed-seed mutants of it.
// Build and run (clang with libFuzzer; see tests/records/fuzz_lines.c for the build directory):
//   ninja -C build-fuzz tests/convert/fuzz_safetensors
//   mkdir -p /tmp/st-corpus && ./build-fuzz/tests/convert/fuzz_safetensors -max_total_time=120 /tmp/st-corpus tests/convert/corpus
#include "convert/safetensors.h"
#include "quant/quant.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz-st-%d.safetensors", (int)getpid());
    const size_t hlen = size - 1, dlen = data[0];
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(data + 1, 1, hlen, f);
    for (size_t i = 0; i < dlen; i++) fputc((int)(i * 37 & 255), f);
    fclose(f);
    char err[512];
    bn_safetensors *st = bn_st_open_file(path, err, sizeof err);
    if (st) {
        for (int i = 0; i < st->n_tensors; i++) {
            const bn_st_tensor *t = &st->t[i];
            int64_t n = bn_st_nelements(t);
            size_t esize = t->type == BN_F32 ? 4 : 2;
            if (n < 0 || (size_t)n * esize != t->nbytes) abort(); // the reader's own invariant
            float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
            bn_st_to_f32(t->type, t->data, out, n);
            free(out);
            if (bn_st_find(st, t->name) == NULL) abort();
        }
        bn_st_close(st);
    }
    return 0;
}
