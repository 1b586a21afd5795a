// cuda/train_ops.cuh — internal to the GPU trainer's ops (cuda/bwd_ops.cu, cuda/fwd_ops.cu; include after
// "cuda/common.cuh"): launch shapes, the launch check and the RoPE angle of train/backward.c's bn_rope_inplace.
// File-local (static) in each including file.
#ifndef BONSAI_CUDA_TRAIN_OPS_CUH
#define BONSAI_CUDA_TRAIN_OPS_CUH
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include "cuda/cuda_bwd_ops.h" // BN_CUDA_ROPE_NEOX, BN_CUDA_ROPE_NORM

#define TRAIN_ELT_THREADS 256
#define TRAIN_ROW_THREADS_MAX 256

// row_threads: block size of a one-block-per-row kernel: n rounded up to whole warps, at most TRAIN_ROW_THREADS_MAX.
static inline int row_threads(int n) {
    const int t = (n + 31) / 32 * 32;
    return t < 32 ? 32 : t > TRAIN_ROW_THREADS_MAX ? TRAIN_ROW_THREADS_MAX : t;
}

// elt_blocks: blocks of TRAIN_ELT_THREADS covering count elements.
static inline int elt_blocks(int64_t count) { return (int)((count + TRAIN_ELT_THREADS - 1) / TRAIN_ELT_THREADS); }

// elt_index: this thread's element of a one-thread-per-element launch.
static BN_DEVICE int64_t elt_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }

// launched: 0 when the kernel just enqueued was accepted, else -1 with err.
static inline int launched(char *err, size_t errlen) {
    BN_CUDA_TRY(cudaGetLastError(), err, errlen);
    return 0;
}

// row_sum_sq: Σ row[i]² over a row of n, summed by the whole block (every thread gets it; red: 32 floats of shared
// memory).
static BN_DEVICE float row_sum_sq(const float *row, int n, float *red) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += row[i] * row[i];
    return bn_block_sum(s, red);
}

// ---- RoPE -------------------------------------------------------------------------------------------

// rope_theta_scale: base^(−2/n_rot), the ratio of consecutive pair angles (host powf, as train/backward.c).
static inline float rope_theta_scale(float base, int n_rot) { return powf(base, -2.0f / (float)n_rot); }

// rope_theta: the angle of pair i at position pos, pos·theta_scale^i by repeated multiplication (bn_rope_inplace's
// float power series, so the device angles are the CPU's).
static BN_DEVICE float rope_theta(int pos, int i, float theta_scale) {
    float theta = (float)pos;
    for (int k = 0; k < i; k++) theta *= theta_scale;
    return theta;
}

// rope_args_ok: 0 when 0 <= n_rot <= head_dim and mode is BN_CUDA_ROPE_NEOX or BN_CUDA_ROPE_NORM, else -1 with err
// naming the op.
static inline int rope_args_ok(const char *op, int head_dim, int n_rot, int mode, char *err, size_t errlen) {
    if (n_rot >= 0 && n_rot <= head_dim && (mode == BN_CUDA_ROPE_NEOX || mode == BN_CUDA_ROPE_NORM)) return 0;
    if (err && errlen) snprintf(err, errlen, "cuda: %s: bad n_rot %d (head_dim %d) or mode %d", op, n_rot, head_dim,
                                mode);
    return -1;
}

#endif
