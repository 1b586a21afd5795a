// cuda/matvec.cu — the C API of cuda/cuda_backend.h for the matrix kernels: device queries, the
// copy-bandwidth probe, and bn_cuda_matvec / bn_cuda_matvec_bench as thin wrappers of the one matmul
// implementation (cuda/mm.cuh via cuda/mm_host.h, nb = 1).
#include "cuda/mm_impl.cuh"
#include "cuda/cuda_backend.h"
#include "cuda/mm_host.h"
#include <stdio.h>

extern "C" int bn_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" const char *bn_cuda_device_name(char *buf, size_t n) {
    cudaDeviceProp p;
    if (n) buf[0] = 0;
    if (bn_cuda_device_count() > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess) snprintf(buf, n, "%s", p.name);
    return buf;
}

extern "C" int bn_cuda_matvec(int type, const void *w, int64_t ncols, int64_t nrows, const float *x, float *y,
                              char *err, size_t errlen) {
    return bn_cuda_mm_host(type, w, ncols, nrows, x, 1, y, 0, err, errlen);
}

extern "C" double bn_cuda_matvec_bench(int type, const void *w, int64_t ncols, int64_t nrows, int iters, char *err,
                                       size_t errlen) {
    (void)w; // the benchmark generates its weights on the device (the values do not change the speed)
    return bn_cuda_mm_bench(type, ncols, nrows, 1, iters, 0, err, errlen);
}

extern "C" double bn_cuda_copy_bandwidth(size_t bytes, char *err, size_t errlen) {
    if (bn_cuda_device_count() == 0) {
        if (err && errlen) snprintf(err, errlen, "cuda: no CUDA device");
        return -1;
    }
    dev_bufs b;
    events ev;
    void *src, *dst;
    float ms = 0;
    const int iters = 10;
    BN_CUDA_TRY(b.alloc(&src, bytes), err, errlen);
    BN_CUDA_TRY(b.alloc(&dst, bytes), err, errlen);
    BN_CUDA_TRY(cudaMemset(src, 1, bytes), err, errlen);
    BN_CUDA_TRY(cudaEventCreate(&ev.t0), err, errlen);
    BN_CUDA_TRY(cudaEventCreate(&ev.t1), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), err, errlen); // warm-up
    BN_CUDA_TRY(cudaEventRecord(ev.t0, 0), err, errlen);
    for (int i = 0; i < iters; i++) BN_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), err, errlen);
    BN_CUDA_TRY(cudaEventRecord(ev.t1, 0), err, errlen);
    BN_CUDA_TRY(cudaEventSynchronize(ev.t1), err, errlen);
    BN_CUDA_TRY(cudaEventElapsedTime(&ms, ev.t0, ev.t1), err, errlen);
    return 2.0 * bytes * iters / (ms * 1e-3) / 1e9;
}
