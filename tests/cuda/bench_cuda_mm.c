// tests/cuda/bench_cuda_mm.c — speed of the CUDA matrix kernels on the real 27B shapes (docs/model.md):
// decode matvec (nb = 1), small batches and DSpark verify (nb 2..32 on the mmvq kernels, where bn_cu_matmul
// routes them; 9..32 also on the GEMM path for comparison; 17 = block 16 + 1) in GB/s of weight bytes,
// % of the measured device copy bandwidth and the time relative to nb = 1 of the same row; prefill GEMM
// (nb = 512, fp16 cuBLAS after dequantization) in TFLOP/s.
// Weights are device-generated (values do not change the speed), rotated through >= 256 MiB of copies;
// each low-bit shape is timed in the GGUF block layout and in bn_cu_weight_repack's planar layout.
//
// Run on the GPU machine (not a test; needs a device):
//   meson setup build -Dcuda=enabled && ninja -C build tests/cuda/bench_cuda_mm && build/tests/cuda/bench_cuda_mm
// Options: --quick (3 shapes, 20 iterations; planar low-bit types at nb 1, 2, 4, 8, 16, 17, 32 on mmvq and nb 17
// on the GEMM path, the GGUF layouts and the other types at nb 1; 90 timings as before, run by cuda/check.sh),
// --types q1_0,q8_0 (subset).
//
// Expected figures (the arithmetic is in notes/cuda-mm.md, "Expected figures"): Q1_0 planar nb 1 is
// integer-ALU-bound near the copy bandwidth (~23 int-pipe ops per 32-element unit and row at 64 per clock per
// SM): ffn_up ~4.5-6 us (50-65%), output ~60-70 us; Q2_0 planar nb 1 memory-bound, 75-85%; on mmvq nb 2, 4, 8,
// 16, 17, 32 cost ~1.5, 2.5, 4.5, 9, 10, 18 times nb 1 for Q1_0 (dp4a-bound: 8 dots per unit, row and column;
// lower ratios for Q2_0), e.g. ffn_up nb 17 ~40 us where the GEMM path takes ~285 us.
// Tensor cores (cuda/mmq_tc.cu): Q1_0/Q2_0/PQ2_0 at nb 8..32 run on int8 MMA (path "mma"; expected nb 8 ~2x,
// nb 17 ~3-3.5x, nb 32 ~4-5x nb 1 for Q1_0 ffn_up, notes/cuda-mm.md "Tensor cores"). Their widths are timed on
// the dp4a kernels too (path "dp4a", BN_CUDA_MM_DP4A; quick: nb 8, 17, 32), in the same run. The header says whether
// the tensor cores are on (cuda/mma_check.cu's self-check; off with BONSAI_CUDA_MMA=0 or a BN_CU_MMA=0 build).
#include "cuda/cuda_backend.h"
#include "cuda/cuda_engine.h"
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
    printf("device: %s; copy bandwidth %.0f GB/s (read + write); int8 tensor cores %s\n",
           bn_cuda_device_name(name, sizeof name), copy_gbs, bn_cuda_mma_status());
    const bool mma = bn_cuda_mma_in_use();
    const struct shape shapes[] = {
        {"ffn_up/gate", 5120, 17408}, {"ffn_down", 17408, 5120}, {"output", 5120, 248320},
        {"attn_q", 5120, 12288},      {"attn_k/v", 5120, 1024},  {"attn_qkv", 5120, 10240},
        {"ssm_out", 6144, 5120},
    };
    int nshapes = quick ? 3 : (int)(sizeof shapes / sizeof shapes[0]);
    int iters = quick ? 20 : 100;
    printf("\n%-6s %-7s %-12s %6s %7s %4s %9s %8s %6s %6s %s\n", "type", "layout", "tensor", "ne0", "ne1", "nb", "us",
           "GB/s", "%copy", "x nb1", "path");
    char list[256];
    snprintf(list, sizeof list, "%s", types_arg);
    for (char *save = NULL, *tn = strtok_r(list, ",", &save); tn; tn = strtok_r(NULL, ",", &save)) {
        int type = bn_type_from_name(tn);
        if (type < 0) {
            fprintf(stderr, "bench_cuda_mm: unknown type %s\n", tn);
            return 1;
        }
        const bool low_bit = type == BN_Q1_0 || type == BN_Q2_0 || type == BN_PQ2_0;
        for (int s = 0; s < nshapes; s++) {
            for (int planar = 0; planar < 2; planar++) {
                if (planar && !bn_cuda_mm_repackable(type, shapes[s].ne0, shapes[s].ne1)) continue;
                // quick: the planar low-bit layouts (the model's) at every mmvq width, the rest at nb 1.
                // Widths 9..32 run twice: as bn_cu_matmul routes them and on the other path (forced mmvq where
                // the routing takes the GEMM, the GEMM where it takes mmvq; quick: the GEMM at 17 only).
                const int nbs[] = {1, 2, 4, 8, 16, 17, 32, 33};
                const bool all = !quick || (low_bit && planar);
                int n_nbs = all ? 8 : 1; // quick: the GGUF layouts and the other types at nb 1 only
                double us1 = 0;
                for (int j = 0; j < n_nbs; j++) {
                    for (int force = 0; force < 3; force++) { // as routed, the other path, dp4a for the MMA's
                        int nb = nbs[j];
                        bool routed_mmvq = bn_cuda_mm_uses_mmvq(type, nb);
                        bool tc_width = mma && low_bit && nb >= 8 && nb <= BN_CUDA_MM_MMVQ_MAX_NB;
                        if (force == 1 && (nb <= 8 || nb > BN_CUDA_MM_MMVQ_MAX_NB)) continue;
                        if (force == 1 && routed_mmvq && quick && nb != 17) continue; // the GEMM path once per row
                        if (force == 2 && (!tc_width || (quick && nb == 16))) continue;
                        if (!force && quick && !routed_mmvq && nb != 17) continue;
                        bool on_mmvq = force == 1 ? !routed_mmvq : force == 2 || routed_mmvq;
                        bool tensor_cores = tc_width && force != 2;
                        int flags = (planar ? BN_CUDA_MM_REPACK : 0) | (force == 2 ? BN_CUDA_MM_MMVQ | BN_CUDA_MM_DP4A
                                                                      : force ? (on_mmvq ? BN_CUDA_MM_MMVQ : BN_CUDA_MM_GEMM)
                                                                              : 0);
                        double us = bn_cuda_mm_bench(type, shapes[s].ne0, shapes[s].ne1, nb, iters, flags, err,
                                                     sizeof err);
                        if (us < 0) {
                            fprintf(stderr, "bench_cuda_mm: %s %s: %s\n", tn, shapes[s].name, err);
                            return 1;
                        }
                        if (nb == 1) us1 = us;
                        double bytes = (double)bn_row_size(type, shapes[s].ne0) * shapes[s].ne1;
                        double gbs = bytes / (us * 1e-6) / 1e9;
                        printf("%-6s %-7s %-12s %6lld %7lld %4d %9.1f %8.0f %5.0f%% %6.1f %s\n", bn_type_name(type),
                               planar ? "planar" : "gguf", shapes[s].name, shapes[s].ne0, shapes[s].ne1, nb, us, gbs,
                               100.0 * gbs / copy_gbs, us / us1,
                               !on_mmvq ? "gemm" : tensor_cores ? "mma" : force == 2 ? "dp4a" : "mmvq");
                    }
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
