// tests/quant/test_float_rows.c — the F32 / F16 / BF16 weight kernels with f32 activations (quant/float_rows.c,
// quant/float_avx512.c), for row lengths 1..1100 (tails of every size, more than one gemm panel of 512 elements),
// 75 weight rows (past the blocks of 8, 32 and 64 rows) and up to 19 activation rows (past the tiles of 8):
//   1. bn_float_rows and bn_float_gemm are within the rounding bound of any fp32 summation order of the exact
//      double-precision dot: |got - ref| <= 1.01 * n * 2^-24 * sum|w_i * x_i| + 1e-30;
//   2. bn_float_rows gives each result bit for bit as a call with that one weight row and one activation row, with
//      the rows split into calls anywhere (the decode mat-vec and a verify pass agree);
//   3. with AVX-512, bn_float_rows equals bit for bit a scalar model of its formula (two 16-lane fma accumulators,
//      masked tail, sum by halving) and bn_float_gemm a sequential fmaf over the elements.
// Runs with BONSAI_SIMD unset (AVX-512 where present), =avx2 and =scalar (tests/quant/meson.build).
#include "quant/quant.h"
#include "tests/test.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float uniform(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

enum { NROWS = 75, NY = 19, NMAX = 1100, W_PAD = 24, X_PAD = 5 };
static const int lengths[] = {1, 5, 16, 17, 31, 32, 33, 100, 256, 1100};

// value: element i of a weight row of the given type as f32.
static float value(int type, const void *row, int i) {
    if (type == BN_F32) return ((const float *)row)[i];
    uint16_t h = ((const uint16_t *)row)[i];
    return type == BN_F16 ? bn_fp16_to_fp32(h) : bn_bf16_to_fp32(h);
}

// model_rows: the AVX-512 row formula in scalar code (see quant/float_avx512.c).
static float model_rows(int type, const void *w, const float *x, int n) {
    float a0[16] = {0}, a1[16] = {0}, v[16];
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 16; l++) {
            a0[l] = fmaf(value(type, w, i + l), x[i + l], a0[l]);
            a1[l] = fmaf(value(type, w, i + 16 + l), x[i + 16 + l], a1[l]);
        }
    for (int l = 0; i + l < n; l++) {
        if (l < 16) a0[l] = fmaf(value(type, w, i + l), x[i + l], a0[l]);
        else a1[l - 16] = fmaf(value(type, w, i + l), x[i + l], a1[l - 16]);
    }
    for (int l = 0; l < 16; l++) v[l] = a0[l] + a1[l];
    for (int l = 0; l < 8; l++) v[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; l++) v[l] = v[l] + v[l + 4];
    return (v[0] + v[2]) + (v[1] + v[3]);
}

// model_gemm: the gemm's sum, sequential fmaf in element order.
static float model_gemm(int type, const void *w, const float *x, int n) {
    float c = 0.0f;
    for (int i = 0; i < n; i++) c = fmaf(value(type, w, i), x[i], c);
    return c;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void check(int type, int n, const char *w, size_t ws, const float *x, size_t xs) {
    static float s[NY * NROWS], s1[NY * NROWS], s2[NY * NROWS], g[NY * NROWS];
    const char *name = bn_type_name(type);
    // whole calls, and calls split at odd rows / activation rows
    bn_float_rows(type, n, NROWS, NY, s, NROWS, w, ws, x, xs);
    for (int r = 0; r < NROWS; r++)
        for (int t = 0; t < NY; t++)
            bn_float_rows(type, n, 1, 1, &s1[t * NROWS + r], 1, w + r * ws, ws, x + t * xs, xs);
    const int have_gemm = bn_float_gemm(type, n, NROWS, NY, g, NROWS, w, ws, x, xs);
    const int rcut[] = {0, 3, 40, NROWS}, tcut[] = {0, 9, 11, NY};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const int r0 = rcut[a], t0 = tcut[b], nr = rcut[a + 1] - r0, nt = tcut[b + 1] - t0;
            bn_float_rows(type, n, nr, nt, s2 + t0 * NROWS + r0, NROWS, w + r0 * ws, ws, x + t0 * xs, xs);
        }
    int bad_ref = 0, bad_one = 0, bad_split = 0, bad_model = 0, bad_gemm_ref = 0, bad_gemm_model = 0;
    double worst = 0;
    for (int r = 0; r < NROWS; r++) {
        const char *row = w + r * ws;
        for (int t = 0; t < NY; t++) {
            const float *xt = x + t * xs;
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                ref += (double)value(type, row, i) * xt[i];
                mag += fabs((double)value(type, row, i) * xt[i]);
            }
            const double tol = 1.01 * n * 0x1p-24 * mag + 1e-30;
            const float got = s[t * NROWS + r];
            if (!(fabs(got - ref) <= tol)) bad_ref++;
            if (fabs(got - ref) / tol > worst) worst = fabs(got - ref) / tol;
            if (!same_bits(got, s1[t * NROWS + r])) bad_one++;
            if (!same_bits(got, s2[t * NROWS + r])) bad_split++;
            if (bn_cpu_has_avx512() && !same_bits(got, model_rows(type, row, xt, n))) bad_model++;
            if (have_gemm) {
                if (!(fabs(g[t * NROWS + r] - ref) <= tol)) bad_gemm_ref++;
                if (!same_bits(g[t * NROWS + r], model_gemm(type, row, xt, n))) bad_gemm_model++;
            }
        }
    }
    CHECK(bad_ref == 0, "%s n=%d: %d rows results off the double reference", name, n, bad_ref);
    CHECK(bad_one == 0, "%s n=%d: %d results differ from one-row calls", name, n, bad_one);
    CHECK(bad_split == 0, "%s n=%d: %d results change with the split into calls", name, n, bad_split);
    CHECK(bad_model == 0, "%s n=%d: %d results differ from the scalar model of the AVX-512 formula", name, n,
          bad_model);
    CHECK(bad_gemm_ref == 0, "%s n=%d: %d gemm results off the double reference", name, n, bad_gemm_ref);
    CHECK(bad_gemm_model == 0, "%s n=%d: %d gemm results differ from the sequential fmaf", name, n, bad_gemm_model);
    if (n == NMAX)
        printf("  %-4s n=%d: rows worst |error| = %.2g x bound%s\n", name, n, worst, have_gemm ? ", gemm on" : "");
}

int main(void) {
    printf("dispatch: %s\n", bn_simd_name());
    const int types[] = {BN_F32, BN_F16, BN_BF16};
    const size_t xs = NMAX + X_PAD;
    float *x = malloc(sizeof(float) * xs * NY);
    for (size_t i = 0; i < xs * NY; i++) x[i] = uniform() * (float)(1 + (i / xs) % 4);
    for (int k = 0; k < 3; k++) {
        const int type = types[k], es = type == BN_F32 ? 4 : 2;
        const size_t ws = (size_t)es * (NMAX + W_PAD);
        char *w = malloc(ws * NROWS);
        for (int r = 0; r < NROWS; r++)
            for (int i = 0; i < NMAX + W_PAD; i++) {
                float v = uniform() * (float)(1 + r % 3);
                if (r == 1 && i % 7 == 0) v *= 1e-6f; // F16 subnormals
                char *p = w + r * ws;
                if (type == BN_F32) ((float *)p)[i] = v;
                else ((uint16_t *)p)[i] = type == BN_F16 ? bn_fp32_to_fp16(v) : bn_fp32_to_bf16(v);
            }
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) check(type, lengths[li], w, ws, x, xs);
        free(w);
    }
    free(x);
    return test_done("test_float_rows");
}
