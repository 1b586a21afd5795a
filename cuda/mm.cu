// cuda/mm.cu — bn_cu_matmul: picks the decode kernels (mmvq.cu, nb <= BN_CU_MMVQ_MAX_NB) or the prefill
// path (activations to fp16 with a power-of-two scale per column, weights dequantized to fp16 a tile of rows at a
// time, cublasGemmEx with fp32 compute, output columns scaled back; F32 weights through cublasSgemm), and sizes
// the scratch both need.
#include "cuda/mm_impl.cuh"
#include <stdlib.h>

// Prefill: at most this many weight elements are dequantized to fp16 per GEMM (128 MiB of scratch);
// BONSAI_CUDA_GEMM_TILE_ELEMS overrides it (tests use it to exercise the tiling on small shapes).
static int64_t gemm_tile_elems(void) {
    static int64_t n = 0;
    if (n == 0) {
        const char *env = getenv("BONSAI_CUDA_GEMM_TILE_ELEMS");
        long long v = env ? atoll(env) : 0;
        n = v > 0 ? (int64_t)v : (int64_t)64 << 20;
    }
    return n;
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

bool bn_cu_type_supported(int type) { return bn_cu_blck(type) > 0; }

// gemm_tile_rows: weight rows per fp16 tile (a multiple of 64 unless the whole matrix is smaller).
static int64_t gemm_tile_rows(const bn_cu_weight *w) {
    int64_t rows = gemm_tile_elems() / (w->ne0 > 0 ? w->ne0 : 1);
    rows = rows >= 64 ? rows / 64 * 64 : 64;
    return rows < w->ne1 ? rows : w->ne1;
}

bool bn_cu_matmul_uses_mmvq(int type, int nb) { return (void)type, nb <= BN_CU_MMVQ_MAX_NB; }

// ---- prefill activations: fp16 with a power-of-two scale per column ----------------------------------------
// fp16 holds |x| < 65520 (above: inf, then NaN logits; SwiGLU products entering ffn_down can get there) and
// keeps 11 significant bits only down to 2^-14 (below: subnormals, then 0). So each column t (token) of x is
// converted as fp16(x·2^-k_t) and the GEMM's output column multiplied by 2^k_t afterwards; powers of two make
// both steps exact (up to the fp16 rounding itself). k_t = 0 (bit-identical to a plain conversion) for every
// column whose max |x| m lies in [2^-10, 2^15): its elements down to m/16 (>= 2^-14) are normal fp16, and the
// absolute error of the subnormal rest (<= 2^-25) stays below 1/16 of the largest element's own rounding error
// (2^-11·m); nothing comes near 65520.
// Outside that range, and for m > 0 finite, m·2^-k_t lands in [2^14, 2^15) (k_t >= -126, so 2^±k_t are floats).
// A column holding an inf or NaN keeps k_t = 0, so its outputs stay non-finite.
#define X16_THREADS 256

// gemm_act_bytes: scratch for the fp16 activations {ne0, nb} and the per-column scales {nb}.
static size_t gemm_act_bytes(int64_t ne0, int nb) {
    return align256((size_t)ne0 * nb * 2) + align256((size_t)nb * sizeof(float));
}

// x16_exponent: k_t for a column with max |x| = m (inf for a column holding an inf or NaN).
static __device__ __forceinline__ int x16_exponent(float m) {
    if (m == INFINITY || m == 0.0f || (m >= 0x1p-10f && m < 0x1p15f)) return 0;
    int e;
    frexpf(m, &e); // m in [2^(e-1), 2^e)
    return e - 15 < -126 ? -126 : e - 15;
}

// x16_scaled_k: one block per column t of x {ne0, nb}: out[:, t] = fp16(x[:, t]·2^-k_t), scale[t] = 2^k_t.
static __global__ void x16_scaled_k(const float *x, int64_t ne0, bn_half *out, float *scale) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const float *xc = x + (int64_t)blockIdx.x * ne0;
    bn_half *oc = out + (int64_t)blockIdx.x * ne0;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < ne0; i += X16_THREADS) {
        float a = fabsf(xc[i]);
        m = fmaxf(m, a == a ? a : INFINITY); // a NaN counts as inf (fmaxf would drop it)
    }
    m = bn_warp_reduce_max(m);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
    __syncthreads();
    m = bn_warp_reduce_max(threadIdx.x % 32 < X16_THREADS / 32 ? red[threadIdx.x % 32] : 0.0f);
    const int k = x16_exponent(m);
    const float down = ldexpf(1.0f, -k); // 1.0f for k = 0: x·1 is x exactly
    for (int64_t i = threadIdx.x; i < ne0; i += X16_THREADS) oc[i] = bn_f2h(xc[i] * down);
    if (threadIdx.x == 0) scale[blockIdx.x] = ldexpf(1.0f, k);
}

// unscale_cols_k: y[:, t] *= scale[t] where scale[t] != 1; grid (ceil(ne1 / X16_THREADS), nb).
static __global__ void unscale_cols_k(float *y, int64_t ne1, const float *scale) {
    bn_cu_grid_begin();
    const float sc = scale[blockIdx.y];
    const int64_t r = (int64_t)blockIdx.x * X16_THREADS + threadIdx.x;
    if (sc != 1.0f && r < ne1) y[(int64_t)blockIdx.y * ne1 + r] *= sc;
}

// x16_scaled: launches x16_scaled_k (x16 {ne0, nb}, scale {nb} in scratch).
static cudaError_t x16_scaled(const float *x, int64_t ne0, int nb, bn_half *x16, float *scale, cudaStream_t s) {
    BN_LAUNCH(x16_scaled_k, dim3((unsigned)nb), dim3(X16_THREADS), 0, s, x, ne0, x16, scale);
    return cudaGetLastError();
}

// unscale_cols: launches unscale_cols_k on y {ne1, nb}.
static cudaError_t unscale_cols(float *y, int64_t ne1, int nb, const float *scale, cudaStream_t s) {
    dim3 grid((unsigned)((ne1 + X16_THREADS - 1) / X16_THREADS), (unsigned)nb);
    BN_LAUNCH(unscale_cols_k, grid, dim3(X16_THREADS), 0, s, y, ne1, scale);
    return cudaGetLastError();
}

size_t bn_cu_mmvq_scratch_bytes(const bn_cu_weight *w, int nb) {
    if (!bn_cu_is_quantized(w->type)) return 0;
    int64_t ne0 = w->ne0, units = ne0 / 32 * nb;
    return align256((size_t)ne0 * nb) + align256((size_t)units * sizeof(bn_q8_ds));
}

size_t bn_cu_gemm_scratch_bytes(const bn_cu_weight *w, int nb) {
    int64_t ne0 = w->ne0;
    if (w->type == BN_CU_F32) return 0;
    size_t act = gemm_act_bytes(ne0, nb);
    if (w->type == BN_CU_F16) return act;
    return act + align256((size_t)gemm_tile_rows(w) * ne0 * 2);
}

// Beyond the mmvq range either path may run (the tensor-core prefill switch is process-wide and may change): the
// GEMM's scratch (2·ne0·nb bytes of fp16 activations and more) always holds the Q8 activations (1.25·ne0·nb).
size_t bn_cu_matmul_scratch_bytes(const bn_cu_weight *w, int nb) {
    return bn_cu_matmul_uses_mmvq(w->type, nb) ? bn_cu_mmvq_scratch_bytes(w, nb) : bn_cu_gemm_scratch_bytes(w, nb);
}

// blas_error: cuBLAS failures are reported as cudaErrorLaunchFailure (cudaError_t has no cuBLAS codes).
static cudaError_t blas_error(cublasStatus_t st) {
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
}

// matmul_gemm: the prefill path (nb beyond the mmvq range) for one weight; x16 and scale from x16_scaled (unused
// for F32 weights), the weight's fp16 tiles after them in scratch.
static cudaError_t matmul_gemm(const bn_cu_weight *w, const float *x, const bn_half *x16, const float *scale,
                               float *y, int nb, void *scratch, cublasHandle_t blas, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    int ne0 = (int)w->ne0;
    cudaError_t e;
    cublasStatus_t st = cublasSetStream(blas, s);
    if (st != CUBLAS_STATUS_SUCCESS) return blas_error(st);
    if (w->type == BN_CU_F32) { // y {ne1, nb} = Wᵀ-view · x, W as a column-major {ne0, ne1} matrix
        st = cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne1, nb, ne0, &one, (const float *)w->data,
                         (int)(w->row_bytes / 4), x, ne0, &zero, y, (int)w->ne1);
        return blas_error(st);
    }
    if (w->type == BN_CU_F16) {
        st = cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne1, nb, ne0, &one, w->data, CUDA_R_16F,
                          (int)(w->row_bytes / 2), x16, CUDA_R_16F, ne0, &zero, y, CUDA_R_32F, (int)w->ne1,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) return blas_error(st);
        return unscale_cols(y, w->ne1, nb, scale, s);
    }
    bn_half *w16 = (bn_half *)((char *)scratch + gemm_act_bytes(ne0, nb));
    int64_t tile = gemm_tile_rows(w);
    for (int64_t r0 = 0; r0 < w->ne1; r0 += tile) {
        int64_t nr = w->ne1 - r0 < tile ? w->ne1 - r0 : tile;
        if ((e = bn_cu_dequant_f16(w, r0, nr, w16, s)) != cudaSuccess) return e;
        st = cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, nb, ne0, &one, w16, CUDA_R_16F, ne0, x16,
                          CUDA_R_16F, ne0, &zero, y + r0, CUDA_R_32F, (int)w->ne1, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) return blas_error(st);
    }
    return unscale_cols(y, w->ne1, nb, scale, s); // once, after every row tile
}

// matmuls_gemm: the prefill path for n weights of one x: x converted once (when a weight is not F32).
static cudaError_t matmuls_gemm(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                void *scratch, cublasHandle_t blas, cudaStream_t s) {
    int64_t ne0 = w[0]->ne0;
    bn_half *x16 = (bn_half *)scratch;
    float *scale = (float *)((char *)scratch + align256((size_t)ne0 * nb * 2));
    bool converted = false;
    for (int i = 0; i < n; i++) {
        if (w[i]->ne1 == 0) continue;
        cudaError_t e;
        if (w[i]->type != BN_CU_F32 && !converted) {
            if ((e = x16_scaled(x, ne0, nb, x16, scale, s)) != cudaSuccess) return e;
            converted = true;
        }
        if ((e = matmul_gemm(w[i], x, x16, scale, y[i], nb, scratch, blas, s)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// valid_multi: the checks every bn_cu_matmul_multi variant makes (weight count, types, a common ne0).
static bool valid_multi(const bn_cu_weight *const *w, int n, int nb) {
    if (n < 1 || n > BN_CU_MATMUL_MULTI_MAX || nb < 1) return false;
    for (int i = 0; i < n; i++)
        if (!bn_cu_type_supported(w[i]->type) || w[i]->ne0 != w[0]->ne0 || w[0]->ne0 % bn_cu_blck(w[i]->type) != 0)
            return false;
    return true;
}

// q8_act_in: where the mmvq path keeps the Q8 activations of {ne0, nb} in scratch.
static bn_q8_out q8_act_in(void *scratch, int64_t ne0, int nb, int order) {
    bn_q8_ds *ds = (bn_q8_ds *)((char *)scratch + align256((size_t)ne0 * nb));
    return bn_q8_out{(int8_t *)scratch, ds, order, ne0};
}

// matmuls_mmvq: the mmvq path for n weights of one x: x quantized once per element order, one launch per run of
// equal types (the tensor-core kernels for the low-bit types at nb >= BN_CU_MMA_MIN_NB, the dp4a ones otherwise).
// ready: the element order of Q8 activations a producer already left in scratch (-1: none; x is quantized).
static cudaError_t matmuls_mmvq(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                void *scratch, int ready, cudaStream_t s) {
    int64_t ne0 = w[0]->ne0;
    const bn_q8_out q = q8_act_in(scratch, ne0, nb, ready);
    const bn_q8_act act = {q.qs, q.ds};
    int order = ready; // element order of the activations now in scratch
    for (int i = 0; i < n;) {
        int j = i + 1; // weights i..j-1 share a type: one launch
        while (j < n && w[j]->type == w[i]->type) j++;
        if (bn_cu_is_quantized(w[i]->type) && bn_act_order(w[i]->type) != order) {
            cudaError_t e = bn_cu_quantize_act(w[i]->type, x, ne0, nb, q.qs, q.ds, s);
            if (e != cudaSuccess) return e;
            order = bn_act_order(w[i]->type);
        }
        cudaError_t e = nb > BN_CU_MMVQ_KERNEL_MAX_NB       ? bn_cu_mmq_tc_chunks(w + i, y + i, j - i, &act, nb, s)
                        : bn_cu_mmq_tc_supports(w[i]->type, nb) ? bn_cu_mmq_tc(w + i, y + i, j - i, &act, nb, s)
                                                                : bn_cu_mmvq(w + i, y + i, j - i, &act, x, nb, s);
        if (e != cudaSuccess) return e;
        i = j;
    }
    return cudaSuccess;
}

bool bn_cu_q8_fusable(const bn_cu_weight *const *w, int n, int nb, void *scratch, bn_q8_out *out) {
    if (!valid_multi(w, n, nb) || !bn_cu_matmul_uses_mmvq(w[0]->type, nb) || nb > BN_CU_MMVQ_KERNEL_MAX_NB ||
        !bn_cu_is_quantized(w[0]->type))
        return false;
    *out = q8_act_in(scratch, w[0]->ne0, nb, bn_act_order(w[0]->type));
    return true;
}

cudaError_t bn_cu_matmul_multi_q8(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                  void *scratch, cudaStream_t s) {
    bn_q8_out q;
    if (!bn_cu_q8_fusable(w, n, nb, scratch, &q)) return cudaErrorInvalidValue;
    return matmuls_mmvq(w, n, x, y, nb, scratch, q.order, s);
}

cudaError_t bn_cu_matmul_multi(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                               void *scratch, cublasHandle_t blas, cudaStream_t s) {
    if (!valid_multi(w, n, nb)) return cudaErrorInvalidValue;
    if (!bn_cu_matmul_uses_mmvq(w[0]->type, nb) && !bn_cu_mmq_prefill(w, n, nb))
        return matmuls_gemm(w, n, x, y, nb, scratch, blas, s);
    return matmuls_mmvq(w, n, x, y, nb, scratch, -1, s);
}

cudaError_t bn_cu_matmul_multi_mmvq(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                    void *scratch, cudaStream_t s) {
    if (!valid_multi(w, n, nb) || nb > BN_CU_MMVQ_KERNEL_MAX_NB) return cudaErrorInvalidValue;
    return matmuls_mmvq(w, n, x, y, nb, scratch, -1, s);
}

cudaError_t bn_cu_matmul_multi_gemm(const bn_cu_weight *const *w, int n, const float *x, float *const *y, int nb,
                                    void *scratch, cublasHandle_t blas, cudaStream_t s) {
    if (!valid_multi(w, n, nb)) return cudaErrorInvalidValue;
    return matmuls_gemm(w, n, x, y, nb, scratch, blas, s);
}

cudaError_t bn_cu_matmul(const bn_cu_weight *w, const float *x, float *y, int nb, void *scratch,
                         cublasHandle_t blas, cudaStream_t s) {
    return bn_cu_matmul_multi(&w, 1, x, &y, nb, scratch, blas, s);
}

// repack_k: one block per row, in place through shared memory: blocks → [payloads][scales].
__global__ void repack_k(uint8_t *w, size_t row_bytes, int nblk, int bytes) {
    bn_cu_grid_begin();
    BN_DYN_SHARED(uint8_t, smem);
    uint8_t *row = w + (int64_t)blockIdx.x * row_bytes;
    int n = nblk * bytes, pb = bytes - 2, payload = nblk * pb;
    for (int i = threadIdx.x; i < n; i += blockDim.x) smem[i] = row[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int src = i < payload ? (i / pb) * bytes + 2 + i % pb : ((i - payload) >> 1) * bytes + ((i - payload) & 1);
        row[i] = smem[src];
    }
}

bool bn_cu_weight_repackable(const bn_cu_weight *w) {
    int t = w->type;
    if (t != BN_CU_Q1_0 && t != BN_CU_Q2_0 && t != BN_CU_PQ2_0 && t != BN_CU_Q8_0) return false;
    size_t n = (size_t)(w->ne0 / bn_cu_blck(t)) * bn_cu_block_bytes(t);
    return w->ne1 > 0 && w->row_bytes % 16 == 0 && (uintptr_t)w->data % 16 == 0 && n <= 48 * 1024;
}

cudaError_t bn_cu_weight_repack(bn_cu_weight *w, cudaStream_t s) {
    if (!bn_cu_weight_repackable(w)) return cudaSuccess;
    int t = w->type, nblk = (int)(w->ne0 / bn_cu_blck(t)), bytes = bn_cu_block_bytes(t);
    size_t n = (size_t)nblk * bytes;
    BN_LAUNCH(repack_k, dim3((unsigned)w->ne1), dim3(256), n, s, (uint8_t *)w->data, w->row_bytes, nblk, bytes);
    cudaError_t e = cudaGetLastError();
    // the decode kernels read weights through the read-only cache, which programmatic dependent launch allows
    // only for memory no kernel before them writes (cuda/common.cuh): the repacked rows are final on return
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) w->type = BN_CU_PLANAR + t;
    return e;
}
