// cuda/upload.cuh — device memory helpers for the CUDA engines (C++/CUDA only; include after
// "cuda/common.cuh" and "cuda/mm.cuh"): a set of tracked device allocations freed together, a weight
// matrix uploaded in its stored type and repacked to cudamm's decode layout (bn_cu_weight_repack), host
// floats, the carver that lays a state's buffers out in one allocation, a state's stream + cuBLAS
// handle, and graph capture. Used by cuda/model.cu, state.cu and forward*.cu (the target) and cuda/dspark*.cu (the
// drafter).
#ifndef BONSAI_CUDA_UPLOAD_CUH
#define BONSAI_CUDA_UPLOAD_CUH
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include "core/model.h"
}

// Every device allocation of one uploaded model.
struct bn_cu_allocs {
    void **ptrs;
    int n, cap;
    size_t bytes; // total held
};

// bn_cu_alloc: a device allocation of bytes tracked in a; 0 or -1 with err ("out of device memory").
int bn_cu_alloc(bn_cu_allocs *a, void **p, size_t bytes, char *err, size_t errlen);
// bn_cu_allocs_free: frees every allocation of a (a itself is the caller's).
void bn_cu_allocs_free(bn_cu_allocs *a);
// bn_cu_upload_weight: w (host, 2-D or more, ne0 = row length) to the device in its type, repacked where
// bn_cu_weight_repack applies (enqueued on stream 0); absent weights (data NULL) give out->data NULL.
// Returns 0, or -1 with err (a type the kernels do not handle, out of memory, a CUDA error).
int bn_cu_upload_weight(bn_cu_allocs *a, const bn_weight *w, bn_cu_weight *out, char *err, size_t errlen);
// bn_cu_upload_floats: n host floats to a new device buffer *out; 0 or -1 with err.
int bn_cu_upload_floats(bn_cu_allocs *a, const float *host, size_t n, float **out, char *err, size_t errlen);

// bn_cu_stream_blas_new: a state's own stream, non-blocking (no implicit sync with the legacy stream, so
// another thread's cudaMemcpy cannot invalidate its graph captures, cudaErrorStreamCaptureImplicit, or wait
// on its work), and a cuBLAS handle set to it. 0, or -1 with err (what is made stays set for the free).
int bn_cu_stream_blas_new(cudaStream_t *stream, cublasHandle_t *blas, char *err, size_t errlen);
// bn_cu_stream_blas_free: destroys what bn_cu_stream_blas_new made (NULL members are skipped).
void bn_cu_stream_blas_free(cudaStream_t stream, cublasHandle_t blas);

// bn_cu_capture: records what body() enqueues on stream into a new executable graph *exec (and, when n_nodes is
// given, its node count into *n_nodes); returns the first error (body's, the capture's or the instantiation's;
// *exec is NULL then).
template <typename Body>
static inline cudaError_t bn_cu_capture(cudaStream_t stream, cudaGraphExec_t *exec, Body body, size_t *n_nodes = NULL) {
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return e;
    e = body();
    cudaGraph_t graph = NULL;
    const cudaError_t e_end = cudaStreamEndCapture(stream, &graph);
    if (e == cudaSuccess) e = e_end;
    if (e == cudaSuccess && n_nodes) e = cudaGraphGetNodes(graph, NULL, n_nodes);
    if (e == cudaSuccess) e = cudaGraphInstantiate(exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) *exec = NULL;
    return e;
}

// Carves 256-byte aligned pieces out of one block: a first pass with base == NULL only counts the bytes
// (off), a second one with the allocation assigns the pointers.
struct bn_cu_carver {
    char *base;
    size_t off;
};
// bn_cu_carve: the next piece of bytes (NULL in the counting pass).
static inline void *bn_cu_carve(bn_cu_carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->off : NULL;
    c->off += (bytes + 255) & ~(size_t)255;
    return p;
}

#endif
