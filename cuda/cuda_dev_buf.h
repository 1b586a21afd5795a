// cuda/cuda_dev_buf.h — fp32, int and byte device buffers for C callers (cuda/dev_buf.cu): the GPU trainer's ops take
// device pointers, and C code (tests, the trainer) allocates, fills and reads them through these (bytes: weights in
// their stored type).
#ifndef BONSAI_CUDA_DEV_BUF_H
#define BONSAI_CUDA_DEV_BUF_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// bn_cuda_dev_floats: n floats of device memory (contents undefined); NULL with err filled on failure.
float *bn_cuda_dev_floats(size_t n, char *err, size_t errlen);
// bn_cuda_dev_free: frees memory of bn_cuda_dev_floats (NULL is fine).
void bn_cuda_dev_free(float *dev);
// bn_cuda_dev_upload: dev[0..n) = host[0..n); returns 0 or -1.
int bn_cuda_dev_upload(float *dev, const float *host, size_t n, char *err, size_t errlen);
// bn_cuda_dev_download: waits for all queued device work, then host[0..n) = dev[0..n); returns 0 or -1.
int bn_cuda_dev_download(float *host, const float *dev, size_t n, char *err, size_t errlen);
// bn_cuda_dev_ints: n ints of device memory (contents undefined); NULL with err filled on failure.
int *bn_cuda_dev_ints(size_t n, char *err, size_t errlen);
// bn_cuda_dev_free_ints: frees memory of bn_cuda_dev_ints (NULL is fine).
void bn_cuda_dev_free_ints(int *dev);
// bn_cuda_dev_upload_ints: dev[0..n) = host[0..n); returns 0 or -1.
int bn_cuda_dev_upload_ints(int *dev, const int *host, size_t n, char *err, size_t errlen);
// bn_cuda_dev_bytes: n bytes of device memory; NULL with err filled.
void *bn_cuda_dev_bytes(size_t n, char *err, size_t errlen);
// bn_cuda_dev_free_bytes: frees bn_cuda_dev_bytes memory (NULL is fine).
void bn_cuda_dev_free_bytes(void *dev);
// bn_cuda_dev_upload_bytes: dev[0..n) = host[0..n) bytes; 0 or -1.
int bn_cuda_dev_upload_bytes(void *dev, const void *host, size_t n, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
