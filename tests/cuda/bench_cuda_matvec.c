// tests/cuda/bench_cuda_matvec.c — matvec kernel timings on the 27B shapes (docs/model.md §3) for the
// low-bit types, with achieved GB/s as a share of the measured device copy bandwidth. Not a test.
#include "cuda/cuda_backend.h"
#include "quant/quant.h"
#include "base/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char err[256], name[128];
    if (bn_cuda_device_count() == 0) {
        printf("no CUDA device\n");
        return 0;
    }
    double bw = bn_cuda_copy_bandwidth((size_t)1 << 30, err, sizeof err);
    printf("device: %s, copy bandwidth %.0f GB/s\n\n", bn_cuda_device_name(name, sizeof name), bw);
    struct { const char *what; int64_t ncols, nrows; } shapes[] = {
        {"ffn_up 5120x17408", 5120, 17408}, {"ffn_down 17408x5120", 17408, 5120}, {"output 5120x248320", 5120, 248320}};
    int types[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q8_0};
    printf("| type | shape | us/call | GB/s | %% of copy bw |\n|---|---|---:|---:|---:|\n");
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++) {
            size_t bytes = bn_row_size(types[t], shapes[s].ncols) * shapes[s].nrows;
            void *w = xcalloc(1, bytes);
            memset(w, 0x5a, bytes);
            double us = bn_cuda_matvec_bench(types[t], w, shapes[s].ncols, shapes[s].nrows, 50, err, sizeof err);
            if (us < 0) printf("| %s | %s | error: %s | | |\n", bn_type_name(types[t]), shapes[s].what, err);
            else
                printf("| %s | %s | %.1f | %.0f | %.0f%% |\n", bn_type_name(types[t]), shapes[s].what, us,
                       bytes / (us * 1e-6) / 1e9, 100.0 * bytes / (us * 1e-6) / 1e9 / bw);
            free(w);
        }
    return 0;
}
