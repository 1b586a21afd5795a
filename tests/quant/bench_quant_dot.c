// tests/quant/bench_quant_dot.c — not a test: single-thread mat-vec speed of the dot kernels on a
// 5120 x 17408 weight matrix (one FFN projection of the 27B model): weight GB/s and ms per mat-vec for
// the dispatched kernels (bn_vec_dot_rows) vs the scalar references. Usage: bench_quant_dot [reps] [types...]
#include "quant/quant.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static uint64_t rng = 0x082EFA98EC4E6C89ULL;
static float uniform(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)(rng >> 40) / 16777216.0f * 2 - 1; }

int main(int argc, char **argv) {
    const int ne0 = 5120, nrows = 17408;
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    int types[16] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q4_0, BN_Q8_0, BN_Q6_K}, ntypes = 6;
    if (argc > 2) {
        ntypes = 0;
        for (int i = 2; i < argc && ntypes < 16; i++) types[ntypes++] = bn_type_from_name(argv[i]);
    }
    float *row = malloc(ne0 * sizeof *row), *act = malloc(ne0 * sizeof *act), *s = malloc(nrows * sizeof *s);
    for (int i = 0; i < ne0; i++) act[i] = uniform();
    printf("mat-vec %d x %d, single thread, dispatch %s, best of %d\n", ne0, nrows, bn_simd_name(), reps);
    for (int t = 0; t < ntypes; t++) {
        int type = types[t];
        const bn_type_traits *tr = bn_type_traits_of(type);
        if (!tr || !tr->vec_dot) continue;
        size_t rb = bn_row_size(type, ne0);
        uint8_t *w = malloc(rb * nrows);
        for (int r = 0; r < nrows; r++) {
            for (int i = 0; i < ne0; i++) row[i] = uniform();
            bn_quantize_ref(type, row, w + rb * r, ne0);
        }
        uint8_t *y = malloc(bn_row_size(tr->vec_dot_type, ne0) + 64);
        bn_quantize_activations(tr->vec_dot_type, act, y, ne0);
        double best = 1e30, best_ref = 1e30, checksum = 0, checksum_ref = 0;
        for (int k = 0; k < reps; k++) {
            double t0 = bn_time_ms();
            bn_vec_dot_rows(type, ne0, nrows, s, w, rb, y);
            double t1 = bn_time_ms();
            if (t1 - t0 < best) best = t1 - t0;
        }
        for (int r = 0; r < nrows; r++) checksum += s[r];
        // Prefill-like: 8 activation rows through bn_vec_dot_rows_batch, time per activation row.
        enum { NY = 8 };
        size_t yrow = bn_row_size(tr->vec_dot_type, ne0);
        uint8_t *ys = malloc(yrow * NY);
        float *sb = malloc(sizeof(float) * nrows * NY);
        for (int t = 0; t < NY; t++) memcpy(ys + yrow * t, y, yrow);
        double best_batch = 1e30;
        for (int k = 0; k < (reps + 1) / 2; k++) {
            double t0 = bn_time_ms();
            bn_vec_dot_rows_batch(type, ne0, nrows, NY, sb, nrows, w, rb, ys, yrow);
            double t1 = bn_time_ms();
            if ((t1 - t0) / NY < best_batch) best_batch = (t1 - t0) / NY;
        }
        free(ys);
        free(sb);
        double best16 = 1e30;   // the engine's batched path calls 16 rows at a time
        for (int k = 0; k < reps; k++) {
            double t0 = bn_time_ms();
            for (int r = 0; r < nrows; r += 16) bn_vec_dot_rows(type, ne0, 16, s + r, w + rb * r, rb, y);
            double t1 = bn_time_ms();
            if (t1 - t0 < best16) best16 = t1 - t0;
        }
        bn_vec_dot_fn ref = bn_vec_dot_ref(type);
        for (int k = 0; k < (reps > 1 ? 2 : 1); k++) {
            double t0 = bn_time_ms();
            for (int r = 0; r < nrows; r++) ref(ne0, &s[r], w + rb * r, y);
            double t1 = bn_time_ms();
            if (t1 - t0 < best_ref) best_ref = t1 - t0;
        }
        for (int r = 0; r < nrows; r++) checksum_ref += s[r];
        double gb = (double)rb * nrows / 1e9;
        printf("  %-6s %6.1f MB: %s %6.2f ms %6.2f GB/s (16-row calls %5.2f ms, batch of 8: %5.2f ms/row) | "
               "scalar %7.2f ms %5.2f GB/s | x%.1f (sum %.3f / %.3f)\n", tr->name, gb * 1e3, bn_simd_name(), best,
               gb / (best / 1e3), best16, best_batch, best_ref, gb / (best_ref / 1e3), best_ref / best, checksum,
               checksum_ref);
        free(w);
        free(y);
    }
    free(row); free(act); free(s);
    return 0;
}
