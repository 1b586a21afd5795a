// cuda/mm_host.cu — host-buffer wrappers of the matrix kernels for tests and benchmarks (cuda/mm_host.h).
#include "cuda/mm_impl.cuh"
#include "cuda/mm_host.h"
#include <stdio.h>

static size_t weight_bytes(int type, int64_t ne0, int64_t ne1) {
    int blck = bn_cu_blck(type);
    return blck ? (size_t)(ne0 / blck) * bn_cu_block_bytes(type) * ne1 : 0;
}

// check_shape: 0 when the type is supported and ne0 a multiple of its block; else -1 with err.
static int check_shape(int type, int64_t ne0, char *err, size_t errlen) {
    if (!bn_cu_type_supported(type) || ne0 % bn_cu_blck(type) != 0) {
        if (err && errlen) snprintf(err, errlen, "cuda: unsupported type %d or ne0 %lld", type, (long long)ne0);
        return -1;
    }
    return 0;
}

extern "C" int bn_cuda_mm_repackable(int type, int64_t ne0, int64_t ne1) {
    if (!bn_cu_type_supported(type) || ne0 % bn_cu_blck(type) != 0) return 0;
    size_t wb = weight_bytes(type, ne0, ne1);
    bn_cu_weight cw = {nullptr, type, ne0, ne1, wb / (ne1 > 0 ? ne1 : 1)};
    return bn_cu_weight_repackable(&cw);
}

extern "C" int bn_cuda_mm_uses_mmvq(int type, int nb) { return bn_cu_matmul_uses_mmvq(type, nb); }

extern "C" int bn_cuda_mm_set_mmq_prefill(int on) {
    const bool was = bn_cu_mmq_prefill_enabled();
    bn_cu_mmq_prefill_enable(on != 0);
    return was ? 1 : 0;
}

static_assert(BN_CUDA_MM_MMVQ_MAX_NB == BN_CU_MMVQ_KERNEL_MAX_NB, "mm_host.h's copy of the mmvq kernels' limit");

// scratch_for: bytes of scratch the path `flags` picks needs for W and nb.
static size_t scratch_for(const bn_cu_weight *w, int nb, int flags) {
    return flags & (BN_CUDA_MM_MMVQ | BN_CUDA_MM_MMQ) ? bn_cu_mmvq_scratch_bytes(w, nb)
           : flags & BN_CUDA_MM_GEMM ? bn_cu_gemm_scratch_bytes(w, nb)
                                     : bn_cu_matmul_scratch_bytes(w, nb);
}

// matmul_flags: bn_cu_matmul_multi, or its mmvq-only / GEMM-only variant with BN_CUDA_MM_MMVQ / BN_CUDA_MM_GEMM;
// with BN_CUDA_MM_DP4A the tensor cores are off, with BN_CUDA_MM_MMQ the tensor-core prefill path on, while the
// launches are enqueued (where the routing happens).
static cudaError_t matmul_flags(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                void *scratch, cublasHandle_t blas, int flags) {
    if (flags & BN_CUDA_MM_DP4A) {
        const bool was = bn_cu_mmq_tc_enabled();
        bn_cu_mmq_tc_enable(false);
        const cudaError_t e = matmul_flags(w, n, x, y, nb, scratch, blas, flags & ~BN_CUDA_MM_DP4A);
        bn_cu_mmq_tc_enable(was);
        return e;
    }
    if (flags & BN_CUDA_MM_MMQ) {
        const bool was = bn_cu_mmq_prefill_enabled();
        bn_cu_mmq_prefill_enable(true);
        const bool takes = bn_cu_mmq_prefill(w, n, nb);
        const cudaError_t e = takes ? matmul_flags(w, n, x, y, nb, scratch, blas, flags & ~BN_CUDA_MM_MMQ)
                                    : cudaErrorInvalidValue; // not a low-bit type, nb <= 32 or no tensor cores
        bn_cu_mmq_prefill_enable(was);
        return e;
    }
    if (flags & BN_CUDA_MM_MMVQ) return bn_cu_matmul_multi_mmvq(w, n, x, y, nb, scratch, 0);
    if (flags & BN_CUDA_MM_GEMM) return bn_cu_matmul_multi_gemm(w, n, x, y, nb, scratch, blas, 0);
    return bn_cu_matmul_multi(w, n, x, y, nb, scratch, blas, 0);
}

extern "C" int bn_cuda_mm_host(int type, const void *w, int64_t ne0, int64_t ne1, const float *x, int nb, float *y,
                               int flags, char *err, size_t errlen) {
    if (check_shape(type, ne0, err, errlen) < 0) return -1;
    size_t wb = weight_bytes(type, ne0, ne1);
    bn_cu_weight cw = {nullptr, type, ne0, ne1, wb / (ne1 > 0 ? ne1 : 1)};
    dev_bufs b;
    blas_handle blas;
    void *dw, *scratch;
    float *dx, *dy;
    BN_CUBLAS_TRY(cublasCreate(&blas.h), err, errlen);
    BN_CUDA_TRY(b.alloc(&dw, wb), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dx, sizeof(float) * ne0 * nb), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dy, sizeof(float) * ne1 * nb), err, errlen);
    BN_CUDA_TRY(b.alloc(&scratch, scratch_for(&cw, nb, flags)), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dx, x, sizeof(float) * ne0 * nb, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(cudaMemset(dy, 0xff, sizeof(float) * ne1 * nb), err, errlen); // NaN poison: unwritten outputs show
    cw.data = dw;
    if (flags & BN_CUDA_MM_REPACK) BN_CUDA_TRY(bn_cu_weight_repack(&cw, 0), err, errlen);
    const bn_cu_weight *cwp = &cw;
    BN_CUDA_TRY(matmul_flags(&cwp, 1, dx, &dy, nb, scratch, blas.h, flags), err, errlen);
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(y, dy, sizeof(float) * ne1 * nb, cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

extern "C" int bn_cuda_mm_multi_host(int n, const int *types, const void *const *w, int64_t ne0, const int64_t *ne1,
                                     const float *x, int nb, float *const *y, int flags, char *err, size_t errlen) {
    if (n < 1 || n > BN_CU_MATMUL_MULTI_MAX)
        return bn_cu_fail(err, errlen, "bad weight count", "n", __FILE__, __LINE__);
    for (int i = 0; i < n; i++)
        if (check_shape(types[i], ne0, err, errlen) < 0) return -1;
    dev_bufs b;
    blas_handle blas;
    bn_cu_weight cw[BN_CU_MATMUL_MULTI_MAX];
    const bn_cu_weight *cwp[BN_CU_MATMUL_MULTI_MAX];
    float *dy[BN_CU_MATMUL_MULTI_MAX], *dx;
    void *scratch;
    size_t sb = 0;
    BN_CUBLAS_TRY(cublasCreate(&blas.h), err, errlen);
    for (int i = 0; i < n; i++) {
        size_t wb = weight_bytes(types[i], ne0, ne1[i]);
        void *dw;
        cw[i] = {nullptr, types[i], ne0, ne1[i], wb / (ne1[i] > 0 ? ne1[i] : 1)};
        BN_CUDA_TRY(b.alloc(&dw, wb), err, errlen);
        BN_CUDA_TRY(b.alloc((void **)&dy[i], sizeof(float) * ne1[i] * nb), err, errlen);
        BN_CUDA_TRY(cudaMemcpy(dw, w[i], wb, cudaMemcpyHostToDevice), err, errlen);
        BN_CUDA_TRY(cudaMemset(dy[i], 0xff, sizeof(float) * ne1[i] * nb), err, errlen);
        cw[i].data = dw;
        if (flags & BN_CUDA_MM_REPACK) BN_CUDA_TRY(bn_cu_weight_repack(&cw[i], 0), err, errlen);
        size_t si = scratch_for(&cw[i], nb, flags);
        sb = si > sb ? si : sb;
        cwp[i] = &cw[i];
    }
    BN_CUDA_TRY(b.alloc((void **)&dx, sizeof(float) * ne0 * nb), err, errlen);
    BN_CUDA_TRY(b.alloc(&scratch, sb), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dx, x, sizeof(float) * ne0 * nb, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(matmul_flags(cwp, n, dx, dy, nb, scratch, blas.h, flags), err, errlen);
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    for (int i = 0; i < n; i++)
        BN_CUDA_TRY(cudaMemcpy(y[i], dy[i], sizeof(float) * ne1[i] * nb, cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

extern "C" int bn_cuda_get_rows_host(int type, const void *w, int64_t ne0, int64_t ne1, const int32_t *ids, int n,
                                     float *out, int flags, char *err, size_t errlen) {
    if (check_shape(type, ne0, err, errlen) < 0) return -1;
    size_t wb = weight_bytes(type, ne0, ne1);
    dev_bufs b;
    void *dw;
    int32_t *did;
    float *dout;
    BN_CUDA_TRY(b.alloc(&dw, wb), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&did, sizeof(int32_t) * n), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dout, sizeof(float) * ne0 * n), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(did, ids, sizeof(int32_t) * n, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(cudaMemset(dout, 0xff, sizeof(float) * ne0 * n), err, errlen);
    bn_cu_weight cw = {dw, type, ne0, ne1, wb / (ne1 > 0 ? ne1 : 1)};
    if (flags & BN_CUDA_MM_REPACK) BN_CUDA_TRY(bn_cu_weight_repack(&cw, 0), err, errlen);
    BN_CUDA_TRY(bn_cu_get_rows(&cw, did, dout, n, 0), err, errlen);
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(out, dout, sizeof(float) * ne0 * n, cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

extern "C" int bn_cuda_argmax_host(const float *x, int n, int32_t *out, char *err, size_t errlen) {
    dev_bufs b;
    float *dx;
    int32_t *dout;
    BN_CUDA_TRY(b.alloc((void **)&dx, sizeof(float) * (n + 1)), err, errlen);
    dx += n % 2; // odd n: a device copy that is not 16-byte aligned (the kernel's scalar path)
    BN_CUDA_TRY(b.alloc((void **)&dout, sizeof(int32_t)), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dx, x, sizeof(float) * n, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(bn_cu_argmax(dx, n, dout, 0), err, errlen);
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(out, dout, sizeof(int32_t), cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

extern "C" int bn_cuda_topk_host(const float *x, int n, int k, float *vals, int32_t *idx, char *err, size_t errlen) {
    dev_bufs b;
    float *dx, *dv;
    int32_t *di;
    void *scratch;
    size_t kk = k > 0 ? (size_t)k : 1;
    BN_CUDA_TRY(b.alloc((void **)&dx, sizeof(float) * n), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dv, sizeof(float) * kk), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&di, sizeof(int32_t) * kk), err, errlen);
    BN_CUDA_TRY(b.alloc(&scratch, bn_cu_topk_scratch_bytes(n, k)), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(dx, x, sizeof(float) * n, cudaMemcpyHostToDevice), err, errlen);
    BN_CUDA_TRY(bn_cu_topk(dx, n, k, dv, di, scratch, 0), err, errlen);
    BN_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(vals, dv, sizeof(float) * k, cudaMemcpyDeviceToHost), err, errlen);
    BN_CUDA_TRY(cudaMemcpy(idx, di, sizeof(int32_t) * k, cudaMemcpyDeviceToHost), err, errlen);
    return 0;
}

// fill_bench_k: deterministic pseudo-random bytes; every 2-byte field becomes a small finite fp16
// (exponent forced to 2^-4..2^-1) so float weights and block scales stay finite.
__global__ void fill_bench_k(uint16_t *p, int64_t n, uint32_t seed) {
    bn_cu_grid_begin();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = (uint16_t)((h & 0x83ffu) | 0x2c00u);
}

extern "C" double bn_cuda_mm_bench(int type, int64_t ne0, int64_t ne1, int nb, int iters, int flags, char *err,
                                   size_t errlen) {
    if (check_shape(type, ne0, err, errlen) < 0) return -1;
    if (iters < 1) iters = 1;
    size_t wb = weight_bytes(type, ne0, ne1);
    const size_t rotate_bytes = (size_t)256 << 20;
    size_t stride = (wb + 255) & ~(size_t)255;
    int copies = (int)((rotate_bytes + stride - 1) / (stride ? stride : 1));
    copies = copies < 1 ? 1 : copies > 1024 ? 1024 : copies;
    bn_cu_weight cw = {nullptr, type, ne0, ne1, wb / (ne1 > 0 ? ne1 : 1)};
    dev_bufs b;
    blas_handle blas;
    events ev;
    char *dw;
    void *scratch;
    float *dx, *dy, ms = 0;
    BN_CUBLAS_TRY(cublasCreate(&blas.h), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dw, stride * copies), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dx, sizeof(float) * ne0 * nb), err, errlen);
    BN_CUDA_TRY(b.alloc((void **)&dy, sizeof(float) * ne1 * nb), err, errlen);
    BN_CUDA_TRY(b.alloc(&scratch, scratch_for(&cw, nb, flags)), err, errlen);
    int64_t nw = (int64_t)(stride * copies / 2), nx = ne0 * nb * 2;
    BN_LAUNCH(fill_bench_k, dim3((unsigned)((nw + 255) / 256)), dim3(256), 0, 0, (uint16_t *)dw, nw, 1u);
    BN_LAUNCH(fill_bench_k, dim3((unsigned)((nx + 255) / 256)), dim3(256), 0, 0, (uint16_t *)dx, nx, 2u);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    BN_CUDA_TRY(cudaEventCreate(&ev.t0), err, errlen);
    BN_CUDA_TRY(cudaEventCreate(&ev.t1), err, errlen);
    if (flags & BN_CUDA_MM_REPACK) // every copy (their values do not matter, the layout id must be right)
        for (int i = 0; i < copies; i++) {
            bn_cu_weight ci = cw;
            ci.data = dw + stride * i;
            BN_CUDA_TRY(bn_cu_weight_repack(&ci, 0), err, errlen);
            cw.type = ci.type;
        }
    cw.data = dw;
    const bn_cu_weight *cwp = &cw;
    BN_CUDA_TRY(matmul_flags(&cwp, 1, dx, &dy, nb, scratch, blas.h, flags), err, errlen); // warm-up
    BN_CUDA_TRY(cudaEventRecord(ev.t0, 0), err, errlen);
    for (int i = 0; i < iters; i++) {
        cw.data = dw + stride * (i % copies);
        BN_CUDA_TRY(matmul_flags(&cwp, 1, dx, &dy, nb, scratch, blas.h, flags), err, errlen);
    }
    BN_CUDA_TRY(cudaEventRecord(ev.t1, 0), err, errlen);
    BN_CUDA_TRY(cudaEventSynchronize(ev.t1), err, errlen);
    BN_CUDA_TRY(cudaEventElapsedTime(&ms, ev.t0, ev.t1), err, errlen);
    return 1e3 * ms / iters;
}
