// tests/gguf/fuzz_gguf.c — libFuzzer target for the GGUF reader: gguf_open_mem on arbitrary bytes, then
// every accessor over every KV and tensor (reading each tensor's bytes, so ASan sees any view that
// leaves the buffer).
//
// In the suite (any compiler) test gguf_fuzz_replay runs it without libFuzzer: tests/fuzz_replay.c feeds it the seed
// corpus and fixed-seed mutants of it.
// Build and run (needs clang with libFuzzer; the whole build uses clang):
//   CC=clang meson setup build-fuzz -Dfuzz=true
//   ninja -C build-fuzz tests/gguf/fuzz_gguf
//   mkdir -p /tmp/gguf-fuzz-corpus
//   ./build-fuzz/tests/gguf/fuzz_gguf -max_total_time=180 -max_len=4096 /tmp/gguf-fuzz-corpus tests/gguf/corpus
// (the first directory collects new inputs; tests/gguf/corpus is the checked-in seed corpus). A crash
// leaves crash-<sha1> in the current directory; replay it with ./build-fuzz/tests/gguf/fuzz_gguf crash-<sha1>.
#include "gguf/gguf.h"
#include "quant/quant.h"
#include <stdint.h>
#include <stddef.h>
#include <string.h>

static volatile uint64_t sink;

static void walk_kv(const gguf_file *f, const gguf_kv *kv) {
    int64_t i64;
    uint32_t u32;
    float f32;
    bool b;
    sink += gguf_find_key(f, kv->key);
    sink += gguf_get_int(f, kv->key, &i64);
    sink += gguf_get_u32(f, kv->key, &u32);
    sink += gguf_get_f32(f, kv->key, &f32);
    sink += gguf_get_bool(f, kv->key, &b);
    const char *s = gguf_get_str(f, kv->key);
    if (s) sink += strlen(s) + (kv->str_len ? (uint8_t)s[kv->str_len - 1] : 0);
    sink += strlen(gguf_type_name(kv->type));
    const gguf_kv *a = gguf_get_arr(f, kv->key);
    if (!a) return;
    if (a->arr_type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < a->n; i++) sink += a->str_lens[i] ? (uint8_t)a->strs[i][a->str_lens[i] - 1] : 0;
    } else {
        size_t nb = a->n * gguf_type_size(a->arr_type);
        if (nb) sink += ((const uint8_t *)a->data)[nb - 1];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    gguf_file *f = gguf_open_mem(data, size, err, sizeof err);
    if (!f) {
        sink += strlen(err);
        return 0;
    }
    for (size_t i = 0; i < f->n_kv; i++) walk_kv(f, &f->kv[i]);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        sink += gguf_find_tensor(f, t->name) == t;
        sink += (uint64_t)gguf_tensor_nelements(t) + strlen(bn_type_name(t->type));
        const uint8_t *d = t->data;
        if (t->nbytes) sink += d[0] + d[t->nbytes - 1];
        for (size_t k = 0; k < t->nbytes; k += 61) sink += d[k];
    }
    gguf_close(f);
    return 0;
}
