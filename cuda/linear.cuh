// cuda/linear.cuh — internal to the trainer's linear + LoRA on cuBLAS (cuda/fwd_linear.cu, cuda/bwd_linear.cu; include
// after "cuda/common.cuh"): fp32 GEMMs on column-major views of the row-major tensors (a {n, T} tensor is an n × T
// matrix with leading dimension n), base weights of any other stored type than F32 (F16, BF16, Q1_0, Q2_0, Q8_0,
// K-quants, ...) made fp32 a chunk of rows at a time (bit-identical to the CPU's dequantization), so the scratch
// stays at LIN_CHUNK_FLOATS whatever the weight's size; the dropout mask, and the shape check. File-local (static)
// in each including file.
#ifndef BONSAI_CUDA_LINEAR_CUH
#define BONSAI_CUDA_LINEAR_CUH
#include <stdint.h>
#include <stdio.h>
#include "cuda/mm_impl.cuh" // BN_CU_F32, BN_CU_F16: quant/quant.h's type ids
#include "cuda/cuda_bwd_seq.h" // bn_cuda_lora
#include "cuda/cuda_fwd_ops.h" // bn_cuda_dequant_rows

#define LIN_THREADS 256
#define LIN_CHUNK_FLOATS ((int64_t)1 << 22) // fp32 weight rows per GEMM: 16 MiB

// f16_to_f32_kernel: out[i] = the float of half bits w[i], i < count.
static __global__ void f16_to_f32_kernel(const uint16_t *w, int64_t count, float *out) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = bn_h2f(bn_half_bits(bn_ldg_weight(w + i)));
}

// mul_kernel: out[i] = a[i]·b[i], i < count.
static __global__ void mul_kernel(float *out, const float *a, const float *b, int64_t count) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = a[i] * b[i];
}

// lin_blocks: blocks of LIN_THREADS covering count items.
static inline int lin_blocks(int64_t count) { return (int)((count + LIN_THREADS - 1) / LIN_THREADS); }

// chunk_rows: weight rows made fp32 per GEMM for rows of n_in (at least 1, at most n_out).
static inline int64_t chunk_rows(int64_t n_in, int64_t n_out) {
    const int64_t rows = LIN_CHUNK_FLOATS / (n_in > 0 ? n_in : 1);
    return rows < 1 ? 1 : rows > n_out ? n_out : rows;
}

// gemm: C (m × n) = alpha·op(A)·op(B) + beta·C, column-major (cublasSgemm with the scalars by value).
static inline cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                           int64_t k, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                           float *C, int64_t ldc) {
    return cublasSgemm(h, ta, tb, (int)m, (int)n, (int)k, &alpha, A, (int)lda, B, (int)ldb, &beta, C, (int)ldc);
}

// chunk_floats: the fp32 chunk a weight of w_type needs in the workspace (0 for F32, read in place).
static inline int64_t chunk_floats(int w_type, int64_t n_in, int64_t n_out) {
    return w_type == BN_CU_F32 ? 0 : chunk_rows(n_in, n_out) * n_in;
}

// weight_rows_f32: wbuf {n_in, nr} = rows j0 .. j0 + nr of the weight W {n_in, ·} of w_type as fp32 (F16 widened
// here, other types through bn_cuda_dequant_rows; enqueued on s). Returns 0 or -1 (err names an unsupported type).
static inline int weight_rows_f32(int w_type, const void *W, int64_t j0, int64_t nr, int64_t n_in, float *wbuf,
                                  cudaStream_t s, char *err, size_t errlen) {
    if (w_type != BN_CU_F16) return bn_cuda_dequant_rows(w_type, W, n_in, j0, nr, wbuf, s, err, errlen);
    BN_LAUNCH(f16_to_f32_kernel, lin_blocks(nr * n_in), LIN_THREADS, 0, s, (const uint16_t *)W + j0 * n_in, nr * n_in,
              wbuf);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

// for_weight_chunks: product(w, j0, nr) over the fp32 rows of W {n_in, n_out} of w_type: W itself, all n_out rows
// at once, when F32; else chunks of chunk_rows rows made fp32 in wbuf. Returns 0, or -1 at the first failing chunk
// (err filled by weight_rows_f32 or by product).
template <class Product>
static inline int for_weight_chunks(int w_type, const void *W, int64_t n_in, int64_t n_out, float *wbuf,
                                    cudaStream_t s, char *err, size_t errlen, Product product) {
    if (w_type == BN_CU_F32) return product((const float *)W, (int64_t)0, n_out);
    const int64_t step = chunk_rows(n_in, n_out);
    for (int64_t j0 = 0; j0 < n_out; j0 += step) {
        const int64_t nr = n_out - j0 < step ? n_out - j0 : step;
        if (weight_rows_f32(w_type, W, j0, nr, n_in, wbuf, s, err, errlen) < 0 || product(wbuf, j0, nr) < 0) return -1;
    }
    return 0;
}

// dropped_input: x⊙drop written to xd (count floats), or x itself when drop is NULL; NULL on a launch error (err).
static inline const float *dropped_input(const float *x, const float *drop, int64_t count, float *xd, cudaStream_t s,
                                         char *err, size_t errlen) {
    if (!drop) return x;
    BN_LAUNCH(mul_kernel, lin_blocks(count), LIN_THREADS, 0, s, xd, x, drop, count);
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return xd;
    bn_cu_fail(err, errlen, cudaGetErrorString(e), "mul_kernel", __FILE__, __LINE__);
    return nullptr;
}

// lin_shape_ok: 0 when the weight has a type and the shapes fit cuBLAS's int sizes, else -1 with err naming the op
// (an unsupported type is named when its rows are made fp32).
static inline int lin_shape_ok(const char *op, int w_type, int64_t n_in, int64_t n_out, int T, const bn_cuda_lora *lora,
                               char *err, size_t errlen) {
    const int64_t big = (int64_t)1 << 31;
    if (w_type >= 0 && n_in > 0 && n_out > 0 && T >= 0 && n_in * T < big &&
        n_out * T < big && (!lora || lora->r > 0))
        return 0;
    if (err && errlen) snprintf(err, errlen, "cuda linear %s: unsupported type %d or shape %lld x %lld, T %d", op,
                                w_type, (long long)n_in, (long long)n_out, T);
    return -1;
}

#endif
