// cuda/fwd_linear.cu — the forward of a linear with a LoRA pair for the trainer (train/backward.c's
// bn_linear_lora_fwd) through cuBLAS on the column-major views of cuda/linear.cuh, with the backward's conventions
// (cuda/bwd_linear.cu): the base product W x in fp32 (a base weight of another type than F32 made fp32 a chunk of rows
// at a time in the workspace) or with bf16 inputs and fp32 accumulation (every weight made bf16 a chunk at a time, x
// rounded to a bf16 copy); the LoRA products in fp32.
#include "cuda/common.cuh"
#include "cuda/cuda_fwd_ops.h"
#include "cuda/linear.cuh"

// fwd_workspace: the workspace's parts: the base product's scratch (weight chunk; bf16: and x's bf16 copy), x⊙drop,
// A·(x⊙drop) when the caller keeps none.
struct fwd_workspace {
    base_scratch base;
    float *xd, *ax;
};

// fwd_split: ws (NULL: sizes only) cut into fwd_workspace's parts for these shapes; *floats = the total
// (bn_cuda_linear_lora_fwd_workspace_floats).
static fwd_workspace fwd_split(float *ws, bool bf16, int w_type, int64_t n_in, int64_t n_out, int r, int T,
                               int64_t *floats) {
    fwd_workspace p;
    p.base = base_split(ws, bf16, w_type, n_in, n_out, n_in, T);
    const int64_t xd = p.base.floats, ax = xd + n_in * T;
    p.xd = ws ? ws + xd : nullptr;
    p.ax = ws ? ws + ax : nullptr;
    *floats = ax + (int64_t)r * T;
    return p;
}

// base_y_f32: y (n_out × T) = Wᵀ·x with W {n_in, n_out} the n_in × n_out matrix of its rows, fp32; other types' rows
// made fp32 chunk by chunk into wbuf, each chunk's GEMM writing its rows of y. Returns 0 or -1 (err).
static int base_y_f32(cublasHandle_t h, int w_type, const void *W, int64_t n_in, int64_t n_out, int T, const float *x,
                      float *y, float *wbuf, cudaStream_t s, char *err, size_t errlen) {
    return for_weight_chunks(w_type, W, n_in, n_out, wbuf, s, err, errlen, [&](const float *w, int64_t j0, int64_t nr) {
        BN_CUBLAS_TRY(gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, nr, T, n_in, 1.0f, w, n_in, x, n_in, 0.0f, y + j0, n_out), err,
                      errlen);
        return 0;
    });
}

// base_y_bf16: the same product with bf16 inputs and fp32 accumulation: x rounded into b.act16, W's rows made bf16
// chunk by chunk into b.w16. Returns 0 or -1 (err).
static int base_y_bf16(cublasHandle_t h, int w_type, const void *W, int64_t n_in, int64_t n_out, int T,
                       const float *x, float *y, const base_scratch &b, cudaStream_t s, char *err, size_t errlen) {
    if (round_bf16(x, n_in * T, b.act16, s, err, errlen) < 0) return -1;
    const uint16_t *x16 = b.act16;
    return for_weight_chunks_bf16(w_type, W, n_in, n_out, b.w16, s, err, errlen,
                                  [&](const uint16_t *w, int64_t j0, int64_t nr) {
        BN_CUBLAS_TRY(gemm_bf16(h, CUBLAS_OP_T, CUBLAS_OP_N, nr, T, n_in, 1.0f, w, n_in, x16, n_in, 0.0f, y + j0,
                                n_out), err, errlen);
        return 0;
    });
}

// lora_ax: ax (r × T) = Aᵀ-view·x, A {n_in, r} the n_in × r matrix. Returns 0 or -1 (err).
static int lora_ax(cublasHandle_t h, const bn_cuda_lora *L, int64_t n_in, int T, const float *x, float *ax, char *err,
                   size_t errlen) {
    BN_CUBLAS_TRY(gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, L->r, T, n_in, 1.0f, L->A, n_in, x, n_in, 0.0f, ax, L->r), err,
                  errlen);
    return 0;
}

// lora_y: y += scale·Bᵀ-view·ax with ax (r × T) = Aᵀ-view·(x⊙drop) (into ax when not NULL, else the workspace).
// Returns 0 or -1 (err).
static int lora_y(cublasHandle_t h, const bn_cuda_lora *L, int64_t n_in, int64_t n_out, int T, const float *x,
                  const float *drop, float *ax, float *y, const fwd_workspace &p, cudaStream_t s, char *err,
                  size_t errlen) {
    const cublasOperation_t N = CUBLAS_OP_N, Tr = CUBLAS_OP_T;
    const int64_t r = L->r;
    const float *xd = dropped_input(x, drop, n_in * T, p.xd, s, err, errlen);
    if (!xd) return -1;
    float *axb = ax ? ax : p.ax;
    if (lora_ax(h, L, n_in, T, xd, axb, err, errlen) < 0) return -1;
    // y (n_out × T) += s·Bᵀ · axb: B {r, n_out} is the r × n_out matrix
    BN_CUBLAS_TRY(gemm(h, Tr, N, n_out, T, r, L->scale, L->B, r, axb, r, 1.0f, y, n_out), err, errlen);
    return 0;
}

extern "C" size_t bn_cuda_linear_lora_fwd_workspace_floats(bool gemm_bf16, int w_type, int64_t n_in, int64_t n_out,
                                                           int r, int T) {
    int64_t floats;
    fwd_split(nullptr, gemm_bf16, w_type, n_in, n_out, r, T, &floats);
    return (size_t)floats;
}

extern "C" int bn_cuda_linear_lora_fwd(void *blas, bool gemm_bf16, int w_type, const void *W, int64_t n_in,
                                       int64_t n_out, const bn_cuda_lora *lora, const float *x, int T,
                                       const float *drop, float *y, float *ax, float *workspace, void *stream,
                                       char *err, size_t errlen) {
    if (lin_shape_ok("forward", w_type, n_in, n_out, T, lora, err, errlen) < 0) return -1;
    if (T == 0) return 0;
    cublasHandle_t h = (cublasHandle_t)blas;
    cudaStream_t s = (cudaStream_t)stream;
    BN_CUBLAS_TRY(cublasSetStream(h, s), err, errlen);
    int64_t floats;
    const fwd_workspace p = fwd_split(workspace, gemm_bf16, w_type, n_in, n_out, lora ? lora->r : 0, T, &floats);
    const int rc = gemm_bf16 ? base_y_bf16(h, w_type, W, n_in, n_out, T, x, y, p.base, s, err, errlen)
                             : base_y_f32(h, w_type, W, n_in, n_out, T, x, y, p.base.wbuf, s, err, errlen);
    if (rc < 0 || !lora) return rc;
    return lora_y(h, lora, n_in, n_out, T, x, drop, ax, y, p, s, err, errlen);
}

extern "C" int bn_cuda_lora_ax(void *blas, const bn_cuda_lora *lora, int64_t n_in, const float *x, int T, float *ax,
                               void *stream, char *err, size_t errlen) {
    if (T == 0) return 0;
    cublasHandle_t h = (cublasHandle_t)blas;
    BN_CUBLAS_TRY(cublasSetStream(h, (cudaStream_t)stream), err, errlen);
    return lora_ax(h, lora, n_in, T, x, ax, err, errlen);
}
