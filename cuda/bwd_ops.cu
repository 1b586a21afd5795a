// cuda/bwd_ops.cu — backward kernels of the GPU trainer: norms, elementwise ops, RoPE and the GDN causal conv
// (cuda/cuda_bwd_ops.h; the same formulas as train/backward.c and train/backward_gdn.c, docs/model.md §8).
#include "cuda/common.cuh"
#include "cuda/fwd.cuh"
#include "cuda/cuda_bwd_ops.h"
#include "cuda/train_ops.cuh"

// ---- norms ----------------------------------------------------------------------------------------

// weight_or_one: w[i], or 1 when there is no weight.
static BN_DEVICE float weight_or_one(const float *w, int i) { return w ? w[i] : 1.0f; }

// rmsnorm_bwd_kernel: one block per row; dx += ρ(g − x·ρ·mean(g ⊙ x·ρ)) with g = dy ⊙ w, ρ = (mean x² + eps)^-½.
static __global__ void rmsnorm_bwd_kernel(const float *x, const float *w, int n, float eps, const float *dy,
                                          float *dx) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f, dot = 0.0f; // Σx², Σg·x
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float xi = x[off + i];
        sum_sq += xi * xi;
        dot += dy[off + i] * weight_or_one(w, i) * xi;
    }
    sum_sq = bn_block_sum(sum_sq, red);
    dot = bn_block_sum(dot, red);
    const float rho = 1.0f / sqrtf(sum_sq / (float)n + eps);
    const float mean_gx = dot * rho / (float)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float g = dy[off + i] * weight_or_one(w, i);
        dx[off + i] += rho * (g - x[off + i] * rho * mean_gx);
    }
}

extern "C" int bn_cuda_rmsnorm_bwd(const float *x, const float *w, int n, int rows, float eps, const float *dy,
                                   float *dx, void *stream, char *err, size_t errlen) {
    if (!dx || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(rmsnorm_bwd_kernel, rows, row_threads(n), 0, stream, x, w, n, eps, dy, dx);
    return launched(err, errlen);
}

// l2norm_bwd_kernel: one block per row; dx += (dy − y(y·dy))·r with y = x·r, r = (Σx² + eps)^-½.
static __global__ void l2norm_bwd_kernel(const float *x, int n, float eps, const float *dy, float *dx) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f, xdy = 0.0f; // Σx², Σx·dy
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float xi = x[off + i];
        sum_sq += xi * xi;
        xdy += xi * dy[off + i];
    }
    sum_sq = bn_block_sum(sum_sq, red);
    xdy = bn_block_sum(xdy, red);
    const float r = 1.0f / sqrtf(sum_sq + eps);
    const float ydy = xdy * r;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dx[off + i] += (dy[off + i] - x[off + i] * r * ydy) * r;
}

extern "C" int bn_cuda_l2norm_bwd(const float *x, int n, int rows, float eps, const float *dy, float *dx,
                                  void *stream, char *err, size_t errlen) {
    if (!dx || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(l2norm_bwd_kernel, rows, row_threads(n), 0, stream, x, n, eps, dy, dx);
    return launched(err, errlen);
}

// gated_rmsnorm_bwd_kernel: one block per row of y = w ⊙ o·ρ ⊙ SiLU(z); dz += dy ⊙ w ⊙ o·ρ ⊙ SiLU'(z) and
// dout += the RMSNorm backward of g = dy ⊙ SiLU(z) ⊙ w (either may be NULL).
static __global__ void gated_rmsnorm_bwd_kernel(const float *o, const float *z, const float *w, int n, float eps,
                                                const float *dy, float *dout, float *dz) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const size_t off = (size_t)blockIdx.x * n;
    float sum_sq = 0.0f, dot = 0.0f; // Σo², Σg·o
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float oi = o[off + i], zi = z[off + i];
        sum_sq += oi * oi;
        dot += dy[off + i] * (zi * bn_cu_sigmoid(zi)) * weight_or_one(w, i) * oi;
    }
    sum_sq = bn_block_sum(sum_sq, red);
    dot = bn_block_sum(dot, red);
    const float rho = 1.0f / sqrtf(sum_sq / (float)n + eps);
    const float mean_go = dot * rho / (float)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float oi = o[off + i], zi = z[off + i], sg = bn_cu_sigmoid(zi), wi = weight_or_one(w, i);
        if (dz) dz[off + i] += dy[off + i] * wi * oi * rho * (sg * (1.0f + zi * (1.0f - sg)));
        if (dout) dout[off + i] += rho * (dy[off + i] * (zi * sg) * wi - oi * rho * mean_go);
    }
}

extern "C" int bn_cuda_gated_rmsnorm_bwd(const float *o, const float *z, const float *w, int n, int rows, float eps,
                                         const float *dy, float *dout, float *dz, void *stream, char *err,
                                         size_t errlen) {
    if ((!dout && !dz) || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(gated_rmsnorm_bwd_kernel, rows, row_threads(n), 0, stream, o, z, w, n, eps, dy, dout, dz);
    return launched(err, errlen);
}

// row_rho_kernel: one block per row of n: rho[row] = (mean x² + eps)^-½.
static __global__ void row_rho_kernel(const float *x, int n, float eps, float *rho) {
    bn_cu_grid_begin();
    BN_SHARED(float, red, 32);
    const float sum_sq = row_sum_sq(x + (size_t)blockIdx.x * n, n, red);
    if (threadIdx.x == 0) rho[blockIdx.x] = 1.0f / sqrtf(sum_sq / (float)n + eps);
}

// norm_wgrad_kernel: one thread per column i: dw[i] += Σ_rows dy·x·rho (·SiLU(z) when z is given), rows in order
// (the CPU's order: no atomics, the same sum on every run).
static __global__ void norm_wgrad_kernel(const float *x, const float *z, const float *rho, int n, int rows,
                                         const float *dy, float *dw) {
    bn_cu_grid_begin();
    const int i = (int)elt_index();
    if (i >= n) return;
    float acc = dw[i];
    for (int t = 0; t < rows; t++) {
        const size_t at = (size_t)t * n + i;
        const float gate = z ? z[at] * bn_cu_sigmoid(z[at]) : 1.0f;
        acc += dy[at] * x[at] * rho[t] * gate;
    }
    dw[i] = acc;
}

// norm_wgrad: rho_scratch ← ρ of each row, then the column sums of norm_wgrad_kernel.
static int norm_wgrad(const float *x, const float *z, int n, int rows, float eps, const float *dy, float *dw,
                      float *rho_scratch, void *stream, char *err, size_t errlen) {
    if (!dw || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(row_rho_kernel, rows, row_threads(n), 0, stream, x, n, eps, rho_scratch);
    if (launched(err, errlen) < 0) return -1;
    BN_LAUNCH(norm_wgrad_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, x, z, rho_scratch, n, rows, dy, dw);
    return launched(err, errlen);
}

extern "C" int bn_cuda_rmsnorm_wgrad(const float *x, int n, int rows, float eps, const float *dy, float *dw,
                                     float *rho_scratch, void *stream, char *err, size_t errlen) {
    return norm_wgrad(x, nullptr, n, rows, eps, dy, dw, rho_scratch, stream, err, errlen);
}

extern "C" int bn_cuda_gated_rmsnorm_wgrad(const float *o, const float *z, int n, int rows, float eps,
                                           const float *dy, float *dw, float *rho_scratch, void *stream, char *err,
                                           size_t errlen) {
    return norm_wgrad(o, z, n, rows, eps, dy, dw, rho_scratch, stream, err, errlen);
}

// ---- elementwise ------------------------------------------------------------------------------------

// swiglu_bwd_kernel: f = SiLU(a) ⊙ c; da += dy⊙c⊙σ(a)(1 + a(1 − σ(a))), dc += dy⊙a⊙σ(a).
static __global__ void swiglu_bwd_kernel(const float *a, const float *c, int64_t n, const float *dy, float *da,
                                         float *dc) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i >= n) return;
    const float s = bn_cu_sigmoid(a[i]);
    if (da) da[i] += dy[i] * c[i] * s * (1.0f + a[i] * (1.0f - s));
    if (dc) dc[i] += dy[i] * a[i] * s;
}

extern "C" int bn_cuda_swiglu_bwd(const float *a, const float *c, int64_t n, const float *dy, float *da, float *dc,
                                  void *stream, char *err, size_t errlen) {
    if ((!da && !dc) || n <= 0) return 0;
    BN_LAUNCH(swiglu_bwd_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, a, c, n, dy, da, dc);
    return launched(err, errlen);
}

// sigmoid_gate_bwd_kernel: o = u ⊙ σ(g); du += dy⊙σ(g), dg += dy⊙u⊙σ(g)(1 − σ(g)).
static __global__ void sigmoid_gate_bwd_kernel(const float *u, const float *g, int64_t n, const float *dy, float *du,
                                               float *dg) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i >= n) return;
    const float s = bn_cu_sigmoid(g[i]);
    if (du) du[i] += dy[i] * s;
    if (dg) dg[i] += dy[i] * u[i] * s * (1.0f - s);
}

extern "C" int bn_cuda_sigmoid_gate_bwd(const float *u, const float *g, int64_t n, const float *dy, float *du,
                                        float *dg, void *stream, char *err, size_t errlen) {
    if ((!du && !dg) || n <= 0) return 0;
    BN_LAUNCH(sigmoid_gate_bwd_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, u, g, n, dy, du, dg);
    return launched(err, errlen);
}

// sigmoid_bwd_kernel: β = σ(b); db += dβ·β(1 − β).
static __global__ void sigmoid_bwd_kernel(const float *beta, int64_t n, const float *dbeta, float *db) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i < n) db[i] += dbeta[i] * beta[i] * (1.0f - beta[i]);
}

extern "C" int bn_cuda_sigmoid_bwd(const float *beta, int64_t n, const float *dbeta, float *db, void *stream,
                                   char *err, size_t errlen) {
    if (!db || n <= 0) return 0;
    BN_LAUNCH(sigmoid_bwd_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, beta, n, dbeta, db);
    return launched(err, errlen);
}

// gdn_gate_bwd_kernel: g = softplus(a + dt)·ssm_a over count = rows·n elements (head h = i mod n);
// da += dg·ssm_a·σ(a + dt).
static __global__ void gdn_gate_bwd_kernel(const float *a, const float *dt, const float *ssm_a, int n, int64_t count,
                                           const float *dg, float *da) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i >= count) return;
    const int h = (int)(i % n);
    da[i] += dg[i] * ssm_a[h] * bn_cu_sigmoid(a[i] + dt[h]);
}

extern "C" int bn_cuda_gdn_gate_bwd(const float *a, const float *dt, const float *ssm_a, int n, int rows,
                                    const float *dg, float *da, void *stream, char *err, size_t errlen) {
    const int64_t count = (int64_t)n * rows;
    if (!da || n <= 0 || rows <= 0) return 0;
    BN_LAUNCH(gdn_gate_bwd_kernel, elt_blocks(count), TRAIN_ELT_THREADS, 0, stream, a, dt, ssm_a, n, count, dg, da);
    return launched(err, errlen);
}

// scale_bwd_kernel: y = s·x; dx += s·dy.
static __global__ void scale_bwd_kernel(float s, int64_t n, const float *dy, float *dx) {
    bn_cu_grid_begin();
    const int64_t i = elt_index();
    if (i < n) dx[i] += s * dy[i];
}

extern "C" int bn_cuda_scale_bwd(float s, int64_t n, const float *dy, float *dx, void *stream, char *err,
                                 size_t errlen) {
    if (!dx || n <= 0) return 0;
    BN_LAUNCH(scale_bwd_kernel, elt_blocks(n), TRAIN_ELT_THREADS, 0, stream, s, n, dy, dx);
    return launched(err, errlen);
}

// ---- RoPE -------------------------------------------------------------------------------------------

// rope_bwd_kernel: one thread per element of dy {head_dim·n_heads, T}: dx += R_−θ dy at position pos0 + t, the
// first n_rot dims of each head rotated back (θ_i = pos·theta_scale^i by repeated multiplication, as
// train/backward.c's bn_rope_inplace), the rest passed through.
static __global__ void rope_bwd_kernel(const float *dy, int head_dim, int n_heads, int64_t count, int n_rot, int pos0,
                                       float theta_scale, bool neox, float *dx) {
    bn_cu_grid_begin();
    const int64_t idx = elt_index();
    if (idx >= count) return;
    const int64_t row = (int64_t)head_dim * n_heads;
    const int t = (int)(idx / row), j = (int)(idx % row % head_dim); // token, dim within the head
    const int half = n_rot / 2;
    if (j >= 2 * half) {
        dx[idx] += dy[idx];
        return;
    }
    const bool first = neox ? j < half : j % 2 == 0;          // the pair's first element (i0) or its second (i1)
    const int i = neox ? (first ? j : j - half) : j / 2;      // pair index
    const int partner = neox ? (first ? j + half : j - half) : (first ? j + 1 : j - 1);
    const float theta = rope_theta(pos0 + t, i, theta_scale);
    const float c = cosf(theta), s = sinf(theta), other = dy[idx - j + partner];
    // R_−θ: i0' = a·c + b·sin θ, i1' = b·c − a·sin θ
    dx[idx] += first ? dy[idx] * c + other * s : dy[idx] * c - other * s;
}

extern "C" int bn_cuda_rope_bwd(const float *dy, int head_dim, int n_heads, int T, int n_rot, int pos0, float base,
                                int mode, float *dx, void *stream, char *err, size_t errlen) {
    const int64_t count = (int64_t)head_dim * n_heads * T;
    if (!dx || count <= 0) return 0;
    if (rope_args_ok("rope_bwd", head_dim, n_rot, mode, err, errlen) < 0) return -1;
    const float theta_scale = rope_theta_scale(base, n_rot);
    BN_LAUNCH(rope_bwd_kernel, elt_blocks(count), TRAIN_ELT_THREADS, 0, stream, dy, head_dim, n_heads, count, n_rot,
              pos0, theta_scale, mode == BN_CUDA_ROPE_NEOX, dx);
    return launched(err, errlen);
}

// ---- causal depthwise conv + SiLU (GDN) ---------------------------------------------------------------
// The trainer's own forward (train/backward_gdn.c's layout and summation order, a NULL state allowed) rather than
// gdn.cu's inference conv, which is fused with the q/k norms and advances the window in place: the backward
// recomputes the pre-activations with the same conv_pre as the forward.

// conv_input: channel ch of the extended input at index e (0..K−2: the state, zeros without one; then mix rows).
static BN_DEVICE float conv_input(const float *mix, const float *state0, int C, int K, int e, int ch) {
    if (e < K - 1) return state0 ? state0[(size_t)ch * (K - 1) + e] : 0.0f;
    return mix[(size_t)(e - (K - 1)) * C + ch];
}

// conv_pre: the pre-activation Σ_i w[ch, i]·input(t + i, ch) of token t, channel ch (taps 0..K−1 from zero).
static BN_DEVICE float conv_pre(const float *mix, const float *state0, const float *w, int C, int K, int t, int ch) {
    float c = 0.0f;
    for (int i = 0; i < K; i++) c += w[(size_t)ch * K + i] * conv_input(mix, state0, C, K, t + i, ch);
    return c;
}

// conv_fwd_kernel: one thread per element of out {C, T}: SiLU of the pre-activation.
static __global__ void conv_fwd_kernel(const float *mix, const float *state0, const float *w, int C, int K,
                                       int64_t count, float *out) {
    bn_cu_grid_begin();
    const int64_t idx = elt_index();
    if (idx >= count) return;
    const float c = conv_pre(mix, state0, w, C, K, (int)(idx / C), (int)(idx % C));
    out[idx] = c * bn_cu_sigmoid(c);
}

// conv_state_kernel: one thread per channel: state_out[ch] = the last K−1 inputs. Entry i reads input T + i, at
// index >= i of an aliased state0, so the copy in increasing i may overwrite state0 in place.
static __global__ void conv_state_kernel(const float *mix, const float *state0, int C, int K, int T,
                                         float *state_out) {
    bn_cu_grid_begin();
    const int ch = (int)elt_index();
    if (ch >= C) return;
    for (int i = 0; i < K - 1; i++) state_out[(size_t)ch * (K - 1) + i] = conv_input(mix, state0, C, K, T + i, ch);
}

// conv_shape_ok: 0 when 1 <= K <= BN_CU_MAX_CONV_K, else -1 with err.
static int conv_shape_ok(int K, char *err, size_t errlen) {
    if (K >= 1 && K <= BN_CU_MAX_CONV_K) return 0;
    if (err && errlen) snprintf(err, errlen, "cuda: conv1d: K %d outside 1..%d", K, BN_CU_MAX_CONV_K);
    return -1;
}

extern "C" int bn_cuda_conv1d_silu_fwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                                       float *out, float *state_out, void *stream, char *err, size_t errlen) {
    if (conv_shape_ok(K, err, errlen) < 0) return -1;
    if (C <= 0 || T < 0) return 0;
    const int64_t count = (int64_t)C * T;
    if (count > 0) {
        BN_LAUNCH(conv_fwd_kernel, elt_blocks(count), TRAIN_ELT_THREADS, 0, stream, mix, state0, w, C, K, count, out);
        if (launched(err, errlen) < 0) return -1;
    }
    if (!state_out || K == 1) return 0;
    BN_LAUNCH(conv_state_kernel, elt_blocks(C), TRAIN_ELT_THREADS, 0, stream, mix, state0, C, K, T, state_out);
    return launched(err, errlen);
}

// conv_bwd_kernel: one thread per (extended input index e < T + K − 1, channel): the sum over the taps i of
// w[ch, i]·dc(e − i), dc(t) = dout(t)·SiLU'(pre(t)), added to dmix (e >= K − 1) or dstate0 (e < K − 1).
static __global__ void conv_bwd_kernel(const float *mix, const float *state0, const float *w, int C, int K, int T,
                                       int64_t count, const float *dout, float *dmix, float *dstate0) {
    bn_cu_grid_begin();
    const int64_t idx = elt_index();
    if (idx >= count) return;
    const int e = (int)(idx / C), ch = (int)(idx % C);
    float sum = 0.0f;
    for (int i = 0; i < K; i++) {
        const int t = e - i;
        if (t < 0 || t >= T) continue;
        const float c = conv_pre(mix, state0, w, C, K, t, ch), s = bn_cu_sigmoid(c);
        sum += w[(size_t)ch * K + i] * (dout[(size_t)t * C + ch] * s * (1.0f + c * (1.0f - s)));
    }
    if (e >= K - 1) {
        if (dmix) dmix[(size_t)(e - (K - 1)) * C + ch] += sum;
    } else if (dstate0) {
        dstate0[(size_t)ch * (K - 1) + e] += sum;
    }
}

extern "C" int bn_cuda_conv1d_silu_bwd(const float *mix, const float *state0, const float *w, int C, int K, int T,
                                       const float *dout, float *dmix, float *dstate0, void *stream, char *err,
                                       size_t errlen) {
    if (conv_shape_ok(K, err, errlen) < 0) return -1;
    if ((!dmix && !dstate0) || C <= 0 || T <= 0) return 0;
    const int64_t count = (int64_t)C * (T + K - 1);
    BN_LAUNCH(conv_bwd_kernel, elt_blocks(count), TRAIN_ELT_THREADS, 0, stream, mix, state0, w, C, K, T, count, dout,
              dmix, dstate0);
    return launched(err, errlen);
}
