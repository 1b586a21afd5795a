// cuda/mm_host.h — C wrappers around the CUDA matrix kernels (cuda/mm.cuh) on HOST buffers, for tests
// and benchmarks: upload, run on the device (or the emulator), download. Each returns 0, or −1 with
// err filled ("cuda: <what>: <error>"). Weights are bn_type rows of bn_row_size(type, ne0) bytes.
#ifndef BONSAI_CUDA_MM_HOST_H
#define BONSAI_CUDA_MM_HOST_H
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// flags: BN_CUDA_MM_REPACK = run bn_cu_weight_repack on the uploaded weights first; BN_CUDA_MM_MMVQ = take the
// mmvq path whatever nb (bn_cu_matmul_multi_mmvq, nb <= BN_CUDA_MM_MMVQ_MAX_NB).
#define BN_CUDA_MM_REPACK 1
#define BN_CUDA_MM_MMVQ 2
#define BN_CUDA_MM_GEMM 4 // take the fp16 GEMM path whatever nb (bn_cu_matmul_multi_gemm)
// BN_CUDA_MM_DP4A: the dp4a kernels where the int8 tensor cores would run (low-bit types at nb 8..32): the two
// compared in one build (bench_cuda_mm; not thread-safe: switches the process-wide routing during the call)
#define BN_CUDA_MM_DP4A 8
// BN_CUDA_MM_MMQ: products beyond 32 columns of low-bit weights on the int8 tensor cores in column chunks (the opt-in
// prefill path, BONSAI_CUDA_MMQ_PREFILL=1) instead of the fp16 GEMM; switches the process-wide routing like DP4A
#define BN_CUDA_MM_MMQ 16
#define BN_CUDA_MM_MMVQ_MAX_NB 32 // = BN_CU_MMVQ_KERNEL_MAX_NB (cuda/mm.cuh)

// bn_cuda_mm_repackable: 1 when BN_CUDA_MM_REPACK changes the layout of such weights (16-byte aligned
// data), else 0.
int bn_cuda_mm_repackable(int type, int64_t ne0, int64_t ne1);

// bn_cuda_mm_uses_mmvq: 1 when bn_cu_matmul takes the mmvq path (Q8 activations) for type and nb, 0 when
// it takes the fp16 GEMM path.
int bn_cuda_mm_uses_mmvq(int type, int nb);
// bn_cuda_mm_set_mmq_prefill: the process-wide switch of the tensor-core prefill path (BN_CUDA_MM_MMQ,
// BONSAI_CUDA_MMQ_PREFILL): 1 on, 0 off; returns the previous setting. For tests and benchmarks (not thread-safe
// against running products).
int bn_cuda_mm_set_mmq_prefill(int on);

// bn_cuda_mm_host: y {ne1, nb} = W {ne0, ne1} · x {ne0, nb} through bn_cu_matmul (mmvq for nb <=
// BN_CU_MMVQ_MAX_NB, fp16 cuBLAS GEMM above; flags BN_CUDA_MM_MMVQ: mmvq up to 32, BN_CUDA_MM_GEMM: the GEMM
// whatever nb); returns 0 or −1.
int bn_cuda_mm_host(int type, const void *w, int64_t ne0, int64_t ne1, const float *x, int nb, float *y, int flags,
                    char *err, size_t errlen);
// bn_cuda_mm_multi_host: y[i] {ne1[i], nb} = W[i] · x for i < n weights (types[i], all ne0 wide) through
// one bn_cu_matmul_multi call; returns 0 or −1.
int bn_cuda_mm_multi_host(int n, const int *types, const void *const *w, int64_t ne0, const int64_t *ne1,
                          const float *x, int nb, float *const *y, int flags, char *err, size_t errlen);
// bn_cuda_get_rows_host: out {ne0, n} = rows ids[0..n) of W dequantized; returns 0 or −1.
int bn_cuda_get_rows_host(int type, const void *w, int64_t ne0, int64_t ne1, const int32_t *ids, int n, float *out,
                          int flags, char *err, size_t errlen);
// bn_cuda_argmax_host: *out = bn_cu_argmax of x[0..n) (for odd n the device copy starts 4 bytes into
// its buffer, so tests reach the unaligned path); returns 0 or −1.
int bn_cuda_argmax_host(const float *x, int n, int32_t *out, char *err, size_t errlen);
// bn_cuda_topk_host: vals/idx (k each) = bn_cu_topk of x[0..n); returns 0 or −1.
int bn_cuda_topk_host(const float *x, int n, int k, float *vals, int32_t *idx, char *err, size_t errlen);
// bn_cuda_mm_bench: mean microseconds of one bn_cu_matmul (activation quantization or fp16 conversion
// included) over `iters` launches on device-generated weights of the given shape, rotating through
// enough weight copies (>= 256 MiB) that L2 does not hold them; negative on error (err filled).
double bn_cuda_mm_bench(int type, int64_t ne0, int64_t ne1, int nb, int iters, int flags, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
