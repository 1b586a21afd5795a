// tests/quant/test_act_cpu.c — bn_quantize_act_q8_0 / q8_1 / q8_K are byte-identical to llama.cpp's own
// CPU-backend activation quantizers (ggml_get_type_traits_cpu(type)->from_float of the prebuilt
// libggml-cpu-<variant>.so this CPU scores best on), on random rows of several scales, zero blocks and
// exact ties (where nearest-even and roundf differ). Also checks the tie rows DO differ from the
// reference quantizer, so the comparison can fail. Run with BONSAI_SIMD=scalar/avx2 for both paths.
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "tests/test.h"
#include "quant/quant.h"
#include "tests/quant/ggml_base.h"

enum { GGML_Q8_0 = 8, GGML_Q8_1 = 9, GGML_Q8_K = 15 };
enum { N = 4096 };   // row length (multiple of 256), 16 rows per pattern

// best_cpu_traits: loads the libggml-cpu variant with the highest ggml_backend_score on this CPU;
// returns its ggml_get_type_traits_cpu, or NULL (name of the chosen variant in chosen).
typedef const ggml_cpu_traits *(*traits_fn)(int);
static traits_fn best_cpu_traits(char *chosen, size_t n) {
    static const char *variants[] = {"x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell",
                                     "skylakex", "cannonlake", "cascadelake", "cooperlake", "icelake",
                                     "alderlake", "sapphirerapids", "zen4"};
    int best_score = 0;
    void *best = NULL;
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "node-llama-cpp/bins/linux-x64/libggml-cpu-%s.so", variants[i]);
        test_third_party(path, sizeof path, rel);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
        int s = score ? score() : 0;
        if (s > best_score) {
            best_score = s;
            best = h;
            snprintf(chosen, n, "%s", variants[i]);
        }
    }
    if (!best) return NULL;
    void (*init)(void) = (void (*)(void))dlsym(best, "ggml_cpu_init");
    if (init) init();
    return (traits_fn)dlsym(best, "ggml_get_type_traits_cpu");
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) {   // uniform in [-1, 1)
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

// fill_pattern: pattern p of N floats (random of several scales, zero blocks, exact ties).
static void fill_pattern(int p, float *x) {
    for (int i = 0; i < N; i++) {
        switch (p) {
        case 0: x[i] = urand(); break;
        case 1: x[i] = urand() * 1e3f * urand(); break;                     // wide range
        case 2: x[i] = (i / 32) % 3 == 0 ? 0.0f : urand() * 1e-6f; break;    // zero blocks, small d
        case 3: {   // ties: each block has amax 127 (id = 1 exactly) and halves k + 0.5
            int j = i % 32;
            x[i] = j == 0 ? 127.0f : (float)((int)(urand() * 120.0f)) + 0.5f;
            break;
        }
        case 4: {   // ties with id = 0.5: amax 254, odd integers -> .5 after scaling
            int j = i % 32;
            x[i] = j == 5 ? -254.0f : (float)(2 * (int)(urand() * 100.0f) + 1);
            break;
        }
        default: x[i] = urand() * 40.0f; break;                                // typical hidden state
        }
    }
}

int main(void) {
    char why[1200], chosen[64] = "";
    if (ggml_base_open(why, sizeof why) != 0) { printf("SKIP: %s\n", why); return 77; }
    traits_fn traits = best_cpu_traits(chosen, sizeof chosen);
    if (!traits) { printf("SKIP: no libggml-cpu-*.so loadable under BONSAI_THIRD_PARTY\n"); return 77; }
    printf("ggml CPU variant: %s, bonsai SIMD: %s\n", chosen, bn_simd_name());

    struct { int ggml, bn; void (*act)(const float *, void *, int64_t); void (*ref)(const float *, void *, int64_t); }
        types[] = {{GGML_Q8_0, BN_Q8_0, bn_quantize_act_q8_0, bn_quantize_row_q8_0},
                   {GGML_Q8_1, BN_Q8_1, bn_quantize_act_q8_1, bn_quantize_row_q8_1},
                   {GGML_Q8_K, BN_Q8_K, bn_quantize_act_q8_K, bn_quantize_row_q8_K}};
    float *x = malloc(N * sizeof(float));
    size_t cap = bn_row_size(BN_Q8_1, N) + bn_row_size(BN_Q8_K, N);
    uint8_t *a = malloc(cap), *b = malloc(cap), *r = malloc(cap);
    int tie_rows_differ_from_ref = 0;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const ggml_cpu_traits *tr = traits(types[t].ggml);
        CHECK(tr && tr->from_float, "ggml traits for type %d", types[t].ggml);
        if (!tr || !tr->from_float) continue;
        size_t bytes = bn_row_size(types[t].bn, N);
        int mismatching_rows = 0, rows = 0;
        for (int p = 0; p < 6; p++) {
            for (int rep = 0; rep < 16; rep++) {
                fill_pattern(p, x);
                memset(a, 0x55, bytes);
                memset(b, 0xaa, bytes);
                tr->from_float(x, a, N);
                types[t].act(x, b, N);
                size_t written = bn_quantize_activations_cpu(types[t].bn, x, r, N);
                CHECK(written == bytes && memcmp(r, b, bytes) == 0, "bn_quantize_activations_cpu type %d", types[t].bn);
                rows++;
                if (memcmp(a, b, bytes) != 0) mismatching_rows++;
                if ((p == 3 || p == 4) && types[t].bn != BN_Q8_K) {
                    types[t].ref(x, r, N);
                    if (memcmp(r, b, bytes) != 0) tie_rows_differ_from_ref++;
                }
            }
        }
        printf("type %d: %d/%d rows byte-identical to ggml-cpu from_float\n", types[t].bn, rows - mismatching_rows, rows);
        CHECK(mismatching_rows == 0, "type %d: %d rows differ", types[t].bn, mismatching_rows);   // bit-exact
    }
    // the tie patterns must actually separate nearest-even from roundf (else the test could not fail)
    printf("tie rows differing from the *_ref quantizer: %d of 64\n", tie_rows_differ_from_ref);
    CHECK(tie_rows_differ_from_ref == 64, "only %d", tie_rows_differ_from_ref);
    free(x); free(a); free(b); free(r);
    return test_done("test_act_cpu");
}
