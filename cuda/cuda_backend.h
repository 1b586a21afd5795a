// cuda/cuda_backend.h — the CUDA backend's device-level C interface (device count and name, the low-bit mat-vec
// kernels and the activation quantizer, callable from C; implemented in .cu files). Programs reach the CUDA engine
// through core/engine.h (bn_engine_open); this header is for the CUDA library itself, its tests and benchmarks.
#ifndef BONSAI_CUDA_BACKEND_H
#define BONSAI_CUDA_BACKEND_H
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// bn_cuda_device_count: number of usable CUDA devices (0 without a driver or GPU).
int bn_cuda_device_count(void);
// bn_cuda_device_name: name of device 0 into buf; returns buf ("" if none).
const char *bn_cuda_device_name(char *buf, size_t n);

// bn_cuda_matvec: y[r] = dot(row r of W, x) for r < nrows on the GPU. W is a host buffer of nrows
// rows of ncols elements in `type` (any type bn_cu_matmul supports: cuda/mm.cuh); x is quantized to
// Q8 on the device (CUDA semantics: q = roundf(x/d), d = amax/127). Uploads, runs, downloads;
// returns 0, or -1 with err filled. For tests and benchmarks (wrapper of bn_cuda_mm_host, nb = 1).
int bn_cuda_matvec(int type, const void *w, int64_t ncols, int64_t nrows, const float *x, float *y,
                   char *err, size_t errlen);

// bn_cuda_matvec_bench: mean kernel time in microseconds of the matvec of this shape (bn_cuda_mm_bench
// with nb = 1; w is unused: weights are generated on the device), or a negative value on error.
double bn_cuda_matvec_bench(int type, const void *w, int64_t ncols, int64_t nrows, int iters,
                            char *err, size_t errlen);

// bn_cuda_copy_bandwidth: measured device-to-device copy bandwidth in GB/s (read + write bytes
// counted), for % of roofline; negative on error.
double bn_cuda_copy_bandwidth(size_t bytes, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
