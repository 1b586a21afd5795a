// tests/cuda/dev_arrays.h — the host and device arrays of the trainer's op tests (test_cuda_bwd_ops.c,
// test_cuda_bwd_seq.c, test_cuda_fwd_ops.c, test_cuda_train_step.c): a fixed-seed xorshift, random vectors, copies
// to and from the device that count a failed transfer as a failed check, a bit-for-bit comparison. Include after
// tests/test.h; a test may define TEST_RNG_SEED first. Every test using it has its own `err` buffer here.
#ifndef BONSAI_TESTS_CUDA_DEV_ARRAYS_H
#define BONSAI_TESTS_CUDA_DEV_ARRAYS_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "base/util.h"
#include "cuda/cuda_dev_buf.h"
#include "quant/quant.h"

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#endif

static char err[512];
static uint64_t rng = TEST_RNG_SEED;

// frand: uniform in [−1, 1) (xorshift64 from TEST_RNG_SEED).
static inline float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

// rand_vec: n floats uniform in [−amp, amp) (at least one allocated).
static inline float *rand_vec(size_t n, float amp) {
    float *x = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = amp * frand();
    return x;
}

// to_dev: a device copy of host x[0..n) (x NULL: NULL).
static inline float *to_dev(const float *x, size_t n) {
    if (!x) return NULL;
    float *d = bn_cuda_dev_floats(n, err, sizeof err);
    CHECK(d, "%s", err);
    if (d) CHECK(bn_cuda_dev_upload(d, x, n, err, sizeof err) == 0, "%s", err);
    return d;
}

// from_dev: a host copy of device d[0..n), freeing d (d NULL: NULL).
static inline float *from_dev(float *d, size_t n) {
    if (!d) return NULL;
    float *x = xmalloc((n ? n : 1) * sizeof(float));
    CHECK(bn_cuda_dev_download(x, d, n, err, sizeof err) == 0, "%s", err);
    bn_cuda_dev_free(d);
    return x;
}

// bf16_rounded: a copy of x[0..n) with every value rounded to bf16 (nearest even) and widened back: what a bf16 GEMM
// operand holds (x NULL: NULL).
static inline float *bf16_rounded(const float *x, size_t n) {
    if (!x) return NULL;
    float *y = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) y[i] = bn_bf16_to_fp32(bn_fp32_to_bf16(x[i]));
    return y;
}

// check_bits: got and ref bit-identical over n floats (a failed check names how many differ).
static inline void check_bits(const char *what, const float *ref, const float *got, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(ref + i, got + i, sizeof(float)) != 0;
    CHECK(bad == 0, "%s: %zu of %zu floats differ", what, bad, n);
    printf("%-64s %s\n", what, bad ? "DIFFERS" : "bit-identical");
}

// rel_max_diff: max |got − ref| / max(1, max |ref|) over n values (the linear tests' measure).
static inline double rel_max_diff(const float *ref, const float *got, size_t n) {
    double worst = 0, scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]);
        worst = e > worst || e != e ? e : worst;
    }
    return worst / scale;
}

#endif
