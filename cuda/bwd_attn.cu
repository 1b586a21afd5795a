// cuda/bwd_attn.cu — causal softmax attention with GQA for the trainer, forward and backward (docs/model.md §8; the
// formulas of train/backward_attn.c), and the device buffers of cuda/cuda_bwd_seq.h. The backward runs in two
// launches: a block per query row recomputes P, adds dq and keeps the row's statistics (max, 1/Σ, Σ P·dP); then a
// block per (kv head, key position) sums dk and dv over the query rows that see it, in a fixed order, so the result
// is deterministic without atomics.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/cuda_bwd_seq.h"

#define ATTN_ROW_THREADS 128 // a block per (q head, query position): warps over key positions, threads over dims
#define ATTN_KV_WARPS 4      // a block per (kv head, key position): warps over (query position, q head) pairs
#define ATTN_MAX_T 24576     // score rows (2·T floats for the backward) in 192 KiB of shared memory
#define ATTN_STATS 3         // per query row: max score, 1/Σexp, Σ_τ P·dP

// row_dot: a·b over n floats by one warp (lane l: elements l, l + 32, ...); every lane gets the sum.
static __device__ __forceinline__ float row_dot(const float *a, const float *b, int n, int lane) {
    float s = 0.0f;
    for (int i = lane; i < n; i += 32) s += a[i] * b[i];
    return bn_warp_reduce_sum(s);
}

// block_max: max of v over the block (blockDim.x a multiple of 32); red: 32 shared floats. Every thread calls.
static __device__ __forceinline__ float block_max(float v, float *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = bn_warp_reduce_max(v);
    __syncthreads(); // red may still be read by a previous reduction
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return bn_warp_reduce_max(lane < n_warps ? red[lane] : -INFINITY);
}

// row_probs: P[τ] (τ <= p) = softmax of scale·q·k(τ) for the query row qh against kv head kvh, a warp per key
// position; *m and *inv (the max score and 1/Σexp) rebuild P[τ] = expf(s − m)·inv. Every thread calls; P is
// complete when it returns.
static __device__ void row_probs(const float *qh, const float *k, int p, int hd, int nkv, int kvh, float scale,
                                 float *P, float *red, float *m, float *inv) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    for (int tau = warp; tau <= p; tau += n_warps) {
        const float s = row_dot(qh, k + ((size_t)tau * nkv + kvh) * hd, hd, lane) * scale;
        if (lane == 0) P[tau] = s;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int tau = threadIdx.x; tau <= p; tau += blockDim.x) mx = fmaxf(mx, P[tau]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int tau = threadIdx.x; tau <= p; tau += blockDim.x) {
        P[tau] = expf(P[tau] - mx);
        sum += P[tau];
    }
    const float r = 1.0f / bn_block_sum(sum, red);
    for (int tau = threadIdx.x; tau <= p; tau += blockDim.x) P[tau] *= r;
    __syncthreads();
    *m = mx;
    *inv = r;
}

// attn_fwd_kernel: block (h, p): out row (p, h) = Σ_τ P[τ]·v(τ), a thread per dim. Dynamic shared memory: T floats.
static __global__ void attn_fwd_kernel(const float *q, const float *k, const float *v, int hd, int nh, int nkv,
                                       float scale, float *out) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    BN_DYN_SHARED(float, P);
    const int h = blockIdx.x, p = blockIdx.y, kvh = h / (nh / nkv);
    const size_t row = ((size_t)p * nh + h) * hd;
    float m, inv;
    row_probs(q + row, k, p, hd, nkv, kvh, scale, P, red, &m, &inv);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int tau = 0; tau <= p; tau++) acc += P[tau] * v[((size_t)tau * nkv + kvh) * hd + d];
        out[row + d] = acc;
    }
}

// attn_bwd_rows_kernel: block (h, p): P and dP[τ] = do·v(τ) of query row (p, h); stats of the row = (max, 1/Σexp,
// D = Σ P·dP); dq += scale·Σ_τ P(dP − D)·k(τ) (dq NULL: stats only). Dynamic shared memory: 2·T floats.
static __global__ void attn_bwd_rows_kernel(const float *q, const float *k, const float *v, const float *dout, int T,
                                            int hd, int nh, int nkv, float scale, float *dq, float *stats) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    BN_DYN_SHARED(float, P);
    float *dP = P + T;
    const int h = blockIdx.x, p = blockIdx.y, kvh = h / (nh / nkv);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    const size_t row = ((size_t)p * nh + h) * hd;
    float m, inv;
    row_probs(q + row, k, p, hd, nkv, kvh, scale, P, red, &m, &inv);
    for (int tau = warp; tau <= p; tau += n_warps) {
        const float s = row_dot(dout + row, v + ((size_t)tau * nkv + kvh) * hd, hd, lane);
        if (lane == 0) dP[tau] = s;
    }
    __syncthreads();
    float part = 0.0f;
    for (int tau = threadIdx.x; tau <= p; tau += blockDim.x) part += P[tau] * dP[tau];
    const float D = bn_block_sum(part, red);
    if (threadIdx.x == 0) {
        float *st = stats + ((size_t)p * nh + h) * ATTN_STATS;
        st[0] = m, st[1] = inv, st[2] = D;
    }
    if (!dq) return;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int tau = 0; tau <= p; tau++) acc += P[tau] * (dP[tau] - D) * k[((size_t)tau * nkv + kvh) * hd + d];
        dq[row + d] += scale * acc;
    }
}

// attn_bwd_kv_kernel: block (kvh, τ): dk(τ) += Σ scale·P(dP − D)·q and dv(τ) += Σ P·do over the pairs (query p >= τ,
// q head h of kvh), P rebuilt bit for bit from the row stats. Warp w takes pairs w, w + n_warps, ... into its own
// partial rows; the partials are then added in warp order. Dynamic shared memory: 2·n_warps·hd floats.
static __global__ void attn_bwd_kv_kernel(const float *q, const float *k, const float *v, const float *dout, int T,
                                          int hd, int nh, int nkv, float scale, const float *stats, float *dk,
                                          float *dv) {
    bn_cu_grid_begin();
    BN_DYN_SHARED(float, part);
    const int kvh = blockIdx.x, tau = blockIdx.y, grp = nh / nkv;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    float *pk = part + (size_t)warp * hd, *pv = part + (size_t)(n_warps + warp) * hd;
    for (int d = lane; d < hd; d += 32) pk[d] = 0.0f, pv[d] = 0.0f;
    const size_t kv = ((size_t)tau * nkv + kvh) * hd;
    const int n_pairs = grp * (T - tau);
    for (int n = warp; n < n_pairs; n += n_warps) {
        const int p = tau + n / grp, h = kvh * grp + n % grp;
        const size_t row = ((size_t)p * nh + h) * hd;
        const float *st = stats + ((size_t)p * nh + h) * ATTN_STATS;
        const float P = expf(row_dot(q + row, k + kv, hd, lane) * scale - st[0]) * st[1];
        const float dP = row_dot(dout + row, v + kv, hd, lane);
        const float c = scale * (P * (dP - st[2]));
        for (int d = lane; d < hd; d += 32) {
            pk[d] += c * q[row + d];
            pv[d] += P * dout[row + d];
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float sk = 0.0f, sv = 0.0f;
        for (int w = 0; w < n_warps; w++) sk += part[(size_t)w * hd + d], sv += part[(size_t)(n_warps + w) * hd + d];
        if (dk) dk[kv + d] += sk;
        if (dv) dv[kv + d] += sv;
    }
}

// attn_shape_ok: the shapes the kernels take; else err filled.
static bool attn_shape_ok(int T, int hd, int nh, int nkv, char *err, size_t errlen) {
    if (T >= 0 && T <= ATTN_MAX_T && hd > 0 && nkv > 0 && nh >= nkv && nh % nkv == 0) return true;
    if (err && errlen)
        snprintf(err, errlen, "cuda attention: unsupported shape T %d hd %d nh %d nkv %d", T, hd, nh, nkv);
    return false;
}

// dyn_smem_allow: lets kernel take `bytes` of dynamic shared memory (the opt-in above 48 KiB).
template <class K> static cudaError_t dyn_smem_allow(K *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

extern "C" int bn_cuda_attn_max_T(void) { return ATTN_MAX_T; }

extern "C" int bn_cuda_attn_fwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                                float scale, float *out, void *stream, char *err, size_t errlen) {
    if (!attn_shape_ok(T, hd, nh, nkv, err, errlen)) return -1;
    if (T == 0) return 0;
    const size_t smem = (size_t)T * sizeof(float);
    BN_CUDA_TRY(dyn_smem_allow(attn_fwd_kernel, smem), err, errlen);
    BN_LAUNCH(attn_fwd_kernel, dim3(nh, T), ATTN_ROW_THREADS, smem, stream, q, k, v, hd, nh, nkv, scale, out);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

extern "C" size_t bn_cuda_attn_bwd_workspace_floats(int T, int nh) { return (size_t)T * nh * ATTN_STATS; }

extern "C" int bn_cuda_attn_bwd(const float *q, const float *k, const float *v, int T, int hd, int nh, int nkv,
                                float scale, const float *dout, float *dq, float *dk, float *dv, float *workspace,
                                void *stream, char *err, size_t errlen) {
    if (!attn_shape_ok(T, hd, nh, nkv, err, errlen)) return -1;
    if (T == 0 || (!dq && !dk && !dv)) return 0;
    const size_t rows_smem = (size_t)2 * T * sizeof(float);
    BN_CUDA_TRY(dyn_smem_allow(attn_bwd_rows_kernel, rows_smem), err, errlen);
    BN_LAUNCH(attn_bwd_rows_kernel, dim3(nh, T), ATTN_ROW_THREADS, rows_smem, stream, q, k, v, dout, T, hd, nh, nkv,
              scale, dq, workspace);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    if (!dk && !dv) return 0;
    const size_t kv_smem = (size_t)2 * ATTN_KV_WARPS * hd * sizeof(float);
    BN_CUDA_TRY(dyn_smem_allow(attn_bwd_kv_kernel, kv_smem), err, errlen);
    BN_LAUNCH(attn_bwd_kv_kernel, dim3(nkv, T), ATTN_KV_WARPS * 32, kv_smem, stream, q, k, v, dout, T, hd, nh, nkv,
              scale, (const float *)workspace, dk, dv);
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

