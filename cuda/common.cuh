// cuda/common.cuh — the first include of every .cu file: one source, two compilers (the contract in
// cuda/emu/README.md). Under nvcc it includes the CUDA runtime, fp16 and cuBLAS headers; under g++
// with BONSAI_CUDA_EMU=1 it includes the CPU emulator (cuda/emu/emu.h), which provides the same names.
//
// Both builds provide:
//   BN_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)  the only way to launch a kernel
//   BN_SHARED(T, name, N)      static shared array `name` (a pointer in emu: never take sizeof(name))
//   BN_DYN_SHARED(T, name)     the dynamic shared region of the launch as T *name
//   BN_DEVICE                  __device__ __forceinline__
//   bn_half, bn_h2f, bn_f2h    16-bit float storage and RNE conversions, identical in both builds
//   bn_half_bits(u16), bn_half_raw(h)   reinterpretation from/to the raw fp16 bits (GGUF data)
//   bn_warp_reduce_sum(float|int), bn_warp_reduce_max(float)   xor-butterfly warp reductions
//   BN_CUDA_TRY(call, err, errlen), BN_CUBLAS_TRY(call, err, errlen)   return -1 with err filled
#ifndef BONSAI_CUDA_COMMON_CUH
#define BONSAI_CUDA_COMMON_CUH
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#if defined(BONSAI_CUDA_EMU)
#include "cuda/emu/emu.h"
#define BN_LAUNCH(kernel, grid, block, smem, stream, ...)                                                      \
    bn_emu_launch(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), (cudaStream_t)(stream), ##__VA_ARGS__)
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
typedef __half bn_half;
#define BN_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define BN_SHARED(T, name, N) __shared__ T name[N]
#define BN_DYN_SHARED(T, name)                                                                                   \
    extern __shared__ __align__(16) unsigned char bn_dyn_smem_[];                                              \
    T *const name = reinterpret_cast<T *>(bn_dyn_smem_)
// bn_h2f: the exact float of a half.
static __host__ __device__ __forceinline__ float bn_h2f(bn_half h) { return __half2float(h); }
// bn_f2h: the half nearest to f, ties to even.
static __host__ __device__ __forceinline__ bn_half bn_f2h(float f) { return __float2half_rn(f); }
// bn_half_bits: the half with raw bits u.
static __host__ __device__ __forceinline__ bn_half bn_half_bits(uint16_t u) { return __ushort_as_half(u); }
// bn_half_raw: the raw bits of h.
static __host__ __device__ __forceinline__ uint16_t bn_half_raw(bn_half h) { return __half_as_ushort(h); }
#endif

#define BN_DEVICE __device__ __forceinline__

#if !defined(BONSAI_CUDA_EMU)
// bn_warp_reduce_sum / bn_warp_reduce_max: v combined over the 32 lanes of the warp by the xor
// butterfly `v = op(v, __shfl_xor_sync(0xffffffff, v, o))`, o = 16, 8, 4, 2, 1 (every lane gets the
// same bits). The emulator computes the identical result with one warp exchange instead of five.
BN_DEVICE float bn_warp_reduce_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
BN_DEVICE int bn_warp_reduce_sum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
BN_DEVICE float bn_warp_reduce_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif

// bn_cuda_fail: fills err with "CUDA error: <what> (<call>) at file:line"; returns -1.
static inline int bn_cuda_fail(char *err, size_t errlen, const char *what, const char *call, const char *file,
                               int line) {
    if (err && errlen) snprintf(err, errlen, "CUDA error: %s (%s) at %s:%d", what, call, file, line);
    return -1;
}
#define BN_CUDA_TRY(call, err, errlen)                                                                             \
    do {                                                                                                           \
        cudaError_t bn_e_ = (call);                                                                                \
        if (bn_e_ != cudaSuccess) return bn_cuda_fail((err), (errlen), cudaGetErrorString(bn_e_), #call, __FILE__, \
                                                      __LINE__);                                                   \
    } while (0)
#define BN_CUBLAS_TRY(call, err, errlen)                                                                           \
    do {                                                                                                           \
        cublasStatus_t bn_s_ = (call);                                                                             \
        if (bn_s_ != CUBLAS_STATUS_SUCCESS)                                                                        \
            return bn_cuda_fail((err), (errlen), cublasGetStatusString(bn_s_), #call, __FILE__, __LINE__);        \
    } while (0)
#endif
