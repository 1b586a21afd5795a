// cuda/matvec.cu — low-bit weight × Q8_1 activation matrix-vector kernels (dp4a) and the
// activation quantizer. Block layouts: FORMATS.md §3.4 (same bytes as on the CPU). Written to the
// cuda/common.cuh contract: built by nvcc and, for the CPU emulator, by g++.
#include "cuda/common.cuh"
#include "cuda/cuda_backend.h"
#include <stdio.h>
#include <stdint.h>

// bn_type ids (quant/quant.h; repeated here because that header is C-only)
enum { T_Q8_0 = 8, T_Q1_0 = 41, T_Q2_0 = 42, T_PQ2_0 = 142 };

// fp16 fields are raw bits (bn_half_bits to read them)
struct __align__(4) block_q8_1 { uint16_t d, s; int8_t qs[32]; }; // d, s = Σx; 36 B (qs 4-aligned)
struct block_q8_0 { uint16_t d; int8_t qs[32]; };         // 34 B
struct block_q1_0 { uint16_t d; uint8_t qs[16]; };        // 128 elements, 18 B
struct block_q2_0_g64 { uint16_t d; uint8_t qs[16]; };    // 64 elements, 18 B
struct block_q2_0_g128 { uint16_t d; uint8_t qs[32]; };   // 128 elements, 34 B
static_assert(sizeof(block_q8_1) == 36, "q8_1 size");
static_assert(sizeof(block_q1_0) == 18, "q1_0 size");
static_assert(sizeof(block_q2_0_g128) == 34, "q2_0 g128 size");

// nibble of 4 sign bits (LSB first) → 4 packed int8 values ±1
__constant__ int c_sign4[16];
// byte of 4 two-bit codes (shift 0,2,4,6) → 4 packed int8 values code − 1
__constant__ int c_trit4[256];

static void init_tables(void) {
    static bool done = false;
    if (done) return;
    int s4[16], t4[256];
    for (int n = 0; n < 16; n++) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++) v |= (uint32_t)(uint8_t)(int8_t)(((n >> j) & 1) ? 1 : -1) << (8 * j);
        s4[n] = (int)v;
    }
    for (int b = 0; b < 256; b++) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++) v |= (uint32_t)(uint8_t)(int8_t)(((b >> (2 * j)) & 3) - 1) << (8 * j);
        t4[b] = (int)v;
    }
    cudaMemcpyToSymbol(c_sign4, s4, sizeof s4);
    cudaMemcpyToSymbol(c_trit4, t4, sizeof t4);
    done = true;
}

// quantize_q8_1: one warp per 32-element block; CUDA semantics (division by d, s = Σx).
__global__ void quantize_q8_1(const float *x, block_q8_1 *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t ib = i / 32;
    int lane = threadIdx.x % 32;
    float v = i < n ? x[i] : 0.0f;
    float amax = fabsf(v), sum = v;
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
        sum += __shfl_xor_sync(0xffffffff, sum, o);
    }
    float d = amax / 127.0f;
    int8_t q = amax == 0.0f ? 0 : (int8_t)roundf(v / d);
    if (ib * 32 < n) {
        y[ib].qs[lane] = q;
        if (lane == 0) {
            y[ib].d = bn_half_raw(bn_f2h(d));
            y[ib].s = bn_half_raw(bn_f2h(sum));
        }
    }
}

// load4: 4 bytes of int8 activations as one int (qs is 4-byte aligned within block_q8_1).
__device__ __forceinline__ int load4(const int8_t *p) { return *(const int *)p; }

// dot of one 32-element Q8_1 block kb against the matching part of a weight row; returns the
// integer sum and the weight scale.
template <int T>
__device__ __forceinline__ float dot_block(const void *row, const block_q8_1 *xb, int kb) {
    int acc = 0;
    float dw;
    if (T == T_Q1_0) {
        const block_q1_0 *b = (const block_q1_0 *)row + kb / 4;
        const uint8_t *bits = b->qs + (kb % 4) * 4;
        dw = bn_h2f(bn_half_bits(b->d));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            acc = __dp4a(c_sign4[bits[j] & 15], load4(xb->qs + 8 * j), acc);
            acc = __dp4a(c_sign4[bits[j] >> 4], load4(xb->qs + 8 * j + 4), acc);
        }
    } else if (T == T_Q2_0) {
        const block_q2_0_g64 *b = (const block_q2_0_g64 *)row + kb / 2;
        const uint8_t *codes = b->qs + (kb % 2) * 8;
        dw = bn_h2f(bn_half_bits(b->d));
#pragma unroll
        for (int j = 0; j < 8; j++) acc = __dp4a(c_trit4[codes[j]], load4(xb->qs + 4 * j), acc);
    } else if (T == T_PQ2_0) {
        const block_q2_0_g128 *b = (const block_q2_0_g128 *)row + kb / 4;
        const uint8_t *codes = b->qs + (kb % 4) * 8;
        dw = bn_h2f(bn_half_bits(b->d));
#pragma unroll
        for (int j = 0; j < 8; j++) acc = __dp4a(c_trit4[codes[j]], load4(xb->qs + 4 * j), acc);
    } else { // Q8_0
        const block_q8_0 *b = (const block_q8_0 *)row + kb;
        dw = bn_h2f(bn_half_bits(b->d));
        const int8_t *q = b->qs;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int w4 = (int)((uint32_t)(uint8_t)q[4 * j] | (uint32_t)(uint8_t)q[4 * j + 1] << 8 |
                           (uint32_t)(uint8_t)q[4 * j + 2] << 16 | (uint32_t)(uint8_t)q[4 * j + 3] << 24);
            acc = __dp4a(w4, load4(xb->qs + 4 * j), acc);
        }
    }
    return dw * bn_h2f(bn_half_bits(xb->d)) * (float)acc;
}

// matvec: one warp per output row; lanes stride over the row's 32-element activation blocks.
template <int T>
__global__ void matvec(const uint8_t *w, size_t row_bytes, const block_q8_1 *x, float *y, int nblk32, int nrows) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= nrows) return;
    const void *r = w + (size_t)row * row_bytes;
    float sum = 0.0f;
    for (int kb = lane; kb < nblk32; kb += 32) sum += dot_block<T>(r, x + kb, kb);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
    if (lane == 0) y[row] = sum;
}

static size_t row_bytes_of(int type, int64_t ncols) {
    switch (type) {
    case T_Q1_0: return (size_t)(ncols / 128) * 18;
    case T_Q2_0: return (size_t)(ncols / 64) * 18;
    case T_PQ2_0: return (size_t)(ncols / 128) * 34;
    case T_Q8_0: return (size_t)(ncols / 32) * 34;
    default: return 0;
    }
}

static int fail(char *err, size_t errlen, const char *what, cudaError_t e) {
    if (err && errlen) snprintf(err, errlen, "cuda: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

static void launch(int type, const uint8_t *w, size_t rb, const block_q8_1 *x, float *y, int nblk, int nrows) {
    const int warps = 4;
    dim3 grid((nrows + warps - 1) / warps), block(32 * warps);
    switch (type) {
    case T_Q1_0: BN_LAUNCH(matvec<T_Q1_0>, grid, block, 0, 0, w, rb, x, y, nblk, nrows); break;
    case T_Q2_0: BN_LAUNCH(matvec<T_Q2_0>, grid, block, 0, 0, w, rb, x, y, nblk, nrows); break;
    case T_PQ2_0: BN_LAUNCH(matvec<T_PQ2_0>, grid, block, 0, 0, w, rb, x, y, nblk, nrows); break;
    default: BN_LAUNCH(matvec<T_Q8_0>, grid, block, 0, 0, w, rb, x, y, nblk, nrows); break;
    }
}

extern "C" int bn_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" const char *bn_cuda_device_name(char *buf, size_t n) {
    cudaDeviceProp p;
    if (n) buf[0] = 0;
    if (bn_cuda_device_count() > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess) snprintf(buf, n, "%s", p.name);
    return buf;
}

// run: shared body of matvec and bench; iters = 0 means one run with the result copied back.
static double run(int type, const void *w, int64_t ncols, int64_t nrows, const float *x, float *y, int iters,
                  char *err, size_t errlen) {
    size_t rb = row_bytes_of(type, ncols);
    int blck = type == T_Q8_0 ? 32 : type == T_Q2_0 ? 64 : 128;
    if (rb == 0 || ncols % blck != 0) {
        if (err && errlen) snprintf(err, errlen, "cuda: unsupported type %d or ncols %lld", type, (long long)ncols);
        return -1;
    }
    if (bn_cuda_device_count() == 0) {
        if (err && errlen) snprintf(err, errlen, "cuda: no CUDA device");
        return -1;
    }
    init_tables();
    int nblk = (int)(ncols / 32);
    uint8_t *dw = nullptr;
    float *dx = nullptr, *dy = nullptr;
    block_q8_1 *dq = nullptr;
    cudaError_t e;
    double result = 0;
    if ((e = cudaMalloc(&dw, rb * nrows)) != cudaSuccess || (e = cudaMalloc(&dx, ncols * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc(&dy, nrows * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc(&dq, nblk * sizeof(block_q8_1))) != cudaSuccess) {
        result = fail(err, errlen, "cudaMalloc", e);
        goto out;
    }
    cudaMemcpy(dw, w, rb * nrows, cudaMemcpyHostToDevice);
    if (x) cudaMemcpy(dx, x, ncols * sizeof(float), cudaMemcpyHostToDevice);
    else cudaMemset(dx, 0, ncols * sizeof(float));
    BN_LAUNCH(quantize_q8_1, (unsigned)((ncols + 255) / 256), 256, 0, 0, dx, dq, ncols);
    if (iters == 0) {
        launch(type, dw, rb, dq, dy, nblk, (int)nrows);
        if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
            result = fail(err, errlen, "matvec", e);
            goto out;
        }
        cudaMemcpy(y, dy, nrows * sizeof(float), cudaMemcpyDeviceToHost);
    } else {
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        launch(type, dw, rb, dq, dy, nblk, (int)nrows); // warm-up
        cudaEventRecord(a);
        for (int i = 0; i < iters; i++) launch(type, dw, rb, dq, dy, nblk, (int)nrows);
        cudaEventRecord(b);
        if ((e = cudaEventSynchronize(b)) != cudaSuccess) {
            result = fail(err, errlen, "matvec bench", e);
            goto out;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        result = 1e3 * ms / iters;
        cudaEventDestroy(a);
        cudaEventDestroy(b);
    }
out:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dq);
    return result;
}

extern "C" int bn_cuda_matvec(int type, const void *w, int64_t ncols, int64_t nrows, const float *x, float *y,
                              char *err, size_t errlen) {
    return run(type, w, ncols, nrows, x, y, 0, err, errlen) < 0 ? -1 : 0;
}

extern "C" double bn_cuda_matvec_bench(int type, const void *w, int64_t ncols, int64_t nrows, int iters, char *err,
                                       size_t errlen) {
    return run(type, w, ncols, nrows, nullptr, nullptr, iters > 0 ? iters : 1, err, errlen);
}

extern "C" double bn_cuda_copy_bandwidth(size_t bytes, char *err, size_t errlen) {
    if (bn_cuda_device_count() == 0) {
        if (err && errlen) snprintf(err, errlen, "cuda: no CUDA device");
        return -1;
    }
    void *a = nullptr, *b = nullptr;
    cudaError_t e;
    if ((e = cudaMalloc(&a, bytes)) != cudaSuccess || (e = cudaMalloc(&b, bytes)) != cudaSuccess) {
        cudaFree(a);
        return fail(err, errlen, "cudaMalloc", e);
    }
    cudaMemset(a, 1, bytes);
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    const int iters = 10;
    cudaEventRecord(t0);
    for (int i = 0; i < iters; i++) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * bytes * iters / (ms * 1e-3) / 1e9;
}
