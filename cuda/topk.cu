// cuda/topk.cu — argmax and top-k over a logits vector on the device.
// Order: larger value first, ties → lower index first, NaN below every number, empty slots (index −1)
// below everything. argmax: one block scans x. top-k (k <= 64): each block keeps the top k of a chunk
// of TOPK_CHUNK candidates (k selection rounds over the chunk in shared memory); the block winners
// are reduced the same way until one block remains.
#include "cuda/mm_impl.cuh"

#define ARGMAX_THREADS 1024
#define TOPK_THREADS 256
#define TOPK_CHUNK 1024 // candidates per block (in shared memory); >= 16 * BN_CU_TOPK_MAX_K
#define BN_CU_TOPK_MAX_K 64

// ranks_above: true when (va, ia) comes before (vb, ib) in the order above.
__device__ __forceinline__ bool ranks_above(float va, int ia, float vb, int ib) {
    if (ia < 0 || ib < 0) return ib < 0 && ia >= 0;
    bool na = va != va, nb = vb != vb;
    if (na || nb) return nb && (!na || ia < ib);
    return va > vb || (va == vb && ia < ib);
}

// block_best: the best (v, i) over the block (every thread gets it); red holds 2 × 32 words.
__device__ __forceinline__ void block_best(float *v, int *i, float *redv, int *redi) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int oi = __shfl_xor_sync(0xffffffffu, *i, o);
        if (ranks_above(ov, oi, *v, *i)) *v = ov, *i = oi;
    }
    __syncthreads(); // the previous round's readers are done with red
    if (lane == 0) redv[warp] = *v, redi[warp] = *i;
    __syncthreads();
    *v = lane < nwarps ? redv[lane] : 0.0f;
    *i = lane < nwarps ? redi[lane] : -1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int oi = __shfl_xor_sync(0xffffffffu, *i, o);
        if (ranks_above(ov, oi, *v, *i)) *v = ov, *i = oi;
    }
}

// argmax_k: block b scans row b of x (rows of n floats, contiguous) into out[b]; 16-byte loads when the row
// is 16-byte aligned, then the scalar tail.
__global__ void argmax_k(const float *x, int n, int32_t *out) {
    bn_cu_grid_begin();
    x += (size_t)blockIdx.x * (size_t)n;
    out += blockIdx.x;
    BN_SHARED(float, redv, 32);
    BN_SHARED(int, redi, 32);
    float bv = 0.0f;
    int bi = -1;
    int nvec = (uintptr_t)x % 16 == 0 ? n / 4 : 0;
    const float4 *x4 = (const float4 *)x;
#pragma unroll 4
    for (int j = threadIdx.x; j < nvec; j += blockDim.x) {
        float4 v = bn_ld_vec(x4 + j);
        if (ranks_above(v.x, 4 * j, bv, bi)) bv = v.x, bi = 4 * j;
        if (ranks_above(v.y, 4 * j + 1, bv, bi)) bv = v.y, bi = 4 * j + 1;
        if (ranks_above(v.z, 4 * j + 2, bv, bi)) bv = v.z, bi = 4 * j + 2;
        if (ranks_above(v.w, 4 * j + 3, bv, bi)) bv = v.w, bi = 4 * j + 3;
    }
    for (int j = 4 * nvec + threadIdx.x; j < n; j += blockDim.x) {
        float v = x[j];
        if (ranks_above(v, j, bv, bi)) bv = v, bi = j;
    }
    block_best(&bv, &bi, redv, redi);
    if (threadIdx.x == 0) *out = (bi >= 0 && bv == bv) ? bi : -1; // all-NaN → −1
}

// topk_k: block b takes candidates [b*TOPK_CHUNK, ...) of (vals, idx) (idx == nullptr: the index is the
// position) and writes its top k to ov/oi + b*k, padding with (0, −1) when it has fewer than k.
__global__ void topk_k(const float *vals, const int32_t *idx, int n, int k, float *ov, int32_t *oi) {
    bn_cu_grid_begin();
    BN_SHARED(float, cv, TOPK_CHUNK);
    BN_SHARED(int, ci, TOPK_CHUNK);
    BN_SHARED(float, redv, 32);
    BN_SHARED(int, redi, 32);
    int base = blockIdx.x * TOPK_CHUNK;
    for (int j = threadIdx.x; j < TOPK_CHUNK; j += blockDim.x) {
        int g = base + j;
        cv[j] = g < n ? vals[g] : 0.0f;
        ci[j] = g < n ? (idx ? idx[g] : g) : -1;
    }
    __syncthreads();
    float pv = 0.0f; // the previous pick: candidates must rank below it
    int pi = -2;
    for (int r = 0; r < k; r++) {
        float bv = 0.0f;
        int bi = -1;
        for (int j = threadIdx.x; j < TOPK_CHUNK; j += blockDim.x) {
            float v = cv[j];
            int i = ci[j];
            bool below_prev = pi == -2 || ranks_above(pv, pi, v, i);
            if (i >= 0 && below_prev && ranks_above(v, i, bv, bi)) bv = v, bi = i;
        }
        block_best(&bv, &bi, redv, redi);
        if (threadIdx.x == 0) {
            ov[blockIdx.x * k + r] = bv;
            oi[blockIdx.x * k + r] = bi;
        }
        if (bi < 0) { // fewer than k candidates: pad the rest
            for (int rr = r + 1 + (int)threadIdx.x; rr < k; rr += blockDim.x)
                ov[blockIdx.x * k + rr] = 0.0f, oi[blockIdx.x * k + rr] = -1;
            break;
        }
        pv = bv, pi = bi;
    }
}

cudaError_t bn_cu_argmax(const float *x, int n, int32_t *out, cudaStream_t s) {
    return bn_cu_argmax_rows(x, n, 1, out, s);
}

cudaError_t bn_cu_argmax_rows(const float *x, int n, int rows, int32_t *out, cudaStream_t s) {
    if (n <= 0 || rows <= 0) return cudaErrorInvalidValue;
    BN_LAUNCH(argmax_k, dim3(rows), dim3(ARGMAX_THREADS), 0, s, x, n, out);
    return cudaGetLastError();
}

// lse_rows_k: block r: out[r] = max + ln Σ exp(x_i − max) over row r.
static __global__ void lse_rows_k(const float *x, int n, float *out) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const float *row = x + (size_t)blockIdx.x * n;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
    m = bn_warp_reduce_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = bn_warp_reduce_max(lane < n_warps ? red[lane] : -INFINITY);
    __syncthreads(); // every warp has read red before it holds the sums
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(row[i] - m);
    s = bn_warp_reduce_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = bn_warp_reduce_sum(lane < n_warps ? red[lane] : 0.0f);
    if (threadIdx.x == 0) out[blockIdx.x] = m + logf(s);
}

cudaError_t bn_cu_lse_rows(const float *x, int n, int rows, float *out, cudaStream_t s) {
    if (n <= 0 || rows <= 0) return cudaErrorInvalidValue;
    BN_LAUNCH(lse_rows_k, dim3(rows), dim3(ARGMAX_THREADS), 0, s, x, n, out);
    return cudaGetLastError();
}

// topk_blocks: blocks of the first round for n candidates.
static int topk_blocks(int n) { return (n + TOPK_CHUNK - 1) / TOPK_CHUNK; }

size_t bn_cu_topk_scratch_bytes(int n, int k) {
    size_t cand = (size_t)topk_blocks(n) * (k > 0 ? k : 1);
    return 2 * cand * (sizeof(float) + sizeof(int32_t));
}

cudaError_t bn_cu_topk(const float *x, int n, int k, float *vals, int32_t *idx, void *scratch, cudaStream_t s) {
    if (k < 1 || k > BN_CU_TOPK_MAX_K || k > n) return cudaErrorInvalidValue;
    size_t cand = (size_t)topk_blocks(n) * k;
    float *bufv[2] = {(float *)scratch, (float *)scratch + cand};
    int32_t *bufi[2] = {(int32_t *)(bufv[1] + cand), (int32_t *)(bufv[1] + cand) + cand};
    const float *cv = x;
    const int32_t *ci = nullptr;
    int m = n, side = 0;
    while (true) {
        int blocks = topk_blocks(m);
        bool last = blocks == 1;
        float *ov = last ? vals : bufv[side];
        int32_t *oi = last ? idx : bufi[side];
        BN_LAUNCH(topk_k, dim3(blocks), dim3(TOPK_THREADS), 0, s, cv, ci, m, k, ov, oi);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess || last) return e;
        cv = ov, ci = oi, m = blocks * k, side ^= 1;
    }
}
