// cuda/mmq_tc.cu — the low-bit weights (Q1_0, Q2_0, PQ2_0; GGUF and planar layouts) × Q8 activations on int8
// tensor cores, for nb BN_CU_MMA_MIN_NB..BN_CU_MMVQ_KERNEL_MAX_NB columns (DSpark verify, the drafter's block,
// small prefill chunks): the mmvq path's arithmetic (cuda/mmvq.cu: the same Q8 activations, the same exact
// integer per (row, column, 32-element unit), scales in fp32) with the integer dots done by
// mma.sync m16n8k32 (cuda/mma.cuh) instead of 8 dp4a per (row, column, unit).
//
// Layout: a block of MMA_WARPS warps owns MT·16 consecutive rows (MT 2, 1 at G 4); warp w takes a contiguous
// range of the row's chunks (split-K; a chunk = 16 payload bytes of a row with one scale: 4 Q1_0 units, 2 Q2_0 /
// PQ2_0 units), each lane loading its rows' chunks with one 16-byte load each (rows g and g + 8 of each tile,
// g = lane / 4, t = lane % 4). Per unit of the chunk it decodes the A fragments of its MT 16-row tiles once (ints
// t and 4 + t of the unit in the activation order) and reuses them for G column groups of 8: per group one B
// fragment (column g of the group: the same two ints of the column's Q8 unit) and MT MMAs. The MMA's C operand
// is the float-bias constant (BN_I2F_BIAS, cuda/mm_impl.cuh) so that the per-unit integer turns into a float with
// one add:
//   Q1_0: A holds the sign bits as 0/1, C = BIAS/2: 2·D − Σq = BIAS + Σ ±q  (the dp4a path's 2·lo + (hi >> 3))
//   Q2_0 / PQ2_0: A holds the codes 0..3, C = BIAS: D − Σq = BIAS + Σ (code − 1)·q
// then acc += (d_w · d_x) · unbias(...), as the dp4a path does; the warps' partial sums are added in shared
// memory in warp order. So the results equal the dp4a kernels' up to the fp32 summation order.
#include "cuda/mm_impl.cuh"
#include "cuda/mma.cuh"
#include <atomic>
extern "C" {
#include "base/util.h"
}

// Overridable at build time for the GPU comparison (notes/cuda-mm.md): warps per block (split-K over the row's
// units) and 16-row tiles per warp (MMA_MT 2: 32 rows per block share each B fragment and activation scale load).
#ifndef MMA_WARPS
#define MMA_WARPS 4
#endif
#ifndef MMA_MT
#define MMA_MT 2
#endif

// tc_wunit<T>: a row's weights a chunk of U consecutive units at a time: load() reads the chunk's 16 payload bytes
// (4 words: one 16-byte load in the planar layouts; lanes of one group read the same bytes) and returns its one
// fp16 scale (U is chosen so that a chunk has one); frag() gives the two A-fragment ints of unit k of the chunk for
// lane position t (ints t and 4 + t of the unit in the type's activation order, cuda/mm_impl.cuh bn_act_order);
// C_INIT is the MMA's C, biased(D, Σq) the float-biased exact integer dot of a unit.
template <int T> struct tc_wunit;

// tc_chunk16: the 4 words at p (16-byte aligned: one load) or at a 2-byte aligned GGUF address.
template <bool ALIGNED> __device__ __forceinline__ void tc_chunk16(const uint8_t *p, uint32_t (&w)[4]) {
    if (ALIGNED) {
        const uint4 v = bn_ldg_weight((const uint4 *)p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = bn_ld32_a2(p + 4 * i);
    }
}

// Q1_0: a unit is one word, int i of the slice8 order is (w >> i) & 0x01010101 (bit i of each byte); a chunk is
// one block of 128 (4 units, 16 bytes; GGUF: after the block's scale, planar: word 4c.. and scale c of the tail).
template <bool PLANAR> struct tc_q1 {
    static constexpr int U = 4, C_INIT = BN_I2F_BIAS / 2;
    static __device__ __forceinline__ int biased(int d, int sumq) { return 2 * d - sumq; }
    static __device__ __forceinline__ float load(const uint8_t *row, int c, int64_t ne0, uint32_t (&w)[4]) {
        const uint8_t *b = PLANAR ? row + 16 * c : row + 18 * c + 2, *d = PLANAR ? row + ne0 / 8 + 2 * c : b - 2;
        tc_chunk16<PLANAR>(b, w);
        return bn_ldh(d);
    }
    static __device__ __forceinline__ void frag(const uint32_t (&w)[4], int k, int t, int (&q)[2]) {
        q[0] = (int)((w[k] >> t) & 0x01010101u), q[1] = (int)((w[k] >> (t + 4)) & 0x01010101u);
    }
};
template <> struct tc_wunit<BN_CU_Q1_0> : tc_q1<false> {};
template <> struct tc_wunit<BN_CU_Q1_0_P> : tc_q1<true> {};

// Q2_0 (g64) / PQ2_0 (g128): a unit is two words (h = 0, 1), int 4h + j of the slice4 order is (w_h >> 2j) &
// 0x03030303 (code j of each byte); a chunk is 2 units (16 bytes: one Q2_0 block, half a PQ2_0 block).
template <int BLCK, int BYTES, bool PLANAR> struct tc_q2 {
    static constexpr int U = 2, C_INIT = BN_I2F_BIAS;
    static __device__ __forceinline__ int biased(int d, int sumq) { return d - sumq; }
    static __device__ __forceinline__ float load(const uint8_t *row, int c, int64_t ne0, uint32_t (&w)[4]) {
        constexpr int per = BLCK / 64; // chunks per block
        const uint8_t *blk = row + (c / per) * BYTES;
        const uint8_t *b = PLANAR ? row + 16 * c : blk + 2 + 16 * (c % per);
        const uint8_t *d = PLANAR ? row + ne0 / 4 + 2 * (c / per) : blk;
        tc_chunk16<PLANAR>(b, w);
        return bn_ldh(d);
    }
    static __device__ __forceinline__ void frag(const uint32_t (&w)[4], int k, int t, int (&q)[2]) {
        q[0] = (int)((w[2 * k] >> 2 * t) & 0x03030303u), q[1] = (int)((w[2 * k + 1] >> 2 * t) & 0x03030303u);
    }
};
template <> struct tc_wunit<BN_CU_Q2_0> : tc_q2<64, 18, false> {};
template <> struct tc_wunit<BN_CU_PQ2_0> : tc_q2<128, 34, false> {};
template <> struct tc_wunit<BN_CU_Q2_0_P> : tc_q2<64, 18, true> {};
template <> struct tc_wunit<BN_CU_PQ2_0_P> : tc_q2<128, 34, true> {};

// mmq_tc: G column groups of 8 (nb <= 8·G), MT 16-row tiles per warp, MMA_WARPS warps per block splitting the
// units; output column c of weight row r: y[c·ne1 + r]. __launch_bounds__(128, 3): <= 170 registers (without the
// minimum ptxas put some G 4 variants at 128 with spills; sm_90 now: 94-168 registers, no spills, cuda/resources.sh).
template <int T, int G, int MT>
static __global__ void __launch_bounds__(32 * MMA_WARPS, 3)
    mmq_tc(bn_mmvq_targets tg, int64_t ne0, const int8_t *aqs, const bn_q8_ds *ads, int nb) {
    bn_cu_grid_begin();
    constexpr int ROWS = 16 * MT, COLS = 8 * G;
    BN_SHARED(float, red, MMA_WARPS * ROWS * COLS);
    const bn_mmvq_job j = bn_mmvq_target<ROWS>(tg);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    using W = tc_wunit<T>;
    const int nunits = (int)(ne0 / 32), nchunks = nunits / W::U; // ne0 is a multiple of the block: no partial chunk
    const int c_begin = warp * nchunks / MMA_WARPS, c_end = (warp + 1) * nchunks / MMA_WARPS;
    const uint8_t *rows[MT][2]; // this lane's rows g and g + 8 of each tile (a tail block re-reads the last row)
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t r = j.row0 + 16 * m + 8 * h + g;
            rows[m][h] = j.w + (r < j.ne1 ? r : j.ne1 - 1) * j.row_bytes;
        }
    float acc[G][MT][4] = {};
    const int c_init[4] = {W::C_INIT, W::C_INIT, W::C_INIT, W::C_INIT};
    for (int ch = c_begin; ch < c_end; ch++) {
        uint32_t raw[MT][2][4];
        float dw[MT][2];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) dw[m][h] = W::load(rows[m][h], ch, ne0, raw[m][h]);
#pragma unroll
        for (int k = 0; k < W::U; k++) {
            const int u = ch * W::U + k;
            int a[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int q[2];
                    W::frag(raw[m][h], k, t, q);
                    a[m][h] = q[0], a[m][2 + h] = q[1]; // a0/a2: row g, k 4t.. / 16 + 4t..; a1/a3: row g + 8
                }
#pragma unroll
            for (int gr = 0; gr < G; gr++) {
                const int cb = 8 * gr + g; // the B column of this lane
                int b[2] = {0, 0};
                if (cb < nb) {
                    const int8_t *col = aqs + (int64_t)cb * ne0;
                    b[0] = *(const int *)(col + bn_act_byte(ne0, u, 4 * t));
                    b[1] = *(const int *)(col + bn_act_byte(ne0, u, 16 + 4 * t));
                }
                bn_q8_ds dx[2]; // the D columns of this lane: 8·gr + 2t + i
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int c = 8 * gr + 2 * t + i;
                    dx[i] = c < nb ? ads[(int64_t)c * nunits + u] : bn_q8_ds{0.0f, 0};
                }
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    int d[4];
                    bn_mma_s8_16x8x32(d, a[m], b, c_init);
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        acc[gr][m][r] += (dw[m][r >> 1] * dx[r & 1].d) * bn_unbias_f(W::biased(d[r], dx[r & 1].sum));
                }
            }
        }
    }
    // block reduction: every warp's partial sums in shared memory, added in warp order
    float *mine = red + warp * ROWS * COLS;
#pragma unroll
    for (int gr = 0; gr < G; gr++)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                mine[(16 * m + bn_mma_c_row(lane, r)) * COLS + 8 * gr + bn_mma_c_col(lane, r)] = acc[gr][m][r];
    __syncthreads();
    for (int i = threadIdx.x; i < ROWS * COLS; i += 32 * MMA_WARPS) {
        const int r = i / COLS, c = i % COLS;
        float sum = 0.0f;
        for (int w = 0; w < MMA_WARPS; w++) sum += red[w * ROWS * COLS + i];
        if (c < nb && j.row0 + r < j.ne1) j.y[(int64_t)c * j.ne1 + j.row0 + r] = sum;
    }
}

template <int T, int G>
static cudaError_t launch_tc(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                             cudaStream_t s) {
    constexpr int MT = G >= 4 ? 1 : MMA_MT; // G 4 at MT 2: Q1_0 spilled under the 170-register bound
    const bn_mmvq_targets tg = bn_mmvq_make_targets(w, y, n, 16 * MT);
    if (tg.first_block[n] == 0) return cudaSuccess;
    BN_LAUNCH((mmq_tc<T, G, MT>), dim3(tg.first_block[n]), dim3(32 * MMA_WARPS), 0, s, tg, w[0]->ne0, act->qs, act->ds,
              nb);
    return cudaGetLastError();
}

template <int T>
static cudaError_t launch_tc_nb(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                                cudaStream_t s) {
    if (nb <= 8) return launch_tc<T, 1>(w, y, n, act, nb, s);
    if (nb <= 16) return launch_tc<T, 2>(w, y, n, act, nb, s);
    if (nb <= 24) return launch_tc<T, 3>(w, y, n, act, nb, s);
    return launch_tc<T, 4>(w, y, n, act, nb, s);
}

// Whether bn_cu_mmq_tc_supports routes products to the tensor cores (cleared by cuda/mma_check.cu's decision).
static std::atomic<bool> g_tc_enabled{true};

void bn_cu_mmq_tc_enable(bool on) { g_tc_enabled.store(on, std::memory_order_relaxed); }

bool bn_cu_mmq_tc_enabled(void) { return BN_CU_MMA && g_tc_enabled.load(std::memory_order_relaxed); }

// tc_takes: true when the tensor-core kernels handle this weight type at nb (whether or not they are enabled).
static bool tc_takes(int type, int nb) {
    return BN_CU_MMA && bn_cu_low_bit(type) && nb >= BN_CU_MMA_MIN_NB && nb <= BN_CU_MMVQ_KERNEL_MAX_NB;
}

bool bn_cu_mmq_tc_supports(int type, int nb) { return tc_takes(type, nb) && bn_cu_mmq_tc_enabled(); }

// tc_launch: launch_tc_nb for w[0]'s type (nb 1..BN_CU_MMVQ_KERNEL_MAX_NB); cudaErrorInvalidValue for other types.
static cudaError_t tc_launch(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                             cudaStream_t s) {
    switch (w[0]->type) {
    case BN_CU_Q1_0: return launch_tc_nb<BN_CU_Q1_0>(w, y, n, act, nb, s);
    case BN_CU_Q2_0: return launch_tc_nb<BN_CU_Q2_0>(w, y, n, act, nb, s);
    case BN_CU_PQ2_0: return launch_tc_nb<BN_CU_PQ2_0>(w, y, n, act, nb, s);
    case BN_CU_Q1_0_P: return launch_tc_nb<BN_CU_Q1_0_P>(w, y, n, act, nb, s);
    case BN_CU_Q2_0_P: return launch_tc_nb<BN_CU_Q2_0_P>(w, y, n, act, nb, s);
    case BN_CU_PQ2_0_P: return launch_tc_nb<BN_CU_PQ2_0_P>(w, y, n, act, nb, s);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t bn_cu_mmq_tc(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                         cudaStream_t s) {
    if (n < 1 || n > BN_CU_MATMUL_MULTI_MAX || !tc_takes(w[0]->type, nb)) return cudaErrorInvalidValue;
    return tc_launch(w, y, n, act, nb, s);
}

cudaError_t bn_cu_mmq_tc_chunks(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, int nb,
                                cudaStream_t s) {
    if (n < 1 || n > BN_CU_MATMUL_MULTI_MAX || nb < 1 || !tc_takes(w[0]->type, BN_CU_MMVQ_KERNEL_MAX_NB))
        return cudaErrorInvalidValue;
    const int64_t ne0 = w[0]->ne0, nunits = ne0 / 32;
    const int chunks = (nb + BN_CU_MMVQ_KERNEL_MAX_NB - 1) / BN_CU_MMVQ_KERNEL_MAX_NB;
    for (int k = 0, c0 = 0; k < chunks; k++) { // chunk k: columns [c0, c0 + cols), sizes differing by at most 1
        const int cols = nb / chunks + (k < nb % chunks ? 1 : 0);
        const bn_q8_act part = {act->qs + c0 * ne0, act->ds + c0 * nunits};
        float *yc[BN_CU_MATMUL_MULTI_MAX];
        for (int i = 0; i < n; i++) yc[i] = y[i] + (int64_t)c0 * w[i]->ne1;
        const cudaError_t e = tc_launch(w, yc, n, &part, cols, s);
        if (e != cudaSuccess) return e;
        c0 += cols;
    }
    return cudaSuccess;
}

// The prefill switch: -1 until the first query reads BONSAI_CUDA_MMQ_PREFILL, then 0 / 1.
static std::atomic<int> g_mmq_prefill{-1};

void bn_cu_mmq_prefill_enable(bool on) { g_mmq_prefill.store(on ? 1 : 0, std::memory_order_relaxed); }

bool bn_cu_mmq_prefill_enabled(void) {
    int on = g_mmq_prefill.load(std::memory_order_relaxed);
    if (on < 0) {
        int expected = -1;
        g_mmq_prefill.compare_exchange_strong(expected, bn_env_is("BONSAI_CUDA_MMQ_PREFILL", "1") ? 1 : 0);
        on = g_mmq_prefill.load(std::memory_order_relaxed);
    }
    return on == 1;
}

bool bn_cu_mmq_prefill(const bn_cu_weight *const *w, int n, int nb) {
    if (!bn_cu_mmq_prefill_enabled() || nb <= BN_CU_MMVQ_MAX_NB || !bn_cu_mmq_tc_enabled() || n < 1) return false;
    for (int i = 0; i < n; i++)
        if (!tc_takes(w[i]->type, BN_CU_MMVQ_KERNEL_MAX_NB)) return false;
    return true;
}
