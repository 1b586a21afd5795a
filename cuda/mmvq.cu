// cuda/mmvq.cu — the decode / small-batch matrix kernels (nb <= BN_CU_MMVQ_KERNEL_MAX_NB): every weight row
// is read once for all nb activation columns. Quantized weights: activations quantized per 32 to Q8
// (ggml-cuda's rule) in the weight type's element order, exact integer dp4a dots per 32 elements,
// scales in fp32. F32/F16/BF16 weights: fp32 FMAs on the fp32 activations.
//
// Layout: a block of 32·W threads (W = mmvq_warps(), 1..MMVQ_MAX_WARPS, chosen so the row's units split
// evenly) owns R consecutive rows; its threads stride over the row's 32-element units. Per unit a thread
// loads (and decodes) the unit of all R rows first, then for each column loads the activation unit once
// and applies it to the R rows: the decode is paid once per (row, unit), each activation load serves R
// rows. The kernels are compiled for NB (1, 2, 4, 8) columns; nb above NB (9..BN_CU_MMVQ_KERNEL_MAX_NB) runs
// as ceil(nb / 8) balanced column groups inside the same block, one after the other (the block's R rows
// are read again per group, from L1/L2). The R×NB partial sums are reduced over the warp by halving
// exchanges (R·NB − 1 + 5 − log2(R·NB) shuffles, not 5·R·NB) and over the block in shared memory.
// Low-bit types (Q1_0, Q2_0, PQ2_0: 4-8 weight bytes per 32-element unit against 40 activation bytes)
// use more rows per block (R 8 for NB <= 2, else 4) than the others; notes/cuda-mm.md has the arithmetic.
#include "cuda/mm_impl.cuh"

#define MMVQ_MAX_WARPS 8

// quantize_act: one warp per (column, 32-element unit); lane e holds element e (bn_q8_store).
__global__ void quantize_act(const float *x, int64_t ne0, int nb, int order, int8_t *qs, bn_q8_ds *ds) {
    bn_cu_grid_begin();
    int64_t nunits = ne0 / 32;
    int64_t gw = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (gw >= nunits * nb) return; // the whole warp leaves together
    const int64_t e = 32 * gw + threadIdx.x % 32; // column gw / nunits, unit gw % nunits
    bn_q8_store(x[e], e, bn_q8_out{qs, ds, order, ne0});
}

cudaError_t bn_cu_quantize_act(int type, const float *x, int64_t ne0, int nb, int8_t *qs, bn_q8_ds *ds,
                               cudaStream_t s) {
    int64_t warps = ne0 / 32 * nb;
    const int per_block = 8;
    if (warps == 0) return cudaSuccess;
    BN_LAUNCH(quantize_act, dim3((unsigned)((warps + per_block - 1) / per_block)), dim3(32 * per_block), 0, s, x, ne0,
              nb, bn_act_order(type), qs, ds);
    return cudaGetLastError();
}

// warp_reduce_many: sums each of the V (a power of two <= 32) values of v over the warp's 32 lanes by halving
// exchanges: at each step a lane keeps half of its values and sends the other half to its partner. Returns the
// warp total of value (lane >> (5 − log2 V)) & (V − 1) (every lane of such a group of 32/V lanes gets it).
template <int V> __device__ __forceinline__ float warp_reduce_many(float (&v)[V]) {
    static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "V: a power of two <= 32");
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int o = 16, n = V; n > 1; o >>= 1, n >>= 1) {
        const bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; i++) {
            const float send = upper ? v[i] : v[i + n / 2], keep = upper ? v[i + n / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float s = v[0];
#pragma unroll
    for (int o = 16 / V; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// reduce_store: sums acc[r][c] over the block and writes y[c*ne1 + row0 + r] for valid rows and columns c < nb.
// Ends with a barrier, so that the block may call it again (the next column group) with the same `red`.
template <int R, int NB>
__device__ __forceinline__ void reduce_store(float (&acc)[R][NB], float *red, float *y, int64_t ne1, int64_t row0,
                                             int nb) {
    constexpr int V = R * NB, LOG_V = V >= 32 ? 5 : V >= 16 ? 4 : V >= 8 ? 3 : V >= 4 ? 2 : V >= 2 ? 1 : 0;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v[V];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < NB; c++) v[r * NB + c] = acc[r][c];
    const float total = warp_reduce_many<V>(v);
    if (lane % (32 >> LOG_V) == 0) red[warp * V + (lane >> (5 - LOG_V))] = total;
    __syncthreads();
    int t = threadIdx.x, nwarps = blockDim.x / 32;
    if (t < V) {
        int r = t / NB, c = t % NB;
        float sum = 0.0f;
        for (int wi = 0; wi < nwarps; wi++) sum += red[wi * V + t];
        if (c < nb && row0 + r < ne1) y[(int64_t)c * ne1 + row0 + r] = sum;
    }
    __syncthreads();
}

// column_groups: nb columns in groups of at most NB: *per columns each (the last one fewer); returns the count.
__device__ __forceinline__ int column_groups(int nb, int NB, int *per) {
    int groups = (nb + NB - 1) / NB;
    *per = (nb + groups - 1) / groups;
    return groups;
}

// mmvq_q_body: quantized weights × Q8 activations; R rows per block, column groups of at most NB columns.
template <int T, int NB, int R>
__device__ __forceinline__ void mmvq_q_body(const bn_mmvq_targets &t, int64_t ne0, const int8_t *aqs,
                                            const bn_q8_ds *ads, int nb) {
    BN_SHARED(float, red, MMVQ_MAX_WARPS * R * NB);
    const bn_mmvq_job j = bn_mmvq_target<R>(t);
    const int nunits = (int)(ne0 / 32);
    int per, groups = column_groups(nb, NB, &per);
    for (int g = 0; g < groups; g++) {
        const int c0 = g * per, ncols = nb - c0 < per ? nb - c0 : per;
        const int8_t *qs = aqs + (int64_t)c0 * ne0;
        const bn_q8_ds *ds = ads + (int64_t)c0 * nunits;
        float acc[R][NB] = {};
        for (int u = threadIdx.x; u < nunits; u += blockDim.x) {
            // all R rows' loads first (the tail block re-reads its last row; only valid rows are stored), then
            // per used column one activation load for the R rows (a block-uniform branch: nb 5 skips 3 of 8)
            bn_wunit<T> wu[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                int64_t row = j.row0 + r < j.ne1 ? j.row0 + r : j.ne1 - 1;
                wu[r].load(j.w + row * j.row_bytes, u, ne0);
            }
#pragma unroll
            for (int c = 0; c < NB; c++) {
                if (NB > 1 && c >= ncols) break;
                const int8_t *col = qs + (int64_t)c * ne0;
                int4 lo = bn_ld_vec((const int4 *)(col + bn_act_byte(ne0, u, 0)));
                int4 hi = bn_ld_vec((const int4 *)(col + bn_act_byte(ne0, u, 16)));
                const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
                const bn_q8_ds dc = ds[(int64_t)c * nunits + u];
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][c] += wu[r].dot(a, dc.sum, dc.d);
            }
        }
        reduce_store<R, NB>(acc, red, j.y + (int64_t)c0 * j.ne1, j.ne1, j.row0, ncols);
    }
}

// mmvq_q: the decode kernel (NB 1), register count left to the compiler (48-64: 4-5 blocks of 256 per SM;
// a __launch_bounds__ makes ptxas use more, or spill at 5 blocks).
template <int T, int NB, int R>
__global__ void mmvq_q(bn_mmvq_targets t, int64_t ne0, const int8_t *aqs, const bn_q8_ds *ads, int nb) {
    bn_cu_grid_begin();
    mmvq_q_body<T, NB, R>(t, ne0, aqs, ads, nb);
}
// mmvq_q_multi: NB 2..8 (DSpark verify, small batches; nb 9..BN_CU_MMVQ_KERNEL_MAX_NB as column groups of the NB 8
// kernel) under __launch_bounds__(256, 2): <= 128 registers, so 2 blocks of 256 fit per SM.
template <int T, int NB, int R>
__global__ void __launch_bounds__(32 * MMVQ_MAX_WARPS, 2)
    mmvq_q_multi(bn_mmvq_targets t, int64_t ne0, const int8_t *aqs, const bn_q8_ds *ads, int nb) {
    bn_cu_grid_begin();
    mmvq_q_body<T, NB, R>(t, ne0, aqs, ads, nb);
}

// mmv_f: F32/F16/BF16 weights × fp32 activations; threads stride over single elements (coalesced); column
// groups as in mmvq_q_body.
template <int T, int NB, int R>
__global__ void mmv_f(bn_mmvq_targets t, int64_t ne0, const float *x, int nb) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, MMVQ_MAX_WARPS * R * NB);
    const bn_mmvq_job j = bn_mmvq_target<R>(t);
    int per, groups = column_groups(nb, NB, &per);
    for (int g = 0; g < groups; g++) {
        const int c0 = g * per, ncols = nb - c0 < per ? nb - c0 : per;
        const float *xg = x + (int64_t)c0 * ne0;
        float acc[R][NB] = {};
        for (int64_t k = threadIdx.x; k < ne0; k += blockDim.x) {
            float xv[NB];
#pragma unroll
            for (int c = 0; c < NB; c++) xv[c] = NB == 1 || c < ncols ? xg[(int64_t)c * ne0 + k] : 0.0f;
            float wv[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                int64_t row = j.row0 + r < j.ne1 ? j.row0 + r : j.ne1 - 1; // the tail block re-reads its last row
                wv[r] = bn_deq_elem<T>(j.w + row * j.row_bytes, k, ne0);
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < NB; c++) acc[r][c] += wv[r] * xv[c];
        }
        reduce_store<R, NB>(acc, red, j.y + (int64_t)c0 * j.ne1, j.ne1, j.row0, ncols);
    }
}

// mmvq_warps: warps per block for n work items per row (32-element units, or elements for float
// weights): the most warps (<= MMVQ_MAX_WARPS) whose last pass over the row leaves <= 1/8 of the threads idle.
static int mmvq_warps(int64_t n) {
    for (int w = MMVQ_MAX_WARPS; w > 1; w--) {
        int64_t per_pass = 32 * w, passes = (n + per_pass - 1) / per_pass;
        if ((passes * per_pass - n) * 8 <= n) return w;
    }
    return 1;
}

template <int T, int NB>
static cudaError_t launch_mmvq(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act,
                               const float *x, int nb, cudaStream_t s) {
    constexpr bool quantized = bn_cu_blck(T) >= 32;
    // rows per block: activation reuse where registers allow (each activation load serves R rows): most for the
    // low-bit types (4-8 weight bytes per unit against 40 activation bytes); at NB 8, R 4 made ptxas keep the
    // 32-value reduction of Q4_K/Q6_K/float weights on the stack, so those use R 2 / 1 there.
    constexpr bool low_bit = bn_cu_low_bit(T);
    constexpr int R = low_bit ? (NB <= 2 ? 8 : 4) : quantized ? (NB <= 4 ? 4 : 2) : NB <= 2 ? 4 : NB <= 4 ? 2 : 1;
    const bn_mmvq_targets t = bn_mmvq_make_targets(w, y, n, R);
    if (t.first_block[n] == 0) return cudaSuccess;
    int64_t ne0 = w[0]->ne0;
    dim3 grid(t.first_block[n]), block(32 * mmvq_warps(quantized ? ne0 / 32 : ne0));
    if constexpr (quantized) {
        void (*k)(bn_mmvq_targets, int64_t, const int8_t *, const bn_q8_ds *, int);
        if constexpr (NB == 1) k = mmvq_q<T, NB, R>;
        else k = mmvq_q_multi<T, NB, R>;
        BN_LAUNCH(k, grid, block, 0, s, t, ne0, act->qs, act->ds, nb);
    } else {
        void (*k)(bn_mmvq_targets, int64_t, const float *, int) = mmv_f<T, NB, R>;
        BN_LAUNCH(k, grid, block, 0, s, t, ne0, x, nb);
    }
    return cudaGetLastError();
}

struct mmvq_launch {
    const bn_cu_weight *const *w;
    float *const *y;
    int n;
    const bn_q8_act *act;
    const float *x;
    int nb;
    cudaStream_t s;
    template <int T> cudaError_t operator()() const {
        if (nb <= 1) return launch_mmvq<T, 1>(w, y, n, act, x, nb, s);
        if (nb <= 2) return launch_mmvq<T, 2>(w, y, n, act, x, nb, s);
        if (nb <= 4) return launch_mmvq<T, 4>(w, y, n, act, x, nb, s);
        return launch_mmvq<T, 8>(w, y, n, act, x, nb, s); // nb 9..: column groups of <= 8
    }
};

cudaError_t bn_cu_mmvq(const bn_cu_weight *const *w, float *const *y, int n, const bn_q8_act *act, const float *x,
                       int nb, cudaStream_t s) {
    if (nb < 1 || nb > BN_CU_MMVQ_KERNEL_MAX_NB || n < 1 || n > BN_CU_MATMUL_MULTI_MAX) return cudaErrorInvalidValue;
    return bn_cu_by_type(w[0]->type, mmvq_launch{w, y, n, act, x, nb, s});
}
