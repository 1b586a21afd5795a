// cuda/attention.cu — KV-cache append and causal attention (flash-decoding: the keys of each query are
// split into ranges processed by separate blocks with an online softmax, then merged; the query heads
// of one KV head share a block so each K/V row is read once per group; for prefill, optionally, query tiles
// sharing each K/V tile) for the CUDA forward; docs/model.md §4.2 / §7, same math as core/ops.c bn_attention_head.
// Contracts in cuda/fwd.cuh.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/mm_impl.cuh" // bn_q8_store: attn_output's Q8 activations written by the merge
#include "cuda/mma.cuh"     // bn_mma_f16_16x8x16 (attn_mma_kernel)

#define ATT_THREADS 128
#define ATT_TILE 128 // keys scored per pass (shared scores)
#define ACC_REGS (BN_CU_MAX_HEAD_DIM / ATT_THREADS)
#define ATT_MAX_G 8  // query heads per block sharing one KV head (larger GQA groups: one head per block)

// KV element loads (fp32 or fp16 cache)
static __device__ __forceinline__ float kv_load(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float kv_load(const bn_half *p, size_t i) { return bn_h2f(p[i]); }
static __device__ __forceinline__ void kv_store(float *p, size_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void kv_store(bn_half *p, size_t i, float v) { p[i] = bn_f2h(v); }

// attn_prep_kernel: block (head, token): heads [0, nh) are queries (normed + rotated in place),
// [nh, nh + nkv) keys (normed + rotated into the cache, with the matching v row).
template <typename KV>
static __global__ void attn_prep_kernel(float *qg, int q_stride, int head_stride, const float *kb, const float *vb,
                                        KV *k_cache, KV *v_cache, int nh, int hd, int kv_dim, const float *q_norm,
                                        const float *k_norm, float eps, int n_rot, float theta_scale, bool neox,
                                        const int *d_pos, bn_cu_cols cols) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    BN_DYN_SHARED(float, v);
    const int h = blockIdx.x, t = blockIdx.y, pos = cols.pos ? cols.pos[t] : d_pos[0] + t;
    if (cols.pos) k_cache = (KV *)cols.k[t], v_cache = (KV *)cols.v[t];
    const bool is_q = h < nh;
    const int j = h - nh; // key head
    float *q = qg + (size_t)t * q_stride + (size_t)h * head_stride;
    const float *src = is_q ? q : kb + (size_t)t * kv_dim + (size_t)j * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) v[d] = src[d];
    __syncthreads();
    bn_head_norm_rope(v, is_q ? q_norm : k_norm, eps, hd, n_rot, theta_scale, neox, pos, red);
    if (is_q) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) q[d] = v[d];
        return;
    }
    const size_t dst = (size_t)pos * kv_dim + (size_t)j * hd, vsrc = (size_t)t * kv_dim + (size_t)j * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        kv_store(k_cache, dst + d, v[d]);
        kv_store(v_cache, dst + d, vb[vsrc + d]);
    }
}

cudaError_t bn_cu_attn_prep(float *qg, int q_stride, int head_stride, const float *kb, const float *vb, void *k_cache,
                            void *v_cache, bool kv_f16, int nh, int nkv, int hd, const float *q_norm,
                            const float *k_norm, float eps, int n_rot, float theta_scale, bool neox, int nb,
                            const int *d_pos, cudaStream_t s, const bn_cu_cols *cols) {
    const bn_cu_cols cl = cols ? *cols : bn_cu_cols{};
    dim3 grid(nh + nkv, nb);
    const size_t smem = sizeof(float) * hd;
    const int kv_dim = nkv * hd;
    if (kv_f16)
        BN_LAUNCH(attn_prep_kernel<bn_half>, grid, ATT_THREADS, smem, s, qg, q_stride, head_stride, kb, vb,
                  (bn_half *)k_cache, (bn_half *)v_cache, nh, hd, kv_dim, q_norm, k_norm, eps, n_rot, theta_scale, neox,
                  d_pos, cl);
    else
        BN_LAUNCH(attn_prep_kernel<float>, grid, ATT_THREADS, smem, s, qg, q_stride, head_stride, kb, vb,
                  (float *)k_cache, (float *)v_cache, nh, hd, kv_dim, q_norm, k_norm, eps, n_rot, theta_scale, neox,
                  d_pos, cl);
    return cudaGetLastError();
}

// Scratch layout per (token t, head h, split sp), index r = (t*nh + h)*n_splits + sp:
// acc {hd} at scratch + r*hd (unnormalised Σ p·V), then max m and sum l at the end.
size_t bn_cu_attention_scratch_floats(int nh, int hd, int nb, int n_splits) {
    return (size_t)nb * nh * n_splits * (hd + 2);
}

// attn_split_kernel: block (G query heads h0.. sharing one KV head, token t, split sp): online
// softmax over the split's keys; each K/V row is read once for the G heads (GQA).
template <typename KV>
static __global__ void attn_split_kernel(float *scratch, const float *qg, int q_stride, int head_stride, const KV *K,
                                         const KV *V, int nh, int group, int G, int hd, int kv_dim, float scale, int nb,
                                         const int *d_pos, int n_splits, bn_cu_cols cols) {
    bn_cu_grid_begin();
    BN_SHARED(float, sc, ATT_MAX_G * ATT_TILE); // scores, then probabilities: [g][key]
    BN_DYN_SHARED(float, qs);                   // {hd, G}
    const int h0 = blockIdx.x * G, t = blockIdx.y, sp = blockIdx.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    const int n_kv = (cols.pos ? cols.pos[t] : d_pos[0] + t) + 1;
    if (cols.pos) K = (const KV *)cols.k[t], V = (const KV *)cols.v[t];
    const int per = (n_kv + n_splits - 1) / n_splits;
    const int k0 = sp * per, k1 = min(n_kv, k0 + per);
    const size_t kv_off = (size_t)(h0 / group) * hd;
    const float *q = qg + (size_t)t * q_stride + (size_t)h0 * head_stride;
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qs[i] = q[(size_t)(i / hd) * head_stride + i % hd];
    __syncthreads();

    float m[ATT_MAX_G], l[ATT_MAX_G], acc[ATT_MAX_G][ACC_REGS];
#pragma unroll
    for (int g = 0; g < ATT_MAX_G; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int a = 0; a < ACC_REGS; a++) acc[g][a] = 0.0f;
    }
    for (int tau0 = k0; tau0 < k1; tau0 += ATT_TILE) {
        const int nt = min(ATT_TILE, k1 - tau0);
        for (int kk = warp; kk < nt; kk += n_warps) { // one warp per key, lanes over dims
            const KV *krow = K + (size_t)(tau0 + kk) * kv_dim + kv_off;
            float dot[ATT_MAX_G];
#pragma unroll
            for (int g = 0; g < ATT_MAX_G; g++) dot[g] = 0.0f;
            for (int d = lane; d < hd; d += 32) {
                const float kd = kv_load(krow, d);
#pragma unroll
                for (int g = 0; g < ATT_MAX_G; g++)
                    if (g < G) dot[g] += qs[g * hd + d] * kd;
            }
#pragma unroll
            for (int g = 0; g < ATT_MAX_G; g++) {
                if (g >= G) break; // G is uniform over the block
                const float sum = bn_warp_reduce_sum(dot[g]);
                if (lane == 0) sc[g * ATT_TILE + kk] = scale * sum;
            }
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < ATT_MAX_G; g++) {
            if (g >= G) break;
            float tile_max = -INFINITY;
            for (int kk = 0; kk < nt; kk++) tile_max = fmaxf(tile_max, sc[g * ATT_TILE + kk]);
            const float m_new = fmaxf(m[g], tile_max);
            const float corr = expf(m[g] - m_new); // 0 on the first tile (m = -inf)
            l[g] *= corr;
#pragma unroll
            for (int a = 0; a < ACC_REGS; a++) acc[g][a] *= corr;
            m[g] = m_new;
        }
        __syncthreads(); // every thread has its maxima before the scores become probabilities
#pragma unroll
        for (int g = 0; g < ATT_MAX_G; g++) { // g constant after unrolling: m[] stays in registers
            if (g >= G) break;
            for (int kk = threadIdx.x; kk < nt; kk += blockDim.x) sc[g * ATT_TILE + kk] = expf(sc[g * ATT_TILE + kk] - m[g]);
        }
        __syncthreads();
        for (int kk = 0; kk < nt; kk++) {
            const KV *vrow = V + (size_t)(tau0 + kk) * kv_dim + kv_off;
#pragma unroll
            for (int a = 0; a < ACC_REGS; a++) {
                const int d = threadIdx.x + a * ATT_THREADS;
                if (d >= hd) continue;
                const float vd = kv_load(vrow, d);
#pragma unroll
                for (int g = 0; g < ATT_MAX_G; g++)
                    if (g < G) acc[g][a] += sc[g * ATT_TILE + kk] * vd;
            }
        }
#pragma unroll
        for (int g = 0; g < ATT_MAX_G; g++)
            if (g < G)
                for (int kk = 0; kk < nt; kk++) l[g] += sc[g * ATT_TILE + kk];
        __syncthreads(); // sc is rewritten by the next tile
    }
#pragma unroll
    for (int g = 0; g < ATT_MAX_G; g++) {
        if (g >= G) break;
        const size_t r = ((size_t)t * nh + h0 + g) * n_splits + sp;
        float *out = scratch + r * hd;
#pragma unroll
        for (int a = 0; a < ACC_REGS; a++) {
            const int d = threadIdx.x + a * ATT_THREADS;
            if (d < hd) out[d] = acc[g][a];
        }
        if (threadIdx.x == 0) {
            float *ml = scratch + (size_t)nb * nh * n_splits * hd + 2 * r;
            ml[0] = m[g];
            ml[1] = l[g];
        }
    }
}

// ---- prefill: query tiles ------------------------------------------------------------------------------
// tile_out_row: the output row (token · nh + query head) of row `row` of a query tile from token t0 (rows are
// (token t0 + row / group, query head kvh·group + row % group)): where the tiled kernels leave its Σ p·V and m, l.
static __device__ __forceinline__ size_t tile_out_row(int t0, int row, int group, int nh, int kvh) {
    return (size_t)(t0 + row / group) * nh + (size_t)kvh * group + row % group;
}

// tile_softmax: one online-softmax step of a row over a key tile, the row's scores spread over LANES xor-adjacent
// lanes of J each (sc: scaled, -inf where masked; srow: the row is real). store(j, p) keeps probability j and returns
// the value P·V will use (p, or its fp16 rounding), which l sums. Updates the row's m and l (every lane the same);
// returns c = exp(m_old - m_new), the rescale of the row's running output (0 on padding rows).
template <int J, int LANES, class Store>
static __device__ __forceinline__ float tile_softmax(const float (&sc)[J], bool srow, float &m, float &l, Store store) {
    float tmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < J; j++) tmax = fmaxf(tmax, sc[j]);
    for (int o = 1; o < LANES; o <<= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
    const float m_new = fmaxf(m, tmax); // finite on real rows: key 0 is in every row's first tile
    const float c = srow ? expf(m - m_new) : 0.0f;
    float ps = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++) ps += store(j, srow ? expf(sc[j] - m_new) : 0.0f);
    for (int o = 1; o < LANES; o <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
    if (srow) l = l * c + ps, m = m_new;
    return c;
}

// attn_tiled_kernel (bn_cu_attention with tiled, one key split): block (KV head kvh, tile of QT query tokens from
// t0 = blockIdx.y·QT); its rows r < R = (tokens in the tile)·group are (token t0 + r / group, query head
// kvh·group + r % group). The keys [0, last row's position] stream through shared memory AT_KT at a time, K
// then V in the same buffer, each tile read once for all R rows (the per-token kernel above reads it once per
// token). Scores: thread (row tid / 8, keys 4·(tid % 8)..+3 of the tile), dot over hd with its row of q (read
// through L1, shared by the row's 8 lanes) and the K tile (rows padded by one float: the 8 key groups of a warp
// hit 8 banks); causal mask, the online softmax over the row's 8 lanes (xor shuffles). P·V: thread (dim tid %
// hd, rows tid / hd + i·(AT_THREADS / hd)). Output: the per-token kernel's scratch with one split (unnormalised
// Σ p·V, max m, sum l), merged by attn_merge_kernel as before. Needs AT_THREADS % hd == 0 and group <= AT_ROWS.
#define AT_THREADS 256
#define AT_KT 32   // keys per tile
#define AT_ROWS 32 // query rows per block (AT_THREADS / 8 score rows)
static_assert(AT_ROWS * 8 == AT_THREADS && AT_KT == 4 * 8, "score layout: 8 lanes x 4 keys per row");

// attn_tiles: whether attn_tiled_kernel takes this head size and GQA group.
static bool attn_tiles(int hd, int group) {
    return hd >= 8 && hd <= BN_CU_MAX_HEAD_DIM && AT_THREADS % hd == 0 && group >= 1 && group <= AT_ROWS;
}

template <typename KV>
static __global__ void attn_tiled_kernel(float *scratch, const float *qg, int q_stride, int head_stride, const KV *K,
                                         const KV *V, int nh, int group, int QT, int hd, int kv_dim, float scale,
                                         int nb, const int *d_pos) {
    bn_cu_grid_begin();
    BN_SHARED(float, kv, AT_KT * (BN_CU_MAX_HEAD_DIM + 1)); // the K tile, then the V tile: [key][hd + 1]
    BN_SHARED(float, pr, AT_ROWS * AT_KT);                  // probabilities [row][key]
    BN_SHARED(float, corr, AT_ROWS);                        // each row's rescale of its running output
    const int kvh = blockIdx.x, t0 = blockIdx.y * QT, tid = threadIdx.x;
    const int n_tok = min(QT, nb - t0), R = n_tok * group, ld = hd + 1;
    const int p0 = d_pos[0];
    const size_t kv_off = (size_t)kvh * hd;
    // score phase: row sr, keys 4·kg..4·kg+3 of each tile
    const int sr = tid >> 3, kg = tid & 7;
    const bool srow = sr < R;
    const int s_tok = srow ? sr / group : 0, s_pos = p0 + t0 + s_tok;
    const float *q = qg + (size_t)(t0 + s_tok) * q_stride + (size_t)(kvh * group + (srow ? sr % group : 0)) * head_stride;
    float m = -INFINITY, l = 0.0f;
    // P·V phase: dim pd, rows pr0 + i·RS
    const int RS = AT_THREADS / hd, pd = tid % hd, pr0 = tid / hd;
    float acc[AT_ROWS];
#pragma unroll
    for (int i = 0; i < AT_ROWS; i++) acc[i] = 0.0f;
    const int kend = p0 + t0 + n_tok; // keys [0, kend): up to the tile's last position
    for (int k0 = 0; k0 < kend; k0 += AT_KT) {
        const int nk = min(AT_KT, kend - k0);
        for (int i = tid; i < nk * hd; i += AT_THREADS)
            kv[(i / hd) * ld + i % hd] = kv_load(K + (size_t)(k0 + i / hd) * kv_dim + kv_off, i % hd);
        __syncthreads();
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (srow)
            for (int d = 0; d < hd; d++) {
                const float qd = q[d];
#pragma unroll
                for (int j = 0; j < 4; j++) a[j] += qd * kv[(4 * kg + j) * ld + d];
            }
        float sc[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int kk = 4 * kg + j;
            sc[j] = srow && kk < nk && k0 + kk <= s_pos ? scale * a[j] : -INFINITY;
        }
        const float c = tile_softmax<4, 8>(sc, srow, m, l, [&](int j, float p) {
            pr[sr * AT_KT + 4 * kg + j] = p;
            return p;
        });
        if (kg == 0) corr[sr] = c;
        __syncthreads(); // probabilities and rescales written; the K tile is no longer read
        for (int i = tid; i < nk * hd; i += AT_THREADS)
            kv[(i / hd) * ld + i % hd] = kv_load(V + (size_t)(k0 + i / hd) * kv_dim + kv_off, i % hd);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < AT_ROWS; i++) {
            const int row = pr0 + i * RS;
            if (i * RS >= AT_ROWS || row >= R) continue;
            float v = acc[i] * corr[row];
            for (int kk = 0; kk < nk; kk++) v += pr[row * AT_KT + kk] * kv[kk * ld + pd];
            acc[i] = v;
        }
        __syncthreads(); // the next tile overwrites kv, pr and corr
    }
    float *ml = scratch + (size_t)nb * nh * hd;
#pragma unroll
    for (int i = 0; i < AT_ROWS; i++) {
        const int row = pr0 + i * RS;
        if (i * RS >= AT_ROWS || row >= R) continue;
        scratch[tile_out_row(t0, row, group, nh, kvh) * hd + pd] = acc[i];
    }
    if (srow && kg == 0) {
        const size_t r = tile_out_row(t0, sr, group, nh, kvh);
        ml[2 * r] = m;
        ml[2 * r + 1] = l;
    }
}

// ---- prefill attention on the tensor cores (BONSAI_CUDA_ATTN_TILED=mma) -------------------------------------------
// attn_mma_kernel: attn_tiled_kernel's blocks, rows and output (one split for attn_merge_kernel), with the two products
// on mma.sync m16n8k16 (fp16 inputs, fp32 sums; cuda/mma.cuh): per 32-key tile, S = Q·Kᵀ (32 rows × 32 keys over HD)
// and O += P·V (32 rows × HD over the tile's keys). 4 warps; warp w holds rows 16·(w & 1)..+15. S: warp w the keys
// 16·wh..+15, wh = w >> 1 (two 8-key MMA columns), through shared scores; the online softmax as in the tiled kernel (4 lanes
// per row, 8 keys each; probabilities rounded to fp16 before they are summed, so l matches what P·V adds); O: warp w
// the dims (HD/2)·wh..+HD/2 in registers (HD/16 accumulator tiles). Q is rounded to fp16 once (llama.cpp's
// flash attention does the same); K and V tiles are rounded on their way to shared memory (exact for an fp16 cache).
// Shared: Q [32][HD + 8], the K tile [32][HD + 8] then the V tile transposed [HD][40] in one buffer (the padding puts
// the 8 rows a fragment load touches on distinct banks), scores [32][33], probabilities [32][40]: 44 KB at HD 256.
#define AM_THREADS 128
#define AM_ROWS 32
#define AM_KT 32
#define AM_QLD(HD) ((HD) + 8)
#define AM_VLD 40

// am_word: the two halves at p (p 4-byte aligned) as one fragment register, element 0 in the low bits.
static __device__ __forceinline__ uint32_t am_word(const bn_half *p) {
#if defined(BONSAI_CUDA_EMU)
    if ((uintptr_t)p % 4 != 0) bn_emu::misaligned("32-bit load of two halves", p, 4);
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
#else
    return *(const uint32_t *)p;
#endif
}

template <typename KV, int HD>
static __global__ void __launch_bounds__(AM_THREADS)
    attn_mma_kernel(float *scratch, const float *qg, int q_stride, int head_stride, const KV *K, const KV *V, int nh,
                    int group, int QT, int kv_dim, float scale, int nb, const int *d_pos) {
    bn_cu_grid_begin();
    constexpr int QLD = AM_QLD(HD), KV_HALVES = AM_KT * QLD > HD * AM_VLD ? AM_KT * QLD : HD * AM_VLD, NT = HD / 16;
    BN_SHARED(bn_half, qs, AM_ROWS * QLD);
    BN_SHARED(bn_half, kvs, KV_HALVES);
    BN_SHARED(float, ss, AM_ROWS * (AM_KT + 1));
    BN_SHARED(bn_half, ps, AM_ROWS * AM_VLD);
    BN_SHARED(float, corr, AM_ROWS);
    const int kvh = blockIdx.x, t0 = blockIdx.y * QT, tid = threadIdx.x;
    const int n_tok = min(QT, nb - t0), R = n_tok * group;
    const int p0 = d_pos[0];
    const size_t kv_off = (size_t)kvh * HD;
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3, rt = warp & 1, wh = warp >> 1;
    for (int i = tid; i < AM_ROWS * HD; i += AM_THREADS) {
        const int r = i / HD, d = i % HD;
        float v = 0.0f;
        if (r < R)
            v = qg[(size_t)(t0 + r / group) * q_stride + (size_t)(kvh * group + r % group) * head_stride + d];
        qs[r * QLD + d] = bn_f2h(v);
    }
    // softmax: row sr, keys 8·kg..8·kg+7 of each tile
    const int sr = tid >> 2, kg = tid & 3;
    const bool srow = sr < R;
    const int s_pos = p0 + t0 + (srow ? sr / group : 0);
    float m = -INFINITY, l = 0.0f;
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    const int kend = p0 + t0 + n_tok; // keys [0, kend)
    for (int k0 = 0; k0 < kend; k0 += AM_KT) {
        const int nk = min(AM_KT, kend - k0);
        for (int i = tid; i < AM_KT * HD; i += AM_THREADS) {
            const int key = i / HD, d = i % HD;
            kvs[key * QLD + d] = key < nk ? bn_f2h(kv_load(K + (size_t)(k0 + key) * kv_dim + kv_off, d)) : bn_f2h(0.0f);
        }
        __syncthreads(); // Q (first tile) and the K tile are in place
        {
            float sc[2][4];
#pragma unroll
            for (int c = 0; c < 2; c++) sc[c][0] = sc[c][1] = sc[c][2] = sc[c][3] = 0.0f;
            const bn_half *qa = qs + (16 * rt + g) * QLD + 2 * t;
#pragma unroll 4
            for (int kk = 0; kk < HD; kk += 16) {
                const uint32_t a[4] = {am_word(qa + kk), am_word(qa + 8 * QLD + kk), am_word(qa + kk + 8),
                                       am_word(qa + 8 * QLD + kk + 8)};
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const bn_half *kb = kvs + (16 * wh + 8 * c + g) * QLD + 2 * t + kk;
                    const uint32_t b[2] = {am_word(kb), am_word(kb + 8)};
                    bn_mma_f16_16x8x16(sc[c], a, b, sc[c]);
                }
            }
#pragma unroll
            for (int c = 0; c < 2; c++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    ss[(16 * rt + bn_mma_c_row(lane, r)) * (AM_KT + 1) + 16 * wh + 8 * c + bn_mma_c_col(lane, r)] =
                        sc[c][r];
        }
        __syncthreads(); // scores written; the K tile is no longer read
        for (int i = tid; i < AM_KT * HD; i += AM_THREADS) { // the V tile, transposed: [dim][key]
            const int key = i / HD, d = i % HD;
            kvs[d * AM_VLD + key] = key < nk ? bn_f2h(kv_load(V + (size_t)(k0 + key) * kv_dim + kv_off, d)) : bn_f2h(0.0f);
        }
        {
            float sv[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int kk = 8 * kg + j;
                sv[j] = srow && kk < nk && k0 + kk <= s_pos ? scale * ss[sr * (AM_KT + 1) + kk] : -INFINITY;
            }
            const float c = tile_softmax<8, 4>(sv, srow, m, l, [&](int j, float p) {
                const bn_half ph = bn_f2h(p);
                ps[sr * AM_VLD + 8 * kg + j] = ph;
                return bn_h2f(ph);
            });
            if (kg == 0) corr[sr] = c;
        }
        __syncthreads(); // probabilities, rescales and the V tile in place
        {
            const float c_lo = corr[16 * rt + g], c_hi = corr[16 * rt + g + 8];
            const bn_half *pa = ps + (16 * rt + g) * AM_VLD + 2 * t;
#pragma unroll
            for (int j = 0; j < NT; j++) o[j][0] *= c_lo, o[j][1] *= c_lo, o[j][2] *= c_hi, o[j][3] *= c_hi;
#pragma unroll
            for (int kk = 0; kk < AM_KT; kk += 16) {
                const uint32_t a[4] = {am_word(pa + kk), am_word(pa + 8 * AM_VLD + kk), am_word(pa + kk + 8),
                                       am_word(pa + 8 * AM_VLD + kk + 8)};
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const bn_half *vb = kvs + ((HD / 2) * wh + 8 * j + g) * AM_VLD + 2 * t + kk;
                    const uint32_t b[2] = {am_word(vb), am_word(vb + 8)};
                    bn_mma_f16_16x8x16(o[j], a, b, o[j]);
                }
            }
        }
        __syncthreads(); // the next tile overwrites kvs, ss, ps and corr
    }
    float *ml = scratch + (size_t)nb * nh * HD;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int row = 16 * rt + bn_mma_c_row(lane, r), d = (HD / 2) * wh + 8 * j + bn_mma_c_col(lane, r);
            if (row >= R) continue;
            scratch[tile_out_row(t0, row, group, nh, kvh) * HD + d] = o[j][r];
        }
    if (srow && kg == 0) {
        const size_t ri = tile_out_row(t0, sr, group, nh, kvh);
        ml[2 * ri] = m;
        ml[2 * ri + 1] = l;
    }
}

// attn_mma: launches attn_mma_kernel for head size HD; false when HD has no instantiation.
template <typename KV>
static bool attn_mma(int hd, dim3 grid, cudaStream_t s, float *scratch, const float *qg, int q_stride, int head_stride,
                     const KV *K, const KV *V, int nh, int group, int QT, int kv_dim, float scale, int nb,
                     const int *d_pos) {
    switch (hd) {
#define AM_CASE(H)                                                                                                     \
    case H:                                                                                                            \
        BN_LAUNCH((attn_mma_kernel<KV, H>), grid, AM_THREADS, 0, s, scratch, qg, q_stride, head_stride, K, V, nh, group, \
                  QT, kv_dim, scale, nb, d_pos);                                                                       \
        return true;
        AM_CASE(32)
        AM_CASE(64)
        AM_CASE(128)
        AM_CASE(256)
#undef AM_CASE
    default: return false;
    }
}

// attn_merge_kernel: block (head h, token t): merges the splits, normalises, applies the gate (Q8: also out's Q8
// activations; hd % 32 == 0, so each warp holds whole 32-element units or no element at all).
template <bool Q8>
static __global__ void attn_merge_kernel(float *out, const float *scratch, const float *qg, int q_stride, int head_stride,
                                         bool gated, int nh, int hd, int nb, int n_splits, bn_q8_out q8) {
    bn_cu_grid_begin();
    const int h = blockIdx.x, t = blockIdx.y;
    const size_t r0 = ((size_t)t * nh + h) * n_splits;
    const float *ml = scratch + (size_t)nb * nh * n_splits * hd + 2 * r0;
    float m = -INFINITY;
    for (int sp = 0; sp < n_splits; sp++) m = fmaxf(m, ml[2 * sp]);
    float l = 0.0f;
    for (int sp = 0; sp < n_splits; sp++) l += ml[2 * sp + 1] * expf(ml[2 * sp] - m);
    const float inv = 1.0f / l;
    const float *gate = qg + (size_t)t * q_stride + (size_t)h * head_stride + hd;
    float *o = out + (size_t)t * nh * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float sum = 0.0f;
        for (int sp = 0; sp < n_splits; sp++) sum += scratch[(r0 + sp) * hd + d] * expf(ml[2 * sp] - m);
        float v = sum * inv;
        if (gated) v *= bn_cu_sigmoid(gate[d]);
        o[d] = v;
        if (Q8) bn_q8_store(v, (int64_t)t * nh * hd + (int64_t)h * hd + d, q8);
    }
}

cudaError_t bn_cu_attention(float *out, const float *qg, int q_stride, int head_stride, bool gated, const void *K,
                            const void *V, bool kv_f16, int nh, int nkv, int hd, float scale, int nb,
                            const int *d_pos, int n_splits, float *scratch, cudaStream_t s, const bn_q8_out *q8,
                            const bn_cu_cols *cols, int tiled) {
    if (q8 && hd % 32) return cudaErrorInvalidValue;
    const bn_cu_cols cl = cols ? *cols : bn_cu_cols{};
    const int group = nh / nkv, kv_dim = nkv * hd;
    const int G = group <= ATT_MAX_G ? group : 1; // query heads per block
    dim3 grid(nh / G, nb, n_splits);
    const size_t smem = sizeof(float) * hd * G;
    const bool tiles = tiled && n_splits == 1 && nb > 1 && !cl.pos && attn_tiles(hd, group);
    const int QT = AT_ROWS / group; // query tokens per block (AM_ROWS = AT_ROWS)
    dim3 tgrid(nkv, (nb + QT - 1) / QT);
    if (tiles && tiled == BN_CU_ATTN_MMA &&
        (kv_f16 ? attn_mma(hd, tgrid, s, scratch, qg, q_stride, head_stride, (const bn_half *)K, (const bn_half *)V, nh,
                           group, QT, kv_dim, scale, nb, d_pos)
                : attn_mma(hd, tgrid, s, scratch, qg, q_stride, head_stride, (const float *)K, (const float *)V, nh,
                           group, QT, kv_dim, scale, nb, d_pos))) {
    } else if (tiles) {
        if (kv_f16)
            BN_LAUNCH(attn_tiled_kernel<bn_half>, tgrid, AT_THREADS, 0, s, scratch, qg, q_stride, head_stride,
                      (const bn_half *)K, (const bn_half *)V, nh, group, QT, hd, kv_dim, scale, nb, d_pos);
        else
            BN_LAUNCH(attn_tiled_kernel<float>, tgrid, AT_THREADS, 0, s, scratch, qg, q_stride, head_stride,
                      (const float *)K, (const float *)V, nh, group, QT, hd, kv_dim, scale, nb, d_pos);
    } else if (kv_f16)
        BN_LAUNCH(attn_split_kernel<bn_half>, grid, ATT_THREADS, smem, s, scratch, qg, q_stride, head_stride,
                  (const bn_half *)K, (const bn_half *)V, nh, group, G, hd, kv_dim, scale, nb, d_pos, n_splits, cl);
    else
        BN_LAUNCH(attn_split_kernel<float>, grid, ATT_THREADS, smem, s, scratch, qg, q_stride, head_stride,
                  (const float *)K, (const float *)V, nh, group, G, hd, kv_dim, scale, nb, d_pos, n_splits, cl);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dim3 grid2(nh, nb);
    if (q8)
        BN_LAUNCH(attn_merge_kernel<true>, grid2, ATT_THREADS, 0, s, out, scratch, qg, q_stride, head_stride, gated, nh,
                  hd, nb, n_splits, *q8);
    else
        BN_LAUNCH(attn_merge_kernel<false>, grid2, ATT_THREADS, 0, s, out, scratch, qg, q_stride, head_stride, gated, nh,
                  hd, nb, n_splits, bn_q8_out{});
    return cudaGetLastError();
}
