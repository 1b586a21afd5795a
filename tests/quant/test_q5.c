// tests/quant/test_q5.c — Q5_0 / Q5_1 / Q5_K against ggml (libggml-base.so): quantize byte-identical and
// dequantize bit-identical on cos, uniform and edge data (zeros, ties, huge, tiny, spikes, random
// codes); the scalar vec_dot against the dequantized fp64 dot and ggml's CPU vec_dot (errors relative to sum |w*a|:
// 1e-5, Q5_1 vs fp64 2e-3 because Q8_1's s is fp16).
#include "quant/quant.h"
#include "tests/quant/ggml_base.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 4096, N_SETS = 4 };

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float uniform(void) { return (float)next_u32() / 4294967296.0f * 2.0f - 1.0f; }

// make_set: 0,1 cos vectors; 2 uniform; 3 edge blocks of 32 (cycling through 8 kinds).
static void make_set(int set, float *x) {
    for (int i = 0; i < N; i++) x[i] = set < 2 ? 0.1f + 2 * cosf((float)i + (float)set) : uniform();
    if (set < 3) return;
    for (int b = 0; b < N / 32; b++) {
        float *blk = x + 32 * b;
        for (int j = 0; j < 32; j++) {
            switch (b % 8) {
            case 0: blk[j] = 0.0f; break;
            case 1: blk[j] = (j == 0) ? -16.0f : (float)((int)(next_u32() % 33) - 16) + 0.5f; break;  // x*id+16.5 ties
            case 2: blk[j] = (j & 1) ? 3.0f : -3.0f; break;
            case 3: blk[j] = uniform() * 30000.0f; break;
            case 4: blk[j] = uniform() * 1e-6f; break;
            case 5: blk[j] = uniform() * 1e-30f; break;
            case 6: blk[j] = (j % 7 == 5) ? -2.5f : uniform() * 0.01f; break;
            case 7: blk[j] = (float)(j % 32) / 31.0f; break;   // Q5_1 ramp: (x-min)*id = j exactly-ish
            }
        }
    }
}

static void check_format(int type, const char *gname, const float *sets[N_SETS]) {
    char sym[96];
    snprintf(sym, sizeof sym, "quantize_row_%s_ref", gname);
    ggml_quantize_ref_fn gq = (ggml_quantize_ref_fn)ggml_sym(sym);
    snprintf(sym, sizeof sym, "dequantize_row_%s", gname);
    ggml_dequantize_fn gd = (ggml_dequantize_fn)ggml_sym(sym);
    CHECK(gq && gd, "ggml lacks the %s reference functions", gname);
    if (!gq || !gd) return;
    size_t bytes = bn_row_size(type, N);
    uint8_t *ours = calloc(1, bytes), *theirs = calloc(1, bytes);
    float *d_ours = malloc(N * sizeof(float)), *d_theirs = malloc(N * sizeof(float));
    for (int s = 0; s < N_SETS; s++) {
        CHECK(bn_quantize_ref(type, sets[s], ours, N) == bytes, "%s: bytes written", gname);
        gq(sets[s], theirs, N);
        CHECK(memcmp(ours, theirs, bytes) == 0, "%s set %d: quantized bytes differ from ggml", gname, s);
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1)   // random codes and fifth bits (and Q5_K sub-scales); fp16 fields kept finite
                for (size_t off = 0; off < bytes; off += bn_type_size(type))
                    for (int k = type == BN_Q5_0 ? 2 : type == BN_Q5_1 ? 4 : 16; k < bn_type_size(type); k++) ours[off + k] = (uint8_t)next_u32();
            bn_dequantize(type, ours, d_ours, N);
            gd(ours, d_theirs, N);
            CHECK(memcmp(d_ours, d_theirs, N * sizeof(float)) == 0, "%s set %d pass %d: dequantized values differ",
                  gname, s, pass);
        }
    }
    free(ours); free(theirs); free(d_ours); free(d_theirs);
}

// check_dot: traits vec_dot vs the fp32 dot of both dequantized rows, and vs ggml's CPU vec_dot if loadable.
static void check_dot(int type, const float *w, const float *a) {
    const bn_type_traits *tr = bn_type_traits_of(type);
    CHECK(tr && tr->vec_dot && tr->vec_dot_type == (type == BN_Q5_0 ? BN_Q8_0 : type == BN_Q5_1 ? BN_Q8_1 : BN_Q8_K), "%s: traits", bn_type_name(type));
    if (!tr || !tr->vec_dot) return;
    uint8_t *qw = malloc(bn_row_size(type, N)), *qa = malloc(bn_row_size(tr->vec_dot_type, N));
    float *fw = malloc(N * sizeof(float)), *fa = malloc(N * sizeof(float));
    bn_quantize_ref(type, w, qw, N);
    bn_quantize_activations(tr->vec_dot_type, a, qa, N);
    bn_dequantize(type, qw, fw, N);
    bn_dequantize(tr->vec_dot_type, qa, fa, N);
    double want = 0, abs_sum = 0;   // errors are measured relative to sum |w_i a_i|
    for (int i = 0; i < N; i++) {
        want += (double)fw[i] * fa[i];
        abs_sum += fabs((double)fw[i] * fa[i]);
    }
    float got = 0;
    tr->vec_dot(N, &got, qw, qa);
    double scale = abs_sum > 1 ? abs_sum : 1;
    // Q5_1 uses s = fp16(d*sum(q)) for the m term, so the fp32 reference differs by fp16 rounding of s.
    double tol = type == BN_Q5_1 ? 2e-3 : 1e-5;
    CHECK(fabs(got - want) / scale < tol, "%s vec_dot %.6f vs dequantized dot %.6f (tol %g)", bn_type_name(type), got,
          want, tol);
    const ggml_cpu_traits *gt = ggml_cpu_traits_of(type);
    if (gt && gt->vec_dot) {
        float g = 0;
        gt->vec_dot(N, &g, 0, qw, 0, qa, 0, 1);
        CHECK(fabs(got - g) / scale < 1e-5, "%s vec_dot %.6f vs ggml CPU %.6f", bn_type_name(type), got, g);
        printf("%s: vec_dot %.6f, ggml CPU %.6f, dequantized fp64 %.6f\n", bn_type_name(type), got, g, want);
    }
    free(qw); free(qa); free(fw); free(fa);
}

int main(void) {
    static float data[N_SETS][N];
    const float *sets[N_SETS];
    for (int s = 0; s < N_SETS; s++) { make_set(s, data[s]); sets[s] = data[s]; }
    CHECK(bn_type_from_name("Q5_0") == BN_Q5_0 && bn_type_from_name("q5_1") == BN_Q5_1, "names parse");
    CHECK(bn_row_size(BN_Q5_0, 64) == 44 && bn_row_size(BN_Q5_1, 64) == 48, "row sizes 22 / 24 B per 32");
    CHECK(sizeof(bn_block_q5_K) == 176 && bn_row_size(BN_Q5_K, 512) == 352, "q5_K: 176 B per 256");
    char why[1200];
    if (ggml_base_open(why, sizeof why) != 0) {
        check_dot(BN_Q5_0, sets[0], sets[2]);
        check_dot(BN_Q5_1, sets[1], sets[2]);
        check_dot(BN_Q5_K, sets[0], sets[2]);
        int rc = test_done("test_q5");
        return rc ? rc : test_skip(why);
    }
    check_format(BN_Q5_0, "q5_0", sets);
    check_format(BN_Q5_1, "q5_1", sets);
    check_format(BN_Q5_K, "q5_K", sets);
    check_dot(BN_Q5_0, sets[0], sets[2]);
    check_dot(BN_Q5_1, sets[1], sets[2]);
    check_dot(BN_Q5_K, sets[0], sets[2]);
    return test_done("test_q5");
}
