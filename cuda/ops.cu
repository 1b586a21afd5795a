// cuda/ops.cu — norms, rotary embeddings and elementwise kernels of the CUDA forward (same formulas
// as core/ops.c; shapes and contracts in cuda/fwd.cuh).
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/mm_impl.cuh" // bn_q8_store: the producers' Q8 outputs

#define ELT_THREADS 256
#define NORM_THREADS 256
#define HEAD_THREADS 128

// no_q8: the q8 argument of a kernel launched without a Q8 output (<false>).
static const bn_q8_out no_q8 = {};

// grid_1d: blocks of ELT_THREADS covering count items.
static int grid_1d(int64_t count) { return (int)((count + ELT_THREADS - 1) / ELT_THREADS); }

// rmsnorm_kernel: one block per row (Q8: also y's Q8 activations, a warp per 32-element unit).
template <bool Q8> static __global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int n, float eps,
                                                         bn_q8_out q8) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum_sq += xr[i] * xr[i];
    sum_sq = bn_block_sum(sum_sq, red);
    const float scale = 1.0f / sqrtf(sum_sq / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = w ? w[i] * (xr[i] * scale) : xr[i] * scale;
        yr[i] = v;
        if (Q8) bn_q8_store(v, (int64_t)blockIdx.x * n + i, q8);
    }
}

cudaError_t bn_cu_rmsnorm(float *y, const float *x, const float *w, int n, int nb, float eps, cudaStream_t s,
                          const bn_q8_out *q8) {
    if (q8) BN_LAUNCH(rmsnorm_kernel<true>, nb, NORM_THREADS, 0, s, y, x, w, n, eps, *q8);
    else BN_LAUNCH(rmsnorm_kernel<false>, nb, NORM_THREADS, 0, s, y, x, w, n, eps, no_q8);
    return cudaGetLastError();
}

// add_rmsnorm_kernel: one block per row; each thread adds and then normalises its own elements (Q8: as
// rmsnorm_kernel).
template <bool Q8>
static __global__ void add_rmsnorm_kernel(float *x, const float *r, float *y, const float *w, int n, float eps,
                                          bn_q8_out q8) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    float *xr = x + (size_t)blockIdx.x * n;
    const float *rr = r + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i] + rr[i];
        xr[i] = v;
        sum_sq += v * v;
    }
    sum_sq = bn_block_sum(sum_sq, red);
    const float scale = 1.0f / sqrtf(sum_sq / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = w ? w[i] * (xr[i] * scale) : xr[i] * scale;
        yr[i] = v;
        if (Q8) bn_q8_store(v, (int64_t)blockIdx.x * n + i, q8);
    }
}

cudaError_t bn_cu_add_rmsnorm(float *x, const float *r, float *y, const float *w, int n, int nb, float eps,
                              cudaStream_t s, const bn_q8_out *q8) {
    if (q8) BN_LAUNCH(add_rmsnorm_kernel<true>, nb, NORM_THREADS, 0, s, x, r, y, w, n, eps, *q8);
    else BN_LAUNCH(add_rmsnorm_kernel<false>, nb, NORM_THREADS, 0, s, x, r, y, w, n, eps, no_q8);
    return cudaGetLastError();
}

static __global__ void add_kernel(float *y, const float *x, int64_t count) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) y[i] += x[i];
}

cudaError_t bn_cu_add(float *y, const float *x, int64_t count, cudaStream_t s) {
    BN_LAUNCH(add_kernel, grid_1d(count), ELT_THREADS, 0, s, y, x, count);
    return cudaGetLastError();
}

static __global__ void add_bias_kernel(float *y, const float *b, int n, int64_t count) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) y[i] += b[i % n];
}

cudaError_t bn_cu_add_bias(float *y, const float *b, int n, int nb, cudaStream_t s) {
    const int64_t count = (int64_t)n * nb;
    BN_LAUNCH(add_bias_kernel, grid_1d(count), ELT_THREADS, 0, s, y, b, n, count);
    return cudaGetLastError();
}

// swiglu_kernel: one thread per element (Q8: count % 32 == 0, so whole warps hold whole units).
template <bool Q8>
static __global__ void swiglu_kernel(float *y, const float *gate, const float *up, int64_t count, bn_q8_out q8) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const float v = bn_cu_silu(gate[i]) * up[i];
    y[i] = v;
    if (Q8) bn_q8_store(v, i, q8);
}

cudaError_t bn_cu_swiglu(float *y, const float *gate, const float *up, int64_t count, cudaStream_t s,
                         const bn_q8_out *q8) {
    if (q8) BN_LAUNCH(swiglu_kernel<true>, grid_1d(count), ELT_THREADS, 0, s, y, gate, up, count, *q8);
    else BN_LAUNCH(swiglu_kernel<false>, grid_1d(count), ELT_THREADS, 0, s, y, gate, up, count, no_q8);
    return cudaGetLastError();
}

// gated_rmsnorm_kernel: one block per row (Q8: rows of n % 32 == 0 elements back to back in q8's columns).
template <bool Q8>
static __global__ void gated_rmsnorm_kernel(float *y, const float *o, const float *z, const float *w, int n, float eps,
                                            bn_q8_out q8) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum_sq += o[off + i] * o[off + i];
    sum_sq = bn_block_sum(sum_sq, red);
    const float scale = 1.0f / sqrtf(sum_sq / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = bn_cu_gated_norm_elem(o[off + i], scale, w, i, z[off + i]);
        y[off + i] = v;
        if (Q8) bn_q8_store(v, (int64_t)off + i, q8);
    }
}

cudaError_t bn_cu_gated_rmsnorm(float *y, const float *o, const float *z, const float *w, int n, int n_rows,
                                float eps, cudaStream_t s, const bn_q8_out *q8) {
    if (q8) BN_LAUNCH(gated_rmsnorm_kernel<true>, n_rows, HEAD_THREADS, 0, s, y, o, z, w, n, eps, *q8);
    else BN_LAUNCH(gated_rmsnorm_kernel<false>, n_rows, HEAD_THREADS, 0, s, y, o, z, w, n, eps, no_q8);
    return cudaGetLastError();
}

static __global__ void advance_pos_kernel(int *d_pos, int n) {
    bn_cu_grid_begin();
    if (threadIdx.x == 0) d_pos[0] += n;
}

cudaError_t bn_cu_advance_pos(int *d_pos, int n, cudaStream_t s) {
    BN_LAUNCH(advance_pos_kernel, 1, 32, 0, s, d_pos, n);
    return cudaGetLastError();
}
