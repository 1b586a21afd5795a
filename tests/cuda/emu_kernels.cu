// tests/cuda/emu_kernels.cu — kernels for test_emu_runtime (see emu_kernels.h), written to the
// cuda/common.cuh contract so nvcc (GPU) and g++ (emulator) both build them.
#include "cuda/common.cuh"
#include "tests/cuda/emu_kernels.h"
#include "cuda/mma.cuh"
#include <stdlib.h>
#include <thread>
#ifdef BONSAI_CUDA_EMU
#include "cuda/emu/emu_api.h"
#endif

namespace {
// DevBuf: a device allocation freed at scope exit.
template <class T> struct DevBuf {
    T *p = nullptr;
    ~DevBuf() { cudaFree(p); }
};

#define TRY(call) BN_CUDA_TRY(call, err, errlen)
#define TRY_LAUNCH() BN_CUDA_TRY(cudaGetLastError(), err, errlen)

// ---- block reduction ------------------------------------------------------------------------------
__global__ void k_block_sum(const float *x, int n, float *out) {
    bn_cu_grid_begin();
    BN_SHARED(float, part, 256);
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    part[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = part[0];
}

__global__ void k_sync_votes(int *out) {
    bn_cu_grid_begin();
    int t = threadIdx.x;
    out[5 * t + 0] = __syncthreads_count(t % 3 == 0);
    out[5 * t + 1] = __syncthreads_and(t < 1000);
    out[5 * t + 2] = __syncthreads_or(t == 77);
    out[5 * t + 3] = __syncthreads_and(t != 200);
    out[5 * t + 4] = __syncthreads_or(t > 1000);
}

// ---- warp operations ------------------------------------------------------------------------------
__global__ void k_warp_ops(const int *x, int *out) {
    bn_cu_grid_begin();
    int t = threadIdx.x, lane = t % 32, v = x[t], nt = blockDim.x;
    int s = v;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    out[0 * nt + t] = s;
    int d = v;
    for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o);
    out[1 * nt + t] = lane == 0 ? d : 0;
    int scan = v;
    for (int o = 1; o < 32; o <<= 1) {
        int up = __shfl_up_sync(0xffffffffu, scan, o);
        if (lane >= o) scan += up;
    }
    out[2 * nt + t] = scan;
    out[3 * nt + t] = __shfl_sync(0xffffffffu, v, 5);
    out[4 * nt + t] = __shfl_sync(0xffffffffu, v, (lane + 3) % 32);
    int s8 = v;
    for (int o = 4; o > 0; o >>= 1) s8 += __shfl_xor_sync(0xffffffffu, s8, o, 8);
    out[5 * nt + t] = s8;
    out[6 * nt + t] = (int)__ballot_sync(0xffffffffu, v & 1);
    out[7 * nt + t] = __any_sync(0xffffffffu, v == 7);
    out[8 * nt + t] = __all_sync(0xffffffffu, v >= 0);
    float f = (float)v * 0.5f;
    for (int o = 16; o > 0; o >>= 1) f = fmaxf(f, __shfl_xor_sync(0xffffffffu, f, o));
    out[9 * nt + t] = (int)(f * 2.0f);
    out[10 * nt + t] = __shfl_down_sync(0xffffffffu, v, 4, 16);
}

__global__ void k_warp_reduce(const float *x, const int *xi, float *out, int *outi) {
    bn_cu_grid_begin();
    int t = threadIdx.x, nt = blockDim.x;
    float v = x[t], s = v, m = v;
    int vi = xi[t], si = vi;
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        si += __shfl_xor_sync(0xffffffffu, si, o);
    }
    out[0 * nt + t] = s;
    out[1 * nt + t] = bn_warp_reduce_sum(v);
    out[2 * nt + t] = m;
    out[3 * nt + t] = bn_warp_reduce_max(v);
    outi[0 * nt + t] = si;
    outi[1 * nt + t] = bn_warp_reduce_sum(vi);
}

// ---- dynamic shared memory --------------------------------------------------------------------------
__global__ void k_dyn_reverse(const float *x, int n, int extra, float *out) {
    bn_cu_grid_begin();
    BN_DYN_SHARED(float, buf);
    BN_SHARED(float, total, 1);
    int t = threadIdx.x, base = blockIdx.x * blockDim.x, nb = blockDim.x;
    buf[t] = base + t < n ? x[base + t] : 0.0f;
    for (int e = t; e < extra; e += nb) buf[nb + e] = 1.0f; // touch the rest of the region
    if (t == 0) *total = 0.0f;
    __syncthreads();
    if (base + t < n) out[base + t] = buf[nb - 1 - t];
    if (t == 0) {
        float s = 0.0f;
        for (int e = 0; e < extra; e++) s += buf[nb + e];
        *total = s;
    }
    __syncthreads();
    if (t == 0 && base == 0) out[n] = *total;
}

// ---- atomics -------------------------------------------------------------------------------------------
__global__ void k_atomics(int *counts, float *fsum) {
    bn_cu_grid_begin();
    int gid = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&counts[0], 1);
    atomicMax(&counts[1], gid);
    int old = counts[2], seen;
    while ((seen = atomicCAS(&counts[2], old, old + 1)) != old) old = seen;
    atomicAdd(fsum, 1.0f);
}

__global__ void k_dp4a(const int *a, const int *b, const int *c, int *out, int n) {
    bn_cu_grid_begin();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __dp4a(a[i], b[i], c[i]);
}

// k_mma: warp w of block b works on tile 2b + w (whole warps leave together past n).
__global__ void k_mma(const int8_t *a, const int8_t *b, const int32_t *c, int32_t *d, int32_t *d2, int n) {
    bn_cu_grid_begin();
    const int tile = 2 * blockIdx.x + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (tile >= n) return;
    const int8_t *at = a + 512 * tile, *bt = b + 256 * tile;
    int fa[4], fb[2], fc[4], fd[4];
    for (int r = 0; r < 4; r++) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++)
            v |= (uint32_t)(uint8_t)at[32 * bn_mma_a_row(lane, r) + bn_mma_a_k(lane, r, j)] << 8 * j;
        fa[r] = (int)v;
        fc[r] = c[128 * tile + 8 * bn_mma_c_row(lane, r) + bn_mma_c_col(lane, r)];
    }
    for (int r = 0; r < 2; r++) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++)
            v |= (uint32_t)(uint8_t)bt[32 * bn_mma_b_col(lane) + bn_mma_b_k(lane, r, j)] << 8 * j;
        fb[r] = (int)v;
    }
    bn_mma_s8_16x8x32(fd, fa, fb, fc);
    for (int r = 0; r < 4; r++) d[128 * tile + 8 * bn_mma_c_row(lane, r) + bn_mma_c_col(lane, r)] = fd[r];
    bn_mma_s8_16x8x32(fd, fa, fb, fd); // d aliasing c: A·B added twice
    for (int r = 0; r < 4; r++) d2[128 * tile + 8 * bn_mma_c_row(lane, r) + bn_mma_c_col(lane, r)] = fd[r];
}

__global__ void k_half(float *f, uint16_t *back, const float *x, uint16_t *rn, int n) {
    bn_cu_grid_begin();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 65536) {
        float v = bn_h2f(bn_half_bits((uint16_t)i));
        f[i] = v;
        back[i] = bn_half_raw(bn_f2h(v));
    }
    if (i < n) rn[i] = bn_half_raw(bn_f2h(x[i]));
}

__global__ void k_grid3d(uint32_t *out) {
    bn_cu_grid_begin();
    uint32_t block_lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    uint32_t thread_lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    uint32_t nthreads = blockDim.x * blockDim.y * blockDim.z;
    out[block_lin * nthreads + thread_lin] = blockIdx.x | blockIdx.y << 4 | blockIdx.z << 8 | threadIdx.x << 12 |
                                             threadIdx.y << 20 | threadIdx.z << 24;
}

// ---- graphs ------------------------------------------------------------------------------------------
__global__ void k_live(int *counter, int *log) {
    bn_cu_grid_begin();
    if (threadIdx.x == 0) {
        int step = *counter;
        log[step] = step;
        *counter = step + 1;
    }
}
__global__ void k_baked(int step, int *log) {
    bn_cu_grid_begin();
    if (threadIdx.x == 0) log[step] = step;
}

// ---- gemm helpers ------------------------------------------------------------------------------------
__global__ void k_to_half(const float *x, uint16_t *h, int n) {
    bn_cu_grid_begin();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = bn_half_raw(bn_f2h(x[i]));
}
__global__ void k_from_half(const uint16_t *h, float *x, int n) {
    bn_cu_grid_begin();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = bn_h2f(bn_half_bits(h[i]));
}

// ---- races and broken kernels -------------------------------------------------------------------------
__global__ void k_shift(const float *x, float *out, int barrier) {
    bn_cu_grid_begin();
    BN_SHARED(float, s, 256);
    int t = threadIdx.x;
    s[t] = x[t];
    if (barrier) __syncthreads();
    out[t] = s[(t + 255) % 256];
}
#ifdef BONSAI_CUDA_EMU // broken on purpose: nvcc rejects k_big_static, the others hang or fail on a GPU
__global__ void k_deadlock(float *out) {
    bn_cu_grid_begin();
    if (threadIdx.x == 0) return; // thread 0 never reaches the barrier
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
__global__ void k_half_warp_shuffle(float *out) {
    bn_cu_grid_begin();
    float v = (float)threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1); // lanes 16..31 never arrive
    out[threadIdx.x] = v;
}
__global__ void k_big_static(float *out) {
    bn_cu_grid_begin();
    BN_SHARED(float, big, 16384); // 64 KiB > 48 KiB of static shared memory
    big[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = big[(threadIdx.x + 1) % blockDim.x];
}
__global__ void k_dyn_only(float *out) {
    bn_cu_grid_begin();
    BN_DYN_SHARED(float, buf);
    buf[threadIdx.x] = 2.0f;
    out[threadIdx.x] = buf[threadIdx.x];
}
__global__ void k_static_past_end(float *out) {
    bn_cu_grid_begin();
    BN_SHARED(float, first, 8);
    BN_SHARED(float, tile, 64);
    tile[threadIdx.x] = 1.0f; // 65 threads: one writes past tile[63]
    first[0] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x % 64] + first[0];
}
__global__ void k_null_write(float *out) { bn_cu_grid_begin(); out[threadIdx.x] = 1.0f; }
__global__ void k_dyn_past_end(int n, float *out) {
    bn_cu_grid_begin();
    BN_DYN_SHARED(float, buf);
    buf[threadIdx.x] = 1.0f; // threads >= n write past the launch's smem_bytes = n floats
    out[threadIdx.x] = buf[threadIdx.x];
}
__global__ void k_past_end(float *buf, int n) { // one page past a 4 KiB buffer
    bn_cu_grid_begin();
    buf[n + threadIdx.x] = 1.0f;
}
__global__ void k_shfl_exited(float *out) {
    bn_cu_grid_begin();
    if (threadIdx.x == 5) return; // lane 5 leaves; the full mask below still names it
    float v = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
}
__global__ void k_shfl_partial_warp(float *out) { // 48 threads: the second warp has lanes 0..15 only
    bn_cu_grid_begin();
    out[threadIdx.x] = bn_warp_reduce_sum((float)threadIdx.x);
}
__global__ void k_shfl_diverged(float *out) {
    bn_cu_grid_begin();
    float v = (float)threadIdx.x;
    if (threadIdx.x % 2) v = __shfl_xor_sync(0xffffffffu, v, 2); // odd lanes here,
    else v = __shfl_xor_sync(0xffffffffu, v, 2) + 1.0f;          // even lanes at another shuffle
    out[threadIdx.x] = v;
}
__global__ void k_mma_diverged(float *out) { // odd lanes at the MMA, even lanes at a shuffle
    bn_cu_grid_begin();
    int d[4], a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[4] = {0, 0, 0, 0};
    if (threadIdx.x % 2) bn_mma_s8_16x8x32(d, a, b, c);
    else d[0] = __shfl_xor_sync(0xffffffffu, 1, 2);
    out[threadIdx.x] = (float)d[0];
}
__global__ void k_sync_diverged(float *out) {
    bn_cu_grid_begin();
    BN_SHARED(float, s, 64);
    s[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x < 32) __syncthreads(); // two different barriers: undefined on a GPU
    else __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}
__global__ void k_misaligned(const float *x, float *out) {
    bn_cu_grid_begin();
    float4 v = __ldg((const float4 *)(x + 1 + 4 * threadIdx.x)); // 4 bytes past 16-byte alignment
    out[threadIdx.x] = v.x;
}
__global__ void k_no_grid_begin(float *out) { out[threadIdx.x] = 1.0f; } // may run beside the kernel before it
__global__ void k_sync_before_grid_begin(float *out) {
    __syncthreads(); // a barrier before the wait: everything before it may overlap the kernel before
    bn_cu_grid_begin();
    out[threadIdx.x] = 1.0f;
}
__global__ void k_deep_stack(float *out) {
    bn_cu_grid_begin();
    volatile char local[256 * 1024]; // 4x the default fiber stack
    for (int i = 0; i < (int)sizeof local; i += 4096) local[i] = (char)i;
    out[threadIdx.x] = local[4096];
}
#endif

__global__ void k_barrier_rounds(int rounds, int *out) {
    bn_cu_grid_begin();
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        acc += r;
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = acc;
}
__global__ void k_no_barrier(int *out) {
    bn_cu_grid_begin();
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = (int)gridDim.x;
}
__global__ void k_shuffle_rounds(int rounds, int *out) {
    bn_cu_grid_begin();
    int acc = threadIdx.x;
    for (int r = 0; r < rounds; r++) acc = __shfl_xor_sync(0xffffffffu, acc, 1) + 1;
    if (threadIdx.x == 0) out[0] = acc;
}
} // namespace

extern "C" int ek_block_sum(const float *x, int n, float *out, char *err, size_t errlen) {
    int nb = (n + 255) / 256;
    DevBuf<float> dx, dout;
    TRY(cudaMalloc(&dx.p, sizeof(float) * n));
    TRY(cudaMalloc(&dout.p, sizeof(float) * nb));
    TRY(cudaMemcpy(dx.p, x, sizeof(float) * n, cudaMemcpyHostToDevice));
    BN_LAUNCH(k_block_sum, nb, 256, 0, 0, dx.p, n, dout.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(float) * nb, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_sync_votes(int *out, char *err, size_t errlen) {
    DevBuf<int> dout;
    TRY(cudaMalloc(&dout.p, sizeof(int) * 5 * 256));
    BN_LAUNCH(k_sync_votes, 1, 256, 0, 0, dout.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(int) * 5 * 256, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_warp_ops(const int *x, int *out, char *err, size_t errlen) {
    DevBuf<int> dx, dout;
    TRY(cudaMalloc(&dx.p, sizeof(int) * 64));
    TRY(cudaMalloc(&dout.p, sizeof(int) * 64 * EK_WARP_OPS));
    TRY(cudaMemcpy(dx.p, x, sizeof(int) * 64, cudaMemcpyHostToDevice));
    BN_LAUNCH(k_warp_ops, 1, 64, 0, 0, dx.p, dout.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(int) * 64 * EK_WARP_OPS, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_warp_reduce(const float *x, const int *xi, float *out, int *outi, char *err, size_t errlen) {
    DevBuf<float> dx, dout;
    DevBuf<int> dxi, douti;
    TRY(cudaMalloc(&dx.p, sizeof(float) * EK_REDUCE_THREADS));
    TRY(cudaMalloc(&dxi.p, sizeof(int) * EK_REDUCE_THREADS));
    TRY(cudaMalloc(&dout.p, sizeof(float) * 4 * EK_REDUCE_THREADS));
    TRY(cudaMalloc(&douti.p, sizeof(int) * 2 * EK_REDUCE_THREADS));
    TRY(cudaMemcpy(dx.p, x, sizeof(float) * EK_REDUCE_THREADS, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dxi.p, xi, sizeof(int) * EK_REDUCE_THREADS, cudaMemcpyHostToDevice));
    BN_LAUNCH(k_warp_reduce, 1, EK_REDUCE_THREADS, 0, 0, dx.p, dxi.p, dout.p, douti.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(float) * 4 * EK_REDUCE_THREADS, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(outi, douti.p, sizeof(int) * 2 * EK_REDUCE_THREADS, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_dyn_reverse(const float *x, int n, int block, int extra, float *out, char *err, size_t errlen) {
    int nb = (n + block - 1) / block;
    size_t smem = sizeof(float) * (size_t)(block + extra);
    DevBuf<float> dx, dout;
    TRY(cudaMalloc(&dx.p, sizeof(float) * n));
    TRY(cudaMalloc(&dout.p, sizeof(float) * (n + 1)));
    TRY(cudaMemcpy(dx.p, x, sizeof(float) * n, cudaMemcpyHostToDevice));
    if (smem > 48 * 1024) TRY(cudaFuncSetAttribute(k_dyn_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    BN_LAUNCH(k_dyn_reverse, nb, block, smem, 0, dx.p, n, extra, dout.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(float) * (n + 1), cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_atomics(int *counts, float *fsum, char *err, size_t errlen) {
    DevBuf<int> dc;
    DevBuf<float> df;
    TRY(cudaMalloc(&dc.p, sizeof(int) * 3));
    TRY(cudaMalloc(&df.p, sizeof(float)));
    TRY(cudaMemset(dc.p, 0, sizeof(int) * 3));
    TRY(cudaMemset(df.p, 0, sizeof(float)));
    BN_LAUNCH(k_atomics, 64, 256, 0, 0, dc.p, df.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(counts, dc.p, sizeof(int) * 3, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(fsum, df.p, sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_dp4a(const int *a, const int *b, const int *c, int *out, int n, char *err, size_t errlen) {
    DevBuf<int> da, db, dc, dout;
    TRY(cudaMalloc(&da.p, sizeof(int) * n));
    TRY(cudaMalloc(&db.p, sizeof(int) * n));
    TRY(cudaMalloc(&dc.p, sizeof(int) * n));
    TRY(cudaMalloc(&dout.p, sizeof(int) * n));
    TRY(cudaMemcpy(da.p, a, sizeof(int) * n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(db.p, b, sizeof(int) * n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dc.p, c, sizeof(int) * n, cudaMemcpyHostToDevice));
    BN_LAUNCH(k_dp4a, (n + 127) / 128, 128, 0, 0, da.p, db.p, dc.p, dout.p, n);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(int) * n, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_mma(const int8_t *a, const int8_t *b, const int32_t *c, int32_t *d, int32_t *d2, int n, char *err,
                      size_t errlen) {
    DevBuf<int8_t> da, db;
    DevBuf<int32_t> dc, dd, dd2;
    TRY(cudaMalloc(&da.p, (size_t)512 * n));
    TRY(cudaMalloc(&db.p, (size_t)256 * n));
    TRY(cudaMalloc(&dc.p, sizeof(int32_t) * 128 * n));
    TRY(cudaMalloc(&dd.p, sizeof(int32_t) * 128 * n));
    TRY(cudaMalloc(&dd2.p, sizeof(int32_t) * 128 * n));
    TRY(cudaMemcpy(da.p, a, (size_t)512 * n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(db.p, b, (size_t)256 * n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dc.p, c, sizeof(int32_t) * 128 * n, cudaMemcpyHostToDevice));
    BN_LAUNCH(k_mma, (n + 1) / 2, 64, 0, 0, da.p, db.p, dc.p, dd.p, dd2.p, n);
    TRY_LAUNCH();
    TRY(cudaMemcpy(d, dd.p, sizeof(int32_t) * 128 * n, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(d2, dd2.p, sizeof(int32_t) * 128 * n, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_half(float *f, uint16_t *back, const float *x, uint16_t *rn, int n, char *err, size_t errlen) {
    DevBuf<float> df, dx;
    DevBuf<uint16_t> dback, drn;
    TRY(cudaMalloc(&df.p, sizeof(float) * 65536));
    TRY(cudaMalloc(&dback.p, sizeof(uint16_t) * 65536));
    TRY(cudaMalloc(&dx.p, sizeof(float) * n));
    TRY(cudaMalloc(&drn.p, sizeof(uint16_t) * n));
    TRY(cudaMemcpy(dx.p, x, sizeof(float) * n, cudaMemcpyHostToDevice));
    int total = n > 65536 ? n : 65536;
    BN_LAUNCH(k_half, (total + 255) / 256, 256, 0, 0, df.p, dback.p, dx.p, drn.p, n);
    TRY_LAUNCH();
    TRY(cudaMemcpy(f, df.p, sizeof(float) * 65536, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(back, dback.p, sizeof(uint16_t) * 65536, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(rn, drn.p, sizeof(uint16_t) * n, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_grid3d(uint32_t *out, int n, char *err, size_t errlen) {
    dim3 grid(3, 2, 2), block(32, 2, 2);
    if (n != 3 * 2 * 2 * 32 * 2 * 2) return bn_cu_fail(err, errlen, "size", "ek_grid3d n", __FILE__, __LINE__);
    DevBuf<uint32_t> dout;
    TRY(cudaMalloc(&dout.p, sizeof(uint32_t) * n));
    BN_LAUNCH(k_grid3d, grid, block, 0, 0, dout.p);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(uint32_t) * n, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_graph(int *live_log, int *baked_log, int *counter_after_capture, int *nodes, int *bad_call,
                        int *bad_end, char *err, size_t errlen) {
    DevBuf<int> counter, live, baked;
    TRY(cudaMalloc(&counter.p, sizeof(int)));
    TRY(cudaMalloc(&live.p, sizeof(int) * 4));
    TRY(cudaMalloc(&baked.p, sizeof(int) * 4));
    TRY(cudaMemset(counter.p, 0, sizeof(int)));
    TRY(cudaMemset(live.p, 0xff, sizeof(int) * 4));
    TRY(cudaMemset(baked.p, 0xff, sizeof(int) * 4));
    cudaStream_t s;
    TRY(cudaStreamCreate(&s));
    // graph 1: the kernel reads its step from device memory
    cudaGraph_t g1, g2, g3;
    cudaGraphExec_t e1, e2;
    TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    BN_LAUNCH(k_live, 1, 32, 0, s, counter.p, live.p);
    TRY_LAUNCH();
    TRY(cudaStreamEndCapture(s, &g1));
    TRY(cudaMemcpy(counter_after_capture, counter.p, sizeof(int), cudaMemcpyDeviceToHost));
    size_t count = 0;
    TRY(cudaGraphGetNodes(g1, nullptr, &count));
    *nodes = (int)count;
    // graph 2: the step is baked into the argument at capture time
    int step = 0;
    TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    BN_LAUNCH(k_baked, 1, 32, 0, s, step, baked.p);
    TRY_LAUNCH();
    TRY(cudaStreamEndCapture(s, &g2));
    TRY(cudaGraphInstantiate(&e1, g1, 0));
    TRY(cudaGraphInstantiate(&e2, g2, 0));
    for (step = 0; step < 3; step++) {
        TRY(cudaGraphLaunch(e1, s));
        TRY(cudaGraphLaunch(e2, s));
    }
    TRY(cudaStreamSynchronize(s));
    TRY(cudaMemcpy(live_log, live.p, sizeof(int) * 4, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(baked_log, baked.p, sizeof(int) * 4, cudaMemcpyDeviceToHost));
    // a synchronous copy during a global-mode capture is illegal and invalidates the capture
    int host = 0;
    TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    *bad_call = (int)cudaMemcpy(&host, counter.p, sizeof(int), cudaMemcpyDeviceToHost);
    *bad_end = (int)cudaStreamEndCapture(s, &g3);
    if (*bad_end == cudaSuccess) cudaGraphDestroy(g3);
    cudaGetLastError(); // clear the expected error
    TRY(cudaGraphExecDestroy(e1));
    TRY(cudaGraphExecDestroy(e2));
    TRY(cudaGraphDestroy(g1));
    TRY(cudaGraphDestroy(g2));
    TRY(cudaStreamDestroy(s));
    return 0;
}

extern "C" int ek_capture_pageable(int *pinned_rc, int *pageable_rc, int *end_rc, char *err, size_t errlen) {
    DevBuf<int> d;
    TRY(cudaMalloc(&d.p, 64 * sizeof(int)));
    int *pinned = nullptr;
    TRY(cudaMallocHost(&pinned, 64 * sizeof(int)));
    int *pageable = (int *)malloc(64 * sizeof(int));
    for (int i = 0; i < 64; i++) pinned[i] = pageable[i] = i;
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaGraph_t g = nullptr;
    if (e == cudaSuccess) e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        *pinned_rc = (int)cudaMemcpyAsync(d.p, pinned, 64 * sizeof(int), cudaMemcpyHostToDevice, s);
        *pageable_rc = (int)cudaMemcpyAsync(d.p, pageable, 64 * sizeof(int), cudaMemcpyHostToDevice, s);
        *end_rc = (int)cudaStreamEndCapture(s, &g);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); // clear the expected error
        cudaStreamDestroy(s);
    }
    free(pageable);
    cudaFreeHost(pinned);
    TRY(e);
    return 0;
}

extern "C" int ek_capture_threads(int rc[4], char *err, size_t errlen) {
    DevBuf<int> counter, log;
    TRY(cudaMalloc(&counter.p, sizeof(int)));
    TRY(cudaMalloc(&log.p, 4 * sizeof(int)));
    TRY(cudaMemset(counter.p, 0, sizeof(int)));
    cudaStream_t s;
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaError_t e = cudaSuccess;
    for (int global = 0; global < 2 && e == cudaSuccess; global++) {
        e = cudaStreamBeginCapture(s, global ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal);
        if (e != cudaSuccess) break;
        BN_LAUNCH(k_live, 1, 32, 0, s, counter.p, log.p);
        int other = -1;
        std::thread t([&] {
            void *p = nullptr;
            other = (int)cudaMalloc(&p, 256);
            if (other == 0) cudaFree(p);
            cudaGetLastError(); // this thread's error, not the capturing one's
        });
        t.join();
        cudaGraph_t g = nullptr;
        rc[2 * global] = other;
        rc[2 * global + 1] = (int)cudaStreamEndCapture(s, &g);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); // clear the expected error
    }
    cudaStreamDestroy(s);
    TRY(e);
    return 0;
}

extern "C" int ek_copy_2d(float *host_rows, float *back, int *bad_pitch_rc, char *err, size_t errlen) {
    enum { ROWS = 5, W = 7, SRC_PITCH = 9, DST_PITCH = 11 }; // floats
    DevBuf<float> src, dst;
    TRY(cudaMalloc(&src.p, sizeof(float) * ROWS * SRC_PITCH));
    TRY(cudaMalloc(&dst.p, sizeof(float) * ROWS * W));
    float init[ROWS * SRC_PITCH];
    for (int i = 0; i < ROWS * SRC_PITCH; i++) init[i] = (float)i;
    TRY(cudaMemcpy(src.p, init, sizeof init, cudaMemcpyHostToDevice));
    cudaStream_t s;
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaError_t e = cudaMemcpy2DAsync(host_rows, sizeof(float) * DST_PITCH, src.p, sizeof(float) * SRC_PITCH,
                                      sizeof(float) * W, ROWS, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaMemcpy2DAsync(dst.p, sizeof(float) * W, src.p, sizeof(float) * SRC_PITCH, sizeof(float) * W, ROWS,
                              cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(back, dst.p, sizeof(float) * ROWS * W, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    *bad_pitch_rc = (int)cudaMemcpy2DAsync(back, sizeof(float) * 2, src.p, sizeof(float) * SRC_PITCH,
                                           sizeof(float) * W, ROWS, cudaMemcpyDeviceToHost, s);
    cudaGetLastError(); // clear the expected error
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    TRY(e);
    return 0;
}

extern "C" int ek_gemm(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C,
                       int ldc, int half_in, int half_out, char *err, size_t errlen) {
    size_t na = (size_t)lda * (ta ? m : k), nbb = (size_t)ldb * (tb ? k : n), nc = (size_t)ldc * n;
    DevBuf<float> dA, dB, dC;
    DevBuf<uint16_t> hA, hB, hC;
    TRY(cudaMalloc(&dA.p, sizeof(float) * na));
    TRY(cudaMalloc(&dB.p, sizeof(float) * nbb));
    TRY(cudaMalloc(&dC.p, sizeof(float) * nc));
    TRY(cudaMemcpy(dA.p, A, sizeof(float) * na, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dB.p, B, sizeof(float) * nbb, cudaMemcpyHostToDevice));
    TRY(cudaMemset(dC.p, 0, sizeof(float) * nc));
    cublasHandle_t h;
    BN_CUBLAS_TRY(cublasCreate(&h), err, errlen);
    float alpha = 1.0f, beta = 0.0f;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    if (!half_in) {
        st = cublasSgemm(h, oa, ob, m, n, k, &alpha, dA.p, lda, dB.p, ldb, &beta, dC.p, ldc);
    } else {
        TRY(cudaMalloc(&hA.p, sizeof(uint16_t) * na));
        TRY(cudaMalloc(&hB.p, sizeof(uint16_t) * nbb));
        TRY(cudaMalloc(&hC.p, sizeof(uint16_t) * nc));
        BN_LAUNCH(k_to_half, (unsigned)((na + 255) / 256), 256, 0, 0, dA.p, hA.p, (int)na);
        BN_LAUNCH(k_to_half, (unsigned)((nbb + 255) / 256), 256, 0, 0, dB.p, hB.p, (int)nbb);
        BN_LAUNCH(k_to_half, (unsigned)((nc + 255) / 256), 256, 0, 0, dC.p, hC.p, (int)nc);
        TRY_LAUNCH();
        if (half_out) {
            st = cublasGemmEx(h, oa, ob, m, n, k, &alpha, hA.p, CUDA_R_16F, lda, hB.p, CUDA_R_16F, ldb, &beta, hC.p,
                              CUDA_R_16F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st == CUBLAS_STATUS_SUCCESS) BN_LAUNCH(k_from_half, (unsigned)((nc + 255) / 256), 256, 0, 0, hC.p, dC.p, (int)nc);
        } else {
            st = cublasGemmEx(h, oa, ob, m, n, k, &alpha, hA.p, CUDA_R_16F, lda, hB.p, CUDA_R_16F, ldb, &beta, dC.p,
                              CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        }
    }
    cublasDestroy(h);
    BN_CUBLAS_TRY(st, err, errlen);
    TRY(cudaMemcpy(C, dC.p, sizeof(float) * nc, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_shift(const float *x, float *out, int barrier, char *err, size_t errlen) {
    DevBuf<float> dx, dout;
    TRY(cudaMalloc(&dx.p, sizeof(float) * 256));
    TRY(cudaMalloc(&dout.p, sizeof(float) * 256));
    TRY(cudaMemcpy(dx.p, x, sizeof(float) * 256, cudaMemcpyHostToDevice));
    BN_LAUNCH(k_shift, 1, 256, 0, 0, dx.p, dout.p, barrier);
    TRY_LAUNCH();
    TRY(cudaMemcpy(out, dout.p, sizeof(float) * 256, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int ek_bad(int which, char *err, size_t errlen) {
#ifndef BONSAI_CUDA_EMU
    (void)which;
    return bn_cu_fail(err, errlen, "broken kernels run only in the emulator", "ek_bad", __FILE__, __LINE__);
#else
    DevBuf<float> dout;
    TRY(cudaMalloc(&dout.p, sizeof(float) * 4096));
    switch (which) {
    case 1: BN_LAUNCH(k_deadlock, 2, 64, 0, 0, dout.p); break;
    case 2: BN_LAUNCH(k_half_warp_shuffle, 1, 64, 0, 0, dout.p); break;
    case 3: BN_LAUNCH(k_big_static, 1, 64, 0, 0, dout.p); break;
    case 4: BN_LAUNCH(k_dyn_only, 1, 64, 100 * 1024, 0, dout.p); break;
    case 6: BN_LAUNCH(k_null_write, 1, 32, 0, 0, (float *)nullptr); break;
    case 7: BN_LAUNCH(k_deep_stack, 1, 32, 0, 0, dout.p); break;
    case 8: return (int)*(volatile float *)dout.p; // host code reading device memory
    case 10: BN_LAUNCH(k_dyn_past_end, 1, 64, 32 * sizeof(float), 0, 32, dout.p); break;
    case 11: BN_LAUNCH(k_dyn_past_end, 1, 32, 0, 0, 0, dout.p); break;
    case 12: BN_LAUNCH(k_static_past_end, 1, 96, 0, 0, dout.p); break;
    case 13: // the shift without its barrier, under the race check
        TRY(cudaMemset(dout.p, 0, sizeof(float) * 256));
        bn_cuda_emu_set_racecheck(1);
        BN_LAUNCH(k_shift, 1, 256, 0, 0, dout.p, dout.p + 256, 0);
        break;
    case 14: BN_LAUNCH(k_shfl_exited, 1, 32, 0, 0, dout.p); break;
    case 15: BN_LAUNCH(k_shfl_partial_warp, 1, 48, 0, 0, dout.p); break;
    case 16: BN_LAUNCH(k_shfl_diverged, 1, 32, 0, 0, dout.p); break;
    case 17: BN_LAUNCH(k_sync_diverged, 1, 64, 0, 0, dout.p); break;
    case 18: BN_LAUNCH(k_misaligned, 1, 32, 0, 0, dout.p, dout.p + 1024); break;
    case 19: BN_LAUNCH(k_null_write, dim3(1, 65536), 32, 0, 0, dout.p); break; // grid y > 65535
    case 20: BN_LAUNCH(k_null_write, 1, dim3(1, 1, 65), 0, 0, dout.p); break;  // block z > 64
    case 21: BN_LAUNCH(k_mma_diverged, 1, 32, 0, 0, dout.p); break;
    case 22: BN_LAUNCH(k_no_grid_begin, 1, 32, 0, 0, dout.p); break;
    case 23: BN_LAUNCH(k_sync_before_grid_begin, 1, 32, 0, 0, dout.p); break;
    case 9: {
        DevBuf<float> small;
        TRY(cudaMalloc(&small.p, 4096));
        BN_LAUNCH(k_past_end, 1, 32, 0, 0, small.p, 1024);
        break;
    }
    default: BN_LAUNCH(k_dyn_only, 1, 2048, 0, 0, dout.p); break;
    }
    TRY_LAUNCH();
    TRY(cudaDeviceSynchronize());
    return 0;
#endif
}

extern "C" int ek_switch_bench(int threads, int rounds, int mode, char *err, size_t errlen) {
    DevBuf<int> dout;
    TRY(cudaMalloc(&dout.p, sizeof(int)));
    if (mode == 2) BN_LAUNCH(k_no_barrier, rounds, threads, 0, 0, dout.p);
    else if (mode == 1) BN_LAUNCH(k_shuffle_rounds, 1, threads, 0, 0, rounds, dout.p);
    else BN_LAUNCH(k_barrier_rounds, 1, threads, 0, 0, rounds, dout.p);
    TRY_LAUNCH();
    TRY(cudaDeviceSynchronize());
    return 0;
}
