// cuda/dev_buf.cu — fp32, int and byte device buffers for C callers. See cuda_dev_buf.h.
#include "cuda/common.cuh"
#include "cuda/cuda_dev_buf.h"

// dev_alloc: n elements of `size` bytes of device memory (at least one); NULL with err filled.
static void *dev_alloc(size_t n, size_t size, char *err, size_t errlen) {
    void *p = nullptr;
    const cudaError_t e = cudaMalloc(&p, (n > 0 ? n : 1) * size);
    if (e == cudaSuccess) return p;
    bn_cu_fail(err, errlen, cudaGetErrorString(e), "cudaMalloc", __FILE__, __LINE__);
    return nullptr;
}

extern "C" float *bn_cuda_dev_floats(size_t n, char *err, size_t errlen) {
    return (float *)dev_alloc(n, sizeof(float), err, errlen);
}

extern "C" void bn_cuda_dev_free(float *dev) {
    if (dev) cudaFree(dev);
}

extern "C" int bn_cuda_dev_upload(float *dev, const float *host, size_t n, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice), err, errlen);
    return 0;
}

extern "C" int bn_cuda_dev_download(float *host, const float *dev, size_t n, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

extern "C" int *bn_cuda_dev_ints(size_t n, char *err, size_t errlen) {
    return (int *)dev_alloc(n, sizeof(int), err, errlen);
}

extern "C" void bn_cuda_dev_free_ints(int *dev) {
    if (dev) cudaFree(dev);
}

extern "C" int bn_cuda_dev_upload_ints(int *dev, const int *host, size_t n, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaMemcpy(dev, host, n * sizeof(int), cudaMemcpyHostToDevice), err, errlen);
    return 0;
}

extern "C" void *bn_cuda_dev_bytes(size_t n, char *err, size_t errlen) { return dev_alloc(n, 1, err, errlen); }

extern "C" void bn_cuda_dev_free_bytes(void *dev) {
    if (dev) cudaFree(dev);
}

extern "C" int bn_cuda_dev_upload_bytes(void *dev, const void *host, size_t n, char *err, size_t errlen) {
    BN_CUDA_TRY(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice), err, errlen);
    return 0;
}
