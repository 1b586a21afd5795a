// cuda/fwd_ops.cu — the GPU trainer's forward ops between the matmuls (cuda/cuda_fwd_ops.h): weights of any stored
// type as fp32 or bf16 rows, norms, elementwise ops, the GDN gates and RoPE, with the formulas of core/ops.c and
// train/backward.c. Where the inference forward already has the op with the CPU's formula (cuda/ops.cu's RMSNorm,
// gated RMSNorm, SwiGLU, adds; cuda/dequant.cu's dequantization) it is called as is.
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/mm_impl.cuh"
#include "cuda/cuda_fwd_ops.h"
#include "cuda/train_ops.cuh"

// ---- weights of any stored type -----------------------------------------------------------------------------------

// weight_view: *w = the device weight W of type with rows of ne0 elements, n_rows rows; 0, or -1 with err when the
// type is not one the device dequantizes or ne0 is not whole blocks of it.
static int weight_view(const char *op, int type, const void *W, int64_t ne0, int64_t n_rows, bn_cu_weight *w,
                       char *err, size_t errlen) {
    const int blck = bn_cu_blck(type);
    if (!bn_cu_type_supported(type) || blck <= 0 || ne0 % blck != 0) {
        if (err && errlen) snprintf(err, errlen, "cuda: %s: unsupported weight type %d or row of %lld elements", op,
                                    type, (long long)ne0);
        return -1;
    }
    *w = bn_cu_weight{W, type, ne0, n_rows, (size_t)(ne0 / blck) * (size_t)bn_cu_block_bytes(type)};
    return 0;
}

extern "C" int bn_cuda_dequant_rows(int type, const void *W, int64_t ne0, int64_t r0, int64_t n_rows, float *out,
                                    void *stream, char *err, size_t errlen) {
    bn_cu_weight w;
    if (weight_view("dequant_rows", type, W, ne0, r0 + n_rows, &w, err, errlen) < 0) return -1;
    if (ne0 <= 0 || n_rows <= 0) return 0;
    BN_CUDA_TRY(bn_cu_dequant_f32(&w, r0, n_rows, out, (cudaStream_t)stream), err, errlen);
    return 0;
}

extern "C" int bn_cuda_dequant_rows_bf16(int type, const void *W, int64_t ne0, int64_t r0, int64_t n_rows,
                                         uint16_t *out, void *stream, char *err, size_t errlen) {
    bn_cu_weight w;
    if (weight_view("dequant_rows_bf16", type, W, ne0, r0 + n_rows, &w, err, errlen) < 0) return -1;
    if (ne0 <= 0 || n_rows <= 0) return 0;
    BN_CUDA_TRY(bn_cu_dequant_bf16(&w, r0, n_rows, out, (cudaStream_t)stream), err, errlen);
    return 0;
}

extern "C" int bn_cuda_get_rows_f32(int type, const void *W, int64_t ne0, int64_t ne1, const int *ids, int n,
                                    float *out, void *stream, char *err, size_t errlen) {
    bn_cu_weight w;
    if (weight_view("get_rows_f32", type, W, ne0, ne1, &w, err, errlen) < 0) return -1;
    if (ne0 <= 0 || n <= 0) return 0;
    BN_CUDA_TRY(bn_cu_get_rows(&w, (const int32_t *)ids, out, n, (cudaStream_t)stream), err, errlen);
    return 0;
}

// ---- norms --------------------------------------------------------------------------------------------------------

extern "C" int bn_cuda_rmsnorm_fwd(const float *x, const float *w, int n, int rows, float eps, float *y, void *stream,
                                   char *err, size_t errlen) {
    if (n <= 0 || rows <= 0) return 0;
    BN_CUDA_TRY(bn_cu_rmsnorm(y, x, w, n, rows, eps, (cudaStream_t)stream), err, errlen);
    return 0;
}

// l2norm_kernel: one block per row; y = (x·r)·scale with r = 1/sqrt(Σx² + eps) (core/ops.c's bn_l2norm, then the
// scale as train/graph.c multiplies q).
static __global__ void l2norm_kernel(const float *x, int n, float eps, float scale, float *y) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    const float r = 1.0f / sqrtf(row_sum_sq(x + off, n, red) + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[off + i] = x[off + i] * r * scale;
}

extern "C" int bn_cuda_l2norm_fwd(const float *x, int n, int rows, float eps, float scale, float *y, void *stream,
                                  char *err, size_t errlen) {
    if (n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(l2norm_kernel, rows, row_threads(n), 0, stream, x, n, eps, scale, y);
    return launched(err, errlen);
}

extern "C" int bn_cuda_gated_rmsnorm_fwd(const float *o, const float *z, const float *w, int n, int rows, float eps,
                                         float *y, void *stream, char *err, size_t errlen) {
    if (n <= 0 || rows <= 0) return 0;
    BN_CUDA_TRY(bn_cu_gated_rmsnorm(y, o, z, w, n, rows, eps, (cudaStream_t)stream), err, errlen);
    return 0;
}

// ---- elementwise --------------------------------------------------------------------------------------------------

extern "C" int bn_cuda_swiglu_fwd(const float *a, const float *c, int64_t n, float *y, void *stream, char *err,
                                  size_t errlen) {
    if (n <= 0) return 0;
    BN_CUDA_TRY(bn_cu_swiglu(y, a, c, n, (cudaStream_t)stream), err, errlen);
    return 0;
}

// sigmoid_gate_kernel: y = u ⊙ σ(g) (core/ops.c's bn_sigmoid_gate).
static __global__ void sigmoid_gate_kernel(const float *u, const float *g, int64_t n, float *y) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i < n) y[i] = u[i] * bn_cu_sigmoid(g[i]);
}

extern "C" int bn_cuda_sigmoid_gate_fwd(const float *u, const float *g, int64_t n, float *y, void *stream, char *err,
                                        size_t errlen) {
    if (n <= 0) return 0;
    BN_LAUNCH(sigmoid_gate_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, u, g, n, y);
    return launched(err, errlen);
}

// gdn_gates_kernel: over count = rows·n elements (head h = i mod n): beta = σ(b), g = softplus(a + dt[h])·ssm_a[h]
// (train/graph.c's GDN gates); a NULL output is skipped.
static __global__ void gdn_gates_kernel(const float *b, const float *a, const float *dt, const float *ssm_a, int n,
                                        int64_t count, float *beta, float *g) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i >= count) return;
    const int h = (int)(i % n);
    if (beta) beta[i] = bn_cu_sigmoid(b[i]);
    if (g) g[i] = bn_cu_softplus(a[i] + dt[h]) * ssm_a[h];
}

extern "C" int bn_cuda_gdn_gates_fwd(const float *b, const float *a, const float *dt, const float *ssm_a, int n,
                                     int rows, float *beta, float *g, void *stream, char *err, size_t errlen) {
    const int64_t count = (int64_t)n * rows;
    if (n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(gdn_gates_kernel, elt_blocks(count), TRAIN_ELT_THREADS, 0, stream, b, a, dt, ssm_a, n, count, beta, g);
    return launched(err, errlen);
}

// bn_cuda_add: cuda/ops.cu's y += x on whichever input y is, after copying a into y when it is neither (a + b and
// b + a are the same float).
extern "C" int bn_cuda_add(const float *a, const float *b, int64_t n, float *y, void *stream, char *err,
                           size_t errlen) {
    if (n <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (y != a && y != b)
        BN_CUDA_TRY(cudaMemcpyAsync(y, a, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, s), err, errlen);
    BN_CUDA_TRY(bn_cu_add(y, y == b ? a : b, n, s), err, errlen);
    return 0;
}

// to_bf16_kernel: y16[i] = the bf16 bits nearest to x[i], i < n.
static __global__ void to_bf16_kernel(const float *x, int64_t n, uint16_t *y16) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i < n) y16[i] = bn_f2bf(x[i]);
}

extern "C" int bn_cuda_to_bf16(const float *x, int64_t n, uint16_t *y16, void *stream, char *err, size_t errlen) {
    if (n <= 0) return 0;
    BN_LAUNCH(to_bf16_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, x, n, y16);
    return launched(err, errlen);
}

// from_bf16_kernel: y[i] = the float of bf16 bits x16[i] (its upper half), i < n.
static __global__ void from_bf16_kernel(const uint16_t *x16, int64_t n, float *y) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i < n) y[i] = __uint_as_float((unsigned)x16[i] << 16);
}

extern "C" int bn_cuda_from_bf16(const uint16_t *x16, int64_t n, float *y, void *stream, char *err, size_t errlen) {
    if (n <= 0) return 0;
    BN_LAUNCH(from_bf16_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, x16, n, y);
    return launched(err, errlen);
}

extern "C" int bn_cuda_add_row_bias(float *y, const float *bias, int n, int rows, void *stream, char *err,
                                    size_t errlen) {
    if (n <= 0 || rows <= 0) return 0;
    BN_CUDA_TRY(bn_cu_add_bias(y, bias, n, rows, (cudaStream_t)stream), err, errlen);
    return 0;
}

extern "C" int bn_cuda_copy_cols(const float *src, int64_t src_stride, int64_t src_off, float *dst,
                                 int64_t dst_stride, int64_t dst_off, int64_t width, int rows, void *stream, char *err,
                                 size_t errlen) {
    if (width <= 0 || rows <= 0) return 0;
    const size_t f = sizeof(float);
    BN_CUDA_TRY(cudaMemcpy2DAsync(dst + dst_off, (size_t)dst_stride * f, src + src_off, (size_t)src_stride * f,
                                  (size_t)width * f, (size_t)rows, cudaMemcpyDeviceToDevice, (cudaStream_t)stream),
                err, errlen);
    return 0;
}

// ---- RoPE ---------------------------------------------------------------------------------------------------------

// rope_fwd_kernel: one thread per rotation pair i < half of each head of each token t of x {head_dim·n_heads, T},
// in place: (a, b) ← (a·cos θ − b·sin θ, b·cos θ + a·sin θ) at position pos0 + t (bn_rope_inplace, sign +1; NEOX
// pairs (i, i + half), NORM pairs (2i, 2i + 1)); dims from 2·half on are left as they are.
static __global__ void rope_fwd_kernel(float *x, int head_dim, int n_heads, int half, int64_t count, int pos0,
                                       float theta_scale, bool neox) {
    bn_cu_grid_begin();
    const int64_t idx = elt_index();
    if (idx >= count) return;
    const int i = (int)(idx % half);
    const int64_t head = idx / half; // t·n_heads + h
    float *xh = x + head * head_dim;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float theta = rope_theta(pos0 + (int)(head / n_heads), i, theta_scale);
    const float c = cosf(theta), s = sinf(theta), a = xh[i0], b = xh[i1];
    xh[i0] = a * c - b * s;
    xh[i1] = b * c + a * s;
}

extern "C" int bn_cuda_rope_fwd(float *x, int head_dim, int n_heads, int T, int n_rot, int pos0, float base, int mode,
                                void *stream, char *err, size_t errlen) {
    if (head_dim <= 0 || n_heads <= 0 || T <= 0) return 0;
    if (rope_args_ok("rope_fwd", head_dim, n_rot, mode, err, errlen) < 0) return -1;
    const int half = n_rot / 2;
    const int64_t count = (int64_t)half * n_heads * T;
    if (count == 0) return 0;
    BN_LAUNCH(rope_fwd_kernel, elt_blocks(count), TRAIN_ELT_THREADS, 0, stream, x, head_dim, n_heads, half, count,
              pos0, rope_theta_scale(base, n_rot), mode == BN_CUDA_ROPE_NEOX);
    return launched(err, errlen);
}
