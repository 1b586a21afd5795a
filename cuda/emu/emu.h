// cuda/emu/emu.h — the CUDA-on-CPU emulator's device and runtime surface (C++17, BONSAI_CUDA_EMU=1).
// Included only through cuda/common.cuh. Kernels are plain functions; every CUDA thread of a block
// runs as a fiber that switches only at __syncthreads / warp shuffles / __syncwarp (cuda/emu/README.md).
// The runtime and cuBLAS subsets live in cuda/emu/emu_runtime.h and cuda/emu/emu_cublas.h.
#ifndef BONSAI_CUDA_EMU_H
#define BONSAI_CUDA_EMU_H
#ifndef BONSAI_CUDA_EMU
#error "cuda/emu/emu.h is for the emulator build (BONSAI_CUDA_EMU=1); include cuda/common.cuh"
#endif
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <stdio.h>
#include <tuple>
#include <functional>
#include <utility>
#include <type_traits>

// ---- qualifiers (no meaning on the CPU) -----------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
// (no __noinline__: newer libstdc++ headers write __attribute__((__noinline__)), which such a macro breaks;
// nothing here uses it — seen with the GPU machine's g++)
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

// ---- vector types -----------------------------------------------------------------------------------
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(4) char4 { signed char x, y, z, w; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
static inline int2 make_int2(int x, int y) { return {x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { return {x, y, z, w}; }
static inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) {
    return {x, y, z, w};
}

#include "cuda/emu/emu_runtime.h"

// ---- the executing CUDA thread ----------------------------------------------------------------------
namespace bn_emu {
// Thread: what kernel code sees of the running CUDA thread (the fiber's public part).
struct Thread {
    uint3 tid;     // threadIdx
    unsigned lane; // linear thread index % 32
    unsigned warp; // linear thread index / 32
    unsigned lin;  // linear thread index in the block
};
extern Thread *cur;       // the running CUDA thread (set by the scheduler on every switch)
extern uint3 block_idx;   // blockIdx of the running block
extern dim3 block_dim, grid_dim;
extern bool mma_fault;    // BONSAI_EMU_MMA_FAULT / bn_cuda_emu_set_mma_fault: a wrong MMA fragment layout

// SharedKey: one per BN_SHARED declaration site; remembers the block generation it was placed in.
struct SharedKey {
    uint64_t gen;
    size_t off, bytes;
    const char *name;
};
// shared_static: the block's copy of a static shared array (same address for every thread of a block).
void *shared_static(SharedKey *key, size_t bytes, size_t align);
// shared_dynamic: the dynamic shared region of the running launch (smem_bytes of BN_LAUNCH).
void *shared_dynamic();
// syncthreads: block barrier at source position site; aborts on deadlock (threads exited or waiting
// elsewhere) and when threads of one barrier arrive from different sites (divergent __syncthreads).
void syncthreads(const char *site);
// syncthreads_count: block barrier; returns how many threads passed a nonzero pred.
int syncthreads_count(int pred, const char *site);
// warp_exchange: warp barrier publishing v; returns the 32 published values of this exchange. Aborts
// when the mask names a lane that has exited or does not exist, or when lanes arrive from different
// warp operations or sites (divergence; __syncwarp may be called from different sites).
const uint64_t *warp_exchange(unsigned mask, uint64_t v, const char *what, const char *site);
// misaligned: aborts naming the running thread: a vector load at p not aligned to `align` bytes (the GPU
// raises cudaErrorMisalignedAddress).
[[noreturn]] void misaligned(const char *what, const void *p, size_t align);
// grid_begin: bn_cu_grid_begin (programmatic dependent launch's wait) at source position site: the thread may now
// touch global memory. A thread that ends without it aborts the run (on a GPU with BONSAI_CUDA_PDL=1 it could run
// while the kernel before it still writes).
void grid_begin(const char *site);
// launch: runs (or, on a capturing stream, records) body for every thread of grid x block.
void launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            std::function<void()> body);
} // namespace bn_emu

#define threadIdx (bn_emu::cur->tid)
#define blockIdx (bn_emu::block_idx)
#define blockDim (bn_emu::block_dim)
#define gridDim (bn_emu::grid_dim)
constexpr int warpSize = 32;

// BN_LAUNCH (emu): arguments are converted to the kernel's parameter types and copied now (so a
// captured graph replays the values of capture time, as on a GPU).
// bn_emu_arg: v as the kernel parameter type T, by implicit conversion only (as a GPU launch converts)
template <class T> inline T bn_emu_arg(T v) { return v; }
template <class... P, class... A>
inline void bn_emu_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "BN_LAUNCH: wrong number of kernel arguments");
    std::tuple<std::decay_t<P>...> argv(bn_emu_arg<std::decay_t<P>>(std::forward<A>(args))...);
    bn_emu::launch(name, (const void *)k, grid, block, smem, stream, [k, argv]() { std::apply(k, argv); });
}

// ---- barriers, shuffles, votes ----------------------------------------------------------------------
// Each is a macro passing its source position (BN_EMU_SITE) so that divergent barriers are reported.
#define BN_EMU_STR2(x) #x
#define BN_EMU_STR(x) BN_EMU_STR2(x)
#define BN_EMU_SITE __FILE__ ":" BN_EMU_STR(__LINE__)
#define __syncthreads() bn_emu::syncthreads(BN_EMU_SITE)
#define __syncthreads_count(pred) bn_emu::syncthreads_count((pred), BN_EMU_SITE)
#define __syncthreads_and(pred) bn_emu_syncthreads_and((pred), BN_EMU_SITE)
#define __syncthreads_or(pred) (bn_emu::syncthreads_count((pred), BN_EMU_SITE) != 0)
#define __syncwarp(...) bn_emu_syncwarp(BN_EMU_SITE, ##__VA_ARGS__)
#define __shfl_sync(...) bn_emu_shfl_sync(BN_EMU_SITE, __VA_ARGS__)
#define __shfl_xor_sync(...) bn_emu_shfl_xor_sync(BN_EMU_SITE, __VA_ARGS__)
#define __shfl_down_sync(...) bn_emu_shfl_down_sync(BN_EMU_SITE, __VA_ARGS__)
#define __shfl_up_sync(...) bn_emu_shfl_up_sync(BN_EMU_SITE, __VA_ARGS__)
#define __ballot_sync(mask, pred) bn_emu_ballot_sync(BN_EMU_SITE, (mask), (pred))
#define __any_sync(mask, pred) (bn_emu_ballot_sync(BN_EMU_SITE, (mask), (pred)) != 0)
#define __all_sync(mask, pred) bn_emu_all_sync(BN_EMU_SITE, (mask), (pred))
#define __reduce_add_sync(mask, v) bn_emu_reduce_add_sync(BN_EMU_SITE, (mask), (v))
#define __reduce_max_sync(mask, v) bn_emu_reduce_max_sync(BN_EMU_SITE, (mask), (v))
#define bn_warp_reduce_sum(v) bn_emu_warp_reduce_sum(BN_EMU_SITE, (v))
#define bn_warp_reduce_max(v) bn_emu_warp_reduce_max(BN_EMU_SITE, (v))
static inline int bn_emu_syncthreads_and(int pred, const char *site) {
    return bn_emu::syncthreads_count(pred, site) == (int)(blockDim.x * blockDim.y * blockDim.z);
}
static inline void bn_emu_syncwarp(const char *site, unsigned mask = 0xffffffffu) {
    bn_emu::warp_exchange(mask, 0, "__syncwarp", site);
}
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline unsigned __activemask() { return 0xffffffffu; }

template <class T> inline uint64_t bn_emu_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type > 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> inline T bn_emu_from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T> inline T bn_emu_shfl_sync(const char *site, unsigned mask, T var, int src_lane, int width = 32) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, bn_emu_bits(var), "__shfl_sync", site);
    int lane = (int)bn_emu::cur->lane;
    int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
    return bn_emu_from_bits<T>(slot[src]);
}
template <class T> inline T bn_emu_shfl_xor_sync(const char *site, unsigned mask, T var, int lane_mask, int width = 32) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, bn_emu_bits(var), "__shfl_xor_sync", site);
    int lane = (int)bn_emu::cur->lane;
    int src = lane ^ lane_mask;
    if (src >= (lane & ~(width - 1)) + width) src = lane; // later groups are not visible
    return bn_emu_from_bits<T>(slot[src]);
}
template <class T> inline T bn_emu_shfl_down_sync(const char *site, unsigned mask, T var, unsigned delta, int width = 32) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, bn_emu_bits(var), "__shfl_down_sync", site);
    int lane = (int)bn_emu::cur->lane;
    int src = (lane & (width - 1)) + (int)delta >= width ? lane : lane + (int)delta;
    return bn_emu_from_bits<T>(slot[src]);
}
template <class T> inline T bn_emu_shfl_up_sync(const char *site, unsigned mask, T var, unsigned delta, int width = 32) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, bn_emu_bits(var), "__shfl_up_sync", site);
    int lane = (int)bn_emu::cur->lane;
    int src = (lane & (width - 1)) - (int)delta < 0 ? lane : lane - (int)delta;
    return bn_emu_from_bits<T>(slot[src]);
}
static inline unsigned bn_emu_ballot_sync(const char *site, unsigned mask, int pred) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, pred != 0, "__ballot_sync", site);
    unsigned bits = 0;
    for (int l = 0; l < 32; l++) bits |= (unsigned)(slot[l] != 0) << l;
    return bits & mask; // a partial last warp's mask names only its lanes
}
static inline int bn_emu_all_sync(const char *site, unsigned mask, int pred) {
    return bn_emu_ballot_sync(site, mask, pred) == mask;
}
static inline unsigned bn_emu_reduce_add_sync(const char *site, unsigned mask, unsigned v) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, v, "__reduce_add_sync", site);
    unsigned s = 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) s += (unsigned)slot[l];
    return s;
}
static inline int bn_emu_reduce_add_sync(const char *site, unsigned mask, int v) {
    return (int)bn_emu_reduce_add_sync(site, mask, (unsigned)v);
}
static inline int bn_emu_reduce_max_sync(const char *site, unsigned mask, int v) {
    const uint64_t *slot = bn_emu::warp_exchange(mask, (uint32_t)v, "__reduce_max_sync", site);
    int m = (int)(uint32_t)slot[0]; // lane 0 is in every accepted mask
    for (int l = 1; l < 32; l++)
        if (mask >> l & 1) m = (int)(uint32_t)slot[l] > m ? (int)(uint32_t)slot[l] : m;
    return m;
}

namespace bn_emu {
// butterfly: what lane `lane` holds after `v = op(v, __shfl_xor_sync(~0u, v, o))` for o = 16, 8, 4, 2, 1,
// computed from the 32 published values (31 ops: the lanes this lane's result depends on).
template <class T, class Op> inline T butterfly(const uint64_t *slot, unsigned lane, Op op) {
    T s[32];
    for (unsigned j = 0; j < 16; j++) {
        unsigned x = lane ^ j;
        s[x] = op(bn_emu_from_bits<T>(slot[x]), bn_emu_from_bits<T>(slot[x ^ 16]));
    }
    for (unsigned o = 8; o > 0; o >>= 1)
        for (unsigned j = 0; j < o; j++) s[lane ^ j] = op(s[lane ^ j], s[lane ^ j ^ o]);
    return s[lane];
}
} // namespace bn_emu
// bn_warp_reduce_{sum,max} (see cuda/common.cuh): one warp exchange instead of five in the emulator.
static inline float bn_emu_warp_reduce_sum(const char *site, float v) {
    const uint64_t *slot = bn_emu::warp_exchange(0xffffffffu, bn_emu_bits(v), "bn_warp_reduce_sum", site);
    return bn_emu::butterfly<float>(slot, bn_emu::cur->lane, [](float a, float b) { return a + b; });
}
static inline int bn_emu_warp_reduce_sum(const char *site, int v) {
    const uint64_t *slot = bn_emu::warp_exchange(0xffffffffu, bn_emu_bits(v), "bn_warp_reduce_sum", site);
    return bn_emu::butterfly<int>(slot, bn_emu::cur->lane, [](int a, int b) { return (int)((unsigned)a + (unsigned)b); });
}
static inline float bn_emu_warp_reduce_max(const char *site, float v) {
    const uint64_t *slot = bn_emu::warp_exchange(0xffffffffu, bn_emu_bits(v), "bn_warp_reduce_max", site);
    return bn_emu::butterfly<float>(slot, bn_emu::cur->lane, [](float a, float b) { return fmaxf(a, b); });
}

// ---- int8 tensor-core MMA (cuda/mma.cuh) ---------------------------------------------------------------
// bn_mma_s8_16x8x32(d, a, b, c): the warp-collective mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32. Every lane
// publishes a copy of its fragments (first exchange), builds the warp's A (16×32) and B (32×8) from all 32 copies
// with cuda/mma.cuh's layout formulas and computes its 4 D values in 32-bit wrap-around; the second exchange keeps
// the copies alive until every lane has read them (d may alias c). With bn_emu::mma_fault the A fragment's
// registers 1 and 2 trade places (a1 taken as k + 16 of row g, a2 as row g + 8): a plausible layout mistake, for
// tests of what a wrong layout on a GPU would do (cuda/mma_check.cu must catch it).
#include "cuda/mma.cuh"
#define bn_mma_s8_16x8x32(d, a, b, c) bn_emu_mma_s8_16x8x32(BN_EMU_SITE, (d), (a), (b), (c))
// bn_emu_mma_gather: the warp's A (16×K) and B (K×8) from the 32 lanes' published fragments (slot: each lane's
// Frags *, with a[4] and b[2] registers of E elements each): element j of register r goes where cuda/mma.cuh's
// layout puts it (rows bn_mma_a_row, a_k / b_k, columns bn_mma_b_col), decoded by elem(register, j). With
// bn_emu::mma_fault A's registers 1 and 2 trade places.
template <class Frags, int E, class T, int K, class AK, class BK, class Elem>
static inline void bn_emu_mma_gather(const uint64_t *slot, T (&A)[16][K], T (&B)[K][8], AK a_k, BK b_k, Elem elem) {
    for (int l = 0; l < 32; l++) {
        const Frags *f = (const Frags *)(uintptr_t)slot[l];
        for (int j = 0; j < E; j++) {
            for (int r = 0; r < 4; r++) {
                const int rr = bn_emu::mma_fault && (r == 1 || r == 2) ? 3 - r : r;
                A[bn_mma_a_row(l, rr)][a_k(l, rr, j)] = elem(f->a[r], j);
            }
            for (int r = 0; r < 2; r++) B[b_k(l, r, j)][bn_mma_b_col(l)] = elem(f->b[r], j);
        }
    }
}
struct bn_emu_mma_frags {
    int a[4], b[2], c[4];
};
static inline void bn_emu_mma_s8_16x8x32(const char *site, int (&d)[4], const int (&a)[4], const int (&b)[2],
                                         const int (&c)[4]) {
    bn_emu_mma_frags mine;
    memcpy(mine.a, a, sizeof mine.a), memcpy(mine.b, b, sizeof mine.b), memcpy(mine.c, c, sizeof mine.c);
    const uint64_t *slot = bn_emu::warp_exchange(0xffffffffu, (uint64_t)(uintptr_t)&mine, "mma.sync m16n8k32", site);
    int8_t A[16][32], B[32][8];
    bn_emu_mma_gather<bn_emu_mma_frags, 4>(slot, A, B, bn_mma_a_k, bn_mma_b_k,
                                           [](int w, int j) { return (int8_t)(w >> (8 * j)); });
    const int lane = (int)bn_emu::cur->lane;
    int out[4];
    for (int r = 0; r < 4; r++) {
        const int row = bn_mma_c_row(lane, r), col = bn_mma_c_col(lane, r);
        uint32_t acc = (uint32_t)mine.c[r]; // 32-bit wrap-around
        for (int k = 0; k < 32; k++) acc += (uint32_t)((int)A[row][k] * (int)B[k][col]);
        out[r] = (int)acc;
    }
    bn_emu::warp_exchange(0xffffffffu, 0, "mma.sync m16n8k32 (end)", site);
    memcpy(d, out, sizeof out);
}

// ---- shared memory ----------------------------------------------------------------------------------
#define BN_SHARED(T, name, N)                                                                          \
    static bn_emu::SharedKey bn_shkey_##name = {0, 0, 0, #name};                                       \
    T *const name = (T *)bn_emu::shared_static(&bn_shkey_##name, sizeof(T) * (size_t)(N), alignof(T))
#define BN_DYN_SHARED(T, name) T *const name = (T *)bn_emu::shared_dynamic()

// ---- atomics (one host thread runs all CUDA threads: plain read-modify-write) -----------------------
template <class T> struct bn_emu_same { using type = T; }; // keeps the value argument out of deduction
template <class T> inline T atomicAdd(T *p, typename bn_emu_same<T>::type v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicSub(T *p, typename bn_emu_same<T>::type v) { T old = *p; *p = old - v; return old; }
template <class T> inline T atomicMax(T *p, typename bn_emu_same<T>::type v) {
    T old = *p;
    *p = old > v ? old : v;
    return old;
}
template <class T> inline T atomicMin(T *p, typename bn_emu_same<T>::type v) {
    T old = *p;
    *p = old < v ? old : v;
    return old;
}
template <class T> inline T atomicExch(T *p, typename bn_emu_same<T>::type v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicOr(T *p, typename bn_emu_same<T>::type v) { T old = *p; *p = old | v; return old; }
template <class T> inline T atomicAnd(T *p, typename bn_emu_same<T>::type v) { T old = *p; *p = old & v; return old; }
template <class T>
inline T atomicCAS(T *p, typename bn_emu_same<T>::type cmp, typename bn_emu_same<T>::type v) {
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}

// ---- integer intrinsics ------------------------------------------------------------------------------
static inline int __dp4a(int a, int b, int c) { // wraps modulo 2^32 as the hardware does (no signed-overflow UB)
    unsigned r = (unsigned)c;
    for (int i = 0; i < 4; i++) r += (unsigned)((int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i)));
    return (int)r;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) c += ((a >> (8 * i)) & 255u) * ((b >> (8 * i)) & 255u);
    return c;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 255u) << (8 * i);
    return r;
}
// __ldg: the load; a vector type (int4, float2, ...) must sit at its alignment, as on the GPU.
template <class T> inline T __ldg(const T *p) {
    if (alignof(T) > 1 && (uintptr_t)p % alignof(T) != 0) bn_emu::misaligned("__ldg", p, alignof(T));
    return *p;
}

// ---- float intrinsics ----------------------------------------------------------------------------
#ifndef __GLIBC__ // glibc's math.h already declares these (same functions as expf, ...)
static inline float __expf(float x) { return expf(x); }
static inline float __logf(float x) { return logf(x); }
static inline float __sinf(float x) { return sinf(x); }
static inline float __cosf(float x) { return cosf(x); }
static inline float __powf(float x, float y) { return powf(x, y); }
#endif
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int __float2int_rn(float x) { return (int)rintf(x); }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
static inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
static inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
static inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

// ---- half precision: 16-bit storage, IEEE binary16 conversions identical to CUDA's ------------------
struct bn_half { uint16_t x; };
// bn_h2f: the exact float of a half (NaN -> 0x7fffffff, as cuda_fp16's __half2float).
static inline float bn_h2f(bn_half h) {
    uint32_t sign = (uint32_t)(h.x & 0x8000u) << 16, exp = (h.x >> 10) & 0x1fu, mant = h.x & 0x3ffu, bits;
    if (exp == 0x1f) bits = mant ? 0x7fffffffu : sign | 0x7f800000u;
    else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (mant << 13);
    else if (mant == 0) bits = sign;
    else {
        int e = 113; // normalise the subnormal
        while (!(mant & 0x400u)) { mant <<= 1; e--; }
        bits = sign | ((uint32_t)e << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
// bn_f2h: the half nearest to f, ties to even (|f| >= 65520 -> inf, NaN -> 0x7fff, as __float2half_rn).
static inline bn_half bn_f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t u = x & 0x7fffffffu, sign = (x >> 16) & 0x8000u, r, rem;
    if (u >= 0x7f800000u) return bn_half{(uint16_t)(u == 0x7f800000u ? sign | 0x7c00u : 0x7fffu)};
    if (u > 0x477fefffu) return bn_half{(uint16_t)(sign | 0x7c00u)};
    if (u >= 0x38800000u) {
        rem = u << 19;
        r = sign | ((u - 0x38000000u) >> 13);
    } else if (u < 0x33000001u) {
        rem = u;
        r = sign;
    } else {
        uint32_t e = u >> 23, shift = 0x7eu - e, mant = (u & 0x7fffffu) | 0x800000u;
        rem = mant << (32 - shift);
        r = sign | (mant >> shift);
    }
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u))) r++;
    return bn_half{(uint16_t)r};
}
static inline bn_half bn_half_bits(uint16_t u) { return bn_half{u}; }
static inline uint16_t bn_half_raw(bn_half h) { return h.x; }

// bn_mma_f16_16x8x16(d, a, b, c): the warp-collective mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, emulated
// like the int8 one above (two exchanges; cuda/mma.cuh's fp16 layout; with bn_emu::mma_fault A's registers 1 and 2
// trade places). The products of halves are exact; the sum is taken in double and rounded once (the GPU's adder
// tree rounds differently, within fp32's last bits).
#define bn_mma_f16_16x8x16(d, a, b, c) bn_emu_mma_f16_16x8x16(BN_EMU_SITE, (d), (a), (b), (c))
struct bn_emu_mma16_frags {
    uint32_t a[4], b[2];
    float c[4];
};
static inline void bn_emu_mma_f16_16x8x16(const char *site, float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2], const float (&c)[4]) {
    bn_emu_mma16_frags mine;
    memcpy(mine.a, a, sizeof mine.a), memcpy(mine.b, b, sizeof mine.b), memcpy(mine.c, c, sizeof mine.c);
    const uint64_t *slot = bn_emu::warp_exchange(0xffffffffu, (uint64_t)(uintptr_t)&mine, "mma.sync m16n8k16", site);
    float A[16][16], B[16][8];
    bn_emu_mma_gather<bn_emu_mma16_frags, 2>(slot, A, B, bn_mma16_a_k, bn_mma16_b_k, [](uint32_t w, int j) {
        return bn_h2f(bn_half_bits((uint16_t)(w >> (16 * j))));
    });
    const int lane = (int)bn_emu::cur->lane;
    float out[4];
    for (int r = 0; r < 4; r++) {
        const int row = bn_mma_c_row(lane, r), col = bn_mma_c_col(lane, r);
        double acc = mine.c[r];
        for (int k = 0; k < 16; k++) acc += (double)A[row][k] * (double)B[k][col];
        out[r] = (float)acc;
    }
    bn_emu::warp_exchange(0xffffffffu, 0, "mma.sync m16n8k16 (end)", site);
    memcpy(d, out, sizeof out);
}

#include "cuda/emu/emu_cublas.h"
#endif
