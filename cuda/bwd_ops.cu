// cuda/bwd_ops.cu — backward kernels of the GPU trainer: norms, elementwise ops, RoPE and the GDN causal conv
// (cuda/cuda_bwd_ops.h; the same formulas as train/backward.c and train/backward_gdn.c, docs/model.md §8).
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/cuda_bwd_ops.h"

#define BWD_ELT_THREADS 256
#define BWD_ROW_THREADS_MAX 256

// row_threads: block size of a one-block-per-row kernel: n rounded up to whole warps, at most BWD_ROW_THREADS_MAX.
static int row_threads(int n) {
    const int t = (n + 31) / 32 * 32;
    return t < 32 ? 32 : t > BWD_ROW_THREADS_MAX ? BWD_ROW_THREADS_MAX : t;
}

// launched: 0 when the kernel just enqueued was accepted, else -1 with err.
static int launched(char *err, size_t errlen) {
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

// ---- device buffers ---------------------------------------------------------------------------

extern "C" float *bn_cuda_dev_floats(size_t n, char *err, size_t errlen) {
    void *p = nullptr;
    const cudaError_t e = cudaMalloc(&p, (n > 0 ? n : 1) * sizeof(float));
    if (e != cudaSuccess) {
        bn_cu_fail(err, errlen, cudaGetErrorString(e), "cudaMalloc", __FILE__, __LINE__);
        return nullptr;
    }
    return (float *)p;
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

// ---- norms ----------------------------------------------------------------------------------------

// weight_or_one: w[i], or 1 when there is no weight.
static BN_DEVICE float weight_or_one(const float *w, int i) { return w ? w[i] : 1.0f; }

// rmsnorm_bwd_kernel: one block per row; dx += ρ(g − x·ρ·mean(g ⊙ x·ρ)) with g = dy ⊙ w, ρ = (mean x² + eps)^-½.
static __global__ void rmsnorm_bwd_kernel(const float *x, const float *w, int n, float eps, const float *dy,
                                          float *dx) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f, dot = 0.0f; // Σx², Σg·x
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float xi = x[off + i];
        sum_sq += xi * xi;
        dot += dy[off + i] * weight_or_one(w, i) * xi;
    }
    sum_sq = bn_block_sum(sum_sq, red);
    dot = bn_block_sum(dot, red);
    const float rho = 1.0f / sqrtf(sum_sq / (float)n + eps);
    const float mean_gx = dot * rho / (float)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float g = dy[off + i] * weight_or_one(w, i);
        dx[off + i] += rho * (g - x[off + i] * rho * mean_gx);
    }
}

extern "C" int bn_cuda_rmsnorm_bwd(const float *x, const float *w, int n, int rows, float eps, const float *dy,
                                   float *dx, void *stream, char *err, size_t errlen) {
    if (!dx || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(rmsnorm_bwd_kernel, rows, row_threads(n), 0, stream, x, w, n, eps, dy, dx);
    return launched(err, errlen);
}

// l2norm_bwd_kernel: one block per row; dx += (dy − y(y·dy))·r with y = x·r, r = (Σx² + eps)^-½.
static __global__ void l2norm_bwd_kernel(const float *x, int n, float eps, const float *dy, float *dx) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f, xdy = 0.0f; // Σx², Σx·dy
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float xi = x[off + i];
        sum_sq += xi * xi;
        xdy += xi * dy[off + i];
    }
    sum_sq = bn_block_sum(sum_sq, red);
    xdy = bn_block_sum(xdy, red);
    const float r = 1.0f / sqrtf(sum_sq + eps);
    const float ydy = xdy * r;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dx[off + i] += (dy[off + i] - x[off + i] * r * ydy) * r;
}

extern "C" int bn_cuda_l2norm_bwd(const float *x, int n, int rows, float eps, const float *dy, float *dx,
                                  void *stream, char *err, size_t errlen) {
    if (!dx || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(l2norm_bwd_kernel, rows, row_threads(n), 0, stream, x, n, eps, dy, dx);
    return launched(err, errlen);
}

// gated_rmsnorm_bwd_kernel: one block per row of y = w ⊙ o·ρ ⊙ SiLU(z); dz += dy ⊙ w ⊙ o·ρ ⊙ SiLU'(z) and
// dout += the RMSNorm backward of g = dy ⊙ SiLU(z) ⊙ w (either may be NULL).
static __global__ void gated_rmsnorm_bwd_kernel(const float *o, const float *z, const float *w, int n, float eps,
                                                const float *dy, float *dout, float *dz) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f, dot = 0.0f; // Σo², Σg·o
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float oi = o[off + i], zi = z[off + i];
        sum_sq += oi * oi;
        dot += dy[off + i] * (zi * bn_cu_sigmoid(zi)) * weight_or_one(w, i) * oi;
    }
    sum_sq = bn_block_sum(sum_sq, red);
    dot = bn_block_sum(dot, red);
    const float rho = 1.0f / sqrtf(sum_sq / (float)n + eps);
    const float mean_go = dot * rho / (float)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float oi = o[off + i], zi = z[off + i], sg = bn_cu_sigmoid(zi), wi = weight_or_one(w, i);
        if (dz) dz[off + i] += dy[off + i] * wi * oi * rho * (sg * (1.0f + zi * (1.0f - sg)));
        if (dout) dout[off + i] += rho * (dy[off + i] * (zi * sg) * wi - oi * rho * mean_go);
    }
}

extern "C" int bn_cuda_gated_rmsnorm_bwd(const float *o, const float *z, const float *w, int n, int rows, float eps,
                                         const float *dy, float *dout, float *dz, void *stream, char *err,
                                         size_t errlen) {
    if ((!dout && !dz) || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(gated_rmsnorm_bwd_kernel, rows, row_threads(n), 0, stream, o, z, w, n, eps, dy, dout, dz);
    return launched(err, errlen);
}
