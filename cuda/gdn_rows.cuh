// cuda/gdn_rows.cuh — the delta rule on one row of S held by a warp in registers (lane l: elements l, l + 32, ...
// of the row), shared by the forward's recurrence (cuda/gdn.cu) and the trainer's (cuda/bwd_gdn.cu). Include after
// "cuda/common.cuh".
#ifndef BONSAI_CUDA_GDN_ROWS_CUH
#define BONSAI_CUDA_GDN_ROWS_CUH

// rec_row_step: one token of the delta rule on a row of S held by a warp (lane l: elements l, l + 32, ... of r, REGS
// of them: dk <= 32·REGS): decay by alpha, u = row·k, row += beta (v − u) k; returns row·q (on every lane).
template <int REGS>
static __device__ __forceinline__ float rec_row_step(float (&r)[REGS], const float *k, const float *q, float alpha,
                                                     float beta, float v, int lane, int dk) {
    float u = 0.0f;
#pragma unroll
    for (int m = 0; m < REGS; m++) {
        const int i = lane + 32 * m;
        r[m] *= alpha;
        if (i < dk) u += r[m] * k[i];
    }
    u = bn_warp_reduce_sum(u);
    const float delta = beta * (v - u);
    float o = 0.0f;
#pragma unroll
    for (int m = 0; m < REGS; m++) {
        const int i = lane + 32 * m;
        if (i < dk) {
            r[m] += delta * k[i];
            o += r[m] * q[i];
        }
    }
    return bn_warp_reduce_sum(o);
}

// rec_row_load: a warp's row registers (rec_row_step's layout) from src {dk}; zeros where src is NULL (no row).
template <int REGS>
static __device__ __forceinline__ void rec_row_load(float (&r)[REGS], const float *src, int lane, int dk) {
#pragma unroll
    for (int m = 0; m < REGS; m++) {
        const int i = lane + 32 * m;
        r[m] = src && i < dk ? src[i] : 0.0f;
    }
}

// rec_row_store: the row registers into dst {dk} (S, or a snapshot of it).
template <int REGS>
static __device__ __forceinline__ void rec_row_store(float *dst, const float (&r)[REGS], int lane, int dk) {
#pragma unroll
    for (int m = 0; m < REGS; m++) {
        const int i = lane + 32 * m;
        if (i < dk) dst[i] = r[m];
    }
}

#endif
