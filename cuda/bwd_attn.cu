// cuda/bwd_attn.cu — causal softmax attention with GQA for the trainer, forward and backward (docs/model.md §8; the
// formulas of train/backward_attn.c), on cuBLAS GEMMs (fp32, or fp32 with TF32 tensor-core products). Per kv head
// and block of up to ATTN_QB query positions, the scores of the head's grp q heads against the keys that block can
// see are one strided-batched GEMM (batch = the q heads) into the workspace, a block per score column makes them
// probabilities, and GEMMs take them on: the forward's P·v; the backward's dP = doᵀv, dS = scale·P(dP − Σ P·dP) in
// place, dq += dS·k, dk += dSᵀq and dv += Pᵀdo per q head in head order. Every sum runs in a fixed order: the result
// is deterministic without atomics. Column-major views of the row-major tensors: q (a {hd, nh, T} tensor) of head h
// is the hd × T matrix at q + h·hd with leading dimension nh·hd; a score block is keys × queries with leading
// dimension its key count.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/cuda_bwd_seq.h"

#define ATTN_QB 256          // query positions per block of scores
#define ATTN_COL_THREADS 256 // a block per score column
#define ATTN_MAX_T (1 << 20) // score-block offsets stay far inside int

// block_max: max of v over the block (every thread gets it); red: 32 shared floats. Every thread calls.
static __device__ __forceinline__ float block_max(float v, float *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = bn_warp_reduce_max(v);
    __syncthreads(); // red may still be read by a previous reduction
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return bn_warp_reduce_max(lane < n_warps ? red[lane] : -INFINITY);
}

// col_softmax_kernel: block (c, j): column c of q head j's score block (query p0 + c against keys 0..nk−1, leading
// dimension nk) becomes its causal softmax: keys after the query 0, the rest exp(s − max)/Σ.
static __global__ void col_softmax_kernel(float *S, int nk, int qb, int p0) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const int c = blockIdx.x, p = p0 + c;
    float *col = S + ((size_t)blockIdx.y * qb + c) * nk;
    float mx = -INFINITY;
    for (int t = threadIdx.x; t <= p; t += blockDim.x) mx = fmaxf(mx, col[t]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int t = threadIdx.x; t <= p; t += blockDim.x) {
        const float e = expf(col[t] - mx);
        col[t] = e;
        sum += e;
    }
    const float r = 1.0f / bn_block_sum(sum, red);
    for (int t = threadIdx.x; t < nk; t += blockDim.x) col[t] = t <= p ? col[t] * r : 0.0f;
}

// col_dscore_kernel: block (c, j): column c of dP becomes dS = scale·P(dP − D), D = Σ_t P·dP over the column (keys
// after the query: P is 0 there, so is dS).
static __global__ void col_dscore_kernel(const float *P, float *dP, int nk, int qb, float scale) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = ((size_t)blockIdx.y * qb + blockIdx.x) * nk;
    const float *pc = P + off;
    float *dc = dP + off, part = 0.0f;
    for (int t = threadIdx.x; t < nk; t += blockDim.x) part += pc[t] * dc[t];
    const float D = bn_block_sum(part, red);
    for (int t = threadIdx.x; t < nk; t += blockDim.x) dc[t] = scale * pc[t] * (dc[t] - D);
}

// attn_block: one kv head's block of queries [p0, p0 + qb) and its geometry.
struct attn_block {
    int kvh, p0, qb, nk; // nk = p0 + qb: the keys the block's last query sees
};

// attn_dims: the tensors' shapes and the handles a launch needs.
struct attn_dims {
    int T, hd, nh, nkv, grp;
    float scale;
    cublasComputeType_t compute; // CUBLAS_COMPUTE_32F, or _FAST_TF32 (operands rounded to TF32 in the products)
    cublasHandle_t h;
    cudaStream_t s;
};

// gemm_n: C_j = alpha·op(A_j)·op(B_j) + beta·C_j for j < batch, strides in floats, fp32 in and out.
static cublasStatus_t gemm_n(const attn_dims &D, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                             float alpha, const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
                             float beta, float *C, int ldc, long long sc, int batch) {
    return cublasGemmStridedBatchedEx(D.h, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                                      &beta, C, CUDA_R_32F, ldc, sc, batch, D.compute, CUBLAS_GEMM_DEFAULT);
}

// sgemm_batched: gemm_n over the kv head's q heads (batch grp).
static cublasStatus_t sgemm_batched(const attn_dims &D, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    float alpha, const float *A, int lda, long long sa, const float *B, int ldb,
                                    long long sb, float beta, float *C, int ldc, long long sc) {
    return gemm_n(D, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, D.grp);
}

// rows_at: the first of the block's q heads' rows (query p0, head kvh·grp) in a {hd, nh, T} tensor.
static size_t rows_at(const attn_dims &D, const attn_block &b) { return ((size_t)b.p0 * D.nh + b.kvh * D.grp) * D.hd; }

// block_probs: P (grp blocks of nk × qb) = the causal softmax of scale·kᵀq for the block's queries; 0 or -1.
static int block_probs(const attn_dims &D, const attn_block &b, const float *q, const float *k, float *P, char *err,
                       size_t errlen) {
    const size_t kv = (size_t)b.kvh * D.hd, pq = (size_t)b.nk * b.qb;
    BN_CUBLAS_TRY(sgemm_batched(D, CUBLAS_OP_T, CUBLAS_OP_N, b.nk, b.qb, D.hd, D.scale, k + kv, D.nkv * D.hd, 0,
                                q + rows_at(D, b), D.nh * D.hd, D.hd, 0.0f, P, b.nk, (long long)pq),
                  err, errlen);
    BN_LAUNCH(col_softmax_kernel, dim3(b.qb, D.grp), ATTN_COL_THREADS, 0, D.s, P, b.nk, b.qb, b.p0);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

// block_fwd: the block's rows of out = P·v; 0 or -1.
static int block_fwd(const attn_dims &D, const attn_block &b, const float *q, const float *k, const float *v,
                     float *out, float *P, char *err, size_t errlen) {
    if (block_probs(D, b, q, k, P, err, errlen)) return -1;
    BN_CUBLAS_TRY(sgemm_batched(D, CUBLAS_OP_N, CUBLAS_OP_N, D.hd, b.qb, b.nk, 1.0f, v + (size_t)b.kvh * D.hd,
                                D.nkv * D.hd, 0, P, b.nk, (long long)b.nk * b.qb, 0.0f, out + rows_at(D, b),
                                D.nh * D.hd, D.hd),
                  err, errlen);
    return 0;
}

// attn_grads: the backward's outputs (any NULL).
struct attn_grads {
    const float *dout;
    float *dq, *dk, *dv;
};

// block_kv_grads: dk += dSᵀq and dv += Pᵀdo over the block's q heads in head order (dS in dS, P in P); 0 or -1.
static int block_kv_grads(const attn_dims &D, const attn_block &b, const float *q, const attn_grads &g,
                          const float *P, const float *dS, char *err, size_t errlen) {
    const size_t kv = (size_t)b.kvh * D.hd, pq = (size_t)b.nk * b.qb;
    const int ld = D.nh * D.hd, ldkv = D.nkv * D.hd;
    for (int j = 0; j < D.grp; j++) {
        const size_t row = rows_at(D, b) + (size_t)j * D.hd;
        if (g.dk)
            BN_CUBLAS_TRY(gemm_n(D, CUBLAS_OP_N, CUBLAS_OP_T, D.hd, b.nk, b.qb, 1.0f, q + row, ld, 0, dS + j * pq,
                                 b.nk, 0, 1.0f, g.dk + kv, ldkv, 0, 1),
                          err, errlen);
        if (g.dv)
            BN_CUBLAS_TRY(gemm_n(D, CUBLAS_OP_N, CUBLAS_OP_T, D.hd, b.nk, b.qb, 1.0f, g.dout + row, ld, 0, P + j * pq,
                                 b.nk, 0, 1.0f, g.dv + kv, ldkv, 0, 1),
                          err, errlen);
    }
    return 0;
}

// block_bwd: the block's gradients: P again, dP = vᵀdo, dS in dP's place, dq += k·dS, then dk and dv; 0 or -1.
static int block_bwd(const attn_dims &D, const attn_block &b, const float *q, const float *k, const float *v,
                     const attn_grads &g, float *P, float *dP, char *err, size_t errlen) {
    const size_t kv = (size_t)b.kvh * D.hd;
    const long long pq = (long long)b.nk * b.qb;
    const int ld = D.nh * D.hd, ldkv = D.nkv * D.hd;
    if (block_probs(D, b, q, k, P, err, errlen)) return -1;
    BN_CUBLAS_TRY(sgemm_batched(D, CUBLAS_OP_T, CUBLAS_OP_N, b.nk, b.qb, D.hd, 1.0f, v + kv, ldkv, 0,
                                g.dout + rows_at(D, b), ld, D.hd, 0.0f, dP, b.nk, pq),
                  err, errlen);
    BN_LAUNCH(col_dscore_kernel, dim3(b.qb, D.grp), ATTN_COL_THREADS, 0, D.s, (const float *)P, dP, b.nk, b.qb,
              D.scale);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    if (g.dq)
        BN_CUBLAS_TRY(sgemm_batched(D, CUBLAS_OP_N, CUBLAS_OP_N, D.hd, b.qb, b.nk, 1.0f, k + kv, ldkv, 0, dP, b.nk,
                                    pq, 1.0f, g.dq + rows_at(D, b), ld, D.hd),
                      err, errlen);
    return block_kv_grads(D, b, q, g, P, dP, err, errlen);
}

// attn_shape_ok: the shapes the kernels take; else err filled.
static bool attn_shape_ok(int T, int hd, int nh, int nkv, char *err, size_t errlen) {
    if (T >= 0 && T <= ATTN_MAX_T && hd > 0 && nkv > 0 && nh >= nkv && nh % nkv == 0) return true;
    if (err && errlen)
        snprintf(err, errlen, "cuda attention: unsupported shape T %d hd %d nh %d nkv %d", T, hd, nh, nkv);
    return false;
}

// dims_of: the launch's shapes, arithmetic and handles.
static attn_dims dims_of(void *blas, bool tf32, int T, int hd, int nh, int nkv, float scale, void *stream) {
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    return attn_dims{T, hd, nh, nkv, nh / nkv, scale, compute, (cublasHandle_t)blas, (cudaStream_t)stream};
}

// each_block: op(b) for every kv head's blocks of ATTN_QB query positions, kv head by kv head, in order; 0, or -1 at
// the first op that fails.
template <class Op> static int each_block(const attn_dims &D, Op op) {
    for (int kvh = 0; kvh < D.nkv; kvh++)
        for (int p0 = 0; p0 < D.T; p0 += ATTN_QB) {
            const int qb = D.T - p0 < ATTN_QB ? D.T - p0 : ATTN_QB;
            if (op(attn_block{kvh, p0, qb, p0 + qb})) return -1;
        }
    return 0;
}

extern "C" int bn_cuda_attn_max_T(void) { return ATTN_MAX_T; }

extern "C" size_t bn_cuda_attn_workspace_floats(int T, int nh, int nkv) {
    const int qb = T < ATTN_QB ? T : ATTN_QB;
    return nkv > 0 ? (size_t)2 * (nh / nkv) * qb * T : 0;
}

extern "C" int bn_cuda_attn_fwd(void *blas, bool tf32, const float *q, const float *k, const float *v, int T, int hd,
                                int nh, int nkv, float scale, float *out, float *workspace, void *stream, char *err,
                                size_t errlen) {
    if (!attn_shape_ok(T, hd, nh, nkv, err, errlen)) return -1;
    const attn_dims D = dims_of(blas, tf32, T, hd, nh, nkv, scale, stream);
    BN_CUBLAS_TRY(cublasSetStream(D.h, D.s), err, errlen);
    return each_block(D, [&](const attn_block &b) { return block_fwd(D, b, q, k, v, out, workspace, err, errlen); });
}

extern "C" int bn_cuda_attn_bwd(void *blas, bool tf32, const float *q, const float *k, const float *v, int T, int hd,
                                int nh, int nkv, float scale, const float *dout, float *dq, float *dk, float *dv,
                                float *workspace, void *stream, char *err, size_t errlen) {
    if (!attn_shape_ok(T, hd, nh, nkv, err, errlen)) return -1;
    if (!dq && !dk && !dv) return 0;
    const attn_dims D = dims_of(blas, tf32, T, hd, nh, nkv, scale, stream);
    BN_CUBLAS_TRY(cublasSetStream(D.h, D.s), err, errlen);
    const attn_grads g = {dout, dq, dk, dv};
    float *P = workspace, *dP = workspace + bn_cuda_attn_workspace_floats(T, nh, nkv) / 2;
    return each_block(D, [&](const attn_block &b) { return block_bwd(D, b, q, k, v, g, P, dP, err, errlen); });
}
