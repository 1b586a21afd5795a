// cuda/emu/emu_cublas.cpp — the emulator's cuBLAS: column-major GEMMs through OpenBLAS cblas_sgemm;
// 16F/16BF operands are widened to float (exact), a 16F/16BF C is rounded to nearest even after; under
// CUBLAS_COMPUTE_32F_FAST_TF32 the fp32 operands are rounded to TF32 first.
// Work goes through the handle's stream, so GEMMs are recorded during a capture like kernels.
#include "cuda/emu/emu_internal.h"
#include <cblas.h>
#include <stdint.h>
#include <vector>

struct bn_emu_cublas {
    cudaStream_t stream;
    cublasMath_t math;
};

namespace {
size_t elem_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
bool known_type(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

float load(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) return bn_h2f(bn_half_bits(h));
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void store(void *p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F) {
        ((float *)p)[i] = v;
    } else if (t == CUDA_R_16F) {
        ((uint16_t *)p)[i] = bn_half_raw(bn_f2h(v));
    } else {
        uint32_t b;
        memcpy(&b, &v, 4);
        if ((b & 0x7fffffffu) > 0x7f800000u) ((uint16_t *)p)[i] = (uint16_t)((b >> 16) | 0x40u); // quiet NaN
        else ((uint16_t *)p)[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}

// to_tf32: x with its mantissa cut to TF32's 10 bits, rounded to nearest with ties away from zero (PTX
// cvt.rna.tf32.f32, how fp32 operands enter the tensor cores under CUBLAS_COMPUTE_32F_FAST_TF32); Inf, NaN kept.
float to_tf32(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7f800000u) == 0x7f800000u) return x;
    b = (b + 0x1000u) & ~0x1fffu;
    memcpy(&x, &b, 4);
    return x;
}

// widen: a float copy of a column-major rows x cols matrix with leading dimension ld.
// tf32: each element through to_tf32.
std::vector<float> widen(const void *p, cudaDataType t, int rows, int cols, int ld, bool tf32 = false) {
    std::vector<float> out((size_t)ld * cols);
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            const float v = load(p, t, (size_t)c * ld + r);
            out[(size_t)c * ld + r] = tf32 ? to_tf32(v) : v;
        }
    return out;
}

// gemm: one column-major GEMM with any of the element types; tf32: fp32 operands rounded to TF32 first.
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
          cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb, float beta, void *C, cudaDataType ct,
          int ldc, bool tf32 = false) {
    CBLAS_TRANSPOSE cta = ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
    CBLAS_TRANSPOSE ctb = tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
    if (at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F && !tf32) {
        cblas_sgemm(CblasColMajor, cta, ctb, m, n, k, alpha, (const float *)A, lda, (const float *)B, ldb, beta,
                    (float *)C, ldc);
        return;
    }
    std::vector<float> a, b, c;
    const float *af = (const float *)A, *bf = (const float *)B;
    if (at != CUDA_R_32F || tf32) {
        a = widen(A, at, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, tf32 && at == CUDA_R_32F);
        af = a.data();
    }
    if (bt != CUDA_R_32F || tf32) {
        b = widen(B, bt, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, tf32 && bt == CUDA_R_32F);
        bf = b.data();
    }
    if (ct == CUDA_R_32F) {
        cblas_sgemm(CblasColMajor, cta, ctb, m, n, k, alpha, af, lda, bf, ldb, beta, (float *)C, ldc);
        return;
    }
    c = widen(C, ct, m, n, ldc);
    cblas_sgemm(CblasColMajor, cta, ctb, m, n, k, alpha, af, lda, bf, ldb, beta, c.data(), ldc);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) store(C, ct, (size_t)j * ldc + i, c[(size_t)j * ldc + i]);
}

cublasStatus_t check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                     int ldb, int ldc, int batch) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || ta > CUBLAS_OP_C || tb > CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 || ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m ||
        ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t submit(cublasHandle_t h, std::function<void()> work) {
    cudaError_t e = bn_emu::submit(h->stream, "cublas", std::move(work));
    bn_emu::set_error(e);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
} // namespace

extern "C" {
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new bn_emu_cublas{nullptr, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                                         long long sc, int batch) {
    cublasStatus_t st = check(h, ta, tb, m, n, k, lda, ldb, ldc, batch);
    if (st) return st;
    float al = *alpha, be = *beta;
    return submit(h, [=]() {
        for (int i = 0; i < batch; i++)
            gemm(ta, tb, m, n, k, al, A + i * sa, CUDA_R_32F, lda, B + i * sb, CUDA_R_32F, ldb, be, C + i * sc,
                 CUDA_R_32F, ldc);
    });
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    cublasStatus_t st = check(h, ta, tb, m, n, k, lda, ldb, ldc, batch);
    if (st) return st;
    if (!known_type(at) || !known_type(bt) || !known_type(ct)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
        compute != CUBLAS_COMPUTE_32F_FAST_16F && compute != CUBLAS_COMPUTE_32F_FAST_16BF &&
        compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t ea = elem_size(at), eb = elem_size(bt), ec = elem_size(ct);
    const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    return submit(h, [=]() {
        for (int i = 0; i < batch; i++)
            gemm(ta, tb, m, n, k, al, (const char *)A + i * sa * ea, at, lda, (const char *)B + i * sb * eb, bt, ldb,
                 be, (char *)C + i * sc * ec, ct, ldc, tf32);
    });
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                            cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                                      compute, algo);
}
} // extern "C"
