// tests/cuda/emu_kernels.h — small kernels (tests/cuda/emu_kernels.cu) that exercise the CUDA contract
// of cuda/common.cuh; test_emu_runtime.c runs them on the emulator and, where one exists, on a GPU.
// Every function takes host arrays, uploads, launches, downloads; returns 0, or -1 with err filled.
#ifndef BONSAI_TESTS_EMU_KERNELS_H
#define BONSAI_TESTS_EMU_KERNELS_H
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// ek_block_sum: out[b] = sum of x[256 b .. 256 b + 255] (zero past n) by a shared-memory tree.
int ek_block_sum(const float *x, int n, float *out, char *err, size_t errlen);
// ek_sync_votes: 256 threads; out[5 t + k] = __syncthreads_count(t % 3 == 0), _and(t < 1000), _or(t == 77),
// _and(t != 200), _or(t > 1000) for k = 0..4.
int ek_sync_votes(int *out, char *err, size_t errlen);
// ek_warp_ops: for 64 threads (2 warps) of x: out[k * 64 + t] = result k of thread t, k < EK_WARP_OPS:
// 0 xor-butterfly sum, 1 down-reduction (lane 0 has the sum), 2 inclusive scan with __shfl_up_sync,
// 3 broadcast of lane 5 (__shfl_sync), 4 rotation src = lane + 3 (__shfl_sync), 5 xor sum with width 8,
// 6 __ballot_sync(x odd), 7 __any_sync(x == 7), 8 __all_sync(x >= 0), 9 float max via xor (bits),
// 10 down by 4 with width 16 (own value past the segment).
#define EK_WARP_OPS 11
int ek_warp_ops(const int *x, int *out, char *err, size_t errlen);
// ek_warp_reduce: N = EK_REDUCE_THREADS threads (8 warps): out[0..N) xor-butterfly float sum by shuffles,
// out[N..2N) bn_warp_reduce_sum, out[2N..3N) butterfly fmaxf by shuffles, out[3N..4N) bn_warp_reduce_max;
// outi[0..N) int butterfly sum by shuffles, outi[N..2N) bn_warp_reduce_sum(int).
#define EK_REDUCE_THREADS 256
int ek_warp_reduce(const float *x, const int *xi, float *out, int *outi, char *err, size_t errlen);
// ek_dyn_reverse: reverses each block of `block` floats through dynamic shared memory of block floats
// (block up to 1024; smem > 48 KiB uses the opt-in attribute) and also sums it with a 2nd static array.
int ek_dyn_reverse(const float *x, int n, int block, int extra_floats, float *out, char *err, size_t errlen);
// ek_atomics: 64 blocks x 256 threads: counts[0] += 1 (int), counts[1] = max(global thread id),
// counts[2] += 1 via an atomicCAS loop, *fsum += 1.0f per thread.
int ek_atomics(int *counts, float *fsum, char *err, size_t errlen);
// ek_mma: for n tiles (two warps per block, a warp per tile): D[t] = A[t]·B[t] + C[t] and D2[t] = A[t]·B[t] + D[t]
// (the second call with d aliasing c) through bn_mma_s8_16x8x32 (cuda/mma.cuh), fragments loaded from memory by
// the PTX layout formulas. A: {32, 16} int8 row major (a[t*512 + 32 row + k]), B: column major
// (b[t*256 + 32 col + k]), C, D, D2: {8, 16} int32 row major (c[t*128 + 8 row + col]).
int ek_mma(const int8_t *a, const int8_t *b, const int32_t *c, int32_t *d, int32_t *d2, int n, char *err,
           size_t errlen);
// ek_dp4a: out[i] = __dp4a(a[i], b[i], c[i]) on the device.
int ek_dp4a(const int *a, const int *b, const int *c, int *out, int n, char *err, size_t errlen);
// ek_half: f[h] = bn_h2f(h) and back[h] = bn_f2h(f[h]) for all 65536 codes; rn[i] = bn_f2h(x[i]).
int ek_half(float *f, uint16_t *back, const float *x, uint16_t *rn, int n, char *err, size_t errlen);
// ek_grid3d: grid (3,2,2) x block (32,2,2): out[global linear id] = packed (block, thread) coordinates.
int ek_grid3d(uint32_t *out, int n, char *err, size_t errlen);
// ek_graph: captures a kernel that reads a device counter (replays see fresh values) and one that bakes
// a host step into its argument; replays both 3 times. live_log/baked_log[4] get written indices
// (-1 untouched); *counter_after_capture is the counter right after capture (0: nothing ran);
// *nodes is the node count of the first graph; *bad_call/*bad_end the errors of a synchronous
// cudaMemcpy during a capture and of ending that capture.
int ek_graph(int *live_log, int *baked_log, int *counter_after_capture, int *nodes, int *bad_call, int *bad_end,
             char *err, size_t errlen);
// ek_gemm: C = A op B with cuBLAS in column-major: Sgemm when half_in == 0, else GemmEx with 16F A and B
// (half_out: 16F C). A, B, C are float host arrays (converted to fp16 when asked; C read back as float).
int ek_gemm(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
            int half_in, int half_out, char *err, size_t errlen);
// ek_shift: out[t] = x[t - 1] (x[255] for t = 0) through shared memory, with (barrier = 1) or without the
// __syncthreads between the write and the read; one block of 256.
int ek_shift(const float *x, float *out, int barrier, char *err, size_t errlen);
// ek_bad: runs a broken kernel (emulator only: it aborts with a report): 1 deadlock at __syncthreads,
// 2 shuffle reached by 16 lanes, 3 64 KiB static shared memory, 4 100 KiB dynamic shared memory
// without opt-in, 5 block of 2048 threads, 6 store through a null pointer, 7 256 KiB of locals (stack overflow),
// 8 host code reading device memory, 9 a kernel storing one page past a 4 KiB allocation, 10 a store past
// the launch's dynamic shared memory, 11 dynamic shared memory used with smem_bytes = 0, 12 a store past
// a BN_SHARED array, 13 the shift without its barrier under the race check (bn_cuda_emu_set_racecheck),
// 14 a full-mask shuffle after lane 5 returned, 15 a full-mask warp reduction in a 48-thread block (lanes
// that do not exist), 16 odd and even lanes at two different shuffles, 17 two halves of a block at two
// different __syncthreads, 18 a float4 __ldg 4 bytes past alignment, 19 grid y 65536, 20 block z 65, 21 odd lanes
// at bn_mma_s8_16x8x32 while even lanes shuffle, 22 a kernel that never calls bn_cu_grid_begin, 23 a __syncthreads
// before it.
int ek_bad(int which, char *err, size_t errlen);
// ek_capture_pageable: in a capture, cudaMemcpyAsync from pinned (cudaMallocHost) memory, then from
// pageable (malloc) memory: *pinned_rc, *pageable_rc their errors and *end_rc that of ending the capture
// (CUDA: success, cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated).
int ek_capture_pageable(int *pinned_rc, int *pageable_rc, int *end_rc, char *err, size_t errlen);
// ek_capture_threads: while this thread captures a non-blocking stream, a second thread allocates and frees device
// memory: rc[0], rc[1] the second thread's cudaMalloc and this thread's cudaStreamEndCapture errors for a ThreadLocal
// capture (CUDA: both succeed: other threads are not bound), rc[2], rc[3] for a Global one (CUDA: the allocation is
// refused, cudaErrorStreamCaptureUnsupported, and the capture invalidated).
int ek_capture_threads(int rc[4], char *err, size_t errlen);
// ek_copy_2d: cudaMemcpy2DAsync of 5 rows × 7 floats from a device buffer of row pitch 9 holding 0, 1, 2, ... into
// host_rows (row pitch 11: room for 55 floats; the 4 floats after each row are left as they were) and into a device
// buffer of pitch 7, copied back into back (35 floats); *bad_pitch_rc: the error of a copy whose width exceeds its
// destination pitch (cudaErrorInvalidPitchValue, 12). Returns 0 or -1 with err.
int ek_copy_2d(float *host_rows, float *back, int *bad_pitch_rc, char *err, size_t errlen);
// ek_switch_bench: mode 0: one block of `threads` threads passing `rounds` __syncthreads; mode 1: the
// same with warp shuffles; mode 2: `rounds` blocks of `threads` threads without barriers. Returns 0.
// For the emulator's switch cost.
int ek_switch_bench(int threads, int rounds, int mode, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
