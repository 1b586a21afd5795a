// cuda/linear.cuh — internal to the trainer's linear + LoRA on cuBLAS (cuda/fwd_linear.cu, cuda/bwd_linear.cu; include
// after "cuda/common.cuh"): GEMMs on column-major views of the row-major tensors (a {n, T} tensor is an n × T matrix
// with leading dimension n). The base-weight product in one of two arithmetics (cuda/cuda_bwd_seq.h): fp32, base
// weights of any other stored type than F32 (F16, BF16, Q1_0, Q2_0, Q8_0, K-quants, ...) made fp32 a chunk of rows at a
// time (bit-identical to the CPU's dequantization); or bf16 inputs with fp32 accumulation, every type made bf16 a
// chunk of rows at a time and the activation operand rounded to a bf16 copy. Either way a chunk takes 16 MiB whatever
// the weight's size. Also the dropout mask and the shape check. File-local (static) in each including file.
#ifndef BONSAI_CUDA_LINEAR_CUH
#define BONSAI_CUDA_LINEAR_CUH
#include <stdint.h>
#include <stdio.h>
#include "cuda/mm_impl.cuh" // BN_CU_F32, BN_CU_F16: quant/quant.h's type ids
#include "cuda/cuda_bwd_seq.h" // bn_cuda_lora
#include "cuda/cuda_fwd_ops.h" // bn_cuda_dequant_rows

#define LIN_THREADS 256
#define LIN_CHUNK_FLOATS ((int64_t)1 << 22) // fp32 weight rows per GEMM: 16 MiB
#define LIN_CHUNK_BF16 ((int64_t)1 << 23)   // bf16 weight rows per GEMM: the same 16 MiB, twice the rows
#define LIN_ALIGN_FLOATS 64                 // a bf16 part of a workspace starts on 256 bytes (tensor-core loads)

// f16_to_f32_kernel: out[i] = the float of half bits w[i], i < count.
static __global__ void f16_to_f32_kernel(const uint16_t *w, int64_t count, float *out) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = bn_h2f(bn_half_bits(bn_ldg_weight(w + i)));
}

// to_bf16_kernel: out[i] = the bf16 bits nearest to x[i] (ties to even), i < count.
static __global__ void to_bf16_kernel(const float *x, int64_t count, uint16_t *out) {
    bn_cu_grid_begin();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = bn_f2bf(x[i]);
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

// chunk_rows_bf16: weight rows made bf16 per GEMM for rows of n_in: LIN_CHUNK_BF16 values, in whole 8s of rows
// when there are 8 or more (so each chunk's offset into the bf16 activation copy stays 16-byte aligned), at least 1,
// at most n_out.
static inline int64_t chunk_rows_bf16(int64_t n_in, int64_t n_out) {
    int64_t rows = LIN_CHUNK_BF16 / (n_in > 0 ? n_in : 1);
    if (rows >= 8) rows -= rows % 8;
    return rows < 1 ? 1 : rows > n_out ? n_out : rows;
}

// bf16_floats: workspace floats that hold n bf16 values, in whole LIN_ALIGN_FLOATS.
static inline int64_t bf16_floats(int64_t n) {
    return ((n + 1) / 2 + LIN_ALIGN_FLOATS - 1) / LIN_ALIGN_FLOATS * LIN_ALIGN_FLOATS;
}

// base_scratch: the base product's part of a workspace: the fp32 weight chunk (wbuf), or the bf16 weight chunk (w16)
// and the bf16 copy of the activation operand (act16, {n_act, T}); floats = its size.
struct base_scratch {
    float *wbuf;
    uint16_t *w16, *act16;
    int64_t floats;
};

// base_split: ws's first base_scratch for a weight {n_in, n_out} of w_type and an activation operand of n_act rows
// (n_in for W x, n_out for Wᵀdy); ws NULL sizes it only.
static inline base_scratch base_split(float *ws, bool bf16, int w_type, int64_t n_in, int64_t n_out, int64_t n_act,
                                      int T) {
    base_scratch b = {ws, nullptr, nullptr, chunk_floats(w_type, n_in, n_out)};
    if (!bf16) return b;
    const int64_t w_floats = bf16_floats(chunk_rows_bf16(n_in, n_out) * n_in);
    b.wbuf = nullptr;
    b.w16 = (uint16_t *)ws;
    b.act16 = ws ? (uint16_t *)(ws + w_floats) : nullptr;
    b.floats = w_floats + bf16_floats(n_act * T);
    return b;
}

// gemm_bf16: C (m × n, fp32) = alpha·op(A)·op(B) + beta·C with A and B bf16 and fp32 accumulation (cublasGemmEx,
// CUBLAS_COMPUTE_32F: the tensor cores where the GPU has them).
static inline cublasStatus_t gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                                       int64_t n, int64_t k, float alpha, const uint16_t *A, int64_t lda,
                                       const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    return cublasGemmEx(h, ta, tb, (int)m, (int)n, (int)k, &alpha, A, CUDA_R_16BF, (int)lda, B, CUDA_R_16BF, (int)ldb,
                        &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// round_bf16: out[0..count) = x rounded to bf16 (enqueued on s); 0 or -1 (err).
static inline int round_bf16(const float *x, int64_t count, uint16_t *out, cudaStream_t s, char *err, size_t errlen) {
    BN_LAUNCH(to_bf16_kernel, lin_blocks(count), LIN_THREADS, 0, s, x, count, out);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
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

// for_weight_chunks_bf16: product(w16, j0, nr) over the rows of W {n_in, n_out} of w_type (F32 included) made bf16,
// chunk_rows_bf16 rows at a time in w16. Returns 0, or -1 at the first failing chunk (err filled by the dequantization
// or by product).
template <class Product>
static inline int for_weight_chunks_bf16(int w_type, const void *W, int64_t n_in, int64_t n_out, uint16_t *w16,
                                         cudaStream_t s, char *err, size_t errlen, Product product) {
    const int64_t step = chunk_rows_bf16(n_in, n_out);
    for (int64_t j0 = 0; j0 < n_out; j0 += step) {
        const int64_t nr = n_out - j0 < step ? n_out - j0 : step;
        if (bn_cuda_dequant_rows_bf16(w_type, W, n_in, j0, nr, w16, s, err, errlen) < 0 || product(w16, j0, nr) < 0)
            return -1;
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
