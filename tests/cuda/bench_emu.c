// tests/cuda/bench_emu.c — the CUDA emulator's own costs (CPU time, not a test): fiber switch at
// __syncthreads and at warp shuffles (32 and 1024 threads), barrier-free threads, and the emulated
// 5120 x 4096 matvec for the low-bit types (bn_cuda_matvec_bench, timed by CPU time).
#include "tests/cuda/emu_kernels.h"
#include "cuda/cuda_backend.h"
#include "cuda/emu/emu_api.h"
#include "quant/quant.h"
#include <stdio.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// switch_row: one ek_switch_bench run; prints ns per switch (modes 0/1) or per thread (mode 2).
static void switch_row(const char *what, int threads, int rounds, int mode) {
    char err[256];
    bn_cuda_emu_stats a, b;
    bn_cuda_emu_get_stats(&a);
    double t0 = cpu_s();
    if (ek_switch_bench(threads, rounds, mode, err, sizeof err) != 0) {
        printf("| %s | error: %s | |\n", what, err);
        return;
    }
    double t = cpu_s() - t0;
    bn_cuda_emu_get_stats(&b);
    uint64_t sw = b.switches - a.switches, th = b.threads - a.threads;
    if (mode == 2) printf("| %s | %.1f ns/thread | %llu switches |\n", what, t * 1e9 / th, (unsigned long long)sw);
    else printf("| %s | %.1f ns/switch | %llu switches |\n", what, t * 1e9 / sw, (unsigned long long)sw);
}

int main(void) {
    printf("| emulator cost (CPU time) | | |\n|---|---:|---:|\n");
    switch_row("__syncthreads, 32 threads", 32, 20000, 0);
    switch_row("__syncthreads, 1024 threads", 1024, 500, 0);
    switch_row("__shfl_xor_sync, 32 threads", 32, 20000, 1);
    switch_row("__shfl_xor_sync, 1024 threads", 1024, 500, 1);
    switch_row("no barriers, 4096 x 256 threads", 256, 4096, 2);
    printf("\n| matvec 5120 x 4096 (emulated) | ms CPU | M weights/s |\n|---|---:|---:|\n");
    int types[] = {BN_Q1_0, BN_Q2_0, BN_PQ2_0, BN_Q8_0};
    for (int t = 0; t < 4; t++) {
        char err[256];
        double t0 = cpu_s();
        double r1 = bn_cuda_matvec_bench(types[t], NULL, 5120, 4096, 1, err, sizeof err);
        double t1 = cpu_s();
        double r2 = bn_cuda_matvec_bench(types[t], NULL, 5120, 4096, 5, err, sizeof err);
        double t2 = cpu_s();
        if (r1 < 0 || r2 < 0) {
            printf("| %s | error: %s | |\n", bn_type_name(types[t]), err);
            continue;
        }
        double per = ((t2 - t1) - (t1 - t0)) / 4; // the difference of 4 launches: setup cancels out
        printf("| %s | %.1f | %.0f |\n", bn_type_name(types[t]), per * 1e3, 5120.0 * 4096 / per / 1e6);
    }
    return 0;
}
