// cuda/bwd_linear.cu — the backward of a linear with a LoRA pair for the trainer (docs/model.md §8; the products of
// train/backward.c bn_linear_lora_bwd) through cuBLAS GEMMs on column-major views of the row-major tensors: a {n, T}
// tensor is an n × T matrix with leading dimension n. The base product Wᵀdy in fp32 (a base weight of another type
// than F32 made fp32 a chunk of rows at a time in the workspace, bit-identically to the CPU's dequantization) or with
// bf16 inputs and fp32 accumulation (every weight made bf16 a chunk at a time, dy rounded to a bf16 copy); the LoRA
// products in fp32 (cuda/linear.cuh, shared with the forward).
#include "cuda/common.cuh"
#include "cuda/cuda_bwd_seq.h"
#include "cuda/linear.cuh"

// add_mul_kernel: y[i] += a[i]·b[i], i < count.
static __global__ void add_mul_kernel(float *y, const float *a, const float *b, int64_t count) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) y[i] += a[i] * b[i];
}

// base_dx_f32: dx (n_in × T) += W·dy, W {n_in, n_out} = the n_in × n_out matrix of its rows, fp32; other types' rows
// made fp32 chunk by chunk into wbuf. Returns 0 or -1 (err).
static int base_dx_f32(cublasHandle_t h, int w_type, const void *W, int64_t n_in, int64_t n_out, int T,
                       const float *dy, float *dx, float *wbuf, cudaStream_t s, char *err, size_t errlen) {
    return for_weight_chunks(w_type, W, n_in, n_out, wbuf, s, err, errlen, [&](const float *w, int64_t j0, int64_t nr) {
        BN_CUBLAS_TRY(gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n_in, T, nr, 1.0f, w, n_in, dy + j0, n_out, 1.0f, dx, n_in), err,
                      errlen);
        return 0;
    });
}

// base_dx_bf16: the same product with bf16 inputs and fp32 accumulation: dy rounded into b.act16, W's rows made bf16
// chunk by chunk into b.w16, each chunk's GEMM adding its rows' share into dx. Returns 0 or -1 (err).
static int base_dx_bf16(cublasHandle_t h, int w_type, const void *W, int64_t n_in, int64_t n_out, int T,
                        const float *dy, float *dx, const base_scratch &b, cudaStream_t s, char *err, size_t errlen) {
    if (round_bf16(dy, n_out * T, b.act16, s, err, errlen) < 0) return -1;
    const uint16_t *dy16 = b.act16;
    return for_weight_chunks_bf16(w_type, W, n_in, n_out, b.w16, s, err, errlen,
                                  [&](const uint16_t *w, int64_t j0, int64_t nr) {
        BN_CUBLAS_TRY(gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_N, n_in, T, nr, 1.0f, w, n_in, dy16 + j0, n_out, 1.0f, dx,
                                n_in), err, errlen);
        return 0;
    });
}

// lin_workspace: the workspace's parts: the base product's scratch (weight chunk; bf16: and dy's bf16 copy), x⊙drop,
// A·(x⊙drop), Bᵀdy, the LoRA dx before the drop mask.
struct lin_workspace {
    base_scratch base;
    float *xd, *ax, *gb, *tmp;
};

// lin_split: ws (NULL: sizes only) cut into lin_workspace's parts for these shapes; *floats = the total
// (bn_cuda_linear_lora_bwd_workspace_floats).
static lin_workspace lin_split(float *ws, bool bf16, int w_type, int64_t n_in, int64_t n_out, int r, int T,
                               int64_t *floats) {
    lin_workspace p;
    p.base = base_split(ws, bf16, w_type, n_in, n_out, n_out, T);
    const int64_t xd = p.base.floats, ax = xd + n_in * T, gb = ax + (int64_t)r * T, tmp = gb + (int64_t)r * T;
    p.xd = ws ? ws + xd : nullptr;
    p.ax = ws ? ws + ax : nullptr;
    p.gb = ws ? ws + gb : nullptr;
    p.tmp = ws ? ws + tmp : nullptr;
    *floats = tmp + n_in * T;
    return p;
}

// lora_bwd: the LoRA terms of bn_cuda_linear_lora_bwd (dA, dB, and dx when not NULL). Returns 0 or -1 (err).
static int lora_bwd(cublasHandle_t h, const bn_cuda_lora *L, int64_t n_in, int64_t n_out, int T, const float *x,
                    const float *drop, const float *ax, const float *dy, float *dx, const lin_workspace &p,
                    cudaStream_t s, char *err, size_t errlen) {
    const cublasOperation_t N = CUBLAS_OP_N, Tr = CUBLAS_OP_T;
    const int64_t r = L->r, count = n_in * T;
    const float *xd = dropped_input(x, drop, count, p.xd, s, err, errlen);
    if (!xd) return -1;
    if (!ax) { // ax (r × T) = Aᵀ-view · xd: A {n_in, r} is the n_in × r matrix
        BN_CUBLAS_TRY(gemm(h, Tr, N, r, T, n_in, 1.0f, L->A, n_in, xd, n_in, 0.0f, p.ax, r), err, errlen);
        ax = p.ax;
    }
    // gb (r × T) = B-view · dy: B {r, n_out} is the r × n_out matrix
    BN_CUBLAS_TRY(gemm(h, N, N, r, T, n_out, 1.0f, L->B, r, dy, n_out, 0.0f, p.gb, r), err, errlen);
    if (L->dA) // dA (n_in × r) += s·xd·gbᵀ
        BN_CUBLAS_TRY(gemm(h, N, Tr, n_in, r, T, L->scale, xd, n_in, p.gb, r, 1.0f, L->dA, n_in), err, errlen);
    if (L->dB) // dB (r × n_out) += s·ax·dyᵀ
        BN_CUBLAS_TRY(gemm(h, N, Tr, r, n_out, T, L->scale, ax, r, dy, n_out, 1.0f, L->dB, r), err, errlen);
    if (!dx) return 0;
    if (!drop) { // dx += s·A·gb
        BN_CUBLAS_TRY(gemm(h, N, N, n_in, T, r, L->scale, L->A, n_in, p.gb, r, 1.0f, dx, n_in), err, errlen);
        return 0;
    }
    BN_CUBLAS_TRY(gemm(h, N, N, n_in, T, r, L->scale, L->A, n_in, p.gb, r, 0.0f, p.tmp, n_in), err, errlen);
    BN_LAUNCH(add_mul_kernel, lin_blocks(count), LIN_THREADS, 0, s, dx, (const float *)p.tmp, drop, count);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

extern "C" void *bn_cuda_blas_new(char *err, size_t errlen) {
    cublasHandle_t h = nullptr;
    cublasStatus_t st = cublasCreate(&h);
    if (st == CUBLAS_STATUS_SUCCESS) return h;
    bn_cu_fail(err, errlen, cublasGetStatusString(st), "cublasCreate", __FILE__, __LINE__);
    return nullptr;
}

extern "C" void bn_cuda_blas_free(void *blas) {
    if (blas) cublasDestroy((cublasHandle_t)blas);
}

extern "C" size_t bn_cuda_linear_lora_bwd_workspace_floats(bool gemm_bf16, int w_type, int64_t n_in, int64_t n_out,
                                                           int r, int T) {
    int64_t floats;
    lin_split(nullptr, gemm_bf16, w_type, n_in, n_out, r, T, &floats);
    return (size_t)floats;
}

extern "C" int bn_cuda_linear_lora_bwd(void *blas, bool gemm_bf16, int w_type, const void *W, int64_t n_in,
                                       int64_t n_out, const bn_cuda_lora *lora, const float *x, int T,
                                       const float *drop, const float *ax, const float *dy, float *dx,
                                       float *workspace, void *stream, char *err, size_t errlen) {
    if (lin_shape_ok("backward", w_type, n_in, n_out, T, lora, err, errlen) < 0) return -1;
    if (T == 0) return 0;
    cublasHandle_t h = (cublasHandle_t)blas;
    cudaStream_t s = (cudaStream_t)stream;
    BN_CUBLAS_TRY(cublasSetStream(h, s), err, errlen);
    int64_t floats;
    const lin_workspace p = lin_split(workspace, gemm_bf16, w_type, n_in, n_out, lora ? lora->r : 0, T, &floats);
    if (dx) {
        const int rc = gemm_bf16 ? base_dx_bf16(h, w_type, W, n_in, n_out, T, dy, dx, p.base, s, err, errlen)
                                 : base_dx_f32(h, w_type, W, n_in, n_out, T, dy, dx, p.base.wbuf, s, err, errlen);
        if (rc < 0) return -1;
    }
    if (!lora) return 0;
    return lora_bwd(h, lora, n_in, n_out, T, x, drop, ax, dy, dx, p, s, err, errlen);
}
