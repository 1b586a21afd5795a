// tests/cuda/bench_cuda_mm.c — speed of the CUDA matrix kernels on the real 27B shapes (MODEL.md):
// decode matvec (nb = 1), DSpark verify (nb = 8) and nb = 16 in GB/s of weight bytes and % of the measured
// device copy bandwidth; prefill GEMM (nb = 512, fp16 cuBLAS after dequantization) in TFLOP/s.
// Weights are device-generated (values do not change the speed), rotated through >= 256 MiB of copies;
// each low-bit shape is timed in the GGUF block layout and in bn_cu_weight_repack's planar layout.
//
// Run on the GPU machine (not a test; needs a device):
//   meson setup build -Dcuda=enabled && ninja -C build tests/cuda/bench_cuda_mm && build/tests/cuda/bench_cuda_mm
// Options: --quick (fewer shapes/iterations), --types q1_0,q8_0 (subset).
//
// Not yet measured (no GPU in the session that wrote it). Floors and predictions to check against:
// ffn_up Q1_0 is 12.5 MB, so at ~4 TB/s one matvec is >= ~3 us; an L1-wavefront count (weights as 2-byte
// loads in the GGUF layout vs 4-16-byte loads in the planar one) predicts ~60-75% of copy bandwidth for
// the GGUF layout and ~80-90% planar on the large shapes, less on attn_k/v (737 KB: launch-bound).
// nb 8 is dp4a-bound for Q1_0 (8 dots per weight unit): expect ~25-35% of copy bandwidth there.
#include "cuda/cuda_backend.h"
#include "cuda/mm_host.h"
#include "quant/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shape { const char *name; long long ne0, ne1; };

int main(int argc, char **argv) {
    bool quick = false;
    const char *types_arg = "q1_0,q2_0,pq2_0,q8_0,q6_K";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else {
            fprintf(stderr, "usage: bench_cuda_mm [--quick] [--types q1_0,q2_0,...]\n");
            return 1;
        }
    }
    if (bn_cuda_device_count() == 0) {
        printf("bench_cuda_mm: no CUDA device\n");
        return 0;
    }
    char name[128], err[256] = "";
    double copy_gbs = bn_cuda_copy_bandwidth((size_t)1 << 30, err, sizeof err);
    if (copy_gbs <= 0) {
        fprintf(stderr, "bench_cuda_mm: %s\n", err);
        return 1;
    }
    printf("device: %s; copy bandwidth %.0f GB/s (read + write)\n", bn_cuda_device_name(name, sizeof name), copy_gbs);
    const struct shape shapes[] = {
        {"ffn_up/gate", 5120, 17408}, {"ffn_down", 17408, 5120}, {"output", 5120, 248320},
        {"attn_q", 5120, 12288},      {"attn_k/v", 5120, 1024},  {"attn_qkv", 5120, 10240},
        {"ssm_out", 6144, 5120},
    };
    int nshapes = quick ? 3 : (int)(sizeof shapes / sizeof shapes[0]);
    int iters = quick ? 20 : 100;
    printf("\n%-6s %-7s %-12s %6s %7s %4s %9s %8s %6s\n", "type", "layout", "tensor", "ne0", "ne1", "nb", "us", "GB/s",
           "%copy");
    char list[256];
    snprintf(list, sizeof list, "%s", types_arg);
    for (char *save = NULL, *tn = strtok_r(list, ",", &save); tn; tn = strtok_r(NULL, ",", &save)) {
        int type = bn_type_from_name(tn);
        if (type < 0) {
            fprintf(stderr, "bench_cuda_mm: unknown type %s\n", tn);
            return 1;
        }
        for (int s = 0; s < nshapes; s++) {
            const int nbs[] = {1, 8, 16}; // decode, DSpark verify (block 4 + 1 fits 8), 16: the GEMM path
            for (int planar = 0; planar < 2; planar++) {
                if (planar && !bn_cuda_mm_repackable(type, shapes[s].ne0, shapes[s].ne1)) continue;
                for (int j = 0; j < 3; j++) {
                    int nb = nbs[j];
                    double us = bn_cuda_mm_bench(type, shapes[s].ne0, shapes[s].ne1, nb, iters,
                                                 planar ? BN_CUDA_MM_REPACK : 0, err, sizeof err);
                    if (us < 0) {
                        fprintf(stderr, "bench_cuda_mm: %s %s: %s\n", tn, shapes[s].name, err);
                        return 1;
                    }
                    double bytes = (double)bn_row_size(type, shapes[s].ne0) * shapes[s].ne1;
                    double gbs = bytes / (us * 1e-6) / 1e9;
                    printf("%-6s %-7s %-12s %6lld %7lld %4d %9.1f %8.0f %5.0f%%\n", bn_type_name(type),
                           planar ? "planar" : "gguf", shapes[s].name, shapes[s].ne0, shapes[s].ne1, nb, us, gbs,
                           100.0 * gbs / copy_gbs);
                }
            }
        }
    }
    printf("\n%-6s %-12s %6s %7s %4s %9s %8s\n", "type", "tensor", "ne0", "ne1", "nb", "us", "TFLOP/s");
    const int gemm_types[] = {BN_Q1_0, BN_Q2_0, BN_F16};
    for (int t = 0; t < 3; t++) {
        for (int s = 0; s < 2; s++) {
            int nb = 512;
            double us = bn_cuda_mm_bench(gemm_types[t], shapes[s].ne0, shapes[s].ne1, nb, quick ? 5 : 20, 0, err,
                                         sizeof err);
            if (us < 0) {
                fprintf(stderr, "bench_cuda_mm: gemm %s: %s\n", shapes[s].name, err);
                return 1;
            }
            double tflops = 2.0 * shapes[s].ne0 * shapes[s].ne1 * nb / (us * 1e-6) / 1e12;
            printf("%-6s %-12s %6lld %7lld %4d %9.1f %8.1f\n", bn_type_name(gemm_types[t]), shapes[s].name,
                   shapes[s].ne0, shapes[s].ne1, nb, us, tflops);
        }
    }
    return 0;
}
