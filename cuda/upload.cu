// cuda/upload.cu — tracked device allocations, weight uploads and a state's stream + cuBLAS handle (cuda/upload.cuh).
#include "cuda/common.cuh"
#include "cuda/mm.cuh"
#include "cuda/upload.cuh"
extern "C" {
#include "base/util.h"
// from quant/quant.h, which cannot be included next to common.cuh (both define bn_half)
size_t bn_row_size(int type, int64_t ne0);
const char *bn_type_name(int type);
}
#include <stdlib.h>
#include <string.h>

int bn_cu_alloc(bn_cu_allocs *a, void **p, size_t bytes, char *err, size_t errlen) {
    if (cudaMalloc(p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return bn_err(err, errlen, "CUDA: out of device memory (%zu bytes more, %zu held)", bytes, a->bytes);
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->ptrs = (void **)xrealloc(a->ptrs, sizeof(void *) * (size_t)a->cap);
    }
    a->ptrs[a->n++] = *p;
    a->bytes += bytes;
    return 0;
}

void bn_cu_allocs_free(bn_cu_allocs *a) {
    for (int i = 0; i < a->n; i++) cudaFree(a->ptrs[i]);
    free(a->ptrs);
    memset(a, 0, sizeof *a);
}

int bn_cu_upload_weight(bn_cu_allocs *a, const bn_weight *w, bn_cu_weight *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!w->data) return 0;
    if (!bn_cu_type_supported(w->type))
        return bn_err(err, errlen, "CUDA: weight %s has type %s, which the CUDA kernels do not handle",
                      w->name ? w->name : "?", bn_type_name(w->type));
    out->type = w->type;
    out->ne0 = w->ne[0];
    out->ne1 = w->ne[1] * w->ne[2] * w->ne[3];
    out->row_bytes = bn_row_size(w->type, w->ne[0]);
    const size_t bytes = out->row_bytes * (size_t)out->ne1;
    void *d = NULL;
    if (bn_cu_alloc(a, &d, bytes, err, errlen) != 0) return -1;
    BN_CUDA_TRY(cudaMemcpy(d, w->data, bytes, cudaMemcpyHostToDevice), err, errlen);
    out->data = d;
    BN_CUDA_TRY(bn_cu_weight_repack(out, 0), err, errlen); // decode-friendly layout where it applies
    return 0;
}

int bn_cu_upload_floats(bn_cu_allocs *a, const float *host, size_t n, float **out, char *err, size_t errlen) {
    void *d = NULL;
    if (bn_cu_alloc(a, &d, sizeof(float) * n, err, errlen) != 0) return -1;
    BN_CUDA_TRY(cudaMemcpy(d, host, sizeof(float) * n, cudaMemcpyHostToDevice), err, errlen);
    *out = (float *)d;
    return 0;
}

int bn_cu_stream_blas_new(cudaStream_t *stream, cublasHandle_t *blas, char *err, size_t errlen) {
    if (cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        return bn_err(err, errlen, "CUDA: cannot create a stream");
    }
    if (cublasCreate(blas) != CUBLAS_STATUS_SUCCESS) return bn_err(err, errlen, "cuBLAS: cannot create a handle");
    if (cublasSetStream(*blas, *stream) != CUBLAS_STATUS_SUCCESS)
        return bn_err(err, errlen, "cuBLAS: cannot set the stream");
    return 0;
}

void bn_cu_stream_blas_free(cudaStream_t stream, cublasHandle_t blas) {
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
}
