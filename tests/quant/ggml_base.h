// tests/quant/ggml_base.h — dlopen of the prebuilt llama.cpp libggml-base.so (reference quantizers,
// dequantizers, fp16/bf16 conversions) and libggml-cpu-haswell.so (CPU vec_dot) for the quant tests.
// Path: $BONSAI_THIRD_PARTY/node-llama-cpp/bins/linux-x64/. Missing library -> the caller skips.
#ifndef BONSAI_TESTS_GGML_BASE_H
#define BONSAI_TESTS_GGML_BASE_H
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include "tests/test.h"

typedef void (*ggml_quantize_ref_fn)(const float *x, void *y, int64_t k);
typedef void (*ggml_dequantize_fn)(const void *x, float *y, int64_t k);
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by,
                                int nrc);
// Mirror of ggml's struct ggml_type_traits_cpu (ggml-cpu.h).
typedef struct {
    void (*from_float)(const float *x, void *y, int64_t k);
    ggml_vec_dot_fn vec_dot;
    int vec_dot_type;
    int64_t nrows;
} ggml_cpu_traits;

static void *ggml_base_handle, *ggml_cpu_handle;

// ggml_base_open: loads libggml-base.so; returns 0, or -1 with the reason in why.
static inline int ggml_base_open(char *why, size_t n) {
    char path[1024];
    test_third_party(path, sizeof path, "node-llama-cpp/bins/linux-x64/libggml-base.so");
    ggml_base_handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!ggml_base_handle) {
        snprintf(why, n, "llama.cpp reference %s not loadable (%s); run ./scripts/fetch-llamacpp.sh", path, dlerror());
        return -1;
    }
    return 0;
}

// ggml_sym: a symbol of libggml-base.so (NULL if absent).
static inline void *ggml_sym(const char *name) { return ggml_base_handle ? dlsym(ggml_base_handle, name) : NULL; }

// ggml_cpu_traits_of: the CPU backend's traits for a ggml type id (NULL if the CPU library is missing).
static inline const ggml_cpu_traits *ggml_cpu_traits_of(int type) {
    if (!ggml_cpu_handle) {
        char path[1024];
        test_third_party(path, sizeof path, "node-llama-cpp/bins/linux-x64/libggml-cpu-haswell.so");
        ggml_cpu_handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!ggml_cpu_handle) return NULL;
        void (*init)(void) = (void (*)(void))dlsym(ggml_cpu_handle, "ggml_cpu_init");
        if (init) init();
    }
    const ggml_cpu_traits *(*get)(int) = (const ggml_cpu_traits *(*)(int))dlsym(ggml_cpu_handle, "ggml_get_type_traits_cpu");
    return get ? get(type) : NULL;
}
#endif
