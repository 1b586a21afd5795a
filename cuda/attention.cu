// cuda/attention.cu — KV-cache append and causal attention (flash-decoding: the keys of each query are
// split into ranges processed by separate blocks with an online softmax, then merged; the query heads
// of one KV head share a block so each K/V row is read once per group) for the CUDA
// forward; MODEL.md §4.2 / §7, same math as core/ops.c bn_attention_head. Contracts in cuda/fwd.cuh.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/mm_impl.cuh" // bn_q8_store: attn_output's Q8 activations written by the merge

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

// attn_merge_kernel: block (head h, token t): merges the splits, normalises, applies the gate (Q8: also out's Q8
// activations; hd % 32 == 0, so each warp holds whole 32-element units or no element at all).
template <bool Q8>
static __global__ void attn_merge_kernel(float *out, const float *scratch, const float *qg, int q_stride, int head_stride,
                                         bool gated, int nh, int hd, int nb, int n_splits, bn_q8_out q8) {
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
                            const bn_cu_cols *cols) {
    if (q8 && hd % 32) return cudaErrorInvalidValue;
    const bn_cu_cols cl = cols ? *cols : bn_cu_cols{};
    const int group = nh / nkv, kv_dim = nkv * hd;
    const int G = group <= ATT_MAX_G ? group : 1; // query heads per block
    dim3 grid(nh / G, nb, n_splits);
    const size_t smem = sizeof(float) * hd * G;
    if (kv_f16)
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
