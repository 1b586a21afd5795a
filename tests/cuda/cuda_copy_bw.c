// tests/cuda/cuda_copy_bw.c — prints the device's measured copy bandwidth (bn_cuda_copy_bandwidth,
// read + write bytes) in GB/s on one line, for cuda/check.sh's "% of copy bandwidth" column.
// Usage: cuda_copy_bw [MIB] (default 1024; the emulator build is run with a small size).
#include "cuda/cuda_backend.h"
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    const long mib = argc > 1 ? atol(argv[1]) : 1024;
    if (mib < 1) {
        fprintf(stderr, "usage: cuda_copy_bw [MIB]\n");
        return 1;
    }
    char err[256];
    const double gbs = bn_cuda_copy_bandwidth((size_t)mib << 20, err, sizeof err);
    if (gbs < 0) {
        fprintf(stderr, "cuda_copy_bw: %s\n", err);
        return 1;
    }
    printf("%.1f\n", gbs);
    return 0;
}
