// tests/quant/test_fp16.c — fp16/bf16 conversions (docs/formats.md §3.1–3.2): exhaustive fp16 round trip,
// edge cases, F16C row paths vs scalar, and ~1e6 random floats against ggml's conversions.
#include "quant/quant.h"
#include "tests/quant/ggml_base.h"
#include <string.h>

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }

static void check_f2h(float f, uint16_t want, const char *what) {
    uint16_t got = bn_fp32_to_fp16(f);
    CHECK(got == want, "%s: fp16(%a) = 0x%04x, want 0x%04x", what, f, got, want);
}

int main(void) {
    // 1. exhaustive fp16 -> fp32 -> fp16 (NaN codes come back as the canonical quiet NaN).
    int round_trip_bad = 0, row_bad = 0;
    static uint16_t all[65536];
    static float all_f[65536];
    for (int h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    bn_fp16_to_fp32_row(all, all_f, 65536);
    for (int h = 0; h < 65536; h++) {
        float f = bn_fp16_to_fp32((uint16_t)h);
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        uint16_t want = is_nan ? (uint16_t)((h & 0x8000) | 0x7e00) : (uint16_t)h;
        if (bn_fp32_to_fp16(f) != want) round_trip_bad++;
        if (f2u(all_f[h]) != f2u(f)) row_bad++;
    }
    CHECK(round_trip_bad == 0, "%d fp16 codes do not round-trip", round_trip_bad);
    CHECK(row_bad == 0, "%d fp16 codes differ between the row (%s) and scalar conversion", row_bad, bn_simd_name());
    CHECK(bn_fp16_to_fp32(0x0001) == 0x1p-24f, "smallest subnormal");
    CHECK(bn_fp16_to_fp32(0x7bff) == 65504.0f, "max finite");
    CHECK(f2u(bn_fp16_to_fp32(0x8000)) == 0x80000000u, "-0");

    // 2. fp32 -> fp16 edge cases (RNE, overflow at 65520, subnormals, NaN sign).
    check_f2h(65520.0f, 0x7c00, "65520 -> inf");
    check_f2h(-65520.0f, 0xfc00, "-65520 -> -inf");
    check_f2h(nextafterf(65520.0f, 0), 0x7bff, "just below 65520");
    check_f2h(65504.0f, 0x7bff, "65504");
    check_f2h(INFINITY, 0x7c00, "inf");
    check_f2h(u2f(0x7fc00000), 0x7e00, "NaN");
    check_f2h(u2f(0xffc00000), 0xfe00, "-NaN keeps sign");
    check_f2h(u2f(0x7f800001), 0x7e00, "signalling NaN");
    check_f2h(u2f(0xffffffff), 0xfe00, "-NaN with payload");
    check_f2h(-0.0f, 0x8000, "-0");
    check_f2h(0x1p-24f, 0x0001, "2^-24");
    check_f2h(0x1p-25f, 0x0000, "2^-25 ties to even (0)");
    check_f2h(nextafterf(0x1p-25f, 1), 0x0001, "just above 2^-25");
    check_f2h(3 * 0x1p-25f, 0x0002, "1.5 ulp subnormal ties to even (2)");
    check_f2h(5 * 0x1p-25f, 0x0002, "2.5 ulp subnormal ties to even (2)");
    check_f2h(0x1p-14f - 0x1p-25f, 0x0400, "tie between max subnormal and min normal");
    check_f2h(1.0f + 0x1p-11f, 0x3c00, "1 + half ulp ties to even");
    check_f2h(1.0f + 3 * 0x1p-11f, 0x3c02, "1 + 1.5 ulp ties to even");
    check_f2h(1e-10f, 0x0000, "tiny -> 0");
    check_f2h(-1e-10f, 0x8000, "-tiny -> -0");
    check_f2h(u2f(0x00000001), 0x0000, "fp32 subnormal -> 0");

    // 3. bf16 rules (§3.2).
    CHECK(bn_fp32_to_bf16(u2f(0x7f800001)) == 0x7fc0, "bf16 sNaN quieted");
    CHECK(bn_fp32_to_bf16(u2f(0xff800001)) == 0xffc0, "bf16 -sNaN quieted");
    CHECK(bn_fp32_to_bf16(u2f(0x3f808000)) == 0x3f80, "bf16 tie to even (down)");
    CHECK(bn_fp32_to_bf16(u2f(0x3f818000)) == 0x3f82, "bf16 tie to even (up)");
    CHECK(bn_fp32_to_bf16(u2f(0x3f808001)) == 0x3f81, "bf16 above tie");
    CHECK(bn_fp32_to_bf16(u2f(0x7f7fffff)) == 0x7f80, "bf16 max float rounds to inf");
    CHECK(bn_fp32_to_bf16(u2f(0x00010000)) == 0x0001, "bf16 keeps subnormals");
    CHECK(bn_fp32_to_bf16(u2f(0x00008000)) == 0x0000, "bf16 subnormal tie to even");
    int bf_bad = 0;
    for (int h = 0; h < 65536; h++)
        if (f2u(bn_bf16_to_fp32((uint16_t)h)) != (uint32_t)h << 16) bf_bad++;
    CHECK(bf_bad == 0, "%d bf16 -> fp32 codes wrong", bf_bad);

    // 4. random floats: F16C row path vs scalar (always); ggml's conversions (when available).
    enum { N_RANDOM = 1 << 20 };
    float *xs = malloc(N_RANDOM * sizeof *xs);
    uint16_t *row = malloc(N_RANDOM * sizeof *row);
    for (int i = 0; i < N_RANDOM; i++) {
        uint32_t u = next_u32();
        if (i % 4 == 1) u = (u & 0x80ffffffu) | ((uint32_t)(101 + next_u32() % 42) << 23);   // near fp16 range
        xs[i] = u2f(u);
    }
    bn_fp32_to_fp16_row(xs, row, N_RANDOM);
    int row16_bad = 0;
    for (int i = 0; i < N_RANDOM; i++)
        if (row[i] != bn_fp32_to_fp16(xs[i])) row16_bad++;
    CHECK(row16_bad == 0, "%d random floats: fp16 row (%s) != scalar", row16_bad, bn_simd_name());

    char why[1200];
    if (ggml_base_open(why, sizeof why) != 0) {
        printf("SKIP (ggml comparisons): %s\n", why);
    } else {
        uint16_t (*g_f2h)(float) = (uint16_t (*)(float))ggml_sym("ggml_fp32_to_fp16");
        float (*g_h2f)(uint16_t) = (float (*)(uint16_t))ggml_sym("ggml_fp16_to_fp32");
        uint16_t (*g_f2bf)(float) = (uint16_t (*)(float))ggml_sym("ggml_fp32_to_bf16");
        float (*g_bf2f)(uint16_t) = (float (*)(uint16_t))ggml_sym("ggml_bf16_to_fp32");
        CHECK(g_f2h && g_h2f && g_f2bf && g_bf2f, "ggml conversion symbols missing");
        if (g_f2h && g_h2f && g_f2bf && g_bf2f) {
            int h2f_bad = 0, bf2f_bad = 0, f2h_bad = 0, f2bf_bad = 0;
            for (int h = 0; h < 65536; h++) {
                if (f2u(g_h2f((uint16_t)h)) != f2u(bn_fp16_to_fp32((uint16_t)h))) h2f_bad++;
                if (f2u(g_bf2f((uint16_t)h)) != f2u(bn_bf16_to_fp32((uint16_t)h))) bf2f_bad++;
            }
            for (int i = 0; i < N_RANDOM; i++) {
                if (g_f2h(xs[i]) != bn_fp32_to_fp16(xs[i])) f2h_bad++;
                if (g_f2bf(xs[i]) != bn_fp32_to_bf16(xs[i])) f2bf_bad++;
            }
            printf("vs ggml: fp16->fp32 %d/65536 differ, bf16->fp32 %d/65536, fp32->fp16 %d/%d, fp32->bf16 %d/%d\n",
                   h2f_bad, bf2f_bad, f2h_bad, N_RANDOM, f2bf_bad, N_RANDOM);
            CHECK(h2f_bad == 0 && bf2f_bad == 0, "fp16/bf16 -> fp32 differ from ggml");
            CHECK(f2h_bad == 0, "fp32 -> fp16 differs from ggml on %d random floats", f2h_bad);
            CHECK(f2bf_bad == 0, "fp32 -> bf16 differs from ggml on %d random floats", f2bf_bad);
        }
    }
    free(xs);
    free(row);
    return test_done("test_fp16");
}
