// cuda/common.cuh — the first include of every .cu file: one source, two compilers (the contract in
// cuda/emu/README.md). Under nvcc it includes the CUDA runtime, fp16 and cuBLAS headers; under g++
// with BONSAI_CUDA_EMU=1 it includes the CPU emulator (cuda/emu/emu.h), which provides the same names.
// Names: bn_cuda_* = the C API in cuda/*.h (extern "C", called from C code and tests); bn_cu_* = C++ helpers
// and kernels' host wrappers in .cuh/.cu files, used only by CUDA code.
//
// Both builds provide:
//   BN_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)  the only way to launch a kernel
//   bn_cu_grid_begin()         the first statement of every kernel (programmatic dependent launch, below)
//   bn_ldg_weight(p)           a weight load through the read-only cache (the only __ldg)
//   bn_ld_vec(p)               a vector load of activations (alignment-checked by the emulator)
//   BN_SHARED(T, name, N)      static shared array `name`, 16-byte aligned (a pointer in emu: never take sizeof(name))
//   BN_DYN_SHARED(T, name)     the dynamic shared region of the launch as T *name
//   BN_DEVICE                  __device__ __forceinline__
//   bn_half, bn_h2f, bn_f2h    16-bit float storage and RNE conversions, identical in both builds
//   bn_half_bits(u16), bn_half_raw(h)   reinterpretation from/to the raw fp16 bits (GGUF data)
//   bn_f2bf                    a float rounded to bfloat16 (raw bits, RNE), identical in both builds
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
// the emulator runs kernels one after another; it checks that every thread of every kernel calls bn_cu_grid_begin
#define bn_cu_grid_begin() bn_emu::grid_begin(BN_EMU_SITE)
template <class T> static inline T bn_ldg_weight(const T *p) { return __ldg(p); }
template <class T> static inline T bn_ld_vec(const T *p) {
    if ((uintptr_t)p % alignof(T) != 0) bn_emu::misaligned("vector load", p, alignof(T));
    return *p;
}
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
typedef __half bn_half;
#define BN_LAUNCH(kernel, grid, block, smem, stream, ...)                                                      \
    bn_cu_launch(kernel, dim3(grid), dim3(block), (size_t)(smem), (cudaStream_t)(stream), ##__VA_ARGS__)
// 16-byte aligned, as the emulator places every BN_SHARED array: kernels may read two halves as one 32-bit word or
// four floats as a float4 (the GPU faults on a misaligned access; __half alone would be 2-byte aligned)
#define BN_SHARED(T, name, N) __shared__ __align__(16) T name[N]
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

// bn_f2bf: the raw bits of the bfloat16 nearest to f, ties to even, a NaN kept a quiet NaN (quant/fp16.c's
// bn_fp32_to_bf16 bit for bit; the same integer steps in both builds).
BN_DEVICE uint16_t bn_f2bf(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- programmatic dependent launch (PDL) ---------------------------------------------------------------
// With BONSAI_CUDA_PDL=1 every kernel is launched with the programmatic-stream-serialization attribute: the GPU
// may start it while the kernel before it in the stream still runs (on sm_90; the launch attribute is the
// only host-side difference). That is safe because of three rules, checked by cuda/resources.sh (test cuda_resources:
// the kernels' first statements, and the sources for the other two) and, for the first, by the emulator on every
// launch (a thread that ends, or reaches a barrier or warp operation, before the call aborts the run):
//   1. every kernel calls bn_cu_grid_begin() first, in every thread, before it touches global memory;
//   2. no __restrict__ in cuda/: const + restrict lets the compiler read through the read-only cache, and
//      move such a load above the wait;
//   3. __ldg only through bn_ldg_weight, for weights: nothing a kernel of a pass writes (bn_cu_weight_repack,
//      the one kernel that writes weights, synchronizes its stream before it returns).
// bn_cu_pdl_on: the switch, read once per process (env BONSAI_CUDA_PDL=1; off by default until measured).
bool bn_cu_pdl_on(void);

#if !defined(BONSAI_CUDA_EMU)
// bn_cu_grid_begin: waits until the kernel before this one in the stream has finished and its writes are
// visible (griddepcontrol.wait), then lets the next kernel launch (griddepcontrol.launch_dependents: its blocks
// take the SMs this grid's last blocks free; each waits in its own bn_cu_grid_begin). Both return at once
// for a kernel launched without the attribute.
BN_DEVICE void bn_cu_grid_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// bn_ldg_weight: *p through the read-only data cache (rule 3 above: weights only).
template <class T> BN_DEVICE T bn_ldg_weight(const T *p) { return __ldg(p); }
// bn_ld_vec: *p, a vector load (int4, float4, ...) of what a kernel wrote; the emulator checks its alignment.
template <class T> BN_DEVICE T bn_ld_vec(const T *p) { return *p; }

// bn_cu_launch (BN_LAUNCH): kernel<<<grid, block, smem, stream>>>(args), with the PDL attribute when
// bn_cu_pdl_on(); arguments convert implicitly, as with <<<>>>; a launch error is left for cudaGetLastError.
template <class... P, class... A>
static inline void bn_cu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                A &&...args) {
    if (!bn_cu_pdl_on()) {
        kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
        return;
    }
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}
#endif

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

// bn_cu_fail: fills err with "CUDA error: <what> (<call>) at file:line"; returns -1.
static inline int bn_cu_fail(char *err, size_t errlen, const char *what, const char *call, const char *file,
                             int line) {
    if (err && errlen) snprintf(err, errlen, "CUDA error: %s (%s) at %s:%d", what, call, file, line);
    return -1;
}
#define BN_CUDA_TRY(call, err, errlen)                                                                             \
    do {                                                                                                           \
        cudaError_t bn_e_ = (call);                                                                                \
        if (bn_e_ != cudaSuccess) return bn_cu_fail((err), (errlen), cudaGetErrorString(bn_e_), #call, __FILE__,   \
                                                    __LINE__);                                                     \
    } while (0)
#define BN_CUBLAS_TRY(call, err, errlen)                                                                           \
    do {                                                                                                           \
        cublasStatus_t bn_s_ = (call);                                                                             \
        if (bn_s_ != CUBLAS_STATUS_SUCCESS)                                                                        \
            return bn_cu_fail((err), (errlen), cublasGetStatusString(bn_s_), #call, __FILE__, __LINE__);           \
    } while (0)
#endif
